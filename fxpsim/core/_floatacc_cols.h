/* The column-tile fused kernel (fa_fused_cols): truncation on int32 lanes, 16 output columns of a
 * row at once, with an AVX2 path (intrinsics, chosen at run time) and a portable one; the formulas
 * and helpers (fa_split, fa_close, fa_round) are those of _floatacc.h, and every path gives the
 * same integers as fa_fused. */
#ifndef FXPSIM_FLOATACC_COLS_H
#define FXPSIM_FLOATACC_COLS_H

#include "_floatacc.h"

#define FA_JT 16
#define FA_IB 16

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_DISPATCH)
#include <immintrin.h>
#define FA_HAVE_AVX2 1
#else
#define FA_HAVE_AVX2 0
#endif

/* The end of one chunk of a column tile: per lane, the products' specials (scanned only when the
 * chunk's row of A or the tile of B holds a NaN or Inf: qa, qbt) and fa_close. */
static inline void fa_cols_close(const uint8_t *fa_i, const uint8_t *fb, int64_t Np, int64_t j0, int64_t k0,
                                 int64_t ch, int special, const fa_c *cc, const int32_t *em, const int32_t *sum,
                                 const int32_t *nl, int64_t q, const fa_params *p, int64_t *code, float *total,
                                 int64_t *sti) {
    for (int jj = 0; jj < FA_JT; jj++) {
        int nan = cc[jj].nan, pos = cc[jj].inf && !cc[jj].neg, neg = cc[jj].inf && cc[jj].neg;
        if (special) {
            for (int64_t k = k0; k < k0 + ch; k++) {
                unsigned x = fa_i[k], y = fb[k * Np + j0 + jj];
                if ((x | y) & FA_NAN || (x & FA_INF && y & FA_ZERO) || (x & FA_ZERO && y & FA_INF)) nan = 1;
                else if ((x | y) & FA_INF) { if ((x ^ y) & FA_NEG) neg = 1; else pos = 1; }
            }
        }
        code[jj] = fa_close(sum[jj], &cc[jj], em[jj], nl[jj], nan, pos, neg, q, p, &total[jj], sti);
    }
}

/* One chunk of one row of A against one column tile, portable C (auto-vectorized in the clones):
 * em = max(max_k (E_a + E_b), E_c) per lane, then the truncated terms |a| |b| 2^base >> (em - P) with
 * their signs, summed in int32 (the caller proved the sum fits), and the count of inexact terms. */
FA_DISPATCH static void fa_cols_chunk(const int32_t *restrict ua, const int32_t *restrict ea,
                                      const int32_t *restrict ga, const int32_t *restrict ub,
                                      const int32_t *restrict eb, const int32_t *restrict gb, int64_t ch,
                                      int32_t base, const int32_t *restrict ce, int32_t *restrict em,
                                      int32_t *restrict sum, int32_t *restrict nl) {
    int32_t pm[FA_JT];
    for (int jj = 0; jj < FA_JT; jj++) pm[jj] = INT32_MIN;
    for (int64_t k = 0; k < ch; k++) {
        int32_t e = ea[k];
        for (int jj = 0; jj < FA_JT; jj++) {
            int32_t P = e + eb[k * FA_JT + jj];
            pm[jj] = P > pm[jj] ? P : pm[jj];
        }
    }
    for (int jj = 0; jj < FA_JT; jj++) {
        em[jj] = pm[jj] > ce[jj] ? pm[jj] : ce[jj];
        sum[jj] = 0;
        nl[jj] = 0;
    }
    for (int64_t k = 0; k < ch; k++) {
        int32_t e = ea[k], u = ua[k] << base, g = ga[k];
        for (int jj = 0; jj < FA_JT; jj++) {
            int32_t r = em[jj] - e - eb[k * FA_JT + jj];
            r = r > 31 ? 31 : r;
            int32_t mag = u * ub[k * FA_JT + jj];
            int32_t t = mag >> r;
            nl[jj] += (t << r) != mag;
            int32_t gg = g ^ gb[k * FA_JT + jj];
            sum[jj] += (t ^ gg) - gg;
        }
    }
}

