"""fxpsim.nn.repro.matmul: exact sums (checked with Python integers and Fractions), and training whose bits do not
depend on the BLAS kernel, the thread count or numpy's CPU dispatch (checked in subprocesses)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from fxpsim.nn import repro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _reference(a, b):
    """The method of the module written out with Python integers: per-row / per-column power-of-two scale,
    round half to even, exact integer sum, one rounding to float32 (Fraction -> float64 -> float32 is one
    rounding only when the float64 step is exact, so round the Fraction to float32 directly)."""
    k = a.shape[1]
    room = 53 - (k - 1).bit_length()
    pa, pb = room - room // 2, room // 2

    def mantissas(rows, bits):
        out = []
        for row in rows:
            top = max(abs(Fraction(float(v))) for v in row)
            e = 0 if top == 0 else math.frexp(float(top))[1]
            out.append(([round(Fraction(float(v)) * Fraction(2) ** (bits - e)) for v in row], e - bits))
        return out

    ra, cb = mantissas(a, pa), mantissas(b.T, pb)
    y = np.empty((a.shape[0], b.shape[1]), dtype=np.float32)
    for i, (am, ea) in enumerate(ra):
        for j, (bm, eb) in enumerate(cb):
            s = sum(p * q for p, q in zip(am, bm))
            assert abs(s) <= 2 ** 53
            y[i, j] = _to_float32(Fraction(s) * Fraction(2) ** (ea + eb))
    return y


def _to_float32(q: Fraction) -> np.float32:
    """Round a Fraction to the nearest float32 (ties to even), normal range."""
    if q == 0:
        return np.float32(0.0)
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = math.floor(math.log2(q))
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    m = q / Fraction(2) ** (e - 23)             # in [2^23, 2^24)
    r = round(m)                                # Python rounds half to even
    return np.float32(sign * float(Fraction(r) * Fraction(2) ** (e - 23)))


@pytest.mark.parametrize("shape", [(3, 1, 2), (4, 7, 5), (5, 144, 3), (2, 2048, 2)])
def test_matmul_is_the_exact_integer_method(shape):
    m, k, n = shape
    rng = np.random.default_rng(k)
    a = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-6, 6, (m, 1)))).astype(np.float32)
    b = (rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (1, n)))).astype(np.float32)
    a[0, 0] = 0.0
    got = repro.matmul(a, b)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _reference(a, b))
    # and close to the exact product of the float32 operands: 21+ bits of each operand row / column kept
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * 2.0 ** -20 * np.abs(a).max(axis=1, keepdims=True) * np.abs(b).max(axis=0, keepdims=True)
    assert (np.abs(got - exact) <= bound + np.abs(exact) * 2.0 ** -23).all()


def test_matmul_float64_is_within_a_few_ulps_of_the_exact_sum():
    """float64 operands: three pieces each, six exact products; against the exact Fraction sum."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 300)), rng.standard_normal((300, 3)) * 1e-3
    got = repro.matmul(a, b)
    assert got.dtype == np.float64
    for i in range(4):
        for j in range(3):
            exact = sum(Fraction(float(p)) * Fraction(float(q)) for p, q in zip(a[i], b[:, j]))
            scale = float(np.abs(a[i]).max() * np.abs(b[:, j]).max())
            assert abs(Fraction(float(got[i, j])) - exact) <= Fraction(300 * scale) * Fraction(2) ** -60 + \
                abs(exact) * Fraction(2) ** -52


def test_matmul_hand_cases():
    a = np.array([[1.0, 2.0], [0.0, 0.0], [0.5, -3.0]], np.float32)
    b = np.array([[1.0, -1.0], [0.25, 4.0]], np.float32)
    np.testing.assert_array_equal(repro.matmul(a, b), [[1.5, 7.0], [0.0, 0.0], [-0.25, -12.5]])
    assert repro.matmul(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)).shape == (2, 3)
    # a ulp-sized term next to a large one survives (it would be rounded off by a 21-bit row scale only
    # below 2^-21 of the row maximum)
    a = np.array([[1.0, 2.0 ** -20]], np.float32)
    assert repro.matmul(a, np.ones((2, 1), np.float32))[0, 0] == np.float32(1.0 + 2.0 ** -20)
    assert repro.mantissa_bits(1) == (27, 26) and repro.mantissa_bits(2048) == (21, 21)


