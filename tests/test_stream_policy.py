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
