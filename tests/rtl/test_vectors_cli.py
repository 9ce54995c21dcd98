"""'fxpsim export-vectors' and 'fxpsim compare' run as a user would (``python -m fxpsim`` in a temporary
directory), and docs/rtl.md's shell and Python blocks run as written (from a copy of the repository layout)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim import nn, train
from fxpsim.rtl import read_mem, write_mem

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "rtl.md"
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                    reason="iverilog not installed (apt-get install iverilog)")


def run(*args, cwd, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "fxpsim", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    x, y = fxpsim.load_digits("train", flatten=True)
    model = nn.mlp((64, 16, 10), seed=0)
    train.fit(model, (x, y), epochs=1, progress=False)
    return train.save_model(model, tmp_path_factory.mktemp("model") / "mlp.npz")


@pytest.fixture(scope="module")
def exported(model_file, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    toml = d / "npu.toml"
    toml.write_text('name = "npu"\n[accumulator]\nbits = 16\noverflow = "saturate"\n'
                    '[requantization]\nscheme = "tflite-double"\n')
    r = run("export-vectors", "--model", str(model_file), "--config", str(toml), "--samples", "8", "--out", "vec",
            "--format", "hex,npy,csv", "--mac-trace", "0:dense:1,2,40", "--mac-trace", "1:dense", "--limit", "2",
            cwd=d)
    assert r.returncode == 0, r.stderr
    return d, r


def test_help(tmp_path):
    for cmd in ("export-vectors", "compare"):
        r = run(cmd, "--help", cwd=tmp_path)
        assert r.returncode == 0 and f"usage: fxpsim {cmd}" in r.stdout


def test_export_vectors_writes_the_files(exported):
    d, r = exported
    m = json.loads((d / "vec" / "manifest.json").read_text())
    assert m["batch"] == 8 and m["formats"] == ["hex", "npy", "csv"] and m["datapath"]["name"] == "npu"
    for e in m["files"]:
        assert (d / "vec" / e["path"]).is_file(), e["path"]
    nodes = {n["name"]: n for n in m["nodes"]}
    assert nodes["0:dense"]["mac_trace"]["outputs"] == [1, 2]          # --limit 2
    assert nodes["1:dense"]["mac_trace"]["outputs"] == [0, 1]
    assert "examples/rtl/run.sh vec/01_0_dense/tb_dense" in r.stdout
    assert (d / "vec" / "02_1_dense" / "tb_dense" / "params.env").is_file()
    assert (d / "vec" / "fxpsim_params.svh").read_text().count("localparam") > 20


def test_export_vectors_from_a_saved_graph_and_npy_inputs(model_file, tmp_path):
    x, _ = fxpsim.load_digits("train", flatten=True)
    graph = fxpsim.convert(train.load_model(model_file), "tflite-int8", x[:100])
    graph.save(tmp_path / "g.npz")
    xt, _ = fxpsim.load_digits("test", flatten=True)
    np.save(tmp_path / "x.npy", xt[:3])
    r = run("export-vectors", "--model", "g.npz", "--data", "x.npy", "--out", "v", "--format", "mem",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert m["batch"] == 3 and {e["format"] for e in m["files"] if e.get("set") == "golden"} == {"mem", "npy"}
    # tflite-int8 requantizes dense layers in float: no multipliers, no testbench folder, and it says why
    assert all(n.get("tb_dense") is None for n in m["nodes"])
    assert "no tb_dense folder" in r.stdout
    acc = read_mem(tmp_path / "v" / "01_0_dense" / "accumulator.mem", 32, True, radix=2, shape=(3, 16))
    _, traces, _ = graph.run(xt[:3], fxpsim.preset("tflite-int8"), trace=True, keep=True)
    assert np.array_equal(acc, traces["0:dense"]["acc"])


@pytest.mark.parametrize("args, message", [
    (["--format", "hex,vhdl"], "formats must be"),
    (["--mac-trace", "nope:1"], "no node named 'nope'"),
    (["--mac-trace", "0:dense:99999"], "out of range"),
    (["--mac-trace", "quantize"], "traces are for MAC nodes"),
    (["--limit", "0"], "positive integer"),
    (["--config", "no-such-preset"], "no-such-preset"),
])
def test_export_vectors_usage_errors(model_file, tmp_path, args, message):
    r = run("export-vectors", "--model", str(model_file), "--samples", "2", "--out", "v", *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("fxpsim: error:") and len(r.stderr.splitlines()) == 1
    assert message in r.stderr
    r = run("export-vectors", "--model", "missing.npz", "--out", "v", cwd=tmp_path)
    assert r.returncode == 2 and "model file not found" in r.stderr


def test_compare_exit_codes(exported, tmp_path):
    d, _ = exported
    golden = d / "vec"
    y = np.load(golden / "02_1_dense" / "output.npy").astype(np.int64)
    write_mem(tmp_path / "y.hex", y, 8, True)
    r = run("compare", "--golden", str(golden), "--rtl", f"1:dense/output={tmp_path / 'y.hex'}", cwd=tmp_path)
    assert r.returncode == 0 and "MATCH" in r.stdout, r.stderr
    y[2, 3] = -y[2, 3] if y[2, 3] not in (0, -128) else 5
    dump = tmp_path / "dump" / "02_1_dense"
    dump.mkdir(parents=True)
    write_mem(dump / "output.hex", y, 8, True)
    r = run("compare", "--golden", str(golden), "--rtl", "dump", "--html", "page.html", cwd=tmp_path)
    assert r.returncode == 1 and "MISMATCH" in r.stdout and "element (n=2, m=3)" in r.stdout
    assert "data:image/png;base64," in (tmp_path / "page.html").read_text()
    (dump / "output.hex").write_text("00\n" * 79 + "0g\n")
    r = run("compare", "--golden", str(golden), "--rtl", "dump", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "line 80: malformed word '0g'" in r.stderr
    r = run("compare", "--golden", str(tmp_path), "--rtl", "dump", cwd=tmp_path)
    assert r.returncode == 2 and "not a golden vector directory" in r.stderr
    r = run("compare", "--golden", str(golden), "--rtl", "dump", "--rtl", "dump", cwd=tmp_path)
    assert r.returncode == 2 and "--rtl takes one dump directory" in r.stderr
    r = run("compare", "--golden", str(golden), cwd=tmp_path)
    assert r.returncode == 2 and "--rtl" in r.stderr


# ----------------------------------------------------------------------------------------- docs/rtl.md
def _blocks(text):
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(bash|python)\n(.*?)```", text, re.S)]


def test_doc_blocks_are_bash_and_python_in_order():
    kinds = [k for k, _ in _blocks(DOC.read_text())]
    assert kinds[0] == "python" and kinds.count("bash") >= 5 and kinds[-1] == "python"
    assert DOC.read_text().startswith("## Verifying RTL against fxpsim")


@needs_iverilog
def test_doc_runs_as_written(tmp_path):
    """Every block of docs/rtl.md, in order, from a directory laid out like the repository root (examples/rtl
    linked in, `fxpsim` on PATH): the reports say what the document shows."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "rtl").symlink_to(REPO / "examples" / "rtl")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "fxpsim"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fxpsim "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("K", "M", "N", "ACC_BITS", "SATURATE", "BIAS_PRELOAD", "X_ZP", "OUT_ZP", "ACT_MIN", "ACT_MAX",
              "DEFINES"):
        env.pop(k, None)
    outputs = []
    namespace: dict = {}
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        for kind, block in _blocks(DOC.read_text()):
            if kind == "bash":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=300)
                assert r.returncode == 0, f"{block}\n{r.stdout}\n{r.stderr}"
                outputs.append(r.stdout)
            else:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(block, str(DOC), "exec"), namespace)
                outputs.append(out.getvalue())
    finally:
        os.chdir(cwd)
    text = "\n".join(outputs)
    assert "MATCH -- 4 tensor(s)" in text
    assert "wrapped where saturation was expected" in text and "exit status 1" in text
    assert "<- sums part ways (first overflow)" in text
    assert (tmp_path / "rtl-demo" / "compare.html").is_file()
    shown = re.search(r"```text\n(.*?)```", DOC.read_text(), re.S).group(1)
    digits = lambda t: re.sub(r"[0-9a-f]*[0-9][0-9a-f]*", "#", t)   # noqa: E731 (numbers depend on training)
    for line in shown.splitlines():                       # the report's fixed lines appear as documented
        if line.startswith(("fxpsim compare:", "First mismatch", "  in this tensor", "MAC sequence", "#")):
            assert digits(line) in digits(text), line
    assert "1 (n=0" in outputs[-1]


