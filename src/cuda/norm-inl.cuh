// LayerNorm and RMSNorm kernels, forward and backward, written once over the element type T
// (float, __half, __nv_bfloat16). Each norm_<dtype>.cu includes this file and instantiates it.
//
// Design (after Apex's contrib fast layer norm, OneFlow's layer norm and QuACK):
//  - A row is read from memory once and held in registers, as float32, by TPR threads: each thread
//    owns ITEMS vectors of VEC elements, VEC * sizeof(T) = 16 bytes, so that every access is one
//    128-bit load or store.
//  - TPR is tiered by the row length: a part of a warp for short rows (several rows per warp,
//    reduced with width-limited shuffles), up to 1024 threads (32 warps) for long ones. Rows longer
//    than the registers hold go to a block-per-row loop kernel that reads the row again from L2.
//  - The grid is persistent: as many blocks as fit on the device at once, each looping over rows.
//  - Statistics: the row is shifted by its first element before summing (as the CPU path does), so
//    that a row at an offset of 1e6 keeps the digits of its spread; the variance is then a second
//    pass over the registers, sum((d - mean_d)^2), which costs no memory traffic. A row whose
//    squares could overflow float32 is scaled by a power of two first (OverflowScale), and one
//    whose differences could, halved (ShiftHalf). The backward pass recovers what the float32
//    mean's rounding left out for rows far from zero (MeanRest), as the CPU path does.
//  - Backward: dweight/dbias partials accumulate per block in shared memory (every thread owns
//    fixed columns), are folded in a fixed order into one float32 row per block of a workspace, and
//    a second kernel sums those rows in a fixed order. No atomics: results are bitwise repeatable.
//
// Aliasing: every element is read and written by the same thread, and each write depends on the
// thread's own read, so y/h may be x or the residual, and dx may be dy, x or dresidual. The pivot
// (the row's first element) is broadcast from registers, never re-read from memory.

// tests/cuda_emu/ compiles this file as host C++ with FASTLN_CUDA_EMULATE defined, after defining
// the few device builtins used here (threads, barriers, shuffles, launches), so that the kernels'
// logic is tested on machines without a GPU.
#ifndef FASTLN_CUDA_EMULATE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <initializer_list>
#include <utility>

#include "norm.cuh"

namespace fastln_cuda {
namespace {

// ---- element conversion and 16-byte vectors ---------------------------------------------------

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromF<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// x + r rounded to T: exactly the sum in T's own arithmetic (the float sum of two halves is exact).
template <class T>
__device__ __forceinline__ float AddRound(float x, float r) {
  return ToF(FromF<T>(x + r));
}

template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <class T, int VEC>
__device__ __forceinline__ void LoadF(const T *p, float (&out)[VEC]) {
  const Pack<T, VEC> pk = *reinterpret_cast<const Pack<T, VEC> *>(p);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = ToF(pk.v[k]);
}

template <class T, int VEC>
__device__ __forceinline__ void StoreF(T *p, const float (&in)[VEC]) {
  Pack<T, VEC> pk;
#pragma unroll
  for (int k = 0; k < VEC; ++k) pk.v[k] = FromF<T>(in[k]);
  *reinterpret_cast<Pack<T, VEC> *>(p) = pk;
}

// VEC float32 parameters (weight, bias) at p, 16-byte aligned when VEC is a multiple of 4.
template <int VEC>
__device__ __forceinline__ void LoadParams(const float *p, float (&out)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      const float4 q = *reinterpret_cast<const float4 *>(p + k);
      out[k] = q.x;
      out[k + 1] = q.y;
      out[k + 2] = q.z;
      out[k + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = p[k];
  }
}

// acc[0..VEC) += v, as 16-byte shared-memory accesses when VEC allows (no bank conflicts).
template <int VEC>
__device__ __forceinline__ void AccAdd(float *acc, const float (&v)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      float4 q = *reinterpret_cast<float4 *>(acc + k);
      q.x += v[k];
      q.y += v[k + 1];
      q.z += v[k + 2];
      q.w += v[k + 3];
      *reinterpret_cast<float4 *>(acc + k) = q;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc[k] += v[k];
  }
}

// The block's dynamic shared memory, 16-byte aligned.
#ifndef FASTLN_CUDA_EMULATE
__device__ __forceinline__ float *DynamicSmem() {
  extern __shared__ float4 dynamic_smem[];
  return reinterpret_cast<float *>(dynamic_smem);
}
#endif

// ---- reductions over the TPR threads of a row ---------------------------------------------------

// Reduces N values over the TPR threads of each row group: sums, except the last NMAX, which are
// maxima. Every thread of the group gets the same bits (a xor butterfly combines the same pairs on
// both sides, and the cross-warp step reads shared memory in a fixed order). `red` holds
// RPB * (TPR / 32) * N floats when TPR > 32. Every thread of the block must call it (it may
// contain __syncthreads).
template <int N, int NMAX>
__device__ __forceinline__ float Combine(int j, float a, float b) {
  return j >= N - NMAX ? fmaxf(a, b) : a + b;
}

template <int TPR, int N, int NMAX = 0>
__device__ __forceinline__ void RowSum(float (&s)[N], float *red, int group, int t) {
  constexpr int kLanes = TPR < 32 ? TPR : 32;
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int j = 0; j < N; ++j)
      s[j] = Combine<N, NMAX>(j, s[j], __shfl_xor_sync(0xffffffffu, s[j], o));
  }
  if constexpr (TPR > 32) {
    constexpr int kWarps = TPR / 32;
    float *g = red + group * kWarps * N;
    if ((t & 31) == 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) g[(t >> 5) * N + j] = s[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float tot = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) tot = Combine<N, NMAX>(j, tot, g[w * N + j]);
      s[j] = tot;
    }
    __syncthreads();  // `red` is reused by the next call
  }
}

