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
constexpr int64_t kFlushSteps = 32;

template <class T, int K, class VecTerm, class TailTerm>
inline void RowSums(int64_t n, VecTerm vec_term, TailTerm tail_term, double *out) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  static_assert(kAcc == 4, "the tree below adds four");
  constexpr int64_t kStep = int64_t(kAcc) * N;

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

// RowSums' sum of squares (K = 1) for rows read by RealignedRowOf (RotatedSumsOf), from aligned
// loads alone, with the accumulators kept rotated as in SumRotated (ops/layer_norm-inl.h): each
// square goes to the lane and in the order it has in RowSums, so the sum is the same, bit for bit.
// A flush takes lanes [0, h) of its last step's last aligned vector; lanes [h, N) start the next
// chunk.
template <class Src>
inline double SquaresRotated(const Src &src, int64_t n) {
  using S = typename Src::S;
  using V = typename S::V;
  constexpr int N = S::N;
  constexpr int64_t kStep = int64_t(kAcc) * N;
  const auto *const line = src.line;
  const int h = src.x == line ? N : int(src.x - line);  // see SumRotated
  const int64_t back = h == N ? N : 0;
  const auto idx = S::RealignIdx(h);
  const int64_t nsteps = n / kStep;
  V r[kAcc], u[kAcc];
  for (int a = 0; a < kAcc; ++a) r[a] = S::Zero();
  if (h < N) {
    const V v = S::HighPart(S::LoadAligned(line), h);  // its lower lanes lie before the row
    r[0] = S::Mul(v, v);
  }
  double out = 0.0;
  for (int64_t s0 = 0; s0 < nsteps; s0 += kFlushSteps) {
    const int64_t end = s0 + Min(nsteps - s0, kFlushSteps);
    for (int64_t t = s0; t < end; ++t) {
      const int64_t p = t * kStep - back;
      for (int a = 1; a < kAcc; ++a) {
        const V v = S::LoadAligned(line + (p + a * N));
        r[a] = S::MulAdd(v, v, r[a]);
      }
      const V v = S::LoadAligned(line + (p + kStep));
      if (t + 1 < end) {
        r[0] = S::MulAdd(v, v, r[0]);
      } else {
        const V lo = S::LowPart(v, h), hi = S::HighPart(v, h);
        r[0] = S::MulAdd(lo, lo, r[0]);
        for (int a = 0; a < kAcc; ++a) u[a] = S::JoinAt(r[a], r[(a + 1) % kAcc], idx);
        out += S::ReduceSumDouble(S::Add(S::Add(u[0], u[1]), S::Add(u[2], u[3])));
        r[0] = S::Mul(hi, hi);
        for (int a = 1; a < kAcc; ++a) r[a] = S::Zero();
      }
    }
  }
  for (int64_t i = nsteps * kStep; i < n; ++i) {
    const double v = double(src.At(i));
    out += v * v;
  }
  return out;
}

// From what row length the RMS norm reads rows that start past a vector's boundary as RealignRows
// says (SquaresRotated and ScaleRow's peel). Shorter rows ran 2-5% slower that way
// (float32 2048x64 and 8192x64, x 16 bytes past a line). Measured on an AMD EPYC (Zen 5) guest,
// libfastln through ctypes, with weight, 1 thread, both builds in one process, best of 21 rounds
// (11: float64, AVX-512), x, y and weight 16 bytes past a line, against the build where every
// such row took RealignedRowOf's permutes and an unaligned scaling pass: AVX2 float32 128x768
// 10.37 -> 9.62 us, 128x1024 13.25 -> 12.38, 256x1536 41.23 -> 35.21, and rows now under this
// (unaligned loads) 2048x64 24.61 -> 23.01, 512x200 14.48 -> 12.96; float64 128x768 20.74 ->
// 17.36, 128x1024 26.43 -> 22.47; AVX-512 float32 128x768 8.62 -> 7.79, 256x1536 38.25 -> 33.24,
// 2048x64 27.82 -> 26.69. Aligned rows within 1.3% either way.
constexpr int64_t kAlignRowBytes = 1024;

