"""Edge cases of fxpsim.datapath.requantize that mutation testing (tools/mutation/) found untested.

Every expected value comes from the pure-Python models in this file or in ``tests/reference.py``
(exact ``Fraction`` arithmetic written from the definitions), or from hand tables; none from
fxpsim's own helpers.  Covered here: every ``Requantizer`` kind called per tensor and per channel
along any axis, ``final_rounding`` and ``multiplier_bits`` (the exact unfused path), the fused
output stage on its tiled and untiled branches, ``quantize_multiplier``'s single-rounding
saturation boundary, ``tflite_add_params`` from the TFLite formulas, ``activation_range``
defaults and dtype limits, and the exact text of the argument errors (each names its argument).
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.core.fixed import Format
from fxpsim.datapath.requantize import (
    INT32_MAX, INT32_MIN, Requantizer, activation_range, multiply_by_quantized_multiplier, quantize_multiplier,
    requantize_float, requantize_shift, rounding_divide_by_pot, saturating_rounding_doubling_high_mul,
    tflite_add_params,
)
from reference import overflow_int, ref_mbqm, ref_quantize_multiplier, ref_srdhm, ref_wrap32, round_fraction

F = Fraction


# --------------------------------------------------------------------------- independent models
def sat32(v: int) -> int:
    return min(max(v, INT32_MIN), INT32_MAX)


def model_narrow_multiplier(real: float, bits: int) -> tuple[int, int]:
    """``m = round_half_away(q 2^b)``, ``(q, e) = frexp(real)``; a carry to 2^b moves into e;
    ``e < -31`` (or real = 0) gives (0, 0)."""
    if real == 0:
        return 0, 0
    q, e = math.frexp(real)
    m = round_fraction(F(q) * 2 ** bits, "half_away")
    if abs(m) == 1 << bits:
        m, e = (1 << (bits - 1)) * (1 if m > 0 else -1), e + 1
    if e < -31:
        return 0, 0
    return m, e


def model_requantizer(x: int, kind: str, m: int = 0, s: int = 0, scale: float = 0.0, rounding: str = "half_up",
                      final: str | None = None, bits: int = 31) -> int:
    """One accumulator value through a Requantizer, from the class docstring's formulas."""
    if kind == "double":
        v = ref_wrap32(x * 2 ** max(s, 0))
        if bits == 31:
            v = ref_srdhm(v, m)
        else:
            v = math.floor(F(v * m + 2 ** (bits - 1), 2 ** bits))
        return round_fraction(F(v, 2 ** max(-s, 0)), final or "half_away")
    if kind == "single":
        total = bits - s
        if total < 1:
            return ref_wrap32(x * m * 2 ** (-total))
        return ref_wrap32(round_fraction(F(x * m, 2 ** total), final or "half_up"))
    if kind == "shift":                        # y = round(acc * 2^shift), saturated to int32
        return sat32(round_fraction(F(x) * F(2) ** s, rounding))
    return sat32(round_fraction(F(float(x) * scale), rounding))   # float64 product, rounded once


def per_element(acc: np.ndarray, axis: int, fn) -> list:
    """``fn(value, channel)`` over ``acc`` with the channel index along ``axis``."""
    out = np.empty(acc.shape, dtype=object)
    for idx in np.ndindex(acc.shape):
        out[idx] = fn(int(acc[idx]), idx[axis])
    return out.astype(np.int64)


EDGE32 = [INT32_MIN, INT32_MIN + 1, -(1 << 30) - 1, -(1 << 30), -65537, -4097, -256, -129, -128, -100, -9, -8, -7,
          -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 100, 127, 255, 4096, 65536, (1 << 30), INT32_MAX - 1,
          INT32_MAX]


# --------------------------------------------------------------------------- error messages
def _raises(call, exc, pattern):
    with pytest.raises(exc) as info:
        call()
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


