# The thin layer between Python and the C API of include/fastln/fastln.h.
#
# fastln/__init__.py does the argument work (dtypes, shapes, axes, out=, copies). This layer only
# re-checks what would make the C call unsafe (so a wrong call from Python raises instead of
# crashing), takes raw pointers, releases the GIL, and maps status codes to exceptions.

cimport numpy as cnp
import numpy as _np
from libc.stdint cimport int64_t, uint16_t

cnp.import_array()

cdef extern from "numpy/ndarraytypes.h":
    int NPY_USERDEF  # the first typenum of a dtype registered at run time (ml_dtypes.bfloat16)

cdef extern from "fastln/fastln.h" nogil:
    int FASTLN_OK
    int FASTLN_ERR_UNKNOWN_ISA
    int FASTLN_ERR_UNSUPPORTED_ISA
    int FASTLN_Y_FRESH
    int FASTLN_ERR_NO_MEMORY
    int fastln_layer_norm_f32_ex(const float *x, int64_t ldx, float *y, int64_t ldy,
                                 const float *weight, const float *bias, float *mean, float *rstd,
                                 int64_t rows, int64_t cols, double eps, int flags)
    int fastln_layer_norm_f64_ex(const double *x, int64_t ldx, double *y, int64_t ldy,
                                 const double *weight, const double *bias, double *mean,
                                 double *rstd, int64_t rows, int64_t cols, double eps, int flags)
    int fastln_layer_norm_cols_f32(const float *x, int64_t ldx, float *y, int64_t ldy,
                                   const float *weight, const float *bias, float *mean,
                                   float *rstd, int64_t examples, int64_t cols, double eps)
    int fastln_layer_norm_cols_f64(const double *x, int64_t ldx, double *y, int64_t ldy,
                                   const double *weight, const double *bias, double *mean,
                                   double *rstd, int64_t examples, int64_t cols, double eps)
    int fastln_rms_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy,
                               const float *weight, float *rstd, int64_t rows, int64_t cols,
                               double eps)
    int fastln_rms_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                               const double *weight, double *rstd, int64_t rows, int64_t cols,
                               double eps)
    int fastln_layer_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x,
                                          int64_t ldx, const float *mean, const float *rstd,
                                          const float *weight, float *dx, int64_t lddx,
                                          float *dweight, float *dbias, int64_t rows,
                                          int64_t cols)
    int fastln_layer_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x,
                                          int64_t ldx, const double *mean, const double *rstd,
                                          const double *weight, double *dx, int64_t lddx,
                                          double *dweight, double *dbias, int64_t rows,
                                          int64_t cols)
    int fastln_rms_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x,
                                        int64_t ldx, const float *rstd, const float *weight,
                                        float *dx, int64_t lddx, float *dweight, int64_t rows,
                                        int64_t cols)
    int fastln_rms_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x,
                                        int64_t ldx, const double *rstd, const double *weight,
                                        double *dx, int64_t lddx, double *dweight, int64_t rows,
                                        int64_t cols)
    int fastln_layer_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                          int64_t ldx, const float *mean, const float *rstd,
                                          const float *weight, uint16_t *dx, int64_t lddx,
                                          float *dweight, float *dbias, int64_t rows,
                                          int64_t cols)
    int fastln_layer_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                           int64_t ldx, const float *mean, const float *rstd,
                                           const float *weight, uint16_t *dx, int64_t lddx,
                                           float *dweight, float *dbias, int64_t rows,
                                           int64_t cols)
    int fastln_rms_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                        int64_t ldx, const float *rstd, const float *weight,
                                        uint16_t *dx, int64_t lddx, float *dweight, int64_t rows,
                                        int64_t cols)
    int fastln_rms_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                         int64_t ldx, const float *rstd, const float *weight,
                                         uint16_t *dx, int64_t lddx, float *dweight,
                                         int64_t rows, int64_t cols)
    int fastln_add_layer_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                                  float *h, int64_t ldh, float *y, int64_t ldy,
                                  const float *weight, const float *bias, float *mean,
                                  float *rstd, int64_t rows, int64_t cols, double eps)
    int fastln_add_layer_norm_f64(const double *x, int64_t ldx, const double *residual,
                                  int64_t ldr, double *h, int64_t ldh, double *y, int64_t ldy,
                                  const double *weight, const double *bias, double *mean,
                                  double *rstd, int64_t rows, int64_t cols, double eps)
    int fastln_f16_to_f32(const uint16_t *src, float *dst, int64_t n)
    int fastln_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
    int fastln_add_rms_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                                float *h, int64_t ldh, float *y, int64_t ldy, const float *weight,
                                float *rstd, int64_t rows, int64_t cols, double eps)
    int fastln_add_rms_norm_f64(const double *x, int64_t ldx, const double *residual,
                                int64_t ldr, double *h, int64_t ldh, double *y, int64_t ldy,
                                const double *weight, double *rstd, int64_t rows, int64_t cols,
                                double eps)
    const char *fastln_status_string(int status)
    const char *fastln_isa()
    const char *fastln_best_isa()
    int fastln_set_isa(const char *name)
    int fastln_isa_supported(const char *name)
    int fastln_init_status()
    int fastln_set_stream_bytes(int64_t native_bytes, int64_t half_bytes)
    int64_t fastln_get_stream_bytes(int half)
    int fastln_set_band_bytes(int64_t row_bytes)
    int64_t fastln_get_band_bytes()
    int64_t fastln_get_phased_bytes()
    int fastln_set_num_threads(int n)
    int fastln_get_num_threads()
    int fastln_has_openmp()


