"""Benchmark of the per-node accumulator sweep (fxpsim.hardware.width_sweep).

For each model: one exact inference (``graph.run(x)`` on the graph's datapath: the target's unit; the
faster of BLAS on all cores or on one), the
sweep of every MAC node over widths 8..32 and saturate/wrap (``node_sweep``), and the same numbers by the
plain loop it replaces (``run_node`` at every node x width x mode, fed the exact tensors) -- all on the same
batch, best of N (the machine is shared: other work runs, and the minimum is the least disturbed figure).
Columns: seconds, sweep / inference (target < 3), loop / sweep, and the sweep's peak extra memory over
the bytes of the graph's tensors on the batch, constants included (a subprocess, ``bench_memory.measure``,
after a warm-up sweep of two inputs so that imports and first-call buffers are not counted).  Inference and
sweep are measured interleaved in the same run (best of ``--repeat``).  Then the full-network sweep
(``fxpsim.sweep`` over accumulator_bits 8..32 x saturate/wrap in one process) with ``skip_exact`` (the default:
points at which every node is provably exact reuse the widest point's run; at the others, a node fed the exact
tensors and provably exact at its width takes the exact run's outputs) and without, the exact inference beside.

Models: the demo CNN (``fxpsim.cli.demo_model(epochs=3)`` converted for ``tflite-int8``, digits test set)
and the imported MobileNetV2 0.35 48x48 (``benchmarks/models``, random int8 images).
Run:  python benchmarks/bench_sweep.py [--quick] [--models demo,mobilenet] [--loop-widths 8,16,24,32] [--repeat N] [--no-loop] [--no-memory] [--no-full]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # one thread (before numpy)
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_memory import measure  # noqa: E402

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "mobilenet_v2_035_48.tflite")

SETUP = {
    "demo": """
import numpy as np, fxpsim
from fxpsim.cli import demo_model
from fxpsim.nn.datasets import load_digits
model, _ = demo_model(epochs=3)
x = load_digits("test", seed=0)[0]
graph = fxpsim.convert(model, "tflite-int8", load_digits("train", seed=0)[0][:500])
""",
    "mobilenet": f"""
