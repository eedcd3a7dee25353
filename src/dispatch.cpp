// Picks the kernel table: CPU detection, the FASTLN_ISA override, and the active table.
// Compiled with the baseline flags only: nothing here may use an instruction the CPU might lack.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
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
// XCR0: which register state the OS saves on context switches. The CPU having an extension is not
// enough: without the OS saving its registers, a thread switch would corrupt them.
constexpr unsigned kXcr0Avx = 0x6;      // XMM (bit 1) and YMM (bit 2)
constexpr unsigned kXcr0Avx512 = 0xe0;  // opmask (5), upper halves of ZMM0-15 (6), ZMM16-31 (7)

unsigned Xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return lo;
}

// AVX2 with FMA and F16C, and the OS saving YMM. leaf7_ebx: cpuid leaf 7's ebx, or 0 if absent.
bool CpuHasAvx2Fma(unsigned *leaf7_ebx) {
  *leaf7_ebx = 0;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  if ((Xcr0() & kXcr0Avx) != kXcr0Avx) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  *leaf7_ebx = b;
  return b & (1u << 5);  // AVX2
}

bool CpuHasAvx2Fma() {
  unsigned b7;
  return CpuHasAvx2Fma(&b7);
}

// Everything CpuHasAvx2Fma checks, plus AVX-512 F, DQ, BW and VL (kernels_avx512.cpp is compiled
// for all four) and the OS saving the opmask and ZMM state.
bool CpuHasAvx512() {
  unsigned b7;
  if (!CpuHasAvx2Fma(&b7)) return false;
  constexpr unsigned kF = 1u << 16, kDq = 1u << 17, kBw = 1u << 30, kVl = 1u << 31;
  if ((b7 & (kF | kDq | kBw | kVl)) != (kF | kDq | kBw | kVl)) return false;
  return (Xcr0() & kXcr0Avx512) == kXcr0Avx512;
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

// The CPU's vendor, for defaults measured on one vendor's CPUs only.
enum class Vendor { kAmd, kIntel, kOther };

Vendor CpuVendor() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return Vendor::kOther;
  if (b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163) return Vendor::kAmd;  // AuthenticAMD
  if (b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e) return Vendor::kIntel;  // GenuineIntel
#endif
  return Vendor::kOther;
}

struct IsaEntry {
  const char *name;
  const KernelTable *(*table)();
  bool (*usable)();
};

bool Always() { return true; }
#if defined(__x86_64__) || defined(_M_X64)
bool Avx2Usable() { return table_avx2() != nullptr && CpuHasAvx2Fma(); }
bool Avx512Usable() { return table_avx512() != nullptr && CpuHasAvx512(); }
#else
bool Avx2Usable() { return false; }
bool Avx512Usable() { return false; }
#endif
bool NeonUsable() { return table_neon() != nullptr && CpuHasNeon(); }

// The automatic choice is the first usable entry, except on Intel's server cores with AVX512-FP16
// (see Avx512First). AVX-512 comes after AVX2, so elsewhere it runs only when asked for
// (FASTLN_ISA=avx512, set_isa). On an AMD EPYC (Zen 5) guest (2026-12-03, float32 layer_norm, out=,
// weight and bias, 1 thread, through Python, arrays where NumPy put them, both ISAs and np.multiply
// interleaved in one process, best of 9 rounds), AVX-512's time over AVX2's was 0.88-2.16
// (1.31-2.16 on 2048x4096, 2048x1024 and 8192x1024) while every load of a row 16 to 48 bytes past a
// line crossed two lines; since the general loop reads such rows by RealignedRowOf (kernels-inl.h),
// 0.87-0.98 on 8x768, 128x768, 128x1024, 128x4096, 8192x64 and 32768x64, 0.99-1.04 on 8x16384,
// 128x16384, 2048x64, 2048x96, 512x4096 and 8192x1024, 1.07-1.14 on 2048x768, 2048x1024 and
// 2048x4096 (one run; 0.77-1.12 in a run on a busier machine). A tie, so AVX2 stays the automatic
// choice there, and on the Zen 4 guest of README's Speed section (0.91-1.09 over the grid's shapes
// of 100k values or more).
const IsaEntry kIsas[] = {
    {"avx2", &table_avx2, &Avx2Usable},
    {"avx512", &table_avx512, &Avx512Usable},
    {"neon", &table_neon, &NeonUsable},
    {"scalar", &table_scalar, &Always},
};

