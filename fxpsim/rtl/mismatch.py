"""Why an RTL tensor differs from the golden one: the hypotheses of :class:`~fxpsim.rtl.node_model._NodeModel`
(each MAC node's arithmetic recomputed under alternative datapaths) tested against it, the patterns the
mismatches follow, the first mismatch in dataflow order and the MAC sequence of that element
(:func:`fxpsim.rtl.compare` uses them)."""
from __future__ import annotations

import numpy as np

from .compare_results import MacAnalysis, Mismatch, TensorDiff
from .golden import _Golden, _word_line
from .mac_model import _tap_labels, fit_value, mac_products, mac_sequence
from .node_model import _NodeModel, _wrap

_SAMPLE_BAD = 2000          # mismatching elements a hypothesis is tested on
_SAMPLE_GOOD = 1000         # matching elements it must also reproduce


def _sample(mask_flat: np.ndarray, known=None) -> np.ndarray:
    """Flat indices a hypothesis is tested on: mismatching elements and matching ones (known ones only)."""
    bad = np.flatnonzero(mask_flat)[:_SAMPLE_BAD]
    good = np.flatnonzero(~mask_flat if known is None else ~mask_flat & np.asarray(known).reshape(-1))
    if good.size > _SAMPLE_GOOD:
        good = good[np.linspace(0, good.size - 1, _SAMPLE_GOOD).astype(np.int64)]
    return np.concatenate([bad, good])


def _acc_hypothesis(t: TensorDiff, got, exp, model: _NodeModel):
    """(description, kwargs, kind) of the alternative datapath that reproduces the RTL's accumulator."""
    idx = _sample(t.mask.reshape(-1), t.known)
    coords = np.stack(np.unravel_index(idx, exp.shape), axis=1)
    try:
        ref = model.acc(coords)
    except (ValueError, IndexError):
        return None
    if not np.array_equal(ref, exp.reshape(-1)[idx]):
        return None                 # the model does not reproduce the golden accumulator: no hypotheses
    g = got.reshape(-1)[idx]
    for desc, kw, kind in model.acc_hypotheses():
        try:
            h = _wrap(model.acc(coords, **kw), t.bits)
        except (ValueError, IndexError):
            continue
        if np.array_equal(h, g):
            return desc, kw, kind
    return None


def _output_hypothesis(t: TensorDiff, got, exp, model: _NodeModel, rtl_acc):
    idx = _sample(t.mask.reshape(-1), t.known)
    if model.A is None or model.mult is None or model.kind not in ("double", "single"):
        return None
    ch = np.unravel_index(idx, exp.shape)[-1]
    acc_g = model.A.reshape(-1)[idx]
    if not np.array_equal(model.requant(acc_g, ch), exp.reshape(-1)[idx]):
        return None
    g = got.reshape(-1)[idx]
    if rtl_acc is not None and rtl_acc.shape == model.A.shape:
        acc_r = rtl_acc.reshape(-1)[idx]
        if not np.array_equal(acc_r, acc_g) and np.array_equal(model.requant(acc_r, ch), g):
            return "consistent with the RTL's own accumulator (the error is upstream, in the accumulator)", "rtl_acc"
        acc_use = acc_r
    else:
        acc_use = acc_g
    for desc, variant in model.requant_variants():
        if np.array_equal(model.requant(acc_use, ch, variant), g):
            return desc, variant
    if rtl_acc is not None:
        return None
    return _output_only_hypothesis(idx, g, model)


def _output_only_hypothesis(idx, g, model: _NodeModel):
    """Diagnosis from the outputs alone (no RTL accumulator dumped): the accumulator datapath knob (width,
    overflow rule, weight layout, bias placement, zero-point and padding handling, order) whose accumulators,
    requantized as the golden ones are, give every sampled RTL output -- mismatching and matching.  Returns
    ``(description, kwargs, kind)``, or a ``(text, None)`` saying that none does."""
    coords = np.stack(np.unravel_index(idx, model.A.shape), axis=1)
    try:
        if not np.array_equal(model.acc(coords), model.A.reshape(-1)[idx]):
            return None             # the model does not reproduce the golden accumulators: no search
    except (ValueError, IndexError):
        return None
    tried = model.acc_hypotheses()
    for desc, kw, kind in tried:
        try:
            acc = _wrap(model.acc(coords, **kw), model.W)
        except (ValueError, IndexError):
            continue
        if np.array_equal(model.requant(acc, coords[:, -1]), g):
            return f"{desc} (found from the outputs alone: its accumulators requantize to every RTL output)", kw, kind
    return (f"no single datapath knob reproduces the RTL's outputs ({len(tried)} accumulator and "
            f"{len(model.requant_variants())} requantization alternatives tried)", None)


