"""pytest-benchmark suite for fastln.layer_norm: ``python -m pytest bench/``.

Each group (``--benchmark-group-by=group``, the default) is one case: dtype, N×D, threads and
mode, with one benchmark per implementation (fastln, the floor np.multiply(x, c), the float64
NumPy reference, torch, onnxruntime; see fastln/bench.py for what each runs).

The default run covers fastln.bench's --quick shapes, float32 and float64, 1 thread, out= given and
allocating: a few minutes. ``--bench-full`` (or FASTLN_BENCH_FULL=1) runs the whole grid
N in {1, 8, 128, 2048, 8192, 32768} × D in {64, 768, 1024, 4096, 16384}, both dtypes, 1 thread and
all threads; cases whose input is above 512 MiB are skipped. Collection creates no arrays and
imports neither torch nor onnxruntime, so it is quick either way.

Save and compare runs with pytest-benchmark's own options, e.g.
``--benchmark-json=out.json``, ``--benchmark-autosave`` and ``--benchmark-compare``.
"""

import os
from typing import NamedTuple

import numpy as np
import pytest

from fastln import bench


class Case(NamedTuple):
    n: int
    d: int
    dtype: str
    threads: int
    mode: str  # "out" or "alloc"

    @property
    def nbytes(self) -> int:
        return self.n * self.d * np.dtype(self.dtype).itemsize

    @property
    def name(self) -> str:
        return f"{self.dtype}-{self.n}x{self.d}-t{self.threads}-{self.mode}"


def pytest_addoption(parser):
    parser.addoption(
        "--bench-full",
        action="store_true",
        default=False,
        help="fastln: run the whole N×D grid, both dtypes, 1 and all threads (slow); "
        "also FASTLN_BENCH_FULL=1",
    )


def _full(config) -> bool:
    return config.getoption("--bench-full") or os.environ.get("FASTLN_BENCH_FULL", "") == "1"


def pytest_configure(config):
    # Short benchmarks unless asked otherwise: with many cases, pytest-benchmark's default of up to
    # 1 s per benchmark makes the full grid take an hour.
    args = config.invocation_params.args
    if hasattr(config.option, "benchmark_max_time") and not any(
        str(a).startswith("--benchmark-max-time") for a in args
    ):
        config.option.benchmark_max_time = 0.25


def cases(full: bool):
    if full:
        shapes = [(n, d) for n in bench.GRID_N for d in bench.GRID_D]
        dtypes = ("float32", "float64")
        threads = sorted({1, os.cpu_count() or 1})
    else:
        shapes = list(bench.QUICK_SHAPES)
        dtypes = ("float32", "float64")
        threads = (1,)
    return [
        Case(n, d, dt, t, mode)
        for dt in dtypes
        for t in threads
        for n, d in shapes
        for mode in ("out", "alloc")
    ]


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        params = []
        for c in cases(_full(metafunc.config)):
            marks = []
            if c.nbytes > bench.MAX_BYTES:
                marks.append(pytest.mark.skip(reason=f"input {c.nbytes >> 20} MiB > 512 MiB"))
            params.append(pytest.param(c, id=c.name, marks=marks))
        metafunc.parametrize("case", params)


_cache: dict = {}


@pytest.fixture
def arrays(case):
    """x, weight, bias for the case; the last shape's arrays are kept, no more."""
    key = (case.n, case.d, case.dtype)
    if key not in _cache:
        _cache.clear()
        _cache[key] = bench.inputs(case.n, case.d, np.dtype(case.dtype))
    return _cache[key]


def pytest_report_header(config):
    import fastln

    info = fastln.runtime_info()
    what = "full grid" if _full(config) else "default shapes (--bench-full for the grid)"
    return f"fastln bench: {what}; isa={info['isa']}; {bench.machine()}"
