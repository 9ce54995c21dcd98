"""TRANSPOSE_CONV (``tflite_transpose_conv``) and XNNPACK's int8 BATCH_MATMUL against LiteRT (issue 22).

* The converter's Keras ``Conv2DTranspose`` models of ``tests/vectors/tflite_tconv`` (``tools/fixtures/tflite_tconv``:
  per-channel and per-tensor weights, bias or none, strides 1 and 2, SAME and VALID, output_padding, fused ReLU, a
  kernel smaller than the stride, a dynamic batch), live in LiteRT under the three kernel sets on inputs with the
  code extremes: every output and every intermediate tensor bit for bit (XNNPACK's with delegate node fusion off).
* That the tests tell the kernel sets apart (builtin != reference, XNNPACK != builtin where delegated, == builtin
  where not), and that the builtin's 8-channel blocks are needed (either uniform rounding misses).
* Hand-built one-op TRANSPOSE_CONV models with hypothesis-drawn shapes, strides, paddings, scales, zero points,
  bias and activation, live under the three kernel sets.
* On 16-bit saturating / wrapping accumulators: outputs, overflow counts, adds and the MAC view's exact sums equal an
  independent Python-integer model that scatters the products in LiteRT's reference order.
* XNNPACK BATCH_MATMUL live against LiteRT and an independent float32 model (right zero point 0), the builtin
  fallback (zero point != 0), constant and broadcast operands, a K large enough that fl32(acc) rounds.
* Errors before any computation: weight zero points, inconsistent output shapes (LiteRT refuses them too),
  XNNPACK's scale limit (LiteRT fails to prepare), bad node attributes, unmodelled datapath knobs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxpsim
from fxpsim.graph import load_graph
from fxpsim.graph.datapath_settings import Datapath
from fxpsim.graph.mac_view import mac_operands, mac_sums
from fxpsim.graph.registry import OPS
from fxpsim.hardware.accumulator_widths import accumulator_widths
from reference import accumulate, ref_mbqm, ref_quantize_multiplier

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import INT32, _act, _act_range, _const, _litert, _options, build_tflite  # noqa: E402
from test_tflite_more_ops import _compare_live, _interpreter, _model_batch_matmul  # noqa: E402

KERNELS = ("reference", "builtin", "xnnpack")
MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "tflite_tconv"
MODELS = sorted(p.stem for p in MODELS_DIR.glob("*.tflite"))
NOT_DELEGATED = {"tconv_s2_dynamic_batch", "tconv_k1_s2_same"}     # output shape at run time; kernel < stride
ACTS = {"none": 0, "relu": 1, "relu6": 3}


def _inputs(g, n, seed):
    """int8 codes per graph input: normal around 0, uniform over every code, and both extremes (saturating)."""
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        shape = (n,) + g.tensors[name].shape
        x = np.clip(rng.normal(0.0, 40.0, shape), -128, 127)
        x[n // 3:] = rng.integers(-128, 128, (n - n // 3,) + shape[1:])
        x[0], x[1 % n] = -128, 127
        x[2 % n] = np.where(rng.random(shape[1:]) < 0.5, -128, 127)
        out.append(x.astype(np.int8))
    return out


# ------------------------------------------------------------------------------------------ converter models
def test_fixtures_present():
    assert {"tconv_s2_same_bias", "tconv_s2_valid_nobias", "tconv_s1_same_relu", "tconv_s2_same_per_tensor",
            "tconv_s2_valid_output_padding", "tconv_k1_s2_same", "tconv_s2_dynamic_batch"} <= set(MODELS)


@pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors.:UserWarning")
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", MODELS)
def test_converter_models_equal_live_litert(name, kernels):
    path = MODELS_DIR / f"{name}.tflite"
    g = fxpsim.import_tflite(path, kernels=kernels)
    (node,) = [n for n in g.nodes if n.op == "tflite_transpose_conv"]
    assert node.attrs["xnnpack_delegated"] is (name not in NOT_DELEGATED)
    _compare_live(g, path, kernels, _inputs(g, 48, len(name)), intermediates=True)


def _outputs(name, kernels, feeds):
    """The TRANSPOSE_CONV's output codes (other ops of the model differ between kernel sets in their own ways)."""
    g = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite", kernels=kernels)
    (node,) = [n for n in g.nodes if n.op == "tflite_transpose_conv"]
    return g.run(feeds, keep=True)[2][node.outputs[0]]


