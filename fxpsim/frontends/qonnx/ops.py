"""The ops of graphs imported from QONNX (:func:`fxpsim.import_qonnx`), registered in :data:`fxpsim.graph.ops.OPS`.

Every tensor between two ops holds integer codes :math:`q` whose real value is :math:`s\\,(q - z)`, with an exact
scale :math:`s = m\\,2^e/d` (:class:`fxpsim.datapath.qonnx.scales.ExactScale`, recorded per tensor in
``graph.meta["qonnx"]["scales"]``) and a zero point ``z`` (the ``x_zp`` / ``a_zp`` attributes of the consumer).
The importer computes every integer multiplier between scales once; the ops compute on integers only
(:mod:`fxpsim.datapath.qonnx.arithmetic`, :mod:`fxpsim.datapath.accumulate`). Layout: the model's own (NCHW).

====================  =================================================================================
op                    inputs / attributes (arrays broadcast against the per-sample shape)
====================  =================================================================================
``qonnx_quant``       Quant/IntQuant: float x (``float_in``; ``scale``: float32 values) or codes (``x_zp``,
                      ``num``/``den``: input scale over output scale); ``zp``, ``lo``, ``hi``, ``rounding_mode`` (qonnx's names),
                      ``bipolar`` (qonnx's 1-bit signed case)
``qonnx_bipolar``     BipolarQuant: :math:`\\pm 1` by the sign of x (``float_in``, ``x_zp``)
``qonnx_trunc``       Trunc v1/v2: ``x_zp``, ``num``, ``den``, ``zp``, ``shift``, ``rounding_mode``, ``bounds``
``qonnx_threshold``   MultiThreshold: x, integer thresholds ``[C or 1, B]`` (float32 bit patterns with
                      ``float_in``); ``channel_axis``
``qonnx_matmul``      x [..., K], w [K, M] (centred codes); ``x_zp``
``qonnx_conv``        x NCHW, w OIHW (centred codes); ``x_zp``, ``strides``, ``pads``, ``dilations``, ``group``
``qonnx_add``         :math:`(a - z_a) k_a + (b - z_b) k_b`; ``a_zp``, ``b_zp``, ``ka``, ``kb``
``qonnx_mul``         :math:`(a - z_a)(b - z_b)`; ``a_zp``, ``b_zp``
``qonnx_relu``        :math:`\\max(x - z, 0)`; ``x_zp``
``qonnx_sign``        :math:`\\mathrm{sign}(x - z)`; ``x_zp``
``qonnx_maxpool``     ``kernel``, ``strides``, ``pads`` (codes, padding with the lowest code)
``qonnx_avgpool``     the window's sum of :math:`x - z` (the scale carries the division); ``kernel``,
                      ``strides``, ``pads``, ``x_zp``
``qonnx_rescale``     the same codes read with another scale (a Mul / Div by a positive constant)
``qonnx_move``        ``kind`` (``reshape`` / ``transpose``), ``shape`` / ``perm`` (per sample)
``qonnx_dequantize``  codes -> float32 nearest to :math:`s (q - z)` (one rounding); ``zp``, ``m``, ``e``, ``d``
====================  =================================================================================

MAC nodes accumulate exactly on the graph's own datapath (``requantization="native"``: a register as wide as
the worst case); on any other datapath through its accumulator (width, overflow, order), which is how a
hardware accumulator is simulated.
"""
from __future__ import annotations

import numpy as np

from ...datapath import accumulate as _acc
from ...datapath.qonnx import arithmetic as A
from ...datapath.qonnx.scales import ExactScale
from ...graph.registry import Op, register_op
from .attrs import acc_setup as _acc_setup, attr_array as _arr, conv_geometry as _conv_geometry

__all__ = ["QONNX_OPS"]

QONNX_OPS = ("qonnx_quant", "qonnx_bipolar", "qonnx_trunc", "qonnx_threshold", "qonnx_matmul", "qonnx_conv",
             "qonnx_add", "qonnx_mul", "qonnx_relu", "qonnx_sign", "qonnx_maxpool", "qonnx_avgpool",
             "qonnx_rescale", "qonnx_move", "qonnx_dequantize")


