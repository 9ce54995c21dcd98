# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""One chunk of the block-scaled float accumulator given the chunk's exact sums (``datapath/floatacc/block_blas``).

Per output: :math:`P_{max}, P_{min}` over the chunk's blocks of :math:`E_{s_a} + E_{s_b}`,
:math:`E_d = \\max(\\mathrm{biased}(d), 1) - 127`, :math:`E_{max} = \\max(P_{max}, E_d)`; where
:math:`E_{max} > F + \\lambda + P_{min}` the output is only marked (``bad``) and left to the caller; else
:math:`u = 2^{E_{max} - F}`, :math:`d \\leftarrow \\mathrm{RZ}_{24}(S + \\mathrm{trunc}(d / u)\\, u)`.  Every
operation is exact in float64 under the caller's bounds; the RZ clears the 29 low bits of the float64.
Returns (inexact C alignments, 1 if a result overflowed float32 or fell below its normals, else 0, the number
of outputs marked ``bad``).
"""
from libc.math cimport fabs, trunc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef inline double _pow2(int64_t e) noexcept nogil:
    """2^e from the exponent field, -1022 <= e <= 1023."""
    cdef uint64_t bits = <uint64_t>(e + 1023) << 52
    cdef double v
    memcpy(&v, &bits, 8)
    return v


def block_chunk_step(const double[:, ::1] S, float[:, ::1] d, const int32_t[:, ::1] ea, const int32_t[:, ::1] eb,
                     Py_ssize_t b0, Py_ssize_t nb, int64_t F, int64_t lam, uint8_t[:, ::1] bad):
    cdef Py_ssize_t M = d.shape[0], N = d.shape[1], i, j, t
    cdef int64_t pmax, pmin, p, ec, emax, inexact = 0, n_bad = 0
    cdef int fail = 0
    cdef uint32_t db
    cdef uint64_t yb
    cdef double pw, dq, ct, y, ay
    cdef float dv
    with nogil:
        for i in range(M):
            for j in range(N):
                pmax = ea[i, b0] + eb[j, b0]
                pmin = pmax
                for t in range(1, nb):
                    p = ea[i, b0 + t] + eb[j, b0 + t]
                    if p > pmax:
                        pmax = p
                    if p < pmin:
                        pmin = p
                dv = d[i, j]
                memcpy(&db, &dv, 4)
                ec = <int64_t>((db >> 23) & 0xFF)
                if ec < 1:
                    ec = 1
                ec -= 127
                emax = pmax if pmax > ec else ec
                if emax > F + lam + pmin:
                    bad[i, j] = 1
                    n_bad += 1
                    continue
                bad[i, j] = 0
                pw = _pow2(F - emax)
                dq = <double>dv * pw
                ct = trunc(dq)
                if ct != dq:
                    inexact += 1
                y = (S[i, j] * pw + ct) / pw
                ay = fabs(y)
                if ay >= 3.402823669209385e38 or (ay < 1.1754943508222875e-38 and y != 0):
                    fail = 1                        # the caller discards d: no out-of-range float cast
                    continue
                memcpy(&yb, &y, 8)
                yb &= ~(<uint64_t>0x1FFFFFFF)
                memcpy(&y, &yb, 8)
                d[i, j] = <float>y
    return inexact, fail, n_bad
