"""fxpsim.rtl.scoreboard without a simulator: the words it drives are the golden files' codes, the golden words
fed back match, a planted wrong word fails at once with compare's locator (node, element, pattern), protocol
errors and bad port descriptions are reported; compare_arrays' own checks."""
from __future__ import annotations

import numpy as np
import pytest

import fxpsim
from fxpsim import nn, train
from fxpsim.rtl.compare import compare_arrays
from fxpsim.rtl.layout import Layout
from fxpsim.rtl.scoreboard import (Scoreboard, ScoreboardError, Stream, StreamMismatch, StreamPorts,
                                   dense_parameters)
from fxpsim.rtl.vectors import export_vectors

N = 4


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    x, y = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 16, 10), seed=0)
    train.fit(model, (x, y), epochs=1, progress=False)
    cfg = fxpsim.preset("int8-acc16-sat").replace(requantization="tflite-double", accumulator_bits=16,
                                                  accumulator_overflow="saturate", bias_add="preload")
    graph = fxpsim.convert(model, cfg, x[:300])
    xt, _ = fxpsim.load_digits("test", flatten=True)
    d = tmp_path_factory.mktemp("golden")
    export_vectors(graph, d, xt[:N], cfg, mac_trace={"node": "0:dense", "outputs": [1, 20]})
    return d


def npy(d, role, node_dir="01_0_dense"):
    return np.load(d / node_dir / f"{role}.npy").astype(np.int64)


def feed(sb, role, values, width):
    """Send every value as its own beat (unsigned raw value at the signal's width)."""
    for i, v in enumerate(values):
        sb.receive({role: (int(v) & ((1 << width) - 1), width)}, when=f"cycle {i}")


def test_drives_the_golden_codes_at_the_signal_width(golden):
    sb = Scoreboard(golden, "0:dense")
    assert sb.words("input", 8) == [v & 0xff for v in npy(golden, "input").reshape(-1).tolist()]
    assert sb.words("bias", 32) == [v & 0xffffffff for v in npy(golden, "bias").tolist()]
    assert sb.words("weights", 8) == [v & 0xff for v in npy(golden, "weights").reshape(-1).tolist()]
    assert sb.scalars["x_zp"] == json_mac(golden)["x_zp"] and set(sb.scalars) == {"x_zp", "out_zp", "act_min",
                                                                                  "act_max"}
    with pytest.raises(ValueError, match="does not fit the 4-bit signal x_data"):
        sb.words("input", 4)
    assert dense_parameters(golden, "0:dense") == {"K": 64, "M": 16, "ACC_BITS": 16, "SATURATE": 1, "BIAS_PRELOAD": 1}


def json_mac(d):
    import json
    return next(n for n in json.load(open(d / "manifest.json"))["nodes"] if n["name"] == "0:dense")["mac"]


def test_golden_words_fed_back_match(golden):
    sb = Scoreboard(golden, "0:dense")
    acc, y, tr = npy(golden, "accumulator"), npy(golden, "output"), npy(golden, "mac_trace")
    assert sb.beats("output") == N * 16 and sb.beats("mac_trace") == N * 16 * tr.shape[1]
    trace = np.zeros((N * 16, tr.shape[1]), np.int64)        # the DUT traces every output; two are checked
    trace[[1, 20]] = tr
    feed(sb, "mac_trace", trace.reshape(-1), 16)
    for i in range(N * 16):
        sb.receive({"accumulator": (int(acc.reshape(-1)[i]) & 0xffff, 16),
                    "output": (int(y.reshape(-1)[i]) & 0xff, 8)})
    assert sb.done
    res = sb.finish()
    assert res.ok and [t.role for t in res.tensors] == ["mac_trace", "accumulator", "output"]
    assert [t.total for t in res.tensors] == [tr.size, acc.size, y.size]
    with pytest.raises(ScoreboardError, match="y_data sent word 65 .* the output stream has 64 words"):
        sb.receive({"output": (0, 8)}, when="cycle 99")


