"""fxpsim.quant.affine: per-channel and learnable paths, defaults, observers and error texts.

Written against mutation-testing survivors (tools/mutation/).  Inputs, scales and gradients are
dyadic (powers of two, small multiples of 1/16), so every float32 step of TF and PyTorch is exact
and the expected values come from the exact ``Fraction`` models below (written from the formulas
in the class docstrings), not from fxpsim.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.quant.affine import AffineQuantizer, FakeQuant
from reference import round_fraction


def _raises(call, exc, pattern):
    with pytest.raises(exc) as info:
        call()
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


# --------------------------------------------------------------------------- models
def model_affine(x, s, z, qmin, qmax):
    """PyTorch: c = rne(x / s) + z (exact for dyadic s), q = (clamp(c) - z) s; the code and q."""
    c = round_fraction(Fraction(x) / Fraction(s), "half_even") + z
    return c, (min(max(c, qmin), qmax) - z) * Fraction(s)


def model_affine_grads(x, g, s, z, qmin, qmax, gamma):
    """(dx, ds term, dz term) of one element: the clipped STE and LSQ's terms, before summing."""
    c, q = model_affine(x, s, z, qmin, qmax)
    if c < qmin:
        return 0, gamma * g * (qmin - z), -gamma * g * Fraction(s)
    if c > qmax:
        return 0, gamma * g * (qmax - z), -gamma * g * Fraction(s)
    return g, gamma * g * (q - Fraction(x)) / Fraction(s), 0


def per_channel(x, axis, fn):
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = fn(float(x[idx]), idx[axis])
    return out


X3 = (np.array([[[1.0, -3.0, 100.0, 0.375], [0.125, -40.0, 2.0, 7.5], [-0.75, 0.0, 3.25, -1000.0]],
                [[2.5, -2.5, 0.625, -0.625], [63.0, -64.0, 1.5, -1.5], [12.0, -0.1875, 31.0, 0.5]]],
               dtype=np.float32))                                    # shape (2, 3, 4): 3 channels on axis 1


# --------------------------------------------------------------------------- AffineQuantizer
@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("axis", [1, -2])
def test_affine_per_channel_forward_and_gradients(learnable, axis):
    scales, zps = [0.5, 0.25, 2.0], [1, -2, 0]
    q = AffineQuantizer(scale=scales, zero_point=zps, axis=axis, learnable=learnable, grad_factor=0.5)
    y = q(X3)
    want = per_channel(X3, 1, lambda v, c: model_affine(v, scales[c], zps[c], -128, 127)[1])
    np.testing.assert_array_equal(y, want.astype(np.float64))
    assert y.dtype == np.float32
    g = np.array(np.arange(24).reshape(2, 3, 4) % 5 - 2, np.float32)       # -2..2
    dx = q.backward(g)
    terms = np.empty(X3.shape, dtype=object)
    for idx in np.ndindex(X3.shape):
        c = idx[1]
        terms[idx] = model_affine_grads(float(X3[idx]), int(g[idx]), scales[c], zps[c], -128, 127, Fraction(1, 2))
    np.testing.assert_array_equal(dx, np.vectorize(lambda t: float(t[0]))(terms))
    if learnable:
        ds = [float(sum(terms[i, c, j][1] for i in range(2) for j in range(4))) for c in range(3)]
        dz = [float(sum(terms[i, c, j][2] for i in range(2) for j in range(4))) for c in range(3)]
        assert q.grads["scale"].tolist() == ds and q.grads["zero_point"].tolist() == dz
        assert q.grads["scale"].dtype == np.float32 and q.grads["zero_point"].dtype == np.float32
        assert q.grads["scale"].shape == (3,)
    else:
        assert q.grads == {} and q.parameters() == {}
    form = q.integer_form(X3)
    codes = per_channel(X3, 1, lambda v, c: min(max(model_affine(v, scales[c], zps[c], -128, 127)[0], -128), 127))
    np.testing.assert_array_equal(form.codes, codes.astype(np.int64))
    assert form.scale.shape == (1, 3, 1) and form.zero_point.shape == (1, 3, 1) and form.axis == 1
    assert form.scale.ravel().tolist() == scales and form.zero_point.ravel().tolist() == zps
    assert (form.quant_min, form.quant_max) == (-128, 127)


