/*
 * fxpsim/_accumulate.h -- vectorised per-add multiply-accumulate kernels.
 *
 * Plain C, no Python.  Included by fxpsim/_accumulate.pyx.
 *
 *   acc[i, j] <- fit(acc[i, j] + a[i, k] * b[k, j])   for k = 0 .. K-1 (in order)
 *   cnt[i, j] <- number of k where the add left the accumulator's range
 *
 * The loop order is j block (FXA_JB output columns held in registers; b is
 * packed so that the block's K x FXA_JB slab is contiguous and stays in
 * cache) -> i (rows) -> k (reduction, in order) -> j (vectorised lanes).  Every output
 * sees its adds in the exact sequential order k = 0, 1, ..., K-1, so the
 * result equals a per-add scalar model bit for bit.
 *
 * Lane types are int32_t or int64_t.  The Python caller guarantees that
 * |acc| + |a*b| fits the lane type (bounds taken from the data), so the
 * signed arithmetic below never overflows (no undefined behaviour); wrapping
 * to the accumulator width goes through unsigned arithmetic.
 *
 * Portability: no -march flag is needed.  With GCC >= 11 on x86-64 Linux the
 * kernels are compiled three times (x86-64-v4 = AVX-512, x86-64-v3 = AVX2,
 * baseline) via function multi-versioning, and the dynamic loader picks the
 * best variant for the CPU at run time.  Define FXPSIM_NO_CLONES to disable.
 */
#ifndef FXPSIM_ACCUMULATE_H
#define FXPSIM_ACCUMULATE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__)               \
    && defined(__linux__) && !defined(FXPSIM_NO_CLONES)
#define FXA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FXA_HAVE_CLONES 1
#else
#define FXA_CLONES
#define FXA_HAVE_CLONES 0
#endif

/* How the exact sum s = acc + p is fitted back into the accumulator. */
enum {
    FXA_EXACT = 0,   /* no fitting: caller proved it can never overflow        */
    FXA_SAT = 1,     /* clamp to [lo, hi] (saturate, saturate_symmetric, error) */
    FXA_ZERO = 2,    /* out of [lo, hi] -> 0 (saturate_zero)                    */
    FXA_WRAP_S = 3,  /* two's complement wrap to `word` bits, signed           */
    FXA_WRAP_U = 4   /* wrap to `word` bits, unsigned (mask = hi = 2^word - 1)  */
};

/* Columns per register block: 64 int32 lanes = 4 AVX-512 registers. */
#define FXA_JB 64
/* Reduction steps per tile of b kept in L1 (FXA_KT x FXA_JB lanes). */
#ifndef FXA_KT
#define FXA_KT 96
#endif

#define FXA_FIT_EXACT(T, UT) c = s;
#define FXA_FIT_SAT(T, UT) c = s < lo ? lo : s; c = c > hi ? hi : c;
#define FXA_FIT_ZERO(T, UT) c = ((s < lo) | (s > hi)) ? (T)0 : s;
#define FXA_FIT_WRAP_S(T, UT) c = (T)((UT)s << sh) >> sh;
#define FXA_FIT_WRAP_U(T, UT) c = s & hi;

/* k loop over one register block of LEN lanes. */
#define FXA_K_LOOP(T, UT, LEN, FIT)                                                                 \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const T ak = arow[k];                                                                       \
        const T *bk = bslab + k * FXA_JB;                                                           \
        for (ptrdiff_t j = 0; j < (LEN); j++) {                                                     \
            T s = acc[j] + ak * bk[j];                                                              \
            T c;                                                                                    \
            FIT(T, UT)                                                                              \
            n[j] += (T)(c != s);                                                                    \
            acc[j] = c;                                                                             \
        }                                                                                           \
    }

#define FXA_MODE_SWITCH(T, UT, LEN)                                                                 \
    switch (mode) {                                                                                 \
    case FXA_SAT: FXA_K_LOOP(T, UT, LEN, FXA_FIT_SAT) break;                                        \
    case FXA_ZERO: FXA_K_LOOP(T, UT, LEN, FXA_FIT_ZERO) break;                                      \
    case FXA_WRAP_S: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_S) break;                                  \
    case FXA_WRAP_U: FXA_K_LOOP(T, UT, LEN, FXA_FIT_WRAP_U) break;                                  \
    default: FXA_K_LOOP(T, UT, LEN, FXA_FIT_EXACT) break;                                           \
    }

/*
 * NAME(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh)
 *   a    [nrows, K]  row-major multiplicands (already aligned to the acc LSB)
 *   b    [ceil(N / FXA_JB), K, FXA_JB]  b packed in column slabs (zero padded)
 *   init [nrows, N]  start values, or NULL for zeros
 *   out  [nrows, N]  final accumulators (int64 whatever the lane type)
 *   cnt  [nrows, N]  adds that overflowed, per output (int64; may be NULL for FXA_EXACT)
 *   lo, hi           accumulator range; sh = lane bits - word (FXA_WRAP_S only)
 */
#define FXA_DEFINE(NAME, T, UT)                                                                     \
FXA_CLONES static void NAME(const T *a, const T *b, const T *init, int64_t *out,                    \
                            int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K,                             \
                            ptrdiff_t N, int mode, T lo, T hi, int sh)                              \
{                                                                                                   \
    T acc[FXA_JB], n[FXA_JB];                                                                       \
    /* column block, then k tile, then rows: the FXA_KT x FXA_JB tile of b                          \
       stays in L1 while every row of the chunk streams over it; each row's                         \
       accumulators wait in out/cnt between tiles (adds stay in k order) */                         \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const T *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                            \
        ptrdiff_t k0 = 0;                                                                           \
        do {                                                                                        \
            const ptrdiff_t k1 = K - k0 < FXA_KT ? K : k0 + FXA_KT;                                 \
            for (ptrdiff_t i = 0; i < nrows; i++) {                                                 \
                const T *arow = a + i * K;                                                          \
                int64_t *orow = out + i * N + j0, *crow = cnt ? cnt + i * N + j0 : NULL;            \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    if (k0 == 0) {                                                                  \
                        acc[j] = init ? init[i * N + j0 + j] : (T)0;                                \
                        n[j] = 0;                                                                   \
                    } else {                                                                        \
                        acc[j] = (T)orow[j];                                                        \
                        n[j] = crow ? (T)crow[j] : 0;                                               \
                    }                                                                               \
                }                                                                                   \
                if (len == FXA_JB) {                                                                \
                    FXA_MODE_SWITCH(T, UT, FXA_JB)                                                  \
                } else {                                                                            \
                    FXA_MODE_SWITCH(T, UT, len)                                                     \
                }                                                                                   \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    orow[j] = acc[j];                                                               \
                    if (crow)                                                                       \
                        crow[j] = n[j];                                                             \
                }                                                                                   \
            }                                                                                       \
            k0 = k1;                                                                                \
        } while (k0 < K);                                                                           \
    }                                                                                               \
}

FXA_DEFINE(fxa_mac_rows_i32, int32_t, uint32_t)
FXA_DEFINE(fxa_mac_rows_i64, int64_t, uint64_t)
/* Sums modulo 2^64 (FXA_EXACT only): unsigned lanes wrap by definition, so any operands are fine.
 * Two's-complement wrapping commutes with summation, so this is the exact sum's low 64 bits. */
