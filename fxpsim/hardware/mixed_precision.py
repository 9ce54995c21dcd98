"""Mixed precision: per-node sensitivity and a search for per-node weight / activation / accumulator widths.

:func:`sensitivity` lowers one MAC node at a time -- its weight width, its output activation width, or its
accumulator -- while every other node stays at the reference (the base configuration's widths with exact
accumulators), and reports the accuracy of each (AIMET's QuantAnalyzer does this for widths; the accumulator
is the axis it lacks). :func:`search` then picks a width per node and per axis under a cost budget and/or an
accuracy target, and returns a :class:`HardwareConfig` with per-node overrides (``layers=``) together with the
uniform configurations it beats and both Pareto fronts.

Both run every evaluation through :func:`fxpsim.hardware.sweep` (a grid over the config's ``layers`` field), so
they run on local processes or any :class:`concurrent.futures.Executor` given as ``executor=``, exactly like a
sweep, and every record holds what :func:`~fxpsim.hardware.simulate` reports for the network.

Costs of a configuration, summed over the MAC nodes :math:`n` (``graph.macs``):

``"bit_ops"``
    :math:`\\sum_n \\mathrm{MACs}_n\\, b_{w,n}\\, b_{x,n}`, weight bits times input activation bits (the input of a
    node is the previous MAC node's output width, or the network input's); what reports call ``bit_ops``.
``"acc_bit_macs"``
    :math:`\\sum_n \\mathrm{MACs}_n\\, P_n`, accumulator bits times MACs (adder area/energy).

The search (greedy, measured): start with every node at the widest candidate of every axis; each round
evaluates every single step down (one node, one axis, to the next narrower candidate), keeps the steps whose
accuracy stays at or above ``target`` (if given), and takes the one that loses the least accuracy per unit of
cost saved (ties: the larger saving); when none keeps the target, it tries exchanges (one axis a step up,
another a step down, cheaper overall; ``refine=True``) the same way; stop when the cost is within ``budget``
(if given, and no ``target``) or nothing is left. Configurations are evaluated once each, and every one is
kept: the result is the most accurate one within the budget, or the cheapest one meeting the target, and the
mixed Pareto front (accuracy against cost) comes from all of them. The uniform grid (the product of the
candidates, every node alike) is evaluated for comparison.

Per-node overrides need ``HardwareConfig(layers=...)`` (:meth:`HardwareConfig.with_layer`); where the installed
:class:`HardwareConfig` has no ``layers`` field, :func:`search` and :func:`sensitivity` raise
:class:`NotImplementedError`, and results always carry the plain per-node dict in ``SearchResult.layers`` too.
"""
from __future__ import annotations

import dataclasses
import math
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .config import HardwareConfig, load_config
from .conversion import convert
from .simulation import exact_datapath
from .sweeps import pareto_front, sweep

__all__ = ["sensitivity", "search", "SensitivityResult", "SearchResult", "mac_nodes", "configuration_cost",
           "DEFAULT_CANDIDATES", "COSTS"]

DEFAULT_CANDIDATES = {"weight_bits": (8, 6, 5, 4), "activation_bits": (8, 6, 5, 4),
                      "accumulator_bits": (32, 20, 18, 16, 14, 12)}
COSTS = ("bit_ops", "acc_bit_macs")
_AXES = ("weight_bits", "activation_bits", "accumulator_bits")


def _require_layers():
    if "layers" not in {f.name for f in dataclasses.fields(HardwareConfig)}:
        raise NotImplementedError("per-node widths need HardwareConfig(layers=...), which this fxpsim does not have")


def _data(data):
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError("data must be x or a pair (x, y)")
        return data[0], data[1]
    return data, None


def _candidates(candidates) -> dict:
    cands = dict(DEFAULT_CANDIDATES if candidates is None else candidates)
    bad = sorted(set(cands) - set(_AXES))
    if bad:
        raise ValueError(f"candidates: unknown axis {', '.join(bad)}; allowed: {', '.join(_AXES)}")
    out = {}
    for axis, values in cands.items():
        values = sorted({int(v) for v in values}, reverse=True)
        if not values:
            raise ValueError(f"candidates: axis {axis!r} has no values")
        out[axis] = tuple(values)
    return out


