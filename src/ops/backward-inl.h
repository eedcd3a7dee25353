// LayerNorm and RMSNorm backward. Included by kernels-inl.h, once per ISA; see there.
//
// With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), g = dy * w and n values per row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))          (RMSNorm: without the mean(g) term)
//      = g * rstd + (x - mean) * (-rstd^3 * B / n) - rstd * A / n,
// where A = sum(g) and B = sum(g * (x - mean)). dweight = sum over rows of dy * xhat, dbias = sum
// over rows of dy. mean and rstd are known from the start, so the read that forms A and B also
// adds dy * xhat and dy into the column sums; a second read of the row, from cache, writes dx.
//
// The row routines are templates over the storage format St of dy, x and dx (see kernels-inl.h):
// 16-bit rows are widened in registers as they are read, the math is float32 (St::T), and dx is
// rounded once to 16 bits as it is stored; mean, rstd, weight and the column sums are float32.
// On the widened values every instruction is the float32 path's, so dx is float32's dx rounded
// once, and dweight and dbias are bitwise float32's.

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
// kHat (rows of WildRstd, with kShift): dx = g * rstd + ((x - mean) * rstd) * k2 + k3, k2 then
// being -rstd * mean(g * xhat), a factor rstd smaller than the other form's.
template <class St, bool kW, bool kShift, bool kHat = false>
inline void DxRow(const typename St::E *dy, const typename St::E *x, const typename St::T *w,
                  typename St::E *dx, int64_t n, typename St::T mean, typename St::T rstd,
                  typename St::T k2, typename St::T k3) {
  using T = typename St::T;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  static_assert(!kHat || kShift, "kHat rows are shifted");
  const V vm = S::Set(mean), vr = S::Set(rstd), c2 = S::Set(k2), c3 = S::Set(k3);
  auto one = [&](int64_t i) {
    const V g = kW ? S::Mul(St::Load(dy + i), S::Load(w + i)) : St::Load(dy + i);
    V xc = kShift ? S::Sub(St::Load(x + i), vm) : St::Load(x + i);
    if (kHat) xc = S::Mul(xc, vr);
    St::Store(dx + i, S::MulAdd(g, vr, S::MulAdd(xc, c2, c3)));
  };
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    one(i);
    one(i + N);
  }
  for (; i + N <= n; i += N) one(i);
  for (; i < n; ++i) {
    const T g = kW ? St::ToT(dy[i]) * w[i] : St::ToT(dy[i]);
    T xc = kShift ? St::ToT(x[i]) - mean : St::ToT(x[i]);
    if (kHat) xc = xc * rstd;
    dx[i] = St::FromT(g * rstd + (xc * k2 + k3));
  }
}

// Whether a row takes DxRow's subtraction of mean (kShift): |mean| more than kNear standard
// deviations.
inline bool FarMean(double mean, double rstd) {
  return !(mean * mean * rstd * rstd <= kNear * kNear);
}

// Rows whose rstd's binary exponent lies outside [-kWild, kWild] (finite values; kWild 40 for
// float math, 300 for double) take the backward pass in xhat's units (BackwardGroup's kHat). The
// usual form's k2 = -rstd^3 * sum(g * (x - mean)) / n overflows or underflows there: in double
// from rstd ~ 1e103 (std 1e-103 gave NaN, 1e110 0.06 relative error in dx), in float32 once
// rstd^2 * mean(g * xhat) leaves float's normal range (std 1e20: 6.6e-6, 1e25: 0.06, 1e-22 with
// eps = 0: Inf), and dy * (x - mean) itself overflowed float32 for x ~ 1e36. In xhat's units
// every product stays near the size of g, dx or xhat. Within the bounds the usual form's k2 (and
// rstd^3 in double) stays normal with room for g of any plausible size, and that form stays: a
// multiply a value cheaper, and bitwise as before.
template <class T>
struct WildBits;
template <>
struct WildBits<float> {
  using U = uint32_t;
  static constexpr int kMant = 23;
  static constexpr U kEMax = 0xff, kLow = 127 - 40, kSpan = 80;
};
template <>
struct WildBits<double> {
  using U = uint64_t;
  static constexpr int kMant = 52;
  static constexpr U kEMax = 0x7ff, kLow = 1023 - 300, kSpan = 600;
};