cdef extern from "binding/add_norm16.h" namespace "fastln" nogil:
    int BindingAddNorm16(int bf16, int rms, const uint16_t *x, int64_t ldx,
                         const uint16_t *residual, int64_t ldr, uint16_t *h, int64_t ldh,
                         uint16_t *y, int64_t ldy, const float *weight, const float *bias,
                         const uint16_t *weight16, const uint16_t *bias16, float *mean,
                         float *rstd, int64_t rows, int64_t cols, double eps)


cdef extern from "binding/output_cache.h" namespace "fastln_py":
    cdef struct Info:
        size_t limit, bytes, blocks
        unsigned long long hits, misses
    size_t kMinCached
    object HandlerCapsule()
    bint LastAllocFresh()
    size_t SetLimit(size_t limit)
    Info GetInfo()


# ---- outputs: large ones come from the output cache (src/binding/output_cache.h) -------------

cdef object _cache_handler = HandlerCapsule()
cdef bint _cache_on = True


cdef cnp.ndarray _output(int nd, cnp.npy_intp *dims, int t, cnp.npy_intp itemsize, int *flags):
    """An uninitialized C-contiguous array of typenum t; sets FASTLN_Y_FRESH in flags when its
    pages are new from the system (so never written)."""
    cdef cnp.npy_intp nbytes = itemsize * cnp.PyArray_MultiplyList(dims, nd)
    if not _cache_on or nbytes < <cnp.npy_intp>kMinCached:
        flags[0] |= FASTLN_Y_FRESH
        return cnp.PyArray_EMPTY(nd, dims, t, 0)
    cdef object old = cnp.PyDataMem_SetHandler(_cache_handler)
    try:
        a = cnp.PyArray_EMPTY(nd, dims, t, 0)
    finally:
        cnp.PyDataMem_SetHandler(old)
    if LastAllocFresh():
        flags[0] |= FASTLN_Y_FRESH
    return a


def empty(shape, dtype):
    """np.empty(shape, dtype), from the output cache when it is large enough to be cached."""
    if not _cache_on:
        return cnp.PyArray_Empty if False else __import__("numpy").empty(shape, dtype)
    old = cnp.PyDataMem_SetHandler(_cache_handler)
    try:
        return _np.empty(shape, dtype)
    finally:
        cnp.PyDataMem_SetHandler(old)


def set_cache_limit(size_t nbytes):
    """Sets the output cache's limit in bytes (0 turns it off and frees it); returns the old one."""
    global _cache_on
    _cache_on = nbytes >= kMinCached
    return SetLimit(nbytes)


def cache_info():
    cdef Info i = GetInfo()
    return {"limit": i.limit, "bytes": i.bytes, "blocks": i.blocks, "hits": i.hits,
            "misses": i.misses, "min_block": kMinCached}


class FastlnError(RuntimeError):
    """A status code from the C library that argument checking should have prevented."""


cdef inline int _check(int status) except -1:
    if status == FASTLN_ERR_NO_MEMORY:
        raise MemoryError(fastln_status_string(status).decode())
    if status != FASTLN_OK:
        raise FastlnError(fastln_status_string(status).decode())
    return 0


cdef inline int64_t _ld(cnp.ndarray a, int64_t cols) except -1:
    """Row stride in elements of a 2-D array with unit inner stride."""
    cdef int64_t item = cnp.PyArray_ITEMSIZE(a)
    if cnp.PyArray_NDIM(a) != 2 or cnp.PyArray_DIMS(a)[1] != cols:
        raise ValueError("internal: expected a 2-D array with %d columns" % cols)
    if cols > 1 and cnp.PyArray_STRIDES(a)[1] != item:
        raise ValueError("internal: inner stride must be one element")
    cdef int64_t s0 = cnp.PyArray_STRIDES(a)[0]
    if cnp.PyArray_DIMS(a)[0] <= 1:
        return cols
    if s0 % item != 0 or s0 // item < cols:
        raise ValueError("internal: rows overlap or are misaligned")
    return s0 // item


cdef inline void *_vec(object a, int typenum, int64_t n, bint writable) except? NULL:
    """Pointer to a contiguous 1-D array of n elements of typenum, or NULL for None."""
    if a is None:
        return NULL
    cdef cnp.ndarray arr = <cnp.ndarray?>a
    if (cnp.PyArray_TYPE(arr) != typenum or cnp.PyArray_SIZE(arr) != n
            or not cnp.PyArray_IS_C_CONTIGUOUS(arr)
            or (writable and not cnp.PyArray_ISWRITEABLE(arr))):
        raise ValueError("internal: bad parameter or statistics array")
    return cnp.PyArray_DATA(arr)