const IsaEntry *FindIsa(const char *name) {
  for (const IsaEntry &e : kIsas)
    if (strcmp(e.name, name) == 0) return &e;
  return nullptr;
}

// Whether AVX-512 is the automatic choice: on Intel cores with AVX512-FP16 (Sapphire Rapids and
// later Xeons, whose cores have two 512-bit FMA units; FP16 arithmetic itself is not used, and the
// OS saves its state with the rest of AVX-512's, so /proc/cpuinfo lists it where it counts).
// Measured on an Intel Xeon (family 6 model 207, Emerald Rapids; 48 KiB L1d, 2 MiB L2) guest,
// 2026-12-05, build 58fc921, through Python, one build switched by set_isa, both ISAs interleaved
// in one process, best of 9 rounds, 1 thread, out=, AVX-512's time over AVX2's: layer_norm with
// weight and bias, float32 in two runs 0.70-0.99 and 0.60-1.02 (2048x96 0.70 and 0.64, 128x768 0.76
// and 0.60, 128x1024 0.74 and 0.88, 2048x64 0.88 and 0.86, 32768x64 0.86, 8x16384 0.92 and 0.90;
// 128x4096, 2048x768, 8192x768 and 1024x4096 0.93-1.02), float64 0.58-1.07 (512x100 0.58, 2048x64
// 0.80, 8192x768 0.96, 8x1024 1.07), bfloat16 0.82-0.94; float16 0.91-1.14, slower on short rows
// (2048x64 1.13 and 1.14, 8192x64 1.12); without weight and bias 0.86-1.09; rms_norm float32 in two
// runs 0.83-1.04 and 0.77-1.02; the backward passes 0.90-1.14 (layer_norm_backward 2048x64 1.14).
// On 2 threads, layer_norm float32 0.72-1.03. On a Sapphire Rapids guest (2026-11-30, kernels of
// then: before short rows of a partial last vector had their own pipeline, and before
// RealignedRowOf), AVX-512 had tied AVX2 on layer_norm and lost on rms_norm (0.45-0.97) and on
// 2048x96 (0.58), so AVX2 was chosen there. Other Intel CPUs with AVX-512 (client cores; Skylake
// and Ice Lake servers, some with one 512-bit FMA unit) were not measured, and keep AVX2.
bool Avx512First() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (CpuVendor() != Vendor::kIntel || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return d & (1u << 23);  // AVX512-FP16
#else
  return false;
#endif
}

const KernelTable *BestTable() {
  if (Avx512First() && Avx512Usable()) return table_avx512();
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

// The L1 data cache of the core, in bytes, from cpuid (AMD: leaf 0x80000005; Intel: leaf 4's
// level-1 data cache); 32 KiB where the CPU does not say.
int64_t DetectL1dBytes() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  switch (CpuVendor()) {
    case Vendor::kAmd:
      if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000005 &&
          __get_cpuid(0x80000005, &a, &b, &c, &d) && (c >> 24) != 0) {
        return int64_t(c >> 24) << 10;
      }
      break;
    case Vendor::kIntel:
      for (unsigned k = 0; k < 8 && __get_cpuid_count(4, k, &a, &b, &c, &d); ++k) {
        if ((a & 0x1f) == 0) break;                          // no more caches
        if ((a & 0x1f) == 1 && ((a >> 5) & 0x7) == 1) {      // data cache, level 1
          return int64_t((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) *
                 (int64_t(c) + 1);
        }
      }
      break;
    default:
      break;
  }
#endif
  return int64_t(32) << 10;
}

