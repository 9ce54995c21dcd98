"""ConvTranspose of quantized images as ``onnx_conv_transpose`` nodes (a mixin of the ONNX importer,
:mod:`fxpsim.frontends.onnx.importer`; the graph op is :mod:`fxpsim.frontends.onnx.conv_transpose_ops`).

``quantize_static`` (QDQ) leaves ConvTranspose between DequantizeLinears (activation, per-tensor int8 / uint8
weights, int32 bias) and one QuantizeLinear; onnxruntime 1.32 does not fuse the group on the CPU and runs the
float32 ConvTranspose (:mod:`fxpsim.datapath.onnxruntime.conv_transpose`). Imported: 2-D, explicit pads,
strides, dilations, groups, output_padding, at most 128 input channels per group (MLAS's one K slice), more than
one column-buffer row and input position (MLAS's general kernel); per-channel weights (``quantize_static``
``per_channel=True``: DequantizeLinear ``axis=1`` of the ``[C, F, KH, KW]`` weights, one scale per output channel
of a group, and a bias with one scale per output channel; ``axis=0`` per input channel also reads), each weight
dequantized as :math:`\\mathrm{fl}((w - z_a) \\cdot s_a)` along its axis before the float32 kernel. Refused with a
ValueError naming the node: auto_pad, output_shape, a per-channel axis other than 0 / 1, a float output (QOperator
models leave ConvTranspose in float).
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import conv_transpose as CT
from .nodes import _unsupported


class ConvTransposeConversions:
    """ConvTranspose conversion (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _conv_transpose(self, n) -> bool:
        if n.domain != "" or n.op != "ConvTranspose":
            return False
        xv, src = self._activation_dq(n, n.inputs[0])
        if len(src.shape) != 3:
            raise _unsupported(n, "a ConvTranspose that is not 2-D (NCHW images only)")
        if n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") or n.attrs.get("output_shape") is not None:
            raise _unsupported(n, "a ConvTranspose with auto_pad or output_shape")
        w_g = self._ct_weights(n)
        w = self.specs[w_g]["data"]
        c, h, wd = src.shape
        group = int(n.attrs.get("group", 1))
        kernel = tuple(int(k) for k in n.attrs.get("kernel_shape", w.shape[2:]))
        stride = [int(v) for v in n.attrs.get("strides", [1, 1])]
        dil = [int(v) for v in n.attrs.get("dilations", [1, 1])]
        pads = [int(v) for v in n.attrs.get("pads", [0, 0, 0, 0])]
        opad = [int(v) for v in n.attrs.get("output_padding", [0, 0])]
        if kernel != tuple(w.shape[2:]) or len(stride) != 2 or len(dil) != 2 or len(pads) != 4 or len(opad) != 2:
            raise ValueError(f"ConvTranspose node {n.name!r}: kernel {kernel}, strides, dilations, pads or "
                             f"output_padding do not fit weights {list(w.shape)}")
        if group < 1 or c % group or w.shape[0] != c:
            raise ValueError(f"ConvTranspose node {n.name!r}: weights {list(w.shape)} do not match {c} input "
                             f"channels, group {group}")
        if min(stride) < 1 or min(dil) < 1 or min(pads) < 0 or min(opad) < 0:
            raise ValueError(f"ConvTranspose node {n.name!r}: strides {stride}, dilations {dil}, pads {pads} or "
                             f"output_padding {opad} out of range")
        if c // group > CT.MAX_CHANNELS_PER_GROUP or w.shape[1] * kernel[0] * kernel[1] < 2 or h * wd < 2:
            raise _unsupported(n, "a ConvTranspose outside MLAS's general SGEMM kernel with one K slice (more than "
                                  f"{CT.MAX_CHANNELS_PER_GROUP} channels per group, or a one-row / one-column "
                                  "product)")
        oh, ow = CT.conv_transpose_out_hw(h, wd, kernel, stride, pads, dil, opad)
        if oh < 1 or ow < 1:
            raise ValueError(f"ConvTranspose node {n.name!r}: an output of {oh} x {ow}")
        n_out = group * w.shape[1]
        b_g = None
        if len(n.inputs) > 2 and n.inputs[2]:
            b_g = self._ct_bias(n, n_out)
        q = self._single_q(n.outputs[0])
        if q is None:
            raise _unsupported(n, "a ConvTranspose whose output no single QuantizeLinear reads (a float output)")
        scale, zp, dtype = self._claim(q)
        g = self._int_value(q.outputs[0], (n_out, oh, ow), dtype, scale, zp)
        attrs = {"stride": stride, "pads": pads, "dilation": dil, "group": group, "output_padding": opad}
        self._add_node("onnx_conv_transpose", [src.g, w_g] + ([b_g] if b_g else []), [g], attrs, name=n.name)
        self._note(n.name, n, False, "onnxruntime runs ConvTranspose in float32 (no fused kernel)")
        return True

    def _ct_weights(self, n):
        v = self.val(n.inputs[1], n)
        if v.kind != "dq" or v.src not in self.consts:
            raise _unsupported(n, "ConvTranspose weights that are not a DequantizeLinear of a constant")
        data = self.consts[v.src]
        if data.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) or data.ndim != 4:
            raise _unsupported(n, f"{data.dtype} ConvTranspose weights of rank {data.ndim}")
        if v.scale.size == 1:
            return self._const_tensor(v.src, data, float(v.scale[0]), int(v.zp[0]))
        axis = v.axis
        if axis not in (0, 1) or data.shape[axis] != v.scale.size or v.zp.size != v.scale.size:
            raise _unsupported(n, f"per-channel ConvTranspose weights along axis {axis} with {v.scale.size} scales "
                                  f"for weights {list(data.shape)} (axis 0 or 1, one scale per channel)")
        return self._const_tensor(v.src, data, v.scale.astype(np.float64), v.zp.astype(np.int64), axis)

    def _ct_bias(self, n, n_out):
        v = self.val(n.inputs[2], n)
        if v.kind != "dq" or v.src not in self.consts:
            raise _unsupported(n, "a ConvTranspose bias that is not a DequantizeLinear of a constant")
        data = self.consts[v.src].reshape(-1)
        if data.dtype != np.int32 or v.scale.size not in (1, n_out) or data.size != n_out:
            raise _unsupported(n, f"a ConvTranspose bias that is not {n_out} int32 values with one scale or one "
                                  "per output channel")
        if v.scale.size == 1:
            return self._const_tensor(v.src, data, float(v.scale[0]), int(v.zp[0]))
        return self._const_tensor(v.src, data, v.scale.astype(np.float64),
                                  np.broadcast_to(v.zp, v.scale.shape).astype(np.int64), 0)
