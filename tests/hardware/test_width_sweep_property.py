"""node_sweep / exact_widths on random small graphs against running every width through the normal path.

Each example builds a small integer graph (a convolution, a depthwise convolution and a dense layer in a
chain, random zero points, biases and scales), picks datapath knobs (bias preloaded or added after,
sequential or tree order, overflow at every add or at the end, requantization scheme) and a few widths,
and compares every record of :func:`node_sweep` with ``run_node`` on
``dataclasses.replace(datapath, accumulator_bits=W, accumulator_overflow=mode)`` fed the exact graph's
tensors -- the same independent loop as ``test_node_sweep.py``, written again here (on one thread and on a pool of
two: the numbers must not depend on it).  ``exact_widths`` must
be a width from which that loop sees no overflow and no changed output.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.graph.ir import Datapath
from fxpsim.graph.ops import run_node  # (before mac_ops: graph.ops imports it)
from fxpsim.graph.mac_ops import MAC_OPS
from fxpsim.hardware.width_sweep import exact_widths, node_sweep


def _graph(rng, c_in, c_mid, k_dense, hw, with_bias, wide_x):
    """x [hw, hw, c_in] -> conv 3x3 SAME (c_mid) -> depthwise 3x3 VALID -> dense (k_dense outputs)."""
    zx = int(rng.integers(-128, 128))
    zy = [int(rng.integers(-20, 20)) for _ in range(3)]
    w1 = rng.integers(-127, 128, (c_mid, 3, 3, c_in)).astype(np.int8)
    w2 = rng.integers(-127, 128, (1, 3, 3, c_mid)).astype(np.int8)
    hw2 = hw - 2
    w3 = rng.integers(-127, 128, (k_dense, hw2 * hw2 * c_mid)).astype(np.int8)
    s_x = 0.02
    s_w = [float(rng.uniform(0.002, 0.02)) for _ in range(3)]
    s_y = [float(rng.uniform(0.05, 0.3)) for _ in range(3)]
    tensors = [TensorSpec("x", 8, True, (hw, hw, c_in), s_x, zx),
               TensorSpec("w1", 8, True, scale=s_w[0], data=w1),
               TensorSpec("y1", 8, True, (hw, hw, c_mid), s_y[0], zy[0]),
               TensorSpec("w2", 8, True, scale=s_w[1], data=w2),
               TensorSpec("y2", 8, True, (hw2, hw2, c_mid), s_y[1], zy[1]),
               TensorSpec("w3", 8, True, scale=s_w[2], data=w3),
               TensorSpec("y3", 8, True, (k_dense,), s_y[2], zy[2])]
    names = ["", "", ""]
    if with_bias:
        big = 1 << (20 if wide_x else 14)
        for i, (n, o) in enumerate((("b1", c_mid), ("b2", c_mid), ("b3", k_dense))):
            tensors.append(TensorSpec(n, 32, True, data=rng.integers(-big, big, o).astype(np.int64)))
            names[i] = n
    nodes = [Node("c", "conv2d", ["x", "w1"] + ([names[0]] if with_bias else []), ["y1"], {"padding": "SAME"}),
             Node("d", "depthwise_conv2d", ["y1", "w2"] + ([names[1]] if with_bias else []), ["y2"],
                  {"padding": "VALID"}),
             Node("r", "reshape", ["y2"], ["y2f"], {"shape": [-1, hw2 * hw2 * c_mid]}),
             Node("f", "fully_connected", ["y2f", "w3"] + ([names[2]] if with_bias else []), ["y3"])]
    tensors.append(TensorSpec("y2f", 8, True, (hw2 * hw2 * c_mid,), s_y[1], zy[1]))
    return IntegerGraph(tensors, nodes, ["x"], ["y3"])


def _loop(graph, x, datapath, widths, modes):
    _, _, values = graph.run(x, datapath, keep=True)
    consts = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    out = {}
    for node in graph.nodes:
        if node.op not in MAC_OPS:
            continue
        ins = [(values[t] if t in values else consts[t]) if t else None for t in node.inputs]
        exact = values[node.outputs[0]].astype(np.int64)
        for w in widths:
            for mode in modes:
                outs, tr = run_node(graph, node, ins, dataclasses.replace(datapath, accumulator_bits=w,
                                                                          accumulator_overflow=mode), True)
                d = np.abs(outs[0].astype(np.int64) - exact)
                out[node.name, w, mode] = (int(tr["overflows"]), int(np.count_nonzero(d)), int(d.max()),
                                           int(d.sum()))
    return out


@given(seed=st.integers(0, 2**32 - 1), c_in=st.integers(1, 5), c_mid=st.sampled_from([2, 3, 50]),
       k_dense=st.sampled_from([3, 49]), hw=st.integers(3, 6), batch=st.integers(1, 3),
       with_bias=st.booleans(), wide_x=st.booleans(),
       bias_add=st.sampled_from(["after", "preload"]), order=st.sampled_from(["sequential", "tree"]),
       at=st.sampled_from(["add", "add", "end"]), scheme=st.sampled_from(["tflite-double", "tflite-single", "float"]),
       widths=st.lists(st.integers(8, 32), min_size=1, max_size=4, unique=True), workers=st.sampled_from([1, 2]))
def test_node_sweep_equals_every_width_run(seed, c_in, c_mid, k_dense, hw, batch, with_bias, wide_x, bias_add,
                                           order, at, scheme, widths, workers):
    rng = np.random.default_rng(seed)
    graph = _graph(rng, c_in, c_mid, k_dense, hw, with_bias, wide_x)
    x = rng.integers(-128, 128, (batch, hw, hw, c_in)).astype(np.int8)
    dp = Datapath(accumulator_order=order, overflow_at=at, bias_add=bias_add, requantization=scheme)
    modes = ("saturate", "wrap", "saturate_zero")
    res = node_sweep(graph, x, widths=widths, overflows=modes, datapath=dp, workers=workers)
    want = _loop(graph, x, dp, sorted(widths), modes)
    for (name, w, mode), (ovf, bad, mx, total) in want.items():
        r = res.record(name, w, mode)
        n = r["outputs"]
        assert (r["overflow_count"], round(r["not_exact_fraction"] * n), r["max_abs_error_lsb"],
                round(r["mean_abs_error_lsb"] * n)) == (ovf, bad, mx, total), (name, w, mode)
    # exact_widths: from there on no overflow and every output exact (checked at that width and one wider)
    bound = exact_widths(graph, x, dp)
    check = sorted({min(32, v + d) for v in bound.values() for d in (0, 1) if v <= 32})
    if check:
        got = _loop(graph, x, dp, check, ("saturate", "wrap"))
        for (name, w, mode), (ovf, bad, _, _) in got.items():
            if w >= bound[name]:
                assert ovf == 0 and bad == 0, (name, w, mode, bound[name])


def test_workers_pool_gives_the_same_records_and_checks_its_argument():
    rng = np.random.default_rng(11)
    graph = _graph(rng, 3, 50, 49, 6, True, True)
    x = rng.integers(-128, 128, (4, 6, 6, 3)).astype(np.int8)
    one = node_sweep(graph, x, workers=1)
    two = node_sweep(graph, x, workers=2)
    assert one.records == two.records and one.exact_from == two.exact_from and one.bound_bits == two.bound_bits
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers"):
            node_sweep(graph, x, widths=[8], workers=bad)
