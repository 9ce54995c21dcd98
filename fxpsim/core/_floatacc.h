/* Fused-dot and block-scaled float accumulation kernels (fxpsim.datapath.floatacc.fused in C).
 *
 * One output element d(i, j) at a time, per K-chunk (the formulas of floatacc/accumulator.py):
 *   E_max = max(max_k P_k, E_c),  P_k = E_a + E_b (block: the group's scale exponents),
 *   s     = align(C 2^(F - m_c + E_c - E_max)) + sum_k align(p_k 2^(F - f_m + P_k - E_max)),
 *   d     = round_out(s 2^(E_max - F)),
 * align = truncation toward zero, floor or ties-to-even of an exact int64 (every shift is clamped
 * below 64, every sum fits int64: |term| < 2^(F + 2 + scale bits), F <= 40, checked in Python).
 * Specials as IEEE sums: a NaN, Inf * 0 or +Inf with -Inf gives NaN, else an Inf gives it.
 * Each output is computed by one thread from its own inputs only, so the thread count never
 * changes a bit; the per-row counts are summed in Python.
 *
 * The truncating int32 case (fa_fused_cols, in _floatacc_cols.h) runs 16 output columns at once:
 * per chunk the C codes are split on lanes (fa_lanes_split), the chunk's max exponent and aligned
 * terms come from fa_cols_chunk (portable C, auto-vectorized in the FA_DISPATCH clones) or fa_cols_chunk_avx2
 * (intrinsics, taken after __builtin_cpu_supports("avx2"); no -march flag), and a chunk without
 * specials or promotion ends on lanes too (fa_lanes_close / fa_lanes_close_avx2); any other chunk
 * takes the scalar fa_close.  All paths give the same integers (the tests run both).
 */
#ifndef FXPSIM_FLOATACC_H
#define FXPSIM_FLOATACC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) \
    && defined(__linux__) && !defined(FXPSIM_NO_DISPATCH)
#define FA_DISPATCH __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FA_DISPATCH
#endif

#define FA_NAN 1u
#define FA_INF 2u
#define FA_NEG 4u
#define FA_ZERO 8u

enum { FA_TRUNC = 0, FA_FLOOR = 1, FA_HALF_EVEN = 2 };
enum { FR_TOWARD_ZERO = 0, FR_HALF_EVEN = 1, FR_HALF_AWAY = 2, FR_FLOOR = 3, FR_CEIL = 4 };
enum { FO_INF = 0, FO_IEEE = 1, FO_SATURATE = 2 };

typedef struct {
    int64_t K, chunk, promote;          /* promote: 0 = never, else every `promote` elements */
    int64_t F, fm;                      /* fraction bits kept; mantissa bits of a product (fused) */
    int64_t lsb;                        /* block: exponent of the element products' LSB */
    int64_t group;                      /* block: elements summed exactly per group */
    int64_t block;                      /* elements per scale (0: no scales) */
    int align;
    int64_t ze;                         /* exponent of a zero C */
    /* storage (output) format: IEEE with subnormals and Inf */
    int64_t s_exp_bits, s_man_bits, s_bias, s_sign_bit, s_inf_code;
    /* precision the result is rounded to */
    int64_t p_m, p_emin, p_maxc, p_inf_code;
    int p_has_inf, rounding, overflow;
    int64_t nan_code;
    int batched;                        /* B row of output (i, j) is i (float_dot) instead of j */
    int fast32;                         /* truncation with int32 lanes (F >= f_m and sums < 2^31) */
    int simd, small16, close32;         /* cols kernel: AVX2 allowed; |a| 2^(F - f_m), |b| < 2^15;
                                           |chunk sum + C term| < 2^30, storage <= 32 bits */
    int f32;                            /* cols kernel, AVX2: the float32 planes (fa_fused_cols) */
    int64_t f32_thr;                    /* ... taken where base - E_max >= f32_thr on every lane */
    int64_t S, Fc;                      /* fused_rd (_floatacc_rd.h): sum_bits, c_fraction_bits */
    int even_odd;                       /* fused_rd: even and odd products summed apart */
} fa_params;

typedef struct { int64_t sig, exp; int nan, inf, neg; } fa_c;

