"""Moves of the whole tensor in a model whose shapes are all static (a mixin of the ONNX importer,
:mod:`fxpsim.frontends.onnx.importer`; the graph op is ``onnx_move`` with ``in_batch`` / ``out_batch``,
:mod:`fxpsim.frontends.onnx.move_ops`).

ONNX shape inference numbers every extent after :mod:`fxpsim.frontends.onnx.shape_fold` (e.g. a batch of 1). A
Transpose / Gather / Squeeze / Unsqueeze / Reshape that moves or resizes the batch axis there (torch's attention
transposes its batch of 1 to the middle, packs Q, K, V on a leading axis and gathers them) is the same op on the
whole tensor, batch axis included: its steps act on every axis, and the tensors after it have another leading
extent (the graph runs only on the model's batch). Its Q / DQ pair is handled as for any move.
"""
from __future__ import annotations

import numpy as np

from .move_ops import apply_steps


class WholeMoveConversions:
    """Whole-tensor moves (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _static_full(self, name):
        t = self.types.get(name)
        dims = t[1] if t else None
        return tuple(dims) if dims and all(isinstance(d, int) and d > 0 for d in dims) else None

    def _whole_steps(self, n, outs):
        """(steps on the whole tensor, input shape, output shape) for a Transpose / Gather / Squeeze / Unsqueeze /
        Reshape that moves or resizes the batch axis of a model whose shapes are static (the batch is just an
        axis then), else None."""
        if n.op not in ("Transpose", "Gather", "Squeeze", "Unsqueeze", "Reshape") or len(outs) != 1:
            return None
        full_in, full_out = self._static_full(n.inputs[0]), self._static_full(outs[0])
        model_in = self._static_full(self.inputs[0]) if self.inputs else None
        if full_in is None or full_out is None or model_in is None:
            return None
        if n.op == "Transpose":
            perm = [int(p) for p in n.attrs.get("perm", range(len(full_in) - 1, -1, -1))]
            if perm[0] == 0 and full_in[0] == full_out[0]:
                return None
            steps = [{"op": "transpose", "perm": perm}]
        elif n.op == "Gather":
            ax = int(n.attrs.get("axis", 0))
            ax = ax + len(full_in) if ax < 0 else ax
            idx = self.const(self._input(n, 1))
            if ax != 0 or idx is None:
                return None
            idx = np.asarray(idx).astype(np.int64)
            steps = [{"op": "take", "axis": 0, "indices": np.where(idx < 0, idx + full_in[0], idx).tolist()}]
        else:
            moved = full_in[0] != full_out[0] or full_in[0] != model_in[0]
            if n.op == "Unsqueeze":
                moved = moved or 0 in [int(a) for a in (self._ints(n, self._input(n, 1), "axes list")
                                                         if self.opset >= 13 else n.attrs.get("axes", []))]
            if n.op == "Squeeze":
                moved = moved or 0 in [int(a) % len(full_in) for a in (self._ints(n, self._input(n, 1), "axes list")
                                                                       if self.opset >= 13 else n.attrs.get("axes", []))
                                       or []]
            if not moved:
                return None
            steps = [{"op": "reshape", "shape": list(full_out)}]
        try:
            got = apply_steps(np.empty(full_in, np.int8), steps).shape
        except ValueError as exc:
            raise ValueError(f"{n.op} node {n.name!r}: {exc}") from None
        if tuple(got) != full_out:
            raise ValueError(f"{n.op} node {n.name!r}: gives {list(got)}, shape inference says {list(full_out)}")
        return steps, full_in, full_out

    def _emit_whole(self, n, x, xv, src, out, steps, full_in, full_out):
        self._whole_now = {"in_batch": int(full_in[0]), "out_batch": int(full_out[0])}
        try:
            if x.kind == "int":
                self._emit_move(n, src, out, steps, full_in[1:], full_out[1:], 0, *self._params(src.g))
            else:
                self._move_qdq(n, xv, src, out, steps, full_in[1:], full_out[1:], None)
        finally:
            self._whole_now = None
        return True
