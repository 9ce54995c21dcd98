"""fxpsim.core.formats: format notations, str(), for_range, value properties and mode names.

Written against mutation-testing survivors (tools/mutation/).  Expected values are hand tables
or the brute-force models below (exact ``Fraction`` arithmetic), never fxpsim's helpers.
"""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.core import formats
from fxpsim.core.fixed import FixedArray
from fxpsim.core.formats import Format, Overflow, Rounding, check_modes


def _raises(call, exc, pattern):
    with pytest.raises(exc) as info:
        call()
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


# --------------------------------------------------------------------------- notations
@pytest.mark.parametrize("text, word, frac, signed", [
    ("Q7.8", 16, 8, True), ("UQ8.8", 16, 8, False), ("q0.7", 8, 7, True), ("  Q3.4 ", 8, 4, True),
    ("Q15", 16, 15, True), ("q7", 8, 7, True), ("UQ16", 16, 16, False), ("uq8", 8, 8, False),
    ("sfix16_En8", 16, 8, True), ("ufix8", 8, 0, False), ("sfix8", 8, 0, True), ("ufix8_En0", 8, 0, False),
    ("sfix8_E2", 8, -2, True), ("SFIX12_EN3", 12, 3, True), ("ufix10_e4", 10, -4, False),
    ("ap_fixed<16,8>", 16, 8, True), ("ap_ufixed<8,8>", 8, 0, False), ("sc_fixed<16, 4>", 16, 12, True),
    ("sc_ufixed< 12 , 2 >", 12, 10, False), ("ap_fixed<8,-2>", 8, 10, True), ("ap_fixed<8,10>", 8, -2, True),
    ("int8", 8, 0, True), ("uint12", 12, 0, False), ("ap_int<5>", 5, 0, True), ("ap_uint<12>", 12, 0, False),
    ("INT32", 32, 0, True), ("int<7>", 7, 0, True),
])
def test_parse_every_notation(text, word, frac, signed):
    f = Format.parse(text)
    assert (f.word, f.frac, f.signed) == (word, frac, signed)
    assert type(f.signed) is bool and type(f.word) is int and type(f.frac) is int


def test_parse_errors():
    _raises(lambda: Format.parse(8), TypeError, r"Format.parse expects a string, got int")
    _raises(lambda: Format.parse(None), TypeError, r"Format.parse expects a string, got NoneType")
    _raises(lambda: Format.parse("fixed16"), ValueError,
            r"cannot parse format 'fixed16'; accepted forms: 'Q7\.8', 'UQ8\.8', 'Q15' .*'uint12'")
    assert Format.parse(Format(5, 1, False)) == Format(5, 1, False)


def test_format_arguments_accept_strings_or_formats_only():
    a = FixedArray(np.array([3, -4]), "Q3.4")
    assert a.fmt == Format(8, 4, True)
    assert a.cast("sfix6_En2").fmt == Format(6, 2, True)
    _raises(lambda: FixedArray(np.array([3]), 8), TypeError,
            r"expected a Format or a format string such as 'Q7\.8', got int")
    _raises(lambda: a.cast(None), TypeError, r"expected a Format or a format string such as 'Q7\.8', got NoneType")


