"""FloatQuantizer / BlockQuantizer against ml_dtypes (the casts) and an independent OCP MX model, their
straight-through gradients, configs, and QAT on the shipped digits with FP8 and MXFP4 (the schemes)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fxpsim.quant import registry
from fxpsim.quant.float_quantizers import BlockQuantizer, FloatQuantizer

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml-dtypes (the test extra) is the reference cast")

CASTS = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0),
         "e4m3fnuz": (ml_dtypes.float8_e4m3fnuz, 240.0), "bfloat16": (ml_dtypes.bfloat16, 3.3895313892515355e38)}


def _cast(x, fmt):
    """ml_dtypes' round-to-nearest-even cast, saturated first (its overflow is NaN / Inf)."""
    dt, mx = CASTS[fmt]
    return np.clip(x, -mx, mx).astype(dt).astype(np.float64)


@pytest.mark.parametrize("fmt", list(CASTS))
def test_unscaled_forward_is_the_saturating_cast_and_the_gradient_masks_saturation(fmt):
    rng = np.random.default_rng(1)
    mx = CASTS[fmt][1]
    x = np.concatenate([rng.normal(0, 1, 3000) * 2.0 ** rng.integers(-20, 18, 3000), [mx, -mx, 2 * mx, 0.0]])
    q = FloatQuantizer(fmt)
    np.testing.assert_array_equal(q(x), _cast(x, fmt))
    dx = q.backward(np.full_like(x, 3.0))
    np.testing.assert_array_equal(dx, np.where(np.abs(x) <= mx, 3.0, 0.0))
    ste = FloatQuantizer(fmt, gradient="ste")
    np.testing.assert_array_equal(ste(x), _cast(x, fmt))
    np.testing.assert_array_equal(ste.backward(np.full_like(x, 3.0)), np.full_like(x, 3.0))   # unmasked


def test_channel_scale_is_the_smallest_power_of_two_that_fits_each_channel():
    rng = np.random.default_rng(2)
    w = rng.normal(0, 1, (3, 3, 4, 6)) * np.array([1e-3, 0.1, 1, 30, 900, 2e4])
    w[..., 0] = 0.0                                                 # an all-zero channel: scale 1
    q = FloatQuantizer("e4m3", scale="channel", axis=-1)
    y = q(w)
    for c in range(6):
        amax = np.abs(w[..., c]).max()
        e = 0 if amax == 0 else math.ceil(math.log2(amax / 448.0))  # the docstring's rule, by hand
        if amax:
            assert 448.0 * 2.0 ** e >= amax > 448.0 * 2.0 ** (e - 1)
        np.testing.assert_array_equal(y[..., c], _cast(w[..., c] / 2.0 ** e, "e4m3") * 2.0 ** e)
    assert np.all(q.backward(np.ones_like(w)) == 1.0)               # nothing saturates after scaling


def _mx_reference(x, elem_max, emax_elem, cast, block=32):
    """OCP MX v1.0 section 6.3, by hand: per block X = 2^(floor(log2 amax) - emax_elem), elements cast(x / X)
    saturated, value X * element (blocks along the last axis)."""
    out = np.empty_like(x)
    for i in range(0, x.shape[-1], block):
        v = x[..., i:i + block]
        amax = np.abs(v).max(axis=-1, keepdims=True)
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - emax_elem, 0)
        X = 2.0 ** e
        out[..., i:i + block] = cast(np.clip(v / X, -elem_max, elem_max)) * X
    return out


