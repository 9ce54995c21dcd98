"""PyTorch-compatible fake quantization, bit-exact (2.x CPU kernels, float32).

``torch.fake_quantize_per_tensor_affine``, ``_per_channel_affine`` and their backward; the learnable
(LSQ) ops with PyTorch's fused multiply-adds and unchecked int64 casts reproduced
(:func:`_fma32`, :func:`_torch_int64`); the checks of PyTorch-style affine parameters
(:func:`check_affine_params`) and the integer codes of the affine ops (:func:`affine_codes`).
Formulas in the docstrings of the ops.
"""
from __future__ import annotations

import numbers

import numpy as np

from .fake_quant_inputs import _F32, _float32_input, _gradient_pair

__all__ = [
    "fake_quantize_per_tensor_affine", "fake_quantize_per_tensor_affine_backward",
    "fake_quantize_per_channel_affine", "fake_quantize_per_channel_affine_backward",
    "fake_quantize_learnable_per_tensor_affine", "fake_quantize_learnable_per_tensor_affine_backward",
    "fake_quantize_learnable_affine", "fake_quantize_learnable_affine_backward",
]


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