def layer_norm_2d(cnp.ndarray x, cnp.ndarray y, weight, bias, mean, rstd, double eps,
                  bint y_fresh=False, bint by_cols=False):
    """y[i, :] = layer norm of x[i, :]. x and y: 2-D, same dtype, unit inner stride.

    y_fresh: y was just allocated and never written (FASTLN_Y_FRESH).
    by_cols: x and y are (cols, examples), the transposes of Fortran-ordered arrays, and their
    columns are normalized (fastln_layer_norm_cols_*; y_fresh does not apply).
    """
    cdef int t = cnp.PyArray_TYPE(x)
    if cnp.PyArray_TYPE(y) != t or (t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64):
        raise TypeError("internal: x and y must both be float32 or both float64")
    if not cnp.PyArray_ISWRITEABLE(y):
        raise ValueError("internal: y is read-only")
    if cnp.PyArray_NDIM(x) != 2:
        raise ValueError("internal: x must be 2-D")
    cdef int64_t n0 = cnp.PyArray_DIMS(x)[0], n1 = cnp.PyArray_DIMS(x)[1]
    if cnp.PyArray_DIMS(y)[0] != n0:
        raise ValueError("internal: x and y differ in shape")
    cdef int64_t ldx = _ld(x, n1), ldy = _ld(y, n1)
    cdef int64_t rows = n1 if by_cols else n0, cols = n0 if by_cols else n1
    cdef void *w = _vec(weight, t, cols, False)
    cdef void *b = _vec(bias, t, cols, False)
    cdef void *m = _vec(mean, t, rows, True)
    cdef void *r = _vec(rstd, t, rows, True)
    cdef void *px = cnp.PyArray_DATA(x)
    cdef void *py = cnp.PyArray_DATA(y)
    cdef int status
    cdef int flags = FASTLN_Y_FRESH if y_fresh else 0
    with nogil:
        if by_cols and t == cnp.NPY_FLOAT32:
            status = fastln_layer_norm_cols_f32(<const float *>px, ldx, <float *>py, ldy,
                                                <const float *>w, <const float *>b, <float *>m,
                                                <float *>r, rows, cols, eps)
        elif by_cols:
            status = fastln_layer_norm_cols_f64(<const double *>px, ldx, <double *>py, ldy,
                                                <const double *>w, <const double *>b,
                                                <double *>m, <double *>r, rows, cols, eps)
        elif t == cnp.NPY_FLOAT32:
            status = fastln_layer_norm_f32_ex(<const float *>px, ldx, <float *>py, ldy,
                                              <const float *>w, <const float *>b, <float *>m,
                                              <float *>r, rows, cols, eps, flags)
        else:
            status = fastln_layer_norm_f64_ex(<const double *>px, ldx, <double *>py, ldy,
                                              <const double *>w, <const double *>b, <double *>m,
                                              <double *>r, rows, cols, eps, flags)
    _check(status)


cdef inline bint _plain(cnp.ndarray a, int t):
    """a has dtype t in native byte order, is aligned and C-contiguous."""
    return (cnp.PyArray_TYPE(a) == t and cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_IS_C_CONTIGUOUS(a))


cdef inline bint _param_ok(object p, int t, cnp.npy_intp d):
    if p is None:
        return True
    if not cnp.PyArray_CheckExact(p):
        return False
    cdef cnp.ndarray a = <cnp.ndarray>p
    return _plain(a, t) and cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_DIMS(a)[0] == d


cdef inline bint _param16_ok(object p, int t, cnp.npy_intp d):
    """For 16-bit x of typenum t: p is None or a plain 1-D array of length d, float32 or of x's
    own dtype (then widened to float32 in C: a copy for each part of the rows, by the thread that
    runs it, in the forward passes; by _widened for the backward ones)."""
    return _param_ok(p, cnp.NPY_FLOAT32, d) or _param_ok(p, t, d)


cdef inline object _widened(object p, int fmt, cnp.npy_intp d):
    """A parameter that passed _param16_ok, as the kernels' float32: one of 16-bit x's own dtype
    (storage format fmt) is widened in C, as NumPy's float16 cast is scalar code (1.1 us at
    d = 768, more than the layer norm of a row). Called once the call is known to take the fast
    path, so a declined call widens nothing."""
    if p is None or cnp.PyArray_TYPE(<cnp.ndarray>p) == cnp.NPY_FLOAT32:
        return p
    cdef cnp.ndarray a = <cnp.ndarray>p
    cdef cnp.ndarray w = cnp.PyArray_EMPTY(1, &d, cnp.NPY_FLOAT32, 0)
    cdef const uint16_t *src = <const uint16_t *>cnp.PyArray_DATA(a)
    cdef float *dst = <float *>cnp.PyArray_DATA(w)
    cdef int status
    if fmt == _FLOAT16:
        status = fastln_f16_to_f32(src, dst, d)
    else:
        status = fastln_bf16_to_f32(src, dst, d)
    _check(status)
    return w


cdef inline bint _common_call(object x, object eps, object axis, object return_stats):
    """The fast paths' shared conditions: x an exact ndarray, axis -1, no statistics, eps a float,
    finite and >= 0."""
    if not cnp.PyArray_CheckExact(x) or return_stats is not False or type(eps) is not float:
        return False
    if type(axis) is not int or axis != -1:
        return False
    cdef double e = eps
    return e >= 0 and e - e == 0


