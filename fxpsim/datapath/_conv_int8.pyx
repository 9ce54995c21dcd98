# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused int8 convolution / depthwise / fully connected kernel (C in ``_conv_int8.h``).

Compute-only: :mod:`fxpsim.datapath.conv_int8` validates every argument and decides when this kernel
models the layer exactly; it is the interface.
"""
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memset
import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from "_conv_int8.h" nogil:
    ctypedef struct fxc_params:
        Py_ssize_t N, H, W, C, KH, KW, O, OH, OW
        int sh, sw, dh, dw, pt, pl
        int depthwise
        int x_zp
        int mode, word
        int bias_init
        const int32_t* bias
        const int64_t* rq_mult
        const int64_t* rq_add
        const int64_t* rq_nudge
        const int64_t* rq_shift
        const float* rq_fscale
        int rq_zp
        int lo, hi
        int impl
        int peradd_ok
    ctypedef struct fxc_cache:
        pass
    void fxc_cache_free(fxc_cache* K)
    int fxc_run(const fxc_params* P, const int8_t* x, const int8_t* w, int64_t* acc_out, int8_t* out,
                int64_t* counts, fxc_cache* K, int may_pack)
    int fxc_have_avx512()

# named here too (it is included by _conv_int8.h) so that a change to it rebuilds this module
cdef extern from "_conv_int8_avx512.h":
    pass


cdef int _setup(fxc_params* P, object bias, tuple geometry, int depthwise, int x_zp, int mode, int word,
                int bias_init, object rq, int lo, int hi, int impl, bint peradd_ok) except -1:
    """Every field of ``P`` but the input's ``N, H, W, C`` (see :func:`run`); the pointers are into ``bias`` and
    ``rq``'s arrays, valid while those live."""
    cdef const int32_t[::1] b
    cdef const int64_t[::1] m_, a_, n_, s_
    cdef const float[::1] f_
    P.KH, P.KW, P.O, P.OH, P.OW, P.sh, P.sw, P.dh, P.dw, P.pt, P.pl = geometry
    P.depthwise, P.x_zp, P.mode, P.word, P.bias_init = depthwise, x_zp, mode, word, bias_init
    P.lo, P.hi, P.impl, P.peradd_ok = lo, hi, impl, peradd_ok
    P.bias = NULL
    P.rq_mult = P.rq_add = P.rq_nudge = P.rq_shift = NULL
    P.rq_fscale = NULL
    P.rq_zp = 0
    if bias is not None:
        b = bias
        P.bias = &b[0]
    if rq is not None and len(rq) == 2:
        f_ = rq[0]
        if f_.shape[0] != P.O:
            raise ValueError("conv_int8.run: the float scale needs one value per output channel")
        P.rq_fscale = &f_[0]
        P.rq_zp = rq[1]
    elif rq is not None:
        m_, a_, s_ = rq[0], rq[1], rq[3]
        P.rq_mult, P.rq_add, P.rq_shift = &m_[0], &a_[0], &s_[0]
        if rq[2] is not None:
            n_ = rq[2]
            P.rq_nudge = &n_[0]
    return 0


