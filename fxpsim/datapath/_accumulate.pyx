# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Accumulating datapath kernels (multiply-accumulate with per-add overflow).

Compute-only: every argument is validated by :mod:`fxpsim.datapath`, which is
the public interface.  Codes are integers in the accumulator's LSB units.

Kernels (the vectorised loops are C in ``_accumulate*.h``; rows run in parallel, never k)
-------
``mac_fast``      acc = fit(acc + a[i,k]*b[k,j]), k in order, on int32/int64 lanes
                  (AVX-512/AVX2/baseline variants picked at run time by GCC function multi-versioning)
``mac_fast16``    the same on 16-bit lanes with saturating adds (AVX-512BW/AVX2 intrinsics)
``mac_fast32m``   the same on 32-bit lanes from int16 operands (vpmaddwd products, AVX-512BW/AVX2)
``mac_wrap64``    exact sums modulo 2^64 (unsigned lanes: wrapping by definition)
``mac_mul32``     the same for int32 operands: register-blocked AVX-512 VPMULDQ + VPADDQ (``_accumulate_w32.h``)
``mac_vnni16``    exact sums of int16 operands by AVX512-VNNI (``vpdpwssd``)
``Sweep``         the sweep mode of the 16/32-bit kernels: results scored in place against exact
                  accumulators and reference codes (fxpsim.hardware.node_sweep)
``tree_fast``     balanced adder-tree order on int32/int64 lanes, vectorised across output columns
``mac_generic``   the same for any width/mode/rounding, sequential or adder-tree order, int128 sums
``cumsum_rows``   running sums out[r,k] = fit(out[r,k-1] + x[r,k]) with per-step overflow flags

One extension module, its source in four parts included below (one namespace, so that the parts share
``lane_t``, ``ROW_CHUNK`` and ``_partition`` without a ``.pxd``): ``_accumulate_portable.pxi`` (``mac_fast``,
``tree_fast``), ``_accumulate_int16.pxi`` (``mac_fast16``, ``mac_fast32m``, ``Sweep``),
``_accumulate_exact.pxi`` (``mac_wrap64``, ``mac_mul32``, ``mac_vnni16``) and ``_accumulate_generic.pxi``
(``mac_generic``, ``cumsum_rows``).
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
import numpy as np

from fxpsim.core._kernels cimport (fx_i128, overflow128, shift_round)

cdef extern from "_accumulate.h" nogil:
    enum:
        FXA_JB
        FXA_EXACT
        FXA_SAT
        FXA_ZERO
        FXA_WRAP_S
        FXA_WRAP_U
    int fxa_have_clones()

FAST_EXACT = FXA_EXACT
FAST_SATURATE = FXA_SAT
FAST_ZERO = FXA_ZERO
FAST_WRAP_SIGNED = FXA_WRAP_S
FAST_WRAP_UNSIGNED = FXA_WRAP_U

cdef enum:
    ROW_CHUNK = 32     # rows handed to one kernel call (one thread's unit of work)

ctypedef fused lane_t:
    int32_t
    int64_t


def has_simd_dispatch():
    """True when the fast kernels were built with run-time AVX2/AVX-512 dispatch."""
    return bool(fxa_have_clones())


def slab_width():
    """Columns per packed slab of the right operand of ``mac_fast``."""
    return FXA_JB


def _partition(Py_ssize_t R, Py_ssize_t M, Py_ssize_t chunk, Py_ssize_t n_slabs, bint split, int nthreads):
    """How the slabbed kernels (``mac_fast16``, ``mac_fast32m``, ``mac_mul32``) split R rows, in batches of M
    sharing one b, and ``n_slabs`` column slabs into tasks: ``(per_batch, n_rc, n_sc, spc)``, i.e. row chunks
    of ``chunk`` rows per batch and in all, slab groups per row chunk and slabs per group.  Task t covers row
    chunk t // n_sc and slab group t % n_sc; every output belongs to exactly one task.  With ``split`` and
    fewer than 4 row chunks per thread, the slabs are spread over about 4 tasks per thread too."""
    cdef Py_ssize_t per_batch = (M + chunk - 1) // chunk
    cdef Py_ssize_t n_rc = per_batch * (R // M)
    cdef Py_ssize_t n_sc = 1, spc
    if split and n_rc < 4 * nthreads and n_slabs > 1:
        n_sc = min(n_slabs, (4 * nthreads + n_rc - 1) // n_rc)
    spc = (n_slabs + n_sc - 1) // n_sc
    n_sc = (n_slabs + spc - 1) // spc
    return per_batch, n_rc, n_sc, spc


include "_accumulate_portable.pxi"
include "_accumulate_int16.pxi"
include "_accumulate_exact.pxi"
include "_accumulate_generic.pxi"
