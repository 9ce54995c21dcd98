"""Network metrics of a sweep that mean something for any model, and the recommendation drawn from them.

Every point of a sweep is compared with **the exact datapath** of its own configuration
(:meth:`~fxpsim.hardware.HardwareConfig.exact_datapath`: an accumulator that never overflows, the full
bias, the full multiplier, no tiles, no lookup tables), over every output tensor of the network:

``exact_fraction``
    :math:`\\frac{1}{N}\\sum_i [y_i = y^{exact}_i]`, the fraction of output codes bit-exact with it;
``max_lsb_error``, ``mean_lsb_error``
    :math:`\\max_i |y_i - y^{exact}_i|` and its mean, in output LSBs (codes);
``bias_clipped``
    biases saturated into the bias register (at conversion) or into the accumulator (at run time).

:func:`recommend` picks the narrowest accumulator whose metric stays within ``tolerance`` of the exact
datapath's value at that width and every wider one, and picks nothing (with the reason) when the metric
cannot tell the points apart (a top-1 metric on a one-value output, or a metric equal at points whose
outputs differ from the exact datapath's by different amounts).
"""
from __future__ import annotations

import numpy as np

__all__ = ["exactness", "recommend", "TOP1_METRICS", "MAXIMISED_METRICS"]

TOP1_METRICS = ("accuracy", "agreement")
#: The metrics a sweep can maximise (its Pareto fronts and its recommendation).
MAXIMISED_METRICS = ("exact_fraction", "accuracy", "agreement", "output_sqnr_db")


def _as_list(codes) -> list:
    return [np.asarray(c) for c in (codes if isinstance(codes, (list, tuple)) else [codes])]


def _abs_diff(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    """:math:`|g - w|` per code, flattened: in int64 for codes of up to 32 bits, in Python integers for 64-bit
    codes (whose differences reach :math:`2^{64} - 1`: int64 would wrap them, even to negative errors)."""
    if max(g.dtype.itemsize, w.dtype.itemsize) < 8 or g.dtype.kind not in "iu" or w.dtype.kind not in "iu":
        return np.abs(g.astype(np.int64) - w.astype(np.int64)).reshape(-1)
    return np.abs(g.astype(object) - w.astype(object)).reshape(-1)


def exactness(codes, exact_codes) -> dict:
    """``exact_fraction``, ``max_lsb_error``, ``mean_lsb_error`` of output codes against the exact
    datapath's (a list for a graph with several outputs; all output codes count alike)."""
    got, want = _as_list(codes), _as_list(exact_codes)
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        raise ValueError("exactness: the outputs and the exact datapath's outputs differ in number or shape")
    diff = np.concatenate([_abs_diff(g, w) for g, w in zip(got, want)]) if got else np.zeros(0, np.int64)
    n = diff.size
    return {"exact_fraction": float(np.count_nonzero(diff == 0) / n) if n else 1.0,
            "max_lsb_error": int(diff.max(initial=0)),
            "mean_lsb_error": float(diff.sum() / n) if n else 0.0}


def metric_problem(metric: str, n_output_values: int, reference_top1=None) -> str | None:
    """Why ``metric`` cannot rank the points of this model (None when it can)."""
    if metric in TOP1_METRICS and n_output_values < 2:
        return (f"metric {metric!r} compares top-1 classes, but the model's output has {n_output_values} value "
                "per sample: its top-1 is always the same, so the metric is 1 at every point; use "
                "metric='exact_fraction' (or labels with a classifier)")
    if metric == "agreement" and reference_top1 is not None and np.unique(reference_top1).size < 2 \
            and len(reference_top1) > 1:
        return ("metric 'agreement': the reference's top-1 class is the same for every sample, so agreement "
                "cannot tell a datapath that changes the outputs from one that does not; use "
                "metric='exact_fraction'")
    return None


def recommend(records: list, metric: str, exact_value, tolerance: float, problem: str | None = None) -> dict:
    """The narrowest ``accumulator_bits`` whose ``metric`` is within ``tolerance`` of ``exact_value`` (the
    exact datapath's) there and at every wider point of the sweep.

    Returns ``{"metric", "exact_value", "tolerance", "accumulator_bits", "config", "reason"}``;
    ``accumulator_bits`` is None when the metric cannot decide: ``problem`` is set, the metric has one value at every
    point while their ``exact_fraction`` differs (it cannot distinguish them), or no point is within the
    tolerance.
    """
    out = {"metric": metric, "exact_value": exact_value, "tolerance": tolerance, "accumulator_bits": None,
           "config": None, "reason": ""}
    if problem:
        out["reason"] = problem
        return out
    refs = list(exact_value) if isinstance(exact_value, (list, tuple)) else [exact_value] * len(records)
    keep = [i for i, r in enumerate(records) if r.get(metric) is not None and r.get("accumulator_bits") is not None
            and refs[i] is not None]
    pts, refs = [records[i] for i in keep], [float(refs[i]) for i in keep]
    if not pts:
        out["reason"] = f"no point has a value of {metric!r}"
        return out
    out["exact_value"] = refs[0] if len(set(refs)) == 1 else refs
    if metric != "exact_fraction":
        values = {round(float(r[metric]), 12) for r in pts}
        fractions = {round(float(r["exact_fraction"]), 12) for r in pts if r.get("exact_fraction") is not None}
        if len(values) == 1 and len(fractions) > 1:
            out["reason"] = (f"{metric!r} is {pts[0][metric]} at every point while the fraction of outputs "
                             f"bit-exact with the exact datapath ranges over {min(fractions):.4g}..{max(fractions):.4g}: "
                             f"the metric cannot distinguish the points; use metric='exact_fraction'")
            return out
    ok_from = None
    for bits in sorted({int(r["accumulator_bits"]) for r in pts}, reverse=True):
        if all(float(r[metric]) >= e - tolerance for r, e in zip(pts, refs) if int(r["accumulator_bits"]) == bits):
            ok_from = bits
        else:
            break
    if ok_from is None:
        out["reason"] = f"no swept width keeps {metric!r} within {tolerance} of the exact datapath's {out['exact_value']}"
        return out
    best = [r for r in pts if int(r["accumulator_bits"]) == ok_from]
    out.update(accumulator_bits=ok_from, config=best[0].get("config"),
               reason=f"narrowest accumulator from which every swept point keeps {metric!r} within {tolerance} "
                      f"of the exact datapath's {out['exact_value']}")
    return out
