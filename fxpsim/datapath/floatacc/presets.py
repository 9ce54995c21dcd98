"""Named float accumulators: one per instruction MMA-Sim models (checked bit for bit against MMA-Sim's
own output in ``tests/datapath/test_float_acc_mma_sim.py``), and whole datapaths.

Name: ``<arch>-<instruction>-<shape>-<output type>-<input type>[-<scale type>-block<N>]``.  The
parameters are MMA-Sim's (``mmasim/simulator/nv_ptx.py``, commit c785138): the accumulator fraction
bits per architecture (Volta 23, Turing/Ampere/Ada 24, Hopper/Blackwell 25; FP8 on Ada and Hopper
13; block-scaled ``k64`` 35), split-k halves on Ampere/Ada (``chunk`` = K/2), f32 outputs rounded
toward zero (FP8 on Ada/Hopper to 13 fraction bits), f16 outputs to nearest even; a zero operand
brings exponent -126 to the max-exponent unit; overflow gives ±Inf; NaN is 0x7FFFFFFF / 0x7FFF.
"""
from __future__ import annotations

__all__ = ["PRESETS"]

_NV = dict(kind="fused", align="truncate", zero_exponent=-126, overflow="inf")


def _nv(chunk, bits, out="float32", man=None, **kw):
    rnd = "toward_zero" if out == "float32" else "half_even"
    return dict(_NV, chunk=chunk, fraction_bits=bits, output=out, output_man_bits=man,
                output_rounding=rnd, **kw)


def _blk(chunk, block):
    return dict(_NV, kind="block", chunk=chunk, fraction_bits=35, group=16, block=block,
                output="float32", output_rounding="toward_zero")


def _amd(chunk, even_odd):
    return dict(kind="fused_rd", chunk=chunk, fraction_bits=24, sum_bits=31, c_fraction_bits=24,
                even_odd=even_odd, zero_exponent=-126, output="float32", output_rounding="half_even",
                overflow="ieee")


