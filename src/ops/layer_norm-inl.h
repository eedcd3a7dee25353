// LayerNorm forward. Included by kernels-inl.h, once per ISA; see there.

FASTLN_OPS_BEGIN

// ---------------------------------------------------------------------------------------------
// Statistics in one read of the row: Welford per lane, kAcc independent accumulators of N lanes.
//
// With kShift, values are shifted by a pivot K (the unshifted pass's estimate of the mean) before
// Welford runs. At a large offset (x ~ 1e6 +- 1) x - K is exact in T (Sterbenz), so the running mean of the shifted
// values keeps all its digits even in float32: torch's float32 Welford mean loses ~0.06 there. The
// mean is then K + mean_d, a hi/lo pair that the normalize pass subtracts in two steps. The shift
// costs one of the five operations per vector, and it only matters when |mean| is large next to the
// standard deviation, so rows are first run without it (see LayerNormRowsT).
//
// One Welford chain is latency-bound (sub -> fma per step); kAcc chains in flight keep the pipes
// busy.
//
// `job` is another row's normalize pass, run block by block inside the same loop (job.Block(i)
// after the block of values from i, job.Rest() for what is left). The statistics keep the FP pipes busy and the
// normalize pass the load and store ports: interleaved, each hides much of the other's cost.
// NoJob runs the statistics alone.
constexpr int kAcc = 4;

template <class T>
constexpr int64_t kBlockOf = int64_t(kAcc) * Simd<T>::N;

struct NoJob {
  void Block(int64_t) const {}
  void Rest() const {}
};

template <class T, bool kShift, class Job>
inline Moments RowMoments(const T *x, int64_t n, T pivot, const Job &job) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int64_t kBlock = kBlockOf<T>;

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
        const V d = kShift ? S::Sub(S::Load(p + a * N), vk) : S::Load(p + a * N);
        const V delta = S::Sub(d, m[a]);
        m[a] = S::MulAdd(delta, r, m[a]);
        q[a] = S::MulAdd(delta, S::Sub(d, m[a]), q[a]);
      }
      job.Block((done + j) * kBlock);
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
    // All kAcc * N lanes hold nblocks values each, so their merge is a mean and a sum of squares
    // over the lane means: M2 = sum(Q) + nblocks * sum((M - mean)^2). Three horizontal sums
    // instead of a merge tree over the lanes, which would cost as much as a short row's Welford.
    // The squares are taken about p, one of the lane means, rather than about mean, so that the
    // three sums run side by side instead of one after the other (on short rows this chain of
    // latencies is the cost of a row): sum((M - mean)^2) = sum((M - p)^2) - K (mean - p)^2, where
    // the second term is at most the first. It cancels when p is an outlier lane (with 64 lanes of
    // 3 values each, the lane holding one far value), so the shifted pass, whose lane means are
    // already centred on zero, takes p = 0 instead.
    const T p = kShift ? T(0) : S::First(M[0]);
    const V vp = S::Set(p);
    V msum = M[0], qsum = Q[0];
    V dd = S::Zero();
    for (int a = 0; a < kAcc; ++a) {
      if (a > 0) {
        msum = S::Add(msum, M[a]);
        qsum = S::Add(qsum, Q[a]);
      }
      const V d = S::Sub(M[a], vp);
      dd = S::MulAdd(d, d, dd);
    }
    const double mean = double(S::ReduceSum(msum)) * (1.0 / double(kBlock));
    const double dp = mean - double(p);
    const double cnt = double(nblocks);
    total = Moments{cnt * double(kBlock), mean,
                    double(S::ReduceSum(qsum)) +
                        cnt * (double(S::ReduceSum(dd)) - double(kBlock) * dp * dp)};
  }

  job.Rest();

  // The tail (fewer than kBlock values) in scalar double, in two passes (sum, then squares about
  // the tail's mean) of four independent sums each. A Welford chain here is latency-bound, ~12
  // cycles a value, and with AVX-512 the tail holds up to 63 values: 2048x100 float32 then ran
  // 4.5x slower than with AVX2.
  const int64_t tail = n - nblocks * kBlock;
  if (tail > 0) {
    const double k = kShift ? double(pivot) : 0.0;
    const int64_t t4 = tail & ~int64_t(3);
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int64_t j = 0; j < t4; j += 4) {
      s0 += double(p[j]) - k;
      s1 += double(p[j + 1]) - k;
      s2 += double(p[j + 2]) - k;
      s3 += double(p[j + 3]) - k;
    }
    for (int64_t j = t4; j < tail; ++j) s0 += double(p[j]) - k;
    const double tm = ((s0 + s1) + (s2 + s3)) / double(tail);
    double q0 = 0.0, q1 = 0.0, q2 = 0.0, q3 = 0.0;
    for (int64_t j = 0; j < t4; j += 4) {
      const double d0 = double(p[j]) - k - tm, d1 = double(p[j + 1]) - k - tm;
      const double d2 = double(p[j + 2]) - k - tm, d3 = double(p[j + 3]) - k - tm;
      q0 += d0 * d0;
      q1 += d1 * d1;
      q2 += d2 * d2;
      q3 += d3 * d3;
    }
    for (int64_t j = t4; j < tail; ++j) {
      const double d = double(p[j]) - k - tm;
      q0 += d * d;
    }
    total = Merge(total, Moments{double(tail), tm, (q0 + q1) + (q2 + q3)});
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// The normalize pass, y = (x - mean) * rstd * w + b, in one of two forms:
//
// kSplit: ((x - hi) * rstd + nlo) * w + b, where mean = hi + lo and nlo = -lo * rstd. x - hi is
//   exact when the row sits at a large offset, and the lo part then restores the digits a float
//   mean would have lost.
// otherwise: (x * rstd + c) * w + b with c = -mean * rstd, one operation fewer. Used only when
//   |mean| <= kNear * std, where x * rstd is no larger than (x - mean) * rstd plus kNear, so its
//   rounding error is of the same size as the split form's.
//
// kStream writes y with non-temporal stores (see kStreamBytes), whole cache lines only: the values
// up to the first line boundary of y and those after its last one get plain stores (a line written
// partly by each kind is slow). Block(i) then covers the kBlock values from i + head, when they fit
// in the row; Rest() writes whatever the blocks left.
template <class T, bool kW, bool kB, bool kSplit, bool kStream>
struct Normalizer {
  using S = Simd<T>;
  using V = typename S::V;
  static constexpr int N = S::N;
  static constexpr int64_t kLine = 64 / sizeof(T);  // values per cache line