def _is_graph(model) -> bool:
    from ..graph.ir import IntegerGraph
    return isinstance(model, IntegerGraph)


def mac_nodes(model, config, calibration_x) -> list[dict]:
    """The MAC nodes of ``model`` converted for ``config`` (an :class:`~fxpsim.graph.IntegerGraph` as it is):
    ``[{"name", "op", "macs", "index"}]`` in run order -- the core MAC ops and every importer op with a MAC view
    (:mod:`fxpsim.graph.mac_view`)."""
    from ..graph.mac_view import MAC_VIEWS
    from ..graph.registry import find_op
    graph = model if _is_graph(model) else convert(model, config, calibration_x)
    for nd in graph.nodes:
        find_op(nd.op)                  # loads the op's frontend, which registers its MAC view
    return [{"name": nd.name, "op": nd.op, "macs": int(graph.macs(nd)), "index": i}
            for i, nd in enumerate(graph.nodes)
            if nd.op in ("fully_connected", "conv2d", "depthwise_conv2d") or nd.op in MAC_VIEWS]


def _graph_candidates(model, cands: dict) -> dict:
    """An IntegerGraph keeps the widths it was built with: only the accumulator axis can be lowered."""
    if not _is_graph(model):
        return cands
    fixed = sorted(set(cands) - {"accumulator_bits"})
    if fixed:
        raise ValueError(f"candidates: {', '.join(fixed)} cannot change on an IntegerGraph (its weights and "
                         "activations are the model's own codes); give accumulator_bits only")
    return cands


