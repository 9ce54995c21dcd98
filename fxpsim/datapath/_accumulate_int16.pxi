# Part of _accumulate.pyx (included there): the per-add kernels on int16 operands -- 16-bit and 32-bit lanes
# (AVX2 or AVX-512BW) -- with their row / slab indices and the sweep mode.

cdef extern from "_accumulate.h" nogil:
    int fxa_i16_level()
    ctypedef struct fxa_sweep:
        const int64_t* exact
        const int32_t* ref
        Py_ssize_t e_ld
        int ch_mode
        const int64_t* slab_ch
        Py_ssize_t period
        Py_ssize_t nvalid
        const int64_t* bias_after
        const int64_t* fmul
        const int64_t* fadd
        const int64_t* fnudge
        const int64_t* fshift
        int64_t code_lo
        int64_t code_hi
        int width
        int mode
        uint8_t* flags
        Py_ssize_t n_slabs
    ctypedef struct fxa_sweep_out:
        int64_t events
        int64_t not_exact
        int64_t sum_err
        int64_t max_err
    void fxa_mac_rows_i16(const int16_t* a, const int64_t* rows, Py_ssize_t lda, const int16_t* b,
                          const int64_t* slabs, const int16_t* init, Py_ssize_t init_ld, Py_ssize_t init_cs,
                          int64_t* out, int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, Py_ssize_t ldo,
                          int mode, int16_t lo, int16_t hi, int sh, int level, const fxa_sweep* sw,
                          fxa_sweep_out* so)
    void fxa_mac_rows_i32m(const int16_t* a, const int64_t* rows, Py_ssize_t lda, const int16_t* b,
                           const int64_t* slabs, const int32_t* init, Py_ssize_t init_ld, Py_ssize_t init_cs,
                           int64_t* out, int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, Py_ssize_t ldo,
                           int mode, int32_t lo, int32_t hi, int sh, const fxa_sweep* sw, fxa_sweep_out* so,
                           int level)

ctypedef fused start_t:     # lane type of the start values, lo and hi: int16 (mac_fast16), int32 (mac_fast32m)
    int16_t
    int32_t


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


def _slab_index(slabs, Py_ssize_t N, Py_ssize_t K, Py_ssize_t blen, Py_ssize_t nb, str name):
    """The optional column-slab index (None: every slab of b, in order)."""
    cdef const int64_t[::1] idx
    if slabs is None:
        return None
    idx = slabs
    if nb != 1:
        raise ValueError(f"{name}: a slab index needs one right operand (no batches)")
    if N != 64 * idx.shape[0]:
        raise ValueError(f"{name}: out has {N} columns for {idx.shape[0]} slabs of 64")
    if idx.shape[0] and (np.min(slabs) < 0 or (np.max(slabs) + 1) * K * 64 > blen):
        raise ValueError(f"{name}: slab index outside b")
    return idx


def _init_strides(init, Py_ssize_t R, Py_ssize_t N, slabs, str name):
    """(row stride, column stride) of ``init``: [R, C] (C = N, or the columns of b with a slab index),
    [1, C] shared by every row, [R, 1] one value per row."""
    if init.shape[0] == 0:
        return 0, 0
    if init.shape[0] not in (1, R):
        raise ValueError(f"{name}: init has {init.shape[0]} rows for {R} output rows")
    cs = 0 if init.shape[1] == 1 and N != 1 else 1
    if cs and slabs is None and init.shape[1] != N:
        raise ValueError(f"{name}: init has {init.shape[1]} columns for {N}")
    if cs and slabs is not None and slabs.shape[0] and init.shape[1] < (np.max(slabs) + 1) * 64:
        raise ValueError(f"{name}: init must cover every column of the slabs (padded to 64)")
    return (0 if init.shape[0] == 1 else init.shape[1]), cs


