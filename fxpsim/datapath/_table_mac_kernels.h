/*
 * fxpsim/datapath/_table_mac_kernels.h -- the int32 loop of _table_mac.pyx (hls4ml's Dense / Conv2D over a
 * product table), for accumulators of at most 30 bits.
 *
 *   out[r, j] := fit(... fit(fit(bias[j] + T[rows[r, 0], j]) + T[rows[r, 1], j]) ...), k in input order
 *
 * Every value (bias, table entries, lo, hi, every accumulator) lies in [-2^29, 2^29): each sum of two fits an
 * int32, so the lanes never overflow.  Rows are done two at a time (two independent chains of adds and clamps)
 * with the accumulators of a block of up to FXT_BLOCK outputs in local arrays (the compiler keeps them in vector
 * registers), k innermost: the table rows a sample reads are its only memory traffic.  Compiled for x86-64-v4 / v3 / baseline by FXA_CLONES.
 */
#ifndef FXPSIM_TABLE_MAC_KERNELS_H
#define FXPSIM_TABLE_MAC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "_accumulate_common.h"

#define FXT_BLOCK 64

/* One step of the fit over the accumulators of two rows (a and b: independent chains, so the adds and clamps of
 * one hide the latency of the other's). */
#define FXT_STEP(MODE, ACC, T)                                                                                    \
    for (ptrdiff_t j = 0; j < nb; j++) {                                                                          \
        int32_t v = ACC[j] + T[j];                                                                                \
        if (MODE == 1) {                                                                                          \
            v = v < lo ? lo : v;                                                                                  \
            v = v > hi ? hi : v;                                                                                  \
        } else if (MODE == 2) {                                                                                   \
            v = (v < lo || v > hi) ? 0 : v;                                                                       \
        }                                                                                                         \
        ACC[j] = v;                                                                                               \
    }

#define FXT_LOOP(MODE)                                                                                            \
    for (; r + 1 < R; r += 2) {                                                                                   \
        const int64_t *ra = rows + r * K, *rb = ra + K;                                                           \
        for (ptrdiff_t j = 0; j < nb; j++)                                                                        \
            a[j] = b[j] = (int32_t)bias[j0 + j];                                                                  \
        for (ptrdiff_t k = 0; k < K; k++) {                                                                       \
            const int32_t *ta = table + ra[k] * N + j0, *tb = table + rb[k] * N + j0;                             \
            FXT_STEP(MODE, a, ta)                                                                                 \
            FXT_STEP(MODE, b, tb)                                                                                 \
        }                                                                                                         \
        for (ptrdiff_t j = 0; j < nb; j++) {                                                                      \
            out[r * N + j0 + j] = a[j];                                                                           \
            out[(r + 1) * N + j0 + j] = b[j];                                                                     \
        }                                                                                                         \
    }                                                                                                             \
    for (; r < R; r++) {                                                                                          \
        const int64_t *ra = rows + r * K;                                                                         \
        for (ptrdiff_t j = 0; j < nb; j++)                                                                        \
            a[j] = (int32_t)bias[j0 + j];                                                                         \
        for (ptrdiff_t k = 0; k < K; k++) {                                                                       \
            const int32_t *ta = table + ra[k] * N + j0;                                                           \
            FXT_STEP(MODE, a, ta)                                                                                 \
        }                                                                                                         \
        for (ptrdiff_t j = 0; j < nb; j++)                                                                        \
            out[r * N + j0 + j] = a[j];                                                                           \
    }

/* mode 0: plain sums (the caller proved every partial sum fits); 1: saturate to [lo, hi]; 2: 0 outside [lo, hi]. */
static FXA_CLONES void fxt_table_mac32(const int64_t *rows, ptrdiff_t R, ptrdiff_t K, const int32_t *table,
                                       ptrdiff_t N, const int64_t *bias, int mode, int32_t lo, int32_t hi,
                                       int64_t *out) {
    int32_t a[FXT_BLOCK], b[FXT_BLOCK];
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXT_BLOCK) {
        const ptrdiff_t nb = N - j0 < FXT_BLOCK ? N - j0 : FXT_BLOCK;
        ptrdiff_t r = 0;
        if (mode == 0) {
            FXT_LOOP(0)
        } else if (mode == 1) {
            FXT_LOOP(1)
        } else {
            FXT_LOOP(2)
        }
    }
}

#endif