def test_affine_single_parameters_broadcast_to_the_channels():
    q = AffineQuantizer(scale=0.5, zero_point=3, axis=1, learnable=True, grad_factor=1.0)
    y = q(X3)
    want = per_channel(X3, 1, lambda v, c: model_affine(v, 0.5, 3, -128, 127)[1])
    np.testing.assert_array_equal(y, want.astype(np.float64))
    params = q.parameters()
    assert params["scale"].tolist() == [0.5] * 3 and params["zero_point"].tolist() == [3.0] * 3
    assert params["scale"].dtype == np.float32 and params["zero_point"].dtype == np.float32
    q.backward(np.ones_like(X3))
    assert q.grads["scale"].shape == (3,) and q.grads["zero_point"].shape == (3,)
    nl = AffineQuantizer(scale=[0.25], zero_point=[-1], axis=0)
    nl(np.zeros((4, 2), np.float32))
    assert nl.scale.tolist() == [0.25] * 4 and nl.zero_point.tolist() == [-1] * 4 and nl.zero_point.dtype == np.int64


def test_affine_lsq_gradient_scale_counts_elements_per_channel():
    # quant range [0, 16]; per channel N = 12 / 3 = 4 elements: gamma = 1 / sqrt(4 * 16) = 1/8
    x = np.array([[[0.5, 9.0], [1.0, -1.0], [20.0, 0.25]], [[3.0, 1.5], [0.75, 2.0], [4.0, 100.0]]], np.float32)
    q = AffineQuantizer(scale=[0.5, 0.25, 1.0], zero_point=[0, 2, 1], quant_min=0, quant_max=16, axis=1,
                        learnable=True)
    q(x)
    q.backward(np.ones_like(x))
    gamma = Fraction(1, 8)
    assert gamma == Fraction(1, 1) / Fraction(math.isqrt(4 * 16))
    for c, (s, z) in enumerate(((0.5, 0), (0.25, 2), (1.0, 1))):
        terms = [model_affine_grads(float(v), 1, s, z, 0, 16, gamma) for v in x[:, c, :].ravel()]
        assert q.grads["scale"][c] == float(sum(t[1] for t in terms)), c
        assert q.grads["zero_point"][c] == float(sum(t[2] for t in terms)), c
    # per tensor: N = 4 elements, gamma = 1/8 again
    x1 = np.array([0.5, 9.0, -1.0, 3.25], np.float32)
    q = AffineQuantizer(scale=0.5, zero_point=0, quant_min=0, quant_max=16, learnable=True)
    q(x1)
    q.backward(np.ones_like(x1))
    terms = [model_affine_grads(float(v), 1, 0.5, 0, 0, 16, gamma) for v in x1]
    assert q.grads["scale"].tolist() == float(sum(t[1] for t in terms))


def test_affine_defaults_hand_table():
    q = AffineQuantizer()
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 126.6, 200.0, -200.0], np.float32)
    assert q(x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 127.0, 127.0, -128.0]     # rne, [-128, 127]
    assert (q.quant_min, q.quant_max, q.signed, q.symmetric, q.learnable) == (-128, 127, True, False, False)
    u = AffineQuantizer(signed=False, num_bits=4)
    assert (u.quant_min, u.quant_max, u.signed) == (0, 15, False)
    assert u(np.array([-3.0, 7.5, 20.0], np.float32)).tolist() == [0.0, 8.0, 15.0]
    w = AffineQuantizer(num_bits=32, signed=False)
    assert w.quant_max == (1 << 32) - 1
    assert AffineQuantizer(num_bits=2).quant_min == -2
    assert AffineQuantizer(quant_min=-3, quant_max=5).quant_max == 5
    cfg = AffineQuantizer(symmetric=True).get_config()
    assert cfg["symmetric"] is True and cfg["signed"] is True and "observer" not in cfg


