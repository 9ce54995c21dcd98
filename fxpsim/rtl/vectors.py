r"""Golden vectors for RTL verification: every node's codes, parameters and accumulators as files.

:func:`export_vectors` runs a batch through an :class:`~fxpsim.graph.IntegerGraph` on a datapath and writes,
per node, what a testbench needs to drive a block and check it: input codes, weights, biases, the
requantization parameters, the accumulator values the requantizer saw and the output codes, plus optional
MAC traces (the running accumulator after every add of chosen outputs). :func:`fxpsim.rtl.compare`
reads an RTL's dump of the same files back and locates the first mismatch.

Directory layout (``DIR`` is the ``directory`` argument)::

    DIR/manifest.json               every file: node, role, shape, layout, bits, signedness, quantization
    DIR/fxpsim_params.svh           Verilog/SystemVerilog localparams (shapes, widths, zero points, ...)
    DIR/NN_<node>/<role>.<ext>      one folder per node, NN = its position in run (dataflow) order
    DIR/NN_<node>/tb_dense/         fully connected nodes: the exact inputs of examples/rtl/tb_dense.v
                                    (x.hex, w.hex, bias.hex, mult.hex, shift.hex, params.env)

``<role>`` is ``input`` (``input0``, ``input1``, ... for nodes with several activation inputs), ``weights``,
``bias``, ``multiplier``, ``shift`` (``scale`` for float requantization), ``accumulator``, ``output``,
``mac_trace`` and ``mac_products``; ``<ext>`` one per requested format:

* ``hex``: ``$readmemh`` (:func:`fxpsim.rtl.write_mem`, radix 16): one word per line, the two's-complement
  code in exactly the tensor's width (``ceil(bits/4)`` hex digits), C order (last index fastest), after a
  ``//`` header that states the shape, the layout with its word-index formula, the width and signedness.
* ``mem``: ``$readmemb``, the same with ``bits`` binary digits per word.
* ``npy``: the codes as a numpy array (narrowest integer dtype of the width; float32 for float tensors).
* ``csv``: decimal, one row per line (arrays of more than two dimensions as ``[first axis][rest]``, the
  header states the shape).

Float tensors (a float graph input) are written as ``npy`` only.  Layouts: activations ``[N][K]`` (input of a
fully connected node), ``[N][M]`` (its output and accumulator), ``NHWC``; weights ``[M][K]`` (fully
connected, TFLite), ``OHWI`` (conv2d), ``1HWC`` (depthwise, ``[1][KH][KW][C*mult]``); per-channel
parameters ``[M]`` / ``[C]``; MAC traces ``[T][S]`` (traced output ``t``, step ``s``).

Accumulator semantics written to the files (and recomputed by :func:`mac_sequence`), for one output of a MAC
node with products :math:`p_k` in the datapath's order (fully connected: ``k``; conv2d: taps ``(i, j, c)``
row-major, padded taps as zero products; depthwise: ``(i, j)``):

* ``s_0 = bias`` when the bias is preloaded (``bias_add = "preload"``), else ``0``;
* sequential order: ``s_{k+1} = fit(s_k + p_k)``; tree order: the pairwise adder tree's adds, level by
  level, then ``fit(s_0 + root)`` when there is a preloaded bias;
* bias added after (``bias_add = "after"``): one more step ``fit(s + bias)``;
* ``overflow_at = "end"``: the sums are exact and one last step fits the total.

``fit`` is the accumulator's overflow rule at its width. The bias written (``bias`` role) is the value the
datapath adds: the bias register saturates a bias wider than the accumulator. A MAC trace row holds
``s_0, s_1, ...`` of one output; its last value is that output's accumulator.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..graph import ops as _ops
from ..graph.ir import node_datapath
from .mac_model import _tap_labels, fit_value, mac_products, mac_run, mac_sequence
from .memfile import write_csv_codes, write_mem
from .svh import _write_svh

__all__ = ["export_vectors", "mac_sequence", "mac_products", "mac_run", "fit_value", "FORMATS", "ROLE_ORDER",
           "MANIFEST", "SVH", "VECTORS_FORMAT"]

FORMATS = ("hex", "mem", "npy", "csv")
MANIFEST = "manifest.json"
SVH = "fxpsim_params.svh"
VECTORS_FORMAT = "fxpsim-golden-vectors"
VECTORS_VERSION = 1
#: Roles of a node's files in dataflow order (what the first-mismatch locator walks through).
ROLE_ORDER = ("input", "weights", "bias", "multiplier", "shift", "scale", "mac_products", "mac_trace",
              "accumulator", "output")
_MAC_OPS = ("fully_connected", "conv2d", "depthwise_conv2d")
_TB_DIR = "tb_dense"
_TB_OUTPUTS = {"accumulator": "acc_out.hex", "output": "y_out.hex"}
DEFAULT_TRACE_LIMIT = 64


# ----------------------------------------------------------------------------------------- small helpers
def _name(value) -> str:
    """An enum's value or the string itself."""
    return str(getattr(value, "value", value))


