"""Rows of 8 KiB or more, which the kernels normalize in column bands across groups of up to 8
rows (see LayerNormRowsBanded): every row must come out bit for bit as a call with that row alone
(which takes the general loop), whatever the number of rows, the group boundaries, the rows' kind
(near zero, far from it, NaN or Inf) and where y lies; and near the float64 reference. Where the
bands start depends on the CPU (fastln.set_band_bytes: 8 KiB or a fifth of L1d on AMD, 16 KiB on
Intel, never elsewhere), so the fixture below turns them on from 8 KiB for every test here, on
every CPU. Rows with neither weight nor bias never take them."""

import platform

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TOL = {np.float32: 3e-5, np.float64: 1e-10}  # rows at 1e4 from zero


@pytest.fixture(autouse=True)
def bands():
    fastln.set_band_bytes(8192)
    yield
    fastln.set_band_bytes(None)


def _rows(rng, rows, cols, dtype):
    """Rows near zero, far from it (the split form and the extra statistics passes) and a few
    that take the exact path (NaN, Inf, a constant row), so that the band loop's pairs of rows
    come in every mix of kinds."""
    x = 0.5 + 2.0 * rng.standard_normal((rows, cols))
    x[1::3] += 1e4
    x[0] += 1e4  # rows 0 and 1, both far, are normalized as a pair (PlainTwo's split form)
    x[2::5] *= 1e-3
    if rows > 4:
        x[4, 7] = np.nan
    if rows > 6:
        x[6, -1] = np.inf
    if rows > 9:
        x[9] = 3.0
    return x.astype(dtype)


