"""Import a full-integer (int8 or 16x8) ``.tflite`` model as an :class:`~fxpsim.graph.IntegerGraph`.

:func:`import_tflite` reads the flatbuffer with the ``tflite`` package (the generated schema classes;
``pip install -e '.[tflite]'``) and maps every operator onto the graph's ops: the MAC ops of
:mod:`fxpsim.graph.ops` (``conv2d``, ``depthwise_conv2d``, ``fully_connected``, which accumulate through
the datapath the graph runs on) and the TFLite element-wise, pooling, reduction and activation ops of
:mod:`fxpsim.frontends.tflite.ops` (integer semantics of LiteRT's kernels). The graph's
``meta["datapath"]`` records LiteRT's own arithmetic, so ``graph.run(x)`` reproduces LiteRT bit for bit;
``graph.run(x, fxpsim.preset("int8-acc16-sat"))`` runs the same network on another accumulator.

Layout: the graph runs a batch on axis 0 and its tensor shapes are per sample (TFLite's batch dimension
of 1 is dropped); the shape arithmetic Keras emits for a dynamic batch (SHAPE -> STRIDED_SLICE -> PACK ->
RESHAPE) is evaluated at import for batch 1 and folded into static reshapes. Graph tensors carry the
TFLite tensor names (made unique with ``#<index>`` where needed); ``meta["tflite_tensors"]`` maps each
graph tensor to its TFLite tensor index.

Kernel sets (``kernels=``): ``"reference"`` (``OpResolverType.BUILTIN_REF``), ``"builtin"`` (the
optimized builtin kernels, ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``) and ``"xnnpack"`` (``BUILTIN``: the
XNNPACK delegate), each with its own Prepare checks (:mod:`.prepare`). A model with operators that do not
import under the kernel set raises one ``ValueError`` listing every one of them (op, count, nodes, reason;
:func:`fxpsim.tflite_coverage` gives the table without failing; see ``docs/tflite_kernels.md``).

16x8 models (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``: int16 activations, int8 weights, int64
biases) import with int16 codes and an int64 accumulator (``litert_datapath(kernels, int16=True)``); where LiteRT's
int16 kernel differs from its int8 one the node is the int16 op of :mod:`.int16_ops`, and the int16 ops fxpsim does
not reproduce are refused by name. uint8 tensors import at the model's boundaries only (``inference_input_type`` /
``inference_output_type = tf.uint8``: QUANTIZE uint8 <-> int8, a uint8 DEQUANTIZE input).

Streaming models (``CALL_ONCE`` + init subgraph, ``VAR_HANDLE``, ``READ_VARIABLE``, ``ASSIGN_VARIABLE``) become
graphs with state (``meta["state"]``, :mod:`fxpsim.graph.state`): ``graph.run(x)`` is one step from the
initial state, ``graph.stream(frames)`` many with the state carried.
"""
from __future__ import annotations

import os

import numpy as np

from . import ops as _tflite_graph_ops  # noqa: F401  (registers the TFLite graph ops)
from ...graph.ir import IntegerGraph, Node, TensorSpec
from .reader import (_ACTIVATIONS, _FLOAT32, _INT8, _INT16, _INT32, _INT64, _TYPE_NAMES, _UINT8, _const_value,
                     _read_model)
from .coverage import KERNEL_SETS, SUPPORTED_OPS, analyse, unsupported_error
from .int16_ops import INT16_GRAPH_OPS
from .layer_ops import LayerOps
from .math_ops import MathOps
from .quantize_ops import QuantizeOps
from .reorder_ops import ReorderOps
from .shape_ops import ShapeOps
from .state_ops import StateOps
from .transpose_conv_ops import TransposeConvOps

__all__ = ["import_tflite", "SUPPORTED_OPS", "KERNEL_SETS", "litert_datapath"]



