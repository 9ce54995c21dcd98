"""Edit tracking of the integer graph: one counter that every change to a built graph bumps, so that what is
derived from a graph (its compiled plans, :mod:`fxpsim.graph.plan`, and the per-graph caches of the ops:
requantizers, tables, shadows) is never silently stale.

* :data:`EDITS` ``[0]`` counts edits, process-wide: any assignment to an attribute of a built
  :class:`~fxpsim.graph.ir.IntegerGraph`, :class:`~fxpsim.graph.ir.Node` or
  :class:`~fxpsim.graph.ir.TensorSpec`; any change to their lists and dicts (``graph.nodes``, ``graph.tensors``,
  ``graph.inputs``/``outputs``, ``graph.meta`` at any depth, ``node.inputs``/``outputs``, ``node.attrs`` at any
  depth), which are :class:`TrackedList` / :class:`TrackedDict`. One counter for all graphs: an edit of one graph
  also retires the plans of the others (they recompile once), never the reverse mistake.
* Arrays cannot be tracked by assignment, so the graph holds them read-only (:func:`frozen`): a constant's
  codes, every scale and zero point. Writing into one raises; a plan also re-checks, on every run, that each
  constant array it read is still the read-only array it compiled from.
* :func:`refresh_caches` drops a graph's derived caches (its ``_``-prefixed attributes) when an edit happened
  since they were filled.
"""
from __future__ import annotations

import numpy as np

__all__ = ["EDITS", "TrackedDict", "TrackedList", "bump", "frozen", "plain", "track", "refresh_caches"]

#: ``EDITS[0]``: the number of edits made to built graphs in this process (see the module docstring).
EDITS = [0]


def bump() -> None:
    EDITS[0] += 1


def _bumping(base, name):
    """``base.name`` that first bumps :data:`EDITS`, and tracks the values it stores."""
    method = getattr(base, name)

    def mutate(self, *args, **kwargs):
        EDITS[0] += 1
        if name in ("__setitem__", "insert", "setdefault") and len(args) == 2:
            args = (args[0], track(args[1]) if not isinstance(args[0], slice) else [track(v) for v in args[1]])
        elif name in ("append",):
            args = (track(args[0]),)
        elif name in ("extend", "__iadd__"):
            args = ([track(v) for v in args[0]],)
        elif name in ("update", "__ior__"):
            args, kwargs = ({k: track(v) for k, v in dict(*args, **kwargs).items()},), {}
        return method(self, *args, **kwargs)
    mutate.__name__ = name
    return mutate


_LIST_MUTATORS = ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop",
                  "remove", "clear", "sort", "reverse")
_DICT_MUTATORS = ("__setitem__", "__delitem__", "__ior__", "pop", "popitem", "clear", "update", "setdefault")


class TrackedList(list):
    """A list whose every in-place change bumps :data:`EDITS` (a graph's and a node's lists); what it stores is
    tracked in turn."""

    def __reduce_ex__(self, protocol):       # pickles and copies as a plain list, tracked again when rebuilt
        return (TrackedList, (list(self),))


class TrackedDict(dict):
    """A dict whose every in-place change bumps :data:`EDITS` (``node.attrs``, ``graph.meta``, ``graph.tensors``);
    what it stores is tracked in turn."""

    def __reduce_ex__(self, protocol):
        return (TrackedDict, (dict(self),))


for _name in _LIST_MUTATORS:
    setattr(TrackedList, _name, _bumping(list, _name))
for _name in _DICT_MUTATORS:
    setattr(TrackedDict, _name, _bumping(dict, _name))


def track(value):
    """``value`` with every dict and list inside it (at any depth) made tracked; other values as they are."""
    if isinstance(value, dict):
        return TrackedDict({k: track(v) for k, v in value.items()})
    if isinstance(value, list):
        return TrackedList(track(v) for v in value)
    return value


def frozen(array: np.ndarray, copy: bool) -> np.ndarray:
    """A read-only array of ``array``'s values: ``array`` itself when ``copy`` is false (an array the graph made
    and owns), else a read-only copy unless ``array`` already is read-only and owns its memory (so a caller's
    array neither changes flags nor can reach the graph's codes)."""
    if copy and (array.flags.writeable or array.base is not None):
        array = array.copy()
    array.flags.writeable = False
    return array


def refresh_caches(graph) -> None:
    """Drop ``graph``'s derived caches (attributes named ``_...``) if the graph may have changed since they were
    filled (:data:`EDITS` moved); O(1) otherwise."""
    state = graph.__dict__
    if state.get("_caches_at") != EDITS[0]:
        for key in [k for k in state if k.startswith("_") and k != "_built"]:
            del state[key]
        state["_caches_at"] = EDITS[0]


def plain(value):
    """JSON-ready copy of an attribute value (tuples become lists, numpy scalars Python numbers)."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"graph attribute values must be numbers, strings, lists or dicts, got {type(value).__name__}")
