"""fxpsim.datapath.qonnx: QONNX's custom-op arithmetic against the Fraction model of ``tests/qonnx_reference.py``.

Hand tables for the rounding modes (ties, signs, zero) checked against qonnx's own ``resolve_rounding_mode`` on
exactly representable values; hypothesis properties for ``Quant`` (float and integer inputs, every mode, integer
and fractional widths, signed / narrow, zero points; huge, tiny and subnormal inputs), ``Trunc`` v1 / v2,
``MultiThreshold``, exact scales, and the one-rounding float32 reading.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fxpsim.datapath.qonnx import arithmetic as A
from fxpsim.datapath.qonnx.scales import ExactScale, common
import qonnx_reference as R

MODES = R.MODES


# ----------------------------------------------------------------------------------------- hand tables
ROUND_TABLE = {  # y: ROUND CEIL FLOOR UP DOWN HALF_UP HALF_DOWN
    Fraction(5, 2): (2, 3, 2, 3, 2, 3, 2),
    Fraction(-5, 2): (-2, -2, -3, -3, -2, -3, -2),
    Fraction(7, 2): (4, 4, 3, 4, 3, 4, 3),
    Fraction(-7, 2): (-4, -3, -4, -4, -3, -4, -3),
    Fraction(1, 3): (0, 1, 0, 1, 0, 0, 0),
    Fraction(-1, 3): (0, 0, -1, -1, 0, 0, 0),
    Fraction(2, 3): (1, 1, 0, 1, 0, 1, 1),
    Fraction(-2, 3): (-1, 0, -1, -1, 0, -1, -1),
    Fraction(1, 2): (0, 1, 0, 1, 0, 1, 0),
    Fraction(-1, 2): (0, 0, -1, -1, 0, -1, 0),
    Fraction(0): (0, 0, 0, 0, 0, 0, 0),
    Fraction(-3): (-3, -3, -3, -3, -3, -3, -3),
}
TABLE_MODES = ("ROUND", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


@pytest.mark.parametrize("y", list(ROUND_TABLE))
def test_rounding_hand_table(y):
    for mode, want in zip(TABLE_MODES, ROUND_TABLE[y]):
        got = int(A.round_div(np.array([y.numerator]), np.array([y.denominator]), mode)[0])
        assert got == want == R.rnd(y, mode), (y, mode)


def test_rounding_modes_equal_qonnx_own_functions_on_exact_values():
    qonnx_intquant = pytest.importorskip("qonnx.custom_op.general.intquant", reason="qonnx not installed")
    y = np.arange(-64, 65, dtype=np.float32) / 8           # ties, quarters, eighths, zero: exact in float32
    for mode in MODES:
        want = qonnx_intquant.resolve_rounding_mode(mode)(y)
        got = A.round_div((y * 8).astype(np.int64), 8, A.rounding_mode(mode))
        assert np.array_equal(got, want.astype(np.int64)), mode


def test_rounding_mode_names():
    assert A.rounding_mode("half_even") == "ROUND" and A.rounding_mode("floor") == "FLOOR"
    with pytest.raises(ValueError, match="HALF_DOWN"):
        A.rounding_mode("stochastic")


# ----------------------------------------------------------------------------------------- properties
big_ints = st.integers(-(1 << 70), 1 << 70)


@given(st.lists(big_ints, min_size=1, max_size=20), st.integers(1, 1 << 66), st.sampled_from(MODES))
def test_round_div_equals_fraction_model(nums, den, mode):
    got = A.round_div(np.array(nums, object), den, A.rounding_mode(mode))
    assert [int(v) for v in got] == [R.rnd(Fraction(n, den), mode) for n in nums]


floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
scales32 = st.floats(min_value=2.0 ** -20, max_value=1024.0, width=32, allow_subnormal=False)
widths = st.one_of(st.integers(1, 24), st.sampled_from([2.5, 3.5, 4.25, 7.75, 8.0]))


@given(st.lists(floats32, min_size=1, max_size=30), scales32, st.integers(-8, 8), widths, st.booleans(),
       st.booleans(), st.sampled_from(MODES))
def test_quant_of_float_input_equals_fraction_model(xs, s, z, bw, signed, narrow, mode):
    """Quant(x) codes for float32 x (including huge, tiny and subnormal values) against the Fraction model."""
    bw_arr = np.asarray(bw, np.float32)
    m = A.rounding_mode(mode)
    lo, hi = A.int_bounds(bw_arr, signed, narrow, m)
    x = np.array(xs, np.float32)
    q = A.quantize_float(x, np.float32(s), z, lo, hi, m)
    fs = Fraction(float(np.float32(s)))
    bipolar = float(bw) == 1 and signed
    for xi, qi in zip(x, q):
        want = R.quant(Fraction(float(xi)), fs, Fraction(z), bw_arr, signed, narrow, mode)
        if bipolar:
            continue                                      # the importer's bipolar path, tested live
        assert (Fraction(int(qi)) - z) * fs == want, (xi, qi, want)


@given(st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=30), st.integers(1, 1 << 30),
       st.integers(1, 1 << 30), st.integers(-20, 20), st.integers(-5, 5), st.integers(2, 16), st.booleans(),
       st.booleans(), st.sampled_from(MODES))
def test_quant_of_codes_equals_fraction_model(vs, n, d, e, z, bw, signed, narrow, mode):
    """Requantizing codes v of scale s_in to scale S: y = v s_in / S + z, exactly."""
    s_in, s_out = Fraction(n) * Fraction(2) ** e, Fraction(d)
    ratio = s_in / s_out
    lo, hi = A.int_bounds(np.int64(bw), signed, narrow, A.rounding_mode(mode))
    q = A.quantize_codes(np.array(vs, np.int64), ratio.numerator, ratio.denominator, z, lo, hi, A.rounding_mode(mode))
    for v, qi in zip(vs, q):
        want = R.quant(v * s_in, s_out, Fraction(z), bw, signed, narrow, mode)
        assert (int(qi) - z) * s_out == want


@given(st.lists(st.integers(-(1 << 20), 1 << 20), min_size=1, max_size=20), st.integers(1, 1 << 12),
       st.integers(-3, 3), st.integers(0, 8), st.sampled_from(MODES))
def test_trunc_v1_equals_fraction_model(vs, n, z, k, mode):
    s_in, s = Fraction(n, 64), Fraction(1, 8)
    r = s_in / s
    q = A.trunc_codes(np.array(vs, np.int64), r.numerator, r.denominator, z, k, A.rounding_mode(mode))
    for v, qi in zip(vs, q):
        assert (int(qi) - z) * s == R.trunc_v1(v * s_in, s, Fraction(z), 8 + k, 8, mode)


@given(st.lists(st.integers(-(1 << 16), 1 << 16), min_size=1, max_size=20), st.integers(0, 6), st.integers(2, 8),
       st.booleans(), st.booleans(), st.sampled_from(MODES))
def test_trunc_v2_equals_fraction_model(vs, k, out_bw, signed, narrow, mode):
    s = Fraction(1, 16)
    out_s = s * 2 ** k
    m = A.rounding_mode(mode)
    bounds = A.int_bounds(np.float32(out_bw), signed, narrow, m)
    q = A.trunc_codes(np.array(vs, np.int64), 1, 1, 0, k, m, bounds)
    for v, qi in zip(vs, q):
        assert int(qi) * out_s == R.trunc_v2(v * s, s, Fraction(0), 20, out_s, np.float32(out_bw), signed, narrow, mode)


@given(st.lists(st.integers(-300, 300), min_size=1, max_size=40),
       st.lists(st.integers(-300, 300), min_size=1, max_size=15))
def test_threshold_counts_equal_fraction_model(vs, ts):
    t = np.sort(np.array(ts, np.int64))[None]
    got = A.threshold_counts(np.array(vs, np.int64)[:, None], t, 1)[:, 0]
    assert [int(g) for g in got] == [int(R.multithreshold(Fraction(v), ts, 1, 0)) for v in vs]


@given(st.lists(st.integers(-(1 << 80), 1 << 80), min_size=1, max_size=10), st.integers(1, 1 << 70))
def test_float32_reading_is_one_rounding(nums, den):
    got = A.to_float32(np.array(nums, object), den)
    for n, g in zip(nums, got):
        exact = Fraction(n, den)
        if abs(exact) >= Fraction(float(np.finfo(np.float32).max)):
            continue
        g = np.float32(g)
        lo, hi = np.nextafter(g, np.float32(-np.inf)), np.nextafter(g, np.float32(np.inf))
        err = abs(Fraction(float(g)) - exact)
        assert err <= abs(Fraction(float(lo)) - exact) and err <= abs(Fraction(float(hi)) - exact)
        if err == abs(Fraction(float(hi)) - exact) or err == abs(Fraction(float(lo)) - exact):
            assert g == 0 or int(np.float32(g).view(np.int32)) % 2 == 0        # ties to even


@given(st.lists(scales32, min_size=1, max_size=6), st.lists(scales32, min_size=1, max_size=1))
def test_exact_scales(a, b):
    sa, sb = ExactScale.from_float(np.array(a, np.float32)), ExactScale.from_float(np.array(b, np.float32))
    assert list(sa.fractions()) == [Fraction(float(np.float32(v))) for v in a]
    n, d = sa.ratio(sb)
    assert all(Fraction(int(x), int(y)) == fa / sb.fractions()[0] for x, y, fa in zip(n, d, sa.fractions()))
    s, ka, kb = common(sa, sb)
    for i, (fa, sv) in enumerate(zip(sa.fractions(), np.broadcast_to(s.fractions(), sa.m.shape))):
        assert fa == int(ka[i]) * sv and sb.fractions()[0] == int(kb[i]) * sv
    assert sa.divided(9).fractions()[0] == sa.fractions()[0] / 9


def test_fractional_width_bounds_round_like_qonnx_clamp_then_round():
    # signed 3.5 bits: qonnx's bounds are -2^2.5 and 2^2.5 - 1 (float32), rounded after the clamp
    assert A.int_bounds(np.float32(3.5), True, False, "ROUND") == (-6, 5)
    assert A.int_bounds(np.float32(3.5), True, False, "DOWN") == (-5, 4)
    assert A.int_bounds(np.float32(3.5), False, True, "FLOOR") == (0, 9)
    assert A.int_bounds(np.float32(8), True, True, "ROUND") == (-127, 127)
    assert A.int_bounds(np.float32(32), True, False, "ROUND") == (-(1 << 31), (1 << 31) - 1)
