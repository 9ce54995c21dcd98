"""What accumulator does my NPU need?  The walk-through of docs/npu_accumulator.md, on an imported int8 MobileNetV2.

Run from the clone's root::

    python examples/npu_accumulator.py

It imports ``tests/vectors/mobilenet_v2/mobilenet_v2_035_48.tflite`` (made by the TF converter, see
``tools/fixtures/mobilenet_v2/make_model.py``), runs it on the 16 held-out images of
``tests/vectors/mobilenet_v2/eval_images.npz`` and prints, every number docs/npu_accumulator.md quotes:

1. the recommendation: :func:`fxpsim.sweep` of ``accumulator_bits`` for a saturating and for a wrapping
   accumulator, on the ``tflite-int8`` datapath (LiteRT's reference arithmetic, which the imported graph
   reproduces bit for bit), with the metric ``exact_fraction`` (the fraction of output codes bit-exact with the
   exact datapath: an accumulator that never overflows);
2. per MAC layer, **isolated** (each layer fed the exact datapath's tensors, :func:`fxpsim.node_sweep` and
   :func:`fxpsim.simulate`): the products per output ``K``, the bias register width its biases need, the
   worst case over every possible input (:meth:`IntegerGraph.accumulator_bits_needed`), the accumulator bits needed (every exact partial sum, the bias add included, fits), the width from which its
   outputs are bit-exact with a saturating and with a wrapping accumulator, and its overflowing adds at the
   recommended width and one bit narrower;
3. per MAC layer, **cumulative** (the network as configured: each layer fed what the layers before it computed
   at that width, :func:`fxpsim.simulate`) at the same two widths: overflowing adds, biases saturated into the
   accumulator, and the bits its partial sums needed;
4. the weights re-rounded so that a W-bit accumulator provably never overflows on any input
   (:func:`fxpsim.hardware.accumulator_guarantee.guarantee_accumulator`, A2Q's bound), for W = 21 and 16: what
   changed and how far the outputs move from the original graph's.
"""
from __future__ import annotations

import pathlib

import numpy as np

import fxpsim

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "vectors" / "mobilenet_v2" / "mobilenet_v2_035_48.tflite"
IMAGES = ROOT / "tests" / "vectors" / "mobilenet_v2" / "eval_images.npz"
CONFIG = "tflite-int8"
WIDTHS = range(16, 25)
MODES = ("saturate", "wrap")
GUARANTEED = (21, 16)          # accumulator widths made safe for every input by re-rounding the weights


def signed_bits(values) -> int:
    """Smallest two's-complement width holding every integer of ``values``."""
    lo, hi = int(np.min(values)), int(np.max(values))
    return max(hi.bit_length() if hi >= 0 else 0, (-lo - 1).bit_length() if lo < 0 else 0) + 1


def exact_from(result, node: str, mode: str) -> int | None:
    """Narrowest swept width from which the node's outputs (fed exact inputs) are bit-exact at every wider one."""
    best = None
    for width in sorted(WIDTHS, reverse=True):
        if result.record(node, width, mode)["not_exact_fraction"] != 0:
            break
        best = width
    return best


def analyse(graph, x) -> dict:
    """Every number of the walk-through, as plain Python values (what tests/hardware/test_npu_walkthrough.py reads)."""
    base = fxpsim.HardwareConfig.preset(CONFIG)
    out = {"recommendation": {}, "sweep": {}}
    for mode in MODES:
        res = fxpsim.sweep(graph, x, {"accumulator_bits": WIDTHS, "accumulator_overflow": [mode]}, config=base,
                           metric="exact_fraction", processes=1, progress=False)
        out["recommendation"][mode] = res.recommendation
        out["sweep"][mode] = [{k: r[k] for k in ("accumulator_bits", "exact_fraction", "max_lsb_error",
                                                 "overflow_count", "bias_clipped")} for r in res.records]
    rec = out["recommendation"]["saturate"]["accumulator_bits"]
    narrow = rec - 1
    out["widths"] = (narrow, rec)
    isolated = fxpsim.node_sweep(graph, x, widths=WIDTHS, overflows=MODES, datapath=base)
    reports = {(w, m): fxpsim.simulate(graph, base.replace(accumulator_bits=w, accumulator_overflow=m), x)
               for w in (narrow, rec) for m in MODES}
    layers = []
    for node in graph.nodes:
        if node.name not in isolated.exact_from:
            continue
        bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else np.zeros(1)
        by_report = {key: next(r for r in rep.layers if r.name == node.name) for key, rep in reports.items()}
        row = {"node": node.name, "op": node.op, "k": int(graph.macs(node) // np.prod(graph.tensors[node.outputs[0]].shape)),
               "bias_bits": signed_bits(bias),
               "bits_needed": by_report[(rec, "saturate")].acc_bits_needed,
               "worst_case_bits": graph.accumulator_bits_needed(node),
               "exact_from": {m: exact_from(isolated, node.name, m) for m in MODES},
               "isolated": {(w, m): isolated.record(node.name, w, m)["overflow_count"]
                            for w in (narrow, rec) for m in MODES},
               "cumulative": {key: r.overflow_count for key, r in by_report.items()},
               "cumulative_bias_clipped": {key: r.bias_clipped for key, r in by_report.items()},
               "cumulative_bits_needed": {key: r.acc_bits_needed_cumulative for key, r in by_report.items()}}
        layers.append(row)
    out["layers"] = layers
    out["bias_register_bits"] = max(r["bias_bits"] for r in layers)
    out["worst_case_bits"] = max(r["worst_case_bits"] for r in layers)
    out["exact_network"] = {key: rep.network["overflow_count"] for key, rep in reports.items()}
    out["guarantee"] = [guarantee(graph, x, bits) for bits in GUARANTEED]
    return out


def guarantee(graph, x, bits: int) -> dict:
    """The graph re-rounded so that a ``bits``-bit accumulator never overflows on any input
    (:func:`fxpsim.hardware.accumulator_guarantee.guarantee_accumulator`), run saturating at that width on the
    batch and compared with the original graph's exact outputs."""
    from fxpsim.hardware.accumulator_guarantee import guarantee_accumulator
    res = guarantee_accumulator(graph, bits)
    config = fxpsim.HardwareConfig.preset(CONFIG).replace(accumulator_bits=bits, accumulator_overflow="saturate")
    y, traces, _ = res.graph.run(x, config, trace=True, keep=True)
    want = graph.run(x)
    diff = np.abs(y.astype(np.int64) - want)
    return {"bits": bits, "nodes": sum(1 for r in res.records if r["channels_changed"]),
            "channels": sum(r["channels_changed"] for r in res.records),
            "alpha_max": max(r["alpha_max"] for r in res.records),
            "overflows": sum(t["overflows"] for t in traces.values()),
            "equal_fraction": float(np.mean(diff == 0)), "max_lsb_error": int(diff.max())}


def table(rows, header) -> str:
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows])


