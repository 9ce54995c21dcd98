"""TFLite MEAN, MAX_POOL_2D, PAD and CONCATENATION."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..integer_ops import _clamp_range, _explicit_padding, _pair
from ..fixed_point_multiplier import _mbqm_double
from ..requantize import _srdhm, _wrap_int32, quantize_multiplier
from ._common import _check_mbqm_shift, _clamp, _codes, _dtype, _kernels, _round_half_away, _scale, _to_int32, _zero_point
from .quantize import _QUANT_TYPES, requantize_params, requantize_tflite

__all__ = ['MeanParams', 'mean_params', 'mean_plan', 'quantized_mean', 'quantized_max_pool2d', 'quantized_concatenation', 'quantized_pad']


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
    ``kernels="xnnpack"``: see :func:`_mean_xnnpack`.  The arithmetic is :func:`mean_plan`'s.
    """
    _kernels(kernels)
    if not isinstance(params, MeanParams):
        raise TypeError(f"params must be MeanParams (from mean_params), got {type(params).__name__}")
    arr = _codes(x, params.dtype)
    return mean_plan(arr.shape, axis, params, keepdims=keepdims, kernels=kernels)(arr)


def mean_plan(shape, axis, params: MeanParams, *, keepdims: bool = False, kernels: str = "reference"):
    """:func:`quantized_mean` for inputs of ``shape`` with what depends on the shape, axes, parameters and kernel set
    alone (the element count, the folded multiplier, the checks) derived once: a function of the integer codes
    (``params.dtype`` or int64, of ``shape``) returning the output codes, bit for bit :func:`quantized_mean`'s."""
    _kernels(kernels)
    shape = tuple(int(d) for d in shape)
    axes = _axes(axis, len(shape))
    n = math.prod(shape[a] for a in axes)
    if n == 0 or math.prod(shape) == 0:
        raise ValueError("quantized_mean: the input or the reduced axes are empty")
    if kernels == "xnnpack":
        return _mean_xnnpack(axes, n, params, keepdims)
    if kernels == "builtin" and keepdims and len(shape) == 4 and sorted(axes) == [1, 2] and params.dtype == np.int8:
        return _mean_hw_builtin(n, params)
    k = min(n.bit_length() - 1, 32, 31 + params.shift)
    m = (params.multiplier << k) // n if k >= 0 else params.multiplier >> -k
    s = params.shift - k
    _check_mbqm_shift(s, "quantized_mean")
    info = np.iinfo(params.dtype)
    widest = max(-int(info.min), int(info.max))
    zin, zout = params.input_zero_point, params.output_zero_point
    # wrap32(wrap32(S) - z n) = wrap32(S - z n): one wrap of the exact int64 difference, where it can leave int32
    wrap = n * (widest + abs(zin)) >= 1 << 31
    lo, hi, dtype = int(info.min), int(info.max), params.dtype

    def from_sums(total):
        total = total - zin * n
        v = _mbqm_double(_wrap_int32(total) if wrap else total, m, s)
        return np.clip(v + zout, lo, hi).astype(dtype)
    return _by_sums(from_sums, axes, n, dtype, keepdims)


#: The most sums a MEAN's output table may cover (:func:`_by_sums`).
MEAN_TABLE = 1 << 20


def _by_sums(from_sums, axes, n: int, dtype, keepdims: bool):
    r"""The function of the codes for an output that depends on each sum :math:`S` of ``n`` codes alone
    (``from_sums``: int64 sums -> output codes).  On arrays of ``dtype`` (codes in its range), where the
    :math:`n (\max - \min) + 1` possible sums number at most :data:`MEAN_TABLE`: ``from_sums`` evaluated once on
    all of them and each call a sum and a table read (the same codes: a table of the function itself); other
    arrays (int64 codes) and wider ranges: ``from_sums`` on every call."""
    if not axes:
        return lambda arr: from_sums(arr.astype(np.int64))

    def sums(arr):
        return np.sum(arr, axis=axes, keepdims=keepdims, dtype=np.int64)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    if n * (hi - lo) + 1 > MEAN_TABLE:
        return lambda arr: from_sums(sums(arr))
    table, base = from_sums(np.arange(n * lo, n * hi + 1, dtype=np.int64)), n * lo
    # the table's index s - n lo in [0, n (hi - lo)], summed in the narrowest type that holds it (numpy's sum of
    # int8 into int16 is 4x its sum into int64)
    idt = np.int16 if n * (hi - lo) < 1 << 15 and n * max(-lo, hi) < 1 << 15 else np.int32

    merged = sorted(axes) == list(range(min(axes), max(axes) + 1))      # adjacent axes: one axis of a reshape

    def run(arr):
        if arr.dtype != dtype:
            return from_sums(sums(arr))
        if merged:
            a0 = min(axes)
            out_shape = arr.shape[:a0] + ((1,) * len(axes) if keepdims else ()) + arr.shape[max(axes) + 1:]
            s = arr.reshape(arr.shape[:a0] + (-1,) + arr.shape[max(axes) + 1:]).sum(axis=a0, dtype=idt)
            s = s.reshape(out_shape)
        else:
            s = np.sum(arr, axis=axes, keepdims=keepdims, dtype=idt)
        s -= idt(base)
        return np.take(table, s)
    return run


