/*
 * fxpsim/datapath/onnxruntime/_mlas.h -- MLAS's float32 SGEMM arithmetic (onnxruntime's CPU kernels), bit for
 * bit, in C: the same float32 operations in the same order as the numpy model of
 * fxpsim/datapath/onnxruntime/mlas_sgemm.py and mlas_conv.py (the reviewed, live-proven reference; the tests
 * compare both).
 *
 * One call computes one batched MlasSgemmOperation (A not transposed, alpha = 1, beta = 0 or 1) chosen by the
 * caller (`kind`):
 *
 *   FXM_SLICES  out = (...((acc_0 [+ c]) + acc_1) ...) + acc_last,  acc_s = fma(a[m,k], b[k,n], acc) for k in
 *               slice s of `sk` reduction steps, acc starting at 0 (fmaf: one rounding per step);
 *   FXM_M1      MlasSgemmKernelM1Avx: out = c or 0; t = ((p0 + p1) + p2) + p3, out = t + out per 4 products
 *               p_k = fl(a[0,k] b[k,n]); then a pair (p0 + p1) + out; then p + out;
 *   FXM_M1TB    MlasSgemmKernelM1TransposeBAvx over rows r = n of b: eight lanes l_{k mod 8} += fl(x_k row_k),
 *               reduced per row in blocks of 4 / 2 / 1 rows (three fixed association trees), then + c;
 *   FXM_N1      the same kernel with x = b[:, 0] and rows = the rows of a (an N = 1 product).
 *
 * Every product and sum of the M1 kernels is rounded on its own: FP contraction is switched off for this file
 * (GCC would otherwise fuse a*b + c into an FMA on FMA-capable clones); the FMA chains call fmaf() or
 * _mm256_fmadd_ps, both correctly rounded.  AVX2 + FMA paths run after a CPU check; the scalar paths give the
 * same bits anywhere.  Strides are in elements; `a_period` maps batch i to a's matrix i mod a_period (a
 * weight shared by every image).  Plain C, no Python; the caller validates shapes and strides.
 */
#ifndef FXPSIM_MLAS_H
#define FXPSIM_MLAS_H

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES)
#define FXM_HAVE_AVX2 1
#include <immintrin.h>
#define FXM_AVX2 __attribute__((target("avx2,fma"), optimize("fp-contract=off")))
#else
#define FXM_HAVE_AVX2 0
#endif

enum { FXM_SLICES = 0, FXM_M1 = 1, FXM_M1TB = 2, FXM_N1 = 3 };

typedef struct {
    const float *a; ptrdiff_t a_b, a_m, a_k, a_period;
    const float *b; ptrdiff_t b_b, b_k, b_n;
    const float *c; ptrdiff_t c_b, c_m, c_n;     /* c may be NULL (beta 0) and may alias o */
    float *o; ptrdiff_t o_b, o_m, o_n;
    ptrdiff_t nb, m, n, k, sk;
    int kind;
    int simd;                                    /* 0: scalar paths only (tests); 1: AVX2 where the CPU has it */
} fxm_op;

