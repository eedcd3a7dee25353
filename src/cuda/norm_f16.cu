// The kernels for __half; each dtype is its own file so that nvcc builds them in parallel.
#include "norm-inl.cuh"

namespace fastln_cuda {
FASTLN_CUDA_INSTANTIATE(__half)
}  // namespace fastln_cuda
