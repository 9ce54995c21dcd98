"""guarantee_accumulator: an imported graph's weights re-rounded so a P-bit accumulator never overflows.

* Property (hypothesis, Python ints and Fractions): every re-rounded row satisfies
  |b'| + ||q'||_1 x_max <= 2^(P-1) - 1, rows within the bound are untouched, and the codes move by less than one
  new LSB (|q' - q/alpha| < 1, |b' - b/alpha| < 1).
* The imported MobileNetV2 at P = 16: the bound recomputed here from the new graph's tensors holds for every
  channel of every MAC node, and adversarial inputs -- sign-aligned maxima and minima of the receptive field of
  the tightest channels -- overflow no add, saturating or wrapping, while the same construction overflows the
  original graph; on real images the P-bit run equals the graph's own exact run.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import fxpsim
from fxpsim.graph.ops import run_node
from fxpsim.hardware.accumulator_guarantee import SUPPORTED_OPS, guarantee_accumulator, reround_channels

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed (pip install -e '.[test]')")
from hypothesis import given, settings, strategies as st  # noqa: E402

MODEL = "tests/vectors/mobilenet_v2/mobilenet_v2_035_48.tflite"
IMAGES = "tests/vectors/mobilenet_v2/eval_images.npz"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(8, 32), st.integers(1, 255), st.booleans(),
       st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_reround_channels_keeps_every_row_within_the_bound(rows, k, bits, x_max, has_bias, per_tensor, seed):
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, (rows, k))
    q[rng.random((rows, k)) < 0.3] = 0
    b = rng.integers(-(1 << min(bits, 31)), 1 << min(bits, 31), rows) if has_bias else None
    q2, b2, alpha = reround_channels(q, b, x_max, bits, per_tensor=per_tensor)
    limit = (1 << (bits - 1)) - 1
    for o in range(rows):
        bo, bo2 = (int(b[o]), int(b2[o])) if has_bias else (0, 0)
        before = abs(bo) + sum(abs(int(v)) for v in q[o]) * x_max
        assert abs(bo2) + sum(abs(int(v)) for v in q2[o]) * x_max <= limit
        if before <= limit and not (per_tensor and alpha[o] > 1):
            assert alpha[o] == 1 and q2[o].tolist() == q[o].tolist() and bo2 == bo
        else:
            a = Fraction(float(alpha[o]))
            assert a > 1
            assert all(abs(int(v2) - Fraction(int(v)) / a) < 1 for v, v2 in zip(q[o], q2[o]))
            assert abs(bo2 - Fraction(bo) / a) < 1 and abs(bo2) <= abs(bo)


@pytest.fixture(scope="module")
def graphs():
    g = fxpsim.import_model(MODEL)
    return g, guarantee_accumulator(g, 16)


def _weights_rows(graph, node):
    w = np.moveaxis(graph.tensors[node.inputs[1]].data.astype(np.int64), SUPPORTED_OPS[node.op], 0)
    return w.reshape(w.shape[0], -1)


def _adversarial(graph, node, channels):
    """Inputs [2 len(channels), H, W, C]: for each channel, the receptive field of one output set to the code
    that makes every product (and so every partial sum) as large (first half) or as small (second half) as the
    input range allows; the other codes at the zero point (zero products)."""
    xs, ws = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    lo, hi = xs.code_range
    zx = int(xs.zero_point[0])
    w = ws.data.astype(np.int64)
    x = np.full((2 * len(channels),) + tuple(xs.shape), zx, np.int64)
    for t, o in enumerate(channels):
        for half, sign in ((0, 1), (1, -1)):
            img = x[t + half * len(channels)]
            if node.op == "fully_connected":
                img[...] = np.where(sign * w[o] > 0, hi, lo).reshape(img.shape)
                continue
            kh, kw = w.shape[1], w.shape[2]
            oh_n, ow_n = graph.tensors[node.outputs[0]].shape[:2]
            stride = tuple(node.attrs.get("stride", (1, 1)))
            same = str(node.attrs.get("padding", "VALID")).upper() == "SAME"
            pt = max((oh_n - 1) * stride[0] + kh - xs.shape[0], 0) // 2 if same else 0
            pl = max((ow_n - 1) * stride[1] + kw - xs.shape[1], 0) // 2 if same else 0
            # the output whose receptive field has the most taps inside the image (padded taps add 0)
            inside = lambda a, n, k, s, p: (range(max(0, a * s - p), min(n, a * s - p + k)))  # noqa: E731
            oh, ow = max(((i, j) for i in range(oh_n) for j in range(ow_n)),
                         key=lambda ij: len(inside(ij[0], xs.shape[0], kh, stride[0], pt)) *
                         len(inside(ij[1], xs.shape[1], kw, stride[1], pl)))
            rows, cols = inside(oh, xs.shape[0], kh, stride[0], pt), inside(ow, xs.shape[1], kw, stride[1], pl)
            taps = np.ix_([r - (oh * stride[0] - pt) for r in rows], [c - (ow * stride[1] - pl) for c in cols])
            region = (slice(rows.start, rows.stop), slice(cols.start, cols.stop))
            if node.op == "depthwise_conv2d":
                cin = o // (w.shape[3] // xs.shape[2])
                img[region + (cin,)] = np.where(sign * w[0][taps + (o,)] > 0, hi, lo)
            else:
                img[region] = np.where(sign * w[o][taps] > 0, hi, lo)
    return x.astype(xs.dtype)


def _tightest(graph, node, n=4):
    xs = graph.tensors[node.inputs[0]]
    lo, hi = xs.code_range
    zx = int(xs.zero_point[0])
    x_max = max(hi - zx, zx - lo)
    q = _weights_rows(graph, node)
    b = graph.tensors[node.inputs[2]].data.astype(np.int64) if len(node.inputs) > 2 and node.inputs[2] else \
        np.zeros(q.shape[0], np.int64)
    worst = [abs(int(v)) + int(s) * x_max for v, s in zip(b, np.abs(q).sum(axis=1))]
    return list(np.argsort(worst)[::-1][:n]), max(worst)


def test_imported_mobilenet_never_overflows_16_bits_on_adversarial_inputs(graphs):
    g, res = graphs
    g2 = res.graph
    limit = (1 << 15) - 1
    base = fxpsim.HardwareConfig.preset("tflite-int8")
    original_overflowed = 0
    macs = [nd for nd in g2.nodes if nd.op in SUPPORTED_OPS]
    assert len(macs) == len(res.records) == 53
    for node in macs:
        channels, worst = _tightest(g2, node)
        assert worst <= limit, node.name                        # the bound, recomputed from the new tensors
        for graph, must_fit in ((g2, True), (g, False)):
            chans = channels if must_fit else _tightest(g, node)[0]
            x = _adversarial(graph, node, chans)
            consts = [graph.tensors[t].data if t and graph.tensors[t].is_constant else None for t in node.inputs]
            ins = [x] + consts[1:]
            exact = run_node(graph, node, ins, base, True)[1]["acc"]
            for mode in ("saturate", "wrap"):
                tr = run_node(graph, node, ins, base.replace(accumulator_bits=16, accumulator_overflow=mode), True)[1]
                if must_fit:
                    assert tr["overflows"] == 0 and tr["bias_clipped"] == 0, (node.name, mode)
                    np.testing.assert_array_equal(tr["acc"], exact, err_msg=f"{node.name} {mode}")
                else:
                    original_overflowed += tr["overflows"] > 0
    assert original_overflowed > 40          # the construction does overflow where the bound is exceeded


def test_real_images_run_as_the_exact_datapath_and_the_input_graph_is_unchanged(graphs):
    g, res = graphs
    fresh = fxpsim.import_model(MODEL)
    for name, spec in g.tensors.items():
        if spec.is_constant:
            np.testing.assert_array_equal(spec.data, fresh.tensors[name].data)
            np.testing.assert_array_equal(spec.scale, fresh.tensors[name].scale)
    x = np.load(IMAGES)["x"]
    base = fxpsim.HardwareConfig.preset("tflite-int8")
    for mode in ("saturate", "wrap"):
        y, tr, _ = res.graph.run(x, base.replace(accumulator_bits=16, accumulator_overflow=mode), trace=True,
                                 keep=True)
        assert sum(t["overflows"] for t in tr.values()) == 0
        np.testing.assert_array_equal(y, res.graph.run(x))
    assert res.graph.meta["accumulator_guarantee"]["accumulator_bits"] == 16
    assert all(r["worst_after"] <= r["limit"] < r["worst_before"] for r in res.records if r["channels_changed"])


def test_bad_input_is_refused_by_name(graphs):
    g, _ = graphs
    add = next(nd.name for nd in g.nodes if nd.op == "add")
    with pytest.raises(ValueError, match=f"{add}.*add"):
        guarantee_accumulator(g, 16, nodes=[add])
    with pytest.raises(ValueError, match="accumulator_bits"):
        guarantee_accumulator(g, 1)
    with pytest.raises(TypeError, match="IntegerGraph"):
        guarantee_accumulator("model.tflite", 16)
    with pytest.raises(ValueError, match="b must have one value per row"):
        reround_channels(np.ones((3, 4)), np.ones(2), 10, 16)