  const T *x;
  T *y;
  int64_t n;
  const T *w, *b;
  T hi, c, rstd;
  V vhi, vr, vc;
  int64_t head;          // values before the first line boundary of y (kStream), else 0
  mutable int64_t done;  // y[0, done) written

  Normalizer(const T *x_, T *y_, int64_t n_, const T *w_, const T *b_, T hi_, T c_, T rstd_)
      : x(x_), y(y_), n(n_), w(w_), b(b_), hi(hi_), c(c_), rstd(rstd_),
        vhi(S::Set(hi_)), vr(S::Set(rstd_)), vc(S::Set(c_)), head(0), done(0) {
    if (kStream) {
      const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(y) % 64) / int64_t(sizeof(T));
      head = Min(n, mis ? kLine - mis : 0);
      Plain(0, head);
      done = head;
    }
  }

  V Compute(int64_t i) const {
    const V xi = S::Load(x + i);
    V u = S::MulAdd(kSplit ? S::Sub(xi, vhi) : xi, vr, vc);
    if (kW && kB) {
      u = S::MulAdd(u, S::Load(w + i), S::Load(b + i));
    } else if (kW) {
      u = S::Mul(u, S::Load(w + i));
    } else if (kB) {
      u = S::Add(u, S::Load(b + i));
    }
    return u;
  }
  template <bool kNT = kStream>
  void One(int64_t i) const {
    if (kNT) {
      S::StoreStream(y + i, Compute(i));
    } else {
      S::Store(y + i, Compute(i));
    }
  }
  // Values [i, end) with plain stores. Every value is computed by the same vector arithmetic
  // (FMA) wherever it falls, so that y does not depend on where the vectors start, that is on y's
  // alignment: the last partial vector is computed in full at a position inside the row and only
  // its lanes in [i, end) are kept. (In place, the lanes before i read values already replaced by
  // y; they are the ones dropped.) Rows shorter than a vector go scalar.
  void Plain(int64_t i, int64_t end) const {
    for (; i + N <= end; i += N) One<false>(i);
    if (i >= end) return;
    if (n >= N) {
      const int64_t base = Min(i, n - N);
      T tmp[N];
      S::Store(tmp, Compute(base));
      for (; i < end; ++i) y[i] = tmp[i - base];
      return;
    }
    for (; i < end; ++i) {
      T u = (kSplit ? x[i] - hi : x[i]) * rstd + c;
      if (kW) u = u * w[i];
      if (kB) u = u + b[i];
      y[i] = u;
    }
  }
  // kBlockOf<T> values from i (+ head).
  void Block(int64_t i) const {
    i += head;
    if (kStream && i + kBlockOf<T> > n) return;
    for (int a = 0; a < kAcc; ++a) One(i + a * N);
    done = i + kBlockOf<T>;
  }
  // Values [done, n).
  void Rest() const {
    int64_t i = done;
    if (kStream) {
      for (const int64_t lines = i + (n - i) / kLine * kLine; i < lines; i += N) One(i);
    }
    Plain(i, n);
  }
  void All() const {
    for (int64_t i = 0; i + head + kBlockOf<T> <= n; i += kBlockOf<T>) Block(i);
    Rest();
  }
};

