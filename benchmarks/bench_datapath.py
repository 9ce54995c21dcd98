"""Benchmark of the accumulating datapath kernels (fxpsim.datapath).

Every row: a figure, the kernel fxpsim took, fxpsim MAC/s, the baseline and its MAC/s measured in the
same run on the same data (best of N both sides: the machine is shared, the minimum is the least
disturbed figure), their ratio and the target.  ``--before PATH`` also times the same fxpsim calls from
another checkout (e.g. ``git archive`` of an older commit, built in place) in a subprocess: column
``before``.

  (a) exact accumulator                       vs float64 BLAS (numpy matmul) on the same int8 data
  (b) 16-bit register, saturate/wrap, counts  vs a hand-written AVX-512 loop VPMULLW + VPADDSW (no
      counts, 4 rows x 64 columns in registers), compiled here with gcc; target >= 4e10 MAC/s/core
  (c) 17..32-bit registers, saturate, counts  vs a hand-written AVX-512 loop VPMADDWD + VPADDD +
      VPMAXSD + VPMINSD (no counts); target >= 1.5e10 MAC/s/core
      (without AVX-512BW, (b) and (c) take the numpy per-add saturating loop on int16 / int32 codes, with
      counts, as their peer: ``numpy_codes_loop``)
  (d) wrap, count=False (exact sum reduced    vs float64 BLAS on the same shapes; target >= 1x
      once): int8, int16 and int32 operands
  (e) 3x3 conv2d 1x56x56x64 int8, 64 filters, SAME: exact vs im2col + float64 BLAS, 16-bit saturating
      vs the numpy loop over the 576 taps
  (f) 16-bit saturating accumulator vs APyTypes' APyFixedAccumulatorContext, when installed

Data: ``random`` uniform int8 codes (the saturating kernels' common case: some adds overflow), and
``stress`` all products positive (the register sits at its limit and overflows at most adds).
Run:  python benchmarks/bench_datapath.py [--quick] [--before PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

try:                                   # limit BLAS threads for the 1-thread baselines
    from threadpoolctl import threadpool_limits
except ImportError:                    # pragma: no cover
    threadpool_limits = None

HAND_C = r"""
#include <immintrin.h>
#include <stdint.h>
/* b packed in 64-column slabs [N/64][K][64] (fxpsim's layout); 4 rows x 64 columns in registers */
__attribute__((target("avx512f,avx512bw")))
void hand16(const int16_t *a, const int16_t *b, int16_t *out, long M, long K, long N) {
    for (long j0 = 0; j0 < N; j0 += 64) {
        const int16_t *bs = b + (j0 / 64) * K * 64;
        for (long i = 0; i + 4 <= M; i += 4) {
            __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
                    c30 = c00, c31 = c00;
            for (long k = 0; k < K; k++) {
                const __m512i b0 = _mm512_loadu_si512(bs + k * 64), b1 = _mm512_loadu_si512(bs + k * 64 + 32);
                __m512i x = _mm512_set1_epi16(a[i * K + k]);
                c00 = _mm512_adds_epi16(c00, _mm512_mullo_epi16(x, b0)); c01 = _mm512_adds_epi16(c01, _mm512_mullo_epi16(x, b1));
                x = _mm512_set1_epi16(a[(i + 1) * K + k]);
                c10 = _mm512_adds_epi16(c10, _mm512_mullo_epi16(x, b0)); c11 = _mm512_adds_epi16(c11, _mm512_mullo_epi16(x, b1));
                x = _mm512_set1_epi16(a[(i + 2) * K + k]);
                c20 = _mm512_adds_epi16(c20, _mm512_mullo_epi16(x, b0)); c21 = _mm512_adds_epi16(c21, _mm512_mullo_epi16(x, b1));
                x = _mm512_set1_epi16(a[(i + 3) * K + k]);
                c30 = _mm512_adds_epi16(c30, _mm512_mullo_epi16(x, b0)); c31 = _mm512_adds_epi16(c31, _mm512_mullo_epi16(x, b1));
            }
            int16_t *o = out + i * N + j0;
            _mm512_storeu_si512(o, c00); _mm512_storeu_si512(o + 32, c01);
            _mm512_storeu_si512(o + N, c10); _mm512_storeu_si512(o + N + 32, c11);
            _mm512_storeu_si512(o + 2 * N, c20); _mm512_storeu_si512(o + 2 * N + 32, c21);
            _mm512_storeu_si512(o + 3 * N, c30); _mm512_storeu_si512(o + 3 * N + 32, c31);
        }
    }
}
/* 32-bit lanes: exact products of int16 operands by VPMADDWD (even/odd columns), add, clamp */
__attribute__((target("avx512f,avx512bw")))
void hand32(const int16_t *a, const int16_t *b, int32_t *out, long M, long K, long N, int lo, int hi) {
    const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
    for (long j0 = 0; j0 < N; j0 += 64) {
        const int16_t *bs = b + (j0 / 64) * K * 64;
        for (long i = 0; i + 2 <= M; i += 2) {
            __m512i c[2][4];
            for (int r = 0; r < 2; r++) for (int v = 0; v < 4; v++) c[r][v] = _mm512_setzero_si512();
            for (long k = 0; k < K; k++) {
                const __m512i b0 = _mm512_loadu_si512(bs + k * 64), b1 = _mm512_loadu_si512(bs + k * 64 + 32);
                for (int r = 0; r < 2; r++) {
                    const __m512i xe = _mm512_set1_epi32((uint16_t)a[(i + r) * K + k]), xo = _mm512_slli_epi32(xe, 16);
                    const __m512i p[4] = {_mm512_madd_epi16(xe, b0), _mm512_madd_epi16(xo, b0),
                                          _mm512_madd_epi16(xe, b1), _mm512_madd_epi16(xo, b1)};
                    for (int v = 0; v < 4; v++)
                        c[r][v] = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(c[r][v], p[v]), vlo), vhi);
                }
            }
            for (int r = 0; r < 2; r++) for (int v = 0; v < 4; v++) _mm512_storeu_si512(out + (i + r) * N + j0 + 16 * v, c[r][v]);
        }
    }
}
"""


def blas_threads(n):
    return threadpool_limits(limits=n) if threadpool_limits else contextlib.nullcontext()


def best_time(fn, repeat=30, budget=1.5):
    """Smallest wall time of ``fn()`` over up to ``repeat`` runs within about ``budget`` seconds."""
    best, spent = float("inf"), 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
        if spent + dt > budget:
            break
    return best


def hand_kernels():
    """The hand-written AVX-512 baselines (ctypes), or None without gcc / AVX-512BW."""
    from fxpsim.datapath import _accumulate
    if shutil.which("gcc") is None or _accumulate.simd16_level() < 2:
        return None
    tmp = tempfile.mkdtemp()
    src, lib = os.path.join(tmp, "hand.c"), os.path.join(tmp, "hand.so")
    with open(src, "w") as fh:
        fh.write(HAND_C)
    subprocess.run(["gcc", "-O3", "-shared", "-fPIC", src, "-o", lib], check=True)
    dll = ctypes.CDLL(lib)
    p, lng = ctypes.c_void_p, ctypes.c_long
    dll.hand16.argtypes = [p, p, p, lng, lng, lng]
    dll.hand32.argtypes = [p, p, p, lng, lng, lng, ctypes.c_int, ctypes.c_int]
    return dll


def packed(b):
    """b [K, N] int16 in fxpsim's 64-column slabs (the hand loops read the same layout)."""
    k, n = b.shape
    nb = -(-n // 64)
    out = np.zeros((nb, k, 64), np.int16)
    for s in range(nb):
        blk = b[:, s * 64:(s + 1) * 64]
        out[s, :, :blk.shape[1]] = blk
    return out


def data(rng, m, k, n, kind, amax=128):
    a = rng.integers(-amax, amax, (m, k))
    b = rng.integers(-amax, amax, (k, n))
    if kind == "stress":
        a, b = np.abs(a), np.abs(b)
    dtype = np.int8 if amax <= 128 else np.int16 if amax <= 1 << 15 else np.int32
    return a.astype(dtype), b.astype(dtype)


def numpy_loop(a, b, mode, bits=16):
    """The straightforward numpy model of a MAC array (per-add fit, overflow count)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.int64)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    count = 0
    for k in range(a.shape[1]):
        s = acc + np.outer(a[:, k], b[k])
        acc = np.clip(s, lo, hi) if mode == "saturate" else ((s - lo) & ((1 << bits) - 1)) + lo
        count += int(np.count_nonzero(acc != s))
    return acc, count


def numpy_codes_loop(a, b, bits):
    """The numpy per-add saturating register on its own codes (int16 for <= 16 bits, int32 up to 32; the
    sum one width up), with the overflow count: the peer of (b)/(c) where the hand AVX-512 loops cannot run."""
    narrow, wide = (np.int16, np.int32) if bits <= 16 else (np.int32, np.int64)
    a, b = a.astype(wide), b.astype(wide)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    acc = np.zeros((a.shape[0], b.shape[1]), narrow)
    count = 0
    for k in range(a.shape[1]):
        s = acc + np.outer(a[:, k], b[k])
        c = np.clip(s, lo, hi)
        count += int(np.count_nonzero(c != s))
        acc = c.astype(narrow)
    return acc, count


def im2col(x, kh, kw):
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    cols = np.stack([xp[:, i:i + h, j:j + w, :] for i in range(kh) for j in range(kw)], axis=3)
    return cols.reshape(n * h * w, kh * kw * c)


# figure -> (callable on fxpsim.datapath.accumulate, macs); the same list runs in the --before child
def fxpsim_figures(quick: bool, cores: int, new_api: bool = True):
    from fxpsim.datapath.accumulate import conv2d, matmul
    rng = np.random.default_rng(0)
    figs = []
    shapes = [(256, 256, 256)] if quick else [(256, 256, 256), (1024, 1024, 256)]
    cf = {"count": False} if new_api else {}
    for m, k, n in shapes:
        tag = f"{m}x{k}@{k}x{n}"
        macs = m * k * n
        for threads in sorted({1, cores}):
            a, b = data(rng, m, k, n, "random")
            figs.append((f"(a) exact acc {tag} t={threads}", macs, (lambda a=a, b=b, t=threads: matmul(a, b, threads=t)),
                         ("blas64", a, b, threads)))
            for kind in ("random", "stress"):
                a, b = data(rng, m, k, n, kind)
                for mode in ("saturate", "wrap"):
                    figs.append((f"(b) acc16 {mode} counts {kind} {tag} t={threads}", macs,
                                 (lambda a=a, b=b, t=threads, mo=mode: matmul(a, b, 16, overflow=mo, threads=t)),
                                 ("hand16", a, b, threads)))
                figs.append((f"(b) acc16 saturate count=False {kind} {tag} t={threads}", macs,
                             (lambda a=a, b=b, t=threads: matmul(a, b, 16, overflow="saturate", threads=t, **cf)),
                             ("hand16", a, b, threads)))
                # 17..32 bits: int16-range operands whose sums overflow the register
                for bits, amax in ((24, 1 << 11), (32, 1 << 15)):
                    a2, b2 = data(rng, m, k, n, kind, amax)
                    figs.append((f"(c) acc{bits} saturate counts {kind} {tag} t={threads}", macs,
                                 (lambda a=a2, b=b2, t=threads, w=bits: matmul(a, b, w, overflow="saturate", threads=t)),
                                 (f"hand32:{bits}", a2, b2, threads)))
        for threads in sorted({1, cores}):
            for bits, amax, what in ((24, 128, "int8"), (32, 128, "int8"), (48, 1 << 15, "int16"),
                                     (32, 1 << 31, "int32"), (64, 1 << 31, "int32")):
                a, b = data(rng, m, k, n, "random", amax)
                figs.append((f"(d) acc{bits} wrap count=False {what} {tag} t={threads}", macs,
                             (lambda a=a, b=b, t=threads, w=bits: matmul(a, b, w, overflow="wrap", threads=t, **cf)),
                             ("blas64", a, b, threads)))
    x = rng.integers(-128, 128, (1, 56, 56, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 3, 64, 64), dtype=np.int8)
    macs = 56 * 56 * 64 * 576
    for threads in sorted({1, cores}):
        figs.append((f"(e) conv2d 3x3 56x56x64 exact t={threads}", macs,
                     (lambda t=threads: conv2d(x, w, padding="SAME", threads=t)), ("conv-blas64", x, w, threads)))
        figs.append((f"(e) conv2d 3x3 56x56x64 acc16 sat t={threads}", macs,
                     (lambda t=threads: conv2d(x, w, 16, padding="SAME", threads=t)),
                     ("conv-loop" if threads == 1 else "none", x, w, threads)))
    return figs


def time_fxpsim(figs):
    from fxpsim.datapath import accumulate as A
    out = {}
    for name, macs, fn, _ in figs:
        with blas_threads(1 if name.endswith("t=1") else None):
            t = best_time(fn)
        kernel = A.last_path                # the integer kernel behind "int64" where the checkout names it
        out[name] = (macs / t, getattr(A, "last_int64_kernel", "") or kernel if kernel == "int64" else kernel)
    return out


def baseline(spec, hand):
    """(MAC/s, name) of a figure's baseline, measured now on the same data."""
    kind, a, b, threads = spec
    if kind == "blas64":
        af, bf = a.astype(np.float64), b.astype(np.float64)
        with blas_threads(threads):
            return a.shape[0] * a.shape[1] * b.shape[1] / best_time(lambda: af @ bf), "float64 BLAS"
    if kind.startswith("hand") and hand is not None and threads == 1:
        m, k = a.shape
        n = b.shape[1]
        a16, bp = np.ascontiguousarray(a, np.int16), packed(b.astype(np.int16))
        if kind == "hand16":
            o = np.empty((m, n), np.int16)
            t = best_time(lambda: hand.hand16(a16.ctypes.data, bp.ctypes.data, o.ctypes.data, m, k, n))
            return m * k * n / t, "hand AVX-512 mullo+adds"
        bits = int(kind.split(":")[1])
        o = np.empty((m, n), np.int32)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        t = best_time(lambda: hand.hand32(a16.ctypes.data, bp.ctypes.data, o.ctypes.data, m, k, n, lo, hi))
        return m * k * n / t, "hand AVX-512 madd+add+max+min"
    if kind.startswith("hand") and threads == 1:            # no AVX-512BW: the numpy loop on int16/int32 codes
        bits = 16 if kind == "hand16" else int(kind.split(":")[1])
        t = best_time(lambda: numpy_codes_loop(a, b, bits), repeat=3)
        return a.shape[0] * a.shape[1] * b.shape[1] / t, f"numpy per-add int{16 if bits <= 16 else 32} codes"
    if kind == "conv-blas64":
        cols, wf = im2col(a, 3, 3).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
        with blas_threads(threads):
            return cols.shape[0] * cols.shape[1] * wf.shape[1] / best_time(lambda: cols @ wf), "im2col + float64 BLAS"
    if kind == "conv-loop":
        cols, wi = im2col(a, 3, 3).astype(np.int64), b.reshape(-1, b.shape[-1]).astype(np.int64)
        t = best_time(lambda: numpy_loop(cols, wi, "saturate"), repeat=1)
        return cols.shape[0] * cols.shape[1] * wi.shape[1] / t, "numpy per-add loop"
    return None, ""


def check_against_loop():
    """The figures' kernels agree with the numpy model (a sanity check, not a test)."""
    from fxpsim.datapath.accumulate import matmul
    rng = np.random.default_rng(1)
    a, b = data(rng, 64, 128, 64, "random")
    for mode in ("saturate", "wrap"):
        ref_acc, ref_count = numpy_loop(a.astype(np.int64), b.astype(np.int64), mode)
        got = matmul(a, b, 16, overflow=mode)
        assert np.array_equal(got.raw, ref_acc) and got.overflows == ref_count


def apytypes_row(rows):
    try:
        import apytypes as apy
    except ImportError:
        return
    from fxpsim.datapath.accumulate import matmul
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (64, 256)).astype(np.int64)
    b = rng.integers(-128, 128, (256, 64)).astype(np.int64)
    pa = apy.APyFixedArray.from_float(a.astype(np.float64), int_bits=8, frac_bits=0)
    pb = apy.APyFixedArray.from_float(b.astype(np.float64), int_bits=8, frac_bits=0)

    def apy_matmul():
        with apy.APyFixedAccumulatorContext(int_bits=16, frac_bits=0, quantization=apy.QuantizationMode.TRN,
                                            overflow=apy.OverflowMode.SAT):
            return pa @ pb
    macs = 64 * 256 * 64
    t_apy = best_time(apy_matmul, repeat=3)
    t_ours = best_time(lambda: matmul(a, b, 16, overflow="saturate", threads=1))
    rows.append(("(f) acc16 sat 64x256@256x64 t=1", "", macs / t_ours, macs / t_apy, f"APyTypes {apy.__version__}",
                 None, ">= 100x"))


