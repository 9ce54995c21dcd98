"""onnxruntime's float32 SGEMM (``MlasGemm``, MLAS's x86-64 AVX2/FMA kernels), bit for bit: the numpy model
(the split over threads, the K slices of MLAS's panel strides, the fused multiply-add chains, the one-row and
one-column kernels) and its C twin (:mod:`fxpsim.datapath.onnxruntime.mlas_kernel`, the same bits, used when
built). Re-exported by :mod:`fxpsim.datapath.onnxruntime.mlas`.
"""
from __future__ import annotations

import os

import numpy as np

from . import mlas_kernel as _mk

__all__ = ["fma32", "mlas_gemm", "ort_threads"]

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
