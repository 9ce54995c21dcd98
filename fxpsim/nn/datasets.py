"""Small real data sets that ship inside well-kept packages (no downloads at run time).

``load_digits`` wraps scikit-learn's bundled handwritten digits (UCI ML optical recognition of handwritten
digits: 1,797 images of 8x8 pixels with 17 grey levels, classes 0..9).
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["load_digits", "DIGITS_TEST_SIZE"]

DIGITS_TEST_SIZE = 360   # 1,797 = 1,437 train + 360 test


@functools.lru_cache(maxsize=1)
def _digits_arrays():
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("fxpsim.datasets.load_digits needs scikit-learn, which ships the digits data set "
                          "(no download): install it with `pip install scikit-learn`") from exc
    bunch = sklearn_load_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0))[..., None]
    labels = np.asarray(bunch.target, dtype=np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digits(split: str = "train", seed: int = 0, *, flatten: bool = False):
    """Handwritten digits as float32 NHWC images in [0, 1] and int64 labels, split by ``seed``.

    Parameters
    ----------
    split : {"train", "test", "all"}
        ``"train"``: 1,437 images; ``"test"``: the other 360; ``"all"``: all 1,797 in the original order.
    seed : int
        Seed of the permutation that chooses the test images (``numpy.random.default_rng(seed)``): the
        same seed always gives the same split, and train and test never overlap.
    flatten : bool
        Return images as [N, 64] (for an MLP) instead of [N, 8, 8, 1].

    Returns
    -------
    images : ndarray of float32, [N, 8, 8, 1] (or [N, 64]), pixel value / 16
    labels : ndarray of int64, [N], in 0..9

    Raises
    ------
    ImportError
        If scikit-learn is not installed (the message says ``pip install scikit-learn``).
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"load_digits: split must be 'train', 'test' or 'all', got {split!r}")
    images, labels = _digits_arrays()
    if split == "all":
        idx = np.arange(len(labels))
    else:
        perm = np.random.default_rng(seed).permutation(len(labels))
        idx = np.sort(perm[:DIGITS_TEST_SIZE] if split == "test" else perm[DIGITS_TEST_SIZE:])
    x, y = images[idx], labels[idx]          # fancy indexing: fresh, writable copies
    return (x.reshape(len(idx), -1) if flatten else x), y