def litert_datapath(kernels: str = "reference", *, int16: bool = False) -> dict:
    """The ``meta["datapath"]`` of an imported graph: LiteRT's arithmetic for the kernel set ``kernels``.

    Every kernel set accumulates in int32 (two's complement wrap) and adds the bias after the dot product.
    CONV_2D and DEPTHWISE_CONV_2D requantize with gemmlowp's two roundings (``"tflite-double"``) in all
    three sets. FULLY_CONNECTED differs: the reference kernel requantizes in float64,
    ``round(acc * (s_x s_w / s_y))`` half away from zero (``dense_requantization = "float"``), the
    optimized builtin kernel and XNNPACK with the fixed-point multiplier.

    ``int16=True`` (a 16x8 model: int16 activations): the MAC ops accumulate in int64 and requantize with
    LiteRT's 64-bit multiplier (:func:`fxpsim.datapath.tflite.int16.mbqm_int64`) in every kernel set; the
    graph's MAC ops are the ``tflite_*`` ones, on the ``"native"`` requantization.
    """
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {KERNEL_SETS}, got {kernels!r}")
    if int16:
        return {"name": f"litert-{kernels}-16x8", "accumulator_bits": 64, "accumulator_overflow": "wrap",
                "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
                "requantization": "native", "dense_requantization": None, "rounding": "half_away",
                "activation_clamp": True}
    if kernels == "reference":
        requant, dense = "tflite-double", "float"
    else:
        requant, dense = "native", None
    return {"name": f"litert-{kernels}", "accumulator_bits": 32, "accumulator_overflow": "wrap",
            "accumulator_order": "sequential", "overflow_at": "add", "bias_add": "after",
            "requantization": requant, "dense_requantization": dense, "rounding": "half_away",
            "activation_clamp": True}


