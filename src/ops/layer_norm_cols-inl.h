// LayerNorm of examples stored as columns: example i's feature k at x[k * ldx + i], as in a
// Fortran-ordered (or transposed) 2-D array normalized over its last axis. Included by
// kernels-inl.h, once per ISA; see there.
//
// Such an array's rows are strided, and the copy to rows that would let the row kernels take it
// costs NumPy far more than the norm (a transposing copy: 3.6 ms for float32 2048x768 on the Zen 5
// guest, against 0.15 ms for the norm of the copy). Here the examples lie across the vector lanes
// instead: strips of kColVecs vectors of adjacent examples, taken kColGroups strips at a time
// (see there), are summed feature by feature (every load a whole vector of one feature row), then
// normalized the same way: x read twice and y written once, in the order they lie in memory.
//
// Each lane is one example, with lane-wise arithmetic only, so an example's result does not depend
// on which strip or lane it falls in, nor on the thread count: the examples after the last whole
// strip run a vector at a time, then one at a time (OneLane), through the same code.
//
// Statistics: sums of x - K, K the example's first value (the shifted-data algorithm), and of their
// squares, in T per lane, added to double every kColFold features, so that the rounding is that of
// kColFold terms in T. Where the mean lies more than kColPivot standard deviations from K, or the
// sums are not finite, or the variance underflows, the example is gathered into a row and takes the
// row kernels' path (two passes, the exact path for NaN and Inf): the same semantics as a row.
// The normalize pass uses the split form, (x - hi) * rstd + (-lo * rstd) with hi + lo the mean,
// so that examples far from zero keep their digits.

#include <memory>
#include <new>

#include "fastln/fastln.h"

FASTLN_OPS_BEGIN

constexpr int kColVecs = 2;
constexpr int64_t kColFold = 16;
// The cancellation in (sum of squares) - (sum)^2 / n costs at most log2(1 + kColPivot^2) bits.
constexpr double kColPivot = 3.0;

// One lane of Simd<T>, for the last examples of a call: the same operations on one value. The
// vector ISAs' MulAdd is fused (FMA), so here too; on the scalar ISA, whose Simd<T> has one lane
// and never leaves examples to this, it is not.
template <class T>
struct OneLane {
  using V = T;
  static constexpr int N = 1;
  static constexpr bool kFused = Simd<T>::N > 1;
  static V Load(const T *p) { return *p; }
  static void Store(T *p, V v) { *p = v; }
  static V Set(T a) { return a; }
  static V Zero() { return T(0); }
  static V Add(V a, V b) { return a + b; }
  static V Sub(V a, V b) { return a - b; }
  static V Mul(V a, V b) { return a * b; }
  static V MulAdd(V a, V b, V c) {
    if constexpr (kFused) {
      return __builtin_fma(a, b, c);
    } else {
      return a * b + c;
    }
  }
};
template <>
inline float OneLane<float>::MulAdd(float a, float b, float c) {
  if constexpr (kFused) {
    return __builtin_fmaf(a, b, c);
  } else {
    return a * b + c;
  }
}

// Blocks of up to kColGroups strips: each kColFold features of the block are summed strip by
// strip (in registers) before the next, and the normalize pass runs feature by feature across the
// block, so that both read whole runs of lines of each feature row (a strip alone is one or two
// lines a row, kColFold rows apart by the row stride, which for a power of two maps every line to
// the same few cache sets).
constexpr int kColGroups = 16;

