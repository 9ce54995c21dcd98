"""fxpsim.import_tflite against LiteRT.

* Every fixture model of ``tests/vectors/tflite_models`` (made by the real TF converter, run by the real
  LiteRT interpreter; see ``tools/fixtures/tflite/README.md``): the imported graph's output equals
  LiteRT's ``output_reference`` / ``output_builtin`` / ``output_xnnpack`` bit for bit, and every tensor of
  the reference run (``t<index>``) equals the graph tensor of that TFLite index.
* With ``ai-edge-litert`` installed, the same live on fresh random inputs for every kernel set.
* On other datapaths (16-bit saturating and wrapping accumulators) every MAC node of the imported
  MobileNetV2-style block equals an independent pure-Python-integer model (per-add saturation/wrap,
  gemmlowp arithmetic from ``tests/reference.py``).
* Errors: unknown ops, damaged files, float and int16 models.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.graph import load_graph
from reference import accumulate, ref_mbqm, ref_quantize_multiplier, round_fraction

tflite = pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "tests" / "vectors" / "tflite_models"
BENCH_MODEL = REPO / "benchmarks" / "models" / "mobilenet_v2_035_48.tflite"
MODEL_NAMES = sorted(p.stem for p in MODELS_DIR.glob("*.tflite"))
KERNELS = ("reference", "builtin", "xnnpack")


def test_fixtures_present():
    assert {"conv_block", "elementwise", "float_io", "mobilenet_v2_block", "mobilenet_v3_block",
            "per_tensor"} <= set(MODEL_NAMES)


_GRAPHS: dict = {}


def _graph(name: str, kernels: str = "reference"):
    key = (name, kernels)
    if key not in _GRAPHS:
        _GRAPHS[key] = fxpsim.import_tflite(MODELS_DIR / f"{name}.tflite", kernels=kernels)
    return _GRAPHS[key]


def _vectors(name: str):
    return np.load(MODELS_DIR / f"{name}.npz")


def _drop_batch(a: np.ndarray) -> np.ndarray:
    """Stacked vectors are (samples, 1, ...): the graph's batch is the sample axis."""
    return a.reshape((a.shape[0],) + a.shape[2:])


# ------------------------------------------------------------------------------------------ stored vectors
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_reference_outputs_and_every_intermediate(name):
    g, d = _graph(name), _vectors(name)
    assert g.meta["format"] == "tflite" and g.meta["kernels"] == "reference"
    assert g.meta["datapath"]["name"] == "litert-reference"
    x = _drop_batch(d["input"])
    y, _, kept = g.run(x, keep=True)
    ref = _drop_batch(d["output_reference"])
    assert y.dtype == ref.dtype and y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)
    # every tensor of the reference run is a graph tensor (compared bit for bit) or folded shape arithmetic
    by_index = {int(i): t for t, i in g.meta["tflite_tensors"].items()}
    folded = {int(i) for i in g.meta["tflite_folded"]}
    sidecar = json.loads((MODELS_DIR / f"{name}.json").read_text())
    compared = 0
    for key in d.files:
        if not (key.startswith("t") and key[1:].isdigit()):
            continue
        index = int(key[1:])
        if index in folded:
            continue
        assert index in by_index, f"TFLite tensor {index} of {name} has no graph tensor"
        tname = by_index[index]
        want = _drop_batch(d[key])
        np.testing.assert_array_equal(kept[tname], want, err_msg=f"{name}: tensor {index} ({tname})")
        assert kept[tname].dtype == want.dtype
        compared += 1
    produced = {t["index"] for t in sidecar["tensors"] if "produced_by_op" in t}
    assert compared == len(produced - folded) + len(sidecar["inputs"])
    # graph tensors carry the TFLite names
    for t in sidecar["tensors"]:
        if t["index"] in by_index:
            assert by_index[t["index"]].split("#")[0] == t["name"]


@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_optimized_kernel_outputs(name, kernels):
    g, d = _graph(name, kernels), _vectors(name)
    assert g.meta["datapath"]["requantization"] == "native"
    y = g.run(_drop_batch(d["input"]))
    np.testing.assert_array_equal(y, _drop_batch(d[f"output_{kernels}"]))


def test_reference_kernels_differ_from_optimized_ones_on_the_fixtures():
    """The kernel sets are really different arithmetic (so the tests above do tell them apart)."""
    differ = {k: 0 for k in ("builtin", "xnnpack")}
    for name in MODEL_NAMES:
        d = _vectors(name)
        x = _drop_batch(d["input"])
        for k in differ:
            differ[k] += int(np.count_nonzero(_graph(name, "reference").run(x) != _graph(name, k).run(x)))
    assert differ["builtin"] > 0 and differ["xnnpack"] > 0


def test_graph_structure_and_metadata():
    g = _graph("mobilenet_v2_block")
    ops = [n.op for n in g.nodes]
    assert ops.count("conv2d") == 5 and ops.count("depthwise_conv2d") == 2 and ops.count("add") == 2
    assert "fully_connected" in ops and "tflite_mean" in ops
    assert g.tensors[g.inputs[0]].shape == (16, 16, 3) and g.tensors[g.outputs[0]].shape == (10,)
    dp = g.default_datapath
    assert (dp.accumulator_bits, dp.accumulator_overflow, dp.bias_add, dp.requantization,
            dp.dense_requantization) == (32, "wrap", "after", "tflite-double", "float")
    assert g.meta["source"].endswith("mobilenet_v2_block.tflite")
    assert "MACs per sample" in g.summary()
    # per-channel weights on the output-channel axis
    conv = g.nodes[0]
    w = g.tensors[conv.inputs[1]]
    assert w.per_channel and w.axis == 0 and w.scale.size == w.shape[0]
    dw = next(n for n in g.nodes if n.op == "depthwise_conv2d")
    assert g.tensors[dw.inputs[1]].axis == 3
    # the folded Keras shape arithmetic of the elementwise model leaves no SHAPE/PACK/STRIDED_SLICE node
    e = _graph("elementwise")
    assert {n.attrs["tflite_op"] for n in e.nodes}.isdisjoint({"SHAPE", "PACK", "STRIDED_SLICE"})
    assert len(e.meta["tflite_folded"]) >= 15


