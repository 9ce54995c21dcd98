"""Layers of fxpsim.nn: forward against independent references, backward against finite differences.

References: naive per-output-pixel loops written here (convolutions, pools), TensorFlow Lite's reference
CONV_2D kernel (shared vectors), and central differences in float64 for every backward pass.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxpsim.nn import (AvgPool2D, BatchNorm, Conv2D, Dense, DepthwiseConv2D, Flatten, HardSwish, MaxPool2D,
                       Module, Quantize, ReLU, ReLU6, Sequential, Sigmoid, Tanh, SoftmaxCrossEntropy, fold_batchnorm, layer_from_config,
                       mlp, small_cnn)


# ----------------------------------------------------------------------------- naive references
def tf_same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return out, total // 2


def naive_windows(x, kh, kw, sh, sw, padding, fill=0.0):
    """Yield (i, j, window[N, KH, KW, C] with padding = fill) per output pixel, by explicit loops."""
    n, h, w, c = x.shape
    if padding == "SAME":
        oh, top = tf_same_pads(h, kh, sh)
        ow, left = tf_same_pads(w, kw, sw)
    else:
        oh, ow, top, left = (h - kh) // sh + 1, (w - kw) // sw + 1, 0, 0
    for i in range(oh):
        for j in range(ow):
            win = np.full((n, kh, kw, c), fill, dtype=np.float64)
            valid = np.zeros((kh, kw), dtype=bool)
            for a in range(kh):
                for b in range(kw):
                    r, q = i * sh + a - top, j * sw + b - left
                    if 0 <= r < h and 0 <= q < w:
                        win[:, a, b, :] = x[:, r, q, :]
                        valid[a, b] = True
            yield i, j, oh, ow, win, valid


def naive_conv(x, w, stride, padding):
    kh, kw, cin, cout = w.shape
    out = None
    for i, j, oh, ow, win, _ in naive_windows(x, kh, kw, *stride, padding):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, cout))
        out[:, i, j, :] = np.einsum("nabc,abco->no", win, w)
    return out


def naive_depthwise(x, w, stride, padding):
    kh, kw, c, m = w.shape
    out = None
    for i, j, oh, ow, win, _ in naive_windows(x, kh, kw, *stride, padding):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, c * m))
        out[:, i, j, :] = np.einsum("nabc,abcm->ncm", win, w).reshape(x.shape[0], c * m)
    return out


def naive_pool(x, pool, stride, padding, kind):
    out = None
    for i, j, oh, ow, win, valid in naive_windows(x, *pool, *stride, padding, fill=-np.inf if kind == "max" else 0):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
        out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.sum(axis=(1, 2)) / valid.sum()
    return out


# ----------------------------------------------------------------------------- gradient checking
def numeric_grad(f, arr, eps=1e-6):
    """Central differences of scalar f() with respect to every element of arr (modified in place)."""
    g = np.zeros_like(arr)
    for idx in np.ndindex(arr.shape):
        old = arr[idx]
        arr[idx] = old + eps
        fp = f()
        arr[idx] = old - eps
        fm = f()
        arr[idx] = old
        g[idx] = (fp - fm) / (2 * eps)
    return g


def check_layer_gradients(layer: Module, x: np.ndarray, training=True, rtol=1e-6, atol=1e-8):
    """Compare backward's dx and parameter gradients with central differences of sum(y * r)."""
    layer.astype(np.float64).train(training)
    rng = np.random.default_rng(1)
    r = rng.standard_normal(layer.forward(x.copy()).shape)

    def loss():
        return float(np.sum(layer.forward(x) * r))

    layer.zero_grad()
    loss()
    dx = layer.backward(r.copy())
    grads = {k: v.copy() for k, v in layer.grads.items()}
    np.testing.assert_allclose(dx, numeric_grad(loss, x), rtol=rtol, atol=atol, err_msg="dx")
    for name, p in layer.parameters().items():
        np.testing.assert_allclose(grads[name], numeric_grad(loss, p), rtol=rtol, atol=atol, err_msg=name)


