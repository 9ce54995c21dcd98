"""The benchmark's MobileNetV2 (``benchmarks/models/mobilenet_v2_035_48.tflite``, 65 nodes) through the compiled
plan, under each of LiteRT's three kernel sets, at batch 1 and 3, called several times (the prepared steps' kept
buffers and the fused kernel's kept weight layouts reused):

* outputs, every kept tensor (``keep=True``) and every trace field equal the node-by-node run
  (``plan=False``);
* the outputs equal LiteRT's own kernels run live, image by image (and, for ``reference`` and ``builtin``, every
  intermediate tensor LiteRT preserves);
* a weight changed after a run (a new constant array, or the old one written in place) is what the next run
  computes with: a new plan, equal to the node-by-node run of the edited graph, and the old plan object refuses
  to run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fxpsim
from same_tree import assert_same  # noqa: E402
from litert_interpreter import litert_interpreter  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "mobilenet_v2_035_48.tflite"
KERNELS = ("reference", "builtin", "xnnpack")

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="benchmarks/models/mobilenet_v2_035_48.tflite not found")


def _inputs(graph, n, seed):
    spec = graph.tensors[graph.inputs[0]]
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(0.0, 40.0, (n,) + spec.shape), -128, 127)
    x[n // 2:] = rng.integers(-128, 128, (n - n // 2,) + spec.shape)          # every code, saturating inputs
    return x.astype(np.int8)


@pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors.:UserWarning")
@pytest.mark.parametrize("kernels", KERNELS)
def test_plan_equals_node_by_node_and_litert_live(kernels):
    g = fxpsim.import_tflite(MODEL, kernels=kernels)
    it = litert_interpreter(MODEL, kernels)
    din, dout = it.get_input_details()[0], it.get_output_details()[0]
    by_index = {int(i): t for t, i in g.meta["tflite_tensors"].items()}
    for batch in (1, 3):
        for seed in range(3):                       # repeated calls of one plan, new data each time
            x = _inputs(g, batch, seed + 10 * batch)
            for trace in (False, True):
                planned = g.run(x, trace=trace, keep=True)
                nodes = g.run(x, trace=trace, keep=True, plan=False)
                assert_same(planned, nodes, f"{kernels} batch {batch} seed {seed} trace={trace}")
            y, _, kept = planned
            assert_same(g.run(x), nodes[0], f"{kernels} batch {batch} outputs")
            for s in range(batch):
                it.set_tensor(din["index"], x[s:s + 1])
                it.invoke()
                np.testing.assert_array_equal(y[s], it.get_tensor(dout["index"])[0], err_msg=f"{kernels} image {s}")
                if kernels != "xnnpack":            # (XNNPACK fuses its intermediates into its partitions)
                    for index, name in by_index.items():
                        if name in kept:
                            np.testing.assert_array_equal(kept[name][s], it.get_tensor(index)[0],
                                                          err_msg=f"{kernels} tensor {name} image {s}")


def _mac_weight(g):
    """The name of the weight tensor of the graph's first conv node."""
    node = next(n for n in g.nodes if "conv2d" in n.op and not n.op.endswith("depthwise_conv2d"))
    return node.inputs[1]


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_weight_edited_after_a_run_is_not_run_by_the_old_plan(kernels):
    g = fxpsim.import_tflite(MODEL, kernels=kernels)
    x = _inputs(g, 3, 1)
    before = g.run(x)
    plan = g.compile(batch_shape=3)
    assert_same(plan.run(x), before, f"{kernels} the plan object")
    w = _mac_weight(g)
    t = g.tensors[w]
    t.data = (-t.data.astype(np.int16)).clip(-127, 127).astype(np.int8)      # a new constant array
    after = g.run(x)
    assert_same(after, g.run(x, plan=False), f"{kernels} after a new weight array")
    assert not np.array_equal(after, before)
    with pytest.raises(ValueError, match="stale"):
        plan.run(x)
    plan = g.compile(batch_shape=3)
    data = g.tensors[w].data
    data.flags.writeable = True                                          # the same array, written in place
    data[...] = np.roll(data, 1, axis=0)
    again = g.run(x)
    assert_same(again, g.run(x, plan=False), f"{kernels} after an in-place write")
    assert not np.array_equal(again, after)
    with pytest.raises(ValueError, match="stale"):
        plan.run(x)


def test_xnnpack_add_table_step_equals_the_node_run_broadcast_and_fallback():
    from fxpsim.graph.ops import OPS
    from fxpsim.graph.datapath_settings import node_datapath
    g = fxpsim.import_tflite(MODEL, kernels="xnnpack")
    i, node = next((i, n) for i, n in enumerate(g.nodes) if n.op == "tflite_add")
    dp = node_datapath(g.default_datapath, node, i)
    shape = g.tensors[node.inputs[0]].shape
    rng = np.random.default_rng(5)
    step = OPS["tflite_add"].prepare(g, node, dp, [(2,) + shape, (1,) + shape])
    assert step is not None
    for shapes in ([(2,) + shape, (1,) + shape], [(3,) + shape, (3,) + shape]):    # prepared; another (the run)
        ins = [rng.integers(-128, 128, s).astype(np.int8) for s in shapes]
        ins[0].reshape(-1)[:2] = (-128, 127)
        for trace in (False, True):
            assert_same(step(ins, trace), OPS["tflite_add"].run(g, node, ins, dp, trace), f"{shapes} trace={trace}")
