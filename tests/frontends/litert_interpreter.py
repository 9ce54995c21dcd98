"""A LiteRT interpreter of a ``.tflite`` file for one of fxpsim's kernel sets, one thread (skips without
``ai-edge-litert``): ``reference`` = ``BUILTIN_REF``, ``builtin`` = ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``,
``xnnpack`` = ``BUILTIN`` (the XNNPACK delegate; it cannot preserve intermediate tensors)."""
from __future__ import annotations

import pytest


def litert_interpreter(model_path, kernels: str):
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert not installed (pip install -e '.[litert]')")
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"reference": OpResolverType.BUILTIN_REF,
                "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "xnnpack": OpResolverType.BUILTIN}[kernels]
    it = Interpreter(model_path=str(model_path), num_threads=1, experimental_op_resolver_type=resolver,
                     experimental_preserve_all_tensors=kernels != "xnnpack")
    it.allocate_tensors()
    return it