// y = x * rstd (* w), x and y stored in format St. kStream (native formats only; see
// RmsStreamY): y's whole lines take non-temporal stores, the values before its first line boundary
// and after its last plain ones (a line written partly by each kind is slow). kPeel: the vectors
// start at the first vector boundary of `peel` (x or y; null: at 0).
template <class St, bool kW, bool kPeel = false, bool kStream = false>
inline void ScaleRow(const typename St::E *x, typename St::E *y, int64_t n,
                     const typename St::T *w, typename St::T rstd,
                     const typename St::E *peel = nullptr) {
  using T = typename St::T;
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int N = S::N;
  const V vr = S::Set(rstd);
  auto value = [&](int64_t i) {
    V u = S::Mul(St::Load(x + i), vr);
    if (kW) u = S::Mul(u, S::Load(w + i));
    return u;
  };
  auto one = [&](int64_t i) { St::StoreY(y + i, value(i)); };
  auto scalar = [&](int64_t i) {
    T u = St::ToT(x[i]) * rstd;
    if (kW) u = u * w[i];
    y[i] = St::FromT(u);
  };
  // With kPeel and `peel` given, the vectors start at x's first vector boundary (rows RealignRows
  // takes, of kAlignRowBytes or more), so that no load of x crosses a line, or with AVX-512 on
  // Intel CPUs at y's (NormalizeFromY; rows of kAlignRowBytes or more), so that no store does; the
  // values before it one at a time (the same two roundings as a lane).
  int64_t i = 0;
  if constexpr (kStream) {
    static_assert(St::kNative && !kPeel, "streamed rows start their vectors at y's line");
    constexpr int64_t kLine = 64 / int64_t(sizeof(typename St::E));
    static_assert(kLine % N == 0, "a line is whole vectors");
    const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(y) % 64) / int64_t(sizeof(T));
    for (const int64_t h = Min(n, mis ? kLine - mis : 0); i < h; ++i) scalar(i);
    for (const int64_t lines = i + (n - i) / kLine * kLine; i < lines; i += kLine) {
      V v[kLine / N];
      for (int k = 0; k < kLine / N; ++k) v[k] = value(i + k * N);
      for (int k = 0; k < kLine / N; ++k) St::StoreStream(y + i + k * N, v[k]);
    }
  }
  if (kPeel && St::kNative && peel) {
    for (const int64_t h = ValuesToVector<T>(peel, n); i < h; ++i) scalar(i);
  }
  for (; i + 4 * N <= n; i += 4 * N) {
    one(i);
    one(i + N);
    one(i + 2 * N);
    one(i + 3 * N);
  }
  for (; i + N <= n; i += N) one(i);
  for (; i < n; ++i) scalar(i);
}

// The exact path, for rows the fast path cannot take: NaN or Inf in the row (the whole row becomes
// NaN), squares that overflow T, and mean squares so small next to eps that they may have
// underflowed. It scales the row by a power of two so that max |x| is near 1 and sums in double.
// Returns rstd in double.
template <class St>
inline double RmsExactRow(const typename St::E *x, typename St::E *y, int64_t n,
                          const typename St::T *w, double eps) {
  using T = typename St::T;
  double s1, s2;
  if (!ExactScale<St>(x, y, n, &s1, &s2)) return __builtin_nan("");
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(St::ToT(x[i])) * s1 * s2;
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
    double u = double(St::ToT(x[i])) * s1 * s2 * f;
    if (w) u *= double(w[i]);
    y[i] = St::FromT(T(u));
  }
  return s1 * s2 * f;
}

