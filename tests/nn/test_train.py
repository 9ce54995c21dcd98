"""Training loop, optimizers, schedules, data set, save/load, and the QAT acceptance accuracies on digits.

Optimizers are checked against step-by-step float64 re-implementations of the published update rules
(written here), the acceptance runs train real networks on scikit-learn's digits with fixed seeds.
"""
from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim.nn.datasets as datasets
from fxpsim.nn.datasets import load_digits
from fxpsim.nn import BatchNorm, Dense, Sequential, mlp, quantization_scheme, small_cnn
from fxpsim.nn.train import SGD, Adam, CosineLR, StepLR, evaluate, fit, predict, load_model, save_model


@pytest.fixture(scope="module")
def digits_flat():
    return load_digits("train", flatten=True), load_digits("test", flatten=True)


# ----------------------------------------------------------------------------- data set
def test_load_digits_split_shapes_and_values():
    (xtr, ytr), (xte, yte) = load_digits("train", seed=0), load_digits("test", seed=0)
    assert xtr.shape == (1437, 8, 8, 1) and xte.shape == (360, 8, 8, 1)
    assert xtr.dtype == np.float32 and ytr.dtype == np.int64
    assert xtr.min() == 0.0 and xtr.max() == 1.0
    assert set(np.unique(ytr)) == set(range(10)) and set(np.unique(yte)) == set(range(10))
    # every image is one of the 17 grey levels / 16 of the original data
    np.testing.assert_array_equal(xtr * 16, np.round(xtr * 16))
    # train + test = the whole data set, no overlap (match rows against sklearn's own arrays)
    from sklearn.datasets import load_digits as sk_digits
    sk = sk_digits()
    both = np.concatenate([xtr, xte]).reshape(1797, 64) * 16
    order = np.lexsort(both.T)
    sk_order = np.lexsort(sk.data.T)
    np.testing.assert_array_equal(both[order], sk.data[sk_order])
    np.testing.assert_array_equal(np.concatenate([ytr, yte])[order], sk.target[sk_order])


def test_load_digits_is_seeded_and_flattens():
    a, b, c = load_digits("test", seed=5), load_digits("test", seed=5), load_digits("test", seed=6)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    flat, labels = load_digits("test", seed=5, flatten=True)
    np.testing.assert_array_equal(flat, a[0].reshape(360, 64))
    assert load_digits("all")[0].shape == (1797, 8, 8, 1)
    with pytest.raises(ValueError, match="split must be"):
        load_digits("validation")


def test_load_digits_without_scikit_learn_says_how_to_install(monkeypatch):
    datasets._digits_arrays.cache_clear()
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    try:
        with pytest.raises(ImportError, match="pip install scikit-learn"):
            load_digits()
    finally:
        datasets._digits_arrays.cache_clear()


# ----------------------------------------------------------------------------- optimizers and schedules
def test_sgd_momentum_matches_reference_rule():
    p = np.array([1.0, -2.0, 0.5], np.float32)
    grads = [np.array(g, np.float32) for g in ([0.1, 0.2, -0.3], [0.4, -0.1, 0.0], [-0.2, 0.3, 0.1])]
    opt = SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
    ref_p, ref_v = p.astype(np.float64), None
    for g in grads:
        opt.step({"0.W": p}, {"0.W": g})
        d = g.astype(np.float64) + 0.01 * ref_p
        ref_v = d if ref_v is None else 0.9 * ref_v + d
        ref_p = ref_p - 0.1 * ref_v
    np.testing.assert_allclose(p, ref_p, rtol=1e-6)


def test_adam_matches_reference_rule_and_skips_decay_on_biases():
    p = np.array([0.3, -0.7], np.float32)
    b = np.array([0.1], np.float32)
    opt = Adam(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1)
    ref, ref_b, m, v, mb, vb = p.astype(np.float64), b.astype(np.float64), 0.0, 0.0, 0.0, 0.0
    rng = np.random.default_rng(0)
    for t in range(1, 6):
        g = rng.standard_normal(2).astype(np.float32)
        gb = rng.standard_normal(1).astype(np.float32)
        opt.step({"W": p, "b": b}, {"W": g, "b": gb})
        d = g + 0.1 * ref
        m, v = 0.8 * m + 0.2 * d, 0.99 * v + 0.01 * d * d
        ref = ref - 0.01 / (1 - 0.8 ** t) * m / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-6)
        mb, vb = 0.8 * mb + 0.2 * gb, 0.99 * vb + 0.01 * gb * gb           # no decay on the bias
        ref_b = ref_b - 0.01 / (1 - 0.8 ** t) * mb / (np.sqrt(vb / (1 - 0.99 ** t)) + 1e-6)
    np.testing.assert_allclose(p, ref, rtol=1e-5)
    np.testing.assert_allclose(b, ref_b, rtol=1e-5)
    assert p.dtype == np.float32