FXA_DEFINE(fxa_mac_rows_u64, uint64_t, uint64_t)


/*
 * Balanced pairwise adder tree, FXA_JB output columns at a time (vectorised
 * across columns).  Level 0 holds the K products unchanged; each level adds
 * neighbours (0,1), (2,3), ... and fits every sum; an odd last element is
 * passed up unchanged; finally the root is added to init and fitted.
 *   scratch  [max(K, 1), FXA_JB] per call (one per thread)
 * Other arguments as in the sequential kernels.  The caller guarantees that
 * twice the largest |product| or |accumulator code| fits the lane type.
 */
#define FXA_TREE_LEVEL(T, UT, FIT)                                                                  \
    for (ptrdiff_t t = 0; t < half; t++) {                                                          \
        const T *x = scratch + 2 * t * FXA_JB, *y = x + FXA_JB;                                     \
        T *d = scratch + t * FXA_JB;                                                                \
        for (ptrdiff_t j = 0; j < FXA_JB; j++) {                                                    \
            T s = x[j] + y[j];                                                                      \
            T c;                                                                                    \
            FIT(T, UT)                                                                              \
            n[j] += (T)(c != s);                                                                    \
            d[j] = c;                                                                               \
        }                                                                                           \
    }

#define FXA_TREE_FINAL(T, UT, FIT)                                                                  \
    for (ptrdiff_t j = 0; j < len; j++) {                                                           \
        T s = scratch[j] + (init ? init[i * N + j0 + j] : (T)0);                                    \
        T c;                                                                                        \
        FIT(T, UT)                                                                                  \
        out[i * N + j0 + j] = c;                                                                    \
        cnt[i * N + j0 + j] = n[j] + (T)(c != s);                                                   \
    }

#define FXA_TREE_SWITCH(WHAT, T, UT)                                                                \
    switch (mode) {                                                                                 \
    case FXA_SAT: WHAT(T, UT, FXA_FIT_SAT) break;                                                   \
    case FXA_ZERO: WHAT(T, UT, FXA_FIT_ZERO) break;                                                 \
    case FXA_WRAP_S: WHAT(T, UT, FXA_FIT_WRAP_S) break;                                             \
    case FXA_WRAP_U: WHAT(T, UT, FXA_FIT_WRAP_U) break;                                             \
    default: WHAT(T, UT, FXA_FIT_EXACT) break;                                                      \
    }

#define FXA_TREE_DEFINE(NAME, T, UT)                                                                \
FXA_CLONES static void NAME(const T *a, const T *b, const T *init, int64_t *out, int64_t *cnt,       \
                            T *scratch,                                                             \
                            ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode, T lo, T hi,        \
                            int sh)                                                                 \
{                                                                                                   \
    T n[FXA_JB];                                                                                    \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const T *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                            \
        for (ptrdiff_t i = 0; i < nrows; i++) {                                                     \
            const T *arow = a + i * K;                                                              \
            ptrdiff_t m = K > 0 ? K : 1;                                                            \
            for (ptrdiff_t j = 0; j < FXA_JB; j++) {                                                \
                n[j] = 0;                                                                           \
                scratch[j] = 0;                                                                     \
            }                                                                                       \
            for (ptrdiff_t k = 0; k < K; k++) {                                                     \
                const T ak = arow[k];                                                               \
                for (ptrdiff_t j = 0; j < FXA_JB; j++)                                              \
                    scratch[k * FXA_JB + j] = ak * bslab[k * FXA_JB + j];                           \
            }                                                                                       \
            while (m > 1) {                                                                         \
                const ptrdiff_t half = m / 2;                                                       \
                FXA_TREE_SWITCH(FXA_TREE_LEVEL, T, UT)                                              \
                if (m & 1)                                                                          \
                    for (ptrdiff_t j = 0; j < FXA_JB; j++)                                          \
                        scratch[half * FXA_JB + j] = scratch[(m - 1) * FXA_JB + j];                 \
                m = half + (m & 1);                                                                 \
            }                                                                                       \
            FXA_TREE_SWITCH(FXA_TREE_FINAL, T, UT)                                                  \
        }                                                                                           \
    }                                                                                               \
}

FXA_TREE_DEFINE(fxa_tree_rows_i32, int32_t, uint32_t)
FXA_TREE_DEFINE(fxa_tree_rows_i64, int64_t, uint64_t)

/* ------------------------------------------------------------------------
 * 16-bit lanes (x86 AVX-512BW / AVX2, chosen at run time): a signed
 * accumulator of at most 16 bits whose products fit int16 (e.g. int8 x int8).
 * The exact sum acc + p may leave int16, so both the saturating (adds) and
 * the wrapping (add) 16-bit sums are formed: they differ exactly when the
 * exact sum left int16, in which case it also left [lo, hi].
 *   sat mode:  c = clamp(adds, lo, hi)            ovf = c != adds | adds != add
 *   wrap mode: c = sign_extend(add, word)         ovf = c != add  | adds != add
 *   zero mode: c = ovf ? 0 : adds                 ovf = adds out of [lo,hi] | adds != add
 * Counts live in 16-bit lanes for one k tile (FXA_KT < 2^15 steps), then
 * are added to the int64 per-output counts.
 * ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------
 * Sweep mode (fxpsim.hardware.node_sweep): instead of storing the results, the
 * last k tile scores them in place against the exact accumulators -- one more
 * fitted add for a bias added after the sum, events counted, the output code of
 * every accumulator that differs from the exact one computed by the fused
 * TFLite requantization (requantize._fused_constants) and compared with the
 * reference code -- so a width/mode point of a node costs one pass.
 * ------------------------------------------------------------------------ */
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

static inline int64_t fxa_fit64(int64_t v, int width, int mode, int64_t *bad)
{
    const int64_t lo = -((int64_t)1 << (width - 1)), hi = ((int64_t)1 << (width - 1)) - 1;
    const int sh = 64 - width;
    if (v >= lo && v <= hi)
        return v;
    *bad += 1;
    if (mode == FXA_SAT)
        return v < lo ? lo : hi;
    if (mode == FXA_ZERO)
        return 0;
    return (int64_t)((uint64_t)v << sh) >> sh;
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES)
#include <immintrin.h>
#define FXA_HAVE_I16 1

#define FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD, BODY)                                     \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const VT ak = SET1(arow[k]);                                                                \
        const int16_t *bk = bslab + k * FXA_JB;                                                     \
        for (int v = 0; v < NV; v++) {                                                              \
            const VT p = MUL(ak, LOAD(bk + v * (FXA_JB / NV)));                                     \
            const VT sat = ADDS(acc[v], p), wr = ADD(acc[v], p);                                    \
            BODY                                                                                    \
        }                                                                                           \
    }

#define FXA_I16_KERNEL(NAME, TARGET, VT, NV, SET1, LOAD, STORE, MUL, ADDS, ADD, MAX, MIN, SLL, SRA, \
                       EQ, AND, ANDNOT, GT, OR, CNT_EQ, CNT_TRUE)                                   \
