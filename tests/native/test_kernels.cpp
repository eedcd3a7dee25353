// Native tests, no Python: every kernel of every ISA compiled into this build against a float64
// reference, plus dispatch (FASTLN_ISA) and the C API's status codes.
//
// Built and run by tests/native/run.sh, natively or cross-compiled for aarch64 and run under
// qemu-aarch64. Prints one line per failure and closes with "N passed, M failed"; exits non-zero on
// any failure.
//
// To cover a new kernel (a new field of KernelTable): write its reference (see RefNorm) and a check
// (see CheckForward, CheckBackward, CheckAddNorm), then add a FASTLN_KERNEL and a FASTLN_ENTRY
// line. A static_assert fails to compile until then, so no kernel goes untested here.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fastln/fastln.h"
#include "kernel_table.h"

using fastln::KernelTable;

namespace {

// ---------------------------------------------------------------------------------------------
// Reporting: each Expect is one test.

int g_passed = 0, g_failed = 0;

bool Expect(bool ok, const char *fmt, ...) {
  if (ok) {
    ++g_passed;
    return true;
  }
  ++g_failed;
  if (g_failed <= 200) {
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Inputs: x = c + s * N(0, 1), deterministic on every platform (our own generator and Box-Muller).

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return double((Next() >> 11) + 1) * 0x1p-53; }  // (0, 1]
  double Normal() { return sqrt(-2.0 * log(Uniform())) * cos(6.283185307179586 * Uniform()); }
};

template <class T>
std::vector<T> Gaussian(Rng &rng, int64_t n, double c, double s) {
  std::vector<T> v(n);
  for (auto &e : v) e = T(c + s * rng.Normal());
  return v;
}

// ---------------------------------------------------------------------------------------------
// Storage formats: what the kernels read and write, decoded to double for the references.

template <class T>
struct Native {
  using Bits = T;
  static constexpr const char *kName = sizeof(T) == 4 ? "f32" : "f64";
  static constexpr double kRel = 0;  // half an ulp of storage, relative, beyond the kernel's own
  static constexpr double kAbs = 0;  // half the smallest subnormal step of storage
  static double Dec(T v) { return double(v); }
  static T Enc(double v) { return T(v); }
};

// IEEE binary16. Enc truncates: it only makes inputs, whose values Dec then reads exactly.
struct F16 {
  using Bits = uint16_t;
  static constexpr const char *kName = "f16";
  static constexpr double kRel = 0x1p-11;
  static constexpr double kAbs = 0x1p-25;
  static double Dec(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1f) return m ? NAN : s * INFINITY;
    return s * (e ? ldexp(1024 + m, e - 25) : ldexp(m, -24));
  }
  static uint16_t Enc(double v) {
    if (v != v) return 0x7e00;
    const uint16_t sign = v < 0 ? 0x8000 : 0;
    const double a = fabs(v);
    if (a >= 65536.0) return sign | 0x7c00;
    if (a < 0x1p-14) return sign | uint16_t(a * 0x1p24);  // subnormal
    int e;
    const double f = frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    return sign | uint16_t((e + 14) << 10) | (uint16_t(f * 2048) & 0x3ff);
  }
};

struct BF16 {
  using Bits = uint16_t;
  static constexpr const char *kName = "bf16";
  static constexpr double kRel = 0x1p-8;
  static constexpr double kAbs = 0;  // bfloat16 has float32's range: no subnormal sums here
  static double Dec(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t Enc(double v) {
    const float f = float(v);
    uint32_t u;
    memcpy(&u, &f, 4);
    return (f != f) ? 0x7fc0 : uint16_t(u >> 16);
  }
};

// ---------------------------------------------------------------------------------------------
// Float64 references (long double for float64 kernels): two passes, obviously right.

template <class T>
using Acc = typename std::conditional<sizeof(T) == 4, double, long double>::type;

enum Op { kLayer, kRms };

// y = norm(x) * w + b; LayerNorm: (x - mean) * rstd, RMSNorm: x * rstd (mean reported as 0).
template <class P, class X>
void RefNorm(Op op, const X &x, int64_t n, const P *w, const P *b, double eps,
             std::vector<double> *y, double *mean, double *rstd) {
  using A = Acc<P>;
  A m = 0;
  if (op == kLayer) {
    for (int64_t i = 0; i < n; ++i) m += A(x(i));
    m /= A(n);
  }
  A ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (A(x(i)) - m) * (A(x(i)) - m);
  const A r = A(1) / sqrtl((long double)(ss / A(n) + A(eps)));
  y->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    A u = (A(x(i)) - m) * r;
    if (w) u *= A(w[i]);
    if (b && op == kLayer) u += A(b[i]);
    (*y)[i] = double(u);
  }
  *mean = double(m);
  *rstd = double(r);
}

// ---------------------------------------------------------------------------------------------
// The ISAs to test: those compiled in and usable on this CPU.

struct Isa {
  const char *name;
  const KernelTable *(*table)();
};
const Isa kIsas[] = {
    {"scalar", &fastln::table_scalar},
    {"avx2", &fastln::table_avx2},
    {"avx512", &fastln::table_avx512},
    {"neon", &fastln::table_neon},
};

// What this build must contain: an ISA silently missing (say NEON compiled out on aarch64) would
// otherwise leave its kernels untested while every check passes.
bool MustBeCompiled(const char *name) {
#if defined(__aarch64__)
  if (strcmp(name, "neon") == 0) return true;
#endif
#if defined(__x86_64__)
  if (strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0) return true;
#endif
  return strcmp(name, "scalar") == 0;
}

#if defined(__x86_64__)
// Whether this CPU and OS run the AVX-512 kernels (F, DQ, BW, VL), by GCC's own detection.
bool Avx512Runs() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
#endif

// The ISA dispatch should pick here, found independently of dispatch.cpp.
const char *ExpectedBest() {
#if defined(__aarch64__)
  return "neon";  // Advanced SIMD is mandatory in ARMv8-A
#elif defined(__x86_64__)
  // AVX-512 comes first on Intel cores with AVX512-FP16 and is opt-in elsewhere (see
  // dispatch.cpp's Avx512First); otherwise AVX2 when it runs.
  if (Avx512Runs() && __builtin_cpu_is("intel") && __builtin_cpu_supports("avx512fp16")) {
    return "avx512";
  }
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? "avx2" : "scalar";
#else
  return "scalar";
#endif
}

// ---------------------------------------------------------------------------------------------
// Tolerances, in units of the output (normalized values and gradients scaled to O(1)).

template <class P> double Tol() { return sizeof(P) == 4 ? 1e-5 : 1e-12; }  // float32: the bar

// Relative rounding of a value stored in P (two units in the last place).
template <class P> double Ulp() { return sizeof(P) == 4 ? 0x1p-23 : 0x1p-52; }

// How many units in the last place of the mean the outputs may be off by, in standard deviations.
// The float32 kernels keep the mean as a hi/lo pair, so its rounding costs nothing; the float64
// kernels hold it in one double, so at an offset of 1e6 with unit spread y is off by ~1e-10.
template <class P> double MeanUlps() { return sizeof(P) == 4 ? 0.0 : 2.0; }