def layer_norm_fast(x, weight, bias, eps, out, axis, return_stats):
    """fastln.layer_norm for its common call, done here in C; None for any other call.

    Takes: x an exact ndarray, float32 or float64 (16-bit x goes to add_norm_fast), native
    order, aligned, C-contiguous, ndim >= 1, D = x.shape[-1] > 0; axis == -1; return_stats
    False; eps a float, finite and >= 0; weight and bias None or such 1-D arrays of x's dtype and
    length D; out None or such an array of x's shape, writeable, that is x itself or does not
    overlap it. Anything else returns None, and
    fastln.layer_norm runs its general path, with its checks and errors. At D = 768 the Python
    checks of that path cost several times the kernel.
    """
    if not _common_call(x, eps, axis, return_stats):
        return None
    cdef double e = eps
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(xa)
    cdef int nd = cnp.PyArray_NDIM(xa)
    if t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64:
        # 16-bit x: its kernels' entry, without the Python layers of the general path (~1 us).
        return add_norm_fast(x, None, weight, bias, eps, out, None, axis, return_stats, False)
    if nd < 1 or not _plain(xa, t):
        return None
    cdef cnp.npy_intp d = cnp.PyArray_DIMS(xa)[nd - 1]
    if d <= 0 or not _param_ok(weight, t, d) or not _param_ok(bias, t, d):
        return None
    cdef cnp.ndarray ya
    cdef char *px = <char *>cnp.PyArray_DATA(xa)
    cdef char *py = NULL
    cdef cnp.npy_intp nbytes = cnp.PyArray_NBYTES(xa)
    cdef int i
    cdef int flags = 0
    if out is None:
        ya = _output(nd, cnp.PyArray_DIMS(xa), t, cnp.PyArray_ITEMSIZE(xa), &flags)
    else:
        if not cnp.PyArray_CheckExact(out):
            return None
        ya = <cnp.ndarray>out
        if (not _plain(ya, t) or not cnp.PyArray_ISWRITEABLE(ya) or cnp.PyArray_NDIM(ya) != nd):
            return None
        for i in range(nd):
            if cnp.PyArray_DIMS(ya)[i] != cnp.PyArray_DIMS(xa)[i]:
                return None
        py = <char *>cnp.PyArray_DATA(ya)
        if py != px and py < px + nbytes and px < py + nbytes:
            return None
        if not _param_apart(weight, py, nbytes) or not _param_apart(bias, py, nbytes):
            return None
    py = <char *>cnp.PyArray_DATA(ya)
    cdef int64_t rows = cnp.PyArray_SIZE(xa) // d
    cdef void *w = NULL if weight is None else cnp.PyArray_DATA(<cnp.ndarray>weight)
    cdef void *b = NULL if bias is None else cnp.PyArray_DATA(<cnp.ndarray>bias)
    cdef int status
    if rows == 0:
        return ya
    with nogil:
        if t == cnp.NPY_FLOAT32:
            status = fastln_layer_norm_f32_ex(<const float *>px, d, <float *>py, d,
                                              <const float *>w, <const float *>b, NULL, NULL,
                                              rows, d, e, flags)
        else:
            status = fastln_layer_norm_f64_ex(<const double *>px, d, <double *>py, d,
                                              <const double *>w, <const double *>b, NULL, NULL,
                                              rows, d, e, flags)
    _check(status)
    return ya


cdef inline bint _stat_ok(object s, int t, cnp.ndarray x):
    """s is an exact ndarray of typenum t, plain, of shape x.shape[:-1] or x.shape[:-1] + (1,)."""
    if not cnp.PyArray_CheckExact(s):
        return False
    cdef cnp.ndarray a = <cnp.ndarray>s
    cdef int nd = cnp.PyArray_NDIM(x), na = cnp.PyArray_NDIM(a), i
    if not _plain(a, t):
        return False
    if na == nd:
        if cnp.PyArray_DIMS(a)[nd - 1] != 1:
            return False
    elif na != nd - 1:
        return False
    for i in range(nd - 1):
        if cnp.PyArray_DIMS(a)[i] != cnp.PyArray_DIMS(x)[i]:
            return False
    return True


# Storage formats of the 16-bit kernels' arguments (add_norm_2d, norm_backward_2d): the dtype's
# own for float32/float64; 16-bit bits otherwise.
cdef enum:
    _NATIVE = 0
    _FLOAT16 = 1
    _BFLOAT16 = 2

NATIVE = _NATIVE
FLOAT16 = _FLOAT16
BFLOAT16 = _BFLOAT16


cdef int _backward(int fmt, int t, const void *dy, int64_t lddy, const void *x, int64_t ldx,
                   const void *mean, const void *rstd, const void *w, void *dx, int64_t lddx,
                   void *dw, void *db, int64_t rows, int64_t cols) noexcept nogil:
    """The backward entry point for storage format fmt (typenum t for NATIVE): layer norm, or RMS
    norm when mean is NULL."""
    if fmt == _FLOAT16:
        if mean != NULL:
            return fastln_layer_norm_backward_f16_ld(
                <const uint16_t *>dy, lddy, <const uint16_t *>x, ldx, <const float *>mean,
                <const float *>rstd, <const float *>w, <uint16_t *>dx, lddx, <float *>dw,
                <float *>db, rows, cols)
        return fastln_rms_norm_backward_f16_ld(
            <const uint16_t *>dy, lddy, <const uint16_t *>x, ldx, <const float *>rstd,
            <const float *>w, <uint16_t *>dx, lddx, <float *>dw, rows, cols)
    if fmt == _BFLOAT16:
        if mean != NULL:
            return fastln_layer_norm_backward_bf16_ld(
                <const uint16_t *>dy, lddy, <const uint16_t *>x, ldx, <const float *>mean,
                <const float *>rstd, <const float *>w, <uint16_t *>dx, lddx, <float *>dw,
                <float *>db, rows, cols)
        return fastln_rms_norm_backward_bf16_ld(
            <const uint16_t *>dy, lddy, <const uint16_t *>x, ldx, <const float *>rstd,
            <const float *>w, <uint16_t *>dx, lddx, <float *>dw, rows, cols)
    if t == cnp.NPY_FLOAT32:
        if mean != NULL:
            return fastln_layer_norm_backward_f32_ld(
                <const float *>dy, lddy, <const float *>x, ldx, <const float *>mean,
                <const float *>rstd, <const float *>w, <float *>dx, lddx, <float *>dw,
                <float *>db, rows, cols)
        return fastln_rms_norm_backward_f32_ld(
            <const float *>dy, lddy, <const float *>x, ldx, <const float *>rstd,
            <const float *>w, <float *>dx, lddx, <float *>dw, rows, cols)
    if mean != NULL:
        return fastln_layer_norm_backward_f64_ld(
            <const double *>dy, lddy, <const double *>x, ldx, <const double *>mean,
            <const double *>rstd, <const double *>w, <double *>dx, lddx, <double *>dw,
            <double *>db, rows, cols)
    return fastln_rms_norm_backward_f64_ld(
        <const double *>dy, lddy, <const double *>x, ldx, <const double *>rstd,
        <const double *>w, <double *>dx, lddx, <double *>dw, rows, cols)


