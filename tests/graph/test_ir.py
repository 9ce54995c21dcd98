"""The integer graph: building, running (a residual network through simulate), summary, save/load, errors.

Expected values are computed here independently: a pure-Python integer model of the residual network's MAC
nodes (per-add saturation, gemmlowp requantization from ``tests/reference.py``), worst-case accumulator
bounds summed by hand, and file damage made by hand.
"""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import fxpsim
from fxpsim.graph import IntegerGraph, Node, TensorSpec, load_graph
from fxpsim.graph.ir import Datapath
from reference import ref_mbqm, ref_quantize_multiplier


def _residual_graph(seed: int = 0) -> IntegerGraph:
    """float x[6,6,2] -> quantize -> conv3x3 (relu) -> conv3x3 -> add(skip: first conv) -> avg_pool 2 ->
    reshape -> fully_connected[4]."""
    rng = np.random.default_rng(seed)
    t = [TensorSpec("x", 0, True, (6, 6, 2)),
         TensorSpec("xq", 8, True, (6, 6, 2), 0.02, -3),
         TensorSpec("c1/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64),
                    axis=0, data=rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8)),
         TensorSpec("c1/b", 32, True, data=rng.integers(-3000, 3000, 4)),
         TensorSpec("c1", 8, True, (6, 6, 4), 0.03, -128),
         TensorSpec("c2/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64),
                    axis=0, data=rng.integers(-127, 128, (4, 3, 3, 4)).astype(np.int8)),
         TensorSpec("c2/b", 32, True, data=rng.integers(-3000, 3000, 4)),
         TensorSpec("c2", 8, True, (6, 6, 4), 0.05, 5),
         TensorSpec("sum", 8, True, (6, 6, 4), 0.06, -10),
         TensorSpec("pool", 8, True, (3, 3, 4), 0.06, -10),
         TensorSpec("flat", 8, True, (36,), 0.06, -10),
         TensorSpec("fc/w", 8, True, scale=0.01, zero_point=0, data=rng.integers(-127, 128, (4, 36)).astype(np.int8)),
         TensorSpec("fc/b", 32, True, data=rng.integers(-500, 500, 4)),
         TensorSpec("logits", 8, True, (4,), 0.1, 0)]
    n = [Node("fc", "fully_connected", ["flat", "fc/w", "fc/b"], ["logits"]),   # out of order on purpose
         Node("quantize", "quantize", ["x"], ["xq"]),
         Node("conv1", "conv2d", ["xq", "c1/w", "c1/b"], ["c1"], {"padding": "SAME", "activation": "relu"}),
         Node("conv2", "conv2d", ["c1", "c2/w", "c2/b"], ["c2"], {"padding": "SAME"}),
         Node("skip_add", "add", ["c2", "c1"], ["sum"]),
         Node("pool", "avg_pool2d", ["sum"], ["pool"], {"pool_size": [2, 2], "stride": [2, 2]}),
         Node("flatten", "reshape", ["pool"], ["flat"], {"shape": [36]})]
    return IntegerGraph(t, n, ["x"], ["logits"], name="residual")


def _x(n=5, seed=1):
    return np.random.default_rng(seed).uniform(-2.5, 2.5, (n, 6, 6, 2)).astype(np.float32)


def _ref_conv_same(x, xz, w, b, acc_bits, overflow, mult, shift, yz, lo, hi):
    """Python-integer 3x3 SAME conv: bias added after the taps (one more overflow-checked add)."""
    n, h, wd, c = x.shape
    o = w.shape[0]
    out = np.zeros((n, h, wd, o), dtype=np.int64)
    amin, amax = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1

    def fit(v):
        if amin <= v <= amax:
            return v, 0
        if overflow == "saturate":
            return min(max(v, amin), amax), 1
        m = 1 << acc_bits
        return (v - amin) % m + amin, 1
    overflows = 0
    for s in range(n):
        for i in range(h):
            for j in range(wd):
                for q in range(o):
                    acc = 0
                    for a in range(3):
                        for bb in range(3):
                            for ch in range(c):
                                ii, jj = i + a - 1, j + bb - 1
                                if 0 <= ii < h and 0 <= jj < wd:
                                    acc, ov = fit(acc + (int(x[s, ii, jj, ch]) - xz) * int(w[q, a, bb, ch]))
                                    overflows += ov
                    acc, ov = fit(acc + int(b[q]))
                    overflows += ov
                    out[s, i, j, q] = min(max(ref_mbqm(acc, mult[q], shift[q], "double") + yz, lo), hi)
    return out, overflows


