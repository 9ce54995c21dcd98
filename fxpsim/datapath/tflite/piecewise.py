"""TFLite HARD_SWISH and LEAKY_RELU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..requantize import (
    INT32_MAX, _rdbpot, multiply_by_quantized_multiplier, quantize_multiplier,
)
from ._common import _check_mbqm_shift, _clamp, _codes, _dtype, _kernels, _scale, _zero_point
from .quantize import _QUANT_TYPES

__all__ = ['HardSwishParams', 'hard_swish_params', 'quantized_hard_swish', 'LeakyReluParams', 'leaky_relu_params', 'quantized_leaky_relu']


# --------------------------------------------------------------------------- HARD_SWISH
@dataclass(frozen=True)
class HardSwishParams:
    r"""TFLite ``HardSwishParams`` (``HardSwishPrepare``), all from float32 arithmetic:

    :math:`h = s_{in}/128`, output multiplier :math:`\mathrm{fl}_{32}(h / s_{out})`, reluish multiplier
    :math:`\mathrm{fl}_{32}(h / \mathrm{fl}_{32}(3/32768))`; each through ``QuantizeMultiplier`` and
    ``DownScaleInt32ToInt16Multiplier`` (:math:`\min(\lfloor (m + 2^{15}) / 2^{16} \rfloor, 2^{15}-1)`).
    TFLite requires the output exponent :math:`\le 0` (every kernel set). ``QuantizeMultiplier`` keeps both
    exponents in :math:`[-31, 30]` (it flushes a multiplier below :math:`2^{-32}` to 0 with exponent 0), so
    :func:`quantized_hard_swish`'s int16 shifts stay within 31 bits.
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
                         "the output scale is too small for the input scale; LiteRT's HardSwishPrepare fails in "
                         "every kernel set)")
    return HardSwishParams(zi, zo, _downscale_int16(mo), eo, _downscale_int16(mr), er, dt)


def _srdhm16(a, b):
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16: :math:`\\operatorname{trunc}((ab \\pm 2^{14}) / 2^{15})`."""
    ab = a * b
    num = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(num >= 0, num >> 15, -((-num) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, q)


def _rdbpot16(x, e: int):
    r"""gemmlowp ``RoundingDivideByPOT`` on ``int16_t`` values for :math:`0 \le e \le 31`.

    For :math:`e \le 15` the usual rounding division. For :math:`16 \le e \le 31` the mask
    :math:`2^e - 1` truncated to int16 is :math:`-1` (all ones), the remainder is :math:`x` and the threshold
    :math:`-1 + [x < 0]`, so the result is :math:`(x \gg e) + [x > \text{threshold}]`: :math:`+1` for
    :math:`x \ge 0`, :math:`-1` for :math:`x < 0` (what LiteRT computes in all three kernel sets on such
    scales; tested live).
    """
    if e <= 15:
        return _rdbpot(x, e)
    return np.where(x >= 0, 1, -1)


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
        r = _rdbpot16(r, -e)
    r = (r + (1 << 15)) >> 1
    prod = r * pre_out
    pre_shift = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))
    out = _rdbpot16(pre_shift, -params.output_multiplier_exponent) + params.output_zero_point
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