// The value of thread 0 of the caller's row group, to every thread of the group.
template <int TPR>
__device__ __forceinline__ float RowBroadcast(float v, float *slot, int t) {
  if constexpr (TPR <= 32) {
    return __shfl_sync(0xffffffffu, v, 0, TPR);
  } else {
    if (t == 0) *slot = v;
    __syncthreads();
    const float out = *slot;
    // No barrier needed before the next write of *slot: a RowSum's barriers come first.
    return out;
  }
}

// A block-wide sum of N values for the loop kernels (one row per block).
template <int BLOCK, int N, int NMAX = 0>
__device__ __forceinline__ void BlockSum(float (&s)[N], float *red) {
  RowSum<BLOCK, N, NMAX>(s, red, 0, threadIdx.x);
}

// Rows whose sums of squares could overflow float32 (|x| up to 3.4e38, squares summed over n) are
// scaled by a power of two, which is exact, before their squares are summed. Scale for a row
// whose largest magnitude (after the shift) is `amax`: 1 for every ordinary row.
__device__ __forceinline__ float OverflowScale(float amax, float n) {
  if (!(amax >= sqrtf(3.0e38f / n)) || !isfinite(amax)) return 1.f;  // Inf/NaN rows give NaN anyway
  return ldexpf(1.f, -ilogbf(amax));
}

// Rows are shifted by their first value; a difference from a pivot of 2^100 or more could pass
// float32's range (finite values of both signs near its limit), so such rows take the
// differences halved (exactly, with one rounding: x * 0.5 - pivot * 0.5 contracts to an FMA or
// halves exactly) and carry the 1/2 in their scale. Below that the difference cannot overflow:
// it stays under FLT_MAX + 2^103, which rounds to FLT_MAX.
__device__ __forceinline__ float ShiftHalf(float pivot) {
  return fabsf(pivot) >= 0x1p100f ? 0.5f : 1.f;
}

// Whether any row group of the warp (TPR <= 32) or of the block (several groups of more than a
// warp) has `flag`: every thread then takes the same shuffles and barriers. A block of one row
// group already agrees.
template <int TPR, int RPB>
__device__ __forceinline__ bool AnyInGroupSet(bool flag) {
  if constexpr (TPR <= 32) {
    return __any_sync(0xffffffffu, flag);
  } else if constexpr (RPB > 1) {
    return __syncthreads_or(flag) != 0;
  } else {
    return flag;
  }
}

// ---- forward ---------------------------------------------------------------------------------------

// After a first reduction s = {sum of the held values (or of their squares), max |value|}: when
// the row's squares could overflow, scales the held values by a power of two and sums them (or
// their squares) again into s[0]. Returns the scale, 1 for ordinary rows.
template <int TPR, int RPB, int ITEMS, int VEC>
__device__ __forceinline__ float RescaleIfHuge(float (&v)[ITEMS][VEC], float (&s)[2], bool squares,
                                               float n, float *red, int group, int t) {
  const float scale = OverflowScale(s[1], n);
  if (AnyInGroupSet<TPR, RPB>(scale != 1.f)) {
    float q[1] = {0.f};
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[i][k] *= scale;
        q[0] = squares ? fmaf(v[i][k], v[i][k], q[0]) : q[0] + v[i][k];
      }
    RowSum<TPR, 1>(q, red, group, t);
    s[0] = q[0];
  }
  return scale;
}


// The arguments' arrays as T.
template <class T>
struct FwdArrays {
  const T *x, *r;
  T *y, *h;
  __device__ explicit FwdArrays(const FwdArgs &a)
      : x(static_cast<const T *>(a.x)), r(static_cast<const T *>(a.r)),
        y(static_cast<T *>(a.y)), h(static_cast<T *>(a.h)) {}
};

template <class T>
struct BwdArrays {
  const T *dy, *x, *dr;
  T *dx;
  __device__ explicit BwdArrays(const BwdArgs &a)
      : dy(static_cast<const T *>(a.dy)), x(static_cast<const T *>(a.x)),
        dr(static_cast<const T *>(a.dres)), dx(static_cast<T *>(a.dx)) {}
};


