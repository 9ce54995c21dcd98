"""Type stubs of the element-wise Cython kernels (validation lives in fxpsim.fixed).

Code arrays (``Codes``) are contiguous 1-D arrays of any 1-, 2-, 4- or 8-byte integer dtype; a result
array's dtype must hold every code of the result format.
"""
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Codes = npt.NDArray[np.integer]

def from_float(x: F64, out: Codes, flags: U8, frac: int, word: int, is_signed: bool, rounding: int,
               overflow: int, n_bits: int, seed: int) -> tuple[int, int, int]: ...
def cast(src_codes: Codes, out_codes: Codes, flags: U8, src_u64: bool, shift: int, word: int,
         is_signed: bool, rounding: int, overflow: int, n_bits: int, seed: int) -> int: ...
def binary(op: int, a_codes: Codes, b_codes: Codes, out_codes: Codes, a_u64: bool, b_u64: bool,
           shift_a: int, shift_b: int, shift_out: int, word: int, is_signed: bool, rounding: int,
           overflow: int, n_bits: int, seed: int, exact_word: int = ..., fits: bool = ...) -> int: ...
def to_float(src_codes: Codes, out: F64, src_u64: bool, frac: int) -> None: ...
def as_int64(arr: Codes) -> I64: ...
