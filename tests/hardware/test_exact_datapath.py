"""The exact datapath as the one reference (issue 23): sweeps from a narrow NPU config, node sweeps on it,
imported and multi-input graphs in worker processes, and recommendations that name a metric that can
decide.

Every expected number comes from the pure-Python integer model of ``test_simulation`` (one Dense layer on
Python ints: bias quantized and saturated into a ``bias_bits`` register, a per-add ``accumulator_bits``
accumulator, the requantization written out with ``fractions``) or from the runtime's own outputs stored
with the fixture; nothing here is computed by the code under test.
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim import nn
from fxpsim.graph.ops import run_node  # (before mac_ops: graph.ops imports it)
from fxpsim.graph.mac_ops import MAC_OPS
from fxpsim.hardware import preset, simulate
from fxpsim.hardware.sweeps import sweep
from fxpsim.hardware.width_sweep import node_sweep
from test_simulation import _act_params, _clamp, _f32, _reference_dense, _rha

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
BASE = preset("int8-acc16-sat")           # a 16-bit NPU: 16-bit bias register, 16-bit saturating accumulator


def _model(bias):
    m = nn.Sequential(nn.Dense(4, 3, seed=1))
    m.layers[0].W[...] = [[0.5, -0.25, 0.75], [-1.0, 0.3, 0.2], [0.1, 0.9, -0.6], [0.4, -0.8, 0.05]]
    m.layers[0].b[...] = bias
    return m.eval()


def _data(n=40, seed=3):
    return np.random.default_rng(seed).uniform(-1.5, 1.5, size=(n, 4)).astype(np.float32)


def _independent(model, x, acc_bits, bias_bits, overflow="saturate"):
    """(output codes, clipped biases) of the one-layer model on Python ints."""
    h = model.layers[0].forward(x).astype(np.float64)
    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    codes = [[_clamp(_rha(float(v) / s_in) + z_in, -128, 127) for v in row] for row in x.astype(np.float64)]
    cfg = dataclasses.replace(BASE, accumulator_bits=acc_bits, bias_bits=bias_bits, accumulator_overflow=overflow)
    out = _reference_dense(codes, z_in, s_in, model.layers[0].W, model.layers[0].b, (h.min(), h.max()), False,
                           cfg)[0]
    w = model.layers[0].W
    s_w = [_f32(max(abs(float(w[k, o])) for k in range(4)) / 127) for o in range(3)]
    bmax = (1 << (bias_bits - 1)) - 1
    clipped = sum(1 for o in range(3) if abs(_rha(float(model.layers[0].b[o]) / (s_in * s_w[o]))) > bmax)
    return np.array(out), clipped


BIG_BIAS = [6.0, -5.0, 0.1]        # ~64,000 and ~-53,000 accumulator LSBs: they do not fit 16 bits


def test_a_sweep_from_a_16_bit_npu_finds_the_clipped_biases():
    model, x = _model(BIG_BIAS), _data()
    res = sweep(model, x, {"accumulator_bits": [16, 20, 24]}, config=BASE, processes=1, progress=False,
                skip_exact=False)
    exact, clipped_exact = _independent(model, x, 32, 32, "wrap")
    assert clipped_exact == 0
    by = {r["accumulator_bits"]: r for r in res.records}
    for bits in (16, 20, 24):
        codes, clipped = _independent(model, x, bits, bits)     # the bias register follows the accumulator
        diff = np.abs(codes - exact)
        rec = by[bits]
        assert rec["bias_clipped"] == clipped, bits
        assert rec["exact_fraction"] == pytest.approx(np.mean(diff == 0)), bits
        assert rec["max_lsb_error"] == diff.max() and rec["mean_lsb_error"] == pytest.approx(diff.mean())
    assert by[16]["bias_clipped"] == 2 and by[16]["exact_fraction"] < 1
    # widening the accumulator widened the bias register: nothing clips, every code is the exact datapath's
    assert by[24]["bias_clipped"] == 0 and by[24]["exact_fraction"] == 1.0
    assert res.recommendation["metric"] == "exact_fraction"
    narrowest = min(b for b in (16, 20, 24) if all(
        np.array_equal(_independent(model, x, w, w)[0], exact) for w in (16, 20, 24) if w >= b))
    assert res.recommendation["accumulator_bits"] == narrowest


def test_a_pinned_bias_register_keeps_its_width_and_the_exact_datapath_does_not():
    model, x = _model(BIG_BIAS), _data()
    cfg = BASE.replace(accumulator_bits=24, bias_bits=16)
    assert cfg.replace(accumulator_bits=28).bias_bits == 16
    report = simulate(model, cfg, x)
    codes, clipped = _independent(model, x, 24, 16)
    exact, _ = _independent(model, x, 32, 32, "wrap")
    rec = report.layers[0]
    assert rec.bias_clipped == clipped == 2
    assert rec.not_exact_fraction == pytest.approx(np.mean(codes != exact)) and rec.not_exact_fraction > 0
    assert rec.overflow_count == 0          # no add overflows: the not-exact codes are the clipped biases


def _single_rounding(acc, real, bits):
    """``round_half_up(acc * m / 2^(b - e))``, :math:`m = \\mathrm{round}(M 2^{b-e})`, 2^(e-1) <= M < 2^e."""
    r = Fraction(real)
    e = 0
    while r >= Fraction(2) ** e:
        e += 1
    while r < Fraction(2) ** (e - 1):
        e -= 1
    m = int(r * Fraction(2) ** (bits - e) + Fraction(1, 2))
    if m == 1 << bits:
        m, e = m >> 1, e + 1
    q = Fraction(acc * m, 1) / Fraction(2) ** (bits - e)
    return int(np.floor(q + Fraction(1, 2)))


def test_the_not_exact_column_shows_a_short_multiplier():
    model, x = _model([0.1, -0.2, 0.05]), _data()
    cfg = BASE.replace(accumulator_bits=32, multiplier_bits=6)
    report = simulate(model, cfg, x)
    # independent: 6-bit multiplier against the exact datapath's 31-bit one
    h = model.layers[0].forward(x).astype(np.float64)
    s_in, z_in = _act_params(float(x.min()), float(x.max()))
    s_out, z_out = _act_params(h.min(), h.max())
    w = model.layers[0].W
    s_w = [_f32(max(abs(float(w[k, o])) for k in range(4)) / 127) for o in range(3)]
    w_q = [[_clamp(_rha(float(w[k, o]) / s_w[o]), -127, 127) for k in range(4)] for o in range(3)]
    b_q = [_rha(float(model.layers[0].b[o]) / (s_in * s_w[o])) for o in range(3)]
    short, full = [], []
    for row in x.astype(np.float64):
        xs = [_clamp(_rha(float(v) / s_in) + z_in, -128, 127) - z_in for v in row]
        for o in range(3):
            acc = b_q[o] + sum(a * wq for a, wq in zip(xs, w_q[o]))
            real = float(np.float64(np.float32(s_in)) * np.float64(np.float32(s_w[o])) / np.float64(np.float32(s_out)))
            short.append(_clamp(_single_rounding(acc, real, 6) + z_out, -128, 127))
            full.append(_clamp(_single_rounding(acc, real, 31) + z_out, -128, 127))
    want = np.mean(np.array(short) != np.array(full))
    assert want > 0
    assert report.layers[0].not_exact_fraction == pytest.approx(want)


# ----------------------------------------------------------------------------------- imported graphs
def _tflite_block():
    pytest.importorskip("tflite", reason="the 'tflite' package reads .tflite files")
    g = fxpsim.import_model(str(VECTORS / "tflite_models" / "mobilenet_v2_block.tflite"))
    x = np.load(VECTORS / "tflite_models" / "mobilenet_v2_block.npz")["t0"][:, 0]
    return g, x


def test_node_sweep_on_a_narrow_config_keeps_the_exact_reference():
    graph, x = _tflite_block()
    cfg = BASE                                  # the NPU's 16-bit config as the datapath
    exact = dataclasses.replace(cfg, accumulator_bits=32, bias_bits=32, accumulator_overflow="wrap")
    res = node_sweep(graph, x, widths=(12, 16, 20, 32), datapath=cfg)
    _, _, values = graph.run(x, exact, keep=True)
    consts = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    seen = 0
    for i, node in enumerate(graph.nodes):
        if node.op not in MAC_OPS:
            continue
        ins = [(values[t] if t in values else consts[t]) if t else None for t in node.inputs]
        ref = values[node.outputs[0]].astype(np.int64)
        for w in (12, 16, 20, 32):
            dp = dataclasses.replace(cfg, accumulator_bits=w, bias_bits=w)
            outs, tr = run_node(graph, node, ins, dp, True)
            r = res.record(node.name, w, "saturate")
            assert r["overflow_count"] == tr["overflows"], (node.name, w)
            assert r["not_exact_fraction"] == pytest.approx(np.mean(outs[0] != ref)), (node.name, w)
            seen += r["not_exact_fraction"] > 0
        assert res.record(node.name, 32, "saturate")["not_exact_fraction"] == 0
        assert res.exact_from[node.name] is not None
    assert seen                                 # the narrow widths do change codes


def test_sweep_in_worker_processes_on_an_imported_tflite_graph():
    graph, x = _tflite_block()
    grid = {"accumulator_bits": [14, 18, 32]}
    pooled = sweep(graph, x, grid, config=BASE, processes=2, progress=False, skip_exact=False)
    here = sweep(graph, x, grid, config=BASE, processes=1, progress=False, skip_exact=False)
    keys = ("exact_fraction", "max_lsb_error", "overflow_count", "bias_clipped", "agreement")
    assert [[r[k] for k in keys] for r in pooled.records] == [[r[k] for k in keys] for r in here.records]
    by = {r["accumulator_bits"]: r for r in pooled.records}
    assert by[32]["exact_fraction"] == 1.0 and by[14]["exact_fraction"] < 1 and by[14]["overflow_count"] > 0
    # top-1 agreement would pick 14 bits here (it is 1 there); the recommendation's metric does not
    assert pooled.recommendation["accumulator_bits"] == 32


def test_sweep_on_a_multi_input_onnx_graph_matches_onnxruntime():
    pytest.importorskip("onnx", reason="the 'onnx' package reads .onnx files")
    graph = fxpsim.import_model(str(VECTORS / "onnx_models" / "hb_qlinear_eltwise_s8.onnx"))
    data = np.load(VECTORS / "onnx_models" / "hb_qlinear_eltwise_s8.npz")
    xs = [data["input:a"], data["input:b"]]
    res = sweep(graph, xs, {"accumulator_bits": [16, 32]}, config="tflite-int8", processes=1, progress=False)
    assert len(res.records) == 2
    outs = graph.run(xs)
    np.testing.assert_array_equal(outs[0] if isinstance(outs, list) else outs, data["output"])
    assert all(r["exact_fraction"] == 1.0 for r in res.records)


def test_a_single_output_detector_gets_no_recommendation_from_top1_agreement():
    m = nn.Sequential(nn.Dense(4, 1, seed=2))
    m.layers[0].W[...] = [[0.9], [-0.8], [0.7], [0.6]]
    m.layers[0].b[...] = [0.3]
    x = _data(60, seed=5)
    res = sweep(m, x, {"accumulator_bits": [8, 10, 12, 16]}, config=BASE, metric="agreement", processes=1,
                progress=False)
    assert all(r["agreement"] == 1.0 for r in res.records)       # top-1 of one value: always equal
    assert res.recommendation["accumulator_bits"] is None
    assert "exact_fraction" in res.recommendation["reason"]
    res = sweep(m, x, {"accumulator_bits": [8, 10, 12, 16]}, config=BASE, processes=1, progress=False)
    # 16 bits still overflows three times here: no swept width is exact, so nothing is recommended
    assert res.recommendation["accumulator_bits"] is None and "no swept width" in res.recommendation["reason"]
    res = sweep(m, x, {"accumulator_bits": [8, 10, 12, 16, 20, 24]}, config=BASE, processes=1, progress=False)
    assert res.recommendation["metric"] == "exact_fraction"
    assert res.recommendation["accumulator_bits"] != 8
    by = {r["accumulator_bits"]: r for r in res.records}
    assert by[8]["exact_fraction"] < 1 and by[res.recommendation["accumulator_bits"]]["exact_fraction"] == 1.0


def test_the_html_opens_with_the_recommendation_and_the_caveats():
    model, x = _model(BIG_BIAS), _data()
    res = sweep(model, x, {"accumulator_bits": [16, 24]}, config=BASE, processes=1, progress=False)
    report = simulate(model, BASE, x)
    report.sweep = res
    report.conclusion = ["the answer"]
    page = report.to_html(figures={})
    import html
    top = html.unescape(page[:page.index("<h2>Network</h2>")])
    assert "the answer" in top and "recommended accumulator: 24 bits" in top and "'exact_fraction'" in top
    assert "bias register follows the accumulator" in top and "unswept base configuration" in top
    from fxpsim.report.render import Report
    assert Report.from_json(report.to_json()).conclusion == ["the answer"]


def test_exact_widths_under_zero_point_fold_are_data_driven():
    from fxpsim.hardware import convert
    from fxpsim.hardware.width_sweep import exact_widths
    model, x = _model([0.4, -0.3, 0.2]), _data()
    cfg = preset("tflite-int8").replace(zero_point="fold")
    graph = convert(model, cfg, x)
    node = next(n for n in graph.nodes if n.op in MAC_OPS)
    got = exact_widths(graph, x, cfg)[node.name]
    # independent: raw input codes, b' = b - z_x sum_k w_k, running sums b' + x_1 w_1 + ... (bias after)
    xq = graph.run(x, cfg, keep=True)[2][node.inputs[0]].astype(int).tolist()
    w = graph.tensors[node.inputs[1]].data.astype(int).tolist()          # [O, K], zero point 0
    b = graph.tensors[node.inputs[2]].data.astype(int).tolist()
    zx = int(graph.tensors[node.inputs[0]].zero_point[0])
    folded = [b[o] - zx * sum(w[o]) for o in range(len(w))]
    peak = max(abs(v) for v in folded)
    for row in xq:
        for o in range(len(w)):
            acc = 0
            for xv, wv in zip(row, w[o]):
                acc += xv * wv
                peak = max(peak, abs(acc))
            peak = max(peak, abs(acc + folded[o]))
    assert got == peak.bit_length() + 1
    assert got < graph.accumulator_bits_needed(node)       # the worst case of the type is wider
