"""Compiled-plan steps of the QONNX ops (``Op.prepare``, :mod:`fxpsim.graph.plan`): every attribute parsed, every
constant cast and every width bound proven once per plan, so that a run is a few numpy passes per node.

A step computes the codes of :mod:`.ops`' ``run`` bit for bit, on a narrower proof:

* ``qonnx_quant`` from float32 (a graph input, already checked finite): :func:`~fxpsim.datapath.qonnx.
  arithmetic.quantize_float`'s float64 path when :math:`\\max(|q_{lo}|, |q_{hi}|) + |z| \\le 2^{23}`;
  from codes (and ``qonnx_trunc``'s first rounding): :math:`\\mathrm{round}((v n + z d) / d)` in int64 when
  :math:`\\max|v|\\,\\max|n| + \\max|z|\\,\\max d < 2^{61}` over the input's code range, in float64 (numpy's
  ``rint``/``floor``/``ceil``/``trunc`` on an exact value) when that is below :math:`2^{53}` and ``d`` a power of
  two; from float32 with zero point 0 in those four modes: numpy's rounding of :math:`\\mathrm{fl}_{64}(x/s)`
  (exact, by the argument of :func:`~fxpsim.datapath.qonnx.arithmetic._quantize_float64`);
* ``qonnx_matmul`` / ``qonnx_conv`` on the graph's own datapath (``requantization = "native"``): the exact sum
  :math:`\\sum_k (x_k - z) w_k` by float64 BLAS when the node's worst case :math:`B = \\max|x - z| \\max_j
  \\sum_k |w_{kj}|` is below :math:`2^{53}` (every partial sum, in any order, is then an exact float64 integer)
  and within the accumulator (no add can saturate, so the sequential saturating sum is the exact sum);
* ``qonnx_avgpool`` with non-overlapping windows (kernel = strides, no padding): a reshape and a sum;
* ``qonnx_add``: :math:`(a - z_a) k_a + (b - z_b) k_b` in int64 when the code ranges bound it below
  :math:`2^{61}` (a constant ``b`` term computed once); ``qonnx_relu``: int64;
* ``qonnx_dequantize``: :math:`n = (q - z) m` in int64 below :math:`2^{53}`, then
  :func:`~fxpsim.datapath.qonnx.arithmetic.to_float32` of :math:`n\\,2^e/d`; for a power-of-two ``d`` the
  float64 :math:`(q - z)\\,m\\,2^e/d` (exact) rounded once to float32.

Anything else (another datapath, wider ranges, ``trace``) runs the op's ``run``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...datapath.qonnx import arithmetic as A
from ...graph.plan import untraced_step
from ...graph.registry import OPS
from .attrs import acc_setup, attr_array, conv_geometry

__all__ = ["PREPARED_OPS"]

_LIM61, _LIM53 = 1 << 61, 1 << 53


def _absmax(a) -> int:
    return int(np.abs(np.asarray(a)).max(initial=0))


def _centred_bound(graph, name, zp) -> int:
    lo, hi = graph.tensors[name].code_range
    return max(abs(lo - int(zp)), abs(hi - int(zp)))


def _int64(value):
    a = attr_array(value)
    return a if a.dtype == np.int64 else None


def _dtype(graph, node):
    return graph.tensors[node.outputs[0]].dtype


def _rounder(graph, node, a, mode: str, shift: int = 0):
    """``v -> round(round((v n + z d) / d) / 2^shift)`` (the inner rounding in ``mode`` when ``shift`` is 0,
    half to even otherwise, the outer in ``mode``) as int64 or exact float64 integers, or ``None`` when the
    input's range may leave int64."""
    num, den, zp = _int64(a["num"]), _int64(a["den"]), _int64(a["zp"])
    if num is None or den is None or zp is None or not 0 <= shift < 62 or np.any(den <= 0):
        return None
    v_max = _centred_bound(graph, node.inputs[0], a["x_zp"])
    top = v_max * _absmax(num) + _absmax(zp) * _absmax(den)
    if top + 2 * _absmax(den) >= _LIM61:
        return None
    inner = "ROUND" if shift else mode
    zd, x_zp, pow2 = zp * den, np.int64(a["x_zp"]), bool(np.all(den & (den - 1) == 0))
    if pow2 and top < _LIM53 and inner in A.FLOAT64_ROUNDING and mode in A.FLOAT64_ROUNDING:
        # t = (v n + z d) / d is an exact float64 (|v n + z d| < 2^53, d a power of two): every mode is exact
        num_f, zd_f, inv = num.astype(np.float64), zd.astype(np.float64), 1.0 / den.astype(np.float64)
        first, second, step = A.FLOAT64_ROUNDING[inner], A.FLOAT64_ROUNDING[mode], 2.0 ** -shift

        def rounder(x):
            t = first(((x.astype(np.float64) - float(x_zp)) * num_f + zd_f) * inv)
            return second(t * step) if shift else t
        return rounder

    def rounder(x):
        y = (x.astype(np.int64) - x_zp) * num + zp if np.all(den == 1) else \
            A._round_div_any((x.astype(np.int64) - x_zp) * num + zd, den, inner)
        return A._round_div_any(y, np.int64(1) << shift, mode) if shift else y
    return rounder


