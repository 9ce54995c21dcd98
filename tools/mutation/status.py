"""Every fxpsim module with its latest mutation score, or "not yet run".

    python tools/mutation/status.py            # the table (module, lines, latest row, killed / mutants)
    python tools/mutation/status.py --run-only # only the modules with a score

The scores are read from the table under "## Scores" in tools/mutation/README.md (the one place they are
written down, by hand, after each run): a row's first cell names the module in backquotes, then what the row
is ("before", "after (per-mutant check)", the functions a partial run covered); the later of two rows of a
module is its latest.  The score is killed / mutants of that row, over the mutants it ran.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _int(cell: str):
    m = re.match(r"\s*(\d+)", cell)
    return int(m.group(1)) if m else None


def read_scores(readme: str) -> dict:
    """``{module path: row}`` of the latest row per module, a row being ``{"label", "mutants", "killed",
    "survived", "no_tests", "timeouts"}`` (ints, or None where the cell holds no number)."""
    rows: dict = {}
    in_scores = False
    for line in readme.splitlines():
        if line.startswith("## "):
            in_scores = line.strip() == "## Scores"
            continue
        if not in_scores or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.match(r"`([^`]+\.py)`(.*)", cells[0])
        if m is None or len(cells) < 7:
            continue
        label = m.group(2).strip(" ,")
        rows[m.group(1)] = {"label": label, "mutants": _int(cells[2]), "killed": _int(cells[3]),
                            "survived": _int(cells[4]), "no_tests": _int(cells[5]), "timeouts": _int(cells[6])}
    return rows


def modules(root: str = ROOT) -> list:
    """Every ``fxpsim/**/*.py`` path, relative to the repository root, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "fxpsim")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        out += [os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                for f in filenames if f.endswith(".py")]
    return sorted(out)


def table(root: str = ROOT, run_only: bool = False) -> str:
    with open(os.path.join(root, "tools", "mutation", "README.md"), encoding="utf-8") as fh:
        scores = read_scores(fh.read())
    mods = modules(root)
    lines = [f"{'module':<48} {'lines':>5}  {'killed/mutants':>14}  latest row"]
    for mod in mods:
        with open(os.path.join(root, mod), encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        row = scores.get(mod)
        if row is None:
            if not run_only:
                lines.append(f"{mod:<48} {n:>5}  {'not yet run':>14}")
            continue
        k, t = row["killed"], row["mutants"]
        score = f"{k}/{t} {100 * k / t:.0f}%" if k is not None and t else "-"
        lines.append(f"{mod:<48} {n:>5}  {score:>14}  {row['label']}")
    done = sum(1 for m in mods if m in scores)
    lines.append(f"{done} of {len(mods)} modules have a mutation score")
    missing = sorted(set(scores) - set(mods))
    if missing:
        lines.append("rows naming no current module: " + ", ".join(missing))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-only", action="store_true", help="list only the modules with a score")
    args = p.parse_args(argv)
    print(table(run_only=args.run_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
