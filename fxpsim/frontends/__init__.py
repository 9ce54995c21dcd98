"""Models made elsewhere, one folder per format: :mod:`.tflite` (``.tflite`` flatbuffers) and :mod:`.onnx`.

Each folder holds the format's reader, the graph ops that give its operators their runtime's integer
semantics (registered with :mod:`fxpsim.graph.ops` when the folder is imported, and found by name when a
saved graph names one), and its shape folding.  The arithmetic itself lives in :mod:`fxpsim.datapath`
(``datapath/tflite``, ``datapath/onnxruntime``).  :func:`import_model` picks the reader from the file.

The readers load lazily: ``import fxpsim`` never imports ``tflite``, ``flatbuffers`` or ``onnx``.
"""
from __future__ import annotations

import importlib
import os

# public name -> module of this package that defines it (imported on first use)
_LAZY = {"import_tflite": "tflite.importer", "import_onnx": "onnx.importer", "onnxruntime_cpu": "onnx.importer",
         "import_qonnx": "qonnx.importer"}

__all__ = ["import_model"] + list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_TFLITE_MAGIC = b"TFL3"   # FlatBuffers file identifier at bytes 4..8 of every .tflite file


def import_model(path, **options):
    """Read a quantized model into an :class:`~fxpsim.graph.IntegerGraph`.

    ``.tflite`` files (recognised by their ``TFL3`` identifier) go to :func:`fxpsim.import_tflite`,
    ``.onnx`` files to :func:`fxpsim.import_onnx`, or to :func:`fxpsim.import_qonnx` when they hold qonnx's
    custom ops (``Quant``, ``BipolarQuant``, ``Trunc``, ``MultiThreshold``); ``options`` are passed on (e.g. ``kernels="xnnpack"``
    for TFLite). fxpsim's own saved graphs load with :func:`fxpsim.load_graph` and its trained models
    with :func:`fxpsim.load_model`.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head[4:8] == _TFLITE_MAGIC or path.lower().endswith(".tflite"):
        from .tflite.importer import import_tflite
        return import_tflite(path, **options)
    if path.lower().endswith(".onnx"):
        from .qonnx.reader import is_qonnx
        if is_qonnx(path):
            from .qonnx.importer import import_qonnx
            return import_qonnx(path, **options)
        from .onnx.importer import import_onnx
        return import_onnx(path, **options)
    if head[:2] == b"PK":
        raise ValueError(f"{path}: a zip/npz file; fxpsim graphs load with fxpsim.load_graph and trained models "
                         "with fxpsim.load_model")
    raise ValueError(f"{path}: not a .tflite (no TFL3 identifier) or .onnx file")
