/*
 * fxpsim/datapath/_conv_int8.h -- fused int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED.
 *
 * Plain C, no Python.  Included by _conv_int8.pyx; validated and dispatched by conv_int8.py.
 *
 * For output pixel m = (n, p, q) and output channel o (NHWC, TFLite weight layouts):
 *
 *   a[m,o] = fit(... fit(fit(b0 + p_0) + p_1) ... + p_{K-1})       (b0 = bias if preloaded, else 0)
 *   p_k    = (x[n, p*sh - pt + i*dh, q*sw - pl + j*dw, c] - zx) * w[o, i, j, c],  k = (i, j, c) row-major
 *   a[m,o] = fit(a[m,o] + bias[o])                                   (bias added after, if so)
 *
 * Padded taps are zero products (an add of 0 never changes an accumulator in range, never overflows),
 * exactly as fxpsim.datapath.conv2d counts them.  fit() is the accumulator's per-add overflow, as in
 * _accumulate.h: EXACT (the caller proved that no partial sum leaves the W-bit range, so no fit and no
 * count), SAT (clamp to [-2^(W-1), 2^(W-1)-1]) or WRAP (two's complement to W bits); an add "overflows"
 * when fit changed the exact sum, and every such add is counted.  Depthwise (multiplier 1): channel o sees
 * input channel o only, k = (i, j).
 *
 * Output stage (optional, rq_mult != NULL): fxpsim.datapath.requantize's fused form of TFLite's
 * MultiplyByQuantizedMultiplier (double or single rounding) with the output zero point folded in,
 *
 *   y = (a*M_o + A_o + [a*M_o + 2^30 < 0] * U_o) >> S_o          (exact in int64; see _fused_constants)
 *   out = clamp(y, lo, hi);  above += [y > hi];  below += [y < lo]
 *
 * or (rq_fscale != NULL) the float form of XNNPACK's fp32 requantization,
 *
 *   f = fl32(fl32(a) * s_o);  y = rne(clampf(f, lo - z - 1, hi - z + 1)) + z,
 *
 * rne() by the magic number 1.5 * 2^23 ((f + 1.5*2^23) - 1.5*2^23 rounds |f| < 2^22 to an integer, ties to
 * even, in float32); the clamp to integer bounds commutes with rne() and keeps y > hi / y < lo exactly as
 * for the unclamped value, so out and the counts are those of rne(f) + z.
 *
 * Implementations (identical results; tests compare them): a portable scalar one (compiled for
 * x86-64-v4/v3/baseline by GCC function multi-versioning, auto-vectorised over channels) and, picked at run
 * time when the CPU has them, AVX-512 ones: VNNI (vpdpbusd, u8 x s8 -> s32) for the exact dense sums with
 * the zero point moved into a per-channel correction,
 *   sum_k (x_k - zx) w_k = sum_k (x_k + 128) w_k - (zx + 128) sum_k w_k,
 * (padded taps hold x + 128 = zx + 128, so they cancel), and AVX-512BW 16-bit lanes (vpaddsw / vpaddw,
 * a lane overflowed iff the saturating and the wrapping sums differ) for the per-add W = 16 case; they live
 * in _conv_int8_avx512.h.
 *
 * Exactness (fxc_run): when max_o (max_x |x - zx| sum_k |w[o,k]| + |bias[o]|) <= min(2^(W-1), 2^31) - 1, no
 * partial sum in any order can leave the accumulator, so the sums are computed exactly (int32 lanes, any
 * order, VNNI) and nothing is counted; otherwise the per-add kernels run when the caller allows them
 * (sequential order, W <= 31), else fxc_run reports that it does not model the layer.
 */
#ifndef FXPSIM_CONV_INT8_H
#define FXPSIM_CONV_INT8_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__)               \
    && defined(__linux__) && !defined(FXPSIM_NO_CLONES)
#define FXC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FXC_AVX512 1
#include <immintrin.h>
#else
#define FXC_CLONES
#define FXC_AVX512 0
#endif

enum { FXC_EXACT = 0, FXC_SAT = 1, FXC_WRAP = 2 };

