"""Integer layer kernels: int8 fully connected, convolutions, add and average pooling.

The kernels (:func:`quantized_fully_connected`, :func:`quantized_conv2d`,
:func:`quantized_depthwise_conv2d`, :func:`quantized_add`,
:func:`quantized_average_pool2d`) accumulate through :mod:`fxpsim.datapath`, so any
accumulator width, overflow mode and adder order can be simulated, then scale the
accumulator with a :class:`~fxpsim.requantize.Requantizer` (TFLite / gemmlowp
arithmetic, :mod:`fxpsim.requantize`), add the output zero point and clamp.  With
TFLite's settings they reproduce its reference int8 kernels.  (They carry a
``quantized_`` prefix because ``fxpsim.conv2d`` is the datapath's accumulating
convolution.)

All integer arithmetic is done on numpy arrays whose intermediate values are proven to
fit (int64; zero-point offsets of the operands in the narrowest type that holds every
possible difference, int16 for 8-bit codes), so no step depends on C overflow rules.

Fast paths, taken only where they give the same bits (counts included): int8 convolutions, depthwise
convolutions and fully connected layers with zero weight zero points run on the fused C kernel of
:mod:`fxpsim.datapath.conv_int8` (MAC, per-add overflow, TFLite output stage in one pass); an int8 ADD reads
a table of its 65536 results, built once per parameter set by the numpy arithmetic of
:mod:`fxpsim.datapath.integer_add`.

The add and the average pooling are in :mod:`fxpsim.datapath.integer_add` and
:mod:`fxpsim.datapath.integer_pool`, the result type and the argument checks in
:mod:`fxpsim.datapath.integer_layer_args`; all are importable from here too.
"""
from __future__ import annotations

import math

import numpy as np

from .accumulate import conv2d as _datapath_conv2d
from .accumulate import matmul as _datapath_matmul
from ..core.fixed import FixedArray, Format, Overflow, from_raw
from ..core.fixed import _logging as _overflow_log_active
from . import conv_int8 as _fused
from .integer_add import quantized_add
from .integer_checks import _check_zero_point
from .integer_layer_args import (  # noqa: F401
    IntegerResult, _acc_format, _bias, _check_requant, _clamp_range, _common, _explicit_padding, _mac_knobs,
    _offset, _operand, _output_spec, _pair,
)
from .integer_pool import quantized_average_pool2d
from .requantize import Requantizer, requantize_shift

__all__ = [
    "IntegerResult", "quantized_fully_connected", "quantized_conv2d", "quantized_depthwise_conv2d",
    "quantized_add", "quantized_average_pool2d",
]


def _finish(acc: FixedArray, bias, bias_at: str, overflow, requant: Requantizer, out_spec) -> IntegerResult:
    """Bias add (``end``), requantize along the last axis, add zero point, clamp."""
    overflows = int(acc.overflows)
    raw = acc.raw
    if bias is not None and bias_at == "end":
        total = raw + bias                 # exact: |acc|, |bias| < 2^62
        lo = acc.fmt.min_code              # saturate_symmetric refuses the most negative code too
        if acc.fmt.signed and Overflow.parse(overflow) is Overflow.SATURATE_SYMMETRIC:
            lo = -acc.fmt.max_code
        if (_overflow_log_active() or int(total.min()) < lo
                or int(total.max()) > acc.fmt.max_code):  # an add overflows (or is logged): fit it
            full = from_raw(np.broadcast_to(bias, acc.shape).copy(), Format.integer(acc.fmt.word))
            fitted = (acc + full).cast(acc.fmt, overflow=overflow)
            overflows += int(fitted.overflows)
            total = fitted.raw
        raw = total
    dtype, zp, lo, hi = out_spec
    return IntegerResult(requant._output_codes(raw, acc.fmt.word, zp, lo, hi, dtype), raw, overflows)


