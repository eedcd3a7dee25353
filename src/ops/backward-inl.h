// LayerNorm and RMSNorm backward. Included by kernels-inl.h, once per ISA; see there.
//
// With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), g = dy * w and n values per row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))          (RMSNorm: without the mean(g) term)
//      = g * rstd + (x - mean) * (-rstd^3 * B / n) - rstd * A / n,
// where A = sum(g) and B = sum(g * (x - mean)). dweight = sum over rows of dy * xhat, dbias = sum
// over rows of dy. mean and rstd are known from the start, so the read that forms A and B also
// adds dy * xhat and dy into the column sums; a second read of the row, from cache, writes dx.

FASTLN_OPS_BEGIN

// The first read runs over kRows rows side by side, column by column: each vector of w is loaded
// once for them, and their dy * xhat and dy are summed in registers before the column sums in
// memory are updated, once per group rather than once per row. Four rows: their eight row-sum
// accumulators, the two column sums and w fit in AVX2's sixteen registers.
constexpr int kRows = 4;
// Rows are taken four at a time while four rows of dy and x fit in this many bytes (an L2's share),
// so that the second read finds them in cache; longer rows go one at a time.
constexpr int64_t kGroupBytes = 1024 * 1024;
// Each lane of the row sums adds at most this many terms in T before they go to double.
constexpr int64_t kFlushVecs = 32;

// dx = g * rstd + (x - mean) * k2 + k3 for one row. A row whose |mean| is at most kNear standard
// deviations (and every RMSNorm row, mean = 0) skips the subtraction: dx = g * rstd + x * k2 + k3'
// with k3' = k3 - mean * k2. There |x| <= |x - mean| + kNear * std, so x * k2 and mean * k2 are no
// larger than the terms dx has anyway, and their roundings cost a few units in the last place of
// those terms. Other rows subtract mean first, as the forward pass shifts such rows.
template <class T, bool kW, bool kShift>
inline void DxRow(const T *dy, const T *x, const T *w, T *dx, int64_t n, T mean, T rstd, T k2,
                  T k3) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const V vm = S::Set(mean), vr = S::Set(rstd), c2 = S::Set(k2), c3 = S::Set(k3);
  auto one = [&](int64_t i) {
    const V g = kW ? S::Mul(S::Load(dy + i), S::Load(w + i)) : S::Load(dy + i);
    const V xc = kShift ? S::Sub(S::Load(x + i), vm) : S::Load(x + i);
    S::Store(dx + i, S::MulAdd(g, vr, S::MulAdd(xc, c2, c3)));
  };
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    one(i);
    one(i + N);
  }
  for (; i + N <= n; i += N) one(i);
  for (; i < n; ++i) {
    const T g = kW ? dy[i] * w[i] : dy[i];
    const T xc = kShift ? x[i] - mean : x[i];
    dx[i] = g * rstd + (xc * k2 + k3);
  }
}

