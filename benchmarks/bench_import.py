"""Speed of an imported TFLite model: fxpsim's integer graph beside LiteRT, one thread.

Model: ``benchmarks/models/mobilenet_v2_035_48.tflite`` (Keras MobileNetV2 alpha 0.35, 48x48x3 int8 input,
10 classes; 65 ops: 35 CONV_2D, 17 DEPTHWISE_CONV_2D, 10 ADD, MEAN, FULLY_CONNECTED, SOFTMAX).

Rows (images/s, best of ``--repeat`` timed runs of at least ``--min-time`` s each, same inputs for all; the
two fxpsim rows are timed before and after LiteRT and the best taken):

* fxpsim exact: ``graph.run(x)`` on the graph's own datapath (LiteRT's reference arithmetic), a batch;
* fxpsim 16-bit: ``graph.run(x, preset("int8-acc16-sat"), trace=True)`` (saturating 16-bit accumulator,
  overflows counted), a batch;
* the same two with the fused int8 kernels switched off (``fxpsim.datapath.conv_int8``: the general
  accumulate + requantize path that runs whenever the fused kernel does not model a layer), the baseline;
* LiteRT builtin (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``), XNNPACK (``BUILTIN``) and reference
  (``BUILTIN_REF``) kernels, ``num_threads=1``, batch 1 (``invoke`` per image; the input copy included) and
  the whole batch in one ``invoke`` after ``resize_tensor_input`` (the same images as fxpsim). The ratio columns divide
  by each kernel set's better figure of the two.

LiteRT runs in a child process (so that its threads and TensorFlow-free runtime never mix with fxpsim's),
pinned to the same core. Ratios are to LiteRT's builtin kernels and to XNNPACK, both measured in the same run.
``--profile`` prints where fxpsim's exact run spends its time (cProfile).

Run: ``python benchmarks/bench_import.py [--batch 256] [--quick] [--profile] [--no-baseline]``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

MODEL = Path(__file__).resolve().parent / "models" / "mobilenet_v2_035_48.tflite"

_LITERT_CHILD = r"""
import json, os, sys, time
import numpy as np
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(sys.argv[4])})
from ai_edge_litert.interpreter import Interpreter, OpResolverType
x = np.load(sys.argv[2])
min_time, repeat = float(sys.argv[3]), int(sys.argv[5])
out = {}
for label, kind in (("builtin", OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES),
                    ("xnnpack", OpResolverType.BUILTIN), ("reference", OpResolverType.BUILTIN_REF)):
    it = Interpreter(model_path=sys.argv[1], num_threads=1, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    i_in = it.get_input_details()[0]["index"]
    i_out = it.get_output_details()[0]["index"]
    ys = []
    for s in range(len(x)):
        it.set_tensor(i_in, x[s:s + 1]); it.invoke(); ys.append(it.get_tensor(i_out)[0])
    best = 0.0
    n = 0
    for _ in range(repeat):
        t0 = time.perf_counter(); k = 0
        while True:
            it.set_tensor(i_in, x[k % len(x):k % len(x) + 1]); it.invoke(); k += 1
            t = time.perf_counter() - t0
            if t >= min_time:
                break
        best = max(best, k / t)
    np.save(sys.argv[2] + f".{label}.npy", np.stack(ys))
    out[label] = best
    # the same kernels on the whole batch at once (resize_tensor_input), when the model allows it: a user
    # with many images would do this, and it saves the per-invoke overhead
    try:
        it.resize_tensor_input(i_in, list(x.shape)); it.allocate_tensors()
        it.set_tensor(i_in, x); it.invoke()
        same = bool(np.array_equal(it.get_tensor(i_out), np.stack(ys)))
        best = 0.0
        for _ in range(repeat):
            t0 = time.perf_counter(); k = 0
            while True:
                it.set_tensor(i_in, x); it.invoke(); k += 1
                t = time.perf_counter() - t0
                if t >= min_time:
                    break
            best = max(best, k * len(x) / t)
        out[label + "_batched"] = best
        out[label + "_batched_same"] = same
    except Exception as exc:  # a model with fixed-batch reshapes cannot be resized
        out[label + "_batched_error"] = str(exc)[:200]
print(json.dumps(out))
"""


def _one_core() -> int:
    core = 0
    if hasattr(os, "sched_setaffinity"):
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
    return core


def _best_rate(fn, n_images: int, min_time: float, repeat: int) -> float:
    fn()  # warm up (requantizer caches, page faults)
    best = 0.0
    for _ in range(repeat):
        reps, start = 0, time.perf_counter()
        while True:
            fn()
            reps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = max(best, reps * n_images / elapsed)
    return best


def _inputs(batch: int, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(0.0, 45.0, (batch,) + tuple(shape)), -128, 127)
    return x.astype(np.int8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256, help="fxpsim batch (default 256)")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per timed run")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per row (best taken)")
    ap.add_argument("--quick", action="store_true", help="--batch 64 --min-time 0.3 --repeat 2")
    ap.add_argument("--profile", action="store_true", help="cProfile of fxpsim's exact run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the rows with the fused kernels off")
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.min_time, args.repeat = 64, 0.3, 2
    core = _one_core()

    import fxpsim
    from fxpsim.report.render import format_table
    t0 = time.perf_counter()
    graph = fxpsim.import_tflite(MODEL)
    import_s = time.perf_counter() - t0
    spec = graph.tensors[graph.inputs[0]]
    x = _inputs(args.batch, spec.shape)
    acc16 = fxpsim.preset("int8-acc16-sat")
    rows = []
    exact = graph.run(x)
    r_exact = _best_rate(lambda: graph.run(x), len(x), args.min_time, args.repeat)
    y16, traces, _ = graph.run(x, acc16, trace=True)
    overflows = sum(t["overflows"] for t in traces.values() if t)
    r_acc16 = _best_rate(lambda: graph.run(x, acc16, trace=True), len(x), args.min_time, args.repeat)
    baseline = {}
    if not args.no_baseline:
        from fxpsim.datapath import conv_int8
        kernel, conv_int8._k = conv_int8._k, None        # the general path: what runs without the fused kernel
        try:
            same = (np.array_equal(graph.run(x), exact)
                    and np.array_equal(graph.run(x, acc16, trace=True)[0], y16))
            baseline = {"exact": _best_rate(lambda: graph.run(x), len(x), args.min_time, args.repeat),
                        "acc16": _best_rate(lambda: graph.run(x, acc16, trace=True), len(x), args.min_time,
                                            args.repeat), "same": same}
        finally:
            conv_int8._k = kernel

    litert = {}
    agree = {}
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        xin = Path(tmp) / "x.npy"
        np.save(xin, x)
        proc = subprocess.run([sys.executable, "-c", _LITERT_CHILD, str(MODEL), str(xin), str(args.min_time),
                               str(core), str(args.repeat)], capture_output=True, text=True)
        if proc.returncode == 0:
            litert = json.loads(proc.stdout.strip().splitlines()[-1])
            n = len(x)
            for label in ("builtin", "xnnpack", "reference"):
                ys = np.load(str(xin) + f".{label}.npy")
                g = graph if label == "reference" else fxpsim.import_tflite(MODEL, kernels=label)
                agree[label] = bool(np.array_equal(g.run(x[:n]), ys))
        else:
            print("LiteRT not available (pip install fxpsim[litert]):", proc.stderr.strip().splitlines()[-1:])

    # fxpsim again after LiteRT, best of both windows: a burst of load on the shared machine during one
    # window does not decide the ratios
    r_exact = max(r_exact, _best_rate(lambda: graph.run(x), len(x), args.min_time, args.repeat))
    r_acc16 = max(r_acc16, _best_rate(lambda: graph.run(x, acc16, trace=True), len(x), args.min_time, args.repeat))
    # each LiteRT kernel set at its best: one image per invoke, or the whole batch in one (resized) invoke
    best_of = {k: max(litert[k], litert.get(k + "_batched", 0.0)) for k in ("builtin", "xnnpack", "reference")
               if k in litert}
    base, xnn = best_of.get("builtin"), best_of.get("xnnpack")

    def row(name, batch, rate, note):
        rows.append([name, batch, f"{rate:,.0f}", f"{rate / base:.2f}x" if base else "-",
                     f"{rate / xnn:.2f}x" if xnn else "-", note])
    row("fxpsim exact (graph.run, LiteRT reference arithmetic)", f"batch {len(x)}", r_exact,
        "bit-exact vs LiteRT reference: " + ("yes" if agree.get("reference") else
                                             "not checked" if not litert else "NO"))
    for label in ("builtin", "xnnpack"):       # the kernel-set imports on their own (native) datapath
        g = fxpsim.import_tflite(MODEL, kernels=label)
        rate = _best_rate(lambda: g.run(x), len(x), args.min_time, args.repeat)
        row(f"fxpsim kernels={label!r} (graph.run)", f"batch {len(x)}", rate,
            f"bit-exact vs LiteRT {label}: " + ("yes" if agree.get(label) else
                                                "not checked" if not litert else "NO"))
    row("fxpsim int8-acc16-sat, trace=True", f"batch {len(x)}", r_acc16,
        f"{overflows:,} accumulator overflows; {np.mean(np.any(y16 != exact, axis=-1)):.0%} of outputs change")
    if baseline:
        same = "same outputs" if baseline["same"] else "OUTPUTS DIFFER"
        row("  baseline: fxpsim exact, fused kernels off", f"batch {len(x)}", baseline["exact"],
            f"general path; fused is {r_exact / baseline['exact']:.1f}x faster; {same}")
        row("  baseline: fxpsim int8-acc16-sat, fused kernels off", f"batch {len(x)}", baseline["acc16"],
            f"general path; fused is {r_acc16 / baseline['acc16']:.1f}x faster")
    for label, name in (("builtin", "LiteRT builtin kernels (BUILTIN_WITHOUT_DEFAULT_DELEGATES)"),
                        ("xnnpack", "LiteRT XNNPACK (BUILTIN)"), ("reference", "LiteRT reference (BUILTIN_REF)")):
        if label in litert:
            note = f"fxpsim kernels={label!r} bit-exact: {'yes' if agree.get(label) else 'NO'}"
            row(name, "batch 1", litert[label], note)
            if label + "_batched" in litert:
                same = "same outputs as batch 1" if litert[label + "_batched_same"] else "OUTPUTS DIFFER from batch 1"
                row(name, f"batch {len(x)}", litert[label + "_batched"], f"resized input; {same}")
            elif label + "_batched_error" in litert:
                rows.append([name, "batched", "-", "-", "-", "cannot resize: " + litert[label + "_batched_error"]])
    print(f"{MODEL.name}: {len(graph.nodes)} nodes, {sum(graph.macs(n) for n in graph.nodes):,} MACs per image; "
          f"import {import_s * 1e3:.0f} ms; one thread (core {core}); best of {args.repeat} runs >= "
          f"{args.min_time} s")
    print(format_table(rows, ["run", "batch", "images/s", "vs LiteRT builtin", "vs XNNPACK", "notes"]))

    if args.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3):
            graph.run(x)
        pr.disable()
        print("\ncProfile of 3 x graph.run(x) (exact), by cumulative time:")
        pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
        per_node = {}
        _, _, kept = graph.run(x[:64], keep=True)
        from fxpsim.graph.ops import run_node
        constants = {k: t.data for k, t in graph.tensors.items() if t.is_constant}
        values = {**constants, **kept}
        dp = graph.default_datapath
        for node in graph.nodes:
            ins = [values[t] for t in node.inputs]
            t0 = time.perf_counter()
            for _ in range(3):
                run_node(graph, node, ins, dp, False)
            per_node.setdefault(node.op, 0.0)
            per_node[node.op] += (time.perf_counter() - t0) / 3
        total = sum(per_node.values())
        print("time per op type (batch 64):")
        print(format_table([[k, f"{v * 1e3:.1f} ms", f"{v / total:.0%}"] for k, v in
                            sorted(per_node.items(), key=lambda kv: -kv[1])], ["op", "time", "share"]))


if __name__ == "__main__":
    main()
