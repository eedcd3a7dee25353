// One row of function pointers per op and dtype. Each ISA's kernel file fills one table; dispatch.cpp
// holds an atomic pointer to the active one. Kernels work on a block of rows and never spawn threads:
// threading lives in api.cpp, so every ISA shares one partitioning and the result cannot depend on
// the thread count.
#ifndef FASTLN_KERNEL_TABLE_H_
#define FASTLN_KERNEL_TABLE_H_

#include <stdint.h>

namespace fastln {

// The size of a call's y, in bytes, from which it is written with non-temporal stores: float32
// and float64 y when native, 16-bit y otherwise; `split`: a call shared by several threads;
// `long_rows`: a layer norm with weight or bias whose rows are long enough that, streamed, their
// weight and bias no longer stay in L1 (dispatch.cpp; fastln_set_stream_bytes). Baseline code,
// so every ISA's kernels may call it.
int64_t StreamBytes(bool native, bool split, bool long_rows);

// The size of a core's L1 data cache, in bytes (dispatch.cpp: cpuid; 32 KiB where the CPU does
// not say).
int64_t L1dBytes();

// The row length, in bytes, from which the layer norm's normalize pass runs in column bands across
// groups of rows, for rows of float or double (native) or of 16-bit values (dispatch.cpp;
// fastln_set_band_bytes; INT64_MAX: never).
int64_t BandRowBytes(bool native);

// From how large an x (the whole call's, in bytes) a layer norm call on one thread, in rows of
// float or double of kPhasedMinRowBytes to kPhasedMaxRowBytes and without the residual add, takes
// each row's statistics and then its normalize pass, rather than each row's normalize pass inside
// the next rows' statistics (PhasedRows in ops/layer_norm-inl.h; dispatch.cpp; FASTLN_PHASED_MIB;
// INT64_MAX: never).
int64_t PhasedBytes();

// Whether the layer norm's normalize pass (outside the column bands) and, with AVX-512, the RMS
// norm's scaling pass start their vectors at y's line boundaries, so that their stores stay within
// lines and x's loads cross them, rather than at x's (dispatch.cpp; FASTLN_NORMALIZE_FROM).
bool NormalizeFromY();

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
  int64_t call_rows = 0;  // rows of the whole call (all threads); 0: the kernel's own block
};

template <class T>
using LayerNormRowsFn = void (*)(const LayerNormArgs<T> &a, int64_t row_begin, int64_t row_end);

// The backward passes of LayerNorm and RMSNorm (mean is null for RMSNorm). T is the storage type
// of dy, x and dx (uint16_t holds float16 or bfloat16 bits); P the type of mean, rstd, weight and
// of the column sums: T itself for float and double, float for 16-bit storage.
template <class T, class P = T>
struct NormBackwardArgs {
  const T *dy; int64_t lddy;
  const T *x; int64_t ldx;
  T *dx; int64_t lddx;
  const P *mean;    // indexed by row; unused by RMSNorm
  const P *rstd;    // indexed by row
  const P *weight;  // may be null
  int64_t cols;
};

// Writes dx for rows [row_begin, row_end). When dw is not null, also writes (not adds) the column
// sums over those rows of dy * xhat to dw[0, cols) and, for LayerNorm, of dy to db[0, cols), in P.
// The caller hands each fixed block of rows (a few dozen) its own dw/db and sums them in double in
// a fixed order, so dweight and dbias do not depend on the thread count.
template <class T, class P = T>
using NormBackwardRowsFn = void (*)(const NormBackwardArgs<T, P> &a, int64_t row_begin,
                                    int64_t row_end, P *dw, P *db);
// A norm with a fused residual add and/or 16-bit storage (src/ops/add_norm-inl.h). T is the storage
// type (uint16_t holds float16 or bfloat16 bits); P the type of the parameters and statistics: T
// itself for float and double, float for 16-bit storage. Per row, with res: h = x + res rounded to
// T and written to h (which may be x or res), y = norm(h); without res (null): y = norm(x).
template <class T, class P>
struct AddNormArgs {
  const T *x; int64_t ldx;
  const T *res; int64_t ldr;  // may be null
  T *h; int64_t ldh;          // required with res
  T *y; int64_t ldy;
  const P *weight;  // may be null
  const P *bias;    // may be null
  P *mean;          // may be null; indexed by row
  P *rstd;          // may be null; indexed by row
  int64_t cols;
  double eps;
  int *status;  // a kernel that fails (out of memory) stores a fastln_status here
  int64_t call_rows = 0;  // rows of the whole call (all threads); 0: the kernel's own block
};

template <class T, class P>
using AddNormRowsFn = void (*)(const AddNormArgs<T, P> &a, int64_t row_begin, int64_t row_end);

// n 16-bit values (float16 or bfloat16 bits) widened to float, exactly.
using WidenFn = void (*)(const uint16_t *src, float *dst, int64_t n);

struct KernelTable {
  const char *name;
  LayerNormRowsFn<float> layer_norm_f32;
  LayerNormRowsFn<double> layer_norm_f64;
  // RMSNorm forward takes LayerNormArgs and ignores its bias and mean.
  LayerNormRowsFn<float> rms_norm_f32;
  LayerNormRowsFn<double> rms_norm_f64;
  NormBackwardRowsFn<float> layer_norm_backward_f32;
  NormBackwardRowsFn<double> layer_norm_backward_f64;
  NormBackwardRowsFn<float> rms_norm_backward_f32;
  NormBackwardRowsFn<double> rms_norm_backward_f64;
  NormBackwardRowsFn<uint16_t, float> layer_norm_backward_f16;
  NormBackwardRowsFn<uint16_t, float> layer_norm_backward_bf16;
  NormBackwardRowsFn<uint16_t, float> rms_norm_backward_f16;
  NormBackwardRowsFn<uint16_t, float> rms_norm_backward_bf16;
  AddNormRowsFn<float, float> add_layer_norm_f32;
  AddNormRowsFn<double, double> add_layer_norm_f64;
  AddNormRowsFn<uint16_t, float> add_layer_norm_f16;
  AddNormRowsFn<uint16_t, float> add_layer_norm_bf16;
  // RMSNorm with a residual and/or 16-bit storage: bias and mean are null.
  AddNormRowsFn<float, float> add_rms_norm_f32;
  AddNormRowsFn<double, double> add_rms_norm_f64;
  AddNormRowsFn<uint16_t, float> add_rms_norm_f16;
  AddNormRowsFn<uint16_t, float> add_rms_norm_bf16;
  WidenFn widen_f16;
  WidenFn widen_bf16;
  // Layer norm of examples stored as columns (src/ops/layer_norm_cols-inl.h): the args' "rows"
  // are examples, x(i, k) = x[k * ldx + i], y likewise; res, h null.
  AddNormRowsFn<float, float> layer_norm_cols_f32;
  AddNormRowsFn<double, double> layer_norm_cols_f64;
};

// Defined in kernels_<isa>.cpp. Each returns null when that ISA is not compiled into this build.
const KernelTable *table_scalar();
const KernelTable *table_avx2();
const KernelTable *table_avx512();
const KernelTable *table_neon();

}  // namespace fastln

#endif  // FASTLN_KERNEL_TABLE_H_
