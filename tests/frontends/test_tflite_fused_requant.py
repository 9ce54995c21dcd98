"""``kernels="builtin"`` / ``"xnnpack"`` imports: their int8 MAC nodes requantize inside the fused int8 kernel
(fxpsim.frontends.tflite.mac_ops._fused_requantizer). Every output, intermediate and trace field equals the
numpy implementation of the same kernel set's requantization run on the kernel's accumulators (the path these
nodes took before), on the graph's own datapath and on a 16-bit saturating one (overflows and clips counted),
compiled plan and node by node. (That numpy path is checked against LiteRT itself in test_tflite_import.py.)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fxpsim.datapath import conv_int8
from fxpsim.frontends.tflite import mac_ops

MODEL = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "mobilenet_v2_035_48.tflite"


def _same(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif a is None or b is None:
        assert a is None and b is None, where
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
        assert np.asarray(a).dtype == np.asarray(b).dtype, where
    else:
        assert a == b, where


@pytest.mark.skipif(not MODEL.exists(), reason="benchmark model missing")
@pytest.mark.skipif(not conv_int8.available(), reason="the _conv_int8 extension is not built")
@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_fused_output_stage_equals_the_numpy_kernel_set(kernels, monkeypatch):
    import fxpsim
    graph = fxpsim.import_tflite(MODEL, kernels=kernels)
    x = np.clip(np.random.default_rng(1).normal(0.0, 60.0, (2, 48, 48, 3)), -128, 127).astype(np.int8)
    native = graph.default_datapath
    narrow = dataclasses.replace(native, accumulator_bits=16, accumulator_overflow="saturate")
    calls = []
    orig = mac_ops._own_outputs

    def counting(*a, **k):
        calls.append(a[8] is not None)          # above: the kernel counted its output stage's clips
        return orig(*a, **k)
    monkeypatch.setattr(mac_ops, "_own_outputs", counting)
    for dp in (native, narrow):
        for plan in (True, False):
            calls.clear()
            fast = graph.run(x, dp, trace=True, keep=True, plan=plan)
            assert calls == [True] * 53, "every CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED requantized in the kernel"
            with pytest.MonkeyPatch.context() as m:
                m.setattr(mac_ops, "_fused_requantizer", lambda *a: None)
                slow = graph.run(x, dp, trace=True, keep=True, plan=plan)
            _same(fast[0], slow[0], "out")
            _same(fast[2], slow[2], "kept")
            _same(fast[1], slow[1], "trace")
            if dp is narrow:
                traces = [t for t in fast[1].values() if t and "clipped" in t]
                assert sum(t["overflows"] for t in traces) > 0
                # XNNPACK clamps to [-128, 127] before it counts: the model's ReLU6 bounds (127) clip nothing
                assert (sum(t["clipped"] for t in traces) > 0) == (kernels == "builtin")
            np.testing.assert_array_equal(graph.run(x, dp, plan=plan), slow[0])