// ---- when y is written with non-temporal stores ------------------------------------------------
//
// Streaming stores skip reading each line of y before writing it (a third of the memory traffic
// of a pass from x to y), but they also send y past the caches, where a y that the caches could
// have held, with x, is slower to write and to read back. Defaults: float32 and float64 y from
// 2 MiB, 16-bit y from 32 MiB (measured on a Sapphire Rapids guest; see the comment above StreamY
// in src/ops/layer_norm-inl.h). On an AMD EPYC (Zen 3) guest with a 32 MiB L3 (2026-11-30,
// float32 out=, 1 thread, rows of 1024 values, processes alternating) the crossover moved from
// run to run: one run had plain stores faster from 2 to 8 MiB of y (4 MiB: 238 against 386 us)
// and streaming faster from 16 MiB (1561 against 1954 us); a later run had streaming from 2 MiB
// as fast or faster at 2 and 8 MiB. On an Intel Xeon guest that reports a 504 MiB L3 (2026-12-05,
// float32 out=, weight and bias, 1 thread, one process, best of 5 rounds, two runs) plain stores
// won at every size tried, 2 to 32 MiB of y (2048x768 436 against 455 us, 2048x4096 2374 against
// 2743), where on the Emerald Rapids guest before it streamed calls ran at 0.62-1.10x the floor.
// The defaults stay until a rule holds across runs and machines; fastln_set_stream_bytes and
// FASTLN_STREAM_MIB set them per machine.
constexpr int64_t kMiB = int64_t(1) << 20;

// native_split: float32 and float64 y of a layer norm without the residual add (see StreamY in
// src/ops/layer_norm-inl.h) that runs on more than one thread. Likely (not measured: this guest has
// no counters) the threads' non-temporal stores share the memory's write bandwidth while x and y
// could have stayed in L3. On the AMD EPYC guest (2026-12-03, 2 threads, out=, weight and bias,
// plain and streamed stores interleaved in one process with torch's layer_norm between rounds, best
// of 3 or 5 rounds, us, plain against streamed): float32 2 MiB (512x1024) 55.7 against 97.0,
// 128x4096 50.3 against 93.9, 4 MiB (1024x1024) 95.9 against 197.8, 6 MiB (2048x768) 147.8 against
// 277.2, 8 MiB (2048x1024) 201.5 against 370.9, 12 MiB (4096x768) 344.2 against 551.4; float64 2
// MiB (256x1024) 56.4 against 93.6, 8 MiB (1024x1024) 220.5 against 368.5, 12 MiB (2048x768) 350.1
// against 550.5. At 16 MiB float32 about even (4096x1024 477.8 against 498.2, 1024x4096 509.3
// against 476.7) and float64 behind (2048x1024 495.9 against 400.1); from 24 MiB behind (float32
// 8192x768 919.3 against 631.1, 32768x1024 7894 against 6037). On one thread the same comparison
// went either way by up to 18% from shape to shape and run to run, so one-thread calls keep 2 MiB.
// Not measured on Intel CPUs.
// native_long: float32 and float64 y of a layer norm with weight or bias in rows of
// kStreamLongRowBytes (16 KiB) or more that take the column bands (at least BandRowBytes), on one
// thread or with the residual add. Streamed, such rows
// take the general loop, in which a row of x with its weight and bias (48 KiB of float32) is more
// than Zen 3's 32 KiB L1, so (by those sizes; not counted) weight and bias come from L2 for every
// row; with plain stores they take the column bands, which read weight and bias once per group of
// rows (src/ops/layer_norm-inl.h). Measured on the AMD EPYC guest (2026-12-03, 1 thread, out=,
// weight and bias, streamed and plain stores interleaved in one process, best of 5 or 7 rounds, us,
// streamed against plain): float32 (two to five runs) 128x4096 (2 MiB) 119-152 against 99-111,
// 256x4096 (4 MiB) 244-282 against 207-240, 32x16384 (2 MiB) 119-136 against 102-126, 64x16384 (4
// MiB) 285-332 against 273-277; float64 (two runs) 128x2048 118-124 against 105-111, 64x4096
// 118-120 against 109-110, 256x2048 256 against 228-231, 128x4096 245-246 against 208-225, 32x16384
// 286-343 against 275-311. With torch's layer_norm between the rounds plain stores won too (float32
// 128x4096 135-187 against 129-168, two runs; float64 128x2048, 256x2048 and 64x4096, one run).
// With the residual add (two runs): 128x4096 204-206 against 184, 32x16384 284-304 against 230-242;
// on 2 threads 128x4096 131-133 against 88, 64x16384 294-302 against 185-188. At 8 MiB the order
// changed from run to run (512x4096 and 128x16384, six runs each); from 16 MiB streaming won
// (1024x4096 1057-1127 against 1529-1567, 256x16384 1163-1177 against 1619-1696), and with the
// residual add from 8 MiB (512x4096 895-953 against 1040-1095; on 2 threads 510-515 against
// 494-500). Rows of 8 KiB went either way (float32 256x2048 streamed 98-107 against 107-113 plain,
// but with torch between rounds 116-118 against 99-101), rows of 12 KiB within 5%. Not measured on
// Intel CPUs, which keep the one-thread size.
struct StreamPolicy {
  int64_t native, half, native_split, native_long;
};

