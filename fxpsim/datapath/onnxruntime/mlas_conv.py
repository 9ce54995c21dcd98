"""onnxruntime's float32 convolution (``MlasConv``), bit for bit: the algorithm MlasConvPrepare picks and the
SGEMM operations of :mod:`fxpsim.datapath.onnxruntime.mlas_sgemm` it runs (numpy model; the C kernel of
:mod:`fxpsim.datapath.onnxruntime.mlas_kernel` computes the same bits and runs when built).

Re-exported by :mod:`~fxpsim.datapath.onnxruntime.mlas` (:func:`mlas_conv2d`, :func:`mlas_conv2d_plan`,
:func:`mlas_conv2d_prepared`).
"""
from __future__ import annotations

import numpy as np

from . import mlas_kernel as _mk
from .mlas_sgemm import (F32, SGEMM_STRIDEK, SGEMM_STRIDEN, SGEMM_STRIDEN_THREAD_ALIGN, _sgemm_operation, _strides,
                   _thread_target, mlas_gemm, ort_threads)

__all__ = ["mlas_conv2d", "mlas_conv2d_plan", "mlas_conv2d_prepared"]


def mlas_conv2d_plan(batch: int, groups: int, in_channels: int, in_hw, kernel, stride, pads, dilation,
                     out_channels: int, threads: int | None = None) -> dict:
    """How ``MlasConv`` runs a 2-D float convolution (MlasConvPrepare): the algorithm and the slicing of
    the output positions; ``pads = ((top, bottom), (left, right))``. Raises ``NotImplementedError`` for
    the cases fxpsim does not reproduce."""
    threads = ort_threads() if threads is None else threads
    cg, fc = in_channels // groups, out_channels // groups
    (h, w), (kh, kw), (sh, sw), (dh, dw) = in_hw, kernel, stride, dilation
    ((pt, pb), (pl, pr)) = pads
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    k_total, out_size = cg * kh * kw, oh * ow
    plan = dict(k=k_total, out_size=out_size, oh=oh, ow=ow, filters=fc, in_channels_per_group=cg)
    strides_one = sh == 1 and sw == 1
    no_pad = pt == pb == pl == pr == 0
    if strides_one and no_pad:
        if k_total == cg:
            return dict(plan, algorithm="gemm_direct")
        if dh == 1 and dw == 1 and cg == 1 and (kw == w or (kh == h and kw == 1)):
            raise NotImplementedError("MLAS's direct-GEMM convolution of a single-channel input with a "
                                      "kernel as wide (or as tall) as the image")
    if fc > out_size:
        return dict(plan, algorithm="expand_then_gemm")
    segments = [(0, out_size)]
    if batch * groups == 1:
        target = _thread_target(float(fc) * out_size * k_total, threads)
        stride_n = out_size // target + (1 if (out_size // target) * target != out_size else 0)
        if target > 1:
            stride_n = (stride_n + SGEMM_STRIDEN_THREAD_ALIGN - 1) & ~(SGEMM_STRIDEN_THREAD_ALIGN - 1)
        if stride_n < out_size:
            segments = [(s, min(stride_n, out_size - s)) for s in range(0, out_size, stride_n)]
    return dict(plan, algorithm="expand_then_gemm_segmented", segments=segments)


def _im2col(x, kernel, stride, pads, dilation, oh, ow):
    """[B, C, H, W] -> [B, C*KH*KW, OH*OW] (rows in MLAS's order: channel, kernel row, kernel column)."""
    bsz, c, h, w = x.shape
    (kh, kw), (sh, sw), ((pt, pb), (pl, pr)), (dh, dw) = kernel, stride, pads, dilation
    xp = np.zeros((bsz, c, h + pt + pb, w + pl + pr), F32)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    cols = np.empty((bsz, c, kh, kw, oh, ow), F32)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return cols.reshape(bsz, c * kh * kw, oh * ow)