cdef int _bf16_type = -1  # ml_dtypes.bfloat16's typenum, once seen


cdef inline int _format_of(cnp.ndarray a, int *p):
    """The storage format of a's dtype, with the typenum of its parameters and statistics in p;
    -1 if the kernels do not take it. bfloat16 (a dtype ml_dtypes registers) is known by name."""
    global _bf16_type
    cdef int t = cnp.PyArray_TYPE(a)
    if t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64:
        p[0] = t
        return _NATIVE
    p[0] = cnp.NPY_FLOAT32
    if t == cnp.NPY_FLOAT16:
        return _FLOAT16
    # Only a legacy user dtype can be bfloat16: NEP 42 dtypes (numpy-quaddtype, ...) all have
    # typenum -1, which must never match the cache before it is filled.
    if t < NPY_USERDEF or cnp.PyArray_ITEMSIZE(a) != 2:
        return -1
    if t == _bf16_type:
        return _BFLOAT16
    if _bf16_type < 0 and a.dtype.name == "bfloat16":
        # A registered dtype keeps its typenum for the life of the process: the name (a Python
        # attribute lookup, ~0.5 us) is read once. A second dtype of that name (an older
        # TensorFlow or JAX registered their own) still works, through the general path.
        _bf16_type = t
        return _BFLOAT16
    return -1


def norm_backward_fast(dy, x, mean, rstd, weight, axis, bint center):
    """fastln.layer_norm_backward (center) or rms_norm_backward for their common call, done here in
    C; None for any other call.

    Takes: dy and x exact ndarrays of one shape and dtype (float32, float64, float16 or bfloat16),
    native order, aligned, C-contiguous, ndim >= 1, D = x.shape[-1] > 0, at least one row;
    axis == -1; mean (center) and rstd such arrays of shape x.shape[:-1] or x.shape[:-1] + (1,);
    weight None or such a 1-D array of length D; mean, rstd and weight of x's dtype, float32 for
    16-bit x (whose weight may also be of x's dtype: widened here). Anything else returns None,
    and the general path runs, with its checks and errors: at D = 768 its Python checks cost
    several times the kernel.
    Returns (dx, dweight, dbias), dweight and dbias None without weight; dbias None unless center.
    dx has x's dtype; dweight and dbias that of the parameters.
    """
    if not cnp.PyArray_CheckExact(x) or not cnp.PyArray_CheckExact(dy):
        return None
    if type(axis) is not int or axis != -1:
        return None
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef cnp.ndarray da = <cnp.ndarray>dy
    cdef int t = cnp.PyArray_TYPE(xa)
    cdef int nd = cnp.PyArray_NDIM(xa), i, p
    cdef int fmt = _format_of(xa, &p)
    if fmt < 0 or nd < 1 or not _plain(xa, t):
        return None
    if not _plain(da, t) or cnp.PyArray_NDIM(da) != nd:
        return None
    for i in range(nd):
        if cnp.PyArray_DIMS(da)[i] != cnp.PyArray_DIMS(xa)[i]:
            return None
    cdef cnp.npy_intp d = cnp.PyArray_DIMS(xa)[nd - 1]
    if d <= 0 or not (_param_ok(weight, p, d) if p == t else _param16_ok(weight, t, d)):
        return None
    cdef int64_t rows = cnp.PyArray_SIZE(xa) // d
    if rows == 0 or not _stat_ok(rstd, p, xa) or (center and not _stat_ok(mean, p, xa)):
        return None
    if p != t:
        weight = _widened(weight, fmt, d)
    cdef int flags = 0
    cdef cnp.ndarray dx = _output(nd, cnp.PyArray_DIMS(xa), t, cnp.PyArray_ITEMSIZE(xa), &flags)
    cdef cnp.ndarray dw = None, db = None
    cdef void *pw = NULL
    cdef void *pdw = NULL
    cdef void *pdb = NULL
    if weight is not None:
        pw = cnp.PyArray_DATA(<cnp.ndarray>weight)
        dw = cnp.PyArray_EMPTY(1, &d, p, 0)
        pdw = cnp.PyArray_DATA(dw)
        if center:
            db = cnp.PyArray_EMPTY(1, &d, p, 0)
            pdb = cnp.PyArray_DATA(db)
    cdef void *pdy = cnp.PyArray_DATA(da)
    cdef void *px = cnp.PyArray_DATA(xa)
    cdef void *pdx = cnp.PyArray_DATA(dx)
    cdef void *pm = cnp.PyArray_DATA(<cnp.ndarray>mean) if center else NULL
    cdef void *pr = cnp.PyArray_DATA(<cnp.ndarray>rstd)
    cdef int status
    with nogil:
        status = _backward(fmt, t, pdy, d, px, d, pm, pr, pw, pdx, d, pdw, pdb, rows, d)
    _check(status)
    return dx, dw, db


