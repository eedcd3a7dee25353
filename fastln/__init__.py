"""fastln: fast, accurate Layer Normalization for NumPy on CPUs.

    >>> import numpy as np, fastln
    >>> x = np.random.default_rng(0).standard_normal((4, 768), dtype=np.float32)
    >>> y = fastln.layer_norm(x)
    >>> bool(abs(y.mean(axis=-1)).max() < 1e-6)
    True

The arithmetic runs in C++ kernels (AVX-512, AVX2+FMA, NEON or scalar, picked at import); this
module does the argument work: dtypes, shapes, axes, out=, and copies of layouts the kernels do not
take.
"""

from __future__ import annotations

import functools
import math
import operator
import os
import re
from typing import Optional, Sequence, Tuple, Union

import numpy as np


def _find_built_package() -> None:
    """Let a source checkout's fastln/ use the extension of the installed copy.

    `pip install . && python -m fastln.bench`, run in the checkout, imports this source folder (the
    current folder comes first on sys.path), which holds no compiled extension unless it was built
    in place. The installed copy was built from the same sources, so its folder joins this package's
    __path__ and the extension modules load from there.
    """
    import glob
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if glob.glob(os.path.join(here, "_core.*.so")) or glob.glob(os.path.join(here, "_core.*.pyd")):
        return
    for entry in sys.path:
        d = os.path.join(os.path.abspath(entry or os.curdir), "fastln")
        if d != here and (glob.glob(os.path.join(d, "_core.*.so")) or glob.glob(os.path.join(d, "_core.*.pyd"))):
            __path__.append(d)
            return
    raise ImportError(
        "fastln's compiled extension is missing: install fastln (pip install .) or build it in "
        "place (python setup.py build_ext --inplace)"
    )


_find_built_package()

from . import _add_norm, _core, _cuda_api, _training  # noqa: E402
from ._args import (  # noqa: E402
    apart_from,
    as_array,
    as_float_array,
    check_eps,
    check_out,
    normalize_axis,
    param,
    rows_view,
    same_block,
)
from ._training import RMSNorm, _NormModule  # noqa: E402

# GPU arrays (CuPy, torch CUDA tensors) go to the CUDA path; see _cuda_api.
_rms_norm = _cuda_api.with_gpu_path(_training.rms_norm, _cuda_api.rms_norm)


# Its common call (no residual) runs its checks in C too, through the fused kernels' entry with no
# residual: at 1x768 the general path cost 4.8 us against torch's 10.9.
@functools.wraps(_training.rms_norm)
def rms_norm(x, weight=None, eps: float = 1e-6, *, axis: int = -1, out=None,
             return_stats: bool = False, residual=None, residual_out=None):
    if residual is None and residual_out is None and type(x) is np.ndarray:
        got = _core.add_norm_fast(x, None, weight, None, eps, out, None, axis, return_stats, True)
        if got is not None:
            return got
    return _rms_norm(x, weight, eps, axis=axis, out=out, return_stats=return_stats,
                     residual=residual, residual_out=residual_out)
_layer_norm_backward = _cuda_api.with_gpu_path(
    _training.layer_norm_backward, _cuda_api.layer_norm_backward
)
_rms_norm_backward = _cuda_api.with_gpu_path(
    _training.rms_norm_backward, _cuda_api.rms_norm_backward
)


# The common call (NumPy arrays of one float dtype, C-contiguous, the last axis) runs its checks in
# C, as layer_norm's does: at 1x768 the layers of Python around it cost three times the kernel.
# Any other call, GPU arrays included, gets None there and takes the general path.
@functools.wraps(_training.layer_norm_backward)
def layer_norm_backward(dy, x, mean, rstd, weight=None, *, axis: int = -1):
    got = _core.norm_backward_fast(dy, x, mean, rstd, weight, axis, True)
    if got is not None:
        return got
    return _layer_norm_backward(dy, x, mean, rstd, weight, axis=axis)


@functools.wraps(_training.rms_norm_backward)
def rms_norm_backward(dy, x, rstd, weight=None, *, axis: int = -1):
    got = _core.norm_backward_fast(dy, x, None, rstd, weight, axis, False)
    if got is not None:
        return got[:2]
    return _rms_norm_backward(dy, x, rstd, weight, axis=axis)

__version__ = "0.1.0"

