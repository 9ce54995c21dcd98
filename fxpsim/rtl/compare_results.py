"""What :func:`fxpsim.rtl.compare` returns (:class:`CompareResult`, :class:`TensorDiff`, :class:`Mismatch`,
:class:`MacAnalysis`) and its renderings as text and a self-contained HTML page."""
from __future__ import annotations

import base64
import html as _html
import io
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_WINDOW = 3                 # MAC steps shown around the step of interest


# ----------------------------------------------------------------------------------------- results
@dataclass
class TensorDiff:
    """One compared tensor."""

    node: str
    node_index: int
    role: str
    stem: str
    tensor: str
    golden_file: str
    rtl_file: str
    shape: tuple
    layout: str
    axes: tuple
    bits: int
    signed: bool
    total: int
    n_diff: int
    first_flat: int | None = None
    patterns: list = field(default_factory=list)
    mask: Any = field(default=None, repr=False)
    hypothesis: Any = field(default=None, repr=False)
    #: bool array of the elements compared (None: all); :func:`~fxpsim.rtl.compare.compare_arrays`'s ``known``
    known: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.n_diff == 0

    def to_dict(self) -> dict:
        return {"node": self.node, "role": self.role, "stem": self.stem, "tensor": self.tensor,
                "golden_file": self.golden_file, "rtl_file": self.rtl_file, "shape": list(self.shape),
                "layout": self.layout, "bits": self.bits, "signed": self.signed, "elements": self.total,
                "differ": self.n_diff, "first_flat": self.first_flat, "patterns": list(self.patterns)}


@dataclass
class MacAnalysis:
    """The MAC sequence of the first mismatching element, recomputed from the golden inputs and weights.

    ``rows``: one dict per accumulator value ``s`` (``s = 0``: before the first add) with ``label`` (what step
    ``s`` added), ``product``, ``exact``, ``saturating``, ``wrapping`` (and ``hypothesis`` when a pattern was
    recognised).  ``parting_step``: the first step where the exact, saturating and wrapping sums part ways (the
    first overflow at the accumulator's width), ``None`` if they never do.  ``step``: the step that explains the
    mismatch: for a recognised accumulator pattern, the first step where the RTL's model leaves the golden
    sequence (e.g. the first step exceeding a one-bit-narrower range), for a MAC-trace mismatch the first
    differing step, otherwise ``parting_step``.  ``rtl_matches``: which running sums the RTL's accumulator
    (or, when only outputs were dumped, its output) agrees with: a subset of ``exact``, ``saturating``,
    ``wrapping``.
    """

    coords: tuple
    acc_bits: int
    mode: str
    order: str
    rows: list
    parting_step: int | None
    step: int | None
    step_reason: str
    golden_acc: int
    finals: dict
    rtl_acc: int | None
    rtl_matches: list
    hypothesis: str | None = None
    #: for a MAC-trace mismatch: the step whose RTL value ``rtl_acc`` is (``rtl_matches`` compares that step)
    rtl_step: int | None = None

    def to_dict(self) -> dict:
        return {"coords": list(self.coords), "acc_bits": self.acc_bits, "mode": self.mode, "order": self.order,
                "parting_step": self.parting_step, "step": self.step, "step_reason": self.step_reason,
                "golden_acc": self.golden_acc, "finals": self.finals, "rtl_acc": self.rtl_acc,
                "rtl_matches": self.rtl_matches, "hypothesis": self.hypothesis, "rtl_step": self.rtl_step,
                "rows": self.rows}


@dataclass
class Mismatch:
    """The first mismatching element in dataflow order."""

    node: str
    node_index: int
    op: str
    role: str
    tensor: str
    golden_file: str
    rtl_file: str
    rtl_line: int | None
    flat: int
    index: tuple
    index_text: str
    expected: int
    got: int
    bits: int
    signed: bool
    n_diff: int
    total: int
    patterns: list
    mac: MacAnalysis | None = None
    requant: list | None = None

    @property
    def difference(self) -> int:
        return self.got - self.expected

    @property
    def pattern(self) -> str:
        return "; ".join(self.patterns)

    def hex(self, value: int) -> str:
        return f"0x{value & ((1 << self.bits) - 1):0{-(-self.bits // 4)}x}"

    def to_dict(self) -> dict:
        return {"node": self.node, "node_index": self.node_index, "op": self.op, "role": self.role,
                "tensor": self.tensor, "golden_file": self.golden_file, "rtl_file": self.rtl_file,
                "rtl_line": self.rtl_line, "flat": self.flat, "index": list(self.index),
                "index_text": self.index_text, "expected": self.expected, "got": self.got,
                "expected_hex": self.hex(self.expected), "got_hex": self.hex(self.got),
                "difference_lsb": self.difference, "bits": self.bits, "differ": self.n_diff,
                "elements": self.total, "patterns": self.patterns,
                "mac": None if self.mac is None else self.mac.to_dict(), "requant": self.requant}


