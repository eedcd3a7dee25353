// The C API of include/fastln/fastln_cuda.h: argument checks, the device made current for the call,
// dispatch on dtype, and CUDA errors turned into status codes with a readable message.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "fastln/fastln_cuda.h"
#include "norm.cuh"
#include "../spans.h"

namespace fastln_cuda {
namespace {

thread_local char g_last_error[256] = "";

int Fail(cudaError_t e, const char *where) {
  std::snprintf(g_last_error, sizeof g_last_error, "%s: %s (%s)", where, cudaGetErrorString(e),
                cudaGetErrorName(e));
  return FASTLN_CUDA_ERR_CUDA;
}

// Makes `device` current for the call and restores the caller's device afterwards, so that a
// runtime shared with the caller (torch, CuPy) sees no change.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    err_ = cudaGetDevice(&prev_);
    if (err_ == cudaSuccess && prev_ != device) {
      err_ = cudaSetDevice(device);
      switched_ = err_ == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(prev_);
  }
  cudaError_t error() const { return err_; }

 private:
  int prev_ = 0;
  bool switched_ = false;
  cudaError_t err_ = cudaSuccess;
};

std::mutex g_mu;
std::map<int, std::pair<int, int>> g_facts;
std::map<std::tuple<const void *, int, int, size_t>, int> g_occupancy;

bool BadLd(int64_t ld, int64_t cols, const void *p) { return p && ld < cols; }

// At 4 bytes a value, the widest dtype here.
bool Spans(int64_t rows, int64_t cols, int64_t ld) { return fastln::SpansFit(rows, cols, ld, 4); }

}  // namespace

cudaError_t DeviceFacts(int device, int *sms, int *smem_optin) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_facts.find(device);
    if (it != g_facts.end()) {
      *sms = it->second.first;
      *smem_optin = it->second.second;
      return cudaSuccess;
    }
  }
  int a = 0, b = 0;
  cudaError_t e = cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g_mu);
  g_facts[device] = {a, b};
  *sms = a;
  *smem_optin = b;
  return cudaSuccess;
}

cudaError_t BlocksPerSm(const void *kernel, int device, int block, size_t smem, int *blocks) {
  const auto key = std::make_tuple(kernel, device, block, smem);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_occupancy.find(key);
    if (it != g_occupancy.end()) {
      *blocks = it->second;
      return cudaSuccess;
    }
  }
  cudaError_t e = cudaSuccess;
  if (smem > 48 * 1024) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  int n = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, smem);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g_mu);
  g_occupancy[key] = n;
  *blocks = n;
  return cudaSuccess;
}