__attribute__((target(TARGET)))                                                                     \
static void NAME(const int16_t *a, const int16_t *b, const int16_t *init, int64_t *out,           \
                 int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, int mode, int16_t lo,     \
                 int16_t hi, int sh)                                                                \
{                                                                                                   \
    const VT vlo = SET1(lo), vhi = SET1(hi), zero = SET1(0), one = SET1(1);                         \
    const __m128i shc = _mm_cvtsi32_si128(sh);                                                      \
    const int full = (mode == FXA_SAT && lo == INT16_MIN && hi == INT16_MAX)                        \
                     || (mode == FXA_WRAP_S && sh == 0);                                            \
    int16_t tmp[FXA_JB], ok16[FXA_JB];                                                              \
    (void)one;                                                                                      \
    for (ptrdiff_t j0 = 0; j0 < N; j0 += FXA_JB) {                                                  \
        const ptrdiff_t len = N - j0 < FXA_JB ? N - j0 : FXA_JB;                                    \
        const int16_t *bslab = b + (j0 / FXA_JB) * K * FXA_JB;                                      \
        ptrdiff_t k0 = 0;                                                                           \
        do {                                                                                        \
            const ptrdiff_t k1 = K - k0 < FXA_KT ? K : k0 + FXA_KT;                                 \
            for (ptrdiff_t i = 0; i < nrows; i++) {                                                 \
                const int16_t *arow = a + i * K;                                                    \
                VT acc[NV], ok[NV];                                                                 \
                for (ptrdiff_t j = 0; j < FXA_JB; j++)                                              \
                    tmp[j] = j >= len ? 0 : k0 > 0 ? (int16_t)out[i * N + j0 + j]                            \
                             : init ? init[i * N + j0 + j] : 0;                                     \
                for (int v = 0; v < NV; v++) {                                                      \
                    acc[v] = LOAD(tmp + v * (FXA_JB / NV));                                         \
                    ok[v] = zero;                                                                   \
                }                                                                                   \
                if (full && mode == FXA_SAT) {          /* 16-bit saturate: c = adds */             \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  ok[v] = CNT_EQ(ok[v], sat, wr); acc[v] = sat;)                    \
                } else if (full) {                      /* 16-bit wrap: c = add */                  \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  ok[v] = CNT_EQ(ok[v], sat, wr); acc[v] = wr;)                     \
                } else if (mode == FXA_WRAP_S) {                                                    \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT c = SRA(SLL(wr, shc), shc);                              \
                                  ok[v] = CNT_TRUE(ok[v], AND(EQ(c, wr), EQ(sat, wr)));             \
                                  acc[v] = c;)                                                      \
                } else if (mode == FXA_ZERO) {                                                      \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT bad = OR(GT(vlo, sat), GT(sat, vhi));                    \
                                  const VT good = ANDNOT(bad, EQ(sat, wr));                         \
                                  ok[v] = CNT_TRUE(ok[v], good); acc[v] = AND(sat, good);)          \
                } else {                                                                            \
                    FXA_I16_KLOOP(VT, NV, SET1, LOAD, MUL, ADDS, ADD,                               \
                                  const VT c = MIN(MAX(sat, vlo), vhi);                             \
                                  ok[v] = CNT_TRUE(ok[v], AND(EQ(c, sat), EQ(sat, wr)));            \
                                  acc[v] = c;)                                                      \
                }                                                                                   \
                for (int v = 0; v < NV; v++) {                                                      \
                    STORE(tmp + v * (FXA_JB / NV), acc[v]);                                         \
                    STORE(ok16 + v * (FXA_JB / NV), ok[v]);                                         \
                }                                                                                   \
                for (ptrdiff_t j = 0; j < len; j++) {                                               \
                    const int32_t steps_ovf = (int32_t)(k1 - k0) - (int32_t)ok16[j];                \
                    out[i * N + j0 + j] = tmp[j];                                                   \
                    cnt[i * N + j0 + j] = (k0 > 0 ? cnt[i * N + j0 + j] : 0) + steps_ovf;           \
                }                                                                                   \
            }                                                                                       \
            k0 = k1;                                                                                \
        } while (k0 < K);                                                                           \
    }                                                                                               \
}

/* ok counts the steps that did not overflow: +1 where x == y (CNT_EQ) or where good is all ones */
#define FXA_LD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define FXA_ST256(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define FXA_CNT_EQ256(ok, x, y) _mm256_sub_epi16(ok, _mm256_cmpeq_epi16(x, y))
#define FXA_CNT_TRUE256(ok, good) _mm256_sub_epi16(ok, good)
FXA_I16_KERNEL(fxa_mac16_avx2, "avx2", __m256i, 4, _mm256_set1_epi16, FXA_LD256, FXA_ST256,
               _mm256_mullo_epi16, _mm256_adds_epi16, _mm256_add_epi16, _mm256_max_epi16,
               _mm256_min_epi16, _mm256_sll_epi16, _mm256_sra_epi16, _mm256_cmpeq_epi16,
               _mm256_and_si256, _mm256_andnot_si256, _mm256_cmpgt_epi16, _mm256_or_si256,
               FXA_CNT_EQ256, FXA_CNT_TRUE256)

/* ------------------------------------------------------------------------
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
 *            be NULL: no counting at all (the cheaper loops below)
 *   mode     FXA_SAT / FXA_ZERO / FXA_WRAP_S / FXA_WRAP_U (32-bit only) / FXA_EXACT
 *   lo, hi   accumulator range; sh = lane bits - word (FXA_WRAP_S)
 * ------------------------------------------------------------------------ */
#define FXA_R16 4
#define FXA_R32 2
#ifndef FXA_KTILE
#define FXA_KTILE 1024
#endif

/* Score one kernel row's len results (natural column order): val = accumulators, evn = events so far.
 * Straight loops over at most 64 lanes, written for the compiler to vectorise (no early exits). */
