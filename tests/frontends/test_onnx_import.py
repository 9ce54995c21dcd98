"""fxpsim.import_onnx: quantized ONNX models run bit for bit as onnxruntime's CPU execution provider.

* every committed fixture (``tests/vectors/onnx_models``: ``quantize_static`` QDQ / QOperator models and
  hand-built QLinear graphs, outputs and intermediates stored by onnxruntime 1.32 with default options);
* live against onnxruntime (when installed) on fresh seeded inputs: the fixtures, freshly quantized models,
  and hand-built QDQ graphs that exercise onnxruntime's fusion rules (groups it fuses, groups it leaves in
  float32, its int8 -> uint8 rewrite, broadcasting, Relu/Clip removal, back-to-back Q/DQ pairs), each
  imported with the host's CPU flavour (``cpu="host"``: int16-saturating uint8 x int8 pairs on AVX2 without
  VNNI, see ``test_onnx_avx2.py``);
* other datapaths: a conv model on 16-bit saturating and wrapping accumulators against a Python-integer model;
* errors: unsupported ops, damaged files, float models, a missing ``onnx`` package.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.graph import load_graph
from fxpsim.graph.ops import run_node
from reference import accumulate, ref_mbqm, ref_quantize_multiplier

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install -e '.[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fxpsim.frontends.onnx.importer import SUPPORTED_OPS, import_onnx  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parents[1] / "vectors" / "onnx_models"
MANIFEST = json.loads((MODELS_DIR / "manifest.json").read_text())
# every committed quantized model (the manifest may lag behind models added to the directory)
QUANTIZED = sorted({p.stem for p in MODELS_DIR.glob("*.onnx") if (MODELS_DIR / f"{p.stem}.npz").exists()}
                   - {k for k, v in MANIFEST["models"].items() if v["kind"] == "float"} - {"float_cnn", "float_mlp",
                                                                                          "float_resblock"})
FLOAT_MODELS = sorted(k for k, v in MANIFEST["models"].items() if v["kind"] == "float")
F32 = np.float32
_GRAPHS: dict = {}


def _ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install -e '.[onnx]')")


def _graph(name):
    if name not in _GRAPHS:
        _GRAPHS[name] = import_onnx(MODELS_DIR / f"{name}.onnx")
    return _GRAPHS[name]


def _vectors(name):
    return np.load(MODELS_DIR / f"{name}.npz")


def _inputs(g, d):
    return [d[f"input:{i}"] for i in g.inputs] if len(g.inputs) > 1 else [d["input"]]


def _outputs(g, d, prefix="output"):
    return [d[f"{prefix}:{o}"] for o in g.outputs] if len(g.outputs) > 1 else [d[prefix]]


def _run(g, inputs, datapath=None, keep=False):
    """Run ``g`` on inputs whose batch sizes may differ (independent subgraphs): every input is repeated
    cyclically to the largest batch, each output cut back to its own rows by the caller. Inputs with NaN/inf
    (QuantizeLinear defines them; ``IntegerGraph.run`` refuses them) run node by node."""
    n = max(len(a) for a in inputs)
    feeds = [a[np.arange(n) % len(a)] for a in inputs]
    if all(np.all(np.isfinite(a)) for a in feeds if a.dtype.kind == "f"):
        res = g.run(feeds, datapath, keep=keep)
        outs, kept = (res[0], res[2]) if keep else (res, None)
        return (outs if isinstance(outs, list) else [outs]), kept
    values = {k: t.data for k, t in g.tensors.items() if t.is_constant}
    values.update(zip(g.inputs, feeds))
    for node in g.nodes:
        outs, _ = run_node(g, node, [values[t] for t in node.inputs], datapath or g.default_datapath, False)
        values.update(zip(node.outputs, outs))
    return [values[o] for o in g.outputs], values


def _assert_equal_rows(got, want, what):
    got = got[:len(want)]
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, onnxruntime {want.dtype}"
    bad = np.count_nonzero(got != want)
    assert bad == 0, f"{what}: {bad} of {want.size} values differ from onnxruntime"


# ------------------------------------------------------------------------------------------ fixtures
def test_fixtures_present():
    assert len(QUANTIZED) >= 50 and FLOAT_MODELS
    assert MANIFEST["versions"]["onnxruntime"].startswith("1.")


@pytest.mark.parametrize("name", QUANTIZED)
def test_fixture_outputs_and_intermediates_bit_exact(name):
    g, d = _graph(name), _vectors(name)
    outs, kept = _run(g, _inputs(g, d), keep=True)
    for o, got, want in zip(g.outputs, outs, _outputs(g, d)):
        _assert_equal_rows(got, want, f"{name} output {o}")
    checked = 0
    for key in d.files:
        t = key[2:]
        if not key.startswith("t:") or t not in kept or d[key].dtype.kind not in "iu":
            continue
        got, want = kept[t], d[key]
        if got.shape[1:] != want.shape[1:] and got.ndim == 4:
            got = np.transpose(got, (0, 3, 1, 2))               # NHWC inside the graph
        _assert_equal_rows(got, want, f"{name} intermediate {t}")
        checked += 1
    assert checked >= 1


def test_fixture_graph_structure_and_metadata():
    g = _graph("qs_resblock_qdq_s8_pc")
    assert g.meta["format"] == "onnx" and g.meta["source"].endswith("qs_resblock_qdq_s8_pc.onnx")
    assert g.meta["datapath"]["requantization"] == "native" and g.default_datapath.name == "onnxruntime-cpu"
    assert g.default_datapath.accumulator_bits == 32 and g.default_datapath.accumulator_overflow == "wrap"
    # what onnxruntime leaves unfused here: the first Conv (its int8 input has two consumers, so it is not
    # rewritten to uint8) and the residual Add (int8 and uint8 operands)
    assert {f["node"] for f in g.meta["onnxruntime"]["float_nodes"]} == {"conv1", "residual_add"}
    ops = [n.op for n in g.nodes]
    assert ops.count("qlinear_conv") == 2 and "qlinear_add" in ops and "qlinear_matmul" in ops
    assert g.node("conv1").attrs["ort_kernel"] == "float" and g.node("conv2").attrs["ort_kernel"] == "qlinear"
    x = g.tensors[g.inputs[0]]
    assert x.is_float and x.shape == (16, 4, 4)                  # the model's own NCHW float input
    assert g.tensors[g.outputs[0]].is_float
    assert g.tensors[g.node("conv2").inputs[1]].shape == (16, 3, 3, 16)      # OHWI weights
    text = g.summary()
    assert "qlinear_conv" in text and "acc bits" in text
    assert sum(g.macs(n) for n in g.nodes) == 2 * 16 * 16 * 16 * 9 + 64 + 16 * 16


def test_fixture_layout_transposes():
    g = _graph("qs_cnn_qop_u8_pc")
    tr = [n for n in g.nodes if n.op == "transpose"]
    # the input goes to NHWC; the Flatten reads a 1x1 image after the global pool, whose NCHW and NHWC
    # orders agree, so no transpose is needed there
    assert [n.attrs["perm"] for n in tr] == [[1, 2, 0]]
    assert g.tensors[g.inputs[0]].shape == (3, 6, 6) and g.tensors["input:nhwc"].shape == (6, 6, 3)
    g = _graph("hb_qlinearconv_u8_pt")
    assert [n.attrs["perm"] for n in g.nodes if n.op == "transpose"] == [[1, 2, 0], [2, 0, 1]]
    assert g.tensors[g.outputs[0]].shape == (16, 3, 3)           # integer NCHW output, as the model's


@pytest.mark.parametrize("name", ["qs_cnn_qdq_u8_pc", "hb_qlinear_pool_s8", "qs_mlp_qop_s8_pt",
                                  "hb_qlinear_eltwise_edge_u8"])
def test_saved_graph_reads_back(tmp_path, name):
    g, d = _graph(name), _vectors(name)
    back = load_graph(g.save(tmp_path / "g"))
    assert back.meta == g.meta and [n.op for n in back.nodes] == [n.op for n in g.nodes]
    for got, want in zip(_run(back, _inputs(g, d))[0], _outputs(g, d)):
        _assert_equal_rows(got, want, name)


def test_saved_graph_reads_back_in_a_fresh_process(tmp_path):
    """``load_graph`` finds the ONNX ops without fxpsim.frontends.onnx.importer (or onnx) having been imported."""
    name = "qs_resblock_qdq_s8_pt"
    g, d = _graph(name), _vectors(name)
    path = g.save(tmp_path / "g")
    np.save(tmp_path / "x.npy", d["input"])
    np.save(tmp_path / "y.npy", d["output"])
    code = ("import sys, numpy as np; from fxpsim.graph import load_graph; g = load_graph(sys.argv[1]); "
            "assert 'fxpsim.frontends.onnx.importer' not in sys.modules and 'onnx' not in sys.modules; "
            "np.testing.assert_array_equal(g.run(np.load(sys.argv[2])), np.load(sys.argv[3])); print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("name", ["qs_cnn_qdq_s8_pc", "qs_resblock_qop_u8_pt", "qs_mlp_qdq_u8_pc"])
def test_float_reference_tracks_the_integer_graph(name):
    """``run_float`` (float64 on dequantized constants) stays within a few output steps of the codes."""
    g, d = _graph(name), _vectors(name)
    x = d["input"]
    ref = g.run_float(x)
    got = g.run(x).astype(np.float64)
    out_scale = next(g.tensors[n.inputs[0]] for n in g.nodes if n.op == "onnx_dequantize").scale[0]
    assert np.max(np.abs(ref - got)) < 12 * out_scale
    assert np.corrcoef(ref.ravel(), d["float_output"].ravel())[0, 1] > 0.9


def test_large_batches_run_in_chunks():
    g, d = _graph("qs_cnn_qop_s8_pc"), _vectors("qs_cnn_qop_s8_pc")
    x = np.concatenate([d["input"]] * 40)                       # 320 samples: more than one chunk
    np.testing.assert_array_equal(g.run(x), np.concatenate([d["output"]] * 40))


# ------------------------------------------------------------------------------------------ other datapaths
def _mac_products(g, node, x):
    """Per output ``[N, OH, OW, O, K]`` exact integer products of a ``qlinear_conv`` node in the graph's
    reduction order (kernel row, kernel column, input channel of the group), padded taps as zeros."""
    w_spec, x_spec = g.tensors[node.inputs[1]], g.tensors[node.inputs[0]]
    w = w_spec.data.astype(np.int64) - w_spec.zero_point.reshape(-1, 1, 1, 1)
    xo = x.astype(np.int64) - int(x_spec.zero_point[0])
    (pt, pb), (pl, pr) = node.attrs["padding"]
    sh, sw = node.attrs["stride"]
    group = node.attrs["group"]
    n, h, wd, c = xo.shape
    o, kh, kw, cg = w.shape
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, c), np.int64)
    xp[:, pt:pt + h, pl:pl + wd] = xo
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, o, kh * kw * cg), np.int64)
    og = o // group
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * sh:i * sh + kh, j * sw:j * sw + kw]           # [N, KH, KW, C]
            for oc in range(o):
                gi = oc // og
                out[:, i, j, oc] = (patch[..., gi * cg:(gi + 1) * cg] * w[oc]).reshape(n, -1)
    return out


def _python_conv_node(g, node, x, dp):
    """Output codes and overflow count of a ``qlinear_conv`` node from Python integers only: the bias
    preloaded into the accumulator (saturated into it), every product added through the accumulator's
    overflow mode, TFLite single-rounding requantization, zero point, output-type clamp."""
    bits, mode = dp.accumulator_bits, str(getattr(dp.accumulator_overflow, "value", dp.accumulator_overflow))
    assert dp.bias_add == "preload" and dp.accumulator_order == "sequential" and dp.requantization == "tflite-single"
    xs, ws, ys = (g.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    bias = g.tensors[node.inputs[2]].data if len(node.inputs) > 2 else None
    prods = _mac_products(g, node, x)
    lo_acc, hi_acc = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    zy = int(ys.zero_point[0])
    lo, hi = ys.code_range
    mults = [ref_quantize_multiplier(float(np.float32(xs.scale[0])) * float(np.float32(ws.scale[c if ws.per_channel
                                                                                                 else 0]))
                                     / float(np.float32(ys.scale[0])), single=True) for c in range(prods.shape[3])]
    flat = prods.reshape(-1, prods.shape[3], prods.shape[4])
    out = np.zeros(flat.shape[:2], np.int64)
    accs = np.zeros(flat.shape[:2], np.int64)
    overflows = 0
    for r in range(flat.shape[0]):
        for c in range(flat.shape[1]):
            init = 0 if bias is None else min(max(int(bias[c]), lo_acc), hi_acc)
            acc, nov, _ = accumulate(flat[r, c].tolist(), init, bits, True, mode)
            overflows += nov
            accs[r, c] = acc
            m, s = mults[c]
            out[r, c] = min(max(ref_mbqm(acc, m, s, "single") + zy, lo), hi)
    return out.reshape(prods.shape[:4]), accs.reshape(prods.shape[:4]), overflows


@pytest.mark.parametrize("preset_name", ["int8-acc16-sat", "int8-acc16-wrap"])
@pytest.mark.parametrize("name", ["hb_qlinearconv_s8_pc", "hb_qlinearconv_u8_pt"])
def test_conv_model_on_a_16_bit_accumulator_matches_a_python_integer_model(preset_name, name):
    g, d = _graph(name), _vectors(name)
    dp = fxpsim.preset(preset_name)
    x = d["input"][:3]
    y, traces, kept = g.run(x, dp, trace=True, keep=True)
    total = 0
    nodes = [n for n in g.nodes if n.op == "qlinear_conv"]
    assert len(nodes) == 2 and nodes[1].attrs["group"] == 16            # a full and a depthwise conv
    for node in nodes:
        want, want_acc, overflows = _python_conv_node(g, node, kept[node.inputs[0]], dp)
        np.testing.assert_array_equal(traces[node.name]["acc"], want_acc, err_msg=node.name)
        np.testing.assert_array_equal(kept[node.outputs[0]], want, err_msg=node.name)
        assert traces[node.name]["overflows"] == overflows, node.name
        total += overflows
    assert total > 100                                 # the 16-bit accumulator really overflows here
    assert np.count_nonzero(y != g.run(x)) > 0         # and it changes the model's output


def test_datapath_fields_replace_the_native_one():
    import dataclasses
    g, d = _graph("hb_qlinearconv_u8_pc"), _vectors("hb_qlinearconv_u8_pc")
    x = d["input"]
    native = g.default_datapath
    np.testing.assert_array_equal(g.run(x, dataclasses.replace(native)), d["output"])
    # an int32 accumulator that saturates instead of wrapping: nothing overflows on these int8 models
    np.testing.assert_array_equal(g.run(x, dataclasses.replace(native, accumulator_overflow="saturate")),
                                  d["output"])
    narrow = dataclasses.replace(native, accumulator_bits=14, accumulator_overflow="saturate")
    y, tr, _ = g.run(x, narrow, trace=True, keep=True)
    assert sum(t["overflows"] for t in tr.values() if t) > 0 and np.count_nonzero(y != d["output"]) > 0
    acc = tr[g.nodes[1].name]["acc"] if g.nodes[1].op == "qlinear_conv" else tr[g.nodes[0].name]["acc"]
    assert acc.min() >= -(1 << 13) and acc.max() < (1 << 13)
    # the generic requantization path: TFLite arithmetic instead of onnxruntime's float32 multiplier
    tfl = dataclasses.replace(native, requantization="tflite-double")
    diff = np.count_nonzero(g.run(x, tfl).astype(int) - d["output"])
    assert diff < d["output"].size // 4


@pytest.mark.parametrize("preset_name", ["int8-acc16-sat", "tflite-int8"])
def test_unfused_float_nodes_run_as_integer_macs_elsewhere(preset_name):
    """Nodes onnxruntime runs in float32 follow its float kernels only on the native datapath."""
    g, d = _graph("qs_resblock_qdq_s8_pt"), _vectors("qs_resblock_qdq_s8_pt")
    dp = fxpsim.preset(preset_name)
    y, tr, _ = g.run(d["input"], dp, trace=True, keep=True)
    assert tr["conv1"]["adds"] > 0 and tr["conv1"]["acc"] is not None
    assert y.shape == d["output"].shape and np.all(np.isfinite(y))


# ------------------------------------------------------------------------------------------ errors
def _model(nodes, inputs, outputs, inits=(), opset=17, ms=False):
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=ops)
    m.ir_version = 8 if opset < 21 else 10
    return m


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_unsupported_op_names_the_op_the_node_and_the_supported_list(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("Sin", ["d"], ["t"], name="my_sin"),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["q2"], name="q2"),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"], name="dq2")]
    with pytest.raises(ValueError) as err:
        import_onnx(_save(tmp_path, _model(nodes, [x], [y], inits)))
    msg = str(err.value)
    assert "Sin" in msg and "my_sin" in msg and "QLinearConv" in msg and "MatMulInteger" in msg
    for op in ("Conv", "Gemm", "Concat"):
        assert op in SUPPORTED_OPS


def test_unsupported_type_is_refused(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])
    inits = [numpy_helper.from_array(np.array(0.1, F32), "s"), numpy_helper.from_array(np.array(3, np.int16), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q16"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq16")]
    with pytest.raises(ValueError, match=r"int16.*q16|q16.*int16"):
        import_onnx(_save(tmp_path, _model(nodes, [x], [y], inits, opset=21)))


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.02])
def test_truncated_file(tmp_path, cut):
    data = (MODELS_DIR / "qs_cnn_qdq_u8_pc.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(ValueError, match="cut.onnx"):
        import_onnx(path)


def test_garbage_and_empty_files(tmp_path):
    rng = np.random.default_rng(5)
    for i in range(5):
        path = tmp_path / f"garbage{i}.onnx"
        path.write_bytes(rng.integers(0, 256, 2000 + 97 * i).astype(np.uint8).tobytes())
        with pytest.raises(ValueError, match=f"garbage{i}.onnx"):
            import_onnx(path)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        import_onnx(tmp_path / "empty.onnx")
    with pytest.raises(FileNotFoundError):
        import_onnx(tmp_path / "missing.onnx")


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_model_is_refused(name):
    with pytest.raises(ValueError, match="float .*non-quantized.* model"):
        import_onnx(MODELS_DIR / f"{name}.onnx")


def test_import_model_dispatches_onnx_files():
    from fxpsim.frontends import import_model
    g = import_model(MODELS_DIR / "hb_qgemm_u8_pt.onnx")
    np.testing.assert_array_equal(g.run(_vectors("hb_qgemm_u8_pt")["input"]), _vectors("hb_qgemm_u8_pt")["output"])


def test_missing_onnx_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[onnx\]' from the clone"):
        import_onnx(MODELS_DIR / "hb_qgemm_u8_pt.onnx")


# ------------------------------------------------------------------------------------------ live onnxruntime
def _session(path_or_bytes, level="all", optimized=None):
    ort = _ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                   "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[level]
    if optimized:
        so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path_or_bytes), so, providers=["CPUExecutionProvider"])


def _random_feed(spec_type, shape, rng):
    if spec_type == "tensor(float)":
        return (rng.standard_normal(shape) * 1.3).astype(F32)
    dtype = {"tensor(uint8)": np.uint8, "tensor(int8)": np.int8}[spec_type]
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def _live_compare(path, seed, batches=(1, 5)):
    g = import_onnx(path, cpu="host")
    sess = _session(path)
    rng = np.random.default_rng(seed)
    for b in batches:
        feeds = {}
        for i in sess.get_inputs():
            dims = [b if not isinstance(d, int) else d for d in i.shape]
            feeds[i.name] = _random_feed(i.type, dims, rng)
        want = sess.run(None, feeds)
        got, _ = _run(g, [feeds[n] for n in g.inputs])
        for o, gv, wv in zip(g.outputs, got, want):
            _assert_equal_rows(gv, wv, f"{Path(path).name} batch {b} output {o}")
    return g


@pytest.mark.parametrize("name", QUANTIZED)
def test_live_fixture_models_on_fresh_inputs(name):
    _ort()
    _live_compare(MODELS_DIR / f"{name}.onnx", seed=sum(map(ord, name)))


def _float_builders():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "fixtures" / "onnx"))
    import make_models
    return make_models


@pytest.mark.parametrize("base", ["cnn", "mlp", "resblock"])
@pytest.mark.parametrize("variant", ["qdq_u8_pt", "qdq_s8_pc", "qop_u8_pc", "qop_s8_pt", "qdq_s8_pt_keepact"])
def test_live_freshly_quantized_models(tmp_path, base, variant):
    """quantize_static on new seeded weights and calibration data, onnxruntime on new inputs."""
    _ort()
    quant = pytest.importorskip("onnxruntime.quantization")
    mm = _float_builders()
    i = list(mm.FLOAT_MODELS).index(base)
    fmodel, in_shape = mm.FLOAT_MODELS[base](np.random.default_rng([4242, i]))
    fpath = _save(tmp_path, fmodel, "float.onnx")
    _, fmt, act, pc, extra = next(v for v in mm.QS_VARIANTS if v[0] == variant)
    qpath = tmp_path / "q.onnx"
    reader = mm._Reader("input", in_shape, 16, [4242, i, 1], mm._normal)
    quant.quantize_static(str(fpath), str(qpath), reader, quant_format=fmt, activation_type=act,
                          weight_type=quant.QuantType.QInt8, per_channel=pc, extra_options=extra)
    _live_compare(qpath, seed=4242 + i, batches=(1, 6))


class _QDQ:
    """A small QDQ graph builder: float input, Q/DQ pairs with given parameters, quantized constants."""

    def __init__(self, seed, act=np.int8):
        self.rng = np.random.default_rng(seed)
        self.act = np.dtype(act)
        self.nodes, self.inits, self.n = [], [], 0

    def _name(self, base):
        self.n += 1
        return f"{base}{self.n}"

    def const(self, arr, base="c"):
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def qdq(self, x, scale, zp=None, dtype=None, two_dq=False, n_dq=None):
        dtype = np.dtype(dtype or self.act)
        zp = (0 if dtype == np.int8 else 128) if zp is None else zp
        s, z = self.const(np.array(scale, F32), "s"), self.const(np.array(zp, dtype), "z")
        q = self._name("q")
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q], name=q))
        outs = []
        n_dq = n_dq or (2 if two_dq else 1)
        for _ in range(n_dq):
            d = self._name("dq")
            self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [d], name=d))
            outs.append(d)
        return outs if n_dq > 1 else outs[0]

    def weight(self, shape, per_channel=True, axis=0, dtype=np.int8, zp=None):
        dtype = np.dtype(dtype)
        info = np.iinfo(dtype)
        w = self.rng.integers(max(info.min, -127), info.max + 1, size=shape).astype(dtype)
        n = shape[axis] if per_channel else 1
        scale = (self.rng.uniform(0.002, 0.02, n)).astype(F32)
        z = np.zeros(n, dtype) if zp is None else np.full(n, zp, dtype)
        if not per_channel:
            scale, z = scale[0], z[0]
        d = self._name("w")
        self.nodes.append(helper.make_node("DequantizeLinear", [self.const(w, "wq"), self.const(scale, "ws"),
                                                                self.const(z, "wz")], [d], name=d, axis=axis))
        return d, scale

    def bias(self, n, x_scale, w_scale):
        b = self.rng.integers(-3000, 3000, n).astype(np.int32)
        scale = (F32(x_scale) * np.asarray(w_scale, F32)).astype(F32)
        zp = np.zeros(np.shape(scale), np.int32)
        d = self._name("b")
        self.nodes.append(helper.make_node("DequantizeLinear", [self.const(b, "bq"), self.const(scale, "bs"),
                                                                self.const(zp, "bz")], [d], name=d, axis=0))
        return d

    def op(self, op_type, inputs, name=None, **attrs):
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name or out, **attrs))
        return out

    def conv(self, x, cin, cout, x_scale, k=3, group=1, name=None, pads=(1, 1, 1, 1), strides=(1, 1),
             per_channel=True, **attrs):
        w, ws = self.weight((cout, cin // group, k, k), per_channel)
        b = self.bias(cout, x_scale, ws)
        if "auto_pad" not in attrs:
            attrs["pads"] = list(pads)
        return self.op("Conv", [x, w, b], name=name, kernel_shape=[k, k], strides=list(strides), group=group,
                       **attrs)

    def model(self, in_shape, out, opset=17):
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N"] + list(in_shape))
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
        return _model(self.nodes, [x], [y], self.inits, opset=opset)


def _pattern_residual_s8(b):
    """An int8 input used four times (not rewritten to uint8: its Convs, full and depthwise, and the Add
    reading it run in float32); an Add and a Mul whose operands all come from single-consumer Q/DQ pairs
    (fused, on uint8-shifted codes); a Mul by an int8 constant (float32: int8 against uint8)."""
    x = b.qdq("input", 0.03, 4)
    c1 = b.qdq(b.conv(x, 8, 8, 0.03, name="conv_float"), 0.05, -3)
    c2 = b.qdq(b.conv(x, 8, 8, 0.03, group=8, name="dw_float"), 0.04, 2)
    s = b.qdq(b.op("Add", [c1, c2], name="add_fused"), 0.06, 1)
    r = b.qdq(b.op("Add", [s, x], name="add_float"), 0.07, -5)
    c3 = b.qdq(b.conv(x, 8, 8, 0.03, k=1, pads=(0, 0, 0, 0), name="conv1x1_float"), 0.05, 3)
    m = b.qdq(b.op("Mul", [r, c3], name="mul_fused"), 0.2, -9)
    k = b.op("DequantizeLinear", [b.const(np.array(-77, np.int8)), b.const(np.array(0.02, F32)),
                                  b.const(np.array(-1, np.int8))])
    m2 = b.qdq(b.op("Mul", [m, k], name="mul_float"), 0.09, 7)
    return b.model((8, 5, 5), b.op("Identity", [m2])), {"conv_float", "dw_float", "add_float", "conv1x1_float",
                                                         "mul_float"}


def _pattern_broadcast_u8(b):
    """uint8: Add of a per-channel constant (B one value per span), Mul with a scalar constant as A
    (onnxruntime swaps the operands), Add of a constant row, Concat of differently scaled inputs."""
    x = b.qdq("input", 0.03, 120, np.uint8)
    c = b.qdq(b.conv(x, 4, 6, 0.03, name="conv"), 0.05, 131, np.uint8)
    k = b.rng.integers(0, 256, (1, 6, 1, 1)).astype(np.uint8)
    kd = b.op("DequantizeLinear", [b.const(k), b.const(np.array(0.02, F32)), b.const(np.array(101, np.uint8))])
    a = b.qdq(b.op("Add", [c, kd], name="add_channel"), 0.06, 125, np.uint8)
    sd = b.op("DequantizeLinear", [b.const(np.array(201, np.uint8)), b.const(np.array(0.013, F32)),
                                   b.const(np.array(128, np.uint8))])
    m = b.qdq(b.op("Mul", [sd, a], name="mul_scalar_a"), 0.021, 77, np.uint8)
    row = b.rng.integers(0, 256, (5,)).astype(np.uint8)
    rd = b.op("DequantizeLinear", [b.const(row), b.const(np.array(0.011, F32)), b.const(np.array(3, np.uint8))])
    a2 = b.qdq(b.op("Add", [m, rd], name="add_row"), 0.05, 128, np.uint8)
    cat = b.qdq(b.op("Concat", [a2, c], name="concat", axis=1), 0.055, 129, np.uint8)
    return b.model((4, 5, 5), b.op("Identity", [cat])), set()


def _pattern_movement_u8(b):
    """MaxPool between different Q/DQ parameters (float32 op, then QuantizeLinear), a Relu whose Q has a
    non-minimum zero point (kept, float32), a Clip wider than its Q's range (kept) and one narrower
    (removed), a Flatten of an image, a Gemm (transB) with bias, and back-to-back Q/DQ pairs."""
    x = b.qdq("input", 0.03, 128, np.uint8)
    c = b.qdq(b.conv(x, 3, 8, 0.03, name="conv", strides=(2, 1)), 0.05, 100, np.uint8)
    p = b.qdq(b.op("MaxPool", [c], name="maxpool", kernel_shape=[2, 2], strides=[1, 1], pads=[0, 1, 1, 0]),
              0.045, 90, np.uint8)
    r = b.qdq(b.op("Relu", [p], name="relu_kept"), 0.04, 12, np.uint8)
    cl = b.qdq(b.op("Clip", [r, b.const(np.array(-1.0, F32)), b.const(np.array(2.5, F32))], name="clip_kept"),
               0.03, 40, np.uint8)
    cl2 = b.qdq(b.op("Clip", [cl, b.const(np.array(-50.0, F32)), b.const(np.array(50.0, F32))], name="clip_gone"),
                0.031, 41, np.uint8)
    dbl = b.qdq(b.qdq(cl2, 0.031, 41, np.uint8), 0.02, 60, np.uint8)       # Q->DQ->Q->DQ, other params
    fl = b.qdq(b.op("Flatten", [dbl], name="flatten", axis=1), 0.02, 60, np.uint8)
    w, ws = b.weight((5, 8 * 3 * 5), per_channel=True, axis=0)
    g = b.op("Gemm", [fl, w, b.bias(5, 0.02, ws)], name="gemm", transB=1)
    return b.model((3, 5, 5), b.op("Identity", [b.qdq(g, 0.1, 128, np.uint8)])), set()


def _pattern_matmul_s8(b):
    """int8 MLP: a MatMul whose input has two consumers (float32); a Gemm on that int8 input whose Q also
    has two consumers (fused: QGemm runs int8); an Add of its two int8 copies (QLinearAdd on int8, no
    uint8 shift); an Add of int8 and uint8-rewritten operands (float32); per-tensor weights; a Reshape to an
    image and an AveragePool on uint8-shifted codes."""
    x = b.qdq("input", 0.05, 0)
    h, hs, hg = b.qdq(x, 0.05, 0, n_dq=3)
    w3, w3s = b.weight((20, 12), per_channel=True, axis=0)
    g3 = b.qdq(b.op("Gemm", [hg, w3, b.bias(20, 0.05, w3s)], name="gemm_float", transB=1), 0.2, 6)
    w1, _ = b.weight((12, 20), per_channel=False, axis=1)
    m1 = b.qdq(b.op("MatMul", [h, w1], name="matmul_float"), 0.2, -4)
    w2, w2s = b.weight((20, 12), per_channel=True, axis=0)
    m2a, m2b = b.qdq(b.op("Gemm", [hs, w2, b.bias(20, 0.05, w2s)], name="gemm_int8", transB=1), 0.2, 6, two_dq=True)
    p1, p2 = b.qdq(b.op("Add", [m2a, m2b], name="add_int8"), 0.3, -2, two_dq=True)
    a = b.qdq(b.op("Add", [m1, p1], name="add_float"), 0.3, -2)
    row = b.op("DequantizeLinear", [b.const(b.rng.integers(-128, 128, 20).astype(np.int8)),
                                    b.const(np.array(0.02, F32)), b.const(np.array(-7, np.int8))])
    p3 = b.qdq(b.op("Mul", [p2, row], name="mul_float"), 0.1, 1)
    cat = b.qdq(b.op("Concat", [a, p3, g3], name="concat", axis=1), 0.3, -2)
    rs = b.qdq(b.op("Reshape", [cat, b.const(np.array([-1, 15, 2, 2], np.int64))], name="reshape"), 0.3, -2)
    gp = b.qdq(b.op("AveragePool", [rs], name="avgpool", kernel_shape=[2, 2], pads=[1, 1, 0, 0],
                    count_include_pad=1), 0.11, 3)
    fl = b.op("Flatten", [gp], name="flatten_float")                   # DQ -> Flatten -> MatMul: no Q between
    w4, _ = b.weight((60, 6), per_channel=True, axis=1)
    out = b.qdq(b.op("MatMul", [fl, w4], name="matmul_after_flatten"), 0.15, 0)
    return b.model((12,), b.op("Identity", [out])), {"matmul_float", "add_float", "mul_float", "gemm_float",
                                                      "matmul_after_flatten"}


def _pattern_opset21_u8(b):
    """opset 21: Conv -> Clip -> Q where the Q makes the Clip redundant (selector removes it), a
    GlobalAveragePool, per-tensor uint8 weights with a zero point."""
    x = b.qdq("input", 0.03, 128, np.uint8)
    w, ws = b.weight((8, 4, 3, 3), per_channel=False, dtype=np.uint8, zp=131)
    c = b.op("Conv", [x, w, b.bias(8, 0.03, ws)], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    cl = b.qdq(b.op("Clip", [c, b.const(np.array(0.0, F32)), b.const(np.array(6.0, F32))], name="clip"),
               6.0 / 255, 0, np.uint8)
    gap = b.qdq(b.op("GlobalAveragePool", [cl], name="gap"), 0.01, 5, np.uint8)
    return b.model((4, 6, 6), b.op("Identity", [gap]), opset=21), set()


def _pattern_conv_variants_s8(b):
    """Convolution geometry on both paths: dilation, groups, SAME_UPPER / SAME_LOWER padding, strides, an
    output as large as the filter count; each first in float32 (int8 input read four times), then fused
    (uint8-rewritten inputs)."""
    x = b.qdq("input", 0.04, -2)
    a = b.qdq(b.conv(x, 6, 8, 0.04, name="dilated_float", dilations=[2, 2], pads=(2, 1, 2, 1)), 0.05, 1)
    g = b.qdq(b.conv(x, 6, 6, 0.04, group=2, name="grouped_float", strides=(2, 2)), 0.05, -1)
    c = b.qdq(b.conv(x, 6, 8, 0.04, name="same_float", strides=(2, 1), auto_pad="SAME_UPPER"), 0.05, 0)
    d = b.qdq(b.conv(x, 6, 40, 0.04, k=5, name="wide_float", pads=(0, 0, 0, 0)), 0.05, 0)
    a2 = b.qdq(b.conv(a, 8, 8, 0.05, name="dilated_fused", dilations=[1, 2], pads=(1, 2, 1, 2)), 0.06, 2)
    g2 = b.qdq(b.conv(g, 6, 6, 0.05, group=3, name="grouped_fused", auto_pad="SAME_LOWER", strides=(2, 2)), 0.06, 2)
    c2 = b.qdq(b.conv(c, 8, 4, 0.05, k=1, pads=(0, 0, 0, 0), name="pointwise_fused"), 0.06, 2)
    d2 = b.qdq(b.conv(d, 40, 4, 0.05, k=1, pads=(0, 0, 0, 0), name="pointwise_fused2"), 0.06, 2)
    fl = [b.qdq(b.op("Flatten", [t], name=f"flatten{i}"), s, z)
          for i, (t, s, z) in enumerate(((a2, 0.06, 2), (g2, 0.06, 2), (c2, 0.06, 2), (d2, 0.06, 2)))]
    cat = b.qdq(b.op("Concat", fl, name="concat", axis=1), 0.07, 0)
    return b.model((6, 9, 9), b.op("Identity", [cat])), {"dilated_float", "grouped_float", "same_float",
                                                          "wide_float"}


PATTERNS = {"conv_variants_s8": _pattern_conv_variants_s8, "residual_s8": _pattern_residual_s8, "broadcast_u8": _pattern_broadcast_u8,
            "movement_u8": _pattern_movement_u8, "matmul_s8": _pattern_matmul_s8,
            "opset21_u8": _pattern_opset21_u8}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_live_qdq_fusion_rules(tmp_path, pattern):
    """Hand-built QDQ graphs: fxpsim fuses exactly the groups onnxruntime fuses (checked in the graph
    onnxruntime optimizes to) and matches its outputs."""
    _ort()
    for seed in range(3):
        model, float_ops = PATTERNS[pattern](_QDQ(seed * 31 + len(pattern)))
        path = _save(tmp_path, model, f"{pattern}_{seed}.onnx")
        g = _live_compare(path, seed=seed, batches=(1, 4, 9))
        mine = {f["node"] for f in g.meta["onnxruntime"]["float_nodes"]
                if f["onnx_op"] in ("Conv", "MatMul", "Gemm", "Add", "Mul")}
        assert mine == float_ops
        opt = tmp_path / f"{pattern}_{seed}.opt.onnx"
        _session(path, "extended", optimized=opt)
        theirs = {n.name for n in onnx.load(str(opt)).graph.node
                  if n.op_type in ("Conv", "FusedConv", "MatMul", "Gemm", "FusedGemm", "Add", "Mul")}
        assert theirs == float_ops
        if pattern == "movement_u8":      # the Flatten of a 8x3x5 image reads it in NCHW order
            assert any(n.op == "transpose" and n.attrs["perm"] == [2, 0, 1] for n in g.nodes)


def test_import_fxpsim_stays_light():
    code = ("import sys, fxpsim; f = fxpsim.import_onnx; from fxpsim.graph import onnx_ops; "
            "assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_knobs_the_onnx_mac_ops_do_not_model_are_refused_not_ignored():
    g = import_onnx(str(MODELS_DIR / "qs_cnn_qop_s8_pc.onnx"))
    x = np.load(MODELS_DIR / "qs_cnn_qop_s8_pc.npz")["input"]
    base = fxpsim.preset("int8-acc16-sat")
    for change in ({"bias_shift": 2}, {"accumulator_frac_bits": 3}):
        with pytest.raises(ValueError, match="does not model"):
            g.run(x, base.replace(**change))
    # zero-point folding and K tiles are modelled (tests/hardware/test_simulate_imported.py checks them)
    for change in ({"zero_point": "fold"}, {"tile_k": 8, "tile_accumulator_bits": 12}):
        g.run(x, base.replace(**change))
