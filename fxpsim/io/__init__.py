"""The old home of the format readers and the RTL files, kept so that code written for it keeps working:
the model readers now live in :mod:`fxpsim.frontends` (one folder per format) and the RTL verification in
:mod:`fxpsim.rtl`.  ``fxpsim.io.<name>`` gives the same objects; the old submodule paths
(``fxpsim.io.onnx``, ``fxpsim.io.vectors``, ...) are aliases (:data:`fxpsim._compat.MOVED`).
"""
import importlib

# public name -> the package that defines it now (imported on first use)
_NOW = {"import_model": "frontends", "import_tflite": "frontends", "import_onnx": "frontends",
        "onnxruntime_cpu": "frontends", "export_vectors": "rtl", "compare": "rtl", "write_mem": "rtl",
        "read_mem": "rtl", "read_mem_header": "rtl", "write_csv_codes": "rtl", "read_csv_codes": "rtl"}

__all__: list = list(_NOW)


def __getattr__(name: str):
    if name in _NOW:
        value = getattr(importlib.import_module(f"fxpsim.{_NOW[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
