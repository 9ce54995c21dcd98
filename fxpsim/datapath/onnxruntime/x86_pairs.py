"""onnxruntime's uint8 x int8 integer kernels on x86-64 CPUs with AVX2 but no VNNI, in numpy.

MLAS (onnxruntime's kernel library) multiplies uint8 activations by int8 weights with ``vpmaddubsw`` on such
CPUs: the raw products of two adjacent elements along the reduction axis are summed in int16 **with
saturation** before they are widened and accumulated in int32. With the stored codes :math:`a` (uint8) and
:math:`w` (int8), zero points :math:`z_a, z_w` and :math:`K` products,

.. math::

    \\mathrm{acc} = \\sum_{j} \\mathrm{sat}_{16}(a_{2j} w_{2j} + a_{2j+1} w_{2j+1})
                 - z_a \\sum_k w_k - z_w \\sum_k a_k + K z_a z_w \\pmod{2^{32}}

(an odd :math:`K` ends with a lone product, which never saturates). This equals the exact int32 sum plus
the *excess* :math:`\\sum_j (\\mathrm{sat}_{16}(p_j) - p_j)`, which is what :func:`matmul_excess` and
:func:`conv2d_excess` compute; :mod:`fxpsim.frontends.onnx.ops` adds it to the accumulator of nodes whose
``u8s8_pairs`` attribute is ``"saturate16"``. CPUs with AVX512-VNNI or AVX-VNNI (``vpdpbusd``), ARM, the
uint8 x uint8 / int8 x int8 kernels and onnxruntime's ConvInteger accumulate exactly (``"exact"``).

The pairs run along the reduction axis as onnxruntime lays it out: ``k`` in index order for a matrix
product; for a convolution the im2col order of onnxruntime's NHWC kernels, ``(kh, kw, c)`` within one
group (channels fastest, pairs crossing kernel positions when ``C / group`` is odd, the padding holding the
raw zero point :math:`z_a`); a depthwise convolution (one input and one output channel per group) runs an
exact kernel. Measured with onnxruntime 1.32 on an AMD EPYC with AVX2 and FMA, no AVX-512
(``tools/fixtures/onnx/ORT_SEMANTICS.md`` section 10).

The sums run in C (``_pairs.excess_rows``: one gathered row of live pairs against every output column) when
the extension is built and the codes fit int16 with :math:`2 \\max|a| \\max|w| < 2^{31}`; otherwise, and with
``_kernel = None``, in numpy (the tests compare both). Only pairs whose bound from the largest codes can leave
int16 are formed: the others have no excess.
"""
from __future__ import annotations

import platform

import numpy as np

__all__ = ["U8S8_PAIRS", "pair_excess", "matmul_excess", "conv2d_excess", "is_depthwise", "host_u8s8_pairs"]

#: The values of the ``u8s8_pairs`` knob: exact int32 products, or MLAS's AVX2 int16-saturating pair sums.
U8S8_PAIRS = ("exact", "saturate16")
_LO16, _HI16 = -(1 << 15), (1 << 15) - 1
#: Elements of the largest pair array one chunk builds (int32: 16 MiB).
_CHUNK = 1 << 22

try:
    from . import _pairs as _kernel
except ImportError:  # the extension is not built: the numpy path
    _kernel = None


def _fits_kernel(a_absmax: int, w_absmax: int) -> bool:
    """Whether the C kernel's int16 operands and int32 pair sums hold these codes exactly."""
    return (_kernel is not None and a_absmax <= _HI16 and w_absmax <= _HI16
            and 2 * a_absmax * w_absmax < (1 << 31))


def _pair_bound(a_max, w_absmax):
    """Upper bound of :math:`|p_j|` per pair ``j`` from the largest codes of each operand column."""
    return a_max[0::2] * w_absmax[0::2] + a_max[1::2] * w_absmax[1::2]


