"""Train for the datapath you have: overflow-aware QAT, the l1-constrained (A2Q) network and a mixed-precision
search on the digits CNN, against plain QAT, on held-out digits (every run seeded).

The network is the digits CNN of ``fxpsim demo`` (conv 16, pool, conv 32, pool, dense 10) with 8-bit weights and
activations (the ``int8`` QAT scheme: fake quantization with learnable ranges), the target the
``int8-acc16-sat`` preset (8-bit per-channel weights, int8 activations, bias preloaded, TFLite single-rounding
requantization) with the accumulator width and overflow mode varied. The training split is cut into 1,077
training and 360 validation images (the search decides on the validation images); every accuracy reported is
on the 360 test images, computed bit for bit on the converted integer graph.

* float: the same CNN without quantizers;
* plain QAT: trained without the accumulator, then run on each accumulator;
* overflow-aware QAT: trained from the same initial weights through each target accumulator
  (:func:`fxpsim.hardware.qat.datapath_aware`, ``overflow_grad="mask"``, overflow penalty 3 with margin
  0.75), one network per width and mode;
* constrained (A2Q): :func:`fxpsim.quant.accumulator_aware.constrain_accumulators` for each width, checked
  for zero overflow events on every output's adversarial input on the exact datapath;
* mixed precision: :func:`fxpsim.hardware.mixed_precision.search` for per-node weight/activation widths at float - 1
  point on the validation images (``--search-margin`` adds a safety margin: 360 images resolve 0.28 points),
  against the cheapest uniform configuration that meets the same target.

Writes ``OUT/overflow_aware.png`` (accuracy against accumulator width, 12..20 bits in steps of 2, the three
methods on the same axes, saturating solid and wrapping dashed), ``OUT/search.png``, ``OUT/sensitivity.png`` and
``OUT/overflow_aware.json``, and prints the goal table (Markdown) and a digest of every number in it.

    python examples/overflow_aware.py --out overflow_out [--epochs 10]

17 networks are trained (float, plain QAT, 10 overflow-aware, 5 constrained); a progress bar counts their epochs
(951 s on the 2-core project machine shared with eight other jobs, 325 s on a lighter load; the README's table is
that run's output, digest ``13684c152610620b`` under other BLAS kernels too).
Every number is the same on every machine: the layers multiply with :func:`fxpsim.nn.repro.matmul`, whose
sums are exact, so neither the BLAS kernel (AVX2 / AVX-512) nor its thread count changes a bit, and every
random choice is seeded.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import os
import threading
import time

import numpy as np
from tqdm import tqdm

from fxpsim.datapath.accumulate import matmul
from fxpsim.hardware import convert, preset, sweep
from fxpsim.hardware.mixed_precision import search, sensitivity
from fxpsim.nn import quantization_scheme, small_cnn
from fxpsim.hardware.qat import datapath_aware
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, CosineLR, evaluate, fit
from fxpsim.quant.accumulator_aware import constrain_accumulators, worst_case_sums

WIDTHS = list(range(12, 21, 2))
MODES = ("saturate", "wrap")
BASE = "int8-acc16-sat"


def target(bits, mode):
    """The target with a ``bits``-bit accumulator (and bias register) in overflow ``mode``."""
    return preset(BASE).replace(accumulator_bits=bits, bias_bits=min(bits, 16), accumulator_overflow=mode)


def train(model, data, epochs, seed, bar=None, what=""):
    """``epochs`` of Adam with cosine decay, batch 32; ``bar`` (tqdm) advances by one per epoch."""
    if bar is not None:
        bar.set_postfix_str(what)
    fit(model, data, epochs, 32, Adam(CosineLR(3e-3, epochs, 1.5e-4)), seed=seed, progress=False,
        callback=None if bar is None else (lambda epoch, history: bar.update(1)))
    return model


def hardware(model, config, calib, x, y):
    """(test accuracy, overflow events) of ``model`` converted for ``config``, bit for bit."""
    codes, traces, _ = convert(model, config, calib).run(x, config, trace=True)
    return float(np.mean(codes.argmax(axis=1) == y)), int(sum(t["overflows"] for t in traces.values()))


def worst_case_overflows(graph, bits):
    """Overflow events of every MAC node on every output's adversarial input (both modes, both orders)."""
    total = 0
    for node in graph.nodes:
        if node.op not in ("conv2d", "fully_connected"):
            continue
        xs, ws, bs = (graph.tensors[t] for t in node.inputs)
        w = (ws.data.astype(np.int64) - ws.zero_point.reshape(-1, *[1] * (ws.data.ndim - 1)))
        w = w.reshape(w.shape[0], -1).T
        lo, hi = xs.code_range
        z = int(xs.zero_point[0])
        rows = worst_case_sums(w, bs.data, lo - z, hi - z)
        init = np.broadcast_to(bs.data.astype(np.int64), (rows.shape[0], w.shape[1]))
        for mode in MODES:
            for order in ("sequential", "tree"):
                total += matmul(rows, w, bits, overflow=mode, order=order, init=init).overflows
    return int(total)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="overflow_out")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--penalty", type=float, default=3.0)
    parser.add_argument("--margin", type=float, default=0.75)
    parser.add_argument("--search-margin", type=float, default=0.0,
                        help="accuracy margin above float - 1 point that the search keeps on the validation images")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1, got {args.epochs}")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    x_all, y_all = load_digits("train", seed=args.seed)
    order = np.random.default_rng(args.seed).permutation(len(y_all))
    tr, va = order[360:], order[:360]
    data, (xv, yv) = (x_all[tr], y_all[tr]), (x_all[va], y_all[va])
    xt, yt = load_digits("test", seed=args.seed)
    calib = data[0][:500]
    e, seed = args.epochs, args.seed
    results = {"epochs": e, "seed": seed, "base": BASE, "widths": WIDTHS}
    bar = tqdm(total=e * (2 + 3 * len(WIDTHS)), unit="epoch", desc="training", disable=args.no_progress,
               mininterval=1.0)
    say = bar.write

    float_model = train(small_cnn((8, 8, 1), seed=seed), data, e, seed, bar, "float")
    f_test, f_val = evaluate(float_model, xt, yt)["accuracy"], evaluate(float_model, xv, yv)["accuracy"]
    results["float"] = {"test": f_test, "validation": f_val}
    say(f"float: test {f_test:.4f} (validation {f_val:.4f})")

    init = small_cnn((8, 8, 1), seed=seed, **quantization_scheme("int8"))
    plain = train(copy.deepcopy(init), data, e, seed, bar, "plain QAT")
    grid = sweep(plain, (xt, yt), {"accumulator_bits": WIDTHS, "accumulator_overflow": list(MODES)},
                 config=target(16, "saturate"), calibration_x=calib, processes=1, progress=False)
    results["plain"] = {m: [r["accuracy"] for r in grid.records if r["accumulator_overflow"] == m] for m in MODES}
    say(f"plain QAT: { {m: [round(a, 3) for a in v] for m, v in results['plain'].items()} }")

    results["aware"] = {m: [] for m in MODES}
    for mode in MODES:
        for bits in WIDTHS:
            model = copy.deepcopy(init)
            train(datapath_aware(model, target(bits, mode), calibration_x=calib, overflow_penalty=args.penalty,
                                 penalty_margin=args.margin), data, e, seed, bar, f"overflow-aware {bits} {mode}")
            results["aware"][mode].append(hardware(model, target(bits, mode), calib, xt, yt)[0])
        say(f"overflow-aware QAT ({mode}): {[round(a, 3) for a in results['aware'][mode]]}")

    results["a2q"] = []
    for bits in WIDTHS:
        model = copy.deepcopy(init)
        constrain_accumulators(model, bits, calibration_x=calib)
        train(model, data, e, seed, bar, f"A2Q {bits}")
        acc, ovf = {}, 0
        for mode in MODES:
            acc[mode], n = hardware(model, target(bits, mode), calib, xt, yt)
            ovf += n
        worst = worst_case_overflows(convert(model, target(bits, "wrap"), calib), bits)
        results["a2q"].append({"bits": bits, "accuracy": acc["saturate"], "accuracy_wrap": acc["wrap"],
                               "test_overflows": ovf, "worst_case_overflows": worst})
    say(f"A2Q: {[(r['bits'], round(r['accuracy'], 3), r['worst_case_overflows']) for r in results['a2q']]}")
    bar.close()

    # mixed precision on the plain QAT network (accumulators wide: bit-ops count weights x activations)
    stage = tqdm(total=2, desc="mixed precision", unit="step", disable=args.no_progress)
    with _heartbeat(stage):
        base = preset(BASE).replace(accumulator_bits=32, bias_bits=32)
        cands = {"weight_bits": (8, 6, 5, 4, 3), "activation_bits": (8, 6, 5, 4, 3), "accumulator_bits": (32,)}
        sens = sensitivity(plain, (xv, yv), base, {"weight_bits": (6, 4, 3), "activation_bits": (6, 4, 3),
                                                     "accumulator_bits": (18, 16, 14)}, calibration_x=calib)
        sens.plot(os.path.join(args.out, "sensitivity.png"))
        stage.update(1)
        goal = f_val - 0.01 + args.search_margin
        found = search(plain, (xv, yv), target=goal, candidates=cands, config=base, calibration_x=calib)
        found.plot(os.path.join(args.out, "search.png"))
        best = found.best_uniform
        uni_cfg = None if best is None else base.replace(weight_bits=best["weight_bits"],
                                                         activation_bits=best["activation_bits"])
        mixed_test = hardware(plain, found.config, calib, xt, yt)[0]
        uni_test = hardware(plain, uni_cfg, calib, xt, yt)[0] if uni_cfg is not None else None
        results["search"] = {"target_validation": goal, "layers": found.layers, "bit_ops": found.costs["bit_ops"],
                             "validation": found.accuracy, "test": mixed_test, "saving": found.saving,
                             "best_uniform": None if best is None else {
                                 "weight_bits": best["weight_bits"], "activation_bits": best["activation_bits"],
                                 "bit_ops": best["bit_ops"], "validation": best["accuracy"], "test": uni_test},
                             "sensitivity": sens.records}
        stage.update(1)
    print(found.table(), flush=True)

    plot(results, f_test, os.path.join(args.out, "overflow_aware.png"))
    digest = hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()[:16]
    results["digest"] = digest
    results["seconds"] = time.perf_counter() - t0
    with open(os.path.join(args.out, "overflow_aware.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    print()
    print(goal_table(results))
    print(f"\ndigest of every number: {digest} ({results['seconds']:.0f} s; figures and numbers in {args.out}/)")
    return 0


@contextlib.contextmanager
def _heartbeat(bar, every=5.0):
    """Redraw ``bar`` (its elapsed time) every ``every`` seconds while the block runs, so a long step without
    updates of its own never looks hung; the bar is closed at the end."""
    done = threading.Event()

    def beat():
        while not done.wait(every):
            bar.refresh()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        done.set()
        thread.join()
        bar.close()


def _at(values, bits):
    return values[WIDTHS.index(bits)]


def goal_table(r) -> str:
    f = r["float"]["test"]
    a2q16 = next(x for x in r["a2q"] if x["bits"] == 16)
    s = r["search"]
    best = s["best_uniform"]
    rows = [
        ("8-bit W/A CNN within 1 point of float with a 16-bit **saturating** accumulator",
         f"plain QAT {_at(r['plain']['saturate'], 16):.1%} -> overflow-aware {_at(r['aware']['saturate'], 16):.1%}",
         _at(r["aware"]["saturate"], 16) >= f - 0.01),
        ("the same with a 16-bit **wrapping** accumulator",
         f"plain QAT {_at(r['plain']['wrap'], 16):.1%} -> overflow-aware {_at(r['aware']['wrap'], 16):.1%}",
         _at(r["aware"]["wrap"], 16) >= f - 0.01),
        ("stretch: within 1 point at 14 bits, either mode",
         f"saturate {_at(r['aware']['saturate'], 14):.1%}, wrap {_at(r['aware']['wrap'], 14):.1%} "
         f"(plain {_at(r['plain']['saturate'], 14):.1%} / {_at(r['plain']['wrap'], 14):.1%})",
         max(_at(r["aware"]["saturate"], 14), _at(r["aware"]["wrap"], 14)) >= f - 0.01),
        ("the l1-constrained network: zero overflows on worst-case inputs at 16 bits, accuracy within 2 points",
         f"{a2q16['worst_case_overflows']} worst-case / {a2q16['test_overflows']} test overflows, "
         f"{a2q16['accuracy']:.1%}",
         a2q16["worst_case_overflows"] == 0 and a2q16["test_overflows"] == 0 and a2q16["accuracy"] >= f - 0.02),
        ("mixed-precision search: float-1 point accuracy at >= 20% fewer bit-ops than the best uniform config",
         "no uniform config meets the target" if best is None else
         f"{s['test']:.1%} at {s['bit_ops']:,} bit-ops vs uniform W{best['weight_bits']}A{best['activation_bits']} "
         f"{best['test']:.1%} at {best['bit_ops']:,} ({100 * (s['saving'] or 0):.0f}% fewer)",
         best is not None and s["test"] >= f - 0.01 and (s["saving"] or 0) >= 0.2),
    ]
    lines = [f"float accuracy (test): {f:.1%}", "", "| goal | measured (test) | met |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'yes' if ok else 'no'} |" for g, m, ok in rows]
    return "\n".join(lines)


def plot(r, float_acc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for mode, style in (("saturate", "-"), ("wrap", "--")):
        ax.plot(WIDTHS, [100 * a for a in r["plain"][mode]], style, c="C7", marker="o", ms=4,
                label=f"plain QAT ({mode})")
        ax.plot(WIDTHS, [100 * a for a in r["aware"][mode]], style, c="C0", marker="s", ms=4,
                label=f"overflow-aware QAT ({mode})")
    ax.plot(WIDTHS, [100 * x["accuracy"] for x in r["a2q"]], "-", c="C3", marker="^", ms=5,
            label="l1-constrained (A2Q), no overflow")
    ax.axhline(100 * float_acc, c="k", ls=":", lw=1, label="float")
    ax.axhline(100 * float_acc - 1, c="k", ls=":", lw=0.6, alpha=0.5)
    ax.set_xlabel("accumulator bits")
    ax.set_ylabel("test accuracy (%)")
    ax.set_xticks(WIDTHS)
    ax.set_ylim(0, 101)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Digits CNN, 8-bit weights and activations, on a narrow accumulator")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
