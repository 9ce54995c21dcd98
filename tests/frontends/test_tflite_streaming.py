"""Streaming TFLite models (resource variables as graph state) against LiteRT running, step by step.

``tests/vectors/tflite_streaming/ring_conv.tflite`` is made by the TF converter
(``tools/fixtures/tflite_streaming/make_models.py``) from a small streaming model with a ring buffer of the last
2 frames in an int8 resource variable: ``CALL_ONCE`` + init subgraph, ``VAR_HANDLE``, ``READ_VARIABLE``,
``CONCATENATION``, ``STRIDED_SLICE`` on run-time data, ``ASSIGN_VARIABLE``. One LiteRT interpreter per kernel set
keeps its variables across invokes; fxpsim's ``graph.stream`` must give the same output and the same state
(LiteRT's assigned tensor) at every one of 150 steps, for several independent streams.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fxpsim
from litert_interpreter import litert_interpreter  # noqa: E402

pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "vectors" / "tflite_streaming" / "ring_conv.tflite"
KERNELS = ("reference", "builtin", "xnnpack")
STEPS = 150


def test_import_makes_the_variable_graph_state():
    g = fxpsim.import_tflite(MODEL)
    (entry,) = g.meta["state"]
    assert entry["variable"] == "ring_state" and entry["read"] in g.inputs and entry["write"] in g.tensors
    assert g.tensors[entry["read"]].shape == (2, 8)
    assert [n.op for n in g.nodes].count("tflite_strided_slice") == 1
    cov = fxpsim.tflite_coverage(MODEL)
    assert all(cov.imports(k) for k in KERNELS), cov.format()
    assert {r.op for r in cov.rows} >= {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"}


@pytest.mark.parametrize("kernels", KERNELS)
def test_stream_equals_litert_step_by_step(kernels):
    g = fxpsim.import_tflite(MODEL, kernels=kernels)
    (entry,) = g.meta["state"]
    rng = np.random.default_rng(KERNELS.index(kernels))
    n_streams = 3
    frames = rng.integers(-128, 128, (STEPS, n_streams, 1, 8)).astype(np.int8)
    frames[:10] = np.clip(rng.normal(0, 20, frames[:10].shape), -128, 127).astype(np.int8)
    y, states, traces = g.stream(frames, trace=True)
    assert y.shape == (STEPS, n_streams, 4) and states["ring_state"].shape == (STEPS, n_streams, 2, 8)
    for s in range(n_streams):
        it = litert_interpreter(MODEL, kernels)
        din, dout = it.get_input_details()[0], it.get_output_details()[0]
        write_index = g.meta["tflite_tensors"][entry["write"]]
        for t in range(STEPS):
            it.set_tensor(din["index"], frames[t, s][None])
            it.invoke()
            np.testing.assert_array_equal(y[t, s], it.get_tensor(dout["index"])[0], err_msg=f"stream {s} step {t}")
            if kernels != "xnnpack":
                np.testing.assert_array_equal(states["ring_state"][t, s], it.get_tensor(write_index)[0],
                                              err_msg=f"state, stream {s} step {t}")
    # the ring buffer itself, independently: after step t it holds frames t-1 and t (initial codes before)
    init = np.asarray(entry["initial"])
    for t in (0, 1, 2, STEPS - 1):
        want = np.concatenate([init[None].repeat(n_streams, 0), frames[:t + 1, :, 0].transpose(1, 0, 2)], 1)[:, -2:]
        np.testing.assert_array_equal(states["ring_state"][t], want)
    np.testing.assert_array_equal(traces[5]["state"]["ring_state"], states["ring_state"][5])


def test_run_is_one_step_from_the_initial_state():
    g = fxpsim.import_tflite(MODEL)
    x = np.random.default_rng(4).integers(-128, 128, (6, 1, 8)).astype(np.int8)
    y_stream, _ = g.stream(x[None])
    np.testing.assert_array_equal(g.run(x), y_stream[0])
    (entry,) = g.meta["state"]
    given = np.full((6, 2, 8), 7, np.int8)
    y2, st = g.stream(x[None], state={"ring_state": given})
    np.testing.assert_array_equal(y2[0], g.run([x, given]))
    with pytest.raises(ValueError, match="unknown state variable"):
        g.stream(x[None], state={"nope": given})
    with pytest.raises(ValueError, match=r"\(T, N, \.\.\.\)"):
        g.stream(np.zeros((0, 1, 1, 8), np.int8))


@pytest.mark.parametrize("kernels", ["reference", "builtin"])
def test_saved_stateful_graph_streams_the_same(tmp_path, kernels):
    from fxpsim.graph import load_graph
    g = fxpsim.import_tflite(MODEL, kernels=kernels)
    path = g.save(tmp_path / "ring")
    h = load_graph(path)
    assert h.meta["state"] == g.meta["state"]
    frames = np.random.default_rng(9).integers(-128, 128, (40, 2, 1, 8)).astype(np.int8)
    y1, s1 = g.stream(frames)
    y2, s2 = h.stream(frames)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(s1["ring_state"], s2["ring_state"])
