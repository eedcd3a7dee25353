# The thin layer between Python and include/fastln/fastln_cuda.h.
#
# fastln/_cuda_api.py does the argument work (which library, which device and stream, shapes,
# dtypes, allocation through the array's own library); this layer takes raw device addresses as
# integers, releases the GIL around each call, and maps status codes to exceptions. Importing it
# needs no GPU: the CUDA runtime is linked statically and only looks for a driver when called.

from libc.stdint cimport int64_t, uintptr_t

cdef extern from "fastln/fastln_cuda.h" nogil:
    int FASTLN_CUDA_OK
    int FASTLN_CUDA_ERR_NULL_POINTER
    int FASTLN_CUDA_ERR_BAD_SHAPE
    int FASTLN_CUDA_ERR_BAD_EPS
    int FASTLN_CUDA_ERR_BAD_ARGUMENT
    int FASTLN_CUDA_ERR_WORKSPACE
    int FASTLN_CUDA_ERR_CUDA
    int FASTLN_CUDA_F32
    int FASTLN_CUDA_F16
    int FASTLN_CUDA_BF16
    const char *fastln_cuda_status_string(int status)
    const char *fastln_cuda_last_error()
    int fastln_cuda_device_count(int *count)
    int fastln_cuda_runtime_version()
    int fastln_cuda_layer_norm(int dtype, const void *x, int64_t ldx, const void *residual,
                               int64_t ldr, void *y, int64_t ldy, void *h, int64_t ldh,
                               const float *weight, const float *bias, float *mean, float *rstd,
                               int64_t rows, int64_t cols, double eps, int device, void *stream)
    int fastln_cuda_rms_norm(int dtype, const void *x, int64_t ldx, const void *residual,
                             int64_t ldr, void *y, int64_t ldy, void *h, int64_t ldh,
                             const float *weight, float *rstd, int64_t rows, int64_t cols,
                             double eps, int device, void *stream)
    int fastln_cuda_backward_workspace(int dtype, int rms, int64_t rows, int64_t cols,
                                       int want_dweight, int want_dbias, int device, size_t *nbytes)
    int fastln_cuda_layer_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                        int64_t ldx, const float *mean, const float *rstd,
                                        const float *weight, const void *dresidual, int64_t lddr,
                                        void *dx, int64_t lddx, float *dweight, float *dbias,
                                        void *workspace, size_t workspace_bytes, int64_t rows,
                                        int64_t cols, int device, void *stream)
    int fastln_cuda_rms_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                      int64_t ldx, const float *rstd, const float *weight,
                                      const void *dresidual, int64_t lddr, void *dx, int64_t lddx,
                                      float *dweight, void *workspace, size_t workspace_bytes,
                                      int64_t rows, int64_t cols, int device, void *stream)

F32 = FASTLN_CUDA_F32
F16 = FASTLN_CUDA_F16
BF16 = FASTLN_CUDA_BF16


class CudaError(RuntimeError):
    """The CUDA runtime failed (no driver, no device, a launch error)."""


cdef int _check(int status) except -1:
    if status == FASTLN_CUDA_OK:
        return 0
    msg = fastln_cuda_status_string(status).decode()
    if status == FASTLN_CUDA_ERR_CUDA:
        raise CudaError(f"fastln CUDA: {fastln_cuda_last_error().decode()}")
    if status in (FASTLN_CUDA_ERR_BAD_SHAPE, FASTLN_CUDA_ERR_BAD_EPS):
        raise ValueError(f"fastln CUDA: {msg}")
    raise RuntimeError(f"fastln CUDA (internal): {msg}")


def device_count():
    """(number of devices, '' or why none): never raises."""
    cdef int n = 0
    cdef int s = fastln_cuda_device_count(&n)
    if s != FASTLN_CUDA_OK:
        return 0, fastln_cuda_last_error().decode()
    return n, ""


def runtime_version():
    """The CUDA runtime version this module was built with, e.g. 13000."""
    return fastln_cuda_runtime_version()


def layer_norm(int dtype, uintptr_t x, int64_t ldx, uintptr_t r, int64_t ldr, uintptr_t y,
               int64_t ldy, uintptr_t h, int64_t ldh, uintptr_t w, uintptr_t b, uintptr_t mean,
               uintptr_t rstd, int64_t rows, int64_t cols, double eps, int device,
               uintptr_t stream):
    cdef int s
    with nogil:
        s = fastln_cuda_layer_norm(dtype, <const void *>x, ldx, <const void *>r, ldr, <void *>y,
                                   ldy, <void *>h, ldh, <const float *>w, <const float *>b,
                                   <float *>mean, <float *>rstd, rows, cols, eps, device,
                                   <void *>stream)
    _check(s)


def rms_norm(int dtype, uintptr_t x, int64_t ldx, uintptr_t r, int64_t ldr, uintptr_t y,
             int64_t ldy, uintptr_t h, int64_t ldh, uintptr_t w, uintptr_t rstd, int64_t rows,
             int64_t cols, double eps, int device, uintptr_t stream):
    cdef int s
    with nogil:
        s = fastln_cuda_rms_norm(dtype, <const void *>x, ldx, <const void *>r, ldr, <void *>y,
                                 ldy, <void *>h, ldh, <const float *>w, <float *>rstd, rows, cols,
                                 eps, device, <void *>stream)
    _check(s)


def backward_workspace(int dtype, bint rms, int64_t rows, int64_t cols, bint want_dweight,
                       bint want_dbias, int device):
    """Bytes of workspace the backward call needs."""
    cdef size_t nbytes = 0
    _check(fastln_cuda_backward_workspace(dtype, rms, rows, cols, want_dweight, want_dbias, device,
                                          &nbytes))
    return nbytes


def layer_norm_backward(int dtype, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                        uintptr_t mean, uintptr_t rstd, uintptr_t w, uintptr_t dres, int64_t lddr,
                        uintptr_t dx, int64_t lddx, uintptr_t dw, uintptr_t db, uintptr_t ws,
                        size_t ws_bytes, int64_t rows, int64_t cols, int device, uintptr_t stream):
    cdef int s
    with nogil:
        s = fastln_cuda_layer_norm_backward(
            dtype, <const void *>dy, lddy, <const void *>x, ldx, <const float *>mean,
            <const float *>rstd, <const float *>w, <const void *>dres, lddr, <void *>dx, lddx,
            <float *>dw, <float *>db, <void *>ws, ws_bytes, rows, cols, device, <void *>stream)
    _check(s)


def rms_norm_backward(int dtype, uintptr_t dy, int64_t lddy, uintptr_t x, int64_t ldx,
                      uintptr_t rstd, uintptr_t w, uintptr_t dres, int64_t lddr, uintptr_t dx,
                      int64_t lddx, uintptr_t dw, uintptr_t ws, size_t ws_bytes, int64_t rows,
                      int64_t cols, int device, uintptr_t stream):
    cdef int s
    with nogil:
        s = fastln_cuda_rms_norm_backward(
            dtype, <const void *>dy, lddy, <const void *>x, ldx, <const float *>rstd,
            <const float *>w, <const void *>dres, lddr, <void *>dx, lddx, <float *>dw, <void *>ws,
            ws_bytes, rows, cols, device, <void *>stream)
    _check(s)
