/*
 * fxpsim/datapath/_accumulate_x512_i16.h -- the register-blocked AVX-512BW per-add kernel on 16-bit lanes
 * (fxa_mac16_x512): FXA_R16 rows x 64 columns, native saturating adds (see _accumulate_x512.h).
 */
#ifndef FXPSIM_ACCUMULATE_X512_I16_H
#define FXPSIM_ACCUMULATE_X512_I16_H

#include "_accumulate_x512.h"

#if FXA_HAVE_I16
enum {  /* loop variants of the 16-bit kernel (counting ones first) */
    FX16_SAT_FULL, FX16_SAT_NARROW, FX16_SAT_GENERAL, FX16_WRAP_FULL, FX16_WRAP_NARROW,
    FX16_ZERO_FULL, FX16_ZERO_NARROW, FX16_ZERO_GENERAL,
    FX16_N_SAT_FULL, FX16_N_SAT, FX16_N_WRAP_FULL, FX16_N_WRAP_NARROW
};

/* The loop variant of a 16-bit register (both ISAs): FULL = the whole int16 lane, NARROW = hi - lo <= 32767. */
static inline int fx16_variant(int mode, int counting, int16_t lo, int16_t hi, int sh)
{
    const int full = lo == INT16_MIN && hi == INT16_MAX;
    const int narrow = (int32_t)hi - (int32_t)lo <= INT16_MAX;
    if (mode == FXA_WRAP_S)
        return counting ? (sh == 0 ? FX16_WRAP_FULL : FX16_WRAP_NARROW)
                        : (sh == 0 ? FX16_N_WRAP_FULL : FX16_N_WRAP_NARROW);
    if (mode == FXA_ZERO)
        return full ? FX16_ZERO_FULL : narrow ? FX16_ZERO_NARROW : FX16_ZERO_GENERAL;
    if (counting)
        return full ? FX16_SAT_FULL : narrow ? FX16_SAT_NARROW : FX16_SAT_GENERAL;
    return full ? FX16_N_SAT_FULL : FX16_N_SAT;
}

/* Loop bodies on one vector: A accumulators, O overflow counters, p products.
 * FULL: the register is the whole int16 lane (native saturating/wrapping add);
 * NARROW: hi - lo <= 32767, so a sum that leaves int16 also leaves [lo, hi] and
 *   adds() pins it on the right side (no separate wrapping add needed);
 * GENERAL: a 16-bit range that is neither (saturate_symmetric at 16 bits). */
#define FX16_B_SAT_FULL(A, O)  { const __m512i s_ = _mm512_adds_epi16(A, p_);                           \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_)), O, one); A = s_; }
#define FX16_B_SAT_NARROW(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                          \
    const __m512i c_ = _mm512_min_epi16(_mm512_max_epi16(s_, vlo), vhi);                                \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(c_, s_), O, one); A = c_; }
#define FX16_B_SAT_GENERAL(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                         \
    const __m512i c_ = _mm512_min_epi16(_mm512_max_epi16(s_, vlo), vhi);                                \
    const __mmask32 k_ = _mm512_cmpneq_epi16_mask(c_, s_) | _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_)); \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = c_; }
#define FX16_B_WRAP_FULL(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                            \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(_mm512_adds_epi16(A, p_), w_), O, one); A = w_; }
#define FX16_B_WRAP_NARROW(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                          \
    const __m512i c_ = _mm512_sra_epi16(_mm512_sll_epi16(w_, shc), shc);                                \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(c_, w_), O, one); A = c_; }
#define FX16_B_ZERO_FULL(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                            \
    const __mmask32 k_ = _mm512_cmpneq_epi16_mask(_mm512_adds_epi16(A, p_), w_);                        \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, w_); }
#define FX16_B_ZERO_NARROW(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                         \
    const __mmask32 k_ = _mm512_cmpgt_epi16_mask(s_, vhi) | _mm512_cmplt_epi16_mask(s_, vlo);           \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, s_); }
#define FX16_B_ZERO_GENERAL(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                        \
    const __mmask32 k_ = _mm512_cmpgt_epi16_mask(s_, vhi) | _mm512_cmplt_epi16_mask(s_, vlo)            \
                         | _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_));                       \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, s_); }
#define FX16_B_N_SAT_FULL(A, O) { A = _mm512_adds_epi16(A, p_); }
#define FX16_B_N_SAT(A, O) { A = _mm512_min_epi16(_mm512_max_epi16(_mm512_adds_epi16(A, p_), vlo), vhi); }
#define FX16_B_N_WRAP_FULL(A, O) { A = _mm512_add_epi16(A, p_); }
#define FX16_B_N_WRAP_NARROW(A, O) { A = _mm512_sra_epi16(_mm512_sll_epi16(_mm512_add_epi16(A, p_), shc), shc); }

/* k loop of one register block of R rows (R = 1 or 4) x 64 columns (2 vectors per row); named
 * variables rather than arrays keep every accumulator and counter in its own register */
