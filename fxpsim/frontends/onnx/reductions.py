"""Softmax of quantized tensors (a mixin of the ONNX importer, :mod:`fxpsim.frontends.onnx.importer`; the graph
op is ``qlinear_softmax``, :mod:`fxpsim.frontends.onnx.softmax_ops`): ``com.microsoft:QLinearSoftmax``
(QOperator) and the DequantizeLinear -> Softmax -> QuantizeLinear groups onnxruntime fuses into it (QDQ; both
``quantize_static`` formats give one of these).

onnxruntime fuses the group when the Softmax reads a DequantizeLinear, one QuantizeLinear reads its output and
both have the same element type after its int8 -> uint8 rewrite; otherwise it runs MLAS's float32 softmax,
which fxpsim does not reproduce (refused with a ValueError).

A DequantizeLinear -> ReduceMean -> QuantizeLinear group stays unfused: DequantizeLinear, the float32 mean of
:mod:`fxpsim.datapath.onnxruntime.reduce` over one contiguous block of per-sample axes of the ONNX layout (the
trailing axes: H, W of an image, C, H, W, the last axis; or axes before kept ones: C of an image, the sequence
axis of [N, L, D]), QuantizeLinear (``onnx_reduce_mean``, :mod:`fxpsim.frontends.onnx.reduce_ops`). A block
before kept axes runs MLAS's SGEMM or a sequential sum, chosen by onnxruntime according to its thread count:
reproduced as a session with **one intra-op thread** runs it (``intra_op_num_threads = 1``; the import notes it).
An image mean over H, W with keepdims=1 after a convolution runs in NHWC (onnxruntime's layout transformation moves
it; measured): H, W before the kept channels, the graph's own layout, also with one thread. Refused: axes that are
not one block (onnxruntime transposes first), and other image means with keepdims=1 that the layout transformation
may move (anything but a quantized graph input or a convolution output).
"""
from __future__ import annotations

from .nodes import _MS, _unsupported