def test_the_kernel_sets_differ_and_the_tests_tell_them_apart():
    differ = {"builtin": 0, "xnnpack": 0}
    for name in MODELS:
        g = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite")
        feeds = _inputs(g, 60, 2)
        ref, builtin, xnn = (_outputs(name, k, feeds) for k in KERNELS)
        differ["builtin"] += int(np.count_nonzero(builtin != ref))
        if name in NOT_DELEGATED:          # LiteRT runs the builtin kernel: so does fxpsim
            np.testing.assert_array_equal(xnn, builtin)
        else:
            differ["xnnpack"] += int(np.count_nonzero(xnn != builtin))
    assert differ["builtin"] > 100 and differ["xnnpack"] > 100, differ


@pytest.mark.parametrize("block", [1, 10 ** 6])
def test_the_builtin_8_channel_blocks_are_needed(monkeypatch, block):
    """12 output channels: tie-up rounding for the first 8, ties away for 4. Either rounding everywhere misses
    LiteRT's outputs (the live comparison above then fails)."""
    import fxpsim.frontends.tflite.transpose_conv_ops as T
    path = MODELS_DIR / "tconv_s2_dynamic_batch.tflite"
    g = fxpsim.import_tflite(path, kernels="builtin")
    feeds = _inputs(g, 60, 2)
    kept_right = g.run(feeds, keep=True)[2]
    monkeypatch.setattr(T, "BUILTIN_CHANNEL_BLOCK", block)
    kept_wrong = fxpsim.import_tflite(path, kernels="builtin").run(feeds, keep=True)[2]
    (node,) = [n for n in g.nodes if n.op == "tflite_transpose_conv"]
    t = node.outputs[0]
    assert np.count_nonzero(kept_right[t] != kept_wrong[t]) > 0


