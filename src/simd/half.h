// 16-bit float storage, one value at a time: IEEE binary16 (float16) and bfloat16 <-> float32.
//
// Bit-exact software conversions, rounding to nearest even, as the hardware does (x86 F16C,
// ARMv8 FCVTL/FCVTN): overflow gives Inf, subnormals are kept, NaN stays NaN, made quiet with its
// sign and top payload bits kept (widening quiets too, as the hardware does, so that a sum of two
// NaNs picks the same one on every ISA). The scalar ISA uses them for every element, the vector
// ISAs for row tails, so every ISA converts each value identically.
//
// Included by each vec_<isa>.h inside that ISA's namespace (see kernels-inl.h for why every
// helper must be private to one ISA's object file).
#ifndef FASTLN_SIMD_HALF_H_
#define FASTLN_SIMD_HALF_H_

#include <stdint.h>

namespace fastln {
namespace FASTLN_NS {
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return BitsFloat(sign | 0x7f800000 | (m ? 0x400000 | (m << 13) : 0));  // Inf, NaN
  if (e == 0) {
    // Zero or subnormal: m * 2^-24, exact in float.
    const float v = float(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));  // rebias 15 -> 127
}

// Rounds the top of v >> s to nearest even; s in [1, 31]. Bitwise & and |, not && and ||: the
// round-up test depends on the discarded bits, which are random in real data, and as branches
// they were mispredicted about every other value (scalar float16 layer_norm, 128x768: most of
// its time).
inline uint32_t ShiftRoundEven(uint32_t v, int s) {
  const uint32_t q = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
  return q + uint32_t((rem > half) | ((rem == half) & ((q & 1) != 0)));
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return uint16_t(sign | 0x7e00 | ((ax >> 13) & 0x3ff));  // NaN, quiet
  if (ax >= 0x477ff000) return uint16_t(sign | 0x7c00);  // >= 65520 rounds past 65504: Inf
  if (ax >= 0x38800000) {  // a normal half (>= 2^-14); a carry into the exponent is right
    return uint16_t(sign | ShiftRoundEven(ax - (112u << 23), 13));
  }
  // A subnormal half (k * 2^-24) or zero: the 24-bit significand shifted by 126 - exponent.
  const int e = int(ax >> 23);
  const int s = 126 - e;
  if (s > 25) return sign;  // below 2^-25: rounds to zero
  return uint16_t(sign | ShiftRoundEven((ax & 0x7fffff) | 0x800000, s));
}

inline float BFloat16ToFloat(uint16_t h) { return BitsFloat(uint32_t(h) << 16); }

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // NaN, quiet
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);  // a carry into the exponent is right
}

}  // namespace
}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_HALF_H_
