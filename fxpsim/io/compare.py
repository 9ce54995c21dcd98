r"""Compare an RTL's dump with golden vectors (:func:`fxpsim.io.vectors.export_vectors`) and locate the first
mismatch.

:func:`compare` reads the golden directory's ``manifest.json``, finds the RTL's files for any subset of the
golden tensors, compares them bit for bit and reports the **first mismatch in dataflow order** (nodes in run
order; within a node: input, weights, bias, multiplier, shift, MAC trace, accumulator, output; within a tensor:
C order).  For that mismatch it gives the element's index (``(n, h, w, c)``, ``(n, k)``, ...), the expected and
received words (hex, decimal, difference in LSBs), how many elements of the tensor differ and the pattern they
follow, and, for MAC nodes, the MAC sequence of the element recomputed from the golden inputs and weights: the
step at which the exact, saturating and wrapping running sums part ways (the first overflow) and which of them
the RTL's accumulator matches.

The RTL dump is

* a directory laid out like the golden one (``NN_<node>/<role>.hex`` and/or ``.mem``, ``.csv``, ``.npy``),
  holding any subset of the files (a file that *is* the golden file, e.g. the golden directory itself, is
  skipped);
* the testbench outputs of ``examples/rtl/tb_dense.v``: ``acc_out.hex`` (accumulator) and ``y_out.hex``
  (output) in a node's ``tb_dense`` folder, found inside the dump directory (so ``compare(vec, vec)`` checks
  every testbench run in an export), or the dump directory *is* such a folder;
* or a mapping ``{tensor: file}`` with tensors named ``"node/role"`` (``"0:dense/accumulator"``), ``(node,
  role)``, or a golden file path (``"01_0_dense/output.hex"``).

Formats follow the file extension: ``.hex`` (and any other) ``$readmemh``, ``.mem`` ``$readmemb``, ``.csv``,
``.npy``; words must have the golden tensor's exact width.  A missing file, a wrong width, a malformed line or a
wrong word count raises ``ValueError`` naming the file (and line).

Patterns recognised (:attr:`TensorDiff.patterns`):

* accumulators of MAC nodes, by recomputing the mismatching elements under alternative datapaths: "wrapped
  where saturation was expected" (and the reverse), an accumulator one bit narrower or wider ("width off by
  one"), "weights transposed", the bias preloaded vs added at the end, or missing, the input zero point not
  subtracted;
* outputs of MAC nodes, by requantizing the accumulator the RTL used under variants of TFLite's arithmetic:
  "round-half-up vs half-away tie at the rounding shift", SRDHM rounding by floor instead of truncation, SRDHM
  missing its saturation, single vs double rounding, no output zero point, no clamp; "consistent with the RTL's
  own accumulator" when the error is upstream;
* any tensor: all off by ±1 LSB, a constant offset, sign flips, values wrapped to (or saturated at) fewer bits
  (got = expected mod 2^W with \|expected\| beyond the W-bit range: width off by one), one bit differing in
  every mismatch, a transposed layout or another permutation, zeros.
"""
from __future__ import annotations

import base64
import html as _html
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .memfile import read_csv_codes, read_mem
from .vectors import (MANIFEST, ROLE_ORDER, VECTORS_FORMAT, _tap_labels, fit_value, mac_products, mac_run,
                      mac_sequence)

