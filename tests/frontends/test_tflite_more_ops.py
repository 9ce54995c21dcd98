"""SLICE, GATHER, TRANSPOSE, RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR against LiteRT running in every kernel set.

* The converter's models of ``tests/vectors/tflite_more`` (``tools/fixtures/tflite_more``), run live in LiteRT on
  random inputs with the code extremes: every output bit for bit, and every intermediate tensor of the reference
  and builtin runs.
* Hand-built one-op resize and gather models with hypothesis-drawn sizes, options and axes, live.
* The resize kernels against an independent scalar Python model of their integer arithmetic (hypothesis).
* Errors: out-of-range indices (constant: at import; at run time: a ``ValueError`` naming the node where LiteRT
  fails the invoke), wrong ranks, the batch axis, unequal quantization.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxpsim
from fxpsim.datapath import tflite as K
from fxpsim.graph import load_graph
from reference import ref_mbqm, ref_quantize_multiplier

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from test_tflite_import import _act, _const, _litert, _options, _random_inputs, build_tflite  # noqa: E402

KERNELS = ("reference", "builtin", "xnnpack")
MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "tflite_more"
MODELS = sorted(p.stem for p in MODELS_DIR.glob("*.tflite"))
Q = (0.05, -3)


def test_fixtures_present():
    assert {"slice", "transpose", "gather_constant_indices", "gather_batch_dims", "gather_embedding",
            "resize_bilinear_half_pixel", "resize_bilinear_align_corners", "resize_bilinear_legacy",
            "resize_nearest_half_pixel", "resize_nearest_align_corners", "resize_nearest_legacy",
            "upsampling2d_bilinear", "batch_matmul"} <= set(MODELS)


def _interpreter(model, kernels, preserve=False):
    _litert()
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    r = {"reference": OpResolverType.BUILTIN_REF, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
         "xnnpack": OpResolverType.BUILTIN}[kernels]
    kw = {"model_content": model} if isinstance(model, bytes) else {"model_path": str(model)}
    # XNNPACK's intermediates are readable only with each delegated op in a partition of its own
    it = Interpreter(**kw, num_threads=1, experimental_op_resolver_type=r, experimental_preserve_all_tensors=preserve,
                     experimental_disable_delegate_node_fusion=preserve and kernels == "xnnpack")
    it.allocate_tensors()
    return it


def _index_range(g, name) -> int:
    """The size of the axis the graph's GATHER reads with run-time indices ``name``."""
    node = next(n for n in g.nodes if n.op == "tflite_gather" and n.inputs[1] == name)
    p = g.tensors[node.inputs[0]]
    return (p.shape if p.is_constant else (1,) + p.shape)[node.attrs["axis"]]


def _feeds(g, n, seed):
    """Random inputs per graph input: int8 codes (normal, uniform, both extremes) or valid indices (both ends)."""
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        spec = g.tensors[name]
        if spec.scale is None:
            hi = _index_range(g, name)
            v = rng.integers(0, hi, (n,) + spec.shape)
            v[0], v[1] = 0, hi - 1
            out.append(v.astype(spec.dtype))
        else:
            x = _random_inputs({"shape": (1,) + spec.shape, "dtype": np.int8, "quantization": (0.0, 0)}, n, seed)
            x[0], x[1] = -128, 127
            out.append(x)
    return out


def _compare_live(g, model, kernels, feeds, intermediates):
    it = _interpreter(model, kernels, preserve=intermediates)
    ys, _, kept = g.run(feeds, keep=True)
    ys = ys if isinstance(ys, list) else [ys]
    index = g.meta["tflite_tensors"]
    got = []
    for s in range(len(feeds[0])):
        for name, f in zip(g.inputs, feeds):
            it.set_tensor(index[name], f[s:s + 1])
        it.invoke()
        for k, name in enumerate(g.outputs):
            want = it.get_tensor(index[name])[0]
            assert ys[k][s].dtype == want.dtype
            np.testing.assert_array_equal(ys[k][s], want, err_msg=f"{kernels} output {name!r} sample {s}")
        got.append([it.get_tensor(index[name])[0].copy() for name in g.outputs])
        if intermediates:
            for name, i in index.items():
                if name in kept and name not in g.inputs:
                    np.testing.assert_array_equal(kept[name][s], it.get_tensor(i)[0],
                                                  err_msg=f"{kernels} tensor {name!r} sample {s}")
    return got


