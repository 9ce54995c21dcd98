# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Accumulating datapath kernels (multiply-accumulate with per-add overflow).

Compute-only: every argument is validated by :mod:`fxpsim.datapath`, which is
the public interface.  Codes are integers in the accumulator's LSB units.

Kernels (the vectorised loops are C in ``_accumulate.h``; rows run in parallel, never k)
-------
``mac_fast``      acc = fit(acc + a[i,k]*b[k,j]), k in order, on int32/int64 lanes
                  (AVX-512/AVX2/baseline variants picked at run time by GCC function multi-versioning)
``mac_fast16``    the same on 16-bit lanes with saturating adds (AVX-512BW/AVX2 intrinsics)
``mac_fast32m``   the same on 32-bit lanes from int16 operands (vpmaddwd products, AVX-512BW)
``mac_wrap64``    exact sums modulo 2^64 (unsigned lanes: wrapping by definition)
``tree_fast``     balanced adder-tree order on int32/int64 lanes, vectorised across output columns
``mac_generic``   the same for any width/mode/rounding, sequential or adder-tree order, int128 sums
``cumsum_rows``   running sums out[r,k] = fit(out[r,k-1] + x[r,k]) with per-step overflow flags
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t
import numpy as np

from fxpsim.core._kernels cimport (fx_i128, overflow128, shift_round)

cdef extern from "_accumulate.h" nogil:
    enum:
        FXA_JB
        FXA_EXACT
        FXA_SAT
        FXA_ZERO
        FXA_WRAP_S
        FXA_WRAP_U
    void fxa_mac_rows_i32(const int32_t* a, const int32_t* b, const int32_t* init, int64_t* out,
                          int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode,
                          int32_t lo, int32_t hi, int sh)
    void fxa_mac_rows_i64(const int64_t* a, const int64_t* b, const int64_t* init, int64_t* out,
                          int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode,
                          int64_t lo, int64_t hi, int sh)
    void fxa_tree_rows_i32(const int32_t* a, const int32_t* b, const int32_t* init, int64_t* out,
                           int64_t* cnt, int32_t* scratch, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N,
                           int mode, int32_t lo, int32_t hi, int sh)
    void fxa_tree_rows_i64(const int64_t* a, const int64_t* b, const int64_t* init, int64_t* out,
                           int64_t* cnt, int64_t* scratch, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N,
                           int mode, int64_t lo, int64_t hi, int sh)
    int fxa_have_clones()
    int fxa_i16_level()
    void fxa_mac_rows_u64(const uint64_t* a, const uint64_t* b, const uint64_t* init, int64_t* out,
                          int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode,
                          uint64_t lo, uint64_t hi, int sh)
    void fxa_mac_rows_i16(const int16_t* a, const int64_t* rows, Py_ssize_t lda, const int16_t* b,
                          const int16_t* init, Py_ssize_t init_ld, int64_t* out, int64_t* cnt,
                          Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode, int16_t lo, int16_t hi,
                          int sh, int level)
    void fxa_mac_rows_i32m(const int16_t* a, const int64_t* rows, Py_ssize_t lda, const int16_t* b,
                           const int32_t* init, Py_ssize_t init_ld, int64_t* out, int64_t* cnt,
                           Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode, int32_t lo, int32_t hi,
                           int sh)

FAST_EXACT = FXA_EXACT
FAST_SATURATE = FXA_SAT
FAST_ZERO = FXA_ZERO
FAST_WRAP_SIGNED = FXA_WRAP_S
FAST_WRAP_UNSIGNED = FXA_WRAP_U

cdef enum:
    ROW_CHUNK = 32     # rows handed to one kernel call (one thread's unit of work)

ctypedef fused lane_t:
    int32_t
    int64_t


def has_simd_dispatch():
    """True when the fast kernels were built with run-time AVX2/AVX-512 dispatch."""
    return bool(fxa_have_clones())


def slab_width():
    """Columns per packed slab of the right operand of ``mac_fast``."""
    return FXA_JB


