"""layer_norm against the float64 reference, on every usable ISA."""

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TAILS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 768, 1000, 4097]
DTYPES = [np.float32, np.float64]
# Tolerances against the float64 reference, for outputs of order 1.
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _data(rng, shape, dtype, c=0.0, s=1.0):
    return (c + s * rng.standard_normal(shape)).astype(dtype)


def _check(y, expected, dtype):
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, expected, rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", TAILS)
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_tails(isa, rng, dtype, cols, affine):
    x = _data(rng, (5, cols), dtype, c=3.0, s=2.0)
    w = _data(rng, cols, dtype) if affine in ("weight", "both") else None
    b = _data(rng, cols, dtype) if affine in ("bias", "both") else None
    y = fastln.layer_norm(x, w, b)
    _check(y, ref.layer_norm(x, w, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, -2, -3, 1, 0])
def test_axes(isa, rng, dtype, axis):
    x = _data(rng, (3, 4, 5, 6), dtype)
    norm_shape = x.shape[axis:]
    w = _data(rng, norm_shape, dtype)
    b = _data(rng, norm_shape, dtype)
    y, mean, rstd = fastln.layer_norm(x, w, b, axis=axis, return_stats=True)
    ey, emean, erstd = ref.layer_norm(x, w, b, axis=axis, return_stats=True)
    _check(y, ey, dtype)
    assert mean.shape == x.shape[: axis % 4] and mean.dtype == np.dtype(dtype)
    assert rstd.shape == mean.shape and rstd.dtype == np.dtype(dtype)
    np.testing.assert_allclose(mean, emean, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(rstd, erstd, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_dimensional_and_batch_of_one(isa, rng, dtype):
    x = _data(rng, 768, dtype)
    _check(fastln.layer_norm(x), ref.layer_norm(x), dtype)
    x1 = x.reshape(1, 768)
    _check(fastln.layer_norm(x1), ref.layer_norm(x1), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layouts(isa, rng, dtype):
    base = _data(rng, (40, 70), dtype, c=1.0)
    expected_cols = ref.layer_norm(base[:, 3:50])
    # Row-strided view: handled without a copy.
    _check(fastln.layer_norm(base[:, 3:50]), expected_cols, dtype)
    # Every other row, reversed rows, Fortran order, non-unit inner stride.
    for v in (base[::2], base[::-1], np.asfortranarray(base), base[:, ::3], base.T):
        _check(fastln.layer_norm(v), ref.layer_norm(v), dtype)
    # 3-D non-contiguous with a multi-axis normalized shape.
    v = _data(rng, (6, 5, 8), dtype).transpose(1, 0, 2)
    _check(fastln.layer_norm(v, axis=-2), ref.layer_norm(v, axis=-2), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_and_in_place(isa, rng, dtype):
    x = _data(rng, (7, 33), dtype, c=-2.0)
    expected = ref.layer_norm(x)
    out = np.empty_like(x)
    r = fastln.layer_norm(x, out=out)
    assert r is out
    _check(out, expected, dtype)
    # Strided out.
    big = np.zeros((7, 50), dtype)
    r = fastln.layer_norm(x, out=big[:, 10:43])
    _check(big[:, 10:43], expected, dtype)
    assert not big[:, :10].any() and not big[:, 43:].any()
    # Fortran-ordered out.
    fo = np.asfortranarray(np.empty_like(x))
    fastln.layer_norm(x, out=fo)
    _check(fo, expected, dtype)
    # In place, contiguous and strided.
    xi = x.copy()
    assert fastln.layer_norm(xi, out=xi) is xi
    _check(xi, expected, dtype)
    bx = np.zeros((7, 40), dtype)
    bx[:, 2:35] = x
    fastln.layer_norm(bx[:, 2:35], out=bx[:, 2:35])
    _check(bx[:, 2:35], expected, dtype)
    # Output overlapping the input with an offset: must not read values it already wrote.
    buf = np.zeros(7 * 33 + 5, dtype)
    buf[5:] = x.ravel()
    src = buf[5:].reshape(7, 33)
    dst = buf[:-5].reshape(7, 33)
    fastln.layer_norm(src, out=dst)
    _check(dst, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_negative_zero_rows_do_not_depend_on_the_isa(isa, dtype):
    # A row of -0.0 has mean +0.0 and y = -0.0 on every ISA, whatever the number of steps per lane
    # (lengths of one block of each ISA's accumulators: 4, 16, 32, 64), the tail and the short-row
    # path (sums that start from the first value keep its sign).
    for cols in (1, 3, 4, 8, 16, 17, 32, 33, 64, 65, 128):
        x = np.full((2, cols), -0.0, dtype)
        y, mean, rstd = fastln.layer_norm(x, return_stats=True)
        assert not np.signbit(mean).any(), cols
        assert (y == 0).all() and np.signbit(y).all(), cols
        np.testing.assert_array_equal(rstd, np.full(2, 1 / np.sqrt(1e-5), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [300, 768, 1031, 1500])
@pytest.mark.parametrize("affine", [False, True])
def test_rows_do_not_depend_on_where_arrays_lie(isa, rng, placed, dtype, cols, affine):
    # With AVX-512, rows that do not start on a cache line are read by loads that each stay within
    # one line (permutes put the vectors together; weight and bias are copied to where they start
    # as x does, or as y does on Intel CPUs, where the normalize pass starts its blocks at y's first
    # line rather than at x's): the same arithmetic, so the same bits wherever x, weight, bias and y
    # lie (rows of 300 float32 values start at four places within a line), in place too, for rows
    # near zero, far from it, constant and NaN, on every ISA. 40 rows: weight and bias are copied
    # only from 32 rows a thread. Both starts on one machine: tests/test_runtime.py.
    item = np.dtype(dtype).itemsize
    line = 64 // item
    x = _data(rng, (40, cols), dtype, c=0.5, s=2.0)
    x[1::6] += 1e4
    x[3::6] = 7.0
    x[4::6, cols // 2] = np.nan
    w, b = (_data(rng, cols, dtype), _data(rng, cols, dtype)) if affine else (None, None)
    want, want_mean, want_rstd = fastln.layer_norm(placed(x, 0), w, b, return_stats=True)
    expected = ref.layer_norm(x, w, b)
    near = [r for r in range(40) if r % 6 in (0, 2, 3, 5)]
    _check(want[near], expected[near], dtype)
    # Rows at 1e4: x itself holds 1e4 / 2 times fewer digits of their deviations.
    np.testing.assert_allclose(want[1::6], expected[1::6], rtol=0, atol=10 * TOL[dtype])
    assert np.isnan(want[4::6]).all()
    for shift in range(1, 2 * line):
        xs = placed(x, shift % line)
        ws, bs = w, b
        if affine:
            ws, bs = placed(w, (shift * 3) % line), placed(b, (shift * 5) % line)
        if shift < line:
            y = placed(np.zeros_like(x), (shift * 7) % line)
            _, mean, rstd = fastln.layer_norm(xs, ws, bs, out=y, return_stats=True)
            np.testing.assert_array_equal(mean, want_mean, err_msg=f"shift {shift}")
            np.testing.assert_array_equal(rstd, want_rstd, err_msg=f"shift {shift}")
        else:
            y = fastln.layer_norm(xs, ws, bs, out=xs)
        np.testing.assert_array_equal(y, want, err_msg=f"shift {shift}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_do_not_depend_on_where_arrays_lie(isa, rng, placed, dtype):
    # Rows of more than kFoldBlocks blocks (AVX-512: 262144 float32 values), whose per-lane sums go
    # into double on the way: the loop for rows off a vector's boundary (RotatedSumsOf) must fold
    # where the other does, to give the same bits.
    cols = 2**18 + 1003
    x = _data(rng, (3, cols), dtype, c=0.5, s=2.0)
    x[1] += 1e4  # summed again about its mean: that pass folds too
    want, want_mean, want_rstd = fastln.layer_norm(placed(x, 0), return_stats=True)
    _check(want[[0, 2]], ref.layer_norm(x[[0, 2]]), dtype)
    np.testing.assert_allclose(want[1], ref.layer_norm(x[1]), rtol=0, atol=10 * TOL[dtype])
    for shift in (1, 3, 5):
        y, mean, rstd = fastln.layer_norm(placed(x, shift), return_stats=True)
        np.testing.assert_array_equal(mean, want_mean, err_msg=f"shift {shift}")
        np.testing.assert_array_equal(rstd, want_rstd, err_msg=f"shift {shift}")
        np.testing.assert_array_equal(y, want, err_msg=f"shift {shift}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_rows(isa, dtype):
    x = np.empty((0, 16), dtype)
    y = fastln.layer_norm(x)
    assert y.shape == (0, 16) and y.dtype == np.dtype(dtype)
    y, m, r = fastln.layer_norm(np.empty((2, 0, 3, 4), dtype), axis=2, return_stats=True)
    assert y.shape == (2, 0, 3, 4) and m.shape == (2, 0) and r.shape == (2, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 5, 8, 33, 768])
def test_nan_inf_rows(isa, rng, dtype, cols):
    x = _data(rng, (6, cols), dtype)
    x[1, cols // 2] = np.nan
    x[2, 0] = np.inf
    x[3, cols - 1] = -np.inf
    y, mean, rstd = fastln.layer_norm(x, return_stats=True)
    for r in (1, 2, 3):
        assert np.isnan(y[r]).all(), r
    good = [0, 4, 5]
    assert np.isfinite(y[good]).all()
    _check(y[good], ref.layer_norm(x[good]), dtype)
    assert np.isfinite(mean[good]).all() and np.isfinite(rstd[good]).all()


def test_constant_rows(isa):
    # Zero variance: y = 0 (x - mean == 0 exactly), rstd = 1/sqrt(eps).
    x = np.full((3, 100), 7.25, np.float32)
    y, mean, rstd = fastln.layer_norm(x, eps=1e-5, return_stats=True)
    assert (y == 0).all()
    np.testing.assert_allclose(rstd, 1 / np.sqrt(1e-5), rtol=1e-6)
    np.testing.assert_array_equal(mean, 7.25)


# ---- the accuracy bar of the core issue ----------------------------------------------------------

HARD_ROWS = [(0, 1), (1e2, 1), (1e4, 1), (1e6, 1), (-1e6, 1), (1e4, 1e-2), (0, 1e-3)]


@pytest.mark.parametrize("cols", [64, 768, 65536])
@pytest.mark.parametrize("c,s", HARD_ROWS)
def test_accuracy_bar_float32(isa, rng, c, s, cols):
    x = _data(rng, (3, cols), np.float32, c=c, s=s)
    y = fastln.layer_norm(x)
    err = np.abs(y - ref.layer_norm(x)).max()
    assert err <= 1e-5, (c, s, err)


@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_magnitudes(isa, rng, dtype):
    # Rows near 1e30: squares overflow float32; torch returns NaN here.
    x = _data(rng, (2, 768), dtype, c=1e30, s=1e28)
    y = fastln.layer_norm(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref.layer_norm(x), rtol=0, atol=1e-5)
    # Tiny values whose squares underflow, with eps = 0.
    tiny = 1e-25 if dtype == np.float32 else 1e-200
    x = _data(rng, (2, 768), dtype, s=tiny)
    y = fastln.layer_norm(x, eps=0.0)
    assert np.isfinite(y).all()
    # With eps = 0 the result is scale-free, so the reference may run on x / tiny.
    expected = ref.layer_norm(x.astype(np.float64) / tiny, eps=0.0)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5)
    # Values near the top of the dtype's range, whose sum overflows.
    big = np.finfo(dtype).max / 4
    x = (big * rng.uniform(-1, 1, (2, 100))).astype(dtype)
    y = fastln.layer_norm(x)
    assert np.isfinite(y).all()
    # The reference runs on x / big (its squares would overflow float64 too), with eps scaled alike.
    expected = ref.layer_norm(x.astype(np.float64) / big, eps=1e-5 / float(big) / float(big))
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5)


# float64 rows far from zero relative to their spread: the mean, a double, is rounded by up to half
# an ulp of the offset, and a float64 reference rounds it alike (at 1e15 + N(0,1), 768 values, it
# is off by 2e-2). Against the exact reference, every row path: the short rows' pipeline (48 and
# 100 values), the general loop (1000, and 2048 without weight and bias), the column bands (2048,
# 16 KiB, with weight, bias and the residual add), and the Fortran-order kernel.
@pytest.mark.parametrize("cols", [48, 100, 1000, 2048])
@pytest.mark.parametrize("c,s", [(1e6, 1.0), (1e8, 1e-3), (-1e12, 1.0), (1e15, 1.0)])
def test_float64_large_offset(isa, rng, c, s, cols):
    x = _data(rng, (3, cols), np.float64, c=c, s=s)
    expected, mean = ref.exact_layer_norm(x, 1e-5)
    y, m, _ = fastln.layer_norm(x, return_stats=True)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-13)
    np.testing.assert_allclose(m, mean, rtol=1e-15, atol=0)
    # Fortran order: the kernel that takes the examples across the vector lanes.
    np.testing.assert_allclose(fastln.layer_norm(np.asfortranarray(x)), expected, rtol=0, atol=1e-13)
    # With weight, bias and the residual add (h = x + res, rounded to float64, is normalized).
    w = _data(rng, cols, np.float64)
    b = _data(rng, cols, np.float64)
    res = _data(rng, (3, cols), np.float64, s=s)
    h = x + res
    expected, _ = ref.exact_layer_norm(h, 1e-5)
    y, h_out = fastln.layer_norm(x, w, b, residual=res)
    np.testing.assert_array_equal(h_out, h)
    np.testing.assert_allclose(y, expected * w + b, rtol=0, atol=1e-12)


# float64 rows whose squares overflow (at 768 values, from |x| of about 1.5e153) take the exact
# path, which scales the row by a power of two. Rows of one value there gave NaN (eps times the
# scale squared underflowed to 0), a row with one value an ulp above the rest gave y = 2.68 where
# the exact value is 2.24, and rows of c (1 + 1e-10 N(0, 1)) lost 1e-6 of their standard deviation
# to the rounding of the mean (4.4e-16 at 1e150, where the squares do not overflow). Rows of one
# value from about 5.7e305 gave NaN too: there rstd times the scale's inverse overflowed.
@pytest.mark.parametrize("c", [1e153, 1e200, -1e300, 1e306, -1.6e308])
def test_float64_rows_whose_squares_overflow(isa, rng, c):
    cols = 768
    x = np.full((2, cols), c)
    for xx in (x, np.asfortranarray(x)):
        y, m, r = fastln.layer_norm(xx, return_stats=True)
        assert (y == 0).all()
        np.testing.assert_array_equal(m, c)
        np.testing.assert_allclose(r, 1 / np.sqrt(1e-5), rtol=1e-15)
    b = _data(rng, cols, np.float64)
    y, _ = fastln.layer_norm(x, None, b, residual=np.zeros_like(x))
    np.testing.assert_array_equal(y, np.broadcast_to(b, x.shape))
    x = np.full((2, 6), c)
    x[:, 0] = np.nextafter(c, np.inf)
    expected, _ = ref.exact_layer_norm(x, 0.0)
    for xx in (x, np.asfortranarray(x)):
        np.testing.assert_allclose(fastln.layer_norm(xx, eps=0.0), expected, rtol=0, atol=1e-13)
    x = c * (1 + 1e-10 * rng.standard_normal((2, cols)))
    expected, mean = ref.exact_layer_norm(x, 1e-5)
    y, m, _ = fastln.layer_norm(x, return_stats=True)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m, mean, rtol=1e-15, atol=0)
    yf = fastln.layer_norm(np.asfortranarray(x))
    np.testing.assert_allclose(yf, expected, rtol=0, atol=1e-12)


# A row of one value gives y = 0 (then b) whatever eps and the row's length: with a small eps,
# 1 / sqrt(eps) times the value overflows (x * rstd went Inf and the mean's subtraction made NaN).
@pytest.mark.parametrize("c,eps", [(1e200, 1e-300), (1e160, 1e-300), (-1e305, 1e-12),
                                   (1.6e308, 1e-5), (3e-300, 1e-300)])
@pytest.mark.parametrize("cols", [1, 2, 7, 64])
def test_float64_constant_rows_with_small_eps(isa, rng, c, eps, cols):
    x = np.full((3, cols), c)
    b = _data(rng, cols, np.float64)
    for xx in (x, np.asfortranarray(x)):
        np.testing.assert_array_equal(fastln.layer_norm(xx, eps=eps), np.zeros_like(x))
        np.testing.assert_array_equal(fastln.layer_norm(xx, None, b, eps=eps),
                                      np.broadcast_to(b, x.shape))


# The sums of a row are taken per vector lane in the row's compute type, and go into double every
# kFoldBlocks steps (kernels-inl.h): summed over the whole row, a lane stopped taking its values in
# (scalar ISA, 4 lanes: from 2^25 + 64 values of 3, -1, 3, ... the mean came out 1.17; AVX2 and
# AVX-512 only from 2^28 values, too many for a test).
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_very_long_row(isa, dtype):
    x = np.empty(2**25 + 64, dtype)
    x[0::2] = 3
    x[1::2] = -1
    y, mean, rstd = fastln.layer_norm(x, return_stats=True)
    assert float(mean) == 1.0
    np.testing.assert_allclose(float(rstd), 1 / np.sqrt(4 + 1e-5), rtol=1e-6)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(y[:4].astype(np.float64), [1, -1, 1, -1], rtol=tol)
    assert np.array_equal(y[0::2], np.broadcast_to(y[0], y[0::2].shape))


def test_inputs_not_modified(isa, rng):
    x = _data(rng, (4, 17), np.float32)
    w = _data(rng, 17, np.float32)
    b = _data(rng, 17, np.float32)
    copies = [a.copy() for a in (x, w, b)]
    fastln.layer_norm(x, w, b)
    for a, c in zip((x, w, b), copies):
        np.testing.assert_array_equal(a, c)


def test_array_likes_and_parameter_casts(isa):
    x = [[1.0, 2.0, 4.0], [0.5, 0.25, 0.125]]
    y = fastln.layer_norm(x)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, ref.layer_norm(np.array(x)), atol=1e-12)
    # float64 parameters with float32 input are cast to float32.
    xf = np.array(x, np.float32)
    y = fastln.layer_norm(xf, np.array([1.0, 2.0, 3.0]), [0.0, 1.0, 0.0])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref.layer_norm(xf, [1, 2, 3], [0, 1, 0]), atol=2e-6)


# ---- torch ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,nd", [((4, 768), 1), ((3, 5, 64), 2), ((2, 1000), 1), ((1, 9), 1)])
def test_matches_torch(isa, rng, dtype, shape, nd):
    torch = pytest.importorskip("torch")
    x = _data(rng, shape, dtype, c=0.5, s=3.0)
    ns = shape[-nd:]
    w = _data(rng, ns, dtype)
    b = _data(rng, ns, dtype)
    expected = torch.nn.functional.layer_norm(
        torch.from_numpy(x), ns, torch.from_numpy(w), torch.from_numpy(b), eps=1e-5
    ).numpy()
    y = fastln.layer_norm(x, w, b, axis=-nd)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-4 if dtype == np.float32 else 1e-10)


# ---- the module ---------------------------------------------------------------------------------------

def test_layer_norm_module(isa, rng):
    ln = fastln.LayerNorm((4, 8), eps=1e-6)
    assert ln.weight.shape == (4, 8) and (ln.weight == 1).all() and (ln.bias == 0).all()
    ln.weight[:] = rng.standard_normal((4, 8))
    ln.bias[:] = rng.standard_normal((4, 8))
    x = _data(rng, (3, 4, 8), np.float32)
    np.testing.assert_allclose(ln(x), ref.layer_norm(x, ln.weight, ln.bias, 1e-6, axis=-2), atol=2e-5)
    assert fastln.LayerNorm(8, elementwise_affine=False).weight is None
    assert fastln.LayerNorm(8, bias=False).bias is None
    with pytest.raises(ValueError, match="normalized_shape"):
        ln(np.zeros((3, 8, 4), np.float32))


@pytest.mark.parametrize("cols", [207, 768, 4097])
def test_outlier_rows(isa, cols):
    # One value far from the rest. Hypothesis found that a shift by a data value (here the outlier)
    # cost float32 digits; the shift is now the first pass's mean.
    a = np.linspace(0, 1, cols)
    a[0] += 3.0
    b = np.full(cols, 59.0)
    b[0], b[1] = 0.0, 20.5
    b[2:] += np.linspace(0, 1e-2, cols - 2)
    # The scalar ISA has 4 lanes instead of 32, so each lane's float32 sums are 8 times longer on
    # these sorted rows; with x[0] as the shift both ISAs were off by 1e-5 to 2e-5.
    tol = 3e-5 if isa == "scalar" else 3e-6
    for row in (a, a * 1e-3, b, -b + 7):
        x = row.astype(np.float32)[None, :]
        err = np.abs(fastln.layer_norm(x, eps=0.0) - ref.layer_norm(x, eps=0.0)).max()
        assert err <= tol, err


@pytest.mark.parametrize("cols", [64, 768, 4096])
def test_rows_near_the_second_pass_threshold(isa, rng, cols):
    # The first pass sums about zero; rows whose mean lies more than one standard deviation from
    # zero are summed again about that mean, and those beyond two take the split normalize form.
    # Rows on either side of both thresholds, against the float64 reference. The scalar ISA's 4
    # lanes sum 8 times as many values each as AVX2's 32 (at 4096 columns and a mean of 0.99
    # standard deviations: 2.2e-6 in y, 4e-7 in rstd).
    tol, rtol = (5e-6, 1e-6) if isa == "scalar" else (2e-6, 3e-7)
    for c in (0.5, 0.99, 1.01, 1.5, 1.99, 2.01, 3.0, -1.5):
        x = (c + rng.standard_normal((8, cols))).astype(np.float32)
        y, mean, rstd = fastln.layer_norm(x, return_stats=True)
        want, wmean, wrstd = ref.layer_norm(x, eps=1e-5, return_stats=True)
        assert np.abs(y - want).max() <= tol, c
        np.testing.assert_allclose(rstd, wrstd, rtol=rtol)


def test_variance_of_quantized_rows(isa, rng):
    # x = 1e4 + N(0, 1) in float32 is a multiple of 2^-10, so the squares of x minus the mean are
    # multiples of 2^-20; a float32 running sum of them drifts one way once its last place passes
    # that (ties to even), by 5e-7 of the variance over 128 steps a lane. Summed in chunks it stays
    # near Welford's 1e-7.
    x = (1e4 + rng.standard_normal((16, 4096))).astype(np.float32)
    _, _, rstd = fastln.layer_norm(x, return_stats=True)
    _, _, wrstd = ref.layer_norm(x, eps=1e-5, return_stats=True)
    np.testing.assert_allclose(rstd, wrstd, rtol=2e-7)


def test_subnormal_float64_rows(isa, rng):
    # Subnormal doubles: the exact path's scale 2^1030 alone overflows, so it scales in two steps.
    x = 1e-310 * rng.standard_normal((2, 64))
    y = fastln.layer_norm(x, eps=0.0)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref.layer_norm(x * 1e300, eps=0.0), rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_2d_normalized_over_both_axes(isa, rng, dtype):
    # A 2-D strided view normalized over both of its axes (axis=0) is one row of all its values,
    # not its rows one by one: allocating, in place, and into another strided array.
    base = _data(rng, (4, 8), dtype, c=1.0)
    want = ref.layer_norm(base[:, :3], None, None, 1e-5, axis=0)
    _check(fastln.layer_norm(base[:, :3], axis=0), want, dtype)
    _check(fastln.layer_norm(base[::-1], axis=-2),
           ref.layer_norm(base[::-1], None, None, 1e-5, axis=-2), dtype)
    out = np.zeros((4, 8), dtype)
    fastln.layer_norm(base[:, :3], axis=0, out=out[:, 2:5])
    _check(out[:, 2:5], want, dtype)
    v = base.copy()[:, :3]
    fastln.layer_norm(v, axis=0, out=v)
    _check(v, want, dtype)
    _check(fastln.rms_norm(base[:, :3], axis=0), ref.rms_norm(base[:, :3], None, 1e-6, axis=0),
           dtype)
    _check(fastln.LayerNorm((4, 3), dtype=dtype)(base[:, :3]), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_parameters_sharing_memory_with_out(isa, rng, dtype):
    # Weight or bias may be a view of out (or of x written in place): read as if copied, as a
    # ufunc reads its inputs, not after the rows before have overwritten them.
    x = _data(rng, (4, 8), dtype)
    for fast in (True, False):  # C-contiguous out takes the C-checked path; a strided one not
        out = _data(rng, (4, 16), dtype, c=1.0)
        o = out[:, :8].copy() if fast else out[:, ::2]
        w, b = o[0].copy(), o[1].copy()
        got = fastln.layer_norm(x, o[0], o[1], out=o)
        _check(got, ref.layer_norm(x, w, b, 1e-5), dtype)
        o = out[:, :8].copy() if fast else out[:, ::2]
        w = o[2].copy()
        _check(fastln.rms_norm(x, o[2], out=o), ref.rms_norm(x, w, 1e-6), dtype)
    xc = x.copy()
    w = xc[0].copy()
    _check(fastln.layer_norm(xc, xc[0], out=xc), ref.layer_norm(x, w, None, 1e-5), dtype)


def test_byte_swapped_and_list_inputs(isa, rng):
    x = _data(rng, (3, 17), np.float32)
    y = fastln.layer_norm(x.astype(">f4"))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, fastln.layer_norm(x))
    # The other byte order of every dtype and argument: float16 x was refused as unsupported, the
    # residual's as a dtype unlike x's, and bfloat16 was read as if native (y of 1e-26 and 3e18).
    swapped = lambda a: a.astype(a.dtype.newbyteorder())  # noqa: E731
    dtypes = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)]
    try:
        import ml_dtypes

        dtypes.append(np.dtype(ml_dtypes.bfloat16))
    except ImportError:
        pass
    for dt in dtypes:
        xd, r = x.astype(dt), _data(rng, x.shape, np.float32).astype(dt)
        pdt = np.float32 if dt.itemsize == 2 else dt
        w = _data(rng, 17, pdt)
        for f in (fastln.layer_norm, fastln.rms_norm):
            want_y, want_h = f(xd, w, residual=r)
            got_y, got_h = f(swapped(xd), swapped(w), residual=swapped(r))
            assert got_y.dtype == dt and got_h.dtype == dt
            np.testing.assert_array_equal(got_y, want_y)
            np.testing.assert_array_equal(got_h, want_h)
            np.testing.assert_array_equal(f(swapped(xd)), f(xd))
        y, mean, rstd = fastln.layer_norm(xd, return_stats=True)
        dy = r
        want = fastln.layer_norm_backward(dy, xd, mean, rstd, w)
        got = fastln.layer_norm_backward(swapped(dy), swapped(xd), swapped(mean), swapped(rstd),
                                         swapped(w))
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)
    y16 = fastln.layer_norm([list(r) for r in x.astype(np.float16)])
    assert y16.dtype == np.float16
    np.testing.assert_array_equal(y16, fastln.layer_norm(x.astype(np.float16)))
    with pytest.raises(TypeError, match="float16 and bfloat16"):
        fastln.layer_norm(np.ones(3, np.int32))


