"""The README's quickstart runs and prints what its comments promise; its two set-up commands
are the ones .ci/run executes."""
import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_quickstart_runs_and_prints_the_documented_values():
    block = re.search(r"## Quickstart\s+```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README quickstart", "exec"), {})
    promised = [m.group(1).strip() for m in re.finditer(r"print\(.*?\)\s*#\s*(.*)", block)]
    printed = [line.strip() for line in out.getvalue().splitlines()]
    assert printed == promised


def test_every_python_block_runs(tmp_path, monkeypatch):
    """The README's examples run as written, in order, in one namespace (the later ones use the
    model trained in the training example)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")      # the shipped example models
    namespace = {}
    for block in re.findall(r"```python\n(.*?)```", README, re.S):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block, "README", "exec"), namespace)
    assert namespace["report"].network["accuracy"] > 0.9
    assert (tmp_path / "my-report" / "report.html").exists()


def test_exactly_two_setup_commands_and_ci_uses_the_test_one():
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", setup, re.S)
    assert commands == ['pip install -e . && fxpsim demo', 'pip install -e ".[test]" && pytest -n auto']
    ci = (ROOT / ".ci" / "run").read_text()
    assert "grep -m1 -E '^pip install -e \"\\.\\[test\\]\"' README.md" in ci