cdef class Sweep:
    """The sweep mode of ``mac_fast16`` / ``mac_fast32m``: the last k tile scores its results instead of
    storing them (see ``fxa_sweep`` in ``_accumulate.h``).

    Arguments (arrays are kept alive here): ``exact`` int64 and ``ref`` int32, 2-D [erows, e_ld] (row
    ``rows[i]`` -- or the kernel row -- and b's column); ``ch_mode`` 0 (channel = column), 1 (= kernel
    row) or 2 (= ``slab_ch[slab]``); columns ``c`` with ``c % period >= nvalid`` are padding;
    ``bias_after`` (int64 per channel or empty); the fused requantization ``fmul, fadd, fnudge (may be
    empty), fshift`` per channel and the code clamp; the register ``width`` and fit ``mode``; ``flags``
    uint8 [erows, n_slabs] set where an output overflowed.  After a kernel call, ``result()`` is
    ``(events, not_exact, sum |err|, max |err|)``.
    """
    cdef fxa_sweep s
    cdef const int64_t[:, ::1] exact
    cdef const int32_t[:, ::1] ref
    cdef const int64_t[::1] slab_ch, bias_after, fmul, fadd, fnudge, fshift
    cdef uint8_t[:, ::1] flags
    cdef int64_t[:, ::1] outs

    def __init__(self, exact, ref, int ch_mode, slab_ch, Py_ssize_t period, Py_ssize_t nvalid, bias_after,
                 fmul, fadd, fnudge, fshift, int64_t code_lo, int64_t code_hi, int width, int mode, flags):
        if fnudge.shape[0] == 0:
            fnudge = np.zeros(fmul.shape[0], np.int64)
        self.exact, self.ref, self.slab_ch, self.bias_after = exact, ref, slab_ch, bias_after
        self.fmul, self.fadd, self.fnudge, self.fshift, self.flags = fmul, fadd, fnudge, fshift, flags
        if exact.shape[0] != ref.shape[0] or exact.shape[1] != ref.shape[1] or period <= 0:
            raise ValueError("Sweep: exact and ref must have the same shape")
        if fmul.shape[0] == 0 or fadd.shape[0] != fmul.shape[0] or fshift.shape[0] != fmul.shape[0]:
            raise ValueError("Sweep: the fused requantization needs one constant per channel")
        if flags.shape[0] != exact.shape[0]:
            raise ValueError("Sweep: flags need one row per row of exact")
        self.s.exact = &self.exact[0, 0]
        self.s.ref = &self.ref[0, 0]
        self.s.e_ld = exact.shape[1]
        self.s.ch_mode = ch_mode
        self.s.slab_ch = &self.slab_ch[0] if slab_ch.shape[0] else NULL
        self.s.period, self.s.nvalid = period, nvalid
        self.s.bias_after = &self.bias_after[0] if bias_after.shape[0] else NULL
        self.s.fmul, self.s.fadd, self.s.fshift = &self.fmul[0], &self.fadd[0], &self.fshift[0]
        self.s.fnudge = &self.fnudge[0]
        self.s.code_lo, self.s.code_hi, self.s.width, self.s.mode = code_lo, code_hi, width, mode
        self.s.flags = &self.flags[0, 0] if flags.shape[1] else NULL
        self.s.n_slabs = flags.shape[1]
        self.outs = np.zeros((1, 4), np.int64)

    def result(self):
        cdef Py_ssize_t i
        t = [0, 0, 0, 0]
        for i in range(self.outs.shape[0]):
            t[0] += self.outs[i, 0]
            t[1] += self.outs[i, 1]
            t[2] += self.outs[i, 2]
            t[3] = max(t[3], self.outs[i, 3])
        return tuple(t)


cdef fxa_sweep_out* _sweep_outs(Sweep sw, Py_ssize_t n_chunks) except? NULL:
    """Zeroed per-chunk result slots of ``sw`` (each chunk of rows writes its own)."""
    sw.outs = np.zeros((max(n_chunks, 1), 4), np.int64)
    return <fxa_sweep_out*>&sw.outs[0, 0]


def mac_fast16(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int16_t[:, ::1] init,
               int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
               int16_t lo, int16_t hi, int sh, int nthreads, int level=-1, rows=None, slabs=None,
               Sweep sweep=None):
    """``mac_fast`` on 16-bit lanes (signed accumulator <= 16 bits, products fitting int16).

    Only FAST_SATURATE, FAST_ZERO and FAST_WRAP_SIGNED; needs ``simd16_level() > 0``.
    ``level``: -1 best for this CPU, or force 1 (AVX2) / 2 (AVX-512BW) up to ``simd16_level()``.
    ``init``: [R, N], one row [1, N] shared by every output row, one value per row [R, 1], or zero rows.
    ``cnt``: [R, N], or zero rows: no counting (the cheaper loops).
    ``rows``: optional int64 [R] source rows of ``a`` (output row r reads ``a[rows[r]]``; one batch).
    ``slabs``: optional int64 [N / 64] slabs of ``b`` (output columns 64s.. read slab ``slabs[s]``; ``init``
    columns follow b's).
    ``sweep``: a :class:`Sweep` -- the results are scored instead of stored (``out``/``cnt`` only hold
    the k tiles before the last); counting.  Both levels take every argument and give the same bits.
    """
    cdef int best = fxa_i16_level()
    if level < 0:
        level = best
    if not 1 <= level <= best:
        raise RuntimeError(f"mac_fast16: SIMD level {level} unavailable (this CPU: {best})")
    _mac_int16("mac_fast16", a, b, init, out, cnt, rows_per_batch, mode, lo, hi, sh, nthreads, level, rows, slabs,
               sweep)


