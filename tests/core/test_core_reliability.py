"""Reliability review of fxpsim.core: extreme shifts, extreme formats, mixed operands and bad input.

Every expected value comes from tests/reference.py (exact Python integers and Fractions) or is
worked out by hand in a comment; none comes from the code under test.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference as ref
import fxpsim
import fxpsim.core.fixed as fixed
from fxpsim.core.fixed import FixedArray, Format, from_float, from_raw

MASK64 = (1 << 64) - 1


def codes_of(result) -> list[int]:
    return [int(c) for c in np.asarray(result.raw).reshape(-1)]


def splitmix64(x: int) -> int:
    """The kernels' counter hash (_kernels.pxd), on Python ints."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


# --------------------------------------------------------------------------- shifts of 128 bits and more
@pytest.mark.parametrize("dst, rounding, expected", [
    # (-2^63 * 2^-64)^2 = 1/4 exactly; the product has 128 fraction bits.
    (Format(8, 0), "half_up", 0),        # 0.25 -> 0 (the shift of 128 was capped at 127: 0.5 -> 1)
    (Format(8, 0), "half_away", 0),
    (Format(8, 0), "ceil", 1),
    (Format(8, 0), "floor", 0),
    (Format(8, 1), "half_up", 1),        # 0.5 -> tie -> up
    (Format(8, 1), "half_even", 0),      # 0.5 -> tie -> even 0
    (Format(8, 2), "floor", 1),          # 1 exactly
    (Format(8, -5), "ceil", 1),          # 0.25 / 32 -> up to 1 (shift 133)
    (Format(8, -500), "floor", 0),       # shift 628
])
def test_mul_of_the_largest_product_rounds_at_any_shift(dst, rounding, expected):
    a = from_raw([-2 ** 63], Format(64, 64))
    assert codes_of(fixed.mul(a, a, dst, rounding)) == [expected]


def _ref_binary(op, ca, fa, cb, fb, dst, rounding, overflow):
    """(code, overflowed) of the exact op rounded into dst, or None for overflow='error' raising."""
    code, fmt = getattr(ref, op)(ca, fa, cb, fb)
    value = ref.to_fraction(code, fmt.frac)
    mode = "saturate" if overflow == "error" else overflow
    return ref.quantize_exact(value, dst.word, dst.frac, dst.signed, rounding, mode)


EXTREME_CODES = st.sampled_from([-2 ** 63, -2 ** 63 + 1, -2 ** 62, -1, 0, 1, 2 ** 62, 2 ** 63 - 1])


@st.composite
def far_shift_cases(draw):
    """64-bit operands with products up to 2^126, results 100..400 bits coarser than the product."""
    fa = Format(64, draw(st.integers(0, 100)), True)
    fb = Format(64, draw(st.integers(0, 100)), True)
    n = draw(st.integers(1, 6))
    # the first pair always gives the largest product, (-2^63)^2 = 2^126
    ca = [-2 ** 63] + draw(st.lists(EXTREME_CODES | st.integers(-2 ** 63, 2 ** 63 - 1), min_size=n, max_size=n))
    cb = [-2 ** 63] + draw(st.lists(EXTREME_CODES | st.integers(-2 ** 63, 2 ** 63 - 1), min_size=n, max_size=n))
    drop = draw(st.integers(100, 400))
    dst = Format(draw(st.integers(1, 64)), fa.frac + fb.frac - drop, draw(st.booleans()))
    return fa, fb, ca, cb, dst


@given(case=far_shift_cases(), rounding=st.sampled_from(ref.DETERMINISTIC_ROUNDING_MODES),
       overflow=st.sampled_from(["saturate", "wrap", "saturate_zero", "saturate_symmetric"]))
def test_fused_mul_at_far_shifts_matches_reference(case, rounding, overflow):
    fa, fb, ca, cb, dst = case
    got = fixed.mul(from_raw(ca, fa), from_raw(cb, fb), dst, rounding, overflow)
    assert codes_of(got) == [_ref_binary("mul", x, fa, y, fb, dst, rounding, overflow)[0]
                             for x, y in zip(ca, cb)]


