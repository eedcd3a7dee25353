// Native tests, no Python: every kernel of every ISA compiled into this build against a float64
// reference, plus dispatch (FASTLN_ISA) and the C API's status codes.
//
// Built and run by tests/native/run.sh, natively or cross-compiled for aarch64 and run under
// qemu-aarch64. Prints one line per failure and closes with "N passed, M failed"; exits non-zero on
// any failure.
//
// To cover a new kernel (a new field of KernelTable): write its reference next to RefLayerNorm, a
// Check function like CheckLayerNorm, add a line to kKernels, and bump kCoveredFields. The
// static_assert below fails to compile until then, so no kernel goes untested here.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <type_traits>
#include <vector>

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
// Float64 (long double for float64 kernels) references: two passes, obviously right.

template <class T>
using Acc = typename std::conditional<sizeof(T) == 4, double, long double>::type;

template <class T>
void RefLayerNorm(const T *x, int64_t n, const T *w, const T *b, double eps, std::vector<double> *y,
                  double *mean, double *rstd) {
  using A = Acc<T>;
  A sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += A(x[i]);
  const A m = sum / A(n);
  A ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (A(x[i]) - m) * (A(x[i]) - m);
  const A r = A(1) / sqrtl((long double)(ss / A(n) + A(eps)));
  y->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    A u = (A(x[i]) - m) * r;
    if (w) u *= A(w[i]);
    if (b) u += A(b[i]);
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
    {"neon", &fastln::table_neon},
};

// What this build must contain: an ISA silently missing (say NEON compiled out on aarch64) would
// otherwise leave its kernels untested while every check passes.
bool MustBeCompiled(const char *name) {
#if defined(__aarch64__)
  if (strcmp(name, "neon") == 0) return true;
#endif
#if defined(__x86_64__)
  if (strcmp(name, "avx2") == 0) return true;
#endif
  return strcmp(name, "scalar") == 0;
}

// The ISA dispatch should pick here, found independently of dispatch.cpp.
const char *ExpectedBest() {
#if defined(__aarch64__)
  return "neon";  // Advanced SIMD is mandatory in ARMv8-A
#elif defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "avx2" : "scalar";
#else
  return "scalar";
#endif
}

// ---------------------------------------------------------------------------------------------
// Per-dtype tolerances, in units of the output (normalized values are O(1)).

template <class T> double Tol();
template <> double Tol<float>() { return 1e-5; }   // the accuracy bar
template <> double Tol<double>() { return 1e-12; }

// How many units in the last place of the mean the outputs may be off by, in standard deviations.
// The float32 kernels keep the mean as a hi/lo pair, so its rounding costs nothing; the float64
// kernels hold it in one double, so at an offset of 1e6 with unit spread y is off by ~1e-10.
template <class T> double MeanUlps() { return sizeof(T) == 4 ? 0.0 : 2.0; }

// Relative rounding of a value stored in T (two units in the last place).
template <class T> double Ulp() { return sizeof(T) == 4 ? 0x1p-23 : 0x1p-52; }

template <class T>
const char *TypeName() { return sizeof(T) == 4 ? "f32" : "f64"; }

template <class T>
fastln::LayerNormRowsFn<T> LayerNormFn(const KernelTable &t);
template <>
fastln::LayerNormRowsFn<float> LayerNormFn<float>(const KernelTable &t) { return t.layer_norm_f32; }
template <>
fastln::LayerNormRowsFn<double> LayerNormFn<double>(const KernelTable &t) { return t.layer_norm_f64; }

// The rows a case is made of. kind: "normal" rows are checked against the reference with tol;
// "nonfinite" rows must come out all NaN.
struct RowSpec {
  double c, s;
  bool nonfinite;
};

