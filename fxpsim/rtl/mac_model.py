"""The MAC sequence of one output as an RTL runs it, element by element (:func:`mac_sequence`) or for many
outputs at once (:func:`mac_run`), and the products it adds (:func:`mac_products`): what the golden vectors'
MAC traces hold and what the first-mismatch locator recomputes (see :mod:`fxpsim.rtl.vectors` for the model)."""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

__all__ = ["fit_value", "mac_sequence", "mac_run", "mac_products"]


# ----------------------------------------------------------------------------------------- accumulator model
def fit_value(v: int, bits: int, mode: str) -> int:
    """One accumulator value after the overflow rule ``mode`` at ``bits`` bits (Python ints, exact).

    ``mode``: ``"saturate"``, ``"wrap"``, ``"saturate_zero"``, ``"saturate_symmetric"``,
    ``"wrap_sign_magnitude"`` or ``"exact"`` (no rule: the value itself).
    """
    v = int(v)
    if mode == "exact":
        return v
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if mode == "saturate_symmetric":
        return v if -hi <= v <= hi else (hi if v > 0 else -hi)
    if lo <= v <= hi:
        return v
    if mode == "saturate":
        return hi if v > hi else lo
    if mode == "wrap":
        return (v - lo) % (1 << bits) + lo
    if mode == "saturate_zero":
        return 0
    if mode == "wrap_sign_magnitude":
        from ..core.fixed import FixedArray, Format
        return int(FixedArray(np.array([v], dtype=np.int64), Format.integer(64))
                   .cast(Format.integer(bits), overflow="wrap_sign_magnitude").raw[0])
    if mode == "error":
        raise ValueError(f"accumulator overflow: {v} does not fit {bits} bits (overflow mode 'error')")
    raise ValueError(f"unknown overflow mode {mode!r}")


def mac_sequence(products: Iterable[int], *, init: int | None = None, bias_end: int | None = None, bits: int = 32,
                 mode: str = "wrap", order: str = "sequential", overflow_at: str = "add"):
    """The accumulator after every add of one output, as the datapath computes it: a scalar loop on Python ints.

    Parameters
    ----------
    products : iterable of int
        The output's products :math:`(x - z_x)(w - z_w)` in the datapath's order (:func:`mac_products`).
    init : int, optional
        A preloaded bias, the start value ``s_0`` (as given: the datapath's bias register already holds a
        value of the accumulator's range); ``None``: the accumulator starts at 0.
    bias_end : int, optional
        A bias added after the products (one more fitted add).
    bits, mode : int, str
        Accumulator width and overflow rule (:func:`fit_value`; ``"exact"`` for infinite precision).
    order : {"sequential", "tree"}
    overflow_at : {"add", "end"}
        ``"end"``: exact sums, then one last step that fits the total.

    Returns
    -------
    values : list of int
        ``values[0]`` is the start value, ``values[s]`` the accumulator after step ``s``; ``values[-1]`` is
        the accumulator the requantizer sees.
    labels : list of str
        What step ``s`` added: ``"init"``/``"zero"``, ``"k=7"`` (product 7), ``"tree 2.1"`` (level 2, node 1),
        ``"init+tree"``, ``"bias"``, ``"fit"``.
    """
    products = [int(p) for p in products]
    step_mode = "exact" if overflow_at == "end" else mode
    fit = lambda v: fit_value(v, bits, step_mode)  # noqa: E731
    values = [int(init) if init is not None else 0]     # the datapath starts from the bias as given
    labels = ["init" if init is not None else "zero"]
    if order == "tree":
        level, vals = 0, products
        while len(vals) > 1:
            level += 1
            nxt = []
            for i in range(0, len(vals) - 1, 2):
                s = fit(vals[i] + vals[i + 1])
                values.append(s)
                labels.append(f"tree {level}.{i // 2}")
                nxt.append(s)
            if len(vals) % 2:
                nxt.append(vals[-1])
            vals = nxt
        root = vals[0] if vals else 0
        if init is not None or len(products) < 2:
            values.append(fit(values[0] + root))
            labels.append("init+tree")
    elif order == "sequential":
        for k, p in enumerate(products):
            values.append(fit(values[-1] + p))
            labels.append(f"k={k}")
    else:
        raise ValueError(f"order must be 'sequential' or 'tree', got {order!r}")
    if bias_end is not None:
        values.append(fit(values[-1] + int(bias_end)))
        labels.append("bias")
    if overflow_at == "end":
        values.append(fit_value(values[-1], bits, mode))
        labels.append("fit")
    return values, labels


def _fit_array(v: np.ndarray, bits: int, mode: str) -> np.ndarray:
    if mode == "exact":
        return v
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if mode == "saturate":
        return np.clip(v, lo, hi)
    if mode == "wrap":
        return (v - lo) % (1 << bits) + lo
    if mode == "saturate_zero":
        return np.where((v < lo) | (v > hi), 0, v)
    if mode == "saturate_symmetric":
        return np.clip(v, -hi, hi)
    return np.array([fit_value(int(a), bits, mode) for a in v.reshape(-1)], dtype=np.int64).reshape(v.shape)


