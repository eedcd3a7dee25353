"""Inference-time layer norms: 16-bit storage against float32, and the fused residual add.

    python -m pytest bench/test_bench_inference.py --benchmark-columns=min,median --benchmark-sort=name

Each benchmark records the bytes it must move (read x [and residual], write y [and h]) in
extra_info["bytes"]; GB/s = bytes / time. The floor is a streaming pass over the same bytes.
"""

import numpy as np
import pytest

import fastln

ROWS, COLS = 2048, 1024  # 8 MiB of float32: beyond L2, like a batch of activations
SMALL = (128, 768)  # 384 KiB of float32: in L2, where the call's own overhead shows


def _dtype(name):
    if name == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(name)


def _x(dtype, seed=0, shape=(ROWS, COLS)):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_layer_norm_storage(benchmark, name):
    dt = _dtype(name)
    x = _x(dt)
    w = np.ones(COLS, np.float32)
    b = np.zeros(COLS, np.float32)
    y = np.empty_like(x)
    benchmark.extra_info["bytes"] = 2 * x.nbytes
    benchmark.extra_info["elements"] = x.size
    benchmark(fastln.layer_norm, x, w, b, out=y)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_rms_norm_storage(benchmark, name):
    dt = _dtype(name)
    x = _x(dt)
    w = np.ones(COLS, np.float32)
    y = np.empty_like(x)
    benchmark.extra_info["bytes"] = 2 * x.nbytes
    benchmark.extra_info["elements"] = x.size
    benchmark(fastln.rms_norm, x, w, out=y)


@pytest.mark.parametrize("name", ["float32", "float16"])
def test_floor_streaming_copy(benchmark, name):
    # A copy, not np.multiply: NumPy's float16 arithmetic is scalar code, far below the floor.
    x = _x(np.dtype(name))
    y = np.empty_like(x)
    benchmark.extra_info["bytes"] = 2 * x.nbytes
    benchmark(np.copyto, y, x)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_residual_fused(benchmark, name):
    dt = _dtype(name)
    x, r = _x(dt), _x(dt, 1)
    y, h = np.empty_like(x), np.empty_like(x)
    benchmark.extra_info["bytes"] = 4 * x.nbytes
    benchmark(fastln.layer_norm, x, residual=r, out=y, residual_out=h)


@pytest.mark.parametrize("name", ["float32", "float16"])
def test_residual_unfused(benchmark, name):
    dt = _dtype(name)
    x, r = _x(dt), _x(dt, 1)
    y, h = np.empty_like(x), np.empty_like(x)

    def unfused():
        np.add(x, r, out=h)
        return fastln.layer_norm(h, out=y)

    benchmark.extra_info["bytes"] = 4 * x.nbytes
    benchmark(unfused)


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_rms_residual_fused(benchmark, name):
    # The pre-norm block of LLaMA-style models: y = rms_norm(x + stream), stream updated in place.
    dt = _dtype(name)
    x, r = _x(dt), _x(dt, 1)
    w = np.ones(COLS, np.float32)
    y = np.empty_like(x)
    benchmark.extra_info["bytes"] = 4 * x.nbytes
    benchmark(fastln.rms_norm, x, w, residual=r, out=y, residual_out=r)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "numpy_add"])
def test_residual_small_batch(benchmark, fused):
    # In L2 the fused call saves the add's pass and its Python call; checked in C, not in Python.
    x, r = _x(np.float32, shape=SMALL), _x(np.float32, 1, shape=SMALL)
    w, b = np.ones(SMALL[1], np.float32), np.zeros(SMALL[1], np.float32)
    y, h = np.empty_like(x), np.empty_like(x)

    def unfused():
        np.add(x, r, out=h)
        return fastln.layer_norm(h, w, b, out=y)

    benchmark.extra_info["bytes"] = 4 * x.nbytes
    if fused:
        benchmark(fastln.layer_norm, x, w, b, residual=r, out=y, residual_out=h)
    else:
        benchmark(unfused)