_MAC_KNOBS_DOC = """zero_point : {"subtract", "fold"}
        ``"subtract"`` (default): the multipliers see :math:`x - z_x` (padded taps are 0).
        ``"fold"``: the int8 x int8 form of TFLite and most NPUs, :math:`\\sum_k x_k (w_k - z_w) +
        (b - z_x \\sum_k (w_k - z_w))`: raw input codes (padded taps hold :math:`z_x`), the zero-point term
        folded into the bias (saturated to ``bias_bits``; with ``product_shift`` the term is rounded onto the
        accumulator LSB with ``rounding``). Equal when nothing overflows or rounds; the partial sums
        differ, so under saturation the results do.
    bias_bits : int, optional
        Width of the register holding the folded bias (default: the accumulator's).
    tile_k, tile_acc : int, Format or int, optional
        K-tiling: the K products of each output are summed in tiles of ``tile_k`` in a ``tile_acc``
        accumulator (from 0, overflow after every add), and each tile's sum is added into the ``acc``
        accumulator (preloaded with the bias), with ``overflow`` at both levels.
    product_shift, rounding : int, str
        An accumulator whose LSB is :math:`2^{\\text{product\\_shift}}` product LSBs (fewer fraction bits):
        every product is rounded onto it (``rounding``) before it is added; ``acc``/``bias`` codes and the
        returned accumulator are in that LSB."""


def _fold_bias(b, x_zp: int, w_sums: np.ndarray, fmt: Format, bias_bits, shift: int = 0, rounding="half_up"):
    """``b - round(z_x * sum_k w'_k / 2^shift)`` saturated into a ``bias_bits`` register (default: the
    accumulator's) and into the accumulator; ``(bias, how many saturated)``.  The zero-point term is in
    product LSBs and the bias in accumulator LSBs (2^``product_shift`` products): the term is rounded onto
    the accumulator LSB with the products' ``rounding``, as a precomputed folded bias would be."""
    term = int(x_zp) * w_sums.astype(np.int64)
    if shift:
        term = requantize_shift(term, int(shift), rounding, out=Format.integer(64))
    folded = (np.zeros(w_sums.shape, np.int64) if b is None else b) - term
    bits = fmt.word if bias_bits is None else min(int(bias_bits), fmt.word)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    clipped = np.clip(folded, lo, hi)
    return clipped, int(np.count_nonzero(clipped != folded))


def _accumulate_rows(op, xo, wk, init, fmt, overflow, order, tile_k, tile_acc, shift, rounding, geometry):
    """The MAC sum of ``op`` on offset operands (``wk`` in the [O, ...] layout of :func:`mac_rows`) with
    K-tiling: ``(FixedArray in acc-LSB units, tile overflows)``."""
    from .accumulate import sum as _datapath_sum
    from .partial_sums import mac_rows
    a, w2, out_shape = mac_rows(op, xo, wk, **geometry)
    n_rows, groups, k = a.shape
    n_out = w2.shape[0]
    tfmt = Format(_acc_format(tile_acc).word, -shift)
    tiles, tile_ovf = [], 0
    for t0 in range(0, k, tile_k):                  # one datapath call per tile (never per element)
        at, wt = a[:, :, t0:t0 + tile_k], w2[:, t0:t0 + tile_k]
        if groups == 1:
            r = _datapath_matmul(np.ascontiguousarray(at[:, 0, :]), np.ascontiguousarray(wt.T), acc=tfmt,
                                 overflow=overflow, order=order, rounding=rounding)
            raw = r.raw
        else:                                       # depthwise: one matmul per input channel
            m = n_out // groups
            r = _datapath_matmul(np.ascontiguousarray(np.moveaxis(at, 1, 0)),
                                 np.ascontiguousarray(wt.reshape(groups, m, -1).transpose(0, 2, 1)), acc=tfmt,
                                 overflow=overflow, order=order, rounding=rounding)
            raw = np.moveaxis(r.raw, 0, 1).reshape(n_rows, n_out)
        tile_ovf += int(r.overflows)
        tiles.append(raw)
    stack = np.stack(tiles, axis=-1)                # [R, O, T] tile sums in accumulator LSBs
    ini = None if init is None else np.broadcast_to(np.asarray(init, np.int64), out_shape).reshape(n_rows, n_out)
    wide = _datapath_sum(stack, axis=-1, acc=Format.integer(fmt.word), overflow=overflow, init=ini)
    return FixedArray(wide.raw.reshape(out_shape), Format.integer(fmt.word),
                      overflows=int(wide.overflows) + tile_ovf), tile_ovf


