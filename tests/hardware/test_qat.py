"""Overflow-aware QAT (fxpsim.hardware.qat): the forward is the converted graph's accumulator bit for bit,
the straight-through backward matches a float reference with the overflow mask found by a per-add Python loop,
and training through a narrow accumulator beats plain QAT on the hardware (digits, seeded, small scale)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from fxpsim.hardware import convert, preset
from fxpsim.nn import (BatchNorm, Conv2D, Dense, DepthwiseConv2D, Flatten, MaxPool2D, Sequential, quantization_scheme,
                       small_cnn)
from fxpsim.hardware.qat import DatapathAware, datapath_aware, overflow_report, unwrap
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, CosineLR, fit

WQ = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
AQ = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}


@pytest.fixture(scope="module")
def digits():
    return load_digits("train", seed=0), load_digits("test", seed=0)


@pytest.fixture(scope="module")
def demo_cnn(digits):
    """The demo's CNN and quantizers (observers), briefly trained."""
    (x, y), _ = digits
    model = small_cnn((8, 8, 1), weight_quantizer=WQ, activation_quantizer=AQ, seed=0)
    fit(model, (x, y), 2, 32, Adam(3e-3), seed=0, progress=False)
    return model


def _graph_inputs(graph, values, x):
    """Float inputs of the three MAC nodes as the graph feeds them (dequantized codes)."""
    out = []
    for name in ("input_codes", "1:max_pool2d", "4:flatten"):
        spec = graph.tensors[name]
        out.append(x if name == "input_codes" else spec.dequantize(values[name]).astype(np.float32))
    return out


CONFIGS = [
    ("int8-acc16-sat", {}),
    ("int8-acc16-wrap", {}),
    ("int8-acc16-sat", {"accumulator_bits": 14, "accumulator_order": "tree"}),
    ("int8-acc16-wrap", {"accumulator_bits": 13, "bias_add": "after"}),
    ("int8-acc16-sat", {"overflow_at": "end"}),
    ("tflite-int8", {}),
]


@pytest.mark.parametrize("name,changes", CONFIGS)
def test_accumulators_are_the_converted_graphs(digits, demo_cnn, name, changes):
    (xtr, _), (x, _) = digits
    x = x[:64]
    config = preset(name).replace(**changes)
    graph = convert(demo_cnn, config, xtr[:300])
    _, traces, values = graph.run(x, config, trace=True, keep=True)
    wrapped = datapath_aware(demo_cnn, config, calibration_x=xtr[:300]).eval()
    for layer, xin in zip([wrapped[0], wrapped[2], wrapped[5]], _graph_inputs(graph, values, x)):
        s_in, lo, hi = layer.input_params()
        xi = layer.input_codes(xin, s_in, lo, hi)
        w_int, _, b_int = layer.integer_weights(layer.layer.quantized_weight(), s_in)
        acc, counts = layer._accumulate_codes(xi, w_int, b_int)
        trace = traces[layer.node_name]
        np.testing.assert_array_equal(acc.reshape(trace["acc"].shape), trace["acc"])
        assert int(counts.sum()) == trace["overflows"]
        # and the forward pass itself reports the same overflows
        layer.forward(xin)
        assert layer.overflows == trace["overflows"]


def test_depthwise_accumulators_and_gradient(digits):
    (x, y), _ = digits
    s = quantization_scheme("int8")
    model = Sequential(Conv2D(1, 6, 3, padding="SAME", activation="relu", seed=0, **s),
                       DepthwiseConv2D(6, 3, depth_multiplier=2, padding="SAME", activation="relu", seed=1, **s),
                       MaxPool2D(2), Flatten(), Dense(4 * 4 * 12, 10, weight_quantizer=s["weight_quantizer"], seed=2))
    fit(model, (x, y), 1, 32, Adam(3e-3), seed=0, progress=False)
    config = preset("int8-acc16-sat").replace(accumulator_bits=13)
    graph = convert(model, config, x[:300])
    _, traces, values = graph.run(x[:40], config, trace=True, keep=True)
    wrapped = datapath_aware(model, config, calibration_x=x[:300])
    dw = wrapped[1]
    assert dw.node_name == "1:depthwise_conv2d"
    xin = graph.tensors["0:conv2d"].dequantize(values["0:conv2d"]).astype(np.float32)
    s_in, lo, hi = dw.input_params()
    w_int, s_w, b_int = dw.integer_weights(dw.layer.quantized_weight(), s_in)
    acc, counts = dw._accumulate_codes(dw.input_codes(xin, s_in, lo, hi), w_int, b_int)
    np.testing.assert_array_equal(acc.reshape(traces[dw.node_name]["acc"].shape), traces[dw.node_name]["acc"])
    assert int(counts.sum()) == traces[dw.node_name]["overflows"]
    # straight-through backward ("pass"): a float depthwise layer multiplying the dequantized hardware weights
    dw.overflow_grad, dw.scale_grad = "pass", False
    dw.train()
    dw.forward(xin)
    rng = np.random.default_rng(0)
    dy = rng.normal(size=(40, 8, 8, 12)).astype(np.float32) * (dw.forward(xin) > 0)
    dw.layer.zero_grad()
    dx = dw.backward(dy)
    ref = DepthwiseConv2D(6, 3, depth_multiplier=2, padding="SAME", activation="relu", seed=1)
    ref.W = (w_int * s_w.reshape(6, 2)).astype(np.float32)
    ref.b = dw.layer.b.copy()
    ref.forward(xin)
    ref._act_mask = None                       # dy already carries the hardware's ReLU mask
    np.testing.assert_allclose(dx, ref.backward(dy), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw.layer.grads["b"], ref.grads["b"], rtol=1e-4, atol=1e-5)