def test_float_io_model():
    g, d = _graph("float_io"), _vectors("float_io")
    assert g.tensors[g.inputs[0]].is_float and g.tensors[g.outputs[0]].is_float
    assert [n.op for n in g.nodes][0] == "tflite_quantize" and g.nodes[-1].op == "tflite_dequantize"
    y = g.run(_drop_batch(d["input"]))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, _drop_batch(d["output_reference"]))
    # float64 inputs are rounded to float32 first, as the TFLite tensor is float32
    np.testing.assert_array_equal(g.run(_drop_batch(d["input"]).astype(np.float64)), y)


def test_per_tensor_weights():
    g = _graph("per_tensor")
    macs = [n for n in g.nodes if n.op in ("conv2d", "depthwise_conv2d", "fully_connected")]
    assert macs and all(not g.tensors[n.inputs[1]].per_channel for n in macs)


def test_large_batches_run_in_chunks():
    g, d = _graph("conv_block"), _vectors("conv_block")
    x = np.concatenate([_drop_batch(d["input"])] * 40)          # 320 > the default batch_size of 256
    y = g.run(x)
    np.testing.assert_array_equal(y, np.concatenate([_drop_batch(d["output_reference"])] * 40))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_float_reference_tracks_the_integer_graph(name):
    """``run_float`` (the float64 reference of every op) stays within a few output steps of the codes."""
    g, d = _graph(name), _vectors(name)
    x = _drop_batch(d["input"])[:6]                  # calibration-like samples
    y = g.run(x)
    out = g.tensors[g.outputs[0]]
    yf = g.run_float(x)
    real = y.astype(np.float64) if out.is_float else out.dequantize(y)
    step = float(np.abs(real).max()) / 64 if out.is_float else float(out.scale[0])
    assert np.median(np.abs(real - yf)) <= 2 * step
    assert np.corrcoef(real.ravel(), yf.ravel())[0, 1] > 0.97


# ------------------------------------------------------------------------------------------ save / load
@pytest.mark.parametrize("kernels", KERNELS)
def test_saved_graph_reads_back(tmp_path, kernels):
    for name in ("elementwise", "mobilenet_v3_block", "float_io"):
        g, d = _graph(name, kernels), _vectors(name)
        path = g.save(tmp_path / f"{name}_{kernels}")
        back = load_graph(path)
        assert back.meta == g.meta
        assert [n.op for n in back.nodes] == [n.op for n in g.nodes]
        x = _drop_batch(d["input"])
        np.testing.assert_array_equal(back.run(x), g.run(x))
        np.testing.assert_array_equal(back.run(x), _drop_batch(d[f"output_{kernels}"]))


