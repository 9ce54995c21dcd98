"""The pieces of :mod:`fxpsim.frontends.onnx.importer` that its converters share: the supported ops, the model's nodes
and values as the importer sees them, and the error for an unsupported op."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: The ONNX ops :func:`import_onnx` reads (``com.microsoft`` contrib ops marked so).
SUPPORTED_OPS = (
    "QuantizeLinear", "DequantizeLinear", "Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Relu", "Clip", "Flatten", "Reshape", "Concat", "Identity", "Constant",
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "com.microsoft:QGemm",
    "com.microsoft:QLinearAdd", "com.microsoft:QLinearMul", "com.microsoft:QLinearGlobalAveragePool",
    "com.microsoft:QLinearAveragePool", "com.microsoft:QLinearConcat",
    "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Div", "Sub", "Pow",
    "com.microsoft:QLinearSigmoid", "com.microsoft:QLinearLeakyRelu",
    "Transpose", "Slice", "Split", "Gather", "Pad", "Squeeze", "Unsqueeze", "Resize",
    "Softmax", "com.microsoft:QLinearSoftmax", "ReduceMean", "ConvTranspose",
    "LayerNormalization", "Erf",
)

_MS = "com.microsoft"
_FLOAT_TYPES = (np.float32, np.float64, np.float16)
_TARGETS = ("Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu",
            "Clip", "Flatten", "Reshape", "Concat")
_F32_EPS = np.float32(np.finfo(np.float32).eps)


def _require_onnx():
    try:
        import onnx
        from onnx import numpy_helper  # noqa: F401
    except ImportError as exc:
        raise ImportError("fxpsim.import_onnx needs the 'onnx' package: pip install -e '.[onnx]' from the clone") from exc
    return onnx


# ----------------------------------------------------------------------------------------- model nodes
@dataclass
class _ONode:
    op: str
    domain: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.domain}:{self.op}" if self.domain else self.op


@dataclass
class _Val:
    """What an ONNX tensor is in the graph being built."""
    kind: str                     # "int" | "float" | "dq" | "const" | "fchain" (elementwise float ops of codes)
    g: str = ""                   # graph tensor (int / float)
    shape: tuple = ()             # per-sample ONNX shape (activations), full shape (constants)
    dtype: object = None
    src: str = ""                 # "dq": the dequantized ONNX tensor
    scale: object = None          # "dq": float32 array
    zp: object = None             # "dq": int64 array
    axis: int | None = None       # "dq": per-channel axis
    data: object = None           # "const"
    float_only: bool = False      # "dq": dequantized codes moved by a float op (not a DequantizeLinear output)


def _unsupported(node: _ONode, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"unsupported ONNX op {node.key} in node {node.name!r}{extra}; fxpsim.import_onnx "
                      f"supports: {', '.join(SUPPORTED_OPS)}")
