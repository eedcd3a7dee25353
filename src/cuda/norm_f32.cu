// The kernels for float; each dtype is its own file so that nvcc builds them in parallel.
#include "norm-inl.cuh"

namespace fastln_cuda {
FASTLN_CUDA_INSTANTIATE(float)
}  // namespace fastln_cuda