OP_OF = {"slice": "tflite_strided_slice", "transpose": "transpose", "gather": "tflite_gather",
         "resize_bilinear": "tflite_resize_bilinear", "upsampling2d_bilinear": "tflite_resize_bilinear",
         "resize_nearest": "tflite_resize_nearest", "batch_matmul": "tflite_batch_matmul"}


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", MODELS)
def test_converter_models_equal_live_litert(name, kernels):
    path = MODELS_DIR / f"{name}.tflite"
    g = fxpsim.import_tflite(path, kernels=kernels)
    op = next(v for k, v in OP_OF.items() if name.startswith(k))
    assert op in [n.op for n in g.nodes]
    _compare_live(g, path, kernels, _feeds(g, 40, len(name)), intermediates=kernels != "xnnpack")


def test_the_kernel_sets_really_differ_on_bilinear():
    """XNNPACK's bilinear arithmetic is not the builtin one (so the test above tells them apart)."""
    path = MODELS_DIR / "resize_bilinear_half_pixel.tflite"
    g = fxpsim.import_tflite(path, kernels="xnnpack")
    feeds = _feeds(g, 24, 3)
    ref = _compare_live(fxpsim.import_tflite(path, kernels="reference"), path, "reference", feeds, False)
    xnn = _compare_live(g, path, "xnnpack", feeds, False)
    assert any(np.any(a[0] != b[0]) for a, b in zip(ref, xnn))


def test_index_inputs_save_and_run_float(tmp_path):
    g = fxpsim.import_tflite(MODELS_DIR / "gather_embedding.tflite")
    spec = g.tensors[g.inputs[0]]
    assert spec.scale is None and spec.dtype == np.int32
    x = _feeds(g, 8, 1)
    back = load_graph(g.save(tmp_path / "g.npz"))
    np.testing.assert_array_equal(back.run(x), g.run(x))
    np.testing.assert_allclose(g.run_float(x), g.tensors[g.outputs[0]].dequantize(g.run(x)))
    for name in ("resize_bilinear_half_pixel", "resize_bilinear_align_corners", "resize_bilinear_legacy"):
        # the node's float reference: within half an LSB of rounding plus the error of LiteRT's 10-bit scale
        # (about i / 2^10 pixel at output index i, times the codes' step between neighbours)
        r = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite")
        node = next(n for n in r.nodes if n.op == "tflite_resize_bilinear")
        y, _, kept = r.run(_feeds(r, 8, 2), keep=True)
        xs, ys = r.tensors[node.inputs[0]], r.tensors[node.outputs[0]]
        want = fxpsim.graph.ops.OPS[node.op].run_float(r, node, [xs.dequantize(kept[node.inputs[0]])])[0]
        np.testing.assert_allclose(want, ys.dequantize(y), atol=1.5 * ys.scale[0])


def test_coverage_lists_the_new_ops():
    for name, op in (("slice", "SLICE"), ("transpose", "TRANSPOSE"), ("gather_embedding", "GATHER"),
                     ("resize_nearest_legacy", "RESIZE_NEAREST_NEIGHBOR"), ("resize_bilinear_legacy", "RESIZE_BILINEAR")):
        cov = fxpsim.tflite_coverage(MODELS_DIR / f"{name}.tflite")
        assert op in {r.op for r in cov.rows} and all(cov.imports(k) for k in KERNELS)
    from fxpsim.frontends.tflite.coverage import SUPPORTED_OPS
    assert {"SLICE", "GATHER", "TRANSPOSE", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"} <= set(SUPPORTED_OPS)


# ------------------------------------------------------------------------------------------ one-op models
def _resize_model(op, ih, iw, oh, ow, c, align, half):
    kind = {"RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions"}[op]
    tensors = [_act("x", [1, ih, iw, c], *Q), _const("size", np.array([oh, ow], np.int32)),
               _act("y", [1, oh, ow, c], *Q)]
    return build_tflite(tensors, [{"op": op, "inputs": [0, 1], "outputs": [2],
                                   "options": _options(kind, AlignCorners=align, HalfPixelCenters=half)}], [0], [2])


def _import(tmp_path, content, kernels, name="m.tflite"):
    path = tmp_path / name
    path.write_bytes(content)
    return fxpsim.import_tflite(path, kernels=kernels)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"]), ih=st.integers(1, 12),
       iw=st.integers(1, 12), oh=st.integers(1, 24), ow=st.integers(1, 24), c=st.integers(1, 19),
       flags=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
       seed=st.integers(0, 2 ** 16))
