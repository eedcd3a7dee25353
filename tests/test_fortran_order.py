"""2-D x in Fortran order (the transpose of a C-ordered array, as `(w @ h.T).T` leaves it),
normalized over its last axis: the column kernel reads its examples where they lie, on every usable
ISA. Against the float64 reference and the row kernels (to rounding: the sums run in another
order), through NaN, Inf, constant, tiny and far-offset examples, partial strips, strides, in
place, out= of either layout, and any thread count (bit for bit)."""

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _examples(rng, dtype, rows, cols):
    """Examples of every kind: scaled, at offsets up to 1e6, constant, NaN, Inf, of order 1e-30,
    -0, and one whose first value (the kernel's shift) lies far from the rest."""
    x = (0.3 + rng.standard_normal((rows, cols)) * (0.5 + rng.random((rows, 1)))).astype(dtype)
    kinds = [
        lambda r: r + 1e4, lambda r: r + 1e6, lambda r: r * 0 + 3.0, lambda r: r * 1e-30,
        lambda r: r * -0.0, lambda r: np.where(np.arange(cols) == 0, r + 1e3, r),
    ]
    for k, f in enumerate(kinds):
        if 2 * k + 1 < rows:
            x[2 * k + 1] = f(x[2 * k + 1].astype(np.float64)).astype(dtype)
    if rows > 13:
        x[13, cols // 2] = np.nan
    if rows > 15:
        x[15, 0] = np.inf
    return np.asfortranarray(x)


def _finite(x):
    return np.isfinite(x).all(axis=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3), (5, 64), (17, 768), (33, 1), (40, 33), (100, 257),
                                   (16, 16), (48, 4097)])
@pytest.mark.parametrize("params", ["wb", "w", "b", "none"])
def test_fortran_x_matches_reference(isa, rng, dtype, shape, params):
    rows, cols = shape
    x = _examples(rng, dtype, rows, cols)
    # (33, 1) is C-contiguous too, and takes the row kernels.
    assert x.flags.f_contiguous and (cols == 1 or not x.flags.c_contiguous)
    w = rng.standard_normal(cols).astype(dtype) if "w" in params else None
    b = rng.standard_normal(cols).astype(dtype) if "b" in params else None
    y, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    assert y.flags.f_contiguous and y.dtype == dtype and y.shape == x.shape
    ok = _finite(x)
    assert np.isnan(y[~ok]).all()
    ry, rm, rr = ref.layer_norm(x[ok], w, b, return_stats=True)
    scale = 1.0 if w is None else max(1.0, float(np.abs(w).max()))
    # Per example: the bar, plus what the rounding of a mean of 1e6 costs y in float64 (~1e-10).
    tol = scale * (TOL[dtype] * 10 + 1e-15 * np.abs(rm) * rr)[:, None]
    assert (np.abs(y[ok] - ry) <= tol).all()
    np.testing.assert_allclose(mean[ok], rm, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(rstd[ok], rr, rtol=TOL[dtype] * 10)
    # The row kernels on the same values in C order: the same to rounding, the same NaN rows.
    yc, mc, rc = fastln.layer_norm(np.ascontiguousarray(x), w, b, return_stats=True)
    assert (np.isnan(yc) == np.isnan(y)).all()
    assert (np.abs(y[ok] - yc[ok]) <= 2 * tol).all()
    np.testing.assert_allclose(mean, mc, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fortran_out_in_place_and_strides(isa, rng, dtype):
    rows, cols = 70, 300
    x = _examples(rng, dtype, rows, cols)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    y = fastln.layer_norm(x, w, b)
    # out= in Fortran order, in C order (through a copy), and x itself: the same values.
    out_f = np.asfortranarray(np.zeros_like(x))
    assert fastln.layer_norm(x, w, b, out=out_f) is out_f
    np.testing.assert_array_equal(out_f, y)
    out_c = np.zeros(x.shape, dtype)
    assert fastln.layer_norm(x, w, b, out=out_c) is out_c
    np.testing.assert_allclose(out_c, y, rtol=0, atol=TOL[dtype] * 40)
    xi = x.copy(order="F")
    assert fastln.layer_norm(xi, w, b, out=xi) is xi
    np.testing.assert_array_equal(xi, y)
    # Examples 10 to 60 of a wider Fortran array (a leading dimension larger than the examples),
    # and out= overlapping x other than exactly (through a temporary).
    np.testing.assert_array_equal(fastln.layer_norm(x[10:60], w, b), y[10:60])
    xs = x.copy(order="F")
    fastln.layer_norm(xs[:-1], w, b, out=xs[1:])
    np.testing.assert_allclose(xs[1:], y[:-1], rtol=0, atol=TOL[dtype] * 40)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fortran_any_thread_count(isa, rng, dtype):
    rows, cols = 1000, 96  # enough work for two threads; 1000 is not a whole number of strips
    x = _examples(rng, dtype, rows, cols)
    w = rng.standard_normal(cols).astype(dtype)
    try:
        fastln.set_num_threads(1)
        one = fastln.layer_norm(x, w, None, return_stats=True)
        for n in (2, 3, 7):
            fastln.set_num_threads(n)
            many = fastln.layer_norm(x, w, None, return_stats=True)
            for a, b in zip(one, many):
                np.testing.assert_array_equal(a, b)
    finally:
        fastln.set_num_threads(0)


def test_fortran_3d_and_other_axes(isa, rng):
    # Only 2-D arrays over their last axis take the column kernel; others are copied, as before.
    x = np.asfortranarray(rng.standard_normal((4, 5, 6)).astype(np.float32))
    np.testing.assert_allclose(fastln.layer_norm(x), ref.layer_norm(x), rtol=0, atol=TOL[np.float32])
    np.testing.assert_allclose(fastln.layer_norm(x, axis=1), ref.layer_norm(x, axis=1), rtol=0,
                               atol=TOL[np.float32])
