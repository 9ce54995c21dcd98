"""Graph state: tensors a graph carries from one step to the next (an RTL holds them in registers).

A stateful graph (e.g. a streaming TFLite model with resource variables, :func:`fxpsim.import_tflite`) lists
its state in ``meta["state"]``: one entry per variable,
``{"variable": name, "read": tensor, "write": tensor, "initial": codes}``. The ``read`` tensor is a graph
input (its value at the start of a step), ``write`` the tensor computed in the step that becomes the next
step's ``read`` (the variable as it is after the step), ``initial`` the codes before the first step.

* :func:`complete_inputs` (used by :meth:`IntegerGraph.run`): ``graph.run(x)`` with only the non-state inputs
  runs one step from the initial state.
* :func:`stream` (:meth:`IntegerGraph.stream`): many steps with the state carried,

  .. math:: y_t, s_{t+1} = f(x_t, s_t),\\qquad s_0 = \\text{initial},

  every step's outputs and state returned (and its trace, the state included).
"""
from __future__ import annotations

import numpy as np

__all__ = ["state_entries", "complete_inputs", "initial_state", "stream"]


def state_entries(graph) -> list:
    """The graph's ``meta["state"]`` (empty for a stateless graph)."""
    meta = graph.meta if isinstance(graph.meta, dict) else {}
    return list(meta.get("state") or [])


def _user_inputs(graph, entries) -> list:
    reads = {e["read"] for e in entries}
    return [t for t in graph.inputs if t not in reads]


def _as_list(x):
    return [x] if isinstance(x, np.ndarray) or not isinstance(x, (list, tuple)) else list(x)


def initial_state(graph, batch: int = 1) -> dict:
    """``{variable: codes}`` of the initial state, repeated over a batch of ``batch`` (axis 0)."""
    out = {}
    for e in state_entries(graph):
        spec = graph.tensors[e["read"]]
        v = np.asarray(e["initial"]).astype(spec.dtype).reshape(spec.shape)
        out[e["variable"]] = np.repeat(v[None], int(batch), axis=0)
    return out


def complete_inputs(graph, x):
    """``x`` with the initial state appended where the caller gave only the non-state inputs (the graph's
    inputs in order otherwise)."""
    entries = state_entries(graph)
    if not entries:
        return x
    arrays = _as_list(x)
    user = _user_inputs(graph, entries)
    if len(arrays) != len(user) or len(arrays) == len(graph.inputs):
        return x
    n = len(np.asarray(arrays[0])) if arrays else 1
    state = initial_state(graph, n)
    by_name = dict(zip(user, arrays))
    by_name.update({e["read"]: state[e["variable"]] for e in entries})
    return [by_name[t] for t in graph.inputs]


def stream(graph, frames, datapath=None, *, state=None, trace: bool = False):
    """Run ``graph`` step by step over ``frames``, carrying its state.

    Parameters
    ----------
    graph : IntegerGraph
        A graph with ``meta["state"]`` (a stateless graph runs each step independently).
    frames : ndarray or sequence of ndarrays
        One array per non-state input, shaped ``(T, N, *shape)``: ``T`` steps of a batch of ``N`` independent
        streams.
    datapath : optional
        As for :meth:`IntegerGraph.run`.
    state : dict, optional
        ``{variable: codes (N, *shape)}`` to start from (default: the initial state).
    trace : bool
        Also return each step's node traces, with ``"state"``: the variables after that step.

    Returns
    -------
    outputs : ndarray or list of ndarrays
        ``(T, N, *shape)`` per graph output.
    states : dict
        ``{variable: codes (T, N, *shape)}``: each variable after each step.
    traces : list of dict
        Only with ``trace``: one per step.
    """
    entries = state_entries(graph)
    user = _user_inputs(graph, entries)
    arrays = [np.asarray(f) for f in _as_list(frames)]
    if len(arrays) != len(user):
        raise ValueError(f"stream: the graph has {len(user)} non-state input(s) ({', '.join(user)}), "
                         f"got {len(arrays)} array(s)")
    steps = {a.shape[0] if a.ndim else -1 for a in arrays}
    if len(steps) != 1 or -1 in steps or 0 in steps:
        raise ValueError(f"stream: frames must be (T, N, ...) arrays with the same T >= 1, got shapes "
                         f"{[a.shape for a in arrays]}")
    t_steps = steps.pop()
    n = arrays[0].shape[1] if arrays[0].ndim > 1 else 0
    if n < 1:
        raise ValueError(f"stream: frames must be (T, N, ...) with N >= 1, got shape {arrays[0].shape}")
    current = initial_state(graph, n)
    if state is not None:
        unknown = set(state) - set(current)
        if unknown:
            raise ValueError(f"stream: unknown state variable(s) {sorted(unknown)}; the graph's: {sorted(current)}")
        current.update({k: np.asarray(v) for k, v in state.items()})
    outs, states, traces = [], {e["variable"]: [] for e in entries}, []
    for t in range(t_steps):
        feeds = dict(zip(user, (a[t] for a in arrays)))
        feeds.update({e["read"]: current[e["variable"]] for e in entries})
        y, tr, kept = graph.run([feeds[k] for k in graph.inputs], datapath, trace=trace, keep=True)
        outs.append(y)
        for e in entries:
            if e.get("write"):
                current[e["variable"]] = kept[e["write"]]
            states[e["variable"]].append(current[e["variable"]])
        if trace:
            traces.append({**tr, "state": {k: v.copy() for k, v in current.items()}})
    if len(graph.outputs) == 1:
        outputs = np.stack(outs)
    else:
        outputs = [np.stack([o[j] for o in outs]) for j in range(len(graph.outputs))]
    stacked = {k: np.stack(v) for k, v in states.items()}
    return (outputs, stacked, traces) if trace else (outputs, stacked)