I32 = r"\[-2147483648, 2147483647\]"


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: saturating_rounding_doubling_high_mul([1 << 31], [1]), ValueError,
     rf"a \(int32\) must lie in {I32}; got values in \[2147483648, 2147483648\]"),
    (lambda: saturating_rounding_doubling_high_mul([1], [-(1 << 31) - 1]), ValueError,
     rf"b \(int32\) must lie in {I32}; got values in \[-2147483649, -2147483649\]"),
    (lambda: saturating_rounding_doubling_high_mul([1.0], [1]), TypeError, r"a must be an integer array, got dtype float64"),
    (lambda: saturating_rounding_doubling_high_mul([1], [True]), TypeError, r"b must be an integer array, got dtype bool"),
    (lambda: rounding_divide_by_pot([1], 32), ValueError, r"exponent must lie in \[0, 31\]; got values in \[32, 32\]"),
    (lambda: rounding_divide_by_pot([1], [-1, 3]), ValueError, r"exponent must lie in \[0, 31\]; got values in \[-1, 3\]"),
    (lambda: rounding_divide_by_pot([1], 1.0), TypeError, r"exponent must be an integer array, got dtype float64"),
    (lambda: rounding_divide_by_pot([1 << 31], 1), ValueError,
     rf"x \(int32\) must lie in {I32}; got values in \[2147483648, 2147483648\]"),
    (lambda: multiply_by_quantized_multiplier([1.5], 1, 0), TypeError, r"acc must be an integer array, got dtype float64"),
    (lambda: multiply_by_quantized_multiplier([-(1 << 31) - 1, 5], 1, 0), ValueError,
     r"multiply_by_quantized_multiplier: acc must fit int32 \(gemmlowp arithmetic\); use an accumulator of at most "
     r"32 bits, or requantize with kind 'shift' or 'float' \(got values in \[-2147483649, 5\]\)"),
    (lambda: multiply_by_quantized_multiplier([1], 1 << 31, 0), ValueError,
     rf"multiplier \(int32\) must lie in {I32}; got values in \[2147483648, 2147483648\]"),
    (lambda: multiply_by_quantized_multiplier([1], 1.0, 0), TypeError,
     r"multiplier must be an integer array, got dtype float64"),
    (lambda: multiply_by_quantized_multiplier([1], 1, 0.0), TypeError, r"shift must be an integer array, got dtype float64"),
    (lambda: multiply_by_quantized_multiplier([1], 1, -32), ValueError, r"shift must lie in \[-31, 30\]; got values in \[-32, -32\]"),
    (lambda: multiply_by_quantized_multiplier(np.zeros((2, 3), np.int64), [1, 2], 0), ValueError,
     r"multiplier must be a scalar or have one value per channel \(3 along axis 1\); got shape \(2,\)"),
    (lambda: multiply_by_quantized_multiplier(np.zeros((2, 3), np.int64), 1, [1, 2], axis=1), ValueError,
     r"shift must be a scalar or have one value per channel \(3 along axis 1\); got shape \(2,\)"),
    (lambda: multiply_by_quantized_multiplier(np.zeros((2, 3), np.int64), 1, [[0, 0, 0]]), ValueError,
     r"shift must be a scalar or have one value per channel \(3 along axis 1\); got shape \(1, 3\)"),
    (lambda: multiply_by_quantized_multiplier(7, [1, 2], 0), ValueError,
     r"multiplier: a scalar accumulator takes one value, got shape \(2,\)"),
    (lambda: multiply_by_quantized_multiplier(np.zeros((2, 3), np.int64), 1, 0, axis=2), ValueError,
     r"axis 2 is out of range for an array of 2 dimensions"),
    (lambda: multiply_by_quantized_multiplier(np.zeros((2, 3), np.int64), 1, 0, axis=-3), ValueError,
     r"axis -3 is out of range for an array of 2 dimensions"),
    (lambda: multiply_by_quantized_multiplier([1], -1, 0, "single"), ValueError,
     r"multiply_by_quantized_multiplier: single rounding needs multiplier >= 0"),
    (lambda: multiply_by_quantized_multiplier([1], 1, 0, "half"), ValueError,
     r"rounding must be 'double' or 'single', got 'half'"),
    (lambda: multiply_by_quantized_multiplier(np.array([1 << 63], np.uint64), 1, 0), ValueError,
     r"acc has values above 2\*\*63 - 1"),
    (lambda: quantize_multiplier(float("nan")), ValueError, r"quantize_multiplier: the real multiplier must be finite"),
    (lambda: quantize_multiplier([0.5, -0.5], single_rounding=True), ValueError,
     r"quantize_multiplier: single rounding needs a non-negative multiplier"),
    (lambda: requantize_shift([1.0], 1), TypeError, r"acc must be an integer array, got dtype float64"),
    (lambda: requantize_shift([1], 1.0), TypeError, r"shift must be an integer array, got dtype float64"),
    (lambda: requantize_shift([1], -64), ValueError, r"shift must lie in \[-63, 63\]; got values in \[-64, -64\]"),
    (lambda: requantize_shift([[1, 2]], [1, 2, 3]), ValueError,
     r"shift must be a scalar or have one value per channel \(2 along axis 1\); got shape \(3,\)"),
    (lambda: requantize_shift([1], 1, out=Format(8, 2)), ValueError,
     r"requantize_shift: out must be an integer format \(frac == 0\), got .*"),
    (lambda: requantize_float([1.0], 0.5), TypeError, r"acc must be an integer array, got dtype float64"),
    (lambda: requantize_float([1], 0.5, out=Format(8, 2)), ValueError,
     r"requantize_float: out must be an integer format \(frac == 0\), got .*"),
    (lambda: requantize_float([1], [0.5, -1.0]), ValueError, r"requantize_float: scale must be positive and finite"),
    (lambda: requantize_float([[1, 2]], [0.5, 0.5, 0.5]), ValueError,
     r"scale must be a scalar or have one value per channel \(2 along axis 1\); got shape \(3,\)"),
    (lambda: activation_range("relu", 0.1, 0, dtype="no such type"), TypeError,
     r"dtype must be a numpy integer dtype, got 'no such type'"),
    (lambda: activation_range("relu", 0.1, 0, dtype=np.float32), TypeError,
     r"dtype must be an integer dtype of at most 32 bits, got float32"),
    (lambda: activation_range("relu", 0.1, 0, dtype=np.int64), TypeError,
     r"dtype must be an integer dtype of at most 32 bits, got int64"),
    (lambda: activation_range("relu", 0.1, 1.0), TypeError, r"zero_point must be an int, got 1\.0"),
    (lambda: activation_range("relu", 0.1, True), TypeError, r"zero_point must be an int, got True"),
    (lambda: activation_range("relu", 0.1, -129), ValueError, r"zero_point=-129 is out of range for int8 \[-128, 127\]"),
    (lambda: activation_range("relu", -0.1, 0), ValueError, r"scale must be positive and finite \(as a float32\), got -0\.1"),
    (lambda: activation_range("relu", 1e39, 0), ValueError, r"scale must be positive and finite \(as a float32\), got 1e\+39"),
    (lambda: activation_range("relu", "x", 0), TypeError, r"scale must be a real number or an array of them, got 'x'"),
    (lambda: activation_range("elu", 0.1, 0), ValueError,
     r"activation must be 'none', 'relu', 'relu6' or 'relu_n1_to_1', got 'elu'"),
    (lambda: tflite_add_params(0.0, 1.0, 1.0), ValueError, r"scale1 must be positive and finite \(as a float32\), got 0\.0"),
    (lambda: tflite_add_params(1.0, 0.0, 1.0), ValueError, r"scale2 must be positive and finite \(as a float32\), got 0\.0"),
    (lambda: tflite_add_params(1.0, 1.0, 0.0), ValueError,
     r"out_scale must be positive and finite \(as a float32\), got 0\.0"),
    (lambda: tflite_add_params(1.0, 1.0, 1.0, left_shift=31), ValueError, r"left_shift must be an int in \[0, 30\], got 31"),
    (lambda: tflite_add_params(1.0, 1.0, 1.0, left_shift=-1), ValueError, r"left_shift must be an int in \[0, 30\], got -1"),
    (lambda: tflite_add_params(1.0, 1.0, 1.0, left_shift=2.0), ValueError, r"left_shift must be an int in \[0, 30\], got 2\.0"),
    (lambda: tflite_add_params(1.0, 1.0, 2.0 ** -20), ValueError,
     r"tflite_add_params: the output multiplier 2\.0 is not in \(0, 1\); the scales are too far apart for TFLite's ADD"),
    (lambda: Requantizer("triple", multiplier=1, shift=0), ValueError,
     r"Requantizer.kind must be one of \('double', 'single', 'shift', 'float', 'float32'\), got 'triple'"),
    (lambda: Requantizer("double", multiplier=(1, 2), shift=(0,)), ValueError,
     r"Requantizer: multiplier and shift need the same, non-zero length"),
    (lambda: Requantizer("double"), ValueError, r"Requantizer: multiplier and shift need the same, non-zero length"),
    (lambda: Requantizer("double", multiplier=1 << 31, shift=0), ValueError,
     rf"multiplier \(int32\) must lie in {I32}; got values in \[2147483648, 2147483648\]"),
    (lambda: Requantizer("double", multiplier=1, shift=1.0), TypeError, r"shift must be an integer array, got dtype float64"),
    (lambda: Requantizer("double", multiplier=1, shift=31), ValueError, r"shift must lie in \[-31, 30\]; got values in \[31, 31\]"),
    (lambda: Requantizer("single", multiplier=(5, -1), shift=(0, 0)), ValueError,
     r"Requantizer: single rounding needs multiplier >= 0"),
    (lambda: Requantizer("shift"), ValueError, r"Requantizer: kind 'shift' needs shift"),
    (lambda: Requantizer("shift", shift=1.0), TypeError, r"shift must be an integer array, got dtype float64"),
    (lambda: Requantizer("shift", shift=(64,)), ValueError, r"shift must lie in \[-63, 63\]; got values in \[64, 64\]"),
    (lambda: Requantizer("shift", shift=(-64,)), ValueError, r"shift must lie in \[-63, 63\]; got values in \[-64, -64\]"),
    (lambda: Requantizer("float"), ValueError, r"Requantizer: kind 'float' needs scale"),
    (lambda: Requantizer("float", scale=(0.5, float("inf"))), ValueError,
     r"Requantizer: scale must be positive and finite, got \(0\.5, inf\)"),
    (lambda: Requantizer("double", multiplier=1, shift=0, multiplier_bits=1), ValueError,
     r"Requantizer: multiplier_bits must be an int in 2\.\.31, got 1"),
    (lambda: Requantizer("double", multiplier=1, shift=0, multiplier_bits=32), ValueError,
     r"Requantizer: multiplier_bits must be an int in 2\.\.31, got 32"),
    (lambda: Requantizer("double", multiplier=1, shift=0, multiplier_bits=True), ValueError,
     r"Requantizer: multiplier_bits must be an int in 2\.\.31, got True"),
    (lambda: Requantizer("double", multiplier=1, shift=0, multiplier_bits=8.0), ValueError,
     r"Requantizer: multiplier_bits must be an int in 2\.\.31, got 8\.0"),
    (lambda: Requantizer("double", multiplier=1, shift=0, final_rounding="sideways"), ValueError,
     r"unknown rounding mode 'sideways'.*"),
    (lambda: Requantizer("double", multiplier=1 << 30, shift=0, final_rounding="floor")(np.array([1 << 31])), ValueError,
     r"Requantizer: acc must fit int32 \(gemmlowp arithmetic\)"),
    (lambda: Requantizer("double", multiplier=1 << 30, shift=0, multiplier_bits=8)(np.array([-(1 << 31) - 1])),
     ValueError, r"Requantizer: acc must fit int32 \(gemmlowp arithmetic\)"),
    (lambda: Requantizer.tflite([1.0, 2.0], 1.0, 1.0), ValueError,
     r"Requantizer.tflite: input/output scales are scalars, weight_scale a scalar or 1-D"),
    (lambda: Requantizer.tflite(1.0, 1.0, [1.0, 2.0]), ValueError,
     r"Requantizer.tflite: input/output scales are scalars, weight_scale a scalar or 1-D"),
    (lambda: Requantizer.tflite(1.0, [[1.0, 2.0]], 1.0), ValueError,
     r"Requantizer.tflite: input/output scales are scalars, weight_scale a scalar or 1-D"),
    (lambda: Requantizer.tflite(0.0, 1.0, 1.0), ValueError, r"input_scale must be positive and finite \(as a float32\), got 0\.0"),
    (lambda: Requantizer.tflite(1.0, [1.0, -1.0], 1.0), ValueError,
     r"weight_scale must be positive and finite \(as a float32\), got \[1\.0, -1\.0\]"),
    (lambda: Requantizer.tflite(1.0, 1.0, float("nan")), ValueError,
     r"output_scale must be positive and finite \(as a float32\), got nan"),
    (lambda: Requantizer.tflite(1.0, 1.0, 1.0, kind="triple"), ValueError,
     r"kind must be one of \('double', 'single', 'shift', 'float', 'float32'\), got 'triple'"),
])
def test_argument_errors_name_the_argument(call, exc, pattern):
    _raises(call, exc, pattern)