namespace {

template <class Fn>
int ByDtype(int dtype, Fn fn, cudaError_t *e) {
  switch (dtype) {
    case FASTLN_CUDA_F32:
      *e = fn(float());
      return FASTLN_CUDA_OK;
    case FASTLN_CUDA_F16:
      *e = fn(__half());
      return FASTLN_CUDA_OK;
    case FASTLN_CUDA_BF16:
      *e = fn(__nv_bfloat16());
      return FASTLN_CUDA_OK;
    default:
      return FASTLN_CUDA_ERR_BAD_ARGUMENT;
  }
}

int RunForward(int dtype, const FwdArgs &a, double eps, int device, void *stream) {
  if (a.rows > 0 && (!a.x || !a.y)) return FASTLN_CUDA_ERR_NULL_POINTER;
  if (a.rows < 0 || a.cols <= 0 || a.ldx < a.cols || a.ldy < a.cols || BadLd(a.ldr, a.cols, a.r) ||
      BadLd(a.ldh, a.cols, a.h))
    return FASTLN_CUDA_ERR_BAD_SHAPE;
  if (!Spans(a.rows, a.cols, a.ldx) || !Spans(a.rows, a.cols, a.ldy) ||
      (a.r && !Spans(a.rows, a.cols, a.ldr)) || (a.h && !Spans(a.rows, a.cols, a.ldh)))
    return FASTLN_CUDA_ERR_BAD_SHAPE;
  if (!(eps >= 0) || !std::isfinite(eps)) return FASTLN_CUDA_ERR_BAD_EPS;
  if (dtype < FASTLN_CUDA_F32 || dtype > FASTLN_CUDA_BF16) return FASTLN_CUDA_ERR_BAD_ARGUMENT;
  if (a.rows == 0) return FASTLN_CUDA_OK;
  DeviceGuard guard(device);
  if (guard.error() != cudaSuccess) return Fail(guard.error(), "selecting the device");
  FwdArgs args = a;
  args.eps = float(eps);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  ByDtype(dtype, [&](auto t) { return Forward<decltype(t)>(args, device, s); }, &e);
  return e == cudaSuccess ? FASTLN_CUDA_OK : Fail(e, "launching the forward kernel");
}

int CheckBackward(int dtype, const BwdArgs &a) {
  if (a.rows > 0 && (!a.dy || !a.x || !a.rstd || !a.dx || (!a.rms && !a.mean)))
    return FASTLN_CUDA_ERR_NULL_POINTER;
  if (a.rows < 0 || a.cols <= 0 || a.lddy < a.cols || a.ldx < a.cols || a.lddx < a.cols ||
      BadLd(a.lddr, a.cols, a.dres))
    return FASTLN_CUDA_ERR_BAD_SHAPE;
  if (!Spans(a.rows, a.cols, a.lddy) || !Spans(a.rows, a.cols, a.ldx) ||
      !Spans(a.rows, a.cols, a.lddx) || (a.dres && !Spans(a.rows, a.cols, a.lddr)))
    return FASTLN_CUDA_ERR_BAD_SHAPE;
  if (dtype < FASTLN_CUDA_F32 || dtype > FASTLN_CUDA_BF16) return FASTLN_CUDA_ERR_BAD_ARGUMENT;
  return FASTLN_CUDA_OK;
}

int RunBackward(int dtype, const BwdArgs &a, int device, void *stream) {
  int st = CheckBackward(dtype, a);
  if (st != FASTLN_CUDA_OK) return st;
  const bool partial = a.dw || a.db;
  if (a.rows == 0) {
    // No rows: the parameter gradients are zero, and no workspace is used
    // (fastln_cuda_backward_workspace asks for 0 bytes, so it may be NULL).
    if (!partial) return FASTLN_CUDA_OK;
    DeviceGuard guard(device);
    if (guard.error() != cudaSuccess) return Fail(guard.error(), "selecting the device");
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaSuccess;
    if (a.dw) e = cudaMemsetAsync(a.dw, 0, size_t(a.cols) * sizeof(float), s);
    if (e == cudaSuccess && a.db) e = cudaMemsetAsync(a.db, 0, size_t(a.cols) * sizeof(float), s);
    return e == cudaSuccess ? FASTLN_CUDA_OK : Fail(e, "zeroing the parameter gradients");
  }
  if (partial && (!a.partial || (reinterpret_cast<uintptr_t>(a.partial) & 15u)))
    return FASTLN_CUDA_ERR_WORKSPACE;
  DeviceGuard guard(device);
  if (guard.error() != cudaSuccess) return Fail(guard.error(), "selecting the device");
  if (partial) {
    size_t need = 0;
    cudaError_t e = cudaSuccess;
    ByDtype(dtype, [&](auto t) { return BackwardWorkspace<decltype(t)>(a, device, &need); }, &e);
    if (e != cudaSuccess) return Fail(e, "planning the backward kernel");
    if (a.partial_bytes < need) return FASTLN_CUDA_ERR_WORKSPACE;
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  ByDtype(dtype, [&](auto t) { return Backward<decltype(t)>(a, device, s); }, &e);
  return e == cudaSuccess ? FASTLN_CUDA_OK : Fail(e, "launching the backward kernel");
}

}  // namespace
}  // namespace fastln_cuda

using fastln_cuda::BwdArgs;
using fastln_cuda::FwdArgs;

extern "C" {

const char *fastln_cuda_status_string(int status) {
  switch (status) {
    case FASTLN_CUDA_OK:
      return "success";
    case FASTLN_CUDA_ERR_NULL_POINTER:
      return "a required pointer is NULL";
    case FASTLN_CUDA_ERR_BAD_SHAPE:
      return "bad shape: rows < 0, cols <= 0, a leading dimension < cols, or arrays that would "
             "span more than PTRDIFF_MAX bytes";
    case FASTLN_CUDA_ERR_BAD_EPS:
      return "eps must be finite and >= 0";
    case FASTLN_CUDA_ERR_BAD_ARGUMENT:
      return "invalid argument";
    case FASTLN_CUDA_ERR_WORKSPACE:
      return "the workspace is missing, too small or not 16-byte aligned";
    case FASTLN_CUDA_ERR_CUDA:
      return "the CUDA runtime reported an error";
    default:
      return "unknown status";
  }
}

const char *fastln_cuda_last_error(void) { return fastln_cuda::g_last_error; }

int fastln_cuda_device_count(int *count) {
  if (!count) return FASTLN_CUDA_ERR_NULL_POINTER;
  *count = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the runtime keeps a sticky copy for the next call otherwise
    return fastln_cuda::Fail(e, "cudaGetDeviceCount");
  }
  *count = n;
  return FASTLN_CUDA_OK;
}

int fastln_cuda_runtime_version(void) { return CUDART_VERSION; }

