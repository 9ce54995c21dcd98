r"""TFLite int8 ``TRANSPOSE_CONV`` (Keras ``Conv2DTranspose`` as the TF converter emits it): the importer's
builder method and the graph op ``tflite_transpose_conv``, registered when :mod:`fxpsim.frontends.tflite.ops` is
imported.

Node: inputs ``x`` (NHWC codes, per-tensor), ``w`` (constant int8 ``[O, KH, KW, C]``, TFLite's OHWI layout,
symmetric, per output channel or per tensor), optional ``bias`` (int32 ``[O]``); attributes ``stride`` [sh, sw],
``pads`` [[top, bottom], [left, right]] (TFLite's ``ComputePaddingHeightWidth`` of the output size, as LiteRT's
Prepare computes them), ``activation`` and ``xnnpack_delegated`` (whether LiteRT's XNNPACK delegate takes the
node). Input position :math:`(i, j)` and tap :math:`(f_h, f_w)` feed output :math:`(i s_h - p_t + f_h,\
j s_w - p_l + f_w)` when inside, so output :math:`(y, x, o)` accumulates

.. math:: a_{y,x,o} = b_o + \sum_{(i, f_h):\, i s_h - p_t + f_h = y}\ \sum_{(j, f_w):\, j s_w - p_l + f_w = x}\
          \sum_c (x_{i,j,c} - z_x)\, w_{o,f_h,f_w,c}

**On the datapath** the node is the core ``conv2d`` (:mod:`fxpsim.graph.mac_ops`) of the equivalent stride-1
convolution: the input with :math:`s - 1` zero-point codes inserted between neighbours (a zero once offset),
padded by :math:`K - 1 - p_t` before and :math:`O_H - (H - 1) s_h + p_t - 1` after, and the kernel flipped in
both spatial axes. Its products, in the core op's ``(kh, kw, c)`` order of the flipped kernel, are in the order
LiteRT's reference kernel adds them to one output (its scatter loops over input rows, columns and channels in
increasing order; for one output and one input position the tap is fixed), followed by the bias ("after"); the
inserted zeros and paddings are zero products, which change neither a sequential wrapping nor a sequential
saturating sum. So the datapath's accumulator (its width, overflow mode, bias placement) applies as to a
convolution, overflow counts and accumulators are traced, and the MAC view (:mod:`fxpsim.graph.mac_view`) is that
convolution. With ``accumulator_order="tree"`` or K tiles (``tile_k``) the grouping is the equivalent
convolution's over its :math:`K_H K_W C` products, zeros included (an NPU that runs a transposed convolution as
this convolution); with ``zero_point="fold"`` the inserted taps hold :math:`z_x` as padded taps do. The trace's ``adds`` and the op's
``macs`` count the real products only.

**Requantization** on the graph's ``"native"`` datapath (``kernels="builtin"`` / ``"xnnpack"``; the
reference kernels are the core op's ``tflite-double``): the int32 accumulator (exact: every kernel set sums in
int32, which wraps and is order-free) is requantized as that kernel set does:

* builtin (``optimized_integer_ops::TransposeConvV2`` then ``optimized_ops::Quantize``): output channels in whole
  blocks of 8 take NEON's ``vqrdmulhq`` + ``vrshlq`` (SRDHM, then a right shift rounding ties up: NEON_2_SSE on
  x86-64), the ``O % 8`` remaining channels gemmlowp's ``MultiplyByQuantizedMultiplier`` (ties away);
* xnnpack (``deconvolution2d_nhwc_qs8[_qc8w]``):
  :math:`\mathrm{rne}(\mathrm{clamp}(\mathrm{fl}_{32}(a)\cdot \mathrm{fl}_{32}(\mathrm{fl}_{32}(s_x s_{w,o})/s_y)))
  + z_y`, clamped to XNNPACK's quantized activation bounds; where the delegate does not take the node (an output
  shape computed at run time, SAME padding with a kernel smaller than the stride, VALID with a kernel larger than
  the output) LiteRT runs the builtin kernel, and so does fxpsim.
"""
from __future__ import annotations