cdef inline int _rows_like(cnp.ndarray x, cnp.ndarray y, int t, int64_t *rows, int64_t *cols,
                           int64_t *ldx, int64_t *ldy) except -1:
    """Checks that x (read) and y (written) are 2-D arrays of typenum t, float32 or float64, of
    the same shape with unit inner stride; gives their shape and row strides."""
    if (cnp.PyArray_TYPE(x) != t or cnp.PyArray_TYPE(y) != t
            or (t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64)):
        raise TypeError("internal: arrays must all be float32 or all float64")
    if not cnp.PyArray_ISWRITEABLE(y):
        raise ValueError("internal: output is read-only")
    if cnp.PyArray_NDIM(x) != 2 or cnp.PyArray_NDIM(y) != 2:
        raise ValueError("internal: arrays must be 2-D")
    rows[0] = cnp.PyArray_DIMS(x)[0]
    cols[0] = cnp.PyArray_DIMS(x)[1]
    if cnp.PyArray_DIMS(y)[0] != rows[0]:
        raise ValueError("internal: arrays differ in rows")
    ldx[0] = _ld(x, cols[0])
    ldy[0] = _ld(y, cols[0])
    return 0


def rms_norm_2d(cnp.ndarray x, cnp.ndarray y, weight, rstd, double eps):
    """y[i, :] = RMS norm of x[i, :]. x and y: 2-D, same dtype, unit inner stride."""
    cdef int t = cnp.PyArray_TYPE(x)
    cdef int64_t rows, cols, ldx, ldy
    _rows_like(x, y, t, &rows, &cols, &ldx, &ldy)
    cdef void *w = _vec(weight, t, cols, False)
    cdef void *r = _vec(rstd, t, rows, True)
    cdef void *px = cnp.PyArray_DATA(x)
    cdef void *py = cnp.PyArray_DATA(y)
    cdef int status
    with nogil:
        if t == cnp.NPY_FLOAT32:
            status = fastln_rms_norm_f32_ld(<const float *>px, ldx, <float *>py, ldy,
                                            <const float *>w, <float *>r, rows, cols, eps)
        else:
            status = fastln_rms_norm_f64_ld(<const double *>px, ldx, <double *>py, ldy,
                                            <const double *>w, <double *>r, rows, cols, eps)
    _check(status)


def norm_backward_2d(cnp.ndarray dy, cnp.ndarray x, mean, rstd, weight, cnp.ndarray dx,
                     dweight, dbias):
    """dx (and dweight, dbias when not None) of layer norm, or of RMS norm when mean is None.
    dy, x, dx: 2-D, one dtype (float32, float64, float16 or bfloat16), unit inner stride; the rest
    contiguous 1-D or None, of x's dtype (float32 for 16-bit x)."""
    cdef int t = cnp.PyArray_TYPE(x), p
    cdef int fmt = _format_of(x, &p)
    if fmt < 0:
        raise TypeError("internal: x must be float32, float64, float16 or bfloat16")
    if cnp.PyArray_NDIM(x) != 2:
        raise ValueError("internal: x must be 2-D")
    cdef int64_t rows = cnp.PyArray_DIMS(x)[0], cols = cnp.PyArray_DIMS(x)[1]
    cdef int64_t ldx = _ld(x, cols)
    cdef int64_t lddy = _rows_of(dy, x, rows, cols, False)
    cdef int64_t lddx = _rows_of(dx, x, rows, cols, True)
    if rstd is None:
        raise ValueError("internal: rstd is required")
    cdef void *m = _vec(mean, p, rows, False)
    cdef void *r = _vec(rstd, p, rows, False)
    cdef void *w = _vec(weight, p, cols, False)
    cdef void *dw = _vec(dweight, p, cols, True)
    cdef void *db = _vec(dbias, p, cols, True)
    if mean is None and dbias is not None:
        raise ValueError("internal: RMS norm has no bias")
    cdef void *pdy = cnp.PyArray_DATA(dy)
    cdef void *px = cnp.PyArray_DATA(x)
    cdef void *pdx = cnp.PyArray_DATA(dx)
    cdef int status
    with nogil:
        status = _backward(fmt, t, pdy, lddy, px, ldx, m, r, w, pdx, lddx, dw, db, rows, cols)
    _check(status)


cdef int _add_norm_call(int fmt, int t, bint rms, void *px, int64_t ldx, void *pr, int64_t ldr,
                        void *ph, int64_t ldh, void *py, int64_t ldy, void *w, void *b,
                        const void *w16, const void *b16, void *m, void *r, int64_t rows,
                        int64_t cols, double eps) noexcept nogil:
    """The C entry point of add_norm_2d's and add_norm_fast's arguments; returns its status.

    16-bit x (fmt FLOAT16 or BFLOAT16): w and b float32, or w16 and b16 in x's own format (each
    NULL or not independently; the C side widens those per thread). Native x: w16 and b16 NULL.
    """
    if fmt == _FLOAT16 or fmt == _BFLOAT16:
        return BindingAddNorm16(
            fmt == _BFLOAT16, rms, <const uint16_t *>px, ldx, <const uint16_t *>pr, ldr,
            <uint16_t *>ph, ldh, <uint16_t *>py, ldy, <const float *>w, <const float *>b,
            <const uint16_t *>w16, <const uint16_t *>b16, <float *>m, <float *>r, rows, cols,
            eps)
    if rms:
        if t == cnp.NPY_FLOAT32:
            return fastln_add_rms_norm_f32(
                <const float *>px, ldx, <const float *>pr, ldr, <float *>ph, ldh,
                <float *>py, ldy, <const float *>w, <float *>r, rows, cols, eps)
        return fastln_add_rms_norm_f64(
            <const double *>px, ldx, <const double *>pr, ldr, <double *>ph, ldh,
            <double *>py, ldy, <const double *>w, <double *>r, rows, cols, eps)
    if t == cnp.NPY_FLOAT32:
        return fastln_add_layer_norm_f32(
            <const float *>px, ldx, <const float *>pr, ldr, <float *>ph, ldh, <float *>py, ldy,
            <const float *>w, <const float *>b, <float *>m, <float *>r, rows, cols, eps)
    return fastln_add_layer_norm_f64(
        <const double *>px, ldx, <const double *>pr, ldr, <double *>ph, ldh,
        <double *>py, ldy, <const double *>w, <const double *>b, <double *>m,
        <double *>r, rows, cols, eps)


