// AVX2 + FMA: 8 floats or 4 doubles per vector. Compiled only into kernels_avx2.cpp, which alone is
// built with -mavx2 -mfma -mf16c.
#ifndef FASTLN_SIMD_VEC_AVX2_H_
#define FASTLN_SIMD_VEC_AVX2_H_

#include <immintrin.h>

namespace fastln {
namespace FASTLN_NS {

template <class T>
struct Simd;

template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int N = 8;
  static inline V Load(const float *p) { return _mm256_loadu_ps(p); }
  static inline void Store(float *p, V v) { _mm256_storeu_ps(p, v); }
  // Non-temporal store; p aligned to sizeof(V). StreamFence orders such stores before later ones.
  static inline void StoreStream(float *p, V v) { _mm256_stream_ps(p, v); }
  static inline void StreamFence() { _mm_sfence(); }
  static inline V Set(float a) { return _mm256_set1_ps(a); }
  static inline V Zero() { return _mm256_setzero_ps(); }
  static inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static inline V MulAdd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static inline float First(V a) { return _mm256_cvtss_f32(a); }  // lane 0
  static inline float ReduceSum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int N = 4;
  static inline V Load(const double *p) { return _mm256_loadu_pd(p); }
  static inline void Store(double *p, V v) { _mm256_storeu_pd(p, v); }
  static inline void StoreStream(double *p, V v) { _mm256_stream_pd(p, v); }
  static inline void StreamFence() { _mm_sfence(); }
  static inline V Set(double a) { return _mm256_set1_pd(a); }
  static inline V Zero() { return _mm256_setzero_pd(); }
  static inline V Add(V a, V b) { return _mm256_add_pd(a, b); }
  static inline V Sub(V a, V b) { return _mm256_sub_pd(a, b); }
  static inline V Mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static inline V MulAdd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static inline double First(V a) { return _mm256_cvtsd_f64(a); }  // lane 0
  static inline double ReduceSum(V a) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
  // N floats from p, widened: lets float32 data accumulate in double at full vector width.
  static inline V LoadFloat(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
};

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_AVX2_H_