def test_saved_graph_float_reference_and_macs(tmp_path):
    for kernels in KERNELS:
        g = fxpsim.import_tflite(MODELS_DIR / "tconv_s2_same_bias.tflite", kernels=kernels)
        x = _inputs(g, 6, 4)[0]
        back = load_graph(g.save(tmp_path / f"{kernels}.npz"))
        np.testing.assert_array_equal(back.run(x), g.run(x))
    y = g.run(x[3:])
    out = g.tensors[g.outputs[0]]
    real, yf = out.dequantize(y), g.run_float(x[3:])
    lo, hi = out.dequantize(np.array(out.code_range))
    assert np.median(np.abs(real - np.clip(yf, lo, hi))) <= float(out.scale[0])
    (node,) = g.nodes
    # an independent count: per output row and column the taps that reach it from a real input position
    xs, ws, ys = (g.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    (pt, _), (pl, _) = node.attrs["pads"]
    rows = sum(1 for oy in range(ys.shape[0]) for iy in range(xs.shape[0]) if 0 <= oy + pt - 2 * iy < ws.shape[1])
    cols = sum(1 for ox in range(ys.shape[1]) for ix in range(xs.shape[1]) if 0 <= ox + pl - 2 * ix < ws.shape[2])
    assert g.macs(node) == rows * cols * xs.shape[2] * ys.shape[2]


# ------------------------------------------------------------------------------------------ hand-built models
def _tconv_model(rng, h, w, c, o, k, s, same, r, per_channel, bias, act):
    """A one-op TRANSPOSE_CONV flatbuffer and its output shape."""
    out_hw = [(n * st - rr) if same else ((n - 1) * st + kk + rr) for n, st, kk, rr in zip((h, w), s, k, r)]
    sx, zx = float(rng.uniform(0.005, 0.1)), int(rng.integers(-40, 41))
    sw = rng.uniform(0.003, 0.05, o if per_channel else 1)
    taps = max(1, k[0] * k[1] * c // (s[0] * s[1]))
    sy = float(sx * sw.mean() * rng.uniform(15, 300) * np.sqrt(taps))
    wdata = rng.integers(-127, 128, (o, k[0], k[1], c)).astype(np.int8)
    tensors = [_const("shape", np.array([1] + out_hw + [o], np.int32), INT32),
               _const("w", wdata, 9, scale=list(sw), zero_point=[0] * len(sw), qdim=0),
               _act("x", [1, h, w, c], sx, zx), _act("y", [1] + out_hw + [o], sy, int(rng.integers(-30, 31)))]
    inputs = [0, 1, 2]
    if bias:
        tensors.append(_const("b", rng.integers(-4000, 4000, o).astype(np.int32), INT32,
                              scale=list(sx * sw), zero_point=[0] * len(sw)))
        inputs.append(4)
    ops = [{"op": "TRANSPOSE_CONV", "inputs": inputs, "outputs": [3],
            "options": _options("TransposeConvOptions", Padding=0 if same else 1, StrideW=s[1], StrideH=s[0],
                                FusedActivationFunction=ACTS[act])}]
    return build_tflite(tensors, ops, [2], [3])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=st.integers(1, 5), w=st.integers(1, 5), c=st.integers(1, 6), o=st.integers(1, 19),
       k=st.tuples(st.integers(1, 4), st.integers(1, 4)), s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       same=st.booleans(), r=st.tuples(st.integers(0, 2), st.integers(0, 2)), per_channel=st.booleans(),
       bias=st.booleans(), act=st.sampled_from(list(ACTS)), seed=st.integers(0, 2 ** 16))
def test_one_op_models_equal_live_litert(h, w, c, o, k, s, same, r, per_channel, bias, act, seed):
    r = tuple(min(rr, st_ - 1) for rr, st_ in zip(r, s))
    content = _tconv_model(np.random.default_rng(seed), h, w, c, o, k, s, same, r, per_channel, bias, act)
    for kernels in KERNELS:
        g = _import(content, kernels)
        _compare_live(g, content, kernels, _inputs(g, 5, seed), intermediates=False)


def _import(content: bytes, kernels: str):
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.tflite"
        path.write_bytes(content)
        return fxpsim.import_tflite(path, kernels=kernels)


# ------------------------------------------------------------------------------------------ narrow accumulators
def _python_tconv(g, node, x, bits, mode, reverse=False):
    """Independent Python-integer model: for each output, the products (x - z_x) w in LiteRT's reference scatter
    order (input rows, columns, channels increasing; ``reverse``: the other way round), added one by one to a
    ``bits`` accumulator with ``mode`` that starts at the bias (saturated into it); TFLite single-rounding
    requantization, zero point, activation clamp.
    Returns (codes, overflows, products, exact sums, largest |partial sum| without bias)."""
    xs, ws, ys = (g.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    w, zx, zy = ws.data.astype(int), int(xs.zero_point[0]), int(ys.zero_point[0])
    bias = g.tensors[node.inputs[2]].data if len(node.inputs) > 2 else None
    (sh, sw_), ((pt, _), (pl, _)) = node.attrs["stride"], node.attrs["pads"]
    n_, h, wd, c = x.shape
    o_, kh, kw, _ = w.shape
    oh, ow, _ = ys.shape
    lo_acc, hi_acc = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    lo, hi = _act_range(node.attrs["activation"], ys.scale[0], zy)
    mults = [ref_quantize_multiplier(float(np.float32(xs.scale[0])) * float(np.float32(ws.scale[ch if ws.per_channel
                                     else 0])) / float(np.float32(ys.scale[0])), single=True) for ch in range(o_)]
    codes, exact = np.zeros((n_, oh, ow, o_), np.int64), np.zeros((n_, oh, ow, o_), np.int64)
    overflows = products = peak = 0
    for n, oy, ox, o in np.ndindex(n_, oh, ow, o_):
        prods = [(int(x[n, iy, ix, ch]) - zx) * int(w[o, oy + pt - iy * sh, ox + pl - ix * sw_, ch])
                 for iy in range(h) if 0 <= oy + pt - iy * sh < kh
                 for ix in range(wd) if 0 <= ox + pl - ix * sw_ < kw for ch in range(c)]
        init = 0 if bias is None else min(max(int(bias[o]), lo_acc), hi_acc)
        acc, nov, _ = accumulate(prods[::-1] if reverse else prods, init, bits, True, mode)
        running = np.cumsum([0] + prods)
        peak = max(peak, int(np.abs(running).max()))
        overflows, products = overflows + nov, products + len(prods)
        exact[n, oy, ox, o] = int(running[-1]) + (0 if bias is None else int(bias[o]))
        codes[n, oy, ox, o] = min(max(ref_mbqm(acc, *mults[o], "single") + zy, lo), hi)
    return codes, overflows, products, exact, peak


@pytest.mark.parametrize("preset_name", ["int8-acc16-sat", "int8-acc16-wrap"])
@pytest.mark.parametrize("name", ["tconv_s2_same_bias", "tconv_s2_same_per_tensor", "tconv_s1_same_relu"])
def test_narrow_accumulator_matches_a_python_integer_model(name, preset_name):
    for kernels in ("reference", "builtin"):          # the MAC node is the same tflite_transpose_conv in both
        g = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite", kernels=kernels)
        x = _inputs(g, 3, 9)[0]
        dp = fxpsim.preset(preset_name)
        y, traces, kept = g.run(x, dp, trace=True, keep=True)
        (node,) = [n for n in g.nodes if n.op == "tflite_transpose_conv"]
        want, overflows, products, exact, peak = _python_tconv(g, node, x, 16, preset_name.rsplit("-", 1)[1]
                                                              .replace("sat", "saturate"))
        np.testing.assert_array_equal(kept[node.outputs[0]], want)
        tr = traces[node.name]
        assert tr["overflows"] == overflows > 100        # the 16-bit accumulator really overflows
        assert tr["adds"] == products                    # real products only (the bias is preloaded)
        assert np.count_nonzero(y != g.run(x)) > 0       # and that changes the output
        view = mac_operands(g, node, [x] + [g.tensors[t].data for t in node.inputs[1:]])
        sums, view_peak = mac_sums(view, preload=False)
        np.testing.assert_array_equal(sums, exact)
        aw = next(a for a in accumulator_widths(g, x) if a.node == node.name)
        assert aw.observed == peak.bit_length() + 1
    if preset_name.endswith("sat"):                     # the order of the adds matters on this accumulator
        other, other_overflows = _python_tconv(g, node, x, 16, "saturate", reverse=True)[:2]
        assert other_overflows != overflows or np.any(other != want)


def test_simulation_report_reads_the_mac_view():
    """``fxpsim.simulate``'s per-node record of the TRANSPOSE_CONV: overflows, exact peak and MACs as the model."""
    g = fxpsim.import_tflite(MODELS_DIR / "tconv_s2_same_bias.tflite", kernels="xnnpack")
    x = _inputs(g, 3, 9)[0]
    (node,) = g.nodes
    _, overflows, products, exact, _ = _python_tconv(g, node, x, 16, "saturate")
    (rec,) = [r for r in fxpsim.simulate(g, "int8-acc16-sat", x).layers if r.kind == "tflite_transpose_conv"]
    assert rec.overflow_count == overflows > 0
    assert rec.acc_peak == int(np.abs(exact).max()) > (1 << 15)
    assert rec.acc_bits_needed > 16 and rec.macs == g.macs(node) == products // len(x)


def _python_bound(g, node):
    """Independent worst case: per output, the real taps' sum of |w| times max |x - z_x|, plus |b|."""
    xs, ws, ys = (g.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    w = np.abs(ws.data.astype(int)).sum(axis=3)
    zx = int(xs.zero_point[0])
    bias = g.tensors[node.inputs[2]].data if len(node.inputs) > 2 else np.zeros(w.shape[0], int)
    (sh, sw_), ((pt, _), (pl, _)) = node.attrs["stride"], node.attrs["pads"]
    best = 0
    for oy, ox, o in np.ndindex(*ys.shape):
        taps = sum(int(w[o, oy + pt - iy * sh, ox + pl - ix * sw_]) for iy in range(xs.shape[0])
                   if 0 <= oy + pt - iy * sh < w.shape[1] for ix in range(xs.shape[1])
                   if 0 <= ox + pl - ix * sw_ < w.shape[2])
        best = max(best, taps * max(128 + zx, 127 - zx) + abs(int(bias[o])))
    return best


@pytest.mark.parametrize("name", MODELS)
def test_worst_case_sum_against_a_python_bound(name):
    g = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite")
    (node,) = [n for n in g.nodes if n.op == "tflite_transpose_conv"]
    bound = OPS[node.op].worst_case_sum(g, node)
    assert bound == _python_bound(g, node)
    x = _inputs(g, 8, 1)[0]
    exact = _python_tconv(g, node, x, 32, "wrap")[3]
    assert int(np.abs(exact).max()) <= bound


# ------------------------------------------------------------------------------------------ errors
def _raises(content, match, kernels="reference"):
    with pytest.raises(ValueError, match=match):
        _import(content, kernels)


def _simple(w_zp=0, out_hw=(8, 8), sy=0.05, padding=0, w_const=True, qdim=0):
    o = 3 if w_const else 1                 # a run-time weights input keeps a batch-like axis of 1
    w = np.ones((o, 3, 3, 2), np.int8)
    n_scales = 2 if qdim == 3 else o
    wt = _const("w", w, 9, scale=[0.02] * n_scales, zero_point=[w_zp] * n_scales, qdim=qdim) if w_const else \
        _act("w", [o, 3, 3, 2], 0.02, 0)
    tensors = [_const("shape", np.array([1, *out_hw, o], np.int32), INT32), wt, _act("x", [1, 4, 4, 2], 0.5, 0),
               _act("y", [1, *out_hw, o], sy, 0)]
    return build_tflite(tensors, [{"op": "TRANSPOSE_CONV", "inputs": [0, 1, 2], "outputs": [3],
                                   "options": _options("TransposeConvOptions", Padding=padding, StrideW=2, StrideH=2)}],
                        [2] if w_const else [2, 1], [3])


def test_errors_name_the_operator(tmp_path):
    _raises(_simple(w_zp=3), r"operator 0 \(TRANSPOSE_CONV.*zero points 0")
    _raises(_simple(qdim=3), r"operator 0 \(TRANSPOSE_CONV.*per-output-channel \(axis 0\)")
    _raises(_simple(w_const=False), r"operator 0 \(TRANSPOSE_CONV.*weights must be a constant")
    _raises(_simple(out_hw=(11, 8)), r"operator 0 \(TRANSPOSE_CONV.*LiteRT refuses it")
    # LiteRT refuses that output size too
    it = None
    with pytest.raises((RuntimeError, ValueError)):
        it = _interpreter(_simple(out_hw=(11, 8)), "reference")
        it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 4, 4, 2), np.int8))
        it.invoke()
    # s_x s_w / s_y = 0.01 / 2e-5 = 500 >= 256: XNNPACK's delegate fails to prepare the model, the others run it
    content = _simple(sy=2e-5)
    _raises(content, r"TRANSPOSE_CONV x1: a requantization scale s_x s_w / s_y of 500 >= 256: XNNPACK's "
                     r"deconvolution refuses it", kernels="xnnpack")
    (tmp_path / "big.tflite").write_bytes(content)
    cov = fxpsim.tflite_coverage(tmp_path / "big.tflite")
    assert cov.imports("reference") and cov.imports("builtin") and not cov.imports("xnnpack")
    with pytest.raises(RuntimeError, match="failed to prepare|XNNPACK"):
        _interpreter(content, "xnnpack")
    for kernels in ("reference", "builtin"):
        g = _import(content, kernels)
        _compare_live(g, content, kernels, _inputs(g, 3, 1), intermediates=False)