// The statistics of the G * S::N * KV examples at x (lane by lane): mean, rstd, the mean's low
// part (mean - T(mean), and for double what the mean leaves out), and whether the example must
// take the row path (aside).
template <class T, class S, int KV>
void ColBlockStats(const T *x, int64_t ldx, int64_t n, int G, double eps, double *mean,
                   double *rstd, double *mean_lo, bool *aside) {
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int W = KV * N;
  const int E = G * W;
  double sd[kColGroups * W], qd[kColGroups * W];
  for (int j = 0; j < E; ++j) sd[j] = qd[j] = 0.0;
  alignas(64) T ts[W], tq[W];
  for (int64_t k0 = 0; k0 < n; k0 += kColFold) {
    const int64_t k1 = Min(n, k0 + kColFold);
    for (int g = 0; g < G; ++g) {
      const T *xg = x + g * W;
      V K[KV], s[KV], q[KV];
      for (int v = 0; v < KV; ++v) {
        K[v] = S::Load(xg + v * N);
        s[v] = q[v] = S::Zero();
      }
      for (int64_t k = k0; k < k1; ++k) {
        const T *p = xg + k * ldx;
        for (int v = 0; v < KV; ++v) {
          const V d = S::Sub(S::Load(p + v * N), K[v]);
          s[v] = S::Add(s[v], d);
          q[v] = S::MulAdd(d, d, q[v]);
        }
      }
      for (int v = 0; v < KV; ++v) {
        S::Store(ts + v * N, s[v]);
        S::Store(tq + v * N, q[v]);
      }
      for (int j = 0; j < W; ++j) {
        sd[g * W + j] += double(ts[j]);
        qd[g * W + j] += double(tq[j]);
      }
    }
  }
  const double inv_n = 1.0 / double(n);
  for (int j = 0; j < E; ++j) {
    const double d = sd[j] * inv_n;  // mean - K, K = x[j] (the first feature)
    const double m2 = qd[j] - sd[j] * d;
    const double var = (m2 < 0 ? 0.0 : m2) * inv_n;  // NaN stays
    double e;                                           // what m leaves out of K + d
    const double m = TwoSum(double(x[j]), d, &e) + 0.0;  // + 0: a mean of -0 is +0, as in rows
    const double ve = var + eps;
    aside[j] = !(IsFinite(m) && IsFinite(var) && ve >= TinyVar<T>() &&
                 d * d <= kColPivot * kColPivot * var);
    mean[j] = m;
    rstd[j] = 1.0 / Sqrt(ve);
    mean_lo[j] = MeanLo<T>(m, e);
  }
}

template <class T, class S, int KV, bool kW_, bool kB_>
void ColBlockNormalize(const T *x, int64_t ldx, T *y, int64_t ldy, int64_t n, int G, const T *w,
                       const T *b, const double *mean, const double *rstd, const double *lo) {
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int W = KV * N;
  const int E = G * W;
  alignas(64) T th[kColGroups * W], tr[kColGroups * W], tc[kColGroups * W];
  for (int j = 0; j < E; ++j) {
    th[j] = T(mean[j]);
    tr[j] = T(rstd[j]);
    tc[j] = T(-lo[j] * rstd[j]);
  }
  for (int64_t k = 0; k < n; ++k) {
    const T *p = x + k * ldx;
    T *o = y + k * ldy;
    const V Wk = kW_ ? S::Set(w[k]) : S::Zero(), Bk = kB_ ? S::Set(b[k]) : S::Zero();
    for (int g = 0; g < G; ++g) {
      V u[KV];
      for (int v = 0; v < KV; ++v) {
        const int j = g * W + v * N;
        u[v] = AffineV<kW_, kB_, S>(
            S::MulAdd(S::Sub(S::Load(p + j), S::Load(th + j)), S::Load(tr + j), S::Load(tc + j)),
            Wk, Bk);
      }
      for (int v = 0; v < KV; ++v) S::Store(o + g * W + v * N, u[v]);
    }
  }
}

// Rows for the examples a block sets aside, grown as a block needs more (most need none).
template <class T>
struct ColScratch {
  std::unique_ptr<T[]> rows;
  int64_t size = 0;  // values
};