template <class T, int VEC, int TPR, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK) FwdRegKernel(FwdArgs a) {
  constexpr int RPB = BLOCK / TPR;
  constexpr int kWarps = TPR > 32 ? TPR / 32 : 1;
  __shared__ float red[RPB * kWarps * 2];
  __shared__ float piv[RPB];
  const int group = threadIdx.x / TPR, t = threadIdx.x % TPR;
  const FwdArrays<T> arr(a);
  const T *X = arr.x, *R = arr.r;
  T *Y = arr.y, *H = arr.h;
  const int64_t cols = a.cols;
  const float n = float(cols);

  for (int64_t base = int64_t(blockIdx.x) * RPB; base < a.rows; base += int64_t(gridDim.x) * RPB) {
    const int64_t row = base + group;
    const bool valid = row < a.rows;
    float v[ITEMS][VEC];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int64_t c = (int64_t(i) * TPR + t) * VEC;
      if (valid && c < cols) {
        LoadF<T, VEC>(X + row * a.ldx + c, v[i]);
        if (R) {
          float q[VEC];
          LoadF<T, VEC>(R + row * a.ldr + c, q);
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[i][k] = AddRound<T>(v[i][k], q[k]);
          if (H) StoreF<T, VEC>(H + row * a.ldh + c, v[i]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
      }
    }

    // r: 1 / sqrt(var + eps) in the units of the values held (scaled when the row is huge).
    float mean = 0.f, rstd, r;
    if (a.rms) {
      float s[2] = {0.f, 0.f};  // sum of squares, max |x|
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          s[0] = fmaf(v[i][k], v[i][k], s[0]);
          s[1] = fmaxf(s[1], fabsf(v[i][k]));
        }
      RowSum<TPR, 2, 1>(s, red, group, t);
      const float scale = RescaleIfHuge<TPR, RPB>(v, s, true, n, red, group, t);
      r = 1.f / sqrtf(s[0] / n + a.eps * scale * scale);
      rstd = r * scale;
    } else {
      const float pivot = RowBroadcast<TPR>(v[0][0], &piv[group], t);
      const float half = ShiftHalf(pivot);
      float s[2] = {0.f, 0.f};  // sum of x - pivot, max |x - pivot| (halved with half)
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const bool in = (int64_t(i) * TPR + t) * VEC < cols;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          v[i][k] = in ? v[i][k] * half - pivot * half : 0.f;
          s[0] += v[i][k];
          s[1] = fmaxf(s[1], fabsf(v[i][k]));
        }
      }
      RowSum<TPR, 2, 1>(s, red, group, t);
      const float sc = RescaleIfHuge<TPR, RPB>(v, s, false, n, red, group, t), scale = half * sc;
      const float md = s[0] / n;
      float q[1] = {0.f};
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const bool in = (int64_t(i) * TPR + t) * VEC < cols;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          v[i][k] -= md;
          if (in) q[0] = fmaf(v[i][k], v[i][k], q[0]);
        }
      }
      RowSum<TPR, 1>(q, red, group, t);
      r = 1.f / sqrtf(q[0] / n + a.eps * scale * scale);
      rstd = r * scale;
      mean = (pivot * half + md / sc) / half;  // a halved row's mean - pivot may pass FLT_MAX
    }

    if (valid) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = (int64_t(i) * TPR + t) * VEC;
        if (c < cols) {
          float o[VEC], w[VEC], b[VEC];
          if (a.w) LoadParams<VEC>(a.w + c, w);
          if (a.b) LoadParams<VEC>(a.b + c, b);
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            float u = v[i][k] * r;
            if (a.w) u *= w[k];
            if (a.b) u += b[k];
            o[k] = u;
          }
          StoreF<T, VEC>(Y + row * a.ldy + c, o);
        }
      }
      if (t == 0) {
        if (a.mean) a.mean[row] = mean;
        if (a.rstd) a.rstd[row] = rstd;
      }
    }
  }
}

