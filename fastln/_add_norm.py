"""Argument work for the fused residual add (residual=) and 16-bit storage (float16, bfloat16).

The kernels see 2-D rows with a unit inner stride. For float16 and bfloat16 they read and write the
16-bit values and compute in float32; weight and bias are then float32 (converted here, they are
small) and so are mean and rstd. bfloat16 is ml_dtypes.bfloat16: it is recognised by its dtype
name, so ml_dtypes is never imported here.
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._args import (
    F32,
    F64,
    apart_from,
    as_array,
    check_eps,
    check_out,
    is_bfloat16,
    param,
    rows_view,
    same_block,
    split_axis,
    unsupported,
)

F16 = np.dtype(np.float16)


def storage_format(dtype: np.dtype):
    """The kernel storage format of a dtype, or None if the kernels do not take it."""
    if dtype == F32 or dtype == F64:
        return _core.NATIVE
    if dtype == F16:
        return _core.FLOAT16
    if is_bfloat16(dtype):
        return _core.BFLOAT16
    return None


def is_16bit(x) -> bool:
    dt = getattr(x, "dtype", None)
    return isinstance(dt, np.dtype) and dt.itemsize == 2 and storage_format(dt) is not None


def as_input(x, what: str) -> np.ndarray:
    x = as_array(x, what)
    if storage_format(x.dtype) is None:
        raise unsupported(what, x.dtype)
    return x


def _output_rows(a, rows: int, cols: int, inputs) -> np.ndarray | None:
    """a as (rows, cols) rows the kernel may write, or None: write a temporary and copy.

    The kernel finishes reading a row of its inputs before it writes that row, so an output may be
    exactly an input; any other overlap would let it overwrite values it has yet to read.
    """
    v = rows_view(a, rows, cols)
    if v is None:
        return None
    for i in inputs:
        if i is not None and np.may_share_memory(v, i) and not same_block(v, i):
            return None
    return v


def norm(rms, x, weight, bias, eps, axis, out, return_stats, residual, residual_out):
    """fastln.layer_norm (rms False) or fastln.rms_norm (rms True, bias None) with residual= or a
    16-bit x: see their docstrings. The statistics are (mean, rstd), or (rstd,) for RMS norm."""
    if isinstance(x, np.ndarray):
        # The common call (C-contiguous arrays, last axis, no statistics) is checked in C.
        res = _core.add_norm_fast(
            x, residual, weight, bias, eps, out, residual_out, axis, return_stats, rms
        )
        if res is not None:
            return res
    x = as_input(x, "x")
    fmt = storage_format(x.dtype)
    ax, rows, cols, norm_shape = split_axis(x, axis)
    shape = x.shape
    e = check_eps(eps)
    pdt = x.dtype if fmt == _core.NATIVE else F32  # parameters and statistics
    w = param(weight, "weight", norm_shape, pdt)
    b = param(bias, "bias", norm_shape, pdt)

    if residual is None:
        if residual_out is not None:
            raise ValueError("residual_out= needs residual=")
    else:
        residual = as_array(residual, "residual")
        if residual.dtype != x.dtype:
            raise TypeError(
                f"residual has dtype {residual.dtype} but x has dtype {x.dtype}: "
                "x + residual is computed in x's dtype"
            )
        if residual.shape != shape:
            raise ValueError(f"residual has shape {residual.shape} but x has shape {shape}")
        if residual_out is not None:
            check_out(residual_out, x, "residual_out")
            # shares_memory, not may_share_memory: interleaved views (buf[:, ::2], buf[:, 1::2])
            # have overlapping bounds but no element in common, and are taken
            if out is not None and np.shares_memory(out, residual_out):
                raise ValueError("out and residual_out must not share memory")
    if out is not None:
        check_out(out, x)
    w, b = apart_from(w, out, residual_out), apart_from(b, out, residual_out)

    y = out if out is not None else _core.empty(shape, x.dtype)
    h = None
    if residual is not None:
        h = residual_out if residual_out is not None else _core.empty(shape, x.dtype)
    mean = rstd = None
    stats: tuple = ()
    if return_stats:
        rstd = np.empty(shape[:ax], dtype=pdt)
        if not rms:
            mean = np.empty(shape[:ax], dtype=pdt)
        stats = (rstd,) if rms else (mean, rstd)
    result = (y,) if h is None else (y, h)
    result += stats

    if rows > 0:
        x2 = _input_rows(x, rows, cols)
        r2 = None if residual is None else _input_rows(residual, rows, cols)
        y2 = _output_rows(y, rows, cols, (x2, r2))
        y_tmp = y2 is None
        if y_tmp:
            y2 = np.empty((rows, cols), dtype=x.dtype)
        h2 = None
        h_tmp = False
        if h is not None:
            h2 = _output_rows(h, rows, cols, (x2, r2, y2))
            h_tmp = h2 is None
            if h_tmp:
                h2 = np.empty((rows, cols), dtype=x.dtype)
        _core.add_norm_2d(
            x2, r2, h2, y2, w, b,
            None if mean is None else mean.reshape(-1),
            None if rstd is None else rstd.reshape(-1),
            e, fmt, rms,
        )  # fmt: skip
        if y_tmp:
            y[...] = y2.reshape(shape)
        if h is not None and h_tmp:
            h[...] = h2.reshape(shape)
    return result[0] if len(result) == 1 else result


def _input_rows(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    v = rows_view(a, rows, cols)
    return np.ascontiguousarray(a).reshape(rows, cols) if v is None else v
