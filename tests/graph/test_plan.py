"""Compiled execution plans (fxpsim.graph.plan) against the node-by-node run, and their invalidation.

* Every TFLite fixture (``tests/vectors/tflite_*``) under each of LiteRT's three kernel sets, every ONNX and QONNX
  fixture and a converted ``fxpsim.nn`` model: ``graph.run`` through the plan equals ``graph.run(plan=False)``
  (every node dispatched and derived again) in every output, every intermediate tensor (``keep=True``) and every
  trace field, at batch 1 and at the fixture's batch, on the graph's own datapath and on a 16-bit saturating one;
  ``trace="peaks"`` too. The node-by-node path is itself checked against the runtimes by the frontends' tests.
* A property test (hypothesis): random accumulator widths, overflow modes, orders and bias placements.
* Invalidation: every kind of edit (node attributes at any depth, node inputs, the node list, a tensor's scale,
  a constant's codes, meta at any depth, the datapath) gives a new plan whose result is the node-by-node result of
  the edited graph; a stale plan object refuses to run; in-place writes to constants are refused; runs are not
  edits; pickled graphs keep the tracking.
"""
from __future__ import annotations

import copy
import pickle
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.graph import edits
from fxpsim.graph.ir import Datapath
from same_tree import assert_same  # noqa: E402

assert_same_nan = partial(assert_same, nan_equal=True)     # float traces hold NaN

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
# (tflite_float/ holds float models: float graphs, tests/frontends/test_tflite_float_graph.py)
TFLITE_MODELS = sorted(p.relative_to(VECTORS).as_posix() for p in VECTORS.glob("tflite_*/*.tflite")
                       if p.parent.name != "tflite_float")
KERNELS = ("reference", "builtin", "xnnpack")
#: the quantized ONNX and QONNX fixtures (``float_*`` are the float sources of the quantized ones: not imported)
ONNX_MODELS = sorted(p.relative_to(VECTORS).as_posix() for d in ("onnx_models", "qonnx") for p in (VECTORS / d).glob("*.onnx")
                     if p.with_suffix(".npz").exists() and not p.name.startswith("float_"))
SAT16 = Datapath(name="sat16", accumulator_bits=16, accumulator_overflow="saturate")


def _random_inputs(graph, n, seed=0):
    """One batch per graph input: int codes uniform over the type's range (extremes included), floats N(0, 2),
    unquantized integers (indices) 0 or 1."""
    rng = np.random.default_rng(seed)
    out = []
    for name in graph.inputs:
        spec = graph.tensors[name]
        if spec.is_float:
            out.append(rng.normal(0, 2, (n,) + spec.shape).astype(np.float32))
        elif spec.scale is None:
            out.append(rng.integers(0, 2, (n,) + spec.shape).astype(spec.dtype))
        else:
            lo, hi = spec.code_range
            a = rng.integers(lo, hi + 1, (n,) + spec.shape)
            a.reshape(n, -1)[:, 0] = lo
            out.append(a.astype(spec.dtype))
    return out


def _check_plan_equals_nodes(graph, x, datapath=None, traces=(False, True)):
    for trace in traces:
        planned = graph.run(x, datapath, trace=trace, keep=True)
        nodes = graph.run(x, datapath, trace=trace, keep=True, plan=False)
        assert_same_nan(planned, nodes, f"{graph.name} trace={trace}")
        assert len(planned[2]) == len(nodes[2]) >= len(graph.nodes)
    assert_same_nan(graph.run(x, datapath), graph.run(x, datapath, plan=False), f"{graph.name} outputs")


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("model", TFLITE_MODELS)
def test_tflite_fixtures_plan_equals_node_by_node(model, kernels):
    pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
    if not fxpsim.tflite_coverage(VECTORS / model, kernels=kernels).imports(kernels):
        # a fixture of an operator this kernel set does not import (its coverage says so): refused by name
        with pytest.raises(ValueError, match="not imported by fxpsim.import_tflite"):
            fxpsim.import_tflite(VECTORS / model, kernels=kernels)
        return
    g = fxpsim.import_tflite(VECTORS / model, kernels=kernels)
    for n in (1, 5):
        _check_plan_equals_nodes(g, _random_inputs(g, n, seed=n))


