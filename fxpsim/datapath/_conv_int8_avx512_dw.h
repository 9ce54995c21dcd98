/*
 * fxpsim/datapath/_conv_int8_avx512_dw.h -- the AVX-512 DEPTHWISE_CONV_2D kernels (multiplier 1): 32 channels
 * per register (fxc_dw_avx512), or two pixels per register for C <= 16 (fxc_dw_pair); exact or per-add W = 16.
 */
#ifndef FXPSIM_CONV_INT8_AVX512_DW_H
#define FXPSIM_CONV_INT8_AVX512_DW_H
#if FXC_AVX512

#include "_conv_int8_avx512_out.h"

/* The sum of the 16 int32 lanes of v, in int64. */
FXC_T512 static FXC_INL int64_t fxc_sum_epi32(__m512i v)
{
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
                                                    _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1))));
}

/* Depthwise, 32 channels per register, one pixel at a time, straight from the int8 input: the taps of
 * pixel m inside the image, in (kh, kw) order (the others are zero products), x - zx in int16 lanes; w16 [T][Cp]
 * (Cp = C rounded up to 32, zero padded), b16 [Cp] (per-add only).  Exact: int32 sums of the int16 products
 * (|p| <= 255 * 128 < 2^15) plus the int32 bias; per-add (W = 16) as the dense kernel. */
FXC_T512 static FXC_INL int64_t fxc_dw_body(const fxc_params *P, const int8_t *x, const int16_t *w16,
                                            const int16_t *b16, ptrdiff_t T, ptrdiff_t Cp, int64_t *acc_out,
                                            int8_t *out, int64_t *counts, ptrdiff_t *toff, ptrdiff_t *tw,
                                            int EXACT, int SAT)
{
    const ptrdiff_t C = P->C;
    const __m512i one = _mm512_set1_epi16(1), zx = _mm512_set1_epi16((int16_t)P->x_zp);
    __m512i ovsum = _mm512_setzero_si512();
    int64_t total = 0;
    fxc_cnt cv;
    fxc_cnt_init(&cv);
    /* a lane of ovsum gains at most 2 (T + 1) per 32-channel block: flush it before 2^30 */
    const ptrdiff_t flush = (ptrdiff_t)1 << 30 > 2 * (T + 1) * (Cp / 32) ? ((ptrdiff_t)1 << 30) / (2 * (T + 1) * (Cp / 32)) : 1;
    int32_t v32[32] __attribute__((aligned(64)));
    ptrdiff_t m = 0;
    for (ptrdiff_t n = 0; n < P->N; n++)
    for (ptrdiff_t p = 0; p < P->OH; p++) {
      /* the taps of row p inside the image: i0 <= i < i1 */
      const ptrdiff_t ihb = p * P->sh - P->pt;
      ptrdiff_t i0 = 0, i1 = P->KH;
      while (i0 < i1 && ihb + i0 * P->dh < 0) i0++;
      while (i1 > i0 && ihb + (i1 - 1) * P->dh >= P->H) i1--;
      for (ptrdiff_t q = 0; q < P->OW; q++, m++) {
        if (m % flush == flush - 1) {
            total += fxc_sum_epi32(ovsum);
            ovsum = _mm512_setzero_si512();
        }
        const ptrdiff_t iwb = q * P->sw - P->pl;
        ptrdiff_t j0 = 0, j1 = P->KW;
        while (j0 < j1 && iwb + j0 * P->dw < 0) j0++;
        while (j1 > j0 && iwb + (j1 - 1) * P->dw >= P->W) j1--;
        ptrdiff_t nt = 0;
        for (ptrdiff_t i = i0; i < i1; i++)
            for (ptrdiff_t j = j0; j < j1; j++) {
                toff[nt] = ((n * P->H + ihb + i * P->dh) * P->W + iwb + j * P->dw) * C;
                tw[nt++] = (i * P->KW + j) * Cp;
            }
        for (ptrdiff_t c0 = 0; c0 < C; c0 += 32) {
            const ptrdiff_t len = C - c0 < 32 ? C - c0 : 32;
            const __mmask32 km = len == 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << len) - 1u);
#define FXC_DW_PRODUCT(t)                                                                           \
    _mm512_mullo_epi16(_mm512_maskz_sub_epi16(km, _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(km, x + toff[t] + c0)), zx), \
                       _mm512_loadu_si512((const void *)(w16 + tw[t] + c0)))
            __m512i lo, hi;
            if (EXACT) {
                lo = P->bias ? _mm512_maskz_loadu_epi32((__mmask16)(km & 0xFFFF), P->bias + c0) : _mm512_setzero_si512();
                hi = P->bias ? _mm512_maskz_loadu_epi32((__mmask16)(km >> 16), P->bias + c0 + 16) : _mm512_setzero_si512();
                for (ptrdiff_t t = 0; t < nt; t++) {
                    const __m512i pr = FXC_DW_PRODUCT(t);
                    lo = _mm512_add_epi32(lo, _mm512_cvtepi16_epi32(_mm512_castsi512_si256(pr)));
                    hi = _mm512_add_epi32(hi, _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(pr, 1)));
                }
            } else {
                __m512i acc = (P->bias && P->bias_init) ? _mm512_loadu_si512((const void *)(b16 + c0))
                                                        : _mm512_setzero_si512();
                __m512i ov = _mm512_setzero_si512();
                for (ptrdiff_t t = 0; t < nt; t++) {
                    const __m512i pr = FXC_DW_PRODUCT(t);
                    FXC_P16_STEP(acc, ov, pr)
                }
                if (P->bias && !P->bias_init) {
                    const __m512i b = _mm512_loadu_si512((const void *)(b16 + c0));
                    FXC_P16_STEP(acc, ov, b)
                }
                ovsum = _mm512_add_epi32(ovsum, _mm512_madd_epi16(ov, one));
                lo = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(acc));
                hi = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(acc, 1));
            }