def pair_excess(a, w) -> np.ndarray:
    """:math:`e_{r,o} = \\sum_j \\mathrm{sat}_{16}(p_j) - p_j` with :math:`p_j = a_{r,2j} w_{o,2j} +
    a_{r,2j+1} w_{o,2j+1}`, for ``a`` [R, K] (raw uint8 codes) and ``w`` [O, K] (raw int8 codes); int64 [R, O].

    Only the pairs that can leave int16 for some row and column are formed, in chunks of rows that keep
    the temporary arrays bounded."""
    a = np.asarray(a)
    w = np.asarray(w)
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(f"pair_excess needs a [R, K] and w [O, K], got {a.shape} and {w.shape}")
    r, k = a.shape
    o = w.shape[0]
    out = np.zeros((r, o), np.int64)
    if r == 0 or o == 0 or k < 2:
        return out
    if k % 2:
        a = a[:, :k - 1]
        w = w[:, :k - 1]
    a32 = a.astype(np.int32)
    w32 = w.astype(np.int32)
    a_abs, w_abs = np.abs(a32).max(axis=0), np.abs(w32).max(axis=0)
    live = np.flatnonzero(_pair_bound(a_abs, w_abs) > _HI16)
    if live.size == 0:
        return out
    if _fits_kernel(int(a_abs.max()), int(w_abs.max())):
        offs = np.stack([2 * live, 2 * live + 1], axis=1).reshape(-1).astype(np.intp)
        bases = np.arange(r, dtype=np.intp) * a32.shape[1]
        _kernel.excess_rows(a32.astype(np.int16).reshape(-1), bases, offs,
                            np.ascontiguousarray(w32[:, offs], dtype=np.int16), out, 0)
        return out
    a0, a1 = a32[:, 2 * live], a32[:, 2 * live + 1]             # [R, J]
    w0, w1 = w32[:, 2 * live].T, w32[:, 2 * live + 1].T         # [J, O]
    rows = max(1, _CHUNK // max(1, live.size * o))
    for s in range(0, r, rows):
        p = a0[s:s + rows, :, None] * w0[None] + a1[s:s + rows, :, None] * w1[None]    # [r, J, O] int32
        excess = np.minimum(p, _HI16) - p
        excess += np.maximum(p, _LO16) - p
        out[s:s + rows] = excess.sum(axis=1, dtype=np.int64)
    return out


def matmul_excess(a, w) -> np.ndarray:
    """The excess of a matrix product: ``a`` [..., K] raw uint8 codes, ``w`` [O, K] raw int8 codes; int64
    [..., O] (see :func:`pair_excess`)."""
    a = np.asarray(a)
    lead = a.shape[:-1]
    return pair_excess(a.reshape(-1, a.shape[-1]), w).reshape(lead + (np.shape(w)[0],))


def is_depthwise(groups: int, channels: int, filters: int) -> bool:
    """onnxruntime's depthwise test: one input and one output channel per group (an exact kernel)."""
    return groups > 1 and channels == groups and filters == groups


def conv2d_excess(x, w, *, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups: int = 1,
                  pad_value: int = 0) -> np.ndarray:
    """The excess of a convolution: ``x`` [N, H, W, C] raw uint8 codes, ``w`` [O, KH, KW, C/groups] raw int8
    codes; int64 [N, OH, OW, O]. Pairs run along ``(kh, kw, c)`` of each group; the padding holds
    ``pad_value`` (the raw activation zero point); a depthwise convolution has no excess."""
    x = np.asarray(x)
    w = np.asarray(w)
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (pt, pb), (pl, pr) = padding
    sh, sw = stride
    dh, dw = dilation
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oh, ow, o), np.int64)
    if cg * groups != c or o % groups:
        raise ValueError(f"conv2d_excess: weights {w.shape} do not match {c} channels in {groups} groups")
    if is_depthwise(groups, c, o) or out.size == 0:
        return out
    xp = np.full((n, h + pt + pb, wd + pl + pr, c), pad_value, np.int32)
    xp[:, pt:pt + h, pl:pl + wd] = x
    og = o // groups
    kk = kh * kw * cg
    if xp.size and _fits_kernel(int(np.abs(xp).max()), int(np.abs(w.astype(np.int32)).max())):
        _conv_kernel(xp, w, out, stride, dilation, groups)
        return out
    rows = max(1, _CHUNK // max(1, ow * kk))        # output rows (of one image) per im2col chunk
    for gi in range(groups):
        wg = w[gi * og:(gi + 1) * og].reshape(og, kk)
        xg = xp[..., gi * cg:(gi + 1) * cg]
        for b in range(n):
            for r0 in range(0, oh, rows):
                r1 = min(oh, r0 + rows)
                cols = np.empty((r1 - r0, ow, kh, kw, cg), np.int32)
                for i in range(kh):
                    for j in range(kw):
                        y0 = r0 * sh + i * dh
                        cols[:, :, i, j] = xg[b, y0: y0 + sh * (r1 - r0 - 1) + 1: sh,
                                              j * dw: j * dw + sw * (ow - 1) + 1: sw]
                exc = pair_excess(cols.reshape(-1, kk), wg)
                out[b, r0:r1, :, gi * og:(gi + 1) * og] = exc.reshape(r1 - r0, ow, og)
    return out


def _conv_kernel(xp, w, out, stride, dilation, groups):
    """:func:`conv2d_excess` in C: the im2col rows are offsets into the padded input ``xp`` [N, Hp, Wp, C]
    (``bases``: each output pixel's top-left element; ``offs``: a live pair's elements within its window)."""
    n, hp, wp, c = xp.shape
    _, oh, ow, o = out.shape
    _, kh, kw, cg = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    og, kk = o // groups, kh * kw * cg
    c_abs = np.abs(xp).max(axis=(0, 1, 2))                                     # per channel
    i, j, ch = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(cg), indexing="ij")
    within = ((i * dh * wp + j * dw) * c + ch).reshape(-1)                      # (kh, kw, c) order
    bases = (((np.arange(n)[:, None, None] * hp + sh * np.arange(oh)[None, :, None]) * wp
              + sw * np.arange(ow)[None, None, :]) * c).reshape(-1).astype(np.intp)
    flat = out.reshape(-1, o)
    src = xp.astype(np.int16).reshape(-1)
    even = kk - kk % 2                                                          # a lone last product never saturates
    for gi in range(groups):
        wg = w[gi * og:(gi + 1) * og].reshape(og, kk)[:, :even].astype(np.int32)
        a_abs = c_abs[gi * cg + ch.reshape(-1)[:even]]
        live = np.flatnonzero(_pair_bound(a_abs, np.abs(wg).max(axis=0)) > _HI16)
        if live.size == 0:
            continue
        pick = np.stack([2 * live, 2 * live + 1], axis=1).reshape(-1)
        _kernel.excess_rows(src, bases, (within[pick] + gi * cg).astype(np.intp),
                            np.ascontiguousarray(wg[:, pick], dtype=np.int16), flat, gi * og)