def test_xnnpack_scale_limit_only_where_the_delegate_takes_the_op():
    """A TRANSPOSE_CONV that XNNPACK does not take (kernel 1 < stride 2) runs LiteRT's builtin kernel at any
    scale, and so does fxpsim; a BATCH_MATMUL with a run-time right operand runs XNNPACK beyond 256."""
    w = np.random.default_rng(0).integers(-127, 128, (3, 1, 1, 2)).astype(np.int8)
    tensors = [_const("shape", np.array([1, 8, 8, 3], np.int32), INT32),
               _const("w", w, 9, scale=[0.02] * 3, zero_point=[0] * 3, qdim=0), _act("x", [1, 4, 4, 2], 0.5, 0),
               _act("y", [1, 8, 8, 3], 2e-5, 0)]
    content = build_tflite(tensors, [{"op": "TRANSPOSE_CONV", "inputs": [0, 1, 2], "outputs": [3],
                                      "options": _options("TransposeConvOptions", Padding=0, StrideW=2, StrideH=2)}],
                           [2], [3])
    g = _import(content, "xnnpack")
    assert g.nodes[0].attrs["xnnpack_delegated"] is False
    x = _inputs(g, 6, 2)
    x[0][3:] = np.random.default_rng(1).integers(-2, 3, x[0][3:].shape)      # not all saturated
    _compare_live(g, content, "xnnpack", x, intermediates=False)
    sa, sb = 0.05, 0.04
    for const, scale in ((False, 2000.0), (True, 200.0)):
        b = np.random.default_rng(3).integers(-128, 128, (1, 1, 5, 3)).astype(np.int8)
        tensors = [_act("a", [1, 1, 2, 5], sa, 3),
                   _const("b", b, 9, scale=[sb], zero_point=[0]) if const else _act("b", [1, 1, 5, 3], sb, 0),
                   _act("y", [1, 1, 2, 3], float(np.float32(sa * sb / scale)), -5)]
        content = build_tflite(tensors, [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2]}],
                               [0] if const else [0, 1], [2])
        g = _import(content, "xnnpack")
        x = _inputs(g, 12, 0)
        for f in x:
            f[3:] = np.random.default_rng(2).integers(-2, 3, f[3:].shape)
        _compare_live(g, content, "xnnpack", x, intermediates=False)


