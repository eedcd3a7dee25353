"""layer_norm_backward and rms_norm_backward, and the modules' forward/backward, on every usable ISA:
against the float64 reference, torch autograd, finite differences, and across thread counts."""

import os
import subprocess
import sys

import numpy as np
import pytest

import fastln
from fastln import _reference as ref

try:
    from numpy.exceptions import AxisError
except ImportError:  # numpy < 1.25
    from numpy import AxisError

TAILS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 768, 1000, 4097]
# Normwise: max |a - b| <= tol * max |b| (see close()).
REF_TOL = {np.float32: 1e-5, np.float64: 1e-12}
TORCH_TOL = {np.float32: 1e-4, np.float64: 1e-10}


def close(a, b, tol, scale=0.0):
    """max |a - b| <= tol * max(max |b|, scale); scale covers results that cancel to ~0."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b), initial=0.0)), scale, 1e-300)
    err = float(np.max(np.abs(a - b), initial=0.0))
    assert err <= tol * scale, f"max error {err:.3g} > {tol:.1g} * {scale:.3g}"


def dx_scale(dy, rstd, weight):
    """Size of the terms of dx, rstd * dy * weight: dx cancels to ~0 where a row has one value."""
    g = np.abs(dy.astype(np.float64)) * (1.0 if weight is None else np.abs(weight))
    return float(np.max(g * np.asarray(rstd, np.float64)[..., None], initial=0.0))


def ln_case(rng, shape, dtype, offset=0.0, axis=-1):
    x = (offset + rng.standard_normal(shape)).astype(dtype)
    norm_shape = x.shape[axis % x.ndim:]
    w = (1 + 0.5 * rng.standard_normal(norm_shape)).astype(dtype)
    b = rng.standard_normal(norm_shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return x, w, b, dy


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", TAILS)
def test_layer_norm_backward_matches_reference(isa, rng, dtype, n):
    # 70 rows: more than one block of dweight/dbias partials, and a partial group of rows.
    rows = 70 if n <= 1000 else 5
    x, w, b, dy = ln_case(rng, (rows, n), dtype)
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    for weight in (w, None):
        dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, weight)
        dx_r, dw_r, db_r = ref.layer_norm_backward(dy, x, mean, rstd, weight)
        assert dx.dtype == dtype and dx.shape == x.shape
        close(dx, dx_r, REF_TOL[dtype], dx_scale(dy, rstd, weight))
        if weight is None:
            assert dw is None and db is None
        else:
            assert dw.dtype == dtype and db.dtype == dtype
            close(dw, dw_r, REF_TOL[dtype])
            close(db, db_r, REF_TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", TAILS)
def test_rms_norm_backward_matches_reference(isa, rng, dtype, n):
    rows = 70 if n <= 1000 else 5
    x, w, _, dy = ln_case(rng, (rows, n), dtype)
    _, rstd = fastln.rms_norm(x, w, return_stats=True)
    for weight in (w, None):
        dx, dw = fastln.rms_norm_backward(dy, x, rstd, weight)
        dx_r, dw_r = ref.rms_norm_backward(dy, x, rstd, weight)
        close(dx, dx_r, REF_TOL[dtype], dx_scale(dy, rstd, weight))
        if weight is None:
            assert dw is None
        else:
            close(dw, dw_r, REF_TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,offset", [((6, 33), 0.0), ((70, 768), 0.0), ((3, 1000), 1e3)])
def test_matches_torch_autograd(isa, rng, dtype, shape, offset):
    torch = pytest.importorskip("torch")
    x, w, b, dy = ln_case(rng, shape, dtype, offset)
    n = shape[-1]
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.nn.functional.layer_norm(xt, (n,), wt, bt, 1e-5).backward(torch.from_numpy(dy))
    _, mean, rstd = fastln.layer_norm(x, w, b, eps=1e-5, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    tol = TORCH_TOL[dtype]
    close(dx, xt.grad.numpy(), tol)
    close(dw, wt.grad.numpy(), tol)
    close(db, bt.grad.numpy(), tol)

    xt, wt = (torch.tensor(a, requires_grad=True) for a in (x, w))
    torch.nn.functional.rms_norm(xt, (n,), wt, eps=1e-6).backward(torch.from_numpy(dy))
    _, rstd = fastln.rms_norm(x, w, eps=1e-6, return_stats=True)
    dx, dw = fastln.rms_norm_backward(dy, x, rstd, w)
    close(dx, xt.grad.numpy(), tol)
    close(dw, wt.grad.numpy(), tol)


def test_finite_differences(isa, rng):
    # L = sum(c * f(x)) with f the forward op in float64; central differences of L against the
    # backward pass, for every input and parameter.
    h = 1e-6
    x = rng.standard_normal((3, 7))
    w = rng.standard_normal(7)
    b = rng.standard_normal(7)
    c = rng.standard_normal((3, 7))

    def numeric(loss, a):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + h
            up = loss()
            a[i] = old - h
            down = loss()
            a[i] = old
            g[i] = (up - down) / (2 * h)
        return g

    def ln_loss():
        return float(np.sum(c * fastln.layer_norm(x, w, b, eps=1e-5)))

    _, mean, rstd = fastln.layer_norm(x, w, b, eps=1e-5, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(c, x, mean, rstd, w)
    for analytic, wrt in ((dx, x), (dw, w), (db, b)):
        np.testing.assert_allclose(analytic, numeric(ln_loss, wrt), rtol=1e-6, atol=1e-8)

    def rms_loss():
        return float(np.sum(c * fastln.rms_norm(x, w, eps=1e-6)))

    _, rstd = fastln.rms_norm(x, w, eps=1e-6, return_stats=True)
    dx, dw = fastln.rms_norm_backward(c, x, rstd, w)
    for analytic, wrt in ((dx, x), (dw, w)):
        np.testing.assert_allclose(analytic, numeric(rms_loss, wrt), rtol=1e-6, atol=1e-8)


def test_axes_strides_and_keepdim_stats(isa, rng):
    x, w, b, dy = ln_case(rng, (4, 5, 6), np.float64, axis=1)
    _, mean, rstd = fastln.layer_norm(x, w, b, axis=1, return_stats=True)
    expect = ref.layer_norm_backward(dy, x, mean, rstd, w, axis=1)
    for args in [
        (dy, x, mean, rstd),
        (np.asfortranarray(dy), np.asfortranarray(x), mean, rstd),  # copies
        (dy, x, mean.reshape(4, 1, 1), rstd.reshape(4, 1, 1)),  # torch's keepdim statistics
        (dy, x, mean.astype(np.float32), rstd.astype(np.float32)),  # cast to x's dtype
    ]:
        got = fastln.layer_norm_backward(*args, w, axis=-2)
        tol = 1e-6 if args[2].dtype == np.float32 else 1e-12
        for g, e in zip(got, expect):
            close(g, e, tol)
    # Row-strided views go to the kernels without a copy.
    big = rng.standard_normal((10, 50))
    xv, dyv = big[::2, 5:45], big[1::2, :40]
    _, m, r = fastln.layer_norm(xv, return_stats=True)
    close(fastln.layer_norm_backward(dyv, xv, m, r)[0], ref.layer_norm_backward(dyv, xv, m, r)[0], 1e-12)
    _, r = fastln.rms_norm(xv, return_stats=True)
    close(fastln.rms_norm_backward(dyv, xv, r)[0], ref.rms_norm_backward(dyv, xv, r)[0], 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_path_matches_general_path(isa, rng, dtype):
    # The common call (C-contiguous arrays, the last axis) runs its checks in C; a Fortran-ordered
    # copy of the same arrays takes the general path. Both reach the same kernel on the same
    # values, so the results must agree bit for bit, for every form of the statistics.
    from fastln import _core

    x, w, b, dy = ln_case(rng, (3, 5, 40), dtype)
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    assert _core.norm_backward_fast(dy, x, mean, rstd, w, -1, True) is not None
    slow = fastln.layer_norm_backward(np.asfortranarray(dy), np.asfortranarray(x), mean, rstd, w)
    for m, r in [(mean, rstd), (mean[..., None], rstd[..., None])]:
        for weight in (w, None):
            got = fastln.layer_norm_backward(dy, x, m, r, weight)
            assert got[0].tobytes() == fastln.layer_norm_backward(
                np.asfortranarray(dy), np.asfortranarray(x), m, r, weight)[0].tobytes()
            if weight is None:
                assert got[1] is None and got[2] is None
            else:
                for g, e in zip(got, slow):
                    assert g.dtype == dtype and g.shape == e.shape and g.tobytes() == e.tobytes()
    _, rstd = fastln.rms_norm(x, w, return_stats=True)
    got = fastln.rms_norm_backward(dy, x, rstd, w)
    assert len(got) == 2
    slow = fastln.rms_norm_backward(np.asfortranarray(dy), np.asfortranarray(x), rstd, w)
    for g, e in zip(got, slow):
        assert g.tobytes() == e.tobytes()
    # Calls the fast path leaves to the general one: mismatched dtypes, other axes, wrong shapes.
    assert _core.norm_backward_fast(dy, x.astype(np.float16), mean, rstd, w, -1, True) is None
    assert _core.norm_backward_fast(dy, x, mean, rstd, w, 1, True) is None
    assert _core.norm_backward_fast(dy, x, mean[:, :1], rstd, w, -1, True) is None
    assert _core.norm_backward_fast(dy, x, mean, rstd, w[:-1], -1, True) is None
    with pytest.raises(ValueError):
        fastln.layer_norm_backward(dy, x, mean[:, :1], rstd, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 33, 768])
def test_mean_near_and_far_from_zero(isa, rng, dtype, n):
    # dx skips the subtraction of mean for rows with |mean| <= 2 std and subtracts it for the
    # others: rows on both sides of that line, and far out, against the float64 reference.
    x = rng.standard_normal((8, n))
    x = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
    x = (x + np.array([0.0, 1.9, -1.99, 2.01, -2.2, 30.0, -1e3, 1e4])[:, None]).astype(dtype)
    w = (1 + 0.5 * rng.standard_normal(n)).astype(dtype)
    dy = rng.standard_normal((8, n)).astype(dtype)
    _, mean, rstd = fastln.layer_norm(x, w, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    dx_r, dw_r, db_r = ref.layer_norm_backward(dy, x, mean, rstd, w)
    for r in range(8):
        close(dx[r], dx_r[r], REF_TOL[dtype], dx_scale(dy[r], rstd[r], w))
    close(dw, dw_r, REF_TOL[dtype])
    close(db, db_r, REF_TOL[dtype])


def test_dx_may_overwrite_dy_or_x(isa, rng):
    # The C API allows dx to be dy or x (same leading dimension); the kernels read each element
    # before they write it.
    from fastln import _core

    x, w, _, dy = ln_case(rng, (9, 37), np.float32)
    _, mean, rstd = fastln.layer_norm(x, w, return_stats=True)
    expect = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    for target in ("dy", "x"):
        a = {"dy": dy.copy(), "x": x.copy()}
        dw, db = np.empty(37, np.float32), np.empty(37, np.float32)
        _core.norm_backward_2d(a["dy"], a["x"], mean, rstd, w, a[target], dw, db)
        for got, e in zip((a[target], dw, db), expect):
            assert got.tobytes() == e.tobytes()


def test_large_offset_float32(isa, rng):
    x, w, b, dy = ln_case(rng, (8, 300), np.float32, offset=1e4)
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    for g, e in zip((dx, dw, db), ref.layer_norm_backward(dy, x, mean, rstd, w)):
        close(g, e, 1e-4)


# Rows far from zero relative to their spread: the mean that the forward pass returns is rounded
# to x's dtype by up to half an ulp of the offset (0.06 standard deviations at float64 1e15 +
# N(0,1), 0.5 at float32 1e4 + N(0,1e-3)), and layer_norm_backward recovers the rounding from x.
# Against the exact gradient. In the first group of four rows, row 1 is near zero and row 2 at 8
# standard deviations, where the rounding is left (each keeps its own arithmetic); row 4 is alone.
# A row's dx has the same bits in a call of its own (the recovery's sums do not depend on its
# group).
@pytest.mark.parametrize("n", [7, 33, 768])
@pytest.mark.parametrize("dtype,c,s,tol", [
    (np.float64, 1e6, 1.0, 1e-13), (np.float64, 1e8, 1e-3, 1e-13),
    (np.float64, -1e12, 1.0, 1e-13), (np.float64, 1e15, 1.0, 1e-13),
    (np.float32, 1e4, 1e-3, 1e-5), (np.float32, -1e6, 1.0, 1e-5)])
def test_large_offset_against_exact_gradient(isa, rng, dtype, c, s, tol, n):
    x = c + s * rng.standard_normal((5, n))
    x[1] = s * rng.standard_normal(n)
    x[2] = s * (8.0 + rng.standard_normal(n))
    x = x.astype(dtype)
    w = (1 + 0.5 * rng.standard_normal(n)).astype(dtype)
    dy = rng.standard_normal((5, n)).astype(dtype)
    _, mean, rstd = fastln.layer_norm(x, w, eps=1e-12, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    dx_e, dw_e, db_e = ref.exact_layer_norm_backward(dy, x, w, eps=1e-12)
    for r in range(5):
        close(dx[r], dx_e[r], tol, dx_scale(dy[r], rstd[r], w))
    close(dw, dw_e, tol)
    close(db, db_e, tol)
    # The float64 reference recovers the rounding too.
    for g, e in zip((dx, dw), ref.layer_norm_backward(dy, x, mean, rstd, w)):
        close(g, e, tol, dx_scale(dy, rstd, w) if g is dx else 0.0)
    for r in (0, 2, 4):
        one = fastln.layer_norm_backward(dy[r:r + 1], x[r:r + 1], mean[r:r + 1], rstd[r:r + 1], w)
        assert one[0].tobytes() == dx[r:r + 1].tobytes()


# Rows whose spread is far from 1, each row scaled by a power of two (exact), so that xhat, dweight
# and dbias are those of the unscaled rows and dx is theirs divided by the scale. The usual form's
# rstd^3 overflowed or underflowed there: float64 std 2^365 (1e110) gave dx 6% off, 2^-365 NaN;
# float32 2^83 (1e25) 6% off, 2^-73 Inf, and 2^120 (1e36) with dy ~ 100 an Inf dweight. Scaled
# rows sit among plain ones, in a group of four and alone, so both kinds of group meet them.
@pytest.mark.parametrize("dtype,ks", [(np.float64, (365, -365, 1000)),
                                      (np.float32, (83, -73, 120, 66))])
@pytest.mark.parametrize("n", [5, 64, 300])
@pytest.mark.parametrize("rms", [False, True])
def test_rows_of_extreme_spread(isa, rng, dtype, ks, n, rms):
    scale = np.ones(4 + 2 * len(ks))
    scale[1] = 2.0 ** ks[0]
    scale[4:4 + len(ks)] = 2.0 ** np.array(ks, np.float64)
    z = rng.standard_normal((len(scale), n)) + 0.5
    x = (z * scale[:, None]).astype(dtype)
    w = (1 + 0.5 * rng.standard_normal(n)).astype(dtype)
    dy = (100 * rng.standard_normal(x.shape)).astype(dtype)
    zf, dyf, wf = z.astype(dtype).astype(np.float64), dy.astype(np.float64), w.astype(np.float64)
    if rms:
        _, r = fastln.rms_norm(x, w, eps=0.0, return_stats=True)
        got = fastln.rms_norm_backward(dy, x, r, w)
        _, re = fastln.rms_norm(zf, wf, eps=0.0, return_stats=True)
        want = ref.rms_norm_backward(dyf, zf, re, wf)
    else:
        _, m, r = fastln.layer_norm(x, w, eps=0.0, return_stats=True)
        got = fastln.layer_norm_backward(dy, x, m, r, w)
        _, me, re = fastln.layer_norm(zf, wf, eps=0.0, return_stats=True)
        want = ref.layer_norm_backward(dyf, zf, me, re, wf)
    tol = REF_TOL[dtype]
    dx = got[0].astype(np.float64) * scale[:, None]
    for i in range(len(scale)):
        close(dx[i], want[0][i], tol, dx_scale(dyf[i], re[i], wf))
    for g, e in zip(got[1:], want[1:]):
        close(g, e, tol)
    # A call with such a row takes its rows one at a time; each row's dx has its bits of a call of
    # its own (where a plain row goes in the usual groups).
    for i in range(len(scale)):
        s = slice(i, i + 1)
        one = (fastln.rms_norm_backward(dy[s], x[s], r[s], w) if rms else
               fastln.layer_norm_backward(dy[s], x[s], m[s], r[s], w))
        assert one[0].tobytes() == got[0][s].tobytes()
    x = np.zeros((0, 8), np.float32)
    s = np.zeros(0, np.float32)
    dx, dw, db = fastln.layer_norm_backward(x, x, s, s, np.ones(8, np.float32))
    assert dx.shape == (0, 8) and (dw == 0).all() and (db == 0).all()
    dx, dw = fastln.rms_norm_backward(x, x, s, np.ones(8, np.float32))
    assert dx.shape == (0, 8) and (dw == 0).all()
    x, w, b, dy = ln_case(rng, (3, 20), np.float64)
    dy[1, 4] = np.nan
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
    assert np.isnan(dx[1]).all() and np.isfinite(dx[[0, 2]]).all()
    assert np.isnan(dw[4]) and np.isfinite(np.delete(dw, 4)).all()


_DETERMINISM = r"""
import hashlib, sys
import numpy as np, fastln
fastln.set_isa(sys.argv[1])
rng = np.random.default_rng(7)
out = []
for dt in (np.float32, np.float64, np.float16):
    # 2000 x 128: 32 blocks of partials, enough work for 7 threads. float16: 16-bit dy, x and dx,
    # float32 statistics and gradients.
    x = (3 + rng.standard_normal((2000, 128))).astype(dt)
    dy = rng.standard_normal(x.shape).astype(dt)
    w = rng.standard_normal(128).astype(dt)
    _, m, r = fastln.layer_norm(x, w, return_stats=True)
    out += fastln.layer_norm_backward(dy, x, m, r, w)
    _, r = fastln.rms_norm(x, w, return_stats=True)
    out += fastln.rms_norm_backward(dy, x, r, w)
