"""TensorFlow- and PyTorch-compatible fake quantization, bit-exact, in numpy + Cython.

TensorFlow (2.x CPU kernels, float32, denormals flushed to zero)
----------------------------------------------------------------
Same names and arguments as ``tf.quantization.*``:
:func:`fake_quant_with_min_max_args`, :func:`fake_quant_with_min_max_args_gradient`,
:func:`fake_quant_with_min_max_vars`, :func:`fake_quant_with_min_max_vars_gradient`,
:func:`fake_quant_with_min_max_vars_per_channel`,
:func:`fake_quant_with_min_max_vars_per_channel_gradient` (channel = last axis), and
:func:`fake_quant_with_min_max_vars_fused` (forward + gradient in one pass).

The range is nudged so that real zero is exactly a code (:func:`tf_nudge`), then

.. math::

    q(x) = s \\left\\lfloor (\\mathrm{clamp}(x, a', b') - a') \\cdot s^{-1} - z_q + \\tfrac12 \\right\\rfloor,
    \\qquad z_q = \\lfloor -a' s^{-1} + \\tfrac12 \\rfloor

with every operation rounded to float32.  The *args* and *per-channel* ops multiply by
the precomputed ``inv_scale`` = fl((q_max - q_min) / (b - a)); the *vars* op divides by
``scale`` = fl((b - a) / (q_max - q_min)).  The two differ within an ulp of a half step,
so the ops do not give identical bits (both are reproduced).  Gradients:

.. math::

    \\frac{\\partial L}{\\partial x} = g\\,1_{a' \\le x \\le b'}, \\quad
    \\frac{\\partial L}{\\partial a} = \\sum_{x < a'} g, \\quad
    \\frac{\\partial L}{\\partial b} = \\sum_{x > b'} g

Inputs of another float dtype are converted to float32 (TF accepts only float32).
NaN inputs give NaN outputs and zero gradients.  ``min == max == 0`` gives zeros
(vars ops; gradients pass through), as in TensorFlow.

PyTorch (2.x CPU kernels)
-------------------------
:func:`fake_quantize_per_tensor_affine`, :func:`fake_quantize_per_channel_affine` and
their ``_backward``; the learnable (LSQ) :func:`fake_quantize_learnable_per_tensor_affine`
and :func:`fake_quantize_learnable_per_tensor_affine_backward` (formulas in their docstrings).
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from . import _fakequant

__all__ = [
    "TFNudged", "tf_nudge", "tf_fake_quant_codes",
    "fake_quant_with_min_max_args", "fake_quant_with_min_max_args_gradient",
    "fake_quant_with_min_max_vars", "fake_quant_with_min_max_vars_gradient",
    "fake_quant_with_min_max_vars_fused",
    "fake_quant_with_min_max_vars_per_channel", "fake_quant_with_min_max_vars_per_channel_gradient",
    "fake_quantize_per_tensor_affine", "fake_quantize_per_tensor_affine_backward",
    "fake_quantize_per_channel_affine", "fake_quantize_per_channel_affine_backward",
    "fake_quantize_learnable_per_tensor_affine", "fake_quantize_learnable_per_tensor_affine_backward",
    "fake_quantize_learnable_affine", "fake_quantize_learnable_affine_backward",
]

_F32 = np.float32


# --------------------------------------------------------------------------- validation helpers
def _float32_input(values, name: str, where: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind != "f":
        raise TypeError(f"{where}: {name} must be a real floating-point array, got dtype {arr.dtype}")
    return np.asarray(arr, dtype=_F32, order="C")


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


def _gradient_pair(gradients, inputs, where):
    dy = _float32_input(gradients, "gradients", where)
    x = _float32_input(inputs, "inputs", where)
    if dy.shape != x.shape:
        raise ValueError(f"{where}: gradients has shape {dy.shape}, inputs has shape {x.shape}")
    return dy, x


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


# --------------------------------------------------------------------------- PyTorch
_INT32_MIN, _UINT32_MAX = -(1 << 31), (1 << 32) - 1
#: Smallest float32 scale whose float32 reciprocal 1.0f / scale is finite (a subnormal, about 2.9e-39).
_MIN_SCALE = np.nextafter(_F32(1) / np.finfo(_F32).max, _F32(1), dtype=_F32)


def check_affine_params(scale, zero_point, quant_min, quant_max, where: str, learnable: bool = False):
    """Validate PyTorch-style affine parameters (raises ValueError / TypeError saying what is wrong)."""
    for name, value in (("quant_min", quant_min), ("quant_max", quant_max)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{where}: {name} must be an int, got {value!r}")
        if not _INT32_MIN <= value <= _UINT32_MAX:
            raise ValueError(f"{where}: {name}={value} is outside [-2**31, 2**32 - 1]")
    if quant_min > quant_max:
        raise ValueError(f"{where}: quant_min ({quant_min}) must be <= quant_max ({quant_max})")
    s = np.asarray(scale)
    if s.dtype.kind not in "fiu" or s.dtype == np.bool_:
        raise TypeError(f"{where}: scale must be a real number or array, got dtype {s.dtype}")
    with np.errstate(over="ignore", under="ignore"):
        s32 = s.astype(_F32)
        inv = _F32(1) / s32 if s32.size and (s32 > 0).all() else None
    if not np.isfinite(s32).all() or (s32 <= 0).any():
        raise ValueError(f"{where}: scale must be finite and > 0 as a float32, got {s.tolist()}"
                         + (" (it rounds to 0 in float32)" if np.isfinite(s32).all() and (s > 0).all() else ""))
    if inv is not None and not np.isfinite(inv).all():
        bad = s32.reshape(-1)[~np.isfinite(inv.reshape(-1))]
        raise ValueError(f"{where}: scale {float(bad[0])!r} is below {float(_MIN_SCALE)!r}: PyTorch computes "
                         f"inv_scale = 1.0f / scale in float32, which overflows to inf for it, so every "
                         f"input gives inf or NaN (0 * inf is NaN); use a scale >= {float(_MIN_SCALE)!r}")
    z = np.asarray(zero_point)
    if z.dtype.kind not in "fiu" or z.dtype == np.bool_:
        raise TypeError(f"{where}: zero_point must be a number or array, got dtype {z.dtype}")
    if z.dtype.kind == "f" and not learnable:
        if not np.isfinite(z).all() or (z != np.round(z)).any():
            raise ValueError(f"{where}: zero_point must be integer-valued, got {z.tolist()}")
    if not np.isfinite(z.astype(np.float64)).all():
        raise ValueError(f"{where}: zero_point must be finite, got {z.tolist()}")
    if not learnable and ((z < quant_min) | (z > quant_max)).any():
        raise ValueError(f"{where}: zero_point must be between quant_min ({quant_min}) and quant_max "
                         f"({quant_max}), got {z.tolist()}")
    return s32, z


def _channel_shape(x, values, axis, name, where):
    """``values`` reshaped to broadcast along ``axis`` of ``x`` (scalars stay scalars when axis is None)."""
    values = np.asarray(values)
    if axis is None:
        if values.size != 1:
            raise ValueError(f"{where}: {name} must be a scalar for per-tensor quantization, got shape "
                             f"{values.shape}")
        return values.reshape(())
    if values.shape != (x.shape[axis],):
        raise ValueError(f"{where}: {name} must have shape ({x.shape[axis]},) (axis {axis} of the input), "
                         f"got {values.shape}")
    shape = [1] * x.ndim
    shape[axis] = -1
    return values.reshape(shape)


def _axis(x, axis, where):
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{where}: axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{where}: axis {axis} is out of range for an input with {x.ndim} dimensions")
    return int(axis) % x.ndim


def _torch_quantize(x, scale, zero_point):
    """PyTorch's code before clamping, in float32: ``zp + nearbyint(x * (1.0f / scale))``."""
    inv_scale = (_F32(1) / scale).astype(_F32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (zero_point.astype(_F32) + np.rint((x * inv_scale).astype(_F32))).astype(_F32)


_TWO63 = 2.0 ** 63


def _torch_int64(code_f):
    """PyTorch's unchecked ``static_cast<int64_t>(float)`` of a rounded code, as x86-64 computes it.

    Codes in [-2^63, 2^63) are exact integers already; NaN and codes beyond int64 become INT64_MIN
    (cvttss2si's "integer indefinite"), i.e. *below* every range however large the input.  PyTorch's
    per-channel kernels and the learnable (LSQ) gradient kernels cast so; its per-tensor forward
    stays in float.  Returned as float64 (INT64_MIN = -2^63 exactly).
    """
    code = np.asarray(code_f, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where((code >= -_TWO63) & (code < _TWO63), code, -_TWO63)


def _fma32(a, b, c):
    """float32 ``fma(a, b, c)``: ``a * b + c`` rounded once to float32 (NaN/inf as IEEE).

    a * b of two float32 is exact in float64; the float64 sum is rounded *to odd* (TwoSum gives its
    error; an inexact sum with an even last bit moves one ulp toward the error), and a value rounded
    to odd on 53 >= 2 * 24 + 2 bits rounds to float32 exactly as the exact sum would.
    """
    a64, b64, c64 = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64
        total = p + c64
        back = total - p
        err = (p - (total - back)) + (c64 - back)
        inexact = (err != 0) & np.isfinite(total) & ((total.view(np.int64) & 1) == 0)
        total = np.where(inexact, np.nextafter(total, np.where(err > 0, np.inf, -np.inf)), total)
        return total.astype(_F32)


def _torch_dequantize(code_f, scale, zero_point, quant_min, quant_max, int64_cast=False):
    """``float((clamp(code) - zp) * double(scale))``; NaN codes stay NaN (an fxpsim choice: PyTorch's
    result for NaN is not meaningful).  ``int64_cast``: the code went through :func:`_torch_int64`
    (PyTorch's per-channel kernel), so inputs beyond int64 give the *lowest* level."""
    code = code_f.astype(np.float64)
    if int64_cast:
        code = np.where(np.isnan(code), code, _torch_int64(code))
    clamped = np.clip(code, quant_min, quant_max)
    return ((clamped - zero_point.astype(np.float64)) * scale.astype(np.float64)).astype(_F32)


def _in_range(code_f, quant_min, quant_max):
    return (code_f >= quant_min) & (code_f <= quant_max)


def _affine_inputs(x, scale, zero_point, quant_min, quant_max, axis, where):
    x = _float32_input(x, "x", where)
    s, z = check_affine_params(scale, zero_point, quant_min, quant_max, where)
    if axis is not None:
        axis = _axis(x, axis, where)
    return x, _channel_shape(x, s, axis, "scale", where), _channel_shape(x, z.astype(np.int64), axis,
                                                                           "zero_point", where)


def fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max) -> np.ndarray:
    """``torch.fake_quantize_per_tensor_affine`` (float32, bit-exact).

    .. math::

        c = \\mathrm{fl}\\big(z + \\mathrm{rne}(\\mathrm{fl}(x \\cdot \\mathrm{fl}(1/s)))\\big), \\qquad
        q(x) = \\mathrm{fl}\\big((\\mathrm{clamp}(c, q_{min}, q_{max}) - z) \\cdot s\\big)

    (rne: round half to even).  NaN inputs give NaN (PyTorch's result is undefined there).
    """
    where = "fake_quantize_per_tensor_affine"
    x, s, z = _affine_inputs(x, scale, zero_point, quant_min, quant_max, None, where)
    return _torch_dequantize(_torch_quantize(x, s, z), s, z, quant_min, quant_max)


def fake_quantize_per_tensor_affine_backward(dy, x, scale, zero_point, quant_min, quant_max) -> np.ndarray:
    """Backward of :func:`fake_quantize_per_tensor_affine`: :math:`g\\,1_{q_{min} \\le c \\le q_{max}}`.

    PyTorch masks on the rounded code :math:`c`, TensorFlow on the input.
    """
    where = "fake_quantize_per_tensor_affine_backward"
    dy, xx = _gradient_pair(dy, x, where)
    _, s, z = _affine_inputs(xx, scale, zero_point, quant_min, quant_max, None, where)
    return (dy * _in_range(_torch_quantize(xx, s, z), quant_min, quant_max).astype(_F32)).astype(_F32)


def fake_quantize_per_channel_affine(x, scale, zero_point, axis, quant_min, quant_max) -> np.ndarray:
    """``torch.fake_quantize_per_channel_affine``: :func:`fake_quantize_per_tensor_affine` per channel along ``axis``."""
    where = "fake_quantize_per_channel_affine"
    x, s, z = _affine_inputs(x, scale, zero_point, quant_min, quant_max, axis, where)
    return _torch_dequantize(_torch_quantize(x, s, z), s, z, quant_min, quant_max, int64_cast=True)


def fake_quantize_per_channel_affine_backward(dy, x, scale, zero_point, axis, quant_min, quant_max) -> np.ndarray:
    """Backward of :func:`fake_quantize_per_channel_affine` (mask on the rounded code)."""
    where = "fake_quantize_per_channel_affine_backward"
    dy, xx = _gradient_pair(dy, x, where)
    _, s, z = _affine_inputs(xx, scale, zero_point, quant_min, quant_max, axis, where)
    return (dy * _in_range(_torch_quantize(xx, s, z), quant_min, quant_max).astype(_F32)).astype(_F32)


def _learnable_inputs(x, scale, zero_point, quant_min, quant_max, axis, where):
    x = _float32_input(x, "x", where)
    s, z = check_affine_params(scale, zero_point, quant_min, quant_max, where, learnable=True)
    if axis is not None:
        axis = _axis(x, axis, where)
    return (x, axis, _channel_shape(x, s, axis, "scale", where),
            _channel_shape(x, z.astype(_F32), axis, "zero_point", where))


def _forward_zero_point(zero_point, quant_min, quant_max):
    """PyTorch's forward zero point of the learnable ops: ``clamp(nearbyint(zp))`` (an int64)."""
    return np.clip(np.rint(zero_point), _F32(quant_min), _F32(quant_max)).astype(np.int64)


def fake_quantize_learnable_affine(x, scale, zero_point, quant_min, quant_max, axis=None) -> np.ndarray:
    """Forward of the learnable ops (per tensor when ``axis`` is None, else per channel).

    The float zero point is rounded half to even and clamped to the code range, then
    :func:`fake_quantize_per_tensor_affine` / ``_per_channel_affine`` applies.
    """
    where = "fake_quantize_learnable_affine"
    x, axis, s, z = _learnable_inputs(x, scale, zero_point, quant_min, quant_max, axis, where)
    z_int = _forward_zero_point(z, quant_min, quant_max)
    return _torch_dequantize(_torch_quantize(x, s, z_int), s, z_int, quant_min, quant_max,
                             int64_cast=axis is not None)


def fake_quantize_learnable_affine_backward(dy, x, scale, zero_point, quant_min, quant_max, grad_factor=1.0,
                                            axis=None):
    """LSQ gradients ``(dx, d_scale, d_zero_point)`` of the learnable ops (Esser et al. 2020).

    Per element, in float32 and PyTorch's order (with its fused multiply-adds: see below), with
    :math:`\\gamma` = ``grad_factor``,
    :math:`z` the backward zero point (per tensor: ``trunc(clamp(zp + 0.5))`` as PyTorch;
    per channel: ``clamp(rne(zp))``), :math:`c = \\mathrm{rne}(z + x \\cdot \\mathrm{fl}(1/s))`:

    .. math::

        dx = g\\,1_{q_{min} \\le c \\le q_{max}}, \\qquad
        ds = \\begin{cases} g\\,(\\hat x - x)\\, s^{-1} \\gamma & \\text{inside} \\\\
                            g\\,(q_{min} - z)\\,\\gamma & c < q_{min} \\\\
                            g\\,(q_{max} - z)\\,\\gamma & c > q_{max} \\end{cases}, \\qquad
        dz = \\begin{cases} 0 & \\text{inside} \\\\ -g\\, s\\, \\gamma & \\text{outside} \\end{cases}

    with :math:`\\hat x = (\\mathrm{clamp}(c) - z)\\, s`.  PyTorch's CPU kernels are compiled with
    FMA contraction where the CPU has it (x86-64 AVX2/AVX-512 builds, aarch64): :math:`c` is
    :math:`\\mathrm{rne}(\\mathrm{fma}(x, \\mathrm{fl}(1/s), z))` and :math:`\\hat x - x` is
    :math:`\\mathrm{fma}(\\mathrm{clamp}(c) - z, s, -x)`, one rounding each, as here.  They convert
    :math:`c` to int64 unchecked: on x86-64 a code beyond int64 (a huge or infinite input) or NaN
    becomes INT64_MIN, so it counts as *below* the range (``ds`` gets :math:`g (q_{min} - z)\\gamma`
    even for a huge positive input); this is reproduced (:func:`_torch_int64`).  Every per-element
    term is bit-exact with PyTorch's.  ``ds``/``dz`` are the sums of the terms (per channel along
    ``axis``), accumulated in double and rounded once to float32: PyTorch sums the float32 terms in
    float32, in an order that depends on its CPU kernel (vector width) and thread count, so the two
    sums agree within float32 summation error, :math:`(n-1)\\,2^{-24} \\sum |t_i|`; fxpsim's is
    within :math:`2^{-24} |S| + n\\, 2^{-53} \\sum |t_i|` of the exact sum :math:`S`.
    """
    where = "fake_quantize_learnable_affine_backward"
    dx, d_scale, d_zero, axis, ndim = _learnable_backward_terms(dy, x, scale, zero_point, quant_min, quant_max,
                                                                grad_factor, axis, where)
    others = None if axis is None else tuple(i for i in range(ndim) if i != axis)
    # (+ 0.0: a sum of only -0.0 terms is +0.0, as PyTorch's, whose accumulators start at +0.0)
    d_scale = (np.sum(d_scale, axis=others, dtype=np.float64) + 0.0).astype(_F32).reshape(np.shape(scale))
    d_zero = (np.sum(d_zero, axis=others, dtype=np.float64) + 0.0).astype(_F32).reshape(np.shape(zero_point))
    return dx, d_scale, d_zero


def _learnable_backward_terms(dy, x, scale, zero_point, quant_min, quant_max, grad_factor, axis, where):
    """Per-element LSQ terms ``(dx, d_scale terms, d_zero terms, axis, ndim)``, each float32 and bit-exact
    with PyTorch's gradient kernels (which then sum the terms in float32, in their own order)."""
    dy, xx = _gradient_pair(dy, x, where)
    xx, axis, s, z = _learnable_inputs(xx, scale, zero_point, quant_min, quant_max, axis, where)
    if isinstance(grad_factor, bool) or not isinstance(grad_factor, numbers.Real) or not np.isfinite(grad_factor):
        raise ValueError(f"{where}: grad_factor must be a finite number, got {grad_factor!r}")
    gamma = _F32(grad_factor)
    qmin_f, qmax_f = _F32(quant_min), _F32(quant_max)
    if axis is None:
        z_back = np.clip((z + _F32(0.5)).astype(_F32), qmin_f, qmax_f).astype(np.int64).astype(_F32)
    else:
        z_back = _forward_zero_point(z, quant_min, quant_max).astype(_F32)
    inv_scale = (_F32(1) / s).astype(_F32)
    # PyTorch's kernels, compiled with FMA (x86-64 AVX2/AVX-512 builds, aarch64), fuse
    # rint(z + x * inv_scale) and (q - z) * s - x into single roundings: so does fxpsim
    code = _torch_int64(np.rint(_fma32(xx, inv_scale, z_back)))
    below, above = code < quant_min, code > quant_max
    inside = ~(below | above)
    dx = (dy * inside.astype(_F32)).astype(_F32)
    x_hat_minus_x = _fma32((np.clip(code, quant_min, quant_max).astype(_F32) - z_back).astype(_F32), s, -xx)
    with np.errstate(over="ignore", invalid="ignore"):
        d_inside = ((dy * x_hat_minus_x).astype(_F32) * inv_scale).astype(_F32) * gamma
        d_below = (dy * (qmin_f - z_back).astype(_F32)).astype(_F32) * gamma
        d_above = (dy * (qmax_f - z_back).astype(_F32)).astype(_F32) * gamma
        d_scale = np.where(inside, d_inside, np.where(below, d_below, d_above)).astype(_F32)
        d_zero = np.where(inside, _F32(0), ((-dy * s).astype(_F32) * gamma).astype(_F32)).astype(_F32)
    return dx, d_scale, d_zero, axis, xx.ndim


def fake_quantize_learnable_per_tensor_affine(x, scale, zero_point, quant_min, quant_max,
                                              grad_factor=1.0) -> np.ndarray:
    """``torch._fake_quantize_learnable_per_tensor_affine`` forward (``grad_factor`` only matters backward)."""
    return fake_quantize_learnable_affine(x, scale, zero_point, quant_min, quant_max)


def fake_quantize_learnable_per_tensor_affine_backward(dy, x, scale, zero_point, quant_min, quant_max,
                                                       grad_factor=1.0):
    """``(dx, d_scale, d_zero_point)`` of :func:`fake_quantize_learnable_per_tensor_affine` (see
    :func:`fake_quantize_learnable_affine_backward`)."""
    return fake_quantize_learnable_affine_backward(dy, x, scale, zero_point, quant_min, quant_max, grad_factor)


def affine_codes(x, scale, zero_point, quant_min, quant_max, axis=None, learnable=False):
    """Integer codes of the affine ops: ``(clamp(c, quant_min, quant_max) as int64, zero_point int64)``."""
    where = "affine_codes"
    if learnable:
        x, axis, s, z = _learnable_inputs(x, scale, zero_point, quant_min, quant_max, axis, where)
        z = _forward_zero_point(z, quant_min, quant_max)
    else:
        x, s, z = _affine_inputs(x, scale, zero_point, quant_min, quant_max, axis, where)
    code = _torch_quantize(x, s, z)
    if np.isnan(code).any():
        raise ValueError(f"{where}: input contains NaN")
    return np.clip(code, quant_min, quant_max).astype(np.int64), np.asarray(z, np.int64)
