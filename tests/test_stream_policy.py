"""When y is written with streaming stores: the default, the setter,
FASTLN_STREAM_MIB, and that the choice never changes a value."""

import os
import subprocess
import sys

import numpy as np
import pytest

import fastln

MIB = 1 << 20


@pytest.fixture
def restore():
    yield
    fastln.set_stream_bytes(None, None)


def test_default(restore):
    fastln.set_stream_bytes(None, None)
    nb, nb16 = fastln.get_stream_bytes()
    if not os.environ.get("FASTLN_STREAM_MIB"):
        assert (nb, nb16) == (2 * MIB, 32 * MIB)
    assert fastln.runtime_info()["stream_bytes"] == (nb, nb16)


def test_set_get_and_restore(restore):
    default = fastln.get_stream_bytes()
    fastln.set_stream_bytes(5 * MIB, 7 * MIB)
    assert fastln.get_stream_bytes() == (5 * MIB, 7 * MIB)
    fastln.set_stream_bytes(0, None)
    assert fastln.get_stream_bytes() == (0, default[1])
    fastln.set_stream_bytes()
    assert fastln.get_stream_bytes() == default


def test_bad_values(restore):
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        fastln.set_stream_bytes(-1)
    with pytest.raises(ValueError, match="nbytes16 must be >= 0"):
        fastln.set_stream_bytes(None, -5)
    with pytest.raises(TypeError):
        fastln.set_stream_bytes(1.5)
    with pytest.raises(TypeError):
        fastln.set_stream_bytes("2")


