// LayerNorm forward. Included by kernels-inl.h, once per ISA; see there.

FASTLN_OPS_BEGIN

// ---------------------------------------------------------------------------------------------
// Statistics in one read of the row: the sums of x - K and of its squares, kAcc independent
// accumulators of N lanes (the shifted-data algorithm; Chan, Golub, LeVeque), with K = 0 on the
// first pass (kShift false: an add and an FMA a vector).
// var = (sum (x-K)^2 - (sum (x-K))^2 / n) / n loses to cancellation the share of the squares that
// (mean - K)^2 makes up, so rows whose mean lies more than kPivot standard deviations from zero
// are summed again with K = that mean (kShift, see LayerNormRowsT): a sub more a vector, and the
// row read again, from L1 when it fits. Far from zero (x ~ 1e6 +- 1) x - K is then exact in T
// (Sterbenz), so the mean K + sum(x-K)/n keeps all its digits even in float32 (torch's float32
// Welford mean loses ~0.06 there).
//
// Not Welford's recurrence: its step is a chain of four dependent operations (sub, fma, sub, fma),
// and with kAcc chains in flight a row's statistics were bound by that latency, not by the FP
// ports. Measured (float32, 1 thread, out=, Welford and these sums, builds alternating, best
// rounds of one run): 128x1024 22.9 -> 19.6 us, 8x16384 25.1 -> 23.8 us. The sums with a pivot on
// every row (the mean of its first values) ran 21.0 and 24.2 us where Welford ran 22.9 and 23.7:
// the subtraction costs more than the rare second pass.
//
// The values come from `src` (RowOf: a stored row, in any storage format; SumOf: the fused
// residual add, which also writes h).
//
// `job` is another row's normalize pass, run block by block inside the same loop (job.Block(i)
// after the block of values from i, job.Rest() for what is left). The statistics keep the FP
// pipes busy and the normalize pass the load and store ports: interleaved, each hides much of the
// other's cost. NoJob runs the statistics alone.
constexpr int kAcc = 4;

template <class T>
constexpr int64_t kBlockOf = int64_t(kAcc) * Simd<T>::N;

// The kAcc accumulators added as a tree, not a chain: two additions on the latency path.
template <class S>
FASTLN_INLINE typename S::V AddAcc(const typename S::V *v) {
  static_assert(kAcc == 4, "a tree of four");
  return S::Add(S::Add(v[0], v[1]), S::Add(v[2], v[3]));
}

// How far (in standard deviations) a row's mean may lie from the first pass's pivot, zero, before
// the row is summed again about its mean: the variance then loses at most one bit to cancellation.
constexpr double kPivot = 1.0;

struct NoJob {
  template <bool = true>
  void Block(int64_t) const {}
  void Rest() const {}
};

// RowMoments' blocks (the sums about zero) for rows read by RealignedRowOf (RotatedSumsOf), which
// start h values past an aligned vector (AVX2: h = N / 2; AVX-512: any h), from aligned loads
// alone. Aligned vector m holds the upper h lanes of the row's vector m - 1 in its lanes [0, h)
// and the lower N - h of its vector m in [h, N). Accumulator a is kept rotated, in R[a]: lanes
// [h, N) hold a's lanes [0, N - h), lanes [0, h) hold a - 1's upper h; adding aligned vector m to
// R[m % kAcc] then adds every value to the lane it has in RowMoments' other loop, in the same
// order: the same sums, bit for bit (the zeros they start from give +0 where a lane adds only -0,
// and the mean's + 0 makes any zero +0). JoinAt puts the accumulators back at each fold of kChunk
// blocks, which takes only the lanes [0, h) of the block's last aligned vector, and at the end.
// Each aligned vector is loaded once, with no permute in the loop. RealignedRowOf's Load took a
// permute a vector, and GCC loaded most aligned vectors twice (once more as the permute's memory
// operand; callgrind's listing of the loop), 8 loads a block where aligned rows take 4. Measured
// on an AMD EPYC (Zen 5) guest, libfastln through ctypes, weight and bias, 1 thread, both builds
// in one process, best of 15 rounds (x,y,w,b offsets in bytes; permutes -> rotated): AVX2 float32
// 128x768 at 16,16,16,16 11.78 -> 10.10 us, at 48,16,16,48 12.07 -> 10.06 (aligned 9.80 and
// 9.46), 128x1024 15.99 -> 14.30, 256x1536 45.19 -> 39.31; float64 (11 rounds) 128x768 22.97 ->
// 20.46, 64x272 4.39 -> 3.99. AVX-512 float32 (2026-12-04): 128x1024 at 16,16,16,16 12.21 ->
// 11.91, at 48,16,16,48 13.75 -> 13.21, 256x1536 39.05 -> 37.36 and 42.32 -> 38.69, 2048x768
// 162.30 -> 153.24 at 48,16,16,48; 128x768 and 1024x768 within 2%. There, a test of h at run time
// that sent rows on a vector's boundary to the other loop made 1024x768 and 2048x768 (x from L3)
// 1.4x slower at 16,16,16,16 (74.7 -> 103.6 and 146.7 -> 207.2 us): such rows take this loop too.
template <bool kPrefetch, class Src, class Job>
FASTLN_INLINE void SumRotated(const Src &src, int64_t nblocks, const Job &job,
                             typename Src::S::V *ssum, typename Src::S::V *qsum, double *sd,
                             double *qd) {
  using S = typename Src::S;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int64_t kBlock = int64_t(kAcc) * N;
  const auto *const line = src.line;
  // A row on a vector's boundary (AVX-512 rows whose stride is not whole lines) is taken as one
  // that starts a whole vector past the aligned one before it: h = N, every aligned vector read
  // one later, and no first load (the one before the row may not be mapped).
  const int h = src.x == line ? N : int(src.x - line);
  const int64_t back = h == N ? N : 0;
  const auto idx = S::RealignIdx(h);
  auto load = [&](int64_t i) __attribute__((always_inline)) {
    return S::LoadAligned(line + (i - back));
  };
  V r[kAcc], rq[kAcc], u[kAcc];
  for (int a = 0; a < kAcc; ++a) r[a] = rq[a] = S::Zero();
  V Q = S::Zero();
  auto add = [&](int a, V v) __attribute__((always_inline)) {
    r[a] = S::Add(r[a], v);
    rq[a] = S::MulAdd(v, v, rq[a]);
  };
  auto join = [&](const V *from) __attribute__((always_inline)) {
    for (int a = 0; a < kAcc; ++a) u[a] = S::JoinAt(from[a], from[(a + 1) % kAcc], idx);
  };
  if (kPrefetch) src.Prefetch(0, kBlock);
  if (h < N) add(0, S::HighPart(S::LoadAligned(line), h));  // its lower lanes lie before the row
  for (int64_t j = 0; j < nblocks; ++j) {
    if (kPrefetch && j > 0) src.Prefetch(j * kBlock, kBlock);
    const int64_t p = j * kBlock;
    for (int a = 1; a < kAcc; ++a) add(a, load(p + a * N));
    V v = load(p + kBlock);  // its upper lanes are the next block's
    if (j + 1 == nblocks) v = S::LowPart(v, h);
    if (j % kChunk == 0 && j > 0) {  // where RowMoments' other loop folds
      const V lo = S::LowPart(v, h), hi = S::HighPart(v, h);
      rq[0] = S::MulAdd(lo, lo, rq[0]);
      join(rq);
      Q = S::Add(Q, AddAcc<S>(u));
      rq[0] = S::Mul(hi, hi);
      for (int a = 1; a < kAcc; ++a) rq[a] = S::Zero();
      if (j % kFoldBlocks == 0) {
        r[0] = S::Add(r[0], lo);
        join(r);
        *sd += S::ReduceSumDouble(AddAcc<S>(u));
        *qd += S::ReduceSumDouble(Q);
        Q = S::Zero();
        r[0] = S::Add(S::Zero(), hi);
        for (int a = 1; a < kAcc; ++a) r[a] = S::Zero();
      } else {
        r[0] = S::Add(r[0], v);
      }
    } else {
      add(0, v);
    }
    job.template Block<kPrefetch>(j * kBlock);
  }
  join(r);
  *ssum = AddAcc<S>(u);
  join(rq);
  *qsum = S::Add(Q, AddAcc<S>(u));
}

// The row's count, mean and sum of squared deviations, from sums about `pivot` (kShift) or zero.
template <bool kShift, class Src, class Job>
inline Moments RowMoments(const Src &src, int64_t n, typename Src::T pivot, const Job &job) {
  using T = typename Src::T;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int64_t kBlock = kBlockOf<T>;

  const int64_t nblocks = n / kBlock;
  const bool prefetch = src.Prefetches(n);
  const V vk = S::Set(pivot);
  // The value at i, less the pivot with kShift.
  auto load = [&](int64_t i) __attribute__((always_inline)) {
    return kShift ? S::Sub(src.Load(i), vk) : src.Load(i);
  };
  // The second pass, which runs on rows far from zero or with outliers, keeps them in double, so
  // that large squares do not swallow the small ones added after them: with float folds here,
  // the outlier test's row of 4097 values (the first two 59 and 38.5 from the rest's mean) was off
  // by 5.5e-6, over the 3e-6 it allows; it passes with these and the extra passes of
  // LayerNormRowsT, added together.
  double Qd = 0.0;
  double Sd = 0.0;     // the sums of the folds of kFoldBlocks blocks
  int64_t pos = 0;     // index of the next block
  V ssum = S::Zero(), qsum = S::Zero();
  if constexpr (!kShift && RotatedSumsOf<Src>::value) {
    // The block loops are compiled twice, with the prefetches (the statistics' and the job's) and
    // without, rather than testing them every block. Measured on an AMD EPYC (Zen 5) guest
    // (2026-12-04, libfastln through ctypes, weight and bias, out=, 1 thread, both builds in one
    // process, order alternating, best of 9 rounds; x, y, weight and bias 16, 16, 32 and 48 bytes
    // past a line, then on a line): callgrind, AVX2 128x768: 1512 -> 1316 instructions a row;
    // AVX2 float32 128x768 9.73 and 9.36 -> 9.26 and 9.19 us, 8.97 and 9.13 -> 8.73 and 8.56;
    // 128x1024 at 16 past 12.36 and 13.54 -> 12.70 and 13.47, on a line 12.09 and 12.93 -> 11.58
    // and 12.12; AVX-512 128x768 9.04 -> 8.74 and 6.83 -> 6.52; float64 128x512 on a line 12.06
    // -> 11.55; rows that prefetch (8x16384, 128x1536, 8192x1024) within 2%.
    if (nblocks > 0) {
      if (prefetch) {
        SumRotated<true>(src, nblocks, job, &ssum, &qsum, &Sd, &Qd);
      } else {
        SumRotated<false>(src, nblocks, job, &ssum, &qsum, &Sd, &Qd);
      }
    }
    pos = nblocks * kBlock;
  } else {
    // Per-lane sums of x - k and of its squares. Zeroed though every path that reads them
    // (nblocks > 0) sets them first: without it GCC warned that they may be used uninitialized, and
    // with it the code came out shorter (callgrind, 20 calls of 2048x100 float32 with AVX2: 12.98M
    // -> 12.32M instructions; 128x1024 and 8x16384 unchanged).
    V s[kAcc], q[kAcc];
    for (int a = 0; a < kAcc; ++a) s[a] = q[a] = S::Zero();
    V Q = S::Zero();     // the squares of the chunks done (see kChunk): one register, as a
                         // register per accumulator spilled the running sums across the fold
    // The loop once with the prefetches and once without (see SumRotated's kPrefetch).
    auto blocks = [&](auto pf) __attribute__((always_inline)) {
      constexpr bool kPf = decltype(pf)::value;
      if (nblocks > 0) {
        if (kPf) src.Prefetch(pos, kBlock);
        for (int a = 0; a < kAcc; ++a) {
          s[a] = load(a * N);
          q[a] = S::Mul(s[a], s[a]);
        }
        job.template Block<kPf>(0);
        pos = kBlock;
      }
      auto step = [&](int64_t j) __attribute__((always_inline)) {
        if (kPf) src.Prefetch(pos, kBlock);
        for (int a = 0; a < kAcc; ++a) {
          const V d = load(pos + a * N);
          s[a] = S::Add(s[a], d);
          q[a] = S::MulAdd(d, d, q[a]);
        }
        job.template Block<kPf>(j * kBlock);
        pos += kBlock;
      };
      int64_t j = 1;
      for (; j + kChunk <= nblocks; j += kChunk) {
        for (int i = 0; i < kChunk; ++i) step(j + i);
        const V qc = AddAcc<S>(q);
        if (kShift) {
          Qd += S::ReduceSumDouble(qc);
        } else {
          Q = S::Add(Q, qc);
        }
        for (int a = 0; a < kAcc; ++a) q[a] = S::Zero();
        if ((j + kChunk - 1) % kFoldBlocks == 0) {
          Sd += S::ReduceSumDouble(AddAcc<S>(s));
          for (int a = 0; a < kAcc; ++a) s[a] = S::Zero();
          if (!kShift) {
            Qd += S::ReduceSumDouble(Q);
            Q = S::Zero();
          }
        }
      }
      for (; j < nblocks; ++j) step(j);
    };
    if (prefetch) {
      blocks(std::true_type{});
    } else {
      blocks(std::false_type{});
    }
    if (nblocks > 0) {
      ssum = AddAcc<S>(s);
      qsum = S::Add(Q, AddAcc<S>(q));
    }
  }

  Moments total{0.0, 0.0, 0.0};
  if (nblocks > 0) {
    const double cnt = double(nblocks * kBlock);
    const double inv_cnt = 1.0 / cnt;  // off the row's latency chain, unlike a division by cnt
    const double sd = S::ReduceSumDouble(ssum) + Sd, q = S::ReduceSumDouble(qsum) + Qd;
    const double m2 = q - sd * sd * inv_cnt;
    // + 0 turns the mean of a row of -0 into +0, as the tail's sums (which start from +0) give: so
    // the result does not depend on how an ISA's blocks cut the row.
    total = Moments{cnt, sd * inv_cnt + 0.0, m2 < 0 ? 0.0 : m2};  // NaN stays
  }

  job.Rest();

  // The tail (fewer than kBlock values): its whole vectors, then the last few values one by one,
  // in two passes (sum, then squares about the tail's mean rounded to T, with the rounding
  // corrected by the sum of the deviations). A Welford chain here is latency-bound, ~12 cycles a
  // value, and with AVX-512 the tail holds up to 63 values: 2048x100 float32 ran 4.5x slower than
  // with AVX2 with such a chain, and 2x slower with the tail's vectors taken one value at a time.
  // Each value is read from src once (SumOf writes h as it reads) and kept for the second pass.
  const int64_t tail = n - nblocks * kBlock;
  if (tail > 0) {
    const double k = kShift ? double(pivot) : 0.0;
    const int nv = int(tail / N);  // < kAcc
    V tv[kAcc];
    V vs = S::Zero();
    for (int a = 0; a < nv; ++a) {
      tv[a] = load(pos + a * N);
      vs = S::Add(vs, tv[a]);
    }
    const int64_t vend = int64_t(nv) * N;
    double v[N] = {};  // zeroed for GCC, which warned (falsely) that it may be read unset
    double s = 0.0;
    for (int64_t j = vend; j < tail; ++j) {
      v[j - vend] = double(src.At(pos + j)) - k;
      s += v[j - vend];
    }
    const T tm = T((double(S::ReduceSumDouble(vs)) + s) / double(tail));
    const V vtm = S::Set(tm);
    V vq = S::Zero(), vd = S::Zero();
    for (int a = 0; a < nv; ++a) {
      const V d = S::Sub(tv[a], vtm);
      vd = S::Add(vd, d);
      vq = S::MulAdd(d, d, vq);
    }
    double q = double(S::ReduceSumDouble(vq)), ds = double(S::ReduceSumDouble(vd));
    for (int64_t j = vend; j < tail; ++j) {
      const double d = v[j - vend] - double(tm);
      ds += d;
      q += d * d;
    }
    const double cnt = double(tail);
    const double m2 = q - ds * ds / cnt;  // ds is tiny next to sqrt(q * cnt): no cancellation
    total = Merge(total, Moments{cnt, double(tm) + ds / cnt, m2 < 0 ? 0.0 : m2});  // NaN stays
  }
  if (kShift) total.mean = TwoSum(double(pivot), total.mean, &total.lo);
  return total;
}

