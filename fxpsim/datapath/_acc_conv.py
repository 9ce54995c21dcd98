"""Convolution helpers of :mod:`fxpsim.datapath.accumulate`: stride/dilation/group checks, SAME and
explicit padding, and the im2col lowering of a convolution to the per-add matmul, in tiles of output rows
whose patches take at most ``_CONV_TILE_BYTES`` (each output's sum is its own, so a tile boundary never changes
a bit; the accumulator format and the ``init`` codes are resolved once for the whole output)."""
from __future__ import annotations


import numpy as np

from ._acc_operands import _data_range, _init_codes, _parse_acc
from ._acc_scratch import _scratch
from ._acc_per_add import UNCOUNTED, _accumulate, _exact_acc

#: Patch bytes of one tile of output rows (im2col copy); the kernels' own temporaries are a small multiple.
_CONV_TILE_BYTES = 4 << 20    # = _SCRATCH_BYTES: the patch buffer is reused

def _positive_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1


def _pair(value, name: str, op: str) -> tuple[int, int]:
    """A positive int or a pair of them (stride, dilation), checked before any work."""
    if _positive_int(value):
        return int(value), int(value)
    try:
        vals = tuple(value) if not isinstance(value, (str, bytes)) else ()
    except TypeError:                                   # 1.5, None, ...
        vals = ()
    if len(vals) != 2 or not all(_positive_int(v) for v in vals):
        raise ValueError(f"{op}: {name} must be a positive int or a pair of them, got {value!r}")
    return int(vals[0]), int(vals[1])


def _check_groups(groups, op: str) -> None:
    if not _positive_int(groups):
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")


def _same_pad(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _paddings(padding, hw, khw, strides, dils, op: str):
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0), (0, 0))
        if mode == "SAME":
            return tuple(_same_pad(*t) for t in zip(hw, khw, strides, dils))
        raise ValueError(f"{op}: padding must be 'VALID', 'SAME' or ((top, bottom), (left, right)), got {padding!r}")
    try:
        pads = tuple((int(p[0]), int(p[1])) for p in padding)
        ok = len(pads) == 2 and all(len(p) == 2 for p in padding) and min(min(p) for p in pads) >= 0
    except (TypeError, ValueError, IndexError):
        ok = False
    if not ok:
        raise ValueError(f"{op}: padding must be 'VALID', 'SAME' or ((top, bottom), (left, right)) of "
                         f"non-negative ints, got {padding!r}")
    return pads


