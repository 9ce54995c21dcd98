"""The TFLite operators that reorder codes (SLICE, GATHER, TRANSPOSE), resize images
(RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR) and multiply run-time matrices (BATCH_MATMUL, int8): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`.

SLICE, GATHER and TRANSPOSE on values known at import (shape arithmetic) are folded; on run-time codes they
become ``tflite_strided_slice`` (SLICE: one ``[begin, begin + size, 1]`` per axis), ``tflite_gather`` and
``transpose`` (the core op); the resize operators ``tflite_resize_nearest`` /
``tflite_resize_bilinear`` (:mod:`.resize_ops`).  Every one keeps TFLite's batch of 1 on axis 0 (an operator
that moves, slices or gathers along the batch axis is refused) and needs the same scale and zero point in and
out (TFLite's kernels copy or interpolate codes; the converter always emits them equal).
"""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from ...graph.ir import TensorSpec
from .reader import _INT8, _INT32, _INT64


def _ints(v) -> list:
    return [int(t) for t in np.asarray(v).reshape(-1)]


class ReorderOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for SLICE, GATHER, TRANSPOSE and the
    resize operators."""

    def _same_quant(self, op, x: int, y: int):
        (sx, zx), (sy, zy) = self.quant(x, op), self.quant(y, op)
        if np.float32(sx[0]) != np.float32(sy[0]) or int(zx[0]) != int(zy[0]):
            raise ValueError(f"{self.path}: {self.where(op)}: input and output have different scales or zero "
                             f"points ({float(sx[0])!r}, {int(zx[0])} and {float(sy[0])!r}, {int(zy[0])}); "
                             f"TFLite's quantized {op['op']} works on the codes and needs them equal")

    def _move_node(self, op, x: int, shape: tuple, graph_op: str, attrs: dict):
        y = op["outputs"][0]
        self.check_int8(x, op)
        self._same_quant(op, x, y)
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, tuple(shape))
        self.node(op, graph_op, [xn], [yn], attrs)

    def _check_rank(self, op, what: str, got, want):
        if got != want:
            raise ValueError(f"{self.path}: {self.where(op)}: {what} has {got} values for an input of rank {want}")

    def index_tensor(self, i: int, op) -> str:
        """The graph name of an int32/int64 index tensor: a graph input (declared as plain integers by the
        importer) or a constant."""
        if i in self.names:
            return self.names[i]
        if i not in self.static:
            return self.activation_tensor(i, op)          # the error naming the tensor no operator computes
        v = self.static[i]
        spec = TensorSpec(self._unique[i], 64 if v.dtype == np.int64 else 32, True, tuple(v.shape), data=v)
        self.specs[spec.name] = spec
        self.names[i] = spec.name
        return spec.name

    # ------------------------------------------------------------------ SLICE
    def op_SLICE(self, op):
        x, b, s = op["inputs"][:3]
        xs = self.shape[x]
        begin = _ints(self.static_of(b, op, "begin"))
        size = _ints(self.static_of(s, op, "size"))
        self._check_rank(op, "begin", len(begin), len(xs))
        self._check_rank(op, "size", len(size), len(xs))
        slices = []
        for d, (dim, bd, sd) in enumerate(zip(xs, begin, size)):
            end = dim if sd == -1 else bd + sd
            if bd < 0 or sd < -1 or end > dim or end < bd:
                raise ValueError(f"{self.path}: {self.where(op)}: begin {begin} and size {size} do not fit axis {d} "
                                 f"of {list(xs)}")
            slices.append([bd, end, 1])
        if x in self.static and x not in self.names:
            v = self.static[x]
            self._fold(op, op["outputs"][0], v[tuple(slice(a, e) for a, e, _ in slices)])
            return
        if slices[0] != [0, 1, 1]:
            raise ValueError(f"{self.path}: {self.where(op)}: SLICE on the batch axis is not supported (fxpsim "
                             f"graphs keep the batch on axis 0)")
        self._move_node(op, x, tuple(e - a for a, e, _ in slices), "tflite_strided_slice",
                        {"slices": slices[1:], "shrink": []})

    # ------------------------------------------------------------------ TRANSPOSE
    def op_TRANSPOSE(self, op):
        x, p = op["inputs"][:2]
        xs = self.shape[x]
        perm = _ints(self.static_of(p, op, "permutation"))
        if sorted(perm) != list(range(len(xs))):
            raise ValueError(f"{self.path}: {self.where(op)}: perm {perm} is not a permutation of the {len(xs)} "
                             f"axes of {list(xs)} (TFLite: each in [0, rank), once)")
        if x in self.static and x not in self.names:
            self._fold(op, op["outputs"][0], np.transpose(self.static[x], perm))
            return
        if perm[0] != 0:
            raise ValueError(f"{self.path}: {self.where(op)}: TRANSPOSE with perm {perm} moves the batch axis, "
                             f"which fxpsim graphs keep on axis 0 (not supported)")
        self._move_node(op, x, tuple(xs[d] for d in perm), "transpose", {"perm": [d - 1 for d in perm[1:]]})

    # ------------------------------------------------------------------ GATHER
    def op_GATHER(self, op):
        p, i = op["inputs"][:2]
        y = op["outputs"][0]
        o = op["options"]
        p_static, i_static = (t in self.static and t not in self.names for t in (p, i))
        ps, ix = self.shape[p], self.shape[i]
        axis, bd = int(o.get("axis", 0)), int(o.get("batch_dims", 0))
        axis = axis + len(ps) if axis < 0 else axis
        bd = bd + len(ix) if bd < 0 else bd
        if not 0 <= bd <= axis < len(ps) or bd > len(ix) or tuple(ps[:bd]) != tuple(ix[:bd]):
            raise ValueError(f"{self.path}: {self.where(op)}: axis {o.get('axis')} and batch_dims "
                             f"{o.get('batch_dims')} do not fit params {list(ps)} and indices {list(ix)} "
                             f"(TFLite: 0 <= batch_dims <= axis < rank, equal leading batch axes)")
        if i_static:
            idx = self.static[i]
            if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= ps[axis]):
                raise ValueError(f"{self.path}: {self.where(op)}: constant index "
                                 f"{int(idx.min()) if int(idx.min()) < 0 else int(idx.max())} out of range [0, "
                                 f"{ps[axis]}) for axis {axis} of params {list(ps)}")
        if p_static and i_static:                      # shape arithmetic
            self._fold(op, y, K.gather_tflite(self.static[p], self.static[i], axis, bd))
            return
        if self.t[i]["type"] not in (_INT32, _INT64):
            raise ValueError(f"{self.path}: {self.where(op)}: indices of type {self.type_name(i)} (int32 and int64 "
                             f"are supported)")
        if not p_static and axis == 0:
            raise ValueError(f"{self.path}: {self.where(op)}: GATHER along the batch axis of run-time params is "
                             f"not supported (fxpsim graphs keep the batch on axis 0)")
        out = tuple(ps[:axis]) + tuple(ix[bd:]) + tuple(ps[axis + 1:])
        if not out or out[0] != 1 or (p_static and bd and ps[0] != 1):
            raise ValueError(f"{self.path}: {self.where(op)}: the output {list(out)} does not keep a batch of 1 on "
                             f"axis 0 (fxpsim graphs run the batch on axis 0)")
        self.check_int8(p, op)
        self._same_quant(op, p, y)
        pn = self.constant(p, op) if p_static else self.activation_tensor(p, op)
        inn = self.index_tensor(i, op)
        yn = self.declare(y, op, out)
        self.node(op, "tflite_gather", [pn, inn], [yn], {"axis": axis, "batch_dims": bd})

    # ------------------------------------------------------------------ BATCH_MATMUL
    def op_BATCH_MATMUL(self, op):
        a, b = op["inputs"][:2]
        y = op["outputs"][0]
        o = op["options"]
        if o.get("asymmetric_quantize_inputs") and any(self.t[t]["type"] != _INT8 for t in (a, b)):
            raise ValueError(f"{self.path}: {self.where(op)}: hybrid (float x int8) BATCH_MATMUL is not supported")
        out = tuple(int(d) for d in self.t[y]["shape"])
        names = []
        for t in (a, b):
            self.check_int8(t, op)
            self.quant(t, op)
            if t in self.static and t not in self.names:
                names.append(self.constant(t, op))
            elif len(self.shape[t]) != len(out) or len(self.shape[t]) < (2 if t == a else 3):
                raise ValueError(f"{self.path}: {self.where(op)}: run-time operand {self.t[t]['name']!r} of shape "
                                 f"{list(self.shape[t])} for an output of rank {len(out)}: fxpsim needs "
                                 f"run-time operands of the output's rank (the batch axis first, not a matrix axis)")
            else:
                names.append(self.activation_tensor(t, op))
        self.quant(y, op)
        yn = self.declare(y, op, out)
        self.node(op, "tflite_batch_matmul", names, [yn], {"adj_x": bool(o.get("adj_x")), "adj_y": bool(o.get("adj_y"))})

    # ------------------------------------------------------------------ RESIZE_*
    def _resize(self, op, graph_op):
        x, s = op["inputs"][:2]
        xs = self.shape[x]
        size = _ints(self.static_of(s, op, "output size"))
        if len(xs) != 4 or len(size) != 2 or min(size) < 1:
            raise ValueError(f"{self.path}: {self.where(op)}: needs a 4-D NHWC input and a size of two positive "
                             f"values, got input {list(xs)} and size {size}")
        o = op["options"]
        self._move_node(op, x, (xs[0], size[0], size[1], xs[3]), graph_op,
                        {"size": size, "align_corners": bool(o.get("align_corners")),
                         "half_pixel_centers": bool(o.get("half_pixel_centers"))})

    def op_RESIZE_NEAREST_NEIGHBOR(self, op):
        self._resize(op, "tflite_resize_nearest")

    def op_RESIZE_BILINEAR(self, op):
        self._resize(op, "tflite_resize_bilinear")
