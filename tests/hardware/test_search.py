"""Mixed-precision search (fxpsim.hardware.mixed_precision): costs against the simulator's own bit-ops, one-node
sensitivity, and a search that meets its target / budget with per-node overrides that simulate to the recorded
accuracy, on any Executor."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fxpsim.hardware import HardwareConfig, preset, simulate, sweep
from fxpsim.nn import quantization_scheme, small_cnn
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, fit

import fxpsim.hardware.mixed_precision as search_mod  # noqa: E402
if "layers" not in HardwareConfig.__dataclass_fields__:
    pytest.skip("HardwareConfig has no per-layer overrides in this tree", allow_module_level=True)

CANDIDATES = {"weight_bits": (8, 5, 4), "activation_bits": (8, 4), "accumulator_bits": (32, 16)}


@pytest.fixture(scope="module")
def setup():
    x, y = load_digits("train", seed=0)
    model = small_cnn((8, 8, 1), seed=0, **quantization_scheme("int8"))
    fit(model, (x[:-200], y[:-200]), 6, 32, Adam(3e-3), seed=0, progress=False)
    return model, (x[-200:], y[-200:]), x[:300]


def test_costs_match_the_simulator(setup):
    model, (xv, yv), xc = setup
    base = preset("int8-acc16-sat")
    nodes = search_mod.mac_nodes(model, base, xc)
    assert [n["name"] for n in nodes] == ["0:conv2d", "2:conv2d", "5:dense"]
    assert [n["macs"] for n in nodes] == [64 * 16 * 9, 16 * 32 * 144, 128 * 10]
    layers = {"0:conv2d": {"weight_bits": 4, "activation_bits": 5}, "2:conv2d": {"activation_bits": 6},
              "5:dense": {"weight_bits": 6, "accumulator_bits": 20}}
    config = base.replace(layers=layers)
    rec = sweep(model, (xv, yv), {"accumulator_overflow": ["saturate"]}, config=config, calibration_x=xc,
                processes=1, progress=False).records[0]
    assert search_mod.configuration_cost(nodes, layers, base, "bit_ops") == rec["bit_ops"]
    assert search_mod.configuration_cost(nodes, layers, base, "bit_ops") == \
        9216 * 4 * 8 + 73728 * 8 * 5 + 1280 * 6 * 6
    assert search_mod.configuration_cost(nodes, layers, base, "acc_bit_macs") == (9216 + 73728) * 16 + 1280 * 20


def test_sensitivity_one_node_at_a_time(setup):
    model, data, xc = setup
    result = search_mod.sensitivity(model, data, "int8-acc16-sat", CANDIDATES, calibration_x=xc)
    # 3 nodes x (2 weight widths + 1 activation width + 1 accumulator) below the reference
    assert len(result.records) == 3 * 4
    ref = simulate(model, search_mod.exact_datapath(preset("int8-acc16-sat")), *data, calibration_x=xc)
    assert result.reference_accuracy == pytest.approx(ref.network["accuracy"])
    acc16 = {r["node"]: r for r in result.records if r["axis"] == "accumulator_bits"}
    assert all(r["overflow_count"] > 0 for r in acc16.values())
    assert acc16["5:dense"]["drop"] > 0.2                  # the logits do not fit 16 bits
    for r in result.records:
        if r["axis"] != "accumulator_bits":
            assert r["overflow_count"] == 0
    assert "drop" in result.table()
    result.plot()


def test_search_meets_the_target_cheaper_than_uniform(setup):
    model, data, xc = setup
    target = 0.85
    result = search_mod.search(model, data, target=target, candidates=CANDIDATES, config="int8-acc16-sat",
                               calibration_x=xc)
    assert result.feasible and result.accuracy >= target
    assert result.best_uniform is not None and result.costs["bit_ops"] <= result.best_uniform["bit_ops"]
    assert len(result.uniform) == 3 * 2 * 2
    # the returned configuration simulates to the recorded accuracy, node by node as chosen
    config = result.config
    assert isinstance(config, HardwareConfig) and set(config.layers) <= {"0:conv2d", "2:conv2d", "5:dense"}
    rep = simulate(model, config, *data, calibration_x=xc)
    assert rep.network["accuracy"] == pytest.approx(result.accuracy)
    assert rep.network["bit_ops"] == result.costs["bit_ops"]
    # fronts are non-dominated and sorted by cost
    for front in (result.pareto_mixed, result.pareto_uniform):
        costs = [r["bit_ops"] for r in front]
        accs = [r["accuracy"] for r in front]
        assert costs == sorted(costs) and accs == sorted(accs)
    assert "saved" in result.table()
    result.plot()


def test_search_budget_and_any_executor(setup):
    model, data, xc = setup
    base = preset("int8-acc16-sat")
    nodes = search_mod.mac_nodes(model, base, xc)
    widest = {n["name"]: {"weight_bits": 8, "activation_bits": 8, "accumulator_bits": 32} for n in nodes}
    budget = 0.5 * search_mod.configuration_cost(nodes, widest, base, "acc_bit_macs")
    small = {"weight_bits": (8,), "activation_bits": (8,), "accumulator_bits": (32, 20, 16)}
    serial = search_mod.search(model, data, budget=budget, candidates=small, cost="acc_bit_macs", config=base,
                               calibration_x=xc)
    assert serial.costs["acc_bit_macs"] <= budget
    with ThreadPoolExecutor(2) as pool:
        pooled = search_mod.search(model, data, budget=budget, candidates=small, cost="acc_bit_macs", config=base,
                                   calibration_x=xc, executor=pool)
    assert pooled.layers == serial.layers and pooled.accuracy == serial.accuracy


def test_search_errors(setup):
    model, data, xc = setup
    with pytest.raises(ValueError, match="budget"):
        search_mod.search(model, data, calibration_x=xc)
    with pytest.raises(ValueError, match="unknown axis"):
        search_mod.search(model, data, target=0.5, candidates={"bias_bits": [8]}, calibration_x=xc)
    with pytest.raises(ValueError, match="cost"):
        search_mod.search(model, data, target=0.5, cost="area", calibration_x=xc)
    assert np.isfinite(search_mod.configuration_cost([], {}, preset("int8-acc16-sat")))
    # a float datapath has no integer widths to lower: both refuse it by name and point at the float sweep
    fp8 = str(Path(__file__).resolve().parents[2] / "examples" / "h100-fp8.toml")
    for fn, kw in ((search_mod.sensitivity, {}), (search_mod.search, {"target": 0.5})):
        with pytest.raises(ValueError, match="float datapath.*accumulator.fraction_bits"):
            fn(model, data, config=fp8, calibration_x=xc, **kw)


def test_exchanges_never_cost_more(setup):
    """Exchanges (one axis up, another down) start where the plain greedy descent stops: never dearer."""
    model, data, xc = setup
    kw = dict(target=0.85, candidates=CANDIDATES, config="int8-acc16-sat", calibration_x=xc)
    plain = search_mod.search(model, data, refine=False, **kw)
    refined = search_mod.search(model, data, **kw)
    assert refined.feasible and refined.costs["bit_ops"] <= plain.costs["bit_ops"]
    assert [h["step"] for h in refined.history[:len(plain.history)]] == [h["step"] for h in plain.history]
    keys = [tuple(sorted((n, tuple(sorted(s.items()))) for n, s in r["layers"].items())) for r in refined.evaluated]
    assert len(keys) == len(set(keys))                      # every configuration evaluated once


# ------------------------------------------------------------------- imported graphs (post-training)
def _imported_block():
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "vectors" / "tflite_models" / "conv_block.tflite"
    import fxpsim
    graph = fxpsim.import_model(str(path), kernels="builtin")
    spec = graph.tensors[graph.inputs[0]]
    x = np.random.default_rng(0).integers(-128, 128, (16,) + tuple(spec.shape)).astype(spec.dtype)
    return graph, x


def _exact_fraction(graph, x, cfg, ref_cfg):
    """Output codes equal to the exact datapath's, by running the graph directly (no sweep machinery)."""
    return float(np.mean(graph.run(x, cfg) == graph.run(x, ref_cfg)))