static int fxm_cpu_avx2(void) {
#if FXM_HAVE_AVX2
    static int level = -1;
    if (level < 0) {
        __builtin_cpu_init();
        level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return level;
#else
    return 0;
#endif
}

/* ------------------------------------------------------------------------------- FXM_SLICES (fma chains) */
/* o[m, n] = acc + src[m, n] (src NULL: o = acc) for rows [m0, m1), columns [n0, n1), reduction [k0, k1). */
static void fxm_chain_scalar(const float *a, ptrdiff_t am, ptrdiff_t ak, const float *b, ptrdiff_t bk,
                             ptrdiff_t bn, const float *src, ptrdiff_t sm, ptrdiff_t sn, float *o, ptrdiff_t om,
                             ptrdiff_t on, ptrdiff_t m0, ptrdiff_t m1, ptrdiff_t n0, ptrdiff_t n1, ptrdiff_t k0,
                             ptrdiff_t k1) {
    for (ptrdiff_t i = m0; i < m1; i++)
        for (ptrdiff_t j = n0; j < n1; j++) {
            float acc = 0.0f;
            for (ptrdiff_t k = k0; k < k1; k++) acc = fmaf(a[i * am + k * ak], b[k * bk + j * bn], acc);
            o[i * om + j * on] = src ? acc + src[i * sm + j * sn] : acc;
        }
}

#if FXM_HAVE_AVX2
/* R rows x 16 columns (b unit-stride along n, o and src unit-stride along n). */
FXM_AVX2 static inline __attribute__((always_inline)) void
fxm_tile16(int R, const float *a, ptrdiff_t am, ptrdiff_t ak, const float *b, ptrdiff_t bk, const float *src,
           ptrdiff_t sm, float *o, ptrdiff_t om, ptrdiff_t klen) {
    __m256 acc[6][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (ptrdiff_t k = 0; k < klen; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * bk), b1 = _mm256_loadu_ps(b + k * bk + 8);
        for (int r = 0; r < R; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * am + k * ak);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        __m256 v0 = acc[r][0], v1 = acc[r][1];
        if (src) {
            v0 = _mm256_add_ps(v0, _mm256_loadu_ps(src + r * sm));
            v1 = _mm256_add_ps(v1, _mm256_loadu_ps(src + r * sm + 8));
        }
        _mm256_storeu_ps(o + r * om, v0);
        _mm256_storeu_ps(o + r * om + 8, v1);
    }
}

FXM_AVX2 static inline __attribute__((always_inline)) void
fxm_tile8(int R, const float *a, ptrdiff_t am, ptrdiff_t ak, const float *b, ptrdiff_t bk, const float *src,
          ptrdiff_t sm, float *o, ptrdiff_t om, ptrdiff_t klen) {
    __m256 acc[6];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (ptrdiff_t k = 0; k < klen; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * bk);
        for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * am + k * ak), b0, acc[r]);
    }
    for (int r = 0; r < R; r++) {
        __m256 v = acc[r];
        if (src) v = _mm256_add_ps(v, _mm256_loadu_ps(src + r * sm));
        _mm256_storeu_ps(o + r * om, v);
    }
}

#define FXM_TILE_CASES(FN, ...)                                                                               \
    switch (R) {                                                                                              \
    case 6: FN(6, __VA_ARGS__); break;                                                                        \
    case 5: FN(5, __VA_ARGS__); break;                                                                        \
    case 4: FN(4, __VA_ARGS__); break;                                                                        \
    case 3: FN(3, __VA_ARGS__); break;                                                                        \
    case 2: FN(2, __VA_ARGS__); break;                                                                        \
    default: FN(1, __VA_ARGS__); break;                                                                       \
    }

/* One k-slice of one matrix, unit-stride b / o / src along n. */
FXM_AVX2 static void fxm_slice_avx2(const float *a, ptrdiff_t am, ptrdiff_t ak, const float *b, ptrdiff_t bk,
                                    const float *src, ptrdiff_t sm, float *o, ptrdiff_t om, ptrdiff_t M,
                                    ptrdiff_t N, ptrdiff_t k0, ptrdiff_t k1) {
    /* column strips outside, row tiles inside: a strip of b (klen x 16) stays in L1 for every row tile */
    const float *ak0 = a + k0 * ak, *bk0 = b + k0 * bk;
    ptrdiff_t klen = k1 - k0, j = 0;
    for (; j + 16 <= N; j += 16)
        for (ptrdiff_t i = 0; i < M; i += 6) {
            int R = (int)(M - i < 6 ? M - i : 6);
            FXM_TILE_CASES(fxm_tile16, ak0 + i * am, am, ak, bk0 + j, bk, src ? src + i * sm + j : NULL, sm,
                           o + i * om + j, om, klen)
        }
    for (; j + 8 <= N; j += 8)
        for (ptrdiff_t i = 0; i < M; i += 6) {
            int R = (int)(M - i < 6 ? M - i : 6);
            FXM_TILE_CASES(fxm_tile8, ak0 + i * am, am, ak, bk0 + j, bk, src ? src + i * sm + j : NULL, sm,
                           o + i * om + j, om, klen)
        }
    if (j < N) fxm_chain_scalar(a, am, ak, b, bk, 1, src, sm, 1, o, om, 1, 0, M, j, N, k0, k1);
}
#endif

