"""Each LiteRT kernel set's own ``Prepare`` checks, applied where that kernel set applies them.

LiteRT prepares an op once per kernel set, and the kernel sets do not share every check: the reference
SOFTMAX computes a fixed-point input multiplier (``PreprocessSoftmaxScaling``, whose
``QuantizeMultiplierGreaterThanOne`` aborts the process for :math:`\\beta s_{in} 2^{26} \\le 1`); the optimized
builtin kernel and XNNPACK build a float table instead and take any scale. :func:`prepare_problem` says, for one
operator of a parsed model (:func:`fxpsim.frontends.tflite.reader._read_model`) and a kernel set, why that kernel
set refuses it (or why fxpsim does not reproduce what it computes), or ``None``; the importer refuses such an
operator at import and :func:`fxpsim.tflite_coverage` lists it.

=====================  ================================================================  ===========================
operator               check                                                             kernel sets
=====================  ================================================================  ===========================
SOFTMAX (int8/uint8)   :math:`\\min(\\beta s_{in} 2^{26}, 2^{31}-1) > 1` (double)           reference (LiteRT aborts)
HARD_SWISH             output exponent of :math:`\\mathrm{fl}_{32}(s_{in}/128/s_{out}) \\le 0`  all (``HardSwishPrepare``)
CONV_2D, DEPTHWISE,    :math:`\\mathrm{fl}_{32}(s_x s_w)/s_y < 256` (XNNPACK's delegate       xnnpack
FULLY_CONNECTED        refuses larger scales)
TRANSPOSE_CONV         the same where the delegate takes it (LiteRT fails to prepare)     xnnpack
BATCH_MATMUL           the same with a constant right operand of zero point 0 (LiteRT     xnnpack
                       crashes at invoke)
RESIZE_BILINEAR        not both ``align_corners`` and ``half_pixel_centers``              reference, builtin
                       (XNNPACK takes it, as ``align_corners``)
REDUCE_MAX             input and output scale and zero point equal (LiteRT fails the      reference, builtin
                       invoke; XNNPACK copies the codes whatever the output's scale)
SQUARED_DIFFERENCE     :math:`T^2/(2^{14} s_y) < 1`, :math:`T = 2\\max(s_1, s_2)`           all (LiteRT aborts)
                       (``QuantizeMultiplierSmallerThanOneExp``)
RSQRT, PRELU           multiplier shifts in TFLite's :math:`[-31, 30]`                    all
LOG_SOFTMAX            output scale 16/256 and zero point 127                             all
LOG_SOFTMAX            :math:`s_{in} 2^{26} > 1` (as SOFTMAX; LiteRT aborts)                 reference
=====================  ================================================================  ===========================

The HARD_SWISH exponent range of LiteRT's int16 arithmetic is *not* a check of any kernel set: scales whose
reluish or output exponent is below :math:`-15` run in all three (``QuantizeMultiplier`` keeps exponents in
:math:`[-31, 30]`), and :func:`fxpsim.datapath.tflite.quantized_hard_swish`
computes what they compute there (tested live).
"""
from __future__ import annotations

import numpy as np

from ...datapath import tflite as K
from .reader import _const_value

__all__ = ["prepare_problem"]

_MAC_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
_XNNPACK_SCALE_LIMITED = ("TRANSPOSE_CONV", "BATCH_MATMUL")


def _xnnpack_scale_problem(name, ins, outs, opts, tensors) -> str | None:
    """XNNPACK's limit :math:`\\mathrm{fl}_{32}(\\mathrm{fl}_{32}(s_x s_w)/s_y) < 256` on the ops its delegate takes:
    a delegated TRANSPOSE_CONV beyond it fails to prepare ("failed to create XNNPACK runtime"); a BATCH_MATMUL with
    a constant right operand of zero point 0 beyond it crashes the process at invoke (LiteRT 2.3.0, x86-64)."""
    x_i, w_i = (ins[2], ins[1]) if name == "TRANSPOSE_CONV" else (ins[0], ins[1])
    if min(x_i, w_i) < 0 or len(tensors) <= max(x_i, w_i):
        return None
    sx, sw, sy = _scale(tensors[x_i]), _scale(tensors[w_i]), _scale(tensors[outs[0]])
    if sx is None or sw is None or sy is None:
        return None
    w = tensors[w_i]
    if name == "TRANSPOSE_CONV":
        from .transpose_conv_ops import xnnpack_takes_transpose_conv
        shape = tensors[ins[0]]
        value = _const_value(shape)
        out_hw = value.reshape(-1)[1:3] if value is not None and value.size == 4 else (0, 0)
        if len(w["shape"]) != 4 or not xnnpack_takes_transpose_conv(
                shape["raw"] is not None, w["shape"][1:3], (opts.get("stride_h", 1), opts.get("stride_w", 1)),
                int(opts.get("padding", 0)) == 0, out_hw):
            return None                  # LiteRT runs the builtin kernel
        what = "XNNPACK's deconvolution refuses it and LiteRT fails to prepare the model"
    else:
        if w["raw"] is None or np.any(w["zero_point"]):
            return None                  # XNNPACK with a run-time right operand takes it; z_b != 0: the builtin kernel
        what = "LiteRT's XNNPACK BATCH_MATMUL with a constant right operand crashes the process there"
    scale = (np.float32(sx[0]) * sw.astype(np.float32)) / np.float32(sy[0])
    if np.any(scale >= np.float32(256)):
        return (f"a requantization scale s_x s_w / s_y of {float(scale.max()):.4g} >= 256: {what}; kernels='reference' "
                f"or 'builtin' import it")
    return None