def test_constant_row_with_eps_zero(isa):
    # Variance 0 and eps 0: y is 0 / 0 (NaN, as in torch), and the mean is the row's value even
    # where sum / n rounds away from it (0.1 * 3 / 3 is 0.10000000000000002).
    for dtype in DTYPES:
        x = np.full((1, 3), 0.1, dtype)
        y, mean, rstd = fastln.layer_norm(x, eps=0.0, return_stats=True)
        assert np.isnan(y).all() and mean[0] == x[0, 0] and np.isinf(rstd[0])


# ---- short rows: a pipeline over rows, and the general path for the rows it does not take --------

# 9, 12, 50 and 101 end in a partial vector (AVX2: 9, 12, 50, 101 float32 and 9, 50 float64 take
# the short-row pipeline's tail form; scalar, every length is whole vectors). Rows of more than 8
# vectors sum in two chains of each sum (ShortSums), with or without a partial last vector and with
# an odd or even count of whole vectors: AVX2 float32 76, 101, 128 and float64 36, 48, 50, 64;
# AVX-512 float32 150, 200, 256 and float64 76, 101, 128; scalar 9, 12, 16.
SHORT_COLS = [4, 8, 9, 12, 16, 32, 36, 48, 50, 64, 76, 101, 128, 150, 200, 256, 264]