cdef object _exec(fxc_params* P, const int8_t[:, :, :, ::1] x, const int8_t* w, bint want_acc, object acc_buf,
                  object out_buf, Cache cache):
    """The kernel on ``x`` with ``P`` set up (:func:`_setup`): :func:`run`'s result."""
    cdef int64_t counts[3]
    cdef int rc
    cdef fxc_cache* K = NULL if cache is None else &cache.K
    cdef int64_t[:, ::1] accv
    cdef int64_t* accp = NULL
    cdef int8_t[:, ::1] outv
    cdef int8_t* outp = NULL
    cdef bint staged = P.rq_mult != NULL or P.rq_fscale != NULL
    P.N, P.H, P.W, P.C = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    M = P.N * P.OH * P.OW
    acc = out = None
    if want_acc or not staged:
        acc = np.empty((M, P.O), np.int64) if acc_buf is None else acc_buf
        accv = acc
        accp = &accv[0, 0]
    if staged:
        out = np.empty((M, P.O), np.int8) if out_buf is None else out_buf
        outv = out
        outp = &outv[0, 0]
    counts[0] = counts[1] = counts[2] = 0
    with nogil:
        rc = fxc_run(P, &x[0, 0, 0, 0], w, accp, outp, counts, K, 0 if K != NULL else 1)
    if rc == 2:                     # the cache lacks a buffer this call needs: build it, one caller at a time
        with cache.lock:
            counts[0] = counts[1] = counts[2] = 0
            with nogil:
                rc = fxc_run(P, &x[0, 0, 0, 0], w, accp, outp, counts, K, 1)
    if rc < 0:
        raise MemoryError("fxpsim conv_int8: out of memory")
    if rc == 1:
        return None
    return acc, out, int(counts[0]), int(counts[1]), int(counts[2])


cdef class Cache:
    """One layer's calls with everything but the input fixed (:meth:`bind`), and what they derive from that alone,
    kept between calls (``fxc_cache``: the exactness bound's weight sums, the output constants' lane layout, each
    kernel's weight layout, built by the first call that needs it, under ``lock``). :meth:`run` gives :func:`run`'s
    results, bit for bit."""
    cdef fxc_cache K
    cdef fxc_params P
    cdef const int8_t* wp
    cdef object keep
    cdef readonly object lock
    cdef Py_ssize_t shape[4]          # the input shape :meth:`forward` takes (:meth:`expect`)

    def __cinit__(self):
        import threading
        memset(&self.K, 0, sizeof(fxc_cache))
        memset(&self.P, 0, sizeof(fxc_params))
        self.shape[0] = self.shape[1] = self.shape[2] = self.shape[3] = -1
        self.wp = NULL
        self.lock = threading.Lock()

    def __dealloc__(self):
        fxc_cache_free(&self.K)

    def bind(self, const int8_t[::1] w, object bias, tuple geometry, int depthwise, int x_zp, int mode, int word,
             int bias_init, object rq, int lo, int hi, int impl, bint peradd_ok=True):
        """Fix the layer (arguments as :func:`run`; the arrays must not change afterwards). Once only."""
        if self.wp != NULL:
            raise ValueError("conv_int8.Cache.bind: already bound")
        _setup(&self.P, bias, geometry, depthwise, x_zp, mode, word, bias_init, rq, lo, hi, impl, peradd_ok)
        self.keep = (w, bias, rq)
        self.wp = &w[0]

    def run(self, const int8_t[:, :, :, ::1] x, bint want_acc=True, object acc_buf=None, object out_buf=None):
        """:func:`run` of the bound layer on ``x``."""
        cdef fxc_params P = self.P
        if self.wp == NULL:
            raise ValueError("conv_int8.Cache.run: bind the layer first")
        return _exec(&P, x, self.wp, want_acc, acc_buf, out_buf, self)

    def expect(self, Py_ssize_t n, Py_ssize_t h, Py_ssize_t w, Py_ssize_t c):
        """The NHWC input shape :meth:`forward` takes (any other input: None)."""
        self.shape[0], self.shape[1], self.shape[2], self.shape[3] = n, h, w, c

    def forward(self, object x):
        """The bound layer's output codes alone on ``x``, a new int8 [N OH OW, O] array -- :meth:`run`'s ``out``
        without the accumulators or the counts, with the least per-call work (a compiled plan's step) -- or None
        where it does not apply: ``x`` not an int8 C-contiguous ndarray of the :meth:`expect` ed shape, a layer
        without an output stage here, or a call the kernel declines (the caller then takes :meth:`run`)."""
        cdef fxc_params P = self.P
        cdef cnp.ndarray xa, out
        cdef cnp.npy_intp dims[2]
        cdef int64_t counts[3]
        cdef int rc, i
        cdef const int8_t* xp
        cdef int8_t* op
        if self.wp == NULL or (P.rq_mult == NULL and P.rq_fscale == NULL) or not cnp.PyArray_CheckExact(x):
            return None
        xa = <cnp.ndarray>x
        if cnp.PyArray_TYPE(xa) != cnp.NPY_INT8 or cnp.PyArray_NDIM(xa) != 4 or not cnp.PyArray_IS_C_CONTIGUOUS(xa):
            return None
        for i in range(4):
            if cnp.PyArray_DIMS(xa)[i] != self.shape[i]:
                return None
        P.N, P.H, P.W, P.C = self.shape[0], self.shape[1], self.shape[2], self.shape[3]
        dims[0], dims[1] = P.N * P.OH * P.OW, P.O
        out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT8, 0)
        xp, op = <const int8_t*>cnp.PyArray_DATA(xa), <int8_t*>cnp.PyArray_DATA(out)
        counts[0] = counts[1] = counts[2] = 0
        with nogil:
            rc = fxc_run(&P, xp, self.wp, NULL, op, counts, &self.K, 0)
        if rc == 2:                     # the cache lacks a buffer this call needs: build it, one caller at a time
            with self.lock:
                counts[0] = counts[1] = counts[2] = 0
                with nogil:
                    rc = fxc_run(&P, xp, self.wp, NULL, op, counts, &self.K, 1)
        if rc < 0:
            raise MemoryError("fxpsim conv_int8: out of memory")
        return None if rc == 1 else out


