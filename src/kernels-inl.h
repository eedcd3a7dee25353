// Every kernel, written once over the vector API of simd/vec_<isa>.h.
//
// Included by kernels_<isa>.cpp after that header, with FASTLN_NS naming the ISA's namespace. All
// of it sits in an anonymous namespace inside fastln::FASTLN_NS: each copy has internal linkage, so
// the linker can never merge an AVX2-compiled helper into code that runs before dispatch. For the
// same reason nothing here needs a dynamic initializer (the tables below are constexpr), and no
// standard-library template is instantiated: an inline std:: function compiled with -mavx2 would be
// a COMDAT the linker could pick for baseline callers.
//
// No per-ISA #if inside: what differs between ISAs is the lane count, and that is Simd<T>::N.

#include <stdint.h>

#include <type_traits>

#include "kernel_table.h"

namespace fastln {
namespace FASTLN_NS {
namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers (no <cmath>: see above).

// For the small functions a row's inner loops call once a block (the normalize pass's Block, the
// merge of moments): when GCC's inlining budget ran out on them, each call spilled every vector
// register around it (all are caller-saved), and 2048x100 took 124 us instead of 95.
#define FASTLN_INLINE inline __attribute__((always_inline))

inline bool IsFinite(double v) { return v - v == 0.0; }  // false for NaN and +-Inf
inline double Sqrt(double v) { return __builtin_sqrt(v); }
inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t Max(int64_t a, int64_t b) { return a < b ? b : a; }
inline double Abs(double v) { return v < 0 ? -v : v; }

template <class A, class B> struct IsSame { static constexpr bool value = false; };
template <class A> struct IsSame<A, A> { static constexpr bool value = true; };

// Steps per lane whose squares are summed apart before they are added into a row's running sum of
// squares (see RowMoments). Short, because a float32 running sum of squares drifts: at
// x ~ 1e4 + N(0, 1) the squares of x - K are multiples of 2^-20, the running sum's last place
// passes that near 16, and from there ties round to even, one way more than the other. Simulated
// in NumPy, relative error of the variance of 4096 values over 32 lanes (max of 30 rows): 5.3e-7
// with chunks of 256 steps, 2.6e-7 with 32, 6.8e-8 with 16 (Welford's recurrence: 8.2e-8).
constexpr int kChunk = 16;

// Blocks (steps per lane) after which a layer norm row's per-lane sums, and its running sum of
// squares, go into double (see RowMoments). Summed in T over the whole row, a lane stopped taking
// its values in: a float32 row of 2^27 ones had mean 0.5 with the scalar ISA (4 lanes), from 2^30
// values with AVX2 and 2^31 with AVX-512, and rows of 3, -1, 3, ... from 2^25 + 64 values with the
// scalar ISA (mean 1.17, exact 1). A lane now sums at most this many values in T. A multiple of
// kChunk; rows shorter than that many blocks give the same bits as before.
constexpr int64_t kFoldBlocks = 4096;
static_assert(kFoldBlocks % kChunk == 0, "folds fall on chunk ends");

// Below this, var + eps is too small for the fast path's squares: they would be denormal or zero in
// T. Such rows (and rows with overflow, NaN or Inf) take the exact fallback path.
template <class T> inline double TinyVar();
template <> inline double TinyVar<float>() { return 0x1p-100; }
template <> inline double TinyVar<double>() { return 0x1p-900; }

// The exact paths' first read of a row: false if it holds NaN or Inf (the row becomes NaN, done
// here), else the powers of two s1, s2 with max |x * s1 * s2| in [0.5, 1). Two factors, because for
// subnormal doubles 2^-e alone overflows; both are powers of two, so the scaling is exact.
// St is the row's storage format (see Native below).
template <class St>
inline bool ExactScale(const typename St::E *x, typename St::E *y, int64_t n, double *s1,
                       double *s2) {
  using T = typename St::T;
  double amax = 0.0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(St::ToT(x[i]));
    if (!IsFinite(v)) finite = false;
    const double a = Abs(v);
    if (a > amax) amax = a;
  }
  if (!finite) {
    const typename St::E nan = St::FromT(T(__builtin_nan("")));
    for (int64_t i = 0; i < n; ++i) y[i] = nan;
    return false;
  }
  int e = 0;
  if (amax > 0) __builtin_frexp(amax, &e);
  *s1 = __builtin_ldexp(1.0, -e / 2);
  *s2 = __builtin_ldexp(1.0, -e - (-e / 2));
  return true;
}

// Rows longer than L1 holds come from L2 in every pass, in up to five streams at once (the
// statistics of one row, and x, weight, bias and y of another's normalize pass): more than the L1
// prefetchers follow. So the passes ask for the lines they will read kPrefetchBytes ahead of each
// stream. Measured with a C++ loop over the kernel, float32, weight and bias, 1 thread:
// 8x16384 31.0 -> 24.2 us, 16x8192 30.8 -> 24.0, 64x4096 68.4 -> 57.8, 1x16384 4.0 -> 3.4; float64
// 8x16384 74.6 -> 64.1 us, 16x8192 69.1 -> 59.0. 128x768, 2048x64 and the memory-bound 2048x1024
// and 512x4096 unchanged within noise; 2048 and 4096 bytes ahead did no better. Prefetching past
// the end of a row is harmless: a prefetch never faults. Rows under kPrefetchRowBytes skip it: the
// hardware follows them, and on 2048x64 the prefetches cost instructions for nothing (callgrind:
// 419 a row with them, 402 without). The normalize pass has a higher threshold of its own
// (kPrefetchNormalizeBytes in ops/layer_norm-inl.h). On an AMD EPYC (Zen 3) guest (2026-12-02, C
// loop over the kernel, float32, 1 thread, both builds in one process, best of 11 rounds) neither
// way won: from 512 bytes, 2048x256 and 4096x256 within 5% either way (two runs); from 8 KiB, rows
// of 768 and 1536 values up to 5% faster (512x768 once 2% slower) but rows of 1024 values 2-11%
// slower (three runs). In calls whose x comes from memory the statistics pass asks farther ahead
// (kFarAheadBytes in ops/layer_norm-inl.h).
//
// Rows of float and double from L2 or L3 (calls that do not ask far ahead) prefetch only when
// longer than kPrefetchNearRowBytes: on shorter ones each block's tests for the prefetches, their
// addresses and the prefetches themselves were a fifth of the general loop's instructions and cost
// more than they won. Measured on an AMD EPYC (Zen 5) guest (2026-12-04, libfastln through ctypes,
// AVX2, out=, weight and bias, 1 thread, both builds in one process, order alternating, best of 9
// or 11 rounds, two runs; x, y, weight and bias 16 bytes past a line, then on a line), from 2 KiB
// to from 8 KiB: float32 128x768 9.55 and 9.46 -> 8.84 and 8.70 us, 9.15 and 8.87 -> 8.84 and
// 8.42; 128x1024 13.15 and 12.68 -> 12.12 and 12.08, 11.98 and 11.96 -> 11.68 and 11.49
// (callgrind, 128x768: 1644 -> 1512 instructions a row); 2048x768 (x from L3) 145.5 and 149.0 ->
// 140.9 and 141.5 at 16, 16, 32, 48. But rows of 4 to 8 KiB, which keep one row's lag (LagOf),
// were faster with them: float64 128x768 16.87 and 16.68 us with, 18.08 and 17.89 without, on a
// line; float32 128x1536 17.76 and 17.34 against 18.60 and 18.32. So from just over 4 KiB.
constexpr int64_t kPrefetchBytes = 1024;
constexpr int64_t kPrefetchRowBytes = 2048;
constexpr int64_t kPrefetchNearRowBytes = 4096;

// Whether a row of n values stored as E, read `ahead` bytes ahead, is long enough to prefetch.
template <class E, bool kNative>
inline bool PrefetchRow(int64_t n, int64_t ahead) {
  const int64_t bytes = n * int64_t(sizeof(E));
  if (kNative && ahead <= kPrefetchBytes) return bytes > kPrefetchNearRowBytes;
  return bytes >= kPrefetchRowBytes;
}

// The lines of the n values from p + ahead bytes.
template <class P>
inline void PrefetchAhead(const P *p, int64_t n, int64_t ahead = kPrefetchBytes) {
  // Integer arithmetic: the address may lie past the end of the array.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + uintptr_t(ahead);
  for (int64_t o = 0; o < n * int64_t(sizeof(P)); o += 64) {
    __builtin_prefetch(reinterpret_cast<const void *>(a + uintptr_t(o)));
  }
}

// Mean and sum of squared deviations of a set of n values, both in double; lo: what the mean, a
// double, leaves out of the sum it rounds (RowMoments about a pivot: pivot + their mean).
struct Moments {
  double n;
  double mean;
  double m2;
  double lo = 0.0;
};

// a + b as s + err exactly, s = a + b rounded (TwoSum; Knuth). Needs IEEE arithmetic as written:
// the build's -ffp-contract=off, and no -ffast-math.
FASTLN_INLINE double TwoSum(double a, double b, double *err) {
  const double s = a + b, bb = s - a;
  *err = (a - (s - bb)) + (b - bb);
  return s;
}

// Chan et al.: merge two disjoint sets.
FASTLN_INLINE Moments Merge(const Moments &a, const Moments &b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  const double n = a.n + b.n;
  const double delta = b.mean - a.mean;
  return Moments{n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
}

// ---------------------------------------------------------------------------------------------
// Storage formats: how a row stored as E is read into vectors of the compute type T, and written
// back. The row routines are templates over a format, so 16-bit rows are widened as they are
// loaded and rounded as they are stored, in registers: no pass over a float copy of the row.
// A vector ISA supplies the 16-bit conversions as members of Simd<float> (LoadF16, StoreF16,
// LoadBF16, StoreBF16, StoreBF16RoundOnly; 16-bit bits in, N floats out and back, rounding to
// nearest even); the one-value conversions for row tails are half.h's, shared by every ISA.
//
// Three kinds of plain store, as bfloat16's rounding is cheaper where NaN needs no care
// (StoreBF16RoundOnly, exact unless a NaN lane has nonzero low 16 bits), and StreamPair for y's
// non-temporal stores (Native also has StoreStream, one vector):
//   Store   any values.
//   StoreSum  sums of two values widened from E (the fused residual add's h). A NaN among them
//           is quiet with the payload of a widened value or the default NaN: low 16 bits zero.
//   StoreY  the fast paths' normalized values. NaN there only comes from a NaN or Inf in weight
//           or bias (see AllFinite), so the 16-bit entry points switch to the format NoNaNY
//           (the format itself where that gains nothing) when those are finite.
template <class T_>
struct Native {
  using T = T_;
  using E = T_;
  using S = Simd<T>;
  using NoNaNY = Native;
  static constexpr bool kNative = true;
  static inline typename S::V Load(const E *p) { return S::Load(p); }
  static inline void Store(E *p, typename S::V v) { S::Store(p, v); }
  static inline void StoreSum(E *p, typename S::V v) { S::Store(p, v); }
  static inline void StoreY(E *p, typename S::V v) { S::Store(p, v); }
  static inline void StoreStream(E *p, typename S::V v) { S::StoreStream(p, v); }
  // y's non-temporal stores, two vectors at a time (p aligned to both vectors: a 16-bit format
  // streams the pair as one vector), for the fast paths' normalized values.
  static inline void StreamPair(E *p, typename S::V a, typename S::V b) {
    S::StoreStream(p, a);
    S::StoreStream(p + S::N, b);
  }
  static inline T ToT(E e) { return e; }
  static inline E FromT(T t) { return t; }
};

struct Float16Format {
  using T = float;
  using E = uint16_t;
  using S = Simd<float>;
  using NoNaNY = Float16Format;  // F16C and FCVTN round NaN at no extra cost
  static constexpr bool kNative = false;
  static inline S::V Load(const E *p) { return S::LoadF16(p); }
  static inline void Store(E *p, S::V v) { S::StoreF16(p, v); }
  static inline void StoreSum(E *p, S::V v) { S::StoreF16(p, v); }
  static inline void StoreY(E *p, S::V v) { S::StoreF16(p, v); }
  static inline void StreamPair(E *p, S::V a, S::V b) { S::StreamF16Pair(p, a, b); }
  static inline float ToT(E e) { return HalfToFloat(e); }
  static inline E FromT(float f) { return FloatToHalf(f); }
};

struct BFloat16NoNaNY;

struct BFloat16Format {
  using T = float;
  using E = uint16_t;
  using S = Simd<float>;
  using NoNaNY = BFloat16NoNaNY;
  static constexpr bool kNative = false;
  static inline S::V Load(const E *p) { return S::LoadBF16(p); }
  static inline void Store(E *p, S::V v) { S::StoreBF16(p, v); }
  static inline void StoreSum(E *p, S::V v) { S::StoreBF16RoundOnly(p, v); }
  static inline void StoreY(E *p, S::V v) { S::StoreBF16(p, v); }
  static inline void StreamPair(E *p, S::V a, S::V b) { S::StreamBF16Pair(p, a, b); }
  static inline float ToT(E e) { return BFloat16ToFloat(e); }
  static inline E FromT(float f) { return FloatToBFloat16(f); }
};

// bfloat16 rows with finite weight and bias: y cannot be NaN.
struct BFloat16NoNaNY : BFloat16Format {
  using NoNaNY = BFloat16NoNaNY;
  static inline void StoreY(E *p, S::V v) { S::StoreBF16RoundOnly(p, v); }
  static inline void StreamPair(E *p, S::V a, S::V b) { S::StreamBF16RoundOnlyPair(p, a, b); }
};

// Whether none of n values from p (null: none) is NaN or Inf; v - v is 0 for the others. Where
// this holds for weight and bias, the fast paths' y cannot be NaN: they only normalize rows whose
// values are all finite (a NaN or Inf makes the row's statistics non-finite, and such rows take
// the exact path), and finite u * w + b is a number or +-Inf.
template <class T>
inline bool AllFinite(const T *p, int64_t n) {
  using S = Simd<T>;
  using V = typename S::V;
  if (!p) return true;
  V acc = S::Zero();
  int64_t i = 0;
  for (; i + S::N <= n; i += S::N) {
    const V v = S::Load(p + i);
    acc = S::Add(acc, S::Sub(v, v));
  }
  T s = S::ReduceSum(acc);
  for (; i < n; ++i) s += p[i] - p[i];
  return s == T(0);
}

// Where a routine's first read of a row comes from. RowOf: the stored row x. SumOf: the fused
// residual add; each value read is h = x + r, rounded to the storage format, written to h (which
// may be x or r) and handed on as the rounded value, so that every later pass can read h instead.
// The float sum of two 16-bit values rounded to 16 bits equals their correctly rounded sum (float
// has more than twice their precision plus two bits), so h is what NumPy's x + r gives.
template <class St>
struct RowOf {
  using T = typename St::T;
  using E = typename St::E;
  using V = typename St::S::V;
  const E *x;
  int64_t ahead = kPrefetchBytes;  // how far ahead Prefetch asks (see kFarAheadBytes)
  V Load(int64_t i) const { return St::Load(x + i); }
  T At(int64_t i) const { return St::ToT(x[i]); }
  bool Prefetches(int64_t n) const { return PrefetchRow<E, St::kNative>(n, ahead); }
  void Prefetch(int64_t i, int64_t n) const { PrefetchAhead(x + i, n, ahead); }
};

// Whether Simd S offers RealignedRowOf's loads (Simd<T>::kRealign: AVX-512, and AVX2 for rows 16
// bytes past 32).
template <class S, class = void>
struct RealignOf {
  static constexpr bool value = false;
};
template <class S>
struct RealignOf<S, decltype(void(S::kRealign))> {
  static constexpr bool value = S::kRealign;
};

// RowOf for a native row that does not start on a vector's boundary (Simd<T>::kRealign): each
// vector is put together from the two aligned vectors around it, so no load crosses a line. The
// vectors are the same as RowOf's, bit for bit. The loads also read the rest of the row's first and
// last aligned vectors, which the permute drops (within those lines, so they cannot fault).
// Measured on an AMD EPYC (Zen 5) guest, C loop of the statistics sums alone, float32, 1 thread,
// best of 31 rounds, x 16 bytes past a line, AVX-512: loads that cross lines 3.28 us at 128x768
// (1.76 aligned), 4.35 at 128x1024 (2.33), 1085 at 8192x1024 (794); put together 2.14, 2.71 and
// 745. AVX2: see RealignRows.
template <class St>
struct RealignedRowOf {
  using S = typename St::S;
  using V = typename S::V;
  static_assert(St::kNative, "the stored values are the vector's");
  using T = typename St::T;
  using E = typename St::E;
  static constexpr int N = S::N;
  const E *x;
  int64_t ahead;
  const E *line;  // x rounded down to a vector's bytes (AVX-512: a line)
  int64_t next;   // N, or 0 when x starts a vector: the second load then reads the same vector
                  // again, never the one after the row's last (kRealignAnyOffset only)
  typename S::Idx idx;
  RealignedRowOf(const E *x_, int64_t ahead_ = kPrefetchBytes)
      : x(x_), ahead(ahead_),
        line(x_ - (reinterpret_cast<uintptr_t>(x_) % sizeof(V)) / sizeof(E)),
        next(x_ == line ? 0 : N), idx(S::RealignIdx(int(x_ - line))) {}
  // Without kRealignAnyOffset x never starts a vector, so the second load is a constant N on.
  // (GCC still loaded most aligned vectors twice in a loop of these, once more as the permute's
  // memory operand: the sums over whole blocks no longer come here; see RotatedSumsOf.) The
  // prefetches go from line, not x (the same lines, give or take the last): fewer registers live
  // in the loop, where GCC had spilled x.
  FASTLN_INLINE V Load(int64_t i) const {
    return S::LoadRealigned(line + i, line + i + (S::kRealignAnyOffset ? next : N), idx);
  }
  T At(int64_t i) const { return x[i]; }
  bool Prefetches(int64_t n) const { return PrefetchRow<E, true>(n, ahead); }
  void Prefetch(int64_t i, int64_t n) const { PrefetchAhead(line + i, n, ahead); }
};

// Whether the sums over rows Src reads take their rotated form, from aligned loads alone
// (RowMoments' SumRotated, the RMS norm's SquaresRotated): RealignedRowOf's rows.
template <class Src>
struct RotatedSumsOf {
  static constexpr bool value = false;
};
template <class St>
struct RotatedSumsOf<RealignedRowOf<St>> {
  static constexpr bool value = true;
};

// Values of a row at x before its first boundary of Simd<T>'s vector, at most n; 0 when x is not
// on its element's boundary. Passes that start their vectors there load no vector across a line.
template <class T, class E>
inline int64_t ValuesToVector(const E *x, int64_t n) {
  constexpr int64_t kV = int64_t(sizeof(typename Simd<T>::V)), kE = int64_t(sizeof(E));
  const int64_t at = int64_t(reinterpret_cast<uintptr_t>(x) % kV);
  return at % kE == 0 ? Min(n, (kV - at) % kV / kE) : 0;
}

// Whether rows of x (a native format) should be read by RealignedRowOf. AVX-512: the rows do not
// all start on a line but each starts on its element (NumPy's aligned arrays; the C API might pass
// less). AVX2, whose permute moves only whole halves: every row starts 16 bytes past 32 bytes, so
// that every other load would cross a line. Measured on an AMD EPYC (Zen 5) guest, C loop of the
// two passes interleaved as the kernel runs them (statistics of the next row with the normalize
// pass of this one), float32, weight and bias, 1 thread, best of 21 rounds, x, y, weight and bias
// 16 bytes past a line: 128x768 10.63 us with unaligned loads, 8.50 with the statistics put
// together and the normalize pass peeled to x's line (PeelTo), 7.43 all aligned; 128x1024 14.66,
// 11.79, 12.65 (aligned, a noisier moment). In the kernel the gain is smaller (libfastln through
// ctypes, both builds in one process, best of 15 rounds, 2026-12-03; x,y,w,b offsets in bytes):
// float32 128x768 at 16,16,16,16 12.77 -> 12.10 us, at 48,16,16,48 13.54 -> 11.93, 128x1024 18.17
// -> 16.91, 256x1536 53.60 -> 48.71; float64 128x768 26.58 -> 23.45; aligned rows unchanged (9.77
// and 9.62 at 128x768); rms_norm then within 4% either way. The sums over such rows now take
// aligned loads alone (RotatedSumsOf), which closed most of what was left.
template <class St, class A>
inline bool RealignRows(const A &a) {
  using S = Simd<typename St::T>;
  if constexpr (RealignOf<S>::value && St::kNative) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(a.x);
    const int64_t ld_bytes = a.ldx * int64_t(sizeof(typename St::E));
    if constexpr (S::kRealignAnyOffset) {
      return (at % 64 != 0 || ld_bytes % 64 != 0) && at % sizeof(typename St::E) == 0;
    } else {
      constexpr int64_t kV = int64_t(sizeof(typename S::V));
      return int64_t(at % kV) == kV / 2 && ld_bytes % kV == 0;
    }
  }
  return false;
}

template <class St>
struct SumOf {
  using T = typename St::T;
  using E = typename St::E;
  using S = typename St::S;
  using V = typename S::V;
  const E *x, *r;
  E *h;
  // Two streams in, one out: not measured without the prefetches, which they keep from 2 KiB.
  bool Prefetches(int64_t n) const { return PrefetchRow<E, false>(n, kPrefetchBytes); }
  void Prefetch(int64_t i, int64_t n) const {
    PrefetchAhead(x + i, n);
    PrefetchAhead(r + i, n);
  }
  // Forced: GCC's inlining choices in the kernel files move with unrelated changes, and one (a
  // refactor that changed no arithmetic) left this per-vector call out of line in the bfloat16
  // residual short rows: 2.7% more instructions there by callgrind.
  FASTLN_INLINE V Load(int64_t i) const {
    const V v = S::Add(St::Load(x + i), St::Load(r + i));
    St::StoreSum(h + i, v);
    // The rounded value: for 16-bit storage read back at once (store-to-load forwarding, no
    // trip to memory).
    return St::kNative ? v : St::Load(h + i);
  }
  T At(int64_t i) const {
    const E e = St::FromT(St::ToT(x[i]) + St::ToT(r[i]));
    h[i] = e;
    return St::ToT(e);
  }
};

// 16-bit weight and bias widened to the float the 16-bit kernels take, for the binding and C
// callers: NumPy's float16 cast is scalar code (1.1 us at D = 768, more than a row's layer norm).
template <class St>
void Widen(const uint16_t *src, float *dst, int64_t n) {
  using S = Simd<float>;
  int64_t i = 0;
  for (; i + S::N <= n; i += S::N) S::Store(dst + i, St::Load(src + i));
  for (; i < n; ++i) dst[i] = St::ToT(src[i]);
}

}  // namespace
}  // namespace FASTLN_NS
}  // namespace fastln

