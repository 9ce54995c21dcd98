"""fxpsim.import_qonnx: QONNX models run with their exact integer answer, bit for bit as qonnx where float32 is exact.

Each model is built in the test with ``onnx.helper`` (qonnx's custom ops in the ``qonnx.custom_op.general``
domain), shapes inferred by qonnx's own ``InferShapes``, and checked two ways:

* live against qonnx's ``execute_onnx`` (every tensor of the model, ``return_full_exec_context``): bit for bit
  where float32 is exact (power-of-two scales, small sums);
* against the independent Fraction model of ``tests/qonnx_reference.py`` everywhere: the exact value of every
  tensor fxpsim computes (codes, scale and zero point) equals the reference's, and every output is the float32
  nearest to it.

Also: qonnx's own transforms (``BatchNormToAffine``, ``GemmToMatMul``) leave fxpsim's answer unchanged; a
hardware accumulator on the imported graph (narrow, wrapping) against a Python-integer model; save/load;
``import_model`` detection; errors for unsupported ops and attributes.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fxpsim  # noqa: E402
from fxpsim.frontends.qonnx.importer import SUPPORTED_OPS, exact_values, import_qonnx  # noqa: E402
from fxpsim.graph import load_graph  # noqa: E402
from fxpsim.graph.ir import Datapath  # noqa: E402
import qonnx_reference as R  # noqa: E402

D = "qonnx.custom_op.general"
F32 = np.float32
MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


class Model:
    """A small QONNX model builder."""

    def __init__(self, opset_qonnx: int = 1):
        self.nodes, self.inits, self.k, self.opset_qonnx = [], [], 0, opset_qonnx

    def c(self, arr, dtype=F32) -> str:
        name = f"c{self.k}"
        self.k += 1
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), name))
        return name

    def node(self, op, ins, out, domain="", **attrs) -> str:
        self.nodes.append(helper.make_node(op, ins, [out], name=f"n{len(self.nodes)}_{op}", domain=domain, **attrs))
        return out

    def quant(self, x, scale, zp, bw, out, signed=1, narrow=0, mode="ROUND", op="Quant") -> str:
        return self.node(op, [x, self.c(scale), self.c(zp), self.c(bw)], out, D, signed=signed, narrow=narrow,
                         rounding_mode=mode)

    def build(self, in_shape, out="y"):
        g = helper.make_graph(self.nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(D, self.opset_qonnx)])
        return m


def qonnx_context(model, x):
    qonnx = pytest.importorskip("qonnx", reason="qonnx not installed (pip install -e '.[qonnx]')")  # noqa: F841
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    mw = ModelWrapper(model).transform(InferShapes())
    return execute_onnx(mw, {"x": x}, return_full_exec_context=True)


def check(model, x, *, live_exact=True, net=None):
    """Import, run, compare every tensor with the Fraction reference and (``live_exact``) with qonnx."""
    net = net or import_qonnx(model)
    y, _, kept = net.run(x, keep=True)
    ref = R.evaluate(model, {"x": x})
    tensors = net.meta["qonnx"]["tensors"]
    checked = 0
    for name, g in tensors.items():
        if g not in net.meta["qonnx"]["scales"] or g not in kept:
            continue
        exact = exact_values(net, g, kept[g])
        assert exact.shape == ref[name].shape, name
        bad = np.nonzero(exact != ref[name])
        assert bad[0].size == 0, f"{name}: fxpsim {exact[bad][:3]} vs reference {ref[name][bad][:3]}"
        checked += 1
    out_name = model.graph.output[0].name
    want = np.vectorize(lambda f: F32(float(f)), otypes=[F32])(ref[out_name])
    assert y.dtype == F32 and np.array_equal(y, want)
    if live_exact:
        ctx = qonnx_context(model, x)
        for name, g in tensors.items():
            if g in net.meta["qonnx"]["scales"] and g in kept and name in ctx:
                f32 = np.vectorize(lambda f: F32(float(f)), otypes=[F32])(exact_values(net, g, kept[g]))
                assert np.array_equal(f32, ctx[name]), f"{name} differs from qonnx"
        assert np.array_equal(y, ctx[out_name])
    return net, y, kept, checked


def _x(shape, seed=0, scale=4.0, grid=2.0 ** -6):
    rng = np.random.default_rng(seed)
    return (np.round(rng.standard_normal(shape) * scale / grid) * grid).astype(F32)


def _mlp(mode="ROUND", mode2="FLOOR", seed=1, pow2=True, n_in=16):
    rng = np.random.default_rng(seed)
    m = Model()
    s0 = F32(2 ** -4) if pow2 else F32(0.0371)
    sw = (2.0 ** -rng.integers(3, 6, (1, 8))).astype(F32) if pow2 else rng.uniform(0.01, 0.2, (1, 8)).astype(F32)
    m.quant("x", s0, 0, 8, "q0", mode=mode)
    m.quant(m.c(rng.standard_normal((n_in, 8))), sw, 0, 4, "wq", narrow=1)
    m.node("MatMul", ["q0", "wq"], "mm")
    bias = (rng.integers(-20, 20, 8) * 2.0 ** -7) if pow2 else rng.standard_normal(8) * 0.1
    m.node("Add", ["mm", m.c(bias)], "ad")
    m.node("Relu", ["ad"], "r")
    m.quant("r", F32(2 ** -2) if pow2 else F32(0.173), 0, 4, "q1", signed=0, mode=mode2)
    m.node("Gemm", ["q1", m.c(rng.integers(-7, 8, (3, 8)) * 0.125)], "y", transB=1)
    return m.build([6, n_in])


# ----------------------------------------------------------------------------------------- live vs qonnx
@pytest.mark.parametrize("mode", MODES)
def test_mlp_every_rounding_mode_matches_qonnx_bit_for_bit(mode):
    model = _mlp(mode, mode)
    _, _, _, checked = check(model, _x((6, 16), seed=2, grid=2.0 ** -7))
    assert checked >= 6


@pytest.mark.parametrize("bw,signed,narrow,zp", [
    (8, 1, 0, 0), (8, 1, 1, 0), (8, 0, 0, 0), (8, 0, 1, 0), (4.0, 1, 0, 0), (3.5, 1, 0, 0), (3.5, 0, 1, 0),
    (2.7, 1, 1, 0), (1, 1, 0, 0), (1, 0, 0, 0), (2, 0, 0, 1), (5, 0, 0, 7), (5, 1, 0, -3), (16, 1, 0, 0),
    (24, 0, 0, 0)])
@pytest.mark.parametrize("mode", ["ROUND", "HALF_UP", "DOWN", "CEIL"])
def test_quant_widths_signedness_narrow_zero_points(bw, signed, narrow, zp, mode):
    """Float-input Quant and a Quant of codes (after a MatMul), integer and fractional widths, bipolar 1 bit."""
    m = Model()
    m.quant("x", F32(2 ** -3), zp, bw, "q0", signed=signed, narrow=narrow, mode=mode)
    m.quant(m.c(np.eye(6)[:, ::-1] + 0.5 * np.eye(6)), F32(0.5), 0, 4, "wq")
    m.node("MatMul", ["q0", "wq"], "mm")
    m.quant("mm", F32(2 ** -4), zp, bw, "y", signed=signed, narrow=narrow, mode=mode)
    model = m.build([5, 6])
    x = _x((5, 6), seed=3, scale=20.0, grid=2.0 ** -5)
    x[0, :] = [0.0625, -0.0625, 0.1875, -0.1875, 1e6, -1e6]   # ties of x / s and values far beyond the range
    check(model, x)


def test_non_power_of_two_scales_are_exact():
    """Scales 0.0371, 0.173 and per-channel weight scales: exact rationals, checked against the Fraction model
    (qonnx's float32 arithmetic rounds here, so it is not the reference)."""
    model = _mlp("ROUND", "HALF_UP", seed=5, pow2=False)
    net, y, kept, checked = check(model, _x((6, 16), seed=6), live_exact=False)
    assert checked >= 6
    s = net.meta["qonnx"]["scales"]["mm"]
    assert s["d"] == 1 and len(s["m"]) == 8        # an integer multiplier per channel, a shift
    ctx = qonnx_context(model, _x((6, 16), seed=6))
    assert np.abs(ctx["y"] - y).max() < 1e-3           # qonnx's float32 reading is close, not exact


def test_cnn_conv_batchnorm_pools_trunc_matches_qonnx():
    rng = np.random.default_rng(7)
    m = Model()
    m.quant("x", F32(2 ** -4), 0, 8, "q0")
    w = m.quant(m.c(rng.standard_normal((4, 2, 3, 3))), (2.0 ** -rng.integers(2, 5, (4, 1, 1, 1))).astype(F32), 0,
                4, "w0", narrow=1)
    m.node("Conv", ["q0", w, m.c(rng.integers(-9, 9, 4) * 2.0 ** -8)], "cv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.node("BatchNormalization", ["cv", m.c([0.5, 1, 2, 0.25]), m.c([0.125, -0.25, 0, 0.5]), m.c([0.5, 0, -1, 0.25]),
                                  m.c([4, 1, 0.25, 16])], "bn", epsilon=0.0)
    m.node("Relu", ["bn"], "r0")
    m.quant("r0", F32(2 ** -3), 0, 4, "q1", signed=0)
    m.node("MaxPool", ["q1"], "mp", kernel_shape=[2, 2], strides=[2, 2])
    w1 = m.quant(m.c(rng.standard_normal((4, 2, 3, 3))), F32(2 ** -2), 0, 3, "w1", narrow=1)
    m.node("Conv", ["mp", w1], "cv1", kernel_shape=[3, 3], pads=[1, 0, 1, 0], strides=[1, 1], group=2)
    m.node("AveragePool", ["cv1"], "ap", kernel_shape=[2, 2], strides=[2, 2])
    m.node("Trunc", ["ap", m.c(2 ** -5), m.c(0), m.c(12), m.c(8)], "tr", D, rounding_mode="FLOOR")
    m.node("GlobalAveragePool", ["tr"], "gp")
    m.node("Flatten", ["gp"], "fl", axis=1)
    m.node("Gemm", ["fl", m.c(rng.integers(-3, 4, (4, 3)) * 0.5)], "y")
    model = m.build([3, 2, 8, 8])
    _, _, _, checked = check(model, _x((3, 2, 8, 8), seed=8))
    assert checked >= 12


