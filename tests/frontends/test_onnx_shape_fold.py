"""Shape subgraphs folded before import (``fxpsim.frontends.onnx.shape_fold``, issue 22): head reshapes computed at
run time from Shape / Gather / Mod / Div / Concat / Unsqueeze of a static-shape tensor, imported and compared with
onnxruntime live (1 intra-op thread); the folded model run by onnxruntime gives the original's bits; torch's own
``nn.TransformerEncoderLayer`` (``tools/fixtures/onnx_torch_encoder/``) folds to ops the importer reads, and what
stops it then (torch's attention moves the batch axis) is refused naming the node."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402
from fxpsim.frontends.onnx.shape_fold import fold_static_shapes  # noqa: E402

F32 = np.float32
FIXTURE = Path(__file__).resolve().parents[2] / "tools" / "fixtures" / "onnx_torch_encoder"


def _session(model_or_path):
    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads = 3, 1
    data = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _head_model(batch):
    """x [batch, 8, 16] -> Q -> DQ -> Reshape to [b, L, 2, 16 / 2] with the target computed from Shape ->
    Transpose [0, 2, 1, 3] -> Q -> DQ; the head count from Mod and the score scale from Cast / Sqrt / Div, as
    torch's exporter writes them."""
    N = helper.make_node
    inits = [numpy_helper.from_array(np.array(0.05, F32), "s"), numpy_helper.from_array(np.array(-3, np.int8), "z"),
             _i64("i0", 0), _i64("i1", 1), _i64("i2", 2), _i64("two", 2), _i64("six", 6), _i64("four", 4),
             _i64("ax0", [0]), numpy_helper.from_array(np.array(1.0, F32), "one")]
    nodes = [N("QuantizeLinear", ["x", "s", "z"], ["xq"]), N("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             N("Shape", ["xd"], ["sh"]),
             N("Gather", ["sh", "i0"], ["b"], axis=0), N("Gather", ["sh", "i1"], ["l"], axis=0),
             N("Gather", ["sh", "i2"], ["d"], axis=0),
             N("Mod", ["six", "four"], ["heads"]),                       # 6 mod 4 = 2
             N("Div", ["d", "heads"], ["dh"]),
             N("Unsqueeze", ["b", "ax0"], ["bu"]), N("Unsqueeze", ["l", "ax0"], ["lu"]),
             N("Unsqueeze", ["heads", "ax0"], ["hu"]), N("Unsqueeze", ["dh", "ax0"], ["du"]),
             N("Concat", ["bu", "lu", "hu", "du"], ["target"], axis=0),
             N("Reshape", ["xd", "target"], ["r"]), N("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             N("Cast", ["dh"], ["dhf"], to=TensorProto.FLOAT), N("Sqrt", ["dhf"], ["sq"]),
             N("Div", ["one", "sq"], ["scale"]),
             N("QuantizeLinear", ["scale", "s2", "z2"], ["scq"]), N("DequantizeLinear", ["scq", "s2", "z2"], ["scd"]),
             N("Mul", ["t", "scd"], ["m"]),
             N("QuantizeLinear", ["m", "s", "z"], ["yq"]), N("DequantizeLinear", ["yq", "s", "z"], ["y"])]
    inits += [numpy_helper.from_array(np.array(0.004, F32), "s2"), numpy_helper.from_array(np.array(0, np.int8), "z2")]
    g = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_static_head_reshape_folds_and_matches_onnxruntime(tmp_path):
    m = _head_model(1)
    onnx.save(m, str(tmp_path / "m.onnx"))
    folded = fold_static_shapes(onnx.load(str(tmp_path / "m.onnx")))
    assert {n.op_type for n in folded.graph.node} == {"QuantizeLinear", "DequantizeLinear", "Reshape", "Transpose",
                                                       "Mul"}
    target = next(numpy_helper.to_array(i) for i in folded.graph.initializer if i.name == "target")
    assert target.tolist() == [1, 8, 2, 8]                 # independent: batch 1, L 8, 6 mod 4 heads, 16 // 2
    scq = next(numpy_helper.to_array(i) for i in folded.graph.initializer if i.name == "scq")
    assert int(scq) == round(1 / np.sqrt(8) / 0.004)          # 0.353553 / 0.004 = 88.39 -> 88
    rng = np.random.default_rng(0)
    g = import_onnx(tmp_path / "m.onnx")
    for _ in range(5):
        x = (rng.standard_normal((1, 8, 16)) * 3).astype(F32)
        want = _session(tmp_path / "m.onnx").run(None, {"x": x})[0]
        assert np.array_equal(_session(folded).run(None, {"x": x})[0], want)
        got = g.run(x)
        assert got.shape == want.shape == (1, 2, 8, 8) and np.array_equal(got, want)


def test_dynamic_batch_shape_is_not_folded_and_is_named(tmp_path):
    onnx.save(_head_model("N"), str(tmp_path / "m.onnx"))
    cov = onnx_coverage(tmp_path / "m.onnx")
    assert [r.op for r in cov.unsupported] == ["Shape"]
    with pytest.raises(ValueError, match=r"Shape x1 \('Shape_2'\)"):
        import_onnx(tmp_path / "m.onnx")


def test_a_fold_that_fails_names_the_node(tmp_path):
    m = _head_model(1)
    for init in m.graph.initializer:
        if init.name == "four":
            init.CopyFrom(_i64("four", 0))
    with pytest.raises(ValueError, match="Mod node 'Mod_6'.*by zero"):
        fold_static_shapes(m)


def test_torch_encoder_layer_folds_to_supported_ops_and_stops_at_the_batch_transpose():
    """torch 2.13's nn.TransformerEncoderLayer (d_model 16, 2 heads, batch 1, quantize_static QDQ s8): after folding
    every op is one the importer reads; onnxruntime gives the folded model the original's bits; the import stops
    at the attention's Transpose of the batch axis (perm [1, 0, 2]), named."""
    path = FIXTURE / "torch_encoder_d16_qdq_s8.onnx"
    original = onnx.load(str(path))
    assert {"Shape", "Mod", "Cast", "Sqrt"} <= {n.op_type for n in original.graph.node}
    folded = fold_static_shapes(onnx.load(str(path)))
    assert not {"Shape", "Mod", "Cast", "Sqrt"} & {n.op_type for n in folded.graph.node}
    cov = onnx_coverage(path)
    assert cov.unsupported == []
    assert "'/layer/self_attn/Transpose'" in cov.import_error and "batch axis" in cov.import_error
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = (rng.standard_normal((1, 8, 16)) * 1.5).astype(F32)
        assert np.array_equal(_session(folded).run(None, {"x": x})[0], _session(path).run(None, {"x": x})[0])
    with pytest.raises(ValueError, match=r"Transpose in node '/layer/self_attn/Transpose'.*batch axis"):
        import_onnx(path, cpu="avx2")
