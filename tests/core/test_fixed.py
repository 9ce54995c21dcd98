"""Hand tables for fxpsim.core.fixed: formats, modes, FixedArray behaviour and bad input.

Expected numbers are worked out by hand (comments show the arithmetic); the random
and exhaustive comparisons with the reference model live in test_fixed_properties.py.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import fxpsim.core.fixed as fixed
import reference as ref
from fxpsim.core.fixed import FixedArray, Format, Overflow, Rounding, from_float, from_raw, overflow_log


def codes(result) -> list:
    return np.asarray(result.raw).tolist()


# --------------------------------------------------------------------------- Format
@pytest.mark.parametrize("fmt, int_bits, min_code, max_code, min_value, max_value, lsb", [
    (Format(16, 8), 8, -32768, 32767, -128.0, 127.99609375, 2 ** -8),
    (Format(16, 8, False), 8, 0, 65535, 0.0, 255.99609375, 2 ** -8),
    (Format(8, 8, False), 0, 0, 255, 0.0, 255 / 256, 2 ** -8),
    (Format(4, -2), 6, -8, 7, -32.0, 28.0, 4.0),
    (Format(3, 10), -7, -4, 3, -4 / 1024, 3 / 1024, 2 ** -10),
    (Format(1, 0), 1, -1, 0, -1.0, 0.0, 1.0),
    (Format(1, 0, False), 1, 0, 1, 0.0, 1.0, 1.0),
    (Format(64, 0), 64, -2 ** 63, 2 ** 63 - 1, -2.0 ** 63, 2.0 ** 63, 1.0),
    (Format(64, 0, False), 64, 0, 2 ** 64 - 1, 0.0, 2.0 ** 64, 1.0),
])
def test_format_properties(fmt, int_bits, min_code, max_code, min_value, max_value, lsb):
    assert fmt.int_bits == int_bits
    assert (fmt.min_code, fmt.max_code) == (min_code, max_code)
    assert type(fmt.min_code) is int and type(fmt.max_code) is int
    assert (fmt.min_value, fmt.max_value, fmt.lsb) == (min_value, max_value, lsb)


def test_format_is_a_frozen_value():
    fmt = Format(16, 8)
    assert fmt == Format(16, 8, True) and hash(fmt) == hash(Format(16, 8, True))
    assert fmt != Format(16, 8, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.word = 8
    assert Format.integer(32) == Format(32, 0, True)
    assert Format.integer(12, signed=False) == Format(12, 0, False)


@pytest.mark.parametrize("word", [0, -1, 65, 128])
def test_format_rejects_word_out_of_range(word):
    with pytest.raises(ValueError, match="1..64"):
        Format(word, 0)


@pytest.mark.parametrize("args", [(8.0, 2), (8, 2.5), ("8", 2), (8, 2, "yes")])
def test_format_rejects_non_integer_fields(args):
    with pytest.raises(TypeError):
        Format(*args)


@pytest.mark.parametrize("text, expected", [
    ("Q7.8", Format(16, 8, True)),
    ("q7.8", Format(16, 8, True)),
    ("UQ8.8", Format(16, 8, False)),
    ("Q0.15", Format(16, 15, True)),
    ("Q15.0", Format(16, 0, True)),
    ("sfix16_En8", Format(16, 8, True)),
    ("ufix8_En0", Format(8, 0, False)),
    ("sfix32_En31", Format(32, 31, True)),
    ("ap_fixed<16,8>", Format(16, 8, True)),
    ("ap_fixed<16, 8>", Format(16, 8, True)),
    ("ap_ufixed<8,8>", Format(8, 0, False)),
    ("ap_fixed<8,-2>", Format(8, 10, True)),      # I < 0: every bit below the binary point
    ("ap_fixed<8,12>", Format(8, -4, True)),      # I > W: LSB = 2^4
    (" Q7.8 ", Format(16, 8, True)),
])
def test_format_parse_notations(text, expected):
    assert Format.parse(text) == expected


@pytest.mark.parametrize("text", ["Q7.8.1", "fixed16", "", "ap_fixed<16>", "sfix16_En", "Q-1.8", "ap_fixd<16,8>",
                                  "16,8", "sfix_En8", "QQ7.8"])
def test_format_parse_rejects_with_the_accepted_forms(text):
    with pytest.raises(ValueError) as info:
        Format.parse(text)
    message = str(info.value)
    assert repr(text) in message
    for form in ("Q7.8", "UQ8.8", "sfix16_En8", "ufix8_En0", "ap_fixed<16,8>", "ap_ufixed<8,8>"):
        assert form in message


@pytest.mark.parametrize("text", ["ap_fixed<0,0>", "ap_fixed<65,1>", "Q63.1", "sfix0_En0"])
def test_format_parse_rejects_impossible_widths(text):
    with pytest.raises(ValueError, match="1..64"):
        Format.parse(text)


def test_format_parse_rejects_non_strings():
    with pytest.raises(TypeError):
        Format.parse(16)
    assert Format.parse(Format(4, 1)) == Format(4, 1)


@pytest.mark.parametrize("lo, hi, word, signed, expected_frac", [
    (-1.0, 1.0, 8, True, 6),        # 127/64 >= 1 > 127/128
    (-0.5, 0.5, 8, True, 7),        # 127/128 >= 0.5 > 127/256
    (-128.0, 127.0, 8, True, 0),
    (-128.0, 127.5, 8, True, -1),   # 127 is the largest code at frac 0; frac -1 holds 254
    (0.0, 1.0, 8, False, 7),        # 255/128 >= 1 > 255/256
    (0.0, 1000.0, 16, False, 6),    # 65535/64 = 1023.98
    (-3e-4, 3e-4, 4, True, 14),     # 7 * 2^-14 = 4.27e-4 >= 3e-4 > 7 * 2^-15
    (5.0, 5.0, 4, True, 0),         # 7 >= 5 > 3.5
])
def test_for_range(lo, hi, word, signed, expected_frac):
    fmt = Format.for_range(lo, hi, word, signed)
    assert fmt == Format(word, expected_frac, signed)
    assert fmt.min_value <= lo and hi <= fmt.max_value
    finer = Format(word, expected_frac + 1, signed)
    assert not (finer.min_value <= lo and hi <= finer.max_value)


@pytest.mark.parametrize("lo, hi, signed", [(1.0, -1.0, True), (math.nan, 1.0, True), (0.0, math.inf, True),
                                            (-1.0, 1.0, False)])
def test_for_range_rejects_bad_ranges(lo, hi, signed):
    with pytest.raises(ValueError):
        Format.for_range(lo, hi, 8, signed)


# --------------------------------------------------------------------------- modes
def test_mode_codes_match_the_kernel_header():
    assert [m.code for m in Rounding] == list(range(9))
    assert [m.value for m in Rounding] == ["half_up", "half_toward_zero", "half_down", "half_away", "half_even",
                                          "floor", "toward_zero", "ceil", "stochastic"]
    assert [m.value for m in Overflow] == ["saturate", "saturate_zero", "saturate_symmetric", "wrap",
                                          "wrap_sign_magnitude", "error"]
    assert [m.code for m in Overflow] == list(range(6))


@pytest.mark.parametrize("alias, mode", [
    ("SC_RND", Rounding.HALF_UP), ("SC_RND_ZERO", Rounding.HALF_TOWARD_ZERO), ("SC_RND_MIN_INF", Rounding.HALF_DOWN),
    ("SC_RND_INF", Rounding.HALF_AWAY), ("SC_RND_CONV", Rounding.HALF_EVEN), ("SC_TRN", Rounding.FLOOR),
    ("SC_TRN_ZERO", Rounding.TOWARD_ZERO), ("half_even", Rounding.HALF_EVEN), ("CEIL", Rounding.CEIL),
    (Rounding.STOCHASTIC, Rounding.STOCHASTIC), ("convergent", Rounding.HALF_EVEN),
])
def test_rounding_aliases(alias, mode):
    assert Rounding.parse(alias) is mode


@pytest.mark.parametrize("alias, mode", [
    ("SC_SAT", Overflow.SATURATE), ("SC_SAT_ZERO", Overflow.SATURATE_ZERO),
    ("SC_SAT_SYM", Overflow.SATURATE_SYMMETRIC), ("SC_WRAP", Overflow.WRAP),
    ("SC_WRAP_SM", Overflow.WRAP_SIGN_MAGNITUDE), ("wrap", Overflow.WRAP), (Overflow.ERROR, Overflow.ERROR),
])
def test_overflow_aliases(alias, mode):
    assert Overflow.parse(alias) is mode


@pytest.mark.parametrize("kwargs, names", [({"rounding": "bankers_round"}, "half_up"),
                                           ({"overflow": "clip_it"}, "saturate"),
                                           ({"rounding": 3}, "half_even"), ({"overflow": None}, "wrap")])
def test_unknown_mode_names_are_rejected_with_the_valid_ones(kwargs, names):
    with pytest.raises(ValueError) as info:
        from_float([1.0], Format(8, 0), **kwargs)
    assert names in str(info.value)
    with pytest.raises(ValueError):
        from_raw([1], Format(8, 0)).cast(Format(4, 0), **kwargs)


# --------------------------------------------------------------------------- rounding hand table
TIES = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.75, 0.25, 0.49999999999999994, -0.49999999999999994]
ROUNDING_TABLE = {
    "half_up":          [-2, -1, 0, 1, 2, 3, -1, 0, 0, 0],
    "half_toward_zero": [-2, -1, 0, 0, 1, 2, -1, 0, 0, 0],
    "half_down":        [-3, -2, -1, 0, 1, 2, -1, 0, 0, 0],
    "half_away":        [-3, -2, -1, 1, 2, 3, -1, 0, 0, 0],
    "half_even":        [-2, -2, 0, 0, 2, 2, -1, 0, 0, 0],
    "floor":            [-3, -2, -1, 0, 1, 2, -1, 0, 0, -1],
    "toward_zero":      [-2, -1, 0, 0, 1, 2, 0, 0, 0, 0],
    "ceil":             [-2, -1, 0, 1, 2, 3, 0, 1, 1, 0],
}


@pytest.mark.parametrize("mode", sorted(ROUNDING_TABLE))
@pytest.mark.parametrize("frac", [0, 3, -2, 60])
def test_rounding_modes_on_ties(mode, frac):
    x = np.ldexp(np.array(TIES), -frac)             # the same ties, one LSB = 2^-frac
    result = from_float(x, Format(16, frac), mode)
    assert codes(result) == ROUNDING_TABLE[mode]
    assert result.overflows == 0


def test_signed_zeros_and_subnormals():
    result = from_float([0.0, -0.0, 5e-324, -5e-324], Format(8, 4), "half_up")
    assert codes(result) == [0, 0, 0, 0]
    assert codes(from_float([5e-324, -5e-324], Format(8, 4), "ceil")) == [1, 0]
    assert codes(from_float([5e-324, -5e-324], Format(8, 4), "floor")) == [0, -1]
    assert codes(from_float([5e-324, -5e-324], Format(8, 1074), "floor")) == [1, -1]   # exactly one LSB
    assert from_float([-0.0], Format(8, 4)).to_float()[0] == 0.0


def test_rounding_at_the_range_edges():
    fmt = Format(8, 0)
    assert codes(from_float([127.4, 127.5, -128.5, -128.6], fmt, "half_up", mask=True)) == [127, 127, -128, -128]
    flags = from_float([127.4, 127.5, -128.5, -128.6], fmt, "half_up", mask=True).overflow_mask.tolist()
    assert flags == [False, True, False, True]      # 127.5 -> 128 overflows; -128.5 -> -128 (ties up) fits
    flags = from_float([-128.5], fmt, "half_down", mask=True).overflow_mask.tolist()
    assert flags == [True]                          # ties down: -129 overflows
    assert codes(from_float([2.0 ** 63, -2.0 ** 63], Format(64, 0))) == [2 ** 63 - 1, -2 ** 63]
    assert codes(from_float([2.0 ** 64, 2.0 ** 64 - 2048, -1.0], Format(64, 0, False))) == [
        2 ** 64 - 1, 2 ** 64 - 2048, 0]


# --------------------------------------------------------------------------- overflow hand table
OVERFLOW_INPUTS = [7, 8, 9, -8, -9, 100, -100]
OVERFLOW_TABLE = {                                       # Format(4, 0): codes -8..7
    "saturate":            ([7, 7, 7, -8, -8, 7, -8], [0, 1, 1, 0, 1, 1, 1]),
    "saturate_zero":       ([7, 0, 0, -8, 0, 0, 0], [0, 1, 1, 0, 1, 1, 1]),
    "saturate_symmetric":  ([7, 7, 7, -7, -7, 7, -7], [0, 1, 1, 1, 1, 1, 1]),
    # 100 = 0b110_0100 -> 0b0100 = 4;  -100 = ...1001_1100 -> 0b1100 = -4
    "wrap":                ([7, -8, -7, -8, 7, 4, -4], [0, 1, 1, 0, 1, 1, 1]),
    # SC_WRAP_SM: invert (v -> -v-1) when bit 4 != bit 3, then wrap: 8 -> ~8 = -9 -> 7, 9 -> -10 -> 6,
    # -9 = ...10111 -> ~ = 8 -> -8; 100 and -100 have bit 4 == bit 3 -> plain wrap
    "wrap_sign_magnitude": ([7, 7, 6, -8, -8, 4, -4], [0, 1, 1, 0, 1, 1, 1]),
}


@pytest.mark.parametrize("mode", sorted(OVERFLOW_TABLE))
def test_overflow_modes_at_and_beyond_the_edges(mode):
    expected_codes, expected_flags = OVERFLOW_TABLE[mode]
    result = from_float(np.array(OVERFLOW_INPUTS, dtype=float), Format(4, 0), "floor", mode, mask=True)
    assert codes(result) == expected_codes
    assert result.overflow_mask.astype(int).tolist() == expected_flags
    assert result.overflows == sum(expected_flags)
    cast = from_raw(np.array(OVERFLOW_INPUTS), Format(8, 0)).cast(Format(4, 0), "floor", mode, mask=True)
    assert codes(cast) == expected_codes and cast.overflows == sum(expected_flags)


def test_overflow_error_mode_raises_only_on_overflow():
    assert codes(from_float([7.0, -8.0], Format(4, 0), overflow="error")) == [7, -8]
    with pytest.raises(ValueError, match="overflow"):
        from_float([7.0, 8.0], Format(4, 0), overflow="error")
    with pytest.raises(ValueError, match="overflow"):
        from_raw([100], Format(8, 0)).cast(Format(4, 0), overflow="error")


def test_unsigned_overflow():
    x = np.array([15.0, 16.0, -1.0, -0.4, -0.6, 300.0])
    fmt = Format(4, 0, False)
    assert codes(from_float(x, fmt, "half_up", "saturate")) == [15, 15, 0, 0, 0, 15]
    assert codes(from_float(x, fmt, "half_up", "wrap")) == [15, 0, 15, 0, 15, 300 % 16]
    assert codes(from_float(x, fmt, "half_up", "saturate_symmetric")) == [15, 15, 0, 0, 0, 15]
    assert from_float(x, fmt, "half_up", "wrap").overflows == 4
    with pytest.raises(ValueError, match="signed"):
        from_float(x, fmt, overflow="wrap_sign_magnitude")
    with pytest.raises(ValueError, match="signed"):
        from_raw([1], Format(8, 0)).cast(fmt, overflow="wrap_sign_magnitude")


def test_wrap_with_saturated_msbs():
    # n_bits = 2 on 8 bits: the 2 MSBs saturate (01 / 10), the 6 LSBs wrap:
    # 200 -> 200 mod 64 = 8, + 0b0100_0000 = 72;  -200 -> (-200 mod 64) = 56, - 128 = -72
    assert codes(from_float([200.0, -200.0, 100.0], Format(8, 0), overflow="wrap", n_bits=2)) == [72, -72, 100]
    # unsigned: 2 MSBs saturate to 11 / 00
    assert codes(from_float([300.0, -1.0], Format(8, 0, False), overflow="wrap", n_bits=2)) == [300 % 64 + 192, 63]
    # sign-magnitude with n_bits = 1 keeps the sign: 128 + k -> 127 - k
    assert codes(from_float([128.0, 130.0, -130.0], Format(8, 0), overflow="wrap_sign_magnitude", n_bits=1)) == [
        127, 125, -127]
    assert codes(from_float([500.0], Format(8, 0), overflow="wrap", n_bits=8)) == [127]   # all bits saturate


@pytest.mark.parametrize("kwargs", [{"n_bits": -1}, {"n_bits": 9}, {"n_bits": 2, "overflow": "saturate"},
                                    {"n_bits": 1.5, "overflow": "wrap"}])
def test_bad_n_bits(kwargs):
    kwargs.setdefault("overflow", "wrap")
    with pytest.raises(ValueError, match="n_bits"):
        from_float([1.0], Format(8, 0), **kwargs)


def test_infinities_overflow_like_large_values():
    x = [math.inf, -math.inf]
    assert codes(from_float(x, Format(8, 4))) == [127, -128]
    assert codes(from_float(x, Format(8, 4), overflow="saturate_symmetric")) == [127, -127]
    assert codes(from_float(x, Format(8, 4), overflow="saturate_zero")) == [0, 0]
    assert codes(from_float(x, Format(8, 4), overflow="wrap")) == [0, 0]
    assert codes(from_float(x, Format(8, 4, False))) == [255, 0]
    assert from_float(x, Format(8, 4)).overflows == 2
    with pytest.raises(ValueError):
        from_float(x, Format(8, 4), overflow="error")


# --------------------------------------------------------------------------- FixedArray behaviour
@pytest.fixture
def grid():
    return from_raw(np.arange(-6, 6).reshape(3, 4), Format(8, 2))


def test_fixed_array_basics(grid):
    assert isinstance(grid, FixedArray)
    assert (grid.shape, grid.ndim, grid.size, len(grid)) == ((3, 4), 2, 12, 3)
    assert grid.raw.dtype == np.int64 and grid.fmt == Format(8, 2)
    np.testing.assert_array_equal(grid.to_float(), np.arange(-6, 6).reshape(3, 4) / 4)
    np.testing.assert_array_equal(np.asarray(grid), np.arange(-6, 6).reshape(3, 4) / 4)
    assert np.asarray(grid).dtype == np.float64
    assert grid.overflows == 0
    with pytest.raises(ValueError):
        grid.raw[0, 0] = 5                                   # codes are read-only


def test_indexing_slicing_reshape_transpose(grid):
    assert codes(grid[1]) == [-2, -1, 0, 1]
    assert codes(grid[1, 2]) == 0 and grid[1, 2].shape == ()
    assert codes(grid[:, 1:3]) == [[-5, -4], [-1, 0], [3, 4]]
    assert codes(grid[::2, ::-1]) == [[-3, -4, -5, -6], [5, 4, 3, 2]]
    assert codes(grid[grid.raw > 3]) == [4, 5]
    assert codes(grid[[0, 2], 0]) == [-6, 2]
    assert codes(grid.reshape(4, 3)[3]) == [3, 4, 5]
    assert codes(grid.reshape(-1)) == list(range(-6, 6))
    assert codes(grid.T) == np.arange(-6, 6).reshape(3, 4).T.tolist()
    assert codes(grid.transpose(1, 0)) == codes(grid.T)
    for view in (grid[1], grid[:, 1:3], grid.T, grid.reshape(12)):
        assert view.fmt == grid.fmt


def test_concatenate_finds_a_common_format():
    a = from_raw([1, -2], Format(8, 2))
    b = from_raw([3], Format(4, 0, False))
    c = fixed.concatenate([a, b])
    # common: frac 2, signed, int bits max(6, 4 + 1) -> Format(8, 2)
    assert c.fmt == Format(8, 2)
    np.testing.assert_array_equal(c.to_float(), [0.25, -0.5, 3.0])
    assert codes(fixed.concatenate([a.reshape(1, 2), a.reshape(1, 2)], axis=0)) == [[1, -2], [1, -2]]


def test_broadcasting_add_sub_mul():
    col = from_raw(np.array([[1], [2], [3]]), Format(8, 0))
    row = from_raw(np.array([10, -20, 30, -40]), Format(8, 1))
    total = col + row
    assert total.shape == (3, 4) and total.fmt == Format(10, 1)   # int bits max(8, 7) + 1 = 9, frac 1
    np.testing.assert_array_equal(total.to_float(), np.array([[1], [2], [3]]) + np.array([5, -10, 15, -20]))
    diff = row - col
    np.testing.assert_array_equal(diff.to_float(), np.array([5, -10, 15, -20]) - np.array([[1], [2], [3]]))
    prod = col * row
    assert prod.fmt == Format(16, 1)
    np.testing.assert_array_equal(prod.to_float(), np.array([[1], [2], [3]]) * np.array([5, -10, 15, -20]))
    scaled = col * 3                                               # Python ints are exact constants
    np.testing.assert_array_equal(scaled.to_float(), [[3], [6], [9]])
    assert codes(col + 0.5) == [[3], [5], [7]] and (col + 0.5).fmt.frac == 1


def test_comparisons(grid):
    other = from_raw(np.array([0, 1, 2, 3]), Format(4, 0))
    np.testing.assert_array_equal(grid < other, grid.to_float() < np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(grid >= other, grid.to_float() >= np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(grid == 0.25, grid.to_float() == 0.25)
    np.testing.assert_array_equal(grid != 1, grid.to_float() != 1)
    np.testing.assert_array_equal(grid > -1.25, grid.to_float() > -1.25)
    # formats far apart: 1 * 2^70 vs 1 * 2^-90
    big, tiny = from_raw([1], Format(4, -70)), from_raw([1], Format(4, 90))
    assert (big > tiny).tolist() == [True] and (tiny < big).tolist() == [True] and (big == tiny).tolist() == [False]
    wide_hi, wide_lo = from_raw([2 ** 62], Format(64, -60)), from_raw([-2 ** 62], Format(64, 60))
    assert (wide_hi > wide_lo).tolist() == [True] and (wide_lo < wide_hi).tolist() == [True]


def test_sum_growth(grid):
    assert grid.sum().fmt == Format(8 + 4, 2) and codes(grid.sum()) == -6      # 12 elements: +4 bits
    assert grid.sum(axis=0).fmt == Format(8 + 2, 2) and codes(grid.sum(axis=0)) == [-6, -3, 0, 3]   # 3: +2
    assert grid.sum(axis=1).fmt == Format(8 + 2, 2) and codes(grid.sum(axis=1)) == [-18, -2, 14]    # 4: +2
    ones = from_raw(np.full(8, 255), Format(8, 0, False))
    assert ones.sum().fmt == Format(11, 0, False) and codes(ones.sum()) == 8 * 255
    single = from_raw([5], Format(8, 0))
    assert single.sum().fmt == Format(8, 0) and codes(single.sum()) == 5
    with pytest.raises(ValueError, match="cast"):
        from_raw([1, 2], Format(64, 0)).sum()


def test_overflow_counts_per_operation():
    result = from_float([1.0, 300.0, -300.0, 2.0], Format(8, 0))
    assert result.overflows == 2
    assert result.cast(Format(4, 0)).overflows == 2            # 127, -128 do not fit 4 bits; 1, 2 do
    assert result.cast(Format(16, 0)).overflows == 0
    assert (result + result).overflows == 0


def test_overflow_log_collects_by_operation():
    with overflow_log() as log:
        a = from_float([1.0, 300.0, -300.0], Format(8, 0))
        from_float([1000.0], Format(8, 0))
        a.cast(Format(4, 0))
        fixed.record_overflow("datapath.matmul", 3, -5.0, 9.0)
    assert log["from_float"].count == 3
    assert log["from_float"].min == -300.0 and log["from_float"].max == 1000.0
    assert log["cast"].count == 2
    assert log["datapath.matmul"].count == 3 and log["datapath.matmul"].max == 9.0
    assert log.total == 8
    with overflow_log() as fresh:
        pass
    assert fresh.total == 0 and "from_float" not in fresh
    fixed.record_overflow("outside", 1, 0.0, 0.0)               # no active log: nothing to record, no error


def test_nested_overflow_logs_both_collect():
    with overflow_log() as outer:
        with overflow_log() as inner:
            from_float([300.0], Format(8, 0))
        from_float([300.0], Format(8, 0))
    assert inner["from_float"].count == 1 and outer["from_float"].count == 2


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("x", [np.array([1, "a"], dtype=object), np.array([1 + 2j]), np.array(["1.5"]),
                               ["a", "b"], np.array([1.0], dtype=object)])
def test_non_real_inputs_raise_type_error(x):
    with pytest.raises(TypeError, match="dtype"):
        from_float(x, Format(8, 0))


def test_from_raw_validates_codes():
    with pytest.raises(ValueError, match=r"128.*\(1,\)"):
        from_raw([0, 128], Format(8, 0))
    with pytest.raises(ValueError):
        from_raw([-1], Format(8, 0, False))
    with pytest.raises(TypeError):
        from_raw([1.5], Format(8, 0))
    with pytest.raises(TypeError):
        from_raw(np.array([1], dtype=object), Format(8, 0))
    assert codes(from_raw(np.array([2 ** 64 - 1], dtype=np.uint64), Format(64, 0, False))) == [2 ** 64 - 1]


def test_mismatched_shapes():
    a, b = from_raw([1, 2, 3], Format(8, 0)), from_raw([1, 2, 3, 4], Format(8, 0))
    for op in (lambda: a + b, lambda: a - b, lambda: a * b, lambda: a < b):
        with pytest.raises(ValueError, match="shape"):
            op()


def test_nan_names_count_and_first_index():
    with pytest.raises(ValueError, match=r"2 NaN.*\(1,\)"):
        from_float([1.0, math.nan, 2.0, math.nan], Format(8, 0))
    with pytest.raises(ValueError, match=r"1 NaN.*\(1, 0\)"):
        from_float([[1.0, 2.0], [math.nan, 3.0]], Format(8, 0))
    result = from_float([1.0, math.nan, -math.nan], Format(8, 0), nan="zero")
    assert codes(result) == [1, 0, 0] and result.overflows == 0
    with pytest.raises(ValueError, match="nan"):
        from_float([1.0], Format(8, 0), nan="ignore")


def test_empty_arrays():
    empty = from_float(np.empty((0, 3)), Format(8, 2))
    assert empty.shape == (0, 3) and empty.overflows == 0 and empty.to_float().shape == (0, 3)
    assert from_float([], Format(8, 2)).shape == (0,)
    assert empty.cast(Format(4, 0)).shape == (0, 3)
    assert (empty + empty).shape == (0, 3) and (empty * empty).shape == (0, 3)
    assert empty.sum(axis=0).shape == (3,) and codes(empty.sum(axis=0)) == [0, 0, 0]
    assert codes(empty.sum()) == 0
    assert from_raw(np.empty(0, dtype=np.int64), Format(8, 0)).size == 0


def test_non_contiguous_and_read_only_inputs_are_not_mutated():
    base = np.arange(24, dtype=np.float64).reshape(4, 6) / 3.0 - 4.0
    keep = base.copy()
    strided, transposed = base[::2, 1::2], base.T
    for view in (strided, transposed):
        result = from_float(view, Format(12, 4), "half_even")
        expected = [[ref.from_float(v, 12, 4, True, "half_even", "saturate")[0] for v in row] for row in view.tolist()]
        assert codes(result) == expected and result.shape == view.shape
    locked = base.copy()
    locked.flags.writeable = False
    assert codes(from_float(locked, Format(12, 4))) == codes(from_float(base, Format(12, 4)))
    np.testing.assert_array_equal(base, keep)

    raw = np.arange(12, dtype=np.int64).reshape(3, 4)
    raw_keep = raw.copy()
    a = from_raw(raw[:, ::2], Format(8, 0))
    raw.flags.writeable = False
    b = from_raw(raw.T, Format(8, 0))
    assert codes(a) == raw_keep[:, ::2].tolist() and codes(b) == raw_keep.T.tolist()
    assert codes(a.cast(Format(6, -1), "floor")) == (raw_keep[:, ::2] // 2).tolist()
    assert codes(b + b) == (2 * raw_keep.T).tolist()
    np.testing.assert_array_equal(raw, raw_keep)


def test_from_raw_copies_its_input():
    raw = np.array([1, 2, 3])
    a = from_raw(raw, Format(8, 0))
    raw[0] = 99
    assert codes(a) == [1, 2, 3]


def test_integer_and_float32_inputs():
    assert codes(from_float(np.array([1, -2, 3], dtype=np.int16), Format(8, 1))) == [2, -4, 6]
    assert codes(from_float(np.array([0.1], dtype=np.float32), Format(16, 10))) == [
        round(float(np.float32(0.1)) * 1024)]


def test_scalar_input_gives_a_zero_dimensional_array():
    result = from_float(0.75, Format(8, 2))
    assert result.shape == () and codes(result) == 3
    assert from_float(np.float32(-0.5), Format(8, 2)).shape == ()
    assert from_raw(3, Format(8, 2)).shape == ()
    assert codes(from_float(np.array([True, False]), Format(4, 0))) == [1, 0]


@pytest.mark.parametrize("make", [
    lambda: from_raw([1], Format(40, 0)) * from_raw([1], Format(40, 0)),
    lambda: from_raw([1], Format(64, 0)) + from_raw([1], Format(64, 0)),
    lambda: from_raw([1], Format(60, 0)) - from_raw([1], Format(8, 10)),   # 61 int + 10 frac bits
    lambda: -from_raw([1], Format(64, 0)),
    lambda: abs(from_raw([1], Format(64, 0))),
    lambda: from_raw([1, 2, 3], Format(63, 0)).sum(),
])
def test_results_wider_than_64_bits_ask_for_a_cast(make):
    with pytest.raises(ValueError, match="cast"):
        make()


def test_overflow_log_of_arithmetic_records_the_exact_results():
    a, b = from_raw([1, -3], Format(8, 0)), from_raw([100, 3], Format(8, 0))
    with overflow_log() as log:
        fixed.add(a, b, Format(4, 0))                   # exact 101 and 0: one overflow
        fixed.mul(a, b, Format(4, 0), overflow="wrap")  # exact 100 and -9: both overflow
    assert (log["add"].count, log["add"].min, log["add"].max) == (1, 0.0, 101.0)
    assert (log["mul"].count, log["mul"].min, log["mul"].max) == (2, -9.0, 100.0)