def test_xnnpack_batch_matmul_beyond_its_scale_limit_is_refused_where_litert_crashes(tmp_path):
    """A constant right operand (zero point 0) and s_a s_b / s_y >= 256: LiteRT 2.3.0's XNNPACK BATCH_MATMUL kills the
    process at invoke (run here in a subprocess); fxpsim refuses the model under kernels='xnnpack' only."""
    import subprocess
    import sys
    b = np.random.default_rng(3).integers(-128, 128, (1, 1, 5, 3)).astype(np.int8)
    content = build_tflite([_act("a", [1, 1, 2, 5], 0.05, 3), _const("b", b, 9, scale=[0.04], zero_point=[0]),
                            _act("y", [1, 1, 2, 3], float(np.float32(0.002 / 300)), 0)],
                           [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2]}], [0], [2])
    path = tmp_path / "bmm.tflite"
    path.write_bytes(content)
    _raises(content, r"BATCH_MATMUL x1: a requantization scale s_x s_w / s_y of 300 >= 256: LiteRT's XNNPACK "
                     r"BATCH_MATMUL with a constant right operand crashes", kernels="xnnpack")
    for kernels in ("reference", "builtin"):
        g = _import(content, kernels)
        _compare_live(g, content, kernels, _inputs(g, 3, 1), intermediates=False)
    _litert()
    code = ("import sys, numpy as np; from ai_edge_litert.interpreter import Interpreter, OpResolverType; "
            "it = Interpreter(model_path=sys.argv[1], num_threads=1, "
            "experimental_op_resolver_type=OpResolverType.BUILTIN); it.allocate_tensors(); "
            "it.set_tensor(it.get_input_details()[0]['index'], np.ones((1, 1, 2, 5), np.int8)); it.invoke(); "
            "print('ran')")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "ran" not in r.stdout