def test_predictions_follow_the_hardware(digits, demo_cnn):
    (xtr, _), (x, y) = digits
    config = preset("int8-acc16-sat")
    hw = convert(demo_cnn, config, xtr[:300]).run(x, config).argmax(axis=1)
    wrapped = datapath_aware(demo_cnn, config, calibration_x=xtr[:300]).eval()
    sw = wrapped.forward(x).argmax(axis=1)
    # the activation quantizer stands in for the requantizer: one-LSB differences (amplified by a network
    # that saturates everywhere, ~50% accurate here) flip a few classes
    assert np.mean(hw == sw) >= 0.9
    assert abs(np.mean(hw == y) - np.mean(sw == y)) <= 0.04
    assert any(r["overflows"] for r in overflow_report(wrapped))


# ----------------------------------------------------------------------------- backward
def _python_overflow_mask(xi, w, b, bits, mode):
    """Per-output flag: did any add of the sequential accumulation overflow (plain Python ints)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    flags = np.zeros((xi.shape[0], w.shape[1]), bool)
    for n in range(xi.shape[0]):
        for o in range(w.shape[1]):
            s = int(b[o])
            for k in range(w.shape[0]):
                s += int(xi[n, k]) * int(w[k, o])
                if s < lo or s > hi:
                    flags[n, o] = True
                    s = min(max(s, lo), hi) if mode == "saturate" else (s - lo) % (1 << bits) + lo
    return flags


def _dense_layer(seed=0):
    layer = Dense(12, 5, weight_quantizer={"class_name": "fake_quant", "min": -1.0, "max": 1.0, "num_bits": 8,
                                            "narrow_range": True}, seed=seed)
    layer.b[:] = np.linspace(-0.3, 0.4, 5)
    return layer


@pytest.mark.parametrize("mode", ["saturate", "wrap"])
@pytest.mark.parametrize("grad", ["mask", "final", "pass"])
def test_dense_backward_matches_the_reference(mode, grad):
    rng = np.random.default_rng(3)
    layer = _dense_layer()
    config = preset("int8-acc16-sat").replace(accumulator_bits=14, accumulator_overflow=mode)
    wrapped = DatapathAware(layer, config, input_range=(0.0, 4.0), overflow_grad=grad, scale_grad=False)
    x = rng.uniform(0, 4, size=(40, 12)).astype(np.float32)
    dy = rng.normal(size=(40, 5)).astype(np.float32)
    wrapped.train()
    wrapped.forward(x)
    layer.zero_grad()
    dx = wrapped.backward(dy)
    s_in, lo, hi = wrapped.input_params()
    xi = wrapped.input_codes(x, s_in, lo, hi)
    w_int, s_w, b_int = wrapped.integer_weights(layer.quantized_weight(), s_in)
    over = _python_overflow_mask(xi, w_int, b_int, 14, mode)
    assert over.any() and not over.all()
    exact = xi.astype(np.int64) @ w_int.astype(np.int64) + b_int
    outside = (exact < -8192) | (exact > 8191)
    keep = {"mask": ~over, "final": ~outside, "pass": np.ones_like(over)}[grad]
    dz = dy * keep
    w_hw = (w_int * s_w).astype(np.float32)
    np.testing.assert_allclose(dx, dz @ w_hw.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.grads["b"], dz.sum(axis=0), rtol=1e-5, atol=1e-6)
    # dW reaches W through the fake-quant STE (identity inside the range [-1, 1])
    np.testing.assert_allclose(layer.grads["W"], x.T @ dz, rtol=1e-4, atol=1e-5)


def test_conv_backward_matches_the_reference():
    rng = np.random.default_rng(5)
    conv = Conv2D(3, 4, 3, padding="SAME", weight_quantizer={"class_name": "fake_quant", "min": -1.0, "max": 1.0,
                                                             "num_bits": 8, "narrow_range": True}, seed=1)
    config = preset("int8-acc16-sat").replace(accumulator_bits=15)
    wrapped = DatapathAware(conv, config, input_range=(0.0, 2.0), scale_grad=False)
    x = rng.uniform(0, 2, size=(3, 5, 5, 3)).astype(np.float32)
    dy = rng.normal(size=(3, 5, 5, 4)).astype(np.float32)
    wrapped.forward(x)
    conv.zero_grad()
    dx = wrapped.backward(dy)
    # reference: im2col patches through the Python per-add loop, then a float conv with the masked gradient
    s_in, lo, hi = wrapped.input_params()
    xi = wrapped.input_codes(x, s_in, lo, hi)
    w_int, s_w, b_int = wrapped.integer_weights(conv.quantized_weight(), s_in)
    xp = np.pad(xi, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = np.stack([xp[:, i:i + 3, j:j + 3, :].reshape(3, -1) for i in range(5) for j in range(5)], axis=1)
    over = _python_overflow_mask(cols.reshape(-1, 27), w_int.reshape(27, 4), b_int, 15, "saturate")
    assert over.any() and not over.all()
    ref = Conv2D(3, 4, 3, padding="SAME", seed=1)
    ref.W = (w_int * s_w).astype(np.float32)
    ref.b = conv.b.copy()
    ref.forward(x)
    dx_ref = ref.backward(dy * ~over.reshape(3, 5, 5, 4))
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv.grads["b"], ref.grads["b"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv.grads["W"], ref.grads["W"], rtol=1e-4, atol=1e-5)


def test_saturated_sums_train_the_weight_scale():
    """A sum at the rail is z = s_x s_w (+-L): dz/ds_w = z / s_w reaches a learnable weight range (PACT-style
    clip gradient), s_w = (max - min) / 254."""
    rng = np.random.default_rng(1)
    layer = _dense_layer()
    layer.weight_quantizer.learnable = True
    config = preset("int8-acc16-sat").replace(accumulator_bits=14)
    wrapped = DatapathAware(layer, config, input_range=(0.0, 4.0))
    x = rng.uniform(0, 4, size=(16, 12)).astype(np.float32)
    z = wrapped.forward(x)
    s_in, lo, hi = wrapped.input_params()
    w_int, s_w, b_int = wrapped.integer_weights(layer.quantized_weight(), s_in)
    acc, _ = wrapped._accumulate_codes(wrapped.input_codes(x, s_in, lo, hi), w_int, b_int)
    rail = (acc == 8191) | (acc == -8192)
    assert rail.any() and not rail.all()
    dy = rng.normal(size=z.shape).astype(np.float32)
    layer.zero_grad()
    wrapped.backward(dy)
    expected = float((dy * z * rail).sum() / s_w[0]) / 254
    grads = layer.grads       # the fake quant's own range gradient is 0: no weight lies outside [-1, 1]
    np.testing.assert_allclose(grads["weight_quantizer.max"], expected, rtol=1e-4)
    np.testing.assert_allclose(grads["weight_quantizer.min"], -expected, rtol=1e-4)


def test_penalty_pushes_sums_into_range():
    """With only the penalty's gradient, the exact sums move inside the margin; without it nothing moves."""
    rng = np.random.default_rng(0)
    layer = _dense_layer()
    config = preset("int8-acc16-wrap").replace(accumulator_bits=16)
    x = rng.uniform(0, 4, size=(64, 12)).astype(np.float32)
    outside = []
    for penalty in (0.0, 1.0):
        wrapped = DatapathAware(copy.deepcopy(layer), config, input_range=(0.0, 4.0), overflow_penalty=penalty,
                                penalty_margin=0.75)
        opt = Adam(1e-2)
        for _ in range(60):
            wrapped.zero_grad()
            wrapped.forward(x)
            wrapped.backward(np.zeros((64, 5), np.float32))      # only the penalty's gradient
            opt.step(*wrapped.parameters_and_grads())
        s_in, lo, hi = wrapped.input_params()
        w_int, _, b_int = wrapped.integer_weights(wrapped.layer.quantized_weight(), s_in)
        exact, _ = wrapped._accumulate_codes(wrapped.input_codes(x, s_in, lo, hi), w_int, b_int, acc=False)
        outside.append(int(np.count_nonzero(np.abs(exact) > 32767)))
    assert outside[0] > 20 and outside[1] == 0, outside


