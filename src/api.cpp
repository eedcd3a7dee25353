// The C API: argument checks, then rows split over threads (as many as OpenMP's settings give) and
// handed to the active kernel.
// Compiled with the baseline flags.
#include <stdint.h>

#include <stdlib.h>

#include <atomic>
#include <type_traits>

#include "binding/add_norm16.h"
#include "dispatch.h"
#include "fastln/fastln.h"
#include "spans.h"

#ifdef _OPENMP
#include <omp.h>

#include "thread_pool.h"
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define FASTLN_HAVE_ATFORK 1
#endif
#endif

namespace fastln {
namespace {

#ifdef FASTLN_HAVE_ATFORK
// A forked child has none of its parent's threads: the pool's (thread_pool.h) would never answer,
// as libgomp's never do (the child of a parent that ran a parallel region hangs in the next one).
// multiprocessing's default start method on Linux forks, so as PyTorch does, a child forked after
// fastln's first call runs single-threaded.
// The handler is registered as the library loads: registered by the first call (a function-local
// static), a fork by another thread while that call held the static's guard would leave the
// child's first call waiting on the guard for good. A call sets g_called before it can start a
// pool thread, so a child forked before any call may still start its own.
std::atomic<bool> g_called{false};
std::atomic<bool> g_forked_child{false};
void OnForkChild() {
  if (g_called.load(std::memory_order_relaxed)) g_forked_child.store(true);
}
[[maybe_unused]] const int g_atfork_registered = pthread_atfork(nullptr, nullptr, &OnForkChild);
bool ForkedChild() {
  if (!g_called.load(std::memory_order_relaxed)) g_called.store(true, std::memory_order_relaxed);
  return g_forked_child.load(std::memory_order_relaxed);
}
#else
bool ForkedChild() { return false; }
#endif

std::atomic<int> g_num_threads{0};
constexpr int kMaxThreads = 1024;  // the pool's word holds the count in 16 bits

// The thread count follows OpenMP's settings (OMP_NUM_THREADS, omp_set_num_threads, threadpoolctl)
// unless fastln_set_num_threads set one. Inside a caller's OpenMP parallel region a call runs on
// its own thread, as a nested region would with libgomp's defaults.
int MaxThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
#ifdef _OPENMP
  if (ForkedChild() || omp_in_parallel()) return 1;
  const int m = n > 0 ? n : omp_get_max_threads();
  return m < kMaxThreads ? m : kMaxThreads;
#else
  (void)n;
  return 1;
#endif
}

// A thread gets at least this many elements: below it, waking a second thread costs more than it
// saves. Measured on the 2-core dev machine (float32, out= given, 1 vs 2 threads): 8x768 0.8x,
// 16x768 1.0x, 4x4096 and 128x64 1.15x, 32x768 1.3x, 256x64 1.45x, 64x768 1.5x, 128x768 1.7x.
// Again with the thread pool (Xeon guest, family 6 model 167, 2026-12-06, layer_norm with weight
// and bias, out=, 2 threads forced on every shape, 1-thread time over 2-thread, two runs): float32
// 8x768 0.81-0.84, 8x1024 0.90-0.93, 128x64 0.96-1.07, 16x768 0.97-1.12, 16x1024 1.01-1.15,
// 4x4096 1.09-1.28; float64 8x768 1.09-1.11, 8x1024 1.16-1.17, 2x4096 1.31, 128x64 1.15-1.17,
// 4x768 0.82-0.89; float64 rms_norm 8x1024 1.06, 2x4096 1.18, 128x64 1.29. So the forward passes
// count the bytes of the values they compute on (kMinBytesPerThread, ParallelRows): float32 and
// 16-bit rows (computed in float32) split from 16384 values as before, float64 from 8192.
constexpr int64_t kMinElemsPerThread = 8 * 1024;
constexpr int64_t kMinBytesPerThread = kMinElemsPerThread * int64_t(sizeof(float));

// Contiguous blocks of rows, sizes differing by at most one (oneDNN's balance211). A row is never
// split, so each output element is computed by the same instructions whatever the thread count.
inline void Balance(int64_t rows, int nthr, int ithr, int64_t *begin, int64_t *end) {
  const int64_t base = rows / nthr, extra = rows % nthr;
  *begin = ithr * base + (ithr < extra ? ithr : extra);
  *end = *begin + base + (ithr < extra ? 1 : 0);
}

#ifdef _OPENMP
// Never freed: a forked child holds the parent's pool without its threads, so only the reaper
// below, in the process that started them, may join them.
ThreadPool &Pool() {
  static ThreadPool *const pool = new ThreadPool;
  return *pool;
}

struct PoolReaper {
  ~PoolReaper() {
    if (!ForkedChild()) Pool().Stop();
  }
} g_pool_reaper;
#endif

// Which thread runs a part: 0 for the caller, i in [1, n) for the pool's threads in a call of n
// parts, so that whatever a thread keeps for the call can be found by it in one of n slots.
inline int Worker() {
#ifdef _OPENMP
  return ThreadPool::Worker();
#else
  return 0;
#endif
}

// body(i, n) for i in [0, n) on n threads, or body(0, 1) alone on this one when the pool is taken.
template <class Body>
void OnThreads(int n, Body body) {
#ifdef _OPENMP
  const ThreadPool::Task task = [](void *ctx, int i, int m) { (*static_cast<Body *>(ctx))(i, m); };
  if (Pool().Run(n, task, &body)) return;
#else
  (void)n;
#endif
  body(0, 1);
}

// Spans of T: see spans.h.
template <class T>
inline bool Spans(int64_t rows, int64_t cols, int64_t ld) {
  return SpansFit(rows, cols, ld, int64_t(sizeof(T)));
}

// How many threads a forward call of rows x cols takes: one per kMinBytesPerThread of the type the
// kernels compute in (kBytes), at most one a row.
inline int64_t RowThreads(int64_t rows, int64_t cols, int64_t kBytes) {
  int64_t nt = MaxThreads();
  const int64_t by_work = (rows * cols) / (kMinBytesPerThread / kBytes);
  if (nt > by_work) nt = by_work;
  if (nt > rows) nt = rows;
  return nt < 1 ? 1 : nt;
}

// body(i, r0, r1) for the rows [r0, r1) of part i < nt, each part on one thread (fewer parts where
// fewer threads run).
template <class Body>
void RowParts(int64_t nt, int64_t rows, Body body) {
  if (nt <= 1 || ForkedChild()) {
    body(0, 0, rows);
    return;
  }
  OnThreads(int(nt), [&](int i, int n) {
    int64_t b, e;
    Balance(rows, n, i, &b, &e);
    if (b < e) body(i, b, e);
  });
}

template <class Args, class Fn>
void ParallelRows(const Args &args, Fn fn, int64_t rows, int64_t cols) {
  // The type of the parameters and statistics: the one the kernels compute in.
  constexpr int64_t kBytes = int64_t(sizeof(*args.weight));
  RowParts(RowThreads(rows, cols, kBytes), rows,
           [&](int, int64_t b, int64_t e) { fn(args, b, e); });
}

template <class T>
int LayerNorm(const T *x, int64_t ldx, T *y, int64_t ldy, const T *w, const T *b, T *mean,
              T *rstd, int64_t rows, int64_t cols, double eps, int flags,
              LayerNormRowsFn<T> KernelTable::*fn) {
  if (rows > 0 && (!x || !y)) return FASTLN_ERR_NULL_POINTER;
  if (flags & ~FASTLN_Y_FRESH) return FASTLN_ERR_BAD_ARGUMENT;
  if (rows < 0 || cols <= 0 || ldx < cols || ldy < cols) return FASTLN_ERR_BAD_SHAPE;
  if (!Spans<T>(rows, cols, ldx) || !Spans<T>(rows, cols, ldy)) return FASTLN_ERR_BAD_SHAPE;
  if (!(eps >= 0) || eps - eps != 0) return FASTLN_ERR_BAD_EPS;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  if (rows == 0) return FASTLN_OK;
  const LayerNormArgs<T> args{x, ldx, y, ldy, w, b, mean, rstd, cols, eps,
                              (flags & FASTLN_Y_FRESH) == 0, rows};
  ParallelRows(args, t->*fn, rows, cols);
  return FASTLN_OK;
}

// ---- backward ---------------------------------------------------------------------------------

// Rows per block of the dweight/dbias partial sums. Set by the shape alone, never by the thread
// count, so that the sums come out the same at any thread count. Long rows get shorter blocks: more
// blocks to share among threads, while the scratch (2 * cols values per block) stays at most 1/16
// of the input's bytes.
inline int64_t BackwardBlockRows(int64_t cols) { return cols >= 8192 ? 16 : 64; }

// fn(begin, end) over [0, items) in contiguous ranges, one per thread.
template <class Fn>
void ParallelRanges(int64_t items, int64_t nt, Fn fn) {
  if (nt > items) nt = items;
  if (nt <= 1) {
    fn(int64_t(0), items);
    return;
  }
  OnThreads(int(nt), [&](int i, int n) {
    int64_t b, e;
    Balance(items, n, i, &b, &e);
    if (b < e) fn(b, e);
  });
}

inline int64_t ThreadsFor(int64_t elems) {
  int64_t nt = MaxThreads();
  const int64_t by_work = elems / kMinElemsPerThread;
  return nt < by_work ? nt : by_work;
}

// Scratch memory reused by the calling thread's next call. A fresh malloc of a few hundred KiB is
// a fresh mmap, and its page faults cost more than a 8x16384 backward pass itself. Buffers up to
// kKeepBytes stay; larger ones are freed after the call.
constexpr size_t kKeepBytes = size_t(8) << 20;

struct Workspace {
  void *p = nullptr;
  size_t bytes = 0;
  ~Workspace() { free(p); }
  void *Get(size_t n) {
    if (n <= bytes) return p;
    free(p);
    p = malloc(n);
    bytes = p ? n : 0;
    return p;
  }
  void Trim() {
    if (bytes > kKeepBytes) {
      free(p);
      p = nullptr;
      bytes = 0;
    }
  }
};
thread_local Workspace t_workspace;

// T: the storage type of dy, x and dx; P: that of the statistics, weight and gradients (see
// NormBackwardArgs).
template <class T, class P>
int NormBackward(const NormBackwardArgs<T, P> &a, int64_t rows, P *dweight, P *dbias,
                 NormBackwardRowsFn<T, P> KernelTable::*fn) {
  const int64_t cols = a.cols;
  if (rows > 0 && (!a.dy || !a.x || !a.dx || !a.rstd)) return FASTLN_ERR_NULL_POINTER;
  if (rows < 0 || cols <= 0 || a.lddy < cols || a.ldx < cols || a.lddx < cols)
    return FASTLN_ERR_BAD_SHAPE;
  if (!Spans<T>(rows, cols, a.lddy) || !Spans<T>(rows, cols, a.ldx) ||
      !Spans<T>(rows, cols, a.lddx) || !Spans<P>(2, cols, cols))  // dweight and dbias partials
    return FASTLN_ERR_BAD_SHAPE;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  const NormBackwardRowsFn<T, P> kernel = t->*fn;
  if (!dweight && !dbias) {
    if (rows > 0)
      ParallelRanges(rows, ThreadsFor(rows * cols),
                     [&](int64_t b, int64_t e) { kernel(a, b, e, nullptr, nullptr); });
    return FASTLN_OK;
  }

  // Partials per block, in P: dw[cols] then, for layer norm, db[cols]. sum[per] adds them up in
  // double, starting from block 0's, in block order, whether one thread does it as the blocks come
  // (holding one block's partials) or threads split the columns after all blocks are done (holding
  // every block's).
  const bool center = a.mean != nullptr;
  const int64_t per = center ? 2 * cols : cols;
  const int64_t block = BackwardBlockRows(cols);
  const int64_t nblocks = (rows + block - 1) / block;
  if (nblocks == 0) {
    // dbias is null for RMSNorm; a layer norm of no rows may come without mean (null, as x is).
    for (int64_t j = 0; j < cols; ++j) {
      if (dweight) dweight[j] = P(0);
      if (dbias) dbias[j] = P(0);
    }
    return FASTLN_OK;
  }
  int64_t nt = ThreadsFor(rows * cols);
  if (nt > nblocks) nt = nblocks;
  const int64_t nparts = nt > 1 ? nblocks : 1;
  if (nparts > (INT64_MAX / 2 - 64) / int64_t(sizeof(double)) / per) return FASTLN_ERR_NO_MEMORY;
  double *sum = static_cast<double *>(
      t_workspace.Get(static_cast<size_t>(per * int64_t(sizeof(double)) + nparts * per *
                                          int64_t(sizeof(P)))));
  if (!sum) return FASTLN_ERR_NO_MEMORY;
  P *parts = reinterpret_cast<P *>(sum + per);
  auto run_block = [&](int64_t b, P *p) {
    const int64_t r1 = (b + 1) * block < rows ? (b + 1) * block : rows;
    kernel(a, b * block, r1, p, center ? p + cols : nullptr);
  };
  auto fold = [&](int64_t b, const P *p, int64_t j0, int64_t j1) {
    if (b == 0) {
      for (int64_t j = j0; j < j1; ++j) sum[j] = double(p[j]);
    } else {
      for (int64_t j = j0; j < j1; ++j) sum[j] += double(p[j]);
    }
  };
  if (nt <= 1) {
    for (int64_t b = 0; b < nblocks; ++b) {
      run_block(b, parts);
      if (nblocks > 1) fold(b, parts, 0, per);
    }
  } else {
    ParallelRanges(nblocks, nt, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) run_block(b, parts + b * per);
    });
    ParallelRanges(per, ThreadsFor(nblocks * per), [&](int64_t j0, int64_t j1) {
      for (int64_t b = 0; b < nblocks; ++b) fold(b, parts + b * per, j0, j1);
    });
  }
  for (int64_t j = 0; j < cols; ++j) {
    // One block: its partials are the sums, as P(double(p)) == p.
    if (dweight) dweight[j] = nblocks > 1 ? P(sum[j]) : parts[j];
    if (dbias && center) dbias[j] = nblocks > 1 ? P(sum[cols + j]) : parts[cols + j];
  }
  t_workspace.Trim();
  return FASTLN_OK;
}

