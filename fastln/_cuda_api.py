"""GPU arrays in fastln's ops: CuPy arrays and torch CUDA tensors (numba device arrays through CuPy).

The public functions in fastln call `on_gpu(...)` first; when an argument lives on a GPU they hand
the whole call to this module, which:
  - tells the array's library from the array (torch, CuPy; others exposing
    __cuda_array_interface__ or a CUDA __dlpack_device__ are named in a TypeError);
  - views each array as rows x cols with a unit inner stride (copying through its own library when
    the layout does not allow that), weight/bias/statistics as contiguous float32;
  - allocates outputs with the same library on the same device, so the same kind of array comes
    back, and launches on that library's current stream (torch.cuda.current_stream(),
    cupy.cuda.get_current_stream());
  - raises TypeError when CPU and GPU arrays, or two libraries, are mixed, and ValueError for two
    devices.

The kernels are in src/cuda (C API include/fastln/fastln_cuda.h, binding fastln/_cuda.pyx). Nothing
here imports torch or CuPy unless an array of theirs is seen, and nothing imports fastln._cuda
until a GPU array or runtime_info() asks for it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._args import check_eps, normalize_axis

_KDL_CUDA = 2
_KDL_CUDA_MANAGED = 13

_state: dict | None = None


def _load() -> dict:
    """{'compiled', 'available', 'detail', 'module'}, computed once."""
    global _state
    if _state is not None:
        return _state
    try:
        from . import _cuda
    except (ImportError, OSError) as e:
        _state = {
            "compiled": False,
            "available": False,
            "detail": f"the CUDA extension fastln._cuda is not part of this build ({e})",
            "module": None,
        }
        return _state
    v = _cuda.runtime_version()
    built = f"built with CUDA runtime {v // 1000}.{v % 1000 // 10}"
    n, why = _cuda.device_count()
    if n > 0:
        detail = f"{n} CUDA device(s); {built}"
    else:
        detail = f"no usable CUDA device: {why or 'the runtime reports none'}; {built}"
    _state = {"compiled": True, "available": n > 0, "detail": detail, "module": _cuda}
    return _state


def info() -> dict:
    """What runtime_info()['cuda'] reports: compiled, available, and why in words."""
    s = _load()
    return {"compiled": s["compiled"], "available": s["available"], "detail": s["detail"]}


# ---- telling GPU arrays apart ----------------------------------------------------------------------

def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def is_gpu_array(a) -> bool:
    """Whether a is an array in CUDA device memory (CuPy, torch, numba, or any DLPack producer)."""
    if a is None or type(a) is np.ndarray or isinstance(a, (int, float, list, tuple)):
        return False
    if _is_torch(a):
        return bool(getattr(a, "is_cuda", False))
    try:
        getattr(a, "__cuda_array_interface__")  # noqa: B009 (a property: reading it is the test)
        return True
    except AttributeError:
        pass
    except (TypeError, ValueError, RuntimeError):  # a property that refuses (a CPU array)
        return False
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None:
        try:
            return int(dev()[0]) in (_KDL_CUDA, _KDL_CUDA_MANAGED)
        except (TypeError, ValueError, RuntimeError, IndexError):
            return False
    return False


_NDARRAY = np.ndarray


def on_gpu(*arrays) -> bool:
    """Whether any argument is a GPU array: the public ops' one-line hook. Cheap for NumPy."""
    for a in arrays:
        if a is not None and type(a) is not _NDARRAY and is_gpu_array(a):
            return True
    return False


def with_gpu_path(cpu_fn, gpu_fn):
    """cpu_fn, except that a call with a GPU array among its arguments goes to gpu_fn (which takes
    the same arguments): the hook for public ops defined outside fastln/__init__.py."""

    @functools.wraps(cpu_fn)
    def op(*args, **kwargs):
        if on_gpu(*args, *kwargs.values()):
            return gpu_fn(*args, **kwargs)
        return cpu_fn(*args, **kwargs)

    return op


# ---- the libraries ---------------------------------------------------------------------------------

