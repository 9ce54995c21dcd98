"""ONNX Runtime's CPU arithmetic (its MLAS kernels), bit for bit, in numpy.

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

import os

import numpy as np

from . import mlas_kernel as _mk

__all__ = [
    "fma32", "quantize_linear", "dequantize_linear", "requant_multiplier", "requantize_output", "wrap_int32",
    "qlinear_add", "qlinear_mul", "qlinear_global_average_pool", "qlinear_average_pool", "concat_table",
    "mlas_gemm", "mlas_conv2d", "mlas_conv2d_plan", "ort_threads",
]

F32, F64 = np.float32, np.float64
#: MLAS constants (mlasi.h): SGEMM panel strides, threading granularity.
SGEMM_STRIDEN, SGEMM_STRIDEK = 128, 128
SGEMM_THREAD_COMPLEXITY = 64 * 1024
SGEMM_STRIDEN_THREAD_ALIGN = 16
MAXIMUM_THREAD_COUNT = 16 * 4


def ort_threads() -> int:
    """The intra-op thread count onnxruntime uses by default (one per core this process may run on);
    ``FXPSIM_ORT_THREADS`` overrides it. Only the float32 kernels' split of the reduction depends on it."""
    env = os.environ.get("FXPSIM_ORT_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def wrap_int32(v) -> np.ndarray:
    """Two's complement int32 wrap of int64 values."""
    v = np.asarray(v, dtype=np.int64)
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


# ----------------------------------------------------------------------------------------- float32 helpers
def fma32(a, b, c) -> np.ndarray:
    """Correctly rounded float32 fused multiply-add ``a * b + c`` (one rounding), vectorised.

    The product of two float32 values is exact in float64; the float64 sum is corrected with its exact
    error term (TwoSum) where it lands on a float32 rounding midpoint, so no double rounding remains."""
    p = np.multiply(np.asarray(a, F32), np.asarray(b, F32), dtype=F64)
    c64 = np.asarray(c, F32).astype(F64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)           # s + err == p + c exactly
    r = s.astype(F32)
    r64 = r.astype(F64)
    tie = (s != r64) & (err != 0)
    if np.any(tie):
        up = np.nextafter(r, F32(np.inf))
        dn = np.nextafter(r, F32(-np.inf))
        at_up = tie & (s == (r64 + up.astype(F64)) / 2) & (err > 0)
        at_dn = tie & (s == (r64 + dn.astype(F64)) / 2) & (err < 0)
        r = np.where(at_up, up, np.where(at_dn, dn, r))
    return np.asarray(r, F32)


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
    lo, hi = _range(dtype)
    s = _channel(np.asarray(scale, F32), x.ndim, axis)
    z = _channel(np.asarray(zero_point, np.int64), x.ndim, axis)
    with np.errstate(all="ignore"):
        v = x / s
    vlo, vhi = (lo - z).astype(F32), (hi - z).astype(F32)
    v = np.where(np.isnan(v), vlo, np.minimum(np.maximum(v, vlo), vhi))
    return (np.rint(v).astype(np.int64) + z).astype(dtype)


def dequantize_linear(q, scale, zero_point, axis=None) -> np.ndarray:
    """``DequantizeLinear``: ``float32(q - z) * s`` (the difference exact, one rounding)."""
    q = np.asarray(q)
    s = _channel(np.asarray(scale, F32), q.ndim, axis)
    z = _channel(np.asarray(zero_point, np.int64), q.ndim, axis)
    return ((q.astype(np.int64) - z).astype(F32) * s).astype(F32)


# ----------------------------------------------------------------------------------------- output stage
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
    lo, hi = _range(dtype)
    z = int(zero_point)
    v = np.asarray(acc, np.int64).astype(F32) * np.asarray(multiplier, F32)
    v = np.minimum(np.maximum(v, F32(lo - z)), F32(hi - z))
    return (np.rint(v).astype(np.int64) + z).astype(dtype)


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
    acc = np.asarray(sums, np.int64) - int(zx) * int(count)
    m = F32(F32(sx) / F32(F32(sy) * F32(count)))
    return requantize_output(acc, m, zy, dtype)


def qlinear_average_pool(x, kernel, stride, pads, count_include_pad: bool, sx, zx, sy, zy) -> np.ndarray:
    """``QLinearAveragePool`` (2-D, NHWC codes): every input dequantized to float32 :math:`s_x (x - z_x)`,
    each window summed in float32 in row-major order (padded taps skipped), divided by the element count
    (the window size with ``count_include_pad``, else the valid taps), then
    :math:`\\mathrm{round\\_half\\_even}(y \\oslash s_y + z_y)` in float32, saturated.
    ``pads = ((top, bottom), (left, right))``."""
    x = np.asarray(x)
    dtype = x.dtype
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), ((pt, pb), (pl, pr)) = kernel, stride, pads
    xf = (F32(sx) * (x.astype(np.int64) - int(zx)).astype(F32)).astype(F32)
    xp = np.zeros((n, h + pt + pb, w + pl + pr, c), F32)
    xp[:, pt:pt + h, pl:pl + w] = xf
    valid = np.zeros((h + pt + pb, w + pl + pr), np.int64)
    valid[pt:pt + h, pl:pl + w] = 1
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    acc = np.zeros((n, oh, ow, c), F32)
    cnt = np.zeros((oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw)
            acc = (acc + xp[:, rows, cols]).astype(F32)     # + 0.0 for a padded tap: no change
            cnt += valid[rows, cols]
    if count_include_pad:
        cnt = np.full((oh, ow), kh * kw, np.int64)
    y = (acc / cnt.astype(F32)[None, :, :, None]).astype(F32)
    t = ((y / F32(sy)).astype(F32) + F32(zy)).astype(F32)
    lo, hi = _range(dtype)
    return np.clip(np.rint(t).astype(np.int64), lo, hi).astype(dtype)


# ----------------------------------------------------------------------------------------- MLAS SGEMM
def _strides(n: int, k: int, trans_a: bool = False) -> tuple[int, int]:
    """MlasSgemmOperation's (StrideN, StrideK): widen N when K is small, K when N is small."""
    sn, sk = SGEMM_STRIDEN, SGEMM_STRIDEK
    if n >= k:
        while sk // 2 >= k:
            sn, sk = sn * 2, sk // 2
    elif not trans_a:
        while sn > 16 and sn // 2 >= n:
            sn, sk = sn // 2, sk * 2
    return sn, sk


def _fma_chain(a3, b3, k0: int, k1: int) -> np.ndarray:
    """acc = 0; acc = fma(a[..., m, k], b[..., k, n], acc) for k = k0 .. k1-1 (the SGEMM kernels' order)."""
    acc = np.zeros(a3.shape[:-1] + (b3.shape[-1],), F32)
    for k in range(k0, k1):
        acc = fma32(a3[..., :, k, None], b3[..., None, k, :], acc)
    return acc


def _kernel_m1(a3, b3, c3):
    """MlasSgemmKernelM1Avx (one row of A, B not transposed): products (mul, no FMA) summed four at a time
    ``((p0 + p1) + p2) + p3``, each group added to C; then a pair, then a single product."""
    k_total = a3.shape[-1]
    out = np.zeros(a3.shape[:-1] + (b3.shape[-1],), F32) if c3 is None else np.array(c3, F32)

    def prod(k):
        return (a3[..., :, k, None] * b3[..., None, k, :]).astype(F32)

    k = 0
    while k_total - k >= 4:
        t = (prod(k) + prod(k + 1)).astype(F32)
        t = (t + prod(k + 2)).astype(F32)
        t = (t + prod(k + 3)).astype(F32)
        out = (t + out).astype(F32)
        k += 4
    if k_total - k >= 2:
        out = ((prod(k) + prod(k + 1)).astype(F32) + out).astype(F32)
        k += 2
    if k_total - k >= 1:
        out = (prod(k) + out).astype(F32)
    return out


def _kernel_m1_transpose_b(x3, rows3, c3):
    """MlasSgemmKernelM1TransposeBAvx: ``c[r] = sum_k x[k] rows[r, k]`` with eight lane accumulators
    (lane ``k mod 8``, mul then add), reduced differently for rows in blocks of 4, then 2, then 1.

    ``x3``: [..., 1, K], ``rows3``: [..., R, K]; returns [..., 1, R]."""
    k_total, r_total = x3.shape[-1], rows3.shape[-2]
    lanes = np.zeros(rows3.shape[:-1] + (8,), F32)            # [..., R, 8]
    for k in range(k_total):
        lanes[..., k % 8] = (lanes[..., k % 8] + (x3[..., 0, None, k] * rows3[..., :, k]).astype(F32)).astype(F32)
    l = [lanes[..., i] for i in range(8)]                      # each [..., R]
    red4 = ((((l[0] + l[1]).astype(F32) + l[2]).astype(F32) + l[3]).astype(F32)
            + (((l[4] + l[5]).astype(F32) + l[6]).astype(F32) + l[7]).astype(F32)).astype(F32)
    red2 = ((((l[0] + l[2]).astype(F32) + (l[4] + l[6]).astype(F32)).astype(F32))
            + ((l[1] + l[3]).astype(F32) + (l[5] + l[7]).astype(F32)).astype(F32)).astype(F32)
    red1 = (((l[0] + l[1]).astype(F32) + (l[2] + l[3]).astype(F32)).astype(F32)
            + ((l[4] + l[5]).astype(F32) + (l[6] + l[7]).astype(F32)).astype(F32)).astype(F32)
    block = np.empty(r_total, np.int64)
    n4 = r_total // 4 * 4
    block[:n4] = 4
    rest = r_total - n4
    block[n4:n4 + (rest & 2)] = 2
    block[n4 + (rest & 2):] = 1
    red = np.where(block == 4, red4, np.where(block == 2, red2, red1))
    if c3 is not None:
        red = (red + np.asarray(c3, F32)[..., 0, :]).astype(F32)
    return red[..., None, :]


def _sgemm_operation(a3, b3, c3=None, b_contiguous_column: bool = True, trans_b: bool = False):
    """:func:`_sgemm_operation_numpy` in C (:mod:`~fxpsim.datapath.onnxruntime.mlas_kernel`), the same bits;
    ``a3`` may hold fewer matrices than ``b3`` (one weight for every ``len(a3)``-th item)."""
    if not _mk.available():
        return _sgemm_operation_numpy(a3, b3, c3, b_contiguous_column, trans_b)
    a3, b3 = np.asarray(a3, F32), np.asarray(b3, F32)
    lead = np.broadcast_shapes(a3.shape[:-2], b3.shape[:-2])
    m, k_total = a3.shape[-2:]
    n = b3.shape[-1]
    a = a3.reshape((-1, m, k_total)) if a3.ndim > 2 else a3[None]
    b = np.broadcast_to(b3, lead + (k_total, n)).reshape((-1, k_total, n))
    c = None if c3 is None else np.broadcast_to(np.asarray(c3, F32), lead + (m, n)).reshape((-1, m, n))
    if m == 1:
        kind, sk = (_mk.M1TB if trans_b else _mk.M1), 0
    elif n == 1 and b_contiguous_column and not trans_b:
        kind, sk = _mk.N1, 0
    else:
        kind, sk = _mk.SLICES, _strides(n, k_total)[1]
        if k_total == 0:
            return (np.zeros(lead + (m, n), F32) if c is None else np.array(c, F32).reshape(lead + (m, n)))
    return _mk.sgemm(a, b, c, kind, sk).reshape(lead + (m, n))


def _sgemm_operation_numpy(a3, b3, c3=None, b_contiguous_column: bool = True, trans_b: bool = False):
    """MlasSgemmOperation (one thread), A not transposed, alpha = 1: ``c3`` None means beta = 0, else
    beta = 1 (accumulate into ``c3``). ``a3`` [..., M, K], ``b3`` [..., K, N] (``trans_b``: B is stored
    [N, K], which selects other one-row / one-column kernels)."""
    m, k_total = a3.shape[-2:]
    n = b3.shape[-1]
    if m == 1:
        if trans_b:
            return _kernel_m1_transpose_b(a3, np.swapaxes(b3, -1, -2), c3)
        return _kernel_m1(a3, b3, c3)
    if n == 1 and b_contiguous_column and not trans_b:
        return np.swapaxes(_kernel_m1_transpose_b(np.swapaxes(b3, -1, -2), a3,
                                                  None if c3 is None else np.swapaxes(c3, -1, -2)), -1, -2)
    _, sk = _strides(n, k_total)
    out = None if c3 is None else np.array(c3, F32)
    for k0 in range(0, k_total, sk):
        acc = _fma_chain(a3, b3, k0, min(k_total, k0 + sk))
        out = acc if out is None else (acc + out).astype(F32)
    return out


def _thread_target(complexity: float, threads: int) -> int:
    if complexity < SGEMM_THREAD_COMPLEXITY * MAXIMUM_THREAD_COUNT:
        target = int(complexity / SGEMM_THREAD_COMPLEXITY) + 1
    else:
        target = MAXIMUM_THREAD_COUNT
    return min(target, threads)


def mlas_gemm(a, b, c=None, threads: int | None = None, trans_b: bool = False) -> np.ndarray:
    """``MlasGemm`` (float32 SGEMM, no transposes, alpha 1; ``c`` given = beta 1: the result accumulates
    onto it) as onnxruntime's MatMul / Gemm run it on x86-64 with FMA: the work split over ``threads``
    (along N when N > M, which changes the K slicing of each part), K sliced by MLAS's panel strides,
    each slice a chain of fused multiply-adds in K order added to C; one-row (M = 1) and one-column
    (N = 1) products use MLAS's dedicated kernels (products and sums rounded separately). ``b`` is
    [K, N]; ``trans_b`` says onnxruntime stores it [N, K] (Gemm with transB = 1), which changes those
    kernels."""
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    m, k_total = a.shape
    n = b.shape[1]
    threads = ort_threads() if threads is None else threads
    c = None if c is None else np.asarray(c, F32)
    target = _thread_target(float(m) * n * k_total, threads)
    if target <= 1:
        return _sgemm_operation(a, b, c, trans_b=trans_b)
    parts = []
    if n > m:
        sn = n // target + (1 if (n // target) * target != n else 0)
        sn = (sn + SGEMM_STRIDEN_THREAD_ALIGN - 1) & ~(SGEMM_STRIDEN_THREAD_ALIGN - 1)
        for n0 in range(0, n, sn):
            n1 = min(n, n0 + sn)
            parts.append(_sgemm_operation(a, b[:, n0:n1], None if c is None else c[:, n0:n1],
                                          b_contiguous_column=False, trans_b=trans_b))
        return np.concatenate(parts, axis=1)
    sm = m // target + (1 if (m // target) * target != m else 0)
    for m0 in range(0, m, sm):
        m1 = min(m, m0 + sm)
        parts.append(_sgemm_operation(a[m0:m1], b, None if c is None else c[m0:m1], trans_b=trans_b))
    return np.concatenate(parts, axis=0)


# ----------------------------------------------------------------------------------------- MLAS conv
def mlas_conv2d_plan(batch: int, groups: int, in_channels: int, in_hw, kernel, stride, pads, dilation,
                     out_channels: int, threads: int | None = None) -> dict:
    """How ``MlasConv`` runs a 2-D float convolution (MlasConvPrepare): the algorithm and the slicing of
    the output positions; ``pads = ((top, bottom), (left, right))``. Raises ``NotImplementedError`` for
    the cases fxpsim does not reproduce."""
    threads = ort_threads() if threads is None else threads
    cg, fc = in_channels // groups, out_channels // groups
    (h, w), (kh, kw), (sh, sw), (dh, dw) = in_hw, kernel, stride, dilation
    ((pt, pb), (pl, pr)) = pads
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    k_total, out_size = cg * kh * kw, oh * ow
    plan = dict(k=k_total, out_size=out_size, oh=oh, ow=ow, filters=fc, in_channels_per_group=cg)
    strides_one = sh == 1 and sw == 1
    no_pad = pt == pb == pl == pr == 0
    if strides_one and no_pad:
        if k_total == cg:
            return dict(plan, algorithm="gemm_direct")
        if dh == 1 and dw == 1 and cg == 1 and (kw == w or (kh == h and kw == 1)):
            raise NotImplementedError("MLAS's direct-GEMM convolution of a single-channel input with a "
                                      "kernel as wide (or as tall) as the image")
    if fc > out_size:
        return dict(plan, algorithm="expand_then_gemm")
    segments = [(0, out_size)]
    if batch * groups == 1:
        target = _thread_target(float(fc) * out_size * k_total, threads)
        stride_n = out_size // target + (1 if (out_size // target) * target != out_size else 0)
        if target > 1:
            stride_n = (stride_n + SGEMM_STRIDEN_THREAD_ALIGN - 1) & ~(SGEMM_STRIDEN_THREAD_ALIGN - 1)
        if stride_n < out_size:
            segments = [(s, min(stride_n, out_size - s)) for s in range(0, out_size, stride_n)]
    return dict(plan, algorithm="expand_then_gemm_segmented", segments=segments)


def _im2col(x, kernel, stride, pads, dilation, oh, ow):
    """[B, C, H, W] -> [B, C*KH*KW, OH*OW] (rows in MLAS's order: channel, kernel row, kernel column)."""
    bsz, c, h, w = x.shape
    (kh, kw), (sh, sw), ((pt, pb), (pl, pr)), (dh, dw) = kernel, stride, pads, dilation
    xp = np.zeros((bsz, c, h + pt + pb, w + pl + pr), F32)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    cols = np.empty((bsz, c, kh, kw, oh, ow), F32)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return cols.reshape(bsz, c * kh * kw, oh * ow)


def mlas_conv2d(x, w, bias, stride, pads, dilation, groups: int, threads: int | None = None) -> np.ndarray:
    """onnxruntime's float32 ``Conv`` (NCHW, ``MlasConv``): ``x`` [N, C, H, W], ``w`` [M, C/g, KH, KW],
    ``bias`` [M] or None; ``pads = ((top, bottom), (left, right))``. Returns [N, M, OH, OW] float32.

    The algorithm MlasConvPrepare picks (direct GEMM for 1x1 unit-stride unpadded kernels, full im2col +
    GEMM when there are more filters than output positions, else im2col in K slices with the output
    positions split into segments), each GEMM as :func:`mlas_gemm`, then the bias added in float32."""
    x = np.asarray(x, F32)
    w = np.asarray(w, F32)
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = w.shape[2:]
    plan = mlas_conv2d_plan(n, groups, c, (h, wd), (kh, kw), stride, pads, dilation, m, threads)
    k_total, out_size, fc = plan["k"], plan["out_size"], plan["filters"]
    oh, ow = plan["oh"], plan["ow"]
    cg = c // groups
    if _mk.available():
        out = _conv_c(x, w, plan, stride, pads, dilation, groups, threads)
        out = out.reshape(n, m, oh, ow)
        if bias is not None:
            out = (out + np.asarray(bias, F32).reshape(1, m, 1, 1)).astype(F32)
        return out
    # batched operands over (batch, group): A [B*G, FC, K], columns [B*G, K, OUT]
    filt = np.broadcast_to(w.reshape(1, groups, fc, k_total), (n, groups, fc, k_total)).reshape(n * groups, fc, k_total)
    xg = x.reshape(n * groups, cg, h, wd)
    if plan["algorithm"] == "gemm_direct":
        cols = xg.reshape(n * groups, cg, h * wd)
        out = mlas_gemm(filt[0], cols[0], threads=threads)[None] if n * groups == 1 else _sgemm_operation(filt, cols)
    else:
        cols = _im2col(xg, (kh, kw), stride, pads, dilation, oh, ow)
        if plan["algorithm"] == "expand_then_gemm":
            if n * groups == 1:
                out = mlas_gemm(filt[0], cols[0], threads=threads)[None]
            else:
                out = np.stack([mlas_gemm(filt[i], cols[i], threads=threads) for i in range(n * groups)])
        else:
            out = np.empty((n * groups, fc, out_size), F32)
            for s0, count in plan["segments"]:
                out[..., s0:s0 + count] = _conv_operation(filt, cols[..., s0:s0 + count], k_total, out_size)
    out = out.reshape(n, m, oh, ow)
    if bias is not None:
        out = (out + np.asarray(bias, F32).reshape(1, m, 1, 1)).astype(F32)
    return out


def _conv_c(x, w, plan, stride, pads, dilation, groups: int, threads):
    """:func:`mlas_conv2d`'s arithmetic in C (no bias): the segmented algorithm fused with its im2col
    (:func:`~fxpsim.datapath.onnxruntime.mlas_kernel.conv_segmented`), the GEMM ones on the weight shared by
    every image (no per-image copy). Returns [N, M, OH * OW]."""
    n, c, h, wd = x.shape
    m, fc, k_total, out_size = w.shape[0], plan["filters"], plan["k"], plan["out_size"]
    ((pt, _), (pl, _)) = pads
    if plan["algorithm"] == "expand_then_gemm_segmented":
        return _mk.conv_segmented(x, w, groups, w.shape[2:], stride, (pt, pl), dilation, (plan["oh"], plan["ow"]),
                                  plan["segments"])
    filt = w.reshape(groups, fc, k_total)
    if plan["algorithm"] == "gemm_direct":
        cols = x.reshape(n * groups, c // groups, h * wd)
    else:
        cols = _im2col(x.reshape(n * groups, c // groups, h, wd), w.shape[2:], stride, pads, dilation,
                       plan["oh"], plan["ow"])
    if n * groups == 1:
        out = mlas_gemm(filt[0], cols[0], threads=threads)[None]
    elif plan["algorithm"] == "expand_then_gemm" and _thread_target(
            float(fc) * out_size * k_total, ort_threads() if threads is None else threads) > 1:
        out = np.stack([mlas_gemm(filt[i % groups], cols[i], threads=threads) for i in range(n * groups)])
    else:      # the batched direct GEMM, or MlasGemms that are one SGEMM operation each: all in one call
        out = _sgemm_c(filt, cols)
    return out.reshape(n, m, out_size)


def _sgemm_c(a3, b3):
    """One SGEMM operation (beta 0) per matrix of ``b3`` [B, K, N] with ``a3[i % len(a3)]`` (the kernel
    :func:`_sgemm_operation` chooses for those shapes)."""
    m, k_total = a3.shape[-2:]
    n = b3.shape[-1]
    if m == 1:
        return _mk.sgemm(a3, b3, None, _mk.M1)
    if n == 1:
        return _mk.sgemm(a3, b3, None, _mk.N1)
    if k_total == 0:
        return np.zeros((len(b3), m, n), F32)
    return _mk.sgemm(a3, b3, None, _mk.SLICES, _strides(n, k_total)[1])


def _conv_operation(filt, cols, k_total: int, out_size: int):
    """MlasConvOperation over one segment of output positions: slices of StrideN positions, K in slices of
    StrideK (each an SGEMM with beta 0, then 1)."""
    seg = cols.shape[-1]
    sn, sk = SGEMM_STRIDEN, SGEMM_STRIDEK
    if seg >= k_total:
        while sk // 2 >= k_total:
            sn, sk = sn * 2, sk // 2
    else:
        while sn > 16 and sn // 2 >= seg:
            sn, sk = sn // 2, sk * 2
    out = np.empty(cols.shape[:-2] + (filt.shape[-2], seg), F32)
    for n0 in range(0, seg, sn):
        n1 = min(seg, n0 + sn)
        acc = None
        for k0 in range(0, k_total, sk):
            k1 = min(k_total, k0 + sk)
            acc = _sgemm_operation(filt[..., k0:k1], cols[..., k0:k1, n0:n1], acc,
                                   b_contiguous_column=(out_size == 1))
        out[..., n0:n1] = acc
    return out
