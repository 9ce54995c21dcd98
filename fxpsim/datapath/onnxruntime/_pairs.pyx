# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The excess of onnxruntime's int16-saturated pair sums (``x86_pairs``) in C.

For each row :math:`r` (an im2col row of a convolution, or a row of a matrix product) and each output
column :math:`o`,

.. math::

    e_{r,o} = \\sum_{j} \\mathrm{sat}_{16}(p_j) - p_j, \\qquad
    p_j = s_{b_r + d_{2j}}\\, w_{o,2j} + s_{b_r + d_{2j+1}}\\, w_{o,2j+1}

over the pairs :math:`j` the caller lists (those whose bound can leave int16; the others have no excess):
``src`` is the flat activation buffer (raw codes, padded), ``bases[r]`` the offset of row :math:`r`'s first
element and ``offs`` the offsets of the listed pairs' elements within a row. :math:`|p_j| \\le 2 \\cdot 255
\\cdot 128`, so :math:`p_j` is exact in int32; the sums are int64. No shortcut: every listed pair is formed.
"""
from libc.stdint cimport int16_t, int32_t, int64_t
import numpy as np


def excess_rows(const int16_t[::1] src, const Py_ssize_t[::1] bases, const Py_ssize_t[::1] offs,
                const int16_t[:, ::1] w, int64_t[:, ::1] out, Py_ssize_t col0):
    """``out[r, col0 + o] = e_{r,o}`` for every row of ``bases`` and every row ``o`` of ``w`` [O, 2J]."""
    cdef Py_ssize_t rows = bases.shape[0], n2 = offs.shape[0], n_out = w.shape[0]
    cdef Py_ssize_t r, o, j, b, n_src = src.shape[0]
    cdef int32_t p
    cdef int64_t acc
    cdef const int16_t* wr
    if n2 % 2 or w.shape[1] != n2:
        raise ValueError(f"excess_rows: {n2} offsets for weights of {w.shape[1]} columns (pairs need both even)")
    if out.shape[0] != rows or col0 < 0 or col0 + n_out > out.shape[1]:
        raise ValueError(f"excess_rows: out {out.shape[0]}x{out.shape[1]} cannot hold {rows} rows x "
                         f"{n_out} columns from column {col0}")
    if rows == 0 or n_out == 0 or n2 == 0:
        return
    cdef Py_ssize_t lo_off = offs[0], hi_off = offs[0], lo_base = bases[0], hi_base = bases[0]
    for j in range(n2):
        lo_off = min(lo_off, offs[j])
        hi_off = max(hi_off, offs[j])
    for r in range(rows):
        lo_base = min(lo_base, bases[r])
        hi_base = max(hi_base, bases[r])
    if lo_off + lo_base < 0 or hi_off + hi_base >= n_src:
        raise ValueError("excess_rows: an offset reaches outside the activation buffer")
    buf_arr = np.empty(n2, dtype=np.int16)
    cdef int16_t[::1] buf = buf_arr
    with nogil:
        for r in range(rows):
            b = bases[r]
            for j in range(n2):
                buf[j] = src[b + offs[j]]
            for o in range(n_out):
                wr = &w[o, 0]
                acc = 0
                for j in range(0, n2, 2):
                    p = <int32_t>buf[j] * wr[j] + <int32_t>buf[j + 1] * wr[j + 1]
                    acc += (p if p < 32767 else 32767) + (p if p > -32768 else -32768) - 2 * p
                out[r, col0 + o] = acc