// u * W + B for weight and bias vectors already loaded, with either or both absent.
template <bool kW, bool kB, class S>
FASTLN_INLINE typename S::V AffineV(typename S::V u, typename S::V W, typename S::V B) {
  if (kW && kB) return S::MulAdd(u, W, B);
  if (kW) return S::Mul(u, W);
  if (kB) return S::Add(u, B);
  return u;
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
// kStream writes y with non-temporal stores (see StreamY), whole cache lines only, two vectors a
// store for 16-bit y (StreamPair): the values up to the first line boundary of y and those after
// its last one get plain stores (a line written partly by each kind is slow). Block(i) then covers
// the kBlock values from i + head, when they fit in the row; Rest() writes whatever the blocks
// left.
//
// The normalize pass prefetches (see kPrefetchRowBytes) only rows of kPrefetchNormalizeBytes or
// more. It reads row r's x one or two rows (LagOf) after the statistics read it, and shorter rows
// are still in L1 then, with weight and bias: the prefetches only took load slots. Measured (with
// two rows' lag) on an AMD EPYC (Zen 3, 32 KiB L1d) guest, C loop over the kernel, float32, 1
// thread, both builds in one process, best of 7 rounds, three runs: 128x768 16.1-16.9 -> 14.9-15.9
// us, 128x1024 21.1-23.2 -> 20.1-21.3 us; 512x1024, 128x1536, 1024x2048 within noise. In one run
// each: 2048x768 within noise, streamed y (8192x768, 8192x1024, 4096x1536, 32768x512, 2048x1024)
// from 3% slower to 8% faster.
constexpr int64_t kPrefetchNormalizeBytes = 8192;
static_assert(kPrefetchNormalizeBytes > kPrefetchNearRowBytes &&
                  kPrefetchNormalizeBytes >= kPrefetchRowBytes,
              "a row whose normalize pass prefetches prefetches its statistics (Block<false>)");

// y[0, k) = t[0, k), k < N. As a loop of native values GCC made it a call to memcpy, and around
// that call (two a row: the peel to x's or y's line and the row's end) the row's vector registers
// were spilled and reloaded; pieces of constant size are moves. Measured on an AMD EPYC (Zen 4)
// guest (2026-12-04, libfastln through ctypes, both builds in one process, AVX2, float32, weight
// and bias, x, y, weight and bias 16 bytes past a line, best of 21 rounds, three runs, new / old
// time): 128x768 0.94-0.96, 128x1024 0.93-0.95, 2048x768 0.96-0.98; callgrind at 128x768 1457 ->
// 1421 instructions a row, memcpy's own included. The same bits.
template <int N, class T>
FASTLN_INLINE void CopyFew(T *y, const T *t, int64_t k) {
  int64_t j = 0;
  auto piece = [&](auto size) __attribute__((always_inline)) {
    constexpr int C = decltype(size)::value;
    if (C < N && (k & C)) {
      __builtin_memcpy(y + j, t + j, C * sizeof(T));
      j += C;
    }
  };
  static_assert(N <= 16, "pieces of 8, 4, 2 and 1 cover k < 16");
  piece(std::integral_constant<int, 8>{});
  piece(std::integral_constant<int, 4>{});
  piece(std::integral_constant<int, 2>{});
  piece(std::integral_constant<int, 1>{});
}

template <class St, bool kW, bool kB, bool kSplit, bool kStream, bool kPeel = false>
struct Normalizer {
  using T = typename St::T;
  using E = typename St::E;
  using S = Simd<T>;
  using V = typename S::V;
  static constexpr int N = S::N;
  static constexpr int64_t kLine = 64 / sizeof(E);  // values per cache line

  const E *x;
  E *y;
  int64_t n;
  const T *w, *b;
  T hi, c, rstd;
  V vhi, vr, vc;
  bool prefetch;         // long rows: see kPrefetchNormalizeBytes
  int64_t head;          // values before the blocks: to y's first line (kStream) or PeelTo's, or 0
  mutable int64_t done;  // y[0, done) written

  Normalizer(const E *x_, E *y_, int64_t n_, const T *w_, const T *b_, T hi_, T c_, T rstd_)
      : x(x_), y(y_), n(n_), w(w_), b(b_), hi(hi_), c(c_), rstd(rstd_),
        vhi(S::Set(hi_)), vr(S::Set(rstd_)), vc(S::Set(c_)),
        prefetch(n_ * int64_t(sizeof(E)) >= kPrefetchNormalizeBytes), head(0), done(0) {
    if (kStream) {
      const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(y) % 64) / int64_t(sizeof(E));
      head = Min(n, mis ? kLine - mis : 0);
      // A partial line at the row's end takes plain stores, which read the line from memory
      // first, and the stores after them can wait for that read: start it now.
      // (32768x1024, y 16 bytes past a line boundary, as NumPy's arrays often are, 1 thread:
      // float32 18.6-18.7 -> 17.5 ms, float16 10.8-11.0 -> 9.2-9.5 ms, bfloat16 11.7-11.9 ->
      // 9.7-10.2 ms.)
      if (reinterpret_cast<uintptr_t>(y + n) % 64) __builtin_prefetch(y + n - 1, 1);
      Plain(0, head);
      done = head;
    }
  }

  // Blocks from the first line boundary of p (x or y) on, the values before it by Plain: from x's,
  // with the weight and bias copies of CongruentCopies, every load of the blocks stays within one
  // line; from y's, every store does (see NormalizeFromY). Only where Block and Rest write the
  // whole row (NormalizeAndNext), with plain stores, and on rows with a block after the peel.
  // kPeel: Block then checks that its values fit in the row.
  void PeelTo(const E *p) {
    static_assert(kPeel, "Block checks for the peel's overrun only with kPeel");
    const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(p) % 64) / int64_t(sizeof(E));
    if (kStream || mis == 0 || n < kLine + kBlockOf<T>) return;
    head = kLine - mis;
    Plain(0, head);
    done = head;
  }
  // y's values from x's, with weight and bias already loaded (W, B), so that rows taken together
  // can share those loads (PlainTwo) and load every x before their stores, which may alias it.
  FASTLN_INLINE V Value(V xi, V W, V B) const {
    return AffineV<kW, kB, S>(S::MulAdd(kSplit ? S::Sub(xi, vhi) : xi, vr, vc), W, B);
  }
  FASTLN_INLINE V Compute(int64_t i) const {
    return Value(St::Load(x + i), kW ? S::Load(w + i) : S::Zero(), kB ? S::Load(b + i) : S::Zero());
  }
  FASTLN_INLINE void One(int64_t i) const { St::StoreY(y + i, Compute(i)); }
  // Streamed: values [i, i + 2N), i on a line boundary of y.
  FASTLN_INLINE void Pair(int64_t i) const { St::StreamPair(y + i, Compute(i), Compute(i + N)); }
  // Values [i, end) with plain stores. Every value is computed by the same vector arithmetic
  // (FMA) wherever it falls, so that y does not depend on where the vectors start, that is on y's
  // alignment: the last partial vector is computed in full at a position inside the row and only
  // its lanes in [i, end) are kept. (In place, the lanes before i read values already replaced by
  // y; they are the ones dropped.) Rows shorter than a vector go scalar.
  void Plain(int64_t i, int64_t end) const {
    for (; i + N <= end; i += N) One(i);
    if (i >= end) return;
    if (n >= N) {
      const int64_t base = Min(i, n - N);
      T tmp[N];
      S::Store(tmp, Compute(base));
      if constexpr (St::kNative) {
        CopyFew<N>(y + i, tmp + (i - base), end - i);
      } else {
        for (; i < end; ++i) y[i] = St::FromT(tmp[i - base]);
      }
      return;
    }
    for (; i < end; ++i) {
      const T xi = St::ToT(x[i]);
      T u = (kSplit ? xi - hi : xi) * rstd + c;
      if (kW) u = u * w[i];
      if (kB) u = u + b[i];
      y[i] = St::FromT(u);
    }
  }
  // kBlockOf<T> values from i (+ head). kMayPrefetch false: the caller knows that prefetch is
  // false (rows that prefetch here prefetch their statistics too; PrefetchRow).
  template <bool kMayPrefetch = true>
  FASTLN_INLINE void Block(int64_t i) const {
    i += head;
    if (kMayPrefetch && prefetch) {
      PrefetchAhead(x + i, kBlockOf<T>);
      if (kW) PrefetchAhead(w + i, kBlockOf<T>);
      if (kB) PrefetchAhead(b + i, kBlockOf<T>);
    }
    // The block's values are all computed before any is stored, so that only a block's first
    // loads follow the previous block's stores. With y 16 to 64 bytes past x modulo 4 KiB (as
    // NumPy's allocations often leave it), 512x4096 float32 with streamed y took 830-848 us
    // through Python, against 542-618 us from 256 bytes on, which points to loads of x waiting on
    // stores of y that match them in the low 12 bits (this guest has no counters to show it).
    // Measured on an AMD EPYC (Zen 3) guest, C loop over the kernel, weight and bias, out=, 1
    // thread, both builds in one process, best of 9 rounds, x 16 and y 32 bytes past a 64-byte
    // boundary, two runs: float32 512x1024 139.6-141.8 -> 124.2-127.8 us, 2048x1024 539-543 ->
    // 486-489; float64 2048x768 743-745 -> 646-658, 512x4096 1297-1377 -> 1213-1229; 128x768 and
    // 128x1024 within 3%. Through Python, 512x4096 took 552-562 us at 16 to 64 bytes after it.
    if ((kStream || kPeel) && i + kBlockOf<T> > n) return;
    V v[kAcc];
    for (int a = 0; a < kAcc; ++a) v[a] = Compute(i + a * N);
    if (kStream) {
      static_assert(kAcc % 2 == 0, "a streamed block is whole pairs");
      for (int a = 0; a < kAcc; a += 2) St::StreamPair(y + i + a * N, v[a], v[a + 1]);
    } else {
      for (int a = 0; a < kAcc; ++a) St::StoreY(y + i + a * N, v[a]);
    }
    done = i + kBlockOf<T>;
  }
  // Values [done, n).
  void Rest() const {
    int64_t i = done;
    if (kStream) {
      const int64_t lines = i + (n - i) / kLine * kLine;
      for (; i + 2 * N <= lines; i += 2 * N) Pair(i);
      // A line of 16-bit values is a whole number of pairs (N <= 16); a native vector can be a
      // whole line (AVX-512 float), and an odd one is left.
      if constexpr (St::kNative) {
        for (; i < lines; i += N) St::StoreStream(y + i, Compute(i));
      }
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
template <class St>
inline void ExactRow(const typename St::E *x, typename St::E *y, int64_t n,
                     const typename St::T *w, const typename St::T *b, double eps,
                     double *mean_out, double *rstd_out) {
  using T = typename St::T;
  double s1, s2;
  if (!ExactScale<St>(x, y, n, &s1, &s2)) {
    *mean_out = __builtin_nan("");
    *rstd_out = __builtin_nan("");
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(St::ToT(x[i])) * s1 * s2;
  const double ms = sum / double(n);
  double ss = 0.0, comp = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(St::ToT(x[i])) * s1 * s2 - ms;
    ss += d * d;
    comp += d;
  }
  // Two-pass with the compensation term of the corrected two-pass algorithm (Chan, Golub, LeVeque),
  // which also corrects the mean: ms is sum / n rounded, and a constant row then has x != ms (with
  // eps = 0, y = (x - ms) / 0 came out -Inf beside a mean that was not x; now 0 / 0, NaN). The
  // correction cn stays apart from ms, since x * s - ms is exact where the row is nearly constant
  // and ms + cn, rounded, is not: rows of 1e200 and one value an ulp above gave y = 2.68 there and
  // 0 elsewhere (exact: 2.24 and -0.45), and rows of x ~ 1e153 (squares that overflow, so they
  // come here) lost 1e-6 of the standard deviation to that rounding.
  const double cn = comp / double(n);
  double vs = (ss - comp * cn) / double(n);
  if (vs < 0) vs = 0;  // rounding
  const double es = eps * s1 * s1 * s2 * s2;  // eps in the scaled units
  const double mean = (ms + cn) / s1 / s2;
  *mean_out = mean;
  if (!IsFinite(es)) {
    // The values are so small that eps * s^2 overflows: their variance is nothing next to eps.
    const double f = 1.0 / Sqrt(eps);
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(St::ToT(x[i])) - mean) * f;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = St::FromT(T(u));
    }
    *rstd_out = f;
    return;
  }
  // (x*s1*s2 - ms - cn) * f == (x - mean) * rstd. A row of equal values has vs == 0 exactly (each
  // x*s1*s2 - ms is the same few bits, and so are their sums), and where the values are large
  // eps * s^2 underflows: rstd is then 1 / sqrt(eps) itself (1e200 gave 0 / 0). Its factor
  // rstd / s can overflow there (rows of one value at 1e306: rstd 316, 1 / s = 2^1017), and
  // 0 * Inf gave NaN: the row's deviations are scaled back after rstd, not before, so that each
  // product stays in range and a constant row gives 0.
  if (vs == 0 && eps > 0) {
    const double rstd = 1.0 / Sqrt(eps);
    for (int64_t i = 0; i < n; ++i) {
      double u = (double(St::ToT(x[i])) * s1 * s2 - ms - cn) * rstd / s1 / s2;
      if (w) u *= double(w[i]);
      if (b) u += double(b[i]);
      y[i] = St::FromT(T(u));
    }
    *rstd_out = rstd;
    return;
  }
  const double f = 1.0 / Sqrt(vs + es);
  for (int64_t i = 0; i < n; ++i) {
    double u = (double(St::ToT(x[i])) * s1 * s2 - ms - cn) * f;
    if (w) u *= double(w[i]);
    if (b) u += double(b[i]);
    y[i] = St::FromT(T(u));
  }
  *rstd_out = s1 * (s2 * f);
}