StreamPolicy DefaultStreamPolicy() {
  // FASTLN_STREAM_MIB=n: y of n MiB or more streams, whatever its dtype; a negative n: never.
  const char *env = getenv("FASTLN_STREAM_MIB");
  if (env && env[0]) {
    char *end = nullptr;
    const long long n = strtoll(env, &end, 10);
    if (end && *end == '\0') {
      const int64_t b = n < 0 || n > (int64_t(1) << 40) ? INT64_MAX : int64_t(n) * kMiB;
      return StreamPolicy{b, b, b, b};
    }
  }
  const bool amd = CpuVendor() == Vendor::kAmd;
  return StreamPolicy{2 * kMiB, 32 * kMiB, amd ? 16 * kMiB : 2 * kMiB, amd ? 8 * kMiB : 2 * kMiB};
}

const StreamPolicy &DefaultStream() {
  static const StreamPolicy p = DefaultStreamPolicy();
  return p;
}

// -1: the default.
std::atomic<int64_t> g_stream_native{-1}, g_stream_half{-1};

// ---- column bands for long rows -----------------------------------------------------------------
//
// LayerNormRowsBanded (src/ops/layer_norm-inl.h) normalizes rows of this many bytes or more in
// column bands across groups of rows. It was measured faster on an AMD EPYC (Zen 3) guest from
// 8 KiB (8x16384 33.1-34.2 -> 28.6-32.0 us; docs/performance-notes.md). On a Sapphire Rapids Xeon
// guest it was slower at every shape until its stores of y were prefetched (kBandPrefetchBytes);
// with them, in a C loop over the kernel (1 thread, 2026-12-02), it was faster from 16 KiB rows
// (float32 8x16384 22.9-23.2 against 26.1-27.2 us, 32x4096 25.5 against 28.6-28.8; float64 16x2048
// 12.0 against 13.5) and still slower at 8 KiB (float32 64x2048 25.1-25.8 against 20.4-21.1;
// float64 128x1024 65.9 against 61.0). Through Python there (interleaved, best of 15 rounds, two
// runs on a busy host), bands against rows: float32 8x16384 36.4 and 39.3 against 40.0 and 44.6 us,
// 32x4096 30.0 against 34.1, with the residual add 85.2 against 117.2; float64 even (8x16384 146.2
// and 117.6 against 140.7 and 117.3, 16x2048 25.6 and 19.3 against 26.7 and 20.7); 16-bit rows
// slower (float16 64x8192 172.6 and 162.6 against 153.3 and 151.3, 8x16384 30.2 against 24.8;
// bfloat16 8x16384 53.8 and 53.5 against 55.2 and 51.3). So on Intel CPUs the bands take float and
// double rows of 16 KiB or more, and 16-bit rows only when set. Other CPUs (ARM included) were not
// measured, and keep the rows one at a time. fastln_set_band_bytes sets one length for every dtype.
//
// On AMD CPUs whose L1d holds five float or double rows (with one row's lag the general loop keeps
// two rows of x, one of y, weight and bias there), such rows stay in the general loop, which since
// CongruentCopies (rows of up to 8 KiB) reads weight and bias within lines: the bands start past
// L1d / 5. Measured on an AMD EPYC (Zen 5, 48 KiB L1d) guest (2026-12-04, libfastln through ctypes,
// one build, bands set on and off in turn, 1 thread, out=, weight and bias, best of 7 rounds; x, y,
// weight and bias 16, 16, 32 and 48 bytes past a line, then all on a line), general loop against
// bands, AVX2: float32 rows of 8 KiB 128x2048 27.5 and 24.6 against 32.5 and 31.3 us, 256x2048 54.2
// and 49.7 against 64.6 and 62.4, 512x2048 105.2 and 95.7 against 126.5 and 122.0; float64 128x1024
// 27.1 and 24.3 against 31.0 and 30.9, 256x1024 53.0 and 47.6 against 60.6 and 58.5; AVX-512
// float32 128x2048 25.1 and 22.7 against 31.7 and 30.6, float64 128x1024 24.1 and 21.9 against 33.2
// and 29.6; 2 threads, AVX2, float32 256x2048 36.1 against 39.6, float64 256x1024 35.9 against
// 40.0. Rows of 10 KiB even (float32 64x2560 19.1 against 19.1), of 12 KiB and more banded faster
// (128x3072 50.0 against 44.4, 64x4096 40.1 against 29.8; float64 64x1536 25.4 against 22.5).
// 16-bit rows were not measured, and keep 8 KiB.
constexpr int64_t kNever = INT64_MAX;