class _Torch:
    name = "torch"

    def __init__(self):
        import torch

        self.t = torch
        self.codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
        self.dtypes = {v: k for k, v in self.codes.items()}

    def owns(self, a) -> bool:
        return isinstance(a, self.t.Tensor)

    def device(self, a) -> int:
        return a.device.index if a.is_cuda else -1

    def code(self, a) -> int | None:
        return self.codes.get(a.dtype)

    def dtype_name(self, a) -> str:
        return str(a.dtype).replace("torch.", "")

    def is_float(self, a) -> bool:
        return a.is_floating_point()

    def ptr(self, a) -> int:
        return a.data_ptr()

    def strides(self, a) -> tuple:
        return tuple(a.stride())

    def itemsize(self, a) -> int:
        return a.element_size()

    def empty(self, shape, code, like):
        return self.t.empty(tuple(shape), dtype=self.dtypes[code], device=like.device)

    def zeros_f32(self, shape, like):
        return self.t.zeros(tuple(shape), dtype=self.t.float32, device=like.device)

    def contiguous(self, a):
        return a.contiguous()

    def reshape(self, a, shape):
        return a.reshape(tuple(shape))

    def as_f32_vector(self, a):
        return a.detach().to(self.t.float32).contiguous().reshape(-1)

    def copy_into(self, dst, src):
        with self.t.no_grad():
            dst.copy_(src)

    def workspace(self, nbytes, like):
        # float32 elements: 16-byte aligned like every allocation of the caching allocator.
        return self.t.empty((max(1, (nbytes + 3) // 4),), dtype=self.t.float32, device=like.device)

    def stream(self, device) -> int:
        return int(self.t.cuda.current_stream(device).cuda_stream)


class _Cupy:
    name = "cupy"

    def __init__(self):
        import cupy  # type: ignore[import-not-found]

        self.cp = cupy
        self.codes = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
        self.dtypes = {v: k for k, v in self.codes.items()}

    def owns(self, a) -> bool:
        return isinstance(a, self.cp.ndarray)

    def device(self, a) -> int:
        return a.device.id

    def code(self, a) -> int | None:
        return self.codes.get(np.dtype(a.dtype))

    def dtype_name(self, a) -> str:
        return str(a.dtype)

    def is_float(self, a) -> bool:
        return a.dtype.kind == "f"

    def ptr(self, a) -> int:
        return a.data.ptr

    def strides(self, a) -> tuple:
        return tuple(s // a.itemsize for s in a.strides)

    def itemsize(self, a) -> int:
        return a.itemsize

    def empty(self, shape, code, like):
        with self.cp.cuda.Device(like.device.id):
            return self.cp.empty(tuple(shape), dtype=self.dtypes[code])

    def zeros_f32(self, shape, like):
        with self.cp.cuda.Device(like.device.id):
            return self.cp.zeros(tuple(shape), dtype=np.float32)

    def contiguous(self, a):
        with self.cp.cuda.Device(a.device.id):
            return self.cp.ascontiguousarray(a)

    def reshape(self, a, shape):
        return a.reshape(tuple(shape))

    def as_f32_vector(self, a):
        with self.cp.cuda.Device(a.device.id):
            return self.cp.ascontiguousarray(a.astype(np.float32, copy=False)).reshape(-1)

    def copy_into(self, dst, src):
        with self.cp.cuda.Device(dst.device.id):
            dst[...] = src

    def workspace(self, nbytes, like):
        with self.cp.cuda.Device(like.device.id):
            return self.cp.empty((max(1, (nbytes + 3) // 4),), dtype=np.float32)

    def stream(self, device) -> int:
        with self.cp.cuda.Device(device):
            return int(self.cp.cuda.get_current_stream().ptr)


_libs: dict = {}


def _lib(name):
    if name not in _libs:
        _libs[name] = _Torch() if name == "torch" else _Cupy()
    return _libs[name]


def _lib_of(a, what: str):
    """The library object for GPU array a; numba arrays travel as zero-copy CuPy views."""
    if _is_torch(a):
        return _lib("torch"), a
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        return _lib("cupy"), a
    if mod == "numba" and hasattr(a, "__cuda_array_interface__"):
        try:
            lib = _lib("cupy")
        except ImportError:
            raise TypeError(
                f"{what}: numba device arrays go through CuPy, which is not installed"
            ) from None
        return lib, lib.cp.asarray(a)
    raise TypeError(
        f"{what} is a {type(a).__module__}.{type(a).__name__} on a GPU; fastln's CUDA path takes "
        "CuPy arrays and torch CUDA tensors (convert with cupy.from_dlpack or torch.from_dlpack)"
    )


def _back(orig, out):
    """Outputs for numba inputs go back as numba arrays (zero copy)."""
    if type(orig).__module__.split(".")[0] == "numba" and out is not None:
        from numba import cuda as nb_cuda  # type: ignore[import-not-found]

        return nb_cuda.as_cuda_array(out)
    return out


def _describe(a) -> str:
    if type(a) is np.ndarray:
        return "a numpy.ndarray (CPU)"
    return f"a {type(a).__module__}.{type(a).__name__}"


class _Call:
    """The library, device and stream of one call, set by its first GPU array."""

    def __init__(self, x, what="x", others=()):
        name, g = next((n, a) for n, a in ((what, x), *others) if a is not None and is_gpu_array(a))
        st = _load()
        if not st["available"]:
            raise RuntimeError(
                f"fastln: {name} is a GPU array ({_describe(g)}) but the CUDA path is "
                f"unavailable: {st['detail']}"
            )
        if g is not x:
            raise TypeError(
                f"{what} is {_describe(x)} but {name} is on the GPU; pass both on the same device"
            )
        self.mod = st["module"]
        self.orig = x
        self.lib, self.x = _lib_of(x, what)
        self.device = self.lib.device(self.x)
        self.what = what

    def same(self, a, what: str):
        """a on the same library and device as x, or a clear error."""
        if a is None:
            return None
        if not is_gpu_array(a):
            raise TypeError(
                f"{what} is {_describe(a)} but {self.what} is on the GPU (cuda:{self.device}); "
                "pass both on the same device"
            )
        lib, a2 = _lib_of(a, what)
        if lib is not self.lib:
            raise TypeError(
                f"{what} is a {lib.name} array but {self.what} is a {self.lib.name} array; "
                "fastln does not mix array libraries"
            )
        if lib.device(a2) != self.device:
            raise ValueError(
                f"{what} is on cuda:{lib.device(a2)} but {self.what} is on cuda:{self.device}"
            )
        return a2

    def code(self, a, what: str) -> int:
        c = self.lib.code(a)
        if c is None:
            raise TypeError(
                f"{what} has dtype {self.lib.dtype_name(a)}; fastln's CUDA path supports "
                "float32, float16 and bfloat16"
            )
        return c

    def rows(self, a, rows: int, cols: int):
        """(a as a rows x cols array with unit inner stride, its row stride)."""
        st = self.lib.strides(a)
        if _c_contiguous(a.shape, st):
            return self.lib.reshape(a, (rows, cols)), cols
        # Only an array that is already rows x cols: axis=0 on a 2-D (A, B) view makes one row of
        # A*B values, which that view's gaps between its rows cannot hold.
        if tuple(a.shape) == (rows, cols) and (st[1] == 1 or cols == 1) and (
                rows == 1 or st[0] >= cols):
            return a, (st[0] if rows > 1 else cols)
        return self.lib.reshape(self.lib.contiguous(a), (rows, cols)), cols

    def param(self, p, what: str, shape: tuple):
        if p is None:
            return None
        p = self.same(p, what)
        if tuple(p.shape) != tuple(shape):
            raise ValueError(
                f"{what} has shape {tuple(p.shape)} but the normalized shape of x is {tuple(shape)}"
            )
        if not self.lib.is_float(p):
            raise TypeError(f"{what} has dtype {self.lib.dtype_name(p)}; expected a float dtype")
        return self.lib.as_f32_vector(p)

    def stats(self, s, what: str, shape: tuple):
        s = self.same(s, what)
        if not self.lib.is_float(s):
            raise TypeError(f"{what} has dtype {self.lib.dtype_name(s)}; expected a float dtype")
        if tuple(s.shape) != tuple(shape):
            raise ValueError(f"{what} has shape {tuple(s.shape)}, expected {tuple(shape)}")
        return self.lib.as_f32_vector(s)

    def stream(self) -> int:
        return self.lib.stream(self.device)

    def span(self, a2, ld: int) -> tuple:
        rows, cols = a2.shape
        size = self.lib.itemsize(a2)
        p = self.lib.ptr(a2)
        return p, p + ((rows - 1) * ld + cols) * size if rows else p

    def out(self, given, what: str, shape, code):
        """An output array: `given`, checked, or a new one."""
        if given is None:
            return self.lib.empty(shape, code, self.x)
        y = self.same(given, what)
        if tuple(y.shape) != tuple(shape):
            raise ValueError(f"{what} has shape {tuple(y.shape)} but x has shape {tuple(shape)}")
        if self.lib.code(y) != code:
            raise TypeError(f"{what} has dtype {self.lib.dtype_name(y)}, not x's")
        return y

    def ptr(self, a) -> int:
        return 0 if a is None else self.lib.ptr(a)


def _c_contiguous(shape, strides) -> bool:
    expect = 1
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _target(call: _Call, y, rows, cols, inputs):
    """(2-D array the kernel writes, its ld, whether to copy it into y afterwards)."""
    # The kernels write y itself when it views as rows and either overlaps no input or is one
    # element for element; otherwise they write a temporary that is copied into y.
    y2, ld = call.rows(y, rows, cols)
    copied = call.lib.ptr(y2) != call.lib.ptr(y)
    if not copied:
        lo, hi = call.span(y2, ld)
        for a2, lda in inputs:
            if a2 is None:
                continue
            alo, ahi = call.span(a2, lda)
            if lo < ahi and alo < hi and not (lo == alo and ld == lda):
                copied = True
                break
    if copied:
        y2 = call.lib.empty((rows, cols), call.lib.code(y), call.x)
        ld = cols
    return y2, ld, copied


def _apart(call: _Call, p, outs):
    """p (a contiguous float32 vector), or a copy of it where it shares memory with an output the
    kernel writes: other blocks read weight and bias while one writes y, and the CPU path reads
    them as if copied too."""
    if p is None:
        return None
    lo = call.lib.ptr(p)
    hi = lo + p.shape[0] * 4
    for o, ld in outs:
        if o is None:
            continue
        olo, ohi = call.span(o, ld)
        if olo < hi and lo < ohi:
            q = call.lib.empty(tuple(p.shape), 0, call.x)
            call.lib.copy_into(q, p)
            return q
    return p


def _shape(x, axis):
    ndim = len(x.shape)
    if ndim == 0:
        raise ValueError("x must have at least one dimension")
    ax = normalize_axis(axis, ndim)
    shape = tuple(x.shape)
    cols = math.prod(shape[ax:])
    rows = math.prod(shape[:ax])
    if cols == 0:
        raise ValueError(f"cannot normalize over a zero-size shape {shape[ax:]}")
    return ax, shape, rows, cols


# ---- forward ---------------------------------------------------------------------------------------

def _forward(rms, x, weight, bias, eps, axis, out, return_stats, residual, residual_out):
    call = _Call(x, "x", (("weight", weight), ("bias", bias), ("residual", residual),
                          ("out", out), ("residual_out", residual_out)))
    x = call.x
    code = call.code(x, "x")
    ax, shape, rows, cols = _shape(x, axis)
    e = check_eps(eps)
    norm_shape, stat_shape = shape[ax:], shape[:ax]
    w = call.param(weight, "weight", norm_shape)
    b = None if rms else call.param(bias, "bias", norm_shape)
    r = call.same(residual, "residual")
    if r is not None:
        if tuple(r.shape) != shape:
            raise ValueError(f"residual has shape {tuple(r.shape)} but x has shape {shape}")
        if call.lib.code(r) != code:
            raise TypeError(
                f"residual has dtype {call.lib.dtype_name(r)} but x has {call.lib.dtype_name(x)}"
            )
    elif residual_out is not None:
        raise ValueError("residual_out is given without residual")
    y = call.out(out, "out", shape, code)
    h = call.out(residual_out, "residual_out", shape, code) if r is not None else None
    # float32 statistics (code 0), every row written by the kernel
    mean = call.lib.empty(stat_shape, 0, x) if return_stats and not rms else None
    rstd = call.lib.empty(stat_shape, 0, x) if return_stats else None

    if rows > 0:
        x2, ldx = call.rows(x, rows, cols)
        r2, ldr = call.rows(r, rows, cols) if r is not None else (None, 0)
        inputs = [(x2, ldx)] + ([(r2, ldr)] if r2 is not None else [])
        h2, ldh, h_copy = _target(call, h, rows, cols, inputs) if h is not None else (None, 0, False)
        y_inputs = inputs + ([(h2, ldh)] if h2 is not None else [])
        y2, ldy, y_copy = _target(call, y, rows, cols, y_inputs)
        outs = [(y2, ldy), (h2, ldh)]
        w, b = _apart(call, w, outs), _apart(call, b, outs)
        p = call.ptr
        stream = call.stream()
        if rms:
            call.mod.rms_norm(code, p(x2), ldx, p(r2), ldr, p(y2), ldy, p(h2), ldh, p(w),
                              p(rstd), rows, cols, e, call.device, stream)
        else:
            call.mod.layer_norm(code, p(x2), ldx, p(r2), ldr, p(y2), ldy, p(h2), ldh, p(w), p(b),
                                p(mean), p(rstd), rows, cols, e, call.device, stream)
        if y_copy:
            call.lib.copy_into(y, call.lib.reshape(y2, shape))
        if h_copy:
            call.lib.copy_into(h, call.lib.reshape(h2, shape))

    back = lambda a: _back(call.orig, a)
    res = (back(y),) + ((back(h),) if r is not None else ())
    if return_stats:
        res += ((back(rstd),) if rms else (back(mean), back(rstd)))
    return res[0] if len(res) == 1 else res


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, axis=-1, out=None, return_stats=False,
               residual=None, residual_out=None):
    """fastln.layer_norm for GPU arrays; same arguments and results."""
    return _forward(False, x, weight, bias, eps, axis, out, return_stats, residual, residual_out)


def rms_norm(x, weight=None, eps=1e-6, *, axis=-1, out=None, return_stats=False, residual=None,
             residual_out=None):
    """fastln.rms_norm for GPU arrays; same arguments and results."""
    return _forward(True, x, weight, None, eps, axis, out, return_stats, residual, residual_out)


# ---- backward --------------------------------------------------------------------------------------

def _backward(rms, dy, x, mean, rstd, weight, axis, dresidual):
    call = _Call(dy, "dy", (("x", x), ("mean", mean), ("rstd", rstd), ("weight", weight),
                            ("dresidual", dresidual)))
    x = call.same(x, "x")
    dy = call.same(dy, "dy")
    code = call.code(x, "x")
    ax, shape, rows, cols = _shape(x, axis)
    if tuple(dy.shape) != shape:
        raise ValueError(f"dy has shape {tuple(dy.shape)} but x has shape {shape}")
    if call.lib.code(dy) != code:
        raise TypeError(f"dy has dtype {call.lib.dtype_name(dy)} but x has {call.lib.dtype_name(x)}")
    norm_shape, stat_shape = shape[ax:], shape[:ax]
    m = None if rms else call.stats(mean, "mean", stat_shape)
    rs = call.stats(rstd, "rstd", stat_shape)
    w = call.param(weight, "weight", norm_shape)
    dr = call.same(dresidual, "dresidual")
    if dr is not None and (tuple(dr.shape) != shape or call.lib.code(dr) != code):
        raise ValueError("dresidual must have x's shape and dtype")
    dx = call.lib.empty(shape, code, x)
    want = w is not None
    dw = call.lib.zeros_f32(norm_shape, x) if want else None
    db = call.lib.zeros_f32(norm_shape, x) if want and not rms else None
    if rows > 0:
        x2, ldx = call.rows(x, rows, cols)
        dy2, lddy = call.rows(dy, rows, cols)
        dr2, lddr = call.rows(dr, rows, cols) if dr is not None else (None, 0)
        dx2, lddx = call.rows(dx, rows, cols)
        ws, nbytes = None, 0
        if want:
            nbytes = call.mod.backward_workspace(code, rms, rows, cols, True, not rms, call.device)
            ws = call.lib.workspace(nbytes, x)
        p = call.ptr
        stream = call.stream()
        if rms:
            call.mod.rms_norm_backward(code, p(dy2), lddy, p(x2), ldx, p(rs), p(w), p(dr2), lddr,
                                       p(dx2), lddx, p(dw), p(ws), nbytes, rows, cols,
                                       call.device, stream)
        else:
            call.mod.layer_norm_backward(code, p(dy2), lddy, p(x2), ldx, p(m), p(rs), p(w), p(dr2),
                                         lddr, p(dx2), lddx, p(dw), p(db), p(ws), nbytes, rows,
                                         cols, call.device, stream)
    back = lambda a: _back(call.orig, a)
    if rms:
        return back(dx), back(dw)
    return back(dx), back(dw), back(db)


def layer_norm_backward(dy, x, mean, rstd, weight=None, *, axis=-1, dresidual=None):
    """fastln.layer_norm_backward for GPU arrays: (dx, dweight, dbias); dweight/dbias are float32
    and None without weight. dresidual (GPU only) is added to dx: the fused residual's backward."""
    return _backward(False, dy, x, mean, rstd, weight, axis, dresidual)


def rms_norm_backward(dy, x, rstd, weight=None, *, axis=-1, dresidual=None):
    """fastln.rms_norm_backward for GPU arrays: (dx, dweight)."""
    return _backward(True, dy, x, None, rstd, weight, axis, dresidual)