def test_affine_observer_updates_only_while_training():
    x = np.array([-4.0, 0.0, 12.0], np.float32)
    q = AffineQuantizer(observer="minmax", quant_min=0, quant_max=16)
    q.eval()
    q(x)
    assert q.scale.tolist() == 1.0 and q.zero_point.tolist() == 0            # eval: no calibration
    q.train()
    q(x)
    assert q.scale.tolist() == 1.0 and q.zero_point.tolist() == 4              # (12 - -4) / 16 = 1, z = 4
    cfg = q.get_config()
    assert cfg["observer"]["class_name"] == "minmax"
    q.observer.frozen = True
    q(np.array([-40.0, 120.0], np.float32))
    assert q.scale.tolist() == 1.0                                              # frozen: no update


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: AffineQuantizer(axis=True), TypeError, r"AffineQuantizer: axis must be an int or None, got True"),
    (lambda: AffineQuantizer(axis=1.0), TypeError, r"AffineQuantizer: axis must be an int or None, got 1\.0"),
    (lambda: AffineQuantizer(num_bits=1), ValueError, r"AffineQuantizer: num_bits must be in \[2, 32\], got 1"),
    (lambda: AffineQuantizer(num_bits=33), ValueError, r"AffineQuantizer: num_bits must be in \[2, 32\], got 33"),
    (lambda: AffineQuantizer(scale=[1.0, 2.0], axis=0)(np.zeros((3, 2), np.float32)), ValueError,
     r"AffineQuantizer: scale has 2 values, the input has 3 channels"),
    (lambda: AffineQuantizer(zero_point=[0, 1], axis=0)(np.zeros((3, 2), np.float32)), ValueError,
     r"AffineQuantizer: zero_point has 2 values, the input has 3 channels"),
    (lambda: AffineQuantizer(axis=0, observer="minmax"), ValueError,
     r"AffineQuantizer: the observer's axis \(None\) differs from the quantizer's axis \(0\)"),
    (lambda: AffineQuantizer(axis=2)(np.zeros((3, 2), np.float32)), ValueError, r"AffineQuantizer: .*axis.*"),
    (lambda: AffineQuantizer(grad_factor=True), ValueError,
     r"AffineQuantizer: grad_factor must be 'lsq' or a finite number, got True"),
    (lambda: AffineQuantizer(scale=0.0), ValueError, r"AffineQuantizer: .*scale.*"),
    (lambda: FakeQuant(axis=True), TypeError, r"FakeQuant: axis must be an int or None, got True"),
    (lambda: FakeQuant(num_bits=1), ValueError, r"FakeQuant: num_bits must be in \[2, 16\], got 1"),
    (lambda: FakeQuant(num_bits=17), ValueError, r"FakeQuant: num_bits must be in \[2, 16\], got 17"),
    (lambda: FakeQuant(min=[-1.0, -2.0], max=[1.0, 2.0], axis=0)(np.zeros((3, 2), np.float32)), ValueError,
     r"FakeQuant: min has 2 values, the input has 3 channels"),
    (lambda: FakeQuant(min=[-1.0, -2.0], max=1.0, axis=0), ValueError, r"FakeQuant: min has shape \(2,\), max has shape \(1,\)"),
    (lambda: FakeQuant(axis=1, observer="minmax"), ValueError,
     r"FakeQuant: the observer's axis \(None\) differs from the quantizer's axis \(1\)"),
    (lambda: FakeQuant(axis=-3)(np.zeros((3, 2), np.float32)), ValueError, r"FakeQuant: .*axis.*"),
    (lambda: FakeQuant(min=1.0, max=-1.0), ValueError, r"FakeQuant: .*"),
])
def test_error_texts_name_the_quantizer(call, exc, pattern):
    _raises(call, exc, pattern)