__all__ = [
    "layer_norm",
    "LayerNorm",
    "rms_norm",
    "RMSNorm",
    "layer_norm_backward",
    "rms_norm_backward",
    "runtime_info",
    "set_isa",
    "get_isa",
    "set_num_threads",
    "get_num_threads",
    "set_stream_bytes",
    "get_stream_bytes",
    "set_band_bytes",
    "get_band_bytes",
    "set_cache_limit",
    "cache_info",
    "__version__",
]

_ISAS = ("scalar", "avx2", "avx512", "neon")


def _startup_check() -> None:
    status, _ = _core.init_status()
    if status != 0:
        name = os.environ.get("FASTLN_ISA", "")
        usable = ", ".join(n for n in _ISAS if _core.isa_supported(n))
        if status == _core.UNKNOWN_ISA:
            raise ImportError(
                f"fastln: FASTLN_ISA={name!r} is not a known ISA; known: {', '.join(_ISAS)} "
                f"(usable here: {usable})"
            )
        raise ImportError(
            f"fastln: FASTLN_ISA={name!r} cannot run on this CPU or build; usable here: {usable}"
        )


_startup_check()

ArrayLike = Union[np.ndarray, Sequence, float]



# ---- runtime control -----------------------------------------------------------------------------

def get_isa() -> str:
    """The active instruction set: 'avx512', 'avx2', 'neon' or 'scalar'."""
    return _core.isa()


def set_isa(name: Optional[str]) -> None:
    """Switch the kernels to ISA `name` ('scalar', 'avx2', 'avx512', 'neon'); None restores the automatic choice.

    Raises ValueError for an unknown name and RuntimeError for an ISA this CPU or build cannot run;
    the active ISA is then unchanged. Meant for tests and benchmarks: it affects the whole process.
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"ISA name must be a str or None, not {type(name).__name__}")
    if name is not None:
        name = str(name)  # a subclass (numpy.str_) as the plain str the binding takes
    if name is not None and "\0" in name:  # C would read "avx2\0junk" as "avx2"
        raise ValueError(f"unknown ISA {name!r}; known: {', '.join(_ISAS)}")
    status = _core.set_isa(name)
    if status == _core.UNKNOWN_ISA:
        raise ValueError(f"unknown ISA {name!r}; known: {', '.join(_ISAS)}")
    if status == _core.UNSUPPORTED_ISA:
        usable = ", ".join(n for n in _ISAS if _core.isa_supported(n))
        raise RuntimeError(f"ISA {name!r} cannot run on this CPU or build; usable here: {usable}")


_INT64_MAX = (1 << 63) - 1


def _count(what: str, v, none_ok: str = "", cap: Optional[int] = None) -> int:
    """v as a count for the C setters: an int (not a bool, which operator.index takes as 0 or 1;
    axis=True is refused too) from 0 to 2**63 - 1, so that a value past C's int64 is a ValueError
    that names the setting rather than Cython's OverflowError; with cap, any larger v is cap."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, not bool")
    v = operator.index(v)
    if v < 0:
        raise ValueError(f"{what} must be >= 0{none_ok}, got {v}")
    if cap is not None and v > cap:
        return cap
    if v > _INT64_MAX:
        raise ValueError(f"{what} must be at most 2**63 - 1, got {v}")
    return v


def set_num_threads(n: int) -> None:
    """Use at most n threads; n = 0 follows OpenMP again (OMP_NUM_THREADS, threadpoolctl). More
    than 1024 counts as 1024, the most the thread pool runs (get_num_threads says so)."""
    _core.set_num_threads(_count("number of threads", n, cap=1024))


def get_num_threads() -> int:
    """The most threads a call may use (1 in a build without OpenMP)."""
    return _core.get_num_threads()


def _bytes_or_default(name: str, v: Optional[int]) -> int:
    """A size for the C setters: v checked, or -1 (the default) for None."""
    return -1 if v is None else _count(name, v, " or None")


