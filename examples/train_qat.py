"""Quantization-aware training on scikit-learn's digits: float vs 8/4-bit, 2-bit weights, ternary, binary, FP8, MXFP4.

Trains the same MLP (64-128-64-10) and small CNN (conv 16, pool, conv 32, pool, dense) under each scheme of
:func:`fxpsim.nn.quantization_scheme`, prints test accuracy and time per epoch, and saves a plot of test
accuracy against weight bit width to ``OUT/qat_accuracy.png`` (plus ``OUT/qat_results.json``).

    python examples/train_qat.py --epochs 10 --out qat_out
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from fxpsim.nn.datasets import load_digits
from fxpsim.nn import mlp, quantization_scheme, small_cnn
from fxpsim.nn.train import Adam, CosineLR, evaluate, fit

# (scheme, label, weight bits for the plot: ternary carries log2(3) bits of information)
SCHEMES = [("float", "float32", 32.0), ("int8", "8-bit W+A", 8.0), ("int4", "4-bit W+A", 4.0),
           ("w2", "2-bit W", 2.0), ("ternary", "ternary W (TWN)", math.log2(3)),
           ("binary", "binary W+A (BNN)", 1.0), ("fp8", "FP8 E4M3 W+A", 8.0), ("mxfp4", "MXFP4 W, MXFP8 A", 4.0)]
NETWORKS = {"MLP": (mlp, True), "CNN": (small_cnn, False)}


def run(network, scheme, epochs, seed, lr):
    builder, flatten = NETWORKS[network]
    xtr, ytr = load_digits("train", seed=seed, flatten=flatten)
    xte, yte = load_digits("test", seed=seed, flatten=flatten)
    model = builder(seed=seed, **quantization_scheme(scheme))
    start = time.perf_counter()
    history = fit(model, (xtr, ytr), epochs, 32, Adam(CosineLR(lr, epochs, lr / 20)), seed=seed, progress=False)
    wall = time.perf_counter() - start
    return {"network": network, "scheme": scheme, "test_accuracy": evaluate(model, xte, yte)["accuracy"],
            "train_accuracy": history["accuracy"][-1], "ms_per_epoch": 1e3 * float(np.mean(history["time"])),
            "wall_s": wall}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    bits = {s: b for s, _, b in SCHEMES}
    fig, ax = plt.subplots(figsize=(6, 4))
    for network in NETWORKS:
        rows = [r for r in results if r["network"] == network]
        ax.plot([bits[r["scheme"]] for r in rows], [100 * r["test_accuracy"] for r in rows], "o-", label=network)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, math.log2(3), 2, 4, 8, 32], ["1", "tern.", "2", "4", "8", "float"])
    ax.set_xlabel("weight bits")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("QAT on digits (fxpsim)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs per run (default 10)")
    parser.add_argument("--out", default="qat_out", help="output directory for the plot and JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3, help="initial Adam learning rate (cosine decay)")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    results = []
    print(f"{'network':8s} {'scheme':18s} {'test acc':>9s} {'train acc':>10s} {'ms/epoch':>9s}")
    for network in NETWORKS:
        for scheme, label, _ in SCHEMES:
            r = run(network, scheme, args.epochs, args.seed, args.lr)
            results.append(r)
            print(f"{network:8s} {label:18s} {100 * r['test_accuracy']:8.2f}% {100 * r['train_accuracy']:9.2f}% "
                  f"{r['ms_per_epoch']:9.1f}", flush=True)
    with open(os.path.join(args.out, "qat_results.json"), "w") as fh:
        json.dump({"epochs": args.epochs, "seed": args.seed, "results": results}, fh, indent=2)
    plot(results, os.path.join(args.out, "qat_accuracy.png"))
    print(f"wrote {os.path.join(args.out, 'qat_accuracy.png')} and qat_results.json")


if __name__ == "__main__":
    main()
