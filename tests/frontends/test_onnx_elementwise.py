"""Elementwise ops of quantized ONNX models as tables per code (``onnx_lut``): Sigmoid, HardSigmoid, HardSwish,
LeakyRelu, Div / Sub / Pow by constants, QLinearSigmoid, QLinearLeakyRelu (issue 22).

The reference is onnxruntime itself, run live: models made by ``quantize_static`` (QDQ and QOperator, uint8 and
int8 activations) on float graphs built here, every output compared; hand-built QDQ graphs fed every input code
so that every table entry is compared; and the float32 kernels alone on 300k floats."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.datapath.onnxruntime import elementwise as E  # noqa: E402
from fxpsim.frontends.onnx.importer import import_onnx  # noqa: E402
from ort_session import ort_session  # noqa: E402

F32 = np.float32


def _model(nodes, inits, in_type=TensorProto.FLOAT, out_type=TensorProto.FLOAT, shape=("N", 16), outputs=("y",),
           ms=False):
    x = helper.make_tensor_value_info("x", in_type, list(shape))
    ys = [helper.make_tensor_value_info(o, out_type, None) for o in outputs]
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", [x], ys, list(inits)), opset_imports=ops)
    m.ir_version = 8
    return m


_session = ort_session


def _run_graph(g, x):
    y = g.run(x)
    return y if isinstance(y, (list, tuple)) else [y]


# ------------------------------------------------------------------ the float32 kernels alone
def _floats():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.standard_normal(200_000).astype(F32) * 4, rng.uniform(-20, 20, 100_000).astype(F32),
                           np.array([0, -0.0, 18, -18, 19, -19, 3, -3, 2.9999998, 1e-30, -1e-30], F32)])


KERNELS = [("Sigmoid", {}, [], [{"op": "Sigmoid"}]),
           ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, [], [{"op": "HardSigmoid", "alpha": 0.2, "beta": 0.5}]),
           ("HardSigmoid", {"alpha": 0.3, "beta": 0.1}, [], [{"op": "HardSigmoid", "alpha": 0.3, "beta": 0.1}]),
           ("HardSwish", {}, [], [{"op": "HardSwish"}]),
           ("LeakyRelu", {"alpha": 0.1}, [], [{"op": "LeakyRelu", "alpha": 0.1}]),
           ("Div", {}, [3.0], [{"op": "Div", "c": 3.0}]), ("Div", {}, [0.7], [{"op": "Div", "c": 0.7}]),
           ("Sub", {}, [0.5], [{"op": "Sub", "c": 0.5}]), ("Pow", {}, [2.0], [{"op": "Pow", "exponent": 2.0}]),
           ("Pow", {}, [3.0], [{"op": "Pow", "exponent": 3.0}])]


@pytest.mark.parametrize("op,attrs,consts,program", KERNELS, ids=[f"{k[0]}{k[2]}{k[1]}" for k in KERNELS])
def test_float32_kernels_match_onnxruntime_on_300k_inputs(tmp_path, op, attrs, consts, program):
    inits = [numpy_helper.from_array(np.array(c, F32), f"c{i}") for i, c in enumerate(consts)]
    m = _model([helper.make_node(op, ["x"] + [f"c{i}" for i in range(len(consts))], ["y"], **attrs)], inits,
               shape=("N",))
    onnx.save(m, str(tmp_path / "k.onnx"))
    xs = _floats()
    sess = _session(tmp_path / "k.onnx")
    for n in (len(xs), 1, 3, 5, 8, 17, 33):      # SIMD bodies and tails
        want = sess.run(None, {"x": xs[:n]})[0]
        got = E.run_program(xs[:n], program)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32), err_msg=f"{op} length {n}")


def test_sigmoid_kernel_is_not_the_exact_logistic():
    """The MLAS approximation differs from a correctly rounded logistic: the kernel is not a stand-in."""
    xs = _floats()
    exact = (1.0 / (1.0 + np.exp(-xs.astype(np.float64)))).astype(F32)
    assert np.count_nonzero(E.logistic(xs) != exact) > 1000


# ------------------------------------------------------------------ every code through a QDQ chain
CHAINS = {
    "sigmoid": [("Sigmoid", {}, [])],
    "leaky": [("LeakyRelu", {"alpha": 0.1}, [])],
    "hardsigmoid_hardswish": [("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, []), ("HardSwish", {}, [])],
    "div_sub_pow": [("Div", {}, [3.0]), ("Sub", {}, [0.5]), ("Pow", {}, [2.0])],
    "hardswish_relu_mul": [("HardSwish", {}, []), ("Relu", {}, []), ("Mul", {}, [1.5])],
    "const_first_sub_div": [("Sub", {}, [0.25], True), ("Div", {}, [-2.0], True)],
}


def _chain_model(chain, x_dtype, sx, zx, sy, zy):
    tp = TensorProto.UINT8 if x_dtype == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(sx, F32), "sx"), numpy_helper.from_array(np.array(zx, x_dtype), "zx"),
             numpy_helper.from_array(np.array(sy, F32), "sy"), numpy_helper.from_array(np.array(zy, x_dtype), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["d"], name="dq")]
    prev = "d"
    for i, step in enumerate(chain):
        op, attrs, consts = step[:3]
        first = len(step) > 3 and step[3]
        names = [f"k{i}_{j}" for j in range(len(consts))]
        inits += [numpy_helper.from_array(np.array(c, F32), nm) for c, nm in zip(consts, names)]
        ins = names + [prev] if first else [prev] + names
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"{op.lower()}{i}", **attrs))
        prev = f"t{i}"
    nodes.append(helper.make_node("QuantizeLinear", [prev, "sy", "zy"], ["y"], name="q"))
    return _model(nodes, inits, in_type=tp, out_type=tp, shape=("N", 256))


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_every_code_through_a_qdq_chain_matches_onnxruntime(tmp_path, chain, dtype):
    rng = np.random.default_rng(len(chain))
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(1, 256)
    for k in range(6):
        sx, sy = F32(rng.uniform(0.005, 0.2)), F32(rng.uniform(0.002, 0.05))
        zx, zy = (int(rng.integers(info.min, info.max + 1)) for _ in range(2))
        path = tmp_path / f"{chain}_{k}.onnx"
        onnx.save(_chain_model(CHAINS[chain], dtype, sx, zx, sy, zy), str(path))
        want = _session(path).run(None, {"x": x})[0]
        g = import_onnx(path)
        assert [n.op for n in g.nodes] == ["onnx_lut"]
        np.testing.assert_array_equal(_run_graph(g, x)[0], want, err_msg=f"{chain} {dtype.__name__} set {k}")


def test_qoperator_qlinear_sigmoid_and_leaky_relu_every_code(tmp_path):
    for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.15})):
        for dtype, tp in ((np.uint8, TensorProto.UINT8), (np.int8, TensorProto.INT8)):
            info = np.iinfo(dtype)
            x = np.arange(info.min, info.max + 1).astype(dtype).reshape(2, 128)
            inits = [numpy_helper.from_array(np.array(0.07, F32), "sx"),
                     numpy_helper.from_array(np.array(info.min + 100, dtype), "zx"),
                     numpy_helper.from_array(np.array(1 / 250, F32), "sy"),
                     numpy_helper.from_array(np.array(info.min + 3, dtype), "zy")]
            node = helper.make_node(op, ["x", "sx", "zx", "sy", "zy"], ["y"], name="lut", domain="com.microsoft",
                                    **attrs)
            path = tmp_path / f"{op}_{dtype.__name__}.onnx"
            onnx.save(_model([node], inits, tp, tp, shape=("N", 128), ms=True), str(path))
            want = _session(path).run(None, {"x": x})[0]
            np.testing.assert_array_equal(_run_graph(import_onnx(path), x)[0], want, err_msg=f"{op} {dtype}")


# ------------------------------------------------------------------ quantize_static on float graphs
def _float_block(rng):
    """MatMul -> Sigmoid -> HardSigmoid -> HardSwish -> LeakyRelu -> Div -> Sub -> Pow -> MatMul (16 wide)."""
    w = [numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(F32), f"W{i}") for i in range(2)]
    c = [numpy_helper.from_array(np.array(v, F32), n) for v, n in ((3.0, "c3"), (0.5, "c05"), (2.0, "c2"))]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["m"], name="mm0"),
             helper.make_node("Sigmoid", ["m"], ["a"], name="sig"),
             helper.make_node("HardSigmoid", ["a"], ["b"], name="hsig", alpha=0.2, beta=0.5),
             helper.make_node("HardSwish", ["b"], ["c"], name="hsw"),
             helper.make_node("LeakyRelu", ["c"], ["d"], name="lrelu", alpha=0.1),
             helper.make_node("Div", ["d", "c3"], ["e"], name="div"),
             helper.make_node("Sub", ["e", "c05"], ["f"], name="sub"),
             helper.make_node("Pow", ["f", "c2"], ["g"], name="pow"),
             helper.make_node("MatMul", ["g", "W1"], ["y"], name="mm1")]
    return _model(nodes, w + c)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_quantize_static_block_matches_onnxruntime(tmp_path, fmt, act):
    q = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization not installed")
    rng = np.random.default_rng(3)
    onnx.save(_float_block(rng), str(tmp_path / "f.onnx"))

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": (rng.standard_normal((4, 16)) * 2).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / f"q_{fmt}_{act}.onnx"
    q.quantize_static(str(tmp_path / "f.onnx"), str(out), Reader(), quant_format=getattr(q.QuantFormat, fmt),
                      activation_type=getattr(q.QuantType, act), weight_type=q.QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"HardSigmoid", "HardSwish", "Div", "Sub", "Pow"} <= ops          # what quantize_static leaves in float
    g = import_onnx(out, cpu="host")
    luts = [n for n in g.nodes if n.op == "onnx_lut"]
    assert len(luts) == 4 and [s["op"] for s in luts[-1].attrs["program"]] == ["Div", "Sub", "Pow"]
    sess = _session(out)
    for b in (1, 7, 64):
        x = (rng.standard_normal((b, 16)) * 2.5).astype(F32)
        np.testing.assert_array_equal(_run_graph(g, x)[0], sess.run(None, {"x": x})[0], err_msg=f"batch {b}")


# ------------------------------------------------------------------ refused, not guessed
def test_pow_by_other_exponents_and_activation_pairs_are_refused(tmp_path):
    for consts, msg in (([1.5], "Pow by 1.5"),):
        m = _chain_model([("Pow", {}, consts)], np.uint8, 0.1, 3, 0.05, 7)
        onnx.save(m, str(tmp_path / "p.onnx"))
        with pytest.raises(ValueError, match=msg):
            import_onnx(tmp_path / "p.onnx")
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
             helper.make_node("Div", ["d", "d"], ["t"], name="div_self"),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["y"], name="q")]
    onnx.save(_model(nodes, inits, TensorProto.UINT8, TensorProto.UINT8), str(tmp_path / "d.onnx"))
    with pytest.raises(ValueError, match=r"div_self.*scalar constant"):
        import_onnx(tmp_path / "d.onnx")


def test_a_chain_without_quantize_after_it_is_refused(tmp_path):
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
             helper.make_node("Sigmoid", ["d"], ["y"], name="sig_out")]
    onnx.save(_model(nodes, inits, TensorProto.UINT8), str(tmp_path / "o.onnx"))
    with pytest.raises(ValueError, match=r"graph output 'y'.*sig_out"):
        import_onnx(tmp_path / "o.onnx")


def test_lut_node_on_another_datapath_and_narrow_tables(tmp_path):
    """On a non-native datapath the table's final rounding follows the datapath; a narrower table is refused."""
    import fxpsim
    m = _chain_model(CHAINS["sigmoid"], np.uint8, 0.05, 128, 1 / 256, 0)
    onnx.save(m, str(tmp_path / "s.onnx"))
    g = import_onnx(tmp_path / "s.onnx")
    x = np.arange(256, dtype=np.uint8).reshape(1, 256)
    dp = fxpsim.preset("int8-acc16-sat")
    y = _run_graph(g, x)[0].astype(np.int64)
    try:
        y2 = np.asarray(g.run(x, dp)).astype(np.int64)
    except ValueError as exc:       # a preset with a narrow activation table
        assert "activation_lut_entries" in str(exc)
        return
    # an independent float64 model of the table: dequantize, MLAS logistic, divide, round by the preset's mode
    v = E.logistic((np.arange(256) - 128).astype(F32) * F32(0.05)).astype(np.float64) * 256
    assert np.max(np.abs(y2 - np.clip(np.floor(v + 0.5), 0, 255))) <= 1 and np.max(np.abs(y2 - y)) <= 1
