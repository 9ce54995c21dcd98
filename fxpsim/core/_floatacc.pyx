# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""C loops of the fused-dot and block-scaled float accumulators (``_floatacc.h``, ``_floatacc_cols.h``, and AMD's
round-down kind in ``_floatacc_rd.h``).

``fused_kernel``: per output and K-chunk, :math:`E_{max} = \\max(\\max_k (E_{a_k} + E_{b_k}), E_c)`,
:math:`s = \\mathrm{align}(C 2^{F - m_c + E_c - E_{max}}) + \\sum_k \\mathrm{align}(A_k B_k 2^{F - f_m + E_{a_k}
+ E_{b_k} - E_{max}})`, :math:`d = \\mathrm{round}_{out}(s 2^{E_{max} - F})` -- the same integers as
``fxpsim.datapath.floatacc.fused`` (which documents the formula and validates the inputs; the tests
compare the two element for element).  ``block_kernel``: groups summed exactly, aligned by the
scale exponents.  Each output is computed by one thread from its inputs alone: the thread count
never changes a bit.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t

import numpy as np

cdef extern from "_floatacc.h" nogil:
    ctypedef struct fa_params:
        int64_t K, chunk, promote, F, fm, lsb, group, block
        int align
        int64_t ze, s_exp_bits, s_man_bits, s_bias, s_sign_bit, s_inf_code
        int64_t p_m, p_emin, p_maxc, p_inf_code
        int p_has_inf, rounding, overflow
        int64_t nan_code
        int batched, fast32, simd, small16, close32, f32
        int64_t f32_thr, S, Fc
        int even_odd
    void fa_fused(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                  const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                  const uint8_t *qa, const uint8_t *qb, const int64_t *c, int64_t *d, int64_t *st, int64_t M, int64_t N, const fa_params *p,
                  int threads)
    void fa_block(const int32_t *ia, const uint8_t *fa, const int32_t *ib, const uint8_t *fb,
                  const int64_t *sas, const int64_t *sae, const uint8_t *san,
                  const int64_t *sbs, const int64_t *sbe, const uint8_t *sbn,
                  const int64_t *c, int64_t *d, int64_t *st, int64_t M, int64_t N, const fa_params *p,
                  int threads)

cdef extern from "_floatacc_rd.h" nogil:
    void fa_fused_rd(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                     const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                     const uint8_t *qa, const uint8_t *qb, const int64_t *c, int64_t *d, int64_t *st, int64_t M,
                     int64_t N, const fa_params *p, int threads)

cdef extern from "_floatacc_cols.h" nogil:
    void fa_fused_cols(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                       const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                       const uint8_t *qa, const uint8_t *qb, const int64_t *c, int64_t *d, int64_t *st,
                       int64_t M, int64_t Np, const fa_params *p, int threads)


cdef fa_params _params(dict q):
    cdef fa_params p
    p.K, p.chunk, p.promote = q["K"], q["chunk"], q["promote"]
    p.F, p.fm, p.lsb, p.group, p.block = q["F"], q.get("fm", 0), q.get("lsb", 0), q.get("group", 1), q.get("block", 1)
    p.align, p.ze = q["align"], q["ze"]
    p.s_exp_bits, p.s_man_bits, p.s_bias = q["s_exp_bits"], q["s_man_bits"], q["s_bias"]
    p.s_sign_bit, p.s_inf_code = q["s_sign_bit"], q["s_inf_code"]
    p.p_m, p.p_emin, p.p_maxc, p.p_inf_code = q["p_m"], q["p_emin"], q["p_maxc"], q["p_inf_code"]
    p.p_has_inf, p.rounding, p.overflow = q["p_has_inf"], q["rounding"], q["overflow"]
    p.nan_code, p.batched, p.fast32 = q["nan_code"], q["batched"], q.get("fast32", 0)
    p.simd, p.small16, p.close32 = q.get("simd", 1), q.get("small16", 0), q.get("close32", 0)
    p.f32, p.f32_thr = q.get("f32", 0), q.get("f32_thr", 0)
    p.S, p.Fc, p.even_odd = q.get("S", 0), q.get("Fc", 0), q.get("even_odd", 0)
    return p


def fused_kernel(const int32_t[:, ::1] ua, const int32_t[:, ::1] ea, const int32_t[:, ::1] ga,
                 const uint8_t[:, ::1] fa, const int32_t[:, ::1] ub, const int32_t[:, ::1] eb,
                 const int32_t[:, ::1] gb, const uint8_t[:, ::1] fb, const uint8_t[:, ::1] qa,
                 const uint8_t[:, ::1] qb, const int64_t[:, ::1] c,
                 int64_t[:, ::1] d, int64_t[:, ::1] st, dict params, int threads):
    """d := fused(c; a b) for (M, K) and (N, K) operand parts; qa, qb (rows, K / chunk): whether a chunk
    holds a NaN or Inf; st (M, 3) per-row counts."""
    cdef fa_params p = _params(params)
    cdef int64_t M = d.shape[0], N = d.shape[1]
    if M == 0 or N == 0:
        return
    with nogil:
        fa_fused(&ua[0, 0], &ea[0, 0], &ga[0, 0], &fa[0, 0], &ub[0, 0], &eb[0, 0], &gb[0, 0], &fb[0, 0],
                 &qa[0, 0], &qb[0, 0], &c[0, 0], &d[0, 0], &st[0, 0], M, N, &p, threads)


