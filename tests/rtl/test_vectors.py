"""Golden vectors (fxpsim.rtl.export_vectors): files, manifest, read-back, hex words, MAC traces, the
SystemVerilog header, the tb_dense inputs, convolutions and every accumulator order/overflow placement.

Expected values come from ``graph.run(..., keep=True)`` and from independent code here: a hex formatter built on
Python's ``%x`` of ``2**bits + v``, and scalar saturating/wrapping loops over the products.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import fxpsim
from fxpsim import nn, train
from fxpsim.graph import IntegerGraph, Node, TensorSpec
from fxpsim.graph.ir import Datapath
from fxpsim.rtl import read_csv_codes, read_mem, read_mem_header
from fxpsim.graph.ops import requantizer_for
from fxpsim.rtl.vectors import export_vectors, mac_products, mac_run, mac_sequence

needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                    reason="iverilog not installed (apt-get install iverilog)")


@pytest.fixture(scope="module")
def digits():
    """A tiny digits MLP (64-16-10, one epoch) converted for int8-acc16-sat, and 12 test images."""
    x, y = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 16, 10), seed=0)
    train.fit(model, (x, y), epochs=1, progress=False)
    graph = fxpsim.convert(model, "int8-acc16-sat", x[:300])
    xt, _ = fxpsim.load_digits("test", flatten=True)
    return graph, xt[:12]


@pytest.fixture(scope="module")
def exported(digits, tmp_path_factory):
    graph, x = digits
    d = tmp_path_factory.mktemp("vec")
    config = fxpsim.preset("int8-acc16-sat")
    manifest = export_vectors(graph, d, x, config, formats=("hex", "mem", "npy", "csv"),
                              mac_trace=[{"node": "0:dense", "outputs": [0, 5, 17, 100]},
                                         {"node": "1:dense", "limit": 3}])
    _, traces, kept = graph.run(x, config, trace=True, keep=True)
    return graph, x, config, d, manifest, traces, kept


def _read(d, e):
    p = d / e["path"]
    if e["format"] == "npy":
        return np.load(p)
    if e["format"] == "csv":
        return read_csv_codes(p, bits=e["bits"], signed=e["signed"], shape=e["shape"])
    return read_mem(p, e["bits"], e["signed"], radix=e["radix"], shape=e["shape"])


def test_every_file_exists_and_the_manifest_names_every_file(exported):
    graph, x, config, d, manifest, traces, kept = exported
    on_disk = {str(p.relative_to(d)).replace(os.sep, "/") for p in d.rglob("*") if p.is_file()}
    named = {e["path"] for e in manifest["files"]}
    assert named | {"manifest.json"} == on_disk
    assert json.loads((d / "manifest.json").read_text()) == manifest
    assert manifest["batch"] == len(x) and [n["name"] for n in manifest["nodes"]] == [n.name for n in graph.nodes]
    for e in manifest["files"]:
        if e.get("set") in ("golden", "tb_dense") and e["format"] != "env":
            for key in ("node", "role", "shape", "layout", "bits", "signed", "quantization"):
                assert key in e, (e["path"], key)
    roles = {(e["node"], e["role"]) for e in manifest["files"] if e.get("set") == "golden"}
    for node in ("0:dense", "1:dense"):
        for role in ("input", "weights", "bias", "multiplier", "shift", "accumulator", "output", "mac_trace"):
            assert (node, role) in roles
    assert ("quantize", "input") in roles and ("quantize", "output") in roles


def test_files_read_back_equal_to_the_graph_run(exported):
    graph, x, config, d, manifest, traces, kept = exported
    checked = 0
    for e in manifest["files"]:
        if e.get("set") != "golden" or e["role"] in ("mac_trace", "mac_products"):
            continue
        node = graph.node(e["node"])
        if e["role"] == "input":
            want = kept[e["tensor"]]
        elif e["role"] == "output":
            want = kept[node.outputs[0]]
        elif e["role"] in ("weights", "bias"):
            want = graph.tensors[e["tensor"]].data
        elif e["role"] == "accumulator":
            want = traces[node.name]["acc"]
        else:
            rq = requantizer_for(graph, node, config)
            want = np.broadcast_to(np.array(getattr(rq, e["role"])), (graph.tensors[node.outputs[0]].shape[-1],))
        got = _read(d, e)
        assert got.shape == tuple(e["shape"]) == want.shape, e["path"]
        if e["bits"] == 0:
            assert got.dtype == np.float32 and np.array_equal(got, want)
        else:
            assert np.array_equal(got.astype(np.int64), np.asarray(want).astype(np.int64)), e["path"]
        if e["role"] in ("input", "output", "weights"):
            spec = graph.tensors[e["tensor"]]
            assert (e["bits"], e["signed"]) == (spec.bits, spec.signed)
            if spec.scale is not None:
                assert e["quantization"]["scale"] == pytest.approx(list(spec.scale))
                assert e["quantization"]["zero_point"] == [int(z) for z in spec.zero_point]
        if e["format"] == "hex":
            h = read_mem_header(d / e["path"])
            assert h["bits"] == e["bits"] and h["signed"] == e["signed"] and h["shape"] == tuple(e["shape"])
            assert e["layout"] in h["layout"]
        checked += 1
    assert checked > 40
    acc = next(e for e in manifest["files"] if e["role"] == "accumulator" and e["node"] == "0:dense")
    assert acc["bits"] == 16 and acc["layout"] == "[N][M]" and acc["axes"] == ["n", "m"]
    w = next(e for e in manifest["files"] if e["role"] == "weights" and e["node"] == "0:dense")
    assert w["layout"] == "[M][K]" and w["shape"] == [16, 64] and w["quantization"]["axis"] == 0


def _independent_hex(v: int, bits: int) -> str:
    """Two's complement of v in `bits` bits as ceil(bits/4) lower-case hex digits, written differently from
    fxpsim.rtl.memfile: add 2**bits to negatives and use %-formatting."""
    digits = (bits + 3) // 4
    return "%0*x" % (digits, v + 2 ** bits if v < 0 else v)


def _words(path):
    return [ln.split("//")[0].strip() for ln in open(path) if ln.split("//")[0].strip()]


@pytest.mark.parametrize("acc_bits", [16, 12])
def test_hex_words_of_negative_values_match_an_independent_formatter(digits, tmp_path, acc_bits):
    graph, x = digits
    config = fxpsim.preset("int8-acc16-sat").replace(accumulator_bits=acc_bits)
    export_vectors(graph, tmp_path, x, config, formats=("hex",))
    _, traces, kept = graph.run(x, config, trace=True, keep=True)
    acc = traces["0:dense"]["acc"].reshape(-1)
    assert (acc < 0).sum() > 10 and acc.min() == -(1 << (acc_bits - 1))     # negatives, saturated ones too
    words = _words(tmp_path / "01_0_dense" / "accumulator.hex")
    assert words == [_independent_hex(int(v), acc_bits) for v in acc]
    assert all(len(wd) == (acc_bits + 3) // 4 for wd in words)
    if acc_bits == 12:
        assert "800" in words                                               # -2048
    codes = kept["input_codes"].reshape(-1)
    assert (codes < 0).any()
    assert _words(tmp_path / "01_0_dense" / "input.hex") == [_independent_hex(int(v), 8) for v in codes]
    w = graph.tensors["0:dense/weights"].data.reshape(-1)
    assert _words(tmp_path / "01_0_dense" / "weights.hex") == [_independent_hex(int(v), 8) for v in w]
    assert _independent_hex(-1, 16) == "ffff" and _independent_hex(-128, 8) == "80"


def _scalar_trace(x, w, b, bits, mode, preload=True):
    """The running accumulator of one output, the test's own loop."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def fit(v):
        if lo <= v <= hi:
            return v
        return (hi if v > hi else lo) if mode == "saturate" else (v - lo) % (1 << bits) + lo
    s = [int(b) if preload else 0]
    for xv, wv in zip(x, w):
        s.append(fit(s[-1] + int(xv) * int(wv)))
    if not preload:
        s.append(fit(s[-1] + int(b)))
    return s


