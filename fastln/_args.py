"""Argument work shared by the ops: dtype, axis, eps, parameter and out= checks, row views.

Everything here is plain NumPy; the kernels in _core only ever see 2-D arrays with a unit inner
stride and contiguous parameter vectors.
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Optional

import numpy as np

try:
    from numpy.exceptions import AxisError
except ImportError:  # numpy < 1.25
    from numpy import AxisError  # type: ignore[attr-defined,no-redef]

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
SUPPORTED = (F32, F64)

def refuse_masked(a, what: str, fix: str) -> None:
    ma = sys.modules.get("numpy.ma")  # no masked array exists before numpy.ma is imported
    if ma is not None and isinstance(a, ma.MaskedArray):
        raise TypeError(f"{what} is a masked array, whose mask fastln would ignore; {fix}")


def as_array(a, what: str) -> np.ndarray:
    """a as an ndarray in the machine's byte order (a copy where it was not: the kernels read
    native values, and know float16 and bfloat16 by their dtype alone). A masked array is refused,
    since its mask would be dropped."""
    refuse_masked(a, what, f"pass {what}.filled(value) or {what}.data")
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def as_float_array(x, what: str) -> np.ndarray:
    x = as_array(x, what)
    if x.dtype not in SUPPORTED:
        raise unsupported(what, x.dtype)
    return x


def unsupported(what: str, dtype: np.dtype) -> TypeError:
    return TypeError(
        f"{what} has dtype {dtype}; fastln supports float32, float64, float16 and bfloat16 "
        "(ml_dtypes)"
    )


def is_bfloat16(dtype: np.dtype) -> bool:
    """ml_dtypes.bfloat16, known by name so that ml_dtypes is never imported here."""
    return dtype.itemsize == 2 and dtype.name == "bfloat16"


def apart_from(p: Optional[np.ndarray], *outputs) -> Optional[np.ndarray]:
    """Parameter p, or a copy of it when it shares memory with an output: the kernels read weight
    and bias again for every row, after writing the rows before it (ufuncs likewise read their
    inputs as if copied)."""
    if p is not None and any(o is not None and np.may_share_memory(p, o) for o in outputs):
        return p.copy()
    return p


def normalize_axis(axis, ndim: int) -> int:
    if isinstance(axis, bool):  # an int to operator.index, and NumPy's axis= refuses it
        raise TypeError("axis must be an integer, not bool")
    try:
        ax = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an integer, not {type(axis).__name__}") from None
    if not -ndim <= ax < ndim:
        raise AxisError(ax, ndim)
    return ax % ndim


def check_eps(eps) -> float:
    # float() would parse a string (torch and NumPy refuse one) and take True as 1.0 (refused, as
    # the settings refuse a bool count)
    if isinstance(eps, (str, bytes, bool, np.bool_)):
        raise TypeError(f"eps must be a real number, not {type(eps).__name__}")
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"eps must be a real number, not {type(eps).__name__}") from None
    except OverflowError:  # an int past float's range
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}") from None
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def as_real(p, name: str) -> np.ndarray:
    """p as an ndarray; bfloat16 (ml_dtypes, not a NumPy float kind) widened to float32, exactly,
    so that a weight or bias of it is taken wherever a float16 one is."""
    a = p if type(p) is np.ndarray and p.dtype.isnative else as_array(p, name)
    if is_bfloat16(a.dtype):
        a = a.astype(F32)
    return a


def param(p, name: str, shape: tuple, dtype: np.dtype) -> Optional[np.ndarray]:
    """weight/bias as a contiguous 1-D array of x's dtype, or None."""
    if p is None:
        return None
    a = as_real(p, name)
    if a.dtype.kind not in "fiu" or a.dtype.kind == "f" and a.dtype.itemsize > 8:
        raise TypeError(
            f"{name} has dtype {a.dtype}; expected float16, bfloat16, float32, float64 or an "
            "integer dtype"
        )
    if a.shape != shape:
        raise ValueError(
            f"{name} has shape {a.shape} but the normalized shape of x is {shape}"
        )
    if a.dtype != dtype or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=dtype)
    return a.reshape(-1)


def rows_view(a: np.ndarray, rows: int, cols: int) -> Optional[np.ndarray]:
    """a as a (rows, cols) view with unit inner stride and forward row stride, or None."""
    if a.flags.c_contiguous:
        return a.reshape(rows, cols)
    # A strided 2-D array is its own view only when its axes are the rows and the columns: one
    # normalized over both (rows == 1, cols == its size) cannot be, and is copied by the caller.
    if a.shape == (rows, cols) and rows * cols > 0:
        s0, s1 = a.strides
        item = a.itemsize
        if (s1 == item or cols == 1) and s0 % item == 0 and (rows == 1 or s0 >= cols * item):
            return a
    return None


def same_block(a: np.ndarray, b: np.ndarray) -> bool:
    """a and b are the same rows of memory, element for element (the kernels allow y == x so, and
    no other overlap)."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.strides == b.strides
    )


def check_out(out, x: np.ndarray, what: str = "out") -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{what} must be a numpy.ndarray, not {type(out).__name__}")
    # Every value would be written and the mask returned as it was, so values computed under a set
    # mask would stay hidden.
    refuse_masked(out, what, f"pass {what}.data to write its values")
    if out.dtype != x.dtype:
        if out.dtype.newbyteorder("=") == x.dtype:
            raise TypeError(
                f"{what} has dtype {out.dtype}, not in the machine's byte order; fastln writes "
                "native values"
            )
        raise TypeError(f"{what} has dtype {out.dtype} but x has dtype {x.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"{what} has shape {out.shape} but x has shape {x.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{what} is read-only")
    return out




def split_axis(x: np.ndarray, axis) -> tuple:
    """(axis, rows, cols, normalized shape) of x normalized over [axis, ndim)."""
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    ax = normalize_axis(axis, x.ndim)
    norm_shape = x.shape[ax:]
    cols = math.prod(norm_shape)
    if cols == 0:
        raise ValueError(f"cannot normalize over a zero-size shape {norm_shape}")
    return ax, math.prod(x.shape[:ax]), cols, norm_shape
