"""Benchmarks of the training ops, grouped per op and shape, side by side with torch and the floor.

    python -m pytest bench/test_bench_training.py --benchmark-group-by=group

Everything runs on one thread (fastln and torch). The floors: a backward pass must read x and dy
and write dx, like np.add(x, dy, out=dx); a forward pass must read x and write y, like
np.multiply(x, c, out=y).
"""

import numpy as np
import pytest

import fastln

torch = pytest.importorskip("torch")

SHAPES = [(8192, 128), (4096, 768), (1024, 4096), (128, 32768)]
IMPLS = ["fastln", "torch", "floor"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    fastln.set_num_threads(1)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    fastln.set_num_threads(0)


def _data(shape, dtype=np.float32):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(shape[-1]).astype(dtype)
    b = rng.standard_normal(shape[-1]).astype(dtype)
    return x, dy, w, b


def _shape_id(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_layer_norm_backward(benchmark, shape, impl):
    benchmark.group = f"layer_norm_backward f32 {_shape_id(shape)}"
    x, dy, w, b = _data(shape)
    _, mean, rstd = fastln.layer_norm(x, w, b, return_stats=True)
    n = shape[-1]
    if impl == "fastln":
        benchmark(fastln.layer_norm_backward, dy, x, mean, rstd, w)
    elif impl == "torch":
        args = [torch.from_numpy(a) for a in (dy, x)]
        m, r = (torch.from_numpy(a).reshape(-1, 1) for a in (mean, rstd))
        wt, bt = torch.from_numpy(w), torch.from_numpy(b)
        benchmark(torch.ops.aten.native_layer_norm_backward, *args, [n], m, r, wt, bt,
                  [True, True, True])
    else:
        dx = np.empty_like(x)
        benchmark(np.add, x, dy, out=dx)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_rms_norm_backward(benchmark, shape, impl):
    benchmark.group = f"rms_norm_backward f32 {_shape_id(shape)}"
    x, dy, w, _ = _data(shape)
    _, rstd = fastln.rms_norm(x, w, return_stats=True)
    n = shape[-1]
    if impl == "fastln":
        benchmark(fastln.rms_norm_backward, dy, x, rstd, w)
    elif impl == "torch":
        xt = torch.from_numpy(x).requires_grad_()
        wt = torch.from_numpy(w).requires_grad_()
        dyt = torch.from_numpy(dy)

        def run():
            y = torch.nn.functional.rms_norm(xt, (n,), wt, 1e-6)
            return torch.autograd.grad(y, (xt, wt), dyt)

        benchmark(run)  # includes torch's forward: its backward is autograd over the composite
    else:
        dx = np.empty_like(x)
        benchmark(np.add, x, dy, out=dx)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_rms_norm(benchmark, shape, impl):
    benchmark.group = f"rms_norm f32 {_shape_id(shape)}"
    x, _, w, _ = _data(shape)
    y = np.empty_like(x)
    if impl == "fastln":
        benchmark(fastln.rms_norm, x, w, 1e-6, out=y)
    elif impl == "torch":
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        benchmark(torch.nn.functional.rms_norm, xt, (shape[-1],), wt, 1e-6)
    else:
        benchmark(np.multiply, x, 2.0, out=y)