template <class T, class P = T>
int LayerNormBackward(const T *dy, int64_t lddy, const T *x, int64_t ldx, const P *mean,
                      const P *rstd, const P *w, T *dx, int64_t lddx, P *dweight, P *dbias,
                      int64_t rows, int64_t cols, NormBackwardRowsFn<T, P> KernelTable::*fn) {
  if (rows > 0 && !mean) return FASTLN_ERR_NULL_POINTER;
  const NormBackwardArgs<T, P> args{dy, lddy, x, ldx, dx, lddx, mean, rstd, w, cols};
  return NormBackward(args, rows, dweight, dbias, fn);
}

template <class T, class P = T>
int RmsNormBackward(const T *dy, int64_t lddy, const T *x, int64_t ldx, const P *rstd,
                    const P *w, T *dx, int64_t lddx, P *dweight, int64_t rows, int64_t cols,
                    NormBackwardRowsFn<T, P> KernelTable::*fn) {
  const NormBackwardArgs<T, P> args{dy, lddy, x, ldx, dx, lddx, nullptr, rstd, w, cols};
  return NormBackward(args, rows, dweight, static_cast<P *>(nullptr), fn);
}

// Weight and bias of 16-bit rows in x's own format, for the binding (binding/add_norm16.h).
struct Params16 {
  const uint16_t *w, *b;
  WidenFn KernelTable::*widen;
};

