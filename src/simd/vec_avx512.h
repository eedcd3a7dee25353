// AVX-512: 16 floats or 8 doubles per vector. Compiled only into kernels_avx512.cpp, which alone is
// built with the AVX-512 flags (F, VL, BW, DQ: the x86-64-v4 set, which dispatch checks for as a
// whole) plus FMA and F16C.
//
// Same interface as vec_avx2.h (see there and vec_scalar.h for what each function promises).
#ifndef FASTLN_SIMD_VEC_AVX512_H_
#define FASTLN_SIMD_VEC_AVX512_H_

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
  using V = __m512;
  static constexpr int N = 16;
  static constexpr bool kStreamPairs = true;  // 16-bit y can stream (StreamF16Pair and the like)
  static inline V Load(const float *p) { return _mm512_loadu_ps(p); }
  // The vector at lo + h (h = idx's offset), put together from the aligned vectors at lo and hi
  // (see RealignedRowOf in kernels-inl.h): two loads that each stay within one cache line.
  static constexpr bool kRealign = true;
  static constexpr bool kRealignAnyOffset = true;  // any h in [0, N), 0 included
  using Idx = __m512i;
  static inline Idx RealignIdx(int h) {
    return _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(h));
  }
  static inline V LoadRealigned(const float *lo, const float *hi, Idx idx) {
    return _mm512_permutex2var_ps(_mm512_load_ps(lo), idx, _mm512_load_ps(hi));
  }
  // For sums over such rows from aligned loads alone (RotatedSumsOf in kernels-inl.h), rows h
  // values past a line, any h in [1, N] (N: a row on a line, taken as a vector past the line
  // before): a's lanes [h, N) then b's [0, h) (idx = RealignIdx(h)); a vector with only lanes
  // [0, h) or [h, N) kept, the others zeroed (a masked move, so the kept lanes stay as they are).
  static inline V LoadAligned(const float *p) { return _mm512_load_ps(p); }
  static inline V JoinAt(V a, V b, Idx idx) { return _mm512_permutex2var_ps(a, idx, b); }
  static inline V LowPart(V a, int h) { return _mm512_maskz_mov_ps(__mmask16((1u << h) - 1), a); }
  static inline V HighPart(V a, int h) {
    return _mm512_maskz_mov_ps(__mmask16(~((1u << h) - 1)), a);
  }
  static inline void Store(float *p, V v) { _mm512_storeu_ps(p, v); }
  // Non-temporal store; p aligned to sizeof(V), which is one cache line here.
  static inline void StoreStream(float *p, V v) { _mm512_stream_ps(p, v); }
  static inline void StreamFence() { _mm_sfence(); }
  static inline V Set(float a) { return _mm512_set1_ps(a); }
  static inline V Zero() { return _mm512_setzero_ps(); }
  static inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static inline V MulAdd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static inline float First(V a) { return _mm512_cvtss_f32(a); }  // lane 0
  // Halves added pairwise down to one lane, spelled out (not _mm512_reduce_add_ps, whose order is
  // the compiler's) so the rounding of a row's sums is fixed by this file.
  static inline float ReduceSum(V a) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline double ReduceSumDouble(V a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    const __m512d d = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(hi));
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(d), _mm512_extractf64x4_pd(d, 1));
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
  // 16-bit storage <-> float lanes. binary16: vcvtph2ps / vcvtps2ph on zmm (AVX512F), exact and
  // round-to-nearest-even like half.h. bfloat16 by shifts, with round-to-nearest-even and NaN kept
  // quiet as half.h does; not vcvtneps2bf16 (AVX512_BF16), which flushes subnormals to zero.
  static inline V LoadF16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  static inline void StoreF16(uint16_t *p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), F16Bits(v));
  }
  static inline __m256i F16Bits(V v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static inline V LoadBF16(const uint16_t *p) {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  static inline void StoreBF16(uint16_t *p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), BF16Bits(v));
  }
  static inline __m256i BF16Bits(V v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i top = _mm512_srli_epi32(x, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_and_si512(top, _mm512_set1_epi32(1)),
                                          _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __m512i quiet = _mm512_or_si512(top, _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);  // every lane <= 0xffff
    return _mm512_cvtepi32_epi16(r);
  }
  // StoreBF16's rounding without its NaN test (compare and blend); for which v it is exact, see
  // vec_avx2.h.
  static inline void StoreBF16RoundOnly(uint16_t *p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), BF16OnlyBits(v));
  }
  static inline __m256i BF16OnlyBits(V v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
  }
  // a's 16-bit values at p and b's after them, in one non-temporal store of a whole vector (p
  // aligned to 64 bytes); see vec_avx2.h.
  static inline void StreamF16Pair(uint16_t *p, V a, V b) {
    StreamHalves(p, F16Bits(a), F16Bits(b));
  }
  static inline void StreamBF16Pair(uint16_t *p, V a, V b) {
    StreamHalves(p, BF16Bits(a), BF16Bits(b));
  }
  static inline void StreamBF16RoundOnlyPair(uint16_t *p, V a, V b) {
    StreamHalves(p, BF16OnlyBits(a), BF16OnlyBits(b));
  }
  static inline void StreamHalves(uint16_t *p, __m256i a, __m256i b) {
    _mm512_stream_si512(reinterpret_cast<__m512i *>(p),
                        _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
  }
};

