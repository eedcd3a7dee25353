"""The CUDA path.

Three layers of tests:
  - CPU-side, always: runtime_info()['cuda'], GPU-array detection, clear errors without a GPU,
    setup.py's FASTLN_CUDA switch, and nvcc compiling src/cuda/*.cu wherever nvcc exists;
  - the Python plumbing of fastln/_cuda_api.py on a simulated device: torch CPU tensors stand in
    for CUDA tensors and a NumPy stand-in for the kernels reads and writes the raw pointers, so that
    strides, leading dimensions, aliasing, copies and result conventions are checked here;
  - on a GPU (marked `cuda`, skipped without one): the kernels against a float64 reference, the CPU
    path and torch's CUDA layer_norm / rms_norm / autograd, in float32, float16 and bfloat16.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastln
from fastln import _cuda_api

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = fastln.runtime_info()["cuda"]


# ---- float64 references ----------------------------------------------------------------------------

def ref_forward(x, w=None, b=None, eps=1e-5, rms=False):
    """(y, mean, rstd) in float64 over the last axis of a 2-D array."""
    x = np.asarray(x, dtype=np.float64)
    if rms:
        mean = np.zeros(x.shape[0])
        rstd = 1.0 / np.sqrt((x * x).mean(axis=1) + eps)
        y = x * rstd[:, None]
    else:
        mean = x.mean(axis=1)
        d = x - mean[:, None]
        rstd = 1.0 / np.sqrt((d * d).mean(axis=1) + eps)
        y = d * rstd[:, None]
    if w is not None:
        y = y * np.asarray(w, np.float64)
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return y, mean, rstd


def ref_backward(dy, x, mean, rstd, w=None, rms=False):
    """(dx, dweight, dbias) in float64 given the forward's statistics."""
    dy = np.asarray(dy, np.float64)
    x = np.asarray(x, np.float64)
    mean = np.asarray(mean, np.float64)[:, None]
    rstd = np.asarray(rstd, np.float64)[:, None]
    xhat = x * rstd if rms else (x - mean) * rstd
    g = dy * (np.asarray(w, np.float64) if w is not None else 1.0)
    c1 = (g * xhat).mean(axis=1, keepdims=True)
    dx = (g - xhat * c1) * rstd if rms else (g - g.mean(axis=1, keepdims=True) - xhat * c1) * rstd
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


# ---- CPU-side ------------------------------------------------------------------------------------------

def test_runtime_info_cuda_is_well_formed():
    info = fastln.runtime_info()["cuda"]
    assert set(info) == {"compiled", "available", "detail"}
    assert isinstance(info["compiled"], bool) and isinstance(info["available"], bool)
    assert isinstance(info["detail"], str) and info["detail"]
    if info["available"]:
        assert info["compiled"]
    elif info["compiled"]:
        assert "no usable CUDA device" in info["detail"]


class FakeCudaArray:
    """Claims to be in device memory; never dereferenced."""

    def __init__(self, shape=(2, 8), typestr="<f4"):
        self.shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (0, False), "version": 3, "strides": None,
        }


class FakeDlpack:
    def __init__(self, device_type):
        self.device_type = device_type

    def __dlpack__(self, stream=None):
        raise NotImplementedError

    def __dlpack_device__(self):
        return (self.device_type, 0)


def test_gpu_array_detection():
    assert _cuda_api.is_gpu_array(FakeCudaArray())
    assert _cuda_api.is_gpu_array(FakeDlpack(2))  # kDLCUDA
    assert _cuda_api.is_gpu_array(FakeDlpack(13))  # kDLCUDAManaged
    assert not _cuda_api.is_gpu_array(FakeDlpack(1))  # kDLCPU
    for a in (np.ones(3), [1.0, 2.0], 3.0, None, np.float32(1)):
        assert not _cuda_api.is_gpu_array(a)
    assert not _cuda_api.on_gpu(np.ones(3), None, np.ones(3))
    assert _cuda_api.on_gpu(np.ones(3), FakeCudaArray())


def test_torch_cpu_tensors_stay_on_the_cpu_path():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 16)
    assert not _cuda_api.is_gpu_array(x)
    np.testing.assert_allclose(
        fastln.layer_norm(x.numpy()), ref_forward(x.numpy())[0], rtol=1e-5, atol=1e-5
    )


@pytest.mark.skipif(CUDA["available"], reason="checks the error raised without a GPU")
def test_gpu_array_without_gpu_raises_clearly():
    with pytest.raises(RuntimeError, match="CUDA path is unavailable"):
        fastln.layer_norm(FakeCudaArray())
    # A GPU weight with a CPU x: the error names the GPU argument.
    with pytest.raises(RuntimeError, match="weight is a GPU array"):
        fastln.layer_norm(np.ones((2, 8), np.float32), FakeCudaArray((8,)))
    # The CPU path is untouched.
    y = fastln.layer_norm(np.arange(8, dtype=np.float32).reshape(1, 8))
    assert y.dtype == np.float32 and abs(float(y.mean())) < 1e-6


