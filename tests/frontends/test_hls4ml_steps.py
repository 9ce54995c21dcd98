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
    return [n.op for n, step, _, _ in plan.steps if "untraced_step" in step.__qualname__]


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


# ----------------------------------------------------------------------------- the table MAC alone
def _ref_sums(codes, table, lo_code, bias, lo, hi, mode, word):
    """hls4ml's fitted sequential sums in Python integers: s = A(... A(b + T[k, x_k]) ...)."""
    out = []
    for row in codes.tolist():
        sums = []
        for j, b in enumerate(bias.tolist()):
            s = b
            for k, v in enumerate(row):
                s += int(table[k, v - lo_code, j])
                if mode == "wrap":
                    s = (s - lo) % (1 << word) + lo
                elif mode == "zero" and not lo <= s <= hi:
                    s = 0
                elif mode in ("sat", "sym"):
                    s = min(max(s, -hi if mode == "sym" else lo), hi)
            sums.append(s)
        out.append(sums)
    return np.array(out, np.int64)


@pytest.mark.parametrize("overflow,mode", [("AP_SAT", "sat"), ("AP_SAT_SYM", "sym"), ("AP_SAT_ZERO", "zero"),
                                           ("AP_WRAP", "wrap")])
@pytest.mark.parametrize("use_kernel", [True, False])
def test_table_mac_equals_python_integer_sums(overflow, mode, use_kernel):
    from fxpsim.datapath.hls4ml import parse_ap_type
    from fxpsim.datapath.hls4ml.table_mac import TableMac
    accum_t = parse_ap_type(f"ap_fixed<8,8,AP_TRN,{overflow}>")
    rng = np.random.default_rng(3)
    k, v, n = 9, 11, 5
    table = rng.integers(-40, 41, (k, v, n))
    bias = rng.integers(-128, 128, n)
    codes = rng.integers(-5, 6, (40, k))
    codes[0] = 5
    mac = TableMac(table, (-5, 5), bias, accum_t, use_kernel=use_kernel)
    assert mac.mode == ("wrap" if mode == "wrap" else "fit")
    want = _ref_sums(codes, table, -5, bias, -128, 127, mode, 8)
    np.testing.assert_array_equal(mac(codes), want)
    # a table whose sums cannot leave the range: the plain sum
    small = TableMac(table // 40, (-5, 5), bias // 4, accum_t, use_kernel=use_kernel)
    assert small.mode == "exact"
    np.testing.assert_array_equal(small(codes), _ref_sums(codes, table // 40, -5, bias // 4, -128, 127, mode, 8))


@pytest.mark.parametrize("word, narrow", [(12, True), (30, True), (31, False), (32, False)])
@pytest.mark.parametrize("overflow,mode", [("AP_SAT", "sat"), ("AP_SAT_ZERO", "zero"), ("AP_SAT_SYM", "sym")])
def test_table_mac_int32_and_int64_loops_equal_python_integer_sums(word, narrow, overflow, mode):
    """The kernel's int32 loop (every value below 2^29: accumulators of at most 30 bits) and its int64 one, on
    an odd number of rows (the two-row loop's tail), 70 outputs (two blocks of at most 64) and 3 (a short
    block), with sums that leave the range both ways: Python integers."""
    from fxpsim.datapath.hls4ml import parse_ap_type
    from fxpsim.datapath.hls4ml.table_mac import TableMac
    accum_t = parse_ap_type(f"ap_fixed<{word},{word},AP_TRN,{overflow}>")
    lo, hi = -(1 << (word - 1)), (1 << (word - 1)) - 1
    rng = np.random.default_rng(word)
    for n in (70, 3):
        k, v = 7, 6
        table = rng.integers(lo // 3, hi // 3 + 1, (k, v, n))
        bias = rng.integers(lo // 2, hi // 2 + 1, n)
        codes = rng.integers(0, v, (41, k))
        mac = TableMac(table, (0, v - 1), bias, accum_t)
        assert mac.mode == "fit" and mac.narrow == narrow
        np.testing.assert_array_equal(mac(codes), _ref_sums(codes, table, 0, bias, lo, hi, mode, word))
        exact = TableMac(table // (4 * k), (0, v - 1), bias // 4, accum_t)
        assert exact.mode == "exact"
        np.testing.assert_array_equal(exact(codes), _ref_sums(codes, table // (4 * k), 0, bias // 4, lo, hi, mode,
                                                              word))


def test_table_mac_refuses_what_it_does_not_model():
    from fxpsim.datapath.hls4ml import parse_ap_type
    from fxpsim.datapath.hls4ml.table_mac import TableMac
    table = np.zeros((2, 3, 4), np.int64)
    with pytest.raises(ValueError, match="not modelled"):
        TableMac(table, (0, 2), np.zeros(4, np.int64), parse_ap_type("ap_fixed<8,8,AP_TRN,AP_WRAP,2>"))
    mac = TableMac(table, (0, 2), np.zeros(4, np.int64), parse_ap_type("ap_fixed<8,8,AP_TRN,AP_SAT>"))
    with pytest.raises(ValueError, match="outside the table"):
        mac(np.array([[0, 3]]))
    with pytest.raises(ValueError, match="outside the table"):
        mac(np.array([[-1, 0]]))


def test_default_datapath_follows_every_meta_edit():
    _, _, g = _graph("rnd_sat")
    assert g.default_datapath is g.default_datapath                  # built once
    assert g.default_datapath.accumulator_bits == 64
    g.meta["datapath"]["accumulator_bits"] = 40                      # a nested edit
    assert g.default_datapath.accumulator_bits == 40
    g.meta = {**g.meta, "datapath": {}}                              # a new meta: the exact datapath
    from fxpsim.graph.datapath_settings import EXACT_DATAPATH
    assert g.default_datapath == EXACT_DATAPATH
