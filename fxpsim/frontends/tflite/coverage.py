"""What of a ``.tflite`` model fxpsim imports, per kernel set: :func:`tflite_coverage` (``fxpsim.tflite_coverage``,
the table behind ``fxpsim inspect --coverage``) and the one error :func:`fxpsim.import_tflite` raises for a model it cannot
import, which lists every unsupported operator at once.

An operator is unsupported under a kernel set when

* fxpsim does not map its op (``op not supported``),
* its op is one fxpsim evaluates only on values known at import and its input is computed at run time
  (``on run-time data``), or
* that kernel set's Prepare refuses it, or fxpsim does not reproduce what that kernel set computes for it
  (:func:`fxpsim.frontends.tflite.prepare.prepare_problem`, :data:`fxpsim.frontends.tflite.ops.KERNEL_LIMITS`).

Operators of subgraphs other than 0 (the init subgraphs of ``CALL_ONCE``, bodies of control flow) are listed
under ``subgraph <g>``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .prepare import prepare_problem
from .reader import _FLOAT32, _INT8, _INT16, _TYPE_NAMES, _UINT8, _read_model

__all__ = ["tflite_coverage", "Coverage", "OpCoverage", "SUPPORTED_OPS", "KERNEL_SETS", "unsupported_error"]

KERNEL_SETS = ("reference", "builtin", "xnnpack")

#: Builtin operators the importer maps (int8 models from the TF converter).
SUPPORTED_OPS = (
    "ADD", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "EXPAND_DIMS",
    "FULLY_CONNECTED", "HARD_SWISH", "LEAKY_RELU", "LOGISTIC", "MAX_POOL_2D", "MEAN", "MUL", "PACK", "PAD",
    "PADV2", "QUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1", "RESHAPE", "SHAPE", "SOFTMAX", "SQUEEZE",
    "STRIDED_SLICE", "SUB", "TANH", "CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE",
    "SPLIT", "SPLIT_V", "SLICE", "GATHER", "TRANSPOSE", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR",
    "BATCH_MATMUL",
    "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "RSQRT", "PRELU", "ELU", "SUM", "REDUCE_MAX",
    "LOG_SOFTMAX", "TRANSPOSE_CONV",
)
#: Ops of init subgraphs (run once by ``CALL_ONCE``, evaluated at import).
INIT_OPS = ("VAR_HANDLE", "ASSIGN_VARIABLE")
#: Supported ops that fxpsim evaluates only on values known at import (shape arithmetic).
STATIC_ONLY_OPS = ("PACK",)
#: Ops whose output is known at import whenever their inputs are (or always, for SHAPE).
_FOLDABLE = ("SHAPE", "PACK", "STRIDED_SLICE", "RESHAPE", "CONCATENATION", "SLICE", "GATHER", "TRANSPOSE")


@dataclass(frozen=True)
class OpCoverage:
    """One op type of a model.

    Attributes
    ----------
    op : str
        The builtin op name (``CUSTOM(<name>)`` for custom ops).
    count : int
        How many operators of the model have it.
    nodes : tuple of str
        Each operator, as ``"operator <k> (<op>, output '<tensor>')"`` (``"subgraph <g> operator <k> ..."``
        outside subgraph 0).
    problems : dict
        Kernel set -> tuple of ``(node, reason)`` for the operators that kernel set cannot import (empty when
        every one imports).
    """

    op: str
    count: int
    nodes: tuple
    problems: dict = field(default_factory=dict)

    def imports(self, kernels: str) -> bool:
        """Whether every operator of this op imports under ``kernels``."""
        return not self.problems.get(kernels)


@dataclass(frozen=True)
class Coverage:
    """The coverage table of one model (:func:`tflite_coverage`): one :class:`OpCoverage` per op type, in order of
    first appearance, and the model's run-time tensor types."""

    path: str
    rows: tuple
    activation_types: dict
    kernels: tuple = KERNEL_SETS

    def unsupported(self, kernels: str = "reference") -> list:
        """The rows of the op types that do not (fully) import under ``kernels``."""
        _check_kernels(kernels)
        return [r for r in self.rows if not r.imports(kernels)]

    def imports(self, kernels: str = "reference") -> bool:
        """Whether :func:`fxpsim.import_tflite` maps every operator under ``kernels``."""
        return not self.unsupported(kernels)

    def to_dict(self) -> dict:
        """Plain data (JSON-ready)."""
        return {"path": self.path, "activation_types": dict(self.activation_types),
                "ops": [{"op": r.op, "count": r.count, "nodes": list(r.nodes),
                         "kernels": {k: ([{"node": n, "reason": why} for n, why in r.problems.get(k, ())]
                                         or "imports") for k in self.kernels}} for r in self.rows]}

    def format(self) -> str:
        """A text table: op, count, and per kernel set ``yes`` / ``no`` (``k/n`` where only some operators
        import), then every unsupported operator with its reason."""
        head = ["op", "count"] + list(self.kernels)
        body = []
        for r in self.rows:
            cells = []
            for k in self.kernels:
                bad = len(r.problems.get(k, ()))
                cells.append("yes" if not bad else ("no" if bad == r.count else f"{r.count - bad}/{r.count}"))
            body.append([r.op, str(r.count)] + cells)
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
        lines = [f"{self.path}: {sum(r.count for r in self.rows)} operators of {len(self.rows)} op types; "
                 f"run-time tensors: " + ", ".join(f"{t} x{n}" for t, n in self.activation_types.items())]
        for row in [head] + body:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        for k in self.kernels:
            bad = self.unsupported(k)
            if bad:
                lines.append(f"not imported with kernels={k!r}:")
                lines.extend(_problem_lines(bad, k))
        return "\n".join(lines)

    __str__ = format


