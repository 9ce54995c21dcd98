"""Read a quantized ONNX model into an :class:`~fxpsim.graph.IntegerGraph` that computes, bit for bit, what
onnxruntime's CPU execution provider computes with its default session options.

onnxruntime does not run the model as saved: its graph optimizer first rewrites it, and the arithmetic follows
the rewritten graph. :func:`import_onnx` reproduces the rewrites that decide the arithmetic of the supported
ops (onnxruntime 1.32, x86-64):

* back-to-back Q -> DQ -> Q -> DQ pairs are merged with recomputed parameters (DoubleQDQPairsRemover), then
  a Relu / Clip feeding a QuantizeLinear whose range already clamps is removed (ReluQuantFusion,
  ClipQuantFusion; onnxruntime 1.32 removes them only after level 1, so a Relu between two Q/DQ pairs
  keeps the pairs apart);
* a QuantizeLinear -> DequantizeLinear pair of int8 whose Q has a single consumer becomes uint8 with zero
  point + 128 (QDQS8ToU8Transformer; every DequantizeLinear has one consumer after EnsureUniqueDQForNodeUnit);
* DequantizeLinear -> op -> QuantizeLinear groups are fused into QLinearConv / QLinearMatMul / QGemm /
  QLinearAdd / QLinearMul / QLinearAveragePool / QLinearGlobalAveragePool / QLinearConcat, and the Q/DQ
  around MaxPool / Reshape / Flatten are dropped, under the selectors' rules (all operands from
  DequantizeLinear, one QuantizeLinear consumer, matching types; on x86 no int8-activation Conv / MatMul);
* a group that is not fused runs as DequantizeLinear, the float32 op, QuantizeLinear: fxpsim marks its node
  ``ort_kernel="float"`` and reproduces MLAS's float32 kernels for Conv, MatMul, Gemm, Add, Mul, Concat,
  MaxPool, Reshape, Flatten, Relu and Clip (an unfused AveragePool / GlobalAveragePool is refused); a
  Reshape / Flatten / MaxPool on dequantized values with no QuantizeLinear after it runs on the codes and
  leaves its consumer unfused, as in onnxruntime.

Not reproduced (refused with a ValueError): float pooling, a MatMul / Gemm whose output is not quantized
(MatMulIntegerToFloat, QGemm with float output), per-channel activations inside the graph, QDQ
propagation through data-movement ops, int16 / 4-bit / float8 types, ops outside :data:`SUPPORTED_OPS`.
Float32 kernels depend on the CPU (FMA, AVX2: as on any x86-64 from 2013 on) and, for MatMul / Gemm with
more columns than rows and large K, on onnxruntime's thread count (``FXPSIM_ORT_THREADS``, default the
usable cores); ``IntegerGraph.run`` splits batches above 256 samples, which onnxruntime does not.

The uint8 x int8 integer kernels depend on the CPU too. With VNNI (AVX512-VNNI, AVX-VNNI) and on ARM they
accumulate exactly; on x86-64 with AVX2 and no VNNI, MLAS sums the raw products of adjacent reduction
elements in int16 **with saturation** (``vpmaddubsw``):

.. math::

    \\mathrm{acc} = \\sum_j \\mathrm{sat}_{16}(a_{2j} w_{2j} + a_{2j+1} w_{2j+1})
                 - z_a \\sum_k w_k - z_w \\sum_k a_k + K z_a z_w \\pmod{2^{32}}

on the stored codes (activations a uint8, or int8 + 128 after onnxruntime's int8 -> uint8 rewrite; weights w
int8), pairs in index order along K (a convolution: ``(kh, kw, c)`` per group). It hits QLinearConv (except
depthwise), QLinearMatMul, QGemm, MatMulInteger and the QDQ groups fused into them once a pair exceeds
32767 (e.g. 255 * 127 * 2); ConvInteger, depthwise QLinearConv, uint8 x uint8 and int8 x int8 are exact
everywhere. ``import_onnx(path, cpu=...)`` picks the flavour: ``"exact"`` (the default: the same graph on
every host, and what the stored fixtures record), ``"avx2"``, or ``"host"`` (:func:`onnxruntime_cpu`
detects it). The flavour is recorded in ``meta["onnxruntime"]["cpu"]`` and on each affected node
(``u8s8_pairs``). Verified live with onnxruntime 1.32 on an AVX2 CPU without VNNI (saturating) and on one
with AVX512-VNNI (exact).

The model's own layout and types are kept at the boundary: ``graph.run(x)`` takes and returns what
``InferenceSession.run`` takes and returns (NCHW, float32 for a QDQ model with float inputs). Inside, images
are NHWC (weights OIHW -> OHWI), with ``transpose`` nodes at the inputs/outputs and before a Flatten/Reshape
of an image. The graph's default datapath (``meta["datapath"]``) is onnxruntime's: a 32-bit wrapping
accumulator, the bias added after the sum, ``requantization="native"``.
"""
from __future__ import annotations

