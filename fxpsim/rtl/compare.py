r"""Compare an RTL's dump with golden vectors (:func:`fxpsim.rtl.export_vectors`) and locate the first
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

import os

import numpy as np

from .compare_results import CompareResult, MacAnalysis, Mismatch, TensorDiff
from .golden import _Golden, _key_from_name, _read, _resolve
from .mismatch import _first_mismatch, _patterns
from .node_model import _NodeModel

__all__ = ["compare", "compare_arrays", "CompareResult", "TensorDiff", "Mismatch", "MacAnalysis"]


# ----------------------------------------------------------------------------------------- comparison
def compare(golden_dir, rtl_dump, *, html=None) -> CompareResult:
    """Compare an RTL's dump with the golden vectors in ``golden_dir`` (see the module docstring).

    Parameters
    ----------
    golden_dir : str or os.PathLike
        A directory written by :func:`fxpsim.rtl.export_vectors`.
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
    items = [(key, path, fmt, _read(path, fmt, g.keys[key]["meta"]), None) for key, path, fmt in found]
    return _compare(g, os.fspath(golden_dir), desc, items, html)


def compare_arrays(golden_dir, arrays, *, known=None, source: str = "arrays", labels=None, html=None) -> CompareResult:
    """:func:`compare` on arrays the caller holds (a simulator's stream, a scoreboard) instead of files.

    Parameters
    ----------
    golden_dir : str or os.PathLike
    arrays : mapping
        ``{tensor: array}``, tensors named as in :func:`compare`'s mapping (``"0:dense/output"``); each array has
        the golden tensor's shape.
    known : mapping, optional
        ``{tensor: bool array}`` of the golden shape: the elements the RTL has produced so far (a scoreboard
        that stops at the first mismatch).  Only those are compared; the others are neither mismatches nor
        evidence for a pattern (a pattern must reproduce the known elements only), the ``elements`` column
        counts the known ones, and layout patterns (which need the whole tensor) are not tried.
    source : str
        What the report names as the RTL (``"RTL: ..."``).
    labels : mapping, optional
        ``{tensor: text}`` shown in the report's "RTL file" column and line (e.g. the stream's port name).

    Raises
    ------
    ValueError
        An unknown tensor, an array or mask of the wrong shape, a non-integer array.
    """
    g = _Golden(os.fspath(golden_dir))
    known, labels = dict(known or {}), dict(labels or {})
    items = []
    for name, arr in arrays.items():
        key = _key_from_name(g, name)
        meta = g.keys[key]["meta"]
        shape = tuple(meta["shape"])
        a = np.asarray(arr)
        if a.dtype.kind not in "iu" or a.shape != shape:
            raise ValueError(f"compare_arrays: {name!r} must be an integer array of shape {shape}, got "
                             f"{a.dtype} {a.shape}")
        mask = known.pop(name, None)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != bool or mask.shape != shape:
                raise ValueError(f"compare_arrays: known[{name!r}] must be a bool array of shape {shape}")
        items.append((key, str(labels.pop(name, name)), "array", a.astype(np.int64), mask))
    if known or labels:
        raise ValueError(f"compare_arrays: known/labels name tensors not in arrays: {sorted(set(known) | set(labels))}")
    if not items:
        raise ValueError("compare_arrays: no arrays given")
    return _compare(g, os.fspath(golden_dir), source, items, html)


def _compare(g: _Golden, golden_dir: str, desc: str, items, html) -> CompareResult:
    """Compare ``[(golden key, RTL label or path, format, array, known mask or None)]``."""
    diffs, arrays = [], {}
    for key, path, fmt, got, known in sorted(items, key=lambda f: g.order(f[0]) + (f[1],)):
        k = g.keys[key]
        meta = k["meta"]
        exp = g.array(key)
        if known is not None:
            got = np.where(known, got, exp)          # elements not produced yet: never a mismatch
        mask = got != exp
        flat = np.flatnonzero(mask.reshape(-1))
        gp, _ = g.golden_path(key)
        n = g.nodes[k["node"]]
        diffs.append(TensorDiff(k["node"], n["index"], k["role"], k["stem"], meta["tensor"], os.path.relpath(gp, g.dir),
                                path, tuple(meta["shape"]), meta.get("layout", ""), tuple(meta.get("axes", ())),
                                int(meta["bits"]), bool(meta["signed"]),
                                int(mask.size if known is None else np.count_nonzero(known)), int(flat.size),
                                int(flat[0]) if flat.size else None, mask=mask, known=known))
        arrays[id(diffs[-1])] = (got, exp, fmt)
    not_dumped = sorted({f"{k['node']}/{k['stem']}" for key, k in g.keys.items()
                         if k["meta"]["bits"] and key not in {f[0] for f in items}})
    first = None
    rtl_acc = {}                # node -> (RTL accumulator array, known mask), the first one found
    for t in diffs:
        if t.role == "accumulator" and t.node not in rtl_acc:
            rtl_acc[t.node] = arrays[id(t)][0], t.known
    for t in diffs:
        if t.ok:
            continue
        got, exp, fmt = arrays[id(t)]
        model = _NodeModel.make(g, t.node)
        acc, acc_known = rtl_acc.get(t.node, (None, None))
        t.patterns = _patterns(t, got, exp, model, acc)
        if first is None:
            if acc_known is not None and (acc_known.shape != exp.shape or not acc_known.reshape(-1)[t.first_flat]):
                acc = None              # the RTL has not produced that element's accumulator yet
            first = _first_mismatch(g, t, got, exp, fmt, model, acc, arrays, diffs)
    result = CompareResult(golden_dir, desc, diffs, first, not_dumped)
    if html is not None:
        result.to_html(html)
    return result
