"""``fxpsim.model_coverage`` picks the format's coverage table as ``import_model`` picks its reader."""
from pathlib import Path

import pytest

import fxpsim

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def test_tflite_and_onnx_files_get_their_own_tables():
    pytest.importorskip("tflite", reason="tflite (test extra) is not installed")
    pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    t = fxpsim.model_coverage(VECTORS / "tflite_models" / "conv_block.tflite")
    o = fxpsim.model_coverage(VECTORS / "onnx_models" / "float_cnn.onnx")
    assert type(t).__module__.endswith("tflite.coverage") and "CONV_2D" in str(t)
    assert type(o).__module__.endswith("onnx.coverage") and "Conv" in str(o)


def test_other_files_are_refused_by_name(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="model.bin"):
        fxpsim.model_coverage(f)
    with pytest.raises(FileNotFoundError):
        fxpsim.model_coverage(tmp_path / "missing.onnx")


def test_inspect_coverage_lists_every_unsupported_op_and_exits_0(tmp_path):
    """``fxpsim inspect --coverage`` on a model with two unsupported op types names both, with their nodes."""
    import subprocess
    import sys
    onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Sin", ["x"], ["a"], name="sin_one"), helper.make_node("Sin", ["a"], ["b"], name="sin_two"),
             helper.make_node("Celu", ["b"], ["y"], name="celu_one")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "unsupported.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = subprocess.run([sys.executable, "-m", "fxpsim", "inspect", "--coverage", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:] if line.strip()}
    assert "sin_one" in rows["Sin"] and "sin_two" in rows["Sin"] and rows["Sin"].split()[1] == "2"
    assert "celu_one" in rows["Celu"]
    bad = subprocess.run([sys.executable, "-m", "fxpsim", "inspect", "--coverage", str(tmp_path / "x.npz")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