def mac_run(P: np.ndarray, *, init=None, bias_end=None, bits: int = 32, mode: str = "wrap",
            order: str = "sequential", overflow_at: str = "add", trace: bool = False):
    """:func:`mac_sequence` for many outputs at once (numpy int64, one row of products per output).

    ``P`` is ``[E, K]``; ``init`` and ``bias_end`` are ``[E]`` arrays or ``None``.  Returns the final
    accumulators ``[E]``, or ``(final, values [E, S])`` with ``trace``.
    """
    P = np.asarray(P, dtype=np.int64)
    E = P.shape[0]
    step_mode = "exact" if overflow_at == "end" else mode
    fit = lambda v: _fit_array(v, bits, step_mode)  # noqa: E731
    s0 = np.asarray(init, np.int64).copy() if init is not None else np.zeros(E, np.int64)
    cols = [s0]
    if order == "tree":
        vals = [P[:, k] for k in range(P.shape[1])]
        while len(vals) > 1:
            nxt = []
            for i in range(0, len(vals) - 1, 2):
                s = fit(vals[i] + vals[i + 1])
                cols.append(s)
                nxt.append(s)
            if len(vals) % 2:
                nxt.append(vals[-1])
            vals = nxt
        root = vals[0] if vals else np.zeros(E, np.int64)
        if init is not None or P.shape[1] < 2:
            cols.append(fit(s0 + root))
        s = cols[-1]
    else:
        s = s0
        for k in range(P.shape[1]):
            s = fit(s + P[:, k])
            if trace:
                cols.append(s)
    if bias_end is not None:
        s = fit(s + np.asarray(bias_end, np.int64))
        cols.append(s)
    if overflow_at == "end":
        s = _fit_array(s, bits, mode)
        cols.append(s)
    if trace:
        return s, np.stack(cols, axis=1)
    return s


def mac_products(mac: Mapping, x: np.ndarray, w: np.ndarray, coords: np.ndarray, pad_code=None) -> np.ndarray:
    """Products :math:`(x - z_x)(w - z_w)` of MAC outputs in the datapath's order, ``[E, K]`` int64.

    A padded tap of a convolution reads :math:`x = z_x` (its product is 0); ``pad_code``: it reads that code
    instead (a padding that writes ``pad_code`` rather than the zero point: product
    :math:`(p - z_x)(w - z_w)`, :math:`p` = ``pad_code``).

    Parameters
    ----------
    mac : mapping
        A node's ``"mac"`` entry of the manifest (``op``, ``x_zp``, ``w_zp``, and for convolutions
        ``stride``, ``dilation``, ``pads``).
    x : ndarray
        The node's input codes, batch first (``[N, K]`` or NHWC).
    w : ndarray
        Weight codes in the graph's layout (``[M][K]``, ``OHWI``, ``1HWC``).
    coords : ndarray of int, ``[E, ndim]``
        Output coordinates ``(n, o)`` or ``(n, h, w, c)``.
    """
    coords = np.asarray(coords, dtype=np.int64).reshape(-1, x.ndim if mac["op"] != "fully_connected" else 2)
    xz = int(mac["x_zp"])
    wz = np.broadcast_to(np.asarray(mac["w_zp"], dtype=np.int64).reshape(-1), (w.shape[0] if mac["op"] != \
                         "depthwise_conv2d" else w.shape[3],))
    n, o = coords[:, 0], coords[:, -1]
    if mac["op"] == "fully_connected":
        xo = x[n].astype(np.int64) - xz
        wo = w[o].astype(np.int64) - wz[o][:, None]
        return xo * wo
    (pt, pb), (pl, pr) = mac["pads"]
    sh, sw = mac["stride"]
    dh, dw = mac["dilation"]
    xp = np.pad(x.astype(np.int64) - xz, ((0, 0), (pt, pb), (pl, pr), (0, 0)),   # padded taps: x - z_x = 0
                constant_values=0 if pad_code is None else int(pad_code) - xz)
    oh, ow = coords[:, 1][:, None], coords[:, 2][:, None]
    kh, kw = w.shape[1], w.shape[2]
    if mac["op"] == "conv2d":
        c = w.shape[3]
        I, J, C = (a.reshape(-1) for a in np.meshgrid(np.arange(kh), np.arange(kw), np.arange(c), indexing="ij"))
        xv = xp[n[:, None], oh * sh + I * dh, ow * sw + J * dw, C[None, :]]
        wv = w[o[:, None], I, J, C].astype(np.int64) - wz[o][:, None]
        return xv * wv
    mult = w.shape[3] // x.shape[3]
    I, J = (a.reshape(-1) for a in np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij"))
    cin = (o // mult)[:, None]
    xv = xp[n[:, None], oh * sh + I * dh, ow * sw + J * dw, cin]
    wv = w[0, I[None, :], J[None, :], o[:, None]].astype(np.int64) - wz[o][:, None]
    return xv * wv


def _tap_labels(mac: Mapping, w_shape) -> list[str]:
    """What product ``k`` multiplies: ``k=5`` (FC), ``(i,j,c)=(0,1,3)`` (conv), ``(i,j)=(2,0)`` (depthwise)."""
    if mac["op"] == "fully_connected":
        return [f"k={k}" for k in range(w_shape[1])]
    if mac["op"] == "conv2d":
        return [f"(i,j,c)=({i},{j},{c})" for i in range(w_shape[1]) for j in range(w_shape[2])
                for c in range(w_shape[3])]
    return [f"(i,j)=({i},{j})" for i in range(w_shape[1]) for j in range(w_shape[2])]
