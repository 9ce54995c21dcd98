"""An hls4ml configuration as a datapath: hls4ml's config dict (or its JSON / YAML file) applied to any network
fxpsim reads, giving the :class:`~fxpsim.graph.IntegerGraph` of hls4ml's io_parallel C simulation.

The configuration is hls4ml's (``hls4ml.utils.config_from_keras_model`` writes it; ``HLSConfig`` of an hls4ml
project file holds it)::

    {"Model": {"Precision": "ap_fixed<16,6>", "ReuseFactor": 1, "Strategy": "Latency"},
     "LayerType": {"Dense": {"Precision": {"accum": "ap_fixed<24,10>"}}},
     "LayerName": {"fc1": {"Precision": {"weight": "ap_fixed<8,2>", "bias": "ap_fixed<10,4>",
                                         "accum": "ap_fixed<12,4,AP_RND,AP_SAT>", "result": "ap_fixed<8,3>"}}}}

**Types.**  Each hls4ml layer's variable ``v`` (``weight``, ``bias``, ``accum``, ``result`` of Dense / Conv2D;
``result`` of the input and of activations) takes the first of, as hls4ml's ``HLSConfig.get_precision``:
``LayerName[layer][v]``, ``LayerName[layer]["default"]``, ``LayerType[class][v]``, ``LayerType[class]["default"]``,
``Model[v]``, ``Model["default"]`` (a ``Precision`` string means ``{"default": string}``; layer names and
classes compare case-insensitively, as hls4ml lower-cases them).  A type string is ``ap_fixed<W,I[,Q[,O[,N]]]>``
/ ``fixed<...>`` / ``ap_int<W>`` ...: modes omitted are ``AP_TRN`` and ``AP_WRAP``
(:func:`fxpsim.datapath.hls4ml.parse_ap_type`).  ``auto`` at layer level (``LayerName`` / ``LayerType``) is
inferred as hls4ml's ``InferPrecisionTypes`` does (:mod:`fxpsim.hardware.hls4ml_auto`: Dense / Conv2D
``accum_t`` and ``result_t`` from the input, weight and bias widths and the products per output; ``weight``,
``bias`` and activation results take ``Model.Precision.default``; ``Model.Precision.maximum`` clamps); the
inferred types are listed in ``graph.meta["hls4ml"]["auto"]``.  ``auto`` at model level is refused, as hls4ml
refuses it.  A Reshape/Flatten keeps its input's type: a ``Precision`` for it is refused.

**Other keys.**  ``ReuseFactor`` (a positive int) and ``Trace`` change hls4ml's schedule and what it records,
not one number of io_parallel Latency; they are checked and recorded in ``graph.meta["hls4ml"]``.
``Strategy`` must be ``Latency`` (``Resource`` accumulates in another order).  Any other key raises
``ValueError`` naming it; a ``LayerName`` entry that names no layer too.

**Networks.**  :func:`apply_hls4ml_config` takes an ``fxpsim.nn`` model (with calibration data, only to fold it),
an integer graph (imported ``.tflite`` / ONNX / QONNX, or converted), an
:class:`~fxpsim.frontends.hls4ml.Hls4mlModel` (retyped), or hls4ml layer records with real weights
(:mod:`fxpsim.frontends.hls4ml.float_layers` states what is read).  Weights and biases are the network's real
values, cast to ``weight_t`` / ``bias_t`` as the C simulation casts them.

:func:`hls4ml_hardware_config` is the :class:`~fxpsim.hardware.HardwareConfig` on which ``simulate`` and sweeps
run such a graph as hls4ml does: every MAC node's accumulator width and overflow mode set to its ``accum_t``'s.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

from ..datapath.hls4ml import parse_ap_type
from ..frontends.hls4ml import Hls4mlModel
from ..frontends.hls4ml.float_layers import records_from_graph, records_from_stages
from ..frontends.hls4ml.ops import node_accum_t
from ..graph.ir import IntegerGraph
from .config import HardwareConfig
from .hls4ml_auto import auto_accum_type

__all__ = ["Hls4mlConfig", "load_hls4ml_config", "apply_hls4ml_config", "hls4ml_hardware_config"]

#: The variables each hls4ml layer class types.
VARIABLES = {"inputlayer": ("result",), "dense": ("weight", "bias", "accum", "result"),
             "conv2d": ("weight", "bias", "accum", "result"), "activation": ("result",), "relu": ("result",),
             "reshape": ()}
#: hls4ml's class names (as ``LayerType`` keys, lower-cased as hls4ml does) of the records read.
_CLASS = {"InputLayer": "inputlayer", "Input": "inputlayer", "Dense": "dense", "Conv2D": "conv2d",
          "Activation": "activation", "ReLU": "relu", "Reshape": "reshape"}
_MODEL_KEYS = ("Precision", "ReuseFactor", "Strategy", "BramFactor", "TraceOutput")
_LAYER_KEYS = ("Precision", "ReuseFactor", "Strategy", "Trace")
_TOP_KEYS = ("Model", "LayerName", "LayerType")
#: hls4ml project-file keys around ``HLSConfig``: where the project goes, not what it computes.
_PROJECT_KEYS = ("OutputDir", "ProjectName", "Part", "XilinxPart", "ClockPeriod", "Backend", "KerasModel",
                 "KerasJson", "KerasH5", "OnnxModel", "InputData", "OutputPredictions", "Version")


def _precision(value, where: str) -> dict:
    if isinstance(value, str):
        value = {"default": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.Precision must be a type string or a table of variable -> type, got {value!r}")
    out = {}
    for var, text in value.items():
        if not isinstance(text, str):
            raise ValueError(f"{where}.Precision.{var} must be a type string, got {text!r}")
        if text.strip().lower() != "auto":
            try:
                parse_ap_type(text)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{where}.Precision.{var}: {err}") from None
        out[str(var).lower()] = text.strip()
    return out


def _entry(value, where: str, allowed) -> dict:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a table, got {type(value).__name__}")
    out = {}
    for key, v in value.items():
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r}; known: {', '.join(allowed)}")
        if key == "Precision":
            out["precision"] = _precision(v, where)
        elif key in ("ReuseFactor", "BramFactor"):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{where}.{key} must be a positive int, got {v!r}")
            out[key] = v
        elif key == "Strategy":
            if not isinstance(v, str) or v.lower() != "latency":
                raise ValueError(f"{where}.Strategy = {v!r}: only Latency is modelled (Resource accumulates in "
                                 "another order)")
            out[key] = v
        else:
            if not isinstance(v, bool):
                raise ValueError(f"{where}.{key} must be true or false, got {v!r}")
            out[key] = v
    return out


class Hls4mlConfig:
    """A parsed hls4ml configuration (see the module docstring); :meth:`precision` resolves one type."""

    def __init__(self, data: Mapping, source: str = "hls4ml config"):
        if not isinstance(data, Mapping):
            raise TypeError(f"{source}: an hls4ml config must be a dict, got {type(data).__name__}")
        self.source, self.project, self.inferred = source, {}, {}
        if "HLSConfig" in data:
            for key, v in data.items():
                if key == "IOType":
                    if v != "io_parallel":
                        raise ValueError(f"{source}: IOType {v!r} is not modelled; use io_parallel")
                elif key != "HLSConfig" and key not in _PROJECT_KEYS:
                    raise ValueError(f"{source}: unknown key {key!r}; known: HLSConfig, IOType, "
                                     f"{', '.join(_PROJECT_KEYS)}")
                elif key != "HLSConfig":
                    self.project[key] = v
            data = data["HLSConfig"]
            if not isinstance(data, Mapping):
                raise ValueError(f"{source}: HLSConfig must be a table")
        for key in data:
            if key not in _TOP_KEYS:
                raise ValueError(f"{source}: unknown key {key!r}; known: {', '.join(_TOP_KEYS)} (or a project "
                                 "file with HLSConfig)")
        self.model = _entry(data.get("Model", {}), f"{source}: Model", _MODEL_KEYS)
        self.layer_name, self.layer_type = {}, {}
        for table, store in (("LayerName", self.layer_name), ("LayerType", self.layer_type)):
            block = data.get(table, {})
            if not isinstance(block, Mapping):
                raise ValueError(f"{source}: {table} must be a table of name -> settings")
            for name, entry in block.items():
                key = str(name).lower()
                if table == "LayerType" and key not in VARIABLES:
                    raise ValueError(f"{source}: LayerType.{name}: not an hls4ml layer class read here "
                                     f"(InputLayer, Dense, Conv2D, Activation, ReLU, Reshape)")
                store[key] = _entry(entry, f"{source}: {table}.{name}", _LAYER_KEYS)

    def precision(self, layer: str, cls: str, var: str) -> str:
        """The type string of variable ``var`` of layer ``layer`` (class ``cls``): hls4ml's look-up order; ``"auto"``
        where a layer-level entry says so (:meth:`resolve` infers it)."""
        by_name = self.layer_name.get(layer.lower(), {}).get("precision", {})
        by_type = self.layer_type.get(cls, {}).get("precision", {})
        model = self.model.get("precision", {})
        for table in (by_name, by_type, model):
            for key in (var, "default"):
                if key in table:
                    if table[key].lower() == "auto":
                        if table is model:
                            raise ValueError(f"{self.source}: Model.Precision.{key} = 'auto': hls4ml infers "
                                             "precisions at layer level only (LayerName / LayerType)")
                        return "auto"
                    return table[key]
        raise ValueError(f"{self.source}: layer {layer!r} has no {var} precision (no Model.Precision default)")

    def _model_default(self, layer: str, var: str) -> str:
        text = self.model.get("precision", {}).get("default")
        if text is None:
            raise ValueError(f"{self.source}: layer {layer!r} {var} = 'auto' takes hls4ml's model default "
                             "precision, and Model.Precision has no default")
        return text

    def resolve(self, records, weights=None) -> list:
        """The layer records with their ``<var>_t`` types filled in (see the module docstring); ``auto`` as hls4ml
        infers it (:mod:`fxpsim.hardware.hls4ml_auto`), from the layer's input type and ``weights`` (name ->
        ``{"weight": array}``: the number of products per output; else the record's ``n_in`` / ``n_chan``,
        ``filt_height``, ``filt_width``)."""
        out, names, prev = [], set(), None
        self.inferred = {}
        maximum = self.model.get("precision", {}).get("maximum")
        for rec in records:
            cls = _CLASS.get(rec.get("class"))
            if cls is None:
                raise ValueError(f"{self.source}: layer {rec.get('name')!r}: class {rec.get('class')!r} is not read")
            name = str(rec["name"])
            names.add(name.lower())
            entry = self.layer_name.get(name.lower(), {})
            unused = set(entry.get("precision", {})) - set(VARIABLES[cls]) - ({"default"} if VARIABLES[cls] else set())
            if unused:
                raise ValueError(f"{self.source}: LayerName.{name}.Precision: {', '.join(sorted(unused))} is not a "
                                 f"variable of a {rec['class']} layer (it has: "
                                 f"{', '.join(VARIABLES[cls]) or 'none: it keeps its input type'})")
            types = {v: self.precision(name, cls, v) for v in VARIABLES[cls]}
            for v in ("weight", "bias") if cls in ("dense", "conv2d") else ("result",):
                if types.get(v, "").lower() == "auto":
                    types[v] = self._model_default(name, v)
                    self.inferred[f"{name}.{v}_t"] = types[v]
            auto = [v for v in ("accum", "result") if types.get(v, "").lower() == "auto"]
            if auto:
                if prev is None:
                    raise ValueError(f"{self.source}: layer {name!r}: 'auto' needs the input layer's type first")
                inferred = auto_accum_type(prev, types["weight"], types["bias"], _n_ops(rec, weights, cls), maximum)
                for v in auto:
                    types[v] = inferred
                    self.inferred[f"{name}.{v}_t"] = inferred
            if "result" in types:
                prev = types["result"]
            out.append({**rec, **{f"{v}_t": t for v, t in types.items()}})
        missing = sorted(set(self.layer_name) - names)
        if missing:
            raise ValueError(f"{self.source}: LayerName names no layer of the network: {', '.join(missing)} "
                             f"(its layers: {', '.join(str(r['name']) for r in records)})")
        return out

    def settings(self) -> dict:
        """The non-arithmetic settings, as recorded in ``graph.meta["hls4ml"]``."""
        return {"ReuseFactor": self.model.get("ReuseFactor", 1),
                "model": {k: v for k, v in self.model.items() if k != "precision"},
                "layers": {k: {s: v for s, v in e.items() if s != "precision"} for k, e in self.layer_name.items()
                           if any(s != "precision" for s in e)}, "project": dict(self.project)}


def _n_ops(rec, weights, cls) -> int:
    """Products per output of a Dense / Conv2D record: ``n_in``, or :math:`n_{chan} f_h f_w` (hls4ml's ``n_ops``)."""
    w = (weights or {}).get(rec["name"], {}).get("weight")
    if w is not None:
        shape = tuple(getattr(w, "shape", ()))
        if cls == "dense" and len(shape) == 2:
            return int(shape[0])
        if cls == "conv2d" and len(shape) == 4:
            return int(shape[0] * shape[1] * shape[2])
    keys = ("n_in",) if cls == "dense" else ("n_chan", "filt_height", "filt_width")
    if all(k in rec for k in keys):
        n = 1
        for k in keys:
            n *= int(rec[k])
        return n
    raise ValueError(f"layer {rec['name']!r}: 'auto' precision needs its weights or {', '.join(keys)}")


def load_hls4ml_config(spec) -> Hls4mlConfig:
    """An :class:`Hls4mlConfig` from a dict, a ``.json`` file, or a ``.yml`` / ``.yaml`` file (PyYAML)."""
    if isinstance(spec, Hls4mlConfig):
        return spec
    if isinstance(spec, Mapping):
        return Hls4mlConfig(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"an hls4ml config is a dict or a .json/.yml path, got {type(spec).__name__}")
    path = os.fspath(spec)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"hls4ml config not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if ext == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON: {err}") from None
    elif ext in (".yml", ".yaml"):
        try:
            import yaml
        except ImportError:
            raise ImportError(f"{path}: reading YAML needs PyYAML (pip install pyyaml), or give the config as "
                              ".json") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not YAML: {str(err).splitlines()[0]}") from None
    else:
        raise ValueError(f"{path}: an hls4ml config file ends in .json, .yml or .yaml")
    return Hls4mlConfig(data if data is not None else {}, source=path)


