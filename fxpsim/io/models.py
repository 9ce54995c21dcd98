"""One entry point for models made elsewhere: :func:`import_model` picks the reader from the file."""
from __future__ import annotations

import os

__all__ = ["import_model"]

_TFLITE_MAGIC = b"TFL3"   # FlatBuffers file identifier at bytes 4..8 of every .tflite file


def import_model(path, **options):
    """Read a quantized model into an :class:`~fxpsim.graph.IntegerGraph`.

    ``.tflite`` files (recognised by their ``TFL3`` identifier) go to :func:`fxpsim.import_tflite`,
    ``.onnx`` files to :func:`fxpsim.import_onnx`; ``options`` are passed on (e.g. ``kernels="xnnpack"``
    for TFLite). fxpsim's own saved graphs load with :func:`fxpsim.load_graph` and its trained models
    with :func:`fxpsim.load_model`.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head[4:8] == _TFLITE_MAGIC or path.lower().endswith(".tflite"):
        from .tflite import import_tflite
        return import_tflite(path, **options)
    if path.lower().endswith(".onnx"):
        from .onnx import import_onnx
        return import_onnx(path, **options)
    if head[:2] == b"PK":
        raise ValueError(f"{path}: a zip/npz file; fxpsim graphs load with fxpsim.load_graph and trained models "
                         "with fxpsim.load_model")
    raise ValueError(f"{path}: not a .tflite (no TFL3 identifier) or .onnx file")
