/*
 * fxpsim/datapath/_accumulate_x512.h -- what the two register-blocked AVX-512BW per-add kernels share
 * (fxa_mac16_x512 in _accumulate_x512_i16.h, fxa_mac32m_x512 in _accumulate_x512_i32.h): their arguments,
 * the slab / k tile / row block loops, and how a row's start values are loaded into its vectors and its
 * results and counts stored (or scored, in the sweep mode of _accumulate_sweep.h).
 * Their AVX2 twins (_accumulate_avx2.h, _accumulate_avx2_i32.h) share the arguments, the loops and, through
 * FXA_BLK_LOAD / FXA_BLK_STORE, the loading and storing too.
 *
 * AVX-512BW kernels, register-blocked: FXA_R16 rows (16-bit lanes) or FXA_R32
 * rows (32-bit lanes) x one 64-column slab of b held in registers for a whole
 * k tile, so each load of b feeds several rows and the accumulators and
 * overflow counters never leave registers inside a tile.  Overflow counting
 * is one mask compare and one masked add per vector per add (no horizontal
 * work); the 16-/32-bit lane counters are flushed into the int64 counts once
 * per tile of FXA_KTILE steps (< 2^15, so a 16-bit counter cannot wrap).
 *
 * Common arguments (both kernels):
 *   a        rows of K multiplicands (int16), row stride lda
 *   rows     nrows source-row indices into a, or NULL (row i is a + i * lda)
 *   b        b packed in 64-column slabs [ceil(N/64), K, 64] (int16, zero padded)
 *   slabs    N/64 slab indices into b (output columns 64s..64s+63 read slab
 *            slabs[s]: a subset of b's columns, nothing copied), or NULL (all)
 *   init     start values: output (i, j) starts at init[i * init_ld + c * init_cs],
 *            c the column of b it reads (init_ld = 0: one row shared by every
 *            output row; init_cs = 0: one value per row), or NULL for zeros
 *   out, cnt [nrows, N] int64 results and per-output overflow counts; cnt may
 *            be NULL: no counting at all (cheaper loops)
 *   mode     FXA_SAT / FXA_ZERO / FXA_WRAP_S / FXA_WRAP_U (32-bit only) / FXA_EXACT
 *   lo, hi   accumulator range; sh = lane bits - word (FXA_WRAP_S)
 */
#ifndef FXPSIM_ACCUMULATE_X512_H
#define FXPSIM_ACCUMULATE_X512_H

#include "_accumulate_common.h"
#include "_accumulate_sweep.h"

/* The arguments of both kernels; LT: the lane type of init, lo and hi (int16_t or int32_t). */
#define FXA_X512_ARGS(LT)                                                                           \
    const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b, const int64_t *slabs,     \
    const LT *init, ptrdiff_t init_ld, ptrdiff_t init_cs, int64_t *out, int64_t *cnt, ptrdiff_t nrows, \
    ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo, int mode, LT lo, LT hi, int sh, const fxa_sweep *sw,     \
    fxa_sweep_out *so

#if FXA_HAVE_I16
#include <immintrin.h>

#define FXA_R16 4
#define FXA_R32 2
#ifndef FXA_KTILE
#define FXA_KTILE 1024
#endif

/* The loops of a kernel: 64-column slabs (j0; src0 the slab's first column of b), k tiles of FXA_KTILE
 * steps [k0, k1), blocks of RB rows (then single rows); BLOCK(R) runs R rows from row i over one tile. */
#define FXA_X512_LOOPS(RB, BLOCK)                                                                   \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += 64) {                                                      \
        const ptrdiff_t len = N - j0 < 64 ? N - j0 : 64;                                            \
        const ptrdiff_t src0 = slabs ? slabs[j0 / 64] * 64 : j0;          /* the slab's first column of b */ \
        const int16_t *bslab = b + (src0 / 64) * K * 64;                                            \
        ptrdiff_t k0 = 0;                                                                           \
        do {                                                                                        \
            const ptrdiff_t k1 = K - k0 < FXA_KTILE ? K : k0 + FXA_KTILE;                           \
            ptrdiff_t i = 0;                                                                        \
            for (; i + (RB) <= nrows; i += (RB))                                                    \
                BLOCK(RB)                                                                           \
            for (; i < nrows; i++)                                                                  \
                BLOCK(1)                                                                            \
            k0 = k1;                                                                                \
        } while (k0 < K);                                                                           \
    }

