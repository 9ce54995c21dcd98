"""guarantee_accumulator / reround_channels / worst_case_magnitudes (``fxpsim/hardware/accumulator_guarantee.py``)
against an independent model written here, on hand-built core graphs: every record field, every re-rounded
weight and bias code, every new scale, the graph's name and meta, the boundary ``|b| + ||q||_1 x_max = 2^(P-1) - 1``,
``x_max = 0`` and ``1``, narrow operand dtypes, per-tensor and per-channel weights, and the text of every refusal.

The model (``_model_rows``): the module docstring's rule in Python ints and Fractions -- the bound
``|b| + ||q||_1 x_max`` by a loop, ``alpha = bound / L`` (one float, the same correctly rounded quotient of two
ints the docstring defines), ``b' = trunc(b / alpha)``, ``T = floor((L - |b'|) / x_max)`` (unbounded for
``x_max = 0``) and A2Q's largest-remainder rounding: the floors of ``|q / alpha|``, then one more unit to the
largest fractions (ties in index order) until ``min(T, round_half_up(sum |q / alpha|))`` is reached.
The values are chosen away from float ties, so the exact Fractions decide the same way as float64.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.graph.ir import IntegerGraph, Node, TensorSpec
from fxpsim.hardware.accumulator_guarantee import guarantee_accumulator, reround_channels, worst_case_magnitudes


# ----------------------------------------------------------------------------------------- the model
def _largest_remainder(r, budget):
    """A2Q's rounding of the Fractions ``r`` with l1 norm at most ``budget`` (None: no bound)."""
    a = [abs(v) for v in r]
    t = [math.floor(v) for v in a]
    total = math.floor(sum(a) + Fraction(1, 2))
    if budget is not None:
        total = min(total, budget)
    extra = total - sum(t)
    order = sorted((k for k in range(len(r)) if a[k] > t[k]), key=lambda k: (-(a[k] - t[k]), k))
    for k in order[:max(extra, 0)]:
        t[k] += 1
    return [v if x >= 0 else -v for v, x in zip(t, r)]


def _model_rows(q, b, x_max, bits, per_tensor):
    """(q', b', alphas) of the docstring's rule; q a list of rows of ints, b a list of ints or None."""
    limit = (1 << (bits - 1)) - 1
    bias = [0] * len(q) if b is None else list(b)
    worst = [abs(bo) + sum(abs(v) for v in row) * x_max for bo, row in zip(bias, q)]
    alpha = [max(1.0, w / limit) for w in worst]              # w / limit: Python's correctly rounded int quotient
    over = [w > limit for w in worst]
    if per_tensor and any(over):
        alpha = [max(alpha)] * len(q)
        over = [True] * len(q)
    q2, b2 = [list(row) for row in q], list(bias)
    for o, row in enumerate(q):
        if not over[o]:
            continue
        a = Fraction(alpha[o])
        b2[o] = int(Fraction(bias[o]) / a)                  # int() of a Fraction truncates toward zero
        budget = (limit - abs(b2[o])) // x_max if x_max else None
        q2[o] = _largest_remainder([Fraction(v) / a for v in row], budget)
    return q2, (None if b is None else b2), alpha, worst


# ----------------------------------------------------------------------------------------- reround_channels
Q = [[10, -6, 3], [1, 2, -1], [7, 7, 7]]
B = [40, -3, 0]


@pytest.mark.parametrize("per_tensor", [False, True])
def test_reround_channels_against_the_model(per_tensor):
    q2, b2, alpha = reround_channels(np.array(Q), np.array(B), 8, 8, per_tensor=per_tensor)
    mq, mb, ma, worst = _model_rows(Q, B, 8, 8, per_tensor)
    assert worst == [192, 35, 168]                         # 40 + 19 * 8, 3 + 4 * 8, 21 * 8 (L = 127)
    assert q2.dtype == np.int64 and b2.dtype == np.int64 and alpha.dtype == np.float64
    assert q2.tolist() == mq and b2.tolist() == mb and alpha.tolist() == ma
    if not per_tensor:
        # by hand: row 0, alpha = 192/127: b' = trunc(26.46) = 26, T = (127 - 26) // 8 = 12, |q| / alpha =
        # 6.61, 3.97, 1.98 (sum 12.57 -> 13, capped at 12): floors 6 3 1, the two largest fractions get one more
        assert mq[0] == [6, -4, 2] and mb[0] == 26
        assert mq[1] == Q[1] and mb[1] == -3 and ma[1] == 1.0            # within the bound: untouched
        assert mq[2] == [5, 5, 5] and mb[2] == 0                           # 5.29 each, T = 15
    else:
        assert ma == [192 / 127] * 3 and mq[1] == [1, 1, -1] and mb[1] == -1
    for o in range(3):
        assert abs(mb[o]) + sum(abs(v) for v in mq[o]) * 8 <= 127