@pytest.mark.parametrize("model", ["tflite_models/mobilenet_v2_block.tflite", "tflite_models/mobilenet_v3_block.tflite"])
def test_mobilenet_blocks_on_other_datapaths_and_peaks(model):
    pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
    g = fxpsim.import_tflite(VECTORS / model)
    x = _random_inputs(g, 3)
    _check_plan_equals_nodes(g, x, SAT16, traces=(False, True, "peaks"))
    _check_plan_equals_nodes(g, x, fxpsim.preset("int8-acc16-wrap"))
    plan = g.compile(None, 3)
    assert_same_nan(plan.run(x, trace=True, keep=True), g.run(x, trace=True, keep=True, plan=False), "compiled plan")
    # the plan's MAC, ADD and MEAN nodes run prepared steps (not the op's full run)
    prepared = sum(getattr(step, "__name__", "") == "step" for _, step, _, _ in plan.steps)
    assert prepared == sum(n.op in ("conv2d", "depthwise_conv2d", "fully_connected", "add", "tflite_mean")
                           for n in g.nodes) > 0


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_fixtures_plan_equals_node_by_node(model):
    pytest.importorskip("onnx", reason="the onnx package is not installed (pip install -e '.[onnx]')")
    g = fxpsim.import_model(VECTORS / model)
    for n in (1, 4):
        _check_plan_equals_nodes(g, _random_inputs(g, n, seed=n))
    d = np.load(VECTORS / model.replace(".onnx", ".npz"))      # the fixture's own inputs, where it has them
    if len(g.inputs) == 1 and ("input" in d or "x" in d):
        full = d["input"] if "input" in d else d["x"]
        if np.all(np.isfinite(full)):
            for x in (full[:1], full):
                _check_plan_equals_nodes(g, [x])


@pytest.fixture(scope="module")
def converted():
    from fxpsim import nn
    rng = np.random.default_rng(3)
    wq = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
    aq = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}
    model = nn.small_cnn((8, 8, 1), weight_quantizer=wq, activation_quantizer=aq, seed=0)
    x = rng.uniform(0, 16, (32, 8, 8, 1)).astype(np.float32)
    return fxpsim.convert(model, "int8-acc16-sat", x), x


def test_converted_fxpsim_model_plan_equals_node_by_node(converted):
    g, x = converted
    for cfg in (None, fxpsim.preset("int8-acc16-sat"), fxpsim.preset("int4-acc12-sat"), SAT16):
        for n in (1, 32):
            _check_plan_equals_nodes(g, x[:n], cfg, traces=(False, True, "peaks"))