// Rows whose |mean| is at most kNear standard deviations take the normalize pass in its short form,
// the others the split form (see Normalizer).
constexpr double kNear = 2.0;

// When a call streams y: StreamBytes (dispatch.cpp; defaults 2 MiB, 32 MiB for 16-bit y; on AMD
// CPUs 16 MiB for a call split across threads and 8 MiB for rows of kStreamLongRowBytes or more
// with weight or bias).
// Measured on a Sapphire Rapids guest with a large shared L3: float32 2 MiB and up 1.2-1.6x faster
// stores, 1 MiB 1.5x slower; again in a C loop, timed blocks of 8 to 300 calls (40 ms or more), y
// on a line boundary (2026-11-30): 2 MiB 1.1x faster streamed; from 6 to 16 MiB within 4% either
// way, but rows of 16 KiB or more at 8 MiB 1.12-1.15x slower; 24 MiB 1.02x faster, 32 MiB and
// more 1.2-1.8x. 16-bit y in the same C loop (timed blocks of 8 to 30 calls): float16 at 16 MiB
// (8192x1024) 5% slower streamed; at 32 MiB (16384x1024) float16 3.48 -> 3.06 ms and bfloat16
// 3.87 -> 3.60 ms, and at 64 MiB 11.6 -> 7.8 ms and 11.5 -> 8.5 ms. Not when the caller says y is
// fresh (FASTLN_Y_FRESH, args.stream false): the kernel has just zeroed those pages through the
// cache, and streaming over cached lines was 1.3x (huge pages) to 3x (4 KiB pages) slower than
// plain stores there. 16-bit y streams two vectors' values as one store (StreamPair).
constexpr int64_t kStreamRowBytes = 1024;
// Rows from which a layer norm with weight or bias streams only from a larger y on AMD CPUs
// (StreamPolicy::native_long in dispatch.cpp).
constexpr int64_t kStreamLongRowBytes = 16384;

// Rows of the whole call that rows [r0, r1) belong to (all threads'): what decides whether x and
// y stay in the caches.
template <class E, class T>
inline int64_t CallRows(const AddNormArgs<E, T> &a, int64_t r0, int64_t r1) {
  return a.call_rows > 0 ? a.call_rows : r1 - r0;
}

// From how large an x (the whole call's) the statistics pass of rows that prefetch (PrefetchRow)
// asks for x kFarAheadDistance ahead instead of kPrefetchBytes: x then comes from memory, not
// from L2 or L3, and 1 KiB ahead is too few lines in flight to cover its latency (inferred; this
// guest has no counters). Without the residual add only (not measured with it). Measured on an
// AMD EPYC (Zen 5, 1 MiB L2, 32 MiB L3) guest, 2026-12-03, through Python, float32, out=, weight
// and bias, 1 thread, one build with the distance read from the environment, processes
// alternating, each against np.multiply's floor in the same process, best of 7 rounds, two runs,
// time / floor at 1 KiB, 4 KiB and 8 KiB ahead (every prefetch of the kernel):
// - 24 MiB and more: 8192x768 1.55-1.63, 1.05-1.08, 0.86-0.93; 8192x1024 1.22-1.32, 0.85-1.02,
//   0.87-0.90; 32768x1024 1.01-1.08, 0.85-0.86, 0.68-0.69; 2048x4096 2.11-2.18, 1.28-1.39,
//   1.38-1.53.
// - 8 MiB, where x still fits in L3, 8 KiB lost: 512x4096 1.81-1.88, 1.77-1.88, 2.27-2.33;
//   1024x2048 1.59-1.71, 1.61-1.75, 2.18-2.25. 6 MiB (2048x768) within noise.
// Not measured on Intel CPUs or on Zen 3. Where PhasedBytes says so (AMD CPUs with an L1d of
// 32 KiB or less), one-thread calls in rows of kPhasedMinRowBytes to kPhasedMaxRowBytes take the phased loop
// instead (PhasedRows), which does not ask for x ahead at all.
constexpr int64_t kFarAheadBytes = int64_t(16) << 20;
constexpr int64_t kFarAheadDistance = 8192;

// Whether rows [r0, r1) take LayerNormRowsT's phased loop, each row's statistics and then its
// normalize pass, rather than the fused one: rows of float or double of kPhasedMinRowBytes to
// kPhasedMaxRowBytes, read from x (no residual add), in a call on one thread whose x is
// PhasedBytes() or more (measured in src/dispatch.cpp). Each value's arithmetic is the same in
// both loops; only the order of the passes and the prefetches differ.
constexpr int64_t kPhasedMinRowBytes = 2048, kPhasedMaxRowBytes = 4096;

template <class St, bool kRes>
inline bool PhasedRows(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                       int64_t r1) {
  if (kRes || !St::kNative) return false;
  const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
  const int64_t rows = CallRows(a, r0, r1);
  return row_bytes >= kPhasedMinRowBytes && row_bytes <= kPhasedMaxRowBytes && r1 - r0 == rows &&
         rows * row_bytes >= PhasedBytes();
}

// The first read of row r: the stored row x (kRealign: by RealignedRowOf), or with kRes the
// residual add that also writes h. Every later pass reads the rows where Later and LaterLd say: x,
// or h.
template <class St, bool kRes, bool kRealign = false>
struct FirstRead {
  using Src = typename std::conditional<kRealign, RealignedRowOf<St>, RowOf<St>>::type;
  using Args = AddNormArgs<typename St::E, typename St::T>;
  static Src Row(const Args &a, int64_t r, int64_t ahead = kPrefetchBytes) {
    return Src{a.x + r * a.ldx, ahead};
  }
  // How far ahead rows [r0, r1) of this call prefetch x (see kFarAheadBytes).
  static int64_t Ahead(const Args &a, int64_t r0, int64_t r1) {
    const int64_t bytes = CallRows(a, r0, r1) * a.cols * int64_t(sizeof(typename St::E));
    return bytes >= kFarAheadBytes ? kFarAheadDistance : kPrefetchBytes;
  }
  static const typename St::E *Later(const Args &a) { return a.x; }
  static int64_t LaterLd(const Args &a) { return a.ldx; }
};

template <class St>
struct FirstRead<St, true, false> {
  using Src = SumOf<St>;
  using Args = AddNormArgs<typename St::E, typename St::T>;
  static Src Row(const Args &a, int64_t r, int64_t = kPrefetchBytes) {
    return Src{a.x + r * a.ldx, a.res + r * a.ldr, a.h + r * a.ldh};
  }
  static int64_t Ahead(const Args &, int64_t, int64_t) { return kPrefetchBytes; }
  static const typename St::E *Later(const Args &a) { return a.h; }
  static int64_t LaterLd(const Args &a) { return a.ldh; }
};

// Statistics of row `next` (null: none), interleaved with the normalize pass of the current row.
// from_y: the normalize pass starts its blocks at y's line (NormalizeFromY), else at x's where the
// rows are read realigned.
template <class St, bool kW, bool kB, bool kStream, bool kSplit, bool kRealign, class Src>
inline Moments NormalizeAndNext(const Src *next, int64_t n, const typename St::E *x,
                                typename St::E *y, const typename St::T *w,
                                const typename St::T *b, typename St::T hi, typename St::T c,
                                typename St::T rstd, bool from_y) {
  using T = typename St::T;
  // Whether a row peels is known only at run time (from_y, x's place), so every plain-stored row's
  // Block checks that its values fit in the row (kPeel).
  Normalizer<St, kW, kB, kSplit, kStream, !kStream> job(x, y, n, w, b, hi, c, rstd);
  if constexpr (!kStream) {
    if (from_y) job.PeelTo(y);
    else if (kRealign) job.PeelTo(x);
  }
  if (next) return RowMoments<false>(*next, n, T(0), job);
  job.All();
  return Moments{0.0, 0.0, 0.0};
}

// Row r's normalize pass runs in the loop that computes the statistics of row r + lag (see
// RowMoments), lag being LagOf<St>(n) rows.
//
// Two rows ahead on rows shorter than kLagOneFrom: a row's cost is then the latency from its last
// statistics step to the rstd its normalize pass needs, and that chain has a whole row's work to
// hide in (measured when the statistics were Welford's recurrence, before short rows had their own
// pipeline: 512x64 f32 2.4 -> 2.2 ns per 8 floats).
//
// One row ahead on longer float and double rows, so that the normalize pass can read x back from
// L1: with two, three rows of x, a row of y and weight and bias no longer fit in a 32 KiB L1
// (float64 rows of 768 values: 36 KiB). Measured on an AMD EPYC (Zen 3) guest, C loop over the
// kernel, weight and bias, out=, 1 thread, both builds in one process, best of 11 rounds, two runs
// (two rows ahead -> one): float64 128x768 34.2-37.6 -> 28.2-31.9 us, 128x640 26.6-26.9 ->
// 24.7-25.5, 128x1000 54.1-54.4 -> 49.2-49.7, 256x520 44.2-44.6 -> 43.4-43.5, 128x512 19.1-19.6
// -> 19.0-19.4; float32 128x1536 35.3-35.9 -> 28.9-29.5, 128x1024 19.9-20.3 -> 19.0-19.3; with
// streamed y, float32 8192x1024 2536-2600 -> 2312-2367, 4096x1536 1710-2060 -> 1621-2060,
// 1024x2048 478-511 -> 474-477, 2048x1024 423-433 -> 421-455. On shorter rows one row ahead was
// slower: float32 2048x100 106.8-106.9 -> 114.2-115.1 us, 1024x200 64.2-64.7 -> 74.4-74.6,
// 512x520 52.8-53.9 -> 55.9-56.3, 256x768 30.2-30.5 -> 30.9-31.3; float64 2048x100 109.0-110.4 ->
// 123.2-125.9, 512x300 56.0-56.3 -> 58.1-59.1.
//
// Rows of 16 KiB or more, whose x does not fit in L1 with either lag (they are prefetched), keep
// two: with one, 128x4096 (streamed y) ran 111.3-119.8 -> 110.4-134.4 us in four runs, 512x4096 and
// 256x4096 within 4% either way. So do 16-bit rows, where one row ahead won nothing: through
// Python, out=, 1 thread, one build with the lag switched at run time, alternating processes,
// three runs each (two -> one): float16 128x2048 37.4-37.8 -> 39.0-39.2 us, 256x2560 104.3-105.4
// -> 98.9-101.0, 128x3072 60.4-62.9 -> 59.8-60.9, 512x2048 159.5-169.0 -> 164.0-165.2; bfloat16
// 128x2048, 512x2048, 128x3072 and 256x2560 within 2%.
//
// Where three rows of x, one of y, weight and bias take at most half of L1 (rows of up to L1d / 12
// bytes), two rows ahead again: rows of 4 KiB with a 48 KiB L1. Measured on an AMD EPYC (Zen 5,
// 48 KiB L1d) guest, 2026-12-04, libfastln through ctypes, one build with the bound read from the
// environment, runs alternating, AVX2, weight and bias, out=, 1 thread, x, y, weight and bias 16
// bytes past a line, best of 9 rounds (5 from 2048x1024), two runs (one row ahead -> two): float32
// 128x1024 14.29-14.38 -> 13.17-13.63 us, 256x1024 29.03-29.35 -> 28.22-28.32, 512x1024
// 53.42-54.31 -> 48.63-49.86, 2048x1024 215.8-217.0 -> 195.0-202.0; float64 128x512 13.54-13.57
// -> 12.47-12.62, 1024x512 107.4-107.7 -> 99.5-102.7; 8192x1024 (streamed y) within 3%. Rows of
// 6 KiB (float32 128x1536) were within 1% either way with AVX2, 7% slower with AVX-512.
constexpr int kMaxLag = 2;
constexpr int64_t kLagOneFrom = 4096, kLagOneBelow = 16384;