// Rows too long for the registers: one block per row, the row read three times (the later reads
// mostly from L2). With a residual, pass 1 writes h and the later passes read it back (the barrier
// inside BlockSum makes the block's writes visible to the block), or recompute x + r when h is
// not wanted.
template <class T, int VEC, int BLOCK>
__global__ void __launch_bounds__(BLOCK) FwdLoopKernel(FwdArgs a) {
  __shared__ float red[BLOCK / 32 * 2];
  const FwdArrays<T> arr(a);
  const T *X = arr.x, *R = arr.r;
  T *Y = arr.y, *H = arr.h;
  const int64_t cols = a.cols;
  const float n = float(cols);
  const int64_t step = int64_t(BLOCK) * VEC;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T *xr = X + row * a.ldx;
    const T *rr = R ? R + row * a.ldr : nullptr;
    T *hr = H ? H + row * a.ldh : nullptr;
    T *yr = Y + row * a.ldy;
    const float pivot = rr ? AddRound<T>(ToF(xr[0]), ToF(rr[0])) : ToF(xr[0]);
    __syncthreads();  // everyone has the pivot before h (which may be x) is written
    auto load = [&](int64_t c, float (&v)[VEC], bool first) {
      if (hr && !first) {
        LoadF<T, VEC>(hr + c, v);
        return;
      }
      LoadF<T, VEC>(xr + c, v);
      if (rr) {
        float q[VEC];
        LoadF<T, VEC>(rr + c, q);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = AddRound<T>(v[k], q[k]);
        if (hr) StoreF<T, VEC>(hr + c, v);
      }
    };
    const float shift = a.rms ? 0.f : pivot, half = a.rms ? 1.f : ShiftHalf(pivot);
    float s[2] = {0.f, 0.f};  // sum of (x - shift) or of its squares; max |x - shift| (halved)
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
      float v[VEC];
      load(c, v, true);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = v[k] * half - shift * half;
        s[0] = a.rms ? fmaf(d, d, s[0]) : s[0] + d;
        s[1] = fmaxf(s[1], fabsf(d));
      }
    }
    BlockSum<BLOCK, 2, 1>(s, red);
    // sc: the scale of the halved differences; scale, of x's own units. The same in every
    // thread of the block.
    const float sc = OverflowScale(s[1], n), scale = half * sc;
    if (sc != 1.f) {
      float q[1] = {0.f};
      for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
        float v[VEC];
        load(c, v, false);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = (v[k] * half - shift * half) * sc;
          q[0] = a.rms ? fmaf(d, d, q[0]) : q[0] + d;
        }
      }
      BlockSum<BLOCK, 1>(q, red);
      s[0] = q[0];
    }
    // r: 1 / sqrt(var + eps) in the scaled units
    float md = 0.f, r;
    if (a.rms) {
      r = 1.f / sqrtf(s[0] / n + a.eps * scale * scale);
    } else {
      md = s[0] / n;
      float q[1] = {0.f};
      for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
        float v[VEC];
        load(c, v, false);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float d = (v[k] * half - shift * half) * sc - md;
          q[0] = fmaf(d, d, q[0]);
        }
      }
      BlockSum<BLOCK, 1>(q, red);
      r = 1.f / sqrtf(q[0] / n + a.eps * scale * scale);
    }
    const float rstd = r * scale;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
      float v[VEC], o[VEC], w[VEC], b[VEC];
      load(c, v, false);
      if (a.w) LoadParams<VEC>(a.w + c, w);
      if (a.b) LoadParams<VEC>(a.b + c, b);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        float u = ((v[k] * half - shift * half) * sc - md) * r;
        if (a.w) u *= w[k];
        if (a.b) u += b[k];
        o[k] = u;
      }
      StoreF<T, VEC>(yr + c, o);
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[row] = (pivot * half + md / sc) / half;  // as in FwdRegKernel
      if (a.rstd) a.rstd[row] = rstd;
    }
    __syncthreads();  // the next row's pivot read must follow this row's writes
  }
}

// ---- backward --------------------------------------------------------------------------------------

// The float32 mean the forward pass returns is rounded by up to half its last place: 0.03 at 1e6,
// a few percent of a unit spread, which taken as given would shift every xhat and so dx and
// dweight. sum(x - mean) (exact differences for values within a factor of two of the mean) gives
// back what it left out; returned in units of xhat, (sum / n) * rstd. As on the CPU path, only
// for rows whose |mean| is more than 16 standard deviations (nearer ones lose at most 16 units
// of float32's roundoff, and keep their bits), and 0 where not finite, so that a row with one NaN
// or Inf keeps its other columns' dweight.
__device__ __forceinline__ float MeanRest(float sum, float n, float mean, float rstd) {
  if (!(fabsf(mean * rstd) > 16.f)) return 0.f;
  const float e = sum / n * rstd;
  return isfinite(e) ? e : 0.f;
}

// (x - mean) * rstd, with d = x - mean for MeanRest's sum. Finite values of both signs near
// float32's limit have a difference past its range: it is then taken halved (exact) and scaled
// back after rstd, and d stays Inf, which turns MeanRest off for the row (there the mean's
// rounding is a 1e-7 part of the spread).
__device__ __forceinline__ float Centered(float x, float mean, float rstd, float &d) {
  d = x - mean;
  if (fabsf(d) != INFINITY) return d * rstd;
  return (0.5f * x - 0.5f * mean) * rstd * 2.f;
}

// Two 512-thread blocks per SM (or one of 1024): MeanRest's third sum took the backward kernels
// past 64 registers (float32 68-78, 16-bit 76-98: one block per SM), where before it float32's
// had fitted two blocks per SM, and 16-bit's for rows of up to 16 and of 513-1024 values. Asked for two, ptxas (sm_90) keeps every tier at 64 with at most 8 bytes of spills.
constexpr int BwdMinBlocks(int block) { return 1024 / block; }