@pytest.mark.skipif(not CUDA["compiled"], reason="the CUDA extension is not built")
def test_c_api_checks_arguments_before_any_cuda_call():
    from fastln import _cuda

    fake = 1 << 20  # never dereferenced: every call below fails its checks first
    #            dtype x     ldx r  ldr y     ldy h  ldh w  b  m  s  rows cols eps   dev stream
    good = [0, fake, 8, 0, 0, fake, 8, 0, 0, 0, 0, 0, 0, 4, 8, 1e-5, 0, 0]
    with pytest.raises(RuntimeError, match="NULL"):
        _cuda.layer_norm(*good[:1], 0, *good[2:])
    # No rows: NULL x and y are taken (torch's empty CUDA tensors have data_ptr() 0), and the
    # call returns before any CUDA call, so it passes without a GPU.
    no_rows = list(good)
    no_rows[1] = no_rows[5] = no_rows[13] = 0
    _cuda.layer_norm(*no_rows)
    bad_shape = list(good)
    bad_shape[14] = 0  # cols
    with pytest.raises(ValueError, match="bad shape"):
        _cuda.layer_norm(*bad_shape)
    bad_ld = list(good)
    bad_ld[2] = 7  # ldx < cols
    with pytest.raises(ValueError, match="bad shape"):
        _cuda.layer_norm(*bad_ld)
    for i, v in ((2, (1 << 63) - 1), (6, 1 << 62), (13, 1 << 61)):  # past PTRDIFF_MAX bytes
        huge = list(good)
        huge[i] = v
        with pytest.raises(ValueError, match="bad shape"):
            _cuda.layer_norm(*huge)
    bad_eps = list(good)
    bad_eps[15] = -1.0
    with pytest.raises(ValueError, match="eps"):
        _cuda.layer_norm(*bad_eps)
    bad_dtype = list(good)
    bad_dtype[0] = 7
    with pytest.raises(RuntimeError, match="invalid argument"):
        _cuda.layer_norm(*bad_dtype)
    no_rows = list(good)
    no_rows[13] = 0
    _cuda.layer_norm(*no_rows)  # nothing to do, no CUDA call
    with pytest.raises(RuntimeError, match="workspace"):  # dweight wanted, no workspace
        _cuda.layer_norm_backward(0, fake, 8, fake, 8, fake, fake, 0, 0, 0, fake, 8, fake, 0, 0,
                                  0, 4, 8, 0, 0)
    if not CUDA["available"]:
        with pytest.raises(_cuda.CudaError):
            _cuda.layer_norm(*good)
        # No rows with dweight wanted: no workspace is needed (fastln_cuda_backward_workspace asks
        # for 0 bytes), so the call goes on to zero dweight, which needs the GPU; it was refused
        # for its NULL workspace.
        with pytest.raises(_cuda.CudaError):
            _cuda.layer_norm_backward(0, fake, 8, fake, 8, fake, fake, 0, 0, 0, fake, 8, fake, 0,
                                      0, 0, 0, 8, 0, 0)


@pytest.mark.skipif(not CUDA["available"], reason="needs a GPU")
def test_unknown_gpu_array_kind_is_a_type_error():
    with pytest.raises(TypeError, match="CuPy arrays and torch CUDA tensors"):
        fastln.layer_norm(FakeCudaArray())


_SETUP_PROBE = """
import json, runpy, setuptools
seen = {}
setuptools.setup = lambda **kw: seen.update(kw)
runpy.run_path("setup.py", run_name="__main__")
print("EXTENSIONS=" + json.dumps([e.name for e in seen["ext_modules"]]))
"""


