"""Model files are data: loading never runs code, and every bad file is one clear ValueError.

Each test writes a good model with save_model, then damages or edits the file the way a user, a
broken disk or an attacker could, and checks load_model's answer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fxpsim.nn import Dense, ReLU, Sequential
from fxpsim.nn.train import load_model, save_model

ARCH = "__fxpsim_model__.json"


def _model():
    return Sequential(Dense(4, 3, weight_quantizer="fake_quant8", activation_quantizer={"class_name": "affine",
                                                                                          "learnable": True}, seed=0),
                      ReLU(), Dense(3, 2, seed=1))


def _arrays(path):
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _rewrite(tmp_path, edit, name="edited.npz"):
    """Save a good model, apply ``edit(arrays, meta)`` and write the result."""
    good = save_model(_model(), tmp_path / "good.npz")
    arrays = _arrays(good)
    meta = json.loads(str(arrays[ARCH]))
    edit(arrays, meta)
    arrays[ARCH] = np.array(json.dumps(meta))
    out = tmp_path / name
    np.savez(out, **arrays)
    return out


def test_a_good_file_still_loads(tmp_path):
    model = _model()
    loaded = load_model(save_model(model, tmp_path / "m.npz"))
    for name, arr in model.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[name], arr)


# --------------------------------------------------------------------------- never run code
@pytest.mark.parametrize("target", ["os:system", "subprocess:check_call", "builtins:exec"])
def test_gradient_naming_a_module_attribute_is_refused(tmp_path, monkeypatch, target):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)

    def edit(arrays, meta):
        meta["model"]["config"]["layers"][0]["config"]["weight_quantizer"]["config"]["gradient"] = target
    path = _rewrite(tmp_path, edit)
    with pytest.raises(ValueError, match="not a registered function"):
        load_model(path)
    assert calls == []


def test_malicious_file_imports_nothing(tmp_path):
    def edit(arrays, meta):
        meta["model"]["config"]["layers"][1]["config"]["activation_quantizer"] = {
            "class_name": "function", "config": {"fn": "wave:open"}}
    path = _rewrite(tmp_path, edit)
    code = ("import sys\nfrom fxpsim.nn.train import load_model\n"
            f"try:\n    load_model({str(path)!r})\nexcept ValueError as e:\n    print('ValueError:', e)\n"
            "print('imported' if 'wave' in sys.modules else 'clean')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ValueError:" in out.stdout and "not a registered function" in out.stdout
    assert out.stdout.strip().endswith("clean")


# --------------------------------------------------------------------------- edited parameters
@pytest.mark.parametrize("value, match", [
    (lambda a: a.astype(np.float64), "dtype float64, expected float32"),
    (lambda a: a.astype(np.complex64), "dtype complex64, expected float32"),
    (lambda a: a.astype(np.int32), "dtype int32, expected float32"),
    (lambda a: np.where(np.arange(a.size).reshape(a.shape) == 1, np.nan, a).astype(np.float32),
     r"1 NaN/inf value\(s\), first at index \(0, 1\)"),
    (lambda a: np.full_like(a, np.inf), r"12 NaN/inf value\(s\), first at index \(0, 0\)"),
    (lambda a: a[:2], r"shape \(2, 3\), expected \(4, 3\)"),
])
def test_edited_parameters_are_checked(tmp_path, value, match):
    def edit(arrays, meta):
        arrays["param/0.W"] = value(arrays["param/0.W"])
    with pytest.raises(ValueError, match=r"parameter '0\.W' \(layer 0, Dense\).*" + match):
        load_model(_rewrite(tmp_path, edit))


def test_edited_quantizer_parameter_names_its_slot(tmp_path):
    def edit(arrays, meta):
        arrays["param/0.activation_quantizer.scale"] = np.array([np.nan], np.float32).reshape(
            arrays["param/0.activation_quantizer.scale"].shape)
    with pytest.raises(ValueError, match=r"'0\.activation_quantizer\.scale' \(layer 0, Dense\).*NaN"):
        load_model(_rewrite(tmp_path, edit))


# --------------------------------------------------------------------------- broken or foreign files
def _good_bytes(tmp_path):
    return (tmp_path / "good.npz").read_bytes() if (tmp_path / "good.npz").exists() else \
        open(save_model(_model(), tmp_path / "good.npz"), "rb").read()


@pytest.mark.parametrize("content, match", [
    (lambda good: b"", "is empty"),
    (lambda good: good[: len(good) // 2], "truncated or corrupted"),
    (lambda good: good[:30], "truncated or corrupted"),
    (lambda good: good[:200] + bytes(b ^ 0x5A for b in good[200:400]) + good[400:], "truncated or corrupted|invalid"),
    (lambda good: b'[hardware]\nweight_format = "Q3.4"\naccumulator = 16\n', "text file"),
    (lambda good: b"\x93NUMPY\x01\x00" + b"\x00" * 100, "numpy .npy"),
    (lambda good: bytes(range(256)) * 4, "not a zip archive"),
])
def test_broken_and_foreign_files_are_one_clear_value_error(tmp_path, content, match):
    path = tmp_path / "broken.npz"
    path.write_bytes(content(_good_bytes(tmp_path)))
    with pytest.raises(ValueError, match=match) as info:
        load_model(path)
    assert "\n" not in str(info.value)                  # the CLI prints it as one line
    assert str(path) in str(info.value)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="directory"):
        load_model(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "nope.npz")


@pytest.mark.parametrize("edit, match", [
    (lambda a, m: m["model"]["config"]["layers"][0]["config"].update(explode=True),
     r"layer 0: layer Dense: unknown keyword\(s\) \['explode'\]"),
    (lambda a, m: m["model"]["config"]["layers"][1].update({"class": "os.system"}), "unknown layer class 'os.system'"),
    (lambda a, m: m["model"]["config"]["layers"][0]["config"].update(in_features="four"), "layer Dense"),
    (lambda a, m: m["model"].update(config={"layers": "x"}), "Sequential"),
    (lambda a, m: m["model"]["config"]["layers"][0]["config"]["weight_quantizer"]["config"].update(bits=3),
     "unknown config key"),
    (lambda a, m: m.update(format_version=99), "format version 99"),
    (lambda a, m: a.update({"param/0.W": np.array([object()], dtype=object)}), "not a plain numeric array"),
    (lambda a, m: a.pop("param/2.b"), r"missing \['2\.b'\]"),
])
def test_bad_architectures_are_value_errors(tmp_path, edit, match):
    with pytest.raises(ValueError, match=match):
        load_model(_rewrite(tmp_path, edit))


def test_bad_json_entry(tmp_path):
    arrays = _arrays(save_model(_model(), tmp_path / "good.npz"))
    arrays[ARCH] = np.array("{not json")
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(tmp_path / "bad.npz")
    arrays[ARCH] = np.array("[1, 2]")
    np.savez(tmp_path / "bad2.npz", **arrays)
    with pytest.raises(ValueError, match="JSON object"):
        load_model(tmp_path / "bad2.npz")