def mac_fast32m(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int32_t[:, ::1] init,
                int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
                int32_t lo, int32_t hi, int sh, int nthreads, rows=None, slabs=None, Sweep sweep=None,
                int level=-1):
    """``mac_fast`` on 32-bit lanes from int16 operands packed as for ``mac_fast16`` (AVX2 or AVX-512BW).

    Products are formed exactly by vpmaddwd (|a*b| <= 2^30).  Modes FAST_SATURATE, FAST_ZERO,
    FAST_WRAP_SIGNED, FAST_WRAP_UNSIGNED, FAST_EXACT.  Unless ``lo, hi`` is the full int32 range
    (a signed 32-bit register: the sum may wrap in the lanes, overflow is tested on the signs),
    the caller guarantees ``max(|lo|, |hi|, |init|) + max|a*b| <= 2^31 - 1``.
    ``init``, ``cnt``, ``rows``, ``slabs``, ``sweep`` and ``level`` as in ``mac_fast16``.  Needs
    ``simd16_level() > 0``.
    """
    cdef int best = fxa_i16_level()
    if level < 0:
        level = best
    if not 1 <= level <= best:
        raise RuntimeError(f"mac_fast32m: SIMD level {level} unavailable (this CPU: {best})")
    _mac_int16("mac_fast32m", a, b, init, out, cnt, rows_per_batch, mode, lo, hi, sh, nthreads, level, rows, slabs,
               sweep)


cdef _mac_int16(str name, const int16_t[:, ::1] a, const int16_t[:, ::1] b, const start_t[:, ::1] init,
                int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t M, int mode, start_t lo, start_t hi, int sh,
                int nthreads, int level, rows, slabs, Sweep sweep):
    """``mac_fast16`` (``start_t`` int16: ``fxa_mac_rows_i16``) and ``mac_fast32m`` (int32: ``fxa_mac_rows_i32m``),
    both at SIMD ``level``, once the CPU has their kernel: the arguments checked, then tasks of a row
    chunk and a slab group (``_partition``) in parallel, each writing its own outputs."""
    cdef Py_ssize_t R = out.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t chunk = ROW_CHUNK, per_batch, c, r, nr, init_ld, init_cs
    cdef Py_ssize_t n_rc, n_sc = 1, spc, t, s0, s1, n_slabs, col0, ncols
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    cdef const fxa_sweep* swp = NULL
    cdef fxa_sweep_out* so = NULL
    cdef const int64_t[::1] idx
    cdef const int64_t[::1] sidx
    cdef const int64_t* rp = NULL
    cdef const int64_t* sp = NULL
    cdef const int16_t* ap
    cdef const int16_t* bp
    cdef const start_t* ip
    cdef int64_t* op
    cdef int64_t* cp
    idx = _row_index(rows, R, a.shape[0], M, b.shape[0], name)
    sidx = _slab_index(slabs, N, K, b.shape[1], b.shape[0], name)
    init_ld, init_cs = _init_strides(init, R, N, slabs, name)
    if sweep is not None and not has_cnt:
        raise ValueError(f"{name}: the sweep mode counts: pass cnt")
    if idx is None and R != a.shape[0]:
        raise ValueError(f"{name}: out and a must have the same rows")
    if R == 0 or N == 0:
        return
    if idx is not None:
        rp = &idx[0]
    if sidx is not None:
        sp = &sidx[0]
    n_slabs = N // 64 if sp != NULL else 1
    per_batch, n_rc, n_sc, spc = _partition(R, M, chunk, n_slabs, sp != NULL and sweep is not None, nthreads)
    if sweep is not None:
        swp = &sweep.s
        so = _sweep_outs(sweep, n_rc * n_sc)
    for t in prange(n_rc * n_sc, nogil=True, schedule="dynamic", num_threads=nthreads):
        c = t // n_sc
        s0 = (t % n_sc) * spc
        s1 = min(n_slabs, s0 + spc)
        r = (c // per_batch) * M + (c % per_batch) * chunk
        nr = min(chunk, (c // per_batch) * M + M - r)
        # with a row index, a and b are whole (the kernel reads rows rp[r..]); else row r's chunk and batch
        ap = &a[0, 0] if K > 0 and rp != NULL else (&a[r, 0] if K > 0 else NULL)
        bp = &b[r // M, 0] if K > 0 and rp == NULL else (&b[0, 0] if K > 0 else NULL)
        ip = (&init[0, 0] + r * init_ld) if has_init else NULL
        col0 = 64 * s0 if sp != NULL else 0
        op = &out[r, col0]
        cp = &cnt[r, col0] if has_cnt else NULL
        ncols = 64 * (s1 - s0) if sp != NULL else N
        if start_t is int16_t:
            fxa_mac_rows_i16(ap, rp + r if rp != NULL else NULL, K, bp, sp + s0 if sp != NULL else NULL, ip, init_ld,
                             init_cs, op, cp, nr, K, ncols, N, mode, lo, hi, sh, level, swp,
                             so + t if so != NULL else NULL)
        else:
            fxa_mac_rows_i32m(ap, rp + r if rp != NULL else NULL, K, bp, sp + s0 if sp != NULL else NULL, ip, init_ld,
                              init_cs, op, cp, nr, K, ncols, N, mode, lo, hi, sh, swp, so + t if so != NULL else NULL,
                              level)