static inline int fa_bitlen(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

/* C's code of the storage format split as floatacc.operands.split_codes does. */
static inline fa_c fa_split(int64_t code, const fa_params *p) {
    fa_c c = {0, p->ze, 0, 0, 0};
    int64_t m = p->s_man_bits, e = p->s_exp_bits;
    int64_t ef = (code >> m) & ((1LL << e) - 1), fr = code & ((1LL << m) - 1);
    c.neg = (int)((code >> (e + m)) & 1);
    if (ef == (1LL << e) - 1) {
        if (fr) c.nan = 1; else c.inf = 1;
        return c;
    }
    if (ef == 0 && fr == 0) return c;
    c.sig = ef ? (fr | (1LL << m)) : fr;
    c.exp = ef ? ef - p->s_bias : 1 - p->s_bias;
    if (c.neg) c.sig = -c.sig;
    return c;
}

/* v 2^sh as an integer, rounded by mode; *lost |= dropped nonzero bits. */
static inline int64_t fa_align(int64_t v, int64_t sh, int mode, int *lost) {
    if (sh >= 0) return (int64_t)((uint64_t)v << (sh > 62 ? 62 : sh));  /* a negative v: shift its bits (C's << is UB there) */
    int neg = v < 0;
    uint64_t mag = neg ? (uint64_t)(-v) : (uint64_t)v;
    int64_t r = -sh;
    uint64_t q, rem, half;
    if (r > 62) { q = 0; rem = mag; half = (uint64_t)1 << 62; }
    else { q = mag >> r; rem = mag & (((uint64_t)1 << r) - 1); half = ((uint64_t)1 << r) >> 1; }
    if (rem) *lost = 1;
    if (mode == FA_FLOOR) q += (neg && rem);
    else if (mode == FA_HALF_EVEN) q += (r <= 62) && ((rem > half) || (rem == half && half && (q & 1)));
    return neg ? -(int64_t)q : (int64_t)q;
}

/* floatacc.rounding.round_scaled of N 2^q into the storage code (+0 for a zero result). */
static inline int64_t fa_round(int64_t N, int64_t q, const fa_params *p, int64_t *ovf, int64_t *unf) {
    if (N == 0) return 0;
    int neg = N < 0;
    uint64_t mag = neg ? (uint64_t)(-N) : (uint64_t)N;
    int64_t m = p->p_m, emin = p->p_emin;
    int64_t L = fa_bitlen(mag) - 1;
    int64_t Q = (L + q > emin ? L + q : emin) - m;
    int64_t s = Q - q;
    uint64_t n, rem = 0, half = 0;
    int beyond = 0;
    if (s > 62) { n = 0; rem = mag; beyond = 1; }
    else if (s > 0) { n = mag >> s; rem = mag & (((uint64_t)1 << s) - 1); half = (uint64_t)1 << (s - 1); }
    else n = mag << (-s > 62 ? 62 : -s);
    int inc = 0;
    switch (p->rounding) {
    case FR_HALF_EVEN: inc = !beyond && (rem > half || (rem == half && half && (n & 1))); break;
    case FR_HALF_AWAY: inc = !beyond && (rem > half || (rem == half && half)); break;
    case FR_FLOOR: inc = rem && neg; break;
    case FR_CEIL: inc = rem && !neg; break;
    default: break;
    }
    n += inc;
    int64_t code = (int64_t)n + (n ? (Q - emin + m) << m : 0);
    if (code > p->p_maxc) {
        int toward0 = p->rounding == FR_TOWARD_ZERO || (p->rounding == FR_FLOOR && !neg)
                      || (p->rounding == FR_CEIL && neg);
        int to_max = p->overflow == FO_SATURATE || !p->p_has_inf || (p->overflow == FO_IEEE && toward0);
        code = to_max ? p->p_maxc : p->p_inf_code;
        (*ovf)++;
    }
    if (n == 0) { (*unf)++; return 0; }
    return (code << (p->s_man_bits - p->p_m)) | (neg ? p->s_sign_bit : 0);
}

/* The code of a chunk from its exact sum and specials (fused._finish). */
static inline int64_t fa_finish(int64_t s, int64_t emax, int nan, int pos, int negi, const fa_params *p,
                                int64_t *st) {
    if (pos && negi) nan = 1;
    if (nan) return p->nan_code;
    if (pos || negi) return negi ? (p->s_sign_bit | p->s_inf_code) : p->s_inf_code;
    return fa_round(s, emax - p->F, p, &st[0], &st[1]);
}

/* Product specials of one chunk (only called when a flag is set in the chunk). */
static inline void fa_prod_specials(const uint8_t *fa, const uint8_t *fb, int64_t n, int *nan, int *pos,
                                    int *neg) {
    for (int64_t k = 0; k < n; k++) {
        unsigned x = fa[k], y = fb[k];
        if ((x | y) & FA_NAN || (x & FA_INF && y & FA_ZERO) || (x & FA_ZERO && y & FA_INF)) { *nan = 1; continue; }
        if ((x | y) & FA_INF) { if ((x ^ y) & FA_NEG) *neg = 1; else *pos = 1; }
    }
}

/* Promotion: total += d in float32 (one RNE add); counts a finite sum that became Inf. */
static inline float fa_promote(float total, int64_t dcode, int64_t *st) {
    uint32_t u = (uint32_t)dcode;
    float d;
    memcpy(&d, &u, 4);
    float t = total + d;
    if (isinf(t) && !isinf(total) && !isinf(d) && !isnan(total) && !isnan(d)) st[0]++;
    return t;
}

static inline int64_t fa_total_code(float total, const fa_params *p) {
    if (isnan(total)) return p->nan_code;
    uint32_t u;
    memcpy(&u, &total, 4);
    return (int64_t)u;
}

/* The end of a chunk: C's aligned term added to the products' sum s, the lost-bit count of a
 * finite result, the rounding (fa_finish), then the promotion to float32 where it falls due. */
static inline int64_t fa_close(int64_t s, const fa_c *cc, int64_t emax, int64_t lost, int nan, int pos, int neg,
                               int64_t q, const fa_params *p, float *total, int64_t *sti) {
    int cl = 0;
    if (cc->sig) s += fa_align(cc->sig, p->F - p->s_man_bits + cc->exp - emax, p->align, &cl);
    if (!(nan || pos || neg)) sti[2] += lost + cl;
    int64_t code = fa_finish(s, emax, nan, pos, neg, p, sti);
    if (p->promote && ((q + 1) * p->chunk % p->promote == 0 || q + 1 == p->K / p->chunk)) {
        *total = fa_promote(*total, code, sti);
        code = 0;
    }
    return code;
}

/* The chunk input of an output: its C code (+0 when promoting; *total then starts at C). */
static inline int64_t fa_open(int64_t cv, const fa_params *p, float *total) {
    uint32_t u = (uint32_t)cv;
    memcpy(total, &u, 4);
    return p->promote ? 0 : cv;
}

static inline int32_t fa_pmax(const int32_t *restrict ea, const int32_t *restrict eb, int n) {
    int32_t pm = INT32_MIN;
    for (int k = 0; k < n; k++) {
        int32_t P = ea[k] + eb[k];
        pm = P > pm ? P : pm;
    }
    return pm;
}

/* One fused chunk of n terms, truncation on int32 lanes: |a| |b| 2^(F - f_m) >> (E_max - P). */
static inline int64_t fa_chunk32(const int32_t *restrict ua, const int32_t *restrict ea,
                                 const int32_t *restrict ga, const int32_t *restrict ub,
                                 const int32_t *restrict eb, const int32_t *restrict gb, int n, int32_t emax,
                                 int32_t base, int64_t *lost) {
    int32_t sum = 0, nl = 0;
    for (int k = 0; k < n; k++) {
        int32_t r = emax - (ea[k] + eb[k]);
        r = r > 31 ? 31 : r;
        int32_t mag = (ua[k] * ub[k]) << base;
        int32_t t = mag >> r;
        nl += (t << r) != mag;
        int32_t g = ga[k] ^ gb[k];
        sum += (t ^ g) - g;
    }
    *lost += nl;
    return sum;
}

/* The same on int64 with any alignment mode. */
static inline int64_t fa_chunk64(const int32_t *ua, const int32_t *ea, const int32_t *ga, const int32_t *ub,
                                 const int32_t *eb, const int32_t *gb, int64_t n, int64_t emax, int64_t base,
                                 int mode, int64_t *lost) {
    int64_t sum = 0, nl = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = (int64_t)ua[k] * ub[k];
        if (!v) continue;
        if (ga[k] ^ gb[k]) v = -v;
        int l = 0;
        sum += fa_align(v, base + ea[k] + eb[k] - emax, mode, &l);
        nl += l;
    }
    *lost += nl;
    return sum;
}

