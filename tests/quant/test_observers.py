"""Range observers: hand-computed running statistics, PyTorch's qparams formulas, brute-force
MSE search, per-channel axes, freeze, configs, feeding the quantizers, and bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fxpsim.quant.observers as obs
import fxpsim.quant.registry as qz
from fxpsim.quant.fake_quant import fake_quant_with_min_max_vars
from fxpsim.quant.observers import MinMaxObserver, MovingAverageObserver, MSEObserver, PercentileObserver

F32 = np.float32


def test_minmax_running_extremes_per_tensor_and_per_channel():
    o = MinMaxObserver()
    o.update(np.array([1.0, -2.0, 3.0])).update(np.array([-5.0, 0.5]))
    assert tuple(map(float, o.min_max())) == (-5.0, 3.0)
    o = MinMaxObserver(axis=0)
    o.update(np.array([[1.0, 2.0], [-3.0, 4.0]])).update(np.array([[0.0, 9.0], [-1.0, -8.0]]))
    lo, hi = o.min_max()
    assert lo.tolist() == [0.0, -8.0] and hi.tolist() == [9.0, 4.0]


def test_moving_average_is_tf_contrib_ema():
    o = MovingAverageObserver(decay=0.9)             # starts at TF's -6 / 6
    o.update(np.array([-1.0, 2.0]))
    lo, hi = o.min_max()
    assert float(lo) == pytest.approx(-6 - 0.1 * (-6 + 1)) and float(hi) == pytest.approx(6 - 0.1 * (6 - 2))
    o.update(np.array([0.5, 1.0]))                    # batch min clipped to 0 (zero stays in range)
    assert float(o.min_max()[0]) == pytest.approx(-5.5 - 0.1 * (-5.5 - 0.0))
    o = MovingAverageObserver(decay=0.5, init_min=None, init_max=None)
    o.update(np.array([-2.0, 4.0])).update(np.array([-4.0, 2.0]))
    assert tuple(map(float, o.min_max())) == (-3.0, 3.0)
    assert MovingAverageObserver().decay == 0.999


def test_percentile_mean_of_batch_percentiles():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=1000), rng.normal(size=1000) * 2
    o = PercentileObserver(99.0).update(a).update(b)
    lo, hi = o.min_max()
    assert float(hi) == pytest.approx((np.percentile(a, 99) + np.percentile(b, 99)) / 2)
    assert float(lo) == pytest.approx((np.percentile(a, 1) + np.percentile(b, 1)) / 2)


def test_mse_observer_matches_brute_force_and_clips_outliers():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(size=2000), [40.0]])
    o = MSEObserver(num_bits=4, grid=50).update(x)
    lo, hi = map(float, o.min_max())
    assert hi < 40.0                                             # the outlier is clipped
    best = None
    for k in range(1, 51):
        c_lo, c_hi = min(x.min(), 0) * k / 50, max(x.max(), 0) * k / 50
        s = (c_hi - c_lo) / 15
        z = np.clip(np.rint(-c_lo / s), 0, 15)
        err = np.mean((x - (np.clip(np.rint(x / s) + z, 0, 15) - z) * s) ** 2)
        if best is None or err < best[0]:
            best = (err, c_lo, c_hi)
    assert (lo, hi) == pytest.approx(best[1:])


def test_scale_zero_point_as_pytorch():
    o = MinMaxObserver().update(np.array([-1.0, 3.0]))
    scale, zp = o.scale_zero_point(0, 255)
    assert float(scale) == pytest.approx(4 / 255) and int(zp) == 64          # 0 - rne(-1 / (4/255)) = 64
    scale, zp = o.scale_zero_point(-128, 127, symmetric=True)
    assert float(scale) == pytest.approx(3 / 127.5) and int(zp) == 0
    scale, zp = o.scale_zero_point(0, 255, symmetric=True)
    assert int(zp) == 128
    o = MinMaxObserver().update(np.zeros(3))
    assert float(o.scale_zero_point(0, 255)[0]) == np.finfo(F32).eps


def test_freeze_and_config_round_trip():
    o = MinMaxObserver(axis=1).update(np.array([[1.0, -2.0]]))
    o.freeze().update(np.array([[100.0, -100.0]]))
    assert o.min_max()[1].tolist() == [1.0, -2.0]
    o2 = obs.get_observer(json.loads(json.dumps(o.serialize())))
    assert o2.frozen and o2.axis == 1 and o2.min_max()[0].tolist() == [1.0, -2.0]
    o2.unfreeze().update(np.array([[3.0, 0.0]]))
    assert o2.min_max()[1].tolist() == [3.0, 0.0]
    assert isinstance(obs.get_observer({"class_name": "MovingAverageObserver", "decay": 0.5}), MovingAverageObserver)


def test_observer_feeds_fake_quant_in_training_only():
    q = qz.FakeQuant(observer="minmax")
    x = np.array([-1.0, 0.5, 2.0], F32)
    np.testing.assert_array_equal(q(x), fake_quant_with_min_max_vars(x, -1.0, 2.0))
    q.eval()
    q(np.array([10.0], F32))
    assert (float(q.min), float(q.max)) == (-1.0, 2.0)
    a = qz.AffineQuantizer(observer={"class_name": "minmax", "axis": 1}, axis=1, num_bits=8, signed=False)
    a(np.array([[-1.0, 0.0], [3.0, 2.0]], F32))
    assert a.scale.tolist() == pytest.approx([4 / 255, 2 / 255]) and a.zero_point.tolist() == [64, 0]
    with pytest.raises(ValueError, match="axis"):
        qz.FakeQuant(observer="minmax", axis=0)


@pytest.mark.parametrize("call, error, match", [
    (lambda: MinMaxObserver().update(np.array([1.0, np.nan])), ValueError, "NaN"),
    (lambda: MinMaxObserver().update(np.zeros(0)), ValueError, "empty"),
    (lambda: MinMaxObserver().update(np.array([1, 2])), TypeError, "floating"),
    (lambda: MinMaxObserver(axis=3).update(np.zeros((2, 2))), ValueError, "axis"),
    (lambda: MinMaxObserver(axis=0).update(np.zeros((2, 2))).update(np.zeros((3, 2))), ValueError, "channels"),
    (lambda: MinMaxObserver().min_max(), RuntimeError, "no data"),
    (lambda: MovingAverageObserver(decay=1.0), ValueError, "decay"),
    (lambda: PercentileObserver(percentile=20), ValueError, "percentile"),
    (lambda: MSEObserver(num_bits=1), ValueError, "num_bits"),
    (lambda: obs.get_observer("kmeans"), ValueError, "unknown observer"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_inputs_not_mutated():
    x = np.array([[3.0, -1.0], [0.5, 2.0]])
    x.flags.writeable = False
    for o in (MinMaxObserver(axis=0), MovingAverageObserver(), PercentileObserver(), MSEObserver(axis=1)):
        o.update(x)
    np.testing.assert_array_equal(x, [[3.0, -1.0], [0.5, 2.0]])