// On the exponent's bits, so that the look over a call's rows (AnyWildRstd) vectorizes: as float
// comparisons it did not, and took 5% more instructions at float32 2048x64. Zero is wild (its
// dx is 0 either way); NaN and Inf are not, and keep the usual form's NaN.
template <class T>
inline typename WildBits<T>::U WildRstd(T r) {
  using B = WildBits<T>;
  typename B::U u;
  __builtin_memcpy(&u, &r, sizeof u);
  const typename B::U e = (u >> B::kMant) & B::kEMax;
  return typename B::U(e - B::kLow > B::kSpan) & typename B::U(e != B::kEMax);
}

template <class T>
inline bool AnyWildRstd(const T *rstd, int64_t r0, int64_t r1) {
  typename WildBits<T>::U any = 0;
  for (int64_t r = r0; r < r1; ++r) any |= WildRstd(rstd[r]);
  return any != 0;
}

// Rows whose |mean| is more than this many standard deviations have the mean's rounding recovered
// (MeanRest, below). Nearer rows keep the given mean: the rounding moves their xhat by at most
// 16 units of T's roundoff, under the error dx has anyway (float32, 4 rows x 768 at 15 + N(0,1),
// max |dx - exact| / max |exact| 7.1e-8 with the given mean); and the recovery's extra read of x
// takes the backward pass up to 2x the time (README, Training).
constexpr double kRestFrom = 16.0;
inline bool RestShows(double mean, double rstd) {
  return !(mean * mean * rstd * rstd <= kRestFrom * kRestFrom);
}

// What the given mean leaves out of the row's mean: sum(x - mean) / n, summed in T over chunks of
// kFlushVecs vectors and in double across them. The mean the forward pass returns is rounded to T,
// by up to half an ulp of the offset: up to 0.06 standard deviations for float64 1e15 + N(0,1),
// 0.5 for float32 1e4 + N(0,1e-3). Taken as given, that shift went into every xhat and so into dx
// and dweight (README, Accuracy). x - mean is exact for values within a factor of two of mean, so
// the sum's error is T's rounding of the deviations, as in the forward pass. 0 when not finite:
// NaN and Inf rows keep their dx.
template <class St, int R>
inline void MeanRest(const typename St::E *const *x, int64_t n, const typename St::T *mean,
                     double inv_n, double *lo) {
  using T = typename St::T;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const int64_t nvec = n - n % (2 * N);
  // Two sums a row, in every group size, so that a row's lo does not depend on its neighbours:
  // rows side by side overlap their chains of adds and their reductions, which a row alone
  // (one chain) left exposed.
  double s[R] = {};
  V vm[R];
  for (int q = 0; q < R; ++q) vm[q] = S::Set(mean[q]);
  for (int64_t j0 = 0; j0 < nvec; j0 += kFlushVecs * N) {
    const int64_t j1 = Min(nvec, j0 + kFlushVecs * N);
    V acc[R][2];
    for (int q = 0; q < R; ++q) acc[q][0] = acc[q][1] = S::Zero();
    for (int64_t j = j0; j < j1; j += 2 * N)
      for (int q = 0; q < R; ++q)
        for (int k = 0; k < 2; ++k)
          acc[q][k] = S::Add(acc[q][k], S::Sub(St::Load(x[q] + j + k * N), vm[q]));
    for (int q = 0; q < R; ++q) s[q] += S::ReduceSumDouble(S::Add(acc[q][0], acc[q][1]));
  }
  for (int q = 0; q < R; ++q) {
    for (int64_t j = nvec; j < n; ++j) s[q] += double(St::ToT(x[q][j]) - mean[q]);
    lo[q] = IsFinite(s[q] * inv_n) ? s[q] * inv_n : 0.0;
  }
}