@given(case=far_shift_cases(), rounding=st.sampled_from(ref.DETERMINISTIC_ROUNDING_MODES))
def test_fused_add_and_cast_at_far_shifts_match_reference(case, rounding):
    fa, _, ca, cb, dst = case
    fb = Format(64, fa.frac + 3, True)            # add: operands of different LSBs, sums up to 2^67
    got = fixed.add(from_raw(ca, fa), from_raw(cb, fb), Format(dst.word, fa.frac - 130, dst.signed), rounding)
    assert codes_of(got) == [_ref_binary("add", x, fa, y, fb, got.fmt, rounding, "saturate")[0]
                             for x, y in zip(ca, cb)]
    for shift in (127, 128, 129, 200, 5000):
        target = Format(dst.word, fa.frac - shift, dst.signed)
        got = from_raw(ca, fa).cast(target, rounding, "wrap")
        assert codes_of(got) == [ref.cast(c, 64, fa.frac, True, target.word, target.frac, target.signed,
                                          rounding, "wrap")[0] for c in ca]


@given(case=far_shift_cases(), seed=st.integers(0, 2 ** 32))
def test_stochastic_rounding_at_far_shifts_uses_the_exact_fraction(case, seed):
    # Stochastic rounding goes up iff u < frac(v), u = splitmix64(seed_word + i) / 2^64 (the kernels'
    # definition at every shift); at shifts >= 128 only u = 0 (positive v) or u close to 1 (negative
    # v) can change the floor, so fixed draws of u are checked too.
    fa, fb, ca, cb, dst = case
    word = fixed._seed_word(seed)
    got = fixed.mul(from_raw(ca, fa), from_raw(cb, fb), dst, "stochastic", "wrap", seed=seed)
    expected = []
    for i, (x, y) in enumerate(zip(ca, cb)):
        code, fmt = ref.mul(x, fa, y, fb)
        q = ref.to_fraction(code, fmt.frac) * Fraction(2) ** dst.frac
        u = Fraction(splitmix64((word + i) & MASK64), 1 << 64)
        expected.append(ref.overflow_int(ref.round_fraction(q, "stochastic", u), dst.word, dst.signed, "wrap")[0])
    assert codes_of(got) == expected