def test_saved_graph_reads_back_in_a_fresh_process(tmp_path):
    """``load_graph`` finds the TFLite ops without fxpsim.frontends.tflite.importer having been imported."""
    import subprocess
    path = _graph("elementwise", "xnnpack").save(tmp_path / "g")
    d = _vectors("elementwise")
    np.save(tmp_path / "x.npy", _drop_batch(d["input"]))
    np.save(tmp_path / "y.npy", _drop_batch(d["output_xnnpack"]))
    code = ("import sys, numpy as np; from fxpsim.graph import load_graph; g = load_graph(sys.argv[1]); "
            "assert 'fxpsim.frontends.tflite.importer' not in sys.modules and 'tflite' not in sys.modules; "
            "np.testing.assert_array_equal(g.run(np.load(sys.argv[2])), np.load(sys.argv[3])); print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ------------------------------------------------------------------------------------------ live LiteRT
def _litert():
    return pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")


def _random_inputs(detail, n, seed):
    rng = np.random.default_rng(seed)
    shape = (n,) + tuple(int(s) for s in detail["shape"][1:])
    if detail["dtype"] == np.float32:
        scale = float(detail["quantization"][0]) or 0.02
        x = rng.normal(0.0, 1.0, shape) * (60 * scale if scale else 1.0)
        x[-2:] = rng.uniform(-4.0, 4.0, (2,) + shape[1:])
        return x.astype(np.float32)
    x = np.clip(rng.normal(0.0, 40.0, shape), -128, 127)
    x[n // 2:] = rng.integers(-128, 128, (n - n // 2,) + shape[1:])       # every code, saturating inputs
    return x.astype(np.int8)


def _run_litert(path, kernels, x, preserve=False):
    _litert()
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"reference": OpResolverType.BUILTIN_REF,
                "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "xnnpack": OpResolverType.BUILTIN}[kernels]
    it = Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=resolver,
                     experimental_preserve_all_tensors=preserve)
    it.allocate_tensors()
    din, dout = it.get_input_details()[0], it.get_output_details()[0]
    return it, din, dout


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_live_litert_on_random_inputs(name, kernels):
    path = MODELS_DIR / f"{name}.tflite"
    it, din, dout = _run_litert(path, kernels, None, preserve=kernels != "xnnpack")
    g = _graph(name, kernels)
    x = _random_inputs(din, 48, seed=len(name) * 7 + KERNELS.index(kernels))
    y, _, kept = g.run(x, keep=True)
    by_index = {int(i): t for t, i in g.meta["tflite_tensors"].items()}
    for s in range(len(x)):
        it.set_tensor(din["index"], x[s:s + 1])
        it.invoke()
        np.testing.assert_array_equal(y[s], it.get_tensor(dout["index"])[0], err_msg=f"{name} sample {s}")
        if kernels != "xnnpack" and s < 8:          # intermediates (XNNPACK fuses them into its partitions)
            for index, tname in by_index.items():
                if tname in kept:
                    np.testing.assert_array_equal(kept[tname][s], it.get_tensor(index)[0],
                                                  err_msg=f"{name} tensor {index} ({tname}) sample {s}")


@pytest.mark.parametrize("kernels", KERNELS)
def test_live_litert_benchmark_model(kernels):
    it, din, dout = _run_litert(BENCH_MODEL, kernels, None)
    g = fxpsim.import_tflite(BENCH_MODEL, kernels=kernels)
    x = _random_inputs(din, 12, seed=3)
    y = g.run(x)
    for s in range(len(x)):
        it.set_tensor(din["index"], x[s:s + 1])
        it.invoke()
        np.testing.assert_array_equal(y[s], it.get_tensor(dout["index"])[0])


@pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors.:UserWarning")
def test_live_xnnpack_intermediates_with_unfused_partitions():
    """With delegate node fusion off, every delegated op is its own partition and its output readable."""
    _litert()
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    for name in ("elementwise", "mobilenet_v3_block", "conv_block"):
        path = MODELS_DIR / f"{name}.tflite"
        it = Interpreter(model_path=str(path), num_threads=1, experimental_op_resolver_type=OpResolverType.BUILTIN,
                         experimental_preserve_all_tensors=True, experimental_disable_delegate_node_fusion=True)
        it.allocate_tensors()
        din = it.get_input_details()[0]
        g = _graph(name, "xnnpack")
        x = _random_inputs(din, 16, seed=11)
        _, _, kept = g.run(x, keep=True)
        for s in range(len(x)):
            it.set_tensor(din["index"], x[s:s + 1])
            it.invoke()
            for tname, index in g.meta["tflite_tensors"].items():
                if tname in kept:
                    np.testing.assert_array_equal(kept[tname][s], it.get_tensor(int(index))[0],
                                                  err_msg=f"{name} tensor {index} ({tname})")


# ------------------------------------------------------------------------------------------ other datapaths
def _act_range(activation, scale, zp):
    """TFLite's fused-activation clamp, independently: zp + round_half_away(fl32(f) / fl32(scale))."""
    def q(f):
        return zp + round_fraction(Fraction(float(np.float32(f) / np.float32(scale))), "half_away")
    lo, hi = -128, 127
    if activation in ("relu", "relu6"):
        lo = max(lo, q(0.0))
    if activation == "relu6":
        hi = min(hi, q(6.0))
    return lo, hi


def _products(g, node, x):
    """Per output element the list of integer products (x - z_x)(w - z_w) in the datapath's order:
    (kh, kw, c) row-major for convolutions, padded taps as zero products; k for fully connected.
    Returns an array [N, ..., O, K]."""
    xs, ws = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
    xo = x.astype(np.int64) - int(xs.zero_point[0])
    w = ws.data.astype(np.int64) - ws.zero_point.reshape(ws.channel_shape(ws.data.ndim))
    if node.op == "fully_connected":
        return xo[..., None, :] * w[None, :, :]                     # [N, O, K]
    kh, kw = w.shape[1:3]
    sh, sw = node.attrs["stride"]
    n, h, wd, c = xo.shape
    oh, ow = g.tensors[node.outputs[0]].shape[:2]
    if node.attrs["padding"] == "SAME":
        pt = max((oh - 1) * sh + kh - h, 0) // 2
        pl = max((ow - 1) * sw + kw - wd, 0) // 2
    else:
        pt = pl = 0
    xp = np.zeros((n, h + 2 * kh + (oh * sh), wd + 2 * kw + (ow * sw), c), np.int64)
    xp[:, pt:pt + h, pl:pl + wd] = xo
    patches = np.stack([np.stack([xp[:, i * sh:i * sh + kh, j * sw:j * sw + kw] for j in range(ow)], 1)
                        for i in range(oh)], 1)                    # [N, OH, OW, KH, KW, C]
    if node.op == "conv2d":
        p = patches[:, :, :, None] * w[None, None, None]          # [N, OH, OW, O, KH, KW, C]
        return p.reshape(p.shape[:4] + (-1,))
    mult = w.shape[3] // c
    rep = np.repeat(patches, mult, axis=-1)                         # channel c*mult+m sees input c
    p = rep * w[0][None, None, None]                                # [N, OH, OW, KH, KW, O]
    return np.moveaxis(p, -1, 3).reshape(p.shape[:3] + (w.shape[3], kh * kw))


def _python_mac_node(g, node, x, dp):
    """The MAC node's output codes and overflow count from Python integers only: the bias preloaded into
    the accumulator (saturated into it when wider), each product added with the accumulator's overflow mode,
    TFLite single-rounding requantization, zero point, activation clamp."""
    bits, mode = dp.accumulator_bits, str(getattr(dp.accumulator_overflow, "value", dp.accumulator_overflow))
    assert dp.bias_add == "preload" and dp.accumulator_order == "sequential" and dp.requantization == "tflite-single"
    xs, ws, ys = (g.tensors[t] for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    bias = g.tensors[node.inputs[2]].data if len(node.inputs) > 2 else None
    prods = _products(g, node, x)
    lo_acc, hi_acc = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    zy = int(ys.zero_point[0])
    lo, hi = _act_range(node.attrs.get("activation", "none"), ys.scale[0], zy)
    mults = []
    for c in range(prods.shape[-2]):
        real = float(np.float32(xs.scale[0])) * float(np.float32(ws.scale[c if ws.per_channel else 0])) / \
            float(np.float32(ys.scale[0]))
        mults.append(ref_quantize_multiplier(real, single=True))
    out = np.zeros(prods.shape[:-1], np.int64)
    overflows = 0
    flat, oflat = prods.reshape(-1, prods.shape[-2], prods.shape[-1]), out.reshape(-1, prods.shape[-2])
    for r in range(flat.shape[0]):
        for c in range(flat.shape[1]):
            init = 0 if bias is None else min(max(int(bias[c]), lo_acc), hi_acc)
            acc, nov, _ = accumulate(flat[r, c].tolist(), init, bits, True, mode)
            overflows += nov
            m, s = mults[c]
            oflat[r, c] = min(max(ref_mbqm(acc, m, s, "single") + zy, lo), hi)
    return out, overflows


@pytest.mark.parametrize("preset_name", ["int8-acc16-sat", "int8-acc16-wrap"])
def test_block_on_a_16_bit_accumulator_matches_a_python_integer_model(preset_name):
    g, d = _graph("mobilenet_v2_block"), _vectors("mobilenet_v2_block")
    dp = fxpsim.preset(preset_name)
    x = _drop_batch(d["input"])[[0, 7]]           # a calibration-like sample and one of every int8 code
    y, traces, kept = g.run(x, dp, trace=True, keep=True)
    total_overflows = 0
    for node in g.nodes:
        if node.op not in ("conv2d", "depthwise_conv2d", "fully_connected"):
            continue
        want, overflows = _python_mac_node(g, node, kept[node.inputs[0]], dp)
        np.testing.assert_array_equal(kept[node.outputs[0]], want, err_msg=node.name)
        assert traces[node.name]["overflows"] == overflows, node.name
        total_overflows += overflows
    assert total_overflows > 1000                  # the narrow accumulator really overflows here
    exact = g.run(x)
    assert np.count_nonzero(y != exact) > 0         # and it changes the network's output


def test_default_datapath_replaced_field_by_field():
    """``dataclasses.replace`` of the graph's own datapath: a 16-bit saturating accumulator, bias after."""
    g, d = _graph("mobilenet_v2_block"), _vectors("mobilenet_v2_block")
    x = _drop_batch(d["input"])[:3]
    narrow = dataclasses.replace(g.default_datapath, accumulator_bits=16, accumulator_overflow="saturate")
    y16, tr, kept = g.run(x, narrow, trace=True, keep=True)
    assert sum(t["overflows"] for t in tr.values() if t) > 0
    same = dataclasses.replace(g.default_datapath)
    np.testing.assert_array_equal(g.run(x, same), _drop_batch(d["output_reference"])[:3])
    # an int32 accumulator that saturates instead of wrapping changes nothing on an int8 network
    sat32 = dataclasses.replace(g.default_datapath, accumulator_overflow="saturate")
    np.testing.assert_array_equal(g.run(x, sat32), _drop_batch(d["output_reference"])[:3])
    # the first conv's accumulator on 16 bits: saturated partial sums, checked against the exact sums
    node = g.nodes[0]
    acc = tr[node.name]["acc"]
    assert acc.min() >= -(1 << 15) and acc.max() < (1 << 15)


@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_optimized_kernel_graphs_run_on_other_datapaths(kernels):
    """A builtin/XNNPACK graph on a preset: the MAC nodes are then the core ops' arithmetic."""
    ref, opt = _graph("mobilenet_v2_block"), _graph("mobilenet_v2_block", kernels)
    x = _drop_batch(_vectors("mobilenet_v2_block")["input"])[:3]
    dp = fxpsim.preset("int8-acc16-sat")
    _, tr_ref, k_ref = ref.run(x, dp, trace=True, keep=True)
    _, tr_opt, k_opt = opt.run(x, dp, trace=True, keep=True)
    for a, b in zip(ref.nodes, opt.nodes):
        if a.op in ("conv2d", "depthwise_conv2d", "fully_connected"):
            assert b.op == f"tflite_{a.op}"
            assert tr_ref[a.name]["overflows"] == tr_opt[b.name]["overflows"]
            np.testing.assert_array_equal(k_ref[a.outputs[0]], k_opt[b.outputs[0]])


# ------------------------------------------------------------------------------------------ errors
def _patched_opcode(buf: bytes, old: str, new: int) -> bytes:
    """The model with operator code ``old`` turned into builtin code ``new`` (both code fields)."""
    data = bytearray(buf)
    model = tflite.Model.GetRootAsModel(data, 0)
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        if tflite.utils.BUILTIN_OPCODE2NAME[max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())] == old:
            tab = oc._tab
            o_dep, o_new = tab.Offset(4), tab.Offset(10)
            assert o_dep and o_new
            data[tab.Pos + o_dep] = new
            data[tab.Pos + o_new:tab.Pos + o_new + 4] = int(new).to_bytes(4, "little")
            return bytes(data)
    raise AssertionError(f"no {old} in the model")


def test_unknown_op_names_the_op_the_node_and_the_supported_list(tmp_path):
    buf = (MODELS_DIR / "mobilenet_v2_block.tflite").read_bytes()
    path = tmp_path / "div.tflite"
    path.write_bytes(_patched_opcode(buf, "MEAN", 42))          # 42 = DIV
    with pytest.raises(ValueError) as info:
        fxpsim.import_tflite(path)
    msg = str(info.value)
    sidecar = json.loads((MODELS_DIR / "mobilenet_v2_block.json").read_text())
    mean = next(o for o in sidecar["ops"] if o["op_name"] == "MEAN")
    out_name = sidecar["tensors"][mean["outputs"][0]]["name"]
    assert "DIV" in msg and f"operator {mean['index']}" in msg and out_name in msg
    assert "supported:" in msg and "CONV_2D" in msg and "HARD_SWISH" in msg


def test_custom_op_is_refused(tmp_path):
    buf = (MODELS_DIR / "per_tensor.tflite").read_bytes()
    path = tmp_path / "custom.tflite"
    path.write_bytes(_patched_opcode(buf, "MAX_POOL_2D", 32))   # 32 = CUSTOM
    with pytest.raises(ValueError, match=r"CUSTOM.*not supported"):
        fxpsim.import_tflite(path)


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.98])
def test_truncated_file(tmp_path, cut):
    buf = (MODELS_DIR / "conv_block.tflite").read_bytes()
    path = tmp_path / "cut.tflite"
    path.write_bytes(buf[:int(len(buf) * cut)])
    with pytest.raises(ValueError, match=r"cut\.tflite: not a valid \.tflite model|damaged"):
        fxpsim.import_tflite(path)