def mlas_conv2d(x, w, bias, stride, pads, dilation, groups: int, threads: int | None = None) -> np.ndarray:
    """onnxruntime's float32 ``Conv`` (NCHW, ``MlasConv``): ``x`` [N, C, H, W], ``w`` [M, C/g, KH, KW],
    ``bias`` [M] or None; ``pads = ((top, bottom), (left, right))``. Returns [N, M, OH, OW] float32.

    The algorithm MlasConvPrepare picks (direct GEMM for 1x1 unit-stride unpadded kernels, full im2col +
    GEMM when there are more filters than output positions, else im2col in K slices with the output
    positions split into segments), each GEMM as :func:`mlas_gemm`, then the bias added in float32."""
    x = np.asarray(x, F32)
    w = np.asarray(w, F32)
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = w.shape[2:]
    plan = mlas_conv2d_plan(n, groups, c, (h, wd), (kh, kw), stride, pads, dilation, m, threads)
    k_total, out_size, fc = plan["k"], plan["out_size"], plan["filters"]
    oh, ow = plan["oh"], plan["ow"]
    cg = c // groups
    if _mk.available():
        out = _conv_c(x, w, plan, stride, pads, dilation, groups, threads)
        out = out.reshape(n, m, oh, ow)
        if bias is not None:
            out = (out + np.asarray(bias, F32).reshape(1, m, 1, 1)).astype(F32)
        return out
    # batched operands over (batch, group): A [B*G, FC, K], columns [B*G, K, OUT]
    filt = np.broadcast_to(w.reshape(1, groups, fc, k_total), (n, groups, fc, k_total)).reshape(n * groups, fc, k_total)
    xg = x.reshape(n * groups, cg, h, wd)
    if plan["algorithm"] == "gemm_direct":
        cols = xg.reshape(n * groups, cg, h * wd)
        out = mlas_gemm(filt[0], cols[0], threads=threads)[None] if n * groups == 1 else _sgemm_operation(filt, cols)
    else:
        cols = _im2col(xg, (kh, kw), stride, pads, dilation, oh, ow)
        if plan["algorithm"] == "expand_then_gemm":
            if n * groups == 1:
                out = mlas_gemm(filt[0], cols[0], threads=threads)[None]
            else:
                out = np.stack([mlas_gemm(filt[i], cols[i], threads=threads) for i in range(n * groups)])
        else:
            out = np.empty((n * groups, fc, out_size), F32)
            for s0, count in plan["segments"]:
                out[..., s0:s0 + count] = _conv_operation(filt, cols[..., s0:s0 + count], k_total, out_size)
    out = out.reshape(n, m, oh, ow)
    if bias is not None:
        out = (out + np.asarray(bias, F32).reshape(1, m, 1, 1)).astype(F32)
    return out


def mlas_conv2d_prepared(x_shape, w, bias, stride, pads, dilation, groups: int):
    """:func:`mlas_conv2d` (``threads=None``) for inputs of ``x_shape`` with what it derives from the shapes
    alone derived once: ``f(x)``, the same bits. MlasConvPrepare's choice depends on onnxruntime's thread count,
    so every call reads :func:`~.mlas_sgemm.ort_threads` and uses the algorithm and segments derived for that
    count (derived on its first use: a changed ``FXPSIM_ORT_THREADS`` never meets a stale choice); with the C
    kernel the segmented algorithm runs on operands validated once
    (:func:`~fxpsim.datapath.onnxruntime.mlas_kernel.conv_segmented_prepared`). An input of another shape or
    dtype, or the C kernel switched off, runs :func:`mlas_conv2d` itself."""
    x_shape = tuple(int(d) for d in x_shape)
    w = np.ascontiguousarray(w, F32)
    n, c, h, wd = x_shape
    m, (kh, kw) = w.shape[0], w.shape[2:]
    b = None if bias is None else np.asarray(bias, F32).reshape(1, m, 1)
    by_threads = {}

    def derive(threads):
        plan = mlas_conv2d_plan(n, groups, c, (h, wd), (kh, kw), stride, pads, dilation, m, threads)
        segmented = None
        if plan["algorithm"] == "expand_then_gemm_segmented":
            segmented = _mk.conv_segmented_prepared(x_shape, w, groups, (kh, kw), stride, (pads[0][0], pads[1][0]),
                                                    dilation, (plan["oh"], plan["ow"]), plan["segments"])
        return plan, segmented

    def conv(x):
        if not _mk.available() or not isinstance(x, np.ndarray) or x.dtype != F32 or x.shape != x_shape:
            return mlas_conv2d(x, w, bias, stride, pads, dilation, groups)
        threads = ort_threads()
        if threads not in by_threads:
            by_threads[threads] = derive(threads)
        plan, segmented = by_threads[threads]
        if segmented is not None:
            out = segmented(np.ascontiguousarray(x))
        else:
            out = _conv_c(x, w, plan, stride, pads, dilation, groups, threads)
        if b is not None:
            out += b                      # float32 + float32: the same rounding as mlas_conv2d's bias add
        return out.reshape(n, m, plan["oh"], plan["ow"])
    return conv


