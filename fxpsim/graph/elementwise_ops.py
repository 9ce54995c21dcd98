"""The elementwise ops of an :class:`~fxpsim.graph.ir.IntegerGraph` that requantize their inputs onto their
own output grid: ``add``, ``mul`` and ``concat`` (registered in :data:`fxpsim.graph.ops.OPS` when this module is
imported), on every requantization scheme of the datapath.

With input codes :math:`a, b` on grids :math:`(s_a, z_a)`, :math:`(s_b, z_b)`, output :math:`(s_y, z_y)`, and
:math:`[lo, hi]` the output code range narrowed by the fused activation and the node's ``clip``:

``tflite-double`` / ``tflite-single`` (and ``native``, an imported TFLite graph's own): TFLite's integer
kernels, bit for bit.
    ``add``: ``ADD`` (:func:`fxpsim.datapath.integer_ops.quantized_add`: both inputs shifted left by 20,
    three fixed-point multipliers; ``single`` rounding with ``tflite-single``). ``mul``: ``MUL``,
    :math:`y = \\mathrm{MBQM}((a - z_a)(b - z_b), M) + z_y` with :math:`M = \\mathrm{fl}_{32}(\\mathrm{fl}_{32}(s_a s_b)
    / s_y)` as TFLite computes it, through a :class:`~fxpsim.datapath.requantize.Requantizer` (so
    ``multiplier_bits`` and ``requantization_rounding`` apply). ``concat``: inputs on the output grid are
    copied; others are requantized as the ``QUANTIZE`` op the TFLite converter inserts before the
    concatenation (:func:`~fxpsim.datapath.tflite.requantize_tflite`).
``float``: one rounding of the real result, with the datapath's ``rounding``:
    :math:`y = \\mathrm{round}\\big(\\sum_i (x_i - z_i)\\,\\mathrm{fl}_{64}(s_i / s_y)\\big) + z_y` for ``add``
    (two terms) and ``concat`` (one per input), :math:`\\mathrm{round}((a - z_a)(b - z_b)\\,
    \\mathrm{fl}_{64}(s_a s_b / s_y)) + z_y` for ``mul``.
``shift`` (powers of two only): each scale ratio :math:`s_i / s_y` is rounded to :math:`2^{e_i}`; the terms
    are aligned exactly, :math:`A = \\sum_i (x_i - z_i)\\,2^{e_i + k}` with :math:`k = \\max(0, -\\min_i e_i)`, and
    :math:`y = \\mathrm{round}(A / 2^k) + z_y` (:func:`~fxpsim.datapath.requantize.requantize_shift`).

TFLite's ``ADD`` and ``QUANTIZE`` have their own fixed multipliers and roundings: a datapath that sets
``multiplier_bits`` or ``requantization_rounding`` with a ``tflite-*`` scheme is refused on ``add`` and on a
requantizing ``concat`` (set those knobs per op type instead, e.g. ``[layers."op:conv2d"]``).
"""
from __future__ import annotations

import numpy as np

from ..core.fixed import Format, from_float
from ..datapath.integer_ops import quantized_add
from ..datapath.requantize import Requantizer, requantize_shift
from ..datapath.tflite import requantize_params, requantize_tflite
from .registry import Op, _clamp_codes, _float_activation, _no_trace, _rounding_name, _spec, register_op

__all__ = ["rescale_sum"]

_SCHEMES = ("tflite-double", "tflite-single", "shift", "float")


def _scheme(node, dp) -> str:
    scheme = dp.requantization
    if scheme == "native":          # an imported graph's own runtime: TFLite's arithmetic for these ops
        return "tflite-double"
    if scheme not in _SCHEMES:
        raise ValueError(f"node {node.name!r} ({node.op}): requantization scheme {scheme!r} is not one of "
                         f"{list(_SCHEMES)}")
    return scheme


def _refuse_multiplier_knobs(node, dp, what: str) -> None:
    knobs = [k for k, v, d in (("multiplier_bits", getattr(dp, "multiplier_bits", 31), 31),
                               ("requantization_rounding", getattr(dp, "requantization_rounding", None), None))
             if v != d]
    if knobs:
        raise ValueError(f"node {node.name!r} ({node.op}): {what} has its own fixed multipliers and roundings; "
                         f"the datapath sets {', '.join(knobs)}, which it does not model (set them for the MAC "
                         f"ops only, e.g. [layers.\"op:conv2d\"])")