PRESETS = {
    "volta-mma-m8n8k4-f32-f16": (_nv(4, 23), "Volta mma.m8n8k4 f16 -> f32: 23 fraction bits, RZ"),
    "turing-mma-m16n8k8-f32-f16": (_nv(8, 24), "Turing mma.m16n8k8 f16 -> f32: 24 bits, RZ"),
    "ampere-mma-m16n8k16-f32-f16": (_nv(8, 24), "Ampere mma.m16n8k16 f16 -> f32: split-k 2 x 8, 24 bits, RZ"),
    "ampere-mma-m16n8k16-f32-bf16": (_nv(8, 24), "Ampere mma.m16n8k16 bf16 -> f32: split-k 2 x 8, 24 bits, RZ"),
    "ampere-mma-m16n8k16-f16-f16": (_nv(8, 24, "float16"), "Ampere mma.m16n8k16 f16 -> f16: split-k, 24 bits, RNE"),
    "ampere-mma-m16n8k8-f32-tf32": (_nv(4, 24), "Ampere mma.m16n8k8 tf32 -> f32: split-k 2 x 4, 24 bits, RZ"),
    "ada-mma-m16n8k32-f32-e4m3": (_nv(16, 13, man=13), "Ada mma.m16n8k32 e4m3 -> f32: split-k, 13 bits, RZ to e8m13"),
    "ada-mma-m16n8k32-f32-e5m2": (_nv(16, 13, man=13), "Ada mma.m16n8k32 e5m2 -> f32: split-k, 13 bits, RZ to e8m13"),
    "hopper-wgmma-m64n8k32-f32-e4m3": (_nv(32, 13, man=13), "Hopper wgmma k32 e4m3 -> f32: 13 bits, RZ to e8m13"),
    "hopper-wgmma-m64n8k32-f32-e5m2": (_nv(32, 13, man=13), "Hopper wgmma k32 e5m2 -> f32: 13 bits, RZ to e8m13"),
    "hopper-wgmma-m64n8k32-f32-e4m3-e5m2": (_nv(32, 13, man=13), "Hopper wgmma k32 e4m3 x e5m2 -> f32"),
    "hopper-wgmma-m64n8k32-f16-e4m3": (_nv(32, 13, "float16"), "Hopper wgmma k32 e4m3 -> f16: 13 bits, RNE"),
    "hopper-wgmma-m64n8k16-f32-f16": (_nv(16, 25), "Hopper wgmma k16 f16 -> f32: 25 bits, RZ"),
    "hopper-wgmma-m64n8k16-f32-bf16": (_nv(16, 25), "Hopper wgmma k16 bf16 -> f32: 25 bits, RZ"),
    "hopper-wgmma-m64n8k16-f16-f16": (_nv(16, 25, "float16"), "Hopper wgmma k16 f16 -> f16: 25 bits, RNE"),
    "blackwell-tcgen05-m128n8k32-f32-e4m3": (_nv(32, 25), "Blackwell tcgen05 f8f6f4 e4m3 -> f32: 25 bits, RZ"),
    "blackwell-tcgen05-m128n8k16-f32-bf16": (_nv(16, 25), "Blackwell tcgen05 f16 kind bf16 -> f32: 25 bits, RZ"),
    "blackwell-tcgen05-m128n8k32-f32-e4m3-ue8m0-block32": (
        _nv(32, 25, block=32), "Blackwell tcgen05 mxf8f6f4 e4m3, ue8m0 scale per 32: 25 bits, RZ"),
    "blackwell-tcgen05-m128n8k32-f32-e5m2-ue8m0-block32": (
        _nv(32, 25, block=32), "Blackwell tcgen05 mxf8f6f4 e5m2, ue8m0 scale per 32: 25 bits, RZ"),
    "blackwell-tcgen05-m128n8k64-f32-e2m1-ue8m0-block32": (
        _blk(64, 32), "Blackwell tcgen05 mxf4nvf4 (MXFP4): exact 16-element groups, 35 bits, RZ"),
    "blackwell-tcgen05-m128n8k64-f32-e2m1-ue4m3-block16": (
        _blk(64, 16), "Blackwell tcgen05 mxf4nvf4 (NVFP4 ue4m3 scales): 16-element groups, 35 bits, RZ"),
    "rtx-blackwell-mma-m16n8k64-f32-e2m1-ue8m0-block16": (
        _blk(64, 16), "RTX Blackwell mma mxf4nvf4, ue8m0 scale per 16: 35 bits, RZ"),
    "cdna3-mfma-16x16x32-f32-fp8": (_amd(16, True), "AMD CDNA3 v_mfma_f32_16x16x32_fp8_fp8: even/odd halves, floor"),
    "cdna3-mfma-16x16x32-f32-bf8": (_amd(16, True), "AMD CDNA3 v_mfma_f32_16x16x32_bf8_bf8"),
    "cdna3-mfma-16x16x32-f32-fp8-bf8": (_amd(16, True), "AMD CDNA3 v_mfma_f32_16x16x32_fp8_bf8"),
    "cdna3-mfma-16x16x16-f32-f16": (_amd(8, False), "AMD CDNA3 v_mfma_f32_16x16x16_f16: groups of 8, floor"),
    "cdna3-mfma-16x16x16-f32-bf16": (_amd(8, False), "AMD CDNA3 v_mfma_f32_16x16x16_bf16: groups of 8, floor"),
    # whole datapaths
    "h100-fp8": (_nv(32, 13, man=13, promote_every=128),
                 "H100 FP8 GEMM as DeepSeek-V3 runs it: wgmma e4m3 (13 bits) promoted to FP32 every 128"),
    "blackwell-mxfp4": (_blk(64, 32), "Blackwell MXFP4 GEMM (tcgen05 mxf4nvf4, ue8m0 per 32)"),
    "blackwell-nvfp4": (_blk(64, 16), "Blackwell NVFP4 GEMM (tcgen05 mxf4nvf4, ue4m3 per 16)"),
    "mi300-fp8": (_amd(16, True), "MI300 FP8 GEMM (CDNA3 v_mfma fp8: even/odd halves, floor alignment)"),
    "exact-float32": (dict(kind="exact", output="float32"), "Kulisch-exact dot, one RNE rounding to float32"),
    "fpu-float32": (dict(kind="per_add", output="float32", fma=True), "scalar float32 FMA loop (RNE)"),
}
