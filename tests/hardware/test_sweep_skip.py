"""sweep(skip_exact=True): accumulator points at which every node is provably exact reuse the widest run.

The reused records must equal what simulating those points gives (``skip_exact=False`` runs them all),
``seconds`` and ``reused_from`` aside.
"""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim
from fxpsim import nn, train
from fxpsim.hardware import HardwareConfig, preset
from fxpsim.hardware.sweeps import sweep
from fxpsim.hardware.width_sweep import exact_widths
from fxpsim.nn.datasets import load_digits


@pytest.fixture(scope="module")
def trained():
    x, y = load_digits("train", seed=2)
    xt, yt = load_digits("test", seed=2)
    model = nn.small_cnn((8, 8, 1), filters=(4, 8), seed=2)
    train.fit(model, (x, y), epochs=1, optimizer=train.Adam(3e-3), progress=False)
    return model, xt[:80], yt[:80], x[:200]


def _same_but_reuse(a, b):
    drop = ("seconds", "reused_from", "reused_nodes")
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


def test_reused_points_equal_real_runs_on_a_model(trained):
    model, x, y, xc = trained
    grid = {"accumulator_bits": list(range(12, 33, 2)), "accumulator_overflow": ["saturate", "wrap"]}
    fast = sweep(model, (x, y), grid, calibration_x=xc, processes=1, progress=False)
    full = sweep(model, (x, y), grid, calibration_x=xc, processes=1, progress=False, skip_exact=False)
    assert len(fast.records) == len(full.records) == 22
    n_nodes = max(r["reused_nodes"] for r in fast.records)
    reused = [r for r in fast.records if r["reused_nodes"] == n_nodes]
    assert reused and len(reused) < len(fast.records)
    assert all(r["reused_from"] and r["seconds"] == 0.0 and r["overflow_count"] == 0 for r in reused)
    assert all(bool(r["reused_from"]) == (r["reused_nodes"] > 0) for r in fast.records)
    assert any("not simulated" in n and "exact" in n for n in fast.notes)
    assert not any("not simulated" in n for n in full.notes) and "reused_from" not in full.records[0]
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)
    # the widest point is the one reused, and every narrower point that is not exact was simulated
    widest = max(fast.records, key=lambda r: r["accumulator_bits"])
    assert {r["reused_from"] for r in reused} <= {r["config"] for r in fast.records
                                                 if r["accumulator_bits"] == widest["accumulator_bits"]}
    for r in full.records:
        if r["overflow_count"] > 0:
            assert next(f for f in fast.records if f["config"] == r["config"])["reused_nodes"] < n_nodes


def test_reused_points_equal_real_runs_on_a_graph(trained):
    model, x, y, xc = trained
    graph = fxpsim.convert(model, "tflite-int8", xc)
    grid = {"accumulator_bits": [10, 16, 18, 20, 24, 28, 32], "accumulator_overflow": ["saturate", "wrap"]}
    fast = sweep(graph, (x, y), grid,
                 config=preset("tflite-int8"), processes=1, progress=False)
    full = sweep(graph, (x, y), grid,
                 config=preset("tflite-int8"), processes=1, progress=False, skip_exact=False)
    assert any(r["reused_from"] for r in fast.records)
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)


def test_exact_widths_decide_the_skip(trained):
    """A point is reused exactly when every node's width is at least its exact_widths bound."""
    model, x, y, xc = trained
    base = preset("tflite-int8")
    net = fxpsim.convert(model, base, xc)
    need = max(exact_widths(net, x, base).values())
    grid = {"accumulator_bits": sorted({need - 1, need, need + 1, 32})}
    res = sweep(model, (x, y), grid, calibration_x=xc, processes=1, progress=False)
    got = {r["accumulator_bits"]: r["seconds"] == 0.0 for r in res.records}
    assert got == {w: (need <= w < 32) for w in grid["accumulator_bits"]}


def test_per_node_override_narrower_than_its_bound_is_simulated(trained):
    model, x, y, xc = trained
    base = preset("tflite-int8")
    net = fxpsim.convert(model, base, xc)
    first = next(n for n in net.nodes if n.op in ("conv2d", "depthwise_conv2d", "fully_connected"))
    need = exact_widths(net, x, base)[first.name]
    cfg = base.with_layer(first.name, accumulator_bits=need - 1, bias_bits=need - 1) \
        if hasattr(base, "with_layer") else None
    if cfg is None:
        pytest.skip("no per-node overrides")
    # the accumulator axis sets the default width only: the overridden node stays narrow at every point
    res = sweep(model, (x, y), {"accumulator_bits": [30, 32]}, config=cfg, calibration_x=xc, processes=1,
                progress=False)
    assert not any(r["seconds"] == 0.0 for r in res.records)
    # the overridden node is the first MAC node: nothing before it to take from the exact run either
    assert all(r["reused_nodes"] <= net.nodes.index(first) for r in res.records)


def test_tiling_and_fold_are_not_skipped(trained):
    model, x, y, xc = trained
    for changes in (dict(tile_k=8), dict(zero_point="fold")):
        cfg = preset("tflite-int8").replace(**changes)
        res = sweep(model, (x, y), {"accumulator_bits": [28, 32]}, config=cfg, calibration_x=xc, processes=1,
                    progress=False)
        assert not any(r["reused_from"] for r in res.records), changes


def test_configs_differing_elsewhere_are_not_grouped(trained):
    model, x, y, xc = trained
    grid = {"accumulator_bits": [30, 32], "rounding": ["half_up", "half_even"]}
    res = sweep(model, (x, y), grid, calibration_x=xc, processes=1, progress=False)
    for r in res.records:
        if r["reused_from"]:
            ref = next(f for f in res.records if f["config"] == r["reused_from"])
            assert ref["rounding"] == r["rounding"] and ref["accumulator_bits"] == 32
    assert isinstance(HardwareConfig, type) and np.isfinite(res.records[0]["accuracy"])


