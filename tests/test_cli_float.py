"""The command line on float datapaths: ``fxpsim simulate`` / ``fxpsim sweep`` of a float .onnx (and .tflite) model on a float
target (exit codes, the HTML written, the conclusion), and the one-line exit-2 errors for a float datapath on an
integer model, an integer target on a float model, unknown grid keys and malformed --grid values."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fxpsim.cli import main

pytest.importorskip("onnx")                          # optional: the onnx extra
CNN = "tests/vectors/float_onnx/grid_cnn.onnx"        # tools/fixtures/float_onnx/make_models.py
QUANTIZED = "tests/vectors/onnx_models/hb_qgemm_s8_pt.onnx"
FP8 = '[weights]\nformat = "e4m3"\n[activations]\nformat = "e4m3"\n[accumulator]\npreset = "h100-fp8"\n'


@pytest.fixture
def files(tmp_path, monkeypatch):
    import pathlib
    monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[1])
    (tmp_path / "fp8.toml").write_text(FP8)
    x = (np.random.default_rng(1).integers(-4, 5, (16, 2, 6, 6)) / 4).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path


def _error(capsys, args) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fxpsim: error: "), err
    return err


def test_simulate_a_float_onnx_model_writes_the_float_report(files, capsys):
    out = files / "rep"
    assert main(["simulate", "--model", CNN, "--config", str(files / "fp8.toml"), "--data", str(files / "x.npy"),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "conv1" in text and "fc4" in text and f"report written to {out / 'report.html'}" in text
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "id='float-layers'" in page
    saved = json.loads((out / "report.json").read_text())
    assert [r["name"] for r in saved["layers"]] == ["conv1", "dw2", "fc3", "fc4"]
    assert {r["accumulator"] for r in saved["layers"]} == {"h100-fp8"}


def test_simulate_a_float_tflite_model(files, capsys):
    np.save(files / "xt.npy", (np.random.default_rng(1).integers(-4, 5, (16, 6, 6, 2)) / 4).astype(np.float32))
    out = files / "rt"
    assert main(["simulate", "--model", "tests/vectors/tflite_float/grid_cnn.tflite", "--config",
                 str(files / "fp8.toml"), "--data", str(files / "xt.npy"), "--out", str(out)]) == 0
    saved = json.loads((out / "report.json").read_text())
    assert [r["name"] for r in saved["layers"]] == ["grid_cnn_1/conv1_1/Relu", "grid_cnn_1/dw2_1/Relu6",
                                                    "grid_cnn_1/fc3_1/MatMul", "StatefulPartitionedCall_1:0"]
    assert {r["accumulator"] for r in saved["layers"]} == {"h100-fp8"}


def test_float_and_integer_mismatches_are_one_line_exit_2(files, capsys):
    x = str(files / "x.npy")
    err = _error(capsys, ["simulate", "--model", CNN, "--data", x])              # default tflite-int8
    assert "is a float model" in err and "float datapath --config" in err
    err = _error(capsys, ["simulate", "--model", QUANTIZED, "--config", str(files / "fp8.toml"), "--data", x])
    assert "is a float datapath" in err and "quantized model (QGemm" in err
    err = _error(capsys, ["simulate", "--model", "tests/vectors/tflite_models/conv_block.tflite", "--config",
                          str(files / "fp8.toml"), "--data", x])
    assert "is a float datapath" in err and "is a quantized model (tensor " in err and ", ...)" in err
    import fxpsim
    fxpsim.import_model("tests/vectors/tflite_models/conv_block.tflite").save(files / "g.npz")
    err = _error(capsys, ["simulate", "--model", str(files / "g.npz"), "--config", str(files / "fp8.toml"), "--data", x])
    assert "is a float datapath" in err and "is an integer graph" in err
    err = _error(capsys, ["simulate", "--model", "tests/vectors/tflite_float/grid_cnn.tflite", "--data", x])
    assert "grid_cnn.tflite is a float model" in err and "float datapath --config" in err
    err = _error(capsys, ["sweep", "--model", CNN, "--config", "tflite-int8", "--data", x, "--acc-bits", "16"])
    assert "is a float model" in err


def test_sweep_a_float_model_writes_curve_table_and_conclusion(files, capsys):
    out = files / "sw"
    assert main(["sweep", "--model", CNN, "--config", str(files / "fp8.toml"), "--data", str(files / "x.npy"),
                 "--grid", "accumulator.fraction_bits=2:4", "promote_every=32,inf", "--tolerance", "0.1",
                 "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tolerance: agreement_exact within 0.1 of the exact accumulation's" in text
    with open(out / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(int(r["fraction_bits"]), int(r["promote_every"])) for r in rows] == \
        [(f, p) for f in (2, 3, 4) for p in (32, 0)]
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["tolerance"] == 0.1 and saved["conclusion"][0] in text
    page = (out / "report.html").read_text()
    assert "id='float-sweep'" in page and "id='plot-float_sweep'" in page and "id='float-conclusion'" in page


@pytest.mark.parametrize("extra, expect", [
    (["--grid", "accumulator.bits=16"], "unknown axis 'accumulator.bits' for a float datapath; valid keys: "
                                        "accumulator.fraction_bits"),
    (["--grid", "fraction_bits"], "expected KEY=VALUES"),
    (["--grid", "fraction_bits=9:3"], "a range is a:b or a:b:step with a <= b"),
    (["--grid", "fraction_bits=8", "fraction_bits=9"], "fraction_bits given twice"),
    (["--grid", "promote_every=48"], "multiple of chunk=32"),
    (["--acc-bits", "16"], "--acc-bits: integer-datapath options"),
    ([], "give the axes with --grid KEY=VALUES"),
    (["--grid", "fraction_bits=8", "--tolerance", "-1"], "expected a finite number >= 0, got '-1'"),
])
def test_sweep_usage_errors_name_what(files, capsys, extra, expect):
    err = _error(capsys, ["sweep", "--model", CNN, "--config", str(files / "fp8.toml"), "--data",
                          str(files / "x.npy"), "--no-progress", *extra])
    assert expect in err, err
