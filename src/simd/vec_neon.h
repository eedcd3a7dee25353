// NEON (Advanced SIMD) for aarch64: 4 floats or 2 doubles per vector. Advanced SIMD, with fused
// multiply-add and float64 lanes, is part of the ARMv8-A baseline, so kernels_neon.cpp needs no extra
// compiler flags; dispatch still checks HWCAP_ASIMD before picking it.
//
// Same interface as vec_avx2.h and vec_scalar.h (see there). A new op added to the vector API must be
// added to all three.
#ifndef FASTLN_SIMD_VEC_NEON_H_
#define FASTLN_SIMD_VEC_NEON_H_

#include <arm_neon.h>

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
};

// Half precision (float16 / bfloat16) loads and stores go here once the kernels take them: float16
// through vcvt_f32_f16 / vcvt_f16_f32 (baseline on aarch64), bfloat16 by 16-bit shifts
// (vshll_n_u16 to widen, round-to-nearest-even then vshrn_n_u32 to narrow), which need no BF16
// extension.

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_NEON_H_
