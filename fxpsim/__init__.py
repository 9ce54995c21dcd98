"""fxpsim: bit-accurate fixed-point and quantized-accelerator simulation.

Subpackages; each imports only those above it in this list (``docs/architecture.md`` is the guide, and
``tests/test_architecture.py`` keeps it true):

``core``       Format, rounding/overflow modes, FixedArray, exact float->code and code->code kernels
``datapath``   accumulators that overflow at every add (matmul/conv), requantization, integer op kernels,
               the arithmetic of each runtime (``datapath.tflite``, ``datapath.onnxruntime``)
``quant``      TF/PyTorch-exact fake quantization, quantizer classes with STE gradients, observers
``nn``         layers, training loop, data sets
``graph``      the integer graph every network becomes, its core op set, float extraction
``frontends``  models made elsewhere, one folder per format (``frontends.tflite``, ``frontends.onnx``)
``rtl``        golden vectors, memory files, SystemVerilog headers, MAC model, compare and locator
``report``     per-node records and their renderings (text, JSON, Markdown, HTML), plots
``hardware``   HardwareConfig and presets, conversion, simulate, sweeps, overflow-aware QAT, search
``cli``        the ``fxpsim`` command

The main functions, all reachable as ``fxpsim.<name>``:

numbers        ``Format.parse("Q7.8")``, ``from_float(x, fmt, rounding, overflow)``, ``FixedArray.cast``
MAC arithmetic ``matmul(a, b, acc=16, overflow="saturate")``, ``conv2d``, ``dot``, ``sum``
networks       ``nn.Sequential``, ``nn.Dense``, ``nn.Conv2D``, ``train.fit``, ``train.save_model``
targets        ``preset("int8-acc16-sat")``, ``HardwareConfig``, ``convert(model, config, calibration)``
models         ``import_model("model.tflite" | "model.onnx")``, ``graph.load_graph("graph.npz")``
simulation     ``simulate(model, config, x, y)`` (a per-node report), ``sweep``, ``IntegerGraph.run``
RTL            ``export_vectors(graph, directory, x)``, ``compare``

The architecture (which subpackage holds what, and how to add a frontend, an op or a format) is in
``docs/architecture.md`` of the repository; ``dir(fxpsim)`` lists every public name.

Every public name is re-exported here lazily (``fxpsim.matmul``, ``fxpsim.simulate``, ...), so
``import fxpsim`` stays fast: matplotlib and the optional format readers load only when used.
"""
from __future__ import annotations

import importlib
import os as _os

# OpenMP threads that wait for work sleep instead of spinning (read when libgomp loads, i.e. before the first
# kernel import below; set OMP_WAIT_POLICY yourself to choose otherwise). With spinning, a 2-thread team on a
# busy machine ran a 256^3 saturating matmul at 1.1 GMAC/s against 8.3 with one thread:
# benchmarks/bench_threads.py.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import _compat
from ._version import __version__

_compat.install()   # old module paths (fxpsim.frontends.onnx.importer, ...) keep working

_SUBPACKAGES = ("core", "datapath", "quant", "nn", "graph", "frontends", "rtl", "report", "hardware")
# Modules users reach as ``fxpsim.<name>`` (the README names them), kept where they now live.
_MODULE_ALIASES = {"train": "nn.train", "datasets": "nn.datasets", "requantize": "datapath.requantize",
                   "integer_layers": "datapath.integer_ops", "plots": "report.plots"}


def __getattr__(name: str):
    if name.startswith("_"):          # private names go through the import system
        raise AttributeError(name)
    if name in _SUBPACKAGES or name in ("cli", "io"):
        return importlib.import_module(f".{name}", __name__)
    if name in _MODULE_ALIASES:
        module = importlib.import_module(f".{_MODULE_ALIASES[name]}", __name__)
        globals()[name] = module
        return module
    for package_name in _SUBPACKAGES:
        package = importlib.import_module(f".{package_name}", __name__)
        if name in getattr(package, "__all__", ()):
            value = getattr(package, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'fxpsim' has no attribute {name!r}")


def __dir__():
    names = set(globals()) | set(_SUBPACKAGES) | set(_MODULE_ALIASES)
    for package_name in _SUBPACKAGES:
        names.update(getattr(importlib.import_module(f".{package_name}", __name__), "__all__", ()))
    return sorted(names)