// y = x / sqrt(mean(x^2) + eps) * w: one read of the row for the sum of squares, one to scale it.
// With kRes that first read is the residual add (see FirstRead), and the scaling reads h. With
// kRealign (rows of kAlignRowBytes or more) the first read is by RealignedRowOf (same values; see
// RealignRows), by aligned loads alone (SquaresRotated).
template <class St, bool kRes, bool kW, bool kRealign = false, bool kStream = false>
void RmsNormRowsT(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                  int64_t r1) {
  using T = typename St::T;
  using E = typename St::E;
  using S = Simd<T>;
  using V = typename S::V;
  using First = FirstRead<St, kRes, kRealign>;
  const int64_t n = a.cols;
  const E *xs = First::Later(a);
  const int64_t lds = First::LaterLd(a);
  // Only where a vector is a line (AVX-512), whose every load or store crosses one when it is off
  // a line: with AVX2 on the Intel guest (see NormalizeFromY), without weight, 256x512 at 32,48 ran
  // 1.32-1.36x the floor from x's boundary and 1.42-1.49x from y's (three runs each).
  constexpr bool kLineVector = sizeof(V) == 64;
  const bool from_y = kLineVector && NormalizeFromY() && n * int64_t(sizeof(E)) >= kAlignRowBytes;
  for (int64_t r = r0; r < r1; ++r) {
    const typename First::Src src = First::Row(a, r);
    const E *x = xs + r * lds;
    E *y = a.y + r * a.ldy;
    double ss;
    if constexpr (RotatedSumsOf<typename First::Src>::value) {
      ss = SquaresRotated(src, n);
    } else {
      RowSums<T, 1>(
          n,
          [&src](int64_t i, V *acc) {
            const V v = src.Load(i);
            acc[0] = S::MulAdd(v, v, acc[0]);
          },
          [&src](int64_t i, double *out) {
            const double v = double(src.At(i));
            out[0] += v * v;
          },
          &ss);
    }
    const double ms = ss / double(n);
    double rstd;
    if (IsFinite(ms) && ms + a.eps >= TinyVar<T>()) {
      rstd = 1.0 / Sqrt(ms + a.eps);
      ScaleRow<St, kW, St::kNative && !kStream, kStream>(x, y, n, a.weight, T(rstd),
                                                          from_y ? y : kRealign ? x : nullptr);
    } else {
      rstd = RmsExactRow<St>(x, y, n, a.weight, a.eps);
    }
    if (a.rstd) a.rstd[r] = T(rstd);
  }
  if (kStream) S::StreamFence();  // order the streamed y before whatever reads it next
}

// A short row that the short pipeline's stages leave aside (NaN or Inf, squares that overflow, a
// mean square that may have underflowed): the loop above, which takes the exact path for it.
template <class St, bool kW>
void RmsShortAside(const AddNormArgs<typename St::E, typename St::T> &g, int64_t r) {
  RmsNormRowsT<St, false, kW>(g, r, r + 1);
}

// Whether an RMS norm of native rows without the residual add writes y with non-temporal stores:
// the layer norm's rule (StreamY), at the size it takes for long rows split across threads (on
// AMD CPUs 16 MiB) at every thread count. Measured on an AMD EPYC (Zen 4) guest (2026-12-04, with
// weight, streamed / plain time; libfastln through ctypes, both builds in one process, x, y and
// weight 16 bytes past a line, best of 5 or 7 rounds, two runs): 1 thread, float32 2 MiB
// (512x1024) 1.13-1.34, 4 MiB 1.07-1.13, 8 MiB (2048x1024) 0.95-0.99, 12 MiB 0.85-0.91, 16 MiB
// (4096x1024) 0.70-0.83, 32 MiB (2048x4096) 0.62-0.65; float64 2 MiB (512x512) 1.08-1.35, 8 MiB
// (1024x1024) 0.49-0.74, 16 MiB 0.45-0.54. 2 threads, from 16 MiB: float32 4096x1024 0.76-0.78,
// 8192x768 0.72, 8192x1024 0.68, 32768x1024 0.68, 2048x4096 0.60, 1024x4096 0.60-0.64; float64
// 512x4096 0.62, 2048x1024 0.63-0.67. Through Python (fastln.rms_norm, out=, 1 thread, streaming
// set on and off in turn, best of 7 or 9 rounds, two or three runs), 8 MiB lost: float32 2048x1024
// 1.03-1.17, 512x4096 1.00-1.10, float64 1024x1024 1.09-1.11; from 16 MiB it won (one run: float32
// 4096x1024 0.85, 8192x1024 0.72, 2048x4096 0.69; float64 2048x1024 0.52).
// The same bits streamed or not (the same lane arithmetic; values before y's first line
// boundary take the scalar form of it). Not measured on Intel CPUs.
template <class St>
inline bool RmsStreamY(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                       int64_t r1) {
  const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
  const int64_t rows = CallRows(a, r0, r1);
  return St::kNative && !a.res && a.y != a.x &&
         rows * row_bytes >= StreamBytes(St::kNative, true, true) &&
         row_bytes >= kStreamRowBytes &&
         reinterpret_cast<uintptr_t>(a.y) % sizeof(typename St::E) == 0;
}

