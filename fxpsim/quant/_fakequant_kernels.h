/*
 * fxpsim/quant/_fakequant_kernels.h -- the element loops of TensorFlow's per-tensor fake quantization
 * (forward, gradient, and both in one pass), in plain C for _fakequant.pyx.
 *
 * Every step is one float32 operation in TensorFlow's order (the formulas are in _fakequant.pyx's
 * docstring); floating-point contraction is off for every function here, so ``a * b - c`` rounds twice on
 * every CPU, with or without FMA units.  GCC may assume no FP traps (``no-trapping-math``, which changes no
 * result) so that the selects vectorise.
 *
 * Portability: no -march flag.  With GCC >= 11 on x86-64 Linux the loops are compiled three times
 * (x86-64-v4 = AVX-512, x86-64-v3 = AVX2, baseline) by function multi-versioning, and the loader picks the
 * variant for the CPU; the arithmetic is the same IEEE float32 operations in every variant (no contraction,
 * no reassociation), so the bits never depend on the variant.  The gradient's two sums accumulate in eight
 * double lanes, element i feeding lane i mod 8, whatever the variant (one AVX-512 register of doubles).
 */
#ifndef FXPSIM_FAKEQUANT_KERNELS_H
#define FXPSIM_FAKEQUANT_KERNELS_H

#include <float.h>
#include <math.h>
#include <stddef.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#define FXQ_OPT
#elif defined(__GNUC__)
#define FXQ_OPT __attribute__((optimize("fp-contract=off", "no-trapping-math")))
#else
#define FXQ_OPT
#endif

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__) \
    && !defined(FXPSIM_NO_CLONES)
#define FXQ_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FXQ_CLONES
#endif

#define FXQ_LANES 8          /* double accumulators of the gradient's sums */
#define FXQ_CHUNK 16384      /* elements per step of the one-pass kernel (its four 64 KiB slices stay in L2) */

/* floor() for |v| < 2^31: truncate, then step down (branch-free; vectorises without SSE4.1). */
static inline FXQ_OPT float fxq_floor_small(float v) {
    float t = (float)(int)v;
    return t - (float)(t > v);
}

/* x flushed to 0 when subnormal (TensorFlow runs with DAZ); NaN stays NaN. */
static inline FXQ_OPT float fxq_flush(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }

/* clamp(flush(x), lo, hi) - lo.  NaN becomes hi here (finite: the floor's cast stays defined); the caller
 * restores NaN. */
static inline FXQ_OPT float fxq_shifted(float x, float lo, float hi) {
    float v = fxq_flush(x);
    v = v < hi ? v : hi;
    v = v > lo ? v : lo;
    return v - lo;
}

/* One element: floor(t - quant_zero + 0.5) * scale with t = shifted / scale (divide) or shifted * inv_scale;
 * NaN for NaN.  (Never subnormal: the caller guarantees scale >= FLT_MIN.) */
static inline FXQ_OPT float fxq_one(float x, float lo, float hi, float scale, float inv, float qz, int divide) {
    float shifted = fxq_shifted(x, lo, hi);
    float t = divide ? shifted / scale : shifted * inv;
    float out = fxq_floor_small(t - qz + 0.5f) * scale;
    return x == x ? out : x;
}

/* out[i] := fake_quant(x[i]), i < n. */
static FXQ_CLONES FXQ_OPT void fxq_forward(const float *x, float *out, ptrdiff_t n, float lo,
                                           float hi, float scale, float inv, float qz, int divide) {
    ptrdiff_t i;
    if (divide) {
        for (i = 0; i < n; i++) out[i] = fxq_one(x[i], lo, hi, scale, inv, qz, 1);
    } else {
        for (i = 0; i < n; i++) out[i] = fxq_one(x[i], lo, hi, scale, inv, qz, 0);
    }
}

/* One gradient element i, feeding lane j = i mod 8. */
static inline FXQ_OPT void fxq_grad_one(float x, float g, float *dx, float lo, float hi, double *lb, double *la) {
    float v = fxq_flush(x);
    *dx = g * ((v >= lo && v <= hi) ? 1.0f : 0.0f);
    *lb += (double)(v < lo ? g : 0.0f);
    *la += (double)(v > hi ? g : 0.0f);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES)
#include <immintrin.h>
#define FXQ_HAVE_X86 1

/* 16 elements at a time: lanes 0..7 take elements 0..7 and then 8..15 (in that order, as the scalar loop). */
__attribute__((target("avx512f,avx512dq"))) FXQ_OPT
static ptrdiff_t fxq_backward_avx512(const float *dy, const float *x, float *dx, ptrdiff_t n, float lo, float hi,
                                     double *lb, double *la) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), one = _mm512_set1_ps(1.0f);
    const __m512 tiny = _mm512_set1_ps(FLT_MIN);
    __m512d sb = _mm512_loadu_pd(lb), sa = _mm512_loadu_pd(la);
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv = _mm512_loadu_ps(x + i), g = _mm512_loadu_ps(dy + i);
        __mmask16 sub = _mm512_cmp_ps_mask(_mm512_abs_ps(xv), tiny, _CMP_LT_OQ);
        __m512 v = _mm512_mask_mov_ps(xv, sub, _mm512_setzero_ps());
        __mmask16 in = _mm512_cmp_ps_mask(v, vlo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, vhi, _CMP_LE_OQ);
        _mm512_storeu_ps(dx + i, _mm512_mul_ps(g, _mm512_maskz_mov_ps(in, one)));
        __m512 gb = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, vlo, _CMP_LT_OQ), g);
        __m512 ga = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, vhi, _CMP_GT_OQ), g);
        sb = _mm512_add_pd(sb, _mm512_cvtps_pd(_mm512_castps512_ps256(gb)));
        sa = _mm512_add_pd(sa, _mm512_cvtps_pd(_mm512_castps512_ps256(ga)));
        sb = _mm512_add_pd(sb, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(gb), 1))));
        sa = _mm512_add_pd(sa, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ga), 1))));
    }
    _mm512_storeu_pd(lb, sb);
    _mm512_storeu_pd(la, sa);
    return i;
}

