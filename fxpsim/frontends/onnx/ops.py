"""The ops of graphs imported from ONNX (:func:`fxpsim.import_onnx`), registered in :data:`fxpsim.graph.ops.OPS`.

Every op computes integer codes on any datapath. With ``requantization="native"`` (the datapath an imported
graph records in ``meta["datapath"]``) it is exactly what onnxruntime's CPU execution provider computes
(:mod:`fxpsim.datapath.onnxruntime.mlas`); with another scheme (``tflite-double``, ``tflite-single``, ``shift``,
``float``) the MAC ops requantize through :func:`fxpsim.graph.ops.requantizer_for`. Accumulation always goes
through :mod:`fxpsim.datapath.accumulate` with the datapath's accumulator width, overflow mode, order and
bias placement (onnxruntime: int32 that wraps, bias added after the sum).

====================  =================================================================================
op                    inputs / attributes
====================  =================================================================================
``onnx_quantize``     float x -> codes (QuantizeLinear, the output tensor's scale and zero point)
``onnx_dequantize``   codes -> float32 (DequantizeLinear)
``onnx_reinterpret``  codes -> the same codes, read with other quantization parameters (a tensor two
                      consumers dequantize differently)
``onnx_requantize``   codes -> codes: ``Q(clip(DQ(x), clip_min, clip_max))`` in float32 (a DQ -> Q pair,
                      or a Relu / Clip onnxruntime runs in float between them); ``clip_min``, ``clip_max``
``transpose``         ``perm`` (per sample, the batch axis excluded)
``qlinear_conv``      x (NHWC), w [O, KH, KW, C/group], optional int32 bias [O]; ``stride``, ``padding``
                      ``[[top, bottom], [left, right]]``, ``dilation``, ``group``, ``ort_kernel``
``qlinear_matmul``    x [..., K], w [O, K], optional int32 bias [O]; ``alpha``, ``ort_kernel``, ``onnx_op``
``conv_integer``      ConvInteger: as ``qlinear_conv`` without requantization (int32 out); ``x_zero_point``,
                      ``w_zero_point``
``matmul_integer``    MatMulInteger: as ``qlinear_matmul`` without requantization; zero points as above
``qlinear_add``       a, b (numpy broadcasting); ``ort_kernel``, ``broadcast``, ``u8_shift``
``qlinear_mul``       a, b; ``ort_kernel``, ``u8_shift``
``qlinear_avg_pool``  ``pool_size``, ``stride``, ``padding``, ``count_include_pad``, ``global_path``,
                      ``u8_shift``
``qlinear_concat``    inputs of any quantization; ``axis`` (per sample)
``onnx_move``         codes -> the same codes moved (Transpose, Slice, Split, Gather, Pad, Squeeze, Unsqueeze,
                      nearest Resize): ``steps`` on the ONNX layout, ``in_perm``, ``out_perm``, ``pad_code``
``qlinear_softmax``   QLinearSoftmax (onnxruntime's table of exponentials); ``axis``, ``opset13``, ``in_perm``
``onnx_resize_linear`` bilinear Resize of NHWC images (:mod:`.resize_ops`); ``ctm``, ``scale_h``, ``scale_w``,
                      ``kernel`` (``"float"``, ``"float_codes"``, ``"integer"``)
``onnx_reduce_mean``  DQ -> float32 ReduceMean over a block of adjacent axes -> Q (:mod:`.reduce_ops`);
                      ``reduce_from``, ``reduce_to``, ``in_perm``, ``out_perm``
``onnx_conv_transpose`` DQ -> float32 ConvTranspose -> Q (:mod:`.conv_transpose_ops`); x, w [C, F, KH, KW], bias;
                      ``stride``, ``pads``, ``dilation``, ``group``, ``output_padding``
``onnx_lut``          codes -> codes through a table of one entry per code: an elementwise float32 program
                      (Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Div / Sub / Mul / Add by constants, Pow by
                      2 or 3, Relu, Clip) between DequantizeLinear and QuantizeLinear; ``program``
====================  =================================================================================

``ort_kernel``: ``"qlinear"`` when onnxruntime runs the node as its fused integer kernel, ``"float"`` when its
graph optimizer leaves the QDQ group unfused (x86 does not fuse int8-activation Conv/MatMul, nor groups whose
operand types differ after its int8 -> uint8 conversion) and it runs DequantizeLinear, the float32 op and
QuantizeLinear. A ``"float"`` node follows that float32 path only on the native int32 datapath; on any other
datapath it is an integer MAC like the others. ``u8_shift``: onnxruntime converted the node's int8 tensors to
uint8 (code + 128) before fusing it, which changes the float32 rounding of QLinearAdd, QLinearMul and
QLinearAveragePool (their output zero point is added before rounding).
``broadcast``: which operand is constant along onnxruntime's innermost broadcast span (``"none"``,
``"a_scalar"``, ``"b_scalar"``): QLinearAdd's formula depends on it.

``u8s8_pairs`` (MAC ops that onnxruntime runs with its uint8 x int8 integer kernel): ``"exact"`` (the
default; CPUs with VNNI, ARM) or ``"saturate16"`` (x86-64 with AVX2 and no VNNI: the raw products of
adjacent reduction elements summed in int16 with saturation,
:math:`\\mathrm{acc} = \\sum_j \\mathrm{sat}_{16}(a_{2j} w_{2j} + a_{2j+1} w_{2j+1}) - z_a \\sum w - z_w \\sum a
+ K z_a z_w`, :mod:`fxpsim.datapath.onnxruntime.x86_pairs`). ``"saturate16"`` is onnxruntime's kernel, not a datapath
knob: it runs only on onnxruntime's datapath (native requantization, int32 wrapping accumulator) and is
refused with a ValueError on any other. On a MAC node, ``u8_shift`` means that onnxruntime multiplies the
int8 activation codes + 128 (its int8 -> uint8 rewrite), which matters only for the pair saturation.

The ops live in one module per family: :mod:`.quantize_ops` (Q / DQ / reinterpret / transpose), :mod:`.mac_ops`
(the MAC ops), :mod:`.qlinear_ops` (add, mul, average pool, concat) and :mod:`.lut_ops` (tables), :mod:`.move_ops` (data movement), on the
helpers of :mod:`.op_support`.
"""
from __future__ import annotations

