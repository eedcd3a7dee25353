"""Forward pass of each implementation on each case; see conftest.py."""

import pytest

import fastln
from fastln import bench


@pytest.mark.parametrize("impl", bench.IMPLS)
def test_forward(benchmark, case, arrays, impl):
    for module in {"torch": ["torch"], "onnxruntime": ["onnx", "onnxruntime"]}.get(impl, []):
        pytest.importorskip(module)
    x, w, b = arrays
    benchmark.group = case.name
    benchmark.extra_info.update(case._asdict(), impl=impl, bytes=2 * case.nbytes)
    fn = bench.make_impl(impl, x, w, b, case.mode == "out", case.threads)
    fastln.set_num_threads(case.threads)
    # A setting that make_impl holds for a batch of calls (torch's inference mode) is held for the
    # whole benchmark, not entered around each timed call.
    batched = isinstance(fn, bench._Batched)
    if batched:
        fn.enter()
    try:
        benchmark(fn.fn if batched else fn)
    finally:
        if batched:
            fn.leave()
        fastln.set_num_threads(0)