# ============================================================================ graph building
class _Builder(LayerOps, ShapeOps, ReorderOps, StateOps, MathOps, TransposeConvOps, QuantizeOps):
    """Turns the parsed model into graph tensors and nodes, one TFLite operator at a time (the MAC and pooling
    operators in :mod:`fxpsim.frontends.tflite.layer_ops`, the shape-changing ones in
    :mod:`fxpsim.frontends.tflite.shape_ops`, SLICE, GATHER, TRANSPOSE and the resize operators in
    :mod:`fxpsim.frontends.tflite.reorder_ops`, QUANTIZE and DEQUANTIZE in :mod:`fxpsim.frontends.tflite.quantize_ops`)."""

    def __init__(self, model: dict, path: str, kernels: str):
        self.m, self.path, self.kernels = model, path, kernels
        self.t = model["tensors"]
        self.specs: dict[str, TensorSpec] = {}
        self.nodes: list[Node] = []
        self.names: dict[int, str] = {}          # TFLite index -> graph tensor name
        self.shape: dict[int, tuple] = {}        # TFLite index -> runtime shape (batch 1)
        self.static: dict[int, np.ndarray] = {}  # TFLite index -> value known at import
        self.folded: dict[int, int] = {}         # folded tensor index -> operator index
        self._state_init()
        used: dict[str, int] = {}
        for t in self.t:
            used[t["name"]] = used.get(t["name"], 0) + 1
        self._unique = {t["index"]: (t["name"] if t["name"] and used[t["name"]] == 1 else
                                     f"{t['name'] or 'tensor'}#{t['index']}") for t in self.t}
        self._taken = set(self._unique.values())
        #: a 16x8 model (int16 activations): int16 codes where int8 codes are elsewhere
        self.act16 = any(t["type"] == _INT16 and _const_value(t) is None for t in self.t)
        for t in self.t:
            v = _const_value(t)
            if v is not None:
                self.static[t["index"]] = v
                self.shape[t["index"]] = tuple(v.shape)

    # ------------------------------------------------------------------ helpers
    def where(self, op) -> str:
        outs = ", ".join(repr(self.t[i]["name"]) for i in op["outputs"] if i >= 0)
        return f"operator {op['index']} ({op['op']}, output {outs})"

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self._taken:
            k += 1
            name = f"{base}#{k}"
        self._taken.add(name)
        return name

    def tinfo(self, i: int) -> dict:
        return self.t[i]

    def type_name(self, i: int) -> str:
        return _TYPE_NAMES.get(self.t[i]["type"], str(self.t[i]["type"]))

    def per_sample(self, i: int, op=None) -> tuple:
        shape = self.shape[i]
        if len(shape) < 1 or shape[0] != 1:
            raise ValueError(f"{self.path}: {self.where(op) if op else 'tensor'}: tensor {self.t[i]['name']!r} "
                             f"has shape {list(shape)}, which does not keep the batch on axis 0 with size 1 "
                             f"(fxpsim graphs run a batch on axis 0)")
        return tuple(int(d) for d in shape[1:])

    def quant(self, i: int, op, *, per_tensor=True) -> tuple:
        t = self.t[i]
        if t["scale"] is None:
            raise ValueError(f"{self.path}: {self.where(op)}: tensor {t['name']!r} has no quantization "
                             f"parameters (a float or unquantized tensor where int8 codes are needed)")
        if per_tensor and t["scale"].size != 1:
            raise ValueError(f"{self.path}: {self.where(op)}: tensor {t['name']!r} is quantized per channel "
                             f"where the op needs one scale")
        return t["scale"], t["zero_point"]

    def check_int8(self, i: int, op):
        t = self.t[i]
        if t["type"] == _INT8 or (t["type"] == _INT16 and self.act16):
            return
        what = {_INT16: "int16 activations (16x8 quantization) are not supported; convert with int8 "
                        "activations",
                _UINT8: "uint8 tensors (legacy quantization) are not supported; convert with int8",
                _FLOAT32: "a float32 tensor: float (non-quantized or dynamic-range) models are not supported; "
                          "convert with full-integer quantization (TFLITE_BUILTINS_INT8)"}.get(t["type"])
        raise ValueError(f"{self.path}: {self.where(op)}: tensor {t['name']!r} is {self.type_name(i)}: "
                         f"{what or 'only int8 activations are supported'}")

    def activation_tensor(self, i: int, op=None) -> str:
        """The graph name of an activation (int8 or float) tensor, declaring it on first use."""
        if i in self.names:
            return self.names[i]
        if i in self.static:
            return self.constant(i, op)
        raise ValueError(f"{self.path}: {self.where(op) if op else 'the model'} reads tensor "
                         f"{self.t[i]['name']!r}, which no earlier operator computes")

    def declare(self, i: int, op, shape: tuple, *, float_ok=False, uint8_ok=False, index_ok=False) -> str:
        """Declare the graph tensor of TFLite activation ``i`` with runtime ``shape`` (batch 1 on axis 0);
        ``index_ok``: an int32/int64 tensor (GATHER indices) as plain integers."""
        t = self.t[i]
        self.shape[i] = tuple(int(d) for d in shape)
        ps = self.per_sample(i, op)
        if t["type"] == _FLOAT32 and float_ok:
            spec = TensorSpec(self._unique[i], 0, True, ps)
        elif t["type"] in (_INT32, _INT64) and index_ok:
            spec = TensorSpec(self._unique[i], 32 if t["type"] == _INT32 else 64, True, ps)
        elif t["type"] == _UINT8 and uint8_ok:
            s, z = self.quant(i, op)
            spec = TensorSpec(self._unique[i], 8, False, ps, s.astype(np.float64), z)
        else:
            self.check_int8(i, op)
            s, z = self.quant(i, op)
            spec = TensorSpec(self._unique[i], 16 if t["type"] == _INT16 else 8, True, ps, s.astype(np.float64), z)
        self.specs[spec.name] = spec
        self.names[i] = spec.name
        return spec.name

    def constant(self, i: int, op, *, axis=None) -> str:
        """A constant TFLite tensor (weights, bias, an int8 operand) as a graph constant."""
        if i in self.names:
            return self.names[i]
        t = self.t[i]
        v = self.static[i]
        bits = {_INT8: 8, _INT32: 32, **({_INT16: 16, _INT64: 64} if self.act16 else {})}.get(t["type"])
        if bits is None:
            raise ValueError(f"{self.path}: {self.where(op)}: constant {t['name']!r} of type {self.type_name(i)} "
                             f"where int8 codes or int32 biases are needed"
                             f"{' (int16 codes or int64 biases in a 16x8 model)' if self.act16 else ''}")
        scale = zp = None
        ax = None
        if t["scale"] is not None and np.all(t["scale"] > 0):
            scale, zp = t["scale"].astype(np.float64), t["zero_point"]
            if scale.size > 1:
                ax = t["qdim"] if axis is None else axis
        spec = TensorSpec(self._unique[i], bits, True, tuple(v.shape), scale, zp, ax, v)
        self.specs[spec.name] = spec
        self.names[i] = spec.name
        return spec.name

    def node(self, op, graph_op: str, inputs: list, outputs: list, attrs: dict | None = None, suffix=""):
        """Add a graph node; on int16 codes, the int16 op of :data:`.int16_ops.INT16_GRAPH_OPS` where LiteRT's int16
        kernel differs from the int8 one."""
        name = f"op{op['index']}:{op['op']}{suffix}"
        if inputs and inputs[0] in self.specs and self.specs[inputs[0]].dtype == np.int16:
            graph_op = INT16_GRAPH_OPS.get(graph_op, graph_op)
        self.nodes.append(Node(name, graph_op, inputs, outputs, dict(attrs or {}, tflite_op=op["op"],
                                                                     tflite_index=op["index"])))

    def mac_op(self, core: str) -> str:
        """The graph op of a MAC node: the core op for the reference kernels; for the optimized sets the
        ``tflite_*`` wrapper that requantizes as that kernel set does on the graph's ``"native"`` datapath."""
        return core if self.kernels == "reference" and not self.act16 else f"tflite_{core}"

    def activation(self, op) -> str:
        code = op["options"].get("activation", 0)
        act = _ACTIVATIONS.get(code, f"code {code}")
        if act not in ("none", "relu", "relu6", "relu_n1_to_1"):
            raise ValueError(f"{self.path}: {self.where(op)}: fused activation {act.upper()} is not supported "
                             f"(NONE, RELU, RELU6, RELU_N1_TO_1 are)")
        return act

    def static_of(self, i: int, op, what: str) -> np.ndarray:
        if i < 0 or i not in self.static:
            raise ValueError(f"{self.path}: {self.where(op)}: the {what} must be known at import (a constant or "
                             f"shape arithmetic on static shapes); tensor "
                             f"{self.t[i]['name'] if i >= 0 else '(none)'!r} is computed at run time")
        return self.static[i]

    # ------------------------------------------------------------------ the model
    def build(self) -> IntegerGraph:
        m = self.m
        has_int8 = any(t["type"] in (_INT8, _INT16, _UINT8) and t["index"] not in self.static for t in self.t)
        if not has_int8:
            kinds = sorted({self.type_name(t["index"]) for t in self.t if t["index"] not in self.static})
            raise ValueError(f"{self.path}: a float (non-quantized) model: its activations are {', '.join(kinds)}; "
                             f"fxpsim imports full-integer int8 models (TFLiteConverter with "
                             f"representative_dataset and TFLITE_BUILTINS_INT8) as integer graphs; a float model "
                             f"reads with fxpsim.import_float_model, to run on a float datapath")
        err = unsupported_error(analyse(m, self.path, (self.kernels,)), self.kernels)
        if err is not None:
            raise err
        graph_inputs = []
        for i in m["inputs"]:
            t = self.t[i]
            where = {"index": "-", "op": "graph input", "outputs": [i]}
            if t["type"] not in (_INT8, _FLOAT32, _INT32, _INT64, _UINT8):
                self.check_int8(i, where)
            if t["type"] == _UINT8 and not self._uint8_boundary_input(i):
                self.check_int8(i, where)
            self.declare(i, where, tuple(t["shape"]), float_ok=True, index_ok=True, uint8_ok=True)
            graph_inputs.append(self.names[i])
        for op in m["ops"]:
            handler = getattr(self, f"op_{op['op']}")      # every supported op has one (checked above)
            try:
                handler(op)
            except (IndexError, KeyError) as exc:          # an operator without the operands its op needs
                raise ValueError(f"{self.path}: {self.where(op)}: malformed operator: it lacks an input, "
                                 f"output or option its op needs ({type(exc).__name__}: {exc}); a damaged "
                                 f"file") from None
        graph_outputs = []
        for i in m["outputs"]:
            if i not in self.names:
                raise ValueError(f"{self.path}: graph output {self.t[i]['name']!r} is "
                                 f"{'a constant or shape arithmetic' if i in self.static else 'never computed'}")
            graph_outputs.append(self.names[i])
        state = self.state_meta()
        graph_inputs += [e["read"] for e in state]
        tmap = {name: int(i) for i, name in self.names.items()}
        meta = {"source": os.fspath(self.path), "format": "tflite", "kernels": self.kernels,
                "datapath": litert_datapath(self.kernels, int16=self.act16), "tflite_tensors": tmap,
                "tflite_folded": {str(k): int(v) for k, v in sorted(self.folded.items())},
                "tflite_ops": [o["op"] for o in m["ops"]]}
        if state:
            meta["state"] = state
        name = os.path.splitext(os.path.basename(os.fspath(self.path)))[0] or "tflite"
        return IntegerGraph(list(self.specs.values()), self.nodes, graph_inputs, graph_outputs, name, meta)

    # ------------------------------------------------------------------ element-wise
    def _binary(self, op, graph_op):
        a, b = op["inputs"][:2]
        y = op["outputs"][0]
        for i in (a, b):
            self.check_int8(i, op)
            self.quant(i, op)
        an, bn = self.activation_tensor(a, op), self.activation_tensor(b, op)
        try:
            shape = np.broadcast_shapes(self.shape[a], self.shape[b])
        except ValueError:
            raise ValueError(f"{self.path}: {self.where(op)}: input shapes {list(self.shape[a])} and "
                             f"{list(self.shape[b])} do not broadcast") from None
        if a in self.static and b in self.static:
            raise ValueError(f"{self.path}: {self.where(op)}: both inputs are constants (not folded by fxpsim)")
        yn = self.declare(y, op, shape)
        attrs = {"activation": self.activation(op)}
        if self.act16 and op["op"] in ("ADD", "SUB"):         # LiteRT's int16 power-of-two path is an option
            attrs["pot_scale_int16"] = bool(op["options"].get("pot_scale_int16", 0))
        self.node(op, graph_op, [an, bn], [yn], attrs)

    def op_ADD(self, op):
        self._binary(op, "tflite_add" if self.kernels == "xnnpack" else "add")

    def op_SUB(self, op):
        self._binary(op, "tflite_sub")

    def op_MUL(self, op):
        self._binary(op, "tflite_mul")

    def _unary(self, op, graph_op, attrs=None, out_float=False):
        x, y = op["inputs"][0], op["outputs"][0]
        xt = self.t[x]
        if not (out_float or graph_op == "tflite_quantize") or xt["type"] != _FLOAT32:
            self.check_int8(x, op)
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, self.shape[x], float_ok=out_float)
        self.node(op, graph_op, [xn], [yn], attrs or {})

    def op_LOGISTIC(self, op):
        self._unary(op, "tflite_logistic")

    def op_TANH(self, op):
        self._unary(op, "tflite_tanh")

    def op_HARD_SWISH(self, op):
        self._unary(op, "tflite_hard_swish")

    def op_LEAKY_RELU(self, op):
        self._unary(op, "tflite_leaky_relu", {"alpha": float(np.float32(op["options"]["alpha"]))})

    def op_RELU(self, op):
        self._unary(op, "tflite_relu", {"activation": "relu"})

    def op_RELU6(self, op):
        self._unary(op, "tflite_relu", {"activation": "relu6"})

    def op_RELU_N1_TO_1(self, op):
        self._unary(op, "tflite_relu", {"activation": "relu_n1_to_1"})

    def op_SOFTMAX(self, op):
        self._unary(op, "tflite_softmax", {"beta": float(np.float32(op["options"]["beta"]))})


