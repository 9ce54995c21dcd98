/* AMD CDNA3's fused dot with round-down accumulation (fxpsim.datapath.floatacc.amd.rd_step in C).
 *
 * Per output element d(i, j) and K-chunk (``chunk`` products), with F = fraction_bits, S = sum_bits,
 * F_c = c_fraction_bits, f_m the products' mantissa bits, P_k = E_a + E_b, p_k = S_a S_b (exact):
 *   stage 1 (over all k, or apart over even and odd k): e = max_k P_k, T = sum_k trunc(p_k 2^(F - f_m + P_k - e));
 *     the even/odd sums are then floored to F bits below max(e_0, e_1) and added;
 *   E_max = max(e, E_c);  total = floor(T 2^(S - F + e - E_max)) + floor(C 2^(F_c - m_c + E_c - E_max)) 2^(S - F_c)
 *     (even/odd: C is dropped, its bits counted lost, when E_c < E_max - 25);
 *   d = round_out(total 2^(E_max - S)), a negative total that rounds to zero giving -0.
 * Specials as an IEEE sum of the operands; where that sum is finite, a product of magnitude >= 2^128
 * counts as +-Inf (both signs: NaN).  Every shift is clamped below 63 and every sum fits int64 (checked
 * in Python).  One thread per row of outputs: the thread count never changes a bit.
 */
#ifndef FXPSIM_FLOATACC_RD_H
#define FXPSIM_FLOATACC_RD_H

#include "_floatacc.h"

/* Stage 1 over the k of [k0, k1) with k % step == parity: *e the largest P (INT64_MIN / 4 when none),
 * the truncated sum returned, its dropped nonzero terms added to *lost. */
static inline int64_t fa_rd_stage1(const int32_t *ua, const int32_t *ea, const int32_t *ga, const int32_t *ub,
                                   const int32_t *eb, const int32_t *gb, int64_t k0, int64_t k1, int64_t step,
                                   int64_t base, int64_t *e, int64_t *lost) {
    int64_t em = INT64_MIN / 4;
    for (int64_t k = k0; k < k1; k += step) {
        int64_t P = (int64_t)ea[k] + eb[k];
        em = P > em ? P : em;
    }
    int64_t sum = 0;
    for (int64_t k = k0; k < k1; k += step) {
        int64_t v = (int64_t)ua[k] * ub[k];
        if (!v) continue;
        if (ga[k] ^ gb[k]) v = -v;
        int l = 0;
        sum += fa_align(v, base + ea[k] + eb[k] - em, FA_TRUNC, &l);
        *lost += l;
    }
    *e = em;
    return sum;
}

/* Products of magnitude >= 2^128 in [k0, k1): *bpos / *bneg when one is positive / negative. */
static inline void fa_rd_big(const int32_t *ua, const int32_t *ea, const int32_t *ga, const int32_t *ub,
                             const int32_t *eb, const int32_t *gb, int64_t k0, int64_t k1, int64_t fm, int *bpos,
                             int *bneg) {
    for (int64_t k = k0; k < k1; k++) {
        uint64_t v = (uint64_t)ua[k] * (uint64_t)ub[k];
        if (!v) continue;
        if (fa_bitlen(v) - 1 + (int64_t)ea[k] + eb[k] - fm >= 128) {
            if (ga[k] ^ gb[k]) *bneg = 1; else *bpos = 1;
        }
    }
}

