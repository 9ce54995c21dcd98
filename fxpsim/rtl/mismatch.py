"""Why an RTL tensor differs from the golden one: each MAC node's arithmetic recomputed under alternative
datapaths (:class:`_NodeModel`), the patterns the mismatches follow, the first mismatch in dataflow order and
the MAC sequence of that element (:func:`fxpsim.rtl.compare` uses them)."""
from __future__ import annotations

import numpy as np

from .compare_results import MacAnalysis, Mismatch, TensorDiff
from .golden import _Golden, _word_line
from .mac_model import _tap_labels, fit_value, mac_products, mac_run, mac_sequence

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_SAMPLE_BAD = 2000          # mismatching elements a hypothesis is tested on
_SAMPLE_GOOD = 1000         # matching elements it must also reproduce


# ----------------------------------------------------------------------------------------- node model
def _wrap(v, bits: int):
    lo = -(1 << (bits - 1))
    return (np.asarray(v, dtype=np.int64) - lo) % (1 << bits) + lo if bits < 63 else np.asarray(v, np.int64)


class _NodeModel:
    """A MAC node's golden inputs, weights, bias and parameters, to recompute elements under alternatives."""

    @classmethod
    def make(cls, g: _Golden, node: str):
        n = g.nodes[node]
        if not n.get("mac"):
            return None
        try:
            return cls(g, n)
        except (KeyError, ValueError, StopIteration):
            return None

    def __init__(self, g: _Golden, n: dict):
        self.node, self.mac = n, n["mac"]
        get = lambda stem: g.array(f"{n['dir']}/{stem}") if f"{n['dir']}/{stem}" in g.keys else None  # noqa
        self.x, self.w = get("input"), get("weights")
        if self.x is None or self.w is None:
            raise KeyError("input/weights")
        self.bias, self.A, self.y = get("bias"), get("accumulator"), get("output")
        self.mult, self.shift = get("multiplier"), get("shift")
        rq = self.mac["requantization"]
        self.kind = rq["kind"]
        self.W = int(self.mac["acc_bits"])
        self.mode = self.mac["overflow"]
        self.preload = self.mac["bias_add"] == "preload"
        self.tr = n.get("mac_trace")

    # ---------------------------------------------------------------- accumulator
    def bias_for(self, coords):
        if self.bias is None:
            return None
        return self.bias[np.asarray(coords)[:, -1]].astype(np.int64)

    def acc(self, coords, *, bits=None, mode=None, w=None, bias_mode=None, x_zp=None, order=None, trace=False):
        mac = dict(self.mac)
        if x_zp is not None:
            mac["x_zp"] = x_zp
        P = mac_products(mac, self.x, self.w if w is None else w, coords)
        b = self.bias_for(coords)
        bits = self.W if bits is None else bits
        mode = self.mode if mode is None else mode
        bias_mode = (("preload" if self.preload else "after") if b is not None else "none") \
            if bias_mode is None else bias_mode
        init = b if bias_mode == "preload" else None
        if init is not None and bits != self.W:     # a narrower/wider register holds the preloaded bias
            init = np.array([fit_value(int(v), bits, mode) for v in init], dtype=np.int64)
        end = b if bias_mode == "after" else None
        return mac_run(P, init=init, bias_end=end, bits=bits, mode=mode, order=order or self.mac["order"],
                       overflow_at=self.mac["overflow_at"], trace=trace)

    def transposed_weights(self):
        w = self.w
        if self.mac["op"] == "fully_connected":
            M, K = w.shape
            return w.reshape(-1).reshape(K, M).T.copy(), "weights transposed (read as [K][M], w[k*M + m], " \
                "instead of [M][K])"
        if self.mac["op"] == "conv2d":
            O, KH, KW, C = w.shape
            return w.reshape(-1).reshape(KH, KW, C, O).transpose(3, 0, 1, 2).copy(), \
                "weights transposed (read as HWIO instead of OHWI)"
        return None, ""

    def acc_hypotheses(self) -> list:
        """``[(description, kwargs for acc(), kind)]`` of alternative accumulator datapaths."""
        H = []
        W, mode = self.W, self.mode
        other = {"saturate": "wrap", "wrap": "saturate"}.get(mode)
        if other == "wrap":
            H.append(("wrapped where saturation was expected", dict(mode="wrap"), "overflow"))
        elif other == "saturate":
            H.append(("saturated where wrapping was expected", dict(mode="saturate"), "overflow"))
        for b in (W - 1, W + 1):
            if 2 <= b <= 62:
                for m in (mode, other):
                    if m:
                        H.append((f"accumulator {b} bits wide instead of {W}: width off by one "
                                  f"({b}-bit {m})", dict(bits=b, mode=m), "width"))
        wt, text = self.transposed_weights()
        if wt is not None:
            H.append((text, dict(w=wt), "layout"))
        if self.bias is not None:
            if self.preload:
                H.append(("bias added after the products instead of preloaded", dict(bias_mode="after"), "bias"))
            else:
                H.append(("bias preloaded instead of added after the products", dict(bias_mode="preload"), "bias"))
            H.append(("bias not added", dict(bias_mode="none"), "bias"))
        if self.mac["x_zp"] != 0:
            H.append(("input zero point not subtracted", dict(x_zp=0), "zp"))
        if self.mac["order"] == "sequential":
            H.append(("adder-tree order instead of sequential", dict(order="tree"), "order"))
        return H

    # ---------------------------------------------------------------- requantization
    def requant(self, acc, ch, variant: str = "ref"):
        """Output codes of accumulators ``acc`` [E] in channels ``ch`` [E] (double/single kinds)."""
        acc = np.asarray(acc, dtype=np.int64)
        m = self.mult[ch].astype(np.int64)
        s = self.shift[ch].astype(np.int64)
        kind = self.kind
        if variant == "single":
            kind = "single"
        elif variant == "double":
            kind = "double"
        if kind == "single":
            scaled = np.array([(((int(a) * int(mm) + (1 << (30 - int(ss)))) >> (31 - int(ss))) - INT32_MIN)
                               % (1 << 32) + INT32_MIN for a, mm, ss in zip(acc, m, s)], dtype=np.int64)
        else:
            left, right = np.maximum(s, 0), np.maximum(-s, 0)
            a = _wrap(acc << left, 32)
            ab = a * m                                              # |ab| <= 2^62
            nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
            t = ab + nudge
            if variant == "srdhm_floor":
                q = t >> 31
            else:
                q = np.where(t >= 0, t >> 31, -((-t) >> 31))        # truncation toward zero
            sat = (a == INT32_MIN) & (m == INT32_MIN)
            srdhm = _wrap(q, 32) if variant == "srdhm_nosat" else np.where(sat, INT32_MAX, _wrap(q, 32))
            mask = (np.int64(1) << right) - 1
            rem = srdhm & mask
            thr = (mask >> 1) + (0 if variant == "tie_up" else (srdhm < 0))
            scaled = (srdhm >> right) + (rem > thr)
        zp, lo, hi = self.mac["out_zp"], self.mac["act_min"], self.mac["act_max"]
        if variant == "no_zp":
            zp = 0
        y = scaled + zp
        if variant == "no_clamp":
            return _wrap(y, 8)
        return np.clip(y, lo, hi)

    def requant_variants(self) -> list:
        if self.kind not in ("double", "single") or self.mult is None or self.shift is None:
            return []
        V = []
        if self.kind == "double":
            V += [("round-half-up vs half-away tie at the rounding shift (RoundingDivideByPOT without its sign "
                   "term: negative ties rounded toward +inf)", "tie_up"),
                  ("SRDHM divides by 2^31 with floor instead of truncation toward zero (negative products one "
                   "LSB low before the rounding shift)", "srdhm_floor"),
                  ("SRDHM misses its INT32_MIN x INT32_MIN saturation", "srdhm_nosat"),
                  ("single rounding (TFLITE_SINGLE_ROUNDING) instead of double", "single")]
        else:
            V.append(("double rounding (gemmlowp) instead of single", "double"))
        V += [("output zero point not added", "no_zp"), ("activation clamp missing (output wraps)", "no_clamp")]
        return V

    def chain(self, acc: int, ch: int) -> list:
        """Text lines of the requantization of one accumulator value (double rounding)."""
        m, s = int(self.mult[ch]), int(self.shift[ch])
        zp, lo, hi = self.mac["out_zp"], self.mac["act_min"], self.mac["act_max"]
        if self.kind == "single":
            total = 31 - s
            v = (acc * m + (1 << (total - 1))) >> total
            return [f"acc {acc} * multiplier {m} + 2^{total - 1}, >> {total} (single rounding) = {v}",
                    f"+ out_zp {zp} = {v + zp}, clamp [{lo}, {hi}] -> {min(max(v + zp, lo), hi)}"]
        left, right = max(s, 0), max(-s, 0)
        a = (acc << left) - INT32_MIN
        a = a % (1 << 32) + INT32_MIN
        ab = a * m
        t = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
        q = t >> 31 if t >= 0 else -((-t) >> 31)
        srdhm = INT32_MAX if a == m == INT32_MIN else (q - INT32_MIN) % (1 << 32) + INT32_MIN
        mask = (1 << right) - 1
        rem, thr = srdhm & mask, (mask >> 1) + (srdhm < 0)
        scaled = (srdhm >> right) + (rem > thr)
        tie = right > 0 and rem == (1 << (right - 1))
        y = min(max(scaled + zp, lo), hi)
        return [f"acc {acc}, multiplier {m}, shift {s} (left {left}, right {right})",
                f"a = int32(acc << {left}) = {a}; a*m = {ab}; SRDHM = trunc((a*m {'+' if ab >= 0 else '-'} nudge) / "
                f"2^31) = {srdhm}",
                f"RoundingDivideByPOT({srdhm}, {right}): remainder {rem}, threshold {thr} "
                f"({'mask/2 + 1: negative' if srdhm < 0 else 'mask/2'}) -> {scaled}"
                + (f"   [a tie: remainder = 2^{right - 1} exactly]" if tie else ""),
                f"+ out_zp {zp} = {scaled + zp}, clamp [{lo}, {hi}] -> {y}"]


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
    return None


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
    if model is not None and t.role == "output":
        h = _output_hypothesis(t, got, exp, model, rtl_acc)
        if h:
            out.append(h[0])
            t.hypothesis = h
    generic = _generic_patterns(t, got, exp)
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
        if hyp and hyp[1] not in ("rtl_acc",):
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
    if hyp and t.role in ("accumulator", "mac_trace"):
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
    if "w" in kw or "x_zp" in kw:
        mac = dict(model.mac)
        if "x_zp" in kw:
            mac["x_zp"] = kw["x_zp"]
        P = mac_products(mac, model.x, kw.get("w", model.w), np.array([coords], dtype=np.int64))[0].tolist()
    if bias_mode != (("preload" if model.preload else "after") if b is not None else "none"):
        return None                 # a different number of steps: no row-by-row comparison
    init = fit_value(b, bits, mode) if bias_mode == "preload" else None
    end = b if bias_mode == "after" else None
    seq, _ = mac_sequence(P, init=init, bias_end=end, bits=bits, mode=mode, order=model.mac["order"],
                          overflow_at=model.mac["overflow_at"])
    return seq
