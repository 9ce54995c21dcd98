"""Property tests of fxpsim.core.fixed against the pure-Python reference model (tests/reference.py).

Random formats (word 1..64, frac -70..90, signed and unsigned), every deterministic
rounding mode, every overflow mode (with SystemC's ``n_bits``), and values chosen to hit
ties, ±0, the code range edges ± 1 LSB, subnormals, huge values and infinities, and the
doubles just below a tie.  Stochastic rounding is checked for reproducibility, for
always landing on the floor or the ceiling of the exact value, and for being unbiased.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import reference as ref
import fxpsim.core.fixed as fixed
from fxpsim.core.fixed import Format, from_float, from_raw

WORDS = st.integers(1, 64)
FRACS = st.integers(-70, 90)
FORMATS = st.builds(Format, WORDS, FRACS, st.booleans())
ROUNDINGS = st.sampled_from(ref.DETERMINISTIC_ROUNDING_MODES)
OVERFLOWS = st.sampled_from(ref.OVERFLOW_MODES)
JUST_BELOW_HALF = 0.49999999999999994


def codes_of(result) -> list[int]:
    """Raw codes as exact Python ints (unsigned 64-bit formats hold uint64)."""
    return [int(c) for c in np.asarray(result.raw).reshape(-1)]


def fmt_tuple(fmt: Format) -> tuple[int, int, bool]:
    return (fmt.word, fmt.frac, fmt.signed)


def _to_float(q: Fraction) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


@st.composite
def values_for(draw, fmt: Format) -> float:
    """One float aimed at an interesting spot of ``fmt``."""
    lsb = Fraction(2) ** -fmt.frac
    lo, hi = fmt.min_code, fmt.max_code
    near_code = st.one_of(st.integers(lo - 3, lo + 3), st.integers(hi - 3, hi + 3), st.integers(-4, 4),
                          st.integers(lo - 2 ** 8, hi + 2 ** 8))
    kind = draw(st.sampled_from(["tie", "tie_next", "below_half", "edge", "zero", "tiny", "huge",
                                 "random_code", "any"]))
    if kind == "tie":
        return _to_float((draw(near_code) + Fraction(1, 2)) * lsb)
    if kind == "tie_next":
        tie = _to_float((draw(near_code) + Fraction(1, 2)) * lsb)
        return float(np.nextafter(tie, draw(st.sampled_from([-math.inf, math.inf]))))
    if kind == "below_half":
        sign = draw(st.sampled_from([-1.0, 1.0]))
        base = draw(st.sampled_from([0, 1, 2, -3, hi, lo]))
        return _to_float(base * lsb) + sign * math.ldexp(JUST_BELOW_HALF, -fmt.frac)
    if kind == "edge":
        d = draw(st.sampled_from([Fraction(-1), Fraction(-1, 2), Fraction(0), Fraction(1, 2), Fraction(1),
                                  Fraction(2), Fraction(-1, 4), Fraction(3, 4)]))
        return _to_float((draw(st.sampled_from([lo, hi, -hi])) + d) * lsb)
    if kind == "zero":
        return draw(st.sampled_from([0.0, -0.0]))
    if kind == "tiny":
        return draw(st.sampled_from([5e-324, -5e-324, 2.2250738585072014e-308, -1e-310, 1e-30, -1e-300]))
    if kind == "huge":
        return draw(st.sampled_from([1e300, -1e300, math.inf, -math.inf, 1.7976931348623157e308, -2.0 ** 64,
                                     2.0 ** 63, 9.2e18]))
    if kind == "random_code":
        return _to_float(Fraction(draw(near_code)) * lsb + Fraction(draw(st.integers(0, 15)), 16) * lsb)
    return draw(st.floats(allow_nan=False, allow_infinity=True))


@st.composite
def conversion_cases(draw):
    fmt = draw(FORMATS)
    xs = draw(st.lists(values_for(fmt), min_size=1, max_size=12))
    overflow = draw(OVERFLOWS)
    n_bits = draw(st.integers(0, fmt.word)) if overflow in ("wrap", "wrap_sign_magnitude") and \
        draw(st.booleans()) else 0
    return fmt, xs, draw(ROUNDINGS), overflow, n_bits


def _expected(convert, overflow: str, fmt: Format, n_bits: int):
    """Reference codes and flags; ``None`` when fxpsim must raise ValueError instead."""
    if overflow == "wrap_sign_magnitude" and not fmt.signed:
        return None
    if overflow == "error":
        pairs = [convert("saturate", 0, i) for i in range(convert.count)]
        return None if any(f for _, f in pairs) else pairs
    return [convert(overflow, n_bits, i) for i in range(convert.count)]


# --------------------------------------------------------------------------- from_float
@given(conversion_cases())
def test_from_float_matches_reference(case):
    fmt, xs, rounding, overflow, n_bits = case

    def convert(mode, nb, i):
        return ref.from_float(xs[i], fmt.word, fmt.frac, fmt.signed, rounding, mode, nb)
    convert.count = len(xs)
    expected = _expected(convert, overflow, fmt, n_bits)
    x = np.array(xs, dtype=np.float64)
    if expected is None:
        with pytest.raises(ValueError):
            from_float(x, fmt, rounding, overflow, n_bits=n_bits)
        return
    result = from_float(x, fmt, rounding, overflow, n_bits=n_bits, mask=True)
    assert result.fmt == fmt
    assert codes_of(result) == [c for c, _ in expected], (xs, fmt, rounding, overflow, n_bits)
    assert result.overflow_mask.tolist() == [f for _, f in expected]
    assert result.overflows == sum(f for _, f in expected)


@given(FORMATS, st.data())
def test_quantize_is_from_float_to_float(fmt, data):
    xs = data.draw(st.lists(values_for(fmt), min_size=1, max_size=8))
    x = np.array(xs)
    expected = [float(ref.to_fraction(ref.from_float(v, fmt.word, fmt.frac, fmt.signed, "half_up", "saturate")[0],
                                      fmt.frac)) for v in xs]
    np.testing.assert_array_equal(fixed.quantize(x, fmt), np.array(expected))


# --------------------------------------------------------------------------- cast
@st.composite
def codes_in(draw, fmt: Format, min_size=1, max_size=10):
    lo, hi = fmt.min_code, fmt.max_code
    code = st.one_of(st.integers(lo, min(lo + 3, hi)), st.integers(max(hi - 3, lo), hi),
                     st.integers(max(lo, -4), min(hi, 4)), st.integers(lo, hi))
    return draw(st.lists(code, min_size=min_size, max_size=max_size))


@given(FORMATS, st.data())
def test_cast_matches_reference(src, data):
    codes = data.draw(codes_in(src))
    dst = data.draw(st.one_of(FORMATS, st.builds(Format, WORDS, st.integers(src.frac - 4, src.frac + 4),
                                                  st.booleans())))
    rounding, overflow = data.draw(ROUNDINGS), data.draw(OVERFLOWS)
    n_bits = data.draw(st.integers(0, dst.word)) if overflow.startswith("wrap") else 0

    def convert(mode, nb, i):
        return ref.cast(codes[i], src.word, src.frac, src.signed, dst.word, dst.frac, dst.signed, rounding, mode,
                        nb)
    convert.count = len(codes)
    expected = _expected(convert, overflow, dst, n_bits)
    a = from_raw(np.array(codes, dtype=np.uint64 if src._u64 else np.int64), src)
    if expected is None:
        with pytest.raises(ValueError):
            a.cast(dst, rounding, overflow, n_bits=n_bits)
        return
    result = a.cast(dst, rounding, overflow, n_bits=n_bits, mask=True)
    assert result.fmt == dst
    assert codes_of(result) == [c for c, _ in expected], (codes, src, dst, rounding, overflow, n_bits)
    assert result.overflow_mask.tolist() == [f for _, f in expected]
    assert result.overflows == sum(f for _, f in expected)


# --------------------------------------------------------------------------- exact arithmetic
@st.composite
def operand_pairs(draw):
    fa = draw(FORMATS)
    # half the time, b's fraction bits sit near a's so that sums stay within 64 bits
    fb = draw(st.one_of(FORMATS, st.builds(Format, st.integers(1, 64), st.integers(fa.frac - 6, fa.frac + 6),
                                           st.booleans())))
    n = draw(st.integers(1, 8))
    ca = draw(codes_in(fa, n, n))
    cb = draw(codes_in(fb, n, n))
    return fa, ca, fb, cb


def _array(codes, fmt):
    return from_raw(np.array(codes, dtype=np.uint64 if fmt._u64 else np.int64), fmt)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@given(case=operand_pairs())
def test_exact_binary_ops_match_reference(op, case):
    fa, ca, fb, cb = case
    ref_op = {"add": ref.add, "sub": ref.sub, "mul": ref.mul}[op]
    py_op = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}[op]
    expected = [ref_op(x, fa, y, fb) for x, y in zip(ca, cb)]
    out_fmt = expected[0][1]
    a, b = _array(ca, fa), _array(cb, fb)
    if out_fmt.word > 64:
        with pytest.raises(ValueError, match="cast"):
            py_op(a, b)
        return
    result = py_op(a, b)
    assert fmt_tuple(result.fmt) == tuple(out_fmt), (op, fa, fb)
    assert codes_of(result) == [c for c, _ in expected]
    assert result.overflows == 0
    # broadcasting one element against all of them gives the same codes
    assert codes_of(py_op(a[:1], b)) == [ref_op(ca[0], fa, y, fb)[0] for y in cb]


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@given(case=operand_pairs(), dst=FORMATS, rounding=ROUNDINGS,
       overflow=st.sampled_from(["saturate", "wrap", "saturate_symmetric", "saturate_zero"]))
def test_fused_ops_round_the_exact_result_once(op, case, dst, rounding, overflow):
    fa, ca, fb, cb = case
    ref_op = {"add": ref.add, "sub": ref.sub, "mul": ref.mul}[op]
    grown = ref_op(ca[0], fa, cb[0], fb)[1]
    assume(grown.word <= 125)
    exact = [ref.to_fraction(ref_op(x, fa, y, fb)[0], grown.frac) for x, y in zip(ca, cb)]
    expected = [ref.quantize_exact(v, dst.word, dst.frac, dst.signed, rounding, overflow) for v in exact]
    result = getattr(fixed, op)(_array(ca, fa), _array(cb, fb), dst, rounding, overflow)
    assert result.fmt == dst
    assert codes_of(result) == [c for c, _ in expected], (op, fa, ca, fb, cb, dst, rounding, overflow)
    assert result.overflows == sum(f for _, f in expected)


@given(FORMATS, st.data())
def test_neg_and_abs_match_reference(fmt, data):
    codes = data.draw(codes_in(fmt))
    a = _array(codes, fmt)
    neg_fmt, abs_fmt = ref.neg_format(fmt), ref.abs_format(fmt)
    if neg_fmt.word > 64:
        with pytest.raises(ValueError, match="cast"):
            -a
    else:
        result = -a
        assert fmt_tuple(result.fmt) == tuple(neg_fmt), fmt
        assert codes_of(result) == [ref.neg(c, fmt)[0] for c in codes]
    if abs_fmt.word > 64:
        with pytest.raises(ValueError, match="cast"):
            abs(a)
    else:
        result = abs(a)
        assert fmt_tuple(result.fmt) == tuple(abs_fmt), fmt
        assert codes_of(result) == [ref.abs_(c, fmt)[0] for c in codes]


@given(FORMATS, st.data())
def test_sum_matches_reference(fmt, data):
    rows, cols = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    codes = data.draw(codes_in(fmt, rows * cols, rows * cols))
    a = _array(codes, fmt).reshape(rows, cols)
    grid = [codes[r * cols:(r + 1) * cols] for r in range(rows)]
    cases = {None: [codes], 0: [list(col) for col in zip(*grid)], 1: grid}
    for axis, groups in cases.items():
        n = len(groups[0])
        expected_fmt = ref.sum_format(fmt, n)
        if expected_fmt.word > 64:
            with pytest.raises(ValueError, match="cast"):
                a.sum(axis=axis)
            continue
        result = a.sum(axis=axis)
        assert fmt_tuple(result.fmt) == tuple(expected_fmt), (fmt, axis)
        assert codes_of(result) == [ref.sum_(g, fmt)[0] for g in groups], (fmt, axis)


@given(case=operand_pairs())
def test_comparisons_match_exact_values(case):
    fa, ca, fb, cb = case
    a, b = _array(ca, fa), _array(cb, fb)
    va = [ref.to_fraction(c, fa.frac) for c in ca]
    vb = [ref.to_fraction(c, fb.frac) for c in cb]
    assert (a < b).tolist() == [x < y for x, y in zip(va, vb)], (fa, ca, fb, cb)
    assert (a <= b).tolist() == [x <= y for x, y in zip(va, vb)]
    assert (a == b).tolist() == [x == y for x, y in zip(va, vb)]
    assert (a != b).tolist() == [x != y for x, y in zip(va, vb)]
    assert (a > b).tolist() == [x > y for x, y in zip(va, vb)]
    assert (a >= b).tolist() == [x >= y for x, y in zip(va, vb)]


# --------------------------------------------------------------------------- stochastic rounding
@given(FORMATS, st.data())
def test_stochastic_is_reproducible_and_lands_on_a_neighbour(fmt, data):
    xs = data.draw(st.lists(values_for(fmt), min_size=1, max_size=12))
    seed = data.draw(st.integers(0, 2 ** 32))
    x = np.array(xs)
    first = from_float(x, fmt, "stochastic", "saturate", seed=seed)
    again = from_float(x, fmt, "stochastic", "saturate", seed=seed)
    assert codes_of(first) == codes_of(again)
    for v, code in zip(xs, codes_of(first)):
        down = ref.from_float(v, fmt.word, fmt.frac, fmt.signed, "floor", "saturate")[0]
        up = ref.from_float(v, fmt.word, fmt.frac, fmt.signed, "ceil", "saturate")[0]
        assert code in (down, up), (v, fmt, code, down, up)


@pytest.mark.parametrize("x, frac", [(0.3, 4), (-0.3, 4), (1.0 / 3.0, 0), (-2.71828, 2), (1e-5, 10),
                                     (0.49999999999999994, 0), (5e-324, 0),
                                     # subnormal inputs and huge frac take the exact (slow) path
                                     (5e-324, 1075), (-3 * 5e-324, 1076), (1e-310, 1040), (-1e-310, 1033)])
def test_stochastic_rounding_is_unbiased(x, frac):
    n = 200_000
    fmt = Format(32, frac)
    exact = Fraction(x) * 2 ** frac
    floor_code = math.floor(exact)
    p = float(exact - floor_code)                          # probability of rounding up
    codes = from_float(np.full(n, x), fmt, "stochastic", seed=12345).raw
    assert set(np.unique(codes).tolist()) <= {floor_code, floor_code + 1}
    ups = int((codes == floor_code + 1).sum())
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(ups - n * p) <= 6 * sigma + 1, (ups, n * p, sigma)


def test_stochastic_cast_is_unbiased_and_seeded():
    n = 100_000
    src = from_raw(np.full(n, 11, dtype=np.int64), Format(16, 4))   # 11/16 -> 0.6875 above floor 0
    a = src.cast(Format(8, 0), "stochastic", seed=7)
    b = src.cast(Format(8, 0), "stochastic", seed=7)
    c = src.cast(Format(8, 0), "stochastic", seed=8)
    assert np.array_equal(a.raw, b.raw) and not np.array_equal(a.raw, c.raw)
    assert set(np.unique(a.raw).tolist()) == {0, 1}
    p = 11 / 16
    assert abs(int(a.raw.sum()) - n * p) <= 6 * math.sqrt(n * p * (1 - p))


def test_stochastic_without_seed_differs_between_calls():
    x = np.full(2000, 0.5)
    a = from_float(x, Format(8, 0), "stochastic").raw
    b = from_float(x, Format(8, 0), "stochastic").raw
    assert not np.array_equal(a, b)


# --------------------------------------------------------------------------- to_float
@given(FORMATS, st.data())
def test_to_float_is_the_correctly_rounded_value(fmt, data):
    codes = data.draw(codes_in(fmt))
    values = _array(codes, fmt).to_float()
    assert values.dtype == np.float64
    assert values.tolist() == [_to_float(ref.to_fraction(c, fmt.frac)) for c in codes], (fmt, codes)


@pytest.mark.parametrize("code, frac", [
    (3 * 2 ** 59 - 1, 1074 + 60),   # (1.5 - 2^-60) * 2^-1074: rounds to 1 subnormal LSB, not to the tie's even 2
    (2 ** 62 + 1, 1074 + 62),       # just above 2^-1074
    (5, 1075),                      # 2.5 * 2^-1074 -> 2 (ties to even)
    (-(2 ** 61) - 1, 1020),         # normal range, more than 53 significant bits
    (1, -1023),                     # 2^1023
    (3, -1023),                     # 1.5 * 2^1024 overflows to inf
])
def test_to_float_far_from_one(code, frac):
    fmt = Format(64, frac)
    assert from_raw([code], fmt).to_float().tolist() == [_to_float(ref.to_fraction(code, frac))]


# --------------------------------------------------------------------------- integer inputs
@given(FORMATS, st.data())
def test_integer_inputs_are_converted_exactly(fmt, data):
    dtype = data.draw(st.sampled_from([np.int64, np.uint64, np.int8, np.uint32]))
    info = np.iinfo(dtype)
    ints = data.draw(st.lists(st.one_of(st.integers(int(info.min), int(info.max)),
                                        st.sampled_from([int(info.min), int(info.max), 0, 1, int(info.max) - 1])),
                              min_size=1, max_size=8))
    rounding = data.draw(ROUNDINGS)
    overflow = data.draw(st.sampled_from(["saturate", "wrap", "saturate_zero"]))
    expected = [ref.quantize_exact(Fraction(v), fmt.word, fmt.frac, fmt.signed, rounding, overflow) for v in ints]
    result = from_float(np.array(ints, dtype=dtype), fmt, rounding, overflow, mask=True)
    assert codes_of(result) == [c for c, _ in expected], (ints, dtype, fmt, rounding, overflow)
    assert result.overflow_mask.tolist() == [f for _, f in expected]


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@given(case=operand_pairs(), frac_drop=st.integers(1, 40), seed=st.integers(0, 2 ** 32))
def test_fused_stochastic_is_seeded_and_lands_on_a_neighbour(op, case, frac_drop, seed):
    fa, ca, fb, cb = case
    ref_op = {"add": ref.add, "sub": ref.sub, "mul": ref.mul}[op]
    grown = ref_op(ca[0], fa, cb[0], fb)[1]
    assume(grown.word <= 125)
    dst = Format(64, grown.frac - frac_drop, grown.signed)
    a, b = _array(ca, fa), _array(cb, fb)
    first = getattr(fixed, op)(a, b, dst, "stochastic", seed=seed)
    assert codes_of(first) == codes_of(getattr(fixed, op)(a, b, dst, "stochastic", seed=seed))
    for x, y, code in zip(ca, cb, codes_of(first)):
        exact = ref.to_fraction(ref_op(x, fa, y, fb)[0], grown.frac)
        down = ref.quantize_exact(exact, dst.word, dst.frac, dst.signed, "floor", "saturate")[0]
        up = ref.quantize_exact(exact, dst.word, dst.frac, dst.signed, "ceil", "saturate")[0]
        assert code in (down, up)