def _quant_prepare(graph, node, dp, in_shapes):
    a = node.attrs
    if a.get("bipolar"):
        return None
    lo, hi, mode, dtype = int(a["lo"]), int(a["hi"]), a["rounding_mode"], _dtype(graph, node)
    if a.get("float_in"):
        zp = _int64(a["zp"])
        if node.inputs[0] not in graph.inputs or zp is None or max(abs(lo), abs(hi)) + _absmax(zp) > A._FAST_BOUND:
            return None
        s = np.asarray(A._float32(attr_array(a["scale"], np.float32), "the scale"))
        if np.any(s <= 0):
            return None
        if mode in A.FLOAT64_ROUNDING and not np.any(zp):
            s64, rnd = s.astype(np.float64), A.FLOAT64_ROUNDING[mode]
            return untraced_step(graph, node, dp, lambda ins: np.clip(rnd(ins[0].astype(np.float64) / s64), lo, hi)
                                  .astype(dtype))
        return untraced_step(graph, node, dp, lambda ins: A._quantize_float64(ins[0], s, zp, lo, hi, mode)
                              .astype(dtype))
    rounder = _rounder(graph, node, a, mode)
    if rounder is None:
        return None
    return untraced_step(graph, node, dp, lambda ins: np.clip(rounder(ins[0]), lo, hi).astype(dtype))


def _trunc_prepare(graph, node, dp, in_shapes):
    a = node.attrs
    shift, bounds, dtype = int(a["shift"]), a.get("bounds"), _dtype(graph, node)
    if shift == 0:
        rounder = _rounder(graph, node, a, "ROUND")          # Trunc rounds half to even, then by its mode
    else:
        rounder = _rounder(graph, node, a, a["rounding_mode"], shift)
    if rounder is None:
        return None
    if bounds is None:
        return untraced_step(graph, node, dp, lambda ins: rounder(ins[0]).astype(np.int64).astype(dtype))
    lo, hi = int(bounds[0]), int(bounds[1])
    return untraced_step(graph, node, dp, lambda ins: np.clip(rounder(ins[0]), lo, hi).astype(np.int64)
                          .astype(dtype))


def _prefix_sums_fit(graph, node, acc_bits: int) -> bool:
    r"""Whether every running sum of every output provably lies in the signed ``acc_bits`` range, from the signs of
    the weights: with :math:`x - z_x \in [a, b]`, term k of output j lies in
    :math:`[m_{kj}, M_{kj}] = [\min(a w_{kj}, b w_{kj}), \max(a w_{kj}, b w_{kj})]`, so every running sum (a padded
    tap adds 0) lies in :math:`[\sum_k \min(m_{kj}, 0), \sum_k \max(M_{kj}, 0)]` -- tighter than the symmetric
    :math:`\sum_k \max(|a|, |b|) |w_{kj}|` of ``worst_case_sum`` when the input codes are one-signed (an unsigned
    input with zero point 0: QKeras' ``quantized_relu``)."""
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(object)
    lo_x, hi_x = graph.tensors[node.inputs[0]].code_range
    zx = int(node.attrs["x_zp"])
    a, b = int(lo_x) - zx, int(hi_x) - zx
    terms = np.stack([a * w, b * w])
    low, high = np.minimum(terms.min(axis=0), 0), np.maximum(terms.max(axis=0), 0)
    axes = (0,) if node.op == "qonnx_matmul" else tuple(range(1, w.ndim))      # MatMul [K, N]; Conv [O, C, KH, KW]
    lo, hi = int(low.sum(axis=axes).min()), int(high.sum(axis=axes).max())
    return -(1 << (acc_bits - 1)) <= lo and hi <= (1 << (acc_bits - 1)) - 1 and max(-lo, hi) < _LIM53


