// The CUDA kernels of src/cuda/norm-inl.cuh, run on the CPU.
//
// This file defines the few device builtins the kernels use (threadIdx and friends, __syncthreads,
// warp shuffles, shared and dynamic shared memory, the launch) over coroutines (ucontext):
// every CUDA thread of a block is a host thread, blocks run one after another. It then includes
// the kernels unchanged and checks every path (each tier of threads per row, the unaligned
// fallback, the loop kernels for long rows, the fused residual, in-place, backward with its
// partial sums) against a double-precision reference, in float, __half and __nv_bfloat16.
//
// What it cannot check: real memory alignment faults, register or shared-memory limits, timing.
// tests/test_cuda.py builds it with g++ (C++20) and the CUDA headers, and runs it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <driver_types.h>
#include <vector_types.h>

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Blocks run one at a time, so a function-static array is the block's shared memory.
#define __shared__ static

dim3 threadIdx, blockIdx, gridDim, blockDim;
using std::isfinite;  // a global function in device code

// The threads of a block are coroutines (ucontext) on one OS thread. Each runs until its next
// synchronization point and yields: a warp exchange (the scheduler runs every thread once per
// sweep, so all lanes of a warp reach it in the same sweep) or __syncthreads (released only once
// every live thread of the block waits there; a thread that ends while others wait is an error,
// as on the GPU).
namespace emu {

// Switching coroutines: on x86-64 a few instructions (callee-saved registers and the stack
// pointer); elsewhere ucontext, which costs a system call per switch (the signal mask).
#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *load_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");
struct Context {
  void *sp = nullptr;
};
inline void Switch(Context *from, Context *to) { emu_switch(&from->sp, to->sp); }
inline void Start(Context *c, std::vector<char> &stack, void (*fn)()) {
  uintptr_t top = (uintptr_t(stack.data()) + stack.size()) & ~uintptr_t(15);
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;                         // fn's return address: fn never returns
  *--sp = reinterpret_cast<void *>(fn);    // where emu_switch's ret goes
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12-r15
  c->sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void Switch(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
inline void Start(Context *c, std::vector<char> &stack, void (*fn)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack.data();
  c->uc.uc_stack.ss_size = stack.size();
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
}
#endif

enum State { kRunnable, kAtBarrier, kDone };
struct Thread {
  Context ctx;
  std::vector<char> stack;
  State state = kRunnable;
};
Context scheduler;
std::vector<Thread> threads;
unsigned current = 0;
float slots[1024];
float *dynamic_smem = nullptr;
bool diverged = false;

inline void Yield(State s) {
  threads[current].state = s;
  Switch(&threads[current].ctx, &scheduler);
}

inline float Exchange(float v, unsigned src_lane) {
  const unsigned base = threadIdx.x / 32 * 32;
  slots[threadIdx.x] = v;
  Yield(kRunnable);  // every lane has written
  const float r = slots[base + src_lane];
  Yield(kRunnable);  // every lane has read
  return r;
}

void (*entry)(const void *) = nullptr;
const void *entry_args = nullptr;

void Trampoline() {
  entry(entry_args);
  Yield(kDone);  // never resumed
  std::abort();
}

// Runs one block of `n` threads to completion.
bool RunBlock(unsigned n) {
  if (threads.size() < 1024) {  // once: stacks are reused by every block
    threads.resize(1024);
    for (auto &th : threads) th.stack.resize(128 * 1024);
  }
  for (unsigned t = 0; t < n; ++t) {
    threads[t].state = kRunnable;
    Start(&threads[t].ctx, threads[t].stack, Trampoline);
  }
  for (;;) {
    unsigned runnable = 0, done = 0;
    for (unsigned t = 0; t < n; ++t) {
      if (threads[t].state != kRunnable) continue;
      current = t;
      threadIdx = dim3(t);
      Switch(&scheduler, &threads[t].ctx);
    }
    for (unsigned t = 0; t < n; ++t) {
      runnable += threads[t].state == kRunnable;
      done += threads[t].state == kDone;
    }
    if (done == n) return true;
    if (runnable == 0) {
      if (done > 0) return false;  // __syncthreads that not every thread reaches
      for (unsigned t = 0; t < n; ++t) threads[t].state = kRunnable;
    }
  }
}
}  // namespace emu

inline void __syncthreads() { emu::Yield(emu::kAtBarrier); }
inline float __shfl_xor_sync(unsigned, float v, int o, int width = 32) {
  const unsigned lane = threadIdx.x % 32, src = lane ^ unsigned(o);
  return emu::Exchange(v, (src / width == lane / width) ? src : lane);
}
inline float __shfl_sync(unsigned, float v, int src, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  return emu::Exchange(v, lane / width * width + unsigned(src) % width);
}
inline float *DynamicSmem() { return emu::dynamic_smem; }
inline bool __any_sync(unsigned, bool flag) {
  const unsigned base = threadIdx.x / 32 * 32;
  emu::slots[threadIdx.x] = flag ? 1.f : 0.f;
  emu::Yield(emu::kRunnable);
  bool any = false;
  for (unsigned l = 0; l < 32; ++l) any = any || emu::slots[base + l] != 0.f;
  emu::Yield(emu::kRunnable);
  return any;
}
inline int __syncthreads_or(int flag) {
  emu::slots[threadIdx.x] = flag ? 1.f : 0.f;
  __syncthreads();
  int any = 0;
  for (unsigned t = 0; t < blockDim.x; ++t) any = any || emu::slots[t] != 0.f;
  __syncthreads();
  return any;
}

template <class A>
cudaError_t EmulateLaunch(void (*kernel)(A), dim3 grid, dim3 block, size_t smem, const A &args) {
  if (block.x % 32 || block.x > 1024 || grid.x < 1) return cudaErrorInvalidValue;
  gridDim = grid;
  blockDim = block;
  static void (*k)(A);
  k = kernel;
  emu::entry = [](const void *p) { k(*static_cast<const A *>(p)); };
  emu::entry_args = &args;
  for (unsigned b = 0; b < grid.x; ++b) {
    // Fresh garbage in shared memory for every block: a read before a write shows up as NaN.
    std::vector<float> dyn(smem / sizeof(float) + 4, std::nanf(""));
    emu::dynamic_smem = dyn.data();
    blockIdx = dim3(b);
    if (!emu::RunBlock(block.x)) {
      emu::diverged = true;
      return cudaErrorInvalidValue;
    }
  }
  return cudaSuccess;
}

#define FASTLN_CUDA_EMULATE 1
#include "../../src/cuda/norm-inl.cuh"

namespace fastln_cuda {
// Three multiprocessors of one resident block each: grids of up to three blocks, so that blocks
// loop over several rows and the partial sums of several blocks are folded.
cudaError_t DeviceFacts(int, int *sms, int *smem_optin) {
  *sms = 3;
  *smem_optin = 227 * 1024;
  return cudaSuccess;
}
cudaError_t BlocksPerSm(const void *, int, int, size_t, int *blocks) {
  *blocks = 1;
  return cudaSuccess;
}
}  // namespace fastln_cuda

// ---- checks ---------------------------------------------------------------------------------------

namespace {

int g_failures = 0;
int g_checks = 0;

template <class T>
float F(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}
template <class T>
T Round(double v) {
  if constexpr (std::is_same_v<T, float>) return float(v);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else return __float2bfloat16_rn(float(v));
}
template <class T>
double Tol() {
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  else if constexpr (std::is_same_v<T, __half>) return 2e-3;
  else return 1.6e-2;
}
template <class T>
const char *Name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, __half>) return "float16";
  else return "bfloat16";
}

void Expect(bool ok, const char *what, const char *dtype, int64_t rows, int64_t cols,
            const char *variant, double got, double want) {
  ++g_checks;
  if (ok) return;
  static const int cap = std::getenv("EMU_SHOW") ? std::atoi(std::getenv("EMU_SHOW")) : 30;
  if (++g_failures <= cap)
    std::printf("FAIL %s %s rows=%lld cols=%lld %s: got %.9g want %.9g\n", what, dtype,
                (long long)rows, (long long)cols, variant, got, want);
}

bool Close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
}

