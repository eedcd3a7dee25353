"""Dispatch, FASTLN_ISA, threads and runtime_info: the parts that need fresh processes."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import fastln

ISAS = fastln.runtime_info()["isas"]


# Prepended to a child's code: how many threads the child has (Linux).
THREADS = """
def threads():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))
"""


def _run(code, **env):
    e = dict(os.environ)
    e.pop("FASTLN_ISA", None)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=e,
        cwd=os.path.dirname(os.path.dirname(fastln.__file__)),
    )


def test_runtime_info_keys():
    info = fastln.runtime_info()
    for key in ("version", "isa", "isas", "openmp", "num_threads", "cuda"):
        assert key in info
    assert info["version"] == fastln.__version__
    assert info["isa"] in info["isas"]
    assert "scalar" in info["isas"]
    assert isinstance(info["openmp"], bool)
    assert info["num_threads"] >= 1
    cuda = info["cuda"]
    assert set(cuda) >= {"compiled", "available", "detail"}
    assert isinstance(cuda["detail"], str)
    if not cuda["compiled"]:
        assert not cuda["available"]


def _cpuinfo(key):
    """The first /proc/cpuinfo line for `key`, after its colon; None without that file or line."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == key:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpuinfo_flags():
    line = _cpuinfo("flags")
    return None if line is None else set(line.split())


def test_best_isa_is_default():
    info = fastln.runtime_info()
    assert info["isa"] == info["best_isa"]
    # Dispatch's order of preference (see src/dispatch.cpp): AVX-512 first on Intel cores with
    # AVX512-FP16, elsewhere only when asked for.
    order = ["avx2", "neon", "scalar", "avx512"]
    flags = _cpuinfo_flags() or set()
    if _cpuinfo("vendor_id") == "GenuineIntel" and "avx512_fp16" in flags:
        order.insert(0, "avx512")
    preferred = [n for n in order if n in info["isas"]]
    assert info["best_isa"] == preferred[0]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 ISAs")
def test_isas_match_cpu_flags():
    """Dispatch's cpuid/xgetbv checks agree with what the Linux kernel reports (it lists a flag
    only when the OS also saves that extension's registers)."""
    flags = _cpuinfo_flags()
    if flags is None:
        pytest.skip("needs /proc/cpuinfo")
    isas = fastln.runtime_info()["isas"]
    assert ("avx2" in isas) == ({"avx", "avx2", "fma", "f16c"} <= flags)
    avx512 = {"avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl"}
    assert ("avx512" in isas) == (avx512 <= flags)


@pytest.mark.parametrize("name", ["scalar", "avx2", "avx512", "neon"])
def test_env_forces_isa(name):
    r = _run("import fastln; print(fastln.get_isa())", FASTLN_ISA=name)
    if name in ISAS:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == name
    else:
        # Known but not runnable here: the import fails and says which ISA.
        assert r.returncode != 0
        assert "ImportError" in r.stderr and repr(name) in r.stderr


@pytest.mark.parametrize("value", ["z", "X", "x ", "yes"])
def test_env_normalize_from_other_values_fail_loudly(value):
    # The C library takes any value but x and y as unset; the import refuses it instead of running
    # with the vendor's default under a setting the user believes in.
    r = _run("import fastln", FASTLN_NORMALIZE_FROM=value)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "FASTLN_NORMALIZE_FROM" in r.stderr and repr(value) in r.stderr


def test_env_normalize_from_empty_is_unset():
    r = _run("import fastln", FASTLN_NORMALIZE_FROM="")
    assert r.returncode == 0, r.stderr


def test_env_unknown_isa_fails_loudly():
    r = _run("import fastln", FASTLN_ISA="sse9")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "'sse9'" in r.stderr and "known" in r.stderr


def test_set_isa_roundtrip():
    best = fastln.get_isa()
    for name in ISAS:
        fastln.set_isa(name)
        assert fastln.get_isa() == name
    fastln.set_isa(None)
    assert fastln.get_isa() == best


BITWISE = """
import hashlib, numpy as np, fastln
rng = np.random.default_rng(7)
h = hashlib.sha256()
for isa in fastln.runtime_info()["isas"]:
    fastln.set_isa(isa)
    # (16, 600), (2, 4100): float64 calls that split across threads where float32 ones do not.
    for shape in [(257, 1000), (4096, 64), (3, 50000), (16, 600), (2, 4100)]:
        for dt in (np.float32, np.float64):
            x = (1e3 + rng.standard_normal(shape)).astype(dt)
            y, m, r = fastln.layer_norm(x, return_stats=True)
            h.update(y.tobytes()); h.update(m.tobytes()); h.update(r.tobytes())
print(fastln.get_num_threads(), h.hexdigest())
"""


def test_bitwise_identical_across_thread_counts():
    out = {}
    for n in ("1", "2", "7"):
        r = _run(BITWISE, OMP_NUM_THREADS=n)
        assert r.returncode == 0, r.stderr
        threads, digest = r.stdout.split()
        if fastln.runtime_info()["openmp"]:
            assert threads == n
        out[n] = digest
    assert len(set(out.values())) == 1, out


