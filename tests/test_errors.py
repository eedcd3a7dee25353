"""Bad input gets a clear exception, never a crash or a silently wrong answer."""

import numpy as np
import pytest

import fastln
from fastln._args import AxisError

X = np.zeros((4, 8), np.float32)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex64, object, np.uint8])
def test_bad_dtype(dtype):
    with pytest.raises(TypeError, match="float32, float64, float16 and bfloat16"):
        fastln.layer_norm(np.zeros((2, 3), dtype=dtype))


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_param_shape(which):
    with pytest.raises(ValueError, match=r"\(7,\).*\(8,\)"):
        fastln.layer_norm(X, **{which: np.ones(7, np.float32)})
    with pytest.raises(ValueError, match=which):
        fastln.layer_norm(X, **{which: np.ones((4, 8), np.float32)})


def test_param_dtype():
    with pytest.raises(TypeError):
        fastln.layer_norm(X, weight=np.ones(8, np.complex64))
    # long double is a real floating dtype: the message names the ones taken (where it is wider
    # than float64, as on x86-64 Linux)
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
            fastln.layer_norm(X, weight=np.ones(8, np.longdouble))


def test_out_errors():
    with pytest.raises(ValueError, match=r"\(4, 7\).*\(4, 8\)"):
        fastln.layer_norm(X, out=np.empty((4, 7), np.float32))
    with pytest.raises((TypeError, ValueError), match="dtype"):
        fastln.layer_norm(X, out=np.empty((4, 8), np.float64))
    ro = np.empty((4, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fastln.layer_norm(X, out=ro)
    with pytest.raises(TypeError):
        fastln.layer_norm(X, out=[[0.0] * 8] * 4)


@pytest.mark.parametrize("axis", [2, -3, 5, -10])
def test_axis_out_of_range(axis):
    with pytest.raises(AxisError):
        fastln.layer_norm(X, axis=axis)
    assert issubclass(AxisError, (ValueError, IndexError))


def test_axis_type():
    with pytest.raises(TypeError):
        fastln.layer_norm(X, axis=1.0)
    # bool is an int to operator.index, and was taken as axis 1; NumPy's axis= refuses it.
    for f in (fastln.layer_norm, fastln.rms_norm):
        with pytest.raises(TypeError, match="bool"):
            f(X, axis=True)


def test_masked_arrays_are_refused():
    # np.asarray drops the mask, and the masked values then took part in the statistics.
    m = np.ma.masked_array(X, mask=np.zeros(X.shape, bool))
    m[0, 3] = np.ma.masked
    for call in (
        lambda: fastln.layer_norm(m),
        lambda: fastln.rms_norm(m),
        lambda: fastln.layer_norm(X, weight=m[0]),
        lambda: fastln.layer_norm(X, residual=m),
        lambda: fastln.layer_norm_backward(m, X, np.zeros(4, np.float32), np.ones(4, np.float32)),
        lambda: fastln.layer_norm(X, out=m),
        lambda: fastln.rms_norm(X, out=m),
        lambda: fastln.layer_norm(X, residual=X.copy(), residual_out=m),
        lambda: fastln.layer_norm(X.astype(np.float16), out=m.astype(np.float16)),
    ):
        with pytest.raises(TypeError, match="masked array"):
            call()


def test_non_native_out():
    # x of either byte order is read; outputs are written in the machine's.
    with pytest.raises(TypeError, match="byte order"):
        swapped = X.dtype.newbyteorder()
        fastln.layer_norm(X.astype(swapped), out=np.empty(X.shape, swapped))


@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf"), -float("inf"), 10**400])
def test_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        fastln.layer_norm(X, eps=eps)


@pytest.mark.parametrize("eps", ["1e-5", b"1e-5", None, [1e-5], True, np.bool_(False)])
def test_eps_of_another_type(eps):
    # float() would parse a string (like torch and NumPy, fastln refuses one) and take True as 1.
    with pytest.raises(TypeError, match="eps"):
        fastln.layer_norm(X, eps=eps)
    with pytest.raises(TypeError, match="eps"):
        fastln.rms_norm(X, eps=eps)


def test_eps_zero_allowed():
    y = fastln.layer_norm(np.arange(8, dtype=np.float64).reshape(1, 8), eps=0.0)
    assert np.isclose(y.std(), 1.0)


@pytest.mark.parametrize("shape,axis", [((4, 0), -1), ((2, 0, 3), 1), ((0,), 0)])
def test_zero_size_normalized_dims(shape, axis):
    with pytest.raises(ValueError, match="zero-size"):
        fastln.layer_norm(np.zeros(shape, np.float32), axis=axis)


def test_scalar_input():
    with pytest.raises((ValueError, AxisError)):
        fastln.layer_norm(np.float32(1.0))


def test_set_isa_name_with_a_nul():
    # C reads "avx2\0junk" as "avx2"; the name as given is unknown.
    with pytest.raises(ValueError, match="unknown ISA"):
        fastln.set_isa("avx2\0junk")


def test_module_shape_as_a_0d_array():
    assert fastln.LayerNorm(np.array(8)).normalized_shape == (8,)
    assert fastln.RMSNorm(np.int64(8)).normalized_shape == (8,)
    with pytest.raises(TypeError):
        fastln.LayerNorm(8.0)


def test_set_isa_errors():
    with pytest.raises(ValueError, match="unknown ISA 'avx9'"):
        fastln.set_isa("avx9")
    with pytest.raises(TypeError):
        fastln.set_isa(3)
    try:
        fastln.set_isa(np.str_("scalar"))  # a str subclass is a str
        assert fastln.get_isa() == "scalar"
    finally:
        fastln.set_isa(None)  # back to the automatic choice, as conftest's isa fixture leaves it
    for name in ("scalar", "avx2", "avx512", "neon"):
        if name not in fastln.runtime_info()["isas"]:
            before = fastln.get_isa()
            with pytest.raises(RuntimeError, match=name):
                fastln.set_isa(name)
            assert fastln.get_isa() == before


def test_set_num_threads_errors():
    with pytest.raises(ValueError):
        fastln.set_num_threads(-1)
    with pytest.raises(TypeError):
        fastln.set_num_threads(1.5)
    with pytest.raises(TypeError, match="bool"):
        fastln.set_num_threads(True)


@pytest.mark.parametrize("n", [1025, 2**40, 2**63, 2**100])
def test_set_num_threads_caps_at_the_pool_size(n):
    try:
        fastln.set_num_threads(n)  # past C's int or int64: capped as documented, not an error
        if fastln.runtime_info()["openmp"]:
            assert fastln.get_num_threads() == 1024
    finally:
        fastln.set_num_threads(0)


@pytest.mark.parametrize("setter, name", [
    (fastln.set_cache_limit, "cache limit"),
    (fastln.set_stream_bytes, "nbytes"),
    (fastln.set_band_bytes, "nbytes"),
])
def test_size_settings_refuse_bools_and_values_past_int64(setter, name):
    # The setters change nothing when they refuse, so no state needs restoring.
    with pytest.raises(TypeError, match="bool"):
        setter(True)
    for big in (2**63, 2**64):
        with pytest.raises(ValueError, match=name + ".* at most 2"):
            setter(big)


def test_core_rejects_unsafe_calls():
    # The Cython layer re-checks what would make the C call unsafe, even though the public API
    # never passes such arrays.
    from fastln import _core

    x = np.zeros((4, 8), np.float32)
    with pytest.raises(TypeError):
        _core.layer_norm_2d(x, np.zeros((4, 8), np.float64), None, None, None, None, 1e-5)
    with pytest.raises(ValueError):
        _core.layer_norm_2d(x, np.zeros((4, 7), np.float32), None, None, None, None, 1e-5)
    with pytest.raises(ValueError):
        _core.layer_norm_2d(x, np.zeros((4, 8), np.float32), np.ones(7, np.float32), None, None, None, 1e-5)
    with pytest.raises(ValueError):
        _core.layer_norm_2d(x, np.zeros((4, 8), np.float32), None, None, np.zeros(3, np.float32), None, 1e-5)
    with pytest.raises(ValueError):
        _core.layer_norm_2d(x[:, ::2], np.zeros((4, 4), np.float32), None, None, None, None, 1e-5)
