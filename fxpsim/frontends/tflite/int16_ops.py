"""Graph ops of 16x8 TFLite models (int16 activations) where LiteRT's int16 kernel is not its int8 one with
another code range, and what of a 16x8 or uint8-boundary model fxpsim imports (:func:`int16_or_uint8_problem`,
read by the coverage table).

=========================== =====================================================================================
op                          LiteRT's int16 kernel (the same in every kernel set unless the row says otherwise;
                            XNNPACK takes no int16 op; checked live)
=========================== =====================================================================================
``tflite_int16_add``        ADD, general scales: TFLite's ADD with left shift 15 (``add::Prepare``); power-of-two
                            scales with ``pot_scale_int16``: a rounding shift and a saturating sum; ``activation``,
                            ``pot_scale_int16``
``tflite_int16_sub``        SUB, general scales: TFLite's SUB with left shift 15; ``activation``
``tflite_int16_mul``        MUL: ``reference_integer_ops::Mul`` (zero points 0); ``activation``
``tflite_int16_requantize`` QUANTIZE int16 -> int16 (``reference_ops::Requantize``)
``tflite_int16_logistic``   LOGISTIC: ``reference_integer_ops::Logistic`` (a 256-entry sigmoid table, interpolated)
``tflite_int16_tanh``       TANH: ``reference_integer_ops::Tanh`` (the same table)
``tflite_int16_softmax``    SOFTMAX (last axis): ``reference_ops::SoftmaxInt16`` (exp and 1/(1+x) tables); ``beta``
``tflite_int16_mean``       MEAN: the kernel set's int8 kernel on int16 codes, the builtin one under ``xnnpack``;
                            ``axes``, ``keep_dims``
=========================== =====================================================================================

The MAC ops of a 16x8 model are ``tflite_conv2d`` / ``tflite_depthwise_conv2d`` / ``tflite_fully_connected``
(:mod:`.mac_ops`) on an int64 accumulator; pooling, PAD, CONCATENATION, RESHAPE, QUANTIZE from float, DEQUANTIZE
and RELU / RELU6 (``QuantizedReluX``) are the int8 graph ops, whose kernels take int16 codes (RELU_N1_TO_1 is not:
LiteRT fails to invoke it on int16).
"""
from __future__ import annotations

import math

import numpy as np

from ...datapath import tflite as K
from ...datapath.integer_add import quantized_add
from ...datapath.requantize import activation_range
from ...datapath.tflite_params import tflite_add_params
from ...datapath.tflite.int16 import (INT16_LEFT_SHIFT, add_left_shift, logistic_int16, lut_activation_params,
                                      pot_add_int16, pot_add_shifts, softmax_int16, softmax_int16_params, tanh_int16)
from ...graph.ops import OPS, Op, register_op
from .reader import _INT8, _INT16, _INT64, _TYPE_NAMES, _UINT8
from .op_support import _cached, _check_io, _float_activation, _identity_float, _kernels, _no_trace, _q, _spec

__all__ = ["INT16_OPS", "INT16_GRAPH_OPS", "int16_or_uint8_problem"]

#: TFLite ops fxpsim imports with int16 activations (the rest of a 16x8 model is refused by name).
INT16_OPS = ("ADD", "SUB", "MUL", "LOGISTIC", "TANH", "SOFTMAX", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
             "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION", "PAD",
             "PADV2", "QUANTIZE", "DEQUANTIZE", "RELU", "RELU6")

#: The importer's graph op on int8 codes -> its op on int16 codes, where LiteRT's int16 kernel differs.
INT16_GRAPH_OPS = {"add": "tflite_int16_add", "tflite_add": "tflite_int16_add", "tflite_sub": "tflite_int16_sub",
                   "tflite_mul": "tflite_int16_mul", "tflite_requantize": "tflite_int16_requantize",
                   "tflite_mean": "tflite_int16_mean", "tflite_logistic": "tflite_int16_logistic",
                   "tflite_tanh": "tflite_int16_tanh", "tflite_softmax": "tflite_int16_softmax"}

