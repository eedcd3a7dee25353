/* How fast can any float16 layer norm be on this CPU? A bound from below, for issue 5's speed
 * goal (16-bit rows at float32's bytes per second, that is half float32's time).
 *
 * A float16 layer norm has to widen every value to float32 at least once and round every result
 * back to float16, with two FMAs between them (u = x * rstd + c; y = u * w + b). This program
 * times that normalize pass alone, with no statistics, the least work any float16 layer norm
 * does, next to the same pass on float32 rows. When it takes longer than half of fastln's float32
 * time on the same shape, no float16 kernel on that ISA reaches float32's bytes per second there.
 *
 *   cc -O2 bench/half_bound.c -o /tmp/half_bound && /tmp/half_bound 128 768
 *   python -m fastln.bench --dtype float32,float16 --shapes 128x768 --mode out
 *
 * The kernels carry target attributes, so no -m flag is needed; the AVX-512 line is printed only
 * where the CPU has AVX-512F. Best of interleaved rounds, as fastln.bench does.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__attribute__((target("avx2,fma"), noinline)) static void pass_f32(const float *x, float *y,
                                                                  int64_t rows, int64_t d,
                                                                  const float *w, const float *b) {
  const __m256 r = _mm256_set1_ps(1.01f), c = _mm256_set1_ps(0.1f);
  for (int64_t k = 0; k < rows; ++k, x += d, y += d)
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 u = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), r, c);
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(u, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i)));
    }
}

__attribute__((target("avx2,fma,f16c"), noinline)) static void pass_f16(
    const uint16_t *x, uint16_t *y, int64_t rows, int64_t d, const float *w, const float *b) {
  const __m256 r = _mm256_set1_ps(1.01f), c = _mm256_set1_ps(0.1f);
  for (int64_t k = 0; k < rows; ++k, x += d, y += d)
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
      const __m256 u = _mm256_fmadd_ps(v, r, c);
      const __m256 o = _mm256_fmadd_ps(u, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i));
      _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(o, _MM_FROUND_TO_NEAREST_INT));
    }
}

__attribute__((target("avx512f"), noinline)) static void pass_f16_512(
    const uint16_t *x, uint16_t *y, int64_t rows, int64_t d, const float *w, const float *b) {
  const __m512 r = _mm512_set1_ps(1.01f), c = _mm512_set1_ps(0.1f);
  for (int64_t k = 0; k < rows; ++k, x += d, y += d)
    for (int64_t i = 0; i < d; i += 16) {
      const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
      const __m512 u = _mm512_fmadd_ps(v, r, c);
      const __m512 o = _mm512_fmadd_ps(u, _mm512_loadu_ps(w + i), _mm512_loadu_ps(b + i));
      _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(o, _MM_FROUND_TO_NEAREST_INT));
    }
}

int main(int argc, char **argv) {
  const int64_t rows = argc > 1 ? atol(argv[1]) : 128, d = argc > 2 ? atol(argv[2]) : 768;
  const int rounds = argc > 3 ? atoi(argv[3]) : 30;
  if (rows < 1 || d < 16 || d % 16 || rounds < 1) {
    fprintf(stderr, "usage: %s [ROWS [D (a multiple of 16)] [ROUNDS]]\n", argv[0]);
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    fprintf(stderr, "needs AVX2 and FMA\n");
    return 1;
  }
  const int has512 = __builtin_cpu_supports("avx512f");
  const int64_t n = rows * d;
  float *x = aligned_alloc(64, n * 4), *y = aligned_alloc(64, n * 4);
  float *w = aligned_alloc(64, d * 4), *b = aligned_alloc(64, d * 4);
  uint16_t *xh = aligned_alloc(64, n * 2), *yh = aligned_alloc(64, n * 2);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = (float)rand() / RAND_MAX - 0.5f;
    xh[i] = 0x3800 | (uint16_t)(rand() & 0x3ff);  /* float16 in [0.5, 1) */
  }
  for (int64_t i = 0; i < d; ++i) w[i] = 1.0f, b[i] = 0.0f;
  /* Calls per round: four million values' worth, so that a round lasts far longer than the
   * clock's resolution. */
  int calls = (int)(4e6 / (double)n);
  if (calls < 1) calls = 1;
  double best[3] = {1e30, 1e30, 1e30};
  for (int k = 0; k < rounds; ++k)
    for (int f = 0; f < 3; ++f) {
      if (f == 2 && !has512) continue;
      const double t0 = now_us();
      for (int c = 0; c < calls; ++c) {
        if (f == 0) pass_f32(x, y, rows, d, w, b);
        else if (f == 1) pass_f16(xh, yh, rows, d, w, b);
        else pass_f16_512(xh, yh, rows, d, w, b);
      }
      const double t = (now_us() - t0) / calls;
      if (t < best[f]) best[f] = t;
    }
  printf("%ldx%ld, best of %d rounds, us per call: the normalize pass alone (no statistics)\n",
         (long)rows, (long)d, rounds);
  printf("  float32, AVX2+FMA:          %9.4f\n", best[0]);
  printf("  float16, AVX2+FMA+F16C:     %9.4f\n", best[1]);
  if (has512) printf("  float16, AVX-512F:          %9.4f\n", best[2]);
  free(x), free(y), free(w), free(b), free(xh), free(yh);
  return 0;
}