def _setup_extensions(env_extra):
    """(returncode, extension names setup.py would build, output) under env_extra."""
    pytest.importorskip("Cython")  # setup.py's build requirement (in the test extra)
    env = dict(os.environ, **env_extra)
    r = subprocess.run([sys.executable, "-c", _SETUP_PROBE], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    out = r.stdout + r.stderr
    names = None
    for line in r.stdout.splitlines():
        if line.startswith("EXTENSIONS="):
            names = line.split("=", 1)[1]
    return r.returncode, names, out


def test_setup_fastln_cuda_0_leaves_the_cuda_extension_out():
    rc, names, out = _setup_extensions({"FASTLN_CUDA": "0"})
    assert rc == 0, out
    assert "fastln._core" in names and "fastln._cuda" not in names


def test_setup_fastln_cuda_auto_without_nvcc_builds_the_cpu_path():
    env = {"FASTLN_CUDA": "auto", "PATH": os.path.dirname(sys.executable), "CUDA_HOME": "",
           "CUDA_PATH": ""}
    rc, names, out = _setup_extensions(env)
    assert rc == 0, out
    assert "fastln._core" in names and "fastln._cuda" not in names
    assert "nvcc not found" in out


def test_setup_fastln_cuda_1_requires_nvcc():
    env = {"FASTLN_CUDA": "1", "PATH": os.path.dirname(sys.executable), "CUDA_HOME": "",
           "CUDA_PATH": ""}
    rc, _, out = _setup_extensions(env)
    assert rc != 0 and "nvcc was not found" in out


def test_setup_rejects_a_bad_fastln_cuda():
    rc, _, out = _setup_extensions({"FASTLN_CUDA": "maybe"})
    assert rc != 0 and "FASTLN_CUDA='maybe'" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_setup_fastln_cuda_auto_with_nvcc_adds_the_extension():
    rc, names, out = _setup_extensions({"FASTLN_CUDA": "auto"})
    assert rc == 0, out
    assert "fastln._cuda" in names


def _nvcc():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not found")
def test_cuda_sources_compile(tmp_path):
    """Every .cu compiles (front end, PTX for sm_90 and the host side; no GPU needed), so a CUDA
    compile error fails CI on machines that have nvcc but no GPU. setup.py's build compiles the
    optimized machine code for sm_80/sm_90."""
    sources = sorted(glob.glob(os.path.join(ROOT, "src", "cuda", "*.cu")))
    assert len(sources) >= 4

    def compile_one(src):
        cmd = [_nvcc(), "-c", src, "-o", str(tmp_path / (os.path.basename(src) + ".o")),
               "-std=c++17", "-I" + os.path.join(ROOT, "include"),
               "-I" + os.path.join(ROOT, "src", "cuda"), "-Xcompiler", "-fPIC",
               "-gencode=arch=compute_90,code=compute_90",
               # unoptimized: the check is whether the code compiles, and it runs in seconds
               "-Xcicc", "-O0", "-Xcompiler", "-O0"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return src, r.returncode, r.stdout + r.stderr

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for src, rc, log in pool.map(compile_one, sources):
            assert rc == 0, f"{src}:\n{log}"
            assert "warning" not in log.lower(), f"{src}:\n{log}"


def _cuda_include():
    nvcc = _nvcc()
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    if nvcc:
        homes.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
        r = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                           capture_output=True, text=True, check=False)
        for line in (r.stdout + r.stderr).splitlines():
            if line.startswith("#$ _HERE_="):
                homes.insert(0, os.path.dirname(line.split("=", 1)[1].strip()))
    for home in homes:
        if home and os.path.isfile(os.path.join(home, "include", "cuda_fp16.h")):
            return os.path.join(home, "include")
    return None


@pytest.mark.skipif(shutil.which("g++") is None or _cuda_include() is None,
                    reason="needs g++ and the CUDA headers")
def test_kernels_on_an_emulated_gpu(tmp_path):
    """The CUDA kernels' own source, compiled as host C++ with the device builtins emulated
    (tests/cuda_emu/emu.cpp), against a float64 reference: every tier of threads per row, the
    unaligned fallback, the long-row loop kernels, fused residual, in place, backward."""
    exe = str(tmp_path / "emu")
    build = subprocess.run(
        ["g++", "-std=c++20", "-O1", "-I" + os.path.join(ROOT, "include"),
         "-I" + os.path.join(ROOT, "src", "cuda"), "-I" + _cuda_include(),
         os.path.join(ROOT, "tests", "cuda_emu", "emu.cpp"), "-o", exe],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " 0 failures" in run.stdout


# ---- the Python plumbing on a simulated device ---------------------------------------------------------

_SIM_DTYPES = {0: np.float32, 1: np.float16}


def _sim_view(ptr, rows, cols, ld, dtype):
    """A NumPy view of rows x cols elements at a raw address, row stride ld."""
    dtype = np.dtype(dtype)
    n = (rows - 1) * ld + cols
    buf = (ctypes.c_char * (n * dtype.itemsize)).from_address(ptr)
    flat = np.frombuffer(buf, dtype=dtype, count=n)
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (ld * dtype.itemsize, dtype.itemsize))


class SimKernels:
    """The fastln._cuda interface, computed in float64 NumPy over raw host pointers."""

    def __init__(self):
        self.calls = []

    def _vec(self, ptr, n):
        return None if ptr == 0 else _sim_view(ptr, 1, n, n, np.float32)[0]

    def _fwd(self, rms, code, x, ldx, r, ldr, y, ldy, h, ldh, w, b, mean, rstd, rows, cols, eps):
        self.calls.append(("rms" if rms else "ln", rows, cols, ldx, ldy, w, b))
        dt = _SIM_DTYPES[code]
        xv = _sim_view(x, rows, cols, ldx, dt).astype(np.float64)
        if r:
            hv = (xv + _sim_view(r, rows, cols, ldr, dt)).astype(dt)
            if h:
                _sim_view(h, rows, cols, ldh, dt)[...] = hv
            xv = hv.astype(np.float64)
        yv, m, rs = ref_forward(xv, self._vec(w, cols), self._vec(b, cols), eps, rms)
        _sim_view(y, rows, cols, ldy, dt)[...] = yv
        if mean:
            self._vec(mean, rows)[...] = m
        if rstd:
            self._vec(rstd, rows)[...] = rs

    def layer_norm(self, code, x, ldx, r, ldr, y, ldy, h, ldh, w, b, mean, rstd, rows, cols, eps,
                   device, stream):
        self._fwd(False, code, x, ldx, r, ldr, y, ldy, h, ldh, w, b, mean, rstd, rows, cols, eps)

    def rms_norm(self, code, x, ldx, r, ldr, y, ldy, h, ldh, w, rstd, rows, cols, eps, device,
                 stream):
        self._fwd(True, code, x, ldx, r, ldr, y, ldy, h, ldh, w, 0, 0, rstd, rows, cols, eps)

    def backward_workspace(self, code, rms, rows, cols, want_dw, want_db, device):
        return 2 * 8 * cols * 4

    def _bwd(self, rms, code, dy, lddy, x, ldx, mean, rstd, w, dres, lddr, dx, lddx, dw, db, ws,
             nbytes, rows, cols):
        self.calls.append(("bwd", rows, cols))
        assert not (dw or db) or (ws and nbytes >= 2 * cols * 4)
        dt = _SIM_DTYPES[code]
        m = np.zeros(rows) if rms else self._vec(mean, rows)
        dxv, dwv, dbv = ref_backward(_sim_view(dy, rows, cols, lddy, dt),
                                     _sim_view(x, rows, cols, ldx, dt), m, self._vec(rstd, rows),
                                     self._vec(w, cols), rms)
        if dres:
            dxv = dxv + _sim_view(dres, rows, cols, lddr, dt)
        _sim_view(dx, rows, cols, lddx, dt)[...] = dxv
        if dw:
            self._vec(dw, cols)[...] = dwv
        if db:
            self._vec(db, cols)[...] = dbv

    def layer_norm_backward(self, code, dy, lddy, x, ldx, mean, rstd, w, dres, lddr, dx, lddx, dw,
                            db, ws, nbytes, rows, cols, device, stream):
        self._bwd(False, code, dy, lddy, x, ldx, mean, rstd, w, dres, lddr, dx, lddx, dw, db, ws,
                  nbytes, rows, cols)

    def rms_norm_backward(self, code, dy, lddy, x, ldx, rstd, w, dres, lddr, dx, lddx, dw, ws,
                          nbytes, rows, cols, device, stream):
        self._bwd(True, code, dy, lddy, x, ldx, 0, rstd, w, dres, lddr, dx, lddx, dw, 0, ws,
                  nbytes, rows, cols)


@pytest.fixture
def sim(monkeypatch):
    """torch CPU tensors play CUDA tensors; SimKernels plays fastln._cuda."""
    torch = pytest.importorskip("torch")
    kernels = SimKernels()
    monkeypatch.setattr(_cuda_api, "_state", {"compiled": True, "available": True,
                                              "detail": "simulated", "module": kernels})
    monkeypatch.setattr(_cuda_api, "is_gpu_array", lambda a: isinstance(a, torch.Tensor))
    monkeypatch.setattr(_cuda_api._Torch, "stream", lambda self, device: 0)
    kernels.torch = torch
    return kernels


def test_sim_forward_results_and_conventions(sim):
    torch = sim.torch
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g)
    w = torch.randn(16, generator=g, dtype=torch.float64)  # cast to float32 for the kernels
    b = torch.randn(16, generator=g)
    y = fastln.layer_norm(x, w, b)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
    want, mean, _ = ref_forward(x.reshape(15, 16).numpy(), w.numpy(), b.numpy())
    np.testing.assert_allclose(y.reshape(15, 16).numpy(), want, rtol=1e-5, atol=1e-5)
    _, m2, r2 = _cuda_api.layer_norm(x, w, b, return_stats=True)
    assert m2.shape == (3, 5) and r2.dtype == torch.float32
    np.testing.assert_allclose(m2.reshape(-1).numpy(), mean, rtol=1e-6)
    # axis=1 normalizes the last two axes together
    y3 = fastln.layer_norm(x, axis=1)
    np.testing.assert_allclose(y3.reshape(3, 80).numpy(), ref_forward(x.reshape(3, 80).numpy())[0],
                               rtol=1e-5, atol=1e-5)
    # RMSNorm and the fused residual
    r = torch.randn(3, 5, 16, generator=g)
    y4, h4, rs4 = _cuda_api.rms_norm(x, w, residual=r, return_stats=True)
    np.testing.assert_array_equal(h4.numpy(), (x + r).numpy())
    np.testing.assert_allclose(
        y4.reshape(15, 16).numpy(), ref_forward((x + r).reshape(15, 16).numpy(), w.numpy(),
                                                rms=True, eps=1e-6)[0], rtol=1e-5, atol=1e-5)
    assert rs4.shape == (3, 5)


