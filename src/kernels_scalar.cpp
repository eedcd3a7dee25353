// The portable kernels: the vector API with one lane. Always compiled, with the baseline flags.
#define FASTLN_NS scalar
#define FASTLN_ISA_NAME "scalar"
#include "simd/vec_scalar.h"
#include "kernels-inl.h"

const fastln::KernelTable *fastln::table_scalar() { return &fastln::scalar::kTable; }