thread_local Workspace t_params;

// `fn` with the 16-bit weight and bias widened to float: a copy for each thread that takes part,
// widened by that thread. Widened once by the caller, they were lines just written in
// the caller's cache, and every other thread fetched them from there on every call. Measured on the
// Xeon guest (family 6 model 167, 2026-12-06, float16, weight and bias, out=, best of 11 rounds, 1
// thread against 2, us): 8x16384 22.2 against 43.7, 4x4096 4.2 against 8.1, 8x4096 6.7 against
// 9.9; float32 weight and bias copied into place by the caller before each call did the same
// (8x16384 27.9 against 30.5, 22.1 against 12.9 when left alone). Widened by each thread: 8x16384
// 22.1-23.4 against 13.8-14.5, 4x4096 3.4-3.6 against 2.9 (docs/performance-notes.md). The copies
// lie in one buffer the caller holds, allocated before any row is written, so that running out of
// memory leaves y, h and the statistics as they were on any number of threads (each thread
// allocating its own, the threads that got theirs wrote their rows).
template <class T>
int WithParams16(const AddNormArgs<T, float> &a, const Params16 &p, int64_t rows,
                 WidenFn widen, AddNormRowsFn<T, float> fn) {
  const int64_t n = a.cols;
  const int64_t nt = RowThreads(rows, n, int64_t(sizeof(float)));
  const int64_t stride = (n + 15) / 16 * 16;  // floats: each copy starts on a line
  if (nt > (INT64_MAX / 2 - 64) / int64_t(sizeof(float)) / (2 * stride)) {
    return FASTLN_ERR_NO_MEMORY;
  }
  void *raw = t_params.Get(static_cast<size_t>(nt * 2 * stride * int64_t(sizeof(float)) + 64));
  if (!raw) return FASTLN_ERR_NO_MEMORY;
  float *const base =
      reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(raw) + 63) & ~uintptr_t(63));
  // Whether a thread's copy is widened yet in this call: a thread that runs a second part (the
  // caller, taking one a late pool thread left) reuses it. Each entry is touched by one thread.
  bool widened[kMaxThreads] = {};
  RowParts(nt, rows, [&](int, int64_t r0, int64_t r1) {
    const int s = Worker();
    float *const buf = base + s * 2 * stride;
    AddNormArgs<T, float> c = a;
    c.weight = p.w ? buf : c.weight;
    c.bias = p.b ? buf + stride : c.bias;
    if (!widened[s]) {
      if (p.w) widen(p.w, buf, n);
      if (p.b) widen(p.b, buf + stride, n);
      widened[s] = true;
    }
    fn(c, r0, r1);
  });
  t_params.Trim();
  return *a.status;
}