def test_mac_traces_are_the_running_accumulator_and_end_at_the_graphs_acc(exported):
    graph, x, config, d, manifest, traces, kept = exported
    node = next(n for n in manifest["nodes"] if n["name"] == "0:dense")
    tr = node["mac_trace"]
    assert tr["outputs"] == [0, 5, 17, 100] and tr["coords"] == [[0, 0], [0, 5], [1, 1], [6, 4]]
    T = np.load(d / node["dir"] / "mac_trace.npy")
    P = np.load(d / node["dir"] / "mac_products.npy")
    assert T.shape == (4, 65) and P.shape == (4, 64) and tr["steps"][0] == "init" and tr["steps"][-1] == "k=63"
    xz = int(graph.tensors["input_codes"].zero_point[0])
    w = graph.tensors["0:dense/weights"].data
    b = graph.tensors["0:dense/bias"].data
    acc = traces["0:dense"]["acc"]
    for t, (n, o) in enumerate(tr["coords"]):
        xo = kept["input_codes"][n].astype(np.int64) - xz
        want = _scalar_trace(xo, w[o], b[o], 16, "saturate")
        assert T[t].tolist() == want and T[t, -1] == acc[n, o]
        assert P[t].tolist() == (xo * w[o]).tolist()
    assert (np.diff(T, axis=1) != P).any()          # the trace saturates somewhere: not a plain cumulative sum
    node1 = next(n for n in manifest["nodes"] if n["name"] == "1:dense")
    assert node1["mac_trace"]["outputs"] == [0, 1, 2]       # limit 3, no outputs given: the first three
    hex_rows = read_mem(d / node["dir"] / "mac_trace.hex", 16, True, shape=(4, 65))
    assert np.array_equal(hex_rows, T)