#if FA_HAVE_AVX2
/* fa_cols_chunk on two AVX2 registers of 8 lanes.  vpsrlvd / vpsllvd give 0 for a count >= 32, which
 * is what the clamped scalar shifts give for |term| < 2^31 (no clamp needed); em >= P, so every count
 * is >= 0.  small16: |a| 2^base and |b| < 2^15, the product is one vpmaddwd (the high halves are 0). */
__attribute__((target("avx2"))) static void fa_cols_chunk_avx2(const int32_t *ua, const int32_t *ea,
                                                             const int32_t *ga, const int32_t *ub,
                                                             const int32_t *eb, const int32_t *gb, int64_t ch,
                                                             int32_t base, int small16, const int32_t *ce,
                                                             const float *af, const float *bf, int32_t thr,
                                                             int32_t *em, int32_t *sum, int32_t *nl) {
    __m256i pm0 = _mm256_set1_epi32(INT32_MIN), pm1 = pm0;
    for (int64_t k = 0; k < ch; k++) {
        __m256i e = _mm256_set1_epi32(ea[k]);
        pm0 = _mm256_max_epi32(pm0, _mm256_add_epi32(e, _mm256_loadu_si256((const __m256i *)(eb + k * FA_JT))));
        pm1 = _mm256_max_epi32(pm1, _mm256_add_epi32(e, _mm256_loadu_si256((const __m256i *)(eb + k * FA_JT + 8))));
    }
    __m256i em0 = _mm256_max_epi32(pm0, _mm256_loadu_si256((const __m256i *)ce));
    __m256i em1 = _mm256_max_epi32(pm1, _mm256_loadu_si256((const __m256i *)(ce + 8)));
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, q0 = s0, q1 = s0;
    __m256i vb = _mm256_set1_epi32(base), d0 = _mm256_sub_epi32(vb, em0), d1 = _mm256_sub_epi32(vb, em1);
    __m256i vthr = _mm256_set1_epi32(thr);
    if (af && !_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpgt_epi32(vthr, d0), _mm256_cmpgt_epi32(vthr, d1)))) {
        /* the float planes: term = trunc(a b 2^(base - E_max)), exact in float32 (see fa_fused_cols) */
        __m256i top = _mm256_set1_epi32(254), b127 = _mm256_set1_epi32(127);
        __m256 sc0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_min_epi32(_mm256_add_epi32(d0, b127), top), 23));
        __m256 sc1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_min_epi32(_mm256_add_epi32(d1, b127), top), 23));
        for (int64_t k = 0; k < ch; k++) {
            __m256 a = _mm256_broadcast_ss(af + k);
            __m256 y0 = _mm256_mul_ps(_mm256_mul_ps(a, _mm256_loadu_ps(bf + k * FA_JT)), sc0);
            __m256 y1 = _mm256_mul_ps(_mm256_mul_ps(a, _mm256_loadu_ps(bf + k * FA_JT + 8)), sc1);
            __m256i t0 = _mm256_cvttps_epi32(y0), t1 = _mm256_cvttps_epi32(y1);
            s0 = _mm256_add_epi32(s0, t0);
            s1 = _mm256_add_epi32(s1, t1);
            q0 = _mm256_sub_epi32(q0, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(t0), y0, _CMP_EQ_OQ)));
            q1 = _mm256_sub_epi32(q1, _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(t1), y1, _CMP_EQ_OQ)));
        }
    } else
    for (int64_t k = 0; k < ch; k++) {
        __m256i e = _mm256_set1_epi32(ea[k]), u = _mm256_set1_epi32(ua[k] << base), g = _mm256_set1_epi32(ga[k]);
        const __m256i *ebk = (const __m256i *)(eb + k * FA_JT), *ubk = (const __m256i *)(ub + k * FA_JT),
                      *gbk = (const __m256i *)(gb + k * FA_JT);
        __m256i r0 = _mm256_sub_epi32(_mm256_sub_epi32(em0, e), _mm256_loadu_si256(ebk));
        __m256i r1 = _mm256_sub_epi32(_mm256_sub_epi32(em1, e), _mm256_loadu_si256(ebk + 1));
        __m256i m0, m1;
        if (small16) {
            m0 = _mm256_madd_epi16(u, _mm256_loadu_si256(ubk));
            m1 = _mm256_madd_epi16(u, _mm256_loadu_si256(ubk + 1));
        } else {
            m0 = _mm256_mullo_epi32(u, _mm256_loadu_si256(ubk));
            m1 = _mm256_mullo_epi32(u, _mm256_loadu_si256(ubk + 1));
        }
        __m256i t0 = _mm256_srlv_epi32(m0, r0), t1 = _mm256_srlv_epi32(m1, r1);
        q0 = _mm256_sub_epi32(q0, _mm256_cmpeq_epi32(_mm256_sllv_epi32(t0, r0), m0));
        q1 = _mm256_sub_epi32(q1, _mm256_cmpeq_epi32(_mm256_sllv_epi32(t1, r1), m1));
        __m256i g0 = _mm256_xor_si256(g, _mm256_loadu_si256(gbk));
        __m256i g1 = _mm256_xor_si256(g, _mm256_loadu_si256(gbk + 1));
        s0 = _mm256_add_epi32(s0, _mm256_sub_epi32(_mm256_xor_si256(t0, g0), g0));
        s1 = _mm256_add_epi32(s1, _mm256_sub_epi32(_mm256_xor_si256(t1, g1), g1));
    }
    __m256i n = _mm256_set1_epi32((int32_t)ch);
    _mm256_storeu_si256((__m256i *)em, em0);
    _mm256_storeu_si256((__m256i *)(em + 8), em1);
    _mm256_storeu_si256((__m256i *)sum, s0);
    _mm256_storeu_si256((__m256i *)(sum + 8), s1);
    _mm256_storeu_si256((__m256i *)nl, _mm256_sub_epi32(n, q0));      /* inexact = terms - exact ones */
    _mm256_storeu_si256((__m256i *)(nl + 8), _mm256_sub_epi32(n, q1));
}
#endif