MODEL = __import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks" / "models" / \
    "mobilenet_v2_035_48.tflite"


@pytest.mark.skipif(not MODEL.exists(), reason="benchmarks/models/mobilenet_v2_035_48.tflite not found")
def test_imported_mobilenet_reuse_equals_real_runs():
    """Adds, a TFLite mean and softmax besides the MAC nodes: none reads the accumulator."""
    pytest.importorskip("tflite")
    graph = fxpsim.import_model(str(MODEL))
    x = np.random.default_rng(1).integers(-128, 128, (3, 48, 48, 3), dtype=np.int8)
    grid = {"accumulator_bits": [16, 22, 26, 32], "accumulator_overflow": ["saturate", "wrap"]}
    kw = dict(config=preset("tflite-int8"), processes=1, progress=False)
    fast = sweep(graph, x, grid, **kw)
    full = sweep(graph, x, grid, skip_exact=False, **kw)
    assert any(r["seconds"] == 0.0 for r in fast.records)
    assert any(0 < r["reused_nodes"] < len(graph.nodes) for r in fast.records)     # 22 and 26 bits: a prefix
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)


def test_average_pooling_needs_its_own_bound():
    """avg_pool2d accumulates at the datapath's width: a point is reused only from its worst case on."""
    from fxpsim.graph import IntegerGraph, Node, TensorSpec
    rng = np.random.default_rng(4)
    w = rng.integers(-3, 4, (2, 1, 1, 1)).astype(np.int8)
    tensors = [TensorSpec("x", 8, True, (8, 8, 1), 1.0, 0), TensorSpec("w", 8, True, scale=1.0, data=w),
               TensorSpec("h", 8, True, (8, 8, 2), 1.0, 0), TensorSpec("y", 8, True, (1, 1, 2), 1.0, 0)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w"], ["h"], {"padding": "VALID"}),
                                 Node("p", "avg_pool2d", ["h"], ["y"], {"pool_size": [8, 8], "padding": "VALID"})],
                       ["x"], ["y"])
    x = rng.integers(-128, 128, (4, 8, 8, 1)).astype(np.int8)
    pool_bits = net.accumulator_bits_needed(net.node("p"))
    mac_bits = exact_widths(net, x, preset("tflite-int8"))["c"]
    assert pool_bits > mac_bits
    widths = sorted({mac_bits, pool_bits - 1, pool_bits, 32})
    cfg = preset("tflite-int8").replace(requantization="float")
    fast = sweep(net, x, {"accumulator_bits": widths}, config=cfg, processes=1, progress=False)
    full = sweep(net, x, {"accumulator_bits": widths}, config=cfg, processes=1, progress=False, skip_exact=False)
    got = {r["accumulator_bits"]: r["seconds"] == 0.0 for r in fast.records}
    assert got == {w: pool_bits <= w < 32 for w in widths}
    # between the two bounds the convolution is exact: the pooling node alone runs
    assert [r["reused_nodes"] for r in fast.records if mac_bits <= r["accumulator_bits"] < pool_bits] == \
        [1] * sum(mac_bits <= w < pool_bits for w in widths)
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)


def test_prefix_runs_equal_real_runs():
    """Points between the first node's bound and the last one's start from the first inexact node: a narrow
    convolution (small weights) before a wide dense layer."""
    from fxpsim.graph import IntegerGraph, Node, TensorSpec
    rng = np.random.default_rng(5)
    w1 = rng.integers(-4, 5, (4, 3, 3, 2)).astype(np.int8)
    w2 = rng.integers(-127, 128, (3, 6 * 6 * 4)).astype(np.int8)
    tensors = [TensorSpec("x", 8, True, (6, 6, 2), 0.05, 3), TensorSpec("w1", 8, True, scale=0.01, data=w1),
               TensorSpec("b1", 32, True, data=rng.integers(-300, 300, 4).astype(np.int64)),
               TensorSpec("h", 8, True, (6, 6, 4), 0.02, -5), TensorSpec("hf", 8, True, (144,), 0.02, -5),
               TensorSpec("w2", 8, True, scale=0.01, data=w2),
               TensorSpec("b2", 32, True, data=rng.integers(-9000, 9000, 3).astype(np.int64)),
               TensorSpec("y", 8, True, (3,), 0.5, 0)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w1", "b1"], ["h"], {"padding": "SAME"}),
                                 Node("r", "reshape", ["h"], ["hf"], {"shape": [-1, 144]}),
                                 Node("f", "fully_connected", ["hf", "w2", "b2"], ["y"])], ["x"], ["y"])
    x = rng.integers(-128, 128, (16, 6, 6, 2)).astype(np.int8)
    base = preset("tflite-int8")
    need = exact_widths(net, x, base)
    lo, hi = need["c"], need["f"]
    assert lo < hi
    widths = sorted({lo - 1, lo, hi - 1, hi, 32})
    grid = {"accumulator_bits": widths, "accumulator_overflow": ["saturate", "wrap"]}
    fast = sweep(net, x, grid, config=base, processes=1, progress=False)
    full = sweep(net, x, grid, config=base, processes=1, progress=False, skip_exact=False)
    partial = [r for r in fast.records if 0 < r["reused_nodes"] and r["seconds"] > 0]
    assert partial and {r["accumulator_bits"] for r in partial} == {w for w in widths if lo <= w < hi}
    assert all(r["reused_nodes"] == 2 for r in partial)                 # the convolution and the reshape
    assert any("simulated in part" in n for n in fast.notes)
    assert any(r["overflow_count"] for r in partial)                    # the dense layer overflows there
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)