def _trace_hypothesis(t: TensorDiff, got, exp, model: _NodeModel):
    """(description, kwargs, kind) of the alternative datapath whose running sums are the RTL's MAC trace
    (on the known elements; hypotheses that change the number of steps are not tried)."""
    coords = np.array(model.tr["coords"], dtype=np.int64).reshape(exp.shape[0], -1)
    known = np.ones(exp.shape, bool) if t.known is None else np.asarray(t.known)
    try:
        if not np.array_equal(model.acc(coords, trace=True)[1], exp):
            return None
    except (ValueError, IndexError):
        return None
    for desc, kw, kind in model.acc_hypotheses():
        if "order" in kw or "bias_mode" in kw:
            continue
        try:
            h = _wrap(model.acc(coords, trace=True, **kw)[1], t.bits)
        except (ValueError, IndexError):
            continue
        if h.shape == got.shape and np.array_equal(h[known], got[known]):
            return desc, kw, kind
    return None


def _patterns(t: TensorDiff, got, exp, model, rtl_acc) -> list:
    out = []
    t.hypothesis = None
    if model is not None and t.role == "accumulator":
        h = _acc_hypothesis(t, got, exp, model)
        if h:
            out.append(h[0])
            t.hypothesis = h
    if model is not None and t.role == "mac_trace" and model.tr:
        h = _trace_hypothesis(t, got, exp, model)
        if h:
            out.append(h[0])
            t.hypothesis = h
    unexplained = None
    if model is not None and t.role == "output":
        h = _output_hypothesis(t, got, exp, model, rtl_acc)
        if h and h[1] is None:              # searched from the outputs alone, no knob explains them
            unexplained = h[0]
        elif h:
            out.append(h[0])
            t.hypothesis = h
    generic = _generic_patterns(t, got, exp)
    if unexplained and not any(p.startswith(("layout swap", "the same values in a different order")) for p in generic):
        out.append(unexplained)             # (a layout swap explains the outputs without any arithmetic)
    return out + [p for p in generic if not (out and p.startswith("no simple pattern"))]


def _generic_patterns(t: TensorDiff, got, exp) -> list:
    m = t.mask.reshape(-1)
    dtype = np.int64 if t.bits <= 62 else object          # exact either way
    g = got.reshape(-1)[m].astype(dtype)
    e = exp.reshape(-1)[m].astype(dtype)
    d = g - e
    out = []
    if np.all(g == 0):
        out.append("the RTL wrote zeros where values were expected")
    if np.all(abs(d) == 1):
        up = int(np.count_nonzero(d > 0))
        out.append(f"all off by ±1 LSB (+1: {up}, -1: {len(d) - up})")
    elif np.all(d == d[0]):
        out.append(f"constant offset of {int(d[0]):+d} LSB")
    if t.signed and np.all(g == -e):
        out.append("sign flips (got = -expected)")
    bits = t.bits
    for b in range(bits - 1, max(1, bits - 3), -1) if t.signed else ():
        lo, hi = -(1 << (b - 1)), (1 << (b - 1)) - 1
        if not np.any((e < lo) | (e > hi)):
            continue
        if np.all(g == (e - lo) % (1 << b) + lo):
            out.append(f"values wrapped to {b} bits: got = expected mod 2^{b} where |expected| is beyond the {b}-bit "
                       f"range (the top bit is missing: width off by {bits - b})")
            break
        if np.all(g == np.clip(e, lo, hi)):
            out.append(f"values saturated at {b} bits where they exceed the {b}-bit range (width off by {bits - b})")
            break
    x = (g ^ e) & ((1 << bits) - 1) if dtype is object or bits < 62 else (g ^ e) & np.int64((1 << 62) - 1)
    if np.all(x == x[0]):
        v = int(x[0])
        if v and v & (v - 1) == 0:
            out.append(f"bit {v.bit_length() - 1} differs in every mismatch (a consistent bit missing or stuck)")
    if t.known is None or np.all(t.known):        # a permutation needs the whole tensor
        out += _layout_patterns(t, got, exp)
    if not out:
        out.append(f"no simple pattern (differences {int(d.min()):+d} .. {int(d.max()):+d} LSB)")
    return out


