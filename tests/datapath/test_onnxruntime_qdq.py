"""``QuantizeLinear`` / ``DequantizeLinear`` of :mod:`fxpsim.datapath.onnxruntime.mlas` against a per-element
Python model of MlasQuantizeLinear (float32 division, NaN to the lower bound, clamp, round half to even, plus
the zero point) and of ``float32(q - z) * s`` (exact integers, then one float32 rounding)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fxpsim.datapath.onnxruntime import mlas

F32 = np.float32


def ref_quantize(x: float, s: float, z: int, lo: int, hi: int) -> int:
    with np.errstate(all="ignore"):
        v = float(F32(x) / F32(s))                    # one float32 division (IEEE)
    if math.isnan(v):
        v = float(lo - z)
    v = min(max(v, float(F32(lo - z))), float(F32(hi - z)))
    return round(v) + z                               # Python's round: half to even


def ref_dequantize(q: int, s: float, z: int) -> float:
    return float(F32(float(q - z)) * F32(s))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_and_dequantize_match_a_python_model(dtype, per_channel):
    rng = np.random.default_rng(int(np.dtype(dtype).itemsize * 10 + per_channel))
    info = np.iinfo(dtype)
    x = (rng.standard_normal((6, 5, 7)) * 400).astype(F32)
    x.flat[::11] = np.round(x.flat[::11]) + 0.5            # ties
    x.flat[3::29], x.flat[4::31], x.flat[5::37] = np.nan, np.inf, -np.inf
    x.flat[6::41] = -0.0
    if per_channel:
        s = rng.uniform(0.01, 4, 5).astype(F32)
        z = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, 5).astype(dtype)
        got = mlas.quantize_linear(x, s, z, dtype, axis=1)
    else:
        s, z = rng.uniform(0.01, 4, 1).astype(F32), rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, 1)
        s, z = s.repeat(5), z.astype(dtype).repeat(5)
        got = mlas.quantize_linear(x, s[0], z[0], dtype)
    assert got.dtype == np.dtype(dtype)
    for idx in np.ndindex(x.shape):
        c = idx[1]
        want = ref_quantize(float(x[idx]), float(s[c]), int(z[c]), int(info.min), int(info.max))
        assert int(got[idx]) == want, (idx, x[idx], s[c], z[c])
    q = rng.integers(info.min, info.max + 1, (6, 5, 7)).astype(dtype)
    dq = mlas.dequantize_linear(q, s, z, axis=1) if per_channel else mlas.dequantize_linear(q, s[0], z[0])
    assert dq.dtype == F32
    for idx in np.ndindex(q.shape):
        c = idx[1]
        assert dq[idx].view(np.int32) == F32(ref_dequantize(int(q[idx]), float(s[c]), int(z[c]))).view(np.int32)
