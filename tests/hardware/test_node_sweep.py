"""fxpsim.hardware.width_sweep against running every point node by node.

The expected numbers come from a plain loop written here: the exact graph's tensors
(``graph.run(x, datapath, keep=True)``), then, for each MAC node, width and overflow mode,
``run_node`` on ``dataclasses.replace(datapath, accumulator_bits=W, accumulator_overflow=mode)``
fed those tensors, compared with the node's exact output.  The sweep shares none of that code path
(it uses the per-add kernels' sweep mode, bounds and requantization constants).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.graph.ops import run_node  # (before mac_ops: graph.ops imports it)
from fxpsim.graph.mac_ops import MAC_OPS
from fxpsim.hardware.width_sweep import exact_widths, node_sweep

MODEL = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "mobilenet_v2_035_48.tflite"


@pytest.fixture(scope="module")
def demo():
    from fxpsim.cli import demo_model
    from fxpsim.nn.datasets import load_digits
    model, _ = demo_model(epochs=1)
    x = load_digits("test", seed=0)[0][:96]
    graph = fxpsim.convert(model, "tflite-int8", load_digits("train", seed=0)[0][:300])
    return graph, x


def loop(graph, x, datapath, widths, modes, nodes=None):
    """{(node, W, mode): (overflows, not exact, max |err|, sum |err|)} by running every point."""
    _, _, values = graph.run(x, datapath, keep=True)
    consts = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    out = {}
    for node in graph.nodes:
        if node.op not in MAC_OPS or (nodes is not None and node.name not in nodes):
            continue
        ins = [(values[t] if t in values else consts[t]) if t else None for t in node.inputs]
        exact = values[node.outputs[0]].astype(np.int64)
        for w in widths:
            for mode in modes:
                dp = dataclasses.replace(datapath, accumulator_bits=w, accumulator_overflow=mode)
                outs, tr = run_node(graph, node, ins, dp, True)
                d = np.abs(outs[0].astype(np.int64) - exact)
                out[node.name, w, mode] = (int(tr["overflows"]), int(np.count_nonzero(d)), int(d.max()),
                                           int(d.sum()))
    return out


def check(res, want):
    assert want
    for (name, w, mode), (ovf, bad, mx, total) in want.items():
        r = res.record(name, w, mode)
        n = r["outputs"]
        assert (r["overflow_count"], r["not_exact_fraction"] * n, r["max_abs_error_lsb"],
                r["mean_abs_error_lsb"] * n) == pytest.approx((ovf, bad, mx, total)), (name, w, mode)


WIDTHS = (8, 11, 14, 16, 17, 19, 23, 32)


def test_demo_cnn_every_node_matches_the_loop(demo):
    graph, x = demo
    dp = graph.default_datapath
    res = node_sweep(graph, x, widths=range(8, 33), datapath=dp)
    assert {r["method"] for r in res.records} == {"fast"}
    want = loop(graph, x, dp, WIDTHS, ("saturate", "wrap"))
    check(res, want)
    assert any(v[0] for v in want.values()) and any(v[1] for v in want.values())
    for name, w0 in res.exact_from.items():     # exact from there on: no event, every output exact
        assert w0 is not None
        assert all(r["overflow_count"] == 0 and r["not_exact_fraction"] == 0 for r in res.records
                   if r["node"] == name and r["width"] >= w0)
        assert res.record(name, w0 - 1, "saturate")["overflow_count"] + \
            res.record(name, w0 - 1, "saturate")["not_exact_fraction"] > 0


@pytest.mark.parametrize("changes", [dict(bias_add="preload"), dict(overflow_at="end"),
                                     dict(accumulator_order="tree"), dict(bias_add="preload", accumulator_order="tree")])
def test_datapath_knobs_match_the_loop(demo, changes):
    graph, x = demo
    dp = dataclasses.replace(graph.default_datapath, **changes)
    widths = (8, 12, 16, 17, 21)
    res = node_sweep(graph, x[:40], widths=widths, overflows=("saturate", "wrap", "saturate_zero"), datapath=dp)
    check(res, loop(graph, x[:40], dp, widths, ("saturate", "wrap", "saturate_zero")))


def test_other_overflow_modes_run_the_node(demo):
    graph, x = demo
    dp = graph.default_datapath
    res = node_sweep(graph, x[:24], widths=(9, 15), overflows=("saturate_symmetric", "wrap"), datapath=dp)
    assert {r["method"] for r in res.records if r["overflow"] == "saturate_symmetric"} == {"run_node"}
    check(res, loop(graph, x[:24], dp, (9, 15), ("saturate_symmetric", "wrap")))


@pytest.mark.skipif(not MODEL.exists(), reason="benchmarks/models/mobilenet_v2_035_48.tflite not found")
def test_imported_mobilenet_matches_the_loop():
    pytest.importorskip("tflite")
    graph = fxpsim.import_model(str(MODEL))
    x = np.random.default_rng(0).integers(-128, 128, (3, 48, 48, 3), dtype=np.int8)
    macs = [n.name for n in graph.nodes if n.op in MAC_OPS]
    nodes = macs[:5] + macs[-3:]                    # conv, depthwise (stride 1 and 2), 1x1s, the dense
    widths = (8, 13, 16, 18, 20)
    res = node_sweep(graph, x, widths=widths, nodes=nodes)
    assert {r["node"] for r in res.records} == set(nodes)
    check(res, loop(graph, x, graph.default_datapath, widths, ("saturate", "wrap"), nodes=set(nodes)))


def test_exact_widths_are_exact(demo):
    graph, x = demo
    dp = graph.default_datapath
    bound = exact_widths(graph, x[:48], dp)
    res = node_sweep(graph, x[:48], widths=range(8, 33), datapath=dp)
    for name, w in bound.items():
        assert res.exact_from[name] <= w <= graph.accumulator_bits_needed(graph.node(name))
        assert res.bound_bits[name] == w
    want = loop(graph, x[:48], dp, sorted(set(bound.values())), ("saturate", "wrap"))
    for (name, w, mode), (ovf, bad, _, _) in want.items():
        if w >= bound[name]:
            assert ovf == 0 and bad == 0


def test_bad_arguments(demo):
    graph, x = demo
    with pytest.raises(ValueError, match="widths"):
        node_sweep(graph, x[:4], widths=[1, 8])
    with pytest.raises(ValueError, match="overflow"):
        node_sweep(graph, x[:4], overflows=())


def test_without_the_simd_kernels(demo, monkeypatch):
    """The portable path (public datapath functions on whole rows, numpy scoring) gives the same numbers."""
    from fxpsim.datapath import _acc_per_add
    monkeypatch.setattr(_acc_per_add, "_SIMD512", False)
    monkeypatch.setattr(_acc_per_add, "_SIMD16", False)
    graph, x = demo
    dp = graph.default_datapath
    widths = (9, 16, 18)
    res = node_sweep(graph, x[:32], widths=widths, datapath=dp)
    check(res, loop(graph, x[:32], dp, widths, ("saturate", "wrap")))
