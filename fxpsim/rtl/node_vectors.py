"""The golden files of one node (:func:`fxpsim.rtl.export_vectors`): a MAC node's input, weights, bias as
added, requantization parameters, accumulator, optional MAC traces and the inputs of
``examples/rtl/tb_dense.v``, with its manifest ``mac`` entry; any other node's inputs, accumulator and
outputs. An importer's MAC node's traces go through its MAC view (:func:`_export_view_trace`). The file formats and
their semantics are in :mod:`fxpsim.rtl.vectors`.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..graph import ops as _ops
from .mac_model import _tap_labels, mac_products, mac_sequence
from .vector_files import _Writer, _activation_layout, _bits_needed, _name, _quant_json

_TB_DIR = "tb_dense"
_TB_OUTPUTS = {"accumulator": "acc_out.hex", "output": "y_out.hex"}


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


def _export_view_trace(graph, node, dp, values, info, w: _Writer, entry, trace_req):
    """MAC traces of an importer's MAC node through its MAC view (:mod:`fxpsim.graph.mac_view`): the view's
    offset operands in the core op's layout (so ``x_zp = w_zp = 0`` in the products' model), its bias
    saturated into the accumulator as the datapath adds it, checked to end at the node's accumulator."""
    from ..graph.mac_view import mac_operands
    where = f"mac_trace: node {node.name!r} ({node.op})"
    knobs = [k for k, v, default in (("zero_point", getattr(dp, "zero_point", "subtract"), "subtract"),
                                     ("tile_k", getattr(dp, "tile_k", None), None),
                                     ("u8s8_pairs", node.attrs.get("u8s8_pairs", "exact"), "exact"))
             if v != default]
    if knobs:
        raise ValueError(f"{where}: the per-add trace does not model {', '.join(knobs)} on an importer's MAC op")
    acc = None if not info else info.get("acc")
    if acc is None:
        raise ValueError(f"{where}: the node ran no integer accumulator on this datapath (nothing to trace)")
    ins = [values[t] for t in node.inputs if t]
    ops = mac_operands(graph, node, ins)
    if ops is None:
        raise ValueError(f"{where}: this node has no MAC view in a core op's layout (e.g. a grouped convolution)")
    acc = np.asarray(acc, dtype=np.int64)
    x = ops.x
    if ops.op == "fully_connected":                   # [..., K] rows: one output row per leading index
        x, acc = x.reshape(-1, x.shape[-1]), acc.reshape(-1, acc.shape[-1])
    mac = {"op": ops.op, "x_zp": 0, "w_zp": 0, "acc_bits": int(dp.accumulator_bits),
           "overflow": _name(dp.accumulator_overflow), "order": dp.accumulator_order, "overflow_at": dp.overflow_at,
           "bias_add": "preload" if dp.bias_add == "preload" else "after", "has_bias": ops.bias is not None}
    mac.update({k: ([list(p) for p in v] if k == "pads" else list(v)) for k, v in ops.geometry.items()})
    bias = None if ops.bias is None else np.asarray(ops.bias, np.int64)
    if bias is not None and dp.overflow_at != "end":      # the bias register is no wider than the accumulator
        A = mac["acc_bits"]
        bias = np.clip(bias, -(1 << (A - 1)), (1 << (A - 1)) - 1)
    entry["mac_view"] = mac
    _export_trace(node, mac, x, ops.w, bias, acc, trace_req, w, entry)


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