_MAC_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


_LAST_MODEL: list = [None, False]      # (the tensors list last asked about, its answer): one scan per model


def _has_int16_activations(tensors: list) -> bool:
    if _LAST_MODEL[0] is not tensors:
        _LAST_MODEL[:] = [tensors, any(t["type"] == _INT16 and t.get("raw") is None for t in tensors)]
    return _LAST_MODEL[1]


def int16_or_uint8_problem(name: str, op: dict, tensors: list, kernels: str = "reference",
                           graph_inputs=None) -> str | None:
    """Why operator ``op`` is not imported for its int16 (16x8) or uint8 tensors, or None: int16 ops outside
    :data:`INT16_OPS` or that LiteRT's Prepare refuses; a run-time uint8 input other than a model input read by
    QUANTIZE or DEQUANTIZE (uint8 is imported at the model's boundaries only; ``graph_inputs``: the subgraph's
    input tensor indices, None to skip that part)."""
    for i in op["inputs"]:
        boundary = name in ("QUANTIZE", "DEQUANTIZE") and (graph_inputs is None or i in graph_inputs)
        if i >= 0 and tensors[i]["type"] == _UINT8 and tensors[i].get("raw") is None and not boundary:
            return (f"its input {tensors[i]['name']!r} is uint8 (legacy quantization): fxpsim imports uint8 only at "
                    f"the model's boundaries (QUANTIZE uint8 <-> int8, DEQUANTIZE)")
    types = {tensors[i]["type"] for i in list(op["inputs"]) + list(op["outputs"])
             if i >= 0 and tensors[i].get("raw") is None}
    if _INT8 in types and _has_int16_activations(tensors):
        return ("int8 and int16 activations in one model (mixed precision): fxpsim imports one activation type "
                "per model (int8, or int16 for 16x8)")
    if _INT16 not in types:
        return None
    if name not in INT16_OPS:
        return (f"{name} on int16 (16x8) tensors: LiteRT's int16 {name} kernel is not reproduced by fxpsim "
                f"(16x8 ops imported: {', '.join(INT16_OPS)})")
    for i in list(op["inputs"]) + list(op["outputs"]):
        t = tensors[i] if i >= 0 else {}
        if t.get("type") == _INT16 and t.get("zero_point") is not None and np.any(t["zero_point"] != 0):
            return (f"int16 tensor {t['name']!r} has zero point {int(t['zero_point'].flat[0])}: LiteRT's int16 "
                    f"kernels take symmetric int16 only (zero point 0)")
    if name in _MAC_OPS[:2] and tensors[op["inputs"][0]]["type"] == _INT16 and \
            (len(op["inputs"]) < 3 or op["inputs"][2] < 0):
        return (f"a 16x8 {name} without a bias: LiteRT's Prepare fails on it (every kernel set: 'Tensor at index 2 "
                f"was optional but was expected')")
    if name in _MAC_OPS and len(op["inputs"]) > 2 and op["inputs"][2] >= 0 and \
            tensors[op["inputs"][0]]["type"] == _INT16 and tensors[op["inputs"][2]]["type"] != _INT64:
        return (f"a 16x8 {name} with a bias of type {_TYPE_NAMES.get(tensors[op['inputs'][2]]['type'])}: LiteRT's "
                f"int32-bias 16x8 kernels (int32 accumulators) are not reproduced by fxpsim (int64 biases are)")
    if name in ("LOGISTIC", "TANH"):
        return _lut_activation_problem(name, tensors[op["inputs"][0]], tensors[op["outputs"][0]], kernels)
    if name == "SOFTMAX":
        sy = tensors[op["outputs"][0]].get("scale")
        if sy is not None and abs(float(sy[0]) - 2.0 ** -15) > 0.001 * 2.0 ** -15:
            return (f"int16 SOFTMAX with output scale {float(sy[0]):.6g}: LiteRT's Prepare requires 2^-15 (within "
                    f"0.1%) and zero point 0")
    if name in ("ADD", "SUB"):
        scales = [tensors[i]["scale"] for i in (op["inputs"][0], op["inputs"][1], op["outputs"][0])]
        if any(s is None or s.size != 1 for s in scales):
            return None                   # the importer names what is missing
        floats = [float(s[0]) for s in scales]
        if add_left_shift(*floats, bool((op.get("options") or {}).get("pot_scale_int16", 0))) is None:
            if name == "SUB":
                return ("int16 SUB with power-of-two scales and pot_scale_int16: LiteRT's power-of-two SUB is not "
                        "reproduced by fxpsim (general scales, or pot_scale_int16 = false, are)")
            shapes = [list(tensors[i]["shape"]) for i in (op["inputs"][0], op["inputs"][1], op["outputs"][0])]
            if shapes[0] != shapes[1]:
                return (f"int16 ADD with power-of-two scales, pot_scale_int16 and broadcasting ({shapes[0]} + "
                        f"{shapes[1]}): LiteRT aborts the process in that kernel")
            s1, s2 = pot_add_shifts(*floats)
            if not (s1 <= 0 and s2 <= 0 and (s1 == 0 or s2 == 0)):
                return (f"int16 ADD with power-of-two scales: input/output exponent differences {s1}, {s2}; LiteRT's "
                        f"Prepare needs both <= 0 and one of them 0")
    return None


