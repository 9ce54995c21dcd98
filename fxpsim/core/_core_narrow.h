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

#define FXN_KINDS(CASE) CASE(1, int8_t) CASE(2, int16_t) CASE(4, int32_t)                   \
    CASE(1 + FXN_UNSIGNED, uint8_t) CASE(2 + FXN_UNSIGNED, uint16_t) CASE(4 + FXN_UNSIGNED, uint32_t)
#define FXN_WIDEN_CASE(KIND, T)                                                         \
    case KIND: { const T *p = (const T *)src; for (int64_t i = 0; i < n; i++) dst[i] = p[i]; } break;
#define FXN_NARROW_CASE(KIND, T)                                                        \
    case KIND: { T *p = (T *)dst; for (int64_t i = 0; i < n; i++) p[i] = (T)src[i]; } break;

/* The block helpers on a compute type W (int64_t, or int32_t when the caller proved every value fits):
 *   fxn_widen_W(src, kind, dst, n): dst[i] := src[i] as W (exact: sign or zero extension);
 *   fxn_narrow_W(src, dst, kind, n): dst[i] := src[i] converted to `kind` (the caller proved it fits);
 *   fxn_block_in_W: block [i, i + m) of an operand as W, in place when it is stored as W;
 *   fxn_block_dst_W / fxn_block_out_W: the W destination of a result block, narrowed on store.
 * IN_PLACE: the test (on `kind`) of arrays stored as W. */
#define FXN_BLOCK_HELPERS(W, IN_PLACE)                                                      \
static inline void fxn_widen_##W(const void *src, int kind, W *dst, int64_t n)          \
{ switch (kind) { FXN_KINDS(FXN_WIDEN_CASE) } }                                         \
static inline void fxn_narrow_##W(const W *src, void *dst, int kind, int64_t n)         \
{ switch (kind) { FXN_KINDS(FXN_NARROW_CASE) } }                                        \
static inline const W *fxn_block_in_##W(const void *src, int kind, int64_t i, int64_t m, W *tmp) \
{                                                                                       \
    if (IN_PLACE)                                                                       \
        return (const W *)src + i;                                                      \
    fxn_widen_##W((const char *)src + i * (kind & 15), kind, tmp, m);                   \
    return tmp;                                                                         \
}                                                                                       \
static inline W *fxn_block_dst_##W(void *out, int kind, int64_t i, W *tmp)              \
{ return (IN_PLACE) ? (W *)out + i : tmp; }                                             \
static inline void fxn_block_out_##W(const W *tmp, void *out, int kind, int64_t i, int64_t m) \
{ if (!(IN_PLACE)) fxn_narrow_##W(tmp, (char *)out + i * (kind & 15), kind, m); }

/* uint64 (kind 8 + FXN_UNSIGNED) is the int64 bit pattern: in place as int64 too. */
FXN_BLOCK_HELPERS(int64_t, (kind & 15) == 8)
FXN_BLOCK_HELPERS(int32_t, kind == 4)

#define FXN_BINARY_BLOCKS(W, KERNEL, LO, HI)                                            \
    for (int64_t i = 0; i < n; i += FXN_BLOCK) {                                        \
        const int64_t m = n - i < FXN_BLOCK ? n - i : FXN_BLOCK;                        \
        const W *pa = fxn_block_in_##W(a, ka, i, m, ta);                                \
        const W *pb = op == FXB_CAST ? pa : fxn_block_in_##W(b, kb, i, m, tb);          \
        W *po = fxn_block_dst_##W(out, ko, i, to);                                      \
        ovf += KERNEL(op, pa, pb, po, m, sa, sb, s, mode, fit, LO, HI, sh);             \
        fxn_block_out_##W(po, out, ko, i, m);                                           \
    }

/* fxb_binary (same arguments and result) on operands of types ka, kb and a result of type ko.
 * calc32: compute on int32 (fxb_binary32; sh is then 32 - word), which the caller proved exact:
 * operands, exact values and [lo, hi] within int32, 0 <= sa, sb, s <= 31, no uint32 operand. */
FXB_DISPATCH
static int64_t fxn_binary(int op, const void *a, int ka, const void *b, int kb, void *out, int ko, int64_t n,
                          int sa, int sb, int s, int mode, int fit, int64_t lo, int64_t hi, int sh, int calc32)
{
    int64_t ovf = 0;
    if (calc32 && ka == 2 && kb == 2 && ko == 2)
        return fxb_binary16(op, (const int16_t *)a, (const int16_t *)b, (int16_t *)out, n, sa, sb, s, mode,
                            fit, (int32_t)lo, (int32_t)hi, sh);
    if (calc32 && ka == 1 && kb == 1 && ko == 1)
        return fxb_binary8(op, (const int8_t *)a, (const int8_t *)b, (int8_t *)out, n, sa, sb, s, mode,
                           fit, (int32_t)lo, (int32_t)hi, sh);
    if (calc32) {
        int32_t ta[FXN_BLOCK], tb[FXN_BLOCK], to[FXN_BLOCK];
        FXN_BINARY_BLOCKS(int32_t, fxb_binary32, (int32_t)lo, (int32_t)hi)
    } else {
        int64_t ta[FXN_BLOCK], tb[FXN_BLOCK], to[FXN_BLOCK];
        FXN_BINARY_BLOCKS(int64_t, fxb_binary, lo, hi)
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
        int64_t *po = fxn_block_dst_int64_t(out, ko, i, to);
        ovf += fxc_quantize_vector(x + i, po, m, scale, mode, fit, lo, hi, sh, &sp);
        special += sp;
        fxn_block_out_int64_t(po, out, ko, i, m);
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
        const int64_t *p = fxn_block_in_int64_t(src, ks, i, m, t);
        for (int64_t j = 0; j < m; j++)
            out[i + j] = (double)p[j] * scale;
    }
}

#endif
