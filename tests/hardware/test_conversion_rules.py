"""The scale, zero-point and code rules of :mod:`fxpsim.hardware.conversion`: ``quantize_weights``,
``activation_params``, ``layer_requantizer`` and their helpers (code ranges and dtypes, bias codes, the
product shift of fixed-point targets, the TFLite accumulator-width check).

Expected values come from a model written here from the docstrings' formulas (Python floats for the scale
arithmetic, float32 rounding by numpy, exact rationals and ``reference.round_fraction`` for every rounding,
an exact power-of-two ceiling from ``math.frexp``) or from hand tables whose numbers are worked out in the
comments: ties (``w / s`` exactly ``k + 1/2``, a zero point with ``lo / s = -4.5``), register bounds,
dtypes. Nothing here takes an expected value from fxpsim itself.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import code_range, ref_quantize_multiplier, round_fraction

from fxpsim.hardware import HardwareConfig
from fxpsim.hardware import conversion as conv
from fxpsim.hardware.config import ConfigError
from fxpsim.hardware.conversion import (
    activation_params,
    layer_requantizer,
    quantize_weights,
)

MODES = ("half_up", "half_toward_zero", "half_down", "half_away", "half_even", "floor", "toward_zero", "ceil")
SCHEMES = ("tflite-double", "tflite-single", "shift", "float")


# ------------------------------------------------------------------------------------------ independent model
def f32(x: float) -> float:
    """``x`` rounded to float32 (how scales are stored)."""
    return float(np.float32(x))


def pow2_ceil(x: float) -> float:
    """The smallest power of two >= ``x`` (> 0), exactly: ``x = m 2^e`` with ``1/2 <= m < 1``."""
    m, e = math.frexp(x)
    return x if m == 0.5 else math.ldexp(1.0, e)


def uses_shift(cfg: HardwareConfig) -> bool:
    """Whether any layer of the target requantizes by shifts (conv layers or dense layers)."""
    return "shift" in (cfg.requantization, cfg.dense_requantization)


def clamp(v: int, lo: int, hi: int) -> int:
    return min(max(v, lo), hi)


def model_weights(w: np.ndarray, cfg: HardwareConfig):
    """``quantize_weights`` by its docstring: codes (nested lists), scales, zero points."""
    bits, signed, fmt = cfg.weight_bits, cfg.weight_signed, cfg.weight_format
    qmin, qmax = code_range(bits, signed)
    if signed and cfg.weight_narrow_range:
        qmin = -qmax
    rows = [[float(v) for v in row.ravel()] for row in w]
    if cfg.weight_scales == "per-tensor":
        every = [v for row in rows for v in row]
        ranges = [(min(every), max(every))] * len(rows)
    else:
        ranges = [(min(row), max(row)) for row in rows]
    scales, zps, codes = [], [], []
    for row, (wmin, wmax) in zip(rows, ranges):
        if fmt is not None:
            s = 2.0 ** -fmt.frac
        elif signed:
            s = max(-wmin, wmax, 1e-12) / qmax
        else:
            lo, hi = min(wmin, 0.0), max(wmax, 0.0)
            s = max(hi - lo, 1e-12) / (qmax - qmin)
        if fmt is None and uses_shift(cfg):
            s = pow2_ceil(s)
        s = f32(s)
        z = 0
        if fmt is None and not signed:     # the zero point always rounds half away (TFLite's converter)
            z = clamp(qmin - round_fraction(Fraction(min(wmin, 0.0) / s), "half_away"), qmin, qmax)
        scales.append(s)
        zps.append(z)
        codes.append([clamp(round_fraction(Fraction(v / s), cfg.rounding.value) + z, qmin, qmax) for v in row])
    return codes, scales, zps


def model_activation(lo: float, hi: float, cfg: HardwareConfig):
    """``activation_params`` by its docstring."""
    qmin, qmax = code_range(cfg.activation_bits, cfg.activation_signed)
    if cfg.activation_format is not None:
        return 2.0 ** -cfg.activation_format.frac, 0
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo < 1e-12:
        hi = lo + 1.0
    if cfg.activation_symmetric:
        top = max(-lo, hi) if cfg.activation_signed else hi
        s = (top if top >= 1e-12 else 1.0) / qmax       # unsigned, nothing above 0: all codes 0, scale 1/qmax
        return f32(pow2_ceil(s) if uses_shift(cfg) else s), 0
    s = (hi - lo) / (qmax - qmin)
    s = f32(pow2_ceil(s) if uses_shift(cfg) else s)
    return s, clamp(qmin - round_fraction(Fraction(lo / s), "half_away"), qmin, qmax)


def narrow_multiplier(real: float, bits: int) -> tuple[int, int]:
    """``M ~ m 2^(e - bits)`` with ``2^(bits-1) <= m < 2^bits`` (m rounded half away), exactly."""
    r = Fraction(real)
    e = 0
    while r >= Fraction(2) ** e:
        e += 1
    while r < Fraction(2) ** (e - 1):
        e -= 1
    m = round_fraction(r * Fraction(2) ** (bits - e), "half_away")
    if m == 1 << bits:
        m, e = 1 << (bits - 1), e + 1
    return (0, 0) if e < -31 else (m, e)


def nearest_exponent(real: float) -> int:
    """The integer nearest to ``log2(real)``: with ``real = q 2^e`` (``1/2 <= q < 1``), ``e - 1`` when
    ``q < sqrt(1/2)``, else ``e`` (compared exactly as ``q^2 < 1/2``)."""
    q, e = math.frexp(real)
    return e - 1 if Fraction(q) ** 2 < Fraction(1, 2) else e


# ------------------------------------------------------------------------------------------ strategies
@st.composite
def dyadic_weights(draw, max_out=4):
    """Weights ``n 2^-e`` (|n| < 2^20): exact ranges, and scales that land on (or next to) powers of two,
    where ``_pow2_ceil`` and the zero-point ties are decided."""
    n_out = draw(st.integers(1, max_out))
    inner = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    e = draw(st.integers(0, 24))
    size = n_out * int(np.prod(inner))
    ints = draw(st.lists(st.integers(-(1 << 20), 1 << 20), min_size=size, max_size=size))
    return (np.array(ints, dtype=np.float64) * 2.0 ** -e).reshape((n_out,) + inner)


def dyadic(lo=-(1 << 20), hi=1 << 20):
    return st.builds(lambda n, e: n * 2.0 ** -e, st.integers(lo, hi), st.integers(0, 24))


# ------------------------------------------------------------------------------------------ _code_range/_code_dtype
@pytest.mark.parametrize("bits, signed, expected", [
    (2, True, (-2, 1)), (8, True, (-128, 127)), (9, True, (-256, 255)), (16, True, (-32768, 32767)),
    (2, False, (0, 3)), (8, False, (0, 255)), (9, False, (0, 511)), (16, False, (0, 65535)),
])
def test_code_range_table(bits, signed, expected):
    assert conv._code_range(bits, signed) == expected


@pytest.mark.parametrize("bits, signed, expected", [
    (2, True, np.int8), (7, True, np.int8), (8, True, np.int8), (9, True, np.int16), (16, True, np.int16),
    (2, False, np.uint8), (7, False, np.uint8), (8, False, np.uint8), (9, False, np.uint16),
    (16, False, np.uint16),
])
def test_code_dtype_table(bits, signed, expected):
    """Codes of up to 8 bits in one byte, 9..16 in two; unsigned codes in unsigned types (uint8 holds 255)."""
    assert conv._code_dtype(bits, signed) is expected


@pytest.mark.parametrize("x, expected", [
    (1.0, 1.0), (0.75, 1.0), (0.5, 0.5), (3.0 / 127, 2.0 ** -5), (1.0 / 127, 2.0 ** -6), (5.0, 8.0),
    (1024.0, 1024.0), (1025.0, 2048.0),
])
def test_pow2_ceil_table(x, expected):
    got = conv._pow2_ceil(np.array([x]))
    assert got.tolist() == [expected]


def test_pow2_ceil_is_a_ceiling_one_ulp_above_a_power_of_two():
    """A float log2 rounds log2(2^k (1 + 2^-52)) to k; the ceiling must still be 2^(k+1)."""
    ulp_above = [16.0 * (1 + 2.0 ** -52), 2.0 ** -20 * (1 + 2.0 ** -52), 2.0 ** 40 * (1 + 2.0 ** -52)]
    assert conv._pow2_ceil(np.array(ulp_above)).tolist() == [32.0, 2.0 ** -19, 2.0 ** 41]
    below = [16.0 * (1 - 2.0 ** -53), 0.75, 1.0, 2.0 ** -30, 3.0]
    assert conv._pow2_ceil(np.array(below)).tolist() == [16.0, 1.0, 1.0, 2.0 ** -30, 4.0]


# ------------------------------------------------------------------------------------------ quantize_weights
def _check_weights(w, cfg):
    codes, scale, zp = quantize_weights(w, cfg)
    exp_codes, exp_scale, exp_zp = model_weights(w, cfg)
    assert scale.tolist() == exp_scale
    assert zp.tolist() == exp_zp
    assert codes.reshape(w.shape[0], -1).tolist() == exp_codes
    assert codes.shape == w.shape
    # integer codes and zero points (the graph stores them in integer tensors), float64 scales
    assert np.issubdtype(codes.dtype, np.integer) and np.issubdtype(zp.dtype, np.integer)
    assert scale.dtype == np.float64


@given(w=dyadic_weights(), bits=st.integers(2, 16), signed=st.booleans(), narrow=st.booleans(),
       scales=st.sampled_from(["per-channel", "per-tensor"]), scheme=st.sampled_from(SCHEMES),
       dense=st.sampled_from([None] + list(SCHEMES)), rounding=st.sampled_from(MODES))
def test_quantize_weights_matches_model(w, bits, signed, narrow, scales, scheme, dense, rounding):
    cfg = HardwareConfig(weight_bits=bits, weight_signed=signed, weight_narrow_range=narrow, weight_scales=scales,
                         requantization=scheme, dense_requantization=dense, rounding=rounding)
    _check_weights(w, cfg)


@given(w=dyadic_weights(), ibits=st.integers(0, 6), frac=st.integers(0, 9), signed=st.booleans(),
       scheme=st.sampled_from(SCHEMES), rounding=st.sampled_from(MODES))
def test_quantize_weights_fixed_format_matches_model(w, ibits, frac, signed, scheme, rounding):
    fmt = f"{'' if signed else 'U'}Q{ibits}.{frac}"
    if ibits + frac + signed < 2:
        fmt = f"{'' if signed else 'U'}Q{ibits}.{frac + 2}"
    cfg = HardwareConfig(weight_format=fmt, requantization=scheme, rounding=rounding)
    _check_weights(w, cfg)


# A signed 8-bit narrow-range tensor with max |w| = 127, so s = 1 and w / s = w: ties at +-2.5 and +-0.5.
SIGNED_TIES = [127.0, -2.5, 2.5, -0.5, 0.5, -127.0]


@pytest.mark.parametrize("rounding, expected", [
    ("half_away", [127, -3, 3, -1, 1, -127]),
    ("half_up", [127, -2, 3, 0, 1, -127]),
    ("half_even", [127, -2, 2, 0, 0, -127]),
    ("floor", [127, -3, 2, -1, 0, -127]),
])
def test_quantize_weights_signed_ties(rounding, expected):
    cfg = HardwareConfig(weight_bits=8, weight_scales="per-tensor", rounding=rounding)
    codes, scale, zp = quantize_weights(np.array([SIGNED_TIES]), cfg)
    assert codes.tolist() == [expected]
    assert scale.tolist() == [1.0]
    assert zp.tolist() == [0]


# Unsigned 8-bit, per channel (255 steps), every scale a power of two so w / s is exact:
#  row 0: [lo, hi] = [-4.5/64, 250.5/64], s = (255/64)/255 = 1/64, lo/s = -4.5 -> z = 0 - round_half_away(-4.5) = 5
#         w/s = -4.5, 250.5, 0, 64, -3.2
#  row 1: all positive: [lo, hi] = [0, 255/128] (the range is widened to hold 0), s = 1/128, z = 0
#  row 2: all negative: [lo, hi] = [-255/128, 0], s = 1/128, z = 0 - (-255) = 255
#  row 3: range 255/512 < 1: s = 1/512, z = 0; w/s = 0, 255, 128, 64, 0.5
UNSIGNED_W = [[-0.0703125, 3.9140625, 0.0, 1.0, -0.05],
              [0.5, 1.9921875, 1.0, 0.75, 1.5],
              [-0.5, -1.9921875, -1.0, -0.25, -1.5],
              [0.0, 0.498046875, 0.25, 0.125, 0.0009765625]]


@pytest.mark.parametrize("rounding, row0, row3", [
    ("half_away", [0, 255, 5, 69, 2], [0, 255, 128, 64, 1]),     # -4.5 -> -5 (+5 = 0); 250.5 -> 251, clipped
    ("half_up", [1, 255, 5, 69, 2], [0, 255, 128, 64, 1]),
    ("half_even", [1, 255, 5, 69, 2], [0, 255, 128, 64, 0]),     # 250.5 -> 250 (+5 = 255)
    ("floor", [0, 255, 5, 69, 1], [0, 255, 128, 64, 0]),         # -3.2 -> -4 (+5 = 1)
])
def test_quantize_weights_unsigned_table(rounding, row0, row3):
    """The narrow-range flag (on by default) is for signed codes only: unsigned codes keep 0..255."""
    cfg = HardwareConfig(weight_bits=8, weight_signed=False, weight_narrow_range=True, rounding=rounding)
    codes, scale, zp = quantize_weights(np.array(UNSIGNED_W), cfg)
    assert scale.tolist() == [1 / 64, 1 / 128, 1 / 128, 1 / 512]
    assert zp.tolist() == [5, 0, 255, 0]
    assert np.issubdtype(codes.dtype, np.integer) and np.issubdtype(zp.dtype, np.integer)
    assert codes.tolist() == [row0, [64, 255, 128, 96, 192], [191, 0, 127, 223, 63], row3]


@pytest.mark.parametrize("rounding", ["half_away", "half_up", "half_even", "floor"])
def test_quantize_weights_zero_point_rounds_half_away_whatever_the_rounding(rounding):
    # per tensor over row 0 of the table above, 4-bit unsigned (15 steps): [lo, hi] = [-4.5/4, 10.5/4],
    # s = (15/4)/15 = 1/4, lo/s = -4.5 -> z = 5 in every rounding mode
    cfg = HardwareConfig(weight_bits=4, weight_signed=False, weight_scales="per-tensor", rounding=rounding)
    codes, scale, zp = quantize_weights(np.array([[-1.125, 2.625], [0.0, 1.0]]), cfg)
    assert scale.tolist() == [0.25, 0.25]
    assert zp.tolist() == [5, 5]
    expected = {"half_away": [[0, 15], [5, 9]], "half_up": [[1, 15], [5, 9]],     # 10.5 + 5 clips to 15
                "half_even": [[1, 15], [5, 9]], "floor": [[0, 15], [5, 9]]}[rounding]
    assert codes.tolist() == expected


def test_quantize_weights_per_tensor_one_scale_for_all_channels():
    # max |w| over the tensor = 127/8 -> s = 1/8 for both rows (per channel: row 1 would get 1/127)
    w = np.array([[15.875, -1.0], [1.0, -0.5]])
    codes, scale, zp = quantize_weights(w, HardwareConfig(weight_bits=8, weight_scales="per-tensor"))
    assert scale.tolist() == [0.125, 0.125]
    assert zp.tolist() == [0, 0]
    assert codes.tolist() == [[127, -8], [8, -4]]
    codes, scale, _ = quantize_weights(w, HardwareConfig(weight_bits=8, weight_scales="per-channel"))
    assert scale.tolist() == [0.125, f32(1.0 / 127)]
    assert codes.tolist() == [[127, -8], [127, -64]]      # -0.5 * 127 = -63.5 -> -64 (half away)


def test_quantize_weights_shift_rounds_scales_up_to_powers_of_two():
    # s = 0.3/127 = 0.00236 -> 2^-8 = 0.00390625; codes 0.3 * 256 = 76.8 -> 77, -0.2 * 256 = -51.2 -> -51
    w = np.array([[0.3, -0.2]])
    for cfg in (HardwareConfig(requantization="shift"),
                HardwareConfig(requantization="tflite-double", dense_requantization="shift")):
        codes, scale, zp = quantize_weights(w, cfg)
        assert scale.tolist() == [2.0 ** -8]
        assert zp.tolist() == [0]
        assert codes.tolist() == [[77, -51]]
    codes, scale, _ = quantize_weights(w, HardwareConfig(requantization="float"))
    assert scale.tolist() == [f32(0.3 / 127)]
    assert codes.tolist() == [[127, -85]]                  # -0.2 / (0.3/127) = -84.67 -> -85


@pytest.mark.parametrize("fmt, rounding, expected", [
    # Q1.7: 9-bit signed codes -256..255 (no narrow range with a fixed format), lsb 1/128;
    # w * 128 = 384, -384, 64, -0.5, 254.72
    ("Q1.7", "half_away", [255, -256, 64, -1, 255]),
    ("Q1.7", "half_even", [255, -256, 64, 0, 255]),
    # UQ0.8: 8-bit unsigned 0..255, lsb 1/256: w * 256 = 768, -768, 128, -1, 509.44
    ("UQ0.8", "half_away", [255, 0, 128, 0, 255]),
])
def test_quantize_weights_fixed_format_saturates_to_the_register(fmt, rounding, expected):
    cfg = HardwareConfig(weight_format=fmt, rounding=rounding, requantization="shift")
    codes, scale, zp = quantize_weights(np.array([[3.0, -3.0, 0.5, -0.00390625, 1.99]]), cfg)
    assert codes.tolist() == [expected]
    assert scale.tolist() == [2.0 ** -int(fmt.split(".")[1])]
    assert zp.tolist() == [0]


# ------------------------------------------------------------------------------------------ activation_params
@given(lo=dyadic(), hi=dyadic(), bits=st.integers(2, 16), signed=st.booleans(), symmetric=st.booleans(),
       scheme=st.sampled_from(SCHEMES), dense=st.sampled_from([None, "shift"]), rounding=st.sampled_from(MODES))
def test_activation_params_matches_model(lo, hi, bits, signed, symmetric, scheme, dense, rounding):
    cfg = HardwareConfig(activation_bits=bits, activation_signed=signed, activation_symmetric=symmetric,
                         requantization=scheme, dense_requantization=dense, rounding=rounding)
    assert activation_params(lo, hi, cfg) == model_activation(lo, hi, cfg)


@given(lo=st.floats(-1e6, 1e6), hi=st.floats(-1e6, 1e6), bits=st.integers(2, 16), signed=st.booleans(),
       symmetric=st.booleans())
def test_activation_params_float_ranges_match_model(lo, hi, bits, signed, symmetric):
    cfg = HardwareConfig(activation_bits=bits, activation_signed=signed, activation_symmetric=symmetric,
                         requantization="float")
    assert activation_params(lo, hi, cfg) == model_activation(lo, hi, cfg)


@pytest.mark.parametrize("rounding", ["half_away", "half_up", "half_even"])
def test_activation_zero_point_tie_rounds_half_away(rounding):
    # [lo, hi] = [-4.5/64, 250.5/64]: s = (255/64)/255 = 1/64, lo/s = -4.5 -> z = -128 - (-5) = -123
    # (half up or half even would give -4 -> -124)
    assert activation_params(-0.0703125, 3.9140625, HardwareConfig(rounding=rounding)) == (1 / 64, -123)


@pytest.mark.parametrize("lo, hi, expected", [
    (0.5, 3.984375, (1 / 64, -128)),         # lo > 0 widens to 0: s = 3.984375/255 = 1/64, z = -128 - 0
    (-3.984375, -0.5, (1 / 64, 127)),        # hi < 0 widens to 0: lo/s = -255, z = -128 + 255
    (0.0, 0.0, (f32(1 / 255), -128)),        # a constant tensor: [0, 1]
    (-2.0, -2.0, (f32(2 / 255), 127)),       # [-2, 0]: float32(2/255) rounds up, lo/s = -254.99998 -> -255
    (-1e-12, 0.0, (f32(1e-12 / 255), 127)),  # a range of exactly 1e-12 is kept: lo/s = -255.0000034 -> -255
    (-0.25, 0.25, (f32(0.5 / 255), -1)),     # a range below 1 is kept: float32(0.5/255) rounds up,
])                                           # lo/s = -127.4999925 -> -127, z = -128 + 127
def test_activation_params_table(lo, hi, expected):
    assert activation_params(lo, hi, HardwareConfig()) == expected


@pytest.mark.parametrize("signed, scheme, expected", [
    (True, "float", (f32(3 / 127), 0)),      # max(|lo|, hi) = 3 over 127
    (False, "float", (f32(1 / 255), 0)),     # unsigned: the negatives clip to 0, hi = 1 over 255
    (True, "shift", (2.0 ** -5, 0)),         # 3/127 = 0.0236 -> 1/32
    (False, "shift", (2.0 ** -7, 0)),        # 1/255 = 0.00392 -> 1/128
])
def test_activation_params_symmetric_table(signed, scheme, expected):
    cfg = HardwareConfig(activation_signed=signed, activation_symmetric=True, requantization=scheme)
    assert activation_params(-3.0, 1.0, cfg) == expected


@pytest.mark.parametrize("scheme, dense, expected", [
    ("shift", None, (2.0 ** -5, -96)),       # s = 4/255 = 0.0157 -> 1/32, lo/s = -32: z = -128 + 32
    ("tflite-double", "shift", (2.0 ** -5, -96)),   # dense layers by shifts: activations on their grid too
    ("tflite-double", None, (f32(4 / 255), -64)),   # lo/s = -63.75 -> -64: z = -128 + 64
])
def test_activation_params_asymmetric_shift_table(scheme, dense, expected):
    cfg = HardwareConfig(requantization=scheme, dense_requantization=dense)
    assert activation_params(-1.0, 3.0, cfg) == expected


def test_activation_params_fixed_format():
    cfg = HardwareConfig(activation_format="Q2.5", requantization="shift")
    assert activation_params(-100.0, 3.0, cfg) == (2.0 ** -5, 0)


def test_activation_params_unsigned_symmetric_all_negative_range_has_a_positive_scale():
    """Unsigned symmetric codes of a range with nothing above 0 (every code is 0): scale 1/255, not 0.0
    (which no requantizer accepts; found by mutation testing)."""
    cfg = HardwareConfig(activation_signed=False, activation_symmetric=True, requantization="float")
    assert activation_params(-1.0, 0.0, cfg) == (f32(1 / 255), 0)
    assert activation_params(-1.0, -0.5, cfg) == (f32(1 / 255), 0)


# ------------------------------------------------------------------------------------------ _bias_codes
@pytest.mark.parametrize("rounding, expected", [
    # b / s_acc = 2.5, -2.5, 300, -300, 1.5 (0.75 / 0.5) into 8 bits: 300 and -300 saturate
    ("half_away", [3, -3, 127, -128, 2]),
    ("half_up", [3, -2, 127, -128, 2]),
    ("half_even", [2, -2, 127, -128, 2]),
    ("floor", [2, -3, 127, -128, 1]),
])
def test_bias_codes_round_and_saturate(rounding, expected):
    cfg = HardwareConfig(accumulator_bits=16, bias_bits=8, rounding=rounding)
    codes, clipped = conv._bias_codes(np.array([2.5, -2.5, 300.0, -300.0, 0.75]),
                                      np.array([1.0, 1.0, 1.0, 1.0, 0.5]), cfg)
    assert codes.tolist() == expected
    assert clipped == 2


def test_bias_codes_shift_divides_by_two_to_the_shift():
    # b / (s_acc 2^2): 10/4 = 2.5 -> 3, -10/4 -> -3, 6/4 = 1.5 -> 2, 1000/4 = 250 -> 127 (saturated)
    cfg = HardwareConfig(accumulator_bits=16, bias_bits=8, bias_shift=2)
    codes, clipped = conv._bias_codes(np.array([10.0, -10.0, 6.0, 1000.0]), np.ones(4), cfg)
    assert codes.tolist() == [3, -3, 2, 127]
    assert clipped == 1
    codes, clipped = conv._bias_codes(np.array([10.0, -10.0, 6.0]), np.ones(3), cfg)
    assert (codes.tolist(), clipped) == ([3, -3, 2], 0)


@given(b=st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=6), acc_e=st.integers(-12, 4),
       bits=st.integers(2, 32), shift=st.integers(0, 8), rounding=st.sampled_from(MODES))
def test_bias_codes_match_model(b, acc_e, bits, shift, rounding):
    acc = 2.0 ** acc_e
    cfg = HardwareConfig(accumulator_bits=32, bias_bits=bits, bias_shift=shift, rounding=rounding)
    codes, clipped = conv._bias_codes(np.array(b), np.full(len(b), acc), cfg)
    lo, hi = code_range(bits, True)
    wide = [round_fraction(Fraction(v) / (Fraction(acc) * 2 ** shift), rounding) for v in b]
    assert codes.tolist() == [clamp(v, lo, hi) for v in wide]
    assert clipped == sum(not lo <= v <= hi for v in wide)


@pytest.mark.parametrize("bias_bits, bias, expected", [   # (a 62-bit intermediate once hid these)
    (62, 1e30, (2 ** 61 - 1, 1)),            # saturated, so counted
    (62, -1e30, (-2 ** 61, 1)),
    (64, 3.0 * 2 ** 60, (3 * 2 ** 60, 0)),   # 3.46e18 fits a 64-bit register
    (64, 1e30, (2 ** 63 - 1, 1)),
])
def test_bias_codes_wide_registers(bias_bits, bias, expected):
    cfg = HardwareConfig(accumulator_bits=64, bias_bits=bias_bits, requantization="float")
    codes, clipped = conv._bias_codes(np.array([bias]), np.array([1.0]), cfg)
    assert (int(codes[0]), clipped) == expected


# ------------------------------------------------------------------------------------------ _check_tflite_width
TFLITE_WIDTH = ("accumulator.bits = {bits}: the TFLite requantization schemes use 32-bit gemmlowp arithmetic; "
                "allowed: 2..32, or requantization.scheme 'float'/'shift'")


@pytest.mark.parametrize("scheme, dense, bits, raises", [
    ("tflite-double", None, 33, True), ("tflite-double", None, 40, True), ("tflite-single", None, 64, True),
    ("float", "tflite-single", 40, True), ("shift", "tflite-double", 33, True),
    ("tflite-double", None, 32, False), ("tflite-single", None, 16, False),
    ("float", None, 64, False), ("shift", None, 40, False), ("float", "shift", 48, False),
])
def test_check_tflite_width(scheme, dense, bits, raises):
    cfg = HardwareConfig(accumulator_bits=bits, requantization=scheme, dense_requantization=dense)
    if raises:
        with pytest.raises(ConfigError, match="^" + re.escape(TFLITE_WIDTH.format(bits=bits)) + "$"):
            conv._check_tflite_width(cfg)
        with pytest.raises(ConfigError, match="^" + re.escape("node 'fc': " + TFLITE_WIDTH.format(bits=bits)) + "$"):
            conv._check_tflite_width(cfg, "node 'fc': ")
    else:
        assert conv._check_tflite_width(cfg) is None


# ------------------------------------------------------------------------------------------ _product_shift
@pytest.mark.parametrize("wfmt, afmt, acc_frac, expected", [
    (None, None, None, 0), ("Q1.7", "Q0.7", None, 0),   # no accumulator fraction bits: no shift
    ("Q1.7", "Q0.7", 10, 4),                  # f_p = 7 + 7
    (None, "Q0.7", 3, 4),                     # scaled weights contribute 0 fraction bits
    ("Q1.7", None, 3, 4),                     # scaled activations too
    (None, None, -62, 62),                    # the largest shift
    ("Q1.7", "Q0.7", 14, 0),
])
def test_product_shift_table(wfmt, afmt, acc_frac, expected):
    cfg = HardwareConfig(weight_format=wfmt, activation_format=afmt, accumulator_frac_bits=acc_frac)
    assert conv._product_shift(cfg, "n") == expected


@pytest.mark.parametrize("wfmt, afmt, acc_frac, f_p", [
    (None, None, -63, 0), (None, None, 1, 0), ("Q1.7", "Q0.7", 15, 14), ("Q1.7", "Q0.7", -49, 14),
])
def test_product_shift_out_of_range(wfmt, afmt, acc_frac, f_p):
    cfg = HardwareConfig(weight_format=wfmt, activation_format=afmt, accumulator_frac_bits=acc_frac)
    msg = (f"node 'conv': accumulator.frac_bits = {acc_frac} with products of {f_p} fraction bits; allowed: "
           f"{f_p - 62}..{f_p} (an accumulator cannot hold more fraction bits than the products it sums)")
    with pytest.raises(ConfigError, match="^" + re.escape(msg) + "$"):
        conv._product_shift(cfg, "conv")


# ------------------------------------------------------------------------------------------ layer_requantizer
KIND_OF = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}


def _check_requantizer(cfg, layer, s_in, s_w, s_out):
    """``layer_requantizer`` against the docstrings: the scheme (``dense_requantization`` for dense layers
    when set), M_c = f32(s_in) f32(s_w,c) / f32(s_out) in float64, TFLite's Q31 multiplier (or a
    ``multiplier_bits`` significand), ``requantization_rounding`` as the final rounding of the tflite
    schemes and as the rounding of shift/float (default: ``rounding``)."""
    rq = layer_requantizer(cfg, layer, s_in, s_w, s_out)
    scheme = cfg.dense_requantization if layer == "dense" and cfg.dense_requantization else cfg.requantization
    real = [f32(s_in) * f32(w) / f32(s_out) for w in s_w]
    final = cfg.requantization_rounding.value if cfg.requantization_rounding is not None else None
    assert rq.kind == KIND_OF[scheme]
    if scheme.startswith("tflite"):
        if cfg.multiplier_bits == 31:
            pairs = [ref_quantize_multiplier(r, single=scheme == "tflite-single") for r in real]
        else:
            pairs = [narrow_multiplier(r, cfg.multiplier_bits) for r in real]
        assert rq.multiplier == tuple(m for m, _ in pairs)
        assert rq.shift == tuple(e for _, e in pairs)
        assert (rq.final_rounding.value if rq.final_rounding is not None else None) == final
        assert rq.multiplier_bits == cfg.multiplier_bits
    else:
        if scheme == "float":
            assert rq.scale == tuple(real)
        else:
            assert rq.shift == tuple(nearest_exponent(r) for r in real)
        assert rq.rounding.value == (final or cfg.rounding.value)
        assert rq.final_rounding is None
        assert rq.multiplier_bits == 31


@given(s_in=st.floats(1e-3, 1.0), s_w=st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=4),
       s_out=st.floats(1e-3, 1.0), scheme=st.sampled_from(SCHEMES), dense=st.sampled_from([None] + list(SCHEMES)),
       layer=st.sampled_from(["dense", "conv2d", "depthwise_conv2d"]), rounding=st.sampled_from(MODES),
       final=st.sampled_from([None] + list(MODES)), bits=st.sampled_from([31, 16, 8, 2]))
def test_layer_requantizer_matches_model(s_in, s_w, s_out, scheme, dense, layer, rounding, final, bits):
    if not any(s.startswith("tflite") for s in (scheme, dense or "")):
        bits = 31              # only the tflite schemes have a multiplier (the config refuses the others)
    cfg = HardwareConfig(requantization=scheme, dense_requantization=dense, rounding=rounding,
                         requantization_rounding=final, multiplier_bits=bits)
    _check_requantizer(cfg, layer, s_in, s_w, s_out)


# Hand cases: the Requantizer.tflite docstring's example (s_in 0.02, s_w [0.003, 0.004], s_out 0.05 ->
# multipliers (1319413916, 1759218622), shifts (-9, -9)); M = 0.0012, 0.0016 in float32 terms.
HAND = (0.02, [0.003, 0.004], 0.05)


@pytest.mark.parametrize("fields, layer, expected", [
    ({}, "conv2d", {"kind": "double", "multiplier": (1319413916, 1759218622), "shift": (-9, -9), "final_rounding": None}),
    ({"requantization": "tflite-single"}, "dense", {"kind": "single", "multiplier": (1319413916, 1759218622)}),
    ({"requantization_rounding": "half_even"}, "conv2d", {"kind": "double", "final_rounding": "half_even"}),
    ({"requantization_rounding": "floor", "requantization": "tflite-single"}, "conv2d",
     {"kind": "single", "final_rounding": "floor"}),
    # a 16-bit significand: 0.0012 = 0.6144 * 2^-9 -> m = round(0.6144 * 2^16) = round(40265.3) = 40265;
    # 0.0016 = 0.8192 * 2^-9 -> round(53687.1) = 53687
    ({"multiplier_bits": 16}, "conv2d", {"kind": "double", "multiplier": (40265, 53687), "shift": (-9, -9),
                                               "multiplier_bits": 16}),
    # dense layers take dense_requantization; the others keep requantization (multiplier_bits is for the
    # tflite scheme only: the float requantizer keeps 31)
    ({"requantization": "float", "dense_requantization": "tflite-double", "multiplier_bits": 16}, "dense",
     {"kind": "double", "multiplier": (40265, 53687), "multiplier_bits": 16}),
    ({"requantization": "float", "dense_requantization": "tflite-double", "multiplier_bits": 16}, "conv2d",
     {"kind": "float", "multiplier_bits": 31, "rounding": "half_away"}),
    ({"requantization": "tflite-double", "dense_requantization": "float"}, "depthwise_conv2d",
     {"kind": "double", "multiplier": (1319413916, 1759218622)}),
    ({"requantization": "tflite-double", "dense_requantization": "float", "rounding": "half_even"}, "dense",
     {"kind": "float", "rounding": "half_even", "final_rounding": None}),
    # shift/float round by requantization_rounding when set, else by rounding; log2(0.0012) = -9.70 -> -10
    ({"requantization": "shift", "rounding": "floor"}, "conv2d", {"kind": "shift", "shift": (-10, -9), "rounding": "floor"}),
    ({"requantization": "shift", "rounding": "floor", "requantization_rounding": "half_even"}, "conv2d",
     {"kind": "shift", "shift": (-10, -9), "rounding": "half_even", "final_rounding": None}),
    ({"requantization": "float", "rounding": "floor", "requantization_rounding": "half_up"}, "dense",
     {"kind": "float", "rounding": "half_up", "final_rounding": None}),
])
def test_layer_requantizer_table(fields, layer, expected):
    cfg = HardwareConfig(**fields)
    rq = layer_requantizer(cfg, layer, *HAND)
    for name, value in expected.items():
        got = getattr(rq, name)
        got = got.value if hasattr(got, "value") else got
        assert got == value, name
    _check_requantizer(cfg, layer, *HAND)
