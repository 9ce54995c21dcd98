/*
 * fxpsim/datapath/_conv_int8_avx512.h -- the AVX-512 kernels of _conv_int8.h (included by it when GCC
 * function multi-versioning is available; each function carries its own target attribute and runs only
 * after fxc_have_avx512() said yes).  Same results as the portable kernel, bit for bit (tests compare them).
 */
#ifndef FXPSIM_CONV_INT8_AVX512_H
#define FXPSIM_CONV_INT8_AVX512_H
#if FXC_AVX512

#define FXC_T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define FXC_INL __attribute__((always_inline)) inline

/* The output stage of 8 accumulators (int64 lanes) of channels o.. (mask k): as fxc_requant; the lanes
 * above act_max / below act_min are counted in na / nb (int64 lanes). */
FXC_T512 static FXC_INL void fxc_rq8(const fxc_params *P, __m512i a, ptrdiff_t o, __mmask8 k, int8_t *dst,
                                     __m512i *na, __m512i *nb)
{
    const __m512i m = _mm512_maskz_loadu_epi64(k, P->rq_mult + o);
    const __m512i v = P->mult32 ? _mm512_mul_epi32(a, m) : _mm512_mullo_epi64(a, m);
    __m512i y = _mm512_add_epi64(v, _mm512_maskz_loadu_epi64(k, P->rq_add + o));
    if (P->rq_nudge) {
        const __mmask8 neg = _mm512_cmplt_epi64_mask(_mm512_add_epi64(v, _mm512_set1_epi64(INT64_C(1) << 30)),
                                                     _mm512_setzero_si512());
        y = _mm512_mask_add_epi64(y, neg, y, _mm512_maskz_loadu_epi64(k, P->rq_nudge + o));
    }
    y = _mm512_srav_epi64(y, _mm512_maskz_loadu_epi64(k, P->rq_shift + o));
    const __m512i lo = _mm512_set1_epi64(P->lo), hi = _mm512_set1_epi64(P->hi), one = _mm512_set1_epi64(1);
    *na = _mm512_mask_add_epi64(*na, _mm512_mask_cmpgt_epi64_mask(k, y, hi), *na, one);
    *nb = _mm512_mask_add_epi64(*nb, _mm512_mask_cmplt_epi64_mask(k, y, lo), *nb, one);
    y = _mm512_min_epi64(_mm512_max_epi64(y, lo), hi);
    _mm512_mask_cvtepi64_storeu_epi8(dst, k, y);
}

/* The output stage of 16 accumulators (int32 lanes) of channels 16g.. (mask k) on 32-bit lanes: even and
 * odd lanes each through one vpmuldq (int64 products), then back to int32 (every y fits int32, checked by
 * fxc_run); counts in na / nb (int32 lanes). */
FXC_T512 static FXC_INL void fxc_rq16(const fxc_params *P, __m512i a, ptrdiff_t g, __mmask16 k, int8_t *dst,
                                      __m512i *na, __m512i *nb)
{
    const int64_t *c = P->rq16 + g * 64;
    const __m512i ve = _mm512_mul_epi32(a, _mm512_loadu_si512((const void *)c));
    const __m512i vo = _mm512_mul_epi32(_mm512_srli_epi64(a, 32), _mm512_loadu_si512((const void *)(c + 8)));
    __m512i ye = _mm512_add_epi64(ve, _mm512_loadu_si512((const void *)(c + 16)));
    __m512i yo = _mm512_add_epi64(vo, _mm512_loadu_si512((const void *)(c + 24)));
    if (P->rq_nudge) {
        const __m512i h = _mm512_set1_epi64(INT64_C(1) << 30), z = _mm512_setzero_si512();
        ye = _mm512_mask_add_epi64(ye, _mm512_cmplt_epi64_mask(_mm512_add_epi64(ve, h), z), ye,
                                   _mm512_loadu_si512((const void *)(c + 32)));
        yo = _mm512_mask_add_epi64(yo, _mm512_cmplt_epi64_mask(_mm512_add_epi64(vo, h), z), yo,
                                   _mm512_loadu_si512((const void *)(c + 40)));
    }
    ye = _mm512_srav_epi64(ye, _mm512_loadu_si512((const void *)(c + 48)));
    yo = _mm512_srav_epi64(yo, _mm512_loadu_si512((const void *)(c + 56)));
    __m512i y = _mm512_mask_blend_epi32((__mmask16)0xAAAA, ye, _mm512_slli_epi64(yo, 32));
    const __m512i lo = _mm512_set1_epi32(P->lo), hi = _mm512_set1_epi32(P->hi), one = _mm512_set1_epi32(1);
    *na = _mm512_mask_add_epi32(*na, _mm512_mask_cmpgt_epi32_mask(k, y, hi), *na, one);
    *nb = _mm512_mask_add_epi32(*nb, _mm512_mask_cmplt_epi32_mask(k, y, lo), *nb, one);
    y = _mm512_min_epi32(_mm512_max_epi32(y, lo), hi);
    _mm512_mask_cvtepi32_storeu_epi8(dst, k, y);
}

