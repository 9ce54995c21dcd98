"""Kernel threads on an idle and on a busy machine: the default (``threads=None``) against one thread.

A 16-bit saturating matmul (256 x 256 x 256, int16 codes, every add counted) with ``threads=None``, 1 and 2,
best of 7, each in a fresh process, first on the machine as it is, then with ``cores + 1`` busy-looping
processes in the background (the synthetic load), under fxpsim's OpenMP wait policy (``PASSIVE``, set at import
unless ``OMP_WAIT_POLICY`` is set) and under spinning (``ACTIVE``, libgomp's behaviour before). The goal: the
default is never slower than one thread, loaded or idle. Prints GMAC/s and the ratio to one thread.

    python benchmarks/bench_threads.py
"""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

CHILD = r"""
import time, numpy as np, fxpsim
rng = np.random.default_rng(0)
a = rng.integers(-300, 300, (256, 256)).astype(np.int16)
b = rng.integers(-300, 300, (256, 256)).astype(np.int16)
out = []
for th in (None, 1, 2):
    best = 1e9
    for _ in range(7):
        t = time.perf_counter(); fxpsim.matmul(a, b, 16, threads=th); best = min(best, time.perf_counter() - t)
    out.append(256 ** 3 / best / 1e9)
print(*out)
"""


def _spin():
    while True:
        pass


def _run(policy: str) -> list[float]:
    env = dict(os.environ, OMP_WAIT_POLICY=policy)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return [float(v) for v in out.stdout.split()]


def main():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"cores: {cores}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'machine':12s} {'wait policy':12s} {'None GMAC/s':>12s} {'1 thread':>9s} {'2 threads':>10s} "
          f"{'None / 1':>9s} {'2 / 1':>6s}")
    for loaded in (False, True):
        procs = [mp.Process(target=_spin, daemon=True) for _ in range(cores + 1)] if loaded else []
        for p in procs:
            p.start()
        try:
            for policy in ("PASSIVE", "ACTIVE"):
                r = _run(policy)
                print(f"{'busy' if loaded else 'as is':12s} {policy:12s} {r[0]:12.2f} {r[1]:9.2f} {r[2]:10.2f} "
                      f"{r[0] / r[1]:9.2f} {r[2] / r[1]:6.2f}")
        finally:
            for p in procs:
                p.terminate()


if __name__ == "__main__":
    main()
