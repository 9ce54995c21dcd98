/*
 * fxpsim/datapath/_accumulate.h -- the C kernels of fxpsim/datapath/_accumulate.pyx: multiply-accumulate with
 * the accumulator's fit after every add (and exact sums), plain C, no Python.
 *
 *   _accumulate_common.h    fit modes, slab width, ISA switches (FXA_CLONES, FXA_HAVE_I16)
 *   _accumulate_portable.h  sequential and adder-tree kernels on int32/int64 lanes (compiler-vectorised)
 *   _accumulate_avx2.h      16-bit lanes, AVX2 (register-blocked, the twin of _accumulate_x512_i16.h)
 *   _accumulate_x512.h      what the register-blocked AVX-512BW kernels share (loops, loads, stores)
 *   _accumulate_x512_i16.h  16-bit lanes, AVX-512BW
 *   _accumulate_x512_i32.h  32-bit lanes from int16 operands (vpmaddwd), AVX-512BW
 *   _accumulate_avx2_i32.h  the same, AVX2 (register-blocked, the twin of _accumulate_x512_i32.h)
 *   _accumulate_sweep.h     the sweep mode of the AVX-512BW kernels (scored instead of stored)
 *   _accumulate_vnni.h      exact int16 sums, AVX512-VNNI
 *   _accumulate_w32.h       exact sums of int32 operands modulo 2^64 (VPMULDQ; included on its own)
 *
 * This header adds the entry points of the 16-bit and int16-operand kernels, which pick the kernel for the
 * SIMD level the caller asked of fxa_i16_level().
 */
#ifndef FXPSIM_ACCUMULATE_H
#define FXPSIM_ACCUMULATE_H

#include "_accumulate_common.h"
#include "_accumulate_portable.h"
#include "_accumulate_sweep.h"
#include "_accumulate_avx2.h"
#include "_accumulate_avx2_i32.h"
#include "_accumulate_x512_i16.h"
#include "_accumulate_x512_i32.h"
#include "_accumulate_vnni.h"

#if FXA_HAVE_I16
/* 2: AVX-512BW (and DQ), 1: AVX2, 0: no 16-bit kernel on this CPU. */
static int fxa_i16_level(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
    return 0;
}

/* The 16-bit kernel: level 2 = AVX-512BW, level 1 = AVX2 (the same arguments, results and counts). */
static void fxa_mac_rows_i16(const int16_t *a, const int64_t *rows, ptrdiff_t lda, const int16_t *b,
                             const int64_t *slabs, const int16_t *init, ptrdiff_t init_ld, ptrdiff_t init_cs,
                             int64_t *out, int64_t *cnt, ptrdiff_t nrows, ptrdiff_t K, ptrdiff_t N, ptrdiff_t ldo,
                             int mode, int16_t lo, int16_t hi, int sh, int level, const fxa_sweep *sw,
                             fxa_sweep_out *so)
{
    if (level == 2)
        fxa_mac16_x512(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                       sh, sw, so);
    else
        fxa_mac16_avx2b(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                        sh, sw, so);
}

/* The 32-bit-lane kernel on int16 operands: level 2 = AVX-512BW, level 1 = AVX2 (the same results and counts). */
static void fxa_mac_rows_i32m(FXA_X512_ARGS(int32_t), int level)
{
    if (level == 2)
        fxa_mac32m_x512(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                        sh, sw, so);
    else
        fxa_mac32m_avx2(a, rows, lda, b, slabs, init, init_ld, init_cs, out, cnt, nrows, K, N, ldo, mode, lo, hi,
                        sh, sw, so);
}
#else  /* no x86 SIMD kernels: nothing runs these (fxa_i16_level() == 0) */
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
static void fxa_mac_rows_i32m(FXA_X512_ARGS(int32_t), int level)
{
    (void)level; (void)a; (void)rows; (void)lda; (void)b; (void)slabs; (void)init; (void)init_ld; (void)init_cs; (void)out; (void)cnt;
    (void)nrows; (void)K; (void)N; (void)mode; (void)lo; (void)hi; (void)sh; (void)sw; (void)so; (void)ldo;
}
#endif

/* 1 when the kernels above were built with run-time ISA dispatch. */
static int fxa_have_clones(void) { return FXA_HAVE_CLONES; }

#endif /* FXPSIM_ACCUMULATE_H */
