"""Float accumulators: fxpsim beside its peers, same run, best of N, one thread.

    python benchmarks/bench_float_accumulate.py [--size 1024] [--repeat 3] [--mma-python PATH] [--mma-src DIR]

Rows (issue 27): the fused-dot FP8 matmul (Hopper wgmma e4m3 preset, 13-bit truncation, the C
kernel of ``fxpsim.core._floatacc``) at ``size``^3 beside the 10^9 MAC/s target, and with
``threads=2`` (asserted bit-equal to one thread); one wgmma m64n8k32 instruction on the same codes
in fxpsim and in MMA-Sim (run in its scratch venv, ``--mma-python`` with torch, ``PYTHONPATH`` its
source ``--mma-src``; its D is compared bit for bit; skipped with a note when absent); the
Kulisch-exact FP8 and FP4 (E2M1) matmuls beside float64 BLAS on the decoded values; the MXFP4
block-scaled matmul beside dequantize-then-float32-BLAS; AMD CDNA3's round-down fp8 kind on its C kernel beside the
numpy steps.  MMA-Sim venv: ``python3 -m venv /work/scratch/floatc-venv &&
/work/scratch/floatc-venv/bin/pip install torch==2.13.0 numpy``; source: microsoft/MMA-Sim c785138.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

from fxpsim.core.float_codec import decode, encode
from fxpsim.datapath.floatacc import FloatAccumulator, float_matmul

MMA_SNIPPET = textwrap.dedent("""
    import sys, time, numpy as np, torch
    from mmasim.simulator import nv_ptx
    inst = nv_ptx.wgmma("Hopper", "m64n8k32.f32.e4m3.e4m3")
    d = np.load(sys.argv[1])
    A = torch.from_numpy(d["a"]).view(torch.float8_e4m3fn)
    B = torch.from_numpy(d["b"]).view(torch.float8_e4m3fn)
    C = torch.zeros(64, 8)
    best = 1e9
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        D = inst(A, B, C)
        best = min(best, time.perf_counter() - t)
    np.save(sys.argv[3], D.view(torch.int32).numpy())
    print(64 * 8 * 32 / best)
""")


def best(fn, repeat):
    out, t_best = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best, out


def mma_sim_rate(python, src, a, b, repeat):
    """MMA-Sim's MAC/s on one wgmma m64n8k32 e4m3 instruction of codes ``a`` (64, 32), ``b`` (32, 8),
    and its D codes, run in its own venv (torch); None when that venv or source is absent."""
    if not (python and os.path.exists(python) and src and os.path.isdir(src)):
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = os.path.join(tmp, "in.npz"), os.path.join(tmp, "d.npy")
        np.savez(inp, a=a.astype(np.uint8), b=b.astype(np.uint8))
        env = dict(os.environ, PYTHONPATH=src)
        res = subprocess.run([python, "-c", MMA_SNIPPET, inp, str(repeat), outp], env=env, capture_output=True,
                             text=True, timeout=600)
        if res.returncode != 0:
            print(f"(MMA-Sim failed: {res.stderr.strip().splitlines()[-1:]})")
            return None, None
        return float(res.stdout.strip().splitlines()[-1]), np.load(outp).view(np.uint32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mma-python", default="/work/scratch/floatc-venv/bin/python")
    ap.add_argument("--mma-src", default="/work/scratch/mma-sim-src")
    args = ap.parse_args()
    n, rep = args.size, args.repeat
    rng = np.random.default_rng(0)
    A = encode(rng.standard_normal((n, n)), "e4m3").bits
    B = encode(rng.standard_normal((n, n)), "e4m3").bits
    macs = n ** 3
    rows = []

    acc = FloatAccumulator.preset("hopper-wgmma-m64n8k32-f32-e4m3")
    t, big = best(lambda: float_matmul(A, B, "e4m3", "e4m3", acc), rep)
    fused = macs / t
    rows.append((f"fused FP8 matmul {n}^3 (hopper wgmma e4m3, 13-bit RZ)", fused, "issue 27 target", 1e9))
    t2, big2 = best(lambda: float_matmul(A, B, "e4m3", "e4m3", acc, threads=2), rep)
    assert np.array_equal(big.bits, big2.bits), "threads changed a bit"
    rows.append(("  the same, threads=2 (bits equal to threads=1)", macs / t2, "threads=1", fused))
    # one wgmma instruction, the same codes in both simulators
    sa, sb = A[:64, :32], B[:32, :8]
    t_small, small = best(lambda: float_matmul(sa, sb, "e4m3", "e4m3", acc), max(rep, 20))
    peer, peer_d = mma_sim_rate(args.mma_python, args.mma_src, sa, sb, rep)
    if peer_d is not None:
        same = np.array_equal(peer_d, small.bits)
        print(f"MMA-Sim wgmma m64n8k32 D equals fxpsim's bit for bit: {same}")
    rows.append(("fused FP8 one wgmma m64n8k32 (64x8x32)", 64 * 8 * 32 / t_small,
                 "MMA-Sim wgmma, same codes", peer))
    if peer:
        rows.append((f"fused FP8 matmul {n}^3 (as above)", fused, "MMA-Sim wgmma m64n8k32", peer))

    # AMD CDNA3's round-down kind: its C kernel beside the numpy steps it replaced (the same bits), on 96^3
    rd = FloatAccumulator.preset("cdna3-mfma-16x16x32-f32-fp8")
    from fxpsim.datapath.floatacc import matmul as _mm
    from fxpsim.core.float_format import FloatFormat as _FF
    Ar, Br = A[:96, :96], B[:96, :96]
    f8 = _FF.parse("e4m3fnuz")
    t_rd, r_rd = best(lambda: float_matmul(Ar, Br, "e4m3fnuz", "e4m3fnuz", rd), rep)
    zeros = np.zeros((96, 96), np.int64)
    t_np, d_np = best(lambda: _mm._chunked(Ar, Br, f8, f8, zeros, rd, dict(overflows=0, nans=0, underflows=0,
                                                                            terms_inexact=0), None, None, None,
                                           kernel=False), 1)
    assert np.array_equal(r_rd.bits.astype(np.int64), d_np), "the C and numpy round-down kinds differ"
    rows.append(("fused_rd FP8 matmul 96^3 (cdna3 mfma fp8, C kernel)", 96 ** 3 / t_rd,
                 "the same, numpy steps (same bits)", 96 ** 3 / t_np))

    ex = FloatAccumulator(kind="exact")
    t, _ = best(lambda: float_matmul(A, B, "e4m3", "e4m3", ex), rep)
    av, bv = decode(A, "e4m3"), decode(B, "e4m3")
    t_blas, _ = best(lambda: av @ bv, rep)
    rows.append((f"Kulisch-exact FP8 matmul {n}^3 -> float32", macs / t, "float64 BLAS on decoded values",
                 macs / t_blas))
    A2 = rng.integers(0, 16, (n, n)).astype(np.uint8)                 # every E2M1 code
    B2 = rng.integers(0, 16, (n, n)).astype(np.uint8)
    t, _ = best(lambda: float_matmul(A2, B2, "e2m1", "e2m1", ex), rep)
    a2, b2 = decode(A2, "e2m1"), decode(B2, "e2m1")
    t_blas, _ = best(lambda: a2 @ b2, rep)
    rows.append((f"Kulisch-exact FP4 (E2M1) matmul {n}^3 -> float32", macs / t, "float64 BLAS on decoded values",
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
