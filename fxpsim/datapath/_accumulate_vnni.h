/*
 * fxpsim/datapath/_accumulate_vnni.h -- exact sums of int16 products by AVX512-VNNI (fxa_vnni16_rows;
 * vpdpwssd: two int16 products
 * added into an int32 lane).  b = bh * 2^8 + bl with bl = b & 255 and bh in
 * [-128, 127], so a*bh and a*bl are below 2^23 in magnitude and 128 k-pairs
 * of either stream stay within int32; every 128 k-pairs the two streams are
 * combined (bh << 8) + bl in int64 and added to out.  a: rows of KP int32
 * (pairs a[2k], a[2k+1]); bh/bl: slabs of 16 columns, [slab][KP][16] pairs;
 * out: int64 rows of ldo, 32 * nslab2 columns written (+=).  Exact for any
 * int16 data: no rounding, no wrapping (callers add the sums modulo 2^64).
 */
#ifndef FXPSIM_ACCUMULATE_VNNI_H
#define FXPSIM_ACCUMULATE_VNNI_H

#include <stddef.h>
#include <stdint.h>

#define FXA_VNNI_KP 128
#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES) && (__GNUC__ >= 9)
#define FXA_HAVE_VNNI 1
#include <immintrin.h>

__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline))
static inline void fxa_vnni16_block(const int32_t *a, ptrdiff_t lda, const int32_t *h0, const int32_t *h1,
                                    const int32_t *l0, const int32_t *l1, int64_t *out, ptrdiff_t ldo,
                                    ptrdiff_t KP, const int R)
{
    for (ptrdiff_t k0 = 0; k0 < KP; k0 += FXA_VNNI_KP) {
        const ptrdiff_t k1 = KP - k0 < FXA_VNNI_KP ? KP : k0 + FXA_VNNI_KP;
        __m512i H[4][2], L[4][2];
        for (int r = 0; r < R; r++)
            H[r][0] = H[r][1] = L[r][0] = L[r][1] = _mm512_setzero_si512();
        for (ptrdiff_t k = k0; k < k1; k++) {
            const __m512i bh0 = _mm512_loadu_si512((const void *)(h0 + k * 16));
            const __m512i bh1 = _mm512_loadu_si512((const void *)(h1 + k * 16));
            const __m512i bl0 = _mm512_loadu_si512((const void *)(l0 + k * 16));
            const __m512i bl1 = _mm512_loadu_si512((const void *)(l1 + k * 16));
            for (int r = 0; r < R; r++) {
                const __m512i x = _mm512_set1_epi32(a[r * lda + k]);
                H[r][0] = _mm512_dpwssd_epi32(H[r][0], x, bh0);
                H[r][1] = _mm512_dpwssd_epi32(H[r][1], x, bh1);
                L[r][0] = _mm512_dpwssd_epi32(L[r][0], x, bl0);
                L[r][1] = _mm512_dpwssd_epi32(L[r][1], x, bl1);
            }
        }
        for (int r = 0; r < R; r++)
            for (int c = 0; c < 2; c++) {
                int64_t *o = out + r * ldo + c * 16;
                const __m512i hl = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(H[r][c]));
                const __m512i hh = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(H[r][c], 1));
                const __m512i ll = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(L[r][c]));
                const __m512i lh = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(L[r][c], 1));
                _mm512_storeu_si512((void *)o, _mm512_add_epi64(_mm512_loadu_si512((const void *)o),
                                    _mm512_add_epi64(_mm512_slli_epi64(hl, 8), ll)));
                _mm512_storeu_si512((void *)(o + 8), _mm512_add_epi64(_mm512_loadu_si512((const void *)(o + 8)),
                                    _mm512_add_epi64(_mm512_slli_epi64(hh, 8), lh)));
            }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void fxa_vnni16_rows(const int32_t *a, ptrdiff_t lda, const int32_t *bh, const int32_t *bl, int64_t *out,
                            ptrdiff_t ldo, ptrdiff_t nrows, ptrdiff_t KP, ptrdiff_t nslab2)
{
    for (ptrdiff_t s = 0; s < nslab2; s++) {
        const int32_t *h0 = bh + (2 * s) * KP * 16, *h1 = h0 + KP * 16;
        const int32_t *l0 = bl + (2 * s) * KP * 16, *l1 = l0 + KP * 16;
        ptrdiff_t i = 0;
        for (; i + 4 <= nrows; i += 4)
            fxa_vnni16_block(a + i * lda, lda, h0, h1, l0, l1, out + i * ldo + 32 * s, ldo, KP, 4);
        for (; i < nrows; i++)
            fxa_vnni16_block(a + i * lda, lda, h0, h1, l0, l1, out + i * ldo + 32 * s, ldo, KP, 1);
    }
}

static int fxa_vnni_level(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vnni");
}
#else
#define FXA_HAVE_VNNI 0
static void fxa_vnni16_rows(const int32_t *a, ptrdiff_t lda, const int32_t *bh, const int32_t *bl, int64_t *out,
                            ptrdiff_t ldo, ptrdiff_t nrows, ptrdiff_t KP, ptrdiff_t nslab2)
{
    (void)a; (void)lda; (void)bh; (void)bl; (void)out; (void)ldo; (void)nrows; (void)KP; (void)nslab2;
}
static int fxa_vnni_level(void) { return 0; }
#endif

#endif /* FXPSIM_ACCUMULATE_VNNI_H */