def test_property_random_datapaths_plan_equals_node_by_node():
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed")
    st = pytest.importorskip("hypothesis.strategies")
    pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
    g = fxpsim.import_tflite(VECTORS / "tflite_models/mobilenet_v2_block.tflite")

    @hypothesis.settings(max_examples=25, deadline=None)
    @hypothesis.given(bits=st.integers(8, 40), overflow=st.sampled_from(["wrap", "saturate"]),
                      order=st.sampled_from(["sequential", "tree"]), bias=st.sampled_from(["after", "preload"]),
                      at=st.sampled_from(["add", "end"]), n=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
    def check(bits, overflow, order, bias, at, n, seed):
        dp = Datapath(accumulator_bits=bits, accumulator_overflow=overflow, accumulator_order=order,
                      bias_add=bias, overflow_at=at)
        x = _random_inputs(g, n, seed)
        assert_same_nan(g.run(x, dp, trace=True, keep=True), g.run(x, dp, trace=True, keep=True, plan=False), str(dp))
    check()


# ------------------------------------------------------------------------------------------------ invalidation
@pytest.fixture
def block():
    pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
    g = fxpsim.import_tflite(VECTORS / "tflite_models/mobilenet_v2_block.tflite")
    return g, _random_inputs(g, 2)


def _plan_of(g, x, dp=None):
    g.run(x, dp)
    return g.__dict__["_plans"][(dp or g.default_datapath, tuple(a.shape for a in x))]


def _edited_run_is_fresh(g, x, edit):
    """Run, edit, run again: a new plan, whose result is the edited graph's node-by-node result."""
    before = g.run(x, trace=True)[0]
    old = _plan_of(g, x)
    edit(g)
    after = g.run(x, trace=True, keep=True)
    assert _plan_of(g, x) is not old and not old.valid()
    assert_same_nan(after, g.run(x, trace=True, keep=True, plan=False), "after the edit")
    with pytest.raises(ValueError, match="stale"):
        old.run(x)
    return before, after[0]


def test_edit_node_attribute_invalidates(block):
    g, x = block
    conv = next(n for n in g.nodes if n.op == "conv2d" and n.attrs.get("activation") == "relu6")
    _edited_run_is_fresh(g, x, lambda g: conv.attrs.__setitem__("activation", "none"))
    before, after = _edited_run_is_fresh(g, x, lambda g: conv.attrs.__setitem__("clip", [-3, 3]))
    assert not np.array_equal(before, after)


def test_edit_nested_attribute_and_node_fields_invalidate(block):
    g, x = block
    conv = next(n for n in g.nodes if n.op == "depthwise_conv2d")
    _edited_run_is_fresh(g, x, lambda g: conv.attrs.__setitem__("padding", [[1, 1], [1, 1]]))
    _edited_run_is_fresh(g, x, lambda g: conv.attrs["padding"][0].__setitem__(0, 1))     # same value: still an edit
    _edited_run_is_fresh(g, x, lambda g: setattr(conv, "attrs", dict(conv.attrs, clip=[-100, 100])))
    add = next(n for n in g.nodes if n.op == "add")
    _edited_run_is_fresh(g, x, lambda g: add.inputs.reverse())


def test_edit_node_list_and_graph_fields_invalidate(block):
    g, x = block
    _edited_run_is_fresh(g, x, lambda g: g.nodes.__setitem__(0, copy.deepcopy(g.nodes[0])))
    _edited_run_is_fresh(g, x, lambda g: setattr(g, "nodes", list(g.nodes)))
    _edited_run_is_fresh(g, x, lambda g: g.outputs.append(g.nodes[0].outputs[0]))


def test_edit_tensor_scale_invalidates(block):
    g, x = block
    out = g.tensors[g.nodes[0].outputs[0]]
    with pytest.raises(ValueError, match="read-only"):
        out.scale[0] = 1.0
    before, after = _edited_run_is_fresh(g, x, lambda g: setattr(out, "scale", out.scale * 2))
    assert not np.array_equal(before, after) and not out.scale.flags.writeable


def test_edit_constant_codes(block):
    g, x = block
    w = g.tensors[g.nodes[0].inputs[1]]
    with pytest.raises(ValueError, match="read-only"):
        w.data[0] = 0
    before, after = _edited_run_is_fresh(g, x, lambda g: setattr(w, "data", np.zeros_like(w.data)))
    assert not np.array_equal(before, after)
    # a constant made writeable again (a deliberate flag flip) cannot hold a stale plan either
    plan = _plan_of(g, x)
    w.data.flags.writeable = True
    w.data[...] = 1
    assert not plan.valid()
    assert_same_nan(g.run(x, trace=True), g.run(x, trace=True, plan=False), "after writing the codes")


def test_edit_meta_and_datapath_invalidate(block):
    g, x = block
    g.meta["notes"] = []
    _edited_run_is_fresh(g, x, lambda g: g.meta["datapath"].__setitem__("accumulator_bits", 12))
    assert g.default_datapath.accumulator_bits == 12
    _edited_run_is_fresh(g, x, lambda g: g.meta.__setitem__("datapath", {}))
    a, b = _plan_of(g, x, SAT16), _plan_of(g, x, Datapath(name="sat16", accumulator_bits=16,
                                                           accumulator_overflow="wrap"))
    assert a is not b and a.valid() and b.valid() and a is _plan_of(g, x, SAT16)


def test_runs_are_not_edits_and_plans_are_reused(block):
    g, x = block
    g.run(x, trace=True, keep=True)
    plan, count = _plan_of(g, x), edits.EDITS[0]
    for trace in (False, True, "peaks"):
        g.run(x, trace=trace, keep=True)
    assert edits.EDITS[0] == count and _plan_of(g, x) is plan
    g.run(x[0][:1])
    assert len(g.__dict__["_plans"]) == 2


def test_plan_refuses_other_shapes_and_bad_arguments(block):
    g, x = block
    plan = g.compile(None, 2)
    with pytest.raises(ValueError, match="compiled for input shapes"):
        plan.run([x[0][:1]])
    with pytest.raises(ValueError, match="batch_shape"):
        g.compile(None, [(2, 3, 3, 3)])
    with pytest.raises(ValueError, match="trace"):
        plan.run(x, trace="yes")
    with pytest.raises(ValueError, match="codes outside"):
        plan.run([np.full_like(x[0], 127).astype(np.int16) + 1])


def test_unhashable_datapath_runs_node_by_node(block):
    g, x = block

    class Mutable:       # the Datapath fields on a plain, unhashable object
        __hash__ = None

        def __init__(self):
            self.__dict__.update(vars(Datapath(accumulator_bits=16, accumulator_overflow="saturate")))
    g.__dict__.pop("_plans", None)
    got = g.run(x, Mutable(), trace=True)
    assert "_plans" not in g.__dict__
    assert_same_nan(got, g.run(x, SAT16, trace=True, plan=False), "unhashable datapath")


def test_pickled_and_copied_graphs_keep_tracking(block):
    g, x = block
    g.run(x)
    for h in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert "_plans" not in h.__dict__
        w = h.tensors[h.nodes[0].inputs[1]]
        assert not w.data.flags.writeable and not w.scale.flags.writeable
        assert_same_nan(h.run(x, trace=True), g.run(x, trace=True), "copy")
        count = edits.EDITS[0]
        h.nodes[0].attrs["activation"] = "none"
        h.meta["datapath"]["rounding"] = "half_up"
        assert edits.EDITS[0] == count + 2
        assert_same_nan(h.run(x, trace=True), h.run(x, trace=True, plan=False), "edited copy")


def test_prepared_steps_fall_back_when_the_fused_kernels_are_switched_off(block, monkeypatch):
    from fxpsim.datapath import conv_int8
    g, x = block
    plan = g.compile(None, 2)
    fast = plan.run(x, trace=True, keep=True)
    monkeypatch.setattr(conv_int8, "_k", None)          # the general accumulate + requantize path, and no table
    slow = plan.run(x, trace=True, keep=True)
    assert_same_nan(slow, g.run(x, trace=True, keep=True, plan=False), "kernels off")
    assert_same_nan(fast[0], slow[0], "outputs")