# --------------------------------------------------------------------------- input handling
def test_empty_and_unsigned_inputs():
    assert multiply_by_quantized_multiplier(np.array([], np.int64), 1 << 30, -1).shape == (0,)
    assert multiply_by_quantized_multiplier(np.array([], np.uint64), 1 << 30, -1).shape == (0,)
    assert requantize_shift(np.array([], np.int32), 3).shape == (0,)
    # uint64 is accepted up to 2^63 - 1 (int64 max), element by element as Python ints
    big = np.array([(1 << 63) - 1, 5], np.uint64)
    assert requantize_shift(big, 62).tolist() == [2, 0]          # (2^63 - 1) / 2^62 = 2 - 2^-62 -> 2 (half up)
    assert requantize_shift(np.array([9, 16], np.uint8), 2).tolist() == [2, 4]


def test_scalar_accumulator_takes_one_element_parameters():
    got = multiply_by_quantized_multiplier(1000, [1 << 30], [-3])
    assert got.shape == () and int(got) == ref_mbqm(1000, 1 << 30, -3, "double") == 63     # 62.5 away
    got = requantize_shift(np.int64(-1000), [4], "floor")
    assert got.shape == () and int(got) == -63                                   # floor(-62.5)
    got = requantize_float(np.int64(7), [0.5])
    assert got.shape == () and int(got) == 4                                     # 3.5 half away
    assert multiply_by_quantized_multiplier(-1000, 1 << 30, -3, axis=5) == -63   # axis ignored for a scalar


def test_axis_selects_the_channel_axis():
    acc = np.arange(-30, 30, dtype=np.int64).reshape(3, 4, 5) * 1001
    ms, ss = [1 << 30, 1518500250, INT32_MAX, 1 << 30], [-1, 2, -5, 0]
    for axis in (1, -2):
        for rounding in ("double", "single"):
            got = multiply_by_quantized_multiplier(acc, ms, ss, rounding, axis=axis)
            want = per_element(acc, 1, lambda v, c: ref_mbqm(v, ms[c], ss[c], rounding))
            np.testing.assert_array_equal(got, want)
    sh = [1, 0, 3, -2]
    np.testing.assert_array_equal(requantize_shift(acc, sh, "half_even", axis=1),
                                  per_element(acc, 1, lambda v, c: round_fraction(F(v, 1) / F(2) ** sh[c], "half_even")))
    sc = [0.5, 0.3, 1.25, 3.0, 0.001]
    np.testing.assert_array_equal(requantize_float(acc, sc, axis=-1),
                                  per_element(acc, 2, lambda v, c: round_fraction(F(float(v) * sc[c]), "half_away")))