def _scale(t: dict):
    s = t.get("scale")
    return None if s is None or s.size < 1 else s


def prepare_problem(op: dict, tensors: list, kernels: str) -> str | None:
    """Why the kernel set ``kernels`` refuses operator ``op`` (a dict of the parsed model) in its Prepare, or
    fxpsim does not reproduce it there; ``None`` when it prepares.

    Parameters
    ----------
    op : dict
        ``{"op", "inputs", "outputs", "options"}`` as :func:`~fxpsim.frontends.tflite.reader._read_model`
        gives it.
    tensors : list of dict
        The subgraph's tensors (float32 ``scale`` arrays, int ``zero_point`` arrays).
    kernels : {"reference", "builtin", "xnnpack"}

    Returns
    -------
    str or None
    """
    name = op["op"]
    ins, outs = op["inputs"], op["outputs"]
    opts = op.get("options") or {}
    if name == "RESIZE_BILINEAR" and kernels != "xnnpack" and opts.get("align_corners") and \
            opts.get("half_pixel_centers"):
        return ("RESIZE_BILINEAR with both align_corners and half_pixel_centers: LiteRT's Prepare refuses it "
                "(only kernels='xnnpack' runs it, as align_corners)")
    if not ins or not outs or ins[0] < 0 or outs[0] < 0:
        return None                      # structural problems are the importer's to name
    if kernels == "xnnpack" and name in _XNNPACK_SCALE_LIMITED:
        return _xnnpack_scale_problem(name, ins, outs, opts, tensors)
    x, y = tensors[ins[0]], tensors[outs[0]]
    sx, sy = _scale(x), _scale(y)
    if sx is None or sy is None:
        return None
    if name == "SOFTMAX" and kernels == "reference":
        beta = float(np.float32(op["options"].get("beta", 1.0)))
        real = K.softmax_reference_scale(beta, float(sx[0]))
        if not real > 1.0:
            return (f"the reference SOFTMAX needs beta * input_scale * 2^26 > 1 (here {real:.4g}: LiteRT's "
                    f"reference Prepare aborts the process in QuantizeMultiplierGreaterThanOne); the optimized "
                    f"kernels (kernels='builtin' or 'xnnpack') run it")
    if name == "HARD_SWISH":
        try:
            K.hard_swish_params(float(sx[0]), int(x["zero_point"][0]), float(sy[0]), int(y["zero_point"][0]),
                                dtype=np.uint8 if x["type"] == 3 else np.int8)
        except (ValueError, TypeError) as exc:
            return str(exc)
    math = _math_problem(name, op, tensors, kernels)
    if math:
        return math
    if name in _MAC_OPS and kernels == "xnnpack" and len(ins) > 1 and ins[1] >= 0:
        sw = _scale(tensors[ins[1]])
        if sw is not None:
            scale = (np.float32(sx[0]) * sw.astype(np.float32)) / np.float32(sy[0])
            if np.any(scale >= np.float32(256)):
                return (f"a requantization scale s_x s_w / s_y of {float(scale.max()):.4g} >= 256, which XNNPACK "
                        f"does not take; its arithmetic for this op is not reproduced")
    return None


def _qp(t: dict):
    return float(t["scale"][0]), int(t["zero_point"][0])


def _math_problem(name: str, op: dict, tensors: list, kernels: str) -> str | None:
    """The Prepare checks of the math operators (:mod:`.math_ops`); ``None`` when the kernel set prepares it."""
    ins, outs = op["inputs"], op["outputs"]
    x, y = tensors[ins[0]], tensors[outs[0]]
    if name == "REDUCE_MAX" and kernels != "xnnpack" and _qp(x) != _qp(y):
        return (f"REDUCE_MAX with input quantization {_qp(x)} and output {_qp(y)}: LiteRT's kernels need them "
                f"equal and fail the invoke (kernels='xnnpack' copies the codes)")
    try:
        if name == "SQUARED_DIFFERENCE" and len(ins) > 1 and _scale(tensors[ins[1]]) is not None:
            K.squared_difference_params(*_qp(x), *_qp(tensors[ins[1]]), *_qp(y))
        elif name == "RSQRT":
            K.rsqrt_params(*_qp(x), *_qp(y))
        elif name == "LOG_SOFTMAX":
            K.log_softmax_params(_qp(x)[0], *_qp(y), kernels=kernels)
        elif name == "PRELU" and len(ins) > 1 and _scale(tensors[ins[1]]) is not None:
            K.prelu_params(*_qp(x), *_qp(tensors[ins[1]]), *_qp(y))
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None
