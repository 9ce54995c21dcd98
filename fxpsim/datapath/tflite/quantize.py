"""TFLite QUANTIZE (float -> codes, codes -> codes) and DEQUANTIZE."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..requantize import (
    _srdhm, _wrap_int32, multiply_by_quantized_multiplier, quantize_multiplier,
)
from ._common import _check_mbqm_shift, _clamp, _codes, _dtype, _kernels, _round_half_away, _scale, _to_int32, _zero_point

__all__ = ['quantize_tflite', 'dequantize_tflite', 'RequantizeParams', 'requantize_params', 'requantize_tflite']


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
