"""Typed stub of the ``_table_mac`` extension (see ``_table_mac.pyx``)."""
import numpy as np
import numpy.typing as npt

def table_mac(rows: npt.NDArray[np.int64], table: npt.NDArray[np.int32], bias: npt.NDArray[np.int64], mode: int,
              lo: int, hi: int, out: npt.NDArray[np.int64], narrow: bool = False) -> None: ...
