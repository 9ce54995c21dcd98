"""Validation of a whole :class:`~fxpsim.graph.ir.IntegerGraph` when it is built or loaded, so that a graph
that builds runs: every attribute of every node and the shapes of the core ops, each error naming the node.

* :func:`check_attrs` checks the attributes by name, for every op (the core set's and each frontend's):
  ``stride``/``dilation``/``pool_size`` positive ints (one, or one per spatial axis), ``padding`` ``"SAME"``,
  ``"VALID"`` or ``[[top, bottom], [left, right]]`` of non-negative ints, ``activation`` one of
  :data:`ACTIVATIONS`, ``clip`` ``[lo, hi]`` ints with ``lo <= hi``, ``bias_shift``/``product_shift`` ints
  in 0..62, ``rounding`` a rounding mode's name.
* :func:`check_tensor` checks a tensor's per-channel quantization against its shape.
* :func:`check_shapes` checks that each core op's output shape is what the op computes from its inputs:
  for a convolution with explicit pads :math:`o = \\lfloor (h + p_t + p_b - ((k - 1) d + 1)) / s \\rfloor + 1`,
  ``SAME`` :math:`o = \\lceil h / s \\rceil`, ``VALID`` :math:`o = \\lfloor (h - ((k-1)d+1)) / s \\rfloor + 1
  \\ge 1`; a fully connected layer ``(..., K) x (O, K) -> (..., O)``; elementwise ops numpy broadcasting;
  ``reshape`` the same element count; ``concat`` equal shapes but along ``axis``, summed there.
"""
from __future__ import annotations

import heapq
import math

from collections.abc import Mapping

import numpy as np

__all__ = ["ACTIVATIONS", "MAX_ELEMENTS", "check_attrs", "check_tensor", "check_shapes", "check_datapath", "check_node_fields", "check_datapath_arg",
           "toposort"]

ACTIVATIONS = (None, "none", "relu", "relu6", "relu_n1_to_1")
#: Largest per-sample element count of a tensor (a declared shape beyond it is damage, not a model).
MAX_ELEMENTS = 1 << 40


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _where(node) -> str:
    return f"node {node.name!r} ({node.op})"


def check_attrs(node) -> None:
    """Check the attributes every op shares by name (see the module docstring)."""
    a = node.attrs
    for key in ("stride", "dilation", "pool_size"):
        if key in a:
            v = a[key]
            vals = [v] if _int(v) else v if isinstance(v, list) and len(v) in (1, 2) else None
            if vals is None or not all(_int(e) and 1 <= e <= 1 << 20 for e in vals):
                raise ValueError(f"{_where(node)}: {key} must be a positive int or two (one per spatial axis), "
                                 f"got {v!r}")
    if "padding" in a:
        p = a["padding"]
        ok = p in ("SAME", "VALID") or (isinstance(p, list) and len(p) == 2 and all(
            isinstance(side, list) and len(side) == 2 and all(_int(e) and 0 <= e <= 1 << 20 for e in side)
            for side in p))
        if not ok:
            raise ValueError(f"{_where(node)}: padding must be 'SAME', 'VALID' or [[top, bottom], [left, right]] "
                             f"of non-negative ints, got {p!r}")
    if "activation" in a and a["activation"] not in ACTIVATIONS:
        raise ValueError(f"{_where(node)}: activation must be one of {[x for x in ACTIVATIONS if x]}, "
                         f"got {a['activation']!r}")
    if "clip" in a and a["clip"] is not None:
        c = a["clip"]
        if not (isinstance(c, list) and len(c) == 2 and all(_int(e) for e in c) and c[0] <= c[1]):
            raise ValueError(f"{_where(node)}: clip must be [lo, hi] integer codes with lo <= hi, got {c!r}")
    for key in ("bias_shift", "product_shift"):
        if key in a and not (_int(a[key]) and 0 <= a[key] <= 62):
            raise ValueError(f"{_where(node)}: {key} must be an int in 0..62, got {a[key]!r}")
    if a.get("rounding") is not None:
        from ..core.fixed import Rounding
        try:
            Rounding.parse(a["rounding"]) if hasattr(Rounding, "parse") else Rounding(a["rounding"])
        except (ValueError, TypeError, KeyError):
            raise ValueError(f"{_where(node)}: rounding {a['rounding']!r} is not a rounding mode") from None


