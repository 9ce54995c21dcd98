"""The report's accumulator columns on imported models (ONNX QLinearConv/QLinearMatMul, LiteRT builtin and
XNNPACK kernels), against an independent model: every MAC output's running sum in the kernel's product order
(KH, KW, C), bias preloaded, summed in Python integers from the graph's own codes and zero points."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.hardware.simulation import exact_datapath, simulate

VEC = Path(__file__).resolve().parents[1] / "vectors"


def _needed(peak: int) -> int:
    """Two's complement bits that hold -peak..peak (independent of fxpsim's helper)."""
    bits = 1
    while not (-(1 << (bits - 1)) <= -peak and peak <= (1 << (bits - 1)) - 1):
        bits += 1
    return bits


def _peak_conv(x, w, b, zx, zw, stride, pads, groups):
    """Largest |running sum| of a grouped NHWC conv with w [O, KH, KW, Cg], products in (i, j, c) order."""
    n, h, wd, _ = x.shape
    o_ch, kh, kw, cg = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - kh) // stride[0] + 1
    ow = (wd + pl + pr - kw) // stride[1] + 1
    peak = 0
    per_group = o_ch // groups
    for s in range(n):
        for p in range(oh):
            for q in range(ow):
                for o in range(o_ch):
                    g = o // per_group
                    acc = int(b[o]) if b is not None else 0
                    peak = max(peak, abs(acc))
                    for i in range(kh):
                        for j in range(kw):
                            y, xx = p * stride[0] + i - pt, q * stride[1] + j - pl
                            for c in range(cg):
                                v = int(x[s, y, xx, g * cg + c]) - zx if 0 <= y < h and 0 <= xx < wd else 0
                                acc += v * (int(w[o, i, j, c]) - int(zw[o] if np.ndim(zw) else zw))
                                peak = max(peak, abs(acc))
    return peak


def _peak_dense(x, w, b, zx, zw):
    peak = 0
    for row in x.reshape(-1, x.shape[-1]):
        for o in range(w.shape[0]):
            acc = int(b[o]) if b is not None else 0
            peak = max(peak, abs(acc))
            for k in range(w.shape[1]):
                acc += (int(row[k]) - zx) * (int(w[o, k]) - int(zw[o] if np.ndim(zw) else zw))
                peak = max(peak, abs(acc))
    return peak


def _onnx_peaks(graph, vals):
    out = {}
    for nd in graph.nodes:
        if nd.op not in ("qlinear_conv", "qlinear_matmul"):
            continue
        xs, ws = graph.tensors[nd.inputs[0]], graph.tensors[nd.inputs[1]]
        zx = int(xs.zero_point[0])
        zw = ws.zero_point if ws.zero_point.size > 1 else int(ws.zero_point[0])
        b = graph.tensors[nd.inputs[2]].data if len(nd.inputs) > 2 and nd.inputs[2] else None
        x = vals[nd.inputs[0]]
        if nd.op == "qlinear_conv":
            st = nd.attrs.get("stride", 1)
            st = (st, st) if isinstance(st, int) else tuple(st)
            pads = tuple(tuple(int(v) for v in side) for side in nd.attrs.get("padding", [[0, 0], [0, 0]]))
            out[nd.name] = _peak_conv(x, ws.data, b, zx, zw, st, pads, int(nd.attrs.get("group", 1)))
        else:
            out[nd.name] = _peak_dense(x, ws.data, b, zx, zw)
    return out


def test_onnx_report_fills_the_accumulator_columns_from_the_independent_model():
    pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]') reads the model")
    path = VEC / "onnx_models" / "qs_cnn_qdq_s8_pc.onnx"
    graph = fxpsim.import_model(str(path))
    spec = graph.tensors[graph.inputs[0]]
    x = np.random.default_rng(0).integers(-128, 128, (2,) + tuple(spec.shape)).astype(spec.dtype)
    cfg = fxpsim.preset("int8-acc16-sat")
    rep = simulate(graph, cfg, x)
    _, _, here = graph.run(x, cfg, trace=True, keep=True)
    _, _, ex = graph.run(x, exact_datapath(cfg), trace=True, keep=True)
    want_here, want_exact = _onnx_peaks(graph, here), _onnx_peaks(graph, ex)
    rows = {r.name: r for r in rep.layers}
    assert len(want_exact) == 4
    for name in want_exact:
        r = rows[name]
        assert r.accumulator_bits == 16
        assert r.acc_bits_needed == _needed(want_exact[name]), name
        assert r.acc_bits_needed_cumulative == _needed(want_here[name]), name
        assert r.acc_peak == want_here[name]
        assert r.headroom_bits == 16 - _needed(want_exact[name])
        assert r.isolated_sqnr_db is not None
    assert any(r.overflow_count for r in rep.layers)
    # bit-ops: MACs per sample x 8-bit weights x 8-bit activations, MACs counted by hand from the shapes
    macs = 0
    for nd in graph.nodes:
        if nd.op == "qlinear_conv":
            w = graph.tensors[nd.inputs[1]].data
            y = graph.tensors[nd.outputs[0]].shape
            macs += int(np.prod(y)) * int(np.prod(w.shape[1:]))
        elif nd.op == "qlinear_matmul":
            macs += int(np.prod(graph.tensors[nd.inputs[1]].data.shape))
    assert rep.network["bit_ops"] == macs * 64


@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_litert_kernel_imports_report_what_the_reference_import_reports(kernels):
    """A builtin/XNNPACK import's MAC nodes (runtime-native ops) get the columns of the reference-kernel
    import (the core MAC ops), node for node: the same accumulator, the same sums."""
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    path = str(VEC / "tflite_models" / "conv_block.tflite")
    ref, nat = fxpsim.import_model(path), fxpsim.import_model(path, kernels=kernels)
    spec = ref.tensors[ref.inputs[0]]
    x = np.random.default_rng(1).integers(-128, 128, (3,) + tuple(spec.shape)).astype(spec.dtype)
    cfg = fxpsim.preset("int8-acc16-sat")
    a, b = simulate(ref, cfg, x), simulate(nat, cfg, x)
    ra = {r.name: r for r in a.layers if r.accumulator_bits is not None}
    rb = {r.name: r for r in b.layers if r.accumulator_bits is not None}
    assert len(ra) >= 6 and set(ra) == set(rb)
    for name, r in ra.items():
        q = rb[name]
        assert (q.acc_bits_needed, q.acc_bits_needed_cumulative, q.headroom_bits, q.acc_peak) == \
            (r.acc_bits_needed, r.acc_bits_needed_cumulative, r.headroom_bits, r.acc_peak), name
        assert q.acc_histogram == r.acc_histogram, name
    assert b.network["bit_ops"] == a.network["bit_ops"] > 0


def _fold_conv_model(x, w, b, zx, zw, stride, pads, bits, bias_bits):
    """Zero-point folding on a saturating ``bits``-bit accumulator, in Python integers: the bias saturated into
    the accumulator, then :math:`b' = b - z_x \\sum_k w_k` saturated to ``bias_bits`` is preloaded, and the raw
    codes (padded taps :math:`z_x`) times the offset weights are added one at a time in (i, j, c) order, each add
    saturated. Returns (accumulators [N, OH, OW, O], overflowing adds)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    blo, bhi = -(1 << (bias_bits - 1)), (1 << (bias_bits - 1)) - 1
    n, h, wd, _ = x.shape
    o_ch, kh, kw, cg = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - kh) // stride[0] + 1
    ow = (wd + pl + pr - kw) // stride[1] + 1
    out = np.zeros((n, oh, ow, o_ch), np.int64)
    overflows = 0
    for o in range(o_ch):
        wo = [[[int(w[o, i, j, c]) - int(zw[o] if np.ndim(zw) else zw) for c in range(cg)] for j in range(kw)]
              for i in range(kh)]
        bsat = min(max(int(b[o]) if b is not None else 0, lo), hi)
        folded = min(max(bsat - zx * sum(v for row in wo for col in row for v in col), blo), bhi)
        for s in range(n):
            for p in range(oh):
                for q in range(ow):
                    acc = folded
                    for i in range(kh):
                        for j in range(kw):
                            y, xx = p * stride[0] + i - pt, q * stride[1] + j - pl
                            for c in range(cg):
                                v = int(x[s, y, xx, c]) if 0 <= y < h and 0 <= xx < wd else zx
                                t = acc + v * wo[i][j][c]
                                if t < lo or t > hi:
                                    overflows += 1
                                acc = min(max(t, lo), hi)
                    out[s, p, q, o] = acc
    return out, overflows


