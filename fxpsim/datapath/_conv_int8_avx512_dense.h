/*
 * fxpsim/datapath/_conv_int8_avx512_dense.h -- the AVX-512 dense (CONV_2D / FULLY_CONNECTED) kernels: exact sums
 * by VNNI (fxc_dense_vnni) and per-add W = 16 sums on int16 lanes (fxc_dense_p16).
 */
#ifndef FXPSIM_CONV_INT8_AVX512_DENSE_H
#define FXPSIM_CONV_INT8_AVX512_DENSE_H
#if FXC_AVX512

#include "_conv_int8_avx512_out.h"

/* Exact dense sums with vpdpbusd over MR pixels x NV vectors of 16 channels.  xb [..][C4] int8 (raw codes;
 * spatial padding holds zx; channels >= C anything: their weights are 0), flipped to u8 by ^0x80 (x + 128);
 * slab [T*C4/4][64][4] s8. */
FXC_T512 static FXC_INL void fxc_vnni_block(const int8_t *xb, const int8_t *slab, const ptrdiff_t *bm,
                                            const ptrdiff_t *tapoff, ptrdiff_t T, ptrdiff_t Q, int MR, int NV,
                                            int32_t *tmp /* [MR][64] */)
{
    __m512i acc[8][4];
    const __m512i flip = _mm512_set1_epi32((int32_t)0x80808080u);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_si512();
    const int8_t *wk = slab;
    for (ptrdiff_t t = 0; t < T; t++) {
        const int8_t *xr[8];
        for (int r = 0; r < MR; r++)
            xr[r] = xb + bm[r] + tapoff[t];
        for (ptrdiff_t cq = 0; cq < Q; cq++, wk += 256) {
            __m512i w[4];
            for (int v = 0; v < NV; v++)
                w[v] = _mm512_loadu_si512((const void *)(wk + 64 * v));
            for (int r = 0; r < MR; r++) {
                int32_t q4;
                memcpy(&q4, xr[r] + 4 * cq, 4);
                const __m512i a = _mm512_xor_si512(_mm512_set1_epi32(q4), flip);
                for (int v = 0; v < NV; v++)
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], a, w[v]);
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++)
            _mm512_storeu_si512((void *)(tmp + r * 64 + 16 * v), acc[r][v]);
}

#define FXC_VNNI_CASE(MR_, NV_) fxc_vnni_block(xb, slab, b8, tapoff, T, Q, MR_, NV_, tmp)

/* corr[o] = (zx + 128) * sum_k w[o,k] - bias[o] (mod 2^32); base[m]: pixel m's window in xb. */
FXC_T512 static void fxc_dense_vnni(const fxc_params *P, const int8_t *xb, const int8_t *wq, const int32_t *corr,
                                    const ptrdiff_t *base, const ptrdiff_t *tapoff, ptrdiff_t T, ptrdiff_t Q,
                                    int64_t *acc_out, int8_t *out, int64_t *counts)
{
    const ptrdiff_t O = P->O, M = P->N * P->OH * P->OW, nob = (O + 63) / 64;
    int32_t tmp[8 * 64] __attribute__((aligned(64)));
    fxc_cnt cv;
    fxc_cnt_init(&cv);
    const int MR = O <= 32 ? 8 : 4;
    for (ptrdiff_t m0 = 0; m0 < M; m0 += MR) {
        const ptrdiff_t mr = M - m0 < MR ? M - m0 : MR;
        ptrdiff_t b8[8];
        for (int r = 0; r < MR; r++)
            b8[r] = base[m0 + (r < mr ? r : mr - 1)];
        for (ptrdiff_t ob = 0; ob < nob; ob++) {
            const ptrdiff_t o0 = ob * 64, len = O - o0 < 64 ? O - o0 : 64;
            const int nv = (int)((len + 15) / 16);
            const int8_t *slab = wq + ob * T * Q * 256;
            if (MR == 8) {
                if (nv == 1) FXC_VNNI_CASE(8, 1); else FXC_VNNI_CASE(8, 2);
            } else {
                switch (nv) {
                case 1: FXC_VNNI_CASE(4, 1); break;
                case 2: FXC_VNNI_CASE(4, 2); break;
                case 3: FXC_VNNI_CASE(4, 3); break;
                default: FXC_VNNI_CASE(4, 4); break;
                }
            }
            for (ptrdiff_t r = 0; r < mr; r++) {
                int32_t *v = tmp + r * 64;
                for (int j = 0; j < nv; j++) {   /* mod 2^32: the true value fits int32 */
                    const __m512i c = _mm512_loadu_si512((const void *)(corr + o0 + 16 * j));
                    _mm512_storeu_si512((void *)(v + 16 * j), _mm512_sub_epi32(_mm512_loadu_si512((const void *)(v + 16 * j)), c));
                }
                fxc_emit(P, v, m0 + r, o0, len, acc_out, out, &cv);
            }
        }
    }
    fxc_cnt_flush(&cv, counts);
}

/* Per-add W = 16 dense sums: xs [..][C] int16 = x - zx (padding 0), or (x8) the int8 input itself when no
 * window leaves it; slab [K][64] int16, b16 [64] bias. */
