"""Buffers of the accumulating kernels: per-thread scratch, lane copies of the operands, the right operand
packed in 64-column slabs, and the temporary-memory limit that cuts long reductions into K chunks
(each chunk starts from the previous chunk's fitted accumulators, so the bits are those of one pass)."""
from __future__ import annotations

import threading

import numpy as np

from . import _accumulate as _k

_TLS = threading.local()      # per-thread scratch (overflow counts, im2col patches, BLAS operands)
_SCRATCH_BYTES = 1 << 22      # temporaries up to this size reuse per-thread buffers
_COUNT_SCRATCH_BYTES = 1 << 26  # overflow counts up to this size reuse a per-thread buffer

def _pack_slabs(b3: np.ndarray, dtype, scale: int = 1) -> np.ndarray:
    """b [B, K, N] -> [B, ceil(N/JB)*K*JB]: column slabs [N/JB, K, JB] (zero padded), times ``scale``."""
    nb, kk, n = b3.shape
    jb = _k.slab_width()
    nblk, full = -(-n // jb), n // jb
    packed = _scratch("slabs", (nb, nblk, kk, jb), dtype)      # consumed by one kernel call
    if full:            # one strided copy (b3 may be a transposed view: see _transposed)
        packed[:, :full] = b3[:, :, :full * jb].reshape(nb, kk, full, jb).transpose(0, 2, 1, 3)
    if full < nblk:     # last slab, zero padded
        packed[:, full] = 0
        packed[:, full, :, :n - full * jb] = b3[:, :, full * jb:]
    if scale != 1 and scale <= np.iinfo(dtype).max:
        packed *= dtype(scale)
    # (a scale beyond the lanes happens only for an all-zero b: the caller bounds |b| * scale)
    return packed.reshape(nb, nblk * kk * jb)


#: Kernel temporaries (lane copies of a, the padded column slabs of b) may take this many bytes, or
#: ``_TEMP_FACTOR`` times the inputs plus outputs when that is more; larger problems run in chunks
#: along the reduction axis (the sequential kernels), or on the generic kernel (the adder tree).
_TEMP_BYTES = 64 << 20
_TEMP_FACTOR = 1
_MIN_K_CHUNK = 256          # shortest reduction chunk (each chunk re-reads the [R, N] outputs)


def _temp_limit(a3, b3, init3=None) -> int:
    """Bytes the kernel temporaries of one problem may take (see ``_TEMP_BYTES``)."""
    rows, n = a3.shape[0] * a3.shape[1], b3.shape[2]
    io = a3.size * a3.itemsize + b3.size * b3.itemsize + rows * n * 8 * (2 if init3 is not None else 1)
    return max(_TEMP_BYTES, _TEMP_FACTOR * io)


def _k_chunk(rows: int, n: int, kk: int, itemsize: int, limit: int) -> int:
    """Reduction steps per kernel call: all of K unless the lane copy of a and the padded slabs
    of b (``(rows + N padded to the slab width) * itemsize`` bytes per step) exceed ``limit``."""
    npad = -(-n // _k.slab_width()) * _k.slab_width()
    per_k = (rows + npad) * itemsize
    if per_k * kk <= limit:
        return max(kk, 1)
    return max(_MIN_K_CHUNK, limit // per_k)


def _run_sequential(kernel, a3, b3, rpb, init3, shift, dtype, mode, lo, hi, sh, nthreads, counts=True,
                    transposed=False, init_dtype=None):
    """One sequential SIMD kernel (``mac_fast`` / ``mac_fast16`` / ``mac_fast32m``) over a3 [B, M, K] @ b3
    -> (out, cnt) [R, N] (``cnt`` None without ``counts``).

    ``dtype``: lane type of the operands; ``init_dtype``: of the start values and of ``lo``/``hi``
    (default ``dtype``; ``mac_fast32m`` takes int16 operands and int32 accumulators).
    When the lane copies would exceed :func:`_temp_limit`, K is cut into chunks run one after the
    other, each starting from the previous chunk's (fitted) accumulators as its ``init``: per-add
    fitting is sequential, and the kernels fit after every add, so the chunked result and counts
    equal the unchunked ones bit for bit.
    """
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    idt = np.dtype(init_dtype or dtype).type
    kc = _k_chunk(rows, n, kk, np.dtype(dtype).itemsize, _temp_limit(a3, b3, init3))
    if kc >= kk:
        a2, bs, ini, out, cnt = _lane_buffers(a3, b3, init3, shift, dtype, counts=counts, transposed=transposed,
                                              init_dtype=idt)
        kernel(a2, bs, ini, out, cnt, rpb, mode, idt(lo), idt(hi), sh, nthreads)
        return out, (cnt if counts else None)
    out = np.empty((rows, n), np.int64)
    total = np.zeros((rows, n), np.int64) if counts else None
    start = init3
    _TLS.arena = {}                        # the chunks' lane buffers: allocated once, by the first
    try:
        for k0 in range(0, kk, kc):
            k1 = min(kk, k0 + kc)
            a2, bs, ini, _, cnt = _lane_buffers(a3[:, :, k0:k1], b3[:, k0:k1, :], start, shift, dtype,
                                                counts=counts, out=out, init_dtype=idt)
            kernel(a2, bs, ini, out, cnt, rpb, mode, idt(lo), idt(hi), sh, nthreads)
            if counts:
                total += cnt
            start = out.reshape(nb, m, n)  # copied into the lane buffer ``ini`` of the next chunk
    finally:
        _TLS.arena = None
    return out, total


#: Shortest reduction chunk worth a float32 BLAS call of its own: float32 is exact while every partial sum
#: of a chunk stays within 2^24, so K is cut into chunks of 2^24 / max|product| products (each chunk's
#: exact sum is added into int64); below this chunk length float64 (2^53) or the integer kernel runs.

def _count_scratch(rows: int, n: int) -> np.ndarray:
    """Per-output overflow counts [rows, n] in a per-thread reusable buffer.

    Fresh large arrays cost a page fault per 4 KiB on first touch; the counts are only summed
    (or copied when the caller wants them), so one buffer per thread is reused.
    """
    if rows * n * 8 > _COUNT_SCRATCH_BYTES:              # not kept alive after the call
        return np.empty((rows, n), np.int64)
    buf = getattr(_TLS, "counts", None)
    if buf is None or buf.size < rows * n:
        buf = _TLS.counts = np.empty(max(rows * n, 1 << 12), np.int64)
    return buf[:rows * n].reshape(rows, n)


def _scratch(name: str, shape, dtype) -> np.ndarray:
    """An uninitialised temporary of ``shape``/``dtype`` from a per-thread buffer named ``name``.

    Fresh arrays of a few hundred KiB can cost a page fault per 4 KiB every call (the allocator
    returns them to the system on free); internal temporaries that die before the public
    function returns reuse one buffer per name and thread instead.  Large ones are allocated, except
    inside a chunk loop (``_TLS.arena`` set by :func:`_run_sequential`), whose chunks share them.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes > _SCRATCH_BYTES:
        bufs = getattr(_TLS, "arena", None)
        if bufs is None:
            return np.empty(shape, dtype)
    else:
        bufs = _TLS.__dict__.setdefault("scratch", {})
    buf = bufs.get(name)
    if buf is None or buf.size < nbytes:
        buf = bufs[name] = np.empty(max(nbytes, 1 << 16), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def _lane_buffers(a3, b3, init3, shift, dtype, counts=True, transposed=False, out=None, init_dtype=None):
    """Operands (lane type) and int64 outputs of the SIMD kernels: a [R, K], packed b, init, out, cnt.

    ``transposed``: the output is a temporary (the caller transposes it into a fresh array);
    ``out``: an existing [R, N] int64 output to reuse; ``init_dtype``: lane type of the start values
    (default ``dtype``)."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    a2 = a3.reshape(nb * m, kk)
    if a2.dtype != dtype or not a2.flags.c_contiguous:
        a2 = _scratch("lane_a", a2.shape, dtype)
        np.copyto(a2, a3.reshape(nb * m, kk), casting="unsafe")   # the caller checked the lanes hold a
    bs = _pack_slabs(b3, dtype, 1 << shift)
    idt = dtype if init_dtype is None else init_dtype
    if init3 is None:
        ini = np.empty((0, n), idt)
    else:
        ini = _scratch("lane_init", (nb * m, n), idt)
        np.copyto(ini, init3.reshape(nb * m, n), casting="unsafe")
    cnt = _count_scratch(nb * m, n) if counts else np.empty((0, n), np.int64)
    if out is None:
        out = _scratch("out_t", (nb * m, n), np.int64) if transposed else np.empty((nb * m, n), np.int64)
    return a2, bs, ini, out, cnt


def _transpose_wins(b3, rows: int, n: int, shift: int, nthreads: int = 1) -> bool:
    """Whether the SIMD kernels should run the transposed problem ``out.T = b.T @ a.T``.

    The kernels hold ``FXA_JB`` output columns per slab (64), so a layer with few output channels
    (a conv with 8 filters, a dense layer with 10 outputs) fills a few of the lanes; transposed,
    the many rows (pixels, images) become the columns.  Each output still sees the same products
    in the same k order, so the bits (codes and overflow counts) are identical.  Chosen when it
    needs less than half the lane work per thread (threads take chunks of 32 rows).
    """
    jb = _k.slab_width()
    if b3.shape[0] != 1 or shift != 0 or n % jb == 0:
        return False
    plain = -(-n // jb) * jb * rows / min(nthreads, -(-rows // 32))
    transposed = -(-rows // jb) * jb * n / min(nthreads, -(-n // 32))
    return plain > 2 * transposed


def _transposed(a3, b3, init3):
    """Operands of the transposed problem: a' = b.T [1, N, K], b' = a.T [1, K, R], init' [N, R]."""
    nb, m, kk = a3.shape
    n = b3.shape[2]
    rows = nb * m
    it = None if init3 is None else init3.reshape(rows, n).T[None]
    return b3[0].T[None], a3.reshape(1, rows, kk).transpose(0, 2, 1), it