// Worst error seen, and where: Note(e, ...) keeps the largest; NaN counts as infinitely large.
struct Worst {
  double e = 0;
  int64_t row = -1, col = -1;
  void Note(double err, int64_t r, int64_t c) {
    if (!(err <= e)) {
      e = err != err ? INFINITY : err;
      row = r;
      col = c;
    }
  }
};

// A case: rows of x = c + s * N(0, 1); "nonfinite" rows get a NaN or Inf and must come out NaN.
struct RowSpec {
  double c, s;
  bool nonfinite;
};

// Fills rows 1..specs.size() of a rows x ld matrix (rows 0 and last are guards, left as they are).
template <class St>
void FillRows(Rng &rng, const std::vector<RowSpec> &specs, int64_t n, int64_t ld,
              std::vector<typename St::Bits> *x) {
  for (size_t r = 0; r < specs.size(); ++r) {
    typename St::Bits *row = x->data() + (r + 1) * ld;
    for (int64_t i = 0; i < n; ++i) row[i] = St::Enc(specs[r].c + specs[r].s * rng.Normal());
    if (specs[r].nonfinite) {
      // A NaN or Inf somewhere: first, last, or in the middle (vector body or tail).
      const double bad[] = {NAN, INFINITY, -INFINITY};
      const int64_t pos[] = {0, n - 1, n / 2};
      row[pos[r % 3]] = St::Enc(bad[(r / 3) % 3]);
      if (r % 4 == 3 && n > 1) row[0] = St::Enc(INFINITY), row[n - 1] = St::Enc(-INFINITY);
    }
  }
}

// Every vector tail: rows at no offset, at an offset, constant, and with NaN/Inf.
const int64_t kTailLengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 768, 1000, 4097};
std::vector<RowSpec> TailRows(double offset) {
  std::vector<RowSpec> specs = {{0, 1, false}, {offset, 1, false}, {-2.5, 0, false}, {0, 0, false}};
  for (int k = 0; k < 9; ++k) specs.push_back({0, 1, true});
  return specs;
}
// The hard rows of the accuracy bar.
const std::vector<RowSpec> kHardRows = {{0, 1, false},    {1e2, 1, false},    {1e4, 1, false},
                                        {1e6, 1, false},  {-1e6, 1, false},   {1e4, 1e-2, false},
                                        {0, 1e-3, false}};
// Magnitudes whose squares overflow or underflow P: the exact paths.
template <class P>
std::vector<RowSpec> ExtremeRows() {
  const double big = sizeof(P) == 4 ? 1e30 : 1e300, tiny = sizeof(P) == 4 ? 1e-30 : 1e-300;
  return {{big, big * 1e-2, false}, {-big, big * 1e-2, false}, {0, big, false}, {0, tiny, false},
          {tiny * 10, tiny, false}};
}

// ---------------------------------------------------------------------------------------------
// Forward norms, plain (LayerNormArgs) and with a fused residual add or 16-bit storage
// (AddNormArgs). Each case runs with every combination of weight/bias and mean/rstd present or
// NULL, with a leading dimension larger than n (n + 3), in place, and on the middle rows only:
// rows outside the range and the padding between rows must not be written.

// Compares one output row against the reference computed from `in` (the values the kernel
// normalized); a nonfinite row must be all NaN, with NaN statistics.
template <class St, class P>
void CompareRow(Op op, const RowSpec &sp, const typename St::Bits *yr, const std::vector<double> &in,
                int64_t n, const P *w, const P *b, double eps, const P *mean, const P *rstd,
                int64_t r, Worst *wy, Worst *ws, bool *nan_ok) {
  if (sp.nonfinite) {
    for (int64_t i = 0; i < n; ++i) *nan_ok &= St::Dec(yr[i]) != St::Dec(yr[i]);
    if (rstd) *nan_ok &= rstd[r] != rstd[r];
    if (mean && op == kLayer) *nan_ok &= mean[r] != mean[r];
    return;
  }
  std::vector<double> ref;
  double rm, rr;
  RefNorm<P>(op, [&](int64_t i) { return in[i]; }, n, w, b, eps, &ref, &rm, &rr);
  const double tol_row = Tol<P>() + MeanUlps<P>() * Ulp<P>() * fabs(rm) * rr;
  for (int64_t i = 0; i < n; ++i) {
    // Absolute error on normalized values, as a fraction of the tolerance; weight and bias scale
    // what one rounding of y costs, and 16-bit storage adds its own rounding.
    const double scale = ((w || b) ? 1.0 + fabs(ref[i]) : 1.0) * tol_row / Tol<P>();
    const double e = fabs(St::Dec(yr[i]) - ref[i]) - St::kRel * fabs(ref[i]);
    wy->Note((e > 0 ? e : 0) / scale, r, i);
  }
  if (rstd) ws->Note(fabs(double(rstd[r]) - rr) / rr, r, -1);
  if (mean && op == kLayer) {
    // Within tol of a standard deviation, plus its own rounding to P.
    ws->Note(fabs(double(mean[r]) - rm) / (1.0 / rr + fabs(rm) * Ulp<P>() / Tol<P>()), r, -2);
  }
}

template <class P>
void RunForwardCase(const Isa &isa, const char *kname, Op op, fastln::LayerNormRowsFn<P> fn,
                    int64_t n, const std::vector<RowSpec> &specs, uint64_t seed, const char *label,
                    bool stream = false, int64_t band_bytes = -1) {
  Rng rng(seed);
  const int64_t rows = int64_t(specs.size()) + 2, ld = n + 3;
  std::vector<P> x(rows * ld, P(7));
  FillRows<Native<P>>(rng, specs, n, ld, &x);
  const auto w = Gaussian<P>(rng, n, 1.0, 0.5), b = Gaussian<P>(rng, n, 0.0, 1.0);
  const double eps = 1e-5;
  for (int variant = 0; variant < 8; ++variant) {
    const bool hw = variant & 1, hb = variant & 2, stats = variant & 4, inplace = variant == 3;
    std::vector<P> xin = x, y(rows * ld, P(-3)), mean(rows, P(-5)), rstd(rows, P(-5));
    P *yp = inplace ? xin.data() : y.data();
    // RMSNorm ignores bias and mean: they are passed anyway, and mean must stay untouched.
    fastln::LayerNormArgs<P> a{};  // fields by name: the struct may grow
    a.x = xin.data(), a.ldx = ld, a.y = yp, a.ldy = ld;
    a.weight = hw ? w.data() : nullptr, a.bias = hb ? b.data() : nullptr;
    a.mean = stats ? mean.data() : nullptr, a.rstd = stats ? rstd.data() : nullptr;
    a.cols = n, a.eps = eps, a.stream = stream;
    if (stream) fastln_set_stream_bytes(0, 0);  // whatever the default is on this machine
    fastln_set_band_bytes(band_bytes);
    fn(a, 1, rows - 1);
    fastln_set_band_bytes(-1);
    if (stream) fastln_set_stream_bytes(-1, -1);
    Worst wy, ws;
    bool nan_ok = true, guard_ok = true;
    for (int64_t r = 0; r < rows; ++r) {
      const P *yr = yp + r * ld;
      const bool guard = r == 0 || r == rows - 1;
      for (int64_t i = guard ? 0 : n; i < ld; ++i)
        guard_ok &= (inplace ? yr[i] == x[r * ld + i] : yr[i] == P(-3));
      if (guard || op == kRms) guard_ok &= mean[r] == P(-5);
      if (guard) {
        guard_ok &= rstd[r] == P(-5);
        continue;
      }
      std::vector<double> in(x.begin() + r * ld, x.begin() + r * ld + n);
      CompareRow<Native<P>, P>(op, specs[r - 1], yr, in, n, hw ? w.data() : nullptr,
                               hb ? b.data() : nullptr, eps, stats ? mean.data() : nullptr,
                               stats ? rstd.data() : nullptr, r, &wy, &ws, &nan_ok);
    }
    Expect(wy.e <= Tol<P>() && ws.e <= Tol<P>() && nan_ok && guard_ok,
           "%s %s %s n=%lld w=%d b=%d stats=%d inplace=%d: max err %.3g at row %lld col %lld, "
           "stats err %.3g, nan rows ok=%d, untouched ok=%d",
           isa.name, kname, label, (long long)n, hw, hb, stats, inplace, wy.e, (long long)wy.row,
           (long long)wy.col, ws.e, nan_ok, guard_ok);
  }
}

