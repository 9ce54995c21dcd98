r"""``onnx_resize_linear``: onnxruntime's linear (bilinear) Resize of quantized images, registered when
:mod:`fxpsim.frontends.onnx.ops` is imported.

Input and output are NHWC codes. Attributes: ``ctm`` (coordinate_transformation_mode), ``scale_h``,
``scale_w`` (float32 scales), ``kernel``:

* ``"float"`` -- a QDQ group: DequantizeLinear (input scale / zero point), the float32 bilinear kernel,
  QuantizeLinear (output scale / zero point);
* ``"float_codes"`` -- the float32 kernel on the codes, truncated (a QOperator Resize in NCHW);
* ``"integer"`` -- the 1/1024 fixed-point kernel on the codes (a QOperator Resize in NHWC).

The arithmetic is :mod:`fxpsim.datapath.onnxruntime.resize` on every datapath (onnxruntime's kernel, no MAC).
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import resize as R
from ...graph.ops import Op
from .op_support import _no_trace, _quantized_io, _scale, _spec, _zp, register_op


def _resize(node, x, y, kernel):
    a = node.attrs
    return R.bilinear_nhwc(x, a["ctm"], a["scale_h"], a["scale_w"], y.shape[0], y.shape[1], kernel)


def _resize_run(graph, node, ins, dp, trace):
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    kernel = node.attrs["kernel"]
    if kernel == "float":
        f = K.dequantize_linear(np.asarray(ins[0]), np.float32(_scale(x)), _zp(x))
        out = K.quantize_linear(_resize(node, f, y, "float"), np.float32(_scale(y)), _zp(y), y.dtype)
    else:
        lo, hi = y.code_range
        out = np.clip(_resize(node, np.asarray(ins[0]), y, kernel), lo, hi)
    return [np.ascontiguousarray(out).astype(y.dtype)], _no_trace()


def _resize_float(graph, node, ins):
    y = _spec(graph, node.outputs[0])
    return [_resize(node, np.asarray(ins[0], np.float32), y, "float").astype(np.float64)]


def _check_resize(graph, node):
    if len([t for t in node.inputs if t]) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_resize_linear): needs one input and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    x, y = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    a = node.attrs
    if a.get("kernel") not in R.KERNELS:
        raise ValueError(f"node {node.name!r} (onnx_resize_linear): kernel {a.get('kernel')!r} is not one of "
                         f"{R.KERNELS}")
    if a.get("ctm") not in R.COORDINATE_MODES:
        raise ValueError(f"node {node.name!r} (onnx_resize_linear): ctm {a.get('ctm')!r} is not one of "
                         f"{R.COORDINATE_MODES}")
    if len(x.shape) != 3 or len(y.shape) != 3 or x.shape[2] != y.shape[2]:
        raise ValueError(f"node {node.name!r} (onnx_resize_linear): needs NHWC images with the same channels, got "
                         f"{list(x.shape)} -> {list(y.shape)}")
    for k in ("scale_h", "scale_w"):
        if not isinstance(a.get(k), (int, float)) or not a[k] > 0:
            raise ValueError(f"node {node.name!r} (onnx_resize_linear): {k} must be a number > 0")
    if a["kernel"] != "float" and (x.dtype != y.dtype or _scale(x) != _scale(y) or _zp(x) != _zp(y)):
        raise ValueError(f"node {node.name!r} (onnx_resize_linear): a kernel on codes needs the same type, scale "
                         "and zero point in and out")


register_op(Op("onnx_resize_linear", _resize_run, _resize_float, _check_resize))