/* C codes of a tile split branch-free (fa_split on 16 lanes, storage of <= 32 bits): significand,
 * exponent (a zero's clamped to >= -2^29: NO_EXPONENT still never sets a maximum, as every term's
 * P >= 2 * -2^28, and a zero's term is 0 whatever its exponent), sign; returns
 * whether a lane is NaN or Inf (then the scalar fa_split / fa_close take the chunk). */
FA_DISPATCH static int fa_lanes_split(const int64_t *code, const fa_params *p, int32_t *restrict sig,
                                      int32_t *restrict ce, int32_t *restrict neg) {
    uint32_t m = (uint32_t)p->s_man_bits, e = (uint32_t)p->s_exp_bits;
    uint32_t emask = (1u << e) - 1, mmask = (1u << m) - 1;
    int32_t bias = (int32_t)p->s_bias, ze = p->ze < -(1 << 29) ? -(1 << 29) : (int32_t)p->ze;
    int special = 0;
    for (int jj = 0; jj < FA_JT; jj++) {
        uint32_t u = (uint32_t)code[jj], ef = (u >> m) & emask, fr = u & mmask;
        special |= ef == emask;
        sig[jj] = (int32_t)(ef ? fr | (1u << m) : fr);
        ce[jj] = (ef | fr) == 0 ? ze : (ef ? (int32_t)ef - bias : 1 - bias);
        neg[jj] = (int32_t)((u >> (e + m)) & 1u);
    }
    return special;
}

/* fa_close on 16 lanes without specials, promotion or int64 sums (p->close32: every |s| < 2^30):
 * C's term truncated to 2^(E_max - F), s = sum + term, then fa_round branch-free on int32 lanes
 * (floor(log2 |s|) by a branch-free binary search: GCC vectorizes the lane loop). */
