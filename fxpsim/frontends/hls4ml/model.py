"""A network as hls4ml compiles it (io_parallel): its layer table with the ``ap_fixed`` types hls4ml resolved.

Each record is one hls4ml layer in order, as ``hls_model.get_layers()`` lists them (the first is the input):

* ``{"name", "class": "Input", "result_t"}`` — the input type; real inputs are converted as hls4ml's bridge does
  (``nnet::convert_data<double, input_t>``: the ``ap_fixed(double)`` constructor, ``input_t``'s modes);
* ``{"name", "class": "Dense", "weight_t", "bias_t", "accum_t", "result_t"}`` with weights ``[n_in, n_out]`` and
  biases ``[n_out]`` given as real values (as the C simulation reads ``weights/*.txt``: a double each, then
  converted to ``weight_t`` / ``bias_t`` with their modes);
* ``{"name", "class": "Conv2D", ...the same four types, "stride_height", "stride_width", "pad_top", "pad_bottom",
  "pad_left", "pad_right"}`` with weights ``[filt_height, filt_width, n_chan, n_filt]`` (channels last; the record's
  ``filt_height`` / ``filt_width`` / ``n_chan`` / ``n_filt`` / ``out_height`` / ``out_width``, when present, are checked);
* ``{"name", "class": "Activation" or "ReLU", "activation": "relu" | "linear", "result_t"}``;
* ``{"name", "class": "Reshape", "target_shape"}`` (Flatten): the same codes in a new shape, no cast.

Types are strings such as ``ap_fixed<12,4,AP_RND,AP_SAT>`` (:func:`fxpsim.datapath.hls4ml.parse_ap_type`).  Each
layer's arithmetic is :mod:`fxpsim.datapath.hls4ml.layers`.  ``n_in`` / ``n_out`` in a record, when present,
are checked against the weights.  Other keys (hls4ml's ``ReuseFactor``, ``Strategy``, ``Trace`` ...) do not
change the C simulation's numbers and are not read.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...core.fixed import FixedArray
from ...datapath.hls4ml import ApType, conv2d, dense, linear, parse_ap_type, relu

__all__ = ["Hls4mlModel", "Hls4mlLayer"]

_ACTIVATIONS = {"relu": relu, "linear": linear}
_SUPPORTED = "Input, Dense, Conv2D, Activation (relu, linear), ReLU, Reshape"
_CONV_CHECKS = ("filt_height", "filt_width", "n_chan", "n_filt")
_CONV_ATTRS = ("stride_height", "stride_width", "pad_top", "pad_bottom", "pad_left", "pad_right")


@dataclass(frozen=True)
class Hls4mlLayer:
    """One layer: its name, kind (``input``, ``dense``, ``conv2d``, ``relu``, ``linear``, ``reshape``), types,
    quantized parameters and its other attributes (Conv2D's ``stride`` and ``padding``, Reshape's ``shape``)."""

    name: str
    kind: str
    result_t: ApType | None
    accum_t: ApType | None = None
    weight: FixedArray | None = None
    bias: FixedArray | None = None
    attrs: tuple = ()


def _type(record: Mapping, key: str, where: str) -> ApType:
    if key not in record:
        raise ValueError(f"{where}: the record has no {key!r} (an ap_fixed type string)")
    try:
        return parse_ap_type(record[key])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {key}: {err}") from None


def _param(weights: Mapping, name: str, kind: str, t: ApType, shape: tuple, where: str) -> FixedArray:
    if name not in weights or kind not in weights[name]:
        raise ValueError(f"{where}: no {kind!r} array for layer {name!r} in the weights "
                         f"(expected weights[{name!r}][{kind!r}])")
    arr = np.asarray(weights[name][kind])
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{where}: {kind} must be a real array, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"{where}: {kind} has shape {arr.shape}, expected {shape}")
    try:
        return t.from_float(arr.astype(np.float64))
    except ValueError as err:
        raise ValueError(f"{where}: {kind}: {err}") from None


class Hls4mlModel:
    """hls4ml's C simulation of a sequential io_parallel network, bit for bit (see the module docstring)."""

    def __init__(self, layers: Sequence[Hls4mlLayer]):
        layers = list(layers)
        if not layers or layers[0].kind != "input" or any(l.kind == "input" for l in layers[1:]):
            raise ValueError("Hls4mlModel: the first layer, and only the first, must be the input")
        self.layers = layers

    @classmethod
    def from_layers(cls, records: Sequence[Mapping], weights: Mapping[str, Mapping]) -> "Hls4mlModel":
        """Build from hls4ml's layer records and ``weights[name] = {"weight": [n_in, n_out], "bias": [n_out]}``."""
        if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or not records:
            raise TypeError("Hls4mlModel.from_layers: records must be a non-empty list of layer dicts")
        layers, width = [], None
        for i, rec in enumerate(records):
            if not isinstance(rec, Mapping):
                raise TypeError(f"layer record {i} must be a dict, got {type(rec).__name__}")
            name = rec.get("name", f"#{i}")
            where = f"hls4ml layer {i} ({name!r}, class {rec.get('class')!r})"
            cls_name = rec.get("class")
            result_t = None if cls_name == "Reshape" else _type(rec, "result_t", where)
            if cls_name in ("Input", "InputLayer"):
                layers.append(Hls4mlLayer(name, "input", result_t))
            elif cls_name in ("Dense", "Conv2D"):
                entry = weights.get(name) if isinstance(weights, Mapping) else None
                if not isinstance(entry, Mapping) or "weight" not in entry:
                    raise ValueError(f"{where}: no 'weight' array for layer {name!r} in the weights "
                                     f"(expected weights[{name!r}]['weight'])")
                w_shape = np.shape(entry["weight"])
                dims = 2 if cls_name == "Dense" else 4
                if len(w_shape) != dims:
                    raise ValueError(f"{where}: weight must be {dims}-D "
                                     f"{'[n_in, n_out]' if dims == 2 else '[filt_height, filt_width, n_chan, n_filt]'}, "
                                     f"got shape {w_shape}")
                keys = ("n_in", "n_out") if cls_name == "Dense" else _CONV_CHECKS
                for key, n in zip(keys, w_shape):
                    if key in rec and int(rec[key]) != n:
                        raise ValueError(f"{where}: {key} = {rec[key]} but the weight has {n}")
                if cls_name == "Dense" and width is not None and w_shape[0] != width:
                    raise ValueError(f"{where}: n_in = {w_shape[0]} but the previous layer gives {width} values")
                attrs = ()
                if cls_name == "Conv2D":
                    missing = [k for k in _CONV_ATTRS if k not in rec]
                    if missing:
                        raise ValueError(f"{where}: the record lacks {', '.join(missing)}")
                    attrs = tuple(int(rec[k]) for k in _CONV_ATTRS)
                layers.append(Hls4mlLayer(
                    name, cls_name.lower(), result_t, _type(rec, "accum_t", where),
                    _param(weights, name, "weight", _type(rec, "weight_t", where), w_shape, where),
                    _param(weights, name, "bias", _type(rec, "bias_t", where), (w_shape[-1],), where), attrs))
                width = w_shape[-1] if cls_name == "Dense" else None
            elif cls_name == "Reshape":
                shape = rec.get("target_shape")
                if not isinstance(shape, Sequence) or not all(isinstance(v, (int, np.integer)) and v > 0
                                                              for v in shape):
                    raise ValueError(f"{where}: target_shape must be a list of positive ints, got {shape!r}")
                layers.append(Hls4mlLayer(name, "reshape", None, attrs=tuple(int(v) for v in shape)))
                width = int(np.prod(shape)) if len(shape) == 1 else None
            elif cls_name in ("Activation", "ReLU"):
                act = rec.get("activation", "relu" if cls_name == "ReLU" else None)
                if act not in _ACTIVATIONS:
                    raise ValueError(f"{where}: activation {act!r} is not supported; supported: "
                                     f"{', '.join(_ACTIVATIONS)}")
                layers.append(Hls4mlLayer(name, act, result_t))
            else:
                raise ValueError(f"{where}: layer class {cls_name!r} is not supported; supported: {_SUPPORTED}")
        return cls(layers)

    @classmethod
    def from_hls_model(cls, hls_model) -> "Hls4mlModel":
        """Build from a written (or compiled) hls4ml ``ModelGraph`` (:mod:`.reader`)."""
        from .reader import records_from_hls_model
        return cls.from_layers(*records_from_hls_model(hls_model))

    def run(self, x, *, trace: bool = False):
        """Run on ``x`` ``[batch, n_in]`` (``[batch, H, W, C]`` for a Conv2D network): real values (converted to the input type) or a FixedArray (cast).

        Returns the last layer's output (a FixedArray in its ``result_t``), or with ``trace=True`` also
        ``{layer name: output}`` for every layer (as hls4ml's ``trace()``)."""
        first = self.layers[0]
        if isinstance(x, FixedArray):
            a = first.result_t.cast(x)
        else:
            arr = np.asarray(x)
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"Hls4mlModel.run: x must be real numbers or a FixedArray, got dtype {arr.dtype}")
            a = first.result_t.from_float(arr.astype(np.float64))
        outputs = {first.name: a}
        for layer in self.layers[1:]:
            if layer.kind == "dense":
                if a.ndim < 1 or a.shape[-1] != layer.weight.shape[0]:
                    raise ValueError(f"Hls4mlModel.run: layer {layer.name!r} takes {layer.weight.shape[0]} "
                                     f"values per sample, got shape {a.shape}")
                a = dense(a, layer.weight, layer.bias, layer.accum_t, layer.result_t)
            elif layer.kind == "conv2d":
                sh, sw, *pads = layer.attrs
                try:
                    a = conv2d(a, layer.weight, layer.bias, layer.accum_t, layer.result_t, stride=(sh, sw),
                               padding=pads)
                except ValueError as err:
                    raise ValueError(f"Hls4mlModel.run: layer {layer.name!r}: {err}") from None
            elif layer.kind == "reshape":
                if int(np.prod(a.shape[1:])) != int(np.prod(layer.attrs)):
                    raise ValueError(f"Hls4mlModel.run: layer {layer.name!r} reshapes {a.shape[1:]} to {layer.attrs}")
                a = a.reshape(a.shape[0], *layer.attrs)
            else:
                a = _ACTIVATIONS[layer.kind](a, layer.result_t)
            outputs[layer.name] = a
        return (a, outputs) if trace else a

    def to_graph(self, input_shape=None, *, name: str = "hls4ml"):
        """This network as an :class:`~fxpsim.graph.IntegerGraph` of hls4ml's ops (:mod:`.graph`): on its own
        datapath it computes what :meth:`run` computes, and ``simulate`` / sweeps / the CLI read it.
        ``input_shape``: per sample (default ``[n_in]`` of a first Dense; needed for a Conv2D network)."""
        from .graph import model_to_graph
        if input_shape is None:
            first = next((l for l in self.layers[1:] if l.kind in ("dense", "conv2d")), None)
            if first is None or first.kind != "dense":
                raise ValueError("Hls4mlModel.to_graph: give input_shape (the network does not start with a Dense)")
            input_shape = (first.weight.shape[0],)
        return model_to_graph(self, input_shape, name=name)

    def summary(self) -> str:
        """One line per layer: name, kind, types."""
        lines = []
        for l in self.layers:
            types = f"result_t={l.result_t}" if l.result_t is not None else f"-> {l.attrs}"
            if l.kind in ("dense", "conv2d"):
                types = (f"{'x'.join(map(str, l.weight.shape))} weight_t={l.weight.fmt} bias_t={l.bias.fmt} "
                         f"accum_t={l.accum_t} " + types)
            lines.append(f"{l.name:<16} {l.kind:<7} {types}")
        return "\n".join(lines)
