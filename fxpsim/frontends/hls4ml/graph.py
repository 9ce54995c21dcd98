"""An :class:`~fxpsim.frontends.hls4ml.Hls4mlModel` as fxpsim's one graph: an
:class:`~fxpsim.graph.IntegerGraph` of the ops in :mod:`.ops`, so that ``simulate``, the reports, sweeps, RTL
vectors and the command line read an hls4ml network as they read every other.

Layer by layer: the input becomes ``hls4ml_input`` (a float32 graph input cast to ``input_t``), Dense and
Conv2D ``hls4ml_dense`` / ``hls4ml_conv2d`` with their weights and biases as constant codes of ``weight_t`` /
``bias_t``, the activations ``hls4ml_activation``, Reshape ``hls4ml_reshape``.  Each tensor is named after the
hls4ml layer that writes it (``graph.run(x, keep=True)`` gives every layer's output, as hls4ml's ``trace()``)
and holds that layer's ``result_t`` codes, scale :math:`2^{-F}`.  ``graph.meta["datapath"]`` is
:data:`.ops.HLS4ML_DATAPATH`: on its own datapath the graph is the C simulation, bit for bit.
"""
from __future__ import annotations

from ...datapath.hls4ml import ApType
from ...graph.ir import IntegerGraph, Node, TensorSpec
from .ops import HLS4ML_DATAPATH  # importing .ops registers the hls4ml graph ops

__all__ = ["model_to_graph"]


def _spec(name: str, t: ApType, shape=(), data=None) -> TensorSpec:
    fmt = t.fmt
    return TensorSpec(name, fmt.word, fmt.signed, tuple(shape), [2.0 ** -fmt.frac], [0], data=data)


def model_to_graph(model, input_shape, *, name: str = "hls4ml") -> IntegerGraph:
    """The graph of ``model`` (an :class:`Hls4mlModel`) for inputs of per-sample shape ``input_shape``
    (``[n_in]``, or ``[H, W, C]`` for a Conv2D network)."""
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"to_graph: input_shape must be positive sizes, got {input_shape!r}")
    first = model.layers[0]
    x_name = f"{first.name}:float32"
    specs = [TensorSpec(x_name, 0, True, shape), _spec(first.name, first.result_t, shape)]
    nodes = [Node(first.name, "hls4ml_input", [x_name], [first.name], {"type": str(first.result_t)})]
    prev, prev_t = first.name, first.result_t
    for layer in model.layers[1:]:
        where = f"to_graph: layer {layer.name!r} ({layer.kind})"
        if layer.kind in ("dense", "conv2d"):
            if layer.kind == "dense":
                if shape[-1] != layer.weight.shape[0]:
                    raise ValueError(f"{where} takes {layer.weight.shape[0]} values, the previous layer gives "
                                     f"shape {list(shape)}")
                shape = shape[:-1] + (layer.weight.shape[1],)
                attrs = {}
            else:
                if len(shape) != 3:
                    raise ValueError(f"{where} needs [H, W, C] inputs, the previous layer gives {list(shape)}")
                sh, sw, top, bottom, left, right = layer.attrs
                fh, fw, _, f = layer.weight.shape
                oh, ow = (shape[0] + top + bottom - fh) // sh + 1, (shape[1] + left + right - fw) // sw + 1
                if oh < 1 or ow < 1:
                    raise ValueError(f"{where}: the padded input {list(shape[:2])} is smaller than the kernel")
                shape = (oh, ow, f)
                attrs = {"stride": [sh, sw], "pads": [top, bottom, left, right]}
            w_name, b_name = f"{layer.name}/weight", f"{layer.name}/bias"
            specs += [_spec(w_name, _type_of(layer.weight), data=layer.weight.raw),
                      _spec(b_name, _type_of(layer.bias), data=layer.bias.raw)]
            nodes.append(Node(layer.name, f"hls4ml_{layer.kind}", [prev, w_name, b_name], [layer.name],
                              {"accum_t": str(layer.accum_t), "result_t": str(layer.result_t), **attrs}))
            prev_t = layer.result_t
        elif layer.kind == "reshape":
            if _size(shape) != _size(layer.attrs):
                raise ValueError(f"{where} reshapes {list(shape)} to {list(layer.attrs)}")
            shape = tuple(layer.attrs)
            nodes.append(Node(layer.name, "hls4ml_reshape", [prev], [layer.name]))
        else:
            nodes.append(Node(layer.name, "hls4ml_activation", [prev], [layer.name],
                              {"function": layer.kind, "result_t": str(layer.result_t)}))
            prev_t = layer.result_t
        specs.append(_spec(layer.name, prev_t, shape))
        prev = layer.name
    meta = {"format": "hls4ml", "datapath": HLS4ML_DATAPATH,
            "notes": ["hls4ml's io_parallel C simulation: each MAC node accumulates in its accum_t on the graph's "
                      "own datapath; on a config, its accumulator_bits / accumulator_overflow (and frac_bits, "
                      "product_rounding, bias_add where set) replace accum_t's; the requantization knobs "
                      "(scheme, multiplier, rounding, lookup tables) do not apply: each result is its result_t cast"]}
    return IntegerGraph(specs, nodes, [x_name], [prev], name, meta)


def _type_of(codes) -> ApType:
    return ApType(codes.fmt)


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