@pytest.mark.parametrize("value,want", [("5", 5 * MIB), ("0", 0), ("-1", 2**63 - 1)])
def test_environment_variable(value, want):
    env = dict(os.environ, FASTLN_STREAM_MIB=value)
    out = subprocess.run(
        [sys.executable, "-c", "import fastln; print(*fastln.get_stream_bytes())"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert [int(v) for v in out] == [want, want]


@pytest.mark.parametrize("value", ["abc", "1e3", "5 MiB", "2.5"])
def test_environment_variable_that_is_not_a_count(value):
    # The C library, which reads it, cannot raise, and took such a value as unset.
    env = dict(os.environ, FASTLN_STREAM_MIB=value)
    r = subprocess.run([sys.executable, "-c", "import fastln"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "FASTLN_STREAM_MIB" in r.stderr


def _dtypes():
    out = [np.float32, np.float64, np.float16]
    try:
        import ml_dtypes

        out.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("dtype", _dtypes(), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(300, 64), (64, 768), (9, 2048), (5, 4099), (40, 1031)])
def test_streaming_never_changes_a_value(isa, restore, rng, dtype, shape):
    # Everything streams (0 bytes) against nothing (a size no output reaches), y on a line
    # boundary and 16 bytes past one, with the fused residual add too.
    dt = np.dtype(dtype)
    x = (0.5 + 2.0 * rng.standard_normal(shape)).astype(dt)
    x[1::4] += 100.0
    r = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal(shape[-1]).astype(np.float32 if dt.itemsize == 2 else dt)
    b = rng.standard_normal(shape[-1]).astype(w.dtype)
    n = x.size
    buf = np.empty(n + 64, dt)
    start = (-buf.ctypes.data % 64) // dt.itemsize
    results = []
    for nbytes in (2**62, 0):
        fastln.set_stream_bytes(nbytes, nbytes)
        for shift in (0, 16 // dt.itemsize):
            out = buf[start + shift : start + shift + n].reshape(shape)
            fastln.layer_norm(x, w, b, out=out)
            y, h = fastln.layer_norm(x, w, b, residual=r)
            results.append((out.copy().view(np.uint8), y.view(np.uint8), h.view(np.uint8)))
    for got in results[1:]:
        for a, e in zip(got, results[0]):
            np.testing.assert_array_equal(a, e)


# ---- the phased loop for rows from memory (FASTLN_PHASED_MIB, src/dispatch.cpp PhasedBytes) ----

def _phased_bytes(value):
    env = dict(os.environ, FASTLN_PHASED_MIB=value)
    out = subprocess.run(
        [sys.executable, "-c", "import fastln; print(fastln.runtime_info()['phased_bytes'])"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    return int(out)


@pytest.mark.parametrize("value,want", [("5", 5 * MIB), ("0", 0), ("-1", 2**63 - 1)])
def test_phased_environment_variable(value, want):
    assert _phased_bytes(value) == want


def test_phased_default():
    if os.environ.get("FASTLN_PHASED_MIB"):
        pytest.skip("FASTLN_PHASED_MIB is set")
    got = fastln.runtime_info()["phased_bytes"]
    assert got in (32 * MIB, 2**63 - 1)
    assert _phased_bytes("") == got  # empty is unset


@pytest.mark.parametrize("value", ["abc", "1e3", "32 MiB", "2.5"])
def test_phased_environment_variable_that_is_not_a_count(value):
    env = dict(os.environ, FASTLN_PHASED_MIB=value)
    r = subprocess.run([sys.executable, "-c", "import fastln"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "FASTLN_PHASED_MIB" in r.stderr and repr(value) in r.stderr


# Rows of 2 to 4 KiB take the phased loop, one thread only; the rest are there to show that the
# setting leaves them alone too. Run in a child process per setting (read once a process), on every
# usable ISA, the outputs saved as bytes.
_PHASED_CASES = r"""
import sys
import numpy as np
import fastln

fastln.set_num_threads(1)
out = {}
rng = np.random.default_rng(7)
shapes = {"float32": [(37, 512), (33, 700), (40, 1024), (9, 1023), (21, 256), (9, 1100)],
          "float64": [(37, 256), (33, 300), (40, 512), (9, 511), (9, 550)]}
for isa in fastln.runtime_info()["isas"]:
    fastln.set_isa(isa)
    for name, dims in shapes.items():
        dt = np.dtype(name)
        for n, d in dims:
            x = (0.5 + 2.0 * rng.standard_normal((n, d))).astype(dt)
            x[1::4] += 1e4      # far from zero: the statistics are summed again
            x[2] = 3.0          # a constant row (variance 0)
            x[3, 5] = np.nan
            x[5, 1] = np.inf
            x[6] = 0.0
            x[7] *= 1e-30       # tiny variance
            w = rng.standard_normal(d).astype(dt)
            b = rng.standard_normal(d).astype(dt)
            wide = np.zeros((n, d + 24), dt)
            wide[:, 3:3 + d] = x
            xs = wide[:, 3:3 + d]  # rows strided, not on a line
            # Contiguous rows 16 bytes past a 32-byte boundary, which AVX2 reads realigned where
            # each row starts there too (d a multiple of 8 floats or 4 doubles).
            raw = np.empty(n * d + 64, dt)
            at = (-raw.ctypes.data % 32 + 16) // dt.itemsize
            xp = raw[at:at + n * d].reshape(n, d)
            xp[...] = x
            buf = np.empty(n * d + 64, dt)
            start = (-buf.ctypes.data % 64) // dt.itemsize + 16 // dt.itemsize
            for stream in (2**62, 0):
                fastln.set_stream_bytes(stream, None)
                for tag, src in (("c", x), ("s", xs), ("p", xp)):
                    key = f"{isa} {name} {n}x{d} {stream} {tag}"
                    y = buf[start:start + n * d].reshape(n, d)
                    fastln.layer_norm(src, w, b, out=y)
                    out[key + " wb"] = y.view(np.uint8).copy()
                    y2, mean, rstd = fastln.layer_norm(src, w, None, return_stats=True)
                    out[key + " w"] = y2.view(np.uint8)
                    out[key + " mean"] = mean.view(np.uint8)
                    out[key + " rstd"] = rstd.view(np.uint8)
                    out[key + " none"] = fastln.layer_norm(src, None, b).view(np.uint8)
                    z = src.copy()
                    fastln.layer_norm(z, w, b, out=z)  # in place
                    out[key + " inplace"] = z.view(np.uint8)
            fastln.set_stream_bytes(None, None)
np.savez(sys.argv[1], **out)
"""


def test_phased_loop_never_changes_a_value(tmp_path):
    # 0: every one-thread call in rows of 2 to 4 KiB takes the phased loop; -1: none does. The two
    # must agree bit for bit, statistics included, on every ISA (test_phased_loop_is_accurate and
    # the layer norm's own tests check the values themselves).
    got = {}
    for value in ("0", "-1"):
        path = tmp_path / f"phased{value}.npz"
        env = dict(os.environ, FASTLN_PHASED_MIB=value)
        env.pop("FASTLN_ISA", None)
        r = subprocess.run([sys.executable, "-c", _PHASED_CASES, str(path)], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with np.load(path) as f:
            got[value] = {k: f[k] for k in f.files}
    assert got["0"].keys() == got["-1"].keys() and len(got["0"]) > 100
    for key, want in got["-1"].items():
        np.testing.assert_array_equal(got["0"][key], want, err_msg=key)


_PHASED_ACCURACY = r"""
import sys
import numpy as np
import fastln

fastln.set_num_threads(1)
rng = np.random.default_rng(11)
# Where long double is double (Windows, macOS on ARM), the reference rounds as float64 does.
f64_tol = 1e-14 if np.finfo(np.longdouble).nmant >= 63 else 1e-12
for isa in fastln.runtime_info()["isas"]:
    fastln.set_isa(isa)
    for dt, d in (("float32", 1024), ("float32", 768), ("float64", 512), ("float64", 300)):
        x = (1e3 + rng.standard_normal((64, d))).astype(dt)
        x[::3] -= 1e3  # rows near zero too
        w = rng.standard_normal(d).astype(dt)
        b = rng.standard_normal(d).astype(dt)
        y, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
        # In long double where NumPy has it (x86: 64-bit significands), so that the reference's
        # own rounding at the offset (about 1e-13 for float64) does not hide the loop's.
        xl = x.astype(np.longdouble)
        wmean = xl.mean(axis=1)
        dev = xl - wmean[:, None]
        wrstd = 1 / np.sqrt((dev * dev).mean(axis=1) + np.longdouble(1e-5))
        want = (dev * wrstd[:, None] * w + b).astype(np.float64)
        wmean, wrstd = wmean.astype(np.float64), wrstd.astype(np.float64)
        tol = 1e-6 if dt == "float32" else f64_tol
        scale = np.abs(w) + np.abs(b) + 1
        for got, ref, s in ((y, want, scale), (mean, wmean, np.abs(wmean) + 1), (rstd, wrstd, wrstd)):
            err = float(np.max(np.abs(got.astype(np.float64) - ref) / s))
            assert err < 4 * tol, (isa, dt, d, err)
print("ok")
"""


def test_phased_loop_is_accurate():
    # The phased loop's values against a long double reference, on every ISA, in a child process
    # that sends every one-thread call in rows of 2 to 4 KiB there (FASTLN_PHASED_MIB=0): rows at
    # an offset of 1e3 (summed again about their mean) and near zero, with the statistics.
    env = dict(os.environ, FASTLN_PHASED_MIB="0")
    env.pop("FASTLN_ISA", None)
    r = subprocess.run([sys.executable, "-c", _PHASED_ACCURACY], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