template <class T, int R, bool kCenter, bool kW, bool kGrad>
inline void BackwardGroup(const NormBackwardArgs<T> &a, int64_t r0, double inv_n, bool first,
                          T *dw, T *db) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int K = kCenter ? 2 : 1;  // row sums: [A,] B
  const int64_t n = a.cols;
  const int64_t nvec = n - n % N;
  const T *w = a.weight;
  const T *dy[R];
  const T *x[R];
  T mu[R], rs[R];
  V vmu[R], vrs[R];
  for (int q = 0; q < R; ++q) {
    dy[q] = a.dy + (r0 + q) * a.lddy;
    x[q] = a.x + (r0 + q) * a.ldx;
    mu[q] = kCenter ? a.mean[r0 + q] : T(0);
    rs[q] = a.rstd[r0 + q];
    vmu[q] = S::Set(mu[q]);
    vrs[q] = S::Set(rs[q]);
  }

  double sums[R][K] = {};
  for (int64_t j0 = 0; j0 < nvec; j0 += kFlushVecs * N) {
    const int64_t j1 = Min(nvec, j0 + kFlushVecs * N);
    V acc[R][K];
    for (int q = 0; q < R; ++q)
      for (int k = 0; k < K; ++k) acc[q][k] = S::Zero();
    for (int64_t j = j0; j < j1; j += N) {
      const V wv = kW ? S::Load(w + j) : S::Zero();
      V aw = S::Zero(), ab = S::Zero();
      for (int q = 0; q < R; ++q) {
        // With t = dy * (x - mean): A += dy * w, B += t * w, dweight += t * rstd.
        const V d = S::Load(dy[q] + j);
        const V xc = kCenter ? S::Sub(S::Load(x[q] + j), vmu[q]) : S::Load(x[q] + j);
        const V t = S::Mul(d, xc);
        if (kCenter) acc[q][0] = kW ? S::MulAdd(d, wv, acc[q][0]) : S::Add(acc[q][0], d);
        acc[q][K - 1] = kW ? S::MulAdd(t, wv, acc[q][K - 1]) : S::Add(acc[q][K - 1], t);
        if (kGrad) {
          aw = S::MulAdd(t, vrs[q], aw);
          if (kCenter) ab = S::Add(ab, d);
        }
      }
      if (kGrad) {
        S::Store(dw + j, first ? aw : S::Add(S::Load(dw + j), aw));
        if (kCenter) S::Store(db + j, first ? ab : S::Add(S::Load(db + j), ab));
      }
    }
    // Within a lane the sums stay short; across lanes and chunks they add in double.
    for (int q = 0; q < R; ++q)
      for (int k = 0; k < K; ++k) sums[q][k] += S::ReduceSumDouble(acc[q][k]);
  }
  for (int64_t j = nvec; j < n; ++j) {
    T sw = T(0), sb = T(0);
    for (int q = 0; q < R; ++q) {
      const T d = dy[q][j];
      const T xc = x[q][j] - mu[q];
      const double g = kW ? double(d) * double(w[j]) : double(d);
      if (kCenter) sums[q][0] += g;
      sums[q][K - 1] += g * double(xc);
      if (kGrad) {
        sw = sw + (d * xc) * rs[q];
        if (kCenter) sb = sb + d;
      }
    }
    if (kGrad) {
      dw[j] = first ? sw : dw[j] + sw;
      if (kCenter) db[j] = first ? sb : db[j] + sb;
    }
  }

  // dx, one row at a time: the row is in cache now.
  for (int q = 0; q < R; ++q) {
    const double r = double(rs[q]);
    const double k2 = -(r * r * r) * sums[q][K - 1] * inv_n;
    const double k3 = kCenter ? -r * sums[q][0] * inv_n : 0.0;
    const T *d = dy[q];
    const T *xr = x[q];
    T *dx = a.dx + (r0 + q) * a.lddx;
    const double m = double(mu[q]);
    if (!kCenter || m * m * r * r <= kNear * kNear)
      DxRow<T, kW, false>(d, xr, w, dx, n, T(0), rs[q], T(k2), T(k3 - m * k2));
    else
      DxRow<T, kW, true>(d, xr, w, dx, n, mu[q], rs[q], T(k2), T(k3));
  }
}

template <class T, bool kCenter, bool kW, bool kGrad>
void NormBackwardRowsT(const NormBackwardArgs<T> &a, int64_t r0, int64_t r1, T *dw, T *db) {
  const int64_t n = a.cols;
  const double inv_n = 1.0 / double(n);
  const bool wide = int64_t(2 * kRows) * n * int64_t(sizeof(T)) <= kGroupBytes;
  int64_t r = r0;
  for (; wide && r + kRows <= r1; r += kRows)
    BackwardGroup<T, kRows, kCenter, kW, kGrad>(a, r, inv_n, r == r0, dw, db);
  for (; r < r1; ++r) BackwardGroup<T, 1, kCenter, kW, kGrad>(a, r, inv_n, r == r0, dw, db);
  if (kGrad && r0 == r1) {
    for (int64_t j = 0; j < n; ++j) {
      dw[j] = T(0);
      if (kCenter) db[j] = T(0);
    }
  }
}

// dx for rows [r0, r1). When dw is not null, also the column sums over these rows, in T, of
// dy * xhat into dw[0, cols) and (LayerNorm) of dy into db[0, cols), overwriting them.
template <class T, bool kCenter>
void NormBackwardRows(const NormBackwardArgs<T> &a, int64_t r0, int64_t r1, T *dw, T *db) {
  if (a.weight) {
    if (dw) return NormBackwardRowsT<T, kCenter, true, true>(a, r0, r1, dw, db);
    return NormBackwardRowsT<T, kCenter, true, false>(a, r0, r1, dw, db);
  }
  if (dw) return NormBackwardRowsT<T, kCenter, false, true>(a, r0, r1, dw, db);
  return NormBackwardRowsT<T, kCenter, false, false>(a, r0, r1, dw, db);
}

FASTLN_OPS_END