def _lut_activation_problem(name, x, y, kernels):
    """LiteRT's Prepare of int16 LOGISTIC / TANH (output scale 2^-15, zero points 0) and the kernel set's choice:
    a power-of-two input scale runs the optimized fixed-point kernel outside the reference set."""
    sy = y.get("scale")
    if sy is None or x.get("scale") is None:
        return None
    exact = float(sy[0]) == 2.0 ** -15 if name == "LOGISTIC" else abs(math.log2(float(sy[0])) + 15) < 1e-3
    if not exact:
        return (f"int16 {name} with output scale {float(sy[0]):.6g}: LiteRT's Prepare requires 2^-15 (and zero "
                f"point 0)")
    if kernels != "reference" and lut_activation_params(float(x["scale"][0]), tanh=name == "TANH")[0] == 0:
        return (f"int16 {name} with a power-of-two input scale: LiteRT's optimized {name} (gemmlowp fixed point) "
                f"runs it with kernels={kernels!r}, which fxpsim does not reproduce (kernels='reference' does)")
    return None


# ----------------------------------------------------------------------------------------- ADD / SUB / MUL
def _clamp_range(y, activation):
    return activation_range(activation or "none", float(np.float32(y.scale[0])), int(y.zero_point[0]), y.dtype)


def _add_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    lo, hi = _cached(graph, node, "int16_act", lambda: _clamp_range(y, node.attrs.get("activation")))
    scales = (float(np.float32(a.scale[0])), float(np.float32(b.scale[0])), float(np.float32(y.scale[0])))
    if add_left_shift(*scales, bool(node.attrs.get("pot_scale_int16", False))) is None:
        return [pot_add_int16(ins[0], ins[1], *pot_add_shifts(*scales), act_min=lo, act_max=hi)], _no_trace()
    out = quantized_add(ins[0], ins[1], scale1=float(a.scale[0]), zp1=int(a.zero_point[0]), scale2=float(b.scale[0]),
                        zp2=int(b.zero_point[0]), out_scale=float(y.scale[0]), out_zp=int(y.zero_point[0]),
                        act_min=lo, act_max=hi, out_dtype=y.dtype, left_shift=INT16_LEFT_SHIFT)
    return [out], _no_trace()