import os

import numpy as np

from ...datapath.onnxruntime import x86_pairs as _x86
from . import ops as _onnx_graph_ops  # noqa: F401  (registers the ONNX graph ops)
from ...graph.ir import IntegerGraph, Node, TensorSpec
from .nodes import _F32_EPS, _FLOAT_TYPES, _MS, SUPPORTED_OPS, _ONode, _require_onnx, _unsupported, _Val
from .qdq import QDQConversions
from .qoperator import QOperatorConversions

__all__ = ["import_onnx", "SUPPORTED_OPS", "ONNXRUNTIME_DATAPATH", "ONNXRUNTIME_CPUS", "onnxruntime_cpu"]

#: The datapath an imported graph records: onnxruntime's CPU kernels.
ONNXRUNTIME_DATAPATH = {"name": "onnxruntime-cpu", "accumulator_bits": 32, "accumulator_overflow": "wrap",
                        "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
                        "requantization": "native", "rounding": "half_even", "activation_clamp": True}

#: The ``cpu`` flavours of :func:`import_onnx`, with the ``u8s8_pairs`` their uint8 x int8 MAC nodes get.
ONNXRUNTIME_CPUS = {"exact": "exact", "avx2": "saturate16"}


def onnxruntime_cpu(flags=None, machine=None) -> str:
    """The flavour of onnxruntime's uint8 x int8 kernels on this host (or on a CPU with the given
    ``/proc/cpuinfo`` ``flags`` and ``platform.machine()``): ``"avx2"`` on x86-64 with AVX2 and neither
    AVX512-VNNI nor AVX-VNNI (int16-saturating pair sums), ``"exact"`` elsewhere (VNNI, ARM, other CPUs).

    Verified live: AVX2 without VNNI (AMD EPYC, onnxruntime 1.32) saturates, AVX512-VNNI is exact. Inferred
    from MLAS's kernel dispatch, not measured: AVX-512BW without VNNI (Skylake-SP) also runs ``vpmaddubsw``
    kernels and saturates (it has AVX2, so it is reported as ``"avx2"``); AVX-VNNI alone is exact. See
    :func:`fxpsim.datapath.onnxruntime.x86_pairs.host_u8s8_pairs`."""
    pairs = _x86.host_u8s8_pairs(flags, machine)
    return next(cpu for cpu, p in ONNXRUNTIME_CPUS.items() if p == pairs)


