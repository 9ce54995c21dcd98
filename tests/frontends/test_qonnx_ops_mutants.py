"""The QONNX ops (``fxpsim/frontends/qonnx/ops.py``) on the paths the compiled-plan steps hide: the node-by-node
run (``plan=False``, the ops' ``run``) with its traces, and the float reference (``run_float``, the ops'
``run_float``), on models with nonzero zero points everywhere, every rounding mode, 1-bit Quant of codes, Trunc
with bounds, MultiThreshold of codes, dilated / grouped / strided convolutions, padded pools, and codes wide
enough to leave int16, int32 and float64.

Every expected value comes from the independent Fraction model of ``tests/qonnx_reference.py`` (and, where float32
is exact, qonnx's own ``execute_onnx``), or from hand-counted tables (traces, MACs, worst-case sums).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")

from fxpsim.frontends.qonnx.importer import exact_values, import_qonnx  # noqa: E402
from fxpsim.graph.ir import Datapath  # noqa: E402
from fxpsim.graph.registry import OPS  # noqa: E402
import qonnx_reference as R  # noqa: E402
from test_qonnx_import import D, F32, MODES, Model, _x, qonnx_context  # noqa: E402

ZERO_TRACE = {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _f64(a) -> np.ndarray:
    return np.vectorize(float, otypes=[np.float64])(a)


def three_ways(model, x, *, live=True, floats=True):
    """Run ``model`` node by node (traced) and through ``run_float``; compare every tensor with the Fraction
    model (and the output with qonnx when ``live``). Returns ``(net, traces, kept, ref)``."""
    net = import_qonnx(model)
    ref = R.evaluate(model, {"x": x})
    names = net.meta["qonnx"]["tensors"]
    scales = net.meta["qonnx"]["scales"]
    y, traces, kept = net.run(x, trace=True, keep=True, plan=False)
    compared = 0
    for q, g in names.items():
        if g in scales and g in kept:
            got = exact_values(net, g, kept[g])
            assert got.shape == ref[q].shape, q
            assert np.array_equal(got, ref[q]), f"{q}: {got.ravel()[:6]} vs {ref[q].ravel()[:6]}"
            compared += 1
    out = model.graph.output[0].name
    want = np.vectorize(lambda f: F32(float(f)), otypes=[F32])(ref[out])
    assert y.dtype == F32 and np.array_equal(y, want)
    if floats:
        yf, vals = net.run_float(x, keep=True)
        for q, g in names.items():
            if g in vals and q in ref and q != "x":
                np.testing.assert_array_equal(vals[g], _f64(ref[q]), err_msg=f"run_float: {q}")
        np.testing.assert_array_equal(yf, _f64(ref[out]))
    if live:
        assert np.array_equal(y, qonnx_context(model, x)[out])
    return net, traces, kept, compared


def _node(net, op, i=0):
    return [n for n in net.nodes if n.op == op][i]


def quant_clips(model, net, x) -> dict:
    """Per graph node of each Quant of an activation: how many rounded values :math:`\\mathrm{rnd}(x/s + z)` fall
    outside the Quant's code range (the trace's ``clipped``), from the Fraction model's input values and the
    Quant's own attributes and initializers, not from fxpsim."""
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    ref = R.evaluate(model, {"x": x})
    ref["x"] = R.F(x)
    names = net.meta["qonnx"]["tensors"]
    producer = {n.outputs[0]: n.name for n in net.nodes}
    clips = {}
    for qn in model.graph.node:
        if qn.op_type != "Quant" or qn.input[0] in inits or names.get(qn.output[0]) not in producer:
            continue
        at = {a.name: helper_attr(a) for a in qn.attribute}
        s, z, bw = (np.broadcast_to(inits[k], ref[qn.input[0]].shape) for k in qn.input[1:4])
        signed, narrow = bool(at.get("signed", 1)), bool(at.get("narrow", 0))
        count = 0
        for v, si, zi, b in zip(ref[qn.input[0]].ravel(), s.ravel(), z.ravel(), bw.ravel()):
            lo, hi = R.int_range(signed, narrow, b)
            r = R.rnd(Fraction(v) / Fraction(float(si)) + Fraction(float(zi)), at.get("rounding_mode", "ROUND"))
            count += not lo <= r <= hi
        clips[producer[names[qn.output[0]]]] = count
    return clips