def mac_fast(const lane_t[:, ::1] a, const lane_t[:, ::1] b, const lane_t[:, ::1] init,
             int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
             lane_t lo, lane_t hi, int sh, int nthreads):
    """out[r] := fit(... fit(init[r] + a[r,0]*b[r//M,0]) ... + a[r,K-1]*b[r//M,K-1]) (per-add fit).

    ``a`` is [R, K]; ``b`` is [batches, ceil(N/FXA_JB)*K*FXA_JB], each batch's [K, N] matrix packed
    in column slabs [N/FXA_JB, K, FXA_JB]; row ``r`` uses batch ``r // rows_per_batch``;
    ``init`` is [R, N] or has zero rows (start at 0).  ``cnt`` [R, N] receives the number of
    adds that left [lo, hi] per output (zero rows: not wanted, FAST_EXACT only).
    """
    cdef Py_ssize_t R = a.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    if R == 0 or N == 0:
        return
    if not has_cnt and mode != FXA_EXACT:
        raise ValueError("mac_fast: overflow counts are needed unless mode is FAST_EXACT")
    per_batch = (M + chunk - 1) // chunk
    # chunks of up to ROW_CHUNK rows of one batch; a chunk reuses each slab of b from cache
    for c in prange(per_batch * (R // M), nogil=True, schedule="dynamic", num_threads=nthreads):
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        if lane_t is int32_t:
            fxa_mac_rows_i32(&a[r, 0] if K > 0 else NULL, &b[r // M, 0] if K > 0 else NULL,
                             &init[r, 0] if has_init else NULL, &out[r, 0], &cnt[r, 0] if has_cnt else NULL,
                             nr, K, N, mode, lo, hi, sh)
        else:
            fxa_mac_rows_i64(&a[r, 0] if K > 0 else NULL, &b[r // M, 0] if K > 0 else NULL,
                             &init[r, 0] if has_init else NULL, &out[r, 0], &cnt[r, 0] if has_cnt else NULL,
                             nr, K, N, mode, lo, hi, sh)


def tree_fast(const lane_t[:, ::1] a, const lane_t[:, ::1] b, const lane_t[:, ::1] init,
              int64_t[:, ::1] out, int64_t[:, ::1] cnt, lane_t[:, ::1] scratch, Py_ssize_t rows_per_batch,
              int mode, lane_t lo, lane_t hi, int sh, int nthreads):
    """Adder-tree order of ``mac_fast`` (same arguments), vectorised across output columns.

    out[r, j] := fit(tree(a[r, k] * b[k, j] for k) + init[r, j]); ``scratch`` is
    [nthreads, max(K, 1) * FXA_JB], one buffer per thread.
    """
    cdef Py_ssize_t R = a.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, r
    cdef bint has_init = init.shape[0] > 0
    cdef int tid
    if R == 0 or N == 0:
        return
    for r in prange(R, nogil=True, schedule="static", num_threads=nthreads):
        tid = threadid()
        if lane_t is int32_t:
            fxa_tree_rows_i32(&a[r, 0] if K > 0 else NULL, &b[r // M, 0] if K > 0 else NULL,
                              &init[r, 0] if has_init else NULL, &out[r, 0], &cnt[r, 0], &scratch[tid, 0],
                              1, K, N, mode, lo, hi, sh)
        else:
            fxa_tree_rows_i64(&a[r, 0] if K > 0 else NULL, &b[r // M, 0] if K > 0 else NULL,
                              &init[r, 0] if has_init else NULL, &out[r, 0], &cnt[r, 0], &scratch[tid, 0],
                              1, K, N, mode, lo, hi, sh)


def simd16_level():
    """2: AVX-512BW 16-bit kernel, 1: AVX2, 0: none on this CPU (``mac_fast16`` unavailable)."""
    return fxa_i16_level()


def _row_index(rows, Py_ssize_t R, Py_ssize_t ra, Py_ssize_t M, Py_ssize_t nb, str name):
    """The optional row-index array of the 16/32-bit kernels, checked (None: rows 0..R-1)."""
    cdef const int64_t[::1] idx
    if rows is None:
        return None
    idx = rows
    if idx.shape[0] != R:
        raise ValueError(f"{name}: rows has {idx.shape[0]} entries for {R} output rows")
    if nb != 1 or M != R:
        raise ValueError(f"{name}: a row index needs one right operand (no batches)")
    if R and (np.min(rows) < 0 or np.max(rows) >= ra):
        raise ValueError(f"{name}: row index outside 0..{ra - 1}")
    return idx


def mac_fast16(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int16_t[:, ::1] init,
               int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
               int16_t lo, int16_t hi, int sh, int nthreads, int level=-1, rows=None):
    """``mac_fast`` on 16-bit lanes (signed accumulator <= 16 bits, products fitting int16).

    Only FAST_SATURATE, FAST_ZERO and FAST_WRAP_SIGNED; needs ``simd16_level() > 0``.
    ``level``: -1 best for this CPU, or force 1 (AVX2) / 2 (AVX-512BW) up to ``simd16_level()``.
    ``init``: [R, N], one row [1, N] shared by every output row, or zero rows (start at 0).
    ``cnt``: [R, N], or zero rows: no counting (AVX-512BW only; the cheaper loops).
    ``rows``: optional int64 [R] source rows of ``a`` (output row r reads ``a[rows[r]]``; one batch).
    """
    cdef Py_ssize_t R = out.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr, init_ld
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    cdef int best = fxa_i16_level()
    cdef const int64_t[::1] idx
    cdef const int64_t* rp = NULL
    if level < 0:
        level = best
    if not 1 <= level <= best:
        raise RuntimeError(f"mac_fast16: SIMD level {level} unavailable (this CPU: {best})")
    if not has_cnt and level < 2:
        raise ValueError("mac_fast16: the AVX2 kernel always counts; pass cnt")
    idx = _row_index(rows, R, a.shape[0], M, b.shape[0], "mac_fast16")
    if idx is None and R != a.shape[0]:
        raise ValueError("mac_fast16: out and a must have the same rows")
    if R == 0 or N == 0:
        return
    if idx is not None:
        rp = &idx[0]
    init_ld = 0 if init.shape[0] == 1 else N
    per_batch = (M + chunk - 1) // chunk
    for c in prange(per_batch * (R // M), nogil=True, schedule="dynamic", num_threads=nthreads):
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        fxa_mac_rows_i16(&a[0, 0] if K > 0 and rp != NULL else (&a[r, 0] if K > 0 else NULL),
                         rp + r if rp != NULL else NULL, K,
                         &b[r // M, 0] if K > 0 and rp == NULL else (&b[0, 0] if K > 0 else NULL),
                         (&init[0, 0] if init_ld == 0 else &init[r, 0]) if has_init else NULL, init_ld,
                         &out[r, 0], &cnt[r, 0] if has_cnt else NULL,
                         nr, K, N, mode, lo, hi, sh, level)


def mac_fast32m(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int32_t[:, ::1] init,
                int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
                int32_t lo, int32_t hi, int sh, int nthreads, rows=None):
    """``mac_fast`` on 32-bit lanes from int16 operands packed as for ``mac_fast16`` (AVX-512BW).

    Products are formed exactly by vpmaddwd (|a*b| <= 2^30).  Modes FAST_SATURATE, FAST_ZERO,
    FAST_WRAP_SIGNED, FAST_WRAP_UNSIGNED, FAST_EXACT.  Unless ``lo, hi`` is the full int32 range
    (a signed 32-bit register: the sum may wrap in the lanes, overflow is tested on the signs),
    the caller guarantees ``max(|lo|, |hi|, |init|) + max|a*b| <= 2^31 - 1``.
    ``init`` ([R, N], [1, N] or zero rows), ``cnt`` (zero rows: no counting) and ``rows`` as in
    ``mac_fast16``.  Needs ``simd16_level() == 2``.
    """
    cdef Py_ssize_t R = out.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr, init_ld
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    cdef const int64_t[::1] idx
    cdef const int64_t* rp = NULL
    if fxa_i16_level() < 2:
        raise RuntimeError("mac_fast32m: needs AVX-512BW")
    idx = _row_index(rows, R, a.shape[0], M, b.shape[0], "mac_fast32m")
    if idx is None and R != a.shape[0]:
        raise ValueError("mac_fast32m: out and a must have the same rows")
    if R == 0 or N == 0:
        return
    if idx is not None:
        rp = &idx[0]
    init_ld = 0 if init.shape[0] == 1 else N
    per_batch = (M + chunk - 1) // chunk
    for c in prange(per_batch * (R // M), nogil=True, schedule="dynamic", num_threads=nthreads):
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        fxa_mac_rows_i32m(&a[0, 0] if K > 0 and rp != NULL else (&a[r, 0] if K > 0 else NULL),
                          rp + r if rp != NULL else NULL, K,
                          &b[r // M, 0] if K > 0 and rp == NULL else (&b[0, 0] if K > 0 else NULL),
                          (&init[0, 0] if init_ld == 0 else &init[r, 0]) if has_init else NULL, init_ld,
                          &out[r, 0], &cnt[r, 0] if has_cnt else NULL,
                          nr, K, N, mode, lo, hi, sh)


def mac_wrap64(const uint64_t[:, ::1] a, const uint64_t[:, ::1] b, int64_t[:, ::1] out,
               Py_ssize_t rows_per_batch, int nthreads):
    """out[r] := sum_k a[r,k] * b[r // M][k] modulo 2^64 (b packed as for ``mac_fast``; int64 bit patterns).

    Exact low 64 bits of the sum of products of any int64 operands (unsigned arithmetic wraps by
    definition, and two's-complement wrapping commutes with summation).
    """
    cdef Py_ssize_t R = a.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr
    if R == 0 or N == 0:
        return
    per_batch = (M + chunk - 1) // chunk
    for c in prange(per_batch * (R // M), nogil=True, schedule="dynamic", num_threads=nthreads):
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        fxa_mac_rows_u64(&a[r, 0] if K > 0 else NULL, &b[r // M, 0] if K > 0 else NULL, NULL,
                         &out[r, 0], NULL, nr, K, N, FXA_EXACT, 0, 0, 0)


cdef inline int64_t aligned_product(int64_t x, int64_t y, int shift, int rnd) noexcept nogil:
    """x*y brought to the accumulator LSB: exact left shift (shift >= 0) or rounded right shift."""
    cdef int64_t p = x * y
    if shift >= 0:
        return p * ((<int64_t>1) << shift)
    return shift_round(p, -shift, rnd, 0)


cdef int64_t mac_one(const int64_t* arow, const int64_t* bcol, Py_ssize_t K, int64_t init,
                     int shift, int rnd, int word, bint is_signed, int mode, int order, bint at_end,
                     int64_t* scratch, int64_t* n_ovf) noexcept nogil:
    """One output: init + sum_k round(arow[k]*bcol[k]) with the accumulator's fit after every add.

    order 0: sequential a_{k+1} = fit(a_k + p_k); order 1: balanced pairwise tree over the
    products (odd last element passed up), then fit(root + init); at_end: exact sum, one fit.
    """
    cdef Py_ssize_t k, m, t
    cdef int ovf = 0
    cdef int64_t acc = init
    cdef fx_i128 total
    n_ovf[0] = 0
    if at_end:
        total = init
        for k in range(K):
            total = total + aligned_product(arow[k], bcol[k], shift, rnd)
        acc = overflow128(total, word, is_signed, mode, 0, &ovf)
        n_ovf[0] = ovf
        return acc
    if order == 0:
        for k in range(K):
            acc = overflow128(<fx_i128>acc + aligned_product(arow[k], bcol[k], shift, rnd),
                              word, is_signed, mode, 0, &ovf)
            n_ovf[0] += ovf
        return acc
    if K == 0:
        scratch[0] = 0
        m = 1
    else:
        for k in range(K):
            scratch[k] = aligned_product(arow[k], bcol[k], shift, rnd)
        m = K
    while m > 1:
        for t in range(m // 2):
            scratch[t] = overflow128(<fx_i128>scratch[2 * t] + scratch[2 * t + 1],
                                     word, is_signed, mode, 0, &ovf)
            n_ovf[0] += ovf
        if m % 2:
            scratch[m // 2] = scratch[m - 1]
        m = (m + 1) // 2
    acc = overflow128(<fx_i128>scratch[0] + init, word, is_signed, mode, 0, &ovf)
    n_ovf[0] += ovf
    return acc


def mac_generic(const int64_t[:, ::1] a, const int64_t[:, :, ::1] bt, const int64_t[:, ::1] init,
                int64_t[:, ::1] out, int64_t[:, ::1] cnt, int64_t[:, ::1] scratch,
                Py_ssize_t rows_per_batch, int shift, int rnd, int word, bint is_signed, int mode,
                int order, bint at_end, int nthreads):
    """out[r, j] := per-add accumulation of a[r, :] . bt[r // M, j, :] (see ``mac_one``).

    ``bt`` is the right operand transposed, [batches, N, K]; ``init`` is [R, N] or has zero rows;
    ``scratch`` is [nthreads, K + 1] (one adder-tree buffer per thread).
    """
    cdef Py_ssize_t R = a.shape[0], K = a.shape[1], N = bt.shape[1]
    cdef Py_ssize_t r, j
    cdef bint has_init = init.shape[0] > 0
    cdef int64_t n_ovf
    cdef int tid
    if R == 0 or N == 0:
        return
    for r in prange(R, nogil=True, schedule="static", num_threads=nthreads):
        tid = threadid()
        for j in range(N):
            n_ovf = 0
            out[r, j] = mac_one(&a[r, 0] if K > 0 else NULL,
                                &bt[r // rows_per_batch, j, 0] if K > 0 else NULL,
                                K, init[r, j] if has_init else 0, shift, rnd, word,
                                is_signed, mode, order, at_end, &scratch[tid, 0], &n_ovf)
            cnt[r, j] = n_ovf


def cumsum_rows(const int64_t[:, ::1] x, const int64_t[::1] init, int64_t[:, ::1] out,
                int64_t[:, ::1] flags, int shift, int rnd, int word, bint is_signed, int mode,
                int nthreads):
    """out[r, k] := fit(out[r, k-1] + align(x[r, k])), out[r, -1] = init[r]; flags[r, k] = overflowed."""
    cdef Py_ssize_t R = x.shape[0], K = x.shape[1]
    cdef Py_ssize_t r, k
    cdef int64_t acc
    cdef int ovf
    for r in prange(R, nogil=True, schedule="static", num_threads=nthreads):
        acc = init[r]
        for k in range(K):
            ovf = 0
            acc = overflow128(<fx_i128>acc + aligned_product(x[r, k], 1, shift, rnd),
                              word, is_signed, mode, 0, &ovf)
            out[r, k] = acc
            flags[r, k] = ovf
