"""What the ONNX graph ops (:mod:`fxpsim.frontends.onnx.ops`) share: :func:`register_op` with a float reference
that saturates quantized outputs, the datapath tests (:func:`is_native`, :func:`is_onnxruntime_datapath`), the
readers of a node's tensors and attributes, the requantization of ``acc * real`` with a datapath's scheme
(:func:`_requant_real`) and the node checks the op families share."""
from __future__ import annotations

import numpy as np

from ...core.fixed import Format, Overflow
from ...datapath.requantize import (multiply_by_quantized_multiplier, quantize_multiplier, requantize_float,
                                   requantize_shift)
from ...graph.ops import Op, register_op as _register_op

__all__ = ["register_op", "is_native", "is_onnxruntime_datapath"]

F32 = np.float32


def _representable(graph, node, outs):
    """Real values clamped to each quantized output's representable range :math:`s\\,[q_{min} - z, q_{max} - z]`
    (what the QuantizeLinear of a QDQ model implements, e.g. a ReLU that quantize_static folded into it)."""
    res = []
    for name, y in zip(node.outputs, outs):
        spec = graph.tensors[name]
        if spec.is_float or spec.scale is None:
            res.append(y)
            continue
        lo, hi = spec.code_range
        shape = spec.channel_shape(np.ndim(y))
        z, s = spec.zero_point.reshape(shape), spec.scale.reshape(shape)
        res.append(np.clip(y, (lo - z) * s, (hi - z) * s))
    return res


def register_op(op: Op) -> Op:
    """Register ``op`` with a float reference that saturates quantized outputs to their real range."""
    inner = op.run_float

    def run_float(graph, node, ins):
        return _representable(graph, node, inner(graph, node, ins))

    return _register_op(Op(op.name, op.run, run_float, op.check, op.macs, op.worst_case_sum, op.prepare))


def _spec(graph, name):
    return graph.tensors[name]


def _no_trace() -> dict:
    return {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _name(value) -> str:
    return str(getattr(value, "value", value))


def is_native(dp) -> bool:
    """The datapath asks for the source runtime's own arithmetic."""
    return getattr(dp, "requantization", None) == "native"


def is_onnxruntime_datapath(dp) -> bool:
    """Native requantization on onnxruntime's int32 wrapping accumulator: the datapath on which nodes that
    onnxruntime runs in float32 (``ort_kernel="float"``) follow its float32 kernels."""
    return (is_native(dp) and int(dp.accumulator_bits) == 32
            and Overflow.parse(dp.accumulator_overflow) is Overflow.WRAP)


def _zp(spec) -> int:
    return int(spec.zero_point[0]) if spec.zero_point is not None else 0


def _scale(spec) -> float:
    return float(spec.scale[0])


def _pair(attrs, key, default=1):
    v = attrs.get(key, default)
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[1]))


def _pads(attrs):
    p = attrs.get("padding", [[0, 0], [0, 0]])
    return (int(p[0][0]), int(p[0][1])), (int(p[1][0]), int(p[1][1]))


def _wzp(spec):
    """Weight zero points as an int (per tensor) or an array over the output channels."""
    z = np.asarray(spec.zero_point if spec.zero_point is not None else [0], np.int64)
    return int(z[0]) if z.size == 1 else z


def _overflow_at(dp) -> str:
    return "end" if getattr(dp, "overflow_at", "add") == "end" else "every"


def _acc_format(dp) -> Format:
    return Format.integer(min(int(dp.accumulator_bits), 62))




def _requant_real(acc, real, dp):
    """``acc * real`` (real > 0, float64, broadcast against ``acc``) rounded with the datapath's scheme."""
    scheme = dp.requantization
    acc = np.asarray(acc, np.int64)
    real = np.broadcast_to(np.asarray(real, np.float64), acc.shape)
    out = np.empty(acc.shape, np.int64)
    for r in np.unique(real):
        sel = real == r
        a = acc[sel]
        if scheme in ("tflite-double", "tflite-single"):
            kind = "single" if scheme == "tflite-single" else "double"
            m, s = quantize_multiplier(np.atleast_1d(r), single_rounding=kind == "single")
            out[sel] = multiply_by_quantized_multiplier(a, int(m[0]), int(s[0]), kind)
        elif scheme == "shift":
            out[sel] = requantize_shift(a, -int(np.round(np.log2(r))), _name(dp.rounding))
        elif scheme == "float":
            out[sel] = requantize_float(a, float(r), _name(dp.rounding))
        else:
            raise ValueError(f"requantization scheme {scheme!r} is not one of native, tflite-double, "
                             "tflite-single, shift, float")
    return out


def _clipped(pre, lo, hi) -> int:
    return int(np.count_nonzero((pre < lo) | (pre > hi)))



def _one_in_one_out(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} ({node.op}): needs one input and one output")


def _quantized_io(graph, node, names, per_channel=False):
    for t in names:
        spec = _spec(graph, t)
        if spec.is_float or spec.scale is None or (spec.per_channel and not per_channel):
            raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} must be an integer tensor with a "
                             "per-tensor scale and zero point")