def target_of(name):
    if name.startswith("(b)") and "counts" in name and name.endswith("t=1"):
        return ">= 4e10"
    if name.startswith("(c)") and name.endswith("t=1"):
        return ">= 1.5e10"
    if name.startswith("(d)"):
        return ">= 1x BLAS"
    if name.startswith("(a)"):
        return ">= 0.7x BLAS"
    return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    parser.add_argument("--before", metavar="PATH", help="also time another fxpsim checkout (subprocess)")
    parser.add_argument("--child-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from fxpsim.datapath import _acc_operands, accumulate as A
    cores = _acc_operands._CORES
    import inspect
    new_api = "count" in inspect.signature(A.matmul).parameters
    figs = fxpsim_figures(args.quick, cores, new_api)
    if args.child_json:
        print(json.dumps({k: list(v) for k, v in time_fxpsim(figs).items()}))
        return
    before = {}
    if args.before:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.before))
        cmd = [sys.executable, os.path.abspath(__file__), "--child-json"] + (["--quick"] if args.quick else [])
        res = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
        before = json.loads(res.stdout.strip().splitlines()[-1])
    check_against_loop()
    hand = hand_kernels()
    ours = time_fxpsim(figs)
    rows = []
    for name, macs, fn, spec in figs:
        base, base_name = baseline(spec, hand)
        rows.append((name, ours[name][1], ours[name][0], base, base_name, before.get(name, [None])[0], target_of(name)))
    apytypes_row(rows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"fxpsim datapath benchmark -- {platform.processor() or platform.machine()}, {cores} core(s), "
          f"load average {load:.1f} (other work running: figures are best of N), SIMD dispatch: "
          f"{A._k.has_simd_dispatch()}, 16-bit lanes: {('none', 'AVX2', 'AVX-512BW')[A._k.simd16_level()]}, "
          f"numpy {np.__version__}")
    hdr = f"{'figure':52s} {'kernel':8s} {'fxpsim MAC/s':>12s} {'baseline MAC/s':>14s} {'ratio':>6s}"
    hdr += f" {'before':>9s} {'x before':>8s}" if before else ""
    print(hdr + "  baseline / target")
    for name, kernel, mine, base, base_name, prev, target in rows:
        line = f"{name:52s} {kernel:8s} {mine:12.3e} " + (f"{base:14.3e} {mine / base:6.2f}" if base else f"{'':14s} {'':6s}")
        if before:
            line += f" {prev:9.2e} {mine / prev:8.2f}" if prev else f" {'':9s} {'':8s}"
        print(line + f"  {base_name}{' / ' + target if target else ''}")


if __name__ == "__main__":
    main()