# --------------------------------------------------------------------------- FakeQuant
# per-channel ranges already on their grids (no nudging): [a, b] = [-z s, (255 - z) s]
FQ = [(0.0625, 128), (0.125, 0), (0.25, 255)]


def model_fake_quant(x, s, z, qmin=0, qmax=255):
    a, b = Fraction(qmin - z) * Fraction(s), Fraction(qmax - z) * Fraction(s)
    v = min(max(Fraction(x), a), b)
    return a + math.floor((v - a) / Fraction(s) + Fraction(1, 2)) * Fraction(s), a, b


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("axis", [1, -2])
def test_fake_quant_per_channel_on_a_middle_axis(learnable, axis):
    mins = [-z * s for s, z in FQ]
    maxs = [(255 - z) * s for s, z in FQ]
    q = FakeQuant(min=mins, max=maxs, axis=axis, learnable=learnable)
    y = q(X3)
    want = per_channel(X3, 1, lambda v, c: model_fake_quant(v, *FQ[c])[0])
    np.testing.assert_array_equal(y, want.astype(np.float64))
    assert y.dtype == np.float32
    g = np.array(np.arange(24).reshape(2, 3, 4) % 3 + 1, np.float32)
    dx = q.backward(g)
    inside = per_channel(X3, 1, lambda v, c: model_fake_quant(v, *FQ[c])[1] <= Fraction(v) <= model_fake_quant(v, *FQ[c])[2])
    np.testing.assert_array_equal(dx, np.where(inside.astype(bool), g, 0))
    if learnable:
        dmin = [float(sum(g[i, c, j] for i in range(2) for j in range(4)
                          if Fraction(float(X3[i, c, j])) < model_fake_quant(0, *FQ[c])[1])) for c in range(3)]
        dmax = [float(sum(g[i, c, j] for i in range(2) for j in range(4)
                          if Fraction(float(X3[i, c, j])) > model_fake_quant(0, *FQ[c])[2])) for c in range(3)]
        assert q.grads["min"].tolist() == dmin and q.grads["max"].tolist() == dmax
        assert q.grads["min"].dtype == np.float32 and q.grads["min"].shape == (3,)
    else:
        assert q.grads == {} and q.parameters() == {}
    form = q.integer_form(X3)
    codes = per_channel(X3, 1, lambda v, c: int((model_fake_quant(v, *FQ[c])[0] - model_fake_quant(v, *FQ[c])[1])
                                                 / Fraction(FQ[c][0])))
    np.testing.assert_array_equal(form.codes, codes.astype(np.int64))
    assert form.axis == 1 and form.scale.shape == (1, 3, 1) and form.zero_point.shape == (1, 3, 1)
    assert form.scale.ravel().tolist() == [s for s, _ in FQ] and form.zero_point.ravel().tolist() == [z for _, z in FQ]
    assert (form.quant_min, form.quant_max) == (0, 255)


def test_fake_quant_defaults_and_narrow_range():
    q = FakeQuant()
    assert q.min.tolist() == -6.0 and q.max.tolist() == 6.0 and q.num_bits == 8 and q.narrow_range is False
    assert q.axis is None and q.learnable is False and q.observer is None
    nr = FakeQuant(min=-127 * 0.5, max=127 * 0.5, narrow_range=True)            # codes 1..255, z = 128
    assert nr.narrow_range is True
    assert nr(np.array([-100.0, 0.3, 0.25, 100.0], np.float32)).tolist() == [-63.5, 0.5, 0.5, 63.5]
    assert nr.integer_form(np.array([-100.0, 100.0], np.float32)).quant_min == 1
    assert FakeQuant(num_bits=16, min=0.0, max=65535.0).num_bits == 16
    assert FakeQuant(num_bits=2, min=0.0, max=3.0)(np.array([1.4, 1.6], np.float32)).tolist() == [1.0, 2.0]
    cfg = FakeQuant(min=[-1.0, -2.0], max=[1.0, 2.0], axis=0, learnable=True).get_config()
    assert (cfg["min"], cfg["max"], cfg["axis"], cfg["learnable"]) == ([-1.0, -2.0], [1.0, 2.0], 0, True)
    assert "observer" not in cfg