@pytest.mark.parametrize("fmt, text", [
    (Format(16, 8), "sfix16_En8"), (Format(16, 8, False), "ufix16_En8"), (Format(8, 0), "sfix8"),
    (Format(8, 0, False), "ufix8"), (Format(8, -2), "sfix8_E2"), (Format(8, -1, False), "ufix8_E1"),
    (Format(1, 1), "sfix1_En1"), (Format(64, 70, False), "ufix64_En70"),
])
def test_str_is_matlab_notation(fmt, text):
    assert str(fmt) == text
    assert Format.parse(text) == fmt


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("args, exc, pattern", [
    ((8.0, 0), TypeError, r"Format.word must be an int, got float 8\.0"),
    ((8, True), TypeError, r"Format.frac must be an int, got bool True"),
    ((np.True_, 0), TypeError, r"Format.word must be an int, got bool(_)? (np\.)?True(_)?\)?"),
    ((8, "2"), TypeError, r"Format.frac must be an int, got str '2'"),
    ((0, 0), ValueError, r"Format.word must be in 1\.\.64, got 0"),
    ((65, 0), ValueError, r"Format.word must be in 1\.\.64, got 65"),
    ((8, 100_001), ValueError, r"Format.frac must be within ±100000, got 100001"),
    ((8, -100_001), ValueError, r"Format.frac must be within ±100000, got -100001"),
    ((8, 0, 1), TypeError, r"Format.signed must be a bool, got 1"),
    ((8, 0, "yes"), TypeError, r"Format.signed must be a bool, got 'yes'"),
])
def test_format_validation_messages(args, exc, pattern):
    _raises(lambda: Format(*args), exc, pattern)


def test_format_fields_become_python_types():
    f = Format(np.int16(8), np.int64(-3), np.True_)
    assert (type(f.word), type(f.frac), type(f.signed)) == (int, int, bool)
    assert f == Format(8, -3, True) and hash(f) == hash(Format(8, -3, True))
    assert Format(64, 100_000).frac == 100_000 and Format(1, -100_000, False).frac == -100_000


# --------------------------------------------------------------------------- for_range
def model_for_range(lo: float, hi: float, word: int, signed: bool) -> int:
    """The largest frac whose format holds [lo, hi], by search over exact rationals."""
    lo_c, hi_c = (-(1 << (word - 1)), (1 << (word - 1)) - 1) if signed else (0, (1 << word) - 1)
    lo_q, hi_q = Fraction(lo), Fraction(hi)
    for frac in range(1300, -1300, -1):
        step = Fraction(2) ** -frac
        if lo_c * step <= lo_q and hi_q <= hi_c * step:
            return frac
    raise AssertionError("no frac found")


BOUNDS = [(-1.0, 1.0), (0.0, 1.0), (0.0, 0.99), (-0.5, 0.25), (-0.3, 0.0), (0.0, 127.0), (-128.0, 0.0),
          (-128.0, 127.0), (-128.5, 1.0), (3e-5, 7e-5), (-1e-300, 1e-300), (0.0, 5e-324), (-2.0 ** -1074, 0.0),
          (0.0, 1.7e308), (-1.7e308, 1e-3), (0.0, 0.75), (0.0, 2.0 ** -20), (0.0, 2.0 ** -20 * 1.0000001)]


@pytest.mark.parametrize("word", [1, 2, 8, 16, 53, 64])
@pytest.mark.parametrize("signed", [True, False])
def test_for_range_is_the_largest_frac_that_holds_the_range(word, signed):
    for lo, hi in BOUNDS:
        if not signed and lo < 0:
            continue
        if signed and word == 1 and hi > 0:
            _raises(lambda: Format.for_range(lo, hi, word, signed), ValueError,
                    rf"no 1-bit signed format holds \[{re.escape(str(float(lo)))}, {re.escape(str(float(hi)))}\]")
            continue
        f = Format.for_range(lo, hi, word, signed)
        assert (f.word, f.signed) == (word, signed)
        assert f.frac == model_for_range(lo, hi, word, signed), (lo, hi)


