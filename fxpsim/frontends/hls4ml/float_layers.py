"""The float network hls4ml would convert, read from an fxpsim model or an imported graph: the layer records of
:meth:`Hls4mlModel.from_layers <fxpsim.frontends.hls4ml.Hls4mlModel.from_layers>` without their types, and the
real weights.  An hls4ml configuration then gives every record its types
(:mod:`fxpsim.hardware.hls4ml_config`), as hls4ml's converters do with a Keras/QONNX model.

``(records, weights, input_shape)``: records in order (``InputLayer``, ``Dense``, ``Conv2D``, ``Activation``
with ``activation`` relu, ``Reshape`` with ``target_shape``), ``weights[name] = {"weight", "bias"}`` in hls4ml's
layouts (Dense ``[n_in, n_out]``, Conv2D ``[fh, fw, C, F]``, channels last) as float64 real values.

* **An integer graph** (:func:`records_from_graph`): each weight is its dequantized codes :math:`s (q - z)`
  (a QONNX graph's exact scales), each bias likewise.  Read: the input quantizers (``quantize``,
  ``onnx_quantize``, a float-input ``qonnx_quant``; the graph's real input becomes hls4ml's input), the MAC
  nodes ``fully_connected`` / ``tflite_fully_connected`` / ``qlinear_matmul`` / ``qonnx_matmul`` (+ a
  ``qonnx_add`` of a constant: its bias), ``conv2d`` / ``tflite_conv2d`` / ``qlinear_conv`` (channels last,
  one group, no dilation), a fused ``relu`` activation (hls4ml's split activation layer ``<name>_relu``),
  ``qonnx_relu``, ``reshape`` / a ``qonnx_move`` reshape (Flatten), and the quantizers between layers and at
  the output (``qonnx_quant``, ``dequantize``, ``onnx_dequantize``, ``qonnx_dequantize``: hls4ml's types
  replace them).  Anything else raises ``ValueError`` listing every node and op it cannot read.
* **An fxpsim.nn model** (:func:`records_from_stages`): the stages of :func:`fxpsim.graph.extract.extract`
  (batch norm folded; Dense, Conv2D with ``SAME``/``VALID`` padding, ReLU, Flatten).
"""
from __future__ import annotations

import numpy as np

from ...graph.registry import _pads, _padding, _pair

__all__ = ["records_from_graph", "records_from_stages"]

_DENSE_OPS = ("fully_connected", "tflite_fully_connected", "qlinear_matmul", "qonnx_matmul")
_CONV_OPS = ("conv2d", "tflite_conv2d", "qlinear_conv")
_PASS_OPS = ("qonnx_quant", "dequantize", "onnx_dequantize", "qonnx_dequantize")
_INPUT_OPS = ("quantize", "onnx_quantize", "qonnx_quant")
SUPPORTED_GRAPH_OPS = _DENSE_OPS + _CONV_OPS + ("reshape", "qonnx_move", "qonnx_add", "qonnx_relu") + _PASS_OPS + \
    _INPUT_OPS[:2]


def _real(graph, name: str) -> np.ndarray:
    """The real values of a constant: a QONNX graph's exact scale, else the tensor's own quantization."""
    spec = graph.tensors[name]
    scales = (graph.meta.get("qonnx") or {}).get("scales", {})
    if name in scales:
        from ...datapath.qonnx.scales import ExactScale
        info = scales[name]
        return (spec.data.astype(np.float64) - int(info.get("zp", 0))) * ExactScale.from_json(info).float64()
    return spec.dequantize(spec.data)


def _activation(node):
    act = node.attrs.get("activation") or "none"
    if act not in ("none", "relu"):
        raise ValueError(f"node {node.name!r} ({node.op}): fused activation {act!r} has no hls4ml layer here "
                         "(relu and none are read)")
    return act