def test_onnx_zero_point_fold_matches_the_independent_fold_model():
    """``zero_point="fold"`` on ONNX QLinearConv (was refused): a uint8 model (z_x != 0) on a narrow saturating
    accumulator agrees with the Python fold model on every accumulator and overflow; on a wide one folding is
    an identity (the same codes as subtracting)."""
    pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]') reads the model")
    graph = fxpsim.import_model(str(VEC / "onnx_models" / "qs_cnn_qdq_u8_pc.onnx"))
    spec = graph.tensors[graph.inputs[0]]
    x = np.random.default_rng(2).integers(-128, 128, (2,) + tuple(spec.shape)).astype(spec.dtype)
    cfg = fxpsim.preset("int8-acc16-sat")
    narrow = cfg.replace(zero_point="fold", accumulator_bits=17, bias_bits=17)
    _, tr, vals = graph.run(x, narrow, trace=True, keep=True)
    conv = next(nd for nd in graph.nodes if nd.op == "qlinear_conv")
    xs, ws = graph.tensors[conv.inputs[0]], graph.tensors[conv.inputs[1]]
    zx = int(xs.zero_point[0])
    assert zx != 0
    zw = ws.zero_point if ws.zero_point.size > 1 else int(ws.zero_point[0])
    b = graph.tensors[conv.inputs[2]].data if len(conv.inputs) > 2 and conv.inputs[2] else None
    st = conv.attrs.get("stride", 1)
    st = (st, st) if isinstance(st, int) else tuple(st)
    pads = tuple(tuple(int(v) for v in side) for side in conv.attrs.get("padding", [[0, 0], [0, 0]]))
    want, overflows = _fold_conv_model(vals[conv.inputs[0]], ws.data, b, zx, zw, st, pads, 17, 17)
    np.testing.assert_array_equal(np.asarray(tr[conv.name]["acc"]).reshape(want.shape), want)
    assert tr[conv.name]["overflows"] == overflows > 0
    wide = cfg.replace(accumulator_bits=32, bias_bits=32)
    np.testing.assert_array_equal(graph.run(x, wide.replace(zero_point="fold")), graph.run(x, wide))
    np.testing.assert_array_equal(graph.run(x, wide.replace(tile_k=5, tile_accumulator_bits=24)), graph.run(x, wide))



