"""TFLite MUL and SUB (and XNNPACK's ADD), int8 with their requantization."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..integer_ops import _clamp_range, quantized_add
from ..requantize import (
    _wrap_int32, activation_range,
    multiply_by_quantized_multiplier, quantize_multiplier, tflite_add_params,
)
from ._common import _check_mbqm_shift, _clamp, _codes, _dtype, _kernels, _scale, _zero_point

__all__ = ['MulParams', 'mul_params', 'quantized_mul', 'SubParams', 'sub_params', 'quantized_sub', 'quantized_add_xnnpack']


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