class CompareResult:
    """What :func:`compare` found: :attr:`ok`, :attr:`exit_code`, :attr:`tensors` (every comparison in
    dataflow order), :attr:`first` (the first mismatch, or ``None``), :meth:`to_text`, :meth:`to_html`."""

    def __init__(self, golden_dir: str, rtl: str, tensors: list, first: Mismatch | None, not_dumped: list):
        self.golden_dir, self.rtl = golden_dir, rtl
        self.tensors: list[TensorDiff] = tensors
        self.first = first
        self.not_dumped = not_dumped

    @property
    def ok(self) -> bool:
        return self.first is None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def mismatched(self) -> list:
        return [t for t in self.tensors if not t.ok]

    def __repr__(self) -> str:
        return (f"CompareResult({'match' if self.ok else 'MISMATCH'}: {len(self.tensors)} tensors compared, "
                f"{len(self.mismatched)} differ)")

    def to_dict(self) -> dict:
        return {"ok": self.ok, "golden": self.golden_dir, "rtl": self.rtl,
                "tensors": [t.to_dict() for t in self.tensors],
                "first_mismatch": None if self.first is None else self.first.to_dict(),
                "not_dumped": self.not_dumped}

    # --------------------------------------------------------------------------------------- text
    def to_text(self) -> str:
        L = []
        n_bad = len(self.mismatched)
        if self.ok:
            L.append(f"fxpsim compare: MATCH -- {len(self.tensors)} tensor(s), "
                     f"{sum(t.total for t in self.tensors):,} elements, bit for bit")
        else:
            L.append(f"fxpsim compare: MISMATCH -- {n_bad} of {len(self.tensors)} tensor(s) differ")
        L.append(f"golden: {self.golden_dir}   RTL: {self.rtl}")
        L.append("")
        rows = [[f"#{t.node_index} {t.node}", t.stem, t.rtl_file, f"{t.total}", f"{t.n_diff}",
                 "ok" if t.ok else "; ".join(t.patterns)] for t in self.tensors]
        L += _table(rows, ["node", "tensor", "RTL file", "elements", "differ", "pattern"])
        if self.first is not None:
            L.append("")
            L += _mismatch_text(self.first)
        return "\n".join(L) + "\n"

    def __str__(self) -> str:
        return self.to_text()

    # --------------------------------------------------------------------------------------- html
    def to_html(self, path) -> str:
        """Write an HTML page: the text report and a mismatch map (which elements differ) per compared tensor
        that differs (matplotlib, Agg, embedded as base64 PNG). Returns the path."""
        path = os.fspath(path)
        esc = _html.escape
        parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>fxpsim compare</title>",
                 "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}pre{background:#f6f6f6;"
                 "padding:1em;overflow-x:auto;font-size:12px}.ok{color:#070}.bad{color:#b00}"
                 "figure{display:inline-block;margin:1em}</style></head><body>",
                 f"<h1>fxpsim compare: <span class='{'ok' if self.ok else 'bad'}'>"
                 f"{'match' if self.ok else 'MISMATCH'}</span></h1>",
                 f"<pre>{esc(self.to_text())}</pre>"]
        bad = self.mismatched
        if bad:
            parts.append("<h2>Mismatch maps</h2><p>Red: elements that differ. Rows: the first axis (sample "
                         "<i>n</i>, output channel of weights, traced output); columns: the remaining axes in C "
                         "order.</p>")
            for t in bad:
                png = _mismatch_png(t)
                parts.append(f"<figure><img alt='mismatch map {esc(t.node)} {esc(t.stem)}' "
                             f"src='data:image/png;base64,{base64.b64encode(png).decode('ascii')}'/>"
                             f"<figcaption>#{t.node_index} {esc(t.node)} / {esc(t.stem)}: {t.n_diff} of {t.total} "
                             f"differ ({esc(t.layout)})</figcaption></figure>")
        parts.append("</body></html>")
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(parts))
        return path


