// The scalar "vector": one lane. Kernels written over the vector API compile to plain C++ with it,
// which is both the portable fallback and the ISA the tests compare every other one against.
#ifndef FASTLN_SIMD_VEC_SCALAR_H_
#define FASTLN_SIMD_VEC_SCALAR_H_

#include <stdint.h>

#include "simd/half.h"
#include "simd/pair.h"

namespace fastln {
namespace FASTLN_NS {

template <class T>
struct Simd {
  using V = T;
  static constexpr int N = 1;
  static inline V Load(const T *p) { return *p; }
  // An ISA may add kRealign (true), kRealignAnyOffset, Idx, RealignIdx and LoadRealigned, and
  // with them LoadAligned, JoinAt, LowPart and HighPart (vec_avx512.h, vec_avx2.h); the kernels
  // then read misaligned rows by RealignedRowOf and sum them by SumRotated.
  static inline void Store(T *p, V v) { *p = v; }
  // Non-temporal store where the ISA has one (p aligned to sizeof(V)); a plain store here.
  static inline void StoreStream(T *p, V v) { *p = v; }
  static inline void StreamFence() {}
  static inline V Set(T a) { return a; }
  static inline V Zero() { return T(0); }
  static inline V Add(V a, V b) { return a + b; }
  static inline V Sub(V a, V b) { return a - b; }
  static inline V Mul(V a, V b) { return a * b; }
  // a * b + c. Written as two operations on purpose: the scalar path must not depend on whether the
  // compiler contracts it into an FMA, so that it behaves the same on every target.
  static inline V MulAdd(V a, V b, V c) { return a * b + c; }
  static inline T First(V a) { return a; }  // lane 0
  static inline T ReduceSum(V a) { return a; }
  // The sum of the lanes, widened to double first: for float, a sum of N floats is exact in double
  // unless their exponents span more than 29 - log2(N) binades.
  static inline double ReduceSumDouble(V a) { return double(a); }
  // N floats from p, converted to T (used with T = double: float data accumulated in double).
  static inline V LoadFloat(const float *p) { return V(*p); }
  // 16-bit storage <-> float lanes (Simd<float> only): binary16 and bfloat16 bits, rounding to
  // nearest even on the way out.
  static inline V LoadF16(const uint16_t *p) { return HalfToFloat(*p); }
  static inline void StoreF16(uint16_t *p, V v) { *p = FloatToHalf(v); }
  static inline V LoadBF16(const uint16_t *p) { return BFloat16ToFloat(*p); }
  static inline void StoreBF16(uint16_t *p, V v) { *p = FloatToBFloat16(v); }
  // StoreBF16 without its NaN test, where a vector ISA gains by that: exact for every v but a NaN
  // whose low 16 bits are not all zero (see vec_avx2.h). One value: the same conversion.
  static inline void StoreBF16RoundOnly(uint16_t *p, V v) { *p = FloatToBFloat16(v); }
  // Declared only: without a non-temporal store for 16-bit values (kStreamPairs false), y of a
  // 16-bit format never streams on this ISA, and these are named only by the formats' StreamPair,
  // which is never called here (a call would fail to link).
  static constexpr bool kStreamPairs = false;
  static void StreamF16Pair(uint16_t *p, V a, V b);
  static void StreamBF16Pair(uint16_t *p, V a, V b);
  static void StreamBF16RoundOnlyPair(uint16_t *p, V a, V b);
};

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_SCALAR_H_
