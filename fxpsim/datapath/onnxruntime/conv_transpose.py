r"""onnxruntime's float32 ``ConvTranspose`` (CPU kernel, 2-D, NCHW), bit for bit, in numpy (measured live in
``tests/frontends/test_onnx_conv_transpose.py``; onnxruntime 1.32, x86-64 with FMA).

Per image and group :math:`g` (:math:`C_g` input channels, :math:`F` output channels per group, kernel
:math:`k_h \times k_w`), onnxruntime computes the column buffer with MLAS SGEMM (A transposed):

.. math:: \mathrm{col}[(f, i, j), p] = \mathrm{fma}(w[C_g - 1, f, i, j], x[C_g - 1, p], \dots
          \mathrm{fma}(w[0, f, i, j], x[0, p], 0))

(one chain of fused multiply-adds over the input channels in index order; this is MLAS's order while
:math:`C_g \le 128`, one K slice), then Col2im: the output starts at 0 and, for :math:`f, i, j` in that order
and input positions :math:`(h, w)` row-major, adds :math:`\mathrm{col}[(f, i, j), (h, w)]` at
:math:`(h s_h - p_t + i d_h,\ w s_w - p_l + j d_w)` when inside (one float32 add each); then the bias is added
(float32). Neither threads nor the batch change it (threads split the SGEMM's rows or columns).
"""
from __future__ import annotations

import numpy as np

from .mlas import fma32

__all__ = ["conv_transpose2d", "conv_transpose_out_hw", "MAX_CHANNELS_PER_GROUP"]

F32 = np.float32
#: Input channels per group up to which MLAS sums them in one chain (one K slice of 128).
MAX_CHANNELS_PER_GROUP = 128


def conv_transpose_out_hw(h, w, kernel, stride, pads, dilation, output_padding):
    """Output height and width; ``pads = (top, left, bottom, right)`` (ONNX order)."""
    (kh, kw), (sh, sw), (dh, dw), (oph, opw) = kernel, stride, dilation, output_padding
    oh = (h - 1) * sh - pads[0] - pads[2] + dh * (kh - 1) + 1 + oph
    ow = (w - 1) * sw - pads[1] - pads[3] + dw * (kw - 1) + 1 + opw
    return oh, ow


def conv_transpose2d(x, w, bias, stride, pads, dilation, group, output_padding=(0, 0)) -> np.ndarray:
    """``x`` [N, C, H, W] float32, ``w`` [C, F, KH, KW], ``bias`` [G*F] or None; returns [N, G*F, OH, OW]."""
    x, w = np.asarray(x, F32), np.asarray(w, F32)
    n, c, h, wd = x.shape
    if c % group or w.shape[0] != c:
        raise ValueError(f"conv_transpose2d: {c} input channels, weights {list(w.shape)}, group {group}")
    cg, fc, kh, kw = c // group, w.shape[1], w.shape[2], w.shape[3]
    if cg > MAX_CHANNELS_PER_GROUP:
        raise ValueError(f"conv_transpose2d: {cg} input channels per group; MLAS's order is reproduced up to "
                         f"{MAX_CHANNELS_PER_GROUP}")
    oh, ow = conv_transpose_out_hw(h, wd, (kh, kw), stride, pads, dilation, output_padding)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv_transpose2d: an output of {oh} x {ow}")
    y = np.zeros((n, group * fc, oh, ow), F32)
    for g in range(group):
        wg = w[g * cg:(g + 1) * cg].reshape(cg, fc * kh * kw)
        xg = x[:, g * cg:(g + 1) * cg].reshape(n, cg, h * wd)
        col = np.zeros((n, fc * kh * kw, h * wd), F32)
        for k in range(cg):
            col = fma32(wg[k][None, :, None], xg[:, k][:, None, :], col)
        col = col.reshape(n, fc, kh, kw, h, wd)
        for i in range(kh):
            oy = np.arange(h) * stride[0] - pads[0] + i * dilation[0]
            ry = np.nonzero((oy >= 0) & (oy < oh))[0]
            for j in range(kw):
                ox = np.arange(wd) * stride[1] - pads[1] + j * dilation[1]
                rx = np.nonzero((ox >= 0) & (ox < ow))[0]
                if not ry.size or not rx.size:
                    continue
                sel = np.ix_(range(n), range(g * fc, (g + 1) * fc), oy[ry], ox[rx])
                y[sel] = (y[sel] + col[:, :, i, j][np.ix_(range(n), range(fc), ry, rx)]).astype(F32)
    if bias is not None:
        y = (y + np.asarray(bias, F32).reshape(1, -1, 1, 1)).astype(F32)
    return y