def test_fake_quant_single_range_broadcasts_to_the_channels():
    q = FakeQuant(min=-8.0, max=7.9375, axis=0, learnable=True)
    x = np.array([[-9.0, 0.03125], [7.96875, 1.0]], np.float32)
    y = q(x)
    assert q.min.tolist() == [-8.0, -8.0] and q.max.tolist() == [7.9375, 7.9375]
    assert q.parameters()["min"].shape == (2,)
    assert y.tolist() == [[-8.0, 0.0625], [7.9375, 1.0]]                          # 0.03125 = half a step: up


def test_fake_quant_observer_updates_only_while_training():
    x = np.array([-8.0, 0.0, 7.9375], np.float32)
    q = FakeQuant(min=-1.0, max=1.0, observer="minmax")
    q.eval()
    q(x)
    assert (q.min.tolist(), q.max.tolist()) == (-1.0, 1.0)
    q.train()
    q(x)
    assert (q.min.tolist(), q.max.tolist()) == (-8.0, 7.9375)
    assert q.get_config()["observer"]["class_name"] == "minmax"
    q.observer.frozen = True
    q(np.array([-100.0, 100.0], np.float32))
    assert (q.min.tolist(), q.max.tolist()) == (-8.0, 7.9375)


# --------------------------------------------------------------------------- second round
def test_fake_quant_per_channel_narrow_range():
    # narrow range: codes 1..255; [-63.5, 63.5] -> s = 127/254 = 0.5, z = 128; [0, 127] -> s = 0.5, z = 1
    q = FakeQuant(min=[-63.5, 0.0], max=[63.5, 127.0], axis=0, narrow_range=True, learnable=True)
    x = np.array([[-100.0, 0.3, 63.75], [0.25, 200.0, -0.5]], np.float32)
    want = [[float(model_fake_quant(v, 0.5, z, 1, 255)[0]) for v in row] for row, z in zip(x.tolist(), (128, 1))]
    assert q(x).tolist() == want == [[-63.5, 0.5, 63.5], [0.5, 127.0, 0.0]]
    dx = q.backward(np.ones_like(x))
    assert dx.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    assert q.grads["min"].tolist() == [1.0, 1.0] and q.grads["max"].tolist() == [1.0, 1.0]
    form = q.integer_form(x)
    assert form.quant_min == 1 and form.zero_point.ravel().tolist() == [128, 1]
    assert form.codes.tolist() == [[1, 129, 255], [2, 255, 1]]


def test_integer_form_axis_is_none_per_tensor():
    assert FakeQuant().integer_form(np.zeros(3, np.float32)).axis is None
    assert AffineQuantizer().integer_form(np.zeros(3, np.float32)).axis is None


def test_lsq_gradient_scale_edge_counts():
    # one element per channel, quant range [0, 1]: gamma = 1 / sqrt(1 * 1) = 1
    x = np.array([[0.25, 3.0]], np.float32)
    q = AffineQuantizer(scale=[0.5, 0.5], zero_point=[0, 0], quant_min=0, quant_max=1, axis=1, learnable=True)
    q(x)
    q.backward(np.ones_like(x))
    assert q.grads["scale"].tolist() == [float(model_affine_grads(float(v), 1, 0.5, 0, 0, 1, Fraction(1))[1])
                                         for v in x.ravel()] == [-0.5, 1.0]
    # a single channel of two elements: gamma = 1 / sqrt(2) (irrational: compared to float32 precision)
    x = np.array([[0.25], [3.0]], np.float32)
    q = AffineQuantizer(scale=[0.5], zero_point=[0], quant_min=0, quant_max=1, axis=1, learnable=True)
    q(x)
    q.backward(np.ones_like(x))
    total = float(sum(model_affine_grads(float(v), 1, 0.5, 0, 0, 1, Fraction(1))[1] for v in x.ravel()))
    assert abs(q.grads["scale"][0] - total / math.sqrt(2)) <= 2 ** -23 * total
    q = AffineQuantizer(scale=0.5, zero_point=0, quant_min=0, quant_max=1, learnable=True)
    q(np.array([3.0], np.float32))
    q.backward(np.ones(1, np.float32))
    assert q.grads["scale"].tolist() == float(model_affine_grads(3.0, 1, 0.5, 0, 0, 1, Fraction(1))[1])


