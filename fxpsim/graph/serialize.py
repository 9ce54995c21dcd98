"""Graph files: one ``.npz`` holding the constants' integer codes and a JSON description of the graph
(``graph.json``; no pickles), written by :meth:`fxpsim.graph.IntegerGraph.save` (:func:`save_graph`) and read
back bit for bit by :func:`load_graph`, which reports a damaged or foreign file as ``ValueError``.

The graph classes live in :mod:`fxpsim.graph.ir`, which imports this module; :func:`load_graph` imports them
when called.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

__all__ = ["GRAPH_FORMAT", "GRAPH_FORMAT_VERSION", "graph_to_json", "save_graph", "load_graph"]

GRAPH_FORMAT = "fxpsim-integer-graph"
GRAPH_FORMAT_VERSION = 1


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


def load_graph(path) -> IntegerGraph:
    """Read a graph written by :meth:`IntegerGraph.save`; a damaged or foreign file raises ``ValueError``."""
    from .ir import IntegerGraph, Node, TensorSpec
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            files = dict(npz.items())
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not an fxpsim graph file (unreadable npz: {exc})") from None
    if "graph.json" not in files:
        raise ValueError(f"{path}: not an fxpsim graph file (no graph.json inside)")
    try:
        desc = json.loads(files["graph.json"].tobytes().decode("utf-8"))
        if desc.get("format") != GRAPH_FORMAT:
            raise ValueError(f"format {desc.get('format')!r}")
        if desc.get("version") != GRAPH_FORMAT_VERSION:
            raise ValueError(f"version {desc.get('version')!r}, this fxpsim reads {GRAPH_FORMAT_VERSION}")
        tensors = []
        for t in desc["tensors"]:
            data = files[f"const/{t['name']}"] if t.get("constant") else None
            tensors.append(TensorSpec(t["name"], t["bits"], t["signed"], tuple(t["shape"]), t.get("scale"),
                                      t.get("zero_point"), t.get("axis"), data))
        nodes = [Node(n["name"], n["op"], n["inputs"], n["outputs"], n["attrs"]) for n in desc["nodes"]]
        return IntegerGraph(tensors, nodes, desc["inputs"], desc["outputs"], desc["name"], desc["meta"])
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise ValueError(f"{path}: damaged fxpsim graph file ({type(exc).__name__}: {exc})") from None