def test_sim_strides_inplace_and_aliasing(sim):
    torch = sim.torch
    g = torch.Generator().manual_seed(1)
    base = torch.randn(6, 40, generator=g)
    x = base[::2, 3:35]  # row stride 80, not contiguous: viewed in place with ld = 80
    want = ref_forward(x.numpy())[0]
    y = fastln.layer_norm(x)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    assert sim.calls[-1][3] == 80  # ldx: no copy of x
    xt = torch.randn(16, 4, generator=g).t()  # inner stride 4: copied to contiguous
    np.testing.assert_allclose(fastln.layer_norm(xt).numpy(), ref_forward(xt.numpy())[0],
                               rtol=1e-5, atol=1e-5)
    # in place: out is x
    xc = x.clone()
    out = fastln.layer_norm(xc, out=xc)
    assert out is xc
    np.testing.assert_allclose(xc.numpy(), want, rtol=1e-5, atol=1e-5)
    # out overlapping x other than exactly goes through a temporary
    buf = torch.randn(5, 32, generator=g)
    src = buf[:4].clone()
    ov = fastln.layer_norm(buf[:4], out=buf[1:])
    np.testing.assert_allclose(ov.numpy(), ref_forward(src.numpy())[0], rtol=1e-5, atol=1e-5)
    # residual_out may be the residual itself
    a = torch.randn(4, 32, generator=g)
    r = torch.randn(4, 32, generator=g)
    s = (a + r).clone()
    y, h = _cuda_api.layer_norm(a, residual=r, residual_out=r)
    assert h is r
    np.testing.assert_array_equal(r.numpy(), s.numpy())
    np.testing.assert_allclose(y.numpy(), ref_forward(s.numpy())[0], rtol=1e-5, atol=1e-5)


