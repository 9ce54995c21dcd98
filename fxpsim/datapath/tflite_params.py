"""TFLite's quantization parameters derived from its float32 scales.

:func:`activation_range` (the fused-activation clamp of ``CalculateActivationRangeQuantized``) and
:func:`tflite_add_params` (the multipliers of the int8 ``ADD``); :func:`_float32` rounds a scale to
float32 as TFLite stores it, checking that it stays positive and finite.
"""
from __future__ import annotations

import math

import numpy as np

from .fixed_point_multiplier import quantize_multiplier
from .integer_checks import _check_zero_point, _iinfo

__all__ = ["activation_range", "tflite_add_params"]


def _float32(x, name: str) -> np.ndarray:
    """Positive finite scale(s) rounded to float32, as TFLite stores them."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or an array of them, got {x!r}") from None
    with np.errstate(over="ignore", under="ignore"):
        arr32 = arr.astype(np.float32)
    if arr.size == 0 or not (np.all(np.isfinite(arr32)) and np.all(arr32 > 0)):
        raise ValueError(f"{name} must be positive and finite (as a float32), got {x!r}")
    return arr32


def activation_range(activation: str = "none", scale: float = 1.0, zero_point: int = 0,
                     dtype=np.int8) -> tuple[int, int]:
    r"""TFLite's quantized fused-activation clamp ``(act_min, act_max)``.

    With :math:`Q(f) = z + \mathrm{round\_half\_away}(f \oslash s)` (the division in float32,
    as TFLite's ``CalculateActivationRangeQuantized``) and the type range
    :math:`[q_{min}, q_{max}]`: ``"none"`` :math:`[q_{min}, q_{max}]`; ``"relu"``
    :math:`[\max(q_{min}, Q(0)), q_{max}]`; ``"relu6"`` :math:`[\max(q_{min}, Q(0)),
    \min(q_{max}, Q(6))]`; ``"relu_n1_to_1"`` :math:`[\max(q_{min}, Q(-1)), \min(q_{max}, Q(1))]`.

    Parameters
    ----------
    activation : {"none", "relu", "relu6", "relu_n1_to_1"}
        Case-insensitive; TFLite's option names (``"RELU6"``) are accepted.
    scale : float
        Output scale (rounded to float32 as TFLite stores it).
    zero_point : int
        Output zero point, inside the type range.
    dtype : numpy integer dtype
        Output type (default int8).

    Returns
    -------
    (int, int)
    """
    info = _iinfo(dtype, "dtype")
    s = _float32(scale, "scale")
    zp = _check_zero_point(zero_point, info, "zero_point")
    name = str(activation).lower()

    def q(f: float) -> int:
        v = float(np.float32(f) / s)              # float32 division, as TFLite
        v = min(max(v, -2.0 ** 40), 2.0 ** 40)    # beyond any type range (and never inf)
        return zp + int(math.copysign(math.floor(abs(v) + 0.5), v))

    lo, hi = int(info.min), int(info.max)
    if name == "none":
        return lo, hi
    if name == "relu":
        return max(lo, q(0.0)), hi
    if name == "relu6":
        return max(lo, q(0.0)), min(hi, q(6.0))
    if name == "relu_n1_to_1":
        return max(lo, q(-1.0)), min(hi, q(1.0))
    raise ValueError(f"activation must be 'none', 'relu', 'relu6' or 'relu_n1_to_1', got {activation!r}")


def tflite_add_params(scale1: float, scale2: float, out_scale: float, left_shift: int = 20,
                      single_rounding: bool = False) -> tuple[int, int, int, int, int, int]:
    r"""TFLite's int8 ADD multipliers ``(m1, s1, m2, s2, m_out, s_out)``.

    .. math::

        S = 2\max(s_1, s_2),\quad r_i = s_i / S,\quad r_{out} = S / (2^{L} s_{out})

    each turned into ``(m, s)`` by :func:`quantize_multiplier` (``QuantizeMultiplierSmallerThanOneExp``:
    :math:`0 < r < 1`, :math:`s \le 0`).  Scales are rounded to float32 first (TFLite stores them so).
    """
    s1, s2, so = (float(v) for v in (_float32(scale1, "scale1"), _float32(scale2, "scale2"),
                                       _float32(out_scale, "out_scale")))
    if not isinstance(left_shift, (int, np.integer)) or not 0 <= left_shift <= 30:
        raise ValueError(f"left_shift must be an int in [0, 30], got {left_shift!r}")
    twice_max = 2.0 * max(s1, s2)
    params = []
    for name, real in (("input1", s1 / twice_max), ("input2", s2 / twice_max),
                       ("output", twice_max / (float(1 << left_shift) * so))):
        if not 0.0 < real < 1.0:
            raise ValueError(f"tflite_add_params: the {name} multiplier {real!r} is not in (0, 1); "
                             "the scales are too far apart for TFLite's ADD")
        m, s = quantize_multiplier(real, single_rounding=single_rounding)
        params += [m, s]
    return tuple(params)
