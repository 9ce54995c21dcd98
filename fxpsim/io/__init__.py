"""Readers and writers of other tools' formats: ``.tflite`` and ``.onnx`` models (:func:`import_model`),
``$readmemh``/``$readmemb`` files (:mod:`.memfile`), golden vectors and RTL dumps.

The format readers load lazily: ``import fxpsim`` never imports ``tflite``, ``flatbuffers`` or ``onnx``.
"""
import importlib

from .memfile import read_csv_codes, read_mem, read_mem_header, write_csv_codes, write_mem

# public name -> module of this package that defines it (imported on first use)
_LAZY = {"import_model": "models", "import_tflite": "tflite", "import_onnx": "onnx",
         "onnxruntime_cpu": "onnx", "export_vectors": "vectors", "compare": "compare"}

__all__: list = ["write_mem", "read_mem", "read_mem_header", "write_csv_codes", "read_csv_codes"] + list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