def _conv(cx, fx, cw, fw, acc, stride, padding, dilation, groups, r, o, order, at_end, init, threads, op,
          one_d: bool, count=True):
    """conv2d on codes (NHWC x HWIO) via im2col and the grouped, batched accumulation."""
    if cx.ndim != 4 or cw.ndim != 4:
        raise ValueError(f"{op}: x must be NHWC (4-D) and w [KH, KW, Cin/groups, Cout] (4-D), got shapes "
                         f"{cx.shape} and {cw.shape}")
    nbatch, h, wd, cin = cx.shape
    kh, kw, cg, cout = cw.shape
    _check_groups(groups, op)
    if cin % groups or cout % groups or cg != cin // groups:
        raise ValueError(f"{op}: with groups={groups}, x has {cin} channels and w expects Cin/groups={cg} "
                         f"input and {cout} output channels; need Cin = groups*{cg} and Cout divisible by groups")
    strides, dils = _pair(stride, "stride", op), _pair(dilation, "dilation", op)
    pads = _paddings(padding, (h, wd), (kh, kw), strides, dils, op)
    oh, ow = ((size + p[0] + p[1] - d * (k - 1) - 1) // s + 1
              for size, p, k, s, d in zip((h, wd), pads, (kh, kw), strides, dils))
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: the kernel ({kh}x{kw}, dilation {dils}) does not fit the padded input "
                         f"({h}x{wd}, padding {pads}); output would be {oh}x{ow}")
    a_rng = _data_range(cx)
    if any(pads[0] + pads[1]):
        a_rng = (min(a_rng[0], 0), max(a_rng[1], 0))            # padded taps are zeros
    dtype = cx.dtype
    if dtype.itemsize > 2:                                     # narrow lanes: less memory traffic
        dtype = next(t for t in (np.int16, np.int32, np.int64)
                     if np.iinfo(t).min <= a_rng[0] and a_rng[1] <= np.iinfo(t).max)
    (pt, _), (pl, pr) = pads
    span_h, span_w = (kh - 1) * dils[0] + 1, (kw - 1) * dils[1] + 1

    def windows(b0, b1, r0, r1):
        """Windows [n, rows, OW, C, KH, KW] of output rows r0..r1 of images b0..b1, on a zero-padded copy of
        only the input rows they read (padded rows r0*s .. (r1-1)*s + span)."""
        y0, y1 = r0 * strides[0], (r1 - 1) * strides[0] + span_h
        slab = np.zeros((b1 - b0, y1 - y0, wd + pl + pr, cin), cx.dtype)
        c0, c1 = max(y0 - pt, 0), min(y1 - pt, h)
        if c1 > c0:
            slab[:, c0 + pt - y0:c1 + pt - y0, pl:pl + wd] = cx[b0:b1, c0:c1]
        win = np.lib.stride_tricks.sliding_window_view(slab, (span_h, span_w), axis=(1, 2))
        return win[:, ::strides[0], ::strides[1], :, ::dils[0], ::dils[1]][:, :r1 - r0, :ow]

    cog, kk = cout // groups, kh * kw * cg
    b3 = cw.reshape(kh, kw, cg, groups, cog).transpose(3, 0, 1, 2, 4).reshape(groups, kk, cog)
    user = (nbatch, ow, cout) if one_d else (nbatch, oh, ow, cout)

    def tile(b0, b1, r0, r1, acc_t, init_t, shape):
        win = windows(b0, b1, r0, r1)
        nb, nr = win.shape[:2]
        patches = _scratch("patches", (nb, nr, ow, kh, kw, cin), dtype)
        np.copyto(patches, win.transpose(0, 1, 2, 4, 5, 3), casting="unsafe")
        npos = nb * nr * ow
        a3 = patches.reshape(npos, kh, kw, groups, cg).transpose(3, 0, 1, 2, 4).reshape(groups, npos, kk)

        def to_internal(t):
            return t.reshape(npos, groups, cog).transpose(1, 0, 2)

        out, counts, accf, rng = _accumulate(a3, b3, fx, fw, acc_t, init_t, r, o, order, at_end, threads, op,
                                             shape, to_internal, a_rng, count=count)
        out = out.transpose(1, 0, 2).reshape(shape)
        if counts is not None and not isinstance(counts, str):
            counts = counts.transpose(1, 0, 2).reshape(shape)
        return out, counts, accf, rng

    row_bytes = ow * kh * kw * cin * np.dtype(dtype).itemsize
    if nbatch * oh * row_bytes <= _CONV_TILE_BYTES:
        return tile(0, nbatch, 0, oh, acc, init, user)
    # tiles: whole images while a row block holds one, else blocks of rows of one image
    rows = max(1, _CONV_TILE_BYTES // row_bytes)
    if rows >= oh:
        step = rows // oh
        tiles = [(b, min(b + step, nbatch), 0, oh) for b in range(0, nbatch, step)]
    else:
        tiles = [(b, b + 1, t, min(t + rows, oh)) for b in range(nbatch) for t in range(0, oh, rows)]
    accf = _parse_acc(acc, fx.frac + fw.frac)
    init_codes = _init_codes(init, user, fx.frac + fw.frac if accf is None else accf.frac)
    if accf is None:
        accf = _exact_acc(fx, fw, kk, _data_range(init_codes) if init_codes is not None else (0, 0), op)
    elif init_codes is not None:
        lo, hi = _data_range(init_codes)
        if lo < accf.min_code or hi > accf.max_code:
            raise ValueError(f"{op}: init codes {lo}..{hi} do not fit the accumulator {accf}")
    if init_codes is not None and one_d:
        init_codes = init_codes[:, None]
    full = (nbatch, oh, ow, cout)
    out = np.empty(full, np.int64)
    counts = None
    ranges = []
    for b0, b1, r0, r1 in tiles:
        init_t = None if init_codes is None else init_codes[b0:b1, r0:r1]
        o_t, c_t, _, rng = tile(b0, b1, r0, r1, accf, init_t, (b1 - b0, r1 - r0, ow, cout))
        out[b0:b1, r0:r1] = o_t
        if isinstance(c_t, str):
            counts = UNCOUNTED
        elif c_t is not None:
            if counts is None:
                counts = np.zeros(full, np.int64)
            counts[b0:b1, r0:r1] = c_t
        ranges.append(rng)
    rng = None if any(x is None for x in ranges) else (min(x[0] for x in ranges), max(x[1] for x in ranges))
    if one_d:
        out = out.reshape(user)
        counts = counts.reshape(user) if counts is not None and not isinstance(counts, str) else counts
    return out, counts, accf, rng