@pytest.mark.parametrize("acc_bits,overflow", [(32, "wrap"), (14, "saturate"), (14, "wrap")])
def test_residual_graph_conv_nodes_match_python_integer_model(acc_bits, overflow):
    g = _residual_graph()
    dp = Datapath(accumulator_bits=acc_bits, accumulator_overflow=overflow)
    _, traces, kept = g.run(_x(), dp, trace=True, keep=True)
    for node, lo in (("conv1", None), ("conv2", -128)):
        nd = g.node(node)
        xs, ws, bs, ys = (g.tensors[t] for t in nd.inputs + nd.outputs)
        mults = [ref_quantize_multiplier(float(np.float32(xs.scale[0])) * float(np.float32(s))
                                         / float(np.float32(ys.scale[0]))) for s in ws.scale]
        z = int(ys.zero_point[0])
        low = max(-128, z) if nd.attrs.get("activation") == "relu" else -128
        want, ovf = _ref_conv_same(kept[nd.inputs[0]], int(xs.zero_point[0]), ws.data, bs.data, acc_bits, overflow,
                                   [m for m, _ in mults], [s for _, s in mults], z, low, 127)
        np.testing.assert_array_equal(kept[nd.outputs[0]], want)
        assert traces[node]["overflows"] == ovf
        if acc_bits == 14:
            assert ovf > 0


def test_residual_graph_runs_through_simulate_with_a_per_node_report():
    g = _residual_graph()
    x, y = _x(40), np.arange(40) % 4
    wide = fxpsim.simulate(g, fxpsim.preset("tflite-int8"), x, y)
    assert [r.name for r in wide.layers] == [n.name for n in g.nodes]
    assert [r.kind for r in wide.layers][-3:] == ["avg_pool2d", "reshape", "fully_connected"]
    assert all(r.not_exact_fraction == 0 for r in wide.layers)
    assert wide.network["overflow_count"] == 0
    narrow = fxpsim.simulate(g, fxpsim.preset("int8-acc16-sat").replace(accumulator_bits=10), x, y)
    recs = {r.name: r for r in narrow.layers}
    assert recs["conv1"].overflow_count > 0 and recs["conv1"].not_exact_fraction > 0
    assert recs["skip_add"].not_exact_fraction > 0          # the error propagates through the skip path
    assert recs["conv1"].accumulator_bits == 10 and recs["conv1"].headroom_bits < 0
    # the report's float reference is the graph's own float execution
    _, ref = g.run_float(x, keep=True)
    hw = g.tensors["c1"].dequantize(g.run(x, keep=True)[2]["c1"])
    assert wide.layers[1].mse == float(np.mean((hw - ref["c1"]) ** 2))


def test_worst_case_accumulator_bits_and_macs_computed_by_hand():
    g = _residual_graph()
    fc = g.node("fc")
    w = g.tensors["fc/w"].data.astype(int)
    b = g.tensors["fc/b"].data.astype(int)
    xmax = max(abs(-128 + 10), abs(127 + 10))                 # |x - z| for int8 codes, z = -10
    bound = int(max(sum(abs(int(v)) for v in w[o]) * xmax + abs(int(b[o])) for o in range(4)))
    assert g.accumulator_bits_needed(fc) == bound.bit_length() + 1
    assert g.macs(fc) == 4 * 36 and g.macs(g.node("conv2")) == 6 * 6 * 4 * 3 * 3 * 4
    assert g.accumulator_bits_needed(g.node("skip_add")) is None
    text = g.summary()
    assert "skip_add" in text and "acc bits" in text and " 2592 " in text
    row = next(line for line in text.splitlines() if line.split()[1:2] == ["fc"])
    assert row.split()[-1] == str(bound.bit_length() + 1)


