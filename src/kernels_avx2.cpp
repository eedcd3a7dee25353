// AVX2 + FMA kernels. This file alone is compiled with -mavx2 -mfma -mf16c; dispatch.cpp calls into
// it only after cpuid and xgetbv say the CPU and the OS support those instructions.
#include "kernel_table.h"

#if defined(__x86_64__) || defined(_M_X64)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "kernels_avx2.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#define FASTLN_NS avx2
#define FASTLN_ISA_NAME "avx2"
#include "simd/vec_avx2.h"
#include "kernels-inl.h"

const fastln::KernelTable *fastln::table_avx2() { return &fastln::avx2::kTable; }
#else
const fastln::KernelTable *fastln::table_avx2() { return nullptr; }
#endif
