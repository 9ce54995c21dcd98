/*
 * fxpsim/datapath/_accumulate_common.h -- what every per-add kernel of _accumulate.h shares: the fit modes,
 * the slab width, the fitting of one exact sum, and the ISA switches.
 *
 * Plain C, no Python.  Lane types are int16/int32/int64 (uint64 for sums modulo 2^64).  The Python caller
 * guarantees that |acc| + |a*b| fits the lane type (bounds taken from the data), so the signed arithmetic of
 * the kernels never overflows (no undefined behaviour); wrapping to the accumulator width goes through
 * unsigned arithmetic.
 *
 * Portability: no -march flag is needed.  With GCC >= 11 on x86-64 Linux the portable kernels are compiled
 * three times (x86-64-v4 = AVX-512, x86-64-v3 = AVX2, baseline) via function multi-versioning (FXA_CLONES),
 * and the dynamic loader picks the best variant for the CPU at run time; the x86 SIMD kernels (FXA_HAVE_I16)
 * carry their own target attributes and run only after a CPU check.  Define FXPSIM_NO_CLONES to disable both.
 */
#ifndef FXPSIM_ACCUMULATE_COMMON_H
#define FXPSIM_ACCUMULATE_COMMON_H

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

/* 1: the x86 intrinsics kernels (AVX2 / AVX-512BW 16-bit lanes, AVX-512BW int16-operand 32-bit lanes) are
 * compiled; which of them may run is asked of the CPU (fxa_i16_level). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(FXPSIM_NO_CLONES)
#define FXA_HAVE_I16 1
#else
#define FXA_HAVE_I16 0
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

/* c := fit(s) on lanes of type T (UT its unsigned twin), for the portable kernels: lo, hi, sh in scope. */
#define FXA_FIT_EXACT(T, UT) c = s;
#define FXA_FIT_SAT(T, UT) c = s < lo ? lo : s; c = c > hi ? hi : c;
#define FXA_FIT_ZERO(T, UT) c = ((s < lo) | (s > hi)) ? (T)0 : s;
#define FXA_FIT_WRAP_S(T, UT) c = (T)((UT)s << sh) >> sh;
#define FXA_FIT_WRAP_U(T, UT) c = s & hi;

#endif /* FXPSIM_ACCUMULATE_COMMON_H */
