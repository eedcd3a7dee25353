// NEON (Advanced SIMD) for aarch64: 4 floats or 2 doubles per vector. Advanced SIMD, with fused
// multiply-add and float64 lanes, is part of the ARMv8-A baseline, so kernels_neon.cpp needs no extra
// compiler flags; dispatch still checks HWCAP_ASIMD before picking it.
//
// Same interface as vec_avx2.h and vec_scalar.h (see there). A new op added to the vector API must be
// added to all three.
#ifndef FASTLN_SIMD_VEC_NEON_H_
#define FASTLN_SIMD_VEC_NEON_H_

#include <arm_neon.h>
#include <stdint.h>

#include "simd/half.h"  // one-value float16/bfloat16 conversions, for row tails
#include "simd/pair.h"

namespace fastln {
namespace FASTLN_NS {

template <class T>
struct Simd;

template <>
struct Simd<float> {
  using V = float32x4_t;
  static constexpr int N = 4;
  static inline V Load(const float *p) { return vld1q_f32(p); }
  static inline void Store(float *p, V v) { vst1q_f32(p, v); }
  static inline V Set(float a) { return vdupq_n_f32(a); }
  static inline V Zero() { return vdupq_n_f32(0.0f); }
  static inline V Add(V a, V b) { return vaddq_f32(a, b); }
  static inline V Sub(V a, V b) { return vsubq_f32(a, b); }
  static inline V Mul(V a, V b) { return vmulq_f32(a, b); }
  // a * b + c, fused (one rounding) like _mm256_fmadd_ps. Note vfmaq's argument order: c first.
  static inline V MulAdd(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static inline float ReduceSum(V a) { return vaddvq_f32(a); }
  static inline double ReduceSumDouble(V a) {
    return vaddvq_f64(vaddq_f64(vcvt_f64_f32(vget_low_f32(a)), vcvt_high_f64_f32(a)));
  }
  static inline float First(V a) { return vgetq_lane_f32(a, 0); }  // lane 0
  // Non-temporal store: ACLE has no intrinsic for STNP, and a plain store costs little here.
  static inline void StoreStream(float *p, V v) { vst1q_f32(p, v); }
  static inline void StreamFence() {}
  // 16-bit storage <-> float lanes. float16: FCVTL/FCVTN, baseline in ARMv8-A, rounding to nearest
  // even (the default FPCR) with subnormals kept. bfloat16 is the top half of a float: widened by a
  // shift, narrowed with round-to-nearest-even and NaN kept quiet, as vec_avx2.h and half.h do, so
  // no BF16 extension is needed.
  static inline V LoadF16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static inline void StoreF16(uint16_t *p, V v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }
  static inline V LoadBF16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static inline void StoreBF16(uint16_t *p, V v) {
    const uint32x4_t x = vreinterpretq_u32_f32(v);
    const uint32x4_t top = vshrq_n_u32(x, 16);
    const uint32x4_t bias = vaddq_u32(vandq_u32(top, vdupq_n_u32(1)), vdupq_n_u32(0x7fff));
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(x, bias), 16);
    const uint32x4_t quiet = vorrq_u32(top, vdupq_n_u32(0x40));
    const uint32x4_t is_num = vceqq_f32(v, v);  // all ones except in NaN lanes
    vst1_u16(p, vmovn_u32(vbslq_u32(is_num, rounded, quiet)));
  }
  // StoreBF16's rounding without its NaN test, narrowed by the shift; for which v it is exact, see
  // vec_avx2.h.
  static inline void StoreBF16RoundOnly(uint16_t *p, V v) {
    const uint32x4_t x = vreinterpretq_u32_f32(v);
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    vst1_u16(p, vshrn_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fff)), odd), 16));
  }
  // No non-temporal store for 16-bit values: the Stream*Pair members are declared only, as in
  // vec_scalar.h.
  static constexpr bool kStreamPairs = false;
  static void StreamF16Pair(uint16_t *p, V a, V b);
  static void StreamBF16Pair(uint16_t *p, V a, V b);
  static void StreamBF16RoundOnlyPair(uint16_t *p, V a, V b);
};

template <>
struct Simd<double> {
  using V = float64x2_t;
  static constexpr int N = 2;
  static inline V Load(const double *p) { return vld1q_f64(p); }
  static inline void Store(double *p, V v) { vst1q_f64(p, v); }
  static inline V Set(double a) { return vdupq_n_f64(a); }
  static inline V Zero() { return vdupq_n_f64(0.0); }
  static inline V Add(V a, V b) { return vaddq_f64(a, b); }
  static inline V Sub(V a, V b) { return vsubq_f64(a, b); }
  static inline V Mul(V a, V b) { return vmulq_f64(a, b); }
  static inline V MulAdd(V a, V b, V c) { return vfmaq_f64(c, a, b); }
  static inline double ReduceSum(V a) { return vaddvq_f64(a); }
  static inline double ReduceSumDouble(V a) { return vaddvq_f64(a); }
  static inline double First(V a) { return vgetq_lane_f64(a, 0); }  // lane 0
  static inline void StoreStream(double *p, V v) { vst1q_f64(p, v); }
  static inline void StreamFence() {}
  // N floats from p, widened: lets float32 data accumulate in double at full vector width.
  static inline V LoadFloat(const float *p) { return vcvt_f64_f32(vld1_f32(p)); }
};

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_NEON_H_
