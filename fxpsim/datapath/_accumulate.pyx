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
``mac_mul32``     the same for int32 operands: register-blocked AVX-512 VPMULDQ + VPADDQ (``_accumulate_w32.h``)
``Sweep``         the sweep mode of the AVX-512BW kernels: results scored in place against exact
                  accumulators and reference codes (fxpsim.hardware.node_sweep)
``tree_fast``     balanced adder-tree order on int32/int64 lanes, vectorised across output columns
``mac_generic``   the same for any width/mode/rounding, sequential or adder-tree order, int128 sums
``cumsum_rows``   running sums out[r,k] = fit(out[r,k-1] + x[r,k]) with per-step overflow flags
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
import numpy as np

from fxpsim.core._kernels cimport (fx_i128, overflow128, shift_round)

cdef extern from "_accumulate_w32.h" nogil:
    enum:
        FXA_W32_JB
    int fxa_w32_level()
    void fxa_w32_rows(const int32_t* a, Py_ssize_t lda, const int64_t* b, int64_t* out, Py_ssize_t ldo,
                      Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int level, int add)

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
    int fxa_vnni_level()
    void fxa_vnni16_rows(const int32_t* a, Py_ssize_t lda, const int32_t* bh, const int32_t* bl, int64_t* out,
                         Py_ssize_t ldo, Py_ssize_t nrows, Py_ssize_t KP, Py_ssize_t nslab2)
    int fxa_i16_level()
    void fxa_mac_rows_u64(const uint64_t* a, const uint64_t* b, const uint64_t* init, int64_t* out,
                          int64_t* cnt, Py_ssize_t nrows, Py_ssize_t K, Py_ssize_t N, int mode,
                          uint64_t lo, uint64_t hi, int sh)
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
                           int mode, int32_t lo, int32_t hi, int sh, const fxa_sweep* sw, fxa_sweep_out* so)

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


