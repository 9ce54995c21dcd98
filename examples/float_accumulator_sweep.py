"""How many accumulator bits does an FP8 network need?  Sweep a tensor core's alignment width
(``fraction_bits``) and its float32 promotion interval (``promote_every``) over fxpsim's digits MLP and CNN.

1. train the MLP (64-128-64-10) and the small CNN with FP8 E4M3 quantization-aware training
   (``nn.quantization_scheme("fp8")``, seed 0);
2. run each on the float datapath ``weights = activations = e4m3`` with Hopper's FP8 wgmma accumulator
   (``hopper-wgmma-m64n8k32-f32-e4m3``: fused dots of 32 products, truncated to ``fraction_bits`` below
   the largest exponent, output rounded toward zero to 13 fraction bits) for every ``fraction_bits`` x
   ``promote_every`` (0: never; else the partial sum goes to a float32 accumulator every N products);
3. print the table docs/float_datapaths.md quotes (test accuracy on the 360 held-out digits, top-1
   agreement with the same FP8 operands accumulated exactly, the logits' relative RMS error against float64) and save
   the plot ``OUT/float_accumulator_sweep.png``.

Run: ``python examples/float_accumulator_sweep.py --out docs`` (a few minutes on one core).
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from fxpsim.graph.extract import extract
from fxpsim.hardware import HardwareConfig
from fxpsim.hardware.float_datapath import simulate_float
from fxpsim.nn import mlp, quantization_scheme, small_cnn
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, CosineLR, evaluate, fit

PRESET = "hopper-wgmma-m64n8k32-f32-e4m3"
FRACTION_BITS = (1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 25)
PROMOTE_EVERY = (0, 128, 32)
NETWORKS = {"MLP": (mlp, True), "CNN": (small_cnn, False)}


EXACT = {"name": "fp8-exact", "weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
         "accumulator": {"preset": "exact-float32"}}


def target(fraction_bits: int, promote_every: int) -> HardwareConfig:
    return HardwareConfig.from_dict({
        "name": f"fp8-f{fraction_bits}-p{promote_every}",
        "weights": {"format": "e4m3"}, "activations": {"format": "e4m3"},
        "accumulator": {"preset": PRESET, "fraction_bits": fraction_bits, "promote_every": promote_every}})


def sweep(network: str, epochs: int, seed: int = 0) -> dict:
    builder, flatten = NETWORKS[network]
    x, y = load_digits("train", seed=seed, flatten=flatten)
    xt, yt = load_digits("test", seed=seed, flatten=flatten)
    model = builder(seed=seed, **quantization_scheme("fp8"))
    fit(model, (x, y), epochs, 32, Adam(CosineLR(3e-3, epochs, 3e-3 / 20)), seed=seed, progress=False)
    graph = extract(model, x[:500])                       # calibrated once: every target sees the same ranges
    exact = simulate_float(graph, EXACT, xt, yt)           # the same operands, Kulisch-exact accumulation
    exact_pred = np.argmax(exact.outputs, 1)
    rows = []
    for promote in PROMOTE_EVERY:
        for fb in FRACTION_BITS:
            rep = simulate_float(graph, target(fb, promote), xt, yt)
            rows.append({"fraction_bits": fb, "promote_every": promote, **rep.network,
                         "agreement_exact": float(np.mean(np.argmax(rep.outputs, 1) == exact_pred)),
                         "last_layer_rel_rms": rep.layers[-1]["rel_float64"],
                         "terms_inexact": sum(r["terms_inexact"] for r in rep.layers)})
    return {"network": network, "model_accuracy": evaluate(model, xt, yt)["accuracy"],
            "exact_accuracy": exact.network["accuracy"], "float64_accuracy": exact.network["float64_accuracy"],
            "rows": rows}


def markdown(results: list) -> str:
    head = "| network | promote_every | " + " | ".join(f"F={fb}" for fb in FRACTION_BITS) + " |"
    lines = [head, "|" + "---|" * (2 + len(FRACTION_BITS))]
    for res in results:
        for promote in PROMOTE_EVERY:
            rows = [r for r in res["rows"] if r["promote_every"] == promote]
            cells = [f"{100 * r['accuracy']:.2f}%" for r in rows]
            lines.append(f"| {res['network']} | {promote or 'never'} | " + " | ".join(cells) + " |")
    lines += ["", "| network | float64 (unquantized operands) | FP8 operands, exact accumulation | smallest "
              "fraction_bits from which every prediction equals the exact accumulation's "
              f"({' / '.join(str(p or 'never') for p in PROMOTE_EVERY)}) | "
              "logits' rel. RMS error vs float64 at F=13, never promoted |", "|---|---|---|---|---|"]
    for res in results:
        first = []
        for promote in PROMOTE_EVERY:
            rows = [r for r in res["rows"] if r["promote_every"] == promote]
            ok = [r["fraction_bits"] for r in rows if all(q["agreement_exact"] == 1.0 for q in rows
                                                          if q["fraction_bits"] >= r["fraction_bits"])]
            first.append(str(min(ok)) if ok else "-")
        f13 = next(r for r in res["rows"] if r["fraction_bits"] == 13 and r["promote_every"] == 0)
        lines.append(f"| {res['network']} | {100 * res['float64_accuracy']:.2f}% | {100 * res['exact_accuracy']:.2f}% "
                     f"| {' / '.join(first)} | {f13['last_layer_rel_rms']:.4f} |")
    return "\n".join(lines)


def plot(results: list, path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 3.4))
    FigureCanvasAgg(fig)
    for i, res in enumerate(results):
        ax = fig.add_subplot(1, len(results), i + 1)
        for promote, style in zip(PROMOTE_EVERY, ("o-", "s--", "^:")):
            rows = [r for r in res["rows"] if r["promote_every"] == promote]
            ax.plot([r["fraction_bits"] for r in rows], [100 * r["accuracy"] for r in rows], style,
                    label=f"promote every {promote}" if promote else "never promoted")
        ax.axhline(100 * res["exact_accuracy"], color="grey", lw=0.8, label="exact accumulation")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("accumulator fraction_bits")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"FP8 E4M3 {res['network']}, {PRESET.split('-')[0]} wgmma")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="float-sweep-out", help="folder for the plot and the JSON results")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--networks", default="MLP,CNN")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    results = [sweep(n, args.epochs) for n in args.networks.split(",")]
    print(markdown(results))
    plot(results, os.path.join(args.out, "float_accumulator_sweep.png"))
    with open(os.path.join(args.out, "float_accumulator_sweep.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {args.out}/float_accumulator_sweep.png and .json")
    return results


if __name__ == "__main__":
    main()