// With kLo, lo[q] is row q's MeanRest (0 for rows where the rest does not show), and its xhat is
// (x - mean - lo) * rstd. With kHat (see WildRstd) the sums are of g and g * xhat, dweight adds
// dy * xhat, and dx takes DxRow's kHat form.
template <class St, int R, bool kCenter, bool kW, bool kGrad, bool kLo, bool kHat = false>
inline void BackwardGroup(const NormBackwardArgs<typename St::E, typename St::T> &a, int64_t r0,
                          double inv_n, bool first, typename St::T *dw, typename St::T *db,
                          const double *lo) {
  using T = typename St::T;
  using E = typename St::E;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int K = kCenter ? 2 : 1;  // row sums: [A,] B
  const int64_t n = a.cols;
  const int64_t nvec = n - n % N;
  const T *w = a.weight;
  const E *dy[R];
  const E *x[R];
  T mu[R], rs[R], tlo[R];
  V vmu[R], vrs[R], vlo[R];
  for (int q = 0; q < R; ++q) {
    dy[q] = a.dy + (r0 + q) * a.lddy;
    x[q] = a.x + (r0 + q) * a.ldx;
    mu[q] = kCenter ? a.mean[r0 + q] : T(0);
    rs[q] = a.rstd[r0 + q];
    vmu[q] = S::Set(mu[q]);
    vrs[q] = S::Set(rs[q]);
    tlo[q] = kLo ? T(lo[q]) : T(0);
    vlo[q] = S::Set(tlo[q]);
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
        const V d = St::Load(dy[q] + j);
        V xc = kCenter ? S::Sub(St::Load(x[q] + j), vmu[q]) : St::Load(x[q] + j);
        if (kLo) xc = S::Sub(xc, vlo[q]);
        if (kHat) xc = S::Mul(xc, vrs[q]);
        const V t = S::Mul(d, xc);
        if (kCenter) acc[q][0] = kW ? S::MulAdd(d, wv, acc[q][0]) : S::Add(acc[q][0], d);
        acc[q][K - 1] = kW ? S::MulAdd(t, wv, acc[q][K - 1]) : S::Add(acc[q][K - 1], t);
        if (kGrad) {
          aw = kHat ? S::Add(aw, t) : S::MulAdd(t, vrs[q], aw);
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
      const T d = St::ToT(dy[q][j]);
      T xc = kLo ? (St::ToT(x[q][j]) - mu[q]) - tlo[q] : St::ToT(x[q][j]) - mu[q];
      if (kHat) xc = xc * rs[q];
      const double g = kW ? double(d) * double(w[j]) : double(d);
      if (kCenter) sums[q][0] += g;
      sums[q][K - 1] += g * double(xc);
      if (kGrad) {
        sw = kHat ? sw + d * xc : sw + (d * xc) * rs[q];
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
    const E *d = dy[q];
    const E *xr = x[q];
    E *dx = a.dx + (r0 + q) * a.lddx;
    const double m = double(mu[q]);
    if (kHat) {
      const double k2h = -r * (sums[q][K - 1] * inv_n);
      DxRow<St, kW, true, true>(d, xr, w, dx, n, mu[q], rs[q], T(k2h),
                                T(kLo && lo[q] != 0.0 ? k3 - lo[q] * r * k2h : k3));
    } else if (!kCenter || !FarMean(m, r))
      DxRow<St, kW, false>(d, xr, w, dx, n, T(0), rs[q], T(k2), T(k3 - m * k2));
    else  // (x - mean - lo) * k2 + k3; lo is 0 where not kLo, and k2 may be Inf
      DxRow<St, kW, true>(d, xr, w, dx, n, mu[q], rs[q], T(k2),
                          T(kLo && lo[q] != 0.0 ? k3 - lo[q] * k2 : k3));
  }
}

// Rows [r, r1) one at a time: a call with a row of WildRstd takes all its rows here (dx has the
// same bits as in groups; dweight and dbias add in another order). Out of line and cold, and
// chosen once a call (NormBackwardRows): a look at each group's rows inside NormBackwardRowsT took
// 7-9% more instructions there (callgrind, float32 2048x64, AVX2), calls without such rows too.
// Its look for the mean's rest repeats the one-row case of NormBackwardRowsT's `far`: a helper
// shared by both moved GCC's inlining across the whole translation unit (148 functions changed
// size in the scalar kernels' object, forward passes included), for no change in what runs.
template <class St, bool kCenter, bool kW, bool kGrad>
__attribute__((noinline, cold)) void BackwardAlone(
    const NormBackwardArgs<typename St::E, typename St::T> &a, int64_t r, int64_t r1, double inv_n,
    bool first, typename St::T *dw, typename St::T *db) {
  using E = typename St::E;
  for (; r < r1; ++r, first = false) {
    double lo[1] = {0.0};
    if (kCenter && RestShows(double(a.mean[r]), double(a.rstd[r]))) {
      const E *x[1] = {a.x + r * a.ldx};
      MeanRest<St, 1>(x, a.cols, a.mean + r, inv_n, lo);
    }
    if (WildRstd(a.rstd[r]))
      BackwardGroup<St, 1, kCenter, kW, kGrad, kCenter, true>(a, r, inv_n, first, dw, db, lo);
    else if (lo[0] != 0.0)
      BackwardGroup<St, 1, kCenter, kW, kGrad, kCenter>(a, r, inv_n, first, dw, db, lo);
    else
      BackwardGroup<St, 1, kCenter, kW, kGrad, false>(a, r, inv_n, first, dw, db, lo);
  }
}

template <class St, bool kCenter, bool kW, bool kGrad>
void NormBackwardRowsT(const NormBackwardArgs<typename St::E, typename St::T> &a, int64_t r0,
                       int64_t r1, typename St::T *dw, typename St::T *db) {
  using T = typename St::T;
  using E = typename St::E;
  const int64_t n = a.cols;
  const double inv_n = 1.0 / double(n);
  // Sized by T, not by the stored type, so that 16-bit rows group as float32 rows do and dweight
  // and dbias stay bitwise float32's at every length.
  const bool wide = int64_t(2 * kRows) * n * int64_t(sizeof(T)) <= kGroupBytes;
  // A group with a row whose rest shows takes the instance that subtracts lo; the others, and
  // every group of a call without such rows (checked once), keep their loop.
  bool shows = false;
  if (kCenter)
    for (int64_t r = r0; r < r1; ++r) shows |= RestShows(double(a.mean[r]), double(a.rstd[r]));
  double lo[kRows];
  auto far = [&](int64_t r, auto rows) {
    constexpr int R = decltype(rows)::value;
    if (!shows) return false;
    bool show[R], any = false;
    for (int q = 0; q < R; ++q) {
      show[q] = RestShows(double(a.mean[r + q]), double(a.rstd[r + q]));
      any = any || show[q];
    }
    if (!any) return false;
    const E *x[R];
    for (int q = 0; q < R; ++q) x[q] = a.x + (r + q) * a.ldx;
    MeanRest<St, R>(x, n, a.mean + r, inv_n, lo);
    any = false;
    for (int q = 0; q < R; ++q) {
      if (!show[q]) lo[q] = 0.0;
      any = any || lo[q] != 0.0;
    }
    return any;
  };
  int64_t r = r0;
  for (; wide && r + kRows <= r1; r += kRows) {
    if (far(r, std::integral_constant<int, kRows>{}))
      BackwardGroup<St, kRows, kCenter, kW, kGrad, kCenter>(a, r, inv_n, r == r0, dw, db, lo);
    else
      BackwardGroup<St, kRows, kCenter, kW, kGrad, false>(a, r, inv_n, r == r0, dw, db, lo);
  }
  for (; r < r1; ++r) {
    if (far(r, std::integral_constant<int, 1>{}))
      BackwardGroup<St, 1, kCenter, kW, kGrad, kCenter>(a, r, inv_n, r == r0, dw, db, lo);
    else
      BackwardGroup<St, 1, kCenter, kW, kGrad, false>(a, r, inv_n, r == r0, dw, db, lo);
  }
  if (kGrad && r0 == r1) {
    for (int64_t j = 0; j < n; ++j) {
      dw[j] = T(0);
      if (kCenter) db[j] = T(0);
    }
  }
}

// dx for rows [r0, r1) stored in format St. When dw is not null, also the column sums over these
// rows, in St::T, of dy * xhat into dw[0, cols) and (LayerNorm) of dy into db[0, cols),
// overwriting them.
template <class St, bool kCenter>
void NormBackwardRows(const NormBackwardArgs<typename St::E, typename St::T> &a, int64_t r0,
                      int64_t r1, typename St::T *dw, typename St::T *db) {
  if (AnyWildRstd(a.rstd, r0, r1)) {
    const double inv_n = 1.0 / double(a.cols);
    if (a.weight) {
      if (dw) return BackwardAlone<St, kCenter, true, true>(a, r0, r1, inv_n, true, dw, db);
      return BackwardAlone<St, kCenter, true, false>(a, r0, r1, inv_n, true, dw, db);
    }
    if (dw) return BackwardAlone<St, kCenter, false, true>(a, r0, r1, inv_n, true, dw, db);
    return BackwardAlone<St, kCenter, false, false>(a, r0, r1, inv_n, true, dw, db);
  }
  if (a.weight) {
    if (dw) return NormBackwardRowsT<St, kCenter, true, true>(a, r0, r1, dw, db);
    return NormBackwardRowsT<St, kCenter, true, false>(a, r0, r1, dw, db);
  }
  if (dw) return NormBackwardRowsT<St, kCenter, false, true>(a, r0, r1, dw, db);
  return NormBackwardRowsT<St, kCenter, false, false>(a, r0, r1, dw, db);
}

FASTLN_OPS_END