// ---------------------------------------------------------------------------------------------
// The exact path, for rows the fast path cannot take: NaN or Inf in the row (the whole row becomes
// NaN), squares that overflow or underflow T, and for double, sums that would overflow. It scales
// the row by a power of two so that max |x| is near 1, then runs two passes in double.
// Returns the mean and rstd in double.
template <class T>
inline void ExactRow(const T *x, T *y, int64_t n, const T *w, const T *b, double eps,
                     double *mean_out, double *rstd_out) {
  double s1, s2;
  if (!ExactScale(x, y, n, &s1, &s2)) {
    *mean_out = __builtin_nan("");
    *rstd_out = __builtin_nan("");
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * s1 * s2;
  const double ms = sum / double(n);
  double ss = 0.0, comp = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(x[i]) * s1 * s2 - ms;
    ss += d * d;
    comp += d;
  }
  // Two-pass with the compensation term of the corrected two-pass algorithm (Chan, Golub, LeVeque).
  const double vs = (ss - comp * comp / double(n)) / double(n);
  const double es = eps * s1 * s1 * s2 * s2;  // eps in the scaled units
  *mean_out = ms / s1 / s2;
  if (IsFinite(es)) {
    const double f = 1.0 / Sqrt(vs + es);  // (x*s1*s2 - ms) * f == (x - mean) * rstd
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(x[i]) * s1 * s2 - ms) * f;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = T(u);
    }
    *rstd_out = s1 * (s2 * f);
  } else {
    // The values are so small that eps * s^2 overflows: their variance is nothing next to eps.
    const double f = 1.0 / Sqrt(eps);
    const double mean = ms / s1 / s2;
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(x[i]) - mean) * f;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = T(u);
    }
    *rstd_out = f;
  }
}

// Rows whose |mean| is at most kNear standard deviations run the statistics without the pivot
// shift and the normalize pass in its short form; the others run the statistics again, shifted.
constexpr double kNear = 2.0;

// A call whose output is at least this large writes it with non-temporal stores: it cannot stay in
// the core's L2 anyway, and streaming skips reading each line of y before writing it (a third of
// the memory traffic). Measured here, 2 MiB and up: 1.2-1.6x faster stores; 1 MiB: 1.5x slower.
// Not when the caller says y is fresh (FASTLN_Y_FRESH, args.stream false): the kernel has just
// zeroed those pages through the cache, and streaming over cached lines was 1.3x (huge pages) to
// 3x (4 KiB pages) slower than plain stores there.
constexpr int64_t kStreamBytes = int64_t(2) << 20;
constexpr int64_t kStreamRowBytes = 1024;

// Statistics of row `next` (null: none), interleaved with the normalize pass of the current row.
template <class T, bool kW, bool kB, bool kStream, bool kSplit>
inline Moments NormalizeAndNext(const T *next, int64_t n, const T *x, T *y, const T *w,
                                const T *b, T hi, T c, T rstd) {
  const Normalizer<T, kW, kB, kSplit, kStream> job(x, y, n, w, b, hi, c, rstd);
  if (next) return RowMoments<T, false>(next, n, T(0), job);
  job.All();
  return Moments{0.0, 0.0, 0.0};
}