def _one_row_each(x, w, b, **kw):
    return np.concatenate([fastln.layer_norm(x[r : r + 1], w, b, **kw) for r in range(len(x))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [2, 7, 8, 9, 17])
@pytest.mark.parametrize("cols", [2048, 2049, 3000, 4096, 5003])
def test_banded_rows_match_one_row_calls(isa, rng, dtype, rows, cols):
    item = np.dtype(dtype).itemsize
    if cols * item < 8192:
        cols = 8192 // item + cols % 64
    x = _rows(rng, rows, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _one_row_each(x, w, b)
        y, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
        np.testing.assert_array_equal(y, want)
        for r in range(rows):
            _, m1, s1 = fastln.layer_norm(x[r : r + 1], w, b, return_stats=True)
            np.testing.assert_array_equal(mean[r : r + 1], m1)
            np.testing.assert_array_equal(rstd[r : r + 1], s1)
        # No weight, no bias, and each alone.
        for ww, bb in ((None, None), (w, None), (None, b)):
            np.testing.assert_array_equal(fastln.layer_norm(x, ww, bb), _one_row_each(x, ww, bb))
        expected = ref.layer_norm(x.astype(np.float64), w, b)
    finite = np.isfinite(x).all(axis=1)
    assert np.isnan(y[~finite]).all()
    np.testing.assert_allclose(y[finite], expected[finite], rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_banded_rows_in_place_strided_and_misaligned(isa, rng, dtype):
    rows, cols = 11, 3001
    x = _rows(rng, rows, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _one_row_each(x, w, b)
        xc = x.copy()
        fastln.layer_norm(xc, w, b, out=xc)
        np.testing.assert_array_equal(xc, want)
        # Rows with a gap between them (a row stride past the row), y one element off a line.
        big = np.zeros((rows, cols + 5), dtype)
        big[:, :cols] = x
        buf = np.empty(rows * cols + 16, dtype)
        out = buf[1 : 1 + rows * cols].reshape(rows, cols)
        fastln.layer_norm(big[:, :cols], w, b, out=out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [4096, 3000])
def test_banded_rows_do_not_depend_on_where_x_lies(isa, rng, placed, dtype, cols):
    # Where every row of x starts at the same place within a vector (the row's bytes a whole
    # number of vectors), the bands after the first start on a vector boundary of x, so that their
    # loads are aligned: the bands then cut the rows elsewhere, and each value must come out the
    # same. 3000 float32 values are whole AVX2 vectors but not AVX-512 ones, whose bands stay put.
    x = _rows(rng, 9, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    line = 64 // np.dtype(dtype).itemsize
    with np.errstate(invalid="ignore", over="ignore"):
        want, want_mean, want_rstd = fastln.layer_norm(placed(x, 0), w, b, return_stats=True)
        for shift in range(1, line):
            y = placed(np.zeros_like(x), (3 * shift) % line)
            _, mean, rstd = fastln.layer_norm(
                placed(x, shift), placed(w, shift), b, out=y, return_stats=True
            )
            np.testing.assert_array_equal(y, want, err_msg=f"shift {shift}")
            np.testing.assert_array_equal(mean, want_mean, err_msg=f"shift {shift}")
            np.testing.assert_array_equal(rstd, want_rstd, err_msg=f"shift {shift}")
            xs = placed(x, shift)
            fastln.layer_norm(xs, w, b, out=xs)
            np.testing.assert_array_equal(xs, want, err_msg=f"in place, shift {shift}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_banded_rows_any_thread_count(isa, rng, dtype):
    # Each thread bands its own block of rows; the groups then start elsewhere, the result not.
    rows, cols = 37, 4100
    x = _rows(rng, rows, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _one_row_each(x, w, None)
        try:
            for threads in (1, 2, 3):
                fastln.set_num_threads(threads)
                np.testing.assert_array_equal(fastln.layer_norm(x, w), want)
        finally:
            fastln.set_num_threads(0)


@pytest.mark.parametrize("row_kib", [64, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_bands_match_one_row_calls(isa, rng, placed, dtype, row_kib):
    # A one-thread call of 32 MiB or more in rows of whole lines streams y in column bands
    # (StreamBands) from rows of 8 KiB (16 KiB on Intel CPUs and with an L1d over 32 KiB, where
    # the 8 KiB case checks the general loop), the bands then cut on lines of y: y 16 bytes past a
    # line, and on one, and x rows apart by more than their length.
    item = np.dtype(dtype).itemsize
    cols = (row_kib << 10) // item + (0 if dtype == np.float32 else 8)
    rows = (32 << 20) // (cols * item) + 3
    x = _rows(rng, rows, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    try:
        fastln.set_num_threads(1)
        fastln.set_stream_bytes(0)
        with np.errstate(invalid="ignore", over="ignore"):
            want = _one_row_each(x, w, b)
            for shift in (16 // item, 0):
                y = placed(np.zeros_like(x), shift)
                fastln.layer_norm(x, w, b, out=y)
                np.testing.assert_array_equal(y, want, err_msg=f"y {shift} past a line")
            big = np.zeros((rows, cols + 8), dtype)
            big[:, :cols] = x
            got = fastln.layer_norm(big[:, :cols], None, b)
            np.testing.assert_array_equal(got, _one_row_each(x, None, b))
            xs = placed(x, 16 // item)
            fastln.layer_norm(xs, w, b, out=xs)
            np.testing.assert_array_equal(xs, want, err_msg="in place")
            expected = ref.layer_norm(x.astype(np.float64), w, b)
    finally:
        fastln.set_num_threads(0)
        fastln.set_stream_bytes(None)
    finite = np.isfinite(x).all(axis=1)
    np.testing.assert_allclose(want[finite], expected[finite], rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_banded_rows_fused_residual(isa, rng, op):
    rows, cols = 10, 2500
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    r = rng.standard_normal((rows, cols)).astype(np.float32)
    x[3] += 1e4
    w = rng.standard_normal(cols).astype(np.float32)
    f = getattr(fastln, op)
    y, h = f(x, w, residual=r)
    np.testing.assert_array_equal(h, x + r)
    np.testing.assert_array_equal(y, f(x + r, w))
    # h written over x.
    xc = x.copy()
    y2, h2 = f(xc, w, residual=r, residual_out=xc)
    assert h2 is xc
    np.testing.assert_array_equal(xc, x + r)
    np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_banded_rows_16bit(isa, rng, dtype):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        dt = np.dtype(ml_dtypes.bfloat16)
    else:
        dt = np.dtype(np.float16)
    rows, cols = 9, 4099
    x = (0.5 + 2.0 * rng.standard_normal((rows, cols))).astype(dt)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    y = fastln.layer_norm(x, w, b)
    want = np.concatenate([fastln.layer_norm(x[r : r + 1], w, b) for r in range(rows)])
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("band", [0, 4096, 8192, None])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_bands_on_or_off_same_bits(isa, rng, dtype, band):
    # The setting changes only the loop order: from 0 bytes every row that is not a short row takes
    # the bands (rows of 200 values too), and None is this CPU's default.
    if dtype == "bfloat16":
        dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    else:
        dt = np.dtype(dtype)
    for rows, cols in ((13, 200), (9, 1500), (10, 4099)):
        x = _rows(rng, rows, cols, np.float64).astype(dt)
        r = rng.standard_normal((rows, cols)).astype(dt)
        wdt = np.float64 if dt == np.float64 else np.float32
        w = rng.standard_normal(cols).astype(wdt)
        b = rng.standard_normal(cols).astype(wdt)
        with np.errstate(invalid="ignore", over="ignore"):
            fastln.set_band_bytes(np.iinfo(np.int64).max)
            want = fastln.layer_norm(x, w, b, return_stats=True)
            want_res = fastln.layer_norm(x, w, b, residual=r)
            fastln.set_band_bytes(band)
            got = fastln.layer_norm(x, w, b, return_stats=True)
            got_res = fastln.layer_norm(x, w, b, residual=r)
        for g, e in zip(got + got_res, want + want_res):
            np.testing.assert_array_equal(g.view(np.uint8), e.view(np.uint8))


def _l1d_bytes():
    """cpu0's level-1 data cache from sysfs (which the kernel fills from the same cpuid leaves
    fastln reads), or None where it is not there."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for i in range(8):
            d = f"{base}/index{i}"
            with open(f"{d}/level") as f:
                level = f.read().strip()
            with open(f"{d}/type") as f:
                kind = f.read().strip()
            if level == "1" and kind == "Data":
                with open(f"{d}/size") as f:
                    size = f.read().strip()
                return int(size[:-1]) * 1024 if size.endswith("K") else int(size)
    except (OSError, ValueError):
        return None
    return None


def test_band_bytes_setter():
    fastln.set_band_bytes(None)
    default = fastln.get_band_bytes()
    never = np.iinfo(np.int64).max
    if platform.machine() in ("x86_64", "AMD64"):
        try:
            with open("/proc/cpuinfo") as f:
                info = f.read()
        except OSError:
            info = None
        if info is not None:
            if "AuthenticAMD" in info:
                l1d = _l1d_bytes()
                if l1d is None:
                    assert 8192 <= default < 1 << 20
                else:
                    assert default == max(8192, l1d // 5 + 1)
            else:
                assert default == (16384 if "GenuineIntel" in info else never)
    else:
        assert default == never
    assert fastln.runtime_info()["band_bytes"] == default
    fastln.set_band_bytes(12345)
    assert fastln.get_band_bytes() == 12345
    fastln.set_band_bytes(0)
    assert fastln.get_band_bytes() == 0
    with pytest.raises(ValueError, match="nbytes"):
        fastln.set_band_bytes(-1)
    with pytest.raises(TypeError):
        fastln.set_band_bytes(1.5)
    assert fastln.get_band_bytes() == 0  # a refused value changes nothing
    fastln.set_band_bytes(None)
    assert fastln.get_band_bytes() == default