template <class St>
inline int LagOf(int64_t n) {
  const int64_t bytes = n * int64_t(sizeof(typename St::E));
  if (!St::kNative || bytes < kLagOneFrom || bytes >= kLagOneBelow) return 2;
  return 12 * bytes <= L1dBytes() ? 2 : 1;
}

// A row far from the pivot (zero) is summed again about the last pass's mean. At a large offset the
// first pass's float sums give a mean good to a few standard deviations only on long rows with few
// lanes (65536 values at 1e6 +- 1 on the scalar ISA), so up to two more passes.
template <class St>
inline void SumAgain(const typename St::E *x, int64_t n, double inv_n, double *mean, double *var,
                     double *lo) {
  using T = typename St::T;
  double pivot = 0.0;
  *lo = 0.0;
  for (int pass = 0; pass < 3 && IsFinite(*mean) && IsFinite(*var) &&
                     !((*mean - pivot) * (*mean - pivot) <= kPivot * kPivot * *var);
       ++pass) {
    pivot = double(T(*mean));
    const Moments ms = RowMoments<true>(RowOf<St>{x}, n, T(pivot), NoJob{});
    *var = ms.m2 * inv_n;
    *mean = ms.mean;
    *lo = ms.lo;
  }
}

// The split form's low part of the mean, mean - hi with hi = T(mean), in double (the rows round it
// to T, the Fortran-order kernel scales it by rstd first). For double rows hi is the mean itself,
// and the part of the mean that a double does not hold (Moments' lo, after a pass about a pivot)
// is added, so that the mean's own rounding, half an ulp of the offset, does not show in y at large
// offsets: float64 1e15 + N(0,1), 768 values, max |y - exact| 1.9e-2 without it, 4.4e-16 with it
// (torch 5.2e-2, NumPy's two-pass 2.0e-2); 1e6 + N(0,1) 3.9e-11 -> 4.4e-16. float rows keep
// mean - hi alone: their double mean already holds all the digits they can use.
template <class T>
FASTLN_INLINE double MeanLo(double mean, double lo) {
  const double rest = mean - double(T(mean));
  if constexpr (sizeof(T) >= sizeof(double)) return rest + lo;
  return rest;
}

// Rows [r0, r1) stored in format St, one at a time: not in pairs that share each load of weight
// and bias, as the band loop and the short-row pipeline take them, since inside the statistics
// loop a pair needs more than AVX2's 16 vector registers (spilled, it was slower;
// docs/performance-notes.md).
// With kRes (a.res not null), each row's first read is the residual add: h = x + res is written
// once, while the statistics run on it, and every later pass (the shifted statistics, the
// normalize pass, the exact path) reads h, still in L1.
// Where PhasedRows says so, lag is 0: each row's statistics run alone, then its normalize pass.
template <class St, bool kRes, bool kW, bool kB, bool kStream, bool kRealign = false>
void LayerNormRowsT(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                    int64_t r1) {
  using T = typename St::T;
  using E = typename St::E;
  using First = FirstRead<St, kRes, kRealign>;
  const int64_t n = a.cols;
  const double eps = a.eps;
  const double inv_n = 1.0 / double(n);  // a division per row sits on the row's latency chain
  const E *xs = First::Later(a);
  const int64_t lds = First::LaterLd(a);
  if (r0 >= r1) return;
  const bool phased = PhasedRows<St, kRes>(a, r0, r1);
  const int lag = phased ? 0 : LagOf<St>(n);
  const int64_t dist = phased ? kPrefetchBytes : First::Ahead(a, r0, r1);
  // 16-bit rows start at x's line whatever the CPU: on the Xeon guest (family 6 model 167,
  // 2026-12-06, float16, 1 thread, best of 7 rounds, x and y each 0, 16, 32 or 48 bytes past a
  // line) from y's line they took 20.6-23.2 us at 128x1024 with weight and bias wherever y lay 16
  // or 48 bytes past a line (as glibc places the blocks it maps), 14.0-14.7 elsewhere, and from x's
  // 14.1-15.7 throughout; 2048x768 372-391 against 234-255 and 238-249 us; without weight and
  // bias 18.9-21.5 against 12.1-14.0 and 15.4-16.8 (docs/performance-notes.md). Why y's place
  // costs 16-bit rows so much was not found.
  const bool from_y = St::kNative && NormalizeFromY();
  Moments ahead[kMaxLag];  // statistics of rows r .. r + lag - 1
  for (int64_t k = 0; k < lag && r0 + k < r1; ++k) {
    ahead[k] = RowMoments<false>(First::Row(a, r0 + k, dist), n, T(0), NoJob{});
  }
  for (int64_t r = r0; r < r1; ++r) {
    const E *x = xs + r * lds;
    E *y = a.y + r * a.ldy;
    const bool has_next = lag > 0 && r + lag < r1;
    const typename First::Src next_src = First::Row(a, has_next ? r + lag : r, dist);
    const typename First::Src *next = has_next ? &next_src : nullptr;
    const Moments mo = lag > 0 ? ahead[0] : RowMoments<false>(next_src, n, T(0), NoJob{});
    double var = mo.m2 * inv_n;
    double mean = mo.mean;
    double mlo;
    SumAgain<St>(x, n, inv_n, &mean, &var, &mlo);
    const bool near = mean * mean <= kNear * kNear * var;
    Moments mo2{0.0, 0.0, 0.0};  // row r + lag
    double rstd;
    if (IsFinite(var) && IsFinite(mean) && var + eps >= TinyVar<T>()) {
      rstd = 1.0 / Sqrt(var + eps);
      const T rs = T(rstd);
      if (near) {
        mo2 = NormalizeAndNext<St, kW, kB, kStream, false, kRealign>(
            next, n, x, y, a.weight, a.bias, T(0), T(-mean * rstd), rs, from_y);
      } else {
        const T hi = T(mean);
        const T lo = T(MeanLo<T>(mean, mlo));
        mo2 = NormalizeAndNext<St, kW, kB, kStream, true, kRealign>(
            next, n, x, y, a.weight, a.bias, hi, T(-lo * rs), rs, from_y);
      }
    } else {
      ExactRow<St>(x, y, n, a.weight, a.bias, eps, &mean, &rstd);
      if (next) mo2 = RowMoments<false>(*next, n, T(0), NoJob{});
    }
    if (a.mean) a.mean[r] = T(mean);
    if (a.rstd) a.rstd[r] = T(rstd);
    if (lag > 0) {
      for (int k = 0; k + 1 < lag; ++k) ahead[k] = ahead[k + 1];
      ahead[lag - 1] = mo2;
    }
  }
  if (kStream) Simd<T>::StreamFence();  // order the streamed y before whatever reads it next
}

// ---------------------------------------------------------------------------------------------
// Long rows in column bands. A row of BandRowBytes() or more, with its weight, bias and y, is more
// than L1 holds, so the general loop above reads weight and bias from L2 again for every row: with
// x twice and y's read for ownership, five lines come from L2 for each line of y, where the floor
// (a multiply into y) takes two. Here a group of up to kBandRows rows takes its statistics first,
// row by row, then its normalize pass a band of columns at a time across the group, so that each
// band of weight and bias is read from L2 once a group. Each value goes through the same
// arithmetic as in the general loop (Normalizer::Plain), so y does not depend on the grouping.
// Streamed y takes them only in calls of kStreamBandBytes or more (StreamBands).
// Only with weight or bias: without them nothing is read once a group instead of once a row, and
// on a Sapphire Rapids Xeon guest the general loop was then faster (float32, 1 thread, C loop over
// the kernel, both builds in one process, best of 15 rounds: 8x16384 21.1 against 22.4 us, 32x4096
// 20.5 against 24.0, 64x2048 16.7 against 25.6). The row length from which they run is
// BandRowBytes(native) (dispatch.cpp: on AMD CPUs 8 KiB, float and double rows past L1d / 5 where
// that is more; on Intel CPUs 16 KiB, float and double rows only).
//
// A band is 4 KiB of the compute type T: 1024 values of float (and of 16-bit rows, computed in
// float), 512 of double. Double bands of 1024 values (8 KiB, so 16 KiB of weight and bias a band,
// half of Zen 3's L1) were slower. Measured on an AMD EPYC (Zen 3) guest, C loop over the
// kernel, float64, weight and bias, out=, 1 thread, both builds in one process, best of 11 rounds,
// three runs (1024 -> 512 values): 16x8192 51.8-52.5 -> 48.6-49.8 us, 64x2048 50.6-53.2 ->
// 47.3-49.0, 32x4096 61.7-67.0 -> 57.0-62.6, 8x16384 52.0-54.9 -> 49.3-54.0; 128x1024 (one run)
// 55.2 -> 50.5. For float, 512 values were up to 5% slower than 1024 in the same runs.
constexpr int kBandRows = 8;
template <class T>
constexpr int64_t kBandValuesOf = 4096 / int64_t(sizeof(T));

// The band loop asks for y's lines kBandPrefetchBytes before it stores to them (a plain
// prefetcht0 on x86: __builtin_prefetch's write hint becomes prefetchw only with -mprfchw). Each
// row's band of y is a fresh 4 KiB, and on the Xeon guest its stores missed: without the
// prefetches the bands were slower than the general loop at every shape. Measured there (C loop
// over the kernel, both builds and the general loop in one process, best of 15 rounds, two runs, 1
// thread, with weight and bias), general loop / bands / bands with these prefetches, float32:
// 8x16384 26.1-27.2 / 36.3-38.5 / 22.9-23.2 us, 16x8192 26.2-26.4 / 37.0 / 23.3, 32x4096 28.6-28.8
// / 44.1 / 25.5; but rows of 8 KiB still slower banded: 64x2048 20.4-21.1 / 38.2-39.5 / 25.1-25.8.
// float64: 8x16384 82.3 / 74.5 with them, 16x2048 13.5 / 12.0, 64x2048 81.0 / 71.8, and 128x1024 (8
// KiB rows) 61.0 / 65.9. Prefetching x too, 128 bytes ahead, was within 2% of this on float32 and
// 6% slower on float64 8x16384.
constexpr int64_t kBandPrefetchBytes = 256;

// y's lines kBandPrefetchBytes after y + i, once a line of progress: for the vector of y from i
// that starts in the first kStep bytes of a line (bands may start anywhere within one).
template <int64_t kStep, class E>
FASTLN_INLINE void PrefetchYAhead(E *y, int64_t i) {
  if (int64_t(reinterpret_cast<uintptr_t>(y + i) & 63) < kStep) {
    __builtin_prefetch(reinterpret_cast<const char *>(y + i) + kBandPrefetchBytes, 1);
  }
}

// Values [i, end) of one row, as Plain, prefetching y ahead.
template <class St, bool kW, bool kB, bool kSplit>
inline void PlainOne(const Normalizer<St, kW, kB, kSplit, false> &p, int64_t i, int64_t end) {
  constexpr int N = Simd<typename St::T>::N;
  constexpr int64_t kStep = N * int64_t(sizeof(typename St::E));
  for (; i + N <= end; i += N) {
    PrefetchYAhead<kStep>(p.y, i);
    p.One(i);
  }
  p.Plain(i, end);
}

// Values [i, end) of two rows in the same form, loading each vector of weight and bias once for
// both: with one row, a vector of y took three loads, against one in the floor's pass. The
// arithmetic of each value is Plain's, so y does not depend on the pairing.
template <class St, bool kW, bool kB, bool kSplit>
inline void PlainTwo(const Normalizer<St, kW, kB, kSplit, false> &p,
                     const Normalizer<St, kW, kB, kSplit, false> &q, int64_t i, int64_t end) {
  using S = Simd<typename St::T>;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int64_t kStep = N * int64_t(sizeof(typename St::E));
  for (; i + N <= end; i += N) {
    PrefetchYAhead<kStep>(p.y, i);
    PrefetchYAhead<kStep>(q.y, i);
    const V w = kW ? S::Load(p.w + i) : S::Zero(), b = kB ? S::Load(p.b + i) : S::Zero();
    const V xp = St::Load(p.x + i), xq = St::Load(q.x + i);
    St::StoreY(p.y + i, p.Value(xp, w, b));
    St::StoreY(q.y + i, q.Value(xq, w, b));
  }
  p.Plain(i, end);
  q.Plain(i, end);
}

