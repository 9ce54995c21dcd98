"""Training speed on digits: ms per epoch of the MLP and the CNN, float and 8-bit QAT, batch 32, Adam.

One thread everywhere (BLAS, OpenMP, PyTorch), as the recorded PyTorch baselines. Prints fxpsim's median
time per epoch beside the PyTorch 2.x one-thread figures measured on the project machine and, when PyTorch
is installed (never required), a live PyTorch run of the same networks (QAT with ``torch.ao.quantization``
fake-quant modules: 8-bit weights and activations).

    python benchmarks/bench_training.py [--epochs 5] [--repeat 3]
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from fxpsim.nn.datasets import load_digits  # noqa: E402
from fxpsim.nn import mlp, quantization_scheme, small_cnn  # noqa: E402
from fxpsim.nn.train import Adam, fit  # noqa: E402

# PyTorch one-thread ms/epoch measured on the project machine (issue 5); the target is within 2x.
PYTORCH_BASELINE_MS = {("MLP", "float"): 14.0, ("MLP", "int8"): 51.0, ("CNN", "float"): 40.0,
                       ("CNN", "int8"): 107.0}
TARGET_FACTOR = 2.0


def fxpsim_ms_per_epoch(network, scheme, epochs, repeat):
    """Medians over ``repeat`` runs of the wall and CPU time per epoch (ms), after one warm-up epoch."""
    flatten = network == "MLP"
    x, y = load_digits("train", flatten=flatten)
    wall, cpu = [], []
    for r in range(repeat):
        builder = mlp if flatten else small_cnn
        model = builder(seed=r, **quantization_scheme(scheme))
        fit(model, (x, y), 1, 32, Adam(1e-3), seed=r, progress=False)      # warm-up (allocations, caches)
        start = time.process_time()
        history = fit(model, (x, y), epochs, 32, Adam(1e-3), seed=r, progress=False)
        cpu.append(1e3 * (time.process_time() - start) / epochs)
        wall.append(1e3 * float(np.mean(history["time"])))
    return float(np.median(wall)), float(np.median(cpu))


def torch_ms_per_epoch(network, scheme, epochs):  # pragma: no cover - needs PyTorch
    """The same network and training loop in PyTorch (one thread); None when PyTorch is missing."""
    try:
        import torch
        from torch import nn as tnn
        from torch.ao import quantization as tq
    except ImportError:
        return None
    torch.set_num_threads(1)
    torch.manual_seed(0)
    flatten = network == "MLP"
    x, y = load_digits("train", flatten=flatten)
    xt = torch.from_numpy(x if flatten else np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    yt = torch.from_numpy(y)
    qat = scheme == "int8"

    def act():
        return tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)()

    class WQ(tnn.Module):
        """Linear/conv with fake-quantized weights (per-tensor, symmetric int8)."""

        def __init__(self, layer):
            super().__init__()
            self.layer = layer
            self.wq = tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=-128,
                                                quant_max=127, dtype=torch.qint8,
                                                qscheme=torch.per_tensor_symmetric)()

        def forward(self, inp):
            w = self.wq(self.layer.weight)
            if isinstance(self.layer, tnn.Linear):
                return tnn.functional.linear(inp, w, self.layer.bias)
            return tnn.functional.conv2d(inp, w, self.layer.bias, padding=1)

    def wrap(layer):
        return WQ(layer) if qat else layer

    def relu():
        return tnn.Sequential(tnn.ReLU(), act()) if qat else tnn.ReLU()

    if flatten:
        model = tnn.Sequential(wrap(tnn.Linear(64, 128)), relu(), wrap(tnn.Linear(128, 64)), relu(),
                               wrap(tnn.Linear(64, 10)))
    else:
        model = tnn.Sequential(wrap(tnn.Conv2d(1, 16, 3, padding=1)), relu(), tnn.MaxPool2d(2),
                               wrap(tnn.Conv2d(16, 32, 3, padding=1)), relu(), tnn.MaxPool2d(2), tnn.Flatten(),
                               wrap(tnn.Linear(128, 10)))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = tnn.CrossEntropyLoss()
    times = []
    for epoch in range(epochs + 1):
        order = torch.randperm(len(yt))
        start = time.perf_counter()
        for b in range(0, len(yt), 32):
            idx = order[b:b + 32]
            opt.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            opt.step()
        if epoch:                       # epoch 0 is the warm-up
            times.append(time.perf_counter() - start)
    return 1e3 * float(np.mean(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per run (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration; the median is shown")
    args = parser.parse_args(argv)
    print(f"digits train set: 1437 images, batch 32, Adam, one thread; {args.epochs} epochs x {args.repeat} runs")
    print("The target is judged on CPU time: with one thread it equals the wall time of an idle machine and")
    print("does not grow when other processes share the cores (the wall time is shown too).")
    print(f"{'network':8s} {'mode':6s} {'wall ms/ep':>10s} {'cpu ms/ep':>10s} {'PyTorch (recorded)':>19s} "
          f"{'ratio':>6s} {'target':>7s} {'PyTorch (live)':>15s}")
    failures = 0
    for network in ("MLP", "CNN"):
        for scheme in ("float", "int8"):
            wall, ours = fxpsim_ms_per_epoch(network, scheme, args.epochs, args.repeat)
            base = PYTORCH_BASELINE_MS[(network, scheme)]
            ratio = ours / base
            ok = ratio <= TARGET_FACTOR
            failures += not ok
            try:
                live = torch_ms_per_epoch(network, scheme, args.epochs)
            except Exception as exc:  # pragma: no cover - a live baseline must never break the benchmark
                live = f"error: {type(exc).__name__}"
            live_text = "not installed" if live is None else live if isinstance(live, str) else f"{live:.1f}"
            print(f"{network:8s} {scheme:6s} {wall:10.1f} {ours:10.1f} {base:19.1f} {ratio:6.2f} "
                  f"{'met' if ok else 'MISSED':>7s} {live_text:>15s}", flush=True)
    print("all targets met (within 2x of PyTorch)" if not failures else f"{failures} target(s) missed")


if __name__ == "__main__":
    main()
