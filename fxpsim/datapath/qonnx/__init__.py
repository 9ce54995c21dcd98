"""QONNX's arithmetic (the qonnx custom ops' integer semantics, :mod:`.arithmetic`) and the exact scales of an
imported QONNX graph (:mod:`.scales`)."""
from . import arithmetic, scales  # noqa: F401

__all__: list = []