@pytest.mark.parametrize("make", [lambda: Adam(0.01), lambda: SGD(0.1, momentum=0.9, nesterov=True)])
def test_optimizer_state_survives_parameters_appearing(make):
    """A parameter's trajectory does not depend on which other parameters share the flat state."""
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(3).astype(np.float32) for _ in range(4)]
    alone, shared = np.ones(3, np.float32), np.ones(3, np.float32)
    extra = np.zeros((2, 2), np.float32)
    opt_a, opt_b = make(), make()
    for t, g in enumerate(grads):
        opt_a.step({"a": alone}, {"a": g})
        params = {"a": shared, "c": extra} if t >= 2 else {"a": shared}
        opt_b.step(params, {"a": g, "c": np.ones((2, 2), np.float32)})
    assert alone.tobytes() == shared.tobytes()
    assert set(opt_b.state) == {"a", "c"} and extra.any()


def test_schedules():
    step = StepLR(0.1, step_size=3, gamma=0.5)
    assert [step(e) for e in range(7)] == [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025]
    cos = CosineLR(1.0, epochs=4, min_lr=0.2)
    assert cos(0) == 1.0 and cos(4) == pytest.approx(0.2) and cos(2) == pytest.approx(0.6)
    assert cos(1) == pytest.approx(0.2 + 0.4 * (1 + math.cos(math.pi / 4)))
    with pytest.raises(ValueError):
        StepLR(0.1, step_size=0)
    with pytest.raises(ValueError):
        Adam(lr=-1.0)


def test_fit_applies_schedule_per_epoch(digits_flat):
    (x, y), _ = digits_flat
    history = fit(mlp((64, 8, 10), seed=0), (x[:64], y[:64]), 3, 32, Adam(StepLR(0.01, 1, 0.5)), progress=False)
    assert history["lr"] == [0.01, 0.005, 0.0025]


# ----------------------------------------------------------------------------- acceptance (digits)
def train_and_test(scheme, digits, epochs=10, lr=3e-3, builder=mlp):
    (xtr, ytr), (xte, yte) = digits
    model = builder(seed=0, **quantization_scheme(scheme))
    fit(model, (xtr, ytr), epochs, 32, Adam(lr), seed=0, progress=False)
    return evaluate(model, xte, yte)["accuracy"]


@pytest.fixture(scope="module")
def float_accuracy(digits_flat):
    return train_and_test("float", digits_flat)


def test_float_mlp_reaches_95_percent(float_accuracy):
    assert float_accuracy >= 0.95


def test_int8_qat_within_one_point_of_float(digits_flat, float_accuracy):
    assert train_and_test("int8", digits_flat) >= float_accuracy - 0.01


def test_int4_qat_within_three_points_of_float(digits_flat, float_accuracy):
    assert train_and_test("int4", digits_flat) >= float_accuracy - 0.03


def test_ternary_weights_reach_90_percent(digits_flat):
    assert train_and_test("ternary", digits_flat) >= 0.90


def test_binary_weights_and_activations_reach_80_percent(digits_flat):
    assert train_and_test("binary", digits_flat) >= 0.80


def test_small_cnn_trains():
    digits = load_digits("train"), load_digits("test")
    assert train_and_test("float", digits, epochs=3, builder=small_cnn) >= 0.90


# ----------------------------------------------------------------------------- determinism, history, progress
def test_fit_is_deterministic_bit_for_bit(digits_flat):
    (x, y), _ = digits_flat
    runs = []
    for fit_seed in (7, 7, 8):
        model = mlp((64, 16, 10), seed=1, **quantization_scheme("int8"))
        fit(model, (x[:256], y[:256]), 2, 32, Adam(1e-2), seed=fit_seed, progress=False)
        runs.append(model.parameters())
    assert runs[0].keys() == runs[1].keys()
    for name in runs[0]:
        assert runs[0][name].tobytes() == runs[1][name].tobytes(), name
    assert any(runs[0][n].tobytes() != runs[2][n].tobytes() for n in runs[0])


def test_fit_history_progress_and_validation(digits_flat, capsys):
    (x, y), (xv, yv) = digits_flat
    model = mlp((64, 16, 10), seed=0)
    history = fit(model, (x[:100], y[:100]), 2, 32, SGD(0.1, momentum=0.9), val_data=(xv, yv), progress=True)
    assert set(history) == {"loss", "accuracy", "lr", "time", "val_loss", "val_accuracy"}
    assert all(len(v) == 2 for v in history.values())
    assert history["loss"][1] < history["loss"][0]
    assert "epoch 2/2" in capsys.readouterr().err
    assert not model.training                      # fit leaves the model in eval mode
    assert history["val_accuracy"][-1] == evaluate(model, xv, yv)["accuracy"]