def quantized_fully_connected(x, w, bias=None, *, requant: Requantizer, x_zp=0, w_zp=0, out_zp=0,
                              act_min=None, act_max=None, out_dtype=np.int8, acc=32, overflow="wrap",
                              order="sequential", bias_at="end", zero_point="subtract", bias_bits=None,
                              tile_k=None, tile_acc=None, product_shift=0, rounding="half_up",
                              need_acc: bool = True, prepare: bool = False) -> IntegerResult:
    r"""Integer fully connected layer (TFLite ``FULLY_CONNECTED``, int8).

    .. math::

        a_{n,o} = \mathrm{acc}\Big(\sum_k (x_{n,k} - z_x)(w_{o,k} - z_{w,o})\Big) + b_o,\qquad
        y_{n,o} = \mathrm{clamp}\big(R_o(a_{n,o}) + z_y,\ \mathrm{act\_min},\ \mathrm{act\_max}\big)

    where :math:`\mathrm{acc}` is :func:`fxpsim.datapath.matmul` with accumulator ``acc``
    (overflow applied after every add) and :math:`R` the requantizer.

    Parameters
    ----------
    x : ndarray of int, shape (..., K)
    w : ndarray of int, shape (O, K)
        TFLite weight layout.
    bias : ndarray of int, shape (O,), optional
    requant : Requantizer
        e.g. ``Requantizer.tflite(s_x, s_w, s_y, kind="float")`` for the shared vectors' TFLite build.
    x_zp, w_zp, out_zp : int
        Zero points (``w_zp`` may be per output channel).
    act_min, act_max : int, optional
        Fused activation clamp (default: the ``out_dtype`` range); see :func:`~fxpsim.requantize.activation_range`.
    acc : Format or int
        Accumulator (``32`` = TFLite's int32).
    overflow : str
        Accumulator overflow mode (``"wrap"`` is what int32 C arithmetic does).
    order : {"sequential", "tree"}
    bias_at : {"end", "init"}
        Add the bias after the sum (TFLite) or preload the accumulator with it.
    {knobs}
    need_acc : bool
        ``False``: the fused int8 kernel may leave ``acc`` None (the caller does not read it).
    prepare : bool
        Validate the call and return the fused kernel's prepared call for inputs shaped and typed as ``x``
        (:class:`fxpsim.datapath.conv_int8.FusedCall`, ``call(x, need_acc)``; a compiled graph plan's step),
        or ``None`` when that kernel does not model the layer; nothing is computed.

    Returns
    -------
    IntegerResult
        ``out`` of shape (..., O).
    """
    x = _operand(x, "x", np.ndim(x) if np.ndim(x) >= 1 else 1)
    w = _operand(w, "w", 2)
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features but w (O, K) = {w.shape} expects {w.shape[1]}")
    _common(bias_at, overflow, order)
    out_spec = _output_spec(out_zp, act_min, act_max, out_dtype)
    fmt = _acc_format(acc)
    requant = _check_requant(requant, w.shape[0])
    b = _bias(bias, w.shape[0], fmt)
    _mac_knobs(zero_point, tile_k, product_shift)
    fold = zero_point == "fold"
    z = _check_zero_point(x_zp, np.iinfo(x.dtype), "x_zp")
    fast = _fast("fully_connected", x, w, b, requant, z, w_zp, out_spec, fmt, overflow, order, bias_at,
                 zero_point, tile_k, product_shift, need_acc, prepare=prepare)
    if fast is not None or prepare:
        return fast
    wo = _offset(w, w_zp, "w_zp", channel_axis=0, narrow=True)
    xo = _offset(x, 0 if fold else z, "x_zp", narrow=True)
    clipped = 0
    if fold:
        b, clipped = _fold_bias(b, z, wo.sum(axis=1, dtype=np.int64), fmt, bias_bits, product_shift, rounding)
    init = np.broadcast_to(b, x.shape[:-1] + (w.shape[0],)) if (b is not None and bias_at == "init") else None
    tile_ovf = 0
    if tile_k is not None and tile_k < w.shape[1]:
        a, tile_ovf = _accumulate_rows("fully_connected", xo, wo, init, fmt, overflow, order, int(tile_k),
                                       fmt if tile_acc is None else tile_acc, int(product_shift), rounding, {})
        a = FixedArray(a.raw.reshape(x.shape[:-1] + (w.shape[0],)), a.fmt, overflows=a.overflows)
    else:
        a = _datapath_matmul(xo, np.ascontiguousarray(wo.T), acc=Format(fmt.word, -int(product_shift)),
                             overflow=overflow, order=order, init=init, rounding=rounding)
        a = FixedArray(a.raw, fmt, overflows=a.overflows) if product_shift else a
    return _with(_finish(a, b, bias_at, overflow, requant, out_spec), tile_ovf, clipped)