def test_svh_header_values_and_identifiers(exported):
    graph, x, config, d, manifest, traces, kept = exported
    text = (d / "fxpsim_params.svh").read_text()
    for line in text.splitlines():
        if line.startswith("localparam"):
            name = line.split("=")[0].split()[-1]
            assert name.isidentifier() and name.upper() == name
    assert "localparam integer FXP_0_DENSE_K = 64;" in text
    assert "localparam integer FXP_1_DENSE_M = 10;" in text
    assert f"localparam integer FXP_0_DENSE_X_ZP = {int(graph.tensors['input_codes'].zero_point[0])};" in text
    assert "localparam integer FXP_0_DENSE_ACC_BITS = 16;" in text and "FXP_0_DENSE_BIAS_PRELOAD = 1;" in text


@needs_iverilog
def test_svh_compiles_in_iverilog(exported, tmp_path):
    graph, x, config, d, manifest, traces, kept = exported
    rq = requantizer_for(graph, graph.node("1:dense"), config)
    (tmp_path / "t.sv").write_text(
        "module t;\n`include \"fxpsim_params.svh\"\n"
        "initial begin\n"
        "  $display(\"%0d %0d %0d %0d\", FXP_0_DENSE_K, FXP_0_DENSE_M, FXP_1_DENSE_OUT_ZP, FXP_0_DENSE_ACT_MIN);\n"
        "  $display(\"%0d %0d\", $signed(FXP_1_DENSE_MULT[3*32 +: 32]), $signed(FXP_1_DENSE_SHIFT[3*8 +: 8]));\n"
        "  $display(\"%0d\", FXPSIM_BATCH);\n"
        "end\nendmodule\n")
    comp = subprocess.run(["iverilog", "-g2012", "-Wall", "-I", str(d), "-o", str(tmp_path / "t.vvp"),
                           str(tmp_path / "t.sv")], capture_output=True, text=True)
    assert comp.returncode == 0, comp.stderr
    run = subprocess.run(["vvp", "-n", str(tmp_path / "t.vvp")], capture_output=True, text=True)
    lines = run.stdout.split("\n")
    y = graph.tensors["1:dense"]
    assert lines[0].split() == ["64", "16", str(int(y.zero_point[0])), "-128"]
    assert lines[1].split() == [str(rq.multiplier[3]), str(rq.shift[3])]
    assert lines[2].strip() == str(len(x))
    if shutil.which("verilator"):
        lint = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-UNUSEDPARAM", "-I" + str(d),
                               str(tmp_path / "t.sv")], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stderr


def test_tb_dense_folder_holds_exactly_the_testbench_inputs(exported):
    graph, x, config, d, manifest, traces, kept = exported
    node = next(n for n in manifest["nodes"] if n["name"] == "0:dense")
    tb = d / node["tb_dense"]["dir"]
    assert sorted(p.name for p in tb.iterdir()) == ["bias.hex", "mult.hex", "params.env", "shift.hex", "w.hex",
                                                     "x.hex"]
    assert np.array_equal(read_mem(tb / "x.hex", 8, True, shape=(12, 64)), kept["input_codes"])
    assert np.array_equal(read_mem(tb / "w.hex", 8, True, shape=(16, 64)), graph.tensors["0:dense/weights"].data)
    assert np.array_equal(read_mem(tb / "bias.hex", 32, True), graph.tensors["0:dense/bias"].data)
    rq = requantizer_for(graph, graph.node("0:dense"), config)
    assert read_mem(tb / "mult.hex", 32, True).tolist() == list(rq.multiplier)
    assert read_mem(tb / "shift.hex", 8, True).tolist() == list(rq.shift)
    env = dict(ln.split("=") for ln in (tb / "params.env").read_text().splitlines() if ln and not ln.startswith("#"))
    assert env == {"K": "64", "M": "16", "N": "12", "ACC_BITS": "16", "SATURATE": "1", "BIAS_PRELOAD": "1",
                   "X_ZP": str(int(graph.tensors["input_codes"].zero_point[0])), "OUT_ZP": "-128",
                   "ACT_MIN": "-128", "ACT_MAX": "127"}
    # int8-acc16-sat requantizes with single rounding; dense_pe with double: said in the notes and params.env
    assert any("tflite-single" in s for s in node["notes"]) and "NOTE" in (tb / "params.env").read_text()


