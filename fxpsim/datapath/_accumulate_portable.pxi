# Part of _accumulate.pyx (included there): the per-add kernels on int32/int64 lanes in portable C
# (_accumulate_portable.h), sequential and adder-tree order.

cdef extern from "_accumulate.h" nogil:
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
