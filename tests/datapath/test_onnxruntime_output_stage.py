"""The output stage and per-channel helpers of onnxruntime's plan steps (:mod:`fxpsim.datapath.onnxruntime.mlas`):
``requantize_output_plan`` and ``quantize_linear_plan`` on large inputs (long rows, one ``np.clip`` pass) and small
ones, against float64 / Python models, and ``channel_plan`` against per-element Python operations."""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.datapath.onnxruntime import mlas


@pytest.mark.parametrize("shape, dtype, acc_dtype", [
    ((256, 6, 6, 16), np.int8, np.float32), ((64, 4, 4, 48), np.uint8, np.int64), ((3, 1000, 3), np.int8, np.int64),
    ((5, 7, 16), np.uint8, np.float32), ((4096, 1), np.int16, np.int64), ((2, 4096 * 3, 5), np.int32, np.int64)])
def test_requantize_output_plan_against_a_float64_model(shape, dtype, acc_dtype):
    """MlasRequantizeOutput per channel on large and small accumulators (the long-row product and np.clip paths
    and the short ones): float32(acc) * m rounded once (the float64 product of two float32 values is exact),
    clamped, rounded half to even, plus z, computed here in float64 and Python ints."""
    rng = np.random.default_rng(shape[-1])
    m = (rng.uniform(0.5, 2.0, shape[-1]) * 2.0 ** rng.integers(-14, -6, shape[-1])).astype(np.float32)
    acc = rng.integers(-(1 << 26), 1 << 26, shape)
    acc.reshape(-1)[:4] = (-(1 << 31), (1 << 31) - 1, 16777217, -16777219)      # beyond 2^24: float32 rounds
    acc = acc.astype(np.int64)
    z = 7 if np.dtype(dtype).kind == "u" else -3
    info = np.iinfo(dtype)
    p = (acc.astype(np.float32).astype(np.float64) * m.astype(np.float64)).astype(np.float32).astype(np.float64)
    want = (np.rint(np.clip(p, float(np.float32(int(info.min) - z)), float(np.float32(int(info.max) - z))))
            .astype(np.int64) + z).clip(int(info.min), int(info.max)).astype(dtype)
    got = mlas.requantize_output_plan(m, z, dtype)(acc.astype(acc_dtype))    # (float32: the same rounded values)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, want)


@pytest.mark.parametrize("shape, dtype, per_channel", [
    ((256, 6, 6, 3), np.int8, False), ((64, 8, 8, 16), np.uint8, True), ((3, 5, 7), np.int8, True),
    ((10, 10), np.uint8, False), ((70, 70), np.int16, False)])
def test_quantize_linear_plan_against_a_float64_model(shape, dtype, per_channel):
    """MlasQuantizeLinear on large (np.clip, then NaN to the lower bound) and small (fmax / fmin) inputs, NaN and
    +-inf included: x / s rounded once to float32 (the float64 quotient of two float32 values rounded to float32 is
    the correctly rounded one: 53 >= 2 * 24 + 2), NaN to qmin - z, clamped, rounded half to even, plus z."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 200).astype(np.float32)
    x.reshape(-1)[:5] = (np.nan, np.inf, -np.inf, 2.5, -3.5)
    x.reshape(-1)[-1] = np.nan
    c = shape[-1] if per_channel else 1
    s = rng.uniform(0.3, 3.0, c).astype(np.float32)
    info = np.iinfo(dtype)
    z = rng.integers(int(info.min) // 2, int(info.max) // 2 + 1, c)
    with np.errstate(all="ignore"):
        v = (x.astype(np.float64) / s.astype(np.float64)).astype(np.float32).astype(np.float64)
    lo, hi = (int(info.min) - z).astype(np.float64), (int(info.max) - z).astype(np.float64)
    v = np.where(np.isnan(v), lo, np.minimum(np.maximum(v, lo), hi))
    want = (np.rint(v).astype(np.int64) + z).astype(dtype)
    got = mlas.quantize_linear_plan(s if per_channel else s[0], z if per_channel else z[0], dtype)(x)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, want)


@pytest.mark.parametrize("shape, dtype", [((256, 6, 6, 16), np.float32), ((50, 7, 48), np.int64),
                                          ((4096, 3), np.float32), ((9, 5), np.float32), ((128, 64), np.int64)])
def test_channel_plan_is_the_broadcast_operation(shape, dtype):
    """The per-channel add / multiply in long rows equals each element's own operation with its channel's value
    (Python numbers per element), with ``out`` the input itself, on a non-contiguous input, and with a dtype."""
    rng = np.random.default_rng(shape[-1])
    a = (rng.standard_normal(shape) * 1000).astype(dtype)
    v = (rng.standard_normal(shape[-1]) * 100).astype(dtype)
    flat, c = a.reshape(-1), shape[-1]
    for ufunc, op in ((np.add, lambda p, q: p + q), (np.multiply, lambda p, q: p * q)):
        f = mlas.channel_plan(ufunc, v)
        want = np.array([op(flat[i], v[i % c]) for i in range(flat.size)], dtype).reshape(shape)
        assert np.array_equal(f(a), want)
        b = a.copy()
        assert f(b, out=b) is not None and np.array_equal(b, want)
        strided = np.repeat(a, 2, axis=0)[::2]
        assert np.array_equal(f(strided), want)
    if dtype == np.int64:
        got = mlas.channel_plan(np.multiply, v.astype(np.float32))(a, dtype=np.float32)
        want = (a.astype(np.float32).astype(np.float64) * v.astype(np.float32).astype(np.float64)).astype(np.float32)
        assert got.dtype == np.float32 and np.array_equal(got, want)