def add_norm_2d(cnp.ndarray x, residual, h, cnp.ndarray y, weight, bias, mean, rstd,
                double eps, int fmt, bint rms):
    """y[i, :] = layer norm (rms: RMS norm) of h[i, :] = x[i, :] + residual[i, :] (residual None:
    of x[i, :]).

    x, residual, h, y: 2-D, one dtype, unit inner stride; h may be x or residual. fmt NATIVE:
    float32 or float64, with parameters and statistics of that dtype; FLOAT16 or BFLOAT16: 2-byte
    elements, float32 parameters and statistics. RMS norm takes no bias and no mean.
    """
    if rms and (bias is not None or mean is not None):
        raise ValueError("internal: RMS norm has no bias and no mean")
    cdef int t = cnp.PyArray_TYPE(x)
    cdef int p
    if fmt == _NATIVE:
        if t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64:
            raise TypeError("internal: x must be float32 or float64")
        p = t
    elif fmt == _FLOAT16 or fmt == _BFLOAT16:
        if cnp.PyArray_ITEMSIZE(x) != 2 or (fmt == _FLOAT16 and t != cnp.NPY_FLOAT16):
            raise TypeError("internal: x must hold 2-byte floats")
        p = cnp.NPY_FLOAT32
    else:
        raise ValueError("internal: unknown storage format")
    if cnp.PyArray_NDIM(x) != 2:
        raise ValueError("internal: x must be 2-D")
    cdef int64_t rows = cnp.PyArray_DIMS(x)[0], cols = cnp.PyArray_DIMS(x)[1]
    cdef int64_t ldx = _ld(x, cols), ldy = _rows_of(y, x, rows, cols, True)
    cdef int64_t ldr = 0, ldh = 0
    cdef void *pr = NULL
    cdef void *ph = NULL
    if residual is not None:
        ldr = _rows_of(residual, x, rows, cols, False)
        ldh = _rows_of(h, x, rows, cols, True)
        pr = cnp.PyArray_DATA(<cnp.ndarray>residual)
        ph = cnp.PyArray_DATA(<cnp.ndarray>h)
    cdef void *w = _vec(weight, p, cols, False)
    cdef void *b = _vec(bias, p, cols, False)
    cdef void *m = _vec(mean, p, rows, True)
    cdef void *r = _vec(rstd, p, rows, True)
    cdef void *px = cnp.PyArray_DATA(x)
    cdef void *py = cnp.PyArray_DATA(y)
    cdef int status
    with nogil:
        status = _add_norm_call(fmt, t, rms, px, ldx, pr, ldr, ph, ldh, py, ldy, w, b, NULL, NULL,
                                m, r, rows, cols, eps)
    _check(status)


cdef inline bint _like(object a, cnp.ndarray x, int t):
    """a is an exact ndarray of x's shape and typenum t, plain (see _plain)."""
    if not cnp.PyArray_CheckExact(a):
        return False
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef int nd = cnp.PyArray_NDIM(x)
    if not _plain(arr, t) or cnp.PyArray_NDIM(arr) != nd:
        return False
    cdef int i
    for i in range(nd):
        if cnp.PyArray_DIMS(arr)[i] != cnp.PyArray_DIMS(x)[i]:
            return False
    return True


cdef inline bint _apart(char *a, char *b, cnp.npy_intp nbytes):
    """Blocks of nbytes at a and b do not overlap."""
    return a + nbytes <= b or b + nbytes <= a


cdef inline bint _param_apart(object p, char *o, cnp.npy_intp nbytes):
    """Parameter p (None or a plain ndarray) does not overlap the output of nbytes at o (NULL:
    none). The kernels read weight and bias for every row, after writing the rows before it."""
    if p is None or o == NULL:
        return True
    cdef char *a = <char *>cnp.PyArray_DATA(<cnp.ndarray>p)
    return a + cnp.PyArray_NBYTES(<cnp.ndarray>p) <= o or o + nbytes <= a


