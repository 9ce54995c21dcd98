/*
 * fxpsim/datapath/_conv_int8_avx512_out.h -- what the AVX-512 kernels of _conv_int8.h share: the output stage
 * (requantization of 8 or 16 accumulators, clip counters, fxc_emit) and the per-add step on int16 lanes.
 */
#ifndef FXPSIM_CONV_INT8_AVX512_OUT_H
#define FXPSIM_CONV_INT8_AVX512_OUT_H
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
typedef struct { __m512i a32, b32, a64, b64; int64_t af, bf; } fxc_cnt;

FXC_T512 static FXC_INL void fxc_cnt_init(fxc_cnt *c)
{
    c->a32 = c->b32 = c->a64 = c->b64 = _mm512_setzero_si512();
    c->af = c->bf = 0;          /* the float output stage's (fxc_requant_f32) */
}

FXC_T512 static FXC_INL void fxc_cnt_flush(const fxc_cnt *c, int64_t *counts)
{
    const __m512i a = _mm512_add_epi64(_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(c->a32)),
                                                        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(c->a32, 1))), c->a64);
    const __m512i b = _mm512_add_epi64(_mm512_add_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(c->b32)),
                                                        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(c->b32, 1))), c->b64);
    counts[1] += _mm512_reduce_add_epi64(a) + c->af;
    counts[2] += _mm512_reduce_add_epi64(b) + c->bf;
}

/* Emit len (<= 64) final accumulators v of pixel m, channels o0.. (o0 a multiple of 16): store them
 * (acc_out) and/or their output codes (out; the clips counted in cv). */
FXC_T512 static FXC_INL void fxc_emit(const fxc_params *P, const int32_t *v, ptrdiff_t m, ptrdiff_t o0,
                                      ptrdiff_t len, int64_t *acc_out, int8_t *out, fxc_cnt *cv)
{
    const ptrdiff_t O = P->O;
    if (P->rq_fscale) {         /* the float output stage: fxc_requant_f32 on 16 lanes (the same float32
                                   operations in the same order; max/min pick the bound where the scalar
                                   comparisons keep an equal value, the same number) */
        if (acc_out)
            for (ptrdiff_t o = 0; o < len; o++)
                acc_out[m * O + o0 + o] = v[o];
        if (out) {
            const __m512 magic = _mm512_set1_ps(12582912.0f);           /* 1.5 * 2^23 */
            const __m512 flo = _mm512_set1_ps((float)(P->lo - P->rq_zp - 1));
            const __m512 fhi = _mm512_set1_ps((float)(P->hi - P->rq_zp + 1));
            const __m512i lo = _mm512_set1_epi32(P->lo), hi = _mm512_set1_epi32(P->hi);
            const __m512i z = _mm512_set1_epi32(P->rq_zp);
            int64_t na = 0, nb = 0;
            for (ptrdiff_t o = 0; o < len; o += 16) {
                const ptrdiff_t l = len - o < 16 ? len - o : 16;
                const __mmask16 k = (__mmask16)((1u << l) - 1u);
                const __m512 s = _mm512_maskz_loadu_ps(k, P->rq_fscale + o0 + o);
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k, v + o)), s);
                f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
                const __m512i y = _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(f, magic), magic)), z);
                na += __builtin_popcount((unsigned)_mm512_mask_cmpgt_epi32_mask(k, y, hi));
                nb += __builtin_popcount((unsigned)_mm512_mask_cmplt_epi32_mask(k, y, lo));
                _mm512_mask_cvtepi32_storeu_epi8(out + m * O + o0 + o, k,
                                                 _mm512_max_epi32(_mm512_min_epi32(y, hi), lo));
            }
            cv->af += na;
            cv->bf += nb;
        }
        return;
    }
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

/* One per-add step on 32 int16 lanes: s = saturating, w = wrapping sum; a lane overflowed iff they differ. */
#define FXC_P16_STEP(A, OV, P_)                                                                     \
    { const __m512i s_ = _mm512_adds_epi16(A, P_), w_ = _mm512_add_epi16(A, P_);                    \
      OV = _mm512_mask_add_epi16(OV, _mm512_cmpneq_epi16_mask(s_, w_), OV, one); A = SAT ? s_ : w_; }

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_OUT_H */