@needs_iverilog
def test_readme_rtl_section_runs_as_written(tmp_path):
    """The README's five-minute version: its one bash block, from a directory laid out like the repository."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Verifying RTL against fxpsim", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "rtl").symlink_to(REPO / "examples" / "rtl")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "fxpsim"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fxpsim "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k not in ("K", "M", "N", "ACC_BITS", "SATURATE", "DEFINES")}
    env.update(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "MATCH -- " in r.stdout and "wrapped where saturation was expected" in r.stdout
    assert "exit status 1" in r.stdout and "<- sums part ways (first overflow)" in r.stdout
    assert (tmp_path / "rtl-demo" / "compare.html").is_file()


def test_export_vectors_of_an_imported_model_default_to_its_runtime(tmp_path):
    """No --config on an imported .tflite: the vectors are made on the model's own runtime arithmetic
    (LiteRT's reference kernels: the datapath its import is bit-exact with), not on the tflite-int8 preset; the
    golden outputs of the last node are the graph's outputs on that datapath."""
    pytest.importorskip("tflite", reason="the tflite extra (pip install -e '.[tflite]') reads the model")
    model = Path(__file__).resolve().parents[1] / "vectors" / "tflite_models" / "conv_block.tflite"
    graph = fxpsim.import_model(str(model))
    spec = graph.tensors[graph.inputs[0]]
    x = np.random.default_rng(3).integers(-128, 128, (2,) + tuple(spec.shape)).astype(spec.dtype)
    np.save(tmp_path / "x.npy", x)
    r = run("export-vectors", "--model", str(model), "--data", str(tmp_path / "x.npy"), "--out",
            str(tmp_path / "vec"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "vec" / "manifest.json").read_text())
    assert manifest["datapath"]["name"] == graph.default_datapath.name == "litert-reference"
    out = next(f for f in manifest["files"] if f.get("set") == "golden" and f["format"] == "npy"
               and f.get("role") == "output" and f.get("node") == graph.nodes[-1].name)
    np.testing.assert_array_equal(np.load(tmp_path / "vec" / out["path"]).reshape(len(x), -1),
                                  graph.run(x).reshape(len(x), -1))
    r2 = run("export-vectors", "--model", str(model), "--data", str(tmp_path / "x.npy"), "--out",
             str(tmp_path / "vec2"), "--config", "tflite-int8", cwd=tmp_path)
    assert r2.returncode == 0 and json.loads((tmp_path / "vec2" / "manifest.json").read_text())["datapath"][
        "name"] == "tflite-int8"
