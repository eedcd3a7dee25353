/* fastln CUDA path: LayerNorm and RMSNorm, forward and backward, on NVIDIA GPUs.
 *
 * Built only when nvcc is present (setup.py, FASTLN_CUDA). Every pointer below is a device pointer;
 * `stream` is a cudaStream_t passed as void * (NULL: the legacy default stream), so that this header
 * needs no CUDA include. `device` is the ordinal the pointers live on; the call makes it current.
 * Calls are asynchronous on `stream`, like any kernel launch, and return a status code: 0 on
 * success, negative on bad arguments or a CUDA error (fastln_cuda_last_error() then says which).
 *
 * Layout as in fastln.h: `rows` rows of `cols` elements, row i of x at x + i * ldx (elements).
 * x, residual, y, h, dy, dx, dresidual have the dtype `dtype`; weight, bias, mean, rstd, dweight,
 * dbias are float32 whatever `dtype` is, and the arithmetic is float32.
 *
 * Aliasing: y and h may each be the same array as x or residual (same pointer and ld); dx may be
 * the same as dy, x or dresidual. No other overlap is allowed.
 */
#ifndef FASTLN_FASTLN_CUDA_H_
#define FASTLN_FASTLN_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fastln_cuda_dtype {
  FASTLN_CUDA_F32 = 0,
  FASTLN_CUDA_F16 = 1,
  FASTLN_CUDA_BF16 = 2
};

enum fastln_cuda_status {
  FASTLN_CUDA_OK = 0,
  FASTLN_CUDA_ERR_NULL_POINTER = -1,  /* a required pointer is NULL (per-row arrays: rows > 0) */
  FASTLN_CUDA_ERR_BAD_SHAPE = -2,     /* rows < 0, cols <= 0, a leading dimension < cols, or
                                         arrays that would span more than PTRDIFF_MAX bytes */
  FASTLN_CUDA_ERR_BAD_EPS = -3,       /* eps negative or not finite */
  FASTLN_CUDA_ERR_BAD_ARGUMENT = -6,  /* unknown dtype, or another invalid argument */
  FASTLN_CUDA_ERR_WORKSPACE = -7,     /* workspace missing, too small or misaligned */
  FASTLN_CUDA_ERR_CUDA = -8           /* the CUDA runtime failed: see fastln_cuda_last_error() */
};

/* A short English sentence for a status code; never NULL. */
const char *fastln_cuda_status_string(int status);
/* The CUDA runtime's message for the last FASTLN_CUDA_ERR_CUDA on this thread ("" if none). */
const char *fastln_cuda_last_error(void);

/* Number of usable devices. Without a driver or a GPU this returns FASTLN_CUDA_ERR_CUDA with
 * *count = 0, and fastln_cuda_last_error() says why. */
int fastln_cuda_device_count(int *count);
/* The CUDA runtime version this library was built against, e.g. 13000. */
int fastln_cuda_runtime_version(void);

/* Forward: h = x + residual (when residual is given; rounded to dtype, written to h when h is not
 * NULL), then y = (h - mean) * rstd * weight + bias, mean and rstd per row. weight, bias, mean,
 * rstd, residual, h may be NULL. */
int fastln_cuda_layer_norm(int dtype, const void *x, int64_t ldx, const void *residual,
                           int64_t ldr, void *y, int64_t ldy, void *h, int64_t ldh,
                           const float *weight, const float *bias, float *mean, float *rstd,
                           int64_t rows, int64_t cols, double eps, int device, void *stream);

/* y = h * rstd * weight with rstd = 1 / sqrt(mean(h^2) + eps). */
int fastln_cuda_rms_norm(int dtype, const void *x, int64_t ldx, const void *residual, int64_t ldr,
                         void *y, int64_t ldy, void *h, int64_t ldh, const float *weight,
                         float *rstd, int64_t rows, int64_t cols, double eps, int device,
                         void *stream);

/* Bytes of workspace the backward call needs for dweight/dbias (0 when both are NULL). The
 * partial sums live there: one float32 row per block of the persistent grid, summed afterwards in
 * a fixed order, so that dweight and dbias are bitwise repeatable. */
int fastln_cuda_backward_workspace(int dtype, int rms, int64_t rows, int64_t cols, int want_dweight,
                                   int want_dbias, int device, size_t *bytes);

/* Backward of fastln_cuda_layer_norm given the forward's x (the h when the residual was fused),
 * mean and rstd: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight and
 * xhat = (x - mean) * rstd; dweight = sum over rows of dy * xhat, dbias = sum of dy. dresidual, the
 * gradient reaching h through the residual stream, is added to dx when given (dx is then also the
 * residual's gradient). weight, dresidual, dweight, dbias may be NULL. Rows whose |mean| is more
 * than 16 standard deviations take xhat = (x - mean - sum(x - mean) / n) * rstd, which recovers
 * the rounding of the float32 mean (as the CPU path does). */
int fastln_cuda_layer_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                    int64_t ldx, const float *mean, const float *rstd,
                                    const float *weight, const void *dresidual, int64_t lddr,
                                    void *dx, int64_t lddx, float *dweight, float *dbias,
                                    void *workspace, size_t workspace_bytes, int64_t rows,
                                    int64_t cols, int device, void *stream);

/* Backward of fastln_cuda_rms_norm: dx = rstd * (g - xhat * mean(g * xhat)), xhat = x * rstd. */
int fastln_cuda_rms_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                  int64_t ldx, const float *rstd, const float *weight,
                                  const void *dresidual, int64_t lddr, void *dx, int64_t lddx,
                                  float *dweight, void *workspace, size_t workspace_bytes,
                                  int64_t rows, int64_t cols, int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FASTLN_FASTLN_CUDA_H_ */
