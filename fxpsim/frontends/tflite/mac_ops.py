"""The MAC ops of TFLite graphs imported for the optimized kernel sets (``builtin``, ``xnnpack``):
``tflite_conv2d``, ``tflite_depthwise_conv2d`` and ``tflite_fully_connected``. They accumulate as the core MAC
ops of :mod:`fxpsim.graph.mac_ops` and, on the graph's ``"native"`` datapath, requantize as that kernel set
does (LiteRT's optimized ``MultiplyByQuantizedMultiplier``, XNNPACK's float32 scale); on any other datapath they
are the core op (registered when :mod:`fxpsim.frontends.tflite.ops` is imported). An int8 node on an accumulator of
at most 32 bits runs that requantization inside the fused int8 kernel (:func:`_fused_requantizer`:
:class:`~fxpsim.datapath.requantize.Requantizer` ``double`` with ``final_rounding="half_up"``, or ``float32``
rounding half to even), at the speed of the reference kernel set; the others requantize the kernel's
accumulators in numpy."""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format
from ...datapath.integer_ops import (quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected)
from ...datapath.tflite.int16 import mbqm_int64
from ...datapath.requantize import Requantizer, _srdhm, _wrap_int32, activation_range, quantize_multiplier
from ...graph.mac_ops import _bias_in_accumulator, refuse_unmodelled_knobs
from ...graph.mac_view import core_operands, register_mac_view
from ...graph.ops import OPS, Op, register_op
from .op_support import _cached, _kernels, _spec


_CORE_MAC = {"tflite_conv2d": "conv2d", "tflite_depthwise_conv2d": "depthwise_conv2d",
             "tflite_fully_connected": "fully_connected"}


