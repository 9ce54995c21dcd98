"""Float accumulators: fxpsim beside its peers, same run, best of N, one thread.

    python benchmarks/bench_float_accumulate.py [--size 256] [--repeat 3] [--mma-python PATH]

Rows: the fused-dot FP8 matmul (Hopper wgmma e4m3 preset, 13-bit truncation) beside MMA-Sim on a
small shape (MMA-Sim is run in its scratch venv, ``--mma-python``, with ``PYTHONPATH`` its source;
skipped with a note when absent); the Kulisch-exact FP8 matmul beside float64 BLAS on the decoded
values; the MXFP4 block-scaled matmul beside dequantize-then-float32-BLAS.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse
import subprocess
import sys
import textwrap
import time

import numpy as np

from fxpsim.core.float_codec import decode, encode
from fxpsim.datapath.floatacc import FloatAccumulator, float_dot, float_matmul

MMA_SNIPPET = textwrap.dedent("""
    import time, torch
    from mmasim.simulator import nv_ptx
    inst = nv_ptx.wgmma("Hopper", "m64n8k32.f32.e4m3.e4m3")
    inst.m = inst.n = 1
    g = torch.Generator().manual_seed(0)
    A = (torch.randn(1, 32, generator=g)).to(torch.float8_e4m3fn)
    B = (torch.randn(32, 1, generator=g)).to(torch.float8_e4m3fn)
    C = torch.zeros(1, 1)
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(50):
            inst(A, B, C)
        best = min(best, time.perf_counter() - t)
    print(50 * 32 / best)
""")


def best(fn, repeat):
    out, t_best = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best, out


def mma_sim_rate(python, src):
    if not (python and os.path.exists(python) and src and os.path.isdir(src)):
        return None
    env = dict(os.environ, PYTHONPATH=src)
    res = subprocess.run([python, "-c", MMA_SNIPPET], env=env, capture_output=True, text=True, timeout=600)
    return float(res.stdout.strip()) if res.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mma-python", default="/work/scratch/mma-venv/bin/python")
    ap.add_argument("--mma-src", default="/work/scratch/mma-sim")
    args = ap.parse_args()
    n, rep = args.size, args.repeat
    rng = np.random.default_rng(0)
    A = encode(rng.standard_normal((n, n)), "e4m3").bits
    B = encode(rng.standard_normal((n, n)), "e4m3").bits
    macs = n ** 3
    rows = []

    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    t, _ = best(lambda: float_matmul(A, B, "e4m3", "e4m3", acc), rep)
    fused = macs / t
    peer = mma_sim_rate(args.mma_python, args.mma_src)
    rows.append((f"fused FP8 matmul {n}^3 (hopper wgmma e4m3, 13-bit RZ)", fused,
                 "MMA-Sim wgmma (1x1 tiles, K=32)", peer))

    ex = FloatAccumulator(kind="exact")
    t, _ = best(lambda: float_matmul(A, B, "e4m3", "e4m3", ex), rep)
    av, bv = decode(A, "e4m3"), decode(B, "e4m3")
    t_blas, _ = best(lambda: av @ bv, rep)
    rows.append((f"Kulisch-exact FP8 matmul {n}^3 -> float32", macs / t, "float64 BLAS on decoded values",
                 macs / t_blas))

    blk = FloatAccumulator.preset("blackwell-mxfp4")
    K = n - n % 64 or 64
    A4 = rng.integers(0, 16, (n, K)).astype(np.uint8)
    B4 = rng.integers(0, 16, (K, n)).astype(np.uint8)
    SA = rng.integers(120, 134, (n, K // 32)).astype(np.uint8)
    SB = rng.integers(120, 134, (K // 32, n)).astype(np.uint8)
    t, _ = best(lambda: float_matmul(A4, B4, "e2m1", "e2m1", blk, scale_a=SA, scale_b=SB, scale_fmt="e8m0"), rep)

    def deq():
        a = (decode(A4, "e2m1") * np.repeat(np.exp2(SA.astype(np.float64) - 127), 32, axis=1)).astype(np.float32)
        b = (decode(B4, "e2m1") * np.repeat(np.exp2(SB.astype(np.float64) - 127), 32, axis=0)).astype(np.float32)
        return a @ b
    t_deq, _ = best(deq, rep)
    rows.append((f"MXFP4 block-scaled matmul {n}x{K}x{n} (tcgen05 mxf4nvf4)", n * K * n / t,
                 "dequantize + float32 BLAS", n * K * n / t_deq))

    w = max(len(r[0]) for r in rows)
    print(f"{'fxpsim':<{w}}  {'MAC/s':>10}   {'peer':<34} {'MAC/s':>10}  ratio")
    for name, rate, pname, prate in rows:
        ps = f"{prate:10.3g}" if prate else "   n/a    "
        ratio = f"{rate / prate:8.3g}x" if prate else "   (peer not available)"
        print(f"{name:<{w}}  {rate:10.3g}   {pname:<34} {ps}  {ratio}")
    print(f"(one thread, best of {rep}; numpy {np.__version__})")


if __name__ == "__main__":
    sys.exit(main())
