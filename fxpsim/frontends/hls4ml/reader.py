"""Read a compiled hls4ml model (an ``hls4ml`` ``ModelGraph``) into the layer table of :mod:`.model`.

The types are the C++ definitions hls4ml resolved (``precision.definition_cpp()``: ``ap_fixed<W,I,Q,O,N>``), so
``auto`` precisions come back as hls4ml settled them.  The weights are read from the files the C simulation
loads, ``<output_dir>/firmware/weights/<var>.txt`` (decimal text, a double per token), not from the floats in
Python: they exist once the model is written (``hls_model.write()`` or ``compile()``).  Only what the C
simulation's arithmetic is modelled for is accepted (io_parallel, the Latency strategy); anything else raises
``ValueError`` naming the layer.  hls4ml itself is not imported: the model object is read by its attributes.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["records_from_hls_model"]

_CONV_ATTRS = ("in_height", "in_width", "n_chan", "filt_height", "filt_width", "n_filt", "stride_height",
               "stride_width", "pad_top", "pad_bottom", "pad_left", "pad_right", "out_height", "out_width")


def _cpp(var_type, where: str) -> str:
    try:
        return var_type.precision.definition_cpp()
    except AttributeError:
        raise ValueError(f"{where}: its type has no C++ definition (is this an hls4ml layer?)") from None


def _read_txt(path: str, where: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise ValueError(f"{where}: {path} does not exist; write() or compile() the hls4ml model first")
    with open(path) as f:
        text = f.read().strip()
    try:
        return np.array([float(t) for t in text.split(",")], dtype=np.float64)
    except ValueError:
        raise ValueError(f"{where}: {path} is not a comma-separated list of numbers") from None


def records_from_hls_model(hls_model):
    """``(records, weights)`` for :meth:`Hls4mlModel.from_layers` from a written hls4ml ``ModelGraph``."""
    try:
        config, layers = hls_model.config, list(hls_model.get_layers())
    except AttributeError:
        raise TypeError(f"expected an hls4ml ModelGraph, got {type(hls_model).__name__}") from None
    io_type = config.get_config_value("IOType")
    if io_type != "io_parallel":
        raise ValueError(f"hls4ml model: IOType {io_type!r} is not modelled; use io_parallel")
    weights_dir = os.path.join(config.get_output_dir(), "firmware", "weights")
    records, weights = [], {}
    for layer in layers:
        where = f"hls4ml layer {layer.name!r} ({layer.class_name})"
        rec = {"name": layer.name, "class": layer.class_name,
               "result_t": _cpp(layer.get_output_variable().type, where)}
        if layer.class_name in ("Dense", "Conv2D"):
            strategy = str(layer.get_attr("strategy", "latency")).lower()
            if strategy != "latency":
                raise ValueError(f"{where}: strategy {strategy!r} is not modelled (its accumulation order "
                                 "differs); use Strategy: Latency")
            rec["accum_t"] = _cpp(layer.get_attr("accum_t"), where)
            if layer.class_name == "Dense":
                rec["n_in"], rec["n_out"] = int(layer.get_attr("n_in")), int(layer.get_attr("n_out"))
                shape = (rec["n_in"], rec["n_out"])
            else:
                rec.update({k: int(layer.get_attr(k)) for k in _CONV_ATTRS})
                shape = (rec["filt_height"], rec["filt_width"], rec["n_chan"], rec["n_filt"])
            weights[layer.name] = {}
            for key in ("weight", "bias"):
                var = layer.weights[key]
                rec[f"{key}_t"] = _cpp(var.type, where)
                vals = _read_txt(os.path.join(weights_dir, f"{var.name}.txt"), where)
                want = int(np.prod(shape)) if key == "weight" else shape[-1]
                if vals.size != want:
                    raise ValueError(f"{where}: {var.name}.txt holds {vals.size} values, expected {want}")
                weights[layer.name][key] = vals.reshape(shape) if key == "weight" else vals
        elif layer.class_name in ("Activation", "ReLU"):
            rec["activation"] = layer.get_attr("activation")
        elif layer.class_name == "Reshape":
            rec["target_shape"] = [int(v) for v in layer.get_attr("target_shape")]
        records.append(rec)
    return records, weights
