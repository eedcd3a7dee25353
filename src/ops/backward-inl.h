// LayerNorm and RMSNorm backward. Included by kernels-inl.h (after rms_norm-inl.h, whose RowSums
// it uses), once per ISA; see there.
//
// With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), g = dy * w and n values per row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))          (RMSNorm: without the mean(g) term)
//      = g * rstd + (x - mean) * (-rstd^3 * B / n) - rstd * A / n,
// where A = sum(g) and B = sum(g * (x - mean)). Per row that is one read for A and B and one that
// writes dx, the second finding the row in cache. dweight = sum over rows of dy * xhat, dbias =
// sum over rows of dy.

FASTLN_OPS_BEGIN

template <class T>
inline typename Simd<double>::V LoadAsDouble(const T *p);
template <>
inline typename Simd<double>::V LoadAsDouble<float>(const float *p) {
  return Simd<double>::LoadFloat(p);
}
template <>
inline typename Simd<double>::V LoadAsDouble<double>(const double *p) {
  return Simd<double>::Load(p);
}

// The dx sweep takes up to kGroup rows at once, so that dweight/dbias accumulate over them in
// registers and their partial sums in memory are read and written once per group, not per row. A
// group's dy and x stay under kGroupBytes (an L2's worth), so that the sweep finds them in cache
// after the read for the row sums.
constexpr int kGroup = 4;
constexpr int64_t kGroupBytes = 1024 * 1024;

template <class T, bool kCenter, bool kW, bool kGrad>
void NormBackwardRowsT(const NormBackwardArgs<T> &a, int64_t r0, int64_t r1, double *dw,
                       double *db) {
  using S = Simd<T>;
  using V = typename S::V;
  using D = Simd<double>;
  constexpr int N = S::N;
  constexpr int ND = D::N;
  constexpr int kSub = N / ND;  // double vectors per T vector
  static_assert(kSub * ND == N, "a T vector must split into whole double vectors");
  constexpr int K = kCenter ? 2 : 1;  // row sums: [A,] B
  const int64_t n = a.cols;
  const int64_t nvec = n - n % N;
  const T *w = a.weight;

  if (kGrad) {
    for (int64_t j = 0; j < n; ++j) {
      dw[j] = 0.0;
      if (kCenter) db[j] = 0.0;
    }
  }
  int64_t group = kGroupBytes / (2 * n * int64_t(sizeof(T)));
  if (group < 1) group = 1;
  if (group > kGroup) group = kGroup;

  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t rows = Min(group, r1 - g0);
    const T *dyp[kGroup], *xp[kGroup];
    T *dxp[kGroup];
    // Per row: mean, rstd and the dx constants k1..k3, as scalars for the tail and as vectors.
    T mu[kGroup], rst[kGroup], k1[kGroup], k2[kGroup], k3[kGroup];
    V vmu[kGroup], vrs[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];

    for (int64_t q = 0; q < rows; ++q) {
      const int64_t r = g0 + q;
      const T *dy = dyp[q] = a.dy + r * a.lddy;
      const T *x = xp[q] = a.x + r * a.ldx;
      dxp[q] = a.dx + r * a.lddx;
      const T m = mu[q] = kCenter ? a.mean[r] : T(0);
      rst[q] = a.rstd[r];
      const double rs = double(rst[q]);
      const V vm = vmu[q] = S::Set(m);
      double sums[K];
      RowSums<T, K>(
          n,
          [=](int64_t i, V *acc) {
            V g = S::Load(dy + i);
            if (kW) g = S::Mul(g, S::Load(w + i));
            V xc = S::Load(x + i);
            if (kCenter) {
              xc = S::Sub(xc, vm);
              acc[0] = S::Add(acc[0], g);
            }
            acc[K - 1] = S::MulAdd(g, xc, acc[K - 1]);
          },
          [=](int64_t i, double *out) {
            double g = double(dy[i]);
            if (kW) g *= double(w[i]);
            if (kCenter) out[0] += g;
            out[K - 1] += g * (double(x[i]) - double(m));
          },
          sums);
      const double B = sums[K - 1];
      k1[q] = T(rs);
      k2[q] = T(-(rs * rs * rs) * B / double(n));
      k3[q] = kCenter ? T(-rs * sums[0] / double(n)) : T(0);
      vrs[q] = S::Set(rst[q]);
      c1[q] = S::Set(k1[q]);
      c2[q] = S::Set(k2[q]);
      c3[q] = S::Set(k3[q]);
    }

    for (int64_t j = 0; j < nvec; j += N) {
      // dy * xhat and dy summed over the group's rows in T (at most kGroup terms), then added to
      // the double partials once per group: the sums over many rows keep double precision, and
      // the partials in memory are read and written once per group.
      V aw = S::Zero(), ab = S::Zero();
      const V wv = kW ? S::Load(w + j) : S::Zero();
      for (int64_t q = 0; q < rows; ++q) {
        const V dyv = S::Load(dyp[q] + j);
        const V xc = kCenter ? S::Sub(S::Load(xp[q] + j), vmu[q]) : S::Load(xp[q] + j);
        if (kGrad) {
          aw = S::MulAdd(dyv, S::Mul(xc, vrs[q]), aw);
          if (kCenter) ab = S::Add(ab, dyv);
        }
        const V g = kW ? S::Mul(dyv, wv) : dyv;
        const V u = kCenter ? S::MulAdd(xc, c2[q], c3[q]) : S::Mul(xc, c2[q]);
        S::Store(dxp[q] + j, S::MulAdd(g, c1[q], u));
      }
      if (kGrad) {
        T tw[N], tb[N];
        S::Store(tw, aw);
        S::Store(tb, ab);
        for (int s = 0; s < kSub; ++s) {
          double *pw = dw + j + s * ND;
          D::Store(pw, D::Add(D::Load(pw), LoadAsDouble<T>(tw + s * ND)));
          if (kCenter) {
            double *pb = db + j + s * ND;
            D::Store(pb, D::Add(D::Load(pb), LoadAsDouble<T>(tb + s * ND)));
          }
        }
      }
    }

    for (int64_t j = nvec; j < n; ++j) {
      double sw = 0.0, sb = 0.0;
      for (int64_t q = 0; q < rows; ++q) {
        const T dyj = dyp[q][j], xj = xp[q][j];
        const T xc = kCenter ? xj - mu[q] : xj;
        if (kGrad) {
          sw += double(dyj * (xc * rst[q]));
          if (kCenter) sb += double(dyj);
        }
        const T g = kW ? dyj * w[j] : dyj;
        dxp[q][j] = g * k1[q] + (xc * k2[q] + k3[q]);
      }
      if (kGrad) {
        dw[j] += sw;
        if (kCenter) db[j] += sb;
      }
    }
  }
}

// dx for rows [r0, r1). When dw is not null, also the column sums over these rows, in double, of
// dy * xhat into dw[0, cols) and (LayerNorm) of dy into db[0, cols), overwriting them.
template <class T, bool kCenter>
void NormBackwardRows(const NormBackwardArgs<T> &a, int64_t r0, int64_t r1, double *dw,
                      double *db) {
  if (a.weight) {
    if (dw) return NormBackwardRowsT<T, kCenter, true, true>(a, r0, r1, dw, db);
    return NormBackwardRowsT<T, kCenter, true, false>(a, r0, r1, dw, db);
  }
  if (dw) return NormBackwardRowsT<T, kCenter, false, true>(a, r0, r1, dw, db);
  return NormBackwardRowsT<T, kCenter, false, false>(a, r0, r1, dw, db);
}

FASTLN_OPS_END
