/*
 * fxpsim/datapath/_accumulate_avx2_i32.h -- the register-blocked AVX2 per-add kernel on 32-bit lanes from int16
 * operands (fxa_mac32m_avx2): the AVX2 twin of fxa_mac32m_x512 (_accumulate_x512_i32.h), same arguments,
 * loops, variants, results and counts, for CPUs without AVX-512BW.
 *
 * Products by vpmaddwd as there: with x = (a, 0) in every 32-bit lane, madd(x, b) = a * b[even column], with
 * x << 16, a * b[odd column].  A row's 64 columns are eight __m256i of 8 int32: vector 2q + o, lane l <->
 * column 16q + 2l + o.  A block of FXA_R32A rows runs the k tile four times, once per quarter slab (16 columns:
 * one b vector), so that the quarter's accumulators and counters of every row of the block stay in registers.
 * Counters count the steps that did *not* overflow (ok -= g, g = all ones where the step was exact); after the
 * tile, overflows = (k1 - k0) - ok.  Non-FULL bodies need |acc| + |p| <= INT32_MAX (the caller checks the
 * data); FULL (a 32-bit signed register, the sum may wrap in the lanes): g = ((s ^ acc) & (s ^ p)) >= 0, and
 * saturation picks INT32_MAX or INT32_MIN by the sign of acc ((acc >> 31) ^ INT32_MAX).
 */
#ifndef FXPSIM_ACCUMULATE_AVX2_I32_H
#define FXPSIM_ACCUMULATE_AVX2_I32_H

#include "_accumulate_x512.h"
#include "_accumulate_x512_i32.h"     /* the variant names */

#if FXA_HAVE_I16
#define FXA_R32A 2

#define FA32_CLAMP(S) _mm256_min_epi32(_mm256_max_epi32(S, vlo), vhi)
#define FA32_OK(O, G) O = _mm256_sub_epi32(O, G);
#define FA32_G(A) _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_xor_si256(s_, A), _mm256_xor_si256(s_, p_)), m1)
#define FA32_SATV(A) _mm256_xor_si256(_mm256_srai_epi32(A, 31), vmax)
#define FA32_B_SAT(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_); const __m256i c_ = FA32_CLAMP(s_);    \
    FA32_OK(O, _mm256_cmpeq_epi32(c_, s_)) A = c_; }
#define FA32_B_SAT_FULL(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_); const __m256i g_ = FA32_G(A);   \
    FA32_OK(O, g_) A = _mm256_blendv_epi8(FA32_SATV(A), s_, g_); }
#define FA32_B_WRAP(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_);                                 \
    const __m256i c_ = _mm256_sra_epi32(_mm256_sll_epi32(s_, shc), shc);                            \
    FA32_OK(O, _mm256_cmpeq_epi32(c_, s_)) A = c_; }
#define FA32_B_WRAP_FULL(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_); FA32_OK(O, FA32_G(A)) A = s_; }
#define FA32_B_WRAP_U(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_);                               \
    const __m256i c_ = _mm256_and_si256(s_, vhi); FA32_OK(O, _mm256_cmpeq_epi32(c_, s_)) A = c_; }
#define FA32_B_ZERO(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_);                                 \
    const __m256i g_ = _mm256_cmpeq_epi32(FA32_CLAMP(s_), s_); FA32_OK(O, g_) A = _mm256_and_si256(s_, g_); }
#define FA32_B_ZERO_FULL(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_); const __m256i g_ = FA32_G(A);  \
    FA32_OK(O, g_) A = _mm256_and_si256(s_, g_); }
#define FA32_B_N_SAT(A, O) { A = FA32_CLAMP(_mm256_add_epi32(A, p_)); }
#define FA32_B_N_SAT_FULL(A, O) { const __m256i s_ = _mm256_add_epi32(A, p_);                          \
    A = _mm256_blendv_epi8(FA32_SATV(A), s_, FA32_G(A)); }
#define FA32_B_N_WRAP(A, O) { A = _mm256_sra_epi32(_mm256_sll_epi32(_mm256_add_epi32(A, p_), shc), shc); }
#define FA32_B_N_ADD(A, O) { A = _mm256_add_epi32(A, p_); }
#define FA32_B_N_WRAP_U(A, O) { A = _mm256_and_si256(_mm256_add_epi32(A, p_), vhi); }

