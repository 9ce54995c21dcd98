import numpy as np

def encode_kernel(x: np.ndarray, out: np.ndarray, scale_exp: np.ndarray, rand: np.ndarray, R: int,
                  m: int, emin: int, fnu: bool, flush: bool, maxc: int, inf_code: int, nan_code: int,
                  sign_bit: int, is_signed: bool, has_neg_zero: bool, signed_nan: bool, has_nan: bool,
                  has_zero: bool, rnd: int, ovf: int, daz: bool, tiny_in: float) -> tuple[int, int, int, int]: ...

def block_abs_max_f32(bits: np.ndarray, out: np.ndarray) -> None: ...

def encode_blocks_f32(x: np.ndarray, scale_exp: np.ndarray, skip: np.ndarray, out: np.ndarray, m: int, emin: int,
                      flush: bool, maxc: int, inf_code: int, nan_code: int, sign_bit: int, has_neg_zero: bool,
                      signed_nan: bool, has_nan: bool, has_zero: bool, rnd: int) -> int: ...
