/*
 * fxpsim/datapath/_accumulate_x512_i32.h -- the register-blocked AVX-512BW per-add kernel on 32-bit lanes from
 * int16 operands (fxa_mac32m_x512): FXA_R32 rows x 64 columns (see _accumulate_x512.h).
 */
#ifndef FXPSIM_ACCUMULATE_X512_I32_H
#define FXPSIM_ACCUMULATE_X512_I32_H

#include "_accumulate_x512.h"

#if FXA_HAVE_I16
/* --- 32-bit lanes from int16 operands: vpmaddwd forms exact 32-bit products.
 * b's 64-column slab row is two vectors of 32 int16; with x = (a, 0) in every
 * 32-bit lane, madd(x, b) = a * b[even column], with x << 16, a * b[odd column]:
 * four vectors per row hold columns (0,2,..,30), (1,3,..,31), (32,34,..), (33,..).
 * Non-FULL bodies need |acc| + |p| <= INT32_MAX (the caller checks the data);
 * FULL: a 32-bit signed register, where the sum may wrap and the overflow is
 * the sign test (s ^ acc) & (s ^ p) < 0 (vpternlogd 0x18). */
enum {
    FX32_SAT, FX32_SAT_FULL, FX32_WRAP, FX32_WRAP_FULL, FX32_WRAP_U, FX32_ZERO, FX32_ZERO_FULL,
    FX32_N_SAT, FX32_N_SAT_FULL, FX32_N_WRAP, FX32_N_ADD, FX32_N_WRAP_U
};
/* The loop variant of a 32-bit-lane register (both ISAs): FULL = a signed 32-bit register; *cnt := NULL where
 * nothing is counted (FXA_EXACT: no fit). */
static inline int fx32_variant(int mode, int64_t **cnt, int32_t lo, int32_t hi)
{
    const int full = lo == INT32_MIN && hi == INT32_MAX, counting = *cnt != NULL;
    switch (mode) {
    case FXA_SAT: return counting ? (full ? FX32_SAT_FULL : FX32_SAT) : (full ? FX32_N_SAT_FULL : FX32_N_SAT);
    case FXA_WRAP_S: return counting ? (full ? FX32_WRAP_FULL : FX32_WRAP) : (full ? FX32_N_ADD : FX32_N_WRAP);
    case FXA_WRAP_U: return counting ? FX32_WRAP_U : FX32_N_WRAP_U;
    case FXA_ZERO: return full ? FX32_ZERO_FULL : FX32_ZERO;
    default: *cnt = NULL; return FX32_N_ADD;
    }
}

#define FX32_OVF(A) _mm512_cmplt_epi32_mask(_mm512_ternarylogic_epi32(s_, A, p_, 0x18), zero)
#define FX32_B_SAT(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                  \
    const __m512i c_ = _mm512_min_epi32(_mm512_max_epi32(s_, vlo), vhi);                                \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_SAT_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                             \
    const __mmask16 k_ = FX32_OVF(A);                                                               \
    O = _mm512_mask_add_epi32(O, k_, O, one);                                                       \
    A = _mm512_mask_mov_epi32(s_, k_, _mm512_xor_si512(_mm512_srai_epi32(A, 31), vmax)); }
#define FX32_B_WRAP(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                 \
    const __m512i c_ = _mm512_sra_epi32(_mm512_sll_epi32(s_, shc), shc);                                \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_WRAP_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                            \
    O = _mm512_mask_add_epi32(O, FX32_OVF(A), O, one); A = s_; }
#define FX32_B_WRAP_U(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                               \
    const __m512i c_ = _mm512_and_si512(s_, vhi);                                                   \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_ZERO(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                 \
    const __mmask16 k_ = _mm512_cmpgt_epi32_mask(s_, vhi) | _mm512_cmplt_epi32_mask(s_, vlo);           \
    O = _mm512_mask_add_epi32(O, k_, O, one); A = _mm512_maskz_mov_epi32((__mmask16)~k_, s_); }
#define FX32_B_ZERO_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                            \
    const __mmask16 k_ = FX32_OVF(A);                                                               \
    O = _mm512_mask_add_epi32(O, k_, O, one); A = _mm512_maskz_mov_epi32((__mmask16)~k_, s_); }
#define FX32_B_N_SAT(A, O) { A = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(A, p_), vlo), vhi); }
#define FX32_B_N_SAT_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                           \
    A = _mm512_mask_mov_epi32(s_, FX32_OVF(A), _mm512_xor_si512(_mm512_srai_epi32(A, 31), vmax)); }
#define FX32_B_N_WRAP(A, O) { A = _mm512_sra_epi32(_mm512_sll_epi32(_mm512_add_epi32(A, p_), shc), shc); }
#define FX32_B_N_ADD(A, O) { A = _mm512_add_epi32(A, p_); }
#define FX32_B_N_WRAP_U(A, O) { A = _mm512_and_si512(_mm512_add_epi32(A, p_), vhi); }