def test_resize_one_op_models_equal_live_litert(tmp_path, op, ih, iw, oh, ow, c, flags, seed):
    content = _resize_model(op, ih, iw, oh, ow, c, *flags)
    for kernels in KERNELS:
        if op == "RESIZE_BILINEAR" and all(flags) and kernels != "xnnpack":
            with pytest.raises(ValueError, match="align_corners and half_pixel_centers"):
                _import(tmp_path, content, kernels)
            with pytest.raises(RuntimeError):          # LiteRT's Prepare refuses it too
                _interpreter(content, kernels)
            continue
        g = _import(tmp_path, content, kernels)
        feeds = _feeds(g, 3, seed)
        _compare_live(g, content, kernels, feeds, False)


def _gather_model(p_shape, i_shape, axis, bd, const_params=None, const_indices=None, out_shape=None):
    tensors = [_const("p", const_params, 9, scale=[Q[0]], zero_point=[Q[1]]) if const_params is not None
               else _act("p", p_shape, *Q),
               _const("i", const_indices) if const_indices is not None else dict(name="i", type=2, shape=i_shape),
               _act("y", out_shape, *Q)]
    inputs = [k for k, v in ((0, const_params), (1, const_indices)) if v is None]
    return build_tflite(tensors, [{"op": "GATHER", "inputs": [0, 1], "outputs": [2],
                                   "options": _options("GatherOptions", Axis=axis, BatchDims=bd)}], inputs, [2])


@st.composite
def _gathers(draw):
    """(params shape, indices shape, axis, batch_dims, which side is constant, negative axis): TFLite shapes
    whose output keeps a batch of 1 on axis 0 (run-time indices carry it; constant params may lack it)."""
    rank = draw(st.integers(2, 4))
    p = [1] + [draw(st.integers(1, 5)) for _ in range(rank - 1)]
    mode = draw(st.sampled_from(["params", "indices", "both"]))     # the run-time side(s)
    bd = draw(st.integers(0, rank - 1))
    axis = draw(st.integers(max(bd, 0 if mode == "indices" else 1), rank - 1))
    if mode == "indices" and axis == 0:
        p[0] = draw(st.integers(1, 6))                   # an embedding table
    extra = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    i = p[:bd] + extra if bd or mode == "params" else [1] + extra
    return p, i, axis, bd, mode, draw(st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_gathers(), seed=st.integers(0, 2 ** 16))
def test_gather_one_op_models_equal_live_litert(tmp_path, case, seed):
    p, i, axis, bd, mode, neg = case
    rng = np.random.default_rng(seed)
    out = p[:axis] + i[bd:] + p[axis + 1:]
    cp = rng.integers(-128, 128, p).astype(np.int8) if mode == "indices" else None   # constant params
    ci = rng.integers(0, p[axis], i).astype(np.int32) if mode == "params" else None
    content = _gather_model(p, i, axis - len(p) if neg else axis, bd, cp, ci, out)
    for kernels in KERNELS:
        g = _import(tmp_path, content, kernels)
        _compare_live(g, content, kernels, _feeds(g, 4, seed), kernels != "xnnpack")


@pytest.mark.parametrize("kernels", KERNELS)
def test_run_time_indices_out_of_range_raise_where_litert_fails(tmp_path, kernels):
    table = np.arange(40, dtype=np.int8).reshape(10, 4)
    content = _gather_model(None, [1, 3], 0, 0, const_params=table, out_shape=[1, 3, 4])
    g = _import(tmp_path, content, kernels)
    it = _interpreter(content, kernels)
    for bad in ([[1, 10, 0]], [[-1, 2, 3]]):
        idx = np.array(bad, np.int32)
        it.set_tensor(it.get_input_details()[0]["index"], idx)
        with pytest.raises(RuntimeError, match="out of bounds"):
            it.invoke()
        with pytest.raises(ValueError, match=r"op0:GATHER.*index -?\d+ is out of range \[0, 10\)"):
            g.run(np.concatenate([np.array([[0, 1, 2]], np.int32), idx]))
    np.testing.assert_array_equal(g.run(np.array([[9, 0, 3]], np.int32))[0], table[[9, 0, 3]])


# ------------------------------------------------------------------------------------------ errors at import
def _raises(tmp_path, content, match):
    with pytest.raises(ValueError, match=match):
        _import(tmp_path, content, "reference")


