"""Tests of fxpsim.datapath.integer_ops: int8 FC / conv / depthwise / add / average-pool kernels.

Oracle: loop implementations written here from the layer definitions, on the accumulator
model of ``tests/reference.py`` and its gemmlowp/TFLite section
(exact ``Fraction`` rounding, no int64 tricks).  The TFLite models themselves are in
``test_tflite_vectors.py``.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath.integer_ops import (
    IntegerResult, quantized_add, quantized_average_pool2d, quantized_conv2d, quantized_depthwise_conv2d,
    quantized_fully_connected,
)
from fxpsim.datapath.requantize import Requantizer, quantize_multiplier
from reference import accumulate, accumulate_tree, overflow_int, round_fraction
from reference import ref_mbqm, ref_quantize_multiplier, ref_wrap32

# --------------------------------------------------------------------------- reference model
def ref_requant(acc: int, rq: Requantizer, ch: int) -> int:
    pick = lambda t: t[ch] if len(t) > 1 else t[0]  # noqa: E731
    if rq.kind in ("double", "single"):
        return ref_mbqm(acc, pick(rq.multiplier), pick(rq.shift), rq.kind)
    if rq.kind == "shift":
        v = round_fraction(Fraction(acc) * Fraction(2) ** pick(rq.shift), rq.rounding.value)
    else:
        v = round_fraction(Fraction(float(acc) * pick(rq.scale)), rq.rounding.value)
    return overflow_int(v, 32, True, "saturate")[0]


# --------------------------------------------------------------------------- layer kernels vs loops
def ref_dot(products, bias, acc_bits, overflow, bias_at, order="sequential"):
    init = bias if bias_at == "init" else 0
    a, n, _ = (accumulate if order == "sequential" else accumulate_tree)(products, init, acc_bits, True, overflow)
    if bias_at == "end":
        a, o = overflow_int(a + bias, acc_bits, True, overflow)
        n += o
    return a, n


def ref_out(a, rq, ch, zp, lo, hi):
    return min(hi, max(lo, ref_requant(a, rq, ch) + zp))


def make_requant(kind, n_out, rng):
    if kind in ("double", "single"):
        m, s = quantize_multiplier(rng.uniform(2e-4, 0.05, size=n_out), single_rounding=kind == "single")
        return Requantizer(kind, multiplier=m, shift=s)
    if kind == "shift":
        return Requantizer("shift", shift=rng.integers(-9, -4, size=n_out), rounding="half_even")
    return Requantizer("float", scale=rng.uniform(2e-4, 0.05, size=n_out), rounding="half_away")


settings_kernel = dict(
    kind=st.sampled_from(["double", "single", "shift", "float"]),
    acc_bits=st.sampled_from([12, 16, 32]),
    overflow=st.sampled_from(["wrap", "saturate"]),
    bias_at=st.sampled_from(["end", "init"]),
    seed=st.integers(0, 2 ** 32 - 1),
)


@given(n=st.integers(1, 3), k=st.integers(1, 12), o=st.integers(1, 4), order=st.sampled_from(["sequential", "tree"]),
       per_channel_zp=st.booleans(), **settings_kernel)
def test_fully_connected_vs_loop(n, k, o, order, per_channel_zp, kind, acc_bits, overflow, bias_at, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    w = rng.integers(-127, 128, size=(o, k)).astype(np.int8)
    lim = 1 << (acc_bits - 2)
    bias = rng.integers(-lim, lim, size=o).astype(np.int32)
    x_zp, out_zp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    w_zp = rng.integers(-3, 4, size=o) if per_channel_zp else int(rng.integers(-3, 4))
    rq = make_requant(kind, o, rng)
    res = quantized_fully_connected(x, w, bias, requant=rq, x_zp=x_zp, w_zp=w_zp, out_zp=out_zp, act_min=-100,
                                    act_max=120, acc=acc_bits, overflow=overflow, bias_at=bias_at, order=order)
    assert isinstance(res, IntegerResult) and res.out.dtype == np.int8 and res.out.shape == (n, o)
    total = 0
    for i in range(n):
        for j in range(o):
            zw = int(w_zp[j]) if per_channel_zp else w_zp
            prods = [(int(x[i, t]) - x_zp) * (int(w[j, t]) - zw) for t in range(k)]
            a, ovf = ref_dot(prods, int(bias[j]), acc_bits, overflow, bias_at, order)
            total += ovf
            assert res.acc[i, j] == a
            assert res.out[i, j] == ref_out(a, rq, j, out_zp, -100, 120)
    assert res.overflows == total


def ref_conv(x, w, groups, stride, pads, dilation, x_zp, bias, acc_bits, overflow, bias_at):
    """Loop conv on TFLite layouts semantics: x NHWC, w (O, KH, KW, C/groups); taps in (u, v, c) order."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pl + pr - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    acc = np.zeros((n, oh, ow, o), dtype=np.int64)
    total = 0
    per_group = o // groups
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for oc in range(o):
                    g = oc // per_group
                    prods = []
                    for u in range(kh):
                        for v in range(kw):
                            for ci in range(cg):
                                y = i * stride[0] + u * dilation[0] - pt
                                xx = j * stride[1] + v * dilation[1] - pl
                                inside = 0 <= y < h and 0 <= xx < wd
                                xv = int(x[b, y, xx, g * cg + ci]) - x_zp if inside else 0
                                prods.append(xv * int(w[oc, u, v, ci]))
                    a, ovf = ref_dot(prods, int(bias[oc]), acc_bits, overflow, bias_at)
                    acc[b, i, j, oc] = a
                    total += ovf
    return acc, total


