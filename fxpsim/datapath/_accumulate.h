/*
 * fxpsim/_accumulate.h -- vectorised per-add multiply-accumulate kernels.
 *
 * Plain C, no Python.  Included by fxpsim/_accumulate.pyx.
 *
 *   acc[i, j] <- fit(acc[i, j] + a[i, k] * b[k, j])   for k = 0 .. K-1 (in order)
 *   cnt[i, j] <- number of k where the add left the accumulator's range
 *
 * The loop order is j block (FXA_JB output columns held in registers; b is
 * packed so that the block's K x FXA_JB slab is contiguous and stays in
 * cache) -> i (rows) -> k (reduction, in order) -> j (vectorised lanes).  Every output
 * sees its adds in the exact sequential order k = 0, 1, ..., K-1, so the
 * result equals a per-add scalar model bit for bit.
 *
 * Lane types are int32_t or int64_t.  The Python caller guarantees that
 * |acc| + |a*b| fits the lane type (bounds taken from the data), so the
 * signed arithmetic below never overflows (no undefined behaviour); wrapping
 * to the accumulator width goes through unsigned arithmetic.
 *
 * Portability: no -march flag is needed.  With GCC >= 11 on x86-64 Linux the
 * kernels are compiled three times (x86-64-v4 = AVX-512, x86-64-v3 = AVX2,
 * baseline) via function multi-versioning, and the dynamic loader picks the
 * best variant for the CPU at run time.  Define FXPSIM_NO_CLONES to disable.
 */
#ifndef FXPSIM_ACCUMULATE_H
#define FXPSIM_ACCUMULATE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__)               \
    && defined(__linux__) && !defined(FXPSIM_NO_CLONES)
#define FXA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FXA_HAVE_CLONES 1
#else
#define FXA_CLONES
#define FXA_HAVE_CLONES 0
#endif

/* How the exact sum s = acc + p is fitted back into the accumulator. */
enum {
    FXA_EXACT = 0,   /* no fitting: caller proved it can never overflow        */
    FXA_SAT = 1,     /* clamp to [lo, hi] (saturate, saturate_symmetric, error) */
    FXA_ZERO = 2,    /* out of [lo, hi] -> 0 (saturate_zero)                    */
    FXA_WRAP_S = 3,  /* two's complement wrap to `word` bits, signed           */
    FXA_WRAP_U = 4   /* wrap to `word` bits, unsigned (mask = hi = 2^word - 1)  */
};

/* Columns per register block: 64 int32 lanes = 4 AVX-512 registers. */
#define FXA_JB 64
/* Reduction steps per tile of b kept in L1 (FXA_KT x FXA_JB lanes). */
#ifndef FXA_KT
#define FXA_KT 96
#endif

#define FXA_FIT_EXACT(T, UT) c = s;
#define FXA_FIT_SAT(T, UT) c = s < lo ? lo : s; c = c > hi ? hi : c;
#define FXA_FIT_ZERO(T, UT) c = ((s < lo) | (s > hi)) ? (T)0 : s;
#define FXA_FIT_WRAP_S(T, UT) c = (T)((UT)s << sh) >> sh;
#define FXA_FIT_WRAP_U(T, UT) c = s & hi;

/* k loop over one register block of LEN lanes. */
#define FXA_K_LOOP(T, UT, LEN, FIT)                                                                 \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const T ak = arow[k];                                                                       \
        const T *bk = bslab + k * FXA_JB;                                                           \
        for (ptrdiff_t j = 0; j < (LEN); j++) {                                                     \
            T s = acc[j] + ak * bk[j];                                                              \
            T c;                                                                                    \
            FIT(T, UT)                                                                              \
            n[j] += (T)(c != s);                                                                    \
            acc[j] = c;                                                                             \
        }                                                                                           \
    }

#define FXA_MODE_SWITCH(T, UT, LEN)                                                                 \
    switch (mode) {                                                                                 \
    case FXA_SAT: FXA_K_LOOP(T, UT, LEN, FXA_FIT_SAT) break;                                        \
    case FXA_ZERO: FXA_K_LOOP(T, UT, LEN, FXA_FIT_ZERO) break;                                      \
    case FXA_WRAP_S: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_S) break;                                  \
    case FXA_WRAP_U: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_U) break;                                  \
    default: FXA_K_LOOP(T, UT, LEN, FXA_FIT_EXACT) break;                                           \
    }

/*
 * NAME(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh)
 *   a    [nrows, K]  row-major multiplicands (already aligned to the acc LSB)
 *   b    [ceil(N / FXA_JB), K, FXA_JB]  b packed in column slabs (zero padded)
 *   init [nrows, N]  start values, or NULL for zeros
 *   out  [nrows, N]  final accumulators (int64 whatever the lane type)
 *   cnt  [nrows, N]  adds that overflowed, per output (int64; may be NULL for FXA_EXACT)
 *   lo, hi           accumulator range; sh = lane bits - word (FXA_WRAP_S only)
 */