# ----------------------------------------------------------------------------- plumbing
def test_wrapped_model_shares_layers_and_names(demo_cnn):
    model = copy.deepcopy(demo_cnn)
    wrapped = datapath_aware(model, "int8-acc16-sat", input_range=(0.0, 1.0))
    assert list(wrapped.parameters()) == list(model.parameters())
    assert all(a is b for a, b in zip(wrapped.parameters().values(), model.parameters().values()))
    assert [type(layer).__name__ for layer in wrapped] == ["DatapathAware", "MaxPool2D", "DatapathAware", "MaxPool2D",
                                                            "Flatten", "DatapathAware"]
    assert [m.node_name for m in wrapped if isinstance(m, DatapathAware)] == ["0:conv2d", "2:conv2d", "5:dense"]
    assert wrapped[2].input_quantizer is model[0].activation_quantizer
    assert all(a is b for a, b in zip(unwrap(wrapped).layers, model.layers))
    x, y = load_digits("train", seed=0)
    before = model[0].W.copy()
    fit(wrapped, (x[:64], y[:64]), 1, 32, Adam(1e-3), progress=False)
    assert not np.array_equal(before, model[0].W)             # the model itself was trained


def test_per_node_overrides_reach_the_wrapper(demo_cnn):
    config = preset("int8-acc16-sat")
    if not hasattr(config, "with_layer"):
        pytest.skip("HardwareConfig has no per-layer overrides in this tree")
    config = config.with_layer("2:conv2d", accumulator_bits=20)
    wrapped = datapath_aware(demo_cnn, config, input_range=(0.0, 1.0))
    assert [m.config.accumulator_bits for m in wrapped if isinstance(m, DatapathAware)] == [16, 20, 16]


