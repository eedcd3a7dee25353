// The kernels for __nv_bfloat16; each dtype is its own file so that nvcc builds them in parallel.
#include "norm-inl.cuh"

namespace fastln_cuda {
FASTLN_CUDA_INSTANTIATE(__nv_bfloat16)
}  // namespace fastln_cuda
