"""The shape-changing TFLite operators (RESHAPE, SQUEEZE, EXPAND_DIMS, PAD, MEAN, CONCATENATION) and the
shape arithmetic folded at import (SHAPE, PACK, STRIDED_SLICE): a mixin of :class:`fxpsim.frontends.tflite.importer._Builder`."""
from __future__ import annotations

import numpy as np

from .reader import _NUMPY_TYPES


class ShapeOps:
    """Methods of :class:`fxpsim.frontends.tflite.importer._Builder` for the shape-changing operators."""

    def _axis(self, axis: int, rank: int, op, what="axis") -> int:
        a = int(axis) + rank if int(axis) < 0 else int(axis)
        if not 0 <= a < rank:
            raise ValueError(f"{self.path}: {self.where(op)}: {what} {axis} out of range for rank {rank}")
        if a == 0:
            raise ValueError(f"{self.path}: {self.where(op)}: {what} {axis} is the batch axis, which fxpsim "
                             f"graphs keep on axis 0 (not supported)")
        return a

    def _reshape_to(self, op, x: int, y: int, shape: tuple, suffix=""):
        self.check_int8(x, op)
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, shape)
        self.node(op, "reshape", [xn], [yn], {"shape": list(shape[1:])}, suffix=suffix)

    def _resolve_shape(self, op, target, n_values: int) -> tuple:
        target = [int(v) for v in np.asarray(target).reshape(-1)]
        if target.count(-1) > 1:
            raise ValueError(f"{self.path}: {self.where(op)}: reshape target {target} has more than one -1")
        known = int(np.prod([v for v in target if v != -1])) if target else 1
        if -1 in target:
            if known == 0 or n_values % known:
                raise ValueError(f"{self.path}: {self.where(op)}: cannot reshape {n_values} values to {target}")
            target[target.index(-1)] = n_values // known
        if int(np.prod(target)) != n_values:
            raise ValueError(f"{self.path}: {self.where(op)}: cannot reshape {n_values} values to {target}")
        return tuple(target)

    def op_RESHAPE(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        if x in self.static and x not in self.names:     # shape arithmetic on a static value
            v = self.static[x]
            target = self.static_of(op["inputs"][1], op, "target shape") if len(op["inputs"]) > 1 and \
                op["inputs"][1] >= 0 else op["options"]["new_shape"]
            self._fold(op, y, v.reshape(self._resolve_shape(op, target, v.size)))
            return
        if len(op["inputs"]) > 1 and op["inputs"][1] >= 0:
            target = self.static_of(op["inputs"][1], op, "target shape")
        else:
            target = op["options"]["new_shape"]
        shape = self._resolve_shape(op, target, int(np.prod(self.shape[x])))
        self._reshape_to(op, x, y, shape)

    def op_SQUEEZE(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        xs = self.shape[x]
        dims = op["options"]["squeeze_dims"]
        if dims:
            axes = {self._axis(d, len(xs), op, "squeeze axis") for d in dims}
            for a in axes:
                if xs[a] != 1:
                    raise ValueError(f"{self.path}: {self.where(op)}: cannot squeeze axis {a} of size {xs[a]}")
        else:
            if xs[0] == 1:
                raise ValueError(f"{self.path}: {self.where(op)}: SQUEEZE without squeeze_dims removes every "
                                 f"axis of size 1, the batch axis included (LiteRT runs batch 1), which fxpsim "
                                 f"graphs keep on axis 0; convert with explicit squeeze axes")
            axes = set()
        self._reshape_to(op, x, y, tuple(d for a, d in enumerate(xs) if a not in axes))

    def op_EXPAND_DIMS(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        xs = list(self.shape[x])
        a = int(np.asarray(self.static_of(op["inputs"][1], op, "axis")).reshape(-1)[0])
        a = a + len(xs) + 1 if a < 0 else a
        if not 1 <= a <= len(xs):
            raise ValueError(f"{self.path}: {self.where(op)}: EXPAND_DIMS axis {a} is not supported")
        self._reshape_to(op, x, y, tuple(xs[:a] + [1] + xs[a:]))

    def _pad(self, op, value_index=None):
        x, p, y = op["inputs"][0], op["inputs"][1], op["outputs"][0]
        self.check_int8(x, op)
        pads = np.asarray(self.static_of(p, op, "paddings")).astype(np.int64)
        xs = self.shape[x]
        if pads.shape != (len(xs), 2) or np.any(pads < 0):
            raise ValueError(f"{self.path}: {self.where(op)}: paddings {pads.tolist()} for an input of shape "
                             f"{list(xs)}")
        if np.any(pads[0]):
            raise ValueError(f"{self.path}: {self.where(op)}: padding the batch axis is not supported")
        xn = self.activation_tensor(x, op)
        attrs = {"paddings": pads[1:].tolist()}
        if value_index is not None and value_index >= 0:
            v = self.static_of(value_index, op, "pad value")
            attrs["value"] = int(np.asarray(v).reshape(-1)[0])
        yn = self.declare(y, op, tuple(int(d + a + b) for d, (a, b) in zip(xs, pads)))
        self.node(op, "tflite_pad", [xn], [yn], attrs)

    def op_PAD(self, op):
        self._pad(op)

    def op_PADV2(self, op):
        self._pad(op, op["inputs"][2] if len(op["inputs"]) > 2 else None)

    def op_MEAN(self, op):
        self._reduction(op, "tflite_mean")

    def _reduction(self, op, graph_op: str):
        """A reduction over constant ``axes`` (MEAN, SUM, REDUCE_MAX): the node's ``axes`` are per sample."""
        x, ax, y = op["inputs"][0], op["inputs"][1], op["outputs"][0]
        self.check_int8(x, op)
        xs = self.shape[x]
        axes = sorted({self._axis(a, len(xs), op, f"{op['op']} axis")
                       for a in np.asarray(self.static_of(ax, op, "axes")).reshape(-1)})
        keep = bool(op["options"].get("keep_dims"))
        out = tuple((1 if a in axes else d) for a, d in enumerate(xs)) if keep else \
            tuple(d for a, d in enumerate(xs) if a not in axes)
        xn = self.activation_tensor(x, op)
        yn = self.declare(y, op, out)
        self.node(op, graph_op, [xn], [yn], {"axes": [a - 1 for a in axes], "keep_dims": keep})

    def op_CONCATENATION(self, op):
        ins, y = op["inputs"], op["outputs"][0]
        if all(i in self.static and i not in self.names for i in ins):      # shape arithmetic
            vals = [self.static[i] for i in ins]
            self._fold(op, y, np.concatenate([np.atleast_1d(v) for v in vals], axis=int(op["options"]["axis"])))
            return
        rank = len(self.shape[ins[0]])
        axis = self._axis(op["options"]["axis"], rank, op)
        shapes = [self.shape[i] for i in ins]
        for s in shapes:
            if len(s) != rank or any(d != shapes[0][a] for a, d in enumerate(s) if a != axis):
                raise ValueError(f"{self.path}: {self.where(op)}: input shapes {[list(s) for s in shapes]} do not "
                                 f"concatenate along axis {axis}")
        names = []
        for i in ins:
            self.check_int8(i, op)
            self.quant(i, op)
            names.append(self.activation_tensor(i, op))
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        yn = self.declare(y, op, tuple(out))
        self.node(op, "tflite_concat", names, [yn], {"axis": axis - 1, "activation": self.activation(op)})

    # ------------------------------------------------------------------ shape arithmetic (folded)
    def _fold(self, op, y: int, value: np.ndarray):
        dtype = _NUMPY_TYPES.get(self.t[y]["type"], np.int32)
        self.static[y] = np.asarray(value).astype(dtype)
        self.shape[y] = tuple(self.static[y].shape)
        self.folded[y] = op["index"]

    def op_SHAPE(self, op):
        x, y = op["inputs"][0], op["outputs"][0]
        if x not in self.shape:
            raise ValueError(f"{self.path}: {self.where(op)}: the shape of {self.t[x]['name']!r} is unknown")
        self._fold(op, y, np.asarray(self.shape[x], np.int64))

    def op_PACK(self, op):
        vals = [np.asarray(self.static_of(i, op, "PACK inputs")) for i in op["inputs"]]
        self._fold(op, op["outputs"][0], np.stack(vals, axis=int(op["options"]["axis"])))

    def op_STRIDED_SLICE(self, op):
        x, b, e, s = (op["inputs"] + [-1])[:4]
        o = op["options"]
        if x in self.names or x not in self.static:
            return self._strided_slice_runtime(op)
        v = np.asarray(self.static_of(x, op, "STRIDED_SLICE input"))
        begin = [int(t) for t in np.asarray(self.static_of(b, op, "begin")).reshape(-1)]
        end = [int(t) for t in np.asarray(self.static_of(e, op, "end")).reshape(-1)]
        strides = [int(t) for t in np.asarray(self.static_of(s, op, "strides")).reshape(-1)] if s >= 0 else \
            [1] * len(begin)
        if o["ellipsis_mask"] or o["new_axis_mask"]:
            raise ValueError(f"{self.path}: {self.where(op)}: STRIDED_SLICE with ellipsis/new-axis masks is not "
                             f"supported")
        index = []
        for d in range(v.ndim):
            if d >= len(begin):
                index.append(slice(None))
                continue
            st = strides[d] or 1
            bd = None if (o["begin_mask"] >> d) & 1 else begin[d]
            ed = None if (o["end_mask"] >> d) & 1 else (begin[d] + end[d] if o["offset"] else end[d])
            if (o["shrink_axis_mask"] >> d) & 1:
                index.append(begin[d])
            else:
                index.append(slice(bd, ed, st))
        self._fold(op, op["outputs"][0], np.asarray(v[tuple(index)]))

    def _strided_slice_runtime(self, op):
        """STRIDED_SLICE on run-time codes: resolved at import into per-axis ``[start, stop, step]`` (the
        batch axis must be kept whole) and the shrunk axes."""
        x, b, e, s = (op["inputs"] + [-1])[:4]
        o = op["options"]
        self.check_int8(x, op)
        xs = self.shape[x]
        begin = [int(t) for t in np.asarray(self.static_of(b, op, "begin")).reshape(-1)]
        end = [int(t) for t in np.asarray(self.static_of(e, op, "end")).reshape(-1)]
        strides = [int(t) for t in np.asarray(self.static_of(s, op, "strides")).reshape(-1)] if s >= 0 else \
            [1] * len(begin)
        if o["ellipsis_mask"] or o["new_axis_mask"] or not len(begin) == len(end) == len(strides) <= len(xs):
            raise ValueError(f"{self.path}: {self.where(op)}: STRIDED_SLICE with ellipsis/new-axis masks or "
                             f"begin/end/strides of other lengths than the rank is not supported")
        slices, shrink, out = [], [], []
        for d, dim in enumerate(xs):
            if d >= len(begin):
                slices.append([0, dim, 1])
                out.append(dim)
                continue
            st = strides[d]
            if st == 0:
                raise ValueError(f"{self.path}: {self.where(op)}: STRIDED_SLICE stride 0 on axis {d}")
            if (o["shrink_axis_mask"] >> d) & 1:
                i = begin[d] + dim if begin[d] < 0 else begin[d]
                if not 0 <= i < dim:
                    raise ValueError(f"{self.path}: {self.where(op)}: index {begin[d]} out of range on axis {d}")
                slices.append([i, i + 1, 1])
                shrink.append(d)
                continue
            bd = None if (o["begin_mask"] >> d) & 1 else begin[d]
            ed = None if (o["end_mask"] >> d) & 1 else (begin[d] + end[d] if o["offset"] else end[d])
            start, stop, step = slice(bd, ed, st).indices(dim)
            slices.append([start, stop, step])
            out.append(len(range(start, stop, step)))
        if slices[0] != [0, 1, 1] or 0 in shrink:
            raise ValueError(f"{self.path}: {self.where(op)}: STRIDED_SLICE on the batch axis is not supported "
                             f"(fxpsim graphs keep the batch on axis 0)")
        xn = self.activation_tensor(x, op)
        yn = self.declare(op["outputs"][0], op, tuple(out))
        self.node(op, "tflite_strided_slice", [xn], [yn], {"slices": slices[1:], "shrink": [d - 1 for d in shrink]})

    def _split(self, op, x: int, axis_index: int, sizes):
        self.check_int8(x, op)
        xs = self.shape[x]
        a = self._axis(int(np.asarray(self.static_of(axis_index, op, "split axis")).reshape(-1)[0]), len(xs), op,
                       "split axis")
        outs = op["outputs"]
        if sizes is None:
            if xs[a] % len(outs):
                raise ValueError(f"{self.path}: {self.where(op)}: axis {a} of size {xs[a]} does not split into "
                                 f"{len(outs)} equal parts")
            sizes = [xs[a] // len(outs)] * len(outs)
        sizes = [int(v) for v in sizes]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = xs[a] - (sum(sizes) + 1)
        if len(sizes) != len(outs) or any(v < 0 for v in sizes) or sum(sizes) != xs[a]:
            raise ValueError(f"{self.path}: {self.where(op)}: split sizes {sizes} for axis {a} of size {xs[a]} "
                             f"into {len(outs)} outputs")
        xn = self.activation_tensor(x, op)
        names = []
        for y, n in zip(outs, sizes):
            self.check_int8(y, op)
            shape = list(xs)
            shape[a] = n
            names.append(self.declare(y, op, tuple(shape)))
        self.node(op, "tflite_split", [xn], names, {"axis": a - 1, "sizes": sizes})

    def op_SPLIT(self, op):
        ax, x = op["inputs"][:2]
        self._split(op, x, ax, None)

    def op_SPLIT_V(self, op):
        x, sz, ax = op["inputs"][:3]
        self._split(op, x, ax, np.asarray(self.static_of(sz, op, "size_splits")).reshape(-1).tolist())
