"""Shared fixtures. Every numerical test takes `isa`, so it runs once per ISA usable here."""

import numpy as np
import pytest

import fastln

USABLE_ISAS = fastln.runtime_info()["isas"]


@pytest.fixture(params=USABLE_ISAS)
def isa(request):
    """Force one ISA for the test, check that it is really active, and restore the automatic one."""
    fastln.set_isa(request.param)
    assert fastln.get_isa() == request.param
    yield request.param
    fastln.set_isa(None)


@pytest.fixture
def streaming():
    """Pin the output sizes from which y streams to 2 MiB (float32, float64) and 32 MiB (16-bit),
    the sizes the streamed-output tests are built around, whatever FASTLN_STREAM_MIB says."""
    fastln.set_stream_bytes(2 << 20, 32 << 20)
    yield
    fastln.set_stream_bytes(None, None)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def _placed(a, shift):
    """A copy of `a` that starts `shift` elements past a 64-byte boundary."""
    item = a.dtype.itemsize
    buf = np.empty(a.size + 128 // item, a.dtype)
    start = (-buf.ctypes.data % 64) // item + shift
    out = buf[start : start + a.size].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == shift * item
    return out


@pytest.fixture
def placed():
    """placed(a, shift): a copy of `a` that starts `shift` elements past a 64-byte boundary."""
    return _placed


def pytest_report_header(config):
    info = fastln.runtime_info()
    return f"fastln {info['version']}: isa={info['isa']} usable={info['isas']} openmp={info['openmp']} threads={info['num_threads']}"
