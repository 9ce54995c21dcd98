"""Benchmark: forward + backward of ``fake_quant_with_min_max_vars`` on 10^7 float32 values, one thread.

Times fxpsim's fused Cython loops -- separate forward and gradient calls as a training step
makes them, once allocating fresh outputs (the kernel zero-fills 2 x 40 MB of new pages)
and once writing into reused buffers (``out=``, what TensorFlow's caching allocator
amounts to), plus the one-pass ``_fused`` variant -- beside a plain numpy expression of the
same computation and, when installed, TensorFlow and PyTorch (never required), all in the
same run.
TensorFlow runs its CPU kernels on one intra-op and one inter-op thread; every ratio is to the
figures of this run (``vs TF`` is "-" without TensorFlow).  TensorFlow is heavy and never a
dependency: run the benchmark with a Python that has it and sees this checkout, e.g.
``python -m venv /work/scratch/tfvenv && /work/scratch/tfvenv/bin/pip install tensorflow-cpu``, then
``PYTHONPATH=. /work/scratch/tfvenv/bin/python benchmarks/bench_quantizers.py`` (after building in place).
Run: ``python benchmarks/bench_quantizers.py [--n 10000000] [--repeat 7]``.
"""
from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from fxpsim.quant.fake_quant import (fake_quant_with_min_max_vars, fake_quant_with_min_max_vars_fused,  # noqa: E402
                               fake_quant_with_min_max_vars_gradient, tf_nudge)

MIN, MAX, NUM_BITS = -3.0, 3.0, 8


def best_ms(func, repeat: int) -> float:
    func()                                           # warm-up (page faults, caches)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def naive_numpy(x, dy):
    """The textbook numpy expression (a chain of temporaries)."""
    n = tf_nudge(MIN, MAX, NUM_BITS)
    lo, hi, scale = n.nudged_min, n.nudged_max, n.scale
    clamped = np.clip(x, lo, hi)
    out = np.floor((clamped - lo) / scale + np.float32(0.5)) * scale + lo
    inside = (x >= lo) & (x <= hi)
    return out, dy * inside, dy[x < lo].sum(), dy[x > hi].sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.n) * 2).astype(np.float32)
    dy = rng.standard_normal(args.n).astype(np.float32)

    def fxpsim_separate():
        fake_quant_with_min_max_vars(x, MIN, MAX, NUM_BITS)
        fake_quant_with_min_max_vars_gradient(dy, x, MIN, MAX, NUM_BITS)

    out, d_inputs = np.empty_like(x), np.empty_like(x)

    def fxpsim_reused_buffers():
        fake_quant_with_min_max_vars(x, MIN, MAX, NUM_BITS, out=out)
        fake_quant_with_min_max_vars_gradient(dy, x, MIN, MAX, NUM_BITS, out=d_inputs)

    results = {
        "fxpsim forward + gradient, new arrays": best_ms(fxpsim_separate, args.repeat),
        "fxpsim forward + gradient, reused (out=)": best_ms(fxpsim_reused_buffers, args.repeat),
        "fxpsim one-pass fused": best_ms(lambda: fake_quant_with_min_max_vars_fused(x, dy, MIN, MAX, NUM_BITS),
                                         args.repeat),
        "naive numpy expression": best_ms(lambda: naive_numpy(x, dy), args.repeat),
    }
    try:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tx, tdy = tf.constant(x), tf.constant(dy)

        def tf_step():
            tf.quantization.fake_quant_with_min_max_vars(tx, MIN, MAX, num_bits=NUM_BITS).numpy()
            tf.quantization.fake_quant_with_min_max_vars_gradient(tdy, tx, MIN, MAX, num_bits=NUM_BITS)[0].numpy()
        results["TensorFlow"] = best_ms(tf_step, args.repeat)
    except ImportError:
        pass
    try:
        import torch
        torch.set_num_threads(1)
        px = torch.from_numpy(x).requires_grad_(True)
        pdy = torch.from_numpy(dy)
        n = tf_nudge(MIN, MAX, NUM_BITS)

        def torch_step():
            y = torch.fake_quantize_per_tensor_affine(px, float(n.scale), int(n.zero_point), 0, 255)
            y.backward(pdy)
        results["PyTorch"] = best_ms(torch_step, args.repeat)
    except ImportError:
        pass

    numpy_ms = results["naive numpy expression"]
    tf_ms = results.get("TensorFlow")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"forward + backward of fake_quant_with_min_max_vars, n = {args.n:,} float32, one thread "
          f"(best of {args.repeat}; load average {load:.1f})")
    print(f"  {'':44s} {'ms':>8s}   {'vs numpy':>8s}   {'vs TF':>6s}   (ratios: the peer's time / this row's)")
    for label, ms in results.items():
        vs_tf = f"{tf_ms / ms:5.2f}x" if tf_ms else "     -"
        print(f"  {label:44s} {ms:8.2f}   {numpy_ms / ms:7.2f}x   {vs_tf}")
    if tf_ms is None:
        print("(TensorFlow is not installed in this Python: no TF column; see the docstring)")

if __name__ == "__main__":
    main()
