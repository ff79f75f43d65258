#!/usr/bin/env python3
"""Models written against ONNX opsets 7 to 12, with onnxruntime CPU outputs, for the op versions
whose form changed since (attributes that became inputs, Upsample and Resize-10, Split's
sizes, BatchNormalization's `spatial`): PyTorch exported at opset 9 until 1.12, the Keras and
TensorFlow converters at 7 to 10. Each case is one directory in the ONNX backend-test layout
(see refcase.py); `index.json` lists them with the op versions each exercises and, for the
ones Bolt leaves to the host, `host: <reason substring>`.

The outputs come from onnxruntime, which implements every one of these versions itself:
nothing here is computed by Bolt's rules.
"""
import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from refcase import fresh_dir, is_fresh, write_case

F32, F16 = T.FLOAT, T.FLOAT16


def model(nodes, inputs, outputs, opset, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="gen_legacy_opsets")
    m.ir_version = 7  # takes opsets 7 to 12
    # Outputs typed as the exporters write them: element type and shape, from onnx's inference.
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.output}
    for o in m.graph.output:
        if o.name in inferred:
            o.CopyFrom(inferred[o.name])
    onnx.checker.check_model(m)
    return m


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def cases(rng):
    """name -> (model, feeds, what it exercises, host reason or None)."""
    x4 = lambda *s: rng.standard_normal(s).astype(np.float32)
    out = {}

    out["slice_opset9"] = (model(
        [h.make_node("Slice", ["x"], ["a"], starts=[1, -3], ends=[2**62, -1], axes=[1, 3]),
         h.make_node("Slice", ["x"], ["b"], starts=[0, 1, 0, 2], ends=[1, 3, 4, 5])],
        [vi("x", F32, [2, 3, 4, 6])], [vi("a", F32, None), vi("b", F32, None)], 9),
        {"x": x4(2, 3, 4, 6)}, "Slice-1: starts/ends/axes attributes, negative and past-the-end bounds", None)

    out["pad_opset9"] = (model(
        [h.make_node("Pad", ["x"], ["c"], pads=[0, 0, 1, 2, 0, 0, 2, 1], value=1.5),
         h.make_node("Pad", ["x"], ["r"], mode="reflect", pads=[0, 0, 2, 1, 0, 0, 1, 2]),
         h.make_node("Pad", ["x"], ["e"], mode="edge", pads=[0, 1, 1, 0, 0, 0, 0, 3])],
        [vi("x", F32, [1, 2, 5, 4])], [vi("c", F32, None), vi("r", F32, None), vi("e", F32, None)], 9),
        {"x": x4(1, 2, 5, 4)}, "Pad-2: pads and value attributes; constant, reflect and edge", None)

    out["clip_opset9"] = (model(
        [h.make_node("Clip", ["x"], ["relu6"], min=0.0, max=6.0),
         h.make_node("Clip", ["x"], ["lo"], min=-0.5),
         h.make_node("Clip", ["x"], ["none"])],
        [vi("x", F32, [3, 8])], [vi("relu6", F32, None), vi("lo", F32, None), vi("none", F32, None)], 9),
        {"x": 4 * x4(3, 8)}, "Clip-6: min/max attributes, either or both absent", None)

    out["clip_pad_f16_opset10"] = (model(
        [h.make_node("Clip", ["x"], ["c"], min=-1.0, max=0.75),
         h.make_node("Pad", ["c"], ["y"], pads=[1, 0, 0, 2], value=-2.5)],
        [vi("x", F16, [4, 6])], [vi("y", F16, None)], 10),
        {"x": x4(4, 6).astype(np.float16)}, "Clip-6 and Pad-2 on f16: the float attributes take the data's type", None)

    out["upsample_opset7"] = (model(
        [h.make_node("Upsample", ["x"], ["n"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0]),
         h.make_node("Upsample", ["x"], ["l"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])],
        [vi("x", F32, [1, 2, 3, 4])], [vi("n", F32, None), vi("l", F32, None)], 7),
        {"x": x4(1, 2, 3, 4)}, "Upsample-7: scales attribute, nearest and linear", None)

    out["upsample_opset9"] = (model(
        [h.make_node("Constant", [], ["s2"], value=const("s2v", np.array([1, 1, 2, 2], np.float32))),
         h.make_node("Upsample", ["x", "s2"], ["n"], mode="nearest"),
         h.make_node("Upsample", ["x", "s"], ["f"], mode="nearest"),
         h.make_node("Upsample", ["x", "s"], ["l"], mode="linear")],
        [vi("x", F32, [2, 3, 5, 4])], [vi("n", F32, None), vi("f", F32, None), vi("l", F32, None)], 9,
        [const("s", np.array([1, 1, 1.5, 2.5], np.float32))]),
        {"x": x4(2, 3, 5, 4)}, "Upsample-9: scales from a Constant node and an initializer, fractional", None)

    out["resize_opset10"] = (model(
        [h.make_node("Resize", ["x", "up"], ["n_up"], mode="nearest"),
         h.make_node("Resize", ["x", "down"], ["n_down"], mode="nearest"),
         h.make_node("Resize", ["x", "down"], ["l_down"], mode="linear"),
         h.make_node("Resize", ["x", "up"], ["l_up"], mode="linear")],
        [vi("x", F32, [1, 2, 10, 9])],
        [vi("n_up", F32, None), vi("n_down", F32, None), vi("l_down", F32, None), vi("l_up", F32, None)], 10,
        [const("up", np.array([1, 1, 1.5, 2], np.float32)), const("down", np.array([1, 1, 0.6, 0.5], np.float32))]),
        {"x": x4(1, 2, 10, 9)}, "Resize-10: nearest rounds down growing, up shrinking; linear asymmetric", None)

    out["resize_opset10_runtime_scales"] = (model(
        [h.make_node("Resize", ["x", "s"], ["y"], mode="nearest")],
        [vi("x", F32, [1, 1, 4, 4]), vi("s", F32, [4])], [vi("y", F32, None)], 10),
        {"x": x4(1, 1, 4, 4), "s": np.array([1, 1, 0.5, 2], np.float32)},
        "Resize-10 nearest with scales given at run time", "scales known only at run time")

    out["split_opset11"] = (model(
        [h.make_node("Split", ["x"], ["a", "b", "c"], axis=1, split=[2, 3, 1]),
         h.make_node("Split", ["x"], ["d", "e"], axis=-1)],
        [vi("x", F32, [2, 6, 4])], [vi(n, F32, None) for n in "abcde"], 11),
        {"x": x4(2, 6, 4)}, "Split-11: sizes as an attribute, and equal parts", None)

    out["dropout_opset10"] = (model(
        [h.make_node("Dropout", ["x"], ["y"], ratio=0.3),
         h.make_node("Relu", ["y"], ["z"])],
        [vi("x", F32, [2, 5])], [vi("z", F32, None)], 10),
        {"x": x4(2, 5)}, "Dropout-10 (eval mode: its input)", None)

    out["dropout_mask_opset10"] = (model(
        [h.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)],
        [vi("x", F32, [2, 5])], [vi("y", F32, None), vi("mask", T.BOOL, None)], 10),
        {"x": x4(2, 5)}, "Dropout-10 with its mask output read (the host: the input and a mask of all true)",
        "the reference executor computes it")

    # Softmax before opset 13 flattens at its axis: over [C, H, W] of an NCHW map at axis 1, and
    # over an axis followed by ones only (caffe2's SqueezeNet head, [N, 1000, 1, 1]).
    out["softmax_axis1_opset11"] = (model(
        [h.make_node("Softmax", ["x"], ["y"], axis=1),
         h.make_node("LogSoftmax", ["x"], ["ly"], axis=1),
         h.make_node("Softmax", ["h"], ["hy"], axis=1)],
        [vi("x", F32, [2, 3, 4, 5]), vi("h", F32, [2, 10, 1, 1])],
        [vi("y", F32, None), vi("ly", F32, None), vi("hy", F32, None)], 11),
        {"x": x4(2, 3, 4, 5), "h": x4(2, 10, 1, 1)},
        "Softmax-11 / LogSoftmax-11 at axis 1 of 4-D inputs (flattened to 2-D)", None)

    out["batchnorm_opset7"] = (model(
        [h.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], epsilon=1e-3)],
        [vi("x", F32, [2, 3, 4, 4])], [vi("y", F32, None)], 7,
        [const("g", rng.random(3, np.float32) + 0.5), const("b", x4(3)), const("m", x4(3)),
         const("v", rng.random(3, np.float32) + 0.1)]),
        {"x": x4(2, 3, 4, 4)}, "BatchNormalization-7 (spatial by default)", None)

    # A MobileNet-era block as opset-9 exporters wrote it: Conv -> Clip(0, 6) (ReLU6, now an
    # epilogue whose bounds were attributes), Pad, MaxPool, Upsample back, Concat, 2-D Softmax.
    w = 0.3 * x4(8, 4, 3, 3)
    out["conv_relu6_block_opset9"] = (model(
        [h.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
         h.make_node("Clip", ["c"], ["r"], min=0.0, max=6.0),
         h.make_node("Pad", ["r"], ["p"], pads=[0, 0, 0, 0, 0, 0, 1, 1]),
         h.make_node("MaxPool", ["p"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("Upsample", ["m", "s"], ["u"], mode="nearest"),
         h.make_node("Slice", ["u"], ["us"], starts=[0, 0], ends=[8, 8], axes=[2, 3]),
         h.make_node("Concat", ["r", "us"], ["cat"], axis=1),
         h.make_node("GlobalAveragePool", ["cat"], ["gap"]),
         h.make_node("Flatten", ["gap"], ["f"]),
         h.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
         h.make_node("Softmax", ["logits"], ["prob"])],
        [vi("x", F32, [2, 4, 8, 8])], [vi("prob", F32, None)], 9,
        [const("w", w), const("bias", x4(8)), const("s", np.array([1, 1, 2, 2], np.float32)),
         const("fc", 0.2 * x4(5, 16)), const("fcb", x4(5))]),
        {"x": x4(2, 4, 8, 8)}, "opset-9 conv block: Conv+Clip-6, Pad-2, MaxPool, Upsample-9, Slice-1, Softmax-1", None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = args.out.resolve()
    script = hashlib.sha256(Path(__file__).read_bytes() + (Path(__file__).parent / "refcase.py").read_bytes())
    stamp = f"script={script.hexdigest()[:16]} ort={ort.__version__} onnx={onnx.__version__}"
    if not args.force and is_fresh(out, stamp):
        print("legacy-opsets: up to date")
        return
    fresh_dir(out)
    index = []
    for name, (m, feeds, what, host) in cases(np.random.default_rng(7)).items():
        d = out / name
        d.mkdir()
        onnx.save(m, d / "model.onnx")
        opset = m.opset_import[0].version
        write_case(d, d / "model.onnx", [feeds], {"what": what, "opset": opset}, stamp)
        index.append({"case": name, "opset": opset, "what": what, "host": host})
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    (out / ".stamp").write_text(stamp + "\n")


if __name__ == "__main__":
    main()
