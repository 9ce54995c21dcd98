"""Graph files: one ``.npz`` holding the constants' integer codes and a JSON description of the graph
(``graph.json``; no pickles), written by :meth:`fxpsim.graph.IntegerGraph.save` (:func:`save_graph`) and read
back bit for bit by :func:`load_graph`.

:func:`load_graph` treats the file as hostile. It opens the archive itself (never ``np.load``, which
inflates every entry) and reads only the entries the graph declares: ``graph.json`` (at most
:data:`MAX_JSON_BYTES`) and one ``const/<name>.npy`` per constant tensor. Before inflating a constant it parses
the ``.npy`` header and checks that the entry's declared size is exactly header + :math:`\\prod` shape
:math:`\\times` itemsize for the shape ``graph.json`` declares, and that the declared sizes of everything read
sum to at most ``max_bytes``; the inflater never produces more than the declared size. Every damage (a
truncated or bit-flipped archive, a bad CRC, an unsupported compression method, broken JSON, a wrong shape,
an attribute out of range) is one ``ValueError`` that starts with the file's path.

The graph classes live in :mod:`fxpsim.graph.ir`, which imports this module; :func:`load_graph` imports them
when called.
"""
from __future__ import annotations

import json
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np

__all__ = ["GRAPH_FORMAT", "GRAPH_FORMAT_VERSION", "MAX_JSON_BYTES", "DEFAULT_MAX_BYTES", "graph_to_json",
           "save_graph", "load_graph"]

GRAPH_FORMAT = "fxpsim-integer-graph"
GRAPH_FORMAT_VERSION = 1
#: The largest ``graph.json`` :func:`load_graph` inflates (bytes).
MAX_JSON_BYTES = 64 << 20
#: The default cap on the total declared (inflated) size of the entries :func:`load_graph` reads (bytes).
DEFAULT_MAX_BYTES = 2 << 30
_CHUNK = 16 << 20

# what the archive, JSON and npy layers raise on damage; all become one ValueError naming the file
_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
           struct.error, tokenize.TokenError, SyntaxError, UnicodeDecodeError, json.JSONDecodeError, KeyError,
           TypeError, ValueError, IndexError, OverflowError, AttributeError, RecursionError)


def graph_to_json(graph) -> dict:
    """The JSON description of ``graph`` written as ``graph.json`` (:meth:`IntegerGraph.to_json`)."""
    return {"format": GRAPH_FORMAT, "version": GRAPH_FORMAT_VERSION, "name": graph.name, "meta": graph.meta,
            "inputs": graph.inputs, "outputs": graph.outputs,
            "tensors": [t.to_json() for t in graph.tensors.values()],
            "nodes": [n.to_json() for n in graph.nodes]}


def save_graph(graph, path) -> str:
    """Write ``graph`` to ``path`` (``.npz``: the constants' codes and ``graph.json``; no pickles).
    Returns the path written (:meth:`IntegerGraph.save`)."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    arrays = {f"const/{k}": t.data for k, t in graph.tensors.items() if t.is_constant}
    text = json.dumps(graph.to_json(), sort_keys=True)
    arrays["graph.json"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


class _Budget:
    """The declared bytes still allowed to be inflated."""

    def __init__(self, max_bytes: int):
        self.left = max_bytes
        self.cap = max_bytes

    def take(self, n: int, what: str) -> None:
        if n > self.left:
            raise ValueError(f"{what} declares {n:,} bytes, over the {self.cap:,}-byte total that load_graph "
                             f"reads (raise max_bytes= to load a larger graph)")
        self.left -= n


def _entry(zf: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    try:
        return zf.getinfo(name)
    except KeyError:
        raise ValueError(f"the archive has no entry {name!r}") from None


def _read_exact(fp, n: int, what: str) -> bytearray:
    """Read exactly ``n`` bytes in chunks (no larger allocation than ``n``), then check the entry ends (the
    CRC is checked at its end)."""
    buf = bytearray(n)
    view, pos = memoryview(buf), 0
    while pos < n:
        chunk = fp.read(min(_CHUNK, n - pos))
        if not chunk:
            raise ValueError(f"{what} is truncated ({pos:,} of {n:,} bytes)")
        view[pos:pos + len(chunk)] = chunk
        pos += len(chunk)
    if fp.read(1):
        raise ValueError(f"{what} is longer than declared")
    return buf


def _read_json(zf: zipfile.ZipFile, budget: _Budget) -> dict:
    # graph.json is stored as a uint8 .npy array (savez) or, hand-made, as raw JSON text
    names = [n for n in ("graph.json.npy", "graph.json") if n in zf.NameToInfo]
    if not names:
        raise ValueError("no graph.json inside")
    info = zf.getinfo(names[0])
    if info.file_size > MAX_JSON_BYTES:
        raise ValueError(f"graph.json declares {info.file_size:,} bytes (at most {MAX_JSON_BYTES:,})")
    budget.take(info.file_size, "graph.json")
    with zf.open(info) as fp:
        raw = bytes(_read_exact(fp, info.file_size, "graph.json"))
    if info.filename.endswith(".npy"):
        arr = _npy_from_bytes(raw, "graph.json")
        if arr.dtype != np.uint8 or arr.ndim != 1:
            raise ValueError(f"graph.json is a {arr.dtype} array of shape {arr.shape}, not uint8 text")
        raw = arr.tobytes()
    desc = json.loads(raw.decode("utf-8"))
    if not isinstance(desc, dict):
        raise ValueError(f"graph.json holds a {type(desc).__name__}, not an object")
    return desc


def _npy_header(fp, what: str):
    """``(shape, fortran_order, dtype, header_bytes)`` of a ``.npy`` stream, read without its data."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        head = 10
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        head = 12
    else:
        raise ValueError(f"{what}: .npy version {version} is not 1.0 or 2.0")
    return shape, fortran, dtype, head


