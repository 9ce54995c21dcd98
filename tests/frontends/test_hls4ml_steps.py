"""The hls4ml ops' compiled-plan steps (``fxpsim/frontends/hls4ml/steps.py``: product tables, code tables):
through the plan, every layer of the committed fixtures equals hls4ml's own C simulation
(``tests/vectors/hls4ml``, made by hls4ml 1.3.0 with g++) and every tensor equals the node-by-node run (the
ops' ``run``, the path before the steps), for every accumulator overflow and quantization mode."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fxpsim.frontends.hls4ml import Hls4mlModel
from fxpsim.graph.plan import feeds_of, plan_for

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "hls4ml"
CONFIGS = ("trn_wrap", "narrow_wrap", "rnd_sat", "rnd_sat2", "cnn_narrow_wrap", "cnn_rnd_sat")


def _graph(name, edit=None):
    d = np.load(VECTORS / f"{name}.npz", allow_pickle=False)
    layers = json.loads(str(d["layers"]))
    if edit:
        layers = [edit(dict(r)) for r in layers]
    weights = {r["name"]: {"weight": d[f"w_{r['name']}"], "bias": d[f"b_{r['name']}"]}
               for r in layers if r["class"] in ("Dense", "Conv2D")}
    model = Hls4mlModel.from_layers(layers, weights)
    shape = d["x"].shape[1:]
    return d, layers, model.to_graph(shape)


def _prepared(graph, x):
    plan = plan_for(graph, graph.default_datapath, feeds_of(graph, x))
    return [n.op for n, step, _, _ in plan.steps if "_with_fallback" in step.__qualname__]


@pytest.mark.parametrize("name", CONFIGS)
def test_plan_reproduces_hls4ml_csim_every_layer(name):
    d, layers, g = _graph(name)
    x = d["x"].astype(np.float32)
    y, _, kept = g.run(x, keep=True)
    assert {"hls4ml_dense"} <= set(_prepared(g, x))
    traced = [r["name"] for r in layers if f"y_{r['name']}" in d.files]
    assert len(traced) == 3
    for lname in traced:
        got = g.tensors[lname].dequantize(kept[lname])
        np.testing.assert_array_equal(got, d[f"y_{lname}"].reshape(got.shape), err_msg=f"{name}: {lname}")
    np.testing.assert_array_equal(g.tensors[g.outputs[0]].dequantize(y), d["y"].reshape(y.shape))


def _accum(overflow, rounding):
    def edit(r):
        if "accum_t" in r:
            w, i = r["accum_t"][len("ap_fixed<"):].rstrip(">").split(",")[:2]
            r["accum_t"] = f"ap_fixed<{w},{i},{rounding},{overflow},0>"
        return r
    return edit


@pytest.mark.parametrize("overflow", ["AP_WRAP", "AP_SAT", "AP_SAT_SYM", "AP_SAT_ZERO"])
@pytest.mark.parametrize("rounding", ["AP_TRN", "AP_RND", "AP_RND_CONV", "AP_TRN_ZERO", "AP_RND_MIN_INF"])
@pytest.mark.parametrize("name", ["rnd_sat", "cnn_narrow_wrap"])
def test_plan_equals_node_by_node_for_every_accumulator_mode(name, overflow, rounding):
    d, _, g = _graph(name, _accum(overflow, rounding))
    rng = np.random.default_rng(7)
    x = np.concatenate([d["x"], rng.uniform(-9, 9, (9,) + d["x"].shape[1:])]).astype(np.float32)
    y, _, fast = g.run(x, keep=True)
    y_ref, traces, ref = g.run(x, keep=True, plan=False, trace=True)
    assert "hls4ml_activation" in _prepared(g, x)
    for t in ref:
        assert fast[t].dtype == ref[t].dtype
        np.testing.assert_array_equal(fast[t], ref[t], err_msg=f"{overflow} {rounding}: {t}")
    np.testing.assert_array_equal(y, y_ref)
    if overflow != "AP_WRAP":          # the saturating path was exercised: some add overflowed
        assert sum(traces[n.name].get("add_overflows", 0) for n in g.nodes) > 0


def test_mac_step_declines_a_table_too_large():
    from fxpsim.frontends.hls4ml import steps
    d, _, g = _graph("rnd_sat")
    node = next(n for n in g.nodes if n.op == "hls4ml_dense")
    shapes = [(4,) + g.tensors[node.inputs[0]].shape]
    assert steps._mac_prepare(g, node, g.default_datapath, shapes) is not None
    old = steps.MAX_TABLE
    try:
        steps.MAX_TABLE = 16
        assert steps._mac_prepare(g, node, g.default_datapath, shapes) is None
    finally:
        steps.MAX_TABLE = old
