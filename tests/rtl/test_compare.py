"""The first-mismatch locator (fxpsim.rtl.compare): hand-made RTL dumps (every pattern, malformed files)
and co-simulation of examples/rtl/dense_pe.v on exported dense layers, with the six injected bugs located.

Expected nodes, elements, MAC steps and outputs are computed here independently: Python-integer loops over the
products (saturating, wrapping, narrower), gemmlowp requantization from ``tests/reference.py`` and its buggy
variants written out below.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import fxpsim
import fxpsim.graph.ops  # noqa: F401  (imported before graph.mac_ops)
from fxpsim import nn, train
from fxpsim.datapath.requantize import Requantizer
from fxpsim.graph.ops import requantizer_for
from fxpsim.rtl import write_csv_codes, write_mem
from fxpsim.rtl.compare import compare
from fxpsim.rtl.vectors import export_vectors
from reference import ref_mbqm

RTL = Path(__file__).resolve().parents[2] / "examples" / "rtl"
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                    reason="iverilog not installed (apt-get install iverilog)")


# ----------------------------------------------------------------------------------------- fixtures and models
@pytest.fixture(scope="module")
def net():
    """A digits MLP (64-16-10, one epoch) converted for int8-acc16-sat, and the 360 test images."""
    x, _ = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 16, 10), seed=0)
    train.fit(model, (x, _), epochs=1, progress=False)
    graph = fxpsim.convert(model, "int8-acc16-sat", x[:300])
    xt, _ = fxpsim.load_digits("test", flatten=True)
    return graph, xt


def config(bits=16, overflow="saturate", bias_add="preload"):
    """int8-acc16-sat with dense_pe's requantization (TFLite double rounding) and the given accumulator."""
    return fxpsim.preset("int8-acc16-sat").replace(requantization="tflite-double", accumulator_bits=bits,
                                                   accumulator_overflow=overflow, bias_add=bias_add)


@pytest.fixture(scope="module")
def golden(net, tmp_path_factory):
    graph, xt = net
    d = tmp_path_factory.mktemp("golden")
    cfg = config()
    x = xt[:16]
    export_vectors(graph, d, x, cfg, formats=("hex", "npy"), mac_trace={"node": "0:dense", "outputs": [0, 1, 2]})
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    return graph, x, cfg, d, traces, kept


def fit(v, bits, mode):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if lo <= v <= hi:
        return v
    return (hi if v > hi else lo) if mode == "saturate" else (v - lo) % (1 << bits) + lo


def sequence(graph, kept, node, n, o, bits, mode, preload=True, w=None):
    """Running sums of output (n, o) of a dense node: s[0] = start value, s[k+1] after product k."""
    nd = graph.node(node)
    xz = int(graph.tensors[nd.inputs[0]].zero_point[0])
    w = graph.tensors[nd.inputs[1]].data if w is None else w
    b = int(graph.tensors[nd.inputs[2]].data[o])
    s = [fit(b, bits, mode) if preload else 0]
    for xv, wv in zip(kept[nd.inputs[0]][n], w[o]):
        s.append(fit(s[-1] + (int(xv) - xz) * int(wv), bits, mode))
    if not preload:
        s.append(fit(s[-1] + b, bits, mode))
    return s


def acc_table(graph, kept, node, bits, mode, preload=True, w=None):
    nd = graph.node(node)
    N, M = len(kept[nd.inputs[0]]), graph.tensors[nd.outputs[0]].shape[0]
    return np.array([[sequence(graph, kept, node, n, o, bits, mode, preload, w)[-1] for o in range(M)]
                     for n in range(N)], dtype=np.int64)


def first_diff(a, b):
    bad = np.argwhere(np.asarray(a) != np.asarray(b))
    return tuple(int(v) for v in bad[0]) if len(bad) else None