static void fxm_slices(const fxm_op *P, const float *a, const float *b, const float *c, float *o, int simd) {
    int first = 1;
    for (ptrdiff_t k0 = 0; k0 < P->k; k0 += P->sk, first = 0) {
        ptrdiff_t k1 = k0 + P->sk < P->k ? k0 + P->sk : P->k;
        const float *src = first ? c : o;
        ptrdiff_t sm = first ? P->c_m : P->o_m, sn = first ? P->c_n : P->o_n;
#if FXM_HAVE_AVX2
        if (simd && P->b_n == 1 && P->o_n == 1 && (!src || sn == 1)) {
            fxm_slice_avx2(a, P->a_m, P->a_k, b, P->b_k, src, sm, o, P->o_m, P->m, P->n, k0, k1);
            continue;
        }
#endif
        fxm_chain_scalar(a, P->a_m, P->a_k, b, P->b_k, P->b_n, src, sm, sn, o, P->o_m, P->o_n, 0, P->m, 0, P->n,
                         k0, k1);
    }
}

/* ------------------------------------------------------------------------------- FXM_M1 */
static void fxm_m1_scalar(const fxm_op *P, const float *a, const float *b, const float *c, float *o,
                          ptrdiff_t n0) {
    for (ptrdiff_t j = n0; j < P->n; j++) {
        const float *bj = b + j * P->b_n;
        float out = c ? c[j * P->c_n] : 0.0f;
        ptrdiff_t k = 0;
        for (; P->k - k >= 4; k += 4) {
            float p0 = a[k * P->a_k] * bj[k * P->b_k], p1 = a[(k + 1) * P->a_k] * bj[(k + 1) * P->b_k];
            float p2 = a[(k + 2) * P->a_k] * bj[(k + 2) * P->b_k], p3 = a[(k + 3) * P->a_k] * bj[(k + 3) * P->b_k];
            float t = p0 + p1;
            t = t + p2;
            t = t + p3;
            out = t + out;
        }
        if (P->k - k >= 2) {
            float p0 = a[k * P->a_k] * bj[k * P->b_k], p1 = a[(k + 1) * P->a_k] * bj[(k + 1) * P->b_k];
            float t = p0 + p1;
            out = t + out;
            k += 2;
        }
        if (P->k - k >= 1) {
            float p = a[k * P->a_k] * bj[k * P->b_k];
            out = p + out;
        }
        o[j * P->o_n] = out;
    }
}

#if FXM_HAVE_AVX2
FXM_AVX2 static ptrdiff_t fxm_m1_avx2(const fxm_op *P, const float *a, const float *b, const float *c, float *o) {
    ptrdiff_t j = 0;
    for (; j + 8 <= P->n; j += 8) {
        const float *bj = b + j;
        __m256 out = c ? _mm256_loadu_ps(c + j) : _mm256_setzero_ps();
        ptrdiff_t k = 0;
#define FXM_P(kk) _mm256_mul_ps(_mm256_broadcast_ss(a + (kk) * P->a_k), _mm256_loadu_ps(bj + (kk) * P->b_k))
        for (; P->k - k >= 4; k += 4) {
            __m256 t = _mm256_add_ps(FXM_P(k), FXM_P(k + 1));
            t = _mm256_add_ps(t, FXM_P(k + 2));
            t = _mm256_add_ps(t, FXM_P(k + 3));
            out = _mm256_add_ps(t, out);
        }
        if (P->k - k >= 2) {
            out = _mm256_add_ps(_mm256_add_ps(FXM_P(k), FXM_P(k + 1)), out);
            k += 2;
        }
        if (P->k - k >= 1) out = _mm256_add_ps(FXM_P(k), out);
#undef FXM_P
        _mm256_storeu_ps(o + j, out);
    }
    return j;
}
#endif