def test_reround_channels_default_is_per_channel_and_no_bias_gives_none():
    q2, b2, alpha = reround_channels(np.array(Q), None, 8, 8)
    mq, mb, ma, _ = _model_rows(Q, None, 8, 8, False)
    assert b2 is None and mb is None
    assert q2.tolist() == mq and alpha.tolist() == ma and q2[1].tolist() == Q[1]


def test_reround_channels_at_the_bound_is_untouched_one_above_is_rerounded():
    # P = 8, x_max = 8: |b| + 15 * 8 = 127 = L exactly: nothing changes
    q2, b2, alpha = reround_channels(np.array([[15, 0]]), np.array([7]), 8, 8)
    assert q2.tolist() == [[15, 0]] and b2.tolist() == [7] and alpha.tolist() == [1.0]
    q2, b2, alpha = reround_channels(np.array([[15, 0]]), np.array([8]), 8, 8)
    mq, mb, ma, worst = _model_rows([[15, 0]], [8], 8, 8, False)
    assert worst == [128] and alpha.tolist() == ma == [128 / 127]
    assert q2.tolist() == mq and b2.tolist() == mb
    # by hand: b' = trunc(8 * 127 / 128) = 7, T = (127 - 7) // 8 = 15, 15 / alpha = 14.88 rounds up within T
    assert mb == [7] and mq == [[15, 0]]


def test_reround_channels_x_max_zero_and_one():
    # x_max = 0: only the bias counts; alpha = 254 / 127 = 2 exactly, b' = 127, the weights halved with no l1 cap
    # (the budget is unbounded): 50.5, 25.5, 1.5 -> sum 77.5 rounds to 78: floors 50 25 1 and the first two ties
    q2, b2, alpha = reround_channels(np.array([[101, -51, 3]]), np.array([254]), 0, 8)
    assert alpha.tolist() == [2.0] and b2.tolist() == [127]
    assert q2.tolist() == [[51, -26, 1]] == _model_rows([[101, -51, 3]], [254], 0, 8, False)[0]
    # x_max = 1: T = 127 - 7 = 120
    q2, b2, alpha = reround_channels(np.array([[100, 60]]), np.array([10]), 1, 8)
    mq, mb, ma, _ = _model_rows([[100, 60]], [10], 1, 8, False)
    assert (q2.tolist(), b2.tolist(), alpha.tolist()) == (mq, mb, ma)
    assert mb == [7] and mq == [[75, 45]]


def test_reround_channels_narrow_dtypes_are_read_as_int64():
    """int8 codes of -128 (|-128| overflows int8) and a float array of integer codes."""
    q = np.array([[-128, 127, -128], [1, 0, 0]], np.int8)
    b = np.array([-128, 5], np.int8)
    q2, b2, alpha = reround_channels(q, b, 3, 10)
    mq, mb, ma, worst = _model_rows(q.astype(int).tolist(), b.astype(int).tolist(), 3, 10, False)
    assert worst == [128 + 383 * 3, 5 + 3]
    assert q2.dtype == np.int64 and b2.dtype == np.int64
    assert (q2.tolist(), b2.tolist(), alpha.tolist()) == (mq, mb, ma)
    q2, _, _ = reround_channels(np.array([[3.0, -4.0]]), None, 100, 8)
    assert q2.dtype == np.int64 and q2.tolist() == _model_rows([[3, -4]], None, 100, 8, False)[0]
    # a bias given as a column is read as one value per row
    q2, b2, _ = reround_channels(np.array(Q), np.array(B).reshape(3, 1), 8, 8)
    assert b2.tolist() == _model_rows(Q, B, 8, 8, False)[1]