// Streamed: values [i, end) of one row, or of two sharing each load of weight and bias, i and end
// on lines of y (the rows' y at the same place within a line): whole pairs of vectors, then one
// vector where a line is one (AVX-512 float) and the lines are odd. StreamTwo spells out PlainTwo's
// loads again: with a helper shared by both, GCC's PlainTwo made the plain bands 4-6% slower
// (float32 8x16384 and 128x4096, AVX2, two runs).
template <class St, bool kW, bool kB, bool kSplit>
inline void StreamOne(const Normalizer<St, kW, kB, kSplit, false> &p, int64_t i, int64_t end) {
  constexpr int N = Simd<typename St::T>::N;
  for (; i + 2 * N <= end; i += 2 * N) St::StreamPair(p.y + i, p.Compute(i), p.Compute(i + N));
  if (i < end) St::StoreStream(p.y + i, p.Compute(i));
}
template <class St, bool kW, bool kB, bool kSplit>
inline void StreamTwo(const Normalizer<St, kW, kB, kSplit, false> &p,
                      const Normalizer<St, kW, kB, kSplit, false> &q, int64_t i, int64_t end) {
  using S = Simd<typename St::T>;
  using V = typename S::V;
  constexpr int N = S::N;
  for (; i + 2 * N <= end; i += 2 * N) {
    const V w0 = kW ? S::Load(p.w + i) : S::Zero(), b0 = kB ? S::Load(p.b + i) : S::Zero();
    const V w1 = kW ? S::Load(p.w + i + N) : S::Zero(), b1 = kB ? S::Load(p.b + i + N) : S::Zero();
    const V p0 = St::Load(p.x + i), p1 = St::Load(p.x + i + N);
    const V q0 = St::Load(q.x + i), q1 = St::Load(q.x + i + N);
    St::StreamPair(p.y + i, p.Value(p0, w0, b0), p.Value(p1, w1, b1));
    St::StreamPair(q.y + i, q.Value(q0, w0, b0), q.Value(q1, w1, b1));
  }
  if (i < end) {
    const V w0 = kW ? S::Load(p.w + i) : S::Zero(), b0 = kB ? S::Load(p.b + i) : S::Zero();
    const V p0 = St::Load(p.x + i), q0 = St::Load(q.x + i);
    St::StoreStream(p.y + i, p.Value(p0, w0, b0));
    St::StoreStream(q.y + i, q.Value(q0, w0, b0));
  }
}

// Values [i, end) of the group's row k in the normalize form kSplit, and with `two` of row k + 1,
// in the same form, alongside it. The rows are read at xs, lds apart (FirstRead's Later: x or h).
// kStream: y's whole lines, [lo, hi), are streamed; the partial lines at both ends of each row
// take plain stores.
template <bool kSplit, class St, bool kW, bool kB, bool kStream>
inline void BandStep(const AddNormArgs<typename St::E, typename St::T> &a, const typename St::E *xs,
                     int64_t lds, int64_t r, bool two, const typename St::T *hi,
                     const typename St::T *c, const typename St::T *rs, int k, int64_t i,
                     int64_t end, int64_t lo, int64_t hi_end) {
  auto row = [&](int d) {
    return Normalizer<St, kW, kB, kSplit, false>(xs + (r + d) * lds, a.y + (r + d) * a.ldy, a.cols,
                                                 a.weight, a.bias, hi[k + d], c[k + d], rs[k + d]);
  };
  if constexpr (kStream) {
    const int64_t s0 = Min(Max(i, lo), end), s1 = Max(Min(end, hi_end), s0);
    const auto p = row(0);
    p.Plain(i, s0);
    if (two) {
      const auto q = row(1);
      q.Plain(i, s0);
      StreamTwo(p, q, s0, s1);
      q.Plain(s1, end);
    } else {
      StreamOne(p, s0, s1);
    }
    p.Plain(s1, end);
  } else {
    if (two) {
      PlainTwo(row(0), row(1), i, end);
    } else {
      PlainOne(row(0), i, end);
    }
  }
}

template <class St, bool kRes, bool kW, bool kB, bool kStream = false>
void LayerNormRowsBanded(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                         int64_t r1) {
  using T = typename St::T;
  using E = typename St::E;
  const int64_t n = a.cols;
  const double eps = a.eps, inv_n = 1.0 / double(n);
  const E *xs = FirstRead<St, kRes>::Later(a);
  const int64_t lds = FirstRead<St, kRes>::LaterLd(a);
  const int64_t dist = FirstRead<St, kRes>::Ahead(a, r0, r1);
  // The bands after the first start where the rows of x reach a vector's boundary, when they all
  // do at the same place (the first band is then the values before it), so that their loads of x
  // (and of y and weight, where those start as x does) stay within a line; each value's arithmetic
  // is the same wherever a band cuts the row. Measured on an AMD EPYC (Zen 5) guest, libfastln
  // through ctypes, weight and bias, 1 thread, both builds in one process, best of 15 rounds
  // (float64: 11), x, y, weight and bias 16 bytes past a line: AVX2 float32 8x16384 15.67 ->
  // 13.87 us, 128x4096 64.91 -> 59.83, 16x8192 16.52 -> 14.97, 64x2048 16.30 -> 15.83; float64
  // 8x16384 34.47 -> 31.90, 128x1024 34.42 -> 31.58, 16x4096 16.24 -> 14.82; AVX-512 float32
  // 8x16384 15.28 -> 13.61, 128x4096 65.06 -> 61.85. Rows on a line boundary 0.7-3.6% slower in
  // the same runs (AVX2), about this guest's noise.
  const bool same = (lds * int64_t(sizeof(E))) % int64_t(sizeof(typename Simd<T>::V)) == 0;
  int64_t first = St::kNative && same ? ValuesToVector<T>(xs, n) : 0;
  // Streamed (every row's y at the same place within a line): the bands after the first start on
  // lines of y instead, so that each is whole lines.
  int64_t lo = 0, hi_end = 0;
  if constexpr (kStream) {
    constexpr int64_t kLine = 64 / int64_t(sizeof(E));
    const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(a.y) % 64) / int64_t(sizeof(E));
    lo = Min(n, mis ? kLine - mis : 0);
    hi_end = lo + (n - lo) / kLine * kLine;
    first = lo;
  }
  // Per row of the group: 0 done (the exact path), 1 short form, 2 split form.
  int kind[kBandRows];
  T hi[kBandRows], c[kBandRows], rs[kBandRows];
  for (int64_t g0 = r0; g0 < r1; g0 += kBandRows) {
    const int rows = int(Min(int64_t(kBandRows), r1 - g0));
    for (int k = 0; k < rows; ++k) {
      const int64_t r = g0 + k;
      const E *x = xs + r * lds;
      const Moments mo = RowMoments<false>(FirstRead<St, kRes>::Row(a, r, dist), n, T(0), NoJob{});
      double var = mo.m2 * inv_n;
      double mean = mo.mean, mlo;
      SumAgain<St>(x, n, inv_n, &mean, &var, &mlo);
      double rstd;
      if (IsFinite(var) && IsFinite(mean) && var + eps >= TinyVar<T>()) {
        rstd = 1.0 / Sqrt(var + eps);
        rs[k] = T(rstd);
        if (mean * mean <= kNear * kNear * var) {
          kind[k] = 1;
          hi[k] = T(0);
          c[k] = T(-mean * rstd);
        } else {
          kind[k] = 2;
          hi[k] = T(mean);
          const T lo = T(MeanLo<T>(mean, mlo));
          c[k] = T(-lo * rs[k]);
        }
      } else {
        kind[k] = 0;
        ExactRow<St>(x, a.y + r * a.ldy, n, a.weight, a.bias, eps, &mean, &rstd);
      }
      if (a.mean) a.mean[r] = T(mean);
      if (a.rstd) a.rstd[r] = T(rstd);
    }
    for (int64_t i = 0, end; i < n; i = end) {
      end = Min(i == 0 && first > 0 ? first : i + kBandValuesOf<T>, n);
      for (int k = 0; k < rows; ++k) {
        if (kind[k] == 0) continue;
        const bool two = k + 1 < rows && kind[k + 1] == kind[k];
        if (kind[k] == 1) {
          BandStep<false, St, kW, kB, kStream>(a, xs, lds, g0 + k, two, hi, c, rs, k, i, end,
                                               lo, hi_end);
        } else {
          BandStep<true, St, kW, kB, kStream>(a, xs, lds, g0 + k, two, hi, c, rs, k, i, end,
                                               lo, hi_end);
        }
        if (two) ++k;
      }
    }
  }
  if (kStream) Simd<T>::StreamFence();
}

// ---------------------------------------------------------------------------------------------
// Short rows: from one vector to kShortVecs of them (float32 with AVX2: 8 to 128 values), the
// last one possibly partial (see ShortRowsT's nfull).
//
// On such rows the cost is not arithmetic but a latency chain: a row's statistics end in two
// reductions across lanes, a square root and a division, about 150 cycles (by the instructions'
// latencies) from its first load to the rstd its normalize pass needs. Instructions retire in
// order, so while that chain runs the reorder buffer (512 entries in a Sapphire Rapids core) fills
// with what follows: at 2048x64 the general loop (then with Welford's recurrence) ran 367
// instructions a row at 66 cycles a row, and a plain two-pass loop 240 instructions, no faster. So
// the work of a row is cut into stages, each run one row after the last in the same loop:
// iteration r sums row r + 3 (its values and their squares, about zero, as the general path's
// first pass), reduces row r + 2's sums, computes row r + 1's rstd and normalizes row r. Each
// stage's inputs are an iteration old, so no stage waits long and nothing holds up retirement.
// Measured (float32, 1 thread, out=, through Python, old and new builds alternating; with
// setup.py's -fno-wrapv), staged against the general loop: 2048x64 46.6 -> 34.6 us, 8192x64
// 231 -> 164 us, 32768x64 880 -> 713 us, 2048x128 75 -> 69 us.
//
// The stages take rows two at a time: the pair's reductions fold together (ReducePairs) and its
// means, variances and rstds are two-lane operations (simd/pair.h), and its normalize pass loads
// each vector of weight and bias once for both rows. Measured on an AMD EPYC (Zen 3) guest,
// float32, 1 thread, out=, C loop over the kernel with both builds in one process, best of 9-15
// rounds (one row a stage -> pairs): 2048x64 28.6-32.7 -> 24.2-29.3 us and 8192x64 133-183 ->
// 98-126 us (four runs), 4096x32 44-57 -> 35-44 us (three), 32768x64 549-700 -> 413-512 us (two);
// 2048x128 and 512x128 within noise. A standalone prototype of one row a stage with the folded
// reduction alone gained nothing, nor one with pairs whose statistics were reduced and finished
// one lane at a time.
//
// Rows whose mean lies more than kPivot standard deviations from zero, where the sums about zero
// lose digits, take a second pass from L1 in the reduce stage: the squared deviations from the
// first pass's mean, whose sum corrects both the mean and the variance (the corrected two-pass
// algorithm; Chan, Golub, LeVeque). Far from zero x minus that mean is exact for every x within a
// factor of two of it (Sterbenz), so those rows keep their digits (the tests hold them to the
// accuracy bar at offsets up to 1e6); rows beyond kNear standard deviations then take the split
// normalize form, out of line. Rows with NaN or Inf, or a variance that underflows, run the general
// path.
constexpr int64_t kShortVecs = 16;
constexpr double kMaxDouble = 1.7976931348623157e308;

// From how large a y (the whole call's), and from what row length, the short pipeline asks for
// the lines it will need ahead of the hardware: x kShortAheadDistance (at least two pairs of rows)
// ahead of its first read, and, unless y streams, y (for writing) two pairs closer to it. Without
// the residual add only; with it the first read has three arrays of its own. The arithmetic is the
// same either way. Measured on the AMD EPYC (Zen 3, 32 MiB L3) guest, 2026-12-03, C loop over the
// kernel, out=, weight and bias, x, y, weight and bias 16 bytes past a line, both builds in one
// process, best of 9 rounds, two runs, us, without and with (then 2 KiB ahead):
// - from 16 MiB of y, where x and y no longer fit in L3 together: float64 32768x64 2304 -> 1414
//   and 2254 -> 1384, float32 32768x128 2524 -> 1635 and 2309 -> 1386, 65536x64 1564 -> 1295 and
//   1554 -> 1393, 41943x100 1541 -> 1162 and 1625 -> 1184, float64 65536x32 1428 -> 1247 and
//   1536 -> 1270. On 2 threads float64 32768x64 1166 -> 699, float32 32768x128 1272 -> 755. With
//   y on a line boundary, streamed (x only): float64 32768x64 1745 -> 953 and 1757 -> 940,
//   float32 32768x128 2470 -> 1423 and 2366 -> 1328. float16 (its own C loop) 65536x128
//   2056 -> 1812 and 2775 -> 2231, 131072x128 4987 -> 3972 and 4992 -> 4520; bfloat16
//   131072x128 5777 -> 5481 and 5911 -> 5210.
// - rows of 128 bytes lost even there (float32 131072x32 1387 -> 1731, 1453 -> 1743), and so did
//   most shapes of 8 MiB (float32 32768x64 517 -> 640 and 472 -> 636, 20972x100 411 -> 533 and
//   435 -> 549, 65536x32 580 -> 857; float64 32768x32 423 -> 583, 20972x50 458 -> 551), where
//   the hardware's own prefetchers keep up with L3 (inferred; not counted). Rows of 512 bytes
//   gained at 8 MiB (float32 16384x128 811 -> 534, float64 16384x64 527 -> 504) but are left out
//   with the rest.
// - kShortAheadDistance: on the Zen 3 guest 1 KiB ahead lost to 2 KiB at float32 65536x64 (1469
//   against 1295, 1557 against 1393); 4 KiB and y one pair nearer or farther were within noise of
//   2 KiB there. On an AMD EPYC (Zen 5, 1 MiB L2, 32 MiB L3) guest (2026-12-03, through Python,
//   one build with the distance read from the environment, processes alternating, each against
//   np.multiply in the same process, best of 7 rounds, two runs, time / floor at 2 KiB and 8 KiB):
//   float32 32768x128 1.84-1.94 -> 1.30-1.35, 65536x64 1.47-1.54 -> 1.24-1.48, 41943x100
//   1.54-1.87 -> 1.69-1.76; float64 32768x64 1.74-1.94 -> 1.26-1.28, 65536x32 1.10-1.12 ->
//   1.03-1.06; on 2 threads (one run) float32 32768x128 1.06 -> 0.93 but 65536x64 0.79 -> 1.08.
//   So 8 KiB, which was not measured on the Zen 3 guest. On the Zen 5 guest, as on the Zen 3,
//   asking from 8 MiB lost (32768x64 1.63-1.78 -> 2.37-2.39).
// - A test of a run-time flag in the loop instead of a template parameter made float64 rows of
//   64 values 5-6% slower at sizes that never ask (2048x64 to 8192x64).
// Not measured on Intel CPUs, whose caches differ.
constexpr int64_t kShortAheadBytes = int64_t(16) << 20;
constexpr int64_t kShortAheadRowBytes = 256;
constexpr int64_t kShortAheadDistance = 8192;

