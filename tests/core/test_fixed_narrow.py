"""Narrow code storage (issue 25): ``Format.storage_dtype`` and FixedArrays whose codes live in it.

Every result is checked against the independent Python-int / Fraction model of ``tests/reference.py``
(``quantize_exact`` of the exact value, computed here from Python ints), together with the dtype of
``.codes`` (a hand table of the narrowest dtype), ``.raw`` (int64, uint64 for unsigned 64-bit, equal to
``.codes``) and the operands, which must come back unchanged.  Formats of every width 1..64, signed and
unsigned, fraction bits anywhere; operands of different widths mix (int8 with int32, unsigned with
signed), so the kernels' int16 / int8 in-place loops, their int32 and int64 block paths and the 128-bit
scalar path are all reached; long arrays cross the 1024-code blocks.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import reference as ref
import fxpsim.core.fixed as fixed
from fxpsim.core import _core
from fxpsim.core.fixed import Format, from_float, from_raw

# widths at the dtype boundaries (and the kernels' 32-bit compute limit) are drawn often
WORDS = st.one_of(st.integers(1, 64), st.sampled_from([1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64]))
FORMATS = st.builds(Format, WORDS, st.one_of(st.integers(-20, 40), st.integers(0, 3)), st.booleans())
EDGE_FORMATS = st.builds(Format, st.sampled_from([7, 8, 9, 15, 16, 17, 31, 32, 33]), st.integers(0, 3), st.booleans())
SMALL_FORMATS = st.builds(Format, st.integers(1, 33), st.integers(-4, 20), st.booleans())
ROUNDINGS = st.sampled_from(ref.DETERMINISTIC_ROUNDING_MODES)
OVERFLOWS = st.sampled_from(ref.OVERFLOW_MODES)
OPS = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}


def expected_dtype(word: int, signed: bool) -> str:
    """The hand rule: 8/16/32 bits or fewer in int8/16/32 (uint for unsigned), int64 beyond, uint64 for ufix64."""
    for size in (8, 16, 32):
        if word <= size:
            return f"int{size}" if signed else f"uint{size}"
    return "uint64" if (word == 64 and not signed) else "int64"


@st.composite
def codes_in(draw, fmt: Format, n: int):
    lo, hi = fmt.min_code, fmt.max_code
    return draw(st.lists(st.one_of(st.sampled_from([lo, hi, 0, min(hi, 1), max(lo, -1)]), st.integers(lo, hi)),
                         min_size=n, max_size=n))


def make(codes, fmt):
    return from_raw(np.array(codes, dtype=object).astype(np.uint64 if fmt._u64 else np.int64), fmt)


def check_storage(x, fmt, codes):
    """``x`` is ``codes`` in ``fmt``: stored narrow, widened to int64 (uint64) by ``.raw``."""
    assert x.fmt == fmt
    assert x.codes.dtype == np.dtype(expected_dtype(fmt.word, fmt.signed))
    assert x.raw.dtype == (np.uint64 if fmt._u64 else np.int64)
    assert not x.codes.flags.writeable and not x.raw.flags.writeable
    assert [int(c) for c in x.codes.reshape(-1)] == codes
    assert [int(c) for c in x.raw.reshape(-1)] == codes


def value(code: int, fmt: Format) -> Fraction:
    return Fraction(code) * Fraction(2) ** -fmt.frac


def model(values, fmt, rounding, overflow, n_bits=0):
    """(codes, n_overflow) of exact values, or None where overflow='error' must raise."""
    pairs = [ref.quantize_exact(v, fmt.word, fmt.frac, fmt.signed, rounding,
                                "saturate" if overflow == "error" else overflow, n_bits) for v in values]
    if overflow == "error" and any(f for _, f in pairs):
        return None
    return [c for c, _ in pairs], sum(f for _, f in pairs)


# --------------------------------------------------------------------------- the storage dtype
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("word", range(1, 65))
def test_storage_dtype_is_the_narrowest_that_holds_every_code(word, signed):
    fmt = Format(word, 3, signed)
    dtype = fmt.storage_dtype
    assert dtype == np.dtype(expected_dtype(word, signed))
    lo, hi = (-(1 << (word - 1)), (1 << (word - 1)) - 1) if signed else (0, (1 << word) - 1)
    assert np.iinfo(dtype).min <= lo and hi <= np.iinfo(dtype).max
    if dtype.itemsize > 1 and word <= 32:           # the next narrower dtype of the same kind misses a code
        narrower = np.iinfo(np.dtype(f"{dtype.kind}{dtype.itemsize // 2}"))
        assert lo < narrower.min or hi > narrower.max
    x = from_raw(np.array([lo, hi], dtype=object).astype(np.uint64 if fmt._u64 else np.int64), fmt)
    check_storage(x, fmt, [lo, hi])


# --------------------------------------------------------------------------- conversions
@given(FORMATS, FORMATS, st.data(), ROUNDINGS, OVERFLOWS)
def test_cast_between_storages_matches_the_model(src, dst, data, rounding, overflow):
    assume(not (overflow == "wrap_sign_magnitude" and not dst.signed))
    n_bits = data.draw(st.integers(0, dst.word)) if overflow.startswith("wrap") and data.draw(st.booleans()) else 0
    codes = data.draw(codes_in(src, data.draw(st.integers(1, 9))))
    x = make(codes, src)
    before = x.codes.copy()
    want = model([value(c, src) for c in codes], dst, rounding, overflow, n_bits)
    if want is None:
        with pytest.raises(ValueError, match="overflow"):
            x.cast(dst, rounding, overflow, n_bits=n_bits)
        return
    mask = data.draw(st.booleans())
    y = x.cast(dst, rounding, overflow, n_bits=n_bits, mask=mask)
    check_storage(y, dst, want[0])
    assert y.overflows == want[1]
    np.testing.assert_array_equal(x.codes, before)
    assert x.codes.dtype == before.dtype


@given(FORMATS, st.data(), ROUNDINGS, OVERFLOWS)
def test_from_float_and_to_float_on_narrow_storage(fmt, data, rounding, overflow):
    assume(not (overflow == "wrap_sign_magnitude" and not fmt.signed))
    xs = data.draw(st.lists(st.floats(-2.0 ** 40, 2.0 ** 40), min_size=1, max_size=9))
    want = model([Fraction(v) for v in xs], fmt, rounding, overflow)
    if want is None:
        with pytest.raises(ValueError, match="overflow"):
            from_float(np.array(xs), fmt, rounding, overflow)
        return
    y = from_float(np.array(xs), fmt, rounding, overflow)
    check_storage(y, fmt, want[0])
    assert y.overflows == want[1]
    assert y.to_float().tolist() == [float(value(c, fmt)) for c in want[0]]


# --------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@given(fa=FORMATS, fb=FORMATS, data=st.data())
def test_exact_ops_store_the_grown_format_narrow(op, fa, fb, data):
    n = data.draw(st.integers(1, 9))
    ca, cb = data.draw(codes_in(fa, n)), data.draw(codes_in(fb, n))
    a, b = make(ca, fa), make(cb, fb)
    grown = {"add": ref.add_format, "sub": ref.sub_format, "mul": ref.mul_format}[op](fa, fb)
    if grown.word > 64:
        with pytest.raises(ValueError, match="bits"):
            OPS[op](a, b)
        return
    y = OPS[op](a, b)
    out = Format(grown.word, grown.frac, grown.signed)
    want = [OPS[op](value(x, fa), value(z, fb)) * Fraction(2) ** out.frac for x, z in zip(ca, cb)]
    assert all(w.denominator == 1 for w in want)
    check_storage(y, out, [int(w) for w in want])
    check_storage(a, fa, ca)
    check_storage(b, fb, cb)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@given(fa=FORMATS, fb=FORMATS, dst=FORMATS, rounding=ROUNDINGS, overflow=OVERFLOWS, data=st.data())
def test_fused_ops_between_storages_match_the_model(op, fa, fb, dst, rounding, overflow, data):
    assume(not (overflow == "wrap_sign_magnitude" and not dst.signed))
    n = data.draw(st.integers(1, 9))
    ca, cb = data.draw(codes_in(fa, n)), data.draw(codes_in(fb, n))
    a, b = make(ca, fa), make(cb, fb)
    grown = {"add": ref.add_format, "sub": ref.sub_format, "mul": ref.mul_format}[op](fa, fb)
    if grown.word - grown.signed > 127:           # the documented limit (ufix64 * ufix64): exact values on 128 bits
        with pytest.raises(ValueError, match="127"):
            getattr(fixed, op)(a, b, dst, rounding, overflow)
        return
    want = model([OPS[op](value(x, fa), value(z, fb)) for x, z in zip(ca, cb)], dst, rounding, overflow)
    if want is None:
        with pytest.raises(ValueError, match="overflow"):
            getattr(fixed, op)(a, b, dst, rounding, overflow)
        return
    y = getattr(fixed, op)(a, b, dst, rounding, overflow)
    check_storage(y, dst, want[0])
    assert y.overflows == want[1]
    check_storage(a, fa, ca)
    check_storage(b, fb, cb)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@settings(max_examples=max(300, settings().max_examples))
@given(fa=EDGE_FORMATS, fb=EDGE_FORMATS, dst=EDGE_FORMATS, rounding=ROUNDINGS,
       overflow=st.sampled_from(["saturate", "wrap", "saturate_zero"]), data=st.data())
def test_fused_ops_at_the_dtype_edges_match_the_model(op, fa, fb, dst, rounding, overflow, data):
    """Widths around 8, 16 and 32 bits: where int32 compute, block widening and int64 compute meet."""
    n = data.draw(st.integers(1, 9))
    ca, cb = data.draw(codes_in(fa, n)), data.draw(codes_in(fb, n))
    want = model([OPS[op](value(x, fa), value(z, fb)) for x, z in zip(ca, cb)], dst, rounding, overflow)
    y = getattr(fixed, op)(make(ca, fa), make(cb, fb), dst, rounding, overflow)
    check_storage(y, dst, want[0])
    assert y.overflows == want[1]


@given(fa=SMALL_FORMATS, fb=SMALL_FORMATS, dst=SMALL_FORMATS, data=st.data())
def test_stochastic_rounding_on_narrow_storage_lands_on_a_neighbour(fa, fb, dst, data):
    n = data.draw(st.integers(1, 9))
    ca, cb = data.draw(codes_in(fa, n)), data.draw(codes_in(fb, n))
    y = fixed.mul(make(ca, fa), make(cb, fb), dst, "stochastic", "saturate", seed=data.draw(st.integers(0, 99)))
    floor = model([value(x, fa) * value(z, fb) for x, z in zip(ca, cb)], dst, "floor", "saturate")[0]
    ceil = model([value(x, fa) * value(z, fb) for x, z in zip(ca, cb)], dst, "ceil", "saturate")[0]
    assert y.codes.dtype == dst.storage_dtype
    assert all(f <= int(c) <= g for f, c, g in zip(floor, y.codes.tolist(), ceil))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64"])
def test_integer_ndarray_operands_of_every_dtype_are_exact_and_unchanged(dtype):
    fmt = Format(12, 4, True)
    info = np.iinfo(dtype)
    ints = np.array([max(info.min, -2 ** 40), min(info.max, 2 ** 40), 0, 1, min(info.max, 300)], dtype=dtype)
    before = ints.copy()
    ca = [-2048, 2047, 5, -1, 100]
    a = make(ca, fmt)
    for op in ("add", "sub", "mul"):
        y = OPS[op](a, ints)
        want = [OPS[op](value(x, fmt), Fraction(int(z))) * Fraction(2) ** y.fmt.frac for x, z in zip(ca, ints)]
        check_storage(y, y.fmt, [int(w) for w in want])
    np.testing.assert_array_equal(ints, before)


# --------------------------------------------------------------------------- long arrays (block boundaries)
PATHS = [   # (a, b, dst): int16 in place, int8 in place, int32 blocks, int64 blocks, unsigned, mixed
    ("Q7.8", "Q7.8", "Q7.8"), ("Q0.7", "Q3.4", "Q1.6"), ("Q3.4", "Q7.8", "Q10.12"), ("Q15.16", "Q7.8", "Q7.8"),
    ("UQ8.8", "UQ4.4", "UQ6.2"), ("UQ4.4", "Q7.8", "int8"), ("Q31.0", "Q15.0", "Q15.16"), ("UQ32.0", "Q7.0", "Q15.0"),
]


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("names", PATHS, ids=lambda t: "-".join(t))
@pytest.mark.parametrize("overflow", ["saturate", "wrap", "saturate_zero"])
def test_long_arrays_cross_blocks_exactly(op, names, overflow):
    fa, fb, dst = (Format.parse(s) for s in names)
    rng = np.random.default_rng(len(op) + fa.word * 7 + dst.word)
    n = 2500
    ca = [int(c) for c in rng.integers(fa.min_code, fa.max_code, n, endpoint=True)]
    cb = [int(c) for c in rng.integers(fb.min_code, fb.max_code, n, endpoint=True)]
    ca[:2], cb[:2] = [fa.min_code, fa.max_code], [fb.min_code, fb.max_code]
    a, b = make(ca, fa), make(cb, fb)
    want = model([OPS[op](value(x, fa), value(z, fb)) for x, z in zip(ca, cb)], dst, "half_even", overflow)
    y = getattr(fixed, op)(a, b, dst, "half_even", overflow)
    check_storage(y, dst, want[0])
    assert y.overflows == want[1]
    z = a.cast(dst, "floor", overflow)
    check_storage(z, dst, model([value(x, fa) for x in ca], dst, "floor", overflow)[0])
    check_storage(a, fa, ca)
    assert a.to_float().tolist() == [float(value(x, fa)) for x in ca]


def test_the_kernels_name_a_code_array_of_the_wrong_dtype():
    out = np.empty(2, np.int16)
    with pytest.raises(TypeError, match="integer dtype.*float64"):
        _core.binary(0, np.zeros(2), np.zeros(2, np.int16), out, False, False, 0, 0, 0, 16, True, 0, 0, 0, 0)
    with pytest.raises(TypeError, match="integer dtype.*bool"):
        _core.to_float(np.zeros(2, bool), np.empty(2), False, 0)


def test_raw_is_widened_once_and_wide_storage_is_not_copied():
    q = from_raw(np.array([-32768, 32767, 5]), "Q7.8")
    assert q.codes.dtype == np.int16 and q.raw is q.raw and q.raw.tolist() == [-32768, 32767, 5]
    w = from_raw(np.array([-(2 ** 40), 3]), Format(48, 8))
    assert w.raw is w.codes and w.codes.dtype == np.int64