def rand(*shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


# ----------------------------------------------------------------------------- forward references
CONV_CASES = [((3, 3), (1, 1), "SAME"), ((3, 3), (2, 2), "SAME"), ((2, 2), (1, 1), "SAME"),
              ((3, 2), (2, 1), "VALID"), ((1, 1), (1, 1), "VALID"), ((4, 4), (3, 3), "SAME")]


@pytest.mark.parametrize("kernel, stride, padding", CONV_CASES)
def test_conv2d_forward_matches_naive_loops(kernel, stride, padding):
    layer = Conv2D(3, 4, kernel, stride=stride, padding=padding, seed=3).astype(np.float64)
    layer.b[:] = rand(4, seed=4)
    x = rand(2, 7, 6, 3, seed=5)
    expected = naive_conv(x, layer.W, stride, padding) + layer.b
    np.testing.assert_allclose(layer.forward(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel, stride, padding", CONV_CASES[:4])
def test_depthwise_forward_matches_naive_loops(kernel, stride, padding):
    layer = DepthwiseConv2D(3, kernel, depth_multiplier=2, stride=stride, padding=padding, seed=3)
    layer.astype(np.float64)
    x = rand(2, 6, 7, 3, seed=6)
    np.testing.assert_allclose(layer.forward(x), naive_depthwise(x, layer.W, stride, padding), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("cls, kind", [(MaxPool2D, "max"), (AvgPool2D, "avg")])
@pytest.mark.parametrize("pool, stride, padding", [((2, 2), None, "VALID"), ((3, 3), (2, 2), "SAME"),
                                                   ((2, 3), (1, 2), "SAME"), ((3, 3), (1, 1), "VALID")])
def test_pool_forward_matches_naive_loops(cls, kind, pool, stride, padding):
    layer = cls(pool, stride=stride, padding=padding).astype(np.float64)
    x = rand(2, 7, 5, 3, seed=7)
    expected = naive_pool(x, pool, stride or pool, padding, kind)
    np.testing.assert_allclose(layer.forward(x), expected, rtol=1e-12, atol=1e-12)


@given(h=st.integers(1, 7), w=st.integers(1, 7), kh=st.integers(1, 4), kw=st.integers(1, 4),
       sh=st.integers(1, 3), sw=st.integers(1, 3), padding=st.sampled_from(["SAME", "VALID"]),
       cin=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_conv_and_pools_match_naive_loops_on_any_shape(h, w, kh, kw, sh, sw, padding, cin, seed):
    if padding == "VALID" and (h < kh or w < kw):
        with pytest.raises(ValueError, match="VALID padding"):
            Conv2D(cin, 2, (kh, kw), stride=(sh, sw), padding="VALID").forward(np.ones((1, h, w, cin), np.float32))
        return
    x = np.random.default_rng(seed).standard_normal((2, h, w, cin))
    conv = Conv2D(cin, 2, (kh, kw), stride=(sh, sw), padding=padding, use_bias=False, seed=seed).astype(np.float64)
    np.testing.assert_allclose(conv.forward(x), naive_conv(x, conv.W, (sh, sw), padding), rtol=1e-12, atol=1e-12)
    for cls, kind in ((MaxPool2D, "max"), (AvgPool2D, "avg")):
        pool = cls((kh, kw), stride=(sh, sw), padding=padding).astype(np.float64)
        np.testing.assert_allclose(pool.forward(x), naive_pool(x, (kh, kw), (sh, sw), padding, kind), rtol=1e-12,
                                   atol=1e-12)


def test_conv2d_matches_tflite_reference_kernel(vectors_dir):
    """Float Conv2D(SAME)+ReLU on TFLite's dequantized int8 operands lands within 1 LSB of TFLite's output."""
    data = np.load(vectors_dir / "tflite_int8" / "conv.npz")
    x = (data["t0"][:, 0].astype(np.float64) - data["t0_zero_points"][0]) * data["t0_scales"][0]
    w = data["t5"].astype(np.float64) * data["t5_scales"][:, None, None, None]       # [O, KH, KW, I]
    bias = data["t4"] * data["t4_scales"]
    layer = Conv2D(3, 8, 3, padding="SAME", activation="relu").astype(np.float64)
    layer.W[...] = w.transpose(1, 2, 3, 0)                                           # -> HWIO
    layer.b[...] = bias
    out_scale, out_zp = data["t6_scales"][0], data["t6_zero_points"][0]
    expected = (data["t6"][:, 0].astype(np.float64) - out_zp) * out_scale
    ours = np.clip(layer.forward(x), (-128 - out_zp) * out_scale, (127 - out_zp) * out_scale)  # int8 saturation
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1.0001 * out_scale)


# ----------------------------------------------------------------------------- gradient checks
@pytest.mark.parametrize("activation", [None, "relu", "relu6"])
def test_dense_gradients(activation):
    layer = Dense(5, 4, activation=activation, seed=0)
    check_layer_gradients(layer, rand(6, 5, seed=1, scale=3.0))


@pytest.mark.parametrize("kernel, stride, padding", CONV_CASES)
def test_conv2d_gradients(kernel, stride, padding):
    layer = Conv2D(2, 3, kernel, stride=stride, padding=padding, activation="relu", seed=0)
    check_layer_gradients(layer, rand(2, 6, 5, 2, seed=2))


@pytest.mark.parametrize("cin, cout", [(1, 5), (3, 2)])      # dx by patch scatter / by transposed im2col
def test_conv2d_gradients_both_input_gradient_paths(cin, cout):
    check_layer_gradients(Conv2D(cin, cout, 3, seed=0), rand(2, 4, 5, cin, seed=9))


def test_max_pool_ties_send_the_gradient_to_the_first_maximum():
    x = np.array([[0, 0, 1, 3], [0, 0, 3, 2]], np.float32).reshape(1, 2, 4, 1)
    pool = MaxPool2D(2)
    np.testing.assert_array_equal(pool.forward(x).ravel(), [0, 3])
    dx = pool.backward(np.array([5, 7], np.float32).reshape(1, 1, 2, 1)).reshape(2, 4)
    np.testing.assert_array_equal(dx, [[5, 0, 0, 7], [0, 0, 0, 0]])


@pytest.mark.parametrize("kernel, stride, padding", CONV_CASES[:4])
def test_depthwise_gradients(kernel, stride, padding):
    layer = DepthwiseConv2D(2, kernel, depth_multiplier=2, stride=stride, padding=padding, seed=0)
    check_layer_gradients(layer, rand(2, 5, 6, 2, seed=3))


@pytest.mark.parametrize("cls", [MaxPool2D, AvgPool2D])
@pytest.mark.parametrize("pool, stride, padding", [((2, 2), None, "VALID"), ((3, 3), (2, 2), "SAME"),
                                                   ((3, 2), (1, 1), "SAME")])
def test_pool_gradients(cls, pool, stride, padding):
    check_layer_gradients(cls(pool, stride=stride, padding=padding), rand(2, 5, 6, 2, seed=4))


@pytest.mark.parametrize("layer", [ReLU(), ReLU6(), Flatten(), Quantize(None), Sigmoid(), Tanh(), HardSwish()],
                         ids=repr)
def test_elementwise_gradients(layer):
    check_layer_gradients(layer, rand(3, 4, 2, seed=5, scale=4.0))


def test_smooth_activations_forward_match_their_textbook_formulas():
    import math
    x = np.array([-40.0, -3.5, -3.0, -1.25, 0.0, 0.5, 3.0, 7.0, 40.0])
    want = {Sigmoid: [1 / (1 + math.exp(-v)) for v in x], Tanh: [math.tanh(v) for v in x],
            HardSwish: [v * min(max(v + 3, 0), 6) / 6 for v in x]}
    for cls, ref in want.items():
        layer = cls().astype(np.float64)
        np.testing.assert_allclose(layer.forward(x.copy()), ref, rtol=1e-15, atol=1e-300, err_msg=cls.__name__)
    # the quantizer sits on the output: the values it quantizes are the activation's
    from fxpsim.quant.registry import get
    layer, quantizer = Sigmoid("fake_quant"), get("fake_quant")
    x = rand(5, 3, seed=9, scale=3.0).astype(np.float32)
    np.testing.assert_array_equal(layer.forward(x), quantizer(0.5 * (np.tanh(0.5 * x) + 1)))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(7, 3), (2, 3, 4, 3)])
def test_batchnorm_gradients(training, shape):
    bn = BatchNorm(3)
    bn.gamma[:] = [0.5, 2.0, -1.5]
    bn.beta[:] = [0.1, -0.2, 0.3]
    bn.running_mean[:] = [0.2, -0.1, 0.4]
    bn.running_var[:] = [0.5, 2.0, 1.5]
    bn.momentum = 1.0  # keep the running statistics fixed while differencing
    check_layer_gradients(bn, rand(*shape, seed=6) * 2 + 1, training=training, rtol=1e-5)


def test_sequential_gradients():
    model = Sequential(Conv2D(1, 3, 3, seed=0), BatchNorm(3), ReLU(), MaxPool2D(2), Conv2D(3, 2, 2, stride=2,
                       padding="VALID", activation="relu6", seed=1), Flatten(), Dense(2, 3, seed=2))
    model[1].momentum = 1.0
    check_layer_gradients(model, rand(2, 4, 4, 1, seed=8, scale=2.0), rtol=1e-5)


def test_softmax_cross_entropy_value_and_gradient():
    logits = rand(5, 4, seed=9, scale=3.0)
    labels = np.array([0, 3, 1, 1, 2])
    loss_fn = SoftmaxCrossEntropy()
    # reference: direct formula with Python floats
    expected = 0.0
    for row, k in zip(logits, labels):
        expected -= (row[k] - np.log(sum(np.exp(v) for v in row))) / len(labels)
    assert loss_fn(logits, labels) == pytest.approx(expected, rel=1e-12)
    grad = loss_fn.backward()
    np.testing.assert_allclose(grad, numeric_grad(lambda: loss_fn.forward(logits, labels), logits),
                               rtol=1e-6, atol=1e-9)
    big = np.array([[1000.0, 0.0], [0.0, -1000.0]])  # stable for huge logits
    assert np.isfinite(loss_fn(big, np.array([1, 1])))


# ----------------------------------------------------------------------------- module behaviour
def test_parameters_grads_zero_grad_and_accumulation():
    layer = Dense(3, 2, seed=0)
    x = np.ones((4, 3), np.float32)
    assert set(layer.parameters()) == {"W", "b"}
    assert all(not g.any() for g in layer.grads.values())
    layer.forward(x)
    layer.backward(np.ones((4, 2), np.float32))
    first = layer.grads["W"].copy()
    layer.forward(x)
    layer.backward(np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(layer.grads["W"], 2 * first)       # backward accumulates
    layer.zero_grad()
    assert not layer.grads["W"].any()
    model = mlp((4, 5, 3), seed=0)
    assert list(model.parameters()) == ["0.W", "0.b", "1.W", "1.b"]


def test_train_eval_modes_and_repr():
    model = small_cnn(batchnorm=True, seed=1)
    assert model.training and model[1].training
    model.eval()
    assert not model.training and not model[1].training
    text = repr(model)
    assert "Conv2D" in text and "BatchNorm" in text and "params" in text
    assert repr(Dense(3, 2, activation="relu")).startswith("Dense(3 -> 2, activation='relu'")


def test_seeds_make_identical_models_and_different_seeds_differ():
    a, b, c = mlp(seed=3), mlp(seed=3), mlp(seed=4)
    for name, arr in a.parameters().items():
        np.testing.assert_array_equal(arr, b.parameters()[name])
    assert not np.array_equal(a[0].W, c[0].W)


def test_layer_config_round_trip():
    model = small_cnn(batchnorm=True, seed=0)
    rebuilt = layer_from_config({"class": "Sequential", "config": model.get_config()})
    assert rebuilt.get_config() == model.get_config()
    with pytest.raises(ValueError, match="unknown layer class"):
        layer_from_config({"class": "Nope", "config": {}})


# ----------------------------------------------------------------------------- batch-norm folding
@pytest.mark.parametrize("builder", [lambda: mlp((6, 5, 4, 3), batchnorm=True, seed=0),
                                     lambda: small_cnn((6, 6, 2), (3, 4), 3, batchnorm=True, seed=0),
                                     lambda: Sequential(DepthwiseConv2D(2, 3, depth_multiplier=2, seed=0),
                                                        BatchNorm(4), ReLU(), Flatten())])
def test_fold_batchnorm_equals_unfolded_eval(builder):
    model = builder()
    rng = np.random.default_rng(0)
    for bn in (layer for layer in model if isinstance(layer, BatchNorm)):
        n = bn.num_features
        bn.gamma[:] = rng.uniform(0.5, 2, n) * rng.choice([-1, 1], n)
        bn.beta[:] = rng.standard_normal(n)
        bn.running_mean[:] = rng.standard_normal(n)
        bn.running_var[:] = rng.uniform(0.1, 3, n)
    first = model[0]
    shape = (4, first.in_features) if isinstance(first, Dense) else (4, 6, 6, 2)
    x = rng.standard_normal(shape).astype(np.float32)
    model.eval()
    folded = fold_batchnorm(model)
    assert not any(isinstance(layer, BatchNorm) for layer in folded)
    assert len(folded) == len(model) - sum(isinstance(layer, BatchNorm) for layer in model)
    np.testing.assert_allclose(folded(x), model(x), rtol=1e-5, atol=1e-5)
    assert any(isinstance(layer, BatchNorm) for layer in model)      # the original is untouched


def test_fold_batchnorm_with_weight_quantizer_folds_float_weights_and_copies_the_quantizer():
    model = mlp((6, 5, 3), batchnorm=True, weight_quantizer="ternary", seed=0)
    bn = model[1]
    bn.gamma[:] = np.linspace(0.5, 2.0, 5)
    bn.running_mean[:] = np.linspace(-1, 1, 5)
    bn.running_var[:] = np.linspace(0.5, 1.5, 5)
    folded = fold_batchnorm(model)
    scale = bn.gamma / np.sqrt(bn.running_var + np.float32(bn.eps))
    np.testing.assert_allclose(folded[0].W, model[0].W * scale, rtol=1e-6)
    np.testing.assert_allclose(folded[0].b, bn.beta + scale * (model[0].b - bn.running_mean), rtol=1e-6, atol=1e-7)
    assert type(folded[0].weight_quantizer) is type(model[0].weight_quantizer)
    assert folded[0].weight_quantizer is not model[0].weight_quantizer
    assert [type(layer).__name__ for layer in folded] == ["Dense", "ReLU", "Dense"]


def test_fold_batchnorm_keeps_unfoldable_bn_or_raises_when_strict():
    model = Sequential(Dense(3, 3, activation="relu", seed=0), BatchNorm(3))
    assert isinstance(fold_batchnorm(model)[1], BatchNorm)
    with pytest.raises(ValueError, match="BatchNorm at index 1"):
        fold_batchnorm(model, strict=True)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("layer, x, exc, match", [
    (Dense(4, 2), np.ones((3, 5), np.float32), ValueError, r"expected input shape \[N, 4\]"),
    (Dense(4, 2), np.ones((3, 4), np.float64), TypeError, "expected dtype float32"),
    (Dense(4, 2), np.ones((3, 4), np.int32), TypeError, "expected dtype float32"),
    (Dense(4, 2), np.ones((0, 4), np.float32), ValueError, "empty batch"),
    (Dense(4, 2), [[1.0] * 4], TypeError, "numpy.ndarray"),
    (Conv2D(3, 2), np.ones((2, 5, 5, 2), np.float32), ValueError, r"\[N, N, N, 3\]"),
    (Conv2D(3, 2, 5, padding="VALID"), np.ones((1, 4, 4, 3), np.float32), ValueError, "at least the kernel"),
    (MaxPool2D(2), np.ones((2, 4, 4), np.float32), ValueError, "expected input shape"),
    (BatchNorm(3), np.ones((2, 4), np.float32), ValueError, "expected input shape"),
    (Sequential(Dense(2, 2)), np.array([[np.nan, 1]], np.float32), ValueError, "non-finite"),
])
def test_bad_input_raises_clearly(layer, x, exc, match):
    with pytest.raises(exc, match=match):
        layer.forward(x)


@pytest.mark.parametrize("labels, exc, match", [
    (np.array([0, 3]), ValueError, r"labels must lie in \[0, 2\]"),
    (np.array([0, -1]), ValueError, r"labels must lie in \[0, 2\]"),
    (np.array([0.0, 1.0]), TypeError, "labels must be integers"),
    (np.array([0, 1, 2]), ValueError, r"labels must have shape \[2\]"),
])
def test_loss_rejects_bad_labels(labels, exc, match):
    with pytest.raises(exc, match=match):
        SoftmaxCrossEntropy()(np.zeros((2, 3), np.float32), labels)


def test_loss_rejects_nan_logits_and_empty_batch():
    with pytest.raises(ValueError, match="NaN"):
        SoftmaxCrossEntropy()(np.array([[np.nan, 0.0]], np.float32), np.array([0]))
    with pytest.raises(ValueError, match="non-empty"):
        SoftmaxCrossEntropy()(np.zeros((0, 3), np.float32), np.zeros(0, np.int64))


@pytest.mark.parametrize("kwargs, match", [({"padding": "same-ish"}, "padding"), ({"stride": 0}, "stride"),
                                           ({"activation": "tanh"}, "activation")])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Conv2D(1, 1, **kwargs)


def test_forward_does_not_mutate_input():
    x = np.random.default_rng(0).standard_normal((3, 6, 6, 2)).astype(np.float32)
    keep = x.copy()
    for layer in (Conv2D(2, 3, activation="relu"), ReLU(), ReLU6(), BatchNorm(2), MaxPool2D(2), AvgPool2D(2)):
        layer.forward(x)
    np.testing.assert_array_equal(x, keep)


# ----------------------------------------------------------------------------- STE through quantizer slots
def tf_grid(lo, hi, bits):
    """TensorFlow's nudged 8-bit grid for a range containing 0, computed by hand: (nudged_min, nudged_max, s)."""
    scale = (hi - lo) / (2 ** bits - 1)
    zero = round(-lo / scale)          # no .5 ties for the ranges used here
    return -zero * scale, (2 ** bits - 1 - zero) * scale, scale


def test_dense_weight_quantizer_forward_and_masked_ste():
    from fxpsim.quant.registry import FakeQuant
    rng = np.random.default_rng(0)
    layer = Dense(6, 3, weight_quantizer=FakeQuant(-1.0, 1.5, num_bits=8), seed=0)
    layer.W[...] = rng.uniform(-2, 2.5, layer.W.shape).astype(np.float32)   # some weights outside the range
    x = rng.standard_normal((4, 6)).astype(np.float32)
    lo, hi, s = tf_grid(-1.0, 1.5, 8)
    w64 = layer.W.astype(np.float64)
    w_hat = np.round((np.clip(w64, lo, hi) - lo) / s) * s + lo
    np.testing.assert_allclose(layer.forward(x), x.astype(np.float64) @ w_hat, rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal((4, 3)).astype(np.float32)
    layer.backward(dy)
    inside = (w64 >= lo - 1e-6) & (w64 <= hi + 1e-6)
    assert 0 < inside.sum() < inside.size
    np.testing.assert_allclose(layer.grads["W"], (x.T @ dy) * inside, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(layer.grads["b"], dy.sum(axis=0), rtol=1e-6)


def test_learnable_activation_range_gets_tf_min_max_gradients_and_is_trained():
    from fxpsim.quant.registry import FakeQuant
    from fxpsim.nn.train import SGD
    rng = np.random.default_rng(1)
    layer = Dense(5, 8, activation="relu", activation_quantizer=FakeQuant(0.0, 1.0, learnable=True), seed=1)
    x = (3 * rng.standard_normal((6, 5))).astype(np.float32)
    z = np.maximum(x @ layer.W + layer.b, 0)
    layer.forward(x)
    dy = rng.standard_normal((6, 8)).astype(np.float32)
    dx = layer.backward(dy)
    _, hi, _ = tf_grid(0.0, 1.0, 8)
    above = z > hi
    assert above.any() and (~above & (z > 0)).any()
    assert layer.grads["activation_quantizer.max"] == pytest.approx(dy[above].sum(), rel=1e-5)
    assert layer.grads["activation_quantizer.min"] == 0.0           # nothing below the range after ReLU
    passed = dy * (~above) * (z > 0)                                  # range mask, then ReLU mask
    np.testing.assert_allclose(dx, passed @ layer.W.T, rtol=1e-5, atol=1e-6)
    before = float(layer.activation_quantizer.max)
    SGD(0.1).step(*layer.parameters_and_grads())
    assert float(layer.activation_quantizer.max) == pytest.approx(before - 0.1 * dy[above].sum(), rel=1e-5)
    assert layer.parameters()["activation_quantizer.max"] is layer.activation_quantizer.max


def test_binary_activation_uses_clipped_ste_and_ternary_weights_pass_straight_through():
    rng = np.random.default_rng(2)
    q = Quantize("binary")
    x = rng.uniform(-2, 2, (5, 4)).astype(np.float32)
    np.testing.assert_array_equal(q.forward(x), np.where(x >= 0, 1, -1))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(q.backward(dy), dy * (np.abs(x) <= 1))
    layer = Dense(4, 3, weight_quantizer="ternary", seed=2)
    layer.forward(x)
    dy = rng.standard_normal((5, 3)).astype(np.float32)
    layer.backward(dy)
    np.testing.assert_allclose(layer.grads["W"], x.T @ dy, rtol=1e-6)        # STE: unmasked
    w_hat = layer.quantized_weight()
    assert len(np.unique(np.abs(w_hat[w_hat != 0]))) == 1                     # {-a, 0, +a}


def test_scaled_and_custom_gradients_are_honoured():
    from fxpsim.quant.registry import FakeQuant
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    dy = rng.standard_normal((4, 2)).astype(np.float32)
    scaled = Dense(3, 2, weight_quantizer=FakeQuant(-0.1, 0.1, gradient=0.5), seed=3)
    scaled.forward(x)
    scaled.backward(dy)
    np.testing.assert_allclose(scaled.grads["W"], 0.5 * (x.T @ dy), rtol=1e-6)
    custom = Conv2D(1, 2, 2, padding="VALID", weight_quantizer=FakeQuant(gradient=lambda w, g: -g), seed=3)
    xc = rng.standard_normal((2, 3, 3, 1)).astype(np.float32)
    custom.forward(xc)
    dyc = rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    custom.backward(dyc)
    plain = Conv2D(1, 2, 2, padding="VALID", seed=3)
    plain.W[...] = custom.quantized_weight()
    plain.forward(xc)
    plain.backward(dyc)
    np.testing.assert_allclose(custom.grads["W"], -plain.grads["W"], rtol=1e-6)


def test_quantizer_specs_by_name_dict_or_instance_and_mode_propagation():
    from fxpsim.quant.registry import BinaryQuantizer, FakeQuant
    layer = Conv2D(1, 2, weight_quantizer="binary", activation_quantizer={"class_name": "fake_quant",
                                                                          "num_bits": 4})
    assert isinstance(layer.weight_quantizer, BinaryQuantizer)
    assert isinstance(layer.activation_quantizer, FakeQuant) and layer.activation_quantizer.num_bits == 4
    shared = FakeQuant(learnable=True)
    model = mlp((3, 4, 2), weight_quantizer=shared, seed=0)
    assert model[0].weight_quantizer is not model[1].weight_quantizer    # builders copy instances
    assert {"0.weight_quantizer.min", "1.weight_quantizer.max"} <= set(model.parameters())
    model.eval()
    assert not model[0].weight_quantizer.training
    assert "weight_quantizer=FakeQuant(" in repr(model[0])


def test_read_only_and_non_contiguous_inputs_give_the_same_outputs():
    model = small_cnn((6, 6, 2), (3, 4), 3, batchnorm=True, seed=0)
    big = np.random.default_rng(0).standard_normal((4, 12, 6, 2)).astype(np.float32)
    strided = big[:, ::2]                                  # non-contiguous view
    strided.flags.writeable = False
    contiguous = np.ascontiguousarray(strided)
    for mode in ("train", "eval"):
        getattr(model, mode)()
        np.testing.assert_array_equal(model(strided), model(contiguous))
