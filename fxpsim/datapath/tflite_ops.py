r"""TFLite-exact integer kernels for the remaining int8 ops (QUANTIZE, DEQUANTIZE, MUL, SUB, MEAN,
MAX_POOL_2D, CONCATENATION, PAD, LOGISTIC, TANH, SOFTMAX, HARD_SWISH, LEAKY_RELU).

Each op is split as TFLite splits it: a ``*_params`` function computes, from the tensors' scales and
zero points, what TFLite computes in the op's ``Prepare`` (multipliers, shifts, lookup tables), and
returns a frozen, hashable dataclass that a graph node can hold; the kernel takes the integer codes
and those parameters and reproduces LiteRT's **reference** kernel (``OpResolverType.BUILTIN_REF``) bit
for bit.  Where LiteRT's optimized builtin kernels or its XNNPACK delegate compute something else,
``kernels="builtin"`` / ``kernels="xnnpack"`` reproduce them too (see each docstring).  ADD is
:func:`fxpsim.datapath.integer_ops.quantized_add`.

Every claim of exactness is checked against LiteRT itself by ``tests/datapath/test_tflite_ops.py``
on the vectors of ``tests/vectors/tflite_ops`` (made by ``tools/fixtures/tflite_ops``).

Arithmetic
----------
Integer steps run on int64 numpy arrays whose values are proven to stay within int64 (bounds in the
docstrings); where TFLite's C code computes in ``int32_t`` and can wrap, the wrap is reproduced with
:func:`~fxpsim.datapath.requantize._wrap_int32`.  Steps TFLite does in ``float`` are done in numpy
float32 (IEEE single precision, correctly rounded, as C on x86-64/ARM64), steps it does in ``double``
in float64.  gemmlowp's fixed-point math (``exp_on_negative_values``, ``logistic``, ``tanh``, ...)
is reimplemented vectorised on raw int32 values (:func:`gemmlowp_exp_on_negative_values` and friends).

TFLite rounds a float with ``std::round`` (:math:`\mathrm{rha}`, round half away from zero) and
converts it with ``static_cast<int32_t>``; for NaN and values outside the int32 range that cast is
undefined in C++ and x86-64 returns :math:`-2^{31}`, which these kernels reproduce.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .integer_ops import _clamp_range, _explicit_padding, _pair, quantized_add
from .requantize import (
    INT32_MAX, INT32_MIN, _check_zero_point, _float32, _iinfo, _rdbpot, _srdhm, _wrap_int32, activation_range,
    multiply_by_quantized_multiplier, quantize_multiplier, tflite_add_params,
)

__all__ = [
    "quantize_tflite", "dequantize_tflite", "RequantizeParams", "requantize_params", "requantize_tflite",
    "MulParams", "mul_params", "quantized_mul", "SubParams", "sub_params", "quantized_sub", "quantized_add_xnnpack",
    "MeanParams", "mean_params", "quantized_mean", "quantized_max_pool2d", "quantized_concatenation",
    "quantized_pad", "LogisticParams", "logistic_params", "quantized_logistic", "TanhParams", "tanh_params",
    "quantized_tanh", "SoftmaxParams", "softmax_params", "quantized_softmax", "HardSwishParams",
    "hard_swish_params", "quantized_hard_swish", "LeakyReluParams", "leaky_relu_params", "quantized_leaky_relu",
    "calculate_input_radius", "gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl",
    "gemmlowp_exp_on_negative_values", "gemmlowp_one_over_one_plus_x_for_x_in_0_1",
    "gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1", "gemmlowp_logistic", "gemmlowp_tanh",
    "gemmlowp_rounding_half_sum", "gemmlowp_saturating_rounding_multiply_by_pot",
]

_KERNELS = ("reference", "builtin", "xnnpack")


# --------------------------------------------------------------------------- validation
def _dtype(dtype, allowed, name="dtype") -> np.dtype:
    info = _iinfo(dtype, name)
    dt = np.dtype(info.dtype)
    if dt not in tuple(np.dtype(a) for a in allowed):
        raise TypeError(f"{name} must be one of {', '.join(np.dtype(a).name for a in allowed)}; got {dt.name}")
    return dt


def _codes(x, dtype: np.dtype, name: str = "x") -> np.ndarray:
    """``x`` (an array of ``dtype`` codes, exactly that dtype) as int64."""
    arr = np.asarray(x)
    if arr.dtype != dtype:
        raise TypeError(f"{name} must be an array of {dtype.name} codes (as the TFLite tensor), got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _zero_point(zp, dtype: np.dtype, name: str) -> int:
    return _check_zero_point(zp, np.iinfo(dtype), name)


def _scale(scale, name: str) -> np.float32:
    """A positive finite scale as the float32 TFLite stores."""
    s = _float32(scale, name)
    if s.ndim:
        raise ValueError(f"{name} must be a scalar (per-tensor quantization), got shape {s.shape}")
    return np.float32(s)


def _kernels(kernels: str, allowed=_KERNELS) -> str:
    if kernels not in allowed:
        raise ValueError(f"kernels must be one of {allowed}, got {kernels!r}")
    return kernels


def _clamp(v: np.ndarray, dtype: np.dtype, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min if lo is None else lo, info.max if hi is None else hi).astype(dtype)


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """``std::round`` of float32 values, as float64 (exact: |v| + 0.5 is exact in float64 below 2^52)."""
    v64 = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.copysign(np.floor(np.abs(v64) + 0.5), v64)


def _to_int32(v: np.ndarray) -> np.ndarray:
    """``static_cast<int32_t>`` of integral float values with x86-64's result for the undefined cases:
    NaN and values outside the int32 range give :math:`-2^{31}` (``cvttss2si``'s "integer indefinite")."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (v >= -2.0 ** 31) & (v < 2.0 ** 31)
    return np.where(ok, np.trunc(np.where(ok, v, 0.0)), INT32_MIN).astype(np.int64)


def _check_mbqm_shift(shift: int, what: str) -> None:
    if not -31 <= shift <= 30:
        raise ValueError(f"{what}: the multiplier's shift {shift} is outside TFLite's supported [-31, 30]")


# --------------------------------------------------------------------------- gemmlowp fixed point
def _as_raw(a, name: str = "a") -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (raw int32 fixed-point values), got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (int(arr.min()) < INT32_MIN or int(arr.max()) > INT32_MAX):
        raise ValueError(f"{name} must hold raw int32 values")
    return arr


def _add(a, b):
    return _wrap_int32(a + b)


def _sub(a, b):
    return _wrap_int32(a - b)


def _srmpot(x: np.ndarray, exponent: int) -> np.ndarray:
    r"""gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on int32 raws: for :math:`e > 0` a left
    shift saturating when :math:`|x| > 2^{31-e} - 1`; for :math:`e < 0` ``RoundingDivideByPOT(x, -e)``."""
    if exponent == 0:
        return x
    if exponent < 0:
        return _rdbpot(x, -exponent)
    thr = (1 << (31 - exponent)) - 1
    return np.where(x > thr, INT32_MAX, np.where(x < -thr, INT32_MIN, x << exponent))


def _rhs(a, b):
    r"""gemmlowp ``RoundingHalfSum`` (int32): :math:`\operatorname{trunc}((a + b \pm 1) / 2)`, the sign of
    :math:`a+b` (:math:`+1` for 0)."""
    t = a + b + np.where(a + b >= 0, 1, -1)
    return np.where(t >= 0, t >> 1, -((-t) >> 1))


# constants of gemmlowp's fixedpoint.h (raw int32 values)
_EXP_M1_8 = 1895147668          # exp(-1/8) in Q0.31
_ONE_THIRD = 715827883          # 1/3 in Q0.31
_C48_17 = 1515870810            # 48/17 in Q2.29
_CNEG32_17 = -1010580540        # -32/17 in Q2.29
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))   # exp(-2^k) in Q0.31


