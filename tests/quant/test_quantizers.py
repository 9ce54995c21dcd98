"""Quantizer classes, the gradient options and the registry.

References: the TF/PyTorch functions (themselves proven on the shared vectors), literal
numpy translations of the seed code (``trinarize``, ``shaped_relu``, the BNN thread's
gradient values), hand tables, fxpsim.core.fixed, and finite differences."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fxpsim.quant.registry as qz
from fxpsim.quant.fake_quant import (fake_quant_with_min_max_vars, fake_quant_with_min_max_vars_gradient,
                               fake_quant_with_min_max_vars_per_channel,
                               fake_quant_with_min_max_vars_per_channel_gradient, fake_quantize_per_channel_affine,
                               fake_quantize_per_tensor_affine, fake_quantize_per_tensor_affine_backward,
                               fake_quantize_learnable_per_tensor_affine_backward)
from fxpsim.core.fixed import Format, from_float, quantize
from fxpsim.quant.registry import (AffineQuantizer, BinaryQuantizer, DoReFaQuantizer, FakeQuant, FixedPointQuantizer,
                               FunctionQuantizer, IdentityQuantizer, Quantizer, TernaryQuantizer)

F32 = np.float32
RNG = np.random.default_rng(2024)
W = RNG.normal(0, 1.5, (6, 4)).astype(F32)


def bits(a):
    return np.asarray(a, F32).view(np.int32)


def leaky_gradient(x, dy):
    """Module-level custom gradient (the seed's 0.9 * dy), saved in configs by name."""
    return 0.9 * dy


ALL_SPECS = ["identity", "fake_quant", "fake_quant4", "affine8", "fixed:Q3.4", "binary", "ternary", "dorefa2",
             {"class_name": "dorefa", "config": {"num_bits": 3, "mode": "weights"}},
             {"class_name": "FakeQuant", "min": [-1, -2, -3, -4], "max": [1, 2, 3, 4], "axis": 1, "learnable": True},
             {"class_name": "affine", "learnable": True, "scale": 0.05, "zero_point": 3.0},
             {"class_name": "affine", "scale": [0.1, 0.2, 0.3, 0.4], "zero_point": [0, 1, -1, 2], "axis": -1},
             {"class_name": "binary", "scale_axis": 1}, {"class_name": "ternary", "nu": 0.5, "axis": 0}]


# --------------------------------------------------------------------------- protocol
@pytest.mark.parametrize("spec", ALL_SPECS, ids=str)
def test_protocol_and_config_round_trip(spec):
    q = qz.get(spec)
    x = W.copy()
    x.flags.writeable = False
    y = q(x)
    assert y.shape == x.shape and y.dtype.kind == "f"
    np.testing.assert_array_equal(x, W)                          # input never mutated
    dy = RNG.normal(size=x.shape).astype(F32)
    dx = q.backward(dy)
    assert dx.shape == x.shape
    assert set(q.grads) == set(q.parameters())
    for name, grad in q.grads.items():
        assert grad.shape == q.parameters()[name].shape
    saved = json.loads(json.dumps(qz.serialize(q)))
    q2 = qz.get(saved)
    assert type(q2) is type(q)
    np.testing.assert_array_equal(bits(q2(x)), bits(y))
    if not isinstance(q, IdentityQuantizer):
        form = q.integer_form()
        assert form.codes.dtype == np.int64
        assert form.quant_min <= form.codes.min() and form.codes.max() <= form.quant_max
        np.testing.assert_allclose(form.to_float(), y, rtol=1e-6, atol=1e-7)


def test_parameters_are_the_arrays_an_optimizer_updates():
    q = FakeQuant(-1.0, 1.0, learnable=True)
    x = np.array([-3.0, 0.2, 3.0], F32)
    q(x)
    q.backward(np.array([1.0, 1.0, 2.0], F32))
    assert q.grads["min"] == 1.0 and q.grads["max"] == 2.0
    for name, p in q.parameters().items():
        p[...] -= 0.5 * q.grads[name]
    assert float(q.min) == -1.5 and float(q.max) == 0.0
    assert q(np.array([0.5], F32))[0] == 0.0                # the updated range is used


def test_backward_before_forward_and_shape_errors():
    q = BinaryQuantizer()
    with pytest.raises(RuntimeError, match="before backward"):
        q.backward(np.ones(3, F32))
    q(np.ones(3, F32))
    with pytest.raises(ValueError, match="shape"):
        q.backward(np.ones(4, F32))
    with pytest.raises(TypeError, match="floating"):
        q(np.ones(3, np.int32))


# --------------------------------------------------------------------------- gradient options
def test_gradient_options_ste_clipped_scaled_and_callable():
    x = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0], F32)
    dy = np.arange(1, 8, dtype=F32)
    q = BinaryQuantizer(gradient="ste")
    q(x)
    np.testing.assert_array_equal(q.backward(dy), dy)
    q = BinaryQuantizer()                                       # clipped by default: 1{|x| <= 1}
    q(x)
    np.testing.assert_array_equal(q.backward(dy), [0, 2, 3, 4, 5, 6, 0])
    q = BinaryQuantizer(gradient=0.9)                           # seed: 0.9 * tf.identity(dy)
    q(x)
    np.testing.assert_allclose(q.backward(dy), 0.9 * dy)
    seen = {}

    def custom(xx, g):
        seen["x"] = xx
        return np.where(xx > 0, 2 * g, 0 * g)
    q = BinaryQuantizer(gradient=custom)
    q(x)
    np.testing.assert_array_equal(q.backward(dy), [0, 0, 0, 0, 10, 12, 14])
    np.testing.assert_array_equal(seen["x"], x)


