"""Data movement of quantized ONNX tensors (``onnx_move``): Transpose, Slice, Split, Gather, Pad, Squeeze,
Unsqueeze and nearest Resize (issue 22).

The reference is onnxruntime itself, run live (CPU EP, default graph optimizations): models made by
``quantize_static`` (QDQ and QOperator, uint8 and int8 activations, opsets 13 and 18) on float graphs built
here; hand-built QDQ graphs whose QuantizeLinear parameters differ from the DequantizeLinear's (requantized
moves, pad values that are no input code) fed every input code; QOperator-style moves on integer graph inputs;
nearest Resize under every coordinate transformation and rounding mode. Bad constants are refused with a
ValueError naming the node."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.coverage import onnx_coverage  # noqa: E402
from fxpsim.frontends.onnx.importer import SUPPORTED_OPS, import_onnx  # noqa: E402
from fxpsim.graph import load_graph  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32
MOVE_OPS = ("Transpose", "Slice", "Split", "Gather", "Pad", "Squeeze", "Unsqueeze", "Resize")


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inits, x_type, x_shape, outputs=("y",), out_type=None, opset=13, batch="N"):
    x = helper.make_tensor_value_info("x", x_type, [batch] + list(x_shape))
    ys = [helper.make_tensor_value_info(o, out_type or x_type, None) for o in outputs]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], ys, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


_session = ort_session


def _compare(path, feeds, what):
    want = _session(path).run(None, {"x": feeds})
    g = import_onnx(path, cpu="host")
    got = g.run(feeds)
    got = got if isinstance(got, list) else [got]
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what} output {i}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        bad = np.count_nonzero(a != b)
        assert bad == 0, f"{what} output {i}: {bad} of {b.size} values differ from onnxruntime"
    return g


def _codes(dtype, shape, rng):
    """Every code of ``dtype`` at least once, the rest random."""
    info = np.iinfo(dtype)
    flat = rng.integers(info.min, info.max + 1, size=int(np.prod(shape)))
    flat[:256] = np.arange(info.min, info.max + 1)
    return rng.permutation(flat).reshape(shape).astype(dtype)


# ------------------------------------------------------------------ quantize_static models
def _float_moves(rng, opset, pad_mode, pad_value):
    """Conv -> Transpose -> Slice (negative step) -> Split -> Concat -> Gather (negative index) -> Transpose ->
    Pad -> Resize (nearest) -> Unsqueeze -> Squeeze -> Conv."""
    w = (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(F32)
    w2 = (rng.standard_normal((5, 8, 1, 1)) * 0.2).astype(F32)
    split = (helper.make_node("Split", ["s", "spl"], ["s1", "s2"], axis=3) if opset < 18 else
             helper.make_node("Split", ["s"], ["s1", "s2"], axis=3, num_outputs=2))
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Slice", ["t", "st", "en", "ax", "stp"], ["s"]),
             split,
             helper.make_node("Concat", ["s2", "s1"], ["cc"], axis=3),
             helper.make_node("Gather", ["cc", "gi"], ["g"], axis=2),
             helper.make_node("Transpose", ["g"], ["t2"], perm=[0, 3, 1, 2]),
             helper.make_node("Pad", ["t2", "pads", "pv"], ["p"], mode=pad_mode),
             helper.make_node("Resize", ["p", "", "rs"], ["r"], mode="nearest"),
             helper.make_node("Unsqueeze", ["r", "uax"], ["u"]),
             helper.make_node("Squeeze", ["u", "uax"], ["sq"]),
             helper.make_node("Conv", ["sq", "W2"], ["y"], kernel_shape=[1, 1])]
    inits = [_init("W", w), _init("W2", w2), _init("st", np.array([0, 5, 0], np.int64)),
             _init("en", np.array([6, -100, 8], np.int64)), _init("ax", np.array([1, 2, 3], np.int64)),
             _init("stp", np.array([1, -1, 1], np.int64)), _init("spl", np.array([4, 4], np.int64)),
             _init("gi", np.array([0, 2, -1], np.int64)), _init("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
             _init("pv", np.array(pad_value, F32)), _init("rs", np.array([1, 1, 1.5, 2], F32)),
             _init("uax", np.array([2], np.int64))]
    return _model(nodes, inits, TensorProto.FLOAT, (4, 6, 6), out_type=TensorProto.FLOAT, opset=opset)


STATIC_CASES = [(13, "constant", 0.3), (13, "constant", 0.0), (18, "edge", 0.0), (18, "reflect", 0.0)]


@pytest.mark.parametrize("opset,pad_mode,pad_value", STATIC_CASES, ids=[f"op{o}-{m}-{v}" for o, m, v in STATIC_CASES])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantize_static_moves_match_onnxruntime(tmp_path, fmt, act, opset, pad_mode, pad_value):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    rng = np.random.default_rng([opset, len(pad_mode), len(fmt), len(act)])
    onnx.save(_float_moves(rng, opset, pad_mode, pad_value), str(tmp_path / "f.onnx"))

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 4, 6, 6)).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "q.onnx"
    q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                      activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
    x = (rng.standard_normal((9, 4, 6, 6)) * 3).astype(F32)
    x[0], x[1], x[2] = 1e4, -1e4, 0.0                       # saturated and zero inputs
    g = _compare(out, x, f"{fmt} {act} opset {opset} {pad_mode}")
    moved = {n.attrs["onnx_op"] for n in g.nodes if n.op == "onnx_move"}
    assert {"Transpose", "Slice", "Split", "Gather", "Pad", "Resize"} <= moved
    cov = onnx_coverage(out)
    assert cov.importable and all(r.supported for r in cov.rows)
    back = load_graph(g.save(tmp_path / "g"))
    np.testing.assert_array_equal(back.run(x), g.run(x))
    ref = g.run_float(x)
    assert np.all(np.isfinite(ref)) and ref.shape == g.run(x).shape


# ------------------------------------------------------------------ hand-built QDQ groups, every code
def _qdq_move(op_nodes, inits, dtype, x_shape, sx, zx, out_params, opset=13, batch="N"):
    """int codes -> DQ -> the move op -> one Q per output (its own parameters) -> outputs."""
    tp = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    inits = list(inits) + [_init("sx", np.array(sx, F32)), _init("zx", np.array(zx, dtype))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["d"], name="dq")] + op_nodes
    outs = []
    for i, (t, (s, z)) in enumerate(out_params.items()):
        inits += [_init(f"sy{i}", np.array(s, F32)), _init(f"zy{i}", np.array(z, dtype))]
        nodes.append(helper.make_node("QuantizeLinear", [t, f"sy{i}", f"zy{i}"], [f"y{i}"], name=f"q{i}"))
        outs.append(f"y{i}")
    return _model(nodes, inits, tp, x_shape, outputs=outs, opset=opset, batch=batch)


def _hand_cases(dtype):
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    pv = ("DequantizeLinear", np.array(lo + 7, dtype), 0.0123, lo + 1)
    return {
        "transpose": ([helper.make_node("Transpose", ["d"], ["t"], name="mv", perm=[0, 3, 1, 2])], [], 13),
        "slice_neg": ([helper.make_node("Slice", ["d", "a", "b", "c", "e"], ["t"], name="mv")],
                      [_init("a", np.array([-1, 1], np.int64)), _init("b", np.array([-100, 100], np.int64)),
                       _init("c", np.array([3, 1], np.int64)), _init("e", np.array([-2, 2], np.int64))], 13),
        "split_attr": ([helper.make_node("Split", ["d"], ["t", "t2", "t3"], name="mv", axis=1, split=[1, 2, 1])],
                       [], 11),
        "split_input": ([helper.make_node("Split", ["d", "sp"], ["t", "t2"], name="mv", axis=-1)],
                        [_init("sp", np.array([3, 2], np.int64))], 13),
        "gather_scalar": ([helper.make_node("Gather", ["d", "i"], ["t"], name="mv", axis=2)],
                          [_init("i", np.array(-2, np.int64))], 13),
        "gather_2d": ([helper.make_node("Gather", ["d", "i"], ["t"], name="mv", axis=3)],
                      [_init("i", np.array([[0, 4], [-1, 2]], np.int64))], 13),
        "pad_dq_value": ([helper.make_node("DequantizeLinear", ["pq", "ps", "pz"], ["pvd"], name="pdq"),
                          helper.make_node("Pad", ["d", "pp", "pvd"], ["t"], name="mv")],
                         [_init("pq", pv[1]), _init("ps", np.array(pv[2], F32)), _init("pz", np.array(pv[3], dtype)),
                          _init("pp", np.array([0, 1, 0, 2, 0, 0, 3, -1], np.int64))], 13),
        "pad_reflect_axes": ([helper.make_node("Pad", ["d", "pp", "", "pa"], ["t"], name="mv", mode="reflect")],
                             [_init("pp", np.array([2, 1, 1, 3], np.int64)), _init("pa", np.array([-1, 2], np.int64))],
                             18),
        "unsqueeze_squeeze": ([helper.make_node("Unsqueeze", ["d", "ua"], ["u"], name="mv0"),
                               helper.make_node("Squeeze", ["u", "ua"], ["t"], name="mv")],
                              [_init("ua", np.array([-1, 2], np.int64))], 13),
        "resize_scales": ([helper.make_node("Resize", ["d", "", "rs"], ["t"], name="mv", mode="nearest",
                                            coordinate_transformation_mode="asymmetric", nearest_mode="ceil")],
                          [_init("rs", np.array([1, 1, 1.5, 0.7], F32))], 13),
    }, lo, hi


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", ["transpose", "slice_neg", "split_attr", "split_input", "gather_scalar", "gather_2d",
                                  "pad_dq_value", "pad_reflect_axes", "unsqueeze_squeeze", "resize_scales"])
def test_hand_built_qdq_moves_every_code(tmp_path, case, dtype):
    """Each QuantizeLinear once with the DequantizeLinear's parameters (onnxruntime drops the pair) and once with
    others (requantized, in float32 where onnxruntime runs the op in float)."""
    cases, lo, hi = _hand_cases(dtype)
    nodes, inits, opset = cases[case]
    outs = [t for t in nodes[-1].output]
    rng = np.random.default_rng(len(case))
    x = _codes(dtype, (6, 4, 5, 5), rng)
    for k, same in enumerate((True, False)):
        sx, zx = F32(0.05), lo + 100
        params = {t: ((sx, zx) if same else (F32(rng.uniform(0.02, 0.09)), int(rng.integers(lo, hi + 1))))
                  for t in outs}
        path = tmp_path / f"{case}_{k}.onnx"
        onnx.save(_qdq_move(nodes, inits, dtype, (4, 5, 5), sx, zx, params, opset), str(path))
        g = _compare(path, x, f"{case} {dtype.__name__} same={same}")
        assert any(n.op == "onnx_move" for n in g.nodes)


# ------------------------------------------------------------------ QDQ propagation
PROPAGATION = {"Transpose": True, "Slice": True, "Unsqueeze": True, "Reshape": True, "MaxPool": True,
               "Gather": False, "Split": False, "Resize": False, "Flatten": False}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", sorted(PROPAGATION))
def test_dq_propagation_through_moves_decides_the_fusion(tmp_path, op, dtype):
    """DQ -> move -> Conv -> Q with no QuantizeLinear after the move: onnxruntime moves the DequantizeLinear past
    Transpose, Slice, Squeeze / Unsqueeze, Reshape and MaxPool (the Conv fuses into QLinearConv) and not past the
    others (float32 Conv); checked in the graph onnxruntime optimizes to and on the outputs."""
    zx, zy = (128, 120) if dtype == np.uint8 else (3, -8)
    rng = np.random.default_rng(len(op))
    w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    mv = {"Transpose": [helper.make_node("Transpose", ["xd"], ["t"], perm=[0, 1, 3, 2])],
          "Slice": [helper.make_node("Slice", ["xd", "a", "b", "c"], ["t"])],
          "Unsqueeze": [helper.make_node("Unsqueeze", ["xd", "ua"], ["u"]), helper.make_node("Squeeze", ["u", "ua"], ["t"])],
          "Reshape": [helper.make_node("Reshape", ["xd", "rs"], ["t"])],
          "MaxPool": [helper.make_node("MaxPool", ["xd"], ["t"], kernel_shape=[2, 1])],
          "Gather": [helper.make_node("Gather", ["xd", "gi"], ["t"], axis=3)],
          "Split": [helper.make_node("Split", ["xd", "spl"], ["t", "t_rest"], axis=2)],
          "Resize": [helper.make_node("Resize", ["xd", "", "rsc"], ["t"], mode="nearest")],
          "Flatten": [helper.make_node("Flatten", ["xd"], ["f"]), helper.make_node("Reshape", ["f", "rs"], ["t"])]}[op]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])] + mv + [
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["t", "wd"], ["cv"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("QuantizeLinear", ["cv", "sy", "zy"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y"])]
    inits = [_init("sx", np.array(0.05, F32)), _init("zx", np.array(zx, dtype)), _init("wq", w),
             _init("ws", np.array(0.01, F32)), _init("wz", np.array(0, np.int8)), _init("sy", np.array(0.2, F32)),
             _init("zy", np.array(zy, dtype)), _init("ua", np.array([4], np.int64)), _init("a", np.array([1], np.int64)),
             _init("b", np.array([5], np.int64)), _init("c", np.array([2], np.int64)),
             _init("gi", np.array([0, 2, 3, 5, 1], np.int64)), _init("rs", np.array([0, 4, 6, 6], np.int64)),
             _init("rsc", np.array([1, 1, 2, 2], F32)), _init("spl", np.array([4, 2], np.int64))]
    outs = ("y", "t_rest") if op == "Split" else ("y",)
    path = tmp_path / "p.onnx"
    onnx.save(_model(nodes, inits, TensorProto.FLOAT, (4, 6, 6), outputs=outs, out_type=TensorProto.FLOAT), str(path))
    x = (rng.standard_normal((20, 4, 6, 6)) * 2).astype(F32)
    g = _compare(path, x, f"{op} {dtype.__name__}")
    fused = "conv" not in {f["node"] for f in g.meta["onnxruntime"]["float_nodes"]}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    theirs = "QLinearConv" in {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}
    assert fused == theirs == PROPAGATION[op]


def test_pad_folded_into_a_conv_is_refused(tmp_path):
    nodes = [helper.make_node("Pad", ["d", "pp"], ["t"], name="pad_into_conv"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"]),
             helper.make_node("Conv", ["t", "wd"], ["cv"], kernel_shape=[1, 1])]
    inits = [_init("pp", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
             _init("wq", np.ones((2, 3, 1, 1), np.int8)), _init("ws", np.array(0.1, F32))]
    onnx.save(_qdq_move(nodes, inits, np.uint8, (3, 4, 4), 0.1, 3, {"cv": (F32(0.1), 3)}), str(tmp_path / "pc.onnx"))
    with pytest.raises(ValueError, match="pad_into_conv.*PadFusion"):
        import_onnx(tmp_path / "pc.onnx")


# ------------------------------------------------------------------ QOperator-style moves on codes
def test_moves_on_integer_tensors(tmp_path):
    """QuantizeLinear, then a Transpose / Split / Pad (a code as the value) / Gather / Slice chain on the codes, as
    ``quantize_static`` QOperator models run them, then DequantizeLinear."""
    rng = np.random.default_rng(7)
    for dtype in (np.int8, np.uint8):
        info = np.iinfo(dtype)
        nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                 helper.make_node("Transpose", ["xq"], ["t"], perm=[0, 2, 1, 3]),
                 helper.make_node("Split", ["t", "sp"], ["a", "b"], axis=1),
                 helper.make_node("Pad", ["a", "pp", "pv"], ["p"], mode="constant"),
                 helper.make_node("Gather", ["b", "gi"], ["gg"], axis=-1),
                 helper.make_node("Slice", ["p", "s0", "s1", "s2", "s3"], ["yq"]),
                 helper.make_node("DequantizeLinear", ["yq", "sx", "zx"], ["y"]),
                 helper.make_node("DequantizeLinear", ["gg", "sx", "zx"], ["g"])]
        inits = [_init("sx", np.array(0.02, F32)), _init("zx", np.array(int(info.min) + 90, dtype)),
                 _init("sp", np.array([2, 3], np.int64)), _init("pp", np.array([0, 1, 1, 0, 0, 2, 0, 3], np.int64)),
                 _init("pv", np.array(int(info.max) - 3, dtype)), _init("gi", np.array([3, 0, 3], np.int64)),
                 _init("s0", np.array([-1], np.int64)), _init("s1", np.array([-1000], np.int64)),
                 _init("s2", np.array([3], np.int64)), _init("s3", np.array([-2], np.int64))]
        path = tmp_path / f"int_{dtype.__name__}.onnx"
        onnx.save(_model(nodes, inits, TensorProto.FLOAT, (3, 5, 4), outputs=("y", "g"),
                         out_type=TensorProto.FLOAT), str(path))
        x = (rng.standard_normal((7, 3, 5, 4)) * 2).astype(F32)
        x[0] = 100.0
        g = _compare(path, x, f"codes {dtype.__name__}")
        assert [n.op for n in g.nodes].count("onnx_move") == 6          # Split: one node per output


# ------------------------------------------------------------------ nearest Resize, every mode
CTMS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners", "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize_pair(tmp_path, ctm, nm, scales, sizes, in_hw=(7, 9)):
    """The Resize on uint8 codes (what onnxruntime runs) and the same in a DQ -> Resize -> Q group (imported)."""
    inits = [_init("sc", np.array(scales, F32))] if scales else [_init("sz", np.array(sizes, np.int64))]
    ins = ["x", "", "sc"] if scales else ["x", "", "", "sz"]
    node = helper.make_node("Resize", ins, ["y"], mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nm)
    plain, qdq = tmp_path / "plain.onnx", tmp_path / "qdq.onnx"
    onnx.save(_model([node], inits, TensorProto.UINT8, (3,) + in_hw, opset=19, batch=2), str(plain))
    node.input[0] = "d"
    onnx.save(_qdq_move([node], inits, np.uint8, (3,) + in_hw, 0.1, 3, {"y": (F32(0.1), 3)}, opset=19, batch=2),
              str(qdq))
    return plain, qdq


@pytest.mark.parametrize("ctm", CTMS)
def test_nearest_resize_modes_match_onnxruntime(tmp_path, ctm):
    """Every nearest mode on down- and upsampling scales and sizes; an output whose input coordinate lies on a
    rounding boundary is refused (its index depends on float32 details), every other matches onnxruntime."""
    rng = np.random.default_rng(len(ctm))
    x = _codes(np.uint8, (2, 3, 7, 9), rng)
    compared = 0
    for nm in NEAREST:
        for scales, sizes in (([1, 1, 0.6, 1.7], None), ([1, 1, 2.0, 0.5], None), ([1, 1, 3.0, 1.25], None),
                              ([1, 1, 4.0, 0.3], None), (None, [2, 3, 11, 4]), (None, [2, 3, 1, 17])):
            plain, qdq = _resize_pair(tmp_path, ctm, nm, scales, sizes)
            want = _session(plain).run(None, {"x": x})[0]
            try:
                g = import_onnx(qdq)
            except ValueError as exc:
                assert "rounding boundary" in str(exc), str(exc)
                continue
            np.testing.assert_array_equal(g.run(x), want, err_msg=f"{ctm} {nm} scales={scales} sizes={sizes}")
            compared += 1
    assert compared >= 12


def test_nearest_resize_on_a_rounding_boundary_is_refused(tmp_path):
    """half_pixel, scale 0.3 on 22 values: output 4 reads (4.5 / 0.3) - 0.5 = 14.5 - 6e-7 in exact arithmetic on the
    float32 scale, which onnxruntime rounds to 15 under round_prefer_ceil; fxpsim does not guess."""
    _, qdq = _resize_pair(tmp_path, "half_pixel", "round_prefer_ceil", [1, 1, 1, 0.3], None, in_hw=(2, 22))
    with pytest.raises(ValueError, match="rounding boundary"):
        import_onnx(qdq)
    _, qdq = _resize_pair(tmp_path, "tf_half_pixel_for_nn", "floor", [1, 1, 1, 2.0], None, in_hw=(2, 22))
    with pytest.raises(ValueError, match="tf_half_pixel_for_nn"):
        import_onnx(qdq)


# ------------------------------------------------------------------ refused, not guessed
BAD = [
    ("Gather", {"axis": 1}, [np.array([0, 4], np.int64)], "indices 0..4 outside"),
    ("Gather", {"axis": 4}, [np.array([0], np.int64)], "axis 4 is outside"),
    ("Transpose", {"perm": [0, 1, 1, 2]}, [], "not a permutation"),
    ("Transpose", {"perm": [1, 0, 2, 3]}, [], "moves the batch axis"),
    ("Split", {"axis": 1}, [np.array([1, 1], np.int64)], "do not split"),
    ("Slice", {}, [np.array([0], np.int64), np.array([2], np.int64), np.array([1], np.int64),
                   np.array([0], np.int64)], "a step of 0"),
    ("Pad", {}, [np.array([1, 0, 0, 0, 0, 0, 0, 0], np.int64)], "padding of the batch axis"),
    ("Squeeze", {}, [np.array([1], np.int64)], "not all of size 1"),
    ("Resize", {"mode": "nearest"}, [np.array([], F32), np.array([], F32), np.array([4, 3, 4, 4], np.int64)],
     "fix the batch"),
]


@pytest.mark.parametrize("op,attrs,consts,msg", BAD, ids=[f"{b[0]}-{b[3][:12]}" for b in BAD])
def test_bad_constants_are_refused_naming_the_node(tmp_path, op, attrs, consts, msg):
    names = [f"k{i}" for i in range(len(consts))]
    outs = ["t", "t2"] if op == "Split" else ["t"]
    node = helper.make_node(op, ["d"] + names, outs, name="the_bad_node", **attrs)
    m = _qdq_move([node], [_init(n, c) for n, c in zip(names, consts)], np.uint8, (3, 4, 4), 0.1, 3,
                  {t: (F32(0.1), 3) for t in outs})
    onnx.save(m, str(tmp_path / "bad.onnx"))
    with pytest.raises(ValueError, match=msg) as info:
        import_onnx(tmp_path / "bad.onnx")
    assert "the_bad_node" in str(info.value)


def test_supported_ops_list_the_moves():
    assert set(MOVE_OPS) <= set(SUPPORTED_OPS)
