/*
 * fxpsim/datapath/_conv_int8_cache.h -- what a prepared call of the fused int8 kernel keeps between calls.
 *
 * Plain C, included by _conv_int8.h after fxc_params (see fxc_run there).
 */
#ifndef FXPSIM_CONV_INT8_CACHE_H
#define FXPSIM_CONV_INT8_CACHE_H

/* What a layer's calls derive from its weights, bias and output stage alone, kept between calls by a prepared
 * call (fxc_run with a cache): the per-channel sum |w[o,k]| of the exactness bound, the lane-paired output
 * constants and each kernel's weight layout, each built by the first call that needs it (may_pack) and freed by
 * fxc_cache_free.  The layouts are the ones fxc_run builds for an uncached call, byte for byte. */
typedef struct {
    int64_t *swabs;         /* [O] sum_k |w[o,k]| */
    int64_t *rq16;          /* as fxc_params.rq16 (built whatever accmax; used only where it passes) */
    int8_t *wq; int32_t *corr;          /* dense exact (VNNI) */
    int16_t *w2;                        /* depthwise C <= 16: [T][32] pairs, then b2 zeros [32], b2 bias [32] */
    int16_t *w16d, *b16d;               /* depthwise: [T][Cp], then bias [Cp] (zeros at [Cp..2Cp)) */
    int16_t *w16p, *b16p;               /* dense per-add W = 16 */
    int32_t *wt;                        /* portable */
} fxc_cache;

static void fxc_cache_free(fxc_cache *K)
{
    free(K->swabs); free(K->rq16); free(K->wq); free(K->corr); free(K->w2); free(K->w16d); free(K->b16d);
    free(K->w16p); free(K->b16p); free(K->wt);
    memset(K, 0, sizeof *K);
}

/* sum_k |w[o,k]| of channel o. */
static int64_t fxc_swabs_one(const fxc_params *P, const int8_t *w, ptrdiff_t o)
{
    const ptrdiff_t K = P->KH * P->KW * (P->depthwise ? 1 : P->C);
    int64_t sw = 0;
    for (ptrdiff_t k = 0; k < K; k++) {
        const int v = P->depthwise ? w[k * P->C + o] : w[o * K + k];
        sw += v < 0 ? -v : v;
    }
    return sw;
}

/* sum_k |w[o,k]| of every channel into swo[O]. */
static void fxc_swabs(const fxc_params *P, const int8_t *w, int64_t *swo)
{
    for (ptrdiff_t o = 0; o < P->O; o++)
        swo[o] = fxc_swabs_one(P, w, o);
}

#endif /* FXPSIM_CONV_INT8_CACHE_H */