// Runs the layer norm kernel on `rows` rows of n values with every combination of weight/bias and
// mean/rstd present or NULL, with a leading dimension larger than n (ldx = n + 3) and in place, and
// checks each against the reference. Calls it on the middle rows only, and checks that rows outside
// the range are not written.
template <class T>
void RunLayerNormCase(const Isa &isa, const KernelTable &t, int64_t n,
                      const std::vector<RowSpec> &specs, uint64_t seed, const char *label) {
  const auto fn = LayerNormFn<T>(t);
  if (!Expect(fn != nullptr, "%s layer_norm_%s is NULL", isa.name, TypeName<T>())) return;
  Rng rng(seed);
  const int64_t rows = int64_t(specs.size()) + 2;  // first and last are guard rows
  const int64_t ld = n + 3;
  std::vector<T> x(rows * ld, T(7));
  for (size_t r = 0; r < specs.size(); ++r) {
    const auto v = Gaussian<T>(rng, n, specs[r].c, specs[r].s);
    std::copy(v.begin(), v.end(), x.begin() + (r + 1) * ld);
    if (specs[r].nonfinite) {
      // A NaN or Inf somewhere: first, last, or in the middle (vector body or tail).
      const T bad[] = {T(NAN), T(INFINITY), T(-INFINITY)};
      const int64_t pos[] = {0, n - 1, n / 2};
      x[(r + 1) * ld + pos[r % 3]] = bad[(r / 3) % 3];
      if (r % 4 == 3 && n > 1) x[(r + 1) * ld] = T(INFINITY), x[(r + 1) * ld + n - 1] = T(-INFINITY);
    }
  }
  const auto w = Gaussian<T>(rng, n, 1.0, 0.5), b = Gaussian<T>(rng, n, 0.0, 1.0);
  const double eps = 1e-5;

  for (int variant = 0; variant < 8; ++variant) {
    const bool hw = variant & 1, hb = variant & 2, stats = variant & 4;
    const bool inplace = variant == 3;
    std::vector<T> xin = x;
    std::vector<T> y(rows * ld, T(-3));
    std::vector<T> mean(rows, T(-5)), rstd(rows, T(-5));
    T *yp = inplace ? xin.data() : y.data();
    fastln::LayerNormArgs<T> a{xin.data(), ld, yp, ld, hw ? w.data() : nullptr,
                               hb ? b.data() : nullptr, stats ? mean.data() : nullptr,
                               stats ? rstd.data() : nullptr, n, eps};
    fn(a, 1, rows - 1);

    double worst = 0, worst_stat = 0;
    int64_t worst_row = -1, worst_i = -1;
    bool nan_ok = true, guard_ok = true;
    for (int64_t r = 0; r < rows; ++r) {
      const T *yr = yp + r * ld;
      if (r == 0 || r == rows - 1) {
        // Not in the range handed to the kernel: untouched, values and stats.
        for (int64_t i = 0; i < ld; ++i)
          guard_ok &= (inplace ? yr[i] == x[r * ld + i] : yr[i] == T(-3));
        guard_ok &= mean[r] == T(-5) && rstd[r] == T(-5);
        continue;
      }
      // The padding between rows is never written either.
      for (int64_t i = n; i < ld; ++i) guard_ok &= (inplace ? yr[i] == x[r * ld + i] : yr[i] == T(-3));
      const RowSpec &sp = specs[r - 1];
      if (sp.nonfinite) {
        for (int64_t i = 0; i < n; ++i) nan_ok &= yr[i] != yr[i];
        if (stats) nan_ok &= mean[r] != mean[r] && rstd[r] != rstd[r];
        continue;
      }
      std::vector<double> ref;
      double rm, rr;
      RefLayerNorm<T>(x.data() + r * ld, n, hw ? w.data() : nullptr, hb ? b.data() : nullptr, eps,
                      &ref, &rm, &rr);
      const double tol_row = Tol<T>() + MeanUlps<T>() * Ulp<T>() * fabs(rm) * rr;
      for (int64_t i = 0; i < n; ++i) {
        // Absolute error on normalized values, as a fraction of the row's tolerance; weight and
        // bias scale what one rounding of y costs.
        const double scale = ((hw || hb) ? 1.0 + fabs(ref[i]) : 1.0) * tol_row / Tol<T>();
        const double e = fabs(double(yr[i]) - ref[i]) / scale;
        if (!(e <= worst)) {  // also catches NaN
          worst = e != e ? INFINITY : e;
          worst_row = r;
          worst_i = i;
        }
      }
      if (stats) {
        // mean within tol of a standard deviation (plus its own rounding to T), rstd relative.
        const double sd = 1.0 / rr;
        const double em = fabs(double(mean[r]) - rm) / (sd + fabs(rm) * Ulp<T>() / Tol<T>());
        const double er = fabs(double(rstd[r]) - rr) / rr;
        const double es = em > er ? em : er;
        if (!(es <= worst_stat)) worst_stat = es != es ? INFINITY : es;
      }
    }
    Expect(worst <= Tol<T>() && worst_stat <= Tol<T>() && nan_ok && guard_ok,
           "%s layer_norm_%s %s n=%lld w=%d b=%d stats=%d inplace=%d: max err %.3g at row %lld "
           "col %lld, stats err %.3g, nan rows ok=%d, untouched ok=%d",
           isa.name, TypeName<T>(), label, (long long)n, hw, hb, stats, inplace, worst,
           (long long)worst_row, (long long)worst_i, worst_stat, nan_ok, guard_ok);
  }
}

