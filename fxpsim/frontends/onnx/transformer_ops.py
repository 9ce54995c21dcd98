r"""The graph ops of transformer blocks imported from ONNX, registered when :mod:`fxpsim.frontends.onnx.ops` is
imported:

``onnx_matmul_ab``
    a MatMul of two run-time operands (attention's :math:`QK^T` and :math:`PV`): QLinearMatMul, or the
    DequantizeLinear -> MatMul -> QuantizeLinear group onnxruntime fuses into it. Inputs a ``[..., M, K]`` and
    b ``[..., K, N]`` (per-sample leading axes equal), both integer codes with per-tensor parameters; output codes.

    .. math:: \mathrm{acc}_{ij} = \sum_k (a_{ik} - z_a)(b_{kj} - z_b), \qquad
              y = \mathrm{clamp}\big(\mathrm{rint}(\mathrm{fl}(\mathrm{acc}) \cdot m) + z_y\big), \quad
              m = \mathrm{fl}(\mathrm{fl}(s_a s_b) / s_y)

    on onnxruntime's datapath (its QLinearMatMul: an exact int32 sum, :func:`~fxpsim.datapath.onnxruntime.mlas.
    requantize_output`); on any other datapath the sum goes through the datapath's accumulator
    (:func:`fxpsim.datapath.accumulate.matmul`: width, overflow mode, order) and its requantization scheme
    rounds :math:`\mathrm{acc} \cdot s_a s_b / s_y`. ``ort_kernel="float"`` (a group onnxruntime leaves unfused:
    operand types differ after its int8 -> uint8 rewrite) follows, on onnxruntime's datapath, its float32 path:
    DequantizeLinear of both, MLAS SGEMM per matrix (:func:`~fxpsim.datapath.onnxruntime.mlas.mlas_gemm`),
    QuantizeLinear. ``u8s8_pairs="saturate16"`` (onnxruntime's uint8 x int8 kernel on x86-64 with AVX2 and no
    VNNI, the importer's ``cpu="avx2"``): the sum of each pair of adjacent raw products along K saturates to int16
    (:mod:`fxpsim.datapath.onnxruntime.x86_pairs`), on the raw uint8 codes of a (int8 codes + ``a_shift`` = 128
    where onnxruntime converted them) and the int8 codes of b; only on onnxruntime's datapath.

``onnx_layer_norm``
    DequantizeLinear -> float32 LayerNormalization (:mod:`fxpsim.datapath.onnxruntime.layer_norm`) ->
    QuantizeLinear, or a float32 output when the normalized tensor is a graph output (QOperator models end so).
    Attributes ``axis`` (first normalized per-sample axis), ``epsilon``, ``gamma``, ``beta`` (float32 values as
    lists; ``beta`` may be None), ``kernel`` (``"scalar"`` for rows of fewer than 8 values, ``"avx2"``: onnxruntime's
    8-lane kernel of x86-64 AVX2 CPUs). The same float32 kernel on every datapath: no accumulator of the datapath
    takes part.

``in_perm`` (one list per input, or None) / ``out_perm``: graph layout -> ONNX layout of each input and ONNX
layout -> graph layout of the output, for per-sample rank-3 tensors, which the graph keeps channels last.
"""
from __future__ import annotations

import numpy as np

from ...datapath import accumulate as _acc
from ...datapath.onnxruntime import layer_norm as LN
from ...datapath.onnxruntime import mlas as K
from ...datapath.onnxruntime import x86_pairs as _x86
from ...graph.mac_ops import refuse_unmodelled_knobs
from ...graph.ops import Op
from .op_support import (_acc_format, _name, _no_trace, _overflow_at, _quantized_io, _requant_real, _scale, _spec,
                         _zp, is_native, is_onnxruntime_datapath, register_op)

F32 = np.float32


def _perm_axes(perm):
    return (0,) + tuple(int(p) + 1 for p in perm)


def _to_onnx(x, perm):
    return np.transpose(x, _perm_axes(perm)) if perm else x


def _to_graph(y, perm):
    return np.ascontiguousarray(np.transpose(y, _perm_axes(perm))) if perm else y


def _in_perms(node):
    perms = node.attrs.get("in_perm") or [None] * len(node.inputs)
    return [p or None for p in perms]


# ---------------------------------------------------------------------------------------- onnx_matmul_ab
def _ab_onnx(node, ins):
    pa, pb = _in_perms(node)
    return _to_onnx(np.asarray(ins[0]), pa), _to_onnx(np.asarray(ins[1]), pb)