// The cache lines of `rows` rows of `bytes` bytes, ld values apart, for reading or writing.
template <class E>
FASTLN_INLINE void PrefetchRows(const E *p, int64_t ld, int64_t rows, int64_t bytes, bool write) {
  for (int64_t k = 0; k < rows; ++k) {
    const char *q = reinterpret_cast<const char *>(p + k * ld);
    for (int64_t o = 0; o < bytes; o += 64) {
      if (write) {
        __builtin_prefetch(q + o, 1);
      } else {
        __builtin_prefetch(q + o, 0);
      }
    }
  }
}

// Whether every row of y is whole cache lines.
template <class St>
inline bool WholeLines(const AddNormArgs<typename St::E, typename St::T> &a) {
  constexpr int64_t kE = int64_t(sizeof(typename St::E));
  return (a.cols * kE) % 64 == 0 && (a.ldy * kE) % 64 == 0 &&
         reinterpret_cast<uintptr_t>(a.y) % 64 == 0;
}

// With `tail`, also rows that end in a partial vector (see ShortRowsT).
template <class St>
inline bool ShortRow(int64_t n, bool tail = false) {
  constexpr int64_t N = Simd<typename St::T>::N;
  return n >= N && (tail || n % N == 0) && n <= kShortVecs * N;
}

// A short row the pipeline's short form does not take, kept out of line, away from the hot loop.
// Far from zero, its two-pass statistics already have their digits (see above), so only the
// normalize pass takes the split form. Rows with NaN or Inf, or a variance that underflows, run
// the general path from scratch.
template <class St, bool kW, bool kB, bool kStream>
__attribute__((noinline)) void ShortRowAside(const AddNormArgs<typename St::E, typename St::T> &g,
                                             int64_t r, double eps, double mean, double var,
                                             double mlo) {
  using T = typename St::T;
  if (!(IsFinite(mean) && IsFinite(var) && var + eps >= TinyVar<T>())) {
    return LayerNormRowsT<St, false, kW, kB, kStream>(g, r, r + 1);
  }
  const double rstd = 1.0 / Sqrt(var + eps);
  const T rs = T(rstd), hi = T(mean), lo = T(MeanLo<T>(mean, mlo));
  Normalizer<St, kW, kB, true, kStream>(g.x + r * g.ldx, g.y + r * g.ldy, g.cols, g.weight, g.bias,
                                        hi, T(-lo * rs), rs)
      .All();
  if (g.mean) g.mean[r] = T(mean);
  if (g.rstd) g.rstd[r] = T(rstd);
}

// Row r's second pass in the short pipeline: the squared deviations from the first pass's mean,
// whose sum corrects both the mean and the variance (the corrected two-pass algorithm; Chan,
// Golub, LeVeque).
template <class St>
inline void ShortSecondPass(const typename St::E *x, int64_t n, int64_t nfull,
                            typename Simd<typename St::T>::V tail_mask, double inv_n, double *mean,
                            double *var, double *lo) {
  using T = typename St::T;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const T m = T(*mean);
  const V vm = S::Set(m);
  V e0 = S::Zero(), e1 = S::Zero(), q0 = S::Zero(), q1 = S::Zero();
  int64_t i = 0;
  for (; i + 2 * N <= nfull; i += 2 * N) {
    const V d0 = S::Sub(St::Load(x + i), vm), d1 = S::Sub(St::Load(x + i + N), vm);
    e0 = S::Add(e0, d0);
    e1 = S::Add(e1, d1);
    q0 = S::MulAdd(d0, d0, q0);
    q1 = S::MulAdd(d1, d1, q1);
  }
  if (i < nfull) {
    const V d = S::Sub(St::Load(x + i), vm);
    e0 = S::Add(e0, d);
    q0 = S::MulAdd(d, d, q0);
  }
  if (nfull < n) {
    const V d = S::Mul(S::Sub(St::Load(x + n - N), vm), tail_mask);
    e1 = S::Add(e1, d);
    q1 = S::MulAdd(d, d, q1);
  }
  const double es = double(S::ReduceSum(S::Add(e0, e1)));
  *mean = TwoSum(double(m), es * inv_n, lo);
  *var = (double(S::ReduceSum(S::Add(q0, q1))) - es * es * inv_n) * inv_n;
}

// The short form of the normalize pass on one short row or, kTwo, two, which then share each load
// of weight and bias. Two vectors a step: the compiler's own choice for this loop varied from
// build to build, at up to 4 instructions a vector. Streamed rows are whole lines (WholeLines):
// whole pairs, but for an odd native vector that is a line by itself (AVX-512 float). A row
// whose values end in a partial vector (nfull < n) ends with the vector that ends the row; it is
// computed before the row's other stores (in place they replace the values it reads) and stored
// after them, over lanes they wrote with the same values (same inputs, same lane arithmetic).
template <class St, bool kW, bool kB, bool kStream, bool kTwo>
FASTLN_INLINE void ShortNormalize(const typename St::E *x0, typename St::E *y0,
                                  const typename St::E *x1, typename St::E *y1, int64_t n,
                                  int64_t nfull, const typename St::T *w, const typename St::T *b,
                                  typename Simd<typename St::T>::V vr0,
                                  typename Simd<typename St::T>::V vc0,
                                  typename Simd<typename St::T>::V vr1,
                                  typename Simd<typename St::T>::V vc1) {
  using S = Simd<typename St::T>;
  using V = typename S::V;
  constexpr int N = S::N;
  auto put = [&](typename St::E *y, int64_t i, V u0, V u1) __attribute__((always_inline)) {
    if (kStream) {
      St::StreamPair(y + i, u0, u1);
    } else {
      St::StoreY(y + i, u0);
      St::StoreY(y + i + N, u1);
    }
  };
  auto one = [&](typename St::E *y, int64_t i, V u) __attribute__((always_inline)) {
    if constexpr (kStream && St::kNative) {
      St::StoreStream(y + i, u);
    } else {
      St::StoreY(y + i, u);
    }
  };
  const int64_t tb = n - N;
  V t0 = S::Zero(), t1 = S::Zero();
  if (nfull < n) {
    const V wt = kW ? S::Load(w + tb) : S::Zero(), bt = kB ? S::Load(b + tb) : S::Zero();
    t0 = AffineV<kW, kB, S>(S::MulAdd(St::Load(x0 + tb), vr0, vc0), wt, bt);
    if (kTwo) t1 = AffineV<kW, kB, S>(S::MulAdd(St::Load(x1 + tb), vr1, vc1), wt, bt);
  }
  int64_t i = 0;
  for (; i + 2 * N <= nfull; i += 2 * N) {
    const V w0 = kW ? S::Load(w + i) : S::Zero(), w1 = kW ? S::Load(w + i + N) : S::Zero();
    const V b0 = kB ? S::Load(b + i) : S::Zero(), b1 = kB ? S::Load(b + i + N) : S::Zero();
    put(y0, i, AffineV<kW, kB, S>(S::MulAdd(St::Load(x0 + i), vr0, vc0), w0, b0),
        AffineV<kW, kB, S>(S::MulAdd(St::Load(x0 + i + N), vr0, vc0), w1, b1));
    if (kTwo) {
      put(y1, i, AffineV<kW, kB, S>(S::MulAdd(St::Load(x1 + i), vr1, vc1), w0, b0),
          AffineV<kW, kB, S>(S::MulAdd(St::Load(x1 + i + N), vr1, vc1), w1, b1));
    }
  }
  if (i < nfull) {
    const V w0 = kW ? S::Load(w + i) : S::Zero(), b0 = kB ? S::Load(b + i) : S::Zero();
    one(y0, i, AffineV<kW, kB, S>(S::MulAdd(St::Load(x0 + i), vr0, vc0), w0, b0));
    if (kTwo) one(y1, i, AffineV<kW, kB, S>(S::MulAdd(St::Load(x1 + i), vr1, vc1), w0, b0));
  }
  if (nfull < n) {  // never streamed: such rows are not whole lines
    St::StoreY(y0 + tb, t0);
    if (kTwo) St::StoreY(y1 + tb, t1);
  }
}

// kTail, rows whose values end in a partial vector: their whole vectors [0, nfull), then the
// vector that ends the row, [n - N, n), whose lanes below nfull duplicate values already read and
// are zeroed for the statistics (Of). A template parameter, not a test of n: rows of whole vectors
// ran 4-8% slower with the tail's code in their loop (C loop over the kernel, float32 2048x64,
// 8192x64 and 512x64, three runs).
//
// Of(src): the last vector of a row's first read, [n - N, n) with the lanes below nfull zeroed:
// times mask (0 on those lanes, 1 on the rest), exact for finite values (a row with NaN or Inf, or
// whose squares overflow, goes aside whatever the mask makes of it). With the residual add, whose
// first read writes h (which may be x or the residual), the values from nfull on are read one at
// a time into a zeroed vector instead, so that no value is added and written twice. The two give
// the same means and variances, so the fused add is bit for bit the unfused one: the vectors
// differ only in the sign of zeroed lanes, which changes a sum only when it is zero, and a zero
// sum becomes a mean of +0 either way.
template <class St, bool kRes, bool kTail>
struct ShortTail {
  using T = typename St::T;
  using S = Simd<T>;
  using V = typename S::V;
  static constexpr int N = S::N;
  int64_t n, nfull;
  V mask = S::Zero();
  explicit ShortTail(int64_t cols) : n(cols), nfull(kTail ? cols / N * N : cols) {
    if (kTail) {
      T m[N];
      for (int k = 0; k < N; ++k) m[k] = T(k >= nfull + N - n ? 1 : 0);
      mask = S::Load(m);
    }
  }
  template <class Src>
  FASTLN_INLINE V Of(const Src &src) const {
    if constexpr (kRes) {
      T t[N];
      for (int k = 0; k < N; ++k) t[k] = T(0);
      for (int64_t i = nfull; i < n; ++i) t[i - (n - N)] = src.At(i);
      return S::Load(t);
    } else {
      return S::Mul(src.Load(n - N), mask);
    }
  }
};

// The sum of a short row's squares and, kSum, of its values, in ShortRowsT's stage 1 (and for
// kRms in RmsShortPlain). Rows of more than kOneChainVecs vectors take two chains of each, the
// row's vectors 1, 3, 5, ... in one and 0, 2, 4, ... and the partial last vector in the other,
// added at the end: with one chain a row, rows of 16 vectors waited on 16 dependent FMAs. Shorter
// rows keep one chain, in the order of stage 1's loop over two rows at once, which takes them
// (kept there: one loop a row cost float32 2048x64 4-5%; ShortSums' one chain serves
// RmsShortPlain, whose rows must have the pipeline's bits). Measured on an AMD EPYC (Zen 4) guest,
// libfastln through ctypes, both builds in one process, AVX2, 1 thread, new / old time:
// - rms_norm (2026-12-04, with weight, x and y 16 bytes past a line, best of 11 or 15 rounds):
//   float32 16384x128 0.52-0.63, 8192x128 0.84-0.85, 2048x128 0.89, 32768x100 0.84-0.85,
//   65536x128 (RmsShortPlain) 0.86-0.91, 512x100 0.98-1.01, 2048x96 1.01-1.04; float64 16384x64
//   0.60-0.66, 8192x64 0.86-0.90, 2048x64 0.86-0.93.
// - layer_norm (2026-12-05, weight and bias on a line, x and y 16 bytes past one, best of 11
//   rounds, two runs): float32 2048x128 0.88-0.89, 8192x128 0.78-0.85, 16384x128 0.51-0.60;
//   float64 2048x64 0.88-0.89, 8192x64 0.75-0.76, 512x64 0.95-0.98, 32768x64 0.95-1.01; rows of
//   12 vectors even (float32 512x100 and 2048x96, float64 2048x48: 0.99-1.02); AVX-512 float32
//   2048x256 0.89, 2048x160 0.95, 8192x200 0.60-0.67, float64 2048x128 0.90-0.91, 8192x100
//   0.59-0.64. Tried earlier on a Zen 3 guest for every short row (docs/performance-notes.md):
//   nothing at 8 vectors (float32 2048x64), 4-5% at 16 (2048x128).
constexpr int64_t kOneChainVecs = 8;

