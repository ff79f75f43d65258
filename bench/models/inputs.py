"""Writes a test model's first data set as .npz files (run here, with the project's venv):

    python bench/models/inputs.py MODEL_DIR OUT_DIR [--batch B]

MODEL_DIR/test_data_set_0/input_<i>.pb (ONNX TensorProtos, the model's real inputs, in the order
of the graph's non-initializer inputs) -> OUT_DIR/inputs.npz, keyed by input name; the outputs
the model's source recorded (onnxruntime's, input_<i>'s siblings output_<i>.pb) ->
OUT_DIR/expected.npz. `bolt compile --inputs` and `bolt run --inputs` read the first.

`--batch B` also writes inputs_bB.npz and expected_bB.npz: every input and output repeated B
times along axis 0 (for models whose inputs and outputs all lead with the batch and whose
samples are independent, B copies of a sample give B copies of its answer), so a batch-B run is
timed and still checked against onnxruntime's outputs."""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def tensors(files):
    out = []
    for f in files:
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        out.append((t.name, numpy_helper.to_array(t)))
    return out


def main(model_dir, out_dir, batch=None):
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    data = model_dir / "test_data_set_0"
    if not data.is_dir():
        sys.exit(f"{data}: no test data set (the model's real inputs)")
    g = onnx.load(str(model_dir / "model.onnx"), load_external_data=False).graph
    init = {i.name for i in g.initializer}
    names = [i.name for i in g.input if i.name not in init]
    order = lambda p: int(p.stem.split("_")[-1])  # noqa: E731
    inputs = tensors(sorted(data.glob("input_*.pb"), key=order))
    if len(inputs) != len(names):
        sys.exit(f"{data}: {len(inputs)} inputs, the model takes {len(names)} ({names})")
    out_dir.mkdir(parents=True, exist_ok=True)
    # The graph's names (a data set's own names may be empty).
    np.savez(out_dir / "inputs.npz", **{n: a for n, (_, a) in zip(names, inputs)})
    outs = tensors(sorted(data.glob("output_*.pb"), key=order))
    gout = [o.name for o in g.output]
    np.savez(out_dir / "expected.npz", **{n: a for n, (_, a) in zip(gout, outs)})
    if batch:
        for stem, named in (("inputs", zip(names, inputs)), ("expected", zip(gout, outs))):
            named = list(named)
            if any(a.ndim == 0 or a.shape[0] != 1 for _, (_, a) in named):
                sys.exit(f"{data}: --batch needs every input and output to lead with a batch of 1")
            np.savez(out_dir / f"{stem}_b{batch}.npz", **{n: np.repeat(a, batch, axis=0) for n, (_, a) in named})


if __name__ == "__main__":
    args = sys.argv[1:]
    b = None
    if len(args) == 4 and args[2] == "--batch" and args[3].isdigit() and int(args[3]) > 0:
        b = int(args[3])
        args = args[:2]
    if len(args) != 2:
        sys.exit(__doc__)
    main(args[0], args[1], b)
