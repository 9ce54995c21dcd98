"""Type stubs of the fused float32 fake-quantization kernels (validation lives in fxpsim.fake_quant)."""
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]

def forward(x: F32, out: F32, nudged_min: float, nudged_max: float, scale: float, inv_scale: float,
            quant_zero: float, divide: bool) -> None: ...
def backward(dy: F32, x: F32, dx: F32, nudged_min: float, nudged_max: float) -> tuple[float, float]: ...
def fused_vars(x: F32, dy: F32, out: F32, dx: F32, nudged_min: float, nudged_max: float, scale: float,
               quant_zero: float) -> tuple[float, float]: ...
def forward_per_channel(x: F32, out: F32, nudged_min: F32, nudged_max: F32, scale: F32, inv_scale: F32,
                        quant_zero: F32, both_zero: U8) -> None: ...
def backward_per_channel(dy: F32, x: F32, dx: F32, nudged_min: F32, nudged_max: F32, both_zero: U8,
                         below: F64, above: F64) -> None: ...