#undef FXC_DW_PRODUCT
            _mm512_store_si512((void *)v32, lo);
            _mm512_store_si512((void *)(v32 + 16), hi);
            fxc_emit(P, v32, m, c0, len, acc_out, out, &cv);
        }
      }
    }
    fxc_cnt_flush(&cv, counts);
    return total + fxc_sum_epi32(ovsum);
}

/* Depthwise with C <= 16: two pixels per register (lanes 0..15 pixel m, 16..31 pixel m + 1).  Every tap is
 * visited; a tap outside the image reads zx (from zxbuf), a zero product, which neither changes an
 * accumulator in range nor overflows, so the per-add results and counts are those of skipping it.
 * w2 [T][32]: the tap's C weights twice (zero padded); b2 [32]: the 16-bit bias twice (per-add). */
FXC_T512 static FXC_INL int64_t fxc_dw_pair_body(const fxc_params *P, const int8_t *x, const int16_t *w2,
                                                 const int16_t *b2, ptrdiff_t T, int64_t *acc_out, int8_t *out,
                                                 int64_t *counts, const int8_t **tp, const int8_t *zxbuf,
                                                 int EXACT, int SAT)
{
    const ptrdiff_t C = P->C, M = P->N * P->OH * P->OW;
    const __m512i one = _mm512_set1_epi16(1), zx = _mm512_set1_epi16((int16_t)P->x_zp);
    const __mmask16 kc = (__mmask16)((1u << C) - 1u);
    const __mmask32 km = (__mmask32)kc | ((__mmask32)kc << 16);
    __m512i ovsum = _mm512_setzero_si512();
    int64_t total = 0;
    const ptrdiff_t flush = ((ptrdiff_t)1 << 30) / (2 * (T + 1)) > 2 ? ((ptrdiff_t)1 << 30) / (2 * (T + 1)) : 2;
    fxc_cnt cv;
    fxc_cnt_init(&cv);
    int32_t v32[32] __attribute__((aligned(64)));
    const __m512i b32 = P->bias && EXACT ? _mm512_maskz_loadu_epi32(kc, P->bias) : _mm512_setzero_si512();
    for (ptrdiff_t m = 0; m < M; m += 2) {
        if ((m / 2) % flush == flush - 1) {
            total += fxc_sum_epi32(ovsum);
            ovsum = _mm512_setzero_si512();
        }
        const int two = m + 1 < M;
        for (int h = 0; h < 2; h++) {               /* the taps of pixels m and m + 1 (or m again) */
            const ptrdiff_t mm = m + (h && two), n = mm / (P->OH * P->OW), r = mm % (P->OH * P->OW);
            const ptrdiff_t ihb = (r / P->OW) * P->sh - P->pt, iwb = (r % P->OW) * P->sw - P->pl;
            for (ptrdiff_t i = 0, t = 0; i < P->KH; i++)
                for (ptrdiff_t j = 0; j < P->KW; j++, t++) {
                    const ptrdiff_t ih = ihb + i * P->dh, iw = iwb + j * P->dw;
                    tp[h * T + t] = (ih < 0 || ih >= P->H || iw < 0 || iw >= P->W) ? zxbuf
                                    : x + ((n * P->H + ih) * P->W + iw) * C;
                }
        }
        __m512i lo, hi;
#define FXC_DW2_PRODUCT(t)                                                                          \
    _mm512_mullo_epi16(_mm512_maskz_sub_epi16(km, _mm512_cvtepi8_epi16(_mm256_inserti128_si256(      \
        _mm256_castsi128_si256(_mm_maskz_loadu_epi8(kc, tp[t])), _mm_maskz_loadu_epi8(kc, tp[T + t]), 1)), zx), \
        _mm512_loadu_si512((const void *)(w2 + (t) * 32)))
        if (EXACT) {
            lo = b32;
            hi = b32;
            for (ptrdiff_t t = 0; t < T; t++) {
                const __m512i pr = FXC_DW2_PRODUCT(t);
                lo = _mm512_add_epi32(lo, _mm512_cvtepi16_epi32(_mm512_castsi512_si256(pr)));
                hi = _mm512_add_epi32(hi, _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(pr, 1)));
            }
        } else {
            __m512i acc = (P->bias && P->bias_init) ? _mm512_loadu_si512((const void *)b2) : _mm512_setzero_si512();
            __m512i ov = _mm512_setzero_si512();
            for (ptrdiff_t t = 0; t < T; t++) {
                const __m512i pr = FXC_DW2_PRODUCT(t);
                FXC_P16_STEP(acc, ov, pr)
            }
            if (P->bias && !P->bias_init) {
                const __m512i b = _mm512_loadu_si512((const void *)b2);
                FXC_P16_STEP(acc, ov, b)
            }
            if (!two)                                 /* pixel m again in the upper half: not counted */
                ov = _mm512_maskz_mov_epi16((__mmask32)0xFFFF, ov);
            ovsum = _mm512_add_epi32(ovsum, _mm512_madd_epi16(ov, one));
            lo = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(acc));
            hi = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(acc, 1));
        }