/* Clip counters of a kernel: above / below act_max / act_min in int32 (fxc_rq16) and int64 (fxc_rq8) lanes,
 * reduced once at the end (fxc_cnt_flush). */
typedef struct { __m512i a32, b32, a64, b64; } fxc_cnt;

FXC_T512 static FXC_INL void fxc_cnt_init(fxc_cnt *c)
{
    c->a32 = c->b32 = c->a64 = c->b64 = _mm512_setzero_si512();
}

FXC_T512 static FXC_INL void fxc_cnt_flush(const fxc_cnt *c, int64_t *counts)
{
    const __m512i a = _mm512_add_epi64(_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(c->a32)),
                                                        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(c->a32, 1))), c->a64);
    const __m512i b = _mm512_add_epi64(_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(c->b32)),
                                                        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(c->b32, 1))), c->b64);
    counts[1] += _mm512_reduce_add_epi64(a);
    counts[2] += _mm512_reduce_add_epi64(b);
}

/* Emit len (<= 64) final accumulators v of pixel m, channels o0.. (o0 a multiple of 16): store them
 * (acc_out) and/or their output codes (out; the clips counted in cv). */
FXC_T512 static FXC_INL void fxc_emit(const fxc_params *P, const int32_t *v, ptrdiff_t m, ptrdiff_t o0,
                                      ptrdiff_t len, int64_t *acc_out, int8_t *out, fxc_cnt *cv)
{
    const ptrdiff_t O = P->O;
    if (P->rq16) {
        for (ptrdiff_t o = 0; o < len; o += 16) {
            const ptrdiff_t l = len - o < 16 ? len - o : 16;
            const __mmask16 k = (__mmask16)((1u << l) - 1u);
            const __m512i a = _mm512_maskz_loadu_epi32(k, v + o);
            if (acc_out) {
                int64_t *d = acc_out + m * O + o0 + o;
                const __m512i a0 = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(a));
                const __m512i a1 = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(a, 1));
                if (l == 16 && ((uintptr_t)d & 63) == 0) {   /* whole cache lines: streaming stores (the
                                                                 accumulators are not read back here) */
                    _mm512_stream_si512((void *)d, a0);
                    _mm512_stream_si512((void *)(d + 8), a1);
                } else {
                    _mm512_mask_storeu_epi64(d, (__mmask8)(k & 0xFF), a0);
                    if (l > 8)
                        _mm512_mask_storeu_epi64(d + 8, (__mmask8)(k >> 8), a1);
                }
            }
            if (out)
                fxc_rq16(P, a, (o0 + o) / 16, k, out + m * O + o0 + o, &cv->a32, &cv->b32);
        }
        return;
    }
    for (ptrdiff_t o = 0; o < len; o += 8) {
        const ptrdiff_t l = len - o < 8 ? len - o : 8;
        const __mmask8 k = (__mmask8)((1u << l) - 1u);
        const __m512i a = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(k, v + o));
        if (acc_out) {
            int64_t *d = acc_out + m * O + o0 + o;
            if (l == 8 && ((uintptr_t)d & 63) == 0)
                _mm512_stream_si512((void *)d, a);
            else
                _mm512_mask_storeu_epi64(d, k, a);
        }
        if (out)
            fxc_rq8(P, a, o0 + o, k, out + m * O + o0 + o, &cv->a64, &cv->b64);
    }
}

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