def _no_trace() -> dict:
    return {"overflows": 0, "adds": 0, "clipped": 0, "acc": None}


def _centred(x, zp) -> np.ndarray:
    return np.asarray(x).astype(np.int64) - np.int64(zp)


def _out(graph, node, values, i: int = 0) -> np.ndarray:
    spec = graph.tensors[node.outputs[i]]
    v = np.asarray(values)
    if v.dtype == object:
        v = v.astype(np.int64)
    return v.astype(spec.dtype)


def _scale(graph, name) -> ExactScale:
    return ExactScale.from_json(graph.meta["qonnx"]["scales"][name])


def _zp(graph, name) -> int:
    return int(graph.meta["qonnx"]["scales"][name].get("zp", 0))


def _real_scale(graph, name) -> np.ndarray:
    s = _scale(graph, name).float64()
    return s[None] if s.ndim else s


def _const_real(graph, name, codes):
    return np.asarray(codes, np.float64) * _scale(graph, name).float64()


_NP_ROUND = {
    "ROUND": np.round, "CEIL": np.ceil, "FLOOR": np.floor, "DOWN": np.fix,
    "UP": lambda x: np.sign(x) * np.ceil(np.abs(x)),
    "HALF_UP": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "HALF_DOWN": lambda x: np.sign(x) * np.ceil(np.abs(x) - 0.5),
}


# ----------------------------------------------------------------------------------------- quantizers
def _quant_run(graph, node, ins, dp, trace):
    """Quant / IntQuant: :math:`q = \\mathrm{round}(\\mathrm{clamp}(y, q_{lo}, q_{hi}))` with :math:`y = x/s + z`,
    equal to :math:`\\mathrm{clamp}(\\mathrm{round}(y), q_{lo}, q_{hi})` for integer bounds and monotone roundings.
    The trace's ``clipped`` counts the outputs whose rounded value :math:`\\mathrm{round}(y)` lies outside
    :math:`[q_{lo}, q_{hi}]` (the report's definition): the codes are computed within
    :math:`[q_{lo} - 1, q_{hi} + 1]`, where exactly those land on the two outer codes, then clamped."""
    a = node.attrs
    lo, hi, mode = int(a["lo"]), int(a["hi"]), a["rounding_mode"]
    bipolar = bool(a.get("bipolar"))
    if a.get("float_in"):
        x = np.asarray(ins[0], np.float32)
        if bipolar:
            q = np.where(A.quantize_float(x, _arr(a["scale"], np.float32), _arr(a["zp"]), -(1 << 32), 1 << 32,
                                          "FLOOR") >= 0, 1, -1)
        else:
            q = A.quantize_float(x, _arr(a["scale"], np.float32), _arr(a["zp"]), lo - 1, hi + 1, mode)
    else:
        v = _centred(ins[0], a["x_zp"])
        num, den, zp = _arr(a["num"]), _arr(a["den"]), _arr(a["zp"])
        if bipolar:
            q = np.where(v * num + zp * den >= 0, 1, -1)
        else:
            q = A.quantize_codes(v, num, den, zp, lo - 1, hi + 1, mode)
    info = _no_trace()
    if not bipolar:
        outside = (q < lo) | (q > hi)
        info["clipped"] = int(np.count_nonzero(outside))
        q = np.where(outside, np.where(q < lo, lo, hi), q)
    return [_out(graph, node, q)], info


def _quant_float(graph, node, ins):
    a = node.attrs
    s, z = _real_scale(graph, node.outputs[0]), _arr(a["zp"]).astype(np.float64)
    y = ins[0] / s + z
    if a.get("bipolar"):
        q = np.where(y >= 0, 1.0, -1.0)
    else:
        q = np.clip(_NP_ROUND[a["rounding_mode"]](y), int(a["lo"]), int(a["hi"]))
    return [(q - z) * s]


