"""``assert_same``: two nested results (dicts, lists, tuples, arrays, scalars) equal leaf by leaf, arrays in dtype,
shape and every value, with the path of the first difference in the message. Shared by the plan tests, which
compare a run through a compiled plan with the node-by-node run."""
from __future__ import annotations

import numpy as np


def assert_same(a, b, where: str = "", nan_equal: bool = False) -> None:
    """``a`` and ``b`` equal everywhere; ``nan_equal``: a NaN equals a NaN (float traces)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]", nan_equal)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same(u, v, f"{where}[{i}]", nan_equal)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=nan_equal), where
    else:
        assert type(a) is type(b) and (a == b or (nan_equal and a != a and b != b)), (where, a, b)
