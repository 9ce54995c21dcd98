"""Data movement of quantized tensors as ``onnx_move`` nodes (a mixin of the ONNX importer,
:mod:`fxpsim.frontends.onnx.importer`; the graph op is :mod:`fxpsim.frontends.onnx.move_ops`): Transpose,
Slice, Split, Gather, Pad, Squeeze, Unsqueeze and nearest Resize.

In a QOperator model these ops run on the integer codes (``quantize_static`` leaves Transpose, Split, Squeeze,
Unsqueeze, Pad and Resize on codes; a Pad value is a code). In a QDQ model they sit between a DequantizeLinear
and one QuantizeLinear per output; onnxruntime drops that pair when the parameters agree and runs the op on the
codes, or runs the op on the dequantized floats (Pad with a DequantizeLinear'd value, int8 Resize): the same
codes, since a move computes nothing and :math:`Q(DQ(c)) = c`. Where the QuantizeLinear has other parameters the
codes are requantized (``onnx_requantize``, :math:`Q(DQ(c))` in float32) after the move, or before it when a
constant pad value is not a code of the input's quantization. A move whose output no QuantizeLinear reads
(QOperator models with Gather / Pad / Resize in float between a DequantizeLinear and a later QuantizeLinear)
moves the codes and leaves a dequantized value, as onnxruntime's float op on dequantized values gives.

A move of the batch axis in a model whose shapes are all static is a move of the whole tensor
(:mod:`fxpsim.frontends.onnx.whole_moves`).

Every index, axis and shape is checked here against the tensor it moves: a bad one is a ValueError naming the
node, never a numpy error at run time.
"""
from __future__ import annotations

import numpy as np

from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import resize as R
from .move_ops import apply_steps
from .nodes import _unsupported, _Val

#: The ONNX ops converted here.
MOVE_OPS = ("Transpose", "Slice", "Split", "Gather", "Pad", "Squeeze", "Unsqueeze", "Resize")
#: The ops onnxruntime's QDQ propagation moves a DequantizeLinear forward through (QDQPropagationTransformer).
DQ_PROPAGATING = ("Transpose", "Slice", "Squeeze", "Unsqueeze", "Reshape", "MaxPool")
_F32 = np.float32
_BIG = 2 ** 31 - 1