#define FXA_DEFINE(NAME, T, UT)                                                                     \
FXA_CLONES static void NAME(const T *a, const T *b, const T *init, int64_t *out,                    \
                            int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K,                             \
                            ptrdiff_t N, int mode, T lo, T hi, int sh)                              \
{                                                                                                   \
    T acc[FXA_JB], n[FXA_JB];                                                                       \
    /* column block, then k tile, then rows: the FXA_KT x FXA_JB tile of b                          \
       stays in L1 while every row of the chunk streams over it; each row's                         \
       accumulators wait in out/cnt between tiles (adds stay in k order) */                         \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const T *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                            \
        ptrdiff_t k0 = 0;                                                                           \
        do {                                                                                        \
            const ptrdiff_t k1 = K - k0 < FXA_KT ? K : k0 + FXA_KT;                                 \
            for (ptrdiff_t i = 0; i < nrows; i++) {                                                 \
                const T *arow = a + i * K;                                                          \
                int64_t *orow = out + i * N + j0, *crow = cnt ? cnt + i * N + j0 : NULL;            \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    if (k0 == 0) {                                                                  \
                        acc[j] = init ? init[i * N + j0 + j] : (T)0;                                \
                        n[j] = 0;                                                                   \
                    } else {                                                                        \
                        acc[j] = (T)orow[j];                                                        \
                        n[j] = crow ? (T)crow[j] : 0;                                               \
                    }                                                                               \
                }                                                                                   \
                if (len == FXA_JB) {                                                                \
                    FXA_MODE_SWITCH(T, UT, FXA_JB)                                                  \
                } else {                                                                            \
                    FXA_MODE_SWITCH(T, UT, len)                                                     \
                }                                                                                   \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    orow[j] = acc[j];                                                               \
                    if (crow)                                                                       \
                        crow[j] = n[j];                                                             \
                }                                                                                   \
            }                                                                                       \
            k0 = k1;                                                                                \
        } while (k0 < K);                                                                           \
    }                                                                                               \
}

FXA_DEFINE(fxa_mac_rows_i32, int32_t, uint32_t)
FXA_DEFINE(fxa_mac_rows_i64, int64_t, uint64_t)


/*
 * Balanced pairwise adder tree, FXA_JB output columns at a time (vectorised
 * across columns).  Level 0 holds the K products unchanged; each level adds
 * neighbours (0,1), (2,3), ... and fits every sum; an odd last element is
 * passed up unchanged; finally the root is added to init and fitted.
 *   scratch  [max(K, 1), FXA_JB] per call (one per thread)
 * Other arguments as in the sequential kernels.  The caller guarantees that
 * twice the largest |product| or |accumulator code| fits the lane type.
 */
#define FXA_TREE_LEVEL(T, UT, FIT)                                                                  \
    for (ptrdiff_t t = 0; t < half; t++) {                                                          \
        const T *x = scratch + 2 * t * FXA_JB, *y = x + FXA_JB;                                     \
        T *d = scratch + t * FXA_JB;                                                                \
        for (ptrdiff_t j = 0; j < FXA_JB; j++) {                                                    \
            T s = x[j] + y[j];                                                                      \
            T c;                                                                                    \
            FIT(T, UT)                                                                              \
            n[j] += (T)(c != s);                                                                    \
            d[j] = c;                                                                               \
        }                                                                                           \
    }

#define FXA_TREE_FINAL(T, UT, FIT)                                                                  \
    for (ptrdiff_t j = 0; j < len; j++) {                                                           \
        T s = scratch[j] + (init ? init[i * N + j0 + j] : (T)0);                                    \
        T c;                                                                                        \
        FIT(T, UT)                                                                                  \
        out[i * N + j0 + j] = c;                                                                    \
        cnt[i * N + j0 + j] = n[j] + (T)(c != s);                                                   \
    }

#define FXA_TREE_SWITCH(WHAT, T, UT)                                                                \
    switch (mode) {                                                                                 \
    case FXA_SAT: WHAT(T, UT, FXA_FIT_SAT) break;                                                   \
    case FXA_ZERO: WHAT(T, UT, FXA_FIT_ZERO) break;                                                 \
    case FXA_WRAP_S: WHAT(T, UT, FXA_FIT_WRAP_S) break;                                             \
    case FXA_WRAP_U: WHAT(T, UT, FXA_FIT_WRAP_U) break;                                             \
    default: WHAT(T, UT, FXA_FIT_EXACT) break;                                                      \
    }

