"""ONNX QDQ models as graph nodes (a mixin of the ONNX importer, :mod:`fxpsim.frontends.onnx.importer`): the
dispatch of every node, QuantizeLinear / DequantizeLinear, the selection of the DequantizeLinear -> op ->
QuantizeLinear groups that onnxruntime fuses (Conv, MatMul/Gemm, Add/Mul, pools, Concat: converted in
:mod:`fxpsim.frontends.onnx.qdq_groups`) or runs in float32, and the data movement and activations between
them."""
from __future__ import annotations

import numpy as np

from .nodes import _MS, _TARGETS, _ONode, _unsupported, _Val


class QDQConversions:
    """Node conversion of the QDQ form (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _convert(self, n: _ONode):
        if id(n) in self.claimed:
            return
        if self._is_q(n):
            return self._quantize(n)
        if self._is_dq(n):
            return self._dequantize(n)
        if n.domain == "" and n.op == "Identity":
            self.env[n.outputs[0]] = self.val(n.inputs[0], n)
            return
        if self._elementwise(n) or self._move(n) or self._reduction(n) or self._conv_transpose(n):
            return
        handler = {"": {"QLinearConv": self._qlinear_conv, "QLinearMatMul": self._qlinear_matmul,
                        "MatMulInteger": self._integer_mac, "ConvInteger": self._integer_mac},
                   _MS: {"QGemm": self._qgemm, "QLinearAdd": self._qlinear_binary, "QLinearMul": self._qlinear_binary,
                         "QLinearGlobalAveragePool": self._qlinear_pool, "QLinearAveragePool": self._qlinear_pool,
                         "QLinearConcat": self._qlinear_concat}}[n.domain].get(n.op)
        if handler is not None:
            return handler(n)
        if n.domain == "" and n.op in _TARGETS:
            return self._target(n)
        raise _unsupported(n)

    def _sample_axis(self, axis, shape):
        """Per-sample graph axis of the full-rank ONNX ``axis`` of a tensor of per-sample ``shape``."""
        a = int(axis)
        a = a + len(shape) + 1 if a < 0 else a
        if a == 0:
            return None
        return [2, 0, 1][a - 1] if len(shape) == 3 else a - 1

    def _quantize_per_axis(self, q, v):
        s = self.const(q.inputs[1])
        z = self.const(q.inputs[2]) if len(q.inputs) > 2 and q.inputs[2] else None
        if s is None or s.ndim != 1 or z is None or z.shape != s.shape or v.kind != "float":
            raise _unsupported(q, "a per-axis QuantizeLinear needs constant 1-D scales and zero points "
                                  "and a float input")
        axis = self._sample_axis(q.attrs.get("axis", 1), v.shape)
        if axis is None or (len(v.shape) == 3 and self._gshape(v.shape)[axis] != s.size) or \
                (len(v.shape) != 3 and v.shape[axis] != s.size):
            raise _unsupported(q, "a per-axis QuantizeLinear along the batch axis or of the wrong size")
        if not np.all(s > 0) or z.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise _unsupported(q, "non-positive scales or a zero point other than int8 / uint8")
        bits, signed = self._int_spec_args(z.dtype)
        nhwc = len(v.shape) == 3
        g = self._new_tensor(self._gname(q.outputs[0], nhwc), bits, signed, self._gshape(v.shape),
                             np.float32(s).astype(np.float64), z.astype(np.int64), axis)
        self.env[q.outputs[0]] = _Val("int", g=g, shape=tuple(v.shape), dtype=np.dtype(z.dtype))
        self._add_node("onnx_quantize", [v.g], [g], name=q.name)

    def _quantize(self, q):
        v = self.val(q.inputs[0], q)
        s = self.const(q.inputs[1]) if len(q.inputs) > 1 else None
        if s is not None and s.size > 1:
            return self._quantize_per_axis(q, v)
        scale, zp, dtype = self._q_params(q)
        if v.kind == "float":
            g = self._int_value(q.outputs[0], v.shape, dtype, scale, zp)
            self._add_node("onnx_quantize", [v.g], [g], name=q.name)
        elif v.kind == "dq" and v.src in self.env:
            self._requantize(q, v, self.env[v.src], q.outputs[0], scale, zp, dtype)
        elif v.kind == "fchain":
            self._quantize_chain(q, v)
        else:
            raise ValueError(f"QuantizeLinear node {q.name!r} reads {q.inputs[0]!r}, which is not a float tensor")

    def _requantize(self, node, dq: _Val, src: _Val, out_name, scale, zp, dtype, clip=None):
        """Q(DQ(x)) (optionally clipped in between) onto the output parameters: the same tensor when nothing
        changes, else an ``onnx_requantize`` node."""
        if dq.scale.size != 1:
            raise _unsupported(node, "a per-channel DequantizeLinear of an activation")
        src_g = self._check_params(node, dq.src, src.g, dq.scale, dq.zp)
        s_in, z_in = self._params(src_g)
        if clip is None and np.float32(s_in) == np.float32(scale) and z_in == zp and src.dtype == dtype:
            self.env[out_name] = _Val("int", g=src_g, shape=src.shape, dtype=src.dtype)
            return
        g = self._int_value(out_name, src.shape, dtype, scale, zp)
        attrs = {}
        if clip is not None:
            attrs = {"clip_min": clip[0], "clip_max": clip[1]}
        self._add_node("onnx_requantize", [src_g], [g], attrs, name=node.name)

    def _dequantize(self, dq):
        x = dq.inputs[0]
        scale = self.const(dq.inputs[1])
        if scale is None:
            raise _unsupported(dq, "a DequantizeLinear needs a constant scale")
        if dq.attrs.get("block_size"):
            raise _unsupported(dq, "blocked quantization")
        zp = self.const(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
        if x in self.consts:
            data = self.consts[x]
            shape, dtype = data.shape, data.dtype
        else:
            src = self.val(x, dq)
            if src.kind != "int":
                raise ValueError(f"DequantizeLinear node {dq.name!r} reads {x!r}, which is not an integer tensor")
            shape, dtype = src.shape, src.dtype
        if np.dtype(dtype) not in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)):
            raise _unsupported(dq, f"{np.dtype(dtype)} codes")
        if zp is None:
            zp = np.zeros(scale.shape, dtype)
        axis = None
        if scale.size > 1:
            rank = len(shape) if x in self.consts else len(shape) + 1
            axis = int(dq.attrs.get("axis", 1))
            axis = axis + rank if axis < 0 else axis
        self.env[dq.outputs[0]] = _Val("dq", src=x, scale=np.asarray(scale, np.float32).reshape(-1),
                                       zp=np.asarray(zp).astype(np.int64).reshape(-1), axis=axis, shape=shape,
                                       dtype=np.dtype(np.float32))

    # ------------------------------------------------------------------ QDQ groups
    def _group_q(self, n):
        """The QuantizeLinear consuming ``n``'s output as onnxruntime's selectors see it (possibly through a
        Relu / Clip the Q makes redundant), and that Relu / Clip; (None, None) when the output is not
        consumed by exactly one Q."""
        out = n.outputs[0]
        if out in self.outputs:
            return None, None
        cons = self.consumers(out)
        if len(cons) != 1:
            return None, None
        c = cons[0][0]
        if self._is_q(c):
            return c, None
        if c.domain == "" and c.op in ("Relu", "Clip") and c.outputs[0] not in self.outputs:
            cc = self.consumers(c.outputs[0])
            if len(cc) == 1 and self._is_q(cc[0][0]) and self._clip_redundant(c, cc[0][0]):
                return cc[0][0], c
        return None, None

    def _clip_redundant(self, clip, q) -> bool:
        """IsClipMadeRedundantByQ."""
        if len(q.inputs) < 2:
            return False
        s = self._scalar_const(q.inputs[1])
        z = self._q_zp_const(q)
        if s is None or (len(q.inputs) > 2 and q.inputs[2] and z is None):
            return False
        zp, dt = z if z is not None else (0, np.dtype(np.uint8))
        info = np.iinfo(dt)
        if clip.op == "Relu":
            return zp == int(info.min)
        b = self._clip_bounds(clip)
        if b is None:
            return False
        scale = np.float32(s.reshape(()))
        lo = int(np.rint(np.float32(np.float32(b[0]) / scale))) + zp
        hi = int(np.rint(np.float32(np.float32(b[1]) / scale))) + zp
        return lo <= int(info.min) and hi >= int(info.max)

    def _claim(self, q):
        self.claimed.add(id(q))
        return self._q_params(q)

    def _activation_dq(self, n, name, what="input"):
        v = self.val(name, n)
        if v.kind != "dq" or v.src in self.consts:
            if v.kind == "float" or v.kind == "const":
                raise ValueError(f"{n.op} node {n.name!r} reads the float tensor {name!r} (not the output of a "
                                 "DequantizeLinear): fxpsim imports quantized models, where every op between "
                                 "QuantizeLinear and DequantizeLinear is quantized")
            if v.kind == "int":
                raise ValueError(f"{n.op} node {n.name!r} reads the integer tensor {name!r} directly")
            if v.kind == "fchain":
                raise ValueError(f"{n.op} node {n.name!r} reads {name!r}, the float output of the elementwise ops "
                                 f"{v.data['ops']} that no QuantizeLinear quantizes first (onnxruntime would run "
                                 "it in float32, which fxpsim does not import)")
            raise ValueError(f"{n.op} node {n.name!r}: its {what} {name!r} is a dequantized constant")
        if v.scale.size != 1:
            raise _unsupported(n, f"per-channel quantization of the activation {name!r}")
        src = self.env[v.src]
        g = self._check_params(n, v.src, src.g, v.scale, v.zp)
        return v, _Val("int", g=g, shape=src.shape, dtype=src.dtype, float_only=v.float_only)

    def _target(self, n):
        q, clip = self._group_q(n)
        op = n.op
        if clip is not None and op not in ("MaxPool", "Reshape", "Flatten", "Relu", "Clip"):
            self.claimed.add(id(clip))
        if op in ("MaxPool", "Reshape", "Flatten", "Relu", "Clip"):
            return self._movement(n, q, clip)
        if q is None:
            raise ValueError(f"{op} node {n.name!r}: its output is not quantized by exactly one QuantizeLinear "
                             "(onnxruntime would compute it in float, which fxpsim imports only inside "
                             "DequantizeLinear -> op -> QuantizeLinear groups)")
        if op == "Conv":
            return self._conv(n, q)
        if op in ("MatMul", "Gemm"):
            return self._matmul(n, q)
        if op in ("Add", "Mul"):
            return self._binary(n, q)
        if op in ("AveragePool", "GlobalAveragePool"):
            return self._pool(n, q)
        if op == "Concat":
            return self._concat(n, q)
        raise _unsupported(n)

    def _note(self, node_name, onnx_node, fused: bool, why: str = ""):
        self.fused[node_name] = fused
        if not fused:
            self.float_nodes.append({"node": node_name, "onnx_op": onnx_node.op, "why": why})

    # ---------------- data movement and activations between DQ and Q
    def _movement(self, n, q, clip):
        """MaxPool / Reshape / Flatten / Relu / Clip: on integer codes directly (QOperator graphs), or inside a
        DQ -> op -> Q group: onnxruntime drops the Q/DQ when their parameters agree (the op runs on codes);
        otherwise it runs the op in float32, which equals the op on codes followed by Q(DQ(.))."""
        v = self.val(n.inputs[0], n)
        if n.op == "Reshape" and self._whole_steps(n, n.outputs[:1]) is not None:
            xv, src = (None, v) if v.kind == "int" else self._activation_dq(n, n.inputs[0])
            return self._emit_whole(n, v, xv, src, n.outputs[0], *self._whole_steps(n, n.outputs[:1]))
        if v.kind == "int":
            if n.op in ("Relu", "Clip"):
                raise _unsupported(n, f"{n.op} on integer codes")
            return self._movement_op(n, v, n.outputs[0], *self._params(v.g))
        xv, src = self._activation_dq(n, n.inputs[0])
        if q is None:
            if n.op in ("Relu", "Clip"):
                raise ValueError(f"{n.op} node {n.name!r}: its output is not quantized by exactly one "
                                 "QuantizeLinear (onnxruntime would compute it in float)")
            # onnxruntime runs the op in float32 on the dequantized values; on codes it is the same op
            # followed by the DequantizeLinear. Reshape / MaxPool: its QDQ propagation moves the
            # DequantizeLinear after the op, so consumers see one (fusable); Flatten: they do not.
            s_in, z_in = self._params(src.g)
            mid = f"{n.outputs[0]}:codes"
            self._movement_op(n, src, mid, s_in, z_in)
            self._dq_after_move(n, xv, n.outputs[0], mid, s_in, z_in, self.env[mid].shape)
            return
        scale, zp, dtype = self._claim(q)
        if clip is not None:
            self.claimed.add(id(clip))
        s_in, z_in = self._params(src.g)
        same = (np.float32(s_in) == scale and z_in == zp and self._dq_type(xv) == self._q_type(q)
                and not xv.float_only)
        if n.op in ("Relu", "Clip"):
            bounds = (0.0, None) if n.op == "Relu" else self._clip_bounds(n)
            if bounds is None:
                raise _unsupported(n, "Clip bounds that are not constants")
            self._requantize(n, xv, src, q.outputs[0], scale, zp, dtype, clip=bounds)
            self._note(n.name, n, False, "float32 Relu/Clip between DQ and Q")
            return
        if same:
            self._movement_op(n, src, q.outputs[0], scale, zp)
            self._note(n.name, n, True)
            return
        mid = f"{n.outputs[0]}"
        self._movement_op(n, src, mid, s_in, z_in)
        mv = self.env[mid]
        self._requantize(n, _Val("dq", src=mid, scale=np.array([s_in], np.float32), zp=np.array([z_in])), mv,
                         q.outputs[0], scale, zp, dtype)
        self._note(n.name, n, False, "Q/DQ parameters or types differ: float32 op then QuantizeLinear")

    def _movement_op(self, n, src: _Val, out_name, scale, zp):
        if n.op == "MaxPool":
            if len(src.shape) != 3:
                raise _unsupported(n, "MaxPool of a non-image tensor")
            if int(n.attrs.get("storage_order", 0)) or len(n.outputs) > 1 and n.outputs[1]:
                raise _unsupported(n, "MaxPool indices output / storage_order")
            if n.attrs.get("dilations") and any(int(d) != 1 for d in n.attrs["dilations"]):
                raise _unsupported(n, "dilated pooling")
            k = [int(v) for v in n.attrs["kernel_shape"]]
            strides, pads, _ = self._conv_attrs(n, src.shape, k)
            c, h, w = src.shape
            oh, ow = self._out_hw(h, w, k, strides, pads)
            g = self._int_value(out_name, (c, oh, ow), src.dtype, scale, zp)
            self._add_node("max_pool2d", [src.g], [g], {"pool_size": k, "stride": strides, "padding": pads},
                           name=n.name)
            return g
        # Reshape / Flatten
        in_shape = tuple(src.shape)
        if n.op == "Flatten":
            axis = int(n.attrs.get("axis", 1))
            axis = axis + len(in_shape) + 1 if axis < 0 else axis
            if axis == 0:
                raise _unsupported(n, "Flatten with axis 0 (merges the batch)")
            new = (int(np.prod(in_shape)),) if axis == 1 else \
                (int(np.prod(in_shape[:axis - 1])), int(np.prod(in_shape[axis - 1:])))
        else:
            new = self._reshape_target(n, in_shape)
        x = src.g
        if len(in_shape) == 3 and not self._perm_is_noop(self.specs[x]["shape"], (2, 0, 1)):
            t = self._new_tensor(f"{n.outputs[0]}/nchw_in", self.specs[x]["bits"], self.specs[x]["signed"],
                                 in_shape, scale, zp)
            self._add_node("transpose", [x], [t], {"perm": [2, 0, 1]}, name=f"{n.name}/to_nchw")
            x = t
        if len(new) == 3:
            flat = self._new_tensor(f"{n.outputs[0]}/nchw", self.specs[x]["bits"], self.specs[x]["signed"], new,
                                    scale, zp)
            self._add_node("reshape", [x], [flat], name=n.name)
            g = self._int_value(out_name, new, src.dtype, scale, zp)
            self._add_node("transpose", [flat], [g], {"perm": [1, 2, 0]}, name=f"{n.name}/to_nhwc")
            return g
        g = self._int_value(out_name, new, src.dtype, scale, zp)
        self._add_node("reshape", [x], [g], name=n.name)
        return g

    @staticmethod
    def _perm_is_noop(shape, perm):
        moved = [a for a in perm if shape[a] != 1]
        return moved == sorted(moved)

    def _reshape_target(self, n, in_shape):
        shape = self.const(n.inputs[1]) if len(n.inputs) > 1 else None
        if shape is None:
            raise _unsupported(n, "a Reshape whose shape is not a constant")
        s = [int(v) for v in shape.reshape(-1)]
        if n.attrs.get("allowzero", 0) and 0 in s:
            raise _unsupported(n, "allowzero with zero dimensions")
        full_in = (None,) + tuple(in_shape)
        batch = self.types.get(self.inputs[0], (None, None))[1] if self.inputs else None
        b0 = batch[0] if batch else None
        if not s or not (s[0] in (-1, 0) or (b0 and s[0] == b0)):
            raise _unsupported(n, f"a Reshape to {s} that does not keep the batch axis first")
        rest = [full_in[i + 1] if (v == 0 and i + 1 < len(full_in)) else v for i, v in enumerate(s[1:])]
        if s[0] == -1 and -1 in rest:
            raise _unsupported(n, f"a Reshape to {s} with two inferred dimensions")
        total = int(np.prod(in_shape))
        if -1 in rest:
            known = int(np.prod([v for v in rest if v != -1]))
            rest[rest.index(-1)] = total // known
        if int(np.prod(rest)) != total:
            raise ValueError(f"Reshape node {n.name!r}: cannot reshape {in_shape} to {s} per sample")
        return tuple(rest)