/* ------------------------------------------------------------------------------- FXM_M1TB / FXM_N1 */
/* The lane reduction of row r of R rows (block of 4 / 2 / 1 by its position), plus c. */
static inline float fxm_reduce(const float *l, ptrdiff_t r, ptrdiff_t R) {
    ptrdiff_t n4 = R / 4 * 4, rest = R - n4;
    if (r < n4) return (((l[0] + l[1]) + l[2]) + l[3]) + (((l[4] + l[5]) + l[6]) + l[7]);
    if (r < n4 + (rest & 2)) return ((l[0] + l[2]) + (l[4] + l[6])) + ((l[1] + l[3]) + (l[5] + l[7]));
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* c[r] = reduce(lanes of sum_k x[k] row_r[k]); x stride xs, row r at rows + r * rr, element k at + k * rk. */
static void fxm_tb_scalar(const float *x, ptrdiff_t xs, const float *rows, ptrdiff_t rr, ptrdiff_t rk,
                          ptrdiff_t R, ptrdiff_t K, const float *c, ptrdiff_t cs, float *o, ptrdiff_t os,
                          ptrdiff_t r0) {
    for (ptrdiff_t r = r0; r < R; r++) {
        float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (ptrdiff_t k = 0; k < K; k++) {
            float p = x[k * xs] * rows[r * rr + k * rk];
            l[k & 7] = l[k & 7] + p;
        }
        float v = fxm_reduce(l, r, R);
        o[r * os] = c ? v + c[r * cs] : v;
    }
}

#if FXM_HAVE_AVX2
/* Eight rows at a time with unit stride across rows (rows = columns of b [K, N]): lane vectors of 8 rows. */
FXM_AVX2 static ptrdiff_t fxm_tb_avx2_rows(const float *x, ptrdiff_t xs, const float *rows, ptrdiff_t rk,
                                           ptrdiff_t R, ptrdiff_t K, const float *c, ptrdiff_t cs, float *o,
                                           ptrdiff_t os) {
    ptrdiff_t r0 = 0;
    for (; r0 + 8 <= R; r0 += 8) {
        __m256 l[8];
        float t[8][8];
        for (int i = 0; i < 8; i++) l[i] = _mm256_setzero_ps();
        for (ptrdiff_t k = 0; k < K; k++) {
            __m256 p = _mm256_mul_ps(_mm256_broadcast_ss(x + k * xs), _mm256_loadu_ps(rows + r0 + k * rk));
            l[k & 7] = _mm256_add_ps(l[k & 7], p);
        }
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(t[i], l[i]);
        for (int q = 0; q < 8; q++) {
            float lane[8];
            for (int i = 0; i < 8; i++) lane[i] = t[i][q];
            float v = fxm_reduce(lane, r0 + q, R);
            o[(r0 + q) * os] = c ? v + c[(r0 + q) * cs] : v;
        }
    }
    return r0;
}
#endif

/* ------------------------------------------------------------------------------- entry point */
static int fxm_run(const fxm_op *P) {
    int simd = P->simd && fxm_cpu_avx2();
    for (ptrdiff_t bi = 0; bi < P->nb; bi++) {
        const float *a = P->a + (bi % P->a_period) * P->a_b;
        const float *b = P->b + bi * P->b_b;
        const float *c = P->c ? P->c + bi * P->c_b : NULL;
        float *o = P->o + bi * P->o_b;
        if (P->kind == FXM_SLICES) {
            fxm_slices(P, a, b, c, o, simd);
        } else if (P->kind == FXM_M1) {
            ptrdiff_t j0 = 0;
#if FXM_HAVE_AVX2
            if (simd && P->b_n == 1 && P->o_n == 1 && (!c || P->c_n == 1)) j0 = fxm_m1_avx2(P, a, b, c, o);
#endif
            fxm_m1_scalar(P, a, b, c, o, j0);
        } else if (P->kind == FXM_M1TB) {
            /* x = a[0, :], row r = b[:, r]; out [1, N] */
            ptrdiff_t r0 = 0;
#if FXM_HAVE_AVX2
            if (simd && P->b_n == 1)
                r0 = fxm_tb_avx2_rows(a, P->a_k, b, P->b_k, P->n, P->k, c, P->c_n, o, P->o_n);
#endif
            fxm_tb_scalar(a, P->a_k, b, P->b_n, P->b_k, P->n, P->k, c, P->c_n, o, P->o_n, r0);
        } else if (P->kind == FXM_N1) {
            /* x = b[:, 0], row r = a[r, :]; out [M, 1] */
            ptrdiff_t r0 = 0;
#if FXM_HAVE_AVX2
            if (simd && P->a_m == 1)
                r0 = fxm_tb_avx2_rows(b, P->b_k, a, P->a_k, P->m, P->k, c, P->c_m, o, P->o_m);
#endif
            fxm_tb_scalar(b, P->b_k, a, P->a_m, P->a_k, P->m, P->k, c, P->c_m, o, P->o_m, r0);
        } else {
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------- MlasConv (im2col + SGEMM) */
/* MlasSgemmOperation's / MlasConvOperation's panel strides: widen N when K is small, K when N is small. */
static void fxm_strides(ptrdiff_t n, ptrdiff_t k, ptrdiff_t *sn_out, ptrdiff_t *sk_out) {
    ptrdiff_t sn = 128, sk = 128;
    if (n >= k) {
        while (sk / 2 >= k) { sn *= 2; sk /= 2; }
    } else {
        while (sn > 16 && sn / 2 >= n) { sn /= 2; sk *= 2; }
    }
    *sn_out = sn;
    *sk_out = sk;
}

typedef struct {
    const float *x; ptrdiff_t N, C, H, W;        /* NCHW, contiguous */
    const float *w; ptrdiff_t M, G, KH, KW;      /* [M, C/G * KH * KW], contiguous */
    ptrdiff_t sh, sw, pt, pl, dh, dw, OH, OW;
    const long long *seg; ptrdiff_t nseg;         /* (start, count) pairs of output positions */
    float *o;                                     /* [N, M, OH * OW], contiguous */
    float *buf;                                   /* >= 128 * 128 floats: one im2col block */
    int simd;
} fxm_conv;

/* buf[kk][pp] = the padded input tap of reduction row k0 + kk at output position p0 + pp (zero when padded),
 * one output row's run at a time: zeros, the taps inside the image, zeros. */
static void fxm_im2col(const fxm_conv *P, const float *xg, ptrdiff_t k0, ptrdiff_t k1, ptrdiff_t p0,
                       ptrdiff_t p1, float *buf) {
    ptrdiff_t nlen = p1 - p0, khw = P->KH * P->KW, sw = P->sw;
    for (ptrdiff_t k = k0; k < k1; k++) {
        ptrdiff_t c = k / khw, i = (k / P->KW) % P->KH, j = k % P->KW;
        const float *xc = xg + c * P->H * P->W;
        float *row = buf + (k - k0) * nlen;
        ptrdiff_t base = j * P->dw - P->pl;                    /* iw = ow * sw + base */
        ptrdiff_t lo = base >= 0 ? 0 : (-base + sw - 1) / sw;  /* first ow with iw >= 0 */
        ptrdiff_t hi = P->W - base <= 0 ? 0 : (P->W - base + sw - 1) / sw;   /* first ow with iw >= W */
        for (ptrdiff_t p = p0; p < p1;) {
            ptrdiff_t oh = p / P->OW, ow = p % P->OW;
            ptrdiff_t run = P->OW - ow < p1 - p ? P->OW - ow : p1 - p, end = ow + run;
            ptrdiff_t ih = oh * P->sh + i * P->dh - P->pt;
            float *dst = row + (p - p0);                       /* dst[q - ow] for q in [ow, end) */
            if (ih < 0 || ih >= P->H) {
                for (ptrdiff_t q = ow; q < end; q++) dst[q - ow] = 0.0f;
            } else {
                const float *src = xc + ih * P->W;             /* x[ih, q * sw + base] */
                ptrdiff_t a = lo > ow ? lo : ow, b = hi < end ? hi : end, q = ow;
                for (; q < a && q < end; q++) dst[q - ow] = 0.0f;
                if (sw == 1) {
                    if (b > q) memcpy(dst + (q - ow), src + q + base, (size_t)(b - q) * sizeof(float));
                    q = b > q ? b : q;
                } else {
                    for (; q < b; q++) dst[q - ow] = src[q * sw + base];
                }
                for (; q < end; q++) dst[q - ow] = 0.0f;
            }
            p += run;
        }
    }
}

/* MlasConv's expand-then-GEMM algorithm over segments of output positions, every (image, group) in turn:
 * per segment, slices of StrideN positions; per slice, K in slices of StrideK, each an SGEMM operation of the
 * filters on the im2col block (beta 0 for the first K slice, then 1), as mlas.py's _conv_operation. */
static int fxm_conv_run(const fxm_conv *P) {
    ptrdiff_t cg = P->C / P->G, fc = P->M / P->G, K = cg * P->KH * P->KW, OS = P->OH * P->OW;
    for (ptrdiff_t bi = 0; bi < P->N; bi++)
        for (ptrdiff_t g = 0; g < P->G; g++) {
            const float *xg = P->x + (bi * P->C + g * cg) * P->H * P->W;
            const float *wg = P->w + g * fc * K;
            float *og = P->o + (bi * P->M + g * fc) * OS;
            for (ptrdiff_t s = 0; s < P->nseg; s++) {
                ptrdiff_t s0 = (ptrdiff_t)P->seg[2 * s], cnt = (ptrdiff_t)P->seg[2 * s + 1], sn, sk;
                fxm_strides(cnt, K, &sn, &sk);
                for (ptrdiff_t n0 = 0; n0 < cnt; n0 += sn) {
                    ptrdiff_t n1 = n0 + sn < cnt ? n0 + sn : cnt, nlen = n1 - n0;
                    for (ptrdiff_t k0 = 0; k0 < K; k0 += sk) {
                        ptrdiff_t k1 = k0 + sk < K ? k0 + sk : K, klen = k1 - k0, isn, isk;
                        if (klen * nlen > 128 * 128) return -2;
                        fxm_im2col(P, xg, k0, k1, s0 + n0, s0 + n1, P->buf);
                        fxm_op op;
                        memset(&op, 0, sizeof op);
                        op.a = wg + k0; op.a_m = K; op.a_k = 1; op.a_period = 1;
                        op.b = P->buf; op.b_k = nlen; op.b_n = 1;
                        op.c = k0 ? og + s0 + n0 : NULL; op.c_m = OS; op.c_n = 1;
                        op.o = og + s0 + n0; op.o_m = OS; op.o_n = 1;
                        op.nb = 1; op.m = fc; op.n = nlen; op.k = klen;
                        fxm_strides(nlen, klen, &isn, &isk);
                        op.sk = isk;
                        op.kind = fc == 1 ? FXM_M1 : (nlen == 1 && OS == 1) ? FXM_N1 : FXM_SLICES;
                        op.simd = P->simd;
                        if (fxm_run(&op)) return -1;
                    }
                }
            }
        }
    return 0;
}

#endif /* FXPSIM_MLAS_H */
