"""The MAC ops of an :class:`~fxpsim.graph.ir.IntegerGraph`: ``fully_connected``, ``conv2d`` and
``depthwise_conv2d`` on the :mod:`fxpsim.datapath` integer kernels (registered in :data:`fxpsim.graph.ops.OPS`
when :mod:`fxpsim.graph.ops` is imported), their float64 reference, and helpers that read one MAC node:
:func:`requantizer_for`, :func:`exact_accumulator`, :func:`run_node_isolated`, :func:`check_mac_operands`.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.fixed import FixedArray, Format
from ..datapath.integer_ops import quantized_conv2d, quantized_depthwise_conv2d, quantized_fully_connected
from ..datapath.requantize import Requantizer
from ..nn import conv as float_conv
from .registry import (Op, _clamp_codes, _float_activation, _float_clip, _overflow_name, _pads, _padding, _pair,
                  _rounding_name, _spec, register_op, run_node)

__all__ = ["requantizer_for", "exact_accumulator", "run_node_isolated", "check_mac_operands", "MAC_OPS"]

_MAC_OPS = MAC_OPS = ("fully_connected", "conv2d", "depthwise_conv2d")


def requantizer_for(graph, node, datapath) -> Requantizer:
    """The requantizer of a MAC node on ``datapath``: the configured scheme for
    :math:`M_c = s_{in} s_{w,c} / s_{out}` (scales as float32, as TFLite stores them), its final rounding
    ``requantization_rounding`` when the datapath sets one (else the scheme's own; ``rounding`` for
    ``shift``/``float``)."""
    scheme = datapath.requantization
    if node.op == "fully_connected" and getattr(datapath, "dense_requantization", None):
        scheme = datapath.dense_requantization
    rounding = _rounding_name(datapath.rounding)
    final = getattr(datapath, "requantization_rounding", None)
    final = None if final is None else _rounding_name(final)
    mbits = int(getattr(datapath, "multiplier_bits", 31))
    cache = graph.__dict__.setdefault("_requantizers", {})   # per graph: tensors never change after build
    key = (node.name, scheme, rounding, final, mbits)
    rq = cache.get(key)
    if rq is None:
        x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        kinds = {"tflite-double": "double", "tflite-single": "single", "shift": "shift", "float": "float"}
        if scheme not in kinds:
            raise ValueError(f"node {node.name!r}: requantization scheme {scheme!r} is not one of {sorted(kinds)}")
        tflite = scheme.startswith("tflite")
        w_scale = w.scale * 2.0 ** int(node.attrs.get("product_shift", 0))   # the accumulator's LSB
        rq = Requantizer.tflite(float(x.scale[0]), w_scale, float(y.scale[0]), kind=kinds[scheme],
                                rounding=rounding if tflite or final is None else final,
                                final_rounding=final if tflite else None, multiplier_bits=mbits if tflite else 31)
        cache[key] = rq
    return rq


def _bias_in_accumulator(graph, node, bias, dp):
    """The bias as the accumulator receives it: the stored codes shifted left by the node's ``bias_shift``
    (a bias register narrower than the accumulator, CMSIS-NN style), saturated into the accumulator (the
    hardware's path is no wider); ``(bias, how many saturated)``."""
    if bias is None:
        return None, 0
    bias = np.asarray(bias, dtype=np.int64) << int(node.attrs.get("bias_shift", 0))
    lo_acc, hi_acc = -(1 << (dp.accumulator_bits - 1)), (1 << (dp.accumulator_bits - 1)) - 1
    clipped = np.clip(bias, lo_acc, hi_acc)
    return clipped, int(np.count_nonzero(clipped != bias))


def _mac_geometry(node, ins):
    """Products per output of a MAC node (``KH*KW`` for a depthwise convolution)."""
    w = ins[1]
    k = math.prod(w.shape[1:3]) if node.op == "depthwise_conv2d" else math.prod(w.shape[1:])
    return k


def _partial_peaks(graph, node, ins, bias, dp, knobs) -> dict:
    """Exact partial-sum peaks of the node's MAC sequence on ``dp`` (see
    :func:`fxpsim.datapath.partial_sums.running_sum_peak`): the operands the multipliers see (offset codes,
    or raw codes and the folded bias with ``zero_point = "fold"``), products rounded onto the accumulator's
    LSB, tiles."""
    from ..datapath.partial_sums import mac_rows, running_sum_peak
    xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    fold = knobs["zero_point"] == "fold"
    zx = int(xspec.zero_point[0])
    xo = ins[0].astype(np.int64) - (0 if fold else zx)
    wo = ins[1].astype(np.int64) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
    geometry = {}
    if node.op != "fully_connected":
        stride, dilation = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation")
        geometry = dict(stride=stride, dilation=dilation, pad_value=zx if fold else 0,
                        pads=_pads(xo.shape[1:3], wo.shape[1:3], stride, dilation, _padding(node.attrs)))
    a, w2, _ = mac_rows(node.op, xo, wo, **geometry)
    if fold:
        from ..datapath.integer_ops import _fold_bias
        bias, _ = _fold_bias(bias, zx, w2.sum(axis=1), Format.integer(dp.accumulator_bits), knobs["bias_bits"],
                             knobs["product_shift"], knobs["rounding"])
    preload = dp.bias_add == "preload"
    return running_sum_peak(a, w2, bias if preload else None, order=dp.accumulator_order, tile_k=knobs["tile_k"],
                            shift=knobs["product_shift"], rounding=knobs["rounding"],
                            after=None if preload or bias is None else bias)


def refuse_unmodelled_knobs(node, dp, where: str, allow=()) -> None:
    """Raise when ``dp`` sets a MAC knob that the op of ``node`` (an importer's runtime-specific MAC) does not
    model, rather than ignoring it: zero-point folding, K-tiling, accumulator fraction bits, a bias shift
    (less the knobs named in ``allow``)."""
    set_knobs = [name for name, value, default in (
        ("zero_point", getattr(dp, "zero_point", "subtract"), "subtract"), ("tile_k", getattr(dp, "tile_k", None), None),
        ("accumulator_frac_bits", getattr(dp, "accumulator_frac_bits", 0) or 0, 0),
        ("bias_shift", getattr(dp, "bias_shift", 0) or 0, 0)) if value != default and name not in allow]
    if set_knobs:
        raise ValueError(f"node {node.name!r} ({node.op}, {where}): the datapath sets {', '.join(set_knobs)}, which "
                         "this op does not model; use the graph's core MAC ops (a TFLite reference import) or "
                         "leave these knobs at their defaults")


def _mac_knobs(node, dp) -> dict:
    """The datapath knobs of a MAC node beyond the accumulator (defaults for a plain ``Datapath``)."""
    tile_k = getattr(dp, "tile_k", None)
    return {"zero_point": getattr(dp, "zero_point", "subtract"), "bias_bits": getattr(dp, "bias_bits", None),
            "tile_k": tile_k, "tile_acc": getattr(dp, "tile_accumulator_bits", None) or dp.accumulator_bits,
            "product_shift": int(node.attrs.get("product_shift", 0)),
            "rounding": node.attrs.get("product_rounding", "half_up")}


def _mac_static(graph, node):
    """What a MAC node's run reads from the graph alone (tensors never change after build), cached per graph:
    ``(bspec, xspec, yspec, act, (lo, hi), w_zp)``."""
    cache = graph.__dict__.setdefault("_mac_static", {})
    got = cache.get(node.name)
    if got is None or got[0] is not node:
        wspec = _spec(graph, node.inputs[1])
        bspec = _spec(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        act = node.attrs.get("activation", "none")
        wz = wspec.zero_point
        got = cache[node.name] = (node, (bspec, _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0]), act,
                                         _clamp_codes(graph, node, node.outputs[0], act),
                                         (wz if wz.size > 1 else int(wz[0])) if np.any(wz) else 0))
    return got[1]