class ReductionConversions:
    """Softmax and ReduceMean conversions (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _reduction(self, n) -> bool:
        if n.domain == "" and n.op == "Softmax":
            self._softmax(n)
            return True
        if n.domain == _MS and n.op == "QLinearSoftmax":
            self._qlinear_softmax(n)
            return True
        if n.domain == "" and n.op == "ReduceMean":
            self._reduce_mean(n)
            return True
        return False

    def _quantized_graph_input(self, codes) -> bool:
        """The codes are a QuantizeLinear of a graph input (an NCHW tensor onnxruntime's layout transformation
        leaves alone)."""
        p = self.producer(codes)
        return p is not None and self._is_q(p) and p.inputs[0] in self.inputs

    def _after_conv(self, codes) -> bool:
        """The codes are a QLinearConv output or a QuantizeLinear of a Conv (what onnxruntime's layout
        transformation runs in NHWC, and the ReduceMean after it)."""
        p = self.producer(codes)
        if p is not None and p.op == "QLinearConv":
            return True
        c = self.producer(p.inputs[0]) if p is not None and self._is_q(p) else None
        return c is not None and c.op == "Conv"

    def _reduce_mean(self, n):
        """DequantizeLinear -> ReduceMean -> QuantizeLinear over a block of adjacent axes (``onnx_reduce_mean``)."""
        xv, src = self._activation_dq(n, n.inputs[0])
        shape = tuple(src.shape)
        full = len(shape) + 1
        if self.opset >= 18:
            axes = self._ints(n, self._input(n, 1), "axes list")
        else:
            axes = n.attrs.get("axes")
        if not axes:
            if int(n.attrs.get("noop_with_empty_axes", 0)):
                raise _unsupported(n, "a ReduceMean with noop_with_empty_axes=1 and no axes")
            axes = list(range(full))
        norm = sorted({int(a) + full if int(a) < 0 else int(a) for a in axes})
        if len(norm) != len(axes) or not all(0 <= a < full for a in norm):
            raise ValueError(f"ReduceMean node {n.name!r}: axes {list(axes)} invalid for a rank-{full} input")
        if 0 in norm:
            raise _unsupported(n, "a ReduceMean over the batch axis")
        k, end = norm[0] - 1, norm[-1]
        if norm != list(range(norm[0], end + 1)):
            raise _unsupported(n, f"a ReduceMean over axes {norm} that are not one block of adjacent axes: "
                                  "onnxruntime transposes them together first, which fxpsim does not reproduce")
        q = self._single_q(n.outputs[0])
        if q is None:
            raise _unsupported(n, "a ReduceMean whose output no single QuantizeLinear reads (a float output)")
        scale, zp, dtype = self._claim(q)
        keep = int(n.attrs.get("keepdims", 1))
        nhwc = False
        if keep and len(shape) == 3 and not self._quantized_graph_input(xv.src):
            if not (self._after_conv(xv.src) and norm == [2, 3]):
                raise _unsupported(n, "a ReduceMean with keepdims=1 on an image that comes neither straight from a "
                                      "quantized graph input nor from a convolution over H, W: onnxruntime's layout "
                                      "transformation may run it in NHWC, which fxpsim reproduces only after a "
                                      "convolution (measured)")
            nhwc = True
        out_shape = tuple(shape[:k]) + ((1,) * (end - k) if keep else ()) + tuple(shape[end:])
        if len(out_shape) == 0:
            raise _unsupported(n, "a ReduceMean to one value per sample without keepdims (a scalar)")
        g = self._int_value(q.outputs[0], out_shape, dtype, scale, zp)
        attrs = {"reduce_from": k}
        if end < len(shape):
            attrs["reduce_to"] = end
        if nhwc:            # onnxruntime's NHWC layout is the graph's: H, W reduced before the kept channels
            attrs = {"reduce_from": 0, "reduce_to": 2}
        else:
            if len(shape) == 3:
                attrs["in_perm"] = [2, 0, 1]
            if len(out_shape) == 3:
                attrs["out_perm"] = [1, 2, 0]
        self._add_node("onnx_reduce_mean", [src.g], [g], attrs, name=n.name)
        self._note(n.name, n, False, "onnxruntime runs ReduceMean in float32 between DequantizeLinear and "
                                     "QuantizeLinear" + ("" if end == len(shape) and not nhwc else
                                                         "; reproduced as with intra_op_num_threads=1"))

    def _softmax_axis(self, n, shape, opset):
        full = len(shape) + 1
        a = int(n.attrs.get("axis", 1 if opset < 13 else -1))
        if not -full <= a < full:
            raise ValueError(f"{n.op} node {n.name!r}: axis {a} is outside the {full} axes of the input")
        a = a + full if a < 0 else a
        if a == 0:
            raise _unsupported(n, "a softmax over the batch axis")
        return a - 1

    def _emit_softmax(self, n, src, out_name, scale, zp, dtype, opset):
        axis = self._softmax_axis(n, src.shape, opset)
        g = self._int_value(out_name, tuple(src.shape), dtype, scale, zp)
        attrs = {"axis": axis, "opset13": opset >= 13}
        if len(src.shape) == 3:
            attrs["in_perm"] = [2, 0, 1]
        self._add_node("qlinear_softmax", [src.g], [g], attrs, name=n.name)

    def _softmax(self, n):
        xv, src = self._activation_dq(n, n.inputs[0])
        q, clip = self._group_q(n)
        if q is None:
            raise _unsupported(n, "a Softmax whose output no single QuantizeLinear reads: onnxruntime runs it in "
                                  "float32 (MLAS), which fxpsim does not reproduce")
        x_t, y_t = self._dq_type(xv), self._q_type(q)
        if x_t != y_t or xv.float_only:
            raise _unsupported(n, f"onnxruntime runs this Softmax in float32 (input {x_t}, output {y_t}"
                                  f"{', its input is no DequantizeLinear output' if xv.float_only else ''}), which "
                                  "fxpsim does not reproduce")
        scale, zp, dtype = self._claim(q)
        if clip is not None:
            self.claimed.add(id(clip))
        self._emit_softmax(n, src, q.outputs[0], scale, zp, dtype, self.opset)
        self._note(n.name, n, True)

    def _qlinear_softmax(self, n):
        i = n.inputs + [""] * (5 - len(n.inputs))
        if "opset" not in n.attrs:
            raise ValueError(f"QLinearSoftmax node {n.name!r} needs its 'opset' attribute")
        xv = self._int_input(n, i[0], i[1], i[2])
        scale, zp, dtype = self._out_params(n, i[3], i[4], xv.dtype)
        if dtype != xv.dtype:
            raise ValueError(f"QLinearSoftmax node {n.name!r}: input {xv.dtype} and output {dtype} types differ")
        self._emit_softmax(n, xv, n.outputs[0], scale, zp, dtype, int(n.attrs["opset"]))
