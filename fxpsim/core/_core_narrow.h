/* Narrow code storage for fxpsim's core (_core.pyx): the vector kernels of _core_binary.h and
 * _core_round.h on codes stored as 1-, 2-, 4- or 8-byte integers, signed or unsigned.
 *
 * The arrays are processed in blocks of FXN_BLOCK elements: each operand block is widened to int64
 * in a scratch buffer on the stack (sign or zero extension, exact), the int64 kernel runs on it
 * unchanged, and the result block is narrowed on store.  Narrowing is a plain truncating conversion;
 * it is exact because the caller passes an output type that holds every code of the result format
 * (after the fit, every code lies in [lo, hi] or is a wrapped code of `word` bits).  An int64
 * operand or result is used in place (no copy), so the all-int64 case costs one block loop.
 *
 * A type is named by its "kind": the item size in bytes (1, 2, 4, 8) plus FXN_UNSIGNED for unsigned
 * types.  uint64 codes are the int64 bit pattern (the kernels' src_u64 convention) and are never
 * passed here (the fast kernels take signed values below 2^63 only).
 */
#ifndef FXPSIM_CORE_NARROW_H
#define FXPSIM_CORE_NARROW_H

#include <stdint.h>
#include "_core_binary.h"
#include "_core_round.h"

#define FXN_BLOCK 1024
#define FXN_UNSIGNED 16

#define FXN_WIDEN_CASE(KIND, T)                                                         \
    case KIND: { const T *p = (const T *)src; for (int64_t i = 0; i < n; i++) dst[i] = p[i]; } break;
#define FXN_NARROW_CASE(KIND, T)                                                        \
    case KIND: { T *p = (T *)dst; for (int64_t i = 0; i < n; i++) p[i] = (T)src[i]; } break;

/* dst[i] := src[i] as int64 (exact), for a source of type `kind` (not 8: the caller uses it in place). */
static inline void fxn_widen(const void *src, int kind, int64_t *dst, int64_t n)
{
    switch (kind) {
    FXN_WIDEN_CASE(1, int8_t)
    FXN_WIDEN_CASE(2, int16_t)
    FXN_WIDEN_CASE(4, int32_t)
    FXN_WIDEN_CASE(1 + FXN_UNSIGNED, uint8_t)
    FXN_WIDEN_CASE(2 + FXN_UNSIGNED, uint16_t)
    default: FXN_WIDEN_CASE(4 + FXN_UNSIGNED, uint32_t)
    }
}

/* dst[i] := src[i] converted to type `kind` (the caller guarantees each value fits). */
static inline void fxn_narrow(const int64_t *src, void *dst, int kind, int64_t n)
{
    switch (kind) {
    FXN_NARROW_CASE(1, int8_t)
    FXN_NARROW_CASE(2, int16_t)
    FXN_NARROW_CASE(4, int32_t)
    FXN_NARROW_CASE(1 + FXN_UNSIGNED, uint8_t)
    FXN_NARROW_CASE(2 + FXN_UNSIGNED, uint16_t)
    default: FXN_NARROW_CASE(4 + FXN_UNSIGNED, uint32_t)
    }
}

/* A block [i, i + m) of an operand as int64: in place for int64, else widened into tmp. */
static inline const int64_t *fxn_block_in(const void *src, int kind, int64_t i, int64_t m, int64_t *tmp)
{
    if ((kind & 15) == 8)
        return (const int64_t *)src + i;
    fxn_widen((const char *)src + i * (kind & 15), kind, tmp, m);
    return tmp;
}

/* The int64 destination of a result block: in place for int64, else tmp (narrowed by fxn_block_out). */
static inline int64_t *fxn_block_dst(void *out, int kind, int64_t i, int64_t *tmp)
{
    return (kind & 15) == 8 ? (int64_t *)out + i : tmp;
}

static inline void fxn_block_out(const int64_t *tmp, void *out, int kind, int64_t i, int64_t m)
{
    if ((kind & 15) != 8)
        fxn_narrow(tmp, (char *)out + i * (kind & 15), kind, m);
}

/* fxb_binary (same arguments and result) on operands of types ka, kb and a result of type ko. */
FXB_DISPATCH
static int64_t fxn_binary(int op, const void *a, int ka, const void *b, int kb, void *out, int ko, int64_t n,
                          int sa, int sb, int s, int mode, int fit, int64_t lo, int64_t hi, int sh)
{
    int64_t ta[FXN_BLOCK], tb[FXN_BLOCK], to[FXN_BLOCK], ovf = 0;
    for (int64_t i = 0; i < n; i += FXN_BLOCK) {
        const int64_t m = n - i < FXN_BLOCK ? n - i : FXN_BLOCK;
        const int64_t *pa = fxn_block_in(a, ka, i, m, ta);
        const int64_t *pb = op == FXB_CAST ? pa : fxn_block_in(b, kb, i, m, tb);
        int64_t *po = fxn_block_dst(out, ko, i, to);
        ovf += fxb_binary(op, pa, pb, po, m, sa, sb, s, mode, fit, lo, hi, sh);
        fxn_block_out(po, out, ko, i, m);
    }
    return ovf;
}

/* fxc_quantize_vector (same arguments and result) with a result of type ko. */
FXC_DISPATCH
static int64_t fxn_quantize_vector(const double *x, void *out, int ko, int64_t n, double scale, int mode,
                                   int fit, int64_t lo, int64_t hi, int sh, int64_t *n_special)
{
    int64_t to[FXN_BLOCK], ovf = 0, special = 0, sp;
    for (int64_t i = 0; i < n; i += FXN_BLOCK) {
        const int64_t m = n - i < FXN_BLOCK ? n - i : FXN_BLOCK;
        int64_t *po = fxn_block_dst(out, ko, i, to);
        ovf += fxc_quantize_vector(x + i, po, m, scale, mode, fit, lo, hi, sh, &sp);
        special += sp;
        fxn_block_out(po, out, ko, i, m);
    }
    *n_special = special;
    return ovf;
}

/* out[i] := src[i] * scale for a source of type ks (not uint64: _core.pyx keeps that path). */
FXC_DISPATCH
static void fxn_to_float(const void *src, int ks, double *out, int64_t n, double scale)
{
    int64_t t[FXN_BLOCK];
    for (int64_t i = 0; i < n; i += FXN_BLOCK) {
        const int64_t m = n - i < FXN_BLOCK ? n - i : FXN_BLOCK;
        const int64_t *p = fxn_block_in(src, ks, i, m, t);
        for (int64_t j = 0; j < m; j++)
            out[i + j] = (double)p[j] * scale;
    }
}

#endif