template <class T, class P>
int AddNorm(const AddNormArgs<T, P> &a, int64_t rows, AddNormRowsFn<T, P> KernelTable::*fn,
            const Params16 *p16 = nullptr) {
  if (rows > 0 && (!a.x || !a.y || (a.res && !a.h))) return FASTLN_ERR_NULL_POINTER;
  const int64_t n = a.cols;
  if (rows < 0 || n <= 0 || a.ldx < n || a.ldy < n || (a.res && (a.ldr < n || a.ldh < n))) {
    return FASTLN_ERR_BAD_SHAPE;
  }
  if (!Spans<T>(rows, n, a.ldx) || !Spans<T>(rows, n, a.ldy) ||
      (a.res && (!Spans<T>(rows, n, a.ldr) || !Spans<T>(rows, n, a.ldh)))) {
    return FASTLN_ERR_BAD_SHAPE;
  }
  if (!(a.eps >= 0) || a.eps - a.eps != 0) return FASTLN_ERR_BAD_EPS;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  if (rows == 0) return FASTLN_OK;
  int status = FASTLN_OK;
  AddNormArgs<T, P> args = a;
  args.status = &status;
  args.call_rows = rows;
  if constexpr (std::is_same<P, float>::value && sizeof(T) == 2) {
    if (p16 && (p16->w || p16->b)) {
      return WithParams16<T>(args, *p16, rows, t->*(p16->widen), t->*fn);
    }
  }
  ParallelRows(args, t->*fn, rows, n);
  return status;
}