def set_stream_bytes(nbytes: Optional[int] = None, nbytes16: Optional[int] = None) -> None:
    """Write outputs of at least nbytes (float32, float64) or nbytes16 (float16, bfloat16) with
    streaming stores, which skip the caches; None restores the default (2 MiB and 32 MiB; on AMD
    CPUs, for float32 and float64 layer norms, from 16 MiB when one is split across threads, the
    residual add aside, and from at least 8 MiB in rows of 16 KiB or more with weight or bias that
    take the column bands, see set_band_bytes; or FASTLN_STREAM_MIB MiB when set at start-up).
    rms_norm of float32 and float64 rows of 1 KiB or more streams too, without the residual add,
    at the size for long rows split across threads (on AMD CPUs 16 MiB) at every thread count;
    rows of exactly 1 KiB, which the AVX-512 kernels take as short rows, only where every row of
    the output is whole cache lines (otherwise the call takes plain stores).
    The sizes count the whole call's output and, once set, apply at every thread count and row
    length. Calls in place (out= x, or with the residual add x or the residual) never stream.
    Where the crossover lies depends on the machine's caches: see README, "Choosing the
    ISA and the number of threads", and docs/performance-notes.md."""
    _core.set_stream_bytes(
        _bytes_or_default("nbytes", nbytes), _bytes_or_default("nbytes16", nbytes16)
    )


def get_stream_bytes() -> Tuple[int, int]:
    """(nbytes, nbytes16): the output sizes from which fastln streams a call run on one thread, in
    rows shorter than 16 KiB (see set_stream_bytes)."""
    return _core.get_stream_bytes()


def set_band_bytes(nbytes: Optional[int] = None) -> None:
    """Normalize layer_norm rows of at least nbytes in column bands across groups of up to 8 rows
    (when y is not streamed and weight or bias is given), so that weight and bias are read from L2
    once a group rather than once a row. A value set applies to every dtype. None restores the
    default, from where that was measured faster: on AMD CPUs 8192, and for float32 and float64
    rows just over a fifth of L1d where that is more (9831 with a 48 KiB L1d); on Intel CPUs 16384
    for float32 and float64 rows and never for float16 and bfloat16 rows; never elsewhere
    (get_band_bytes() gives 2**63 - 1). The output is bit for bit the same either way; only the
    speed differs."""
    _core.set_band_bytes(_bytes_or_default("nbytes", nbytes))


def get_band_bytes() -> int:
    """The row length in bytes from which layer_norm uses column bands on float32 and float64 rows
    (see set_band_bytes)."""
    return _core.get_band_bytes()


def runtime_info() -> dict:
    """What this build and machine run: version, ISA, usable ISAs, OpenMP, threads, CUDA."""
    return {
        "version": __version__,
        "isa": _core.isa(),
        "best_isa": _core.best_isa(),
        "isas": [n for n in _ISAS if _core.isa_supported(n)],
        "openmp": _core.has_openmp(),
        "num_threads": _core.get_num_threads(),
        "stream_bytes": _core.get_stream_bytes(),
        "band_bytes": _core.get_band_bytes(),
        "phased_bytes": _core.get_phased_bytes(),
        "cuda": _cuda_info(),
    }


def _cuda_info() -> dict:
    return _cuda_api.info()


def set_cache_limit(nbytes: int) -> int:
    """Bound the memory fastln keeps for reuse as outputs, in bytes; returns the previous bound.

    Outputs of 1 MiB or more that fastln allocates (no out=) come from a cache of the blocks its
    earlier outputs freed, so a new result does not pay a page fault per 4 KiB on its first write:
    at 512x4096 float32 they made a call 1.5x as slow as one given out=. Blocks enter the cache only
    when NumPy frees such an output, and it keeps at most `nbytes` of them (by default an eighth of
    the machine's memory, at most 1 GiB; FASTLN_CACHE_MB at import). 0 turns the cache off and frees
    it.
    """
    return _core.set_cache_limit(_count("cache limit (bytes)", nbytes))


def cache_info() -> dict:
    """The output cache: limit and bytes held, blocks held, hits and misses (see set_cache_limit)."""
    return _core.cache_info()


def _cache_limit_from_env() -> None:
    value = os.environ.get("FASTLN_CACHE_MB")
    if value is None or not value.strip():  # empty counts as unset, as FASTLN_ISA's does
        return
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb >= 0 or mb > 2**40:
        raise ImportError(f"fastln: FASTLN_CACHE_MB={value!r} is not a size in MiB >= 0")
    set_cache_limit(int(mb * 2**20))


_cache_limit_from_env()


