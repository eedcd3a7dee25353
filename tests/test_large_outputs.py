"""Outputs of 2 MiB and more given as out= (32 MiB for 16-bit y), which the kernels write with
non-temporal stores (whole cache lines, plain stores for the partial lines at each end of a row):
the same values as small calls and allocating calls, whatever the alignment of y, on every usable
ISA."""

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TOL = {np.float32: 2e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [256, 1024, 1031, 4097])
@pytest.mark.parametrize("shift", [0, 1, 3, 8, 15])
def test_streamed_rows_match_small_calls(isa, streaming, rng, dtype, cols, shift):
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
def test_large_in_place(isa, streaming, rng, dtype):
    # In place, y takes plain stores however large (its lines were just read); out of place, the
    # same size streams: the same values either way.
    x = (3.0 + 2.0 * rng.standard_normal((600, 1024))).astype(dtype)
    x[7, 3] = np.nan
    w = rng.standard_normal(1024).astype(dtype)
    expected = np.empty_like(x)
    fastln.layer_norm(x, w, None, out=expected)
    fastln.layer_norm(x, w, None, out=x)
    np.testing.assert_array_equal(x, expected)
    assert np.isnan(x[7]).all() and np.isfinite(np.delete(x, 7, axis=0)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [256, 1031, 4097])
@pytest.mark.parametrize("shift", [0, 1, 3, 8, 15])
def test_streamed_rms_norm_rows(isa, streaming, rng, dtype, cols, shift):
    # rms_norm streams y as layer_norm does (whole lines, plain stores at each end of a row): the
    # same values as one-row calls (plain stores), whatever y's alignment, rows on the exact path
    # (NaN, all zero) included; in place (plain stores) the same values again.
    itemsize = np.dtype(dtype).itemsize
    rows = (2 << 20) // (cols * itemsize) + 3
    x = (0.5 + rng.standard_normal((rows, cols))).astype(dtype)
    x[5, 7] = np.nan
    x[6] = 0
    w = rng.standard_normal(cols).astype(dtype)
    buf = np.empty(rows * cols + 64, dtype)
    start = (-buf.ctypes.data % 64) // itemsize + shift
    y = buf[start:start + rows * cols].reshape(rows, cols)
    fastln.rms_norm(x, w, out=y)
    for r in (0, 1, 5, 6, rows // 2, rows - 1):
        np.testing.assert_array_equal(y[r], fastln.rms_norm(x[r:r + 1], w)[0])
    assert np.isnan(y[5]).all() and (y[6] == 0).all()
    ok = np.isfinite(x).all(axis=1)
    np.testing.assert_allclose(y[ok][::97], ref.rms_norm(x[ok][::97], w), rtol=0, atol=TOL[dtype])
    fastln.rms_norm(x, w, out=x)
    np.testing.assert_array_equal(x, y)


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


def _rows_of_every_kind(rng, dtype, cols):
    """16 MiB of x and a few rows more, with rows at an offset, constant, NaN, scaled and of
    order 1e-30 at both ends and in the middle (`picks`), and weight and bias."""
    itemsize = np.dtype(dtype).itemsize
    rows = (16 << 20) // (cols * itemsize) + 5
    kinds = [(0.0, 1.0), (1e4, 1.0), (3.0, 0.0), (np.nan, 1.0), (-2.0, 3.0), (0.0, 1e-30)]
    x = (0.5 + rng.standard_normal((rows, cols))).astype(dtype)
    picks = [0, 1, 2, 3, 4, 5, 6, 7, rows // 2, rows // 2 + 1, rows - 2, rows - 1]
    for k, r in enumerate(picks):
        c, s = kinds[k % len(kinds)]
        x[r] = c + s * rng.standard_normal(cols)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    return x, picks, w, b


def _check_against_rows(x, y, picks, w, b, step):
    """layer_norm(x, w, b, out=y) gives, bit for bit, the picked rows alone and an allocating
    call; every step-th row without NaN is within the reference's bar; then in place it gives y
    again (x is overwritten)."""
    fastln.layer_norm(x, w, b, out=y)
    for r in picks:
        np.testing.assert_array_equal(y[r], fastln.layer_norm(x[r:r + 1], w, b)[0])
    np.testing.assert_array_equal(fastln.layer_norm(x, w, b), y)
    ok = ~np.isnan(x[::step]).any(axis=1)
    np.testing.assert_allclose(y[::step][ok], ref.layer_norm(x[::step][ok], w, b), rtol=0,
                               atol=TOL[x.dtype.type] * 10)
    fastln.layer_norm(x, w, b, out=x)
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [50, 64, 100])
@pytest.mark.parametrize("shift", [0, 2])
def test_short_rows_asking_ahead(isa, streaming, rng, dtype, cols, shift):
    # Short rows of 256 bytes or more with 16 MiB of y or more take a form of the row pipeline
    # that asks for x and y ahead of the hardware (kShortAheadBytes), streamed when every row of y
    # is whole lines: the same values as the rows alone, through every kind of row, in and out of
    # place.
    x, picks, w, b = _rows_of_every_kind(rng, dtype, cols)
    rows, itemsize = x.shape[0], x.itemsize
    buf = np.empty(rows * cols + 64, dtype)
    start = (-buf.ctypes.data % 64) // itemsize + shift
    y = buf[start:start + rows * cols].reshape(rows, cols)
    _check_against_rows(x, y, picks, w, b, step=101)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [768, 1031, 4097])
