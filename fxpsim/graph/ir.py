"""The integer graph: named tensors with their integer type and quantization, and op nodes between them.

Every network fxpsim simulates becomes an :class:`IntegerGraph`, whatever it came from (an ``fxpsim.nn``
model through :func:`fxpsim.convert`, a ``.tflite`` or ``.onnx`` file through :func:`fxpsim.import_model`, or
built by hand). Everything downstream (simulation on a datapath, sweeps, reports, RTL vectors, the command
line) reads this one structure.

* A :class:`TensorSpec` is a named tensor: its integer type (``bits``, ``signed``; ``bits = 0`` for a float
  tensor), its quantization (per-tensor or per-channel ``scale`` and ``zero_point`` along ``axis``: real
  value :math:`r = s\\,(q - z)`), its per-sample ``shape`` (activations; the batch is axis 0 at run time) or
  its ``data`` (constants: weights and biases held as integer codes).
* A :class:`Node` names its ``op``, its input and output tensors and plain attributes (stride, padding,
  fused activation, ...). Its integer semantics live in :mod:`fxpsim.graph.ops`, which maps every op onto
  the :mod:`fxpsim.datapath` kernels; the accumulator, overflow mode, order and requantization come from the
  datapath settings the graph runs on, per node (:func:`node_datapath`).

Files: :meth:`IntegerGraph.save` writes one ``.npz`` holding the constants and a JSON description of the
graph (no pickles); :func:`load_graph` reads it back bit for bit and reports a damaged file clearly (both in
:mod:`fxpsim.graph.serialize`). The datapath knobs (:class:`Datapath`, :func:`node_datapath`) live in
:mod:`fxpsim.graph.datapath_settings`; all of these are importable from here.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .datapath_settings import EXACT_DATAPATH, Datapath, node_datapath
from .edits import TrackedDict, TrackedList, bump, frozen, refresh_caches, track
from .edits import plain as _plain
from .validate import check_attrs, check_datapath_arg, check_node_fields, check_datapath, check_shapes, check_tensor, toposort
from .serialize import GRAPH_FORMAT, GRAPH_FORMAT_VERSION, graph_to_json, load_graph, save_graph  # noqa: F401

__all__ = ["TensorSpec", "Node", "IntegerGraph", "load_graph", "EXACT_DATAPATH", "Datapath", "node_datapath"]


@dataclass
class TensorSpec:
    """A named tensor of the graph.

    Parameters
    ----------
    name : str
    bits : int
        Code width (1..64); ``0`` for a float tensor (a float graph input or output).
    signed : bool
    shape : tuple of int
        Per-sample shape of an activation (no batch axis); for a constant, the shape of ``data``.
    scale, zero_point : array-like, optional
        Quantization :math:`r = s (q - z)`: one value (per tensor) or one per channel along ``axis``.
        ``None`` for plain integers (e.g. an unquantized index tensor) and float tensors.
    axis : int, optional
        Channel axis of per-channel quantization (of ``data`` for constants, of the per-sample shape
        otherwise).
    data : ndarray, optional
        The codes of a constant tensor (weights, biases), an integer array.
    """

    name: str
    bits: int
    signed: bool = True
    shape: tuple = ()
    scale: Any = None
    zero_point: Any = None
    axis: int | None = None
    data: Any = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"tensor name must be a non-empty string, got {self.name!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, (int, np.integer)) or not 0 <= self.bits <= 64:
            raise ValueError(f"tensor {self.name!r}: bits must be an int in 0..64 (0 = float), got {self.bits!r}")
        self.bits = int(self.bits)
        if self.data is not None:
            data = np.asarray(self.data)
            if data.dtype.kind not in "iu":
                raise TypeError(f"tensor {self.name!r}: constant data must be integer codes, got dtype {data.dtype}")
            lo, hi = self.code_range
            if data.size and (int(data.min()) < lo or int(data.max()) > hi):
                raise ValueError(f"tensor {self.name!r}: constant codes outside the {self.type_name} range "
                                 f"[{lo}, {hi}]")
            self.data = frozen(data, copy=True)   # read-only: an edit in place cannot go unseen (.edits)
            self.shape = tuple(data.shape)
        if isinstance(self.shape, (str, bytes)) or not hasattr(self.shape, "__iter__") or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: shape must be a sequence of non-negative ints, "
                             f"got {self.shape!r}")
        self.shape = tuple(int(d) for d in self.shape)
        if isinstance(self.signed, (bool, np.bool_)):
            self.signed = bool(self.signed)
        else:
            raise TypeError(f"tensor {self.name!r}: signed must be a bool, got {self.signed!r}")
        if self.axis is not None and (isinstance(self.axis, bool) or not isinstance(self.axis, (int, np.integer))):
            raise TypeError(f"tensor {self.name!r}: axis must be an int or None, got {self.axis!r}")
        if self.scale is not None:
            scale = np.atleast_1d(np.asarray(self.scale, dtype=np.float64))
            if scale.ndim != 1 or not all(math.isfinite(v) and v > 0 for v in scale.tolist()):
                raise ValueError(f"tensor {self.name!r}: scale must be positive and finite, got {self.scale!r}")
            zp = np.zeros(scale.shape, np.int64) if self.zero_point is None else \
                np.atleast_1d(np.asarray(self.zero_point))
            if zp.dtype.kind not in "iu" or zp.shape not in ((1,), scale.shape):
                raise ValueError(f"tensor {self.name!r}: zero_point must be integers, one or one per scale")
            self.scale, self.zero_point = scale, np.broadcast_to(zp.astype(np.int64), scale.shape).copy()
            if scale.size > 1 and self.axis is None:
                raise ValueError(f"tensor {self.name!r}: per-channel scales need an axis")
            frozen(self.scale, copy=False), frozen(self.zero_point, copy=False)
        self._built = True

    def __setattr__(self, key, value):
        """An assignment to a built tensor counts as an edit (:mod:`fxpsim.graph.edits`); arrays stay read-only."""
        if self.__dict__.get("_built"):
            bump()
            value = frozen(value, copy=True) if isinstance(value, np.ndarray) else value
        object.__setattr__(self, key, value)

    def __setstate__(self, state):
        self.__dict__.update(state)
        for key in ("data", "scale", "zero_point"):
            if isinstance(state.get(key), np.ndarray):
                frozen(state[key], copy=False)

    @property
    def is_float(self) -> bool:
        return self.bits == 0

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def per_channel(self) -> bool:
        return self.scale is not None and self.scale.size > 1

    @property
    def code_range(self) -> tuple[int, int]:
        if self.is_float:
            raise ValueError(f"tensor {self.name!r} is a float tensor")
        b = self.bits
        return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if self.signed else (0, (1 << b) - 1)

    @property
    def dtype(self):
        """The numpy dtype that holds the codes (float32 for float tensors)."""
        if self.is_float:
            return np.dtype(np.float32)
        for b, s, u in ((8, np.int8, np.uint8), (16, np.int16, np.uint16), (32, np.int32, np.uint32)):
            if self.bits <= b:
                return np.dtype(s if self.signed else u)
        return np.dtype(np.int64)

    @property
    def type_name(self) -> str:
        return "float32" if self.is_float else f"{'int' if self.signed else 'uint'}{self.bits}"

    def quant_text(self) -> str:
        """``s=0.0235 z=-3`` (per tensor) or ``s[16]=0.0011..0.0042 z=0`` (per channel)."""
        if self.scale is None:
            return ""
        if self.scale.size == 1:
            return f"s={self.scale[0]:.4g} z={int(self.zero_point[0])}"
        zs = np.unique(self.zero_point)
        z = str(int(zs[0])) if zs.size == 1 else f"{int(zs.min())}..{int(zs.max())}"
        return f"s[{self.scale.size}]={self.scale.min():.3g}..{self.scale.max():.3g} z={z}"

    def channel_shape(self, ndim: int) -> tuple:
        """Broadcast shape of per-channel parameters against an array of ``ndim`` dimensions laid out as
        this tensor (a batch axis in front for activations)."""
        shape = [1] * ndim
        if self.per_channel:
            shape[self.axis + (ndim - len(self.shape))] = -1
        return tuple(shape)

    def dequantize(self, codes) -> np.ndarray:
        """Real values :math:`s (q - z)` in float64."""
        codes = np.asarray(codes)
        if self.scale is None:
            return codes.astype(np.float64)
        shape = self.channel_shape(codes.ndim)
        return (codes.astype(np.float64) - self.zero_point.reshape(shape)) * self.scale.reshape(shape)

    def to_json(self) -> dict:
        out = {"name": self.name, "bits": self.bits, "signed": bool(self.signed), "shape": list(self.shape)}
        if self.scale is not None:
            out.update(scale=[float(v) for v in self.scale], zero_point=[int(v) for v in self.zero_point],
                       axis=self.axis)
        if self.is_constant:
            out["constant"] = True
        return out


@dataclass
class Node:
    """An op of the graph: ``op`` reads the tensors named in ``inputs`` and writes those in ``outputs``.

    ``attrs`` hold plain values only (numbers, strings, lists); what each op accepts is listed in
    :data:`fxpsim.graph.ops.OPS`.
    """

    name: str
    op: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)

    def __post_init__(self):
        check_node_fields(self)
        self.inputs, self.outputs = TrackedList(self.inputs), TrackedList(self.outputs)
        self.attrs = track({str(k): _plain(v) for k, v in dict(self.attrs).items()})
        self._built = True

    def __setattr__(self, key, value):
        """An assignment to a built node counts as an edit (:mod:`fxpsim.graph.edits`)."""
        if self.__dict__.get("_built"):
            bump()
            value = track(_plain(value)) if key == "attrs" else TrackedList(value) if key in ("inputs", "outputs") \
                else value
        object.__setattr__(self, key, value)

    def to_json(self) -> dict:
        return {"name": self.name, "op": self.op, "inputs": self.inputs, "outputs": self.outputs,
                "attrs": self.attrs}


class IntegerGraph:
    """A network as integer tensors and op nodes, run in topological order on a batch.

    Parameters
    ----------
    tensors : sequence of TensorSpec
    nodes : sequence of Node
        In any order; they are sorted topologically (a cycle or a tensor written twice is an error).
    inputs, outputs : sequence of str
        Graph input and output tensor names.
    name : str
    meta : dict
        Plain, JSON-ready facts about the graph's origin (e.g. the source file, the kernel set).
    """

    def __init__(self, tensors: Sequence[TensorSpec], nodes: Sequence[Node], inputs: Sequence[str],
                 outputs: Sequence[str], name: str = "graph", meta: Mapping | None = None):
        from .ops import OPS, find_op
        self.name = str(name)
        specs: dict[str, TensorSpec] = {}
        for t in tensors:
            if not isinstance(t, TensorSpec):
                raise TypeError(f"tensors must be TensorSpec objects, got {type(t).__name__}")
            if t.name in specs:
                raise ValueError(f"tensor {t.name!r} is defined twice")
            specs[t.name] = t
        self.tensors = specs          # (a TrackedDict: see __setattr__)
        for what, v in (("inputs", inputs), ("outputs", outputs)):
            if isinstance(v, (str, bytes)) or not all(isinstance(t, str) for t in v):
                raise TypeError(f"graph {what} must be a list of tensor names, got {v!r}")
        self.inputs, self.outputs = list(inputs), list(outputs)
        if not isinstance(meta, (Mapping, type(None))):
            raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
        self.meta = _plain(dict(meta or {}))
        if self.meta.get("datapath"):
            dp = self.meta["datapath"]
            if not isinstance(dp, dict) or not set(dp) <= set(Datapath.__dataclass_fields__):
                raise ValueError(f"meta['datapath'] must be a dict of Datapath fields, got {dp!r}")
            check_datapath(Datapath(**dp))
        names = set()
        for n in nodes:
            if not isinstance(n, Node):
                raise TypeError(f"nodes must be Node objects, got {type(n).__name__}")
            if n.name in names:
                raise ValueError(f"node name {n.name!r} is used twice")
            names.add(n.name)
            if not n.outputs or not all(n.outputs):
                raise ValueError(f"node {n.name!r}: needs at least one named output, got {n.outputs!r}")
            if find_op(n.op) is None:
                raise ValueError(f"node {n.name!r}: unknown op {n.op!r}; known ops: {', '.join(sorted(OPS))}")
            for t in n.inputs + n.outputs:
                if t and t not in self.tensors:
                    raise ValueError(f"node {n.name!r} names tensor {t!r}, which the graph does not define")
        for t in self.inputs + self.outputs:
            if t not in self.tensors:
                raise ValueError(f"graph input/output {t!r} is not a tensor of the graph")
        for t in self.inputs:
            if self.tensors[t].is_constant:
                raise ValueError(f"graph input {t!r} is a constant tensor")
        for t in self.tensors.values():
            check_tensor(t)
        self.nodes: list[Node] = self._toposort(list(nodes))
        for n in self.nodes:
            check_attrs(n)
            OPS[n.op].check(self, n)
            check_shapes(self, n)
        self._built = True

    def __setattr__(self, key, value):
        """Assigning a graph field counts as an edit (:mod:`fxpsim.graph.edits`): plans and caches rebuild."""
        if not key.startswith("_") and self.__dict__.get("_built"):
            bump()
        wrap = {"nodes": TrackedList, "inputs": TrackedList, "outputs": TrackedList, "tensors": TrackedDict,
                "meta": track}.get(key)
        object.__setattr__(self, key, value if wrap is None else wrap(value))

    def __getstate__(self):
        """Pickles and copies hold the graph, not its derived caches (plans, op tables)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") or k == "_built"}

    # ------------------------------------------------------------------ structure
    def _toposort(self, nodes: list) -> list:
        producer: dict[str, Node] = {}
        for n in nodes:
            for t in n.outputs:
                if t in producer:
                    raise ValueError(f"tensor {t!r} is written by both {producer[t].name!r} and {n.name!r}")
                if self.tensors[t].is_constant or t in self.inputs:
                    raise ValueError(f"node {n.name!r} writes {t!r}, a constant or graph input")
                producer[t] = n
        order, ready = toposort(nodes, set(self.inputs) | {k for k, t in self.tensors.items() if t.is_constant})
        for t in self.outputs:
            if t not in ready:
                raise ValueError(f"graph output {t!r} is never computed")
        return order

    def node(self, key) -> Node:
        """A node by name or index."""
        if isinstance(key, (int, np.integer)):
            return self.nodes[int(key)]
        hit = self._index()[0].get(key)
        if hit is not None:
            return hit
        raise KeyError(f"no node named {key!r}; nodes: {', '.join(n.name for n in self.nodes)}")

    def producer(self, tensor: str) -> Node | None:
        """The node that writes ``tensor`` (``None`` for inputs and constants)."""
        return self._index()[1].get(tensor)

    def _index(self) -> tuple[dict, dict]:
        """``(name -> node, tensor -> producer)``, rebuilt when ``nodes`` changes (O(1) look-ups)."""
        key = (id(self.nodes), len(self.nodes), tuple(map(id, self.nodes[:1] + self.nodes[-1:])))
        cached = self.__dict__.get("_node_index")
        if cached is None or cached[0] != key:
            by_name, by_tensor = {}, {}
            for n in self.nodes:
                by_name.setdefault(n.name, n)
                for t in n.outputs:
                    by_tensor.setdefault(t, n)
            cached = self.__dict__["_node_index"] = (key, by_name, by_tensor)
        return cached[1], cached[2]

    def __repr__(self) -> str:
        return (f"IntegerGraph({self.name!r}: {len(self.nodes)} nodes, inputs {self.inputs}, "
                f"outputs {self.outputs})")

    # ------------------------------------------------------------------ running
    @property
    def default_datapath(self) -> Datapath:
        """The datapath the graph runs on when none is given: ``meta["datapath"]`` (the runtime an importer
        reproduces) over :data:`EXACT_DATAPATH`; built once, dropped by any edit like every derived cache."""
        refresh_caches(self)
        if self.__dict__.get("_default_datapath") is None:
            meta = self.meta.get("datapath")
            self.__dict__["_default_datapath"] = Datapath(**meta) if meta else EXACT_DATAPATH
        return self.__dict__["_default_datapath"]

    def run(self, x, datapath=None, *, trace: bool | str = False, keep: bool = False, batch_size: int = 256,
            plan: bool = True):
        """Run a batch through the graph on ``datapath`` (default :attr:`default_datapath`).

        Parameters
        ----------
        x : ndarray or sequence of ndarrays
            One array per graph input, batch on axis 0, in the input tensor's dtype (float32 for a float
            input, the code dtype otherwise; other integer dtypes are accepted when every value fits).
        datapath : HardwareConfig or Datapath, optional
            Accumulator width/overflow/order, bias placement, requantization scheme and rounding, per node
            when it has overrides.
        trace : bool or "peaks"
            Also return one trace per node: ``{"overflows", "adds", "clipped", "acc", ...}``; ``"peaks"``
            adds each MAC node's exact largest |running sum| (``partial_peak``: one more pass over the
            products).
        keep : bool
            Also return every tensor computed (name -> array).
        plan : bool
            Run through the graph's compiled plan for this datapath and these input shapes (:meth:`compile`,
            reused while the graph is unchanged; the same bits); ``False`` dispatches node by node, deriving
            every node's settings again (:func:`fxpsim.graph.plan.run_node_by_node`). A datapath that is not
            hashable always runs node by node.

        Returns
        -------
        ndarray (one output) or list of ndarrays; with ``trace``/``keep`` a tuple
        ``(outputs, traces, tensors)`` (the ones not asked for are ``None``).
        """
        from .plan import plan_for, run_node_by_node
        if trace not in (False, True, "peaks"):
            raise ValueError(f"trace must be False, True or 'peaks', got {trace!r}")
        datapath = self.default_datapath if datapath is None else datapath
        check_datapath_arg(datapath)
        feeds = self._feeds(self._with_state(x))
        n = len(next(iter(feeds.values())))
        if not (trace or keep) and n > batch_size:
            chunks = [self.run([f[i:i + batch_size] for f in feeds.values()], datapath, batch_size=batch_size,
                               plan=plan) for i in range(0, n, batch_size)]
            if len(self.outputs) == 1:
                return np.concatenate(chunks)
            return [np.concatenate([c[j] for c in chunks]) for j in range(len(self.outputs))]
        compiled = plan_for(self, datapath, feeds) if plan else None
        if compiled is None:
            return run_node_by_node(self, feeds, datapath, trace, keep)
        return compiled.run_feeds(feeds, trace, keep)

    def compile(self, datapath=None, batch_shape=None):
        """The graph's execution plan (:class:`fxpsim.graph.plan.ExecutionPlan`) on ``datapath`` (default
        :attr:`default_datapath`) for inputs of ``batch_shape``: one shape per graph input with the batch axis
        (a batch size ``N`` stands for ``(N,) + shape`` of every input; default 1). Every node's settings,
        validated constants, requantization constants, kernel choice and buffers are derived once;
        ``plan.run(x, trace=..., keep=...)`` gives :meth:`run`'s bits. Any later edit of the graph makes the plan
        stale (calling it raises); :meth:`run` compiles and reuses plans by itself."""
        from .plan import compile_plan
        datapath = self.default_datapath if datapath is None else datapath
        check_datapath_arg(datapath)
        shapes = batch_shape if batch_shape is not None else 1
        if isinstance(shapes, (int, np.integer)) and not isinstance(shapes, bool):
            shapes = [(int(shapes),) + self.tensors[t].shape for t in self.inputs]
        shapes = [tuple(int(d) for d in s) for s in shapes]
        want = [self.tensors[t].shape for t in self.inputs]
        if len(shapes) != len(want) or any(len(s) != len(w) + 1 or s[1:] != w or s[0] < 1 for s, w in zip(shapes, want)):
            raise ValueError(f"batch_shape must give (N, ...) for each graph input {self.inputs} with per-sample "
                             f"shapes {want}, got {batch_shape!r}")
        return compile_plan(self, datapath, shapes)

    def _with_state(self, x):
        """``x`` with the initial state appended for a stateful graph given only its other inputs
        (:func:`fxpsim.graph.state.complete_inputs`)."""
        from .state import complete_inputs
        return complete_inputs(self, x)

    def stream(self, frames, datapath=None, *, state=None, trace: bool = False):
        """Run many steps carrying the graph's state (``meta["state"]``): :func:`fxpsim.graph.state.stream`."""
        from .state import stream
        return stream(self, frames, datapath, state=state, trace=trace)

    def run_float(self, x, *, keep: bool = False):
        """The dequantized float execution of the graph: every op computed in float64 on dequantized
        constants (the graph's own float reference). Integer graph inputs are dequantized first.

        Returns the outputs (float64), or ``(outputs, tensors)`` with ``keep``.
        """
        from .ops import run_node_float
        feeds = self._feeds(x)
        values = {k: t.dequantize(t.data) for k, t in self.tensors.items() if t.is_constant}
        for name, v in feeds.items():
            spec = self.tensors[name]
            values[name] = v.astype(np.float64) if spec.is_float else spec.dequantize(v)
        for node in self.nodes:
            outs = run_node_float(self, node, [values[t] if t else None for t in node.inputs])
            for t, v in zip(node.outputs, outs):
                values[t] = v
        outputs = [values[t] for t in self.outputs]
        result = outputs[0] if len(outputs) == 1 else outputs
        if keep:
            return result, {k: v for k, v in values.items() if not self.tensors[k].is_constant}
        return result

    def _feeds(self, x) -> dict:
        from .plan import feeds_of
        return feeds_of(self, x)

    # ------------------------------------------------------------------ description
    def macs(self, node: Node) -> int:
        """Multiply-accumulates of one node per sample."""
        from .ops import OPS
        return int(OPS[node.op].macs(self, node))

    def accumulator_bits_needed(self, node: Node) -> int | None:
        """Worst-case accumulator width of a MAC node: the signed width of the largest
        :math:`|b| + \\sum_k \\max|x - z_x|\\,|w_k - z_w|` over its outputs, or ``None`` for other ops."""
        from .ops import OPS
        bound = OPS[node.op].worst_case_sum(self, node)
        return None if bound is None else int(bound).bit_length() + 1

    def summary(self) -> str:
        """A table of nodes: op, input and output shapes and types, scales, MACs per sample, and the
        worst-case accumulator bits each MAC node needs (see :meth:`accumulator_bits_needed`)."""
        from .summary import graph_summary
        return graph_summary(self)

    def export_vectors(self, directory, x, datapath=None, **options) -> dict:
        """Golden vectors of every node for an RTL testbench: :func:`fxpsim.rtl.export_vectors` on this graph.

        The graph does not import the RTL layer above it; this convenience looks it up by name when called."""
        return importlib.import_module("fxpsim.rtl").export_vectors(self, directory, x, datapath, **options)

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict:
        return graph_to_json(self)

    def save(self, path) -> str:
        """Write the graph to ``path`` (``.npz``: the constants' codes and ``graph.json``; no pickles).
        Returns the path written."""
        return save_graph(self, path)