@dataclasses.dataclass(frozen=True)
class _FoldingDatapath(Datapath):
    zero_point: str = "fold"


def test_bad_node_and_unmodelled_knobs_are_refused_and_inputs_kept():
    g = fxpsim.import_tflite(MODELS_DIR / "tconv_s2_same_bias.tflite", kernels="builtin")
    (node,) = g.nodes
    check = OPS["tflite_transpose_conv"].check
    for attrs, what in (({"pads": [[0, 0]]}, "pads"), ({"stride": [0, 2]}, "stride"),
                        ({"pads": [[9, 0], [0, 0]]}, "do not give output")):
        with pytest.raises(ValueError, match=rf"node {node.name!r} \(tflite_transpose_conv\).*{what}"):
            check(g, dataclasses.replace(node, attrs=dict(node.attrs, **attrs)))
    x = _inputs(g, 3, 0)[0]
    before = x.copy()
    fold = _FoldingDatapath(**dataclasses.asdict(g.default_datapath))
    with pytest.raises(ValueError, match=rf"node {node.name!r}.*zero_point"):
        g.run(x, fold)
    g.run(x)
    np.testing.assert_array_equal(x, before)


# ------------------------------------------------------------------------------------------ XNNPACK BATCH_MATMUL
def _model_bmm_xnnpack(a, b, qa, qb, qy):
    """XNNPACK's qs8 batch matmul, independently: Python-int sums, then float32 steps with numpy scalars and
    Python's round (half to even): rne(clamp(fl32(fl32(acc) * c))) + z_y, c = fl32(fl32(s_a s_b) / s_y)."""
    c = np.float32(np.float32(np.float32(qa[0]) * np.float32(qb[0])) / np.float32(qy[0]))
    out = np.zeros(a.shape[:-1] + b.shape[-1:], np.int8)
    accs = []
    for idx in np.ndindex(*out.shape):
        *batch, r, col = idx
        acc = sum((int(a[(*batch, r, k)]) - qa[1]) * (int(b[(*batch, k, col)]) - qb[1]) for k in range(a.shape[-1]))
        accs.append(acc)
        f = float(np.float32(np.float32(acc) * c))
        out[idx] = round(min(max(f, -128.0 - qy[1]), 127.0 - qy[1])) + qy[1]
    return out, accs


def _bmm_case(rng, m, k, n, batch, adj, const, rhs_zp, rank2=False):
    qa = (float(np.float32(rng.uniform(0.002, 0.08))), int(rng.integers(-30, 31)))
    qb = (float(np.float32(rng.uniform(0.002, 0.08))), rhs_zp)
    qy = (float(np.float32(rng.uniform(0.01, 2.0) * np.sqrt(k / 16))), int(rng.integers(-30, 31)))
    ash = [1, batch] + ([k, m] if adj[0] else [m, k])
    bsh = ([] if rank2 else [1, batch]) + ([n, k] if adj[1] else [k, n])
    data = {t: rng.integers(-128, 128, sh).astype(np.int8) for t, sh in (("a", ash), ("b", bsh))}
    tensors = []
    for t, sh, q in (("a", ash, qa), ("b", bsh, qb)):
        tensors.append(_const(t, data[t], 9, scale=[q[0]], zero_point=[q[1]]) if const == t else _act(t, sh, *q))
    tensors.append(_act("y", [1, batch, m, n], *qy))
    content = build_tflite(tensors, [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2],
                                      "options": _options("BatchMatMulOptions", AdjX=adj[0], AdjY=adj[1])}],
                           [i for i, t in enumerate("ab") if t != const], [2])
    return content, data, ash, bsh, (qa, qb, qy)


