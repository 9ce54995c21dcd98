"""Hand tables: cast() on ties and near-ties for every deterministic rounding mode, on every kernel path.

The values are worked out by hand (no fxpsim and no reference model computes an expected number):
the source codes hold exactly the values in VALUES, the destination has LSB 1.
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.core.fixed import Format, from_raw, mul

VALUES = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.75, -0.25, 0.25, 0.75]
EXPECTED = {                               # value -> integer, per mode
    "half_up":          [-2, -1, 0, 1, 2, 3, -1, 0, 0, 1],     # ties toward +inf
    "half_down":        [-3, -2, -1, 0, 1, 2, -1, 0, 0, 1],    # ties toward -inf
    "half_toward_zero": [-2, -1, 0, 0, 1, 2, -1, 0, 0, 1],
    "half_away":        [-3, -2, -1, 1, 2, 3, -1, 0, 0, 1],
    "half_even":        [-2, -2, 0, 0, 2, 2, -1, 0, 0, 1],
    "floor":            [-3, -2, -1, 0, 1, 2, -1, -1, 0, 0],
    "toward_zero":      [-2, -1, 0, 0, 1, 2, 0, 0, 0, 0],
    "ceil":             [-2, -1, 0, 1, 2, 3, 0, 0, 1, 1],
}
# source formats: the shift src.frac - dst.frac picks the kernel path (2: small shifts; 61: the largest
# shift whose codes t * 2^61 still fit int64)
SOURCES = [Format(8, 2), Format(64, 61)]


@pytest.mark.parametrize("rounding", sorted(EXPECTED))
@pytest.mark.parametrize("src", SOURCES, ids=lambda f: str(f))
def test_cast_ties_every_mode(src, rounding):
    codes = [int(v * 4) << (src.frac - 2) for v in VALUES]          # v * 2^frac, exact
    got = from_raw(codes, src).cast(Format(8, 0), rounding, "saturate")
    assert got.raw.tolist() == EXPECTED[rounding]


@pytest.mark.parametrize("rounding", sorted(EXPECTED))
def test_fused_mul_ties_on_the_128_bit_path(rounding):
    # a = v * 2^40 at frac 42 (value v/4 * 4 = v), b = 1.0 at frac 32 (code 2^32): the exact product has
    # 74 fraction bits, so rounding it into LSB 1 shifts by 74 on 128-bit integers
    a = from_raw([int(v * 4) << 40 for v in VALUES], Format(64, 42))
    b = from_raw([1 << 32] * len(VALUES), Format(64, 32))
    got = mul(a, b, Format(8, 0), rounding)
    assert got.raw.tolist() == EXPECTED[rounding]
    # and the small (int64) fused path: 8-bit operands, shift 2
    small = mul(from_raw([int(v * 4) for v in VALUES], Format(8, 2)), from_raw([1] * len(VALUES), Format(2, 0)),
                Format(8, 0), rounding)
    assert small.raw.tolist() == EXPECTED[rounding]


@pytest.mark.parametrize("rounding, expected", [
    # (2^-200 * c) into LSB 1: |value| < 1/2, never a tie: only the sign matters
    ("half_up", [0, 0, 0, 0]), ("half_even", [0, 0, 0, 0]), ("half_away", [0, 0, 0, 0]),
    ("floor", [-1, -1, 0, 0]), ("ceil", [0, 0, 1, 1]), ("toward_zero", [0, 0, 0, 0]),
])
def test_cast_far_below_the_lsb(rounding, expected):
    got = from_raw([-32768, -1, 1, 32767], Format(16, 200)).cast(Format(8, 0), rounding)
    assert got.raw.tolist() == expected


@pytest.mark.parametrize("rounding, expected", [
    # ufix64 code 2^63 + 1 at frac 1 is 2^62 + 1/2 (a tie above 2^62); 2^64 - 1 is 2^63 - 1/2
    ("half_up", [2 ** 62 + 1, 2 ** 63]), ("half_down", [2 ** 62, 2 ** 63 - 1]),
    ("half_even", [2 ** 62, 2 ** 63]), ("half_toward_zero", [2 ** 62, 2 ** 63 - 1]),
    ("half_away", [2 ** 62 + 1, 2 ** 63]), ("floor", [2 ** 62, 2 ** 63 - 1]),
    ("toward_zero", [2 ** 62, 2 ** 63 - 1]), ("ceil", [2 ** 62 + 1, 2 ** 63]),
])
def test_cast_ties_of_unsigned_64_bit_codes(rounding, expected):
    src = from_raw(np.array([2 ** 63 + 1, 2 ** 64 - 1], dtype=np.uint64), Format(64, 1, False))
    got = src.cast(Format(64, 0, False), rounding)
    assert [int(c) for c in got.raw] == expected


@pytest.mark.parametrize("rounding, expected", [
    # -2.5, -1.5, 1.5 into a 2-bit signed format (codes -2..1), wrap: rounding first, then the fit
    ("half_up", [-2, -1, -2]),      # 1.5 -> 2 wraps to -2
    ("half_even", [-2, -2, -2]),    # -2.5 -> -2, -1.5 -> -2, 1.5 -> 2 wraps to -2
    ("half_down", [1, -2, 1]),      # -2.5 -> -3 wraps to 1, -1.5 -> -2, 1.5 -> 1
])
def test_cast_ties_then_overflow(rounding, expected):
    got = from_raw([-10, -6, 6], Format(8, 2)).cast(Format(2, 0), rounding, "wrap")
    assert got.raw.tolist() == expected