@pytest.mark.parametrize("dtype, shape, split", [
    ("float32", (8, 1024), False), ("float32", (2, 8192), True),
    ("float16", (8, 1024), False), ("float16", (2, 8192), True),
    ("float64", (8, 1023), False), ("float64", (2, 4096), True)])
def test_threads_split_by_bytes(dtype, shape, split):
    # A forward call goes on a second thread from 32 KiB of the values it computes in (float32
    # for the 16-bit dtypes): float64 from 8192 values, float32 and float16 from 16384. Seen as
    # the pool's first thread starting, in a fresh process.
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    if not sys.platform.startswith("linux"):
        pytest.skip("counts threads in /proc/self/status")
    r = _run(
        THREADS + textwrap.dedent(f"""
        import numpy as np, fastln
        fastln.set_num_threads(2)
        base = threads()
        fastln.layer_norm(np.ones({shape}, "{dtype}"))
        print(threads() - base)
        """)
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("1" if split else "0")


def test_set_num_threads():
    before = fastln.get_num_threads()
    try:
        fastln.set_num_threads(3)
        assert fastln.get_num_threads() == (3 if fastln.runtime_info()["openmp"] else 1)
    finally:
        fastln.set_num_threads(0)
    assert fastln.get_num_threads() == before


def test_threadpoolctl_sees_and_limits_the_pool():
    pytest.importorskip("threadpoolctl")
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    r = _run(
        """
        import json, fastln
        from threadpoolctl import threadpool_info, threadpool_limits
        libs = [i for i in threadpool_info() if i["user_api"] == "openmp"]
        with threadpool_limits(limits=1, user_api="openmp"):
            inside = fastln.get_num_threads()
        print(json.dumps({"openmp_libs": len(libs), "inside": inside, "after": fastln.get_num_threads()}))
        """,
        OMP_NUM_THREADS="2",
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["openmp_libs"] >= 1
    assert res["inside"] == 1
    assert res["after"] == 2


POOL = """
import os, sys, time, numpy as np, fastln
counts, pause = [int(n) for n in sys.argv[1].split(",")], float(sys.argv[2])
rng = np.random.default_rng(3)
x = (5 + rng.standard_normal((515, 1024))).astype(np.float32)
w, b = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
dy = rng.standard_normal(x.shape).astype(np.float32)
def run():
    y, r = np.full_like(x, np.nan), np.full_like(x, np.nan)  # rows no thread wrote stay NaN
    fastln.layer_norm(x, w, b, out=y)
    fastln.rms_norm(x, w, out=r)
    _, m, s = fastln.layer_norm(x, return_stats=True)
    return [y, r, *fastln.layer_norm_backward(dy, x, m, s, w)]
def tasks():
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
fastln.set_num_threads(1)
want = run()
before, most = tasks(), 1
for n in counts:
    most = max(most, n)
    fastln.set_num_threads(n)
    assert fastln.get_num_threads() == n
    for _ in range(20):
        for a, e in zip(run(), want):
            assert np.array_equal(a, e)
        time.sleep(pause)
    if before is not None:  # the pool ran: its threads exist
        assert tasks() >= before + most - 1, (before, tasks())
print("ok")
"""


@pytest.mark.parametrize(
    "threads, pause, policy",
    [("2", 0.0, ""), ("2", 0.003, ""), ("2", 0.0, "passive"), ("7,2", 0.0, ""),
     ("3", 0.003, " Passive ")],
)
def test_pool_threads_answer_every_call(threads, pause, policy):
    # The rows go to pool threads that spin between calls, sleep after a while of none, and sleep
    # at once with OMP_WAIT_POLICY=passive or more threads than CPUs ("7,2": threads a larger call
    # started stay). Every call, whichever state they are in, must get every row written and the
    # 1-thread bits; a lost wake would hang, hence the timeout. (tests/native/test_kernels.cpp
    # calls with pauses around the spinning time.)
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    e = dict(os.environ)
    e.pop("FASTLN_ISA", None)
    e.pop("OMP_WAIT_POLICY", None)
    if policy:
        e["OMP_WAIT_POLICY"] = policy
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(POOL), threads, str(pause)],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_gil_released_and_thread_safe(rng):
    # Several Python threads calling at once must each get the right answer.
    xs = [(i + rng.standard_normal((64, 512))).astype(np.float32) for i in range(4)]
    expected = [fastln.layer_norm(x) for x in xs]
    results = [None] * 4

    def work(i):
        for _ in range(20):
            results[i] = fastln.layer_norm(xs[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r, e in zip(results, expected):
        np.testing.assert_array_equal(r, e)


def test_forked_child_does_not_hang():
    # A forked child has none of the parent's pool threads (libgomp's child hangs in its next
    # parallel region); fastln's child runs single-threaded instead (multiprocessing's fork start
    # method depends on this).
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    code = """
    import os, sys, numpy as np, fastln
    fastln.set_num_threads(2)
    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    y = fastln.layer_norm(x)
    pid = os.fork()
    if pid == 0:
        ok = np.array_equal(fastln.layer_norm(x), y) and fastln.get_num_threads() == 1
        sys.exit(0 if ok else 3)  # a normal exit: the pool's reaper must not wait in the child
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
    """
    e = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


@pytest.mark.parametrize("call_first", [False, True])
def test_forked_child_threads(call_first):
    # A child forked after the parent's first call runs on one thread (the parent's pool threads
    # are not in it); one forked before any call, right after import, starts a pool of its own.
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        pytest.skip("fork, and threads counted in /proc/self/status")
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("built without OpenMP")
    r = _run(
        THREADS + textwrap.dedent(f"""
        import os, numpy as np, fastln
        if {call_first}:
            fastln.layer_norm(np.ones((1, 64), np.float32))
        pid = os.fork()
        if pid == 0:
            fastln.set_num_threads(2)
            base = threads()
            fastln.layer_norm(np.ones((4, 8192), np.float32))
            print(fastln.get_num_threads(), threads() - base, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        """)
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == (["1", "0"] if call_first else ["2", "1"])


def test_import_from_the_checkout_root():
    # `pip install . && python -m fastln.bench` runs in the checkout, where the source folder
    # fastln/ comes first on sys.path: it must still find the compiled extension.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "fastln", "__init__.py")):
        pytest.skip("not run from a checkout")
    e = dict(os.environ)
    e.pop("PYTHONSAFEPATH", None)
    e.pop("FASTLN_ISA", None)
    r = subprocess.run(
        [sys.executable, "-c", "import fastln, numpy as np; print(fastln.layer_norm(np.ones((1, 3))).shape)"],
        capture_output=True, text=True, env=e, cwd=root,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(1, 3)"


# Layer norm and RMS norm outputs for rows placed at chosen elements past a line, on every ISA, in
# the dtypes named in argv[1], as raw bytes in an .npz at argv[2]; argv[3]: this folder, for
# conftest's placement helper.
_PLACED_NORMS = """
import sys
import numpy as np
import fastln

sys.path.insert(0, sys.argv[3])
from conftest import _placed as placed

out = {}
rng = np.random.default_rng(7)
for name in sys.argv[1].split(","):
    dt = np.dtype(__import__("ml_dtypes").bfloat16) if name == "bfloat16" else np.dtype(name)
    line = 64 // dt.itemsize
    for cols in (300, 1031, 2100):
        x = 0.5 + 2.0 * rng.standard_normal((40, cols))
        x[1::6] += 1e3
        x[4::6, cols // 2] = np.nan
        x = x.astype(dt)
        w = (1.0 + 0.1 * rng.standard_normal(cols)).astype(dt)
        b = (0.1 * rng.standard_normal(cols)).astype(dt)
        for isa in fastln.runtime_info()["isas"]:
            fastln.set_isa(isa)
            for sx, sy in ((0, 0), (1, 3), (3, 1), (line // 2, 0), (0, line // 2), (2, 2)):
                xs = placed(x, sx % line)
                for k, (wk, bk) in enumerate(((w, b), (None, None), (w, None))):
                    y = placed(np.zeros_like(x), sy % line)
                    fastln.layer_norm(xs, wk, bk, out=y)
                    out[f"ln{k} {name} {cols} {isa} {sx} {sy}"] = y.view(np.uint8).copy()
                y = placed(np.zeros_like(x), sy % line)
                fastln.rms_norm(xs, w, out=y)
                out[f"rms {name} {cols} {isa} {sx} {sy}"] = y.view(np.uint8).copy()
np.savez(sys.argv[2], **out)
"""


def test_normalize_pass_start_does_not_change_bits(tmp_path):
    # FASTLN_NORMALIZE_FROM=x or y (read once a process) sets where the normalize passes start
    # their vectors when x and y lie at different places within a line: by default y's line on
    # Intel CPUs, x's elsewhere, so each machine runs one of the two unless told. Both must give
    # the same bits, on every ISA, in every dtype (16-bit rows convert a peeled row's first values
    # one at a time), with and without weight and bias, and each placement those of x and y on a
    # line. 40 rows: weight and bias are copied to where the blocks start from 32 rows a thread.
    names = ["float32", "float64", "float16"]
    try:
        import ml_dtypes  # noqa: F401

        names.append("bfloat16")
    except ImportError:
        pass
    got = {}
    for side in ("x", "y"):
        path = tmp_path / f"{side}.npz"
        args = [",".join(names), str(path), os.path.dirname(os.path.abspath(__file__))]
        code = "import sys; sys.argv[1:] = %r\n%s" % (args, _PLACED_NORMS)
        r = _run(code, FASTLN_NORMALIZE_FROM=side)
        assert r.returncode == 0, r.stderr
        with np.load(path) as f:
            got[side] = {k: f[k] for k in f.files}
    assert got["x"].keys() == got["y"].keys() and got["x"]
    for key, want in got["x"].items():
        np.testing.assert_array_equal(got["y"][key], want, err_msg=key)
        on_line = " ".join(key.split()[:4] + ["0", "0"])
        np.testing.assert_array_equal(want, got["x"][on_line], err_msg=key)
