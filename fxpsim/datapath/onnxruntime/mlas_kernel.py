r"""The C kernel (``_mlas.h``) of one MLAS SGEMM operation, bit for bit as the numpy model in
:mod:`fxpsim.datapath.onnxruntime.mlas`.

:func:`sgemm` computes, for every matrix :math:`i` of a batch, one of MLAS's x86-64 (AVX2/FMA) kernels:

* ``SLICES``: :math:`o = (\cdots((s_0 + c) + s_1)\cdots) + s_{last}` with
  :math:`s_j = \mathrm{fma}(a_{m,k_1-1}, b_{k_1-1,n}, \cdots \mathrm{fma}(a_{m,k_0}, b_{k_0,n}, 0))` over the
  :math:`j`-th slice :math:`[k_0, k_1)` of ``sk`` reduction steps (each fma rounded once);
* ``M1`` (MlasSgemmKernelM1Avx, one row of A): products :math:`p_k = \mathrm{fl}(a_k b_{k,n})` summed four at
  a time :math:`((p_0 + p_1) + p_2) + p_3`, each group added to :math:`o` (starting at :math:`c` or 0);
* ``M1TB`` (MlasSgemmKernelM1TransposeBAvx) and ``N1`` (the same kernel for an N = 1 product): eight lane sums
  :math:`l_{k \bmod 8} \mathrel{+}= \mathrm{fl}(x_k r_k)` per row, reduced in the fixed trees of rows in
  blocks of 4, 2 and 1, plus :math:`c`.

Every product and sum is float32, rounded to nearest even on its own (the C file disables FP contraction).
The kernel chooses nothing: :func:`fxpsim.datapath.onnxruntime.mlas_sgemm._sgemm_operation` decides which
kernel MLAS runs. Setting ``_k = None`` routes every caller to the numpy model (the tests compare both).
"""
from __future__ import annotations

import numpy as np

try:
    from . import _mlas as _k
except ImportError:          # built without the extension: the numpy model runs
    _k = None

__all__ = ["SLICES", "M1", "M1TB", "N1", "available", "sgemm", "conv_segmented", "conv_segmented_prepared"]

SLICES, M1, M1TB, N1 = 0, 1, 2, 3
F32 = np.float32


def available() -> bool:
    """True when the C kernel is built (and not switched off)."""
    return _k is not None


def _check(name: str, x, ndim: int = 3) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != F32 or x.ndim != ndim:
        raise TypeError(f"mlas_kernel.sgemm: {name} must be a {ndim}-D float32 ndarray, got "
                        f"{getattr(x, 'dtype', type(x).__name__)} with shape {getattr(x, 'shape', None)}")
    if any(s % 4 for s in x.strides):
        x = np.ascontiguousarray(x)
    return x


def sgemm(a3, b3, c3, kind: int, sk: int = 0, simd: bool = True) -> np.ndarray:
    """``out[i] = kernel(a3[i % len(a3)], b3[i], c3[i])``: ``a3`` [P, M, K] float32 (P divides the batch: a
    matrix shared by every P-th item), ``b3`` [B, K, N], ``c3`` [B, M, N] or None (beta 0); any strides.
    ``sk``: the reduction steps per slice of ``SLICES``. ``simd=False`` runs the scalar C paths only.
    Returns a new [B, M, N] float32 array."""
    a3, b3 = _check("a3", a3), _check("b3", b3)
    period, m, k = a3.shape
    nb, kb, n = b3.shape
    if kb != k or period < 1 or nb % period:
        raise ValueError(f"mlas_kernel.sgemm: a3 {a3.shape} and b3 {b3.shape} do not chain (K, batch)")
    if c3 is not None:
        c3 = _check("c3", c3)
        if c3.shape != (nb, m, n):
            raise ValueError(f"mlas_kernel.sgemm: c3 has shape {c3.shape}, expected {(nb, m, n)}")
    if kind not in (SLICES, M1, M1TB, N1):
        raise ValueError(f"mlas_kernel.sgemm: unknown kernel {kind!r}")
    if (kind == M1 or kind == M1TB) and m != 1 or kind == N1 and n != 1:
        raise ValueError(f"mlas_kernel.sgemm: kernel {kind} needs M = 1 (M1, M1TB) or N = 1 (N1), got {m} x {n}")
    if kind == SLICES and k > 0 and int(sk) < 1:
        raise ValueError(f"mlas_kernel.sgemm: sk must be >= 1, got {sk!r}")
    out = np.empty((nb, m, n), F32)
    if nb and m and n:
        _k.run(a3, b3, c3, out, kind, int(sk), period, simd)
    return out