def render(a: dict, graph, x) -> str:
    """The walk-through's printout of :func:`analyse`'s numbers (docs/npu_accumulator.md quotes it verbatim)."""
    lines = []
    say = lines.append
    narrow, rec = a["widths"]
    n_mac = len(a["layers"])
    say(f"model: {MODEL.name}, {len(graph.nodes)} nodes, {n_mac} MAC layers; batch: {len(x)} images "
          f"({x.shape[1]}x{x.shape[2]}x{x.shape[3]} int8); datapath: {CONFIG} with the accumulator swept")
    say("")
    say("1. recommendation (metric exact_fraction: output codes bit-exact with the exact datapath)")
    for mode in MODES:
        r = a["recommendation"][mode]
        say(f"   {mode:8s}: accumulator_bits = {r['accumulator_bits']}")
    rows = []
    for mode in MODES:
        for p in a["sweep"][mode]:
            rows.append([mode, p["accumulator_bits"], f"{p['exact_fraction']:.4f}", p["max_lsb_error"],
                         p["overflow_count"], p["bias_clipped"]])
    say(table(rows, ["overflow", "W", "exact_fraction", "max |err| LSB", "overflows", "bias clipped"]))
    say(f"   bias register: {a['bias_register_bits']} bits hold every bias of the network")
    say("")
    say(f"2. per layer, isolated (fed the exact datapath's tensors); overflowing adds at W = {narrow} and {rec}")
    rows = [[r["node"], r["op"], r["k"], r["bias_bits"], r["worst_case_bits"], r["bits_needed"],
             r["exact_from"]["saturate"], r["exact_from"]["wrap"], r["isolated"][(narrow, "saturate")],
             r["isolated"][(rec, "saturate")], r["isolated"][(narrow, "wrap")], r["isolated"][(rec, "wrap")]]
            for r in a["layers"]]
    say(table(rows, ["layer", "op", "K", "bias", "worst", "needed", "sat exact", "wrap exact", f"sat@{narrow}",
                     f"sat@{rec}", f"wrap@{narrow}", f"wrap@{rec}"]))
    need = max(r["bits_needed"] for r in a["layers"])
    say(f"   any input: {a['worst_case_bits']} bits never overflow (worst case |b| + sum |w| max|x - z_x|)")
    say(f"   this batch: widest layer {need} bits needed; layers overflowing at {narrow} bits (saturate): "
        f"{sum(1 for r in a['layers'] if r['isolated'][(narrow, 'saturate')])} of {n_mac}")
    say("")
    say(f"3. per layer, cumulative (the network as configured) at W = {narrow} (layers with an overflow, a "
          f"clipped bias or more bits needed than isolated)")
    rows = []
    for r in a["layers"]:
        c, bc, cb = r["cumulative"], r["cumulative_bias_clipped"], r["cumulative_bits_needed"]
        if c[(narrow, "saturate")] or c[(narrow, "wrap")] or bc[(narrow, "saturate")] or \
                cb[(narrow, "saturate")] != r["bits_needed"]:
            rows.append([r["node"], c[(narrow, "saturate")], r["isolated"][(narrow, "saturate")],
                         c[(narrow, "wrap")], r["isolated"][(narrow, "wrap")], bc[(narrow, "saturate")],
                         cb[(narrow, "saturate")], r["bits_needed"]])
    say(table(rows, ["layer", "sat cum", "sat iso", "wrap cum", "wrap iso", "bias clipped", "needed cum (sat)",
                     "needed iso"]))
    say("   network overflows (cumulative): " + ", ".join(
        f"{m}@{w} = {a['exact_network'][(w, m)]}" for w in (narrow, rec) for m in MODES))
    say("")
    say(f"4. weights re-rounded so that W bits never overflow on any input (A2Q bound; the original needs "
        f"{a['worst_case_bits']}), run saturating at W, against the original graph's exact outputs")
    rows = [[gr["bits"], gr["nodes"], gr["channels"], f"{gr['alpha_max']:.2f}", gr["overflows"],
             f"{gr['equal_fraction']:.4f}", gr["max_lsb_error"]] for gr in a["guarantee"]]
    say(table(rows, ["W", "layers changed", "channels changed", "max alpha", "overflows", "codes equal",
                     "max |err| LSB"]))
    return "\n".join(lines)


def main():
    graph = fxpsim.import_model(MODEL)
    x = np.load(IMAGES)["x"]
    print(render(analyse(graph, x), graph, x))


if __name__ == "__main__":
    main()
