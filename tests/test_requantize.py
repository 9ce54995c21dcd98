"""Tests of fxpsim.requantize: gemmlowp/TFLite primitives and the integer layer kernels.

Oracle: the pure-Python integer model below, written from the mathematical definitions
(exact ``Fraction`` rounding, no int64 tricks), plus the accumulator model of
``tests/reference.py``.  The TFLite models themselves are in ``test_tflite_vectors.py``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.fixed import Format
from fxpsim.requantize import (
    INT32_MAX, INT32_MIN, IntegerResult, Requantizer, activation_range, multiply_by_quantized_multiplier,
    quantize_multiplier, quantized_add, quantized_average_pool2d, quantized_conv2d,
    quantized_depthwise_conv2d, quantized_fully_connected, requantize_float, requantize_shift,
    rounding_divide_by_pot, saturating_rounding_doubling_high_mul, tflite_add_params,
)
from reference import DETERMINISTIC_ROUNDING_MODES, accumulate, accumulate_tree, overflow_int, round_fraction

# --------------------------------------------------------------------------- reference model
HALF = Fraction(1, 2)


def ref_wrap32(v: int) -> int:
    return overflow_int(v, 32, True, "wrap")[0]


def ref_srdhm(a: int, b: int) -> int:
    """gemmlowp SRDHM as defined: nudge 2^30 or 1 - 2^30, then a division truncating toward zero."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    numerator = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return int(Fraction(numerator, 1 << 31))           # int() of a Fraction truncates toward zero


def ref_rdbpot(x: int, e: int) -> int:
    """gemmlowp RDBPOT: x / 2^e rounded to nearest, ties away from zero."""
    return round_fraction(Fraction(x, 1 << e), "half_away")


def ref_mbqm(x: int, m: int, s: int, rounding: str) -> int:
    if rounding == "double":
        return ref_rdbpot(ref_srdhm(ref_wrap32(x * 2 ** max(s, 0)), m), max(-s, 0))
    return ref_wrap32(round_fraction(Fraction(x * m) * Fraction(2) ** (s - 31), "half_up"))


def ref_quantize_multiplier(real: float, single: bool = False) -> tuple[int, int]:
    """(m, e) with m = round_half_away(r * 2^(31-e)), 2^(e-1) <= |r| < 2^e, from exact rationals."""
    r = Fraction(real)
    if r == 0:
        return 0, 0
    e = 0
    while abs(r) >= Fraction(2) ** e:
        e += 1
    while abs(r) < Fraction(2) ** (e - 1):
        e -= 1
    m = round_fraction(r * Fraction(2) ** (31 - e), "half_away")
    if m == 1 << 31:
        m, e = 1 << 30, e + 1
    if e < -31:
        return 0, 0
    if single and e > 30:
        return INT32_MAX, 30
    return m, e


def ref_requant(acc: int, rq: Requantizer, ch: int) -> int:
    pick = lambda t: t[ch] if len(t) > 1 else t[0]  # noqa: E731
    if rq.kind in ("double", "single"):
        return ref_mbqm(acc, pick(rq.multiplier), pick(rq.shift), rq.kind)
    if rq.kind == "shift":
        v = round_fraction(Fraction(acc) * Fraction(2) ** pick(rq.shift), rq.rounding.value)
    else:
        v = round_fraction(Fraction(float(acc) * pick(rq.scale)), rq.rounding.value)
    return overflow_int(v, 32, True, "saturate")[0]


EDGE = [INT32_MIN, INT32_MIN + 1, -(1 << 30) - 1, -(1 << 30), -(1 << 30) + 1, -65536, -3, -2, -1, 0, 1, 2, 3,
        65535, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, INT32_MAX - 1, INT32_MAX]
int32s = st.integers(INT32_MIN, INT32_MAX)


# --------------------------------------------------------------------------- gemmlowp primitives
def test_srdhm_all_edge_pairs():
    a, b = np.meshgrid(EDGE, EDGE)
    got = saturating_rounding_doubling_high_mul(a, b)
    want = [[ref_srdhm(x, y) for x, y in zip(ra, rb)] for ra, rb in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(got, want)
    assert saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX


def test_srdhm_ties_hand_table():
    # a*b / 2^31 = +0.5, -0.5, +1.5, -1.5: ties go toward +inf
    assert saturating_rounding_doubling_high_mul([1, -1, 3, -3], [1 << 30] * 4).tolist() == [1, 0, 2, -1]
    # otherwise to nearest: -0.5 - 2^-31 -> -1, 0.5 - 2^-31 -> 0
    assert saturating_rounding_doubling_high_mul([-(1 << 30) - 1, (1 << 30) - 1], [1, 1]).tolist() == [-1, 0]


@given(st.lists(st.tuples(int32s, int32s), min_size=1, max_size=40))
def test_srdhm_is_round_half_up_of_ab_over_2_31(pairs):
    a, b = np.array(pairs, dtype=np.int64).T
    want = [INT32_MAX if x == y == INT32_MIN else math.floor(Fraction(x * y, 1 << 31) + HALF) for x, y in pairs]
    np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, b), want)