def same_pads(size, k, s, d):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


@given(h=st.integers(3, 6), wd=st.integers(3, 6), c=st.integers(1, 3), o=st.integers(1, 3), k=st.integers(1, 3),
       stride=st.integers(1, 2), dilation=st.integers(1, 2), padding=st.sampled_from(["SAME", "VALID"]),
       **settings_kernel)
def test_conv2d_vs_loop(h, wd, c, o, k, stride, dilation, padding, kind, acc_bits, overflow, bias_at, seed):
    if (k - 1) * dilation + 1 > min(h, wd):
        dilation = 1
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(1, h, wd, c)).astype(np.int8)
    w = rng.integers(-127, 128, size=(o, k, k, c)).astype(np.int8)
    bias = rng.integers(-(1 << (acc_bits - 3)), 1 << (acc_bits - 3), size=o).astype(np.int32)
    x_zp, out_zp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    rq = make_requant(kind, o, rng)
    res = quantized_conv2d(x, w, bias, requant=rq, x_zp=x_zp, out_zp=out_zp, stride=stride, padding=padding,
                           dilation=dilation, acc=acc_bits, overflow=overflow, bias_at=bias_at)
    pads = (same_pads(h, k, stride, dilation), same_pads(wd, k, stride, dilation)) if padding == "SAME" \
        else ((0, 0), (0, 0))
    acc, total = ref_conv(x, w, 1, (stride, stride), pads, (dilation, dilation), x_zp, bias, acc_bits, overflow,
                          bias_at)
    np.testing.assert_array_equal(res.acc, acc)
    assert res.overflows == total
    want = np.vectorize(lambda a, ch: ref_out(int(a), rq, int(ch), out_zp, -128, 127))(acc, np.arange(o))
    np.testing.assert_array_equal(res.out, want)


@given(c=st.integers(1, 3), mult=st.integers(1, 2), stride=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), kind=st.sampled_from(["double", "float"]), seed=st.integers(0, 2 ** 32 - 1))
def test_depthwise_conv2d_vs_loop(c, mult, stride, padding, kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(2, 5, 4, c)).astype(np.int8)
    w = rng.integers(-127, 128, size=(1, 3, 3, c * mult)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=c * mult).astype(np.int32)
    rq = make_requant(kind, c * mult, rng)
    res = quantized_depthwise_conv2d(x, w, bias, requant=rq, x_zp=5, out_zp=-3, stride=stride, padding=padding,
                                     act_min=-128, act_max=100)
    pads = (same_pads(5, 3, stride, 1), same_pads(4, 3, stride, 1)) if padding == "SAME" else ((0, 0), (0, 0))
    w_as_grouped = np.transpose(w, (3, 1, 2, 0))        # (C*M, KH, KW, 1): output channel cM+m sees channel c
    acc, _ = ref_conv(x, w_as_grouped, c, (stride, stride), pads, (1, 1), 5, bias, 32, "wrap", "end")
    np.testing.assert_array_equal(res.acc, acc)
    want = np.vectorize(lambda a, ch: ref_out(int(a), rq, int(ch), -3, -128, 100))(acc, np.arange(c * mult))
    np.testing.assert_array_equal(res.out, want)


def ref_add(a, b, s1, z1, s2, z2, so, zo, lo, hi, rounding, left_shift=20):
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    s1, s2, so = f32(s1), f32(s2), f32(so)
    twice = 2 * max(s1, s2)
    params = [ref_quantize_multiplier(r, rounding == "single") for r in (s1 / twice, s2 / twice,
                                                                         twice / ((1 << left_shift) * so))]
    v1 = ref_mbqm(ref_wrap32((a - z1) << left_shift), *params[0], rounding)
    v2 = ref_mbqm(ref_wrap32((b - z2) << left_shift), *params[1], rounding)
    return min(hi, max(lo, ref_mbqm(ref_wrap32(v1 + v2), *params[2], rounding) + zo))