def _conv_graph(seed=0):
    """x[6,6,3] int8 -> conv 3x3 SAME stride 1 (relu) -> depthwise 3x3 SAME stride 2 (multiplier 2)."""
    rng = np.random.default_rng(seed)
    t = [TensorSpec("x", 8, True, (6, 6, 3), 0.02, -3),
         TensorSpec("c/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64), axis=0,
                    data=rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)),
         TensorSpec("c/b", 32, True, data=rng.integers(-3000, 3000, 4)),
         TensorSpec("c", 8, True, (6, 6, 4), 0.03, -128),
         TensorSpec("d/w", 8, True, scale=rng.uniform(0.004, 0.01, 8), zero_point=np.zeros(8, np.int64), axis=3,
                    data=rng.integers(-127, 128, (1, 3, 3, 8)).astype(np.int8)),
         TensorSpec("d/b", 32, True, data=rng.integers(-3000, 3000, 8)),
         TensorSpec("d", 8, True, (3, 3, 8), 0.05, 4)]
    n = [Node("conv", "conv2d", ["x", "c/w", "c/b"], ["c"], {"padding": "SAME", "activation": "relu"}),
         Node("dw", "depthwise_conv2d", ["c", "d/w", "d/b"], ["d"], {"padding": "SAME", "stride": 2})]
    return IntegerGraph(t, n, ["x"], ["d"], name="convs")


CONV_DATAPATHS = [Datapath(accumulator_bits=b, accumulator_overflow=o, accumulator_order=order, overflow_at=at,
                           bias_add=badd)
                  for b, o, order, at, badd in itertools.product(
                      (11, 32), ("saturate", "wrap", "saturate_symmetric"), ("sequential", "tree"), ("add", "end"),
                      ("after", "preload"))
                  if not (at == "end" and o == "saturate_symmetric")]


@pytest.mark.parametrize("dp", CONV_DATAPATHS, ids=lambda d: f"{d.accumulator_bits}-{d.accumulator_overflow}-"
                         f"{d.accumulator_order}-{d.overflow_at}-{d.bias_add}")
def test_conv_and_depthwise_traces_follow_every_order_and_overflow_placement(dp, tmp_path):
    """export_vectors checks every traced output's scalar loop against the graph's accumulator (it raises
    otherwise); here every output of both nodes is traced, and the vectorised model agrees too."""
    g = _conv_graph()
    x = np.random.default_rng(1).integers(-128, 128, (2, 6, 6, 3)).astype(np.int8)
    manifest = export_vectors(g, tmp_path, x, dp, formats=("npy",),
                              mac_trace=[{"node": "conv", "limit": 1000}, {"node": "dw", "limit": 1000}])
    _, traces, kept = g.run(x, dp, trace=True, keep=True)
    for n in manifest["nodes"]:
        acc = traces[n["name"]]["acc"]
        T = np.load(tmp_path / n["dir"] / "mac_trace.npy")
        assert np.array_equal(T[:, -1], acc.reshape(-1))
        mac = n["mac"]
        coords = np.argwhere(np.ones(acc.shape, bool))
        node = g.node(n["name"])
        b = np.load(tmp_path / n["dir"] / "bias.npy")[coords[:, -1]]
        P = mac_products(mac, kept[node.inputs[0]], g.tensors[node.inputs[1]].data, coords)
        fin, rows = mac_run(P, init=b if dp.bias_add == "preload" else None,
                            bias_end=None if dp.bias_add == "preload" else b, bits=dp.accumulator_bits,
                            mode=mac["overflow"], order=dp.accumulator_order, overflow_at=dp.overflow_at, trace=True)
        assert np.array_equal(fin, acc.reshape(-1)) and np.array_equal(rows, T)
    assert manifest["nodes"][0]["mac"]["pads"] == [[1, 1], [1, 1]]
    assert manifest["nodes"][1]["mac"]["depth_multiplier"] == 2
    files = {(e["node"], e["role"]): e for e in manifest["files"]}
    assert files[("conv", "weights")]["layout"] == "OHWI" and files[("conv", "output")]["layout"] == "NHWC"
    assert files[("dw", "weights")]["layout"] == "1HWC" and files[("conv", "output")]["axes"] == ["n", "h", "w", "c"]
    assert manifest["nodes"][0].get("tb_dense") is None            # not fully connected: no testbench folder