def _mixed_rows(rng, rows, cols, dtype):
    """Ordinary rows with, at fixed places, the rows the short-row pipeline hands to the general
    path: a large offset (|mean| > 2 std), NaN, +Inf, a constant row."""
    x = _data(rng, (rows, cols), dtype, c=0.5, s=2.0)
    special = {}
    if rows > 0:
        x[0] = _data(rng, cols, dtype, c=1e4, s=1.0)
        special[0] = "offset"
    if rows > 5:
        x[5, cols // 3] = np.nan
        special[5] = "nan"
    if rows > 6:
        x[6] = 7.25
        special[6] = "constant"
    if rows > 10:
        x[10, -1] = np.inf
        special[10] = "inf"
    if rows > 2:
        x[-1] = _data(rng, cols, dtype, c=-3e3, s=0.5)
        special[rows - 1] = "offset"
    return x, special


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", SHORT_COLS)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 23])
def test_short_rows_mixed_with_general_rows(isa, rng, dtype, cols, rows):
    x, special = _mixed_rows(rng, rows, cols, dtype)
    _check_mixed_rows(rng, x, special, dtype)


# Row lengths (bytes) at the edges of LagOf's range, where the general loop normalizes a row one
# row after its statistics instead of two: just under 4 KiB, 4 KiB, inside, just under 16 KiB, 16
# KiB; float32 and float64, the formats whose lag changes there.
LAG_BYTES = [4096 - 64, 4096, 6144, 16384 - 64, 16384]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row_bytes", LAG_BYTES)
@pytest.mark.parametrize("rows", [1, 2, 3, 6, 11])
def test_general_loop_lag_edges(isa, rng, dtype, row_bytes, rows):
    # With the bands off every one of these rows takes the general loop, whose order of rows then
    # depends on the row length; no row's values may depend on it, nor on the rows around it.
    cols = row_bytes // np.dtype(dtype).itemsize
    x, special = _mixed_rows(rng, rows, cols, dtype)
    fastln.set_band_bytes(np.iinfo(np.int64).max)
    try:
        _check_mixed_rows(rng, x, special, dtype)
    finally:
        fastln.set_band_bytes(None)


def _check_mixed_rows(rng, x, special, dtype):
    """x from _mixed_rows against the reference, and each row against a call with that row
    alone, in place and with out=."""
    rows, cols = x.shape
    w, b = _data(rng, cols, dtype), _data(rng, cols, dtype)
    y, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    with np.errstate(invalid="ignore"):  # the reference's Inf - Inf
        ry, rmean, rrstd = ref.layer_norm(x, w, b, return_stats=True)
    bad = [r for r, kind in special.items() if kind in ("nan", "inf")]
    good = [r for r in range(rows) if r not in bad]
    for r in bad:
        assert np.isnan(y[r]).all() and np.isnan(mean[r]) and np.isnan(rstd[r]), r
    # Rows at an offset of 1e4 are checked as the accuracy bar above checks them (the float64
    # reference itself rounds x - mean there).
    near = [r for r in good if special.get(r) != "offset"]
    _check(y[near], ry[near], dtype)
    far = [r for r in good if special.get(r) == "offset"]
    np.testing.assert_allclose(y[far], ry[far], rtol=0, atol=1e-5 if dtype == np.float32 else 1e-10)
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(mean[good], rmean[good], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(rstd[good], rrstd[good], rtol=rtol)
    # The same rows one call each: a row's result does not depend on its neighbours.
    for r in range(rows):
        np.testing.assert_array_equal(fastln.layer_norm(x[r : r + 1], w, b), y[r : r + 1])
    # In place, and with out=.
    xc = x.copy()
    assert fastln.layer_norm(xc, w, b, out=xc) is xc
    np.testing.assert_array_equal(xc, y)
    out = np.empty_like(x)
    fastln.layer_norm(x, w, b, out=out)
    np.testing.assert_array_equal(out, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [8, 9, 50, 64, 128])  # 9 and 50: the tail form (AVX2)
@pytest.mark.parametrize("target", ["x", "residual", None])
def test_short_rows_residual_mixed_rows(isa, rng, dtype, cols, target):
    x, special = _mixed_rows(rng, 23, cols, dtype)
    r = _data(rng, x.shape, dtype)
    want_h = x + r
    want_y = fastln.layer_norm(want_h)
    with np.errstate(invalid="ignore"):
        ref_y = ref.layer_norm(want_h)
    near = [k for k in range(23) if k not in special]
    _check(want_y[near], ref_y[near], dtype)
    xc, rc = x.copy(), r.copy()
    hout = {"x": xc, "residual": rc, None: None}[target]
    y, h = fastln.layer_norm(xc, residual=rc, residual_out=hout)
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(y, want_y)
    # y written over an input while h goes to the other one, or to a new array.
    xc, rc = x.copy(), r.copy()
    out, hout = {"x": (xc, rc), "residual": (rc, xc), None: (rc, None)}[target]
    y, h = fastln.layer_norm(xc, residual=rc, out=out, residual_out=hout)
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_rows_do_not_depend_on_threads_or_where_out_lies(isa, streaming, rng, dtype):
    # Outputs large enough to stream y (2 MiB or more, with `streaming`), with y aligned to a cache
    # line or not: short rows (up to 1024 bytes with AVX-512; 101 float32 and 51 float64 values end
    # in a partial vector) must come out the same bit for bit, streamed or not, at any thread count,
    # in any number of rows, rows near and far from zero alike.
    item = np.dtype(dtype).itemsize
    for cols in (256 // item, 400 // item + 1, 512 // item, 1024 // item):
        rows = (5 << 20) // (cols * item)
        x = _data(rng, (rows, cols), dtype, c=0.5, s=2.0)
        x[::7] += 1e3
        w, b = _data(rng, cols, dtype), _data(rng, cols, dtype)
        fastln.set_num_threads(1)
        try:
            want = fastln.layer_norm(x, w, b)
            buf = np.empty(rows * cols + 64, dtype)
            start = (-buf.ctypes.data % 64) // item
            for threads in (1, 2):
                fastln.set_num_threads(threads)
                for shift in (0, 1):
                    out = buf[start + shift : start + shift + rows * cols].reshape(rows, cols)
                    assert (out.ctypes.data % 64 == 0) == (shift == 0)
                    fastln.layer_norm(x, w, b, out=out)
                    np.testing.assert_array_equal(out, want)
                np.testing.assert_array_equal(fastln.layer_norm(x, w, b), want)
        finally:
            fastln.set_num_threads(0)
        for r in (0, 1, 5, rows - 1):
            np.testing.assert_array_equal(fastln.layer_norm(x[r : r + 1], w, b), want[r : r + 1])
        np.testing.assert_allclose(want[1:7], ref.layer_norm(x[1:7], w, b), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_rows_streamed_output(isa, streaming, rng, dtype):
    # An output of 2 MiB or more (with `streaming`) whose rows are whole cache lines is written with
    # streaming stores.
    cols = 64
    rows = (4 << 20) // (cols * np.dtype(dtype).itemsize) + 3
    x, special = _mixed_rows(rng, rows, cols, dtype)
    buf = np.empty(rows * cols + 64, dtype)
    start = (-buf.ctypes.data % 64) // buf.itemsize
    out = buf[start : start + rows * cols].reshape(rows, cols)
    assert out.ctypes.data % 64 == 0
    fastln.layer_norm(x, out=out)
    with np.errstate(invalid="ignore"):
        want = ref.layer_norm(x)
    good = [r for r in range(rows) if special.get(r) not in ("nan", "inf")]
    _check(out[good], want[good], dtype)
