"""The fused int8 kernel's output stages of LiteRT's optimized kernel sets, against models written here:

* ``float32`` (XNNPACK's ``fp32`` requantization): :math:`y = \\mathrm{rne}(\\mathrm{fl}_{32}(\\mathrm{fl}_{32}(a)
  \\, s_o)) + z`, modelled with numpy.float32 scalar arithmetic and Python's ``round`` (exact, ties to even);
* ``double`` with ``final_rounding="half_up"`` (LiteRT's optimized x86-64 ``MultiplyByQuantizedMultiplier``):
  :math:`v = \\lfloor a m 2^{\\ell} / 2^{31} + 1/2 \\rfloor`, :math:`y = \\lfloor v / 2^{r} + 1/2 \\rfloor + z`,
  modelled with ``Fraction``.

Each through the kernel (both implementations), through :func:`quantized_fully_connected` and through the
general numpy path of :class:`Requantizer`, ties included (scales that are powers of two, ``m = 2^30``).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fxpsim.core.fixed import Format
from fxpsim.datapath import conv_int8
from fxpsim.datapath.integer_ops import quantized_fully_connected
from fxpsim.datapath.requantize import Requantizer

needs_kernel = pytest.mark.skipif(not conv_int8.available(), reason="the _conv_int8 extension is not built")


def _float32_model(acc: int, scale: float, zp: int) -> int:
    f = np.float32(np.float32(acc) * np.float32(scale))    # both operands and the product in float32
    return round(float(f)) + zp                              # Python's round: exact, ties to even


def _tie_up_model(acc: int, m: int, s: int, zp: int) -> int:
    left, right = max(s, 0), max(-s, 0)
    v = math.floor(Fraction(acc * (1 << left) * m, 1 << 31) + Fraction(1, 2))
    return math.floor(Fraction(v, 1 << right) + Fraction(1, 2)) + zp


def _expected(accs, model, lo, hi):
    """(out, above, below) of the model over an [N, O] table of accumulators."""
    y = np.array([[model(int(a), o) for o, a in enumerate(row)] for row in accs], dtype=object)
    out = np.array([[min(max(v, lo), hi) for v in row] for row in y], dtype=np.int8)
    return out, int(sum(v > hi for v in y.ravel())), int(sum(v < lo for v in y.ravel()))


@st.composite
def _layer(draw):
    """A fully connected layer whose accumulators span int32: ``acc = bias + sum_k (x - zx) w``."""
    n, k, o = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 20))
    x = np.array(draw(st.lists(st.integers(-128, 127), min_size=n * k, max_size=n * k)), np.int8).reshape(n, k)
    w = np.array(draw(st.lists(st.integers(-128, 127), min_size=o * k, max_size=o * k)), np.int8).reshape(o, k)
    span = draw(st.sampled_from([1 << 4, 1 << 12, 1 << 24, (1 << 31) - (1 << 17)]))
    bias = np.array(draw(st.lists(st.integers(-span, span), min_size=o, max_size=o)), np.int64)
    zx = draw(st.integers(-128, 127))
    lo = draw(st.integers(-128, 127))
    hi = draw(st.integers(lo, 127))
    zp = draw(st.integers(-128, 127))
    accs = [[int(bias[j]) + sum((int(x[i, t]) - zx) * int(w[j, t]) for t in range(k)) for j in range(o)]
            for i in range(n)]
    return x, w, bias, zx, zp, lo, hi, accs


def _run_all(layer, rq, model):
    """The layer through the kernel (both implementations), quantized_fully_connected and the numpy path;
    ``model(acc, channel)``: the expected pre-clamp code."""
    x, w, bias, zx, zp, lo, hi, accs = layer
    out, above, below = _expected(accs, model, lo, hi)
    for impl in (0, 1):
        got = conv_int8.fused("fully_connected", x, w, bias, requant=rq, x_zp=zx, w_zp=0,
                              out_spec=(np.int8, zp, lo, hi), fmt=Format.integer(32), overflow="saturate",
                              order="sequential", bias_at="init", impl=impl)
        assert got is not None and got[3] is not None, "the kernel ran its output stage"
        np.testing.assert_array_equal(got[0], out)
        np.testing.assert_array_equal(got[1], np.array(accs, np.int64))
        assert (got[3], got[4]) == (above, below)
    res = quantized_fully_connected(x, w, bias, requant=rq, x_zp=zx, out_zp=zp, act_min=lo, act_max=hi, acc=32,
                                    overflow="saturate", bias_at="init")
    np.testing.assert_array_equal(res.out, out)
    assert (res.above, res.below) == (above, below)
    # the general numpy path of the same requantizer
    np.testing.assert_array_equal(rq._output_codes(np.array(accs, np.int64), 32, zp, lo, hi, np.int8), out)


_SCALES = st.one_of(st.sampled_from([0.5, 0.25, 2.0 ** -7, 1.5, 0.75, 2.0 ** -20, 3.0]),   # ties (odd acc)
                    st.floats(2.0 ** -30, 200.0, width=32))


def _on_layers(test):
    """A hypothesis test over :func:`_layer` (and ``data``) that needs the kernel."""
    return needs_kernel(settings(max_examples=150, deadline=None)(given(_layer(), st.data())(test)))


@_on_layers
def test_float32_mode_matches_numpy_float32_model(layer, data):
    o, zp = layer[1].shape[0], layer[4]
    scale = data.draw(st.one_of(st.lists(_SCALES, min_size=1, max_size=1), st.lists(_SCALES, min_size=o, max_size=o)))
    rq = Requantizer("float32", scale=scale, rounding="half_even")
    s = np.broadcast_to(np.asarray(scale, np.float64), (o,))
    _run_all(layer, rq, lambda a, c: _float32_model(a, float(s[c]), zp))


@_on_layers
def test_tie_up_double_matches_fraction_model(layer, data):
    o, zp = layer[1].shape[0], layer[4]
    mult = st.one_of(st.just(1 << 30), st.integers(1 << 30, (1 << 31) - 1))     # 2^30: exact halves (ties)
    per_channel = data.draw(st.booleans())
    n = o if per_channel else 1
    m = data.draw(st.lists(mult, min_size=n, max_size=n))
    # right shifts up to 24 (LiteRT's conv layers: ~5..12); beyond that the fused sums could leave int64 and the
    # general path runs (test_tie_up_general_path_wide_shifts)
    s = data.draw(st.lists(st.integers(-24, 0), min_size=n, max_size=n))
    rq = Requantizer("double", multiplier=m, shift=s, final_rounding="half_up")
    mm, ss = np.broadcast_to(m, (o,)), np.broadcast_to(s, (o,))
    _run_all(layer, rq, lambda a, c: _tie_up_model(a, int(mm[c]), int(ss[c]), zp))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=1, max_size=8),
       st.one_of(st.just(1 << 30), st.integers(1 << 30, (1 << 31) - 1)), st.integers(-31, 30))
def test_tie_up_general_path_all_shifts(accs, m, s):
    """The numpy path of the tie-up requantizer over every shift (left shifts wrap the accumulator to int32
    first, as LiteRT's ``a << left`` does)."""
    rq = Requantizer("double", multiplier=[m], shift=[s], final_rounding="half_up")

    def model(a):
        left = max(s, 0)
        a = (a << left) % (1 << 32)
        a = a - (1 << 32) if a >= 1 << 31 else a
        return _tie_up_model(a, m, min(s, 0), 0)
    np.testing.assert_array_equal(rq(np.array(accs, np.int64)), [model(a) for a in accs])


def test_tie_up_and_float32_hand_table():
    """Ties by hand: 0.5 -> 1 and -0.5 -> 0 (toward +inf) for tie-up (two roundings); 0.5 -> 0, 1.5 -> 2, -2.5 -> -2 (even)
    for float32; the general path of each Requantizer."""
    up = Requantizer("double", multiplier=[1 << 30], shift=[-1], final_rounding="half_up")    # M = 1/4
    acc = np.array([2, -2, 6, -6, 1, -1, 3])                                                  # /4
    # 1/4 -> 1: SRDHM rounds 1/2 up to 1 first, then 1/2 -> 1 (LiteRT's two roundings)
    np.testing.assert_array_equal(up(acc), [1, 0, 2, -1, 1, 0, 1])
    f32 = Requantizer("float32", scale=[0.5], rounding="half_even")
    np.testing.assert_array_equal(f32(np.array([1, 3, -5, -1, 5, 7])), [0, 2, -2, 0, 2, 4])
    # 2^24 + 1 is not a float32: it rounds to 2^24 before the multiply (then * 1 exactly)
    np.testing.assert_array_equal(Requantizer("float32", scale=[1.0], rounding="half_even")(
        np.array([(1 << 24) + 1, (1 << 24) + 3])), [1 << 24, (1 << 24) + 4])


@pytest.mark.parametrize("scale", [[0.0], [-1.0], [float("inf")], [1e39]])
def test_float32_requantizer_refuses_bad_scales(scale):
    with pytest.raises(ValueError, match="scale"):
        Requantizer("float32", scale=scale)


def test_float32_requantizer_refuses_a_multiplier_knob():
    with pytest.raises(ValueError, match="final_rounding"):
        Requantizer("float32", scale=[0.5], final_rounding="half_up")


@needs_kernel
def test_float32_half_away_is_not_fused_but_exact():
    """The kernel's float mode rounds half to even only: another rounding runs the general path (no counts
    from the kernel) and still rounds as asked."""
    x = np.array([[1], [3], [-1]], np.int8)
    w = np.array([[1]], np.int8)
    rq = Requantizer("float32", scale=[0.5], rounding="half_away")
    res = quantized_fully_connected(x, w, None, requant=rq, acc=32, overflow="saturate", bias_at="init")
    assert res.above is None
    np.testing.assert_array_equal(res.out.ravel(), [1, 2, -1])
