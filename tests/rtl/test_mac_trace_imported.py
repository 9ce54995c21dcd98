"""``export_vectors(mac_trace=...)`` on an importer's MAC ops (LiteRT's optimized kernel-set ops, ONNX
QLinearConv), traced through their MAC views: each traced row equals an independent per-add model written here
(Python ints: the raw codes of the graph's tensors minus their zero points, taps in the runtime's (kh, kw, c)
order with TFLite SAME / ONNX explicit padding read as zero products, the running sum fitted to W bits at
every add, the bias added last from a W-bit register), and ends at the node's accumulator; what the trace
cannot model is refused by name."""
from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

import fxpsim

ROOT = pathlib.Path(__file__).resolve().parents[2]
TFLITE = ROOT / "tests" / "vectors" / "tflite_models" / "mobilenet_v2_block.tflite"
ONNX = ROOT / "tests" / "vectors" / "onnx_models" / "hb_qlinearconv_u8_pc.onnx"


def _fit(v: int, bits: int, mode: str) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if mode == "saturate":
        return min(max(v, lo), hi)
    return (v - lo) % (1 << bits) + lo


def _per_add(products, bias, bits, mode):
    s, out = 0, [0]
    for p in products:
        s = _fit(s + p, bits, mode)
        out.append(s)
    if bias is not None:
        b = min(max(bias, -(1 << (bits - 1))), (1 << (bits - 1)) - 1)
        out.append(_fit(s + b, bits, mode))
    return out


def _products(graph, node, kept, coords, layout):
    """(x - z_x)(w - z_w) of one output, Python ints, from the graph's raw codes (``layout``: the weights as
    the runtime stores them, "ohwi" for TFLite conv / ONNX [O, KH, KW, C/group], "1hwc" TFLite depthwise)."""
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    x = kept[node.inputs[0]].astype(np.int64) - int(xs.zero_point[0])
    w = ws.data.astype(np.int64)
    zw = np.broadcast_to(ws.zero_point.astype(np.int64), (w.shape[0] if layout != "1hwc" else w.shape[3],))
    if node.op == "tflite_fully_connected":
        n, o = coords
        return [int(x[n, k]) * int(w[o, k] - zw[o]) for k in range(w.shape[1])]
    n, oh, ow, o = coords
    kh, kw = w.shape[1], w.shape[2]
    stride = node.attrs.get("stride", (1, 1))
    stride = (stride, stride) if isinstance(stride, int) else tuple(stride)
    padding = node.attrs.get("padding", "VALID")
    if not isinstance(padding, str):                             # ONNX: explicit ((top, bottom), (left, right))
        pt, pl = int(padding[0][0]), int(padding[1][0])
    else:                                                        # TFLite SAME / VALID
        pt = pl = 0
        if padding.lower() == "same":
            oh_n, ow_n = graph.tensors[node.outputs[0]].shape[:2]
            pt = max((oh_n - 1) * stride[0] + kh - x.shape[1], 0) // 2
            pl = max((ow_n - 1) * stride[1] + kw - x.shape[2], 0) // 2
    groups_dw = layout == "1hwc" or (w.shape[3] == 1 and x.shape[3] > 1)
    out = []
    for i in range(kh):
        for j in range(kw):
            r, c = oh * stride[0] + i - pt, ow * stride[1] + j - pl
            inside = 0 <= r < x.shape[1] and 0 <= c < x.shape[2]
            if groups_dw:
                cin = o // (w.shape[3] // x.shape[3]) if layout == "1hwc" else o // (w.shape[0] // x.shape[3])
                wv = w[0, i, j, o] if layout == "1hwc" else w[o, i, j, 0]
                out.append(int(x[n, r, c, cin]) * int(wv - zw[o]) if inside else 0)
            else:
                for ch in range(w.shape[3]):
                    out.append(int(x[n, r, c, ch]) * int(w[o, i, j, ch] - zw[o]) if inside else 0)
    return out


def _check(graph, x, dp, wanted, tmp_path, layouts):
    m = fxpsim.export_vectors(graph, tmp_path, x, dp, formats=("npy",),
                              mac_trace=[{"node": n, "outputs": outs} for n, outs in wanted.items()])
    _, traces, kept = graph.run(x, dp, trace=True, keep=True)
    kept = {**{k: t.data for k, t in graph.tensors.items() if t.is_constant}, **kept}
    overflowed = 0
    for entry in m["nodes"]:
        if entry["name"] not in wanted:
            continue
        node = graph.node(entry["name"])
        rows = np.load(tmp_path / entry["dir"] / "mac_trace.npy")
        acc = np.asarray(traces[node.name]["acc"]).reshape(-1)
        bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
        shape = graph.tensors[node.outputs[0]].shape
        for t, flat in enumerate(wanted[node.name]):
            coords = np.unravel_index(flat, (len(x),) + tuple(shape))
            coords = (coords[0], coords[-1]) if node.op == "tflite_fully_connected" else tuple(int(c) for c in coords)
            p = _products(graph, node, kept, coords, layouts[node.op])
            want = _per_add(p, None if bias is None else int(bias[coords[-1]]), dp.accumulator_bits,
                            dp.accumulator_overflow)
            assert rows[t].tolist() == want, (node.name, flat)
            assert want[-1] == int(acc[flat]), (node.name, flat)
            overflowed += any(abs(a + b) >= 1 << (dp.accumulator_bits - 1) for a, b in zip(want, p))
    assert overflowed, "no traced output overflowed: the test would not see a wrong fit"


