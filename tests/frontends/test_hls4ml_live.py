"""fxpsim against hls4ml live: Keras models converted by hls4ml, compiled (g++ builds its ap_fixed C++) and run by
its C simulation (``predict()`` / ``trace()``) in the test; :meth:`Hls4mlModel.from_hls_model` reads the compiled
model and reproduces every traced layer bit for bit.

hls4ml, Keras and g++ are not test extras of fxpsim: the tests skip when hls4ml (or keras) is not installed; they
run in a scratch environment with ``pip install tensorflow-cpu hls4ml pytest hypothesis`` (see
``tools/fixtures/hls4ml/README.md``).  The committed C-simulation vectors (``test_hls4ml_vectors.py``) cover the
same arithmetic everywhere.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

hls4ml = pytest.importorskip("hls4ml", reason="hls4ml is not installed (a scratch-environment dependency)")
keras = pytest.importorskip("keras", reason="keras is not installed (hls4ml's Keras frontend needs it)")
if shutil.which("g++") is None:
    pytest.skip("g++ is not installed (hls4ml's compile() needs it)", allow_module_level=True)

from fxpsim.frontends.hls4ml import Hls4mlModel  # noqa: E402


def _compile(model, cfg, path):
    hm = hls4ml.converters.convert_from_keras_model(model, hls_config=cfg, output_dir=str(path), backend="Vitis",
                                                    io_type="io_parallel")
    hm.compile()
    return hm


def _check(hm, x):
    ours, trace = Hls4mlModel.from_hls_model(hm).run(x, trace=True)
    y, theirs = hm.trace(x)
    assert len(theirs) >= 3
    for name, value in theirs.items():
        np.testing.assert_array_equal(trace[name].to_float().reshape(len(x), -1),
                                      np.asarray(value, np.float64).reshape(len(x), -1), err_msg=name)
    np.testing.assert_array_equal(ours.to_float().reshape(len(x), -1), np.asarray(hm.predict(x)).reshape(len(x), -1))


def test_mlp_with_hls4ml_auto_precisions(tmp_path):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((12,), name="x"), keras.layers.Dense(20, name="fc1"),
                              keras.layers.Activation("relu", name="relu1"), keras.layers.Dense(6, name="fc2")])
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name")   # result/weight/bias 'auto'
    for lcfg in cfg["LayerName"].values():
        lcfg["Trace"] = True
    hm = _compile(model, cfg, tmp_path / "mlp")
    x = np.random.default_rng(1).integers(-512, 512, size=(40, 12)) / 64.0   # on ap_fixed<16,6>'s grid
    _check(hm, x)


def test_cnn_with_a_narrow_wrapping_accumulator(tmp_path):
    keras.utils.set_random_seed(8)
    model = keras.Sequential([keras.Input((6, 6, 3), name="x"), keras.layers.Conv2D(5, 3, strides=2, padding="same",
                                                                                     name="conv1"),
                              keras.layers.Activation("relu", name="relu1"), keras.layers.Flatten(name="flat"),
                              keras.layers.Dense(4, name="fc2")])
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name")
    cfg["Model"]["Precision"] = {"default": "ap_fixed<12,4>"}
    for name, lcfg in cfg["LayerName"].items():
        lcfg["Trace"] = True
        if name in ("conv1", "fc2"):
            lcfg["Precision"] = {"weight": "ap_fixed<6,1,AP_RND,AP_SAT>", "bias": "ap_fixed<8,3>",
                                 "accum": "ap_fixed<9,2>", "result": "ap_fixed<10,4,AP_RND_CONV,AP_SAT>"}
        elif name in ("relu1", "flat"):
            lcfg["Precision"] = {"result": "ap_ufixed<6,2,AP_RND>"}
        else:
            lcfg["Precision"] = {"result": "ap_fixed<8,3>"}
    hm = _compile(model, cfg, tmp_path / "cnn")
    x = np.random.default_rng(2).integers(-128, 128, size=(16, 6, 6, 3)) / 32.0
    _check(hm, x)


def test_unwritten_or_unmodelled_models_raise(tmp_path):
    keras.utils.set_random_seed(9)
    model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(3, name="fc1")])
    cfg = hls4ml.utils.config_from_keras_model(model, granularity="name")
    hm = hls4ml.converters.convert_from_keras_model(model, hls_config=cfg, output_dir=str(tmp_path / "a"),
                                                    backend="Vitis", io_type="io_parallel")
    with pytest.raises(ValueError, match="write\\(\\) or compile\\(\\)"):
        Hls4mlModel.from_hls_model(hm)
    cfg["Model"]["Strategy"] = "Resource"
    cfg["LayerName"]["fc1"]["Strategy"] = "Resource"
    hm = hls4ml.converters.convert_from_keras_model(model, hls_config=cfg, output_dir=str(tmp_path / "b"),
                                                    backend="Vitis", io_type="io_parallel")
    hm.write()
    with pytest.raises(ValueError, match="fc1.*strategy 'resource'"):
        Hls4mlModel.from_hls_model(hm)
    with pytest.raises(TypeError, match="ModelGraph"):
        Hls4mlModel.from_hls_model(object())