template <class P, Op op>
void CheckForward(const Isa &isa, const char *kname, fastln::LayerNormRowsFn<P> fn) {
  for (int64_t n : kTailLengths) RunForwardCase<P>(isa, kname, op, fn, n, TailRows(1e3), 1000 + n, "tails");
  for (int64_t n : {int64_t(768), int64_t(65536)})
    RunForwardCase<P>(isa, kname, op, fn, n, kHardRows, 7 + n, "hard rows");
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(768), int64_t(4097)})
    RunForwardCase<P>(isa, kname, op, fn, n, ExtremeRows<P>(), 99 + n, "extreme magnitudes");
  // Column bands (layer norm only), which only some CPUs take by default and from different row
  // lengths, forced on for every row that is not short, and off, whatever this CPU is.
  if constexpr (op == kLayer) {
    for (int64_t band : {int64_t(0), INT64_MAX}) {
      RunForwardCase<P>(isa, kname, op, fn, 65536, kHardRows, 7 + 65536, "hard rows, bands set",
                        false, band);
      for (int64_t n : {int64_t(768), int64_t(4097)})
        RunForwardCase<P>(isa, kname, op, fn, n, ExtremeRows<P>(), 99 + n,
                          "extreme magnitudes, bands set", false, band);
    }
  }
  // Non-temporal stores (forced, whatever the size), whole cache lines only: rows of an odd length
  // at odd offsets start and end mid-line.
  RunForwardCase<P>(isa, kname, op, fn, 100003, TailRows(1e3), 5, "streamed", true);
}

// The argument struct a kernel takes (its first parameter), so that checks of kernels from other
// branches name no type that may not exist yet.
template <class F> struct FirstArg;
template <class A, class... R> struct FirstArg<void (*)(const A &, R...)> { using type = A; };

// A norm with a fused residual add (h = x + res, stored; y = norm(h)) and/or 16-bit storage.
// res modes: 0 none, 1 h separate, 2 h written over x, 3 h written over res.
template <class St, class Fn>
void RunAddNormCase(const Isa &isa, const char *kname, Op op, Fn fn, int64_t n,
                    const std::vector<RowSpec> &specs, uint64_t seed, const char *label) {
  using Args = typename FirstArg<Fn>::type;
  using B = typename St::Bits;
  using P = typename std::remove_pointer<decltype(Args::mean)>::type;
  Rng rng(seed);
  const int64_t rows = int64_t(specs.size()) + 2, ld = n + 3;
  std::vector<B> x(rows * ld, St::Enc(7)), res(rows * ld, St::Enc(5));
  FillRows<St>(rng, specs, n, ld, &x);
  std::vector<RowSpec> small(specs.size(), RowSpec{0, 0.25, false});
  FillRows<St>(rng, small, n, ld, &res);
  const auto w = Gaussian<P>(rng, n, 1.0, 0.5), b = Gaussian<P>(rng, n, 0.0, 1.0);
  const double eps = 1e-5;
  for (int variant = 0; variant < 16; ++variant) {
    const int mode = variant & 3;
    const bool affine = variant & 4, stats = variant & 8;
    std::vector<B> xin = x, rin = res, h(rows * ld, St::Enc(-7)), y(rows * ld, St::Enc(-3));
    std::vector<P> mean(rows, P(-5)), rstd(rows, P(-5));
    B *hp = mode == 1 ? h.data() : mode == 2 ? xin.data() : mode == 3 ? rin.data() : nullptr;
    int status = 0;
    Args a{};
    a.x = xin.data(), a.ldx = ld, a.res = mode ? rin.data() : nullptr, a.ldr = ld;
    a.h = hp, a.ldh = ld, a.y = y.data(), a.ldy = ld;
    a.weight = affine ? w.data() : nullptr, a.bias = affine ? b.data() : nullptr;
    a.mean = stats ? mean.data() : nullptr, a.rstd = stats ? rstd.data() : nullptr;
    a.cols = n, a.eps = eps, a.status = &status;
    fn(a, 1, rows - 1);
    Worst wy, ws, wh;
    bool nan_ok = true, guard_ok = status == 0;
    auto same = [](B u, B v) { return memcmp(&u, &v, sizeof(B)) == 0; };
    for (int64_t r = 0; r < rows; ++r) {
      const bool guard = r == 0 || r == rows - 1;
      for (int64_t i = guard ? 0 : n; i < ld; ++i) {
        guard_ok &= same(y[r * ld + i], St::Enc(-3));
        if (hp) guard_ok &= same(hp[r * ld + i], mode == 1 ? St::Enc(-7) : mode == 2 ? x[r * ld + i] : res[r * ld + i]);
      }
      if (guard || op == kRms) guard_ok &= mean[r] == P(-5);  // RMSNorm ignores mean
      if (guard) {
        guard_ok &= rstd[r] == P(-5);
        continue;
      }
      std::vector<double> in(n);
      for (int64_t i = 0; i < n; ++i) {
        const double sum = St::Dec(x[r * ld + i]) + St::Dec(res[r * ld + i]);
        if (hp) {
          // h is x + res rounded once to the storage format; the norm reads that h.
          const double hv = St::Dec(hp[r * ld + i]);
          if (sum - sum == 0) wh.Note(fabs(hv - sum) / (fabs(sum) * (St::kRel + Ulp<P>()) + St::kAbs + 1e-300), r, i);
          in[i] = hv;
        } else {
          in[i] = St::Dec(x[r * ld + i]);
        }
      }
      CompareRow<St, P>(op, specs[r - 1], y.data() + r * ld, in, n, affine ? w.data() : nullptr,
                        affine ? b.data() : nullptr, eps, stats ? mean.data() : nullptr,
                        stats ? rstd.data() : nullptr, r, &wy, &ws, &nan_ok);
    }
    Expect(wy.e <= Tol<P>() && ws.e <= Tol<P>() && wh.e <= 1 && nan_ok && guard_ok,
           "%s %s %s n=%lld res=%d affine=%d stats=%d: max err %.3g at row %lld col %lld, stats "
           "err %.3g, h err %.3g (of its bound), nan rows ok=%d, untouched ok=%d (status %d)",
           isa.name, kname, label, (long long)n, mode, affine, stats, wy.e, (long long)wy.row,
           (long long)wy.col, ws.e, wh.e, nan_ok, guard_ok, status);
  }
}