// Short rows (ShortRow: AVX2 float, 8 to 128 values) in calls of less than kRmsShortPlainBytes
// take the layer norm's staged pipeline (ShortRowsT with kRms). In the loop above each row's sum
// of squares ends in a reduction across lanes, a conversion, a square root and a division, one row
// after another, and that latency chain, not the arithmetic, set the pace; the pipeline's stages
// overlap it, as they do for the layer norm's short rows. In larger calls, where x and y together
// fill L3, the pipeline was slower than the loop above (also when it asked for lines ahead), so
// they take RmsShortPlain, one row at a time with the pipeline's arithmetic: a row's bits do not
// depend on the size of the call.
//
// Measured on an AMD EPYC (Zen 4) guest, 2026-12-04, libfastln through ctypes, both builds in one
// process, AVX2, with weight, x and y 16 bytes past a line, best of 9 or 11 rounds, new / old time
// on 1 thread (2 threads): float32 2048x64 0.59-0.66 (0.62), 8192x64 0.52 (0.58), 32768x64
// 0.64 (0.61), 128x64 0.73 (0.69), 2048x128 0.82 (0.85), 8192x128 0.78-0.82, 512x100 0.53
// (0.51), 2048x16 0.36 (0.37), 8x64 0.99-1.06; float64 2048x64 0.89 (0.85), 8192x32 0.65 (0.70),
// 512x50 0.61 (0.68). Slower: float32 16384x128 (8 MiB) 1.32-1.43 (1.01), 32768x100 1.22
// (RmsShortPlain from 8 MiB, tried: 1.37 and 1.00, but 32768x64 1.14); from 16 MiB, with
// RmsShortPlain, float32 32768x128 1.00-1.17 (0.97), 131072x64 0.97-1.16 (0.94), float64 32768x64
// 0.99 (0.93). Those rows then had one chain of squares a row; ShortSums (layer_norm-inl.h) since
// gives rows of more than 8 vectors two, which made float32 16384x128 0.52-0.63 of that time.
//
// RmsShortPlain: ShortRowsT's stages for one row at a time, in order: ShortSums' chains a row,
// the pair reduction (ReducePairs, whose lanes for one row do not depend on the other's),
// PairMoments and ShortForm, ShortNormalize, and RmsShortAside for the same rows.
template <class St, bool kRes, bool kW, bool kTail>
void RmsShortPlain(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0, int64_t r1) {
  using T = typename St::T;
  using E = typename St::E;
  using S = Simd<T>;
  using V = typename S::V;
  using First = FirstRead<St, kRes>;
  const int64_t n = a.cols;
  const double eps = a.eps, inv_n = 1.0 / double(n);
  const E *xs = First::Later(a);
  const int64_t lds = First::LaterLd(a);
  const ShortTail<St, kRes, kTail> tail(n);
  const int64_t nfull = tail.nfull;
  AddNormArgs<E, T> g = a;
  g.x = xs;
  g.ldx = lds;
  g.res = nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    const V q = ShortSums<false>(First::Row(a, r), tail);
    D2 e, qq;
    ReducePairs<S>(S::Zero(), q, S::Zero(), S::Zero(), &e, &qq);
    D2 mean, var, rstd;
    PairMoments(e, qq, inv_n, &mean, &var);
    if (ShortForm<T>(mean, var, eps, &rstd) & 1) {
      const D2 c = -mean * rstd;
      const V vr = S::Set(T(rstd[0])), vc = S::Set(T(c[0]));
      ShortNormalize<St, kW, false, false, false>(xs + r * lds, a.y + r * a.ldy, xs + r * lds,
                                                  a.y + r * a.ldy, n, nfull, a.weight, nullptr,
                                                  vr, vc, vr, vc);
      if (a.rstd) a.rstd[r] = T(rstd[0]);
    } else {
      RmsShortAside<St, kW>(g, r);
    }
  }
}