def have_avx512() -> bool:
    """True when the AVX-512 (BW, DQ, VL, VNNI) kernels run on this CPU."""
    return bool(fxc_have_avx512())


def run(const int8_t[:, :, :, ::1] x, const int8_t[::1] w, object bias, tuple geometry, int depthwise,
        int x_zp, int mode, int word, int bias_init, object rq, int lo, int hi, int impl, bint want_acc=True,
        bint peradd_ok=True, object acc_buf=None, object out_buf=None):
    """``(acc [M, O] int64 or None, out [M, O] int8 or None, overflows, above, below)``, or None when the
    layer can overflow and ``peradd_ok`` is False (or ``word`` > 31): the kernel does not model it.
    ``acc_buf``, ``out_buf``: int64 / int8 C-contiguous [M, O] arrays to write into (else new ones).

    ``geometry = (KH, KW, O, OH, OW, sh, sw, dh, dw, pt, pl)``; ``w`` flattened (dense [O, KH, KW, C],
    depthwise [KH, KW, C]); ``bias`` int32 [O] or None; ``rq`` None, four int64 [O] arrays
    ``(mult, add, nudge or None, shift)`` (integer output stage) or ``(scale, zp)`` with a float32 [O]
    ``scale`` (float output stage); the accumulators come back when ``want_acc`` or ``rq`` is None.
    :class:`Cache` runs a layer's calls with its weight-derived buffers kept.
    """
    cdef fxc_params P
    _setup(&P, bias, geometry, depthwise, x_zp, mode, word, bias_init, rq, lo, hi, impl, peradd_ok)
    return _exec(&P, x, &w[0], want_acc, acc_buf, out_buf, None)


def lut2(const int8_t[::1] a, const int8_t[::1] b, const int8_t[::1] table):
    """``out[i] = table[(a[i] + 128) * 256 + b[i] + 128]`` (an elementwise int8 x int8 -> int8 op as a table)."""
    cdef Py_ssize_t i, n = a.shape[0]
    if b.shape[0] != n or table.shape[0] != 65536:
        raise ValueError("lut2: a and b need the same length and the table 65536 entries")
    out = np.empty(n, np.int8)
    cdef int8_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = table[((<uint8_t>a[i] ^ 0x80) << 8) | (<uint8_t>b[i] ^ 0x80)]
    return out
