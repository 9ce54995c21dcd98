"""The accumulator walk-through (docs/npu_accumulator.md, examples/npu_accumulator.py) on the imported int8
MobileNetV2 of tests/vectors/mobilenet_v2, checked against LiteRT itself and an independent integer model.

* The doc quotes the script's printout verbatim: every number it shows regenerates from the script.
* An independent per-add model written here (numpy int64 running sums of every convolution and the fully
  connected layer, tap by tap in TFLite's (kh, kw, c) order; the fit of each add to W bits by saturation or
  two's-complement wrap; the bias added after the sum from a W-bit bias register), fed LiteRT's own tensors
  (reference kernels, every intermediate preserved) -- nothing of fxpsim's accumulate, requantization or
  import -- reproduces per layer the bits needed, the bias bits, the width from which a wrapping accumulator's
  sums are exact and the overflowing adds at the recommended width and one bit narrower, both modes.
* The same model fed fxpsim's tensors of the network run at the narrower width (the cumulative inputs)
  reproduces the cumulative overflow counts.
* At the recommended width the network's outputs equal LiteRT's (its exact datapath) bit for bit; one bit
  narrower they differ in as many codes as ``exact_fraction`` says.
* The doc's shell command runs as written and prints the same recommendation.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "npu_accumulator.md"
SCRIPT = ROOT / "examples" / "npu_accumulator.py"
MAC_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def _script():
    spec = importlib.util.spec_from_file_location("npu_accumulator", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def walk():
    import fxpsim
    mod = _script()
    graph = fxpsim.import_model(mod.MODEL)
    x = np.load(mod.IMAGES)["x"]
    return mod, graph, x, mod.analyse(graph, x)


@pytest.fixture(scope="module")
def litert(walk):
    """Per MAC op of the LiteRT model: its operands as LiteRT holds them, and the network's output."""
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    mod, _, x, _ = walk
    it = Interpreter(model_path=str(mod.MODEL), num_threads=1, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    details = {t["index"]: t for t in it.get_tensor_details()}
    ops = [o for o in it._get_ops_details() if o["op_name"] in MAC_OPS]
    din, dout = it.get_input_details()[0], it.get_output_details()[0]
    inputs = {o["index"]: [] for o in ops}
    outputs = []
    for s in range(len(x)):
        it.set_tensor(din["index"], x[s:s + 1])
        it.invoke()
        outputs.append(it.get_tensor(dout["index"])[0].copy())
        for o in ops:
            inputs[o["index"]].append(it.get_tensor(int(o["inputs"][0]))[0].copy())
    layers = {}
    for o in ops:
        xi, wi, bi = (int(v) for v in o["inputs"])
        layers[o["index"]] = dict(
            op=o["op_name"], x=np.stack(inputs[o["index"]]), w=it.get_tensor(wi).astype(np.int64),
            b=it.get_tensor(bi).astype(np.int64),
            x_zp=int(details[xi]["quantization_parameters"]["zero_points"][0]),
            out_shape=tuple(int(v) for v in details[int(o["outputs"][0])]["shape"][1:]))
        assert not np.any(details[wi]["quantization_parameters"]["zero_points"])     # symmetric int8 weights
    return layers, np.stack(outputs)


# ----------------------------------------------------------------------------------------- the independent model
def _same_or_valid(n_in, n_out, k):
    """(stride, pad before) of a TFLite SAME or VALID convolution axis mapping n_in to n_out (unique or fail)."""
    found = set()
    for s in (1, 2):
        if -(-n_in // s) == n_out:                                          # SAME
            found.add((s, max((n_out - 1) * s + k - n_in, 0) // 2))
        if (n_in - k) // s + 1 == n_out:                                    # VALID
            found.add((s, 0))
    assert len(found) == 1, (n_in, n_out, k, found)
    return found.pop()


def _taps(layer):
    """Products (x - z_x) w of every output, one [N, ...out] array per tap, in TFLite's order."""
    x = layer["x"].astype(np.int64) - layer["x_zp"]
    w = layer["w"]
    if layer["op"] == "FULLY_CONNECTED":
        x = x.reshape(len(x), -1)
        for k in range(w.shape[1]):
            yield x[:, k:k + 1] * w[None, :, k]
        return
    kh, kw = w.shape[1], w.shape[2]
    oh, ow = layer["out_shape"][0], layer["out_shape"][1]
    (sh, ph), (sw, pw) = _same_or_valid(x.shape[1], oh, kh), _same_or_valid(x.shape[2], ow, kw)
    xp = np.zeros((x.shape[0], max(x.shape[1] + 2 * kh, (oh - 1) * sh + kh + ph), max(x.shape[2] + 2 * kw,
                   (ow - 1) * sw + kw + pw), x.shape[3]), np.int64)         # padded taps read z_x: product 0
    xp[:, ph:ph + x.shape[1], pw:pw + x.shape[2]] = x
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw, :]      # [N, OH, OW, C]
            if layer["op"] == "DEPTHWISE_CONV_2D":
                mult = w.shape[3] // x.shape[3]
                yield np.repeat(win, mult, axis=3) * w[0, i, j, :]
            else:
                for c in range(w.shape[3]):
                    yield win[..., c:c + 1] * w[None, None, None, :, i, j, c]


def _fit(v, bits, mode):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(v, lo, hi) if mode == "saturate" else ((v - lo) & ((1 << bits) - 1)) + lo


def _bits(v) -> int:
    lo, hi = int(v.min()), int(v.max())
    return max(hi.bit_length() if hi >= 0 else 0, (-lo - 1).bit_length() if lo < 0 else 0) + 1


def per_add_model(layer, points):
    """Bits needed (every exact partial sum, the sum plus bias included), final-sum bits and per (W, mode) the
    overflowing adds: running sums s_k = fit(s_{k-1} + p_k), then fit(s_K + b_W), b_W the bias saturated into
    W bits; an add overflows when its exact result leaves the W-bit range."""
    exact, need = None, 1
    state = {p: None for p in points}
    count = dict.fromkeys(points, 0)
    for prod in _taps(layer):
        exact = prod.copy() if exact is None else exact + prod
        need = max(need, _bits(exact))
        for (bits, mode) in points:
            v = prod if state[(bits, mode)] is None else state[(bits, mode)] + prod
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            count[(bits, mode)] += int(np.count_nonzero((v < lo) | (v > hi)))
            state[(bits, mode)] = _fit(v, bits, mode)
    final = exact + layer["b"]
    need = max(need, _bits(final))
    for (bits, mode) in points:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        v = state[(bits, mode)] + np.clip(layer["b"], lo, hi)
        count[(bits, mode)] += int(np.count_nonzero((v < lo) | (v > hi)))
    x_zp = layer["x_zp"]
    w_abs = np.abs(layer["w"]).reshape(-1, layer["w"].shape[-1]).sum(axis=0) if layer["op"] == "DEPTHWISE_CONV_2D" \
        else np.abs(layer["w"]).reshape(layer["w"].shape[0], -1).sum(axis=1)
    worst = max(int(v) * max(127 - x_zp, x_zp + 128) + abs(int(b)) for v, b in zip(w_abs, layer["b"]))
    return {"bits_needed": need, "final_bits": _bits(final), "bias_bits": _bits(layer["b"]), "overflows": count,
            "worst_case_bits": worst.bit_length() + 1}


def _index(node_name: str) -> int:
    return int(re.match(r"op(\d+):", node_name).group(1))


# ----------------------------------------------------------------------------------------- tests
def test_doc_quotes_the_script_printout(walk):
    mod, graph, x, a = walk
    printed = mod.render(a, graph, x)
    block = re.search(r"<!-- output of examples/npu_accumulator.py -->\n```text\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None, "docs/npu_accumulator.md has no output block of the script"
    assert block.group(1).rstrip("\n") == printed


def test_isolated_numbers_equal_an_independent_model_on_litert_tensors(walk, litert):
    _, _, _, a = walk
    layers, _ = litert
    narrow, rec = a["widths"]
    points = [(w, m) for w in (narrow, rec) for m in ("saturate", "wrap")]
    assert len(a["layers"]) == len(layers) == 53
    for row in a["layers"]:
        ref = per_add_model(layers[_index(row["node"])], points)
        assert row["bits_needed"] == ref["bits_needed"], row["node"]
        assert row["bias_bits"] == ref["bias_bits"], row["node"]
        assert row["worst_case_bits"] == ref["worst_case_bits"], row["node"]
        assert row["bits_needed"] <= row["worst_case_bits"], row["node"]
        assert row["exact_from"]["wrap"] == ref["final_bits"], row["node"]   # wrap: exact iff the final sum fits
        for p in points:
            assert row["isolated"][p] == ref["overflows"][p], (row["node"], p)
    assert a["bias_register_bits"] == max(_bits(v["b"]) for v in layers.values())


def test_cumulative_overflows_equal_an_independent_model_on_the_configured_run(walk, litert):
    import fxpsim
    _, graph, x, a = walk
    layers, _ = litert
    narrow = a["widths"][0]
    base = fxpsim.HardwareConfig.preset("tflite-int8")
    for mode in ("saturate", "wrap"):
        _, _, kept = graph.run(x, base.replace(accumulator_bits=narrow, accumulator_overflow=mode), keep=True)
        for row in a["layers"]:
            node = graph.node(row["node"])
            layer = dict(layers[_index(row["node"])], x=kept[node.inputs[0]])
            ref = per_add_model(layer, [(narrow, mode)])
            assert row["cumulative"][(narrow, mode)] == ref["overflows"][(narrow, mode)], (row["node"], mode)


def test_recommended_width_equals_litert_and_one_narrower_does_not(walk, litert):
    import fxpsim
    _, graph, x, a = walk
    _, want = litert
    narrow, rec = a["widths"]
    base = fxpsim.HardwareConfig.preset("tflite-int8")
    for mode in ("saturate", "wrap"):
        assert a["recommendation"][mode]["accumulator_bits"] == rec
        assert a["recommendation"][mode]["metric"] == "exact_fraction"
        got = graph.run(x, base.replace(accumulator_bits=rec, accumulator_overflow=mode))
        np.testing.assert_array_equal(got, want)
        got = graph.run(x, base.replace(accumulator_bits=narrow, accumulator_overflow=mode))
        point = next(p for p in a["sweep"][mode] if p["accumulator_bits"] == narrow)
        differ = int(np.count_nonzero(got != want))
        assert differ > 0 and differ == round((1 - point["exact_fraction"]) * want.size), mode
        assert point["max_lsb_error"] == int(np.abs(got.astype(np.int64) - want).max())


def test_doc_shell_command_runs_and_recommends_the_same_width(walk):
    _, _, _, a = walk
    blocks = re.findall(r"```bash\n(.*?)\n```", DOC.read_text(), re.S)
    assert blocks[0] == "python examples/npu_accumulator.py"
    argv = blocks[1].split()
    assert argv[:2] == ["fxpsim", "sweep"]
    r = subprocess.run([sys.executable, "-m", "fxpsim.cli"] + argv[1:], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rec = a["recommendation"]["saturate"]["accumulator_bits"]
    assert f"recommendation (exact_fraction): accumulator_bits = {rec} " in r.stdout


@pytest.mark.parametrize("order", ["sequential", "tree"])
def test_bits_needed_of_a_partial_sum_of_exactly_minus_two_to_the_fifteen(order):
    """A partial sum of exactly -2^15 fits 16 bits: simulate's bits needed and headroom and
    accumulator_widths' observed width said 17 and -1 (they took the width of |s| = 2^15) while a 16-bit
    accumulator overflows no add; checked against a Python-int loop."""
    import fxpsim
    from fxpsim.graph.ir import IntegerGraph, Node, TensorSpec
    w = np.array([[127, 127, 2]], np.int8)
    tensors = [TensorSpec("x", 8, True, (3,), 1.0, 0), TensorSpec("w", 8, True, scale=1.0, data=w),
               TensorSpec("y", 8, True, (1,), 512.0, 0)]
    g = IntegerGraph(tensors, [Node("fc", "fully_connected", ["x", "w"], ["y"])], ["x"], ["y"])
    x = np.full((1, 3), -128, np.int8)
    products = [-128 * 127, -128 * 127, -128 * 2]
    sums = list(np.cumsum(products)) if order == "sequential" else \
        [products[0] + products[1], products[0] + products[1] + products[2]]
    want = max(_bits(np.array([s])) for s in sums)
    assert want == 16 and min(sums) == -(1 << 15)
    cfg = fxpsim.HardwareConfig.preset("tflite-int8").replace(accumulator_bits=16, accumulator_overflow="saturate",
                                                              accumulator_order=order)
    rec = fxpsim.simulate(g, cfg, x).layers[0]
    assert (rec.acc_bits_needed, rec.acc_bits_needed_cumulative, rec.headroom_bits, rec.overflow_count) == \
        (want, want, 0, 0)
    assert rec.acc_peak == 1 << 15
    if order == "sequential":
        assert fxpsim.accumulator_widths(g, x)[0].observed == want