def test_reround_channels_widths_two_and_sixty_four():
    q2, b2, alpha = reround_channels(np.array([[3, -2]]), np.array([1]), 1, 2)     # L = 1
    mq, mb, ma, _ = _model_rows([[3, -2]], [1], 1, 2, False)
    assert (q2.tolist(), b2.tolist(), alpha.tolist()) == (mq, mb, ma)
    big = [[2 ** 40, -(2 ** 40)]]
    q2, b2, alpha = reround_channels(np.array(big), np.array([2 ** 50]), 2 ** 20, 64)    # 2^61 + 2^50 < 2^63 - 1
    assert q2.tolist() == big and b2.tolist() == [2 ** 50] and alpha.tolist() == [1.0]


def test_reround_channels_refusals_name_the_problem():
    with pytest.raises(ValueError, match=re.escape("reround_channels: q must be [channels, K] integer codes, got "
                                                   "shape (4,)")):
        reround_channels(np.ones(4, np.int64), None, 1, 8)
    for bits, x_max in [(1, 5), (65, 5), (16, -1)]:
        with pytest.raises(ValueError, match=re.escape("reround_channels: need 2 <= accumulator_bits <= 64 and "
                                                       f"x_max >= 0, got {bits}, {x_max}")):
            reround_channels(np.ones((2, 3), np.int64), None, x_max, bits)
    with pytest.raises(ValueError, match=re.escape("reround_channels: b must have one value per row of q (3), got "
                                                   "(2,)")):
        reround_channels(np.ones((3, 4), np.int64), np.ones(2), 10, 16)


def test_worst_case_magnitudes_by_hand():
    q = np.array([[-128, 127, 0], [1, -1, 1]], np.int8)
    assert worst_case_magnitudes(q, None, 3) == [255 * 3, 9]
    assert worst_case_magnitudes(q, np.array([[-5, 7]]), 3) == [5 + 765, 7 + 9]
    assert worst_case_magnitudes(q, [2 ** 62, 0], 2) == [2 ** 62 + 510, 6]
    assert all(type(v) is int for v in worst_case_magnitudes(q, None, 3))


# ----------------------------------------------------------------------------------------- guarantee_accumulator
def _fc_graph(per_channel=True, bias="channel", name="g1", x_zp=0):
    o = len(Q)
    tensors = [TensorSpec("x", 4, True, (3,), 0.5, x_zp),
               TensorSpec("w", 8, True, scale=[0.5, 0.25, 0.125] if per_channel else 0.5,
                          axis=0 if per_channel else None, data=np.array(Q, np.int8)),
               TensorSpec("y", 8, True, (o,), 1.0, 0)]
    ins = ["x", "w"]
    if bias:
        bscale = {"channel": dict(scale=[0.25, 0.125, 0.0625], axis=0), "tensor": dict(scale=0.25),
                  "none": {}}[bias]
        tensors.append(TensorSpec("b", 32, True, data=np.array(B, np.int32), **bscale))
        ins.append("b")
    return IntegerGraph(tensors, [Node("fc", "fully_connected", ins, ["y"])], ["x"], ["y"], name,
                        {"source": "hand"})


@pytest.mark.parametrize("per_channel,bias", [(True, "channel"), (True, "none"), (True, None), (False, "tensor"),
                                              (False, "channel")])
def test_guarantee_accumulator_on_a_fully_connected_graph(per_channel, bias):
    g = _fc_graph(per_channel, bias)
    res = guarantee_accumulator(g, 8)
    b = B if bias else None
    mq, mb, ma, worst = _model_rows(Q, b, 8, 8, not per_channel)
    worst_after = max(abs(bo) + sum(abs(v) for v in row) * 8 for bo, row in zip(mb or [0] * 3, mq))
    assert res.accumulator_bits == 8 and type(res.accumulator_bits) is int
    assert res.records == [{"node": "fc", "op": "fully_connected", "x_max": 8, "worst_before": max(worst),
                            "worst_after": worst_after, "channels_changed": sum(a > 1 for a in ma),
                            "alpha_max": max(ma), "limit": 127}]
    assert res.records[0]["channels_changed"] == (2 if per_channel else 3)
    ng = res.graph
    assert ng.name == "g1" and ng.meta == {"source": "hand", "accumulator_guarantee": {"accumulator_bits": 8,
                                                                                       "nodes": ["fc"]}}
    assert g.meta == {"source": "hand"}
    w = ng.tensors["w"]
    assert w.data.dtype == np.int8 and w.data.tolist() == mq
    old_scale = [0.5, 0.25, 0.125] if per_channel else [0.5]
    assert w.scale.tolist() == [s * a for s, a in zip(old_scale, ma)]
    assert g.tensors["w"].data.tolist() == Q and g.tensors["w"].scale.tolist() == old_scale   # input unchanged
    if bias:
        bt = ng.tensors["b"]
        assert bt.data.dtype == np.int32 and bt.data.tolist() == mb
        old_b = {"channel": [0.25, 0.125, 0.0625], "tensor": [0.25], "none": None}[bias]
        if old_b is None:
            assert bt.scale is None
        elif len(old_b) == 3:
            assert bt.scale.tolist() == [s * a for s, a in zip(old_b, ma)]
        else:
            assert bt.scale.tolist() == [old_b[0] * ma[0]]
    # and the guarantee itself, by a loop over the new codes
    x_max = 8
    for o in range(3):
        bo = int(ng.tensors["b"].data[o]) if bias else 0
        assert abs(bo) + sum(abs(int(v)) for v in w.data[o]) * x_max <= 127