// Examples stored as columns: the threads take contiguous ranges of examples (of columns of x).
template <class T>
int LayerNormCols(const T *x, int64_t ldx, T *y, int64_t ldy, const T *w, const T *b, T *mean,
                  T *rstd, int64_t examples, int64_t cols, double eps,
                  AddNormRowsFn<T, T> KernelTable::*fn) {
  if (examples > 0 && (!x || !y)) return FASTLN_ERR_NULL_POINTER;
  if (examples < 0 || cols <= 0 || ldx < examples || ldy < examples) return FASTLN_ERR_BAD_SHAPE;
  // Stored as cols rows of `examples` values, ld apart.
  if (examples > 0 && (!Spans<T>(cols, examples, ldx) || !Spans<T>(cols, examples, ldy)))
    return FASTLN_ERR_BAD_SHAPE;
  if (!(eps >= 0) || eps - eps != 0) return FASTLN_ERR_BAD_EPS;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  if (examples == 0) return FASTLN_OK;
  int status = FASTLN_OK;
  const AddNormArgs<T, T> args{x, ldx, nullptr, 0,    nullptr, 0,   y,       ldy,
                               w, b,   mean,    rstd, cols,    eps, &status, examples};
  ParallelRows(args, t->*fn, examples, cols);
  return status;
}

int Widen(const uint16_t *src, float *dst, int64_t n, WidenFn KernelTable::*fn) {
  if (n < 0 || !Spans<float>(1, n, n)) return FASTLN_ERR_BAD_SHAPE;
  if (n > 0 && (!src || !dst)) return FASTLN_ERR_NULL_POINTER;
  const KernelTable *t = ActiveTable();
  if (!t) return InitStatus();
  (t->*fn)(src, dst, n);
  return FASTLN_OK;
}

}  // namespace

int BindingAddNorm16(int bf16, int rms, const uint16_t *x, int64_t ldx, const uint16_t *residual,
                     int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                     const float *weight, const float *bias, const uint16_t *weight16,
                     const uint16_t *bias16, float *mean, float *rstd, int64_t rows, int64_t cols,
                     double eps) {
  if ((weight && weight16) || (bias && bias16) || (rms && (bias || bias16 || mean))) {
    return FASTLN_ERR_BAD_ARGUMENT;
  }
  const Params16 p{weight16, bias16, bf16 ? &KernelTable::widen_bf16 : &KernelTable::widen_f16};
  const AddNormArgs<uint16_t, float> a{x,    ldx,  residual, ldr,  h,   ldh,    y,      ldy,
                                       weight, bias, mean,   rstd, cols, eps, nullptr};
  AddNormRowsFn<uint16_t, float> KernelTable::*fn =
      rms ? (bf16 ? &KernelTable::add_rms_norm_bf16 : &KernelTable::add_rms_norm_f16)
          : (bf16 ? &KernelTable::add_layer_norm_bf16 : &KernelTable::add_layer_norm_f16);
  return AddNorm<uint16_t, float>(a, rows, fn, &p);
}

}  // namespace fastln