def test_random_bytes_and_other_files(tmp_path):
    rng = np.random.default_rng(0)
    for i, payload in enumerate([rng.integers(0, 256, 4000, dtype=np.uint8).tobytes(), b"", b"TFL3",
                                 b"\x10\x00\x00\x00TFL3" + rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(),
                                 (REPO / "pyproject.toml").read_bytes()]):
        path = tmp_path / f"junk{i}.tflite"
        path.write_bytes(payload)
        with pytest.raises(ValueError, match="not a valid .tflite model"):
            fxpsim.import_tflite(path)
    with pytest.raises(FileNotFoundError):
        fxpsim.import_tflite(tmp_path / "missing.tflite")
    with pytest.raises(ValueError, match="kernels must be one of"):
        fxpsim.import_tflite(MODELS_DIR / "conv_block.tflite", kernels="nnapi")


OPCODES = {v: k for k, v in tflite.utils.BUILTIN_OPCODE2NAME.items()}
INT8, INT32, FLOAT32, INT16 = 9, 2, 0, 7


def build_tflite(tensors: list, operators: list, inputs: list, outputs: list) -> bytes:
    """A one-subgraph .tflite flatbuffer written with the schema's generated builders.

    ``tensors``: dicts ``name, type, shape`` and optionally ``scale``/``zero_point`` (lists),
    ``qdim``, ``data`` (ndarray, stored in its own buffer). ``operators``: dicts ``op`` (builtin name),
    ``inputs``, ``outputs`` and optionally ``options = (BuiltinOptions enum, fn(builder) -> offset)``.
    """
    import flatbuffers
    b = flatbuffers.Builder(4096)

    def ivec(start, values, prepend="PrependInt32"):
        start(b, len(values))
        for v in reversed(list(values)):
            getattr(b, prepend)(v)
        return b.EndVector()

    def tables(start, offsets):
        start(b, len(offsets))
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    buffers, tensor_offsets = [], []
    tflite.BufferStart(b)
    buffers.append(tflite.BufferEnd(b))
    for t in tensors:
        buffer = 0
        if t.get("data") is not None:
            raw = np.ascontiguousarray(t["data"]).tobytes()
            data = b.CreateByteVector(raw)
            tflite.BufferStart(b)
            tflite.BufferAddData(b, data)
            buffers.append(tflite.BufferEnd(b))
            buffer = len(buffers) - 1
        q = None
        if t.get("scale") is not None:
            sc = ivec(tflite.QuantizationParametersStartScaleVector, [float(v) for v in t["scale"]], "PrependFloat32")
            zp = ivec(tflite.QuantizationParametersStartZeroPointVector,
                      [int(v) for v in (t.get("zero_point") or [0] * len(t["scale"]))], "PrependInt64")
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, sc)
            tflite.QuantizationParametersAddZeroPoint(b, zp)
            tflite.QuantizationParametersAddQuantizedDimension(b, int(t.get("qdim", 0)))
            q = tflite.QuantizationParametersEnd(b)
        name = b.CreateString(t["name"])
        shape = ivec(tflite.TensorStartShapeVector, t["shape"])
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, t["type"])
        tflite.TensorAddBuffer(b, buffer)
        tflite.TensorAddName(b, name)
        if q is not None:
            tflite.TensorAddQuantization(b, q)
        tensor_offsets.append(tflite.TensorEnd(b))
    names = sorted({o["op"] for o in operators}, key=lambda n: [o["op"] for o in operators].index(n))
    op_offsets = []
    for o in operators:
        opt = o["options"][1](b) if o.get("options") else None
        ins, outs = ivec(tflite.OperatorStartInputsVector, o["inputs"]), ivec(tflite.OperatorStartOutputsVector,
                                                                               o["outputs"])
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, names.index(o["op"]))
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if opt is not None:
            tflite.OperatorAddBuiltinOptionsType(b, o["options"][0])
            tflite.OperatorAddBuiltinOptions(b, opt)
        op_offsets.append(tflite.OperatorEnd(b))
    tvec = tables(tflite.SubGraphStartTensorsVector, tensor_offsets)
    ovec = tables(tflite.SubGraphStartOperatorsVector, op_offsets)
    sg_in, sg_out = ivec(tflite.SubGraphStartInputsVector, inputs), ivec(tflite.SubGraphStartOutputsVector, outputs)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tvec)
    tflite.SubGraphAddInputs(b, sg_in)
    tflite.SubGraphAddOutputs(b, sg_out)
    tflite.SubGraphAddOperators(b, ovec)
    sg = tflite.SubGraphEnd(b)
    codes = []
    for n in names:
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(OPCODES[n], 127))
        tflite.OperatorCodeAddBuiltinCode(b, OPCODES[n])
        tflite.OperatorCodeAddVersion(b, 1)
        codes.append(tflite.OperatorCodeEnd(b))
    ocs = tables(tflite.ModelStartOperatorCodesVector, codes)
    sgs = tables(tflite.ModelStartSubgraphsVector, [sg])
    bufs = tables(tflite.ModelStartBuffersVector, buffers)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, ocs)
    tflite.ModelAddSubgraphs(b, sgs)
    tflite.ModelAddBuffers(b, bufs)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _build_model(tensor_type: int, quantized: bool) -> bytes:
    """A one-op ADD model (two [1, 4] inputs) with activations of ``tensor_type``."""
    q = {"scale": [0.05], "zero_point": [0]} if quantized else {}
    tensors = [dict(name=n, type=tensor_type, shape=[1, 4], **q) for n in ("a", "b", "y")]
    return build_tflite(tensors, [{"op": "ADD", "inputs": [0, 1], "outputs": [2]}], [0, 1], [2])