def _fast(op, x, w, b, requant, z, w_zp, out_spec, fmt, overflow, order, bias_at, zero_point, tile_k,
          product_shift, need_acc, geometry=None, prepare=False) -> IntegerResult | None:
    """The layer on the fused int8 kernel (:func:`fxpsim.datapath.conv_int8.fused`) when it models the call
    exactly (the same bits, counts included), else None; with ``prepare`` its prepared call (or None)."""
    if prepare:
        return _fused.prepare(op, x.shape, x.dtype, w, b, requant=requant, x_zp=z, w_zp=w_zp, out_spec=out_spec,
                              fmt=fmt, overflow=overflow, order=order, bias_at=bias_at, zero_point=zero_point,
                              tile_k=tile_k, product_shift=product_shift, **(geometry or {}))
    res = _fused.fused(op, x, w, b, requant=requant, x_zp=z, w_zp=w_zp, out_spec=out_spec, fmt=fmt,
                       overflow=overflow, order=order, bias_at=bias_at, zero_point=zero_point, tile_k=tile_k,
                       product_shift=product_shift, need_acc=need_acc, **(geometry or {}))
    if res is None:
        return None
    out, acc, overflows, above, below = res
    return IntegerResult(out, acc, overflows, 0, 0, above, below)


def _with(res: IntegerResult, tile_overflows: int, bias_clipped: int) -> IntegerResult:
    if not (tile_overflows or bias_clipped):
        return res
    return IntegerResult(res.out, res.acc, res.overflows, tile_overflows, bias_clipped)


