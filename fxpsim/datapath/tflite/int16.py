r"""LiteRT's arithmetic for 16x8 models (int16 activations, int8 weights, int64 biases:
``OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``), where it is not the int8 arithmetic with
another code range.

* MAC ops (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED): the products :math:`x w` (zero points 0) accumulate in
  int64 with the int64 bias; the accumulator is requantized by the 64-bit ``MultiplyByQuantizedMultiplier``
  (:func:`mbqm_int64`: the 31-bit multiplier rounded to 15 bits, one rounding shift), the same in every kernel set
  (the optimized builtin kernels and XNNPACK fall back to the reference kernel for int16; checked live).
* ADD / SUB, general scales: TFLite's 8-bit arithmetic with a left shift of 15 instead of 20
  (``add::Prepare``/``sub::PrepareGeneralSubOp``); :func:`add_left_shift` says which scales take it.
"""
from __future__ import annotations

import math

import numpy as np

from ..integer_checks import _wrap_int32

__all__ = ["mbqm_int64", "reduced_multiplier", "add_left_shift", "is_power_of_two_scale", "INT16_LEFT_SHIFT"]

#: The left shift of TFLite's general int16 ADD/SUB (20 for 8-bit codes).
INT16_LEFT_SHIFT = 15


def reduced_multiplier(multiplier) -> np.ndarray:
    r"""The 15-bit multiplier of LiteRT's 64-bit ``MultiplyByQuantizedMultiplier``:
    :math:`\mu = \lfloor (m + 2^{15}) / 2^{16} \rfloor` for :math:`m < \mathtt{0x7FFF0000}`, else :math:`2^{15} - 1`
    (so that :math:`\mu` stays below :math:`2^{15}`)."""
    m = np.asarray(multiplier, dtype=np.int64)
    return np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)


def mbqm_int64(acc, multiplier, shift) -> np.ndarray:
    r"""LiteRT's ``MultiplyByQuantizedMultiplier(int64_t x, int32_t m, int shift)`` (the double-rounding build):

    .. math:: y = \mathrm{wrap}_{32}\big(\lfloor (x\,\mu + 2^{14 - e}) / 2^{15 - e} \rfloor\big),
              \qquad \mu = \text{:func:`reduced_multiplier`}(m)

    with :math:`e` = ``shift`` (:math:`-31 \le e \le 7`; the arithmetic shift floors). LiteRT assumes
    :math:`|x| < 2^{47}`, so :math:`|x \mu| < 2^{62}`; the int32 result is ``static_cast`` (wraps).

    Parameters
    ----------
    acc : array_like of int
        int64 accumulators (the last axis is the output channel when ``multiplier`` has one per channel).
    multiplier, shift : int or array_like of int
        ``QuantizeMultiplier`` of the real scale (broadcast against ``acc``).

    Returns
    -------
    ndarray of int64
        Values in the int32 range.
    """
    e = np.asarray(shift, dtype=np.int64)
    if np.any(e < -31) or np.any(e > 7):
        raise ValueError(f"mbqm_int64: shift must be in [-31, 7], got {e.min()}..{e.max()}")
    total = 15 - e
    v = np.asarray(acc, dtype=np.int64) * reduced_multiplier(multiplier)
    v += np.int64(1) << (total - 1)
    v >>= total
    return _wrap_int32(v)


def is_power_of_two_scale(scale) -> bool:
    """TFLite's ``CheckedLog2``: whether :math:`\\log_2 s` is within :math:`10^{-3}` of an integer."""
    log = math.log2(float(scale))
    return abs(log - round(log)) < 1e-3


def add_left_shift(scale1, scale2, output_scale) -> int | None:
    """The left shift of LiteRT's int16 ADD/SUB for these scales: :data:`INT16_LEFT_SHIFT` on the general path,
    ``None`` where every scale is a power of two (the ``pot_scale_int16`` path, another arithmetic)."""
    if all(is_power_of_two_scale(s) for s in (scale1, scale2, output_scale)):
        return None
    return INT16_LEFT_SHIFT
