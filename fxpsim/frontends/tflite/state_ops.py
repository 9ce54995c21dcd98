"""Resource variables as the TF converter emits them for streaming models, turned into graph state
(:mod:`fxpsim.graph.state`): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`.

* ``CALL_ONCE(init_subgraph_index)``: the init subgraph is evaluated at import; it may hold only
  ``VAR_HANDLE`` and ``ASSIGN_VARIABLE`` of constants, which give each variable its initial codes.
* ``VAR_HANDLE(shared_name)``: a handle, known at import (variables are matched by ``shared_name``, as LiteRT
  does, or by ``container/shared_name``).
* ``READ_VARIABLE(handle)``: its output becomes a graph input, the variable at the start of a step.
* ``ASSIGN_VARIABLE(handle, value)``: ``value`` (a tensor computed in the step) is the variable after the step.

``meta["state"]`` lists ``{"variable", "read", "write", "initial"}`` per variable.
"""
from __future__ import annotations

import numpy as np

from .reader import _INT8, _const_value


class StateOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for CALL_ONCE and the resource variables."""

    def _state_init(self):
        self.handles: dict[int, str] = {}      # resource tensor index -> variable name
        self.initial: dict[str, np.ndarray] = {}
        self.state: dict[str, dict] = {}       # variable -> {"read", "write", "read_index"}

    @staticmethod
    def _variable(op) -> str:
        o = op["options"]
        c, n = o.get("container") or "", o.get("shared_name") or ""
        return f"{c}/{n}" if c else n

    def op_CALL_ONCE(self, op):
        g = int(op["options"].get("init_subgraph_index", 0))
        graphs = self.m.get("graphs") or []
        if not 0 < g < len(graphs):
            raise ValueError(f"{self.path}: {self.where(op)}: init subgraph {g} of {len(graphs)}")
        sub = graphs[g]
        handles = {}
        for k, o in enumerate(sub["ops"]):
            where = f"{self.path}: subgraph {g} operator {k} ({o['op']})"
            if o["op"] == "VAR_HANDLE":
                handles[o["outputs"][0]] = self._variable(o)
            elif o["op"] == "ASSIGN_VARIABLE":
                h, v = o["inputs"][:2]
                value = _const_value(sub["tensors"][v])
                if h not in handles or value is None:
                    raise ValueError(f"{where}: the init subgraph must assign constants to VAR_HANDLEs")
                t = sub["tensors"][v]
                self.initial[handles[h]] = (value, t)
            else:
                raise ValueError(f"{where}: an init subgraph with {o['op']} is not supported (VAR_HANDLE and "
                                 f"ASSIGN_VARIABLE of constants are)")

    def op_VAR_HANDLE(self, op):
        self.handles[op["outputs"][0]] = self._variable(op)

    def _handle(self, op, i) -> str:
        if i not in self.handles:
            raise ValueError(f"{self.path}: {self.where(op)}: the resource input is not a VAR_HANDLE")
        return self.handles[i]

    def op_READ_VARIABLE(self, op):
        var = self._handle(op, op["inputs"][0])
        y = op["outputs"][0]
        if var in self.state:
            raise ValueError(f"{self.path}: {self.where(op)}: variable {var!r} is read twice in one step "
                             f"(not supported)")
        self.check_int8(y, op)
        name = self.declare(y, op, tuple(self.t[y]["shape"]))
        self.state[var] = {"read": name, "write": None, "read_index": y}

    def op_ASSIGN_VARIABLE(self, op):
        var = self._handle(op, op["inputs"][0])
        v = op["inputs"][1]
        if var not in self.state:
            raise ValueError(f"{self.path}: {self.where(op)}: variable {var!r} is assigned before it is read "
                             f"(not supported)")
        r = self.state[var]["read_index"]
        if v not in self.names:
            raise ValueError(f"{self.path}: {self.where(op)}: the value assigned to {var!r} is not computed at run "
                             f"time (a constant assignment is not supported)")
        same = self.shape[v] == self.shape[r] and self.t[v]["type"] == self.t[r]["type"]
        for key in ("scale", "zero_point"):
            a, b = self.t[v][key], self.t[r][key]
            same = same and (a is None) == (b is None) and (a is None or np.array_equal(a, b))
        if not same:
            raise ValueError(f"{self.path}: {self.where(op)}: the value assigned to {var!r} has another shape, "
                             f"type or quantization than the variable reads")
        self.state[var]["write"] = self.names[v]

    def state_meta(self) -> list:
        """``meta["state"]`` and the graph inputs the variables add."""
        out = []
        for var, s in self.state.items():
            spec = self.specs[s["read"]]
            if var in self.initial:
                value, t = self.initial[var]
                if t["type"] != _INT8:
                    raise ValueError(f"{self.path}: variable {var!r}: initial value of another type than int8")
                init = np.asarray(value).reshape((1,) + spec.shape)[0]
            else:
                raise ValueError(f"{self.path}: variable {var!r} is read but no CALL_ONCE init subgraph assigns "
                                 f"it an initial value")
            out.append({"variable": var, "read": s["read"], "write": s["write"],
                        "initial": init.astype(int).tolist()})
        return out
