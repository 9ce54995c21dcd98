"""The rewrites of onnxruntime's graph optimizer that decide the arithmetic of an imported ONNX model (a mixin of
the ONNX importer, :mod:`fxpsim.frontends.onnx.importer`): EliminateIdentity, DoubleQDQPairsRemover, the removal
of a Relu / Clip that a QuantizeLinear already clamps (ReluQuantFusion, ClipQuantFusion), and the choice of the
int8 Q -> DQ pairs it converts to uint8 (QDQS8ToU8Transformer)."""
from __future__ import annotations

import numpy as np

from .nodes import _F32_EPS


class OrtRewrites:
    """onnxruntime's rewrites on the parsed nodes (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    # ------------------------------------------------------------------ level-1 rewrites
    def _remove_node(self, node, replace_output_with):
        out = node.outputs[0]
        for n in self.nodes:
            n.inputs = [replace_output_with if t == out else t for t in n.inputs]
        self.nodes = [n for n in self.nodes if n is not node]

    def _rewrite(self):
        """Level 1 (EliminateIdentity, DoubleQDQPairsRemover), then the removal of a Relu / Clip feeding a
        QuantizeLinear whose range already clamps (observed in onnxruntime 1.32 after level 1: with
        ORT_ENABLE_BASIC the Relu / Clip are still there and back-to-back Q/DQ pairs around them are not
        merged)."""
        for n in list(self.nodes):                     # EliminateIdentity
            if n.op == "Identity" and n.domain == "" and n.outputs[0] not in self.outputs:
                self._remove_node(n, n.inputs[0])
        for n in list(self.nodes):                     # DoubleQDQPairsRemover
            if n in self.nodes:
                self._double_qdq(n)
        for n in list(self.nodes):                     # ReluQuantFusion / ClipQuantFusion
            if n.domain != "" or n.op not in ("Relu", "Clip") or n.outputs[0] in self.outputs:
                continue
            cons = self.consumers(n.outputs[0])
            if len(cons) != 1 or not self._is_q(cons[0][0]) or cons[0][0].domain != "":
                continue
            q = cons[0][0]
            if n.op == "Relu":
                z = self._q_zp_const(q)
                if z is not None and z[0] == int(np.iinfo(z[1]).min):
                    self._remove_node(n, n.inputs[0])
            elif 10 <= self.opset <= 18 and self._clip_quant_removable(n, q):
                self._remove_node(n, n.inputs[0])

    def _clip_bounds(self, clip):
        if self.opset < 11:
            return (float(np.float32(clip.attrs.get("min", -np.finfo(np.float32).max))),
                    float(np.float32(clip.attrs.get("max", np.finfo(np.float32).max))))
        bounds = []
        for i, default in ((1, -np.finfo(np.float32).max), (2, np.finfo(np.float32).max)):
            name = clip.inputs[i] if len(clip.inputs) > i else ""
            if not name:
                bounds.append(float(np.float32(default)))
                continue
            v = self._scalar_const(name)
            if v is None:
                return None
            bounds.append(float(np.float32(v.reshape(()))))
        return tuple(bounds)

    def _clip_quant_removable(self, clip, q) -> bool:
        bounds = self._clip_bounds(clip)
        if bounds is None or len(q.inputs) != 3:
            return False
        s, z = self.const(q.inputs[1]), self.const(q.inputs[2])
        if s is None or z is None or s.ndim != 0 or z.ndim != 0 or s.dtype != np.float32:
            return False
        info = np.iinfo(z.dtype)
        scale, zp = np.float32(s), int(z)
        lower = np.float32(scale * np.float32(int(info.min) - zp))
        upper = np.float32(scale * np.float32(int(info.max) - zp))
        lo, hi = np.float32(bounds[0]), np.float32(bounds[1])
        return not (_F32_EPS < np.float32(lo - lower) or _F32_EPS < np.float32(upper - hi))

    def _double_qdq(self, dq1):
        """Q1 -> DQ1 -> Q2 -> DQ2 (each pair with equal constant parameters): DQ1 and Q2 go; when the pairs'
        parameters differ, Q1 and DQ2 get the intersection of their ranges (onnxruntime's formulas)."""
        if not self._is_dq(dq1) or dq1.outputs[0] in self.outputs:
            return
        q1 = self.producer(dq1.inputs[0])
        cons = self.consumers(dq1.outputs[0])
        if q1 is None or not self._is_q(q1) or len(cons) != 1 or not self._is_q(cons[0][0]):
            return
        q2 = cons[0][0]
        if (len(self.consumers(q1.outputs[0])) != 1 or q1.outputs[0] in self.outputs
                or q2.outputs[0] in self.outputs):
            return
        c2 = self.consumers(q2.outputs[0])
        if len(c2) != 1 or not self._is_dq(c2[0][0]):
            return
        dq2 = c2[0][0]
        if not (self._pair_supported(q1, dq1) and self._pair_supported(q2, dq2)):
            return
        z1, t1 = self._q_zp_const(dq1)
        z2, t2 = self._q_zp_const(q2)
        if t1 != t2 or t1 not in (np.dtype(np.uint8), np.dtype(np.int8)):
            return
        s1, s2 = np.float32(self.const(dq1.inputs[1]).reshape(())), np.float32(self.const(q2.inputs[1]).reshape(()))
        same_names = dq1.inputs[1] == q2.inputs[1] and dq1.inputs[2] == q2.inputs[2]
        if not same_names and not (z1 == z2 and abs(float(s1) - float(s2)) < 1e-20):
            info = np.iinfo(t1)
            qmin, qmax = int(info.min), int(info.max)
            rmin1, rmax1 = np.float32(np.float32(qmin - z1) * s1), np.float32(np.float32(qmax - z1) * s1)
            rmin2, rmax2 = np.float32(np.float32(qmin - z2) * s2), np.float32(np.float32(qmax - z2) * s2)
            rmin, rmax = max(rmin1, rmin2), min(rmax1, rmax2)
            new_scale = np.float32(np.float32(rmax - rmin) / np.float32(qmax - qmin))
            v = float(np.float32(np.float32(qmin) - np.float32(rmin / new_scale)))
            new_zp = int(np.sign(v) * np.floor(abs(v) + 0.5))
            for node in (q1, dq2):
                sname, zname = f"{node.name}/DoubleQDQRemoved_scale", f"{node.name}/DoubleQDQRemoved_zp"
                self.consts[sname] = np.array(new_scale, np.float32)
                self.consts[zname] = np.array(new_zp).astype(t1)
                node.inputs = [node.inputs[0], sname, zname]
        dq2.inputs = [q1.outputs[0]] + dq2.inputs[1:]
        self.nodes = [n for n in self.nodes if n is not dq1 and n is not q2]

    def _pair_supported(self, q, dq) -> bool:
        """IsQDQPairSupported: constant scalar scale and zero point, equal in Q and DQ."""
        if len(q.inputs) < 3 or len(dq.inputs) < 3:
            return False
        sq, sd = self._scalar_const(q.inputs[1]), self._scalar_const(dq.inputs[1])
        zq, zd = self._q_zp_const(q), self._q_zp_const(dq)
        if sq is None or sd is None or zq is None or zd is None:
            return False
        return (zq == zd and np.float32(sq.reshape(())) == np.float32(sd.reshape(()))
                and sq.dtype == sd.dtype)

    # ------------------------------------------------------------------ int8 -> uint8 (QDQS8ToU8)
    def _edges_after_unique_dq(self, tensor) -> int:
        count = 0
        for n, _ in self.consumers(tensor):
            if self._is_dq(n):
                e = len(self.consumers(n.outputs[0]))
                out = n.outputs[0] in self.outputs
                count += 1 if e == 0 else (e + 1 if out else e)
            else:
                count += 1
        return count

    def _mark_converted(self):
        self.converted = set()
        for q in self.nodes:
            if not self._is_q(q) or q.outputs[0] in self.outputs:
                continue
            z = self._q_zp_const(q)
            if z is None or z[1] != np.dtype(np.int8) or len(q.inputs) != 3:
                continue
            if self._edges_after_unique_dq(q.outputs[0]) != 1:
                continue
            (dq, _), = self.consumers(q.outputs[0])
            if not self._is_dq(dq) or len(dq.inputs) != 3:
                continue
            zd = self._q_zp_const(dq)
            if zd is None or zd[1] != np.dtype(np.int8) or zd[0] != z[0]:
                continue
            self.converted.add(q.outputs[0])