def test_mbqm_left_shift_wraps_like_int32():
    # TFLite's x * (1 << left_shift) is an int32 multiplication: it wraps before SRDHM
    acc = [INT32_MAX, INT32_MIN, (1 << 29) + 3, -(1 << 29) - 3, 12345]
    for s in (1, 2, 5, 30):
        want = [ref_srdhm(ref_wrap32(a << s), 1 << 30) for a in acc]
        assert multiply_by_quantized_multiplier(acc, 1 << 30, s).tolist() == want


# --------------------------------------------------------------------------- defaults
def test_requantize_defaults_hand_table():
    # requantize_shift: half_up into a saturating int32
    assert requantize_shift([1, -1, 3, -3, 5, -5], 1).tolist() == [1, 0, 2, -1, 3, -2]
    assert requantize_shift([1 << 40, -(1 << 40)], 0).tolist() == [INT32_MAX, INT32_MIN]
    assert requantize_shift([1 << 40], 0, overflow="wrap").tolist() == [0]
    # requantize_float: half_away into a saturating int32
    assert requantize_float([1, -1, 3, -3], 0.5).tolist() == [1, -1, 2, -2]
    assert requantize_float([1 << 40, -(1 << 40)], 1.0).tolist() == [INT32_MAX, INT32_MIN]
    assert requantize_float([1 << 40], 1.0, overflow="wrap").tolist() == [0]
    # an explicit int8 register
    assert requantize_float([300, -300], 1.0, out=Format.integer(8)).tolist() == [127, -128]
    assert requantize_shift([600, -600], 1, out=Format.integer(8)).tolist() == [127, -128]


def test_requantize_float_large_accumulators_use_float64():
    # 2^53 + 1 is not a float64: the product is fl64(acc) * S, rounded once (the documented semantics)
    acc = np.array([(1 << 53) + 1, -(1 << 53) - 1])
    assert requantize_float(acc, 2.0 ** -30, out=Format.integer(64)).tolist() == [1 << 23, -(1 << 23)]


def test_activation_range_defaults_and_limits():
    assert activation_range() == (-128, 127)
    assert activation_range("relu") == (0, 127)
    assert activation_range("relu6") == (0, 6)                        # scale 1.0, zero point 0
    assert activation_range("relu_n1_to_1") == (-1, 1)
    assert activation_range("none", 0.1, 127) == (-128, 127)          # zero point at the type maximum
    assert activation_range("relu", 0.1, 127) == (127, 127)
    assert activation_range("relu6", 0.5, np.int8(-128)) == (-128, -116)
    assert activation_range("none", 1.0, 0, dtype=np.int32) == (INT32_MIN, INT32_MAX)
    assert activation_range("relu6", 1.0, 0, dtype=np.int16) == (0, 6)
    assert activation_range("relu6", 1e-30, 0, dtype=np.int32) == (0, INT32_MAX)     # 6 / 1e-30 clamps
    assert activation_range("relu_n1_to_1", 1e-30, 0, dtype=np.int32) == (INT32_MIN, INT32_MAX)
    # Q(f) = zp + round_half_away(f / s) with the division in float32
    for scale, zp in ((0.4, 3), (0.3, -7), (0.07, 0)):
        q = [zp + round_fraction(F(float(np.float32(f) / np.float32(scale))), "half_away") for f in (-1.0, 1.0)]
        assert activation_range("relu_n1_to_1", scale, zp) == (max(-128, q[0]), min(127, q[1]))
    assert activation_range("relu6", 4.0, -7) == (-7, -7 + 2)                       # 6/4 = 1.5 -> 2


def test_activation_range_clamp_sits_beyond_every_type():
    # tiny scales send Q(f) far outside int32; the clamp at +-2^40 keeps it finite and outside
    for scale in (1e-38, 1e-20, 1e-12):
        with np.errstate(over="ignore"):        # 6 / 1e-38 overflows float32 (to inf, then clamped)
            assert activation_range("relu_n1_to_1", scale, 0, dtype=np.int32) == (INT32_MIN, INT32_MAX)
            assert activation_range("relu6", scale, -5, dtype=np.int32) == (-5, INT32_MAX)


# --------------------------------------------------------------------------- quantize_multiplier
def test_quantize_multiplier_single_rounding_boundaries():
    assert quantize_multiplier(0.0, single_rounding=True) == (0, 0)
    assert quantize_multiplier(0.5, single_rounding=True) == (1 << 30, 0)
    assert quantize_multiplier(0.75, single_rounding=True) == (3 << 29, 0)
    assert quantize_multiplier(2.0 ** 29, single_rounding=True) == (1 << 30, 30)     # e = 30 is kept
    assert quantize_multiplier(1.5 * 2.0 ** 29, single_rounding=True) == (3 << 29, 30)
    assert quantize_multiplier(2.0 ** 30, single_rounding=True) == (INT32_MAX, 30)   # e = 31 saturates
    assert quantize_multiplier(2.0 ** 30) == (1 << 30, 31)
    m, s = quantize_multiplier([0.25, 2.0 ** 29, 2.0 ** 31], single_rounding=True)
    assert m.tolist() == [1 << 30, 1 << 30, INT32_MAX] and s.tolist() == [-1, 30, 30]


def test_quantize_multiplier_accepts_integer_and_float32_inputs():
    for real in (1, 3, np.float32(0.1), np.float16(0.3), [2, 5]):
        got = quantize_multiplier(real)
        reals = np.atleast_1d(np.asarray(real, dtype=np.float64)).tolist()
        want = [ref_quantize_multiplier(r) for r in reals]
        if isinstance(got[0], int):
            assert got == want[0]
        else:
            assert list(zip(got[0].tolist(), got[1].tolist())) == want


# --------------------------------------------------------------------------- tflite_add_params
def model_add_params(s1: float, s2: float, so: float, left_shift: int = 20, single: bool = False):
    """TFLite's PrepareGeneralSubOp/Add: double arithmetic on the float32 scales."""
    s1, s2, so = (float(np.float32(v)) for v in (s1, s2, so))
    twice = 2.0 * max(s1, s2)
    out = []
    for real in (s1 / twice, s2 / twice, twice / ((1 << left_shift) * so)):
        out += ref_quantize_multiplier(real, single=single)
    return tuple(out)


