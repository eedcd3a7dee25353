// RMSNorm forward, and the row reduction that it and the backward passes share. Included by
// kernels-inl.h, once per ISA; see there.

FASTLN_OPS_BEGIN

// ---------------------------------------------------------------------------------------------
// Sums of K per-element terms over a row of n values, each returned in double.
//
// vec_term(i, acc) adds the terms of the N values at i into the K vectors acc[0..K); tail_term(i,
// out) adds those of value i into the K doubles out. Terms accumulate in T in kAcc independent
// accumulators (one chain would be latency-bound) and are flushed to double every kFlushSteps
// steps. In float32 the rounding error is then that of a sum of kFlushSteps terms per lane, not of
// n / (kAcc * N): rows of 65536 values at an offset of 1e4 keep their sum of squares to ~1e-7
// relative, while the inner loop stays at full float width.
template <class T, int K, class VecTerm, class TailTerm>
inline void RowSums(int64_t n, VecTerm vec_term, TailTerm tail_term, double *out) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int kAcc = 4;
  constexpr int64_t kStep = int64_t(kAcc) * N;
  constexpr int64_t kFlushSteps = 32;

  for (int k = 0; k < K; ++k) out[k] = 0.0;
  const int64_t nsteps = n / kStep;
  int64_t i = 0;
  for (int64_t s0 = 0; s0 < nsteps; s0 += kFlushSteps) {
    const int64_t len = Min(nsteps - s0, kFlushSteps);
    V acc[kAcc][K];
    for (int a = 0; a < kAcc; ++a)
      for (int k = 0; k < K; ++k) acc[a][k] = S::Zero();
    for (int64_t t = 0; t < len; ++t, i += kStep)
      for (int a = 0; a < kAcc; ++a) vec_term(i + a * N, acc[a]);
    for (int k = 0; k < K; ++k) {
      const V v = S::Add(S::Add(acc[0][k], acc[1][k]), S::Add(acc[2][k], acc[3][k]));
      out[k] += S::ReduceSumDouble(v);
    }
  }
  for (; i < n; ++i) tail_term(i, out);
}

// y = x * rstd (* w).
template <class T, bool kW>
inline void ScaleRow(const T *x, T *y, int64_t n, const T *w, T rstd) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const V vr = S::Set(rstd);
  auto one = [&](int64_t i) {
    V u = S::Mul(S::Load(x + i), vr);
    if (kW) u = S::Mul(u, S::Load(w + i));
    S::Store(y + i, u);
  };
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    one(i);
    one(i + N);
    one(i + 2 * N);
    one(i + 3 * N);
  }
  for (; i + N <= n; i += N) one(i);
  for (; i < n; ++i) {
    T u = x[i] * rstd;
    if (kW) u = u * w[i];
    y[i] = u;
  }
}

// The exact path, for rows the fast path cannot take: NaN or Inf in the row (the whole row becomes
// NaN), squares that overflow T, and mean squares so small next to eps that they may have
// underflowed. It scales the row by a power of two so that max |x| is near 1 and sums in double.
// Returns rstd in double.
template <class T>
inline double RmsExactRow(const T *x, T *y, int64_t n, const T *w, double eps) {
  double s1, s2;
  if (!ExactScale(x, y, n, &s1, &s2)) return __builtin_nan("");
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(x[i]) * s1 * s2;
    ss += v * v;
  }
  const double es = eps * s1 * s1 * s2 * s2;  // eps in the scaled units
  double f;
  if (IsFinite(es)) {
    f = 1.0 / Sqrt(ss / double(n) + es);  // x * s1 * s2 * f == x * rstd
  } else {
    // The values are so small that eps * s^2 overflows: their mean square is nothing next to eps.
    s1 = s2 = 1.0;
    f = 1.0 / Sqrt(eps);
  }
  for (int64_t i = 0; i < n; ++i) {
    double u = double(x[i]) * s1 * s2 * f;
    if (w) u *= double(w[i]);
    y[i] = T(u);
  }
  return s1 * s2 * f;
}

// y = x / sqrt(mean(x^2) + eps) * w: one read of the row for the sum of squares, one to scale it.
template <class T, bool kW>
void RmsNormRowsT(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  using S = Simd<T>;
  using V = typename S::V;
  const int64_t n = a.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    double ss;
    RowSums<T, 1>(
        n,
        [x](int64_t i, V *acc) {
          const V v = S::Load(x + i);
          acc[0] = S::MulAdd(v, v, acc[0]);
        },
        [x](int64_t i, double *out) { out[0] += double(x[i]) * double(x[i]); }, &ss);
    const double ms = ss / double(n);
    double rstd;
    if (IsFinite(ms) && ms + a.eps >= TinyVar<T>()) {
      rstd = 1.0 / Sqrt(ms + a.eps);
      ScaleRow<T, kW>(x, y, n, a.weight, T(rstd));
    } else {
      rstd = RmsExactRow<T>(x, y, n, a.weight, a.eps);
    }
    if (a.rstd) a.rstd[r] = T(rstd);
  }
}

// Uses x, y, weight, rstd, cols and eps of the arguments; bias and mean are ignored.
template <class T>
void RmsNormRows(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  if (a.weight) return RmsNormRowsT<T, true>(a, r0, r1);
  return RmsNormRowsT<T, false>(a, r0, r1);
}

FASTLN_OPS_END
