"""Speed of the bit-accurate network simulation and of sweeps.

Prints (one core unless stated):

* images/s of :meth:`fxpsim.hardware.IntegerNetwork.run` (the bit-accurate integer datapath, batched) on the
  demo CNN (digits, conv 16 - pool - conv 32 - pool - dense 10) for several accumulators;
* the same for a network the size of TFLite's anchor (8x8x3 input, 3x3 conv with 8 filters + ReLU, dense 10),
  beside TFLite's reference interpreter (about 52,000 inferences/s on one thread on this machine, batch 1);
* images/s of the full :func:`fxpsim.hardware.simulate` (float reference + statistics) on the demo CNN;
* the wall time of the demo's accumulator sweep (10..32 bits x saturate/wrap) with 1 and 2 processes.

Run: ``python benchmarks/bench_simulate.py [--quick]``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

TFLITE_ANCHOR_IPS = 52_000.0


def _one_core():
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def _rate(fn, n_images: int, min_time: float = 1.0) -> float:
    fn()  # warm up
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return reps * n_images / elapsed


def _table(rows, headers):
    from fxpsim.report.render import format_table
    print(format_table(rows, headers))
    print()


def bench_networks(quick: bool):
    from fxpsim import nn
    from fxpsim.cli import demo_model
    from fxpsim.nn.datasets import load_digits
    from fxpsim.hardware import convert, preset, simulate
    min_time = 0.3 if quick else 1.0
    configs = [("tflite-int8 (acc32 wrap)", preset("tflite-int8")),
               ("int8-acc16-sat", preset("int8-acc16-sat")),
               ("int8-acc16-wrap", preset("int8-acc16-wrap")),
               ("acc12 saturate, tree order", preset("int8-acc16-sat").replace(accumulator_bits=12,
                                                                               accumulator_order="tree"))]
    model, _ = demo_model(epochs=1 if quick else 3)
    x, y = load_digits("test")
    xc = load_digits("train")[0][:500]
    batch = np.concatenate([x] * (2 if quick else 6))          # 720 / 2,160 images
    rows = []
    for label, cfg in configs:
        net = convert(model, cfg, xc)
        codes = net.quantize_input(batch)
        rows.append([label, _rate(lambda: net.run(codes), len(batch), min_time)])
    rows.append(["simulate() with all statistics (tflite-int8)",
                 _rate(lambda: simulate(model, "tflite-int8", x, y, calibration_x=xc), len(x), min_time)])
    print(f"Demo CNN (digits 8x8x1: conv16-pool-conv32-pool-dense10), batch {len(batch)}, one core")
    _table(rows, ["datapath", "images/s"])

    rng = np.random.default_rng(0)
    anchor = nn.Sequential(nn.Conv2D(3, 8, 3, padding="SAME", activation="relu", seed=0), nn.Flatten(),
                           nn.Dense(8 * 8 * 8, 10, seed=1))
    xa = rng.normal(size=(4096, 8, 8, 3)).astype(np.float32)
    rows = []
    for label, cfg in configs:
        net = convert(anchor, cfg, xa[:512])
        codes = net.quantize_input(xa)
        for chunk in (256, len(xa)):
            ips = _rate(lambda: net.run(codes, batch_size=chunk), len(xa), min_time)
            rows.append([label, chunk, ips, ips / TFLITE_ANCHOR_IPS])
    print(f"TFLite-anchor-size network (8x8x3 -> conv3x3x8 SAME + ReLU -> dense 10), {len(xa)} images run in "
          f"chunks, one core; ratio vs TFLite's reference interpreter ({TFLITE_ANCHOR_IPS:,.0f} inferences/s, "
          "one thread, batch 1, measured on this machine)")
    _table(rows, ["datapath", "chunk", "images/s", "x TFLite"])


def bench_sweep(quick: bool):
    from fxpsim.cli import demo_model
    from fxpsim.nn.datasets import load_digits
    from fxpsim.hardware.sweeps import sweep
    model, _ = demo_model(epochs=1)
    x, y = load_digits("test")
    xc = load_digits("train")[0][:500]
    bits = list(range(10, 33, 4 if quick else 1))
    grid = {"accumulator_bits": bits, "accumulator_overflow": ["saturate", "wrap"]}
    rows = []
    for procs in (1, 2):
        t0 = time.perf_counter()
        sweep(model, (x, y), grid, calibration_x=xc, processes=procs, progress=False)
        rows.append([procs, 2 * len(bits), time.perf_counter() - t0])
    print(f"Sweep of the demo CNN on {len(x)} digits: accumulator {bits[0]}..{bits[-1]} bits x saturate/wrap "
          f"(all cores available to the workers: {len(os.sched_getaffinity(0))})")
    _table(rows, ["processes", "configs", "wall s"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings (smoke run)")
    args = parser.parse_args()
    bench_sweep(args.quick)          # before pinning this process to one core
    _one_core()
    bench_networks(args.quick)


if __name__ == "__main__":
    main()