def _ab_float_kernel(graph, node, a, b):
    """onnxruntime's unfused group: DequantizeLinear, float32 MatMul (MLAS SGEMM per matrix), QuantizeLinear."""
    sa, sb, sy = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    af = K.dequantize_linear(a, _scale(sa), _zp(sa))
    bf = K.dequantize_linear(b, _scale(sb), _zp(sb))
    lead = af.shape[:-2]
    a3 = af.reshape((-1,) + af.shape[-2:])
    b3 = bf.reshape((-1,) + bf.shape[-2:])
    y = np.stack([K.mlas_gemm(a3[i], b3[i]) for i in range(a3.shape[0])]).reshape(lead + (af.shape[-2], bf.shape[-1]))
    return K.quantize_linear(y, _scale(sy), _zp(sy), sy.dtype)


def _ab_run(graph, node, ins, dp, trace):
    sa, sb, sy = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    a, b = _ab_onnx(node, ins)
    if node.attrs.get("ort_kernel", "qlinear") == "float" and is_onnxruntime_datapath(dp):
        return [_to_graph(_ab_float_kernel(graph, node, a, b), node.attrs.get("out_perm"))], \
            ({**_no_trace(), "adds": 0} if trace else None)
    refuse_unmodelled_knobs(node, dp, "onnxruntime semantics")
    ao = (a.astype(np.int64) - _zp(sa)).astype(np.int16)
    bo = (b.astype(np.int64) - _zp(sb)).astype(np.int16)
    res = _acc.matmul(ao, bo, acc=_acc_format(dp), overflow=_name(dp.accumulator_overflow), order=dp.accumulator_order,
                      overflow_at=_overflow_at(dp))
    acc = np.asarray(res.raw, np.int64)
    if node.attrs.get("u8s8_pairs", "exact") == "saturate16":
        acc = _saturated_pairs(node, dp, a, b, acc)
    lo, hi = sy.code_range
    if is_native(dp):
        m = K.requant_multiplier(_scale(sa), _scale(sb), _scale(sy))
        out = K.requantize_output(acc, m, _zp(sy), sy.dtype)
        pre = None
    else:
        real = float(F32(_scale(sa)) * F32(_scale(sb))) / float(F32(_scale(sy)))
        pre = _requant_real(acc, real, dp) + _zp(sy)
        out = np.clip(pre, lo, hi).astype(sy.dtype)
    info = None
    if trace:
        clipped = 0 if pre is None else int(np.count_nonzero((pre < lo) | (pre > hi)))
        info = {"overflows": int(res.overflows), "acc": acc, "bias_clipped": 0, "clipped": clipped,
                "adds": int(acc.size) * int(a.shape[-1])}
    return [_to_graph(out, node.attrs.get("out_perm"))], info


def _saturated_pairs(node, dp, a, b, acc):
    """The accumulator of onnxruntime's AVX2 uint8 x int8 kernel: the exact sum plus the excess of the
    int16-saturated pair sums of each matrix, wrapped to int32."""
    if not is_onnxruntime_datapath(dp):
        raise ValueError(f"node {node.name!r} (onnx_matmul_ab) reproduces onnxruntime's x86 AVX2 uint8 x int8 kernel "
                         "(u8s8_pairs='saturate16'), which exists only on onnxruntime's datapath; import the model "
                         "with cpu='exact' to run it on other datapaths")
    ar = a.astype(np.int32) + int(node.attrs.get("a_shift", 0))
    excess = np.zeros(acc.shape, np.int64)
    for idx in np.ndindex(*acc.shape[:-2]):
        excess[idx] = _x86.matmul_excess(ar[idx], np.ascontiguousarray(b[idx].T))
    return K.wrap_int32(acc + excess)


def _ab_float(graph, node, ins):
    a, b = _ab_onnx(node, ins)
    return [_to_graph(np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)), node.attrs.get("out_perm"))]


def _onnx_shape(spec, perm):
    return tuple(spec.shape[int(p)] for p in perm) if perm else tuple(spec.shape)


def _check_perms(node, specs):
    perms = list(_in_perms(node)) + [node.attrs.get("out_perm")]
    for p, s in zip(perms, specs):
        if p and sorted(int(a) for a in p) != list(range(len(s.shape))):
            raise ValueError(f"node {node.name!r} ({node.op}): permutation {p!r} does not fit a tensor of shape "
                             f"{list(s.shape)}")