__all__ = ["compare", "CompareResult", "TensorDiff", "Mismatch", "MacAnalysis"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_SAMPLE_BAD = 2000          # mismatching elements a hypothesis is tested on
_SAMPLE_GOOD = 1000         # matching elements it must also reproduce
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

    def to_dict(self) -> dict:
        return {"coords": list(self.coords), "acc_bits": self.acc_bits, "mode": self.mode, "order": self.order,
                "parting_step": self.parting_step, "step": self.step, "step_reason": self.step_reason,
                "golden_acc": self.golden_acc, "finals": self.finals, "rtl_acc": self.rtl_acc,
                "rtl_matches": self.rtl_matches, "hypothesis": self.hypothesis, "rows": self.rows}


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
        L.append(f"  RTL accumulator {a.rtl_acc}: matches {which}")
    elif a.rtl_matches:
        L.append(f"  (no RTL accumulator dumped) the RTL's output matches the requantized "
                 f"{' and '.join(a.rtl_matches)} sum")
    if a.step is not None and a.step != a.parting_step:
        L.append(f"  step of interest: {a.step} ({a.rows[a.step]['label']}): {a.step_reason}")
    return L


# ----------------------------------------------------------------------------------------- golden directory
class _Golden:
    def __init__(self, directory: str):
        self.dir = directory
        path = os.path.join(directory, MANIFEST)
        if not os.path.isdir(directory):
            raise ValueError(f"{directory}: golden vector directory not found")
        if not os.path.isfile(path):
            raise ValueError(f"{directory}: not a golden vector directory (no {MANIFEST}; write one with "
                             "fxpsim.io.vectors.export_vectors or 'fxpsim export-vectors')")
        try:
            with open(path, encoding="utf-8") as f:
                m = json.load(f)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(m, dict) or m.get("format") != VECTORS_FORMAT:
            raise ValueError(f"{path}: not an fxpsim golden-vector manifest")
        self.manifest = m
        self.nodes = {n["name"]: n for n in m["nodes"]}
        self.by_dir = {n["dir"]: n for n in m["nodes"]}
        self.keys: dict[str, dict] = {}          # "NN_node/stem" -> {"node", "role", "port", "files": {fmt: entry}}
        for e in m["files"]:
            if e.get("set") != "golden":
                continue
            d, base = os.path.split(e["path"])
            stem = base.rsplit(".", 1)[0]
            key = f"{d}/{stem}"
            k = self.keys.setdefault(key, {"node": e["node"], "role": e["role"], "port": e.get("port", 0),
                                           "stem": stem, "dir": d, "files": {}, "meta": e})
            k["files"][e["format"]] = e
        self._cache: dict = {}

    def order(self, key: str) -> tuple:
        k = self.keys[key]
        role = k["role"]
        return (self.nodes[k["node"]]["index"], ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER),
                k["port"] or 0, key)

    def golden_path(self, key: str) -> tuple[str, str]:
        files = self.keys[key]["files"]
        fmt = next(f for f in ("npy", "hex", "mem", "csv") if f in files)
        return os.path.join(self.dir, files[fmt]["path"]), fmt

    def array(self, key: str) -> np.ndarray:
        if key not in self._cache:
            path, fmt = self.golden_path(key)
            self._cache[key] = _read(path, fmt, self.keys[key]["meta"])
        return self._cache[key]

    def key_of(self, node: str, stem: str) -> str | None:
        n = self.nodes.get(node)
        if n is None:
            return None
        key = f"{n['dir']}/{stem}"
        return key if key in self.keys else None


def _read(path: str, fmt: str, meta: dict) -> np.ndarray:
    """An array of the golden tensor described by ``meta`` from ``path`` (ValueError naming the file)."""
    shape = tuple(meta["shape"])
    bits, signed = int(meta["bits"]), bool(meta["signed"])
    if not os.path.isfile(path):
        raise ValueError(f"{path}: file not found")
    if fmt == "npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .npy file ({exc})") from None
        if bits == 0:
            return arr
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{path}: holds {arr.dtype} values; integer codes expected")
        if tuple(arr.shape) != shape:
            raise ValueError(f"{path}: shape {tuple(arr.shape)}, expected {shape} ({meta.get('layout', '')})")
        if arr.size:
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if int(arr.min()) < lo or int(arr.max()) > hi:
                raise ValueError(f"{path}: values outside the {bits}-bit {'signed' if signed else 'unsigned'} "
                                 f"range [{lo}, {hi}] (width mismatch?)")
        return arr.astype(np.int64)
    if bits == 0:
        raise ValueError(f"{path}: float tensors are compared as .npy only")
    if fmt == "csv":
        return read_csv_codes(path, bits=bits, signed=signed, shape=shape)
    return read_mem(path, bits, signed, radix=2 if fmt == "mem" else 16, shape=shape)


