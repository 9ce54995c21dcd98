r"""``onnx_conv_transpose``: a DequantizeLinear -> ConvTranspose -> QuantizeLinear group as onnxruntime runs it
(it does not fuse it: DequantizeLinear of the activation, the weights and the int32 bias, its float32
ConvTranspose, QuantizeLinear), registered when :mod:`fxpsim.frontends.onnx.ops` is imported.

.. math:: y = Q\big(\mathrm{ConvTranspose}_{f32}(DQ(x), DQ(w)) + DQ(b)\big)

Inputs: x (NHWC codes), w (constant codes, ONNX layout [C, F, KH, KW], per-tensor or per channel along axis 0
or 1), optional b (int32 codes, per-tensor or one scale per output channel). Attributes: ``stride``, ``pads`` (top, left, bottom, right), ``dilation``, ``group``,
``output_padding``. The float32 kernel is :mod:`fxpsim.datapath.onnxruntime.conv_transpose` on every datapath
(onnxruntime's float path; no integer accumulator takes part).
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import conv_transpose as CT
from ...datapath.onnxruntime import mlas as K
from ...graph.ops import Op
from .op_support import _no_trace, _quantized_io, _scale, _spec, _zp, register_op


def _attrs(node):
    a = node.attrs
    return ([int(v) for v in a["stride"]], [int(v) for v in a["pads"]], [int(v) for v in a["dilation"]],
            int(a["group"]), [int(v) for v in a.get("output_padding", [0, 0])])


def _deq(graph, name, codes):
    """DequantizeLinear of a tensor: per tensor, or per channel along the spec's axis (the weights' axis 0 / 1,
    the bias' axis 0)."""
    s = _spec(graph, name)
    if s.per_channel:
        return K.dequantize_linear(np.asarray(codes), s.scale, s.zero_point, axis=s.axis)
    return K.dequantize_linear(np.asarray(codes), np.float32(_scale(s)), _zp(s))


def _ct(graph, node, x, w, b):
    stride, pads, dil, group, op = _attrs(node)
    y = CT.conv_transpose2d(np.transpose(x, (0, 3, 1, 2)), w, b, stride, pads, dil, group, op)
    return np.transpose(y, (0, 2, 3, 1))


def _ct_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    xf = _deq(graph, node.inputs[0], ins[0])
    wf = _deq(graph, node.inputs[1], ins[1])
    bf = _deq(graph, node.inputs[2], ins[2]) if len(ins) > 2 else None
    out = K.quantize_linear(_ct(graph, node, xf, wf, bf), np.float32(_scale(y)), _zp(y), y.dtype)
    return [np.ascontiguousarray(out)], _no_trace()


def _ct_float(graph, node, ins):
    xf = _deq(graph, node.inputs[0], ins[0])
    wf = _deq(graph, node.inputs[1], ins[1])
    bf = _deq(graph, node.inputs[2], ins[2]) if len(ins) > 2 else None
    return [_ct(graph, node, xf, wf, bf).astype(np.float64)]


def _check_ct(graph, node):
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): needs x, w, optional bias and one output")
    _quantized_io(graph, node, [node.inputs[0], node.outputs[0]])
    _quantized_io(graph, node, node.inputs[1:], per_channel=True)
    x, w, y = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1]), _spec(graph, node.outputs[0])
    try:
        stride, pads, dil, group, op = _attrs(node)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): bad attributes ({exc})") from None
    if len(x.shape) != 3 or len(w.shape) != 4 or len(y.shape) != 3:
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): needs NHWC images and [C, F, KH, KW] weights")
    h, wd, c = x.shape
    if group < 1 or c % group or w.shape[0] != c or c // group > CT.MAX_CHANNELS_PER_GROUP:
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): {c} channels, weights {list(w.shape)}, group "
                         f"{group} (at most {CT.MAX_CHANNELS_PER_GROUP} channels per group)")
    oh, ow = CT.conv_transpose_out_hw(h, wd, w.shape[2:], stride, pads, dil, op)
    if tuple(y.shape) != (oh, ow, group * w.shape[1]):
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): output {list(y.shape)}, expected "
                         f"{[oh, ow, group * w.shape[1]]}")
    if len(node.inputs) == 3 and tuple(_spec(graph, node.inputs[2]).shape) != (group * w.shape[1],):
        raise ValueError(f"node {node.name!r} (onnx_conv_transpose): a bias of one value per output channel needed")
    for name, axes in ((node.inputs[1], (0, 1)), (node.inputs[2] if len(node.inputs) == 3 else None, (0,))):
        s = None if name is None else _spec(graph, name)
        if s is not None and s.per_channel and s.axis not in axes:
            raise ValueError(f"node {node.name!r} (onnx_conv_transpose): {name!r} is quantized per channel along "
                             f"axis {s.axis}; axis {' or '.join(map(str, axes))} reads")


register_op(Op("onnx_conv_transpose", _ct_run, _ct_float, _check_ct))
