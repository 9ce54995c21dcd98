"""A network as hls4ml compiles it (io_parallel): its layer table with the ``ap_fixed`` types hls4ml resolved.

Each record is one hls4ml layer in order, as ``hls_model.get_layers()`` lists them (the first is the input):

* ``{"name", "class": "Input", "result_t"}`` — the input type; real inputs are converted as hls4ml's bridge does
  (``nnet::convert_data<double, input_t>``: the ``ap_fixed(double)`` constructor, ``input_t``'s modes);
* ``{"name", "class": "Dense", "weight_t", "bias_t", "accum_t", "result_t"}`` with weights ``[n_in, n_out]`` and
  biases ``[n_out]`` given as real values (as the C simulation reads ``weights/*.txt``: a double each, then
  converted to ``weight_t`` / ``bias_t`` with their modes);
* ``{"name", "class": "Activation" or "ReLU", "activation": "relu" | "linear", "result_t"}``.

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
from ...datapath.hls4ml import ApType, dense, linear, parse_ap_type, relu

__all__ = ["Hls4mlModel", "Hls4mlLayer"]

_ACTIVATIONS = {"relu": relu, "linear": linear}
_SUPPORTED = "Input, Dense, Activation (relu, linear), ReLU"


@dataclass(frozen=True)
class Hls4mlLayer:
    """One layer: its name, kind (``input``, ``dense``, ``relu``, ``linear``), types and quantized parameters."""

    name: str
    kind: str
    result_t: ApType
    accum_t: ApType | None = None
    weight: FixedArray | None = None
    bias: FixedArray | None = None


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
            result_t = _type(rec, "result_t", where)
            if cls_name in ("Input", "InputLayer"):
                layers.append(Hls4mlLayer(name, "input", result_t))
            elif cls_name == "Dense":
                entry = weights.get(name) if isinstance(weights, Mapping) else None
                if not isinstance(entry, Mapping) or "weight" not in entry:
                    raise ValueError(f"{where}: no 'weight' array for layer {name!r} in the weights "
                                     f"(expected weights[{name!r}]['weight'])")
                w_arr = np.asarray(entry["weight"])
                if w_arr.ndim != 2:
                    raise ValueError(f"{where}: weight must be 2-D [n_in, n_out], got shape {w_arr.shape}")
                n_in, n_out = w_arr.shape
                for key, n in (("n_in", n_in), ("n_out", n_out)):
                    if key in rec and int(rec[key]) != n:
                        raise ValueError(f"{where}: {key} = {rec[key]} but the weight has {n}")
                if width is not None and n_in != width:
                    raise ValueError(f"{where}: n_in = {n_in} but the previous layer gives {width} values")
                layers.append(Hls4mlLayer(
                    name, "dense", result_t, _type(rec, "accum_t", where),
                    _param(weights, name, "weight", _type(rec, "weight_t", where), (n_in, n_out), where),
                    _param(weights, name, "bias", _type(rec, "bias_t", where), (n_out,), where)))
                width = n_out
            elif cls_name in ("Activation", "ReLU"):
                act = rec.get("activation", "relu" if cls_name == "ReLU" else None)
                if act not in _ACTIVATIONS:
                    raise ValueError(f"{where}: activation {act!r} is not supported; supported: "
                                     f"{', '.join(_ACTIVATIONS)}")
                layers.append(Hls4mlLayer(name, act, result_t))
            else:
                raise ValueError(f"{where}: layer class {cls_name!r} is not supported; supported: {_SUPPORTED}")
        return cls(layers)

    def run(self, x, *, trace: bool = False):
        """Run on ``x`` ``[batch, n_in]``: real values (converted to the input type) or a FixedArray (cast).

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
            else:
                a = _ACTIVATIONS[layer.kind](a, layer.result_t)
            outputs[layer.name] = a
        return (a, outputs) if trace else a

    def summary(self) -> str:
        """One line per layer: name, kind, types."""
        lines = []
        for l in self.layers:
            types = f"result_t={l.result_t}"
            if l.kind == "dense":
                types = (f"{l.weight.shape[0]}x{l.weight.shape[1]} weight_t={l.weight.fmt} bias_t={l.bias.fmt} "
                         f"accum_t={l.accum_t} " + types)
            lines.append(f"{l.name:<16} {l.kind:<7} {types}")
        return "\n".join(lines)
