"""Convolution helpers of :mod:`fxpsim.datapath.accumulate`: stride/dilation/group checks, SAME and
explicit padding, and the im2col lowering of a convolution to the per-add matmul."""
from __future__ import annotations


import numpy as np

from ._acc_operands import _data_range
from ._acc_scratch import _scratch
from ._acc_per_add import _accumulate

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
    xp = np.pad(cx, ((0, 0), pads[0], pads[1], (0, 0)))
    # one strided copy: windows [N, OH, OW, C, KH, KW] -> patches [N, OH, OW, KH, KW, C]
    windows = np.lib.stride_tricks.sliding_window_view(
        xp, ((kh - 1) * dils[0] + 1, (kw - 1) * dils[1] + 1), axis=(1, 2))
    windows = windows[:, ::strides[0], ::strides[1], :, ::dils[0], ::dils[1]][:, :oh, :ow]
    patches = _scratch("patches", (nbatch, oh, ow, kh, kw, cin), dtype)
    np.copyto(patches, windows.transpose(0, 1, 2, 4, 5, 3), casting="unsafe")
    npos, cog, kk = nbatch * oh * ow, cout // groups, kh * kw * cg
    a3 = patches.reshape(npos, kh, kw, groups, cg).transpose(3, 0, 1, 2, 4).reshape(groups, npos, kk)
    b3 = cw.reshape(kh, kw, cg, groups, cog).transpose(3, 0, 1, 2, 4).reshape(groups, kk, cog)
    user = (nbatch, ow, cout) if one_d else (nbatch, oh, ow, cout)

    def to_internal(t):
        return t.reshape(npos, groups, cog).transpose(1, 0, 2)

    out, counts, accf, rng = _accumulate(a3, b3, fx, fw, acc, init, r, o, order, at_end, threads, op, user,
                                         to_internal, a_rng, count=count)
    out = out.transpose(1, 0, 2).reshape(user)
    counts = counts if counts is None or isinstance(counts, str) else counts.transpose(1, 0, 2).reshape(user)
    return out, counts, accf, rng