def helper_attr(a):
    from onnx import helper
    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


# ----------------------------------------------------------------------------------------- zero points
def _zp_chain(mode):
    m = Model()
    m.quant("x", F32(2 ** -3), 3, 6, "q0", signed=0, mode=mode)               # float in, zp 3, codes 0..63
    m.quant("q0", F32(2 ** -2), -2, 5, "q1", narrow=1, mode=mode)              # codes in: n/d = 1/2, zp -2
    m.node("Add", ["q1", "q0"], "ad")                                          # a_zp -2, b_zp 3
    m.node("Mul", ["q0", "q1"], "ml")                                          # a_zp 3, b_zp -2
    m.node("Relu", ["q1"], "r1")                                               # x_zp -2
    m.node("Sign", ["q1"], "sg")
    m.node("Add", ["ad", "ml"], "s1")
    m.node("Sub", ["s1", "r1"], "s2")
    m.node("Add", ["s2", "sg"], "s3")
    m.quant(m.c(np.arange(36).reshape(6, 6) % 7 - 3.0), F32(1.0), 0, 3, "w1")
    m.node("MatMul", ["q1", "w1"], "mq")                                       # x_zp -2 into a MAC
    m.node("Add", ["s3", "mq"], "s3b")
    m.node("Mul", ["s3b", m.c(0.75)], "s4")                                    # a rescale
    m.node("Div", ["s4", m.c(2.0)], "s5")
    m.node("Add", ["s5", m.c(np.arange(6) * 0.25 - 0.5)], "s6")                # constant operands
    m.node("Sub", ["s6", m.c([0.5, -0.25, 1.0, 0.0, 2.0, -1.0])], "s7")
    m.node("Mul", ["s7", m.c([-1.0, 2.0, 0.5, 1.0, -0.25, 3.0])], "s8")
    m.node("Reshape", ["s8", m.c([-1, 2, 3], np.int64)], "rs")
    m.node("Transpose", ["rs"], "tp", perm=[0, 2, 1])
    m.node("Reshape", ["tp", m.c([-1, 6], np.int64)], "s9")
    m.quant(m.c(np.arange(-9, 9).reshape(6, 3) / 4), F32(2 ** -2), 0, 5, "wq")
    m.node("MatMul", ["s9", "wq"], "mm")
    m.quant("mm", F32(4.0), 1, 4, "y", mode=mode)                              # scale 4: e = 2; zp 1
    return m.build([7, 6])


def _zp_input():
    x = _x((7, 6), seed=21, scale=2.0, grid=2.0 ** -4)
    x[0] = [-0.375, -0.3125, -0.25, -0.1875, 0.0625, 0.1875]                   # codes 0 .. 4.5: ties, clipping at 0
    x[1] = [7.5, 8.0, 6.0625, 4.4375, -1e3, 1e3]                                # saturation at 63 and 0
    x[2] = [0.3125, 0.4375, 0.5625, -0.0625, 1.4375, 2.25]                      # ties of q0 -> q1 (odd codes)
    return x


@pytest.mark.parametrize("mode", MODES)
def test_zero_points_on_every_path_node_by_node_and_in_float(mode):
    model, x = _zp_chain(mode), _zp_input()
    net, traces, kept, compared = three_ways(model, x)
    assert compared >= 12
    n = 7
    want_adds = {"n10_MatMul": 6 * 6 * n, "n21_MatMul": 6 * 3 * n}
    clips = quant_clips(model, net, x)
    assert len(clips) == 3 and clips[_node(net, "qonnx_quant", 0).name] >= 4     # x[1]: 1e3, -1e3, ... saturate
    for node in net.nodes:
        t = traces[node.name]
        want = want_adds.get(node.name, 6 * n if node.op == "qonnx_add" else 0)
        assert t == {**ZERO_TRACE, "adds": want, "clipped": clips.get(node.name, 0)}, (node.name, t)
    mq, mm = _node(net, "qonnx_matmul", 0), _node(net, "qonnx_matmul", 1)
    assert (mq.name, mm.name) == ("n10_MatMul", "n21_MatMul")
    assert (net.macs(mq), net.macs(mm)) == (6 * 6, 6 * 3)
    # worst cases by hand: q1 holds codes -16..15 around zp -2, so |q - z| <= 17; the weight column sums of
    # |arange(36) % 7 - 3| are 10, 11, 12, 11, 10, 9: 17 * 12 = 204 (8 bits and a sign)
    assert OPS["qonnx_matmul"].worst_case_sum(net, mq) == 204
    assert net.accumulator_bits_needed(mq) == 9