def records_from_graph(graph):
    """``(records, weights, input_shape)`` of a sequential integer graph (see the module docstring)."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise ValueError(f"graph {graph.name!r}: an hls4ml network has one input and one output, got "
                         f"{len(graph.inputs)} and {len(graph.outputs)}")
    bad = [f"{n.op} in node {n.name!r}" for n in graph.nodes if n.op not in SUPPORTED_GRAPH_OPS]
    if bad:
        raise ValueError(f"graph {graph.name!r}: no hls4ml layer for {'; '.join(bad)} (read: "
                         f"{', '.join(SUPPORTED_GRAPH_OPS)})")
    x_name = graph.inputs[0]
    shape = tuple(graph.tensors[x_name].shape)
    records, weights = [{"name": x_name, "class": "InputLayer"}], {}
    current = x_name             # the graph tensor that holds the last hls4ml layer's output
    last_mac = None
    for node in graph.nodes:
        data = [t for t in node.inputs if t and not graph.tensors[t].is_constant]
        consts = [t for t in node.inputs if t and graph.tensors[t].is_constant]
        where = f"graph {graph.name!r}: node {node.name!r} ({node.op})"
        if data != [current]:
            raise ValueError(f"{where} reads {data}, not the previous layer's output {current!r}: only a chain "
                             "of layers maps onto hls4ml's sequential network")
        op = node.op
        if op in _DENSE_OPS:
            w = _real(graph, node.inputs[1])
            w = w if op == "qonnx_matmul" else w.T                       # core layout [O, K] -> [K, O]
            b = _real(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(w.shape[1])
            weights[node.name] = {"weight": w, "bias": np.asarray(b, np.float64).reshape(-1)}
            records.append({"name": node.name, "class": "Dense"})
            shape = shape[:-1] + (w.shape[1],)
            last_mac = node.name
        elif op in _CONV_OPS:
            if int(node.attrs.get("groups", 1)) != 1 or _pair(node.attrs, "dilation") != (1, 1):
                raise ValueError(f"{where}: grouped or dilated convolutions have no hls4ml Conv2D here")
            w = _real(graph, node.inputs[1])                             # [O, KH, KW, C]
            stride = _pair(node.attrs, "stride")
            (top, bottom), (left, right) = _pads(shape[:2], w.shape[1:3], stride, (1, 1), _padding(node.attrs))
            b = _real(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(w.shape[0])
            weights[node.name] = {"weight": np.transpose(w, (1, 2, 3, 0)), "bias": np.asarray(b, np.float64)}
            records.append({"name": node.name, "class": "Conv2D", "stride_height": stride[0],
                            "stride_width": stride[1], "pad_top": top, "pad_bottom": bottom, "pad_left": left,
                            "pad_right": right})
            shape = tuple(graph.tensors[node.outputs[0]].shape)
            last_mac = node.name
        elif op == "qonnx_add":
            if len(consts) != 1 or records[-1]["name"] != last_mac or last_mac is None:
                raise ValueError(f"{where}: only the bias of the Dense just before it is read (an add of one "
                                 "constant right after a MatMul)")
            weights[last_mac]["bias"] = weights[last_mac]["bias"] + np.broadcast_to(
                _real(graph, consts[0]), weights[last_mac]["bias"].shape)
        elif op == "qonnx_relu":
            records.append({"name": node.name, "class": "Activation", "activation": "relu"})
        elif op in ("reshape", "qonnx_move"):
            if op == "qonnx_move" and node.attrs.get("kind") != "reshape":
                raise ValueError(f"{where}: a transpose has no hls4ml layer here (channels-last networks only)")
            shape = tuple(graph.tensors[node.outputs[0]].shape)
            records.append({"name": node.name, "class": "Reshape", "target_shape": list(shape)})
        elif op in _INPUT_OPS and current == x_name:
            pass                                                     # the input cast: hls4ml's input_t
        elif op not in _PASS_OPS:
            raise ValueError(f"{where}: not read here")
        if op in _DENSE_OPS + _CONV_OPS and _activation(node) == "relu":
            records.append({"name": f"{node.name}_relu", "class": "Activation", "activation": "relu"})
        current = node.outputs[0]
    if current != graph.outputs[0]:
        raise ValueError(f"graph {graph.name!r}: its output {graph.outputs[0]!r} is not the end of the chain")
    if last_mac is None:
        raise ValueError(f"graph {graph.name!r}: no Dense or Conv2D layer to map onto hls4ml")
    return records, weights, tuple(graph.tensors[x_name].shape)


def records_from_stages(fgraph):
    """``(records, weights, input_shape)`` of an :class:`~fxpsim.graph.extract.FloatGraph`."""
    shape = tuple(fgraph.input_shape)
    records, weights = [{"name": "input", "class": "InputLayer"}], {}
    for st in fgraph.stages:
        if st.kind == "dense":
            weights[st.name] = {"weight": np.asarray(st.weight, np.float64), "bias": np.asarray(st.bias, np.float64)}
            records.append({"name": st.name, "class": "Dense"})
            shape = shape[:-1] + (st.weight.shape[1],)
        elif st.kind == "conv2d":
            w = np.asarray(st.weight, np.float64)                        # HWIO: hls4ml's layout
            stride = tuple(int(v) for v in st.stride)
            (top, bottom), (left, right) = _pads(shape[:2], w.shape[:2], stride, (1, 1), st.padding)
            weights[st.name] = {"weight": w, "bias": np.asarray(st.bias, np.float64)}
            records.append({"name": st.name, "class": "Conv2D", "stride_height": stride[0], "stride_width": stride[1],
                            "pad_top": top, "pad_bottom": bottom, "pad_left": left, "pad_right": right})
            oh = (shape[0] + top + bottom - w.shape[0]) // stride[0] + 1
            ow = (shape[1] + left + right - w.shape[1]) // stride[1] + 1
            shape = (oh, ow, w.shape[3])
        elif st.kind == "flatten":
            shape = (int(np.prod(shape)),)
            records.append({"name": st.name, "class": "Reshape", "target_shape": list(shape)})
        elif st.kind == "relu":
            records.append({"name": st.name, "class": "Activation", "activation": "relu"})
            continue
        else:
            raise ValueError(f"stage {st.name!r}: a {st.kind} layer has no hls4ml layer here (Dense, Conv2D, ReLU, "
                             "Flatten are read)")
        if st.kind in ("dense", "conv2d") and (st.activation or "none") not in ("none", "relu"):
            raise ValueError(f"stage {st.name!r}: fused activation {st.activation!r} has no hls4ml layer here")
        if st.kind in ("dense", "conv2d") and st.activation == "relu":
            records.append({"name": f"{st.name}_relu", "class": "Activation", "activation": "relu"})
    return records, weights, tuple(fgraph.input_shape)
