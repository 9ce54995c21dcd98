"""The DequantizeLinear -> op -> QuantizeLinear groups of an ONNX QDQ model as graph nodes (a mixin of the ONNX
importer, :mod:`fxpsim.frontends.onnx.importer`): Conv, MatMul / Gemm, Add / Mul, AveragePool /
GlobalAveragePool and Concat, fused as onnxruntime fuses them (QLinearConv, QLinearMatMul, QGemm, QLinearAdd,
QLinearMul, QLinear pools, QLinearConcat) or marked as run in float32 where it does not; with the layout of
their attributes, weights, biases and constant operands, which the QOperator conversions
(:mod:`fxpsim.frontends.onnx.qoperator`) share."""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K
from .nodes import _unsupported, _Val


class QDQGroupConversions:
    """Node conversion of the QDQ groups (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    # ---------------- Conv
    def _conv_attrs(self, n, in_shape, k_hw):
        if len(in_shape) != 3 or len(k_hw) != 2:
            raise _unsupported(n, "only 2-D convolutions / pools (NCHW inputs)")
        strides = list(n.attrs.get("strides", [1, 1]))
        dil = list(n.attrs.get("dilations", [1, 1]))
        pads = list(n.attrs.get("pads", [0, 0, 0, 0]))
        auto = n.attrs.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * 4
            for i, (size, k, s, d) in enumerate(zip(in_shape[1:], k_hw, strides, dil)):
                out = -(-size // s)
                total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
                small, big = total // 2, total - total // 2
                pads[i], pads[i + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        elif auto not in ("NOTSET", ""):
            raise _unsupported(n, f"auto_pad {auto}")
        if n.attrs.get("ceil_mode", 0):
            raise _unsupported(n, "ceil_mode=1")
        return ([int(s) for s in strides], [[int(pads[0]), int(pads[2])], [int(pads[1]), int(pads[3])]],
                [int(d) for d in dil])

    @staticmethod
    def _out_hw(h, w, k_hw, strides, pads, dil=(1, 1)):
        """Output height and width of a ``k_hw`` window (dilated by ``dil``) sliding over ``h x w`` with
        ``strides`` and ``pads`` ``[[top, bottom], [left, right]]`` (convolutions and pools)."""
        oh = (h + pads[0][0] + pads[0][1] - dil[0] * (k_hw[0] - 1) - 1) // strides[0] + 1
        ow = (w + pads[1][0] + pads[1][1] - dil[1] * (k_hw[1] - 1) - 1) // strides[1] + 1
        return oh, ow

    def _weights(self, n, v: _Val, layout: str):
        """Weight constant from a dequantized constant: ``layout`` "OIHW" (-> OHWI) or "KN" / "NK" (-> [O, K])."""
        if v.kind != "dq" or v.src not in self.consts:
            raise _unsupported(n, "weights that are not a DequantizeLinear of a constant")
        data = self.consts[v.src]
        if data.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise _unsupported(n, f"{data.dtype} weights")
        per_channel = v.scale.size > 1
        if layout == "OIHW":
            if per_channel and v.axis != 0:
                raise _unsupported(n, "per-channel weights along an axis other than the output channels")
            w = np.ascontiguousarray(np.transpose(data, (0, 2, 3, 1)))
        elif layout == "KN":
            if per_channel and v.axis != 1:
                raise _unsupported(n, "per-row MatMul weight scales")
            w = np.ascontiguousarray(data.T)
        else:
            if per_channel and v.axis != 0:
                raise _unsupported(n, "Gemm weight scales along K")
            w = np.ascontiguousarray(data)
        zp = v.zp if v.zp.size > 1 else int(v.zp[0])
        scale = v.scale.astype(np.float64) if per_channel else float(v.scale[0])
        zps = np.broadcast_to(np.asarray(zp), v.scale.shape) if per_channel else zp
        return self._const_tensor(v.src, w, scale, zps, 0 if per_channel else None), data.dtype

    def _bias(self, n, name, n_out, x_scale, w_scale):
        if not name:
            return None, True
        v = self.val(name, n)
        if v.kind == "dq" and v.src in self.consts:
            data = self.consts[v.src].reshape(-1)
            ok = data.dtype == np.int32 and not np.any(v.zp)
            if not ok:
                raise _unsupported(n, "a bias that is not int32 with zero point 0")
            if data.size != n_out:
                raise _unsupported(n, f"a bias of {data.size} values for {n_out} outputs")
            scale = v.scale.astype(np.float64) if v.scale.size > 1 else float(v.scale[0])
            return self._const_tensor(v.src, data, scale, np.zeros(np.shape(scale), np.int64) if v.scale.size > 1
                                      else 0, 0 if v.scale.size > 1 else None), True
        if v.kind == "const":
            data = v.data.reshape(-1)
            if data.dtype != np.int32 or data.size != n_out:
                raise _unsupported(n, "a bias that is not an int32 vector of one value per output")
            scale = np.float32(x_scale) * np.asarray(w_scale, np.float32).reshape(-1)
            scale = np.broadcast_to(scale, (n_out,)).astype(np.float64)
            if np.all(scale == scale[0]):
                return self._const_tensor(name, data, float(scale[0]), 0), True
            return self._const_tensor(name, data, scale, np.zeros(n_out, np.int64), 0), True
        raise _unsupported(n, "a bias that is not a constant")

    def _out_name(self, q, shape, scale, zp, dtype):
        return self._int_value(q.outputs[0], shape, dtype, scale, zp)

    def _conv(self, n, q):
        xv, src = self._activation_dq(n, n.inputs[0])
        wv = self.val(n.inputs[1], n)
        w_g, wdt = self._weights(n, wv, "OIHW")
        w = self.specs[w_g]["data"]
        group = int(n.attrs.get("group", 1))
        strides, pads, dil = self._conv_attrs(n, src.shape, w.shape[1:3])
        b_g, _ = self._bias(n, n.inputs[2] if len(n.inputs) > 2 else "", w.shape[0], xv.scale, wv.scale)
        scale, zp, dtype = self._claim(q)
        c, h, wd = src.shape
        if w.shape[3] * group != c or w.shape[0] % group:
            raise ValueError(f"Conv node {n.name!r}: weights {w.shape} do not match {c} input channels, group {group}")
        oh, ow = self._out_hw(h, wd, w.shape[1:3], strides, pads, dil)
        x_t, y_t = self._dq_type(xv), self._q_type(q)
        fused = (x_t == y_t and x_t != np.dtype(np.int8)) and not xv.float_only
        why = "" if fused else ("its input is not a DequantizeLinear output" if xv.float_only else
                                "int8 activations: onnxruntime's x86 build fuses Conv for uint8 only"
                                if x_t == np.int8 else f"input {x_t} and output {y_t} types differ")
        kernel = "qlinear" if fused else "float"
        if not fused:
            try:
                K.mlas_conv2d_plan(2, group, c, (h, wd), w.shape[1:3], strides,
                                   tuple(map(tuple, pads)), dil, w.shape[0])
            except NotImplementedError as exc:
                raise _unsupported(n, f"onnxruntime runs it in float32 with {exc}, which fxpsim does not reproduce") \
                    from None
        g = self._out_name(q, (w.shape[0], oh, ow), scale, zp, dtype)
        attrs = {"stride": strides, "padding": pads, "dilation": dil, "group": group, "ort_kernel": kernel}
        if fused and src.dtype == np.int8:
            attrs["u8_shift"] = True          # onnxruntime multiplies the codes + 128 (QDQS8ToU8)
        self._add_node("qlinear_conv", [src.g, w_g] + ([b_g] if b_g else []), [g], attrs, name=n.name)
        self._note(n.name, n, fused, why)

    # ---------------- MatMul / Gemm
    def _matmul(self, n, q):
        xv, src = self._activation_dq(n, n.inputs[0])
        gemm = n.op == "Gemm"
        if gemm:
            if n.attrs.get("transA", 0):
                raise _unsupported(n, "transA=1")
            layout = "NK" if n.attrs.get("transB", 0) else "KN"
        else:
            layout = "KN"
        wv = self.val(n.inputs[1], n)
        if wv.kind != "dq" or wv.src not in self.consts or self.consts[wv.src].ndim != 2:
            raise _unsupported(n, "a second operand that is not a dequantized 2-D constant")
        w_g, wdt = self._weights(n, wv, layout)
        w = self.specs[w_g]["data"]
        if src.shape[-1:] != (w.shape[1],) or len(src.shape) == 3:
            raise ValueError(f"{n.op} node {n.name!r}: input {src.shape} does not match weights with K={w.shape[1]}"
                             " (or is an image)")
        alpha = float(n.attrs.get("alpha", 1.0)) if gemm else 1.0
        beta = float(n.attrs.get("beta", 1.0)) if gemm else 1.0
        bname = n.inputs[2] if gemm and len(n.inputs) > 2 else ""
        b_g = None
        bias_ok = True
        if bname:
            bv = self.val(bname, n)
            bias_ok = (bv.kind == "dq" and bv.src in self.consts and self.consts[bv.src].dtype == np.int32
                       and beta == 1.0)
            if not bias_ok:
                raise _unsupported(n, "a Gemm bias that is not a dequantized int32 constant with beta=1")
            b_g, _ = self._bias(n, bname, w.shape[0], xv.scale, wv.scale)
        scale, zp, dtype = self._claim(q)
        x_t, w_t, y_t = self._dq_type(xv), np.dtype(wdt), self._q_type(q)
        if gemm:
            fused = (x_t != np.int8 or w_t == np.int8) and x_t == y_t
            why = "" if fused else f"types A {x_t}, B {w_t}, Y {y_t}"
        else:
            fused = x_t != np.int8 and x_t == y_t
            why = "" if fused else ("int8 activations: onnxruntime's x86 build fuses MatMul for uint8 only"
                                    if x_t == np.int8 else f"input {x_t} and output {y_t} types differ")
        if xv.float_only:
            fused, why = False, "its input is not a DequantizeLinear output"
        if not fused and alpha != 1.0:
            raise _unsupported(n, "a float Gemm with alpha != 1")
        g = self._out_name(q, src.shape[:-1] + (w.shape[0],), scale, zp, dtype)
        attrs = {"alpha": alpha, "ort_kernel": "qlinear" if fused else "float", "onnx_op": n.op}
        if fused and src.dtype == np.int8 and x_t == np.uint8:
            attrs["u8_shift"] = True          # onnxruntime multiplies the codes + 128 (QDQS8ToU8)
        self._add_node("qlinear_matmul", [src.g, w_g] + ([b_g] if b_g else []), [g], attrs, name=n.name)
        self._note(n.name, n, fused, why)

    # ---------------- Add / Mul
    def _binary_operand(self, n, name):
        v = self.val(name, n)
        if v.kind != "dq":
            return self._activation_dq(n, name)           # raises with a clear message
        if v.src in self.consts:
            if v.scale.size != 1:
                raise _unsupported(n, f"a per-channel quantized constant operand {name!r}")
            data = self.consts[v.src]
            return v, _Val("const", data=data, shape=data.shape, dtype=data.dtype)
        return self._activation_dq(n, name)

    def _binary_layout(self, n, operands):
        """Per-sample shapes, the graph tensors of constant operands (NHWC when the other is an image) and
        onnxruntime's broadcast span kind."""
        act_shapes = [s.shape for v, s in operands if s.kind == "int"]
        if not act_shapes:
            raise _unsupported(n, "two constant operands")
        rank = max(len(s) for s in act_shapes) + 1      # full rank of the activations
        full = []
        for v, s in operands:
            if s.kind == "int":
                full.append((2,) + tuple(s.shape))        # batch: any size > 1
            else:
                shp = tuple(s.data.shape)
                if len(shp) > rank:
                    raise _unsupported(n, f"a constant of rank {len(shp)} against rank-{rank} activations")
                full.append((1,) * (rank - len(shp)) + shp)
        try:
            out_full = tuple(np.broadcast_shapes(*full))
        except ValueError:
            raise ValueError(f"{n.op} node {n.name!r}: operand shapes {full} do not broadcast") from None
        for (v, s), f in zip(operands, full):
            if s.kind == "int" and f[1:] != out_full[1:]:
                raise _unsupported(n, "an activation broadcast against a larger one")
            if s.kind == "const" and f[0] != 1:
                raise _unsupported(n, "a constant with a batch dimension")
        a_f, b_f = full
        if int(np.prod(a_f[1:])) == 1 and operands[0][1].kind == "const":
            kind = "a_scalar"
        elif int(np.prod(b_f[1:])) == 1 and operands[1][1].kind == "const":
            kind = "b_scalar"
        else:
            kind = "none"
            for d in range(len(out_full) - 1, -1, -1):
                if out_full[d] == 1:
                    continue
                if a_f[d] == 1:
                    kind = "a_scalar"
                elif b_f[d] == 1:
                    kind = "b_scalar"
                break
        return out_full[1:], kind

    def _const_operand(self, name, data, scale, zp, out_rank):
        per_sample = np.asarray(data).reshape((1,) * (out_rank + 1 - np.ndim(data)) + np.shape(data))[0]
        if per_sample.ndim == 3:
            per_sample = np.ascontiguousarray(np.transpose(per_sample, (1, 2, 0)))
        return self._const_tensor(name, per_sample, float(scale[0]), int(zp[0]))

    def _binary_tensors(self, n, operands, out_rank):
        names = []
        for (v, s), name in zip(operands, n.inputs[:2]):
            if s.kind == "const":
                names.append(self._const_operand(v.src, s.data, v.scale, v.zp, out_rank))
            else:
                names.append(s.g)
        return names

    def _binary(self, n, q):
        operands = [self._binary_operand(n, t) for t in n.inputs[:2]]
        out_shape, kind = self._binary_layout(n, operands)
        names = self._binary_tensors(n, operands, len(out_shape))
        scale, zp, dtype = self._claim(q)
        types = [self._dq_type(v) for v, _ in operands] + [self._q_type(q)]
        fused = types[0] == types[1] == types[2] and not any(v.float_only for v, _ in operands if v is not None)
        orig = [s.dtype for _, s in operands] + [np.dtype(dtype)]
        shift = [bool(fused and o == np.int8 and t == np.uint8) for o, t in zip(orig, types)]
        if any(shift) and not all(shift):
            raise _unsupported(n, "a fused group mixing converted int8 and native uint8 tensors")
        g = self._out_name(q, out_shape, scale, zp, dtype)
        op = "qlinear_add" if n.op == "Add" else "qlinear_mul"
        self._add_node(op, names, [g], {"ort_kernel": "qlinear" if fused else "float", "broadcast": kind,
                                        "u8_shift": all(shift)}, name=n.name)
        self._note(n.name, n, fused, "" if fused else f"operand/output types {', '.join(map(str, types))} differ")

    # ---------------- pools
    def _pool_attrs(self, n, shape, global_pool):
        c, h, w = shape
        if global_pool:
            return [h, w], [1, 1], [[0, 0], [0, 0]], True, 0
        if n.attrs.get("dilations") and any(int(d) != 1 for d in n.attrs["dilations"]):
            raise _unsupported(n, "dilated pooling")
        k = [int(v) for v in n.attrs["kernel_shape"]]
        strides, pads, _ = self._conv_attrs(n, shape, k)
        include = int(n.attrs.get("count_include_pad", 0))
        global_path = k == [h, w] and not any(p for side in pads for p in side)
        return k, strides, pads, global_path, include

    def _pool(self, n, q):
        xv, src = self._activation_dq(n, n.inputs[0])
        if len(src.shape) != 3:
            raise _unsupported(n, "pooling of a non-image tensor")
        scale, zp, dtype = self._claim(q)
        x_t, y_t = self._dq_type(xv), self._q_type(q)
        if x_t != y_t or xv.float_only:
            raise _unsupported(n, f"onnxruntime runs this {n.op} in float32 (input {x_t}, output {y_t}), "
                                  "which fxpsim does not reproduce")
        shift = src.dtype == np.int8 and x_t == np.uint8
        self._emit_pool(n, src, q.outputs[0], n.op == "GlobalAveragePool", scale, zp, dtype, shift)
        self._note(n.name, n, True)

    def _emit_pool(self, n, src, out_name, global_pool, scale, zp, dtype, shift=False):
        k, strides, pads, global_path, include = self._pool_attrs(n, src.shape, global_pool)
        c, h, w = src.shape
        oh, ow = self._out_hw(h, w, k, strides, pads)
        g = self._int_value(out_name, (c, oh, ow), dtype, scale, zp)
        self._add_node("qlinear_avg_pool", [src.g], [g], {"pool_size": k, "stride": strides, "padding": pads,
                                                           "count_include_pad": include, "global_path": global_path,
                                                           "u8_shift": bool(shift)}, name=n.name)

    # ---------------- Concat
    def _concat_axis(self, n, rank, axis):
        axis = int(axis)
        axis = axis + rank + 1 if axis < 0 else axis
        if axis == 0:
            raise _unsupported(n, "concatenation along the batch axis")
        a = axis - 1
        return [2, 0, 1][a] if rank == 3 else a

    def _concat(self, n, q):
        ins = [self._activation_dq(n, t) for t in n.inputs]
        scale, zp, dtype = self._claim(q)
        types = {self._dq_type(v) for v, _ in ins} | {self._q_type(q)}
        if any(v.float_only for v, _ in ins):
            types.add("float")
        shapes = [s.shape for _, s in ins]
        self._emit_concat(n, [s for _, s in ins], shapes, q.outputs[0], scale, zp, dtype, n.attrs.get("axis", 1))
        self._note(n.name, n, len(types) == 1, "" if len(types) == 1 else "operand types differ")

    def _emit_concat(self, n, srcs, shapes, out_name, scale, zp, dtype, axis):
        rank = len(shapes[0])
        ax = int(axis)
        ax = ax + rank + 1 if ax < 0 else ax
        if ax == 0 or any(len(s) != rank for s in shapes):
            raise _unsupported(n, "concatenation along the batch axis or of different ranks")
        out = list(shapes[0])
        out[ax - 1] = sum(s[ax - 1] for s in shapes)
        g = self._int_value(out_name, tuple(out), dtype, scale, zp)
        self._add_node("qlinear_concat", [s.g for s in srcs], [g], {"axis": self._concat_axis(n, rank, axis)},
                       name=n.name)