/* 8 elements at a time: lanes 0..3 and 4..7 in two registers. */
__attribute__((target("avx2"))) FXQ_OPT
static ptrdiff_t fxq_backward_avx2(const float *dy, const float *x, float *dx, ptrdiff_t n, float lo, float hi,
                                   double *lb, double *la) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), one = _mm256_set1_ps(1.0f);
    const __m256 tiny = _mm256_set1_ps(FLT_MIN), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256d b0 = _mm256_loadu_pd(lb), b1 = _mm256_loadu_pd(lb + 4);
    __m256d a0 = _mm256_loadu_pd(la), a1 = _mm256_loadu_pd(la + 4);
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i), g = _mm256_loadu_ps(dy + i);
        __m256 keep = _mm256_cmp_ps(_mm256_and_ps(xv, absmask), tiny, _CMP_NLT_UQ);    /* not subnormal (or NaN) */
        __m256 v = _mm256_and_ps(xv, keep);
        __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, vlo, _CMP_GE_OQ), _mm256_cmp_ps(v, vhi, _CMP_LE_OQ));
        _mm256_storeu_ps(dx + i, _mm256_mul_ps(g, _mm256_and_ps(in, one)));
        __m256 gb = _mm256_and_ps(_mm256_cmp_ps(v, vlo, _CMP_LT_OQ), g);
        __m256 ga = _mm256_and_ps(_mm256_cmp_ps(v, vhi, _CMP_GT_OQ), g);
        b0 = _mm256_add_pd(b0, _mm256_cvtps_pd(_mm256_castps256_ps128(gb)));
        b1 = _mm256_add_pd(b1, _mm256_cvtps_pd(_mm256_extractf128_ps(gb, 1)));
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(ga)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(ga, 1)));
    }
    _mm256_storeu_pd(lb, b0);
    _mm256_storeu_pd(lb + 4, b1);
    _mm256_storeu_pd(la, a0);
    _mm256_storeu_pd(la + 4, a1);
    return i;
}
#else
#define FXQ_HAVE_X86 0
#endif

/* dx[i] := dy[i] * [lo <= x[i] <= hi] (a product: 0 * negative dy = -0, as in TensorFlow);
 * below[i mod 8] += dy[i] * [x[i] < lo], above[i mod 8] += dy[i] * [x[i] > hi], for i < n (the lanes are those
 * of the whole tensor when the slice starts at a multiple of 8).  dx may be dy (in place).  The AVX-512 and
 * AVX2 loops make the same float32 products and the same double additions, lane by lane, in the same
 * order as the scalar loop. */
/* The best gradient loop this CPU runs: 2 AVX-512, 1 AVX2, 0 scalar. */
static int fxq_level(void) {
#if FXQ_HAVE_X86
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        return 2;
    if (__builtin_cpu_supports("avx2"))
        return 1;
#endif
    return 0;
}

/* ``level``: the loop to run (at most fxq_level(); negative: the best). */
static FXQ_OPT void fxq_backward(const float *dy, const float *x, float *dx, ptrdiff_t n, float lo, float hi,
                                 double *below, double *above, int level) {
    double lb[FXQ_LANES], la[FXQ_LANES];
    ptrdiff_t i = 0;
    int j, best = fxq_level();
    for (j = 0; j < FXQ_LANES; j++) {
        lb[j] = below[j];
        la[j] = above[j];
    }
    level = level < 0 || level > best ? best : level;
#if FXQ_HAVE_X86
    if (level == 2)
        i = fxq_backward_avx512(dy, x, dx, n, lo, hi, lb, la);
    else if (level == 1)
        i = fxq_backward_avx2(dy, x, dx, n, lo, hi, lb, la);
#endif
    for (; i < n; i++)
        fxq_grad_one(x[i], dy[i], &dx[i], lo, hi, &lb[i % FXQ_LANES], &la[i % FXQ_LANES]);
    for (j = 0; j < FXQ_LANES; j++) {
        below[j] = lb[j];
        above[j] = la[j];
    }
}

/* The vars op's forward and gradient in one pass over memory, FXQ_CHUNK elements at a time. */
static void fxq_fused_vars(const float *x, const float *dy, float *out, float *dx, ptrdiff_t n, float lo, float hi,
                           float scale, float qz, double *below, double *above) {
    ptrdiff_t start = 0;
    while (start < n) {
        ptrdiff_t size = start + FXQ_CHUNK <= n ? FXQ_CHUNK : n - start;
        fxq_forward(x + start, out + start, size, lo, hi, scale, 1.0f, qz, 1);
        fxq_backward(dy + start, x + start, dx + start, size, lo, hi, below, above, -1);
        start += size;
    }
}

#endif
