"""The compiled-plan steps of the ONNX ops (:mod:`fxpsim.frontends.onnx.prepared`).

* The models of ``benchmarks/bench_onnx.py`` imported for this host: the run through the plan equals the
  node-by-node run (``plan=False``) in every output, every tensor (``keep=True``) and every trace field, at batch
  1 and 3, and equals onnxruntime's own output, live, bit for bit.
* The prepared steps are taken: with the node-by-node integer MAC and weight dequantization made to raise, the
  planned run still runs (and still matches onnxruntime).
* Hand-built ``conv_integer`` / ``matmul_integer`` graphs on onnxruntime's datapath (padding, strides,
  dilations, 1 / 2 / depthwise groups, per-channel weight zero points, extreme codes) against a pure-Python
  big-integer model wrapped to int32, including a 70,000-long dot product whose sum leaves int32 (the wrap).
* Stale plans: a constant's codes and a node attribute edited after compiling: the old plan refuses to run, the
  graph's next run is the node-by-node run of the edited graph (and differs from the old output).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.datapath.onnxruntime import mlas_conv, mlas_kernel
from fxpsim.frontends.onnx import mac_ops
from fxpsim.frontends.onnx import ops as onnx_ops  # noqa: F401  (registers the ONNX graph ops)
from fxpsim.frontends.onnx.importer import ONNXRUNTIME_DATAPATH
from fxpsim.graph.ir import IntegerGraph, Node, TensorSpec
from reference import ref_max_pool  # noqa: E402
from same_tree import assert_same  # noqa: E402

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "vectors" / "onnx_models"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_onnx_for_tests", ROOT / "benchmarks" / "bench_onnx.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


BENCH = _bench()


def _model_path(name, tmp_path):
    if name == "cnn32_qdq_s8_pc":
        path = tmp_path / f"{name}.onnx"
        onnx.save(BENCH.cnn32_qdq_s8_pc(), str(path))
        return path
    return MODELS / f"{name}.onnx"


def _ort_run(path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _nchw(graph, n, seed=0):
    shape = graph.tensors[graph.inputs[0]].shape
    return np.random.default_rng(seed).normal(0.0, 1.5, (n,) + tuple(shape)).astype(np.float32)


@pytest.mark.parametrize("name", BENCH.DEFAULT)
def test_bench_models_plan_equals_node_by_node_and_onnxruntime(name, tmp_path):
    path = _model_path(name, tmp_path)
    g = fxpsim.import_onnx(path, cpu="host")
    for n in (1, 3):
        x = _nchw(g, n, seed=n)
        for trace in (False, True):
            assert_same(g.run(x, trace=trace, keep=True), g.run(x, trace=trace, keep=True, plan=False),
                  f"{name} batch {n} trace={trace}")
        got = g.run(x)
        assert_same(got, g.run(x, plan=False), f"{name} batch {n}")
        want = _ort_run(path, x)
        assert got.dtype == want.dtype and np.array_equal(got, want), f"{name} batch {n}: not onnxruntime's bits"


@pytest.mark.parametrize("name", BENCH.DEFAULT)
def test_prepared_steps_are_taken(name, tmp_path, monkeypatch):
    path = _model_path(name, tmp_path)
    g = fxpsim.import_onnx(path, cpu="host")
    x = _nchw(g, 1, seed=7)
    g.run(x)                                       # compiles the plan (which dequantizes float weights once)

    def refused(*a, **k):
        raise AssertionError("the node-by-node MAC ran inside the plan")
    monkeypatch.setattr(mac_ops, "_integer_mac", refused)
    monkeypatch.setattr(mac_ops, "_dequant_weights", refused)
    monkeypatch.setattr(mac_ops.K, "mlas_conv2d", refused)             # the float conv: its prepared form only
    monkeypatch.setattr(mlas_conv, "mlas_conv2d", refused)
    monkeypatch.setattr(mlas_kernel, "conv_segmented", refused)
    got = g.run(x)
    assert np.array_equal(got, _ort_run(path, x))
    with pytest.raises(AssertionError, match="node-by-node MAC"):
        g.run(x, plan=False)


# ------------------------------------------------------------------------------------------ hand graphs
def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _ref_conv(x, w, xz, wz, stride, pads, dilation, groups):
    """NHWC x, OHWI w, Python ints: sum over the window of (x - xz)(w - wz[o]), padding = xz, wrapped to int32."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (pt, pb), (pl, pr) = pads
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, o), np.int64)
    og = o // groups
    for b in range(n):
        for yy in range(oh):
            for xx in range(ow):
                for oc in range(o):
                    g0 = (oc // og) * cg
                    total = 0
                    for i in range(kh):
                        for j in range(kw):
                            r, s = yy * stride[0] + i * dilation[0] - pt, xx * stride[1] + j * dilation[1] - pl
                            for ci in range(cg):
                                a = int(x[b, r, s, g0 + ci]) if 0 <= r < h and 0 <= s < wd else xz
                                total += (a - xz) * (int(w[oc, i, j, ci]) - int(wz[oc]))
                    out[b, yy, xx, oc] = _wrap32(total)
    return out


def _integer_graph(op, x_shape, w, attrs, out_shape):
    specs = [TensorSpec("x", 8, False, x_shape), TensorSpec("w", 8, True, w.shape, data=w),
             TensorSpec("y", 32, True, out_shape)]
    return IntegerGraph(specs, [Node("mac", op, ["x", "w"], ["y"], attrs)], ["x"], ["y"], "g",
                        {"datapath": dict(ONNXRUNTIME_DATAPATH)})


@pytest.mark.parametrize("case", [
    ((1, 5, 6, 3), (4, 3, 3, 3), 1, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((2, 7, 5, 4), (6, 3, 2, 2), 2, (2, 1), ((0, 2), (1, 0)), (1, 2)),
    ((1, 6, 6, 5), (5, 3, 3, 1), 5, (2, 2), ((1, 1), (1, 1)), (1, 1)),
    ((3, 4, 4, 2), (4, 1, 1, 2), 1, (1, 1), ((0, 0), (0, 0)), (1, 1)),
    ((40, 6, 7, 8), (8, 3, 3, 1), 8, (1, 2), ((1, 1), (2, 0)), (2, 1)),      # depthwise, large: one product per tap
    ((16, 9, 9, 8), (6, 3, 3, 8), 1, (2, 1), ((1, 0), (2, 1)), (1, 2)),      # dense, large: one GEMM per tap
])
def test_conv_integer_plan_against_python_ints(case):
    x_shape, w_shape, groups, stride, pads, dilation = case
    rng = np.random.default_rng(sum(x_shape) + groups)
    x = rng.integers(0, 256, x_shape)
    x.reshape(-1)[:2] = (0, 255)
    w = rng.integers(-128, 128, w_shape).astype(np.int8)
    w.reshape(-1)[:2] = (-128, 127)
    xz, wz = 131, rng.integers(-5, 6, w_shape[0])
    want = _ref_conv(x, w, xz, wz, stride, pads, dilation, groups)
    g = _integer_graph("conv_integer", x_shape[1:], w,
                       {"x_zero_point": xz, "w_zero_point": list(wz), "stride": list(stride),
                        "padding": [list(p) for p in pads], "dilation": list(dilation), "group": groups},
                       want.shape[1:])
    codes = x.astype(np.uint8)
    plan = g.compile(batch_shape=x_shape[0])
    got = plan.run(codes)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    assert_same(plan.run(codes, trace=True, keep=True), g.run(codes, trace=True, keep=True, plan=False), "conv trace")


@pytest.mark.parametrize("k", [600, 70_000])
def test_matmul_integer_plan_against_python_ints(k):
    """K = 600: the worst case 600 * 255 * 128 is above 2^24 (the float64 GEMM) and below 2^31 (no wrap);
    K = 70,000: above 2^31, and these sums leave int32 (the wrap)."""
    x = np.full((2, k), 255, np.int64)
    x[1, ::3] = 0
    w = np.stack([np.full(k, -128), np.full(k, 127), np.resize([127, -128, 5], k)]).astype(np.int8)
    exact = np.array([[sum(int(a) * int(b) for a, b in zip(row, col)) for col in w.astype(np.int64)] for row in x])
    assert (np.abs(exact).max() > (1 << 31)) == (k > 10_000)
    want = np.vectorize(_wrap32)(exact)
    g = _integer_graph("matmul_integer", (k,), w, {"x_zero_point": 0, "w_zero_point": [0, 0, 0]}, (3,))
    got = g.compile(batch_shape=2).run(x.astype(np.uint8))
    assert got.dtype == np.int32 and np.array_equal(got, want)
    assert np.array_equal(g.run(x.astype(np.uint8), plan=False), want)


# ------------------------------------------------------------------------------------------ stale plans
def test_plan_edited_after_compiling_is_stale(tmp_path):
    path = MODELS / "qs_cnn_qdq_u8_pc.onnx"
    g = fxpsim.import_onnx(path, cpu="host")
    x = _nchw(g, 1, seed=3)
    plan = g.compile()
    before = plan.run(x)
    assert np.array_equal(before, _ort_run(path, x))
    conv = next(n for n in g.nodes if n.op == "qlinear_conv")
    w = g.tensors[conv.inputs[1]]
    w.data = (-w.data.astype(np.int16)).clip(-128, 127).astype(w.data.dtype)      # a constant's codes
    assert not plan.valid()
    with pytest.raises(ValueError, match="stale"):
        plan.run(x)
    edited = g.run(x)
    assert_same(g.run(x, trace=True, keep=True), g.run(x, trace=True, keep=True, plan=False), "weights edited")
    assert np.array_equal(edited, g.run(x, plan=False)) and not np.array_equal(edited, before)
    plan = g.compile()
    dw = next(n for n in g.nodes if n.op == "qlinear_conv" and int(n.attrs.get("group", 1)) > 1)
    dw.attrs["padding"] = [[0, 2], [0, 2]]        # an attribute: the same output shape, other windows
    with pytest.raises(ValueError, match="stale"):
        plan.run(x)
    after = g.run(x)
    assert_same(g.run(x, trace=True, keep=True), g.run(x, trace=True, keep=True, plan=False), "padding edited")
    assert not np.array_equal(after, edited)


# ------------------------------------------------------------------------------------------ elementwise tables
def _binary_graph(op, dtype_bits, signed, b_shape, attrs):
    x = TensorSpec("x", 8, signed, (3, 4, 5), scale=[0.05], zero_point=[3 if signed else 131])
    b = TensorSpec("b", 8, signed, b_shape, scale=[0.07], zero_point=[-2 if signed else 120],
                   data=np.random.default_rng(1).integers(-128 if signed else 0, 128 if signed else 256,
                                                          b_shape).astype(np.int8 if signed else np.uint8))
    y = TensorSpec("y", 8, signed, (3, 4, 5), scale=[0.09], zero_point=[1 if signed else 128])
    ins = ["b", "x"] if attrs.get("broadcast") == "a_scalar" else ["x", "b"]
    return IntegerGraph([x, b, y], [Node("e", op, ins, ["y"], attrs)], ["x"], ["y"], "g",
                        {"datapath": dict(ONNXRUNTIME_DATAPATH)})


@pytest.mark.parametrize("op", ["qlinear_add", "qlinear_mul"])
@pytest.mark.parametrize("signed, attrs, b_shape", [
    (False, {}, (3, 4, 5)), (False, {"broadcast": "b_scalar"}, (5,)), (False, {"broadcast": "a_scalar"}, (5,)),
    (True, {"u8_shift": True}, (3, 4, 5)), (True, {}, (1, 1, 5)), (True, {"ort_kernel": "float"}, (3, 4, 5))])
def test_binary_table_step_equals_the_run(op, signed, attrs, b_shape):
    """The lookup table built at compile time, indexed by both operands' codes with numpy broadcasting, gives the
    node-by-node run's codes (its arithmetic is onnxruntime's, checked live on the fixtures) on every extreme code."""
    if op == "qlinear_mul" and attrs.get("broadcast"):
        attrs = {}
    g = _binary_graph(op, 8, signed, b_shape, dict(attrs))
    lo, hi = (-128, 127) if signed else (0, 255)
    x = np.random.default_rng(2).integers(lo, hi + 1, (6, 3, 4, 5))
    x.reshape(6, -1)[:, :2] = (lo, hi)
    x = x.astype(np.int8 if signed else np.uint8)
    plan = g.compile(batch_shape=6)
    assert plan.steps[0][1].__qualname__.startswith("untraced_step")
    got = plan.run(x)
    want = g.run(x, plan=False)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    strided = np.repeat(x, 2, axis=3)[..., ::2]                     # a non-contiguous view of the same codes
    assert not strided.flags.c_contiguous and np.array_equal(plan.run(strided), want)
    saved, mlas_kernel._k = mlas_kernel._k, None                     # the numpy lookup
    try:
        assert np.array_equal(plan.run(x), want)
    finally:
        mlas_kernel._k = saved


class _CountingKernel:
    def __init__(self, k):
        self.k, self.calls = k, 0

    def table2(self, *args):
        self.calls += 1
        return self.k.table2(*args)


@pytest.mark.skipif(mlas_kernel._k is None, reason="the C kernels are not built")
@pytest.mark.parametrize("signed", [False, True])
def test_binary_table_step_in_c_on_operands_of_one_memory_order(signed, monkeypatch):
    """Two large operands of one shape and strides (contiguous, or both transposed as a float conv's NHWC output is)
    take the C lookup, and give the node-by-node run's codes; operands of other strides, or small, take numpy's."""
    g = _binary_graph("qlinear_add", 8, signed, (3, 4, 5), {})
    step = g.compile(batch_shape=240).steps[0][1]            # 14,400 codes (the C lookup from 4096)
    dt = np.int8 if signed else np.uint8
    rng = np.random.default_rng(9)
    lo, hi = (-128, 127) if signed else (0, 255)
    base_a, base_b = (rng.integers(lo, hi + 1, (240, 5, 3, 4)).astype(dt) for _ in range(2))
    a, b = np.transpose(base_a, (0, 2, 3, 1)), np.transpose(base_b, (0, 2, 3, 1))      # [240, 3, 4, 5] views
    from fxpsim.graph.datapath_settings import node_datapath
    from fxpsim.graph.registry import find_op
    run, dp = find_op("qlinear_add").run, node_datapath(g.default_datapath, g.nodes[0], 0)
    counting = _CountingKernel(mlas_kernel._k)
    monkeypatch.setattr(mlas_kernel, "_k", counting)
    for ops_in, c_calls in (([a, b], 1), ([np.ascontiguousarray(a), np.ascontiguousarray(b)], 1),
                            ([a, np.ascontiguousarray(b)], 0), ([a[:60], b[:60]], 0)):       # (the last: small)
        before = counting.calls
        got = step(ops_in, False)[0][0]
        assert counting.calls - before == c_calls
        want_here = run(g, g.nodes[0], [np.ascontiguousarray(o) for o in ops_in], dp, False)[0][0]
        assert got.dtype == want_here.dtype and np.array_equal(got, want_here)


def test_unmodelled_knobs_are_refused_through_the_plan_too():
    """A (hashable, so planned) datapath of onnxruntime's arithmetic that also sets a knob the ONNX MAC ops do not
    model raises through the plan as node by node, instead of the prepared step ignoring it."""
    from collections import namedtuple
    fields = dict(ONNXRUNTIME_DATAPATH, dense_requantization=None, bias_shift=0, accumulator_frac_bits=0)
    Knobbed = namedtuple("Knobbed", list(fields))
    g = fxpsim.import_onnx(MODELS / "qs_cnn_qdq_u8_pc.onnx", cpu="host")
    x = _nchw(g, 1)
    plain = Knobbed(**fields)
    assert np.array_equal(g.run(x, plain), _ort_run(MODELS / "qs_cnn_qdq_u8_pc.onnx", x))
    for change in ({"bias_shift": 2}, {"accumulator_frac_bits": 3}):
        for plan in (True, False):
            with pytest.raises(ValueError, match="does not model"):
                g.run(x, plain._replace(**change), plan=plan)


@pytest.mark.parametrize("name", ["qs_cnn_qdq_u8_pc", "qs_resblock_qdq_s8_pc"])
def test_an_overflow_log_sees_the_same_events_through_the_plan(name):
    g = fxpsim.import_onnx(MODELS / f"{name}.onnx", cpu="host")
    x = _nchw(g, 2) * 30                            # saturates the input quantizer
    g.run(x)                                        # the plan compiled outside the log
    logs = []
    for plan in (True, False):
        with fxpsim.overflow_log() as log:
            out = g.run(x, plan=plan)
        logs.append((out, log.as_dict()))
    assert np.array_equal(logs[0][0], logs[1][0]) and logs[0][1] == logs[1][1] and logs[0][1]


# ------------------------------------------------------------------------------------------ max pool
def _max_pool_graph(bits, signed, x_shape, attrs, out_hw):
    x = TensorSpec("x", bits, signed, x_shape, scale=[0.1], zero_point=[-5 if signed else 7])
    y = TensorSpec("y", bits, signed, out_hw + x_shape[2:], scale=[0.1], zero_point=[-5 if signed else 7])
    return IntegerGraph([x, y], [Node("mp", "max_pool2d", ["x"], ["y"], attrs)], ["x"], ["y"], "g",
                        {"datapath": dict(ONNXRUNTIME_DATAPATH)})


@pytest.mark.parametrize("bits, signed, x_shape, attrs, pads, clamp", [
    (8, True, (3, 3, 16), {"pool_size": [2, 2], "stride": [1, 1], "padding": [[0, 0], [0, 0]]}, ((0, 0), (0, 0)),
     None),
    (8, False, (7, 6, 3), {"pool_size": [3, 2], "stride": [2, 1], "padding": [[1, 2], [0, 1]]}, ((1, 2), (0, 1)),
     None),
    (8, True, (5, 5, 4), {"pool_size": [2, 2], "padding": "SAME"}, ((0, 1), (0, 1)), None),        # stride = size
    (16, True, (6, 4, 2), {"pool_size": [3, 3], "stride": [1, 2], "padding": "VALID", "clip": [-300, 400]},
     ((0, 0), (0, 0)), (-300, 400)),
    (8, True, (4, 4, 3), {"pool_size": [2, 2], "stride": [2, 2], "padding": [[1, 1], [1, 1]],
                          "activation": "relu"}, ((1, 1), (1, 1)), (-5, 127)),
])
def test_max_pool_plan_against_python_ints(bits, signed, x_shape, attrs, pads, clamp, monkeypatch):
    from fxpsim.graph import ops as core_ops
    info = np.iinfo(f"{'' if signed else 'u'}int{bits}")
    k = tuple(attrs["pool_size"])
    s = tuple(attrs.get("stride", k))
    oh = (x_shape[0] + sum(pads[0]) - k[0]) // s[0] + 1
    ow = (x_shape[1] + sum(pads[1]) - k[1]) // s[1] + 1
    g = _max_pool_graph(bits, signed, x_shape, attrs, (oh, ow))
    rng = np.random.default_rng(bits + sum(x_shape))
    x = rng.integers(int(info.min), int(info.max) + 1, (4,) + x_shape)
    x.reshape(4, -1)[:, :2] = (int(info.min), int(info.max))
    x = x.astype(info.dtype)
    lo, hi = clamp or (int(info.min), int(info.max))
    want = ref_max_pool(x, k, s, pads, lo, hi, int(info.min))
    by_node = g.run(x, plan=False)
    assert by_node.dtype == info.dtype and np.array_equal(by_node, want)
    plan = g.compile(batch_shape=4)
    assert_same(plan.run(x, trace=True, keep=True), g.run(x, trace=True, keep=True, plan=False), "max pool trace")

    def refused(*a, **kw):
        raise AssertionError("the node-by-node max pool ran inside the plan")
    monkeypatch.setattr(core_ops.float_conv, "extract_patches", refused)
    got = plan.run(x)                                                 # the prepared step: no patches view
    assert got.dtype == info.dtype and np.array_equal(got, want)
    with pytest.raises(AssertionError, match="node-by-node max pool"):
        g.run(x, plan=False)


def test_max_pool_plan_edited_after_compiling_is_stale():
    g = _max_pool_graph(8, True, (5, 5, 2), {"pool_size": [2, 2], "stride": [1, 1], "padding": "VALID"}, (4, 4))
    x = np.random.default_rng(4).integers(-128, 128, (2, 5, 5, 2)).astype(np.int8)
    plan = g.compile(batch_shape=2)
    before = plan.run(x)
    g.nodes[0].attrs["padding"] = [[1, 0], [1, 0]]          # the same output shape, other windows
    with pytest.raises(ValueError, match="stale"):
        plan.run(x)
    after = g.run(x)
    assert np.array_equal(after, ref_max_pool(x, (2, 2), (1, 1), ((1, 0), (1, 0)), -128, 127, -128))
    assert np.array_equal(after, g.run(x, plan=False)) and not np.array_equal(after, before)