def test_save_load_round_trip_is_bit_exact(tmp_path):
    g = _residual_graph()
    path = g.save(tmp_path / "g")
    assert path.endswith(".npz")
    g2 = load_graph(path)
    assert json.dumps(g2.to_json(), sort_keys=True) == json.dumps(g.to_json(), sort_keys=True)
    for name, t in g.tensors.items():
        if t.is_constant:
            assert g2.tensors[name].data.dtype == t.data.dtype
            np.testing.assert_array_equal(g2.tensors[name].data, t.data)
    x = _x(7)
    np.testing.assert_array_equal(g2.run(x), g.run(x))
    with zipfile.ZipFile(path) as z:                          # no pickles inside
        assert all(n.endswith(".npy") for n in z.namelist())


def test_damaged_graph_files_raise_clear_errors(tmp_path):
    path = _residual_graph().save(tmp_path / "g.npz")
    raw = open(path, "rb").read()
    cases = {"truncated.npz": raw[: len(raw) // 2], "empty.npz": b"", "noise.npz": bytes(range(256)) * 8}
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ValueError, match="not an fxpsim graph file"):
            load_graph(p)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(ValueError, match="no graph.json"):
        load_graph(other)
    desc = _residual_graph().to_json()
    desc["nodes"][0]["inputs"] = ["nonexistent"]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"graph.json": np.frombuffer(json.dumps(desc).encode(), np.uint8)})
    with pytest.raises(ValueError, match="damaged"):
        load_graph(bad)
    desc = _residual_graph().to_json()
    desc["version"] = 99
    np.savez(bad, **{"graph.json": np.frombuffer(json.dumps(desc).encode(), np.uint8)})
    with pytest.raises(ValueError, match="version"):
        load_graph(bad)


def test_bad_graphs_and_inputs_are_rejected_up_front():
    a = TensorSpec("a", 8, True, (3,), 0.1, 0)
    b = TensorSpec("b", 8, True, (3,), 0.1, 0)
    with pytest.raises(ValueError, match="cycle"):
        IntegerGraph([a, b], [Node("n1", "clamp", ["a"], ["b"], {"activation": "relu"}),
                              Node("n2", "clamp", ["b"], ["a"], {"activation": "relu"})], [], ["b"])
    with pytest.raises(ValueError, match="unknown op 'conv9d'"):
        IntegerGraph([a, b], [Node("n", "conv9d", ["a"], ["b"])], ["a"], ["b"])
    with pytest.raises(ValueError, match="does not define"):
        IntegerGraph([a], [Node("n", "clamp", ["a"], ["zz"])], ["a"], ["a"])
    with pytest.raises(ValueError, match="defined twice"):
        IntegerGraph([a, a], [], ["a"], ["a"])
    with pytest.raises(ValueError, match="outside the int8 range"):
        TensorSpec("w", 8, True, data=np.array([300]))
    with pytest.raises(ValueError, match="positive and finite"):
        TensorSpec("s", 8, True, (1,), float("nan"), 0)
    g = _residual_graph()
    with pytest.raises(ValueError, match=r"must have shape \(N, 6, 6, 2\)"):
        g.run(np.zeros((2, 6, 6, 3), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        g.run(np.full((2, 6, 6, 2), np.nan, np.float32))
    with pytest.raises(ValueError, match="empty batch"):
        g.run(np.zeros((0, 6, 6, 2), np.float32))
    with pytest.raises(ValueError, match="1 input"):
        g.run([_x(), _x()])
    x = _x()
    before = x.copy()
    g.run(x)
    np.testing.assert_array_equal(x, before)                  # inputs are never mutated


def test_nn_model_converts_to_a_graph_with_its_stages():
    model = fxpsim.nn.mlp((6, 5, 3), seed=0).eval()
    x = np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)
    g = fxpsim.convert(model, "tflite-int8", x)
    assert isinstance(g, IntegerGraph) and g.inputs == ["input"] and g.tensors["input"].is_float
    assert [n.op for n in g.nodes] == ["quantize", "fully_connected", "fully_connected"]
    assert g.meta["stage_outputs"] == [n.name for n in g.nodes[1:]]
    assert g.run(x).dtype == np.int8 and g.run(x).shape == (20, 3)