@pytest.mark.parametrize("stream_mib", [2, 1 << 20])
def test_long_rows_asking_far_ahead(isa, rng, dtype, cols, stream_mib):
    # With 16 MiB of x or more, the statistics pass of rows of 2 KiB or more asks for x farther
    # ahead (kFarAheadBytes): the same values as the rows alone (which ask 1 KiB ahead), through
    # every kind of row, with streamed and plain stores of y (plain: the column bands for the
    # rows of 16 KiB), in and out of place.
    x, picks, w, b = _rows_of_every_kind(rng, dtype, cols)
    fastln.set_stream_bytes(stream_mib << 20, 32 << 20)
    try:
        _check_against_rows(x, np.empty_like(x), picks, w, b, step=53)
    finally:
        fastln.set_stream_bytes(None, None)


def _half_dtypes():
    # float16 always; bfloat16 where ml_dtypes is installed (its cases skip otherwise).
    return [np.float16, pytest.param("bfloat16", id="bfloat16")]


def _dtype(name):
    if name == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(name)


@pytest.mark.parametrize("dtype", _half_dtypes())
@pytest.mark.parametrize("cols", [64, 1024, 1031])
@pytest.mark.parametrize("shift", [0, 8])
def test_streamed_16bit_rows(isa, streaming, rng, dtype, cols, shift):
    # 16-bit y of 32 MiB and more is streamed, two vectors' values in each store (partial lines at
    # the ends of a row plain): bit for bit the float32 computation rounded once, as plain stores
    # give it.
    dtype = _dtype(dtype)
    rows = (32 << 20) // (cols * 2) + 3
    x = (0.5 + rng.standard_normal((rows, cols), dtype=np.float32)).astype(dtype)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    buf = np.empty(rows * cols + 32, dtype)
    start = (-buf.ctypes.data % 64) // 2 + shift
    y = buf[start:start + rows * cols].reshape(rows, cols)
    fastln.layer_norm(x, w, b, out=y)
    expected = fastln.layer_norm(x.astype(np.float32), w, b).astype(dtype)
    np.testing.assert_array_equal(y.view(np.uint16), expected.view(np.uint16))
    for r in (0, rows // 2, rows - 1):
        np.testing.assert_array_equal(y[r].view(np.uint16),
                                      fastln.layer_norm(x[r:r + 1], w, b)[0].view(np.uint16))


@pytest.mark.parametrize("dtype", _half_dtypes())
def test_streamed_16bit_residual_in_place(isa, streaming, rng, dtype):
    # The fused add with y of 32 MiB: streamed into an array of its own, with h (plain stores)
    # into x itself; then in place into r (plain stores: its lines were just read). The same
    # values either way.
    dtype = _dtype(dtype)
    rows, cols = (32 << 20) // (1024 * 2) + 5, 1024
    x0 = rng.standard_normal((rows, cols), dtype=np.float32).astype(dtype)
    r = rng.standard_normal((rows, cols), dtype=np.float32).astype(dtype)
    x0[9, 5] = np.nan
    h_expected = (x0.astype(np.float32) + r.astype(np.float32)).astype(dtype)
    y_expected = fastln.layer_norm(h_expected.astype(np.float32)).astype(dtype)
    x = x0.copy()
    out = np.empty_like(x)
    y, h = fastln.layer_norm(x, residual=r, out=out, residual_out=x)
    assert y is out and h is x
    np.testing.assert_array_equal(h.view(np.uint16), h_expected.view(np.uint16))
    np.testing.assert_array_equal(y.view(np.uint16), y_expected.view(np.uint16))
    x = x0.copy()
    y, h = fastln.layer_norm(x, residual=r, out=r, residual_out=x)
    assert y is r and h is x
    np.testing.assert_array_equal(h.view(np.uint16), h_expected.view(np.uint16))
    np.testing.assert_array_equal(y.view(np.uint16), y_expected.view(np.uint16))
    assert np.isnan(y[9].astype(np.float32)).all()