def test_first_wrong_word_fails_at_once_with_the_locator(golden):
    ports = StreamPorts(outputs={"output": "y", "accumulator": Stream("y_acc", "y_valid", "y_ready")})
    sb = Scoreboard(golden, "0:dense", ports)
    acc, y = npy(golden, "accumulator").reshape(-1), npy(golden, "output").reshape(-1)
    bad = 1 * 16 + 3                                          # element (n=1, m=3)
    for i in range(bad):
        sb.receive({"accumulator": (int(acc[i]) & 0xffff, 16), "output": (int(y[i]) & 0xff, 8)})
    with pytest.raises(StreamMismatch) as exc:
        sb.receive({"accumulator": (int(acc[bad]) & 0xffff, 16), "output": ((int(y[bad]) + 1) & 0xff, 8)},
                   when="cycle 77, 770 ns")
    f = exc.value.result.first
    assert (f.node, f.role, f.index, f.got - f.expected) == ("0:dense", "output", (1, 3), 1)
    text = str(exc.value)
    assert "First mismatch (dataflow order): node #1 '0:dense'" in text and "element (n=1, m=3)" in text
    assert "y_data (word 19 at cycle 77, 770 ns)" in text
    assert [t.total for t in exc.value.result.tensors] == [bad + 1, bad + 1]   # only what was received


def test_a_wrong_accumulator_comes_first_in_the_same_beat(golden):
    ports = StreamPorts(outputs={"output": "y", "accumulator": Stream("y_acc", "y_valid", "y_ready")})
    sb = Scoreboard(golden, "0:dense", ports)
    acc, y = npy(golden, "accumulator").reshape(-1), npy(golden, "output").reshape(-1)
    with pytest.raises(StreamMismatch) as exc:
        sb.receive({"output": ((int(y[0]) + 3) & 0xff, 8), "accumulator": ((int(acc[0]) - 5) & 0xffff, 16)})
    assert exc.value.result.first.role == "accumulator" and exc.value.result.first.difference == -5


def test_packed_output_words_locate_the_lane(golden):
    ports = StreamPorts(outputs={"output": Stream("y_data", "y_valid", "y_ready", Layout(pack=4, endian="big"))})
    sb = Scoreboard(golden, "0:dense", ports)
    y = npy(golden, "output").reshape(-1).copy()
    assert sb.beats("output") == N * 16 // 4
    y[6] ^= 0x10                                              # word 1, lane 2 (big-endian: bits 15..8)
    lay = Layout(pack=4, endian="big")
    sb.receive({"output": (lay.join(y[0:4], 8), 32)})
    with pytest.raises(StreamMismatch) as exc:
        sb.receive({"output": (lay.join(y[4:8], 8), 32)})
    f = exc.value.result.first
    assert f.index == (0, 6) and "bit 4 differs in every mismatch" in f.pattern


def test_protocol_errors(golden):
    sb = Scoreboard(golden, "0:dense", StreamPorts(outputs={"output": "y"}))
    feed(sb, "output", npy(golden, "output").reshape(-1)[:3], 8)
    with pytest.raises(ScoreboardError, match=r"stopped early: y_data: 3 of 64 words"):
        sb.finish()
    with pytest.raises(ScoreboardError, match=r"undefined value 'xxxxxxxx' .* y_data, word 3 at cycle 9, where output "
                                              r"element \(0, 3\) = -?\d+ was expected"):
        sb.undefined("output", "xxxxxxxx", "cycle 9")
    with pytest.raises(ScoreboardError, match="no word received"):
        Scoreboard(golden, "0:dense").result()