def _partition(Py_ssize_t R, Py_ssize_t M, Py_ssize_t chunk, Py_ssize_t n_slabs, bint split, int nthreads):
    """How the slabbed kernels (``mac_fast16``, ``mac_fast32m``, ``mac_mul32``) split R rows, in batches of M
    sharing one b, and ``n_slabs`` column slabs into tasks: ``(per_batch, n_rc, n_sc, spc)``, i.e. row chunks
    of ``chunk`` rows per batch and in all, slab groups per row chunk and slabs per group.  Task t covers row
    chunk t // n_sc and slab group t % n_sc; every output belongs to exactly one task.  With ``split`` and
    fewer than 4 row chunks per thread, the slabs are spread over about 4 tasks per thread too."""
    cdef Py_ssize_t per_batch = (M + chunk - 1) // chunk
    cdef Py_ssize_t n_rc = per_batch * (R // M)
    cdef Py_ssize_t n_sc = 1, spc
    if split and n_rc < 4 * nthreads and n_slabs > 1:
        n_sc = min(n_slabs, (4 * nthreads + n_rc - 1) // n_rc)
    spc = (n_slabs + n_sc - 1) // n_sc
    n_sc = (n_slabs + spc - 1) // spc
    return per_batch, n_rc, n_sc, spc


def mac_fast16(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int16_t[:, ::1] init,
               int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
               int16_t lo, int16_t hi, int sh, int nthreads, int level=-1, rows=None, slabs=None,
               Sweep sweep=None):
    """``mac_fast`` on 16-bit lanes (signed accumulator <= 16 bits, products fitting int16).

    Only FAST_SATURATE, FAST_ZERO and FAST_WRAP_SIGNED; needs ``simd16_level() > 0``.
    ``level``: -1 best for this CPU, or force 1 (AVX2) / 2 (AVX-512BW) up to ``simd16_level()``.
    ``init``: [R, N], one row [1, N] shared by every output row, one value per row [R, 1], or zero rows.
    ``cnt``: [R, N], or zero rows: no counting (AVX-512BW only; the cheaper loops).
    ``rows``: optional int64 [R] source rows of ``a`` (output row r reads ``a[rows[r]]``; one batch).
    ``slabs``: optional int64 [N / 64] slabs of ``b`` (output columns 64s.. read slab ``slabs[s]``; ``init``
    columns follow b's); AVX-512BW only.
    ``sweep``: a :class:`Sweep` -- the results are scored instead of stored (``out``/``cnt`` only hold
    the k tiles before the last); AVX-512BW only, counting.
    """
    cdef Py_ssize_t R = out.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr, init_ld, init_cs
    cdef Py_ssize_t n_rc, n_sc = 1, spc, t, s0, s1, n_slabs
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    cdef int best = fxa_i16_level()
    cdef const fxa_sweep* swp = NULL
    cdef fxa_sweep_out* so = NULL
    cdef const int64_t[::1] idx
    cdef const int64_t[::1] sidx
    cdef const int64_t* rp = NULL
    cdef const int64_t* sp = NULL
    if level < 0:
        level = best
    if not 1 <= level <= best:
        raise RuntimeError(f"mac_fast16: SIMD level {level} unavailable (this CPU: {best})")
    idx = _row_index(rows, R, a.shape[0], M, b.shape[0], "mac_fast16")
    sidx = _slab_index(slabs, N, K, b.shape[1], b.shape[0], "mac_fast16")
    init_ld, init_cs = _init_strides(init, R, N, slabs, "mac_fast16")
    if level < 2 and (not has_cnt or sidx is not None or sweep is not None
                      or (has_init and (init_cs != 1 or init_ld not in (0, N)))):
        raise ValueError("mac_fast16: the AVX2 kernel always counts and takes neither slabs, per-row init nor sweep")
    if sweep is not None and not has_cnt:
        raise ValueError("mac_fast16: the sweep mode counts: pass cnt")
    if idx is None and R != a.shape[0]:
        raise ValueError("mac_fast16: out and a must have the same rows")
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
        fxa_mac_rows_i16(&a[0, 0] if K > 0 and rp != NULL else (&a[r, 0] if K > 0 else NULL),
             rp + r if rp != NULL else NULL, K,
             &b[r // M, 0] if K > 0 and rp == NULL else (&b[0, 0] if K > 0 else NULL), sp + s0 if sp != NULL else NULL,
             (&init[0, 0] + r * init_ld) if has_init else NULL, init_ld, init_cs,
             &out[r, 64 * s0 if sp != NULL else 0], &cnt[r, 64 * s0 if sp != NULL else 0] if has_cnt else NULL,
             nr, K, 64 * (s1 - s0) if sp != NULL else N, N, mode, lo, hi, sh, level, swp, so + t if so != NULL else NULL)



def mac_fast32m(const int16_t[:, ::1] a, const int16_t[:, ::1] b, const int32_t[:, ::1] init,
                int64_t[:, ::1] out, int64_t[:, ::1] cnt, Py_ssize_t rows_per_batch, int mode,
                int32_t lo, int32_t hi, int sh, int nthreads, rows=None, slabs=None, Sweep sweep=None):
    """``mac_fast`` on 32-bit lanes from int16 operands packed as for ``mac_fast16`` (AVX-512BW).

    Products are formed exactly by vpmaddwd (|a*b| <= 2^30).  Modes FAST_SATURATE, FAST_ZERO,
    FAST_WRAP_SIGNED, FAST_WRAP_UNSIGNED, FAST_EXACT.  Unless ``lo, hi`` is the full int32 range
    (a signed 32-bit register: the sum may wrap in the lanes, overflow is tested on the signs),
    the caller guarantees ``max(|lo|, |hi|, |init|) + max|a*b| <= 2^31 - 1``.
    ``init``, ``cnt``, ``rows``, ``slabs`` and ``sweep`` as in ``mac_fast16``.  Needs ``simd16_level() == 2``.
    """
    cdef Py_ssize_t R = out.shape[0], K = a.shape[1], N = out.shape[1]
    cdef Py_ssize_t M = rows_per_batch, chunk = ROW_CHUNK, per_batch, c, r, nr, init_ld, init_cs
    cdef Py_ssize_t n_rc, n_sc = 1, spc, t, s0, s1, n_slabs
    cdef bint has_init = init.shape[0] > 0, has_cnt = cnt.shape[0] > 0
    cdef const fxa_sweep* swp = NULL
    cdef fxa_sweep_out* so = NULL
    cdef const int64_t[::1] idx
    cdef const int64_t[::1] sidx
    cdef const int64_t* rp = NULL
    cdef const int64_t* sp = NULL
    if fxa_i16_level() < 2:
        raise RuntimeError("mac_fast32m: needs AVX-512BW")
    idx = _row_index(rows, R, a.shape[0], M, b.shape[0], "mac_fast32m")
    sidx = _slab_index(slabs, N, K, b.shape[1], b.shape[0], "mac_fast32m")
    init_ld, init_cs = _init_strides(init, R, N, slabs, "mac_fast32m")
    if sweep is not None and not has_cnt:
        raise ValueError("mac_fast32m: the sweep mode counts: pass cnt")
    if idx is None and R != a.shape[0]:
        raise ValueError("mac_fast32m: out and a must have the same rows")
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
        fxa_mac_rows_i32m(&a[0, 0] if K > 0 and rp != NULL else (&a[r, 0] if K > 0 else NULL),
             rp + r if rp != NULL else NULL, K,
             &b[r // M, 0] if K > 0 and rp == NULL else (&b[0, 0] if K > 0 else NULL), sp + s0 if sp != NULL else NULL,
             (&init[0, 0] + r * init_ld) if has_init else NULL, init_ld, init_cs,
             &out[r, 64 * s0 if sp != NULL else 0], &cnt[r, 64 * s0 if sp != NULL else 0] if has_cnt else NULL,
             nr, K, 64 * (s1 - s0) if sp != NULL else N, N, mode, lo, hi, sh, swp, so + t if so != NULL else NULL)



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
