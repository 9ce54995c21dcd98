/*
 * fxpsim/datapath/_accumulate_avx2.h -- the register-blocked AVX2 per-add kernel on 16-bit lanes
 * (fxa_mac16_avx2b): the AVX2 twin of fxa_mac16_x512 (_accumulate_x512_i16.h), same arguments, loops,
 * variants, results and counts, for CPUs without AVX-512BW.
 *
 * A row's 64 columns are four __m256i of 16 int16 (columns in order); a block of FXA_R16A rows runs the k tile
 * twice, once per half slab (columns 0..31, then 32..63), so that one half's accumulators and counters of
 * every row of the block (4 * FXA_R16A vectors) and its two b vectors stay in the 16 ymm registers while each
 * load of b feeds every row.  Without mask registers a counter counts the steps that did *not* overflow
 * (ok -= eq, eq = all ones where the step was exact); after the tile, overflows = (k1 - k0) - ok.
 *   sat:  c = clamp(adds(acc, p), lo, hi)   ok: c == adds (NARROW), adds == add (FULL), both (GENERAL)
 *   wrap: c = sign_extend(add(acc, p), word) ok: c == add (NARROW), adds == add (FULL)
 *   zero: g = ok as for sat; c = adds & g
 * (adds == add exactly when the exact sum acc + p fits int16: then one of them is the exact sum.)
 */
#ifndef FXPSIM_ACCUMULATE_AVX2_H
#define FXPSIM_ACCUMULATE_AVX2_H

#include "_accumulate_x512.h"
#include "_accumulate_x512_i16.h"     /* the variant names */

#if FXA_HAVE_I16
#define FXA_R16A 2

#define FA16_CLAMP(S) _mm256_min_epi16(_mm256_max_epi16(S, vlo), vhi)
#define FA16_OK(O, G) O = _mm256_sub_epi16(O, G);
#define FA16_B_SAT_FULL(A, O) { const __m256i s_ = _mm256_adds_epi16(A, p_);                            \
    FA16_OK(O, _mm256_cmpeq_epi16(s_, _mm256_add_epi16(A, p_))) A = s_; }
#define FA16_B_SAT_NARROW(A, O) { const __m256i s_ = _mm256_adds_epi16(A, p_);                          \
    const __m256i c_ = FA16_CLAMP(s_); FA16_OK(O, _mm256_cmpeq_epi16(c_, s_)) A = c_; }
#define FA16_B_SAT_GENERAL(A, O) { const __m256i s_ = _mm256_adds_epi16(A, p_);                         \
    const __m256i c_ = FA16_CLAMP(s_);                                                              \
    FA16_OK(O, _mm256_and_si256(_mm256_cmpeq_epi16(c_, s_), _mm256_cmpeq_epi16(s_, _mm256_add_epi16(A, p_)))) \
    A = c_; }
#define FA16_B_WRAP_FULL(A, O) { const __m256i w_ = _mm256_add_epi16(A, p_);                            \
    FA16_OK(O, _mm256_cmpeq_epi16(_mm256_adds_epi16(A, p_), w_)) A = w_; }
#define FA16_B_WRAP_NARROW(A, O) { const __m256i w_ = _mm256_add_epi16(A, p_);                          \
    const __m256i c_ = _mm256_sra_epi16(_mm256_sll_epi16(w_, shc), shc);                            \
    FA16_OK(O, _mm256_cmpeq_epi16(c_, w_)) A = c_; }
#define FA16_B_ZERO_FULL(A, O) { const __m256i w_ = _mm256_add_epi16(A, p_);                            \
    const __m256i g_ = _mm256_cmpeq_epi16(_mm256_adds_epi16(A, p_), w_);                            \
    FA16_OK(O, g_) A = _mm256_and_si256(w_, g_); }
#define FA16_B_ZERO_NARROW(A, O) { const __m256i s_ = _mm256_adds_epi16(A, p_);                         \
    const __m256i g_ = _mm256_cmpeq_epi16(FA16_CLAMP(s_), s_);                                       \
    FA16_OK(O, g_) A = _mm256_and_si256(s_, g_); }
#define FA16_B_ZERO_GENERAL(A, O) { const __m256i s_ = _mm256_adds_epi16(A, p_);                        \
    const __m256i g_ = _mm256_and_si256(_mm256_cmpeq_epi16(FA16_CLAMP(s_), s_),                      \
                                        _mm256_cmpeq_epi16(s_, _mm256_add_epi16(A, p_)));            \
    FA16_OK(O, g_) A = _mm256_and_si256(s_, g_); }
#define FA16_B_N_SAT_FULL(A, O) { A = _mm256_adds_epi16(A, p_); }
#define FA16_B_N_SAT(A, O) { A = FA16_CLAMP(_mm256_adds_epi16(A, p_)); }
#define FA16_B_N_WRAP_FULL(A, O) { A = _mm256_add_epi16(A, p_); }
#define FA16_B_N_WRAP_NARROW(A, O) { A = _mm256_sra_epi16(_mm256_sll_epi16(_mm256_add_epi16(A, p_), shc), shc); }