print(hashlib.sha256(b"".join(a.tobytes() for a in out)).hexdigest())
"""


def test_bitwise_identical_across_thread_counts(isa):
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    digests = set()
    for n in ("1", "2", "7"):
        env = dict(os.environ, OMP_NUM_THREADS=n)
        r = subprocess.run([sys.executable, "-c", _DETERMINISM, isa], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1


def test_bitwise_identical_with_set_num_threads(isa, rng):
    x, w, b, dy = ln_case(rng, (1500, 160), np.float32)
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    results = []
    try:
        for n in (1, 2, 7):
            fastln.set_num_threads(n)
            results.append(fastln.layer_norm_backward(dy, x, mean, rstd, w))
    finally:
        fastln.set_num_threads(0)
    for other in results[1:]:
        for a, b_ in zip(results[0], other):
            assert a.tobytes() == b_.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_module_matches_torch(isa, rng, dtype):
    torch = pytest.importorskip("torch")
    ln = fastln.LayerNorm((4, 5), dtype=dtype)
    ln.weight[...] = 1 + rng.standard_normal((4, 5))
    ln.bias[...] = rng.standard_normal((4, 5))
    tl = torch.nn.LayerNorm((4, 5), dtype=getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(ln.weight))
        tl.bias.copy_(torch.from_numpy(ln.bias))
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    xt = torch.tensor(x, requires_grad=True)
    yt = tl(xt)
    yt.backward(torch.from_numpy(dy))
    tol = TORCH_TOL[dtype]
    close(ln.forward(x), yt.detach().numpy(), tol)
    close(ln.backward(dy), xt.grad.numpy(), tol)
    close(ln.grad_weight, tl.weight.grad.numpy(), tol)
    close(ln.grad_bias, tl.bias.grad.numpy(), tol)
    close(ln(x), yt.detach().numpy(), tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm_module_matches_torch(isa, rng, dtype):
    torch = pytest.importorskip("torch")
    norm = fastln.RMSNorm(12, eps=1e-6, dtype=dtype)
    norm.weight[...] = 1 + rng.standard_normal(12)
    tn = torch.nn.RMSNorm(12, eps=1e-6, dtype=getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        tn.weight.copy_(torch.from_numpy(norm.weight))
    x = rng.standard_normal((2, 3, 12)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    xt = torch.tensor(x, requires_grad=True)
    tn(xt).backward(torch.from_numpy(dy))
    tol = TORCH_TOL[dtype]
    norm.forward(x)
    close(norm.backward(dy), xt.grad.numpy(), tol)
    close(norm.grad_weight, tn.weight.grad.numpy(), tol)
    assert norm.grad_bias is None


def test_module_state(rng):
    ln = fastln.LayerNorm(6, elementwise_affine=False, dtype=np.float64)
    with pytest.raises(RuntimeError, match="before forward"):
        ln.backward(np.ones((2, 6)))
    x = rng.standard_normal((2, 6))
    ln(x)
    assert ln._saved is None  # calling the module keeps nothing
    # A call after a forward drops its state: backward then raises rather than returning the
    # gradient at the forward's x.
    ln.forward(x)
    ln(x + 1.0)
    with pytest.raises(RuntimeError, match="module.forward"):
        ln.backward(np.ones((2, 6)))
    ln.forward(x)
    dx = ln.backward(np.ones((2, 6)))
    assert ln.grad_weight is None and ln.grad_bias is None
    assert np.abs(dx).max() < 1e-12  # a constant dy has no component along x
    ln = fastln.LayerNorm(6, bias=False, dtype=np.float64)
    ln.forward(x)
    ln.backward(x)
    assert ln.grad_weight.shape == (6,) and ln.grad_bias is None
    ln.zero_grad()
    assert ln.grad_weight is None


@pytest.mark.parametrize("cls", [fastln.LayerNorm, fastln.RMSNorm])
def test_module_refuses_a_bool_shape(cls):
    for shape in (True, (4, True), np.bool_(True), np.array(True)):
        with pytest.raises(TypeError, match="bool"):
            cls(shape)
    assert cls(np.array(8)).normalized_shape == (8,)


@pytest.mark.parametrize("cls", [fastln.LayerNorm, fastln.RMSNorm])
def test_module_dtype_none_is_float32(cls):
    # torch's dtype=None is its default dtype, float32; np.dtype(None) alone is float64.
    m = cls(8, dtype=None)
    assert m.dtype == np.float32 and m.weight.dtype == np.float32
    assert cls(8, dtype="float64").weight.dtype == np.float64


@pytest.mark.parametrize("param_dtype, x_dtype", [
    (np.float32, np.float64), (np.float64, np.float32), (np.float32, np.float16),
])
def test_module_gradients_take_the_parameters_dtype(rng, param_dtype, x_dtype):
    # As torch's .grad: an optimizer's in-place update then keeps the parameters' dtype.
    ln = fastln.LayerNorm(8, dtype=param_dtype)
    x = rng.standard_normal((3, 8)).astype(x_dtype)
    ln.forward(x)
    dy = rng.standard_normal((3, 8)).astype(x_dtype)
    ln.backward(dy)
    assert ln.grad_weight.dtype == param_dtype and ln.grad_bias.dtype == param_dtype
    y, mean, rstd = fastln.layer_norm(x, return_stats=True)
    _, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, np.ones(8, param_dtype))
    np.testing.assert_allclose(ln.grad_weight, dw.astype(param_dtype), rtol=1e-6)
    np.testing.assert_allclose(ln.grad_bias, db.astype(param_dtype), rtol=1e-6)


def test_bfloat16_statistics_are_taken_as_float16_ones_are(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    dy = rng.standard_normal((4, 16)).astype(np.float32)
    _, mean, rstd = fastln.layer_norm(x, return_stats=True)
    for half in (np.float16, ml_dtypes.bfloat16):
        m, r = mean.astype(half), rstd.astype(half)
        got = fastln.layer_norm_backward(dy, x, m, r)[0]
        want = fastln.layer_norm_backward(dy, x, m.astype(np.float32), r.astype(np.float32))[0]
        np.testing.assert_array_equal(got, want)  # widened exactly
        got = fastln.rms_norm_backward(dy, x, r)[0]
        np.testing.assert_array_equal(got, fastln.rms_norm_backward(dy, x, r.astype(np.float32))[0])


def test_bad_input():
    x = np.ones((2, 4), np.float32)
    s = np.ones(2, np.float32)
    with pytest.raises(TypeError, match="dy"):
        fastln.layer_norm_backward(x.astype(np.float64), x, s, s)
    with pytest.raises(ValueError, match="dy"):
        fastln.layer_norm_backward(np.ones((2, 5), np.float32), x, s, s)
    with pytest.raises(ValueError, match="mean"):
        fastln.layer_norm_backward(x, x, np.ones(3, np.float32), s)
    with pytest.raises(TypeError, match="mean is required"):
        fastln.layer_norm_backward(x, x, None, s)
    with pytest.raises(TypeError, match="rstd is required"):
        fastln.rms_norm_backward(x, x, None)
    with pytest.raises(ValueError, match="rstd"):
        fastln.rms_norm_backward(x, x, np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="rstd"):
        fastln.rms_norm_backward(x, x, np.ones(2, np.int64))
    with pytest.raises(TypeError):
        fastln.layer_norm_backward(x.astype(np.int32), x.astype(np.int32), s, s)
    with pytest.raises(ValueError, match="weight"):
        fastln.layer_norm_backward(x, x, s, s, np.ones(3))
    with pytest.raises(AxisError):
        fastln.rms_norm_backward(x, x, s, axis=3)
    with pytest.raises(ValueError, match="zero-size"):
        fastln.layer_norm_backward(np.ones((2, 0)), np.ones((2, 0)), s, s)