def _safe(name: str) -> str:
    """File-system-safe form of a node name."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    return s or "node"


def _sv_id(name: str) -> str:
    """A Verilog identifier for a node: ``FXP_`` + the name in upper case, other characters as ``_``."""
    return "FXP_" + re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).strip("_").upper()


def _bits_needed(arr) -> int:
    """Signed width that holds every value of ``arr`` (at least 2)."""
    a = np.asarray(arr)
    if not a.size:
        return 2
    lo, hi = int(a.min()), int(a.max())
    return max(2, max((-lo - 1).bit_length() if lo < 0 else 0, hi.bit_length()) + 1)


def _dtype_for(bits: int, signed: bool):
    for b, s, u in ((8, np.int8, np.uint8), (16, np.int16, np.uint16), (32, np.int32, np.uint32)):
        if bits <= b:
            return np.dtype(s if signed else u)
    return np.dtype(np.int64 if signed or bits < 64 else np.uint64)


def _word_formula(axes: Sequence[str], shape: Sequence[int]) -> str:
    """``word = (n*8 + h)*8 + w`` style index formula of a C-order array."""
    if not axes:
        return "word = 0"
    expr = axes[0]
    for a, d in zip(axes[1:], shape[1:]):
        expr = f"({expr})*{d} + {a}" if "+" in expr else f"{expr}*{d} + {a}"
    return f"word = {expr}"


def _quant_json(spec) -> dict | None:
    if spec is None or spec.scale is None:
        return None
    return {"scale": [float(v) for v in spec.scale], "zero_point": [int(v) for v in spec.zero_point],
            "axis": spec.axis}


def _activation_layout(per_sample: tuple, kind: str) -> tuple[str, list]:
    """Layout string and axis names of an activation [N, *per_sample]; kind 'k' (FC input), 'm' (FC output)."""
    if len(per_sample) == 1:
        return ("[N][K]", ["n", "k"]) if kind == "k" else ("[N][M]", ["n", "m"]) if kind == "m" else \
            ("[N][C]", ["n", "c"])
    if len(per_sample) == 3:
        return "NHWC", ["n", "h", "w", "c"]
    if not per_sample:
        return "[N]", ["n"]
    axes = ["n"] + [f"d{i}" for i in range(1, len(per_sample) + 1)]
    return "".join(f"[{a.upper()}]" for a in axes), axes


# ----------------------------------------------------------------------------------------- node parameters
def _requantizer_for(graph, node, dp):
    """The MAC node's Requantizer, looked up where the graph's MAC ops take it from (at call time)."""
    try:
        from ..graph import mac_ops as module
    except ImportError:                     # older layout: the MAC ops live in graph.ops
        module = _ops
    return module.requantizer_for(graph, node, dp)


def _mac_entry(graph, node, dp, x_shape) -> tuple[dict, Any]:
    """The manifest's ``mac`` entry of a MAC node, and its Requantizer."""
    xs, ws, ys = (graph.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    bs = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    act = node.attrs.get("activation", "none")
    lo, hi = _ops._clamp_codes(graph, node, node.outputs[0], act)
    rq = _requantizer_for(graph, node, dp)
    wz = [int(v) for v in ws.zero_point]
    n_out = ys.shape[-1]
    K = int(np.prod(ws.data.shape[1:])) if node.op != "depthwise_conv2d" else int(ws.data.shape[1] * ws.data.shape[2])
    scheme = dp.requantization
    if node.op == "fully_connected" and getattr(dp, "dense_requantization", None):
        scheme = dp.dense_requantization
    mac = {"op": node.op, "K": K, "out_channels": int(n_out), "x_zp": int(xs.zero_point[0]),
           "w_zp": wz[0] if len(set(wz)) == 1 else wz, "out_zp": int(ys.zero_point[0]),
           "act_min": int(lo), "act_max": int(hi), "activation": act,
           "acc_bits": int(dp.accumulator_bits), "overflow": _name(dp.accumulator_overflow),
           "order": dp.accumulator_order, "overflow_at": dp.overflow_at,
           "bias_add": "preload" if dp.bias_add == "preload" else "after", "has_bias": bs is not None,
           "requantization": {"scheme": scheme, "kind": rq.kind, "multiplier": [int(v) for v in rq.multiplier],
                              "shift": [int(v) for v in rq.shift], "scale": [float(v) for v in rq.scale],
                              "rounding": _name(rq.rounding)}}
    if node.op != "fully_connected":
        stride, dilation = _ops._pair(node.attrs, "stride"), _ops._pair(node.attrs, "dilation")
        pads = _ops._pads(x_shape[1:3], ws.data.shape[1:3], stride, dilation, _ops._padding(node.attrs))
        mac.update(stride=list(stride), dilation=list(dilation), pads=[list(p) for p in pads],
                   kernel=[int(ws.data.shape[1]), int(ws.data.shape[2])])
        if node.op == "depthwise_conv2d":
            mac["depth_multiplier"] = int(ws.data.shape[3] // x_shape[3])
    return mac, rq


def _datapath_json(dp) -> dict:
    to_dict = getattr(dp, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    import dataclasses
    return {k: _name(v) for k, v in dataclasses.asdict(dp).items()}


# ----------------------------------------------------------------------------------------- the writer
class _Writer:
    def __init__(self, directory: str, formats: tuple):
        self.dir = directory
        self.formats = formats
        self.files: list[dict] = []

    def tensor(self, rel_dir: str, stem: str, arr, *, node: str, node_index: int, role: str, tensor: str,
               bits: int, signed: bool, layout: str, axes: Sequence[str], quant=None, port=None,
               description: str = "", formats=None, extra_header: Sequence[str] = ()) -> list[dict]:
        """Write one array in every requested format; return the manifest entries."""
        arr = np.asarray(arr)
        is_float = arr.dtype.kind == "f"
        formats = ("npy",) if is_float else (formats or self.formats)
        os.makedirs(os.path.join(self.dir, rel_dir), exist_ok=True)
        formula = _word_formula(axes, arr.shape)
        head = [f"fxpsim golden vectors: node '{node}' (#{node_index}), role {role}, tensor '{tensor}'"]
        if description:
            head.append(description)
        if quant:
            head.append("quantization: real = scale * (code - zero_point); scale "
                        + (f"{quant['scale'][0]:.9g}" if len(quant['scale']) == 1 else
                           f"per channel (axis {quant['axis']}, {len(quant['scale'])} values: see manifest.json)")
                        + f", zero_point {quant['zero_point'][0] if len(set(quant['zero_point'])) == 1 else 'per channel'}")
        head += list(extra_header)
        entries = []
        for fmt in formats:
            rel = f"{rel_dir}/{stem}.{fmt}"
            path = os.path.join(self.dir, rel)
            if fmt in ("hex", "mem"):
                write_mem(path, arr, bits, signed, radix=16 if fmt == "hex" else 2, header="\n".join(head),
                          layout=f"{layout} row-major (C order, last index fastest), axes ({', '.join(axes)}): "
                                 f"{formula}")
            elif fmt == "npy":
                np.save(path, arr if is_float else arr.astype(_dtype_for(bits, signed)), allow_pickle=False)
            elif fmt == "csv":
                flat = arr.reshape(arr.shape[0], -1) if arr.ndim > 2 else arr
                write_csv_codes(path, flat, bits=bits, signed=signed,
                                header="\n".join(head + [f"rows: first axis; shape {tuple(arr.shape)}"]))
            entry = {"path": rel, "format": fmt, "node": node, "node_index": node_index, "role": role,
                     "tensor": tensor, "shape": [int(s) for s in arr.shape], "layout": layout, "axes": list(axes),
                     "bits": 0 if is_float else int(bits), "signed": bool(signed),
                     "dtype": "float32" if is_float else str(_dtype_for(bits, signed)), "quantization": quant,
                     "set": "golden"}
            if fmt in ("hex", "mem"):
                entry["radix"] = 16 if fmt == "hex" else 2
                entry["digits"] = -(-bits // 4) if fmt == "hex" else bits
            if port is not None:
                entry["port"] = port
            if description:
                entry["description"] = description
            self.files.append(entry)
            entries.append(entry)
        return entries


def _parse_trace_requests(graph, mac_trace) -> dict:
    """``{node name: (outputs or None, limit)}`` from the ``mac_trace`` argument."""
    if mac_trace is None:
        return {}
    reqs = [mac_trace] if isinstance(mac_trace, Mapping) else list(mac_trace)
    out: dict = {}
    for r in reqs:
        if not isinstance(r, Mapping) or "node" not in r:
            raise ValueError(f"mac_trace entries are dicts {{'node': name, 'outputs': [flat indices], "
                             f"'limit': n}}, got {r!r}")
        unknown = set(r) - {"node", "outputs", "limit"}
        if unknown:
            raise ValueError(f"mac_trace: unknown keys {sorted(unknown)} (allowed: node, outputs, limit)")
        try:
            node = graph.node(r["node"])
        except KeyError as exc:
            raise ValueError(f"mac_trace: {exc.args[0]}") from None
        if node.op not in _MAC_OPS:
            raise ValueError(f"mac_trace: node {node.name!r} is a {node.op} node; traces are for MAC nodes "
                             f"({', '.join(_MAC_OPS)})")
        limit = r.get("limit", DEFAULT_TRACE_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise ValueError(f"mac_trace: limit must be a positive int, got {limit!r}")
        outs = r.get("outputs")
        if outs is not None:
            outs = [outs] if isinstance(outs, (int, np.integer)) else list(outs)
            for i in outs:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
                    raise ValueError(f"mac_trace: outputs are non-negative flat indices, got {i!r}")
        prev_outs, prev_limit = out.get(node.name, (None, None))
        if prev_outs is not None and outs is not None:
            outs = list(dict.fromkeys(prev_outs + outs))
        out[node.name] = (outs if outs is not None else prev_outs,
                          int(limit) if prev_limit is None else max(prev_limit, int(limit)))
    return out


def export_vectors(graph, directory, x, datapath=None, *, formats=("hex", "npy"), mac_trace=None) -> dict:
    """Write golden vectors of every node of ``graph`` for the batch ``x`` on ``datapath``.

    Parameters
    ----------
    graph : IntegerGraph
    directory : str or os.PathLike
        Created if needed; files of an earlier export there are overwritten (and stale testbench outputs
        ``acc_out.hex``/``y_out.hex`` in the ``tb_dense`` folders removed).
    x : ndarray or sequence of ndarrays
        The batch, as :meth:`IntegerGraph.run` takes it.
    datapath : HardwareConfig or Datapath, optional
        Default: the graph's :attr:`~IntegerGraph.default_datapath`.
    formats : sequence of {"hex", "mem", "npy", "csv"}
        ``hex`` = ``$readmemh``, ``mem`` = ``$readmemb`` (binary digits).
    mac_trace : dict or list of dicts, optional
        ``{"node": name, "outputs": [flat indices into the node's output, batch included], "limit": n}``:
        write the running accumulator after every add of those outputs (``mac_trace``, ``[T][S]``) and
        their products (``mac_products``, ``[T][K]``).  ``limit`` caps the number of traced outputs
        (default 64); without ``outputs``, the first ``limit`` outputs are traced.  Every trace is computed
        by a scalar loop (:func:`mac_sequence`) and checked to end at the graph's accumulator.

    Returns
    -------
    dict
        The manifest (also written to ``directory/manifest.json``).
    """
    directory = os.fspath(directory)
    if isinstance(formats, str):
        formats = [f for f in re.split(r"[,\s]+", formats) if f]
    formats = tuple(dict.fromkeys(str(f).lower().lstrip(".") for f in formats))
    bad = [f for f in formats if f not in FORMATS]
    if not formats or bad:
        raise ValueError(f"formats must be a non-empty subset of {', '.join(FORMATS)}; got {list(formats)}")
    trace_reqs = _parse_trace_requests(graph, mac_trace)
    dp_all = graph.default_datapath if datapath is None else datapath
    _, traces, kept = graph.run(x, dp_all, trace=True, keep=True)
    values = {**{k: t.data for k, t in graph.tensors.items() if t.is_constant}, **kept}
    batch = int(len(kept[graph.inputs[0]]))
    os.makedirs(directory, exist_ok=True)
    w = _Writer(directory, formats)
    nodes_json = []
    ids = set()
    for i, node in enumerate(graph.nodes):
        dp = node_datapath(dp_all, node, i)
        rel = f"{i:02d}_{_safe(node.name)}"
        sv = _sv_id(node.name)
        while sv in ids:
            sv += f"_{i}"
        ids.add(sv)
        entry = {"index": i, "name": node.name, "op": node.op, "dir": rel, "id": sv, "attrs": node.attrs,
                 "inputs": list(node.inputs), "outputs": list(node.outputs), "notes": [],
                 "trace": {k: int(v) for k, v in (traces.get(node.name) or {}).items()
                           if k in ("overflows", "adds", "clipped", "bias_clipped")}}
        if node.op in _MAC_OPS:
            _export_mac_node(graph, node, dp, values, traces[node.name], w, entry, trace_reqs.get(node.name))
        else:
            _export_plain_node(graph, node, dp, values, traces.get(node.name), w, entry)
        nodes_json.append(entry)
    manifest = {"format": VECTORS_FORMAT, "version": VECTORS_VERSION, "graph": graph.name, "batch": batch,
                "formats": list(formats), "datapath": _datapath_json(dp_all),
                "graph_inputs": list(graph.inputs), "graph_outputs": list(graph.outputs),
                "svh": SVH, "role_order": list(ROLE_ORDER),
                "conventions": {
                    "hex": "$readmemh: one word per line, two's complement in exactly `bits` bits "
                           "(ceil(bits/4) lower-case hex digits), C order (last index fastest), // header",
                    "mem": "$readmemb: as hex with `bits` binary digits per word",
                    "npy": "numpy array of the codes (narrowest integer dtype of the width)",
                    "csv": "decimal, one row per line; arrays of 3+ dimensions as [first axis][rest]",
                    "shift": "TFLite exponent: positive = left shift, negative = right shift",
                    "mac_trace": "row t: accumulator of traced output t before the first add (column 0) and "
                                 "after every add; the last column is the accumulator the requantizer saw"},
                "nodes": nodes_json, "files": w.files}
    _write_svh(os.path.join(directory, SVH), manifest, graph)
    manifest["files"].append({"path": SVH, "format": "svh", "node": None, "role": "params", "set": "params"})
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest


def _export_plain_node(graph, node, dp, values, info, w: _Writer, entry):
    acts = [(j, t) for j, t in enumerate(node.inputs) if t and not graph.tensors[t].is_constant]
    for port, (j, t) in enumerate(acts):
        spec = graph.tensors[t]
        layout, axes = _activation_layout(spec.shape, "")
        w.tensor(entry["dir"], "input" if len(acts) == 1 else f"input{port}", values[t], node=node.name,
                 node_index=entry["index"], role="input", tensor=t, bits=spec.bits, signed=spec.signed,
                 layout=layout, axes=axes, quant=_quant_json(spec), port=port)
    if info and info.get("acc") is not None:
        acc = np.asarray(info["acc"])
        bits = min(int(dp.accumulator_bits), 62)
        bits = max(bits, _bits_needed(acc))
        layout, axes = _activation_layout(acc.shape[1:], "")
        w.tensor(entry["dir"], "accumulator", acc, node=node.name, node_index=entry["index"], role="accumulator",
                 tensor=f"{node.outputs[0]}:acc", bits=bits, signed=True, layout=layout, axes=axes,
                 description="accumulator before the division")
    for port, t in enumerate(node.outputs):
        spec = graph.tensors[t]
        layout, axes = _activation_layout(spec.shape, "")
        w.tensor(entry["dir"], "output" if len(node.outputs) == 1 else f"output{port}", values[t], node=node.name,
                 node_index=entry["index"], role="output", tensor=t, bits=spec.bits, signed=spec.signed,
                 layout=layout, axes=axes, quant=_quant_json(spec), port=port)


def _export_mac_node(graph, node, dp, values, info, w: _Writer, entry, trace_req):
    xs, ws, ys = (graph.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    bname = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    x, wd, y = values[node.inputs[0]], ws.data, values[node.outputs[0]]
    acc = np.asarray(info["acc"], dtype=np.int64)
    mac, rq = _mac_entry(graph, node, dp, x.shape)
    entry["mac"] = mac
    A = mac["acc_bits"]
    fc = node.op == "fully_connected"
    rel, idx, name = entry["dir"], entry["index"], node.name
    common = dict(node=name, node_index=idx)
    x_layout, x_axes = _activation_layout(xs.shape, "k" if fc else "")
    y_layout, y_axes = _activation_layout(ys.shape, "m" if fc else "")
    ch = "m" if fc else "c"
    w.tensor(rel, "input", x, role="input", tensor=node.inputs[0], bits=xs.bits, signed=xs.signed,
             layout=x_layout, axes=x_axes, quant=_quant_json(xs), port=0, **common)
    w_layout, w_axes = (("[M][K]", ["m", "k"]) if fc else ("OHWI", ["o", "h", "w", "i"]) if node.op == "conv2d"
                        else ("1HWC", ["one", "h", "w", "c"]))
    w.tensor(rel, "weights", wd, role="weights", tensor=node.inputs[1], bits=ws.bits, signed=ws.signed,
             layout=w_layout, axes=w_axes, quant=_quant_json(ws), **common)
    s_acc = float(xs.scale[0]) * np.broadcast_to(ws.scale, (mac["out_channels"],))
    acc_quant = {"scale": [float(v) for v in s_acc], "zero_point": [0] * len(s_acc), "axis": -1}
    bias = None
    if bname is not None:
        bspec = graph.tensors[bname]
        bias = bspec.data.astype(np.int64)
        bbits = bspec.bits
        if dp.overflow_at != "end":        # the bias register is no wider than the accumulator (graph.ops)
            lo_a, hi_a = -(1 << (A - 1)), (1 << (A - 1)) - 1
            clipped = np.clip(bias, lo_a, hi_a)
            if np.any(clipped != bias):
                entry["notes"].append(f"{int(np.count_nonzero(clipped != bias))} bias value(s) saturated into the "
                                      f"{A}-bit accumulator (the values written are the ones added)")
            bias, bbits = clipped, min(bbits, A)
        w.tensor(rel, "bias", bias, role="bias", tensor=bname, bits=bbits, signed=True, layout=f"[{ch.upper()}]",
                 axes=[ch], quant=acc_quant, description="bias in the accumulator's scale, as added", **common)
    if rq.kind in ("double", "single", "shift"):
        if rq.kind != "shift":
            w.tensor(rel, "multiplier", np.broadcast_to(np.array(rq.multiplier, np.int64), (mac["out_channels"],)),
                     role="multiplier", tensor=f"{name}:multiplier", bits=32, signed=True, layout=f"[{ch.upper()}]",
                     axes=[ch], description=f"quantized multiplier (Q31, requantization {mac['requantization']['scheme']})",
                     **common)
        w.tensor(rel, "shift", np.broadcast_to(np.array(rq.shift, np.int64), (mac["out_channels"],)), role="shift",
                 tensor=f"{name}:shift", bits=8, signed=True, layout=f"[{ch.upper()}]", axes=[ch],
                 description="TFLite exponent: positive = left shift, negative = right shift", **common)
    else:
        w.tensor(rel, "scale", np.broadcast_to(np.array(rq.scale, np.float64), (mac["out_channels"],)).copy(),
                 role="scale", tensor=f"{name}:scale", bits=0, signed=True, layout=f"[{ch.upper()}]", axes=[ch],
                 description="float requantization scale", **common)
    acc_bits = max(A, _bits_needed(acc))
    w.tensor(rel, "accumulator", acc, role="accumulator", tensor=f"{node.outputs[0]}:acc", bits=acc_bits, signed=True,
             layout=y_layout, axes=y_axes, quant=acc_quant,
             description=f"accumulator the requantizer saw ({A}-bit {mac['overflow']}, bias {mac['bias_add']})",
             **common)
    if trace_req is not None:
        _export_trace(node, mac, x, wd, bias, acc, trace_req, w, entry)
    w.tensor(rel, "output", y, role="output", tensor=node.outputs[0], bits=ys.bits, signed=ys.signed,
             layout=y_layout, axes=y_axes, quant=_quant_json(ys), port=0, **common)
    if fc:
        _export_tb_dense(node, mac, rq, x, wd, bias, xs, ws, ys, w, entry)


def _export_trace(node, mac, x, wd, bias, acc, req, w: _Writer, entry):
    outs, limit = req
    total = int(acc.size)
    if outs is None:
        outs = list(range(min(limit, total)))
    bad = [i for i in outs if i >= total]
    if bad:
        raise ValueError(f"mac_trace: node {node.name!r} has {total} outputs ({' x '.join(map(str, acc.shape))}, "
                         f"batch included); flat index {bad[0]} is out of range")
    truncated = len(outs) > limit
    outs = outs[:limit]
    coords = np.array([np.unravel_index(i, acc.shape) for i in outs], dtype=np.int64).reshape(len(outs), acc.ndim)
    P = mac_products(mac, x, wd, coords)
    rows, labels = [], None
    for t, (flat, c) in enumerate(zip(outs, coords)):
        o = int(c[-1])
        b = int(bias[o]) if bias is not None else None
        vals, labels = mac_sequence(P[t].tolist(), init=b if mac["bias_add"] == "preload" else None,
                                    bias_end=b if mac["bias_add"] != "preload" else None, bits=mac["acc_bits"],
                                    mode=mac["overflow"], order=mac["order"], overflow_at=mac["overflow_at"])
        want = int(acc.reshape(-1)[flat])
        if vals[-1] != want:
            raise RuntimeError(f"mac_trace: the scalar loop of node {node.name!r}, output {flat} "
                               f"{tuple(int(v) for v in c)} ends at {vals[-1]} but the graph's accumulator is {want}")
        rows.append(vals)
    T = np.array(rows, dtype=np.int64).reshape(len(outs), -1)
    rel, common = entry["dir"], dict(node=node.name, node_index=entry["index"])
    trace_bits = max(mac["acc_bits"], _bits_needed(T))
    w.tensor(rel, "mac_products", P, role="mac_products", tensor=f"{node.outputs[0]}:products", bits=_bits_needed(P),
             signed=True, layout="[T][K]", axes=["t", "k"], description="products (x - x_zp)(w - w_zp) of the "
             "traced outputs in the datapath's order", **common)
    w.tensor(rel, "mac_trace", T, role="mac_trace", tensor=f"{node.outputs[0]}:trace", bits=trace_bits, signed=True,
             layout="[T][S]", axes=["t", "s"], description="running accumulator: column 0 before the first add, "
             "column s after add s", **common)
    entry["mac_trace"] = {"outputs": [int(i) for i in outs], "coords": coords.tolist(), "steps": labels,
                          "truncated": truncated, "limit": limit,
                          "products": _tap_labels(mac, wd.shape)}


def _export_tb_dense(node, mac, rq, x, wd, bias, xs, ws, ys, w: _Writer, entry):
    """The five $readmemh files and params.env of examples/rtl/tb_dense.v, or the reason they are not written."""
    why = []
    if not (xs.signed and xs.bits <= 8 and ws.signed and ws.bits <= 8 and ys.signed and ys.bits <= 8):
        why.append("dense_pe takes signed int8 inputs, weights and outputs")
    if mac["w_zp"] != 0:
        why.append("dense_pe has no weight zero point")
    if not 2 <= mac["acc_bits"] <= 32:
        why.append("dense_pe's accumulator has 2..32 bits")
    if mac["overflow"] not in ("saturate", "wrap"):
        why.append(f"dense_pe saturates or wraps (this datapath: {mac['overflow']})")
    if mac["order"] != "sequential" or mac["overflow_at"] != "add":
        why.append("dense_pe adds sequentially with the overflow rule at every add")
    if rq.kind not in ("double", "single"):
        why.append(f"dense_pe requantizes with a multiplier and shift (this datapath: {rq.kind})")
    if not all(-128 <= v <= 127 for v in (mac["x_zp"], mac["out_zp"], mac["act_min"], mac["act_max"])):
        why.append("dense_pe's zero points and clamp are int8")
    if why:
        entry["tb_dense"] = None
        entry["notes"].append("no tb_dense folder: " + "; ".join(why))
        return
    rel = f"{entry['dir']}/{_TB_DIR}"
    d = os.path.join(w.dir, rel)
    os.makedirs(d, exist_ok=True)
    for stale in list(_TB_OUTPUTS.values()) + ["tb_dense.vvp"]:
        if os.path.exists(os.path.join(d, stale)):
            os.remove(os.path.join(d, stale))
    N, K = x.shape
    M = wd.shape[0]
    b = np.zeros(M, np.int64) if bias is None else bias
    common = dict(node=node.name, node_index=entry["index"], formats=("hex",))
    for stem, arr, bits, role, layout, axes, tensor in (
            ("x", x, 8, "input", "[N][K]", ["n", "k"], node.inputs[0]),
            ("w", wd, 8, "weights", "[M][K]", ["m", "k"], node.inputs[1]),
            ("bias", b, 32, "bias", "[M]", ["m"], node.inputs[2] if len(node.inputs) > 2 else ""),
            ("mult", np.array(rq.multiplier, np.int64) * np.ones(M, np.int64), 32, "multiplier", "[M]", ["m"], ""),
            ("shift", np.array(rq.shift, np.int64) * np.ones(M, np.int64), 8, "shift", "[M]", ["m"], "")):
        for e in w.tensor(rel, stem, arr, role=role, tensor=tensor or f"{node.name}:{role}", bits=bits, signed=True,
                          layout=layout, axes=axes, description="input of examples/rtl/tb_dense.v", **common):
            e["set"] = _TB_DIR
    params = {"K": K, "M": M, "N": N, "ACC_BITS": mac["acc_bits"], "SATURATE": int(mac["overflow"] == "saturate"),
              "BIAS_PRELOAD": int(mac["bias_add"] == "preload"), "X_ZP": mac["x_zp"], "OUT_ZP": mac["out_zp"],
              "ACT_MIN": mac["act_min"], "ACT_MAX": mac["act_max"]}
    lines = [f"# examples/rtl/run.sh settings for node '{node.name}' (fxpsim export_vectors)",
             f"# run from the repository root: examples/rtl/run.sh {os.path.join(w.dir, rel)}"]
    if rq.kind != "double":
        note = ("dense_pe requantizes with TFLite's double rounding; this datapath uses "
                f"{mac['requantization']['scheme']}: y_out.hex may differ from the golden output where the "
                "roundings differ (acc_out.hex is comparable)")
        lines.append("# NOTE: " + note)
        entry["notes"].append(note)
    lines += [f"{k}={v}" for k, v in params.items()]
    with open(os.path.join(d, "params.env"), "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    w.files.append({"path": f"{rel}/params.env", "format": "env", "node": node.name, "node_index": entry["index"],
                    "role": "params", "set": _TB_DIR})
    entry["tb_dense"] = {"dir": rel, "params": params, "outputs": dict(_TB_OUTPUTS),
                         "requantization": rq.kind}
