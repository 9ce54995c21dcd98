# Part of _accumulate.pyx (included there): exact sums -- modulo 2^64 of any int64 operands
# (_accumulate_portable.h on unsigned lanes), of int32 operands by VPMULDQ (_accumulate_w32.h), of int16
# operands by AVX512-VNNI (_accumulate_vnni.h).

cdef extern from "_accumulate_w32.h" nogil:
    enum:
        FXA_W32_JB
    int fxa_w32_level()
    void fxa_w32_rows(const int32_t* a, Py_ssize_t lda, const int64_t* b, int64_t* out, Py_ssize_t ldo,
                      Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int level, int add)

cdef extern from "_accumulate.h" nogil:
    void fxa_mac_rows_u64(const uint64_t* a, const uint64_t* b, const uint64_t* init, int64_t* out,
                          int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode,
                          uint64_t lo, uint64_t hi, int sh)
    int fxa_vnni_level()
    void fxa_vnni16_rows(const int32_t* a, Py_ssize_t lda, const int32_t* bh, const int32_t* bl, int64_t* out,
                         Py_ssize_t ldo, Py_ssize_t nrows, Py_ssize_t KP, Py_ssize_t nslab2)


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


def mul32_level():
    """1 when ``mac_mul32`` has its AVX-512 kernel on this CPU, 0: only the portable one."""
    return fxa_w32_level()


def mul32_slab_width():
    """Columns per packed slab of the right operand of ``mac_mul32``."""
    return FXA_W32_JB


def mac_mul32(const int32_t[:, :] a, const int64_t[:, ::1] b, int64_t[:, ::1] out, Py_ssize_t rows_per_batch,
              int nthreads, int level, bint add=False):
    """out[r] := sum_k a[r, k] * b[r // M][k] modulo 2^64 for int32 operands (int64 bit patterns); with ``add``,
    out[r] += that sum (modulo 2^64: a K chunk's sums added to the previous chunks').

    ``b``: [B, ceil(N / S) * K * S] int64, b's columns in slabs of S = ``mul32_slab_width()`` ([N / S, K, S],
    zero padded), each value an int32 sign-extended.  Every product is exact on 64 bits and int64 adds wrap
    modulo 2^64, so this is the low 64 bits of the exact sum.  ``a``'s rows may be strided (elements
    contiguous).  ``level`` 1: the AVX-512 kernel (needs
    ``mul32_level()``), 0: the portable one (same bits).  Row chunks and, for few rows, column slabs are
    split between threads (each output is written by one).
    """
    cdef Py_ssize_t R = a.shape[0], K = a.shape[1], N = out.shape[1], M = rows_per_batch
    cdef Py_ssize_t S = FXA_W32_JB, chunk = 48, per_batch, nslab, n_rc, n_sc, spc, t, c, r, nr, s0, s1, lda, ldo
    if level > 0 and not fxa_w32_level():
        raise RuntimeError("mac_mul32: level 1 needs AVX-512F/BW/DQ")
    nslab = (N + S - 1) // S
    if M <= 0 or R % M or out.shape[0] != R or b.shape[0] != (1 if M == R or R == 0 else R // M) \
            or b.shape[1] != nslab * K * S:
        raise ValueError("mac_mul32: shapes do not match")
    if K > 0 and a.strides[1] != sizeof(int32_t):
        raise ValueError("mac_mul32: the elements of a's rows must be contiguous")
    if R == 0 or N == 0:
        return
    if K == 0:
        if not add:
            out[:, :] = 0
        return
    lda = a.strides[0] // sizeof(int32_t)
    ldo = out.strides[0] // sizeof(int64_t)
    per_batch, n_rc, n_sc, spc = _partition(R, M, chunk, nslab, nthreads > 1, nthreads)
    for t in prange(n_rc * n_sc, nogil=True, schedule="dynamic", num_threads=nthreads):
        c = t // n_sc
        s0 = (t % n_sc) * spc
        s1 = min(nslab, s0 + spc)
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        fxa_w32_rows(&a[r, 0], lda, &b[r // M, s0 * K * S], &out[r, s0 * S], ldo, nr, K,
                     min(N - s0 * S, (s1 - s0) * S), level, add)


def vnni_level():
    """1 when this CPU has AVX512-VNNI (and the kernel was compiled), else 0."""
    return fxa_vnni_level()


def mac_vnni16(const int32_t[:, ::1] a, const int32_t[:, :, ::1] bh, const int32_t[:, :, ::1] bl,
               int64_t[:, ::1] out, int nthreads):
    """out[r, :32 S] += sum_k a[r, k] b[k, :] exactly, for int16 data (``vpdpwssd``).

    ``a``: [R, KP] int32, each the int16 pair (a[2k], a[2k+1]) (K padded to even with 0);
    ``bh``, ``bl``: [2S, KP, 16] int32 pairs of b's high (``(b - bl) >> 8``) and low (``b & 255``) parts,
    slabs of 16 columns (N padded with zero columns to 32 S); ``out``: [R, >= 32 S] int64, added to.
    Needs ``vnni_level()``; rows are split between threads (each output is written by one).
    """
    cdef Py_ssize_t R = a.shape[0], KP = a.shape[1], S2 = bh.shape[0] // 2, c, r, nr, chunk = 64
    if not fxa_vnni_level():
        raise RuntimeError("mac_vnni16: this CPU has no AVX512-VNNI")
    if bh.shape[0] != bl.shape[0] or bh.shape[0] % 2 or bh.shape[1] != KP or bl.shape[1] != KP \
            or bh.shape[2] != 16 or bl.shape[2] != 16 or out.shape[0] != R or out.shape[1] < 32 * S2:
        raise ValueError("mac_vnni16: shapes do not match")
    if R == 0 or S2 == 0 or KP == 0:
        return
    for c in prange((R + chunk - 1) // chunk, nogil=True, schedule="dynamic", num_threads=nthreads):
        r = c * chunk
        nr = min(chunk, R - r)
        fxa_vnni16_rows(&a[r, 0], KP, &bh[0, 0, 0], &bl[0, 0, 0], &out[r, 0], out.shape[1], nr, KP, S2)