__attribute__((target("avx512f,avx512bw,avx512dq")))
static inline void fxa_sweep_row(const fxa_sweep *sw, fxa_sweep_out *so, ptrdiff_t erow, ptrdiff_t src0,
                                 ptrdiff_t len, const int32_t *val, const int32_t *evn)
{
    const int64_t *e = sw->exact + erow * sw->e_ld + src0;
    const int32_t *rf = sw->ref + erow * sw->e_ld + src0;
    const ptrdiff_t base = src0 % sw->period;
    const ptrdiff_t n = len < sw->nvalid - base ? len : (sw->nvalid - base > 0 ? sw->nvalid - base : 0);
    const int64_t lo = sw->code_lo, hi = sw->code_hi, half = (int64_t)1 << 30;
    const int64_t rlo = -((int64_t)1 << (sw->width - 1)), rhi = ((int64_t)1 << (sw->width - 1)) - 1;
    const int rsh = 64 - sw->width;
    int64_t v[64], ev[64], m[64], ad[64], nu[64], sh[64];
    int64_t events = 0, bad = 0, sum = 0, mx = 0;
    if (n <= 0)
        return;
    for (ptrdiff_t j = 0; j < n; j++) {
        v[j] = val[j];
        ev[j] = evn[j];
    }
    if (sw->ch_mode == 0) {                 /* one channel per column */
        for (ptrdiff_t j = 0; j < n; j++) {
            m[j] = sw->fmul[src0 + j];
            ad[j] = sw->fadd[src0 + j] - half;
            nu[j] = sw->fnudge[src0 + j];
            sh[j] = sw->fshift[src0 + j];
        }
        if (sw->bias_after)
            for (ptrdiff_t j = 0; j < n; j++)
                v[j] += sw->bias_after[src0 + j];
    } else {                                /* one channel for the whole row of columns */
        const ptrdiff_t c = sw->ch_mode == 1 ? erow : sw->slab_ch[src0 / 64];
        for (ptrdiff_t j = 0; j < n; j++) {
            m[j] = sw->fmul[c];
            ad[j] = sw->fadd[c] - half;
            nu[j] = sw->fnudge[c];
            sh[j] = sw->fshift[c];
        }
        if (sw->bias_after)
            for (ptrdiff_t j = 0; j < n; j++)
                v[j] += sw->bias_after[c];
    }
    if (sw->bias_after) {                   /* the bias added after the sum: one more fitted add */
        for (ptrdiff_t j = 0; j < n; j++)
            ev[j] += (v[j] < rlo) | (v[j] > rhi);
        if (sw->mode == FXA_SAT)
            for (ptrdiff_t j = 0; j < n; j++)
                v[j] = v[j] < rlo ? rlo : v[j] > rhi ? rhi : v[j];
        else if (sw->mode == FXA_ZERO)
            for (ptrdiff_t j = 0; j < n; j++)
                v[j] = (v[j] < rlo) | (v[j] > rhi) ? 0 : v[j];
        else
            for (ptrdiff_t j = 0; j < n; j++)
                v[j] = (int64_t)((uint64_t)v[j] << rsh) >> rsh;
    }
    for (ptrdiff_t j = 0; j < n; j++) {
        int64_t y = v[j] * m[j] + half;
        y += y < 0 ? nu[j] : 0;
        int64_t code = (y + ad[j]) >> sh[j];
        code = code < lo ? lo : code > hi ? hi : code;
        int64_t d = code - rf[j];
        d = d < 0 ? -d : d;
        d = v[j] != e[j] ? d : 0;
        events += ev[j];
        bad += d != 0;
        sum += d;
        mx = d > mx ? d : mx;
    }
    so->events += events;
    so->not_exact += bad;
    so->sum_err += sum;
    so->max_err = mx > so->max_err ? mx : so->max_err;
    if (events && sw->flags)
        sw->flags[erow * sw->n_slabs + src0 / 64] = 1;
}

enum {  /* loop variants of the 16-bit kernel (counting ones first) */
    FX16_SAT_FULL, FX16_SAT_NARROW, FX16_SAT_GENERAL, FX16_WRAP_FULL, FX16_WRAP_NARROW,
    FX16_ZERO_FULL, FX16_ZERO_NARROW, FX16_ZERO_GENERAL,
    FX16_N_SAT_FULL, FX16_N_SAT, FX16_N_WRAP_FULL, FX16_N_WRAP_NARROW
};

/* Loop bodies on one vector: A accumulators, O overflow counters, p products.
 * FULL: the register is the whole int16 lane (native saturating/wrapping add);
 * NARROW: hi - lo <= 32767, so a sum that leaves int16 also leaves [lo, hi] and
 *   adds() pins it on the right side (no separate wrapping add needed);
 * GENERAL: a 16-bit range that is neither (saturate_symmetric at 16 bits). */
#define FX16_B_SAT_FULL(A, O)  { const __m512i s_ = _mm512_adds_epi16(A, p_);                           \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_)), O, one); A = s_; }
#define FX16_B_SAT_NARROW(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                          \
    const __m512i c_ = _mm512_min_epi16(_mm512_max_epi16(s_, vlo), vhi);                                \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(c_, s_), O, one); A = c_; }
#define FX16_B_SAT_GENERAL(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                         \
    const __m512i c_ = _mm512_min_epi16(_mm512_max_epi16(s_, vlo), vhi);                                \
    const __mmask32 k_ = _mm512_cmpneq_epi16_mask(c_, s_) | _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_)); \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = c_; }
#define FX16_B_WRAP_FULL(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                            \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(_mm512_adds_epi16(A, p_), w_), O, one); A = w_; }
#define FX16_B_WRAP_NARROW(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                          \
    const __m512i c_ = _mm512_sra_epi16(_mm512_sll_epi16(w_, shc), shc);                                \
    O = _mm512_mask_add_epi16(O, _mm512_cmpneq_epi16_mask(c_, w_), O, one); A = c_; }
#define FX16_B_ZERO_FULL(A, O) { const __m512i w_ = _mm512_add_epi16(A, p_);                            \
    const __mmask32 k_ = _mm512_cmpneq_epi16_mask(_mm512_adds_epi16(A, p_), w_);                        \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, w_); }
#define FX16_B_ZERO_NARROW(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                         \
    const __mmask32 k_ = _mm512_cmpgt_epi16_mask(s_, vhi) | _mm512_cmplt_epi16_mask(s_, vlo);           \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, s_); }
#define FX16_B_ZERO_GENERAL(A, O) { const __m512i s_ = _mm512_adds_epi16(A, p_);                        \
    const __mmask32 k_ = _mm512_cmpgt_epi16_mask(s_, vhi) | _mm512_cmplt_epi16_mask(s_, vlo)            \
                         | _mm512_cmpneq_epi16_mask(s_, _mm512_add_epi16(A, p_));                       \
    O = _mm512_mask_add_epi16(O, k_, O, one); A = _mm512_maskz_mov_epi16((__mmask32)~k_, s_); }
#define FX16_B_N_SAT_FULL(A, O) { A = _mm512_adds_epi16(A, p_); }
#define FX16_B_N_SAT(A, O) { A = _mm512_min_epi16(_mm512_max_epi16(_mm512_adds_epi16(A, p_), vlo), vhi); }
#define FX16_B_N_WRAP_FULL(A, O) { A = _mm512_add_epi16(A, p_); }
#define FX16_B_N_WRAP_NARROW(A, O) { A = _mm512_sra_epi16(_mm512_sll_epi16(_mm512_add_epi16(A, p_), shc), shc); }

/* k loop of one register block of R rows (R = 1 or 4) x 64 columns (2 vectors per row); named
 * variables rather than arrays keep every accumulator and counter in its own register */
