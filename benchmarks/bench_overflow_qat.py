"""Overflow-aware QAT speed: one epoch of the demo CNN with the accumulator in the loop vs plain QAT.

The demo network of ``fxpsim demo`` (conv 16, pool, conv 32, pool, dense 10; 8-bit fake quantization of
weights and activations with observers), batch 32, Adam, on the digits training split (1,437 images). Both
runs train the same model from the same weights on the same batches, one thread (BLAS, OpenMP, the
datapath kernels). The overflow-aware run wraps every layer with :func:`fxpsim.hardware.qat.datapath_aware`
for a 14-bit saturating accumulator (``int8-acc16-sat`` with ``accumulator_bits = 14``), so every forward
pass accumulates on the per-add kernels; once as it is and once with the overflow penalty of the example's
recipe (one more exact sum per layer). Prints the best of ``--repeat`` epochs (after a warm-up epoch) of each
and the ratios; the target is at most 3x.

    python benchmarks/bench_overflow_qat.py [--repeat 5] [--bits 14] [--overflow saturate]
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import copy  # noqa: E402
import time  # noqa: E402

from fxpsim.hardware import preset  # noqa: E402
from fxpsim.nn import small_cnn  # noqa: E402
from fxpsim.hardware.qat import datapath_aware  # noqa: E402
from fxpsim.nn.datasets import load_digits  # noqa: E402
from fxpsim.nn.train import Adam, fit  # noqa: E402

TARGET_FACTOR = 3.0
# the demo's quantizers (fxpsim.cli.demo_model)
WEIGHTS = {"class_name": "fake_quant", "num_bits": 8, "narrow_range": True, "observer": "minmax"}
ACTIVATIONS = {"class_name": "fake_quant", "num_bits": 8, "observer": {"class_name": "moving_average", "decay": 0.9}}


def epoch_times(model, data, repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` epochs after one warm-up epoch (fit's own per-epoch clock)."""
    fit(model, data, 1, 32, Adam(1e-3), seed=0, progress=False)
    times = []
    for r in range(repeat):
        start = time.perf_counter()
        fit(model, data, 1, 32, Adam(1e-3), seed=r + 1, progress=False)
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed epochs of each (best is reported)")
    parser.add_argument("--bits", type=int, default=14, help="accumulator width in the loop")
    parser.add_argument("--overflow", default="saturate", help="accumulator overflow mode")
    parser.add_argument("--overflow-grad", default="mask", help="DatapathAware overflow_grad")
    parser.add_argument("--penalty", type=float, default=3.0, help="overflow penalty of the second in-loop run")
    args = parser.parse_args(argv)
    x, y = load_digits("train", seed=0)
    config = preset("int8-acc16-sat").replace(accumulator_bits=args.bits, accumulator_overflow=args.overflow)
    base = small_cnn((8, 8, 1), weight_quantizer=WEIGHTS, activation_quantizer=ACTIVATIONS, seed=0)
    fit(base, (x, y), 3, 32, Adam(3e-3), seed=0, progress=False)       # a trained start: realistic overflows
    plain = epoch_times(copy.deepcopy(base), (x, y), args.repeat)
    rows = [("plain QAT", plain, None)]
    for penalty in (0.0, args.penalty):
        wrapped = datapath_aware(copy.deepcopy(base), config, calibration_x=x, overflow_grad=args.overflow_grad,
                                 overflow_penalty=penalty, penalty_margin=0.75)
        times = epoch_times(wrapped, (x, y), args.repeat)
        overflowed = sum(m.overflowed_outputs for m in wrapped.layers if hasattr(m, "overflowed_outputs"))
        outputs = sum(m.outputs for m in wrapped.layers if hasattr(m, "outputs"))
        name = f"acc{args.bits} {args.overflow}" + (f", penalty {penalty:g}" if penalty else "")
        rows.append((f"overflow-aware, {name}", times, f"{overflowed}/{outputs}"))
    print(f"demo CNN on digits, {len(y)} images, batch 32, one thread; best of {args.repeat} epochs")
    print(f"{'training':<42} {'best ms/epoch':>13} {'ratio':>6}  overflowed outputs (last batch)  all (ms)")
    for name, times, ovf in rows:
        ratio = min(times) / min(plain)
        print(f"{name:<42} {1e3 * min(times):>13.1f} {ratio:>5.2f}x  {ovf or '-':>31}  "
              f"{' '.join(f'{1e3 * t:.0f}' for t in times)}")
    worst = max(min(t) for _, t, _ in rows[1:]) / min(plain)
    print(f"target <= {TARGET_FACTOR:.0f}x: {'OK' if worst <= TARGET_FACTOR else 'SLOW'} (worst {worst:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