/*
 * A kernel's lane layout, given by its macros: LT the lane type; POS(j) the lane of tmp[64] that holds
 * column j; SET(V, r, X) sets every vector of row r (V = acc: accumulators, ov: counters) to X; GET(V, r, P)
 * loads them from the 64 lanes at P, PUT(P, V, r) stores them there; DIRECT(r): a shorter way to the start
 * values (an `else if` branch) or nothing.
 *
 * FXA_X512_LOAD: row i + r's start values (the previous tile's results after the first tile) into its vectors,
 * its counters zeroed.
 */
#define FXA_X512_LOAD(r, LT, POS, SET, GET, SET1, DIRECT)                                           \
    FXA_BLK_LOAD(r, LT, POS, SET, GET, SET1, DIRECT, _mm512_setzero_si512())
/* the same for any vector width: ZERO, the zero vector (_accumulate_avx2.h uses it with AVX2 registers) */
#define FXA_BLK_LOAD(r, LT, POS, SET, GET, SET1, DIRECT, ZERO)                                      \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        ar##r = a + (rows ? rows[row] : row) * lda;                                                 \
        if (k0 == 0 && !init) {                                                                     \
            SET(acc, r, ZERO)                                                                       \
        } else if (k0 == 0 && init_cs == 0) {      /* one start value per row (padding too) */      \
            SET(acc, r, SET1(init[row * init_ld]))                                                  \
        } DIRECT(r) else {                                                                          \
            for (int j = 0; j < 64; j++)                                                            \
                tmp[POS(j)] = j >= len ? 0 : k0 > 0 ? (LT)out[row * ldo + j0 + j]                   \
                              : init[row * init_ld + (src0 + j) * init_cs];                         \
            GET(acc, r, tmp)                                                                        \
        }                                                                                           \
        SET(ov, r, ZERO)                                                                            \
    }

/* FXA_X512_STORE: row i + r's results and counts (UT: the counters' unsigned lane type) after the tile: stored
 * in out / cnt (added to the previous tiles' counts), or, in the last tile of the sweep mode, scored. */
#define FXA_X512_STORE(r, UT, POS, PUT) FXA_BLK_STORE(r, UT, POS, PUT, fxa_sweep_row)
/* the same with SCORE, the sweep-row scorer compiled for the kernel's ISA */
#define FXA_BLK_STORE(r, UT, POS, PUT, SCORE)                                                       \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        PUT(tmp, acc, r)                                                                            \
        if (sw && k1 == K) {                                                                        \
            int32_t v32[64], e32[64];                                                               \
            for (int j = 0; j < 64; j++)                                                            \
                v32[j] = tmp[POS(j)];                                                               \
            PUT(tmp, ov, r)                                                                         \
            for (int j = 0; j < 64; j++)                                                            \
                e32[j] = (UT)tmp[POS(j)];                                                           \
            if (k0 > 0)                                                                             \
                for (ptrdiff_t j = 0; j < len; j++)                                                 \
                    e32[j] += (int32_t)cnt[row * ldo + j0 + j];                                     \
            SCORE(sw, so, rows ? rows[row] : row, src0, len, v32, e32);                             \
        } else {                                                                                    \
            for (ptrdiff_t j = 0; j < len; j++)                                                     \
                out[row * ldo + j0 + j] = tmp[POS(j)];                                              \
            if (cnt) {                                                                              \
                PUT(tmp, ov, r)                                                                     \
                for (ptrdiff_t j = 0; j < len; j++)                                                 \
                    cnt[row * ldo + j0 + j] = (k0 > 0 ? cnt[row * ldo + j0 + j] : 0) + (UT)tmp[POS(j)]; \
            }                                                                                       \
        }                                                                                           \
    }
#endif /* FXA_HAVE_I16 */

#endif /* FXPSIM_ACCUMULATE_X512_H */