# ----------------------------------------------------------------------------------------- bipolar
def _bipolar_model():
    m = Model()
    m.node("BipolarQuant", ["x", m.c(1.0)], "b0", D)                           # float in
    m.quant("x", F32(2 ** -2), 3, 6, "q0", signed=0)                           # codes 0..63 around 3
    m.node("BipolarQuant", ["q0", m.c(0.5)], "b1", D)                          # codes in: x_zp 3
    m.quant("x", F32(0.5), 1, 1, "b2")                                         # 1-bit signed Quant, float in, zp 1
    m.quant(m.c(np.array([[1.5], [-0.75], [0.375]] * 2)), F32(0.375), 0, 4, "wq")   # codes 4, -2, 1 (scale 3/8)
    m.node("MatMul", ["q0", "wq"], "mm")                                       # scale 3/32, x_zp 3
    m.quant("mm", F32(9 / 64), -2, 1, "b3")                                    # 1-bit of codes: n/d = 2/3, zp -2
    m.node("Add", ["b0", "b1"], "a0")
    m.node("Add", ["a0", "b2"], "a1")
    m.node("Add", ["a1", "b3"], "y")
    return m.build([6, 6])


def test_one_bit_quant_of_codes_and_floats_with_zero_points():
    """QONNX's 1-bit signed Quant is bipolar: +1 where x / s + z >= 0 (ties at exactly 0 included)."""
    x = np.array([[-0.75, -0.5, -0.25, 0.0, 0.25, 0.5],      # b2: x / 0.5 + 1 = -0.5, 0, 0.5, ...: the tie at 0
                  [-0.25, -0.25, -0.25, 0.25, 0.0, 0.0],
                  [0.0, 0.0, 0.75, 0.0, 0.0, 0.0],                  # mm code 3 (the tie of b3)
                  [-0.5, -0.25, 0.0, 0.25, 0.5, -0.25],
                  [1.0, -1.0, 2.0, -2.0, 8.0, -8.0],
                  [-0.0, 0.75, -0.75, 0.125, -0.125, 3.0]], F32)
    net, traces, kept, compared = three_ways(_bipolar_model(), x)
    assert compared >= 8
    mm, b3 = net.meta["qonnx"]["tensors"]["mm"], net.meta["qonnx"]["tensors"]["b3"]
    # y = mm / s + z = 2/3 (mm codes) - 2 is exactly 0 where the mm code is 3: the tie goes to +1
    v = kept[mm].astype(np.int64).ravel()
    assert np.any(v == 3) and np.any(v < 3) and np.any(v > 3)
    b = kept[b3].astype(np.int64).ravel()
    assert b.tolist() == [1 if 2 * int(c) - 6 >= 0 else -1 for c in v]


# ----------------------------------------------------------------------------------------- Trunc
def _trunc_v1(mode):
    m = Model()
    m.quant("x", F32(2 ** -3), 5, 8, "q0", signed=0)                           # codes 0..255 around 5
    m.node("Trunc", ["q0", m.c(2 ** -4), m.c(3), m.c(8), m.c(5)], "y", D, rounding_mode=mode)   # n/d 2, shift 3
    return m.build([5, 8])


def _trunc_v2(mode):
    m = Model(opset_qonnx=2)
    m.quant("x", F32(2 ** -3), -5, 8, "q0")                                    # codes -128..127 around -5
    m.node("Trunc", ["q0", m.c(2 ** -2), m.c(4), m.c(8), m.c(1.0), m.c(4)], "y", D, rounding_mode=mode,
           signed=1, narrow=1)                                                 # n/d 1/2, shift 2, bounds [-7, 7]
    return m.build([5, 8])


