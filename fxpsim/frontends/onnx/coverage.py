"""How much of an ONNX model :func:`fxpsim.import_onnx` reads: every op of the model, how often it occurs, in which
nodes, and whether the importer supports it (:func:`onnx_coverage`, the table ``fxpsim inspect --coverage``
prints), and the single error an import raises when ops are missing (:func:`unsupported_error`), which lists
**every** unsupported op with its node names and counts, so that the whole distance is seen at once.

Reading a model never raises anything but a ``ValueError`` naming the file and the damage
(:func:`read_model`): a truncated or bit-flipped file, an attribute of the wrong type, a missing input.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

from .nodes import SUPPORTED_OPS, _require_onnx

__all__ = ["onnx_coverage", "OnnxCoverage", "OpCoverage", "read_model", "unsupported_error"]

#: How many node names an error or a table row shows per op before ``...``.
MAX_NAMES = 8


@dataclass(frozen=True)
class OpCoverage:
    """One op of a model: ``op`` (``domain:op_type`` for a non-default domain), how many nodes run it, their
    names (in model order) and whether :func:`fxpsim.import_onnx` reads the op."""
    op: str
    count: int
    nodes: tuple
    supported: bool

    def as_dict(self) -> dict:
        return {"op": self.op, "count": self.count, "nodes": list(self.nodes), "supported": self.supported}


@dataclass
class OnnxCoverage:
    """The op table of one model (rows in order of first appearance).

    Attributes
    ----------
    path : str
        The model file.
    rows : list of OpCoverage
        One row per op.
    quantized : bool
        The model holds quantized ops (QDQ or QOperator); fxpsim refuses float models.
    import_error : str or None
        Where every op is supported: the message of :func:`fxpsim.import_onnx` if the import still fails (an
        op used in a pattern it does not read), else ``None``. Not attempted (``None``) when ops are missing
        or the model is float; see :attr:`importable`.
    """
    path: str
    rows: list = field(default_factory=list)
    quantized: bool = True
    import_error: str | None = None

    @property
    def unsupported(self) -> list:
        """The rows whose op the importer does not read."""
        return [r for r in self.rows if not r.supported]

    @property
    def importable(self) -> bool:
        """Every op is supported, the model is quantized and :func:`fxpsim.import_onnx` read it."""
        return self.quantized and not self.unsupported and self.import_error is None

    @property
    def node_count(self) -> int:
        return sum(r.count for r in self.rows)

    def as_dict(self) -> dict:
        return {"path": self.path, "quantized": self.quantized, "importable": self.importable,
                "import_error": self.import_error, "nodes": self.node_count,
                "unsupported_nodes": sum(r.count for r in self.unsupported),
                "ops": [r.as_dict() for r in self.rows]}

    def to_text(self) -> str:
        """A plain-text table: op, count, supported, the node names (first :data:`MAX_NAMES`)."""
        width = max([len(r.op) for r in self.rows] + [2])
        lines = [f"{os.path.basename(self.path)}: {self.node_count} nodes, {len(self.rows)} ops, "
                 f"{len(self.unsupported)} unsupported ({sum(r.count for r in self.unsupported)} nodes)"]
        lines.append(f"{'op':<{width}}  {'count':>5}  supported  nodes")
        for r in self.rows:
            lines.append(f"{r.op:<{width}}  {r.count:>5}  {'yes' if r.supported else 'NO':<9}  {_names(r)}")
        if not self.quantized:
            lines.append("a float (non-quantized) model: fxpsim imports quantized models (QDQ or QOperator)")
        elif self.import_error:
            lines.append(f"import fails: {self.import_error}")
        elif not self.unsupported:
            lines.append("imports")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _names(row: OpCoverage) -> str:
    shown = ", ".join(repr(n) for n in row.nodes[:MAX_NAMES])
    return shown + (f", ... ({row.count - MAX_NAMES} more)" if row.count > MAX_NAMES else "")


def op_key(node) -> str:
    """``op_type``, or ``domain:op_type`` outside the default domain (``""`` / ``ai.onnx``)."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    return f"{domain}:{node.op_type}" if domain else node.op_type


def is_supported(key: str) -> bool:
    """The importer reads op ``key`` (as :func:`op_key` spells it)."""
    return key in SUPPORTED_OPS


def is_quantized_op(key: str) -> bool:
    op = key.split(":")[-1]
    return op in ("QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger", "QGemm") \
        or op.startswith("QLinear")


def table(model_nodes, path: str) -> OnnxCoverage:
    """The coverage table of parsed ``onnx.NodeProto`` s."""
    rows: OrderedDict = OrderedDict()
    for i, n in enumerate(model_nodes):
        key = op_key(n)
        rows.setdefault(key, []).append(n.name or f"{n.op_type}_{i}")
    cov = OnnxCoverage(os.fspath(path), [OpCoverage(k, len(v), tuple(v), is_supported(k)) for k, v in rows.items()])
    cov.quantized = any(is_quantized_op(k) for k in rows)
    return cov


def unsupported_error(cov: OnnxCoverage) -> ValueError | None:
    """One ValueError listing every unsupported op of ``cov`` with its count and node names, or ``None``."""
    bad = cov.unsupported
    if not bad:
        return None
    parts = "; ".join(f"{r.op} x{r.count} ({_names(r)})" for r in bad)
    n = sum(r.count for r in bad)
    return ValueError(f"{cov.path}: {len(bad)} unsupported ONNX op{'s' if len(bad) > 1 else ''} in {n} of "
                      f"{cov.node_count} nodes: {parts}. fxpsim.import_onnx supports: {', '.join(SUPPORTED_OPS)} "
                      f"(fxpsim.frontends.onnx.coverage.onnx_coverage(path) gives the whole table)")


def read_model(path):
    """Parse ``path`` into an ``onnx.ModelProto`` with its external data loaded.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        An empty, truncated or otherwise damaged file (the message names the file and the damage).
    """
    onnx = _require_onnx()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as fh:
        data = fh.read()
    if not data:
        raise ValueError(f"{path}: an empty file, not an ONNX model")
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 (google.protobuf.message.DecodeError and friends)
        raise ValueError(f"{path}: not an ONNX model (protobuf decoding failed: {exc})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise ValueError(f"{path}: not an ONNX model (no graph or no opset; a damaged or truncated file?)")
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        try:
            from onnx.external_data_helper import load_external_data_for_model
            load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{path}: cannot read the external tensor data ({exc})") from None
    return model


def onnx_coverage(path, *, try_import: bool = True) -> OnnxCoverage:
    """Which ops of the ONNX model at ``path`` :func:`fxpsim.import_onnx` reads; never raises for an
    unsupported model.

    Parameters
    ----------
    path : str or os.PathLike
        An ``.onnx`` file.
    try_import : bool
        When every op is supported and the model is quantized, also run the import and record its error (an op
        in a pattern the importer does not read) in :attr:`OnnxCoverage.import_error`.

    Returns
    -------
    OnnxCoverage
        One row per op (``op``, ``count``, ``nodes``, ``supported``); ``str(cov)`` is the table
        ``fxpsim inspect --coverage`` prints, ``cov.as_dict()`` its JSON.

    Raises
    ------
    FileNotFoundError, ValueError
        The file is missing or is not a readable ONNX model (:func:`read_model`).
    """
    from .shape_fold import fold_static_shapes
    model = fold_static_shapes(read_model(path))
    cov = table(model.graph.node, path)
    if try_import and cov.quantized and not cov.unsupported:
        from .importer import import_onnx
        try:
            import_onnx(path)
        except ValueError as exc:
            cov.import_error = str(exc)
    return cov