// The G * S::N * KV examples at x and y, with the row path for those set aside: their x is
// gathered into rows of *scratch and normalized there before the block is (which may overwrite it
// in place), and scattered into y after. False when the scratch cannot be allocated.
template <class T, class S, int KV, bool kW_, bool kB_>
bool ColBlock(const AddNormArgs<T, T> &a, const T *x, T *y, T *mean_out, T *rstd_out, int G,
              ColScratch<T> *scratch) {
  constexpr int W = KV * S::N;
  const int E = G * W;
  const int64_t n = a.cols, ldx = a.ldx, ldy = a.ldy;
  double mean[kColGroups * W], rstd[kColGroups * W], lo[kColGroups * W];
  bool aside[kColGroups * W];
  ColBlockStats<T, S, KV>(x, ldx, n, G, a.eps, mean, rstd, lo, aside);
  int naside = 0;
  for (int j = 0; j < E; ++j) naside += aside[j];
  if (naside) {
    if (naside * n > scratch->size) {
      scratch->rows.reset(new (std::nothrow) T[size_t(naside * n)]);
      scratch->size = scratch->rows ? naside * n : 0;
      if (!scratch->rows) return false;
    }
    T *row = scratch->rows.get();
    for (int j = 0; j < E; ++j) {
      if (!aside[j]) continue;
      for (int64_t k = 0; k < n; ++k) row[k] = x[k * ldx + j];
      AddNormArgs<T, T> g = a;
      g.x = row;
      g.ldx = n;
      g.y = row;
      g.ldy = n;
      g.mean = mean_out ? mean_out + j : nullptr;
      g.rstd = rstd_out ? rstd_out + j : nullptr;
      g.call_rows = 1;
      LayerNormRowsOf<Native<T>>(g, false, 0, 1);
      row += n;
    }
  }
  ColBlockNormalize<T, S, KV, kW_, kB_>(x, ldx, y, ldy, n, G, a.weight, a.bias, mean, rstd, lo);
  const T *row = naside ? scratch->rows.get() : nullptr;
  for (int j = 0; j < E; ++j) {
    if (aside[j]) {
      for (int64_t k = 0; k < n; ++k) y[k * ldy + j] = row[k];
      row += n;
      continue;
    }
    if (mean_out) mean_out[j] = T(mean[j]);
    if (rstd_out) rstd_out[j] = T(rstd[j]);
  }
  return true;
}

// Examples [i0, i1) of a, whose "rows" are examples here: x(i, k) = a.x[k * a.ldx + i], y the
// same with a.ldy, a.cols features; res and h unused.
template <class T, bool kW_, bool kB_>
void LayerNormColsWB(const AddNormArgs<T, T> &a, int64_t i0, int64_t i1) {
  using S = Simd<T>;
  constexpr int N = S::N, W = kColVecs * N;
  ColScratch<T> scratch;
  auto at = [&](int64_t i, T *p) { return p ? p + i : nullptr; };
  bool ok = true;
  int64_t i = i0;
  while (ok && i + W <= i1) {
    const int G = int(Min(int64_t(kColGroups), (i1 - i) / W));
    ok = ColBlock<T, S, kColVecs, kW_, kB_>(a, a.x + i, a.y + i, at(i, a.mean), at(i, a.rstd), G,
                                             &scratch);
    i += G * W;
  }
  if (ok && i + N <= i1) {
    const int G = int((i1 - i) / N);
    ok = ColBlock<T, S, 1, kW_, kB_>(a, a.x + i, a.y + i, at(i, a.mean), at(i, a.rstd), G,
                                      &scratch);
    i += G * N;
  }
  if (ok && i < i1) {
    ok = ColBlock<T, OneLane<T>, 1, kW_, kB_>(a, a.x + i, a.y + i, at(i, a.mean), at(i, a.rstd),
                                              int(i1 - i), &scratch);
  }
  if (!ok) __atomic_store_n(a.status, int(FASTLN_ERR_NO_MEMORY), __ATOMIC_RELAXED);  // any thread
}

template <class T>
void LayerNormCols(const AddNormArgs<T, T> &a, int64_t i0, int64_t i1) {
  if (a.weight && a.bias) return LayerNormColsWB<T, true, true>(a, i0, i1);
  if (a.weight) return LayerNormColsWB<T, true, false>(a, i0, i1);
  if (a.bias) return LayerNormColsWB<T, false, true>(a, i0, i1);
  return LayerNormColsWB<T, false, false>(a, i0, i1);
}

FASTLN_OPS_END
