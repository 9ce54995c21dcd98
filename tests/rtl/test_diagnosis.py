"""Diagnosis from outputs alone (fxpsim.rtl.compare_arrays with only the output tensor of a node): for RTL
outputs made by an independent model with one datapath knob changed (``conv_model.Model``: accumulator
overflow rule, width, weight layout, padding with the code 0), the compare report names that knob, locates the
first mismatching element and the MAC step; for outputs no single knob explains it says so.  The golden vectors
are those of the imported ``conv_block.tflite`` on a 16-bit saturating, bias-preloaded datapath."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.rtl import compare_arrays
from fxpsim.rtl.vectors import export_vectors
from conv_model import Model

pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")

MODEL = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "tflite_models" / "conv_block.tflite"


@pytest.fixture(scope="module")
def sat16(tmp_path_factory):
    g = fxpsim.import_tflite(MODEL)
    d = tmp_path_factory.mktemp("sat16")
    dp = dataclasses.replace(g.default_datapath, accumulator_bits=16, accumulator_overflow="saturate",
                             bias_add="preload")
    image = np.load(MODEL.with_suffix(".npz"))["input"][0]
    return d, export_vectors(g, d, image, dp, formats=("npy",))


def _diagnose(d, manifest, node, y):
    e = next(n for n in manifest["nodes"] if n["name"] == node)
    return compare_arrays(d, {f"{e['dir']}/output": y}, source="outputs alone")


@pytest.mark.parametrize("node, bug, named", [
    ("op3:DEPTHWISE_CONV_2D", {"mode": "wrap"}, "wrapped where saturation was expected"),
    ("op7:CONV_2D", {"bits": 15}, "accumulator 15 bits wide instead of 16: width off by one (15-bit saturate)"),
    ("op6:CONV_2D", {"hwio": True}, "weights transposed (read as HWIO instead of OHWI)"),
    ("op2:CONV_2D", {"pad_code": 0}, "padded taps read the code 0 instead of the input zero point"),
])
def test_a_datapath_knob_is_found_from_the_outputs_alone(sat16, node, bug, named):
    d, manifest = sat16
    model = Model(d, manifest, node)
    assert model.first_wrong_word() is None                      # the model is the golden one without the bug
    y, acc = model.outputs(**bug)
    bad = np.argwhere(y != model.out)
    assert len(bad), f"{bug} should change some output of {node}"
    r = _diagnose(d, manifest, node, y).to_dict()
    assert not r["ok"]
    t = next(t for t in r["tensors"] if t["role"] == "output")
    assert t["differ"] == len(bad)
    assert t["patterns"][0].startswith(named) and "found from the outputs alone" in t["patterns"][0], t["patterns"]
    f = r["first_mismatch"]
    want = tuple(int(v) for v in bad[0])
    assert (f["node"], f["role"], tuple(f["index"]), f["got"]) == (node, "output", want, int(y[want]))
    good = model.sums(*want)
    wrong = model.sums(*want, **bug)
    if "bits" in bug:                                            # the first sum beyond the narrow range
        step = next(s for s in range(len(good)) if not -(1 << 14) <= good[s] < (1 << 14))
    else:                                  # where the sums part ways (saturation and wrapping, a changed product)
        step = next(s for s in range(len(good)) if good[s] != wrong[s])
    assert f["mac"]["step"] == step
    assert [row["hypothesis"] for row in f["mac"]["rows"]] == wrong
    assert any(f"accumulator {int(acc[want])} -> {int(y[want])}" in line for line in f["requant"])


def test_outputs_no_knob_explains_are_said_to_be_unexplained(sat16):
    d, manifest = sat16
    node = "op6:CONV_2D"
    model = Model(d, manifest, node)
    y = model.out.copy()
    y[0, 1, 2, 3] = y[0, 1, 2, 3] + 1 if y[0, 1, 2, 3] < 127 else 126       # one code off, nothing else
    r = _diagnose(d, manifest, node, y).to_dict()
    t = next(t for t in r["tensors"] if t["role"] == "output")
    assert t["patterns"][0].startswith("no single datapath knob reproduces the RTL's outputs"), t["patterns"]
    assert r["first_mismatch"]["index"] == [0, 1, 2, 3]