int fastln_cuda_layer_norm(int dtype, const void *x, int64_t ldx, const void *residual,
                           int64_t ldr, void *y, int64_t ldy, void *h, int64_t ldh,
                           const float *weight, const float *bias, float *mean, float *rstd,
                           int64_t rows, int64_t cols, double eps, int device, void *stream) {
  FwdArgs a{x, ldx, residual, ldr, y, ldy, residual ? h : nullptr, ldh, weight, bias, mean, rstd,
            rows, cols, 0.f, false};
  return fastln_cuda::RunForward(dtype, a, eps, device, stream);
}

int fastln_cuda_rms_norm(int dtype, const void *x, int64_t ldx, const void *residual, int64_t ldr,
                         void *y, int64_t ldy, void *h, int64_t ldh, const float *weight,
                         float *rstd, int64_t rows, int64_t cols, double eps, int device,
                         void *stream) {
  FwdArgs a{x, ldx, residual, ldr, y, ldy, residual ? h : nullptr, ldh, weight, nullptr, nullptr,
            rstd, rows, cols, 0.f, true};
  return fastln_cuda::RunForward(dtype, a, eps, device, stream);
}

int fastln_cuda_backward_workspace(int dtype, int rms, int64_t rows, int64_t cols, int want_dweight,
                                   int want_dbias, int device, size_t *bytes) {
  if (!bytes) return FASTLN_CUDA_ERR_NULL_POINTER;
  *bytes = 0;
  if (rows < 0 || cols <= 0 || !fastln_cuda::Spans(rows, cols, cols))
    return FASTLN_CUDA_ERR_BAD_SHAPE;
  if (dtype < FASTLN_CUDA_F32 || dtype > FASTLN_CUDA_BF16) return FASTLN_CUDA_ERR_BAD_ARGUMENT;
  if (rows == 0 || (!want_dweight && !want_dbias)) return FASTLN_CUDA_OK;
  // The plan depends on alignment only through the vector width; the workspace is sized for the
  // aligned plan and the fallback alike (both grids are bounded by the same resident-block cap,
  // so take the larger).
  static float dummy_f;
  BwdArgs a{};
  a.rows = rows;
  a.cols = cols;
  a.rms = rms != 0;
  a.dw = want_dweight ? &dummy_f : nullptr;
  a.db = want_dbias ? &dummy_f : nullptr;
  fastln_cuda::DeviceGuard guard(device);
  if (guard.error() != cudaSuccess) return fastln_cuda::Fail(guard.error(), "selecting the device");
  size_t best = 0;
  for (int aligned = 0; aligned < 2; ++aligned) {
    // 16-byte aligned fake pointers select the vector plan; 2-byte aligned ones the fallback.
    const void *p = reinterpret_cast<const void *>(uintptr_t(aligned ? 256 : 258));
    a.x = a.dy = a.dx = const_cast<void *>(p);
    a.ldx = a.lddy = a.lddx = cols;
    size_t n = 0;
    cudaError_t e = cudaSuccess;
    fastln_cuda::ByDtype(
        dtype, [&](auto t) { return fastln_cuda::BackwardWorkspace<decltype(t)>(a, device, &n); },
        &e);
    if (e != cudaSuccess) return fastln_cuda::Fail(e, "planning the backward kernel");
    if (n > best) best = n;
  }
  *bytes = best;
  return FASTLN_CUDA_OK;
}

int fastln_cuda_layer_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                    int64_t ldx, const float *mean, const float *rstd,
                                    const float *weight, const void *dresidual, int64_t lddr,
                                    void *dx, int64_t lddx, float *dweight, float *dbias,
                                    void *workspace, size_t workspace_bytes, int64_t rows,
                                    int64_t cols, int device, void *stream) {
  BwdArgs a{dy, lddy, x, ldx, mean, rstd, weight, dresidual, lddr, dx, lddx, dweight, dbias,
            static_cast<float *>(workspace), workspace_bytes, rows, cols, false};
  return fastln_cuda::RunBackward(dtype, a, device, stream);
}

int fastln_cuda_rms_norm_backward(int dtype, const void *dy, int64_t lddy, const void *x,
                                  int64_t ldx, const float *rstd, const float *weight,
                                  const void *dresidual, int64_t lddr, void *dx, int64_t lddx,
                                  float *dweight, void *workspace, size_t workspace_bytes,
                                  int64_t rows, int64_t cols, int device, void *stream) {
  BwdArgs a{dy, lddy, x, ldx, nullptr, rstd, weight, dresidual, lddr, dx, lddx, dweight, nullptr,
            static_cast<float *>(workspace), workspace_bytes, rows, cols, true};
  return fastln_cuda::RunBackward(dtype, a, device, stream);
}

}  // extern "C"
