"""Re-check the survivors of a finished mutmut run against new tests, one mutant at a time (the "after" score
without a second full run).

    python tools/mutation/recheck.py WORKDIR TEST [TEST ...]

WORKDIR is the copy run_mutmut.sh made (e.g. /tmp/fxpsim-mutmut-svh).  Every mutant the run left "survived"
or "no tests" (exit code 0 or 33 in mutmut's ``.meta``) is activated the way mutmut activates it (the
``MUTANT_UNDER_TEST`` environment variable read by the trampolines of ``WORKDIR/mutants``) and the given
tests, copied from this checkout into ``WORKDIR/mutants`` first, run against it with ``pytest -x``:
a failure kills it.  Prints one line per mutant and ``RECHECK killed K of N (still alive: names)``.
Environment: ``MUTANTS`` (space-separated globs) restricts the mutants rechecked, ``UNCHECKED=1`` adds the
mutants the run never reached (a run stopped early: the score is then that of the given tests alone),
``NICE`` (default 19).
"""
from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALIVE = (0, 33)
STATUS = {0: "survived", 33: "no tests", None: "not checked"}


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    work = Path(argv[1]) / "mutants"
    tests = argv[2:]
    metas = list(work.rglob("*.py.meta"))
    if len(metas) != 1:
        print(f"expected one .meta file under {work}, found {len(metas)}", file=sys.stderr)
        return 2
    codes = json.loads(metas[0].read_text())["exit_code_by_key"]
    globs = os.environ.get("MUTANTS", "").split()
    alive_codes = ALIVE + ((None,) if os.environ.get("UNCHECKED") == "1" else ())
    names = sorted((k for k, c in codes.items() if c in alive_codes and (not globs or any(fnmatch.fnmatch(k, g)
                                                                                     for g in globs))),
                   key=lambda k: (k.rsplit("__mutmut_", 1)[0], int(k.rsplit("_", 1)[1])))
    for t in tests:
        if t.startswith("-"):
            continue
        src = REPO / t.split("::")[0]
        dst = work / t.split("::")[0]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    # like mutmut: import once, then fork one child per mutant (the trampolines read MUTANT_UNDER_TEST at
    # every call), so a mutant costs its tests, not an interpreter start
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_THREAD_LIMIT"):
        os.environ[var] = "1"
    os.nice(int(os.environ.get("NICE", "19")))
    os.chdir(work)
    sys.path.insert(0, str(work))
    import pytest
    import fxpsim  # noqa: F401  (the mutated copy, imported before the forks)
    assert Path(fxpsim.__file__).resolve().is_relative_to(work.resolve()), fxpsim.__file__
    alive = []
    for name in ["clean.run"] + names:                      # first no mutant (another module's name): must pass
        pid = os.fork()
        if pid == 0:                                        # child: run the tests against this mutant
            os.environ["MUTANT_UNDER_TEST"] = name
            with open(work.parent / "recheck-last.log", "w") as log:     # the last mutant's pytest output
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
            os._exit(int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests])))
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if name == "clean.run":
            if code != 0:
                print(f"the tests fail without a mutant (exit {code}): fix them first\n"
                      + (work.parent / "recheck-last.log").read_text()[-3000:], file=sys.stderr)
                return 1
            continue
        state = "killed" if code == 1 else "ALIVE" if code == 0 else f"error {code}"
        if code == 0:
            alive.append(name)
        print(f"{state:>8}  {name}  (was {STATUS[codes[name]]})", flush=True)
    print(f"RECHECK killed {len(names) - len(alive)} of {len(names)}"
          + (f" (still alive: {', '.join(n.rsplit('.', 1)[1] for n in alive)})" if alive else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