def _exp_quarter(a):
    x = _add(a, 1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _rdbpot(x4, 2)
    poly = _rdbpot(_add(_srdhm(_add(x4_over_4, x3), _ONE_THIRD), x2), 1)
    return _add(_EXP_M1_8, _srdhm(_EXP_M1_8, _add(x, poly)))


def _exp_neg(a, integer_bits: int):
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = _sub(a & (quarter - 1), quarter)
    result = _exp_quarter(_srmpot(a_mod, integer_bits))
    remainder = _sub(a_mod, a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder >> (frac + exponent)) & 1
            result = np.where(bit != 0, _srdhm(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _newton_reciprocal(a):
    """Shared Newton-Raphson part of gemmlowp's ``one_over_one_plus_x`` / ``one_minus_x_over_one_plus_x``:
    returns ``x`` (Q2.29), close to 1 / half_denominator."""
    half_den = _rhs(a, INT32_MAX)
    x = _add(_C48_17, _srdhm(half_den, _CNEG32_17))
    for _ in range(3):
        one_minus = _sub(1 << 29, _srdhm(half_den, x))
        x = _add(x, _srmpot(_srdhm(x, one_minus), 2))
    return x


def _one_over_one_plus_x(a):
    return _srmpot(_newton_reciprocal(a), 1)


def _one_minus_x_over_one_plus_x(a):
    return _srmpot(_sub(_newton_reciprocal(a), 1 << 29), 2)


def _fixed_logistic(a, integer_bits: int):
    pos = a > 0
    abs_a = np.where(pos, a, _wrap_int32(-a))
    rp = _one_over_one_plus_x(_exp_neg(_wrap_int32(-abs_a), integer_bits))
    rn = _sub(INT32_MAX, rp)
    return np.where(a == 0, 1 << 30, np.where(pos, rp, rn))


def _fixed_tanh(a, integer_bits: int):
    neg = a < 0
    n = np.where(neg, a, _wrap_int32(-a))
    t = _one_minus_x_over_one_plus_x(_exp_neg(n, integer_bits + 1))   # ExactMulByPot<1>: one more integer bit
    return np.where(a == 0, 0, np.where(neg, _wrap_int32(-t), t))


def _integer_bits(integer_bits) -> int:
    if isinstance(integer_bits, (bool, np.bool_)) or not isinstance(integer_bits, (int, np.integer)) \
            or not 0 <= integer_bits <= 30:
        raise ValueError(f"integer_bits must be an int in [0, 30], got {integer_bits!r}")
    return int(integer_bits)


def gemmlowp_saturating_rounding_multiply_by_pot(x, exponent: int) -> np.ndarray:
    r"""gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on raw int32 values.

    .. math:: \mathrm{SRMPOT}(x, e) = \begin{cases} \mathrm{sat}_{32}(x\,2^e) & e > 0 \\
              \mathrm{RDBPOT}(x, -e) & e \le 0 \end{cases}

    where saturation happens when :math:`|x| > 2^{31-e} - 1` (so :math:`x = -(2^{31-e})` also
    saturates, as gemmlowp's threshold test does).
    """
    if not isinstance(exponent, (int, np.integer)) or not -31 <= exponent <= 31:
        raise ValueError(f"exponent must be an int in [-31, 31], got {exponent!r}")
    return _srmpot(_as_raw(x, "x"), int(exponent))


def gemmlowp_rounding_half_sum(a, b) -> np.ndarray:
    r"""gemmlowp ``RoundingHalfSum`` (int32): :math:`\operatorname{trunc}((a + b + \mathrm{sgn}(a + b)) / 2)`,
    :math:`\mathrm{sgn}(0) = 1`, i.e. :math:`(a+b)/2` rounded half away from zero."""
    return _rhs(_as_raw(a, "a"), _as_raw(b, "b"))


def gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    r"""gemmlowp's :math:`e^a` for :math:`a \in [-1/4, 0)`, Q0.31 in and out (raw int32).

    With :math:`x = a + 1/8`: :math:`e^{-1/8}\big(1 + x + \mathrm{rd}_1(\mathrm{rd}_2(x^4) + x^3)/3 + x^2)/2\big)`,
    every product a ``SaturatingRoundingDoublingHighMul``, :math:`\mathrm{rd}_k` = ``RoundingDivideByPOT(., k)``.
    """
    return _exp_quarter(_as_raw(a))


def gemmlowp_exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``exp_on_negative_values``: :math:`e^a` for :math:`a \le 0` given as raw
    :math:`\mathrm{Q}k.(31-k)`, result Q0.31 (:math:`a = 0` gives :math:`2^{31}-1`).

    :math:`a` is split into :math:`a \bmod 1/4 - 1/4 \in [-1/4, 0)` (evaluated by
    :func:`gemmlowp_exp_on_interval_between_negative_one_quarter_and_0_excl`) and a multiple of
    :math:`1/4` whose bits select the factors :math:`e^{-1/4}, e^{-1/2}, \dots, e^{-16}`; for :math:`k > 5`
    inputs below :math:`-32` give 0.
    """
    return _exp_neg(_as_raw(a), _integer_bits(integer_bits))


def gemmlowp_one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    r"""gemmlowp :math:`1/(1+x)` for :math:`x \in (0, 1)`, Q0.31 in and out: three Newton-Raphson steps
    on :math:`d = (1+x)/2` from :math:`48/17 - 32/17\,d`, computed in Q2.29."""
    return _one_over_one_plus_x(_as_raw(a))


def gemmlowp_one_minus_x_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    r"""gemmlowp :math:`(1-x)/(1+x)` for :math:`x \in (0, 1)`, Q0.31 in and out (same Newton iteration)."""
    return _one_minus_x_over_one_plus_x(_as_raw(a))


def gemmlowp_logistic(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``logistic``: :math:`1/(1+e^{-a})` of a raw :math:`\mathrm{Q}k.(31-k)` value, Q0.31 result:
    :math:`1/(1+e^{-|a|})` for :math:`a > 0`, one minus that for :math:`a < 0`, :math:`2^{30}` at 0."""
    return _fixed_logistic(_as_raw(a), _integer_bits(integer_bits))


def gemmlowp_tanh(a, integer_bits: int) -> np.ndarray:
    r"""gemmlowp ``tanh`` of a raw :math:`\mathrm{Q}k.(31-k)` value, Q0.31 result:
    :math:`\mathrm{sgn}(a)\,(1 - e^{-2|a|})/(1 + e^{-2|a|})` (``exp_on_negative_values`` with
    :math:`k+1` integer bits, then ``one_minus_x_over_one_plus_x_for_x_in_0_1``)."""
    return _fixed_tanh(_as_raw(a), _integer_bits(integer_bits))


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    r"""TFLite ``CalculateInputRadius``: the largest input magnitude that still fits once rescaled.

    .. math:: r = \Big\lfloor \frac{(2^{b} - 1)\, 2^{T - b}}{2^{s}} \Big\rfloor

    with :math:`b` = ``input_integer_bits``, :math:`T` = ``total_signed_bits``, :math:`s` =
    ``input_left_shift`` (computed exactly; TFLite's double arithmetic is exact here).
    """
    for name, v in (("input_integer_bits", input_integer_bits), ("input_left_shift", input_left_shift),
                    ("total_signed_bits", total_signed_bits)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    b, s, t = int(input_integer_bits), int(input_left_shift), int(total_signed_bits)
    if not 0 <= b <= t <= 62 or not -62 <= s <= 62:
        raise ValueError("calculate_input_radius: need 0 <= input_integer_bits <= total_signed_bits <= 62 "
                         f"and |input_left_shift| <= 62, got {b}, {s}, {t}")
    num = ((1 << b) - 1) << (t - b)
    return num >> s if s >= 0 else num << -s


# --------------------------------------------------------------------------- QUANTIZE / DEQUANTIZE
_QUANT_TYPES = (np.int8, np.uint8, np.int16)


def quantize_tflite(x_float, scale: float, zero_point: int, dtype=np.int8, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``QUANTIZE`` from float (``reference_ops::AffineQuantize``).

    .. math:: q = \mathrm{clamp}\big(\mathrm{int32}(\mathrm{rha}(\mathrm{fl}_{32}(x / s))) + z,\ q_{min}, q_{max}\big)

    The division is float32 (``val / static_cast<float>(scale)``), the rounding ``std::round`` (half
    away from zero), the sum with the zero point int32 arithmetic (it wraps, as on x86-64).  ``x`` is
    rounded to float32 first (the TFLite tensor is float32).  NaN and :math:`|x/s| \ge 2^{31}` convert
    to :math:`-2^{31}` (x86-64's result of the undefined cast), so with :math:`z \ge 0` they give
    :math:`q_{min}`, and with :math:`z < 0` the int32 sum wraps to :math:`2^{31} + z` and they give
    :math:`q_{max}`.

    ``kernels="builtin"`` is LiteRT's optimized ``AffineQuantize`` as built for x86-64 (SSE4.1, so its
    NEON code runs through NEON_2_SSE): elements in whole blocks of 8 (flat order) are
    :math:`\mathrm{rhe}(\mathrm{fl}_{32}(x \cdot \mathrm{fl}_{32}(1/s)))` (reciprocal multiply, rounding
    half to even, ``vcvtnq_s32_f32``), the remaining ``size % 8`` ones
    :math:`\mathrm{rha}(\mathrm{double}(x) / \mathrm{double}(s))`; then :math:`+z` (int32) and the clamp
    (checked on int8 vectors; uint8 and int16 have the same code).  ``kernels="xnnpack"`` is XNNPACK's ``f32-qs8-vcvt``:
    :math:`\mathrm{fl}_{32}(x \cdot \mathrm{fl}_{32}(1/s))` clamped to :math:`[q_{min} - z, q_{max} - z]`
    in float32 (NaN to the upper bound, as its x86 ``minps``), rounded half to even, plus :math:`z`
    (int16 is not delegated: the builtin kernel's codes).

    Parameters
    ----------
    x_float : array_like of float
    scale : float
        Output scale (float32 as stored); must be positive.
    zero_point : int
    dtype : {int8, uint8, int16}
    kernels : {"reference", "builtin", "xnnpack"}

    Returns
    -------
    ndarray of ``dtype``
    """
    _kernels(kernels)
    dt = _dtype(dtype, _QUANT_TYPES)
    s = _scale(scale, "scale")
    zp = _zero_point(zero_point, dt, "zero_point")
    arr = np.asarray(x_float)
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        raise TypeError(f"x_float must be a real array, got dtype {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        x = arr.astype(np.float32)
        info = np.iinfo(dt)
        if kernels == "reference":
            q = _to_int32(_round_half_away(x / s))
            return _clamp(_wrap_int32(q + zp), dt)
        inv = np.float32(1.0 / np.float64(s))                       # float(1.0f / double(scale))
        if kernels == "builtin" or dt == np.int16:                  # XNNPACK has no int16 QUANTIZE
            flat = x.reshape(-1)
            vec = flat.size // 8 * 8                                  # NEON (NEON_2_SSE) blocks of 8
            head = _to_int32(np.rint(flat[:vec] * inv))               # vcvtnq_s32_f32: half to even
            tail = _to_int32(_round_half_away(flat[vec:].astype(np.float64) / np.float64(s)))
            q = np.concatenate([head, tail]).reshape(x.shape)
            return _clamp(_wrap_int32(q + zp), dt)
        lo, hi = np.float32(int(info.min) - zp), np.float32(int(info.max) - zp)
        v = np.minimum(np.maximum(x * inv, lo), hi)
        v = np.where(np.isnan(v), hi, v)
        return (np.rint(v).astype(np.int64) + zp).astype(dt)


def dequantize_tflite(codes, scale: float, zero_point: int, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``DEQUANTIZE`` (``reference_integer_ops::Dequantize``):
    :math:`y = \mathrm{fl}_{32}(\mathrm{double}(s)\,(q - z))`, float32 result.

    The float64 product is exact for 8/16-bit codes, so :math:`y` is :math:`s(q-z)` correctly rounded to
    float32 (XNNPACK's ``qs8-f32-vcvt`` gives the same).  ``kernels="builtin"``: LiteRT's optimized
    ``Dequantize`` as built for x86-64 (NEON_2_SSE, no FMA): elements in whole blocks of 8 (flat order)
    are :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(q \cdot s) + \mathrm{fl}_{32}(-z\,s))` (two roundings), the
    remaining ``size % 8`` the reference value (checked on int8; uint8 and int16 have the same code).

    Parameters
    ----------
    codes : ndarray of int8, uint8 or int16
    scale : float
    zero_point : int
    kernels : {"reference", "builtin", "xnnpack"}

    Returns
    -------
    ndarray of float32
    """
    _kernels(kernels)
    arr = np.asarray(codes)
    dt = _dtype(arr.dtype, _QUANT_TYPES, "codes dtype")
    s = _scale(scale, "scale")
    zp = _zero_point(zero_point, dt, "zero_point")
    ref = (np.float64(s) * (arr.astype(np.int64) - zp)).astype(np.float32)
    if kernels != "builtin":
        return ref
    flat = arr.reshape(-1)
    vec = flat.size // 8 * 8
    zs = np.float32(-zp * np.float64(s))
    head = flat[:vec].astype(np.float32) * s + zs
    return np.concatenate([head, ref.reshape(-1)[vec:]]).reshape(arr.shape)


@dataclass(frozen=True)
class RequantizeParams:
    r"""TFLite ``QUANTIZE`` with an integer input (requantize): what ``quantize::Prepare`` computes.

    Attributes
    ----------
    multiplier, shift : int
        ``QuantizeMultiplier(double(s_in) / double(s_out))``.
    input_zero_point, output_zero_point : int
    input_dtype, output_dtype : numpy dtype
    input_scale, output_scale : float
        The float32 scales (for the XNNPACK variant).
    """

    multiplier: int
    shift: int
    input_zero_point: int
    output_zero_point: int
    input_dtype: np.dtype
    output_dtype: np.dtype
    input_scale: float
    output_scale: float


@functools.lru_cache(maxsize=512)
def _requantize_params(si, zi, so, zo, dti, dto):
    m, s = quantize_multiplier(float(np.float64(si) / np.float64(so)))
    _check_mbqm_shift(s, "requantize_params")
    return RequantizeParams(m, s, zi, zo, dti, dto, float(si), float(so))


def requantize_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int, *,
                      input_dtype=np.int8, output_dtype=np.int8) -> RequantizeParams:
    """Parameters of :func:`requantize_tflite` (TFLite ``quantize::Prepare``, integer input)."""
    dti = _dtype(input_dtype, _QUANT_TYPES, "input_dtype")
    dto = _dtype(output_dtype, _QUANT_TYPES, "output_dtype")
    return _requantize_params(_scale(input_scale, "input_scale"), _zero_point(input_zero_point, dti, "input_zero_point"),
                              _scale(output_scale, "output_scale"),
                              _zero_point(output_zero_point, dto, "output_zero_point"), dti, dto)


def requantize_tflite(x, params: RequantizeParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``QUANTIZE`` from integer codes (``reference_ops::Requantize``).

    .. math:: y = \mathrm{clamp}\big(\mathrm{MBQM}(x - z_{in},\ m, s) + z_{out}\big)

    with :math:`\mathrm{MBQM}` = :func:`~fxpsim.datapath.requantize.multiply_by_quantized_multiplier`
    (gemmlowp double rounding; :math:`|x - z_{in}| < 2^{16}`).  TFLite's int8 <-> uint8 fast path
    (same scale, zero points 128 apart: ``x ^ 0x80``) gives the same codes.

    ``kernels="builtin"`` is LiteRT's optimized ``Requantize`` (x86-64 build) and
    ``kernels="xnnpack"`` XNNPACK's ``qs8-vcvt``; see :func:`_requantize_variant` for their arithmetic.
    """
    _kernels(kernels)
    if not isinstance(params, RequantizeParams):
        raise TypeError(f"params must be RequantizeParams (from requantize_params), got {type(params).__name__}")
    d = _codes(x, params.input_dtype) - params.input_zero_point
    if kernels == "reference":
        v = multiply_by_quantized_multiplier(d, params.multiplier, params.shift)
        return _clamp(v + params.output_zero_point, params.output_dtype)
    return _requantize_variant(d, params, kernels)


def _requantize_variant(d: np.ndarray, params: RequantizeParams, kernels: str) -> np.ndarray:
    r"""LiteRT's other requantizers (8-bit codes; ``d = x - z_in``).

    ``"builtin"`` (``optimized_ops::Requantize`` for 8-bit types, x86-64 build with NEON_2_SSE): whole
    blocks of 16 elements (flat order) use ``MultiplyByQuantizedMultiplier4Rows``,
    :math:`\lfloor (\mathrm{SRDHM}(d\,2^{\ell}, m) + 2^{r-1}) / 2^{r} \rfloor` (``vqrdmulhq`` then the
    rounding shift ``vrshlq``: ties toward :math:`+\infty`, where ``RoundingDivideByPOT`` rounds them away
    from zero), the remaining ``size % 16`` the reference arithmetic.

    ``"xnnpack"`` (``qs8-vcvt``): :math:`\mu = \mathrm{rhe}(256\,\mathrm{fl}_{32}(s_{in}/s_{out}))`,
    :math:`y = \lfloor (256 z_{out} + 128 + \mu d) / 256 \rfloor`, clamped.  The delegate takes the op only
    for :math:`2^{-8} \le s_{in}/s_{out} \le 2^{7}` and the same input and output type; otherwise LiteRT
    runs the builtin kernel.
    """
    eight_bit = (np.dtype(np.int8), np.dtype(np.uint8))
    if params.input_dtype not in eight_bit or params.output_dtype not in eight_bit:
        raise ValueError(f"requantize kernels={kernels!r} is reproduced for 8-bit codes only")
    zo = params.output_zero_point
    ratio = np.float32(params.input_scale) / np.float32(params.output_scale)
    if kernels == "xnnpack" and params.input_dtype == params.output_dtype \
            and np.float32(2.0 ** -8) <= ratio <= np.float32(2.0 ** 7):
        mu = int(np.rint(np.float32(256) * ratio))
        return _clamp(((zo << 8) + 0x80 + d * mu) >> 8, params.output_dtype)
    flat = d.reshape(-1)
    vec = flat.size // 16 * 16
    m, sh = params.multiplier, params.shift
    left, right = max(sh, 0), max(-sh, 0)
    head = _srdhm(_wrap_int32(flat[:vec] << left), m)
    if right:
        head = (head + (1 << (right - 1))) >> right
    tail = multiply_by_quantized_multiplier(flat[vec:], m, sh)
    return _clamp(np.concatenate([head, tail]).reshape(d.shape) + zo, params.output_dtype)


# --------------------------------------------------------------------------- MUL / SUB
@dataclass(frozen=True)
class MulParams:
    r"""TFLite int8 ``MUL`` (``mul::Prepare``).

    Attributes
    ----------
    multiplier, shift : int
        ``QuantizeMultiplier`` of :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(s_1 s_2) / s_y)` (TFLite computes
        the real multiplier in float32: ``input1->params.scale * input2->params.scale / output->params.scale``).
    zero_point1, zero_point2, output_zero_point : int
    act_min, act_max : int
        Fused activation clamp (:func:`~fxpsim.datapath.requantize.activation_range`).
    dtype : numpy dtype
    input_scale1, input_scale2, output_scale : numpy.float32
        The scales (for the XNNPACK variant).
    """

    multiplier: int
    shift: int
    zero_point1: int
    zero_point2: int
    output_zero_point: int
    act_min: int
    act_max: int
    dtype: np.dtype
    input_scale1: float
    input_scale2: float
    output_scale: float


def mul_params(scale1: float, zero_point1: int, scale2: float, zero_point2: int, output_scale: float,
               output_zero_point: int, *, activation: str = "none", dtype=np.int8) -> MulParams:
    """Parameters of :func:`quantized_mul` (TFLite ``mul::Prepare``)."""
    dt = _dtype(dtype, (np.int8, np.uint8, np.int16))
    s1, s2, so = _scale(scale1, "scale1"), _scale(scale2, "scale2"), _scale(output_scale, "output_scale")
    z1, z2 = _zero_point(zero_point1, dt, "zero_point1"), _zero_point(zero_point2, dt, "zero_point2")
    zo = _zero_point(output_zero_point, dt, "output_zero_point")
    if dt == np.int16 and (z1 or z2 or zo):
        raise ValueError("TFLite's int16 MUL needs zero points 0")
    real = float((s1 * s2) / so)                   # float32 product and quotient, as TFLite
    if not math.isfinite(real):
        raise ValueError(f"mul_params: the real multiplier {real} is not finite")
    m, s = quantize_multiplier(real)
    _check_mbqm_shift(s, "mul_params")
    lo, hi = activation_range(activation, so, zo, dt)
    return MulParams(m, s, z1, z2, zo, lo, hi, dt, s1, s2, so)


def _binary_shapes(a: np.ndarray, b: np.ndarray):
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"x1 {a.shape} and x2 {b.shape} do not broadcast") from None


def quantized_mul(x1, x2, params: MulParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``MUL`` (``reference_integer_ops::Mul`` / ``BroadcastMul6DSlow``), numpy broadcasting.

    .. math:: y = \mathrm{clamp}\big(\mathrm{MBQM}((x_1 - z_1)(x_2 - z_2),\ m, s) + z_y,\ a_{min}, a_{max}\big)

    The product fits int32 (:math:`|x_i - z_i| \le 2^{16}` and TFLite's int16 MUL has zero points 0,
    so :math:`|p| \le 2^{30}`).  Broadcasting follows numpy's rules, as TFLite's (up to 6-D there).

    ``kernels="xnnpack"``: XNNPACK's ``qs8-vmul``, see :func:`_mul_xnnpack`.
    """
    _kernels(kernels)
    if not isinstance(params, MulParams):
        raise TypeError(f"params must be MulParams (from mul_params), got {type(params).__name__}")
    a, b = _codes(x1, params.dtype, "x1"), _codes(x2, params.dtype, "x2")
    _binary_shapes(a, b)
    if kernels == "xnnpack":
        return _mul_xnnpack(a, b, params)
    prod = (a - params.zero_point1) * (b - params.zero_point2)
    v = multiply_by_quantized_multiplier(prod, params.multiplier, params.shift)
    return _clamp(v + params.output_zero_point, params.dtype, params.act_min, params.act_max)


def _mul_xnnpack(a, b, params):
    r"""XNNPACK ``qs8-vmul`` (fp32 requantization): :math:`c = \mathrm{fl}_{32}(\mathrm{fl}_{32}(s_1 s_2) / s_y)`,
    :math:`v = \mathrm{fl}_{32}((x_1 - z_1)(x_2 - z_2) \cdot c)` clamped to :math:`[q_{min} - z_y, q_{max} - z_y]`,
    rounded half to even (magic-bias addition), :math:`+ z_y`, then the fused activation clamp.
    The delegate takes MUL only for :math:`2^{-16} \le c < 2^{8}` (else LiteRT runs the builtin kernel,
    which is the reference arithmetic); int8 only (other types get the reference codes)."""
    c = np.float32(params.input_scale1 * params.input_scale2) / np.float32(params.output_scale)
    if not np.float32(2.0 ** -16) <= c < np.float32(2.0 ** 8) or params.dtype != np.int8:
        prod = (a - params.zero_point1) * (b - params.zero_point2)
        v = multiply_by_quantized_multiplier(prod, params.multiplier, params.shift)
        return _clamp(v + params.output_zero_point, params.dtype, params.act_min, params.act_max)
    zo = params.output_zero_point
    v = ((a - params.zero_point1) * (b - params.zero_point2)).astype(np.float32) * np.float32(c)
    v = np.clip(v, np.float32(-128 - zo), np.float32(127 - zo))
    return _clamp(np.rint(v).astype(np.int64) + zo, params.dtype, params.act_min, params.act_max)


@dataclass(frozen=True)
class SubParams:
    r"""TFLite int8 ``SUB`` (``sub::PrepareGeneralSubOp``): the ADD scheme.

    With :math:`S = 2\max(s_1, s_2)` (float32): :math:`r_i = s_i / S`, :math:`r_y = S / (2^{20} s_y)`, each
    ``QuantizeMultiplierSmallerThanOneExp`` (:func:`~fxpsim.datapath.requantize.tflite_add_params`).
    """

    multiplier1: int
    shift1: int
    multiplier2: int
    shift2: int
    output_multiplier: int
    output_shift: int
    zero_point1: int
    zero_point2: int
    output_zero_point: int
    act_min: int
    act_max: int
    left_shift: int
    dtype: np.dtype
    input_scale1: float
    input_scale2: float
    output_scale: float


def sub_params(scale1: float, zero_point1: int, scale2: float, zero_point2: int, output_scale: float,
               output_zero_point: int, *, activation: str = "none", dtype=np.int8) -> SubParams:
    """Parameters of :func:`quantized_sub` (TFLite ``sub::PrepareGeneralSubOp``, 8-bit: left shift 20).

    TFLite accepts an output multiplier above 1 here (``QuantizeMultiplierGreaterThanOne``) but then
    calls ``RoundingDivideByPOT`` with a negative exponent (undefined behaviour); that case is refused.
    """
    dt = _dtype(dtype, (np.int8, np.uint8))
    z1, z2 = _zero_point(zero_point1, dt, "zero_point1"), _zero_point(zero_point2, dt, "zero_point2")
    zo = _zero_point(output_zero_point, dt, "output_zero_point")
    params = tflite_add_params(scale1, scale2, output_scale, 20)
    lo, hi = activation_range(activation, output_scale, zo, dt)
    s1, s2, so = _scale(scale1, "scale1"), _scale(scale2, "scale2"), _scale(output_scale, "output_scale")
    return SubParams(*params, z1, z2, zo, lo, hi, 20, dt, s1, s2, so)


def quantized_sub(x1, x2, params: SubParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``SUB`` (``reference_ops::Sub`` / ``BroadcastQuantSubSlow``, int8), numpy broadcasting.

    .. math::

        v_i = \mathrm{MBQM}((x_i - z_i)\,2^{20},\ m_i, s_i),\qquad
        y = \mathrm{clamp}\big(\mathrm{MBQM}(v_1 - v_2,\ m_y, s_y) + z_y,\ a_{min}, a_{max}\big)

    (int32 arithmetic: :math:`|x_i - z_i|\,2^{20} < 2^{29}`).  It is :func:`~fxpsim.datapath.integer_ops.quantized_add`
    with a difference, but not ADD of a negated operand: ``SaturatingRoundingDoublingHighMul`` breaks
    ties toward :math:`+\infty`, so :math:`\mathrm{MBQM}(-d) \ne -\mathrm{MBQM}(d)` on ties.  LiteRT's
    optimized kernel gives the same codes (``kernels="builtin"`` is the reference);
    ``kernels="xnnpack"`` is XNNPACK's ``qs8-vadd`` with a negated second scale (:func:`quantized_add_xnnpack`).
    """
    _kernels(kernels)
    if not isinstance(params, SubParams):
        raise TypeError(f"params must be SubParams (from sub_params), got {type(params).__name__}")
    a, b = _codes(x1, params.dtype, "x1"), _codes(x2, params.dtype, "x2")
    shape = _binary_shapes(a, b)
    if kernels == "xnnpack" and params.dtype == np.int8:
        out = _xnnpack_add(a, b, params.input_scale1, params.zero_point1, -params.input_scale2, params.zero_point2,
                           params.output_scale, params.output_zero_point)
        if out is not None:
            return _clamp(out, params.dtype, params.act_min, params.act_max)
    L = params.left_shift
    v1 = multiply_by_quantized_multiplier((a - params.zero_point1) << L, params.multiplier1, params.shift1)
    v2 = multiply_by_quantized_multiplier((b - params.zero_point2) << L, params.multiplier2, params.shift2)
    raw = multiply_by_quantized_multiplier(_wrap_int32(np.broadcast_to(v1, shape) - v2), params.output_multiplier,
                                           params.output_shift)
    return _clamp(raw + params.output_zero_point, params.dtype, params.act_min, params.act_max)


def _xnnpack_add(a, b, s1, z1, s2, z2, so, zo):
    """XNNPACK ``qs8-vadd`` on int64 codes (unclamped codes + zero point), or None where the delegate
    would not take the op (scale ratios outside :math:`[2^{-10}, 2^{8})`)."""
    f32 = np.float32
    ra, rb = f32(s1) / f32(so), f32(s2) / f32(so)
    big = max(abs(ra), abs(rb))
    if not (abs(ra) >= f32(2.0 ** -10) and abs(rb) >= f32(2.0 ** -10) and big < f32(2.0 ** 8)):
        return None
    shift = 20 - (int(np.asarray(big, np.float32).view(np.int32)) >> 23) + 127
    ma = int(np.rint(abs(ra) * f32(2.0 ** shift))) * (-1 if ra < 0 else 1)
    mb = int(np.rint(abs(rb) * f32(2.0 ** shift))) * (-1 if rb < 0 else 1)
    bias = (1 << (shift - 1)) - ma * z1 - mb * z2
    return ((bias + a * ma + b * mb) >> shift) + zo


def quantized_add_xnnpack(x1, x2, *, scale1: float, zp1: int, scale2: float, zp2: int, out_scale: float,
                          out_zp: int, act_min=None, act_max=None) -> np.ndarray:
    r"""LiteRT's int8 ``ADD`` with the XNNPACK delegate (``qs8-vadd``), numpy broadcasting; the reference
    kernel is :func:`fxpsim.datapath.integer_ops.quantized_add` (same signature).

    With :math:`r_i = \mathrm{fl}_{32}(s_i / s_y)`, :math:`t = 20 - \lfloor \log_2 \max |r_i| \rfloor` and
    :math:`\mu_i = \mathrm{rhe}(r_i\,2^{t})` (21-bit multipliers):

    .. math:: y = \mathrm{clamp}\big(\lfloor (2^{t-1} + \mu_1 (x_1 - z_1) + \mu_2 (x_2 - z_2)) / 2^{t} \rfloor + z_y\big)

    (int32: :math:`|\mu_i (x_i - z_i)| < 2^{29}`).  The delegate takes ADD only for
    :math:`2^{-10} \le |r_i| < 2^{8}`; elsewhere LiteRT runs the builtin kernel (the reference result).
    """
    a, b = np.asarray(x1), np.asarray(x2)
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"x1 and x2 must be int8 codes, got {a.dtype} and {b.dtype}")
    _binary_shapes(a, b)
    dt = np.dtype(np.int8)
    z1, z2, zo = (_zero_point(v, dt, n) for v, n in ((zp1, "zp1"), (zp2, "zp2"), (out_zp, "out_zp")))
    lo, hi = _clamp_range(act_min, act_max, np.iinfo(dt))
    out = _xnnpack_add(a.astype(np.int64), b.astype(np.int64), _scale(scale1, "scale1"), z1,
                       _scale(scale2, "scale2"), z2, _scale(out_scale, "out_scale"), zo)
    if out is None:
        return quantized_add(a, b, scale1=scale1, zp1=zp1, scale2=scale2, zp2=zp2, out_scale=out_scale,
                             out_zp=out_zp, act_min=act_min, act_max=act_max)
    return _clamp(out, dt, lo, hi)


# --------------------------------------------------------------------------- MEAN
@dataclass(frozen=True)
class MeanParams:
    r"""TFLite quantized ``MEAN`` (``reduce::PrepareMeanOrSum``): ``QuantizeMultiplier`` of
    :math:`\mathrm{double}(s_{in}) / \mathrm{double}(s_{out})`, before the element count is folded in."""

    multiplier: int
    shift: int
    input_zero_point: int
    output_zero_point: int
    dtype: np.dtype
    input_scale: float
    output_scale: float


def mean_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int, *,
                dtype=np.int8) -> MeanParams:
    """Parameters of :func:`quantized_mean` (TFLite ``reduce::PrepareMeanOrSum``)."""
    dt = _dtype(dtype, _QUANT_TYPES)
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    zi = _zero_point(input_zero_point, dt, "input_zero_point")
    zo = _zero_point(output_zero_point, dt, "output_zero_point")
    m, s = quantize_multiplier(float(np.float64(si) / np.float64(so)))
    return MeanParams(m, s, zi, zo, dt, float(si), float(so))


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in items:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"axis must be an int or a sequence of ints, got {axis!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for an array of {ndim} dimensions")
        if a % ndim not in out:
            out.append(int(a) % ndim)
    return tuple(out)


def quantized_mean(x, axis, params: MeanParams, *, keepdims: bool = False, kernels: str = "reference") -> np.ndarray:
    r"""TFLite quantized ``MEAN`` (``reference_ops::QuantizedMeanOrSum``, int8/uint8/int16).

    With :math:`n` the number of reduced elements, :math:`S` their int32 sum, and :math:`(m, s)` from
    :class:`MeanParams`, TFLite folds :math:`1/n` into the multiplier:

    .. math::

        k = \min(\lfloor \log_2 n \rfloor, 32, 31 + s),\qquad
        m' = \lfloor m\, 2^{k} / n \rfloor,\qquad s' = s - k,

        y = \mathrm{clamp}\big(\mathrm{MBQM}(\mathrm{wrap}_{32}(S - z_{in} n),\ m', s') + z_{out}\big)

    (:math:`m 2^k < 2^{63}`; :math:`m' < 2^{31}`).  ``axis`` is an int, a sequence (negative values
    and repeats allowed, as TFLite resolves them) or None for all axes; an empty sequence reduces
    nothing (:math:`n = 1`).  LiteRT's reference MEAN has no special case for the H, W reduction of 4-D
    tensors; its optimized kernel does, for int8 with ``keep_dims`` (``kernels="builtin"``:
    :func:`_mean_hw_builtin`; other reductions are the reference arithmetic there).
    ``kernels="xnnpack"``: see :func:`_mean_xnnpack`.
    """
    _kernels(kernels)
    if not isinstance(params, MeanParams):
        raise TypeError(f"params must be MeanParams (from mean_params), got {type(params).__name__}")
    arr = _codes(x, params.dtype)
    axes = _axes(axis, arr.ndim)
    n = int(np.prod([arr.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    if n == 0 or arr.size == 0:
        raise ValueError("quantized_mean: the input or the reduced axes are empty")
    if kernels == "xnnpack":
        return _mean_xnnpack(arr, axes, n, params, keepdims)
    if kernels == "builtin" and keepdims and arr.ndim == 4 and sorted(axes) == [1, 2] and params.dtype == np.int8:
        return _mean_hw_builtin(arr, n, params)
    total = _wrap_int32(np.sum(arr, axis=axes, keepdims=keepdims)) if axes else arr
    k = min(n.bit_length() - 1, 32, 31 + params.shift)
    m = (params.multiplier << k) // n if k >= 0 else params.multiplier >> -k
    s = params.shift - k
    _check_mbqm_shift(s, "quantized_mean")
    v = multiply_by_quantized_multiplier(_wrap_int32(total - params.input_zero_point * n), m, s)
    return _clamp(v + params.output_zero_point, params.dtype)


def _mean_hw_builtin(arr, n, params):
    r"""LiteRT's optimized int8 MEAN over H, W of a 4-D tensor with ``keep_dims`` (``optimized_integer_ops::Mean``,
    one thread, x86-64 build with NEON_2_SSE).  Everything from float32 scales:

    .. math::

        t = \mathrm{fl}_{32}(\mathrm{fl}_{32}(z_{in} s_{in}) / s_{out}),\quad
        b = z_{out} - \operatorname{trunc}(t \pm 0.5),\quad
        (m, s) = \mathrm{QuantizeMultiplier}(\mathrm{fl}_{32}(s_{in} / \mathrm{fl}_{32}(n\,s_{out}))),

        y_c = \mathrm{clamp}(R(S_c) + b)

    with :math:`S_c` the sum of the raw codes; :math:`R` is ``MultiplyByQuantizedMultiplier4Rows``
    (rounding shift, ties up) for channels in whole blocks of 16, ``MultiplyByQuantizedMultiplier``
    for the rest.
    """
    f32 = np.float32
    si, so = f32(params.input_scale), f32(params.output_scale)
    t = f32(f32(params.input_zero_point) * si) / so
    t = t + f32(0.5) if t > 0 else t - f32(0.5)
    bias = params.output_zero_point - int(np.trunc(t))
    m, s = quantize_multiplier(float(si / (f32(n) * so)))
    _check_mbqm_shift(s, "quantized_mean")
    total = _wrap_int32(np.sum(arr, axis=(1, 2), keepdims=True))
    vec = arr.shape[3] // 16 * 16
    head = _srdhm(_wrap_int32(total[..., :vec] << max(s, 0)), m)
    if s < 0:
        head = (head + (1 << (-s - 1))) >> -s
    tail = multiply_by_quantized_multiplier(total[..., vec:], m, s)
    return _clamp(np.concatenate([head, tail], axis=-1) + bias, params.dtype)


def _mean_xnnpack(arr, axes, n, params, keepdims):
    r"""XNNPACK's quantized mean: the int32 sum :math:`S` of the codes, then its reference int32 -> qs8
    convert with :math:`c = \mathrm{fl}_{32}(\mathrm{fl}_{32}(s_{in}/s_{out}) \cdot \mathrm{fl}_{32}(1/n))` and
    :math:`z' = \mathrm{fl}_{32}(z_{out} - \mathrm{fl}_{32}(\mathrm{fl}_{32}(n z_{in}) c))`:
    :math:`y = \mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(S) c + z')))`."""
    f32 = np.float32
    total = np.sum(arr, axis=axes, keepdims=keepdims) if axes else arr
    c = f32(f32(params.input_scale) / f32(params.output_scale)) * (f32(1) / f32(n))
    zp = f32(params.output_zero_point) - f32(f32(n) * f32(params.input_zero_point)) * c
    v = total.astype(np.float32) * c + zp
    info = np.iinfo(params.dtype)
    return np.clip(np.rint(v), info.min, info.max).astype(params.dtype)


# --------------------------------------------------------------------------- data movement
def quantized_max_pool2d(x, pool_size, *, stride=None, padding="VALID", act_min=None, act_max=None) -> np.ndarray:
    r"""TFLite ``MAX_POOL_2D`` (``reference_integer_ops::MaxPool``, NHWC, same quantization in and out).

    :math:`y = \mathrm{clamp}(\max_{\text{window}} x,\ a_{min}, a_{max})`; padded pixels are skipped
    (TFLite clamps the window to the input), a window without any input pixel gives the type's minimum.
    SAME padding puts the odd pixel after, as TFLite's ``ComputePaddingHeightWidth``.

    Parameters
    ----------
    x : ndarray of int8, uint8 or int16, shape (N, H, W, C)
    pool_size, stride : int or (int, int)
        ``stride`` defaults to ``pool_size``.
    padding : "SAME", "VALID" or ((top, bottom), (left, right))
    act_min, act_max : int, optional
        Fused activation clamp (default: the dtype's range).
    """
    arr = np.asarray(x)
    dt = _dtype(arr.dtype, _QUANT_TYPES, "x dtype")
    if arr.ndim != 4 or arr.size == 0:
        raise ValueError(f"x must be a non-empty NHWC array, got shape {arr.shape}")
    info = np.iinfo(dt)
    lo = int(info.min) if act_min is None else act_min
    hi = int(info.max) if act_max is None else act_max
    for name, v in (("act_min", lo), ("act_max", hi)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if not info.min <= lo <= hi <= info.max:
        raise ValueError(f"need {info.min} <= act_min <= act_max <= {info.max}, got {lo}, {hi}")
    k = _pair(pool_size, "pool_size")
    st = k if stride is None else _pair(stride, "stride")
    (pt, pb), (pl, pr) = _explicit_padding(padding, arr.shape[1:3], k, st, (1, 1))
    h, w = arr.shape[1] + pt + pb, arr.shape[2] + pl + pr
    if h < k[0] or w < k[1]:
        raise ValueError(f"pool_size {k} is larger than the padded input ({h}, {w})")
    sentinel = int(info.min) - 1
    padded = np.pad(arr.astype(np.int32), ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=sentinel)
    win = np.lib.stride_tricks.sliding_window_view(padded, k, axis=(1, 2))[:, ::st[0], ::st[1]]
    m = win.max(axis=(-2, -1))
    return np.clip(np.maximum(m, info.min), lo, hi).astype(dt)


def quantized_pad(x, paddings, *, zero_point: int, constant: int | None = None) -> np.ndarray:
    r"""TFLite ``PAD`` / ``PADV2`` on quantized codes (``reference_ops::Pad``).

    ``PAD`` fills with the output zero point (a real 0); ``PADV2`` with its quantized constant, which
    TFLite requires to share the output's scale and zero point (pass its code as ``constant``).

    Parameters
    ----------
    x : ndarray of int8, uint8 or int16
    paddings : sequence of (before, after) pairs, one per dimension, non-negative
    zero_point : int
        Zero point of the input/output tensor (they are the same in TFLite's quantized PAD).
    constant : int, optional
        PADV2's constant code.
    """
    arr = np.asarray(x)
    dt = _dtype(arr.dtype, _QUANT_TYPES, "x dtype")
    zp = _zero_point(zero_point, dt, "zero_point")
    value = zp if constant is None else _zero_point(constant, dt, "constant")
    try:
        pads = np.asarray(paddings, dtype=np.int64).reshape(-1, 2)
    except (TypeError, ValueError):
        raise ValueError(f"paddings must be (before, after) pairs, got {paddings!r}") from None
    if pads.shape[0] != arr.ndim or np.asarray(paddings).ndim != 2:
        raise ValueError(f"paddings must have shape ({arr.ndim}, 2), got {np.asarray(paddings).shape}")
    if np.any(pads < 0):
        raise ValueError(f"paddings must be non-negative, got {pads.tolist()}")
    return np.pad(arr, [tuple(p) for p in pads.tolist()], constant_values=value)


def quantized_concatenation(inputs, axis: int = -1, *, input_quant=None, output_quant=None,
                            requantize: bool = False) -> np.ndarray:
    r"""TFLite ``CONCATENATION`` of quantized codes.

    int8 and int16: TFLite's ``Prepare`` requires every input to have the output's scale and zero point
    (the converter inserts ``QUANTIZE`` ops before the concatenation where they differ) and the kernel
    copies codes.  Inputs with other parameters raise, unless ``requantize=True``: then each is first
    requantized with :func:`requantize_tflite` (what those inserted ``QUANTIZE`` ops compute).

    uint8 with differing parameters: ``reference_ops::ConcatenationWithScaling`` in float32,

    .. math:: y = \mathrm{clamp}\big(\mathrm{int32}(\mathrm{rha}(\mathrm{fl}_{32}(x\,c + b))) + z_y,\ 0,\ 255\big),
              \quad c = \mathrm{fl}_{32}(s_i \cdot \mathrm{fl}_{32}(1/s_y)),\ b = \mathrm{fl}_{32}(-z_i\, c)

    (inputs whose parameters equal the output's are copied).

    Parameters
    ----------
    inputs : sequence of ndarray (same dtype, same shape except along ``axis``)
    axis : int
    input_quant : sequence of (scale, zero_point), optional
        One per input; with ``output_quant``.  Omitted: all inputs share the output's parameters.
    output_quant : (scale, zero_point), optional
    requantize : bool
        int8/int16 only: requantize inputs whose parameters differ (converter behaviour).
    """
    xs = [np.asarray(a) for a in inputs]
    if not xs:
        raise ValueError("quantized_concatenation needs at least one input")
    dt = _dtype(xs[0].dtype, _QUANT_TYPES, "inputs dtype")
    for i, a in enumerate(xs):
        if a.dtype != dt:
            raise TypeError(f"input {i} has dtype {a.dtype}, input 0 has {dt}")
        if a.ndim != xs[0].ndim or a.ndim == 0:
            raise ValueError("inputs must have the same number of dimensions (at least 1)")
    ndim = xs[0].ndim
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim}-dimensional inputs")
    ax = axis % ndim
    for i, a in enumerate(xs):
        if a.shape[:ax] + a.shape[ax + 1:] != xs[0].shape[:ax] + xs[0].shape[ax + 1:]:
            raise ValueError(f"input {i} of shape {a.shape} does not match input 0 {xs[0].shape} off axis {ax}")
    if (input_quant is None) != (output_quant is None):
        raise ValueError("give both input_quant and output_quant, or neither")
    if input_quant is not None:
        if len(input_quant) != len(xs):
            raise ValueError(f"input_quant has {len(input_quant)} entries for {len(xs)} inputs")
        so, zo = output_quant
        so32, zo = _scale(so, "output scale"), _zero_point(zo, dt, "output zero point")
        parts = []
        for i, (a, (si, zi)) in enumerate(zip(xs, input_quant)):
            si32, zi = _scale(si, f"input {i} scale"), _zero_point(zi, dt, f"input {i} zero point")
            if si32 == so32 and zi == zo:
                parts.append(a)
            elif dt == np.uint8:
                c = np.float32(si32 * (np.float32(1) / so32))
                b = np.float32(np.float32(-zi) * c)
                v = _to_int32(_round_half_away(a.astype(np.float32) * c + b)) + zo
                parts.append(_clamp(v, dt))
            elif requantize:
                parts.append(requantize_tflite(a, requantize_params(si32, zi, so32, zo, input_dtype=dt,
                                                                    output_dtype=dt)))
            else:
                raise ValueError(f"input {i} has scale {float(si32)!r} and zero point {zi}, the output "
                                 f"{float(so32)!r} and {zo}: TFLite's {dt.name} CONCATENATION needs them equal "
                                 "(pass requantize=True for the converter's QUANTIZE ops)")
        xs = parts
    return np.concatenate(xs, axis=ax)


# --------------------------------------------------------------------------- LOGISTIC / TANH
def _expm1f(x: np.ndarray) -> np.ndarray:
    r"""fdlibm's float32 ``expm1f`` (glibc up to 2.40), vectorised, every operation in float32.

    Argument reduction :math:`x = k \ln 2 + r` (:math:`\ln 2` split in a 24-bit head and a tail), a
    rational approximation of :math:`e^r - 1` in :math:`r` with the five ``Q`` coefficients, and the
    exponent of the result adjusted by :math:`k` (bit manipulation).  Used by :func:`_tanhf` only.
    """
    f32 = np.float32
    x = np.asarray(x, dtype=np.float32)
    one, half = f32(1.0), f32(0.5)
    hx = x.view(np.int32) & 0x7FFFFFFF
    neg = x < 0
    ln2_hi, ln2_lo, invln2 = f32(6.9313812256e-01), f32(9.0580006145e-06), f32(1.4426950216e+00)
    q1, q2, q3, q4, q5 = (f32(-3.3333335072e-02), f32(1.5873016091e-03), f32(-7.9365076090e-05),
                          f32(4.0082177293e-06), f32(-2.0109921195e-07))
    with np.errstate(all="ignore"):
        near = (hx > 0x3EB17218) & (hx < 0x3F851592)
        kf = np.trunc(invln2 * x + np.where(neg, f32(-0.5), half)).astype(np.float32)
        k = np.where(near, np.where(neg, -1, 1), kf.astype(np.int64))
        t = k.astype(np.float32)
        hi = np.where(near, np.where(neg, x + ln2_hi, x - ln2_hi), x - t * ln2_hi)
        lo = np.where(near, np.where(neg, -ln2_lo, ln2_lo), t * ln2_lo)
        reduce = hx > 0x3EB17218
        xr = np.where(reduce, hi - lo, x)
        c = np.where(reduce, (hi - xr) - lo, f32(0))
        k = np.where(reduce, k, 0)
        hfx = half * xr
        hxs = xr * hfx
        r1 = one + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))))
        tt = f32(3.0) - r1 * hfx
        e = hxs * ((r1 - tt) / (f32(6.0) - xr * tt))
        out_k0 = xr - (xr * e - hxs)
        e2 = (xr * (e - c) - c) - hxs
        out_m1 = half * (xr - e2) - half
        out_p1 = np.where(xr < f32(-0.25), f32(-2.0) * (e2 - (xr + half)), one + f32(2.0) * (xr - e2))

        def add_exponent(y):
            return (y.view(np.int32).astype(np.int64) + (k << 23)).astype(np.int32).view(np.float32)

        y_big = add_exponent(one - (e2 - xr)) - one
        kc = np.clip(k, 0, 22)
        t_small = (0x3F800000 - (0x1000000 >> kc)).astype(np.int32).view(np.float32)
        y_small = add_exponent(t_small - (e2 - xr))
        t_mid = ((0x7F - np.clip(k, 0, 0x7F)) << 23).astype(np.int32).view(np.float32)
        y_mid = add_exponent((xr - (e2 + t_mid)) + one)
        out = np.select([k == 0, k == -1, k == 1, (k <= -2) | (k > 56), k < 23],
                        [out_k0, out_m1, out_p1, y_big, y_small], y_mid)
        out = np.where(hx < 0x33000000, x, out)                       # |x| < 2^-25: x
        out = np.where((hx >= 0x4195B844) & neg, f32(-1.0), out)      # x < -27 ln 2: -1
        out = np.where(hx >= 0x42B17218, np.where(neg, f32(-1.0), np.float32(np.inf)), out)
        out = np.where(hx > 0x7F800000, x, out)
    return out.astype(np.float32)


def _tanhf(x: np.ndarray) -> np.ndarray:
    r"""fdlibm's float32 ``tanhf`` (what glibc before 2.41 computes for ``std::tanh(float)``):
    :math:`1 - 2/(\mathrm{expm1f}(2|x|) + 2)` for :math:`1 \le |x| < 22`,
    :math:`-t/(t+2)` with :math:`t = \mathrm{expm1f}(-2|x|)` below 1, :math:`\pm 1` from 22 on; float32 throughout.

    It is up to 2 ulp from the correctly rounded value (17 % of arguments differ by one or two), and that
    changes a TANH table entry about once in 20 000 tables; glibc 2.41 and later (CORE-MATH, correctly
    rounded) or another C library would give LiteRT those other entries."""
    f32 = np.float32
    x = np.asarray(x, dtype=np.float32)
    ax = np.abs(x)
    ix = x.view(np.int32) & 0x7FFFFFFF
    one, two = f32(1.0), f32(2.0)
    with np.errstate(all="ignore"):
        t_big = _expm1f(two * ax)
        z_big = one - two / (t_big + two)
        t_small = _expm1f(-two * ax)
        z_small = -t_small / (t_small + two)
        z = np.where(ix >= 0x3F800000, z_big, z_small)
        z = np.where(ix >= 0x41B00000, one, z)
        out = np.where(x < 0, -z, z)
        out = np.where(ix < 0x24000000, x * (one + x), out)
        out = np.where(ix == 0, x, out)
        out = np.where(ix > 0x7F800000, x, out)
    return out.astype(np.float32)


def _expf(x: np.ndarray) -> np.ndarray:
    """float32 ``expf``: :math:`e^x` correctly rounded to float32 (via float64).  glibc's ``expf`` differs from
    this in about 0.06 % of arguments by one ulp, which changed no LOGISTIC table entry in 5 million
    (scale, zero point, code) triples checked when this was written (the tests compare 150 random
    tables with the C library's)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, dtype=np.float64)).astype(np.float32)


def _lut_int8(input_scale, input_zp, output_scale, output_zp, dtype, transform) -> tuple:
    r"""TFLite ``LUTPopulate<int8/uint8>`` (``detail::LUTPopulateInt8``): for every code :math:`q`,

    .. math:: \mathrm{clamp}(\mathrm{int32}(\mathrm{fl}_{32}(\mathrm{rha}(\mathrm{fl}_{32}(f(\mathrm{fl}_{32}(s_{in}(q - z_{in})))
              \cdot \mathrm{fl}_{32}(1/s_{out}))) + z_{out})))

    Returns the 256 outputs in code order (``q_min`` ... ``q_max``).
    """
    info = np.iinfo(dtype)
    codes = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64)
    deq = np.float32(input_scale) * (codes - input_zp).astype(np.float32)
    inv = np.float32(1) / np.float32(output_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        rescaled = _round_half_away(transform(deq) * inv).astype(np.float32)
        q = _to_int32(rescaled + np.float32(output_zp))
    return tuple(np.clip(q, info.min, info.max).tolist())


def _lut_xnnpack(input_scale, input_zp, output_scale, output_zp, dtype, transform) -> tuple:
    r"""XNNPACK's table for a quantized unary op (its reference op evaluated on all 256 codes):
    :math:`\mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(f(\mathrm{fl}_{32}((q - z_{in})\,s_{in})) \cdot
    \mathrm{fl}_{32}(1/s_{out})) + z_{out}))` (``nearbyint``: half to even; NaN gives 0)."""
    info = np.iinfo(dtype)
    codes = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64)
    x = (codes.astype(np.float32) - np.float32(input_zp)) * np.float32(input_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        v = transform(x) * (np.float32(1) / np.float32(output_scale)) + np.float32(output_zp)
        v = np.where(np.isnan(v), np.float32(0), v)
        return tuple(np.clip(np.rint(v), info.min, info.max).astype(np.int64).tolist())


def _sigmoid_xnnpack(x):
    r"""XNNPACK's reference sigmoid: :math:`e/(1+e)` with :math:`e = \exp(\mathrm{double}(x))`, rounded to
    float32; 1 above 100, 0 below -100."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float64))
        r = (e / (1 + e)).astype(np.float32)
    return np.where(x > 100, np.float32(1), np.where(x < -100, np.float32(0), r))


def _sigmoid_f32(v):
    one = np.float32(1)
    with np.errstate(over="ignore"):
        return one / (one + _expf(-v))


@dataclass(frozen=True)
class LogisticParams:
    r"""TFLite int8/uint8 ``LOGISTIC`` parameters.

    Attributes
    ----------
    lut : tuple of int
        LiteRT's ``SigmoidPrepare`` table (reference and optimized kernels): the output code of every
        input code, in code order, from :math:`\mathrm{fl}_{32}(1 / (1 + \mathrm{expf}(-x)))`
        (see :func:`_lut_int8`).
    xnnpack_lut : tuple of int
        XNNPACK's table for the same op (:func:`_lut_xnnpack`).
    input_multiplier, input_left_shift, input_range_radius : int
        The fixed-point path of ``reference_integer_ops::Logistic`` (TFLite Micro's kernel):
        :math:`q, \ell = \mathrm{frexp}(s_{in}\,2^{27})`, :math:`m = \mathrm{rha}(q\,2^{31})`,
        radius = :func:`calculate_input_radius` ``(4, ℓ, 31)``.
    """

    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    dtype: np.dtype
    lut: tuple
    input_multiplier: int
    input_left_shift: int
    input_range_radius: int
    xnnpack_lut: tuple


def _frexp_multiplier(real: float, integer_bits: int):
    """``frexp`` of :math:`s\\,2^{31-b}` and ``rha(q * 2^31)`` (TFLite Micro's LOGISTIC/TANH Prepare)."""
    q, e = math.frexp(real * float(1 << (31 - integer_bits)))
    m = int(math.copysign(math.floor(abs(q) * 2.0 ** 31 + 0.5), q))
    if m == 1 << 31:      # cannot happen for a float32 scale (24-bit significand)
        raise ValueError("the input multiplier rounds to 2^31")
    return m, e


@functools.lru_cache(maxsize=512)
def _logistic_params(si, zi, so, zo, dt):
    lut = _lut_int8(si, zi, so, zo, dt, _sigmoid_f32)
    m, e = _frexp_multiplier(float(si), 4)
    return LogisticParams(float(si), zi, float(so), zo, dt, lut, m, e, calculate_input_radius(4, e, 31),
                          _lut_xnnpack(si, zi, so, zo, dt, _sigmoid_xnnpack))


def logistic_params(input_scale: float, input_zero_point: int, *, output_scale: float = 1 / 256,
                    output_zero_point: int | None = None, dtype=np.int8) -> LogisticParams:
    """Parameters of :func:`quantized_logistic` (LiteRT ``SigmoidPrepare``; TFLite Micro
    ``CalculateArithmeticOpDataLogistic`` for the fixed-point path).  TFLite requires the output scale
    :math:`1/256`; the output zero point defaults to the type's minimum (-128 for int8, 0 for uint8)."""
    dt = _dtype(dtype, (np.int8, np.uint8))
    so = _scale(output_scale, "output_scale")
    if so != np.float32(1 / 256):
        raise ValueError(f"TFLite's quantized LOGISTIC needs output scale 1/256, got {float(so)!r}")
    zo = int(np.iinfo(dt).min) if output_zero_point is None else _zero_point(output_zero_point, dt, "output_zero_point")
    return _logistic_params(_scale(input_scale, "input_scale"), _zero_point(input_zero_point, dt, "input_zero_point"),
                            so, zo, dt)


def _lut_apply(x, params, lut) -> np.ndarray:
    codes = _codes(x, params.dtype)
    table = np.asarray(lut, dtype=np.int64)
    return table[codes - int(np.iinfo(params.dtype).min)].astype(params.dtype)


def _fixed_point_activation(x, params, fn, out_shift: int, out_zp: int, name: str) -> np.ndarray:
    d = _codes(x, params.dtype) - params.input_zero_point
    r = params.input_range_radius
    inside = np.where((d > -r) & (d < r), d, 0)
    v = multiply_by_quantized_multiplier(inside, params.input_multiplier, params.input_left_shift)
    out = _rdbpot(fn(v, 4), out_shift) + out_zp
    info = np.iinfo(params.dtype)
    out = np.where(d <= -r, info.min, np.where(d >= r, info.max, out))
    return _clamp(out, params.dtype)


def quantized_logistic(x, params: LogisticParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``LOGISTIC`` on int8 (or uint8) codes.

    ``kernels="reference"`` (and ``"builtin"``, the same table): LiteRT's int8 LOGISTIC, reference kernel
    included, is a table lookup, ``y = lut[x]``, the table computed in float32 at ``Prepare``
    (:class:`LogisticParams`).  ``kernels="xnnpack"``: XNNPACK's own table (:func:`_lut_xnnpack` with a
    double-precision sigmoid and rounding half to even), which differs on rare codes.

    ``kernels="integer"``: ``reference_integer_ops::Logistic`` (the fixed-point kernel of TFLite Micro,
    not used by LiteRT for int8): with :math:`d = x - z_{in}`, :math:`y = -128` if :math:`d \le -r`,
    :math:`127` if :math:`d \ge r`, else

    .. math:: y = \mathrm{clamp}\big(\mathrm{RDBPOT}(\mathrm{logistic}_{F4}(\mathrm{MBQM}(d, m, \ell)),\ 23) - 128\big)

    with gemmlowp's :func:`gemmlowp_logistic` on Q4.27 (:math:`|d|\,2^{\ell} < 15 \cdot 2^{27}` inside the
    radius, so the left shift never overflows).
    """
    _kernels(kernels, _KERNELS + ("integer",))
    if not isinstance(params, LogisticParams):
        raise TypeError(f"params must be LogisticParams (from logistic_params), got {type(params).__name__}")
    if kernels != "integer":
        return _lut_apply(x, params, params.xnnpack_lut if kernels == "xnnpack" else params.lut)
    if params.dtype != np.int8 or params.output_zero_point != -128:
        raise ValueError("the fixed-point LOGISTIC kernel is int8 with output zero point -128")
    return _fixed_point_activation(x, params, _fixed_logistic, 23, -128, "logistic")


@dataclass(frozen=True)
class TanhParams:
    r"""TFLite int8/uint8 ``TANH`` parameters: LiteRT's ``TanhPrepare`` table (from
    :math:`\mathrm{tanhf}`, see :func:`_tanhf`) and TFLite Micro's fixed-point multiplier (as
    :class:`LogisticParams`)."""

    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    dtype: np.dtype
    lut: tuple
    input_multiplier: int
    input_left_shift: int
    input_range_radius: int
    xnnpack_lut: tuple


@functools.lru_cache(maxsize=512)
def _tanh_params(si, zi, so, zo, dt):
    lut = _lut_int8(si, zi, so, zo, dt, _tanhf)
    m, e = _frexp_multiplier(float(si), 4)
    return TanhParams(float(si), zi, float(so), zo, dt, lut, m, e, calculate_input_radius(4, e, 31),
                      _lut_xnnpack(si, zi, so, zo, dt, _tanhf))


def tanh_params(input_scale: float, input_zero_point: int, *, output_scale: float = 1 / 128,
                output_zero_point: int | None = None, dtype=np.int8) -> TanhParams:
    """Parameters of :func:`quantized_tanh` (LiteRT ``TanhPrepare``; TFLite Micro's tanh Prepare).  The
    converter gives TANH the output scale :math:`1/128` and zero point 0 (128 for uint8), the defaults."""
    dt = _dtype(dtype, (np.int8, np.uint8))
    zo = (0 if dt == np.int8 else 128) if output_zero_point is None else \
        _zero_point(output_zero_point, dt, "output_zero_point")
    return _tanh_params(_scale(input_scale, "input_scale"), _zero_point(input_zero_point, dt, "input_zero_point"),
                        _scale(output_scale, "output_scale"), zo, dt)


def quantized_tanh(x, params: TanhParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``TANH`` on int8 (or uint8) codes.

    ``kernels="reference"`` (and ``"builtin"``, the same table): the ``Prepare``-time table lookup
    ``y = lut[x]`` of LiteRT, built from glibc's float32 ``tanhf``.  ``kernels="xnnpack"``: XNNPACK's
    table (:func:`_lut_xnnpack`: the same ``tanhf``, rounded half to even).

    ``kernels="integer"``: ``reference_integer_ops::Tanh`` (TFLite Micro): saturation to :math:`\pm`
    outside the radius, else :math:`\mathrm{clamp}(\mathrm{RDBPOT}(\tanh_{F4}(\mathrm{MBQM}(d, m, \ell)), 24))`
    with :func:`gemmlowp_tanh` (output scale :math:`1/128`, zero point 0).
    """
    _kernels(kernels, _KERNELS + ("integer",))
    if not isinstance(params, TanhParams):
        raise TypeError(f"params must be TanhParams (from tanh_params), got {type(params).__name__}")
    if kernels != "integer":
        return _lut_apply(x, params, params.xnnpack_lut if kernels == "xnnpack" else params.lut)
    if params.dtype != np.int8 or params.output_zero_point != 0:
        raise ValueError("the fixed-point TANH kernel is int8 with output zero point 0")
    return _fixed_point_activation(x, params, _fixed_tanh, 24, 0, "tanh")


# --------------------------------------------------------------------------- SOFTMAX
@dataclass(frozen=True)
class SoftmaxParams:
    r"""TFLite quantized ``SOFTMAX`` (``SoftmaxPrepare<kReference>``).

    Attributes
    ----------
    input_multiplier, input_left_shift : int
        ``PreprocessSoftmaxScaling(beta, s_in, 5)``: ``QuantizeMultiplierGreaterThanOne`` of
        :math:`\min(\beta s_{in} 2^{26},\ 2^{31} - 1)` (double).
    diff_min : int
        :math:`-` :func:`calculate_input_radius` ``(5, ℓ)``: input differences below it give exactly 0.
    beta, input_scale, output_scale, output_zero_point : for the optimized (float table) kernel.
    """

    beta: float
    input_scale: float
    input_multiplier: int
    input_left_shift: int
    diff_min: int
    output_scale: float
    output_zero_point: int
    input_dtype: np.dtype
    output_dtype: np.dtype


@functools.lru_cache(maxsize=512)
def _softmax_params(beta, si, so, zo, dti, dto):
    real = min(float(beta) * float(si) * float(1 << 26), float((1 << 31) - 1))
    if not real > 1.0:
        raise ValueError(f"softmax_params: beta * input_scale * 2^26 = {real!r} must exceed 1 "
                         "(TFLite's QuantizeMultiplierGreaterThanOne check)")
    m, s = quantize_multiplier(real)
    return SoftmaxParams(float(beta), float(si), m, s, -calculate_input_radius(5, s, 31), float(so), zo, dti, dto)


def softmax_params(input_scale: float, *, beta: float = 1.0, output_scale: float | None = None,
                   output_zero_point: int | None = None, input_dtype=np.int8, output_dtype=None) -> SoftmaxParams:
    """Parameters of :func:`quantized_softmax`.  The output is the converter's: scale :math:`1/256`
    (:math:`1/65536` for int16) and the type's minimum as zero point; ``beta`` is float32 in the model."""
    dti = _dtype(input_dtype, (np.int8, np.uint8), "input_dtype")
    dto = dti if output_dtype is None else _dtype(output_dtype, (np.int8, np.uint8, np.int16), "output_dtype")
    so = _scale((1 / 65536 if dto == np.int16 else 1 / 256) if output_scale is None else output_scale,
                "output_scale")
    zo = int(np.iinfo(dto).min) if output_zero_point is None else _zero_point(output_zero_point, dto,
                                                                               "output_zero_point")
    b = np.float32(beta)
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"beta must be positive and finite, got {beta!r}")
    return _softmax_params(float(b), _scale(input_scale, "input_scale"), so, zo, dti, dto)


def quantized_softmax(x, params: SoftmaxParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``SOFTMAX`` over the last axis (``reference_ops::Softmax``, int8/uint8 input).

    Per row, with :math:`d_j = x_j - \max x` and the constants of :class:`SoftmaxParams`:

    .. math::

        e_j = \mathrm{exp}_{F5\to F0}(\mathrm{SRDHM}(d_j 2^{\ell}, m))\ \ (d_j \ge d_{min}),\qquad
        \Sigma = \textstyle\sum_j \mathrm{RDBPOT}(e_j, 12)\ \ (\text{Q12.19, int32}),

        y_j = \mathrm{clamp}\big(\mathrm{RDBPOT}(\mathrm{SRDHM}(r, e_j),\ n + 31 - b) + q_{min}\big)

    where :math:`\Sigma = 2^{12 - h}(1 + f)`, :math:`h` = leading zeros of :math:`\Sigma`,
    :math:`r = 1/(1 + f)` by ``one_over_one_plus_x_for_x_in_0_1`` (``GetReciprocal``),
    :math:`n = 12 - h`, :math:`b` the output bits; :math:`d_j < d_{min}` gives :math:`q_{min}`.  The input
    zero point plays no part (only differences).  :math:`|d_j 2^\ell| \le 31 \cdot 2^{26}` where used.

    ``kernels="builtin"``: LiteRT's optimized kernel (``optimized_ops::Softmax`` with the float table of
    ``PopulateSoftmaxLookupTable``): :math:`t_k = \mathrm{expf}(\mathrm{fl}_{32}(-s_{in}\beta) \cdot k)`,
    :math:`\Sigma = \sum_j t_{\max - x_j}` summed in float32 in order,
    :math:`y_j = \mathrm{rha}(t_{\max - x_j} \cdot \mathrm{fl}_{32}(1 / (\Sigma\, s_{out}))) + z_{out}`; it differs
    from the fixed point on about one element in 20 000.  XNNPACK does not take int8 SOFTMAX (LiteRT then
    runs the builtin kernel: ``kernels="xnnpack"`` is the same).
    """
    _kernels(kernels)
    if not isinstance(params, SoftmaxParams):
        raise TypeError(f"params must be SoftmaxParams (from softmax_params), got {type(params).__name__}")
    arr = _codes(x, params.input_dtype)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {arr.shape}")
    info = np.iinfo(params.output_dtype)
    diff = arr - arr.max(axis=-1, keepdims=True)
    if kernels != "reference":
        return _softmax_float_table(diff, params)
    used = diff >= params.diff_min
    rescaled = _srdhm(np.where(used, diff, 0) << params.input_left_shift, params.input_multiplier)
    e = np.where(used, _exp_neg(rescaled, 5), 0)
    total = _wrap_int32(np.sum(_rdbpot(e, 12), axis=-1, keepdims=True))
    bits = np.frexp((total & 0xFFFFFFFF).astype(np.float64))[1]     # bit length of the uint32 sum
    headroom = 32 - bits
    shifted = _wrap_int32(((total & 0xFFFFFFFF) << headroom) - (1 << 31))
    recip = _one_over_one_plus_x(shifted)
    exponent = 12 - headroom + 31 - 8 * info.dtype.itemsize
    if np.any(exponent < 0) or np.any(exponent > 31):
        raise ValueError("quantized_softmax: the row sums leave TFLite's supported range (rows too long)")
    out = _rdbpot(_srdhm(recip, e), exponent) + int(info.min)
    return np.where(used, np.clip(out, info.min, info.max), info.min).astype(info.dtype)


def _softmax_float_table(diff: np.ndarray, params: SoftmaxParams) -> np.ndarray:
    f32 = np.float32
    scale = -f32(params.input_scale) * f32(params.beta)
    table = _expf(scale * np.arange(256, dtype=np.float32))      # table_offset[x] = expf(scale * (max - x))
    vals = table[-diff]
    total = np.add.accumulate(vals, axis=-1, dtype=np.float32)[..., -1:]
    inv = f32(1) / (total * f32(params.output_scale))
    prob = vals * inv
    info = np.iinfo(params.output_dtype)
    q = _to_int32(_round_half_away(prob)) + params.output_zero_point
    return np.clip(q, info.min, info.max).astype(info.dtype)


# --------------------------------------------------------------------------- HARD_SWISH
@dataclass(frozen=True)
class HardSwishParams:
    r"""TFLite ``HardSwishParams`` (``HardSwishPrepare``), all from float32 arithmetic:

    :math:`h = s_{in}/128`, output multiplier :math:`\mathrm{fl}_{32}(h / s_{out})`, reluish multiplier
    :math:`\mathrm{fl}_{32}(h / \mathrm{fl}_{32}(3/32768))`; each through ``QuantizeMultiplier`` and
    ``DownScaleInt32ToInt16Multiplier`` (:math:`\min(\lfloor (m + 2^{15}) / 2^{16} \rfloor, 2^{15}-1)`).
    TFLite requires the output exponent :math:`\le 0`.
    """

    input_zero_point: int
    output_zero_point: int
    output_multiplier_fixedpoint_int16: int
    output_multiplier_exponent: int
    reluish_multiplier_fixedpoint_int16: int
    reluish_multiplier_exponent: int
    dtype: np.dtype


def _downscale_int16(m: int) -> int:
    if m >= INT32_MAX - (1 << 15):
        return (1 << 15) - 1
    return (m + (1 << 15)) >> 16


def hard_swish_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int, *,
                      dtype=np.int8) -> HardSwishParams:
    """Parameters of :func:`quantized_hard_swish` (TFLite ``HardSwishPrepare``)."""
    dt = _dtype(dtype, (np.int8, np.uint8))
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    zi = _zero_point(input_zero_point, dt, "input_zero_point")
    zo = _zero_point(output_zero_point, dt, "output_zero_point")
    hires = np.float32(1 / 128) * si
    mo, eo = quantize_multiplier(float(hires / so))
    mr, er = quantize_multiplier(float(hires / np.float32(3 / 32768)))
    if eo > 0:
        raise ValueError(f"hard_swish_params: output multiplier exponent {eo} > 0 (TFLite requires <= 0: "
                         "the output scale is too small for the input scale)")
    if eo < -15 or not -15 <= er <= 30:
        raise ValueError("hard_swish_params: a multiplier exponent leaves TFLite's int16 arithmetic "
                         f"(output {eo}, reluish {er}; RoundingDivideByPOT on int16 takes at most 15)")
    return HardSwishParams(zi, zo, _downscale_int16(mo), eo, _downscale_int16(mr), er, dt)


def _srdhm16(a, b):
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16: :math:`\\operatorname{trunc}((ab \\pm 2^{14}) / 2^{15})`."""
    ab = a * b
    num = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(num >= 0, num >> 15, -((-num) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, q)


def _sat16(v):
    return np.clip(v, -32768, 32767)


def quantized_hard_swish(x, params: HardSwishParams) -> np.ndarray:
    r"""TFLite ``HARD_SWISH`` (``reference_ops::HardSwish``, int8/uint8) in its int16 fixed point.

    With :math:`d = x - z_{in}`, :math:`h = 128 d` (int16), SRDHM the int16 ``SaturatingRoundingDoublingHighMul``:

    .. math::

        p = \mathrm{SRDHM}(h, m_o),\qquad
        \rho = \mathrm{rescale}(h;\ m_r, e_r) \in [-2^{15}, 2^{15}),\qquad
        \rho' = \lfloor (\rho + 2^{15}) / 2 \rfloor,

        y = \mathrm{clamp}\big(\mathrm{RDBPOT}(\operatorname{trunc}(\rho' p / 2^{15}),\ -e_o) + z_{out}\big)

    where ``rescale`` is a saturating left shift by :math:`e_r - 1`, SRDHM by :math:`m_r`, a saturating
    left shift by 1 (for :math:`e_r > 0`) or ``RoundingDivideByPOT`` by :math:`-e_r` (for :math:`e_r < 0`),
    and the last product is the non-rounding ``SaturatingDoublingHighMul`` (truncation toward zero).
    LiteRT's optimized kernel and XNNPACK (which does not take it) give the same codes on every vector.
    """
    if not isinstance(params, HardSwishParams):
        raise TypeError(f"params must be HardSwishParams (from hard_swish_params), got {type(params).__name__}")
    d = _codes(x, params.dtype) - params.input_zero_point
    hires = d * 128                                              # |d| <= 255: fits int16
    pre_out = _srdhm16(hires, params.output_multiplier_fixedpoint_int16)
    e = params.reluish_multiplier_exponent
    r = hires
    if e > 0:
        r = _sat16(r * (1 << (e - 1)))
    r = _srdhm16(r, params.reluish_multiplier_fixedpoint_int16)
    if e > 0:
        r = _sat16(r * 2)
    elif e < 0:
        r = _rdbpot(r, -e)
    r = (r + (1 << 15)) >> 1
    prod = r * pre_out
    pre_shift = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))
    out = _rdbpot(pre_shift, -params.output_multiplier_exponent) + params.output_zero_point
    return _clamp(out, params.dtype)


# --------------------------------------------------------------------------- LEAKY_RELU
@dataclass(frozen=True)
class LeakyReluParams:
    r"""TFLite ``LeakyReluOpData`` (``LeakyReluPrepare``): ``QuantizeMultiplier`` of
    :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(s_{in}\alpha)/s_{out})` and of :math:`\mathrm{fl}_{32}(s_{in}/s_{out})`
    (float32 arithmetic, as TFLite)."""

    input_zero_point: int
    output_zero_point: int
    multiplier_alpha: int
    shift_alpha: int
    multiplier_identity: int
    shift_identity: int
    dtype: np.dtype
    alpha: float
    input_scale: float
    output_scale: float


def leaky_relu_params(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
                      alpha: float, *, dtype=np.int8) -> LeakyReluParams:
    """Parameters of :func:`quantized_leaky_relu` (TFLite ``LeakyReluPrepare``; ``alpha`` is float32)."""
    dt = _dtype(dtype, _QUANT_TYPES)
    si, so = _scale(input_scale, "input_scale"), _scale(output_scale, "output_scale")
    zi = _zero_point(input_zero_point, dt, "input_zero_point")
    zo = _zero_point(output_zero_point, dt, "output_zero_point")
    a = np.float32(alpha)
    if not np.isfinite(a):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
    ma, sa = quantize_multiplier(float((si * a) / so))
    mi, sid = quantize_multiplier(float(si / so))
    for s in (sa, sid):
        _check_mbqm_shift(s, "leaky_relu_params")
    if dt == np.int16 and (zi or zo):
        raise ValueError("TFLite's int16 LEAKY_RELU needs zero points 0")
    return LeakyReluParams(zi, zo, ma, sa, mi, sid, dt, float(a), float(si), float(so))


def quantized_leaky_relu(x, params: LeakyReluParams, *, kernels: str = "reference") -> np.ndarray:
    r"""TFLite ``LEAKY_RELU`` (``reference_ops::QuantizeLeakyRelu``).

    .. math:: y = \mathrm{clamp}\Big(z_{out} + \begin{cases} \mathrm{MBQM}(d, m_{id}, s_{id}) & d \ge 0 \\
              \pm\mathrm{MBQM}(d, |m_\alpha|, s_\alpha) & d < 0 \end{cases}\Big),\quad d = x - z_{in}

    (the sign of a negative :math:`\alpha` is applied after the rounding, as TFLite does).
    ``kernels="xnnpack"``: see :func:`_leaky_relu_xnnpack`.
    """
    _kernels(kernels)
    if not isinstance(params, LeakyReluParams):
        raise TypeError(f"params must be LeakyReluParams (from leaky_relu_params), got {type(params).__name__}")
    d = _codes(x, params.dtype) - params.input_zero_point
    if kernels == "xnnpack":
        return _leaky_relu_xnnpack(d, params)
    return _leaky_relu_ref(d, params)


def _leaky_relu_ref(d, params):
    pos = multiply_by_quantized_multiplier(np.maximum(d, 0), params.multiplier_identity, params.shift_identity)
    neg = multiply_by_quantized_multiplier(np.minimum(d, 0), abs(params.multiplier_alpha), params.shift_alpha)
    if params.multiplier_alpha < 0:
        neg = -neg
    return _clamp(np.where(d >= 0, pos, neg) + params.output_zero_point, params.dtype)


def _leaky_relu_xnnpack(d, params):
    r"""XNNPACK ``qs8-vlrelu``: :math:`p = \mathrm{fl}_{32}(s_{in}/s_{out})`, :math:`\mu_+ = \mathrm{rhe}(256 p)`,
    :math:`\mu_- = \mathrm{rhe}(256\,\mathrm{fl}_{32}(p\alpha))`,
    :math:`y = \mathrm{clamp}(\lfloor (256 z_{out} + 128 + \mu d) / 256 \rfloor)` with :math:`\mu = \mu_-` for
    :math:`d < 0`.  The delegate takes the op only for :math:`2^{-8} \le p \le 2^7` and
    :math:`2^{-8} \le |p\alpha| \le 2^7` (else LiteRT runs the reference arithmetic)."""
    p = np.float32(params.input_scale) / np.float32(params.output_scale)
    n = p * np.float32(params.alpha)
    lim_lo, lim_hi = np.float32(2.0 ** -8), np.float32(2.0 ** 7)
    if params.dtype != np.int8 or not (lim_lo <= p <= lim_hi and lim_lo <= abs(n) <= lim_hi):
        return _leaky_relu_ref(d, params)
    mu_pos, mu_neg = int(np.rint(np.float32(256) * p)), int(np.rint(np.float32(256) * n))
    acc = (params.output_zero_point << 8) + 0x80 + d * np.where(d < 0, mu_neg, mu_pos)
    return _clamp(acc >> 8, params.dtype)