def conv_segmented(x, w, groups: int, kernel, stride, pads, dilation, out_hw, segments, simd: bool = True):
    """MlasConv's expand-then-GEMM over ``segments`` of output positions (``(start, count)`` pairs) for every
    image and group: per segment, slices of StrideN positions and StrideK reduction rows (MLAS's panel
    strides of the segment), each im2col block multiplied by the filters with the kernel
    :func:`sgemm` would choose (``M1`` for one filter, ``N1`` for a 1x1 output, else ``SLICES``), beta 0 for
    the first K slice and 1 after. ``x`` [N, C, H, W], ``w`` [M, C/groups, KH, KW] float32,
    ``pads = (top, left)``. Returns [N, M, OH * OW] float32 (no bias)."""
    x = np.ascontiguousarray(_check("x", x, 4))
    return conv_segmented_prepared(x.shape, w, groups, kernel, stride, pads, dilation, out_hw, segments, simd)(x)


def conv_segmented_prepared(x_shape, w, groups: int, kernel, stride, pads, dilation, out_hw, segments,
                            simd: bool = True):
    """:func:`conv_segmented` for inputs of ``x_shape`` with its operands validated and laid out once:
    ``f(x)``, ``x`` a C-contiguous float32 array of that shape (anything else goes through the checks of
    :func:`conv_segmented`)."""
    x_shape = tuple(int(d) for d in x_shape)
    w = _check("w", w, 4)
    n, c, h, wd = x_shape
    m = w.shape[0]
    (kh, kw), (sh, sw), (pt, pl), (dh, dw), (oh, ow) = kernel, stride, pads, dilation, out_hw
    if groups < 1 or c % groups or m % groups or w.shape[1] * groups != c or w.shape[2:] != (kh, kw):
        raise ValueError(f"mlas_kernel.conv_segmented: weights {w.shape} do not match input {x_shape}, "
                         f"groups {groups}, kernel {kernel}")
    if min(sh, sw, dh, dw) < 1 or min(pt, pl) < 0 or min(oh, ow) < 1:
        raise ValueError(f"mlas_kernel.conv_segmented: bad geometry stride {stride}, dilation {dilation}, "
                         f"pads {pads}, output {out_hw}")
    seg = np.ascontiguousarray(np.asarray(segments, np.longlong).reshape(-1, 2))
    if len(seg) == 0 or seg[0, 0] != 0 or np.any(seg[:, 1] < 1) or np.any(seg[1:, 0] != np.cumsum(seg[:-1, 1])) \
            or seg[-1, 0] + seg[-1, 1] != oh * ow:
        raise ValueError(f"mlas_kernel.conv_segmented: segments {seg.tolist()} do not tile {oh * ow} positions")
    w2 = np.ascontiguousarray(w.reshape(m, -1))
    geometry = (sh, sw, pt, pl, dh, dw, oh, ow)

    def run(x):
        if not (isinstance(x, np.ndarray) and x.dtype == F32 and x.shape == x_shape and x.flags.c_contiguous):
            return conv_segmented(x, w, groups, (kh, kw), stride, pads, dilation, out_hw, seg, simd)
        out = np.empty((n, m, oh * ow), F32)
        _k.conv(x, w2, out, groups, kh, kw, geometry, seg, simd)
        return out
    return run