def test_sim_one_row_over_a_strided_2d_view(sim):
    # axis=0 on a 2-D view with gaps between its rows: one row of all its values. The view was
    # handed to the kernels as it stood, with ld = A*B: they read the gaps and wrote into them.
    torch = sim.torch
    base = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    x = base[:, :4]
    want = ref_forward(x.reshape(1, 16).numpy())[0].reshape(4, 4)
    np.testing.assert_allclose(fastln.layer_norm(x, axis=0).numpy(), want, rtol=1e-5, atol=1e-5)
    out_base = torch.full((4, 8), 7.0)
    out = fastln.layer_norm(x, axis=0, out=out_base[:, :4])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out_base[:, 4:].numpy(), np.full((4, 4), 7.0))  # gaps kept
    dy = torch.ones(4, 8)[:, :4]
    _, mean, rstd = _cuda_api.layer_norm(x, axis=0, return_stats=True)
    dx = fastln.layer_norm_backward(dy, x, mean, rstd, axis=0)[0]
    np.testing.assert_allclose(dx.numpy(), np.zeros((4, 4)), atol=1e-6)  # constant dy


def test_sim_weight_sharing_memory_with_out_is_copied(sim):
    # out= over the weight's own memory: the kernels get a copy of the weight, as other blocks
    # would read it while one writes y (the simulated kernels read it first, so only the
    # pointers can show it).
    torch = sim.torch
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 16, generator=g)
    buf = torch.randn(2, 16, generator=g)
    w, b = buf[0], buf[1]
    want = ref_forward(x.numpy(), w.numpy().copy(), b.numpy().copy())[0]
    y = fastln.layer_norm(x, w, b, out=buf[0:1])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    _, _, _, _, _, wp, bp = sim.calls[-1]
    assert wp != buf[0].data_ptr() and bp == buf[1].data_ptr()  # only the one under out


def test_sim_float16_and_zero_rows(sim):
    torch = sim.torch
    x = torch.randn(4, 24).to(torch.float16)
    y, mean, _ = _cuda_api.layer_norm(x, return_stats=True)
    assert y.dtype == torch.float16 and mean.dtype == torch.float32
    empty = torch.empty(0, 8)
    assert fastln.layer_norm(empty).shape == (0, 8)
    dx, dw, db = _cuda_api.layer_norm_backward(empty, empty, torch.empty(0), torch.empty(0),
                                               torch.ones(8))
    assert dx.shape == (0, 8) and float(dw.abs().sum()) == 0.0 and db.shape == (8,)