/* D = fused(C; A B): A as (M, K) magnitudes ua, exponents ea, sign masks ga (0 / -1), flags fa;
 * B the same as (N, K) rows (or (M, K) when batched); c, d (M, N) storage codes;
 * st (M, 3): overflows, underflows, terms_inexact of each row. */
FA_DISPATCH static void fa_fused(const int32_t *ua, const int32_t *ea, const int32_t *ga, const uint8_t *fa,
                     const int32_t *ub, const int32_t *eb, const int32_t *gb, const uint8_t *fb,
                     const uint8_t *qa, const uint8_t *qb,
                     const int64_t *c, int64_t *d, int64_t *st, int64_t M, int64_t N, const fa_params *p,
                     int threads) {
    int64_t K = p->K, ch = p->chunk, nch = K / ch;
    int64_t base = p->F - p->fm;
    (void)threads;
#ifdef FXPSIM_OPENMP
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
    for (int64_t i = 0; i < M; i++) {
        int64_t *sti = st + 3 * i;
        for (int64_t j = 0; j < N; j++) {
            int64_t jb = p->batched ? i : j;
            const int32_t *ua_ = ua + i * K, *ea_ = ea + i * K, *ga_ = ga + i * K;
            const int32_t *ub_ = ub + jb * K, *eb_ = eb + jb * K, *gb_ = gb + jb * K;
            const uint8_t *fa_ = fa + i * K, *fb_ = fb + jb * K;
            float total;
            int64_t code = fa_open(c[i * N + j], p, &total);
            for (int64_t q = 0; q < nch; q++) {
                int64_t k0 = q * ch;
                fa_c cc = fa_split(code, p);
                int32_t pm = fa_pmax(ea_ + k0, eb_ + k0, (int)ch);
                int64_t emax = pm > cc.exp ? pm : cc.exp;
                int nan = cc.nan, pos = cc.inf && !cc.neg, neg = cc.inf && cc.neg;
                if (qa[i * nch + q] | qb[jb * nch + q]) fa_prod_specials(fa_ + k0, fb_ + k0, ch, &nan, &pos, &neg);
                int64_t lost = 0, s;
                if (p->fast32)
                    s = fa_chunk32(ua_ + k0, ea_ + k0, ga_ + k0, ub_ + k0, eb_ + k0, gb_ + k0, (int)ch, (int32_t)emax,
                                   (int32_t)base, &lost);
                else
                    s = fa_chunk64(ua_ + k0, ea_ + k0, ga_ + k0, ub_ + k0, eb_ + k0, gb_ + k0, ch, emax, base,
                                   p->align, &lost);
                code = fa_close(s, &cc, emax, lost, nan, pos, neg, q, p, &total, sti);
            }
            d[i * N + j] = p->promote ? fa_total_code(total, p) : code;
        }
    }
}