def test_errors():
    config = preset("int8-acc16-sat")
    with pytest.raises(TypeError, match="wraps Dense"):
        DatapathAware(Flatten(), config, input_range=(0, 1))
    with pytest.raises(ValueError, match="overflow_grad"):
        DatapathAware(_dense_layer(), config, input_range=(0, 1), overflow_grad="clip")
    with pytest.raises(ValueError, match="input_range"):
        DatapathAware(_dense_layer(), config)
    with pytest.raises(ValueError, match="BatchNorm"):
        datapath_aware(Sequential(Dense(4, 4), BatchNorm(4)), config, input_range=(0, 1))
    with pytest.raises(ValueError, match="input_range"):
        datapath_aware(Sequential(Dense(4, 4)), config)
    if "tile_k" in type(config).__dataclass_fields__:
        with pytest.raises(NotImplementedError, match="tile_k"):
            DatapathAware(_dense_layer(), config.replace(tile_k=4), input_range=(0, 1))
    with pytest.raises(ValueError, match="no activation quantizer"):
        datapath_aware(Sequential(Dense(4, 4), MaxPool2D(1), Dense(4, 2)), config, input_range=(0, 1))


# ----------------------------------------------------------------------------- training
def _hw_accuracy(model, config, xc, x, y):
    return float(np.mean(convert(model, config, xc).run(x, config).argmax(axis=1) == y))


@pytest.mark.parametrize("mode,bits", [("saturate", 14), ("wrap", 16)])
def test_overflow_aware_training_beats_plain_qat(digits, mode, bits):
    """Same network, initial weights, batches and epochs: trained through the accumulator it beats plain QAT
    on that accumulator by a wide margin (measured: 14-bit saturate 0.52 -> 0.89, 16-bit wrap 0.18 -> 0.96).."""
    (x, y), (xt, yt) = digits
    config = preset("int8-acc16-sat").replace(accumulator_bits=bits, accumulator_overflow=mode)
    epochs = 8
    plain = small_cnn((8, 8, 1), seed=0, **quantization_scheme("int8"))
    aware = copy.deepcopy(plain)
    fit(plain, (x, y), epochs, 32, Adam(CosineLR(3e-3, epochs, 1.5e-4)), seed=0, progress=False)
    wrapped = datapath_aware(aware, config, calibration_x=x, overflow_penalty=10.0, penalty_margin=0.75)
    fit(wrapped, (x, y), epochs, 32, Adam(CosineLR(3e-3, epochs, 1.5e-4)), seed=0, progress=False)
    acc_plain = _hw_accuracy(plain, config, x[:500], xt, yt)
    acc_aware = _hw_accuracy(aware, config, x[:500], xt, yt)
    assert acc_aware >= 0.85 and acc_aware >= acc_plain + 0.25, (acc_plain, acc_aware)