typedef struct {
    ptrdiff_t N, H, W, C, KH, KW, O, OH, OW;
    int sh, sw, dh, dw, pt, pl;
    int depthwise;          /* 1: O == C, channel o sees input channel o */
    int x_zp;
    int mode, word;         /* fit of every add (SAT or WRAP; fxc_run makes it EXACT when no partial sum
                               can overflow), accumulator width (<= 62) */
    int bias_init;          /* 1: accumulator preloaded with the bias, 0: bias added after the sum */
    const int32_t *bias;    /* [O] or NULL */
    const int64_t *rq_mult, *rq_add, *rq_nudge, *rq_shift;   /* [O]; rq_mult NULL: accumulators only */
    const float *rq_fscale; /* [O] or NULL: the float output stage (then rq_mult is NULL) */
    int rq_zp;              /* its output zero point */
    int lo, hi;             /* output clamp */
    int impl;               /* 0: fastest available, 1: portable scalar only */
    int peradd_ok;          /* per-add fitting may be modelled (sequential order, word <= 31) */
    int mult32;             /* set by fxc_run: every rq_mult fits int32 (one vpmuldq per 8 lanes) */
    const int64_t *rq16;    /* set by fxc_run: the constants in even/odd lane pairs, per 16 channels
                               [mult, add, nudge, shift] x [even, odd] x 8, when every y fits int32; or NULL */
} fxc_params;

#include "_conv_int8_cache.h"

/* ------------------------------------------------------------------ portable kernel */
#define FXC_FIT_EXACT c = s;
#define FXC_FIT_SAT c = s < alo ? alo : s; c = c > ahi ? ahi : c; cnt[o] += c != s;
#define FXC_FIT_WRAP c = (int32_t)((uint32_t)s << wsh) >> wsh; cnt[o] += c != s;