def _mac_prepare(graph, node, dp, in_shapes):
    if getattr(dp, "requantization", None) != "native" or in_shapes[0] is None:
        return None
    bound = OPS[node.op].worst_case_sum(graph, node)
    acc_bits = acc_setup(graph, node, dp)["acc"].word
    if bound >= _LIM53 or (bound > (1 << (acc_bits - 1)) - 1 and not _prefix_sums_fit(graph, node, acc_bits)):
        return None
    w = np.asarray(graph.tensors[node.inputs[1]].data).astype(np.float64)
    x_zp, dtype = float(node.attrs["x_zp"]), _dtype(graph, node)
    if node.op == "qonnx_matmul":
        def fast(ins):
            return np.matmul(ins[0].astype(np.float64) - x_zp, w).astype(np.int64).astype(dtype)
        return untraced_step(graph, node, dp, fast)
    (pt, pb), (pl, pr) = conv_geometry(node)[0]
    (sh, sw), (dh, dw), group = conv_geometry(node)[1:]
    o, cg, kh, kw = w.shape
    og = o // group
    n, c, h, wd = in_shapes[0]
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    wg = [w[g * og:(g + 1) * og].reshape(og, -1) for g in range(group)]          # [Og, Cg KH KW]
    taps = [(i * dh, j * dw) for i in range(kh) for j in range(kw)]

    def fast(ins):
        x = ins[0]
        xp = np.zeros((len(x), c, h + pt + pb, wd + pl + pr))
        xp[:, :, pt:pt + h, pl:pl + wd] = x
        if x_zp:
            xp[:, :, pt:pt + h, pl:pl + wd] -= x_zp
        cols = np.stack([xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] for i, j in taps], axis=2)
        cols = cols.reshape(len(x), c * kh * kw, oh * ow) if group == 1 else cols   # [N, C KH KW, OH OW]
        if group == 1:
            out = wg[0] @ cols
        else:
            out = np.concatenate([wg[g] @ cols[:, g * cg:(g + 1) * cg].reshape(len(x), -1, oh * ow)
                                  for g in range(group)], axis=1)
        return out.reshape(len(x), o, oh, ow).astype(np.int64).astype(dtype)
    return untraced_step(graph, node, dp, fast)


def _avgpool_prepare(graph, node, dp, in_shapes):
    a = node.attrs
    (kh, kw), (sh, sw), pads = a["kernel"], a["strides"], list(a["pads"])
    if in_shapes[0] is None or any(pads) or (kh, kw) != (sh, sw) or in_shapes[0][2] % kh or in_shapes[0][3] % kw:
        return None
    n, c, h, w = in_shapes[0]
    z, dtype = np.int64(a["x_zp"]), _dtype(graph, node)
    return untraced_step(graph, node, dp, lambda ins: (ins[0].astype(np.int64) - z).reshape(
        len(ins[0]), c, h // kh, kh, w // kw, kw).sum(axis=(3, 5)).astype(dtype))


def _add_prepare(graph, node, dp, in_shapes):
    a = node.attrs
    ka, kb = _int64(a["ka"]), _int64(a["kb"])
    if ka is None or kb is None:
        return None
    bound = (_centred_bound(graph, node.inputs[0], a["a_zp"]) * _absmax(ka)
             + _centred_bound(graph, node.inputs[1], a["b_zp"]) * _absmax(kb))
    if bound >= _LIM61:
        return None
    za, zb, dtype = np.int64(a["a_zp"]), np.int64(a["b_zp"]), _dtype(graph, node)
    b_spec = graph.tensors[node.inputs[1]]
    if b_spec.is_constant:
        ykb = (np.asarray(b_spec.data)[None].astype(np.int64) - zb) * kb
        return untraced_step(graph, node, dp, lambda ins: ((ins[0].astype(np.int64) - za) * ka + ykb).astype(dtype))
    return untraced_step(graph, node, dp, lambda ins: ((ins[0].astype(np.int64) - za) * ka
                                                        + (ins[1].astype(np.int64) - zb) * kb).astype(dtype))


def _relu_prepare(graph, node, dp, in_shapes):
    z, dtype = np.int64(node.attrs["x_zp"]), _dtype(graph, node)
    return untraced_step(graph, node, dp, lambda ins: np.maximum(ins[0].astype(np.int64) - z, 0).astype(dtype))


def _dequantize_prepare(graph, node, dp, in_shapes):
    a = node.attrs
    m = _int64(np.asarray(a["m"], dtype=object))
    if m is None:
        return None
    zp, e, d = int(a["zp"]), int(a["e"]), int(a["d"])
    if _centred_bound(graph, node.inputs[0], zp) * _absmax(m) >= _LIM53 or not 0 < d < _LIM53 or abs(e) > 900:
        return None
    z = np.int64(zp)
    if d & (d - 1) == 0:         # (q - z) m 2^e / d: an exact float64, rounded once to float32
        c = m.astype(np.float64) * (2.0 ** e / d)
        return untraced_step(graph, node, dp, lambda ins: ((ins[0].astype(np.float64) - float(z)) * c)
                              .astype(np.float32))
    return untraced_step(graph, node, dp, lambda ins: A.to_float32((ins[0].astype(np.int64) - z) * m, d, e))


#: The ops given a prepared step here.
PREPARED_OPS = {"qonnx_quant": _quant_prepare, "qonnx_trunc": _trunc_prepare, "qonnx_matmul": _mac_prepare,
                "qonnx_conv": _mac_prepare, "qonnx_add": _add_prepare, "qonnx_relu": _relu_prepare,
                "qonnx_dequantize": _dequantize_prepare,
                "qonnx_avgpool": _avgpool_prepare}

for _name, _prepare in PREPARED_OPS.items():
    OPS[_name] = dataclasses.replace(OPS[_name], prepare=_prepare)