def _conv(x, w_hwio, groups, bias, requant, x_zp, out_zp, stride, padding, dilation, act_min, act_max,
          out_dtype, acc, overflow, order, bias_at, w_offset, zero_point="subtract", bias_bits=None, tile_k=None,
          tile_acc=None, product_shift=0, rounding="half_up", op=None, w_raw=None, w_zp=0, need_acc=True,
          prepare=False):
    _common(bias_at, overflow, order)
    out_spec = _output_spec(out_zp, act_min, act_max, out_dtype)
    fmt = _acc_format(acc)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    pads = _explicit_padding(padding, x.shape[1:3], w_hwio.shape[:2], stride, dilation)
    for n, k, d, (p0, p1), axis in zip(x.shape[1:3], w_hwio.shape[:2], dilation, pads, ("height", "width")):
        if n + p0 + p1 < (k - 1) * d + 1:
            raise ValueError(f"the dilated kernel ({(k - 1) * d + 1}) is larger than the padded input "
                             f"{axis} ({n + p0 + p1})")
    n_out = w_hwio.shape[3]
    requant = _check_requant(requant, n_out)
    b = _bias(bias, n_out, fmt)
    _mac_knobs(zero_point, tile_k, product_shift)
    fold = zero_point == "fold"
    z = _check_zero_point(x_zp, np.iinfo(x.dtype), "x_zp")
    if op is not None:
        fast = _fast(op, x, w_raw, b, requant, z, w_zp, out_spec, fmt, overflow, order, bias_at, zero_point,
                     tile_k, product_shift, need_acc, {"stride": stride, "pads": pads, "dilation": dilation}, prepare)
        if fast is not None or prepare:
            return fast
    wo = np.ascontiguousarray(w_offset(w_hwio))
    xo = _offset(x, 0 if fold else z, "x_zp", narrow=True)
    clipped = 0
    if fold:   # raw codes: padded taps hold the zero point, so x - z_x = 0 there as in the subtract form
        b, clipped = _fold_bias(b, z, wo.sum(axis=(0, 1, 2), dtype=np.int64), fmt, bias_bits,
                                product_shift, rounding)
        (t, bo), (le, r) = pads
        if t or bo or le or r:
            xp = np.full((x.shape[0], x.shape[1] + t + bo, x.shape[2] + le + r, x.shape[3]), z, dtype=xo.dtype)
            xp[:, t:t + x.shape[1], le:le + x.shape[2], :] = xo
            xo, pads = xp, ((0, 0), (0, 0))
    out_hw = tuple((n + p0 + p1 - (k - 1) * d - 1) // s + 1
                   for n, k, s, d, (p0, p1) in zip(xo.shape[1:3], w_hwio.shape[:2], stride, dilation, pads))
    init = (np.broadcast_to(b, (x.shape[0],) + out_hw + (n_out,))
            if (b is not None and bias_at == "init") else None)
    tile_ovf = 0
    k_total = math.prod(w_hwio.shape[:3])
    if tile_k is not None and tile_k < k_total:
        wk = wo.transpose(3, 0, 1, 2) if groups == 1 else wo.transpose(2, 0, 1, 3)
        a, tile_ovf = _accumulate_rows("conv2d" if groups == 1 else "depthwise_conv2d", xo, wk, init, fmt,
                                       overflow, order, int(tile_k), fmt if tile_acc is None else tile_acc,
                                       int(product_shift), rounding,
                                       {"stride": stride, "dilation": dilation, "pads": pads})
    else:
        a = _datapath_conv2d(xo, wo, acc=Format(fmt.word, -int(product_shift)), stride=stride, padding=pads,
                             dilation=dilation, groups=groups, overflow=overflow, order=order, init=init,
                             rounding=rounding)
        a = FixedArray(a.raw, fmt, overflows=a.overflows) if product_shift else a
    return _with(_finish(a, b, bias_at, overflow, requant, out_spec), tile_ovf, clipped)


