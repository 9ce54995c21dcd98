# Part of _accumulate.pyx (included there): the generic kernels -- any width, overflow mode and product
# rounding, sequential or adder-tree order, on int128 sums (fxpsim.core._kernels.overflow128).


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
