"""RMSNorm forward, the backward passes of LayerNorm and RMSNorm, and the module machinery a NumPy
training loop calls (forward keeps what backward needs; backward returns dx and stores the
parameter gradients).

The argument conventions are layer_norm's: float32, float64, float16 or bfloat16, normalization
over the axes [axis, x.ndim), parameters of shape x.shape[axis:], statistics of shape
x.shape[:axis].
"""

from __future__ import annotations

import operator
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _add_norm, _core
from ._args import (
    F32,
    SUPPORTED,
    apart_from,
    as_array,
    as_float_array,
    as_real,
    check_eps,
    check_out,
    param,
    rows_view,
    same_block,
    split_axis as _split,
)

__all__ = ["rms_norm", "layer_norm_backward", "rms_norm_backward", "RMSNorm"]


def _rows_in(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """a as a (rows, cols) array the kernels read: a view when its layout allows, else a copy."""
    a2 = rows_view(a, rows, cols)
    return a2 if a2 is not None else np.ascontiguousarray(a).reshape(rows, cols)


def _rows_out(x2: np.ndarray, y: np.ndarray, rows: int, cols: int) -> Optional[np.ndarray]:
    """y as a (rows, cols) view the kernels may write while reading x2, or None (use a temporary):
    when y's layout does not allow a view, or y overlaps x2 other than element for element."""
    y2 = rows_view(y, rows, cols)
    if y2 is not None and np.may_share_memory(x2, y2):
        if not same_block(x2, y2):
            return None
    return y2


def _stat(s, name: str, shape: tuple, norm_ndim: int, dtype: np.dtype) -> np.ndarray:
    """mean or rstd as a contiguous 1-D array of dtype (x's; float32 for 16-bit x). Takes the shape
    x.shape[:axis], or that shape followed by ones (torch's keepdim statistics)."""
    if s is None:  # as_array would make it an object array and the message name its dtype
        raise TypeError(f"{name} is required: pass the {name} that the forward pass returned")
    a = as_real(s, name)  # bfloat16 widened exactly, as for weight and bias
    if a.dtype.kind != "f" or a.dtype.itemsize > 8:
        raise TypeError(
            f"{name} has dtype {a.dtype}; expected float32, float64, float16 or bfloat16")
    if a.shape != shape and a.shape != shape + (1,) * norm_ndim:
        raise ValueError(f"{name} has shape {a.shape}; expected {shape} for these x and axis")
    return np.ascontiguousarray(a, dtype=dtype).reshape(-1)


def rms_norm(
    x,
    weight=None,
    eps: float = 1e-6,
    *,
    axis: int = -1,
    out: Optional[np.ndarray] = None,
    return_stats: bool = False,
    residual: Optional[np.ndarray] = None,
    residual_out: Optional[np.ndarray] = None,
):
    """Root mean square layer normalization (Zhang & Sennrich, 2019) over the axes [axis, x.ndim).

    y = x / sqrt(mean(x**2) + eps) * weight, the mean taken over the normalized axes of each
    example: torch.nn.functional.rms_norm with normalized_shape = x.shape[axis:], and ONNX
    RMSNormalization. One fused kernel: one read of the row for the sum of squares, one to scale.

    Parameters
    ----------
    x : array_like of float32, float64, float16 or bfloat16 (ml_dtypes), ndim >= 1, any strides.
        float16 and bfloat16 are computed in float32 and rounded once to x's dtype.
    weight : None, or an array of shape x.shape[axis:] (cast to x's dtype; to float32 for
        float16 and bfloat16 x).
    eps : float >= 0, added to the mean square.
    axis : first normalized axis (negative counts from the end).
    out : array of x's shape and dtype to write into; may be x itself (in place).
    return_stats : also return rstd = 1/sqrt(mean(x**2) + eps), of shape x.shape[:axis]
        (float32 for float16 and bfloat16 x).
    residual : array of x's shape and dtype: h = x + residual (rounded once to x's dtype) is
        normalized instead of x and returned too, in one pass (the pre-norm block's residual add).
    residual_out : array of x's shape and dtype to write h into; may be x or residual itself.

    Returns
    -------
    y; (y, h) with residual; either followed by rstd when return_stats is true.

    Examples
    --------
    >>> import numpy as np, fastln
    >>> x = np.array([[3.0, 4.0]], dtype=np.float32)
    >>> fastln.rms_norm(x, eps=0.0).round(4)
    array([[0.8485, 1.1314]], dtype=float32)
    """
    x = as_array(x, "x")  # a list of float16 values is float16 x
    if residual is not None or residual_out is not None or _add_norm.is_16bit(x):
        return _add_norm.norm(
            True, x, weight, None, eps, axis, out, return_stats, residual, residual_out
        )
    x = as_float_array(x, "x")
    ax, rows, cols, norm_shape = _split(x, axis)
    e = check_eps(eps)
    dt = x.dtype
    w = param(weight, "weight", norm_shape, dt)
    if out is not None:
        check_out(out, x)
        w = apart_from(w, out)
    y = out if out is not None else _core.empty(x.shape, dt)
    rstd = np.empty(x.shape[:ax], dtype=dt) if return_stats else None
    if rows > 0:
        x2 = _rows_in(x, rows, cols)
        y2 = _rows_out(x2, y, rows, cols)
        dst = y2 if y2 is not None else np.empty((rows, cols), dtype=dt)
        _core.rms_norm_2d(x2, dst, w, None if rstd is None else rstd.reshape(-1), e)
        if y2 is None:
            y[...] = dst.reshape(x.shape)
    return (y, rstd) if return_stats else y


def _backward(dy, x, mean, rstd, weight, axis, center: bool):
    # The common call (C-contiguous arrays of one dtype, the last axis, plain statistics and weight)
    # runs with its checks done in C; any other call gets None back and goes on below.
    got = _core.norm_backward_fast(dy, x, mean, rstd, weight, axis, center)
    if got is not None:
        return got
    x = as_array(x, "x")
    dy = as_array(dy, "dy")
    if _add_norm.is_16bit(x) or _add_norm.is_16bit(dy):
        # float16 and bfloat16 dy and x go to the kernels as they are (widened in registers, dx
        # rounded once); the statistics, weight and gradients are float32.
        x = _add_norm.as_input(x, "x")
        dy = _add_norm.as_input(dy, "dy")
        pdt = F32
    else:
        x = as_float_array(x, "x")
        dy = as_float_array(dy, "dy")
        pdt = x.dtype
    if dy.dtype != x.dtype:
        raise TypeError(f"dy has dtype {dy.dtype} but x has dtype {x.dtype}")
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape} but x has shape {x.shape}")
    ax, rows, cols, norm_shape = _split(x, axis)
    stat_shape = x.shape[:ax]
    m = _stat(mean, "mean", stat_shape, len(norm_shape), pdt) if center else None
    r = _stat(rstd, "rstd", stat_shape, len(norm_shape), pdt)
    w = param(weight, "weight", norm_shape, pdt)
    dx = _core.empty(x.shape, x.dtype)
    dw = np.zeros(norm_shape, dtype=pdt) if w is not None else None
    db = np.zeros(norm_shape, dtype=pdt) if w is not None and center else None
    if rows == 0:
        return dx, dw, db
    _core.norm_backward_2d(
        _rows_in(dy, rows, cols),
        _rows_in(x, rows, cols),
        m,
        r,
        w,
        dx.reshape(rows, cols),
        None if dw is None else dw.reshape(-1),
        None if db is None else db.reshape(-1),
    )
    return dx, dw, db