def test_sim_backward(sim):
    torch = sim.torch
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 24, generator=g)
    dy = torch.randn(6, 24, generator=g)
    w = torch.randn(24, generator=g)
    _, mean, rstd = _cuda_api.layer_norm(x, w, return_stats=True)
    dx, dw, db = _cuda_api.layer_norm_backward(dy, x, mean, rstd, w)
    rdx, rdw, rdb = ref_backward(dy.numpy(), x.numpy(), mean.numpy(), rstd.numpy(), w.numpy())
    np.testing.assert_allclose(dx.numpy(), rdx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), rdw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db.numpy(), rdb, rtol=1e-5, atol=1e-5)
    assert _cuda_api.layer_norm_backward(dy, x, mean, rstd)[1:] == (None, None)
    dres = torch.randn(6, 24, generator=g)
    _, rs = _cuda_api.rms_norm(x, w, return_stats=True)
    dx2, dw2 = _cuda_api.rms_norm_backward(dy, x, rs, w, dresidual=dres)
    rdx2, rdw2, _ = ref_backward(dy.numpy(), x.numpy(), np.zeros(6), rs.numpy(), w.numpy(), True)
    np.testing.assert_allclose(dx2.numpy(), rdx2 + dres.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw2.numpy(), rdw2, rtol=1e-5, atol=1e-5)


def test_sim_public_functions_route_gpu_arrays(sim):
    torch = sim.torch
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 16, generator=g)
    dy = torch.randn(5, 16, generator=g)
    w = torch.randn(16, generator=g)
    n = len(sim.calls)
    y, rstd = fastln.rms_norm(x, w, return_stats=True)
    assert isinstance(y, torch.Tensor) and sim.calls[n][0] == "rms"
    dx, dw = fastln.rms_norm_backward(dy, x, rstd, w)
    _, mean, rstd2 = fastln.layer_norm(x, w, return_stats=True)
    dx2, dw2, db2 = fastln.layer_norm_backward(dy, x, mean, rstd2, weight=w)
    assert [c[0] for c in sim.calls[n:]] == ["rms", "bwd", "ln", "bwd"]
    xn, dyn, wn = x.numpy(), dy.numpy(), w.numpy()
    want = fastln.rms_norm_backward(dyn, xn, rstd.numpy(), wn)  # the CPU path
    np.testing.assert_allclose(dx.numpy(), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw.numpy(), want[1], rtol=1e-4, atol=1e-5)
    want2 = fastln.layer_norm_backward(dyn, xn, mean.numpy(), rstd2.numpy(), wn)
    np.testing.assert_allclose(dx2.numpy(), want2[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw2.numpy(), want2[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db2.numpy(), want2[2], rtol=1e-4, atol=1e-5)
    assert fastln.rms_norm.__doc__ and "Root mean square" in fastln.rms_norm.__doc__
    # the fused residual through the public functions
    r = torch.randn(5, 16, generator=g)
    n = len(sim.calls)
    y3, h3 = fastln.layer_norm(x, w, residual=r)
    y4, h4 = fastln.rms_norm(x, w, residual=r)
    assert [c[0] for c in sim.calls[n:]] == ["ln", "rms"]
    assert torch.equal(h3, x + r) and torch.equal(h4, x + r)
    np.testing.assert_allclose(y3.numpy(), fastln.layer_norm((x + r).numpy(), wn), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(y4.numpy(), fastln.rms_norm((x + r).numpy(), wn), rtol=1e-4,
                               atol=1e-5)


def test_sim_mixing_and_bad_arguments(sim):
    torch = sim.torch
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match="weight is a numpy.ndarray"):
        fastln.layer_norm(x, np.ones(8, np.float32))
    with pytest.raises(TypeError, match="x is a numpy.ndarray"):
        _cuda_api.layer_norm(np.ones((2, 8), np.float32), torch.ones(8))
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        fastln.layer_norm(x.double())
    with pytest.raises(ValueError, match="normalized shape"):
        fastln.layer_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match="eps"):
        fastln.layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="residual has shape"):
        _cuda_api.layer_norm(x, residual=torch.ones(2, 9))
    with pytest.raises(TypeError, match="x is a numpy.ndarray"):
        _cuda_api.layer_norm_backward(x, np.ones((2, 8), np.float32), torch.zeros(2),
                                      torch.ones(2))


# ---- on a GPU ------------------------------------------------------------------------------------------

def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


needs_gpu = pytest.mark.skipif(
    not CUDA["available"] or _torch_cuda() is None,
    reason="needs a CUDA GPU, fastln's CUDA path and torch with CUDA",
)
LENGTHS = [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 768, 1000, 4097, 40000]
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _gpu(torch, a, dtype):
    return torch.as_tensor(np.asarray(a)).to(device="cuda", dtype=getattr(torch, dtype))


