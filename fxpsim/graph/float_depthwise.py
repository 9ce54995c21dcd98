"""A depthwise convolution on a float / block-scaled datapath.

A depthwise layer (NHWC ``x``, ``w`` [KH, KW, C, M], output channel :math:`cM + m`) is C independent
dense layers, one per input channel:

.. math::

    y[n, i, j, cM + m] = \\mathrm{acc}\\Big(\\mathrm{fl}_{out}(b_{cM+m} / s_{cM+m});\\;
        A^{(c)}_{(n,i,j),(a,b)}\\, B^{(c)}_{(a,b),m}\\Big)\\, s_{cM+m}

with :math:`A^{(c)}` the channel's im2col rows (K = KH·KW, ordered ``(a, b)``) and
:math:`B^{(c)} = w[:, :, c, :]`: :func:`~fxpsim.graph.float_mac.float_mac` on each (a MAC array runs a
depthwise layer as one short dot product per output, K = KH·KW, padded to the accumulator's chunk).  The
scales are those of the whole layer: the activations' from the layer's calibrated input amax, the weights'
per output channel :math:`cM + m` or, ``per-tensor``, from the amax of the whole kernel; block formats
quantize each output channel's K = KH·KW elements in blocks (zero-padded to the block size).
"""
from __future__ import annotations

import numpy as np

from .float_mac import FloatMacResult, FloatMacSettings, _finite_amax, conv_patches, float_mac

__all__ = ["float_depthwise_conv2d"]


def float_depthwise_conv2d(x, w, bias, settings: FloatMacSettings, stride=(1, 1), padding="VALID",
                           x_amax: float | None = None) -> FloatMacResult:
    """Depthwise conv2d of NHWC ``x`` with ``w`` [KH, KW, C, M] on ``settings`` (module docstring); the
    result's arrays are NHWC with ``C*M`` channels and its counts are summed over the channels."""
    if not isinstance(settings, FloatMacSettings):
        raise TypeError(f"float_depthwise_conv2d: settings must be FloatMacSettings, got {type(settings).__name__}")
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    if x.ndim != 4 or w.ndim != 4 or x.shape[3] != w.shape[2]:
        raise ValueError(f"float_depthwise_conv2d: x must be NHWC and w [KH, KW, C, M] with C = x's channels, "
                         f"got {x.shape}, {w.shape}")
    kh, kw, c, m = w.shape
    bias = np.zeros(c * m) if bias is None else np.asarray(bias, np.float64).reshape(c * m)
    patches = conv_patches(x, (kh, kw), stride, padding)          # (N, OH, OW, KH, KW, C)
    n, oh, ow = patches.shape[:3]
    amax = _finite_amax(x) if x_amax is None else x_amax
    w_amax = float(np.abs(w).max(initial=0.0))
    values, exact = np.empty((n * oh * ow, c * m)), np.empty((n * oh * ow, c * m))
    counts = dict(overflows=0, nans=0, underflows=0, terms_inexact=0, saturated=0)
    for ch in range(c):
        rows = patches[..., ch].reshape(n * oh * ow, kh * kw)
        r = float_mac(rows, w[:, :, ch, :].reshape(kh * kw, m), bias[ch * m:(ch + 1) * m], settings,
                      amax, w_amax)
        values[:, ch * m:(ch + 1) * m], exact[:, ch * m:(ch + 1) * m] = r.values, r.exact
        for k in counts:
            counts[k] += getattr(r, k)
    shape = (n, oh, ow, c * m)
    return FloatMacResult(values.reshape(shape), exact.reshape(shape), **counts)
