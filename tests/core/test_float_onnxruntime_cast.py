"""fxpsim's float8 encoder against onnxruntime's ``Cast`` (opset 19) live, on the four ONNX float8 types.

``saturate=1`` (the default) is ``overflow="saturate"``; ``saturate=0`` is ``overflow="nan"`` on the fnuz types.
On FLOAT8E4M3FN and FLOAT8E5M2 with ``saturate=0``, onnxruntime's CPU conversion departs from the rule
(round to nearest even, then overflow to NaN / Inf) in one band above the largest finite value: it gives 448
(not NaN) for E4M3FN magnitudes in [480, 496) (yet NaN in (464, 480)) and NaN (not Inf) for E5M2 magnitudes in
[61440, 65536). The test checks every other value bit for bit and that the
differences are exactly that band (found by this test; fxpsim follows the ONNX specification there).
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.core import float_codec

onnx = pytest.importorskip("onnx", reason="the onnx extra (pip install -e '.[onnx]') builds the Cast model")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime (the test extra) is the peer")
from onnx import TensorProto, helper  # noqa: E402

TYPES = {"e4m3": TensorProto.FLOAT8E4M3FN, "e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
         "e5m2": TensorProto.FLOAT8E5M2, "e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ}
#: (format, saturate) -> the magnitudes where onnxruntime departs from the specification
BAND = {("e4m3", 0): (480.0, 496.0), ("e5m2", 0): (61440.0, 65536.0)}


def _inputs():
    rng = np.random.default_rng(19)
    x = rng.normal(0, 1, 6000) * 2.0 ** rng.integers(-24, 20, 6000)
    edges = [np.inf, -np.inf, np.nan, 0.0, -0.0, 240, 248, 256, 448, 464, 465, 480, 511, 512, 57344, 61440, 61441,
             65535, 65536, 1e30, 2.0 ** -9, 2.0 ** -10, 2.0 ** -17, 2.0 ** -18, 2.0 ** -19, 3 * 2.0 ** -11]
    dense = np.concatenate([np.linspace(200, 600, 801), np.linspace(50000, 70000, 801)])
    return np.concatenate([x, edges, -np.array(edges), dense, -dense]).astype(np.float32)


def _ort_cast(x, to, saturate):
    """onnxruntime: float32 -> float8 (Cast, saturate) -> float32 (exact)."""
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate),
                           helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)], "cast",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("fmt", list(TYPES))
def test_float8_encode_matches_onnxruntime_cast(fmt, saturate):
    x = _inputs()
    want = _ort_cast(x, TYPES[fmt], saturate)
    overflow = "saturate" if saturate else ("nan" if fmt != "e5m2" else "inf")
    got = float_codec.decode(float_codec.encode(x.astype(np.float64), fmt, overflow=overflow).bits, fmt)
    same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    band = BAND.get((fmt, saturate))
    inside = np.zeros(x.shape, bool) if band is None else (np.abs(x) >= band[0]) & (np.abs(x) < band[1])
    assert same[~inside].all(), [(float(v), float(w), float(g)) for v, w, g in
                                 zip(x[~same & ~inside][:5], want[~same & ~inside][:5], got[~same & ~inside][:5])]
    if band is not None:
        assert inside.sum() > 30 and not same[inside].any()       # the documented difference, all of it
        expect = 448.0 if fmt == "e4m3" else np.nan
        np.testing.assert_array_equal(np.abs(want[inside]), expect)
