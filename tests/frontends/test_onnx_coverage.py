"""The op coverage of an ONNX model (:func:`fxpsim.frontends.onnx.coverage.onnx_coverage`) and the one error an
import raises for a model with unsupported ops: every unsupported op, its count and its node names (issue 22).

The expected tables are written by hand from the models the tests build (the independent reference)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402

F32 = np.float32
MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "onnx_models"


def _save(tmp_path, nodes, inits, name="m.onnx", ms=False):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=ops)
    m.ir_version = 8
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def _chain(ops_and_names):
    """Q -> DQ -> (op -> Q -> DQ)* over ``(op_type, node name, extra inputs)``."""
    inits = [numpy_helper.from_array(np.array(0.05, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z"),
             numpy_helper.from_array(np.array(2.0, F32), "two")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"], name="q0"),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"], name="dq0")]
    prev = "d0"
    for i, (op, name, extra, domain) in enumerate(ops_and_names):
        nodes += [helper.make_node(op, [prev] + list(extra), [f"t{i}"], name=name, domain=domain),
                  helper.make_node("QuantizeLinear", [f"t{i}", "s", "z"], [f"q{i + 1}"], name=f"q{i + 1}"),
                  helper.make_node("DequantizeLinear", [f"q{i + 1}", "s", "z"],
                                   ["y" if i == len(ops_and_names) - 1 else f"d{i + 1}"], name=f"dq{i + 1}")]
        prev = f"d{i + 1}"
    return nodes, inits


UNSUPPORTED_CHAIN = [("Sin", "sin_a", (), ""), ("Relu", "relu", (), ""), ("Sin", "sin_b", (), ""),
                     ("Tanh", "tanh_1", (), ""), ("Sin", "", (), ""), ("Gelu", "gelu_ms", (), "com.microsoft")]


def test_coverage_table_counts_every_op_and_names_its_nodes(tmp_path):
    nodes, inits = _chain(UNSUPPORTED_CHAIN)
    path = _save(tmp_path, nodes, inits, ms=True)
    cov = onnx_coverage(path)
    rows = {r.op: r for r in cov.rows}
    # hand table: 7 Q and 7 DQ, Sin x3 (the unnamed one gets op_index as its name), one each of the rest
    assert [r.op for r in cov.rows] == ["QuantizeLinear", "DequantizeLinear", "Sin", "Relu", "Tanh",
                                        "com.microsoft:Gelu"]
    assert rows["QuantizeLinear"].count == 7 and rows["DequantizeLinear"].count == 7
    assert rows["Sin"].count == 3 and rows["Sin"].nodes == ("sin_a", "sin_b", "Sin_14")
    assert rows["Tanh"].nodes == ("tanh_1",) and rows["com.microsoft:Gelu"].nodes == ("gelu_ms",)
    assert {r.op for r in cov.unsupported} == {"Sin", "Tanh", "com.microsoft:Gelu"}
    assert rows["Relu"].supported and rows["QuantizeLinear"].supported
    assert cov.node_count == 20 and cov.quantized and not cov.importable and cov.import_error is None
    d = json.loads(json.dumps(cov.as_dict()))
    assert d["unsupported_nodes"] == 5 and d["nodes"] == 20 and d["importable"] is False
    text = cov.to_text()
    assert "3 unsupported (5 nodes)" in text and "'sin_b'" in text and "NO" in text


def test_import_raises_one_error_listing_every_unsupported_op(tmp_path):
    nodes, inits = _chain(UNSUPPORTED_CHAIN)
    path = _save(tmp_path, nodes, inits, ms=True)
    with pytest.raises(ValueError) as err:
        import_onnx(path)
    msg = str(err.value)
    assert msg.startswith(str(path))
    assert "3 unsupported ONNX ops in 5 of 20 nodes" in msg
    assert "Sin x3 ('sin_a', 'sin_b', 'Sin_14')" in msg
    assert "Tanh x1 ('tanh_1')" in msg and "com.microsoft:Gelu x1 ('gelu_ms')" in msg
    assert "Relu x" not in msg and "QLinearConv" in msg        # supported ops are listed as such, not as missing


def test_long_node_lists_are_shortened(tmp_path):
    nodes, inits = _chain([("Sin", f"e{i}", (), "") for i in range(11)])
    cov = onnx_coverage(_save(tmp_path, nodes, inits))
    (row,) = cov.unsupported
    assert row.count == 11 and len(row.nodes) == 11
    with pytest.raises(ValueError, match=r"Sin x11 \('e0', .*'e7', \.\.\. \(3 more\)\)"):
        import_onnx(tmp_path / "m.onnx")


def test_supported_ops_in_a_pattern_the_importer_does_not_read(tmp_path):
    """Every op supported, but a Relu on raw integer codes: the table says so instead of raising."""
    inits = [numpy_helper.from_array(np.array(0.05, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("Relu", ["q"], ["r"], name="relu_on_codes"),
             helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"], name="dq")]
    cov = onnx_coverage(_save(tmp_path, nodes, inits))
    assert not cov.unsupported and not cov.importable
    assert "relu_on_codes" in cov.import_error and "import fails" in cov.to_text()


def test_fixture_models_are_fully_covered():
    cov = onnx_coverage(MODELS_DIR / "qs_resblock_qdq_u8_pc.onnx")
    assert cov.importable and not cov.unsupported and cov.to_text().endswith("imports")
    fl = onnx_coverage(MODELS_DIR / "float_cnn.onnx")
    assert not fl.quantized and not fl.importable and "float (non-quantized)" in fl.to_text()


def test_coverage_of_a_damaged_file_is_a_value_error(tmp_path):
    data = (MODELS_DIR / "qs_cnn_qdq_u8_pc.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="cut.onnx"):
        onnx_coverage(tmp_path / "cut.onnx")
    with pytest.raises(FileNotFoundError):
        onnx_coverage(tmp_path / "missing.onnx")