@given(st.lists(st.tuples(int32s, int32s), min_size=1, max_size=40))
def test_srdhm_random(pairs):
    a, b = np.array(pairs, dtype=np.int64).T
    np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, b),
                                  [ref_srdhm(x, y) for x, y in pairs])


def test_rdbpot_every_exponent_edges_and_ties():
    for e in range(32):
        xs = set(EDGE)
        if e:
            for k in (-5, -2, -1, 0, 1, 4):
                for d in (-1, 0, 1):
                    xs.add(k * (1 << e) + (1 << (e - 1)) + d)      # ties and their neighbours
        xs = sorted(x for x in xs if INT32_MIN <= x <= INT32_MAX)
        np.testing.assert_array_equal(rounding_divide_by_pot(xs, e), [ref_rdbpot(x, e) for x in xs], err_msg=f"e={e}")
    assert rounding_divide_by_pot([5, -5, 6, -6, 7, -7], 1).tolist() == [3, -3, 3, -3, 4, -4]


@given(st.lists(st.tuples(int32s, st.integers(0, 31)), min_size=1, max_size=40))
def test_rdbpot_random(items):
    x, e = np.array(items, dtype=np.int64).T
    np.testing.assert_array_equal(rounding_divide_by_pot(x, e), [ref_rdbpot(a, b) for a, b in items])


MULTIPLIERS = [0, 1, 1 << 30, (1 << 30) + 1, 1518500250, INT32_MAX]


@pytest.mark.parametrize("rounding", ["double", "single"])
def test_mbqm_every_shift_edges(rounding):
    acc, m = (g.ravel() for g in np.meshgrid(EDGE, MULTIPLIERS))
    for s in range(-31, 31):
        want = [ref_mbqm(int(a), int(b), s, rounding) for a, b in zip(acc, m)]
        np.testing.assert_array_equal(multiply_by_quantized_multiplier(acc, m, s, rounding), want,
                                      err_msg=f"shift={s}")


def test_mbqm_negative_multiplier_double_only():
    assert multiply_by_quantized_multiplier(1000, -(1 << 30), -1) == ref_mbqm(1000, -(1 << 30), -1, "double")
    with pytest.raises(ValueError, match="multiplier >= 0"):
        multiply_by_quantized_multiplier(1000, -(1 << 30), -1, "single")


@given(st.lists(st.tuples(int32s, st.integers(0, INT32_MAX), st.integers(-31, 30)), min_size=1, max_size=30),
       st.sampled_from(["double", "single"]))
def test_mbqm_random(items, rounding):
    for x, m, s in items:
        assert multiply_by_quantized_multiplier(x, m, s, rounding) == ref_mbqm(x, m, s, rounding)


def test_mbqm_per_channel_broadcast_along_axis():
    rng = np.random.default_rng(1)
    acc = rng.integers(-(1 << 20), 1 << 20, size=(4, 3, 5))
    m, s = quantize_multiplier(rng.uniform(1e-4, 2.0, size=3))
    for rounding in ("double", "single"):
        got = multiply_by_quantized_multiplier(acc, m, s, rounding, axis=1)
        for c in range(3):
            np.testing.assert_array_equal(got[:, c], multiply_by_quantized_multiplier(acc[:, c], int(m[c]), int(s[c]),
                                                                                      rounding))
    with pytest.raises(ValueError, match="per channel"):
        multiply_by_quantized_multiplier(acc, m, s, axis=-1)


def test_double_and_single_rounding_differ():
    # two roundings (SRDHM, then RDBPOT) and one rounding disagree on some inputs
    xs = np.arange(-4096, 4096)
    d = multiply_by_quantized_multiplier(xs, 1 << 30, -3, "double")
    s = multiply_by_quantized_multiplier(xs, 1 << 30, -3, "single")
    assert np.any(d != s)
    np.testing.assert_array_equal(d, [ref_mbqm(int(x), 1 << 30, -3, "double") for x in xs])