import dataclasses
import types

import numpy as np

from ...datapath.requantize import multiply_by_quantized_multiplier, quantize_multiplier
from ...graph.ir import Node
from ...graph.mac_ops import refuse_unmodelled_knobs
from ...graph.mac_view import core_operands, register_mac_view
from ...graph.registry import _clamp_codes, _float_activation, _float_clip, _pair
from ...graph.ops import OPS, Op, register_op
from .mac_ops import _mbqm_tie_up, _native_requant
from .op_support import _cached, _kernels, _spec
from .reader import _INT8

__all__ = ["TransposeConvOps", "transpose_conv_pads", "xnnpack_takes_transpose_conv", "zero_insert"]

#: Output channels per NEON block of LiteRT's optimized int8 ``Quantize`` (the rest take the scalar path).
BUILTIN_CHANNEL_BLOCK = 8


# ============================================================================ geometry
def transpose_conv_pads(in_hw, k_hw, stride, out_hw) -> tuple:
    """TFLite's paddings of a transposed convolution, ``((top, bottom), (left, right))``:
    ``ComputePaddingHeightWidth`` of the output size as the convolution's input,
    :math:`t = \\max((H - 1) s + K - O_H, 0)`, top :math:`\\lfloor t/2 \\rfloor`, bottom the rest."""
    pads = []
    for n, k, s, o in zip(in_hw, k_hw, stride, out_hw):
        total = max((n - 1) * s + k - o, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def _equivalent_pads(in_hw, k_hw, stride, out_hw, top_left) -> tuple:
    """Paddings of the equivalent stride-1 convolution over the zero-inserted input (see the module docstring)."""
    return tuple((k - 1 - p, o - (n - 1) * s + p - 1) for n, k, s, o, p in zip(in_hw, k_hw, stride, out_hw, top_left))


def zero_insert(x: np.ndarray, stride, fill) -> np.ndarray:
    """NHWC ``x`` with ``s - 1`` copies of ``fill`` between neighbours along H and W (stride ``(sh, sw)``)."""
    sh, sw = stride
    if (sh, sw) == (1, 1):
        return x
    n, h, w, c = x.shape
    up = np.full((n, (h - 1) * sh + 1, (w - 1) * sw + 1, c), fill, dtype=x.dtype)
    up[:, ::sh, ::sw] = x
    return up


def xnnpack_takes_transpose_conv(constant_output_shape: bool, k_hw, stride, same: bool, out_hw) -> bool:
    """Whether LiteRT's XNNPACK delegate takes a TRANSPOSE_CONV (``VisitTransposeConvNode`` and
    ``CalculateTransposeConvPaddings``): an output shape that is a constant of the model, and kernels that cover the
    stride (SAME) or fit in the output (VALID); else LiteRT runs its builtin kernel."""
    if same:
        return bool(constant_output_shape) and all(k >= s for k, s in zip(k_hw, stride))
    return bool(constant_output_shape) and all(k <= n for k, n in zip(k_hw, out_hw))


def _taps(n_in, k, s, p, n_out) -> np.ndarray:
    """``[n_out, k]`` booleans: tap ``f`` reaches output ``y`` from a real input row (``(y + p - f) / s`` an
    integer in ``[0, n_in)``)."""
    d = np.arange(n_out)[:, None] + p - np.arange(k)[None, :]
    return (d % s == 0) & (d >= 0) & (d // s < n_in)


def _tap_masks(graph, node):
    x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    y = _spec(graph, node.outputs[0])
    (sh, sw), (pt, pl) = _pair(node.attrs, "stride"), (int(node.attrs["pads"][0][0]), int(node.attrs["pads"][1][0]))
    return _taps(x.shape[0], w.shape[1], sh, pt, y.shape[0]), _taps(x.shape[1], w.shape[2], sw, pl, y.shape[1])


def _as_conv(graph, node, ins):
    """``(conv node, its inputs)``: the equivalent stride-1 ``conv2d`` and its zero-inserted input and flipped
    kernel (both cached per node for the kernel)."""
    cache = graph.__dict__.setdefault("_tflite_tconv", {})
    got = cache.get(node.name)
    if got is None or got[0] is not node:
        x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        stride = _pair(node.attrs, "stride")
        top_left = (int(node.attrs["pads"][0][0]), int(node.attrs["pads"][1][0]))
        pads = _equivalent_pads(x.shape[:2], w.shape[1:3], stride, y.shape[:2], top_left)
        conv = Node(node.name, "conv2d", node.inputs, node.outputs,
                    dict(node.attrs, stride=[1, 1], dilation=[1, 1], padding=[list(p) for p in pads]))
        got = cache[node.name] = (node, conv, stride, np.ascontiguousarray(w.data[:, ::-1, ::-1, :]))
    _, conv, stride, flipped = got
    zx = int(_spec(graph, node.inputs[0]).zero_point[0])
    return conv, [zero_insert(np.asarray(ins[0]), stride, zx), flipped] + list(ins[2:])


# ============================================================================ graph op
def _native_codes(graph, node, acc, kernels):
    """Output codes before the clamp: the kernel set's own requantization of the int32 accumulators."""
    if kernels == "xnnpack" and node.attrs.get("xnnpack_delegated", True):
        return _native_requant(graph, node, acc, "xnnpack")
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))

    def params():
        real = np.float64(np.float32(x.scale[0])) * w.scale.astype(np.float32).astype(np.float64) / \
            np.float64(np.float32(y.scale[0]))
        m, s = quantize_multiplier(np.broadcast_to(real, (w.shape[0],)).copy())
        return np.asarray(m, np.int64), np.asarray(s, np.int64)
    m, s = _cached(graph, node, "tconv_builtin_mult", params)
    acc = np.asarray(acc, np.int64)
    n8 = BUILTIN_CHANNEL_BLOCK * (len(m) // BUILTIN_CHANNEL_BLOCK)
    out = np.empty(acc.shape, np.int64)
    out[..., :n8] = _mbqm_tie_up(acc[..., :n8], m[:n8], s[:n8])
    if n8 < len(m):
        out[..., n8:] = multiply_by_quantized_multiplier(acc[..., n8:], m[n8:], s[n8:])
    return out + int(y.zero_point[0])


def _native_range(graph, node, kernels):
    act = node.attrs.get("activation", "none")
    if kernels == "xnnpack" and node.attrs.get("xnnpack_delegated", True):
        from .ops import _xnn_act_range               # (ops imports this module at its end)
        y = _spec(graph, node.outputs[0])
        return _cached(graph, node, "xnn_act", lambda: _xnn_act_range(act, np.float32(y.scale[0]),
                                                                       int(y.zero_point[0]), y.dtype))
    return _clamp_codes(graph, node, node.outputs[0], act)


def _real_adds(graph, node, n_rows: int) -> int:
    """Products summed into the outputs of ``n_rows`` samples (real taps only)."""
    my, mx = _tap_masks(graph, node)
    c, o = _spec(graph, node.inputs[0]).shape[2], _spec(graph, node.outputs[0]).shape[2]
    return int(my.sum()) * int(mx.sum()) * c * o * n_rows


def _run(graph, node, ins, dp, trace):
    conv, conv_ins = _as_conv(graph, node, ins)
    native = getattr(dp, "requantization", None) == "native"
    if native:
        kernels = _kernels(graph)
        refuse_unmodelled_knobs(node, dp, f"LiteRT {kernels} kernels")
        # the core op for the accumulators (any TFLite scheme: its outputs are discarded), then the kernel set's
        dp = (dataclasses.replace(dp, requantization="tflite-double") if dataclasses.is_dataclass(dp) else
              types.SimpleNamespace(**dict(vars(dp), requantization="tflite-double")))
    outs, info = OPS["conv2d"].run(graph, conv, conv_ins, dp, trace or native)
    if native:
        y = _spec(graph, node.outputs[0])
        pre = _native_codes(graph, node, info["acc"], kernels)
        lo, hi = _native_range(graph, node, kernels)
        outs = [np.clip(pre, lo, hi).astype(y.dtype)]
        if not trace:
            return outs, None
        clipped = (pre > hi) if node.attrs.get("activation", "none") != "none" else (pre > hi) | (pre < lo)
        info["clipped"] = int(np.count_nonzero(clipped))
    if info is not None:
        k_conv = int(np.prod(conv_ins[1].shape[1:]))
        info["adds"] += _real_adds(graph, node, len(ins[0])) - int(outs[0].size) * k_conv
    return outs, info


def _float_tconv(x, w, stride, top_left, out_hw) -> np.ndarray:
    """The transposed convolution on float64 values, scattered tap by tap (independent of :func:`_as_conv`)."""
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    (sh, sw), (t, left) = stride, top_left
    big = np.zeros((n, max((h - 1) * sh + kh, t + out_hw[0]), max((wd - 1) * sw + kw, left + out_hw[1]), o))
    for i in range(kh):
        for j in range(kw):
            big[:, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += x @ w[:, i, j, :].T
    return big[:, t:t + out_hw[0], left:left + out_hw[1]]


def _run_float(graph, node, ins):
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    top_left = (int(node.attrs["pads"][0][0]), int(node.attrs["pads"][1][0]))
    out = _float_tconv(np.asarray(ins[0], np.float64), w.dequantize(w.data), _pair(node.attrs, "stride"), top_left,
                       y.shape[:2])
    if len(node.inputs) > 2 and node.inputs[2]:
        s_acc = float(x.scale[0]) * np.broadcast_to(w.scale, (out.shape[-1],))
        out = out + _spec(graph, node.inputs[2]).data.astype(np.float64) * s_acc
    return [_float_clip(graph, node, _float_activation(out, node.attrs.get("activation")))]


def _check(graph, node):
    where = f"node {node.name!r} (tflite_transpose_conv)"
    if len(node.inputs) not in (2, 3) or len(node.outputs) != 1:
        raise ValueError(f"{where}: needs inputs (x, w[, bias]) and one output")
    x, w, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    for s in (x, y):
        if s.is_float or s.scale is None or s.per_channel or len(s.shape) != 3:
            raise ValueError(f"{where}: tensor {s.name!r} needs HWC int8 codes with one scale and zero point")
    if not w.is_constant or w.data.ndim != 4 or w.scale is None or np.any(w.zero_point):
        raise ValueError(f"{where}: the weights need constant [O, KH, KW, C] codes with a scale and zero point 0")
    if w.shape[3] != x.shape[2] or y.shape[2] != w.shape[0]:
        raise ValueError(f"{where}: weights {list(w.shape)} do not map input {list(x.shape)} to output "
                         f"{list(y.shape)}")
    stride, pads = _pair(node.attrs, "stride"), node.attrs.get("pads")
    if min(stride) < 1 or np.shape(pads) != (2, 2) or np.min(pads) < 0:
        raise ValueError(f"{where}: stride {list(stride)} and pads {pads!r} (positive strides, [[top, bottom], "
                         f"[left, right]] non-negative)")
    eq = _equivalent_pads(x.shape[:2], w.shape[1:3], stride, y.shape[:2], (pads[0][0], pads[1][0]))
    if min(min(p) for p in eq) < 0:
        raise ValueError(f"{where}: input {list(x.shape)}, kernel {list(w.shape[1:3])}, stride {list(stride)} and "
                         f"pads {pads} do not give output {list(y.shape)}")
    if len(node.inputs) == 3 and tuple(_spec(graph, node.inputs[2]).shape) != (w.shape[0],):
        raise ValueError(f"{where}: the bias needs one value per output channel ({w.shape[0]})")


def _macs(graph, node) -> int:
    return _real_adds(graph, node, 1)


def _worst_case_sum(graph, node) -> int:
    """Largest :math:`|a|` an output can reach: over the outputs, the real taps' :math:`\\sum |w|` times the
    largest :math:`|x - z_x|`, plus :math:`|b|`."""
    x, w = _spec(graph, node.inputs[0]), _spec(graph, node.inputs[1])
    lo, hi = x.code_range
    z = int(x.zero_point[0])
    per_tap = np.abs(w.data.astype(np.int64)).sum(axis=3)                       # [O, KH, KW]
    my, mx = _tap_masks(graph, node)
    reach = np.einsum("yk,okl,xl->oyx", my.astype(np.int64), per_tap, mx.astype(np.int64)).reshape(len(per_tap), -1)
    bound = reach.max(axis=1).astype(object) * max(abs(lo - z), abs(hi - z))
    if len(node.inputs) > 2 and node.inputs[2]:
        bound = bound + np.abs(_spec(graph, node.inputs[2]).data.astype(np.int64)).astype(object)
    return int(max(bound))


def _mac_view(graph, node, ins):
    conv, conv_ins = _as_conv(graph, node, ins)
    return core_operands(graph, conv, conv_ins)


register_op(Op("tflite_transpose_conv", _run, _run_float, _check, _macs, _worst_case_sum))
register_mac_view("tflite_transpose_conv", _mac_view)


# ============================================================================ importer
class TransposeConvOps:
    """The TRANSPOSE_CONV method of :class:`fxpsim.frontends.tflite.importer._Builder`."""

    def op_TRANSPOSE_CONV(self, op):
        o = op["options"]
        shape_i, w, x = op["inputs"][:3]
        b = op["inputs"][3] if len(op["inputs"]) > 3 else -1
        y = op["outputs"][0]
        out_shape = [int(v) for v in np.asarray(self.static_of(shape_i, op, "output shape")).reshape(-1)]
        self.check_int8(x, op)
        xn = self.activation_tensor(x, op)
        self._typed_constant(w, op, "weights", _INT8, "weights of type {type} are not supported (int8 weights are)")
        wv = self.static[w]
        if wv.ndim != 4:
            raise ValueError(f"{self.path}: {self.where(op)}: weights of shape {list(wv.shape)} (4-D [O, KH, KW, C] "
                             f"expected)")
        scale, zp = self.quant(w, op, per_tensor=False)
        if scale.size > 1 and self.t[w]["qdim"] != 0 or np.any(zp):
            raise ValueError(f"{self.path}: {self.where(op)}: the weights need per-output-channel (axis 0) or "
                             f"per-tensor scales and zero points 0 (TFLite's int8 TRANSPOSE_CONV ignores them)")
        n, h, wd, c = self.shape[x]
        n_out, kh, kw, c_w = wv.shape
        if len(out_shape) != 4 or out_shape[0] != n or out_shape[3] != n_out or c_w != c:
            raise ValueError(f"{self.path}: {self.where(op)}: output shape {out_shape}, weights {list(wv.shape)} and "
                             f"input {list(self.shape[x])} do not match")
        stride = (int(o["stride_h"]), int(o["stride_w"]))
        same = int(o["padding"]) == 0
        for size, got, k, s in zip(out_shape[1:3], (h, wd), (kh, kw), stride):
            want = -(-size // s) if same else (size - k + s) // s     # LiteRT's Eval: the input this output has
            if s < 1 or want != got:
                raise ValueError(f"{self.path}: {self.where(op)}: an output of {out_shape} with kernel {[kh, kw]}, "
                                 f"stride {list(stride)} and {'SAME' if same else 'VALID'} padding needs an input "
                                 f"of another size than {list(self.shape[x])} (LiteRT refuses it)")
        pads = transpose_conv_pads((h, wd), (kh, kw), stride, out_shape[1:3])
        ins = [xn, self.constant(w, op, axis=0)]
        if b >= 0:
            ins.append(self._bias(b, op, n_out))
        delegated = xnnpack_takes_transpose_conv(shape_i in self.static and shape_i not in self.folded, (kh, kw),
                                                 stride, same, out_shape[1:3])
        yn = self.declare(y, op, tuple(out_shape))
        self.node(op, "tflite_transpose_conv", ins, [yn],
                  {"stride": list(stride), "pads": [list(p) for p in pads], "activation": self.activation(op),
                   "xnnpack_delegated": bool(delegated)})
