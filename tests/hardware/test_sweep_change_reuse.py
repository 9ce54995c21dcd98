"""The network sweep reuses the exact run past a node that overflows without changing its codes, and the
partial-sum bound it relies on (exact_widths) checked against Python integers.

Every record of ``sweep(skip_exact=True)`` (reused or partly simulated) must equal the record of the same point
simulated in full (``skip_exact=False``: ``IntegerGraph.run`` through its compiled plan, another code path).
"""
from __future__ import annotations

import numpy as np

from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.hardware import preset
from fxpsim.hardware.sweeps import sweep
from fxpsim.hardware.width_sweep import exact_widths


def _same_but_reuse(a, b):
    drop = ("seconds", "reused_from", "reused_nodes")
    return {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}


def _clamping_net(seed=7):
    """A convolution of non-negative operands (monotone running sums: a saturated sum stays at the top)
    whose output scale maps every accumulator above ~2^12 to the clamp, then a reshape and a narrow dense
    layer: at widths between the dense layer's bound and the convolution's, the convolution overflows but
    gives the exact codes, so the dense layer is fed the exact tensors."""
    rng = np.random.default_rng(seed)
    w1 = rng.integers(20, 61, (4, 3, 3, 2)).astype(np.int8)
    w2 = rng.integers(-1, 2, (3, 4 * 4 * 4)).astype(np.int8)
    tensors = [TensorSpec("x", 8, True, (4, 4, 2), 0.05, 0), TensorSpec("w1", 8, True, scale=0.01, data=w1),
               TensorSpec("h", 8, True, (4, 4, 4), 0.0002, -128), TensorSpec("hf", 8, True, (64,), 0.0002, -128),
               TensorSpec("w2", 8, True, scale=0.01, data=w2), TensorSpec("y", 8, True, (3,), 0.01, 0)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w1"], ["h"], {"padding": "SAME", "activation": "relu"}),
                                 Node("r", "reshape", ["h"], ["hf"], {"shape": [-1, 64]}),
                                 Node("f", "fully_connected", ["hf", "w2"], ["y"])], ["x"], ["y"])
    x = rng.integers(60, 128, (12, 4, 4, 2)).astype(np.int8)
    return net, x


def test_a_node_that_overflows_without_changing_its_codes_leaves_the_rest_reused():
    net, x = _clamping_net()
    base = preset("tflite-int8")
    need = exact_widths(net, x, base)
    assert need["f"] < need["c"]
    widths = list(range(8, 33))
    grid = {"accumulator_bits": widths, "accumulator_overflow": ["saturate", "wrap"]}
    fast = sweep(net, x, grid, config=base, processes=1, progress=False)
    full = sweep(net, x, grid, config=base, processes=1, progress=False, skip_exact=False)
    assert len(fast.records) == len(full.records) == 50
    for a, b in zip(fast.records, full.records):
        assert _same_but_reuse(a, b), (a, b)
    # saturating below the convolution's bound: it overflows (counted), its codes are the exact ones, and the
    # reshape and the dense layer (within its bound) are taken from the exact run, not run
    past = [r for r in fast.records if r["accumulator_overflow"] == "saturate" and need["f"] <= r["accumulator_bits"]
            < need["c"] and r["overflow_count"] > 0]
    assert past, "the fixture should make the convolution overflow without changing its codes"
    for r in past:
        assert r["reused_nodes"] == 2 and r["reused_from"] and r["seconds"] > 0 and r["exact_fraction"] == 1.0
        assert r["layer_overflows"].startswith("c=") and not r["layer_overflows"].startswith("c=0")
    # wrapping does change the codes there: the dense layer then runs on the changed tensors
    assert any(r["accumulator_overflow"] == "wrap" and r["exact_fraction"] < 1 and r["reused_nodes"] == 0
               for r in fast.records)
    assert any("simulated in part" in n for n in fast.notes)


def _signed_width(v: int) -> int:
    """Smallest two's-complement width holding v >= 0 (and -v - 1)."""
    return v.bit_length() + 1


def test_exact_widths_equal_a_python_int_bound():
    """|b| + sum |x - z_x| |w - z_w| per output, in Python ints over explicit windows (padding SAME, stride 2),
    and a sequential running-sum peak that the bound covers."""
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8)
    b = rng.integers(-5000, 5000, 3).astype(np.int64)
    tensors = [TensorSpec("x", 8, True, (5, 5, 2), 0.05, 4), TensorSpec("w", 8, True, scale=0.01, data=w),
               TensorSpec("b", 32, True, data=b), TensorSpec("y", 8, True, (3, 3, 3), 0.3, -2)]
    net = IntegerGraph(tensors, [Node("c", "conv2d", ["x", "w", "b"], ["y"], {"padding": "SAME", "stride": [2, 2]})],
                       ["x"], ["y"])
    x = rng.integers(-128, 128, (3, 5, 5, 2)).astype(np.int8)
    got = exact_widths(net, x, preset("tflite-int8"))["c"]
    zx = 4
    # SAME, stride 2, 5 -> 3, kernel 3: total pad 2, one on each side
    bound = peak = 0
    for n in range(3):
        for p in range(3):
            for q in range(3):
                for o in range(3):
                    absum, run = abs(int(b[o])), int(b[o])
                    peak = max(peak, abs(run) if run >= 0 else -run - 1)
                    for i in range(3):
                        for j in range(3):
                            for c in range(2):
                                r, s = 2 * p + i - 1, 2 * q + j - 1
                                xv = int(x[n, r, s, c]) - zx if 0 <= r < 5 and 0 <= s < 5 else 0
                                prod = xv * int(w[o, i, j, c])
                                absum += abs(prod)
                                run += prod
                                peak = max(peak, run if run >= 0 else -run - 1)
                    bound = max(bound, absum)
    assert got == _signed_width(bound)
    assert _signed_width(peak) <= got