def _word_line(path: str, fmt: str, flat: int) -> int | None:
    """1-based line of word ``flat`` in a text dump (None for .npy)."""
    if fmt == "npy":
        return None
    comment = "#" if fmt == "csv" else "//"
    count = 0
    with open(path, encoding="ascii", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            s = line.split(comment, 1)[0].strip()
            if not s:
                continue
            n = len(s.split(",")) if fmt == "csv" else 1
            if count + n > flat:
                return lineno
            count += n
    return None


def _fmt_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    return ext if ext in ("mem", "csv", "npy") else "hex"


def _samefile(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _resolve(g: _Golden, rtl_dump) -> tuple[list, str]:
    """``[(golden key, rtl path, format)]`` and a description of the dump."""
    found = []
    if isinstance(rtl_dump, Mapping):
        for k, v in rtl_dump.items():
            key = _key_from_name(g, k)
            p = os.fspath(v)
            if not os.path.isfile(p):
                raise ValueError(f"{p}: RTL file for {k!r} not found")
            found.append((key, p, _fmt_of(p)))
        if not found:
            raise ValueError("the RTL mapping is empty: name at least one tensor")
        return found, f"{len(found)} file(s)"
    dump = os.fspath(rtl_dump)
    if not os.path.exists(dump):
        raise ValueError(f"{dump}: RTL dump not found (a directory, or a mapping tensor -> file)")
    if not os.path.isdir(dump):
        raise ValueError(f"{dump}: the RTL dump must be a directory (or a mapping tensor -> file)")
    for key, k in g.keys.items():
        if k["meta"]["bits"] == 0:
            continue
        for fmt in ("hex", "mem", "csv", "npy"):
            p = os.path.join(dump, k["dir"], f"{k['stem']}.{fmt}")
            if os.path.isfile(p) and not any(_samefile(p, os.path.join(g.dir, e["path"]))
                                             for e in k["files"].values()):
                found.append((key, p, fmt))
    for n in g.manifest["nodes"]:
        tb = n.get("tb_dense")
        if not tb:
            continue
        for role, fname in tb["outputs"].items():
            p = os.path.join(dump, tb["dir"], fname)
            if os.path.isfile(p):
                found.append((f"{n['dir']}/{role}", p, "hex"))
    direct = [f for f in ("acc_out.hex", "y_out.hex") if os.path.isfile(os.path.join(dump, f))]
    if direct:
        n = _tb_node_of(g, dump)
        for fname in direct:
            role = "accumulator" if fname == "acc_out.hex" else "output"
            p = os.path.join(dump, fname)
            if not any(_samefile(p, q) for _, q, _ in found):
                found.append((f"{n['dir']}/{role}", p, "hex"))
    if not found:
        first = next(iter(k for k in g.keys.values() if k["role"] == "output"), None)
        hint = f" (e.g. {first['dir']}/{first['stem']}.hex, or a tb_dense folder's acc_out.hex/y_out.hex)" \
            if first else ""
        raise ValueError(f"{dump}: no RTL files found for any golden tensor{hint}")
    return found, dump


def _tb_node_of(g: _Golden, dump: str) -> dict:
    tbs = [n for n in g.manifest["nodes"] if n.get("tb_dense")]
    for n in tbs:
        if _samefile(dump, os.path.join(g.dir, n["tb_dense"]["dir"])):
            return n
    parent = os.path.basename(os.path.dirname(os.path.abspath(dump)))
    hits = [n for n in tbs if n["dir"] == parent]
    if len(hits) == 1:
        return hits[0]
    env = os.path.join(dump, "params.env")
    if os.path.isfile(env):
        params = {}
        for line in open(env, encoding="ascii", errors="replace"):
            k, _, v = line.split("#", 1)[0].strip().partition("=")
            if v.strip().lstrip("-").isdigit():
                params[k.strip()] = int(v)
        hits = [n for n in tbs if all(params.get(p) == n["tb_dense"]["params"][p] for p in ("K", "M", "N"))]
        if len(hits) == 1:
            return hits[0]
    if len(tbs) == 1:
        return tbs[0]
    raise ValueError(f"{dump}: holds acc_out.hex/y_out.hex but it is not clear of which node; compare the golden "
                     f"directory itself, or name the files: {{'node/accumulator': ..., 'node/output': ...}}")


def _key_from_name(g: _Golden, k) -> str:
    if isinstance(k, tuple) and len(k) == 2:
        key = g.key_of(str(k[0]), str(k[1]))
        if key:
            return key
    elif isinstance(k, str):
        s = k.replace(os.sep, "/")
        for e in g.manifest["files"]:
            if e.get("set") == "golden" and s == e["path"]:
                d, base = os.path.split(e["path"])
                return f"{d}/{base.rsplit('.', 1)[0]}"
        if s in g.keys:
            return s
        for n in g.manifest["nodes"]:
            tb = n.get("tb_dense")
            if tb:
                for role, fname in tb["outputs"].items():
                    if s == f"{tb['dir']}/{fname}":
                        return f"{n['dir']}/{role}"
        node, _, stem = s.rpartition("/")
        key = g.key_of(node, stem) if node else None
        if key:
            return key
    examples = ", ".join(repr(f"{k['node']}/{k['stem']}") for k in list(g.keys.values())[-3:])
    raise ValueError(f"unknown tensor {k!r} in the RTL mapping; name tensors 'node/role' (e.g. {examples}) or "
                     "by a golden file path")


# ----------------------------------------------------------------------------------------- comparison
def compare(golden_dir, rtl_dump, *, html=None) -> CompareResult:
    """Compare an RTL's dump with the golden vectors in ``golden_dir`` (see the module docstring).

    Parameters
    ----------
    golden_dir : str or os.PathLike
        A directory written by :func:`fxpsim.io.vectors.export_vectors`.
    rtl_dump : str, os.PathLike or mapping
        A dump directory (golden layout, or ``tb_dense`` outputs), or ``{tensor: file}``.
    html : str or os.PathLike, optional
        Also write the HTML page (:meth:`CompareResult.to_html`) there.

    Returns
    -------
    CompareResult
        ``.ok``, ``.exit_code`` (0 match, 1 mismatch), ``.first`` (:class:`Mismatch`), ``.to_text()``.

    Raises
    ------
    ValueError
        No manifest, no RTL file found, a named file missing, a word of the wrong width, a malformed line,
        the wrong number of words (the message names the file and line).
    """
    g = _Golden(os.fspath(golden_dir))
    found, desc = _resolve(g, rtl_dump)
    diffs, arrays = [], {}
    for key, path, fmt in sorted(found, key=lambda f: g.order(f[0]) + (f[1],)):
        k = g.keys[key]
        meta = k["meta"]
        got = _read(path, fmt, meta)
        exp = g.array(key)
        mask = got != exp
        flat = np.flatnonzero(mask.reshape(-1))
        gp, _ = g.golden_path(key)
        n = g.nodes[k["node"]]
        diffs.append(TensorDiff(k["node"], n["index"], k["role"], k["stem"], meta["tensor"], os.path.relpath(gp, g.dir),
                                path, tuple(meta["shape"]), meta.get("layout", ""), tuple(meta.get("axes", ())),
                                int(meta["bits"]), bool(meta["signed"]), int(mask.size), int(flat.size),
                                int(flat[0]) if flat.size else None, mask=mask))
        arrays[id(diffs[-1])] = (got, exp, fmt)
    not_dumped = sorted({f"{k['node']}/{k['stem']}" for key, k in g.keys.items()
                         if k["meta"]["bits"] and key not in {f[0] for f in found}})
    first = None
    rtl_acc = {}                # node -> RTL accumulator array (first one found)
    for t in diffs:
        if t.role == "accumulator" and t.node not in rtl_acc:
            rtl_acc[t.node] = arrays[id(t)][0]
    for t in diffs:
        if t.ok:
            continue
        got, exp, fmt = arrays[id(t)]
        model = _NodeModel.make(g, t.node)
        t.patterns = _patterns(t, got, exp, model, rtl_acc.get(t.node))
        if first is None:
            first = _first_mismatch(g, t, got, exp, fmt, model, rtl_acc.get(t.node), arrays, diffs)
    result = CompareResult(os.fspath(golden_dir), desc, diffs, first, not_dumped)
    if html is not None:
        result.to_html(html)
    return result


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


def _sample(mask_flat: np.ndarray) -> np.ndarray:
    bad = np.flatnonzero(mask_flat)[:_SAMPLE_BAD]
    good = np.flatnonzero(~mask_flat)
    if good.size > _SAMPLE_GOOD:
        good = good[np.linspace(0, good.size - 1, _SAMPLE_GOOD).astype(np.int64)]
    return np.concatenate([bad, good])


def _acc_hypothesis(t: TensorDiff, got, exp, model: _NodeModel):
    """(description, kwargs, kind) of the alternative datapath that reproduces the RTL's accumulator."""
    idx = _sample(t.mask.reshape(-1))
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
    idx = _sample(t.mask.reshape(-1))
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


def _patterns(t: TensorDiff, got, exp, model, rtl_acc) -> list:
    out = []
    t.hypothesis = None
    if model is not None and t.role == "accumulator":
        h = _acc_hypothesis(t, got, exp, model)
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
                              got if t.role == "output" else None)
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


def _mac_analysis(model: _NodeModel, coords, t: TensorDiff, rtl_acc_tensor, rtl_acc, trace_step, rtl_y):
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
    rtl_value = None
    if rtl_acc_tensor is not None:
        rtl_value = int(rtl_acc_tensor.reshape(-1)[flat])
    elif rtl_acc is not None and flat is not None and rtl_acc.size == model.A.size:
        rtl_value = int(rtl_acc.reshape(-1)[flat])
    matches = []
    if rtl_value is not None:
        matches = [k for k in ("saturating", "wrapping", "exact") if finals[k] == rtl_value]
    elif rtl_y is not None and model.mult is not None and model.kind in ("double", "single"):
        y = int(rtl_y.reshape(-1)[flat])
        for k in ("saturating", "wrapping"):
            if int(model.requant(np.array([finals[k]]), np.array([int(coords[-1])]))[0]) == y:
                matches.append(k)
    step, reason, hyp_text = parting, "first overflow", None
    hyp = getattr(t, "hypothesis", None)
    if trace_step is not None:
        step, reason = trace_step, "the RTL's running accumulator first differs here"
    elif hyp and t.role == "accumulator":
        desc, kwh, kind = hyp
        hyp_text = desc
        hseq = _hyp_sequence(model, P, b, kwh, coords)
        if hseq is not None:
            for r, v in zip(rows, hseq):
                r["hypothesis"] = v
            if kind == "overflow":
                step, reason = parting, "saturating and wrapping sums part ways"
            elif kind == "width":
                step = next((s for s in range(len(hseq)) if hseq[s] != exact[s]), None)
                reason = f"first step exceeding the {kwh.get('bits')}-bit range"
            else:
                step = next((s for s in range(len(hseq)) if hseq[s] != gold[s]), None)
                reason = "first step where the RTL's model leaves the golden sequence"
    return MacAnalysis(tuple(int(v) for v in coords), model.W, model.mode, model.mac["order"], rows, parting, step,
                       reason, golden_acc, finals, rtl_value, matches, hyp_text)


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