def test_trunc_v2_matches_qonnx():
    m = Model(opset_qonnx=2)
    m.quant("x", F32(2 ** -4), 0, 8, "q0")
    m.quant(m.c(np.arange(-12, 12).reshape(6, 4) / 4), F32(2 ** -2), 0, 5, "wq")
    m.node("MatMul", ["q0", "wq"], "mm")
    m.node("Trunc", ["mm", m.c(2 ** -6), m.c(0), m.c(14), m.c(2 ** -2), m.c(6)], "y", D, rounding_mode="ROUND",
           signed=1, narrow=0)
    check(m.build([7, 6]), _x((7, 6), seed=9))


@pytest.mark.parametrize("case", ["float_nchw", "codes_nc", "float_nhwc"])
def test_multithreshold_matches_qonnx(case):
    rng = np.random.default_rng(10)
    m = Model()
    if case == "codes_nc":
        m.quant("x", F32(2 ** -3), 0, 6, "q0")
        m.quant(m.c(rng.standard_normal((5, 4))), F32(2 ** -2), 0, 4, "wq")
        m.node("MatMul", ["q0", "wq"], "mm")
        t = np.sort(np.round(rng.standard_normal((4, 7)) * 16) / 16, axis=1) * 4
        m.node("MultiThreshold", ["mm", m.c(t)], "y", D, out_dtype="INT4", out_scale=2.0, out_bias=-4.0)
        shape = [6, 5]
    else:
        t = np.sort(np.round(rng.standard_normal((3, 15)) * 64) / 64, axis=1)
        layout = "NHWC" if case == "float_nhwc" else "NCHW"
        m.node("MultiThreshold", ["x", m.c(t)], "y", D, out_dtype="UINT4", data_layout=layout, out_scale=0.5)
        shape = [2, 4, 4, 3] if case == "float_nhwc" else [2, 3, 4, 4]
    x = _x(shape, seed=11, scale=1.5)
    check(m.build(shape), x)