def unsplitmix64(y: int) -> int:
    """Inverse of splitmix64: the counter whose random word is ``y``."""
    y ^= (y >> 31) ^ (y >> 62)
    y = (y * pow(0x94D049BB133111EB, -1, 1 << 64)) & MASK64
    y ^= (y >> 27) ^ (y >> 54)
    y = (y * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & MASK64
    y ^= (y >> 30) ^ (y >> 60)
    return (y - 0x9E3779B97F4A7C15) & MASK64


@pytest.mark.parametrize("a, b, shift, rnd, expected", [
    # v = a*b > 0: up iff rnd * 2^(s-64) < v, i.e. u = rnd / 2^64 < v / 2^s
    (1, 1, 128, 0, 1), (1, 1, 128, 1, 0), (274177, 67280421310721, 128, 1, 1),   # v = 2^64 + 1
    (2 ** 32, 2 ** 32, 128, 1, 0), (2 ** 32, 2 ** 32, 128, 0, 1), (1, 1, 400, 0, 1),
    # v < 0: floor is -1, up iff rnd * 2^(s-64) < 2^s + v
    # (frac = 1 - |v|/2^s: v = -1 always goes up since u <= 1 - 2^-64 < 1 - 2^-128)
    (-1, 1, 128, MASK64, 0), (-1, 1, 300, MASK64, 0), (-(2 ** 32), 2 ** 32, 128, MASK64, -1),
    (-(2 ** 32), 2 ** 32, 128, MASK64 - 1, 0), (-(2 ** 33), 2 ** 32, 128, MASK64 - 1, -1),
    (-(2 ** 33), 2 ** 32, 128, MASK64 - 2, 0),
    (-(2 ** 63), -(2 ** 63), 129, 2 ** 61, 0), (-(2 ** 63), -(2 ** 63), 129, 2 ** 61 - 1, 1),  # v/2^s = 1/8
])
def test_stochastic_far_shift_decision_by_hand(a, b, shift, rnd, expected):
    from fxpsim.core import _core
    assert splitmix64(unsplitmix64(rnd)) == rnd
    assert ref.round_fraction(Fraction(a * b, 1 << shift), "stochastic", Fraction(rnd, 1 << 64)) == expected
    out = np.empty(1, np.int64)
    _core.binary(2, np.array([a], np.int64), np.array([b], np.int64), out, False, False, 0, 0, shift, 8, True,
                 fixed.Rounding.STOCHASTIC.code, fixed.Overflow.WRAP.code, 0, unsplitmix64(rnd), 127)
    assert int(out[0]) == expected


@pytest.mark.parametrize("frac", [1075 + 60, 2000, 10 ** 5])
@pytest.mark.parametrize("rounding, x, expected", [
    ("ceil", 5e-324, 1), ("floor", -5e-324, -1), ("half_up", 5e-324, 0), ("toward_zero", -1e-300, 0),
])
def test_from_float_far_below_the_lsb(frac, rounding, x, expected):
    # x * 2^-frac' with frac' = -frac: far below 1/2 of the LSB of Format(8, -frac)
    got = from_float([x], Format(8, -frac), rounding)
    assert codes_of(got) == [expected]


# --------------------------------------------------------------------------- extreme formats
def test_format_limits_beyond_float64_are_exact():
    fmt = Format(8, -1018)
    assert fmt.max_value == 127 * 2 ** 1018 and type(fmt.max_value) is int      # > float64 max
    assert fmt.min_value == -(2 ** 1025)
    assert Format(8, -1023).lsb == 2 ** 1023 and type(Format(8, -1023).lsb) is float
    assert Format(8, -1024).lsb == 2 ** 1024 and type(Format(8, -1024).lsb) is int
    tiny = Format(8, 1100)
    assert tiny.max_value == Fraction(127, 2 ** 1100) and tiny.lsb == Fraction(1, 2 ** 1100)
    assert Format(1, 1074).min_value == -5e-324                 # a float64 subnormal: exact float
    assert Format(16, 8).max_value == 127.99609375 and type(Format(16, 8).max_value) is float


@pytest.mark.parametrize("fmt", [Format(8, -1018), Format(8, -5000), Format(8, 1100)])
def test_overflow_error_on_extreme_formats_is_a_value_error(fmt):
    with pytest.raises(ValueError, match="overflow='error'"):
        from_float([np.inf], fmt, overflow="error")
    big = from_raw([127], fmt)
    with pytest.raises(ValueError, match="overflow='error'"):
        big.cast(Format(4, fmt.frac), overflow="error")
    with pytest.raises(ValueError, match="overflow='error'"):
        fixed.add(big, big, Format(8, fmt.frac), overflow="error")


def test_overflow_log_survives_values_beyond_float64():
    with fixed.overflow_log() as log:
        from_raw([127], Format(8, -1018)).cast(Format(4, -1018))
    assert log["cast"].count == 1


@st.composite
def tiny_ranges(draw):
    e = draw(st.integers(-1074, -990))
    mag = math.ldexp(draw(st.integers(1, 2 ** 52)), e) if e > -1074 + 52 else math.ldexp(1.0, e)
    return draw(st.sampled_from([(-mag, mag), (0.0, mag), (-mag, 0.0), (mag / 2, mag)]))


@given(rng=tiny_ranges(), word=st.integers(2, 64), signed=st.booleans())
def test_for_range_is_the_finest_format_for_tiny_ranges(rng, word, signed):
    lo, hi = rng
    if not signed and lo < 0:
        return
    fmt = Format.for_range(lo, hi, word, signed)
    value = lambda code, f: Fraction(code) / Fraction(2) ** f          # noqa: E731
    assert value(fmt.min_code, fmt.frac) <= Fraction(lo) and Fraction(hi) <= value(fmt.max_code, fmt.frac)
    finer = fmt.frac + 1
    assert not (value(fmt.min_code, finer) <= Fraction(lo) and Fraction(hi) <= value(fmt.max_code, finer))


def test_for_range_below_2_to_minus_1000_by_hand():
    # 127 * 2^-1036 = 1.59e-310 >= 1e-310 > 127 * 2^-1037 = 7.9e-311 (the old floor of 2^-1000 gave 1007)
    assert Format.for_range(-1e-310, 1e-310, 8) == Format(8, 1036)
    assert Format.for_range(0.0, 5e-324, 8, signed=False) == Format(8, 1081, False)   # 255 * 2^-1081 >= 2^-1074


# --------------------------------------------------------------------------- extended precision input
def test_from_float_rejects_longdouble_values_that_float64_cannot_hold():
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("longdouble is float64 on this platform")
    L = np.longdouble
    x = np.array([1.0, L(2) ** -9 + L(2) ** -70])       # exact value: 2^-9 + 2^-70, above the tie of Q0.8
    with pytest.raises(TypeError, match=r"longdouble|float128|float96"):
        from_float(x, Format(8, 8), "half_down")
    # values that are float64 numbers go through exactly (half_down: the tie 2^-9 * 2^8 = 1/2 -> 0)
    assert codes_of(from_float(np.array([L(2) ** -9, L(3)]), Format(8, 4), "half_down")) == [0, 48]
    # a longdouble constant mixes exactly: (2^-8 + 2^-9 + 2^-70) * 2^8 = 1.5 + 2^-62 -> half_down 2
    # (through float64 the constant would be 2^-9, a tie, and half_down would give 1)
    one = from_raw([1], Format(8, 8))
    assert codes_of(fixed.add(one, L(2) ** -9 + L(2) ** -70, Format(8, 8), "half_down")) == [2]


# --------------------------------------------------------------------------- mixed operands
def test_fixed_plus_integer_ndarray_stays_fixed_point():
    a = from_raw([256, -256], Format(16, 8))              # 1.0, -1.0
    ints = np.array([3, -4], dtype=np.int8)               # exact integers: Format(4, 0) (-4..3)
    for res, expected in ((a + ints, [4.0, -5.0]), (ints + a, [4.0, -5.0]), (a - ints, [-2.0, 3.0]),
                          (ints - a, [2.0, -3.0]), (a * ints, [3.0, 4.0]), (ints * a, [3.0, 4.0])):
        assert isinstance(res, FixedArray)
        assert res.to_float().tolist() == expected
    assert (a + ints).fmt == Format(17, 8)                # Q7.8 + Format(4, 0): 9 integer bits + 8
    assert (a + np.array([200], np.uint8)).fmt == Format(18, 8)     # uint8 200 -> Format(8, 0, unsigned)
    assert ((ints == a)).tolist() == [False, False]
    assert (np.array([1, -1]) == a).tolist() == [True, True]


@pytest.mark.parametrize("other", [np.array([1.5, 2.0]), np.array([True, False]), np.array(["a", "b"])])
def test_fixed_with_non_integer_ndarray_raises_type_error_both_ways(other):
    a = from_raw([1, 2], Format(8, 0))
    with pytest.raises(TypeError, match="from_float" if other.dtype.kind == "f" else "integer"):
        a + other
    with pytest.raises(TypeError, match="from_float" if other.dtype.kind == "f" else "integer"):
        other + a
    with pytest.raises(TypeError):
        fixed.add(a, other)


def test_numpy_ufuncs_defer_to_fixed_array():
    a = from_raw([1, 2], Format(8, 0))
    with pytest.raises(TypeError, match="ufunc"):
        np.sqrt(a)
    assert np.asarray(a).tolist() == [1.0, 2.0]           # explicit conversion still works


def test_truthiness_is_numpys():
    assert bool(from_raw([3], Format(8, 0))) is True
    assert bool(from_raw(0, Format(8, 0))) is False
    assert bool(from_raw([[0]], Format(8, 0))) is False
    for codes in ([1, 2], [], [[1, 0]]):
        with pytest.raises(ValueError, match="ambiguous"):
            bool(from_raw(np.array(codes, dtype=np.int64), Format(8, 0)))


# --------------------------------------------------------------------------- clear errors, checked first
def test_sum_axis_out_of_range_names_the_axis():
    a = from_raw([[1, 2], [3, 4]], Format(8, 0))
    with pytest.raises(ValueError, match="axis 5"):
        a.sum(axis=5)
    with pytest.raises(TypeError, match="axis"):
        a.sum(axis=1.5)
    assert codes_of(a.sum(axis=-1)) == [3, 7]
    assert codes_of(a.sum(axis=(0, 1))) == [10]


@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (1.5, TypeError), ("7", TypeError), (True, TypeError)])
def test_bad_seed_is_rejected_up_front_for_every_rounding_mode(seed, exc):
    a = from_raw([1, 2], Format(8, 2))
    for rounding in ("stochastic", "half_up"):
        with pytest.raises(exc, match="seed"):
            a.cast(Format(8, 0), rounding, seed=seed)
        with pytest.raises(exc, match="seed"):
            from_float([0.3], Format(8, 2), rounding, seed=seed)
        with pytest.raises(exc, match="seed"):
            fixed.mul(a, a, Format(8, 0), rounding, seed=seed)
    assert codes_of(a.cast(Format(8, 0), "stochastic", seed=np.uint32(3))) == \
        codes_of(a.cast(Format(8, 0), "stochastic", seed=3))


