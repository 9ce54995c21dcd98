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

* elementwise float ops between a per-tensor DequantizeLinear and a QuantizeLinear (Sigmoid, HardSigmoid,
  HardSwish, LeakyRelu, Div / Sub / Mul / Add by scalar constants, Pow by 1, 2, 3, and chains of them, as
  ``quantize_static`` leaves them), QLinearSigmoid and QLinearLeakyRelu: one table per input code
  (``onnx_lut``, :mod:`fxpsim.frontends.onnx.elementwise`) of onnxruntime's float32 kernels.

* data movement (Transpose, Slice, Split, Gather, Pad, Squeeze, Unsqueeze, nearest Resize) on codes, in QOperator
  graphs and between DequantizeLinear and QuantizeLinear (onnxruntime drops the pair or moves the dequantized
  floats: the same codes), requantized where the pair's parameters differ: ``onnx_move``
  (:mod:`fxpsim.frontends.onnx.moves`); a nearest Resize whose input coordinate lies on a rounding boundary is
  refused (onnxruntime's float32 details decide there);
* linear (bilinear) Resize of 4-D images: the float32 kernel between DequantizeLinear and QuantizeLinear, and on
  QOperator codes the float32 kernel truncated (NCHW) or the 1/1024 fixed-point kernel (NHWC, after a
  QLinearConv): ``onnx_resize_linear`` (:mod:`fxpsim.frontends.onnx.resize`);
* ReduceMean over a block of adjacent axes between DequantizeLinear and QuantizeLinear (``onnx_reduce_mean``) and
  ConvTranspose in QDQ groups (``onnx_conv_transpose``), both run by onnxruntime in float32 and reproduced so;
* QLinearSoftmax and the DequantizeLinear -> Softmax -> QuantizeLinear groups it fuses into it:
  ``qlinear_softmax`` (:mod:`fxpsim.datapath.onnxruntime.softmax`); an unfused float32 Softmax is refused.

A model with ops outside :data:`SUPPORTED_OPS` is refused before any conversion with one ValueError listing
every unsupported op with its count and node names (:func:`fxpsim.frontends.onnx.coverage.onnx_coverage`
returns the whole table without raising); a damaged file raises one ValueError naming the file (and the
node) and the damage.

Not reproduced (refused with a ValueError): float pooling, a MatMul / Gemm whose output is not quantized
(MatMulIntegerToFloat, QGemm with float output), per-channel activations inside the graph, cubic Resize,
ReduceMean over other axes, int16 / 4-bit / float8 types, ops outside :data:`SUPPORTED_OPS`.
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
from ...graph.ir import IntegerGraph, TensorSpec
from .coverage import read_model, table as coverage_table, unsupported_error
from .graph_tensors import GraphTensors
from .nodes import _FLOAT_TYPES, _MS, SUPPORTED_OPS, _ONode, _require_onnx, _unsupported, _Val
from .elementwise import ElementwiseConversions
from .moves import MoveConversions
from .whole_moves import WholeMoveConversions
from .resize import ResizeConversions
from .conv_transpose import ConvTransposeConversions
from .reductions import ReductionConversions
from .qdq import QDQConversions
from .qdq_groups import QDQGroupConversions
from .qoperator import QOperatorConversions
from .rewrites import OrtRewrites
from .shape_fold import fold_static_shapes
from .transformer import TransformerConversions

__all__ = ["import_onnx", "SUPPORTED_OPS", "ONNXRUNTIME_DATAPATH", "ONNXRUNTIME_CPUS", "VECTOR_LAYER_NORM_CPUS",
           "onnxruntime_cpu"]

#: The datapath an imported graph records: onnxruntime's CPU kernels.
ONNXRUNTIME_DATAPATH = {"name": "onnxruntime-cpu", "accumulator_bits": 32, "accumulator_overflow": "wrap",
                        "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
                        "requantization": "native", "rounding": "half_even", "activation_clamp": True}

#: The ``cpu`` flavours of :func:`import_onnx`, with the ``u8s8_pairs`` their uint8 x int8 MAC nodes get.
ONNXRUNTIME_CPUS = {"exact": "exact", "avx2": "saturate16", "vnni": "exact"}
#: The flavours whose onnxruntime runs LayerNormalization rows of 8 or more values with MLAS's AVX2 vector
#: kernel (measured: x86-64 AVX2 without AVX-512, and AVX-512 with VNNI, AMD Zen 4).
VECTOR_LAYER_NORM_CPUS = ("avx2", "vnni")


def onnxruntime_cpu(flags=None, machine=None) -> str:
    """The flavour of onnxruntime's CPU kernels on this host (or on a CPU with the given ``/proc/cpuinfo``
    ``flags`` and ``platform.machine()``): ``"avx2"`` on x86-64 with AVX2 and neither AVX512-VNNI nor AVX-VNNI
    (int16-saturating uint8 x int8 pair sums), ``"vnni"`` on x86-64 with AVX2 and one of them (exact pair sums,
    the AVX2 vector LayerNormalization), ``"exact"`` elsewhere (ARM, CPUs without AVX2).

    Verified live with onnxruntime 1.32: AVX2 without VNNI (AMD EPYC) saturates; AVX-512 with VNNI (AMD EPYC,
    Zen 4) is exact and runs LayerNormalization bit for bit as the AVX2 model. Inferred from MLAS's kernel
    dispatch, not measured: AVX-512BW without VNNI (Skylake-SP) also runs ``vpmaddubsw`` kernels and saturates
    (it has AVX2, so it is reported as ``"avx2"``); AVX-VNNI alone is exact. See
    :func:`fxpsim.datapath.onnxruntime.x86_pairs.host_u8s8_pairs`."""
    if _x86.host_u8s8_pairs(flags, machine) == "saturate16":
        return "avx2"
    return "vnni" if _x86.host_u8s8_pairs(flags, machine, assume_vnni=False) == "saturate16" else "exact"


#: What a damaged model makes the conversion code raise underneath (a missing attribute, an attribute of the
#: wrong type or shape, an input list too short): turned into one ValueError naming the file and the node.
_DAMAGE = (KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError, OverflowError, UnicodeError,
           RecursionError, MemoryError, ArithmeticError)


def _damaged(path, exc, node=None) -> ValueError:
    where = "" if node is None else f" node {node.name!r} ({node.key}):"
    return ValueError(f"{path}:{where} a malformed model ({type(exc).__name__}: {exc}; a damaged file or an "
                      "attribute / input the op does not allow)")


class _Importer(TransformerConversions, ElementwiseConversions, WholeMoveConversions, MoveConversions,
                ResizeConversions, ConvTransposeConversions, ReductionConversions, QDQConversions,
                QDQGroupConversions, QOperatorConversions, OrtRewrites, GraphTensors):
    """Reads one ONNX model: onnxruntime's rewrites (:mod:`fxpsim.frontends.onnx.rewrites`), then every node into
    the graph being built (:mod:`fxpsim.frontends.onnx.graph_tensors`; the node conversions are in
    :mod:`fxpsim.frontends.onnx.qdq`, :mod:`fxpsim.frontends.onnx.qdq_groups` and
    :mod:`fxpsim.frontends.onnx.qoperator`)."""

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
            try:
                self._convert(n)
            except _DAMAGE as exc:
                raise _damaged(self.path, exc, n) from None
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
        elif v.kind == "fchain":
            raise ValueError(f"{self.path}: graph output {name!r} is the float output of the elementwise ops "
                             f"{v.data['ops']} without a QuantizeLinear after them (not imported)")
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
    cpu : {"exact", "avx2", "vnni", "host"}
        Which onnxruntime CPU the graph reproduces. ``"exact"`` (default): uint8 x int8 products accumulate
        exactly, as on CPUs with VNNI and on ARM. ``"avx2"``: x86-64 with AVX2 but no VNNI, whose uint8 x int8
        kernels saturate the sum of each pair of adjacent products to int16 (module docstring; such nodes get
        ``u8s8_pairs="saturate16"``, which runs only on onnxruntime's own datapath). ``"vnni"``: x86-64 with
        AVX2 and VNNI: exact products as ``"exact"``. ``"avx2"`` and ``"vnni"`` also reproduce the vector
        float32 LayerNormalization kernel (rows of 8 or more values), which ``"exact"`` refuses. ``"host"``: the
        flavour of this machine's onnxruntime (:func:`onnxruntime_cpu`).

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
        Without the ``onnx`` package (``pip install -e '.[onnx]'``).
    FileNotFoundError
        No such file.
    ValueError
        A damaged or truncated file, a float (non-quantized) model, an op, type or pattern outside the
        supported set (the message names the op, the node and the supported ops), or an unknown ``cpu``.
    """
    if cpu == "host":
        cpu = onnxruntime_cpu()
    if cpu not in ONNXRUNTIME_CPUS:
        raise ValueError(f"cpu must be 'exact', 'avx2', 'vnni' or 'host', got {cpu!r}")
    path = os.fspath(path)
    model = fold_static_shapes(read_model(path))
    cov = coverage_table(model.graph.node, path)
    if not cov.quantized:
        ops = sorted(r.op for r in cov.rows)
        raise ValueError(f"{path}: a float (non-quantized) model (ops: {', '.join(ops)}); fxpsim imports "
                         "quantized models (QDQ or QOperator, e.g. from onnxruntime.quantization.quantize_static) "
                         "into integer graphs; a float model reads with fxpsim.import_float_model, to run on a "
                         "float datapath")
    err = unsupported_error(cov)
    if err is not None:
        raise err
    try:
        return _Importer(model, path, cpu).build()
    except ValueError as exc:
        msg = str(exc)
        if msg.startswith(path):
            raise
        raise ValueError(f"{path}: {msg}") from None
    except _DAMAGE as exc:
        raise _damaged(path, exc) from None