def test_bipolar_binary_network_matches_qonnx():
    rng = np.random.default_rng(12)
    m = Model()
    m.node("BipolarQuant", ["x", m.c(1.0)], "b0", D)
    m.node("BipolarQuant", [m.c(rng.standard_normal((8, 5))), m.c(0.5)], "wb", D)
    m.node("MatMul", ["b0", "wb"], "mm")
    m.node("BipolarQuant", ["mm", m.c(2.0)], "b1", D)
    m.node("Sub", ["b1", m.c(np.arange(5) * 0.5)], "sb")
    m.node("Mul", ["sb", m.c([-1.0, 2.0, 0.5, 1.0, -0.25])], "ml")
    m.node("Mul", ["ml", m.c(0.75)], "m2")
    m.node("Div", ["m2", m.c(4.0)], "dv")
    m.node("Sign", ["dv"], "y")
    check(m.build([9, 8]), _x((9, 8), seed=13))


def test_reshape_transpose_and_activation_products():
    rng = np.random.default_rng(14)
    m = Model()
    m.quant("x", F32(2 ** -3), 0, 5, "q0")
    m.node("Reshape", ["q0", m.c([-1, 3, 4], np.int64)], "rs")
    m.node("Transpose", ["rs"], "tp", perm=[0, 2, 1])
    m.node("Mul", ["tp", "tp"], "sq")
    m.quant(m.c(rng.standard_normal((3, 2))), F32(2 ** -2), 0, 4, "wq")
    m.node("MatMul", ["sq", "wq"], "mm")
    m.node("Flatten", ["mm"], "y", axis=1)
    check(m.build([4, 12]), _x((4, 12), seed=15))