@pytest.mark.parametrize("scales", [
    (0.5, 0.25, 0.5), (0.25, 0.5, 0.5), (0.02, 0.03, 0.05), (0.1, 0.1, 0.1), (0.007843, 0.0039215, 0.01),
    (3.0, 0.001, 0.75),
])
@pytest.mark.parametrize("left_shift, single", [(20, False), (20, True), (0, False), (15, True), (30, False)])
def test_tflite_add_params_match_the_tflite_formulas(scales, left_shift, single):
    want = model_add_params(*scales, left_shift=left_shift, single=single)
    s1, s2, so = (float(np.float32(v)) for v in scales)
    twice = 2.0 * max(s1, s2)
    if not 0.0 < twice / ((1 << left_shift) * so) < 1.0:
        with pytest.raises(ValueError, match="output multiplier"):
            tflite_add_params(*scales, left_shift=left_shift, single_rounding=single)
        return
    assert tflite_add_params(*scales, left_shift=left_shift, single_rounding=single) == want


def test_tflite_add_params_defaults_hand_table():
    # s1 = 0.5, s2 = 0.25, so = 2^-10: twice = 1, r1 = 0.5, r2 = 0.25, r_out = 1 / (2^20 2^-10) = 2^-10
    assert tflite_add_params(0.5, 0.25, 2.0 ** -10) == (1 << 30, 0, 1 << 30, -1, 1 << 30, -9)
    # left_shift 10 (a numpy int), out scale 2^-9: r_out = 1 / (2^10 2^-9) = 1/2
    assert tflite_add_params(0.5, 0.25, 2.0 ** -9, np.int64(10)) == (1 << 30, 0, 1 << 30, -1, 1 << 30, 0)
    # equal scales: r = 1/2 each; r_out = 0.2 / (2^2 0.1) = 1/2 (in double, from float32 0.1)
    assert tflite_add_params(0.1, 0.1, 0.1, 2)[:4] == (1 << 30, 0, 1 << 30, 0)
    # an output multiplier of exactly 1 is refused ((0, 1) is open): 2 s / (2^0 * 2 s) = 1
    with pytest.raises(ValueError, match="output multiplier 1.0 is not in"):
        tflite_add_params(0.5, 0.5, 1.0, left_shift=0)


# --------------------------------------------------------------------------- Requantizer kinds
CHANNEL_PARAMS = {
    "double": dict(multiplier=(1 << 30, 1518500250, INT32_MAX, 1 << 30, 1395864371),
                   shift=(-1, 0, -7, 3, -31)),
    "single": dict(multiplier=(1 << 30, 1518500250, INT32_MAX, 1 << 30, 1395864371),
                   shift=(-1, 0, -7, 3, -30)),
    "shift": dict(shift=(-1, 0, -7, 3, 2)),
    "float": dict(scale=(0.5, 0.3, 1.0 / 3, 2.5, 1e-6)),
}


def _model_for(rq: Requantizer, c: int, x: int) -> int:
    pick = (lambda t: t[c] if len(t) > 1 else t[0])
    return model_requantizer(x, rq.kind, m=pick(rq.multiplier) if rq.multiplier else 0,
                             s=pick(rq.shift) if rq.shift else 0, scale=pick(rq.scale) if rq.scale else 0.0,
                             rounding=rq.rounding.value,
                             final=rq.final_rounding.value if rq.final_rounding is not None else None,
                             bits=rq.multiplier_bits)


@pytest.mark.parametrize("kind", ["double", "single", "shift", "float"])
@pytest.mark.parametrize("rounding", ["half_up", "half_even", "floor"])
def test_requantizer_every_kind_per_channel_along_any_axis(kind, rounding):
    rq = Requantizer(kind, rounding=rounding, **CHANNEL_PARAMS[kind])
    assert rq.channels == 5
    acc = np.array([EDGE32[i % len(EDGE32)] for i in range(5 * 9)], np.int64)
    if kind in ("shift", "float"):
        acc = acc // 3 + np.int64(1 << 20)                                  # keep x * 2^3 inside int64 with room
    for axis, shape in ((-1, (9, 5)), (0, (5, 9)), (1, (3, 5, 3))):
        a = acc.reshape(shape)
        want = per_element(a, axis, lambda v, c: _model_for(rq, c, v))
        np.testing.assert_array_equal(rq(a, axis=axis), want, err_msg=f"{kind} axis={axis}")
    # per tensor: one parameter
    one = Requantizer(kind, rounding=rounding, **{k: v[:1] for k, v in CHANNEL_PARAMS[kind].items()})
    assert one.channels == 1
    xs = np.array(EDGE32, np.int64) // 3
    np.testing.assert_array_equal(one(xs), [_model_for(one, 0, int(v)) for v in xs])
    np.testing.assert_array_equal(one(xs.reshape(5, 7), axis=0),
                                  np.array([_model_for(one, 0, int(v)) for v in xs]).reshape(5, 7))


def test_requantizer_shift_kind_is_a_scale_by_two_to_the_shift():
    rq = Requantizer("shift", shift=(-3, 2), rounding="half_even")
    assert rq(np.array([[12, 3], [-20, -3], [4, 1]])).tolist() == [[2, 12], [-2, -12], [0, 4]]
    rq = Requantizer("shift", shift=-1)                                 # default rounding half_up
    assert rq(np.array([1, -1, 3, -3])).tolist() == [1, 0, 2, -1]


def test_requantizer_float_kind_default_rounding_is_half_up():
    rq = Requantizer("float", scale=0.5)
    assert rq.rounding.value == "half_up"
    assert rq(np.array([1, -1, 3, -3])).tolist() == [1, 0, 2, -1]


@pytest.mark.parametrize("kind", ["double", "single"])
@pytest.mark.parametrize("final", [None, "half_up", "half_away", "half_even", "floor", "ceil", "toward_zero",
                                   "half_down"])