template <class St, Op op, class Fn>
void CheckAddNorm(const Isa &isa, const char *kname, Fn fn) {
  const bool narrow = St::kRel > 0;  // 16-bit: no offsets beyond its range
  for (int64_t n : kTailLengths)
    RunAddNormCase<St>(isa, kname, op, fn, n, TailRows(narrow ? 1e2 : 1e3), 2000 + n, "tails");
  if (!narrow) RunAddNormCase<St>(isa, kname, op, fn, 768, kHardRows, 11, "hard rows");
}

// float32 f rounded to bfloat16 bits, to nearest even, NaN kept and made quiet: of the two
// bfloat16 values around f, the nearer (compared in double, exactly), the even one on a tie;
// above the largest finite one, Inf stands at 2^128, where an unbounded exponent would put it.
uint16_t RoundToBF16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (f != f) return uint16_t((u >> 16) | 0x40);
  auto value = [](uint32_t b) {
    if ((b & 0x7fff) == 0x7f80) return (b & 0x8000) ? -0x1p128 : 0x1p128;
    return BF16::Dec(uint16_t(b));
  };
  const uint32_t lo = u >> 16, hi = lo + 1;  // hi: one step away from zero
  if ((u & 0xffff) == 0) return uint16_t(lo);
  const double dlo = fabs(double(f) - value(lo)), dhi = fabs(value(hi) - double(f));
  return uint16_t(dlo < dhi || (dlo == dhi && (lo & 1) == 0) ? lo : hi);
}

// The rounding of y, bit for bit: layer norm with weight 0 makes y = bias, and RMS norm of a row
// of ones with eps 0 makes y = weight, so y is the rounding of whatever float32 values those hold:
// random bit patterns, ties, values that round up to Inf, subnormals. All finite (the vector ISAs
// round without a NaN test then), or with a NaN whose low bits would carry without that test.
template <Op op, class Fn>
void CheckBF16Rounding(const Isa &isa, const char *kname, Fn fn) {
  using Args = typename FirstArg<Fn>::type;
  constexpr int64_t rows = 3, n = 1000;
  Rng rng(77);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = uint32_t(rng.Next());
    if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u;              // a tie
    if (i % 8 == 3) u = (u & 0x8000ffffu) | 0x7f7f0000u;          // near the largest bfloat16
    if (i % 16 == 5) u &= 0x807fffffu;                            // subnormal
    if ((u & 0x7f800000u) == 0x7f800000u || (u & 0x7fffffffu) == 0) u ^= 0x40000000u;  // finite, not 0
    memcpy(&v[i], &u, 4);
  }
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 1) {
      const uint32_t nan = 0xffffffffu;
      memcpy(&v[n / 2 + 1], &nan, 4);
    }
    std::vector<uint16_t> x(rows * n, BF16::Enc(op == kRms ? 1.0 : 0.5)), y(rows * n, 0);
    for (int64_t i = 0; op == kLayer && i < rows * n; i += 3) x[i] = BF16::Enc(-2.0);
    const std::vector<float> zero(n, 0.0f);
    int status = 0;
    Args a{};
    a.x = x.data(), a.ldx = n, a.y = y.data(), a.ldy = n;
    a.weight = op == kRms ? v.data() : zero.data(), a.bias = op == kRms ? nullptr : v.data();
    a.cols = n, a.eps = 0.0, a.status = &status;
    fn(a, 0, rows);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < rows * n; ++i) {
      if (y[i] != RoundToBF16(v[i % n]) && bad++ == 0) first = i;
    }
    Expect(bad == 0 && status == 0,
           "%s %s bfloat16 rounding (nan=%d): %lld of %lld values wrong, first at %lld: %04x for "
           "%a (status %d)",
           isa.name, kname, variant, (long long)bad, (long long)(rows * n), (long long)first,
           first < 0 ? 0 : y[first], first < 0 ? 0.0 : double(v[first % n]), status);
  }
}

template <Op op, class Fn>
void CheckAddNormBF16(const Isa &isa, const char *kname, Fn fn) {
  CheckAddNorm<BF16, op>(isa, kname, fn);
  CheckBF16Rounding<op>(isa, kname, fn);
}

// ---------------------------------------------------------------------------------------------
// Backward passes: dx for each row, and when asked dweight = sum over rows of dy * xhat and
// (LayerNorm) dbias = sum of dy, in P (the C API adds the blocks' sums in double). dy, x and dx
// are stored in St (16-bit storage: P is float, and dx may be off by its rounding to St as well).
// mean and rstd come from the float64 forward rounded to P, as a forward pass would hand them
// over; the reference uses the same rstd, and the mean with its rounding recovered from x (the mean
// of x - mean), as the kernels do for rows far from zero (nearer, that rounding is within the
// tolerance).