def test_public_names_still_resolve():
    assert fxpsim.from_raw is from_raw


# --------------------------------------------------------------------------- vector kernels
@pytest.mark.parametrize("op", [0, 1, 2])
@pytest.mark.parametrize("rounding", [r for r in fixed.Rounding if r is not fixed.Rounding.STOCHASTIC])
@pytest.mark.parametrize("overflow", ["saturate", "saturate_zero", "saturate_symmetric", "wrap", "error"])
def test_vector_binary_kernel_equals_the_128_bit_kernel(op, rounding, overflow):
    """The one-pass vector loops (exact value on 63 bits, shift 0..63) against the scalar 128-bit loop
    (forced with exact_word=127), every operation, rounding and overflow mode, signed and unsigned."""
    from fxpsim.core import _core
    rng = np.random.default_rng(op * 100 + rounding.code * 10 + len(overflow))
    o = fixed.Overflow.parse(overflow)
    for word, signed, shift_out, sa, sb, bits in ((8, True, 3, 0, 2, 12), (16, False, 0, 1, 0, 20),
                                                  (63, True, 63, 0, 0, 30), (1, True, 1, 3, 0, 5),
                                                  (64, True, 10, 0, 5, 28), (40, False, 62, 2, 2, 29)):
        a = rng.integers(-(1 << bits), 1 << bits, 257)
        b = rng.integers(-(1 << bits), 1 << bits, 257)
        a[:4], b[:4] = [-(1 << bits), (1 << bits) - 1, 0, -1], [(1 << bits) - 1, -(1 << bits), -1, 0]
        if op == 2:                                     # products are never pre-shifted (callers pass 0)
            sa = sb = 0
        results = []
        for exact_word in (63, 127):
            out = np.empty(a.size, np.int64)
            count = _core.binary(op, a, b, out, False, False, sa, sb, shift_out, word, signed, rounding.code,
                                 o.code, 0, 0, exact_word)
            results.append((out.tolist(), count))
        assert results[0] == results[1], (word, signed, shift_out)


@pytest.mark.parametrize("rounding", [r for r in fixed.Rounding if r is not fixed.Rounding.STOCHASTIC])
@pytest.mark.parametrize("overflow", ["saturate", "saturate_zero", "saturate_symmetric", "wrap"])
def test_vector_cast_equals_the_flagged_scalar_cast(rounding, overflow):
    rng = np.random.default_rng(rounding.code)
    for src, dst in ((Format(64, 20), Format(8, 3)), (Format(64, 0), Format(64, 0)), (Format(33, 63, False),
                     Format(12, 0, False)), (Format(64, 63), Format(1, 0)), (Format(20, 5), Format(30, 9))):
        codes = rng.integers(src.min_code, src.max_code, 300, endpoint=True)
        codes[:2] = [src.min_code, src.max_code]
        x = from_raw(codes, src)
        fast = x.cast(dst, rounding, overflow)
        flagged = x.cast(dst, rounding, overflow, mask=True)
        assert codes_of(fast) == codes_of(flagged) and fast.overflows == flagged.overflows
        assert fast.overflows == int(flagged.overflow_mask.sum())