def layer_norm_backward(dy, x, mean, rstd, weight=None, *, axis: int = -1):
    """Gradients of layer_norm: (dx, dweight, dbias), given dy = dL/dy and the forward pass's x,
    mean and rstd (as layer_norm(..., return_stats=True) returns them). The mean comes rounded to
    x's dtype; for rows whose mean is more than 16 standard deviations from zero, where that
    rounding can show, the rest of the mean is recovered from x (the mean of x - mean).

    dweight = sum over examples of dy * (x - mean) * rstd and dbias = sum of dy; both are None when
    weight is None. They are summed in x's dtype over fixed blocks of rows (16 to 64, set by the
    row length) and then over the blocks in double in a fixed order, so they are bitwise the same
    at any thread count.

    dy and x may also be float16 or bfloat16 (ml_dtypes), both of one dtype: they are read as they
    are, the math is float32 and dx is rounded once to x's dtype; mean and rstd are then float32
    (as the forward pass returns them), weight float32 or x's dtype, and dweight and dbias float32
    (summed in float32 within the blocks).

    Examples
    --------
    >>> import numpy as np, fastln
    >>> x = np.random.default_rng(0).standard_normal((4, 8))
    >>> w = np.ones(8)
    >>> y, mean, rstd = fastln.layer_norm(x, w, return_stats=True)
    >>> dx, dw, db = fastln.layer_norm_backward(np.ones_like(y), x, mean, rstd, w)
    >>> bool(abs(dx).max() < 1e-12), db.tolist() == [4.0] * 8
    (True, True)
    """
    return _backward(dy, x, mean, rstd, weight, axis, True)


def rms_norm_backward(dy, x, rstd, weight=None, *, axis: int = -1):
    """Gradients of rms_norm: (dx, dweight), given dy = dL/dy and the forward pass's x and rstd
    (as rms_norm(..., return_stats=True) returns it). dweight = sum over examples of dy * x * rstd,
    None when weight is None; bitwise the same at any thread count, as in layer_norm_backward,
    which also says how float16 and bfloat16 dy and x are handled."""
    dx, dw, _ = _backward(dy, x, None, rstd, weight, axis, False)
    return dx, dw


ArrayLike = Union[np.ndarray, Sequence, float]


