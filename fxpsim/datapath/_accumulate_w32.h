/*
 * fxpsim/datapath/_accumulate_w32.h -- exact sums of int32 products modulo 2^64.
 *
 * Plain C, no Python.  Included by fxpsim/datapath/_accumulate.pyx.
 *
 *   out[i, j] = sum_k a[i, k] * b[k, j]   modulo 2^64 (int64 bit patterns)
 *
 * for int32 operands: every product is exact on 64 bits (|a b| <= 2^62) and int64 lane adds wrap
 * modulo 2^64, which is the sum's low 64 bits in any order (two's-complement wrapping commutes with
 * summation).  The caller reduces it modulo 2^W once for a W-bit wrapping accumulator.
 *
 *   a    [nrows, lda] int32 rows (K used)
 *   b    [ceil(N / FXA_W32_JB), K, FXA_W32_JB] int64: b's columns in slabs of FXA_W32_JB, each
 *        value the sign-extended int32 (zero padded past N)
 *   out  [nrows, ldo] int64, columns 0 .. N-1 written (=), or added to (modulo 2^64) with ``add``
 *
 * AVX-512F kernel: FXA_W32_R rows x FXA_W32_JB columns of int64 accumulators in zmm registers;
 * per k, one broadcast of a[i, k] per row, one load of b per 8 columns, VPMULDQ (signed low 32 x
 * low 32 -> exact 64-bit product, a cheap instruction unlike the 64 x 64 VPMULLQ) and VPADDQ.
 * The portable kernel computes the same sums (unsigned 64-bit arithmetic, wrapping by definition);
 * both give the same bits, so the choice is speed only.
 */
#ifndef FXPSIM_ACCUMULATE_W32_H
#define FXPSIM_ACCUMULATE_W32_H

#include <stddef.h>
#include <stdint.h>

#include "_accumulate.h"    /* FXA_CLONES: the portable kernel is compiled for several ISAs as well */

/* Columns per slab of b (4 zmm of int64) and rows per register block. */
#define FXA_W32_JB 32
#define FXA_W32_R 6         /* (the remainder switch below handles up to 5 rows) */
#define FXA_W32_NC (FXA_W32_JB / 8)

