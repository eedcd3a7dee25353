// A NumPy memory handler (NEP 49) that recycles the memory of large arrays fastln returned.
//
// Why: a fresh output of a few MiB or more costs a page fault per 4 KiB page on its first write,
// because glibc serves it with a new mmap (always above 32 MiB; below that, whenever other
// allocations got in between). Measured here at 512x4096 float32, allocating calls took 1.5x as long
// as calls given out= (1085 against 719 us), the difference being those faults. ONNX Runtime's
// arena and PyTorch's caching allocators avoid them the same way: memory freed by one result is
// handed to the next.
//
// Only fastln's own outputs are allocated through this handler (it is set around those
// allocations and restored at once), so NumPy's other arrays are untouched. The arrays own their
// data like any other (flags.owndata), and NumPy frees them through the handler, which is where a
// block enters the cache. The cache is bounded (set_cache_limit) and only keeps blocks of at least
// kMinCached bytes.
//
// This header is compiled into the Cython module only: it is the binding's, not the C API's.
#pragma once

#include <Python.h>
#include <numpy/ndarraytypes.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace fastln_py {

// Each block carries its capacity in a header in front of the data: NumPy's realloc does not say
// how large the old block was, and free's size argument is the array's, not the block's.
constexpr size_t kHeader = 64;
constexpr size_t kMinCached = size_t(1) << 20;
// Blocks this large are 2 MiB aligned and advised to use transparent huge pages: 512 times fewer
// faults on first touch and fewer TLB misses on every pass. NumPy does the same from 4 MiB on.
constexpr size_t kHugeFrom = size_t(4) << 20;
constexpr size_t kHugePage = size_t(2) << 20;
// A bound on the list, which is searched linearly under the lock.
constexpr size_t kMaxBlocks = 16;

// The default bound: an eighth of the machine's memory, at most 1 GiB. Big enough to hold one
// output of the 512 MiB inputs the benchmark grid goes up to; small next to what a machine with
// little memory (serverless, embedded) has.
inline size_t DefaultLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const size_t cap = size_t(1) << 30;
  if (pages <= 0 || page <= 0) return size_t(256) << 20;
  const size_t eighth = size_t(pages) / 8 * size_t(page);
  return eighth < cap ? eighth : cap;
}

struct CacheState {
  std::mutex mu;
  size_t limit = DefaultLimit();
  size_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  std::vector<char *> blocks;  // base pointers, least recently freed first
};

inline CacheState &State() {
  static CacheState s;
  return s;
}

// Whether the calling thread's last large allocation came from the system rather than the cache:
// the kernels store differently into never-touched pages (FASTLN_Y_FRESH).
inline bool &LastFresh() {
  static thread_local bool fresh = true;
  return fresh;
}

inline size_t &Capacity(char *base) { return *reinterpret_cast<size_t *>(base); }

inline char *SystemBlock(size_t cap) {
  void *p = nullptr;
  const size_t total = cap + kHeader;
  if (total >= kHugeFrom) {
    if (posix_memalign(&p, kHugePage, total) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
    madvise(p, (total + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);
#endif
  } else {
    p = std::malloc(total);
    if (!p) return nullptr;
  }
  char *base = static_cast<char *>(p);
  Capacity(base) = cap;
  return base;
}

inline void *Malloc(void *, size_t size) {
  if (size > SIZE_MAX / 2) return nullptr;
  size_t cap = size;
  if (size >= kMinCached) {
    cap = (size + 4095) & ~size_t(4095);
    CacheState &s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    // The most recently freed block that fits with at most a quarter to spare: it is the likeliest
    // to be in cache still, and the bound keeps a small request from pinning a large block.
    for (size_t i = s.blocks.size(); i-- > 0;) {
      char *base = s.blocks[i];
      const size_t c = Capacity(base);
      if (c >= size && c - size <= size / 4) {
        s.blocks.erase(s.blocks.begin() + std::ptrdiff_t(i));
        s.bytes -= c;
        ++s.hits;
        LastFresh() = false;
        return base + kHeader;
      }
    }
    ++s.misses;
    LastFresh() = true;
  }
  char *base = SystemBlock(cap);
  return base ? base + kHeader : nullptr;
}

inline void *Calloc(void *ctx, size_t nelem, size_t elsize) {
  if (elsize != 0 && nelem > SIZE_MAX / 2 / elsize) return nullptr;
  void *p = Malloc(ctx, nelem * elsize);
  if (p) std::memset(p, 0, nelem * elsize);
  return p;
}

inline void Free(void *, void *ptr, size_t) {
  if (!ptr) return;
  char *base = static_cast<char *>(ptr) - kHeader;
  const size_t cap = Capacity(base);
  std::vector<char *> evicted;
  if (cap >= kMinCached) {
    CacheState &s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    if (cap <= s.limit) {
      while (!s.blocks.empty() && (s.bytes + cap > s.limit || s.blocks.size() >= kMaxBlocks)) {
        s.bytes -= Capacity(s.blocks.front());
        evicted.push_back(s.blocks.front());
        s.blocks.erase(s.blocks.begin());
      }
      s.blocks.push_back(base);
      s.bytes += cap;
      base = nullptr;
    }
  }
  for (char *e : evicted) std::free(e);
  std::free(base);
}

inline void *Realloc(void *ctx, void *ptr, size_t new_size) {
  if (!ptr) return Malloc(ctx, new_size);
  const size_t cap = Capacity(static_cast<char *>(ptr) - kHeader);
  if (new_size <= cap) return ptr;
  void *p = Malloc(ctx, new_size);
  if (!p) return nullptr;
  std::memcpy(p, ptr, cap);
  Free(ctx, ptr, cap);
  return p;
}

inline PyDataMem_Handler *Handler() {
  static PyDataMem_Handler h = {"fastln_output_cache", 1, {nullptr, Malloc, Calloc, Realloc, Free}};
  return &h;
}

// A new reference to the handler's capsule, for PyDataMem_SetHandler.
inline PyObject *HandlerCapsule() { return PyCapsule_New(Handler(), "mem_handler", nullptr); }

inline bool LastAllocFresh() { return LastFresh(); }

// Sets the limit in bytes and evicts down to it; returns the old limit.
inline size_t SetLimit(size_t limit) {
  CacheState &s = State();
  std::vector<char *> evicted;
  size_t old;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    old = s.limit;
    s.limit = limit;
    while (!s.blocks.empty() && s.bytes > limit) {
      s.bytes -= Capacity(s.blocks.front());
      evicted.push_back(s.blocks.front());
      s.blocks.erase(s.blocks.begin());
    }
  }
  for (char *e : evicted) std::free(e);
  return old;
}

struct Info {
  size_t limit, bytes, blocks;
  uint64_t hits, misses;
};

inline Info GetInfo() {
  CacheState &s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  return Info{s.limit, s.bytes, s.blocks.size(), s.hits, s.misses};
}

}  // namespace fastln_py