template <class T>
void CheckLayerNorm(const Isa &isa, const KernelTable &t) {
  // Every vector tail: rows at no offset, at an offset, constant, and with NaN/Inf.
  const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 768, 1000, 4097};
  for (int64_t n : lengths) {
    std::vector<RowSpec> specs = {{0, 1, false}, {1e3, 1, false}, {-2.5, 0, false}, {0, 0, false}};
    for (int k = 0; k < 9; ++k) specs.push_back({0, 1, true});
    RunLayerNormCase<T>(isa, t, n, specs, 1000 + n, "tails");
  }
  // The hard rows of the accuracy bar.
  const RowSpec hard[] = {{0, 1, false},   {1e2, 1, false},   {1e4, 1, false},  {1e6, 1, false},
                          {-1e6, 1, false}, {1e4, 1e-2, false}, {0, 1e-3, false}};
  for (int64_t n : {int64_t(768), int64_t(65536)}) {
    RunLayerNormCase<T>(isa, t, n, std::vector<RowSpec>(std::begin(hard), std::end(hard)), 7 + n,
                        "hard rows");
  }
  // Magnitudes whose squares overflow or underflow T: the exact path.
  const double big = sizeof(T) == 4 ? 1e30 : 1e300, tiny = sizeof(T) == 4 ? 1e-30 : 1e-300;
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(768), int64_t(4097)}) {
    RunLayerNormCase<T>(isa, t, n,
                        {{big, big * 1e-2, false}, {-big, big * 1e-2, false}, {0, big, false},
                         {0, tiny, false}, {tiny * 10, tiny, false}},
                        99 + n, "extreme magnitudes");
  }
}

// One entry per kernel in KernelTable.
struct KernelCheck {
  const char *name;
  void (*check)(const Isa &, const KernelTable &);
};
const KernelCheck kKernels[] = {
    {"layer_norm_f32", &CheckLayerNorm<float>},
    {"layer_norm_f64", &CheckLayerNorm<double>},
};
constexpr size_t kCoveredFields = sizeof(kKernels) / sizeof(kKernels[0]);
static_assert(sizeof(KernelTable) == sizeof(void *) * (1 + kCoveredFields),
              "KernelTable has a kernel that tests/native does not check: add it to kKernels");

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
#elif defined(__x86_64__)
  CheckEnv("neon", kUnsupported, nullptr);
  if (strcmp(best, "avx2") == 0) CheckEnv("avx2", kOk, "avx2");
  else CheckEnv("avx2", kUnsupported, nullptr);
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
      const int s2 = fastln_layer_norm_f32(xm.data(), yn.data(), nullptr, nullptr, mn.data(),
                                           rn.data(), rows, cols, 1e-5f);
      Expect(s2 == FASTLN_OK && memcmp(y1.data(), yn.data(), y1.size() * 4) == 0 &&
                 memcmp(m1.data(), mn.data(), rows * 4) == 0 && memcmp(r1.data(), rn.data(), rows * 4) == 0,
             "%s: bitwise equal outputs at 1 and %d threads", isa.name, nt);
    }
    fastln_set_num_threads(0);
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
