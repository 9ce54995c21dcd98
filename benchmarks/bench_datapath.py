"""Benchmark of the accumulating datapath kernels (fxpsim.datapath).

Prints one table: figure, fxpsim MAC/s, baseline MAC/s (measured in the same run), ratio, target.

  (a) exact wide accumulator          vs numpy float64 matmul (BLAS) on the same int8 data
  (b) 16-bit accumulator, saturating  vs numpy loop  acc = clip(acc + outer(a[:, k], b[k]))
      after every add, overflow count     (overflows counted too); absolute target 15e9 MAC/s/core
  (c) the same with wrap              vs the same numpy loop with a two's-complement wrap
  (d) 3x3 conv2d, 1x56x56x64 int8, 64 filters, SAME: exact and 16-bit saturating, vs numpy
      im2col + float64 BLAS (exact) / the numpy loop over the 576 taps (saturating)
  (e) 16-bit saturating accumulator vs APyTypes' APyFixedAccumulatorContext, when installed

Shapes: int8 x int8, 256x256 @ 256x256 and 1024x1024 @ 1024x256; one thread and all cores.
Run:  python benchmarks/bench_datapath.py [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time

import numpy as np

from fxpsim import datapath
from fxpsim.datapath.accumulate import conv2d, matmul

try:                                   # limit BLAS threads for the 1-thread baselines
    from threadpoolctl import threadpool_limits
except ImportError:                    # pragma: no cover
    threadpool_limits = None


def blas_threads(n):
    return threadpool_limits(limits=n) if threadpool_limits else contextlib.nullcontext()


def best_time(fn, repeat=30, budget=1.5):
    """Smallest wall time of ``fn()`` over up to ``repeat`` runs within about ``budget`` seconds.

    The minimum is the figure least disturbed by other processes on a shared machine.
    """
    best, spent = float("inf"), 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
        if spent + dt > budget:
            break
    return best


def numpy_loop(a, b, mode):
    """The straightforward numpy model of a 16-bit MAC array (per-add fit, overflow count)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.int32)
    count = 0
    for k in range(a.shape[1]):
        s = acc + np.outer(a[:, k], b[k])
        acc = np.clip(s, -32768, 32767) if mode == "saturate" else ((s + 32768) & 0xFFFF) - 32768
        count += int(np.count_nonzero(acc != s))
    return acc, count


def im2col(x, kh, kw):
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    cols = np.stack([xp[:, i:i + h, j:j + w, :] for i in range(kh) for j in range(kw)], axis=3)
    return cols.reshape(n * h * w, kh * kw * c)