def _bipolar_run(graph, node, ins, dp, trace):
    x = ins[0] if node.attrs.get("float_in") else _centred(ins[0], node.attrs["x_zp"])
    return [_out(graph, node, A.bipolar(x))], _no_trace()


def _bipolar_float(graph, node, ins):
    return [np.where(ins[0] >= 0, 1.0, -1.0) * _real_scale(graph, node.outputs[0])]


def _trunc_run(graph, node, ins, dp, trace):
    """Trunc (:func:`~fxpsim.datapath.qonnx.arithmetic.trunc_codes`); with v2's ``bounds`` the trace's
    ``clipped`` counts the rounded codes outside them (clamped)."""
    a = node.attrs
    q = A.trunc_codes(_centred(ins[0], a["x_zp"]), _arr(a["num"]), _arr(a["den"]), _arr(a["zp"]),
                      int(a["shift"]), a["rounding_mode"])
    info = _no_trace()
    if a.get("bounds") is not None:
        lo, hi = int(a["bounds"][0]), int(a["bounds"][1])
        info["clipped"] = int(np.count_nonzero((q < lo) | (q > hi)))
        q = np.clip(q, lo, hi)
    return [_out(graph, node, q)], info


def _trunc_float(graph, node, ins):
    a = node.attrs
    s_in = _real_scale(graph, node.inputs[0])
    num, den = _arr(a["num"]).astype(np.float64), _arr(a["den"]).astype(np.float64)
    y0 = np.round(ins[0] / s_in * num / den + _arr(a["zp"]).astype(np.float64))
    y = y0 / 2.0 ** int(a["shift"])
    if a.get("bounds") is not None:
        y = np.clip(y, *a["bounds"])
    q = _NP_ROUND[a["rounding_mode"]](y)
    # the output's zero point: Trunc v1 keeps z, v2 rescales it to z / 2^shift (qonnx's output_zeropt)
    return [(q - _zp(graph, node.outputs[0])) * _real_scale(graph, node.outputs[0])]


def _threshold_run(graph, node, ins, dp, trace):
    a = node.attrs
    t = np.asarray(ins[1])
    if a.get("float_in"):
        x, t = np.asarray(ins[0], np.float32), t.astype(np.int32).view(np.float32)
    else:
        x = np.asarray(ins[0]).astype(np.int64)
    return [_out(graph, node, A.threshold_counts(x, t, int(a["channel_axis"]) + 1))], _no_trace()


def _threshold_float(graph, node, ins):
    a = node.attrs
    t = np.asarray(graph.tensors[node.inputs[1]].data)
    if a.get("float_in"):
        t = t.astype(np.int32).view(np.float32).astype(np.float64)
    else:
        s = _scale(graph, node.inputs[0]).float64().ravel()[0]
        t = (t.astype(np.float64) - a["x_zp"]) * s
    n = A.threshold_counts(ins[0], t, int(a["channel_axis"]) + 1)
    return [(n - _zp(graph, node.outputs[0])) * _real_scale(graph, node.outputs[0])]


# ----------------------------------------------------------------------------------------- MACs
def _narrow(a: np.ndarray) -> np.ndarray:
    big = max(abs(int(a.min(initial=0))), abs(int(a.max(initial=0))))
    return a.astype(np.int16 if big < 1 << 15 else np.int32 if big < 1 << 31 else np.int64)


def _matmul_run(graph, node, ins, dp, trace):
    x = _narrow(_centred(ins[0], node.attrs["x_zp"]))
    w = _narrow(np.asarray(ins[1]).astype(np.int64))
    res = _acc.matmul(x, w, **_acc_setup(graph, node, dp))
    info = {"overflows": int(res.overflows), "adds": int(res.raw.size) * w.shape[0], "clipped": 0, "acc": None}
    return [_out(graph, node, res.raw)], info


def _matmul_float(graph, node, ins):
    return [ins[0] @ _const_real(graph, node.inputs[1], ins[1])]