/* D = fused_rd(C; A B): operand parts as fa_fused's; p->S, p->Fc, p->even_odd as the module docstring. */
FA_DISPATCH static void fa_fused_rd(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                                    const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                                    const uint8_t *qa, const uint8_t *qb, const int64_t *c, int64_t *d, int64_t *st,
                                    int64_t M, int64_t N, const fa_params *p, int threads) {
    int64_t K = p->K, ch = p->chunk, nch = K / ch;
    int64_t F = p->F, S = p->S, Fc = p->Fc, base = p->F - p->fm;
    (void)threads;
#ifdef FXPSIM_OPENMP
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
    for (int64_t i = 0; i < M; i++) {
        int64_t *sti = st + 3 * i;
        for (int64_t j = 0; j < N; j++) {
            const int32_t *ua_ = ua + i * K, *ea_ = ea + i * K, *ga_ = ga + i * K;
            const int32_t *ub_ = ub + j * K, *eb_ = eb + j * K, *gb_ = gb + j * K;
            const uint8_t *fa_ = fa + i * K, *fb_ = fb + j * K;
            float total_f;
            int64_t code = fa_open(c[i * N + j], p, &total_f);
            for (int64_t q = 0; q < nch; q++) {
                int64_t k0 = q * ch, k1 = k0 + ch;
                fa_c cc = fa_split(code, p);
                int pnan = 0, ppos = 0, pneg = 0;
                if (qa[i * nch + q] | qb[j * nch + q]) fa_prod_specials(fa_ + k0, fb_ + k0, ch, &pnan, &ppos, &pneg);
                /* the IEEE sum's specials (fused._specials), then the products >= 2^128 where it is finite */
                int anypos = ppos || (cc.inf && !cc.neg), anyneg = pneg || (cc.inf && cc.neg);
                int nan = pnan || cc.nan || (anypos && anyneg);
                int inf = (anypos || anyneg) && !nan, ineg = anyneg;
                int bpos = 0, bneg = 0;
                fa_rd_big(ua_, ea_, ga_, ub_, eb_, gb_, k0, k1, p->fm, &bpos, &bneg);
                if (!(nan || inf)) {
                    nan = bpos && bneg;
                    inf = bpos != bneg;
                    ineg = bneg && !bpos;
                }
                int64_t lost = 0, T, e;
                if (p->even_odd) {
                    int64_t e0, e1, l0 = 0, l1 = 0;
                    int m0 = 0, m1 = 0;
                    int64_t T0 = fa_rd_stage1(ua_, ea_, ga_, ub_, eb_, gb_, k0, k1, 2, base, &e0, &l0);
                    int64_t T1 = fa_rd_stage1(ua_, ea_, ga_, ub_, eb_, gb_, k0 + 1, k1, 2, base, &e1, &l1);
                    e = e0 > e1 ? e0 : e1;
                    int64_t s0 = fa_align(T0, e0 - e, FA_FLOOR, &m0), s1 = fa_align(T1, e1 - e, FA_FLOOR, &m1);
                    T = s0 + s1;
                    lost = l0 + l1 + (m0 && T0) + (m1 && T1);
                } else {
                    T = fa_rd_stage1(ua_, ea_, ga_, ub_, eb_, gb_, k0, k1, 1, base, &e, &lost);
                }
                int64_t emax = e > cc.exp ? e : cc.exp;
                int m2 = 0, mc = 0;
                int64_t s2 = fa_align(T, S - F + e - emax, FA_FLOOR, &m2);
                int64_t sc = cc.sig ? fa_align(cc.sig, Fc - p->s_man_bits + cc.exp - emax, FA_FLOOR, &mc) : 0;
                if (p->even_odd && cc.exp < emax - 25) {
                    mc = cc.sig != 0;
                    sc = 0;
                }
                int64_t total = s2 + (int64_t)((uint64_t)sc << (S - Fc));
                if (!(nan || inf)) sti[2] += lost + (m2 && T) + (mc && cc.sig);
                if (nan) code = p->nan_code;
                else if (inf) code = ineg ? (p->s_sign_bit | p->s_inf_code) : p->s_inf_code;
                else {
                    code = fa_round(total, emax - S, p, &sti[0], &sti[1]);
                    if (code == 0 && total < 0) code = p->s_sign_bit;       /* rounded to zero from below: -0 */
                }
                if (p->promote && ((q + 1) * ch % p->promote == 0 || q + 1 == nch)) {
                    total_f = fa_promote(total_f, code, sti);
                    code = 0;
                }
            }
            d[i * N + j] = p->promote ? fa_total_code(total_f, p) : code;
        }
    }
}

#endif /* FXPSIM_FLOATACC_RD_H */
