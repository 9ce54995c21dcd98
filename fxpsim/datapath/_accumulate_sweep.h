/*
 * fxpsim/datapath/_accumulate_sweep.h -- the sweep mode of the register-blocked kernels (_accumulate_x512_*.h,
 * their AVX2 twins _accumulate_avx2*.h).
 *
 * Sweep mode (fxpsim.hardware.node_sweep): instead of storing the results, the
 * last k tile scores them in place against the exact accumulators -- one more
 * fitted add for a bias added after the sum, events counted, the output code of
 * every accumulator that differs from the exact one computed by the fused
 * TFLite requantization (requantize._fused_constants) and compared with the
 * reference code -- so a width/mode point of a node costs one pass.
 */
#ifndef FXPSIM_ACCUMULATE_SWEEP_H
#define FXPSIM_ACCUMULATE_SWEEP_H

#include "_accumulate_common.h"

typedef struct {
    const int64_t *exact;       /* exact accumulators, row erow at exact + erow * e_ld, column = b's column  */
    const int32_t *ref;         /* reference output codes, same layout                                     */
    ptrdiff_t e_ld;
    int ch_mode;                /* channel of an output: 0 its column, 1 its kernel row, 2 slab_ch[slab]    */
    const int64_t *slab_ch;
    ptrdiff_t period, nvalid;   /* column c is an output when (c mod period) < nvalid (padding otherwise)   */
    const int64_t *bias_after;  /* per channel (one more fitted add), or NULL                              */
    const int64_t *fmul, *fadd, *fnudge, *fshift;   /* fused requantization per channel                      */
    int64_t code_lo, code_hi;
    int width, mode;            /* the register: FXA_SAT / FXA_ZERO / FXA_WRAP_S                           */
    uint8_t *flags;             /* [erows, n_slabs]: 1 where an output of that row and slab overflowed     */
    ptrdiff_t n_slabs;
} fxa_sweep;

typedef struct { int64_t events, not_exact, sum_err, max_err; } fxa_sweep_out;

#if FXA_HAVE_I16
/* Score one kernel row's len results (natural column order): val = accumulators, evn = events so far.
 * Straight loops over at most 64 lanes, written for the compiler to vectorise (no early exits). */
#define FXA_SWEEP_ROW(NAME, TARGET)                                                                             \
__attribute__((target(TARGET)))                                                                                 \
static inline void NAME(const fxa_sweep *sw, fxa_sweep_out *so, ptrdiff_t erow, ptrdiff_t src0,                 \
                 ptrdiff_t len, const int32_t *val, const int32_t *evn)                                         \
{                                                                                                               \
    const int64_t *e = sw->exact + erow * sw->e_ld + src0;                                                      \
    const int32_t *rf = sw->ref + erow * sw->e_ld + src0;                                                       \
    const ptrdiff_t base = src0 % sw->period;                                                                   \
    const ptrdiff_t n = len < sw->nvalid - base ? len : (sw->nvalid - base > 0 ? sw->nvalid - base : 0);        \
    const int64_t lo = sw->code_lo, hi = sw->code_hi, half = (int64_t)1 << 30;                                  \
    const int64_t rlo = -((int64_t)1 << (sw->width - 1)), rhi = ((int64_t)1 << (sw->width - 1)) - 1;            \
    const int rsh = 64 - sw->width;                                                                             \
    int64_t v[64], ev[64], m[64], ad[64], nu[64], sh[64];                                                       \
    int64_t events = 0, bad = 0, sum = 0, mx = 0;                                                               \
    if (n <= 0)                                                                                                 \
        return;                                                                                                 \
    for (ptrdiff_t j = 0; j < n; j++) {                                                                         \
        v[j] = val[j];                                                                                          \
        ev[j] = evn[j];                                                                                         \
    }                                                                                                           \
    if (sw->ch_mode == 0) {                 /* one channel per column */                                        \
        for (ptrdiff_t j = 0; j < n; j++) {                                                                     \
            m[j] = sw->fmul[src0 + j];                                                                          \
            ad[j] = sw->fadd[src0 + j] - half;                                                                  \
            nu[j] = sw->fnudge[src0 + j];                                                                       \
            sh[j] = sw->fshift[src0 + j];                                                                       \
        }                                                                                                       \
        if (sw->bias_after)                                                                                     \
            for (ptrdiff_t j = 0; j < n; j++)                                                                   \
                v[j] += sw->bias_after[src0 + j];                                                               \
    } else {                                /* one channel for the whole row of columns */                      \
        const ptrdiff_t c = sw->ch_mode == 1 ? erow : sw->slab_ch[src0 / 64];                                   \
        for (ptrdiff_t j = 0; j < n; j++) {                                                                     \
            m[j] = sw->fmul[c];                                                                                 \
            ad[j] = sw->fadd[c] - half;                                                                         \
            nu[j] = sw->fnudge[c];                                                                              \
            sh[j] = sw->fshift[c];                                                                              \
        }                                                                                                       \
        if (sw->bias_after)                                                                                     \
            for (ptrdiff_t j = 0; j < n; j++)                                                                   \
                v[j] += sw->bias_after[c];                                                                      \
    }                                                                                                           \
    if (sw->bias_after) {                   /* the bias added after the sum: one more fitted add */             \
        for (ptrdiff_t j = 0; j < n; j++)                                                                       \
            ev[j] += (v[j] < rlo) | (v[j] > rhi);                                                               \
        if (sw->mode == FXA_SAT)                                                                                \
            for (ptrdiff_t j = 0; j < n; j++)                                                                   \
                v[j] = v[j] < rlo ? rlo : v[j] > rhi ? rhi : v[j];                                              \
        else if (sw->mode == FXA_ZERO)                                                                          \
            for (ptrdiff_t j = 0; j < n; j++)                                                                   \
                v[j] = (v[j] < rlo) | (v[j] > rhi) ? 0 : v[j];                                                  \
        else                                                                                                    \
            for (ptrdiff_t j = 0; j < n; j++)                                                                   \
                v[j] = (int64_t)((uint64_t)v[j] << rsh) >> rsh;                                                 \
    }                                                                                                           \
    for (ptrdiff_t j = 0; j < n; j++) {                                                                         \
        int64_t y = v[j] * m[j] + half;                                                                         \
        y += y < 0 ? nu[j] : 0;                                                                                 \
        int64_t code = (y + ad[j]) >> sh[j];                                                                    \
        code = code < lo ? lo : code > hi ? hi : code;                                                          \
        int64_t d = code - rf[j];                                                                               \
        d = d < 0 ? -d : d;                                                                                     \
        d = v[j] != e[j] ? d : 0;                                                                               \
        events += ev[j];                                                                                        \
        bad += d != 0;                                                                                          \
        sum += d;                                                                                               \
        mx = d > mx ? d : mx;                                                                                   \
    }                                                                                                           \
    so->events += events;                                                                                       \
    so->not_exact += bad;                                                                                       \
    so->sum_err += sum;                                                                                         \
    so->max_err = mx > so->max_err ? mx : so->max_err;                                                          \
    if (events && sw->flags)                                                                                    \
        sw->flags[erow * sw->n_slabs + src0 / 64] = 1;                                                          \
}

/* one per ISA of the kernels that call it (a function for another ISA cannot be inlined, and its code must
 * not run on a CPU without it) */
FXA_SWEEP_ROW(fxa_sweep_row, "avx512f,avx512bw,avx512dq")
FXA_SWEEP_ROW(fxa_sweep_row_avx2, "avx2")
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_SWEEP_H */