def test_observers_update_parameters_in_place_and_per_channel():
    from fxpsim.quant import observers

    q = FakeQuant(min=-1.0, max=1.0, observer="minmax", learnable=True)
    before = q.parameters()["min"]
    q(np.array([-8.0, 7.9375], np.float32))
    assert q.parameters()["min"] is before and before.tolist() == -8.0        # optimizers keep their reference
    # a per-channel observer replaces the single starting value by one per channel
    obs = observers.get({"class_name": "minmax", "config": {"axis": 0}})
    q = FakeQuant(min=-1.0, max=1.0, axis=0, observer=obs)
    x = np.array([[-8.0, 7.9375], [0.0, 31.875]], np.float32)
    y = q(x)
    assert q.min.tolist() == [-8.0, 0.0] and q.max.tolist() == [7.9375, 31.875]
    assert y.tolist() == x.tolist()                                            # on the grid of each channel
    a = AffineQuantizer(observer="minmax", quant_min=0, quant_max=16, learnable=True)
    sc = a.parameters()["scale"]
    a(np.array([-4.0, 0.0, 12.0], np.float32))
    assert a.parameters()["scale"] is sc and sc.tolist() == 1.0


def test_affine_observer_symmetric_flag_reaches_the_observer():
    x = np.array([-4.0, 12.0], np.float32)
    sym = AffineQuantizer(observer="minmax", symmetric=True, quant_min=-8, quant_max=7)
    sym(x)
    asym = AffineQuantizer(observer="minmax", quant_min=-8, quant_max=7)
    asym(x)
    assert sym.zero_point.tolist() == 0 and asym.zero_point.tolist() != 0


def test_narrow_range_reaches_codes_and_gradients():
    # per tensor: [-63.5, 63.5] on codes 1..255 is s = 0.5, z = 128; code = 1 + floor((v + 63.5) / 0.5 + 1/2)
    n = FakeQuant(min=-63.5, max=63.5, narrow_range=True)
    x = np.array([-100.0, 0.25, 1.0, 63.375], np.float32)
    want = [1 + int(((model_fake_quant(v, 0.5, 128, 1, 255)[0] + Fraction(127, 2)) / Fraction(1, 2))) for v in x.tolist()]
    assert n.integer_form(x).codes.tolist() == want == [1, 129, 130, 255]
    # per channel: 63.375 and -63.625 lie inside / outside [-63.5, 63.5] (the wide-range grid would be
    # [-63.75, 63.25] with s = 127/255: the opposite)
    q = FakeQuant(min=[-63.5, 0.0], max=[63.5, 127.0], axis=0, narrow_range=True)
    xc = np.array([[63.375, -63.625], [127.0, 0.0]], np.float32)
    q(xc)
    assert q.backward(np.ones_like(xc)).tolist() == [[1.0, 0.0], [1.0, 1.0]]


def test_learnable_zero_points_round_half_to_even():
    # a learnable (float) zero point is rounded half to even (std::nearbyint) before use
    q = AffineQuantizer(scale=[1.0, 1.0], zero_point=[2.5, 3.5], axis=0, learnable=True)
    x = np.array([[0.0, 1.0], [0.0, 1.0]], np.float32)
    form = q.integer_form(x)
    assert form.zero_point.ravel().tolist() == [2, 4] and form.codes.tolist() == [[2, 3], [4, 5]]
    assert q.zero_point.dtype == np.float32 and q.zero_point.tolist() == [2.5, 3.5]