/* half h (vectors 2h, 2h+1 of each row: columns 32h..32h+31) of R rows over the k tile */
#define FA16_ROW(r, h0, h1, BODY)                                                                  \
    {                                                                                               \
        const __m256i x_ = _mm256_set1_epi16(ar##r[k]);                                             \
        { const __m256i p_ = _mm256_mullo_epi16(x_, b0_); BODY(acc##r##h0, ov##r##h0) }             \
        { const __m256i p_ = _mm256_mullo_epi16(x_, b1_); BODY(acc##r##h1, ov##r##h1) }             \
    }
#define FA16_KHALF(R, off, h0, h1, BODY)                                                           \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m256i b0_ = _mm256_loadu_si256((const __m256i *)(bslab + k * 64 + (off)));          \
        const __m256i b1_ = _mm256_loadu_si256((const __m256i *)(bslab + k * 64 + (off) + 16));     \
        FA16_ROW(0, h0, h1, BODY)                                                                   \
        if ((R) > 1) FA16_ROW(1, h0, h1, BODY)                                                      \
    }
#define FA16_KLOOP(R, BODY) FA16_KHALF(R, 0, 0, 1, BODY) FA16_KHALF(R, 32, 2, 3, BODY)

#define FA16_SWITCH(R) FX16_SWITCH_OF(FA16_KLOOP, FA16, R)

/* the lane layout (see FXA_BLK_LOAD): four vectors of 16 int16 per row, columns in order */
#define FA16_POS(j) (j)
#define FA16_SET(V, r, X) V##r##0 = V##r##1 = V##r##2 = V##r##3 = X;
#define FA16_GET(V, r, P)                                                                          \
    V##r##0 = _mm256_loadu_si256((const __m256i *)(P));                                             \
    V##r##1 = _mm256_loadu_si256((const __m256i *)((P) + 16));                                      \
    V##r##2 = _mm256_loadu_si256((const __m256i *)((P) + 32));                                      \
    V##r##3 = _mm256_loadu_si256((const __m256i *)((P) + 48));
#define FA16_PUT(P, V, r)                                                                          \
    _mm256_storeu_si256((__m256i *)(P), V##r##0);                                                   \
    _mm256_storeu_si256((__m256i *)((P) + 16), V##r##1);                                            \
    _mm256_storeu_si256((__m256i *)((P) + 32), V##r##2);                                            \
    _mm256_storeu_si256((__m256i *)((P) + 48), V##r##3);
/* ok counts -> overflow counts (counting variants only: the others have no counters) */
#define FA16_OVF(r)                                                                                \
    ov##r##0 = _mm256_sub_epi16(steps, ov##r##0); ov##r##1 = _mm256_sub_epi16(steps, ov##r##1);     \
    ov##r##2 = _mm256_sub_epi16(steps, ov##r##2); ov##r##3 = _mm256_sub_epi16(steps, ov##r##3);
#define FA16_DIRECT(r) else if (k0 == 0 && len == 64) { FA16_GET(acc, r, init + row * init_ld + src0) }
#define FA16_LOAD(r) FXA_BLK_LOAD(r, int16_t, FA16_POS, FA16_SET, FA16_GET, _mm256_set1_epi16, FA16_DIRECT, \
                                  _mm256_setzero_si256())
#define FA16_STORE(r) FXA_BLK_STORE(r, uint16_t, FA16_POS, FA16_PUT, fxa_sweep_row_avx2)
#define FA16_BLOCK(R)                                                                              \
    {                                                                                               \
        __m256i acc00, acc01, acc02, acc03, acc10, acc11, acc12, acc13;                             \
        __m256i ov00, ov01, ov02, ov03, ov10, ov11, ov12, ov13;                                     \
        const int16_t *ar0, *ar1 = NULL;                                                            \
        const __m256i steps = _mm256_set1_epi16((int16_t)(k1 - k0));                                \
        acc10 = acc11 = acc12 = acc13 = ov10 = ov11 = ov12 = ov13 = _mm256_setzero_si256();         \
        FA16_LOAD(0)                                                                                \
        if ((R) > 1) FA16_LOAD(1)                                                                   \
        FA16_SWITCH(R)                                                                              \
        FA16_OVF(0)                                                                                 \
        if ((R) > 1) { FA16_OVF(1) }                                                                \
        FA16_STORE(0)                                                                               \
        if ((R) > 1) FA16_STORE(1)                                                                  \
        (void)ar1;                                                                                  \
    }

__attribute__((target("avx2")))
static void fxa_mac16_avx2b(FXA_X512_ARGS(int16_t))
{
    const __m256i vlo = _mm256_set1_epi16(lo), vhi = _mm256_set1_epi16(hi);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int variant = fx16_variant(mode, cnt != NULL, lo, hi, sh);
    int16_t tmp[64];
    (void)vlo; (void)vhi; (void)shc;
    FXA_X512_LOOPS(FXA_R16A, FA16_BLOCK)
}
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_AVX2_H */
