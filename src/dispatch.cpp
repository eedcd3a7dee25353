// Picks the kernel table: CPU detection, the FASTLN_ISA override, and the active table.
// Compiled with the baseline flags only: nothing here may use an instruction the CPU might lack.
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "dispatch.h"
#include "fastln/fastln.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#endif

namespace fastln {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
bool CpuHasAvx2Fma() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  // The CPU having AVX is not enough: the OS must save the YMM state on context switches.
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6) != 0x6) return false;  // XMM and YMM state enabled
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
}
#endif

bool CpuHasNeon() {
#if defined(__aarch64__) && defined(__linux__)
  return getauxval(AT_HWCAP) & HWCAP_ASIMD;
#elif defined(__aarch64__)
  return true;  // Advanced SIMD is mandatory in ARMv8-A
#else
  return false;
#endif
}

struct IsaEntry {
  const char *name;
  const KernelTable *(*table)();
  bool (*usable)();
};

bool Always() { return true; }
#if defined(__x86_64__) || defined(_M_X64)
bool Avx2Usable() { return table_avx2() != nullptr && CpuHasAvx2Fma(); }
#else
bool Avx2Usable() { return false; }
#endif
bool NeonUsable() { return table_neon() != nullptr && CpuHasNeon(); }

// Best first.
const IsaEntry kIsas[] = {
    {"avx2", &table_avx2, &Avx2Usable},
    {"neon", &table_neon, &NeonUsable},
    {"scalar", &table_scalar, &Always},
};

const IsaEntry *FindIsa(const char *name) {
  for (const IsaEntry &e : kIsas)
    if (strcmp(e.name, name) == 0) return &e;
  return nullptr;
}

const KernelTable *BestTable() {
  for (const IsaEntry &e : kIsas)
    if (e.usable()) return e.table();
  return table_scalar();
}

std::atomic<const KernelTable *> g_table{nullptr};
std::atomic<int> g_init_status{1};  // 1: not yet initialised

// Reads FASTLN_ISA once. An unknown or unusable name leaves no table: every kernel call then fails
// with that status instead of silently running another ISA.
void Init() {
  const char *env = getenv("FASTLN_ISA");
  int status = FASTLN_OK;
  const KernelTable *t = nullptr;
  if (env == nullptr || env[0] == '\0' || strcmp(env, "auto") == 0) {
    t = BestTable();
  } else if (const IsaEntry *e = FindIsa(env)) {
    if (e->usable()) t = e->table();
    else status = FASTLN_ERR_UNSUPPORTED_ISA;
  } else {
    status = FASTLN_ERR_UNKNOWN_ISA;
  }
  const KernelTable *expected = nullptr;
  g_table.compare_exchange_strong(expected, t);
  int one = 1;
  g_init_status.compare_exchange_strong(one, status);
}

}  // namespace

const KernelTable *ActiveTable() {
  const KernelTable *t = g_table.load(std::memory_order_acquire);
  if (t) return t;
  if (g_init_status.load(std::memory_order_acquire) == 1) Init();
  return g_table.load(std::memory_order_acquire);
}

int InitStatus() {
  ActiveTable();
  return g_init_status.load();
}

}  // namespace fastln

using fastln::FindIsa;

extern "C" {

const char *fastln_isa(void) {
  const fastln::KernelTable *t = fastln::ActiveTable();
  return t ? t->name : "none";
}

const char *fastln_best_isa(void) { return fastln::BestTable()->name; }

int fastln_isa_supported(const char *name) {
  if (!name) return 0;
  const auto *e = FindIsa(name);
  return e && e->usable() ? 1 : 0;
}

int fastln_set_isa(const char *name) {
  const fastln::KernelTable *t;
  if (name == nullptr || strcmp(name, "auto") == 0) {
    t = fastln::BestTable();
  } else {
    const auto *e = FindIsa(name);
    if (!e) return FASTLN_ERR_UNKNOWN_ISA;
    if (!e->usable()) return FASTLN_ERR_UNSUPPORTED_ISA;
    t = e->table();
  }
  fastln::ActiveTable();  // settle the FASTLN_ISA reading first, so it cannot overwrite this choice
  fastln::g_table.store(t, std::memory_order_release);
  fastln::g_init_status.store(FASTLN_OK);
  return FASTLN_OK;
}

int fastln_init_status(void) { return fastln::InitStatus(); }

}  // extern "C"