@given(s1=st.floats(1e-3, 1.0), s2=st.floats(1e-3, 1.0), so=st.floats(2e-3, 2.0), z1=st.integers(-128, 127),
       z2=st.integers(-128, 127), zo=st.integers(-128, 127), rounding=st.sampled_from(["double", "single"]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_add_vs_reference_and_float(s1, s2, so, z1, z2, zo, rounding, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(3, 4)).astype(np.int8)
    b = rng.integers(-128, 128, size=(4,)).astype(np.int8)            # broadcast
    out = quantized_add(a, b, scale1=s1, zp1=z1, scale2=s2, zp2=z2, out_scale=so, out_zp=zo, act_min=-120,
                        act_max=127, rounding=rounding)
    assert out.dtype == np.int8 and out.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            want = ref_add(int(a[i, j]), int(b[j]), s1, z1, s2, z2, so, zo, -120, 127, rounding)
            assert out[i, j] == want
            real = (np.float32(s1) * (int(a[i, j]) - z1) + np.float32(s2) * (int(b[j]) - z2)) / np.float32(so) + zo
            assert abs(out[i, j] - min(127, max(-120, real))) <= 1.01


@given(h=st.integers(2, 6), wd=st.integers(2, 6), k=st.integers(1, 3), stride=st.integers(1, 3),
       padding=st.sampled_from(["SAME", "VALID"]), seed=st.integers(0, 2 ** 32 - 1))
def test_average_pool2d_vs_loop(h, wd, k, stride, padding, seed):
    k = min(k, h, wd)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(2, h, wd, 3)).astype(np.int8)
    res = quantized_average_pool2d(x, k, stride=stride, padding=padding, act_min=-100, act_max=100)
    (pt, pb), (pl, pr) = ((same_pads(h, k, stride, 1), same_pads(wd, k, stride, 1)) if padding == "SAME"
                          else ((0, 0), (0, 0)))
    oh, ow = (h + pt + pb - k) // stride + 1, (wd + pl + pr - k) // stride + 1
    assert res.out.shape == (2, oh, ow, 3) and res.out.dtype == np.int8
    for b in range(2):
        for i in range(oh):
            for j in range(ow):
                for ch in range(3):
                    vals = [int(x[b, y, z, ch]) for y in range(i * stride - pt, i * stride - pt + k)
                            for z in range(j * stride - pl, j * stride - pl + k) if 0 <= y < h and 0 <= z < wd]
                    avg = round_fraction(Fraction(sum(vals), len(vals)), "half_away")
                    assert res.out[b, i, j, ch] == min(100, max(-100, avg))


def test_average_pool2d_tie_rounding_hand_table():
    x = np.array([1, 2, -1, -2, 3, 3, -3, -4], dtype=np.int8).reshape(1, 1, 8, 1)
    # window 2: means 1.5, -1.5, 3, -3.5 -> 2, -2, 3, -4 (ties away from zero)
    assert quantized_average_pool2d(x, (1, 2)).out.ravel().tolist() == [2, -2, 3, -4]


def test_average_pool2d_narrow_accumulator_overflows():
    x = np.full((1, 4, 4, 1), 127, dtype=np.int8)
    wide = quantized_average_pool2d(x, 4)
    narrow = quantized_average_pool2d(x, 4, acc=8, overflow="wrap")
    assert wide.out.ravel().tolist() == [127] and wide.overflows == 0
    assert narrow.overflows > 0 and narrow.out.ravel().tolist() != [127]


# --------------------------------------------------------------------------- bad input
def _fc(**kw):
    args = dict(x=np.zeros((2, 4), np.int8), w=np.ones((3, 4), np.int8), bias=np.zeros(3, np.int32),
                requant=Requantizer("double", multiplier=1 << 30, shift=-4))
    args.update(kw)
    x, w, b = args.pop("x"), args.pop("w"), args.pop("bias")
    return quantized_fully_connected(x, w, b, **args)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(w=np.ones((3, 5), np.int8)), ValueError, "features"),
    (dict(x=np.zeros((2, 4), np.float32)), TypeError, "integer"),
    (dict(x=np.zeros((0, 4), np.int8)), ValueError, "empty"),
    (dict(x_zp=200), ValueError, "x_zp=200 is out of range"),
    (dict(out_zp=-129), ValueError, "out_zp"),
    (dict(w_zp=1.5), TypeError, "w_zp"),
    (dict(bias=np.zeros(4, np.int32)), ValueError, "bias must have shape"),
    (dict(bias=np.zeros(3, np.float64)), TypeError, "bias"),
    (dict(bias=np.full(3, 1 << 20, np.int32), acc=16), ValueError, "bias"),
    (dict(requant=Requantizer("double", multiplier=(1, 2), shift=(0, 0))), ValueError, "channels"),
    (dict(requant="tflite"), TypeError, "Requantizer"),
    (dict(act_min=10, act_max=5), ValueError, "act_min"),
    (dict(act_max=300), ValueError, "act_max"),
    (dict(acc=Format(32, 4)), ValueError, "integer format"),
    (dict(acc="int32"), TypeError, "acc"),
    (dict(overflow="explode"), ValueError, "overflow"),
    (dict(bias_at="middle"), ValueError, "bias_at"),
    (dict(order="random"), ValueError, "order"),
])
def test_fully_connected_bad_input(kw, exc, match):
    with pytest.raises(exc, match=match):
        _fc(**kw)


