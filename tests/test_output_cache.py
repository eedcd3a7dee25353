"""The output cache (src/binding/output_cache.h): large outputs reuse freed blocks, correctly."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastln
from fastln import _reference

BIG = (256, 1024)  # 1 MiB of float32: the smallest size the cache takes


@pytest.fixture
def cache():
    old = fastln.set_cache_limit(64 << 20)
    yield
    fastln.set_cache_limit(old)


def _ref(x):
    return _reference.layer_norm(x, None, None, 1e-5).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_recycled_block_gives_right_answer(isa, cache, rng, dtype):
    x1 = rng.standard_normal(BIG).astype(dtype)
    x2 = (rng.standard_normal(BIG) * 3 + 7).astype(dtype)
    y = fastln.layer_norm(x1)
    first = y.__array_interface__["data"][0]
    del y
    gc.collect()
    hits = fastln.cache_info()["hits"]
    y2 = fastln.layer_norm(x2)
    # The block y freed was handed to y2; the values are y2's, not stale ones.
    assert fastln.cache_info()["hits"] == hits + 1
    assert y2.__array_interface__["data"][0] == first
    assert y2.flags.owndata and y2.flags.c_contiguous
    np.testing.assert_allclose(y2, _ref(x2), atol=2e-5 if dtype == np.float32 else 1e-12)


def test_live_outputs_never_share_memory(isa, cache, rng):
    x = rng.standard_normal(BIG).astype(np.float32)
    ys = [fastln.layer_norm(x * (i + 1) + i) for i in range(4)]
    for i in range(4):
        for j in range(i):
            assert not np.shares_memory(ys[i], ys[j])
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y, _ref(x * (i + 1) + i), atol=2e-5)


def test_general_path_and_views_keep_the_block_alive(isa, cache, rng):
    x = rng.standard_normal((2, 128, 1024)).astype(np.float32)
    y = fastln.layer_norm(x, axis=1)  # not the fast path
    view = y[1]
    expect = view.copy()
    del y
    gc.collect()
    # The view still holds the array, so its block must not be reused.
    z = fastln.layer_norm(x * 2.0, axis=1)
    assert not np.shares_memory(z, view)
    np.testing.assert_array_equal(view, expect)


def test_resize_and_pickle_of_cached_output(cache, rng):
    x = rng.standard_normal(BIG).astype(np.float32)
    y = fastln.layer_norm(x)
    expect = y.copy()
    y.resize((BIG[0] * 2, BIG[1]), refcheck=False)  # NumPy reallocates through the handler
    np.testing.assert_array_equal(y[: BIG[0]], expect)
    assert (y[BIG[0]:] == 0).all()
    import pickle

    np.testing.assert_array_equal(pickle.loads(pickle.dumps(y)), y)


def test_limit_bounds_what_is_kept(rng):
    old = fastln.set_cache_limit(3 << 20)
    try:
        x = rng.standard_normal(BIG).astype(np.float32)
        ys = [fastln.layer_norm(x) for _ in range(6)]
        del ys
        gc.collect()
        info = fastln.cache_info()
        assert info["limit"] == 3 << 20
        assert 0 < info["bytes"] <= 3 << 20
        assert fastln.set_cache_limit(0) == 3 << 20
        assert fastln.cache_info()["bytes"] == 0
        # Off: outputs come from NumPy's own allocator and nothing is kept.
        y = fastln.layer_norm(x)
        del y
        gc.collect()
        assert fastln.cache_info()["bytes"] == 0
    finally:
        fastln.set_cache_limit(old)


def test_small_outputs_are_not_cached(cache, rng):
    x = rng.standard_normal((4, 1000)).astype(np.float32)
    before = fastln.cache_info()
    y = fastln.layer_norm(x)
    del y
    gc.collect()
    after = fastln.cache_info()
    assert (after["hits"], after["misses"], after["bytes"]) == (
        before["hits"], before["misses"], before["bytes"])


@pytest.mark.parametrize("bad", [-1, 1.5, "1"])
def test_bad_limit(bad):
    with pytest.raises((TypeError, ValueError)):
        fastln.set_cache_limit(bad)


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=e,
                          cwd=os.path.dirname(os.path.dirname(fastln.__file__)))


def test_env_limit():
    r = _run("import fastln; print(fastln.cache_info()['limit'])", FASTLN_CACHE_MB="8")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 8 << 20
    r = _run("import fastln", FASTLN_CACHE_MB="lots")
    assert r.returncode != 0 and "FASTLN_CACHE_MB" in r.stderr
    # empty, as container and CI configurations leave variables, is unset (as FASTLN_ISA's is)
    default = _run("import fastln; print(fastln.cache_info()['limit'])")
    for empty in ("", " "):
        r = _run("import fastln; print(fastln.cache_info()['limit'])", FASTLN_CACHE_MB=empty)
        assert r.returncode == 0, r.stderr
        assert r.stdout == default.stdout