#define FXA_TREE_DEFINE(NAME, T, UT)                                                                \
FXA_CLONES static void NAME(const T *a, const T *b, const T *init, int64_t *out, int64_t *cnt,       \
                            T *scratch,                                                             \
                            ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode, T lo, T hi,        \
                            int sh)                                                                 \
{                                                                                                   \
    T n[FXA_JB];                                                                                    \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const T *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                            \
        for (ptrdiff_t i = 0; i < nrows; i++) {                                                     \
            const T *arow = a + i * K;                                                              \
            ptrdiff_t m = K > 0 ? K : 1;                                                            \
            for (ptrdiff_t j = 0; j < FXA_JB; j++) {                                                \
                n[j] = 0;                                                                           \
                scratch[j] = 0;                                                                     \
            }                                                                                       \
            for (ptrdiff_t k = 0; k < K; k++) {                                                     \
                const T ak = arow[k];                                                               \
                for (ptrdiff_t j = 0; j < FXA_JB; j++)                                              \
                    scratch[k * FXA_JB + j] = ak * bslab[k * FXA_JB + j];                           \
            }                                                                                       \
            while (m > 1) {                                                                         \
                const ptrdiff_t half = m / 2;                                                       \
                FXA_TREE_SWITCH(FXA_TREE_LEVEL, T, UT)                                              \
                if (m & 1)                                                                          \
                    for (ptrdiff_t j = 0; j < FXA_JB; j++)                                          \
                        scratch[half * FXA_JB + j] = scratch[(m - 1) * FXA_JB + j];                 \
                m = half + (m & 1);                                                                 \
            }                                                                                       \
            FXA_TREE_SWITCH(FXA_TREE_FINAL, T, UT)                                                  \
        }                                                                                           \
    }                                                                                               \
}

FXA_TREE_DEFINE(fxa_tree_rows_i32, int32_t, uint32_t)
FXA_TREE_DEFINE(fxa_tree_rows_i64, int64_t, uint64_t)

/* ------------------------------------------------------------------------
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
 * ------------------------------------------------------------------------ */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES)
#include <immintrin.h>
#define FXA_HAVE_I16 1

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
#define FXA_LD512(p) _mm512_loadu_si512((const void *)(p))
#define FXA_ST512(p, v) _mm512_storeu_si512((void *)(p), v)
#define FXA_EQ512(x, y) _mm512_movm_epi16(_mm512_cmpeq_epi16_mask(x, y))
#define FXA_GT512(x, y) _mm512_movm_epi16(_mm512_cmpgt_epi16_mask(x, y))
#define FXA_CNT_EQ512(ok, x, y) _mm512_mask_add_epi16(ok, _mm512_cmpeq_epi16_mask(x, y), ok, one)
#define FXA_CNT_TRUE512(ok, good) _mm512_sub_epi16(ok, good)
FXA_I16_KERNEL(fxa_mac16_avx512, "avx512f,avx512bw", __m512i, 2, _mm512_set1_epi16, FXA_LD512,
               FXA_ST512, _mm512_mullo_epi16, _mm512_adds_epi16, _mm512_add_epi16, _mm512_max_epi16,
               _mm512_min_epi16, _mm512_sll_epi16, _mm512_sra_epi16, FXA_EQ512, _mm512_and_si512,
               _mm512_andnot_si512, FXA_GT512, _mm512_or_si512, FXA_CNT_EQ512, FXA_CNT_TRUE512)

#define FXA_LD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define FXA_ST256(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define FXA_CNT_EQ256(ok, x, y) _mm256_sub_epi16(ok, _mm256_cmpeq_epi16(x, y))
#define FXA_CNT_TRUE256(ok, good) _mm256_sub_epi16(ok, good)
FXA_I16_KERNEL(fxa_mac16_avx2, "avx2", __m256i, 4, _mm256_set1_epi16, FXA_LD256, FXA_ST256,
               _mm256_mullo_epi16, _mm256_adds_epi16, _mm256_add_epi16, _mm256_max_epi16,
               _mm256_min_epi16, _mm256_sll_epi16, _mm256_sra_epi16, _mm256_cmpeq_epi16,
               _mm256_and_si256, _mm256_andnot_si256, _mm256_cmpgt_epi16, _mm256_or_si256,
               FXA_CNT_EQ256, FXA_CNT_TRUE256)

/* 2: AVX-512BW, 1: AVX2, 0: no 16-bit kernel on this CPU. */
static int fxa_i16_level(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
    return 0;
}

static void fxa_mac_rows_i16(const int16_t *a, const int16_t *b, const int16_t *init, int64_t *out,
                             int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode,
                             int16_t lo, int16_t hi, int sh, int level)
{
    if (level == 2)
        fxa_mac16_avx512(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh);
    else
        fxa_mac16_avx2(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh);
}
#else
#define FXA_HAVE_I16 0
static int fxa_i16_level(void) { return 0; }
static void fxa_mac_rows_i16(const int16_t *a, const int16_t *b, const int16_t *init, int64_t *out,
                             int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode,
                             int16_t lo, int16_t hi, int sh, int level)
{
    (void)a; (void)b; (void)init; (void)out; (void)cnt; (void)nrows; (void)K; (void)N;
    (void)mode; (void)lo; (void)hi; (void)sh; (void)level;
}
#endif

/* 1 when the kernels above were built with run-time ISA dispatch. */
static int fxa_have_clones(void) { return FXA_HAVE_CLONES; }

#endif /* FXPSIM_ACCUMULATE_H */
