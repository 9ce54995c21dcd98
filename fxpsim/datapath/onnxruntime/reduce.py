r"""onnxruntime's float32 ``ReduceMean`` over trailing contiguous axes (its "KR" fast path), bit for bit, in numpy
(measured live in ``tests/frontends/test_onnx_reduce_mean.py``; onnxruntime 1.32, x86-64).

The tensor is seen as rows of :math:`n` contiguous values (the reduced axes) in one buffer. Each row is summed
by Eigen's vectorized ``sum()`` with SSE packets of four float32 lanes, which depends on where the row starts
relative to a 16-byte boundary: with :math:`a = (-r n) \bmod 4` (row :math:`r` of the whole batch; onnxruntime's
buffers are 64-byte aligned) and :math:`m = \lfloor (n - a) / 4 \rfloor` packets,

* :math:`m = 0`: :math:`S = \mathrm{fl}(\dots \mathrm{fl}(v_0 + v_1) \dots + v_{n-1})`;
* otherwise two packet accumulators :math:`p_0 = v_{a..a+3}`, :math:`p_1 = v_{a+4..a+7}` (when
  :math:`m > 1`) take every further pair of packets lane by lane, :math:`p_0 \mathrel{+}= p_1`, plus the one
  packet left over when :math:`m` is odd; the lanes reduce as :math:`\mathrm{fl}(\mathrm{fl}(p_0 + p_2) +
  \mathrm{fl}(p_1 + p_3))`; then the :math:`a` leading and the :math:`n - a - 4m` trailing values are added one
  by one, in index order;

and the mean is :math:`\mathrm{fl}(S / n)` (a float32 division). The summation does not depend on the thread
count (threads split rows). Rejected (of 48 probes, ``tools/fixtures/onnx/probe_resize_reduce.py``): a
sequential sum (33 differ), AVX packets of 8 (24), every row taken as aligned (8), :math:`S \cdot \mathrm{fl}(1/n)`
(19).

**Axes before the last** (a contiguous block of reduced axes followed by kept ones), as onnxruntime runs them with
**one intra-op thread** (``SessionOptions.intra_op_num_threads = 1``; with more threads its choice of kernel
depends on the thread count: measured, 4 threads sum some shapes sequentially instead). Axes of extent 1 are
dropped before the block and neighbours of one kind merged, giving ``[K0, R, K2]`` (kept, reduced, kept; :func:`reduce_mean_block`):

* no axis after the block: the trailing case above (rows of :math:`R`); kept axes of extent 1 after it still
  make it "KRK" with :math:`K_2 = 1` (measured);
* :math:`K_0 = 1` ("RK"): each output the sequential float32 sum of its column,
  :math:`S = \mathrm{fl}(\dots\mathrm{fl}(v_0 + v_1) \dots + v_{R-1})`;
* otherwise ("KRK"): for each of the :math:`K_0` blocks, MLAS's SGEMM of a row of ones by the :math:`[R, K_2]`
  block (:func:`~fxpsim.datapath.onnxruntime.mlas.mlas_gemm` with one thread: its one-row kernel sums the
  products four at a time);

then :math:`\mathrm{fl}(S / R)`.
"""
from __future__ import annotations

import numpy as np

from .mlas import mlas_gemm

__all__ = ["eigen_sum_rows", "reduce_mean_rows", "reduce_mean_block"]

F32 = np.float32
_P = 4


def eigen_sum_rows(rows: np.ndarray, first_row: int = 0) -> np.ndarray:
    """float32 sums of ``rows`` [R, n] as Eigen sums them, row ``i`` being row ``first_row + i`` of the buffer."""
    x = np.asarray(rows, F32)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"eigen_sum_rows needs a [rows, n >= 1] array, got shape {list(x.shape)}")
    r, n = x.shape
    out = np.empty(r, F32)
    starts = (-(np.arange(r, dtype=np.int64) + int(first_row)) * n) % _P
    for a in np.unique(starts):
        sel = np.nonzero(starts == a)[0]
        out[sel] = _sum_aligned(x[sel], int(min(a, n)))
    return out


def _sum_aligned(x, a):
    n = x.shape[1]
    m = (n - a) // _P
    if m == 0:
        acc = x[:, 0].copy()
        for k in range(1, n):
            acc = (acc + x[:, k]).astype(F32)
        return acc
    end2, end = a + (m // 2) * 2 * _P, a + m * _P
    p0 = x[:, a:a + _P].copy()
    if m > 1:
        p1 = x[:, a + _P:a + 2 * _P].copy()
        for i in range(a + 2 * _P, end2, 2 * _P):
            p0 = (p0 + x[:, i:i + _P]).astype(F32)
            p1 = (p1 + x[:, i + _P:i + 2 * _P]).astype(F32)
        p0 = (p0 + p1).astype(F32)
        if end > end2:
            p0 = (p0 + x[:, end2:end2 + _P]).astype(F32)
    acc = ((p0[:, 0] + p0[:, 2]).astype(F32) + (p0[:, 1] + p0[:, 3]).astype(F32)).astype(F32)
    for k in list(range(0, a)) + list(range(end, n)):
        acc = (acc + x[:, k]).astype(F32)
    return acc


def reduce_mean_rows(rows: np.ndarray, first_row: int = 0) -> np.ndarray:
    """onnxruntime's float32 mean of each row of ``rows`` [R, n]: :func:`eigen_sum_rows` divided by ``n``."""
    s = eigen_sum_rows(rows, first_row)
    return (s / F32(np.shape(rows)[1])).astype(F32)


def _merged_shape(shape, first: int, end: int):
    """``shape`` with axes ``first`` .. ``end - 1`` reduced: the extents of [kept, reduced, kept] after dropping
    axes of extent 1."""
    k0 = int(np.prod(shape[:first], dtype=np.int64))
    r = int(np.prod(shape[first:end], dtype=np.int64))
    k2 = int(np.prod(shape[end:], dtype=np.int64))
    return k0, r, k2


def reduce_mean_block(x: np.ndarray, first: int, end: int) -> np.ndarray:
    """onnxruntime's float32 ``ReduceMean`` of ``x`` (the whole tensor, batch included) over the contiguous axes
    ``first`` .. ``end - 1``, with one intra-op thread (module docstring); returns ``[K0, K2]`` (the kept
    extents before and after the reduced block)."""
    v = np.asarray(x, F32)
    if not 0 <= first < end <= v.ndim:
        raise ValueError(f"reduce_mean_block: axes {first} .. {end - 1} are not a block of a rank-{v.ndim} tensor")
    k0, r, k2 = _merged_shape(v.shape, first, end)
    blocks = v.reshape(k0, r, k2)
    if end == v.ndim:
        return reduce_mean_rows(blocks[:, :, 0]).reshape(k0, 1)
    if k0 == 1:
        acc = blocks[0, 0].copy()
        for i in range(1, r):
            acc = (acc + blocks[0, i]).astype(F32)
        s = acc[None]
    else:
        ones = np.ones((1, r), F32)
        s = np.stack([mlas_gemm(ones, blocks[d], threads=1)[0] for d in range(k0)])
    return (s / F32(r)).astype(F32)