def _check_kernels(kernels):
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {KERNEL_SETS}, got {kernels!r}")


def _problem_lines(rows, kernels) -> list:
    out = []
    for r in rows:
        probs = r.problems[kernels]
        reasons: dict = {}
        for node, why in probs:
            reasons.setdefault(why, []).append(node)
        for why, nodes in reasons.items():
            out.append(f"  {r.op} x{len(nodes)}: {why}:")
            out.extend(f"    {n}" for n in nodes)
    return out


def _where(graph: dict, op: dict, g: int) -> str:
    outs = ", ".join(repr(graph["tensors"][i]["name"]) for i in op["outputs"] if 0 <= i < len(graph["tensors"]))
    sub = f"subgraph {g} " if g else ""
    return f"{sub}operator {op['index']} ({op['op']}{', output ' + outs if outs else ''})"


def analyse(model: dict, path: str, kernel_sets=KERNEL_SETS) -> Coverage:
    """The :class:`Coverage` of a parsed model (:func:`~fxpsim.frontends.tflite.reader._read_model`)."""
    from .ops import kernel_support
    rows: dict = {}
    types: dict = {}
    for g, graph in enumerate(model.get("graphs") or [model]):
        tensors = graph["tensors"]
        static = {t["index"] for t in tensors if t["raw"] is not None}
        for op in graph["ops"]:
            name = op["op"]
            node = _where(graph, op, g)
            row = rows.setdefault(name, {"count": 0, "nodes": [], "problems": {k: [] for k in kernel_sets}})
            row["count"] += 1
            row["nodes"].append(node)
            ins = [i for i in op["inputs"] if i >= 0]
            if name in _FOLDABLE and (name == "SHAPE" or all(i in static for i in ins)):
                static.update(i for i in op["outputs"] if i >= 0)
                continue
            for i in op["outputs"]:
                if i >= 0 and g == 0:
                    t = _TYPE_NAMES.get(tensors[i]["type"], str(tensors[i]["type"]))
                    types[t] = types.get(t, 0) + 1
            if name not in SUPPORTED_OPS:
                why = "op not supported by fxpsim.import_tflite"
                for k in kernel_sets:
                    row["problems"][k].append((node, why))
                continue
            if g:
                if name not in INIT_OPS:
                    for k in kernel_sets:
                        row["problems"][k].append((node, "in a subgraph other than 0 that is not an init "
                                                         "subgraph of VAR_HANDLE/ASSIGN_VARIABLE"))
                continue
            if name in ("CALL_ONCE", "VAR_HANDLE", "ASSIGN_VARIABLE"):
                continue
            if name in STATIC_ONLY_OPS:
                for k in kernel_sets:
                    row["problems"][k].append((node, "on run-time data (fxpsim evaluates it only on values "
                                                     "known at import)"))
                continue
            for k in kernel_sets:
                why = _type_problem(name, op, tensors, graph["outputs"], k, graph["inputs"]) or kernel_support(name, k) or \
                    prepare_problem(op, tensors, k)
                if why:
                    row["problems"][k].append((node, why))
    out = tuple(OpCoverage(n, r["count"], tuple(r["nodes"]), {k: tuple(v) for k, v in r["problems"].items() if v})
                for n, r in rows.items())
    return Coverage(os.fspath(path), out, types, tuple(kernel_sets))