struct Variant {
  bool rms, residual, weight, misalign, inplace;
  int64_t pad;  // extra elements per row (ld = cols + pad)
  double offset;
  const char *name;
  double magnitude = 2.0;  // spread of the values
};

template <class T>
void CheckOne(int64_t rows, int64_t cols, const Variant &v, std::mt19937_64 &gen) {
  using namespace fastln_cuda;
  const char *dt = Name<T>();
  const int64_t ld = cols + v.pad;
  const int64_t mis = v.misalign ? 1 : 0;  // start one element off a 16-byte boundary
  const size_t n = size_t(rows * ld + 16);
  std::normal_distribution<double> nd(0.0, 1.0);
  // Finite values only: the rows near float32's limit stay below it.
  auto fill = [&](std::vector<T> &a, double off, double spread) {
    a.resize(n);
    for (auto &e : a) e = Round<T>(std::clamp(off + spread * nd(gen), -3.3e38, 3.3e38));
  };
  std::vector<T> xs, rs, ys(n), hs(n), dys, dres, dxs(n);
  fill(xs, v.offset, v.magnitude);
  fill(rs, 0.0, v.magnitude);
  fill(dys, 0.0, 2.0);
  fill(dres, 0.0, 2.0);
  std::vector<float> w(cols + 8), b(cols + 8), mean(rows, -7.f), rstd(rows, -7.f);
  for (auto &e : w) e = float(nd(gen));
  for (auto &e : b) e = float(nd(gen));
  const T poison = Round<T>(12345.0);
  for (auto &e : ys) e = poison;
  for (auto &e : hs) e = poison;
  std::vector<T> x0 = xs;

  T *x = xs.data() + mis;
  T *r = v.residual ? rs.data() + mis : nullptr;
  T *h = v.residual ? (v.inplace ? r : hs.data() + mis) : nullptr;
  T *y = v.inplace ? x : ys.data() + mis;
  const float *wp = v.weight ? w.data() + mis : nullptr;
  const float *bp = v.weight && !v.rms ? b.data() + mis : nullptr;

  // reference, from the inputs before anything is overwritten
  std::vector<double> href(rows * cols), yref(rows * cols), mref(rows), sref(rows);
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < cols; ++j) {
      double hv = F(x0[mis + i * ld + j]);
      if (r) hv = F(Round<T>(double(F(x0[mis + i * ld + j])) + F(rs[mis + i * ld + j])));
      href[i * cols + j] = hv;
      s += hv;
    }
    const double m = v.rms ? 0.0 : s / cols;
    for (int64_t j = 0; j < cols; ++j) q += (href[i * cols + j] - m) * (href[i * cols + j] - m);
    const double eps = v.rms ? 1e-6 : 1e-5;
    mref[i] = m;
    sref[i] = 1.0 / std::sqrt(q / cols + eps);
    for (int64_t j = 0; j < cols; ++j) {
      double u = (href[i * cols + j] - m) * sref[i];
      if (wp) u *= wp[j];
      if (bp) u += bp[j];
      yref[i * cols + j] = u;
    }
  }

  FwdArgs a{x, ld, r, ld, y, ld, h, ld, wp, bp, v.rms ? nullptr : mean.data(), rstd.data(),
            rows, cols, v.rms ? 1e-6f : 1e-5f, v.rms};
  if (Forward<T>(a, 0, nullptr) != cudaSuccess) {
    Expect(false, "forward launch", dt, rows, cols, v.name, 0, 0);
    return;
  }
  // A row at a large offset: the reference mean is exact, the kernel's is float32 (at 1e6 its
  // last place is 0.06, so compare the normalized output, which the shift keeps accurate).
  const double ytol = Tol<T>() * (v.offset != 0 && std::is_same_v<T, float> ? 50 : 1);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double got = F(y[i * ld + j]), want = yref[i * cols + j];
      Expect(Close(got, want, ytol), "y", dt, rows, cols, v.name, got, want);
      if (h) {
        const double hg = F(h[i * ld + j]);
        Expect(hg == href[i * cols + j], "h", dt, rows, cols, v.name, hg, href[i * cols + j]);
      }
    }
    // the padding between rows is untouched
    for (int64_t j = cols; j < ld && i + 1 < rows; ++j) {
      if (!v.inplace) Expect(F(y[i * ld + j]) == F(poison), "pad", dt, rows, cols, v.name, 0, 0);
    }
    Expect(std::fabs(rstd[i] - sref[i]) <= 1e-4 * sref[i], "rstd", dt, rows, cols, v.name, rstd[i],
           sref[i]);
    // the mean to float32's precision of the values' scale
    if (!v.rms)
      Expect(std::fabs(mean[i] - mref[i]) <= 1e-5 * (1.0 + std::fabs(mref[i]) + v.magnitude),
             "mean", dt, rows, cols, v.name, mean[i], mref[i]);
  }

  // backward, given the forward's x (h) and statistics. The reference takes the exact mean, not
  // the float32 one the kernel is given: at an offset of 1e6 that one is off by up to 0.03, which
  // the kernel must recover from the row as the CPU path does.
  std::vector<T> xb(n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) xb[mis + i * ld + j] = Round<T>(href[i * cols + j]);
  std::vector<float> dw(cols + 8, -7.f), db(cols + 8, -7.f);
  // dweight with weight; dbias for every layer norm, alone where there is no weight (the
  // workspace's halves are then written and summed one at a time).
  float *dwp = v.weight ? dw.data() : nullptr;
  float *dbp = v.rms ? nullptr : db.data();
  const bool want_p = dwp || dbp;
  T *dyp = dys.data() + mis;
  T *dresp = v.residual ? dres.data() + mis : nullptr;
  T *dxp = v.inplace ? dyp : dxs.data() + mis;
  std::vector<T> dy0 = dys;
  BwdArgs ba{dyp, ld, xb.data() + mis, ld, v.rms ? nullptr : mean.data(), rstd.data(), wp,
             dresp, ld, dxp, ld, dwp, dbp, nullptr, 0, rows, cols, v.rms};
  size_t bytes = 0;
  BackwardWorkspace<T>(ba, 0, &bytes);
  std::vector<float> ws(bytes / sizeof(float) + 4, std::nanf(""));
  ba.partial = want_p ? ws.data() : nullptr;
  ba.partial_bytes = bytes;
  if (Backward<T>(ba, 0, nullptr) != cudaSuccess) {
    Expect(false, "backward launch", dt, rows, cols, v.name, 0, 0);
    return;
  }
  std::vector<double> dwr(cols, 0.0), dbr(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double m = v.rms ? 0.0 : mref[i], s = rstd[i];
    double c1 = 0, c2 = 0;
    std::vector<double> xh(cols), g(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double dyv = F(dy0[mis + i * ld + j]);
      xh[j] = (F(xb[mis + i * ld + j]) - m) * s;
      g[j] = dyv * (wp ? wp[j] : 1.0);
      c1 += g[j] * xh[j];
      c2 += g[j];
      dwr[j] += dyv * xh[j];
      dbr[j] += dyv;
    }
    c1 /= cols;
    c2 = v.rms ? 0.0 : c2 / cols;
    for (int64_t j = 0; j < cols; ++j) {
      double want = (g[j] - c2 - xh[j] * c1) * s;
      if (dresp) want += F(dres[mis + i * ld + j]);
      const double got = F(dxp[i * ld + j]);
      Expect(Close(got, want, Tol<T>() * 5), "dx", dt, rows, cols, v.name, got, want);
    }
  }
  for (int64_t j = 0; j < cols && want_p; ++j) {
    const double tol = 1e-4 * std::sqrt(double(rows));
    if (dwp) Expect(Close(dw[j], dwr[j], tol), "dweight", dt, rows, cols, v.name, dw[j], dwr[j]);
    if (dbp) Expect(Close(db[j], dbr[j], tol), "dbias", dt, rows, cols, v.name, db[j], dbr[j]);
  }
}

