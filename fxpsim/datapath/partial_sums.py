"""The operands of a MAC layer in the order its accumulator sees them, and the exact running sums.

A layer's final accumulator can be small while its partial sums were huge (and overflowed on the way): the
width a MAC array needs is set by the largest *running* sum, not by the result. This module lays a fully
connected, convolution or depthwise layer out as rows of operands ``a [R, G, K]`` (``G`` groups: 1, or the
input channels of a depthwise layer) and weights ``w [O, K]`` (output ``o`` reads group ``o // (O / G)``),
with ``K`` in the datapath's order (dense: ``k``; convolutions: ``(kh, kw, c)``, padded taps included), and
computes with numpy, in chunks and without per-element loops:

:func:`running_sum_peak`
    the largest :math:`|s|` over every partial sum the adder produces, in infinite precision: for the
    sequential order :math:`s_k = \\mathrm{init} + \\sum_{j \\le k} p_j` (cumulative sums), for the adder tree
    every node, with K-tiling (``tile_k``) the running sums inside each tile (``tile_peak``) and the sums
    of completed tiles in the wide accumulator (``peak``); products are first rounded onto the accumulator's
    LSB when it has fewer fraction bits (``shift``).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..core.fixed import Format, from_raw

__all__ = ["im2col", "mac_rows", "running_sum_peak", "round_products"]

_CHUNK = 1 << 22        # products held at once (int64: 32 MiB)


def im2col(x: np.ndarray, kernel, stride, dilation, pads, pad_value: int = 0) -> np.ndarray:
    """``[N, OH, OW, KH, KW, C]`` view of the windows of NHWC ``x`` padded by ``pads = ((t, b), (l, r))``
    with ``pad_value`` (a read-only strided view of the padded copy)."""
    (t, b), (l, r) = pads
    n, h, w, c = x.shape
    xp = np.full((n, h + t + b, w + l + r, c), pad_value, dtype=x.dtype)
    xp[:, t:t + h, l:l + w, :] = x
    kh, kw = kernel
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1, (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    s_n, s_h, s_w, s_c = xp.strides
    return as_strided(xp, (n, oh, ow, kh, kw, c), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c),
                      writeable=False)


def mac_rows(op: str, x: np.ndarray, w: np.ndarray, *, stride=(1, 1), dilation=(1, 1), pads=((0, 0), (0, 0)),
             pad_value: int = 0):
    """``(a [R, G, K], w [O, K], out_shape)`` of a MAC op on (already offset) integer operands.

    ``op``: ``"fully_connected"`` (``x [..., K]``, ``w [O, K]``), ``"conv2d"`` (``x`` NHWC, ``w [O, KH, KW, C]``)
    or ``"depthwise_conv2d"`` (``w [1, KH, KW, C*M]``); ``out_shape`` is the layer's output shape."""
    if op == "fully_connected":
        return x.reshape(-1, 1, x.shape[-1]), w.reshape(w.shape[0], -1), x.shape[:-1] + (w.shape[0],)
    if op == "conv2d":
        cols = im2col(x, w.shape[1:3], stride, dilation, pads, pad_value)
        n, oh, ow = cols.shape[:3]
        return cols.reshape(n * oh * ow, 1, -1), w.reshape(w.shape[0], -1), (n, oh, ow, w.shape[0])
    cols = im2col(x, w.shape[1:3], stride, dilation, pads, pad_value)         # [N, OH, OW, KH, KW, C]
    n, oh, ow, kh, kw, c = cols.shape
    a = np.moveaxis(cols.reshape(n * oh * ow, kh * kw, c), 2, 1)            # [R, C, KH*KW]
    return a, np.moveaxis(w[0].reshape(kh * kw, -1), 1, 0), (n, oh, ow, w.shape[3])


def round_products(p: np.ndarray, shift: int, rounding="half_up") -> np.ndarray:
    """Products rounded onto an accumulator LSB ``2**shift`` times theirs: :math:`\\mathrm{round}(p\\,2^{-s})`."""
    if shift <= 0:
        return p if shift == 0 else p << -shift
    flat = from_raw(p.reshape(-1), Format(64, shift)).cast(Format(64, 0), rounding=rounding)
    return flat.raw.reshape(p.shape)


def _products(a, w, rows, groups_of, shift, rounding, dtype):
    """Products ``[r, O, K]`` of the rows ``rows``, rounded onto the accumulator's LSB."""
    ar = a[rows]
    if a.shape[1] == 1:                                                      # dense / conv: broadcast
        p = np.multiply(ar, w[None], dtype=dtype)
    else:                                                                    # depthwise: gather the groups
        p = np.multiply(ar[:, groups_of, :], w[None], dtype=dtype)
    return np.array(round_products(p, shift, rounding), dtype=np.int64) if shift else p   # writable


def _range_with_init(run: np.ndarray, init: np.ndarray) -> tuple[int, int]:
    """``(min, max)`` of ``run[..., o, :] + init[o]`` without a temporary of ``run``'s size."""
    if not run.size:
        return 0, 0
    axes = tuple(i for i in range(run.ndim) if i != 1)
    hi, lo = run.max(axis=axes).astype(np.int64) + init, run.min(axis=axes).astype(np.int64) + init
    return int(lo.min()), int(hi.max())