def check_tensor(t) -> None:
    """Check a tensor's shape size and its per-channel quantization against its shape."""
    if math.prod(t.shape) > MAX_ELEMENTS:
        raise ValueError(f"tensor {t.name!r}: shape {list(t.shape)} holds over 2^40 elements per sample")
    if t.zero_point is not None and not t.is_float:
        lo, hi = t.code_range
        zps = t.zero_point.tolist()
        if min(zps) < lo or max(zps) > hi:
            raise ValueError(f"tensor {t.name!r}: zero point outside the {t.type_name} range [{lo}, {hi}]")
    if t.scale is not None and t.scale.size > 1:
        if not _int(t.axis) or not -len(t.shape) <= t.axis < len(t.shape):
            raise ValueError(f"tensor {t.name!r}: per-channel axis {t.axis!r} is not an axis of shape "
                             f"{list(t.shape)}")
        if t.shape[t.axis] != t.scale.size:
            raise ValueError(f"tensor {t.name!r}: {t.scale.size} per-channel scales along axis {t.axis}, which "
                             f"has {t.shape[t.axis]} channels")


def _pair(v, default=1):
    v = default if v is None else v
    return (v, v) if _int(v) else (v[0], v[-1])


def _conv_out(node, hw, khw, **override):
    a = {**node.attrs, **override}
    stride, dilation = _pair(a.get("stride")), _pair(a.get("dilation"))
    padding = a.get("padding", "VALID")
    out = []
    for i, (n, k, s, d) in enumerate(zip(hw, khw, stride, dilation)):
        ke = (k - 1) * d + 1
        if padding == "SAME":
            o = -(-n // s)
        else:
            pads = (0, 0) if padding == "VALID" else padding[i]
            o = (n + pads[0] + pads[1] - ke) // s + 1
        if o < 1:
            raise ValueError(f"{_where(node)}: a {ke}-wide window does not fit the {n}-wide input "
                             f"(padding {padding!r}, stride {s})")
        out.append(o)
    return tuple(out)


def _expect(node, got, want, what="output"):
    if tuple(got) != tuple(want):
        raise ValueError(f"{_where(node)}: {what} shape is {list(got)}, the op computes {list(want)} from its "
                         "inputs and attributes")


def _check_requantizer(graph, node) -> None:
    """The graph's own datapath must be able to requantize the MAC node (its multipliers and shifts exist)."""
    dp = graph.default_datapath
    if dp.requantization not in ("tflite-double", "tflite-single", "shift", "float"):
        return
    from .mac_ops import requantizer_for
    try:
        requantizer_for(graph, node, dp)
    except ValueError as exc:
        raise ValueError(f"{_where(node)}: cannot requantize on the graph's datapath ({exc})") from None


def check_shapes(graph, node) -> None:
    """Check that a core op's output shape follows from its inputs (other ops: nothing)."""
    spec = graph.tensors
    ins = [spec[t] for t in node.inputs if t]
    out = spec[node.outputs[0]].shape if node.outputs else None
    op = node.op
    if op in ("fully_connected", "conv2d", "depthwise_conv2d"):
        x, w = ins[0].shape, ins[1].shape
        if len(node.inputs) > 2 and node.inputs[2]:
            b = spec[node.inputs[2]]
            if not b.is_constant or b.shape != (w[-1] if op == "depthwise_conv2d" else w[0],):
                raise ValueError(f"{_where(node)}: the bias must be a constant of shape "
                                 f"[{w[-1] if op == 'depthwise_conv2d' else w[0]}], got {list(b.shape)}")
        if op == "fully_connected":
            if len(w) != 2 or not x or x[-1] != w[1]:
                raise ValueError(f"{_where(node)}: weights {list(w)} do not take inputs of shape {list(x)} "
                                 "(x [..., K], w [O, K])")
            _expect(node, out, x[:-1] + (w[0],))
            _check_requantizer(graph, node)
            return
        if len(x) != 3 or len(w) != 4:
            raise ValueError(f"{_where(node)}: needs x [H, W, C] and w of rank 4, got {list(x)} and {list(w)}")
        if op == "conv2d" and w[3] != x[2]:
            raise ValueError(f"{_where(node)}: weights {list(w)} read {w[3]} channels, the input has {x[2]}")
        if op == "depthwise_conv2d" and (w[0] != 1 or w[3] % x[2]):
            raise ValueError(f"{_where(node)}: depthwise weights {list(w)} must be [1, KH, KW, C*M] for C = {x[2]}")
        _expect(node, out, _conv_out(node, x[:2], w[1:3]) + ((w[0],) if op == "conv2d" else (w[3],)))
        _check_requantizer(graph, node)
    elif op in ("max_pool2d", "avg_pool2d"):
        x = ins[0].shape
        if len(x) != 3:
            raise ValueError(f"{_where(node)}: needs an input [H, W, C], got {list(x)}")
        k = _pair(node.attrs.get("pool_size"))
        node_s = node.attrs.get("stride", node.attrs.get("pool_size"))
        _expect(node, out, _conv_out(node, x[:2], k, stride=node_s, dilation=1) + (x[2],))
    elif op == "reshape":
        if int(np.prod(out, dtype=object)) != int(np.prod(ins[0].shape, dtype=object)):
            raise ValueError(f"{_where(node)}: cannot reshape {list(ins[0].shape)} to {list(out)}")
    elif op in ("quantize", "dequantize", "clamp", "sigmoid", "tanh", "hard_swish"):
        _expect(node, out, ins[0].shape)
        if op == "quantize" and (spec[node.outputs[0]].is_float or spec[node.outputs[0]].scale is None):
            raise ValueError(f"{_where(node)}: the output needs integer codes with a scale")
        if op == "dequantize" and (ins[0].is_float or ins[0].scale is None):
            raise ValueError(f"{_where(node)}: the input needs integer codes with a scale")
    elif op in ("add", "mul"):
        try:
            want = np.broadcast_shapes(ins[0].shape, ins[1].shape)
        except ValueError:
            raise ValueError(f"{_where(node)}: input shapes {list(ins[0].shape)} and {list(ins[1].shape)} do not "
                             "broadcast") from None
        _expect(node, out, want)
        if op == "add" and graph.default_datapath.requantization in ("tflite-double", "tflite-single", "native"):
            from ..datapath.tflite_params import tflite_add_params
            y = spec[node.outputs[0]]
            try:   # the graph's own datapath runs TFLite's ADD: its multipliers must exist
                tflite_add_params(float(ins[0].scale[0]), float(ins[1].scale[0]), float(y.scale[0]), 20)
            except ValueError as exc:
                raise ValueError(f"{_where(node)}: {exc}") from None
    elif op == "concat":
        axis = node.attrs.get("axis", -1)
        shapes = [t.shape for t in ins]
        rank = len(shapes[0])
        ax = axis % rank
        if any(len(s) != rank or s[:ax] + s[ax + 1:] != shapes[0][:ax] + shapes[0][ax + 1:] for s in shapes):
            raise ValueError(f"{_where(node)}: input shapes {[list(s) for s in shapes]} differ off axis {axis}")
        _expect(node, out, shapes[0][:ax] + (sum(s[ax] for s in shapes),) + shapes[0][ax + 1:])


def check_datapath(dp) -> None:
    """Check a recorded datapath's fields (an edited file's ``meta["datapath"]``)."""
    b = dp.accumulator_bits
    if isinstance(b, bool) or not isinstance(b, int) or not 2 <= b <= 64:
        raise ValueError(f"meta['datapath']: accumulator_bits must be an int in 2..64, got {b!r}")
    choices = {"accumulator_overflow": ("wrap", "saturate"), "overflow_at": ("add", "end"),
               "bias_add": ("after", "preload"), "activation_clamp": (True, False)}
    for key, allowed in choices.items():
        if getattr(dp, key) not in allowed:
            raise ValueError(f"meta['datapath']: {key} must be one of {list(allowed)}, got {getattr(dp, key)!r}")
    for key in ("name", "accumulator_order", "requantization", "rounding"):
        if not isinstance(getattr(dp, key), str):
            raise ValueError(f"meta['datapath']: {key} must be a string, got {getattr(dp, key)!r}")


def toposort(nodes: list, ready: set) -> tuple[list, set]:
    """Nodes in an order where each reads only tensors in ``ready`` or written before (Kahn's algorithm:
    linear in nodes + edges; ties keep the given order). Returns ``(order, ready)`` (``ready`` grown by every
    output)."""
    waiting: dict[str, list] = {}
    missing_count = []
    order, queue = [], []
    for i, n in enumerate(nodes):
        need = {t for t in n.inputs if t and t not in ready}
        missing_count.append(len(need))
        for t in need:
            waiting.setdefault(t, []).append(i)
        if not need:
            queue.append(i)
    heapq.heapify(queue)
    while queue:
        i = heapq.heappop(queue)
        order.append(nodes[i])
        for t in nodes[i].outputs:
            ready.add(t)
            for j in waiting.pop(t, ()):
                missing_count[j] -= 1
                if missing_count[j] == 0:
                    heapq.heappush(queue, j)
    if len(order) != len(nodes):
        missing = sorted({t for n in nodes for t in n.inputs if t and t not in ready})
        raise ValueError(f"the graph has a cycle or reads tensors nothing writes: {missing[:5]}")
    return order, ready


def check_node_fields(node) -> None:
    """Check a :class:`~fxpsim.graph.ir.Node`'s name, op, tensor lists and attrs types."""
    if not isinstance(node.name, str) or not node.name:
        raise ValueError(f"node name must be a non-empty string, got {node.name!r}")
    if not isinstance(node.op, str):
        raise TypeError(f"node {node.name!r}: op must be a string, got {node.op!r}")
    for what in ("inputs", "outputs"):
        v = getattr(node, what)
        if isinstance(v, (str, bytes)) or not all(isinstance(t, str) for t in v):
            raise TypeError(f"node {node.name!r}: {what} must be a list of tensor names, got {v!r}")
    if not isinstance(node.attrs, Mapping):
        raise TypeError(f"node {node.name!r}: attrs must be a dict, got {type(node.attrs).__name__}")


def check_datapath_arg(datapath) -> None:
    """A datapath argument must carry the :class:`Datapath` fields (a ``Datapath`` or a HardwareConfig)."""
    if isinstance(datapath, str):
        raise TypeError(f"datapath must be a Datapath or a HardwareConfig, got the string {datapath!r}: pass "
                        f"fxpsim.preset({datapath!r}) (the graph layer does not read preset files)")
    if getattr(datapath, "accumulator_preset", None) is not None:
        raise TypeError(f"datapath {getattr(datapath, 'name', '')!r} is a float datapath (accumulator.preset = "
                        f"{datapath.accumulator_preset!r}); an IntegerGraph runs integer datapaths: run an fxpsim.nn "
                        "model on it with fxpsim.simulate(model, config, x) or fxpsim.graph.float_run.run_float_graph")
    missing = [f for f in ("accumulator_bits", "accumulator_overflow", "requantization") if not hasattr(datapath, f)]
    if missing:
        raise TypeError(f"datapath must be a Datapath or a HardwareConfig, got {type(datapath).__name__} "
                        f"(no {', '.join(missing)})")