def mbqm_variant(acc, m, s, variant):
    """gemmlowp MultiplyByQuantizedMultiplier with one of the dense_pe bugs (Python ints)."""
    left, right = max(s, 0), max(-s, 0)
    a = ((acc << left) - INT32_MIN) % (1 << 32) + INT32_MIN
    if a == m == INT32_MIN and variant != "nosat":
        srdhm = INT32_MAX
    else:
        t = a * m + ((1 << 30) if a * m >= 0 else 1 - (1 << 30))
        q = t >> 31 if (t >= 0 or variant == "floor") else -((-t) >> 31)
        srdhm = (q - INT32_MIN) % (1 << 32) + INT32_MIN
    mask = (1 << right) - 1
    thr = (mask >> 1) + (0 if variant == "tie_up" else int(srdhm < 0))
    return (srdhm >> right) + int((srdhm & mask) > thr)


def outputs(graph, node, acc, cfg, variant=None):
    nd = graph.node(node)
    rq = requantizer_for(graph, nd, cfg)
    y = graph.tensors[nd.outputs[0]]
    z = int(y.zero_point[0])
    lo = z if nd.attrs.get("activation") == "relu" else -128
    f = (lambda a, m, s: ref_mbqm(a, m, s, "double")) if variant is None else \
        (lambda a, m, s: mbqm_variant(a, m, s, variant))
    return np.array([[min(max(f(int(a), rq.multiplier[o], rq.shift[o]) + z, lo), 127) for o, a in enumerate(row)]
                     for row in acc], dtype=np.int64)


