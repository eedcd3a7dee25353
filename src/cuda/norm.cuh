// Internal interface between the C API (api.cu) and the kernels, which are compiled once per dtype
// (norm_f32.cu, norm_f16.cu, norm_bf16.cu) so that nvcc can build the three in parallel.
#ifndef FASTLN_CUDA_NORM_CUH_
#define FASTLN_CUDA_NORM_CUH_

#ifndef FASTLN_CUDA_EMULATE
#include <cuda_runtime.h>
#endif
#include <stddef.h>
#include <stdint.h>

namespace fastln_cuda {

struct FwdArgs {
  const void *x;
  int64_t ldx;
  const void *r;  // residual, or null
  int64_t ldr;
  void *y;
  int64_t ldy;
  void *h;  // x + residual, or null
  int64_t ldh;
  const float *w;
  const float *b;
  float *mean;
  float *rstd;
  int64_t rows, cols;
  float eps;
  bool rms;
};

struct BwdArgs {
  const void *dy;
  int64_t lddy;
  const void *x;
  int64_t ldx;
  const float *mean;  // null for RMSNorm
  const float *rstd;
  const float *w;
  const void *dres;  // gradient reaching h through the residual stream, or null
  int64_t lddr;
  void *dx;
  int64_t lddx;
  float *dw;
  float *db;
  float *partial;  // workspace: [2][grid][cols] float32 partial sums, when dw or db is wanted
  size_t partial_bytes;
  int64_t rows, cols;
  bool rms;
};

// Each returns cudaSuccess or the error of the launch; they never synchronize.
template <class T>
cudaError_t Forward(const FwdArgs &a, int device, cudaStream_t stream);
template <class T>
cudaError_t Backward(const BwdArgs &a, int device, cudaStream_t stream);
// Bytes of workspace Backward needs for these arguments (0 when neither dw nor db is wanted).
template <class T>
cudaError_t BackwardWorkspace(const BwdArgs &a, int device, size_t *bytes);

// Per-device facts, cached: multiprocessors, and the largest opt-in shared memory per block.
cudaError_t DeviceFacts(int device, int *sms, int *smem_optin);
// Resident blocks per multiprocessor for a kernel, cached per (kernel, device, block, smem). Raises
// the kernel's dynamic shared memory limit first when smem is above the default 48 KiB.
cudaError_t BlocksPerSm(const void *kernel, int device, int block, size_t smem, int *blocks);

}  // namespace fastln_cuda

#endif  // FASTLN_CUDA_NORM_CUH_