@pytest.mark.parametrize("make, error, message", [
    (lambda: StreamPorts(inputs={"activations": "x"}), ValueError, "unknown inputs role 'activations'"),
    (lambda: StreamPorts(outputs={"output": 3}), TypeError, r"outputs\['output'\] must be a Stream"),
    (lambda: StreamPorts(outputs={"output": Stream("a", "v", "r1"), "accumulator": Stream("b", "v", "r2")}),
     ValueError, "sharing valid 'v' must share one ready"),
    (lambda: StreamPorts(outputs={}), ValueError, "no output stream"),
    (lambda: StreamPorts(reset_active=2), ValueError, "reset_active must be 1"),
    (lambda: Stream("d", ""), TypeError, "valid must be a signal name"),
    (lambda: Stream("d", "v", layout="pack=4"), TypeError, "layout must be a fxpsim.rtl.layout.Layout"),
])
def test_bad_port_descriptions(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_ports_and_golden_must_agree(golden):
    with pytest.raises(ValueError, match=r"no node 'dense9' .*nodes: quantize, 0:dense, 1:dense\)"):
        Scoreboard(golden, "dense9")
    with pytest.raises(ValueError, match=r"node '1:dense' has no golden 'mac_trace' tensor \(export it with mac_trace"):
        Scoreboard(golden, "1:dense")
    with pytest.raises(ValueError, match=r"no scalar 'zp' in its manifest entry \(integer fields: K, out_channels"):
        Scoreboard(golden, "0:dense", StreamPorts(scalars={"zp": "zp"}))
    with pytest.raises(TypeError, match="ports must be a StreamPorts"):
        Scoreboard(golden, "0:dense", {"output": "y"})
    with pytest.raises(ValueError, match="dense_pe cannot run it"):
        dense_parameters(golden, "quantize")


def test_ports_round_trip_through_json():
    ports = StreamPorts(inputs={"input": Stream("a", "b", None, Layout(pack=4, tiles={"k": 16}))},
                        outputs={"output": "y"}, scalars={"x_zp": "zp"}, clock="aclk", reset="aresetn",
                        reset_active=0)
    assert StreamPorts.from_json(ports.to_json()) == ports


def test_compare_arrays_checks_its_arguments(golden):
    y = npy(golden, "output")
    assert compare_arrays(golden, {"0:dense/output": y}).ok
    with pytest.raises(ValueError, match=r"'0:dense/output' must be an integer array of shape \(4, 16\)"):
        compare_arrays(golden, {"0:dense/output": y[:2]})
    with pytest.raises(ValueError, match="must be a bool array"):
        compare_arrays(golden, {"0:dense/output": y}, known={"0:dense/output": np.ones(y.shape)})
    with pytest.raises(ValueError, match="known/labels name tensors not in arrays"):
        compare_arrays(golden, {"0:dense/output": y}, labels={"0:dense/accumulator": "x"})
    with pytest.raises(ValueError, match="unknown tensor '0:dense/nothing'"):
        compare_arrays(golden, {"0:dense/nothing": y})
    with pytest.raises(ValueError, match="no arrays given"):
        compare_arrays(golden, {})
    z = y.copy()
    z[2, 5] += 1
    known = np.zeros(y.shape, bool)
    known[:2] = True
    assert compare_arrays(golden, {"0:dense/output": z}, known={"0:dense/output": known}).ok   # not produced yet
    known[2, 5] = True
    res = compare_arrays(golden, {"0:dense/output": z}, known={"0:dense/output": known})
    assert res.first.index == (2, 5) and res.tensors[0].total == 33


def test_the_cocotb_bench_names_the_extra_when_cocotb_is_missing(monkeypatch):
    import importlib
    import sys
    monkeypatch.setitem(sys.modules, "cocotb", None)                  # import cocotb -> ImportError
    monkeypatch.delitem(sys.modules, "fxpsim.rtl.cocotb_bench", raising=False)
    with pytest.raises(ImportError, match=r'needs cocotb >= 1.8: pip install -e "\.\[test\]"'):
        importlib.import_module("fxpsim.rtl.cocotb_bench")
    monkeypatch.delitem(sys.modules, "fxpsim.rtl.cocotb_bench", raising=False)
