r"""TFLite ``GATHER`` (``reference_ops::Gather``): codes copied, with LiteRT's bounds check on every index."""
from __future__ import annotations

import numpy as np

__all__ = ["gather_tflite"]


def _int(v, what):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {v!r}")
    return int(v)


def gather_tflite(params, indices, axis: int = 0, batch_dims: int = 0) -> np.ndarray:
    r"""TFLite ``GATHER`` of ``params`` at ``indices`` along ``axis`` with ``batch_dims`` leading batch axes.

    With :math:`b` = ``batch_dims`` and :math:`a` = ``axis`` (negative values count from the end: ``axis`` of
    ``params``' rank, ``batch_dims`` of ``indices``' rank, as TFLite's ``Prepare``), :math:`0 \le b \le a`,
    ``params.shape[:b] == indices.shape[:b]``, and

    .. math:: y[p_{<b}, p_{b..a}, i_{\ge b}, p_{>a}] = x[p_{<b}, p_{b..a}, \mathrm{idx}[p_{<b}, i_{\ge b}], p_{>a}],

    shape ``params.shape[:a] + indices.shape[b:] + params.shape[a+1:]``.

    Raises
    ------
    ValueError
        An index outside :math:`[0, n)`, :math:`n` = ``params.shape[axis]`` (LiteRT's kernel fails the invoke:
        "gather index out of bounds"; negative indices do not wrap), or inconsistent axes and shapes.
    TypeError
        Indices that are not integers.
    """
    x, idx = np.asarray(params), np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"GATHER indices must be integers, got dtype {idx.dtype}")
    a, b = _int(axis, "axis"), _int(batch_dims, "batch_dims")
    a = a + x.ndim if a < 0 else a
    b = b + idx.ndim if b < 0 else b
    if not 0 <= a < x.ndim:
        raise ValueError(f"GATHER axis {axis} is out of range for params of rank {x.ndim}")
    if not 0 <= b <= min(a, idx.ndim):
        raise ValueError(f"GATHER batch_dims {batch_dims} must lie in [0, min(axis {a}, indices rank {idx.ndim})]")
    if x.shape[:b] != idx.shape[:b]:
        raise ValueError(f"GATHER batch_dims {b}: params {list(x.shape)} and indices {list(idx.shape)} differ on "
                         f"the batch axes")
    n = x.shape[a]
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise ValueError(f"GATHER index {bad} is out of range [0, {n}) for axis {a} of params "
                             f"{list(x.shape)} (LiteRT fails the invoke: gather index out of bounds)")
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    pre = int(np.prod(x.shape[b:a], dtype=np.int64))
    post = int(np.prod(x.shape[a + 1:], dtype=np.int64))
    m = int(np.prod(idx.shape[b:], dtype=np.int64))
    xr = x.reshape(batch, pre, n, post)
    ir = idx.reshape(batch, m).astype(np.int64)
    out = xr[np.arange(batch)[:, None], :, ir, :]               # (batch, m, pre, post)
    out = out.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out.reshape(x.shape[:a] + idx.shape[b:] + x.shape[a + 1:]))