def _trunc_input():
    x = _x((5, 8), seed=31, scale=6.0, grid=2.0 ** -3)
    x[0] = np.arange(8) * 0.125 - 0.25                       # consecutive codes: every remainder of the shifts
    x[1] = np.arange(8) * -0.125 + 0.125
    x[2] = [1e3, -1e3, 15.875, -16.0, 3.5, -3.5, 4.5, -4.625]    # both bounds of v2 and saturated inputs
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("build", [_trunc_v1, _trunc_v2])
def test_trunc_with_zero_points_shift_and_bounds(build, mode):
    model, x = build(mode), _trunc_input()
    net, traces, kept, compared = three_ways(model, x)
    assert compared == 2
    tr = _node(net, "qonnx_trunc")
    clipped = 0
    if build is _trunc_v2:                      # rnd(rnd(v / s + z) / k) outside [-7, 7]: s 1/4, z 4, k = 1 / s
        lo, hi = R.int_range(True, True, 4)
        for v in R.evaluate(model, {"x": x})["q0"].ravel():
            clipped += not lo <= R.rnd(Fraction(R.rnd(Fraction(v) * 4 + 4, "ROUND")) / 4, mode) <= hi
        assert clipped >= 2                     # x[2]: 1e3 and -1e3 at least
    assert traces[tr.name] == {**ZERO_TRACE, "clipped": clipped}
    if build is _trunc_v2:
        assert tuple(tr.attrs["bounds"]) == (-7, 7)
        codes = kept[tr.outputs[0]].astype(np.int64)
        assert codes.min() <= -7 + 1 and codes.max() >= 7 - 1         # both bounds reached (output zp is 1)


# ----------------------------------------------------------------------------------------- MultiThreshold
@pytest.mark.parametrize("case", ["codes_zp", "float_nchw_one_row", "float_nchw_per_channel"])
def test_multithreshold_of_codes_with_zero_points_and_an_output_bias(case):
    m = Model()
    if case == "codes_zp":
        m.quant("x", F32(2 ** -3), 3, 6, "q0", signed=0)                       # codes 0..63 around 3
        t = np.array([[-0.375, -0.125, 0.0, 0.3, 1.0], [-1.0, 0.125, 0.125, 2.0, 4.0], [0.5, 0.625, 0.75, 0.875, 7.0]])
        m.node("MultiThreshold", ["q0", m.c(t)], "y", D, out_dtype="INT4", out_scale=0.5, out_bias=-2.0)
        shape = [6, 3]
    else:
        t = np.array([[-0.5, -0.25, 0.0, 0.25, 0.5, 1.5]])                    # one row for every channel
        if case == "float_nchw_per_channel":                                   # C = 3 rows (W = 2)
            t = np.concatenate([t, t + 0.125, t[:, ::-1] * -2 - 0.375])
        m.node("MultiThreshold", ["x", m.c(t)], "y", D, out_dtype="UINT4", data_layout="NCHW", out_scale=2.0,
               out_bias=-4.0)
        shape = [2, 3, 2, 2]
    x = _x(shape, seed=41, scale=1.0, grid=2.0 ** -3)
    x.reshape(-1)[:12] = [-0.375, -0.125, 0.0, 0.25, 0.3125, 1.0, -0.5, 0.125, 2.0, 0.5, 0.75, -0.25]   # ties
    net, traces, kept, compared = three_ways(m.build(shape), x)
    assert traces[_node(net, "qonnx_threshold").name] == ZERO_TRACE


# ----------------------------------------------------------------------------------------- convolutions, pools
_CNN_W = np.random.default_rng(51).integers(-3, 4, (4, 2, 3, 2))                  # weight codes: O 4, C/g 2, 3 x 2