def rescale_sum(terms, out_scale: float, out_zp: int, scheme: str, rounding) -> np.ndarray:
    r"""Output codes (int64, before the clamp) of :math:`\sum_i (x_i - z_i) s_i` on the grid
    ``(out_scale, out_zp)`` for the ``float`` and ``shift`` schemes (see the module docstring).

    ``terms``: ``[(codes, zero_point, scale), ...]``, codes broadcasting together."""
    offs = [np.asarray(c, dtype=np.int64) - int(z) for c, z, _ in terms]
    if scheme == "float":
        total = sum(o.astype(np.float64) * (float(s) / float(out_scale)) for o, (_, _, s) in zip(offs, terms))
        return from_float(np.asarray(total, dtype=np.float64), Format.integer(62), rounding=rounding).raw + out_zp
    exps = [int(np.round(np.log2(float(s) / float(out_scale)))) for _, _, s in terms]
    k = max(0, -min(exps))
    if max(exps) + k > 40:
        raise ValueError(f"shift requantization: scale ratios 2^{min(exps)}..2^{max(exps)} are too far apart")
    acc = sum(o << (e + k) for o, e in zip(offs, exps))
    return requantize_shift(acc, k, rounding, out=Format.integer(62)) + out_zp


def _add_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    scheme = _scheme(node, dp)
    if scheme.startswith("tflite"):
        _refuse_multiplier_knobs(node, dp, "TFLite's ADD")
        out = quantized_add(ins[0], ins[1], scale1=float(a.scale[0]), zp1=int(a.zero_point[0]),
                            scale2=float(b.scale[0]), zp2=int(b.zero_point[0]), out_scale=float(y.scale[0]),
                            out_zp=int(y.zero_point[0]), act_min=lo, act_max=hi, out_dtype=y.dtype,
                            rounding="single" if scheme == "tflite-single" else "double")
        return [out], _no_trace()
    pre = rescale_sum([(ins[0], a.zero_point[0], a.scale[0]), (ins[1], b.zero_point[0], b.scale[0])],
                      float(y.scale[0]), int(y.zero_point[0]), scheme, _rounding_name(dp.rounding))
    return [np.clip(pre, lo, hi).astype(y.dtype)], {**_no_trace(), "clipped": int(np.count_nonzero(
        (pre < lo) | (pre > hi)))}


def _add_prepare(graph, node, dp, in_shapes):
    """A compiled plan's step of an ``add`` (:mod:`fxpsim.graph.plan`): on TFLite's scheme with int8 codes, the
    table lookup prepared once; anything else (or an input it was not prepared for) runs :func:`_add_run`."""
    if None in in_shapes[:2] or not _scheme(node, dp).startswith("tflite"):
        return None
    _refuse_multiplier_knobs(node, dp, "TFLite's ADD")
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    call = quantized_add(np.zeros(in_shapes[0], a.dtype), np.zeros(in_shapes[1], b.dtype), scale1=float(a.scale[0]),
                         zp1=int(a.zero_point[0]), scale2=float(b.scale[0]), zp2=int(b.zero_point[0]),
                         out_scale=float(y.scale[0]), out_zp=int(y.zero_point[0]), act_min=lo, act_max=hi,
                         out_dtype=y.dtype, rounding="single" if _scheme(node, dp) == "tflite-single" else "double",
                         prepare=True)
    if call is None:
        return None

    def step(ins, trace):
        out = call(ins[0], ins[1])
        return ([out], _no_trace()) if out is not None else _add_run(graph, node, ins, dp, trace)
    return step


