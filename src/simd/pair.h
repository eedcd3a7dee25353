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

// The lane sums of two rows' sums and squares, as {sa, sb} and {qa, qb}: each vector reduced alone,
// in its ISA's ReduceSum order. An ISA header may specialize it (vec_avx2.h).
template <class S>
inline void ReducePairs(typename S::V sa, typename S::V qa, typename S::V sb, typename S::V qb,
                        D2 *s, D2 *q) {
  *s = D2{double(S::ReduceSum(sa)), double(S::ReduceSum(sb))};
  *q = D2{double(S::ReduceSum(qa)), double(S::ReduceSum(qb))};
}

}  // namespace FASTLN_NS
}  // namespace fastln

#endif  // FASTLN_SIMD_PAIR_H_