using fastln::AddNorm;
using fastln::AddNormArgs;
using fastln::LayerNorm;
using fastln::LayerNormBackward;
using fastln::RmsNormBackward;
using fastln::KernelTable;

extern "C" {

int fastln_layer_norm_f32(const float *x, float *y, const float *weight, const float *bias,
                          float *mean, float *rstd, int64_t rows, int64_t cols, float eps) {
  return LayerNorm<float>(x, cols, y, cols, weight, bias, mean, rstd, rows, cols, eps, 0,
                          &KernelTable::layer_norm_f32);
}

int fastln_layer_norm_f64(const double *x, double *y, const double *weight, const double *bias,
                          double *mean, double *rstd, int64_t rows, int64_t cols, double eps) {
  return LayerNorm<double>(x, cols, y, cols, weight, bias, mean, rstd, rows, cols, eps, 0,
                           &KernelTable::layer_norm_f64);
}

int fastln_layer_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy,
                             const float *weight, const float *bias, float *mean, float *rstd,
                             int64_t rows, int64_t cols, double eps) {
  return LayerNorm<float>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps, 0,
                          &KernelTable::layer_norm_f32);
}

int fastln_layer_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                             const double *weight, const double *bias, double *mean,
                             double *rstd, int64_t rows, int64_t cols, double eps) {
  return LayerNorm<double>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps, 0,
                           &KernelTable::layer_norm_f64);
}

int fastln_layer_norm_f32_ex(const float *x, int64_t ldx, float *y, int64_t ldy,
                             const float *weight, const float *bias, float *mean, float *rstd,
                             int64_t rows, int64_t cols, double eps, int flags) {
  return LayerNorm<float>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps, flags,
                          &KernelTable::layer_norm_f32);
}

int fastln_layer_norm_f64_ex(const double *x, int64_t ldx, double *y, int64_t ldy,
                             const double *weight, const double *bias, double *mean,
                             double *rstd, int64_t rows, int64_t cols, double eps, int flags) {
  return LayerNorm<double>(x, ldx, y, ldy, weight, bias, mean, rstd, rows, cols, eps, flags,
                           &KernelTable::layer_norm_f64);
}

int fastln_rms_norm_f32(const float *x, float *y, const float *weight, float *rstd, int64_t rows,
                        int64_t cols, float eps) {
  return LayerNorm<float>(x, cols, y, cols, weight, nullptr, nullptr, rstd, rows, cols, eps, 0,
                          &KernelTable::rms_norm_f32);
}

int fastln_rms_norm_f64(const double *x, double *y, const double *weight, double *rstd,
                        int64_t rows, int64_t cols, double eps) {
  return LayerNorm<double>(x, cols, y, cols, weight, nullptr, nullptr, rstd, rows, cols, eps, 0,
                           &KernelTable::rms_norm_f64);
}

int fastln_rms_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy, const float *weight,
                           float *rstd, int64_t rows, int64_t cols, double eps) {
  return LayerNorm<float>(x, ldx, y, ldy, weight, nullptr, nullptr, rstd, rows, cols, eps, 0,
                          &KernelTable::rms_norm_f32);
}

int fastln_rms_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                           const double *weight, double *rstd, int64_t rows, int64_t cols,
                           double eps) {
  return LayerNorm<double>(x, ldx, y, ldy, weight, nullptr, nullptr, rstd, rows, cols, eps, 0,
                           &KernelTable::rms_norm_f64);
}

int fastln_layer_norm_backward_f32(const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *weight, float *dx,
                                   float *dweight, float *dbias, int64_t rows, int64_t cols) {
  return LayerNormBackward<float>(dy, cols, x, cols, mean, rstd, weight, dx, cols, dweight, dbias,
                                  rows, cols, &KernelTable::layer_norm_backward_f32);
}

int fastln_layer_norm_backward_f64(const double *dy, const double *x, const double *mean,
                                   const double *rstd, const double *weight, double *dx,
                                   double *dweight, double *dbias, int64_t rows, int64_t cols) {
  return LayerNormBackward<double>(dy, cols, x, cols, mean, rstd, weight, dx, cols, dweight,
                                   dbias, rows, cols, &KernelTable::layer_norm_backward_f64);
}

