"""The command line, run as a user would: ``python -m fxpsim ...`` in a temporary directory."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10
    import tomli as tomllib

import fxpsim
from fxpsim import nn, train
from fxpsim.nn.datasets import load_digits
from fxpsim.hardware import preset, preset_names

REPO = Path(__file__).resolve().parent.parent


def run(*args, cwd, timeout=180):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "fxpsim", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    x, y = load_digits("train", seed=0)
    model = nn.small_cnn((8, 8, 1), filters=(4, 8), seed=0)
    train.fit(model, (x, y), epochs=2, optimizer=train.Adam(3e-3), progress=False)
    return train.save_model(model, tmp_path_factory.mktemp("model") / "cnn.npz")


def test_version_and_help(tmp_path):
    r = run("--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"fxpsim {fxpsim.__version__}"
    for cmd in ([], ["demo"], ["simulate"], ["sweep"], ["presets"]):
        r = run(*cmd, "--help", cwd=tmp_path)
        assert r.returncode == 0 and "usage: fxpsim" in r.stdout, (cmd, r.stderr)
    r = run(cwd=tmp_path)
    assert r.returncode == 0 and "demo" in r.stdout


def test_presets_list_and_show(tmp_path):
    r = run("presets", cwd=tmp_path)
    assert r.returncode == 0
    for name in preset_names():
        assert name in r.stdout
    r = run("presets", "--show", "int4-acc12-sat", cwd=tmp_path)
    assert r.returncode == 0
    assert tomllib.loads(r.stdout) == preset("int4-acc12-sat").to_dict()


def test_simulate_writes_report(tmp_path, model_file):
    r = run("simulate", "--model", str(model_file), "--config", "int8-acc16-wrap", "--out", "rep", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "hardware accuracy" in r.stdout and "0:conv2d" in r.stdout
    d = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert d["config"]["name"] == "int8-acc16-wrap" and d["network"]["n_samples"] == 360
    assert (tmp_path / "rep" / "report.html").stat().st_size > 10_000
    xt, yt = load_digits("test", seed=3)
    np.savez(tmp_path / "data.npz", x=xt[:40], y=yt[:40])
    r = run("simulate", "--model", str(model_file), "--data", "data.npz", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["network"]["n_samples"] == 40
    toml = tmp_path / "mine.toml"
    toml.write_text('name = "mine"\n[accumulator]\nbits = 24\noverflow = "saturate"\n')
    r = run("simulate", "--model", str(model_file), "--config", str(toml), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config"]["accumulator"]["bits"] == 24


def test_sweep_command(tmp_path, model_file):
    r = run("sweep", "--model", str(model_file), "--acc-bits", "12,16:32:16", "--overflow", "saturate,wrap",
            "--processes", "1", "--no-progress", "--out", "sw", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(tmp_path / "sw" / "sweep.csv")))
    assert [(int(r_["accumulator_bits"]), r_["accumulator_overflow"]) for r_ in rows] == \
        [(a, o) for a in (12, 16, 32) for o in ("saturate", "wrap")]
    assert "Pareto front" in r.stdout and (tmp_path / "sw" / "report.html").exists()


def test_demo_end_to_end(tmp_path):
    r = run("demo", "--epochs", "1", "--acc-bits", "12,20,32", "--processes", "1", "--no-progress",
            "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for name in ("report.html", "report.json", "report.md", "sweep.csv", "sweep.json", "model.npz",
                 "plots/accuracy_vs_accumulator.png", "plots/heatmap_weight_accumulator.png",
                 "plots/sqnr_per_layer.png", "plots/accumulator_histograms.png"):
        assert (out / name).is_file(), name
    # tflite-int8 never overflows: a sentence replaces the empty overflow chart
    assert not (out / "plots" / "overflow_per_layer.png").exists()
    assert "No accumulator add overflowed" in (out / "report.html").read_text()
    d = json.loads((out / "report.json").read_text())
    assert d["config"]["name"] == "tflite-int8" and len(d["sweep"]["records"]) == 3 * 2 + 2 * 2
    assert "Accuracy on every preset" in r.stdout and "out/report.html  the report" in r.stdout
    for name in ("report.md", "report.json", "sweep.csv", "sweep.json", "model.npz"):
        assert name in r.stdout and (tmp_path / "out" / name).exists()
    assert "with 8-bit weights" in r.stdout


def test_graph_files_inspect_simulate_and_sweep(tmp_path, model_file):
    """A converted model saved as a graph runs through inspect, simulate and sweep like the model itself."""
    model = train.load_model(model_file)
    x, y = load_digits("test", seed=0)
    graph = fxpsim.convert(model, "int8-acc16-sat", load_digits("train", seed=0)[0][:500])
    graph.save(tmp_path / "graph.npz")
    r = run("inspect", "graph.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "0:conv2d" in r.stdout and "acc bits" in r.stdout
    r = run("simulate", "--model", "graph.npz", "--config", "int8-acc16-sat", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    want = fxpsim.simulate(graph, "int8-acc16-sat", x, y).network
    assert d["network"]["accuracy"] == want["accuracy"] and d["network"]["overflow_count"] == want["overflow_count"]
    assert d["network"]["accuracy"] == float(np.mean(
        graph.tensors[graph.outputs[0]].dequantize(graph.run(x, fxpsim.preset("int8-acc16-sat"))).argmax(1) == y))
    r = run("sweep", "--model", "graph.npz", "--acc-bits", "14:16:2", "--overflow", "wrap", "--no-progress",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len([line for line in r.stdout.splitlines() if " wrap " in line]) >= 2


def _damaged_graph_files(tmp_path):
    """trunc.npz (a graph file cut in half) and stride0.npz (a conv stride of 0 edited into graph.json)."""
    import io
    import zipfile
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tools.fuzz.mutate import seed_graph
    p = seed_graph().save(tmp_path / "seed.npz")
    data = Path(p).read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[:len(data) // 2])
    with zipfile.ZipFile(p) as zf:
        entries = {i.filename: zf.read(i) for i in zf.infolist()}
    desc = json.loads(np.lib.format.read_array(io.BytesIO(entries["graph.json.npy"])).tobytes())
    next(n for n in desc["nodes"] if n["name"] == "conv1")["attrs"]["stride"] = 0
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(json.dumps(desc).encode(), np.uint8))
    entries["graph.json.npy"] = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "stride0.npz", "w") as zf:
        for k, v in entries.items():
            zf.writestr(k, v)


def test_output_closed_before_the_end_fails_loudly(tmp_path):
    """``fxpsim presets | head -0``: the reader is gone; the command reports it did not finish (exit 2)."""
    cmd = [sys.executable, "-c", "import sys; from fxpsim.cli import main; sys.exit(main(['presets']))"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(fxpsim.__file__).parent.parent)})
    proc.stdout.close()                                   # closed before anything is read
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "standard output was closed" in lines[0], err


@pytest.mark.parametrize("args, message", [
    (["simulate", "--model", "missing.npz"], "model file not found: missing.npz"),
    (["simulate", "--model", "MODEL", "--config", "tflite-int9"], "unknown preset 'tflite-int9'"),
    (["simulate", "--model", "MODEL", "--config", "bad.toml"], "unknown key 'accumulator.bitz'"),
    (["simulate", "--model", "MODEL", "--config", "badvalue.toml"], "accumulator.overflow: unknown value"),
    (["simulate", "--model", "MODEL", "--config", "nothere.toml"], "hardware config file not found"),
    (["simulate", "--model", "MODEL", "--data", "nothere.npz"], "data file not found"),
    (["simulate"], "the following arguments are required: --model"),
    (["sweep", "--model", "MODEL"], "give at least one axis"),
    (["sweep", "--model", "MODEL", "--acc-bits", "ten"], "expected integers"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["demo", "--epochs", "0"], "--epochs must be at least 1"),
    (["presets", "--show", "nope"], "unknown preset 'nope'"),
    (["sweep", "--model", "MODEL", "--acc-bits", "0:1000000000"], "bit widths must lie in 1..64"),
    (["simulate", "--model", "MODEL", "--calibration", "0"], "expected a positive integer"),
    (["simulate", "--model", "MODEL", "--calibration", "-3"], "expected a positive integer"),
    (["simulate", "--model", "GARBAGE"], "cannot load model"),
    (["simulate", "--model", "GRAPH"], "not digits images: give --data"),
    (["sweep", "--model", "GRAPH", "--weight-bits", "4", "--data", "X.npy"], "cannot be swept on an integer graph"),
    (["inspect", "missing.tflite"], "model file not found"),
    (["demo", "--out", "bad.toml"], "exists and is not a folder"),
    (["simulate", "--model", "MODEL", "--out", "bad.toml"], "exists and is not a folder"),
    (["simulate", "--model", "MODEL", "--seed", "-1"], "expected an integer seed"),
    (["demo", "--seed", "2.5"], "expected an integer seed"),
    (["sweep", "--model", "MODEL", "--per-layer", "--target", "nan"], "expected an accuracy in [0, 1]"),
    (["sweep", "--model", "MODEL", "--per-layer", "--target", "97"], "expected an accuracy in [0, 1]"),
    (["sweep", "--model", "MODEL", "--per-layer", "--budget", "-5"], "expected a positive finite number"),
    (["sweep", "--model", "MODEL", "--acc-bits", "16", "--processes", "0"], "expected a positive integer"),
    (["inspect", "TRUNCATED"], "cannot load model"),
    (["inspect", "STRIDE0"], "node 'conv1' (conv2d): stride must be a positive int"),
    (["simulate", "--model", "STRIDE0"], "stride must be a positive int"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, model_file, args, message):
    (tmp_path / "bad.toml").write_text("[accumulator]\nbitz = 16\n")
    (tmp_path / "badvalue.toml").write_text("[accumulator]\noverflow = 'sideways'\n")
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 not really a zip")
    graph = fxpsim.convert(train.load_model(model_file), "tflite-int8", load_digits("train")[0][:50])
    graph = fxpsim.graph.IntegerGraph(list(graph.tensors.values())[1:], graph.nodes[1:], ["input_codes"],
                                      graph.outputs)                      # an int8-input graph
    graph.save(tmp_path / "graph.npz")
    np.save(tmp_path / "X.npy", np.zeros((3, 8, 8, 1), np.int8))
    _damaged_graph_files(tmp_path)
    subst = {"MODEL": str(model_file), "GARBAGE": "garbage.npz", "GRAPH": "graph.npz", "TRUNCATED": "trunc.npz",
             "STRIDE0": "stride0.npz"}
    args = [subst.get(a, a) for a in args]
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fxpsim: error: ") and message in lines[0], r.stderr


def test_sweep_per_layer_search_writes_a_loadable_config(tmp_path, model_file):
    r = run("sweep", "--model", str(model_file), "--per-layer", "--weight-bits", "4,8", "--acc-bits", "16,32",
            "--target", "0.5", "--processes", "1", "--out", "pl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "chosen: accuracy" in r.stdout and "0:conv2d" in r.stdout
    cfg = fxpsim.load_config(str(tmp_path / "pl" / "per_layer.toml"))
    assert cfg.layers, "per-node overrides are written"