int64_t DefaultBandBytes(bool native) {
  static const Vendor vendor = CpuVendor();
  switch (vendor) {
    case Vendor::kAmd: return native ? std::max<int64_t>(8192, L1dBytes() / 5 + 1) : 8192;
    case Vendor::kIntel: return native ? 16384 : kNever;
    default: return kNever;
  }
}

std::atomic<int64_t> g_band_bytes{-1};  // -1: the default

}  // namespace

int64_t StreamBytes(bool native, bool split, bool long_rows) {
  const int64_t v = (native ? g_stream_native : g_stream_half).load(std::memory_order_relaxed);
  if (v >= 0) return v;
  const StreamPolicy &p = DefaultStream();
  if (!native) return p.half;
  if (split) return std::max(p.native_split, long_rows ? p.native_long : p.native);
  return long_rows ? p.native_long : p.native;
}

int64_t L1dBytes() {
  static const int64_t bytes = DetectL1dBytes();
  return bytes;
}

int64_t BandRowBytes(bool native) {
  const int64_t v = g_band_bytes.load(std::memory_order_relaxed);
  return v >= 0 ? v : DefaultBandBytes(native);
}

// Rows of 2 to 4 KiB from memory, one thread (LayerNormRowsT in src/ops/layer_norm-inl.h): the
// fused loop, each row's normalize pass run inside the next rows' statistics with x asked for
// kFarAheadDistance ahead, brought such calls under the floor on an AMD EPYC (Zen 5, 48 KiB L1d)
// guest (kFarAheadBytes); on an AMD EPYC (Zen 4, 32 KiB L1d) guest, 2026-12-08, the phased loop
// (a row's statistics, then its normalize pass from L1, the hardware's prefetch alone) was faster
// once x passed the L3. Through Python, out=, weight and bias, one build with the loop read from
// the environment, processes alternating, best of 9 to 13 rounds, time / np.multiply's in the same
// process, fused -> phased, 1 thread: float32 8192x1024 (32 MiB) 0.96-1.56 -> 0.78-1.34 (nine
// runs), 16384x1024 1.07-1.51 -> 0.82-1.60 (nine), 32768x1024 1.21-1.33 -> 0.82-1.61, 16384x768
// 1.06-1.12 -> 0.80-0.87, 16384x512 1.14-1.16 -> 0.92-0.97; float64 16384x512 1.17-1.59 ->
// 0.76-1.20, 16384x256 1.03-1.21 -> 0.82-0.97 (three runs each). Below 32 MiB, where much of x
// stays in L3 between calls (y streams past it), float32 mostly went the other way: 4096x1024
// (16 MiB) 1.04-1.18 -> 1.21-1.45 (four), 6144x1024 (24 MiB) 0.89-0.95 -> 0.99-1.90, 8192x512
// (16 MiB) 0.87-1.19 -> 1.22-1.55; but 8192x768 (24 MiB) 0.90-1.19 -> 0.74-0.91 (six), float64
// 12288x256 1.01-1.10 -> 0.81-0.85 and 8192x384 0.95-1.03 -> 0.77-0.84. Rows of 1 KiB (float32
// 32768x256, 1.03-1.26 -> 1.44-1.50) and of 6 KiB (float32 8192x1536, 1.23-1.48 -> 1.50-1.77;
// float64 8192x768 1.22-1.29 -> 1.39-1.60) keep the fused loop. On 2 threads the phased loop was
// slower on float32 (8192x768 0.48-0.66 -> 0.66-1.16 in six runs, 8192x1024 0.71-0.82 ->
// 0.73-1.09; 16384x768 and 16384x1024 even) and faster on float64 (16384x256 0.66-0.67 ->
// 0.56-0.64), so calls split across threads keep the fused loop. The report (`python -m
// fastln.bench --mode out --impl fastln,floor --sweeps 3`, FASTLN_PHASED_MIB=-1 and 32 alternating,
// three runs each), us and time / floor: 8192x1024 2687-3401 (1.27-1.59) -> 1849-1911
// (0.88-0.99), 16384x1024 6550-6620 (1.42-1.47) -> 3562-3588 (0.83-0.85); and 32 against 16:
// 4096x1024 751-790 (1.07-1.09) against 964-993 (1.33-1.34), 8192x512 783-859 (1.13-1.16) against
// 1145-1163 (1.44-1.57), 6144x1024 1.06-1.09 against 1.14-1.20, 8192x768 1.00-1.11 against
// 0.93-1.05. So on AMD CPUs with an L1d of
// 32 KiB or less, from 32 MiB; elsewhere never (the Zen 5 guest's figures are the fused loop's;
// Intel CPUs were not measured). Zen 2 and Zen 3, whose L1d is 32 KiB too, take it unmeasured. FASTLN_PHASED_MIB=n (read once; for tests and measurements) sets
// n MiB on any CPU, a negative n never; both loops give the same bits (tests/test_stream_policy.py).
static int64_t DefaultPhasedBytes() {
  const char *env = getenv("FASTLN_PHASED_MIB");
  if (env && env[0]) {
    char *end = nullptr;
    const long long n = strtoll(env, &end, 10);
    if (end && *end == '\0') return n < 0 || n > (int64_t(1) << 40) ? kNever : int64_t(n) * kMiB;
  }
  return CpuVendor() == Vendor::kAmd && L1dBytes() <= 32768 ? 32 * kMiB : kNever;
}

