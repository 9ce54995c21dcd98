r"""A cocotb driver and scoreboard for one node of the golden vectors (:func:`fxpsim.rtl.export_vectors`).

:func:`check_node` is a cocotb coroutine: it holds the node's scalars on their signals, resets the DUT, feeds
every input stream (input codes, weights, bias, multiplier, shift) over valid/ready, takes every output stream
(output, accumulator, MAC trace) and checks each word the moment it arrives (:class:`~fxpsim.rtl.scoreboard.
Scoreboard`).  At the first word that differs it raises :class:`~fxpsim.rtl.scoreboard.StreamMismatch`, an
``AssertionError`` whose text is ``fxpsim compare``'s report: node, element, expected and received words, the
pattern, the MAC sequence.  The port convention and the names are :class:`~fxpsim.rtl.scoreboard.StreamPorts`'s
(default: ``examples/rtl/dense_stream.v``).

Timing: one coroutine runs the bench cycle by cycle.  Right after a rising edge it reads the handshakes as they
were at that edge (a word moved where ``valid`` and ``ready`` were both 1), then drives the next words and
``ready`` values, which the DUT sees at the next edge.  ``stall`` (0 .. 1) makes each source hold ``valid`` low
and each sink hold ``ready`` low in a cycle with that probability (seeded: ``seed``), to exercise the DUT's
handshakes; ``max_idle`` cycles without a word moving end the run with a timeout (a
:class:`~fxpsim.rtl.scoreboard.ScoreboardError` that counts the words moved on every stream).

:func:`simulate_node` builds and runs a design with cocotb's runner (Icarus Verilog, Verilator, ...) on the
bundled test :func:`fxpsim_check_node` and returns the report.  cocotb >= 1.8 is an optional dependency
(``pip install -e ".[test]"``), imported by this module only.
"""
from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
from pathlib import Path

try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import RisingEdge
    from cocotb.utils import get_sim_time
except ImportError as exc:                  # pragma: no cover - depends on the environment
    raise ImportError('fxpsim.rtl.cocotb_bench needs cocotb >= 1.8: pip install -e ".[test]" '
                      f"(or pip install 'cocotb>=1.8') ({exc})") from None

from .scoreboard import Scoreboard, ScoreboardError, StreamMismatch, StreamPorts

__all__ = ["check_node", "simulate_node", "BenchResult"]      # fxpsim_check_node: the bundled test, not for import *

ENV_PREFIX = "FXPSIM_BENCH_"
REPORT_TEXT, REPORT_JSON = "compare.txt", "compare.json"


def _signal(dut, name: str, what: str):
    try:
        return getattr(dut, name)
    except AttributeError:
        raise ValueError(f"the DUT {dut._name!r} has no signal {name!r} ({what}); name it in StreamPorts") from None


def _write_report(report_dir, text: str, data: dict) -> None:
    if report_dir is None:
        return
    os.makedirs(report_dir, exist_ok=True)
    Path(report_dir, REPORT_TEXT).write_text(text, encoding="utf-8")
    Path(report_dir, REPORT_JSON).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


async def check_node(dut, golden_dir, node: str, ports: StreamPorts | None = None, *, clock_ns: float = 10,
                     start_clock: bool = True, reset_cycles: int = 3, stall: float = 0.0, seed: int = 0,
                     max_idle: int = 10_000, report_dir=None):
    """Drive node ``node`` of ``golden_dir`` into ``dut`` and check its outputs (see the module docstring).

    Returns the final :class:`~fxpsim.rtl.compare.CompareResult` (a match); raises ``StreamMismatch`` at the
    first differing word, ``ScoreboardError`` for a protocol error (undefined value, a word too many, a timeout).
    ``report_dir``: write the report there as ``compare.txt`` and ``compare.json`` (also on failure).
    """
    try:
        result, cycles = await _run(dut, golden_dir, node, ports, clock_ns, start_clock, reset_cycles, stall, seed,
                                    max_idle)
    except StreamMismatch as exc:
        _write_report(report_dir, str(exc), exc.result.to_dict())
        raise
    except (ScoreboardError, ValueError, TypeError) as exc:
        _write_report(report_dir, f"fxpsim bench: error: {exc}\n", {"ok": False, "error": str(exc)})
        raise
    _write_report(report_dir, result.to_text(), result.to_dict())
    dut._log.info("fxpsim: node %r matches the golden vectors (%d cycles)", node, cycles)
    return result


