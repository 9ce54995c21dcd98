# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A sequential MAC over a product table (C loops): the kernel of hls4ml's Dense / Conv2D plan steps.

Compute-only: :mod:`fxpsim.frontends.hls4ml.steps` builds the table (every product already cast into the
accumulator), checks every width and decides when this kernel models the layer exactly.
"""
from libc.stdint cimport int32_t, int64_t

cdef extern from "_table_mac_kernels.h":
    void fxt_table_mac32(const int64_t* rows, Py_ssize_t R, Py_ssize_t K, const int32_t* table, Py_ssize_t N,
                         const int64_t* bias, int mode, int32_t lo, int32_t hi, int64_t* out) noexcept nogil



def table_mac(const int64_t[:, ::1] rows, const int32_t[:, ::1] table, const int64_t[::1] bias, int mode,
              int64_t lo, int64_t hi, int64_t[:, ::1] out, bint narrow=False):
    """out[r, j] := fit(... fit(fit(bias[j] + table[rows[r, 0], j]) + table[rows[r, 1], j]) ...), k in order.

    ``mode`` 0: no fit (the caller proved every partial sum fits); 1: saturate to [lo, hi]; 2: 0 outside
    [lo, hi].  Needs |bias|, |table|, |lo|, |hi| < 2^31 (no int64 overflow); ``narrow``: the caller proved them
    all in [-2^29, 2^29), and the int32 loop of ``_table_mac_kernels.h`` (vectorised, rows outermost) runs."""
    cdef Py_ssize_t R = rows.shape[0], K = rows.shape[1], N = table.shape[1], r, k, j
    cdef const int32_t* t
    cdef int64_t* acc
    cdef int64_t v
    if R == 0 or N == 0:
        return
    if narrow and K:
        with nogil:
            fxt_table_mac32(&rows[0, 0], R, K, &table[0, 0], N, &bias[0], mode, <int32_t>lo, <int32_t>hi,
                            &out[0, 0])
        return
    with nogil:
        for r in range(R):
            acc = &out[r, 0]
            for j in range(N):
                acc[j] = bias[j]
        for k in range(K):                  # k outermost: T's rows of one k (V x N) stay in cache
            for r in range(R):
                acc = &out[r, 0]
                t = &table[rows[r, k], 0]
                if mode == 0:
                    for j in range(N):
                        acc[j] = acc[j] + t[j]
                elif mode == 1:
                    for j in range(N):
                        v = acc[j] + t[j]
                        acc[j] = lo if v < lo else (hi if v > hi else v)
                else:
                    for j in range(N):
                        v = acc[j] + t[j]
                        acc[j] = 0 if (v < lo or v > hi) else v