def _sub_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))

    def params():
        (sa, za), (sb, zb), (so, zo) = _q(a), _q(b), _q(y)
        lo, hi = _clamp_range(y, node.attrs.get("activation"))
        m = tflite_add_params(float(sa), float(sb), float(so), INT16_LEFT_SHIFT)
        return K.SubParams(*m, za, zb, zo, lo, hi, INT16_LEFT_SHIFT, np.dtype(np.int16), sa, sb, so)
    return [K.quantized_sub(ins[0], ins[1], _cached(graph, node, "int16_sub", params))], _no_trace()


def _mul_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    params = _cached(graph, node, "int16_mul", lambda: K.mul_params(
        *_q(a), *_q(b), *_q(y), activation=node.attrs.get("activation", "none"), dtype=y.dtype))
    return [K.quantized_mul(ins[0], ins[1], params)], _no_trace()


def _requantize_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    params = _cached(graph, node, "int16_requantize", lambda: K.requantize_params(
        *_q(x), *_q(y), input_dtype=x.dtype, output_dtype=y.dtype))
    return [K.requantize_tflite(ins[0], params)], _no_trace()


def _mean_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    kern = "builtin" if _kernels(graph) == "xnnpack" else _kernels(graph)
    params = _cached(graph, node, "int16_mean", lambda: K.mean_params(*_q(x), *_q(y), dtype=y.dtype))
    axes = tuple(int(a) + 1 for a in node.attrs.get("axes", []))            # per-sample axes -> batch axes
    return [K.quantized_mean(ins[0], axes, params, keepdims=bool(node.attrs.get("keep_dims", False)),
                             kernels=kern)], _no_trace()


def _refuse_lut_knobs(node, dp):
    """An int16 activation runs LiteRT's tables only: a datapath's ``activation_lut_entries`` is refused, not ignored."""
    if getattr(dp, "activation_lut_entries", None):
        raise ValueError(f"node {node.name!r} ({node.op}): the datapath sets activation_lut_entries, which fxpsim models "
                         f"for 8-bit activations only; this int16 op runs LiteRT's own tables (leave it unset)")


def _lut_activation_run(tanh):
    def run(graph, node, ins, dp, trace):
        _refuse_lut_knobs(node, dp)
        x = _spec(graph, node.inputs[0])
        m, e = _cached(graph, node, "int16_lut", lambda: lut_activation_params(float(x.scale[0]), tanh=tanh))
        return [(tanh_int16 if tanh else logistic_int16)(ins[0], m, e)], _no_trace()
    return run


def _softmax_run(graph, node, ins, dp, trace):
    _refuse_lut_knobs(node, dp)
    x = _spec(graph, node.inputs[0])
    params = _cached(graph, node, "int16_softmax",
                     lambda: softmax_int16_params(float(x.scale[0]), float(node.attrs.get("beta", 1.0))))
    return [softmax_int16(ins[0], params)], _no_trace()


def _binary_float(fn):
    def run_float(graph, node, ins):
        return [_float_activation(fn(ins[0], ins[1]), node.attrs.get("activation"))]
    return run_float


register_op(Op("tflite_int16_add", _add_run, _binary_float(np.add), _check_io(2)))
register_op(Op("tflite_int16_sub", _sub_run, _binary_float(np.subtract), _check_io(2)))
register_op(Op("tflite_int16_mul", _mul_run, _binary_float(np.multiply), _check_io(2)))
register_op(Op("tflite_int16_logistic", _lut_activation_run(False),
               lambda graph, node, ins: [1.0 / (1.0 + np.exp(-ins[0]))], _check_io(1)))
register_op(Op("tflite_int16_tanh", _lut_activation_run(True), lambda graph, node, ins: [np.tanh(ins[0])],
               _check_io(1)))
register_op(Op("tflite_int16_softmax", _softmax_run,
               lambda graph, node, ins: OPS["tflite_softmax"].run_float(graph, node, ins), _check_io(1)))
register_op(Op("tflite_int16_mean", _mean_run, lambda graph, node, ins: OPS["tflite_mean"].run_float(graph, node, ins),
               _check_io(1)))
register_op(Op("tflite_int16_requantize", _requantize_run, _identity_float, _check_io(1)))