def _cnn():
    m = Model()
    m.quant("x", F32(2 ** -3), -3, 6, "q0")                                    # signed codes around -3
    w0 = m.quant(m.c(_CNN_W * 0.5), F32(0.5), 0, 4, "w0")
    m.node("Conv", ["q0", w0], "cv", kernel_shape=[3, 2], pads=[2, 1, 1, 0], strides=[2, 1], dilations=[1, 2],
           group=2)
    m.node("MaxPool", ["cv"], "mp", kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1])
    m.node("AveragePool", ["mp"], "ap", kernel_shape=[2, 2], strides=[1, 1], pads=[1, 0, 0, 1], count_include_pad=1)
    m.quant("ap", F32(2 ** -4), 2, 8, "q1")
    w1 = m.quant(m.c(_CNN_W[:, :, :2, :1].reshape(4, 4, 1, 1) * 0.25), F32(0.25), 0, 4, "w1")
    m.node("Conv", ["q1", w1], "cv1", kernel_shape=[1, 1], strides=[1, 2])
    w2 = m.quant(m.c(_CNN_W[:2] * 0.5), F32(0.5), 0, 4, "w2")                      # O 2, C/g 2, 3 x 2 taps
    m.node("Conv", ["cv1", w2], "cv2", kernel_shape=[3, 2], pads=[2, 0, 2, 0], dilations=[2, 1], group=2)
    m.node("MaxPool", ["cv2"], "y", kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1])
    return m.build([3, 4, 7, 6])


def test_grouped_dilated_strided_conv_and_padded_pools():
    x = _x((3, 4, 7, 6), seed=52, scale=2.0, grid=2.0 ** -3)
    x[0] = -abs(x[0]) - 0.125                               # all negative: padding must lose every max
    net, traces, kept, compared = three_ways(_cnn(), x)
    assert compared >= 6
    conv = _node(net, "qonnx_conv")
    out = net.tensors[conv.outputs[0]].shape
    # hand geometry: H (7 + 2 + 1 - 3) // 2 + 1 = 4, W (6 + 1 - 3) // 1 + 1 = 5 (dilated width 3)
    assert out == (4, 4, 5)
    assert net.macs(conv) == 4 * 4 * 5 * (2 * 3 * 2)
    assert traces[conv.name] == {**ZERO_TRACE, "adds": 3 * 4 * 4 * 5 * 12}
    # worst case: q0 holds codes -32..31 around -3, so |q0 - z| <= max(29, 34) = 34
    per_out = [sum(abs(int(v)) for v in _CNN_W[o].ravel()) for o in range(4)]
    assert OPS["qonnx_conv"].worst_case_sum(net, conv) == 34 * max(per_out)
    ap = _node(net, "qonnx_avgpool")
    n, c, h, wd = (3,) + net.tensors[ap.outputs[0]].shape
    assert traces[ap.name] == {**ZERO_TRACE, "adds": n * c * h * wd * 4}
    for mp in [nd for nd in net.nodes if nd.op == "qonnx_maxpool"]:
        assert traces[mp.name] == ZERO_TRACE


def test_conv_on_a_narrow_wrapping_accumulator():
    """An 8-bit wrapping accumulator: the conv's codes are its exact sums (the Fraction model over the output
    scale 2^-4) wrapped to 8 bits, whatever the order of the adds (wrapping is modular)."""
    model, x = _cnn(), _x((3, 4, 7, 6), seed=53, scale=3.0, grid=2.0 ** -3)
    net = import_qonnx(model)
    dp = Datapath(name="acc8-wrap", accumulator_bits=8, accumulator_overflow="wrap")
    _, traces, kept = net.run(x, dp, trace=True, keep=True, plan=False)
    exact = R.evaluate(model, {"x": x})["cv"] * 16
    assert all(v.denominator == 1 for v in exact.ravel())
    want = np.vectorize(lambda v: (int(v) + 128) % 256 - 128, otypes=[np.int64])(exact)
    conv = _node(net, "qonnx_conv")
    assert np.array_equal(kept[conv.outputs[0]].astype(np.int64), want)
    assert np.any(want != np.vectorize(int, otypes=[np.int64])(exact)) and traces[conv.name]["overflows"] > 0


# ----------------------------------------------------------------------------------------- wide codes
def _wide_matmul():
    m = Model()
    m.quant("x", F32(1.0), 0, 32, "q0", signed=0)                              # codes 0 .. 2^32 - 1
    m.quant(m.c([[1.0, -2.0], [3.0, 1.0]]), F32(1.0), 0, 3, "wq")
    m.node("MatMul", ["q0", "wq"], "y")
    return m.build([2, 2])