// Row r's normalize pass runs in the loop that computes the statistics of row r + kLag (see
// RowMoments). Two rows ahead rather than one: on short rows a row's cost is the latency from its
// last Welford step to the rstd its normalize pass needs, and that chain then has a whole row's
// work to hide in (512x64 f32: 2.4 -> 2.2 ns per 8 floats; long rows unchanged within 2%).
constexpr int kLag = 2;

template <class T, bool kW, bool kB, bool kStream>
void LayerNormRowsT(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  const int64_t n = a.cols;
  const double eps = a.eps;
  const double inv_n = 1.0 / double(n);  // a division per row sits on the row's latency chain
  if (r0 >= r1) return;
  Moments ahead[kLag];  // statistics of rows r .. r + kLag - 1
  for (int64_t k = 0; k < kLag && r0 + k < r1; ++k) {
    ahead[k] = RowMoments<T, false>(a.x + (r0 + k) * a.ldx, n, T(0), NoJob{});
  }
  for (int64_t r = r0; r < r1; ++r) {
    const T *x = a.x + r * a.ldx;
    T *y = a.y + r * a.ldy;
    const T *next = r + kLag < r1 ? x + kLag * a.ldx : nullptr;
    const Moments mo = ahead[0];
    double var = mo.m2 * inv_n;
    double mean = mo.mean;
    // Also true for NaN: such rows take the shifted pass and then the exact path.
    const bool near = mean * mean <= kNear * kNear * var;
    if (!near) {
      // The pivot is the first pass's mean, not a data value: the shifted running means then stay
      // within a few standard deviations of zero and keep their digits. A data value as pivot can be
      // an outlier, sqrt(n) deviations away, and the float32 running mean then loses that factor.
      const T pivot = T(mean);
      const Moments ms = RowMoments<T, true>(x, n, pivot, NoJob{});
      var = ms.m2 * inv_n;
      mean = double(pivot) + ms.mean;
    }
    Moments mo2{0.0, 0.0, 0.0};  // row r + kLag
    double rstd;
    if (IsFinite(var) && IsFinite(mean) && var + eps >= TinyVar<T>()) {
      rstd = 1.0 / Sqrt(var + eps);
      const T rs = T(rstd);
      if (near) {
        mo2 = NormalizeAndNext<T, kW, kB, kStream, false>(next, n, x, y, a.weight, a.bias, T(0),
                                                          T(-mean * rstd), rs);
      } else {
        const T hi = T(mean);
        const T lo = T(mean - double(hi));
        mo2 = NormalizeAndNext<T, kW, kB, kStream, true>(next, n, x, y, a.weight, a.bias, hi,
                                                         T(-lo * rs), rs);
      }
    } else {
      ExactRow<T>(x, y, n, a.weight, a.bias, eps, &mean, &rstd);
      if (next) mo2 = RowMoments<T, false>(next, n, T(0), NoJob{});
    }
    if (a.mean) a.mean[r] = T(mean);
    if (a.rstd) a.rstd[r] = T(rstd);
    for (int k = 0; k + 1 < kLag; ++k) ahead[k] = ahead[k + 1];
    ahead[kLag - 1] = mo2;
  }
  if (kStream) Simd<T>::StreamFence();  // order the streamed y before whatever reads it next
}

template <class T, bool kStream>
void LayerNormRowsS(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  if (a.weight && a.bias) return LayerNormRowsT<T, true, true, kStream>(a, r0, r1);
  if (a.weight) return LayerNormRowsT<T, true, false, kStream>(a, r0, r1);
  if (a.bias) return LayerNormRowsT<T, false, true, kStream>(a, r0, r1);
  return LayerNormRowsT<T, false, false, kStream>(a, r0, r1);
}

template <class T>
void LayerNormRows(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  // Rows shorter than kStreamRowBytes stream badly: the partial cache lines at both ends of each
  // row, which take plain stores, would be a large share of its lines.
  const int64_t row_bytes = a.cols * int64_t(sizeof(T));
  const bool big = (r1 - r0) * row_bytes >= kStreamBytes && row_bytes >= kStreamRowBytes;
  if (a.stream && big && reinterpret_cast<uintptr_t>(a.y) % sizeof(T) == 0) {
    return LayerNormRowsS<T, true>(a, r0, r1);
  }
  return LayerNormRowsS<T, false>(a, r0, r1);
}

FASTLN_OPS_END