def _type_problem(name: str, op: dict, tensors: list, outputs=(), kernels: str = "reference", inputs=None) -> str | None:
    """Why the run-time output types of a supported op are not imported (int8 everywhere; float32 out of
    DEQUANTIZE; uint8 out of a QUANTIZE of int8 that is a model output), or None."""
    from .int16_ops import INT16_OPS, int16_or_uint8_problem
    narrow = int16_or_uint8_problem(name, op, tensors, kernels, inputs)
    if narrow or name in INT16_OPS and any(tensors[i]["type"] == _INT16 for i in op["outputs"] if i >= 0):
        return narrow
    for i in op["outputs"]:
        if i < 0:
            continue
        t = tensors[i]["type"]
        if t == _UINT8 and name == "QUANTIZE" and i in outputs and op["inputs"] and \
                tensors[op["inputs"][0]]["type"] == _INT8:
            continue
        if t == _INT8 or (t == _FLOAT32 and name == "DEQUANTIZE") or (t == 13 and name == "VAR_HANDLE"):
            continue
        kind = {_INT16: "int16 (16x8 quantization)", _UINT8: "uint8 (legacy quantization)",
                _FLOAT32: "float32"}.get(t, _TYPE_NAMES.get(t, str(t)))
        return f"its output {tensors[i]['name']!r} is {kind}, which fxpsim does not import (int8 is)"
    return None


def unsupported_error(cov: Coverage, kernels: str) -> ValueError | None:
    """The one ``ValueError`` that names every operator ``kernels`` cannot import (``None`` if there is none)."""
    bad = cov.unsupported(kernels)
    if not bad:
        return None
    n_ops = sum(len(r.problems[kernels]) for r in bad)
    lines = [f"{cov.path}: {n_ops} operator(s) of {len(bad)} op type(s) are not imported by fxpsim.import_tflite "
             f"with kernels={kernels!r} (every one listed; fxpsim.tflite_coverage(path) prints the "
             f"whole table):"] + _problem_lines(bad, kernels)
    lines.append(f"(supported: {', '.join(SUPPORTED_OPS)})")
    return ValueError("\n".join(lines))


def tflite_coverage(path, *, kernels=None) -> Coverage:
    """Which operators of a ``.tflite`` model :func:`fxpsim.import_tflite` imports, under each kernel set,
    without importing it (and without failing on an unsupported model).

    Parameters
    ----------
    path : str or os.PathLike
        A ``.tflite`` flatbuffer.
    kernels : str or sequence of str, optional
        The kernel sets to check (default: all of ``"reference"``, ``"builtin"``, ``"xnnpack"``).

    Returns
    -------
    Coverage
        ``rows`` (one :class:`OpCoverage` per op type: count, the operators, and per kernel set the operators
        that do not import with why); ``unsupported(kernels)``, ``imports(kernels)``, ``format()`` (a text
        table, also ``str()``), ``to_dict()``.

    Raises
    ------
    ValueError
        A damaged file (naming the file and the damage), or an unknown kernel set.
    """
    if kernels is None:
        sets = KERNEL_SETS
    else:
        sets = (kernels,) if isinstance(kernels, str) else tuple(kernels)
        for k in sets:
            _check_kernels(k)
    path = os.fspath(path)
    with open(path, "rb") as fh:
        buf = fh.read()
    return analyse(_read_model(buf, path), path, sets)

