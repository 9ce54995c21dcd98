"""examples/rtl/conv_stream.v (int8 conv2d and depthwise conv engine) under the cocotb bench on Icarus Verilog,
against the golden vectors of the imported MobileNet-style fixture ``conv_block.tflite``:

* end to end on LiteRT's datapath, each engine fed the golden input of its node, every conv2d and depthwise
  node of the block (stride 2 VALID, SAME padding, depth multiplier 2, 1x1, stride 2 with asymmetric padding)
  matches bit for bit under random stalls, and the golden outputs are LiteRT's own (the reference-kernel
  Interpreter, live, every intermediate tensor kept);
* on a 16-bit saturating, bias-preloaded datapath the engines match too, and each planted bug (wrap for
  saturate, an accumulator one bit narrow, round-half-up ties, HWIO weights read for OHWI, padding with the
  code 0 instead of the zero point) fails at the first wrong word, which the scoreboard names: node, tensor,
  element, value, and the MAC step where the trace shows it.

Where each bug must show first is computed here by an independent model: Python-integer loops over the golden
input, weights and bias with the bug in them, gemmlowp requantization from ``tests/reference.py``, walked in the
engine's beat order (per output element: its trace words, then its accumulator and output).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.rtl.scoreboard import Stream, StreamPorts, conv_parameters
from fxpsim.rtl.vectors import export_vectors
from conv_model import Model
from verilator_env import verilator_env

cocotb = pytest.importorskip("cocotb", reason='cocotb not installed (pip install -e ".[test]")')
pytest.importorskip("tflite", reason="the tflite package is not installed (pip install -e '.[tflite]')")
from fxpsim.rtl.cocotb_bench import simulate_node  # noqa: E402

pytestmark = pytest.mark.skipif(not (shutil.which("iverilog") and shutil.which("vvp")),
                                reason="iverilog not installed (apt-get install iverilog)")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "vectors" / "tflite_models" / "conv_block.tflite"
SOURCES = [ROOT / "examples" / "rtl" / "dense_pe.v", ROOT / "examples" / "rtl" / "conv_stream.v"]
NODES = ["op1:CONV_2D", "op2:CONV_2D", "op3:DEPTHWISE_CONV_2D", "op5:DEPTHWISE_CONV_2D", "op6:CONV_2D",
         "op7:CONV_2D"]
TRACED = 16                                       # outputs traced per node
NO_TRACE = StreamPorts(outputs={"output": "y", "accumulator": Stream("y_acc", "y_valid", "y_ready")})


def _image():
    return np.load(MODEL.with_suffix(".npz"))["input"][0]             # (1, 16, 16, 3) int8


@pytest.fixture(scope="module")
def graph():
    return fxpsim.import_tflite(MODEL)


def _export(graph, d, datapath=None):
    return export_vectors(graph, d, _image(), datapath, formats=("npy",),
                          mac_trace=[{"node": n, "limit": TRACED} for n in NODES])


@pytest.fixture(scope="module")
def litert_vec(graph, tmp_path_factory):
    d = tmp_path_factory.mktemp("litert")
    return d, _export(graph, d)


@pytest.fixture(scope="module")
def sat16_vec(graph, tmp_path_factory):
    d = tmp_path_factory.mktemp("sat16")
    dp = dataclasses.replace(graph.default_datapath, accumulator_bits=16, accumulator_overflow="saturate",
                             bias_add="preload")
    return d, _export(graph, d, dp)


def run(d, node, tmp_path, defines=(), ports=None, stall=0.25, seed=3, sim="icarus"):
    return simulate_node(d, node, SOURCES, "conv_stream", simulator=sim, parameters=conv_parameters(d, node),
                         defines={b: 1 for b in defines}, ports=ports, stall=stall, seed=seed,
                         build_dir=tmp_path / ("build-" + node.replace(":", "_") + "".join(defines)))


# ----------------------------------------------------------------------------------------- matches
def test_conv_block_layers_match_end_to_end_and_litert(litert_vec, tmp_path):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    d, manifest = litert_vec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = Interpreter(model_path=str(MODEL), num_threads=1, experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], _image())
    it.invoke()
    ops = it._get_ops_details()
    nodes = {n["name"]: n for n in manifest["nodes"]}
    seen = set()
    for node in NODES:
        e = nodes[node]
        ours = np.load(Path(d) / e["dir"] / "output.npy")
        theirs = it.get_tensor(ops[e["attrs"]["tflite_index"]]["outputs"][0])
        assert np.array_equal(ours, theirs), f"{node}: the golden output is not LiteRT's"
        model = Model(d, manifest, node)
        assert model.first_wrong_word() is None, f"{node}: the model disagrees with the golden files"
        p = conv_parameters(d, node)
        seen.add((p["DEPTHWISE"], p["SH"], any(map(any, e["mac"]["pads"])), p["DM"]))
        r = run(d, node, tmp_path, stall=0.3)
        assert r.ok, r.text
        size = int(np.prod(ours.shape))
        K = e["mac"]["K"]
        assert [(t["role"], t["elements"], t["differ"]) for t in r.report["tensors"]] == [
            ("mac_trace", TRACED * (K + 2), 0), ("accumulator", size, 0), ("output", size, 0)], node
    # stride 2 (unpadded and padded bottom/right only), SAME padding, depthwise with multipliers 1 and 2
    assert {(0, 2, False, 1), (0, 1, True, 1), (1, 1, False, 1), (1, 1, True, 2), (0, 2, True, 1)} <= seen


_, _NO_VERILATOR = verilator_env()


@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.skipif(
    _NO_VERILATOR is not None, reason=_NO_VERILATOR or ""))])
def test_saturating_16_bit_preloaded_engine_matches(sat16_vec, tmp_path, sim):
    d, manifest = sat16_vec
    node = "op5:DEPTHWISE_CONV_2D"                                  # depth multiplier 2, SAME padding
    e = next(n for n in manifest["nodes"] if n["name"] == node)
    assert e["trace"]["overflows"] > 0                             # the accumulator really saturates
    assert Model(d, manifest, node).first_wrong_word() is None
    r = run(d, node, tmp_path, stall=0.2, sim=sim)
    assert r.ok, r.text
    assert [t["role"] for t in r.report["tensors"]] == ["mac_trace", "accumulator", "output"]


# ----------------------------------------------------------------------------------------- planted bugs
def _check_located(r, node, want):
    role, index, value, _ = want
    f = r.report["first_mismatch"]
    assert not r.ok
    assert (f["node"], f["role"], tuple(f["index"]), f["got"]) == (node, role, index, value), r.text
    return f


@pytest.mark.parametrize("node, define, bug, ports, named", [
    ("op3:DEPTHWISE_CONV_2D", "BUG_WRAP_INSTEAD_OF_SAT", {"mode": "wrap"}, None,
     "wrapped where saturation was expected"),
    ("op6:CONV_2D", "BUG_WEIGHTS_HWIO", {"hwio": True}, None, "weights transposed (read as HWIO instead of OHWI)"),
    ("op2:CONV_2D", "BUG_PAD_ZERO_CODE", {"pad_code": 0}, None,
     "padded taps read the code 0 instead of the input zero point (padding with 0, x_zp = -128)"),
    ("op7:CONV_2D", "BUG_ACC_ONE_BIT_NARROW", {"bits": 15}, NO_TRACE,
     "accumulator 15 bits wide instead of 16: width off by one (15-bit saturate)"),
])
def test_planted_bug_is_located(sat16_vec, tmp_path, node, define, bug, ports, named):
    d, manifest = sat16_vec
    model = Model(d, manifest, node)
    want = model.first_wrong_word(traced=ports is None, **bug)
    assert want is not None, f"the data should expose {define} on {node}"
    r = run(d, node, tmp_path, defines=[define], ports=ports)
    f = _check_located(r, node, want)
    assert f["patterns"][0].startswith(named), f["patterns"]
    role, index, value, sums = want
    if role == "mac_trace":                                       # the trace shows the MAC step itself
        assert f["mac"]["step"] == index[1], r.text
    else:                                                         # the step where the sums part ways
        n, oh, ow, m = index
        good = model.sums(n, oh, ow, m)
        assert f["mac"]["step"] == next(k for k in range(len(good)) if good[k] != sums[k]), r.text
    index = next(n["index"] for n in manifest["nodes"] if n["name"] == node)
    assert f"First mismatch (dataflow order): node #{index} '{node}'" in r.text


def test_round_half_up_is_located_in_the_output(graph, tmp_path):
    """Negative ties survive only where no ReLU clamps them: the 1x1 conv without activation (op6)."""
    node = "op6:CONV_2D"
    images = np.load(MODEL.with_suffix(".npz"))["input"][:, 0]
    every = export_vectors(graph, tmp_path / "all", images, formats=("npy",))
    model = Model(tmp_path / "all", every, node)
    hits = sorted({idx[0] for idx in np.ndindex(*model.acc.shape)
                   if model.y(int(model.acc[idx]), idx[3], tie_up=True) != model.out[idx]})
    assert hits, "the data should hold a negative rounding tie"
    d = tmp_path / "vec"
    manifest = export_vectors(graph, d, images[hits[:1]], formats=("npy",))
    model = Model(d, manifest, node)
    assert model.first_wrong_word() is None
    want = model.first_wrong_word(tie_up=True)
    assert want is not None and want[0] == "output"
    r = run(d, node, tmp_path, defines=["BUG_ROUND_HALF_UP"], ports=NO_TRACE, stall=0.0)
    f = _check_located(r, node, want)
    assert f["patterns"][0].startswith("round-half-up vs half-away tie"), r.text
    assert f["mac"]["rtl_acc"] == f["mac"]["golden_acc"]            # the accumulator was right


def test_conv_parameters_say_what_the_engine_cannot_run(litert_vec, graph, tmp_path):
    d, _ = litert_vec
    tree = dataclasses.replace(graph.default_datapath, accumulator_order="tree", overflow_at="end")
    export_vectors(graph, tmp_path / "tree", _image(), tree, formats=("npy",))
    with pytest.raises(ValueError, match=r"node 'op2:CONV_2D': conv_stream cannot run it exactly \('tree' "
                                         r"accumulation order; overflow_at='end'\)"):
        conv_parameters(tmp_path / "tree", "op2:CONV_2D")
    with pytest.raises(ValueError, match="conv_stream runs conv2d and depthwise_conv2d nodes, not 'fully_conn"):
        conv_parameters(d, "op11:FULLY_CONNECTED")
    with pytest.raises(ValueError, match="no node 'nope'"):
        conv_parameters(d, "nope")
    m = json.loads((Path(d) / "manifest.json").read_text())
    assert conv_parameters(d, "op7:CONV_2D") == {
        "H": 4, "W": 4, "C": 16, "M": 16, "KH": 3, "KW": 3, "SH": 2, "SW": 2, "DH": 1, "DW": 1, "PT": 0, "PL": 0,
        "OH": 2, "OW": 2, "DEPTHWISE": 0, "DM": 1, "ACC_BITS": 32, "SATURATE": 0, "BIAS_PRELOAD": 0}
    assert m["nodes"][7]["mac"]["pads"] == [[0, 1], [0, 1]]