def test_seed_custom_gradient_in_numpy_and_its_config():
    """04_Custom_Gradients: a fake quantizer whose gradient is 0.9 * dy everywhere."""
    q = FakeQuant(-6.0, 6.0, num_bits=8, gradient=leaky_gradient)
    x = np.linspace(-8, 8, 33).astype(F32)
    np.testing.assert_array_equal(bits(q(x)), bits(fake_quant_with_min_max_vars(x, -6.0, 6.0, 8)))
    np.testing.assert_allclose(q.backward(np.ones_like(x)), np.full(x.shape, 0.9))
    config = qz.serialize(q)["config"]
    assert config["gradient"] == f"{__name__}:leaky_gradient"
    with pytest.raises(ValueError, match="not a registered function.*register_gradient"):
        qz.get(qz.serialize(q))                  # a config never imports the module it names
    qz.register_gradient(leaky_gradient)         # registered under "module:qualname"
    assert qz.get(qz.serialize(q)).gradient is leaky_gradient
    with pytest.raises(ValueError, match="module-level"):
        FakeQuant(gradient=lambda x, dy: dy).get_config()


@pytest.mark.parametrize("bad, error", [("steep", ValueError), (np.nan, ValueError), (True, TypeError),
                                        (object(), TypeError)])
def test_bad_gradient_spec(bad, error):
    with pytest.raises(error, match="gradient"):
        IdentityQuantizer(gradient=bad)


# --------------------------------------------------------------------------- registry
def test_registry_forms():
    assert isinstance(qz.get(None), IdentityQuantizer) and isinstance(qz.get("identity"), IdentityQuantizer)
    q = FakeQuant()
    assert qz.get(q) is q
    assert qz.get("fake_quant4").num_bits == 4 and qz.get("FakeQuant").num_bits == 8
    assert qz.get("dorefa3").num_bits == 3 and qz.get("affine4").quant_max == 7
    assert qz.get("fixed:sfix8_En4").fmt == Format(8, 4)
    assert qz.get({"class_name": "binary", "config": {"scale_axis": 0}}).scale_axis == 0
    assert qz.get("ternary", nu=0.5).nu == 0.5
    f = qz.get(np.round)
    assert isinstance(f, FunctionQuantizer)
    np.testing.assert_array_equal(f(np.array([0.5, 1.5], F32)), [0.0, 2.0])
    with pytest.raises(ValueError, match="unknown quantizer"):
        qz.get("sigma_delta")
    with pytest.raises(ValueError, match="class_name"):
        qz.get({"num_bits": 3})
    with pytest.raises(TypeError, match="cannot build"):
        qz.get(3.5)
    with pytest.raises(ValueError, match="no bit width"):
        qz.get("binary2")
    assert qz.get_quantizer is qz.get

    @qz.register("halver")
    class Halver(Quantizer):
        def _forward(self, x):
            return x / 2
    assert isinstance(qz.get("halver"), Halver) and "halver" in qz.registered_names()