class _NormModule:
    """What LayerNorm and RMSNorm share: parameters, shape checks, and forward/backward state."""

    def __init__(self, normalized_shape, eps, elementwise_affine, bias, dtype) -> None:
        if isinstance(normalized_shape, (int, np.integer)) or np.ndim(normalized_shape) == 0:
            normalized_shape = (normalized_shape,)  # 8, np.int64(8), np.array(8)
        # operator.index takes True as 1: LayerNorm(True) is refused as a bool count is
        if any(isinstance(d, (bool, np.bool_)) or getattr(d, "dtype", None) == np.bool_
               for d in normalized_shape):
            raise TypeError(f"normalized_shape must hold ints, not bool: {normalized_shape!r}")
        self.normalized_shape: Tuple[int, ...] = tuple(operator.index(d) for d in normalized_shape)
        if len(self.normalized_shape) == 0 or any(d <= 0 for d in self.normalized_shape):
            raise ValueError(f"normalized_shape must be non-empty and positive, got {normalized_shape}")
        self.eps = check_eps(eps)
        # None is torch's "the default dtype", float32; np.dtype(None) would be float64
        self.dtype = np.dtype(np.float32 if dtype is None else dtype)
        if self.dtype not in SUPPORTED:
            raise TypeError(f"dtype {self.dtype} is not supported; use float32 or float64")
        self.elementwise_affine = bool(elementwise_affine)
        self.weight: Optional[np.ndarray] = None
        self.bias: Optional[np.ndarray] = None
        if self.elementwise_affine:
            self.weight = np.ones(self.normalized_shape, dtype=self.dtype)
            if bias:
                self.bias = np.zeros(self.normalized_shape, dtype=self.dtype)
        self.grad_weight: Optional[np.ndarray] = None
        self.grad_bias: Optional[np.ndarray] = None
        self._saved: Optional[tuple] = None

    def _axis(self, x: np.ndarray) -> int:
        k = len(self.normalized_shape)
        if x.ndim < k or tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(
                f"input of shape {x.shape} does not end in normalized_shape {self.normalized_shape}"
            )
        return -k

    def _forward(self, x: np.ndarray, ax: int) -> tuple:
        """(y, *statistics) of the functional op."""
        raise NotImplementedError

    def _backward(self, dy, x: np.ndarray, ax: int, *stats) -> tuple:
        """(dx, dweight, dbias) of the functional op."""
        raise NotImplementedError

    def forward(self, x: ArrayLike) -> np.ndarray:
        """y for x, keeping x and the statistics that backward needs (x by reference: do not
        modify it before backward). Calling the module, module(x), keeps nothing and drops what
        an earlier forward kept, so that a backward after it raises instead of returning the
        gradient at that earlier x."""
        x = _add_norm.as_input(x, "x")
        ax = self._axis(x)
        y, *stats = self._forward(x, ax)
        self._saved = (x, ax, *stats)
        return y

    def backward(self, dy: ArrayLike) -> np.ndarray:
        """dx for dy = dL/dy of the last forward; sets grad_weight and grad_bias (overwriting
        them; None for parameters the module does not have)."""
        if self._saved is None:
            raise RuntimeError(
                "backward called before forward: backward needs module.forward(x), which keeps "
                "what it needs; module(x) keeps nothing (and drops what a forward kept)"
            )
        dx, dw, db = self._backward(dy, *self._saved)
        # In the parameters' dtype, as torch's .grad is, so that an optimizer's in-place update
        # keeps it (a float64 x gives float64 sums; 16-bit x gives float32 ones)
        self.grad_weight = None if dw is None else dw.astype(self.dtype, copy=False)
        self.grad_bias = None if db is None or self.bias is None else db.astype(self.dtype,
                                                                                  copy=False)
        return dx

    def zero_grad(self) -> None:
        self.grad_weight = self.grad_bias = None


class RMSNorm(_NormModule):
    """An RMS norm with a weight, like torch.nn.RMSNorm, with forward/backward for training.

    eps defaults to 1e-6, as fastln.rms_norm's does; torch's eps=None means finfo(dtype).eps
    (1.2e-7 for float32), so pass eps to match a torch model built without one.

    >>> import numpy as np, fastln
    >>> norm = fastln.RMSNorm(8)
    >>> x = np.ones((2, 8), dtype=np.float32)
    >>> y = norm.forward(x)
    >>> dx = norm.backward(np.ones_like(y))
    >>> norm.grad_weight.shape
    (8,)
    """

    def __init__(
        self,
        normalized_shape: Union[int, Sequence[int]],
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        dtype=np.float32,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, False, dtype)

    def __call__(self, x: ArrayLike, *, out: Optional[np.ndarray] = None) -> np.ndarray:
        x = _add_norm.as_input(x, "x")
        self._saved = None
        return rms_norm(x, self.weight, self.eps, axis=self._axis(x), out=out)

    def _forward(self, x, ax):
        return rms_norm(x, self.weight, self.eps, axis=ax, return_stats=True)

    def _backward(self, dy, x, ax, rstd):
        dx, dw = rms_norm_backward(dy, x, rstd, self.weight, axis=ax)
        return dx, dw, None

    def __repr__(self) -> str:
        return (
            f"RMSNorm({self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, dtype={self.dtype})"
        )
