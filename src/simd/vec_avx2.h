// AVX2 + FMA: 8 floats or 4 doubles per vector. Compiled only into kernels_avx2.cpp, which alone is
// built with -mavx2 -mfma -mf16c.
#ifndef FASTLN_SIMD_VEC_AVX2_H_
#define FASTLN_SIMD_VEC_AVX2_H_

#include <immintrin.h>
#include <stdint.h>

#include "simd/half.h"

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
  static inline double ReduceSumDouble(V a) {
    const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                                    _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
  // 16-bit storage <-> float lanes: F16C for binary16; bfloat16 is the top half of a float, with
  // round-to-nearest-even and NaN kept quiet on the way out (as half.h does one value at a time).
  static inline V LoadF16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  static inline void StoreF16(uint16_t *p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static inline V LoadBF16(const uint16_t *p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static inline void StoreBF16(uint16_t *p, V v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i top = _mm256_srli_epi32(x, 16);
    const __m256i bias = _mm256_add_epi32(_mm256_and_si256(top, _mm256_set1_epi32(1)),
                                          _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xffff
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
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
  static inline double ReduceSumDouble(V a) { return ReduceSum(a); }
  // N floats from p, widened: lets float32 data accumulate in double at full vector width.
  static inline V LoadFloat(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
};

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_AVX2_H_
