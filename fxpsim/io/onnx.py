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

The model's own layout and types are kept at the boundary: ``graph.run(x)`` takes and returns what
``InferenceSession.run`` takes and returns (NCHW, float32 for a QDQ model with float inputs). Inside, images
are NHWC (weights OIHW -> OHWI), with ``transpose`` nodes at the inputs/outputs and before a Flatten/Reshape
of an image. The graph's default datapath (``meta["datapath"]``) is onnxruntime's: a 32-bit wrapping
accumulator, the bias added after the sum, ``requantization="native"``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..datapath import onnx_ops as K
from ..graph import onnx_ops as _onnx_graph_ops  # noqa: F401  (registers the ONNX graph ops)
from ..graph.ir import IntegerGraph, Node, TensorSpec

__all__ = ["import_onnx", "SUPPORTED_OPS", "ONNXRUNTIME_DATAPATH"]

#: The ONNX ops :func:`import_onnx` reads (``com.microsoft`` contrib ops marked so).
SUPPORTED_OPS = (
    "QuantizeLinear", "DequantizeLinear", "Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Relu", "Clip", "Flatten", "Reshape", "Concat", "Identity", "Constant",
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "com.microsoft:QGemm",
    "com.microsoft:QLinearAdd", "com.microsoft:QLinearMul", "com.microsoft:QLinearGlobalAveragePool",
    "com.microsoft:QLinearAveragePool", "com.microsoft:QLinearConcat",
)

#: The datapath an imported graph records: onnxruntime's CPU kernels.
ONNXRUNTIME_DATAPATH = {"name": "onnxruntime-cpu", "accumulator_bits": 32, "accumulator_overflow": "wrap",
                        "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
                        "requantization": "native", "rounding": "half_even", "activation_clamp": True}

_MS = "com.microsoft"
_FLOAT_TYPES = (np.float32, np.float64, np.float16)
_TARGETS = ("Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu",
            "Clip", "Flatten", "Reshape", "Concat")
_F32_EPS = np.float32(np.finfo(np.float32).eps)


def _require_onnx():
    try:
        import onnx
        from onnx import numpy_helper  # noqa: F401
    except ImportError as exc:
        raise ImportError("fxpsim.import_onnx needs the 'onnx' package: pip install fxpsim[onnx]") from exc
    return onnx


# ----------------------------------------------------------------------------------------- model nodes
@dataclass
class _ONode:
    op: str
    domain: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.domain}:{self.op}" if self.domain else self.op


@dataclass
class _Val:
    """What an ONNX tensor is in the graph being built."""
    kind: str                     # "int" | "float" | "dq" | "const"
    g: str = ""                   # graph tensor (int / float)
    shape: tuple = ()             # per-sample ONNX shape (activations), full shape (constants)
    dtype: object = None
    src: str = ""                 # "dq": the dequantized ONNX tensor
    scale: object = None          # "dq": float32 array
    zp: object = None             # "dq": int64 array
    axis: int | None = None       # "dq": per-channel axis
    data: object = None           # "const"
    float_only: bool = False      # "dq": dequantized codes moved by a float op (not a DequantizeLinear output)


def _unsupported(node: _ONode, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"unsupported ONNX op {node.key} in node {node.name!r}{extra}; fxpsim.import_onnx "
                      f"supports: {', '.join(SUPPORTED_OPS)}")