def test_for_range_of_zeros_and_errors():
    # a range of zeros: frac = word + 1000 (one less when signed)
    assert Format.for_range(0.0, 0.0, 8) == Format(8, 1007, True)
    assert Format.for_range(0.0, 0.0, 8, signed=False) == Format(8, 1008, False)
    assert Format.for_range(-0.0, 0.0, 1) == Format(1, 1000, True)
    _raises(lambda: Format.for_range(1.0, 0.0, 8), ValueError, r"for_range needs finite lo <= hi, got \[1\.0, 0\.0\]")
    _raises(lambda: Format.for_range(0.0, float("inf"), 8), ValueError, r"for_range needs finite lo <= hi, got \[0\.0, inf\]")
    _raises(lambda: Format.for_range(float("nan"), 1.0, 8), ValueError, r"for_range needs finite lo <= hi, got \[nan, 1\.0\]")
    _raises(lambda: Format.for_range(-1.0, 1.0, 8, signed=False), ValueError,
            r"an unsigned format cannot hold lo = -1\.0 < 0")
    _raises(lambda: Format.for_range(0.0, 1.0, 0), ValueError, r"Format.word must be in 1\.\.64, got 0")
    # the most negative bound a signed 1-bit format holds alone (its only nonzero code is -1)
    assert Format.for_range(-0.5, 0.0, 1) == Format(1, 1, True)


def test_floor_log2_matches_a_search():
    qs = [Fraction(1), Fraction(2), Fraction(3), Fraction(1, 2), Fraction(3, 4), Fraction(1, 3), Fraction(5, 8),
          Fraction(1, 1 << 70), Fraction((1 << 70) + 1, 1 << 140), Fraction(7, 1), Fraction(1 << 100, 3),
          Fraction(1023, 1024), Fraction(1025, 1024), Fraction(2 ** 64 - 1, 2 ** 64), Fraction(1, 2 ** 64 - 1)]
    for q in qs:
        k = 0
        while Fraction(2) ** k > q:
            k -= 1
        while Fraction(2) ** (k + 1) <= q:
            k += 1
        assert formats._floor_log2(q) == k, q


# --------------------------------------------------------------------------- values
def test_values_at_the_float64_edges():
    assert Format(8, 3).lsb == 0.125 and Format(8, -3).lsb == 8.0
    assert Format(8, 0).min_value == -128.0 and Format(8, 0, False).min_value == 0.0
    # codes above 2^53 round to the nearest float64 in the normal range
    assert Format(64, 0).max_value == 2.0 ** 63 and isinstance(Format(64, 0).max_value, float)
    # (2^60 - 1) 2^-1082 rounds to exactly the smallest normal float64, 2^-1022: a float
    v = Format(61, 1082).max_value
    assert isinstance(v, float) and v == 2.0 ** -1022
    # below the normal range: the float64 when it is exact (a subnormal), else the exact Fraction
    assert Format(8, 1074).lsb == 5e-324 and isinstance(Format(8, 1074).lsb, float)
    assert Format(8, 1100).max_value == Fraction(127, 1 << 1100)
    v = Format(8, 1070).max_value                                       # 127 * 2^-1070: an exact subnormal
    assert isinstance(v, float) and Fraction(v) == Fraction(127, 1 << 1070)
    v = Format(64, 1100).max_value                    # (2^63 - 1) 2^-1100: 63 bits below 2^-1037, not a float64
    assert isinstance(v, Fraction) and v == Fraction((1 << 63) - 1, 1 << 1100)
    # beyond float64: exact ints
    assert Format(8, -1018).max_value == 127 << 1018 and isinstance(Format(8, -1018).max_value, int)
    assert Format(8, -1018).min_value == -(128 << 1018)
    assert Format(8, -900).max_value == float(127 * 2.0 ** 900)