def _ab_check(graph, node):
    if len(node.inputs) != 2 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_matmul_ab): needs inputs a, b and one output")
    _quantized_io(graph, node, node.inputs + node.outputs)
    sa, sb, sy = (_spec(graph, t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    _check_perms(node, (sa, sb, sy))
    if any(s.bits > 8 for s in (sa, sb)):
        raise ValueError(f"node {node.name!r} (onnx_matmul_ab): 8-bit operands only")
    pa, pb = _in_perms(node)
    a, b = _onnx_shape(sa, pa), _onnx_shape(sb, pb)
    op = node.attrs.get("out_perm")
    y = tuple(sy.shape[int(p)] for p in np.argsort(op)) if op else tuple(sy.shape)
    if len(a) < 2 or len(b) != len(a) or a[:-2] != b[:-2] or a[-1] != b[-2] or y != a[:-1] + (b[-1],):
        raise ValueError(f"node {node.name!r} (onnx_matmul_ab): shapes {list(a)} x {list(b)} -> {list(y)} are not a "
                         "matrix product with equal leading axes")
    if node.attrs.get("ort_kernel", "qlinear") not in ("qlinear", "float"):
        raise ValueError(f"node {node.name!r}: ort_kernel must be 'qlinear' or 'float'")
    pairs = node.attrs.get("u8s8_pairs", "exact")
    if pairs not in _x86.U8S8_PAIRS:
        raise ValueError(f"node {node.name!r}: u8s8_pairs must be one of {_x86.U8S8_PAIRS}, got {pairs!r}")
    a_u8 = not sa.signed or int(node.attrs.get("a_shift", 0)) == 128
    if pairs == "saturate16" and not (a_u8 and sb.signed and node.attrs.get("ort_kernel", "qlinear") == "qlinear"):
        raise ValueError(f"node {node.name!r}: u8s8_pairs='saturate16' applies to onnxruntime's integer kernel with "
                         "uint8 a (or int8 a shifted by a_shift=128) and int8 b")


def _ab_macs(graph, node):
    sa = _spec(graph, node.inputs[0])
    pa = _in_perms(node)[0]
    return int(np.prod(_spec(graph, node.outputs[0]).shape)) * int(_onnx_shape(sa, pa)[-1])


# ---------------------------------------------------------------------------------------- onnx_layer_norm
def _ln_rows(node, x):
    xo = _to_onnx(x, _in_perms(node)[0])
    k = int(node.attrs["axis"]) + 1
    return xo, xo.reshape(int(np.prod(xo.shape[:k])), -1)


def _ln_params(node):
    beta = node.attrs.get("beta")
    return np.asarray(node.attrs["gamma"], F32), None if beta is None else np.asarray(beta, F32)


def _ln_run(graph, node, ins, dp, trace):
    sx, sy = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    xf = K.dequantize_linear(np.asarray(ins[0]), _scale(sx), _zp(sx))
    xo, rows = _ln_rows(node, xf)
    gamma, beta = _ln_params(node)
    y = LN.layer_norm_rows(rows, gamma, beta, F32(node.attrs["epsilon"]), node.attrs.get("kernel")).reshape(xo.shape)
    if not sy.is_float:
        y = K.quantize_linear(y, _scale(sy), _zp(sy), sy.dtype)
    return [_to_graph(y, node.attrs.get("out_perm"))], _no_trace()


def _ln_float(graph, node, ins):
    xo, rows = _ln_rows(node, np.asarray(ins[0], np.float64))
    gamma, beta = _ln_params(node)
    mu = rows.mean(axis=1, keepdims=True)
    var = ((rows - mu) ** 2).mean(axis=1, keepdims=True)
    y = (rows - mu) / np.sqrt(var + float(F32(node.attrs["epsilon"]))) * gamma.astype(np.float64)
    if beta is not None:
        y = y + beta.astype(np.float64)
    return [_to_graph(y.reshape(xo.shape), node.attrs.get("out_perm"))]


def _ln_check(graph, node):
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        raise ValueError(f"node {node.name!r} (onnx_layer_norm): needs one input and one output")
    _quantized_io(graph, node, node.inputs)
    sx, sy = _spec(graph, node.inputs[0]), _spec(graph, node.outputs[0])
    if not sy.is_float:
        _quantized_io(graph, node, node.outputs)
    _check_perms(node, (sx, sy))
    xo = _onnx_shape(sx, _in_perms(node)[0])
    k = node.attrs.get("axis")
    if not isinstance(k, int) or not 0 <= k < len(xo):
        raise ValueError(f"node {node.name!r} (onnx_layer_norm): axis {k!r} is not a per-sample axis of {list(xo)}")
    n = int(np.prod(xo[k:]))
    gamma, beta = _ln_params(node)
    if gamma.size != n or (beta is not None and beta.size != n):
        raise ValueError(f"node {node.name!r} (onnx_layer_norm): gamma / beta of {gamma.size} / "
                         f"{None if beta is None else beta.size} values for rows of {n}")
    kernel = LN.layer_norm_kernel(n)
    if node.attrs.get("kernel", kernel) != kernel:
        raise ValueError(f"node {node.name!r} (onnx_layer_norm): rows of {n} values with kernel "
                         f"{node.attrs.get('kernel')!r}; onnxruntime's kernel for them is {kernel!r}")
    if tuple(sy.shape) != tuple(sx.shape):
        raise ValueError(f"node {node.name!r} (onnx_layer_norm): output {list(sy.shape)} for input {list(sx.shape)}")


register_op(Op("onnx_matmul_ab", _ab_run, _ab_float, _ab_check, _ab_macs))
register_op(Op("onnx_layer_norm", _ln_run, _ln_float, _ln_check))