#define FX32_ROW(r, BODY)                                                                          \
    {                                                                                               \
        const __m512i xe_ = _mm512_set1_epi32((int32_t)(uint16_t)ar##r[k]);                         \
        const __m512i xo_ = _mm512_slli_epi32(xe_, 16);                                             \
        { const __m512i p_ = _mm512_madd_epi16(xe_, b0_); BODY(acc##r##0, ov##r##0) }               \
        { const __m512i p_ = _mm512_madd_epi16(xo_, b0_); BODY(acc##r##1, ov##r##1) }               \
        { const __m512i p_ = _mm512_madd_epi16(xe_, b1_); BODY(acc##r##2, ov##r##2) }               \
        { const __m512i p_ = _mm512_madd_epi16(xo_, b1_); BODY(acc##r##3, ov##r##3) }               \
    }
#define FX32_KLOOP(R, BODY)                                                                        \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m512i b0_ = _mm512_loadu_si512((const void *)(bslab + k * 64));                     \
        const __m512i b1_ = _mm512_loadu_si512((const void *)(bslab + k * 64 + 32));                \
        FX32_ROW(0, BODY)                                                                           \
        if ((R) > 1) FX32_ROW(1, BODY)                                                              \
    }

/* the loop of the variant in `variant`: KLOOP(R, BODY) with the bodies P##_B_* (P = FX32 here, FA32 in the AVX2
 * twin, _accumulate_avx2_i32.h) */
#define FX32_SWITCH_OF(KLOOP, P, R)                                                                \
    switch (variant) {                                                                              \
    case FX32_SAT: KLOOP(R, P##_B_SAT) break;                                                       \
    case FX32_SAT_FULL: KLOOP(R, P##_B_SAT_FULL) break;                                             \
    case FX32_WRAP: KLOOP(R, P##_B_WRAP) break;                                                     \
    case FX32_WRAP_FULL: KLOOP(R, P##_B_WRAP_FULL) break;                                           \
    case FX32_WRAP_U: KLOOP(R, P##_B_WRAP_U) break;                                                 \
    case FX32_ZERO: KLOOP(R, P##_B_ZERO) break;                                                     \
    case FX32_ZERO_FULL: KLOOP(R, P##_B_ZERO_FULL) break;                                           \
    case FX32_N_SAT: KLOOP(R, P##_B_N_SAT) break;                                                   \
    case FX32_N_SAT_FULL: KLOOP(R, P##_B_N_SAT_FULL) break;                                         \
    case FX32_N_WRAP: KLOOP(R, P##_B_N_WRAP) break;                                                 \
    case FX32_N_WRAP_U: KLOOP(R, P##_B_N_WRAP_U) break;                                             \
    default: KLOOP(R, P##_B_N_ADD) break;                                                           \
    }
#define FX32_SWITCH(R) FX32_SWITCH_OF(FX32_KLOOP, FX32, R)

/* The lane layout (see FXA_X512_LOAD): four vectors of 16 int32 per row; vector v, lane l <-> column
 * 32 * (v >> 1) + 2 * l + (v & 1) (the even and odd columns of vpmaddwd). */
#define FX32_POS(j) (((j) >> 5) * 32 + ((j) & 1) * 16 + (((j) & 31) >> 1))
#define FX32_SET(V, r, X) V##r##0 = V##r##1 = V##r##2 = V##r##3 = X;
#define FX32_GET(V, r, P)                                                                          \
    V##r##0 = _mm512_loadu_si512((const void *)(P));                                                \
    V##r##1 = _mm512_loadu_si512((const void *)((P) + 16));                                         \
    V##r##2 = _mm512_loadu_si512((const void *)((P) + 32));                                         \
    V##r##3 = _mm512_loadu_si512((const void *)((P) + 48));
#define FX32_PUT(P, V, r)                                                                          \
    _mm512_storeu_si512((void *)(P), V##r##0);                                                      \
    _mm512_storeu_si512((void *)((P) + 16), V##r##1);                                               \
    _mm512_storeu_si512((void *)((P) + 32), V##r##2);                                               \
    _mm512_storeu_si512((void *)((P) + 48), V##r##3);
#define FX32_NO_DIRECT(r)
#define FX32_LOAD(r) FXA_X512_LOAD(r, int32_t, FX32_POS, FX32_SET, FX32_GET, _mm512_set1_epi32, FX32_NO_DIRECT)
#define FX32_STORE(r) FXA_X512_STORE(r, uint32_t, FX32_POS, FX32_PUT)
#define FX32_BLOCK(R)                                                                              \
    {                                                                                               \
        __m512i acc00, acc01, acc02, acc03, acc10, acc11, acc12, acc13;                             \
        __m512i ov00, ov01, ov02, ov03, ov10, ov11, ov12, ov13;                                     \
        const int16_t *ar0, *ar1 = NULL;                                                            \
        acc10 = acc11 = acc12 = acc13 = ov10 = ov11 = ov12 = ov13 = _mm512_setzero_si512();         \
        FX32_LOAD(0)                                                                                \
        if ((R) > 1) FX32_LOAD(1)                                                                   \
        FX32_SWITCH(R)                                                                              \
        FX32_STORE(0)                                                                               \
        if ((R) > 1) FX32_STORE(1)                                                                  \
        (void)ar1;                                                                                  \
    }

__attribute__((target("avx512f,avx512bw,avx512dq")))
static void fxa_mac32m_x512(FXA_X512_ARGS(int32_t))
{
    const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi), one = _mm512_set1_epi32(1);
    const __m512i zero = _mm512_setzero_si512(), vmax = _mm512_set1_epi32(INT32_MAX);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int variant = fx32_variant(mode, &cnt, lo, hi);
    int32_t tmp[64];
    (void)vlo; (void)vhi; (void)one; (void)zero; (void)vmax; (void)shc;
    FXA_X512_LOOPS(FXA_R32, FX32_BLOCK)
}
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_X512_I32_H */
