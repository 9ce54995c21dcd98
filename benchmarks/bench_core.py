"""Benchmark of the fixed-point core against numpy's best expressions (and APyTypes / fxpmath when installed).

N = 10^6 values, format Q7.8 (16-bit word, 8 fraction bits), one thread.  Both sides are timed the same
way: best of ``--repeat`` runs (the least disturbed one, as timeit recommends), after one warm-up call.
Each numpy baseline is the fastest of several equivalent expressions (allocating one result array, as
fxpsim does).  The code -> code rows have numpy peers on int64, int32 and int16 codes (int16: computed on
int32, stored back as int16, as fxpsim stores Q7.8 codes).  Two data sets:

* ``in-range``: codes in [lo/2, hi/2], so sums stay in range and products rarely overflow;
* ``overflow``: codes uniform over the whole format, so about a quarter of the sums and most of the
  products overflow.

``ratio`` = numpy time / fxpsim time: >= 1 means fxpsim is at least as fast.  fxpsim's results are
exact for every input and count the overflows; the numpy expressions do not count (rows marked
``+count`` add numpy's cheapest count).  ``peak MiB``: tracemalloc peak of one fxpsim call (the
result included).

    python benchmarks/bench_core.py [--n 1000000] [--repeat 30]
"""
from __future__ import annotations

import argparse
import os
import time
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fxpsim  # noqa: E402
from fxpsim.core.fixed import Format, add, from_float, from_raw, mul  # noqa: E402


def best_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def best_of(fns, repeat: int) -> float:
    """The fastest of several equivalent numpy expressions."""
    return min(best_time(fn, repeat) for fn in fns)


def peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def optional_baselines(x: np.ndarray, repeat: int) -> dict:
    out = {}
    try:
        import apytypes as apy
        q = apy.QuantizationMode.RND
        o = apy.OverflowMode.SAT

        def apy_from_float():
            a = apy.APyFixedArray.from_float(x, int_bits=24, frac_bits=24)
            return a.cast(int_bits=8, frac_bits=8, quantization=q, overflow=o)
        out["APyTypes from_float + cast(RND, SAT)"] = best_time(apy_from_float, max(3, repeat // 3))
    except ImportError:
        pass
    try:
        from fxpmath import Fxp
        small = x[: x.size // 10]

        def fxp():
            return Fxp(small, signed=True, n_word=16, n_frac=8, rounding="around", overflow="saturate")
        out["fxpmath Fxp(rounding='around') [x10 from N/10]"] = 10 * best_time(fxp, 3)
    except ImportError:
        pass
    return out


def numpy_forms(ia, ib, lo, hi, store):
    """Equivalent numpy forms of the saturating add and of mul + requantize on codes ``ia``, ``ib``.

    int64 and int32 codes compute in their own dtype (no overflow for Q7.8: products < 2^31); int16 codes
    compute on int32 (int16 sums and products would wrap) and ``store`` the result back as int16."""
    wide = np.int32 if ia.dtype == np.int16 else ia.dtype

    def narrow(t):
        return t.astype(store) if store != t.dtype else t

    def add_clip():
        return narrow(np.clip(np.add(ia, ib, dtype=wide), lo, hi))

    def add_inplace():
        t = np.add(ia, ib, dtype=wide)
        return narrow(np.clip(t, lo, hi, out=t))

    def add_minmax():
        t = np.add(ia, ib, dtype=wide)
        np.maximum(t, lo, out=t)
        return narrow(np.minimum(t, hi, out=t))

    def requant_into(minmax):
        def run():
            t = np.multiply(ia, ib, dtype=wide)
            t += 128
            t >>= 8
            if minmax:
                np.maximum(t, lo, out=t)
                return narrow(np.minimum(t, hi, out=t))
            return narrow(np.clip(t, lo, hi, out=t))
        return run

    adds, muls = [add_clip, add_inplace, add_minmax], [requant_into(False), requant_into(True)]
    if store != wide:                              # clip straight into the narrow result
        def add_clip_into():
            return np.clip(np.add(ia, ib, dtype=wide), lo, hi, out=np.empty(ia.shape, store), casting="unsafe")

        def requant_clip_into():
            t = np.multiply(ia, ib, dtype=wide)
            t += 128
            t >>= 8
            return np.clip(t, lo, hi, out=np.empty(ia.shape, store), casting="unsafe")
        adds.append(add_clip_into)
        muls.append(requant_clip_into)
    return adds, muls


def code_rows(name, ia, ib, fmt, repeat):
    """Rows of the code -> code operations on one data set, with numpy on int64, int32 and int16 codes."""
    lo, hi = fmt.min_code, fmt.max_code
    fa, fb = from_raw(ia, fmt), from_raw(ib, fmt)
    peers = {dt: (ia.astype(dt), ib.astype(dt)) for dt in (np.int64, np.int32, np.int16)}
    add_rows, mul_rows, sum_rows = [], [], []
    for dt, (a, b) in peers.items():
        adds, muls = numpy_forms(a, b, lo, hi, dt)
        label = np.dtype(dt).name
        add_rows.append((f"numpy {label} clip(a+b, lo, hi), best form", best_of(adds, repeat)))
        mul_rows.append((f"numpy {label} clip((a*b + 128) >> 8), best form", best_of(muls, repeat)))
        wide = np.int32 if dt == np.int16 else dt
        sum_rows.append((f"numpy {label} a + b" + (" (into int32)" if wide != dt else ""),
                         best_of([lambda: np.add(a, b, dtype=wide)], repeat)))
    a64 = peers[np.int64][0]

    def count_add():
        t = np.clip(a64 + peers[np.int64][1], lo, hi)
        return t, np.count_nonzero((t == lo) | (t == hi))       # (a lower bound of the count)

    add_rows.append(("numpy int64 same + count", best_time(count_add, repeat)))
    return [
        (f"saturating add -> Q7.8 [{name}]", lambda: add(fa, fb, fmt, overflow="saturate"), add_rows),
        (f"multiply + requantize -> Q7.8 [{name}]", lambda: mul(fa, fb, fmt, "half_up", "saturate"), mul_rows),
        (f"exact a + b (FixedArray) [{name}]", lambda: fa + fb, sum_rows),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    n, repeat = args.n, args.repeat
    rng = np.random.default_rng(0)
    fmt = Format.parse("Q7.8")
    lo, hi = fmt.min_code, fmt.max_code
    x = rng.normal(0.0, 60.0, n)                       # ~3% of values overflow Q7.8

    specs = []
    t_np = best_of([lambda: np.clip(np.floor(x * 256 + 0.5), lo, hi)], repeat)
    t_np_cnt = best_time(lambda: (np.clip(np.floor(x * 256 + 0.5), lo, hi),
                                  np.count_nonzero((x * 256 + 0.5 < lo) | (x * 256 + 0.5 >= hi + 1))), repeat)
    specs.append(("from_float half_up+saturate (+count)", lambda: from_float(x, fmt),
                  [("numpy clip(floor(x*256+0.5))", t_np), ("numpy same + overflow count", t_np_cnt)]
                  + list(optional_baselines(x, repeat).items())))
    specs.append(("from_float half_even+wrap (+count)", lambda: from_float(x, fmt, "half_even", "wrap"),
                  [("numpy ((rint(x*256)+2^15) & 0xFFFF) - 2^15",
                    best_time(lambda: ((np.rint(x * 256).astype(np.int64) + 32768) & 0xFFFF) - 32768, repeat))]))
    in_range = (rng.integers(lo // 2, hi // 2 + 1, n), rng.integers(lo // 2, hi // 2 + 1, n))
    heavy = (rng.integers(lo, hi + 1, n), rng.integers(lo, hi + 1, n))
    specs += code_rows("in-range", *in_range, fmt, repeat)
    specs += code_rows("overflow", *heavy, fmt, repeat)

    print(f"fxpsim core benchmark: N = {n:,}, format Q7.8, one thread, best of {repeat} (both sides); "
          f"fxpsim from {os.path.dirname(os.path.dirname(fxpsim.__file__))}, load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'operation':44s} {'fxpsim ms':>9s} {'peak MiB':>8s}   {'baseline':50s} {'base ms':>8s} {'ratio':>6s}")
    for name, fn, baselines in specs:
        t = best_time(fn, repeat)
        peak = peak_mib(fn)
        for k, (bname, bt) in enumerate(baselines):
            lead = f"{name:44s} {t * 1e3:9.3f} {peak:8.1f}" if k == 0 else " " * 63
            print(f"{lead}   {bname:50s} {bt * 1e3:8.3f} {bt / t:5.2f}x")
    print("ratio = numpy time / fxpsim time (>= 1: fxpsim at least as fast).  fxpsim's results are exact and "
          "count overflows; the numpy expressions do neither for every input.")


if __name__ == "__main__":
    main()