def test_an_absent_bias_named_by_an_empty_input():
    g = _fc_graph(bias=None)
    g = IntegerGraph(list(g.tensors.values()), [Node("fc", "fully_connected", ["x", "w", ""], ["y"])], ["x"], ["y"])
    res = guarantee_accumulator(g, 8)
    mq, _, ma, worst = _model_rows(Q, None, 8, 8, False)
    assert res.records[0]["worst_before"] == max(worst) == 168 and res.graph.tensors["w"].data.tolist() == mq


def test_guarantee_accumulator_of_a_graph_within_the_bound_changes_nothing():
    g = _fc_graph()
    res = guarantee_accumulator(g, 9)                       # L = 255 >= 192
    assert res.records == [{"node": "fc", "op": "fully_connected", "x_max": 8, "worst_before": 192,
                            "worst_after": 192, "channels_changed": 0, "alpha_max": 1.0, "limit": 255}]
    assert res.graph.tensors["w"].data.tolist() == Q and res.graph.tensors["b"].data.tolist() == B
    assert res.graph.tensors["w"].scale.tolist() == [0.5, 0.25, 0.125]


def test_x_max_from_an_asymmetric_zero_point_and_a_node_named_as_a_string():
    # 4-bit codes [-8, 7], zero point 3: x_max = max(7 - 3, 3 + 8) = 11
    g = _fc_graph(x_zp=3)
    res = guarantee_accumulator(g, 8, nodes="fc")
    mq, mb, ma, worst = _model_rows(Q, B, 11, 8, False)
    assert res.records[0]["x_max"] == 11 and res.records[0]["worst_before"] == max(worst) == 40 + 19 * 11
    assert res.graph.tensors["w"].data.tolist() == mq and res.graph.tensors["b"].data.tolist() == mb


def test_widths_two_and_sixty_four_are_accepted():
    for bits in (2, 64):
        res = guarantee_accumulator(_fc_graph(), bits)
        assert res.accumulator_bits == bits and res.records[0]["limit"] == (1 << (bits - 1)) - 1
    res = guarantee_accumulator(_fc_graph(), 2)
    mq, mb, _, _ = _model_rows(Q, B, 8, 2, False)
    assert res.graph.tensors["w"].data.tolist() == mq and res.graph.tensors["b"].data.tolist() == mb


def test_table_typed_out():
    res = guarantee_accumulator(_fc_graph(), 8)
    assert res.table() == (
        "node  op               x_max  worst before  worst after  channels changed  max alpha\n"
        "----  ---------------  -----  ------------  -----------  ----------------  ---------\n"
        "fc    fully_connected      8           192          122                 2  1.5118")


# ----------------------------------------------------------------------------------------- refusals
def _two_fc(shared):
    """Two FC nodes; ``shared`` = "w" or "b": the second uses the first's weights / bias."""
    tensors = [TensorSpec("x", 4, True, (3,), 0.5, 0),
               TensorSpec("w", 8, True, scale=0.5, data=np.array(Q, np.int8)),
               TensorSpec("b", 32, True, scale=0.25, data=np.array(B, np.int32)),
               TensorSpec("w2", 8, True, scale=0.5, data=np.array(Q, np.int8)),
               TensorSpec("b2", 32, True, scale=0.25, data=np.array(B, np.int32)),
               TensorSpec("y", 4, True, (3,), 1.0, 0), TensorSpec("z", 8, True, (3,), 1.0, 0)]
    n2 = ["y", "w" if shared == "w" else "w2", "b" if shared == "b" else "b2"]
    return IntegerGraph(tensors, [Node("fc1", "fully_connected", ["x", "w", "b"], ["y"]),
                                  Node("fc2", "fully_connected", n2, ["z"])], ["x"], ["z"])