#define FX16_ROW(r, BODY)                                                                          \
    {                                                                                               \
        const __m512i x_ = _mm512_set1_epi16(ar##r[k]);                                             \
        { const __m512i p_ = _mm512_mullo_epi16(x_, b0_); BODY(acc##r##0, ov##r##0) }               \
        { const __m512i p_ = _mm512_mullo_epi16(x_, b1_); BODY(acc##r##1, ov##r##1) }               \
    }
#define FX16_KLOOP(R, BODY)                                                                        \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m512i b0_ = _mm512_loadu_si512((const void *)(bslab + k * 64));                     \
        const __m512i b1_ = _mm512_loadu_si512((const void *)(bslab + k * 64 + 32));                \
        FX16_ROW(0, BODY)                                                                           \
        if ((R) > 1) {                                                                              \
            FX16_ROW(1, BODY) FX16_ROW(2, BODY) FX16_ROW(3, BODY)                                   \
        }                                                                                           \
    }

#define FX16_SWITCH(R)                                                                             \
    switch (variant) {                                                                              \
    case FX16_SAT_FULL: FX16_KLOOP(R, FX16_B_SAT_FULL) break;                                       \
    case FX16_SAT_NARROW: FX16_KLOOP(R, FX16_B_SAT_NARROW) break;                                   \
    case FX16_SAT_GENERAL: FX16_KLOOP(R, FX16_B_SAT_GENERAL) break;                                 \
    case FX16_WRAP_FULL: FX16_KLOOP(R, FX16_B_WRAP_FULL) break;                                     \
    case FX16_WRAP_NARROW: FX16_KLOOP(R, FX16_B_WRAP_NARROW) break;                                 \
    case FX16_ZERO_FULL: FX16_KLOOP(R, FX16_B_ZERO_FULL) break;                                     \
    case FX16_ZERO_NARROW: FX16_KLOOP(R, FX16_B_ZERO_NARROW) break;                                 \
    case FX16_ZERO_GENERAL: FX16_KLOOP(R, FX16_B_ZERO_GENERAL) break;                               \
    case FX16_N_SAT_FULL: FX16_KLOOP(R, FX16_B_N_SAT_FULL) break;                                   \
    case FX16_N_SAT: FX16_KLOOP(R, FX16_B_N_SAT) break;                                             \
    case FX16_N_WRAP_FULL: FX16_KLOOP(R, FX16_B_N_WRAP_FULL) break;                                 \
    default: FX16_KLOOP(R, FX16_B_N_WRAP_NARROW) break;                                             \
    }

/* start values of row i + r (the previous tile's results after the first tile) -> two vectors */
#define FX16_LOAD(r)                                                                               \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        ar##r = a + (rows ? rows[row] : row) * lda;                                                 \
        if (k0 == 0 && !init) {                                                                     \
            acc##r##0 = acc##r##1 = _mm512_setzero_si512();                                         \
        } else if (k0 == 0 && init_cs == 0) {      /* one start value per row (padding too) */      \
            acc##r##0 = acc##r##1 = _mm512_set1_epi16(init[row * init_ld]);                         \
        } else if (k0 == 0 && len == 64) {                                                          \
            acc##r##0 = _mm512_loadu_si512((const void *)(init + row * init_ld + src0));            \
            acc##r##1 = _mm512_loadu_si512((const void *)(init + row * init_ld + src0 + 32));       \
        } else {                                                                                    \
            for (int j = 0; j < 64; j++)                                                            \
                tmp[j] = j >= len ? 0 : k0 > 0 ? (int16_t)out[row * ldo + j0 + j]                   \
                         : init[row * init_ld + (src0 + j) * init_cs];                              \
            acc##r##0 = _mm512_loadu_si512((const void *)tmp);                                      \
            acc##r##1 = _mm512_loadu_si512((const void *)(tmp + 32));                               \
        }                                                                                           \
        ov##r##0 = ov##r##1 = _mm512_setzero_si512();                                               \
    }
#define FX16_STORE(r)                                                                              \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        _mm512_storeu_si512((void *)tmp, acc##r##0);                                                \
        _mm512_storeu_si512((void *)(tmp + 32), acc##r##1);                                         \
        if (sw && k1 == K) {                                                                        \
            int32_t v32[64], e32[64];                                                               \
            for (int j = 0; j < 64; j++)                                                            \
                v32[j] = tmp[j];                                                                    \
            _mm512_storeu_si512((void *)tmp, ov##r##0);                                             \
            _mm512_storeu_si512((void *)(tmp + 32), ov##r##1);                                      \
            for (int j = 0; j < 64; j++)                                                            \
                e32[j] = (uint16_t)tmp[j];                                                          \
            if (k0 > 0)                                                                             \
                for (ptrdiff_t j = 0; j < len; j++)                                                 \
                    e32[j] += (int32_t)cnt[row * ldo + j0 + j];                                     \
            fxa_sweep_row(sw, so, rows ? rows[row] : row, src0, len, v32, e32);                     \
        } else {                                                                                    \
        for (ptrdiff_t j = 0; j < len; j++)                                                         \
            out[row * ldo + j0 + j] = tmp[j];                                                         \
        if (cnt) {                                                                                  \
            _mm512_storeu_si512((void *)tmp, ov##r##0);                                             \
            _mm512_storeu_si512((void *)(tmp + 32), ov##r##1);                                      \
            for (ptrdiff_t j = 0; j < len; j++)                                                     \
                cnt[row * ldo + j0 + j] = (k0 > 0 ? cnt[row * ldo + j0 + j] : 0) + (uint16_t)tmp[j];    \
        }                                                                                           \
        }                                                                                           \
    }
#define FX16_BLOCK(R)                                                                              \
    {                                                                                               \
        __m512i acc00, acc01, acc10, acc11, acc20, acc21, acc30, acc31;                             \
        __m512i ov00, ov01, ov10, ov11, ov20, ov21, ov30, ov31;                                     \
        const int16_t *ar0, *ar1 = NULL, *ar2 = NULL, *ar3 = NULL;                                  \
        acc10 = acc11 = acc20 = acc21 = acc30 = acc31 = _mm512_setzero_si512();                     \
        ov10 = ov11 = ov20 = ov21 = ov30 = ov31 = acc10;                                            \
        FX16_LOAD(0)                                                                                \
        if ((R) > 1) { FX16_LOAD(1) FX16_LOAD(2) FX16_LOAD(3) }                                     \
        FX16_SWITCH(R)                                                                              \
        FX16_STORE(0)                                                                               \
        if ((R) > 1) { FX16_STORE(1) FX16_STORE(2) FX16_STORE(3) }                                  \
        (void)ar1; (void)ar2; (void)ar3;                                                            \
    }

__attribute__((target("avx512f,avx512bw,avx512dq")))
static void fxa_mac16_x512(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                           const int64_t *slabs, const int16_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                           int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo, int mode,
                           int16_t lo, int16_t hi, int sh, const fxa_sweep *sw, fxa_sweep_out *so)
{
    const __m512i vlo = _mm512_set1_epi16(lo), vhi = _mm512_set1_epi16(hi), one = _mm512_set1_epi16(1);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int full = lo == INT16_MIN && hi == INT16_MAX;
    const int narrow = (int32_t)hi - (int32_t)lo <= INT16_MAX;
    int variant;
    int16_t tmp[64];
    (void)vlo; (void)vhi; (void)one; (void)shc;
    if (mode == FXA_WRAP_S)
        variant = cnt ? (sh == 0 ? FX16_WRAP_FULL : FX16_WRAP_NARROW)
                      : (sh == 0 ? FX16_N_WRAP_FULL : FX16_N_WRAP_NARROW);
    else if (mode == FXA_ZERO)
        variant = full ? FX16_ZERO_FULL : narrow ? FX16_ZERO_NARROW : FX16_ZERO_GENERAL;
    else if (cnt)
        variant = full ? FX16_SAT_FULL : narrow ? FX16_SAT_NARROW : FX16_SAT_GENERAL;
    else
        variant = full ? FX16_N_SAT_FULL : FX16_N_SAT;
    for (ptrdiff_t j0 = 0; j0 < N; j0 += 64) {
        const ptrdiff_t len = N - j0 < 64 ? N - j0 : 64;
        const ptrdiff_t src0 = slabs ? slabs[j0 / 64] * 64 : j0;          /* the slab's first column of b */
        const int16_t *bslab = b + (src0 / 64) * K * 64;
        ptrdiff_t k0 = 0;
        do {
            const ptrdiff_t k1 = K - k0 < FXA_KTILE ? K : k0 + FXA_KTILE;
            ptrdiff_t i = 0;
            for (; i + FXA_R16 <= nrows; i += FXA_R16)
                FX16_BLOCK(FXA_R16)
            for (; i < nrows; i++)
                FX16_BLOCK(1)
            k0 = k1;
        } while (k0 < K);
    }
}

/* --- 32-bit lanes from int16 operands: vpmaddwd forms exact 32-bit products.
 * b's 64-column slab row is two vectors of 32 int16; with x = (a, 0) in every
 * 32-bit lane, madd(x, b) = a * b[even column], with x << 16, a * b[odd column]:
 * four vectors per row hold columns (0,2,..,30), (1,3,..,31), (32,34,..), (33,..).
 * Non-FULL bodies need |acc| + |p| <= INT32_MAX (the caller checks the data);
 * FULL: a 32-bit signed register, where the sum may wrap and the overflow is
 * the sign test (s ^ acc) & (s ^ p) < 0 (vpternlogd 0x18). */
enum {
    FX32_SAT, FX32_SAT_FULL, FX32_WRAP, FX32_WRAP_FULL, FX32_WRAP_U, FX32_ZERO, FX32_ZERO_FULL,
    FX32_N_SAT, FX32_N_SAT_FULL, FX32_N_WRAP, FX32_N_ADD, FX32_N_WRAP_U
};
#define FX32_OVF(A) _mm512_cmplt_epi32_mask(_mm512_ternarylogic_epi32(s_, A, p_, 0x18), zero)
#define FX32_B_SAT(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                  \
    const __m512i c_ = _mm512_min_epi32(_mm512_max_epi32(s_, vlo), vhi);                                \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_SAT_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                             \
    const __mmask16 k_ = FX32_OVF(A);                                                               \
    O = _mm512_mask_add_epi32(O, k_, O, one);                                                       \
    A = _mm512_mask_mov_epi32(s_, k_, _mm512_xor_si512(_mm512_srai_epi32(A, 31), vmax)); }
#define FX32_B_WRAP(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                 \
    const __m512i c_ = _mm512_sra_epi32(_mm512_sll_epi32(s_, shc), shc);                                \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_WRAP_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                            \
    O = _mm512_mask_add_epi32(O, FX32_OVF(A), O, one); A = s_; }
#define FX32_B_WRAP_U(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                               \
    const __m512i c_ = _mm512_and_si512(s_, vhi);                                                   \
    O = _mm512_mask_add_epi32(O, _mm512_cmpneq_epi32_mask(c_, s_), O, one); A = c_; }
#define FX32_B_ZERO(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                                 \
    const __mmask16 k_ = _mm512_cmpgt_epi32_mask(s_, vhi) | _mm512_cmplt_epi32_mask(s_, vlo);           \
    O = _mm512_mask_add_epi32(O, k_, O, one); A = _mm512_maskz_mov_epi32((__mmask16)~k_, s_); }
#define FX32_B_ZERO_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                            \
    const __mmask16 k_ = FX32_OVF(A);                                                               \
    O = _mm512_mask_add_epi32(O, k_, O, one); A = _mm512_maskz_mov_epi32((__mmask16)~k_, s_); }
#define FX32_B_N_SAT(A, O) { A = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(A, p_), vlo), vhi); }
#define FX32_B_N_SAT_FULL(A, O) { const __m512i s_ = _mm512_add_epi32(A, p_);                           \
    A = _mm512_mask_mov_epi32(s_, FX32_OVF(A), _mm512_xor_si512(_mm512_srai_epi32(A, 31), vmax)); }
#define FX32_B_N_WRAP(A, O) { A = _mm512_sra_epi32(_mm512_sll_epi32(_mm512_add_epi32(A, p_), shc), shc); }
#define FX32_B_N_ADD(A, O) { A = _mm512_add_epi32(A, p_); }
#define FX32_B_N_WRAP_U(A, O) { A = _mm512_and_si512(_mm512_add_epi32(A, p_), vhi); }

#define FX32_ROW(r, BODY)                                                                          \
    {                                                                                               \
        const __m512i xe_ = _mm512_set1_epi32((int32_t)(uint16_t)ar##r[k]);                         \
        const __m512i xo_ = _mm512_slli_epi32(xe_, 16);                                             \
        { const __m512i p_ = _mm512_madd_epi16(xe_, b0_); BODY(acc##r##0, ov##r##0) }               \
        { const __m512i p_ = _mm512_madd_epi16(xo_, b0_); BODY(acc##r##1, ov##r##1) }               \
        { const __m512i p_ = _mm512_madd_epi16(xe_, b1_); BODY(acc##r##2, ov##r##2) }               \
        { const __m512i p_ = _mm512_madd_epi16(xo_, b1_); BODY(acc##r##3, ov##r##3) }               \
    }
#define FX32_KLOOP(R, BODY)                                                                        \
    for (ptrdiff_t k = k0; k < k1; k++) {                                                           \
        const __m512i b0_ = _mm512_loadu_si512((const void *)(bslab + k * 64));                     \
        const __m512i b1_ = _mm512_loadu_si512((const void *)(bslab + k * 64 + 32));                \
        FX32_ROW(0, BODY)                                                                           \
        if ((R) > 1) FX32_ROW(1, BODY)                                                              \
    }

#define FX32_SWITCH(R)                                                                             \
    switch (variant) {                                                                              \
    case FX32_SAT: FX32_KLOOP(R, FX32_B_SAT) break;                                                 \
    case FX32_SAT_FULL: FX32_KLOOP(R, FX32_B_SAT_FULL) break;                                       \
    case FX32_WRAP: FX32_KLOOP(R, FX32_B_WRAP) break;                                               \
    case FX32_WRAP_FULL: FX32_KLOOP(R, FX32_B_WRAP_FULL) break;                                     \
    case FX32_WRAP_U: FX32_KLOOP(R, FX32_B_WRAP_U) break;                                           \
    case FX32_ZERO: FX32_KLOOP(R, FX32_B_ZERO) break;                                               \
    case FX32_ZERO_FULL: FX32_KLOOP(R, FX32_B_ZERO_FULL) break;                                     \
    case FX32_N_SAT: FX32_KLOOP(R, FX32_B_N_SAT) break;                                             \
    case FX32_N_SAT_FULL: FX32_KLOOP(R, FX32_B_N_SAT_FULL) break;                                   \
    case FX32_N_WRAP: FX32_KLOOP(R, FX32_B_N_WRAP) break;                                           \
    case FX32_N_WRAP_U: FX32_KLOOP(R, FX32_B_N_WRAP_U) break;                                       \
    default: FX32_KLOOP(R, FX32_B_N_ADD) break;                                                     \
    }

/* vector v, lane l <-> column 32 * (v >> 1) + 2 * l + (v & 1) */
#define FX32_POS(j) (((j) >> 5) * 32 + ((j) & 1) * 16 + (((j) & 31) >> 1))
#define FX32_LOAD(r)                                                                               \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        ar##r = a + (rows ? rows[row] : row) * lda;                                                 \
        if (k0 == 0 && !init) {                                                                     \
            acc##r##0 = acc##r##1 = acc##r##2 = acc##r##3 = _mm512_setzero_si512();                 \
        } else if (k0 == 0 && init_cs == 0) {      /* one start value per row (padding too) */      \
            acc##r##0 = acc##r##1 = acc##r##2 = acc##r##3 = _mm512_set1_epi32(init[row * init_ld]); \
        } else {                                                                                    \
            for (int j = 0; j < 64; j++)                                                            \
                tmp[FX32_POS(j)] = j >= len ? 0 : k0 > 0 ? (int32_t)out[row * ldo + j0 + j]         \
                                   : init[row * init_ld + (src0 + j) * init_cs];                    \
            acc##r##0 = _mm512_loadu_si512((const void *)tmp);                                      \
            acc##r##1 = _mm512_loadu_si512((const void *)(tmp + 16));                               \
            acc##r##2 = _mm512_loadu_si512((const void *)(tmp + 32));                               \
            acc##r##3 = _mm512_loadu_si512((const void *)(tmp + 48));                               \
        }                                                                                           \
        ov##r##0 = ov##r##1 = ov##r##2 = ov##r##3 = _mm512_setzero_si512();                         \
    }
#define FX32_STORE(r)                                                                              \
    {                                                                                               \
        const ptrdiff_t row = i + (r);                                                              \
        _mm512_storeu_si512((void *)tmp, acc##r##0);                                                \
        _mm512_storeu_si512((void *)(tmp + 16), acc##r##1);                                         \
        _mm512_storeu_si512((void *)(tmp + 32), acc##r##2);                                         \
        _mm512_storeu_si512((void *)(tmp + 48), acc##r##3);                                         \
        if (sw && k1 == K) {                                                                        \
            int32_t v32[64], e32[64];                                                               \
            for (int j = 0; j < 64; j++)                                                            \
                v32[j] = tmp[FX32_POS(j)];                                                          \
            _mm512_storeu_si512((void *)tmp, ov##r##0);                                             \
            _mm512_storeu_si512((void *)(tmp + 16), ov##r##1);                                      \
            _mm512_storeu_si512((void *)(tmp + 32), ov##r##2);                                      \
            _mm512_storeu_si512((void *)(tmp + 48), ov##r##3);                                      \
            for (int j = 0; j < 64; j++)                                                            \
                e32[j] = tmp[FX32_POS(j)];                                                          \
            if (k0 > 0)                                                                             \
                for (ptrdiff_t j = 0; j < len; j++)                                                 \
                    e32[j] += (int32_t)cnt[row * ldo + j0 + j];                                     \
            fxa_sweep_row(sw, so, rows ? rows[row] : row, src0, len, v32, e32);                     \
        } else {                                                                                    \
        for (ptrdiff_t j = 0; j < len; j++)                                                         \
            out[row * ldo + j0 + j] = tmp[FX32_POS(j)];                                               \
        if (cnt) {                                                                                  \
            _mm512_storeu_si512((void *)tmp, ov##r##0);                                             \
            _mm512_storeu_si512((void *)(tmp + 16), ov##r##1);                                      \
            _mm512_storeu_si512((void *)(tmp + 32), ov##r##2);                                      \
            _mm512_storeu_si512((void *)(tmp + 48), ov##r##3);                                      \
            for (ptrdiff_t j = 0; j < len; j++)                                                     \
                cnt[row * ldo + j0 + j] = (k0 > 0 ? cnt[row * ldo + j0 + j] : 0) + (uint32_t)tmp[FX32_POS(j)]; \
        }                                                                                           \
        }                                                                                           \
    }
#define FX32_BLOCK(R)                                                                              \
    {                                                                                               \
        __m512i acc00, acc01, acc02, acc03, acc10, acc11, acc12, acc13;                             \
        __m512i ov00, ov01, ov02, ov03, ov10, ov11, ov12, ov13;                                     \
        const int16_t *ar0, *ar1 = NULL;                                                            \
        acc10 = acc11 = acc12 = acc13 = ov10 = ov11 = ov12 = ov13 = _mm512_setzero_si512();         \
        FX32_LOAD(0)                                                                                \
        if ((R) > 1) FX32_LOAD(1)                                                                   \
        FX32_SWITCH(R)                                                                              \
        FX32_STORE(0)                                                                               \
        if ((R) > 1) FX32_STORE(1)                                                                  \
        (void)ar1;                                                                                  \
    }

__attribute__((target("avx512f,avx512bw,avx512dq")))
static void fxa_mac32m_x512(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                           const int64_t *slabs, const int32_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                           int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo, int mode,
                           int32_t lo, int32_t hi, int sh, const fxa_sweep *sw, fxa_sweep_out *so)
{
    const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi), one = _mm512_set1_epi32(1);
    const __m512i zero = _mm512_setzero_si512(), vmax = _mm512_set1_epi32(INT32_MAX);
    const __m128i shc = _mm_cvtsi32_si128(sh);
    const int full = lo == INT32_MIN && hi == INT32_MAX;
    int variant;
    int32_t tmp[64];
    (void)vlo; (void)vhi; (void)one; (void)zero; (void)vmax; (void)shc;
    switch (mode) {
    case FXA_SAT: variant = cnt ? (full ? FX32_SAT_FULL : FX32_SAT) : (full ? FX32_N_SAT_FULL : FX32_N_SAT); break;
    case FXA_WRAP_S:
        variant = cnt ? (full ? FX32_WRAP_FULL : FX32_WRAP) : (full ? FX32_N_ADD : FX32_N_WRAP); break;
    case FXA_WRAP_U: variant = cnt ? FX32_WRAP_U : FX32_N_WRAP_U; break;
    case FXA_ZERO: variant = full ? FX32_ZERO_FULL : FX32_ZERO; break;
    default: variant = FX32_N_ADD; cnt = NULL; break;       /* FXA_EXACT: no fit, nothing to count */
    }
    for (ptrdiff_t j0 = 0; j0 < N; j0 += 64) {
        const ptrdiff_t len = N - j0 < 64 ? N - j0 : 64;
        const ptrdiff_t src0 = slabs ? slabs[j0 / 64] * 64 : j0;          /* the slab's first column of b */
        const int16_t *bslab = b + (src0 / 64) * K * 64;
        ptrdiff_t k0 = 0;
        do {
            const ptrdiff_t k1 = K - k0 < FXA_KTILE ? K : k0 + FXA_KTILE;
            ptrdiff_t i = 0;
            for (; i + FXA_R32 <= nrows; i += FXA_R32)
                FX32_BLOCK(FXA_R32)
            for (; i < nrows; i++)
                FX32_BLOCK(1)
            k0 = k1;
        } while (k0 < K);
    }
}

/* 2: AVX-512BW (and DQ), 1: AVX2, 0: no 16-bit kernel on this CPU. */
static int fxa_i16_level(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
    return 0;
}

/* The 16-bit kernel: level 2 = AVX-512BW (register-blocked, any rows/init layout, cnt may be NULL),
 * level 1 = AVX2 (one row at a time when rows/init_ld are given; cnt required). */
static void fxa_mac_rows_i16(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                             const int64_t *slabs, const int16_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                             int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo,
                             int mode, int16_t lo, int16_t hi, int sh, int level, const fxa_sweep *sw,
                             fxa_sweep_out *so)
{
    if (level == 2) {
        fxa_mac16_x512(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                       sh, sw, so);
        return;
    }
    (void)slabs; (void)init_cs; (void)sw; (void)so; (void)ldo;  /* level 1: none of them (checked in the wrapper) */
    if (!rows && lda == K && (!init || init_ld == N)) {
        fxa_mac16_avx2(a, b, init, out, cnt, nrows, K, N, mode, lo, hi, sh);
        return;
    }
    for (ptrdiff_t i = 0; i < nrows; i++)
        fxa_mac16_avx2(a + (rows ? rows[i] : i) * lda, b, init ? init + i * init_ld : NULL, out + i * N,
                       cnt + i * N, 1, K, N, mode, lo, hi, sh);
}

/* The 32-bit-lane kernel on int16 operands (AVX-512BW only: callers check fxa_i16_level() == 2). */
static void fxa_mac_rows_i32m(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                              const int64_t *slabs, const int32_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                              int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo,
                              int mode, int32_t lo, int32_t hi, int sh, const fxa_sweep *sw, fxa_sweep_out *so)
{
    fxa_mac32m_x512(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                    sh, sw, so);
}
#else
#define FXA_HAVE_I16 0
static int fxa_i16_level(void) { return 0; }
static void fxa_mac_rows_i16(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                             const int64_t *slabs, const int16_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                             int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo,
                             int mode, int16_t lo, int16_t hi, int sh, int level, const fxa_sweep *sw,
                             fxa_sweep_out *so)
{
    (void)a; (void)rows; (void)lda; (void)b; (void)slabs; (void)init; (void)init_ld; (void)init_cs; (void)out; (void)cnt;
    (void)nrows; (void)K; (void)N; (void)mode; (void)lo; (void)hi; (void)sh; (void)level; (void)sw; (void)so; (void)ldo;
}
static void fxa_mac_rows_i32m(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                              const int64_t *slabs, const int32_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                              int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo,
                              int mode, int32_t lo, int32_t hi, int sh, const fxa_sweep *sw, fxa_sweep_out *so)
{
    (void)a; (void)rows; (void)lda; (void)b; (void)slabs; (void)init; (void)init_ld; (void)init_cs; (void)out; (void)cnt;
    (void)nrows; (void)K; (void)N; (void)mode; (void)lo; (void)hi; (void)sh; (void)sw; (void)so; (void)ldo;
}
#endif


/* ------------------------------------------------------------------------
 * Exact sums of int16 products by AVX512-VNNI (vpdpwssd: two int16 products
 * added into an int32 lane).  b = bh * 2^8 + bl with bl = b & 255 and bh in
 * [-128, 127], so a*bh and a*bl are below 2^23 in magnitude and 128 k-pairs
 * of either stream stay within int32; every 128 k-pairs the two streams are
 * combined (bh << 8) + bl in int64 and added to out.  a: rows of KP int32
 * (pairs a[2k], a[2k+1]); bh/bl: slabs of 16 columns, [slab][KP][16] pairs;
 * out: int64 rows of ldo, 32 * nslab2 columns written (+=).  Exact for any
 * int16 data: no rounding, no wrapping (callers add the sums modulo 2^64).
 * ------------------------------------------------------------------------ */
#define FXA_VNNI_KP 128
#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES) && (__GNUC__ >= 9)
#define FXA_HAVE_VNNI 1
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline))
static inline void fxa_vnni16_block(const int32_t *a, ptrdiff_t lda, const int32_t *h0, const int32_t *h1,
                                    const int32_t *l0, const int32_t *l1, int64_t *out, ptrdiff_t ldo,
                                    ptrdiff_t KP, const int R)
{
    for (ptrdiff_t k0 = 0; k0 < KP; k0 += FXA_VNNI_KP) {
        const ptrdiff_t k1 = KP - k0 < FXA_VNNI_KP ? KP : k0 + FXA_VNNI_KP;
        __m512i H[4][2], L[4][2];
        for (int r = 0; r < R; r++)
            H[r][0] = H[r][1] = L[r][0] = L[r][1] = _mm512_setzero_si512();
        for (ptrdiff_t k = k0; k < k1; k++) {
            const __m512i bh0 = _mm512_loadu_si512((const void *)(h0 + k * 16));
            const __m512i bh1 = _mm512_loadu_si512((const void *)(h1 + k * 16));
            const __m512i bl0 = _mm512_loadu_si512((const void *)(l0 + k * 16));
            const __m512i bl1 = _mm512_loadu_si512((const void *)(l1 + k * 16));
            for (int r = 0; r < R; r++) {
                const __m512i x = _mm512_set1_epi32(a[r * lda + k]);
                H[r][0] = _mm512_dpwssd_epi32(H[r][0], x, bh0);
                H[r][1] = _mm512_dpwssd_epi32(H[r][1], x, bh1);
                L[r][0] = _mm512_dpwssd_epi32(L[r][0], x, bl0);
                L[r][1] = _mm512_dpwssd_epi32(L[r][1], x, bl1);
            }
        }
        for (int r = 0; r < R; r++)
            for (int c = 0; c < 2; c++) {
                int64_t *o = out + r * ldo + c * 16;
                const __m512i hl = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(H[r][c]));
                const __m512i hh = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(H[r][c], 1));
                const __m512i ll = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(L[r][c]));
                const __m512i lh = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(L[r][c], 1));
                _mm512_storeu_si512((void *)o, _mm512_add_epi64(_mm512_loadu_si512((const void *)o),
                                    _mm512_add_epi64(_mm512_slli_epi64(hl, 8), ll)));
                _mm512_storeu_si512((void *)(o + 8), _mm512_add_epi64(_mm512_loadu_si512((const void *)(o + 8)),
                                    _mm512_add_epi64(_mm512_slli_epi64(hh, 8), lh)));
            }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void fxa_vnni16_rows(const int32_t *a, ptrdiff_t lda, const int32_t *bh, const int32_t *bl, int64_t *out,
                            ptrdiff_t ldo, ptrdiff_t nrows, ptrdiff_t KP, ptrdiff_t nslab2)
{
    for (ptrdiff_t s = 0; s < nslab2; s++) {
        const int32_t *h0 = bh + (2 * s) * KP * 16, *h1 = h0 + KP * 16;
        const int32_t *l0 = bl + (2 * s) * KP * 16, *l1 = l0 + KP * 16;
        ptrdiff_t i = 0;
        for (; i + 4 <= nrows; i += 4)
            fxa_vnni16_block(a + i * lda, lda, h0, h1, l0, l1, out + i * ldo + 32 * s, ldo, KP, 4);
        for (; i < nrows; i++)
            fxa_vnni16_block(a + i * lda, lda, h0, h1, l0, l1, out + i * ldo + 32 * s, ldo, KP, 1);
    }
}

static int fxa_vnni_level(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vnni");
}
#else
#define FXA_HAVE_VNNI 0
static void fxa_vnni16_rows(const int32_t *a, ptrdiff_t lda, const int32_t *bh, const int32_t *bl, int64_t *out,
                            ptrdiff_t ldo, ptrdiff_t nrows, ptrdiff_t KP, ptrdiff_t nslab2)
{
    (void)a; (void)lda; (void)bh; (void)bl; (void)out; (void)ldo; (void)nrows; (void)KP; (void)nslab2;
}
static int fxa_vnni_level(void) { return 0; }
#endif

/* 1 when the kernels above were built with run-time ISA dispatch. */
static int fxa_have_clones(void) { return FXA_HAVE_CLONES; }

#endif /* FXPSIM_ACCUMULATE_H */
