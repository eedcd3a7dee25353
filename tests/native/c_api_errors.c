/* The C API from C: fastln.h compiles as C, and bad arguments return the documented status codes.
 * Built by tests/test_c_api.py (and by CMake with -DFASTLN_BUILD_TESTS=ON). */
#include <math.h>
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
  expect(fastln_set_isa("bogus"), FASTLN_ERR_UNKNOWN_ISA, "set_isa(bogus)");
  expect(fastln_set_isa("scalar"), FASTLN_OK, "set_isa(scalar)");
  expect(strcmp(fastln_isa(), "scalar"), 0, "isa() is scalar");
#if defined(__x86_64__)
  expect(fastln_set_isa("neon"), FASTLN_ERR_UNSUPPORTED_ISA, "set_isa(neon) on x86-64");
#elif defined(__aarch64__)
  expect(fastln_set_isa("avx2"), FASTLN_ERR_UNSUPPORTED_ISA, "set_isa(avx2) on aarch64");
#endif
  expect(strcmp(fastln_isa(), "scalar"), 0, "a failed set_isa leaves the choice unchanged");
  expect(fastln_set_isa(NULL), FASTLN_OK, "set_isa(NULL)");
  expect(strcmp(fastln_isa(), fastln_best_isa()), 0, "isa() is the best one again");
  expect(fastln_set_num_threads(-1), FASTLN_ERR_BAD_ARGUMENT, "set_num_threads(-1)");
  expect(fastln_status_string(-12345) != NULL, 1, "status_string of an unknown code");
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