def _bmm_check(content, data, ash, bsh, q, adj, const, seed):
    """Live XNNPACK == fxpsim, and the first sample == the independent model; returns (xnnpack, builtin) codes."""
    g = _import(content, "xnnpack")
    feeds = _inputs(g, 4, seed)
    _compare_live(g, content, "xnnpack", feeds, intermediates=False)
    ys = [g.run(feeds)]
    runtime = iter(feeds)
    a, b = (data[t] if const == t else next(runtime)[:1].reshape(sh) for t, sh in (("a", ash), ("b", bsh)))
    a2 = np.swapaxes(a, -1, -2) if adj[0] else a
    b2 = np.swapaxes(b, -1, -2) if adj[1] else b
    b2 = np.broadcast_to(b2, a2.shape[:-2] + b2.shape[-2:])
    qa, qb, qy = q
    want, accs = _model_bmm_xnnpack(a2, b2, qa, qb, qy) if qb[1] == 0 else (_model_batch_matmul(a2, b2, qa, qb, qy),
                                                                             [])
    np.testing.assert_array_equal(ys[0][:1].reshape(want.shape), want)
    return ys[0], _import(content, "builtin").run(feeds), accs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 9), k=st.integers(1, 48), n=st.integers(1, 9), batch=st.integers(1, 3),
       adj=st.tuples(st.booleans(), st.booleans()), const=st.sampled_from([None, "a", "b"]),
       rank2=st.booleans(), rhs_zp=st.sampled_from([0, 0, 0, -7, 11]), seed=st.integers(0, 2 ** 16))
def test_xnnpack_batch_matmul_equals_live_litert_and_a_python_model(m, k, n, batch, adj, const, rank2, rhs_zp,
                                                                     seed):
    case = _bmm_case(np.random.default_rng(seed), m, k, n, batch, adj, const, rhs_zp, rank2 and const == "b")
    _bmm_check(*case, adj, const, seed)


def test_xnnpack_batch_matmul_differs_from_builtin_and_rounds_the_float32_accumulator():
    """XNNPACK's arithmetic is not the builtin one (so the test above tells them apart), and a K of 1400 takes
    the accumulators past 2^24, where fl32(acc) itself rounds."""
    rng = np.random.default_rng(5)
    differ = 0
    for trial in range(12):
        adj = (bool(trial % 2), bool(trial % 3 == 0))
        case = _bmm_case(rng, 6, 24, 7, 2, adj, "b" if trial % 4 else None, 0)
        xnn, builtin, _ = _bmm_check(*case, adj, "b" if trial % 4 else None, trial)
        differ += int(np.count_nonzero(xnn != builtin))
    assert differ > 0
    # sample 0 of the inputs is all -128: with z_a = -29 every a - z_a is -99, and column j of b holds 2j + 1 codes
    # 127 among -128s, so every accumulator is odd and above 2^24 in magnitude: not a float32
    k = 1400
    qa, qb = (0.05, -29), (0.04, 0)
    qy = (float(np.float32(qa[0] * qb[0] * 2.0e5)), 3)
    b = np.full((1, 1, k, 3), -128, np.int8)
    for j in range(3):
        b[0, 0, :2 * j + 1, j] = 127
    content = build_tflite([_act("a", [1, 1, 2, k], *qa), _const("b", b, 9, scale=[qb[0]], zero_point=[0]),
                            _act("y", [1, 1, 2, 3], *qy)],
                           [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2]}], [0], [2])
    _, _, accs = _bmm_check(content, {"b": b}, [1, 1, 2, k], [1, 1, k, 3], (qa, qb, qy), (False, False), "b", 3)
    assert all(abs(a) > 2 ** 24 and int(np.float32(a)) != a for a in accs)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 5), k=st.integers(1, 70), n=st.integers(1, 5), scales=st.tuples(
    st.floats(1e-4, 0.1), st.floats(1e-4, 0.1), st.floats(1e-5, 10.0)), zps=st.tuples(
    st.integers(-128, 127), st.sampled_from([0, 0, 5]), st.integers(-128, 127)), seed=st.integers(0, 2 ** 16))