def test_conv_bad_input():
    rq = Requantizer("double", multiplier=1 << 30, shift=-4)
    x = np.zeros((1, 4, 4, 2), np.int8)
    with pytest.raises(ValueError, match="channels"):
        quantized_conv2d(x, np.ones((3, 3, 3, 3), np.int8), requant=rq)
    with pytest.raises(ValueError, match="4 dimensions"):
        quantized_conv2d(x[0], np.ones((3, 3, 3, 2), np.int8), requant=rq)
    with pytest.raises(ValueError, match="padding"):
        quantized_conv2d(x, np.ones((3, 3, 3, 2), np.int8), requant=rq, padding="FULL")
    with pytest.raises(ValueError, match="larger than the padded input"):
        quantized_conv2d(x, np.ones((3, 5, 5, 2), np.int8), requant=rq)
    with pytest.raises(ValueError, match="stride"):
        quantized_conv2d(x, np.ones((3, 3, 3, 2), np.int8), requant=rq, stride=0)
    with pytest.raises(ValueError, match="depthwise"):
        quantized_depthwise_conv2d(x, np.ones((1, 3, 3, 3), np.int8), requant=rq)
    with pytest.raises(ValueError, match="broadcast"):
        quantized_add(np.zeros(3, np.int8), np.zeros(4, np.int8), scale1=1.0, zp1=0, scale2=1.0, zp2=0,
                      out_scale=1.0, out_zp=0)
    with pytest.raises(ValueError, match="zp1"):
        quantized_add(np.zeros(3, np.int8), np.zeros(3, np.int8), scale1=1.0, zp1=300, scale2=1.0, zp2=0,
                      out_scale=1.0, out_zp=0)


def test_inputs_are_not_modified_and_read_only_non_contiguous_work():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(3, 8)).astype(np.int8)[:, ::2]       # non-contiguous
    w = rng.integers(-127, 128, size=(4, 4)).astype(np.int8)
    b = rng.integers(-100, 100, size=4).astype(np.int32)
    for arr in (w, b):
        arr.flags.writeable = False
    copies = [a.copy() for a in (x, w, b)]
    rq = Requantizer.tflite(0.02, 0.01, 0.05)
    res = quantized_fully_connected(x, w, b, requant=rq, x_zp=3)
    res2 = quantized_fully_connected(np.ascontiguousarray(x), w.copy(), b.copy(), requant=rq, x_zp=3)
    np.testing.assert_array_equal(res.out, res2.out)
    for a, c in zip((x, w, b), copies):
        np.testing.assert_array_equal(a, c)


def test_uint8_model_and_overflow_error():
    """Legacy uint8 tensors (zero point 128) and ``overflow="error"`` on a too-narrow accumulator."""
    x = np.array([[0, 255, 128, 200]], dtype=np.uint8)
    w = np.array([[255, 0, 10, 128], [1, 2, 3, 4]], dtype=np.uint8)
    rq = Requantizer("double", multiplier=1 << 30, shift=-2)
    res = quantized_fully_connected(x, w, np.array([100, -100]), requant=rq, x_zp=128, w_zp=128, out_zp=128,
                                    out_dtype=np.uint8)
    acc = [sum((int(a) - 128) * (int(b) - 128) for a, b in zip(x[0], row)) + bias
           for row, bias in zip(w, (100, -100))]
    assert res.out.dtype == np.uint8
    assert res.out.tolist() == [[min(255, max(0, ref_mbqm(a, 1 << 30, -2, "double") + 128)) for a in acc]]
    with pytest.raises(ValueError, match="overflow"):
        quantized_fully_connected(x, w, None, requant=rq, x_zp=128, w_zp=128, out_zp=128, out_dtype=np.uint8,
                                  acc=12, overflow="error")


def test_package_exports_resolve_to_this_module():
    import fxpsim
    import fxpsim.datapath.integer_ops as il

    for name in il.__all__:
        assert getattr(fxpsim, name) is getattr(il, name), f"fxpsim.{name} is shadowed by another module"
