// LayerNorm forward. Included by kernels-inl.h, once per ISA; see there.

FASTLN_OPS_BEGIN

// ---------------------------------------------------------------------------------------------
// Statistics in one read of the row.
//
// Values are shifted by a pivot K (the row's first element) before Welford runs. At a large offset
// (x ~ 1e6 +- 1) x - K is exact in T (Sterbenz), so the running mean of the shifted values keeps all
// its digits even in float32: torch's float32 Welford mean loses ~0.06 there. The mean is then
// K + mean_d, a hi/lo pair that the normalize pass subtracts in two steps.
//
// kAcc independent accumulators of N lanes each keep the FMA pipes busy: one Welford chain is
// latency-bound (sub -> fma -> sub per element).
template <class T>
inline Moments RowMoments(const T *x, int64_t n, T pivot) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int kAcc = 4;
  constexpr int64_t kBlock = int64_t(kAcc) * N;

  const int64_t nblocks = n / kBlock;
  const V vk = S::Set(pivot);
  V M[kAcc], Q[kAcc];  // per-lane mean and M2 over the chunks done so far
  for (int a = 0; a < kAcc; ++a) {
    M[a] = S::Zero();
    Q[a] = S::Zero();
  }
  const T *p = x;
  int64_t done = 0;  // steps per lane done
  while (done < nblocks) {
    const int64_t len = Min(nblocks - done, kChunk);
    V m[kAcc], q[kAcc];
    for (int a = 0; a < kAcc; ++a) {
      m[a] = S::Zero();
      q[a] = S::Zero();
    }
    for (int64_t j = 0; j < len; ++j, p += kBlock) {
      const V r = S::Set(Rcp<T>(j));
      for (int a = 0; a < kAcc; ++a) {
        const V d = S::Sub(S::Load(p + a * N), vk);
        const V delta = S::Sub(d, m[a]);
        m[a] = S::MulAdd(delta, r, m[a]);
        q[a] = S::MulAdd(delta, S::Sub(d, m[a]), q[a]);
      }
    }
    if (done == 0) {
      for (int a = 0; a < kAcc; ++a) {
        M[a] = m[a];
        Q[a] = q[a];
      }
    } else {
      // Chan's merge, lane-wise: every lane has the same counts, so the weights are scalars.
      const double na = double(done), nb = double(len), nt = na + nb;
      const V wb = S::Set(T(nb / nt)), wab = S::Set(T(na * nb / nt));
      for (int a = 0; a < kAcc; ++a) {
        const V delta = S::Sub(m[a], M[a]);
        M[a] = S::MulAdd(delta, wb, M[a]);
        Q[a] = S::Add(Q[a], S::MulAdd(S::Mul(delta, delta), wab, q[a]));
      }
    }
    done += len;
  }

  Moments total{0.0, 0.0, 0.0};
  if (nblocks > 0) {
    // Lanes hold equal counts: merge them pairwise in double.
    T lm[kAcc * N], lq[kAcc * N];
    for (int a = 0; a < kAcc; ++a) {
      S::Store(lm + a * N, M[a]);
      S::Store(lq + a * N, Q[a]);
    }
    double cnt = double(nblocks);
    double mm[kAcc * N], qq[kAcc * N];
    for (int i = 0; i < kAcc * N; ++i) {
      mm[i] = lm[i];
      qq[i] = lq[i];
    }
    for (int width = kAcc * N; width > 1; width /= 2) {
      const int half = width / 2;
      for (int i = 0; i < half; ++i) {
        const double delta = mm[i + half] - mm[i];
        mm[i] = 0.5 * (mm[i] + mm[i + half]);
        qq[i] = qq[i] + qq[i + half] + delta * delta * (0.5 * cnt);
      }
      cnt *= 2;
    }
    total = Moments{cnt, mm[0], qq[0]};
  }

  // The tail (fewer than kBlock values) in scalar double.
  const int64_t tail = n - nblocks * kBlock;
  if (tail > 0) {
    Moments t{double(tail), 0.0, 0.0};
    for (int64_t j = 0; j < tail; ++j) {
      const double d = double(p[j]) - double(pivot);
      const double delta = d - t.mean;
      t.mean += delta * kRcp.d[j];  // tail < kBlock <= kChunk
      t.m2 += delta * (d - t.mean);
    }
    total = Merge(total, t);
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// y = ((x - hi) * rstd + nlo) * w + b, where mean = hi + lo and nlo = -lo * rstd.
// x - hi is exact when the row sits at a large offset, and the lo part then restores the digits
// a float mean would have lost; this costs no more operations than (x - mean) * (rstd * w) + b.
template <class T, bool kW, bool kB>
inline void NormalizeRow(const T *x, T *y, int64_t n, const T *w, const T *b, T hi, T nlo,
                         T rstd) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const V vhi = S::Set(hi), vr = S::Set(rstd), vlo = S::Set(nlo);
  auto one = [&](int64_t i) {
    V u = S::MulAdd(S::Sub(S::Load(x + i), vhi), vr, vlo);
    if (kW && kB) {
      u = S::MulAdd(u, S::Load(w + i), S::Load(b + i));
    } else if (kW) {
      u = S::Mul(u, S::Load(w + i));
    } else if (kB) {
      u = S::Add(u, S::Load(b + i));
    }
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
    T u = (x[i] - hi) * rstd + nlo;
    if (kW) u = u * w[i];
    if (kB) u = u + b[i];
    y[i] = u;
  }
}