@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
@pytest.mark.parametrize("bits,overflow,bias_add", [(16, "saturate", "preload"), (17, "wrap", "after"), (32, "wrap", "preload")])
def test_litert_native_macs_accumulate_as_the_core_mac_ops(kernels, bits, overflow, bias_add):
    """LiteRT's kernel-set MAC ops on their own (native) requantization with a narrow accumulator: every node's
    accumulators and overflow counts equal the core MAC op's (the reference-kernel import) on the same inputs."""
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    import dataclasses
    from fxpsim.graph.ops import run_node
    path = str(VEC / "tflite_models" / "conv_block.tflite")
    ref, nat = fxpsim.import_model(path), fxpsim.import_model(path, kernels=kernels)
    spec = ref.tensors[ref.inputs[0]]
    x = np.random.default_rng(4).integers(-128, 128, (3,) + tuple(spec.shape)).astype(spec.dtype)
    core_dp = dataclasses.replace(ref.default_datapath, accumulator_bits=bits, accumulator_overflow=overflow,
                                  bias_add=bias_add)
    native_dp = dataclasses.replace(nat.default_datapath, accumulator_bits=bits, accumulator_overflow=overflow,
                                    bias_add=bias_add)
    assert native_dp.requantization == "native"
    _, _, vals = ref.run(x, core_dp, trace=True, keep=True)
    total = 0
    for nd in ref.nodes:
        if nd.op not in ("conv2d", "depthwise_conv2d", "fully_connected"):
            continue
        ins = [None if not t else (ref.tensors[t].data if ref.tensors[t].is_constant else vals[t]) for t in nd.inputs]
        _, want = run_node(ref, nd, ins, core_dp, True)
        node = next(n for n in nat.nodes if n.name == nd.name)
        _, got = run_node(nat, node, ins, native_dp, True)
        np.testing.assert_array_equal(np.asarray(got["acc"]), np.asarray(want["acc"]), err_msg=nd.name)
        assert got["overflows"] == want["overflows"], nd.name
        total += got["overflows"]
    assert (total > 0) == (bits < 32)


