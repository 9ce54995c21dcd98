"""TensorFlow-compatible fake quantization, bit-exact (2.x CPU kernels, float32, denormals flushed to zero).

The ops of ``tf.quantization.*`` with the same names and arguments, TensorFlow's range nudging
(:func:`tf_nudge`) and the integer codes of the vars ops (:func:`tf_fake_quant_codes`); the
element loops are the Cython kernels of ``_fakequant.pyx``.  Formulas in :mod:`fxpsim.quant.fake_quant`.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from . import _fakequant
from .fake_quant_inputs import _F32, _float32_input, _gradient_pair

__all__ = [
    "TFNudged", "tf_nudge", "tf_fake_quant_codes",
    "fake_quant_with_min_max_args", "fake_quant_with_min_max_args_gradient",
    "fake_quant_with_min_max_vars", "fake_quant_with_min_max_vars_gradient",
    "fake_quant_with_min_max_vars_fused",
    "fake_quant_with_min_max_vars_per_channel", "fake_quant_with_min_max_vars_per_channel_gradient",
]


# --------------------------------------------------------------------------- validation helpers
def _num_bits(num_bits, where: str) -> int:
    if isinstance(num_bits, bool) or not isinstance(num_bits, numbers.Integral):
        raise TypeError(f"{where}: num_bits must be an int, got {num_bits!r}")
    if not 2 <= num_bits <= 16:
        raise ValueError(f"{where}: num_bits must be in [2, 16] (TensorFlow's limits), got {num_bits}")
    return int(num_bits)


def _range_values(values, name: str, where: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        raise TypeError(f"{where}: {name} must be a real number or array, got dtype {arr.dtype}")
    arr = arr.astype(_F32)
    if np.isnan(arr).any() or np.isinf(arr).any():
        raise ValueError(f"{where}: {name} must be finite, got {values!r}")
    return arr


# --------------------------------------------------------------------------- TensorFlow nudging
class TFNudged(NamedTuple):
    """TensorFlow's nudged range (float32 arrays shaped like ``min``)."""

    nudged_min: np.ndarray
    nudged_max: np.ndarray
    scale: np.ndarray
    inv_scale: np.ndarray
    zero_point: np.ndarray      # int64, in [quant_min, quant_max]
    quant_zero: np.ndarray      # float32 floor(-nudged_min * inv_scale + 0.5) = zero_point - quant_min
    both_zero: np.ndarray       # bool: min == max == 0 (the vars ops output zeros)


def tf_nudge(min, max, num_bits: int = 8, narrow_range: bool = False, where: str = "tf_nudge") -> TFNudged:
    """TensorFlow's ``Nudge`` (fake_quant_ops_functor.h), element-wise over ``min``/``max``, in float32.

    .. math::

        q_{min} = [\\text{narrow}], \\quad q_{max} = 2^{n} - 1, \\quad
        s = \\mathrm{fl}\\Big(\\frac{b - a}{q_{max} - q_{min}}\\Big), \\quad
        s^{-1} = \\mathrm{fl}\\Big(\\frac{q_{max} - q_{min}}{b - a}\\Big)

        z = \\begin{cases} q_{min} & z_0 < q_{min} \\\\ q_{max} & z_0 > q_{max} \\\\
            \\mathrm{round\\_half\\_away}(z_0) & \\text{else} \\end{cases}, \\quad
        z_0 = \\mathrm{fl}(q_{min} - \\mathrm{fl}(a / s)), \\quad
        a' = (q_{min} - z)\\,s, \\quad b' = (q_{max} - z)\\,s

    Raises ValueError for ``num_bits`` outside 2..16, NaN/inf ranges, ``min > max``, or
    ``min == max`` other than ``0 == 0``.
    """
    bits = _num_bits(num_bits, where)
    lo = _range_values(min, "min", where)
    hi = _range_values(max, "max", where)
    if lo.shape != hi.shape:
        raise ValueError(f"{where}: min has shape {lo.shape}, max has shape {hi.shape}")
    if (lo > hi).any():
        raise ValueError(f"{where}: min must be <= max, got min={lo.tolist()} max={hi.tolist()}")
    both_zero = (lo == 0) & (hi == 0)
    if ((lo == hi) & ~both_zero).any():
        raise ValueError(f"{where}: min == max is only allowed for min == max == 0, got min={lo.tolist()}")
    quant_min = 1 if narrow_range else 0
    quant_max = (1 << bits) - 1
    qmin_f, qmax_f = _F32(quant_min), _F32(quant_max)
    with np.errstate(over="ignore"):
        span = np.where(both_zero, _F32(1), hi - lo).astype(_F32)
    if not np.isfinite(span).all() or (span / _F32(quant_max - quant_min) < np.finfo(_F32).tiny).any():
        raise ValueError(f"{where}: the range max - min must be a finite float32 with a normal (non-denormal) "
                         f"scale, got min={lo.tolist()} max={hi.tolist()}")
    scale = (span / (qmax_f - qmin_f)).astype(_F32)
    inv_scale = ((qmax_f - qmin_f) / span).astype(_F32)
    zero_from_min = (qmin_f - (np.where(both_zero, _F32(0), lo) / scale).astype(_F32)).astype(_F32)
    rounded = np.copysign(np.floor(np.abs(zero_from_min.astype(np.float64)) + 0.5), zero_from_min)
    zero_point = np.where(zero_from_min < qmin_f, quant_min,
                          np.where(zero_from_min > qmax_f, quant_max, rounded)).astype(np.int64)
    nudged_min = ((qmin_f - zero_point.astype(_F32)) * scale).astype(_F32)
    nudged_max = ((qmax_f - zero_point.astype(_F32)) * scale).astype(_F32)
    quant_zero = np.floor((-nudged_min * inv_scale).astype(_F32) + _F32(0.5)).astype(_F32)
    return TFNudged(nudged_min, nudged_max, scale, inv_scale, zero_point, quant_zero, both_zero)


