// Fused residual add and 16-bit storage around the float row routines. Included by kernels-inl.h,
// once per ISA, after the ops it wraps.
//
// Both go through the rows in blocks of about kBlockBytes, so that what they hand to the float
// routine is still in L1 when it reads it:
// - residual: h = x + res is written to the block's h rows, then the routine normalizes those h
//   rows into y. x and res are read once from memory, h and y written once; the routine's own
//   passes over h hit L1. A large y takes the layer norm's non-temporal stores (measured, 2048 x
//   1024 float32 from memory: 1.63 ms against 2.2 ms with plain stores).
// - 16-bit storage: the block is widened into a float scratch block (on the stack; a row longer
//   than it gets a heap row of its own), the float32 routine runs on it in place, and the result
//   is rounded back into y. The float32 kernel is reused as it is, statistics and fallback paths
//   included, instead of a second copy templated on the storage type.
// A block of several rows, rather than one row at a time, lets the routine overlap one row's
// statistics with the previous row's normalize pass (measured: 64x384 float32 rows with a
// residual, 5.4 us in 32 KiB blocks against 6.9 us row by row; 16 KiB and 64 KiB blocks were no
// better than 32 KiB).

#include <stddef.h>

#include "fastln/fastln.h"

FASTLN_OPS_BEGIN

// The 16-bit formats: how a vector of floats and a single float load from and store to their bits.
struct Float16Format {
  using S = Simd<float>;
  static inline S::V Load(const uint16_t *p) { return S::LoadF16(p); }
  static inline void Store(uint16_t *p, S::V v) { S::StoreF16(p, v); }
  static inline float ToFloat(uint16_t h) { return HalfToFloat(h); }
  static inline uint16_t FromFloat(float f) { return FloatToHalf(f); }
};

struct BFloat16Format {
  using S = Simd<float>;
  static inline S::V Load(const uint16_t *p) { return S::LoadBF16(p); }
  static inline void Store(uint16_t *p, S::V v) { S::StoreBF16(p, v); }
  static inline float ToFloat(uint16_t h) { return BFloat16ToFloat(h); }
  static inline uint16_t FromFloat(float f) { return FloatToBFloat16(f); }
};

// h = x + r, elementwise; h may be x or r.
template <class T>
inline void AddRow(const T *x, const T *r, T *h, int64_t n) {
  using S = Simd<T>;
  constexpr int N = S::N;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const typename S::V a = S::Add(S::Load(x + i), S::Load(r + i));
    const typename S::V b = S::Add(S::Load(x + i + N), S::Load(r + i + N));
    S::Store(h + i, a);
    S::Store(h + i + N, b);
  }
  for (; i + N <= n; i += N) S::Store(h + i, S::Add(S::Load(x + i), S::Load(r + i)));
  for (; i < n; ++i) h[i] = x[i] + r[i];
}

// f = the values of the 16-bit row x.
template <class F>
inline void WidenRow(const uint16_t *x, float *f, int64_t n) {
  constexpr int N = Simd<float>::N;
  int64_t i = 0;
  for (; i + N <= n; i += N) Simd<float>::Store(f + i, F::Load(x + i));
  for (; i < n; ++i) f[i] = F::ToFloat(x[i]);
}

// h = x + r rounded once to the 16-bit format, and f = the values of h. The float sum of two
// 16-bit values rounded to 16 bits equals their correctly rounded sum (float has more than twice
// their precision plus two bits), so h is what NumPy's x + r gives. h may be x or r.
template <class F>
inline void AddWidenRow(const uint16_t *x, const uint16_t *r, uint16_t *h, float *f, int64_t n) {
  using S = Simd<float>;
  constexpr int N = S::N;
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    F::Store(h + i, S::Add(F::Load(x + i), F::Load(r + i)));
    S::Store(f + i, F::Load(h + i));
  }
  for (; i < n; ++i) {
    h[i] = F::FromFloat(F::ToFloat(x[i]) + F::ToFloat(r[i]));
    f[i] = F::ToFloat(h[i]);
  }
}

// y = f rounded to the 16-bit format.
template <class F>
inline void NarrowRow(const float *f, uint16_t *y, int64_t n) {
  constexpr int N = Simd<float>::N;
  int64_t i = 0;
  for (; i + N <= n; i += N) F::Store(y + i, Simd<float>::Load(f + i));
  for (; i < n; ++i) y[i] = F::FromFloat(f[i]);
}

// Bytes of float (or T) values per block; the 16-bit path's scratch block on the stack.
constexpr int64_t kBlockBytes = 32768;
constexpr int64_t kScratch = kBlockBytes / int64_t(sizeof(float));

inline int64_t RowsPerBlock(int64_t cols, int64_t elem_bytes) {
  const int64_t k = kBlockBytes / (cols * elem_bytes);
  return k > 0 ? k : 1;
}

inline void SetStatus(int *status, int code) {
  if (status) __atomic_store_n(status, code, __ATOMIC_RELAXED);
}