def _close(got, want, dtype, what=""):
    got = got.float().cpu().numpy().astype(np.float64)
    tol = TOL[dtype]
    err = np.abs(got - want) / (np.abs(want) + 1.0)
    assert np.all(np.isfinite(got) == np.isfinite(want)), what
    assert float(np.nanmax(err, initial=0.0)) <= tol, f"{what}: max rel err {np.nanmax(err)}"


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("cols", LENGTHS)
def test_gpu_forward_matches_reference_and_torch(dtype, rms, cols):
    torch = _torch_cuda()
    rng = np.random.default_rng(cols)
    rows = 37
    x = _gpu(torch, rng.standard_normal((rows, cols)) * 2 + 0.5, dtype)
    w = _gpu(torch, rng.standard_normal(cols), "float32")
    b = _gpu(torch, rng.standard_normal(cols), "float32")
    xd = x.double().cpu().numpy()
    if rms:
        y, rstd = fastln_rms(x, w)
        want, _, wr = ref_forward(xd, w.cpu().numpy(), rms=True, eps=1e-6)
        t = torch.nn.functional.rms_norm(x.float(), (cols,), w, eps=1e-6)
    else:
        y, mean, rstd = _cuda_api.layer_norm(x, w, b, return_stats=True)
        want, wm, wr = ref_forward(xd, w.cpu().numpy(), b.cpu().numpy())
        np.testing.assert_allclose(mean.cpu().numpy(), wm, rtol=1e-5, atol=1e-5)
        t = torch.nn.functional.layer_norm(x.float(), (cols,), w, b)
    assert y.dtype == x.dtype and y.device == x.device
    _close(y, want, dtype, "y vs float64")
    np.testing.assert_allclose(rstd.cpu().numpy(), wr, rtol=1e-4)
    _close(y, t.double().cpu().numpy(), dtype, "y vs torch")


def fastln_rms(x, w):
    return fastln.rms_norm(x, w, return_stats=True)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("cols", [8, 33, 768, 4097, 20000])
def test_gpu_backward_matches_reference_and_is_repeatable(dtype, rms, cols):
    torch = _torch_cuda()
    rng = np.random.default_rng(cols + 7)
    rows = 300
    x = _gpu(torch, rng.standard_normal((rows, cols)), dtype)
    dy = _gpu(torch, rng.standard_normal((rows, cols)), dtype)
    w = _gpu(torch, rng.standard_normal(cols), "float32")
    if rms:
        _, rstd = fastln.rms_norm(x, w, return_stats=True)
        dx, dw = fastln.rms_norm_backward(dy, x, rstd, w)
        mean = np.zeros(rows)
        again = fastln.rms_norm_backward(dy, x, rstd, w)[1]
    else:
        _, mean_t, rstd = fastln.layer_norm(x, w, return_stats=True)
        dx, dw, db = fastln.layer_norm_backward(dy, x, mean_t, rstd, w)
        mean = mean_t.cpu().numpy()
        again = fastln.layer_norm_backward(dy, x, mean_t, rstd, w)[1]
    rdx, rdw, rdb = ref_backward(dy.double().cpu().numpy(), x.double().cpu().numpy(), mean,
                                 rstd.cpu().numpy(), w.cpu().numpy(), rms)
    _close(dx, rdx, dtype, "dx")
    scale = np.abs(rdw).max() + 1.0
    assert float(np.abs(dw.cpu().numpy() - rdw).max()) <= 1e-4 * scale * rows ** 0.5
    assert torch.equal(dw, again), "dweight must be bitwise repeatable"
    if not rms:
        assert float(np.abs(db.cpu().numpy() - rdb).max()) <= 1e-4 * (np.abs(rdb).max() + 1) * 10
    # against torch autograd, float32 math
    xt = x.float().clone().requires_grad_(True)
    wt = w.clone().requires_grad_(True)
    if rms:
        yt = torch.nn.functional.rms_norm(xt, (cols,), wt, eps=1e-6)
    else:
        yt = torch.nn.functional.layer_norm(xt, (cols,), wt, None)
    yt.backward(dy.float())
    _close(dx, xt.grad.double().cpu().numpy(), dtype, "dx vs torch")


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_fused_residual_inplace_and_strides(dtype):
    torch = _torch_cuda()
    rng = np.random.default_rng(3)
    x = _gpu(torch, rng.standard_normal((64, 1024)), dtype)
    r = _gpu(torch, rng.standard_normal((64, 1024)), dtype)
    h_want = x + r
    y, h = _cuda_api.layer_norm(x, residual=r)
    assert torch.equal(h, h_want)
    _close(y, ref_forward(h_want.double().cpu().numpy())[0], dtype, "residual")
    # h written over the residual, y over x
    x2, r2 = x.clone(), r.clone()
    y2, _ = _cuda_api.layer_norm(x2, residual=r2, out=x2, residual_out=r2)
    assert y2.data_ptr() == x2.data_ptr() and torch.equal(r2, h_want) and torch.equal(y2, y)
    # a row-strided view and a transposed one
    big = _gpu(torch, rng.standard_normal((64, 1500)), dtype)
    v = big[:, 100:1124]
    _close(fastln.layer_norm(v), ref_forward(v.double().cpu().numpy())[0], dtype, "strided")
    t = big[:, :64].t()
    _close(fastln.layer_norm(t), ref_forward(t.double().cpu().numpy())[0], dtype, "transposed")
    # the fused backward adds dresidual
    dy = _gpu(torch, rng.standard_normal((64, 1024)), dtype)
    dres = _gpu(torch, rng.standard_normal((64, 1024)), dtype)
    _, m, s = _cuda_api.layer_norm(h, return_stats=True)
    dx0 = _cuda_api.layer_norm_backward(dy, h, m, s)[0]
    dx1 = _cuda_api.layer_norm_backward(dy, h, m, s, dresidual=dres)[0]
    _close(dx1, (dx0.double() + dres.double()).cpu().numpy(), dtype, "dresidual")


