// AVX-512 kernels. This file alone is compiled with -mavx512f -mavx512vl -mavx512bw -mavx512dq
// -mfma -mf16c; dispatch.cpp calls into it only after cpuid and xgetbv say the CPU has all of those
// and the OS saves the opmask and ZMM state.
#include "kernel_table.h"

#if defined(__x86_64__) || defined(_M_X64)
#if !defined(__AVX512F__) || !defined(__AVX512VL__) || !defined(__AVX512BW__) || \
    !defined(__AVX512DQ__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx512.cpp must be compiled with -mavx512f -mavx512vl -mavx512bw -mavx512dq -mfma -mf16c"
#endif
// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector, which
// -Wmaybe-uninitialized (and, where inlining puts it, -Wuninitialized) reports at every inlined
// use (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define FASTLN_NS avx512
#define FASTLN_ISA_NAME "avx512"
#include "simd/vec_avx512.h"
#include "kernels-inl.h"

const fastln::KernelTable *fastln::table_avx512() { return &fastln::avx512::kTable; }
#else
const fastln::KernelTable *fastln::table_avx512() { return nullptr; }
#endif
