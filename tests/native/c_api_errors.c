/* The C API from C: fastln.h compiles as C, and bad arguments return the documented status codes.
 * Built by tests/test_c_api.py (and by CMake with -DFASTLN_BUILD_TESTS=ON). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fastln/fastln.h"

static int passed, failed;

static void expect(int got, int want, const char *what) {
  if (got == want) {
    ++passed;
  } else {
    ++failed;
    printf("FAIL: %s: got %d (%s), want %d\n", what, got, fastln_status_string(got), want);
  }
}

int main(void) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  double xd[8] = {1, 2, 3, 4, 5, 6, 7, 8}, yd[8];
  expect(fastln_init_status(), FASTLN_OK, "init status");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, 1, 8, 1e-5f), FASTLN_OK, "valid f32");
  expect(fastln_layer_norm_f64(xd, yd, NULL, NULL, NULL, NULL, 1, 8, 1e-5), FASTLN_OK, "valid f64");
  expect(fastln_layer_norm_f32(NULL, y, NULL, NULL, NULL, NULL, 1, 8, 1e-5f), FASTLN_ERR_NULL_POINTER, "NULL x");
  expect(fastln_layer_norm_f32(x, NULL, NULL, NULL, NULL, NULL, 1, 8, 1e-5f), FASTLN_ERR_NULL_POINTER, "NULL y");
  expect(fastln_layer_norm_f64(NULL, yd, NULL, NULL, NULL, NULL, 1, 8, 1e-5), FASTLN_ERR_NULL_POINTER, "NULL x f64");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, 1, 0, 1e-5f), FASTLN_ERR_BAD_SHAPE, "cols = 0");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, 1, -1, 1e-5f), FASTLN_ERR_BAD_SHAPE, "cols < 0");
  expect(fastln_layer_norm_f64(xd, yd, NULL, NULL, NULL, NULL, -1, 8, 1e-5), FASTLN_ERR_BAD_SHAPE, "rows < 0");
  expect(fastln_layer_norm_f32_ld(x, 4, y, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5), FASTLN_ERR_BAD_SHAPE, "ldx < cols");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, 1, 8, -1e-5f), FASTLN_ERR_BAD_EPS, "eps < 0");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, 1, 8, NAN), FASTLN_ERR_BAD_EPS, "eps NaN");
  expect(fastln_layer_norm_f64(xd, yd, NULL, NULL, NULL, NULL, 1, 8, INFINITY), FASTLN_ERR_BAD_EPS, "eps inf");

  /* Examples stored as columns: 2 examples of 4 values, x(i, k) at x[k * 2 + i]. */
  expect(fastln_layer_norm_cols_f32(x, 2, y, 2, NULL, NULL, NULL, NULL, 2, 4, 1e-5), FASTLN_OK,
         "cols valid");
  expect(fabsf(y[0] + 1.3416394f) < 1e-5f && fabsf(y[7] - 1.3416394f) < 1e-5f, 1, "cols values");
  expect(fastln_layer_norm_cols_f64(xd, 2, yd, 2, NULL, NULL, NULL, NULL, 0, 4, 1e-5), FASTLN_OK,
         "cols no examples");
  expect(fastln_layer_norm_cols_f32(NULL, 2, y, 2, NULL, NULL, NULL, NULL, 2, 4, 1e-5),
         FASTLN_ERR_NULL_POINTER, "cols NULL x");
  expect(fastln_layer_norm_cols_f32(x, 1, y, 2, NULL, NULL, NULL, NULL, 2, 4, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "cols ldx < examples");
  expect(fastln_layer_norm_cols_f64(xd, 2, yd, 2, NULL, NULL, NULL, NULL, 2, 0, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "cols cols = 0");
  expect(fastln_layer_norm_cols_f32(x, 2, y, 2, NULL, NULL, NULL, NULL, 2, 4, NAN),
         FASTLN_ERR_BAD_EPS, "cols eps NaN");

  /* RMSNorm and the backward passes: the same rules. */
  float m[1] = {4.5f}, r[1] = {0.5f}, dx[8], dw[8], db[8];
  expect(fastln_rms_norm_f32(x, y, NULL, NULL, 1, 8, 1e-5f), FASTLN_OK, "rms valid");
  expect(fastln_rms_norm_f32(NULL, y, NULL, NULL, 1, 8, 1e-5f), FASTLN_ERR_NULL_POINTER, "rms NULL x");
  expect(fastln_rms_norm_f64(xd, yd, NULL, NULL, 1, 0, 1e-5), FASTLN_ERR_BAD_SHAPE, "rms cols = 0");
  expect(fastln_rms_norm_f32(x, y, NULL, NULL, 1, 8, NAN), FASTLN_ERR_BAD_EPS, "rms eps NaN");
  expect(fastln_layer_norm_backward_f32(y, x, m, r, NULL, dx, dw, db, 1, 8), FASTLN_OK, "backward valid");
  expect(fastln_layer_norm_backward_f32(NULL, x, m, r, NULL, dx, dw, db, 1, 8), FASTLN_ERR_NULL_POINTER,
         "backward NULL dy");
  expect(fastln_layer_norm_backward_f32(y, x, NULL, r, NULL, dx, dw, db, 1, 8), FASTLN_ERR_NULL_POINTER,
         "backward NULL mean");
  expect(fastln_layer_norm_backward_f32(y, x, m, NULL, NULL, dx, dw, db, 1, 8), FASTLN_ERR_NULL_POINTER,
         "backward NULL rstd");
  expect(fastln_layer_norm_backward_f32(y, x, m, r, NULL, dx, dw, db, 1, -8), FASTLN_ERR_BAD_SHAPE,
         "backward cols < 0");
  expect(fastln_rms_norm_backward_f32(y, x, r, NULL, dx, dw, 1, 8), FASTLN_OK, "rms backward valid");
  expect(fastln_rms_norm_backward_f32(y, x, r, NULL, NULL, dw, 1, 8), FASTLN_ERR_NULL_POINTER,
         "rms backward NULL dx");
  expect(fastln_rms_norm_backward_f64(yd, xd, NULL, NULL, yd, NULL, 1, 8), FASTLN_ERR_NULL_POINTER,
         "rms backward NULL rstd");

  /* Fused residual add and 16-bit storage. */
  float h[8];
  uint16_t x16[8] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700, 0x4800}, y16[8];
  expect(fastln_add_layer_norm_f32(x, 8, x, 8, h, 8, y, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5), FASTLN_OK,
         "add valid");
  expect(fastln_add_layer_norm_f32(x, 8, x, 8, NULL, 8, y, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5),
         FASTLN_ERR_NULL_POINTER, "add with residual and NULL h");
  expect(fastln_add_layer_norm_f32(x, 8, NULL, 0, NULL, 0, y, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5), FASTLN_OK,
         "add without residual needs no h");
  expect(fastln_add_rms_norm_f64(xd, 8, xd, 8, yd, 8, yd, 8, NULL, NULL, 1, 8, -1.0), FASTLN_ERR_BAD_EPS,
         "add rms eps < 0");
  expect(fastln_add_layer_norm_f16(x16, 8, NULL, 0, NULL, 0, y16, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5),
         FASTLN_OK, "f16 valid");
  expect(fastln_add_layer_norm_bf16(x16, 4, NULL, 0, NULL, 0, y16, 8, NULL, NULL, NULL, NULL, 1, 8, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "bf16 ldx < cols");
  uint16_t dx16[8];
  expect(fastln_layer_norm_backward_f16_ld(x16, 8, x16, 8, m, r, NULL, dx16, 8, dw, db, 1, 8), FASTLN_OK,
         "f16 backward valid");
  expect(fastln_layer_norm_backward_bf16_ld(x16, 8, x16, 8, NULL, r, NULL, dx16, 8, dw, db, 1, 8),
         FASTLN_ERR_NULL_POINTER, "bf16 backward NULL mean");
  expect(fastln_rms_norm_backward_f16_ld(x16, 8, x16, 8, r, NULL, dx16, 4, dw, 1, 8), FASTLN_ERR_BAD_SHAPE,
         "f16 rms backward lddx < cols");
  expect(fastln_rms_norm_backward_bf16_ld(x16, 8, NULL, 8, r, NULL, dx16, 8, dw, 1, 8),
         FASTLN_ERR_NULL_POINTER, "bf16 rms backward NULL x");

  /* No rows: the per-row arrays may be NULL (an empty std::vector's data() can be); the
     parameter gradients asked for are zeroed, for a layer norm without mean too. */
  expect(fastln_layer_norm_f32(NULL, NULL, NULL, NULL, NULL, NULL, 0, 8, 1e-5f), FASTLN_OK,
         "no rows, NULL x and y");
  expect(fastln_rms_norm_f64(NULL, NULL, NULL, NULL, 0, 8, 1e-5), FASTLN_OK, "rms no rows, NULL");
  expect(fastln_layer_norm_cols_f32(NULL, 0, NULL, 0, NULL, NULL, NULL, NULL, 0, 4, 1e-5), FASTLN_OK,
         "cols no examples, NULL");
  expect(fastln_add_layer_norm_f32(NULL, 8, NULL, 8, NULL, 8, NULL, 8, NULL, NULL, NULL, NULL, 0, 8,
                                   1e-5), FASTLN_OK, "add no rows, NULL");
  for (int j = 0; j < 8; ++j) dw[j] = db[j] = 7.0f;
  expect(fastln_layer_norm_backward_f32(NULL, NULL, NULL, NULL, NULL, NULL, dw, db, 0, 8), FASTLN_OK,
         "backward no rows, NULL");
  expect(dw[0] == 0.0f && dw[7] == 0.0f && db[0] == 0.0f && db[7] == 0.0f, 1,
         "backward no rows zeroes dweight and dbias");
  for (int j = 0; j < 8; ++j) dw[j] = 7.0f;
  expect(fastln_rms_norm_backward_f32(NULL, NULL, NULL, NULL, NULL, dw, 0, 8), FASTLN_OK,
         "rms backward no rows, NULL");
  expect(dw[0] == 0.0f && dw[7] == 0.0f, 1, "rms backward no rows zeroes dweight");
  expect(fastln_layer_norm_f32(NULL, y, NULL, NULL, NULL, NULL, -1, 8, 1e-5f), FASTLN_ERR_BAD_SHAPE,
         "rows < 0 with NULL x is a bad shape");

  float w32[8];
  expect(fastln_f16_to_f32(x16, w32, 8), FASTLN_OK, "f16 widen valid");
  expect(w32[0] == 1.0f && w32[7] == 8.0f, 1, "f16 widen values");
  expect(fastln_bf16_to_f32(x16, w32, -1), FASTLN_ERR_BAD_SHAPE, "bf16 widen n < 0");
  expect(fastln_bf16_to_f32(NULL, w32, 8), FASTLN_ERR_NULL_POINTER, "bf16 widen NULL src");
  expect(fastln_f16_to_f32(x16, NULL, 8), FASTLN_ERR_NULL_POINTER, "f16 widen NULL dst");
  expect(fastln_f16_to_f32(NULL, NULL, 0), FASTLN_OK, "f16 widen of nothing");

  /* Arrays past PTRDIFF_MAX bytes cannot exist: refused before any offset is formed (they
   * wrapped: ld = INT64_MAX wrote before y and returned FASTLN_OK, rows = 2^61 segfaulted). */
  expect(fastln_layer_norm_f32_ld(x, INT64_MAX, y, INT64_MAX, NULL, NULL, NULL, NULL, 3, 8, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "ld = INT64_MAX");
  expect(fastln_layer_norm_f32_ld(x, 8, y, (int64_t)1 << 62, NULL, NULL, NULL, NULL, 2, 8, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "ldy = 2^62");
  expect(fastln_layer_norm_f32(x, y, NULL, NULL, NULL, NULL, (int64_t)1 << 61, 8, 1e-5f),
         FASTLN_ERR_BAD_SHAPE, "rows = 2^61");
  expect(fastln_layer_norm_f64(xd, yd, NULL, NULL, NULL, NULL, 1, INT64_MAX, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "cols = INT64_MAX");
  expect(fastln_rms_norm_f32(x, y, NULL, NULL, (int64_t)1 << 60, 16, 1e-5f), FASTLN_ERR_BAD_SHAPE,
         "rms rows = 2^60");
  expect(fastln_layer_norm_backward_f32(y, x, m, r, NULL, dx, dw, db, (int64_t)1 << 60, 16),
         FASTLN_ERR_BAD_SHAPE, "backward rows = 2^60");
  expect(fastln_layer_norm_cols_f32(x, (int64_t)1 << 62, y, 2, NULL, NULL, NULL, NULL, 2, 4, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "cols ldx = 2^62");
  expect(fastln_add_layer_norm_f16(x16, 8, x16, (int64_t)1 << 62, dx16, 8, y16, 8, NULL, NULL, NULL,
                                   NULL, 2, 8, 1e-5),
         FASTLN_ERR_BAD_SHAPE, "f16 add ldr = 2^62");
  expect(fastln_f16_to_f32(x16, w32, INT64_MAX), FASTLN_ERR_BAD_SHAPE, "f16 widen n = INT64_MAX");

  expect(fastln_set_isa("bogus"), FASTLN_ERR_UNKNOWN_ISA, "set_isa(bogus)");
  expect(fastln_set_isa("scalar"), FASTLN_OK, "set_isa(scalar)");
  expect(strcmp(fastln_isa(), "scalar"), 0, "isa() is scalar");
#if defined(__x86_64__)
  expect(fastln_set_isa("neon"), FASTLN_ERR_UNSUPPORTED_ISA, "set_isa(neon) on x86-64");
#elif defined(__aarch64__)
  expect(fastln_set_isa("avx2"), FASTLN_ERR_UNSUPPORTED_ISA, "set_isa(avx2) on aarch64");
  expect(fastln_set_isa("avx512"), FASTLN_ERR_UNSUPPORTED_ISA, "set_isa(avx512) on aarch64");
#endif
  expect(strcmp(fastln_isa(), "scalar"), 0, "a failed set_isa leaves the choice unchanged");
  expect(fastln_set_isa(NULL), FASTLN_OK, "set_isa(NULL)");
  expect(strcmp(fastln_isa(), fastln_best_isa()), 0, "isa() is the best one again");
  expect(fastln_set_num_threads(-1), FASTLN_ERR_BAD_ARGUMENT, "set_num_threads(-1)");
  expect(fastln_status_string(-12345) != NULL, 1, "status_string of an unknown code");
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
