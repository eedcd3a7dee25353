"""layer_norm with residual= (fused residual add) and with float16 / bfloat16 storage, every ISA."""

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
def test_residual_large_output_streams(isa, rng, op):
    # 4 MiB of y: large enough for non-temporal stores of y (2 MiB per thread at two threads).
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
        np.testing.assert_array_equal(y, fastln.layer_norm(xv + rv))


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
    from fastln import _add_norm, _core

    dt = _half(dtype) if dtype in ("float16", "bfloat16") else np.dtype(dtype)
    pdt = F32 if dt.itemsize == 2 else dt
    x, r = _data(rng, (5, 3, 37), dt), _data(rng, (5, 3, 37), dt)
    w, b = _data(rng, 37, pdt, c=1.0), _data(rng, 37, pdt)
    if op == "rms_norm":
        b = None
    fmt = _add_norm.storage_format(dt)
    want_y, want_h, *_ = _norm(op, x, w, b, eps=1e-5, residual=r, return_stats=True)
    for out_to, h_to in [(None, None), ("new", "new"), ("x", "r"), ("r", "x"), ("new", "x")]:
        xc, rc = x.copy(), r.copy()
        pick = {None: None, "new": None, "x": xc, "r": rc}
        out = np.empty_like(x) if out_to == "new" else pick[out_to]
        hout = np.empty_like(x) if h_to == "new" else pick[h_to]
        got = _core.add_norm_fast(xc, rc, w, b, 1e-5, out, hout, -1, False, fmt, op == "rms_norm")
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
    y = _core.add_norm_fast(x, None, w, b, 1e-5, None, None, -1, False, fmt, op == "rms_norm")
    want = _norm(op, x, w, b, eps=1e-5, return_stats=True)[0]
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))


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
    N = _core.NATIVE

    def fast(x=x, r=r, w=None, b=None, eps=1e-5, out=None, hout=None, axis=-1, stats=False,
             fmt=N, rms=False):
        return _core.add_norm_fast(x, r, w, b, eps, out, hout, axis, stats, fmt, rms)

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
        fast(x=x.astype(np.float16), r=r.astype(np.float16)),  # 2-byte x, format NATIVE
        fast(fmt=_core.FLOAT16),  # 4-byte x called float16
        fast(x=x.astype(np.float16), r=r.astype(np.float16), w=np.ones(16, np.float16),
             fmt=_core.FLOAT16),  # 16-bit x takes float32 parameters here
        fast(x=x.view(_Sub), r=r),  # a subclass
    ]
    assert all(d is None for d in declined)
    # ... and the public functions still give the right answer for those calls.
    y, h = fastln.layer_norm(buf[:4], residual=buf[1:], residual_out=buf[1:])
    assert np.isfinite(y).all()


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
    # the float32 routine's result rounded once, NaN payloads kept.
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


def test_half_errors():
    x = np.zeros((4, 8), np.float16)
    with pytest.raises(TypeError):
        fastln.layer_norm(x, out=np.zeros((4, 8), np.float32))
    with pytest.raises(TypeError):
        fastln.layer_norm(x, residual=np.zeros((4, 8), np.float32))
    with pytest.raises(TypeError, match="float16"):
        fastln.layer_norm(x.astype(np.int16), residual=x)


@pytest.mark.parametrize("name", HALF)
def test_half_bitwise_identical_across_thread_counts(rng, name):
    dt = _half(name)
    x, r = _data(rng, (96, 1024), dt), _data(rng, (96, 1024), dt)
    fastln.set_num_threads(1)
    try:
        y1, h1 = fastln.layer_norm(x, residual=r)
        fastln.set_num_threads(2)
        y2, h2 = fastln.layer_norm(x, residual=r)
    finally:
        fastln.set_num_threads(0)
    np.testing.assert_array_equal(_bits(y1), _bits(y2))
    np.testing.assert_array_equal(_bits(h1), _bits(h2))


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


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", HALF)
def test_half_backward(isa, rng, op, name):
    # 16-bit dy and x: the float32 backward of the widened values, dx rounded once to the dtype,
    # dweight and dbias float32.
    dt = _half(name)
    x, dy = _data(rng, (7, 65), dt), _data(rng, (7, 65), dt)
    w = _data(rng, 65, F32)
    x32, dy32 = x.astype(F32), dy.astype(F32)
    if op == "layer_norm":
        _, mean, rstd = fastln.layer_norm(x, w, return_stats=True)
        dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w.astype(dt))
        ex, ew, eb = fastln.layer_norm_backward(dy32, x32, mean, rstd, w.astype(dt).astype(F32))
        assert db.dtype == F32
        np.testing.assert_array_equal(db, eb)
    else:
        _, rstd = fastln.rms_norm(x, w, return_stats=True)
        dx, dw = fastln.rms_norm_backward(dy, x, rstd, w)
        ex, ew = fastln.rms_norm_backward(dy32, x32, rstd, w)
    assert dx.dtype == dt and dw.dtype == F32
    np.testing.assert_array_equal(_bits(dx), _bits(ex.astype(dt)))
    np.testing.assert_array_equal(dw, ew)
    with pytest.raises(TypeError, match="dy has dtype"):
        fastln.rms_norm_backward(dy32, x, rstd, w)


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