def _table(rows, head) -> list:
    cols = list(zip(*([head] + rows))) if rows else [[h] for h in head]
    widths = [max(len(str(c)) for c in col) for col in cols]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def _mismatch_png(t: TensorDiff) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    mask = np.asarray(t.mask, dtype=bool)
    m2 = mask.reshape(mask.shape[0], -1) if mask.ndim >= 2 else mask.reshape(1, -1)
    fig = Figure(figsize=(min(12, max(5.0, 2 + m2.shape[1] / 16)), min(8, max(2.5, 1.5 + m2.shape[0] / 16))),
                 dpi=90)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    ax.imshow(m2, aspect="auto", interpolation="nearest", cmap=ListedColormap(["#e8e8e8", "#d62728"]),
              vmin=0, vmax=1)
    ax.set_title(f"{t.node} / {t.stem}: {t.n_diff} of {t.total} differ", fontsize=9)
    ax.set_ylabel(t.axes[0] if t.axes else "row")
    ax.set_xlabel(", ".join(t.axes[1:]) + " (C order)" if len(t.axes) > 1 else "element")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _mismatch_text(m: Mismatch) -> list:
    L = [f"First mismatch (dataflow order): node #{m.node_index} '{m.node}' ({m.op}), {m.role} '{m.tensor}', "
         f"element {m.index_text}"]
    where = f"word {m.flat}" + (f", line {m.rtl_line}" if m.rtl_line else "")
    L.append(f"  RTL file     {m.rtl_file} ({where})")
    L.append(f"  golden file  {m.golden_file}")
    L.append(f"  expected     {m.hex(m.expected)} = {m.expected}")
    L.append(f"  got          {m.hex(m.got)} = {m.got}")
    L.append(f"  difference   {m.difference:+d} LSB")
    L.append(f"  in this tensor {m.n_diff} of {m.total} elements differ; pattern: {m.pattern}")
    if m.mac is not None:
        L.append("")
        L += _mac_text(m.mac)
    if m.requant:
        L.append("")
        L.append("Requantization of this element (from the accumulator the RTL used):")
        L += ["  " + s for s in m.requant]
    return L


def _mac_text(a: MacAnalysis) -> list:
    n_prod = sum(1 for r in a.rows if r["product"] is not None)
    L = [f"MAC sequence of output {a.coords} ({n_prod} products, {a.order}, {a.acc_bits}-bit accumulator, "
         f"{a.mode}), recomputed from the golden inputs and weights:"]
    show = set(range(min(2, len(a.rows)))) | {len(a.rows) - 1}
    for s in (a.parting_step, a.step):
        if s is not None:
            show |= set(range(max(0, s - _WINDOW), min(len(a.rows), s + _WINDOW + 1)))
    hyp = any("hypothesis" in r for r in a.rows)
    head = ["step", "adds", "product", "exact", "saturating", "wrapping"] + (["pattern model"] if hyp else []) + [""]
    rows, last = [], -1
    for s in sorted(show):
        if s > last + 1:
            rows.append(["...", "", "", "", "", ""] + ([""] if hyp else []) + [""])
        r = a.rows[s]
        mark = []
        if s == a.parting_step:
            mark.append("<- sums part ways (first overflow)")
        if s == a.step and s != a.parting_step:
            mark.append(f"<- {a.step_reason}")
        rows.append([str(s), r["label"], "" if r["product"] is None else str(r["product"]), str(r["exact"]),
                     str(r["saturating"]), str(r["wrapping"])] + ([str(r.get("hypothesis", ""))] if hyp else [])
                    + [" ".join(mark)])
        last = s
    L += ["  " + s for s in _table(rows, head)]
    if hyp:
        L.append(f"  pattern model: the running sum under the recognised pattern ({a.hypothesis})")
    if a.parting_step is None:
        L.append(f"  no overflow: the exact sum stays inside the {a.acc_bits}-bit range at every step")
    else:
        L.append(f"  first overflow at step {a.parting_step} ({a.rows[a.parting_step]['label']}): the exact, "
                 f"saturating and wrapping sums part ways there")
    f = a.finals
    L.append(f"  final: exact {f['exact']}, saturating {f['saturating']}, wrapping {f['wrapping']}; "
             f"golden accumulator {a.golden_acc} ({a.mode})")
    if a.rtl_acc is not None:
        which = " and ".join(f"the {k} sum" for k in a.rtl_matches) if a.rtl_matches else "none of them"
        at = "" if a.rtl_step is None else f" after step {a.rtl_step} ({a.rows[a.rtl_step]['label']})"
        L.append(f"  RTL accumulator{at} {a.rtl_acc}: matches {which}")
    elif a.rtl_matches:
        L.append(f"  (no RTL accumulator dumped) the RTL's output matches the requantized "
                 f"{' and '.join(a.rtl_matches)} sum")
    if a.step is not None and a.step != a.parting_step:
        L.append(f"  step of interest: {a.step} ({a.rows[a.step]['label']}): {a.step_reason}")
    return L
