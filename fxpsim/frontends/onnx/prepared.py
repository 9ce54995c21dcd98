"""Compiled-plan steps of the ONNX graph ops (``Op.prepare``, :mod:`fxpsim.graph.plan`): what a MAC or pooling
node derives from the graph and the datapath alone (weights minus their zero points, the clipped bias, the
requantization multiplier, the im2col gather, the dequantized weights of a float32 MLAS node) derived once per
plan, so that a batch-1 call costs the arithmetic, not the argument checks around it.

Every step is the node's ``run`` bit for bit, and only exists where that is provable from the plan's inputs:

* **integer MAC** (``qlinear_conv``, ``qlinear_matmul``, ``conv_integer``, ``matmul_integer``) on onnxruntime's
  datapath (:func:`~.op_support.is_onnxruntime_datapath`: native requantization, a 32-bit *wrapping*
  accumulator), zero points subtracted, no K tiles. Wrapping is reduction modulo :math:`2^{32}`, a ring
  homomorphism, so the accumulator of any order of adds, the bias added after the sum or preloaded, is
  :math:`\\mathrm{wrap}_{32}\\big(b + \\sum_k (x_k - z_x)(w_k - z_w)\\big)` with :math:`b` the bias saturated to
  ``bias_bits``. The exact sum is one float GEMM: every product and every partial sum is an integer of
  magnitude at most the node's worst case :math:`B = \\max_o \\sum_k |w_{ok} - z_w|\\,\\max|x - z_x|` (the
  bias's magnitude added), and the step is only built when :math:`B < 2^{53}`, where every float64 operation
  on them is exact (in any order, fused or not); below :math:`2^{24}` the same holds in float32, which the GEMM
  then uses. The pair saturation of ``u8s8_pairs="saturate16"`` and the output stage are the run's own
  functions (:func:`~.mac_ops._saturate_pairs`, :func:`~fxpsim.datapath.onnxruntime.mlas.requantize_output`).
* **float32 MLAS MAC** (``ort_kernel="float"`` on onnxruntime's datapath): the weights and bias dequantized and
  laid out once; the calls are the run's (:func:`~.mac_ops._float_kernel_run`).
* **global average pool** (``qlinear_avg_pool`` with ``global_path``, native, whole unpadded image): the integer
  window sum (wrapped to int32: the same homomorphism; not at all when :math:`\\max|q| \\cdot HW < 2^{31}`)
  through :func:`~fxpsim.datapath.onnxruntime.mlas.qlinear_global_average_pool_plan`.

A trace, or an input of another shape than the plan's, runs the node's full ``run`` (its trace with it).
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import mlas_kernel
from ...graph.mac_ops import refuse_unmodelled_knobs
from ...graph.plan import untraced_step
from .op_support import _pads, _pair, _scale, _spec, _zp, is_native, is_onnxruntime_datapath

__all__ = ["mac_prepare", "avg_pool_prepare"]

EXACT_F64, EXACT_F32 = 1 << 53, 1 << 24


def _gather(shape, node, w_shape):
    """Flat indices into the zero-padded NHWC sample ``[H+pt+pb, W+pl+pr, C]`` of every im2col entry:
    ``[OH*OW, KH*KW*C]``, rows the output positions, columns (kernel row, kernel column, channel)."""
    _, h, w, c = shape
    (pt, pb), (pl, pr) = _pads(node.attrs)
    (sh, sw), (dh, dw) = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
    kh, kw = w_shape[1], w_shape[2]
    hp, wp = h + pt + pb, w + pl + pr
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    r = (np.arange(oh)[:, None, None, None] * sh + np.arange(kh)[None, None, :, None] * dh)
    q = (np.arange(ow)[None, :, None, None] * sw + np.arange(kw)[None, None, None, :] * dw)
    pos = (r * wp + q).reshape(oh * ow, kh * kw)
    idx = (pos[:, :, None] * c + np.arange(c)[None, None, :]).reshape(oh * ow, kh * kw * c)
    return idx, (hp, wp), (oh, ow)


def _integer_acc_fn(graph, node, dp, x_shape, x_zp, w_zp, bias, need_int: bool):
    """``f(x) -> accumulator`` (channels last) of the module docstring, or ``None`` when the float GEMM is not
    provably exact. The GEMM runs in float32 when :math:`B < 2^{24}` (every partial sum is then an integer that
    float32 holds exactly), else in float64. When :math:`B` (bias included) is below :math:`2^{31}` nothing
    wraps and, unless ``need_int``, the accumulator is returned as that exact float sum itself; else as int64
    wrapped to int32."""
    from .mac_ops import _bias_codes, _mac_bound
    from .op_support import _acc_format
    bound = _mac_bound(graph, node)
    if bound >= EXACT_F64:
        return None
    ft = np.float32 if bound < EXACT_F32 else np.float64
    w = _spec(graph, node.inputs[1]).data
    wz = np.asarray(w_zp, np.int64)
    wo = (w.astype(np.int64) - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim else wz)).astype(ft)
    b = None if bias is None else _bias_codes(bias, dp, _acc_format(dp)).astype(np.int64)
    zx = ft(x_zp)
    if node.op in ("qlinear_matmul", "matmul_integer"):
        wt = np.ascontiguousarray(wo.T)
        out_shape = tuple(x_shape[:-1]) + (w.shape[0],)

        def gemm(x):
            return (x.astype(ft) - zx) @ wt
    else:
        gemm, out_shape = _conv_gemm(node, x_shape, wo, zx)
    if bound < (1 << 31) and not need_int:
        add_bias = None if b is None else K.channel_plan(np.add, b.astype(ft))

        def exact(x):
            s = gemm(x).reshape(out_shape)
            return s if add_bias is None else add_bias(s, out=s)
        return exact
    add_int_bias = None if b is None else K.channel_plan(np.add, b)

    def wrapped(x):
        s = gemm(x).reshape(out_shape).astype(np.int64)
        if add_int_bias is not None:
            add_int_bias(s, out=s)
        return K.wrap_int32(s)
    return wrapped


def _conv_gemm(node, x_shape, wo, zx):
    """``(f, out_shape)``: ``f(x)`` the exact convolution sums (in ``wo``'s float dtype) of ``x - zx`` with the
    weights minus their zero points ``wo`` (OHWI), over the zero-padded input (the padding is
    :math:`z_x - z_x = 0`): an im2col gather and one GEMM per group, or for a large depthwise convolution one
    strided product per tap, for a large dense one with 8 or more channels one GEMM per tap (every partial sum
    an integer bounded by :math:`B`: exact in any order)."""
    groups = int(node.attrs.get("group", 1))
    n, h, wd, c = x_shape
    o = wo.shape[0]
    idx, (hp, wp), (oh, ow) = _gather(x_shape, node, wo.shape)
    idx = (np.arange(n)[:, None, None] * (hp * wp * c) + idx).astype(np.intp)   # over the whole batch: the gathered
    #                                                                   columns come out C-ordered for the GEMM
    (pt, _), (pl, _) = _pads(node.attrs)
    cg, og, taps = c // groups, o // groups, wo.shape[1] * wo.shape[2]
    depthwise = cg == 1 and og == 1
    if groups == 1:
        wt = np.ascontiguousarray(wo.reshape(o, -1).T)                       # [KH*KW*C, O]
    elif depthwise:
        wt = np.ascontiguousarray(wo.reshape(o, taps).T)                     # [KH*KW, C]
    else:
        wt = np.ascontiguousarray(wo.reshape(groups, og, taps, cg).transpose(0, 2, 3, 1)).reshape(
            groups, taps * cg, og)                                           # [G, KH*KW*Cg, Og]

    (sh, sw), (dh, dw) = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
    tap_slices = [(slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))
                  for i in range(wo.shape[1]) for j in range(wo.shape[2])]
    by_taps = depthwise and n * oh * ow * c * taps > 1 << 14      # large: one strided product per tap
    dense_taps = groups == 1 and c >= 8 and n * oh * ow * c * taps > 1 << 15      # large: one GEMM per tap
    w_taps = np.ascontiguousarray(wo.reshape(o, taps, c).transpose(1, 2, 0)) if dense_taps else None   # [T, C, O]
    take = idx.size >= K.ROW             # np.take gathers a large im2col faster; indexing costs less when small
    direct = groups == 1 and taps == 1 and (sh, sw) == (1, 1) and (hp, wp) == (h, wd)   # 1x1: x is the im2col

    def gemm(x):
        if direct:
            return (x.reshape(n, h * wd, c).astype(wo.dtype) - zx) @ wt
        pad = np.zeros((n, hp, wp, c), wo.dtype)
        inner = pad[:, pt:pt + h, pl:pl + wd]
        np.subtract(x, zx, out=inner)
        if by_taps:
            acc, tmp = np.zeros((n, oh, ow, c), wo.dtype), np.empty((n, oh, ow, c), wo.dtype)
            for t, (rows, cols) in enumerate(tap_slices):
                acc += np.multiply(pad[:, rows, cols], wt[t], out=tmp)
            return acc
        if dense_taps:
            acc = np.zeros((n * oh * ow, o), wo.dtype)
            for t, (rows, cols) in enumerate(tap_slices):
                acc += np.ascontiguousarray(pad[:, rows, cols]).reshape(-1, c) @ w_taps[t]
            return acc
        cols = np.take(pad.reshape(-1), idx) if take else pad.reshape(-1)[idx]        # [N, P, KH*KW*C]
        if groups == 1:
            return cols @ wt
        if depthwise:
            return (cols.reshape(n, oh * ow, taps, c) * wt).sum(axis=2)
        cols = cols.reshape(n * oh * ow, taps, groups, cg).transpose(2, 0, 1, 3).reshape(
            groups, n * oh * ow, taps * cg)
        return np.matmul(cols, wt).transpose(1, 0, 2)                        # [N*P, G, Og]
    return gemm, (n, oh, ow, o)


def mac_prepare(graph, node, dp, in_shapes):
    """A plan step of an ONNX MAC node (module docstring), or ``None`` where the node's ``run`` is the step."""
    from .mac_ops import _bias_input, _float_constants, _float_kernel_run, _mac_zero_points, _saturate_pairs
    if in_shapes[0] is None or not is_onnxruntime_datapath(dp):
        return None
    integer_out = node.op in ("conv_integer", "matmul_integer")
    shape = tuple(in_shapes[0])
    consts = [None if not t else _spec(graph, t).data for t in node.inputs]
    if not integer_out and node.attrs.get("ort_kernel") == "float":
        constants = _float_constants(graph, node, consts, shape)
        return untraced_step(graph, node, dp, lambda ins: _float_kernel_run(graph, node, ins, constants), shape)
    refuse_unmodelled_knobs(node, dp, "onnxruntime semantics", allow=("zero_point", "tile_k"))    # as the run does
    if getattr(dp, "zero_point", "subtract") != "subtract" or getattr(dp, "tile_k", None):
        return None
    x_zp, w_zp = _mac_zero_points(graph, node)
    pairs = node.attrs.get("u8s8_pairs", "exact") == "saturate16"
    acc_of = _integer_acc_fn(graph, node, dp, shape, x_zp, w_zp, _bias_input(node, consts), pairs)
    if acc_of is None:
        return None
    y = _spec(graph, node.outputs[0])
    if integer_out:
        def finish(acc):
            return acc.astype(y.dtype)
    else:
        x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
        finish = K.requantize_output_plan(
            K.requant_multiplier(_scale(x), w.scale, _scale(y), float(node.attrs.get("alpha", 1.0))), _zp(y), y.dtype)

    def fast(ins):
        acc = acc_of(ins[0])
        if pairs:
            acc = _saturate_pairs(node, [ins[0], consts[1]], dp, x_zp, acc)
        return finish(acc)
    return untraced_step(graph, node, dp, fast, shape)


def avg_pool_prepare(graph, node, dp, in_shapes):
    """A plan step of a native ``qlinear_avg_pool`` node: onnxruntime's float32 window sums with their counts
    and slices derived once (:func:`~fxpsim.datapath.onnxruntime.mlas.qlinear_average_pool_plan`), or over the
    whole unpadded image on a 32-bit wrapping accumulator the integer sum (module docstring); else ``None``."""
    if in_shapes[0] is None or not is_native(dp):
        return None
    shape = tuple(in_shapes[0])
    if not node.attrs.get("global_path"):
        from .qlinear_ops import window_pool
        pool = window_pool(graph, node, shape)
        return untraced_step(graph, node, dp, lambda ins: pool(ins[0]), shape)
    if not is_onnxruntime_datapath(dp):
        return None
    k, pads = _pair(node.attrs, "pool_size"), _pads(node.attrs)
    if k != shape[1:3] or any(p for side in pads for p in side):
        return None
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    finish = K.qlinear_global_average_pool_plan(k[0] * k[1], _scale(x), _zp(x), _scale(y), _zp(y), y.dtype)
    lo, hi = x.code_range
    fits = max(abs(lo), abs(hi)) * k[0] * k[1] < 1 << 31         # no sum can wrap

    def fast(ins):
        sums = ins[0].sum(axis=(1, 2), keepdims=True, dtype=np.int64)
        return finish(sums if fits else K.wrap_int32(sums))
    return untraced_step(graph, node, dp, fast, shape)


def _memory_order(arr):
    """A flat byte view of a dense array (a C-contiguous array with its axes permuted, e.g. a transposed conv
    output) in its memory order, or ``None``: two arrays of one shape and strides list the same elements in the
    same order."""
    if arr.dtype.itemsize != 1:
        return None
    if arr.flags.c_contiguous:
        return arr.reshape(-1).view(np.uint8)
    v = arr.transpose(np.argsort(arr.strides, kind="stable")[::-1])
    return v.reshape(-1).view(np.uint8) if v.flags.c_contiguous else None


def binary_table_prepare(graph, node, dp, in_shapes):
    """A plan step of a native ``qlinear_add`` / ``qlinear_mul`` with 8-bit operands: on a native datapath the
    op is elementwise (each output code a function of the two input codes alone: onnxruntime's float32
    formulas, the operand swap of ``broadcast`` and the uint8 shift included), so its run on the grid of all
    :math:`256 \\times 256` code pairs, computed once, is a table that gives every call's output by lookup
    at the 16-bit index :math:`2^8 a + b` of the codes' bits (numpy broadcasting of the two operands kept);
    ``None`` otherwise."""
    if not is_native(dp):
        return None
    from ...graph.registry import find_op
    a, b = (_spec(graph, t) for t in node.inputs[:2])
    if np.dtype(a.dtype).itemsize != 1 or np.dtype(b.dtype).itemsize != 1:
        return None
    bits = np.arange(256, dtype=np.uint8)
    grid_a = np.repeat(bits, 256).view(a.dtype)       # entry (i << 8) | j: a's bits i, b's bits j
    grid_b = np.tile(bits, 256).view(b.dtype)
    run = find_op(node.op).run
    table = run(graph, node, [grid_a, grid_b], dp, False)[0][0]
    table_bytes = np.ascontiguousarray(table).view(np.uint8) if table.dtype.itemsize == 1 else None

    def lookup(ins):
        if ins[0].dtype.itemsize != 1 or ins[1].dtype.itemsize != 1:    # (codes held in a wider dtype)
            return run(graph, node, ins, dp, False)[0][0]
        a, b = ins[0], ins[1]
        c = getattr(mlas_kernel._k, "table2", None)                   # (None: not built, or an older build)
        if c is not None and a.size >= K.ROW and table_bytes is not None and a.shape == b.shape \
                and a.strides == b.strides:                       # (below ROW codes numpy's lookup costs less)
            out = np.empty_like(a, dtype=table.dtype)             # (the operands' memory order)
            fa, fb, fo = _memory_order(a), _memory_order(b), _memory_order(out)
            if fa is not None and fb is not None and fo is not None:
                c(table_bytes, fa, fb, fo)                        # the same lookup in C, one pass
                return out
        i = a.view(np.uint8).astype(np.uint16 if a.size >= K.ROW else np.intp)   # (i << 8) | j: 16 bits suffice;
        i <<= 8                                                     # small, intp (numpy's own index) is quicker
        j = b.view(np.uint8)
        if i.shape == j.shape or np.broadcast_shapes(i.shape, j.shape) == i.shape:
            np.bitwise_or(i, j, out=i)
        else:
            i = i | j
        return table[i]
    return untraced_step(graph, node, dp, lookup)