// The ops. Each file opens the same namespaces, so every copy stays private to this ISA.
#define FASTLN_OPS_BEGIN \
  namespace fastln {     \
  namespace FASTLN_NS {  \
  namespace {
#define FASTLN_OPS_END \
  }                    \
  }                    \
  }

#include "ops/layer_norm-inl.h"
#include "ops/rms_norm-inl.h"
#include "ops/backward-inl.h"
#include "ops/add_norm-inl.h"
#include "ops/layer_norm_cols-inl.h"

namespace fastln {
namespace FASTLN_NS {

// Constant-initialized: no code runs at load time.
constexpr KernelTable kTable = {
    FASTLN_ISA_NAME,
    &LayerNormRows<float>,
    &LayerNormRows<double>,
    &RmsNormRows<float>,
    &RmsNormRows<double>,
    &NormBackwardRows<Native<float>, true>,
    &NormBackwardRows<Native<double>, true>,
    &NormBackwardRows<Native<float>, false>,
    &NormBackwardRows<Native<double>, false>,
    &NormBackwardRows<Float16Format, true>,
    &NormBackwardRows<BFloat16Format, true>,
    &NormBackwardRows<Float16Format, false>,
    &NormBackwardRows<BFloat16Format, false>,
    &AddLayerNormRows<float>,
    &AddLayerNormRows<double>,
    &AddLayerNormRows16<Float16Format>,
    &AddLayerNormRows16<BFloat16Format>,
    &AddRmsNormRows<float>,
    &AddRmsNormRows<double>,
    &AddRmsNormRows16<Float16Format>,
    &AddRmsNormRows16<BFloat16Format>,
    &Widen<Float16Format>,
    &Widen<BFloat16Format>,
    &LayerNormCols<float>,
    &LayerNormCols<double>,
};

}  // namespace FASTLN_NS
}  // namespace fastln