def _layout_patterns(t: TensorDiff, got, exp) -> list:
    shape = exp.shape
    cands = []
    if len(shape) == 2 and shape[0] > 1 and shape[1] > 1:
        r, c = shape
        ax = t.axes if len(t.axes) == 2 else ("r", "c")
        cands.append((got.reshape(c, r).T, f"layout swap: the dump is in [{ax[1].upper()}][{ax[0].upper()}] "
                                           f"order (transposed)"))
    if len(shape) == 4:
        n, h, w, c = shape
        cands.append((got.reshape(n, c, h, w).transpose(0, 2, 3, 1), "layout swap: the dump is NCHW, not NHWC"))
        cands.append((got.reshape(n, w, h, c).transpose(0, 2, 1, 3), "layout swap: height and width swapped"))
        cands.append((got.reshape(c, h, w, n).transpose(3, 1, 2, 0), "layout swap: first and last axes swapped"))
    for arr, text in cands:
        if np.array_equal(arr, exp):
            return [text]
    if exp.size > 1 and np.array_equal(np.sort(got.reshape(-1)), np.sort(exp.reshape(-1))):
        return ["the same values in a different order (a permutation: layout swap?)"]
    return []


# ----------------------------------------------------------------------------------------- first mismatch
def _index_text(axes, index) -> str:
    if len(axes) == len(index):
        return "(" + ", ".join(f"{a}={i}" for a, i in zip(axes, index)) + ")"
    return str(tuple(index))


def _first_mismatch(g: _Golden, t: TensorDiff, got, exp, fmt, model, rtl_acc, arrays, diffs) -> Mismatch:
    n = g.nodes[t.node]
    flat = t.first_flat
    index = tuple(int(i) for i in np.unravel_index(flat, exp.shape))
    m = Mismatch(t.node, t.node_index, n["op"], t.role, t.tensor, t.golden_file, t.rtl_file,
                 _word_line(t.rtl_file, fmt, flat), flat, index, _index_text(t.axes, index),
                 int(exp.reshape(-1)[flat]), int(got.reshape(-1)[flat]), t.bits, t.signed, t.n_diff, t.total,
                 list(t.patterns))
    if model is None:
        return m
    if t.role in ("accumulator", "output"):
        coords = index
        trace_step = None
    elif t.role == "mac_trace" and model.tr:
        coords = tuple(model.tr["coords"][index[0]])
        trace_step = index[1]
    else:
        return m
    try:
        m.mac = _mac_analysis(model, coords, t, got if t.role == "accumulator" else None, rtl_acc, trace_step,
                              got if t.role == "output" else None, got if t.role == "mac_trace" else None)
    except (ValueError, IndexError, KeyError):
        m.mac = None
    if t.role == "output" and model.mult is not None and model.kind in ("double", "single"):
        acc_used = int(rtl_acc.reshape(-1)[flat]) if rtl_acc is not None and rtl_acc.shape == exp.shape \
            else int(model.A.reshape(-1)[flat])
        src = "the RTL's accumulator" if rtl_acc is not None and rtl_acc.shape == exp.shape else \
            "the golden accumulator (no RTL accumulator dumped)"
        m.requant = [f"accumulator used: {acc_used} ({src})"] + model.chain(acc_used, index[-1])
        hyp = getattr(t, "hypothesis", None)
        if hyp and isinstance(hyp[1], dict):            # an accumulator knob, found from the outputs
            a = int(_wrap(model.acc(np.array([index]), **hyp[1]), model.W)[0])
            v = int(model.requant(np.array([a]), np.array([index[-1]]))[0])
            m.requant.append(f"the RTL's value {m.got} is what you get with: {hyp[0]} (accumulator {a} -> {v})")
        elif hyp and isinstance(hyp[1], str) and hyp[1] != "rtl_acc":
            v = int(model.requant(np.array([acc_used]), np.array([index[-1]]), hyp[1])[0])
            m.requant.append(f"the RTL's value {m.got} is what you get with: {hyp[0]} (-> {v})")
    return m