# ----------------------------------------------------------------------------------------- qonnx's transforms
def test_batchnorm_to_affine_and_gemm_to_matmul_leave_the_answer_unchanged():
    pytest.importorskip("qonnx")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.batchnorm_to_affine import BatchNormToAffine
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.transformation.infer_shapes import InferShapes
    rng = np.random.default_rng(16)
    m = Model()
    m.quant("x", F32(2 ** -4), 0, 8, "q0")
    w = m.quant(m.c(rng.standard_normal((3, 2, 1, 1))), F32(2 ** -3), 0, 4, "w0")
    m.node("Conv", ["q0", w], "cv", kernel_shape=[1, 1])
    m.node("BatchNormalization", ["cv", m.c(rng.uniform(0.5, 2, 3)), m.c(rng.standard_normal(3)),
                                  m.c(rng.standard_normal(3)), m.c(rng.uniform(0.1, 3, 3))], "bn", epsilon=1e-5)
    m.quant("bn", F32(2 ** -3), 0, 6, "q1")
    m.node("Flatten", ["q1"], "fl")
    m.node("Gemm", ["fl", m.c(rng.integers(-4, 4, (12, 2)) * 0.25), m.c([0.5, -0.25])], "y")
    model = m.build([5, 2, 2, 2])
    x = _x((5, 2, 2, 2), seed=17)
    net, y, _, _ = check(model, x, live_exact=False)
    mw = ModelWrapper(model).transform(InferShapes()).transform(BatchNormToAffine()).transform(GemmToMatMul())
    ops = {n.op_type for n in mw.model.graph.node}
    assert "BatchNormalization" not in ops and "Gemm" not in ops
    net2, y2, _, _ = check(mw.model, x, live_exact=False)
    assert np.array_equal(y, y2)


# ----------------------------------------------------------------------------------------- hardware datapaths
def test_narrow_wrapping_accumulator_against_a_python_integer_model():
    model = _mlp("ROUND", "FLOOR", seed=18)
    net = import_qonnx(model)
    mm = next(n for n in net.nodes if n.op == "qonnx_matmul")
    x = _x((6, 16), seed=19, scale=8.0)
    _, traces, kept = net.run(x, Datapath(name="acc9-wrap", accumulator_bits=9, accumulator_overflow="wrap"),
                              trace=True, keep=True)
    a = kept[mm.inputs[0]].astype(np.int64)
    w = net.tensors[mm.inputs[1]].data.astype(np.int64)
    want = np.zeros((a.shape[0], w.shape[1]), np.int64)
    events = 0
    for i in range(a.shape[0]):
        for j in range(w.shape[1]):
            s = 0
            for k in range(w.shape[0]):
                t = s + int(a[i, k]) * int(w[k, j])
                s = ((t + 256) % 512) - 256
                events += s != t
            want[i, j] = s
    assert np.array_equal(kept[mm.outputs[0]], want)
    assert traces[mm.name]["overflows"] == events > 0
    # exact on the graph's own datapath: the register is as wide as the worst case, never overflows
    _, traces, kept = net.run(x, trace=True, keep=True)
    assert traces[mm.name]["overflows"] == 0
    assert np.array_equal(kept[mm.outputs[0]], a @ w)
    bound = int((np.abs(w).sum(axis=0)).max()) * 128
    assert net.accumulator_bits_needed(mm) == bound.bit_length() + 1


