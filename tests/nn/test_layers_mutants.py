"""``BatchNorm`` (training statistics, running averages, eval mode, gradients, validation) and
``fold_batchnorm`` against a scalar model written here in Python floats (``math.sqrt``, loops per channel).

Written to kill the mutants of ``fxpsim/nn/layers.py`` (BatchNorm, fold_batchnorm) that the layer tests left
alive, see tools/mutation/README.md: the existing gradient checks pin ``momentum = 1`` (running statistics
frozen), so nothing compared the running mean / variance after a training step with the formula.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from fxpsim.nn import BatchNorm, Conv2D, Dense, DepthwiseConv2D, Sequential, fold_batchnorm

RTOL = 2e-6        # float32 layer against a float64 scalar model


def _columns(x):
    """The per-channel value lists of a channels-last array (every axis but the last flattened)."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    return [[float(v) for v in flat[:, c]] for c in range(x.shape[-1])]


def _stats(col):
    mean = sum(col) / len(col)
    var = sum((v - mean) ** 2 for v in col) / len(col)          # biased (divides by M)
    return mean, var


def _bn(channels=3, **kw):
    bn = BatchNorm(channels, **kw)
    bn.gamma[:] = [0.5, 2.0, -1.5][:channels]
    bn.beta[:] = [0.25, -0.75, 1.0][:channels]
    return bn


def _x(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 2 + 1).astype(np.float32)


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4, 3), (1, 2, 3)])
def test_training_forward_and_running_statistics(shape):
    bn = _bn(momentum=0.75, eps=0.01)
    bn.running_mean[:] = [0.5, -1.0, 2.0]
    bn.running_var[:] = [1.5, 0.25, 3.0]
    r_mean, r_var = [float(v) for v in bn.running_mean], [float(v) for v in bn.running_var]
    x = _x(shape, 1)
    y = bn.forward(x)
    assert y.shape == x.shape and y.dtype == np.float32
    yc = _columns(y)
    for c, col in enumerate(_columns(x)):
        mean, var = _stats(col)
        inv = 1 / math.sqrt(var + 0.01)
        want = [float(bn.gamma[c]) * (v - mean) * inv + float(bn.beta[c]) for v in col]
        np.testing.assert_allclose(yc[c], want, rtol=RTOL, atol=2e-6)
        # r <- m r + (1 - m) s with m = 0.75
        assert bn.running_mean[c] == pytest.approx(0.75 * r_mean[c] + 0.25 * mean, rel=RTOL, abs=1e-6)
        assert bn.running_var[c] == pytest.approx(0.75 * r_var[c] + 0.25 * var, rel=RTOL, abs=1e-6)
    assert bn.running_mean.dtype == np.float32 and bn.running_var.dtype == np.float32


def test_running_statistics_over_several_steps_and_momentum_limits():
    xs = [_x((6, 2), s) for s in (2, 3, 4)]
    for m in (0.0, 0.9, 1.0):
        bn = BatchNorm(2, momentum=m)
        r_mean, r_var = [0.0, 0.0], [1.0, 1.0]          # the initial running statistics
        for x in xs:
            bn.forward(x)
            for c, col in enumerate(_columns(x)):
                mean, var = _stats(col)
                r_mean[c] = m * r_mean[c] + (1 - m) * mean
                r_var[c] = m * r_var[c] + (1 - m) * var
        np.testing.assert_allclose(bn.running_mean, r_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.running_var, r_var, rtol=1e-5, atol=1e-6)


def test_default_momentum_and_eps():
    bn = BatchNorm(1)
    assert (bn.momentum, bn.eps) == (0.9, 1e-3)
    assert bn.gamma.tolist() == [1.0] and bn.beta.tolist() == [0.0]
    assert bn.running_mean.tolist() == [0.0] and bn.running_var.tolist() == [1.0]
    x = np.array([[1.0], [3.0]], np.float32)                    # mean 2, biased variance 1
    y = bn.forward(x)
    np.testing.assert_allclose(y.ravel(), [-1 / math.sqrt(1.001), 1 / math.sqrt(1.001)], rtol=RTOL)
    assert bn.running_mean[0] == pytest.approx(0.2, rel=1e-6)           # 0.9 * 0 + 0.1 * 2
    assert bn.running_var[0] == pytest.approx(1.0, rel=1e-6)            # 0.9 * 1 + 0.1 * 1
    assert bn.get_config() == {"num_features": 1, "momentum": 0.9, "eps": 1e-3, "dtype": "float32"}