def _mac_analysis(model: _NodeModel, coords, t: TensorDiff, rtl_acc_tensor, rtl_acc, trace_step, rtl_y,
                  rtl_trace=None):
    c = np.array([coords], dtype=np.int64)
    P = mac_products(model.mac, model.x, model.w, c)[0].tolist()
    b = model.bias_for(c)
    b = None if b is None else int(b[0])
    init = b if (b is not None and model.preload) else None
    end = b if (b is not None and not model.preload) else None
    kw = dict(init=init, bias_end=end, bits=model.W, order=model.mac["order"], overflow_at=model.mac["overflow_at"])
    exact, labels = mac_sequence(P, mode="exact", **kw)
    sat, _ = mac_sequence(P, mode="saturate", **kw)
    wrap, _ = mac_sequence(P, mode="wrap", **kw)
    gold, _ = mac_sequence(P, mode=model.mode, **kw)
    prod_at = _product_positions(labels, P)
    if model.mac["op"] != "fully_connected":         # name the tap of every product: k=8 (i,j,c)=(2,2,0)
        taps = _tap_labels(model.mac, model.w.shape)
        labels = [f"{lab} {taps[int(lab[2:])]}" if lab.startswith("k=") else lab for lab in labels]
    rows = [{"step": s, "label": labels[s], "product": prod_at.get(s), "exact": exact[s], "saturating": sat[s],
             "wrapping": wrap[s]} for s in range(len(labels))]
    parting = next((s for s in range(len(labels)) if not exact[s] == sat[s] == wrap[s]), None)
    flat = int(np.ravel_multi_index(tuple(int(v) for v in coords), model.A.shape)) if model.A is not None else None
    golden_acc = int(model.A.reshape(-1)[flat]) if flat is not None else gold[-1]
    finals = {"exact": exact[-1], "saturating": sat[-1], "wrapping": wrap[-1]}
    rtl_value, rtl_step, matches = None, None, []
    if rtl_trace is not None and trace_step is not None:     # the RTL's running sum at that step
        rtl_step, rtl_value = trace_step, int(rtl_trace.reshape(-1)[t.first_flat])
        matches = [k for k in ("saturating", "wrapping", "exact") if rows[trace_step][k] == rtl_value]
    elif rtl_acc_tensor is not None:
        rtl_value = int(rtl_acc_tensor.reshape(-1)[flat])
    elif rtl_acc is not None and flat is not None and rtl_acc.size == model.A.size:
        rtl_value = int(rtl_acc.reshape(-1)[flat])
    if rtl_value is not None and rtl_step is None:
        matches = [k for k in ("saturating", "wrapping", "exact") if finals[k] == rtl_value]
    elif rtl_value is None and rtl_y is not None and model.mult is not None and model.kind in ("double", "single"):
        y = int(rtl_y.reshape(-1)[flat])
        for k in ("saturating", "wrapping"):
            if int(model.requant(np.array([finals[k]]), np.array([int(coords[-1])]))[0]) == y:
                matches.append(k)
    step, reason, hyp_text = parting, "first overflow", None
    hyp = getattr(t, "hypothesis", None)
    if trace_step is not None:
        step, reason = trace_step, "the RTL's running accumulator first differs here"
    if hyp and (t.role in ("accumulator", "mac_trace") or len(hyp) == 3):
        desc, kwh, kind = hyp
        hyp_text = desc
        hseq = _hyp_sequence(model, P, b, kwh, coords)
        if hseq is not None:
            for r, v in zip(rows, hseq):
                r["hypothesis"] = v
            if trace_step is not None:
                pass
            elif kind == "overflow":
                step, reason = parting, "saturating and wrapping sums part ways"
            elif kind == "width":
                step = next((s for s in range(len(hseq)) if hseq[s] != exact[s]), None)
                reason = f"first step exceeding the {kwh.get('bits')}-bit range"
            else:
                step = next((s for s in range(len(hseq)) if hseq[s] != gold[s]), None)
                reason = "first step where the RTL's model leaves the golden sequence"
    return MacAnalysis(tuple(int(v) for v in coords), model.W, model.mode, model.mac["order"], rows, parting, step,
                       reason, golden_acc, finals, rtl_value, matches, hyp_text, rtl_step)


def _product_positions(labels, P) -> dict:
    out = {}
    for s, lab in enumerate(labels):
        if lab.startswith("k="):
            out[s] = P[int(lab[2:].split()[0])]
    return out


def _hyp_sequence(model: _NodeModel, P, b, kw, coords):
    """The running sums of one element under an accumulator hypothesis (same length as the golden one when the
    structure is the same), or None."""
    if kw.get("order"):
        return None
    bits = kw.get("bits", model.W)
    mode = kw.get("mode", model.mode)
    bias_mode = kw.get("bias_mode", ("preload" if model.preload else "after") if b is not None else "none")
    if "w" in kw or "x_zp" in kw or "pad_code" in kw:
        mac = dict(model.mac)
        if "x_zp" in kw:
            mac["x_zp"] = kw["x_zp"]
        P = mac_products(mac, model.x, kw.get("w", model.w), np.array([coords], dtype=np.int64),
                         kw.get("pad_code"))[0].tolist()
    if bias_mode != (("preload" if model.preload else "after") if b is not None else "none"):
        return None                 # a different number of steps: no row-by-row comparison
    init = fit_value(b, bits, mode) if bias_mode == "preload" else None
    end = b if bias_mode == "after" else None
    seq, _ = mac_sequence(P, init=init, bias_end=end, bits=bits, mode=mode, order=model.mac["order"],
                          overflow_at=model.mac["overflow_at"])
    return seq
