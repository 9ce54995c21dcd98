"""Peak memory of fxpsim's datapath kernels against the size of their inputs and outputs.

Each case runs in a fresh subprocess; the peak is the process's maximum resident set size (``VmHWM``,
reset through ``/proc/self/clear_refs`` once the inputs are built; ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` where that is not possible) minus the resident size just before the call, so it counts
every temporary the call makes and nothing the setup did; or, when larger, the peak of the allocations
``tracemalloc`` traces during the call (numpy buffers: a heap that kept the setup's freed memory
resident would hide them from the RSS).  ``ratio`` is that extra
peak over the bytes of the inputs plus the outputs (codes and overflow counts); fxpsim keeps its
kernel temporaries within max(64 MiB, 2 x (inputs + outputs)) (``fxpsim.datapath._acc_scratch._temp_limit``).
Cases cover every kernel: the 16-bit and 32-bit (int16-operand) AVX-512 per-add loops, the
compiler-vectorised 32/64-bit ones, the adder tree, the exact BLAS sums (float32 K chunks) and the
uncounted wrap (``count=False``: BLAS or the unsigned 64-bit kernel).  :func:`measure` runs any
snippet the same way (``benchmarks/bench_sweep.py`` uses it for the node sweep).

    python benchmarks/bench_memory.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = {
    # name: (shape of a, shape of b, dtype, keyword arguments)
    "narrow b, int8, 16-bit kernel (2x5e7 @ 5e7x2, acc=12)": ((2, 50_000_000), (50_000_000, 2), "int8",
                                                             {"acc": 12}),
    "narrow b, int8, 32-bit kernel (1x19e6 @ 19e6x1, acc=20)": ((1, 19_000_000), (19_000_000, 1), "int8",
                                                               {"acc": 20}),
    "narrow b, int8, exact (1x19e6 @ 19e6x2)": ((1, 19_000_000), (19_000_000, 2), "int8", {}),
    "narrow b, adder tree (4x2e6 @ 2e6x3, acc=12)": ((4, 2_000_000), (2_000_000, 3), "int8",
                                                    {"acc": 12, "order": "tree"}),
    "square, int8 (1024x1024 @ 1024x1024, acc=16)": ((1024, 1024), (1024, 1024), "int8", {"acc": 16}),
    "tall a (200000x64 @ 64x10, acc=16)": ((200_000, 64), (64, 10), "int8", {"acc": 16}),
    "square, int8, 32-bit AVX-512 kernel (1024^3, acc=24)": ((1024, 1024), (1024, 1024), "int16", {"acc": 24}),
    "square, int16-range data, 64-bit kernel (1024^3, acc=40)": ((1024, 1024), (1024, 1024), "int32:x300",
                                                                 {"acc": 40}),
    "square, int8, wrap count=False (1024^3, acc=24)": ((1024, 1024), (1024, 1024), "int8",
                                                       {"acc": 24, "overflow": "wrap", "count": False}),
    "long K, int8, wrap count=False (64x2e6 @ 2e6x64, acc=32)": ((64, 2_000_000), (2_000_000, 64), "int8",
                                                                {"acc": 32, "overflow": "wrap", "count": False}),
    "int32 data, wrap count=False (512^3, acc=64)": ((512, 512), (512, 512), "int32:x2^23",
                                                    {"acc": 64, "overflow": "wrap", "count": False}),
}
QUICK = {"narrow b, int8, 32-bit kernel (1x19e6 @ 19e6x1, acc=20)", "square, int8 (1024x1024 @ 1024x1024, acc=16)",
         "tall a (200000x64 @ 64x10, acc=16)", "square, int8, 32-bit AVX-512 kernel (1024^3, acc=24)",
         "square, int8, wrap count=False (1024^3, acc=24)", "int32 data, wrap count=False (512^3, acc=64)"}

CHILD = r"""
import json, resource, sys, time
import numpy as np
import fxpsim
from fxpsim.datapath import accumulate as A
sa, sb, dtype, kwargs = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
dtype, _, scale = dtype.partition(":x")                             # "int16:x300": int8 codes times 300
scale = 2 ** int(scale[2:]) if scale.startswith("2^") else int(scale or 1)
a = rng.integers(-128, 128, sa, dtype=np.int8).astype(dtype) * np.dtype(dtype).type(scale)
b = rng.integers(-128, 128, sb, dtype=np.int8).astype(dtype) * np.dtype(dtype).type(scale)
counted = kwargs.get("count", True)
fxpsim.matmul(a[:1, :8], b[:8, :1], **kwargs)                      # imports, first-call buffers
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096
def hwm():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM"))
before = rss()
try:                                                   # reset the peak: building the data must not count
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    reset = True
except OSError:
    reset = False