FXC_T512 static FXC_INL int64_t fxc_p16_block(const int16_t *xs, const int8_t *x8, int16_t zx8,
                                              const int16_t *slab, const ptrdiff_t *b4,
                                              const ptrdiff_t *tapoff, ptrdiff_t T, ptrdiff_t C, int NV,
                                              int SAT, const int16_t *binit, const int16_t *bafter,
                                              int16_t *tmp /* [4][64] */, ptrdiff_t mr)
{
    __m512i acc[4][2], ov[4][2];
    const __m512i one = _mm512_set1_epi16(1);
    for (int v = 0; v < NV; v++) {
        const __m512i b = binit ? _mm512_loadu_si512((const void *)(binit + 32 * v)) : _mm512_setzero_si512();
        for (int r = 0; r < 4; r++) {
            acc[r][v] = b;
            ov[r][v] = _mm512_setzero_si512();
        }
    }
    const int16_t *wk = slab;
    for (ptrdiff_t t = 0; t < T; t++) {
        const ptrdiff_t o0 = b4[0] + tapoff[t], o1 = b4[1] + tapoff[t], o2 = b4[2] + tapoff[t], o3 = b4[3] + tapoff[t];
        for (ptrdiff_t c = 0; c < C; c++, wk += 64) {
            __m512i a0, a1, a2, a3;
            if (x8) {
                a0 = _mm512_set1_epi16((int16_t)(x8[o0 + c] - zx8)); a1 = _mm512_set1_epi16((int16_t)(x8[o1 + c] - zx8));
                a2 = _mm512_set1_epi16((int16_t)(x8[o2 + c] - zx8)); a3 = _mm512_set1_epi16((int16_t)(x8[o3 + c] - zx8));
            } else {
                a0 = _mm512_set1_epi16(xs[o0 + c]); a1 = _mm512_set1_epi16(xs[o1 + c]);
                a2 = _mm512_set1_epi16(xs[o2 + c]); a3 = _mm512_set1_epi16(xs[o3 + c]);
            }
            for (int v = 0; v < NV; v++) {
                const __m512i w = _mm512_loadu_si512((const void *)(wk + 32 * v));
                const __m512i p0 = _mm512_mullo_epi16(a0, w), p1 = _mm512_mullo_epi16(a1, w);
                const __m512i p2 = _mm512_mullo_epi16(a2, w), p3 = _mm512_mullo_epi16(a3, w);
                FXC_P16_STEP(acc[0][v], ov[0][v], p0)
                FXC_P16_STEP(acc[1][v], ov[1][v], p1)
                FXC_P16_STEP(acc[2][v], ov[2][v], p2)
                FXC_P16_STEP(acc[3][v], ov[3][v], p3)
            }
        }
    }
    if (bafter) {
        for (int v = 0; v < NV; v++) {
            const __m512i b = _mm512_loadu_si512((const void *)(bafter + 32 * v));
            for (int r = 0; r < 4; r++)
                FXC_P16_STEP(acc[r][v], ov[r][v], b)
        }
    }
    int64_t total = 0;
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < NV; v++) {
            _mm512_storeu_si512((void *)(tmp + r * 64 + 32 * v), acc[r][v]);
            if (r < mr)   /* padded lanes have zero weights and bias: they never overflow */
                total += _mm512_reduce_add_epi32(_mm512_madd_epi16(ov[r][v], one));
        }
    return total;
}

FXC_T512 static int64_t fxc_dense_p16(const fxc_params *P, const int16_t *xs, const int8_t *x8, const int16_t *w16,
                                      const int16_t *b16, const ptrdiff_t *base, const ptrdiff_t *tapoff,
                                      ptrdiff_t T, int64_t *acc_out, int8_t *out, int64_t *counts)
{
    const ptrdiff_t O = P->O, M = P->N * P->OH * P->OW, nob = (O + 63) / 64, K = T * P->C;
    int16_t tmp[4 * 64] __attribute__((aligned(64)));
    int32_t v32[64] __attribute__((aligned(64)));
    int64_t total = 0;
    fxc_cnt cv;
    fxc_cnt_init(&cv);
    for (ptrdiff_t m0 = 0; m0 < M; m0 += 4) {
        const ptrdiff_t mr = M - m0 < 4 ? M - m0 : 4;
        ptrdiff_t b4[4];
        for (int r = 0; r < 4; r++)
            b4[r] = base[m0 + (r < mr ? r : mr - 1)];
        for (ptrdiff_t ob = 0; ob < nob; ob++) {
            const ptrdiff_t o0 = ob * 64, len = O - o0 < 64 ? O - o0 : 64;
            const int16_t *slab = w16 + ob * K * 64;
            const int16_t *bi = (P->bias && P->bias_init) ? b16 + o0 : NULL;
            const int16_t *ba = (P->bias && !P->bias_init) ? b16 + o0 : NULL;
            const int nv = len > 32 ? 2 : 1;
            if (P->mode == FXC_SAT)
                total += nv == 2 ? fxc_p16_block(xs, x8, (int16_t)P->x_zp, slab, b4, tapoff, T, P->C, 2, 1, bi, ba, tmp, mr)
                                 : fxc_p16_block(xs, x8, (int16_t)P->x_zp, slab, b4, tapoff, T, P->C, 1, 1, bi, ba, tmp, mr);
            else
                total += nv == 2 ? fxc_p16_block(xs, x8, (int16_t)P->x_zp, slab, b4, tapoff, T, P->C, 2, 0, bi, ba, tmp, mr)
                                 : fxc_p16_block(xs, x8, (int16_t)P->x_zp, slab, b4, tapoff, T, P->C, 1, 0, bi, ba, tmp, mr);
            for (ptrdiff_t r = 0; r < mr; r++) {
                for (int j = 0; j < 2 * nv; j++)
                    _mm512_storeu_si512((void *)(v32 + 16 * j),
                                        _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(tmp + r * 64 + 16 * j))));
                fxc_emit(P, v32, m0 + r, o0, len, acc_out, out, &cv);
            }
        }
    }
    fxc_cnt_flush(&cv, counts);
    return total;
}

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_DENSE_H */
