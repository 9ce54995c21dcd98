#!/usr/bin/env bash
# Mutation testing of one fxpsim module with mutmut (3.x), in a throw-away copy of the checkout.
#
#   tools/mutation/run_mutmut.sh MODULE TEST [TEST ...]      (a TEST may be a pytest option: --deselect=...)
#   tools/mutation/run_mutmut.sh fxpsim/datapath/requantize.py tests/datapath/test_requantize.py
#
# Why a copy: mutmut rewrites the sources it mutates into ./mutants/ and needs its settings in
# pyproject.toml; neither belongs in the checkout other people work in.  The copy holds the
# working tree's tracked and untracked-but-not-ignored files (so new, uncommitted tests count),
# the built Cython extensions (*.so: mutmut copies sources into mutants/ and the package must
# import from there), and a [tool.mutmut] section appended to its pyproject.toml.
#
# Environment:
#   WORKDIR   where the copy goes (default /tmp/fxpsim-mutmut-<module stem>); wiped first
#   SNAPSHOT  set to a git revision (e.g. HEAD) to mutate that commit's tree instead of the
#             working tree (use it for a file someone else is editing right now)
#   JOBS      mutmut --max-children (default 2)
#   NICE      niceness (default 19: mutation runs are long and the machine is shared)
#   TIMEOUT_MULTIPLIER, TIMEOUT_CONSTANT  mutmut's per-mutant time limit (default 60 x the
#             clean run + 20 s: a niced run on a busy machine is slow, not hung)
#   MUTANTS   space-separated mutant-name globs (mutmut's fnmatch), e.g. '*ǁReportǁto_html__mutmut_*':
#             run only those mutants of MODULE (for a module too large to run whole); the summary
#             then counts only the matching mutants
#
# OpenMP runs on one thread (OMP_THREAD_LIMIT=1, BLAS likewise): mutmut forks every mutant's process
# from a parent that has run the tests, and a libgomp thread pool does not survive a fork (the child
# hangs in its first parallel region until the timeout).  Threads never change a result here.
#
# Output: mutmut's progress, then "mutmut results" (surviving and untested mutants, by name)
# and a one-line summary; the copy stays in WORKDIR for "mutmut show NAME" / "mutmut browse".
# Scores are recorded by hand in tools/mutation/README.md.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,5p' "$0" >&2
    exit 2
fi
module=$1; shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
stem=$(basename "$module" .py)
workdir=${WORKDIR:-/tmp/fxpsim-mutmut-$stem}
jobs=${JOBS:-2}
niceness=${NICE:-19}

case "$workdir" in
    /tmp/*) ;;
    *) echo "WORKDIR must be under /tmp (it is wiped)" >&2; exit 2 ;;
esac
rm -rf "$workdir"
mkdir -p "$workdir"

cd "$repo"
if [ -n "${SNAPSHOT:-}" ]; then
    git archive "$SNAPSHOT" | tar -x -C "$workdir"
else
    # (files deleted in the working tree but still in the index are skipped)
    git ls-files -z --cached --others --exclude-standard \
        | python3 -c 'import os, sys; sys.stdout.write("".join(p + "\0" for p in sys.stdin.read().split("\0") if p and os.path.lexists(p)))' \
        | tar -c --null -T - -f - | tar -x -C "$workdir" -f -
fi
# built extensions (ignored by git, needed by the mutated copy)
find fxpsim -name '*.so' -print0 | tar -c --null -T - -f - | tar -x -C "$workdir" -f -

test -f "$workdir/$module" || { echo "no such module: $module" >&2; exit 2; }
for t in "$@"; do     # test paths, or pytest options such as --deselect=PATH::TEST
    case "$t" in -*) continue ;; esac
    test -e "$workdir/${t%%::*}" || { echo "no such test path: $t" >&2; exit 2; }
done

toml_list() {   # "a" "b" -> ["a", "b"]
    local out="" x
    for x in "$@"; do out="$out${out:+, }\"$x\""; done
    printf '[%s]' "$out"
}
cat >> "$workdir/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = $(toml_list "$module")
pytest_add_cli_args_test_selection = $(toml_list "$@")
also_copy = ["fxpsim", "tests", "benchmarks", "tools"]   # model files and fixture generators some tests load
pytest_add_cli_args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
use_git_change_detection = false
# generous: the machine is shared and the run is niced, so a starved test must not read as a timeout
timeout_multiplier = ${TIMEOUT_MULTIPLIER:-60}
timeout_constant = ${TIMEOUT_CONSTANT:-20}
EOF

read -r -a mutant_globs <<< "${MUTANTS:-}"     # no pathname expansion of the globs
cd "$workdir"
start=$(date +%s)
# mutmut draws a spinner with carriage returns: the raw log goes to mutmut-run.log, and only
# the lines that are not spinner frames (plus the last frame: the final counts) are shown
OMP_THREAD_LIMIT=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n "$niceness" mutmut run --max-children "$jobs" "${mutant_globs[@]}" > mutmut-run.log 2>&1 || echo "mutmut run: exit $?"
python3 - <<'PY'
import re
lines = open("mutmut-run.log", encoding="utf-8", errors="replace").read().replace("\r", "\n").split("\n")
frame = re.compile("^[\u2800-\u28ff] ")
frames = [l for l in lines if frame.match(l)]
print("\n".join(l for l in lines if l.strip() and not frame.match(l)))
if frames:
    print("final:", frames[-1])
PY
end=$(date +%s)
echo
echo "== surviving / untested mutants =="
mutmut results 2>/dev/null || true
echo
mutmut results --all true 2>/dev/null | MUTANTS="${MUTANTS:-}" python3 -c '
import fnmatch, os, sys
pats = os.environ["MUTANTS"].split()
for line in sys.stdin:
    name = line.split(":")[0].strip()
    if not pats or any(fnmatch.fnmatch(name, p) for p in pats):
        sys.stdout.write(line)' | awk -F': ' '{print $2}' | sort | uniq -c \
    | awk -v mod="$module" -v secs=$((end - start)) '
        {n[$2 (NF > 2 ? " " $3 : "")] = $1; total += $1}
        END {printf "SUMMARY %s: %d mutants, killed %d, survived %d, no tests %d, timeout %d, suspicious %d, %ds\n",
             mod, total, n["killed"], n["survived"], n["no tests"], n["timeout"], n["suspicious"], secs}'