@pytest.mark.parametrize("top", [2 ** 15 - 1, 2 ** 15, 40000, 2 ** 31 - 128, 2 ** 31, 3 * 2 ** 30])
def test_matmul_operands_at_the_int16_and_int32_boundaries(top):
    """The MAC operands are narrowed to int16 / int32 / int64 by their largest magnitude: each boundary once."""
    x = np.array([[top, 7.0], [5.0, 1.0]], F32)
    assert float(x[0, 0]) == top                                               # exact in float32
    net, traces, kept, _ = three_ways(_wide_matmul(), x, live=False)
    y = kept[net.meta["qonnx"]["tensors"]["y"]].astype(object)
    assert y.tolist() == [[top + 21, -2 * top + 7], [8, -9]]                  # by hand: x @ [[1, -2], [3, 1]]


def test_add_and_mul_of_codes_beyond_float64_and_int64_products():
    """An Add whose term needs 62 bits (ka = 2^55) and a Mul whose product reaches 2^62, both beyond float64's 53
    bits: Python-integer arithmetic, then the exact float32 of the output."""
    m = Model()
    m.quant("x", F32(2.0 ** 52), 0, 8, "a")                                    # coarse: codes of x / 2^52
    m.quant("x", F32(2 ** -3), 0, 8, "b")                                      # fine: saturates at 127
    m.node("Add", ["a", "b"], "ab")                                            # ka = 2^55, kb = 1
    m.quant("ab", F32(2.0 ** 52), 0, 8, "y")
    x = np.array([[127 * 2.0 ** 52, -100 * 2.0 ** 52, 0.375, -1.25, 5 * 2.0 ** 52 + 2.0 ** 50]], F32)
    net, traces, kept, _ = three_ways(m.build([1, 5]), x, live=False)
    ab = kept[net.meta["qonnx"]["tensors"]["ab"]].astype(object).ravel().tolist()
    assert ab == [127 * 2 ** 55 + 127, -100 * 2 ** 55 - 128, 3, -10, 5 * 2 ** 55 + 127]
    assert traces[_node(net, "qonnx_add").name] == {**ZERO_TRACE, "adds": 5}

    m = Model()
    m.quant("x", F32(2 ** -15), 0, 16, "q0")                                   # codes -2^15 .. 2^15 - 1
    m.quant(m.c([[3.0 * 32769], [3.0 * 32767]]), F32(3.0), 0, 17, "wq")        # codes 32769, 32767; scale 3
    m.node("MatMul", ["q0", "wq"], "mm")                                       # codes -2^31 .. 2^31 - 2^16
    m.node("Mul", ["mm", "mm"], "y")                                           # scale 9 2^-30: m = 9 on dequantize
    x = np.array([[-1.0, -1.0], [32767 / 32768, 32765 / 32768], [0.5, -0.5]], F32)
    net, traces, kept, _ = three_ways(m.build([3, 2]), x, live=False)
    mm = [-2 ** 31, 32767 * 32769 + 32765 * 32767, 2 ** 14 * 2]
    assert kept[net.meta["qonnx"]["tensors"]["mm"]].astype(object).ravel().tolist() == mm
    assert kept[net.meta["qonnx"]["tensors"]["y"]].astype(object).ravel().tolist() == [v * v for v in mm]


def test_unsigned_sums_up_to_63_bits_and_a_refusal_at_64():
    """Codes above 32 bits are held in int64: an unsigned Add of 63 bits runs exactly, one of 64 bits (its largest
    sum 255 2^56 + 255 >= 2^63) is refused at import instead of failing at run time with an OverflowError."""
    def build(coarse):
        m = Model()
        m.quant("x", F32(coarse), 0, 8, "a", signed=0)
        m.quant("x", F32(2 ** -3), 0, 8, "b", signed=0)
        m.node("Add", ["a", "b"], "y")
        return m.build([1, 3])

    x = np.array([[255 * 2.0 ** 52, 3.0, 200 * 2.0 ** 52]], F32)
    net, _, kept, _ = three_ways(build(2.0 ** 52), x, live=False)               # ka = 2^55: up to 2^63 - 2^55 + 255
    assert kept[net.meta["qonnx"]["tensors"]["y"]].astype(object).ravel().tolist() == \
        [255 * 2 ** 55 + 255, 24, 200 * 2 ** 55 + 255]
    with pytest.raises(ValueError, match=r"tensor 'y': its values span 64 unsigned bits; .* 63 unsigned bits at most"):
        import_qonnx(build(2.0 ** 53))