class MoveConversions:
    """Move conversions (methods of :class:`fxpsim.frontends.onnx.importer._Importer`)."""

    def _move(self, n) -> bool:
        if n.domain != "" or n.op not in MOVE_OPS:
            return False
        if n.op == "Resize" and n.attrs.get("mode", "nearest") == "linear":
            self._resize_linear(n)
            return True
        x = self.val(n.inputs[0], n) if n.inputs and n.inputs[0] else None
        if x is None:
            raise ValueError(f"{n.op} node {n.name!r} has no input")
        if x.kind == "int":
            src, xv = x, None
        else:
            xv, src = self._activation_dq(n, n.inputs[0])
        shape = tuple(src.shape)
        outs = [o for o in n.outputs if o]
        whole = self._whole_steps(n, outs)
        if whole is not None:
            return self._emit_whole(n, x, xv, src, outs[0], *whole)
        per_output = self._move_steps(n, shape, len(outs))
        pad = per_output[0][1]
        for out, (steps, _) in zip(outs, per_output):
            try:
                out_shape = apply_steps(np.empty(shape, np.int8), steps).shape
            except ValueError as exc:
                raise ValueError(f"{n.op} node {n.name!r}: {exc}") from None
            if len(out_shape) == 0:
                raise _unsupported(n, "an output of one value per sample (a scalar)")
            if x.kind == "int":
                code = 0 if pad is None else self._int_pad_code(n, pad, src)
                self._emit_move(n, src, out, steps, shape, out_shape, code, *self._params(src.g))
            else:
                self._move_qdq(n, xv, src, out, steps, shape, out_shape, pad)
        return True

    # ------------------------------------------------------------------ the QDQ form
    def _move_qdq(self, n, xv, src, out, steps, shape, out_shape, pad):
        q = self._single_q(out)
        s_in, z_in = self._params(src.g)
        code_in = None if pad is None else self._code_of(pad, s_in, z_in, src.dtype)
        if q is None:
            cons = self.consumers(out)
            if n.op == "Pad" and any(c.domain == "" and c.op in ("Conv", "MaxPool", "AveragePool") for c, _ in cons):
                raise _unsupported(n, "a Pad read directly by a Conv / pool, which onnxruntime folds into its pads "
                                      "(PadFusion) before fusing the QDQ group; not reproduced")
            if pad is not None and code_in is None:
                return self._pad_before_q(n, xv, src, out, steps, shape, out_shape, pad)
            mid = f"{out}:codes"
            self._emit_move(n, src, mid, steps, shape, out_shape, code_in or 0, s_in, z_in)
            self._dq_after_move(n, xv, out, mid, s_in, z_in, out_shape)
            return
        scale, zp, dtype = self._claim(q)
        same = np.float32(s_in) == scale and z_in == zp and src.dtype == dtype
        if same:
            code = 0 if pad is None else int(K.quantize_linear(np.array([pad], _F32), scale, zp, dtype)[0])
            self._emit_move(n, src, q.outputs[0], steps, shape, out_shape, code, scale, zp)
            self._note(n.name, n, True)
            return
        if pad is None or code_in is not None:          # move, then requantize
            mid = f"{out}:moved"
            g = self._emit_move(n, src, mid, steps, shape, out_shape, code_in or 0, s_in, z_in)
            moved = self.env[mid]
            self._requantize(n, _Val("dq", src=mid, scale=np.array([s_in], _F32), zp=np.array([z_in])),
                             _Val("int", g=g, shape=moved.shape, dtype=moved.dtype), q.outputs[0], scale, zp, dtype)
        else:                                             # requantize, then move (the pad value is an output code)
            mid = f"{n.inputs[0]}@{n.name}:requantized"
            self._requantize(n, _Val("dq", src=xv.src, scale=xv.scale, zp=xv.zp), src, mid, scale, zp, dtype)
            rq = self.env[mid]
            code = int(K.quantize_linear(np.array([pad], _F32), scale, zp, dtype)[0])
            self._emit_move(n, rq, q.outputs[0], steps, shape, out_shape, code, scale, zp)
        self._note(n.name, n, False, "Q/DQ parameters differ: the codes are requantized")

    def _pad_before_q(self, n, xv, src, out, steps, shape, out_shape, pad):
        """A float Pad whose value is no input code, followed by moves and one QuantizeLinear (a QOperator model
        moving dequantized values): the codes are requantized to that QuantizeLinear's parameters first, so
        the pad value becomes one of its codes and the moves after it carry exact codes."""
        t, q = out, None
        while q is None:
            q = self._single_q(t)
            if q is not None:
                break
            cons = self.consumers(t) if t not in self.outputs else []
            if len(cons) != 1 or cons[0][0].domain != "" or cons[0][0].op not in MOVE_OPS or cons[0][1] != 0 \
                    or len([o for o in cons[0][0].outputs if o]) != 1:
                raise _unsupported(n, f"a pad value {float(pad)} that is no code of the input's quantization, "
                                      "with no QuantizeLinear after the Pad")
            t = cons[0][0].outputs[0]
        scale, zp, dtype = self._q_params(q)
        mid = f"{n.inputs[0]}@{n.name}:requantized"
        self._requantize(n, _Val("dq", src=xv.src, scale=xv.scale, zp=xv.zp), src, mid, scale, zp, dtype)
        code = int(K.quantize_linear(np.array([pad], _F32), scale, zp, dtype)[0])
        moved = f"{out}:codes"
        self._emit_move(n, self.env[mid], moved, steps, shape, out_shape, code, scale, zp)
        self.env[out] = _Val("dq", src=moved, scale=np.array([scale], _F32), zp=np.array([zp]),
                             shape=tuple(out_shape), dtype=np.dtype(_F32), float_only=True)
        self._note(n.name, n, False, "float32 Pad of dequantized values: requantized to the QuantizeLinear after it")

    def _dq_after_move(self, n, xv, out, codes, scale, zp, shape):
        """The dequantized value of moved ``codes`` with no QuantizeLinear after the move. onnxruntime's QDQ
        propagation moves a DequantizeLinear forward through Transpose, Slice, Squeeze, Unsqueeze, Reshape and
        MaxPool, so their consumers read a DequantizeLinear (and may fuse, on the int8 -> uint8 rewritten codes
        where the input was rewritten); through the other ops it does not (their consumers run in float32).
        Measured live with onnxruntime 1.32."""
        propagated = n.op in DQ_PROPAGATING and not xv.float_only
        if propagated and xv.src in self.converted:
            self.converted.add(codes)
        self.env[out] = _Val("dq", src=codes, scale=np.array([scale], _F32), zp=np.array([zp]), shape=tuple(shape),
            dtype=np.dtype(_F32), float_only=not propagated)
        self._note(n.name, n, propagated, "" if propagated else "float32 op on dequantized values (no "
                                                                "QuantizeLinear after it)")

    def _single_q(self, out):
        if out in self.outputs:
            return None
        cons = self.consumers(out)
        if len(cons) == 1 and self._is_q(cons[0][0]):
            return cons[0][0]
        return None

    @staticmethod
    def _code_of(value, scale, zp, dtype):
        """The code whose DequantizeLinear is ``value`` exactly (float32), or None."""
        info = np.iinfo(dtype)
        codes = np.arange(int(info.min), int(info.max) + 1)
        hit = np.nonzero(K.dequantize_linear(codes, _F32(scale), zp) == _F32(value))[0]
        return int(codes[hit[0]]) if hit.size else None

    def _int_pad_code(self, n, pad, src):
        info = np.iinfo(src.dtype)
        if not (float(pad) == int(pad) and info.min <= int(pad) <= info.max):
            raise ValueError(f"Pad node {n.name!r}: the pad value {pad} is not a {src.dtype} code")
        return int(pad)

    def _emit_move(self, n, src, out_name, steps, in_shape, out_shape, pad_code, scale, zp):
        g = self._int_value(out_name, tuple(out_shape), src.dtype, scale, zp)
        attrs = {"steps": steps, "pad_code": int(pad_code), "onnx_op": n.op, **(getattr(self, "_whole_now", None) or {})}
        if len(in_shape) == 3:
            attrs["in_perm"] = [2, 0, 1]
        if len(out_shape) == 3:
            attrs["out_perm"] = [1, 2, 0]
        self._add_node("onnx_move", [src.g], [g], attrs, name=n.name)
        return g

    # ------------------------------------------------------------------ steps of each op
    def _axis(self, n, a, rank, what="axis"):
        """Per-sample axis of the full-rank ONNX axis ``a`` (the batch axis refused)."""
        full = rank + 1
        a = int(a)
        if not -full <= a < full:
            raise ValueError(f"{n.op} node {n.name!r}: {what} {a} is outside the {full} axes of the input")
        a = a + full if a < 0 else a
        if a == 0:
            raise _unsupported(n, f"a {n.op} along the batch axis")
        return a - 1

    def _ints(self, n, name, what):
        if not name:
            return None
        v = self.const(name)
        if v is None:
            raise _unsupported(n, f"a {what} that is not a constant")
        return [int(e) for e in np.asarray(v).reshape(-1)]

    def _input(self, n, i):
        return n.inputs[i] if len(n.inputs) > i else ""

    def _move_steps(self, n, shape, n_out):
        """One (steps, pad value or None) per output."""
        op = n.op
        if op == "Split":
            return [(st, None) for st in self._split_steps(n, shape, n_out)]
        if n_out != 1:
            raise ValueError(f"{op} node {n.name!r} has {n_out} outputs; it has one")
        if op == "Transpose":
            perm = n.attrs.get("perm")
            perm = list(range(len(shape), -1, -1)) if perm is None else [int(p) for p in perm]
            if sorted(perm) != list(range(len(shape) + 1)):
                raise ValueError(f"Transpose node {n.name!r}: perm {perm} is not a permutation of the "
                                 f"{len(shape) + 1} axes of the input")
            if perm[0] != 0:
                raise _unsupported(n, f"a Transpose that moves the batch axis (perm {perm})")
            return [([{"op": "transpose", "perm": [p - 1 for p in perm[1:]]}], None)]
        if op == "Slice":
            return [(self._slice_steps(n, shape), None)]
        if op == "Gather":
            return [(self._gather_steps(n, shape), None)]
        if op == "Pad":
            return [self._pad_steps(n, shape)]
        if op in ("Squeeze", "Unsqueeze"):
            return [(self._squeeze_steps(n, shape), None)]
        return [(self._resize_steps(n, shape), None)]

    def _slice_steps(self, n, shape):
        if self.opset < 10:
            starts, ends = [int(v) for v in n.attrs["starts"]], [int(v) for v in n.attrs["ends"]]
            axes, steps = n.attrs.get("axes"), None
            axes = None if axes is None else [int(v) for v in axes]
        else:
            starts, ends = self._ints(n, self._input(n, 1), "start"), self._ints(n, self._input(n, 2), "end")
            axes = self._ints(n, self._input(n, 3), "axes list")
            steps = self._ints(n, self._input(n, 4), "steps list")
            if starts is None or ends is None:
                raise ValueError(f"Slice node {n.name!r} needs starts and ends")
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ValueError(f"Slice node {n.name!r}: starts, ends, axes and steps differ in length")
        seen, out = set(), []
        for s, e, a, st in zip(starts, ends, axes, steps):
            if st == 0:
                raise ValueError(f"Slice node {n.name!r}: a step of 0")
            full = len(shape) + 1
            if -full <= a < full and (a % full) == 0:
                if not (s == 0 and e >= _BIG and st == 1):
                    raise _unsupported(n, "a Slice of the batch axis")
                continue
            ax = self._axis(n, a, len(shape), "slice axis")
            if ax in seen:
                raise ValueError(f"Slice node {n.name!r}: axis {a} appears twice")
            seen.add(ax)
            idx = list(range(*slice(s, e, st).indices(shape[ax])))
            out.append({"op": "take", "axis": ax, "indices": idx})
        return out

    def _split_steps(self, n, shape, n_out):
        ax = self._axis(n, n.attrs.get("axis", 0), len(shape))
        dim = shape[ax]
        if self.opset >= 13:
            sizes = self._ints(n, self._input(n, 1), "split")
        else:
            sizes = [int(v) for v in n.attrs["split"]] if "split" in n.attrs else None
        if sizes is None:
            parts = int(n.attrs.get("num_outputs", n_out))
            if parts != n_out or parts < 1:
                raise ValueError(f"Split node {n.name!r}: num_outputs {parts} for {n_out} outputs")
            if "num_outputs" in n.attrs:
                size = -(-dim // parts)
                sizes = [min(size, max(dim - i * size, 0)) for i in range(parts)]
            elif dim % parts:
                raise ValueError(f"Split node {n.name!r}: axis of {dim} does not split into {parts} equal parts")
            else:
                sizes = [dim // parts] * parts
        if len(sizes) != n_out or sum(sizes) != dim or min(sizes) < 0:
            raise ValueError(f"Split node {n.name!r}: sizes {sizes} do not split an axis of {dim} into {n_out} "
                             "outputs")
        edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        return [[{"op": "take", "axis": ax, "indices": list(range(edges[i], edges[i + 1]))}] for i in range(n_out)]

    def _gather_steps(self, n, shape):
        ax = self._axis(n, n.attrs.get("axis", 0), len(shape))
        idx = self.const(self._input(n, 1))
        if idx is None:
            raise _unsupported(n, "Gather indices that are not a constant")
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise ValueError(f"Gather node {n.name!r}: indices of type {idx.dtype}")
        dim = shape[ax]
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            raise ValueError(f"Gather node {n.name!r}: indices {idx.min()}..{idx.max()} outside [{-dim}, {dim - 1}] "
                             f"on an axis of {dim}")
        idx = np.where(idx < 0, idx + dim, idx)
        return [{"op": "take", "axis": ax, "indices": idx.tolist()}]

    def _squeeze_steps(self, n, shape):
        axes = n.attrs.get("axes") if self.opset < 13 else self._ints(n, self._input(n, 1), "axes list")
        full = list(shape)
        if n.op == "Squeeze":
            if axes is None:
                raise _unsupported(n, "a Squeeze without axes (its result depends on the batch size)")
            drop = {self._axis(n, a, len(shape)) for a in axes}
            if any(shape[a] != 1 for a in drop):
                raise ValueError(f"Squeeze node {n.name!r}: axes {list(axes)} are not all of size 1 in {list(shape)}")
            new = [d for i, d in enumerate(full) if i not in drop]
        else:
            if axes is None:
                raise ValueError(f"Unsqueeze node {n.name!r} needs axes")
            rank = len(shape) + 1 + len(axes)
            norm = sorted({int(a) + rank if int(a) < 0 else int(a) for a in axes})
            if len(norm) != len(axes) or not all(0 <= a < rank for a in norm):
                raise ValueError(f"Unsqueeze node {n.name!r}: axes {list(axes)} invalid for an output of rank {rank}")
            if 0 in norm:
                raise _unsupported(n, "an Unsqueeze in front of the batch axis")
            it = iter(full)
            new = [1 if a in norm else next(it) for a in range(1, rank)]
        return [{"op": "reshape", "shape": new}]

    def _pad_steps(self, n, shape):
        mode = n.attrs.get("mode", "constant")
        if mode not in ("constant", "edge", "reflect"):
            raise _unsupported(n, f"Pad mode {mode!r}")
        full = len(shape) + 1
        if self.opset < 11:
            pads, value, axes = [int(v) for v in n.attrs["pads"]], float(n.attrs.get("value", 0.0)), None
        else:
            pads = self._ints(n, self._input(n, 1), "pads list")
            axes = self._ints(n, self._input(n, 3), "axes list")
            value = self._pad_value(n, self._input(n, 2))
        if pads is None:
            raise ValueError(f"Pad node {n.name!r} needs pads")
        axes = list(range(full)) if axes is None else [a + full if a < 0 else a for a in axes]
        if len(pads) != 2 * len(axes) or not all(0 <= a < full for a in axes) or len(set(axes)) != len(axes):
            raise ValueError(f"Pad node {n.name!r}: {len(pads)} pads for axes {axes} of a rank-{full} input")
        before, after = [0] * full, [0] * full
        for i, a in enumerate(axes):
            before[a], after[a] = pads[i], pads[i + len(axes)]
        if before[0] or after[0]:
            raise _unsupported(n, "padding of the batch axis")
        steps, pos = [], []
        for ax in range(len(shape)):
            b, e = before[ax + 1], after[ax + 1]
            if b < 0 or e < 0:
                if mode != "constant":
                    raise _unsupported(n, f"negative pads with mode {mode!r}")
                lo, hi = max(-b, 0), shape[ax] - max(-e, 0)
                if hi < lo:
                    raise ValueError(f"Pad node {n.name!r}: pads {b}, {e} remove more than the {shape[ax]} "
                                     f"values of axis {ax + 1}")
                steps.append({"op": "take", "axis": ax, "indices": list(range(lo, hi))})
            pos.append([max(b, 0), max(e, 0)])
        steps.append({"op": "pad", "pads": pos, "mode": mode})
        return steps, (value if mode == "constant" else None)

    def _pad_value(self, n, name):
        if not name:
            return 0.0
        v = self.val(name, n)
        if v.kind == "const" and v.data.size == 1:
            return v.data.reshape(()).item() if v.data.dtype.kind in "iu" else float(_F32(v.data.reshape(())))
        if v.kind == "dq" and v.src in self.consts and v.scale.size == 1 and self.consts[v.src].size == 1:
            code = np.asarray(self.consts[v.src]).reshape(-1)
            return float(K.dequantize_linear(code, _F32(v.scale[0]), int(v.zp[0]))[0])
        raise _unsupported(n, "a pad value that is not a scalar constant")

    def _resize_steps(self, n, shape):
        nearest = n.attrs.get("nearest_mode", "round_prefer_floor") if self.opset >= 11 else "simple"
        ctm, sc, out_len = self._resize_scales(n, shape)
        steps = []
        for ax, (d, o, s) in enumerate(zip(shape, out_len, sc)):
            if o < 1:
                raise ValueError(f"Resize node {n.name!r}: axis {ax + 1} of {d} resizes to {o}")
            if o == d and s == 1:
                continue
            idx = []
            for i in range(o):
                x = self._coordinate(ctm, i, s, o, d)
                if self._on_boundary(ctm, i, s, o, d, x, nearest):
                    raise _unsupported(n, f"nearest Resize whose input coordinate {float(x)} of output {i} on axis "
                                          f"{ax + 1} lies on a rounding boundary, where onnxruntime's float32 "
                                          "arithmetic decides (not reproduced bit for bit)")
                idx.append(self._nearest(x, nearest, s < 1, d))
            steps.append({"op": "take", "axis": ax, "indices": idx})
        return steps

    def _resize_scales(self, n, shape):
        """``(coordinate_transformation_mode, per-sample float32 scales, output lengths)`` of a Resize with
        constant scales or sizes (the batch axis kept)."""
        mode = n.attrs.get("mode", "nearest")
        if mode not in ("nearest", "linear"):
            raise _unsupported(n, f"Resize mode {mode!r} (nearest and linear only)")
        ctm = n.attrs.get("coordinate_transformation_mode", "half_pixel") if self.opset > 10 else "asymmetric"
        if int(n.attrs.get("antialias", 0)) or n.attrs.get("axes") is not None \
                or n.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise _unsupported(n, "antialias, axes or keep_aspect_ratio_policy")
        if ctm in ("tf_crop_and_resize", "tf_half_pixel_for_nn"):
            raise _unsupported(n, f"coordinate_transformation_mode {ctm!r} (not reproduced bit for bit)")
        full = len(shape) + 1
        scales_name, sizes_name = (self._input(n, 2), self._input(n, 3)) if self.opset > 10 else (self._input(n, 1), "")
        scales = self.const(scales_name) if scales_name else None
        sizes = self._ints(n, sizes_name, "sizes list") if sizes_name else None
        if scales is not None and scales.size == 0:
            scales = None
        if (scales is None) == (sizes is None):
            raise ValueError(f"Resize node {n.name!r} needs constant scales or sizes (one of them)")
        if scales is not None:
            sc = np.asarray(scales, _F32).reshape(-1)
            if sc.size != full or not np.all(sc > 0):
                raise ValueError(f"Resize node {n.name!r}: {sc.size} scales for a rank-{full} input (all > 0)")
            if sc[0] != 1:
                raise _unsupported(n, "a Resize of the batch axis")
            sc = sc[1:]
            out_len = [int(_F32(s) * _F32(d)) for s, d in zip(sc, shape)]
        else:
            if len(sizes) != full:
                raise ValueError(f"Resize node {n.name!r}: {len(sizes)} sizes for a rank-{full} input")
            batch = self.types.get(self.inputs[0], (None, None))[1] if self.inputs else None
            if not batch or batch[0] != sizes[0]:
                raise _unsupported(n, f"Resize sizes {sizes} fix the batch at {sizes[0]}; the model's batch is "
                                      f"{batch[0] if batch else None} (sizes need a model of that fixed batch)")
            out_len = sizes[1:]
            sc = np.array([_F32(o) / _F32(d) for o, d in zip(out_len, shape)], _F32)
        return ctm, sc, out_len

    @staticmethod
    def _on_boundary(ctm, i, s, out_len, in_len, x, mode) -> bool:
        """The exact coordinate (the formula in rationals on the float32 scale) lies within float32 error of a
        point where ``mode`` changes its answer, unless float32 computes exactly that point."""
        from fractions import Fraction as Q
        sq, h = Q(float(s)), Q(1, 2)
        if ctm == "asymmetric":
            v = Q(i) / sq
        elif ctm in ("half_pixel", "pytorch_half_pixel"):
            v = Q(0) if ctm == "pytorch_half_pixel" and out_len <= 1 else (i + h) / sq - h
        elif ctm == "align_corners":
            v = Q(0) if out_len == 1 else Q(i * (in_len - 1), out_len - 1)
        else:                                            # half_pixel_symmetric
            v = Q(in_len, 2) * (1 - Q(out_len) / (sq * in_len)) + (i + h) / sq - h
        off = 0 if mode in ("floor", "ceil", "simple") else h    # boundaries: integers, or halves
        nearest_b = round(v - off) + off                          # the closest boundary
        dist = abs(v - nearest_b)
        if dist == 0:
            return Q(float(x)) != v
        return dist < Q(1, 1 << 16) * max(1, abs(v))

    #: onnxruntime's float32 input coordinate of output position ``i`` (upsamplebase.h).
    _coordinate = staticmethod(R.original_coordinate)

    @staticmethod
    def _nearest(x, mode, down, in_len):
        xf = float(x)
        if mode == "simple":
            v = int(np.ceil(xf)) if down else int(xf)
        elif mode == "round_prefer_ceil":
            v = int(np.sign(xf) * np.floor(abs(xf) + 0.5))
        elif mode == "floor":
            v = int(np.floor(xf))
        elif mode == "ceil":
            v = int(np.ceil(xf))
        elif mode == "round_prefer_floor":
            v = int(np.floor(xf)) if xf == float(_F32(int(xf)) + _F32(0.5)) else int(np.sign(xf) * np.floor(abs(xf) + 0.5))
        else:
            raise ValueError(f"nearest_mode {mode!r} is not one onnxruntime knows")
        return min(max(v, 0), in_len - 1)