/* D = block(C; A B): ia, ib grid integers (value = I 2^(e_min - m)), flags fa, fb as fused;
 * scales per group start: sas, sae (M, K / block) significands / exponents, san NaN flags; sbs, sbe,
 * sbn (N or M, K / block). */
FA_DISPATCH static void fa_block(const int32_t *ia, const uint8_t *fa, const int32_t *ib, const uint8_t *fb,
                     const int64_t *sas, const int64_t *sae, const uint8_t *san,
                     const int64_t *sbs, const int64_t *sbe, const uint8_t *sbn,
                     const int64_t *c, int64_t *d, int64_t *st, int64_t M, int64_t N, const fa_params *p,
                     int threads) {
    int64_t K = p->K, ch = p->chunk, nch = K / ch, g = p->group, G = K / p->block;
    int64_t tbase = p->F + p->lsb;
    (void)threads;
#ifdef FXPSIM_OPENMP
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
    for (int64_t i = 0; i < M; i++) {
        int64_t *sti = st + 3 * i;
        int64_t vals[256], Ps[256];
        for (int64_t j = 0; j < N; j++) {
            int64_t jb = p->batched ? i : j;
            const int32_t *ia_ = ia + i * K, *ib_ = ib + jb * K;
            const uint8_t *fa_ = fa + i * K, *fb_ = fb + jb * K;
            float total;
            int64_t code = fa_open(c[i * N + j], p, &total);
            for (int64_t q = 0; q < nch; q++) {
                int64_t k0 = q * ch, ng = ch / g;
                fa_c cc = fa_split(code, p);
                int nan = cc.nan, pos = cc.inf && !cc.neg, neg = cc.inf && cc.neg;
                int64_t emax = cc.exp;
                for (int64_t h = 0; h < ng; h++) {
                    int64_t kk = k0 + h * g, sg = kk / p->block;
                    int64_t gs = 0;
                    for (int64_t k = kk; k < kk + g; k++) gs += (int64_t)ia_[k] * ib_[k];
                    int64_t ia2 = i * G + sg, ib2 = jb * G + sg;
                    vals[h] = gs * sas[ia2] * sbs[ib2];
                    Ps[h] = sae[ia2] + sbe[ib2];
                    emax = Ps[h] > emax ? Ps[h] : emax;
                    if (san[ia2] || sbn[ib2]) nan = 1;
                }
                unsigned fl = 0;
                for (int64_t k = k0; k < k0 + ch; k++) fl |= fa_[k] | fb_[k];
                if (fl & (FA_NAN | FA_INF)) fa_prod_specials(fa_ + k0, fb_ + k0, ch, &nan, &pos, &neg);
                int64_t s = 0, lost = 0;
                for (int64_t h = 0; h < ng; h++) {
                    if (!vals[h]) continue;
                    int l = 0;
                    s += fa_align(vals[h], tbase + Ps[h] - emax, p->align, &l);
                    lost += l;
                }
                code = fa_close(s, &cc, emax, lost, nan, pos, neg, q, p, &total, sti);
            }
            d[i * N + j] = p->promote ? fa_total_code(total, p) : code;
        }
    }
}

#endif /* FXPSIM_FLOATACC_H */