@pytest.mark.parametrize("fmt,elem_max,emax,cast", [
    ("mxfp8_e4m3", 448.0, 8, lambda v: v.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)),
    ("mxfp8_e5m2", 57344.0, 15, lambda v: v.astype(ml_dtypes.float8_e5m2).astype(np.float64)),
    ("mxfp4", 6.0, 2, lambda v: v.astype(ml_dtypes.float4_e2m1fn).astype(np.float64)),
])
def test_block_quantizer_is_the_ocp_mx_rule(fmt, elem_max, emax, cast):
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (5, 96)) * 2.0 ** rng.integers(-30, 30, (5, 1))
    np.testing.assert_array_equal(BlockQuantizer(fmt)(x), _mx_reference(x, elem_max, emax, cast))
    short = x[:, :40]                                               # 32 + a short block of 8 (zero-padded)
    np.testing.assert_array_equal(BlockQuantizer(fmt)(short), np.concatenate(
        [_mx_reference(short[:, :32], elem_max, emax, cast), _mx_reference(short[:, 32:], elem_max, emax, cast)],
        axis=1))
    q = BlockQuantizer(fmt, axis=0)                                 # another axis: the same rule transposed
    np.testing.assert_array_equal(q(x.T), _mx_reference(x, elem_max, emax, cast).T)
    np.testing.assert_array_equal(q.backward(np.ones_like(x.T)), np.ones_like(x.T))


def test_configs_registry_and_bad_arguments():
    for q in (FloatQuantizer("e5m2", scale="tensor"), BlockQuantizer("nvfp4"), FloatQuantizer("e2m1", "toward_zero")):
        again = registry.deserialize(registry.serialize(q))
        x = np.linspace(-10, 10, 64).reshape(4, 16)
        np.testing.assert_array_equal(again(x), q(x))
    assert isinstance(registry.get({"class_name": "float", "fmt": "e4m3"}), FloatQuantizer)
    assert isinstance(registry.get("mxfp8_e4m3"), BlockQuantizer) and registry.get("nvfp4").fmt.name == "nvfp4"
    assert registry.get("float8_e4m3fn").fmt.max_finite == 448.0 and registry.get("bfloat16").fmt.man_bits == 7
    with pytest.raises(ValueError, match="unknown quantizer"):
        registry.get("int8")
    with pytest.raises(ValueError, match="FloatQuantizer"):
        FloatQuantizer("fp-bogus")
    with pytest.raises(ValueError, match="scale"):
        FloatQuantizer("e4m3", scale="row")
    with pytest.raises(ValueError, match="NaN"):
        FloatQuantizer("e4m3")(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="BlockQuantizer"):
        BlockQuantizer("mxfp3")
    with pytest.raises(NotImplementedError):
        FloatQuantizer("e4m3").integer_form(np.ones(3))


@pytest.mark.parametrize("scheme", ["fp8", "mxfp4"])
def test_qat_on_digits_with_float_and_block_formats(scheme):
    """The shipped digits, the small CNN trained through the quantizers: within 2 points of float."""
    from fxpsim.nn import quantization_scheme, small_cnn
    from fxpsim.nn.datasets import load_digits
    from fxpsim.nn.train import Adam, fit, predict
    x, y = load_digits("train", seed=0)
    xt, yt = load_digits("test", seed=0)
    acc = {}
    for name in ("float", scheme):
        m = small_cnn((8, 8, 1), seed=0, **quantization_scheme(name))
        fit(m, (x, y), 6, 32, Adam(3e-3), seed=0, progress=False)
        acc[name] = float(np.mean(predict(m, xt).argmax(1) == yt))
    assert acc[scheme] >= acc["float"] - 0.01 and acc[scheme] > 0.9, acc


def test_amax_history_scales_by_the_largest_recent_amax():
    """scale="tensor", amax_history=3: the exponent follows max(amax of the last 3 training passes)."""
    q = FloatQuantizer("e4m3", scale="tensor", amax_history=3)
    amaxes = [1000.0, 10.0, 20.0, 30.0, 5.0]
    for i, amax in enumerate(amaxes):
        x = np.array([amax, amax / 3, -amax / 7])
        y = q(x)
        used = max(amaxes[max(0, i - 2):i + 1])
        e = math.ceil(math.log2(used / 448.0))
        np.testing.assert_array_equal(y, _cast(x / 2.0 ** e, "e4m3") * 2.0 ** e)
    q.eval()
    x = np.array([3.0, 1.0])
    e = math.ceil(math.log2(max(amaxes[-3:]) / 448.0))
    np.testing.assert_array_equal(q(x), _cast(x / 2.0 ** e, "e4m3") * 2.0 ** e)     # eval: the history, unchanged
    with pytest.raises(ValueError, match="amax_history"):
        FloatQuantizer("e4m3", scale="channel", amax_history=4)
