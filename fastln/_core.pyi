# Type stubs for the Cython extension fastln._core (see _core.pyx).
import numpy as np
from typing import Any, Dict, Optional, Tuple

class FastlnError(RuntimeError): ...

UNKNOWN_ISA: int
UNSUPPORTED_ISA: int

def layer_norm_2d(
    x: np.ndarray,
    y: np.ndarray,
    weight: Optional[np.ndarray],
    bias: Optional[np.ndarray],
    mean: Optional[np.ndarray],
    rstd: Optional[np.ndarray],
    eps: float,
    y_fresh: bool = ...,
    by_cols: bool = ...,
) -> None: ...
def layer_norm_fast(
    x: object,
    weight: object,
    bias: object,
    eps: object,
    out: object,
    axis: object,
    return_stats: object,
) -> Optional[np.ndarray]: ...
def rms_norm_2d(
    x: np.ndarray,
    y: np.ndarray,
    weight: Optional[np.ndarray],
    rstd: Optional[np.ndarray],
    eps: float,
) -> None: ...
def norm_backward_fast(
    dy: object,
    x: object,
    mean: object,
    rstd: object,
    weight: object,
    axis: object,
    center: bool,
) -> Optional[Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]]: ...
def norm_backward_2d(
    dy: np.ndarray,
    x: np.ndarray,
    mean: Optional[np.ndarray],
    rstd: np.ndarray,
    weight: Optional[np.ndarray],
    dx: np.ndarray,
    dweight: Optional[np.ndarray],
    dbias: Optional[np.ndarray],
) -> None: ...

NATIVE: int
FLOAT16: int
BFLOAT16: int

def add_norm_2d(
    x: np.ndarray,
    residual: Optional[np.ndarray],
    h: Optional[np.ndarray],
    y: np.ndarray,
    weight: Optional[np.ndarray],
    bias: Optional[np.ndarray],
    mean: Optional[np.ndarray],
    rstd: Optional[np.ndarray],
    eps: float,
    fmt: int,
    rms: bool,
) -> None: ...
def add_norm_fast(
    x: object,
    residual: object,
    weight: object,
    bias: object,
    eps: object,
    out: object,
    residual_out: object,
    axis: object,
    return_stats: object,
    rms: bool,
) -> object: ...
def isa() -> str: ...
def best_isa() -> str: ...
def isa_supported(name: str) -> bool: ...
def init_status() -> Tuple[int, str]: ...
def set_isa(name: Optional[str]) -> int: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def has_openmp() -> bool: ...
def set_stream_bytes(native_bytes: int, half_bytes: int) -> None: ...
def get_stream_bytes() -> Tuple[int, int]: ...
def set_band_bytes(row_bytes: int) -> None: ...
def get_band_bytes() -> int: ...
def get_phased_bytes() -> int: ...
def empty(shape: Any, dtype: Any) -> np.ndarray: ...
def set_cache_limit(nbytes: int) -> int: ...
def cache_info() -> Dict[str, int]: ...
