"""An atheris (libFuzzer) target for :func:`fxpsim.graph.load_graph`: any bytes must load (and run) or raise
``ValueError``; anything else is a finding.

    pip install atheris
    python tools/fuzz/atheris_load_graph.py CORPUS_DIR -max_total_time=600 -rss_limit_mb=1024

Seed ``CORPUS_DIR`` with ``python -m tools.fuzz.mutate CORPUS_DIR`` (a good graph and its mutants).
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from fxpsim.graph import load_graph

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from tools.fuzz.mutate import sample_input  # noqa: E402

_PATH = os.path.join(tempfile.mkdtemp(), "g.npz")


def one_input(data: bytes) -> None:
    with open(_PATH, "wb") as fh:
        fh.write(data)
    try:
        g = load_graph(_PATH)
    except ValueError as exc:
        assert str(exc).startswith(_PATH), exc
        return
    g.run(sample_input(g))


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