def _mean_hw_builtin(n, params):
    r"""LiteRT's optimized int8 MEAN over H, W of a 4-D tensor with ``keep_dims`` (``optimized_integer_ops::Mean``,
    one thread, x86-64 build with NEON_2_SSE).  Everything from float32 scales:

    .. math::

        t = \mathrm{fl}_{32}(\mathrm{fl}_{32}(z_{in} s_{in}) / s_{out}),\quad
        b = z_{out} - \operatorname{trunc}(t \pm 0.5),\quad
        (m, s) = \mathrm{QuantizeMultiplier}(\mathrm{fl}_{32}(s_{in} / \mathrm{fl}_{32}(n\,s_{out}))),

        y_c = \mathrm{clamp}(R(S_c) + b)

    with :math:`S_c` the sum of the raw codes; :math:`R` is ``MultiplyByQuantizedMultiplier4Rows``
    (rounding shift, ties up) for channels in whole blocks of 16, ``MultiplyByQuantizedMultiplier``
    for the rest.  Returns the function of the codes.
    """
    f32 = np.float32
    si, so = f32(params.input_scale), f32(params.output_scale)
    t = f32(f32(params.input_zero_point) * si) / so
    t = t + f32(0.5) if t > 0 else t - f32(0.5)
    bias = params.output_zero_point - int(np.trunc(t))
    m, s = quantize_multiplier(float(si / (f32(n) * so)))
    _check_mbqm_shift(s, "quantized_mean")
    info = np.iinfo(params.dtype)
    lo, hi, dtype = int(info.min), int(info.max), params.dtype

    def run(arr):
        total = _wrap_int32(np.sum(arr, axis=(1, 2), keepdims=True, dtype=np.int64))
        vec = arr.shape[3] // 16 * 16
        head = _srdhm(_wrap_int32(total[..., :vec] << max(s, 0)), m)
        if s < 0:
            head = (head + (1 << (-s - 1))) >> -s
        tail = _mbqm_double(total[..., vec:], m, s)
        return np.clip(np.concatenate([head, tail], axis=-1) + bias, lo, hi).astype(dtype)
    return run


def _mean_xnnpack(axes, n, params, keepdims):
    r"""XNNPACK's quantized mean: the int32 sum :math:`S` of the codes, then its reference int32 -> qs8
    convert with :math:`c = \mathrm{fl}_{32}(\mathrm{fl}_{32}(s_{in}/s_{out}) \cdot \mathrm{fl}_{32}(1/n))` and
    :math:`z' = \mathrm{fl}_{32}(z_{out} - \mathrm{fl}_{32}(\mathrm{fl}_{32}(n z_{in}) c))`:
    :math:`y = \mathrm{clamp}(\mathrm{rhe}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(S) c + z')))`.  Returns the function of
    the codes."""
    f32 = np.float32
    c = f32(f32(params.input_scale) / f32(params.output_scale)) * (f32(1) / f32(n))
    zp = f32(params.output_zero_point) - f32(f32(n) * f32(params.input_zero_point)) * c
    info = np.iinfo(params.dtype)
    lo, hi, dtype = info.min, info.max, params.dtype

    def from_sums(total):
        v = total.astype(np.float32) * c + zp
        return np.clip(np.rint(v), lo, hi).astype(dtype)
    return _by_sums(from_sums, axes, n, dtype, keepdims)


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
    lo, hi = _clamp_range(act_min, act_max, info)
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