def _range(v: np.ndarray) -> tuple[int, int]:
    return (int(v.min()), int(v.max())) if v.size else (0, 0)


def _tree_peak(p: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """Root of a balanced pairwise adder tree over the last axis (neighbours paired, an odd last element
    passed up) and the ``(min, max)`` over its nodes."""
    lo, hi = _range(p)
    while p.shape[-1] > 1:
        k = p.shape[-1]
        pairs = p[..., :k - k % 2].reshape(p.shape[:-1] + (k // 2, 2)).sum(axis=-1)
        p = np.concatenate([pairs, p[..., k - 1:]], axis=-1) if k % 2 else pairs
        lo, hi = min(lo, int(p.min())), max(hi, int(p.max()))
    return p[..., 0], (lo, hi)


def running_sum_peak(a: np.ndarray, w: np.ndarray, init=None, *, order: str = "sequential", tile_k=None,
                     shift: int = 0, rounding="half_up", after=None, keep_sums: bool = False) -> dict:
    """Largest exact partial sums of the MAC layer ``(a, w)`` laid out by :func:`mac_rows`.

    Parameters
    ----------
    a, w : int arrays ``[R, G, K]`` and ``[O, K]`` (operands as the multipliers see them)
    init : int array ``[O]``, optional
        The accumulator's start value (a preloaded bias, or a folded bias).
    order : {"sequential", "tree"}
        Inside a tile (the whole K without tiling).
    tile_k : int, optional
        K-tiling: tiles of ``tile_k`` products summed in a tile accumulator from 0, each tile's sum added to
        the wide accumulator (which starts from ``init``).
    shift, rounding
        Products rounded onto an accumulator LSB ``2**shift`` times the product's (:func:`round_products`).
    after : int array ``[O]``, optional
        A bias added after the sum (one more partial sum).
    keep_sums : bool
        Also return ``sums``: the exact final values ``[R, O]`` (``init`` and ``after`` included).

    Returns
    -------
    dict
        ``peak``: the largest :math:`|s|` of the (wide) accumulator over the whole sequence, its start value
        included; ``low``, ``high``: the smallest and largest such :math:`s` (signed: the two's-complement
        width that holds them is :math:`\\max(\\mathrm{bitlen}(high), \\mathrm{bitlen}(-low - 1)) + 1`, one bit
        less than the width of ``peak`` when the peak is :math:`-2^{n-1}`); ``tile_peak``: the largest running
        sum inside a tile (``None`` without tiling); ``sums`` with ``keep_sums``.
    """
    n_rows, groups, k = a.shape
    n_out = w.shape[0]
    groups_of = np.arange(n_out) // max(n_out // groups, 1)
    init = np.zeros(n_out, np.int64) if init is None else np.asarray(init, np.int64).reshape(n_out)
    low, high = _range(init)
    tile_peak = None
    kept = []
    tk = k if not tile_k or tile_k >= k else int(tile_k)
    n_tiles = -(-k // tk)
    step = max(1, _CHUNK // max(n_out * k, 1))
    # int32 arithmetic when no partial sum can reach 2^31 (half the memory traffic of int64)
    bound = int(np.abs(init).max(initial=0)) + k * int(np.abs(a).max(initial=0)) * int(np.abs(w).max(initial=0))
    dtype = np.int32 if bound < (1 << 31) and not shift else np.int64
    for start in range(0, n_rows, step):
        p = _products(a, w, slice(start, start + step), groups_of, shift, rounding, dtype)   # [r, O, K]
        if n_tiles > 1:
            pad = n_tiles * tk - k
            if pad:
                p = np.concatenate([p, np.zeros(p.shape[:-1] + (pad,), np.int64)], axis=-1)
            p = p.reshape(p.shape[:-1] + (n_tiles, tk))
        if order == "tree":
            sums, inner = _tree_peak(p.astype(np.int64, copy=False))
        else:
            run = np.cumsum(p, axis=-1, out=p)
            sums = run[..., -1].astype(np.int64)
            inner = _range(run) if n_tiles > 1 else (0, 0)
        spans = []
        if n_tiles > 1:
            tile_peak = max(tile_peak or 0, inner[1], -inner[0])
            wide = np.cumsum(sums, axis=-1) + init[None, :, None]
            final = wide[..., -1]
            spans.append(_range(wide))
        else:
            final = sums + init[None, :]
            spans += [inner, _range(final)] if order == "tree" else [_range_with_init(run, init)]
        if after is not None:
            final = final + np.asarray(after, np.int64)[None, :]
            spans.append(_range(final))
        low, high = min([low] + [a for a, _ in spans]), max([high] + [b for _, b in spans])
        if keep_sums:
            kept.append(np.asarray(final, np.int64))
    out = {"peak": max(high, -low), "low": low, "high": high, "tile_peak": tile_peak}
    if keep_sums:
        out["sums"] = np.concatenate(kept) if kept else np.zeros((0, n_out), np.int64)
    return out