def test_built_models_are_valid_tflite(tmp_path):
    """The hand-built one-op models below are real TFLite models (LiteRT runs the float one)."""
    _litert()
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_content=_build_model(0, False))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 4), np.float32))
    it.set_tensor(it.get_input_details()[1]["index"], np.full((1, 4), 2, np.float32))
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.full((1, 4), 3.0))
    # the int8 variant imports and runs as TFLite's ADD
    path = tmp_path / "add8.tflite"
    path.write_bytes(_build_model(9, True))
    g = fxpsim.import_tflite(path)
    a, b_ = np.array([[1, -3, 100, 127]], np.int8), np.array([[2, 3, 100, 127]], np.int8)
    it8 = Interpreter(model_path=str(path))
    it8.allocate_tensors()
    it8.set_tensor(it8.get_input_details()[0]["index"], a)
    it8.set_tensor(it8.get_input_details()[1]["index"], b_)
    it8.invoke()
    np.testing.assert_array_equal(g.run([a, b_]), it8.get_tensor(it8.get_output_details()[0]["index"]))


def test_float_model_is_refused(tmp_path):
    path = tmp_path / "float.tflite"
    path.write_bytes(_build_model(0, False))                    # FLOAT32 activations
    with pytest.raises(ValueError, match=r"float \(non-quantized\) model"):
        fxpsim.import_tflite(path)


