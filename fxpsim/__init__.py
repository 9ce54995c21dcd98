"""fxpsim: bit-accurate fixed-point and quantized-accelerator simulation.

Layers (imports flow one way): ``formats`` (Format, rounding and overflow modes) ->
``fixed`` (FixedArray on the Cython core) -> ``datapath`` (accumulating kernels) ->
``requantize`` (TFLite/gemmlowp arithmetic) -> ``integer_layers`` (integer layer kernels);
``fake_quant`` -> ``quantizers`` / ``observers`` -> ``nn`` / ``train`` / ``datasets`` ->
``hardware`` / ``sweeps`` -> ``report`` / ``plots`` -> ``cli``.

Public names are re-exported lazily from each module's ``__all__`` so that
``import fxpsim`` stays fast (matplotlib and friends load only when used).
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

_MODULES = ("formats", "fixed", "datapath", "requantize", "integer_layers", "fake_quant", "quantizers",
            "observers", "nn", "train", "datasets", "hardware", "sweeps", "report", "plots")


def __getattr__(name: str):
    if name.startswith("_"):          # private names go through the import system
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:    # a submodule: just import it
        return importlib.import_module(f".{name}", __name__)
    for module_name in _MODULES:
        try:
            module = importlib.import_module(f".{module_name}", __name__)
        except ModuleNotFoundError as exc:  # module not written yet
            if exc.name == f"{__name__}.{module_name}":
                continue
            raise
        if name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'fxpsim' has no attribute {name!r}")


def __dir__():
    names = set(globals())
    for module_name in _MODULES:
        try:
            names.update(getattr(importlib.import_module(f".{module_name}", __name__), "__all__", ()))
        except ModuleNotFoundError:
            continue
    return sorted(names)
