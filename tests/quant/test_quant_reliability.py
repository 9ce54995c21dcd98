"""Reliability review of fxpsim.quant: scales PyTorch cannot invert, and configs that must not run code."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fxpsim
from fxpsim.quant import fake_quant as fq
from fxpsim.quant import registry as qz
from fxpsim.quant.base import _CALLABLES

F32 = np.float32


# --------------------------------------------------------------------------- scales
@pytest.mark.parametrize("scale", [1e-45, 2e-39, np.nextafter(fq._MIN_SCALE, F32(0))])
def test_scale_whose_reciprocal_overflows_float32_is_rejected(scale):
    # PyTorch: inv_scale = 1.0f / scale = inf, then 0 * inf = NaN (the result for x = 0 was NaN)
    x = np.zeros(3, F32)
    for call in (lambda: fq.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127),
                 lambda: fq.fake_quantize_per_channel_affine(x[None], [scale] * 3, [0] * 3, 1, -128, 127),
                 lambda: fq.fake_quantize_learnable_per_tensor_affine(x, [scale], [0.0], -128, 127),
                 lambda: fq.fake_quantize_learnable_affine_backward(x, x, [scale], [0.0], -128, 127)):
        with pytest.raises(ValueError, match=r"1\.0f / scale.*inf"):
            call()


def test_smallest_accepted_scale_gives_finite_results():
    # 1 / _MIN_SCALE is the largest finite float32 or just below it
    assert np.isfinite(F32(1) / fq._MIN_SCALE)
    y = fq.fake_quantize_per_tensor_affine(np.array([0.0, 1e-39, -1.0], F32), fq._MIN_SCALE, 0, -128, 127)
    assert y.tolist()[0] == 0.0 and np.isfinite(y).all()


def test_scale_that_rounds_to_zero_in_float32_says_so():
    with pytest.raises(ValueError, match="rounds to 0 in float32"):
        fq.fake_quantize_per_tensor_affine(np.zeros(2, F32), 1e-50, 0, -128, 127)


# --------------------------------------------------------------------------- configs never run code
def _run_isolated(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value", ["os:system", "subprocess:call", "builtins:eval", "fxpsim.quant.fake_quant:np"])
def test_gradient_names_in_configs_are_never_imported(value):
    for spec in ({"class_name": "identity", "config": {"gradient": value}},
                 {"class_name": "fake_quant", "gradient": value},
                 {"class_name": "function", "config": {"fn": value}}):
        with pytest.raises(ValueError, match="not a registered function"):
            qz.get(spec)


def test_a_config_naming_an_unimported_module_does_not_import_it():
    # run in a fresh interpreter: the module named in the config must not appear in sys.modules
    out = _run_isolated(
        "import sys, fxpsim.quant.registry as qz\n"
        "assert 'wave' not in sys.modules\n"
        "try:\n"
        "    qz.get({'class_name': 'identity', 'config': {'gradient': 'wave:open'}})\n"
        "except ValueError as e:\n"
        "    print('ValueError', e)\n"
        "print('imported' if 'wave' in sys.modules else 'not imported')\n")
    assert out.returncode == 0, out.stderr
    assert "ValueError" in out.stdout and "not imported" in out.stdout


def test_registered_gradients_round_trip():
    def rule(x, dy):
        return 0.5 * dy
    try:
        assert fxpsim.register_gradient("test_half", rule) is rule
        q = qz.get("identity", gradient=rule)
        config = qz.serialize(q)
        assert config["config"]["gradient"] == "test_half"
        again = qz.get(config)
        x = np.array([1.0, -2.0], F32)
        again(x)
        np.testing.assert_array_equal(again.backward(np.ones_like(x)), [0.5, 0.5])
        assert "test_half" in fxpsim.registered_gradients()
        with pytest.raises(ValueError, match="already registered"):
            fxpsim.register_gradient("test_half", lambda x, dy: dy)
        fxpsim.register_gradient("test_half", rule)            # the same function again: fine

        @fxpsim.register_gradient("test_decorated")
        def decorated(x, dy):
            return dy
        assert _CALLABLES["test_decorated"] is decorated
        with pytest.raises(ValueError, match="built-in"):
            fxpsim.register_gradient("ste", rule)
        with pytest.raises(ValueError, match="no module-level name"):
            fxpsim.register_gradient(lambda x, dy: dy)
    finally:
        _CALLABLES.pop("test_half", None)
        _CALLABLES.pop("test_decorated", None)


@pytest.mark.parametrize("spec, match", [
    ({"class_name": "fake_quant", "config": {"num_bits": 8, "explode": True}}, "unknown config key"),
    ({"class_name": "affine", "config": []}, "must be a dict"),
    ({"class_name": 7}, "class_name"),
    ({"class_name": "identity", "config": {"gradient": ["ste"]}}, "string or a number"),
])
def test_bad_configs_are_value_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        qz.get(spec)
