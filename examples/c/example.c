/* LayerNorm over the rows of a small matrix with fastln's C API.
 *
 *   cmake -S . -B build && cmake --build build
 *   cc examples/c/example.c -Iinclude -Lbuild -lfastln -Wl,-rpath,$PWD/build -o example
 *   ./example          # or ./example scalar, to force an ISA
 */
#include <stdio.h>

#include "fastln/fastln.h"

enum { ROWS = 3, COLS = 37 };

int main(int argc, char **argv) {
  static float x[ROWS][COLS], y[ROWS][COLS];
  float weight[COLS], bias[COLS], mean[ROWS], rstd[ROWS];
  for (int i = 0; i < ROWS; ++i)
    for (int j = 0; j < COLS; ++j) x[i][j] = 1000.0f * i + (float)((7 * j + i) % 11);
  for (int j = 0; j < COLS; ++j) {
    weight[j] = 1.0f + 0.5f * (float)(j % 4);
    bias[j] = 0.25f * (float)(j % 3);
  }

  if (argc > 1) {  /* force an ISA: "scalar", "avx2", "avx512", "neon" ("auto" restores the choice) */
    int s = fastln_set_isa(argv[1]);
    if (s != FASTLN_OK) {
      fprintf(stderr, "fastln_set_isa(\"%s\"): %s\n", argv[1], fastln_status_string(s));
      return 1;
    }
  }

  int s = fastln_layer_norm_f32(&x[0][0], &y[0][0], weight, bias, mean, rstd, ROWS, COLS, 1e-5f);
  if (s != FASTLN_OK) {
    fprintf(stderr, "fastln_layer_norm_f32: %s\n", fastln_status_string(s));
    return 1;
  }
  printf("isa %s\n", fastln_isa());
  for (int i = 0; i < ROWS; ++i) {
    printf("row %d mean %.9g rstd %.9g y", i, mean[i], rstd[i]);
    for (int j = 0; j < COLS; ++j) printf(" %.9g", y[i][j]);
    printf("\n");
  }

  /* Bad arguments come back as negative status codes, never as a crash. */
  s = fastln_layer_norm_f32(&x[0][0], &y[0][0], NULL, NULL, NULL, NULL, ROWS, 0, 1e-5f);
  printf("status %d: %s\n", s, fastln_status_string(s));
  return 0;
}
