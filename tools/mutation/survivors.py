"""List the surviving (and untested) mutants of a finished mutmut run as one-line diffs.

    python tools/mutation/survivors.py WORKDIR [MODULE]

WORKDIR is the copy run_mutmut.sh made (e.g. /tmp/fxpsim-mutmut-requantize); MODULE the
mutated file relative to it (default: the only *.py.meta under WORKDIR/mutants).  Reads
mutmut's own files (the mutated module, where every mutant is a function
``x_NAME__mutmut_N`` beside ``x_NAME__mutmut_orig``, and the ``.meta`` exit codes), so it is
much faster than one ``mutmut show`` per mutant.  Output: per function, the status and the
changed lines of each mutant; a mutant is "survived" (exit 0), "no tests" (33) or
"timeout" (36 / -24 / 24); killed mutants are not shown.
"""
from __future__ import annotations

import ast
import difflib
import json
import sys
from collections import defaultdict
from pathlib import Path

STATUS = {0: "survived", 33: "no tests", 36: "timeout", -24: "timeout", 24: "timeout", 34: "skipped",
          35: "suspicious", 37: "caught by type check", -11: "segfault", None: "not checked"}


def main(argv: list[str]) -> int:
    work = Path(argv[1])
    if len(argv) > 2:
        meta = work / "mutants" / (argv[2] + ".meta")
    else:
        metas = list((work / "mutants").rglob("*.py.meta"))
        if len(metas) != 1:
            print(f"give MODULE: found {len(metas)} .meta files", file=sys.stderr)
            return 2
        meta = metas[0]
    src_path = meta.with_suffix("")
    exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
    source = src_path.read_text()
    tree = ast.parse(source)
    funcs = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
            funcs[node.name] = ast.get_source_segment(source, node).splitlines()
    by_func = defaultdict(list)
    for key, code in sorted(exit_codes.items(), key=lambda kv: (kv[0].rsplit("_", 1)[0],
                                                                   int(kv[0].rsplit("_", 1)[1]))):
        if code is not None and code not in (0, 33, 36, -24, 24, 35, -11):
            continue
        short = key.split(".")[-1]           # x_NAME__mutmut_N or xǁClassǁmethod__mutmut_N
        base = short.rsplit("__mutmut_", 1)[0]
        orig, mut = funcs.get(base + "__mutmut_orig"), funcs.get(short)
        if orig is None or mut is None:
            by_func[base].append((key, STATUS.get(code, code), ["(source not found)"]))
            continue
        orig = [orig[0].replace("__mutmut_orig", "")] + orig[1:]
        mut = [mut[0].replace("__mutmut_" + short.rsplit("__mutmut_", 1)[1], "")] + mut[1:]
        diff = [d for d in difflib.unified_diff(orig, mut, lineterm="", n=0)
                if d[:1] in "+-" and not d.startswith(("+++", "---"))]
        by_func[base].append((key, STATUS.get(code, code), diff))
    for base, items in by_func.items():
        print(f"## {base}  ({len(items)})")
        for key, status, diff in items:
            print(f"  [{status}] {key.rsplit('__mutmut_', 1)[1]}")
            for d in diff:
                print("      " + d.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