@pytest.mark.parametrize("shared", ["w", "b"])
def test_a_tensor_shared_by_two_nodes_is_refused(shared):
    g = _two_fc(shared)
    with pytest.raises(ValueError, match=re.escape(f"guarantee_accumulator: tensor {shared!r} is shared by nodes "
                                                   "['fc1', 'fc2']; re-rounding it for node 'fc1' would change "
                                                   "the others")):
        guarantee_accumulator(g, 8)
    res = guarantee_accumulator(_two_fc(None), 8)
    assert [r["node"] for r in res.records] == ["fc1", "fc2"]
    assert res.graph.meta["accumulator_guarantee"] == {"accumulator_bits": 8, "nodes": ["fc1", "fc2"]}


def test_weights_read_as_data_by_another_node_are_refused_as_shared():
    """A second node reading the FC's weights as its input 0 (a clamp of the weight tensor): re-rounding them would
    change that node's output too. The shared-tensor check counted only inputs 1 and 2 of every node, so this
    graph was re-rounded silently and the clamp's output changed (e.g. [10, -6, 3] -> [8, -4, 2])."""
    tensors = [TensorSpec("x", 4, True, (3,), 0.5, 0), TensorSpec("w", 8, True, scale=0.5, data=np.array(Q, np.int8)),
               TensorSpec("y", 8, True, (3,), 1.0, 0), TensorSpec("z", 8, True, (3, 3), 0.5, 0)]
    g = IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"]),
                               Node("r", "clamp", ["w"], ["z"], {"lo": 0, "hi": 5})], ["x"], ["y", "z"])
    with pytest.raises(ValueError, match=re.escape("guarantee_accumulator: tensor 'w' is shared by nodes ['fc', "
                                                   "'r']; re-rounding it for node 'fc' would change the others")):
        guarantee_accumulator(g, 8)


def _where(node="fc", op="fully_connected"):
    return f"guarantee_accumulator: node {node!r} ({op})"


def test_bad_nodes_are_refused_by_name():
    # The graph itself refuses an input without a scale or zero point and weights without a scale or computed at
    # run time (IntegerGraph's MAC checks); an edit after construction (a tensor's fields are assignable, see
    # fxpsim.graph.edits) reaches guarantee_accumulator's own checks
    def fc(**w_kw):
        tensors = [TensorSpec("x", 4, True, (3,), 0.5, 0), TensorSpec("w", 8, True, data=np.array(Q, np.int8), **w_kw),
                   TensorSpec("y", 8, True, (3,), 1.0, 0)]
        return IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])

    with pytest.raises(ValueError, match="the weights need a scale"):
        fc()
    for field, value in (("zero_point", None), ("bits", 0)):
        g = fc(scale=0.5)
        setattr(g.tensors["x"], field, value)
        with pytest.raises(ValueError, match=re.escape(f"{_where()}: its input 'x' is not integer codes with a "
                                                       "zero point")):
            guarantee_accumulator(g, 8)
    g = fc(scale=0.5)
    g.tensors["w"].scale = None
    with pytest.raises(ValueError, match=re.escape(f"{_where()}: its weights 'w' are not constant codes with a "
                                                   "scale")):
        guarantee_accumulator(g, 8)
    g = fc(scale=0.5)
    g.tensors["w"].data = None
    with pytest.raises(ValueError, match=re.escape(f"{_where()}: its weights 'w' are not constant codes with a "
                                                   "scale")):
        guarantee_accumulator(g, 8)
    # a nonzero weight zero point
    tensors = [TensorSpec("x", 4, True, (3,), 0.5, 0),
               TensorSpec("w", 8, True, scale=0.5, zero_point=1, data=np.array(Q, np.int8)),
               TensorSpec("y", 8, True, (3,), 1.0, 0)]
    g = IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])
    with pytest.raises(ValueError, match=re.escape(f"{_where()}: its weights 'w' have a nonzero zero point; the "
                                                   "bound needs symmetric weights (zero point 0)")):
        guarantee_accumulator(g, 8)
    # bias_shift, product_shift, each alone
    for attrs in ({"bias_shift": 1}, {"product_shift": 2}):
        tensors = [TensorSpec("x", 4, True, (3,), 0.5, 0),
                   TensorSpec("w", 8, True, scale=0.5, data=np.array(Q, np.int8)),
                   TensorSpec("y", 8, True, (3,), 1.0, 0)]
        g = IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"], attrs)], ["x"], ["y"])
        with pytest.raises(ValueError, match=re.escape(f"{_where()}: bias_shift / product_shift are not modelled by "
                                                       "the re-rounding")):
            guarantee_accumulator(g, 8)
    # per-channel scales along the wrong axis (a depthwise conv's weights [1, KH, KW, C] along axis 0 is fine
    # for the shape, wrong for the op: its output channels are axis 3)
    w = np.array([[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]], np.int8)              # [1, 2, 2, 2]
    tensors = [TensorSpec("x", 4, True, (3, 3, 2), 0.5, 0),
               TensorSpec("w", 8, True, scale=[0.5, 0.25], axis=1, data=w),
               TensorSpec("y", 8, True, (2, 2, 2), 1.0, 0)]
    g = IntegerGraph(tensors, [Node("dw", "depthwise_conv2d", ["x", "w"], ["y"])], ["x"], ["y"])
    with pytest.raises(ValueError, match=re.escape(f"{_where('dw', 'depthwise_conv2d')}: per-channel weight scales "
                                                   "along axis 1, expected 3 (the output channels)")):
        guarantee_accumulator(g, 8)