def fused_cols_kernel(const int32_t[:, ::1] ua, const int32_t[:, ::1] ea, const int32_t[:, ::1] ga,
                      const uint8_t[:, ::1] fa, const int32_t[:, ::1] ub, const int32_t[:, ::1] eb,
                      const int32_t[:, ::1] gb, const uint8_t[:, ::1] fb, const uint8_t[:, ::1] qa,
                      const uint8_t[:, ::1] qb, const int64_t[:, ::1] c, int64_t[:, ::1] d, int64_t[:, ::1] st,
                      dict params, int threads):
    """fused_kernel on int32 truncation with B's ub, eb, gb packed by column tile (Np / 16 * K, 16),
    fb (K, Np), Np a multiple of 16; qb (K / chunk, Np / 16): whether a tile's chunk holds a NaN or Inf;
    st (Np / 16, 3) counts per column tile.  params ``simd`` (default 1): AVX2 where the CPU has it;
    ``small16``: every |a| 2^(F - f_m) and |b| < 2^15 (one vpmaddwd per product); ``close32``: every
    chunk sum with C's term is below 2^30 and the storage has <= 32 bits (the chunk ends on int32 lanes)."""
    cdef fa_params p = _params(params)
    cdef int64_t M = d.shape[0], N = d.shape[1]
    if M == 0 or N == 0:
        return
    if N % 16 or ub.shape[1] != 16 or ub.shape[0] != N // 16 * ua.shape[1] or fb.shape[1] != N \
            or qb.shape[1] != N // 16 or qb.shape[0] != qa.shape[1]:
        raise ValueError("fused_cols_kernel: B parts must be (N / 16 * K, 16) tiles, fb (K, N), "
                         "qb (K / chunk, N / 16), N % 16 == 0")
    with nogil:
        fa_fused_cols(&ua[0, 0], &ea[0, 0], &ga[0, 0], &fa[0, 0], &ub[0, 0], &eb[0, 0], &gb[0, 0], &fb[0, 0],
                      &qa[0, 0], &qb[0, 0], &c[0, 0], &d[0, 0], &st[0, 0], M, N, &p, threads)


def fused_rd_kernel(const int32_t[:, ::1] ua, const int32_t[:, ::1] ea, const int32_t[:, ::1] ga,
                    const uint8_t[:, ::1] fa, const int32_t[:, ::1] ub, const int32_t[:, ::1] eb,
                    const int32_t[:, ::1] gb, const uint8_t[:, ::1] fb, const uint8_t[:, ::1] qa,
                    const uint8_t[:, ::1] qb, const int64_t[:, ::1] c,
                    int64_t[:, ::1] d, int64_t[:, ::1] st, dict params, int threads):
    """d := fused_rd(c; a b) (AMD CDNA3, ``_floatacc_rd.h``) on fused_kernel's operand parts; params ``S``
    (sum_bits), ``Fc`` (c_fraction_bits), ``even_odd``."""
    cdef fa_params p = _params(params)
    cdef int64_t M = d.shape[0], N = d.shape[1]
    if M == 0 or N == 0:
        return
    with nogil:
        fa_fused_rd(&ua[0, 0], &ea[0, 0], &ga[0, 0], &fa[0, 0], &ub[0, 0], &eb[0, 0], &gb[0, 0], &fb[0, 0],
                    &qa[0, 0], &qb[0, 0], &c[0, 0], &d[0, 0], &st[0, 0], M, N, &p, threads)


def block_kernel(const int32_t[:, ::1] ia, const uint8_t[:, ::1] fa, const int32_t[:, ::1] ib,
                 const uint8_t[:, ::1] fb, const int64_t[:, ::1] sas, const int64_t[:, ::1] sae,
                 const uint8_t[:, ::1] san, const int64_t[:, ::1] sbs, const int64_t[:, ::1] sbe,
                 const uint8_t[:, ::1] sbn, const int64_t[:, ::1] c, int64_t[:, ::1] d, int64_t[:, ::1] st,
                 dict params, int threads):
    """d := block(c; a b) for grid integers (M, K), (N, K) and per-block scale parts."""
    cdef fa_params p = _params(params)
    cdef int64_t M = d.shape[0], N = d.shape[1]
    if M == 0 or N == 0:
        return
    with nogil:
        fa_block(&ia[0, 0], &fa[0, 0], &ib[0, 0], &fb[0, 0], &sas[0, 0], &sae[0, 0], &san[0, 0],
                 &sbs[0, 0], &sbe[0, 0], &sbn[0, 0], &c[0, 0], &d[0, 0], &st[0, 0], M, N, &p, threads)