int64_t PhasedBytes() {
  static const int64_t bytes = DefaultPhasedBytes();
  return bytes;
}

// Where x and y lie at different places within a line, the normalize pass keeps either its loads
// of x or its stores of y within lines. On Intel CPUs it keeps the stores: measured on an Intel
// Xeon guest (family 6 model 167 as it reports itself, 48 KiB L1d, 2 MiB L2; 2026-12-05, through
// Python, float32 unless named, out=, 1 thread, one build with the choice read from the
// environment, two processes each way alternating, best of 7 rounds, time / np.multiply's in the
// same process; x and y bytes past a line), x's line -> y's: AVX-512, without weight and bias,
// 128x768 at 32,48 1.29 and 1.40 -> 1.16 and 1.14, at 0,48 1.46 and 1.46 -> 1.11 and 0.84, 256x512
// at 32,48 1.44 and 1.46 -> 1.25 and 1.25, 128x1024 at 16,48 1.23 and 1.26 -> 1.01 and 1.00,
// float64 128x768 at 16,48 1.11 and 1.13 -> 1.01 and 1.03; with weight alone 128x1024 1.58 and
// 1.60 -> 1.19 and 1.17, float64 128x768 1.46 and 1.50 -> 1.09 and 1.09; with weight and bias
// (whose copies then follow y) 256x512 1.57 and 1.60 -> 1.46 and 1.51, the other shapes within
// the noise; AVX2, without weight and bias, 128x768 1.16 and 1.18 -> 1.09 and 1.02, 256x512 1.24
// and 1.28 -> 1.13 and 1.13, the rest within the noise. x and y at the same place: unchanged (the
// two are one line). The RMS norm's scaling pass (AVX-512 only, rows of 1 KiB or more; see
// RmsNormRowsT), x's boundary -> y's, two builds, their processes alternating: with
// weight, 128x1024 at 16,48 1.63 and 1.54 -> 1.13 and 1.12, 128x768 at 32,48 1.43 and 1.45 ->
// 1.28 and 1.25, 64x2048 at 32,48 1.56 and 1.55 -> 1.25 and 1.28, float64 128x768 at 16,48 1.42
// and 1.39 -> 1.17 and 1.19; without, 256x512 at 32,48 1.61 and 1.54 -> 1.24 and 1.21; at 16,16
// within 3%. AMD CPUs keep x's: on an EPYC (Zen 3) guest, before the statistics read rows
// realigned, starting at y's line was slower (docs/performance-notes.md); ARM was not measured.
// FASTLN_NORMALIZE_FROM=x or y overrides the vendor's choice, read once, so that one machine can
// test both placements (tests/test_runtime.py); any other value leaves the choice to the vendor
// here (the Python package refuses it at import).
bool NormalizeFromY() {
  static const bool from_y = [] {
    const char *env = getenv("FASTLN_NORMALIZE_FROM");
    if (env && strcmp(env, "x") == 0) return false;
    if (env && strcmp(env, "y") == 0) return true;
    return CpuVendor() == Vendor::kIntel;
  }();
  return from_y;
}

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

int fastln_set_stream_bytes(int64_t native_bytes, int64_t half_bytes) {
  fastln::g_stream_native.store(native_bytes < 0 ? -1 : native_bytes);
  fastln::g_stream_half.store(half_bytes < 0 ? -1 : half_bytes);
  return FASTLN_OK;
}

int64_t fastln_get_phased_bytes(void) { return fastln::PhasedBytes(); }
int64_t fastln_get_stream_bytes(int half) { return fastln::StreamBytes(half == 0, false, false); }

int fastln_set_band_bytes(int64_t row_bytes) {
  fastln::g_band_bytes.store(row_bytes < 0 ? -1 : row_bytes);
  return FASTLN_OK;
}

int64_t fastln_get_band_bytes(void) { return fastln::BandRowBytes(true); }

}  // extern "C"
