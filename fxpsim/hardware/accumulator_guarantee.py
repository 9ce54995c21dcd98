r"""Accumulator-aware re-rounding of an integer graph's weights: a P-bit accumulator that provably never overflows.

:mod:`fxpsim.quant.accumulator_aware` (A2Q) constrains the weights of an ``fxpsim.nn`` model while it trains;
:func:`guarantee_accumulator` applies the same bound after the fact to any :class:`~fxpsim.graph.IntegerGraph`
(an imported ``.tflite`` / ONNX model included), by rescaling and re-rounding the weights of the MAC nodes that
could overflow.

The bound
---------
For output channel :math:`o` of a MAC node with weight codes :math:`q_{o,k}` (zero point 0), bias codes
:math:`b_o` (in the accumulator's LSB :math:`s_x s_{w,o}`) and input codes :math:`c_k \in [lo, hi]` with zero
point :math:`z_x`, every partial sum of the MAC sequence -- any order (sequential, adder tree), the bias preloaded
or added after, padded taps (product 0) included -- satisfies

.. math:: |S| \le |b_o| + \lVert q_o \rVert_1\, x_{max}, \qquad x_{max} = \max(hi - z_x,\ z_x - lo),

so a signed P-bit accumulator (:math:`L = 2^{P-1} - 1`) never overflows, saturating or wrapping, on any input,
when :math:`|b_o| + \lVert q_o \rVert_1 x_{max} \le L`.

Re-rounding
-----------
A channel that violates it gets the factor :math:`\alpha_o = (|b_o| + \lVert q_o \rVert_1 x_{max}) / L > 1` (a
per-tensor weight scale: the largest :math:`\alpha` for every channel) and

.. math::

    b'_o = \mathrm{trunc}(b_o / \alpha_o), \qquad T_o = \lfloor (L - |b'_o|) / x_{max} \rfloor, \qquad
    q'_o = \mathrm{round}_{T_o}(q_o / \alpha_o), \qquad s'_{w,o} = \alpha_o\, s_{w,o},

with :math:`\mathrm{round}_T` A2Q's largest-remainder rounding within the :math:`\ell_1` budget :math:`T`
(``rounding="norm"`` of :class:`~fxpsim.quant.AccumulatorAwareQuantizer`: every :math:`|q'_k - q_k/\alpha| < 1`,
:math:`\lVert q' \rVert_1 \le T`). The real weights :math:`s'_w q'` stay within one new LSB of :math:`s_w q`, the
real bias :math:`s_x s'_w b'` within one of :math:`s_x s_w b`, the requantization follows the new scale (it reads
it from the weight tensor), and :math:`|b'_o| + \lVert q'_o \rVert_1 x_{max} \le |b'_o| + T_o x_{max} \le L`:
checked in integers after rounding. Channels already within the bound are not touched.

The bound is A2Q's (the triangle inequality): it guarantees the width, it does not make the graph exact with
the original one -- the rescaled layers are quantized more coarsely.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..graph.ir import IntegerGraph
from ..quant.accumulator_aware import _round_within

__all__ = ["guarantee_accumulator", "reround_channels", "worst_case_magnitudes", "AccumulatorGuarantee",
           "SUPPORTED_OPS"]

#: MAC ops whose weights can be re-rounded -> the output-channel axis of their weight tensor.
SUPPORTED_OPS = {"conv2d": 0, "fully_connected": 0, "depthwise_conv2d": 3, "tflite_conv2d": 0,
                 "tflite_fully_connected": 0, "tflite_depthwise_conv2d": 3, "qlinear_conv": 0, "qlinear_matmul": 0}


@dataclass
class AccumulatorGuarantee:
    """What :func:`guarantee_accumulator` did: the new ``graph`` and one record per MAC node (``node``, ``op``,
    ``x_max``, ``worst_before`` / ``worst_after`` (the largest :math:`|b| + \\lVert q \\rVert_1 x_{max}`),
    ``channels_changed``, ``alpha_max``)."""

    graph: IntegerGraph
    accumulator_bits: int
    records: list = field(default_factory=list)

    def table(self) -> str:
        from ..report.render import format_table
        rows = [[r["node"], r["op"], r["x_max"], r["worst_before"], r["worst_after"], r["channels_changed"],
                 f"{r['alpha_max']:.4f}"] for r in self.records]
        return format_table(rows, ["node", "op", "x_max", "worst before", "worst after", "channels changed",
                                   "max alpha"])


def reround_channels(q, b, x_max: int, accumulator_bits: int, per_tensor: bool = False):
    """The re-rounding of the module docstring on one node: ``q [C, K]`` integer weight codes (one row per
    output channel), ``b [C]`` bias codes (or None), ``x_max`` the largest :math:`|c - z_x|` of the input codes.

    Returns ``(q', b', alpha [C])`` (int64, int64 or None, float64; alpha 1 where a row is untouched) with
    :math:`|b'_o| + \\lVert q'_o \\rVert_1 x_{max} \\le 2^{P-1} - 1` for every row.
    """
    q = np.asarray(q, dtype=np.int64)
    if q.ndim != 2:
        raise ValueError(f"reround_channels: q must be [channels, K] integer codes, got shape {q.shape}")
    bits, x_max = int(accumulator_bits), int(x_max)
    if not 2 <= bits <= 64 or x_max < 0:
        raise ValueError(f"reround_channels: need 2 <= accumulator_bits <= 64 and x_max >= 0, got {bits}, {x_max}")
    limit = (1 << (bits - 1)) - 1
    bias = np.zeros(q.shape[0], np.int64) if b is None else np.asarray(b, dtype=np.int64).reshape(-1)
    if bias.shape != (q.shape[0],):
        raise ValueError(f"reround_channels: b must have one value per row of q ({q.shape[0]}), got {bias.shape}")
    worst = worst_case_magnitudes(q, bias, x_max)
    alpha = np.array([max(1.0, w / limit) for w in worst])
    over = np.array([w > limit for w in worst], bool)
    if per_tensor and over.any():
        alpha[:] = alpha.max()
        over[:] = True
    q_new, b_new = q.copy(), bias.copy()
    if over.any():
        b_new[over] = np.trunc(bias[over] / alpha[over]).astype(np.int64)
        budget = (limit - np.abs(b_new[over])) // max(x_max, 1) if x_max else np.full(int(over.sum()), 1 << 62)
        r = q[over] / alpha[over, None]
        q_new[over] = np.clip(_round_within(r, budget, "norm"), -np.abs(q[over]), np.abs(q[over])).astype(np.int64)
    for o in np.flatnonzero(over):              # the guarantee, in integers
        if abs(int(b_new[o])) + int(np.abs(q_new[o]).sum()) * x_max > limit:   # pragma: no cover - by construction
            raise AssertionError(f"re-rounding row {o} left |b| + |q|_1 x_max above {limit}")
    return q_new, (None if b is None else b_new), alpha


def worst_case_magnitudes(q, b, x_max: int) -> list:
    r"""Per row of ``q [C, K]``: :math:`|b_o| + \lVert q_o \rVert_1 x_{max}` in Python ints (exact), the bound on
    every partial sum of that output (``b`` None: no bias)."""
    bias = [0] * len(q) if b is None else [int(v) for v in np.asarray(b).reshape(-1)]
    return [abs(v) + int(n) * int(x_max) for v, n in zip(bias, np.abs(np.asarray(q, np.int64)).sum(axis=1))]


def _check_node(graph, node):
    where = f"guarantee_accumulator: node {node.name!r} ({node.op})"
    if node.op not in SUPPORTED_OPS:
        raise ValueError(f"{where}: not a MAC op whose weights can be re-rounded ({', '.join(SUPPORTED_OPS)})")
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    if xs.is_float or xs.zero_point is None:
        raise ValueError(f"{where}: its input {xs.name!r} is not integer codes with a zero point")
    if not ws.is_constant or ws.scale is None:
        raise ValueError(f"{where}: its weights {ws.name!r} are not constant codes with a scale")
    if np.any(ws.zero_point):
        raise ValueError(f"{where}: its weights {ws.name!r} have a nonzero zero point; the bound needs "
                         "symmetric weights (zero point 0)")
    if int(node.attrs.get("bias_shift", 0)) or int(node.attrs.get("product_shift", 0)):
        raise ValueError(f"{where}: bias_shift / product_shift are not modelled by the re-rounding")
    if ws.per_channel and ws.axis != SUPPORTED_OPS[node.op]:
        raise ValueError(f"{where}: per-channel weight scales along axis {ws.axis}, expected "
                         f"{SUPPORTED_OPS[node.op]} (the output channels)")


def guarantee_accumulator(graph: IntegerGraph, accumulator_bits: int, *, nodes=None) -> AccumulatorGuarantee:
    """A copy of ``graph`` whose MAC nodes can never overflow a signed ``accumulator_bits`` accumulator, on
    any input, in any order, saturating or wrapping (module docstring).

    Parameters
    ----------
    graph : IntegerGraph
    accumulator_bits : int
        P, 2..64.
    nodes : iterable of str, optional
        The MAC nodes to constrain (default: every node of a supported MAC op; a graph holding another MAC op
        with a MAC view is refused, naming it, rather than left unconstrained).

    Returns
    -------
    AccumulatorGuarantee
        The new graph (weights, weight scales, biases and bias scales replaced; the input graph unchanged)
        and one record per constrained node.
    """
    from ..graph.mac_view import MAC_VIEWS
    from ..graph.registry import find_op
    if not isinstance(graph, IntegerGraph):
        raise TypeError(f"guarantee_accumulator takes an IntegerGraph, got {type(graph).__name__}")
    if isinstance(accumulator_bits, bool) or not isinstance(accumulator_bits, (int, np.integer)) or \
            not 2 <= accumulator_bits <= 64:
        raise ValueError(f"guarantee_accumulator: accumulator_bits must be an int in 2..64, got {accumulator_bits!r}")
    if nodes is None:
        for nd in graph.nodes:
            find_op(nd.op)
            if nd.op not in SUPPORTED_OPS and nd.op in MAC_VIEWS:
                raise ValueError(f"guarantee_accumulator: node {nd.name!r} ({nd.op}) accumulates but its weights "
                                 f"cannot be re-rounded; pass nodes=[...] without it")
        chosen = [nd for nd in graph.nodes if nd.op in SUPPORTED_OPS]
    else:
        names = [nodes] if isinstance(nodes, str) else list(nodes)
        chosen = [graph.node(n) for n in names]
    for nd in chosen:
        _check_node(graph, nd)
    uses: dict = {}
    for nd in graph.nodes:
        for t in dict.fromkeys(nd.inputs):      # every input: a node reading a MAC's weights or bias as its data
            if t:                               # (input 0, or a fourth input) would change with them too
                uses.setdefault(t, []).append(nd.name)
    tensors = dict(graph.tensors)
    out = AccumulatorGuarantee(graph=graph, accumulator_bits=int(accumulator_bits))
    for nd in chosen:
        for t in [u for u in nd.inputs[1:3] if u]:
            if len(uses[t]) > 1:
                raise ValueError(f"guarantee_accumulator: tensor {t!r} is shared by nodes {uses[t]}; re-rounding "
                                 f"it for node {nd.name!r} would change the others")
        out.records.append(_reround_node(graph, nd, tensors, int(accumulator_bits)))
    meta = dict(graph.meta, accumulator_guarantee={"accumulator_bits": int(accumulator_bits),
                                                   "nodes": [r["node"] for r in out.records]})
    out.graph = IntegerGraph(list(tensors.values()), graph.nodes, graph.inputs, graph.outputs, graph.name, meta)
    return out


def _reround_node(graph, node, tensors, bits) -> dict:
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    bname = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    lo, hi = xs.code_range
    zx = int(xs.zero_point[0])
    x_max = max(hi - zx, zx - lo)
    axis = SUPPORTED_OPS[node.op]
    w = np.moveaxis(ws.data.astype(np.int64), axis, 0)
    q = w.reshape(w.shape[0], -1)
    b = tensors[bname].data.astype(np.int64) if bname else None
    q_new, b_new, alpha = reround_channels(q, b, x_max, bits, per_tensor=not ws.per_channel)
    limit = (1 << (bits - 1)) - 1
    rec = {"node": node.name, "op": node.op, "x_max": x_max,
           "worst_before": max(worst_case_magnitudes(q, b, x_max), default=0),
           "worst_after": max(worst_case_magnitudes(q_new, b_new, x_max), default=0),
           "channels_changed": int(np.count_nonzero(alpha > 1)),
           "alpha_max": float(alpha.max(initial=1.0)), "limit": limit}
    if not rec["channels_changed"]:
        return rec
    data = np.moveaxis(q_new.reshape(w.shape), 0, axis).astype(ws.data.dtype)
    scale = ws.scale * (alpha if ws.per_channel else alpha[:1])
    tensors[ws.name] = dataclasses.replace(ws, data=data, scale=scale)
    if bname:
        bs = tensors[bname]
        bscale = None if bs.scale is None else bs.scale * (alpha if bs.scale.size == alpha.size else alpha[:1])
        tensors[bname] = dataclasses.replace(bs, data=b_new.astype(bs.data.dtype), scale=bscale)
    return rec
