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

This module runs the export and writes the manifest; the files of each node are written by
:mod:`fxpsim.rtl.node_vectors`, one array in every format by :mod:`fxpsim.rtl.vector_files`.
"""
from __future__ import annotations

import json
import os
import re
from typing import Mapping

import numpy as np

from ..graph.ir import node_datapath
from ..graph.mac_view import MAC_VIEWS
from ..graph.registry import find_op
from .mac_model import fit_value, mac_products, mac_run, mac_sequence  # noqa: F401
from .node_vectors import _export_mac_node, _export_plain_node, _export_view_trace
from .svh import _write_svh
from .vector_files import _Writer, _name, _safe, _sv_id

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
DEFAULT_TRACE_LIMIT = 64


def _datapath_json(dp) -> dict:
    to_dict = getattr(dp, "to_dict", None)
    if to_dict is not None:
        return to_dict()
    import dataclasses
    return {k: _name(v) for k, v in dataclasses.asdict(dp).items()}


def _has_mac_view(node) -> bool:
    """An importer's MAC op (LiteRT kernel-set ops, ONNX QLinearConv ...) that registers a MAC view."""
    find_op(node.op)                            # loads the op's frontend, which registers its view
    return node.op in MAC_VIEWS


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
        if node.op not in _MAC_OPS and not _has_mac_view(node):
            raise ValueError(f"mac_trace: node {node.name!r} is a {node.op} node; traces are for MAC nodes "
                             f"({', '.join(_MAC_OPS)}, or an importer's MAC op with a MAC view: "
                             f"{', '.join(sorted(MAC_VIEWS)) or 'none loaded'})")
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
        by a scalar loop (:func:`mac_sequence`) and checked to end at the graph's accumulator.  An
        importer's MAC node (``tflite_conv2d``, ``qlinear_conv``, ... : an op with a MAC view,
        :mod:`fxpsim.graph.mac_view`) is traced through its view: the products of its offset operands
        :math:`(x - z_x)(w - z_w)` in the core op's order, the view's bias (its manifest entry's
        ``mac_view`` says the op, the order and the geometry).

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
    bad = next((n for n in (graph.name, *(nd.name for nd in graph.nodes), *graph.tensors) if not str(n).isascii()),
               None)
    if bad is not None:
        raise ValueError(f"export_vectors: the name {bad!r} is not ASCII, and the vector files and SystemVerilog "
                         "headers name the graph, its nodes and tensors in ASCII; rename it before exporting")
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
            if node.name in trace_reqs:         # an importer's MAC op: the trace through its MAC view
                _export_view_trace(graph, node, dp, values, traces.get(node.name), w, entry, trace_reqs[node.name])
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