# --------------------------------------------------------------------------- quantize_multiplier
def test_quantize_multiplier_hand_table():
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.75) == (3 << 29, 0)
    assert quantize_multiplier(-0.5) == (-(1 << 30), 0)
    assert quantize_multiplier(1 - 2.0 ** -40) == (1 << 30, 1)          # rounds to 2^31: carry
    assert quantize_multiplier(2.0 ** -33) == (0, 0)                     # tiny: flushed to zero
    assert quantize_multiplier(2.0 ** -32) == (1 << 30, -31)             # smallest kept exponent
    assert quantize_multiplier(2.0 ** 40) == (1 << 30, 41)
    assert quantize_multiplier(2.0 ** 40, single_rounding=True) == (INT32_MAX, 30)


@given(st.floats(min_value=2.0 ** -40, max_value=2.0 ** 40) | st.floats(min_value=-2.0 ** 40, max_value=-2.0 ** -40))
def test_quantize_multiplier_matches_reference_and_round_trips(real):
    m, s = quantize_multiplier(real)
    assert (m, s) == ref_quantize_multiplier(real)
    if m:
        assert (1 << 30) <= abs(m) <= (1 << 31)
        err = abs(Fraction(m) * Fraction(2) ** (s - 31) - Fraction(real))
        assert err <= Fraction(2) ** (s - 32)                          # half an LSB of the Q31 significand
    else:
        assert abs(real) < 2.0 ** -32


def test_quantize_multiplier_vectorised_per_channel():
    reals = np.array([0.0, 1e-12, 2.0 ** -32, 0.3, 0.999999999999, 1.0, 7.5, -0.25])
    m, s = quantize_multiplier(reals)
    assert m.dtype == np.int32 and s.dtype == np.int32
    assert list(zip(m.tolist(), s.tolist())) == [ref_quantize_multiplier(float(r)) for r in reals]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_quantize_multiplier_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="finite"):
        quantize_multiplier(bad)


def test_quantize_multiplier_single_rounding_rejects_negative():
    with pytest.raises(ValueError, match="non-negative"):
        quantize_multiplier(-0.5, single_rounding=True)


# --------------------------------------------------------------------------- shift / float requantizers
@pytest.mark.parametrize("mode", DETERMINISTIC_ROUNDING_MODES)
def test_requantize_shift_every_mode(mode):
    accs = sorted(set(EDGE + [k * 8 + d for k in (-3, -1, 0, 2) for d in range(-4, 5)] + [-(1 << 40) - 3, 1 << 41]))
    for s in (-3, 0, 1, 3, 17, 31, 40):
        got = requantize_shift(accs, s, mode)
        want = [overflow_int(round_fraction(Fraction(a) / Fraction(2) ** s, mode), 32, True, "saturate")[0]
                for a in accs]
        np.testing.assert_array_equal(got, want, err_msg=f"{mode} s={s}")


def test_requantize_shift_per_channel_out_format_and_overflow():
    acc = np.array([[1000, -1000, 77], [-5, 6, 1 << 20]])
    got = requantize_shift(acc, [2, 0, 4], "half_even", out=Format.integer(8), overflow="wrap")
    for c, s in enumerate((2, 0, 4)):
        for r in range(2):
            v = round_fraction(Fraction(int(acc[r, c]), 1 << s), "half_even")
            assert got[r, c] == overflow_int(v, 8, True, "wrap")[0]