def _check_stream_mib_env() -> None:
    # Read by the C library (src/dispatch.cpp), which cannot raise and would take a value that is
    # not a whole number as unset: refused here, as a bad FASTLN_ISA or FASTLN_CACHE_MB is.
    value = os.environ.get("FASTLN_STREAM_MIB")
    if value and not re.fullmatch(r"\s*[+-]?[0-9]+", value):
        raise ImportError(f"fastln: FASTLN_STREAM_MIB={value!r} is not a whole number of MiB")


_check_stream_mib_env()


def _check_phased_mib_env() -> None:
    # Read by the C library (src/dispatch.cpp, PhasedBytes), which takes a value that is not a
    # whole number as unset: refused here, as a bad FASTLN_STREAM_MIB is.
    value = os.environ.get("FASTLN_PHASED_MIB")
    if value and not re.fullmatch(r"\s*[+-]?[0-9]+", value):
        raise ImportError(f"fastln: FASTLN_PHASED_MIB={value!r} is not a whole number of MiB")


_check_phased_mib_env()


def _check_normalize_from_env() -> None:
    # Read by the C library (src/dispatch.cpp), which takes any value but x and y as unset.
    value = os.environ.get("FASTLN_NORMALIZE_FROM")
    if value and value not in ("x", "y"):
        raise ImportError(f"fastln: FASTLN_NORMALIZE_FROM={value!r} is neither x nor y")


_check_normalize_from_env()


def layer_norm(
    x: ArrayLike,
    weight: Optional[ArrayLike] = None,
    bias: Optional[ArrayLike] = None,
    eps: float = 1e-5,
    *,
    axis: int = -1,
    out: Optional[np.ndarray] = None,
    return_stats: bool = False,
    residual: Optional[ArrayLike] = None,
    residual_out: Optional[np.ndarray] = None,
):
    """Layer normalization (Ba, Kiros & Hinton, 2016) over the axes [axis, x.ndim).

    y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and the biased variance taken over
    the normalized axes of each example. These are the semantics of ONNX LayerNormalization and of
    torch.nn.functional.layer_norm with normalized_shape = x.shape[axis:].

    Parameters
    ----------
    x : array_like of float32, float64, float16 or bfloat16 (ml_dtypes), ndim >= 1, any strides.
        float16 and bfloat16 are computed in float32 and rounded once to x's dtype. A CuPy array
        or torch CUDA tensor (float32, float16, bfloat16) runs on its GPU and gives the same kind
        back; its weight, bias and residual must be on the same device.
    weight, bias : None, or arrays of shape x.shape[axis:] (cast to x's dtype; to float32 for
        float16 and bfloat16 x).
    eps : float >= 0, added to the variance.
    axis : first normalized axis (negative counts from the end).
    out : array of x's shape and dtype to write into; may be x itself (in place).
    return_stats : also return mean and rstd = 1/sqrt(var + eps), of shape x.shape[:axis]
        (float32 for float16 and bfloat16 x).
    residual : array of x's shape and dtype. Then h = x + residual (rounded once to x's dtype,
        exactly NumPy's x + residual) is normalized instead of x, and returned too: the residual
        add of a transformer block, fused into the norm (x and residual are read once).
    residual_out : array of x's shape and dtype to write h into; may be x or residual itself.

    Returns
    -------
    y; (y, h) with residual; either followed by mean, rstd when return_stats is true.

    Examples
    --------
    >>> import numpy as np, fastln
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    >>> fastln.layer_norm(x, eps=0.0).round(4)
    array([[-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
    >>> y, mean, rstd = fastln.layer_norm(x, return_stats=True)
    >>> float(mean[0])
    2.5
    >>> y, h = fastln.layer_norm(x, residual=np.ones_like(x))
    >>> h
    array([[2., 3., 4., 5.]], dtype=float32)
    """
    if residual is None and residual_out is None:
        # The common call (a C-contiguous array over its last axis, plain parameters, out None or
        # not overlapping x; float16 and bfloat16 too) runs with its checks done in C: at D = 768
        # the general path below costs several times the kernel. Any other call gets None back.
        y = _core.layer_norm_fast(x, weight, bias, eps, out, axis, return_stats)
        if y is not None:
            return y
    if _cuda_api.on_gpu(x, weight, bias, residual, residual_out):
        return _cuda_api.layer_norm(x, weight, bias, eps, axis=axis, out=out,
                                    return_stats=return_stats, residual=residual,
                                    residual_out=residual_out)
    x = as_array(x, "x")  # a list of float16 values is float16 x
    if residual is not None or residual_out is not None or _add_norm.is_16bit(x):
        return _add_norm.norm(
            False, x, weight, bias, eps, axis, out, return_stats, residual, residual_out
        )
    x = as_float_array(x, "x")
    ndim = x.ndim
    if ndim == 0:
        raise ValueError("x must have at least one dimension")
    ax = normalize_axis(axis, ndim)
    shape = x.shape
    norm_shape = shape[ax:]
    cols = math.prod(norm_shape)
    rows = math.prod(shape[:ax])
    if cols == 0:
        raise ValueError(f"cannot normalize over a zero-size shape {norm_shape}")
    e = check_eps(eps)
    dt = x.dtype
    w = param(weight, "weight", norm_shape, dt)
    b = param(bias, "bias", norm_shape, dt)
    if out is not None:
        check_out(out, x)
        w, b = apart_from(w, out), apart_from(b, out)
    mean: Optional[np.ndarray] = None
    rstd: Optional[np.ndarray] = None
    if return_stats:
        mean = np.empty(shape[:ax], dtype=dt)
        rstd = np.empty(shape[:ax], dtype=dt)
    x2 = rows_view(x, rows, cols) if rows else None
    # A 2-D x whose examples are columns of x.T (Fortran order, as a transposed product leaves
    # it): the column kernel reads it as it lies, where NumPy's copy to rows costs many times the
    # norm (float32 2048x768: 3.6 ms against 0.15). y then has x's layout, as a ufunc's would.
    xt = rows_view(x.T, cols, rows) if rows and x2 is None and ndim == 2 and ax == 1 else None
    if xt is not None:
        yc = out if out is not None else np.empty(shape, dtype=dt, order="F")
        yt = rows_view(yc.T, cols, rows)
        if yt is not None and (
            out is None or not np.may_share_memory(xt, yt) or same_block(xt, yt)
        ):
            _core.layer_norm_2d(xt, yt, w, b, mean, rstd, e, False, True)
            return (yc, mean, rstd) if return_stats else yc
    y = out if out is not None else _core.empty(shape, dt)
    if rows == 0:
        return (y, mean, rstd) if return_stats else y

    if x2 is None:
        x2 = np.ascontiguousarray(x).reshape(rows, cols)
    y2 = rows_view(y, rows, cols)
    # Write through a temporary when y's layout is one the kernels do not take, or when y overlaps x
    # other than exactly (the kernels allow y == x element for element, nothing else).
    if y2 is not None and out is not None and np.may_share_memory(x2, y2):
        if not same_block(x2, y2):
            y2 = None
    tmp = y2 is None
    if y2 is None:
        y2 = np.empty((rows, cols), dtype=dt)
    _core.layer_norm_2d(
        x2, y2, w, b,
        None if mean is None else mean.reshape(-1),
        None if rstd is None else rstd.reshape(-1),
        e,
        out is None or tmp,  # y2 was just allocated
    )
    if tmp:
        y[...] = y2.reshape(shape)
    return (y, mean, rstd) if return_stats else y