class _Importer(QDQConversions, QOperatorConversions):
    """Reads one ONNX model: onnxruntime's rewrites, then every node into the graph being built (the node
    conversions are in :mod:`fxpsim.frontends.onnx.qdq` and :mod:`fxpsim.frontends.onnx.qoperator`)."""

    def __init__(self, model, path: str, cpu: str = "exact"):
        onnx = _require_onnx()
        self.cpu = cpu
        from onnx import helper, numpy_helper
        self.onnx, self.helper, self.nh = onnx, helper, numpy_helper
        self.path = path
        g = model.graph
        self.opset = 0
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        if not self.opset:
            raise ValueError(f"{path}: the model imports no default ONNX opset")
        self.consts: dict = {}
        for init in g.initializer:
            try:
                self.consts[init.name] = numpy_helper.to_array(init)
            except Exception as exc:  # noqa: BLE001 (protobuf / onnx errors on damaged tensors)
                raise ValueError(f"{path}: initializer {init.name!r} cannot be read ({exc})") from None
        self.types: dict = {}
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            tt = vi.type.tensor_type
            if tt.elem_type:
                self.types[vi.name] = (tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else None
                                                           for d in tt.shape.dim) if tt.HasField("shape") else None)
        self.inputs = [i.name for i in g.input if i.name not in self.consts]
        self.outputs = [o.name for o in g.output]
        nodes = []
        for i, n in enumerate(g.node):
            attrs = {}
            for a in n.attribute:
                v = helper.get_attribute_value(a)
                if isinstance(v, bytes):
                    v = v.decode("utf-8", "replace")
                attrs[a.name] = v
            nodes.append(_ONode(n.op_type, "" if n.domain == "ai.onnx" else n.domain,
                                n.name or f"{n.op_type}_{i}", list(n.input), list(n.output), attrs))
        if not nodes:
            raise ValueError(f"{path}: the ONNX graph has no nodes (an empty or damaged model)")
        names = {}
        for n in nodes:
            if n.name in names:
                n.name = f"{n.name}_{len(names)}"
            names[n.name] = n
        self.nodes = nodes
        self._fold_constants()
        self.nodes = self._toposort(self.nodes)
        # building state
        self.env: dict[str, _Val] = {}
        self.specs: dict = {}         # graph tensor -> dict(bits, signed, shape, scale, zp, axis, data, nhwc)
        self.gnodes: list = []
        self.claimed: set = set()     # Q nodes fused into their producer
        self.float_nodes: list = []
        self.fused: dict = {}
        self.aliases: dict = {}

    # ------------------------------------------------------------------ graph queries
    def _fold_constants(self):
        keep = []
        for n in self.nodes:
            if n.op == "Constant" and n.domain == "":
                if "value" not in n.attrs:
                    raise _unsupported(n, "a Constant without a 'value' tensor")
                self.consts[n.outputs[0]] = self.nh.to_array(n.attrs["value"])
            else:
                keep.append(n)
        self.nodes = keep

    def _toposort(self, nodes):
        produced = {t for n in nodes for t in n.outputs if t}
        ready = set(self.inputs) | set(self.consts) | {""}
        order, pending = [], list(nodes)
        while pending:
            progressed = False
            rest = []
            for n in pending:
                if all(t in ready for t in n.inputs):
                    order.append(n)
                    ready.update(n.outputs)
                    progressed = True
                else:
                    rest.append(n)
            pending = rest
            if not progressed:
                missing = sorted({t for n in pending for t in n.inputs if t not in ready and t not in produced})
                if missing:
                    raise ValueError(f"{self.path}: node {pending[0].name!r} reads {missing[:3]}, which no node, "
                                     "input or initializer defines (a truncated or damaged model?)")
                raise ValueError(f"{self.path}: the ONNX graph has a cycle (nodes {[n.name for n in pending[:3]]})")
        return order

    def consumers(self, tensor):
        return [(n, i) for n in self.nodes for i, t in enumerate(n.inputs) if t == tensor]

    def producer(self, tensor):
        for n in self.nodes:
            if tensor in n.outputs:
                return n
        return None

    def const(self, name):
        return self.consts.get(name) if name else None

    def _is_q(self, n):
        return n.op == "QuantizeLinear" and n.domain in ("", _MS)

    def _is_dq(self, n):
        return n.op == "DequantizeLinear" and n.domain in ("", _MS)

    def _scalar_const(self, name):
        v = self.const(name)
        return None if v is None or v.size != 1 else v

    def _q_zp_const(self, q):
        """(zp value, dtype) of a Q/DQ whose zero point is a constant scalar; None otherwise."""
        if len(q.inputs) < 3 or not q.inputs[2]:
            return None
        z = self.const(q.inputs[2])
        if z is None or z.size != 1:
            return None
        return int(z.reshape(())), z.dtype

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

    # ------------------------------------------------------------------ graph tensors
    def _new_tensor(self, name, bits, signed, shape, scale=None, zp=None, axis=None, data=None):
        base, i = name, 1
        while name in self.specs:
            name = f"{base}:{i}"
            i += 1
        self.specs[name] = dict(bits=bits, signed=signed, shape=tuple(int(d) for d in shape), scale=scale,
                                zp=zp, axis=axis, data=data)
        return name

    def _gname(self, onnx_name, nhwc: bool):
        """Graph name of an activation: the ONNX name, or ``name:nhwc`` for an image that is also a graph
        output (whose ONNX-named tensor is the NCHW copy)."""
        return f"{onnx_name}:nhwc" if (nhwc and onnx_name in self.outputs) else onnx_name

    @staticmethod
    def _gshape(shape):
        return (shape[1], shape[2], shape[0]) if len(shape) == 3 else tuple(shape)

    def _int_spec_args(self, dtype):
        dt = np.dtype(dtype)
        return dt.itemsize * 8, dt.kind == "i"

    def _add_node(self, op, inputs, outputs, attrs=None, name=None):
        base = name or f"{op}_{len(self.gnodes)}"
        used = {n.name for n in self.gnodes}
        nm, i = base, 1
        while nm in used:
            nm = f"{base}:{i}"
            i += 1
        self.gnodes.append(Node(nm, op, inputs, outputs, attrs or {}))
        return nm

    def _int_value(self, onnx_name, shape, dtype, scale, zp):
        """Declare an integer activation: graph tensor with the given quantization."""
        bits, signed = self._int_spec_args(dtype)
        nhwc = len(shape) == 3
        g = self._new_tensor(self._gname(onnx_name, nhwc), bits, signed, self._gshape(shape),
                             None if scale is None else float(np.float32(scale)), None if zp is None else int(zp))
        self.env[onnx_name] = _Val("int", g=g, shape=tuple(shape), dtype=np.dtype(dtype))
        return g

    def _params(self, gname):
        s = self.specs[gname]
        return s["scale"], s["zp"]

    def _check_params(self, node, onnx_name, gname, scale, zp) -> str:
        """The graph tensor holding ``gname``'s codes read with (scale, zp): ``gname`` itself when its
        quantization is those parameters (or still unknown: then it gets them), else an
        ``onnx_reinterpret`` alias (a tensor that two consumers dequantize differently)."""
        spec = self.specs[gname]
        scale = float(np.float32(np.asarray(scale).reshape(-1)[0]))
        zp = int(np.asarray(zp).reshape(-1)[0]) if zp is not None else 0
        if spec["scale"] is None:
            spec["scale"], spec["zp"] = scale, zp
            return gname
        if np.ndim(spec["scale"]) == 0 and spec["scale"] == scale and spec["zp"] == zp:
            return gname
        if np.ndim(spec["scale"]) != 0:
            raise _unsupported(node, f"reading the per-channel quantized tensor {onnx_name!r} per tensor")
        key = (gname, scale, zp)
        alias = self.aliases.get(key)
        if alias is None:
            alias = self._new_tensor(f"{gname}@{node.name}", spec["bits"], spec["signed"], spec["shape"], scale, zp)
            self._add_node("onnx_reinterpret", [gname], [alias], name=f"{node.name}/reinterpret_{onnx_name}")
            self.aliases[key] = alias
        return alias

    def _const_tensor(self, name, data, scale=None, zp=None, axis=None):
        data = np.asarray(data)
        bits = 32 if data.dtype.itemsize == 4 else data.dtype.itemsize * 8
        return self._new_tensor(name, bits, data.dtype.kind == "i", data.shape, scale, zp, axis, data)

    # ------------------------------------------------------------------ values
    def val(self, name, node):
        if name in self.env:
            return self.env[name]
        if name in self.consts:
            return _Val("const", data=self.consts[name], shape=self.consts[name].shape, dtype=self.consts[name].dtype)
        raise ValueError(f"node {node.name!r} reads {name!r}, which fxpsim could not import (see the ops "
                         "before it)")

    def _dq_type(self, v: _Val):
        """The element type onnxruntime's selectors see at a DequantizeLinear input (after int8 -> uint8)."""
        if v.kind != "dq":
            return None
        src = self.env.get(v.src)
        if src is not None and src.kind == "int":
            if src.dtype == np.int8 and v.src in self.converted:
                return np.dtype(np.uint8)
            return src.dtype
        return np.dtype(self.consts[v.src].dtype)

    def _q_type(self, q):
        z = self._q_zp_const(q)
        dt = z[1] if z is not None else np.dtype(np.uint8)
        if dt == np.int8 and q.outputs[0] in self.converted:
            return np.dtype(np.uint8)
        return np.dtype(dt)

    def _q_params(self, q):
        s = self.const(q.inputs[1])
        if s is None or s.size != 1:
            raise _unsupported(q, "a QuantizeLinear needs a constant per-tensor scale")
        if q.attrs.get("block_size"):
            raise _unsupported(q, "blocked quantization")
        if len(q.inputs) > 2 and q.inputs[2]:
            z = self.const(q.inputs[2])
            if z is None or z.size != 1:
                raise _unsupported(q, "a QuantizeLinear needs a constant per-tensor zero point")
            dtype = z.dtype
            zp = int(z.reshape(()))
        else:
            dtype = {2: np.uint8, 3: np.int8}.get(int(q.attrs.get("output_dtype", 2)), None)
            if dtype is None:
                raise _unsupported(q, "output_dtype other than int8 / uint8")
            zp = 0
        if np.dtype(dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise _unsupported(q, f"{np.dtype(dtype)} quantization (int8 and uint8 only)")
        if not np.float32(s.reshape(())) > 0:
            raise _unsupported(q, "a non-positive scale")
        return np.float32(s.reshape(())), zp, np.dtype(dtype)

    # ------------------------------------------------------------------ build
    def build(self) -> IntegerGraph:
        if not any(n.op in ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                            "ConvInteger") or n.op.startswith("QLinear") or n.op == "QGemm" for n in self.nodes):
            ops = sorted({n.key for n in self.nodes})
            raise ValueError(f"{self.path}: a float (non-quantized) model (ops: {', '.join(ops)}); fxpsim imports "
                             "quantized models (QDQ or QOperator, e.g. from onnxruntime.quantization.quantize_static)")
        self._rewrite()
        self._mark_converted()
        self._declare_inputs()
        for n in self.nodes:
            if n.domain not in ("", _MS):
                raise _unsupported(n, f"domain {n.domain!r}")
            self._convert(n)
        outputs = [self._graph_output(o) for o in self.outputs]
        self._mark_u8s8()
        tensors = []
        for name, s in self.specs.items():
            scale = s["scale"]
            tensors.append(TensorSpec(name, s["bits"], s["signed"], s["shape"], scale,
                                      s["zp"] if scale is not None else None, s["axis"], s["data"]))
        meta = {"source": self.path, "format": "onnx", "opset": self.opset, "datapath": dict(ONNXRUNTIME_DATAPATH),
                "onnxruntime": {"reproduces": "onnxruntime CPU execution provider, default session options "
                                              "(graph optimization level ORT_ENABLE_ALL), x86-64 with FMA",
                                "cpu": self.cpu, "float_nodes": self.float_nodes}}
        gname = os.path.splitext(os.path.basename(self.path))[0] or "onnx"
        return IntegerGraph(tensors, self.gnodes, [self.env_in[i] for i in self.inputs], outputs, gname, meta)

    def _mark_u8s8(self):
        """``u8s8_pairs`` on every MAC node that onnxruntime runs with its uint8 x int8 integer kernel (uint8
        activations, or int8 ones it shifted to uint8, times int8 weights): the ``cpu`` flavour's pair
        arithmetic. Not on a depthwise convolution nor on ConvInteger, which onnxruntime computes exactly
        on AVX2 as well (measured)."""
        pairs = ONNXRUNTIME_CPUS[self.cpu]
        for node in self.gnodes:
            if node.op not in ("qlinear_conv", "qlinear_matmul", "matmul_integer") \
                    or node.attrs.get("ort_kernel", "qlinear") != "qlinear":
                continue
            x, w = self.specs[node.inputs[0]], self.specs[node.inputs[1]]
            x_u8 = x["bits"] == 8 and (not x["signed"] or bool(node.attrs.get("u8_shift")))
            if not (x_u8 and w["bits"] == 8 and w["signed"]):
                continue
            if node.op == "qlinear_conv" and _x86.is_depthwise(
                    int(node.attrs.get("group", 1)), x["shape"][-1], w["data"].shape[0]):
                continue
            node.attrs["u8s8_pairs"] = pairs

    def _declare_inputs(self):
        self.env_in = {}
        for name in self.inputs:
            et, dims = self.types.get(name, (None, None))
            if dims is None or len(dims) < 1 or any(d is None for d in dims[1:]):
                raise ValueError(f"{self.path}: graph input {name!r} needs a known shape (batch first), got {dims}")
            shape = tuple(int(d) for d in dims[1:])
            dtype = self.onnx.helper.tensor_dtype_to_np_dtype(et)
            if dtype in _FLOAT_TYPES:
                if dtype != np.float32:
                    raise ValueError(f"{self.path}: graph input {name!r} is {np.dtype(dtype)}; float32 only")
                self._new_tensor(name, 0, True, shape)
                g = name
                if len(shape) == 3:
                    g = self._new_tensor(f"{name}:nhwc", 0, True, self._gshape(shape))
                    self._add_node("transpose", [name], [g], {"perm": [1, 2, 0]}, name=f"{name}/to_nhwc")
                self.env[name] = _Val("float", g=g, shape=shape, dtype=np.dtype(np.float32))
            elif np.dtype(dtype) in (np.dtype(np.int8), np.dtype(np.uint8)):
                scale, zp = self._input_params(name)
                bits, signed = self._int_spec_args(dtype)
                self._new_tensor(name, bits, signed, shape, scale, zp)
                g = name
                if len(shape) == 3:
                    g = self._new_tensor(f"{name}:nhwc", bits, signed, self._gshape(shape), scale, zp)
                    self._add_node("transpose", [name], [g], {"perm": [1, 2, 0]}, name=f"{name}/to_nhwc")
                self.env[name] = _Val("int", g=g, shape=shape, dtype=np.dtype(dtype))
            else:
                raise ValueError(f"{self.path}: graph input {name!r} has type {np.dtype(dtype)}; fxpsim reads "
                                 "float32, int8 and uint8 inputs")
            self.env_in[name] = name

    def _input_params(self, name):
        """Quantization of an integer graph input, from the first consumer that states it."""
        for n, i in self.consumers(name):
            if self._is_dq(n) and i == 0:
                s, z = self.const(n.inputs[1]), self.const(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else 0
            elif n.op in ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul") and i in (0, 3):
                s, z = self.const(n.inputs[i + 1]), self.const(n.inputs[i + 2])
            elif n.op in ("QLinearGlobalAveragePool", "QLinearAveragePool") and i == 0:
                s, z = self.const(n.inputs[1]), self.const(n.inputs[2])
            elif n.op == "QLinearConcat" and i >= 2 and (i - 2) % 3 == 0:
                s, z = self.const(n.inputs[i + 1]), self.const(n.inputs[i + 2])
            else:
                continue
            if s is not None and s.size == 1:
                return float(np.float32(s.reshape(()))), int(np.asarray(z if z is not None else 0).reshape(-1)[0])
        return None, None

    def _graph_output(self, name):
        v = self.env.get(name)
        if v is None:
            raise ValueError(f"{self.path}: graph output {name!r} is not computed by an imported op")
        if v.kind == "dq":
            src = self.env[v.src]
            if v.scale.size != 1:
                sp = self.specs[src.g]
                if not (np.ndim(sp["scale"]) == 1 and np.array_equal(np.float32(sp["scale"]), v.scale)
                        and np.array_equal(sp["zp"], v.zp) and sp["axis"] == self._sample_axis(v.axis, v.shape)):
                    raise ValueError(f"{self.path}: graph output {name!r} is dequantized per channel with "
                                     "parameters its QuantizeLinear did not use")
                src_g = src.g
            else:
                src_g = self._check_params(_ONode("DequantizeLinear", "", name, [], []), v.src, src.g, v.scale, v.zp)
            nhwc = len(v.shape) == 3
            g = self._new_tensor(self._gname(name, nhwc), 0, True, self._gshape(v.shape))
            self._add_node("onnx_dequantize", [src_g], [g], name=f"{name}/dequantize")
            v = _Val("float", g=g, shape=v.shape, dtype=np.dtype(np.float32))
        elif v.kind == "const":
            raise ValueError(f"{self.path}: graph output {name!r} is a constant")
        if len(v.shape) == 3 and v.g != name:
            s = self.specs[v.g]
            g = self._new_tensor(name, s["bits"], s["signed"], v.shape, s["scale"], s["zp"])
            self._add_node("transpose", [v.g], [g], {"perm": [2, 0, 1]}, name=f"{name}/to_nchw")
            return g
        if v.g != name:
            s = self.specs[v.g]
            g = self._new_tensor(name, s["bits"], s["signed"], s["shape"], s["scale"], s["zp"])
            self._add_node("reshape", [v.g], [g], name=f"{name}/output")
            return g
        return v.g


def import_onnx(path, *, cpu: str = "exact") -> IntegerGraph:
    """Read a quantized ``.onnx`` model into an :class:`~fxpsim.graph.IntegerGraph`.

    Parameters
    ----------
    path : str or os.PathLike
        A QDQ model (QuantizeLinear / DequantizeLinear around float ops, e.g. from
        ``onnxruntime.quantization.quantize_static`` or a PyTorch export) or a QOperator model (QLinearConv,
        QLinearMatMul, QGemm, QLinearAdd, QLinearMul, QLinear pools, QLinearConcat, MatMulInteger, ConvInteger);
        uint8 or int8 activations, per-tensor or per-channel weights. :data:`SUPPORTED_OPS` lists the ops.
    cpu : {"exact", "avx2", "host"}
        Which onnxruntime CPU the graph reproduces. ``"exact"`` (default): uint8 x int8 products accumulate
        exactly, as on CPUs with VNNI and on ARM. ``"avx2"``: x86-64 with AVX2 but no VNNI, whose uint8 x int8
        kernels saturate the sum of each pair of adjacent products to int16 (module docstring; such nodes get
        ``u8s8_pairs="saturate16"``, which runs only on onnxruntime's own datapath). ``"host"``: the flavour
        of this machine's onnxruntime (:func:`onnxruntime_cpu`).

    Returns
    -------
    IntegerGraph
        Runs bit for bit as onnxruntime's CPU execution provider (on a CPU of the ``cpu`` flavour) with
        default session options on its default datapath (``meta["datapath"]``: ``requantization="native"``,
        int32 wrapping accumulator), and on any other datapath
        (``graph.run(x, fxpsim.preset("int8-acc16-sat"))``; not with ``cpu="avx2"`` when a node has
        ``u8s8_pairs="saturate16"``: a ValueError). Inputs and outputs keep the
        model's layout and types. ``meta["onnxruntime"]["float_nodes"]`` lists the nodes onnxruntime runs in
        float32 (QDQ groups its optimizer does not fuse).

    Raises
    ------
    ImportError
        Without the ``onnx`` package (``pip install fxpsim[onnx]``).
    FileNotFoundError
        No such file.
    ValueError
        A damaged or truncated file, a float (non-quantized) model, an op, type or pattern outside the
        supported set (the message names the op, the node and the supported ops), or an unknown ``cpu``.
    """
    if cpu == "host":
        cpu = onnxruntime_cpu()
    if cpu not in ONNXRUNTIME_CPUS:
        raise ValueError(f"cpu must be 'exact', 'avx2' or 'host', got {cpu!r}")
    onnx = _require_onnx()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as fh:
        data = fh.read()
    if not data:
        raise ValueError(f"{path}: an empty file, not an ONNX model")
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 (google.protobuf.message.DecodeError and friends)
        raise ValueError(f"{path}: not an ONNX model (protobuf decoding failed: {exc})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise ValueError(f"{path}: not an ONNX model (no graph or no opset; a damaged or truncated file?)")
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        try:
            from onnx.external_data_helper import load_external_data_for_model
            load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{path}: cannot read the external tensor data ({exc})") from None
    return _Importer(model, path, cpu).build()
