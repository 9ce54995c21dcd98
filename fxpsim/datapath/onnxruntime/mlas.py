"""ONNX Runtime's CPU arithmetic (its MLAS kernels), bit for bit, in numpy (the SGEMM operations and the
convolution also in C, the same bits: :mod:`.mlas_kernel`, used when built).

:func:`fxpsim.import_onnx` turns a quantized ONNX model into an integer graph whose ops
(:mod:`fxpsim.frontends.onnx.ops`) call these kernels when they run with ``requantization="native"``, i.e.
as onnxruntime's CPU execution provider computes them (x86-64 with AVX2/FMA or better; what each kernel
reproduces is stated in its docstring and was checked against onnxruntime 1.32):

* :func:`quantize_linear` / :func:`dequantize_linear`: ``QuantizeLinear`` (a float32 *division*, round half
  to even, saturate) and ``DequantizeLinear`` (``float32(q - z) * s``);
* :func:`requant_multiplier` and :func:`requantize_output`: the output stage of ``QLinearConv``,
  ``QLinearMatMul``, ``QGemm`` (``MlasRequantizeOutput``): the int32 accumulator converted to float32,
  multiplied by the float32 multiplier ``(s_x s_w) / s_y``, clamped, rounded half to even, plus the zero point;
* :func:`qlinear_add` / :func:`qlinear_mul`: the float32 formulas of ``QLinearAdd`` (fused multiply-adds,
  with a different association when one operand is broadcast) and ``QLinearMul``;
* :func:`qlinear_global_average_pool` (integer sum, then the output stage) and
  :func:`qlinear_average_pool` (float32 window sums);
* :func:`concat_table`: ``QLinearConcat``'s per-input lookup table;
* :func:`mlas_gemm` and :func:`mlas_conv2d`: MLAS's float32 SGEMM and convolution (the blocking of the
  reduction into K slices, fused multiply-adds in a fixed order, the special kernels for one-row and
  one-column products, the split of the work over threads), used where onnxruntime runs a quantized
  layer in float (a QDQ group its graph optimizer does not fuse).

Integer arithmetic is exact (int64); float32 arithmetic is numpy float32 (IEEE round to nearest even), and
a fused multiply-add is computed exactly by :func:`fma32`.
"""
from __future__ import annotations

import math

import numpy as np

from .mlas_conv import mlas_conv2d, mlas_conv2d_plan, mlas_conv2d_prepared
from .mlas_sgemm import fma32, mlas_gemm, ort_threads

__all__ = [
    "fma32", "quantize_linear", "dequantize_linear", "requant_multiplier", "requantize_output",
    "requantize_output_plan", "quantize_linear_plan", "dequantize_linear_plan", "qlinear_average_pool_plan",
    "qlinear_global_average_pool_plan",
    "wrap_int32", "channel_plan", "clamp",
    "qlinear_add", "qlinear_mul", "qlinear_global_average_pool", "qlinear_average_pool", "concat_table",
    "mlas_gemm", "mlas_conv2d", "mlas_conv2d_plan", "mlas_conv2d_prepared", "ort_threads",
]

F32, F64 = np.float32, np.float64
#: Length of the rows a large per-channel operation is computed in (:func:`channel_plan`), and the size
#: from which :func:`clamp` and QuantizeLinear take ``np.clip``.
ROW = 4096


def _range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def wrap_int32(v) -> np.ndarray:
    """Two's complement int32 wrap of int64 values."""
    v = np.asarray(v, dtype=np.int64)
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


# ----------------------------------------------------------------------------------------- Q / DQ
def _channel(v, ndim: int, axis):
    v = np.asarray(v)
    if v.ndim == 0 or v.size == 1 or axis is None:
        return v.reshape(()) if v.size == 1 else v
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def quantize_linear(x, scale, zero_point, dtype, axis=None) -> np.ndarray:
    """``QuantizeLinear`` (MlasQuantizeLinear): :math:`v = x \\oslash s` (float32 division), clamped to
    :math:`[q_{min} - z, q_{max} - z]` (NaN to :math:`q_{min} - z`), rounded half to even, plus :math:`z`.
    ``scale``/``zero_point`` per tensor or per channel along ``axis``."""
    x = np.asarray(x, F32)
    return quantize_linear_plan(_channel(np.asarray(scale, F32), x.ndim, axis),
                                _channel(np.asarray(zero_point, np.int64), x.ndim, axis), dtype)(x)