/* quarter q (vectors 2q, 2q+1 of each row: columns 16q..16q+15) of R rows over the k tile */
#define FA32_ROW(r, v0, v1, BODY)                                                                  \
    {                                                                                               \
        const __m256i xe_ = _mm256_set1_epi32((int32_t)(uint16_t)ar##r[k]);                         \
        const __m256i xo_ = _mm256_slli_epi32(xe_, 16);                                             \
        { const __m256i p_ = _mm256_madd_epi16(xe_, b_); BODY(acc##r##v0, ov##r##v0) }              \
        { const __m256i p_ = _mm256_madd_epi16(xo_, b_); BODY(acc##r##v1, ov##r##v1) }              \
    }
#define FA32_KQ(R, off, v0, v1, BODY)                                                              \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m256i b_ = _mm256_loadu_si256((const __m256i *)(bslab + k * 64 + (off)));           \
        FA32_ROW(0, v0, v1, BODY)                                                                   \
        if ((R) > 1) FA32_ROW(1, v0, v1, BODY)                                                      \
    }
#define FA32_KLOOP(R, BODY)                                                                        \
    FA32_KQ(R, 0, 0, 1, BODY) FA32_KQ(R, 16, 2, 3, BODY) FA32_KQ(R, 32, 4, 5, BODY) FA32_KQ(R, 48, 6, 7, BODY)

#define FA32_SWITCH(R) FX32_SWITCH_OF(FA32_KLOOP, FA32, R)

/* the lane layout (see FXA_BLK_LOAD): column j in vector 2 (j >> 4) + (j & 1), lane (j & 15) >> 1 */
#define FA32_POS(j) (((j) >> 4) * 16 + ((j) & 1) * 8 + (((j) & 15) >> 1))
#define FA32_SET(V, r, X) V##r##0 = V##r##1 = V##r##2 = V##r##3 = V##r##4 = V##r##5 = V##r##6 = V##r##7 = X;
#define FA32_GET1(V, r, P, v) V##r##v = _mm256_loadu_si256((const __m256i *)((P) + 8 * (v)));
#define FA32_GET(V, r, P) FA32_GET1(V, r, P, 0) FA32_GET1(V, r, P, 1) FA32_GET1(V, r, P, 2) FA32_GET1(V, r, P, 3) \
    FA32_GET1(V, r, P, 4) FA32_GET1(V, r, P, 5) FA32_GET1(V, r, P, 6) FA32_GET1(V, r, P, 7)
#define FA32_PUT1(P, V, r, v) _mm256_storeu_si256((__m256i *)((P) + 8 * (v)), V##r##v);
#define FA32_PUT(P, V, r) FA32_PUT1(P, V, r, 0) FA32_PUT1(P, V, r, 1) FA32_PUT1(P, V, r, 2) FA32_PUT1(P, V, r, 3) \
    FA32_PUT1(P, V, r, 4) FA32_PUT1(P, V, r, 5) FA32_PUT1(P, V, r, 6) FA32_PUT1(P, V, r, 7)
/* ok counts -> overflow counts (counting variants only: the others have no counters) */
#define FA32_OVF1(r, v) ov##r##v = _mm256_sub_epi32(steps, ov##r##v);
#define FA32_OVF(r) FA32_OVF1(r, 0) FA32_OVF1(r, 1) FA32_OVF1(r, 2) FA32_OVF1(r, 3)                    \
    FA32_OVF1(r, 4) FA32_OVF1(r, 5) FA32_OVF1(r, 6) FA32_OVF1(r, 7)
#define FA32_NO_DIRECT(r)
#define FA32_LOAD(r) FXA_BLK_LOAD(r, int32_t, FA32_POS, FA32_SET, FA32_GET, _mm256_set1_epi32, FA32_NO_DIRECT, \
                                  _mm256_setzero_si256())
#define FA32_STORE(r) FXA_BLK_STORE(r, uint32_t, FA32_POS, FA32_PUT, fxa_sweep_row_avx2)
#define FA32_BLOCK(R)                                                                              \
    {                                                                                               \
        __m256i acc00, acc01, acc02, acc03, acc04, acc05, acc06, acc07;                             \
        __m256i acc10, acc11, acc12, acc13, acc14, acc15, acc16, acc17;                             \
        __m256i ov00, ov01, ov02, ov03, ov04, ov05, ov06, ov07;                                     \
        __m256i ov10, ov11, ov12, ov13, ov14, ov15, ov16, ov17;                                     \
        const int16_t *ar0, *ar1 = NULL;                                                            \
        const __m256i steps = _mm256_set1_epi32((int32_t)(k1 - k0));                                \
        FA32_SET(acc, 1, _mm256_setzero_si256())                                                    \
        FA32_SET(ov, 1, _mm256_setzero_si256())                                                     \
        FA32_LOAD(0)                                                                                \
        if ((R) > 1) FA32_LOAD(1)                                                                   \
        FA32_SWITCH(R)                                                                              \
        FA32_OVF(0)                                                                                 \
        if ((R) > 1) { FA32_OVF(1) }                                                                \
        FA32_STORE(0)                                                                               \
        if ((R) > 1) FA32_STORE(1)                                                                  \
        (void)ar1;                                                                                  \
    }

__attribute__((target("avx2")))
static void fxa_mac32m_avx2(FXA_X512_ARGS(int32_t))
{
    const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    const __m256i m1 = _mm256_set1_epi32(-1), vmax = _mm256_set1_epi32(INT32_MAX);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int variant = fx32_variant(mode, &cnt, lo, hi);
    int32_t tmp[64];
    (void)vlo; (void)vhi; (void)m1; (void)vmax; (void)shc;
    FXA_X512_LOOPS(FXA_R32A, FA32_BLOCK)
}
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_AVX2_I32_H */