def test_unsupported_ops_and_arguments_are_refused_by_name():
    g = _fc_graph()
    tensors = list(g.tensors.values()) + [TensorSpec("z", 8, True, (3,), 1.0, 0)]
    g2 = IntegerGraph(tensors, g.nodes + [Node("relu", "clamp", ["y"], ["z"], {"lo": 0, "hi": 7})], ["x"], ["z"])
    with pytest.raises(ValueError, match=re.escape(
            "guarantee_accumulator: node 'relu' (clamp): not a MAC op whose weights can be re-rounded (conv2d, "
            "fully_connected, depthwise_conv2d, tflite_conv2d, tflite_fully_connected, tflite_depthwise_conv2d, "
            "qlinear_conv, qlinear_matmul)")):
        guarantee_accumulator(g2, 8, nodes=["fc", "relu"])
    assert [r["node"] for r in guarantee_accumulator(g2, 8).records] == ["fc"]       # relu: not a MAC, skipped
    with pytest.raises(TypeError, match=re.escape("guarantee_accumulator takes an IntegerGraph, got str")):
        guarantee_accumulator("model.tflite", 8)
    for bad in (1, 65, True, 8.0, "8"):
        with pytest.raises(ValueError, match=re.escape("guarantee_accumulator: accumulator_bits must be an int in "
                                                       f"2..64, got {bad!r}")):
            guarantee_accumulator(g, bad)
    assert guarantee_accumulator(g, np.int64(8)).accumulator_bits == 8


def test_a_mac_op_it_cannot_reround_is_refused_unless_left_out():
    """An hls4ml Dense accumulates (it has a MAC view) but is not a supported op: refused, naming it, unless
    nodes= leaves it out."""
    from fxpsim.frontends.hls4ml import Hls4mlModel
    layers = [{"name": "x", "class": "Input", "result_t": "ap_fixed<6,3>"},
              {"name": "fc1", "class": "Dense", "result_t": "ap_fixed<12,8>", "n_in": 2, "n_out": 2,
               "accum_t": "ap_fixed<20,10>", "weight_t": "ap_fixed<6,1>", "bias_t": "ap_fixed<8,4>"}]
    weights = {"fc1": {"weight": np.array([[0.5, -0.25], [0.125, 0.75]]), "bias": np.array([0.5, -1.0])}}
    net = Hls4mlModel.from_layers(layers, weights).to_graph((2,), name="h")
    with pytest.raises(ValueError, match=re.escape("guarantee_accumulator: node 'fc1' (hls4ml_dense) accumulates "
                                                   "but its weights cannot be re-rounded; pass nodes=[...] without "
                                                   "it")):
        guarantee_accumulator(net, 16)
    res = guarantee_accumulator(net, 16, nodes=[])
    assert res.records == [] and res.graph.meta["accumulator_guarantee"] == {"accumulator_bits": 16, "nodes": []}
    assert res.graph.name == "h"
