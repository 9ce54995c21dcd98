/*
 * fxpsim/_accumulate.h -- vectorised per-add multiply-accumulate kernels.
 *
 * Plain C, no Python.  Included by fxpsim/_accumulate.pyx.
 *
 *   acc[i, j] <- fit(acc[i, j] + a[i, k] * b[k, j])   for k = 0 .. K-1 (in order)
 *   cnt[i, j] <- number of k where the add left the accumulator's range
 *
 * The loop order is i (rows) -> j block (FXA_JB output columns held in
 * registers) -> k (reduction, in order) -> j (vectorised lanes).  Every output
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

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) \
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

#define FXA_FIT_EXACT(T, UT) c = s;
#define FXA_FIT_SAT(T, UT) c = s < lo ? lo : s; c = c > hi ? hi : c;
#define FXA_FIT_ZERO(T, UT) c = ((s < lo) | (s > hi)) ? (T)0 : s;
#define FXA_FIT_WRAP_S(T, UT) c = (T)((UT)s << sh) >> sh;
#define FXA_FIT_WRAP_U(T, UT) c = s & hi;

/* k loop over one register block of LEN lanes. */
#define FXA_K_LOOP(T, UT, LEN, FIT)                                          \
    for (ptrdiff_t k = 0; k < K; k++) {                                      \
        const T ak = arow[k];                                                \
        const T *bk = b + k * N + j0;                                        \
        for (ptrdiff_t j = 0; j < (LEN); j++) {                              \
            T s = acc[j] + ak * bk[j];                                       \
            T c;                                                             \
            FIT(T, UT)                                                       \
            n[j] += (T)(c != s);                                             \
            acc[j] = c;                                                      \
        }                                                                    \
    }

#define FXA_MODE_SWITCH(T, UT, LEN)                                          \
    switch (mode) {                                                          \
    case FXA_SAT: FXA_K_LOOP(T, UT, LEN, FXA_FIT_SAT) break;                 \
    case FXA_ZERO: FXA_K_LOOP(T, UT, LEN, FXA_FIT_ZERO) break;               \
    case FXA_WRAP_S: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_S) break;           \
    case FXA_WRAP_U: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_U) break;           \
    default: FXA_K_LOOP(T, UT, LEN, FXA_FIT_EXACT) break;                    \
    }

/*
 * NAME(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh)
 *   a    [nrows, K]  row-major multiplicands (already aligned to the acc LSB)
 *   b    [K, N]      row-major
 *   init [nrows, N]  start values, or NULL for zeros
 *   out  [nrows, N]  final accumulators
 *   cnt  [nrows, N]  adds that overflowed, per output (may be NULL for FXA_EXACT)
 *   lo, hi           accumulator range; sh = lane bits - word (FXA_WRAP_S only)
 */
#define FXA_DEFINE(NAME, T, UT)                                              \
FXA_CLONES static void NAME(const T *a, const T *b, const T *init, T *out,   \
                            T *cnt, ptrdiff_t nrows, ptrdiff_t K,            \
                            ptrdiff_t N, int mode, T lo, T hi, int sh)       \
{                                                                            \
    T acc[FXA_JB], n[FXA_JB];                                                \
    /* column block outside, rows inside: the K x FXA_JB slab of b stays in  \
       cache while every row of the chunk streams over it */                 \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                           \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;             \
        for (ptrdiff_t i = 0; i < nrows; i++) {                              \
            const T *arow = a + i * K;                                       \
            for (ptrdiff_t j = 0; j < len; j++) {                            \
                acc[j] = init ? init[i * N + j0 + j] : (T)0;                 \
                n[j] = 0;                                                    \
            }                                                                \
            if (len == FXA_JB) {                                             \
                FXA_MODE_SWITCH(T, UT, FXA_JB)                               \
            } else {                                                         \
                FXA_MODE_SWITCH(T, UT, len)                                  \
            }                                                                \
            for (ptrdiff_t j = 0; j < len; j++) {                            \
                out[i * N + j0 + j] = acc[j];                                \
                if (cnt) cnt[i * N + j0 + j] = n[j];                         \
            }                                                                \
        }                                                                    \
    }                                                                        \
}

FXA_DEFINE(fxa_mac_rows_i32, int32_t, uint32_t)
FXA_DEFINE(fxa_mac_rows_i64, int64_t, uint64_t)

/* 1 when the kernels above were built with run-time ISA dispatch. */
static int fxa_have_clones(void) { return FXA_HAVE_CLONES; }

#endif /* FXPSIM_ACCUMULATE_H */
