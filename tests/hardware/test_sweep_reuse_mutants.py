"""fxpsim.hardware.sweep_reuse.provably_exact against an independent model: which points of an accumulator sweep
are reused outright and which nodes of the others may be taken from the widest run.

The bounds come from Python-int loops written here, over the graph's own codes: a core MAC node's data-driven
bound :math:`\\max_{n,o} |b_o| + \\sum_k |x_{n,k} - z_x|\\,|w_{o,k}|` (:func:`exact_widths`), an importer's MAC
node's and an average pool's worst case over the input's code range; the signed width of a bound ``B`` is
``B.bit_length() + 1``.  The expected ``(reuse, partial)`` dictionaries are typed out from the rule the
docstring states: points that differ only in the accumulator fields are grouped, the widest (first of equals)
is the reference and must itself be exact, a node is exact at a point when it reads no accumulator setting or
its width holds its bound (no tiles, no folded zero point, its bias register as at the reference or wide
enough and nothing clipped).
"""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.graph.registry import OPS, Op
from fxpsim.hardware import preset
from fxpsim.hardware.sweep_reuse import provably_exact

BASE = preset("tflite-int8")
ZX = 3


def _width(bound: int) -> int:
    return int(bound).bit_length() + 1


def _net(meta=None, extra=()):
    """x (6 int8 codes, zero point 3) -> fully_connected "a" (small weights) -> reshape "r";
    x -> tflite_fully_connected "b" (large weights); nodes in that order, outputs hr and yb; ``extra`` nodes
    (and tensors) appended."""
    rng = np.random.default_rng(21)
    w1 = rng.integers(-2, 3, (2, 6)).astype(np.int8)
    b1 = np.array([-40, 25], np.int64)
    w2 = rng.integers(-127, 128, (3, 6)).astype(np.int8)
    b2 = np.array([9000, -7000, 300], np.int64)
    tensors = [TensorSpec("x", 8, True, (6,), 0.05, ZX), TensorSpec("w1", 8, True, scale=0.01, data=w1),
               TensorSpec("b1", 32, True, data=b1), TensorSpec("ha", 8, True, (2,), 0.1, 0),
               TensorSpec("hr", 8, True, (2, 1), 0.1, 0),
               TensorSpec("w2", 8, True, scale=0.01, data=w2), TensorSpec("b2", 32, True, data=b2),
               TensorSpec("yb", 8, True, (3,), 2.0, 0)]
    nodes = [Node("a", "fully_connected", ["x", "w1", "b1"], ["ha"]),
             Node("r", "reshape", ["ha"], ["hr"], {"shape": [-1, 2, 1]}),
             Node("b", "tflite_fully_connected", ["x", "w2", "b2"], ["yb"])]
    outputs = ["hr", "yb"]
    for t, n, out in extra:
        tensors.append(t)
        nodes.append(n)
        outputs.append(out)
    net = IntegerGraph(tensors, nodes, ["x"], outputs, meta=meta)
    x = rng.integers(-128, 128, (10, 6)).astype(np.int8)
    return net, x, w1, b1, w2, b2


def _bounds(x, w1, b1, w2, b2):
    """(width of "a" on these inputs, width of "b" in the worst case), in Python ints."""
    a = max(abs(int(b1[o])) + sum(abs(int(x[n, k]) - ZX) * abs(int(w1[o, k])) for k in range(6))
            for n in range(len(x)) for o in range(2))
    xmax = max(abs(-128 - ZX), abs(127 - ZX))
    b = max(abs(int(b2[o])) + sum(xmax * abs(int(w2[o, k])) for k in range(6)) for o in range(3))
    return _width(a), _width(b)


@pytest.fixture(scope="module")
def case():
    net, x, w1, b1, w2, b2 = _net()
    wa, wb = _bounds(x, w1, b1, w2, b2)
    assert 8 < wa < wb - 2 < 30, (wa, wb)
    return net, x, wa, wb


def test_points_reused_and_nodes_taken_against_the_bounds(case):
    net, x, wa, wb = case
    widths = [32, wa - 1, wa, wb - 1, wb, wb + 1]
    configs = [BASE.replace(accumulator_bits=w) for w in widths]
    configs.append(BASE.replace(accumulator_overflow="saturate"))                   # 32 bits, saturating
    configs.append(BASE.replace(accumulator_bits=wb, accumulator_overflow="saturate", description="other"))
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {4: (0, 3), 5: (0, 3), 6: (0, 3), 7: (0, 3)}
    assert partial == {1: (0, [False, True, False]), 2: (0, [True, True, False]), 3: (0, [True, True, False])}