FA_DISPATCH static void fa_lanes_close(const int32_t *restrict sig, const int32_t *restrict ce,
                                       const int32_t *restrict cneg, const int32_t *restrict em,
                                       const int32_t *restrict sum, const int32_t *restrict nl, const fa_params *p,
                                       int64_t *restrict code, int64_t *sti) {
    int32_t F = (int32_t)p->F, sm = (int32_t)p->s_man_bits, pm = (int32_t)p->p_m, emin = (int32_t)p->p_emin;
    uint32_t maxc = (uint32_t)p->p_maxc, infc = (uint32_t)p->p_inf_code, sbit = (uint32_t)p->s_sign_bit;
    int rnd = p->rounding, ovm = p->overflow;
    /* the rounding mode as 0/1 masks (bitwise below: branch-free, so the lane loop vectorizes) */
    uint32_t r_he = rnd == FR_HALF_EVEN, r_ha = rnd == FR_HALF_AWAY, r_fl = rnd == FR_FLOOR, r_ce = rnd == FR_CEIL;
    uint32_t r_tz = rnd == FR_TOWARD_ZERO, sat = ovm == FO_SATURATE || !p->p_has_inf, ieee = ovm == FO_IEEE;
    uint32_t out[FA_JT], lo[FA_JT], ov[FA_JT], un[FA_JT];      /* per-lane counts (summed below) */
    for (int jj = 0; jj < FA_JT; jj++) {
        uint32_t cs = (uint32_t)sig[jj];
        int32_t sh = F - sm + ce[jj] - em[jj];                  /* <= F - m_c (E_max >= E_c); |sh| < 2^30 */
        int32_t rs = sh < -31 ? 31 : (sh < 0 ? -sh : 0), ls = sh > 0 ? sh : 0;
        uint32_t ct = (cs >> rs) << ls;
        lo[jj] = ((ct >> ls) << rs) != cs;
        uint32_t cn = (uint32_t)-cneg[jj];                      /* 0 or all ones */
        int32_t s = (int32_t)((uint32_t)sum[jj] + ((ct ^ cn) - cn));
        int32_t q = em[jj] - F;
        uint32_t neg = (uint32_t)s >> 31, nm = (uint32_t)0 - neg;
        uint32_t mag = ((uint32_t)s ^ nm) - nm, mg = mag | 1u;
        int32_t L = 0;                                          /* floor(log2 mg), a branch-free search */
        uint32_t x = mg, b;
        b = (x >> 16 != 0) << 4; L += (int32_t)b; x >>= b;
        b = (x >> 8 != 0) << 3; L += (int32_t)b; x >>= b;
        b = (x >> 4 != 0) << 2; L += (int32_t)b; x >>= b;
        b = (x >> 2 != 0) << 1; L += (int32_t)b; x >>= b;
        L += (int32_t)(x >> 1);
        int32_t Q = (L + q > emin ? L + q : emin) - pm;
        int32_t s2 = Q - q;                                     /* >= L - p_m */
        uint32_t big = s2 > 31;
        int32_t r2 = s2 > 31 ? 31 : (s2 > 0 ? s2 : 0), l2 = s2 < 0 ? -s2 : 0;
        uint32_t n = big ? 0u : (mag >> r2) << l2;
        uint32_t rmask = ((1u << r2) - 1u) | (0u - big);
        uint32_t rem = mag & rmask;                              /* 0 where s2 <= 0 (r2 = 0) */
        uint32_t half = big ? 0x80000000u : ((1u << r2) >> 1);  /* 0 where s2 <= 0 */
        uint32_t gt = rem > half, eq = (rem == half) & (half != 0), nz = rem != 0;
        uint32_t inc = (r_he & (gt | (eq & n))) | (r_ha & (gt | eq)) | (r_fl & nz & neg) | (r_ce & nz & (neg ^ 1u));
        n += inc;
        uint32_t c = n + (n != 0 ? (uint32_t)(Q - emin + pm) << pm : 0u);
        uint32_t toward0 = r_tz | (r_fl & (neg ^ 1u)) | (r_ce & neg);
        uint32_t to_max = sat | (ieee & toward0);
        uint32_t over = c > maxc;
        ov[jj] = over;
        c = over ? (to_max ? maxc : infc) : c;
        uint32_t zero = n == 0;
        un[jj] = zero & (mag != 0);
        out[jj] = zero ? 0u : (c << (sm - pm)) | (sbit & nm);
    }
    for (int jj = 0; jj < FA_JT; jj++) code[jj] = out[jj];
    int64_t nls = 0, ovf = 0, unf = 0;
    for (int jj = 0; jj < FA_JT; jj++) {
        nls += nl[jj] + (int64_t)lo[jj];
        ovf += ov[jj];
        unf += un[jj];
    }
    sti[0] += ovf;
    sti[1] += unf;
    sti[2] += nls;
}