template <class T>
void CheckType(std::mt19937_64 &gen, bool quick) {
  const Variant variants[] = {
      {false, false, true, false, false, 0, 0.0, "layer_norm"},
      {true, false, true, false, false, 0, 0.0, "rms_norm"},
      {false, true, true, false, false, 5, 0.0, "layer_norm+residual, ld=cols+5"},
      {true, true, false, false, true, 0, 0.0, "rms_norm+residual in place, no weight"},
      {false, false, false, true, false, 0, 0.0, "layer_norm unaligned, no weight"},
      {false, true, true, true, false, 3, 0.0, "layer_norm+residual unaligned, ld=cols+3"},
      {false, false, true, false, true, 0, 1e6, "layer_norm in place at offset 1e6"},
      // squares past float32's range: the scaled statistics
      {false, false, true, false, false, 0, 0.0, "layer_norm of values ~1e20", 1e20},
      {true, false, true, false, false, 0, 0.0, "rms_norm of values ~1e20", 1e20},
      {false, false, true, true, false, 0, 0.0, "layer_norm of values ~1e36, unaligned", 1e36},
      // both signs near float32's limit: x - pivot is past its range
      {false, false, true, false, false, 0, 0.0, "layer_norm of values ~1.5e38", 1.5e38},
      {false, false, true, true, true, 2, 0.0, "layer_norm of values ~1.5e38 in place, unaligned",
       1.5e38},
      {false, true, true, false, true, 0, 1e6, "layer_norm+residual in place at offset 1e6"},
  };
  // Every tier: threads per row 1..1024 forward (32 elements each) and backward (16 each), the
  // unaligned fallback's two tiers (8 each), and the loop kernels past them.
  const int64_t lengths[] = {1,   3,    7,    8,    9,    15,   16,    17,    31,   33,
                             64,  100,  768,  1000, 2048, 4097, 16384, 20000, 40000};
  for (const int64_t cols : lengths) {
    if (quick && cols > 4097) continue;
    const int64_t rows = cols >= 16384 ? 3 : cols >= 2048 ? 4 : cols >= 768 ? 9 : 37;
    for (const Variant &v : variants) {
      // 1e6 is past float16's range and bfloat16 cannot resolve unit steps there
      if (v.offset != 0 && !std::is_same_v<T, float>) continue;
      if (v.magnitude > 1e4 && std::is_same_v<T, __half>) continue;  // past float16's range
      CheckOne<T>(rows, cols, v, gen);
    }
  }
  // zero and one row
  CheckOne<T>(1, 256, variants[0], gen);
}

}  // namespace

int main(int argc, char **argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::mt19937_64 gen(42);
  CheckType<float>(gen, quick);
  CheckType<__half>(gen, quick);
  CheckType<__nv_bfloat16>(gen, quick);
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
