"""TFLite graph ops of the resize operators: ``tflite_resize_nearest`` (RESIZE_NEAREST_NEIGHBOR) and
``tflite_resize_bilinear`` (RESIZE_BILINEAR), per sample ``[H, W, C] -> [size[0], size[1], C]`` with the
options ``align_corners`` and ``half_pixel_centers``.  Both work on the codes (TFLite requires the same scale and
zero point in and out); the arithmetic is :mod:`fxpsim.datapath.tflite.resize`, per the graph's kernel set
(bilinear: LiteRT's integer kernel for ``"reference"`` and ``"builtin"``, XNNPACK's for ``"xnnpack"``)."""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from ...graph.ops import Op, register_op
from .op_support import _call, _check_io, _kernels, _no_trace, _q, _spec


def _options(node):
    return {"align_corners": bool(node.attrs.get("align_corners", False)),
            "half_pixel_centers": bool(node.attrs.get("half_pixel_centers", False))}


def _nearest_run(graph, node, ins, dp, trace):
    kern = _kernels(graph)
    return [_call(node, kern, K.quantized_resize_nearest, ins[0], node.attrs["size"], **_options(node),
                  kernels=kern)], _no_trace()


def _nearest_float(graph, node, ins):
    o = _options(node)
    ys = K.resize_nearest_indices(ins[0].shape[1], int(node.attrs["size"][0]), **o)
    xs = K.resize_nearest_indices(ins[0].shape[2], int(node.attrs["size"][1]), **o)
    return [ins[0][:, ys][:, :, xs]]


def _bilinear_run(graph, node, ins, dp, trace):
    kern = _kernels(graph)
    try:
        out = _call(node, kern, K.quantized_resize_bilinear, ins[0], node.attrs["size"], **_options(node),
                    kernels=kern)
    except ValueError as exc:
        raise ValueError(f"node {node.name!r} (tflite_resize_bilinear): {exc}") from None
    return [out], _no_trace()


def _bilinear_float(graph, node, ins):
    return [K.resize_bilinear_float(ins[0], node.attrs["size"], **_options(node))]


def _resize_check(graph, node):
    _check_io(1)(graph, node)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    size = node.attrs.get("size")
    if not (isinstance(size, list) and len(size) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v < 1 << 24 for v in size)):
        raise ValueError(f"node {node.name!r} ({node.op}): size must be [height, width] of positive ints, got "
                         f"{size!r}")
    if len(x.shape) != 3 or tuple(y.shape) != (int(size[0]), int(size[1]), x.shape[2]) or _q(x) != _q(y):
        raise ValueError(f"node {node.name!r} ({node.op}): needs an [H, W, C] input and an output of shape "
                         f"{[int(size[0]), int(size[1])] + list(x.shape[2:3])} with the input's scale and zero "
                         f"point (TFLite resizes the codes)")


register_op(Op("tflite_resize_nearest", _nearest_run, _nearest_float, _resize_check))
register_op(Op("tflite_resize_bilinear", _bilinear_run, _bilinear_float, _resize_check))