def apply_hls4ml_config(model, config, calibration_x=None, *, name: str | None = None) -> IntegerGraph:
    """The hls4ml graph of ``model`` under ``config`` (see the module docstring).

    ``model``: an ``fxpsim.nn.Sequential`` (``calibration_x``: inputs it is folded on), an IntegerGraph, an
    :class:`Hls4mlModel`, or ``(records, weights, input_shape)``."""
    cfg = load_hls4ml_config(config)
    if isinstance(model, IntegerGraph):
        records, weights, shape = records_from_graph(model)
        name = name or model.name
    elif isinstance(model, Hls4mlModel):
        raise TypeError("apply_hls4ml_config: an Hls4mlModel has its types already; give its float network "
                        "(records, weights, input_shape)")
    elif isinstance(model, tuple) and len(model) == 3:
        records, weights, shape = model
    else:
        from ..graph.extract import extract
        if calibration_x is None:
            raise ValueError("apply_hls4ml_config: an fxpsim.nn model needs calibration_x (inputs to fold it on)")
        records, weights, shape = records_from_stages(extract(model, calibration_x))
    typed = cfg.resolve(records, weights)
    graph = Hls4mlModel.from_layers(typed, weights).to_graph(shape, name=name or "hls4ml")
    graph.meta["hls4ml"] = {"config": cfg.source, **cfg.settings()}
    graph.meta["notes"] = graph.meta.get("notes", []) + [
        f"types from the hls4ml config {cfg.source}; ReuseFactor and Trace change hls4ml's schedule, not the numbers"]
    if cfg.inferred:
        graph.meta["hls4ml"]["auto"] = dict(cfg.inferred)
        graph.meta["notes"].append("hls4ml 'auto' precisions inferred: " + ", ".join(
            f"{k} = {v}" for k, v in cfg.inferred.items()))
    return graph


def hls4ml_hardware_config(graph: IntegerGraph, name: str = "hls4ml") -> HardwareConfig:
    """The :class:`HardwareConfig` on which an hls4ml graph runs as hls4ml's C simulation: per MAC node, the
    accumulator width and overflow mode of its ``accum_t`` (its fraction bits and rounding are the node's), the
    bias preloaded; the ``shift`` scheme only so that its exact datapath is 62 bits (the ops have no
    requantizer: each result is its ``result_t`` cast)."""
    layers, widths = {}, []
    for node in graph.nodes:
        if node.op in ("hls4ml_dense", "hls4ml_conv2d"):
            acc = node_accum_t(node, None)
            layers[node.name] = {"accumulator_bits": acc.fmt.word, "accumulator_overflow": acc.overflow.value}
            widths.append(acc.fmt.word)
    if not layers:
        raise ValueError(f"graph {graph.name!r} has no hls4ml MAC node (build it with apply_hls4ml_config or "
                         "Hls4mlModel.to_graph)")
    return HardwareConfig(name=name, description="hls4ml io_parallel: each MAC node's accum_t",
                          accumulator_bits=max(widths), bias_add="preload", requantization="shift",
                          rounding="floor", layers=layers)
