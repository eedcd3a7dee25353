"""fastln.rms_norm against the float64 reference, torch and ONNX Runtime, on every usable ISA."""

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

try:
    from numpy.exceptions import AxisError
except ImportError:  # numpy < 1.25
    from numpy import AxisError

TAILS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 768, 1000, 4097]
TOL = {np.float32: 2e-6, np.float64: 1e-14}


def _max_err(y, y_ref):
    return float(np.max(np.abs(y.astype(np.float64) - y_ref)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", TAILS)
def test_matches_reference_on_every_tail(isa, rng, dtype, n):
    x = rng.standard_normal((3, n)).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    for weight in (None, w):
        y, rstd = fastln.rms_norm(x, weight, eps=1e-6, return_stats=True)
        y_ref, rstd_ref = ref.rms_norm(x, weight, eps=1e-6, return_stats=True)
        assert y.dtype == dtype and rstd.dtype == dtype and rstd.shape == (3,)
        scale = 1.0 if weight is None else float(np.abs(w).max())
        assert _max_err(y, y_ref) <= TOL[dtype] * 4 * scale
        np.testing.assert_allclose(rstd, rstd_ref, rtol=TOL[dtype])


@pytest.mark.parametrize("n", [768, 65536])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_float32_accuracy_bar(isa, rng, n, offset):
    # max |y - y_ref| <= 1e-5 against float64, also where every square is ~1e8 (sums of 65536 of
    # them in float32 would lose ~1e-4 relative without the flush to double).
    x = (offset + rng.standard_normal((2, n))).astype(np.float32)
    err = _max_err(fastln.rms_norm(x), ref.rms_norm(x))
    assert err <= 1e-5, err


def test_axes_strides_out_and_in_place(isa, rng):
    x = rng.standard_normal((4, 5, 6))
    w = rng.standard_normal((5, 6))
    y_ref = ref.rms_norm(x, w, axis=1)
    np.testing.assert_allclose(fastln.rms_norm(x, w, axis=1), y_ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(fastln.rms_norm(x, w, axis=-2), y_ref, rtol=1e-13, atol=1e-13)
    # Non-contiguous inputs: a transposed array and a row-strided view.
    xt = np.asfortranarray(x)
    np.testing.assert_allclose(fastln.rms_norm(xt, w, axis=1), y_ref, rtol=1e-13, atol=1e-13)
    big = rng.standard_normal((7, 40)).astype(np.float32)
    view = big[::2, 3:20]
    np.testing.assert_allclose(fastln.rms_norm(view), ref.rms_norm(view), atol=2e-6)
    # out= into a strided view, and in place.
    out = np.zeros((4, 60))[:, ::2]
    fastln.rms_norm(x.reshape(4, 30), out=out)
    np.testing.assert_allclose(out, ref.rms_norm(x.reshape(4, 30)), rtol=1e-13, atol=1e-13)
    z = x.copy()
    assert fastln.rms_norm(z, out=z) is z
    np.testing.assert_allclose(z, ref.rms_norm(x), rtol=1e-13, atol=1e-13)
    # out overlapping x other than element for element goes through a temporary.
    buf = x.reshape(-1).copy()
    a, b = buf[:60].reshape(2, 30), buf[1:61].reshape(2, 30)
    expect = ref.rms_norm(a)
    fastln.rms_norm(a, out=b)
    np.testing.assert_allclose(b, expect, rtol=1e-13, atol=1e-13)


def test_zero_rows_and_one_dimensional(isa):
    y, rstd = fastln.rms_norm(np.zeros((0, 8), np.float32), return_stats=True)
    assert y.shape == (0, 8) and rstd.shape == (0,)
    y, rstd = fastln.rms_norm(np.array([3.0, 4.0]), eps=0.0, return_stats=True)
    assert rstd.shape == () and float(rstd) == pytest.approx(1 / np.sqrt(12.5), rel=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nonfinite_rows_become_nan_and_others_do_not(isa, rng, dtype):
    x = rng.standard_normal((4, 37)).astype(dtype)
    x[1, 5] = np.nan
    x[2, 36] = np.inf
    y, rstd = fastln.rms_norm(x, return_stats=True)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isnan(rstd[1:3]).all()
    np.testing.assert_allclose(y[[0, 3]], ref.rms_norm(x[[0, 3]]), atol=TOL[dtype] * 4)


@pytest.mark.parametrize("dtype,scales", [(np.float32, [1e-30, 1e-20, 1e20, 1e30]),
                                           (np.float64, [1e-300, 1e-160, 1e160, 1e300])])
def test_squares_that_overflow_or_underflow(isa, rng, dtype, scales):
    # With eps = 0 the result is scale invariant; at these scales the squares overflow or underflow
    # in the input dtype, so the rows take the exact path.
    for n in (5, 100):
        x = rng.standard_normal((2, n))
        expect = ref.rms_norm(x, eps=0.0)
        for s in scales:
            y = fastln.rms_norm((x * s).astype(dtype), eps=0.0)
            assert np.isfinite(y).all()
            np.testing.assert_allclose(y, expect, rtol=TOL[dtype] * 8, atol=TOL[dtype] * 8)


def test_subnormal_float64_rows(isa, rng):
    # 2^-e alone would overflow for these: the exact path scales in two steps.
    xs = rng.standard_normal((2, 10)) * 1e-310
    y = fastln.rms_norm(xs, eps=0.0)
    np.testing.assert_allclose(y, ref.rms_norm(xs * 2.0**1000, eps=0.0), rtol=1e-14, atol=1e-14)


def test_tiny_values_next_to_eps(isa):
    # mean(x^2) = 1e-40 is nothing next to eps = 1e-6: rstd = 1e3 exactly enough.
    x = np.full((1, 16), 1e-20, np.float32)
    y, rstd = fastln.rms_norm(x, eps=1e-6, return_stats=True)
    assert float(rstd[0]) == pytest.approx(1e3, rel=1e-6)
    np.testing.assert_allclose(y, 1e-17, rtol=1e-6)
    y0 = fastln.rms_norm(np.zeros((1, 9)), eps=0.0)
    assert np.isnan(y0).all()  # 0 / sqrt(0), as torch


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 768, 1000])
def test_matches_torch(isa, rng, dtype, n):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((5, n)).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    yt = torch.nn.functional.rms_norm(torch.from_numpy(x), (n,), torch.from_numpy(w), eps=1e-6)
    y = fastln.rms_norm(x, w, eps=1e-6)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, yt.numpy(), rtol=rtol, atol=rtol * np.abs(w).max())


def test_matches_onnx_rms_normalization(rng):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # an onnxruntime without opset 23
        pytest.skip(f"onnxruntime cannot run RMSNormalization: {e}")
    (y_ort,) = sess.run(None, {"x": x, "w": w})
    np.testing.assert_allclose(fastln.rms_norm(x, w, eps=1e-6), y_ort, rtol=1e-5, atol=1e-5)


def test_module(rng):
    norm = fastln.RMSNorm((2, 3), eps=1e-5, dtype=np.float64)
    norm.weight[...] = rng.standard_normal((2, 3))
    x = rng.standard_normal((4, 2, 3))
    expect = ref.rms_norm(x, norm.weight, eps=1e-5, axis=1)
    np.testing.assert_allclose(norm(x), expect, rtol=1e-13, atol=1e-13)
    assert norm._saved is None  # calling the module keeps nothing
    np.testing.assert_allclose(norm.forward(x), expect, rtol=1e-13, atol=1e-13)
    norm(2.0 * x)  # drops the forward's state: backward must not use the earlier x
    with pytest.raises(RuntimeError, match="module.forward"):
        norm.backward(np.ones_like(x))
    with pytest.raises(ValueError, match="normalized_shape"):
        norm(np.ones((4, 3, 2)))
    assert "RMSNorm" in repr(norm)
    assert fastln.RMSNorm(4, elementwise_affine=False).weight is None


def test_bad_input():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(TypeError):
        fastln.rms_norm(np.ones((2, 4), np.int32))
    with pytest.raises(AxisError):
        fastln.rms_norm(x, axis=2)
    with pytest.raises(ValueError, match="eps"):
        fastln.rms_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="eps"):
        fastln.rms_norm(x, eps=np.nan)
    with pytest.raises(ValueError, match="weight"):
        fastln.rms_norm(x, np.ones(3))
    with pytest.raises(TypeError, match="out"):
        fastln.rms_norm(x, out=np.empty((2, 4), np.float64))
    with pytest.raises(ValueError, match="out"):
        fastln.rms_norm(x, out=np.empty((2, 5), np.float32))
    with pytest.raises(ValueError):
        fastln.rms_norm(np.float32(1.0))
    with pytest.raises(ValueError, match="zero-size"):
        fastln.rms_norm(np.ones((2, 0), np.float32))
    with pytest.raises(TypeError):
        fastln.RMSNorm(4, dtype=np.int64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 768), (5, 33), (64, 1000), (3, 4097)])
def test_fast_path_matches_general_path_bitwise(isa, rng, dtype, shape):
    """fastln.rms_norm's common call is checked in C and runs the fused kernels' no-residual entry;
    it must give the general path's bits (and its outputs, in place too)."""
    from fastln import _training

    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    w = rng.standard_normal(shape[-1]).astype(dtype)
    for weight in (None, w):
        want = _training.rms_norm(x, weight, 1e-6)
        np.testing.assert_array_equal(fastln.rms_norm(x, weight, 1e-6), want)
        y = np.empty_like(x)
        assert fastln.rms_norm(x, weight, 1e-6, out=y) is y
        np.testing.assert_array_equal(y, want)
        xi = x.copy()
        fastln.rms_norm(xi, weight, 1e-6, out=xi)
        np.testing.assert_array_equal(xi, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [64, 256, 300, 768, 1031, 2304])
def test_rows_do_not_depend_on_where_arrays_lie(isa, rng, placed, dtype, cols):
    """Rows of 1 KiB or more that do not start on a vector's boundary are read differently (AVX-512:
    loads put together by permutes; AVX2, rows 16 bytes past 32: sums of squares from aligned
    loads in rotated accumulators, over several flushes at 2304 values; both: the scaling pass
    from x's first vector boundary, or with AVX-512 on Intel CPUs from y's): the same bits wherever
    x, weight and y lie, and in place."""
    line = 64 // np.dtype(dtype).itemsize
    x = (rng.standard_normal((10, cols)) * 3 + 1).astype(dtype)
    x[2] += 1e4
    x[5, 7] = np.nan
    w = rng.standard_normal(cols).astype(dtype)
    for weight in (None, w):
        want, want_rstd = fastln.rms_norm(placed(x, 0), weight, 1e-6, return_stats=True)
        good = [r for r in range(10) if r != 5]
        y_ref = ref.rms_norm(x[good], weight, eps=1e-6)
        assert _max_err(want[good], y_ref) <= 4 * TOL[dtype] * max(1.0, np.abs(y_ref).max())
        assert np.isnan(want[5]).all()
        for shift in range(1, 2 * line):
            xs = placed(x, shift % line)
            ws = None if weight is None else placed(weight, (shift * 3) % line)
            if shift < line:
                y = placed(np.zeros_like(x), (shift * 5) % line)
                _, rstd = fastln.rms_norm(xs, ws, 1e-6, out=y, return_stats=True)
                np.testing.assert_array_equal(rstd, want_rstd, err_msg=f"shift {shift}")
            else:
                y = fastln.rms_norm(xs, ws, 1e-6, out=xs)
            np.testing.assert_array_equal(y, want, err_msg=f"shift {shift}")


