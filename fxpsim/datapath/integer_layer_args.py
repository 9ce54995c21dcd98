"""What the integer layer kernels share: their result, :class:`IntegerResult`, and the checks of their arguments.

Operands (:func:`_operand`), zero-point offsets in the narrowest exact type (:func:`_offset`), the
activation clamp and the output spec (:func:`_clamp_range`, :func:`_output_spec`), the accumulator
format, the bias and the requantizer (:func:`_acc_format`, :func:`_bias`, :func:`_check_requant`),
the MAC knobs (:func:`_common`, :func:`_mac_knobs`), and TF/TFLite strides and padding
(:func:`_pair`, :func:`_explicit_padding`).  Used by :mod:`fxpsim.datapath.integer_ops`,
:mod:`fxpsim.datapath.integer_add`, :mod:`fxpsim.datapath.integer_pool` and the TFLite kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.fixed import Format, Overflow
from .integer_checks import _check_range, _check_zero_point, _iinfo
from .requantize import Requantizer


@dataclass(frozen=True)
class IntegerResult:
    """Output of an integer layer kernel.

    Attributes
    ----------
    out : ndarray
        Output codes in the output dtype (after zero point and activation clamp).
    acc : ndarray of int64
        Accumulator codes the requantizer saw (after bias), channels last.
    overflows : int
        Accumulator overflow events (each add that overflowed, the bias add included); with K-tiling the
        tile accumulators' events too.
    tile_overflows : int
        With K-tiling: the events of the tile accumulators alone (included in ``overflows``).
    bias_clipped : int
        With ``zero_point="fold"``: folded biases that saturated into the bias register.
    above, below : int or None
        From the fused int8 kernel (:mod:`fxpsim.datapath.conv_int8`): how many requantized values
        :math:`R(a) + z_y` were above ``act_max`` / below ``act_min`` before the clamp (None: not counted).
    """

    out: np.ndarray
    acc: np.ndarray
    overflows: int
    tile_overflows: int = 0
    bias_clipped: int = 0
    above: int | None = None
    below: int | None = None


def _operand(a, name: str, ndim: int):
    arr = np.asarray(a)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu" or arr.dtype.itemsize > 4:
        raise TypeError(f"{name} must be an integer array of at most 32 bits (int8, uint8, int16, "
                        f"int32...), got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    return arr


def _narrow_dtype(lo: int, hi: int):
    """The narrowest of int16/int32/int64 holding [lo, hi] (narrow operands: less memory traffic)."""
    return next(t for t in (np.int16, np.int32, np.int64) if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)


def _offset(arr: np.ndarray, zp, name: str, channel_axis: int | None = None, narrow: bool = False) -> np.ndarray:
    """``arr - zp``, exact, in int64 or (``narrow``) the narrowest signed type holding every
    possible difference (int16 for 8-bit codes); ``zp`` scalar, or per channel along ``channel_axis``."""
    info = np.iinfo(arr.dtype)
    zps = np.asarray(zp)
    if zps.ndim == 0:
        z = _check_zero_point(zp, info, name)
        dtype = _narrow_dtype(int(info.min) - z, int(info.max) - z) if narrow else np.int64
        return np.subtract(arr, z, dtype=dtype) if z else arr.astype(dtype)
    if channel_axis is None or zps.ndim != 1 or zps.shape[0] != arr.shape[channel_axis]:
        raise ValueError(f"{name} must be a scalar{'' if channel_axis is None else ' or one per channel'}"
                         f", got shape {zps.shape}")
    for z in zps.tolist():
        _check_zero_point(int(z), info, name)
    shape = [1] * arr.ndim
    shape[channel_axis] = -1
    dtype = _narrow_dtype(int(info.min) - int(zps.max()), int(info.max) - int(zps.min())) if narrow else np.int64
    return arr.astype(dtype) - zps.astype(dtype).reshape(shape)


def _clamp_range(act_min, act_max, info) -> tuple[int, int]:
    """The activation clamp, defaulting to the output type's range, validated against it."""
    lo = int(info.min) if act_min is None else act_min
    hi = int(info.max) if act_max is None else act_max
    for name, v in (("act_min", lo), ("act_max", hi)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if not info.min <= lo <= hi <= info.max:
        raise ValueError(f"need {info.min} <= act_min <= act_max <= {info.max}, got act_min={lo}, act_max={hi}")
    return int(lo), int(hi)


def _acc_format(acc) -> Format:
    if isinstance(acc, (bool, np.bool_)):
        raise TypeError(f"acc must be a Format or an int (accumulator bits), got {acc!r}")
    fmt = Format.integer(int(acc)) if isinstance(acc, (int, np.integer)) else acc
    if not isinstance(fmt, Format):
        raise TypeError(f"acc must be a Format or an int (accumulator bits), got {acc!r}")
    if fmt.frac != 0 or not fmt.signed or fmt.word > 62:
        raise ValueError(f"acc must be a signed integer format of at most 62 bits, got {fmt}")
    return fmt


def _bias(bias, n_out: int, fmt: Format):
    if bias is None:
        return None
    b = np.asarray(bias)
    if b.dtype == np.bool_ or b.dtype.kind not in "iu":
        raise TypeError(f"bias must be an integer array (int32), got dtype {b.dtype}")
    if b.shape != (n_out,):
        raise ValueError(f"bias must have shape ({n_out},), one value per output channel; got {b.shape}")
    b = b.astype(np.int64)
    _check_range(b, fmt.min_code, fmt.max_code, f"bias (accumulator {fmt})")
    return b


def _check_requant(requant, n_out: int) -> Requantizer:
    if not isinstance(requant, Requantizer):
        raise TypeError(f"requant must be a Requantizer, got {type(requant).__name__}")
    if requant.channels not in (1, n_out):
        raise ValueError(f"requant has {requant.channels} channels; the layer has {n_out} outputs")
    return requant


def _output_spec(out_zp, act_min, act_max, out_dtype) -> tuple:
    """Validated ``(dtype, zero point, act_min, act_max)`` of a layer's output."""
    info = _iinfo(out_dtype, "out_dtype")
    zp = _check_zero_point(out_zp, info, "out_zp")
    return (info.dtype, zp) + _clamp_range(act_min, act_max, info)


def _mac_knobs(zero_point, tile_k, product_shift):
    if zero_point not in ("subtract", "fold"):
        raise ValueError(f"zero_point must be 'subtract' or 'fold', got {zero_point!r}")
    if tile_k is not None and (isinstance(tile_k, bool) or not isinstance(tile_k, (int, np.integer)) or tile_k < 1):
        raise ValueError(f"tile_k must be a positive int or None, got {tile_k!r}")
    if isinstance(product_shift, bool) or not isinstance(product_shift, (int, np.integer)) or \
            not 0 <= product_shift <= 62:
        raise ValueError(f"product_shift must be an int in 0..62, got {product_shift!r}")


def _common(bias_at, overflow, order):
    if bias_at not in ("end", "init"):
        raise ValueError(f"bias_at must be 'end' (TFLite: bias added after the sum) or 'init' "
                         f"(accumulator preloaded with the bias), got {bias_at!r}")
    Overflow.parse(overflow)
    if order not in ("sequential", "tree"):
        raise ValueError(f"order must be 'sequential' or 'tree', got {order!r}")


def _pair(v, name: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(pair) != 2 or not all(isinstance(p, (int, np.integer)) and p >= 1 for p in pair):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {v!r}")
    return int(pair[0]), int(pair[1])


def _explicit_padding(padding, in_hw, k_hw, stride, dilation):
    """TF/TFLite padding as ((top, bottom), (left, right)); SAME puts the odd pixel after."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0), (0, 0))
        if mode != "SAME":
            raise ValueError(f"padding must be 'SAME', 'VALID' or ((t, b), (l, r)), got {padding!r}")
        pads = []
        for n, k, s, d in zip(in_hw, k_hw, stride, dilation):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            pads.append((total // 2, total - total // 2))
        return tuple(pads)
    try:
        (t, b), (l, r) = padding
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in (t, b, l, r)):
            raise TypeError
        pads = ((int(t), int(b)), (int(l), int(r)))
    except (TypeError, ValueError):
        raise ValueError(f"padding must be 'SAME', 'VALID' or ((t, b), (l, r)), got {padding!r}") from None
    if min(min(p) for p in pads) < 0:
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    return pads