@pytest.mark.parametrize("mode", ["saturate", "wrap"])
def test_tflite_builtin_ops_trace_equals_a_per_add_model(tmp_path, mode):
    g = fxpsim.import_tflite(TFLITE, kernels="builtin")
    x = np.random.default_rng(4).integers(-128, 128, (2,) + g.tensors[g.inputs[0]].shape, dtype=np.int8)
    dp = dataclasses.replace(g.default_datapath, accumulator_bits=14, accumulator_overflow=mode)
    ops = {n.op for n in g.nodes}
    assert {"tflite_conv2d", "tflite_depthwise_conv2d", "tflite_fully_connected"} <= ops
    wanted = {n.name: [0, 7, int(np.prod(g.tensors[n.outputs[0]].shape)) * 2 - 1] for n in g.nodes
              if n.op in ("tflite_conv2d", "tflite_depthwise_conv2d", "tflite_fully_connected")}
    _check(g, x, dp, wanted, tmp_path, {"tflite_conv2d": "ohwi", "tflite_depthwise_conv2d": "1hwc",
                                        "tflite_fully_connected": "ok"})


def test_onnx_qlinear_conv_trace_equals_a_per_add_model(tmp_path):
    pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
    g = fxpsim.import_onnx(ONNX)
    spec = g.tensors[g.inputs[0]]
    x = np.random.default_rng(5).integers(0, 256, (2,) + spec.shape).astype(spec.dtype)
    dp = dataclasses.replace(g.default_datapath, accumulator_bits=12, accumulator_overflow="saturate")
    wanted = {n.name: [0, 5, 77] for n in g.nodes if n.op == "qlinear_conv"}
    assert len(wanted) == 2                                  # a plain and a depthwise (group = C) convolution
    _check(g, x, dp, wanted, tmp_path, {"qlinear_conv": "ohwi"})


def test_refusals_name_the_node_and_what_is_not_modelled(tmp_path):
    g = fxpsim.import_tflite(TFLITE, kernels="builtin")
    x = np.zeros((1,) + g.tensors[g.inputs[0]].shape, np.int8)
    mean = next(n.name for n in g.nodes if n.op == "tflite_mean")
    with pytest.raises(ValueError, match=f"{mean}.*tflite_mean.*MAC view"):
        fxpsim.export_vectors(g, tmp_path, x, mac_trace={"node": mean})
    conv = next(n.name for n in g.nodes if n.op == "tflite_conv2d")
    cfg = fxpsim.HardwareConfig.preset("tflite-int8").replace(tile_k=4)
    with pytest.raises(ValueError, match=f"{conv}.*tile_k"):
        fxpsim.export_vectors(g, tmp_path, x, cfg, mac_trace={"node": conv})


def test_cli_traces_one_output_of_an_imported_onnx_conv(tmp_path):
    """``fxpsim export-vectors --mac-trace NODE:IDX`` on an .onnx file: the imported QLinearConv's trace, on the
    model's own (onnxruntime) datapath, equals the per-add model."""
    import json
    import subprocess
    import sys
    pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
    g = fxpsim.import_onnx(ONNX)
    spec = g.tensors[g.inputs[0]]
    x = np.random.default_rng(6).integers(0, 256, (2,) + spec.shape).astype(spec.dtype)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "vectors"
    r = subprocess.run([sys.executable, "-m", "fxpsim.cli", "export-vectors", "--model", str(ONNX), "--data",
                        str(tmp_path / "x.npy"), "--out", str(out), "--format", "npy", "--mac-trace", "qconv:3,40"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    entry = next(n for n in json.loads((out / "manifest.json").read_text())["nodes"] if n["name"] == "qconv")
    assert entry["mac_trace"]["outputs"] == [3, 40] and entry["mac_view"]["op"] == "conv2d"
    rows = np.load(out / entry["dir"] / "mac_trace.npy")
    dp = g.default_datapath
    _, traces, kept = g.run(x, dp, trace=True, keep=True)
    kept = {**{k: t.data for k, t in g.tensors.items() if t.is_constant}, **kept}
    node = g.node("qconv")
    bias = g.tensors[node.inputs[2]].data
    for t, flat in enumerate([3, 40]):
        coords = tuple(int(c) for c in np.unravel_index(flat, (len(x),) + g.tensors[node.outputs[0]].shape))
        want = _per_add(_products(g, node, kept, coords, "ohwi"), int(bias[coords[-1]]), dp.accumulator_bits,
                        dp.accumulator_overflow)
        assert rows[t].tolist() == want