def _cpu_flags() -> set | None:
    """The CPU feature flags of this host from ``/proc/cpuinfo`` (Linux), else from numpy's own dispatch
    table (which names AVX2 and AVX512-VNNI but not AVX-VNNI); ``None`` when neither is readable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as feats
        except ImportError:
            return None
    names = {"AVX2": "avx2", "AVX512VNNI": "avx512_vnni", "AVX512BW": "avx512bw"}
    return {flag for key, flag in names.items() if feats.get(key)}


def host_u8s8_pairs(flags=None, machine: str | None = None, assume_vnni: bool = True) -> str:
    """The ``u8s8_pairs`` of onnxruntime's CPU kernels on this host (or on a CPU with the given
    ``/proc/cpuinfo`` ``flags`` and ``platform.machine()`` name).

    ``"saturate16"`` on x86-64 with AVX2 and neither AVX512-VNNI (``avx512_vnni``) nor AVX-VNNI
    (``avx_vnni``); ``"exact"`` everywhere else. Verified live: AVX2 without VNNI saturates (AMD EPYC,
    onnxruntime 1.32), AVX512-VNNI is exact. Inferred from MLAS's dispatch, not measured: AVX-512BW
    without VNNI (Skylake-SP) runs ``vpmaddubsw`` kernels too and so saturates (covered: it has AVX2);
    AVX-VNNI alone is exact; a CPU without AVX2 (SSE4.1 / AVX kernels) was exact under emulation.
    A host whose flags cannot be read counts as exact. ``assume_vnni=False`` ignores the VNNI flags (what
    the host's kernels would be without them: tells an x86-64 AVX2 host with VNNI from other exact hosts)."""
    machine = (platform.machine() if machine is None else machine).lower()
    if machine not in ("x86_64", "amd64", "x64"):
        return "exact"
    flags = _cpu_flags() if flags is None else set(flags)
    if not flags or "avx2" not in flags:
        return "exact"
    return "exact" if assume_vnni and ({"avx512_vnni", "avx_vnni"} & flags) else "saturate16"
