// AVX2 + FMA: 8 floats or 4 doubles per vector. Compiled only into kernels_avx2.cpp, which alone is
// built with -mavx2 -mfma -mf16c.
#ifndef FASTLN_SIMD_VEC_AVX2_H_
#define FASTLN_SIMD_VEC_AVX2_H_

#include <immintrin.h>
#include <stdint.h>

#include "simd/half.h"
#include "simd/pair.h"

namespace fastln {
namespace FASTLN_NS {

template <class T>
struct Simd;

template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int N = 8;
  static constexpr bool kStreamPairs = true;  // 16-bit y can stream (StreamF16Pair and the like)
  static inline V Load(const float *p) { return _mm256_loadu_ps(p); }
  // Rows that start 16 bytes past 32 (as NumPy's arrays often do), and only those, can be read by
  // RealignedRowOf (kernels-inl.h): each vector is then the halves of the two aligned vectors
  // around it (one vperm2f128), and no load crosses a line. h is always N / 2 there.
  static constexpr bool kRealign = true;
  static constexpr bool kRealignAnyOffset = false;
  using Idx = int;
  static inline Idx RealignIdx(int) { return 0; }
  static inline V LoadRealigned(const float *lo, const float *hi, Idx) {
    return Join(_mm256_load_ps(lo), _mm256_load_ps(hi));
  }
  // For sums over such rows from aligned loads alone (RotatedSumsOf in kernels-inl.h), rows h
  // values past an aligned vector, here always N / 2: a's lanes [h, N) then b's [0, h); a vector
  // with only lanes [0, h) or [h, N) kept, the others zeroed (a blend, so the kept lanes stay as
  // they are, NaN included).
  static inline V LoadAligned(const float *p) { return _mm256_load_ps(p); }
  static inline V Join(V a, V b) { return _mm256_permute2f128_ps(a, b, 0x21); }
  static inline V JoinAt(V a, V b, Idx) { return Join(a, b); }
  static inline V LowPart(V a, int) { return _mm256_blend_ps(a, _mm256_setzero_ps(), 0xF0); }
  static inline V HighPart(V a, int) { return _mm256_blend_ps(a, _mm256_setzero_ps(), 0x0F); }
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
  // The Stream*Pair members write a's 16-bit values at p and b's after them, as one non-temporal
  // store of a whole vector (p aligned to 32 bytes): a 16-byte non-temporal store of each half was
  // slower than plain stores at every size tried (float16 8192x1024: 3.38 against 2.47 ms). When
  // 16-bit y streams at all: StreamBytes (dispatch.cpp).
  static inline void StreamF16Pair(uint16_t *p, V a, V b) {
    const __m128i lo = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
    _mm256_stream_si256(reinterpret_cast<__m256i *>(p), _mm256_set_m128i(hi, lo));
  }
  // bfloat16 is the top half of a float. Widening: the 8 values broadcast to both 128-bit lanes
  // (a pure load), then one in-lane byte shuffle puts each in the top half of its float lane.
  // (vpmovzxwd + vpslld would take two ALU operations instead of one.)
  static inline V LoadBF16(const uint16_t *p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m256i b = _mm256_broadcastsi128_si256(v);
    const __m256i top = _mm256_setr_epi8(-128, -128, 0, 1, -128, -128, 2, 3, -128, -128, 4, 5,
                                         -128, -128, 6, 7, -128, -128, 8, 9, -128, -128, 10, 11,
                                         -128, -128, 12, 13, -128, -128, 14, 15);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(b, top));
  }
  static inline void StoreBF16(uint16_t *p, V v) { StoreTopHalves(p, RoundBF16(v)); }
  static inline void StoreBF16RoundOnly(uint16_t *p, V v) { StoreTopHalves(p, RoundBF16Only(v)); }
  static inline void StreamBF16Pair(uint16_t *p, V a, V b) {
    StreamTopHalves(p, RoundBF16(a), RoundBF16(b));
  }
  static inline void StreamBF16RoundOnlyPair(uint16_t *p, V a, V b) {
    StreamTopHalves(p, RoundBF16Only(a), RoundBF16Only(b));
  }
  // v rounded to bfloat16 in the top half of each lane (the bottom half is left as it falls).
  // Round to nearest even by adding 0x7fff plus the lowest kept bit; NaN lanes add nothing and
  // get the quiet bit instead. Masks rather than a blend, and (StoreTopHalves) the top halves
  // gathered by a byte shuffle and a qword permute rather than shift, extract and pack: 10
  // single-uop operations instead of 13, on a path that runs once per stored vector.
  static inline __m256i RoundBF16(V v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i num = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q));  // 0 in NaN lanes
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_and_si256(_mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)), num);
    const __m256i quiet = _mm256_andnot_si256(num, _mm256_set1_epi32(0x400000));
    return _mm256_or_si256(_mm256_add_epi32(x, bias), quiet);
  }
  // RoundBF16 without its NaN test: 6 operations a stored vector instead of 10 (bfloat16
  // layer_norm is ALU-bound here; 1.2x). Exact for every v whose NaN lanes, if any, are quiet with
  // the low 16 bits zero (the rounding then carries nothing into the top half): NaNs widened from
  // bfloat16 and the sums of such values. Inf rounds to Inf.
  static inline __m256i RoundBF16Only(V v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd);
  }
  // The top 16 bits of each 32-bit lane of r, to 8 values at p.
  static inline void StoreTopHalves(uint16_t *p, __m256i r) {
    const __m256i hi = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -128, -128, -128, -128, -128,
                                        -128, -128, -128, 2, 3, 6, 7, 10, 11, 14, 15, -128, -128,
                                        -128, -128, -128, -128, -128, -128);
    const __m256i q = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, hi), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm256_castsi256_si128(q));
  }
  // Those of a, then those of b, to 16 values at p (aligned to 32 bytes), non-temporal. The pack
  // works within 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permute puts the quarters in order.
  static inline void StreamTopHalves(uint16_t *p, __m256i a, __m256i b) {
    const __m256i q = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
    _mm256_stream_si256(reinterpret_cast<__m256i *>(p), _mm256_permute4x64_epi64(q, 0xd8));
  }
};