def test_node_sweep_covers_importer_mac_ops():
    """A LiteRT builtin import (runtime-native MAC ops) is swept node by node (was: no records at all); the
    first MAC node, fed the same input in both imports, overflows exactly as the core op's fast path says."""
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    from fxpsim.hardware.width_sweep import node_sweep
    path = str(VEC / "tflite_models" / "conv_block.tflite")
    res = {}
    for kernels in ("reference", "builtin"):
        g = fxpsim.import_model(path, kernels=kernels)
        spec = g.tensors[g.inputs[0]]
        x = np.random.default_rng(0).integers(-128, 128, (3,) + tuple(spec.shape)).astype(spec.dtype)
        res[kernels] = node_sweep(g, x, widths=(14, 16, 20), overflows=("saturate", "wrap"),
                                  datapath=fxpsim.preset("int8-acc16-sat"))
    nat = res["builtin"]
    assert len({r["node"] for r in nat.records}) == 8 and len(nat.records) == 8 * 3 * 2
    assert {r["method"] for r in nat.records} == {"run_node"}
    first = "op1:CONV_2D"
    pick = lambda r: [(x["width"], x["overflow"], x["overflow_count"], x["not_exact_fraction"])  # noqa: E731
                      for x in r.records if x["node"] == first]
    assert pick(nat) == pick(res["reference"]) and any(v[2] for v in pick(nat))
    assert len(nat.table().splitlines()) == 2 + len(nat.records)


def test_accumulator_widths_of_a_tflite_graph_against_loops():
    """accumulator_widths on any graph (was QONNX only: an empty list): FINN's weight rule and the observed
    running-sum peak (bias left out) against Python loops over the graph's own codes."""
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    graph = fxpsim.import_model(str(VEC / "tflite_models" / "conv_block.tflite"), kernels="builtin")
    spec = graph.tensors[graph.inputs[0]]
    x = np.random.default_rng(5).integers(-128, 128, (2,) + tuple(spec.shape)).astype(spec.dtype)
    widths = {w.node: w for w in fxpsim.hardware.accumulator_widths(graph, x)}
    _, _, vals = graph.run(x, keep=True)
    checked = 0
    for nd in graph.nodes:
        if nd.op not in ("tflite_conv2d", "tflite_fully_connected"):
            continue
        xs, ws = graph.tensors[nd.inputs[0]], graph.tensors[nd.inputs[1]]
        zx = int(xs.zero_point[0])
        w = ws.data.astype(np.int64) - ws.zero_point.reshape((-1,) + (1,) * (ws.data.ndim - 1))
        x_lo, x_hi = -128 - zx, 127 - zx
        hi = max(sum(int(v) * (x_hi if v > 0 else x_lo) for v in w[o].reshape(-1)) for o in range(w.shape[0]))
        lo = min(sum(int(v) * (x_lo if v > 0 else x_hi) for v in w[o].reshape(-1)) for o in range(w.shape[0]))
        bits = 1
        while not (-(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1):
            bits += 1
        assert widths[nd.name].finn_weights == bits, nd.name
        if nd.op == "tflite_conv2d":
            st = nd.attrs.get("stride", 1)
            st = (st, st) if isinstance(st, int) else tuple(st)
            from fxpsim.graph.registry import _pads
            pads = _pads(xs.shape[:2], ws.data.shape[1:3], st, (1, 1), nd.attrs.get("padding", "VALID"))
            peak = _peak_conv(vals[nd.inputs[0]], ws.data, None, zx, ws.zero_point, st, pads, 1)
        else:
            peak = _peak_dense(vals[nd.inputs[0]], ws.data, None, zx, ws.zero_point)
        assert widths[nd.name].observed == int(peak).bit_length() + 1, nd.name
        checked += 1
    assert checked >= 6
