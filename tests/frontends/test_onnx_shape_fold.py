"""Shape subgraphs folded before import (``fxpsim.frontends.onnx.shape_fold``, issue 22): head reshapes computed at
run time from Shape / Gather / Mod / Div / Concat / Unsqueeze of a static-shape tensor, imported and compared with
onnxruntime live (1 intra-op thread); the folded model run by onnxruntime gives the original's bits; torch's own
``nn.TransformerEncoderLayer`` (``tools/fixtures/onnx_torch_encoder/``) folds to ops the importer reads and, its
attention moving the batch axis of 1 as whole-tensor moves, matches onnxruntime on every quantized tensor."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import VECTOR_LAYER_NORM_CPUS, import_onnx, onnxruntime_cpu  # noqa: E402
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


def _exposed(folded, out):
    """The folded model with every QuantizeLinear output of an activation (not of a constant) as a graph output."""
    inits = {i.name for i in folded.graph.initializer}
    info = {v.name: v for v in folded.graph.value_info}
    have = {o.name for o in folded.graph.output}
    for n in folded.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits and n.output[0] in info and \
                n.output[0] not in have:
            folded.graph.output.append(info[n.output[0]])
            have.add(n.output[0])
    onnx.save(folded, str(out))
    return len(folded.graph.output) - 1


def test_torch_encoder_layer_matches_onnxruntime_on_every_tensor(tmp_path):
    """torch 2.13's nn.TransformerEncoderLayer (d_model 16, 2 heads, sequence 8, batch 1, quantize_static QDQ s8):
    its shape subgraphs fold, onnxruntime gives the folded model the original's bits, and the import (torch's
    attention moving the batch axis of 1: whole-tensor moves) matches onnxruntime on the output and on every
    QuantizeLinear tensor exposed as a graph output, imported with this host's flavour (``cpu="host"``: its
    pair sums saturate on AVX2 without VNNI, not with VNNI)."""
    host = onnxruntime_cpu()
    if host not in VECTOR_LAYER_NORM_CPUS:
        pytest.skip(f"onnxruntime's vector LayerNormalization is modelled on x86-64 AVX2 hosts; this one is {host!r}")
    path = FIXTURE / "torch_encoder_d16_qdq_s8.onnx"
    original = onnx.load(str(path))
    assert {"Shape", "Mod", "Cast", "Sqrt"} <= {n.op_type for n in original.graph.node}
    folded = fold_static_shapes(onnx.load(str(path)))
    assert not {"Shape", "Mod", "Cast", "Sqrt"} & {n.op_type for n in folded.graph.node}
    cov = onnx_coverage(path)
    assert cov.unsupported == []              # (its default cpu='exact' import stops at the AVX2 LayerNormalization)
    exposed = _exposed(fold_static_shapes(onnx.load(str(path))), tmp_path / "exposed.onnx")
    assert exposed >= 30
    rng = np.random.default_rng(1)
    g = import_onnx(path, cpu=host)
    gx = import_onnx(tmp_path / "exposed.onnx", cpu=host)
    whole = [n for n in g.nodes if n.op == "onnx_move" and "in_batch" in n.attrs]
    assert len(whole) >= 6                        # the batch Transposes, the 5-axis Unsqueeze / Transpose, the Gathers
    sess, sess_x = _session(path), _session(tmp_path / "exposed.onnx")
    for i in range(12):
        x = (rng.standard_normal((1, 8, 16)) * 1.5).astype(F32)
        if i == 0:
            x *= 40                                # saturates the input quantizer
        want = sess.run(None, {"x": x})[0]
        if i < 2:
            assert np.array_equal(_session(folded).run(None, {"x": x})[0], want)
        assert np.array_equal(g.run(x), want)
        for o, a, b in zip(sess_x.get_outputs(), gx.run(x), sess_x.run(None, {"x": x})):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), o.name
    with pytest.raises(ValueError, match="static, with a batch of 1"):
        g.run(np.zeros((2, 8, 16), F32))
