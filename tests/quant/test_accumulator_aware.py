"""Accumulator-aware weight quantization (A2Q): the l1 bound, the bounded rounding, the straight-through
gradients against finite differences, and the guarantee itself -- zero overflow events on the exact datapath
for every output's adversarial input, several accumulator widths, both overflow modes and both adder orders."""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim.quant.accumulator_aware as a2q
from fxpsim.datapath.accumulate import matmul
from fxpsim.hardware import convert, preset
from fxpsim.nn import (Conv2D, Dense, DepthwiseConv2D, Flatten, MaxPool2D, Quantize, Sequential, quantization_scheme,
                       small_cnn)
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, CosineLR, fit, load_model, save_model
from fxpsim.quant.accumulator_aware import (AccumulatorAwareQuantizer, constrain_accumulators, l1_bound,
                                           worst_case_sums)


@pytest.fixture(scope="module")
def digits():
    return load_digits("train", seed=0), load_digits("test", seed=0)


def test_l1_bound():
    assert l1_bound(16, 8) == 127                        # floor(32767 / 256)
    assert l1_bound(16, 8, input_signed=True) == 255     # floor(32767 / 128)
    assert l1_bound(20, 8) == 2047
    assert l1_bound(16, 8, bias_reserve=0.5) == 63
    assert l1_bound(8, 8) == 0
    with pytest.raises(ValueError):
        l1_bound(16, 8, bias_reserve=1.0)


@pytest.mark.parametrize("mode", ["norm", "nearest", "toward_zero"])
def test_rounding_never_exceeds_the_bound(mode):
    rng = np.random.default_rng(0)
    for bound in (0, 1, 7, 40):
        r = rng.normal(size=(50, 30)) * rng.uniform(0.01, 3, size=(50, 1))
        r *= np.minimum(1.0, bound / np.abs(r).sum(axis=1, keepdims=True))       # every row within the bound
        q = a2q._round_within(r, bound, mode)
        assert np.array_equal(q, np.round(q))
        assert np.all(np.abs(q).sum(axis=1) <= bound)
        assert np.all(np.abs(q - r) < 1) and np.all(q * r >= 0)
        if mode == "toward_zero":
            assert np.all(np.abs(q) <= np.abs(r))
        elif mode == "nearest":
            # where round-to-nearest fits the budget it is what we get
            nearest = np.where(np.abs(r) - np.floor(np.abs(r)) >= 0.5, np.sign(r) * np.ceil(np.abs(r)), np.trunc(r))
            fits = np.abs(nearest).sum(axis=1) <= bound
            np.testing.assert_array_equal(q[fits], nearest[fits])
        else:
            # the row's l1 mass is kept: |q|_1 = min(bound, round(|r|_1)), by the largest fractional parts
            expected = np.minimum(bound, np.floor(np.abs(r).sum(axis=1) + 0.5))
            np.testing.assert_array_equal(np.abs(q).sum(axis=1), expected)
            up = np.abs(q) > np.floor(np.abs(r))
            frac = np.abs(r) - np.floor(np.abs(r))
            for row in range(len(r)):
                if up[row].any() and (~up[row]).any():
                    assert frac[row][up[row]].min() >= frac[row][~up[row]].max()


def test_a_tight_budget_keeps_the_largest_weights():
    r = np.full((1, 144), 29 / 144)
    r[0, :10] *= 2                                          # still every |r| < 1/2
    r *= 29 / np.abs(r).sum()
    assert not a2q._round_within(r, 29, "nearest").any()
    q = a2q._round_within(r, 29, "norm")
    assert np.abs(q).sum() == 29 and np.all(q[0, :10] == 1)


@pytest.mark.parametrize("clamped", [False, True])
def test_gradients_match_finite_differences(monkeypatch, clamped):
    """With the rounding replaced by the identity the straight-through gradients are the exact gradients of
    s * clip(g_hat / s * v / |v|_1) (inside the clip range)."""
    monkeypatch.setattr(a2q, "_round_within", lambda r, bound, mode: r)
    rng = np.random.default_rng(1)
    q = AccumulatorAwareQuantizer(16, 8, axis=-1, gradient="ste")
    v = rng.normal(size=(6, 4))
    q(v)
    q.log_norm += 0.5 if clamped else -0.5                 # away from the kink g = s T
    weights = rng.normal(size=v.shape)
    ls0, ln0 = q.log_scale.copy(), q.log_norm.copy()

    def loss(v, ls, ln):
        q.log_scale[...], q.log_norm[...] = ls, ln
        return float((q(v) * weights).sum())

    loss(v, ls0, ln0)
    dv = q.backward(weights)
    grads = dict(q.grads)
    num = np.zeros_like(v)
    for idx in np.ndindex(v.shape):
        e = np.zeros_like(v)
        e[idx] = 1e-5
        num[idx] = (loss(v + e, ls0, ln0) - loss(v - e, ls0, ln0)) / 2e-5
    np.testing.assert_allclose(dv, num, rtol=1e-5, atol=1e-7)
    for name, base in (("log_scale", 0), ("log_norm", 1)):
        num_p = np.zeros(4)
        for c in range(4):
            e = np.zeros(4, np.float32)
            e[c] = 1e-2
            args = [(ls0 + e, ln0), (ls0 - e, ln0)] if base == 0 else [(ls0, ln0 + e), (ls0, ln0 - e)]
            num_p[c] = (loss(v, *args[0]) - loss(v, *args[1])) / 2e-2
        np.testing.assert_allclose(grads[name], num_p, rtol=2e-3, atol=1e-6)
    assert np.all(grads["log_norm"] == 0) == clamped        # a clamped norm gets no gradient


