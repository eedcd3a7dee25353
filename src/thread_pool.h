// The fork-join behind the C API's row split: the calling thread and up to n - 1 pool threads run
// the n parts of one task, then the caller waits for them. Included by api.cpp alone.
//
// Why not `#pragma omp parallel`: each GNU libgomp region made two FUTEX_WAKE system calls with
// nobody waiting (strace -f -c: 20000 for 10000 empty 2-thread regions, OMP_WAIT_POLICY=active
// too; this pool: 4-2299 in four runs of 10000 calls through Python). On the 2-core Xeon guest
// (family 6 model 167, 2026-12-05) an empty region took 0.68-0.74 us and a spinning handshake of
// two atomics 0.31 us, and a C loop over the 1-thread kernel run on two halves of the rows
// (float32, weight and bias, best of 15 rounds, us) took 8.52 in an OpenMP region against 7.91
// here (128x768), 10.43 against 9.27 (128x1024), 4.29 against 3.81 (64x768), 21.28 against 20.55
// (2048x64). OpenMP still sets the thread count (api.cpp).
#ifndef FASTLN_THREAD_POOL_H_
#define FASTLN_THREAD_POOL_H_

#include <stdint.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace fastln {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

class ThreadPool {
 public:
  // Which of the pool's threads this is: 0 on the thread that called Run (or any other thread),
  // i in [1, n) on a pool thread taking part in a call of n parts.
  static int Worker() { return worker_; }