def _mul_requantizer(graph, node, dp, scheme) -> Requantizer:
    cache = graph.__dict__.setdefault("_requantizers", {})
    final = getattr(dp, "requantization_rounding", None)
    key = (node.name, scheme, _rounding_name(dp.rounding), None if final is None else _rounding_name(final),
           int(getattr(dp, "multiplier_bits", 31)))
    if key not in cache:
        a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
        sa, sb, sy = (np.float32(t.scale[0]) for t in (a, b, y))
        if scheme.startswith("tflite"):      # TFLite's MUL: the real multiplier in float32
            real = float(np.float32(np.float32(sa * sb) / sy))
            cache[key] = Requantizer.from_real(real, kind=scheme.split("-")[1], final_rounding=final,
                                               multiplier_bits=key[4])
        else:
            cache[key] = Requantizer.from_real(float(sa) * float(sb) / float(sy), kind=scheme,
                                               rounding=_rounding_name(dp.rounding))
    return cache[key]


def _mul_run(graph, node, ins, dp, trace):
    a, b, y = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    lo, hi = _clamp_codes(graph, node, node.outputs[0], node.attrs.get("activation", "none"))
    rq = _mul_requantizer(graph, node, dp, _scheme(node, dp))
    prod = (ins[0].astype(np.int64) - int(a.zero_point[0])) * (ins[1].astype(np.int64) - int(b.zero_point[0]))
    pre = rq(prod) + int(y.zero_point[0])
    return [np.clip(pre, lo, hi).astype(y.dtype)], {**_no_trace(), "clipped": int(np.count_nonzero(
        (pre < lo) | (pre > hi)))}


def _concat_run(graph, node, ins, dp, trace):
    y = _spec(graph, node.outputs[0])
    lo, hi = _clamp_codes(graph, node, node.outputs[0], "none")
    sy, zy = float(np.float32(y.scale[0])), int(y.zero_point[0])
    scheme = _scheme(node, dp)
    parts, clipped = [], 0
    for name, v in zip(node.inputs, ins):
        x = _spec(graph, name)
        sx, zx = float(np.float32(x.scale[0])), int(x.zero_point[0])
        if (sx, zx) == (sy, zy):
            parts.append(np.clip(v, lo, hi))
            continue
        if scheme.startswith("tflite"):
            _refuse_multiplier_knobs(node, dp, "TFLite's QUANTIZE (before a CONCATENATION)")
            pre = requantize_tflite(v, requantize_params(sx, zx, sy, zy, input_dtype=x.dtype, output_dtype=y.dtype))
            pre = pre.astype(np.int64)
        else:
            pre = rescale_sum([(v, zx, sx)], sy, zy, scheme, _rounding_name(dp.rounding))
        clipped += int(np.count_nonzero((pre < lo) | (pre > hi)))
        parts.append(np.clip(pre, lo, hi))
    out = np.concatenate([p.astype(y.dtype) for p in parts], axis=_batch_axis(node))
    return [out], {**_no_trace(), "clipped": clipped}


def _binary_float(fn):
    return lambda graph, node, ins: [_float_activation(fn(ins[0], ins[1]), node.attrs.get("activation"))]


def _batch_axis(node) -> int:
    """The ``axis`` attribute (an axis of the per-sample shape) as an axis of the batched arrays."""
    axis = int(node.attrs.get("axis", -1))
    return axis + 1 if axis >= 0 else axis


def _concat_float(graph, node, ins):
    return [np.concatenate(ins, axis=_batch_axis(node))]


def _check(n_in):
    def check(graph, node):
        ins = [t for t in node.inputs if t]
        if (n_in and len(ins) != n_in) or not ins or len(node.outputs) != 1:
            raise ValueError(f"node {node.name!r} ({node.op}): needs {n_in or 'one or more'} input(s) and one "
                             "output")
        for t in ins + list(node.outputs):
            s = _spec(graph, t)
            if s.is_float or s.scale is None or s.per_channel:
                raise ValueError(f"node {node.name!r} ({node.op}): tensor {t!r} needs integer codes with one "
                                 "scale and zero point")
        if node.op == "concat":
            axis = node.attrs.get("axis", -1)
            rank = len(_spec(graph, ins[0]).shape)
            if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
                raise ValueError(f"node {node.name!r} (concat): axis must be an int naming an axis of the "
                                 f"per-sample shape {list(_spec(graph, ins[0]).shape)}, got {axis!r}")
    return check


register_op(Op("add", _add_run, _binary_float(np.add), _check(2), prepare=_add_prepare))
register_op(Op("mul", _mul_run, _binary_float(np.multiply), _check(2)))
register_op(Op("concat", _concat_run, _concat_float, _check(0)))