@pytest.mark.parametrize("bits", [31, 16, 8, 2])
def test_requantizer_final_rounding_and_narrow_multipliers(kind, final, bits):
    if bits == 31:
        ms = (1 << 30, 1518500250, INT32_MAX, 1 << 30, 1 << 30)
    else:
        ms = (1 << (bits - 1), (3 << (bits - 2)), (1 << bits) - 1, 1 << (bits - 1), (1 << bits) - 1)
    shifts = (-1, 0, -5, 3, -20)
    if kind == "single" and bits < 31:
        shifts = (-1, 0, bits, bits + 2, -20)          # shift >= bits: an exact left shift (total < 1)
    rq = Requantizer(kind, multiplier=ms, shift=shifts, final_rounding=final, multiplier_bits=bits)
    assert (rq.final_rounding.value if final is not None else rq.final_rounding) == final
    xs = [v for v in EDGE32 if abs(v) < (1 << 20)] + [(1 << 20) + 7, -(1 << 20) - 9, (1 << 19) + (1 << 18)]
    acc = np.array([xs[i % len(xs)] for i in range(5 * len(xs))], np.int64).reshape(-1, 5)
    want = per_element(acc, 1, lambda v, c: model_requantizer(v, kind, m=ms[c], s=shifts[c], final=final, bits=bits))
    np.testing.assert_array_equal(rq(acc), want)
    # channels on axis 0
    np.testing.assert_array_equal(rq(acc.T, axis=0), want.T)
    # per tensor, scalar accumulator
    one = Requantizer(kind, multiplier=ms[0], shift=shifts[0], final_rounding=final, multiplier_bits=bits)
    got = one(np.int64(-77777))
    assert got.shape == () and int(got) == model_requantizer(-77777, kind, m=ms[0], s=shifts[0], final=final, bits=bits)


def test_requantizer_final_rounding_double_left_shift_wraps():
    # shift > 0: acc * 2^s wraps in int32 before the multiply, as in TFLite
    rq = Requantizer("double", multiplier=1 << 30, shift=3, final_rounding="floor")
    xs = [INT32_MAX, (1 << 28) + 5, -(1 << 29) - 1, 1000]
    assert rq(np.array(xs)).tolist() == [model_requantizer(x, "double", m=1 << 30, s=3, final="floor") for x in xs]
    rq = Requantizer("double", multiplier=200, shift=3, multiplier_bits=8)
    assert rq(np.array(xs)).tolist() == [model_requantizer(x, "double", m=200, s=3, bits=8) for x in xs]