def test_requantize_shift_stochastic_is_seeded_and_brackets():
    acc = np.arange(-300, 300)
    a = requantize_shift(acc, 3, "stochastic", seed=7)
    np.testing.assert_array_equal(a, requantize_shift(acc, 3, "stochastic", seed=7))
    assert np.all((a == acc // 8) | (a == -(-acc // 8)))


@pytest.mark.parametrize("mode", ["half_away", "half_even", "floor", "half_up"])
def test_requantize_float(mode):
    rng = np.random.default_rng(3)
    acc = np.concatenate([rng.integers(-(1 << 24), 1 << 24, size=200), [0, 1, -1, 3, -3, 5, -5]])
    for scale in (0.5, 0.25 / 3, 1.7e-3, 3.0):
        got = requantize_float(acc, scale, mode)
        want = [round_fraction(Fraction(float(a) * scale), mode) for a in acc.tolist()]
        np.testing.assert_array_equal(got, want)


def test_requantize_float_per_channel_and_bad_scale():
    acc = np.array([[3, 3], [-3, -3]])
    np.testing.assert_array_equal(requantize_float(acc, [0.5, 1.5]), [[2, 5], [-2, -5]])
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive and finite"):
            requantize_float(acc, bad)


# --------------------------------------------------------------------------- Requantizer
def test_requantizer_tflite_builds_from_float32_scales():
    rq = Requantizer.tflite(0.02, [0.003, 0.004], 0.05)
    for c, sw in enumerate((0.003, 0.004)):
        real = float(np.float32(0.02)) * float(np.float32(sw)) / float(np.float32(0.05))
        assert (rq.multiplier[c], rq.shift[c]) == ref_quantize_multiplier(real)
    fl = Requantizer.tflite(0.02, [0.003, 0.004], 0.05, kind="float")
    assert fl.scale[1] == float(np.float32(0.02)) * float(np.float32(0.004)) / float(np.float32(0.05))
    assert fl.rounding.value == "half_away"
    sh = Requantizer.tflite(1.0, 1.0, 8.0, kind="shift", rounding="half_even")
    assert sh.shift == (-3,)
    np.testing.assert_array_equal(sh(np.array([4, 12, -12, 20])), [0, 2, -2, 2])
    assert hash(rq) == hash(Requantizer.tflite(0.02, [0.003, 0.004], 0.05))


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="triple", multiplier=1, shift=0), "kind"),
    (dict(kind="double", multiplier=(1, 2), shift=(0,)), "same"),
    (dict(kind="double", multiplier=1, shift=31), "shift"),
    (dict(kind="double", multiplier=1, shift=-32), "shift"),
    (dict(kind="double", multiplier=1 << 31, shift=0), "multiplier"),
    (dict(kind="single", multiplier=-1, shift=0), "multiplier >= 0"),
    (dict(kind="shift"), "needs shift"),
    (dict(kind="float", scale=0.0), "positive"),
    (dict(kind="float"), "needs scale"),
])
def test_requantizer_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Requantizer(**kwargs)


def test_requantizer_rejects_bad_scales():
    for args in ((0.0, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, 1.0, float("nan"))):
        with pytest.raises(ValueError, match="positive and finite"):
            Requantizer.tflite(*args)


# --------------------------------------------------------------------------- activation range
def test_activation_range_table():
    assert activation_range("none", 0.05, -10) == (-128, 127)
    assert activation_range("RELU", 0.05, -10) == (-10, 127)
    assert activation_range("relu6", 0.05, -10) == (-10, 110)
    assert activation_range("relu_n1_to_1", 0.05, -10) == (-30, 10)
    assert activation_range("relu6", 12.0, 0) == (0, 1)              # 6/12 = 0.5 rounds away from zero
    assert activation_range("relu", 0.0134924640879035, -128) == (-128, 127)
    assert activation_range("relu6", 0.01, 100, dtype=np.uint8) == (100, 255)
    with pytest.raises(ValueError, match="activation"):
        activation_range("gelu", 0.1, 0)
    with pytest.raises(ValueError, match="out of range"):
        activation_range("relu", 0.1, 128)
    with pytest.raises(ValueError, match="positive"):
        activation_range("relu", 0.0, 0)


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


def test_tflite_add_params_checks():
    m1, s1, m2, s2, mo, so = tflite_add_params(0.5, 0.25, 0.5)
    assert (m1, s1) == (1 << 30, 0) and (m2, s2) == (1 << 30, -1)
    with pytest.raises(ValueError, match="not in"):
        tflite_add_params(1.0, 1.0, 1e-9)
    with pytest.raises(ValueError, match="positive"):
        tflite_add_params(1.0, 0.0, 1.0)


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


def test_mbqm_bad_input():
    with pytest.raises(ValueError, match="fit int32"):
        multiply_by_quantized_multiplier([1 << 31], 1 << 30, 0)
    with pytest.raises(ValueError, match="shift"):
        multiply_by_quantized_multiplier([1], 1 << 30, 31)
    with pytest.raises(ValueError, match="shift"):
        multiply_by_quantized_multiplier([1], 1 << 30, -32)
    with pytest.raises(ValueError, match="rounding"):
        multiply_by_quantized_multiplier([1], 1 << 30, 0, "triple")
    with pytest.raises(TypeError, match="integer"):
        multiply_by_quantized_multiplier([1.0], 1 << 30, 0)
    with pytest.raises(ValueError, match="exponent"):
        rounding_divide_by_pot([1], 32)
    with pytest.raises(ValueError, match="int32"):
        saturating_rounding_doubling_high_mul([1 << 31], [1])
    with pytest.raises(ValueError, match="shift"):
        requantize_shift([1], 64)


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
    import fxpsim.requantize as rq

    for name in rq.__all__:
        assert getattr(fxpsim, name) is getattr(rq, name), f"fxpsim.{name} is shadowed by another module"