# --------------------------------------------------------------------------- modes
def test_mode_names_and_aliases(monkeypatch):
    # rebuild the alias tables (they are cached on first use) and check them from scratch
    monkeypatch.setattr(formats, "_LOOKUP", {})
    monkeypatch.setattr(formats, "_CODES", {})
    table = {
        "half_up": Rounding.HALF_UP, "HALF_UP": Rounding.HALF_UP, "half-up": Rounding.HALF_UP,
        "half up": Rounding.HALF_UP, " SC_RND ": Rounding.HALF_UP, "ap_rnd": Rounding.HALF_UP,
        "nearest": Rounding.HALF_UP, "sc_rnd_zero": Rounding.HALF_TOWARD_ZERO, "SC_RND_MIN_INF": Rounding.HALF_DOWN,
        "round": Rounding.HALF_AWAY, "convergent": Rounding.HALF_EVEN, "banker": Rounding.HALF_EVEN,
        "SC_TRN": Rounding.FLOOR, "trunc": Rounding.FLOOR, "fix": Rounding.TOWARD_ZERO, "TRN_INF": Rounding.CEIL,
        "ceiling": Rounding.CEIL, "stoch_weighted": Rounding.STOCHASTIC, "toward-zero": Rounding.TOWARD_ZERO,
    }
    for text, member in table.items():
        assert Rounding.parse(text) is member, text
    otable = {"SC_SAT": Overflow.SATURATE, "clip": Overflow.SATURATE, "sat_zero": Overflow.SATURATE_ZERO,
              "SAT_SYM": Overflow.SATURATE_SYMMETRIC, "modular": Overflow.WRAP, "sc_wrap_sm": Overflow.WRAP_SIGN_MAGNITUDE,
              "raise": Overflow.ERROR, "wrap sign magnitude": Overflow.WRAP_SIGN_MAGNITUDE, "ERROR": Overflow.ERROR}
    for text, member in otable.items():
        assert Overflow.parse(text) is member, text
    assert set(formats._LOOKUP) == {"Rounding", "Overflow"}
    assert formats._LOOKUP["Rounding"]["sc_rnd"] is Rounding.HALF_UP
    assert "SC_RND" not in formats._LOOKUP["Rounding"]                    # keys are lower case
    # every member, by value and by name, and its kernel code (its position)
    for cls in (Rounding, Overflow):
        for i, member in enumerate(cls):
            assert cls.parse(member) is member and cls.parse(member.value) is member
            assert cls.parse(member.name) is member
            assert member.code == i and member.code == i            # the second read comes from the cache
    assert Rounding.STOCHASTIC.code == 8 and Overflow.ERROR.code == 5


def test_mode_parse_errors():
    _raises(lambda: Rounding.parse("sideways"), ValueError,
            r"unknown rounding mode 'sideways'; use one of: half_up, half_toward_zero, half_down, half_away, "
            r"half_even, floor, toward_zero, ceil, stochastic \(SystemC, MATLAB, HLS and APyTypes names are "
            r"accepted too, see the README\)")
    _raises(lambda: Overflow.parse(3), ValueError,
            r"unknown overflow mode 3; use one of: saturate, saturate_zero, saturate_symmetric, wrap, "
            r"wrap_sign_magnitude, error \(.*\)")
    _raises(lambda: Rounding.parse(Overflow.WRAP), ValueError, r"unknown rounding mode .*")


def test_check_modes_messages():
    assert check_modes("SC_RND", "SC_WRAP", Format(8, 0), 2) == (Rounding.HALF_UP, Overflow.WRAP)
    assert check_modes("floor", "wrap_sign_magnitude", Format(8, 0), 8) == (Rounding.FLOOR,
                                                                              Overflow.WRAP_SIGN_MAGNITUDE)
    _raises(lambda: check_modes("floor", "wrap_sign_magnitude", Format(8, 0, False), 0), ValueError,
            r"overflow='wrap_sign_magnitude' is defined for signed formats only \(as SystemC's SC_WRAP_SM\), "
            r"got unsigned ufix8")
    _raises(lambda: check_modes("floor", "wrap", Format(8, 0), 9), ValueError, r"n_bits must be an int in 0\.\.8, got 9")
    _raises(lambda: check_modes("floor", "wrap", Format(8, 0), -1), ValueError, r"n_bits must be an int in 0\.\.8, got -1")
    _raises(lambda: check_modes("floor", "wrap", Format(8, 0), 1.0), ValueError, r"n_bits must be an int in 0\.\.8, got 1\.0")
    _raises(lambda: check_modes("floor", "saturate", Format(8, 0), 1), ValueError,
            r"n_bits \(saturated MSBs\) applies to 'wrap' and 'wrap_sign_magnitude' only")
