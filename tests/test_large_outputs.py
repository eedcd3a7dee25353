"""Outputs of 2 MiB and more given as out=, which the kernels write with non-temporal stores (whole
cache lines, plain stores for the partial lines at each end of a row): the same values as small
calls and allocating calls, whatever the alignment of y, on every usable ISA."""

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TOL = {np.float32: 2e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [256, 1024, 1031, 4097])
@pytest.mark.parametrize("shift", [0, 1, 3, 8, 15])
def test_streamed_rows_match_small_calls(isa, rng, dtype, cols, shift):
    itemsize = np.dtype(dtype).itemsize
    rows = (2 << 20) // (cols * itemsize) + 3
    x = (0.5 + rng.standard_normal((rows, cols))).astype(dtype)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    # y starts `shift` elements past a 64-byte boundary.
    buf = np.empty(rows * cols + 64, dtype)
    start = (-buf.ctypes.data % 64) // itemsize + shift
    y = buf[start:start + rows * cols].reshape(rows, cols)
    assert y.ctypes.data % 64 == shift * itemsize % 64
    fastln.layer_norm(x, w, b, out=y)
    # Allocating: the output is fresh, so plain stores (FASTLN_Y_FRESH); the same values.
    np.testing.assert_array_equal(fastln.layer_norm(x, w, b), y)
    for r in (0, 1, rows // 2, rows - 1):
        # A one-row call writes less than 2 MiB: plain stores, and the same arithmetic.
        np.testing.assert_array_equal(y[r], fastln.layer_norm(x[r:r + 1], w, b)[0])
    np.testing.assert_allclose(y[::97], ref.layer_norm(x[::97], w, b), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_in_place(isa, rng, dtype):
    x = (3.0 + 2.0 * rng.standard_normal((600, 1024))).astype(dtype)
    x[7, 3] = np.nan
    expected = fastln.layer_norm(x)
    fastln.layer_norm(x, out=x)
    np.testing.assert_array_equal(x, expected)
    assert np.isnan(x[7]).all() and np.isfinite(np.delete(x, 7, axis=0)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("cols", [64, 100, 768])
def test_row_pipeline_mixed_rows(isa, rng, dtype, rows, cols):
    # The kernels compute row r + 2's statistics while normalizing row r, and rows far from zero
    # mean, constant rows and NaN rows each take another path: any mix gives what each row alone
    # gives.
    kinds = [(0.0, 1.0), (1e4, 1.0), (3.0, 0.0), (np.nan, 1.0), (-2.0, 3.0)]
    x = np.empty((rows, cols), dtype)
    for r in range(rows):
        c, s = kinds[(r * 3 + cols) % len(kinds)]
        x[r] = c + s * rng.standard_normal(cols)
    w = rng.standard_normal(cols).astype(dtype)
    y, mean, rstd = fastln.layer_norm(x, w, None, return_stats=True)
    for r in range(rows):
        yr, mr, sr = fastln.layer_norm(x[r:r + 1], w, None, return_stats=True)
        np.testing.assert_array_equal(y[r], yr[0])
        np.testing.assert_array_equal(mean[r], mr[0])
        np.testing.assert_array_equal(rstd[r], sr[0])
    ok = ~np.isnan(x).any(axis=1)
    # |w| up to ~4 scales the error bar of an output of order 1.
    np.testing.assert_allclose(y[ok], ref.layer_norm(x[ok], w), rtol=0, atol=TOL[dtype] * 10)
    assert np.isnan(y[~ok]).all()