def test_sensitivity_on_an_imported_graph_matches_direct_runs():
    """Post-training accumulator sensitivity of a LiteRT builtin import (runtime-native MAC ops): every record
    equals the graph run directly with that one node's accumulator lowered."""
    from fxpsim.hardware.simulation import exact_datapath
    graph, x = _imported_block()
    res = search_mod.sensitivity(graph, x, "int8-acc16-sat", candidates={"accumulator_bits": (16, 13)})
    ref = exact_datapath(preset("int8-acc16-sat"))
    assert res.metric == "exact_fraction" and res.reference_accuracy == 1.0
    macs = [nd.name for nd in graph.nodes
            if nd.op in ("tflite_conv2d", "tflite_depthwise_conv2d", "tflite_fully_connected")]
    assert {r["node"] for r in res.records} == set(macs) and len(res.records) == 2 * len(macs)
    for r in res.records:
        want = _exact_fraction(graph, x, ref.with_layer(r["node"], accumulator_bits=r["bits"]), ref)
        assert r["exact_fraction"] == pytest.approx(want, abs=1e-12), r
        assert r["drop"] == pytest.approx(1.0 - want, abs=1e-12)
    assert any(r["drop"] > 0 for r in res.records)
    with pytest.raises(ValueError, match="IntegerGraph"):
        search_mod.sensitivity(graph, x, "int8-acc16-sat", candidates={"weight_bits": (4,)})


def test_search_on_an_imported_graph_meets_its_target_when_run_directly():
    graph, x = _imported_block()
    res = search_mod.search(graph, x, target=0.95, candidates={"accumulator_bits": (32, 20, 16, 13)},
                 config="int8-acc16-sat", cost="acc_bit_macs")
    assert res.metric == "exact_fraction" and res.feasible
    from fxpsim.hardware.simulation import exact_datapath
    ref = exact_datapath(preset("int8-acc16-sat"))
    got = _exact_fraction(graph, x, res.config, ref)
    assert got == pytest.approx(res.accuracy, abs=1e-12) and got >= 0.95
    by_hand = sum(int(graph.macs(nd)) * res.layers[nd.name]["accumulator_bits"] for nd in graph.nodes
                  if nd.name in res.layers)
    assert res.costs["acc_bit_macs"] == by_hand
    assert res.best_uniform is not None and by_hand < res.best_uniform["acc_bit_macs"]