template <class St, Op op, class Fn>
void RunBackwardCase(const Isa &isa, const char *kname, Fn fn, int64_t n,
                     const std::vector<RowSpec> &specs, uint64_t seed, const char *label) {
  using Args = typename FirstArg<Fn>::type;
  using B = typename St::Bits;
  using P = typename std::remove_const<
      typename std::remove_pointer<decltype(Args::mean)>::type>::type;
  using A = Acc<P>;
  Rng rng(seed);
  const int64_t rows = int64_t(specs.size()) + 2, ld = n + 3;
  std::vector<B> x(rows * ld, St::Enc(7)), dy(rows * ld, St::Enc(0.5));
  FillRows<St>(rng, specs, n, ld, &x);
  FillRows<St>(rng, std::vector<RowSpec>(specs.size(), RowSpec{0, 1, false}), n, ld, &dy);
  std::vector<P> mean(rows, P(0)), rstd(rows, P(1));
  for (int64_t r = 1; r < rows - 1; ++r) {
    std::vector<double> y;
    double m, rs;
    RefNorm<P>(op, [&](int64_t i) { return St::Dec(x[r * ld + i]); }, n, (const P *)nullptr,
               (const P *)nullptr, 1e-5, &y, &m, &rs);
    mean[r] = P(m), rstd[r] = P(rs);
  }
  const auto w = Gaussian<P>(rng, n, 1.0, 0.5);
  auto same = [](B u, B v) { return memcmp(&u, &v, sizeof(B)) == 0; };
  for (int variant = 0; variant < 5; ++variant) {
    const bool hw = variant & 1, inplace = variant == 4, grad = (variant & 2) || inplace;
    std::vector<B> dyin = dy, dx(rows * ld, St::Enc(-3));
    std::vector<P> dw(n, P(12345)), db(n, P(12345));
    B *dxp = inplace ? dyin.data() : dx.data();
    Args a{};
    a.dy = dyin.data(), a.lddy = ld, a.x = x.data(), a.ldx = ld, a.dx = dxp, a.lddx = ld;
    a.mean = op == kLayer ? mean.data() : nullptr, a.rstd = rstd.data();
    a.weight = hw || inplace ? w.data() : nullptr, a.cols = n;
    fn(a, 1, rows - 1, grad ? dw.data() : nullptr, grad && op == kLayer ? db.data() : nullptr);

    Worst wdx, wg;
    bool guard_ok = true;
    std::vector<A> rdw(n, 0), rdb(n, 0), sdw(n, 0), sdb(n, 0);  // sums, and sums of |terms|
    for (int64_t r = 0; r < rows; ++r) {
      const B *dxr = dxp + r * ld;
      const bool guard = r == 0 || r == rows - 1;
      for (int64_t i = guard ? 0 : n; i < ld; ++i)
        guard_ok &= same(dxr[i], inplace ? dy[r * ld + i] : St::Enc(-3));
      if (guard) continue;
      const A m = op == kLayer ? A(mean[r]) : A(0), rs = A(rstd[r]);
      A rest = 0;
      for (int64_t i = 0; op == kLayer && i < n; ++i) rest += A(St::Dec(x[r * ld + i])) - m;
      rest = rest / A(n);
      if (!(rest - rest == 0)) rest = 0;  // NaN and Inf rows
      std::vector<A> g(n), xh(n);
      A sg = 0, sgx = 0, gmax = 0, xmax = 0;
      for (int64_t i = 0; i < n; ++i) {
        const A d = A(St::Dec(dy[r * ld + i]));
        xh[i] = (A(St::Dec(x[r * ld + i])) - m - rest) * rs;
        g[i] = d * (a.weight ? A(w[i]) : A(1));
        sg += g[i], sgx += g[i] * xh[i];
        gmax = fabsl(g[i]) > gmax ? fabsl(g[i]) : gmax;
        xmax = fabsl(xh[i]) > xmax ? fabsl(xh[i]) : xmax;
        rdw[i] += d * xh[i], sdw[i] += fabsl(d * xh[i]);
        rdb[i] += d, sdb[i] += fabsl(d);
      }
      const A mg = op == kLayer ? sg / A(n) : A(0), mgx = sgx / A(n);
      // What one rounding of each term of dx costs; 16-bit storage adds the rounding of dx.
      const double scale = double(rs * (gmax + fabsl(mg) + xmax * fabsl(mgx)));
      for (int64_t i = 0; i < n; ++i) {
        const double ref = double(rs * (g[i] - mg - xh[i] * mgx));
        const double e = fabs(St::Dec(dxr[i]) - ref) - St::kRel * fabs(ref) - St::kAbs;
        wdx.Note((e > 0 ? e : 0) / scale, r, i);
      }
    }
    if (grad) {
      for (int64_t i = 0; i < n; ++i) {
        wg.Note(fabs(double(dw[i]) - double(rdw[i])) / (double(sdw[i]) + 1e-300), -1, i);
        if (op == kLayer) wg.Note(fabs(double(db[i]) - double(rdb[i])) / (double(sdb[i]) + 1e-300), -2, i);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) guard_ok &= dw[i] == P(12345) && db[i] == P(12345);
    }
    if (op == kRms) for (int64_t i = 0; i < n; ++i) guard_ok &= db[i] == P(12345);
    Expect(wdx.e <= Tol<P>() && wg.e <= Tol<P>() && guard_ok,
           "%s %s %s n=%lld w=%d grads=%d inplace=%d: dx err %.3g at row %lld col %lld, "
           "dweight/dbias err %.3g at col %lld, untouched ok=%d",
           isa.name, kname, label, (long long)n, a.weight != nullptr, grad, inplace, wdx.e,
           (long long)wdx.row, (long long)wdx.col, wg.e, (long long)wg.col, guard_ok);
  }
}

template <class St, Op op, class Fn>
void CheckBackward(const Isa &isa, const char *kname, Fn fn) {
  // Five rows: a group of four and one more.
  const std::vector<RowSpec> rows = {{0, 1, false}, {1e3, 1, false}, {0, 1, false}, {-2.5, 0.5, false}, {3, 2, false}};
  for (int64_t n : kTailLengths) RunBackwardCase<St, op>(isa, kname, fn, n, rows, 3000 + n, "tails");
  if (St::kRel > 0) {
    // 16-bit storage: no offsets beyond its range. Rows group as float32 rows do: 768 four at a
    // time, 65536 and 131072 one at a time.
    for (int64_t n : {int64_t(768), int64_t(65536), int64_t(131072)})
      RunBackwardCase<St, op>(isa, kname, fn, n, rows, 17 + n, "long rows");
    return;
  }
  for (int64_t n : {int64_t(768), int64_t(65536)})
    RunBackwardCase<St, op>(isa, kname, fn, n, kHardRows, 17 + n, "hard rows");
}

// Every 16-bit pattern (subnormals, Inf and NaN among them), from several start offsets and at
// lengths that end in a vector tail, widened against the reference decoder, bit for bit (signed
// zeros too); NaN stays NaN, and nothing is written past n.
template <class St>
void CheckWiden(const Isa &isa, const char *kname, fastln::WidenFn fn) {
  std::vector<uint16_t> src(65536 + 8);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(i);
  std::vector<float> dst(src.size() + 1);
  for (int64_t off : {0, 1, 3, 7}) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(17), int64_t(65536)}) {
      dst.assign(dst.size(), -7.0f);
      fn(src.data() + off, dst.data(), n);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = float(St::Dec(src[off + i])), got = dst[i];
        if (want != want) {
          bad += got == got;
        } else {
          bad += memcmp(&want, &got, sizeof(float)) != 0;
        }
      }
      Expect(bad == 0 && dst[n] == -7.0f, "%s: %s offset %lld n=%lld: %lld values wrong, or a "
             "write past n", isa.name, kname, (long long)off, (long long)n, (long long)bad);
    }
  }
}