# --------------------------------------------------------------------------- FakeQuant / AffineQuantizer
def test_fake_quant_equals_tf_functions_per_tensor_and_per_channel():
    x = RNG.normal(0, 3, (5, 3)).astype(F32)
    dy = RNG.normal(size=x.shape).astype(F32)
    q = FakeQuant(-2.0, 4.0, num_bits=5, narrow_range=True, learnable=True)
    np.testing.assert_array_equal(bits(q(x)), bits(fake_quant_with_min_max_vars(x, -2.0, 4.0, 5, True)))
    dx, dmin, dmax = fake_quant_with_min_max_vars_gradient(dy, x, -2.0, 4.0, 5, True)
    np.testing.assert_array_equal(bits(q.backward(dy)), bits(dx))
    assert q.grads["min"] == dmin and q.grads["max"] == dmax
    lo, hi = np.array([-1.0, -2.0, -3.0, -4.0, -5.0], F32), np.array([1, 2, 3, 4, 5], F32)
    q = FakeQuant(lo, hi, axis=0, learnable=True)                  # channels on axis 0
    y = q(x)
    np.testing.assert_array_equal(bits(y), bits(fake_quant_with_min_max_vars_per_channel(x.T, lo, hi).T))
    dx, dmin, dmax = fake_quant_with_min_max_vars_per_channel_gradient(dy.T, x.T, lo, hi)
    np.testing.assert_array_equal(bits(q.backward(dy)), bits(dx.T))
    np.testing.assert_array_equal(q.grads["min"], dmin)
    form = q.integer_form()
    assert form.axis == 0 and form.zero_point.shape == (5, 1)
    np.testing.assert_array_equal(bits(form.to_float().astype(F32)), bits(y))