def test_the_first_of_the_widest_points_is_the_reference(case):
    net, x, wa, wb = case
    configs = [BASE.replace(accumulator_bits=wa), BASE.replace(accumulator_overflow="saturate"), BASE,
               BASE.replace(accumulator_bits=wb)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {2: (1, 3), 3: (1, 3)}
    assert partial == {0: (1, [True, True, False])}
    # a group of two
    assert provably_exact(net, x, [BASE.replace(accumulator_bits=wb), BASE], True) == ({0: (1, 3)}, {})
    assert provably_exact(net, x, [BASE, BASE.replace(accumulator_bits=wb)], True) == ({1: (0, 3)}, {})
    # alone in its group, or no point at all: nothing to reuse
    assert provably_exact(net, x, [BASE], True) == ({}, {})
    assert provably_exact(net, x, [], True) == ({}, {})


def test_only_the_accumulator_fields_may_differ_within_a_group(case):
    net, x, wa, wb = case
    he = dict(rounding="half_even")
    configs = [BASE.replace(accumulator_bits=wb - 1, **he),               # group A (half even): widest wb - 1,
               BASE.replace(accumulator_bits=wa, **he),                   # not exact itself: nothing
               BASE.replace(accumulator_bits=wb),                         # group B (the base rounding)
               BASE.replace(accumulator_bits=wb - 2, **he),               # group A
               BASE,                                                      # group B: its reference
               BASE.replace(accumulator_bits=wb, multiplier_bits=30),     # group C
               BASE.replace(accumulator_bits=32, multiplier_bits=30)]     # group C: its reference
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {2: (4, 3), 5: (6, 3)}
    assert partial == {}
    # the fields that may differ: name, description, width, overflow, bias register, tile register
    ref = BASE.replace(accumulator_bits=30, name="wide")
    others = [BASE.replace(accumulator_bits=wb, name="n1", description="d1", accumulator_overflow="saturate",
                           bias_bits=wb, tile_accumulator_bits=wb),
              BASE.replace(accumulator_bits=wb + 2, name="n2", tile_accumulator_bits=20),
              BASE.replace(accumulator_bits=wa, name="n3", description="narrow")]
    reuse, partial = provably_exact(net, x, [ref] + others, True)
    assert reuse == {1: (0, 3), 2: (0, 3)} and partial == {3: (0, [True, True, False])}
    # a point alone in its group before a group of two
    configs = [BASE.replace(rounding="half_even"), BASE, BASE.replace(accumulator_bits=wb)]
    assert provably_exact(net, x, configs, True) == ({2: (1, 3)}, {})
    # overflow_at is not one of them
    reuse, partial = provably_exact(net, x, [BASE, BASE.replace(accumulator_bits=wb, overflow_at="end")], True)
    assert (reuse, partial) == ({}, {})


def test_a_bias_register_narrower_than_the_bound_or_a_clipped_bias_is_not_taken(case):
    net, x, wa, wb = case
    # wide enough accumulators, but "b"'s bias register narrower than its bound: b runs
    configs = [BASE, BASE.replace(accumulator_bits=wb, bias_bits=wb - 1), BASE.replace(accumulator_bits=wb + 1,
                                                                                      bias_bits=wb)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {2: (0, 3)}
    # "a"'s bound is below wb - 1: its register holds its bias
    assert partial == {1: (0, [True, True, False])}
    # a register of exactly the bound, and one as at the reference (pinned to wb + 2 bits) on a 24-bit accumulator
    pinned = BASE.replace(bias_bits=wb + 2)
    configs = [pinned, pinned.replace(accumulator_bits=wb + 1, bias_bits=wb), pinned.replace(accumulator_bits=24)]
    assert configs[2].bias_bits == wb + 2
    assert provably_exact(net, x, configs, True) == ({1: (0, 3), 2: (0, 3)}, {})
    # a bias the graph clipped: only points whose register is the reference's take the MAC nodes
    clipped, *_ = _net(meta={"bias_clipped": {"a": 1, "b": 0}})
    configs = [pinned, pinned.replace(accumulator_bits=wb + 1, bias_bits=wb + 1), pinned.replace(accumulator_bits=24)]
    reuse, partial = provably_exact(clipped, x, configs, True)
    assert reuse == {2: (0, 3)} and partial == {1: (0, [False, True, False])}
    # a count of 0 is no clip
    unclipped, *_ = _net(meta={"bias_clipped": {"a": 0, "b": 0}})
    assert provably_exact(unclipped, x, configs, True) == ({1: (0, 3), 2: (0, 3)}, {})
    # a per-node bias register (by the node's name), the same at every point: "a" keeps it, taken even with a
    # clip; "b"'s register follows the accumulator (32 -> 24 bits): not taken
    cfg = BASE.with_layer("a", bias_bits=20)
    configs = [cfg, cfg.replace(accumulator_bits=24)]
    assert configs[1].for_node(clipped.nodes[0], 0).bias_bits == 20
    assert provably_exact(clipped, x, configs, True) == ({}, {1: (0, [True, True, False])})
    assert provably_exact(unclipped, x, configs, True) == ({1: (0, 3)}, {})


def test_tiles_and_a_folded_zero_point_are_not_covered(case):
    net, x, wa, wb = case
    for changes in (dict(tile_k=2), dict(zero_point="fold")):
        cfg = BASE.replace(**changes)
        configs = [cfg, cfg.replace(accumulator_bits=wb + 2), cfg.replace(accumulator_bits=wa)]
        assert provably_exact(net, x, configs, True) == ({}, {}), changes
    # on one node only (a per-node override, the same at every point): the other nodes are taken
    for changes in (dict(tile_k=2), dict(zero_point="fold")):
        cfg = BASE.with_layer("a", **changes)
        configs = [cfg, cfg.replace(accumulator_bits=wb + 2)]
        assert provably_exact(net, x, configs, True) == ({}, {}), changes      # the reference is not exact
    # a per-node width: "a" stays at 30 bits (exact), the default width is swept
    cfg = BASE.with_layer("a", accumulator_bits=30)
    configs = [cfg, cfg.replace(accumulator_bits=wa - 2), cfg.replace(accumulator_bits=wb)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {2: (0, 3)} and partial == {1: (0, [True, True, False])}
    # "a" held below its bound at every point: the reference itself is not exact
    cfg = BASE.with_layer("a", accumulator_bits=wa - 1)
    assert provably_exact(net, x, [cfg, cfg.replace(accumulator_bits=wb)], True) == ({}, {})
    # "b" (the importer's MAC op) at exactly its worst-case bound on every point, the default swept
    cfg = BASE.with_layer("b", accumulator_bits=wb)
    configs = [cfg, cfg.replace(accumulator_bits=wa - 1), cfg.replace(accumulator_bits=wa)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {2: (0, 3)} and partial == {1: (0, [False, True, True])}


def test_a_failing_or_inexact_group_leaves_the_next_groups_alone(case):
    net, x, wa, wb = case
    he = BASE.replace(rounding="half_even")
    # group A's widest point (wb - 1) is not exact; group B after it is
    configs = [he.replace(accumulator_bits=wb - 1), he.replace(accumulator_bits=wa), BASE,
               BASE.replace(accumulator_bits=wb)]
    assert provably_exact(net, x, configs, True) == ({3: (2, 3)}, {})
    # group A's exact run fails (TFLite's ADD refuses a final rounding of its own): nothing of it is reused,
    # group B still is
    extra = [(TensorSpec("s", 8, True, (2,), 0.2, 0), Node("s", "add", ["ha", "ha"], ["s"]), "s")]
    added, x2, *_ = _net(extra=extra)
    bad = BASE.replace(requantization_rounding="half_even")
    with pytest.raises(ValueError, match="fixed multipliers"):
        added.run(x2, bad)
    configs = [bad, bad.replace(accumulator_bits=wb), BASE, BASE.replace(accumulator_bits=wb)]
    assert provably_exact(added, x2, configs, True) == ({3: (2, 4)}, {})


def _custom_run(graph, node, ins, dp, trace):
    return [ins[0]], {"overflows": 0, "acc": None, "clipped": 0}


def test_an_op_with_no_bound_stops_all_reuse(case, monkeypatch):
    net, x, wa, wb = case
    monkeypatch.setitem(OPS, "test_identity", Op("test_identity", _custom_run, lambda graph, node, ins: [ins[0]]))
    extra = [(TensorSpec("yc", 8, True, (3,), 2.0, 0), Node("c", "test_identity", ["yb"], ["yc"]), "yc")]
    plain, x2, *_ = _net(extra=extra)
    configs = [BASE, BASE.replace(accumulator_bits=wb), BASE.replace(accumulator_bits=wa)]
    assert provably_exact(plain, x2, configs, True) == ({}, {})
    # an op outside the accumulator-free modules with a worst-case sum of its own: no bound covers how it
    # uses the accumulator either (only avg_pool2d's and the importers' MAC ops' are read)
    monkeypatch.setitem(OPS, "test_identity", Op("test_identity", _custom_run, lambda graph, node, ins: [ins[0]],
                                                 worst_case_sum=lambda graph, node: 1))
    assert plain.accumulator_bits_needed(plain.nodes[3]) == 2
    assert provably_exact(plain, x2, configs, True) == ({}, {})
    # the same graph with a core op there instead (graph.ops, elementwise and LUT modules read no accumulator)
    extra = [(TensorSpec("yc", 8, True, (3,), 2.0, 0), Node("c", "clamp", ["yb"], ["yc"], {"min": -100, "max": 100}),
              "yc")]
    g, x3, *_ = _net(extra=extra)
    assert provably_exact(g, x3, configs, True) == ({1: (0, 4)}, {2: (0, [True, True, False, True])})


def test_free_ops_of_every_module_are_taken():
    """An add (elementwise_ops), a sigmoid (lut_ops), tflite_relu (tflite activation_ops) and tflite_mul
    (tflite ops) after the node "a": none reads the accumulator."""
    extra = [(TensorSpec("s", 8, True, (2,), 0.2, 0), Node("s", "add", ["ha", "ha"], ["s"]), "s"),
             (TensorSpec("g", 8, True, (2,), 1 / 256, -128), Node("g", "sigmoid", ["ha"], ["g"]), "g"),
             (TensorSpec("t", 8, True, (2,), 0.1, 0), Node("t", "tflite_relu", ["ha"], ["t"],
                                                            {"activation": "relu"}), "t"),
             (TensorSpec("m", 8, True, (2,), 0.1, 0), Node("m", "tflite_mul", ["ha", "ha"], ["m"]), "m")]
    net, x, w1, b1, w2, b2 = _net(extra=extra)
    wa, wb = _bounds(x, w1, b1, w2, b2)
    configs = [BASE, BASE.replace(accumulator_bits=wb), BASE.replace(accumulator_bits=wa - 1)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {1: (0, 7)}
    assert partial == {2: (0, [False, True, False, True, True, True, True])}


def _pool_net():
    """A 4 x 4 average pool of int8 codes (zero point -5: the pool sums the codes themselves) reading the
    graph input, then a max pool and an average pool of 2 x 2 on a 4 x 4 x 2 uint8 tensor."""
    tensors = [TensorSpec("x", 8, True, (4, 4, 2), 0.1, -5), TensorSpec("p", 8, True, (1, 1, 2), 0.1, -5),
               TensorSpec("m", 8, True, (2, 2, 2), 0.1, -5), TensorSpec("q", 8, True, (1, 1, 2), 0.1, -5)]
    nodes = [Node("p", "avg_pool2d", ["x"], ["p"], {"pool_size": [4, 4], "padding": "VALID"}),
             Node("m", "max_pool2d", ["x"], ["m"], {"pool_size": [2, 2], "padding": "VALID"}),
             Node("q", "avg_pool2d", ["m"], ["q"], {"pool_size": [2, 2], "padding": "VALID"})]
    x = np.random.default_rng(3).integers(-128, 128, (3, 4, 4, 2)).astype(np.int8)
    return IntegerGraph(tensors, nodes, ["x"], ["p", "q"]), x


def test_average_pools_need_their_worst_case():
    net, x = _pool_net()
    wp, wq = _width(128 * 16), _width(128 * 4)          # 13 and 11 bits
    cfg = BASE.replace(requantization="float")
    configs = [cfg.replace(accumulator_bits=w) for w in (32, wq - 1, wq, wp - 1, wp)]
    reuse, partial = provably_exact(net, x, configs, True)
    assert reuse == {4: (0, 3)}
    assert partial == {1: (0, [False, True, False]), 2: (0, [False, True, True]), 3: (0, [False, True, True])}


def test_a_model_is_converted_at_the_widest_point():
    """The model path (``is_graph=False``): the bounds from the converted graph's own codes."""
    from fxpsim import nn
    from fxpsim.hardware.simulation import convert, extract
    rng = np.random.default_rng(8)
    model = nn.Sequential(nn.Dense(64, 4, seed=1), nn.ReLU(), nn.Dense(4, 3, seed=2))
    x = rng.normal(size=(12, 64)).astype(np.float32)
    graph = extract(model, x)
    net = convert(graph, BASE)
    _, _, values = net.run(x, BASE.exact_datapath(), keep=True)
    macs = [(i, n) for i, n in enumerate(net.nodes) if n.op == "fully_connected"]
    assert len(macs) == 2
    widths = []
    for _, n in macs:
        xs, ws = net.tensors[n.inputs[0]], net.tensors[n.inputs[1]]
        xin = values[n.inputs[0]] if n.inputs[0] in values else None
        w = ws.data.astype(np.int64)
        zx = int(xs.zero_point[0])
        b = net.tensors[n.inputs[2]].data if len(n.inputs) > 2 and n.inputs[2] else np.zeros(w.shape[0], np.int64)
        bound = max(abs(int(b[o])) + sum(abs(int(xin[s, k]) - zx) * abs(int(w[o, k]) - int(ws.zero_point[o % len(
            ws.zero_point)])) for k in range(w.shape[1])) for s in range(len(x)) for o in range(w.shape[0]))
        widths.append(_width(bound))
    lo, hi = min(widths), max(widths)
    assert lo < hi
    # at `lo` bits the node of bound `hi` is not exact; every other node is
    flags_lo = [True] * len(net.nodes)
    for (i, _), w in zip(macs, widths):
        flags_lo[i] = w <= lo
    configs = [BASE.replace(accumulator_bits=w) for w in (28, hi, lo)]
    reuse, partial = provably_exact(graph, x, configs, False)
    assert reuse == {1: (0, len(net.nodes))} and partial == {2: (0, flags_lo)}
    assert flags_lo.count(False) == 1
    # the 40-bit point alone is the widest of its group now: TFLite's schemes refuse it at conversion,
    # so nothing is reused, and a group after it still is
    he = BASE.replace(rounding="half_even")
    configs = [BASE.replace(accumulator_bits=40), BASE.replace(accumulator_bits=hi),
               he.replace(accumulator_bits=28), he.replace(accumulator_bits=hi)]
    assert provably_exact(graph, x, configs, False) == ({3: (2, len(net.nodes))}, {})


def _min_sum_depthwise():
    """A 1 x 1 depthwise node whose only product, (-128 - 0) * 64 = -8192 = -2^13, is the most negative sum of a
    14-bit accumulator: it fits two's complement (wrap or saturate: no overflow at 14 bits), but symmetric
    saturation clamps it to -8191 and counts an overflow.  The output scale puts the rounding boundary -63.5
    between -8192 M and -8191 M (M = 0.05 * 0.01 / s_y), so the clamp also changes the output code."""
    w = np.array([[[[64]]]], np.int8)
    s_y = 0.05 * 0.01 / 0.0077519
    tensors = [TensorSpec("x", 8, True, (1, 1, 1), 0.05, 0), TensorSpec("w", 8, True, scale=0.01, data=w),
               TensorSpec("y", 8, True, (1, 1, 1), s_y, 0)]
    net = IntegerGraph(tensors, [Node("d", "depthwise_conv2d", ["x", "w"], ["y"], {"padding": "VALID"})],
                       ["x"], ["y"])
    return net, np.array([-128, 5, 100], np.int8).reshape(3, 1, 1, 1)


def test_symmetric_saturation_does_not_take_the_most_negative_sum_for_exact():
    """Model: per sample, acc = x * 64; at 14 bits a symmetric saturating accumulator holds [-8191, 8191], so
    sample 0 (-8192) overflows once; 15 bits hold it.  Wrapping or plain saturation at 14 bits holds -8192."""
    from fxpsim.hardware.sweeps import sweep
    net, x = _min_sum_depthwise()
    sums = [int(v) * 64 for v in x.reshape(-1)]
    assert sums[0] == -2**13
    overflows_14 = sum(not -(2**13 - 1) <= s <= 2**13 - 1 for s in sums)
    assert overflows_14 == 1
    sym = BASE.replace(accumulator_overflow="saturate_symmetric")
    configs = [sym, sym.replace(accumulator_bits=14), sym.replace(accumulator_bits=15),
               BASE.replace(accumulator_bits=14, accumulator_overflow="saturate")]
    # 14 bits symmetric: not exact; 15 bits symmetric and 14 bits two's-complement saturation: exact
    assert provably_exact(net, x, configs, True) == ({2: (0, 1), 3: (0, 1)}, {1: (0, [False])})
    grid = {"accumulator_bits": [14, 15, 32], "accumulator_overflow": ["saturate_symmetric", "saturate", "wrap"]}
    fast = sweep(net, x, grid, config=BASE, processes=1, progress=False)
    full = sweep(net, x, grid, config=BASE, processes=1, progress=False, skip_exact=False)
    for a, b in zip(fast.records, full.records):
        assert _same(a, b), (a, b)
    rec = next(r for r in fast.records if r["accumulator_bits"] == 14 and r["accumulator_overflow"] ==
               "saturate_symmetric")
    assert rec["overflow_count"] == overflows_14 and rec["reused_from"] == "" and rec["exact_fraction"] == 2 / 3


def _same(a, b):
    drop = ("seconds", "reused_from", "reused_nodes")
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
