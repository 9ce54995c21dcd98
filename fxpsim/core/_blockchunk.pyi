import numpy as np

def block_chunk_step(S: np.ndarray, d: np.ndarray, ea: np.ndarray, eb: np.ndarray, b0: int, nb: int, F: int,
                     lam: int, bad: np.ndarray) -> tuple[int, int, int]: ...