def test_bad_operators_are_refused_naming_the_node(tmp_path):
    x = _act("x", [1, 4, 5, 3], *Q)
    i32 = lambda v: np.array(v, np.int32)  # noqa: E731
    gather = lambda idx, out, axis=2, bd=0: build_tflite(  # noqa: E731
        [x, _const("i", i32(idx)), _act("y", out, *Q)],
        [{"op": "GATHER", "inputs": [0, 1], "outputs": [2], "options": _options("GatherOptions", Axis=axis,
                                                                                BatchDims=bd)}], [0], [2])
    _raises(tmp_path, gather([0, 5], [1, 4, 2, 3]), r"operator 0 \(GATHER.*constant index 5 out of range \[0, 5\)")
    _raises(tmp_path, gather([-1], [1, 4, 1, 3]), r"operator 0 \(GATHER.*constant index -1 out of range")
    _raises(tmp_path, gather([0], [1, 4, 1, 3], axis=4), r"operator 0 \(GATHER.*axis 4 and batch_dims 0 do not fit")
    _raises(tmp_path, gather([[0]], [1, 1, 5, 3], axis=1, bd=2), r"GATHER.*do not fit")
    _raises(tmp_path, gather([0], [4, 5, 3], axis=0), r"GATHER.*along the batch axis")

    def one(op, extra, out, opts=None, y_q=Q):
        tensors = [x] + extra + [_act("y", out, *y_q)]
        n = len(tensors) - 1
        return build_tflite(tensors, [{"op": op, "inputs": list(range(n)), "outputs": [n], "options": opts}],
                            [0], [n])
    _raises(tmp_path, one("SLICE", [_const("b", i32([0, 0, 0])), _const("s", i32([1, 2, 2]))], [1, 2, 2]),
            r"operator 0 \(SLICE.*begin has 3 values for an input of rank 4")
    _raises(tmp_path, one("SLICE", [_const("b", i32([0, 3, 0, 0])), _const("s", i32([1, 2, -1, -1]))], [1, 2, 5, 3]),
            r"SLICE.*do not fit axis 1")
    _raises(tmp_path, one("SLICE", [_const("b", i32([0, 0, 0, 0])), _const("s", i32([1, 2, -1, -1]))], [1, 2, 5, 3],
                          y_q=(0.1, 0)), r"SLICE.*different scales or zero points")
    _raises(tmp_path, one("TRANSPOSE", [_const("p", i32([0, 2, 1]))], [1, 5, 4, 3]),
            r"operator 0 \(TRANSPOSE.*perm \[0, 2, 1\] is not a permutation of the 4 axes")
    _raises(tmp_path, one("TRANSPOSE", [_const("p", i32([1, 0, 2, 3]))], [4, 1, 5, 3]), r"TRANSPOSE.*batch axis")
    _raises(tmp_path, one("RESIZE_BILINEAR", [_const("s", i32([8]))], [1, 8, 5, 3],
                          _options("ResizeBilinearOptions", AlignCorners=False)), r"RESIZE_BILINEAR.*size of two")
    x3 = _act("x", [1, 4, 5], *Q)
    content = build_tflite([x3, _const("s", i32([8, 10])), _act("y", [1, 8, 10], *Q)],
                           [{"op": "RESIZE_NEAREST_NEIGHBOR", "inputs": [0, 1], "outputs": [2]}], [0], [2])
    _raises(tmp_path, content, r"operator 0 \(RESIZE_NEAREST_NEIGHBOR.*4-D NHWC input")


