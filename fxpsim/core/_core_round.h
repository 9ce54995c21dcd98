/* Exact float -> integer rounding for fxpsim's core (_core.pyx), in C so the vector pass can be
 * compiled for AVX2 and AVX-512 and chosen at run time (GCC function multi-versioning).
 *
 * fxc_round(y, mode) = round(y) for |y| < 2^51, exact and free of data-dependent branches:
 *   r = rint(y) = (y + 1.5*2^52) - 1.5*2^52   (IEEE round-to-nearest-even),
 *   c = r as an integer, read from the bits of y + 1.5*2^52,
 *   d = y - r in [-1/2, 1/2], exact (Sterbenz),
 * and every mode is c plus a correction from d: floor = c - [d < 0], ceil = c + [d > 0], and the
 * tie modes differ from rint only where |d| = 1/2.  Mode numbers are RND_* of _kernels.pxd.
 *
 * fxc_quantize_vector: the first pass of from_float.  It rounds and fits every element as if it
 * were ordinary (|x * 2^frac| < 2^51, zero or normal) and counts the others in *special, so the
 * caller can redo the array on the exact 128-bit scalar path when any exists.
 */
#ifndef FXPSIM_CORE_ROUND_H
#define FXPSIM_CORE_ROUND_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) \
    && defined(__linux__) && !defined(FXPSIM_NO_DISPATCH)
#define FXC_DISPATCH __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FXC_DISPATCH
#endif

#define FXC_MAGIC 6755399441055744.0            /* 1.5 * 2^52 */
#define FXC_MAGIC_BITS INT64_C(0x4338000000000000)
#define FXC_TWO51 2251799813685248.0
#define FXC_TINY (2.2250738585072014e-308 * 4.0)

static inline int64_t fxc_round(double y, int mode, uint64_t rnd)
{
    double t = y + FXC_MAGIC;
    double d = y - (t - FXC_MAGIC);
    uint64_t bits;
    int64_t c;
    memcpy(&bits, &t, 8);
    c = (int64_t)(bits - (uint64_t)FXC_MAGIC_BITS);   /* unsigned: no overflow for |y| >= 2^51 */
    switch (mode) {
    case 4: return c;                                                         /* half_even */
    case 0: return c + (d == 0.5);                                            /* half_up */
    case 5: return c - (d < 0.0);                                             /* floor */
    case 7: return c + (d > 0.0);                                             /* ceil */
    case 2: return c - (d == -0.5);                                           /* half_down */
    case 3: return c + ((d == 0.5) & (y > 0.0)) - ((d == -0.5) & (y < 0.0));  /* half_away */
    case 1: return c + ((d == 0.5) & (y < 0.0)) - ((d == -0.5) & (y > 0.0));  /* half_toward_zero */
    case 6: return c - ((d < 0.0) & (y > 0.0)) + ((d > 0.0) & (y < 0.0));    /* toward_zero */
    default:                                        /* stochastic: up with probability frac(y) */
        return (c - (d < 0.0)) + ((double)(rnd >> 11) * 1.1102230246251565e-16 < (d < 0.0 ? d + 1.0 : d));
    }
}

/* One loop per (rounding mode, overflow kind): every branch is decided outside the loop. */
#define FXC_LOOP(MODE, FIT)                                                         \
    for (int64_t i = 0; i < n; i++) {                                               \
        double y = x[i] * scale, a = fabs(y);                                       \
        int64_t c = fxc_round(y, MODE, 0);                                          \
        int ov = (c < lo) | (c > hi);                                               \
        special += (a >= FXC_TWO51) | (a != a) | ((a < FXC_TINY) & (x[i] != 0.0));    \
        ovf += ov;                                                                  \
        out[i] = FIT;                                                               \
    }

#define FXC_SAT (c < lo ? lo : (c > hi ? hi : c))
#define FXC_ZERO (ov ? 0 : c)
#define FXC_WRAP_S ((int64_t)((uint64_t)c << sh) >> sh)
#define FXC_WRAP_U ((int64_t)(((uint64_t)c << sh) >> sh))

#define FXC_FITS(MODE)                                                              \
    switch (fit) {                                                                  \
    case 0: FXC_LOOP(MODE, FXC_SAT) break;                                          \
    case 1: FXC_LOOP(MODE, FXC_ZERO) break;                                         \
    case 2: FXC_LOOP(MODE, FXC_WRAP_S) break;                                       \
    default: FXC_LOOP(MODE, FXC_WRAP_U) break;                                      \
    }

/* fit: 0 saturate to [lo, hi] (also saturate_symmetric and error), 1 out of range -> 0,
 * 2 signed two's-complement wrap, 3 unsigned wrap (sh = 64 - word).  Returns the overflow count. */
FXC_DISPATCH
static int64_t fxc_quantize_vector(const double *x, int64_t *out, int64_t n, double scale, int mode,
                                   int fit, int64_t lo, int64_t hi, int sh, int64_t *n_special)
{
    int64_t ovf = 0, special = 0;
    switch (mode) {
    case 0: FXC_FITS(0) break;
    case 1: FXC_FITS(1) break;
    case 2: FXC_FITS(2) break;
    case 3: FXC_FITS(3) break;
    case 4: FXC_FITS(4) break;
    case 5: FXC_FITS(5) break;
    case 6: FXC_FITS(6) break;
    default: FXC_FITS(7) break;
    }
    *n_special = special;
    return ovf;
}

#endif