# Row lengths around the short-row pipeline (AVX2 float32: 8 to 128 values; AVX-512 and float64
# scale with the vector), 9, 50 and 101 ending in a partial vector.
SHORT_COLS = [4, 8, 9, 16, 50, 64, 101, 128, 256, 264]


def _rms_mixed_rows(rng, rows, cols, dtype):
    """Ordinary rows with, at fixed places, the rows the short pipeline hands to the general path
    (NaN, +Inf, squares that overflow) and rows it must keep right (zeros, a large offset, a
    constant row, values whose squares underflow, a negative mean)."""
    x = (0.5 + 2.0 * rng.standard_normal((rows, cols))).astype(dtype)
    big = 1e20 if dtype == np.float32 else 1e160
    tiny = 1e-25 if dtype == np.float32 else 1e-170
    special = {0: ("zero", 0.0), 1: ("offset", 1e4), 3: ("nan", None), 4: ("constant", 7.25),
               6: ("inf", None), 8: ("big", big), 9: ("tiny", tiny), 11: ("negative", -3.0)}
    kinds = {}
    for r, (kind, v) in special.items():
        if r >= rows:
            continue
        kinds[r] = kind
        if kind == "nan":
            x[r, cols // 3] = np.nan
        elif kind == "inf":
            x[r, -1] = np.inf
        elif kind in ("zero", "constant"):
            x[r] = v
        elif kind in ("big", "tiny"):
            x[r] = (v * rng.standard_normal(cols)).astype(dtype)
        else:
            x[r] += dtype(v)
    return x, kinds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", SHORT_COLS)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 12, 23])
def test_short_rows_mixed_rows(isa, rng, dtype, cols, rows):
    """Short rows go through the layer norm's staged pipeline two at a time; each row's result
    must be its own (alone, after another row, at an odd count, in place), right next to the
    float64 reference, with the aside rows (NaN, Inf, overflowing squares) exact or NaN."""
    x, kinds = _rms_mixed_rows(rng, rows, cols, dtype)
    w = rng.standard_normal(cols).astype(dtype)
    for weight in (None, w):
        y, rstd = fastln.rms_norm(x, weight, 1e-6, return_stats=True)
        with np.errstate(invalid="ignore", over="ignore"):
            y_ref, rstd_ref = ref.rms_norm(x, weight, eps=1e-6, return_stats=True)
        if 8 in kinds:  # the reference's float64 squares overflow too: scale it, eps is nothing
            big = float(np.abs(x[8]).max())
            y_ref[8], rstd_ref[8] = ref.rms_norm(x[8] / big, weight, eps=0.0, return_stats=True)
            rstd_ref[8] /= big
        bad = [r for r, k in kinds.items() if k in ("nan", "inf")]
        good = [r for r in range(rows) if r not in bad]
        for r in bad:
            assert np.isnan(y[r]).all() and np.isnan(rstd[r]), r
        scale = 1.0 if weight is None else float(np.abs(w).max())
        assert _max_err(y[good], y_ref[good]) <= 4 * TOL[dtype] * scale
        np.testing.assert_allclose(rstd[good], rstd_ref[good], rtol=TOL[dtype])
        for r in range(rows):
            np.testing.assert_array_equal(fastln.rms_norm(x[r : r + 1], weight, 1e-6), y[r : r + 1])
        if rows > 1:  # every pair of rows shifted by one
            np.testing.assert_array_equal(fastln.rms_norm(x[1:], weight, 1e-6), y[1:])
        xc = x.copy()
        assert fastln.rms_norm(xc, weight, 1e-6, out=xc) is xc
        np.testing.assert_array_equal(xc, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("cols", [9, 64, 101, 128])
def test_short_rows_residual_and_threads(isa, rng, dtype, cols):
    """The fused residual add is bit for bit the norm of x + residual, and no row depends on how
    the rows were split between threads."""
    rows = 301
    x = (0.5 + 2.0 * rng.standard_normal((rows, cols))).astype(dtype)
    x[7, 3] = np.nan
    x[100] += dtype(300)
    r = rng.standard_normal((rows, cols)).astype(dtype)
    w = rng.standard_normal(cols).astype(dtype)
    fastln.set_num_threads(1)
    try:
        h = x + r
        want = fastln.rms_norm(h, w)
        y, hh = fastln.rms_norm(x, w, residual=r)
        np.testing.assert_array_equal(hh, h)
        np.testing.assert_array_equal(y, want)
        fastln.set_num_threads(2)
        np.testing.assert_array_equal(fastln.rms_norm(h, w), want)
        y2, _ = fastln.rms_norm(x, w, residual=r)
        np.testing.assert_array_equal(y2, want)
    finally:
        fastln.set_num_threads(0)
    good = [k for k in range(rows) if k != 7]
    assert np.isnan(want[7]).all()
    y_ref = ref.rms_norm(h[good].astype(np.float64), w.astype(np.float64))
    tol = {np.float16: 4e-3, np.float32: 1e-5, np.float64: 1e-13}[dtype]
    assert _max_err(want[good], y_ref) <= tol * float(np.abs(w).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [64, 101, 120, 200])
def test_short_rows_same_bits_in_large_calls(isa, rng, dtype, cols):
    """Calls of 16 MiB or more take short rows one at a time instead of through the staged
    pipeline, with the same arithmetic: a row's bits do not depend on the size of the call, with
    or without the residual add, on one thread or two. The lengths take both of ShortSums' forms
    on each ISA (one chain up to 8 vectors, two beyond: 101 and 120 float32 with AVX2, 200 with
    AVX-512; 64 float64 with AVX2, 101 and 120 with AVX-512), with and without a partial last
    vector, with an odd count of whole vectors (120 float32 with AVX2)."""
    item = np.dtype(dtype).itemsize
    rows = (16 << 20) // (cols * item) + 3
    x = (0.5 + 2.0 * rng.standard_normal((rows, cols))).astype(dtype)
    x[5, 3] = np.nan
    x[9] *= dtype(1e4)
    w = rng.standard_normal(cols).astype(dtype)
    picks = [0, 1, 5, 9, 10, rows // 2, rows - 2, rows - 1]
    small = {r: fastln.rms_norm(x[r : r + 3], w, return_stats=True) for r in picks}
    for threads in (1, 2):
        fastln.set_num_threads(threads)
        try:
            y, rstd = fastln.rms_norm(x, w, return_stats=True)
            r_in = (0.25 * rng.standard_normal((rows, cols))).astype(dtype)
            y_res, h = fastln.rms_norm(x, w, residual=r_in)
        finally:
            fastln.set_num_threads(0)
        for r in picks:
            k = min(3, rows - r)
            np.testing.assert_array_equal(y[r : r + k], small[r][0][:k], err_msg=f"row {r}")
            np.testing.assert_array_equal(rstd[r : r + k], small[r][1][:k], err_msg=f"row {r}")
            hs = h[r : r + k]
            np.testing.assert_array_equal(y_res[r : r + k], fastln.rms_norm(hs, w), err_msg=f"row {r}")
    assert np.isnan(y[5]).all()
    good = [r for r in picks if r != 5]
    y_ref = ref.rms_norm(x[good], w)
    assert _max_err(y[good], y_ref) <= 4 * TOL[dtype] * float(np.abs(w).max())
