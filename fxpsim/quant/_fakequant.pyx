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

Floating-point contraction (FMA) is switched off for this file so that
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

from libc.float cimport FLT_MIN
from libc.math cimport fabsf

cdef extern from *:
    """
    /* floor() for |v| < 2^31 without SSE4.1 (vectorises with SSE2): truncate, then step down. */
    static inline float fxq_floor_small(float v) {
        float t = (float)(int)v;
        return t - (float)(t > v);      /* branch-free: random data would defeat the predictor */
    }
    """
    float fxq_floor_small(float v) noexcept nogil


cdef inline float _clamp_shifted(float x, float nudged_min, float nudged_max) noexcept nogil:
    """clamp(x, nudged_min, nudged_max) - nudged_min, x flushed to 0 when subnormal (TF runs with DAZ)."""
    cdef float v = 0.0 if fabsf(x) < FLT_MIN else x
    v = v if v < nudged_max else nudged_max     # NaN -> nudged_max here; the caller restores NaN
    v = v if v > nudged_min else nudged_min
    return v - nudged_min


cdef inline float _finish(float x, float level, float scale) noexcept nogil:
    """level * scale; NaN when x is NaN.  (Never subnormal: the caller guarantees scale >= FLT_MIN.)"""
    cdef float out = level * scale
    return out if x == x else x


cdef inline float _fake_quant_div(float x, float nudged_min, float nudged_max, float scale,
                                  float quant_zero) noexcept nogil:
    """The vars op: floor(shifted / scale - quant_zero + 0.5) * scale."""
    cdef float half = 0.5
    cdef float shifted = _clamp_shifted(x, nudged_min, nudged_max)
    return _finish(x, fxq_floor_small(shifted / scale - quant_zero + half), scale)


cdef inline float _fake_quant_mul(float x, float nudged_min, float nudged_max, float scale, float inv_scale,
                                  float quant_zero) noexcept nogil:
    """The args and per-channel ops: floor(shifted * inv_scale - quant_zero + 0.5) * scale."""
    cdef float half = 0.5
    cdef float shifted = _clamp_shifted(x, nudged_min, nudged_max)
    return _finish(x, fxq_floor_small(shifted * inv_scale - quant_zero + half), scale)


cdef enum:
    LANES = 8        # independent double accumulators: the sums vectorise without reassociation
    CHUNK = 16384    # elements per step of the one-pass kernel (its four 64 KiB slices stay in L2)


cdef inline float _flush(float x) noexcept nogil:
    return 0.0 if fabsf(x) < FLT_MIN else x       # NaN stays NaN


cdef void _forward_ptr(const float* x, float* out, Py_ssize_t n, float nudged_min, float nudged_max, float scale,
                       float inv_scale, float quant_zero, bint divide) noexcept nogil:
    """out[i] := fake_quant(x[i]), i < n (one vectorised pass)."""
    cdef Py_ssize_t i
    if divide:
        for i in range(n):
            out[i] = _fake_quant_div(x[i], nudged_min, nudged_max, scale, quant_zero)
    else:
        for i in range(n):
            out[i] = _fake_quant_mul(x[i], nudged_min, nudged_max, scale, inv_scale, quant_zero)


cdef inline void _backward_lanes(const float* dy, const float* x, float* dx, Py_ssize_t count, float nudged_min,
                                 float nudged_max, double* below, double* above) noexcept nogil:
    """``count`` (<= LANES) elements of the gradient, element j feeding accumulator lane j."""
    cdef Py_ssize_t j
    cdef float v, g
    cdef float one = 1.0, zero = 0.0
    for j in range(count):
        v = _flush(x[j])
        g = dy[j]
        dx[j] = g * (one if (v >= nudged_min and v <= nudged_max) else zero)
        below[j] += <double>(g if v < nudged_min else zero)
        above[j] += <double>(g if v > nudged_max else zero)


cdef void _backward_ptr(const float* dy, const float* x, float* dx, Py_ssize_t n, float nudged_min,
                        float nudged_max, double* below, double* above) noexcept nogil:
    """dx[i] := dy[i] * [nudged_min <= x[i] <= nudged_max]; below/above[lane] += dy outside the range.

    The lane accumulators are local copies (no aliasing with dx), written back at the end.
    """
    cdef double lanes_below[LANES]
    cdef double lanes_above[LANES]
    cdef Py_ssize_t j, start = 0
    for j in range(LANES):
        lanes_below[j] = below[j]
        lanes_above[j] = above[j]
    while start + LANES <= n:
        _backward_lanes(&dy[start], &x[start], &dx[start], LANES, nudged_min, nudged_max, lanes_below, lanes_above)
        start += LANES
    _backward_lanes(&dy[start], &x[start], &dx[start], n - start, nudged_min, nudged_max, lanes_below, lanes_above)
    for j in range(LANES):
        below[j] = lanes_below[j]
        above[j] = lanes_above[j]


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
        _forward_ptr(&x[0], &out[0], x.shape[0], nudged_min, nudged_max, scale, inv_scale, quant_zero, divide)


def backward(const float[::1] dy, const float[::1] x, float[::1] dx, float nudged_min, float nudged_max):
    """dx := dy * [nudged_min <= x <= nudged_max]; returns (sum of dy below, sum of dy above) as doubles."""
    cdef double below[LANES]
    cdef double above[LANES]
    cdef Py_ssize_t j
    for j in range(LANES):
        below[j] = 0.0
        above[j] = 0.0
    if x.shape[0] > 0:
        with nogil:
            _backward_ptr(&dy[0], &x[0], &dx[0], x.shape[0], nudged_min, nudged_max, below, above)
    return _lane_totals(below, above)


def fused_vars(const float[::1] x, const float[::1] dy, float[::1] out, float[::1] dx, float nudged_min,
               float nudged_max, float scale, float quant_zero):
    """Vars-op forward and gradient in one pass over memory (CHUNK elements at a time); returns (below, above)."""
    cdef double below[LANES]
    cdef double above[LANES]
    cdef Py_ssize_t j, n = x.shape[0], start = 0, size
    for j in range(LANES):
        below[j] = 0.0
        above[j] = 0.0
    with nogil:
        while start < n:
            size = CHUNK if start + CHUNK <= n else n - start
            _forward_ptr(&x[start], &out[start], size, nudged_min, nudged_max, scale, 1.0, quant_zero, True)
            _backward_ptr(&dy[start], &x[start], &dx[start], size, nudged_min, nudged_max, below, above)
            start += size
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
                    out[i, c] = _fake_quant_mul(x[i, c], nudged_min[c], nudged_max[c], scale[c], inv_scale[c],
                                                quant_zero[c])


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
                v = _flush(x[i, c])
                dx[i, c] = g * (one if (v >= nudged_min[c] and v <= nudged_max[c]) else zero)
                if v < nudged_min[c]:
                    below[c] += g
                elif v > nudged_max[c]:
                    above[c] += g