def test_fake_quant_bad_input():
    with pytest.raises(ValueError, match="num_bits"):
        FakeQuant(num_bits=1)
    with pytest.raises(ValueError, match="min must be <= max"):
        FakeQuant(2.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        FakeQuant(np.nan, 1.0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        FakeQuant([-1, -1], [1, 1], axis=2)(np.zeros((3, 2), F32))
    with pytest.raises(ValueError, match="channels"):
        FakeQuant([-1, -1], [1, 1], axis=1)(np.zeros((3, 4), F32))


def test_affine_quantizer_equals_torch_functions_and_lsq():
    x = RNG.normal(0, 2, (4, 6)).astype(F32)
    dy = RNG.normal(size=x.shape).astype(F32)
    q = AffineQuantizer(0.05, 3, num_bits=8, signed=True)
    np.testing.assert_array_equal(bits(q(x)), bits(fake_quantize_per_tensor_affine(x, 0.05, 3, -128, 127)))
    np.testing.assert_array_equal(bits(q.backward(dy)),
                                  bits(fake_quantize_per_tensor_affine_backward(dy, x, 0.05, 3, -128, 127)))
    q = AffineQuantizer([0.1, 0.2, 0.3, 0.4], [0, 1, 2, 3], num_bits=4, signed=False, axis=0)
    np.testing.assert_array_equal(bits(q(x)), bits(fake_quantize_per_channel_affine(x, [0.1, 0.2, 0.3, 0.4],
                                                                                    [0, 1, 2, 3], 0, 0, 15)))
    q = AffineQuantizer(0.02, 1.0, num_bits=4, learnable=True, grad_factor=0.5)
    q(x)
    dx = q.backward(dy)
    rdx, rs, rz = fake_quantize_learnable_per_tensor_affine_backward(dy, x, [0.02], [1.0], -8, 7, 0.5)
    np.testing.assert_array_equal(dx, rdx)
    assert q.grads["scale"] == rs[0] and q.grads["zero_point"] == rz[0]
    lsq = AffineQuantizer(0.02, 0.0, num_bits=4, learnable=True)   # grad_factor "lsq" = 1/sqrt(N * Qp)
    lsq(x)
    lsq.backward(dy)
    _, rs, _ = fake_quantize_learnable_per_tensor_affine_backward(dy, x, [0.02], [0.0], -8, 7, 1 / np.sqrt(24 * 7))
    assert float(lsq.grads["scale"]) == pytest.approx(float(rs[0]), rel=1e-6)


@pytest.mark.parametrize("kwargs, match", [({"scale": 0.0}, "scale"), ({"scale": -1.0}, "scale"),
                                           ({"zero_point": 200}, "zero_point"),
                                           ({"quant_min": 5, "quant_max": 1}, "quant_min"),
                                           ({"num_bits": 1}, "num_bits"), ({"grad_factor": "x"}, "grad_factor")])
def test_affine_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        AffineQuantizer(**kwargs)


# --------------------------------------------------------------------------- fixed point
def test_fixed_point_quantizer_hand_table_and_clipped_mask():
    fmt = Format(8, 4)                                   # LSB 1/16, range [-8, 7.9375]
    q = FixedPointQuantizer(fmt, rounding="half_up", gradient="clipped_ste")
    x = np.array([0.03125, -0.03125, 0.09375, -8.0, 7.9375, 7.96875, -8.03125, 100.0], np.float64)
    np.testing.assert_array_equal(q(x), [0.0625, 0.0, 0.125, -8.0, 7.9375, 7.9375, -8.0, 7.9375])
    np.testing.assert_array_equal(q(x), quantize(x, fmt))
    np.testing.assert_array_equal(q.backward(np.ones_like(x)), [1, 1, 1, 1, 1, 0, 0, 0])
    form = q.integer_form()
    assert form.fmt == fmt and form.scale == 1 / 16
    np.testing.assert_array_equal(form.codes, from_float(x, fmt).raw)
    assert FixedPointQuantizer("Q3.4", rounding="half_even")(np.array([0.03125]))[0] == 0.0


# --------------------------------------------------------------------------- binary
BNN_THREAD_X = np.array([
    0.9794708, 7.8065434, -3.2875454, -1.097891, -12.721996, 16.402979, -0.5255345, -17.342981, -8.2592535,
    4.5270705, -2.2045264, -6.380336, 19.783878, -3.1297235, 2.1022735, -3.7433875, 5.914869, -6.8573623,
    7.194282, 12.00661, -8.9192095, -8.119039, -5.6874366, 16.598093, 11.135046, 4.029105, 1.9707218, -14.666031,
    -1.1781573, -15.765383, -10.605588, -9.970756, -6.453623, 5.412363, -11.768549, 6.1537633, -2.8233638,
    -11.992054, 15.38794, -7.156569, -11.156998, -17.290377, -8.680723, -13.315008, 7.547665, -5.0133014,
    4.5976114, 19.168005, 16.036833, -7.766696, -9.976102, -6.782584, -8.240993, 2.4700897, 2.6926963, 0.5079334,
    -16.131004, 16.755043, 2.1212428, 6.922239, -3.4023576, 0.32383335, -1.2782183, 3.959227], F32).reshape(2, 4, 4, 2)


def test_bnn_thread_gradient_values():
    """The forum thread's gradient for these inputs is 1 exactly at flat indices 0, 6, 55, 61."""
    q = BinaryQuantizer()
    y = q(BNN_THREAD_X)
    np.testing.assert_array_equal(y, np.where(BNN_THREAD_X >= 0, 1, -1))
    grad = q.backward(np.ones_like(BNN_THREAD_X))
    assert np.flatnonzero(grad).tolist() == [0, 6, 55, 61] and set(grad.ravel().tolist()) == {0.0, 1.0}


def test_binary_sign_of_zero_boundaries_and_xnor_scale():
    q = BinaryQuantizer()
    x = np.array([0.0, -0.0, 1.0, -1.0, np.nextafter(F32(1), F32(2))], F32)
    np.testing.assert_array_equal(q(x), [1, 1, 1, -1, 1])
    np.testing.assert_array_equal(q.backward(np.ones_like(x)), [1, 1, 1, 1, 0])     # |x| <= 1 inclusive
    w = np.array([[0.5, -2.0], [-1.5, 1.0], [0.25, 0.0]], F32)
    q = BinaryQuantizer(scale_axis=1)                                               # per output column
    alpha = np.array([(0.5 + 1.5 + 0.25) / 3, (2.0 + 1.0 + 0.0) / 3], F32)
    np.testing.assert_allclose(q(w), np.where(w >= 0, 1, -1) * alpha, rtol=1e-7)
    dy = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], F32)
    sign = np.where(w >= 0, 1.0, -1.0)
    expected = alpha * dy * (np.abs(w) <= 1) + sign / 3 * np.sum(dy * sign, axis=0)
    np.testing.assert_allclose(q.backward(dy), expected, rtol=1e-6)