// Partial sums live in shared memory (acc: [2][RPB][TPR * ITEMS * VEC] floats) while the block
// loops over its rows; each thread only touches its own columns, so no barrier is needed until
// the fold into the workspace at the end.
template <class T, int VEC, int TPR, int ITEMS, int BLOCK>
__global__ void __launch_bounds__(BLOCK, BwdMinBlocks(BLOCK)) BwdRegKernel(BwdArgs a) {
  constexpr int RPB = BLOCK / TPR;
  constexpr int kWarps = TPR > 32 ? TPR / 32 : 1;
  constexpr int kSpan = TPR * ITEMS * VEC;
  __shared__ float red[RPB * kWarps * 3];
  float *accw = DynamicSmem();
  float *accb = accw + RPB * kSpan;
  const int group = threadIdx.x / TPR, t = threadIdx.x % TPR;
  const BwdArrays<T> arr(a);
  const T *DY = arr.dy, *X = arr.x, *DR = arr.dr;
  T *DX = arr.dx;
  const int64_t cols = a.cols;
  const float n = float(cols);
  const bool partial = a.partial != nullptr;

  if (partial) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int p = group * kSpan + (i * TPR + t) * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k) accw[p + k] = accb[p + k] = 0.f;
    }
  }

  for (int64_t base = int64_t(blockIdx.x) * RPB; base < a.rows; base += int64_t(gridDim.x) * RPB) {
    const int64_t row = base + group;
    const bool valid = row < a.rows;
    // xv: x, then (x - mean) * rstd (less MeanRest's e once known); gv: dy, then g = dy * w.
    float xv[ITEMS][VEC], gv[ITEMS][VEC];
    float mean = 0.f, rstd = 0.f;
    if (valid) {
      if (!a.rms) mean = a.mean[row];
      rstd = a.rstd[row];
    }
    float s[3] = {0.f, 0.f, 0.f};  // sum(g * xv), sum(g), sum(x - mean)
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int64_t c = (int64_t(i) * TPR + t) * VEC;
      if (valid && c < cols) {
        LoadF<T, VEC>(X + row * a.ldx + c, xv[i]);
        LoadF<T, VEC>(DY + row * a.lddy + c, gv[i]);
        float w[VEC];
        if (a.w) LoadParams<VEC>(a.w + c, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          float d;
          xv[i][k] = Centered(xv[i][k], mean, rstd, d);
          s[2] += d;
        }
        if (partial) {
          float dwv[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) dwv[k] = gv[i][k] * xv[i][k];
          const int p = group * kSpan + int(c);
          AccAdd<VEC>(accw + p, dwv);
          AccAdd<VEC>(accb + p, gv[i]);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          if (a.w) gv[i][k] *= w[k];
          s[0] = fmaf(gv[i][k], xv[i][k], s[0]);
          s[1] += gv[i][k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) xv[i][k] = gv[i][k] = 0.f;
      }
    }
    RowSum<TPR, 3>(s, red, group, t);
    const float e = a.rms ? 0.f : MeanRest(s[2], n, mean, rstd);
    const float c1 = (e != 0.f ? s[0] - e * s[1] : s[0]) / n, c2 = a.rms ? 0.f : s[1] / n;
    if (valid) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int64_t c = (int64_t(i) * TPR + t) * VEC;
        if (c < cols) {
          if (e != 0.f) {
            // A far row: its dweight partials took dy * (x - mean) * rstd above; dy is read
            // again (before dx, which may be dy, is written) to take dy * e back out.
            float dy[VEC];
            LoadF<T, VEC>(DY + row * a.lddy + c, dy);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
              xv[i][k] -= e;
              dy[k] *= -e;
            }
            if (partial) AccAdd<VEC>(accw + group * kSpan + int(c), dy);
          }
          float o[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) o[k] = (gv[i][k] - c2 - xv[i][k] * c1) * rstd;
          if (DR) {
            float q[VEC];
            LoadF<T, VEC>(DR + row * a.lddr + c, q);
#pragma unroll
            for (int k = 0; k < VEC; ++k) o[k] += q[k];
          }
          StoreF<T, VEC>(DX + row * a.lddx + c, o);
        }
      }
    }
  }

  if (partial) {
    __syncthreads();
    const int64_t nb = gridDim.x;
    float *pw = a.partial + int64_t(blockIdx.x) * cols;
    float *pb = a.partial + (nb + blockIdx.x) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) {
      float sw = 0.f, sb = 0.f;
#pragma unroll
      for (int g = 0; g < RPB; ++g) {
        sw += accw[g * kSpan + c];
        sb += accb[g * kSpan + c];
      }
      if (a.dw) pw[c] = sw;
      if (a.db) pb[c] = sb;
    }
  }
}