@pytest.mark.parametrize("a, b, exc, words", [
    (np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), ValueError, "[M, K] @ [K, N]"),
    (np.ones(3, np.float32), np.ones((3, 1), np.float32), ValueError, "[M, K] @ [K, N]"),
    (np.ones((2, 3), np.int32), np.ones((3, 1), np.float32), TypeError, "floating-point"),
    (np.full((1, 1), np.nan, np.float32), np.ones((1, 1), np.float32), ValueError, "NaN or inf"),
])
def test_matmul_bad_input(a, b, exc, words):
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        repro.matmul(a, b)
    with pytest.raises(ValueError, match="k >= 1"):
        repro.mantissa_bits(0)


_TRAIN = r"""
import hashlib, sys, numpy as np
from fxpsim.hardware import preset
from fxpsim.hardware.qat import datapath_aware
from fxpsim.nn import quantization_scheme, small_cnn
from fxpsim.nn.datasets import load_digits
from fxpsim.nn.train import Adam, CosineLR, fit
x, y = load_digits("train", seed=0)
x, y = x[:96], y[:96]
h = hashlib.sha256()
for aware in (False, True):
    m = small_cnn((8, 8, 1), seed=0, **quantization_scheme("int8"))
    net = datapath_aware(m, preset("int8-acc16-sat").replace(accumulator_bits=14), calibration_x=x,
                         overflow_penalty=3.0) if aware else m
    fit(net, (x, y), 2, 32, Adam(CosineLR(3e-3, 2, 1.5e-4)), seed=0, progress=False, threads=int(sys.argv[1]))
    for k, v in sorted(m.parameters().items()):
        h.update(k.encode()); h.update(np.ascontiguousarray(v).tobytes())
print(h.hexdigest())
"""


# the digest of _TRAIN, recorded on x86-64 (AVX2, OpenBLAS 0.3.31 Haswell kernels, numpy 2.4.6): the bits of a
# training are a function of the code and the data alone, so another machine must print the same
RECORDED_DIGEST = "7c2e085f2ace549e04fd6ef565896dfb83c0a7e316055eebff69c1f44e6ca88c"


def _train_digest(threads, **env):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    out = subprocess.run([sys.executable, "-c", _TRAIN, str(threads)], env=full, capture_output=True, text=True,
                         timeout=600, check=True)
    return out.stdout.strip()


def test_training_bits_do_not_depend_on_blas_kernel_threads_or_cpu_dispatch():
    """The same short plain-QAT and datapath-aware trainings under different OpenBLAS kernels (a
    ``DYNAMIC_ARCH`` build honours ``OPENBLAS_CORETYPE``; Prescott and Sandybridge run on every x86-64),
    thread counts and numpy SIMD dispatch give the same weights bit for bit. With ``np.matmul`` in the
    layers the three kernels gave three different digests on the machine this was written on."""
    threads = min(2, os.cpu_count() or 1)
    base = _train_digest(1)
    runs = {"2 threads": _train_digest(threads),
            "numpy without AVX2/AVX-512": _train_digest(1, NPY_DISABLE_CPU_FEATURES="AVX2 FMA3 AVX512F AVX512_SKX")}
    import platform
    if platform.machine() in ("x86_64", "AMD64"):
        runs["OpenBLAS Prescott kernels"] = _train_digest(threads, OPENBLAS_CORETYPE="Prescott")
        runs["OpenBLAS Sandybridge kernels"] = _train_digest(1, OPENBLAS_CORETYPE="Sandybridge")
    assert runs == {k: base for k in runs}
    assert base == RECORDED_DIGEST