def _conv_c(x, w, plan, stride, pads, dilation, groups: int, threads):
    """:func:`mlas_conv2d`'s arithmetic in C (no bias): the segmented algorithm fused with its im2col
    (:func:`~fxpsim.datapath.onnxruntime.mlas_kernel.conv_segmented`), the GEMM ones on the weight shared by
    every image (no per-image copy). Returns [N, M, OH * OW]."""
    n, c, h, wd = x.shape
    m, fc, k_total, out_size = w.shape[0], plan["filters"], plan["k"], plan["out_size"]
    ((pt, _), (pl, _)) = pads
    if plan["algorithm"] == "expand_then_gemm_segmented":
        return _mk.conv_segmented(x, w, groups, w.shape[2:], stride, (pt, pl), dilation, (plan["oh"], plan["ow"]),
                                  plan["segments"])
    filt = w.reshape(groups, fc, k_total)
    if plan["algorithm"] == "gemm_direct":
        cols = x.reshape(n * groups, c // groups, h * wd)
    else:
        cols = _im2col(x.reshape(n * groups, c // groups, h, wd), w.shape[2:], stride, pads, dilation,
                       plan["oh"], plan["ow"])
    if n * groups == 1:
        out = mlas_gemm(filt[0], cols[0], threads=threads)[None]
    elif plan["algorithm"] == "expand_then_gemm" and _thread_target(
            float(fc) * out_size * k_total, ort_threads() if threads is None else threads) > 1:
        out = np.stack([mlas_gemm(filt[i % groups], cols[i], threads=threads) for i in range(n * groups)])
    else:      # the batched direct GEMM, or MlasGemms that are one SGEMM operation each: all in one call
        out = _sgemm_c(filt, cols)
    return out.reshape(n, m, out_size)


def _sgemm_c(a3, b3):
    """One SGEMM operation (beta 0) per matrix of ``b3`` [B, K, N] with ``a3[i % len(a3)]`` (the kernel
    :func:`_sgemm_operation` chooses for those shapes)."""
    m, k_total = a3.shape[-2:]
    n = b3.shape[-1]
    if m == 1:
        return _mk.sgemm(a3, b3, None, _mk.M1)
    if n == 1:
        return _mk.sgemm(a3, b3, None, _mk.N1)
    if k_total == 0:
        return np.zeros((len(b3), m, n), F32)
    return _mk.sgemm(a3, b3, None, _mk.SLICES, _strides(n, k_total)[1])


def _conv_operation(filt, cols, k_total: int, out_size: int):
    """MlasConvOperation over one segment of output positions: slices of StrideN positions, K in slices of
    StrideK (each an SGEMM with beta 0, then 1)."""
    seg = cols.shape[-1]
    sn, sk = SGEMM_STRIDEN, SGEMM_STRIDEK
    if seg >= k_total:
        while sk // 2 >= k_total:
            sn, sk = sn * 2, sk // 2
    else:
        while sn > 16 and sn // 2 >= seg:
            sn, sk = sn // 2, sk * 2
    out = np.empty(cols.shape[:-2] + (filt.shape[-2], seg), F32)
    for n0 in range(0, seg, sn):
        n1 = min(seg, n0 + sn)
        acc = None
        for k0 in range(0, k_total, sk):
            k1 = min(k_total, k0 + sk)
            acc = _sgemm_operation(filt[..., k0:k1], cols[..., k0:k1, n0:n1], acc,
                                   b_contiguous_column=(out_size == 1))
        out[..., n0:n1] = acc
    return out