def quantized_conv2d(x, w, bias=None, *, requant: Requantizer, x_zp=0, w_zp=0, out_zp=0, stride=1,
                     padding="VALID", dilation=1, act_min=None, act_max=None, out_dtype=np.int8, acc=32,
                     overflow="wrap", order="sequential", bias_at="end", zero_point="subtract", bias_bits=None,
                     tile_k=None, tile_acc=None, product_shift=0, rounding="half_up",
                     need_acc: bool = True, prepare: bool = False) -> IntegerResult:
    r"""Integer 2-D convolution (TFLite ``CONV_2D``, int8, NHWC).

    .. math::

        a_{n,i,j,o} = \mathrm{acc}\Big(\sum_{u,v,c} (x_{n,\,is+ud-p,\,js+vd-p,\,c} - z_x)
        (w_{o,u,v,c} - z_{w,o})\Big) + b_o,\qquad y = \mathrm{clamp}(R_o(a) + z_y)

    Padded taps contribute :math:`x - z_x = 0`, exactly as TFLite skips them.

    Parameters
    ----------
    x : ndarray of int, shape (N, H, W, C)
    w : ndarray of int, shape (O, KH, KW, C)
        TFLite weight layout.
    stride, dilation : int or (int, int)
    padding : "SAME", "VALID" or ((top, bottom), (left, right))
    bias, requant, x_zp, w_zp, out_zp, act_min, act_max, out_dtype, acc, overflow, order, bias_at
        As :func:`quantized_fully_connected`; TFLite's conv uses ``Requantizer.tflite(..., kind="double")``.
    zero_point, bias_bits, tile_k, tile_acc, product_shift, rounding, need_acc, prepare
        As :func:`quantized_fully_connected` (tiles run over K in the (kh, kw, c) order).

    Returns
    -------
    IntegerResult
        ``out`` of shape (N, OH, OW, O).
    """
    x = _operand(x, "x", 4)
    w = _operand(w, "w", 4)
    if x.shape[3] != w.shape[3]:
        raise ValueError(f"x has {x.shape[3]} channels but w (O, KH, KW, C) = {w.shape} expects {w.shape[3]}")
    w_hwio = np.transpose(w, (1, 2, 3, 0))
    return _conv(x, w_hwio, 1, bias, requant, x_zp, out_zp, stride, padding, dilation, act_min, act_max,
                 out_dtype, acc, overflow, order, bias_at,
                 lambda k: _offset(k, w_zp, "w_zp", channel_axis=3, narrow=True), zero_point, bias_bits, tile_k,
                 tile_acc, product_shift, rounding, "conv2d", w, w_zp, need_acc, prepare)


def quantized_depthwise_conv2d(x, w, bias=None, *, requant: Requantizer, x_zp=0, w_zp=0, out_zp=0,
                               stride=1, padding="VALID", dilation=1, act_min=None, act_max=None,
                               out_dtype=np.int8, acc=32, overflow="wrap", order="sequential",
                               bias_at="end", zero_point="subtract", bias_bits=None, tile_k=None, tile_acc=None,
                               product_shift=0, rounding="half_up", need_acc: bool = True,
                               prepare: bool = False) -> IntegerResult:
    r"""Integer depthwise convolution (TFLite ``DEPTHWISE_CONV_2D``, int8, NHWC).

    Output channel :math:`o = cM + m` (depth multiplier :math:`M = O / C`) sees input channel
    :math:`c` only:

    .. math::

        a_{n,i,j,o} = \mathrm{acc}\Big(\sum_{u,v} (x_{n,\,is+ud-p,\,js+vd-p,\,c} - z_x)
        (w_{0,u,v,o} - z_{w,o})\Big) + b_o

    Parameters
    ----------
    x : ndarray of int, shape (N, H, W, C)
    w : ndarray of int, shape (1, KH, KW, C*M)
        TFLite weight layout.
    Other parameters as :func:`quantized_conv2d`.

    Returns
    -------
    IntegerResult
        ``out`` of shape (N, OH, OW, C*M).
    """
    x = _operand(x, "x", 4)
    w = _operand(w, "w", 4)
    if w.shape[0] != 1 or w.shape[3] % x.shape[3]:
        raise ValueError(f"depthwise w must have shape (1, KH, KW, C*M) with C = {x.shape[3]} input "
                         f"channels; got {w.shape}")
    w_hwio = np.transpose(w, (1, 2, 0, 3))         # (KH, KW, 1, C*M)
    return _conv(x, w_hwio, x.shape[3], bias, requant, x_zp, out_zp, stride, padding, dilation, act_min,
                 act_max, out_dtype, acc, overflow, order, bias_at,
                 lambda k: _offset(k, w_zp, "w_zp", channel_axis=3, narrow=True), zero_point, bias_bits, tile_k,
                 tile_acc, product_shift, rounding, "depthwise_conv2d", w, w_zp, need_acc, prepare)


quantized_fully_connected.__doc__ = quantized_fully_connected.__doc__.replace("{knobs}", _MAC_KNOBS_DOC)