/* One per-add step on 32 int16 lanes: s = saturating, w = wrapping sum; a lane overflowed iff they differ. */
#define FXC_P16_STEP(A, OV, P_)                                                                     \
    { const __m512i s_ = _mm512_adds_epi16(A, P_), w_ = _mm512_add_epi16(A, P_);                    \
      OV = _mm512_mask_add_epi16(OV, _mm512_cmpneq_epi16_mask(s_, w_), OV, one); A = SAT ? s_ : w_; }

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
            total += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(ovsum)),
                                                              _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ovsum, 1))));
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
    return total + _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(ovsum)),
                                                            _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ovsum, 1))));
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
            total += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(ovsum)),
                                                              _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ovsum, 1))));
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
    return total + _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(ovsum)),
                                                            _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(ovsum, 1))));
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
#undef FXC_P16_STEP

/* Padded copies of x for the AVX-512 kernels, [N][Hp][Wp][Cs]: rows of whole pixels, vectorised.
 * fxc_pad_i8: raw codes, `pad` outside the image, channels >= C zero (Cs >= C);
 * fxc_pad_i16: x - zx, 0 outside (Cs = C). */
FXC_CLONES static void fxc_pad_i8(const fxc_params *P, const int8_t *x, int8_t *dst, ptrdiff_t Hp, ptrdiff_t Wp,
                                  ptrdiff_t Cs, int8_t pad)
{
    const ptrdiff_t C = P->C;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t h = 0; h < Hp; h++) {
            int8_t *d = dst + (n * Hp + h) * Wp * Cs;
            const ptrdiff_t ih = h - P->pt;
            for (ptrdiff_t w = 0; w < Wp; w++) {
                const ptrdiff_t iw = w - P->pl;
                int8_t *dp = d + w * Cs;
                if (ih < 0 || ih >= P->H || iw < 0 || iw >= P->W) {
                    memset(dp, pad, (size_t)C);
                } else {
                    memcpy(dp, x + ((n * P->H + ih) * P->W + iw) * C, (size_t)C);
                }
                if (Cs > C)
                    memset(dp + C, 0, (size_t)(Cs - C));
            }
        }
}

FXC_CLONES static void fxc_pad_i16(const fxc_params *P, const int8_t *x, int16_t *dst, ptrdiff_t Hp, ptrdiff_t Wp)
{
    const ptrdiff_t C = P->C;
    const int16_t zx = (int16_t)P->x_zp;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t h = 0; h < Hp; h++) {
            int16_t *d = dst + (n * Hp + h) * Wp * C;
            const ptrdiff_t ih = h - P->pt;
            if (ih < 0 || ih >= P->H) {
                memset(d, 0, sizeof(int16_t) * (size_t)(Wp * C));
                continue;
            }
            /* columns w = pl + iw hold pixel iw for 0 <= iw < W */
            const ptrdiff_t w0 = P->pl < Wp ? P->pl : Wp;
            const ptrdiff_t w1 = P->pl + P->W < Wp ? P->pl + P->W : Wp;
            memset(d, 0, sizeof(int16_t) * (size_t)(w0 * C));
            const int8_t *src = x + (n * P->H + ih) * P->W * C;
            int16_t *dm = d + w0 * C;
            const ptrdiff_t len = (w1 - w0) * C;
            for (ptrdiff_t e = 0; e < len; e++)
                dm[e] = (int16_t)(src[e] - zx);
            memset(d + w1 * C, 0, sizeof(int16_t) * (size_t)((Wp - w1) * C));
        }
}

/*
 * The fused layer.  x [N][H][W][C] int8; w: dense [O][KH][KW][C], depthwise [KH][KW][C] (TFLite, int8);
 * acc_out [M][O] int64 or NULL; out [M][O] int8 or NULL (needs rq_mult); counts[3] += overflows, above,
 * below.  Returns 0; 1 when the layer needs per-add fitting and peradd_ok is 0 (nothing done); -1 when memory
 * ran out (nothing counted then).
 */
/* base[m]: offset of pixel m's window (its top-left tap) in an [N][Hb][Wb][Cs] buffer. */
static void fxc_bases(const fxc_params *P, ptrdiff_t *base, ptrdiff_t Hb, ptrdiff_t Wb, ptrdiff_t Cs)
{
    ptrdiff_t m = 0;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t p = 0; p < P->OH; p++)
            for (ptrdiff_t q = 0; q < P->OW; q++)
                base[m++] = ((n * Hb + p * P->sh) * Wb + q * P->sw) * Cs;
}

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_H */