#undef FXC_DW2_PRODUCT
        _mm512_store_si512((void *)v32, lo);
        _mm512_store_si512((void *)(v32 + 16), hi);
        fxc_emit(P, v32, m, 0, C, acc_out, out, &cv);
        if (two)
            fxc_emit(P, v32 + 16, m + 1, 0, C, acc_out, out, &cv);
    }
    fxc_cnt_flush(&cv, counts);
    return total + fxc_sum_epi32(ovsum);
}

FXC_T512 static int64_t fxc_dw_pair(const fxc_params *P, const int8_t *x, const int16_t *w2, const int16_t *b2,
                                    ptrdiff_t T, int64_t *acc_out, int8_t *out, int64_t *counts,
                                    const int8_t **tp, const int8_t *zxbuf)
{
    if (P->mode == FXC_EXACT)
        return fxc_dw_pair_body(P, x, w2, b2, T, acc_out, out, counts, tp, zxbuf, 1, 0);
    if (P->mode == FXC_SAT)
        return fxc_dw_pair_body(P, x, w2, b2, T, acc_out, out, counts, tp, zxbuf, 0, 1);
    return fxc_dw_pair_body(P, x, w2, b2, T, acc_out, out, counts, tp, zxbuf, 0, 0);
}

FXC_T512 static int64_t fxc_dw_avx512(const fxc_params *P, const int8_t *x, const int16_t *w16,
                                      const int16_t *b16, ptrdiff_t T, ptrdiff_t Cp, int64_t *acc_out, int8_t *out,
                                      int64_t *counts, ptrdiff_t *toff, ptrdiff_t *tw)
{
    if (P->mode == FXC_EXACT)
        return fxc_dw_body(P, x, w16, b16, T, Cp, acc_out, out, counts, toff, tw, 1, 0);
    if (P->mode == FXC_SAT)
        return fxc_dw_body(P, x, w16, b16, T, Cp, acc_out, out, counts, toff, tw, 0, 1);
    return fxc_dw_body(P, x, w16, b16, T, Cp, acc_out, out, counts, toff, tw, 0, 0);
}

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_DW_H */