class _Importer:
    def __init__(self, model, path: str):
        onnx = _require_onnx()
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
        tensors = []
        for name, s in self.specs.items():
            scale = s["scale"]
            tensors.append(TensorSpec(name, s["bits"], s["signed"], s["shape"], scale,
                                      s["zp"] if scale is not None else None, s["axis"], s["data"]))
        meta = {"source": self.path, "format": "onnx", "opset": self.opset, "datapath": dict(ONNXRUNTIME_DATAPATH),
                "onnxruntime": {"reproduces": "onnxruntime CPU execution provider, default session options "
                                              "(graph optimization level ORT_ENABLE_ALL), x86-64 with FMA",
                                "float_nodes": self.float_nodes}}
        gname = os.path.splitext(os.path.basename(self.path))[0] or "onnx"
        return IntegerGraph(tensors, self.gnodes, [self.env_in[i] for i in self.inputs], outputs, gname, meta)

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

    # ------------------------------------------------------------------ node conversion
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
        oh = (h + pads[0][0] + pads[0][1] - dil[0] * (w.shape[1] - 1) - 1) // strides[0] + 1
        ow = (wd + pads[1][0] + pads[1][1] - dil[1] * (w.shape[2] - 1) - 1) // strides[1] + 1
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
        self._add_node("qlinear_conv", [src.g, w_g] + ([b_g] if b_g else []), [g],
                       {"stride": strides, "padding": pads, "dilation": dil, "group": group, "ort_kernel": kernel},
                       name=n.name)
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
        self._add_node("qlinear_matmul", [src.g, w_g] + ([b_g] if b_g else []), [g],
                       {"alpha": alpha, "ort_kernel": "qlinear" if fused else "float", "onnx_op": n.op},
                       name=n.name)
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
        oh = (h + pads[0][0] + pads[0][1] - k[0]) // strides[0] + 1
        ow = (w + pads[1][0] + pads[1][1] - k[1]) // strides[1] + 1
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

    # ---------------- data movement and activations between DQ and Q
    def _movement(self, n, q, clip):
        """MaxPool / Reshape / Flatten / Relu / Clip: on integer codes directly (QOperator graphs), or inside a
        DQ -> op -> Q group: onnxruntime drops the Q/DQ when their parameters agree (the op runs on codes);
        otherwise it runs the op in float32, which equals the op on codes followed by Q(DQ(.))."""
        v = self.val(n.inputs[0], n)
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
            # followed by the DequantizeLinear. Its consumers do not see a DequantizeLinear: not fusable.
            s_in, z_in = self._params(src.g)
            mid = f"{n.outputs[0]}:codes"
            self._movement_op(n, src, mid, s_in, z_in)
            self.env[n.outputs[0]] = _Val("dq", src=mid, scale=np.array([s_in], np.float32), zp=np.array([z_in]),
                                          shape=self.env[mid].shape, dtype=np.dtype(np.float32), float_only=True)
            self._note(n.name, n, False, "float32 op on dequantized values (no QuantizeLinear after it)")
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
            oh = (h + pads[0][0] + pads[0][1] - k[0]) // strides[0] + 1
            ow = (w + pads[1][0] + pads[1][1] - k[1]) // strides[1] + 1
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

    # ------------------------------------------------------------------ QOperator ops
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

    def _qlinear_conv(self, n):
        i = n.inputs
        xv = self._int_input(n, i[0], i[1], i[2])
        w_g, _ = self._qweights(n, i[3], i[4], i[5], "OIHW")
        w = self.specs[w_g]["data"]
        scale, zp, dtype = self._out_params(n, i[6], i[7], xv.dtype)
        b_g = None
        if len(i) > 8 and i[8]:
            b_g, _ = self._bias(n, i[8], w.shape[0], self.const(i[1]), self.const(i[4]))
        group = int(n.attrs.get("group", 1))
        strides, pads, dil = self._conv_attrs(n, xv.shape, w.shape[1:3])
        c, h, wd = xv.shape
        oh = (h + pads[0][0] + pads[0][1] - dil[0] * (w.shape[1] - 1) - 1) // strides[0] + 1
        ow = (wd + pads[1][0] + pads[1][1] - dil[1] * (w.shape[2] - 1) - 1) // strides[1] + 1
        g = self._int_value(n.outputs[0], (w.shape[0], oh, ow), dtype, scale, zp)
        self._add_node("qlinear_conv", [xv.g, w_g] + ([b_g] if b_g else []), [g],
                       {"stride": strides, "padding": pads, "dilation": dil, "group": group, "ort_kernel": "qlinear"},
                       name=n.name)

    def _qlinear_matmul(self, n):
        i = n.inputs
        xv = self._int_input(n, i[0], i[1], i[2])
        w_g, _ = self._qweights(n, i[3], i[4], i[5], "KN")
        w = self.specs[w_g]["data"]
        scale, zp, dtype = self._out_params(n, i[6], i[7], xv.dtype)
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
        xv = self._int_input(n, i[0], i[1], i[2])
        w_g, _ = self._qweights(n, i[3], i[4], i[5], "NK" if n.attrs.get("transB", 0) else "KN")
        w = self.specs[w_g]["data"]
        scale, zp, dtype = self._out_params(n, i[7], i[8], xv.dtype)
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
            oh = (h + pads[0][0] + pads[0][1] - dil[0] * (w.shape[1] - 1) - 1) // strides[0] + 1
            ow = (wd + pads[1][0] + pads[1][1] - dil[1] * (w.shape[2] - 1) - 1) // strides[1] + 1
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


def import_onnx(path) -> IntegerGraph:
    """Read a quantized ``.onnx`` model into an :class:`~fxpsim.graph.IntegerGraph`.

    Parameters
    ----------
    path : str or os.PathLike
        A QDQ model (QuantizeLinear / DequantizeLinear around float ops, e.g. from
        ``onnxruntime.quantization.quantize_static`` or a PyTorch export) or a QOperator model (QLinearConv,
        QLinearMatMul, QGemm, QLinearAdd, QLinearMul, QLinear pools, QLinearConcat, MatMulInteger, ConvInteger);
        uint8 or int8 activations, per-tensor or per-channel weights. :data:`SUPPORTED_OPS` lists the ops.

    Returns
    -------
    IntegerGraph
        Runs bit for bit as onnxruntime's CPU execution provider with default session options on its default
        datapath (``meta["datapath"]``: ``requantization="native"``, int32 wrapping accumulator), and on any
        other datapath (``graph.run(x, fxpsim.preset("int8-acc16-sat"))``). Inputs and outputs keep the
        model's layout and types. ``meta["onnxruntime"]["float_nodes"]`` lists the nodes onnxruntime runs in
        float32 (QDQ groups its optimizer does not fuse).

    Raises
    ------
    ImportError
        Without the ``onnx`` package (``pip install fxpsim[onnx]``).
    FileNotFoundError
        No such file.
    ValueError
        A damaged or truncated file, a float (non-quantized) model, or an op, type or pattern outside the
        supported set (the message names the op, the node and the supported ops).
    """
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
    return _Importer(model, path).build()
