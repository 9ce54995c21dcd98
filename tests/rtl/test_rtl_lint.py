"""The example engines are lint-clean under ``verilator --lint-only -Wall`` (any Verilator: only its linter runs),
for conv2d and depthwise configurations of conv_stream.v and with each planted-bug define (a bug build may
leave the parameter it overrides unused: UNUSEDPARAM is waived for those)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RTL = Path(__file__).resolve().parents[2] / "examples" / "rtl"
pytestmark = pytest.mark.skipif(shutil.which("verilator") is None,
                                reason="verilator not installed (apt-get install verilator)")

CONV = {"conv2d 3x3 SAME": {},
        "depthwise, multiplier 2, padded": {"DEPTHWISE": 1, "C": 12, "M": 24, "DM": 2, "PT": 1, "PL": 1, "H": 4, "W": 4,
                                            "OH": 4, "OW": 4, "ACC_BITS": 16},
        "conv2d 1x1, 12-bit saturating, preloaded": {"KH": 1, "KW": 1, "OH": 8, "OW": 8, "ACC_BITS": 12,
                                                     "BIAS_PRELOAD": 1}}
BUGS = ["BUG_WRAP_INSTEAD_OF_SAT", "BUG_ACC_ONE_BIT_NARROW", "BUG_ROUND_HALF_UP", "BUG_WEIGHTS_HWIO",
        "BUG_PAD_ZERO_CODE"]


def lint(top, files, params=None, define=None):
    cmd = ["verilator", "--lint-only", "-Wall", "--top-module", top] + [str(RTL / f) for f in files]
    cmd += [f"-G{k}={v}" for k, v in (params or {}).items()]
    if define:
        cmd += [f"-D{define}", "-Wno-UNUSEDPARAM"]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("config", list(CONV))
def test_conv_stream_is_lint_clean(config):
    r = lint("conv_stream", ["conv_stream.v", "dense_pe.v"], CONV[config])
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("define", BUGS)
def test_conv_stream_bug_builds_are_lint_clean(define):
    r = lint("conv_stream", ["conv_stream.v", "dense_pe.v"], define=define)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr


def test_a_depthwise_engine_whose_channels_do_not_match_fails_to_elaborate():
    r = lint("conv_stream", ["conv_stream.v", "dense_pe.v"], {"DEPTHWISE": 1, "C": 8, "M": 12, "DM": 2})
    assert r.returncode != 0 and "conv_stream_depthwise_M_must_be_C_times_DM" in r.stderr


def test_dense_stream_is_lint_clean():
    r = lint("dense_stream", ["dense_stream.v", "dense_pe.v"])
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr
