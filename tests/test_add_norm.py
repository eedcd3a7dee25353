"""layer_norm with residual= (fused residual add) and with float16 / bfloat16 storage, every ISA."""

import os
import subprocess
import sys

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

TAILS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 768, 1000, 4097]
F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)


def _bf16():
    return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)


# float16 always; bfloat16 where ml_dtypes is installed (the test skips otherwise).
HALF = [pytest.param("float16", id="float16"), pytest.param("bfloat16", id="bfloat16")]


def _half(name):
    return F16 if name == "float16" else _bf16()


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def _ulp(v, dt):
    """The spacing of dtype dt at |v| (float64 in, float64 out), subnormals included."""
    a = np.abs(np.asarray(v, np.float64)).astype(dt).astype(F32)
    if dt == F16:
        return np.spacing(a.astype(F16)).astype(np.float64)
    # bfloat16 keeps float32's exponent with 8 significant bits: 2^16 float32 spacings.
    return np.spacing(a).astype(np.float64) * 2.0**16


def _data(rng, shape, dtype, c=0.0, s=1.0):
    return (c + s * rng.standard_normal(shape)).astype(dtype)


# Both norms take residual= and 16-bit storage; RMS norm has no bias and returns rstd alone.
OPS = ["layer_norm", "rms_norm"]


def _norm(op, x, w=None, b=None, **kw):
    if op == "layer_norm":
        return fastln.layer_norm(x, w, b, **kw)
    return fastln.rms_norm(x, w, **kw)


def _ref(op, x, w=None, b=None, **kw):
    if op == "layer_norm":
        return ref.layer_norm(x, w, b, **kw)
    return ref.rms_norm(x, w, **kw)


# ---- fused residual ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", TAILS + [8193])
def test_residual_equals_unfused(isa, rng, op, dtype, cols):
    rows = 37 if cols <= 1000 else 3  # several blocks of rows, the last one partial
    x = _data(rng, (rows, cols), dtype, c=2.0)
    r = _data(rng, (rows, cols), dtype, s=3.0)
    w, b = _data(rng, cols, dtype), _data(rng, cols, dtype)
    y, h = _norm(op, x, w, b, residual=r)
    assert h.dtype == y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(h, x + r)
    # The fused path runs the same row routine on the same h: bit for bit the unfused result.
    np.testing.assert_array_equal(y, _norm(op, x + r, w, b))
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, _ref(op, x + r, w, b), rtol=0, atol=tol)
    if op == "layer_norm":
        np.testing.assert_array_equal(ref.add_layer_norm(x, r, w, b)[1], h)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("h_to", ["new", "x", "residual"])
def test_residual_rows_read_back_from_h(isa, rng, op, dtype, h_to):
    # Rows at a large offset (the shifted statistics pass), rows whose squares overflow (the exact
    # path) and a NaN row all read h again after the pass that wrote it, also when h is x or r.
    dt = _half(dtype) if dtype in ("float16", "bfloat16") else np.dtype(dtype)
    cols = 67
    big = {"float32": 1e30, "float64": 1e300, "float16": 3e4, "bfloat16": 1e30}[dtype]
    x = _data(rng, (7, cols), dt, s=0.5)
    x[1:3] = _data(rng, (2, cols), dt, c=1000.0, s=1.0)  # offset: |mean| >> std
    x[3] = _data(rng, cols, dt, c=big / 4, s=big / 8)  # exact path: squares overflow
    x[4, 5] = np.nan
    r = _data(rng, (7, cols), dt, s=0.25)
    w = _data(rng, cols, F32 if dt.itemsize == 2 else dt, c=1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        want_h = x + r
        want_y = _norm(op, want_h, w)
    xc, rc = x.copy(), r.copy()
    hout = {"new": None, "x": xc, "residual": rc}[h_to]
    y, h = _norm(op, xc, w, residual=rc, residual_out=hout)
    nan = np.isnan(want_y.astype(np.float64))
    assert nan[4].all() and not nan[[0, 1, 2, 3, 5, 6]].any()
    np.testing.assert_array_equal(_bits(h) if dt.itemsize == 2 else h,
                                  _bits(want_h) if dt.itemsize == 2 else want_h)
    np.testing.assert_array_equal(y.astype(np.float64)[~nan], want_y.astype(np.float64)[~nan])
    assert np.isnan(y.astype(np.float64)[nan]).all()


@pytest.mark.parametrize("op", OPS)
def test_residual_large_output_streams(isa, streaming, rng, op):
    # 4 MiB of y: large enough for non-temporal stores of y (2 MiB, with `streaming`).
    x = _data(rng, (128, 8192), np.float32)
    r = _data(rng, (128, 8192), np.float32)
    w, b = _data(rng, 8192, np.float32), _data(rng, 8192, np.float32)
    y, h = _norm(op, x, w, b, residual=r)
    np.testing.assert_array_equal(h, x + r)
    np.testing.assert_array_equal(y, _norm(op, x + r, w, b))


def test_rms_residual_stats_and_aliasing(isa, rng):
    x = _data(rng, (6, 5, 33), np.float32)
    r = _data(rng, (6, 5, 33), np.float32)
    w = _data(rng, (5, 33), np.float32)
    y, h, rstd = fastln.rms_norm(x, w, residual=r, axis=1, return_stats=True)
    ey, erstd = ref.rms_norm(x + r, w, axis=1, return_stats=True)
    np.testing.assert_array_equal(h, x + r)
    np.testing.assert_allclose(y, ey, atol=2e-5)
    assert rstd.shape == (6,) and rstd.dtype == np.float32
    np.testing.assert_allclose(rstd, erstd, rtol=2e-6)
    # Pre-norm block: the stream is updated in place, y goes to a new array.
    stream = r.copy()
    y2, h2 = fastln.rms_norm(x, w, residual=stream, residual_out=stream, axis=1)
    assert h2 is stream
    np.testing.assert_array_equal(stream, x + r)
    np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_residual_stats_axes_and_layouts(isa, rng, dtype):
    x = _data(rng, (3, 4, 5, 6), dtype)
    r = _data(rng, (3, 4, 5, 6), dtype)
    y, h, mean, rstd = fastln.layer_norm(x, residual=r, axis=-2, return_stats=True)
    ey, emean, erstd = ref.layer_norm(x + r, axis=-2, return_stats=True)
    np.testing.assert_array_equal(h, x + r)
    assert mean.shape == (3, 4) and mean.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, ey, atol=2e-5)
    np.testing.assert_allclose(mean, emean, atol=2e-6)
    np.testing.assert_allclose(rstd, erstd, rtol=2e-6)
    # Strided, reversed and transposed inputs and outputs.
    base = _data(rng, (20, 40), dtype)
    for xv, rv in ((base[::2], base[1::2]), (base[:, 3:30], base[:, 5:32]), (base.T, base[::-1].T)):
        out = np.empty((xv.shape[1], xv.shape[0]), dtype).T
        hout = np.empty((2 * xv.shape[0], xv.shape[1]), dtype)[::2]
        y, h = fastln.layer_norm(xv, residual=rv, out=out, residual_out=hout)
        assert y is out and h is hout
        np.testing.assert_array_equal(h, xv + rv)
        # The fused add reads rows; the transposed sum alone would take the column kernel,
        # equal to rounding only: compare with the rows of the sum.
        np.testing.assert_array_equal(y, fastln.layer_norm(np.ascontiguousarray(xv + rv)))


@pytest.mark.parametrize("target", ["x", "residual"])
@pytest.mark.parametrize("dtype", [np.float32, "float16", "bfloat16"])
def test_residual_out_aliases_an_input(isa, rng, target, dtype):
    dt = _half(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    x = _data(rng, (6, 33), dt)
    r = _data(rng, (6, 33), dt)
    want_h = x + r
    want_y = fastln.layer_norm(want_h)
    xc, rc = x.copy(), r.copy()
    alias = xc if target == "x" else rc
    y, h = fastln.layer_norm(xc, residual=rc, residual_out=alias)
    assert h is alias
    np.testing.assert_array_equal(
        _bits(h) if dt.itemsize == 2 else h, _bits(want_h) if dt.itemsize == 2 else want_h
    )
    np.testing.assert_array_equal(y.astype(np.float64), want_y.astype(np.float64))
    # y written over an input (out=) while h goes to a new array, or to the other input.
    xc, rc = x.copy(), r.copy()
    y, h = fastln.layer_norm(xc, residual=rc, out=xc if target == "x" else rc)
    np.testing.assert_array_equal(y.astype(np.float64), want_y.astype(np.float64))
    np.testing.assert_array_equal(h.astype(np.float64), want_h.astype(np.float64))
    xc, rc = x.copy(), r.copy()
    out, hout = (xc, rc) if target == "x" else (rc, xc)
    y, h = fastln.layer_norm(xc, residual=rc, out=out, residual_out=hout)
    np.testing.assert_array_equal(y.astype(np.float64), want_y.astype(np.float64))
    np.testing.assert_array_equal(h.astype(np.float64), want_h.astype(np.float64))


def test_residual_partial_overlap_goes_through_a_temporary(isa, rng):
    buf = _data(rng, (9, 16), np.float32)
    x, r = buf[:8].copy(), buf[1:].copy()
    want_y, want_h = fastln.layer_norm(x, residual=r)
    y, h = fastln.layer_norm(buf[:8], residual=buf[1:], residual_out=buf[1:])
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(y, want_y)


def test_residual_zero_rows_nan_inf(isa, rng):
    y, h = fastln.layer_norm(np.zeros((0, 5), np.float32), residual=np.zeros((0, 5), np.float32))
    assert y.shape == h.shape == (0, 5)
    x = _data(rng, (3, 17), np.float32)
    r = np.zeros_like(x)
    r[1, 4] = np.nan
    r[2, 0] = np.inf
    y, h = fastln.layer_norm(x, residual=r)
    assert np.isnan(y[1:]).all() and np.isfinite(y[0]).all()
    np.testing.assert_array_equal(h, x + r)


@pytest.mark.parametrize("rms", [False, True])
def test_out_and_residual_out_interleaved_without_sharing(rms):
    # Views whose bounds overlap but which share no element (every other column of one buffer) are
    # two outputs, not one memory.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    r = rng.standard_normal((4, 8)).astype(np.float32)
    buf = np.full((4, 16), np.nan, np.float32)
    out, res_out = buf[:, ::2], buf[:, 1::2]
    f = fastln.rms_norm if rms else fastln.layer_norm
    y, h = f(x, residual=r, out=out, residual_out=res_out)
    assert y is out and h is res_out
    np.testing.assert_array_equal(h, x + r)
    np.testing.assert_array_equal(y, f(x + r))
    with pytest.raises(ValueError, match="share memory"):  # one element in common
        f(x, residual=r, out=buf[:, :8], residual_out=buf[:, 7:15])


def test_residual_errors():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(TypeError, match="residual has dtype"):
        fastln.layer_norm(x, residual=x.astype(np.float64))
    with pytest.raises(ValueError, match="residual has shape"):
        fastln.layer_norm(x, residual=x[:, :4])
    with pytest.raises(ValueError, match="needs residual"):
        fastln.layer_norm(x, residual_out=x)
    with pytest.raises(ValueError, match="share memory"):
        fastln.layer_norm(x, residual=x.copy(), out=x, residual_out=x)
    with pytest.raises(TypeError):
        fastln.layer_norm(x, residual=x, residual_out=x.astype(np.float64))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros_like(x)
        ro.flags.writeable = False
        fastln.layer_norm(x, residual=x, residual_out=ro)


def test_core_rejects_unsafe_residual_calls():
    from fastln import _core

    x = np.zeros((4, 8), np.float32)
    y = np.zeros_like(x)
    with pytest.raises(ValueError):  # residual of another shape
        _core.add_norm_2d(x, x[:3], y.copy(), y, None, None, None, None, 1e-5, _core.NATIVE, False)
    with pytest.raises(TypeError):  # residual without h
        _core.add_norm_2d(x, x, None, y, None, None, None, None, 1e-5, _core.NATIVE, False)
    with pytest.raises(ValueError):  # h of another dtype
        _core.add_norm_2d(
            x, x, y.astype(np.float64), y, None, None, None, None, 1e-5, _core.NATIVE, False
        )
    with pytest.raises(TypeError):  # 4-byte elements called 16-bit
        _core.add_norm_2d(x, None, None, y, None, None, None, None, 1e-5, _core.FLOAT16, False)
    x16 = x.astype(np.float16)
    with pytest.raises(ValueError):  # RMS norm has no bias
        _core.add_norm_2d(
            x, None, None, y, None, np.ones(8, np.float32), None, None, 1e-5, _core.NATIVE, True
        )
    with pytest.raises(ValueError):  # 16-bit storage takes float32 parameters only
        _core.add_norm_2d(
            x16,
            None,
            None,
            x16.copy(),
            np.ones(8, np.float16),
            None,
            None,
            None,
            1e-5,
            _core.FLOAT16,
            False,
        )


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_fast_path_matches_general_path(isa, rng, op, dtype):
    # The common call is checked in C (_core.add_norm_fast); return_stats=True takes the Python
    # path. Every way of passing out= and residual_out= gives the same bits on both.
    from fastln import _core

    dt = _half(dtype) if dtype in ("float16", "bfloat16") else np.dtype(dtype)
    pdt = F32 if dt.itemsize == 2 else dt
    x, r = _data(rng, (5, 3, 37), dt), _data(rng, (5, 3, 37), dt)
    w, b = _data(rng, 37, pdt, c=1.0), _data(rng, 37, pdt)
    if op == "rms_norm":
        b = None
    want_y, want_h, *_ = _norm(op, x, w, b, eps=1e-5, residual=r, return_stats=True)
    for out_to, h_to in [(None, None), ("new", "new"), ("x", "r"), ("r", "x"), ("new", "x")]:
        xc, rc = x.copy(), r.copy()
        pick = {None: None, "new": None, "x": xc, "r": rc}
        out = np.empty_like(x) if out_to == "new" else pick[out_to]
        hout = np.empty_like(x) if h_to == "new" else pick[h_to]
        got = _core.add_norm_fast(xc, rc, w, b, 1e-5, out, hout, -1, False, op == "rms_norm")
        assert got is not None, (out_to, h_to)
        y, h = got
        assert y.dtype == h.dtype == dt
        if out is not None:
            assert y is out
        if hout is not None:
            assert h is hout
        np.testing.assert_array_equal(_bits(h) if dt.itemsize == 2 else h,
                                      _bits(want_h) if dt.itemsize == 2 else want_h)
        np.testing.assert_array_equal(_bits(y) if dt.itemsize == 2 else y,
                                      _bits(want_y) if dt.itemsize == 2 else want_y)
    # Without residual: the 16-bit (or plain) norm.
    y = _core.add_norm_fast(x, None, w, b, 1e-5, None, None, -1, False, op == "rms_norm")
    want = _norm(op, x, w, b, eps=1e-5, return_stats=True)[0]
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("dtype", HALF)
def test_fast_path_takes_parameters_of_the_inputs_dtype(isa, rng, dtype):
    # 16-bit weight and bias are widened to float32 by the C-checked path itself (in C), not sent
    # down the general path: same bits as float32 parameters, in the forward passes and the
    # backward. layer_norm's own entry takes 16-bit x too.
    from fastln import _core

    dt = _half(dtype)
    x, r = _data(rng, (6, 45), dt), _data(rng, (6, 45), dt)
    w16, b16 = _data(rng, 45, dt, c=1.0), _data(rng, 45, dt)
    w32, b32 = w16.astype(F32), b16.astype(F32)
    for rms in (False, True):
        b_16, b_32 = (None, None) if rms else (b16, b32)
        got = _core.add_norm_fast(x, r, w16, b_16, 1e-5, None, None, -1, False, rms)
        assert got is not None
        want = _core.add_norm_fast(x, r, w32, b_32, 1e-5, None, None, -1, False, rms)
        for g, wnt in zip(got, want):
            np.testing.assert_array_equal(_bits(g), _bits(wnt))
    # One of each kind: each 16-bit one is widened on its own, the float32 one taken as it is.
    for w, b in ((w16, b32), (w32, b16), (None, b16), (w16, None)):
        got = _core.add_norm_fast(x, None, w, b, 1e-5, None, None, -1, False, False)
        assert got is not None
        want = fastln.layer_norm(x, None if w is None else w32, None if b is None else b32)
        np.testing.assert_array_equal(_bits(got), _bits(want))
    y16 = fastln.layer_norm(x, w16, b16)
    np.testing.assert_array_equal(_bits(y16), _bits(fastln.layer_norm(x, w32, b32)))
    got = _core.layer_norm_fast(x, w16, b16, 1e-5, None, -1, False)
    assert got is not None
    np.testing.assert_array_equal(_bits(got), _bits(y16))
    got = _core.add_norm_fast(x, None, w16, None, 1e-5, None, None, -1, False, True)
    assert got is not None
    np.testing.assert_array_equal(_bits(got), _bits(fastln.rms_norm(x, w32)))
    _, mean, rstd = fastln.layer_norm(x, w32, b32, return_stats=True)
    dy = _data(rng, (6, 45), dt)
    got = _core.norm_backward_fast(dy, x, mean, rstd, w16, -1, True)
    assert got is not None
    want = fastln.layer_norm_backward(dy, x, mean, rstd, w32)
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]))
    for g, wnt in zip(got[1:], want[1:]):
        assert g.dtype == F32
        np.testing.assert_array_equal(g, wnt)


class _Sub(np.ndarray):
    pass


def test_fast_path_declines_what_it_cannot_do(rng):
    from fastln import _core

    x = _data(rng, (4, 16), np.float32)
    r = _data(rng, (4, 16), np.float32)
    buf = np.zeros((5, 16), np.float32)
    w32 = np.ones(16, np.float32)
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    x16, r16, buf16 = x.astype(np.float16), r.astype(np.float16), buf.astype(np.float16)

    def fast(x=x, r=r, w=None, b=None, eps=1e-5, out=None, hout=None, axis=-1, stats=False,
             rms=False):
        return _core.add_norm_fast(x, r, w, b, eps, out, hout, axis, stats, rms)

    assert fast() is not None
    declined = [
        fast(x=buf[:4], out=buf[1:]),  # out overlaps x partly
        fast(r=buf[:4], hout=buf[1:]),  # residual_out overlaps residual partly
        fast(out=buf[:4], hout=buf[1:]),  # out and residual_out overlap
        fast(out=x, hout=x),  # both outputs the same array
        fast(hout=ro),  # read-only output
        fast(x=x[:, ::2], r=r[:, ::2]),  # not contiguous
        fast(r=r.astype(np.float64)),  # residual of another dtype
        fast(r=r[:3]),  # residual of another shape
        fast(r=None, hout=ro),  # residual_out without residual
        fast(w=np.ones(16, np.float64)),  # parameter of another dtype
        fast(w=w32[:8]),  # parameter of another length
        fast(b=w32, rms=True),  # RMS norm has no bias
        fast(axis=0),
        fast(stats=True),
        fast(eps=-1.0),
        fast(eps=1),  # an int: the general path converts it
        fast(x=x.astype(np.int16), r=r.astype(np.int16)),  # a 2-byte dtype that is not a float
        # 16-bit x takes float32 parameters or plain ones of its own dtype here
        fast(x=x16, r=r16, w=np.ones(16, np.float64)),
        fast(x=x16, r=r16, w=np.ones(16, np.uint16)),
        fast(x=x16, r=r16, w=np.ones(32, np.float16)[::2]),  # not contiguous
        fast(x=x16, r=r16, w=np.ones(15, np.float16)),  # another length
        fast(x=x16, r=r16, b=np.ones(16, np.dtype(">f2"))),  # byte-swapped
        fast(x=x16, r=None, w=np.ones((1, 16), np.float16)),  # 2-D
        fast(x=buf16[:4], r=None, out=buf16[1:]),  # 16-bit out overlapping x partly
        fast(x=x.view(_Sub), r=r),  # a subclass
    ]
    assert all(d is None for d in declined)
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    if ml_dtypes is not None:  # a weight of the other 16-bit dtype
        bf = np.dtype(ml_dtypes.bfloat16)
        assert fast(x=x16, r=r16, w=np.ones(16, bf)) is None
        assert fast(x=x16.astype(bf), r=r16.astype(bf), w=np.ones(16, np.float16)) is None
    # ... and the public functions still give the right answer for those calls.
    y, h = fastln.layer_norm(buf[:4], residual=buf[1:], residual_out=buf[1:])
    assert np.isfinite(y).all()


