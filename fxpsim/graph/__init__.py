"""The integer graph every network becomes, and the extraction of trained ``fxpsim.nn`` models."""
from . import extract as _extract_module
from .extract import *  # noqa: F401,F403

__all__ = list(_extract_module.__all__)
