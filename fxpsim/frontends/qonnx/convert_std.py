"""The standard ONNX ops of :func:`fxpsim.import_qonnx` (those Brevitas, QKeras and FINN exports put between
the quantizers), onto the QONNX graph ops with exact scales."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...datapath.qonnx.scales import ExactScale, common
from .convert import V

__all__ = ["StandardConversions"]


def _objs(a) -> np.ndarray:
    return np.asarray(a, dtype=object)


class StandardConversions:
    """Mixin of the importer: MAC ops, elementwise arithmetic, pooling, data movement."""

    # ------------------------------------------------------------------ MACs
    def _weights(self, n, i: int) -> tuple[np.ndarray, ExactScale]:
        v = self.val(n, i)
        if v.kind != "const":
            raise self.refuse(n, f"input {i} (the weights) must be constant; a product of two activations is "
                                 "not a supported MAC")
        codes, s = self.exact_const(v)
        self._wrange = v.qrange or (min(int(codes.min()), 0), max(int(codes.max()), 0))
        return codes, ExactScale(np.broadcast_to(s.m, codes.shape) if s.m.size > 1 else s.m.reshape((1,) * codes.ndim),
                                 s.e, s.d)

    def _mac_out(self, n, x: V, w_sum_pos, w_sum_neg, shape, scale, op, w, wscale, **attrs):
        amin, amax = x.lo - x.zp, x.hi - x.zp
        hi = max(int(p) * amax + int(q) * amin for p, q in zip(w_sum_pos, w_sum_neg))
        lo = min(int(p) * amin + int(q) * amax for p, q in zip(w_sum_pos, w_sum_neg))
        hi, lo = max(hi, 0), min(lo, 0)
        out = self.new_act(n.outputs[0], shape, lo, hi, scale, 0)
        wg = self.new_const(f"{n.name}/weights", w)
        self.scales[wg] = {**wscale.to_json(), "zp": 0}
        self.add_node(n, op, [x.g, wg], [out.g], x_zp=x.zp, x_lo=amin, x_hi=amax, w_lo=self._wrange[0],
                      w_hi=self._wrange[1], **attrs)
        return out

    def _matmul(self, n, x: V, w: np.ndarray, ws: ExactScale, out_name=None):
        if len(x.shape) < 1 or w.ndim != 2 or w.shape[0] != x.shape[-1]:
            raise self.refuse(n, f"MatMul of {x.shape} by weights {w.shape} (2-D weights [K, M] only)")
        if not x.scale.is_uniform_along([len(x.shape) - 1]):
            raise self.refuse(n, "the activation's scale varies along the reduction axis")
        if not ws.is_uniform_along([0]):
            raise self.refuse(n, "the weights' scale varies along the reduction axis")
        wcol = ExactScale(np.broadcast_to(ws.m, w.shape)[0].reshape((1,) * (len(x.shape) - 1) + (w.shape[1],)),
                          ws.e, ws.d)
        scale = x.scale * wcol
        pos = np.where(w > 0, w, 0).sum(axis=0)
        neg = np.where(w < 0, w, 0).sum(axis=0)
        shape = tuple(x.shape[:-1]) + (w.shape[1],)
        return self._mac_out(n, x, pos, neg, shape, scale, "qonnx_matmul", w.astype(np.int64),
                             ExactScale(np.broadcast_to(ws.m, w.shape)[:1], ws.e, ws.d))

    def _c_MatMul(self, n):
        self.attrs(n, {})
        x = self.act(n, 0)
        w, ws = self._weights(n, 1)
        self.set(n, self._matmul(n, x, w, ws))

    def _c_Gemm(self, n):
        at = self.attrs(n, {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})
        if at["transA"] or float(at["alpha"]) != 1.0 or float(at["beta"]) != 1.0:
            raise self.refuse(n, "Gemm with transA, alpha != 1 or beta != 1 is not supported")
        x = self.act(n, 0)
        w, ws = self._weights(n, 1)
        if at["transB"]:
            w, ws = w.T, ExactScale(ws.m.T, ws.e, ws.d)
        y = self._matmul(n, x, w, ws)
        if len(n.inputs) > 2 and n.inputs[2]:
            y = self._add(n, y, self.val(n, 2), 1)
        self.set(n, y)

    def _c_Conv(self, n):
        at = self.attrs(n, {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
                            "pads": None, "strides": None})
        x = self.act(n, 0)
        w, ws = self._weights(n, 1)
        if len(x.shape) != 3 or w.ndim != 4:
            raise self.refuse(n, "only 2-D convolutions (NCHW input, OIHW weights) are supported")
        if at["auto_pad"] not in ("NOTSET", "VALID"):
            raise self.refuse(n, f"auto_pad={at['auto_pad']!r} is not supported (NOTSET, VALID)")
        pads = list(at["pads"] or [0, 0, 0, 0])
        strides, dils, group = list(at["strides"] or [1, 1]), list(at["dilations"] or [1, 1]), int(at["group"])
        if at["kernel_shape"] is not None and list(at["kernel_shape"]) != list(w.shape[2:]):
            raise self.refuse(n, "kernel_shape disagrees with the weights")
        c, h, wd = x.shape
        if w.shape[1] * group != c or w.shape[0] % group:
            raise self.refuse(n, f"weights {w.shape} with group={group} on {c} channels")
        if not x.scale.is_uniform_along([0, 1, 2]):
            raise self.refuse(n, "a convolution input needs one scale (per tensor)")
        if not ws.is_uniform_along([1, 2, 3]):
            raise self.refuse(n, "the weights' scale varies within an output channel")
        oh = (h + pads[0] + pads[2] - dils[0] * (w.shape[2] - 1) - 1) // strides[0] + 1
        ow = (wd + pads[1] + pads[3] - dils[1] * (w.shape[3] - 1) - 1) // strides[1] + 1
        per_o = np.broadcast_to(ws.m, w.shape)[:, 0, 0, 0]
        scale = x.scale * ExactScale(per_o.reshape(-1, 1, 1), ws.e, ws.d)
        flat = w.reshape(w.shape[0], -1)
        pos, neg = np.where(flat > 0, flat, 0).sum(axis=1), np.where(flat < 0, flat, 0).sum(axis=1)
        y = self._mac_out(n, x, pos, neg, (w.shape[0], oh, ow), scale, "qonnx_conv", w.astype(np.int64),
                          ExactScale(per_o.reshape(-1, 1, 1, 1), ws.e, ws.d),
                          pads=pads, strides=strides, dilations=dils, group=group)
        if len(n.inputs) > 2 and n.inputs[2]:
            b = self.val(n, 2)
            bc = V("const", raw=np.asarray(b.raw).reshape(-1, 1, 1), shape=(w.shape[0], 1, 1))
            if b.codes is not None:
                bc.codes, bc.scale = np.asarray(b.codes).reshape(-1, 1, 1), ExactScale(
                    np.broadcast_to(b.scale.m, np.shape(b.codes)).reshape(-1, 1, 1), b.scale.e, b.scale.d)
            y = self._add(n, y, bc, 1)
        self.set(n, y)

    # ------------------------------------------------------------------ elementwise
    def _as_term(self, n, v: V, rank: int):
        """(graph tensor, zp, scale, lo, hi) of an operand; a constant becomes a graph constant."""
        if v.kind == "act":
            return v.g, v.zp, v.scale, v.lo - v.zp, v.hi - v.zp, v.shape
        if v.kind == "float":
            raise self.refuse(n, "reads the float input directly (no float fallback)")
        codes, s = self.exact_const(v)
        codes = self.per_sample(n, codes, rank)
        sm = self.per_sample(n, np.broadcast_to(s.m, np.shape(v.codes)), rank) if s.m.size > 1 else \
            s.m.reshape((1,) * rank)
        scale = ExactScale(sm, s.e, s.d)
        g = self.new_const(f"{n.name}/const", codes.astype(np.int64), scale)
        return g, 0, scale, int(codes.min()), int(codes.max()), codes.shape

    def _add(self, n, a: V, b: V, sign: int) -> V:
        if a.kind != "act":
            if b.kind != "act" or sign < 0:
                raise self.refuse(n, "needs an activation as its first operand (constant folding is not supported)")
            a, b = b, a
        rank = len(a.shape)
        ga, za, sa, alo, ahi, sha = self._as_term(n, a, rank)
        gb, zb, sb, blo, bhi, shb = self._as_term(n, b, rank)
        s, ka, kb = common(sa, sb)
        kb = kb * sign
        lo1, hi1 = self._rng(alo, ahi, ka)
        lo2, hi2 = self._rng(blo, bhi, kb)
        shape = tuple(np.broadcast_shapes(tuple(sha), tuple(shb)))
        out = self.new_act(n.outputs[0], shape, lo1 + lo2, hi1 + hi2, s, 0)
        self.add_node(n, "qonnx_add", [ga, gb], [out.g], a_zp=za, b_zp=zb, ka=ka.tolist(), kb=kb.tolist(),
                      subtract=sign < 0)
        return out

    @staticmethod
    def _rng(lo, hi, k):
        ks = [int(v) for v in np.asarray(k, dtype=object).ravel()]
        c = [x * y for x in (lo, hi) for y in (min(ks), max(ks))]
        return min(c), max(c)

    def _c_Add(self, n):
        self.attrs(n, {})
        self.set(n, self._add(n, self.val(n, 0), self.val(n, 1), 1))

    def _c_Sub(self, n):
        self.attrs(n, {})
        self.set(n, self._add(n, self.val(n, 0), self.val(n, 1), -1))

    def _mul(self, n, a: V, b: V) -> V:
        if a.kind != "act":
            a, b = b, a
        if a.kind != "act":
            raise self.refuse(n, "needs an activation operand (constant folding is not supported)")
        rank = len(a.shape)
        if b.kind == "const":
            codes, s = self.exact_const(b)
            c = self.per_sample(n, codes, rank)
            shape = tuple(np.broadcast_shapes(a.shape, c.shape))
            if shape == tuple(a.shape) and all(int(v) > 0 for v in c.ravel()):
                sm = self.per_sample(n, np.broadcast_to(s.m, codes.shape), rank)
                scale = a.scale * ExactScale(_objs(c) * sm, s.e, s.d)
                out = self.new_act(n.outputs[0], a.shape, a.lo, a.hi, scale, a.zp)
                self.add_node(n, "qonnx_rescale", [a.g], [out.g])
                return out
        gb, zb, sb, blo, bhi, shb = self._as_term(n, b, rank)
        lo, hi = self._rng(a.lo - a.zp, a.hi - a.zp, [blo, bhi])
        out = self.new_act(n.outputs[0], tuple(np.broadcast_shapes(a.shape, tuple(shb))), lo, hi, a.scale * sb, 0)
        self.add_node(n, "qonnx_mul", [a.g, gb], [out.g], a_zp=a.zp, b_zp=zb)
        return out

    def _c_Mul(self, n):
        self.attrs(n, {})
        self.set(n, self._mul(n, self.val(n, 0), self.val(n, 1)))

    def _c_Div(self, n):
        self.attrs(n, {})
        a = self.act(n, 0)
        c = np.asarray(self.const(n, 1, "divisor"), np.float64)
        if c.size != 1 or not c.ravel()[0] > 0:
            raise self.refuse(n, "Div by a positive scalar constant only")
        cs = ExactScale.from_float(c.reshape(()))
        scale = ExactScale(a.scale.m, a.scale.e - cs.e, a.scale.d).divided(int(cs.m.ravel()[0]))
        out = self.new_act(n.outputs[0], a.shape, a.lo, a.hi, scale, a.zp)
        self.add_node(n, "qonnx_rescale", [a.g], [out.g])
        self.set(n, out)

    def _c_Relu(self, n):
        self.attrs(n, {})
        v = self.val(n, 0)
        if v.kind == "float":            # the model's input: folds into the Quant after it (Conversions._c_Quant)
            self.set(n, dataclasses.replace(v, relu=True))
            return
        a = self.act(n, 0)
        out = self.new_act(n.outputs[0], a.shape, max(a.lo - a.zp, 0), max(a.hi - a.zp, 0), a.scale, 0)
        self.add_node(n, "qonnx_relu", [a.g], [out.g], x_zp=a.zp)
        self.set(n, out)

    def _c_Sign(self, n):
        self.attrs(n, {})
        a = self.act(n, 0)
        out = self.new_act(n.outputs[0], a.shape, -1, 1, ExactScale.one(len(a.shape)), 0)
        self.add_node(n, "qonnx_sign", [a.g], [out.g], x_zp=a.zp)
        self.set(n, out)

    def _c_BatchNormalization(self, n):
        at = self.attrs(n, {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0})
        if at["training_mode"]:
            raise self.refuse(n, "training_mode=1 is not supported")
        a = self.act(n, 0)
        gamma, beta, mean, var = (np.asarray(self.const(n, i, w), np.float32)
                                  for i, w in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")))
        eps = float(np.float32(at["epsilon"]))
        mul = gamma / np.sqrt(eps + var)                   # qonnx BatchNormToAffine, in float32
        add = beta - (mul * mean)
        shape = (-1,) + (1,) * (len(a.shape) - 1)
        mid = n.outputs[0] + "/bn_mul"
        node_mul = type(n)(n.op, n.domain, n.name + "/mul", [], [mid])
        y = self._mul(node_mul, a, V("const", raw=mul.reshape(shape), shape=mul.reshape(shape).shape))
        node_add = type(n)(n.op, n.domain, n.name + "/add", [], [n.outputs[0]])
        self.set(n, self._add(node_add, y, V("const", raw=add.reshape(shape), shape=add.reshape(shape).shape), 1))

    # ------------------------------------------------------------------ pooling
    def _pool_attrs(self, n, allowed):
        at = self.attrs(n, allowed)
        if at.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise self.refuse(n, f"auto_pad={at['auto_pad']!r} is not supported")
        if at.get("ceil_mode", 0):
            raise self.refuse(n, "ceil_mode=1 is not supported")
        if any(int(d) != 1 for d in (at.get("dilations") or [1, 1])):
            raise self.refuse(n, "dilated pooling is not supported")
        if at.get("storage_order", 0):
            raise self.refuse(n, "storage_order=1 is not supported")
        a = self.act(n, 0)
        if len(a.shape) != 3:
            raise self.refuse(n, "only 2-D pooling (NCHW) is supported")
        if not a.scale.is_uniform_along([1, 2]):
            raise self.refuse(n, "the input's scale varies along H or W")
        k = [int(v) for v in at["kernel_shape"]]
        s = [int(v) for v in (at.get("strides") or [1, 1])]
        p = [int(v) for v in (at.get("pads") or [0, 0, 0, 0])]
        c, h, w = a.shape
        oh, ow = (h + p[0] + p[2] - k[0]) // s[0] + 1, (w + p[1] + p[3] - k[1]) // s[1] + 1
        return a, at, k, s, p, (c, oh, ow)

    def _c_MaxPool(self, n):
        if len(n.outputs) > 1 and n.outputs[1]:
            raise self.refuse(n, "the Indices output is not supported")
        a, _, k, s, p, shape = self._pool_attrs(n, {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                                                    "kernel_shape": None, "pads": None, "storage_order": 0,
                                                    "strides": None})
        out = self.new_act(n.outputs[0], shape, a.lo, a.hi, a.scale, a.zp)
        self.add_node(n, "qonnx_maxpool", [a.g], [out.g], kernel=k, strides=s, pads=p)
        self.set(n, out)

    def _avg(self, n, a, k, s, p, shape):
        kk = k[0] * k[1]
        lo, hi = min(a.lo - a.zp, 0) * kk, max(a.hi - a.zp, 0) * kk
        out = self.new_act(n.outputs[0], shape, lo, hi, a.scale.divided(kk), 0)
        self.add_node(n, "qonnx_avgpool", [a.g], [out.g], kernel=k, strides=s, pads=p, x_zp=a.zp)
        self.set(n, out)

    def _c_AveragePool(self, n):
        a, at, k, s, p, shape = self._pool_attrs(n, {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
                                                     "dilations": None, "kernel_shape": None, "pads": None,
                                                     "strides": None})
        if any(p) and not at["count_include_pad"]:
            raise self.refuse(n, "padded AveragePool with count_include_pad=0 (a varying divisor) is not supported")
        self._avg(n, a, k, s, p, shape)

    def _c_GlobalAveragePool(self, n):
        self.attrs(n, {})
        a = self.act(n, 0)
        if len(a.shape) != 3 or not a.scale.is_uniform_along([1, 2]):
            raise self.refuse(n, "GlobalAveragePool on NCHW with one scale per channel only")
        c, h, w = a.shape
        self._avg(n, a, [h, w], [1, 1], [0, 0, 0, 0], (c, 1, 1))

    # ------------------------------------------------------------------ data movement
    def _move(self, n, fn_full, per_sample_shape, **attrs):
        v = self.val(n, 0)
        if v.kind == "const":
            out = V("const", raw=fn_full(np.asarray(v.raw)), qrange=v.qrange)
            out.shape = out.raw.shape
            if v.codes is not None:
                out.codes = fn_full(np.asarray(v.codes))
                m = fn_full(np.broadcast_to(v.scale.m, np.shape(v.codes)))
                out.scale = ExactScale(np.ascontiguousarray(m), v.scale.e, v.scale.d)
            self.set(n, out)
            return
        a = self.act(n, 0)
        full_m = np.broadcast_to(a.scale.m, a.shape)[None]
        m = fn_full(full_m)[0]
        scale = ExactScale(np.ascontiguousarray(m), a.scale.e, a.scale.d)
        out = self.new_act(n.outputs[0], per_sample_shape(a.shape), a.lo, a.hi, scale, a.zp)
        self.add_node(n, "qonnx_move", [a.g], [out.g], **attrs)
        self.set(n, out)

    def _c_Identity(self, n):
        self.attrs(n, {})
        self.set(n, self.val(n, 0))

    def _c_Transpose(self, n):
        at = self.attrs(n, {"perm": None})
        v = self.val(n, 0)
        rank = len(v.shape) + (0 if v.kind == "const" else 1)
        perm = list(at["perm"]) if at["perm"] is not None else list(range(rank))[::-1]
        if v.kind == "const":
            self._move(n, lambda t: np.transpose(t, perm), None)
            return
        if perm[0] != 0:
            raise self.refuse(n, f"perm {perm} moves the batch axis")
        ps = [p - 1 for p in perm[1:]]
        self._move(n, lambda t: np.transpose(t, perm), lambda s: tuple(s[p] for p in ps), kind="transpose", perm=ps)

    def _reshape_to(self, n, target_per_sample):
        self._move(n, lambda t: t.reshape((t.shape[0],) + tuple(target_per_sample)) if t.ndim == len(self.val(n, 0).shape) + 1
                   else t.reshape(target_per_sample), lambda s: tuple(target_per_sample), kind="reshape")

    def _c_Flatten(self, n):
        at = self.attrs(n, {"axis": 1})
        v = self.val(n, 0)
        if v.kind == "const":
            ax = int(at["axis"]) % max(v.raw.ndim, 1)
            shp = (int(np.prod(v.raw.shape[:ax])), -1)
            self._move(n, lambda t: t.reshape(shp), None)
            return
        if int(at["axis"]) != 1:
            raise self.refuse(n, "Flatten with axis != 1 on an activation is not supported")
        self._reshape_to(n, (int(np.prod(v.shape)),))

    def _c_Reshape(self, n):
        at = self.attrs(n, {"allowzero": 0})
        target = [int(t) for t in self.const(n, 1, "shape").ravel()]
        if at["allowzero"] and 0 in target:
            raise self.refuse(n, "allowzero=1 with a zero in the shape is not supported")
        v = self.val(n, 0)
        if v.kind == "const":
            full = [v.raw.shape[i] if t == 0 else t for i, t in enumerate(target)]
            self._move(n, lambda t: t.reshape(full), None)
            return
        size = int(np.prod(v.shape))
        dims = [v.shape[i - 1] if t == 0 and i > 0 else t for i, t in enumerate(target)]
        rest = dims[1:]
        if rest.count(-1) > 1 or (dims[0] not in (-1, 0, 1) and dims[0] is not None and -1 not in rest and False):
            raise self.refuse(n, f"shape {target}")
        if -1 in rest:
            known = int(np.prod([d for d in rest if d != -1]))
            rest[rest.index(-1)] = size // known if known else 0
        if int(np.prod(rest)) != size:
            raise self.refuse(n, f"shape {target} does not keep the batch axis in front (per sample "
                                 f"{v.shape} -> {rest})")
        self._reshape_to(n, tuple(rest))