// Rows too long for the registers: one block per row, two passes; the partial sums go straight to
// the block's own workspace rows (each thread owns fixed columns there too).
template <class T, int VEC, int BLOCK>
__global__ void __launch_bounds__(BLOCK) BwdLoopKernel(BwdArgs a) {
  __shared__ float red[BLOCK / 32 * 3];
  const BwdArrays<T> arr(a);
  const T *DY = arr.dy, *X = arr.x, *DR = arr.dr;
  T *DX = arr.dx;
  const int64_t cols = a.cols;
  const float n = float(cols);
  const int64_t step = int64_t(BLOCK) * VEC;
  const int64_t nb = gridDim.x;
  // Only the partial rows wanted: ColumnSumKernel reads each half only for its output.
  float *pw = a.partial && a.dw ? a.partial + int64_t(blockIdx.x) * cols : nullptr;
  float *pb = a.partial && a.db ? a.partial + (nb + blockIdx.x) * cols : nullptr;
  if (a.partial) {
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) {
      if (pw) pw[c] = 0.f;
      if (pb) pb[c] = 0.f;
    }
    __syncthreads();  // the zeroing stride differs from the accumulation's below
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float mean = a.rms ? 0.f : a.mean[row];
    const float rstd = a.rstd[row];
    const T *xr = X + row * a.ldx;
    const T *dyr = DY + row * a.lddy;
    // Loads x - mean, (x - mean) * rstd less e (MeanRest, once known; see Centered), dy and
    // g = dy * w for VEC columns at c.
    float e = 0.f;
    auto load = [&](int64_t c, float (&d)[VEC], float (&xh)[VEC], float (&dy)[VEC],
                    float (&g)[VEC]) {
      LoadF<T, VEC>(xr + c, d);
      LoadF<T, VEC>(dyr + c, dy);
      float w[VEC];
      if (a.w) LoadParams<VEC>(a.w + c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        xh[k] = Centered(d[k], mean, rstd, d[k]) - e;
        g[k] = a.w ? dy[k] * w[k] : dy[k];
      }
    };
    float s[3] = {0.f, 0.f, 0.f};  // sum(g * xhat), sum(g), sum(x - mean)
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
      float d[VEC], xh[VEC], dy[VEC], g[VEC];
      load(c, d, xh, dy, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        s[0] = fmaf(g[k], xh[k], s[0]);
        s[1] += g[k];
        s[2] += d[k];
      }
    }
    if (a.rms) {
      float s2[2] = {s[0], s[1]};
      BlockSum<BLOCK, 2>(s2, red);
      s[0] = s2[0];
      s[1] = s2[1];
    } else {
      BlockSum<BLOCK, 3>(s, red);
      e = MeanRest(s[2], n, mean, rstd);
    }
    const float c1 = (e != 0.f ? s[0] - e * s[1] : s[0]) / n, c2 = a.rms ? 0.f : s[1] / n;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < cols; c += step) {
      float d[VEC], xh[VEC], dy[VEC], g[VEC], o[VEC];
      load(c, d, xh, dy, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = (g[k] - c2 - xh[k] * c1) * rstd;
      if (DR) {
        float q[VEC];
        LoadF<T, VEC>(DR + row * a.lddr + c, q);
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] += q[k];
      }
      if (pw) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) pw[c + k] = fmaf(dy[k], xh[k], pw[c + k]);
      }
      if (pb) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) pb[c + k] += dy[k];
      }
      StoreF<T, VEC>(DX + row * a.lddx + c, o);
    }
    __syncthreads();  // dx may be x or dy: this row's reads are done before the block moves on
  }
}

// out0[c] = sum over p of partial[0][p][c], out1 likewise from partial[1]; in a fixed order: each
// of 8 slices sums every 8th part, then the slices are added in order.
struct ColumnSumArgs {
  const float *partial;
  int64_t nparts, cols;
  float *out0, *out1;
};

__global__ void __launch_bounds__(256) ColumnSumKernel(ColumnSumArgs a) {
  const float *partial = a.partial;
  const int64_t nparts = a.nparts, cols = a.cols;
  float *out0 = a.out0, *out1 = a.out1;
  __shared__ float sm[8][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx;
  for (int which = 0; which < 2; ++which) {
    float *out = which ? out1 : out0;
    if (!out) continue;
    const float *p = partial + int64_t(which) * nparts * cols;
    float s = 0.f;
    if (c < cols) {
      for (int64_t q = ty; q < nparts; q += 8) s += p[q * cols + c];
    }
    sm[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float tot = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) tot += sm[k][tx];
      out[c] = tot;
    }
    __syncthreads();
  }
}

// ---- launch planning ----------------------------------------------------------------------------------

// Elements per thread held in registers: the forward holds one row, the backward two (x and dy).
constexpr int kFwdCap = 32;
constexpr int kBwdCap = 16;
constexpr int kLoopBlock = 512;
constexpr int kMaxTpr = 1024;
// Scalar elements per thread on the unaligned fallback: half the vector path's, which at 1024
// threads (64 registers each) would spill.
constexpr int kFallbackItems = 8;

template <int VEC>
constexpr int FwdItems() {
  return VEC == 1 ? kFallbackItems : kFwdCap / VEC;
}
template <int VEC>
constexpr int BwdItems() {
  return VEC == 1 ? kFallbackItems : kBwdCap / VEC;
}

