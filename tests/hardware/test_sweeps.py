"""Sweeps: every record equals an individual simulate() call, in processes and on other executors."""
from __future__ import annotations

import csv
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import numpy as np

import fxpsim
from fxpsim import nn, train
from fxpsim.nn.datasets import load_digits
from fxpsim.hardware import ConfigError, preset, simulate
from fxpsim.hardware.sweeps import SweepResult, pareto_front, sweep

METRICS = ("accuracy", "float_accuracy", "agreement", "output_sqnr_db", "overflow_count", "bit_ops")


@pytest.fixture(scope="module")
def trained():
    x, y = load_digits("train", seed=1)
    xt, yt = load_digits("test", seed=1)
    model = nn.small_cnn((8, 8, 1), filters=(4, 8), seed=1)
    train.fit(model, (x, y), epochs=2, optimizer=train.Adam(3e-3), progress=False)
    return model, xt[:120], yt[:120], x[:200]


def _check_against_simulate(result, model, x, y, xc, base="tflite-int8"):
    for rec in result.records:
        cfg = preset(base).replace(**{k: rec[k] for k in ("weight_bits", "activation_bits", "accumulator_bits",
                                                          "accumulator_overflow", "rounding")})
        net = simulate(model, cfg, x, y, calibration_x=xc).network
        for key in METRICS:
            assert rec[key] == net[key], (key, rec, net)
        layer_ovf = dict(item.split("=") for item in rec["layer_overflows"].split(";"))
        assert sum(int(v) for v in layer_ovf.values()) == rec["overflow_count"]


def test_sweep_in_processes_equals_individual_simulations(trained):
    model, x, y, xc = trained
    grid = {"accumulator_bits": [12, 20, 32], "accumulator_overflow": ["saturate", "wrap"]}
    result = sweep(model, (x, y), grid, calibration_x=xc, processes=2, progress=False)
    assert [(r["accumulator_bits"], r["accumulator_overflow"]) for r in result.records] == \
        [(a, o) for a in (12, 20, 32) for o in ("saturate", "wrap")]
    _check_against_simulate(result, model, x, y, xc)
    by = {(r["accumulator_bits"], r["accumulator_overflow"]): r for r in result.records}
    assert by[(12, "wrap")]["overflow_count"] > 0 and by[(32, "wrap")]["overflow_count"] == 0
    assert by[(12, "wrap")]["accuracy"] < by[(32, "wrap")]["accuracy"]


def test_sweep_list_of_grids_any_executor_and_outputs(trained, tmp_path):
    model, x, y, xc = trained
    grid = [{"weight_bits": [4, 8], "acc_bits": [16]},
            {"rounding": ["half_even"], "overflow": ["saturate"], "accumulator.bits": [14]}]
    with ThreadPoolExecutor(2) as pool:
        result = sweep(model, (x, y), grid, calibration_x=xc, executor=pool, progress=False)
    assert len(result.records) == 3
    assert [r["weight_bits"] for r in result.records] == [4, 8, 8]
    assert result.records[2]["rounding"] == "half_even" and result.records[2]["accumulator_bits"] == 14
    _check_against_simulate(result, model, x, y, xc)
    serial = sweep(model, (x, y), grid, calibration_x=xc, processes=1, progress=False)
    assert serial.records == [{**r, "seconds": s["seconds"]} for r, s in zip(result.records, serial.records)]
    rows = list(csv.DictReader(open(result.to_csv(tmp_path / "s.csv"))))
    assert [int(r["weight_bits"]) for r in rows] == [4, 8, 8]
    assert float(rows[0]["accuracy"]) == pytest.approx(result.records[0]["accuracy"])
    data = json.loads(result.to_json(tmp_path / "s.json"))
    assert data["records"][1]["accumulator_bits"] == 16 and "pareto_accumulator" in data
    assert "weight_bits" in result.table().splitlines()[0]


def test_sweep_without_labels_uses_exact_fraction(trained):
    model, x, _, xc = trained
    result = sweep(model, x, {"accumulator_bits": [14, 24]}, calibration_x=xc, progress=False)  # auto: serial
    assert result.metric == "exact_fraction" and result.records[0]["accuracy"] is None
    assert result.pareto_accumulator[-1]["exact_fraction"] == 1.0 > result.records[0]["exact_fraction"]
    assert result.pareto_accumulator[-1]["agreement"] > 0.95 > result.records[0]["agreement"]
    assert result.recommendation["accumulator_bits"] == 24