#if FA_HAVE_AVX2
static inline int fa_popmask(__m256i m) __attribute__((target("avx2")));
static inline int fa_popmask(__m256i m) {
    return __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m)));
}

/* fa_lanes_close on AVX2, 8 lanes a register: the same steps with vpsrlvd / vpsllvd, whose count
 * >= 32 gives 0 (so no clamps), unsigned compares by flipping the sign bit, floor(log2) from the float
 * of |s| (exact below 2^24, else corrected where it rounded up).  p->close32 also bounds the code
 * before the overflow test below 2^32. */
__attribute__((target("avx2"))) static void fa_lanes_close_avx2(const int32_t *sig, const int32_t *ce,
                                                              const int32_t *cneg, const int32_t *em,
                                                              const int32_t *sum, const int32_t *nl,
                                                              const fa_params *p, int64_t *code, int64_t *sti) {
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1), flip = _mm256_set1_epi32(INT32_MIN);
    const __m256i vF = _mm256_set1_epi32((int32_t)p->F), vFsm = _mm256_set1_epi32((int32_t)(p->F - p->s_man_bits));
    const __m256i vemin = _mm256_set1_epi32((int32_t)p->p_emin), vpm = _mm256_set1_epi32((int32_t)p->p_m);
    const __m256i v127 = _mm256_set1_epi32(127), v32 = _mm256_set1_epi32(32);
    const __m256i vmaxc = _mm256_set1_epi32((int32_t)(uint32_t)p->p_maxc);
    const __m256i vinf = _mm256_set1_epi32((int32_t)(uint32_t)p->p_inf_code);
    const __m256i vsbit = _mm256_set1_epi32((int32_t)(uint32_t)p->s_sign_bit);
    const __m128i cnt_pm = _mm_cvtsi32_si128((int)p->p_m), cnt_out = _mm_cvtsi32_si128((int)(p->s_man_bits - p->p_m));
    int rnd = p->rounding, ovm = p->overflow;
    __m256i sat = _mm256_set1_epi32(ovm == FO_SATURATE || !p->p_has_inf ? -1 : 0);
    __m256i ieee = _mm256_set1_epi32(ovm == FO_IEEE ? -1 : 0);
    int lost = 0, ovf = 0, unf = 0;
    uint32_t out[FA_JT];
    for (int h = 0; h < FA_JT; h += 8) {
        __m256i cs = _mm256_loadu_si256((const __m256i *)(sig + h)), e = _mm256_loadu_si256((const __m256i *)(em + h));
        __m256i sh = _mm256_sub_epi32(_mm256_add_epi32(vFsm, _mm256_loadu_si256((const __m256i *)(ce + h))), e);
        __m256i rs = _mm256_max_epi32(_mm256_sub_epi32(zero, sh), zero), ls = _mm256_max_epi32(sh, zero);
        __m256i ct = _mm256_sllv_epi32(_mm256_srlv_epi32(cs, rs), ls);
        __m256i back = _mm256_sllv_epi32(_mm256_srlv_epi32(ct, ls), rs);
        lost += 8 - fa_popmask(_mm256_cmpeq_epi32(back, cs));
        __m256i cn = _mm256_sub_epi32(zero, _mm256_loadu_si256((const __m256i *)(cneg + h)));
        __m256i sv = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(sum + h)),
                                      _mm256_sub_epi32(_mm256_xor_si256(ct, cn), cn));
        __m256i q = _mm256_sub_epi32(e, vF);
        __m256i nm = _mm256_srai_epi32(sv, 31);                        /* all ones where s < 0 */
        __m256i mag = _mm256_abs_epi32(sv), mg = _mm256_or_si256(mag, one);
        __m256i L = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(mg)), 23), v127);
        L = _mm256_add_epi32(L, _mm256_cmpgt_epi32(_mm256_sllv_epi32(one, L), mg));   /* rounded up: L - 1 */
        __m256i Q = _mm256_sub_epi32(_mm256_max_epi32(_mm256_add_epi32(L, q), vemin), vpm);
        __m256i s2 = _mm256_sub_epi32(Q, q);
        __m256i r2 = _mm256_max_epi32(s2, zero), l2 = _mm256_max_epi32(_mm256_sub_epi32(zero, s2), zero);
        __m256i n = _mm256_sllv_epi32(_mm256_srlv_epi32(mag, r2), l2);
        __m256i rem = _mm256_and_si256(mag, _mm256_sub_epi32(_mm256_sllv_epi32(one, r2), one));
        __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(_mm256_min_epi32(r2, v32), one));
        __m256i gt = _mm256_cmpgt_epi32(_mm256_xor_si256(rem, flip), _mm256_xor_si256(half, flip));
        __m256i eq = _mm256_andnot_si256(_mm256_cmpeq_epi32(half, zero), _mm256_cmpeq_epi32(rem, half));
        __m256i nz = _mm256_xor_si256(_mm256_cmpeq_epi32(rem, zero), _mm256_set1_epi32(-1));
        __m256i inc = zero, t0 = zero;
        switch (rnd) {
        case FR_HALF_EVEN:
            inc = _mm256_or_si256(gt, _mm256_and_si256(eq, _mm256_sub_epi32(zero, _mm256_and_si256(n, one))));
            break;
        case FR_HALF_AWAY: inc = _mm256_or_si256(gt, eq); break;
        case FR_FLOOR: inc = _mm256_and_si256(nz, nm); t0 = _mm256_xor_si256(nm, _mm256_set1_epi32(-1)); break;
        case FR_CEIL: inc = _mm256_andnot_si256(nm, nz); t0 = nm; break;
        default: t0 = _mm256_set1_epi32(-1); break;
        }
        n = _mm256_sub_epi32(n, inc);
        __m256i nzero = _mm256_cmpeq_epi32(n, zero);
        __m256i fld = _mm256_sll_epi32(_mm256_add_epi32(_mm256_sub_epi32(Q, vemin), vpm), cnt_pm);
        __m256i c = _mm256_add_epi32(n, _mm256_andnot_si256(nzero, fld));
        __m256i over = _mm256_cmpgt_epi32(_mm256_xor_si256(c, flip), _mm256_xor_si256(vmaxc, flip));
        ovf += fa_popmask(over);
        __m256i to_max = _mm256_or_si256(sat, _mm256_and_si256(ieee, t0));
        __m256i cap = _mm256_blendv_epi8(vinf, vmaxc, to_max);
        c = _mm256_blendv_epi8(c, cap, over);
        unf += fa_popmask(_mm256_andnot_si256(_mm256_cmpeq_epi32(mag, zero), nzero));
        __m256i o = _mm256_or_si256(_mm256_sll_epi32(c, cnt_out), _mm256_and_si256(vsbit, nm));
        _mm256_storeu_si256((__m256i *)(out + h), _mm256_andnot_si256(nzero, o));
    }
    int64_t nls = 0;
    for (int jj = 0; jj < FA_JT; jj++) {
        code[jj] = out[jj];
        nls += nl[jj];
    }
    sti[0] += ovf;
    sti[1] += unf;
    sti[2] += nls + lost;
}
#endif

