"""Linear (bilinear) Resize of quantized images as ``onnx_resize_linear`` nodes (a mixin of the ONNX importer,
:mod:`fxpsim.frontends.onnx.importer`; the graph op is :mod:`fxpsim.frontends.onnx.resize_ops`, the arithmetic
:mod:`fxpsim.datapath.onnxruntime.resize`).

What onnxruntime 1.32 runs, as probed (``tests/frontends/test_onnx_resize.py``):

* QDQ (DequantizeLinear -> Resize -> QuantizeLinear, as ``quantize_static`` emits it): the group is not fused;
  the float32 Resize runs on the dequantized values and the QuantizeLinear quantizes them (``kernel="float"``),
  whatever the layout;
* QOperator (Resize on uint8 / int8 codes): after a QLinearConv onnxruntime's layout transformer runs the Resize
  in NHWC, which takes the fixed-point kernel (``"integer"``); on a QuantizeLinear output it stays
  NCHW and takes the float32 kernel on the codes, truncated (``"float_codes"``). A Resize on codes from any
  other producer is refused (which layout onnxruntime picks there was not measured).

Only 4-D inputs with both spatial axes resized (scales ``[1, 1, s_h, s_w]`` or sizes of the same form) and the
coordinate modes of :data:`fxpsim.datapath.onnxruntime.resize.COORDINATE_MODES` are imported.
"""
from __future__ import annotations

from ...datapath.onnxruntime import resize as R
from .nodes import _MS, _unsupported

_NHWC_PRODUCERS = ("QLinearConv",)
_NCHW_PRODUCERS = ("QuantizeLinear",)


class ResizeConversions:
    """Linear Resize conversion (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _resize_linear(self, n):
        x = self.val(n.inputs[0], n)
        src = x if x.kind == "int" else self._activation_dq(n, n.inputs[0])[1]
        shape = tuple(src.shape)
        if len(shape) != 3:
            raise _unsupported(n, f"a linear Resize of a rank-{len(shape) + 1} tensor (4-D images only)")
        ctm, sc, out_len = self._resize_scales(n, shape)
        if ctm not in R.COORDINATE_MODES:
            raise _unsupported(n, f"a linear Resize with coordinate_transformation_mode {ctm!r} (proven for "
                                  f"{', '.join(R.COORDINATE_MODES)})")
        if sc[0] != 1 or out_len[0] != shape[0]:
            raise _unsupported(n, "a linear Resize of the channel axis")
        if min(out_len) < 1:
            raise ValueError(f"Resize node {n.name!r}: {list(shape)} resizes to {list(out_len)}")
        out_shape = (shape[0], int(out_len[1]), int(out_len[2]))
        attrs = {"ctm": ctm, "scale_h": float(sc[1]), "scale_w": float(sc[2])}
        if x.kind == "int":
            attrs["kernel"] = self._resize_codes_kernel(n)
            scale, zp = self._params(src.g)
            g = self._int_value(n.outputs[0], out_shape, src.dtype, scale, zp)
            self._add_node("onnx_resize_linear", [src.g], [g], attrs, name=n.name)
            return
        q = self._single_q(n.outputs[0])
        if q is None:
            raise _unsupported(n, "a linear Resize whose output no single QuantizeLinear reads (a float output)")
        scale, zp, dtype = self._claim(q)
        attrs["kernel"] = "float"
        g = self._int_value(q.outputs[0], out_shape, dtype, scale, zp)
        self._add_node("onnx_resize_linear", [src.g], [g], attrs, name=n.name)
        self._note(n.name, n, False, "onnxruntime runs the linear Resize in float32 between DequantizeLinear and "
                                     "QuantizeLinear")

    def _resize_codes_kernel(self, n) -> str:
        """The kernel onnxruntime runs for a Resize on codes, from the layout its input has at run time."""
        p = self.producer(n.inputs[0])
        if p is not None and p.domain in ("", _MS) and p.op in _NHWC_PRODUCERS:
            return "integer"
        if p is not None and p.domain == "" and p.op in _NCHW_PRODUCERS:
            return "float_codes"
        raise _unsupported(n, f"a linear Resize on codes from a {p.op if p else 'constant'} node: onnxruntime's "
                              "kernel depends on the layout it picks there (measured after QLinearConv and "
                              "QuantizeLinear only)")
