/*
 * fxpsim/datapath/_conv_int8_avx512.h -- the AVX-512 kernels of _conv_int8.h (included by it when GCC
 * function multi-versioning is available; each function carries its own target attribute and runs only
 * after fxc_have_avx512() said yes).  Same results as the portable kernel, bit for bit (tests compare them).
 *
 *   _conv_int8_avx512_out.h    output stage (requantization, clip counts, fxc_emit), the int16 per-add step
 *   _conv_int8_avx512_dense.h  dense layers: exact sums by VNNI, per-add W = 16 on int16 lanes
 *   _conv_int8_avx512_dw.h     depthwise layers, exact or per-add W = 16
 *   _conv_int8_avx512_pad.h    padded copies of the input and the pixels' window offsets
 *
 * They run from fxc_run, the fused layer: x [N][H][W][C] int8; w: dense [O][KH][KW][C], depthwise
 * [KH][KW][C] (TFLite, int8); acc_out [M][O] int64 or NULL; out [M][O] int8 or NULL (needs rq_mult);
 * counts[3] += overflows, above, below.  It returns 0; 1 when the layer needs per-add fitting and peradd_ok
 * is 0 (nothing done); -1 when memory ran out (nothing counted then).
 */
#ifndef FXPSIM_CONV_INT8_AVX512_H
#define FXPSIM_CONV_INT8_AVX512_H
#if FXC_AVX512

#include "_conv_int8_avx512_out.h"
#include "_conv_int8_avx512_dense.h"
#include "_conv_int8_avx512_dw.h"
#include "_conv_int8_avx512_pad.h"

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_H */
