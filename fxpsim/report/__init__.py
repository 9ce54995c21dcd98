"""Per-node records and their renderings (:mod:`.render`: text, JSON, Markdown, HTML) and plots
(:mod:`.plots`, matplotlib loaded only when a plot is drawn)."""
from . import render
from .render import *  # noqa: F401,F403

__all__ = list(render.__all__)
