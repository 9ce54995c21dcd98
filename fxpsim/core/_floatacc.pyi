import numpy as np

def fused_kernel(ua: np.ndarray, ea: np.ndarray, ga: np.ndarray, fa: np.ndarray, ub: np.ndarray, eb: np.ndarray,
                 gb: np.ndarray, fb: np.ndarray, qa: np.ndarray, qb: np.ndarray, c: np.ndarray, d: np.ndarray,
                 st: np.ndarray, params: dict, threads: int) -> None: ...

def fused_rd_kernel(ua: np.ndarray, ea: np.ndarray, ga: np.ndarray, fa: np.ndarray, ub: np.ndarray, eb: np.ndarray,
                 gb: np.ndarray, fb: np.ndarray, qa: np.ndarray, qb: np.ndarray, c: np.ndarray, d: np.ndarray,
                 st: np.ndarray, params: dict, threads: int) -> None: ...

def fused_cols_kernel(ua: np.ndarray, ea: np.ndarray, ga: np.ndarray, fa: np.ndarray, ub: np.ndarray,
                      eb: np.ndarray, gb: np.ndarray, fb: np.ndarray, qa: np.ndarray, qb: np.ndarray, c: np.ndarray,
                      d: np.ndarray, st: np.ndarray, params: dict, threads: int) -> None: ...

def block_kernel(ia: np.ndarray, fa: np.ndarray, ib: np.ndarray, fb: np.ndarray, sas: np.ndarray, sae: np.ndarray,
                 san: np.ndarray, sbs: np.ndarray, sbe: np.ndarray, sbn: np.ndarray, c: np.ndarray, d: np.ndarray,
                 st: np.ndarray, params: dict, threads: int) -> None: ...