def test_eval_uses_running_statistics_and_leaves_them():
    bn = _bn(eps=0.5)
    bn.running_mean[:] = [0.5, -1.0, 2.0]
    bn.running_var[:] = [1.5, 0.25, 3.0]
    bn.eval()
    x = _x((4, 2, 3), 5)
    y = bn.forward(x)
    yc = _columns(y)
    rm, rv = [0.5, -1.0, 2.0], [1.5, 0.25, 3.0]
    for c, col in enumerate(_columns(x)):
        inv = 1 / math.sqrt(rv[c] + 0.5)
        np.testing.assert_allclose(yc[c], [float(bn.gamma[c]) * (v - rm[c]) * inv + float(bn.beta[c]) for v in col],
                                   rtol=RTOL, atol=2e-6)
    assert bn.running_mean.tolist() == rm and bn.running_var.tolist() == rv
    scale, shift = bn.scale_and_shift()
    for c in range(3):
        s = float(bn.gamma[c]) / math.sqrt(rv[c] + 0.5)
        assert scale[c] == pytest.approx(s, rel=RTOL)
        assert shift[c] == pytest.approx(float(bn.beta[c]) - s * rm[c], rel=RTOL, abs=1e-6)
    # eval backward: a fixed affine map, dx = s dy; dgamma = sum dy xhat, dbeta = sum dy
    dy = _x((4, 2, 3), 6)
    dx = bn.backward(dy)
    dxc, dyc = _columns(dx), _columns(dy)
    grads = {k: v.copy() for k, v in bn.grads.items()}
    for c in range(3):
        s = float(bn.gamma[c]) / math.sqrt(rv[c] + 0.5)
        np.testing.assert_allclose(dxc[c], [s * d for d in dyc[c]], rtol=RTOL, atol=1e-6)
        xhat = [(v - rm[c]) / math.sqrt(rv[c] + 0.5) for v in _columns(x)[c]]
        assert grads["beta"][c] == pytest.approx(sum(dyc[c]), rel=1e-5, abs=1e-5)
        assert grads["gamma"][c] == pytest.approx(sum(d * h for d, h in zip(dyc[c], xhat)), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("shape", [(6, 3), (2, 2, 2, 3)])
def test_training_backward_against_the_scalar_formula(shape):
    bn = _bn(momentum=0.5, eps=0.02)
    x, dy = _x(shape, 7), _x(shape, 8)
    bn.forward(x)
    dx = bn.backward(dy)
    assert dx.shape == x.shape
    dxc = _columns(dx)
    grads = {k: v.copy() for k, v in bn.grads.items()}
    for c, (col, dcol) in enumerate(zip(_columns(x), _columns(dy))):
        mean, var = _stats(col)
        inv = 1 / math.sqrt(var + 0.02)
        xhat = [(v - mean) * inv for v in col]
        m = len(col)
        dbeta, dgamma = sum(dcol), sum(d * h for d, h in zip(dcol, xhat))
        s = float(bn.gamma[c]) * inv
        want = [s * (d - dbeta / m - h * dgamma / m) for d, h in zip(dcol, xhat)]
        np.testing.assert_allclose(dxc[c], want, rtol=1e-5, atol=1e-5)
        assert grads["beta"][c] == pytest.approx(dbeta, rel=1e-5, abs=1e-5)
        assert grads["gamma"][c] == pytest.approx(dgamma, rel=1e-5, abs=1e-5)
    # a second backward accumulates; input_grad=False still accumulates and returns None
    assert bn.backward(dy, input_grad=False) is None
    g2 = bn.grads
    np.testing.assert_allclose(g2["beta"], 2 * grads["beta"], rtol=1e-6)
    np.testing.assert_allclose(g2["gamma"], 2 * grads["gamma"], rtol=1e-6)


def test_float64_batchnorm():
    bn = BatchNorm(2, dtype=np.float64, eps=0.25)
    assert bn.gamma.dtype == bn.running_var.dtype == np.float64
    x = np.array([[0.0, 1.0], [2.0, 5.0]])
    y = bn.forward(x)
    # channel 0: mean 1, var 1; channel 1: mean 3, var 4
    np.testing.assert_allclose(y, [[-1 / math.sqrt(1.25), -2 / math.sqrt(4.25)],
                                   [1 / math.sqrt(1.25), 2 / math.sqrt(4.25)]], rtol=1e-14)
    assert bn.get_config()["dtype"] == "float64"
    with pytest.raises(TypeError, match=r"^BatchNorm\.forward: expected dtype float64, got float32"):
        bn.forward(x.astype(np.float32))


@pytest.mark.parametrize("kw, text", [
    (dict(momentum=-0.1), "got -0.1, 0.001"),
    (dict(momentum=1.5), "got 1.5, 0.001"),
    (dict(eps=0.0), "got 0.9, 0.0"),
    (dict(eps=-1e-3), "got 0.9, -0.001"),
])
def test_bad_parameters(kw, text):
    with pytest.raises(ValueError, match=r"^BatchNorm needs 0 <= momentum <= 1 and eps > 0, " + text + "$"):
        BatchNorm(3, **kw)


@pytest.mark.parametrize("x, exc, text", [
    (np.ones(3, np.float32), ValueError, r"^BatchNorm\.forward: expected an array \[N, \.\.\., 3\], got \(3,\)$"),
    ([[1.0, 2.0, 3.0]], ValueError, r"^BatchNorm\.forward: expected an array \[N, \.\.\., 3\], got \[\[1\.0"),
    (np.ones((2, 4), np.float32), ValueError, r"^BatchNorm\.forward: expected input shape \[N, 3\], got \[2, 4\]$"),
])
def test_bad_inputs(x, exc, text):
    with pytest.raises(exc, match=text):
        BatchNorm(3).forward(x)


# --------------------------------------------------------------------------------------------- folding
def _set_stats(bn, seed):
    rng = np.random.default_rng(seed)
    n = bn.num_features
    bn.gamma[:] = rng.uniform(0.5, 2, n) * rng.choice([-1, 1], n)
    bn.beta[:] = rng.standard_normal(n)
    bn.running_mean[:] = rng.standard_normal(n)
    bn.running_var[:] = rng.uniform(0.1, 3, n)


def test_fold_dense_weights_and_bias_by_the_formula():
    model = Sequential(Dense(3, 4, seed=0), BatchNorm(4, eps=0.05))
    _set_stats(model[1], 1)
    model[0].b[:] = [0.5, -1.25, 2.0, 0.75]                  # (a fresh Dense has a zero bias)
    dense, bn = model[0], model[1]
    folded = fold_batchnorm(model)
    assert len(folded) == 1 and not folded.training
    for o in range(4):
        s = float(bn.gamma[o]) / math.sqrt(float(bn.running_var[o]) + 0.05)
        t = float(bn.beta[o]) - s * float(bn.running_mean[o])
        np.testing.assert_allclose(folded[0].W[:, o], [float(w) * s for w in dense.W[:, o]], rtol=RTOL)
        assert folded[0].b[o] == pytest.approx(float(dense.b[o]) * s + t, rel=RTOL, abs=1e-6)
    assert folded[0].W.dtype == np.float32 and folded[0].b.dtype == np.float32


def test_fold_into_a_layer_without_bias_and_into_a_depthwise_conv():
    model = Sequential(Conv2D(2, 3, 3, use_bias=False, seed=0), BatchNorm(3))
    _set_stats(model[1], 2)
    bn = model[1]
    folded = fold_batchnorm(model)
    assert folded[0].b is not None
    for o in range(3):
        s = float(bn.gamma[o]) / math.sqrt(float(bn.running_var[o]) + 1e-3)
        assert folded[0].b[o] == pytest.approx(float(bn.beta[o]) - s * float(bn.running_mean[o]), rel=RTOL,
                                               abs=1e-6)
        np.testing.assert_allclose(folded[0].W[..., o], model[0].W[..., o].astype(np.float64) * s, rtol=RTOL)
    dw = Sequential(DepthwiseConv2D(2, 3, depth_multiplier=3, seed=0), BatchNorm(6))
    _set_stats(dw[1], 3)
    bn = dw[1]
    fw = fold_batchnorm(dw)[0].W
    assert fw.shape == dw[0].W.shape                      # [KH, KW, C, M], output channel c * M + m
    for c in range(2):
        for m in range(3):
            o = c * 3 + m
            s = float(bn.gamma[o]) / math.sqrt(float(bn.running_var[o]) + 1e-3)
            np.testing.assert_allclose(fw[:, :, c, m], dw[0].W[:, :, c, m].astype(np.float64) * s, rtol=RTOL)


def test_fold_refuses_a_non_sequential_and_keeps_bn_after_an_activation():
    with pytest.raises(TypeError, match=r"^fold_batchnorm expects a Sequential, got BatchNorm$"):
        fold_batchnorm(BatchNorm(2))
    model = Sequential(Dense(2, 2, activation="relu", seed=0), BatchNorm(2), BatchNorm(2))
    folded = fold_batchnorm(model)
    assert [type(layer).__name__ for layer in folded] == ["Dense", "BatchNorm", "BatchNorm"]
    assert folded[1] is not model[1] and not folded.training and model.training
    folded[1].running_mean[:] = 7.0                                  # a deep copy: the original keeps its own
    assert model[1].running_mean.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"^fold_batchnorm: BatchNorm at index 1 does not follow a linear layer "
                                         r"without activation / activation quantizer$"):
        fold_batchnorm(model, strict=True)
    first = Sequential(BatchNorm(2), Dense(2, 2, seed=0))
    with pytest.raises(ValueError, match="BatchNorm at index 0"):
        fold_batchnorm(first, strict=True)
