"""Benchmark of float64 -> small-float encoding (fxpsim.core.float_codec) against ml_dtypes' ``astype``.

N = 10^7 float64 values (standard normal times 100: about 0.5 % beyond E4M3's 448), one thread, best of
``--repeat`` runs after one warm-up call (the least disturbed run, as timeit recommends).  fxpsim rounds
once, exactly, and counts overflows, underflows, ties and NaNs; ml_dtypes' ``astype`` does not count,
and for E4M3 it turns overflow into NaN (fxpsim's row uses ``overflow="saturate"``, the mode asked
for, and a second row ``overflow="nan"`` that gives ml_dtypes' exact bits).  ``ratio`` = ml_dtypes
time / fxpsim time: >= 1 means fxpsim is at least as fast.  The float16 row's baseline is numpy's
own ``astype(np.float16)``; decode rows compare with ``codes.view(dtype).astype(np.float64)``.

    python benchmarks/bench_float_formats.py [--n 10000000] [--repeat 7]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from fxpsim.core.float_codec import decode, encode  # noqa: E402


def best_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import ml_dtypes as ml
    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.n) * 100.0
    rows = []
    cases = [("float8_e4m3fn", "saturate", "half_even"), ("float8_e4m3fn", "nan", "half_even"),
             ("float8_e5m2", "inf", "half_even"), ("float4_e2m1fn", "saturate", "half_even"),
             ("bfloat16", "inf", "half_even"), ("float16", "inf", "half_even")]
    for name, ov, rnd in cases:
        dt = np.float16 if name == "float16" else getattr(ml, name)
        t_ours = best_time(lambda: encode(x, name, rounding=rnd, overflow=ov), args.repeat)
        t_ml = best_time(lambda: x.astype(dt), args.repeat)
        rows.append((f"encode {name} {rnd} {ov}", t_ours, t_ml))
    for name in ("float8_e4m3fn", "bfloat16"):
        dt = getattr(ml, name)
        codes = encode(x, name).bits
        t_ours = best_time(lambda: decode(codes, name), args.repeat)
        t_ml = best_time(lambda: codes.view(dt).astype(np.float64), args.repeat)
        rows.append((f"decode {name} -> float64", t_ours, t_ml))
    print(f"N = {args.n:,}, best of {args.repeat}, one thread (ml_dtypes {ml.__version__})")
    print(f"{'operation':<44} {'fxpsim ms':>10} {'ml_dtypes ms':>13} {'ratio':>7}")
    for label, a, b in rows:
        print(f"{label:<44} {a * 1e3:>10.1f} {b * 1e3:>13.1f} {b / a:>7.2f}")


if __name__ == "__main__":
    main()