def add_norm_fast(x, residual, weight, bias, eps, out, residual_out, axis, return_stats,
                  bint rms):
    """fastln.layer_norm (rms: rms_norm) with residual= or 16-bit x, and rms_norm's common call,
    done here in C; None for any other call, which then takes the general path.

    Takes: x an exact ndarray of float32, float64, float16 or bfloat16, native order, aligned,
    C-contiguous, ndim >= 1, D = x.shape[-1] > 0; residual None or such an array of x's dtype and
    shape; axis == -1; return_stats False; eps a float, finite and >= 0; weight and bias None or
    plain 1-D arrays of length D, of x's dtype (for 16-bit x float32, or x's dtype, widened in C);
    out and residual_out None or plain writeable arrays of x's dtype and shape, each x or residual
    itself or apart from both, and apart from each other; residual_out only with residual. The
    Python checks of the general path cost ~12 us a call, the kernel ~0.3 us at 1 x 768.
    """
    if not _common_call(x, eps, axis, return_stats) or (residual is None and
                                                        residual_out is not None):
        return None
    cdef double e = eps
    cdef cnp.ndarray xa = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(xa)
    cdef int nd = cnp.PyArray_NDIM(xa)
    cdef int p
    cdef int fmt = _format_of(xa, &p)
    if fmt < 0:
        return None
    if nd < 1 or not _plain(xa, t):
        return None
    cdef cnp.npy_intp d = cnp.PyArray_DIMS(xa)[nd - 1]
    if d <= 0:
        return None
    if p == t:
        if not _param_ok(weight, p, d) or not _param_ok(bias, p, d):
            return None
    elif not _param16_ok(weight, t, d) or not _param16_ok(bias, t, d):
        return None
    if rms and bias is not None:
        return None
    cdef cnp.npy_intp nbytes = cnp.PyArray_NBYTES(xa)
    cdef char *px = <char *>cnp.PyArray_DATA(xa)
    cdef char *pr = NULL
    cdef char *py = NULL
    cdef char *ph = NULL
    if residual is not None:
        if not _like(residual, xa, t):
            return None
        pr = <char *>cnp.PyArray_DATA(<cnp.ndarray>residual)
    # Outputs: each is an input itself (the kernel reads a row before it writes it) or apart from
    # the inputs, and the two are apart from each other.
    if out is not None:
        if not _like(out, xa, t) or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>out):
            return None
        py = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
        if (py != px and not _apart(py, px, nbytes)) or (
                pr != NULL and py != pr and not _apart(py, pr, nbytes)):
            return None
    if residual_out is not None:
        if not _like(residual_out, xa, t) or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>residual_out):
            return None
        ph = <char *>cnp.PyArray_DATA(<cnp.ndarray>residual_out)
        if ((ph != px and not _apart(ph, px, nbytes)) or (ph != pr and not _apart(ph, pr, nbytes))
                or (out is not None and not _apart(ph, py, nbytes))):
            return None
    if (not _param_apart(weight, py, nbytes) or not _param_apart(bias, py, nbytes)
            or not _param_apart(weight, ph, nbytes) or not _param_apart(bias, ph, nbytes)):
        return None
    # New outputs come from the output cache; PyArray_EMPTY takes a user dtype's typenum too
    # (ml_dtypes registers bfloat16). Whether their pages are fresh (flags) is not passed on: the
    # fused kernels have no such flag.
    cdef int flags = 0
    cdef cnp.npy_intp item = cnp.PyArray_ITEMSIZE(xa)
    cdef cnp.ndarray ya = (<cnp.ndarray>out if out is not None
                           else _output(nd, cnp.PyArray_DIMS(xa), t, item, &flags))
    cdef cnp.ndarray ha = None
    if residual is not None:
        ha = (<cnp.ndarray>residual_out if residual_out is not None
              else _output(nd, cnp.PyArray_DIMS(xa), t, item, &flags))
        ph = <char *>cnp.PyArray_DATA(ha)
    py = <char *>cnp.PyArray_DATA(ya)
    cdef int64_t rows = cnp.PyArray_SIZE(xa) // d
    cdef void *w = NULL if weight is None else cnp.PyArray_DATA(<cnp.ndarray>weight)
    cdef void *b = NULL if bias is None else cnp.PyArray_DATA(<cnp.ndarray>bias)
    # 16-bit x: parameters of x's dtype go to C as they are, widened there by each thread.
    cdef void *w16 = NULL
    cdef void *b16 = NULL
    if p != t:
        if weight is not None and cnp.PyArray_TYPE(<cnp.ndarray>weight) == t:
            w16, w = w, NULL
        if bias is not None and cnp.PyArray_TYPE(<cnp.ndarray>bias) == t:
            b16, b = b, NULL
    cdef int status = 0
    if rows > 0:
        with nogil:
            status = _add_norm_call(fmt, t, rms, px, d, pr, d, ph, d, py, d, w, b, w16, b16, NULL,
                                    NULL, rows, d, e)
        _check(status)
    return ya if ha is None else (ya, ha)


cdef inline int64_t _rows_of(object a, cnp.ndarray x, int64_t rows, int64_t cols,
                               bint writable) except -1:
    """Row stride of a, which must have x's dtype and (rows, cols) shape."""
    cdef cnp.ndarray arr = <cnp.ndarray?>a
    if (cnp.PyArray_TYPE(arr) != cnp.PyArray_TYPE(x) or cnp.PyArray_NDIM(arr) != 2
            or cnp.PyArray_DIMS(arr)[0] != rows):
        raise ValueError("internal: arrays differ in dtype or shape")
    if writable and not cnp.PyArray_ISWRITEABLE(arr):
        raise ValueError("internal: output is read-only")
    return _ld(arr, cols)


# ---- runtime control ---------------------------------------------------------------------------

def isa():
    return fastln_isa().decode()


def best_isa():
    return fastln_best_isa().decode()


def isa_supported(str name):
    return bool(fastln_isa_supported(name.encode()))


def init_status():
    """(status, message) of reading FASTLN_ISA when the library started."""
    cdef int s = fastln_init_status()
    return s, fastln_status_string(s).decode()


def set_isa(name):
    cdef int s
    if name is None:
        s = fastln_set_isa(NULL)
    else:
        s = fastln_set_isa((<str?>name).encode())
    return s


UNKNOWN_ISA = FASTLN_ERR_UNKNOWN_ISA
UNSUPPORTED_ISA = FASTLN_ERR_UNSUPPORTED_ISA


def set_num_threads(int n):
    _check(fastln_set_num_threads(n))


def get_num_threads():
    return fastln_get_num_threads()


def has_openmp():
    return bool(fastln_has_openmp())


def set_stream_bytes(int64_t native_bytes, int64_t half_bytes):
    _check(fastln_set_stream_bytes(native_bytes, half_bytes))


def get_stream_bytes():
    return fastln_get_stream_bytes(0), fastln_get_stream_bytes(1)


def set_band_bytes(int64_t row_bytes):
    _check(fastln_set_band_bytes(row_bytes))


def get_band_bytes():
    return fastln_get_band_bytes()


def get_phased_bytes():
    return fastln_get_phased_bytes()