constexpr int64_t kRmsShortPlainBytes = int64_t(16) << 20;

// Short rows of native values that stream y (RmsStreamY: AVX-512 rows of 1 KiB) take the pipeline
// with non-temporal stores where every row is whole lines (WholeLines), plain stores elsewhere: the
// same arithmetic either way, as for the layer norm's short rows.
template <class St, bool kRes, bool kTail>
void RmsShortRowsT(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0, int64_t r1,
                   bool stream) {
  if constexpr (St::kNative && !kRes && !kTail) {
    if (stream && RmsStreamY<St>(a, r0, r1) && WholeLines<St>(a)) {
      return ShortRowsW<St, false, true, false, false, true>(a, r0, r1);
    }
  }
  const int64_t row_bytes = a.cols * int64_t(sizeof(typename St::E));
  if (CallRows(a, r0, r1) * row_bytes < kRmsShortPlainBytes) {
    return ShortRowsW<St, kRes, false, kTail, false, true>(a, r0, r1);
  }
  if (a.weight) return RmsShortPlain<St, kRes, true, kTail>(a, r0, r1);
  return RmsShortPlain<St, kRes, false, kTail>(a, r0, r1);
}

// RMS norm of rows stored in format St, with the residual add when a.res is not null. Uses x, y,
// weight, rstd, cols and eps of the arguments (and res, h); bias and mean are ignored.
template <class St>
void RmsNormRowsOf(const AddNormArgs<typename St::E, typename St::T> &a, int64_t r0,
                   int64_t r1, bool stream = false) {
  if (ShortRow<St>(a.cols, true)) {
    const bool tail = a.cols % Simd<typename St::T>::N != 0;
    if (a.res) {
      if (tail) return RmsShortRowsT<St, true, true>(a, r0, r1, stream);
      return RmsShortRowsT<St, true, false>(a, r0, r1, stream);
    }
    if (tail) return RmsShortRowsT<St, false, true>(a, r0, r1, stream);
    return RmsShortRowsT<St, false, false>(a, r0, r1, stream);
  }
  if (a.res) {
    if (a.weight) return RmsNormRowsT<St, true, true>(a, r0, r1);
    return RmsNormRowsT<St, true, false>(a, r0, r1);
  }
  if constexpr (St::kNative) {
    if (stream && RmsStreamY<St>(a, r0, r1)) {
      if constexpr (RealignOf<Simd<typename St::T>>::value) {
        if (RealignRows<St>(a) && a.cols * int64_t(sizeof(typename St::E)) >= kAlignRowBytes) {
          if (a.weight) return RmsNormRowsT<St, false, true, true, true>(a, r0, r1);
          return RmsNormRowsT<St, false, false, true, true>(a, r0, r1);
        }
      }
      if (a.weight) return RmsNormRowsT<St, false, true, false, true>(a, r0, r1);
      return RmsNormRowsT<St, false, false, false, true>(a, r0, r1);
    }
  }
  if constexpr (RealignOf<Simd<typename St::T>>::value && St::kNative) {
    if (RealignRows<St>(a) && a.cols * int64_t(sizeof(typename St::E)) >= kAlignRowBytes) {
      if (a.weight) return RmsNormRowsT<St, false, true, true>(a, r0, r1);
      return RmsNormRowsT<St, false, false, true>(a, r0, r1);
    }
  }
  if (a.weight) return RmsNormRowsT<St, false, true>(a, r0, r1);
  return RmsNormRowsT<St, false, false>(a, r0, r1);
}

// The table's entry for float and double rows.
template <class T>
void RmsNormRows(const LayerNormArgs<T> &a, int64_t r0, int64_t r1) {
  const AddNormArgs<T, T> b{a.x,    a.ldx,  nullptr, 0,      nullptr, 0,     a.y,    a.ldy,
                            a.weight, a.bias, a.mean, a.rstd, a.cols,  a.eps, nullptr, a.call_rows};
  RmsNormRowsOf<Native<T>>(b, r0, r1, a.stream);
}

FASTLN_OPS_END