template <bool kSum, class St, bool kRes, bool kTail, class Src>
FASTLN_INLINE typename Simd<typename St::T>::V ShortSums(
    const Src &src, const ShortTail<St, kRes, kTail> &tail,
    typename Simd<typename St::T>::V *sum = nullptr) {
  using S = Simd<typename St::T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const int64_t nfull = tail.nfull;
  const V f = src.Load(0);
  V q0 = S::Mul(f, f), q1 = S::Zero(), s0 = f, s1 = S::Zero();
  int64_t i = N;
  if (nfull <= kOneChainVecs * N) {
    for (; i < nfull; i += N) {
      const V v = src.Load(i);
      if (kSum) s0 = S::Add(s0, v);
      q0 = S::MulAdd(v, v, q0);
    }
  } else {
    for (; i + 2 * N <= nfull; i += 2 * N) {
      const V u = src.Load(i), v = src.Load(i + N);
      if (kSum) {
        s1 = S::Add(s1, u);
        s0 = S::Add(s0, v);
      }
      q1 = S::MulAdd(u, u, q1);
      q0 = S::MulAdd(v, v, q0);
    }
    if (i < nfull) {
      const V u = src.Load(i);
      if (kSum) s1 = S::Add(s1, u);
      q1 = S::MulAdd(u, u, q1);
    }
  }
  if (kTail && nfull < tail.n) {
    const V v = tail.Of(src);
    if (kSum) s0 = S::Add(s0, v);
    q0 = S::MulAdd(v, v, q0);
  }
  if (kSum) *sum = S::Add(s0, s1);
  return S::Add(q0, q1);
}

// The short pipeline's arithmetic on a pair's statistics, shared with RmsShortPlain so that the
// two give a row the same bits. PairMoments (stage 2): the means and variances from the sums of
// the values and of their squares. ShortForm (stage 3): the rstds, and which rows (bit k: row k)
// the short form takes: those within kNear standard deviations of zero with a finite variance
// that does not underflow (every comparison is false for NaN).
FASTLN_INLINE void PairMoments(D2 e, D2 q, double inv_n, D2 *mean, D2 *var) {
  *mean = e * inv_n + 0.0;  // a row of -0 has mean +0, as in RowMoments
  *var = (q - e * *mean) * inv_n;
}

template <class T>
FASTLN_INLINE int ShortForm(D2 mean, D2 var, double eps, D2 *rstd) {
  const D2 ve = var + eps;
  const M2 ok = (mean * mean <= kNear * kNear * var) & (ve >= TinyVar<T>()) & (var <= kMaxDouble);
  *rstd = 1.0 / Sqrt2(ve);
  return Bits2(ok);
}

// The RMS norm's row that the short pipeline sends aside (kRms), in ops/rms_norm-inl.h.
template <class St, bool kW>
void RmsShortAside(const AddNormArgs<typename St::E, typename St::T> &g, int64_t r);

// kRms: the RMS norm's rows (ops/rms_norm-inl.h, RmsNormRowsOf), through the same stages: the
// sums of squares alone, a mean of zero (so no second pass and the short normalize form, with
// c = -0 * rstd = -0, whose x * rstd + c is x * rstd to the bit: ScaleRow's product), no bias and
// no mean written.
template <class St, bool kRes, bool kW, bool kB, bool kStream, bool kTail, bool kAhead,
          bool kRms = false>
void ShortRowsT(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0, int64_t r1) {
  using T = typename St::T;
  using E = typename St::E;
  using S = Simd<T>;
  using V = typename S::V;
  using First = FirstRead<St, kRes>;
  constexpr int N = S::N;
  const int64_t n = a.cols;
  const double eps = a.eps;
  const double inv_n = 1.0 / double(n);
  const E *xs = First::Later(a);
  const int64_t lds = First::LaterLd(a);
  const ShortTail<St, kRes, kTail> tail(n);
  const int64_t nfull = tail.nfull;
  const V tail_mask = tail.mask;
  auto tail_of = [&](const typename First::Src &src)
                     __attribute__((always_inline)) { return tail.Of(src); };
  // In locals: a vector store may alias anything (GCC's vector types are may_alias), so members
  // of `a` read after one are loaded again, every vector.
  const T *const w = a.weight, *const b = a.bias;
  E *const ys = a.y;
  const int64_t ldy = a.ldy;
  T *const mean_out = a.mean, *const rstd_out = a.rstd;
  // The general path for one row, reading it as now stored (h, with the residual already added).
  AddNormArgs<E, T> g = a;
  g.x = xs;
  g.ldx = lds;
  g.res = nullptr;

  // Pair p is rows r0 + 2p and r0 + 2p + 1; with an odd count the last pair is one row, whose
  // arithmetic is the same as in a pair (every lane operation is the row's own), so no row's
  // result depends on how the rows were split between threads.
  const int64_t pairs = (r1 - r0 + 1) / 2;
  const int64_t row_bytes = n * int64_t(sizeof(E));
  // kAhead: how many pairs ahead of its first read x is asked for (see kShortAheadBytes).
  const int64_t ahead = Max(2, (kShortAheadDistance + 2 * row_bytes - 1) / (2 * row_bytes));
  V sa = S::Zero(), qa = S::Zero(), sb = S::Zero(), qb = S::Zero();  // stage 1: pair p + 2's sums
  D2 mean3 = {0.0, 0.0}, var3 = {0.0, 0.0};  // stage 2: pair p + 1's mean and variance
  D2 lo3 = {0.0, 0.0}, lo4 = {0.0, 0.0};     // their means' low parts (Moments' lo)
  D2 mean4 = {0.0, 0.0}, var4 = {0.0, 0.0}, rstd4 = {0.0, 0.0};  // stage 3: pair p's,
  int fast4 = 0;  // and which of its rows (bit k: row k) the short form takes
  auto aside = [&](int64_t r, int k) {
    if constexpr (kRms) {
      RmsShortAside<St, kW>(g, r);
    } else {
      ShortRowAside<St, kW, kB, kStream>(g, r, eps, mean4[k], var4[k], lo4[k]);
    }
  };
  for (int64_t p = -3; p < pairs; ++p) {
    // Stage 4: normalize pair p.
    if (p >= 0) {
      const int64_t r = r0 + 2 * p;
      const bool two = r + 1 < r1;
      const D2 c4 = -mean4 * rstd4;
      const V vr0 = S::Set(T(rstd4[0])), vc0 = S::Set(T(c4[0]));
      const V vr1 = S::Set(T(rstd4[1])), vc1 = S::Set(T(c4[1]));
      const E *x = xs + r * lds;
      E *y = ys + r * ldy;
      if (fast4 == (two ? 3 : 1)) {
        if (two) {
          ShortNormalize<St, kW, kB, kStream, true>(x, y, x + lds, y + ldy, n, nfull, w, b, vr0,
                                                    vc0, vr1, vc1);
        } else {
          ShortNormalize<St, kW, kB, kStream, false>(x, y, x, y, n, nfull, w, b, vr0, vc0, vr0,
                                                     vc0);
        }
      } else {
        if (fast4 & 1) {
          ShortNormalize<St, kW, kB, kStream, false>(x, y, x, y, n, nfull, w, b, vr0, vc0, vr0,
                                                     vc0);
        } else {
          aside(r, 0);
        }
        if (two) {
          if (fast4 & 2) {
            ShortNormalize<St, kW, kB, kStream, false>(x + lds, y + ldy, x, y, n, nfull, w, b,
                                                       vr1, vc1, vr1, vc1);
          } else {
            aside(r + 1, 1);
          }
        }
      }
      // Aside rows wrote their own statistics.
      if (!kRms && mean_out) {
        if (fast4 & 1) mean_out[r] = T(mean4[0]);
        if (two && (fast4 & 2)) mean_out[r + 1] = T(mean4[1]);
      }
      if (rstd_out) {
        if (fast4 & 1) rstd_out[r] = T(rstd4[0]);
        if (two && (fast4 & 2)) rstd_out[r + 1] = T(rstd4[1]);
      }
    }
    // Stage 3: pair p + 1's rstd, and which of its rows take the short form (ShortForm).
    if (p + 1 >= 0 && p + 1 < pairs) {
      mean4 = mean3;
      var4 = var3;
      lo4 = lo3;
      fast4 = ShortForm<T>(mean3, var3, eps, &rstd4);
    }
    // Stage 2: pair p + 2's means and variances; for a row whose mean lies more than kPivot
    // standard deviations from zero, where the sums about zero lost digits, a second pass from
    // L1 (ShortSecondPass). Here in the pipeline, not out of line, so its latency overlaps the
    // other rows' stages (2048x64 at an offset of 10: 60 us out of line).
    if (p + 2 >= 0 && p + 2 < pairs) {
      D2 e, q;
      ReducePairs<S>(sa, qa, sb, qb, &e, &q);
      PairMoments(e, q, inv_n, &mean3, &var3);
      lo3 = D2{0.0, 0.0};
      const M2 near = mean3 * mean3 <= kPivot * kPivot * var3;
      if (!kRms && Bits2(near) != 3) {
        const int64_t r = r0 + 2 * (p + 2);
        for (int k = 0; k < 2 && r + k < r1; ++k) {
          double m = mean3[k], v = var3[k], l = 0.0;
          if (!near[k] && IsFinite(m) && IsFinite(v)) {
            ShortSecondPass<St>(xs + (r + k) * lds, n, nfull, tail_mask, inv_n, &m, &v, &l);
            mean3[k] = m;
            var3[k] = v;
            lo3[k] = l;
          }
        }
      }
    }
    // Stage 1: pair p + 3's sums, of the values and their squares (their first read: with kRes,
    // h = x + res is written here; kRms, the squares alone). Rows of up to kOneChainVecs vectors
    // one vector of each row a step, in four chains; longer rows one after the other, each in two
    // chains of each sum (ShortSums).
    if (p + 3 < pairs) {
      const int64_t r = r0 + 2 * (p + 3);
      if (kAhead) {
        const int64_t rx = r + 2 * ahead, ry = rx - 4;
        if (rx < r1) PrefetchRows(xs + rx * lds, lds, Min(2, r1 - rx), row_bytes, false);
        if constexpr (!kStream) {
          if (ry < r1) PrefetchRows(ys + ry * ldy, ldy, Min(2, r1 - ry), row_bytes, true);
        }
      }
      const typename First::Src s0 = First::Row(a, r);
      // kRms: sa and sb stay zero, so the reduce stage's means are +0.
      if (nfull > kOneChainVecs * N) {
        qa = ShortSums<!kRms>(s0, tail, &sa);
        sb = qb = S::Zero();
        if (r + 1 < r1) qb = ShortSums<!kRms>(First::Row(a, r + 1), tail, &sb);
        continue;
      }
      // The squares' one chain a row is ShortSums' arithmetic (the + 0 it ends with changes no
      // sum of squares).
      auto add = [](V &s, V v) __attribute__((always_inline)) {
        if (!kRms) s = S::Add(s, v);
      };
      const V f0 = s0.Load(0);
      if (!kRms) sa = f0;
      qa = S::Mul(f0, f0);
      if (r + 1 < r1) {
        const typename First::Src s1 = First::Row(a, r + 1);
        const V f1 = s1.Load(0);
        if (!kRms) sb = f1;
        qb = S::Mul(f1, f1);
        for (int64_t i = N; i < nfull; i += N) {
          const V v0 = s0.Load(i), v1 = s1.Load(i);
          add(sa, v0);
          add(sb, v1);
          qa = S::MulAdd(v0, v0, qa);
          qb = S::MulAdd(v1, v1, qb);
        }
        if (kTail && nfull < n) {
          const V v0 = tail_of(s0), v1 = tail_of(s1);
          add(sa, v0);
          add(sb, v1);
          qa = S::MulAdd(v0, v0, qa);
          qb = S::MulAdd(v1, v1, qb);
        }
      } else {
        for (int64_t i = N; i < nfull; i += N) {
          const V v0 = s0.Load(i);
          add(sa, v0);
          qa = S::MulAdd(v0, v0, qa);
        }
        if (kTail && nfull < n) {
          const V v0 = tail_of(s0);
          add(sa, v0);
          qa = S::MulAdd(v0, v0, qa);
        }
        sb = qb = S::Zero();
      }
    }
  }
  if (kStream) S::StreamFence();
}

template <class St, bool kRes, bool kStream, bool kTail, bool kAhead = false, bool kRms = false>
void ShortRowsW(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0, int64_t r1) {
  if constexpr (kRms) {
    if (a.weight) return ShortRowsT<St, kRes, true, false, kStream, kTail, kAhead, true>(a, r0, r1);
    return ShortRowsT<St, kRes, false, false, kStream, kTail, kAhead, true>(a, r0, r1);
  }
  if (a.weight && a.bias) {
    return ShortRowsT<St, kRes, true, true, kStream, kTail, kAhead>(a, r0, r1);
  }
  if (a.weight) return ShortRowsT<St, kRes, true, false, kStream, kTail, kAhead>(a, r0, r1);
  if (a.bias) return ShortRowsT<St, kRes, false, true, kStream, kTail, kAhead>(a, r0, r1);
  return ShortRowsT<St, kRes, false, false, kStream, kTail, kAhead>(a, r0, r1);
}