/* fa_fused for the int32 truncation case with B's ub, eb, gb packed by column tile, (Np / 16, K, 16),
 * and fb as (K, Np) columns (Np a multiple of FA_JT): 16 outputs of a row at once, so the k loops run
 * on vectors of columns (AVX2 intrinsics where the CPU has them, else the portable fa_cols_chunk).
 * qb is (K / chunk, Np / 16): whether the chunk of a tile holds a NaN or Inf; st is (Np / 16, 3): the
 * counts of each column tile (one thread per tile).  p->fm > 0 with fast16: see fa_cols_chunk_avx2. */
static void fa_fused_cols(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                          const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                          const uint8_t *qa, const uint8_t *qb, const int64_t *c, int64_t *d,
                          int64_t *st, int64_t M, int64_t Np, const fa_params *p, int threads) {
    int64_t K = p->K, ch = p->chunk, nch = K / ch, nt = Np / FA_JT;
    int32_t base = (int32_t)(p->F - p->fm);
    int simd = 0;
    float *af = NULL, *bf = NULL;
#if FA_HAVE_AVX2
    simd = p->simd && __builtin_cpu_supports("avx2");
    /* p->f32: the float planes a = (-1)^g |a| 2^(E_a), b likewise; the caller proved that every
     * finite nonzero one and their products are exact float32 normals (|a| |b| < 2^24, exponents in range)
     * and that a b 2^(base - E_max) is a normal wherever E_max <= base - p->f32_thr (else the lane's chunk
     * takes the integer loop): then trunc() of it is the integer term and "integral" is "exact". */
    if (simd && p->f32) {
        af = (float *)malloc(sizeof(float) * (size_t)(M * K));
        bf = (float *)malloc(sizeof(float) * (size_t)(Np * K));
        if (!af || !bf) { free(af); free(bf); af = bf = NULL; }
        for (int64_t x = 0; af && x < M * K; x++) {
            float v = ldexpf((float)ua[x], ea[x] < -126 ? -126 : (ea[x] > 127 ? 127 : ea[x]));
            af[x] = ga[x] ? -v : v;
        }
        for (int64_t x = 0; bf && x < Np * K; x++) {
            float v = ldexpf((float)ub[x], eb[x] < -126 ? -126 : (eb[x] > 127 ? 127 : eb[x]));
            bf[x] = gb[x] ? -v : v;
        }
    }
#endif
    (void)threads;
    /* blocks of FA_IB rows x one column tile: both stay in cache while the block's outputs run */
    for (int64_t i0 = 0; i0 < M; i0 += FA_IB) {
    int64_t i1 = i0 + FA_IB < M ? i0 + FA_IB : M;
#ifdef FXPSIM_OPENMP
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
    for (int64_t t = 0; t < nt; t++) {
        int64_t j0 = t * FA_JT, *sti = st + 3 * t;
        const int32_t *ebt = eb + t * K * FA_JT, *ubt = ub + t * K * FA_JT, *gbt = gb + t * K * FA_JT;
        for (int64_t i = i0; i < i1; i++) {
            int64_t code[FA_JT];
            float total[FA_JT];
            const int32_t *ua_ = ua + i * K, *ea_ = ea + i * K, *ga_ = ga + i * K;
            for (int jj = 0; jj < FA_JT; jj++) code[jj] = fa_open(c[i * Np + j0 + jj], p, &total[jj]);
            for (int64_t q = 0; q < nch; q++) {
                int64_t k0 = q * ch;
                int32_t em[FA_JT], sum[FA_JT], nl[FA_JT], sig[FA_JT], ce[FA_JT], cneg[FA_JT];
                int special = qa[i * nch + q] | qb[q * nt + t];
                int slow = fa_lanes_split(code, p, sig, ce, cneg) | special | !p->close32 | (p->promote != 0);
#if FA_HAVE_AVX2
                if (simd)
                    fa_cols_chunk_avx2(ua_ + k0, ea_ + k0, ga_ + k0, ubt + k0 * FA_JT, ebt + k0 * FA_JT,
                                       gbt + k0 * FA_JT, ch, base, p->small16, ce,
                                       af && !special ? af + i * K + k0 : NULL, bf ? bf + t * K * FA_JT + k0 * FA_JT : NULL,
                                       (int32_t)p->f32_thr, em, sum, nl);
                else
#endif
                    fa_cols_chunk(ua_ + k0, ea_ + k0, ga_ + k0, ubt + k0 * FA_JT, ebt + k0 * FA_JT,
                                  gbt + k0 * FA_JT, ch, base, ce, em, sum, nl);
                if (slow) {
                    fa_c cc[FA_JT];
                    for (int jj = 0; jj < FA_JT; jj++) cc[jj] = fa_split(code[jj], p);
                    fa_cols_close(fa + i * K, fb, Np, j0, k0, ch, special, cc, em, sum, nl, q, p, code, total, sti);
                }
#if FA_HAVE_AVX2
                else if (simd)
                    fa_lanes_close_avx2(sig, ce, cneg, em, sum, nl, p, code, sti);
#endif
                else
                    fa_lanes_close(sig, ce, cneg, em, sum, nl, p, code, sti);
            }
            for (int jj = 0; jj < FA_JT; jj++)
                d[i * Np + j0 + jj] = p->promote ? fa_total_code(total[jj], p) : code[jj];
        }
    }
    }
    free(af);
    free(bf);
}

#endif /* FXPSIM_FLOATACC_COLS_H */
