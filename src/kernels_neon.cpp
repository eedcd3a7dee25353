// NEON kernels for aarch64, where NEON is part of the baseline. On other targets this file only
// says that the ISA is absent.
#include "kernel_table.h"

#if defined(__aarch64__)
#define FASTLN_NS neon
#define FASTLN_ISA_NAME "neon"
#include "simd/vec_neon.h"
#include "kernels-inl.h"

const fastln::KernelTable *fastln::table_neon() { return &fastln::neon::kTable; }
#else
const fastln::KernelTable *fastln::table_neon() { return nullptr; }
#endif