async def _run(dut, golden_dir, node, ports, clock_ns, start_clock, reset_cycles, stall, seed, max_idle):
    if not 0.0 <= float(stall) < 1.0:
        raise ValueError(f"check_node: stall must be in [0, 1), got {stall!r}")
    sb = Scoreboard(golden_dir, node, ports)
    p = sb.ports
    clk = _signal(dut, p.clock, "clock")
    if start_clock:
        cocotb.start_soon(Clock(clk, clock_ns, "ns").start())
    src = {r: (s, _signal(dut, s.data, f"{r} data"), _signal(dut, s.valid, f"{r} valid"),
               _signal(dut, s.ready, f"{r} ready") if s.ready else None) for r, s in p.inputs.items()}
    words = {r: sb.words(r, len(h[1])) for r, h in src.items()}
    sinks = {v: (roles, {r: _signal(dut, p.outputs[r].data, f"{r} data") for r in roles},
                 _signal(dut, v, f"{roles[0]} valid"),
                 _signal(dut, p.outputs[roles[0]].ready, f"{roles[0]} ready") if p.outputs[roles[0]].ready else None)
             for v, roles in p.groups().items()}
    for sig, value in sb.scalars.items():
        h = _signal(dut, sig, "scalar")
        h.value = value & ((1 << len(h)) - 1)
    for _, _, valid, _ in src.values():
        valid.value = 0
    for _, _, _, ready in sinks.values():
        if ready is not None:
            ready.value = 0
    rst = _signal(dut, p.reset, "reset") if p.reset else None
    if rst is not None:
        rst.value = p.reset_active
        for _ in range(reset_cycles):
            await RisingEdge(clk)
        rst.value = 1 - p.reset_active
    rng = random.Random(seed)
    pos = dict.fromkeys(src, 0)
    holding = dict.fromkeys(src, False)
    ready_now = dict.fromkeys(sinks, 0)
    cycle = idle = 0
    while not sb.done:
        for r, (_, data, valid, _) in src.items():
            if not holding[r] and pos[r] < len(words[r]) and rng.random() >= stall:
                data.value = words[r][pos[r]]
                holding[r] = True
            valid.value = int(holding[r])
        for v, (_, _, _, ready) in sinks.items():
            ready_now[v] = int(rng.random() >= stall)
            if ready is not None:
                ready.value = ready_now[v]
        await RisingEdge(clk)
        cycle += 1
        when = f"cycle {cycle}, {get_sim_time('ns'):g} ns"
        moved = False
        for r, (_, _, _, ready) in src.items():
            if holding[r] and (ready is None or _bit(ready)):
                pos[r] += 1
                holding[r], moved = False, True
        for v, (roles, datas, valid, ready) in sinks.items():
            if _bit(valid) and (ready is None or ready_now[v]):
                beat = {}
                for r in roles:
                    try:
                        beat[r] = (int(datas[r].value), len(datas[r]))
                    except ValueError:
                        sb.undefined(r, str(datas[r].value), when)
                sb.receive(beat, when)
                moved = True
        idle = 0 if moved else idle + 1
        if idle > max_idle:
            sent = ", ".join(f"{p.inputs[r].data} {pos[r]}/{len(words[r])}" for r in src)
            got = ", ".join(f"{p.outputs[r].data} {sb.seen[r]}/{sb.beats(r)}" for r in p.outputs)
            raise ScoreboardError(f"node {node!r}: timeout, no word moved for {max_idle} cycles ({when}); "
                                  f"words sent: {sent}; received: {got}")
    return sb.finish(), cycle


def _bit(handle) -> int:
    try:
        return int(handle.value)
    except ValueError:
        raise ScoreboardError(f"handshake signal {handle._name!r} is undefined ({handle.value}) after reset") from None