def _args_range(min, max, num_bits, narrow_range, where):
    lo, hi = float(_range_values(min, "min", where)), float(_range_values(max, "max", where))
    if not lo < hi:
        raise ValueError(f"{where}: min has to be smaller than max, got min={lo} max={hi}")
    return tf_nudge(lo, hi, num_bits, narrow_range, where)


def _scalar_range(min, max, num_bits, narrow_range, where):
    nudged = tf_nudge(min, max, num_bits, narrow_range, where)
    if nudged.nudged_min.size != 1:
        raise ValueError(f"{where}: min and max must be scalars, got shape {nudged.nudged_min.shape}")
    return nudged


def _flat_kernel_args(nudged: TFNudged):
    return (float(nudged.nudged_min.reshape(())), float(nudged.nudged_max.reshape(())),
            float(nudged.scale.reshape(())), float(nudged.inv_scale.reshape(())),
            float(nudged.quant_zero.reshape(())))


def _output_buffer(out, like: np.ndarray, name: str, where: str) -> np.ndarray:
    """``out`` checked (float32, C-contiguous, writeable, shaped like ``like``), or a new array."""
    if out is None:
        return np.empty_like(like)
    if not isinstance(out, np.ndarray) or out.dtype != _F32 or out.shape != like.shape \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{where}: {name} must be a writeable C-contiguous float32 array of shape {like.shape}")
    return out


def _tf_forward(x: np.ndarray, nudged: TFNudged, divide: bool, out=None, where: str = "") -> np.ndarray:
    out = _output_buffer(out, x, "out", where)
    if bool(nudged.both_zero.reshape(())):
        out[...] = 0
        return out
    _fakequant.forward(x.reshape(-1), out.reshape(-1), *_flat_kernel_args(nudged), divide)
    return out


def _tf_backward(dy: np.ndarray, x: np.ndarray, nudged: TFNudged, out=None, where: str = ""):
    dx = _output_buffer(out, x, "out", where)
    if bool(nudged.both_zero.reshape(())):
        dx[...] = dy
        return dx, _F32(0), _F32(0)
    below, above = _fakequant.backward(dy.reshape(-1), x.reshape(-1), dx.reshape(-1),
                                       float(nudged.nudged_min.reshape(())), float(nudged.nudged_max.reshape(())))
    return dx, _F32(below), _F32(above)


# --------------------------------------------------------------------------- TensorFlow ops
def fake_quant_with_min_max_args(inputs, min=-6.0, max=6.0, num_bits=8, narrow_range=False) -> np.ndarray:
    """``tf.quantization.fake_quant_with_min_max_args``: attribute range, multiplies by ``inv_scale``.

    Requires ``min < max`` (TensorFlow's attribute check).  Returns float32.
    """
    where = "fake_quant_with_min_max_args"
    x = _float32_input(inputs, "inputs", where)
    return _tf_forward(x, _args_range(min, max, num_bits, narrow_range, where), divide=False)


def fake_quant_with_min_max_args_gradient(gradients, inputs, min=-6.0, max=6.0, num_bits=8,
                                          narrow_range=False) -> np.ndarray:
    """Gradient of :func:`fake_quant_with_min_max_args`: :math:`g\\,1_{a' \\le x \\le b'}`."""
    where = "fake_quant_with_min_max_args_gradient"
    dy, x = _gradient_pair(gradients, inputs, where)
    return _tf_backward(dy, x, _args_range(min, max, num_bits, narrow_range, where))[0]


def fake_quant_with_min_max_vars(inputs, min, max, num_bits=8, narrow_range=False, *, out=None) -> np.ndarray:
    """``tf.quantization.fake_quant_with_min_max_vars``: scalar tensor range, divides by ``scale``.

    ``out`` (an fxpsim extension): a float32 C-contiguous array to write the result into,
    so that a training loop can reuse its buffers as TensorFlow's allocator does.
    """
    where = "fake_quant_with_min_max_vars"
    x = _float32_input(inputs, "inputs", where)
    return _tf_forward(x, _scalar_range(min, max, num_bits, narrow_range, where), divide=True, out=out,
                       where=where)


