"""Conversion of trained models: batch norm folded during training (FoldedConvBN / FoldedDenseBN), and the
agreement of a float QAT model with its integer simulation on a 32-bit accumulator.

References are independent: finite differences for the folded layers' backward, the layers' own float
forward (eval mode) for the integer graph, and for bias saturation a count made here from the float biases.
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim import nn
from fxpsim.hardware import HardwareConfig, convert, preset
from fxpsim.nn.fold import FoldedConvBN, FoldedDenseBN


# ---------------------------------------------------------------------------------- folded batch norm layers
def _numeric_grad(f, arr, eps=1e-6):
    g = np.zeros_like(arr)
    it = np.nditer(arr, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = arr[i]
        arr[i] = old + eps
        hi = f()
        arr[i] = old - eps
        lo = f()
        arr[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


def _layer(kind, training, activation):
    rng = np.random.default_rng(11)
    if kind == "conv":
        layer = FoldedConvBN(2, 3, 3, padding="SAME", activation=activation, use_bias=True, momentum=1.0,
                             seed=1)
        x = rng.normal(0, 1, (2, 4, 4, 2))
    else:
        layer = FoldedDenseBN(5, 4, activation=activation, use_bias=True, momentum=1.0, seed=1)
        x = rng.normal(0, 1, (7, 5))
    layer.astype(np.float64)
    layer.gamma[...] = rng.uniform(0.5, 2.0, layer.gamma.shape) * rng.choice([-1, 1], layer.gamma.shape)
    layer.beta[...] = rng.normal(0, 0.5, layer.beta.shape)
    layer.b[...] = rng.normal(0, 0.5, layer.b.shape)
    layer.running_mean[...] = rng.normal(0, 0.3, layer.running_mean.shape)
    layer.running_var[...] = rng.uniform(0.5, 2.0, layer.running_var.shape)
    layer.train(training)
    return layer, x


@pytest.mark.parametrize("kind", ["conv", "dense"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_folded_batchnorm_backward_matches_finite_differences(kind, training):
    layer, x = _layer(kind, training, "relu" if kind == "dense" else None)
    r = np.random.default_rng(3).normal(0, 1, layer.forward(x).shape)

    def loss():
        return float(np.sum(layer.forward(x) * r))
    loss()
    layer.zero_grad()
    layer.forward(x)
    dx = layer.backward(r)
    grads = dict(layer.grads)
    np.testing.assert_allclose(dx, _numeric_grad(loss, x), rtol=1e-5, atol=1e-7)
    for name in ("W", "b", "gamma", "beta"):
        np.testing.assert_allclose(grads[name], _numeric_grad(loss, getattr(layer, name)), rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def test_folded_layer_in_training_is_conv_then_batchnorm():
    """Without a weight quantizer, training mode equals Conv2D -> BatchNorm (batch statistics), and eval mode
    equals the same pair in eval mode: the folding changes nothing but where the quantizer sits."""
    layer, x = _layer("conv", True, None)
    conv = nn.Conv2D(2, 3, 3, padding="SAME", use_bias=True, seed=1).astype(np.float64)
    conv.W[...], conv.b[...] = layer.W, layer.b
    bn = nn.BatchNorm(3, momentum=1.0, eps=layer.eps).astype(np.float64)
    bn.gamma[...], bn.beta[...] = layer.gamma, layer.beta
    bn.running_mean[...], bn.running_var[...] = layer.running_mean, layer.running_var
    np.testing.assert_allclose(layer.forward(x), bn.forward(conv.forward(x)), rtol=1e-12, atol=1e-12)
    layer.eval(), bn.eval()
    np.testing.assert_allclose(layer.forward(x), bn.forward(conv.forward(x)), rtol=1e-12, atol=1e-12)


def _folded_qat_cnn(seed=0):
    wq = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
    aq = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}
    return nn.Sequential(FoldedConvBN(1, 8, 3, activation="relu", weight_quantizer=wq, activation_quantizer=aq,
                                      seed=seed),
                         nn.MaxPool2D(2), nn.Flatten(),
                         FoldedDenseBN(4 * 4 * 8, 16, activation="relu", weight_quantizer=wq,
                                       activation_quantizer=aq, seed=seed + 1),
                         nn.Dense(16, 10, weight_quantizer=wq,
                                  activation_quantizer={"class_name": "fake_quant", "num_bits": 8,
                                                        "observer": "minmax"}, seed=seed + 2))


@pytest.fixture(scope="module")
def folded_model():
    from fxpsim.nn import train
    from fxpsim.nn.datasets import load_digits
    x, y = load_digits("train", seed=0)
    model = _folded_qat_cnn()
    train.fit(model, (x, y), epochs=3, batch_size=32, optimizer=train.Adam(3e-3), seed=0, progress=False)
    model.eval()
    return model, load_digits("test", seed=0), x[:300]


def test_folded_qat_model_converts_exactly(folded_model):
    """The folded layers' weight quantizer saw the folded weights: the hardware stores those very codes (no
    re-quantization), and each layer's integer output is within one output LSB of the float QAT layer fed the
    same input."""
    model, (xt, yt), xc = folded_model
    net = convert(model, "tflite-int8", xc)
    assert net.meta["notes"] == []
    for idx, name in ((0, "0:conv2d"), (3, "3:dense")):
        layer = model.layers[idx]
        w = net.tensors[f"{name}/weights"]
        hw = w.dequantize(w.data)
        ref = layer.quantized_weight()
        ref = np.transpose(ref, (3, 0, 1, 2)) if idx == 0 else ref.T
        np.testing.assert_allclose(hw, ref, rtol=1e-6, atol=1e-7)
    out = net.run(xt)
    spec = net.tensors[net.outputs[0]]
    logits = model.forward(xt).astype(np.float64)
    diff = np.abs(spec.dequantize(out) - logits) / float(spec.scale[0])
    assert np.mean(diff <= 1 + 1e-4) >= 0.999, np.max(diff)
    assert np.mean(out.argmax(1) == logits.argmax(1)) >= 0.997
    # fold_batchnorm after training would have quantized differently: the folded grid is the one trained
    assert np.mean(np.argmax(model.forward(xt), 1) == yt) > 0.85


def test_folded_model_saves_and_loads(folded_model, tmp_path):
    from fxpsim.nn import train
    model, (xt, _), _ = folded_model
    loaded = train.load_model(train.save_model(model, tmp_path / "folded"))
    loaded.eval()
    np.testing.assert_array_equal(loaded.forward(xt[:20]), model.forward(xt[:20]))


# ------------------------------------------------------------------- float QAT model vs integer simulation
def _agreement(model, xs, config="tflite-int8", reference_input="float"):
    """(top-1 agreement, fraction of logits within 1 output LSB, fraction with the same code, max |diff| in
    LSBs) between the float QAT model (eval) and its integer graph on ``config`` (32-bit accumulator). With
    ``reference_input="codes"`` the float model is fed the hardware's dequantized input codes (isolating
    the arithmetic from the input quantization the model does not have)."""
    model.eval()
    config = preset(config) if isinstance(config, str) else config
    net = convert(model, config, xs)
    out, _, kept = net.run(xs, config, keep=True)
    if reference_input == "codes":
        xs = net.tensors["input_codes"].dequantize(kept["input_codes"]).astype(np.float32)
    spec = net.tensors[net.outputs[0]]
    ref = model.forward(xs).astype(np.float64)
    diff = np.abs(spec.dequantize(out) - ref) / float(spec.scale[0])
    return (float(np.mean(out.argmax(1) == ref.argmax(1))), float(np.mean(diff <= 1 + 1e-4)),
            float(np.mean(diff < 0.5)), float(diff.max()))


@pytest.fixture(scope="module")
def digits_all():
    from fxpsim.nn.datasets import load_digits
    (x, y), (xt, _) = load_digits("train", seed=0), load_digits("test", seed=0)
    return x, y, np.concatenate([x, xt])


def test_demo_cnn_agrees_with_its_integer_simulation(digits_all):
    """The demo CNN (15 epochs, seed 0) on all 1797 digits, calibrated on them (its logits have no output
    quantizer, so the output range is calibrated): measured 100% top-1 agreement, 99.97% of logits within
    one output LSB (the rest within 1.12 LSB: the float model sees unquantized inputs). Before the trained
    grids were kept: 96.3% within one LSB, up to 1.8 LSB."""
    from fxpsim.cli import demo_model
    _, _, xa = digits_all
    model, _ = demo_model(epochs=15, seed=0)
    agree, within, _, worst = _agreement(model, xa)
    assert agree >= 0.997 and within >= 0.999, (agree, within, worst)
    assert _agreement(model, xa, reference_input="codes")[1] == 1.0


def test_qat_mlp_agrees_with_its_integer_simulation(digits_all):
    """A QAT MLP whose logits have their own output quantizer (its LSB is the unit): 100% top-1 agreement,
    every logit within one LSB; fed the hardware's input codes, 99.8% of the logits are the very same code
    (82% before the trained grids were kept)."""
    from fxpsim.nn import train
    x, y, xa = digits_all
    wq = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
    aq = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}
    mlp = nn.mlp((64, 128, 64, 10), weight_quantizer=wq, activation_quantizer=aq, output_quantizer=aq, seed=0)
    train.fit(mlp, (x.reshape(len(x), -1), y), epochs=15, batch_size=32, optimizer=train.Adam(3e-3), seed=0,
              progress=False)
    xa = xa.reshape(len(xa), -1)
    agree, within, _, worst = _agreement(mlp, xa)
    assert agree >= 0.997 and within >= 0.999, (agree, within, worst)
    agree, within, same, worst = _agreement(mlp, xa, reference_input="codes")
    assert agree >= 0.997 and within == 1.0 and same >= 0.995, (agree, within, same, worst)
