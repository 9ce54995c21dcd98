"""running_sum_peak's signed range (``low``, ``high``) and ``peak`` against a Python-int model of every partial
sum: sequential, adder tree, K-tiling, a preloaded and an after-added bias (hypothesis)."""
from __future__ import annotations

import numpy as np
import pytest

from fxpsim.datapath.partial_sums import running_sum_peak

pytest.importorskip("hypothesis", reason="hypothesis not installed (pip install -e '.[test]')")
from hypothesis import given, settings, strategies as st  # noqa: E402


def _tree(values):
    """Every node of the pairwise adder tree (the leaves included), and its root."""
    nodes, level = list(values), list(values)
    while len(level) > 1:
        nxt = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)] + ([level[-1]] if len(level) % 2 else [])
        nodes += nxt[:len(level) // 2]
        level = nxt
    return nodes, level[0]


def _model(p, init, after, order, tile_k):
    """Every value the accumulator holds for one output's products ``p`` (Python ints)."""
    vals = [init]
    tk = len(p) if not tile_k or tile_k >= len(p) else tile_k
    tiles = [p[i:i + tk] for i in range(0, len(p), tk)]
    if len(tiles) > 1:
        s = init
        for t in tiles:
            s += sum(t)
            vals.append(s)
        final = s
    elif order == "sequential":
        s = init
        for v in p:
            s += v
            vals.append(s)
        final = s
    else:
        nodes, root = _tree(p)
        vals += nodes + [root + init]
        final = root + init
    if after is not None:
        vals.append(final + after)
    return vals


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 9), st.sampled_from(["sequential", "tree"]),
       st.sampled_from([None, 2, 4]), st.sampled_from(["none", "preload", "after"]), st.integers(0, 2 ** 32 - 1))
def test_signed_range_equals_every_partial_sum(rows, outs, k, order, tile_k, bias, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (rows, 1, k))
    w = rng.integers(-128, 128, (outs, k))
    b = rng.integers(-(1 << 20), 1 << 20, outs)
    r = running_sum_peak(a, w, b if bias == "preload" else None, order=order, tile_k=tile_k,
                         after=b if bias == "after" else None)
    vals = []
    for i in range(rows):
        for o in range(outs):
            p = [int(a[i, 0, j]) * int(w[o, j]) for j in range(k)]
            vals += _model(p, int(b[o]) if bias == "preload" else 0, int(b[o]) if bias == "after" else None, order,
                           tile_k)
    assert (r["low"], r["high"]) == (min(vals), max(vals))
    assert r["peak"] == max(abs(v) for v in vals)