def test_integer_form_is_the_forward_and_within_the_bound():
    rng = np.random.default_rng(2)
    q = AccumulatorAwareQuantizer(14, 8, num_bits=8)
    w = rng.normal(size=(3, 3, 4, 6)).astype(np.float32)
    y = q(w)
    form = q.integer_form(w)
    assert form.axis == 3 and form.quant_min == -127 and form.quant_max == 127
    np.testing.assert_allclose(y, form.codes * form.scale, rtol=1e-6)
    norms = np.abs(form.codes).reshape(-1, 6).sum(axis=0)
    assert np.all(norms <= q.bound) and np.all(norms == q.l1_norms(w))
    assert q.bound == l1_bound(14, 8, bias_reserve=1 / 16)
    again = AccumulatorAwareQuantizer.from_config(q.get_config())
    np.testing.assert_array_equal(again.integer_form(w).codes, form.codes)


# ----------------------------------------------------------------------------- the guarantee
def _depthwise_model(seed=0):
    s = quantization_scheme("int8")
    return Sequential(Conv2D(1, 6, 3, padding="SAME", activation="relu", seed=seed, **s),
                      DepthwiseConv2D(6, 3, depth_multiplier=2, padding="SAME", activation="relu", seed=seed + 1, **s),
                      MaxPool2D(2), Flatten(),
                      Dense(4 * 4 * 12, 10, weight_quantizer=s["weight_quantizer"], seed=seed + 2))


def _check_worst_case(graph, bits):
    """Every MAC node of ``graph``: adversarial rows for every output, every mode, order and bias placement."""
    checked = 0
    for node in graph.nodes:
        if node.op not in ("conv2d", "depthwise_conv2d", "fully_connected"):
            continue
        xs, ws, bs = (graph.tensors[t] for t in node.inputs)
        w = ws.data.astype(np.int64) - ws.zero_point.reshape((-1,) + (1,) * (ws.data.ndim - 1))[
            :ws.data.shape[0]] if node.op != "depthwise_conv2d" else \
            ws.data.astype(np.int64) - ws.zero_point.reshape(1, 1, 1, -1)
        lo, hi = xs.code_range
        z = int(xs.zero_point[0])
        if node.op == "depthwise_conv2d":
            # output o = c*M + m reads input channel c only: a [KH*KW, O] product per output
            wf = w[0].reshape(-1, w.shape[-1])
        else:
            wf = w.reshape(w.shape[0], -1).T                    # [K, O] in the kernels' (i, j, c) order
        rows = worst_case_sums(wf, bs.data, lo - z, hi - z)
        bias = np.broadcast_to(bs.data.astype(np.int64), (rows.shape[0], wf.shape[1]))
        for overflow in ("saturate", "wrap"):
            for order in ("sequential", "tree"):
                res = matmul(rows, wf, bits, overflow=overflow, order=order, init=bias)
                assert res.overflows == 0, (node.name, overflow, order)
            res = matmul(rows, wf, bits, overflow=overflow)             # bias added after the sum
            total = res.raw + bias
            assert res.overflows == 0 and np.all(np.abs(total) <= (1 << (bits - 1)) - 1), node.name
        # and the bound itself, on the codes the graph stores
        per_output = np.abs(wf).sum(axis=0) * max(abs(lo - z), abs(hi - z)) + np.abs(bs.data)
        assert per_output.max() <= (1 << (bits - 1)) - 1
        checked += 1
    return checked