def _mbqm_tie_up(acc, m, s):
    """LiteRT's optimized ``MultiplyByQuantizedMultiplier`` (x86-64): gemmlowp's SRDHM, then a right shift
    that rounds ties toward :math:`+\\infty` (``(v + 2^{e-1}) >> e``) instead of away from zero."""
    m = np.asarray(m, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    if np.any(left):
        return _srdhm_tie_up_general(np.asarray(acc, dtype=np.int64), m, left, right)
    v = np.array(acc, dtype=np.int64)               # one buffer, every step in place (the hot path)
    v *= m
    v += 1 << 30
    v >>= 31                                         # SRDHM: floor((a m + 2^30) / 2^31), saturated below
    np.minimum(v, (1 << 31) - 1, out=v)
    v += (np.int64(1) << right) >> 1
    v >>= right
    return v


def _srdhm_tie_up_general(acc, m, left, right):
    v = _srdhm(_wrap_int32(acc << left), m)
    return (v + ((np.int64(1) << right) >> 1)) >> right


def _shadow(graph, node):
    """The node as the core MAC op (same tensors and attributes)."""
    cache = graph.__dict__.setdefault("_tflite_shadow", {})
    n = cache.get(node.name)
    if n is None:
        from ...graph.ir import Node
        n = cache[node.name] = Node(node.name, _CORE_MAC[node.op], node.inputs, node.outputs, node.attrs)
    return n


def _xnn_scale(graph, node):
    r"""XNNPACK's float32 requantization scale per output channel: :math:`\mathrm{fl}_{32}(\mathrm{fl}_{32}(s_x
    s_{w,o}) / s_y)`."""
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    sx, sy, sw = np.float32(x.scale[0]), np.float32(y.scale[0]), w.scale.astype(np.float32)
    return _cached(graph, node, "xnn_scale", lambda: (sx * sw / sy).astype(np.float32))


def _fused_requantizer(graph, node, kernels, acc_bits):
    r"""The :class:`Requantizer` that is the kernel set's own output stage of an int8 x int8 -> int8 node on
    an accumulator of at most 32 bits (the fused int8 kernel then runs it), or None:

    * ``builtin``: LiteRT's optimized ``MultiplyByQuantizedMultiplier`` (:func:`_mbqm_tie_up`): ``double`` with
      ``final_rounding="half_up"``;
    * ``xnnpack``: :math:`\mathrm{rne}(\mathrm{fl}_{32}(\mathrm{fl}_{32}(a)\,s_o))`, ``float32`` rounding half to
      even. XNNPACK clamps the float to :math:`[-128 - z_y, 127 - z_y]` before ``lrintf``: for integer
      bounds that is the same code as rounding first and clamping after.
    """
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    if x.dtype != np.int8 or y.dtype != np.int8 or acc_bits > 32:
        return None
    if kernels == "xnnpack":
        scale = _xnn_scale(graph, node)
        return _cached(graph, node, "xnn_rq", lambda: Requantizer("float32", scale=scale, rounding="half_even"))
    if kernels == "builtin":
        m, s = _builtin_multiplier(graph, node)
        return _cached(graph, node, "builtin_rq", lambda: Requantizer("double", multiplier=m, shift=s,
                                                                      final_rounding="half_up"))
    return None


def _native_requant(graph, node, acc, kernels):
    """Output codes (before the clamp) of the kernel set's own requantization of int32 accumulators."""
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    sx, sy = np.float32(x.scale[0]), np.float32(y.scale[0])
    sw = w.scale.astype(np.float32)
    zy = int(y.zero_point[0])
    if x.dtype == np.int16 and node.op == "tflite_fully_connected":    # 16x8 FC: float64, every kernel set
        rq = _cached(graph, node, "int16_fc", lambda: Requantizer.tflite(sx, sw, sy, kind="float"))
        return rq(acc) + zy
    if kernels == "xnnpack" and x.dtype == np.int8:
        f = acc.astype(np.float32) * _xnn_scale(graph, node)
        lo, hi = np.float32(-128 - zy), np.float32(127 - zy)
        return np.rint(np.clip(f, lo, hi)).astype(np.int64) + zy
    m, s = _builtin_multiplier(graph, node)
    if x.dtype == np.int16:             # 16x8: int64 accumulators, LiteRT's 64-bit MBQM in every kernel set
        return mbqm_int64(acc, m, s) + zy
    return _mbqm_tie_up(acc, m, s) + zy


def _builtin_multiplier(graph, node):
    """LiteRT's per-channel ``(multiplier, shift)`` of the node (int64 arrays)."""
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    sx, sy = np.float32(x.scale[0]), np.float32(y.scale[0])
    sw = w.scale.astype(np.float32)

    def params():
        if node.op == "tflite_fully_connected" and sw.size == 1:
            real = np.float64(np.float32(sx * sw[0])) / np.float64(sy)     # GetQuantizedConvolutionMultipler
            m, s = quantize_multiplier(np.atleast_1d(real))
        else:
            m, s = quantize_multiplier(np.float64(sx) * sw.astype(np.float64) / np.float64(sy))
        return np.asarray(m, np.int64), np.asarray(s, np.int64)
    return _cached(graph, node, "builtin_mult", params)


def _native_setup(graph, node, dp):
    """What the kernel set's MAC node takes on the ``"native"`` datapath besides its operands:
    ``(kernel, kwargs, (lo, hi), act, own)``; ``own``: the kwargs' requantizer is the kernel set's own
    (:func:`_fused_requantizer`: the kernel's outputs are the node's), else the kernel gives accumulators."""
    refuse_unmodelled_knobs(node, dp, f"LiteRT {_kernels(graph)} kernels")
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    wz = w.zero_point
    act = node.attrs.get("activation", "none")
    lo, hi = y.code_range
    if act != "none":
        a_lo, a_hi = activation_range(act, float(y.scale[0]), int(y.zero_point[0]), y.dtype)
        lo, hi = max(lo, a_lo), min(hi, a_hi)
    overflow = getattr(dp.accumulator_overflow, "value", dp.accumulator_overflow)
    # A 64-bit accumulator (16x8 models) runs as a 62-bit one, the widest the kernels take: the same values,
    # since K products of 16 x 8-bit codes and a bias below 2^47 (LiteRT's own bound, _check_wide_bias) stay far
    # below 2^61.
    acc_bits = min(dp.accumulator_bits, 62)
    # An int8 layer on an accumulator of <= 32 bits: the kernel set's own requantization runs in the fused int8
    # kernel (its outputs and clip counts are the node's). Otherwise the accumulators are all this op needs from
    # the kernel (its own requantization follows); an int8 layer then asks for int8 outputs under TFLite's
    # reference requantization so that the fused int8 kernel runs (the same accumulators, ~4x faster than the
    # general path), and those outputs are discarded.
    own = _fused_requantizer(graph, node, _kernels(graph), acc_bits)
    fused = x.dtype == np.int8 and y.dtype == np.int8
    rq = own if own is not None else (
        _cached(graph, node, "fused_rq", lambda: Requantizer.tflite(float(x.scale[0]), w.scale, float(y.scale[0]),
                                                                   kind="double"))
        if fused else Requantizer("float", scale=(1.0,)))
    common = dict(requant=rq, x_zp=int(x.zero_point[0]),
                  w_zp=(wz if wz.size > 1 else int(wz[0])) if np.any(wz) else 0, out_zp=int(y.zero_point[0]) if fused else 0,
                  out_dtype=np.int8 if fused else np.int32, acc=Format.integer(acc_bits), overflow=overflow,
                  order=dp.accumulator_order, bias_at="init" if dp.bias_add == "preload" else "end", need_acc=True)
    if own is not None:
        common.update(act_min=lo, act_max=hi)
    core = _CORE_MAC[node.op]
    if core == "fully_connected":
        return quantized_fully_connected, common, (lo, hi), act, own is not None
    from ...graph.ops import _pair, _padding
    common.update(stride=_pair(node.attrs, "stride"), padding=_padding(node.attrs),
                  dilation=_pair(node.attrs, "dilation"))
    return (quantized_conv2d if core == "conv2d" else quantized_depthwise_conv2d), common, (lo, hi), act, \
        own is not None


def _check_wide_bias(node, dp, bias) -> None:
    r"""A bias of magnitude :math:`\ge 2^{47}` on an accumulator wider than 62 bits is refused (LiteRT's 64-bit
    requantization assumes :math:`|acc| < 2^{47}`)."""
    if dp.accumulator_bits > 62 and bias is not None and np.any(np.abs(bias) >= (1 << 47)):
        raise ValueError(f"node {node.name!r} ({node.op}): a bias of magnitude >= 2^47 on a "
                         f"{dp.accumulator_bits}-bit accumulator (LiteRT's 64-bit requantization assumes "
                         f"|acc| < 2^47)")


def _native_mac_run(graph, node, ins, dp, trace):
    shadow = _shadow(graph, node)
    if getattr(dp, "requantization", None) != "native":
        return OPS[shadow.op].run(graph, shadow, ins, dp, trace)
    kernel, common, clamp, act, own = _native_setup(graph, node, dp)
    # a bias wider than the accumulator saturates into it (as the core MAC ops; no bias shift here)
    bias, bias_clipped = _bias_in_accumulator(graph, node, ins[2] if len(node.inputs) > 2 and node.inputs[2] else None,
                                              dp)
    _check_wide_bias(node, dp, bias)
    if own:
        common["need_acc"] = bool(trace)
    res = kernel(ins[0], ins[1], bias, **common)
    if own:
        return _own_outputs(graph, node, ins, dp, trace, res.out, res.acc, res.overflows, res.above, res.below,
                            bias, bias_clipped, clamp, act)
    return _native_outputs(graph, node, ins, dp, trace, res.acc, res.overflows, bias, bias_clipped, clamp, act)


def _native_mac_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step (:mod:`fxpsim.graph.plan`): on the ``"native"`` datapath, the fused int8 kernel's
    call prepared once (the core MAC op's prepared step otherwise); ``None`` when there is none (the node runs as
    :func:`_native_mac_run`, as does a call the kernel declines)."""
    shadow = _shadow(graph, node)
    if getattr(dp, "requantization", None) != "native":
        prepare = OPS[shadow.op].prepare
        return None if prepare is None else prepare(graph, shadow, dp, in_shapes)
    if in_shapes[0] is None:
        return None
    kernel, common, clamp, act, own = _native_setup(graph, node, dp)
    bias, bias_clipped = _bias_in_accumulator(graph, node, _spec(graph, node.inputs[2]).data
                                              if len(node.inputs) > 2 and node.inputs[2] else None, dp)
    _check_wide_bias(node, dp, bias)
    x = np.zeros(in_shapes[0], _spec(graph, node.inputs[0]).dtype)
    call = kernel(x, _spec(graph, node.inputs[1]).data, bias, prepare=True, **common)
    if call is None:
        return None

    def step(ins, trace):
        if own and not trace:
            out = call.codes(ins[0])
            if out is not None:
                return [out], None
        got = call(ins[0], bool(trace) or not own)
        if got is None:
            return _native_mac_run(graph, node, ins, dp, trace)
        if own and not trace and got[3] is not None:
            return [got[0]], None              # (what _own_outputs gives without a trace)
        if own:
            return _own_outputs(graph, node, ins, dp, trace, got[0], got[1], got[2], got[3], got[4], bias,
                                bias_clipped, clamp, act)
        return _native_outputs(graph, node, ins, dp, trace, got[1], got[2], bias, bias_clipped, clamp, act)
    return step


def _own_outputs(graph, node, ins, dp, trace, out, acc, overflows, above, below, bias, bias_clipped, clamp, act):
    """Output codes and trace of an int8 node whose kernel ran the kernel set's own requantization
    (:func:`_fused_requantizer`): ``out`` as it is, the clip count from the kernel's ``above`` / ``below`` (of
    :math:`R(a) + z_y` before the clamp), or from ``acc`` as :func:`_native_outputs` when they are None."""
    if above is None:
        return _native_outputs(graph, node, ins, dp, trace, acc, overflows, bias, bias_clipped, clamp, act)
    info = None
    if trace:
        lo, hi = clamp
        if _kernels(graph) == "xnnpack":     # XNNPACK's float clamp to [-128, 127] first: only a tighter
            above, below = (above if hi < 127 else 0), (below if lo > -128 else 0)    # bound counts
        info = {"overflows": int(overflows), "acc": acc,
                "clipped": int(above) + (0 if act != "none" else int(below)), "bias_clipped": bias_clipped,
                "adds": int(out.size) * (_mac_k(node, ins) + (bias is not None and dp.bias_add == "after"))}
    return [out], info


def _mac_k(node, ins) -> int:
    """Products per output of the node (K)."""
    w_shape = ins[1].shape
    return int(np.prod(w_shape[1:])) if node.op != "tflite_depthwise_conv2d" else int(np.prod(w_shape[1:3]))


def _native_outputs(graph, node, ins, dp, trace, acc, overflows, bias, bias_clipped, clamp, act):
    """Output codes and trace of the kernel set's MAC node from its int32 accumulators ``acc``."""
    lo, hi = clamp
    pre = _native_requant(graph, node, acc, _kernels(graph))
    out = np.clip(pre, lo, hi).astype(_spec(graph, node.outputs[0]).dtype)
    info = None
    if trace:
        k = _mac_k(node, ins)
        clipped = (pre > hi) if act != "none" else (pre > hi) | (pre < lo)
        info = {"overflows": int(overflows), "acc": acc, "clipped": int(np.count_nonzero(clipped)),
                "bias_clipped": bias_clipped,
                "adds": int(out.size) * (k + (bias is not None and dp.bias_add == "after"))}
    return [out], info


for _name, _core in _CORE_MAC.items():
    _c = OPS[_core]
    register_op(Op(_name, _native_mac_run,
                   (lambda core: lambda graph, node, ins: OPS[core].run_float(graph, _shadow(graph, node), ins))(_core),
                   (lambda core: lambda graph, node: OPS[core].check(graph, _shadow(graph, node)))(_core),
                   (lambda core: lambda graph, node: OPS[core].macs(graph, _shadow(graph, node)))(_core),
                   (lambda core: lambda graph, node: OPS[core].worst_case_sum(graph, _shadow(graph, node)))(_core),
                   _native_mac_prepare))
    register_mac_view(_name, lambda graph, node, ins: core_operands(graph, _shadow(graph, node), ins))