import tracemalloc
tracemalloc.start()                  # numpy buffers: memory the heap kept resident from the setup still counts
t0 = time.perf_counter()
if counted:
    res, counts = fxpsim.matmul(a, b, per_output=True, **kwargs)
else:
    res, counts = fxpsim.matmul(a, b, **kwargs), np.empty(0)
elapsed = time.perf_counter() - t0
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
peak = hwm() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"io": a.nbytes + b.nbytes + res.raw.nbytes + counts.nbytes, "extra": max(peak - before, traced),
                  "seconds": elapsed, "path": A.last_path}))
"""

MEASURE = r"""
import json, resource, sys, time, tracemalloc
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096
def hwm():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM"))
ns = {}
exec(sys.argv[1], ns)                                  # setup: builds the inputs, defines io (bytes)
before = rss()
try:                                                   # reset the peak: the setup's own peak must not count
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    reset = True
except OSError:
    reset = False
tracemalloc.start()                                    # numpy's buffers are traced: freed memory that the
t0 = time.perf_counter()                               # heap keeps resident (no RSS growth) still counts
exec(sys.argv[2], ns)                                  # the measured call
elapsed = time.perf_counter() - t0
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
peak = hwm() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"io": int(ns["io"]), "extra": max(peak - before, traced), "rss_extra": peak - before,
                  "traced": traced, "seconds": elapsed, "peak_reset": reset}))
"""


def measure(setup: str, call: str, threads: int = 1) -> dict:
    """Peak extra memory of ``call`` after ``setup`` (both Python source, run in a fresh subprocess;
    ``setup`` must define ``io``, the bytes of the inputs and outputs): ``{"io", "extra", "rss_extra",
    "traced", "seconds"}`` -- ``extra`` is the larger of the resident-set growth (``rss_extra``) and the
    peak of the allocations ``tracemalloc`` traces during the call (``traced``: numpy buffers included),
    since a heap that kept freed memory resident hides a call's allocations from the RSS."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", MEASURE, setup, call], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


CONV_SETUP = """
import numpy as np, fxpsim
rng = np.random.default_rng(0)
x = rng.integers(-128, 128, (4, 128, 128, 608), dtype=np.int8)
w = rng.integers(-128, 128, (3, 3, 608, 16), dtype=np.int8)
io = x.nbytes + w.nbytes + 2 * 4 * 128 * 128 * 16 * 8          # codes and per-output counts, int64
fxpsim.conv2d(x[:1, :4, :4], w, 16, padding="SAME")              # imports, first-call buffers
"""
#: conv2d on a 38 MiB int8 input: the im2col lowering runs in tiles of output rows (``_acc_conv``).
CONV_CASES = {
    "conv2d 4x128x128x608, 3x3 -> 16, acc=16": 'fxpsim.conv2d(x, w, 16, padding="SAME", per_output=True)',
    "conv2d the same, adder tree": 'fxpsim.conv2d(x, w, 16, padding="SAME", order="tree", per_output=True)',
    "conv2d the same, exact accumulator": 'fxpsim.conv2d(x, w, None, padding="SAME", per_output=True)',
}


def run_case(name):
    sa, sb, dtype, kwargs = CASES[name]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([sa, sb, dtype, kwargs])], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the cases that take a second or two")
    args = parser.parse_args(argv)
    mib = 1 << 20
    print(f"{'case':58s} {'in+out MiB':>10s} {'peak extra MiB':>14s} {'ratio':>6s} {'seconds':>8s}  path")
    for name in CASES:
        if args.quick and name not in QUICK:
            continue
        t0 = time.perf_counter()
        r = run_case(name)
        print(f"{name:58s} {r['io'] / mib:10.1f} {r['extra'] / mib:14.1f} {r['extra'] / r['io']:6.2f} "
              f"{r['seconds']:8.2f}  {r['path']}  ({time.perf_counter() - t0:.0f} s with setup)")
    for name, call in CONV_CASES.items():
        if args.quick and name != next(iter(CONV_CASES)):
            continue
        t0 = time.perf_counter()
        r = measure(CONV_SETUP, call)
        print(f"{name:58s} {r['io'] / mib:10.1f} {r['extra'] / mib:14.1f} {r['extra'] / r['io']:6.2f} "
              f"{r['seconds']:8.2f}  im2col tiles  ({time.perf_counter() - t0:.0f} s with setup)")


if __name__ == "__main__":
    main()
