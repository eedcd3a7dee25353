"""Float64 NumPy twins of fastln's ops: slow, obviously right, and what the tests compare against.

Each takes the same arguments as the fast op and computes in float64 (two passes), returning
float64 arrays: ground truth for float32 inputs, and for float64 rows near zero. For float64 rows
far from zero relative to their spread, where a float64 mean is itself rounded by up to half an
ulp of the offset, exact_layer_norm is the ground truth.
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from fractions import Fraction

import numpy as np


def _norm_axes(ndim: int, axis: int) -> tuple:
    ax = axis % ndim
    return tuple(range(ax, ndim))


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, axis=-1, return_stats=False):
    x = np.asarray(x, dtype=np.float64)
    axes = _norm_axes(x.ndim, axis)
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    y = d * rstd
    if weight is not None:
        y = y * np.asarray(weight, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    if return_stats:
        return y, mean.reshape(x.shape[: axes[0]]), rstd.reshape(x.shape[: axes[0]])
    return y


def _exact_row(row, eps):
    """One row's exact mean (a Fraction), rstd and normalized values (Decimals, to the context's
    precision)."""
    fx = [Fraction(v) for v in row.tolist()]
    m = sum(fx) / len(fx)
    var = sum((v - m) ** 2 for v in fx) / len(fx) + Fraction(eps)
    rstd = 1 / (Decimal(var.numerator) / Decimal(var.denominator)).sqrt()
    return m, rstd, [Decimal((v - m).numerator) / Decimal((v - m).denominator) * rstd for v in fx]


def exact_layer_norm(x, eps=1e-5):
    """layer_norm of a 2-D array over its last axis, no affine: each row's mean and variance in
    exact rational arithmetic, rstd and the normalized values to 40 digits, rounded to float64
    once. Slow (Python numbers): for a few rows. Returns y and the rows' means."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape)
    means = np.empty(x.shape[0])
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        for r, row in enumerate(x):
            m, _, xhat = _exact_row(row, eps)
            out[r] = [float(v) for v in xhat]
            means[r] = float(m)
    return out, means


def exact_layer_norm_backward(dy, x, weight, eps=1e-5):
    """layer_norm_backward of 2-D arrays over the last axis, at the exact statistics of x (rational
    mean and variance, rstd and the rest to 40 digits, rounded to float64 once): dx, dweight and
    dbias. Slow (Python numbers): for a few rows."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64).tolist()
    dx = np.empty(x.shape)
    n = x.shape[1]
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        dw = [Decimal(0)] * n
        for r, row in enumerate(x):
            _, rstd, xhat = _exact_row(row, eps)
            d = [Decimal(v) for v in dy[r].tolist()]
            g = [a * Decimal(b) for a, b in zip(d, w)]
            mg = sum(g) / n
            mgx = sum(a * b for a, b in zip(g, xhat)) / n
            dx[r] = [float(rstd * (a - mg - b * mgx)) for a, b in zip(g, xhat)]
            dw = [s + a * b for s, a, b in zip(dw, d, xhat)]
    return dx, np.array([float(v) for v in dw]), dy.sum(axis=0)


def rms_norm(x, weight=None, eps=1e-6, *, axis=-1, return_stats=False):
    x = np.asarray(x, dtype=np.float64)
    axes = _norm_axes(x.ndim, axis)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    y = x * rstd
    if weight is not None:
        y = y * np.asarray(weight, dtype=np.float64)
    if return_stats:
        return y, rstd.reshape(x.shape[: axes[0]])
    return y


def _norm_backward(dy, x, mean, rstd, weight, axis):
    """Gradients of y = (x - mean) * rstd * weight with mean and rstd the statistics of x (mean None
    for RMS norm): dx, dweight and dbias (both None without weight). rstd is taken as given; so is
    mean, except for its rounding to x's dtype, which is recovered from x as the mean of x - mean
    (as fastln does for rows far from zero, where it shows)."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    axes = _norm_axes(x.ndim, axis)
    keep = x.shape[: axes[0]] + (1,) * len(axes)
    rstd = np.asarray(rstd, dtype=np.float64).reshape(keep)
    xc = x if mean is None else x - np.asarray(mean, dtype=np.float64).reshape(keep)
    if mean is not None and xc.size:
        rest = xc.mean(axis=axes, keepdims=True)
        xc = xc - np.where(np.isfinite(rest), rest, 0.0)
    xhat = xc * rstd
    g = dy if weight is None else dy * np.asarray(weight, dtype=np.float64)
    proj = (g * xhat).mean(axis=axes, keepdims=True)
    dx = rstd * (g - xhat * proj)
    if mean is not None:
        dx -= rstd * g.mean(axis=axes, keepdims=True)
    lead = tuple(range(axes[0]))
    if weight is None:
        return dx, None, None
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def layer_norm_backward(dy, x, mean, rstd, weight=None, *, axis=-1):
    return _norm_backward(dy, x, mean, rstd, weight, axis)


def rms_norm_backward(dy, x, rstd, weight=None, *, axis=-1):
    dx, dw, _ = _norm_backward(dy, x, None, rstd, weight, axis)
    return dx, dw
def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, *, axis=-1, return_stats=False):
    """layer_norm(x, ..., residual=residual): h = x + residual in x's dtype, then the float64 norm
    of h. Returns (y, h), then mean and rstd when return_stats is true."""
    h = np.asarray(x) + np.asarray(residual)
    r = layer_norm(h, weight, bias, eps, axis=axis, return_stats=return_stats)
    return (r[0], h, *r[1:]) if return_stats else (r, h)