def test_fit_callback_sees_every_epoch(digits_flat):
    (x, y), _ = digits_flat
    seen = []
    history = fit(mlp((64, 16, 10), seed=0), (x[:64], y[:64]), 3, 32, Adam(1e-2), progress=False,
                  callback=lambda epoch, h: seen.append((epoch, len(h["loss"]))))
    assert seen == [(1, 1), (2, 2), (3, 3)] and len(history["loss"]) == 3
    with pytest.raises(TypeError, match="callback must be callable"):
        fit(mlp((64, 16, 10), seed=0), (x[:64], y[:64]), 1, progress=False, callback=3)


def test_evaluate_and_predict_restore_mode():
    model = Sequential(Dense(4, 3, seed=0), BatchNorm(3))
    model.train()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    logits = predict(model, x)
    assert model.training and logits.shape == (5, 3)
    res = evaluate(model, x, np.array([0, 1, 2, 0, 1]))
    assert model.training and 0 <= res["accuracy"] <= 1 and res["loss"] > 0


# ----------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("scheme", ["int8", "binary"])
def test_save_load_round_trip_is_exact(tmp_path, digits_flat, scheme):
    (x, y), (xv, _) = digits_flat
    model = mlp((64, 16, 10), seed=0, **quantization_scheme(scheme))
    fit(model, (x[:128], y[:128]), 1, 32, Adam(1e-2), progress=False)
    path = save_model(model, tmp_path / "model")
    assert path.endswith(".npz")
    loaded = load_model(path)
    assert loaded.get_config() == model.get_config()
    for kind in ("parameters", "buffers"):
        a, b = getattr(model, kind)(), getattr(loaded, kind)()
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name
    model.eval()
    assert model(xv).tobytes() == loaded(xv).tobytes()


def test_load_model_rejects_foreign_or_mismatched_files(tmp_path):
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not an fxpsim model"):
        load_model(tmp_path / "plain.npz")
    path = save_model(mlp((4, 3, 2), seed=0), tmp_path / "m.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["__fxpsim_model__.json"]))
    meta["model"]["config"]["layers"][0]["config"]["out_features"] = 5
    arrays["__fxpsim_model__.json"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="shape"):
        load_model(tmp_path / "bad.npz")


# ----------------------------------------------------------------------------- bad input
def _model():
    return mlp((4, 3, 2), seed=0)


@pytest.mark.parametrize("x, y, exc, match", [
    (np.ones((3, 4), np.float32), np.array([0, 1, 2]), ValueError, r"labels must lie in \[0, 1\]"),
    (np.ones((3, 4), np.float32), np.array([0, -1, 1]), ValueError, "labels must be >= 0"),
    (np.ones((3, 4), np.float32), np.array([0.0, 1.0, 1.0]), TypeError, "labels y must be integers"),
    (np.ones((3, 4), np.float32), np.array([0, 1]), ValueError, r"y must have shape \[3\]"),
    (np.array([[np.nan, 0, 0, 0]] * 2, np.float32), np.array([0, 1]), ValueError, "NaN"),
    (np.ones((3, 4), np.float64), np.array([0, 1, 1]), TypeError, "dtype float32"),
    (np.ones((0, 4), np.float32), np.zeros(0, np.int64), ValueError, "non-empty"),
    (np.ones((3, 5), np.float32), np.array([0, 1, 1]), ValueError, r"expected input shape \[N, 4\]"),
])
def test_fit_and_evaluate_reject_bad_data(x, y, exc, match):
    with pytest.raises(exc, match=match):
        fit(_model(), (x, y), 1, 2, progress=False)
    with pytest.raises(exc, match=match):
        evaluate(_model(), x, y)


def test_fit_rejects_bad_arguments():
    x, y = np.ones((3, 4), np.float32), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="batch_size"):
        fit(_model(), (x, y), 1, 0, progress=False)
    with pytest.raises(TypeError, match="pair"):
        fit(_model(), x, 1, 2, progress=False)


def test_example_train_qat_runs(tmp_path, monkeypatch, capsys):
    """Smoke test of examples/train_qat.py (one epoch per run): table, JSON and plot are written."""
    script = Path(__file__).resolve().parents[2] / "examples" / "train_qat.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--epochs", "1", "--out", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "binary W+A (BNN)" in out and "MXFP4 W, MXFP8 A" in out and "ms/epoch" in out
    results = json.loads((tmp_path / "qat_results.json").read_text())["results"]
    assert len(results) == 16 and all(0 <= r["test_accuracy"] <= 1 for r in results)
    assert (tmp_path / "qat_accuracy.png").stat().st_size > 10_000