@pytest.mark.parametrize("bits", [12, 14, 16, 20])
def test_no_overflow_on_worst_case_inputs(digits, bits):
    (x, y), (xt, _) = digits
    model = small_cnn((8, 8, 1), seed=bits, **quantization_scheme("int8"))
    constrain_accumulators(model, bits, calibration_x=x)
    fit(model, (x, y), 2, 32, Adam(3e-3), seed=0, progress=False)
    model[0].b[:] = 100.0                          # a bias far beyond the headroom is clipped into it
    config = preset("int8-acc16-sat").replace(accumulator_bits=bits, bias_bits=bits)
    graph = convert(model, config, x[:500])
    assert all(v["weights"] == "trained" for v in graph.meta.get("grids", {}).values()), graph.meta.get("notes")
    assert _check_worst_case(graph, bits) == 3
    # the test set and random inputs, through the whole graph, on both overflow modes
    noise = np.random.default_rng(bits).uniform(0, 1, size=(200, 8, 8, 1)).astype(np.float32)
    for mode in ("saturate", "wrap"):
        cfg = config.replace(accumulator_overflow=mode)
        for data in (xt, noise):
            _, traces, _ = graph.run(data, cfg, trace=True)
            assert sum(t["overflows"] for t in traces.values()) == 0


def test_depthwise_and_a_leading_quantize(digits):
    (x, y), _ = digits
    model = Sequential(Quantize({"class_name": "fake_quant", "min": 0.0, "max": 1.0, "num_bits": 8}),
                       *_depthwise_model().layers)
    constrain_accumulators(model, 15)
    assert model[2].weight_quantizer.axis == 2 and model[2].weight_quantizer.input_bits == 8
    fit(model, (x, y), 1, 32, Adam(3e-3), seed=0, progress=False)
    config = preset("int8-acc16-sat").replace(accumulator_bits=15, bias_bits=15)
    graph = convert(model, config, x[:500])
    assert _check_worst_case(graph, 15) == 3


def test_signed_inputs_use_the_signed_bound():
    s = quantization_scheme("int8")
    sym = {"class_name": "fake_quant", "min": -2.0, "max": 2.0, "num_bits": 8, "narrow_range": True}
    model = Sequential(Dense(8, 8, activation_quantizer=sym, seed=0, weight_quantizer=s["weight_quantizer"]),
                       Dense(8, 4, seed=1))
    constrain_accumulators(model, 16, input_range=(0.0, 1.0))
    assert model[0].weight_quantizer.input_signed is False
    assert model[1].weight_quantizer.input_signed is True      # codes -127..127 around zero point 0
    assert model[1].weight_quantizer.bound == l1_bound(16, 8, True, 1 / 16)


def test_errors_and_round_trip(tmp_path, digits):
    (x, y), _ = digits
    with pytest.raises(ValueError, match="input_range"):
        constrain_accumulators(small_cnn(seed=0, **quantization_scheme("int8")), 16)
    with pytest.raises(ValueError, match="rounding"):
        AccumulatorAwareQuantizer(rounding="stochastic")
    model = small_cnn((8, 8, 1), seed=0, **quantization_scheme("int8"))
    constrain_accumulators(model, 16, calibration_x=x)
    fit(model, (x, y), 1, 32, Adam(3e-3), seed=0, progress=False)
    path = save_model(model, tmp_path / "a2q")
    loaded = load_model(path)
    for a, b in zip(model.layers, loaded.layers):
        if getattr(a, "weight_quantizer", None) is not None:
            np.testing.assert_array_equal(a.weight_quantizer.integer_form(a.W).codes,
                                          b.weight_quantizer.integer_form(b.W).codes)
    # the bias link is not saved: linking again keeps the trained quantizers and clips the biases again
    assert loaded[0].weight_quantizer.bias_link is None
    quantizers = [layer.weight_quantizer for layer in loaded.layers if hasattr(layer, "weight_quantizer")]
    constrain_accumulators(loaded, 16, calibration_x=x)
    assert [layer.weight_quantizer for layer in loaded.layers if hasattr(layer, "weight_quantizer")] == quantizers
    loaded[0].b[:] = 100.0
    loaded[0].quantized_weight()
    assert np.all(np.abs(loaded[0].b) < 100.0)


def test_constrained_network_accuracy(digits):
    """A2Q at 16 bits on the digits CNN (10 epochs): near the float network, no overflow anywhere
    (measured 0.97 at 10 epochs)."""
    (x, y), (xt, yt) = digits
    model = small_cnn((8, 8, 1), seed=0, **quantization_scheme("int8"))
    constrain_accumulators(model, 16, calibration_x=x)
    fit(model, (x, y), 10, 32, Adam(CosineLR(3e-3, 10, 1.5e-4)), seed=1, progress=False)
    config = preset("int8-acc16-wrap")
    codes, traces, _ = convert(model, config, x[:500]).run(xt, config, trace=True)
    assert np.mean(codes.argmax(axis=1) == yt) >= 0.95
    assert sum(t["overflows"] for t in traces.values()) == 0