def test_bilinear_with_both_flags_is_listed_per_kernel_set(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(_resize_model("RESIZE_BILINEAR", 3, 4, 6, 8, 2, True, True))
    cov = fxpsim.tflite_coverage(path)
    assert not cov.imports("reference") and not cov.imports("builtin") and cov.imports("xnnpack")
    assert "Prepare refuses" in cov.format()


# ------------------------------------------------------------------------------------------ independent models
def _model_reference(x, oh, ow, align, half):
    """``ResizeBilinearInteger`` one output at a time on Python ints (C division truncates toward zero)."""
    def tdiv(a, b):
        return -(-a // b) if a < 0 else a // b

    def axis(n_in, n_out, i):
        c = (1024 * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1) if align and n_out > 1 else \
            (1024 * n_in + n_out // 2) // n_out
        p = i * c + c // 2 - 512 if half else i * c
        lo, hi = max(tdiv(p, 1024), 0), min(tdiv(p + 1023, 1024), n_in - 1)
        return lo, hi, 1024 - (p - 1024 * lo), p - 1024 * lo
    n, ih, iw, c = x.shape
    out = np.zeros((n, oh, ow, c), x.dtype)
    for b in range(n):
        for yo in range(oh):
            y0, y1, wy0, wy1 = axis(ih, oh, yo)
            for xo in range(ow):
                x0, x1, wx0, wx1 = axis(iw, ow, xo)
                for ch in range(c):
                    s = (int(x[b, y0, x0, ch]) * wy0 * wx0 + int(x[b, y1, x0, ch]) * wy1 * wx0 +
                         int(x[b, y0, x1, ch]) * wy0 * wx1 + int(x[b, y1, x1, ch]) * wy1 * wx1)
                    out[b, yo, xo, ch] = tdiv(s + (1 << 19 if s > 0 else -(1 << 19)), 1 << 20)
    return out


def _model_xnnpack(x, oh, ow, align, half):
    """XNNPACK's q11 indirection (float32 scalars) and ``s8-ibilinear`` scalar kernel on Python ints."""
    f32 = np.float32

    def axis(n_in, n_out, i):
        a = 1 if align and n_out != 1 else 0
        c = f32(f32(n_in - a) / f32(n_out - a))
        p = f32(f32(i) * c)
        if half and not align:
            p = min(max(f32(p + f32(f32(0.5) * c - f32(0.5))), f32(0)), f32(n_in - 1))
        lo = int(p)
        return lo, min(lo + 1, n_in - 1), int(np.rint(f32(f32(p - f32(lo)) * f32(2048))))
    n, ih, iw, c = x.shape
    out = np.zeros((n, oh, ow, c), np.int8)
    for yo in range(oh):
        y0, y1, av = axis(ih, oh, yo)
        for xo in range(ow):
            x0, x1, ah = axis(iw, ow, xo)
            for b in range(n):
                for ch in range(c):
                    tl, tr, bl, br = (int(x[b, yy, xx, ch]) for yy, xx in ((y0, x0), (y0, x1), (y1, x0), (y1, x1)))
                    t, bb = (tl << 11) + (tr - tl) * ah, (bl << 11) + (br - bl) * ah
                    out[b, yo, xo, ch] = ((t << 11) + (bb - t) * av + (1 << 21)) >> 22
    return out


@settings(max_examples=60, deadline=None)
@given(ih=st.integers(1, 9), iw=st.integers(1, 9), oh=st.integers(1, 14), ow=st.integers(1, 14),
       c=st.integers(1, 3), flags=st.sampled_from([(False, False), (True, False), (False, True)]),
       dtype=st.sampled_from([np.int8, np.int16]), seed=st.integers(0, 2 ** 16))
def test_bilinear_kernels_equal_independent_models(ih, iw, oh, ow, c, flags, dtype, seed):
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max + 1, (2, ih, iw, c)).astype(dtype)
    x[0, 0, 0, 0], x[-1, -1, -1, -1] = info.min, info.max
    for kernels in ("reference", "builtin"):
        np.testing.assert_array_equal(K.quantized_resize_bilinear(x, (oh, ow), align_corners=flags[0],
                                                                  half_pixel_centers=flags[1], kernels=kernels),
                                      _model_reference(x, oh, ow, *flags))
    if dtype == np.int8:
        for align, half in (flags, (True, True)):
            got = K.quantized_resize_bilinear(x, (oh, ow), align_corners=align, half_pixel_centers=half,
                                              kernels="xnnpack")
            np.testing.assert_array_equal(got, _model_xnnpack(x, oh, ow, align, half))
    else:
        with pytest.raises(NotImplementedError, match="XNNPACK's int16"):
            K.quantized_resize_bilinear(x, (oh, ow), kernels="xnnpack")


@settings(max_examples=40, deadline=None)
@given(n_in=st.integers(1, 40), n_out=st.integers(1, 80), align=st.booleans(), half=st.booleans())
def test_nearest_indices_are_in_range_and_monotone(n_in, n_out, align, half):
    for kernels in KERNELS:
        i = K.resize_nearest_indices(n_in, n_out, align_corners=align, half_pixel_centers=half, kernels=kernels)
        assert i.shape == (n_out,) and i.min() >= 0 and i.max() <= n_in - 1 and np.all(np.diff(i) >= 0)
        if kernels != "reference" and n_out % n_in == 0 and not align and not half:   # 16.16: exact repeats
            np.testing.assert_array_equal(i, np.repeat(np.arange(n_in), n_out // n_in))


def test_kernel_argument_errors():
    x = np.zeros((1, 2, 2, 1), np.int8)
    with pytest.raises(TypeError, match="int8 or int16"):
        K.quantized_resize_bilinear(x.astype(np.int32), (3, 3))
    with pytest.raises(ValueError, match="NHWC"):
        K.quantized_resize_nearest(x[0], (3, 3))
    with pytest.raises(ValueError, match="output size"):
        K.quantized_resize_nearest(x, (0, 3))
    with pytest.raises(ValueError, match="align_corners and half_pixel_centers"):
        K.quantized_resize_bilinear(x, (3, 3), align_corners=True, half_pixel_centers=True)
    with pytest.raises(TypeError, match="integers"):
        K.gather_tflite(x, np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="out of range"):
        K.gather_tflite(x, np.array([2]), axis=1)
    before = x.copy()
    K.gather_tflite(x, np.array([1, 0]), axis=2)
    np.testing.assert_array_equal(x, before)


# ------------------------------------------------------------------------------------------ BATCH_MATMUL
def _model_batch_matmul(a, b, qa, qb, qy):
    """Zero-point-shifted int products summed on Python ints, then MBQM of the exact-rational multiplier."""
    m, e = ref_quantize_multiplier(float(np.float64(np.float32(qa[0])) * np.float64(np.float32(qb[0])) /
                                         np.float64(np.float32(qy[0]))))
    out = np.zeros(a.shape[:-1] + b.shape[-1:], np.int8)
    for idx in np.ndindex(*out.shape):
        *batch, r, c = idx
        acc = sum((int(a[(*batch, r, k)]) - qa[1]) * (int(b[(*batch, k, c)]) - qb[1]) for k in range(a.shape[-1]))
        out[idx] = min(max(ref_mbqm(acc, m, e, "double") + qy[1], -128), 127)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 9), k=st.integers(1, 40), n=st.integers(1, 9), batch=st.integers(1, 3),
       adj=st.tuples(st.booleans(), st.booleans()), const_b=st.booleans(),
       q=st.tuples(*[st.tuples(st.floats(0.002, 0.08), st.integers(-30, 30))] * 2,
                   st.tuples(st.floats(0.01, 2.0), st.integers(-30, 30))),
       seed=st.integers(0, 2 ** 16))
def test_batch_matmul_one_op_models_equal_live_litert_and_a_python_model(tmp_path, m, k, n, batch, adj, const_b, q,
                                                                          seed):
    rng = np.random.default_rng(seed)
    qa, qb, qy = q
    ash = [1, batch] + ([k, m] if adj[0] else [m, k])
    bsh = [1, batch] + ([n, k] if adj[1] else [k, n])
    bdata = rng.integers(-128, 128, bsh).astype(np.int8)
    tensors = [_act("a", ash, *qa), _const("b", bdata, 9, scale=[qb[0]], zero_point=[qb[1]]) if const_b else
               _act("b", bsh, *qb), _act("y", [1, batch, m, n], *qy)]
    content = build_tflite(tensors, [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2],
                                      "options": _options("BatchMatMulOptions", AdjX=adj[0], AdjY=adj[1])}],
                           [0] if const_b else [0, 1], [2])
    for kernels in ("reference", "builtin"):
        g = _import(tmp_path, content, kernels)
        feeds = _feeds(g, 3, seed)
        _compare_live(g, content, kernels, feeds, False)
    a = feeds[0][:1].reshape(ash)
    b = bdata if const_b else feeds[1][:1].reshape(bsh)
    want = _model_batch_matmul(np.swapaxes(a, -1, -2) if adj[0] else a, np.swapaxes(b, -1, -2) if adj[1] else b,
                               qa, qb, qy)
    np.testing.assert_array_equal(g.run(feeds)[:1].reshape(want.shape), want)


def test_batch_matmul_operand_ranks(tmp_path):
    """A run-time operand whose batch axis would be broadcast against another axis is refused."""
    content = build_tflite([_act("a", [1, 4, 6], *Q), _act("b", [1, 2, 6, 3], *Q), _act("y", [1, 2, 4, 3], *Q)],
                           [{"op": "BATCH_MATMUL", "inputs": [0, 1], "outputs": [2]}], [0, 1], [2])
    _raises(tmp_path, content, r"operator 0 \(BATCH_MATMUL.*run-time operand 'a' of shape \[1, 4, 6\]")
