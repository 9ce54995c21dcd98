"""Module paths that moved, and where they went: ``import fxpsim.io.onnx`` keeps working and gives the very
module :mod:`fxpsim.frontends.onnx.importer` (the same object, so attributes set on one are seen on both).

One table, one finder on ``sys.meta_path`` (installed by ``import fxpsim``); new code imports the new paths.
Nothing here is imported until an old path is asked for.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old module path -> the module it is now
MOVED = {
    "fxpsim.io.tflite": "fxpsim.frontends.tflite.importer",
    "fxpsim.io.tflite_reader": "fxpsim.frontends.tflite.reader",
    "fxpsim.io.tflite_shape_ops": "fxpsim.frontends.tflite.shape_ops",
    "fxpsim.graph.tflite_ops": "fxpsim.frontends.tflite.ops",
    "fxpsim.io.onnx": "fxpsim.frontends.onnx.importer",
    "fxpsim.io.onnx_nodes": "fxpsim.frontends.onnx.nodes",
    "fxpsim.io.onnx_qdq": "fxpsim.frontends.onnx.qdq",
    "fxpsim.io.onnx_qoperator": "fxpsim.frontends.onnx.qoperator",
    "fxpsim.graph.onnx_ops": "fxpsim.frontends.onnx.ops",
    "fxpsim.io.models": "fxpsim.frontends",
    "fxpsim.io.vectors": "fxpsim.rtl.vectors",
    "fxpsim.io.golden": "fxpsim.rtl.golden",
    "fxpsim.io.memfile": "fxpsim.rtl.memfile",
    "fxpsim.io.svh": "fxpsim.rtl.svh",
    "fxpsim.io.mac_model": "fxpsim.rtl.mac_model",
    "fxpsim.io.mismatch": "fxpsim.rtl.mismatch",
    "fxpsim.io.compare": "fxpsim.rtl.compare",
    "fxpsim.io.compare_results": "fxpsim.rtl.compare_results",
    "fxpsim.datapath.tflite_ops": "fxpsim.datapath.tflite",
    "fxpsim.datapath.onnx_ops": "fxpsim.datapath.onnxruntime.mlas",
    "fxpsim.datapath.x86_pairs": "fxpsim.datapath.onnxruntime.x86_pairs",
    "fxpsim.nn.datapath_qat": "fxpsim.hardware.qat",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the module it now is."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
