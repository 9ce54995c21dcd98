"""Type stubs of the element-wise Cython kernels (validation lives in fxpsim.fixed)."""
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

def from_float(x: F64, out: I64, flags: U8, frac: int, word: int, is_signed: bool, rounding: int,
               overflow: int, n_bits: int, seed: int) -> tuple[int, int, int]: ...
def cast(src: I64, out: I64, flags: U8, src_u64: bool, shift: int, word: int, is_signed: bool,
         rounding: int, overflow: int, n_bits: int, seed: int) -> int: ...
def binary(op: int, a: I64, b: I64, out: I64, a_u64: bool, b_u64: bool, shift_a: int, shift_b: int,
           shift_out: int, word: int, is_signed: bool, rounding: int, overflow: int, n_bits: int,
           seed: int, exact_word: int = ...) -> int: ...
def to_float(src: I64, out: F64, src_u64: bool, frac: int) -> None: ...
