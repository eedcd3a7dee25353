"""Scratch memory that cannot be had: the call raises MemoryError (not a crash, not a wrong answer),
and the next call works; the 16-bit parameters' copies are had before any row is written, so
there the outputs are as they were. Each case runs in a child process with its address space
capped (RLIMIT_AS) just above what the call's arrays already take, so that only the library's own
scratch buffer is refused."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastln

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="RLIMIT_AS and /proc/self/status are Linux's")

PRELUDE = textwrap.dedent(r"""
    import resource
    import numpy as np
    import fastln

    SOFT, HARD = resource.getrlimit(resource.RLIMIT_AS)

    def vm_bytes():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmSize")

    def capped(extra, fn):
        # The cap is lifted again whatever fn does, so that the checks after it can allocate.
        resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + extra, HARD))
        try:
            fn()
        except MemoryError as e:
            return str(e)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (SOFT, HARD))
        return None
""")

def run_child(body: str, **env) -> str:
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_16bit_parameters_widened_per_thread(isa, threads, rms, residual):
    # float16 x with float16 weight (and bias): each part of the rows gets its own float32 copy of
    # them, 2 x 32 MiB a part here, which the cap refuses (8 MiB above the arrays). The copies are
    # had before any row is written, so y, and the residual updated in place, are as they were on
    # any number of threads: a retry must not add the residual twice.
    out = run_child(f"""
        fastln.set_isa({isa!r})
        fastln.set_num_threads({threads})
        rms, residual = {rms}, {residual}
        n = 1 << 23
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, n), dtype=np.float32).astype(np.float16)
        r = rng.standard_normal((2, n), dtype=np.float32).astype(np.float16)
        w = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
        b = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
        y = np.full_like(x, np.nan)

        def call(w, b, x=x, y=y, r=r):
            kw = dict(residual=r, residual_out=r) if residual else {{}}
            if rms:
                return fastln.rms_norm(x, w, out=y, **kw)
            return fastln.layer_norm(x, w, b, out=y, **kw)

        m = 1 << 14  # 2 rows of 16384 values: two parts, so the pool's thread starts
        call(w[:m], b[:m], x[:, :m].copy(), y[:, :m].copy(), r[:, :m].copy())
        r0 = r.copy()
        msg = capped(8 << 20, lambda: call(w, b))
        print("raised", msg)
        print("untouched", bool(np.isnan(y).all()), bool(np.array_equal(r, r0)))
        # The same call works once memory is there again, with float32 parameters' bits.
        call(w, b)
        got = y.copy()
        r[...] = r0
        call(w.astype(np.float32), b.astype(np.float32))
        print("equal", bool(np.array_equal(got, y)), bool(np.isfinite(y).all()))
    """)
    assert "raised out of memory" in out, out
    assert "untouched True True" in out, out
    assert "equal True True" in out, out


def test_16bit_parameters_when_one_thread_has_its_copy():
    # The caller still holds a buffer big enough for one copy (from a 1-thread call; buffers up
    # to 8 MiB are kept), the pool's thread does not. Each thread getting its own, the caller
    # wrote its rows before the call failed; the copies are now had for all parts at once.
    # MALLOC_MMAP_THRESHOLD_: every block of 128 KiB or more is mapped and unmapped as it is
    # freed, so that the cap counts each one.
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP: one thread, whose copy is there")
    out = run_child("""
        n = 1 << 19
        rng = np.random.default_rng(3)
        x = rng.standard_normal((2, n), dtype=np.float32).astype(np.float16)
        w = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
        b = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
        y = np.full_like(x, np.nan)
        fastln.set_num_threads(2)
        m = 1 << 14
        fastln.layer_norm(x[:, :m], w[:m], b[:m])  # two parts: the pool's thread starts
        fastln.set_num_threads(1)
        fastln.layer_norm(x, w, b)  # the caller's copy: 4 MiB, kept
        fastln.set_num_threads(2)
        msg = capped(1 << 20, lambda: fastln.layer_norm(x, w, b, out=y))
        print("raised", msg)
        print("untouched", bool(np.isnan(y).all()))
    """, MALLOC_MMAP_THRESHOLD_="131072")
    assert "raised out of memory" in out, out
    assert "untouched True" in out, out


def test_backward_partial_sums(isa):
    # layer_norm_backward's weight and bias gradients are summed over the rows in a float64
    # buffer (24 bytes a column here: 192 MiB); the outputs (128 MiB) fit under the cap.
    out = run_child(f"""
        fastln.set_isa({isa!r})
        fastln.set_num_threads(1)
        n = 1 << 23
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, n), dtype=np.float32)
        dy = rng.standard_normal((2, n), dtype=np.float32)
        w = rng.standard_normal(n, dtype=np.float32)
        _, mean, rstd = fastln.layer_norm(x, w, return_stats=True)
        msg = capped(160 << 20, lambda: fastln.layer_norm_backward(dy, x, mean, rstd, w))
        print("raised", msg)
        dx, dw, db = fastln.layer_norm_backward(dy, x, mean, rstd, w)
        ref_db = dy.astype(np.float64).sum(0)
        print("close", bool(np.allclose(db, ref_db, rtol=1e-6, atol=1e-5)),
              bool(np.isfinite(dx).all() and np.isfinite(dw).all()))
    """)
    assert "raised out of memory" in out, out
    assert "close True True" in out, out


def test_pool_thread_that_cannot_start():
    # No address space for a pool thread's stack: calls go on with the threads there are (here
    # the caller alone), and give the bits of one thread.
    out = run_child("""
        def threads():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))

        x = np.random.default_rng(2).standard_normal((256, 1024), dtype=np.float32)
        fastln.set_num_threads(1)
        one = fastln.layer_norm(x)
        fastln.set_num_threads(2)
        y = np.empty_like(x)
        before = threads()
        msg = capped(1 << 20, lambda: fastln.layer_norm(x, out=y))
        print("raised", msg)
        # Not tried again once memory is there: each try would cost every call.
        again = fastln.layer_norm(x)
        print("threads", threads() - before)
        print("equal", bool(np.array_equal(one, y)), bool(np.array_equal(one, again)))
    """)
    assert "raised None" in out, out
    assert "threads 0" in out, out
    assert "equal True True" in out, out