// Rows of T (float or double). norm(src, ld_src, dst, ld_dst, r, k, stream) normalizes rows
// [r, r + k); with stream, y may take non-temporal stores. The blocks are small, so the choice is
// made here for the whole call, by the layer norm's own rule (kStreamBytes, kStreamRowBytes): y
// large enough not to stay in cache. h is read back at once and never streamed.
template <class T, class Norm>
void AddNormRowsT(const AddNormArgs<T, T> &a, int64_t r0, int64_t r1, Norm norm) {
  const int64_t row_bytes = a.cols * int64_t(sizeof(T));
  const bool stream = (r1 - r0) * row_bytes >= kStreamBytes && row_bytes >= kStreamRowBytes &&
                      reinterpret_cast<uintptr_t>(a.y) % sizeof(T) == 0;
  if (!a.res) return norm(a.x + r0 * a.ldx, a.ldx, a.y + r0 * a.ldy, a.ldy, r0, r1 - r0, stream);
  const int64_t per = RowsPerBlock(a.cols, sizeof(T));
  for (int64_t r = r0; r < r1; r += per) {
    const int64_t k = Min(per, r1 - r);
    for (int64_t i = r; i < r + k; ++i) {
      AddRow<T>(a.x + i * a.ldx, a.res + i * a.ldr, a.h + i * a.ldh, a.cols);
    }
    norm(a.h + r * a.ldh, a.ldh, a.y + r * a.ldy, a.ldy, r, k, stream);
  }
}

// Rows stored in the 16-bit format F: widened into a float block, normalized there in place by
// the float routine, rounded back into y.
template <class F, class Norm>
void AddNormRows16(const AddNormArgs<uint16_t, float> &a, int64_t r0, int64_t r1, Norm norm) {
  const int64_t n = a.cols;
  float stack[kScratch];
  float *f = stack;
  if (n > kScratch) {
    f = static_cast<float *>(__builtin_malloc(sizeof(float) * static_cast<size_t>(n)));
    if (!f) return SetStatus(a.status, FASTLN_ERR_NO_MEMORY);
  }
  const int64_t per = RowsPerBlock(n, sizeof(float));
  for (int64_t r = r0; r < r1; r += per) {
    const int64_t k = Min(per, r1 - r);
    for (int64_t i = 0; i < k; ++i) {
      const uint16_t *x = a.x + (r + i) * a.ldx;
      if (a.res) {
        AddWidenRow<F>(x, a.res + (r + i) * a.ldr, a.h + (r + i) * a.ldh, f + i * n, n);
      } else {
        WidenRow<F>(x, f + i * n, n);
      }
    }
    norm(f, n, f, n, r, k, false);
    for (int64_t i = 0; i < k; ++i) NarrowRow<F>(f + i * n, a.y + (r + i) * a.ldy, n);
  }
  if (f != stack) __builtin_free(f);
}

// k rows through a float row routine (LayerNormRows, RmsNormRows: the latter ignores bias and
// mean), or its streaming-store variant; src and dst may be the same rows.
template <class P>
using RowsFn = void (*)(const LayerNormArgs<P> &, int64_t, int64_t);

template <class T, class P, RowsFn<P> Rows, RowsFn<P> StreamRows>
struct NormBlock {
  const AddNormArgs<T, P> &a;
  void operator()(const P *src, int64_t lds, P *dst, int64_t ldd, int64_t r, int64_t k,
                  bool stream) const {
    const LayerNormArgs<P> b{src, lds, dst, ldd, a.weight, a.bias,
                             a.mean ? a.mean + r : nullptr, a.rstd ? a.rstd + r : nullptr,
                             a.cols, a.eps, stream};
    (stream ? StreamRows : Rows)(b, 0, k);
  }
};

template <class T>
void AddLayerNormRows(const AddNormArgs<T, T> &a, int64_t r0, int64_t r1) {
  AddNormRowsT<T>(a, r0, r1, NormBlock<T, T, &LayerNormRows<T>, &LayerNormRowsS<T, true>>{a});
}

template <class F>
void AddLayerNormRows16(const AddNormArgs<uint16_t, float> &a, int64_t r0, int64_t r1) {
  using Block = NormBlock<uint16_t, float, &LayerNormRows<float>, &LayerNormRows<float>>;
  AddNormRows16<F>(a, r0, r1, Block{a});
}

template <class T>
void AddRmsNormRows(const AddNormArgs<T, T> &a, int64_t r0, int64_t r1) {
  AddNormRowsT<T>(a, r0, r1, NormBlock<T, T, &RmsNormRows<T>, &RmsNormRows<T>>{a});
}

template <class F>
void AddRmsNormRows16(const AddNormArgs<uint16_t, float> &a, int64_t r0, int64_t r1) {
  using Block = NormBlock<uint16_t, float, &RmsNormRows<float>, &RmsNormRows<float>>;
  AddNormRows16<F>(a, r0, r1, Block{a});
}

FASTLN_OPS_END