def test_conv_products_follow_the_tap_order_with_padding_as_zeros():
    g = _conv_graph()
    x = np.random.default_rng(2).integers(-128, 128, (1, 6, 6, 3)).astype(np.int8)
    mac = {"op": "conv2d", "x_zp": -3, "w_zp": 0, "stride": [1, 1], "dilation": [1, 1], "pads": [[1, 1], [1, 1]]}
    w = g.tensors["c/w"].data
    P = mac_products(mac, x, w, np.array([[0, 0, 5, 2]]))[0]
    want = []
    for i in range(3):
        for j in range(3):
            for c in range(3):
                h, ww = i - 1, 5 + j - 1
                xv = int(x[0, h, ww, c]) + 3 if 0 <= h < 6 and 0 <= ww < 6 else 0
                want.append(xv * int(w[2, i, j, c]))
    assert P.tolist() == want


def test_scalar_sequence_semantics():
    vals, labels = mac_sequence([100, 100, -50], init=20, bits=8, mode="saturate")
    assert vals == [20, 120, 127, 77] and labels == ["init", "k=0", "k=1", "k=2"]
    vals, _ = mac_sequence([100, 100, -50], bias_end=20, bits=8, mode="wrap")
    assert vals == [0, 100, -56, -106, -86]
    vals, labels = mac_sequence([100, 100, -50], bits=8, mode="wrap", overflow_at="end")
    assert vals == [0, 100, 200, 150, -106] and labels[-1] == "fit"
    vals, labels = mac_sequence([1, 2, 3, 4, 5], init=7, bits=8, mode="wrap", order="tree")
    assert vals == [7, 3, 7, 10, 15, 22] and labels[1:] == ["tree 1.0", "tree 1.1", "tree 2.0", "tree 3.0",
                                                             "init+tree"]


@pytest.mark.parametrize("where", ["graph", "node", "tensor"])
def test_a_name_that_is_not_ascii_is_refused_before_any_file(tmp_path, where):
    g = _conv_graph()
    t = [TensorSpec(("d\u00e9" if where == "tensor" and s.name == "d" else s.name), s.bits, s.signed, s.shape,
                    s.scale, s.zero_point, axis=s.axis, data=s.data) for s in g.tensors.values()]
    n = [Node("conv\u00e9" if where == "node" and nd.name == "conv" else nd.name, nd.op, list(nd.inputs),
              ["d\u00e9" if where == "tensor" and o == "d" else o for o in nd.outputs], dict(nd.attrs)) for nd in g.nodes]
    out = "d\u00e9" if where == "tensor" else "d"
    g = IntegerGraph(t, n, ["x"], [out], name="convs\u00e9" if where == "graph" else "convs")
    x = np.zeros((1, 6, 6, 3), np.int8)
    with pytest.raises(ValueError, match=r"export_vectors: the name '.*\u00e9' is not ASCII"):
        export_vectors(g, tmp_path / "out", x)
    assert not (tmp_path / "out").exists()


def test_export_errors(digits, tmp_path):
    graph, x = digits
    with pytest.raises(ValueError, match="formats"):
        export_vectors(graph, tmp_path, x, formats=("hex", "vhd"))
    with pytest.raises(ValueError, match="quantize node"):
        export_vectors(graph, tmp_path, x, mac_trace={"node": "quantize"})
    with pytest.raises(ValueError, match="no node named"):
        export_vectors(graph, tmp_path, x, mac_trace={"node": "nope"})
    with pytest.raises(ValueError, match="out of range"):
        export_vectors(graph, tmp_path, x, mac_trace={"node": "1:dense", "outputs": [len(x) * 10]})
    with pytest.raises(ValueError, match="limit"):
        export_vectors(graph, tmp_path, x, mac_trace={"node": "1:dense", "limit": 0})


def test_stale_testbench_outputs_are_removed(digits, tmp_path):
    graph, x = digits
    m = export_vectors(graph, tmp_path, x[:2], formats=("npy",))
    tb = tmp_path / m["nodes"][1]["tb_dense"]["dir"]
    (tb / "acc_out.hex").write_text("stale\n")
    export_vectors(graph, tmp_path, x[:2], formats=("npy",))
    assert not (tb / "acc_out.hex").exists()