// ---------------------------------------------------------------------------------------------
// The exact path, for rows the fast path cannot take: NaN or Inf in the row (the whole row becomes
// NaN), squares that overflow or underflow T, and for double, sums that would overflow. It scales
// the row by a power of two so that max |x| is near 1, then runs two passes in double.
// Returns the mean and rstd in double.
template <class T>
inline void ExactRow(const T *x, T *y, int64_t n, const T *w, const T *b, double eps,
                     double *mean_out, double *rstd_out) {
  double amax = 0.0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(x[i]);
    if (!IsFinite(v)) finite = false;
    const double a = Abs(v);
    if (a > amax) amax = a;
  }
  if (!finite) {
    const T nan = T(__builtin_nan(""));
    for (int64_t i = 0; i < n; ++i) y[i] = nan;
    *mean_out = __builtin_nan("");
    *rstd_out = __builtin_nan("");
    return;
  }
  int e = 0;
  if (amax > 0) __builtin_frexp(amax, &e);
  const double s = __builtin_ldexp(1.0, -e);  // x * s has max |.| in [0.5, 1)
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * s;
  const double ms = sum / double(n);
  double ss = 0.0, comp = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(x[i]) * s - ms;
    ss += d * d;
    comp += d;
  }
  // Two-pass with the compensation term of the corrected two-pass algorithm (Chan, Golub, LeVeque).
  const double vs = (ss - comp * comp / double(n)) / double(n);
  const double es = eps * s * s;  // eps in the scaled units
  *mean_out = ms / s;
  if (IsFinite(es)) {
    const double f = 1.0 / Sqrt(vs + es);  // (x*s - ms) * f == (x - mean) * rstd
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(x[i]) * s - ms) * f;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = T(u);
    }
    *rstd_out = s * f;
  } else {
    // The values are so small that eps * s^2 overflows: their variance is nothing next to eps.
    const double f = 1.0 / Sqrt(eps);
    const double mean = ms / s;
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(x[i]) - mean) * f;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = T(u);
    }
    *rstd_out = f;
  }
}

template <class T, bool kW, bool kB>
void LayerNormRowsT(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  const int64_t n = a.cols;
  const double eps = a.eps;
  for (int64_t r = r0; r < r1; ++r) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    const T pivot = x[0];
    const Moments mo = RowMoments<T>(x, n, pivot);
    const double var = mo.m2 / double(n);
    const double mean = double(pivot) + mo.mean;
    double rstd;
    if (IsFinite(var) && IsFinite(mean) && var + eps >= TinyVar<T>()) {
      rstd = 1.0 / Sqrt(var + eps);
      const T hi = T(mean);
      const T lo = T(mean - double(hi));
      const T rs = T(rstd);
      NormalizeRow<T, kW, kB>(x, y, n, a.weight, a.bias, hi, T(-lo * rs), rs);
    } else {
      double m;
      ExactRow<T>(x, y, n, a.weight, a.bias, eps, &m, &rstd);
      if (a.mean) a.mean[r] = T(m);
      if (a.rstd) a.rstd[r] = T(rstd);
      continue;
    }
    if (a.mean) a.mean[r] = T(mean);
    if (a.rstd) a.rstd[r] = T(rstd);
  }
}

template <class T>
void LayerNormRows(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  if (a.weight && a.bias) return LayerNormRowsT<T, true, true>(a, r0, r1);
  if (a.weight) return LayerNormRowsT<T, true, false>(a, r0, r1);
  if (a.bias) return LayerNormRowsT<T, false, true>(a, r0, r1);
  return LayerNormRowsT<T, false, false>(a, r0, r1);
}

FASTLN_OPS_END