// Launches kernel K with one argument struct; the emulator's build replaces cudaLaunchKernel.
template <class A, void (*K)(A)>
cudaError_t Launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const void *args) {
  A copy = *static_cast<const A *>(args);
#ifdef FASTLN_CUDA_EMULATE
  return EmulateLaunch(K, grid, block, smem, copy);
#else
  void *argv[] = {&copy};
  return cudaLaunchKernel(reinterpret_cast<const void *>(K), grid, block, argv, smem, stream);
#endif
}

struct Plan {
  const void *kernel = nullptr;  // for the occupancy query
  cudaError_t (*launch)(dim3, dim3, size_t, cudaStream_t, const void *) = nullptr;
  int block = 0;
  int rows_per_block = 1;
  size_t smem = 0;
};

template <class A, void (*K)(A)>
Plan MakePlan(int block, int rows_per_block, size_t smem) {
  Plan p;
  p.kernel = reinterpret_cast<const void *>(K);
  p.launch = &Launch<A, K>;
  p.block = block;
  p.rows_per_block = rows_per_block;
  p.smem = smem;
  return p;
}

constexpr int FwdBlock(int tpr) { return tpr < 128 ? 128 : tpr; }
// Larger blocks for the backward's short rows: more rows share one block's partial sums, so the
// workspace (one row per block) stays small next to the data.
constexpr int BwdBlock(int tpr) { return tpr < 512 ? 512 : tpr; }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int NextPow2(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The register kernels' tiers: Tier::Make<VEC, TPR>() plans the kernel with TPR threads per row.
template <class T>
struct FwdTier {
  template <int VEC, int TPR>
  static Plan Make() {
    constexpr int kBlock = FwdBlock(TPR);
    return MakePlan<FwdArgs, FwdRegKernel<T, VEC, TPR, FwdItems<VEC>(), kBlock>>(
        kBlock, kBlock / TPR, 0);
  }
};

template <class T>
struct BwdTier {
  template <int VEC, int TPR>
  static Plan Make() {
    constexpr int kBlock = BwdBlock(TPR);
    return MakePlan<BwdArgs, BwdRegKernel<T, VEC, TPR, BwdItems<VEC>(), kBlock>>(
        kBlock, kBlock / TPR, size_t(2) * kBlock * BwdItems<VEC>() * VEC * sizeof(float));
  }
};

// The plan for `tpr` threads per row (a power of two): every tier 1..1024 with 16-byte vectors,
// and only 32 and 1024 on the unaligned fallback, which is a correctness path.
template <class Tier, int VEC, int TPR = 1>
Plan TierPlan(int tpr) {
  if constexpr (TPR > kMaxTpr) {
    return Plan{};
  } else if constexpr (VEC == 1 && TPR != 32 && TPR != kMaxTpr) {
    return TierPlan<Tier, VEC, TPR * 2>(tpr);
  } else {
    if (tpr != TPR) return TierPlan<Tier, VEC, TPR * 2>(tpr);
    return Tier::template Make<VEC, TPR>();
  }
}

// The threads per row for `cols`: the fewest (a power of two) whose registers hold the row.
template <int VEC>
int TprFor(int64_t cols, int items) {
  const int64_t need = CeilDiv(CeilDiv(cols, VEC), items);
  if (need > kMaxTpr) return 0;
  if (VEC == 1) return need <= 32 ? 32 : kMaxTpr;
  return NextPow2(need);
}

inline bool Aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether every row of every array starts on a 16-byte boundary, so that VEC-wide accesses work.
template <class T, int VEC>
bool VecOk(int64_t cols, std::initializer_list<std::pair<const void *, int64_t>> arrays,
           std::initializer_list<const float *> params) {
  if (cols % VEC) return false;
  for (const auto &a : arrays) {
    if (a.first && (!Aligned16(a.first) || a.second % VEC)) return false;
  }
  for (const float *p : params) {
    if (p && !Aligned16(p)) return false;
  }
  return true;
}

template <class T>
Plan ForwardPlan(const FwdArgs &a) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = VecOk<T, VEC>(a.cols, {{a.x, a.ldx}, {a.r, a.ldr}, {a.y, a.ldy}, {a.h, a.ldh}},
                                 {a.w, a.b});
  if (vec) {
    const int tpr = TprFor<VEC>(a.cols, FwdItems<VEC>());
    if (tpr) return TierPlan<FwdTier<T>, VEC>(tpr);
    return MakePlan<FwdArgs, FwdLoopKernel<T, VEC, kLoopBlock>>(kLoopBlock, 1, 0);
  }
  const int tpr = TprFor<1>(a.cols, FwdItems<1>());
  if (tpr) return TierPlan<FwdTier<T>, 1>(tpr);
  return MakePlan<FwdArgs, FwdLoopKernel<T, 1, kLoopBlock>>(kLoopBlock, 1, 0);
}