def quantize_linear_plan(scale, zero_point, dtype):
    """:func:`quantize_linear` with its constants derived once: ``f(x)`` for float32 ``x``, ``scale`` and
    ``zero_point`` already broadcastable against it."""
    lo, hi = _range(dtype)
    s, z = np.asarray(scale, F32), np.asarray(zero_point, np.int64)
    vlo, vhi, zf = (lo - z).astype(F32), (hi - z).astype(F32), z.astype(F32)
    small = np.dtype(dtype).itemsize <= 2
    z_one = z.size == 1                          # broadcasts to v's own shape when it has no more axes

    def quantize(x):
        with np.errstate(all="ignore"):
            v = np.asarray(x / s)
        if small and ((z_one and z.ndim <= v.ndim) or np.broadcast_shapes(v.shape, z.shape) == v.shape):
            # the same in float32 in place: the bounds, rint(v) and rint(v) + z are integers below 2^24 (exact);
            # NaN goes to the lower bound (fmax; on a large array after np.clip, which keeps it NaN)
            if v.size >= ROW:
                np.clip(v, vlo, vhi, out=v)
                nan = np.isnan(v)
                if nan.any():
                    np.copyto(v, vlo, where=nan)
            else:
                np.fmax(v, vlo, out=v)
                np.fmin(v, vhi, out=v)
            np.rint(v, out=v)
            v += zf
            return v.astype(dtype)
        v = np.where(np.isnan(v), vlo, np.minimum(np.maximum(v, vlo), vhi))
        return (np.rint(v).astype(np.int64) + z).astype(dtype)
    return quantize


def dequantize_linear(q, scale, zero_point, axis=None) -> np.ndarray:
    """``DequantizeLinear``: ``float32(q - z) * s`` (the difference exact, one rounding)."""
    q = np.asarray(q)
    return dequantize_linear_plan(_channel(np.asarray(scale, F32), q.ndim, axis),
                                  _channel(np.asarray(zero_point, np.int64), q.ndim, axis))(q)


def dequantize_linear_plan(scale, zero_point):
    """:func:`dequantize_linear` with its constants derived once: ``f(q)``, ``scale`` and ``zero_point``
    already broadcastable against ``q``."""
    s, z = np.asarray(scale, F32), np.asarray(zero_point, np.int64)
    zf, z_small = z.astype(F32), bool(np.all(np.abs(z) < (1 << 16)))

    def dequantize(q):
        if q.dtype.kind in "iu" and q.dtype.itemsize <= 2 and z_small:
            return (q.astype(F32) - zf) * s   # q - z: an integer below 2^17, exact in float32
        return ((q.astype(np.int64) - z).astype(F32) * s).astype(F32)
    return dequantize