def import_tflite(path, *, kernels: str = "reference") -> IntegerGraph:
    """Import an int8 or 16x8 ``.tflite`` model as an :class:`~fxpsim.graph.IntegerGraph` that runs bit for bit as
    LiteRT does.

    Parameters
    ----------
    path : str or os.PathLike
        A full-integer quantized TFLite flatbuffer (int8 activations and weights, int32 biases; or 16x8: int16
        activations, int8 weights, int64 biases; float, int8, int16 or uint8 graph inputs and outputs).
    kernels : {"reference", "builtin", "xnnpack"}
        The LiteRT kernel set to reproduce: ``OpResolverType.BUILTIN_REF``,
        ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` or ``BUILTIN`` (XNNPACK). An op whose arithmetic differs in
        that kernel set in a way fxpsim does not reproduce raises ``ValueError``.

    Returns
    -------
    IntegerGraph
        Per-sample tensor shapes (TFLite's batch of 1 dropped), TFLite tensor names,
        ``meta = {"source", "format": "tflite", "kernels", "datapath", "tflite_tensors", ...}``.
        ``graph.run(x)`` (no datapath) runs LiteRT's arithmetic; any other datapath (``fxpsim.preset(...)``)
        changes the accumulator and the requantization of the MAC ops.

    Raises
    ------
    ImportError
        Without the ``tflite`` package (``pip install -e '.[tflite]'``).
    ValueError
        A damaged or truncated file, a float (non-quantized) model, or operators that
        do not import under ``kernels`` (int16 ones included) (one error listing every one: op, count, operator index and output
        tensor, reason, and the supported list).
    """
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {KERNEL_SETS}, got {kernels!r}")
    path = os.fspath(path)
    with open(path, "rb") as fh:
        buf = fh.read()
    model = _read_model(buf, path)
    return _Builder(model, path, kernels).build()