def configuration_cost(nodes: Sequence[dict], settings: Mapping[str, Mapping[str, int]], base: HardwareConfig,
                       cost: str = "bit_ops") -> int:
    """Cost of per-node ``settings`` (``{node: {axis: bits}}``; missing axes: ``base``'s) -- see the module
    docstring. The first node's input width is the base's activation width (the network input)."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {COSTS}, got {cost!r}")
    total, x_bits = 0, base.activation_bits
    for nd in nodes:
        s = settings.get(nd["name"], {})
        w = s.get("weight_bits", base.weight_bits)
        p = s.get("accumulator_bits", base.accumulator_bits)
        total += nd["macs"] * (w * x_bits if cost == "bit_ops" else p)
        x_bits = s.get("activation_bits", base.activation_bits)
    return int(total)


def _evaluate(model, data, base, points: list[dict], calibration_x, executor, processes) -> list[dict]:
    """Records of ``base`` with each per-node override mapping of ``points`` (one sweep)."""
    if not points:
        return [], None
    result = sweep(model, data, {"layers": points}, config=base, calibration_x=calibration_x, executor=executor,
                   processes=processes, progress=False)
    return result.records, result.float_accuracy


# ----------------------------------------------------------------------------------------- sensitivity
@dataclass
class SensitivityResult:
    """Per-node, per-axis accuracy with one node lowered (``records``: node, op, macs, axis, bits, accuracy,
    drop against the reference) and the reference's and float model's accuracy."""

    records: list
    reference_accuracy: float | None
    float_accuracy: float | None
    reference: Any = None
    metric: str = "accuracy"

    def table(self) -> str:
        from ..report.render import format_table
        cols = ["node", "op", "macs", "axis", "bits", self.metric, "drop"]
        return format_table([[r.get(c) for c in cols] for r in self.records], cols)

    def worst(self, n: int = 5) -> list:
        """The ``n`` settings that cost the most accuracy."""
        return sorted(self.records, key=lambda r: -(r["drop"] or 0))[:n]

    def plot(self, path=None):
        """Accuracy drop of each node (groups) for each lowered setting (bars); saved as PNG when ``path``."""
        from ..report.plots import _figure
        fig = _figure(8.0, 3.8)
        ax = fig.add_subplot()
        nodes = list(dict.fromkeys(r["node"] for r in self.records))
        settings = list(dict.fromkeys((r["axis"], r["bits"]) for r in self.records))
        width = 0.8 / max(len(settings), 1)
        short = {"weight_bits": "W", "activation_bits": "A", "accumulator_bits": "acc"}
        for j, (axis, bits) in enumerate(settings):
            vals = [next((100 * r["drop"] for r in self.records if r["node"] == n and r["axis"] == axis
                          and r["bits"] == bits), math.nan) for n in nodes]
            ax.bar(np.arange(len(nodes)) + (j - (len(settings) - 1) / 2) * width, vals, width,
                   label=f"{short.get(axis, axis)}{bits}")
        ax.set_xticks(np.arange(len(nodes)), nodes)
        ax.set_ylabel(f"{self.metric} drop (points)")
        ax.set_title("Sensitivity: one node lowered, the rest at the reference (exact accumulators)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if path is not None:
            fig.savefig(path, dpi=120, bbox_inches="tight")
        return fig


def sensitivity(model, data, config="int8-acc16-sat", candidates=None, *, calibration_x=None,
                executor: Executor | None = None, processes: int | None = 1) -> SensitivityResult:
    """Accuracy with one MAC node at a time lowered to each candidate width, the others at the reference.

    The reference is ``config`` with exact accumulators everywhere (:func:`~fxpsim.hardware.simulation.
    exact_datapath`: the widths of ``config``, an accumulator that cannot overflow); ``candidates`` maps
    ``weight_bits`` / ``activation_bits`` / ``accumulator_bits`` to the widths to try (default
    :data:`DEFAULT_CANDIDATES`; widths at or above the reference's are skipped).
    ``executor`` / ``processes`` as in :func:`fxpsim.hardware.sweep` (default: this process).

    ``model`` may be an imported or loaded :class:`~fxpsim.graph.IntegerGraph` (post-training): its MAC nodes
    (core and importer ops) get the accumulator axis (the default candidates there), and the metric without
    labels is ``exact_fraction``, the fraction of output codes equal to the exact datapath's.
    """
    _require_layers()
    base = load_config(config)
    _refuse_float(model, base, "sensitivity")
    reference = exact_datapath(base)
    cands = _graph_candidates(model, _candidates(
        {"accumulator_bits": DEFAULT_CANDIDATES["accumulator_bits"]} if candidates is None and _is_graph(model)
        else candidates))
    x, y = _data(data)
    calib = x if calibration_x is None else calibration_x
    nodes = mac_nodes(model, reference, calib)
    points, keys = [{}], [None]
    for nd in nodes:
        for axis, values in cands.items():
            for bits in values:
                if bits >= getattr(reference, axis):
                    continue
                points.append({nd["name"]: {axis: bits}})
                keys.append((nd, axis, bits))
    records, float_acc = _evaluate(model, (x, y), reference, points, calib, executor, processes)
    # without labels: an IntegerGraph is judged by the fraction of its output codes bit-exact with the exact
    # datapath (top-1 agreement with float cannot tell a detector's or a regressor's widths apart)
    metric = "accuracy" if y is not None else ("exact_fraction" if _is_graph(model) else "agreement")
    ref_acc = records[0][metric]
    out = []
    for key, rec in zip(keys[1:], records[1:]):
        nd, axis, bits = key
        out.append({"node": nd["name"], "op": nd["op"], "macs": nd["macs"], "axis": axis, "bits": bits,
                    metric: rec[metric], "drop": ref_acc - rec[metric], "overflow_count": rec["overflow_count"]})
    return SensitivityResult(out, ref_acc, float_acc, reference, metric)


def _refuse_float(model, base, what: str) -> None:
    """``what`` lowers integer widths one node at a time: a float datapath or float graph has none to lower."""
    from ..graph.extract import FloatGraph
    from .float_config import is_float_datapath
    if is_float_datapath(base) or isinstance(model, FloatGraph):
        raise ValueError(f"{what} lowers integer weight/activation/accumulator widths; a float datapath or float "
                         f"graph has none: sweep its accumulator with fxpsim.sweep(model, data, grid="
                         f"{{'accumulator.fraction_bits': [...], 'promote_every': [...]}}, config=...)")


# ----------------------------------------------------------------------------------------- search
@dataclass
class SearchResult:
    """What :func:`search` found.

    ``config``: the chosen :class:`HardwareConfig` (per-node overrides in ``config.layers``); ``layers``: the
    same per-node settings as a plain dict; ``accuracy`` / ``costs`` of the choice (``accuracy`` holds the value
    of ``metric``: task accuracy, or ``exact_fraction`` on an unlabelled IntegerGraph); ``uniform``: records of the
    uniform configurations; ``evaluated``: every mixed configuration tried (``layers``, accuracy, costs);
    ``pareto_uniform`` / ``pareto_mixed``: the fronts (cost against accuracy); ``best_uniform``: the uniform
    record the choice is compared with (the cheapest meeting ``target``, or the most accurate within
    ``budget``); ``feasible``: False when no configuration tried met the target within the budget (the choice
    is then the most accurate one within the budget); ``history``: the greedy path (``step``: node, axis, bits).
    """

    config: Any
    layers: dict
    accuracy: float
    costs: dict
    cost: str
    uniform: list
    evaluated: list
    pareto_uniform: list
    pareto_mixed: list
    best_uniform: dict | None
    float_accuracy: float | None
    target: float | None = None
    budget: float | None = None
    history: list = field(default_factory=list)
    feasible: bool = True
    metric: str = "accuracy"

    @property
    def saving(self) -> float | None:
        """Fraction of the best uniform configuration's cost saved by the choice (None without one)."""
        if self.best_uniform is None:
            return None
        return 1.0 - self.costs[self.cost] / self.best_uniform[self.cost]

    def table(self) -> str:
        from ..report.render import format_table
        rows = [[name, *(s.get(a) for a in _AXES)] for name, s in self.layers.items()]
        text = format_table(rows, ["node", *_AXES])
        best = self.best_uniform
        text += (f"\nchosen: {self.metric} {self.accuracy:.4f}, {self.cost} {self.costs[self.cost]:,}"
                 + ("" if best is None else
                    f"; best uniform (W{best['weight_bits']} A{best['activation_bits']} "
                    f"acc{best['accumulator_bits']}): "
                    f"{self.metric} {best['accuracy']:.4f}, {self.cost} {best[self.cost]:,} "
                    f"({100 * self.saving:.1f}% saved)"))
        return text

    def plot(self, path=None):
        """Accuracy against cost: uniform configurations (and their front), mixed ones tried (and their front),
        the choice; saved as PNG when ``path``."""
        from ..report.plots import _figure
        fig = _figure(6.4, 4.2)
        ax = fig.add_subplot()
        key = self.cost
        ax.scatter([r[key] for r in self.uniform], [100 * r["accuracy"] for r in self.uniform], s=10, c="0.7",
                   label="uniform")
        ax.plot([r[key] for r in self.pareto_uniform], [100 * r["accuracy"] for r in self.pareto_uniform], "o-",
                c="0.35", ms=3, label="uniform Pareto front")
        ax.scatter([r[key] for r in self.evaluated], [100 * r["accuracy"] for r in self.evaluated], s=8, c="C0",
                   alpha=0.4, label="mixed (tried)")
        ax.plot([r[key] for r in self.pareto_mixed], [100 * r["accuracy"] for r in self.pareto_mixed], "s-",
                c="C0", ms=3, label="mixed Pareto front")
        ax.scatter([self.costs[key]], [100 * self.accuracy], marker="*", s=160, c="C3", zorder=5, label="chosen")
        if self.target is not None:
            ax.axhline(100 * self.target, ls=":", c="C3", lw=1, label="target")
        if self.float_accuracy is not None:
            ax.axhline(100 * self.float_accuracy, ls="--", c="k", lw=0.8, label="float")
        ax.set_xscale("log")
        ax.set_xlabel(key.replace("_", " "))
        ax.set_ylabel(f"{self.metric} (%)")
        lo = min([100 * r["accuracy"] for r in self.pareto_mixed + self.pareto_uniform] + [100 * self.accuracy])
        ax.set_ylim(max(lo - 5, 0), 100.5)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title("Mixed-precision search against uniform configurations")
        if path is not None:
            fig.savefig(path, dpi=120, bbox_inches="tight")
        return fig


def _record(layers, rec, nodes, base, metric: str = "accuracy") -> dict:
    out = {"layers": {n: dict(s) for n, s in layers.items()}, "accuracy": rec[metric],
           "overflow_count": rec["overflow_count"]}
    for c in COSTS:
        out[c] = configuration_cost(nodes, layers, base, c)
    return out


def search(model, data, budget: float | None = None, candidates=None, *, target: float | None = None,
           cost: str = "bit_ops", config="int8-acc16-sat", calibration_x=None, executor: Executor | None = None,
           processes: int | None = 1, max_rounds: int = 200, refine: bool = True) -> SearchResult:
    """Per-node weight / activation / accumulator widths under a cost ``budget`` and/or an accuracy ``target``.

    Parameters
    ----------
    model : fxpsim.nn.Sequential or IntegerGraph
        An imported or loaded graph searches the accumulator axis only (its widths are its own); without
        labels its metric is ``exact_fraction`` (output codes equal to the exact datapath's).
    data : (x, y), or x for an IntegerGraph
        The data the choices are made on (a validation split: report accuracy on data not used here).
    budget : float, optional
        Largest allowed cost (in ``cost`` units); the result is the most accurate configuration found within it.
    candidates : mapping axis -> widths, optional
        ``weight_bits``, ``activation_bits``, ``accumulator_bits`` (default :data:`DEFAULT_CANDIDATES`).
    target : float, optional
        Smallest acceptable accuracy; the result is the cheapest configuration found that meets it (within
        ``budget`` too, if given). At least one of ``budget`` and ``target`` is needed.
    cost : {"bit_ops", "acc_bit_macs"}
    config : the base configuration (preset name, path, mapping or HardwareConfig): every other setting.
    executor, processes : as :func:`fxpsim.hardware.sweep` (default: this process).
    max_rounds : int
        Greedy rounds at most.
    refine : bool
        With a ``target``: when no single step down keeps it, try exchanges (one node/axis one step up,
        another one step down, cheaper overall) before stopping.

    Returns
    -------
    SearchResult
    """
    _require_layers()
    if budget is None and target is None:
        raise ValueError("search: give a cost budget, an accuracy target, or both")
    if cost not in COSTS:
        raise ValueError(f"search: cost must be one of {COSTS}, got {cost!r}")
    base = load_config(config)
    _refuse_float(model, base, "search")
    cands = _candidates(candidates)
    x, y = _data(data)
    if y is None and not _is_graph(model):
        raise ValueError("search: data must be (x, y) with labels")
    metric = "accuracy" if y is not None else "exact_fraction"
    cands = _graph_candidates(model, cands)
    calib = x if calibration_x is None else calibration_x
    nodes = mac_nodes(model, base, calib)

    # the uniform grid
    grid = {axis: list(values) for axis, values in cands.items()}
    uni = sweep(model, (x, y), grid, config=base, calibration_x=calib, executor=executor, processes=processes,
                progress=False)
    float_acc = uni.float_accuracy
    uniform = []
    for rec in uni.records:
        setting = {axis: rec[axis] for axis in cands}
        layers = {nd["name"]: dict(setting) for nd in nodes}
        uniform.append({**{a: rec.get(a, getattr(base, a)) for a in _AXES}, **_record(layers, rec, nodes, base,
                                                                                        metric)})

    # greedy descent from the widest setting (then exchanges: one axis up, another down, cheaper overall)
    seen: dict = {}

    def key(layers):
        return tuple(sorted((n, tuple(sorted(v.items()))) for n, v in layers.items()))

    def run(configs):
        todo = [c for c in configs if key(c) not in seen]
        recs, _ = _evaluate(model, (x, y), base, todo, calib, executor, processes)
        for c, rec in zip(todo, recs):
            seen[key(c)] = _record(c, rec, nodes, base, metric)
            evaluated.append(seen[key(c)])
        return [seen[key(c)] for c in configs]

    def step(layers, name, axis, delta):
        values = cands[axis]
        i = values.index(layers[name][axis]) + delta
        if not 0 <= i < len(values):
            return None
        new = {n: dict(v) for n, v in layers.items()}
        new[name][axis] = values[i]
        return new

    evaluated: list = []
    current = {nd["name"]: {axis: values[0] for axis, values in cands.items()} for nd in nodes}
    state = run([current])[0]
    history = [dict(state, step=None)]
    axes = [(nd["name"], axis) for nd in nodes for axis in cands]
    for _ in range(max_rounds):
        if budget is not None and target is None and state[cost] <= budget:
            break
        moves = [((n, a, -1), m) for n, a in axes if (m := step(current, n, a, +1)) is not None]
        tries = [moves]
        if refine and target is not None:
            tries.append([((n, a, "up", n2, a2), m2) for n, a in axes for n2, a2 in axes if (n, a) != (n2, a2)
                          and (m := step(current, n, a, -1)) is not None
                          and (m2 := step(m, n2, a2, +1)) is not None
                          and configuration_cost(nodes, m2, base, cost) < state[cost]])
        options = []
        for moves in tries:
            if not moves:
                continue
            for (label, layers), r in zip(moves, run([m for _, m in moves])):
                saved = state[cost] - r[cost]
                if saved <= 0 or (target is not None and r["accuracy"] < target):
                    continue
                options.append(((state["accuracy"] - r["accuracy"]) / saved, -saved, label, layers, r))
            if options:
                break
        if not options:
            break
        options.sort(key=lambda o: (o[0], o[1]))
        _, _, label, current, state = options[0]
        history.append(dict(state, step=label))

    def ok(r):
        return (budget is None or r[cost] <= budget) and (target is None or r["accuracy"] >= target)

    feasible = [r for r in evaluated if ok(r)]
    if not feasible:          # nothing meets the constraints: the closest (most accurate within the budget)
        within = [r for r in evaluated if budget is None or r[cost] <= budget] or evaluated
        chosen = max(within, key=lambda r: (r["accuracy"], -r[cost]))
    elif target is not None:
        chosen = min(feasible, key=lambda r: (r[cost], -r["accuracy"]))
    else:
        chosen = max(feasible, key=lambda r: (r["accuracy"], -r[cost]))
    uni_ok = [r for r in uniform if ok(r)]
    if not uni_ok:
        best_uniform = None
    elif target is not None:
        best_uniform = min(uni_ok, key=lambda r: (r[cost], -r["accuracy"]))
    else:
        best_uniform = max(uni_ok, key=lambda r: (r["accuracy"], -r[cost]))
    layers = chosen["layers"]
    overrides = {n: {a: v for a, v in s.items() if v != getattr(base, a)} for n, s in layers.items()}
    chosen_config = base.replace(name=f"{base.name} (mixed)", layers={n: s for n, s in overrides.items() if s})
    return SearchResult(config=chosen_config, layers=layers, accuracy=chosen["accuracy"],
                        costs={c: chosen[c] for c in COSTS}, cost=cost, uniform=uniform, evaluated=evaluated,
                        pareto_uniform=pareto_front(uniform, cost, "accuracy"),
                        pareto_mixed=pareto_front(evaluated, cost, "accuracy"), best_uniform=best_uniform,
                        float_accuracy=float_acc, target=target, budget=budget, history=history,
                        feasible=bool(feasible), metric=metric)

