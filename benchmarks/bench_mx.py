"""MXFP4 / MXFP8 quantization of a 4096 x 4096 float32 matrix: fxpsim's ``quantize_block`` beside torchao's
CPU ``to_mx`` (the peer), one thread, the same matrix, best of ``--repeat`` runs after a warm-up each.

torchao needs torch, which fxpsim never imports: its timing runs in a child process of the Python given by
``--torchao-python`` (an environment with torch and torchao; see ``tools/fixtures/mx/README.md``), on the same
matrix saved to a temporary .npy; without it the torchao column says "-". Both use the OCP floor scale rule
and round elements half to even (torchao's FLOOR mode); fxpsim also counts clamped elements and NaN blocks.
float32 input takes fxpsim's float32 block kernel (``_float.block_abs_max_f32`` + ``_float.encode_blocks_f32``);
the ``float64 path`` column times the same matrix widened to float64 (the generic element codec), for scale.
``ratio`` = torchao time / fxpsim time (>= 1: fxpsim at least as fast).

    python benchmarks/bench_mx.py [--torchao-python /work/scratch/mma-venv/bin/python] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from fxpsim.core.block_format import quantize_block  # noqa: E402

CHILD = r"""
import json, sys, time, numpy as np, torch
torch.set_num_threads(1)
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.mx_tensor import to_mx
x = torch.from_numpy(np.load(sys.argv[1]))
repeat = int(sys.argv[2])
out = {}
for name, dt in (("mxfp4", torch.float4_e2m1fn_x2), ("mxfp8_e4m3", torch.float8_e4m3fn)):
    to_mx(x, dt, 32, ScaleCalculationMode.FLOOR)
    best = 1e9
    for _ in range(repeat):
        t = time.perf_counter(); to_mx(x, dt, 32, ScaleCalculationMode.FLOOR); best = min(best, time.perf_counter() - t)
    out[name] = best
print(json.dumps(out))
"""


def best_time(fn, repeat: int) -> float:
    fn()
    best = 1e9
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--torchao-python", default=None, help="a Python with torch + torchao (the peer)")
    args = ap.parse_args()
    x = (np.random.default_rng(0).standard_normal((args.n, args.n)) * 3.0).astype(np.float32)
    ours = {name: best_time(lambda: quantize_block(x, name, axis=-1, scale_rule="floor"), args.repeat)
            for name in ("mxfp4", "mxfp8_e4m3")}
    wide = x.astype(np.float64)
    generic = {name: best_time(lambda: quantize_block(wide, name, axis=-1, scale_rule="floor"), args.repeat)
               for name in ("mxfp4", "mxfp8_e4m3")}
    peer = {}
    if args.torchao_python:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.npy")
            np.save(path, x)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            proc = subprocess.run([args.torchao_python, "-c", CHILD, path, str(args.repeat)], capture_output=True,
                                  text=True, env=env)
            if proc.returncode == 0:
                peer = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                print("torchao run failed:", (proc.stderr.strip().splitlines() or ["?"])[-1], file=sys.stderr)
    print(f"{args.n} x {args.n} float32, blocks of 32 along the last axis, floor scales, best of {args.repeat}, "
          f"one thread; load average {os.getloadavg()[0]:.2f}")
    print(f"{'format':<12} {'fxpsim ms':>10} {'torchao ms':>11} {'ratio':>7} {'float64 path ms':>16}")
    for name, t in ours.items():
        p = peer.get(name)
        print(f"{name:<12} {t * 1e3:>10.1f} {(f'{p * 1e3:.1f}' if p else '-'):>11} "
              f"{(f'{p / t:.2f}' if p else '-'):>7} {generic[name] * 1e3:>16.1f}")


if __name__ == "__main__":
    main()