def test_binary_scale_gradient_matches_finite_differences_of_alpha():
    """With an STE on sign(), L = sum(dy * alpha(w) * s) has dL/dw = alpha*dy + s/n * sum(dy*s)."""
    w = RNG.normal(size=(5, 3))
    dy = RNG.normal(size=(5, 3))
    q = BinaryQuantizer(scale_axis=1, gradient="ste")
    q(w)
    dx = q.backward(dy)
    sign = np.where(w >= 0, 1.0, -1.0)
    h = 1e-6
    for idx in [(0, 0), (3, 2), (4, 1)]:
        wp, wm = w.copy(), w.copy()
        wp[idx] += h
        wm[idx] -= h
        # alpha-part of the derivative by finite differences, STE part added analytically
        fd_alpha = (np.sum(dy * sign * np.mean(np.abs(wp), axis=0)) - np.sum(dy * sign * np.mean(np.abs(wm), axis=0))) / (2 * h)
        alpha = np.mean(np.abs(w), axis=0)
        assert dx[idx] == pytest.approx(alpha[idx[1]] * dy[idx] + fd_alpha, rel=1e-6)


# --------------------------------------------------------------------------- ternary
def seed_trinarize(x, nu):
    """quantization.py's trinarize, translated literally to numpy (>= threshold)."""
    thres = nu * np.mean(np.abs(x))
    g_e = (x >= thres).astype(np.float32)
    l_e = (x <= -thres).astype(np.float32)
    eta = np.mean(np.abs((g_e + l_e) * x))
    return l_e * -eta + g_e * eta


def test_ternary_hand_table_and_seed():
    w = np.array([0.1, -0.5, 1.0, -2.0, 0.05], F32)
    # mean|w| = 0.73, delta = 0.511: keep 1.0 and -2.0, alpha = 1.5
    np.testing.assert_allclose(TernaryQuantizer()(w), [0, 0, 1.5, -1.5, 0], rtol=1e-7)
    x = RNG.normal(size=(8, 8)).astype(F32)
    ours = TernaryQuantizer(nu=1.0)(x)
    kept = np.abs(x) > np.mean(np.abs(x))
    # the seed averages |x| over *all* elements (zeros included): alpha_seed = alpha * kept.mean()
    seed = seed_trinarize(x, 1.0)
    np.testing.assert_allclose(seed, ours * kept.mean(), rtol=1e-5)
    assert np.array_equal(np.sign(seed), np.sign(ours))
    q = TernaryQuantizer()
    q(x)
    np.testing.assert_array_equal(q.backward(np.ones_like(x)), np.ones_like(x))     # STE
    assert TernaryQuantizer()(np.zeros(4, F32)).tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="nu"):
        TernaryQuantizer(nu=-1)


# --------------------------------------------------------------------------- DoReFa
def seed_shaped_relu(x, k):
    """quantization.py's shaped_relu forward (tf.round = round half to even)."""
    scaling = 2.0 ** k - 1
    return np.round(scaling * np.clip(x, 0, 1)) / scaling


def test_dorefa_activations_match_seed_and_rounding_option():
    x = np.array([-0.5, 0.0, 1 / 6, 0.5, 0.5000001, 5 / 6, 1.0, 2.0], F32)
    q = DoReFaQuantizer(num_bits=1)
    np.testing.assert_array_equal(q(x), seed_shaped_relu(x, 1).astype(F32))
    assert q(x)[3] == 0.0                                        # 0.5 is a tie: half to even -> 0
    assert DoReFaQuantizer(num_bits=1, rounding="half_up")(x)[3] == 1.0
    np.testing.assert_array_equal(DoReFaQuantizer(num_bits=2)(x), seed_shaped_relu(x, 2).astype(F32))
    np.testing.assert_array_equal(q.backward(np.ones_like(x)), [0, 1, 1, 1, 1, 1, 1, 0])   # clip gradient
    with pytest.raises(ValueError, match="rounding"):
        DoReFaQuantizer(rounding="nearest")
    with pytest.raises(ValueError, match="num_bits"):
        DoReFaQuantizer(num_bits=0)


def test_dorefa_weight_gradient_matches_finite_differences_of_the_transform():
    w = RNG.normal(size=(4, 5))
    dy = RNG.normal(size=(4, 5))
    q = DoReFaQuantizer(num_bits=4, mode="weights")
    y = q(w)
    levels = 15
    np.testing.assert_allclose(y, (2 * np.rint(q.weight_transform(w) * levels) - levels) / levels)
    dx = q.backward(dy)
    h = 1e-6
    for idx in np.ndindex(w.shape):
        wp, wm = w.copy(), w.copy()
        wp[idx] += h
        wm[idx] -= h
        fd = np.sum(dy * (2 * q.weight_transform(wp) - 1) - dy * (2 * q.weight_transform(wm) - 1)) / (2 * h)
        assert dx[idx] == pytest.approx(fd, rel=1e-5, abs=1e-8)
