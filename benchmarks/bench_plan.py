"""Per-call time of an imported TFLite model through fxpsim's compiled plan, beside the node-by-node run and
LiteRT's own kernels, one thread, measured in the same run.

Model: ``benchmarks/models/mobilenet_v2_035_48.tflite`` (Keras MobileNetV2 alpha 0.35, 48x48x3 int8, 65 ops), or
``--model``. Rows, for batch 1, 16 and 256 (``--batches``), each the best of ``--repeat`` rounds of calls
(at least ``--min-time`` s a round), the same inputs for all:

* fxpsim ``<kernels>`` plan: ``graph.run(x)`` on the graph imported for LiteRT's ``reference``, ``builtin`` or
  ``xnnpack`` kernels (its compiled plan, reused);
* fxpsim ``<kernels>`` node by node: ``graph.run(x, plan=False)`` (today's path before plans: every node's
  settings and arguments derived again on every call);
* LiteRT builtin (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``) and XNNPACK (``BUILTIN``), ``num_threads=1``, one
  ``invoke`` of the whole batch after ``resize_tensor_input`` (the input copy included).

Columns: ms per call, ms per image, and ratios: LiteRT builtin's time / this row's (``x builtin``, 1.0 = as fast
as LiteRT), the same for XNNPACK, the reference import's plan time / this row's (``x ref plan``: the ``builtin`` /
``xnnpack`` imports run their own requantization in the fused int8 kernel, so ~1.0) and the node-by-node time /
the plan's (``plan speed-up``). The machine's load average is printed before and after. Every fxpsim row's
output is checked equal to the node-by-node run's, and the builtin / xnnpack imports' to LiteRT's own output of the
same kernels (``bits`` column).

Run: ``python benchmarks/bench_plan.py [--quick] [--batches 1 16 256] [--repeat 5] [--model PATH]``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

MODEL = Path(__file__).resolve().parent / "models" / "mobilenet_v2_035_48.tflite"


def best_per_call(fn, repeat: int, min_time: float) -> float:
    """Seconds per call of ``fn()``: the best of ``repeat`` rounds, each of as many calls as fill ``min_time``."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            t = time.perf_counter() - t0
            if t >= min_time:
                break
        best = min(best, t / n)
    return best


def litert(model: Path, kind: str, x: np.ndarray):
    """``(run, output)``: one ``invoke`` of LiteRT's ``kind`` kernels on the batch ``x``, one thread."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, "xnnpack": OpResolverType.BUILTIN}[kind]
    it = Interpreter(model_path=str(model), num_threads=1, experimental_op_resolver_type=resolver)
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    it.resize_tensor_input(i_in, list(x.shape))
    it.allocate_tensors()

    def run():
        it.set_tensor(i_in, x)
        it.invoke()
        return it.get_tensor(i_out)
    return run, run().copy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--quick", action="store_true", help="--repeat 2 --min-time 0.05")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.min_time = 2, 0.05
    import fxpsim
    graphs = {k: fxpsim.import_tflite(args.model, kernels=k) for k in ("reference", "builtin", "xnnpack")}
    spec = graphs["reference"].tensors[graphs["reference"].inputs[0]]
    lo, hi = spec.code_range
    rng = np.random.default_rng(0)
    print(f"model {args.model.name}: {len(graphs['reference'].nodes)} nodes, input {spec.type_name} "
          f"{list(spec.shape)}; one thread; best of {args.repeat} rounds of >= {args.min_time} s; "
          f"load average {_load()}")
    head = f"{'batch':>5}  {'row':<28} {'ms/call':>9} {'ms/image':>9} {'x builtin':>9} {'x xnnpack':>9} " \
           f"{'x ref plan':>10} {'plan speed-up':>13}  bits"
    print(head)
    print("-" * len(head))
    for batch in args.batches:
        x = rng.integers(lo, hi + 1, (batch,) + spec.shape).astype(spec.dtype)
        rows = []
        peers = {}
        for kind in ("builtin", "xnnpack"):
            run, out = litert(args.model, kind, x)
            peers[kind] = (best_per_call(run, args.repeat, args.min_time), out)
        for kernels, g in graphs.items():
            want = g.run(x, plan=False)
            same = np.array_equal(g.run(x), want)
            if kernels in peers:
                same = same and np.array_equal(want, peers[kernels][1])
            t_plan = best_per_call(lambda: g.run(x), args.repeat, args.min_time)
            t_nodes = best_per_call(lambda: g.run(x, plan=False), args.repeat, args.min_time)
            rows.append((f"fxpsim {kernels} plan", t_plan, f"{t_nodes / t_plan:.1f}x", same))
            rows.append((f"fxpsim {kernels} node by node", t_nodes, "", same))
        rows += [(f"LiteRT {kind}", t, "", True) for kind, (t, _) in peers.items()]
        t_ref = rows[0][1]
        for label, t, speedup, same in rows:
            print(f"{batch:>5}  {label:<28} {t * 1e3:>9.3f} {t * 1e3 / batch:>9.3f} {peers['builtin'][0] / t:>9.3f} "
                  f"{peers['xnnpack'][0] / t:>9.3f} {t_ref / t:>10.3f} {speedup:>13}  {'same' if same else 'DIFFER'}")
    print(f"load average {_load()}")
    return 0


def _load() -> str:
    """The 1, 5 and 15 minute load averages (``n/a`` where the OS has none)."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


if __name__ == "__main__":
    raise SystemExit(main())
