"""Argument work shared by the ops: dtype, axis, eps, parameter and out= checks, row views.

Everything here is plain NumPy; the kernels in _core only ever see 2-D arrays with a unit inner
stride and contiguous parameter vectors.
"""

from __future__ import annotations

import math
import operator
from typing import Optional

import numpy as np

try:
    from numpy.exceptions import AxisError
except ImportError:  # numpy < 1.25
    from numpy import AxisError  # type: ignore[attr-defined,no-redef]

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
SUPPORTED = (F32, F64)

def as_float_array(x, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if x.dtype not in SUPPORTED:
        raise TypeError(
            f"{what} has dtype {x.dtype}; fastln supports float32 and float64"
        )
    return x


def normalize_axis(axis, ndim: int) -> int:
    try:
        ax = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an integer, not {type(axis).__name__}") from None
    if not -ndim <= ax < ndim:
        raise AxisError(ax, ndim)
    return ax % ndim


def check_eps(eps) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"eps must be a real number, not {type(eps).__name__}") from None
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def param(p, name: str, shape: tuple, dtype: np.dtype) -> Optional[np.ndarray]:
    """weight/bias as a contiguous 1-D array of x's dtype, or None."""
    if p is None:
        return None
    a = p if isinstance(p, np.ndarray) else np.asarray(p)
    if a.dtype.kind not in "fiu" or a.dtype.kind == "f" and a.dtype.itemsize > 8:
        raise TypeError(f"{name} has dtype {a.dtype}; expected a real floating dtype")
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
    if a.ndim == 2 and rows * cols > 0:
        s0, s1 = a.strides
        item = a.itemsize
        if (s1 == item or cols == 1) and s0 % item == 0 and (rows == 1 or s0 >= cols * item):
            return a
    return None


def check_out(out, x: np.ndarray) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, not {type(out).__name__}")
    if out.dtype != x.dtype:
        raise TypeError(f"out has dtype {out.dtype} but x has dtype {x.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out has shape {out.shape} but x has shape {x.shape}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
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
