"""fxpsim.rtl.vcd: VCD dumps read back — against Icarus Verilog's own sampling of a stalling stream, against an
independent writer of random traces (hypothesis), and bad files."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fxpsim.rtl.vcd import read_vcd

needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                    reason="iverilog not installed (apt-get install iverilog)")

# A source that offers the words 3*i+1 (16 bits, i = 0..N-1) with valid dropping on an LFSR, a sink whose ready
# drops on another; tlast on every 7th word. The bench logs each transfer as the simulator sees it at the edge.
BENCH = r"""
`timescale 1ns/1ps
module tb;
  reg clk = 0, rst = 1;
  reg [15:0] lfsr = 16'hACE1, lfsr2 = 16'h1D0F;
  reg [15:0] data; reg valid, last; reg ready;
  integer i = 0, fd;
  always #5 clk = ~clk;
  always @(posedge clk) begin
    lfsr <= {lfsr[14:0], lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]};
    lfsr2 <= {lfsr2[14:0], lfsr2[15] ^ lfsr2[13] ^ lfsr2[12] ^ lfsr2[10]};
    if (!rst) begin
      if (valid && ready) begin
        $fdisplay(fd, "%0d %0d", data, last);
        i = i + 1;
      end
      ready <= lfsr2[3] | lfsr2[7];
      if (!valid || ready) begin
        valid <= (i < NWORDS) && lfsr[2];
        data <= 3 * (i + (valid && ready ? 0 : 0)) + 1;
      end
    end
  end
  // data/last follow the index of the next word to send
  always @(*) last = ((data - 1) / 3) % 7 == 6;
  initial begin
    fd = $fopen(LOG, "w");
    $dumpfile(DUMP); $dumpvars(0, tb);
    valid = 0; ready = 0; data = 1;
    #22 rst = 0;
    #(NWORDS * 80) $fclose(fd); $finish;
  end
endmodule
"""


@needs_iverilog
def test_stream_beats_match_the_simulators_own_sampling(tmp_path):
    n = 60
    src = BENCH.replace("NWORDS", str(n)).replace("LOG", f'"{tmp_path}/log.txt"').replace("DUMP", f'"{tmp_path}/d.vcd"')
    (tmp_path / "tb.v").write_text(src)
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "tb.vvp"), str(tmp_path / "tb.v")], check=True)
    subprocess.run(["vvp", "-n", str(tmp_path / "tb.vvp")], check=True, capture_output=True, cwd=tmp_path)
    log = [tuple(map(int, line.split())) for line in (tmp_path / "log.txt").read_text().split("\n") if line]
    assert len(log) >= 20, "the bench transferred too few words to test anything"
    vcd = read_vcd(tmp_path / "d.vcd", signals=["clk", "tb.data", "valid", "ready", "last"])
    assert vcd.timescale == "1ps"
    packets = vcd.beats("clk", "data", "valid", "ready", last="last")
    words = np.concatenate(packets).tolist()
    assert words == [d for d, _ in log]
    ends = np.cumsum([len(p) for p in packets]).tolist()
    assert [i + 1 for i, (_, last) in enumerate(log) if last] == ends[:len([1 for _, la in log if la])]
    # no ready: every valid edge is a beat, at least as many as the transfers
    assert len(vcd.beats("clk", "data", "valid")[0]) >= len(log)


def _write_vcd(traces: dict, widths: dict) -> str:
    """An independent writer: traces name -> list of (time, value or None), times increasing."""
    codes = {name: chr(33 + i) for i, name in enumerate(traces)}
    out = ["$timescale 1ns $end", "$scope module top $end"]
    out += [f"$var wire {widths[n]} {codes[n]} {n} $end" for n in traces]
    out += ["$upscope $end", "$enddefinitions $end"]
    events = sorted((t, k, n, v) for n, tr in traces.items() for k, (t, v) in enumerate(tr))
    last_t = None
    for t, _, n, v in events:
        if t != last_t:
            out.append(f"#{t}")
            last_t = t
        w = widths[n]
        if w == 1:
            out.append(("x" if v is None else str(v)) + codes[n])
        else:
            out.append("b" + ("x" * w if v is None else format(v, "b")) + " " + codes[n])
    return "\n".join(out) + "\n"


@st.composite
def _traces(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True))
    widths = {n: draw(st.integers(1, 40)) for n in names}
    traces = {}
    for n in names:
        times = sorted(draw(st.sets(st.integers(0, 200), min_size=1, max_size=12)))
        vals = [draw(st.one_of(st.none(), st.integers(0, (1 << widths[n]) - 1))) for _ in times]
        traces[n] = list(zip(times, vals))
    return traces, widths


@settings(deadline=None)
@given(_traces(), st.integers(-1, 210))
def test_values_before_a_time_match_the_written_trace(tmp_path_factory, tw, t):
    traces, widths = tw
    p = tmp_path_factory.mktemp("vcd") / "t.vcd"
    p.write_text(_write_vcd(traces, widths))
    vcd = read_vcd(p)
    for n, tr in traces.items():
        times, values = vcd.changes(f"top.{n}")
        assert times.tolist() == [a for a, _ in tr] and values == [b for _, b in tr]
        before = [v for a, v in tr if a < t]
        assert vcd.value_before(n, t) == (before[-1] if before else None)
        assert vcd.signal(n).width == widths[n]


def test_signed_and_suffix_names(tmp_path):
    p = tmp_path / "s.vcd"
    p.write_text("$scope module tb $end $scope module dut $end $var wire 8 ! y [7:0] $end $upscope $end\n"
                 "$var wire 1 \" y $end $upscope $end $enddefinitions $end\n#0 $dumpvars b11111110 ! 0\" $end\n"
                 "#10 b1 !\n#20 $dumpoff bxxxxxxxx ! x\" $end #30 $dumpon b101 ! 1\" $end\n")
    vcd = read_vcd(p)
    assert vcd.changes("dut.y")[1] == [254, 1, None, 5]
    assert vcd.signed(254, 8) == -2 and vcd.signed(5, 8) == 5
    with pytest.raises(ValueError, match="ambiguous"):
        vcd.signal("y")
    assert vcd.end_time == 30


@pytest.mark.parametrize("text, word", [
    ("", "no \\$enddefinitions"),
    ("$var wire 8 ! y $end $enddefinitions $end #0 b1111111111 !\n", "10 digits for the 8-bit"),
    ("$var wire 8 ! y $end $enddefinitions $end #5 b1 ! #3 b0 !\n", "time goes backwards"),
    ("$var wire 8 ! y $end $enddefinitions $end #0 b1 ?\n", "undeclared id"),
    ("$var wire 8 ! y $end $enddefinitions $end #0 b12 !\n", "bad vector value"),
    ("$var wire 99999999 ! y $end $enddefinitions $end\n", "\\$var needs"),
    ("$scope module a $end $var wire 1 ! y $end\n", "no \\$enddefinitions"),
    ("$var wire 1 ! y $end $enddefinitions $end #0 q!\n", "unexpected"),
])
def test_bad_files_name_the_line(tmp_path, text, word):
    p = tmp_path / "bad.vcd"
    p.write_text(text)
    with pytest.raises(ValueError, match=word):
        read_vcd(p)


def test_change_cap_and_undefined_beats(tmp_path):
    p = tmp_path / "c.vcd"
    body = "".join(f"#{10 * i} 1! #{10 * i + 5} 0!\n" for i in range(50))
    p.write_text("$var wire 1 ! clk $end $var wire 1 \" v $end $var wire 4 # d $end $enddefinitions $end\n"
                 "#0 x\" bxxxx #\n" + body)
    with pytest.raises(ValueError, match="more than 10 value changes"):
        read_vcd(p, max_changes=10)
    vcd = read_vcd(p)
    with pytest.raises(ValueError, match="undefined"):
        vcd.beats("clk", "d", "v")
    with pytest.raises(ValueError, match="no signal 'nope'"):
        vcd.signal("nope")
    (tmp_path / "bin.vcd").write_bytes(b"\xff\xfe$var")
    with pytest.raises(ValueError, match="non-ASCII"):
        read_vcd(tmp_path / "bin.vcd")
    with pytest.raises(ValueError, match="cannot read"):
        read_vcd(tmp_path / "missing.vcd")