// Examples stored as columns (layer_norm_cols_*): example i's value k at x[k * ld + i]. Against a
// two-pass double reference, through a NaN example, one at an offset of 1e4, one whose first value
// lies far from its mean (the row path) and a constant one; examples [1, m - 1) only, so the
// first and last columns must stay untouched, and the padding past m too; and the same call split
// in two at every offset gives the same bits.
template <class T>
void CheckCols(const Isa &isa, const char *kname, fastln::AddNormRowsFn<T, T> fn) {
  const double tol = sizeof(T) == 4 ? 2e-5 : 1e-11;
  for (int64_t m : {3, 4, 7, 19, 42, 75}) {
    for (int64_t n : {1, 2, 5, 64, 301}) {
      const int64_t ld = m + 3;
      Rng rng(uint64_t(m * 1000 + n));
      std::vector<T> x(n * ld, T(-9)), w(n), b(n);
      for (int64_t i = 0; i < m; ++i) {
        const double c = i == 2 ? 1e4 : 0.3, s = i == 3 ? 0.0 : 1.0 + 0.1 * double(i % 5);
        for (int64_t k = 0; k < n; ++k) x[k * ld + i] = T(c + s * rng.Normal());
        if (i == 4 && n > 8) x[i] = T(x[i] + 1e3);  // first value far: the row path
        if (i == 5 && n > 1) x[(n / 2) * ld + i] = T(NAN);
      }
      for (int64_t k = 0; k < n; ++k) w[k] = T(rng.Normal()), b[k] = T(rng.Normal());
      for (int affine = 0; affine < 2; ++affine) {
        std::vector<T> y(n * ld, T(-3)), y2(n * ld, T(-3)), mean(m, T(-5)), rstd(m, T(-5));
        int status = 0;
        fastln::AddNormArgs<T, T> a{};
        a.x = x.data(), a.ldx = ld, a.y = y.data(), a.ldy = ld;
        a.weight = affine ? w.data() : nullptr, a.bias = affine ? b.data() : nullptr;
        a.mean = mean.data(), a.rstd = rstd.data(), a.cols = n, a.eps = 1e-5, a.status = &status;
        fn(a, 1, m - 1);
        double worst = 0.0;
        bool nan_ok = true, guard_ok = status == 0, split_ok = true;
        for (int64_t i = 0; i < ld; ++i) {
          const bool inside = i >= 1 && i < m - 1;
          if (!inside) {
            for (int64_t k = 0; k < n; ++k) guard_ok &= y[k * ld + i] == T(-3);
            if (i < m) guard_ok &= mean[i] == T(-5) && rstd[i] == T(-5);
            continue;
          }
          double mu = 0.0, var = 0.0;
          for (int64_t k = 0; k < n; ++k) mu += double(x[k * ld + i]);
          mu /= double(n);
          for (int64_t k = 0; k < n; ++k) var += (double(x[k * ld + i]) - mu) * (x[k * ld + i] - mu);
          const double rs = 1.0 / sqrt(var / double(n) + 1e-5);
          for (int64_t k = 0; k < n; ++k) {
            double want = (double(x[k * ld + i]) - mu) * rs;
            if (affine) want = want * double(w[k]) + double(b[k]);
            const double got = double(y[k * ld + i]);
            if (want != want) {
              nan_ok &= got != got;
            } else {
              worst = std::max(worst, fabs(got - want) / (affine ? 1.0 + fabs(double(w[k])) : 1.0));
            }
          }
        }
        // The same call in two parts, cut at every example: the same bits.
        for (int64_t cut = 1; cut < m - 1; cut += 3) {
          a.y = y2.data();
          fn(a, 1, cut);
          fn(a, cut, m - 1);
          split_ok &= memcmp(y.data(), y2.data(), sizeof(T) * y.size()) == 0;
        }
        Expect(worst <= tol && nan_ok && guard_ok && split_ok,
               "%s: %s m=%lld n=%lld affine=%d: max err %.3g, NaN %d, guards %d, split %d",
               isa.name, kname, (long long)m, (long long)n, affine, worst, nan_ok, guard_ok,
               split_ok);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Every field of KernelTable and its check. Ops land from separate branches in any order, so each
// check compiles only when its field exists; the static_assert below fails when a field has none.

#define FASTLN_KERNEL(field, ...)                                                         \
  template <class Tb, class = void>                                                      \
  struct Has_##field : std::false_type {};                                               \
  template <class Tb>                                                                    \
  struct Has_##field<Tb, std::void_t<decltype(&Tb::field)>> : std::true_type {};         \
  template <class Tb>                                                                    \
  void Check_##field(const Isa &isa, const Tb &t) {                                      \
    if constexpr (Has_##field<Tb>::value) {                                              \
      if (Expect(t.field != nullptr, "%s: %s is NULL", isa.name, #field))                \
        __VA_ARGS__(isa, #field, t.field);                                               \
    }                                                                                    \
  }

FASTLN_KERNEL(layer_norm_f32, CheckForward<float, kLayer>)
FASTLN_KERNEL(layer_norm_f64, CheckForward<double, kLayer>)
FASTLN_KERNEL(rms_norm_f32, CheckForward<float, kRms>)
FASTLN_KERNEL(rms_norm_f64, CheckForward<double, kRms>)
FASTLN_KERNEL(layer_norm_backward_f32, CheckBackward<Native<float>, kLayer>)
FASTLN_KERNEL(layer_norm_backward_f64, CheckBackward<Native<double>, kLayer>)
FASTLN_KERNEL(rms_norm_backward_f32, CheckBackward<Native<float>, kRms>)
FASTLN_KERNEL(rms_norm_backward_f64, CheckBackward<Native<double>, kRms>)
FASTLN_KERNEL(layer_norm_backward_f16, CheckBackward<F16, kLayer>)
FASTLN_KERNEL(layer_norm_backward_bf16, CheckBackward<BF16, kLayer>)
FASTLN_KERNEL(rms_norm_backward_f16, CheckBackward<F16, kRms>)
FASTLN_KERNEL(rms_norm_backward_bf16, CheckBackward<BF16, kRms>)
FASTLN_KERNEL(add_layer_norm_f32, CheckAddNorm<Native<float>, kLayer>)
FASTLN_KERNEL(add_layer_norm_f64, CheckAddNorm<Native<double>, kLayer>)
FASTLN_KERNEL(add_layer_norm_f16, CheckAddNorm<F16, kLayer>)
FASTLN_KERNEL(add_layer_norm_bf16, CheckAddNormBF16<kLayer>)
FASTLN_KERNEL(add_rms_norm_f32, CheckAddNorm<Native<float>, kRms>)
FASTLN_KERNEL(add_rms_norm_f64, CheckAddNorm<Native<double>, kRms>)
FASTLN_KERNEL(add_rms_norm_f16, CheckAddNorm<F16, kRms>)
FASTLN_KERNEL(add_rms_norm_bf16, CheckAddNormBF16<kRms>)
FASTLN_KERNEL(widen_f16, CheckWiden<F16>)
FASTLN_KERNEL(widen_bf16, CheckWiden<BF16>)
FASTLN_KERNEL(layer_norm_cols_f32, CheckCols<float>)
FASTLN_KERNEL(layer_norm_cols_f64, CheckCols<double>)

struct KernelCheck {
  const char *name;
  bool present;
  void (*check)(const Isa &, const KernelTable &);
};
#define FASTLN_ENTRY(field) {#field, Has_##field<KernelTable>::value, &Check_##field<KernelTable>}
constexpr KernelCheck kKernels[] = {
    FASTLN_ENTRY(layer_norm_f32),          FASTLN_ENTRY(layer_norm_f64),
    FASTLN_ENTRY(rms_norm_f32),            FASTLN_ENTRY(rms_norm_f64),
    FASTLN_ENTRY(layer_norm_backward_f32), FASTLN_ENTRY(layer_norm_backward_f64),
    FASTLN_ENTRY(rms_norm_backward_f32),   FASTLN_ENTRY(rms_norm_backward_f64),
    FASTLN_ENTRY(layer_norm_backward_f16), FASTLN_ENTRY(layer_norm_backward_bf16),
    FASTLN_ENTRY(rms_norm_backward_f16),   FASTLN_ENTRY(rms_norm_backward_bf16),
    FASTLN_ENTRY(add_layer_norm_f32),      FASTLN_ENTRY(add_layer_norm_f64),
    FASTLN_ENTRY(add_layer_norm_f16),      FASTLN_ENTRY(add_layer_norm_bf16),
    FASTLN_ENTRY(add_rms_norm_f32),        FASTLN_ENTRY(add_rms_norm_f64),
    FASTLN_ENTRY(add_rms_norm_f16),        FASTLN_ENTRY(add_rms_norm_bf16),
    FASTLN_ENTRY(widen_f16),               FASTLN_ENTRY(widen_bf16),
    FASTLN_ENTRY(layer_norm_cols_f32),     FASTLN_ENTRY(layer_norm_cols_f64),
};
constexpr size_t CoveredFields() {
  size_t k = 0;
  for (const KernelCheck &c : kKernels) k += c.present;
  return k;
}
static_assert(sizeof(KernelTable) == sizeof(void *) * (1 + CoveredFields()),
              "KernelTable has a kernel that tests/native does not check: add a FASTLN_KERNEL line");

// ---------------------------------------------------------------------------------------------
// Dispatch: FASTLN_ISA is read once, at the first call, so each case runs in a forked child that
// sets it first. Must run before this process makes any fastln call.

enum Expected { kOk, kUnknown, kUnsupported };

void CheckEnv(const char *value, Expected want, const char *want_isa) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    if (value) setenv("FASTLN_ISA", value, 1);
    else unsetenv("FASTLN_ISA");
    const int st = fastln_init_status();
    const char *active = fastln_isa();
    float x[4] = {1, 2, 3, 4}, y[4];
    const int call = fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, 4, 1e-5f);
    bool ok;
    if (want == kOk) ok = st == FASTLN_OK && call == FASTLN_OK && strcmp(active, want_isa) == 0;
    else {
      const int code = want == kUnknown ? FASTLN_ERR_UNKNOWN_ISA : FASTLN_ERR_UNSUPPORTED_ISA;
      // Loud: the status says why, every kernel call fails, and nothing runs on another ISA.
      ok = st == code && call == code && strcmp(active, "none") == 0;
      // fastln_set_isa recovers.
      ok = ok && fastln_set_isa("scalar") == FASTLN_OK &&
           fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, 4, 1e-5f) == FASTLN_OK;
    }
    if (!ok) printf("  FASTLN_ISA=%s: init status %d, kernel call %d, active %s\n",
                    value ? value : "(unset)", st, call, active);
    fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "dispatch with FASTLN_ISA=%s",
         value ? value : "(unset)");
}

void CheckDispatch() {
  const char *best = ExpectedBest();
  CheckEnv(nullptr, kOk, best);
  CheckEnv("", kOk, best);
  CheckEnv("auto", kOk, best);
  CheckEnv("scalar", kOk, "scalar");
  CheckEnv("bogus", kUnknown, nullptr);
  CheckEnv("AVX2", kUnknown, nullptr);  // names are exact
#if defined(__aarch64__)
  CheckEnv("neon", kOk, "neon");
  CheckEnv("avx2", kUnsupported, nullptr);
  CheckEnv("avx512", kUnsupported, nullptr);
#elif defined(__x86_64__)
  CheckEnv("neon", kUnsupported, nullptr);
  if (strcmp(best, "scalar") != 0) CheckEnv("avx2", kOk, "avx2");
  else CheckEnv("avx2", kUnsupported, nullptr);
  if (Avx512Runs()) {
    CheckEnv("avx512", kOk, "avx512");
  } else {
    CheckEnv("avx512", kUnsupported, nullptr);
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// The C API: status codes, ISA control, and results that do not depend on the thread count.

void CheckCApi() {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  double xd[8] = {1, 2, 3, 4, 5, 6, 7, 8}, yd[8];
  Expect(fastln_layer_norm_f32(nullptr, y, nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-5f) ==
             FASTLN_ERR_NULL_POINTER, "NULL x");
  Expect(fastln_layer_norm_f32(x, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-5f) ==
             FASTLN_ERR_NULL_POINTER, "NULL y");
  Expect(fastln_layer_norm_f64(nullptr, yd, nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-5) ==
             FASTLN_ERR_NULL_POINTER, "NULL x f64");
  Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, 0, 1e-5f) ==
             FASTLN_ERR_BAD_SHAPE, "cols = 0");
  Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, -8, 1e-5f) ==
             FASTLN_ERR_BAD_SHAPE, "cols < 0");
  Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, -1, 8, 1e-5f) ==
             FASTLN_ERR_BAD_SHAPE, "rows < 0");
  Expect(fastln_layer_norm_f32_ld(x, 4, y, 8, nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-5) ==
             FASTLN_ERR_BAD_SHAPE, "ldx < cols");
  Expect(fastln_layer_norm_f64_ld(xd, 8, yd, 7, nullptr, nullptr, nullptr, nullptr, 1, 8, 1e-5) ==
             FASTLN_ERR_BAD_SHAPE, "ldy < cols");
  const double bad_eps[] = {-1e-5, NAN, INFINITY, -INFINITY};
  for (double e : bad_eps) {
    Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, 8, float(e)) ==
               FASTLN_ERR_BAD_EPS, "eps = %g (f32)", e);
    Expect(fastln_layer_norm_f64(xd, yd, nullptr, nullptr, nullptr, nullptr, 1, 8, e) ==
               FASTLN_ERR_BAD_EPS, "eps = %g (f64)", e);
  }
  Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 0, 8, 1e-5f) == FASTLN_OK,
         "rows = 0 is fine");
  Expect(fastln_layer_norm_f32(x, y, nullptr, nullptr, nullptr, nullptr, 1, 8, 0.0f) == FASTLN_OK,
         "eps = 0 is fine");
  Expect(fastln_set_isa("bogus") == FASTLN_ERR_UNKNOWN_ISA, "set_isa(bogus)");
  Expect(fastln_set_num_threads(-1) == FASTLN_ERR_BAD_ARGUMENT, "set_num_threads(-1)");
  {
    const int64_t d0 = fastln_get_stream_bytes(0), d1 = fastln_get_stream_bytes(1);
    Expect(d0 >= (int64_t(2) << 20) && d1 >= (int64_t(2) << 20), "default stream sizes %lld %lld",
           (long long)d0, (long long)d1);
    fastln_set_stream_bytes(123, 456);
    Expect(fastln_get_stream_bytes(0) == 123 && fastln_get_stream_bytes(1) == 456,
           "set_stream_bytes sets both");
    fastln_set_stream_bytes(-1, -1);
    Expect(fastln_get_stream_bytes(0) == d0 && fastln_get_stream_bytes(1) == d1,
           "set_stream_bytes(-1, -1) restores the defaults");
  }
  {
    const int64_t d = fastln_get_band_bytes();
    // 8 KiB or just over L1d / 5 (AMD), 16 KiB (Intel), never (elsewhere).
    Expect((d >= 8192 && d <= (int64_t(1) << 20)) || d == INT64_MAX, "default band size %lld",
           (long long)d);
    fastln_set_band_bytes(4096);
    Expect(fastln_get_band_bytes() == 4096, "set_band_bytes sets it");
    fastln_set_band_bytes(-1);
    Expect(fastln_get_band_bytes() == d, "set_band_bytes(-1) restores the default");
  }
  for (int s = 1; s >= -7; --s) {
    const char *msg = fastln_status_string(s);
    Expect(msg != nullptr && msg[0] != '\0', "status_string(%d)", s);
  }
  for (const Isa &isa : kIsas) {
    const bool usable = isa.table() != nullptr && fastln_isa_supported(isa.name);
    const int st = fastln_set_isa(isa.name);
    Expect(st == (usable ? FASTLN_OK : FASTLN_ERR_UNSUPPORTED_ISA), "set_isa(%s) = %d", isa.name, st);
    if (!usable) continue;
    Expect(strcmp(fastln_isa(), isa.name) == 0, "isa() after set_isa(%s) is %s", isa.name,
           fastln_isa());
    // Enough work for several threads; outputs must be bitwise equal at 1, 2 and 7 threads.
    const int64_t rows = 97, cols = 4097;
    Rng rng(5);
    const auto xm = Gaussian<float>(rng, rows * cols, 3.0, 2.0);
    std::vector<float> y1(rows * cols), yn(rows * cols), m1(rows), mn(rows), r1(rows), rn(rows);
    fastln_set_num_threads(1);
    fastln_layer_norm_f32(xm.data(), y1.data(), nullptr, nullptr, m1.data(), r1.data(), rows, cols,
                          1e-5f);
    for (int nt : {2, 7}) {
      fastln_set_num_threads(nt);
      std::fill(yn.begin(), yn.end(), NAN);  // a block of rows no thread wrote stays NaN
      const int s2 = fastln_layer_norm_f32(xm.data(), yn.data(), nullptr, nullptr, mn.data(),
                                           rn.data(), rows, cols, 1e-5f);
      Expect(s2 == FASTLN_OK && memcmp(y1.data(), yn.data(), y1.size() * 4) == 0 &&
                 memcmp(m1.data(), mn.data(), rows * 4) == 0 && memcmp(r1.data(), rn.data(), rows * 4) == 0,
             "%s: bitwise equal outputs at 1 and %d threads", isa.name, nt);
    }
#ifdef _OPENMP
    // The pool (src/thread_pool.h) from several callers at once: from two threads of the caller's
    // own OpenMP region each call runs alone (as a nested region would), and from two std::threads
    // one call takes the pool while the other runs alone. Every row written, the same bits.
    fastln_set_num_threads(2);
    std::vector<float> ya(rows * cols), yb(rows * cols);
    int team = 0;
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) team = omp_get_num_threads();
      std::vector<float> &yo = omp_get_thread_num() == 0 ? ya : yb;
      fastln_layer_norm_f32(xm.data(), yo.data(), nullptr, nullptr, nullptr, nullptr, rows, cols,
                            1e-5f);
    }
    Expect(memcmp(y1.data(), ya.data(), y1.size() * 4) == 0 &&
               (team < 2 || memcmp(y1.data(), yb.data(), y1.size() * 4) == 0),
           "%s: calls inside an OpenMP region bitwise equal to 1 thread", isa.name);
    bool same[2] = {true, true};
    std::vector<float> *outs[2] = {&ya, &yb};
    std::thread callers[2];
    for (int k = 0; k < 2; ++k) {
      callers[k] = std::thread([&, k] {
        for (int rep = 0; rep < 50; ++rep) {
          std::fill(outs[k]->begin(), outs[k]->end(), NAN);
          fastln_layer_norm_f32(xm.data(), outs[k]->data(), nullptr, nullptr, nullptr, nullptr,
                                rows, cols, 1e-5f);
          same[k] = same[k] && memcmp(y1.data(), outs[k]->data(), y1.size() * 4) == 0;
        }
      });
    }
    for (std::thread &c : callers) c.join();
    Expect(same[0] && same[1], "%s: two callers at once bitwise equal to 1 thread", isa.name);
    // Pauses around the 50 us the pool's threads spin before they sleep, where a wake could be
    // lost between a thread's last look and its sleep: every call must still come back complete.
    {
      const int64_t r2 = 64, c2 = 512;
      std::vector<float> ys(r2 * c2);
      fastln_set_num_threads(2);
      bool ok = true;
      uint32_t seed = 12345;
      for (int rep = 0; rep < 3000 && ok; ++rep) {
        std::fill(ys.begin(), ys.end(), NAN);
        fastln_layer_norm_f32(xm.data(), ys.data(), nullptr, nullptr, nullptr, nullptr, r2, c2,
                              1e-5f);
        fastln_set_num_threads(1);
        fastln_layer_norm_f32(xm.data(), ya.data(), nullptr, nullptr, nullptr, nullptr, r2, c2,
                              1e-5f);
        fastln_set_num_threads(2);
        ok = memcmp(ys.data(), ya.data(), ys.size() * 4) == 0;
        seed = seed * 1664525u + 1013904223u;
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::microseconds(20 + (seed >> 8) % 80);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      Expect(ok, "%s: 2 threads after pauses of 20-100 us bitwise equal to 1 thread", isa.name);
    }
#endif
    fastln_set_num_threads(0);
    // Everything streamed (from 0 bytes) against plain stores (y1: 1.6 MB, under the default).
    fastln_set_stream_bytes(0, 0);
    const int s3 = fastln_layer_norm_f32(xm.data(), yn.data(), nullptr, nullptr, mn.data(),
                                         rn.data(), rows, cols, 1e-5f);
    fastln_set_stream_bytes(-1, -1);
    Expect(s3 == FASTLN_OK && memcmp(y1.data(), yn.data(), y1.size() * 4) == 0,
           "%s: streamed y bitwise equal to plain stores", isa.name);
  }
  Expect(fastln_set_isa(nullptr) == FASTLN_OK && strcmp(fastln_isa(), ExpectedBest()) == 0,
         "set_isa(NULL) restores the best ISA");
}

}  // namespace

int main() {
  printf("fastln native tests: %s, OpenMP %s\n",
#if defined(__aarch64__)
         "aarch64",
#elif defined(__x86_64__)
         "x86-64",
#else
         "other",
#endif
         fastln_has_openmp() ? "on" : "off");
  CheckDispatch();  // first: it needs dispatch untouched in this process
  printf("kernels:");
  for (const KernelCheck &k : kKernels)
    if (k.present) printf(" %s", k.name);
  printf("\n");

  for (const Isa &isa : kIsas) {
    const KernelTable *t = isa.table();
    Expect(t != nullptr || !MustBeCompiled(isa.name), "%s must be compiled into this build", isa.name);
    if (!t) {
      printf("%s: not compiled in\n", isa.name);
      continue;
    }
    Expect(strcmp(t->name, isa.name) == 0, "table %s is named %s", isa.name, t->name);
    if (!fastln_isa_supported(isa.name)) {
      printf("%s: compiled, but this CPU cannot run it: skipped\n", isa.name);
      continue;
    }
    const int before = g_failed;
    for (const KernelCheck &k : kKernels) k.check(isa, *t);
    printf("%s: %s\n", isa.name, g_failed == before ? "ok" : "FAILED");
  }
  CheckCApi();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