def dump_dir(tmp_path, golden_dir, copies=()):
    """A dump directory in the golden layout holding copies of some golden files."""
    dump = tmp_path / "dump"
    for rel in copies:
        (dump / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(golden_dir / rel, dump / rel)
    dump.mkdir(parents=True, exist_ok=True)
    return dump


def put(dump, rel, arr, bits):
    (dump / rel).parent.mkdir(parents=True, exist_ok=True)
    write_mem(dump / rel, arr, bits, True)


# ----------------------------------------------------------------------------------------- hand-made dumps
def test_copies_of_the_golden_files_match(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    rels = ["01_0_dense/accumulator.hex", "01_0_dense/output.hex", "02_1_dense/output.hex", "00_quantize/output.hex"]
    res = compare(d, dump_dir(tmp_path, d, rels))
    assert res.ok and res.exit_code == 0 and res.first is None
    assert [(t.node, t.stem) for t in res.tensors] == [("quantize", "output"), ("0:dense", "accumulator"),
                                                       ("0:dense", "output"), ("1:dense", "output")]
    assert "MATCH" in res.to_text() and "1:dense/accumulator" in res.not_dumped
    with pytest.raises(ValueError, match="no RTL files found"):
        compare(d, d)                      # the golden files themselves are not an RTL dump


def test_one_wrong_output_word(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    y = kept["1:dense"].astype(np.int64).copy()
    y[3, 7] += 1
    dump = dump_dir(tmp_path, d)
    put(dump, "02_1_dense/output.hex", y, 8)
    res = compare(d, dump)
    f = res.first
    assert not res.ok and res.exit_code == 1
    assert (f.node, f.role, f.index, f.index_text) == ("1:dense", "output", (3, 7), "(n=3, m=7)")
    assert (f.expected, f.got, f.difference, f.n_diff, f.total) == (y[3, 7] - 1, y[3, 7], 1, 1, 160)
    assert f.rtl_line == 8 + 3 * 10 + 7                     # 7 header lines, then one word per line
    assert "all off by ±1 LSB (+1: 1, -1: 0)" in f.pattern
    text = res.to_text()
    assert "element (n=3, m=7)" in text and f"expected     {f.hex(f.expected)} = {f.expected}" in text
    assert f.requant and "accumulator used" in f.requant[0]


def test_first_mismatch_in_dataflow_order_and_wrapped_accumulator(golden, net, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    wrapped = acc_table(graph, kept, "0:dense", 16, "wrap")
    sat = traces["0:dense"]["acc"]
    assert np.array_equal(acc_table(graph, kept, "0:dense", 16, "saturate"), sat)
    n, o = first_diff(wrapped, sat)
    s_sat = sequence(graph, kept, "0:dense", n, o, 16, "saturate")
    s_wrap = sequence(graph, kept, "0:dense", n, o, 16, "wrap")
    step = next(s for s in range(len(s_sat)) if s_sat[s] != s_wrap[s])
    dump = dump_dir(tmp_path, d)
    y = kept["1:dense"].astype(np.int64).copy()
    y[0, 0] ^= 1
    put(dump, "02_1_dense/output.hex", y, 8)                # a later node differs too
    put(dump, "01_0_dense/accumulator.hex", wrapped, 16)
    res = compare(d, dump)
    f = res.first
    assert (f.node, f.role, f.index) == ("0:dense", "accumulator", (n, o))
    assert f.patterns[0] == "wrapped where saturation was expected"
    assert f.mac.parting_step == step and f.mac.step == step and f.mac.rtl_matches[0] == "wrapping"
    assert f.mac.finals["saturating"] == sat[n, o] and f.mac.rtl_acc == wrapped[n, o]
    assert [r["saturating"] for r in f.mac.rows] == s_sat and [r["wrapping"] for r in f.mac.rows] == s_wrap
    assert len(res.mismatched) == 2 and "sums part ways (first overflow)" in res.to_text()


def test_accumulator_one_bit_narrow(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    narrow = acc_table(graph, kept, "0:dense", 15, "saturate")
    n, o = first_diff(narrow, traces["0:dense"]["acc"])
    s15 = sequence(graph, kept, "0:dense", n, o, 15, "saturate")
    exact = sequence(graph, kept, "0:dense", n, o, 64, "saturate")
    step = next(s for s in range(len(s15)) if not -(1 << 14) <= exact[s] < (1 << 14))
    assert s15[step] != exact[step] and s15[:step] == exact[:step]
    dump = dump_dir(tmp_path, d)
    put(dump, "01_0_dense/accumulator.hex", narrow, 16)
    f = compare(d, dump).first
    assert f.index == (n, o) and "accumulator 15 bits wide instead of 16: width off by one" in f.patterns[0]
    assert f.mac.step == step and "15-bit range" in f.mac.step_reason


def test_weights_transposed(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    w = graph.tensors["0:dense/weights"].data
    wt = w.reshape(-1).reshape(64, 16).T
    bad = acc_table(graph, kept, "0:dense", 16, "saturate", w=wt)
    n, o = first_diff(bad, traces["0:dense"]["acc"])
    good = sequence(graph, kept, "0:dense", n, o, 16, "saturate")
    swapped = sequence(graph, kept, "0:dense", n, o, 16, "saturate", w=wt)
    step = next(s for s in range(len(good)) if good[s] != swapped[s])
    dump = dump_dir(tmp_path, d)
    put(dump, "01_0_dense/accumulator.hex", bad, 16)
    f = compare(d, dump).first
    assert f.index == (n, o) and f.patterns[0].startswith("weights transposed")
    assert f.mac.step == step


@pytest.mark.parametrize("variant, phrase", [
    ("tie_up", "round-half-up vs half-away tie at the rounding shift"),
    ("floor", "SRDHM divides by 2^31 with floor instead of truncation toward zero")])
def test_requantization_variants_on_the_output(net, tmp_path, variant, phrase):
    graph, xt = net
    cfg = config(32, "wrap")
    _, traces, kept = graph.run(xt, cfg, trace=True, keep=True)
    acc = traces["1:dense"]["acc"]
    assert np.array_equal(outputs(graph, "1:dense", acc, cfg), kept["1:dense"])
    rows = np.unique(np.argwhere(outputs(graph, "1:dense", acc, cfg, variant) != kept["1:dense"])[:, 0])
    assert len(rows) >= 2
    x = xt[sorted(set(range(6)) | set(rows[:2].tolist()))]
    d = tmp_path / "g"
    export_vectors(graph, d, x, cfg, formats=("npy",))
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    bad = outputs(graph, "1:dense", traces["1:dense"]["acc"], cfg, variant)
    dump = dump_dir(tmp_path, d)
    put(dump, "02_1_dense/output.hex", bad, 8)
    put(dump, "02_1_dense/accumulator.hex", traces["1:dense"]["acc"], 32)
    res = compare(d, dump)
    f = res.first
    assert (f.node, f.role, f.index) == ("1:dense", "output", first_diff(bad, kept["1:dense"]))
    assert f.patterns[0].startswith(phrase) and "all off by ±1 LSB" in f.pattern
    assert f.mac.parting_step is None and f.mac.rtl_acc == traces["1:dense"]["acc"][f.index]
    assert any("the RTL's value" in line for line in f.requant)
    if variant == "tie_up":
        assert any("a tie" in line for line in f.requant)


def test_generic_patterns(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    y = kept["0:dense"].astype(np.int64)
    dump = dump_dir(tmp_path, d)

    def first(arr, rel="01_0_dense/output.hex", bits=8):
        put(dump, rel, arr, bits)
        return compare(d, {rel: dump / rel}).first
    assert "layout swap: the dump is in [M][N] order (transposed)" in first(y.T.copy().reshape(y.shape)).pattern
    flip = y.copy()
    some = (y != 0) & (y != -128)
    assert some.any()
    flip[some] = -y[some]
    assert "sign flips (got = -expected)" in first(flip).pattern
    nobit = y & ~8
    assert "bit 3 differs in every mismatch" in first(nobit).pattern
    perm = y.copy()
    perm[0] = y[0][::-1]
    assert "a permutation" in first(perm).pattern
    assert "the RTL wrote zeros" in first(np.zeros_like(y)).pattern
    acc1 = traces["1:dense"]["acc"]
    assert acc1.max() < 32000
    assert "constant offset of +2 LSB" in first(acc1 + 2, "02_1_dense/accumulator.hex", 16).pattern
    acc = traces["0:dense"]["acc"]
    top = (acc + (1 << 14)) % (1 << 15) - (1 << 14)          # the top bit lost at the very end
    assert "values wrapped to 15 bits" in first(top, "01_0_dense/accumulator.hex", 16).pattern


def test_mac_trace_dump_names_the_step(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    T = np.load(d / "01_0_dense" / "mac_trace.npy").astype(np.int64)
    T[1, 20:] += 1
    dump = dump_dir(tmp_path, d)
    put(dump, "01_0_dense/mac_trace.hex", T, 16)
    f = compare(d, dump).first
    assert (f.role, f.index, f.index_text) == ("mac_trace", (1, 20), "(t=1, s=20)")
    assert f.mac.coords == (0, 1) and f.mac.step == 20


def test_mapping_forms_and_a_copied_testbench_folder(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    acc = traces["0:dense"]["acc"]
    p = tmp_path / "acc_out.hex"
    write_mem(p, acc, 16, True)
    for key in (("0:dense", "accumulator"), "0:dense/accumulator", "01_0_dense/accumulator.hex",
                "01_0_dense/accumulator", "01_0_dense/tb_dense/acc_out.hex"):
        res = compare(d, {key: p})
        assert res.ok and [(t.node, t.role) for t in res.tensors] == [("0:dense", "accumulator")]
    tb = tmp_path / "elsewhere"
    shutil.copytree(d / "02_1_dense" / "tb_dense", tb)
    write_mem(tb / "y_out.hex", kept["1:dense"], 8, True)
    res = compare(d, tb)                                    # found by params.env (K, M, N)
    assert res.ok and [(t.node, t.role) for t in res.tensors] == [("1:dense", "output")]


def test_html_page_has_the_mismatch_map(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    y = kept["1:dense"].astype(np.int64) ^ 1
    dump = dump_dir(tmp_path, d)
    put(dump, "02_1_dense/output.hex", y, 8)
    res = compare(d, dump, html=tmp_path / "page" / "cmp.html")
    page = (tmp_path / "page" / "cmp.html").read_text()
    assert "data:image/png;base64," in page and "MISMATCH" in page and "First mismatch" in page
    ok = compare(d, dump_dir(tmp_path / "ok", d, ["02_1_dense/accumulator.hex"]))
    assert ok.to_html(tmp_path / "ok.html") and "base64" not in (tmp_path / "ok.html").read_text()
    assert res.to_dict()["first_mismatch"]["index"] == [0, 0]


def test_malformed_and_missing_files(golden, tmp_path):
    graph, x, cfg, d, traces, kept = golden
    acc = traces["0:dense"]["acc"]
    dump = dump_dir(tmp_path, d)
    rel = dump / "01_0_dense" / "accumulator.hex"
    put(dump, "01_0_dense/accumulator.hex", acc, 32)                   # 8 hex digits for a 16-bit tensor
    with pytest.raises(ValueError, match="header states bits: 32"):
        compare(d, dump)
    write_mem(rel, acc, 32, True, header=False)
    with pytest.raises(ValueError, match=r"accumulator.hex, line 1: .* has 8 digits; a 16-bit word"):
        compare(d, dump)
    words = [format(int(v) & 0xFFFF, "04x") for v in acc.reshape(-1)]
    rel.write_text("\n".join(words[:5] + ["g012"] + words[6:]) + "\n")
    with pytest.raises(ValueError, match=r"line 6: malformed word 'g012'"):
        compare(d, dump)
    rel.write_text("\n".join(words[:5] + ["xxxx"] + words[6:]) + "\n")
    with pytest.raises(ValueError, match="undefined value at line 6"):
        compare(d, dump)
    rel.write_text("\n".join(words[:-1]) + "\n")
    with pytest.raises(ValueError, match="do not fill shape"):
        compare(d, dump)
    rel.unlink()
    np.save(dump / "01_0_dense" / "accumulator.npy", acc[:, :8])
    with pytest.raises(ValueError, match=r"accumulator.npy: shape \(16, 8\), expected \(16, 16\)"):
        compare(d, dump)
    (dump / "01_0_dense" / "accumulator.npy").unlink()
    write_csv_codes(dump / "01_0_dense" / "accumulator.csv", acc)
    text = (dump / "01_0_dense" / "accumulator.csv").read_text().splitlines()
    text[4] = text[4].replace(",", ";", 1)
    (dump / "01_0_dense" / "accumulator.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"accumulator.csv, line 5: malformed value"):
        compare(d, dump)
    with pytest.raises(ValueError, match="not found"):
        compare(d, {"0:dense/accumulator": tmp_path / "missing.hex"})
    with pytest.raises(ValueError, match="unknown tensor"):
        compare(d, {"0:dense/nothing": rel})
    with pytest.raises(ValueError, match="not a golden vector directory"):
        compare(tmp_path, dump)
    with pytest.raises(ValueError, match="RTL dump not found"):
        compare(d, tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no RTL files found"):
        compare(d, dump_dir(tmp_path / "empty", d))


# ----------------------------------------------------------------------------------------- co-simulation
def run_tb(folder: Path, defines=()):
    env = {k: v for k, v in os.environ.items()
           if k not in ("K", "M", "N", "ACC_BITS", "SATURATE", "BIAS_PRELOAD", "X_ZP", "OUT_ZP", "ACT_MIN", "ACT_MAX")}
    env["DEFINES"] = " ".join(f"-D{b}" for b in defines)
    r = subprocess.run(["bash", str(RTL / "run.sh"), str(folder)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def export_and_simulate(graph, x, cfg, d, defines=()):
    manifest = export_vectors(graph, d, x, cfg, formats=("hex", "npy"))
    tbs = [n for n in manifest["nodes"] if n["op"] == "fully_connected"]
    assert tbs and all(n["tb_dense"] for n in tbs)
    for n in tbs:
        run_tb(d / n["tb_dense"]["dir"], defines)
    return manifest


@needs_iverilog
@pytest.mark.parametrize("bits, overflow, bias_add", [(b, o, "preload") for b in (12, 16, 32)
                                                      for o in ("saturate", "wrap")] + [(16, "saturate", "after")])
def test_cosim_of_exported_dense_layers_matches(net, tmp_path, bits, overflow, bias_add):
    graph, xt = net
    cfg = config(bits, overflow, bias_add)
    m = export_and_simulate(graph, xt[:16], cfg, tmp_path)
    params = m["nodes"][1]["tb_dense"]["params"]
    assert (params["ACC_BITS"], params["SATURATE"], params["BIAS_PRELOAD"]) == \
        (bits, int(overflow == "saturate"), int(bias_add == "preload"))
    if bits < 32:
        assert m["nodes"][1]["trace"]["overflows"] > 0      # the accumulator really overflows
    res = compare(tmp_path, tmp_path)
    assert res.ok, res.to_text()
    assert [(t.node, t.role) for t in res.tensors] == [("0:dense", "accumulator"), ("0:dense", "output"),
                                                       ("1:dense", "accumulator"), ("1:dense", "output")]


def _rows_where(mask, at_least=2):
    rows = np.unique(np.argwhere(mask)[:, 0])
    assert len(rows) >= at_least, "the data should exercise the bug"
    return rows[:at_least].tolist()


@needs_iverilog
def test_bug_wrap_instead_of_sat(net, tmp_path):
    graph, xt = net
    cfg, x = config(16, "saturate"), xt[:16]
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    n, o = first_diff(acc_table(graph, kept, "0:dense", 16, "wrap"), traces["0:dense"]["acc"])
    s_sat = sequence(graph, kept, "0:dense", n, o, 16, "saturate")
    s_wrap = sequence(graph, kept, "0:dense", n, o, 16, "wrap")
    step = next(s for s in range(len(s_sat)) if s_sat[s] != s_wrap[s])
    export_and_simulate(graph, x, cfg, tmp_path, ["BUG_WRAP_INSTEAD_OF_SAT"])
    f = compare(tmp_path, tmp_path).first
    assert (f.node, f.role, f.index) == ("0:dense", "accumulator", (n, o))
    assert f.patterns[0] == "wrapped where saturation was expected"
    assert f.mac.step == step == f.mac.parting_step and "wrapping" in f.mac.rtl_matches
    assert "saturating" not in f.mac.rtl_matches


@needs_iverilog
def test_bug_acc_one_bit_narrow(net, tmp_path):
    graph, xt = net
    cfg, x = config(16, "saturate"), xt[:16]
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    n, o = first_diff(acc_table(graph, kept, "0:dense", 15, "saturate"), traces["0:dense"]["acc"])
    exact = sequence(graph, kept, "0:dense", n, o, 64, "saturate")
    step = next(s for s in range(len(exact)) if not -(1 << 14) <= exact[s] < (1 << 14))
    export_and_simulate(graph, x, cfg, tmp_path, ["BUG_ACC_ONE_BIT_NARROW"])
    f = compare(tmp_path, tmp_path).first
    assert (f.node, f.role, f.index) == ("0:dense", "accumulator", (n, o))
    assert "width off by one" in f.patterns[0] and "15 bits wide instead of 16" in f.patterns[0]
    assert f.mac.step == step


@needs_iverilog
def test_bug_swapped_weight_layout(net, tmp_path):
    graph, xt = net
    cfg, x = config(32, "wrap"), xt[:16]
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    w = graph.tensors["0:dense/weights"].data
    wt = w.reshape(-1).reshape(64, 16).T
    n, o = first_diff(acc_table(graph, kept, "0:dense", 32, "wrap", w=wt), traces["0:dense"]["acc"])
    xz = int(graph.tensors["input_codes"].zero_point[0])
    xo = kept["input_codes"][n].astype(np.int64) - xz
    k = next(k for k in range(64) if np.cumsum(xo * w[o])[k] != np.cumsum(xo * wt[o])[k])
    export_and_simulate(graph, x, cfg, tmp_path, ["BUG_SWAPPED_WEIGHT_LAYOUT"])
    f = compare(tmp_path, tmp_path).first
    assert (f.node, f.role, f.index) == ("0:dense", "accumulator", (n, o))
    assert f.patterns[0].startswith("weights transposed (read as [K][M]")
    assert f.mac.step == k + 1 and f.mac.rows[k + 1]["label"] == f"k={k}"


@needs_iverilog
@pytest.mark.parametrize("bug, variant, phrase", [
    ("BUG_ROUND_HALF_UP", "tie_up", "round-half-up vs half-away tie at the rounding shift"),
    ("BUG_SRDHM_FLOOR", "floor", "SRDHM divides by 2^31 with floor instead of truncation toward zero")])
def test_output_rounding_bugs(net, tmp_path, bug, variant, phrase):
    graph, xt = net
    cfg = config(32, "wrap")
    _, traces, kept = graph.run(xt, cfg, trace=True, keep=True)
    hits = _rows_where(outputs(graph, "1:dense", traces["1:dense"]["acc"], cfg, variant) != kept["1:dense"])
    x = xt[sorted(set(range(10)) | set(hits))]
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    expected = None
    for node in ("0:dense", "1:dense"):                     # dataflow order
        bad = outputs(graph, node, traces[node]["acc"], cfg, variant)
        if first_diff(bad, kept[node]):
            expected = (node, first_diff(bad, kept[node]), bad)
            break
    assert expected and expected[0] == "1:dense"           # node 0's ReLU clamps the negative cases away
    export_and_simulate(graph, x, cfg, tmp_path, [bug])
    f = compare(tmp_path, tmp_path).first
    assert (f.node, f.role, f.index) == ("1:dense", "output", expected[1])
    assert f.got == expected[2][expected[1]]
    assert f.patterns[0].startswith(phrase)
    assert f.mac.rtl_acc == f.mac.golden_acc                # the accumulator was right


@needs_iverilog
def test_bug_srdhm_no_sat(net, tmp_path, monkeypatch):
    """TFLite never makes an INT32_MIN multiplier from scales; an accelerator's own requantizer may: patch the
    graph's requantizer for node 0 to multiplier INT32_MIN with a left shift of 16, so that a saturated
    accumulator (-32768) reaches SRDHM's INT32_MIN x INT32_MIN corner."""
    from fxpsim.graph import mac_ops
    graph, xt = net
    original = mac_ops.requantizer_for

    def patched(g, node, dp):
        if node.name == "0:dense":
            return Requantizer("double", multiplier=(INT32_MIN,) * 16, shift=(16,) * 16)
        return original(g, node, dp)
    monkeypatch.setattr(mac_ops, "requantizer_for", patched)
    monkeypatch.setattr(fxpsim.graph.ops, "requantizer_for", patched)
    cfg = config(16, "saturate")
    _, traces, _ = graph.run(xt, cfg, trace=True, keep=True)
    hits = _rows_where(traces["0:dense"]["acc"] == -32768)
    x = xt[sorted(set(range(10)) | set(hits))]
    _, traces, kept = graph.run(x, cfg, trace=True, keep=True)
    n, o = first_diff(traces["0:dense"]["acc"] == -32768, np.zeros((len(x), 16), bool))
    assert mbqm_variant(-32768, INT32_MIN, 16, "nosat") != mbqm_variant(-32768, INT32_MIN, 16, None)
    assert kept["0:dense"][n, o] == 127                     # saturated SRDHM -> the clamp's maximum
    export_and_simulate(graph, x, cfg, tmp_path, ["BUG_SRDHM_NO_SAT"])
    f = compare(tmp_path, tmp_path).first
    assert (f.node, f.role, f.index, f.expected, f.got) == ("0:dense", "output", (n, o), 127, -128)
    assert f.patterns[0] == "SRDHM misses its INT32_MIN x INT32_MIN saturation"


# ----------------------------------------------------------------------------------------- convolutions
def _conv_graph(seed=0):
    """x[6,6,3] int8 -> conv 3x3 SAME (4 channels) -> depthwise 3x3 SAME stride 2 (multiplier 2)."""
    from fxpsim.graph import IntegerGraph, Node, TensorSpec
    rng = np.random.default_rng(seed)
    t = [TensorSpec("x", 8, True, (6, 6, 3), 0.02, -3),
         TensorSpec("c/w", 8, True, scale=rng.uniform(0.004, 0.01, 4), zero_point=np.zeros(4, np.int64), axis=0,
                    data=rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)),
         TensorSpec("c/b", 32, True, data=rng.integers(-300, 300, 4)),
         TensorSpec("c", 8, True, (6, 6, 4), 0.03, -128),
         TensorSpec("d/w", 8, True, scale=rng.uniform(0.004, 0.01, 8), zero_point=np.zeros(8, np.int64), axis=3,
                    data=rng.integers(-127, 128, (1, 3, 3, 8)).astype(np.int8)),
         TensorSpec("d/b", 32, True, data=rng.integers(-300, 300, 8)),
         TensorSpec("d", 8, True, (3, 3, 8), 0.05, 4)]
    n = [Node("conv", "conv2d", ["x", "c/w", "c/b"], ["c"], {"padding": "SAME", "activation": "relu"}),
         Node("dw", "depthwise_conv2d", ["c", "d/w", "d/b"], ["d"], {"padding": "SAME", "stride": 2})]
    return IntegerGraph(t, n, ["x"], ["d"], name="convs")


def _conv_sequence(x, w, b, xz, n, h, ww, o, bits, mode, wt=None):
    """Running sums of conv output (n, h, w, o), taps (i, j, c) row-major, padded taps skipped as zeros."""
    w = w if wt is None else wt
    s = [b]
    for i in range(3):
        for j in range(3):
            for c in range(w.shape[3]):
                hh, wv = h + i - 1, ww + j - 1
                xv = int(x[n, hh, wv, c]) - xz if 0 <= hh < 6 and 0 <= wv < 6 else 0
                s.append(fit(s[-1] + xv * int(w[o, i, j, c]), bits, mode))
    return s


@pytest.mark.parametrize("bug", ["wrap", "transposed"])
def test_conv_accumulator_patterns_and_steps(tmp_path, bug):
    g = _conv_graph()
    x = np.random.default_rng(1).integers(-128, 128, (3, 6, 6, 3)).astype(np.int8)
    dp = fxpsim.graph.ir.Datapath(accumulator_bits=12, accumulator_overflow="saturate", bias_add="preload")
    export_vectors(g, tmp_path / "g", x, dp, formats=("npy",))
    _, traces, _ = g.run(x, dp, trace=True, keep=True)
    w, b = g.tensors["c/w"].data, g.tensors["c/b"].data
    wt = w.reshape(-1).reshape(3, 3, 3, 4).transpose(3, 0, 1, 2) if bug == "transposed" else None
    mode = "wrap" if bug == "wrap" else "saturate"
    bad = np.array([[[[_conv_sequence(x, w, int(b[o]), -3, n, h, ww, o, 12, mode, wt)[-1] for o in range(4)]
                      for ww in range(6)] for h in range(6)] for n in range(3)], dtype=np.int64)
    golden = traces["conv"]["acc"]
    assert np.array_equal(np.array([[[[_conv_sequence(x, w, int(b[o]), -3, n, h, ww, o, 12, "saturate")[-1]
                                       for o in range(4)] for ww in range(6)] for h in range(6)] for n in range(3)]),
                          golden)
    idx = first_diff(bad, golden)
    good_s = _conv_sequence(x, w, int(b[idx[3]]), -3, *idx, 12, "saturate")
    bad_s = _conv_sequence(x, w, int(b[idx[3]]), -3, *idx, 12, mode, wt)
    step = next(s for s in range(len(good_s)) if good_s[s] != bad_s[s])
    dump = tmp_path / "dump" / "00_conv"
    dump.mkdir(parents=True)
    write_mem(dump / "accumulator.hex", bad, 12, True)
    y = np.load(tmp_path / "g" / "01_dw" / "output.npy")
    (tmp_path / "dump" / "01_dw").mkdir()
    write_mem(tmp_path / "dump" / "01_dw" / "output.hex", y.transpose(0, 3, 1, 2).reshape(y.shape), 8, True)
    res = compare(tmp_path / "g", tmp_path / "dump")
    f = res.first
    assert (f.node, f.role, f.index, f.index_text[:5]) == ("conv", "accumulator", idx, "(n=0,")
    assert f.patterns[0] == ("wrapped where saturation was expected" if bug == "wrap" else
                             "weights transposed (read as HWIO instead of OHWI)")
    assert f.mac.step == step and "(i,j,c)=" in f.mac.rows[step]["label"]
    assert res.tensors[1].patterns == ["layout swap: the dump is NCHW, not NHWC"]