  // task(ctx, i, n) for i in [0, n): part 0 on the calling thread, each other part on whichever
  // thread claims it first (the caller's included). Returns false, having run nothing, when
  // another thread is using the pool or its threads could not be started; the caller then runs
  // the work alone (each row is computed the same way on any thread, so only the time differs).
  // task(ctx, i, n) may run with a smaller n than asked for, where fewer threads could be started.
  using Task = void (*)(void *ctx, int i, int n);
  bool Run(int n, Task task, void *ctx) {
    if (n <= 1 || busy_.exchange(true, std::memory_order_acquire)) return false;
    if (n > int(kCountMask)) n = int(kCountMask);  // the count's bits in claim_ and ticket_
    Grow(n - 1);
    if (n > int(threads_.size()) + 1) n = int(threads_.size()) + 1;
    if (n <= 1) {
      busy_.store(false, std::memory_order_release);
      return false;
    }
    task_ = task;
    ctx_ = ctx;
    // More threads than CPUs: a spinning thread would take the CPU of one with work left. (Threads
    // a larger call started and this one leaves out sleep at once: Await.)
    const bool spin = n <= Cpus();
    spin_ns_.store(spin ? SpinNanos() : 0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    // The count of threads travels in the same word as the generation, so that a pool thread not
    // taking part never reads what the next call writes. Part 0 is the caller's; the others go to
    // whoever claims them first (Claim), the caller too once its own is done.
    const uint64_t gen = (ticket_.load(std::memory_order_relaxed) >> kCountBits) + 1;
    claim_.store(gen << kCountBits | 1, std::memory_order_release);
    ticket_.store(gen << kCountBits | uint64_t(n), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      // Taking the mutex orders this wake after a sleeper's last look at ticket_.
      { std::lock_guard<std::mutex> lock(mutex_); }
      wake_.notify_all();
    }
    task(ctx, 0, n);
    int mine = 1;
    for (int i; (i = Claim(gen, n)) >= 0; ++mine) task(ctx, i, n);
    // What is left are parts pool threads claimed, and are running.
    for (int spins = 0; done_.load(std::memory_order_acquire) != n - mine; ++spins) {
      if (spin && spins < kCallerSpins) {
        CpuRelax();
      } else {
        std::this_thread::yield();  // a pool thread was descheduled
      }
    }
    busy_.store(false, std::memory_order_release);
    return true;
  }

  // At unload (a C program's dlclose) or exit the threads must not outlive the code they run. Waits
  // for a call in progress (a Python daemon thread may still be in one) and keeps busy_ for good,
  // so that any later call runs alone.
  void Stop() {
    while (busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
    if (threads_.empty()) return;
    stop_.store(true, std::memory_order_seq_cst);
    ticket_.fetch_add(uint64_t(1) << kCountBits, std::memory_order_seq_cst);
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
    for (std::thread &t : threads_) t.join();
    threads_.clear();
  }

 private:
  static constexpr int kCountBits = 16;
  static constexpr uint64_t kCountMask = (uint64_t(1) << kCountBits) - 1;
  static constexpr int kCallerSpins = 1 << 12;
  // How long an idle pool thread spins before it sleeps. Spinning takes a CPU from whatever runs
  // between calls, and sleeping costs the next call its wake: on the Xeon guest (2026-12-05,
  // float32, weight and bias, 2 threads) a loop of a 128x768 float32 matmul through NumPy's
  // OpenBLAS and fastln's layer norm took, over the matmul alone, 44.5 us (threads sleeping at
  // once), 89 (50 us of spinning), 256 (200 us), 1077 (1 ms) and 6993 with libgomp's region
  // (39 us on one thread); back-to-back calls ran as fast with 30, 50 or 200 us of spinning
  // (128x768 6.3-6.4 us, 8x16384 9.1-9.4), and with none slower than on one thread (13.2 and
  // 19.2 us against 11.1 and 17.1).
  // OMP_WAIT_POLICY=passive sleeps at once, as libgomp does.
  static constexpr int64_t kSpinNanos = 50 * 1000;

  // Starts threads up to `workers`. Where one cannot be started (a limit on processes, memory),
  // calls go on with those there are and never try again: each try would cost every call.
  void Grow(int workers) {
    while (!grow_failed_ && int(threads_.size()) < workers) {
      try {
        threads_.reserve(threads_.size() + 1);
        threads_.emplace_back(&ThreadPool::Loop, this, int(threads_.size()) + 1,
                              ticket_.load(std::memory_order_relaxed));
      } catch (...) {
        grow_failed_ = true;
      }
    }
  }

  // The CPUs this process may run on, as libgomp counts them for the same purpose.
  static int Cpus() {
    static const int n = [] {
#if defined(__linux__)
      cpu_set_t set;
      if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
        return CPU_COUNT(&set);
      }
#endif
      const unsigned h = std::thread::hardware_concurrency();
      return h > 0 ? int(h) : 1;
    }();
    return n;
  }

  // OMP_WAIT_POLICY read as libgomp reads it: case and surrounding spaces ignored.
  static int64_t SpinNanos() {
    static const int64_t ns = [] {
      const char *p = getenv("OMP_WAIT_POLICY");
      if (!p) return kSpinNanos;
      while (*p == ' ' || *p == '\t') ++p;
      const char *word = "passive";
      for (; *word; ++word, ++p) {
        if (*p != *word && *p != *word - 'a' + 'A') return kSpinNanos;
      }
      while (*p == ' ' || *p == '\t') ++p;
      return *p ? kSpinNanos : int64_t(0);
    }();
    return ns;
  }

  // A thread that took no part in the last call sleeps at once: it was started by a larger call.
  uint64_t Await(uint64_t seen, bool took_part) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t budget = took_part ? spin_ns_.load(std::memory_order_relaxed) : 0;
    for (int spins = 1;; ++spins) {
      const uint64_t t = ticket_.load(std::memory_order_acquire);
      if (t != seen) return t;
      if (budget > 0 && (spins & 15) != 0) {
        CpuRelax();
        continue;
      }
      if (budget > 0 && std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - start)
                                .count() < budget) {
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return ticket_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // The next unclaimed part of call `gen`, or -1 when none is left. A pool thread that is late
  // (waking, or waiting for a CPU) thus leaves its part to the caller, which used to wait for it,
  // spinning, then yielding. On the Xeon guest (2026-12-06, float32, weight and bias, 2 threads,
  // best of 15 rounds after 0.5 s of calls, processes alternating, three each) with a Python busy
  // loop on one CPU, calls took 105-134 us (1 thread 4.4-51.1) on most of 7 shapes in two of
  // three processes; taking the part left, 3.4-22.8 us, 1.17-2.53x faster than 1 thread (quiet:
  // 1.24-2.52x before, 1.27-2.48x now). Waiting a while first (half part 0's time) made such
  // calls 1.3x 1 thread's time; yielding once first, 59-99 us. A part claimed is run whole, so
  // the caller waits only for parts under way.
  int Claim(uint64_t gen, int n) {
    uint64_t w = claim_.load(std::memory_order_relaxed);
    for (;;) {
      const int i = int(w & kCountMask);
      if ((w >> kCountBits) != gen || i >= n) return -1;
      if (claim_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
        return i;
      }
    }
  }

  void Loop(int index, uint64_t seen) {
    worker_ = index;
    for (bool took_part = true;;) {
      seen = Await(seen, took_part);
      if (stop_.load(std::memory_order_acquire)) return;
      const int n = int(seen & kCountMask);
      // A thread asked to take part spins after the call even when it found nothing left, so that
      // it is there for the next one.
      took_part = index < n;
      if (!took_part) continue;
      // task_ and ctx_ are read only after a claim: a thread that claims nothing may already see
      // the next call's, and the caller leaves a call only when every part is claimed.
      for (int i; (i = Claim(seen >> kCountBits, n)) >= 0;) {
        task_(ctx_, i, n);
        done_.fetch_add(1, std::memory_order_acq_rel);
      }
    }
  }

  static inline thread_local int worker_ = 0;
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<uint64_t> claim_{0};  // the call's generation, then its next part
  alignas(64) std::atomic<int> done_{0};         // parts pool threads finished
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int64_t> spin_ns_{0};
  Task task_ = nullptr;
  void *ctx_ = nullptr;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> threads_;  // these two touched only by the thread holding busy_
  bool grow_failed_ = false;
};

}  // namespace fastln

#endif  // FASTLN_THREAD_POOL_H_
