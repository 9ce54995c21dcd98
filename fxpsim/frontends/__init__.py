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
_LAZY = {"import_tflite": "tflite.importer", "tflite_coverage": "tflite.coverage", "import_onnx": "onnx.importer",
         "onnx_coverage": "onnx.coverage", "onnxruntime_cpu": "onnx.importer",
         "import_qonnx": "qonnx.importer", "Hls4mlModel": "hls4ml.model", "import_float_onnx": "onnx.float_graph",
         "import_float_tflite": "tflite.float_graph"}

__all__ = ["import_model", "import_float_model", "model_coverage"] + list(_LAZY)


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
    reader = _reader_of(path)
    if reader == "tflite":
        from .tflite.importer import import_tflite
        return import_tflite(path, **options)
    if reader == "qonnx":
        from .qonnx.importer import import_qonnx
        return import_qonnx(path, **options)
    from .onnx.importer import import_onnx
    return import_onnx(path, **options)


def import_float_model(path):
    """Read a float (non-quantized) model into a :class:`~fxpsim.graph.extract.FloatGraph`, to run on a float
    datapath (``fxpsim.simulate(graph, "float-target.toml", x)``): ``.onnx`` files go to
    :func:`fxpsim.frontends.onnx.float_graph.import_float_onnx`, ``.tflite`` files to
    :func:`fxpsim.frontends.tflite.float_graph.import_float_tflite`; a QONNX file is a ValueError."""
    reader = _reader_of(path)
    if reader == "tflite":
        from .tflite.float_graph import import_float_tflite
        return import_float_tflite(path)
    if reader != "onnx":
        raise ValueError(f"{os.fspath(path)}: float models are read from .onnx and .tflite files (not {reader})")
    from .onnx.float_graph import import_float_onnx
    return import_float_onnx(path)


def _reader_of(path) -> str:
    """``"tflite"``, ``"qonnx"`` (an ``.onnx`` file with qonnx's custom ops) or ``"onnx"`` for the file at ``path``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head[4:8] == _TFLITE_MAGIC or path.lower().endswith(".tflite"):
        return "tflite"
    if path.lower().endswith(".onnx"):
        from .qonnx.reader import is_qonnx
        return "qonnx" if is_qonnx(path) else "onnx"
    if head[:2] == b"PK":
        raise ValueError(f"{path}: a zip/npz file; fxpsim graphs load with fxpsim.load_graph and trained models "
                         "with fxpsim.load_model")
    raise ValueError(f"{path}: not a .tflite (no TFL3 identifier) or .onnx file")


def model_coverage(path, **options):
    """Which operators of the model at ``path`` fxpsim imports, without importing it and without failing on
    an unsupported one: :func:`tflite_coverage` (per kernel set) or :func:`onnx_coverage`, chosen as
    :func:`import_model` chooses its reader. ``str()`` of the result is the table ``fxpsim inspect --coverage``
    prints."""
    reader = _reader_of(path)
    if reader == "tflite":
        from .tflite.coverage import tflite_coverage
        return tflite_coverage(path, **options)
    from .onnx.coverage import onnx_coverage
    return onnx_coverage(path, **options)