def fake_quant_with_min_max_vars_gradient(gradients, inputs, min, max, num_bits=8, narrow_range=False, *,
                                          out=None):
    """Gradients of :func:`fake_quant_with_min_max_vars`: ``(d_inputs, d_min, d_max)`` (float32).

    ``d_min``/``d_max`` are the sums of ``gradients`` below/above the nudged range,
    accumulated in double and rounded once (equal to TensorFlow's whenever its float32
    sum is exact).  ``out``: optional buffer for ``d_inputs`` (as in
    :func:`fake_quant_with_min_max_vars`).
    """
    where = "fake_quant_with_min_max_vars_gradient"
    dy, x = _gradient_pair(gradients, inputs, where)
    return _tf_backward(dy, x, _scalar_range(min, max, num_bits, narrow_range, where), out=out, where=where)


def fake_quant_with_min_max_vars_fused(inputs, gradients, min, max, num_bits=8, narrow_range=False):
    """Forward and gradient of the vars op in one pass: ``(outputs, d_inputs, d_min, d_max)``."""
    where = "fake_quant_with_min_max_vars_fused"
    dy, x = _gradient_pair(gradients, inputs, where)
    nudged = _scalar_range(min, max, num_bits, narrow_range, where)
    if bool(nudged.both_zero.reshape(())):
        return np.zeros_like(x), dy.copy(), _F32(0), _F32(0)
    out, dx = np.empty_like(x), np.empty_like(x)
    nudged_min, nudged_max, scale, _, quant_zero = _flat_kernel_args(nudged)
    below, above = _fakequant.fused_vars(x.reshape(-1), dy.reshape(-1), out.reshape(-1), dx.reshape(-1),
                                         nudged_min, nudged_max, scale, quant_zero)
    return out, dx, _F32(below), _F32(above)


def _per_channel_setup(x, min, max, num_bits, narrow_range, where):
    if x.ndim == 0:
        raise ValueError(f"{where}: inputs must have at least one dimension (the channel axis is the last)")
    nudged = tf_nudge(min, max, num_bits, narrow_range, where)
    channels = x.shape[-1]
    if nudged.nudged_min.shape != (channels,):
        raise ValueError(f"{where}: min and max must have shape ({channels},) (the last axis of inputs), "
                         f"got {nudged.nudged_min.shape}")
    return nudged, x.reshape(-1, channels)


def fake_quant_with_min_max_vars_per_channel(inputs, min, max, num_bits=8, narrow_range=False) -> np.ndarray:
    """``tf.quantization.fake_quant_with_min_max_vars_per_channel`` (channel = last axis; multiplies)."""
    where = "fake_quant_with_min_max_vars_per_channel"
    x = _float32_input(inputs, "inputs", where)
    nudged, x2 = _per_channel_setup(x, min, max, num_bits, narrow_range, where)
    out = np.empty_like(x2)
    _fakequant.forward_per_channel(x2, out, nudged.nudged_min, nudged.nudged_max, nudged.scale,
                                   nudged.inv_scale, nudged.quant_zero, nudged.both_zero.view(np.uint8))
    return out.reshape(x.shape)


def fake_quant_with_min_max_vars_per_channel_gradient(gradients, inputs, min, max, num_bits=8,
                                                      narrow_range=False):
    """Gradients of the per-channel op: ``(d_inputs, d_min[C], d_max[C])`` (float32)."""
    where = "fake_quant_with_min_max_vars_per_channel_gradient"
    dy, x = _gradient_pair(gradients, inputs, where)
    nudged, x2 = _per_channel_setup(x, min, max, num_bits, narrow_range, where)
    dx = np.empty_like(x2)
    below = np.empty(x2.shape[1], np.float64)
    above = np.empty(x2.shape[1], np.float64)
    _fakequant.backward_per_channel(dy.reshape(x2.shape), x2, dx, nudged.nudged_min, nudged.nudged_max,
                                    nudged.both_zero.view(np.uint8), below, above)
    return dx.reshape(x.shape), below.astype(_F32), above.astype(_F32)


def tf_fake_quant_codes(inputs, min, max, num_bits=8, narrow_range=False, per_channel=False):
    """Integer codes of the vars (or per-channel) op: ``(codes int64, scale, zero_point)``.

    ``fake_quant_with_min_max_vars(x) == scale * (codes - zero_point)`` element for element.
    """
    where = "tf_fake_quant_codes"
    x = _float32_input(inputs, "inputs", where)
    if per_channel:
        nudged, _ = _per_channel_setup(x, min, max, num_bits, narrow_range, where)
        y = fake_quant_with_min_max_vars_per_channel(x, min, max, num_bits, narrow_range)
    else:
        nudged = _scalar_range(min, max, num_bits, narrow_range, where)
        y = fake_quant_with_min_max_vars(x, min, max, num_bits, narrow_range)
    scale = np.where(nudged.both_zero, _F32(1), nudged.scale).astype(_F32)
    levels = np.rint(y.astype(np.float64) / scale)                 # y is an exact multiple of scale
    codes = np.where(np.isnan(levels), 0, levels).astype(np.int64) + nudged.zero_point
    return codes, nudged.scale, nudged.zero_point
