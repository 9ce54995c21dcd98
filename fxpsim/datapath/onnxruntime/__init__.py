"""onnxruntime's CPU arithmetic: its MLAS kernels (:mod:`.mlas`) and the int16 pair saturation of its x86
AVX2 uint8 x int8 kernels (:mod:`.x86_pairs`)."""
from . import mlas, x86_pairs  # noqa: F401

__all__: list = []