def _mac_setup(graph, node, dp):
    """What a MAC node's kernel call takes on ``dp`` besides its operands: ``(kernel, kwargs, knobs, at_end)``."""
    from ..datapath.requantize import Requantizer as _R
    bspec, xspec, yspec, act, (lo, hi), w_zp = _mac_static(graph, node)
    common = dict(requant=requantizer_for(graph, node, dp), x_zp=int(xspec.zero_point[0]),
                  w_zp=w_zp, out_zp=int(yspec.zero_point[0]),
                  act_min=lo, act_max=hi, out_dtype=yspec.dtype, acc=Format.integer(dp.accumulator_bits),
                  overflow=_overflow_name(dp.accumulator_overflow), order=dp.accumulator_order,
                  bias_at="init" if dp.bias_add == "preload" else "end")
    knobs = _mac_knobs(node, dp)
    common.update(knobs)
    at_end = dp.overflow_at == "end"
    if at_end:
        common.update(acc=Format.integer(62), overflow="wrap", requant=_R("shift", shift=(0,)),
                      act_min=None, act_max=None, out_dtype=np.int8)
    if node.op == "fully_connected":
        return quantized_fully_connected, common, knobs, at_end
    common.update(stride=_pair(node.attrs, "stride"), padding=_padding(node.attrs),
                  dilation=_pair(node.attrs, "dilation"))
    return (quantized_conv2d if node.op == "conv2d" else quantized_depthwise_conv2d), common, knobs, at_end