def test_new_style_dtypes_are_refused():
    # NEP 42 dtypes all have typenum -1. A fresh process, so that no bfloat16 array has been seen
    # (the C entries learn bfloat16's typenum from the first one): a 16-byte quad-precision x was
    # once taken as bfloat16 there, and out= got bfloat16 bits written into it.
    pytest.importorskip("numpy_quaddtype")
    code = """
import numpy as np, numpy_quaddtype, fastln
from fastln import _core
x = np.ones((2, 8), dtype=numpy_quaddtype.QuadPrecDType())
out = np.zeros_like(x)
assert _core.layer_norm_fast(x, None, None, 1e-5, out, -1, False) is None
assert _core.add_norm_fast(x, None, None, None, 1e-5, None, None, -1, False, True) is None
assert _core.norm_backward_fast(x, x, None, None, None, -1, True) is None
for call in (lambda: fastln.layer_norm(x), lambda: fastln.layer_norm(x, out=out),
             lambda: fastln.rms_norm(x), lambda: fastln.layer_norm(x, residual=x)):
    try:
        call()
    except TypeError:
        pass
    else:
        raise AssertionError("no TypeError")
assert (out == 0).all()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       cwd=os.path.dirname(os.path.dirname(fastln.__file__)))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_residual_matches_torch(isa, rng):
    torch = pytest.importorskip("torch")
    x, r = _data(rng, (5, 384), np.float32), _data(rng, (5, 384), np.float32)
    w, b = _data(rng, 384, np.float32), _data(rng, 384, np.float32)
    y, h = fastln.layer_norm(x, w, b, 1e-12, residual=r)
    th = torch.from_numpy(x) + torch.from_numpy(r)
    ty = torch.nn.functional.layer_norm(th, (384,), torch.from_numpy(w), torch.from_numpy(b), 1e-12)
    np.testing.assert_array_equal(h, th.numpy())
    np.testing.assert_allclose(y, ty.numpy(), atol=2e-5)
    y, h = fastln.rms_norm(x, w, 1e-6, residual=r)
    ty = torch.nn.functional.rms_norm(th, (384,), torch.from_numpy(w), 1e-6)
    np.testing.assert_allclose(y, ty.numpy(), atol=2e-5)


# ---- float16 and bfloat16 ----------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("cols", TAILS + [8193, 10000])
@pytest.mark.parametrize("params", ["float32", "same", "none"])
def test_half_within_one_ulp(isa, rng, op, name, cols, params):
    dt = _half(name)
    rows = 37 if cols <= 1000 else 3  # several blocks of rows, the last one partial
    x = _data(rng, (rows, cols), dt, c=1.5, s=2.0)
    w = b = None
    if params != "none":
        pdt = F32 if params == "float32" else dt
        w, b = _data(rng, cols, pdt, c=1.0), _data(rng, cols, pdt)
    y, *stats = _norm(op, x, w, b, return_stats=True)
    assert y.dtype == dt and all(s.dtype == F32 for s in stats)
    ey, *estats = _ref(op, x.astype(np.float64), w, b, return_stats=True)
    # One unit of dt, plus the float32 math's own error where dt's units are finer (near 0).
    err = np.abs(y.astype(np.float64) - ey)
    assert (err <= _ulp(ey, dt) + 2e-6).all(), err.max()
    for got, want in zip(stats, estats):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The math is the float32 routine's on the widened row, rounded once to nearest even: bit for
    # bit what NumPy (or ml_dtypes) makes of the float32 result.
    w32 = None if w is None else w.astype(F32)
    b32 = None if b is None else b.astype(F32)
    want = _norm(op, x.astype(F32), w32, b32).astype(dt)
    np.testing.assert_array_equal(_bits(y), _bits(want))


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("nonfinite", [False, True])
def test_half_rounding_of_every_kind_of_float(isa, rng, name, nonfinite):
    # weight 0 makes y = bias exactly, so the output is the rounding of arbitrary float32 values:
    # ties, overflow to Inf, subnormals, NaN (kept, quiet). With a finite bias, y cannot be NaN
    # and bfloat16 takes a store without the NaN test; an Inf or NaN in it switches back.
    dt = _half(name)
    if dt == F16:
        special = [
            65504,
            65519.996,
            65520,
            65536,
            2.0**-14,
            2.0**-24,
            2.0**-25,
            2.0**-25 * 1.0001,
            3 * 2.0**-26,
            1 + 2.0**-11,
            1 + 3 * 2.0**-11,
            1e-10,
            1e10,
        ]
    else:
        special = [1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.3895314e38, 3.4028235e38, 1e-40, 2.0**-133]
    special = np.array(special, np.float64).astype(F32)
    rnd = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(F32)
    inf_nan = np.array([np.inf, -np.inf, np.nan], F32)
    if not nonfinite:
        rnd, inf_nan = rnd[np.isfinite(rnd)], inf_nan[:0]
    bias = np.concatenate([special, -special, rnd, inf_nan])
    bias = bias[bias != 0]  # u * 0 + (-0) may give +0
    x = _data(rng, (1, bias.size), dt)
    y = fastln.layer_norm(x, np.zeros(bias.size, F32), bias)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        want = bias.astype(dt)
    nan = np.isnan(bias)
    np.testing.assert_array_equal(_bits(y)[~nan], _bits(want)[~nan])
    assert np.isnan(y[nan].astype(F32)).all()
    quiet = 0x7E00 if dt == F16 else 0x7FC0
    assert (_bits(y)[nan] & quiet == quiet).all()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
def test_half_residual_rms_and_layer(isa, rng, op, name):
    dt = _half(name)
    x, r = _data(rng, (9, 100), dt), _data(rng, (9, 100), dt)
    w = _data(rng, 100, F32)
    y, h, *stats = _norm(op, x, w, w, residual=r, return_stats=True)
    np.testing.assert_array_equal(_bits(h), _bits(x + r))
    yy, *ss = _norm(op, x + r, w, w, return_stats=True)
    np.testing.assert_array_equal(_bits(y), _bits(yy))
    for a, b in zip(stats, ss):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", HALF)
def test_half_residual_of_every_bit_pattern(isa, rng, name):
    # h = x + (-0) is x itself for every 16-bit pattern but NaN: widening and rounding round-trip.
    dt = _half(name)
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(dt).reshape(64, 1024)
    r = np.full_like(x, -0.0)
    y, h = fastln.layer_norm(x, residual=r)
    nan = np.isnan(x.astype(F32))
    np.testing.assert_array_equal(_bits(h)[~nan], _bits(x)[~nan])
    assert np.isnan(h.astype(F32)[nan]).all()
    if dt != F16:  # bfloat16's h store rounds without a NaN test: the payload must survive it
        np.testing.assert_array_equal(_bits(h)[nan], _bits(x)[nan] | 0x40)
    # A sum that must round: h is NumPy's (or ml_dtypes') x + r in dt, bit for bit.
    a = _data(rng, (8, 333), dt, s=100.0)
    c = _data(rng, (8, 333), dt, s=0.01)
    y, h = fastln.layer_norm(a, residual=c)
    np.testing.assert_array_equal(_bits(h), _bits(a + c))
    np.testing.assert_array_equal(_bits(y), _bits(fastln.layer_norm(a + c)))


@pytest.mark.parametrize("name", HALF)
def test_half_layouts_in_place_and_axes(isa, rng, name):
    dt = _half(name)
    base = _data(rng, (20, 50), dt)
    for v in (base[::2], base[:, 3:40], base.T, base[:, ::3]):
        want = fastln.layer_norm(v.astype(F32)).astype(dt)
        np.testing.assert_array_equal(_bits(fastln.layer_norm(v)), _bits(want))
    x = _data(rng, (4, 5, 6), dt)
    want = fastln.layer_norm(x.astype(F32), axis=1).astype(dt)
    np.testing.assert_array_equal(_bits(fastln.layer_norm(x, axis=1)), _bits(want))
    xc = x.copy()
    assert fastln.layer_norm(xc, out=xc, axis=1) is xc
    np.testing.assert_array_equal(_bits(xc), _bits(want))
    y = fastln.layer_norm(np.zeros((0, 4), dt))
    assert y.shape == (0, 4) and y.dtype == dt


@pytest.mark.parametrize("name", HALF)
def test_half_nan_inf_and_constant_rows(isa, name):
    dt = _half(name)
    x = np.ones((3, 40), dt)
    x[1, 7] = np.nan
    x[2, 3] = np.inf
    y, mean, rstd = fastln.layer_norm(x, return_stats=True)
    assert (y[0].astype(F32) == 0).all() and np.isfinite(rstd[0])
    assert np.isnan(y[1:].astype(F32)).all() and np.isnan(mean[1:]).all()


def _rounded(y32, dt):
    """Bits of float32 y32 rounded to dt as fastln rounds: to nearest even, NaN kept, made quiet."""
    u = y32.view(np.uint32).astype(np.uint64)
    nan = np.isnan(y32)
    if dt == F16:
        with np.errstate(over="ignore", invalid="ignore"):
            out = y32.astype(F16).view(np.uint16).copy()
        out[nan] = (u[nan] >> 16) & 0x8000 | 0x7E00 | (u[nan] >> 13) & 0x3FF
        return out
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    out[nan] = (u[nan] >> 16) | 0x40
    return out


WEIGHT_CASES = ["none", "nan_weight", "inf_weight"]
BAD_PARAMS = [("layer_norm", c) for c in WEIGHT_CASES + ["nan_bias", "inf_bias"]]
BAD_PARAMS += [("rms_norm", c) for c in WEIGHT_CASES]  # no bias


@pytest.mark.parametrize(("op", "bad"), BAD_PARAMS)
@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("cols", TAILS)
def test_half_y_with_finite_and_nonfinite_params(isa, rng, op, bad, name, cols):
    # Finite weight and bias: y cannot be NaN, and bfloat16 rounds it without the NaN test. A NaN
    # or Inf in either: the full rounding. Every value of y, in every vector and tail position, is
    # the float32 routine's result rounded once, NaN payloads kept. Only the NaN cases can catch a
    # missing switch: the NaN an Inf makes (Inf * 0, Inf - Inf) is the default NaN, whose low bits
    # are zero, so the cheap rounding gets it right too; the Inf cases check the results only.
    dt = _half(name)
    x = _data(rng, (5, cols), dt)
    w, b = _data(rng, cols, F32, c=1.0), _data(rng, cols, F32)
    if bad != "none":
        # A NaN whose low 16 bits carry into its top half when rounded without the NaN test.
        v = np.array([0xFFFFFFFF], np.uint32).view(F32)[0] if bad[:3] == "nan" else np.inf
        (w if bad.endswith("weight") else b)[rng.integers(cols)] = v
    with np.errstate(invalid="ignore", over="ignore"):
        want = _rounded(_norm(op, x.astype(F32), w, b), dt)
    buf = np.empty(x.size + 1, dt)
    xi = buf[1:].reshape(x.shape)  # in place, at an odd offset from any vector boundary
    xi[...] = x
    np.testing.assert_array_equal(_bits(_norm(op, x, w, b)), want)
    assert _norm(op, xi, w, b, out=xi) is xi
    np.testing.assert_array_equal(_bits(xi), want)
    r = _data(rng, (5, cols), dt)
    y, h = _norm(op, x, w, b, residual=r)
    np.testing.assert_array_equal(_bits(y), _bits(_norm(op, h, w, b)))


def test_half_backward_errors():
    x = np.zeros((4, 8), np.float16)
    s = np.ones(4, F32)
    with pytest.raises(TypeError, match="dy has dtype"):
        fastln.layer_norm_backward(x.astype(F32), x, s, s)
    with pytest.raises(TypeError, match="dy has dtype"):
        fastln.rms_norm_backward(x, x.astype(F32), s)
    with pytest.raises(ValueError, match="dy has shape"):
        fastln.rms_norm_backward(x[:2], x, s)
    with pytest.raises(ValueError, match="weight"):
        fastln.layer_norm_backward(x, x, s, s, np.ones(7, np.float16))
    with pytest.raises(ValueError, match="rstd"):
        fastln.rms_norm_backward(x, x, s[:3])
    with pytest.raises(TypeError, match="mean"):
        fastln.layer_norm_backward(x, x, s.astype(np.int32), s)
    bf16 = _bf16()
    with pytest.raises(TypeError, match="dy has dtype"):
        fastln.layer_norm_backward(x.astype(bf16), x, s, s)
    # bfloat16 statistics are widened exactly to float32, as float16 ones are
    xb = (np.arange(32, dtype=F32).reshape(4, 8) / 7).astype(bf16)
    r = np.full(4, 1.25, F32)
    got = fastln.rms_norm_backward(xb, xb, r.astype(bf16))[0].view(np.uint16)
    np.testing.assert_array_equal(got, fastln.rms_norm_backward(xb, xb, r)[0].view(np.uint16))


def test_half_errors():
    x = np.zeros((4, 8), np.float16)
    with pytest.raises(TypeError):
        fastln.layer_norm(x, out=np.zeros((4, 8), np.float32))
    with pytest.raises(TypeError):
        fastln.layer_norm(x, residual=np.zeros((4, 8), np.float32))
    with pytest.raises(TypeError, match="float16"):
        fastln.layer_norm(x.astype(np.int16), residual=x)


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("shape", [(96, 1024), (512, 64), (5, 8200)])  # general; short; long
def test_half_bitwise_identical_across_thread_counts(rng, name, shape):
    # Parameters of x's dtype are widened by each thread into its own buffer (api.cpp): every
    # thread's rows must see the same values as one thread's, and as float32 parameters give.
    dt = _half(name)
    x, r = _data(rng, shape, dt), _data(rng, shape, dt)
    w16, b16 = _data(rng, shape[1], dt, c=1.0), _data(rng, shape[1], dt)
    w32, b32 = w16.astype(F32), b16.astype(F32)
    got = {}
    try:
        # 7 threads on fewer CPUs: threads run late, and a thread (the caller) may run several
        # parts, widening the parameters again into each part's own copy.
        for n in (1, 2, 7):
            fastln.set_num_threads(n)
            y = np.full(shape, np.nan, dt)
            fastln.layer_norm(x, w16, b16, out=y)
            got[n] = [*fastln.layer_norm(x, residual=r), y, fastln.rms_norm(x, w16),
                      *fastln.layer_norm(x, w16, b32, residual=r),
                      *fastln.rms_norm(x, w16, residual=r)]
        want = [fastln.layer_norm(x, w32, b32), fastln.rms_norm(x, w32),
                *fastln.layer_norm(x, w32, b32, residual=r), *fastln.rms_norm(x, w32, residual=r)]
    finally:
        fastln.set_num_threads(0)
    for n in (2, 7):
        for a, b in zip(got[1], got[n]):
            np.testing.assert_array_equal(_bits(a), _bits(b))
    for a, b in zip(got[1][2:], want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("name", HALF)
def test_half_matches_torch(isa, rng, name):
    torch = pytest.importorskip("torch")
    dt = _half(name)
    x = _data(rng, (6, 768), dt, c=0.5)
    w, b = _data(rng, 768, dt), _data(rng, 768, dt)
    y = fastln.layer_norm(x, w, b)
    tdt = torch.float16 if dt == F16 else torch.bfloat16

    def t(a):
        return torch.from_numpy(a.astype(F32)).to(tdt)

    ty = torch.nn.functional.layer_norm(t(x), (768,), t(w), t(b)).float().numpy()
    # Both round a float32 result once: at most one unit apart.
    assert (np.abs(y.astype(F32) - ty) <= _ulp(ty, dt)).all()


# ---- backward and modules with 16-bit storage ----------------------------------------------------


# The backward kernels read 16-bit dy and x as they are, compute in float32 and round dx once to
# x's dtype; mean, rstd, weight, dweight and dbias are float32. On the widened values every
# instruction is the float32 kernel's: dx is its dx rounded once, dweight and dbias are its own.


def _backward(op, dy, x, w, axis=-1):
    """((dx, dweight, dbias), statistics) of op's backward, with the forward's statistics of x;
    dbias None for RMS norm, whose statistics are (None, rstd)."""
    if op == "layer_norm":
        _, mean, rstd = fastln.layer_norm(x, w, return_stats=True, axis=axis)
        return fastln.layer_norm_backward(dy, x, mean, rstd, w, axis=axis), (mean, rstd)
    _, rstd = fastln.rms_norm(x, w, return_stats=True, axis=axis)
    return (*fastln.rms_norm_backward(dy, x, rstd, w, axis=axis), None), (None, rstd)


def _backward_of(op, dy, x, stats, w):
    """op's backward for given statistics: fastln's on float32 arrays, or the float64 reference on
    anything else."""
    mean, rstd = stats
    lib = fastln if x.dtype == F32 else ref
    if op == "layer_norm":
        return lib.layer_norm_backward(dy, x, mean, rstd, w)
    return (*lib.rms_norm_backward(dy, x, rstd, w), None)


def _widened(a):
    return None if a is None else a.astype(F32)


def _normwise_close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    err, scale = np.max(np.abs(got - want), initial=0.0), np.max(np.abs(want), initial=0.0)
    assert err <= tol * scale, (err, scale)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("cols", TAILS)
@pytest.mark.parametrize("params", ["float32", "same", "none"])
def test_half_backward_within_one_ulp(isa, rng, op, name, cols, params):
    dt = _half(name)
    # 70 rows: two blocks of dweight/dbias partials and a partial group of rows.
    rows = 70 if cols <= 1000 else 5
    x, dy = _data(rng, (rows, cols), dt, c=1.5, s=2.0), _data(rng, (rows, cols), dt)
    w = None if params == "none" else _data(rng, cols, F32 if params == "float32" else dt, c=1.0)
    (dx, dw, db), stats = _backward(op, dy, x, w)
    assert dx.dtype == dt and dx.shape == x.shape
    assert all(s.dtype == F32 for s in stats if s is not None)
    if w is None:
        assert dw is None and db is None
    else:
        assert dw.dtype == F32 and (db is None) == (op == "rms_norm")
        assert db is None or db.dtype == F32
    edx, edw, edb = _backward_of(op, dy, x, stats, w)
    # One unit of dt, plus the float32 math's own error where dt's units are finer (dx near 0):
    # a few float32 roundings of the row's largest term, rstd * |dy * w|.
    g = np.abs(dy.astype(np.float64)) * (1.0 if w is None else np.abs(w.astype(np.float64)))
    scale = np.max(g, axis=1, keepdims=True) * stats[1].astype(np.float64)[:, None]
    err = np.abs(dx.astype(np.float64) - edx)
    assert (err <= _ulp(edx, dt) + 1e-6 * scale).all(), (err / (_ulp(edx, dt) + 1e-6 * scale)).max()
    if w is not None:
        _normwise_close(dw, edw, 1e-5)
        if db is not None:
            _normwise_close(db, edb, 1e-5)
    # Bit for bit the float32 kernel's results on the widened values, dx rounded once.
    fdx, fdw, fdb = _backward_of(op, dy.astype(F32), x.astype(F32), stats, _widened(w))
    np.testing.assert_array_equal(_bits(dx), _bits(fdx.astype(dt)))
    for got, want in ((dw, fdw), (db, fdb)):
        assert (got is None and want is None) or got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
def test_half_backward_long_rows_group_as_float32(isa, rng, op, name):
    # 40000 values: float32 rows that long go through the kernel one at a time, and 16-bit rows,
    # half the bytes, must too, or dweight and dbias would round differently.
    dt = _half(name)
    x, dy = _data(rng, (5, 40000), dt, c=1.5), _data(rng, (5, 40000), dt)
    w = _data(rng, 40000, F32, c=1.0)
    (dx, dw, db), stats = _backward(op, dy, x, w)
    fdx, fdw, fdb = _backward_of(op, dy.astype(F32), x.astype(F32), stats, w)
    np.testing.assert_array_equal(_bits(dx), _bits(fdx.astype(dt)))
    for got, want in ((dw, fdw), (db, fdb)):
        assert (got is None and want is None) or got.tobytes() == want.tobytes()


@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("cols", [7, 33, 768])
def test_half_backward_mean_near_and_far_from_zero(isa, rng, name, cols):
    # dx skips the subtraction of mean for rows with |mean| <= 2 std and subtracts it for the
    # others: rows on both sides of that line, and far out.
    dt = _half(name)
    x = rng.standard_normal((8, cols))
    x = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
    x = (x + np.array([0.0, 1.9, -1.99, 2.01, -2.2, 30.0, -1e3, 1e4])[:, None]).astype(dt)
    dy = _data(rng, (8, cols), dt)
    w = _data(rng, cols, F32, c=1.0)
    (dx, dw, db), stats = _backward("layer_norm", dy, x, w)
    edx, edw, edb = _backward_of("layer_norm", dy, x, stats, w)
    scale = np.max(np.abs(dy.astype(np.float64) * w), axis=1, keepdims=True) * stats[1][:, None]
    err = np.abs(dx.astype(np.float64) - edx)
    assert (err <= _ulp(edx, dt) + 1e-6 * scale).all()
    _normwise_close(dw, edw, 1e-5)
    _normwise_close(db, edb, 1e-5)
    fdx = _backward_of("layer_norm", dy.astype(F32), x.astype(F32), stats, w)[0]
    np.testing.assert_array_equal(_bits(dx), _bits(fdx.astype(dt)))


@pytest.mark.parametrize("name", HALF)
def test_half_backward_dx_may_overwrite_dy_or_x(isa, rng, name):
    # The C API allows dx to be dy or x (same leading dimension); the kernels read each element
    # before they write it.
    from fastln import _core

    dt = _half(name)
    x, dy = _data(rng, (9, 37), dt), _data(rng, (9, 37), dt)
    w = _data(rng, 37, F32, c=1.0)
    (ex, ew, eb), (mean, rstd) = _backward("layer_norm", dy, x, w)
    for target in ("dy", "x"):
        a = {"dy": dy.copy(), "x": x.copy()}
        dw, db = np.empty(37, F32), np.empty(37, F32)
        _core.norm_backward_2d(a["dy"], a["x"], mean, rstd, w, a[target], dw, db)
        np.testing.assert_array_equal(_bits(a[target]), _bits(ex))
        assert dw.tobytes() == ew.tobytes() and db.tobytes() == eb.tobytes()


@pytest.mark.parametrize("name", HALF)
def test_half_backward_layouts(isa, rng, name):
    # Row-strided views go to the kernels as they are, other layouts as contiguous copies, other
    # axes and torch's keepdim statistics are reshaped, 16-bit weights widened: every call reaches
    # the same kernel on the same values as the contiguous one, so the results agree bit for bit.
    dt = _half(name)
    big = _data(rng, (10, 50), dt)
    xv, dyv = big[::2, 5:45], big[1::2, :40]
    wv = _data(rng, 40, dt, c=1.0)
    for op in OPS:
        got, _ = _backward(op, dyv, xv, wv)
        want, _ = _backward(op, dyv.copy(), xv.copy(), wv.astype(F32))  # checked in C
        for g, e in zip(got, want):
            assert (g is None and e is None) or g.tobytes() == e.tobytes()
    # The C-checked call takes contiguous 16-bit dy and x with float32 statistics and a float32
    # weight or one of x's dtype, and leaves anything else to the general path.
    from fastln import _core

    dyc, xc = dyv.copy(), xv.copy()
    _, m, r = fastln.layer_norm(xc, return_stats=True)
    assert _core.norm_backward_fast(dyc, xc, m, r, wv.astype(F32), -1, True) is not None
    assert _core.norm_backward_fast(dyc, xc, None, r, None, -1, False) is not None
    assert _core.norm_backward_fast(dyc, xc, m, r, wv, -1, True) is not None
    assert _core.norm_backward_fast(dyc, xc, m, r, wv.astype(np.float64), -1, True) is None
    assert _core.norm_backward_fast(dyc, xc, m.astype(np.float64), r, None, -1, True) is None
    assert _core.norm_backward_fast(dyc.astype(F32), xc, m, r, None, -1, True) is None
    assert _core.norm_backward_fast(dyv, xv, m, r, None, -1, True) is None
    x, dy = _data(rng, (4, 5, 6), dt), _data(rng, (4, 5, 6), dt)
    w = _data(rng, (5, 6), F32, c=1.0)
    _, mean, rstd = fastln.layer_norm(x, w, return_stats=True, axis=1)
    want = fastln.layer_norm_backward(dy.reshape(4, 30), x.reshape(4, 30), mean, rstd, w.reshape(30))
    for args in [
        (dy, x, mean, rstd),
        (np.asfortranarray(dy), np.asfortranarray(x), mean, rstd),
        (dy, x, mean.reshape(4, 1, 1), rstd.reshape(4, 1, 1)),
        (dy, x, mean.astype(np.float64), rstd.astype(np.float64)),  # cast to float32
    ]:
        got = fastln.layer_norm_backward(*args, w, axis=-2)
        assert got[0].dtype == dt and got[0].shape == x.shape
        np.testing.assert_array_equal(_bits(got[0]).reshape(4, 30), _bits(want[0]))
        for g, e in zip(got[1:], want[1:]):
            assert g.shape == (5, 6) and g.tobytes() == e.tobytes()


@pytest.mark.parametrize("name", HALF)
def test_half_backward_zero_rows_nan_and_inf(isa, rng, name):
    dt = _half(name)
    x = np.zeros((0, 8), dt)
    s = np.zeros(0, F32)
    dx, dw, db = fastln.layer_norm_backward(x, x, s, s, np.ones(8, dt))
    assert dx.shape == (0, 8) and dx.dtype == dt
    assert dw.dtype == db.dtype == F32 and (dw == 0).all() and (db == 0).all()
    dx, dw = fastln.rms_norm_backward(x, x, s, np.ones(8, F32))
    assert dx.shape == (0, 8) and dx.dtype == dt and dw.dtype == F32 and (dw == 0).all()
    # NaN and Inf in dy spoil their row of dx and their column of dweight/dbias; in x (whose
    # statistics are then NaN) the whole row: as in the float32 kernel on the widened values.
    x, dy = _data(rng, (6, 37), dt), _data(rng, (6, 37), dt)
    w = _data(rng, 37, F32, c=1.0)
    dy[1, 4], dy[2, 36], x[4, 0] = np.nan, np.inf, -np.inf
    for op in OPS:
        with np.errstate(invalid="ignore", over="ignore"):
            (dx, dw, db), stats = _backward(op, dy, x, w)
            fdx, fdw, fdb = _backward_of(op, dy.astype(F32), x.astype(F32), stats, w)
        assert not np.isfinite(dx[[1, 2, 4]].astype(F32)).all(axis=1).any()
        assert np.isfinite(dx[[0, 3, 5]].astype(F32)).all()
        assert np.isnan(dx[1].astype(F32)).all() and np.isnan(dx[4].astype(F32)).all()
        assert np.isnan(dw[4]) and not np.isfinite(dw[36])
        np.testing.assert_array_equal(dx.astype(F32), fdx.astype(dt).astype(F32))
        np.testing.assert_array_equal(dw, fdw)
        if db is not None:
            np.testing.assert_array_equal(db, fdb)


@pytest.mark.parametrize("name", HALF)
def test_half_backward_bitwise_identical_across_thread_counts(isa, rng, name):
    # 1500 x 160: 24 blocks of partials, enough work for 7 threads.
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    dt = _half(name)
    x, dy = _data(rng, (1500, 160), dt, c=3.0), _data(rng, (1500, 160), dt)
    w = _data(rng, 160, F32, c=1.0)
    results = []
    try:
        for n in (1, 2, 7):
            fastln.set_num_threads(n)
            for op in OPS:
                results.append(_backward(op, dy, x, w)[0])
    finally:
        fastln.set_num_threads(0)
    for k, other in enumerate(results[2:]):
        for a, b in zip(results[k % 2], other):
            assert (a is None and b is None) or a.tobytes() == b.tobytes()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
@pytest.mark.parametrize("shape", [(6, 768), (70, 33)])
def test_half_backward_matches_torch(isa, rng, op, name, shape):
    torch = pytest.importorskip("torch")
    dt = _half(name)
    tdt = torch.float16 if dt == F16 else torch.bfloat16
    n = shape[-1]
    x, dy = _data(rng, shape, dt, c=0.5), _data(rng, shape, dt)
    w, b = _data(rng, n, dt, c=1.0), _data(rng, n, dt)

    def t(a):
        return torch.from_numpy(a.astype(F32)).to(tdt).requires_grad_(True)

    xt, wt, bt = t(x), t(w), t(b)
    if op == "layer_norm":
        torch.nn.functional.layer_norm(xt, (n,), wt, bt, 1e-5).backward(t(dy).detach())
    else:
        torch.nn.functional.rms_norm(xt, (n,), wt, 1e-6).backward(t(dy).detach())
    (dx, dw, db), _ = _backward(op, dy, x, w)
    # Both round a float32 dx once: a unit of dt apart, plus a unit of dt of the largest dx on
    # elements that cancel towards 0 (measured: torch's float16 layer norm loses up to 1.3e-4 of
    # it there, its bfloat16 one 5.7e-4; fastln stays within one unit of the float64 result).
    unit = 2.0**-10 if dt == F16 else 2.0**-7
    tdx = xt.grad.float().numpy()
    big = np.maximum(np.abs(dx.astype(F32)), np.abs(tdx))
    assert (np.abs(dx.astype(F32) - tdx) <= _ulp(big, dt) + unit * np.abs(tdx).max()).all()
    # torch sums dweight and dbias in dt (measured: off by up to 1e-3 of the largest in float16,
    # 9e-3 in bfloat16); fastln sums them in float32.
    _normwise_close(dw, wt.grad.float().numpy(), 4 * unit)
    if op == "layer_norm":
        _normwise_close(db, bt.grad.float().numpy(), 4 * unit)


@pytest.mark.parametrize("name", HALF)
def test_half_modules(isa, rng, name):
    dt = _half(name)
    x = _data(rng, (4, 16), dt)
    for mod in (fastln.LayerNorm(16), fastln.RMSNorm(16)):
        y = mod(x)
        assert y.dtype == dt
        y2 = mod.forward(x)
        np.testing.assert_array_equal(_bits(y), _bits(y2))
        dx = mod.backward(np.ones_like(x))
        assert dx.dtype == dt and mod.grad_weight.dtype == F32


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_parameters_sharing_memory_with_the_outputs(isa, rng, dtype):
    # weight a row of residual while h is written over residual, bias a row of out: both read as
    # if copied (the kernels read them again for every row, after writing the rows before).
    dt = np.dtype(dtype)
    x, r = _data(rng, (4, 8), dt), _data(rng, (4, 8), dt, c=1.0)
    out = _data(rng, (4, 8), dt)
    w, b = r[0].copy(), out[1].copy()
    want_y, want_h = fastln.layer_norm(x, w, b, residual=r)
    y, h = fastln.layer_norm(x, r[0], out[1], residual=r, residual_out=r, out=out)
    assert y is out and h is r
    np.testing.assert_array_equal(_bits(h) if dt.itemsize == 2 else h,
                                  _bits(want_h) if dt.itemsize == 2 else want_h)
    np.testing.assert_array_equal(_bits(y) if dt.itemsize == 2 else y,
                                  _bits(want_y) if dt.itemsize == 2 else want_y)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bfloat16_parameters_with_wider_x(isa, rng, dtype):
    # A bfloat16 weight or bias is taken wherever a float16 one is: widened exactly. (bfloat16
    # mean and rstd stay refused in the backward: see test_half_backward_errors.)
    bf = _bf16()
    dt = np.dtype(dtype)
    x = _data(rng, (3, 40), dt)
    w, b = _data(rng, 40, bf, c=1.0), _data(rng, 40, bf)
    wide = (w.astype(dt), b.astype(dt))
    np.testing.assert_array_equal(fastln.layer_norm(x, w, b), fastln.layer_norm(x, *wide))
    np.testing.assert_array_equal(fastln.rms_norm(x, w), fastln.rms_norm(x, wide[0]))
    _, mean, rstd = fastln.layer_norm(x, return_stats=True)
    dy = _data(rng, (3, 40), dt)
    got = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    want = fastln.layer_norm_backward(dy, x, mean, rstd, wide[0])
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g, wnt)
