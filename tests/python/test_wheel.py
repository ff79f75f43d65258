"""The `bolt-plugin` wheel (plugin/python/build_wheel.py): pip installs it offline, and with
only the installed package (no source checkout on the path) ONNX Runtime registers Bolt and
runs a model in three lines, equal to ORT's CPU provider."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "target" / "release" / "libbolt_plugin.so"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not LIB.is_file():
        pytest.fail(f"{LIB} missing: tests/run.sh builds it (cargo build --release -p bolt-plugin)", pytrace=False)
    out = tmp_path_factory.mktemp("wheels")
    r = subprocess.run([sys.executable, str(REPO / "plugin/python/build_wheel.py"), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


def test_wheel_carries_the_library_and_helpers_and_pins_nothing(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        record = z.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    for f in ["bolt_plugin/__init__.py", "bolt_plugin/libbolt_plugin.so", "bolt_ort/__init__.py",
              "bolt_tvm/__init__.py"]:
        assert f in names, f
        assert f in record, f
    # ONNX Runtime's guidance: a plugin EP package does not depend on onnxruntime.
    assert "Requires-Dist" not in meta, meta


def test_installed_wheel_registers_and_runs_in_three_lines(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(target), str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    script = r'''
import sys, numpy as np, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
import bolt_plugin, bolt_ort
assert bolt_plugin.get_library_path().startswith(sys.argv[1]), bolt_plugin.get_library_path()
w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 7, "W")
g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "g",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])], [w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
# The three lines a user writes:
ort.register_execution_provider_library("bolt", bolt_plugin.get_library_path())
so = ort.SessionOptions(); so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == bolt_plugin.get_ep_name()], {})
y = ort.InferenceSession(m.SerializeToString(), so).run(None, {"X": x})[0]
want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
# The helpers inside the wheel find the same library.
assert str(bolt_ort.library_path()) == bolt_plugin.get_library_path()
print("ok")
'''
    env = {k: v for k, v in os.environ.items() if k not in ("BOLT_LIBRARY", "PYTHONPATH")}
    # Only the installed package: the checkout's plugin/python is not on the path.
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
