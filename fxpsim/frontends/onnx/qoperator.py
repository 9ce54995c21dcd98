"""ONNX QOperator ops as graph nodes (a mixin of the ONNX importer, :mod:`fxpsim.frontends.onnx.importer`): QLinearConv,
QLinearMatMul, QGemm, MatMulInteger / ConvInteger, QLinearAdd / QLinearMul, QLinear pools, QLinearConcat."""
from __future__ import annotations

import numpy as np

from .nodes import _unsupported, _Val


class QOperatorConversions:
    """Node conversion of the QOperator form (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _int_input(self, n, name, scale_name, zp_name):
        v = self.val(name, n)
        if v.kind != "int":
            raise ValueError(f"{n.op} node {n.name!r}: input {name!r} is not an integer tensor")
        s = self.const(scale_name)
        z = self.const(zp_name) if zp_name else np.zeros((), v.dtype)
        if s is None or s.size != 1 or z is None or z.size != 1:
            raise _unsupported(n, f"non-constant or per-channel parameters of the activation {name!r}")
        g = self._check_params(n, name, v.g, s, z)
        return _Val("int", g=g, shape=v.shape, dtype=v.dtype)

    def _out_params(self, n, scale_name, zp_name, default_dtype):
        s = self.const(scale_name)
        z = self.const(zp_name) if zp_name else np.zeros((), default_dtype)
        if s is None or s.size != 1 or z is None or z.size != 1:
            raise _unsupported(n, "non-constant or per-channel output parameters")
        return np.float32(s.reshape(())), int(z.reshape(())), np.dtype(z.dtype)

    def _qweights(self, n, name, scale_name, zp_name, layout):
        data = self.const(name)
        if data is None:
            raise _unsupported(n, f"weights {name!r} that are not a constant")
        scale = self.const(scale_name)
        zp = self.const(zp_name) if zp_name else np.zeros(scale.shape, data.dtype)
        if scale is None or zp is None:
            raise _unsupported(n, "non-constant weight parameters")
        axis = {"OIHW": 0, "KN": 1, "NK": 0}[layout]
        v = _Val("dq", src=name, scale=np.asarray(scale, np.float32).reshape(-1),
                 zp=np.asarray(zp).astype(np.int64).reshape(-1), axis=axis if scale.size > 1 else None)
        return self._weights(n, v, layout)

    def _qlinear_mac_operands(self, n, i, layout, y_scale, y_zp):
        """The activation, the weights (graph tensor and codes) and the output parameters of a QLinear MAC node
        whose inputs ``i`` start ``x, x_scale, x_zero_point, w, w_scale, w_zero_point``."""
        xv = self._int_input(n, i[0], i[1], i[2])
        w_g, _ = self._qweights(n, i[3], i[4], i[5], layout)
        w = self.specs[w_g]["data"]
        scale, zp, dtype = self._out_params(n, y_scale, y_zp, xv.dtype)
        return xv, w_g, w, scale, zp, dtype

    def _qlinear_conv(self, n):
        i = n.inputs
        xv, w_g, w, scale, zp, dtype = self._qlinear_mac_operands(n, i, "OIHW", i[6], i[7])
        b_g = None
        if len(i) > 8 and i[8]:
            b_g, _ = self._bias(n, i[8], w.shape[0], self.const(i[1]), self.const(i[4]))
        group = int(n.attrs.get("group", 1))
        strides, pads, dil = self._conv_attrs(n, xv.shape, w.shape[1:3])
        c, h, wd = xv.shape
        oh, ow = self._out_hw(h, wd, w.shape[1:3], strides, pads, dil)
        g = self._int_value(n.outputs[0], (w.shape[0], oh, ow), dtype, scale, zp)
        self._add_node("qlinear_conv", [xv.g, w_g] + ([b_g] if b_g else []), [g],
                       {"stride": strides, "padding": pads, "dilation": dil, "group": group, "ort_kernel": "qlinear"},
                       name=n.name)

    def _qlinear_matmul(self, n):
        i = n.inputs
        xv, w_g, w, scale, zp, dtype = self._qlinear_mac_operands(n, i, "KN", i[6], i[7])
        if xv.shape[-1:] != (w.shape[1],) or len(xv.shape) == 3:
            raise ValueError(f"QLinearMatMul node {n.name!r}: input {xv.shape} does not match K={w.shape[1]}")
        g = self._int_value(n.outputs[0], xv.shape[:-1] + (w.shape[0],), dtype, scale, zp)
        self._add_node("qlinear_matmul", [xv.g, w_g], [g], {"alpha": 1.0, "ort_kernel": "qlinear",
                                                            "onnx_op": "QLinearMatMul"}, name=n.name)

    def _qgemm(self, n):
        i = n.inputs + [""] * (9 - len(n.inputs))
        if n.attrs.get("transA", 0):
            raise _unsupported(n, "transA=1")
        if not i[7]:
            raise _unsupported(n, "a QGemm with float output (no y_scale)")
        xv, w_g, w, scale, zp, dtype = self._qlinear_mac_operands(n, i, "NK" if n.attrs.get("transB", 0) else "KN",
                                                                  i[7], i[8])
        b_g = None
        if i[6]:
            b_g, _ = self._bias(n, i[6], w.shape[0], self.const(i[1]), self.const(i[4]))
        if xv.shape != (w.shape[1],):
            raise ValueError(f"QGemm node {n.name!r}: input {xv.shape} does not match K={w.shape[1]}")
        g = self._int_value(n.outputs[0], (w.shape[0],), dtype, scale, zp)
        self._add_node("qlinear_matmul", [xv.g, w_g] + ([b_g] if b_g else []), [g],
                       {"alpha": float(n.attrs.get("alpha", 1.0)), "ort_kernel": "qlinear", "onnx_op": "QGemm"},
                       name=n.name)

    def _integer_mac(self, n):
        i = n.inputs + [""] * (4 - len(n.inputs))
        v = self.val(i[0], n)
        if v.kind != "int":
            raise ValueError(f"{n.op} node {n.name!r}: input {i[0]!r} is not an integer tensor")
        xz = self.const(i[2]) if i[2] else np.zeros(1, v.dtype)
        if xz is None or xz.size != 1:
            raise _unsupported(n, "a non-constant or per-row input zero point")
        data = self.const(i[1])
        if data is None:
            raise _unsupported(n, "a second operand that is not a constant")
        wz = self.const(i[3]) if i[3] else np.zeros(1, data.dtype)
        if wz is None:
            raise _unsupported(n, "a non-constant weight zero point")
        conv = n.op == "ConvInteger"
        if conv:
            w = np.ascontiguousarray(np.transpose(data, (0, 2, 3, 1)))
        else:
            if data.ndim != 2:
                raise _unsupported(n, "a 2-D constant second operand only")
            w = np.ascontiguousarray(data.T)
        bits, signed = self._int_spec_args(data.dtype)
        w_g = self._new_tensor(i[1], bits, signed, w.shape, data=w)
        attrs = {"x_zero_point": int(xz.reshape(-1)[0]), "w_zero_point": [int(z) for z in wz.reshape(-1)]}
        if conv:
            group = int(n.attrs.get("group", 1))
            strides, pads, dil = self._conv_attrs(n, v.shape, w.shape[1:3])
            c, h, wd = v.shape
            oh, ow = self._out_hw(h, wd, w.shape[1:3], strides, pads, dil)
            out_shape = (w.shape[0], oh, ow)
            attrs.update(stride=strides, padding=pads, dilation=dil, group=group)
        else:
            if v.shape[-1:] != (w.shape[1],) or len(v.shape) == 3:
                raise ValueError(f"MatMulInteger node {n.name!r}: input {v.shape} does not match K={w.shape[1]}")
            out_shape = v.shape[:-1] + (w.shape[0],)
        nhwc = len(out_shape) == 3
        g = self._new_tensor(self._gname(n.outputs[0], nhwc), 32, True, self._gshape(out_shape))
        self.env[n.outputs[0]] = _Val("int", g=g, shape=out_shape, dtype=np.dtype(np.int32))
        self._add_node("conv_integer" if conv else "matmul_integer", [v.g, w_g], [g], attrs, name=n.name)

    def _qlinear_binary(self, n):
        i = n.inputs
        operands = []
        for name, s, z in ((i[0], i[1], i[2]), (i[3], i[4], i[5])):
            if name in self.consts:
                data = self.consts[name]
                sc, zz = self.const(s), self.const(z) if z else np.zeros((), data.dtype)
                if sc is None or sc.size != 1 or zz is None or zz.size != 1:
                    raise _unsupported(n, "per-channel or non-constant parameters")
                operands.append((_Val("dq", src=name, scale=np.asarray(sc, np.float32).reshape(-1),
                                      zp=np.asarray(zz).astype(np.int64).reshape(-1)),
                                 _Val("const", data=data, shape=data.shape, dtype=data.dtype)))
            else:
                v = self._int_input(n, name, s, z)
                operands.append((None, v))
        out_shape, kind = self._binary_layout(n, operands)
        names = []
        for (v, s), name in zip(operands, (i[0], i[3])):
            names.append(self._const_operand(name, s.data, v.scale, v.zp, len(out_shape)) if s.kind == "const"
                         else s.g)
        scale, zp, dtype = self._out_params(n, i[6], i[7] if len(i) > 7 else "", operands[0][1].dtype)
        g = self._int_value(n.outputs[0], out_shape, dtype, scale, zp)
        op = "qlinear_add" if n.op == "QLinearAdd" else "qlinear_mul"
        self._add_node(op, names, [g], {"ort_kernel": "qlinear", "broadcast": kind, "u8_shift": False}, name=n.name)

    def _qlinear_pool(self, n):
        if int(n.attrs.get("channels_last", 0)):
            raise _unsupported(n, "channels_last=1")
        i = n.inputs
        v = self._int_input(n, i[0], i[1], i[2])
        if len(v.shape) != 3:
            raise _unsupported(n, "pooling of a non-image tensor")
        scale, zp, dtype = self._out_params(n, i[3], i[4] if len(i) > 4 else "", v.dtype)
        self._emit_pool(n, v, n.outputs[0], n.op == "QLinearGlobalAveragePool", scale, zp, dtype)

    def _qlinear_concat(self, n):
        i = n.inputs
        if (len(i) - 2) % 3 or len(i) < 5:
            raise _unsupported(n, "a malformed QLinearConcat input list")
        srcs = [self._int_input(n, i[k], i[k + 1], i[k + 2]) for k in range(2, len(i), 3)]
        scale, zp, dtype = self._out_params(n, i[0], i[1], srcs[0].dtype)
        self._emit_concat(n, srcs, [s.shape for s in srcs], n.outputs[0], scale, zp, dtype, n.attrs.get("axis", 1))