/* Portable kernel (any CPU; vectorised by the compiler, AVX-512/AVX2/baseline clones picked at run time). */
FXA_CLONES static void fxa_w32_rows_c(const int32_t *a, ptrdiff_t lda, const int64_t *b, int64_t *out, ptrdiff_t ldo,
                           ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int add)
{
    uint64_t acc[FXA_W32_JB];
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_W32_JB) {
        const ptrdiff_t len = N - j0 < FXA_W32_JB ? N - j0 : FXA_W32_JB;
        const int64_t *slab = b + (j0 / FXA_W32_JB) * K * FXA_W32_JB;
        for (ptrdiff_t i = 0; i < nrows; i++) {
            const int32_t *ar = a + i * lda;
            for (ptrdiff_t j = 0; j < FXA_W32_JB; j++)
                acc[j] = 0;
            for (ptrdiff_t k = 0; k < K; k++) {
                const uint64_t x = (uint64_t)(int64_t)ar[k];
                const int64_t *bk = slab + k * FXA_W32_JB;
                for (ptrdiff_t j = 0; j < FXA_W32_JB; j++)
                    acc[j] += x * (uint64_t)bk[j];
            }
            for (ptrdiff_t j = 0; j < len; j++)
                out[i * ldo + j0 + j] = (int64_t)(acc[j] + (add ? (uint64_t)out[i * ldo + j0 + j] : 0));
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES) && (__GNUC__ >= 9)
#include <immintrin.h>
#define FXA_HAVE_W32 1

/* R rows (1 .. FXA_W32_R) of one slab: all of K summed in registers, then stored (masked past N). */
__attribute__((target("avx512f,avx512bw,avx512dq"), always_inline))
static inline void fxa_w32_block(const int32_t *a, ptrdiff_t lda, const int64_t *slab, int64_t *out,
                                 ptrdiff_t ldo, ptrdiff_t K, ptrdiff_t len, const int add, const int R)
{
    __m512i acc[FXA_W32_R][FXA_W32_NC], bv[FXA_W32_NC];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < FXA_W32_NC; c++)
            acc[r][c] = _mm512_setzero_si512();
    for (ptrdiff_t k = 0; k < K; k++) {
        const int64_t *bk = slab + k * FXA_W32_JB;
        for (int c = 0; c < FXA_W32_NC; c++)
            bv[c] = _mm512_loadu_si512((const void *)(bk + 8 * c));
        for (int r = 0; r < R; r++) {
            const __m512i x = _mm512_set1_epi32(a[r * lda + k]);   /* low 32 bits of each lane */
            for (int c = 0; c < FXA_W32_NC; c++)
                acc[r][c] = _mm512_add_epi64(acc[r][c], _mm512_mul_epi32(x, bv[c]));
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < FXA_W32_NC; c++) {
            const ptrdiff_t rem = len - 8 * c;
            int64_t *o = out + r * ldo + 8 * c;
            if (rem >= 8)
                _mm512_storeu_si512((void *)o, add ? _mm512_add_epi64(acc[r][c], _mm512_loadu_si512((const void *)o))
                                                   : acc[r][c]);
            else if (rem > 0) {
                const __mmask8 mk = (__mmask8)((1u << rem) - 1);
                _mm512_mask_storeu_epi64((void *)o, mk, add ? _mm512_add_epi64(acc[r][c],
                                         _mm512_maskz_loadu_epi64(mk, (const void *)o)) : acc[r][c]);
            }
        }
}

__attribute__((target("avx512f,avx512bw,avx512dq")))
static void fxa_w32_rows_x512(const int32_t *a, ptrdiff_t lda, const int64_t *b, int64_t *out, ptrdiff_t ldo,
                              ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int add)
{
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_W32_JB) {
        const ptrdiff_t len = N - j0 < FXA_W32_JB ? N - j0 : FXA_W32_JB;
        const int64_t *slab = b + (j0 / FXA_W32_JB) * K * FXA_W32_JB;
        ptrdiff_t i = 0;
        for (; i + FXA_W32_R <= nrows; i += FXA_W32_R)
            fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, FXA_W32_R);
        switch (nrows - i) {        /* the remaining rows (fewer than FXA_W32_R) in one block */
        case 5: fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, 5); break;
        case 4: fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, 4); break;
        case 3: fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, 3); break;
        case 2: fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, 2); break;
        case 1: fxa_w32_block(a + i * lda, lda, slab, out + i * ldo + j0, ldo, K, len, add, 1); break;
        default: break;
        }
    }
}

/* 1 when the AVX-512 kernel runs on this CPU, else 0 (the portable kernel). */
static int fxa_w32_level(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512dq");
}
#else
#define FXA_HAVE_W32 0
static void fxa_w32_rows_x512(const int32_t *a, ptrdiff_t lda, const int64_t *b, int64_t *out, ptrdiff_t ldo,
                              ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int add)
{
    fxa_w32_rows_c(a, lda, b, out, ldo, nrows, K, N, add);
}
static int fxa_w32_level(void) { return 0; }
#endif

/* level 1: the AVX-512 kernel (the caller checked fxa_w32_level()), 0: the portable one; add: out += sums. */
static void fxa_w32_rows(const int32_t *a, ptrdiff_t lda, const int64_t *b, int64_t *out, ptrdiff_t ldo,
                         ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int level, int add)
{
    if (level >= 1)
        fxa_w32_rows_x512(a, lda, b, out, ldo, nrows, K, N, add);
    else
        fxa_w32_rows_c(a, lda, b, out, ldo, nrows, K, N, add);
}

#endif /* FXPSIM_ACCUMULATE_W32_H */