# The op families, each registered in :data:`fxpsim.graph.ops.OPS` when its module is imported; the graph loads
# this module by name (:data:`fxpsim.graph.ops.OP_PROVIDERS`), so importing it registers them all.
from . import quantize_ops  # noqa: F401  (onnx_quantize, onnx_dequantize, onnx_requantize, onnx_reinterpret)
from . import mac_ops  # noqa: F401  (qlinear_conv, qlinear_matmul, conv_integer, matmul_integer)
from . import qlinear_ops  # noqa: F401  (qlinear_add, qlinear_mul, qlinear_avg_pool, qlinear_concat)
from . import lut_ops  # noqa: F401  (onnx_lut)
from . import move_ops  # noqa: F401  (onnx_move)
from . import softmax_ops  # noqa: F401  (qlinear_softmax)
from . import resize_ops  # noqa: F401  (onnx_resize_linear)
from . import reduce_ops  # noqa: F401  (onnx_reduce_mean)
from . import conv_transpose_ops  # noqa: F401  (onnx_conv_transpose)
from . import transformer_ops  # noqa: F401  (onnx_matmul_ab, onnx_layer_norm)
from .op_support import is_native, is_onnxruntime_datapath, register_op  # noqa: F401

__all__ = ["ONNX_OPS", "is_native", "is_onnxruntime_datapath"]

#: The ops this module registers.
ONNX_OPS = ("onnx_quantize", "onnx_dequantize", "onnx_requantize", "onnx_reinterpret", "qlinear_conv",
            "qlinear_matmul", "conv_integer", "matmul_integer", "qlinear_add", "qlinear_mul", "qlinear_avg_pool",
            "qlinear_concat", "onnx_lut", "onnx_move",
            "qlinear_softmax", "onnx_resize_linear", "onnx_reduce_mean",
            "onnx_conv_transpose", "onnx_matmul_ab", "onnx_layer_norm")