def test_pareto_front_hand_table():
    recs = [{"b": 8, "a": 0.5}, {"b": 8, "a": 0.7}, {"b": 10, "a": 0.6}, {"b": 12, "a": 0.9},
            {"b": 12, "a": 0.9}, {"b": 16, "a": 0.9}, {"b": 6, "a": None}, {"b": 20, "a": 0.95}]
    assert pareto_front(recs, "b", "a") == [{"b": 8, "a": 0.7}, {"b": 12, "a": 0.9}, {"b": 20, "a": 0.95}]
    assert pareto_front([], "b", "a") == []
    res = SweepResult(grid={}, records=[{"accumulator_bits": 8, "bit_ops": 5, "accuracy": 0.1},
                                        {"accumulator_bits": 9, "bit_ops": 4, "accuracy": 0.2}])
    assert len(res.pareto_accumulator) == 2 and len(res.pareto_bitops) == 1


def test_sweep_bad_grids(trained):
    model, x, y, xc = trained
    with pytest.raises(ConfigError, match="unknown axis 'acc_width'"):
        sweep(model, (x, y), {"acc_width": [8]}, progress=False)
    with pytest.raises(ValueError, match="non-empty mapping"):
        sweep(model, (x, y), {}, progress=False)
    with pytest.raises(ValueError, match="has no values"):
        sweep(model, (x, y), {"weight_bits": []}, progress=False)
    with pytest.raises(ConfigError, match=r"grid point .*weights.bits"):
        sweep(model, (x, y), {"weight_bits": [1]}, progress=False)
    with pytest.raises(ValueError, match="processes must be a positive int"):
        sweep(model, (x, y), {"weight_bits": [8, 4]}, processes=0, progress=False)


def test_sweep_on_dask_local_cluster(trained):
    distributed = pytest.importorskip("distributed")
    model, x, y, xc = trained
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        result = sweep(model, (x, y), {"accumulator_bits": [12, 32]}, calibration_x=xc,
                       executor=client.get_executor(), progress=False)
    _check_against_simulate(result, model, x, y, xc)


def test_package_level_sweep_is_the_function():
    import fxpsim
    import fxpsim.hardware.sweeps  # noqa: F401  (importing the implementation module must not shadow fxpsim.sweep)
    assert callable(fxpsim.sweep) and fxpsim.sweep.__module__ == "fxpsim.hardware.sweeps"


def test_pareto_ties_and_tolerance_go_to_the_cheaper_point():
    from fxpsim.hardware.sweeps import pareto_front
    recs = [{"c": 12, "a": 0.50}, {"c": 16, "a": 0.98}, {"c": 20, "a": 0.99}, {"c": 24, "a": 0.99},
            {"c": 32, "a": 0.985}, {"c": 16, "a": 0.97}]
    assert [r["c"] for r in pareto_front(recs, "c", "a")] == [12, 16, 20]
    assert [r["c"] for r in pareto_front(recs, "c", "a", tolerance=0.02)] == [12, 16]
    with pytest.raises(ValueError, match="tolerance"):
        pareto_front(recs, "c", "a", tolerance=-1)


def test_sweep_result_renders_saves_and_attaches_to_a_report(tmp_path):
    model = fxpsim.nn.mlp((6, 5, 3), seed=0).eval()
    x = np.random.default_rng(0).normal(size=(30, 6)).astype(np.float32)
    y = model.forward(x).argmax(1)
    res = fxpsim.sweep(model, (x, y), {"accumulator_bits": [8, 12, 32]}, config="int8-acc16-sat",
                       processes=1, progress=False, metric="agreement", tolerance=0.01)
    assert res.metric == "agreement" and "Pareto front (agreement" in res.to_text()
    assert any("bias register follows the accumulator" in n and "16 -> 8, 12, 32" in n for n in res.notes)
    paths = res.save(tmp_path)
    assert (tmp_path / "sweep.csv").exists() and paths["sweep_json"].endswith("sweep.json")
    report = fxpsim.simulate(model, "int8-acc16-sat", x, y)
    report.sweep = res
    assert report.sweep["records"] == res.records and "bias register follows" in report.to_text()
    with pytest.raises(ValueError, match="metric must be one of"):
        fxpsim.sweep(model, (x, y), {"accumulator_bits": [8]}, metric="loss", processes=1, progress=False)