int fastln_layer_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x, int64_t ldx,
                                      const float *mean, const float *rstd, const float *weight,
                                      float *dx, int64_t lddx, float *dweight, float *dbias,
                                      int64_t rows, int64_t cols) {
  return LayerNormBackward<float>(dy, lddy, x, ldx, mean, rstd, weight, dx, lddx, dweight, dbias,
                                  rows, cols, &KernelTable::layer_norm_backward_f32);
}

int fastln_layer_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x,
                                      int64_t ldx, const double *mean, const double *rstd,
                                      const double *weight, double *dx, int64_t lddx,
                                      double *dweight, double *dbias, int64_t rows, int64_t cols) {
  return LayerNormBackward<double>(dy, lddy, x, ldx, mean, rstd, weight, dx, lddx, dweight, dbias,
                                   rows, cols, &KernelTable::layer_norm_backward_f64);
}

int fastln_rms_norm_backward_f32(const float *dy, const float *x, const float *rstd,
                                 const float *weight, float *dx, float *dweight, int64_t rows,
                                 int64_t cols) {
  return RmsNormBackward<float>(dy, cols, x, cols, rstd, weight, dx, cols, dweight, rows, cols,
                                &KernelTable::rms_norm_backward_f32);
}

int fastln_rms_norm_backward_f64(const double *dy, const double *x, const double *rstd,
                                 const double *weight, double *dx, double *dweight, int64_t rows,
                                 int64_t cols) {
  return RmsNormBackward<double>(dy, cols, x, cols, rstd, weight, dx, cols, dweight, rows, cols,
                                 &KernelTable::rms_norm_backward_f64);
}

int fastln_rms_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x, int64_t ldx,
                                    const float *rstd, const float *weight, float *dx,
                                    int64_t lddx, float *dweight, int64_t rows, int64_t cols) {
  return RmsNormBackward<float>(dy, lddy, x, ldx, rstd, weight, dx, lddx, dweight, rows, cols,
                                &KernelTable::rms_norm_backward_f32);
}

int fastln_rms_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x, int64_t ldx,
                                    const double *rstd, const double *weight, double *dx,
                                    int64_t lddx, double *dweight, int64_t rows, int64_t cols) {
  return RmsNormBackward<double>(dy, lddy, x, ldx, rstd, weight, dx, lddx, dweight, rows, cols,
                                 &KernelTable::rms_norm_backward_f64);
}

int fastln_layer_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                      int64_t ldx, const float *mean, const float *rstd,
                                      const float *weight, uint16_t *dx, int64_t lddx,
                                      float *dweight, float *dbias, int64_t rows, int64_t cols) {
  return LayerNormBackward<uint16_t, float>(dy, lddy, x, ldx, mean, rstd, weight, dx, lddx,
                                            dweight, dbias, rows, cols,
                                            &KernelTable::layer_norm_backward_f16);
}

int fastln_layer_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                       int64_t ldx, const float *mean, const float *rstd,
                                       const float *weight, uint16_t *dx, int64_t lddx,
                                       float *dweight, float *dbias, int64_t rows, int64_t cols) {
  return LayerNormBackward<uint16_t, float>(dy, lddy, x, ldx, mean, rstd, weight, dx, lddx,
                                            dweight, dbias, rows, cols,
                                            &KernelTable::layer_norm_backward_bf16);
}

int fastln_rms_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                    int64_t ldx, const float *rstd, const float *weight,
                                    uint16_t *dx, int64_t lddx, float *dweight, int64_t rows,
                                    int64_t cols) {
  return RmsNormBackward<uint16_t, float>(dy, lddy, x, ldx, rstd, weight, dx, lddx, dweight,
                                          rows, cols, &KernelTable::rms_norm_backward_f16);
}

int fastln_rms_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                     int64_t ldx, const float *rstd, const float *weight,
                                     uint16_t *dx, int64_t lddx, float *dweight, int64_t rows,
                                     int64_t cols) {
  return RmsNormBackward<uint16_t, float>(dy, lddy, x, ldx, rstd, weight, dx, lddx, dweight,
                                          rows, cols, &KernelTable::rms_norm_backward_bf16);
}

int fastln_add_layer_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                              float *h, int64_t ldh, float *y, int64_t ldy, const float *weight,
                              const float *bias, float *mean, float *rstd, int64_t rows,
                              int64_t cols, double eps) {
  return AddNorm<float, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, bias, mean, rstd,
                                cols, eps, nullptr},
                               rows, &KernelTable::add_layer_norm_f32);
}