template <class T>
cudaError_t BackwardPlan(const BwdArgs &a, int device, Plan *out) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vec = VecOk<T, VEC>(a.cols, {{a.x, a.ldx}, {a.dy, a.lddy}, {a.dres, a.lddr},
                                          {a.dx, a.lddx}},
                                 {a.w});
  const int tpr = vec ? TprFor<VEC>(a.cols, BwdItems<VEC>()) : TprFor<1>(a.cols, BwdItems<1>());
  Plan p;
  if (tpr) p = vec ? TierPlan<BwdTier<T>, VEC>(tpr) : TierPlan<BwdTier<T>, 1>(tpr);
  const bool partial = a.dw || a.db;
  if (p.kernel) {
    if (!partial) {
      p.smem = 0;
    } else {
      int sms = 0, optin = 0;
      cudaError_t e = DeviceFacts(device, &sms, &optin);
      if (e != cudaSuccess) return e;
      if (p.smem > size_t(optin)) p.kernel = nullptr;  // a GPU with less shared memory
    }
  }
  if (!p.kernel) {
    p = vec ? MakePlan<BwdArgs, BwdLoopKernel<T, VEC, kLoopBlock>>(kLoopBlock, 1, 0)
            : MakePlan<BwdArgs, BwdLoopKernel<T, 1, kLoopBlock>>(kLoopBlock, 1, 0);
  }
  *out = p;
  return cudaSuccess;
}

// The persistent grid: as many blocks as are resident at once, no more than there is work for.
// `cap` bounds the blocks per multiprocessor (the backward's workspace grows with the grid).
inline cudaError_t GridFor(const Plan &p, int64_t rows, int device, int cap, int *grid) {
  int sms = 0, optin = 0, per_sm = 0;
  cudaError_t e = DeviceFacts(device, &sms, &optin);
  if (e != cudaSuccess) return e;
  e = BlocksPerSm(p.kernel, device, p.block, p.smem, &per_sm);
  if (e != cudaSuccess) return e;
  if (per_sm < 1) per_sm = 1;
  if (cap > 0 && per_sm > cap) per_sm = cap;
  const int64_t want = CeilDiv(rows, p.rows_per_block);
  const int64_t most = int64_t(sms) * per_sm;
  *grid = int(want < most ? want : most);
  if (*grid < 1) *grid = 1;
  return cudaSuccess;
}

constexpr int kBwdBlocksPerSm = 2;

inline cudaError_t LaunchPlan(const Plan &p, int grid, const void *args, cudaStream_t stream) {
  return p.launch(dim3(grid), dim3(p.block), p.smem, stream, args);
}

}  // namespace

template <class T>
cudaError_t Forward(const FwdArgs &a, int device, cudaStream_t stream) {
  const Plan p = ForwardPlan<T>(a);
  int grid = 0;
  cudaError_t e = GridFor(p, a.rows, device, 0, &grid);
  if (e != cudaSuccess) return e;
  FwdArgs copy = a;
  return LaunchPlan(p, grid, &copy, stream);
}

template <class T>
cudaError_t BackwardWorkspace(const BwdArgs &a, int device, size_t *bytes) {
  *bytes = 0;
  if (!a.dw && !a.db) return cudaSuccess;
  Plan p;
  cudaError_t e = BackwardPlan<T>(a, device, &p);
  if (e != cudaSuccess) return e;
  int grid = 0;
  e = GridFor(p, a.rows, device, kBwdBlocksPerSm, &grid);
  if (e != cudaSuccess) return e;
  *bytes = size_t(2) * size_t(grid) * size_t(a.cols) * sizeof(float);
  return cudaSuccess;
}

template <class T>
cudaError_t Backward(const BwdArgs &a, int device, cudaStream_t stream) {
  Plan p;
  cudaError_t e = BackwardPlan<T>(a, device, &p);
  if (e != cudaSuccess) return e;
  int grid = 0;
  e = GridFor(p, a.rows, device, kBwdBlocksPerSm, &grid);
  if (e != cudaSuccess) return e;
  const bool partial = a.dw || a.db;
  BwdArgs copy = a;
  if (!partial) copy.partial = nullptr;
  // The caller sized the workspace with BackwardWorkspace; the same plan gives the same grid.
  if (partial && copy.partial_bytes < size_t(2) * grid * size_t(a.cols) * sizeof(float))
    return cudaErrorInvalidValue;
  e = LaunchPlan(p, grid, &copy, stream);
  if (e != cudaSuccess || !partial) return e;
  const ColumnSumArgs sum{copy.partial, grid, a.cols, a.dw, a.db};
  return Launch<ColumnSumArgs, ColumnSumKernel>(dim3(unsigned(CeilDiv(a.cols, 32))), dim3(256), 0,
                                                stream, &sum);
}

}  // namespace fastln_cuda

// Instantiates the three entry points for one element type, inside namespace fastln_cuda.
#define FASTLN_CUDA_INSTANTIATE(T)                                              \
  template cudaError_t Forward<T>(const FwdArgs &, int, cudaStream_t);          \
  template cudaError_t Backward<T>(const BwdArgs &, int, cudaStream_t);         \
  template cudaError_t BackwardWorkspace<T>(const BwdArgs &, int, size_t *);
