// One row of function pointers per op and dtype. Each ISA's kernel file fills one table; dispatch.cpp
// holds an atomic pointer to the active one. Kernels work on a block of rows and never spawn threads:
// threading lives in api.cpp, so every ISA shares one partitioning and the result cannot depend on
// the thread count.
#ifndef FASTLN_KERNEL_TABLE_H_
#define FASTLN_KERNEL_TABLE_H_

#include <stdint.h>

namespace fastln {

template <class T>
struct LayerNormArgs {
  const T *x; int64_t ldx;
  T *y; int64_t ldy;
  const T *weight;  // may be null
  const T *bias;    // may be null
  T *mean;          // may be null; indexed by row
  T *rstd;          // may be null; indexed by row
  int64_t cols;
  double eps;
  bool stream;      // y may take non-temporal stores (false when the caller says y is fresh)
};

template <class T>
using LayerNormRowsFn = void (*)(const LayerNormArgs<T> &a, int64_t row_begin, int64_t row_end);

struct KernelTable {
  const char *name;
  LayerNormRowsFn<float> layer_norm_f32;
  LayerNormRowsFn<double> layer_norm_f64;
};

// Defined in kernels_<isa>.cpp. Each returns null when that ISA is not compiled into this build.
const KernelTable *table_scalar();
const KernelTable *table_avx2();
const KernelTable *table_neon();

}  // namespace fastln

#endif  // FASTLN_KERNEL_TABLE_H_