@pytest.mark.cuda
@needs_gpu
def test_gpu_large_offset_nan_rows_and_cpu_agreement():
    torch = _torch_cuda()
    rng = np.random.default_rng(4)
    x = (1e6 + rng.standard_normal((8, 4096))).astype(np.float32)
    y = fastln.layer_norm(torch.from_numpy(x).cuda()).cpu().numpy()
    want = ref_forward(x)[0]
    assert np.abs(y - want).max() < 2e-3  # torch's float32 mean loses ~0.06 here
    np.testing.assert_allclose(y, fastln.layer_norm(x), atol=2e-3)
    x[3, 10] = np.nan
    x[5, 0] = np.inf
    y = fastln.layer_norm(torch.from_numpy(x).cuda()).cpu().numpy()
    assert np.isnan(y[3]).all() and np.isnan(y[5]).all() and np.isfinite(y[[0, 1, 2, 4]]).all()


def _far_rows_and_limit_rows(dev, host, cols):
    """Backward at an offset of 1e6 against the exact mean (the float32 mean is off by up to 0.03
    there, which the kernels must recover, as the CPU path does), and forward rows of finite
    values of both signs near float32's limit (their differences from the pivot overflow)."""
    rng = np.random.default_rng(cols)
    rows = 64 if cols < 4096 else 3
    x = (1e6 + rng.standard_normal((rows, cols))).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    _, m, s = fastln.layer_norm(dev(x), dev(w), return_stats=True)
    dx, dw, db = map(host, fastln.layer_norm_backward(dev(dy), dev(x), m, s, dev(w)))
    exact = x.astype(np.float64).mean(axis=1)
    rdx, rdw, rdb = ref_backward(dy, x, exact, host(s), w)
    assert np.abs(dx - rdx).max() <= 1e-4 * np.abs(rdx).max()
    assert np.abs(dw - rdw).max() <= 1e-4 * np.abs(rdw).max()
    assert np.abs(db - rdb).max() <= 1e-4 * np.abs(rdb).max()
    big = np.clip(rng.standard_normal((rows, cols)) * 1.5e38, -3.3e38, 3.3e38).astype(np.float32)
    y, m, s = map(host, fastln.layer_norm(dev(big), return_stats=True))
    want, wm, ws = ref_forward(big)
    np.testing.assert_allclose(y, want, atol=1e-4)
    # The mean, ~1e35 under a spread of 1.5e38, to float32's precision of the spread
    np.testing.assert_allclose(m, wm, rtol=0, atol=1e-6 * np.abs(big).max())
    np.testing.assert_allclose(s, ws, rtol=1e-4)


@pytest.mark.parametrize("cols", [768, 40000])
def test_far_rows_check_holds_on_the_cpu_path(cols):
    """The check the GPU test below makes, on the CPU path, which recovers the mean's rounding."""
    _far_rows_and_limit_rows(lambda a: a, np.asarray, cols)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("cols", [768, 40000])
def test_gpu_far_rows_backward_and_rows_near_the_float32_limit(cols):
    torch = _torch_cuda()
    _far_rows_and_limit_rows(lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy(), cols)


@pytest.mark.cuda
@needs_gpu
def test_gpu_runs_on_the_current_stream_and_device_errors():
    torch = _torch_cuda()
    x = torch.randn(512, 768, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = fastln.layer_norm(x)
    s.synchronize()
    _close(y, ref_forward(x.double().cpu().numpy())[0], "float32", "stream")
    with pytest.raises(TypeError, match="numpy"):
        fastln.layer_norm(x, np.ones(768, np.float32))
    with pytest.raises(TypeError, match="CPU|numpy|cpu|GPU"):
        _cuda_api.layer_norm(x, torch.ones(768))


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA["available"], reason="needs a GPU")
def test_gpu_cupy_arrays():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    xh = rng.standard_normal((100, 1000)).astype(np.float32)
    x = cp.asarray(xh)
    y = fastln.layer_norm(x, cp.ones(1000, np.float32))
    assert isinstance(y, cp.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(cp.asnumpy(y), ref_forward(xh)[0], atol=2e-5)
    y16 = fastln.layer_norm(x.astype(cp.float16))
    assert y16.dtype == np.float16
    with pytest.raises(TypeError, match="numpy"):
        fastln.layer_norm(x, np.ones(1000, np.float32))