def test_xnnpack_batch_matmul_kernel_against_the_float32_model(m, k, n, scales, zps, seed):
    """The datapath kernel alone (no LiteRT needed), codes anywhere in int8: XNNPACK's float32 arithmetic where
    z_b = 0, the gemmlowp one (as every kernel set) otherwise."""
    from fxpsim.datapath import tflite as K
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-128, 128, (2, m, k)).astype(np.int8), rng.integers(-128, 128, (2, k, n)).astype(np.int8)
    q = [(float(np.float32(s)), z) for s, z in zip(scales, zps)]
    params = K.batch_matmul_params(*q[0], *q[1], *q[2])
    got = K.quantized_batch_matmul(a, b, params, kernels="xnnpack")
    if zps[1] == 0:
        want = _model_bmm_xnnpack(a, b, *q)[0]
    else:
        want = _model_batch_matmul(a, b, *q)
        np.testing.assert_array_equal(got, K.quantized_batch_matmul(a, b, params, kernels="builtin"))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="xnnpack_scale"):
        K.quantized_batch_matmul(a, b, dataclasses.replace(params, rhs_zero_point=0, xnnpack_scale=float("nan")),
                                 kernels="xnnpack")


@pytest.mark.parametrize("const_b", [False, True])
@pytest.mark.parametrize("zb", [0, 1])
def test_xnnpack_batch_matmul_ties_show_which_arithmetic_runs(const_b, zb):
    """c = s_a s_b / s_y = 1/2 and odd accumulators put every output on a tie: gemmlowp rounds it up (the builtin
    kernel), XNNPACK to even. LiteRT's XNNPACK interpreter gives the even codes exactly when z_b = 0, constant or
    run-time right operand, and fxpsim with it."""
    b = (np.arange(-127, 126, 2) + zb).astype(np.int8).reshape(1, 1, 1, -1)          # b - z_b odd
    n = b.shape[-1]
    tensors = [_act("a", [1, 1, 1, 1], 0.5, 0),
               _const("b", b, 9, scale=[0.5], zero_point=[zb]) if const_b else _act("b", [1, 1, 1, n], 0.5, zb),
               _act("y", [1, 1, 1, n], 0.5, 0)]
    content = build_tflite(tensors, [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2]}],
                           [0] if const_b else [0, 1], [2])
    a = np.ones((1, 1, 1, 1), np.int8)
    it = _interpreter(content, "xnnpack")
    it.set_tensor(it.get_input_details()[0]["index"], a)
    if not const_b:
        it.set_tensor(it.get_input_details()[1]["index"], b)
    it.invoke()
    live = it.get_tensor(it.get_output_details()[0]["index"]).ravel().astype(int)
    acc = b.ravel().astype(int) - zb
    even, up = [round(v / 2) for v in acc], [(v + 1) // 2 for v in acc]
    np.testing.assert_array_equal(live, even if zb == 0 else up)
    assert even != up
    g = _import(content, "xnnpack")
    np.testing.assert_array_equal(g.run([a[0:1]] if const_b else [a, b]).ravel(), live)


@pytest.mark.parametrize("stride", [1, 2])
def test_transpose_conv_ties_show_each_kernel_sets_rounding(stride):
    """s_x s_w / s_y = 1/4 and accumulators 2k with k odd and negative put each of 12 channels on a tie of the final
    shift: the reference rounds it away from zero, the builtin kernel up in its first 8 channels (NEON block) and
    away in the other 4, XNNPACK to even -- unless it does not take the node (kernel 1 < stride 2), where LiteRT runs
    the builtin kernel. Live, and fxpsim with each."""
    w = np.arange(-1, -24, -2).astype(np.int8).reshape(12, 1, 1, 1)
    out = [1, stride, stride, 12]
    tensors = [_const("shape", np.array(out, np.int32), INT32),
               _const("w", w, 9, scale=[0.5] * 12, zero_point=[0] * 12, qdim=0), _act("x", [1, 1, 1, 1], 0.5, 0),
               _act("y", out, 1.0, 0)]
    content = build_tflite(tensors, [{"op": "TRANSPOSE_CONV", "inputs": [0, 1, 2], "outputs": [3],
                                      "options": _options("TransposeConvOptions", Padding=0, StrideW=stride,
                                                          StrideH=stride)}], [2], [3])
    x = np.full((1, 1, 1, 1), 2, np.int8)
    k = w.ravel().astype(int)                                        # acc = 2k, y = k / 2 on a tie
    away, up, even = [-((-v + 1) // 2) for v in k], [(v + 1) // 2 for v in k], [round(v / 2) for v in k]
    want = {"reference": away, "builtin": up[:8] + away[8:], "xnnpack": even if stride == 1 else up[:8] + away[8:]}
    assert len({tuple(v) for v in want.values()}) == (3 if stride == 1 else 2)
    for kernels in KERNELS:
        it = _interpreter(content, kernels)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        live = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(live[0, 0, 0], want[kernels], err_msg=kernels)
        np.testing.assert_array_equal(_import(content, kernels).run(x), live, err_msg=kernels)
