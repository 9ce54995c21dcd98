/*
 * fxpsim/datapath/_accumulate_portable.h -- the per-add kernels in portable C, on int32/int64 lanes, vectorised
 * by the compiler (FXA_CLONES: AVX-512 / AVX2 / baseline variants chosen at run time).
 *
 *   acc[i, j] <- fit(acc[i, j] + a[i, k] * b[k, j])   for k = 0 .. K-1 (in order)
 *   cnt[i, j] <- number of k where the add left the accumulator's range
 *
 * The loop order is j block (FXA_JB output columns held in registers; b is
 * packed so that the block's K x FXA_JB slab is contiguous and stays in
 * cache) -> i (rows) -> k (reduction, in order) -> j (vectorised lanes).  Every output
 * sees its adds in the exact sequential order k = 0, 1, ..., K-1, so the
 * result equals a per-add scalar model bit for bit.  The adder-tree kernels
 * (fxa_tree_rows_*) fit every node of a balanced pairwise tree instead.
 */
#ifndef FXPSIM_ACCUMULATE_PORTABLE_H
#define FXPSIM_ACCUMULATE_PORTABLE_H

#include "_accumulate_common.h"

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
/* Sums modulo 2^64 (FXA_EXACT only): unsigned lanes wrap by definition, so any operands are fine.
 * Two's-complement wrapping commutes with summation, so this is the exact sum's low 64 bits. */
FXA_DEFINE(fxa_mac_rows_u64, uint64_t, uint64_t)


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

#endif /* FXPSIM_ACCUMULATE_PORTABLE_H */
