"""Brevitas QONNX exports (``tests/vectors/qonnx``, made by ``tools/fixtures/qonnx/make_brevitas.py`` with
Brevitas' QONNX exporter: MLPs with 1-, 2-, 4- and 8-bit per-channel weights, 8-bit biases, a CNN with a
``TruncAvgPool2d`` exported as AveragePool + Trunc): every tensor fxpsim computes equals, bit for bit, the one
qonnx's ``execute_onnx`` stored (all scales are powers of two), and its exact value equals the Fraction model's;
live against qonnx too when it is installed."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[qonnx]')")

from fxpsim.frontends.qonnx.importer import exact_values, import_qonnx  # noqa: E402
import qonnx_reference as R  # noqa: E402

DIR = Path(__file__).resolve().parents[1] / "vectors" / "qonnx"
MANIFEST = json.loads((DIR / "manifest.json").read_text())
F32 = np.float32


@pytest.mark.parametrize("name", sorted(MANIFEST["models"]))
def test_brevitas_export_every_tensor(name):
    import onnx
    info = MANIFEST["models"][name]
    stored = np.load(DIR / f"{name}.npz")
    x = stored["x"]
    net = import_qonnx(DIR / f"{name}.onnx")
    y, _, kept = net.run(x, keep=True)
    assert np.array_equal(y, stored[f"t/{info['output']}"])
    ref = R.evaluate(onnx.load(str(DIR / f"{name}.onnx")), {info["input"]: x})
    compared = 0
    for onnx_name, g in net.meta["qonnx"]["tensors"].items():
        if g not in net.meta["qonnx"]["scales"] or g not in kept:
            continue
        exact = exact_values(net, g, kept[g])
        assert np.all(exact == ref[onnx_name]), onnx_name
        f32 = np.vectorize(lambda f: F32(float(f)), otypes=[F32])(exact)
        assert np.array_equal(f32, stored[f"t/{onnx_name}"]), onnx_name
        compared += 1
    assert compared >= 4
    if "Trunc" in info["ops"]:
        assert any(n.op == "qonnx_trunc" for n in net.nodes)
    if "BipolarQuant" in info["ops"]:                    # 1-bit weights, folded to +-1 codes
        w = [net.tensors[n.inputs[1]].data for n in net.nodes if n.op == "qonnx_matmul"][0]
        assert set(np.unique(w)) == {-1, 1}


@pytest.mark.parametrize("name", sorted(MANIFEST["models"]))
def test_brevitas_export_live_against_qonnx(name):
    pytest.importorskip("qonnx", reason="qonnx not installed (pip install qonnx)")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    info = MANIFEST["models"][name]
    rng = np.random.default_rng(1)
    x = (np.round(rng.standard_normal(np.load(DIR / f"{name}.npz")["x"].shape) * 32) / 32).astype(F32)
    mw = ModelWrapper(str(DIR / f"{name}.onnx"))
    want = execute_onnx(mw, {info["input"]: x})[info["output"]]
    assert np.array_equal(import_qonnx(DIR / f"{name}.onnx").run(x), want)