template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int N = 4;
  static inline V Load(const double *p) { return _mm256_loadu_pd(p); }
  static constexpr bool kRealign = true;  // see Simd<float>: h = N / 2, two doubles
  static constexpr bool kRealignAnyOffset = false;
  using Idx = int;
  static inline Idx RealignIdx(int) { return 0; }
  static inline V LoadRealigned(const double *lo, const double *hi, Idx) {
    return Join(_mm256_load_pd(lo), _mm256_load_pd(hi));
  }
  static inline V LoadAligned(const double *p) { return _mm256_load_pd(p); }  // see Simd<float>
  static inline V Join(V a, V b) { return _mm256_permute2f128_pd(a, b, 0x21); }
  static inline V JoinAt(V a, V b, Idx) { return Join(a, b); }
  static inline V LowPart(V a, int) { return _mm256_blend_pd(a, _mm256_setzero_pd(), 0xC); }
  static inline V HighPart(V a, int) { return _mm256_blend_pd(a, _mm256_setzero_pd(), 0x3); }
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

// Two rows' sums and squares reduced together (see simd/pair.h): horizontal adds fold the four
// vectors at once, where four ReduceSums take seven operations each. In a standalone prototype of
// the short-row pipeline on pairs (float32, 2048x64, two runs), four ReduceSums and per-lane
// square roots ran 25.4-26.7 us, these folds and a two-lane square root 21.5-21.6 us.
template <>
inline void ReducePairs<Simd<float>>(__m256 sa, __m256 qa, __m256 sb, __m256 qb, D2 *s, D2 *q) {
  // Lanes {sa, qa, sb, qb} of each 128-bit half, then the halves added.
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(sa, qa), _mm256_hadd_ps(sb, qb));
  const __m256d d =
      _mm256_cvtps_pd(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  const __m128d a = _mm256_castpd256_pd128(d), b = _mm256_extractf128_pd(d, 1);
  *s = D2(_mm_unpacklo_pd(a, b));
  *q = D2(_mm_unpackhi_pd(a, b));
}

template <>
inline void ReducePairs<Simd<double>>(__m256d sa, __m256d qa, __m256d sb, __m256d qb, D2 *s,
                                      D2 *q) {
  const __m256d ha = _mm256_hadd_pd(sa, qa), hb = _mm256_hadd_pd(sb, qb);  // {s01, q01, s23, q23}
  const __m256d t = _mm256_add_pd(_mm256_permute2f128_pd(ha, hb, 0x20),
                                  _mm256_permute2f128_pd(ha, hb, 0x31));  // {sa, qa, sb, qb}
  const __m128d a = _mm256_castpd256_pd128(t), b = _mm256_extractf128_pd(t, 1);
  *s = D2(_mm_unpacklo_pd(a, b));
  *q = D2(_mm_unpackhi_pd(a, b));
}

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_AVX2_H_