import numpy as np, fxpsim
graph = fxpsim.import_model({MODEL!r})
x = np.random.default_rng(0).integers(-128, 128, (BATCH, 48, 48, 3), dtype=np.int8)
""",
}


#: The clock of every figure: this process's CPU seconds (its threads together; BLAS and OpenMP on one thread
#: here). On a shared machine wall time mostly measures the other work; ``--wall`` switches to it.
CLOCK = time.process_time


def best_time(fn, repeat=5, budget=20.0):
    best, spent = float("inf"), 0.0
    for _ in range(repeat):
        t = CLOCK()
        fn()
        dt = CLOCK() - t
        best, spent = min(best, dt), spent + dt
        if spent + dt > budget:
            break
    return best


def blas_one():
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(limits=1, user_api="blas")
    except ImportError:                          # pragma: no cover
        import contextlib
        return contextlib.nullcontext()


def naive_loop(graph, x, widths, modes=("saturate", "wrap")):
    """What node_sweep replaces: every node x width x mode run on its own (overflow counts need the trace)."""
    import dataclasses
    from fxpsim.graph.ops import run_node
    from fxpsim.graph.mac_ops import MAC_OPS
    dp = graph.default_datapath
    _, _, values = graph.run(x, dp, keep=True)
    consts = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
    for node in graph.nodes:
        if node.op not in MAC_OPS:
            continue
        ins = [(values[t] if t in values else consts[t]) if t else None for t in node.inputs]
        exact = values[node.outputs[0]].astype(np.int64)
        for w in widths:
            for mode in modes:
                outs, tr = run_node(graph, node, ins, dataclasses.replace(dp, accumulator_bits=w,
                                                                          accumulator_overflow=mode), True)
                np.count_nonzero(outs[0] != exact)


def full_sweeps(name, model, x, repeat):
    """The full-network accumulator sweep (every width 8..32 x saturate/wrap, one process) with and without
    the skip of provably exact points, best of ``repeat`` each, interleaved: (seconds with, seconds without,
    points simulated with the skip, of those how many started after a provably exact prefix, points)."""
    from fxpsim.hardware.sweeps import sweep
    grid = {"accumulator_bits": list(range(8, 33)), "accumulator_overflow": ["saturate", "wrap"]}
    kw = dict(processes=1, progress=False)
    if name == "demo":
        from fxpsim.nn.datasets import load_digits
        kw["calibration_x"] = load_digits("train", seed=0)[0][:500]
    best_on, best_off, res = float("inf"), float("inf"), None
    for _ in range(repeat):
        with blas_one():
            t = CLOCK()
            res = sweep(model, x, grid, **kw)
            best_on = min(best_on, CLOCK() - t)
            t = CLOCK()
            sweep(model, x, grid, skip_exact=False, **kw)
            best_off = min(best_off, CLOCK() - t)
    reused = sum(1 for r in res.records if r["reused_from"] and r["seconds"] == 0.0)
    later = sum(1 for r in res.records if r["reused_nodes"] and r["seconds"] > 0.0)
    return best_on, best_off, len(res.records) - reused, later, len(res.records)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller batches, loop on 4 widths")
    parser.add_argument("--loop-widths", default=None, help="widths the naive loop runs (default: all 8..32; "
                                                             "its time is scaled to 25 widths when fewer)")
    parser.add_argument("--batch", type=int, default=None, help="MobileNet images (default 32, quick 8)")
    parser.add_argument("--repeat", type=int, default=7, help="best of this many runs of inference and sweep")
    parser.add_argument("--no-loop", action="store_true", help="skip the naive loop")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement (a subprocess)")
    parser.add_argument("--no-full", action="store_true", help="skip the full-network sweeps")
    parser.add_argument("--workers", type=int, default=None, help="node_sweep(workers=...) (default: its default)")
    parser.add_argument("--models", default="demo,mobilenet", help="comma-separated: demo, mobilenet")
    parser.add_argument("--wall", action="store_true", help="wall-clock seconds instead of CPU seconds")
    args = parser.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    import fxpsim
    from fxpsim.hardware.width_sweep import node_sweep
    batch = args.batch or (8 if args.quick else 32)
    loop_widths = [int(w) for w in args.loop_widths.split(",")] if args.loop_widths else \
        ([8, 16, 24, 32] if args.quick else list(range(8, 33)))
    rows, fulls = [], []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in SETUP:
            parser.error(f"--models: unknown model {name!r} (demo, mobilenet)")
        if name == "mobilenet" and not os.path.exists(MODEL):
            continue
        ns = {}
        exec(SETUP[name].replace("BATCH", str(batch)), ns)
        graph, x = ns["graph"], ns["x"]
        if args.quick and name == "demo":
            x = x[:120]
        node_sweep(graph, x)                                    # first-call buffers, caches
        graph.run(x)
        # inference (BLAS on all cores, and on one: on a small shared machine one thread can be faster) and
        # sweep interleaved, best of N each: the same disturbances reach both
        t_inf = t_sweep = float("inf")
        for _ in range(args.repeat):
            t_inf = min(t_inf, best_time(lambda: graph.run(x), repeat=1))
            with blas_one():
                t_inf = min(t_inf, best_time(lambda: graph.run(x), repeat=1))
            t_sweep = min(t_sweep, best_time(lambda: node_sweep(graph, x, workers=args.workers), repeat=1))
        t_loop = float("nan")
        if not args.no_loop:
            t_loop = best_time(lambda: naive_loop(graph, x, loop_widths), repeat=1, budget=0)
            t_loop *= 25 / len(loop_widths)
        mem = None
        if not args.no_memory:
            io_expr = ("_, _, v = graph.run(x, keep=True); io = sum(a.nbytes for a in v.values()) + "
                       "sum(t.data.nbytes for t in graph.tensors.values() if t.is_constant)")
            setup = SETUP[name].replace("BATCH", str(batch)) + \
                ("x = x[:120]\n" if args.quick and name == "demo" else "") + \
                "from fxpsim.hardware.width_sweep import node_sweep\nnode_sweep(graph, x[:2])\n" + io_expr
            mem = measure(setup, "node_sweep(graph, x)")
        macs = sum(graph.macs(n) for n in graph.nodes if n.op in ("conv2d", "depthwise_conv2d", "fully_connected"))
        label = f"{name} ({len(x)} inputs, {macs * len(x) / 1e6:.0f}M MACs)"
        rows.append((label, t_inf, t_sweep, t_loop, len(loop_widths), mem))
        if not args.no_full:
            model = ns["model"] if name == "demo" else graph
            fulls.append((label, t_inf) + full_sweeps(name, model, x, max(1, min(3, args.repeat))))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"fxpsim node sweep benchmark -- {platform.processor() or platform.machine()}, {os.cpu_count()} core(s), "
          f"load average {load:.1f} (other work running: best of N), fxpsim {fxpsim.__version__}, "
          f"{'wall' if args.wall else 'CPU'} seconds")
    print("sweep: every MAC node x widths 8..32 x {saturate, wrap}; loop: run_node at every point "
          "(scaled to 25 widths when run on fewer)")
    print(f"{'model':40s} {'inference s':>11s} {'sweep s':>8s} {'sweep/inf':>9s} {'loop s':>8s} {'loop/sweep':>10s} "
          f"{'mem MiB':>8s} {'mem/io':>6s}  target")
    for label, t_inf, t_sweep, t_loop, nw, mem in rows:
        mem_txt = f"{mem['extra'] / 2**20:8.1f} {mem['extra'] / mem['io']:6.2f}" if mem else f"{'-':>8s} {'-':>6s}"
        print(f"{label:40s} {t_inf:11.4f} {t_sweep:8.4f} {t_sweep / t_inf:9.2f} {t_loop:8.2f} "
              f"{t_loop / t_sweep:10.1f} {mem_txt}  "
              f"sweep/inf < 3{'' if nw == 25 else f' (loop: {nw} widths, scaled)'}")
    if fulls:
        print()
        print("full-network sweep (fxpsim.sweep, accumulator_bits 8..32 x {saturate, wrap}, one process): with "
              "skip_exact (points at which exact_widths proves every node exact reuse the widest run; the others "
              "run only the nodes not fed the exact tensors or not provably exact at their width: column 'in part') and without")
        print(f"{'model':40s} {'inference s':>11s} {'skip s':>8s} {'skip/inf':>8s} {'no skip s':>9s} "
              f"{'no skip/inf':>11s} {'speed-up':>8s} {'simulated':>9s} {'(in part)':>9s} {'points':>6s}")
        for label, t_inf, on, off, sim, later, pts in fulls:
            print(f"{label:40s} {t_inf:11.4f} {on:8.3f} {on / t_inf:8.1f} {off:9.3f} {off / t_inf:11.1f} "
                  f"{off / on:8.2f} {sim:9d} {later:9d} {pts:6d}")
    print()
    print("issue 25 rows (accumulator widths 8..32 x {saturate, wrap}, one thread, the same batch, best of N both):")
    for (label, t_inf, t_sweep, *_), full in zip(rows, fulls or [None] * len(rows)):
        line = f"  {label}: per-node sweep {t_sweep / t_inf:.1f}x one exact inference (goal <= 8x)"
        if full is not None:
            line += f"; network sweep {full[2] / t_inf:.1f}x (goal <= 15x)"
        print(line)


if __name__ == "__main__":
    main()