def test_int16_activations_import_as_16x8(tmp_path):
    """An int16 ADD imports as a 16x8 graph (tests/frontends/test_tflite_int16.py checks it against LiteRT and
    the int16 ops that are refused)."""
    path = tmp_path / "int16.tflite"
    path.write_bytes(_build_model(7, True))                     # INT16 activations
    g = fxpsim.import_tflite(path)
    assert [n.op for n in g.nodes] == ["tflite_int16_add"] and g.tensors[g.outputs[0]].dtype == np.int16


def test_missing_tflite_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tflite", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tflite\]' from the clone"):
        fxpsim.import_tflite(MODELS_DIR / "conv_block.tflite")


def test_import_fxpsim_stays_light():
    import subprocess
    code = ("import sys, fxpsim; fxpsim.io; assert 'tflite' not in sys.modules and 'flatbuffers' not in sys.modules "
            "and 'fxpsim.frontends.tflite.importer' not in sys.modules; f = fxpsim.import_tflite; assert 'tflite' not in sys.modules; "
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ------------------------------------------------------------------------------------------ one-op models
def _options(kind: str, **fields):
    """(BuiltinOptions enum, builder) of a ``<kind>`` options table with the given fields."""
    def make(b):
        vectors = {}
        for f, v in fields.items():
            if isinstance(v, (list, tuple)):
                getattr(tflite, f"{kind}Start{f}Vector")(b, len(v))
                for x in reversed(v):
                    b.PrependInt32(int(x))
                vectors[f] = b.EndVector()
        getattr(tflite, f"{kind}Start")(b)
        for f, v in fields.items():
            getattr(tflite, f"{kind}Add{f}")(b, vectors.get(f, v))
        return getattr(tflite, f"{kind}End")(b)
    return getattr(tflite.BuiltinOptions, kind), make


def _act(name, shape, scale, zp):
    return dict(name=name, type=INT8, shape=list(shape), scale=[float(np.float32(scale))], zero_point=[int(zp)])


def _const(name, data, typ=INT32, **q):
    return dict(name=name, type=typ, shape=list(np.shape(data)), data=np.asarray(data), **q)


ACTS = {"none": 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3}


def _one_op_cases():
    """(case id, flatbuffer) of one-op int8 models with seeded random scales, zero points and options."""
    cases = []

    def add(case_id, tensors, ops, inputs, outputs):
        cases.append((case_id, build_tflite(tensors, ops, inputs, outputs)))

    for seed in range(3):
        rng = np.random.default_rng(100 + seed)

        def sc(lo=-2.3, hi=-1.0):
            return float(10 ** rng.uniform(lo, hi))

        def zp(k=40):
            return int(rng.integers(-k, k + 1))
        act = list(ACTS)[seed % 4] if seed else "relu6"
        for op, kind in (("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions")):
            sa, sb = sc(), sc()
            so = (sa + sb) * rng.uniform(0.6, 1.6) if op != "MUL" else sa * sb * rng.uniform(20, 140)
            bshape = [[1, 5, 4, 3], [1, 1, 1, 3], [1, 5, 1, 1]][seed]
            add(f"{op}-{act}-{seed}",
                [_act("a", [1, 5, 4, 3], sa, zp()), _act("b", bshape, sb, zp()), _act("y", [1, 5, 4, 3], so, zp())],
                [{"op": op, "inputs": [0, 1], "outputs": [2],
                  "options": _options(kind, FusedActivationFunction=ACTS[act])}], [0, 1], [2])
        s, z = sc(), zp()
        axis = [-1, 1, 2][seed]
        shapes = [[1, 3, 4, 2], [1, 3, 4, 2], [1, 3, 4, 2]]
        for k, sh in enumerate(shapes):
            sh[axis] += k
        out = list(shapes[0])
        out[axis] = sum(sh[axis] for sh in shapes)
        add(f"CONCATENATION-axis{axis}", [_act(f"x{k}", sh, s, z) for k, sh in enumerate(shapes)] + [_act("y", out, s, z)],
            [{"op": "CONCATENATION", "inputs": [0, 1, 2], "outputs": [3],
              "options": _options("ConcatenationOptions", Axis=axis)}], [0, 1, 2], [3])
        si = sc()
        add(f"LEAKY_RELU-{seed}", [_act("x", [1, 6, 7], si, zp()), _act("y", [1, 6, 7], si * rng.uniform(0.4, 1.3), zp())],
            [{"op": "LEAKY_RELU", "inputs": [0], "outputs": [1],
              "options": _options("LeakyReluOptions", Alpha=float(rng.uniform(0.01, 0.6)))}], [0], [1])
        si = sc()
        add(f"QUANTIZE-int8-{seed}", [_act("x", [1, 6, 7], si, zp()), _act("y", [1, 6, 7], si * rng.uniform(0.3, 3), zp())],
            [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}], [0], [1])
        for op in ("RELU", "RELU6", "RELU_N1_TO_1"):
            si = sc(-1.6, -1.0)
            add(f"{op}-{seed}", [_act("x", [1, 5, 9], si, zp()), _act("y", [1, 5, 9], si * rng.uniform(0.5, 1.5), zp())],
                [{"op": op, "inputs": [0], "outputs": [1]}], [0], [1])
        for op, so, zo in (("LOGISTIC", 1 / 256, -128), ("TANH", 1 / 128, 0)):
            add(f"{op}-{seed}", [_act("x", [1, 4, 8], sc(-2.0, -0.8), zp()), _act("y", [1, 4, 8], so, zo)],
                [{"op": op, "inputs": [0], "outputs": [1]}], [0], [1])
        si = sc(-1.7, -1.0)
        add(f"HARD_SWISH-{seed}", [_act("x", [1, 4, 8], si, zp()), _act("y", [1, 4, 8], si * rng.uniform(0.6, 1.2), zp())],
            [{"op": "HARD_SWISH", "inputs": [0], "outputs": [1]}], [0], [1])
        add(f"SOFTMAX-{seed}", [_act("x", [1, 3, 11], sc(-1.8, -0.8), zp()), _act("y", [1, 3, 11], 1 / 256, -128)],
            [{"op": "SOFTMAX", "inputs": [0], "outputs": [1],
              "options": _options("SoftmaxOptions", Beta=float(rng.uniform(0.5, 2.0)))}], [0], [1])
        axes, keep = [([1, 2], True), ([1, 2], False), ([2], False)][seed]
        shp = [1, 5, 6, 3]
        out = [1 if a in axes else d for a, d in enumerate(shp)] if keep else [d for a, d in enumerate(shp) if a not in axes]
        si = sc()
        add(f"MEAN-{axes}-{keep}", [_act("x", shp, si, zp()), _const("axes", np.array(axes, np.int32)),
                                    _act("y", out, si * rng.uniform(0.5, 1.5), zp())],
            [{"op": "MEAN", "inputs": [0, 1], "outputs": [2], "options": _options("ReducerOptions", KeepDims=keep)}],
            [0], [2])
        si = sc()           # 16 channels in LiteRT's SIMD blocks and 3 in its scalar tail
        add(f"MEAN-HW-keep-C19-{seed}", [_act("x", [1, 4, 5, 19], si, zp(100)), _const("axes", np.array([1, 2], np.int32)),
                                         _act("y", [1, 1, 1, 19], si * rng.uniform(0.3, 1.5), zp(100))],
            [{"op": "MEAN", "inputs": [0, 1], "outputs": [2], "options": _options("ReducerOptions", KeepDims=True)}],
            [0], [2])
        for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            s, z = sc(), zp()
            pad, (fh, fw), (sh, sw) = seed % 2, [(2, 3), (3, 3), (2, 2)][seed], [(1, 2), (2, 2), (2, 1)][seed]
            h, w = 9, 8
            oh, ow = ((-(-h // sh), -(-w // sw)) if pad == 0 else ((h - fh) // sh + 1, (w - fw) // sw + 1))
            add(f"{op}-{seed}", [_act("x", [1, h, w, 3], s, z), _act("y", [1, oh, ow, 3], s, z)],
                [{"op": op, "inputs": [0], "outputs": [1],
                  "options": _options("Pool2DOptions", Padding=pad, StrideW=sw, StrideH=sh, FilterWidth=fw,
                                      FilterHeight=fh, FusedActivationFunction=ACTS[act])}], [0], [1])
        s, z = sc(), zp()
        pads = np.array([[0, 0], [1, 2], [0, 1], [2, 0]], np.int32)
        if seed < 2:
            add(f"PAD-{seed}", [_act("x", [1, 3, 4, 2], s, z), _const("p", pads), _act("y", [1, 6, 5, 4], s, z)],
                [{"op": "PAD", "inputs": [0, 1], "outputs": [2]}], [0], [2])
        else:
            add("PADV2", [_act("x", [1, 3, 4, 2], s, z), _const("p", pads),
                          _const("v", np.array([17], np.int8), INT8, scale=[float(np.float32(s))], zero_point=[z]),
                          _act("y", [1, 6, 5, 4], s, z)],
                [{"op": "PADV2", "inputs": [0, 1, 2], "outputs": [3]}], [0], [3])
    s, z = 0.02, 3
    add("SQUEEZE-dims", [_act("x", [1, 1, 4, 1, 3], s, z), _act("y", [1, 1, 4, 3], s, z)],
        [{"op": "SQUEEZE", "inputs": [0], "outputs": [1], "options": _options("SqueezeOptions", SqueezeDims=[3])}],
        [0], [1])
    add("EXPAND_DIMS", [_act("x", [1, 4, 3], s, z), _const("a", np.array(-1, np.int32)), _act("y", [1, 4, 3, 1], s, z)],
        [{"op": "EXPAND_DIMS", "inputs": [0, 1], "outputs": [2]}], [0], [2])
    add("RESHAPE-tensor", [_act("x", [1, 4, 3, 2], s, z), _const("t", np.array([1, -1, 2], np.int32)),
                           _act("y", [1, 12, 2], s, z)],
        [{"op": "RESHAPE", "inputs": [0, 1], "outputs": [2]}], [0], [2])
    add("RESHAPE-option", [_act("x", [1, 4, 3, 2], s, z), _act("y", [1, 24], s, z)],
        [{"op": "RESHAPE", "inputs": [0], "outputs": [1], "options": _options("ReshapeOptions", NewShape=[1, 24])}],
        [0], [1])
    add("QUANTIZE-DEQUANTIZE-float", [dict(name="x", type=FLOAT32, shape=[1, 4, 5]), _act("q", [1, 4, 5], 0.013, -7),
                                      dict(name="y", type=FLOAT32, shape=[1, 4, 5])],
        [{"op": "QUANTIZE", "inputs": [0], "outputs": [1]}, {"op": "DEQUANTIZE", "inputs": [1], "outputs": [2]}],
        [0], [2])
    # MAC ops: per-channel and per-tensor weights, strides, dilations, depth multiplier, keep_num_dims
    rng = np.random.default_rng(7)
    for k, (op, act, pc) in enumerate((("CONV_2D", "relu6", True), ("CONV_2D", "none", False),
                                       ("DEPTHWISE_CONV_2D", "relu", True), ("FULLY_CONNECTED", "none", True),
                                       ("FULLY_CONNECTED", "relu", False))):
        sx, zx, sy, zy = 0.03, int(rng.integers(-20, 20)), 0.05 + 0.02 * k, int(rng.integers(-20, 20))
        if op == "CONV_2D":
            w = rng.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8)
            x_shape, o = [1, 9, 8, 3], 5
            pad, (sh, sw), (dh, dw) = k % 2, (2, 1), (1, 2)
            eh, ew = (3 - 1) * dh + 1, (3 - 1) * dw + 1
            y_shape = [1, -(-9 // sh), -(-8 // sw), o] if pad == 0 else [1, (9 - eh) // sh + 1, (8 - ew) // sw + 1, o]
            options = _options("Conv2DOptions", Padding=pad, StrideW=sw, StrideH=sh, DilationWFactor=dw,
                               DilationHFactor=dh, FusedActivationFunction=ACTS[act])
            qdim = 0
        elif op == "DEPTHWISE_CONV_2D":
            w = rng.integers(-127, 128, (1, 3, 3, 6)).astype(np.int8)
            x_shape, o, y_shape = [1, 7, 8, 3], 6, [1, 7, 8, 6]
            options = _options("DepthwiseConv2DOptions", Padding=0, StrideW=1, StrideH=1, DepthMultiplier=2,
                               DilationWFactor=2, DilationHFactor=2, FusedActivationFunction=ACTS[act])
            qdim = 3
        else:
            o = 4
            if pc:
                w = rng.integers(-127, 128, (o, 5)).astype(np.int8)
                x_shape, y_shape = [1, 2, 5], [1, 2, o]
                options = _options("FullyConnectedOptions", KeepNumDims=True, FusedActivationFunction=ACTS[act])
            else:
                w = rng.integers(-127, 128, (o, 24)).astype(np.int8)
                x_shape, y_shape = [1, 2, 3, 4], [1, o]
                options = _options("FullyConnectedOptions", FusedActivationFunction=ACTS[act])
            qdim = 0
        sw_ = (rng.uniform(0.002, 0.01, o) if pc else np.array([0.006])).astype(np.float32)
        bias = rng.integers(-3000, 3000, o).astype(np.int32)
        add(f"{op}-{act}-{'pc' if pc else 'pt'}-{k}",
            [_act("x", x_shape, sx, zx), _const("w", w, INT8, scale=sw_.tolist(), zero_point=[0] * sw_.size, qdim=qdim),
             _const("b", bias, INT32, scale=(np.float32(sx) * sw_).tolist(), zero_point=[0] * sw_.size),
             _act("y", y_shape, sy, zy)],
            [{"op": op, "inputs": [0, 1, 2], "outputs": [3], "options": options}], [0], [3])
    return cases


ONE_OP_CASES = _one_op_cases()


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("case", [c[0] for c in ONE_OP_CASES])
def test_one_op_models_against_live_litert(tmp_path, case, kernels):
    """Hand-built one-op models with random scales, zero points and options, on random inputs."""
    _litert()
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    content = dict(ONE_OP_CASES)[case]
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    g = fxpsim.import_tflite(path, kernels=kernels)
    resolver = {"reference": OpResolverType.BUILTIN_REF,
                "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "xnnpack": OpResolverType.BUILTIN}[kernels]
    it = Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    rng = np.random.default_rng(sum(map(ord, case)))
    n = 24
    feeds = []
    for d in it.get_input_details():
        shape = (n,) + tuple(int(v) for v in d["shape"][1:])
        feeds.append(rng.uniform(-2.0, 2.0, shape).astype(np.float32) if d["dtype"] == np.float32 else
                     rng.integers(-128, 128, shape).astype(np.int8))
    y = g.run(feeds)
    out = it.get_output_details()[0]
    for s in range(n):
        for d, f in zip(it.get_input_details(), feeds):
            it.set_tensor(d["index"], f[s:s + 1])
        it.invoke()
        np.testing.assert_array_equal(y[s], it.get_tensor(out["index"])[0], err_msg=f"{case} sample {s}")


def test_squeeze_of_every_unit_axis_is_refused(tmp_path):
    """Without squeeze_dims LiteRT (batch 1) squeezes the batch axis too: not a per-sample op."""
    path = tmp_path / "squeeze.tflite"
    path.write_bytes(build_tflite([_act("x", [1, 1, 4, 1, 3], 0.02, 3), _act("y", [4, 3], 0.02, 3)],
                                  [{"op": "SQUEEZE", "inputs": [0], "outputs": [1]}], [0], [1]))
    with pytest.raises(ValueError, match="SQUEEZE without squeeze_dims"):
        fxpsim.import_tflite(path)
