"""tools/mutation/status.py: the per-module score table read from tools/mutation/README.md."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "mutation"))
import status  # noqa: E402

SAMPLE = """\
# x

## Scores

| module | tests selected | mutants | killed | survived | no tests | timeouts | runtime |
|---|---|---|---|---|---|---|---|
| `fxpsim/a.py`, before | t | 10 | 4 | 6 | 0 | 0 | 5 s |
| `fxpsim/b.py` (f, g only), before | t | 8 | 8 | 0 | 0 | 0 | 1 s |
| `fxpsim/a.py`, after (per-mutant check) | t | 10 | 9 | 1 (equivalent) | 0 | 0 | - |

## Other

| `fxpsim/c.py`, before | t | 1 | 1 | 0 | 0 | 0 | 1 s |
"""


def test_latest_row_per_module_from_the_scores_section_only():
    rows = status.read_scores(SAMPLE)
    assert rows == {"fxpsim/a.py": {"label": "after (per-mutant check)", "mutants": 10, "killed": 9,
                                    "survived": 1, "no_tests": 0, "timeouts": 0},
                    "fxpsim/b.py": {"label": "(f, g only), before", "mutants": 8, "killed": 8, "survived": 0,
                                    "no_tests": 0, "timeouts": 0}}


def test_every_scored_module_exists_and_every_module_is_listed():
    text = status.table()
    lines = text.splitlines()
    mods = status.modules()
    assert "fxpsim/graph/ir.py" in mods and "fxpsim/__init__.py" in mods
    assert len(lines) == len(mods) + 2 and "rows naming no current module" not in text
    assert lines[-1].endswith(f"of {len(mods)} modules have a mutation score")
    by_module = {ln.split()[0]: ln for ln in lines[1:-1]}
    assert set(by_module) == set(mods)
    assert "1435/1519 94%" in by_module["fxpsim/datapath/requantize.py"]