def _conv_run(graph, node, ins, dp, trace):
    pads, strides, dils, group = _conv_geometry(node)
    x = _narrow(np.ascontiguousarray(np.transpose(_centred(ins[0], node.attrs["x_zp"]), (0, 2, 3, 1))))
    w = _narrow(np.ascontiguousarray(np.transpose(np.asarray(ins[1]).astype(np.int64), (2, 3, 1, 0))))
    res = _acc.conv2d(x, w, stride=strides, padding=pads, dilation=dils, groups=group, **_acc_setup(graph, node, dp))
    out = np.transpose(res.raw, (0, 3, 1, 2))
    k = int(np.prod(ins[1].shape[1:]))
    return [_out(graph, node, out)], {"overflows": int(res.overflows), "adds": int(out.size) * k, "clipped": 0,
                                      "acc": None}


def _conv_float(graph, node, ins):
    pads, strides, dils, group = _conv_geometry(node)
    x = np.pad(ins[0], ((0, 0), (0, 0), pads[0], pads[1]))
    w = _const_real(graph, node.inputs[1], ins[1])
    o, cg, kh, kw = w.shape
    n, c, h, wd = x.shape
    oh = (h - dils[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dils[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dils[0]:i * dils[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dils[1]:j * dils[1] + strides[1] * (ow - 1) + 1:strides[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return [out]


def _mac_count(graph, node) -> int:
    w = graph.tensors[node.inputs[1]]
    out = graph.tensors[node.outputs[0]]
    k = w.shape[0] if node.op == "qonnx_matmul" else int(np.prod(w.shape[1:]))
    return int(np.prod(out.shape)) * k


def _mac_bound(graph, node) -> int:
    x = graph.tensors[node.inputs[0]]
    lo, hi = x.code_range
    z = int(node.attrs["x_zp"])
    big = max(abs(lo - z), abs(hi - z))
    w = np.abs(np.asarray(graph.tensors[node.inputs[1]].data).astype(object))
    per_out = w.sum(axis=0) if node.op == "qonnx_matmul" else w.reshape(w.shape[0], -1).sum(axis=1)
    return int(max(per_out.ravel(), default=0)) * big


# ----------------------------------------------------------------------------------------- elementwise
def _b(graph, node, ins):
    b = np.asarray(ins[1])
    return b[None] if graph.tensors[node.inputs[1]].is_constant else b


def _add_run(graph, node, ins, dp, trace):
    a = node.attrs
    x = _centred(ins[0], a["a_zp"])
    y = _b(graph, node, ins).astype(np.int64) - np.int64(a["b_zp"])
    ka, kb = _arr(a["ka"]), _arr(a["kb"])
    if max(int(np.abs(x).max(initial=0)) * int(np.abs(ka).max()), int(np.abs(y).max(initial=0)) * int(np.abs(kb).max())) >= 1 << 61:
        x, y, ka, kb = (np.asarray(v).astype(object) for v in (x, y, ka, kb))
    return [_out(graph, node, x * ka + y * kb)], {**_no_trace(), "adds": int(np.size(x))}


def _add_float(graph, node, ins):
    b = ins[1]
    if graph.tensors[node.inputs[1]].is_constant:
        b = _const_real(graph, node.inputs[1], b)[None]
    return [ins[0] + b * (-1.0 if node.attrs.get("subtract") else 1.0)]


def _mul_run(graph, node, ins, dp, trace):
    a = node.attrs
    x = _centred(ins[0], a["a_zp"])
    y = _b(graph, node, ins).astype(np.int64) - np.int64(a["b_zp"])
    if int(np.abs(x).max(initial=0)) * int(np.abs(y).max(initial=0)) >= 1 << 62:
        x, y = x.astype(object), y.astype(object)
    return [_out(graph, node, x * y)], _no_trace()


def _mul_float(graph, node, ins):
    b = ins[1]
    if graph.tensors[node.inputs[1]].is_constant:
        b = _const_real(graph, node.inputs[1], b)[None]
    return [ins[0] * b]


def _relu_run(graph, node, ins, dp, trace):
    return [_out(graph, node, np.maximum(_centred(ins[0], node.attrs["x_zp"]), 0))], _no_trace()


def _sign_run(graph, node, ins, dp, trace):
    return [_out(graph, node, np.sign(_centred(ins[0], node.attrs["x_zp"])))], _no_trace()


def _windows(x, node, fill):
    a = node.attrs
    kh, kw = a["kernel"]
    sh, sw = a["strides"]
    t, l, b, r = a["pads"]
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return win[:, :, ::sh, ::sw]


def _maxpool_run(graph, node, ins, dp, trace):
    lo = graph.tensors[node.inputs[0]].code_range[0]
    return [_out(graph, node, _windows(np.asarray(ins[0]).astype(np.int64), node, lo).max(axis=(4, 5)))], _no_trace()


def _maxpool_float(graph, node, ins):
    return [_windows(ins[0], node, -np.inf).max(axis=(4, 5))]


def _avgpool_run(graph, node, ins, dp, trace):
    win = _windows(_centred(ins[0], node.attrs["x_zp"]), node, 0)
    return [_out(graph, node, win.sum(axis=(4, 5)))], {**_no_trace(), "adds": int(win.size)}


def _avgpool_float(graph, node, ins):
    kh, kw = node.attrs["kernel"]
    return [_windows(ins[0], node, 0.0).sum(axis=(4, 5)) / (kh * kw)]


def _move(graph, node, x):
    a = node.attrs
    if a["kind"] == "reshape":
        return np.asarray(x).reshape((len(x),) + graph.tensors[node.outputs[0]].shape)
    return np.transpose(x, [0] + [int(p) + 1 for p in a["perm"]])


def _move_run(graph, node, ins, dp, trace):
    return [_move(graph, node, ins[0])], _no_trace()


def _move_float(graph, node, ins):
    return [_move(graph, node, ins[0])]


def _dequantize_run(graph, node, ins, dp, trace):
    a = node.attrs
    v = np.asarray(ins[0]).astype(object) - int(a["zp"])
    m = _arr(np.asarray(a["m"], dtype=object))
    e, d = int(a["e"]), int(a["d"])
    num = v * m * (1 << max(e, 0))
    return [A.to_float32(num, d << max(-e, 0))], _no_trace()


def _rescale_run(graph, node, ins, dp, trace):
    return [ins[0]], _no_trace()


def _rescale_float(graph, node, ins):
    return [ins[0] / _real_scale(graph, node.inputs[0]) * _real_scale(graph, node.outputs[0])]


def _identity_float(graph, node, ins):
    return [ins[0]]


def _relu_float(graph, node, ins):
    return [np.maximum(ins[0], 0.0)]


def _sign_float(graph, node, ins):
    return [np.sign(ins[0]) * _real_scale(graph, node.outputs[0])]


register_op(Op("qonnx_quant", _quant_run, _quant_float))
register_op(Op("qonnx_bipolar", _bipolar_run, _bipolar_float))
register_op(Op("qonnx_trunc", _trunc_run, _trunc_float))
register_op(Op("qonnx_threshold", _threshold_run, _threshold_float))
register_op(Op("qonnx_matmul", _matmul_run, _matmul_float, macs=_mac_count, worst_case_sum=_mac_bound))
register_op(Op("qonnx_conv", _conv_run, _conv_float, macs=_mac_count, worst_case_sum=_mac_bound))
register_op(Op("qonnx_add", _add_run, _add_float))
register_op(Op("qonnx_mul", _mul_run, _mul_float))
register_op(Op("qonnx_relu", _relu_run, _relu_float))
register_op(Op("qonnx_sign", _sign_run, _sign_float))
register_op(Op("qonnx_maxpool", _maxpool_run, _maxpool_float))
register_op(Op("qonnx_avgpool", _avgpool_run, _avgpool_float))
register_op(Op("qonnx_rescale", _rescale_run, _rescale_float))
register_op(Op("qonnx_move", _move_run, _move_float))
register_op(Op("qonnx_dequantize", _dequantize_run, _identity_float))
from . import steps  # noqa: E402,F401  (the compiled-plan steps of these ops)
