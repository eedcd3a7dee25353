// Two doubles as one vector: the statistics of a pair of short rows (ops/layer_norm-inl.h), kept
// together so that their means, variances and rstds take one two-lane operation each. GCC's generic
// vectors, so that the arithmetic is written once; the reduction of the rows' vectors into them has
// a generic form here and faster ones where an ISA header gives them.
#ifndef FASTLN_SIMD_PAIR_H_
#define FASTLN_SIMD_PAIR_H_

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace fastln {
namespace FASTLN_NS {

typedef double D2 __attribute__((vector_size(16)));
typedef long long M2 __attribute__((vector_size(16)));  // a comparison: each lane all ones or 0

// Lane by lane. The x86 and ARM baselines have a two-lane square root; IEEE makes it exact either
// way, so every ISA gets the same bits.
inline D2 Sqrt2(D2 v) {
#if defined(__SSE2__)
  return D2(_mm_sqrt_pd(__m128d(v)));
#elif defined(__aarch64__)
  return D2(vsqrtq_f64(float64x2_t(v)));
#else
  return D2{__builtin_sqrt(v[0]), __builtin_sqrt(v[1])};
#endif
}

// Bit k set where lane k of the comparison holds. SSE2's movemask is one operation; taken lane by
// lane GCC moved each lane to a general register and masked it (in the AVX-512 build, from a mask
// register through a vector). In a standalone prototype of the short-row pipeline (AVX-512,
// float32, 2048x64, an Emerald Rapids guest, 2026-12-05, variants alternating in one process,
// best of 15 rounds, three runs) the pipeline with its two tests a pair (ShortForm's and the
// reduce stage's) taken lane by lane ran 1.06-1.10x the time it ran with movemask.
inline int Bits2(M2 m) {
#if defined(__SSE2__)
  return _mm_movemask_pd(__m128d(m));
#else
  return int(m[0] & 1) | int(m[1] & 2);
#endif
}

// The lane sums of two rows' sums and squares, as {sa, sb} and {qa, qb}: each vector reduced alone,
// in its ISA's ReduceSum order. An ISA header may specialize it (vec_avx2.h, vec_avx512.h).
template <class S>
inline void ReducePairs(typename S::V sa, typename S::V qa, typename S::V sb, typename S::V qb,
                        D2 *s, D2 *q) {
  *s = D2{double(S::ReduceSum(sa)), double(S::ReduceSum(sb))};
  *q = D2{double(S::ReduceSum(qa)), double(S::ReduceSum(qb))};
}

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_PAIR_H_
