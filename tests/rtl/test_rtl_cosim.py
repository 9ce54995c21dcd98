"""Co-simulation: examples/rtl/dense_pe.v (Icarus Verilog) against fxpsim.quantized_fully_connected.

Every case generates int8 data, computes the golden accumulator and outputs with fxpsim, writes the
testbench's $readmemh files with :func:`fxpsim.rtl.write_mem`, runs ``examples/rtl/run.sh`` in a
temporary directory and requires the RTL's ``acc_out.hex`` and ``y_out.hex`` to agree bit for bit.
Bug-injected builds of the same RTL (``-DBUG_...``) must disagree.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fxpsim
from fxpsim.datapath.requantize import Requantizer
from fxpsim.rtl import read_mem, write_mem

RTL_DIR = Path(__file__).resolve().parents[2] / "examples" / "rtl"
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("vvp") is None,
                                    reason="iverilog not installed (apt-get install iverilog)")


@dataclass(frozen=True)
class Case:
    kind: str            # "realistic", "rounding" or "extremes"
    acc_bits: int
    saturate: int
    preload: int
    K: int = 64
    M: int = 8
    N: int = 16

    @property
    def id(self) -> str:
        return (f"{self.kind}-acc{self.acc_bits}-{'sat' if self.saturate else 'wrap'}-"
                f"{'preload' if self.preload else 'biasend'}")

    @property
    def seed(self) -> int:
        return ["realistic", "rounding", "extremes"].index(self.kind) * 1000 + self.acc_bits * 4 \
            + self.saturate * 2 + self.preload


def make_data(case: Case) -> dict:
    """Inputs, weights, bias, requantizer and scalars of one case."""
    rng = np.random.default_rng(case.seed)
    K, M, N, A = case.K, case.M, case.N, case.acc_bits
    acc_lo, acc_hi = -(1 << (A - 1)), (1 << (A - 1)) - 1
    if case.kind == "realistic":
        # Half the vectors use the full int8 range (a 12/16-bit accumulator overflows at most adds),
        # half are activation-like values around the zero point.
        x_zp = -12
        full = rng.integers(-128, 128, (N // 2, K))
        act = np.clip(np.rint(rng.normal(x_zp, 30, (N - N // 2, K))), -128, 127)
        x = np.concatenate([full, act]).astype(np.int8)
        w = np.clip(np.rint(rng.normal(0, 60, (M, K))), -127, 127).astype(np.int8)
        s_x, s_w = 0.04, rng.uniform(0.002, 0.02, M)
        exact = (x.astype(np.int64) - x_zp) @ w.astype(np.int64).T
        bias = np.clip(np.rint(rng.normal(0, 0.3 * exact.std(), M)), acc_lo // 2, acc_hi // 2).astype(np.int64)
        # output scale: int8 spans about 3 sigma of the exact sums, or the accumulator range if smaller
        s_y = s_x * float(np.mean(s_w)) * min(3 * exact.std(), 2.0 ** (A - 1)) / 127
        requant = Requantizer.tflite(s_x, s_w, s_y, kind="double")
        scalars = dict(x_zp=x_zp, out_zp=3, act_min=-128, act_max=127)
    elif case.kind == "rounding":
        # Small sums and real multipliers in [2^-3.5, 2^-1): right shifts of 1..4 and outputs that
        # are rarely clamped, so RoundingDivideByPOT ties (negative ones included) are frequent.
        x_zp = 3
        x = (x_zp + rng.integers(-9, 10, (N, K))).astype(np.int8)
        w = rng.integers(-9, 10, (M, K)).astype(np.int8)
        bias = rng.integers(-50, 51, M)
        requant = Requantizer.tflite(1.0, 2.0 ** -rng.uniform(1.0, 3.5, M), 1.0, kind="double")
        scalars = dict(x_zp=x_zp, out_zp=-5, act_min=-128, act_max=127)
    else:
        # Corner cases of the requantizer: INT32_MIN multipliers (SRDHM saturation), negative
        # multipliers, the largest left and right shifts, full-range int8 (w = -128 too), biases at
        # the accumulator limits and a ReLU-like clamp.  Channel 1 keeps acc at its minimum when it
        # saturates (bias = acc_min preloaded, every product <= 0 as x - x_zp >= 0).
        x_zp = -128
        x = rng.integers(-128, 128, (N, K)).astype(np.int8)
        w = rng.integers(-128, 128, (M, K)).astype(np.int8)
        w[1] = -np.abs(w[1].astype(np.int16)).clip(-128, 0).astype(np.int8)
        bias = rng.integers(acc_lo, acc_hi, M, endpoint=True)
        bias[0], bias[1], bias[2] = acc_hi, acc_lo, 0
        mult = [INT32_MIN, INT32_MIN, INT32_MAX, -int(rng.integers(1 << 30, 1 << 31)), 1 << 30,
                int(rng.integers(1 << 30, 1 << 31)), int(rng.integers(INT32_MIN, INT32_MAX)), 1]
        shift = [30, 0, -31, int(rng.integers(-31, 0)), 1, 12, -1, 30]
        requant = Requantizer("double", multiplier=tuple(mult), shift=tuple(shift))
        scalars = dict(x_zp=x_zp, out_zp=-20, act_min=-20, act_max=100)
    return dict(x=x, w=w, bias=np.asarray(bias, np.int64), requant=requant, **scalars)


def golden(case: Case, d: dict):
    return fxpsim.quantized_fully_connected(
        d["x"], d["w"], d["bias"], requant=d["requant"], x_zp=d["x_zp"], out_zp=d["out_zp"],
        act_min=d["act_min"], act_max=d["act_max"], out_dtype=np.int8, acc=case.acc_bits,
        overflow="saturate" if case.saturate else "wrap", order="sequential",
        bias_at="init" if case.preload else "end")


def simulate(case: Case, d: dict, workdir: Path, defines=(), params_file: bool = False):
    """Write the vectors, run examples/rtl/run.sh there, return (acc, y) read back from the RTL."""
    workdir.mkdir(parents=True, exist_ok=True)
    write_mem(workdir / "x.hex", d["x"], 8, True, layout="[N][K] row-major")
    write_mem(workdir / "w.hex", d["w"], 8, True, layout="[M][K] row-major")
    write_mem(workdir / "bias.hex", d["bias"], 32, True)
    write_mem(workdir / "mult.hex", np.array(d["requant"].multiplier), 32, True)
    write_mem(workdir / "shift.hex", np.array(d["requant"].shift), 8, True)
    settings = dict(K=case.K, M=case.M, N=case.N, ACC_BITS=case.acc_bits, SATURATE=case.saturate,
                    BIAS_PRELOAD=case.preload, X_ZP=d["x_zp"], OUT_ZP=d["out_zp"], ACT_MIN=d["act_min"],
                    ACT_MAX=d["act_max"])
    env = {k: v for k, v in os.environ.items() if k not in settings and k != "DEFINES"}
    if params_file:
        (workdir / "params.env").write_text("# written by test_rtl_cosim\n"
                                            + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    else:
        env.update({k: str(v) for k, v in settings.items()})
    env["DEFINES"] = " ".join(f"-D{name}" for name in defines)
    proc = subprocess.run(["bash", str(RTL_DIR / "run.sh"), str(workdir)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"simulation failed:\n{proc.stdout}\n{proc.stderr}"
    acc = read_mem(workdir / "acc_out.hex", case.acc_bits, True, shape=(case.N, case.M))
    y = read_mem(workdir / "y_out.hex", 8, True, shape=(case.N, case.M))
    return acc, y


def mismatch_report(name, got, want) -> str:
    bad = np.argwhere(got != want)
    if not bad.size:
        return ""
    n, o = bad[0]
    return (f"{name}: {len(bad)} of {want.size} differ; first at vector {n}, channel {o}: "
            f"RTL {int(got[n, o])}, fxpsim {int(want[n, o])}")


CASES = ([Case("realistic", a, s, p) for a in (12, 16, 20, 32) for s in (0, 1) for p in (0, 1)]
         + [Case("rounding", 16, 1, 1), Case("rounding", 32, 0, 0)]
         + [Case("extremes", 32, 1, 1), Case("extremes", 32, 0, 0), Case("extremes", 2, 1, 0),
            Case("extremes", 9, 0, 1)])


@needs_iverilog
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rtl_matches_fxpsim(case, tmp_path):
    d = make_data(case)
    ref = golden(case, d)
    if case.kind == "realistic" and case.acc_bits <= 16:
        assert ref.overflows >= case.N * case.M, "the data should overflow a 12/16-bit accumulator often"
    acc, y = simulate(case, d, tmp_path, params_file=case.kind != "realistic")
    problems = [p for p in (mismatch_report("acc", acc, ref.acc), mismatch_report("y", y, ref.out)) if p]
    assert not problems, f"{case.id}: " + "; ".join(problems)


def test_cases_reach_the_corners():
    """The data exercise what they are meant to: SRDHM saturation, negative RDBPOT ties, clamping."""
    case = Case("extremes", 32, 1, 1)
    d = make_data(case)
    ref = golden(case, d)
    mult, shift = np.array(d["requant"].multiplier), np.array(d["requant"].shift)
    a = ((ref.acc << np.maximum(shift, 0)) + (1 << 31)) % (1 << 32) - (1 << 31)   # int32 wrap
    assert np.sum((a == INT32_MIN) & (mult == INT32_MIN)) >= case.N
    assert np.any(ref.out == d["act_min"]) and np.any(ref.out == d["act_max"])
    case = Case("rounding", 16, 1, 1)
    d = make_data(case)
    ref = golden(case, d)
    rq = d["requant"]
    right = -np.array(rq.shift)
    srdhm = fxpsim.requantize.saturating_rounding_doubling_high_mul(ref.acc, np.array(rq.multiplier))
    ties = (srdhm < 0) & ((srdhm & ((1 << right) - 1)) == (1 << (right - 1)))
    assert ties.sum() >= 10
    assert np.mean((ref.out > -128) & (ref.out < 127)) > 0.75


# Each injected bug, the case that must expose it, and whether the accumulator is already wrong
# (False: only the requantized outputs differ).
BUGS = [
    ("BUG_WRAP_INSTEAD_OF_SAT", Case("realistic", 12, 1, 0), True),
    ("BUG_ACC_ONE_BIT_NARROW", Case("realistic", 16, 1, 1), True),
    ("BUG_SWAPPED_WEIGHT_LAYOUT", Case("realistic", 32, 0, 0), True),
    ("BUG_ROUND_HALF_UP", Case("rounding", 16, 1, 1), False),
    ("BUG_SRDHM_FLOOR", Case("rounding", 32, 0, 0), False),
    ("BUG_SRDHM_NO_SAT", Case("extremes", 32, 1, 1), False),
]


@needs_iverilog
@pytest.mark.parametrize("bug, case, acc_wrong", BUGS, ids=[b[0] for b in BUGS])
def test_injected_bug_is_detected(bug, case, acc_wrong, tmp_path):
    d = make_data(case)
    ref = golden(case, d)
    acc, y = simulate(case, d, tmp_path, defines=[bug])
    assert not np.array_equal(y, ref.out), f"{bug} went unnoticed in the outputs of {case.id}"
    assert np.array_equal(acc, ref.acc) != acc_wrong, \
        f"{bug}: accumulator {'should' if acc_wrong else 'should not'} differ"


@needs_iverilog
def test_undefined_rtl_output_is_reported(tmp_path):
    """A short x.hex leaves a memory word undefined; the x's reach acc_out.hex and read_mem names them."""
    case = Case("realistic", 16, 1, 0, K=4, M=2, N=2)
    d = make_data(case)
    simulate(case, d, tmp_path)                      # complete files: reads back fine
    write_mem(tmp_path / "x.hex", d["x"].reshape(-1)[:-1], 8, True)
    env = dict(os.environ, K="4", M="2", N="2", ACC_BITS="16", DEFINES="")
    proc = subprocess.run(["bash", str(RTL_DIR / "run.sh"), str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # 8 header lines, vector 0 on lines 9-10 (intact), vector 1 from line 11 (reads an undefined x)
    with pytest.raises(ValueError, match="undefined value at line 11"):
        read_mem(tmp_path / "acc_out.hex", 16, True)


@needs_iverilog
def test_run_sh_rejects_bad_settings(tmp_path):
    (tmp_path / "params.env").write_text("K=64\nACC_BITS=sixteen\n")
    proc = subprocess.run(["bash", str(RTL_DIR / "run.sh"), str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "params.env line 2" in proc.stderr
    (tmp_path / "params.env").write_text("ACC_BITS=40\n")
    for name in ("x", "w", "shift"):
        write_mem(tmp_path / f"{name}.hex", np.zeros(8 * 64 if name != "shift" else 8, np.int8), 8, True)
    for name in ("bias", "mult"):
        write_mem(tmp_path / f"{name}.hex", np.zeros(8, np.int32), 32, True)
    proc = subprocess.run(["bash", str(RTL_DIR / "run.sh"), str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "ACC_BITS_must_be_2_to_32" in proc.stdout + proc.stderr


@needs_iverilog
def test_readme_round_trip_runs(tmp_path, monkeypatch):
    """examples/rtl/README.md's Python block runs as written (from a copy of the repository layout)."""
    import contextlib
    import io
    import re

    block = re.search(r"```python\n(.*?)```", (RTL_DIR / "README.md").read_text(), re.S).group(1)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "rtl").symlink_to(RTL_DIR)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "examples/rtl/README.md", "exec"), {})
    assert "RTL and fxpsim agree" in out.getvalue()
