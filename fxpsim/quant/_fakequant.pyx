# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused float32 loops of TensorFlow's fake quantization (forward and gradient).

Validation, nudging and error messages live in :mod:`fxpsim.fake_quant`; these
kernels only compute.  Every step is one float32 operation in TensorFlow's order,
so results are bit-exact with TF's CPU kernels:

    clamped = min(max(x, nudged_min), nudged_max)          (x flushed to 0 if subnormal)
    level   = floor((clamped - nudged_min) * inv_scale - quant_zero + 0.5)   (args / per-channel)
            = floor((clamped - nudged_min) / scale     - quant_zero + 0.5)   (vars)
    out     = level * scale          (never subnormal: fake_quant.tf_nudge rejects scales below FLT_MIN)
    dx      = dy * [nudged_min <= x <= nudged_max]   (a product, so 0 * negative dy = -0 as in TF)
    d_min   = sum(dy * [x < nudged_min]),  d_max = sum(dy * [x > nudged_max])

The per-tensor loops are C (``_fakequant_kernels.h``: compiled for AVX-512, AVX2 and
baseline x86-64, picked at load time, the same bits in each); the per-channel loops are
here.  Floating-point contraction (FMA) is switched off for both so that
``a * b - c`` is rounded twice, as in TensorFlow's Eigen expressions; GCC may assume
no FP traps (``-fno-trapping-math``, which changes no result) so that the selects
vectorise.  NaN inputs
give NaN outputs and a zero gradient.  The sums accumulate in double (exact
whenever TensorFlow's float32 sums are).
"""
cdef extern from *:
    """
    #if defined(__clang__)
    #pragma clang fp contract(off)
    #elif defined(__GNUC__)
    #pragma GCC optimize ("fp-contract=off", "no-trapping-math")
    #endif
    """

cdef extern from "_fakequant_kernels.h":
    float fxq_flush(float x) noexcept nogil
    float fxq_one(float x, float lo, float hi, float scale, float inv, float qz, int divide) noexcept nogil
    void fxq_forward(const float* x, float* out, Py_ssize_t n, float lo, float hi, float scale, float inv,
                     float qz, int divide) noexcept nogil
    void fxq_backward(const float* dy, const float* x, float* dx, Py_ssize_t n, float lo, float hi,
                      double* below, double* above, int level) noexcept nogil
    int fxq_level() noexcept nogil
    void fxq_fused_vars(const float* x, const float* dy, float* out, float* dx, Py_ssize_t n, float lo,
                        float hi, float scale, float qz, double* below, double* above) noexcept nogil


cdef enum:
    LANES = 8        # the header's FXQ_LANES double accumulators of the gradient's sums


cdef inline (double, double) _lane_totals(const double* below, const double* above) noexcept nogil:
    cdef double total_below = 0.0, total_above = 0.0
    cdef Py_ssize_t j
    for j in range(LANES):
        total_below += below[j]
        total_above += above[j]
    return total_below, total_above


def forward(const float[::1] x, float[::1] out, float nudged_min, float nudged_max, float scale,
            float inv_scale, float quant_zero, bint divide):
    """out := fake_quant(x) per tensor (``divide``: the vars op; else the args op)."""
    if x.shape[0] == 0:
        return
    with nogil:
        fxq_forward(&x[0], &out[0], x.shape[0], nudged_min, nudged_max, scale, inv_scale, quant_zero, divide)


def simd_level():
    """The gradient loop this CPU runs: 2 AVX-512, 1 AVX2, 0 scalar."""
    return fxq_level()


def backward(const float[::1] dy, const float[::1] x, float[::1] dx, float nudged_min, float nudged_max,
             int level=-1):
    """dx := dy * [nudged_min <= x <= nudged_max]; returns (sum of dy below, sum of dy above) as doubles.
    ``level``: the loop (see :func:`simd_level`; at most the CPU's, -1 the best), for tests."""
    cdef double below[LANES]
    cdef double above[LANES]
    cdef Py_ssize_t j
    for j in range(LANES):
        below[j] = 0.0
        above[j] = 0.0
    if x.shape[0] > 0:
        with nogil:
            fxq_backward(&dy[0], &x[0], &dx[0], x.shape[0], nudged_min, nudged_max, below, above, level)
    return _lane_totals(below, above)


def fused_vars(const float[::1] x, const float[::1] dy, float[::1] out, float[::1] dx, float nudged_min,
               float nudged_max, float scale, float quant_zero):
    """Vars-op forward and gradient in one pass over memory (FXQ_CHUNK elements at a time); returns (below, above)."""
    cdef double below[LANES]
    cdef double above[LANES]
    cdef Py_ssize_t j, n = x.shape[0]
    for j in range(LANES):
        below[j] = 0.0
        above[j] = 0.0
    if n > 0:
        with nogil:
            fxq_fused_vars(&x[0], &dy[0], &out[0], &dx[0], n, nudged_min, nudged_max, scale, quant_zero,
                           below, above)
    return _lane_totals(below, above)


def forward_per_channel(const float[:, ::1] x, float[:, ::1] out, const float[::1] nudged_min,
                        const float[::1] nudged_max, const float[::1] scale, const float[::1] inv_scale,
                        const float[::1] quant_zero, const unsigned char[::1] both_zero):
    """out[:, c] := fake_quant(x[:, c]) with channel c's range (TF's per-channel op: multiplies)."""
    cdef Py_ssize_t i, c
    with nogil:
        for i in range(x.shape[0]):
            for c in range(x.shape[1]):
                if both_zero[c]:
                    out[i, c] = 0.0
                else:
                    out[i, c] = fxq_one(x[i, c], nudged_min[c], nudged_max[c], scale[c], inv_scale[c],
                                        quant_zero[c], 0)


def backward_per_channel(const float[:, ::1] dy, const float[:, ::1] x, float[:, ::1] dx,
                         const float[::1] nudged_min, const float[::1] nudged_max,
                         const unsigned char[::1] both_zero, double[::1] below, double[::1] above):
    """Per-channel :func:`backward`; channels with min == max == 0 pass dy through."""
    cdef Py_ssize_t i, c
    cdef float v, g
    cdef float one = 1.0, zero = 0.0
    with nogil:
        for c in range(x.shape[1]):
            below[c] = 0.0
            above[c] = 0.0
        for i in range(x.shape[0]):
            for c in range(x.shape[1]):
                g = dy[i, c]
                if both_zero[c]:
                    dx[i, c] = g
                    continue
                v = fxq_flush(x[i, c])
                dx[i, c] = g * (one if (v >= nudged_min[c] and v <= nudged_max[c]) else zero)
                if v < nudged_min[c]:
                    below[c] += g
                elif v > nudged_max[c]:
                    above[c] += g