int fastln_add_layer_norm_f64(const double *x, int64_t ldx, const double *residual, int64_t ldr,
                              double *h, int64_t ldh, double *y, int64_t ldy,
                              const double *weight, const double *bias, double *mean,
                              double *rstd, int64_t rows, int64_t cols, double eps) {
  return AddNorm<double, double>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, bias, mean, rstd,
                                  cols, eps, nullptr},
                                 rows, &KernelTable::add_layer_norm_f64);
}

int fastln_add_layer_norm_f16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                              int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                              const float *weight, const float *bias, float *mean, float *rstd,
                              int64_t rows, int64_t cols, double eps) {
  return AddNorm<uint16_t, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, bias, mean,
                                   rstd, cols, eps, nullptr},
                                  rows, &KernelTable::add_layer_norm_f16);
}

int fastln_add_layer_norm_bf16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                               int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                               const float *weight, const float *bias, float *mean, float *rstd,
                               int64_t rows, int64_t cols, double eps) {
  return AddNorm<uint16_t, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, bias, mean,
                                   rstd, cols, eps, nullptr},
                                  rows, &KernelTable::add_layer_norm_bf16);
}

int fastln_add_rms_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                            float *h, int64_t ldh, float *y, int64_t ldy, const float *weight,
                            float *rstd, int64_t rows, int64_t cols, double eps) {
  return AddNorm<float, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, nullptr, nullptr,
                                rstd, cols, eps, nullptr},
                               rows, &KernelTable::add_rms_norm_f32);
}

int fastln_add_rms_norm_f64(const double *x, int64_t ldx, const double *residual, int64_t ldr,
                            double *h, int64_t ldh, double *y, int64_t ldy, const double *weight,
                            double *rstd, int64_t rows, int64_t cols, double eps) {
  return AddNorm<double, double>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, nullptr,
                                  nullptr, rstd, cols, eps, nullptr},
                                 rows, &KernelTable::add_rms_norm_f64);
}

int fastln_add_rms_norm_f16(const uint16_t *x, int64_t ldx, const uint16_t *residual, int64_t ldr,
                            uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                            const float *weight, float *rstd, int64_t rows, int64_t cols,
                            double eps) {
  return AddNorm<uint16_t, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, nullptr,
                                   nullptr, rstd, cols, eps, nullptr},
                                  rows, &KernelTable::add_rms_norm_f16);
}

int fastln_add_rms_norm_bf16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                             int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                             const float *weight, float *rstd, int64_t rows, int64_t cols,
                             double eps) {
  return AddNorm<uint16_t, float>({x, ldx, residual, ldr, h, ldh, y, ldy, weight, nullptr,
                                   nullptr, rstd, cols, eps, nullptr},
                                  rows, &KernelTable::add_rms_norm_bf16);
}

int fastln_layer_norm_cols_f32(const float *x, int64_t ldx, float *y, int64_t ldy,
                               const float *weight, const float *bias, float *mean, float *rstd,
                               int64_t examples, int64_t cols, double eps) {
  return fastln::LayerNormCols<float>(x, ldx, y, ldy, weight, bias, mean, rstd, examples, cols,
                                      eps, &KernelTable::layer_norm_cols_f32);
}

int fastln_layer_norm_cols_f64(const double *x, int64_t ldx, double *y, int64_t ldy,
                               const double *weight, const double *bias, double *mean,
                               double *rstd, int64_t examples, int64_t cols, double eps) {
  return fastln::LayerNormCols<double>(x, ldx, y, ldy, weight, bias, mean, rstd, examples, cols,
                                       eps, &KernelTable::layer_norm_cols_f64);
}

int fastln_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  return fastln::Widen(src, dst, n, &KernelTable::widen_f16);
}

int fastln_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  return fastln::Widen(src, dst, n, &KernelTable::widen_bf16);
}

const char *fastln_status_string(int status) {
  switch (status) {
    case FASTLN_OK: return "success";
    case FASTLN_ERR_NULL_POINTER: return "a required pointer is NULL";
    case FASTLN_ERR_BAD_SHAPE:
      return "bad shape: rows < 0, cols <= 0, a leading dimension < cols, or arrays that would span "
             "more than PTRDIFF_MAX bytes";
    case FASTLN_ERR_BAD_EPS: return "eps must be finite and >= 0";
    case FASTLN_ERR_UNKNOWN_ISA: return "unknown ISA name (known: scalar, avx2, avx512, neon)";
    case FASTLN_ERR_UNSUPPORTED_ISA: return "this CPU or build cannot run the requested ISA";
    case FASTLN_ERR_BAD_ARGUMENT: return "invalid argument";
    case FASTLN_ERR_NO_MEMORY: return "out of memory for a scratch buffer";
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