class LayerNorm(_NormModule):
    """A layer norm with parameters, like torch.nn.LayerNorm, with forward/backward for training.

    >>> import numpy as np, fastln
    >>> ln = fastln.LayerNorm(8)
    >>> ln(np.ones((2, 8), dtype=np.float32)).shape
    (2, 8)
    >>> x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    >>> y = ln.forward(x)
    >>> dx = ln.backward(np.ones_like(y))
    >>> ln.grad_weight.shape, ln.grad_bias.tolist() == [2.0] * 8
    ((8,), True)
    """

    def __init__(
        self,
        normalized_shape: Union[int, Sequence[int]],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype=np.float32,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, dtype)

    def __call__(self, x: ArrayLike, *, out: Optional[np.ndarray] = None) -> np.ndarray:
        x = _add_norm.as_input(x, "x")
        self._saved = None
        return layer_norm(x, self.weight, self.bias, self.eps, axis=self._axis(x), out=out)

    def _forward(self, x, ax):
        return layer_norm(x, self.weight, self.bias, self.eps, axis=ax, return_stats=True)

    def _backward(self, dy, x, ax, mean, rstd):
        return layer_norm_backward(dy, x, mean, rstd, self.weight, axis=ax)

    def __repr__(self) -> str:
        return (
            f"LayerNorm({self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, dtype={self.dtype})"
        )