# ----------------------------------------------------------------------------------------- files and errors
def test_save_load_and_import_model(tmp_path):
    model = _mlp()
    path = tmp_path / "mlp_qonnx.onnx"
    onnx.save(model, str(path))
    net = fxpsim.import_model(path)
    assert net.meta["format"] == "qonnx"
    x = _x((6, 16), seed=20)
    saved = load_graph(net.save(tmp_path / "mlp"))
    assert np.array_equal(saved.run(x), net.run(x))
    assert "qonnx_matmul" in net.summary()


def test_unsupported_ops_are_listed_at_once():
    m = Model()
    m.quant("x", F32(2 ** -3), 0, 8, "q0")
    m.node("Softmax", ["q0"], "sm")
    m.node("Tanh", ["sm"], "th")
    m.node("FloatQuant", ["th"], "y", D)
    with pytest.raises(ValueError) as err:
        import_qonnx(m.build([2, 4]))
    text = str(err.value)
    for frag in ("Softmax in node 'n1_Softmax'", "Tanh in node 'n2_Tanh'", "FloatQuant", "never a float fallback"):
        assert frag in text
    assert all(op in text for op in SUPPORTED_OPS)


@pytest.mark.parametrize("build,frag", [
    (lambda m: m.node("MatMul", ["x", m.c(np.ones((4, 2)))], "y"), "reads the float input directly"),
    (lambda m: (m.quant("x", F32(0.5), 0.5, 8, "q"), m.node("Relu", ["q"], "y")), "is not an integer"),
    (lambda m: (m.quant("x", F32(0.5), 0, 8, "q", mode="STOCHASTIC")), "unknown QONNX rounding mode"),
    (lambda m: (m.quant("x", F32(0.5), 0, 8, "q"), m.node("Gemm", ["q", m.c(np.ones((4, 2)))], "y", alpha=2.0)),
     "alpha"),
    (lambda m: (m.quant("x", F32(0.5), 0, 8, "q"), m.node("Relu", ["q"], "y", extra=1)), "attribute 'extra'"),
])
def test_refused_nodes_name_the_node(build, frag):
    m = Model()
    build(m)
    with pytest.raises(ValueError, match="node 'n") as err:
        import_qonnx(m.build([2, 4]))
    assert frag in str(err.value)


# ----------------------------------------------------------------------------------------- accumulator widths
def test_accumulator_widths_finn_rule_exact_and_where_float32_is_a_bit_short():
    from fxpsim.hardware.accumulator_widths import accumulator_widths, finn_width
    m = Model()
    m.quant("x", F32(1.0), 0, 1, "q0", signed=0)                    # binary input {0, 1}
    w = np.zeros((3, 2), np.float32)
    w[:, 0] = [2 ** 25, 1, 0]                                       # column sum 2^25 + 1: float32 drops the 1
    w[:, 1] = [-5, 7, 3]
    m.quant(m.c(w), F32(1.0), 0, 27, "wq")
    m.node("MatMul", ["q0", "wq"], "y")
    model = m.build([4, 3])
    net = import_qonnx(model)
    x = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], F32)
    (r,) = accumulator_widths(net, x)
    assert r.weights_range == (-5, 2 ** 25 + 1)
    assert r.finn_weights == 27 == finn_width(-5, 2 ** 25 + 1)      # signed: ceil(log2(2^25 + 2)) + 1
    assert r.finn_float32 == 26                                     # FINN's float32 arithmetic: one bit short
    assert r.finn_datatypes == finn_width(-(2 ** 26) * 3, 3 * (2 ** 26 - 1)) == 29  # weights at INT27 extremes
    assert r.observed == (2 ** 25 + 1).bit_length() + 1 == 27
    # the MLP: widths ordered as they must be, and against qonnx's own range function
    pytest.importorskip("qonnx")
    from qonnx.core.datatype import DataType
    from qonnx.util.basic import calculate_matvec_accumulator_range
    net = import_qonnx(_mlp())
    for r, node in zip(accumulator_widths(net, _x((6, 16), seed=21)), [n for n in net.nodes if n.op == "qonnx_matmul"]):
        wmat = net.tensors[node.inputs[1]].data
        idt = DataType["INT8"] if node.attrs["x_lo"] < 0 else DataType["UINT4"]
        lo, hi = calculate_matvec_accumulator_range(wmat.astype(np.float64), idt)
        assert r.weights_range == (int(lo), int(hi))
        assert r.observed <= r.finn_weights + 1 and r.finn_weights <= r.finn_datatypes