def _mac_run(graph, node, ins, dp, trace):
    kernel, common, knobs, at_end = _mac_setup(graph, node, dp)
    common["need_acc"] = bool(trace) or at_end   # the fused int8 kernel skips the accumulators otherwise
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    bias, bias_clipped = _bias_in_accumulator(graph, node, ins[2] if has_bias else None, dp)
    run_bias = bias
    if bias is not None and at_end:   # a wide adder: the exact sum is fitted once at the end
        run_bias = np.asarray(ins[2], dtype=np.int64) << int(node.attrs.get("bias_shift", 0))
        bias_clipped = 0
    res = kernel(ins[0], ins[1], run_bias, **common)
    return _mac_outputs(graph, node, ins, dp, trace, res, (bias, run_bias, bias_clipped), knobs, at_end)


def _mac_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step of a MAC node (:mod:`fxpsim.graph.plan`): the fused int8 kernel's call prepared
    once (validated operands, bias in the accumulator, requantization constants), or ``None`` (the node runs as
    :func:`_mac_run`). A call the kernel declines, and ``trace="peaks"``, run :func:`_mac_run`."""
    if dp.overflow_at == "end" or in_shapes[0] is None:
        return None
    from ..datapath.integer_ops import IntegerResult
    kernel, common, knobs, _ = _mac_setup(graph, node, dp)
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    biases = _bias_in_accumulator(graph, node, _spec(graph, node.inputs[2]).data if has_bias else None, dp)
    x = np.zeros(in_shapes[0], _spec(graph, node.inputs[0]).dtype)
    call = kernel(x, _spec(graph, node.inputs[1]).data, biases[0], prepare=True, **common)
    if call is None:
        return None
    biases = (biases[0], biases[0], biases[1])

    def step(ins, trace):
        got = None if trace == "peaks" else call(ins[0], bool(trace))
        if got is None:
            return _mac_run(graph, node, ins, dp, trace)
        res = IntegerResult(got[0], got[1], got[2], 0, 0, got[3], got[4])
        return _mac_outputs(graph, node, ins, dp, trace, res, biases, knobs, False)
    return step


def _mac_outputs(graph, node, ins, dp, trace, res, biases, knobs, at_end):
    """The output codes and trace of a MAC node from its kernel's result ``res`` (``biases``: the bias in the
    accumulator, the bias the kernel ran with, how many saturated)."""
    bias, run_bias, bias_clipped = biases
    _, _, yspec, act, (lo, hi), _ = _mac_static(graph, node)
    out, acc, overflows = res.out, res.acc, res.overflows
    bias_clipped += res.bias_clipped
    info = None
    if at_end or trace:
        if at_end:
            fitted = FixedArray(acc, Format.integer(62)).cast(Format.integer(dp.accumulator_bits),
                                                              overflow=_overflow_name(dp.accumulator_overflow))
            overflows, acc = int(fitted.overflows), fitted.raw
        if at_end or res.above is None:
            pre = requantizer_for(graph, node, dp)(acc, axis=-1) + int(yspec.zero_point[0])
            clipped = (pre > hi) if act not in (None, "none") else (pre > hi) | (pre < lo)
            n_clipped = int(np.count_nonzero(clipped))
        else:   # the fused kernel counted R(acc) + z above act_max and below act_min before its clamp
            n_clipped = res.above + (0 if act not in (None, "none") else res.below)
        if at_end:
            out = np.clip(pre, lo, hi).astype(yspec.dtype)
        if trace:
            k = _mac_geometry(node, ins)
            tiles = -(-k // knobs["tile_k"]) if knobs["tile_k"] and knobs["tile_k"] < k else 0
            # exact partial-sum peaks cost a pass over every product: only when asked (trace="peaks")
            peaks = (_partial_peaks(graph, node, ins, bias if not at_end else run_bias, dp, knobs)
                     if trace == "peaks" else {"peak": None, "tile_peak": None})
            has_bias = bias is not None or knobs["zero_point"] == "fold"
            info = {"overflows": int(overflows), "acc": acc, "clipped": n_clipped,
                    "bias_clipped": bias_clipped,
                    "bias_clipped_at_conversion": int(graph.meta.get("bias_clipped", {}).get(node.name, 0)),
                    "partial_peak": peaks["peak"],
                    "partial_range": None if peaks["peak"] is None else (peaks["low"], peaks["high"]),
                    "adds": int(out.size) * (k + tiles + (has_bias and dp.bias_add == "after"))}
            if tiles:
                info.update(tile_overflows=int(res.tile_overflows), tile_peak=peaks["tile_peak"], tiles=tiles)
    return [out], info


def exact_accumulator(graph, node, ins) -> np.ndarray:
    """Infinite-precision accumulator values :math:`\\sum (x - z_x)(w - z_w) + b` of a MAC node (float64
    BLAS, exact while every partial sum stays below :math:`2^{53}`, which 32-bit-or-narrower codes with
    K below 2^20 guarantee)."""
    xspec, wspec = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    xo = ins[0].astype(np.float64) - int(xspec.zero_point[0])
    w = ins[1].astype(np.float64) - wspec.zero_point.reshape(wspec.channel_shape(ins[1].ndim))
    acc = _float_mac(node, xo, w, ins[0].shape)
    shift = int(node.attrs.get("product_shift", 0))
    if shift:              # in the accumulator's LSB (products of 2^shift product LSBs)
        acc = np.round(acc / 2.0 ** shift)
    if len(node.inputs) > 2 and node.inputs[2]:
        acc = acc + ins[2].astype(np.float64) * 2.0 ** int(node.attrs.get("bias_shift", 0))
    return acc.astype(np.int64)


def _float_mac(node, x, w, x_shape):
    """The MAC op on float64 values without bias (w in the graph's layout)."""
    if node.op == "fully_connected":
        return x @ w.T
    stride, dilation, padding = _pair(node.attrs, "stride"), _pair(node.attrs, "dilation"), _padding(node.attrs)
    if dilation != (1, 1):
        raise ValueError(f"node {node.name!r}: the float reference does not support dilation")
    pads = _pads(x_shape[1:3], w.shape[1:3], stride, dilation, padding)
    xp = float_conv.pad_nhwc(x, (pads[0][0], pads[0][1], pads[1][0], pads[1][1]))
    if node.op == "conv2d":
        return float_conv.conv2d_forward(xp, np.transpose(w, (1, 2, 3, 0)), stride, "VALID")[0]
    c = x.shape[3]
    kh, kw = w.shape[1:3]
    return float_conv.depthwise_conv2d_forward(xp, w[0].reshape(kh, kw, c, -1), stride, "VALID")[0]


def _mac_float(graph, node, ins):
    wspec = _spec(graph, node.inputs[1])
    w = wspec.dequantize(wspec.data)
    y = _float_mac(node, ins[0], w, ins[0].shape)
    if len(node.inputs) > 2 and node.inputs[2]:
        # the bias codes live in the accumulator's scale s_x s_w,c, whatever the tensor records
        s_acc = float(_spec(graph, node.inputs[0]).scale[0]) * np.broadcast_to(wspec.scale, (y.shape[-1],))
        s_acc = s_acc * 2.0 ** (int(node.attrs.get("bias_shift", 0)) + int(node.attrs.get("product_shift", 0)))
        y = y + _spec(graph, node.inputs[2]).data.astype(np.float64) * s_acc
    return [_float_clip(graph, node, _float_activation(y, node.attrs.get("activation")))]


def check_mac_operands(graph, node):
    """Check that a MAC node reads ``(x, w[, bias])``, writes one output and has constant weights; returns
    the weights' :class:`~fxpsim.graph.ir.TensorSpec` (also for the MAC ops of imported formats)."""
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs inputs (x, w[, bias]) and one output")
    w = _spec(graph, node.inputs[1])
    if not w.is_constant:
        raise ValueError(f"node {node.name!r}: the weights {w.name!r} must be a constant tensor")
    return w


def _mac_check(graph, node):
    w = check_mac_operands(graph, node)
    for t in (node.inputs[0], node.outputs[0]):
        if _spec(graph, t).scale is None or _spec(graph, t).per_channel:
            raise ValueError(f"node {node.name!r}: tensor {t!r} needs a per-tensor scale and zero point")
    if w.scale is None:
        raise ValueError(f"node {node.name!r}: the weights need a scale")


def _mac_count(graph, node) -> int:
    w = _spec(graph, node.inputs[1]).data
    out = _spec(graph, node.outputs[0]).shape
    if node.op == "depthwise_conv2d":
        return int(np.prod(out)) * int(w.shape[1] * w.shape[2])
    return int(np.prod(out)) * int(np.prod(w.shape[1:]))


def _mac_bound(graph, node) -> int:
    xs, ws = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    lo, hi = xs.code_range
    z = int(xs.zero_point[0])
    xmax = max(abs(lo - z), abs(hi - z))
    w = np.abs(ws.data.astype(np.int64) - ws.zero_point.reshape(ws.channel_shape(ws.data.ndim)))
    per_out = w.reshape(w.shape[0], -1).sum(axis=1) if node.op != "depthwise_conv2d" else \
        w.reshape(-1, w.shape[-1]).sum(axis=0)
    bound = (per_out.astype(object) * xmax) >> int(node.attrs.get("product_shift", 0))
    if len(node.inputs) > 2 and node.inputs[2]:
        shift = int(node.attrs.get("bias_shift", 0))
        bound = bound + (np.abs(_spec(graph, node.inputs[2]).data.astype(np.int64)).astype(object) << shift)
    return int(max(bound))


for _name in _MAC_OPS:
    register_op(Op(_name, _mac_run, _mac_float, _mac_check, _mac_count, _mac_bound, _mac_prepare))




def run_node_isolated(graph, node, reference_inputs, datapath, trace: bool = True):
    """Run one node on ``datapath`` from reference (float) inputs: the error of the node in isolation.

    Each non-constant input tensor's reference values (real numbers, e.g. the float model's output of the
    previous layer) are quantized to the tensor's codes, :math:`q = \\mathrm{clamp}(\\mathrm{round}(r/s) + z)`
    (rounding: the datapath's), and the node runs alone, so its output differs from the reference only by
    what the node itself does (rounding, overflow, clipping), not by the errors of the nodes before it.

    ``reference_inputs``: one array per input of the node, in order (``None`` or anything for constants,
    which come from the graph), or a dict tensor name -> array. Returns ``(outputs, trace)`` as
    :func:`fxpsim.graph.ops.run_node`.
    """
    from ..core.fixed import from_float
    if isinstance(reference_inputs, dict):
        reference_inputs = [reference_inputs.get(t) for t in node.inputs]
    if len(reference_inputs) != len(node.inputs):
        raise ValueError(f"node {node.name!r}: give one reference input per input ({len(node.inputs)}), "
                         f"got {len(reference_inputs)}")
    index = next((i for i, n in enumerate(graph.nodes) if n.name == node.name), None)
    if index is None:
        raise ValueError(f"node {node.name!r} is not a node of graph {graph.name!r}")
    rounding = _rounding_name(getattr(datapath, "rounding", "half_up"))
    ins = []
    for t, ref in zip(node.inputs, reference_inputs):
        if not t:
            ins.append(None)
            continue
        spec = _spec(graph, t)
        if spec.is_constant:
            ins.append(spec.data)
        elif spec.is_float or spec.scale is None:
            ins.append(np.asarray(ref))
        else:
            r = np.asarray(ref, dtype=np.float64)
            shape = spec.channel_shape(r.ndim)
            codes = from_float(r / spec.scale.reshape(shape), Format.integer(62), rounding=rounding).raw
            lo, hi = spec.code_range
            ins.append(np.clip(codes + spec.zero_point.reshape(shape), lo, hi).astype(spec.dtype))
    from .ir import node_datapath
    return run_node(graph, node, ins, node_datapath(datapath, node, index), trace)
