# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""MLAS's float32 SGEMM operations in C (``_mlas.h``), bit for bit as :mod:`fxpsim.datapath.onnxruntime.mlas`.

Compute-only: :func:`fxpsim.datapath.onnxruntime.mlas_kernel.sgemm` validates the operands and chooses the
kernel; it is the interface. Also :func:`table2`, the byte-table lookup of ONNX's two-operand 8-bit
elementwise plan steps.
"""
import numpy as np
cimport numpy as cnp

cdef extern from "_mlas.h" nogil:
    ctypedef struct fxm_op:
        const float* a
        Py_ssize_t a_b, a_m, a_k, a_period
        const float* b
        Py_ssize_t b_b, b_k, b_n
        const float* c
        Py_ssize_t c_b, c_m, c_n
        float* o
        Py_ssize_t o_b, o_m, o_n
        Py_ssize_t nb, m, n, k, sk
        int kind
        int simd
    ctypedef struct fxm_conv:
        const float* x
        Py_ssize_t N, C, H, W
        const float* w
        Py_ssize_t M, G, KH, KW
        Py_ssize_t sh, sw, pt, pl, dh, dw, OH, OW
        const long long* seg
        Py_ssize_t nseg
        float* o
        float* buf
        int simd
    int fxm_run(const fxm_op* P)
    int fxm_conv_run(const fxm_conv* P)
    int fxm_cpu_avx2()


def have_avx2() -> bool:
    """True when the AVX2 + FMA paths run on this CPU."""
    return bool(fxm_cpu_avx2())


cdef inline Py_ssize_t _st(cnp.ndarray x, int axis):
    return x.strides[axis] // 4


def run(cnp.ndarray a, cnp.ndarray b, object c, cnp.ndarray out, int kind, Py_ssize_t sk, Py_ssize_t a_period,
        bint simd=True):
    """``out[i] = op(a[i % a_period], b[i], c[i])``: float32 3-D arrays (any element strides, ``c`` None or
    3-D, ``out`` written); ``kind``: 0 fma slices of ``sk``, 1 M1, 2 M1 transposed-B, 3 N1."""
    cdef fxm_op P
    cdef cnp.ndarray cc
    cdef int rc
    P.a = <const float*>cnp.PyArray_DATA(a)
    P.a_b, P.a_m, P.a_k, P.a_period = _st(a, 0), _st(a, 1), _st(a, 2), a_period
    P.b = <const float*>cnp.PyArray_DATA(b)
    P.b_b, P.b_k, P.b_n = _st(b, 0), _st(b, 1), _st(b, 2)
    if c is None:
        P.c = NULL
        P.c_b = P.c_m = P.c_n = 0
    else:
        cc = c
        P.c = <const float*>cnp.PyArray_DATA(cc)
        P.c_b, P.c_m, P.c_n = _st(cc, 0), _st(cc, 1), _st(cc, 2)
    P.o = <float*>cnp.PyArray_DATA(out)
    P.o_b, P.o_m, P.o_n = _st(out, 0), _st(out, 1), _st(out, 2)
    P.nb, P.m, P.k, P.n = out.shape[0], a.shape[1], a.shape[2], b.shape[2]
    P.sk, P.kind, P.simd = sk, kind, 1 if simd else 0
    with nogil:
        rc = fxm_run(&P)
    if rc:
        raise ValueError(f"_mlas.run: unknown kernel {kind}")


def conv(const float[:, :, :, ::1] x, const float[:, ::1] w, float[:, :, ::1] out, int groups, int kh, int kw,
         tuple geometry, const long long[:, ::1] segments, bint simd=True):
    """MlasConv's segmented expand-then-GEMM: ``x`` [N, C, H, W], ``w`` [M, C/groups * kh * kw], ``out``
    [N, M, OH * OW] written; ``geometry = (sh, sw, pt, pl, dh, dw, OH, OW)``; ``segments`` [S, 2]."""
    cdef fxm_conv P
    cdef float[::1] buf = np.empty(128 * 128, np.float32)
    cdef int rc
    P.x = &x[0, 0, 0, 0]
    P.N, P.C, P.H, P.W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    P.w = &w[0, 0]
    P.M, P.G, P.KH, P.KW = w.shape[0], groups, kh, kw
    P.sh, P.sw, P.pt, P.pl, P.dh, P.dw, P.OH, P.OW = geometry
    P.seg = &segments[0, 0]
    P.nseg = segments.shape[0]
    P.o = &out[0, 0, 0]
    P.buf = &buf[0]
    P.simd = 1 if simd else 0
    with nogil:
        rc = fxm_conv_run(&P)
    if rc:
        raise ValueError(f"_mlas.conv: internal error {rc}")


def table2(const unsigned char[::1] table, const unsigned char[::1] a, const unsigned char[::1] b,
           unsigned char[::1] out):
    """``out[i] = table[(a[i] << 8) | b[i]]`` over equal-length byte vectors (``table``: 65536 entries): the
    lookup of a two-operand 8-bit elementwise op's table
    (:func:`fxpsim.frontends.onnx.prepared.binary_table_prepare`)."""
    cdef Py_ssize_t i, n = a.shape[0]
    if table.shape[0] != 65536 or b.shape[0] != n or out.shape[0] != n:
        raise ValueError(f"_mlas.table2: a table of 65536 entries and three vectors of one length, got "
                         f"{table.shape[0]}, {n}, {b.shape[0]}, {out.shape[0]}")
    with nogil:
        for i in range(n):
            out[i] = table[(<unsigned int>a[i] << 8) | b[i]]