def test_requantizer_narrow_single_mixes_shifted_and_rounded_channels():
    # channel 0: total = 8 - 9 < 1 (a left shift by 1); channel 1: total = 8 - 2 = 6 (rounded)
    rq = Requantizer("single", multiplier=(129, 129), shift=(9, 2), multiplier_bits=8, final_rounding="half_even")
    acc = np.array([[3, 3], [-5, 32], [100000, -96], [INT32_MAX // 300, 160]])
    want = [[ref_wrap32(x * 129 * 2) if c == 0 else ref_wrap32(round_fraction(F(x * 129, 64), "half_even"))
             for c, x in enumerate(row)] for row in acc.tolist()]
    assert rq(acc).tolist() == want
    # exact ties with half_even: 32 * 129 / 64 = 64.5 -> 64; -96 * 129 / 64 = -193.5 -> -194
    assert want[1][1] == 64 and want[2][1] == -194


# --------------------------------------------------------------------------- Requantizer.tflite / from_real
def test_requantizer_tflite_kinds_hand_table():
    rq = Requantizer.tflite(0.5, [0.25, 0.75], 0.5, kind="single")
    assert rq.kind == "single" and rq.multiplier == (1 << 30, 3 << 29) and rq.shift == (-1, 0)
    rq = Requantizer.tflite(0.5, 0.25, 0.5)
    assert rq.kind == "double" and rq.multiplier == (1 << 30,) and rq.shift == (-1,)
    assert rq.multiplier_bits == 31 and rq.final_rounding is None
    # a multiplier above 2^30 saturates only with single rounding
    assert Requantizer.tflite(2.0 ** 20, 2.0 ** 20, 1.0, kind="single").multiplier == (INT32_MAX,)
    # narrow significands: m = round_half_away(q 2^b)
    rq = Requantizer.tflite(1.0, [0.3, 0.75, 1.0 - 2.0 ** -12], 1.0, multiplier_bits=8)
    want = [model_narrow_multiplier(float(np.float32(v)), 8) for v in (0.3, 0.75, 1.0 - 2.0 ** -12)]
    assert list(zip(rq.multiplier, rq.shift)) == want
    assert want[1] == (192, 0) and want[2] == (128, 1)                   # 0.75 * 2^8; a carry into the exponent
    assert rq.multiplier_bits == 8
    rq = Requantizer.tflite(1.0, 0.3, 1.0, kind="single", multiplier_bits=12, final_rounding="floor")
    assert (rq.kind, rq.multiplier_bits, rq.final_rounding.value) == ("single", 12, "floor")
    assert (rq.multiplier[0], rq.shift[0]) == model_narrow_multiplier(float(np.float32(0.3)), 12)
    assert Requantizer.tflite(1.0, 0.3, 1.0, final_rounding="half_even").final_rounding.value == "half_even"
    # float and shift kinds keep their rounding; shift rounds log2 to the nearest integer
    fl = Requantizer.tflite(0.5, 0.25, 0.5, kind="float")
    assert fl.scale == (0.25,) and fl.rounding.value == "half_away"
    assert Requantizer.tflite(0.5, 0.25, 0.5, kind="float", rounding="floor").rounding.value == "floor"
    sh = Requantizer.tflite(1.0, [0.125, 0.375, 3.0, 1.0], 1.0, kind="shift")
    assert sh.shift == (-3, -1, 2, 0) and sh.rounding.value == "half_away"


def test_requantizer_from_real_narrow_multiplier_table():
    reals = [1e-12, 2.0 ** -33, 2.0 ** -32, 0.1, 0.5, 0.9999, 1.0, 3.3, 1000.0]
    for bits in (2, 5, 8, 16, 30):
        rq = Requantizer.from_real(reals, multiplier_bits=bits)
        assert list(zip(rq.multiplier, rq.shift)) == [model_narrow_multiplier(r, bits) for r in reals], bits
    assert model_narrow_multiplier(2.0 ** -33, 8) == (0, 0)                 # e = -32 flushes to zero
    assert model_narrow_multiplier(2.0 ** -32, 8) == (128, -31)
    assert model_narrow_multiplier(0.99, 2) == (2, 1)                       # 0.99 * 4 = 3.96 -> 4: carry
    rq = Requantizer.from_real(0.0, multiplier_bits=8)
    assert (rq.multiplier, rq.shift) == ((0,), (0,))


# --------------------------------------------------------------------------- fused output stage
@pytest.mark.parametrize("kind", ["double", "single"])
@pytest.mark.parametrize("channels", [1, 3, 5])
@pytest.mark.parametrize("acc_bits", [8, 16, 32])
def test_output_codes_fused_tiled_and_tail_rows(kind, channels, acc_bits):
    """clamp(R(acc) + zp) from the big-integer model, on row counts that fill whole tiles of
    1024 // channels rows, leave a tail, or are shorter than one tile, with shifts r = 0..3 and
    channels whose rounding nudges differ."""
    ms = [1 << 30, 1518500250, INT32_MAX, 1395864371, 1 << 30][:channels]
    ss = [-1, 0, -2, -3, 1][:channels] if kind == "double" else [-1, 0, -2, -3, -4][:channels]
    rq = Requantizer(kind, multiplier=tuple(ms), shift=tuple(ss))
    top = 1 << (acc_bits - 1)
    rng = np.random.default_rng(acc_bits * 10 + channels)
    rep = max(1, 1024 // channels) if channels > 1 else 1
    for rows in (1, 7, rep, rep + 3, 2 * rep + 1):
        edge = np.array([-top, -top + 1, -(top >> 1) - 1, -3, -2, -1, 0, 1, 2, 3, top >> 1, top - 1], np.int64)
        vals = np.concatenate([edge, rng.integers(-top, top, size=rows * channels)])[: rows * channels]
        if vals.size < rows * channels:
            vals = np.resize(vals, rows * channels)
        acc = vals.reshape(rows, channels)
        base = [[ref_mbqm(int(x), ms[c], ss[c], kind) for c, x in enumerate(row)] for row in acc.tolist()]
        for zp, lo, hi, dtype in ((-5, -128, 127, np.int8), (100, 0, 255, np.uint8), (0, INT32_MIN, INT32_MAX, np.int32)):
            got = rq._output_codes(acc, acc_bits, zp, lo, hi, dtype)
            assert got.dtype == dtype and got.shape == acc.shape
            want = [[min(max(v + zp, lo), hi) for v in row] for row in base]
            np.testing.assert_array_equal(got, np.array(want, dtype=np.int64).astype(dtype), err_msg=f"rows={rows}")


def test_output_codes_fused_rounding_nudge_on_exact_ties():
    """Right shift r >= 1 in 'double': RoundingDivideByPOT sends negative ties away from zero (the
    nudge), positive ties up; every x in a full 8-bit range, channels with r = 0 (no nudge) beside r >= 1."""
    rq = Requantizer("double", multiplier=(1 << 30, 1 << 30, 1 << 30, 1 << 30), shift=(0, -1, -2, -3))
    acc = np.repeat(np.arange(-128, 128, dtype=np.int64), 4).reshape(-1, 4)
    got = rq._output_codes(acc, 8, 3, -1000, 1000, np.int32)
    # SRDHM(x, 2^30) = round_half_up(x / 2); then / 2^r half away
    want = [[round_fraction(F(math.floor(F(x, 2) + F(1, 2)), 2 ** c), "half_away") + 3 for c, x in enumerate(row)]
            for row in acc.tolist()]
    np.testing.assert_array_equal(got, want)
    assert got[acc[:, 1] == -3][0, 1] == -1 + 3             # SRDHM(-3) = -1; -1 / 2 = -0.5 -> -1 (away)


def test_output_codes_general_path_equals_the_model():
    """Kinds and widths the fused stage refuses (shift, float, final rounding, 33+-bit accumulators,
    a channel count that does not match the last axis) take the general path."""
    acc = np.array([[-70000, 5, 70000], [1 << 20, -(1 << 20), 33]], np.int64)
    cases = [
        Requantizer("shift", shift=(-4, -2, 0), rounding="half_even"),
        Requantizer("float", scale=(0.01, 0.5, 0.002)),
        Requantizer("double", multiplier=(1 << 30,) * 3, shift=(-4, -2, 0), final_rounding="floor"),
        Requantizer("double", multiplier=(200,) * 3, shift=(-4, -2, 0), multiplier_bits=8),
        Requantizer("single", multiplier=(1 << 30,), shift=(-8,)),
    ]
    for rq in cases:
        for acc_bits in (24, 32):
            got = rq._output_codes(acc, acc_bits, -3, -128, 127, np.int8)
            want = [[min(max(_model_for(rq, c, x) - 3, -128), 127) for c, x in enumerate(row)] for row in acc.tolist()]
            np.testing.assert_array_equal(got, want, err_msg=repr(rq))
    # a 40-bit accumulator: never fused, still exact for 'shift'
    rq = Requantizer("shift", shift=(-20,))
    big = np.array([[(1 << 39) - 1, -(1 << 39)]], np.int64)
    assert rq._output_codes(big, 40, 0, INT32_MIN, INT32_MAX, np.int64).tolist() == [[1 << 19, -(1 << 19)]]
    # a 0-d accumulator goes through __call__
    one = Requantizer("double", multiplier=1 << 30, shift=-1)
    assert int(one._output_codes(np.int64(-9), 8, 1, -128, 127, np.int8)) == ref_mbqm(-9, 1 << 30, -1, "double") + 1


def test_output_codes_channel_count_mismatch_takes_the_general_path():
    # 3 per-channel parameters against a last axis of 3, stored as (2, 3): fused; as (3, 2) with
    # channels on the last axis it is an error from the general path (the shape does not broadcast)
    rq = Requantizer("double", multiplier=(1 << 30, 1 << 29 | 1 << 30, INT32_MAX), shift=(-1, -2, -3))
    acc = np.arange(6, dtype=np.int64).reshape(3, 2) * 1000
    with pytest.raises(ValueError, match="per channel"):
        rq._output_codes(acc, 16, 0, -128, 127, np.int8)


# --------------------------------------------------------------------------- second round (mutmut survivors)
def test_result_dtypes_are_int64():
    assert requantize_shift(np.array([5, -5], np.int8), 1).dtype == np.int64
    assert requantize_shift(np.array([[5, -5]]), [1, 2]).dtype == np.int64
    assert requantize_float(np.array([5, -5], np.int16), 0.5).dtype == np.int64
    assert multiply_by_quantized_multiplier(np.array([5], np.int32), 1 << 30, 0).dtype == np.int64
    assert Requantizer("single", multiplier=129, shift=9, multiplier_bits=8)(np.array([3])).dtype == np.int64


def test_scale_checks_hold_under_numpy_raise_mode():
    # the float32 rounding of a scale may overflow or underflow; that is a ValueError of ours,
    # not a numpy FloatingPointError, whatever np.seterr says
    with np.errstate(all="raise"):
        for bad in (1e39, 1e-50):
            with pytest.raises(ValueError, match="positive and finite"):
                activation_range("relu", bad, 0)
            with pytest.raises(ValueError, match="positive and finite"):
                Requantizer.tflite(bad, 1.0, 1.0)
        assert activation_range("relu6", 0.5, 0) == (0, 12)


def test_from_real_defaults():
    rq = Requantizer.from_real(0.3)
    assert (rq.kind, rq.multiplier_bits, rq.final_rounding) == ("double", 31, None)
    assert (rq.multiplier[0], rq.shift[0]) == ref_quantize_multiplier(0.3)
    assert Requantizer.from_real(0.3, kind="float").rounding.value == "half_away"
    sh = Requantizer.from_real([0.125, 3.0], kind="shift")
    assert sh.shift == (-3, 2) and sh.rounding.value == "half_away"
    assert sh(np.array([[12, 1], [-12, -1]])).tolist() == [[2, 4], [-2, -4]]      # 1.5 -> 2, -1.5 -> -2 (away)
    with pytest.raises(ValueError, match="kind must be one of"):
        Requantizer.from_real(0.3, kind="triple")


def test_single_rounding_accepts_a_zero_multiplier():
    # a real multiplier below 2^-32 quantizes to (0, 0); single rounding must accept m = 0
    assert quantize_multiplier(1e-12, single_rounding=True) == (0, 0)
    rq = Requantizer("single", multiplier=(0, 1 << 30), shift=(0, -1))
    assert rq(np.array([[123456, 4], [-7, -4]])).tolist() == [[0, 1], [0, -1]]     # 4 / 4 = 1; -4 / 4 = -1
    assert Requantizer.tflite(1e-6, 1e-6, 1.0, kind="single").multiplier == (0,)


def test_final_rounded_path_accepts_the_whole_int32_range():
    rq = Requantizer("double", multiplier=(1 << 30, INT32_MIN), shift=(-1, 0), final_rounding="floor")
    acc = np.array([[INT32_MIN, INT32_MIN], [INT32_MAX, INT32_MAX], [-3, 5]])
    want = per_element(acc, 1, lambda v, c: model_requantizer(v, "double", m=(1 << 30, INT32_MIN)[c], s=(-1, 0)[c],
                                                              final="floor"))
    np.testing.assert_array_equal(rq(acc), want)
    assert rq(acc)[0, 1] == INT32_MAX                              # SRDHM(-2^31, -2^31) saturates
    rq = Requantizer("single", multiplier=100, shift=3, multiplier_bits=8, final_rounding="half_even")
    assert rq(np.array([INT32_MIN])).tolist() == [model_requantizer(INT32_MIN, "single", m=100, s=3, final="half_even",
                                                                    bits=8)]


def test_narrow_single_total_of_one_rounds_by_two():
    # shift = b - 1: the product is divided by 2^1 (rounded), not shifted; beside a channel with
    # shift = b (a plain product) and one with shift = b + 1 (a left shift)
    for final in (None, "half_even", "floor"):
        rq = Requantizer("single", multiplier=(129, 129, 129), shift=(7, 8, 9), multiplier_bits=8,
                         final_rounding=final)
        acc = np.array([[1, 1, 1], [-1, -1, -1], [3, 3, 3], [-5, 7, -9]])
        want = per_element(acc, 1, lambda v, c: model_requantizer(v, "single", m=129, s=(7, 8, 9)[c], final=final,
                                                                  bits=8))
        np.testing.assert_array_equal(rq(acc), want, err_msg=str(final))
        assert want[0].tolist() == [round_fraction(F(129, 2), final or "half_up"), 129, 258]
        only = Requantizer("single", multiplier=129, shift=7, multiplier_bits=8, final_rounding=final)
        assert only(np.array([1, -1, 3])).tolist() == [round_fraction(F(v * 129, 2), final or "half_up")
                                                      for v in (1, -1, 3)]


@pytest.mark.parametrize("extra", [dict(final_rounding="floor"), dict(multiplier_bits=16)])
def test_final_rounded_path_argument_errors(extra):
    m = (1 << 14, 3 << 13, 1 << 15) if extra.get("multiplier_bits") else (1 << 30, 3 << 29, INT32_MAX)
    rq = Requantizer("double", multiplier=m, shift=(-1, -2, -3), **extra)
    _raises(lambda: rq(np.array([1.5, 2.0])), TypeError, r"acc must be an integer array, got dtype float64")
    _raises(lambda: rq(np.zeros((4, 2), np.int64)), ValueError,
            r"multiplier must be a scalar or have one value per channel \(2 along axis 1\); got shape \(3,\)")
    _raises(lambda: rq(np.int64(5)), ValueError, r"multiplier: a scalar accumulator takes one value, got shape \(3,\)")
    _raises(lambda: rq(np.zeros((3, 2), np.int64), axis=2), ValueError,
            r"axis 2 is out of range for an array of 2 dimensions")
    acc = np.arange(-12, 12, dtype=np.int64).reshape(3, 8) * 977
    np.testing.assert_array_equal(rq(acc, axis=0), per_element(acc, 0, lambda v, c: model_requantizer(
        v, "double", m=m[c], s=(-1, -2, -3)[c], final=extra.get("final_rounding"), bits=extra.get("multiplier_bits", 31))))


def test_output_codes_three_dimensional_accumulators():
    acc = (np.arange(-48, 48, dtype=np.int64) * 12345).reshape(2, 12, 4)
    for rq in (Requantizer("double", multiplier=(1 << 30, 1518500250, INT32_MAX, 1395864371), shift=(-1, 0, -9, -4)),
               Requantizer("single", multiplier=(1 << 30, 1518500250, INT32_MAX, 1395864371), shift=(-1, 0, -9, -4)),
               Requantizer("shift", shift=(-1, 0, -9, -4), rounding="half_even"),
               Requantizer("float", scale=(0.5, 1.0, 0.002, 0.0625))):
        got = rq._output_codes(acc, 24, 2, -128, 127, np.int8)
        want = per_element(acc, 2, lambda v, c: min(max(_model_for(rq, c, v) + 2, -128), 127))
        np.testing.assert_array_equal(got, want, err_msg=rq.kind)
    # channels must be the last axis: 12 parameters against a last axis of 4 is an error, also when
    # the second axis happens to have 12 entries
    rq = Requantizer("double", multiplier=(1 << 30,) * 12, shift=(-1,) * 12)
    with pytest.raises(ValueError, match="per channel"):
        rq._output_codes(acc, 24, 0, -128, 127, np.int8)


@pytest.mark.parametrize("kind, kw", [("shift", {"shift": (3,)}), ("float", {"scale": (0.25,)})])
@pytest.mark.parametrize("extra", [{"final_rounding": "half_even"}, {"multiplier_bits": 16}])
def test_shift_and_float_requantizers_refuse_multiplier_knobs(kind, kw, extra):
    """They would be ignored (found by mutation testing): a clear error instead."""
    with pytest.raises(ValueError, match="no fixed-point multiplier"):
        Requantizer(kind, **kw, **extra)
