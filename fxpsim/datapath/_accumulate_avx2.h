/*
 * fxpsim/datapath/_accumulate_avx2.h -- the per-add kernel on 16-bit lanes with AVX2 intrinsics
 * (fxa_mac16_avx2; the AVX-512BW one is in _accumulate_x512_i16.h, fxa_mac_rows_i16 in _accumulate.h
 * picks one).
 *
 * 16-bit lanes (x86 AVX-512BW / AVX2, chosen at run time): a signed
 * accumulator of at most 16 bits whose products fit int16 (e.g. int8 x int8).
 * The exact sum acc + p may leave int16, so both the saturating (adds) and
 * the wrapping (add) 16-bit sums are formed: they differ exactly when the
 * exact sum left int16, in which case it also left [lo, hi].
 *   sat mode:  c = clamp(adds, lo, hi)            ovf = c != adds | adds != add
 *   wrap mode: c = sign_extend(add, word)         ovf = c != add  | adds != add
 *   zero mode: c = ovf ? 0 : adds                 ovf = adds out of [lo,hi] | adds != add
 * Counts live in 16-bit lanes for one k tile (FXA_KT < 2^15 steps), then
 * are added to the int64 per-output counts.
 */
#ifndef FXPSIM_ACCUMULATE_AVX2_H
#define FXPSIM_ACCUMULATE_AVX2_H

#include "_accumulate_common.h"

#if FXA_HAVE_I16
#include <immintrin.h>

#define FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD, BODY)                                     \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const VT ak = SET1(arow[k]);                                                                \
        const int16_t *bk = bslab + k * FXA_JB;                                                     \
        for (int v = 0; v < NV; v++) {                                                              \
            const VT p = MUL(ak, LOAD(bk + v * (FXA_JB / NV)));                                     \
            const VT sat = ADDS(acc[v], p), wr = ADD(acc[v], p);                                    \
            BODY                                                                                    \
        }                                                                                           \
    }

#define FXA_I16_KERNEL(NAME, TARGET, VT, NV, SET1, LOAD, STORE, MUL, ADDS, ADD, MAX, MIN, SLL, SRA, \
                       EQ, AND, ANDNOT, GT, OR, CNT_EQ, CNT_TRUE)                                   \
__attribute__((target(TARGET)))                                                                     \
static void NAME(const int16_t *a, const int16_t *b, const int16_t *init, int64_t *out,           \
                 int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode, int16_t lo,     \
                 int16_t hi, int sh)                                                                \
{                                                                                                   \
    const VT vlo = SET1(lo), vhi = SET1(hi), zero = SET1(0), one = SET1(1);                         \
    const __m128i shc = _mm_cvtsi32_si128(sh);                                                      \
    const int full = (mode == FXA_SAT && lo == INT16_MIN && hi == INT16_MAX)                        \
                     || (mode == FXA_WRAP_S && sh == 0);                                            \
    int16_t tmp[FXA_JB], ok16[FXA_JB];                                                              \
    (void)one;                                                                                      \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const int16_t *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                      \
        ptrdiff_t k0 = 0;                                                                           \
        do {                                                                                        \
            const ptrdiff_t k1 = K - k0 < FXA_KT ? K : k0 + FXA_KT;                                 \
            for (ptrdiff_t i = 0; i < nrows; i++) {                                                 \
                const int16_t *arow = a + i * K;                                                    \
                VT acc[NV], ok[NV];                                                                 \
                for (ptrdiff_t j = 0; j < FXA_JB; j++)                                              \
                    tmp[j] = j >= len ? 0 : k0 > 0 ? (int16_t)out[i * N + j0 + j]                            \
                             : init ? init[i * N + j0 + j] : 0;                                     \
                for (int v = 0; v < NV; v++) {                                                      \
                    acc[v] = LOAD(tmp + v * (FXA_JB / NV));                                         \
                    ok[v] = zero;                                                                   \
                }                                                                                   \
                if (full && mode == FXA_SAT) {          /* 16-bit saturate: c = adds */             \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  ok[v] = CNT_EQ(ok[v], sat, wr); acc[v] = sat;)                    \
                } else if (full) {                      /* 16-bit wrap: c = add */                  \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  ok[v] = CNT_EQ(ok[v], sat, wr); acc[v] = wr;)                     \
                } else if (mode == FXA_WRAP_S) {                                                    \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT c = SRA(SLL(wr, shc), shc);                              \
                                  ok[v] = CNT_TRUE(ok[v], AND(EQ(c, wr), EQ(sat, wr)));             \
                                  acc[v] = c;)                                                      \
                } else if (mode == FXA_ZERO) {                                                      \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT bad = OR(GT(vlo, sat), GT(sat, vhi));                    \
                                  const VT good = ANDNOT(bad, EQ(sat, wr));                         \
                                  ok[v] = CNT_TRUE(ok[v], good); acc[v] = AND(sat, good);)          \
                } else {                                                                            \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT c = MIN(MAX(sat, vlo), vhi);                             \
                                  ok[v] = CNT_TRUE(ok[v], AND(EQ(c, sat), EQ(sat, wr)));            \
                                  acc[v] = c;)                                                      \
                }                                                                                   \
                for (int v = 0; v < NV; v++) {                                                      \
                    STORE(tmp + v * (FXA_JB / NV), acc[v]);                                         \
                    STORE(ok16 + v * (FXA_JB / NV), ok[v]);                                         \
                }                                                                                   \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    const int32_t steps_ovf = (int32_t)(k1 - k0) - (int32_t)ok16[j];                \
                    out[i * N + j0 + j] = tmp[j];                                                   \
                    cnt[i * N + j0 + j] = (k0 > 0 ? cnt[i * N + j0 + j] : 0) + steps_ovf;           \
                }                                                                                   \
            }                                                                                       \
            k0 = k1;                                                                                \
        } while (k0 < K);                                                                           \
    }                                                                                               \
}

/* ok counts the steps that did not overflow: +1 where x == y (CNT_EQ) or where good is all ones */
#define FXA_LD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define FXA_ST256(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define FXA_CNT_EQ256(ok, x, y) _mm256_sub_epi16(ok, _mm256_cmpeq_epi16(x, y))
#define FXA_CNT_TRUE256(ok, good) _mm256_sub_epi16(ok, good)
FXA_I16_KERNEL(fxa_mac16_avx2, "avx2", __m256i, 4, _mm256_set1_epi16, FXA_LD256, FXA_ST256,
               _mm256_mullo_epi16, _mm256_adds_epi16, _mm256_add_epi16, _mm256_max_epi16,
               _mm256_min_epi16, _mm256_sll_epi16, _mm256_sra_epi16, _mm256_cmpeq_epi16,
               _mm256_and_si256, _mm256_andnot_si256, _mm256_cmpgt_epi16, _mm256_or_si256,
               FXA_CNT_EQ256, FXA_CNT_TRUE256)
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_AVX2_H */