# ----------------------------------------------------------------------------------------- runner
@cocotb.test()
async def fxpsim_check_node(dut):
    """The bundled cocotb test: :func:`check_node` configured by ``FXPSIM_BENCH_*`` environment variables
    (what :func:`simulate_node` sets): ``GOLDEN``, ``NODE``, ``PORTS`` (``StreamPorts.to_json``), ``REPORT``,
    ``STALL``, ``SEED``, ``CLOCK_NS``, ``MAX_IDLE``."""
    env = lambda k, d=None: os.environ.get(ENV_PREFIX + k, d)  # noqa: E731
    ports = StreamPorts.from_json(env("PORTS")) if env("PORTS") else None
    await check_node(dut, env("GOLDEN"), env("NODE"), ports, stall=float(env("STALL", "0")),
                     seed=int(env("SEED", "0")), clock_ns=float(env("CLOCK_NS", "10")),
                     max_idle=int(env("MAX_IDLE", "10000")), report_dir=env("REPORT"))


class BenchResult:
    """What :func:`simulate_node` found: :attr:`ok`, :attr:`text` (the report), :attr:`report` (its JSON form),
    :attr:`results_xml`."""

    def __init__(self, ok: bool, text: str, report: dict, results_xml):
        self.ok, self.text, self.report, self.results_xml = ok, text, report, results_xml

    def __repr__(self) -> str:
        return f"BenchResult({'match' if self.ok else 'FAIL'})"


def _runner(simulator: str):
    try:
        from cocotb_tools.runner import get_runner          # cocotb >= 2.0
    except ImportError:                                      # pragma: no cover - cocotb 1.8/1.9
        from cocotb.runner import get_runner
    return get_runner(simulator)


def simulate_node(golden_dir, node: str, sources, toplevel: str, *, simulator: str = "icarus",
                  parameters=None, defines=None, ports: StreamPorts | None = None, build_dir="sim_build",
                  stall: float = 0.0, seed: int = 0, clock_ns: float = 10, max_idle: int = 10_000,
                  waves: bool = False) -> BenchResult:
    """Build ``sources`` (HDL files) with ``toplevel`` on ``simulator`` and run :func:`fxpsim_check_node` on node
    ``node`` of ``golden_dir``; the report lands in ``build_dir/fxpsim_report/``.

    ``parameters``: the top level's HDL parameters (for dense_stream: :func:`~fxpsim.rtl.scoreboard.
    dense_parameters`); ``defines``: ``{NAME: value}`` preprocessor defines.
    """
    golden_dir = os.path.abspath(os.fspath(golden_dir))
    build_dir = Path(build_dir).absolute()
    report_dir = build_dir / "fxpsim_report"
    for f in (REPORT_TEXT, REPORT_JSON):
        if (report_dir / f).exists():
            (report_dir / f).unlink()
    runner = _runner(simulator)
    try:
        files = "sources" if "sources" in inspect.signature(runner.build).parameters else "verilog_sources"
        runner.build(**{files: [os.fspath(s) for s in sources]}, hdl_toplevel=toplevel,
                     parameters=dict(parameters or {}), defines=dict(defines or {}), build_dir=build_dir, always=True,
                     waves=waves)
    except (SystemExit, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"{simulator} could not build {toplevel} from {', '.join(map(str, sources))} "
                           f"({exc!r}); see the simulator's output above") from None
    env = {"GOLDEN": golden_dir, "NODE": node, "REPORT": str(report_dir), "STALL": repr(float(stall)),
           "SEED": str(int(seed)), "CLOCK_NS": repr(float(clock_ns)), "MAX_IDLE": str(int(max_idle))}
    if ports is not None:
        env["PORTS"] = ports.to_json()
    xml, status = build_dir / "results.xml", 0
    try:        # under pytest, cocotb's runner exits (SystemExit) when a test failed: the report says why
        xml = runner.test(test_module="fxpsim.rtl.cocotb_bench", hdl_toplevel=toplevel, build_dir=build_dir,
                          test_dir=build_dir, extra_env={ENV_PREFIX + k: v for k, v in env.items()},
                          testcase="fxpsim_check_node", waves=waves)
    except SystemExit as exc:
        status = exc.code
    if not (report_dir / REPORT_JSON).exists():
        raise RuntimeError(f"the simulation wrote no report ({report_dir}, exit status {status}); see the "
                           "simulator's output above")
    report = json.loads((report_dir / REPORT_JSON).read_text(encoding="utf-8"))
    return BenchResult(bool(report.get("ok")), (report_dir / REPORT_TEXT).read_text(encoding="utf-8"), report, xml)