#define FX16_ROW(r, BODY)                                                                          \
    {                                                                                               \
        const __m512i x_ = _mm512_set1_epi16(ar##r[k]);                                             \
        { const __m512i p_ = _mm512_mullo_epi16(x_, b0_); BODY(acc##r##0, ov##r##0) }               \
        { const __m512i p_ = _mm512_mullo_epi16(x_, b1_); BODY(acc##r##1, ov##r##1) }               \
    }
#define FX16_KLOOP(R, BODY)                                                                        \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m512i b0_ = _mm512_loadu_si512((const void *)(bslab + k * 64));                     \
        const __m512i b1_ = _mm512_loadu_si512((const void *)(bslab + k * 64 + 32));                \
        FX16_ROW(0, BODY)                                                                           \
        if ((R) > 1) {                                                                              \
            FX16_ROW(1, BODY) FX16_ROW(2, BODY) FX16_ROW(3, BODY)                                   \
        }                                                                                           \
    }

/* the loop of the variant in `variant`: KLOOP(R, BODY) with the bodies P##_B_* (P = FX16 here, FA16 in the AVX2
 * twin, _accumulate_avx2.h) */
#define FX16_SWITCH_OF(KLOOP, P, R)                                                                \
    switch (variant) {                                                                              \
    case FX16_SAT_FULL: KLOOP(R, P##_B_SAT_FULL) break;                                             \
    case FX16_SAT_NARROW: KLOOP(R, P##_B_SAT_NARROW) break;                                         \
    case FX16_SAT_GENERAL: KLOOP(R, P##_B_SAT_GENERAL) break;                                       \
    case FX16_WRAP_FULL: KLOOP(R, P##_B_WRAP_FULL) break;                                           \
    case FX16_WRAP_NARROW: KLOOP(R, P##_B_WRAP_NARROW) break;                                       \
    case FX16_ZERO_FULL: KLOOP(R, P##_B_ZERO_FULL) break;                                           \
    case FX16_ZERO_NARROW: KLOOP(R, P##_B_ZERO_NARROW) break;                                       \
    case FX16_ZERO_GENERAL: KLOOP(R, P##_B_ZERO_GENERAL) break;                                     \
    case FX16_N_SAT_FULL: KLOOP(R, P##_B_N_SAT_FULL) break;                                         \
    case FX16_N_SAT: KLOOP(R, P##_B_N_SAT) break;                                                   \
    case FX16_N_WRAP_FULL: KLOOP(R, P##_B_N_WRAP_FULL) break;                                       \
    default: KLOOP(R, P##_B_N_WRAP_NARROW) break;                                                   \
    }
#define FX16_SWITCH(R) FX16_SWITCH_OF(FX16_KLOOP, FX16, R)

/* The lane layout (see FXA_X512_LOAD): two vectors of 32 int16 per row, columns in order; with len == 64 the
 * start values of the first tile load straight from init. */
#define FX16_POS(j) (j)
#define FX16_SET(V, r, X) V##r##0 = V##r##1 = X;
#define FX16_GET(V, r, P)                                                                          \
    V##r##0 = _mm512_loadu_si512((const void *)(P));                                                \
    V##r##1 = _mm512_loadu_si512((const void *)((P) + 32));
#define FX16_PUT(P, V, r)                                                                          \
    _mm512_storeu_si512((void *)(P), V##r##0);                                                      \
    _mm512_storeu_si512((void *)((P) + 32), V##r##1);
#define FX16_DIRECT(r) else if (k0 == 0 && len == 64) { FX16_GET(acc, r, init + row * init_ld + src0) }
#define FX16_LOAD(r) FXA_X512_LOAD(r, int16_t, FX16_POS, FX16_SET, FX16_GET, _mm512_set1_epi16, FX16_DIRECT)
#define FX16_STORE(r) FXA_X512_STORE(r, uint16_t, FX16_POS, FX16_PUT)
#define FX16_BLOCK(R)                                                                              \
    {                                                                                               \
        __m512i acc00, acc01, acc10, acc11, acc20, acc21, acc30, acc31;                             \
        __m512i ov00, ov01, ov10, ov11, ov20, ov21, ov30, ov31;                                     \
        const int16_t *ar0, *ar1 = NULL, *ar2 = NULL, *ar3 = NULL;                                  \
        acc10 = acc11 = acc20 = acc21 = acc30 = acc31 = _mm512_setzero_si512();                     \
        ov10 = ov11 = ov20 = ov21 = ov30 = ov31 = acc10;                                            \
        FX16_LOAD(0)                                                                                \
        if ((R) > 1) { FX16_LOAD(1) FX16_LOAD(2) FX16_LOAD(3) }                                     \
        FX16_SWITCH(R)                                                                              \
        FX16_STORE(0)                                                                               \
        if ((R) > 1) { FX16_STORE(1) FX16_STORE(2) FX16_STORE(3) }                                  \
        (void)ar1; (void)ar2; (void)ar3;                                                            \
    }

__attribute__((target("avx512f,avx512bw,avx512dq")))
static void fxa_mac16_x512(FXA_X512_ARGS(int16_t))
{
    const __m512i vlo = _mm512_set1_epi16(lo), vhi = _mm512_set1_epi16(hi), one = _mm512_set1_epi16(1);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int variant = fx16_variant(mode, cnt != NULL, lo, hi, sh);
    int16_t tmp[64];
    (void)vlo; (void)vhi; (void)one; (void)shc;
    FXA_X512_LOOPS(FXA_R16, FX16_BLOCK)
}
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_X512_I16_H */