def apytypes_row(rng, add):
    """(e) APyTypes' matmul inside APyFixedAccumulatorContext (16-bit, SAT), when installed.

    A smaller problem (64x256 @ 256x64) keeps it short; the note says whether its results equal a
    16-bit accumulator saturating at every add (fxpsim's per-add kernel) or not.
    """
    try:
        import apytypes as apy
    except ImportError:
        return
    a = rng.integers(-128, 128, (64, 256)).astype(np.int64)
    b = rng.integers(-128, 128, (256, 64)).astype(np.int64)
    pa = apy.APyFixedArray.from_float(a.astype(np.float64), int_bits=8, frac_bits=0)
    pb = apy.APyFixedArray.from_float(b.astype(np.float64), int_bits=8, frac_bits=0)

    def apy_matmul():
        with apy.APyFixedAccumulatorContext(int_bits=16, frac_bits=0, quantization=apy.QuantizationMode.TRN,
                                            overflow=apy.OverflowMode.SAT):
            return pa @ pb
    t_apy = best_time(apy_matmul, repeat=3)
    t_ours = best_time(lambda: matmul(a, b, 16, overflow="saturate", threads=1))
    same = np.array_equal(np.asarray(apy_matmul().to_numpy()), matmul(a, b, 16, overflow="saturate").raw)
    add(f"(e) acc16 sat 64x256@256x64 vs APyTypes {apy.__version__}", 64 * 256 * 64, t_ours, t_apy,
        ">= 100x APyTypes" + ("" if same else "  (APyTypes' results differ: no per-add saturation)"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shape only")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cores = datapath._CORES
    rows = []

    def add(fig, macs, ours, base, target=""):
        rows.append((fig, datapath.last_path, macs / ours, macs / base, base / ours, target))

    shapes = [(256, 256, 256)] if args.quick else [(256, 256, 256), (1024, 1024, 256)]
    for m, k, n in shapes:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        macs = m * k * n
        tag = f"{m}x{k}@{k}x{n}"
        for threads in sorted({1, cores}):
            with blas_threads(threads):
                t_blas = best_time(lambda: af @ bf)
                t_ours = best_time(lambda: matmul(a, b, threads=threads))
            add(f"(a) exact acc {tag} t={threads}", macs, t_ours, t_blas, ">= 0.7x BLAS")
            for mode, fig in (("saturate", "(b) acc16 sat"), ("wrap", "(c) acc16 wrap")):
                t_ours = best_time(lambda: matmul(a, b, 16, overflow=mode, threads=threads))
                if threads == 1:
                    ref_acc, ref_count = numpy_loop(a.astype(np.int32), b.astype(np.int32), mode)
                    got = matmul(a, b, 16, overflow=mode, threads=1)
                    assert np.array_equal(got.raw, ref_acc) and got.overflows == ref_count
                    t_loop = best_time(lambda: numpy_loop(a.astype(np.int32), b.astype(np.int32), mode),
                                       repeat=1)
                    matmul(a, b, 16, overflow=mode, threads=threads)          # for the kernel column
                target = ">= 15e9 MAC/s, >= 5x loop" if threads == 1 else ""
                add(f"{fig} {tag} t={threads}", macs, t_ours, t_loop, target)

    x = rng.integers(-128, 128, (1, 56, 56, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 3, 64, 64), dtype=np.int8)
    macs = 56 * 56 * 64 * 576
    cols = im2col(x, 3, 3).astype(np.float64)
    wf = w.reshape(576, 64).astype(np.float64)
    cols_i = im2col(x, 3, 3).astype(np.int32)
    w_i = w.reshape(576, 64).astype(np.int32)
    for threads in sorted({1, cores}):
        with blas_threads(threads):
            t_blas = best_time(lambda: cols @ wf)
            t_ours = best_time(lambda: conv2d(x, w, padding="SAME", threads=threads))
        add(f"(d) conv2d 3x3 56x56x64 exact t={threads}", macs, t_ours, t_blas)
        t_ours = best_time(lambda: conv2d(x, w, 16, padding="SAME", threads=threads))
        if threads == 1:
            t_loop = best_time(lambda: numpy_loop(cols_i, w_i, "saturate"), repeat=1)
            conv2d(x, w, 16, padding="SAME", threads=threads)
        add(f"(d) conv2d 3x3 56x56x64 acc16 sat t={threads}", macs, t_ours, t_loop)

    apytypes_row(rng, add)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"fxpsim datapath benchmark -- {platform.processor() or platform.machine()}, {cores} core(s), "
          f"load average {load:.1f}, SIMD dispatch: {datapath._k.has_simd_dispatch()}, "
          f"16-bit lanes: {('none', 'AVX2', 'AVX-512BW')[datapath._k.simd16_level()]}, numpy {np.__version__}")
    print(f"{'figure':44s} {'kernel':8s} {'fxpsim MAC/s':>13s} {'baseline MAC/s':>15s} {'ratio':>7s}  target")
    for fig, kernel, ours, base, ratio, target in rows:
        print(f"{fig:44s} {kernel:8s} {ours:13.3e} {base:15.3e} {ratio:7.2f}  {target}")


if __name__ == "__main__":
    main()
