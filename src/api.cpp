// The C API: argument checks, then rows split over OpenMP threads and handed to the active kernel.
// Compiled with the baseline flags.
#include <stdint.h>

#include <atomic>

#include "dispatch.h"
#include "fastln/fastln.h"

#ifdef _OPENMP
#include <omp.h>
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define FASTLN_HAVE_ATFORK 1
#endif
#endif

namespace fastln {
namespace {

#ifdef FASTLN_HAVE_ATFORK
// GNU libgomp cannot start a parallel region in a child forked after the parent ran one: the child
// hangs (multiprocessing's default start method on Linux does exactly this). As PyTorch does, a
// child forked after fastln went parallel runs single-threaded.
std::atomic<bool> g_forked_child{false};
void OnForkChild() { g_forked_child.store(true); }
bool ForkedChild() {
  static const int registered = pthread_atfork(nullptr, nullptr, &OnForkChild);
  (void)registered;
  return g_forked_child.load(std::memory_order_relaxed);
}
#else
bool ForkedChild() { return false; }
#endif

std::atomic<int> g_num_threads{0};

int MaxThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
#ifdef _OPENMP
  if (ForkedChild()) return 1;
  return n > 0 ? n : omp_get_max_threads();
#else
  (void)n;
  return 1;
#endif
}

// A thread gets at least this many elements: below it, waking a second thread costs more than it
// saves (measured with bench/threads: about 2 us to start a region on this machine).
constexpr int64_t kMinElemsPerThread = 32 * 1024;

// Contiguous blocks of rows, sizes differing by at most one (oneDNN's balance211). A row is never
// split, so each output element is computed by the same instructions whatever the thread count.
inline void Balance(int64_t rows, int nthr, int ithr, int64_t *begin, int64_t *end) {
  const int64_t base = rows / nthr, extra = rows % nthr;
  *begin = ithr * base + (ithr < extra ? ithr : extra);
  *end = *begin + base + (ithr < extra ? 1 : 0);
}

template <class Args, class Fn>
void ParallelRows(const Args &args, Fn fn, int64_t rows, int64_t cols) {
  int64_t nt = MaxThreads();
  const int64_t by_work = (rows * cols) / kMinElemsPerThread;
  if (nt > by_work) nt = by_work;
  if (nt > rows) nt = rows;
  if (nt <= 1 || ForkedChild()) {
    fn(args, 0, rows);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(static_cast<int>(nt))
  {
    int64_t b, e;
    Balance(rows, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
    if (b < e) fn(args, b, e);
  }
#else
  fn(args, 0, rows);
#endif
}

template <class T>
int LayerNorm(const T *x, int64_t ldx, T *y, int64_t ldy, const T *w, const T *b, T *mean,
              T *rstd, int64_t rows, int64_t cols, double eps, LayerNormRowsFn<T> KernelTable::*fn) {
  if (!x || !y) return FASTLN_ERR_NULL_POINTER;
  if (rows < 0 || cols <= 0 || ldx < cols || ldy < cols) return FASTLN_ERR_BAD_SHAPE;
  if (!(eps >= 0) || eps - eps != 0) return FASTLN_ERR_BAD_EPS;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  if (rows == 0) return FASTLN_OK;
  const LayerNormArgs<T> args{x, ldx, y, ldy, w, b, mean, rstd, cols, eps};
  ParallelRows(args, t->*fn, rows, cols);
  return FASTLN_OK;
}

}  // namespace
}  // namespace fastln

using fastln::LayerNorm;
using fastln::KernelTable;

extern "C" {

int fastln_layer_norm_f32(const float *x, float *y, const float *weight, const float *bias,
                          float *mean, float *rstd, int64_t rows, int64_t cols, float eps) {
  return LayerNorm<float>(x, cols, y, cols, weight, bias, mean, rstd, rows, cols, eps,
                          &KernelTable::layer_norm_f32);
}

int fastln_layer_norm_f64(const double *x, double *y, const double *weight, const double *bias,
                          double *mean, double *rstd, int64_t rows, int64_t cols, double eps) {
  return LayerNorm<double>(x, cols, y, cols, weight, bias, mean, rstd, rows, cols, eps,
                           &KernelTable::layer_norm_f64);
}

int fastln_layer_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy,
                             const float *weight, const float *bias, float *mean, float *rstd,
                             int64_t rows, int64_t cols, double eps) {
  return LayerNorm<float>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps,
                          &KernelTable::layer_norm_f32);
}

int fastln_layer_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                             const double *weight, const double *bias, double *mean,
                             double *rstd, int64_t rows, int64_t cols, double eps) {
  return LayerNorm<double>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps,
                           &KernelTable::layer_norm_f64);
}

const char *fastln_status_string(int status) {
  switch (status) {
    case FASTLN_OK: return "success";
    case FASTLN_ERR_NULL_POINTER: return "a required pointer is NULL";
    case FASTLN_ERR_BAD_SHAPE: return "bad shape: rows < 0, cols <= 0, or a leading dimension < cols";
    case FASTLN_ERR_BAD_EPS: return "eps must be finite and >= 0";
    case FASTLN_ERR_UNKNOWN_ISA: return "unknown ISA name (known: scalar, avx2, neon)";
    case FASTLN_ERR_UNSUPPORTED_ISA: return "this CPU or build cannot run the requested ISA";
    case FASTLN_ERR_BAD_ARGUMENT: return "invalid argument";
    default: return "unknown status";
  }
}

int fastln_set_num_threads(int n) {
  if (n < 0) return FASTLN_ERR_BAD_ARGUMENT;
  fastln::g_num_threads.store(n);
  return FASTLN_OK;
}

int fastln_get_num_threads(void) { return fastln::MaxThreads(); }

int fastln_has_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