def _npy_from_bytes(raw: bytes, what: str) -> np.ndarray:
    import io
    fp = io.BytesIO(raw)
    shape, fortran, dtype, _ = _npy_header(fp, what)
    if dtype.hasobject:
        raise ValueError(f"{what}: object arrays are not read")
    count = int(np.prod(shape, dtype=object))
    data = raw[fp.tell():]
    if len(data) != count * dtype.itemsize:
        raise ValueError(f"{what}: {len(data)} data bytes for shape {shape} of {dtype}")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _read_constant(zf: zipfile.ZipFile, name: str, shape: tuple, budget: _Budget) -> np.ndarray:
    """The codes of constant ``name``: header checked against the declared ``shape`` and the entry's declared
    size before any data is inflated."""
    what = f"constant {name!r}"
    info = _entry(zf, f"const/{name}.npy")
    with zf.open(info) as fp:
        head = fp.read(12)    # magic + version + header length: enough to know the header's size
        if len(head) < 10:
            raise ValueError(f"{what}: the .npy header is truncated")
        hlen = struct.unpack("<H", head[8:10])[0] + 10 if head[6] == 1 else struct.unpack("<I", head[8:12])[0] + 12
        if hlen > 65536:
            raise ValueError(f"{what}: a {hlen:,}-byte .npy header")
        header = head + _read_exact_prefix(fp, hlen - len(head), what)
        import io
        hfp = io.BytesIO(header)
        file_shape, fortran, dtype, _ = _npy_header(hfp, what)
        if hfp.tell() != hlen:
            raise ValueError(f"{what}: the .npy header's length does not match its text")
        if dtype.kind not in "iu":
            raise ValueError(f"{what}: constant codes must be integers, the file holds {dtype}")
        if tuple(file_shape) != tuple(shape):
            raise ValueError(f"{what}: the data has shape {tuple(file_shape)}, graph.json declares {tuple(shape)}")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if info.file_size != hlen + nbytes:
            raise ValueError(f"{what}: the entry declares {info.file_size:,} bytes, its shape {tuple(shape)} of "
                             f"{dtype} needs {hlen + nbytes:,}")
        budget.take(info.file_size, what)
        buf = _read_exact(fp, nbytes, what)
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _read_exact_prefix(fp, n: int, what: str) -> bytes:
    data = fp.read(n)
    if len(data) != n:
        raise ValueError(f"{what}: the .npy header is truncated")
    return data


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if isinstance(exc, ValueError) and type(exc) is ValueError else f"{type(exc).__name__}: {text}"


def load_graph(path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> "IntegerGraph":
    """Read a graph written by :meth:`IntegerGraph.save`.

    Parameters
    ----------
    path : str or path-like
    max_bytes : int
        Cap on the total declared (inflated) size of the entries read: ``graph.json`` plus every constant.
        Entries the graph does not declare are never read.

    Returns
    -------
    IntegerGraph
        Validated as every graph is when built (every node's attributes and shapes; see
        :mod:`fxpsim.graph.validate`), so a graph that loads runs.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Anything else: one message that starts with the path and names the damage.
    """
    from .ir import IntegerGraph, Node, TensorSpec
    path = os.fspath(path)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not an fxpsim graph file")
    budget = _Budget(int(max_bytes))
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except (OSError, *_DAMAGE) as exc:
        raise ValueError(f"{path}: not an fxpsim graph file (unreadable zip archive: {_describe(exc)})") from None
    with zf:
        try:
            desc = _read_json(zf, budget)
        except (OSError, *_DAMAGE) as exc:
            raise ValueError(f"{path}: not an fxpsim graph file (graph.json: {_describe(exc)})") from None
        try:
            if desc.get("format") != GRAPH_FORMAT:
                raise ValueError(f"format {desc.get('format')!r}, not {GRAPH_FORMAT!r}")
            if desc.get("version") != GRAPH_FORMAT_VERSION:
                raise ValueError(f"version {desc.get('version')!r}, this fxpsim reads {GRAPH_FORMAT_VERSION}")
            tensors = []
            for t in _list(desc, "tensors"):
                if not isinstance(t, dict):
                    raise ValueError(f"a tensor entry is a {type(t).__name__}, not an object")
                shape = _shape(t)
                data = _read_constant(zf, t["name"], shape, budget) if t.get("constant") else None
                tensors.append(TensorSpec(t["name"], t["bits"], t["signed"], shape, t.get("scale"),
                                          t.get("zero_point"), t.get("axis"), data))
            nodes = []
            for n in _list(desc, "nodes"):
                if not isinstance(n, dict) or not isinstance(n.get("attrs", {}), dict):
                    raise ValueError("a node entry is not an object with an attrs object")
                nodes.append(Node(n["name"], n["op"], _list(n, "inputs"), _list(n, "outputs"), n.get("attrs", {})))
            meta = desc.get("meta", {})
            if not isinstance(meta, dict):
                raise ValueError(f"meta is a {type(meta).__name__}, not an object")
            return IntegerGraph(tensors, nodes, _list(desc, "inputs"), _list(desc, "outputs"),
                                desc.get("name", "graph"), meta)
        except (OSError, *_DAMAGE) as exc:
            raise ValueError(f"{path}: damaged fxpsim graph file ({_describe(exc)})") from None


def _list(d: dict, key: str) -> list:
    v = d[key]
    if not isinstance(v, list):
        raise ValueError(f"{key!r} is a {type(v).__name__}, not a list")
    return v


def _shape(t: dict) -> tuple:
    shape = t.get("shape", [])
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ValueError(f"tensor {t.get('name')!r}: shape must be a list of ints, got {shape!r}")
    return tuple(shape)