template <>
struct Simd<double> {
  using V = __m512d;
  static constexpr int N = 8;
  static inline V Load(const double *p) { return _mm512_loadu_pd(p); }
  static constexpr bool kRealign = true;  // see Simd<float>
  static constexpr bool kRealignAnyOffset = true;
  using Idx = __m512i;
  static inline Idx RealignIdx(int h) {
    return _mm512_add_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(h));
  }
  static inline V LoadRealigned(const double *lo, const double *hi, Idx idx) {
    return _mm512_permutex2var_pd(_mm512_load_pd(lo), idx, _mm512_load_pd(hi));
  }
  static inline V LoadAligned(const double *p) { return _mm512_load_pd(p); }  // see Simd<float>
  static inline V JoinAt(V a, V b, Idx idx) { return _mm512_permutex2var_pd(a, idx, b); }
  static inline V LowPart(V a, int h) { return _mm512_maskz_mov_pd(__mmask8((1u << h) - 1), a); }
  static inline V HighPart(V a, int h) {
    return _mm512_maskz_mov_pd(__mmask8(~((1u << h) - 1)), a);
  }
  static inline void Store(double *p, V v) { _mm512_storeu_pd(p, v); }
  static inline void StoreStream(double *p, V v) { _mm512_stream_pd(p, v); }
  static inline void StreamFence() { _mm_sfence(); }
  static inline V Set(double a) { return _mm512_set1_pd(a); }
  static inline V Zero() { return _mm512_setzero_pd(); }
  static inline V Add(V a, V b) { return _mm512_add_pd(a, b); }
  static inline V Sub(V a, V b) { return _mm512_sub_pd(a, b); }
  static inline V Mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static inline V MulAdd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static inline double First(V a) { return _mm512_cvtsd_f64(a); }  // lane 0
  static inline double ReduceSum(V a) {
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
  static inline double ReduceSumDouble(V a) { return ReduceSum(a); }
  // N floats from p, widened: lets float32 data accumulate in double at full vector width.
  static inline V LoadFloat(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
};

// Two rows' sums and squares reduced together (see simd/pair.h), four vectors folded by shuffles
// that each serve two of them, where four ReduceSums take eight operations each, half of them
// shuffles. Each sum adds only its own row's lanes, so a row's bits do not depend on its pair.
// Measured on an Emerald Rapids guest (2026-12-05, libfastln through dlopen, both builds in one
// process, alternating, float32, out=, weight and bias, 1 thread, best of 15 rounds): 2048x64 25.37
// -> 23.39 us; with Bits2 (simd/pair.h) as well, in one later run on a slower spell of that
// machine, 2048x64 35.80 and 36.05 -> 30.77 and 31.00, 8192x64 166.1 -> 150.0, 4096x32 61.7 ->
// 51.3, 2048x128 61.5 -> 60.4. In that run the new build also folded float64 pairs this way, and
// float64 2048x64 stayed within 1% (51.4 and 51.1 -> 50.8 and 51.0), so float64 keeps the generic
// form.
template <>
inline void ReducePairs<Simd<float>>(__m512 sa, __m512 qa, __m512 sb, __m512 qb, D2 *s, D2 *q) {
  // 128-bit chunks {sa, sa, qa, qa} and {sb, sb, qb, qb}, each the sum of two of the vector's.
  const __m512 a =
      _mm512_add_ps(_mm512_shuffle_f32x4(sa, qa, 0x44), _mm512_shuffle_f32x4(sa, qa, 0xEE));
  const __m512 b =
      _mm512_add_ps(_mm512_shuffle_f32x4(sb, qb, 0x44), _mm512_shuffle_f32x4(sb, qb, 0xEE));
  // Chunks {sa, qa, sb, qb}, then each chunk's four lanes added into its lane 0.
  __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  c = _mm512_add_ps(c, _mm512_permute_ps(c, 0x4E));
  c = _mm512_add_ps(c, _mm512_permute_ps(c, 0xB1));
  const __m128 t = _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 8, 4, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), c));
  *s = D2(_mm_cvtps_pd(t));                    // {sa, sb}
  *q = D2(_mm_cvtps_pd(_mm_movehl_ps(t, t)));  // {qa, qb}
}

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_VEC_AVX512_H_
