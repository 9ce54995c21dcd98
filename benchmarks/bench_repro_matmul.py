"""Cost of BLAS-independent products: :func:`fxpsim.nn.repro.matmul` against float32 ``np.matmul`` (the peer).

Prints, for the products one training step of the digits CNN makes (conv forward, weight and input gradients,
dense), the best-of-N time of each and their ratio, and then ms per epoch of the CNN trained with the layers'
``repro.matmul`` against the same training with ``np.matmul`` put back in its place (same data, same seeds, one
thread for BLAS throughout, best of N epochs-runs each).

    python benchmarks/bench_repro_matmul.py [--repeat 5]
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

from fxpsim.nn import quantization_scheme, repro, small_cnn  # noqa: E402
from fxpsim.nn.datasets import load_digits  # noqa: E402
from fxpsim.nn.train import Adam, fit  # noqa: E402

# [M, K] @ [K, N] of one batch of 32 through the digits CNN (8x8 input, conv 16, pool, conv 32, pool, dense 10)
SHAPES = {"conv1 forward": (2048, 9, 16), "conv2 forward": (512, 144, 32), "conv2 weight grad": (144, 512, 32),
          "conv2 input grad": (512, 288, 16), "dense forward": (32, 128, 10), "dense weight grad": (128, 32, 10)}


def best(fn, repeat, number=20):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def epoch_ms(repeat, epochs=2):
    x, y = load_digits("train")
    times = []
    for _ in range(repeat):
        model = small_cnn(seed=0, **quantization_scheme("int8"))
        start = time.perf_counter()
        fit(model, (x, y), epochs, 32, Adam(1e-3), seed=0, progress=False)
        times.append(1e3 * (time.perf_counter() - start) / epochs)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| product [M, K] @ [K, N] | np.matmul float32 (us) | repro.matmul (us) | ratio |")
    print("|---|---|---|---|")
    for name, (m, k, n) in SHAPES.items():
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        t_np, t_re = best(lambda: np.matmul(a, b), args.repeat), best(lambda: repro.matmul(a, b), args.repeat)
        print(f"| {name} {[m, k, n]} | {1e6 * t_np:.0f} | {1e6 * t_re:.0f} | {t_re / t_np:.1f}x |")
    exact = epoch_ms(args.repeat)
    saved = repro.matmul
    repro.matmul = np.matmul                  # the peer: the layers call repro.matmul through the module
    try:
        plain = epoch_ms(args.repeat)
    finally:
        repro.matmul = saved
    print(f"\nint8 QAT digits CNN, ms per epoch (best of {args.repeat}): np.matmul {plain:.0f}, "
          f"repro.matmul {exact:.0f} ({exact / plain:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