# ----------------------------------------------------------------------------------------- output stage
def channel_plan(ufunc, v):
    """``f(a, out=None, dtype=None) = ufunc(a, v, out=out, dtype=dtype)`` for a vector ``v`` broadcast along ``a``'s last axis, computed on a
    large contiguous ``a`` (``out``, if given, ``a`` itself) as rows of ``r`` channel vectors against ``v``
    repeated ``r`` times (:math:`r \\cdot |v|` divides :data:`ROW`): the same elementwise operations, in numpy
    inner loops ``r`` times longer than a short channel axis."""
    v = np.asarray(v)
    channels = v.size if v.ndim == 1 and 1 < v.size <= ROW else 0
    tiled = {}

    def apply(a, out=None, dtype=None):
        if a.size >= ROW and channels and a.shape[-1] == channels and a.flags.c_contiguous \
                and (out is None or out is a):
            r = math.gcd(a.size // channels, ROW // channels)
            if r > 1:
                vt = tiled.get(r)
                if vt is None:
                    vt = tiled[r] = np.tile(v, r)
                rows = a.reshape(-1, r * channels)
                return ufunc(rows, vt, out=None if out is None else rows, dtype=dtype).reshape(a.shape)
        return ufunc(a, v, out=out, dtype=dtype)
    return apply


def clamp(v, lo, hi) -> np.ndarray:
    """``v`` (float) clamped to ``[lo, hi]`` in place, :math:`\\min(\\max(v, lo), hi)` (``lo <= hi``): one
    ``np.clip`` pass on a large array, ``np.maximum`` then ``np.minimum`` on a small one (``np.clip``'s Python
    wrapper costs more there than its single pass saves)."""
    if v.size >= ROW:
        return np.clip(v, lo, hi, out=v)
    np.maximum(v, lo, out=v)
    np.minimum(v, hi, out=v)
    return v
def requant_multiplier(sa, sb, sy, alpha=None) -> np.ndarray:
    """The float32 output multiplier of QLinearConv / QLinearMatMul: ``(s_a * s_b) / s_y`` evaluated left
    to right in float32 (``s_b`` per output channel); QGemm: ``((alpha * s_a) * s_b) / s_y``."""
    a = F32(sa)
    if alpha is not None:
        a = F32(F32(alpha) * a)
    return np.atleast_1d((a * np.asarray(sb, F32)).astype(F32) / F32(sy)).astype(F32)


def requantize_output(acc, multiplier, zero_point, dtype) -> np.ndarray:
    """``MlasRequantizeOutput``: the accumulator (int32, bias included) converted to float32 (round half to
    even: above :math:`2^{24}` low bits are lost), times the float32 multiplier (per channel along the last
    axis), clamped to :math:`[q_{min} - z, q_{max} - z]`, rounded half to even, plus :math:`z`."""
    return requantize_output_plan(multiplier, zero_point, dtype)(np.asarray(acc, np.int64))


def requantize_output_plan(multiplier, zero_point, dtype):
    """:func:`requantize_output` with its constants derived once: ``f(acc)``, ``acc`` int64 or float64 holding
    integers (its float32 conversion is the same correctly rounded value either way). For outputs of at most 16
    bits the zero point is added in float32: :math:`\\mathrm{rint}(v) + z` is an integer of magnitude below
    :math:`2^{17}`, exact, and then exactly converted."""
    lo, hi = _range(dtype)
    z = int(zero_point)
    m = np.asarray(multiplier, F32)
    vlo, vhi, zf = F32(lo - z), F32(hi - z), F32(z)
    small = np.dtype(dtype).itemsize <= 2
    scaled = channel_plan(np.multiply, m)       # acc converted to float32 first (one rounding), then the product

    def requantize(acc):
        v = clamp(scaled(acc, dtype=F32), vlo, vhi)
        np.rint(v, out=v)
        if small:
            v += zf
            return v.astype(dtype)
        return (v.astype(np.int64) + z).astype(dtype)
    return requantize


# ----------------------------------------------------------------------------------------- elementwise
def qlinear_add(a, b, sa, za, sb, zb, sy, zy, dtype, *, broadcast: str = "none") -> np.ndarray:
    """``QLinearAdd`` as MLAS computes it on x86 with AVX2 (``MlasQLinearAddKernelAvx2Helper``, as compiled
    in onnxruntime's wheels: the compiler contracts two multiply-adds into FMAs), numpy broadcasting.

    With :math:`r_A = s_a \\oslash s_y`, :math:`r_B = s_b \\oslash s_y`,
    :math:`F = z_y - \\mathrm{fma}(r_A, z_a, r_B z_b)` and the stored codes :math:`a, b` as float32:
    :math:`t = \\mathrm{fma}(a, r_A, \\mathrm{fma}(b, r_B, F))`, :math:`y = \\mathrm{sat}(\\mathrm{round\\_half
    \\_even}(t))` (the zero point inside ``t``: added before rounding). ``broadcast="a_scalar"`` (``a`` is
    one value per onnxruntime broadcast span, e.g. a scalar or a per-channel constant): onnxruntime swaps the
    operands first, so the roles of (a, r_A, z_a) and (b, r_B, z_b) exchange in both formulas;
    ``"none"`` and ``"b_scalar"`` use them as written."""
    a = np.asarray(a)
    b = np.asarray(b)
    if broadcast == "a_scalar":
        a, b, sa, za, sb, zb = b, a, sb, zb, sa, za
    elif broadcast not in ("none", "b_scalar"):
        raise ValueError(f"broadcast must be 'none', 'a_scalar' or 'b_scalar', got {broadcast!r}")
    ra, rb = F32(F32(sa) / F32(sy)), F32(F32(sb) / F32(sy))
    f = F32(F32(zy) - fma32(ra, F32(za), F32(rb * F32(zb))))
    t = fma32(a.astype(F32), ra, fma32(b.astype(F32), rb, f))
    lo, hi = _range(dtype)
    return np.clip(np.rint(t).astype(np.int64), lo, hi).astype(dtype)


def qlinear_mul(a, b, sa, za, sb, zb, sy, zy, dtype) -> np.ndarray:
    """``QLinearMul`` (MlasQLinearMul): :math:`p = (a - z_a)(b - z_b)` exact, then
    :math:`t = \\mathrm{f32}(p) \\cdot r + z_y` in float32 with :math:`r = (s_a s_b) \\oslash s_y`
    (the zero point added *before* rounding), :math:`y = \\mathrm{sat}(\\mathrm{round\\_half\\_even}(t))`."""
    p = (np.asarray(a).astype(np.int64) - int(za)) * (np.asarray(b).astype(np.int64) - int(zb))
    r = F32(F32(F32(sa) * F32(sb)) / F32(sy))
    t = ((p.astype(F32) * r).astype(F32) + F32(zy)).astype(F32)
    lo, hi = _range(dtype)
    return np.clip(np.rint(t).astype(np.int64), lo, hi).astype(dtype)


def concat_table(sx, zx, sy, zy, dtype) -> np.ndarray:
    """``QLinearConcat``'s lookup table of one input: ``QuantizeLinear(DequantizeLinear(v))`` for every code
    ``v`` of ``dtype`` (index ``v - qmin``); the identity when the parameters equal the output's."""
    lo, hi = _range(dtype)
    v = np.arange(lo, hi + 1)
    return quantize_linear(dequantize_linear(v, sx, zx), sy, zy, dtype)


# ----------------------------------------------------------------------------------------- pooling
def qlinear_global_average_pool(sums, count: int, sx, zx, sy, zy, dtype) -> np.ndarray:
    """``QLinearGlobalAveragePool`` (and ``QLinearAveragePool`` whose window is the whole unpadded image):
    the integer window sum minus :math:`z_x n`, through :func:`requantize_output` with the float32
    multiplier :math:`s_x \\oslash (s_y \\otimes n)`."""
    return qlinear_global_average_pool_plan(count, sx, zx, sy, zy, dtype)(np.asarray(sums, np.int64))


def qlinear_global_average_pool_plan(count: int, sx, zx, sy, zy, dtype):
    """:func:`qlinear_global_average_pool` with its multiplier and output stage derived once: ``f(sums)``
    (int64 sums)."""
    offset = int(zx) * int(count)
    requantize = requantize_output_plan(F32(F32(sx) / F32(F32(sy) * F32(count))), zy, dtype)
    return lambda sums: requantize(sums - offset)


def qlinear_average_pool(x, kernel, stride, pads, count_include_pad: bool, sx, zx, sy, zy) -> np.ndarray:
    """``QLinearAveragePool`` (2-D, NHWC codes): every input dequantized to float32 :math:`s_x (x - z_x)`,
    each window summed in float32 in row-major order (padded taps skipped), divided by the element count
    (the window size with ``count_include_pad``, else the valid taps), then
    :math:`\\mathrm{round\\_half\\_even}(y \\oslash s_y + z_y)` in float32, saturated.
    ``pads = ((top, bottom), (left, right))``."""
    x = np.asarray(x)
    return qlinear_average_pool_plan(x.shape, x.dtype, kernel, stride, pads, count_include_pad, sx, zx, sy, zy)(x)


def qlinear_average_pool_plan(shape, dtype, kernel, stride, pads, count_include_pad: bool, sx, zx, sy, zy):
    """:func:`qlinear_average_pool` for inputs of ``shape`` and ``dtype`` with its window counts, divisors and
    slices derived once: ``f(x)``."""
    n, h, w, c = shape
    (kh, kw), (sh, sw), ((pt, pb), (pl, pr)) = kernel, stride, pads
    valid = np.zeros((h + pt + pb, w + pl + pr), np.int64)
    valid[pt:pt + h, pl:pl + w] = 1
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    cnt = np.zeros((oh, ow), np.int64)
    taps = []
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw)
            taps.append((rows, cols))
            cnt += valid[rows, cols]
    if count_include_pad:
        cnt = np.full((oh, ow), kh * kw, np.int64)
    div = cnt.astype(F32)[None, :, :, None]
    lo, hi = _range(dtype)
    sxf, syf, zyf, zxi = F32(sx), F32(sy), F32(zy), int(zx)
    flo, fhi = F32(lo), F32(hi)                  # 8/16-bit bounds: exact in float32
    small = np.dtype(dtype).itemsize <= 2        # x - z_x below 2^17: exact in float32

    def pool(x):
        xp = np.zeros((x.shape[0], h + pt + pb, w + pl + pr, c), F32)
        inner = xp[:, pt:pt + h, pl:pl + w]
        if small:
            np.subtract(x, F32(zxi), out=inner)
        else:
            inner[...] = (x.astype(np.int64) - zxi).astype(F32)
        inner *= sxf
        acc = np.zeros((x.shape[0], oh, ow, c), F32)
        for rows, cols in taps:
            acc += xp[:, rows, cols]                   # + 0.0 for a padded tap: no change
        t = acc / div
        t /= syf
        t += zyf
        np.rint(t, out=t)                              # an integer: clamping it in float32 is exact
        return clamp(t, flo, fhi).astype(dtype)
    return pool
