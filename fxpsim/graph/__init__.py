"""The integer graph every network becomes (:mod:`.ir`), the semantics of its ops (:mod:`.ops`), and the
extraction of trained ``fxpsim.nn`` models into float stages (:mod:`.extract`)."""
from . import extract as _extract_module
from . import ir
from .extract import *  # noqa: F401,F403
from .ir import *  # noqa: F401,F403

IntegerGraph = ir.IntegerGraph
__all__ = list(_extract_module.__all__) + list(ir.__all__)