// Short rows: with kShortAheadBytes of y or more, in the form that asks for lines ahead (its
// arithmetic is the same).
template <class St, bool kRes, bool kStream, bool kTail>
void ShortRowsA(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0, int64_t r1) {
  if constexpr (!kRes) {
    const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
    if (row_bytes >= kShortAheadRowBytes && CallRows(a, r0, r1) * row_bytes >= kShortAheadBytes) {
      return ShortRowsW<St, kRes, kStream, kTail, true>(a, r0, r1);
    }
  }
  return ShortRowsW<St, kRes, kStream, kTail>(a, r0, r1);
}

// Weight and bias are copied (per thread, per call) to where they start at the same place within a
// line as every row of x, when those rows all do (with streamed y, and on Intel CPUs where
// NormalizeFromY says so: as every row of y), that is where the normalize pass's blocks start: each
// load of weight and bias then stays within one line. From kCongruentRows rows a thread, so that
// the copy costs the call little; rows of kCongruentBytes or less (longer ones go to the column
// bands on AMD CPUs). Measured in a C loop of the normalize pass alone (AVX-512, Zen 5 guest,
// 128x768, best of 31 rounds, two runs), x, y, weight and bias at 16, 16, 16, 16 bytes past a line:
// 6.44 and 6.66 -> 3.67 and 3.94 us; at 16, 48, 32, 48: 7.84 and 8.28 -> 4.61 and 6.23. With
// streamed y, and with x on a line, there were no copies at first: on the same guest (2026-12-04,
// libfastln through ctypes, float32, weight and bias, 1 thread, best of 6 or 7 rounds, order
// alternating; offsets of x, y, weight and bias), AVX-512 8192x1024 at 16,16,32,48 1210.6 -> 977.2
// us, 2048x1024 211.9 -> 190.8 (through Python, where NumPy put the arrays, AVX-512 had been 1.7x
// AVX2's time at 8192x1024 and is now even); AVX2 at 0,0,16,16 128x768 10.51 -> 9.79, 128x1024
// 13.83 -> 12.94, 8192x768 685.6 -> 648.5, other placements within 2.5%. Copies of rows up to 16
// KiB won nothing more (2048x4096 and 1024x4096 streamed: 0.97-1.08 of the time without).
constexpr int64_t kCongruentRows = 32, kCongruentBytes = 8192;

template <class T>
void CongruentCopies(AddNormArgs<T, T> *c, uintptr_t at) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  constexpr int64_t kStride = kCongruentBytes / int64_t(sizeof(T)) + kLine;  // whole lines
  alignas(64) static thread_local T buf[2 * kStride];
  const int64_t h = int64_t(at) / int64_t(sizeof(T));
  auto copy = [&](const T *src, T *dst) {
    if (!src || reinterpret_cast<uintptr_t>(src) % 64 == at) return src;
    for (int64_t i = 0; i < c->cols; ++i) dst[i] = src[i];
    return static_cast<const T *>(dst);
  };
  c->weight = copy(c->weight, buf + h);
  c->bias = copy(c->bias, buf + kStride + h);
}

// The general loop, for the weight and bias given.
template <class St, bool kRes, bool kStream, bool kRealign>
void LayerNormRowsWB(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                     int64_t r1) {
  if (a.weight && a.bias) return LayerNormRowsT<St, kRes, true, true, kStream, kRealign>(a, r0, r1);
  if (a.weight) return LayerNormRowsT<St, kRes, true, false, kStream, kRealign>(a, r0, r1);
  if (a.bias) return LayerNormRowsT<St, kRes, false, true, kStream, kRealign>(a, r0, r1);
  return LayerNormRowsT<St, kRes, false, false, kStream, kRealign>(a, r0, r1);
}

// Whether streamed rows take the column bands: rows with weight or bias of StreamBandRowBytes() or
// more (and no shorter than the plain bands'), y's rows all at the same place within a line, a
// call of kStreamBandBytes of y or more, on one thread. Elsewhere the general loop was as fast or
// faster with streamed y. Measured on an AMD EPYC (Zen 5, 32 MiB
// L3) guest (2026-12-04, libfastln through ctypes, one build with both loops, AVX2, float32, out=,
// weight and bias, 1 thread, order alternating, best of 5 rounds; x, y, weight and bias 16, 16,
// 32 and 48 bytes past a line, then on a line), general loop against bands, both streamed:
// 2048x4096 (32 MiB) 1464 and 1562 against 1358 and 1340 us, 1457 against 1380; 4096x4096 4006
// against 3080; but 16 MiB 1024x4096 496 against 533 and 256x16384 513 against 548, 8 MiB
// 128x16384 256 against 263, 512x4096 241 against 266; rows of 10 KiB 4096x2560 (40 MiB) 1280
// against 1771. From 16 KiB rows, one build against the one before (both builds in one process,
// best of 3 to 5 rounds), 16, 16, 32, 48: float32 2048x4096 1830 -> 1461 us, 512x16384 1758 ->
// 1340, 8192x4096 8577 -> 6361; float64 2048x2048 1479 -> 1314, 1024x4096 1436 -> 1301, 512x8192
// 1550 -> 1297; AVX-512 float32 2048x4096 1559 -> 1457, 512x16384 1720 -> 1402. On 2 threads it
// went either way (float32 2048x4096 741 -> 622 and 4096x4096 1941 -> 1523, but 512x16384 548 ->
// 575 and float64 2048x2048 on a line 505-522 -> 559-572, two runs), so calls split across threads
// keep the general loop.
constexpr int64_t kStreamBandBytes = int64_t(32) << 20;
// Rows of 8 KiB to 16 KiB took the general loop here until 2026-12-05, when on an AMD EPYC (Zen 4,
// 1 MiB L2, 32 MiB L3) guest they were 1.3-1.7x the floor in calls from DRAM where rows of 4 KiB
// and of 16 KiB came within 1.1x of it. libfastln through ctypes, both builds in one process,
// weight and bias, 1 thread, best of 5 rounds, us, general loop against bands, x and y 16 bytes
// past a line (each pair of runs in both orders): AVX2 float64 8192x1024 6960 -> 5445 and 6930 ->
// 5313, 4096x1536 5275 -> 4212, 16384x1024 13427 -> 11078; float32 8192x2048 7056 -> 5781 and
// 6965 -> 5507, 4096x2560 4235 -> 3564, 4096x3072 5603 -> 4259; AVX-512 float64 8192x1024 6843
// -> 5831, float32 4096x3072 5282 -> 4164; all on a line float64 8192x1024 8147 -> 6879; with
// the residual add float64 8192x1024 13131 -> 10014, float32 4096x2048 6417 -> 5033. Calls of 8
// to 16 MiB in such rows stayed faster in the general loop (float64 2048x1024 895 against 1803).
// On the Zen 5 guest (48 KiB L1d) rows of 10 KiB were faster in the general loop (above), so an
// L1d larger than 32 KiB keeps kStreamLongRowBytes.
constexpr int64_t kStreamBandRowBytes = 8192;

inline int64_t StreamBandRowBytes() {
  return L1dBytes() <= 32768 ? kStreamBandRowBytes : kStreamLongRowBytes;
}

template <class St>
inline bool StreamBands(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                        int64_t r1) {
  const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
  return r1 - r0 > 1 && r1 - r0 == CallRows(a, r0, r1) && (a.weight || a.bias) &&
         (a.ldy * int64_t(sizeof(typename St::E))) % 64 == 0 &&
         row_bytes >= Max(StreamBandRowBytes(), BandRowBytes(St::kNative)) &&
         CallRows(a, r0, r1) * row_bytes >= kStreamBandBytes;
}

template <class St, bool kRes, bool kStream>
void LayerNormRowsS(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                    int64_t r1) {
  if (ShortRow<St>(a.cols, true)) {
    // Rows that end in a partial vector are not whole lines, and never stream.
    if (a.cols % Simd<typename St::T>::N != 0) return ShortRowsA<St, kRes, false, true>(a, r0, r1);
    // Short rows stream only when every row is whole lines (ShortRowsT's stores do not split
    // lines); their arithmetic is the same either way, so y does not depend on where it lies.
    if (kStream && !WholeLines<St>(a)) return ShortRowsA<St, kRes, false, false>(a, r0, r1);
    return ShortRowsA<St, kRes, kStream, false>(a, r0, r1);
  }
  if (!kStream && r1 - r0 > 1 && (a.weight || a.bias) &&
      a.cols * int64_t(sizeof(typename St::E)) >= BandRowBytes(St::kNative)) {
    if (a.weight && a.bias) return LayerNormRowsBanded<St, kRes, true, true>(a, r0, r1);
    if (a.weight) return LayerNormRowsBanded<St, kRes, true, false>(a, r0, r1);
    return LayerNormRowsBanded<St, kRes, false, true>(a, r0, r1);
  }
  if constexpr (kStream && St::kNative) {
    if (StreamBands<St>(a, r0, r1)) {
      if (a.weight && a.bias) return LayerNormRowsBanded<St, kRes, true, true, true>(a, r0, r1);
      if (a.weight) return LayerNormRowsBanded<St, kRes, true, false, true>(a, r0, r1);
      return LayerNormRowsBanded<St, kRes, false, true, true>(a, r0, r1);
    }
  }
  if constexpr (St::kNative && !kRes) {
    using T = typename St::T;
    AddNormArgs<typename St::E, T> c = a;
    // The normalize pass's blocks start on a line of y where y streams or NormalizeFromY says so,
    // else where x's rows do.
    const bool from_y = kStream || NormalizeFromY();
    const T *lead = from_y ? a.y : a.x;
    const int64_t ld = from_y ? a.ldy : a.ldx;
    if ((a.weight || a.bias) && (ld * int64_t(sizeof(T))) % 64 == 0 && r1 - r0 >= kCongruentRows &&
        a.cols * int64_t(sizeof(T)) <= kCongruentBytes) {
      CongruentCopies(&c, reinterpret_cast<uintptr_t>(lead) % 64);
    }
    if constexpr (RealignOf<Simd<T>>::value) {
      if (RealignRows<St>(a)) return LayerNormRowsWB<St, kRes, kStream, true>(c, r0, r1);
    }
    return LayerNormRowsWB<St, kRes, kStream, false>(c, r0, r1);
  }
  return LayerNormRowsWB<St, kRes, kStream, false>(a, r0, r1);
}

// Whether a call writes y with non-temporal stores: y large (the whole call's, which is what
// decides whether x and y stay in the cache the threads share), in rows long enough (the partial
// cache lines at both ends of each row, which take plain stores, would otherwise be a large share
// of its lines) or short rows of whole lines, aligned to its element, and not in place.
//
// In place (y is x, or with the residual add y is x or the residual), every line of y has just
// been read into the cache, so a plain store skips nothing, and a non-temporal one has to push the
// cached line out first. Measured on an AMD EPYC (Zen 5) guest (2026-12-04, libfastln through
// ctypes, float32, weight and bias, 1 thread, best of 7 rounds, us, in place streamed against
// plain): 2048x768 209.8 against 131.6, 512x4096 424.9 against 187.1, 8192x1024 1062 against 838,
// 32768x1024 4263 against 3949, 16384x64 even (122.7 against 121.8).
template <class St>
inline bool StreamY(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                    int64_t r1) {
  const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
  const int64_t rows = CallRows(a, r0, r1);
  // The threshold for calls split across threads was measured without the residual add, whose
  // x, residual and h make its footprint twice as large: with it, 2 threads, plain stores won at
  // 1024x1024 (184.4 against 266.7 us) and lost at 2048x768 (345.4 against 315.0).
  const bool split = r1 - r0 < rows && !a.res;
  // The long-row rule is there for rows that plain stores send to the column bands: with the
  // bands set off (fastln_set_band_bytes) or starting later, such rows take the general loop
  // either way, streamed or not, and keep the size for other rows.
  const bool long_rows = row_bytes >= Max(kStreamLongRowBytes, BandRowBytes(St::kNative)) &&
                         (a.weight || a.bias);
  const bool in_place = a.y == a.x || (a.res && a.y == a.res);
  return !in_place && rows * row_bytes >= StreamBytes(St::kNative, split, long_rows) &&
         (row_bytes >= kStreamRowBytes || (ShortRow<St>(a.cols) && WholeLines<St>(a))) &&
         reinterpret_cast<uintptr_t>(a.y) % sizeof(typename St::E) == 0;
}

// Whether format St can stream y on this ISA. 16-bit y streams only where the ISA has a
// non-temporal store for it; elsewhere the streaming kernels would be copies of the plain ones.
template <class St>
constexpr bool CanStreamY() {
  if constexpr (St::kNative) {
    return true;
  } else {
    return St::S::kStreamPairs;
  }
}

// Layer norm of rows stored in format St, with the residual add when a.res is not null; `stream`
// false forbids non-temporal stores (the caller says y is fresh).
template <class St>
void LayerNormRowsOf(const AddNormArgs<typename St::E, typename St::T> &a, bool stream,
                     int64_t r0, int64_t r1) {
  if constexpr (CanStreamY<St>()) {
    if (stream && StreamY<St>(a, r0, r1)) {
      if (a.res) return LayerNormRowsS<St, true, true>(a, r0, r1);
      return LayerNormRowsS<St, false, true>(a, r0, r1);
    }
  }
  if (a.res) return LayerNormRowsS<St, true, false>(a, r0, r1);
  return LayerNormRowsS<St, false, false>(a, r0, r1);
}

// The table's entry for float and double rows.
template <class T>
void LayerNormRows(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  const AddNormArgs<T, T> b{a.x,    a.ldx,  nullptr, 0,      nullptr, 0,     a.y,    a.ldy,
                            a.weight, a.bias, a.mean, a.rstd, a.cols,  a.eps, nullptr, a.call_rows};
  LayerNormRowsOf<Native<T>>(b, a.stream, r0, r1);
}

FASTLN_OPS_END