#define FXC_ROW_LOOPS(FIT)                                                                          \
    for (ptrdiff_t i = 0; i < P->KH; i++) {                                                         \
        const ptrdiff_t ih = p * P->sh - P->pt + i * P->dh;                                         \
        if (ih < 0 || ih >= P->H) continue;                                                         \
        for (ptrdiff_t j = 0; j < P->KW; j++) {                                                     \
            const ptrdiff_t iw = q * P->sw - P->pl + j * P->dw;                                     \
            if (iw < 0 || iw >= P->W) continue;                                                     \
            const int8_t *xr = x + ((n * P->H + ih) * P->W + iw) * C;                               \
            if (P->depthwise) {                                                                     \
                const int32_t *wk = wt + (i * P->KW + j) * C;                                       \
                for (ptrdiff_t o = 0; o < C; o++) {                                                 \
                    const int32_t s = acc[o] + ((int32_t)xr[o] - zx) * wk[o];                       \
                    int32_t c;                                                                      \
                    FIT                                                                             \
                    acc[o] = c;                                                                     \
                }                                                                                   \
            } else {                                                                                \
                for (ptrdiff_t ci = 0; ci < C; ci++) {                                              \
                    const int32_t xv = (int32_t)xr[ci] - zx;                                        \
                    const int32_t *wk = wt + ((i * P->KW + j) * C + ci) * O;                        \
                    for (ptrdiff_t o = 0; o < O; o++) {                                             \
                        const int32_t s = acc[o] + xv * wk[o];                                      \
                        int32_t c;                                                                  \
                        FIT                                                                         \
                        acc[o] = c;                                                                 \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    if (P->bias && !P->bias_init) {                                                                 \
        for (ptrdiff_t o = 0; o < O; o++) {                                                         \
            const int32_t s = acc[o] + P->bias[o];                                                  \
            int32_t c;                                                                              \
            FIT                                                                                     \
            acc[o] = c;                                                                             \
        }                                                                                           \
    }

/* The float output stage of len accumulators a of channels o0.. (see the header comment): codes into y8,
 * the pre-clamp values above hi / below lo added to *above / *below. */
static inline __attribute__((always_inline)) void fxc_requant_f32(const fxc_params *P, const int32_t *a,
                                                                  ptrdiff_t o0, ptrdiff_t len, int8_t *y8,
                                                                  int64_t *above, int64_t *below)
{
    const float magic = 12582912.0f;                        /* 1.5 * 2^23 */
    const float flo = (float)(P->lo - P->rq_zp - 1), fhi = (float)(P->hi - P->rq_zp + 1);
    const int32_t lo = P->lo, hi = P->hi, z = P->rq_zp;
    const float *s = P->rq_fscale + o0;
    int64_t na = 0, nb = 0;
    for (ptrdiff_t o = 0; o < len; o++) {
        float f = (float)a[o] * s[o];
        f = f < flo ? flo : f;
        f = f > fhi ? fhi : f;
        const int32_t y = (int32_t)((f + magic) - magic) + z;
        na += y > hi;
        nb += y < lo;
        y8[o] = (int8_t)(y < lo ? lo : (y > hi ? hi : y));
    }
    *above += na;
    *below += nb;
}

/* Output stage over rows of O accumulators (see the header comment). */
FXC_CLONES static void fxc_requant(const fxc_params *P, const int32_t *acc, ptrdiff_t rows, int8_t *out,
                                   int64_t *above, int64_t *below)
{
    const ptrdiff_t O = P->O;
    const int64_t lo = P->lo, hi = P->hi;
    int64_t na = 0, nb = 0;
    if (P->rq_fscale) {
        for (ptrdiff_t r = 0; r < rows; r++)
            fxc_requant_f32(P, acc + r * O, 0, O, out + r * O, above, below);
        return;
    }
    for (ptrdiff_t r = 0; r < rows; r++) {
        const int32_t *a = acc + r * O;
        int8_t *y8 = out + r * O;
        for (ptrdiff_t o = 0; o < O; o++) {
            const int64_t v = (int64_t)a[o] * P->rq_mult[o];
            int64_t y = v + P->rq_add[o];
            if (P->rq_nudge)
                y += (v + (INT64_C(1) << 30) < 0) ? P->rq_nudge[o] : 0;
            y >>= P->rq_shift[o];
            na += y > hi;
            nb += y < lo;
            y = y < lo ? lo : y;
            y = y > hi ? hi : y;
            y8[o] = (int8_t)y;
        }
    }
    *above += na;
    *below += nb;
}


/* wt: dense [KH][KW][C][O], depthwise [KH][KW][C] (int32); acc_out [M][O] int64 or NULL; row, cnt scratch [O];
 * out [M][O] or NULL (counts[1], counts[2]: above, below). Returns the overflow count. */
FXC_CLONES static int64_t fxc_generic(const fxc_params *P, const int8_t *x, const int32_t *wt,
                                      int64_t *acc_out, int32_t *row, int32_t *cnt, int8_t *out,
                                      int64_t *counts)
{
    const ptrdiff_t C = P->C, O = P->O, M = P->N * P->OH * P->OW;
    const int32_t zx = P->x_zp;
    const int wsh = 32 - P->word;
    const int32_t alo = P->word >= 32 ? INT32_MIN : -(int32_t)(1u << (P->word - 1));
    const int32_t ahi = P->word >= 32 ? INT32_MAX : (int32_t)((1u << (P->word - 1)) - 1);
    int64_t total = 0;
    for (ptrdiff_t m = 0; m < M; m++) {
        const ptrdiff_t n = m / (P->OH * P->OW), r = m % (P->OH * P->OW), p = r / P->OW, q = r % P->OW;
        int32_t *acc = row;
        for (ptrdiff_t o = 0; o < O; o++) {
            acc[o] = (P->bias && P->bias_init) ? P->bias[o] : 0;
            cnt[o] = 0;
        }
        switch (P->mode) {
        case FXC_SAT: FXC_ROW_LOOPS(FXC_FIT_SAT) break;
        case FXC_WRAP: FXC_ROW_LOOPS(FXC_FIT_WRAP) break;
        default: FXC_ROW_LOOPS(FXC_FIT_EXACT) break;
        }
        if (P->mode != FXC_EXACT)
            for (ptrdiff_t o = 0; o < O; o++)
                total += cnt[o];
        if (acc_out)
            for (ptrdiff_t o = 0; o < O; o++)
                acc_out[m * O + o] = acc[o];
        if (out)
            fxc_requant(P, acc, 1, out + m * O, counts + 1, counts + 2);
    }
    return total;
}

#if FXC_AVX512
#include "_conv_int8_avx512.h"
#endif

static int fxc_have_avx512(void)
{
#if FXC_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
           && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* Largest |x - zx| over the input (the exactness bound of fxc_run). */
FXC_CLONES static int64_t fxc_xmax(const int8_t *x, ptrdiff_t n, int zx)
{
    int lo = 127, hi = -128;
    for (ptrdiff_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const int64_t a = (int64_t)hi - zx, b = (int64_t)zx - lo;
    return a > b ? a : b;
}

/* The layer; with a cache K (see fxc_cache) the weight-derived buffers are taken from it, and built into it
 * when may_pack (else the call returns 2: the caller repeats it with may_pack, e.g. holding a lock). Returns
 * 0 (done), 1 (not modelled), 2 (K lacks a buffer) or -1 (out of memory). */
static int fxc_run(const fxc_params *P0, const int8_t *x, const int8_t *w, int64_t *acc_out, int8_t *out,
                   int64_t *counts, fxc_cache *K, int may_pack)
{
    fxc_params Pm = *P0;
    const fxc_params *P = &Pm;
    int64_t accmax;                                   /* |accumulator| <= accmax */
    if (K && !__atomic_load_n(&K->swabs, __ATOMIC_ACQUIRE)) {
        if (!may_pack) return 2;
        int64_t *swo = (int64_t *)malloc(sizeof(int64_t) * (size_t)(P->O + 1));
        if (!swo) return -1;
        fxc_swabs(P, w, swo);
        __atomic_store_n(&K->swabs, swo, __ATOMIC_RELEASE);
    }
    {   /* exact when max_o (max|x - zx| sum_k |w[o,k]| + |bias[o]|) bounds every partial sum inside the
           accumulator (and int32): no fit, no count, any order */
        const int64_t xmax = P->N * P->H * P->W * P->C > 0 ? fxc_xmax(x, P->N * P->H * P->W * P->C, P->x_zp) : 0;
        const int64_t limit = (P->word >= 32 ? (INT64_C(1) << 31) : (INT64_C(1) << (P->word - 1))) - 1;
        int64_t bound = 0;
        for (ptrdiff_t o = 0; o < P->O; o++) {
            const int64_t sw = K ? K->swabs[o] : fxc_swabs_one(P, w, o);
            const int64_t b = P->bias ? (P->bias[o] < 0 ? -(int64_t)P->bias[o] : P->bias[o]) : 0;
            bound = xmax * sw + b > bound ? xmax * sw + b : bound;
        }
        if (bound <= limit)
            Pm.mode = FXC_EXACT;
        else if (!P->peradd_ok || P->word > 31)
            return 1;                                 /* not modelled: the caller runs its general path */
        Pm.rq16 = NULL;
        accmax = P->mode == FXC_EXACT ? bound : (INT64_C(1) << (P->word - 1));
    }
    Pm.mult32 = 1;
    for (ptrdiff_t o = 0; o < P->O && P->rq_mult; o++)
        Pm.mult32 &= P->rq_mult[o] >= INT32_MIN && P->rq_mult[o] <= INT32_MAX;
    const ptrdiff_t C = P->C, O = P->O, T = P->KH * P->KW, M = P->N * P->OH * P->OW;
    (void)M;
    (void)accmax;
    if (!P->rq_mult && !P->rq_fscale)
        out = NULL;
/* FXC_BUF: a buffer of the cache (built = 1), else a new one (built = 0; the call returns 2 when there is a
 * cache that may not be built into now).  A new buffer, once filled, goes into the cache (FXC_KEEP: published
 * after its contents, so a concurrent call sees it either absent or complete); FXC_DROP frees what is not the
 * cache's at the end of the call, FXC_UNDO a new one on an error. */
#define FXC_BUF(var, type, field, count, zero, built)                                                       \
    type *var = K ? __atomic_load_n(&K->field, __ATOMIC_ACQUIRE) : NULL;                                   \
    const int built = var != NULL;                                                                         \
    if (!var) {                                                                                            \
        if (K && !may_pack) { FXC_FREE_ALL; return 2; }                                                    \
        var = (type *)((zero) ? calloc((size_t)(count), sizeof(type)) : malloc(sizeof(type) * (size_t)(count))); \
    }
#define FXC_KEEP(field, var, built) do { if (K && !(built)) __atomic_store_n(&K->field, var, __ATOMIC_RELEASE); } while (0)
#define FXC_DROP(var) do { if (!K) free(var); } while (0)
#define FXC_UNDO(var, built) do { if (!(built)) free(var); } while (0)
#if FXC_AVX512
    const int fast = P->impl == 0 && fxc_have_avx512();
    int64_t *rq16 = NULL;
#define FXC_FREE_ALL FXC_DROP(rq16)
    /* the 32-bit output stage when every y = R(a) + z fits int32 (and its int32 clip counters cannot wrap) */
    if (fast && out && P->rq_mult && P->mult32 && M * ((O + 15) / 16) < (INT64_C(1) << 31)) {
        int ok = 1;
        for (ptrdiff_t o = 0; o < O && ok; o++) {
            const __int128 m = P->rq_mult[o] < 0 ? -(__int128)P->rq_mult[o] : P->rq_mult[o];
            const __int128 ad = P->rq_add[o] < 0 ? -(__int128)P->rq_add[o] : P->rq_add[o];
            const __int128 nu = P->rq_nudge ? (P->rq_nudge[o] < 0 ? -(__int128)P->rq_nudge[o] : P->rq_nudge[o]) : 0;
            const __int128 ymax = ((m * accmax + ad + nu + (1 << 30)) >> P->rq_shift[o]) + 1;
            ok = ymax < ((__int128)1 << 31) - 1 && P->rq_shift[o] >= 0 && P->rq_shift[o] < 64;
        }
        const ptrdiff_t ng = (O + 15) / 16;
        if (ok) {
            FXC_BUF(r16, int64_t, rq16, ng * 64, 1, r16_built)
            if (r16 && !r16_built) {
                for (ptrdiff_t o = 0; o < O; o++) {
                    int64_t *c = r16 + (o / 16) * 64 + ((o % 16) & 1) * 8 + (o % 16) / 2;
                    c[0] = P->rq_mult[o];
                    c[16] = P->rq_add[o];
                    c[32] = P->rq_nudge ? P->rq_nudge[o] : 0;
                    c[48] = P->rq_shift[o];
                }
            }
            if (r16) FXC_KEEP(rq16, r16, r16_built);
            rq16 = r16;
            Pm.rq16 = rq16;
        }
    }
    const ptrdiff_t Hp = (P->OH - 1) * P->sh + (P->KH - 1) * P->dh + 1;
    const ptrdiff_t Wp = (P->OW - 1) * P->sw + (P->KW - 1) * P->dw + 1;
    const int dense_exact = fast && !P->depthwise && P->mode == FXC_EXACT;
    const int p16 = fast && !P->depthwise && P->mode != FXC_EXACT && P->word == 16 && T * C < 32000;
    const int dw = fast && P->depthwise && (P->mode == FXC_EXACT || P->word == 16) && T < 32000;
    if (dense_exact || p16 || dw) {
        /* the input as is when no window leaves it and rows need no channel padding */
        const int direct = dense_exact && P->pt == 0 && P->pl == 0 && Hp <= P->H && Wp <= P->W && C % 4 == 0;
        const ptrdiff_t C4 = dense_exact ? (C + 3) / 4 * 4 : C;
        const ptrdiff_t Hb = direct ? P->H : Hp, Wb = direct ? P->W : Wp;
        ptrdiff_t *base = (ptrdiff_t *)malloc(sizeof(ptrdiff_t) * (size_t)(M + T));
        if (!base) { FXC_FREE_ALL; return -1; }
#undef FXC_FREE_ALL
#define FXC_FREE_ALL do { FXC_DROP(rq16); free(base); } while (0)
        ptrdiff_t *tapoff = base + M;
        fxc_bases(P, base, Hb, Wb, C4);
        for (ptrdiff_t i = 0; i < P->KH; i++)
            for (ptrdiff_t j = 0; j < P->KW; j++)
                tapoff[i * P->KW + j] = (i * P->dh * Wb + j * P->dw) * C4;
        const ptrdiff_t nob = (O + 63) / 64;
        if (dense_exact) {
            const ptrdiff_t Q = C4 / 4;
            FXC_BUF(wq, int8_t, wq, nob * T * Q * 256, 1, wq_built)
            FXC_BUF(corr, int32_t, corr, nob * 64, 1, corr_built)
            int8_t *xb = direct ? NULL : (int8_t *)malloc((size_t)(P->N * Hp * Wp * C4) + 64);
            if ((!direct && !xb) || !wq || !corr) {
                free(xb); FXC_UNDO(wq, wq_built); FXC_UNDO(corr, corr_built); FXC_FREE_ALL; return -1;
            }
            if (!direct)
                fxc_pad_i8(P, x, xb, Hp, Wp, C4, (int8_t)P->x_zp);
            for (ptrdiff_t o = 0; o < O && !(wq_built && corr_built); o++) {
                int64_t sw = 0;
                for (ptrdiff_t t = 0; t < T; t++)
                    for (ptrdiff_t c = 0; c < C; c++) {
                        const int8_t v = w[(o * T + t) * C + c];
                        sw += v;
                        wq[(((o / 64) * T * Q + t * Q + c / 4) * 64 + o % 64) * 4 + c % 4] = v;
                    }
                corr[o] = (int32_t)(uint32_t)((uint64_t)((int64_t)(P->x_zp + 128) * sw)
                                              - (uint64_t)(int64_t)(P->bias ? P->bias[o] : 0));
            }
            FXC_KEEP(wq, wq, wq_built);
            FXC_KEEP(corr, corr, corr_built);
            fxc_dense_vnni(P, direct ? x : xb, wq, corr, base, tapoff, T, Q, acc_out, out, counts);
            free(xb); FXC_DROP(wq); FXC_DROP(corr);
        } else if (P->depthwise && C <= 16) {
            /* [T][32] weight pairs, then b2 for the exact sums (zeros) and for the per-add ones (the bias) */
            FXC_BUF(w2, int16_t, w2, T * 32 + 64, 1, w2_built)
            const int8_t **tp = (const int8_t **)malloc(sizeof(const int8_t *) * (size_t)(2 * T));
            int8_t zxbuf[16];
            if (!w2 || !tp) { FXC_UNDO(w2, w2_built); free(tp); FXC_FREE_ALL; return -1; }
            memset(zxbuf, (int8_t)P->x_zp, sizeof zxbuf);
            if (!w2_built) {
                for (ptrdiff_t t = 0; t < T; t++)
                    for (ptrdiff_t c = 0; c < C; c++)
                        w2[t * 32 + c] = w2[t * 32 + 16 + c] = w[t * C + c];
                for (ptrdiff_t c = 0; c < C && P->bias; c++)   /* W = 16: fits int16 (per-add only) */
                    w2[T * 32 + 32 + c] = w2[T * 32 + 48 + c] = (int16_t)P->bias[c];
            }
            FXC_KEEP(w2, w2, w2_built);
            const int16_t *b2 = w2 + T * 32 + (P->mode != FXC_EXACT ? 32 : 0);
            counts[0] += fxc_dw_pair(P, x, w2, b2, T, acc_out, out, counts, tp, zxbuf);
            FXC_DROP(w2); free(tp);
        } else if (P->depthwise) {
            const ptrdiff_t Cp = (C + 31) / 32 * 32;
            FXC_BUF(w16, int16_t, w16d, T * Cp, 1, w16_built)
            FXC_BUF(b16, int16_t, b16d, 2 * Cp, 1, b16_built)
            ptrdiff_t *tt = (ptrdiff_t *)malloc(sizeof(ptrdiff_t) * (size_t)(2 * T));
            if (!w16 || !b16 || !tt) {
                FXC_UNDO(w16, w16_built); FXC_UNDO(b16, b16_built); free(tt); FXC_FREE_ALL; return -1;
            }
            /* per-add (W = 16): the bias is in the 16-bit range (checked by the caller); the exact sums add
               the int32 bias themselves (b16 + Cp: zeros) */
            for (ptrdiff_t o = 0; o < O && P->bias && !b16_built; o++)
                b16[o] = (int16_t)P->bias[o];
            for (ptrdiff_t t = 0; t < T && !w16_built; t++)
                for (ptrdiff_t c = 0; c < C; c++)
                    w16[t * Cp + c] = w[t * C + c];
            FXC_KEEP(w16d, w16, w16_built);
            FXC_KEEP(b16d, b16, b16_built);
            counts[0] += fxc_dw_avx512(P, x, w16, b16 + (P->mode != FXC_EXACT ? 0 : Cp), T, Cp, acc_out, out, counts,
                                       tt, tt + T);
            FXC_DROP(w16); FXC_DROP(b16); free(tt);
        } else {
            const int direct16 = P->pt == 0 && P->pl == 0 && Hp <= P->H && Wp <= P->W;
            FXC_BUF(w16, int16_t, w16p, nob * T * C * 64, 1, w16_built)
            FXC_BUF(b16, int16_t, b16p, nob * 64, 1, b16_built)
            int16_t *xs = direct16 ? NULL : (int16_t *)malloc(sizeof(int16_t) * (size_t)(P->N * Hp * Wp * C + 32));
            if ((!direct16 && !xs) || !w16 || !b16) {
                free(xs); FXC_UNDO(w16, w16_built); FXC_UNDO(b16, b16_built); FXC_FREE_ALL; return -1;
            }
            if (direct16) {   /* windows index the input itself */
                fxc_bases(P, base, P->H, P->W, C);
                for (ptrdiff_t i = 0; i < P->KH; i++)
                    for (ptrdiff_t j = 0; j < P->KW; j++)
                        tapoff[i * P->KW + j] = (i * P->dh * P->W + j * P->dw) * C;
            } else {
                fxc_pad_i16(P, x, xs, Hp, Wp);
            }
            for (ptrdiff_t o = 0; o < O && P->bias && !b16_built; o++)   /* W = 16: the bias fits int16 (caller) */
                b16[o] = (int16_t)P->bias[o];
            for (ptrdiff_t o = 0; o < O && !w16_built; o++)
                for (ptrdiff_t k = 0; k < T * C; k++)
                    w16[((o / 64) * T * C + k) * 64 + o % 64] = w[o * T * C + k];
            FXC_KEEP(w16p, w16, w16_built);
            FXC_KEEP(b16p, b16, b16_built);
            counts[0] += fxc_dense_p16(P, xs, direct16 ? x : NULL, w16, b16, base, tapoff, T, acc_out, out, counts);
            free(xs); FXC_DROP(w16); FXC_DROP(b16);
        }
        FXC_FREE_ALL;
        _mm_sfence();                                 /* order the streaming stores before returning */
        return 0;
    }
    FXC_DROP(rq16);
    Pm.rq16 = NULL;
#undef FXC_FREE_ALL
#endif
#define FXC_FREE_ALL do { } while (0)
    FXC_BUF(wt, int32_t, wt, T * C * (P->depthwise ? 1 : O) + 1, 0, wt_built)
    int32_t *scratch = (int32_t *)malloc(sizeof(int32_t) * (size_t)(2 * O) + 8);
    if (!wt || !scratch) { FXC_UNDO(wt, wt_built); free(scratch); return -1; }
    if (wt_built)
        ;
    else if (P->depthwise)
        for (ptrdiff_t k = 0; k < T * C; k++) wt[k] = w[k];
    else
        for (ptrdiff_t o = 0; o < O; o++)
            for (ptrdiff_t k = 0; k < T * C; k++) wt[k * O + o] = w[o * T * C + k];
    FXC_KEEP(wt, wt, wt_built);
    counts[0] += fxc_generic(P, x, wt, acc_out, scratch, scratch + O, out, counts);
    FXC_DROP(wt); free(scratch);
    return 0;
#undef FXC_FREE_ALL
#undef FXC_BUF
#undef FXC_DROP
#undef FXC_KEEP
#undef FXC_UNDO
}

#endif /* FXPSIM_CONV_INT8_H */
