/* fastln: Layer Normalization and RMSNorm for CPUs.
 *
 * The plain C API. It is what the Python extension calls and what an embedded C or C++ program
 * links against (libfastln.a / libfastln.so). No C++ exception crosses it: every call returns a
 * status code, 0 on success and negative on bad arguments.
 *
 * Layout: `rows` examples of `cols` features each; row i starts at x + i * ldx (ldx >= cols, in
 * elements). The plain calls take densely packed rows (ld == cols). Statistics are per row:
 * mean[i], rstd[i] = 1 / sqrt(var[i] + eps) with the biased variance, as in torch and ONNX.
 * Any of weight, bias, mean, rstd may be NULL. With rows == 0 (or examples == 0 in the column
 * layout) every per-row array may be NULL too, as an empty std::vector's data() can be; the call
 * then only zeroes the dweight and dbias it is given.
 */
#ifndef FASTLN_FASTLN_H_
#define FASTLN_FASTLN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum fastln_status {
  FASTLN_OK = 0,
  FASTLN_ERR_NULL_POINTER = -1,  /* x or y (or another required pointer) is NULL, rows > 0 */
  FASTLN_ERR_BAD_SHAPE = -2,     /* rows < 0, cols <= 0, a leading dimension < cols, or arrays
                                    that would span more than PTRDIFF_MAX bytes */
  FASTLN_ERR_BAD_EPS = -3,       /* eps negative or not finite */
  FASTLN_ERR_UNKNOWN_ISA = -4,   /* fastln_set_isa: a name fastln does not know */
  FASTLN_ERR_UNSUPPORTED_ISA = -5, /* fastln_set_isa: known, but this CPU or build cannot run it */
  FASTLN_ERR_BAD_ARGUMENT = -6,  /* any other invalid argument */
  FASTLN_ERR_NO_MEMORY = -7      /* a scratch buffer could not be allocated */
};

/* y = (x - mean) * rstd * weight + bias, per row. */
int fastln_layer_norm_f32(const float *x, float *y, const float *weight, const float *bias,
                          float *mean, float *rstd, int64_t rows, int64_t cols, float eps);
int fastln_layer_norm_f64(const double *x, double *y, const double *weight, const double *bias,
                          double *mean, double *rstd, int64_t rows, int64_t cols, double eps);

/* The same with leading dimensions (row strides, in elements) for x and y. y may equal x when
 * ldy == ldx (in place). eps is a double here for both dtypes, so that a float64 caller's eps is
 * used as given. */
int fastln_layer_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy,
                             const float *weight, const float *bias, float *mean, float *rstd,
                             int64_t rows, int64_t cols, double eps);
int fastln_layer_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                             const double *weight, const double *bias, double *mean,
                             double *rstd, int64_t rows, int64_t cols, double eps);

/* Flags for the _ex functions below. */
enum fastln_flags {
  /* y was just allocated and its pages were never written. Large outputs are otherwise written with
   * non-temporal stores, which skip reading each cache line of y before writing it; on untouched
   * pages they are slower than plain stores (the kernel has just zeroed those pages in cache). */
  FASTLN_Y_FRESH = 1
};

/* fastln_layer_norm_*_ld with flags, a combination of fastln_flags (other bits:
 * FASTLN_ERR_BAD_ARGUMENT). */
int fastln_layer_norm_f32_ex(const float *x, int64_t ldx, float *y, int64_t ldy,
                             const float *weight, const float *bias, float *mean, float *rstd,
                             int64_t rows, int64_t cols, double eps, int flags);
int fastln_layer_norm_f64_ex(const double *x, int64_t ldx, double *y, int64_t ldy,
                             const double *weight, const double *bias, double *mean,
                             double *rstd, int64_t rows, int64_t cols, double eps, int flags);

/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, per row; rstd[i] = 1 / sqrt(mean(x_i^2) + eps).
 * weight and rstd may be NULL. The _ld variants take row strides and a double eps, and allow
 * y == x when ldy == ldx, as for layer norm. */
int fastln_rms_norm_f32(const float *x, float *y, const float *weight, float *rstd, int64_t rows,
                        int64_t cols, float eps);
int fastln_rms_norm_f64(const double *x, double *y, const double *weight, double *rstd,
                        int64_t rows, int64_t cols, double eps);
int fastln_rms_norm_f32_ld(const float *x, int64_t ldx, float *y, int64_t ldy, const float *weight,
                           float *rstd, int64_t rows, int64_t cols, double eps);
int fastln_rms_norm_f64_ld(const double *x, int64_t ldx, double *y, int64_t ldy,
                           const double *weight, double *rstd, int64_t rows, int64_t cols,
                           double eps);

/* Backward passes. Given dy = dL/dy, the forward input x and the mean and rstd the forward pass
 * returned, they write dx = dL/dx, and when not NULL, dweight = sum over rows of dy * xhat and
 * (layer norm) dbias = sum over rows of dy, each of cols elements, xhat = (x - mean) * rstd
 * (RMSNorm: x * rstd). weight NULL means weight = 1. dweight and dbias are summed in the data's
 * type over fixed blocks of rows (16 to 64, set by cols), then over the blocks in double in a fixed
 * order: they are bitwise the same at any thread count. dx must not overlap dy or x other than
 * being one of them with the same leading dimension. Rows whose |mean| is more than 16 standard
 * deviations recover what the rounding of the given mean left out (sum(x - mean) / n), so that a
 * float32 row at 1e6 + N(0,1) keeps dx and dweight to float32's precision. May return
 * FASTLN_ERR_NO_MEMORY when dweight or dbias is requested. */
int fastln_layer_norm_backward_f32(const float *dy, const float *x, const float *mean,
                                   const float *rstd, const float *weight, float *dx,
                                   float *dweight, float *dbias, int64_t rows, int64_t cols);
int fastln_layer_norm_backward_f64(const double *dy, const double *x, const double *mean,
                                   const double *rstd, const double *weight, double *dx,
                                   double *dweight, double *dbias, int64_t rows, int64_t cols);
int fastln_layer_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x, int64_t ldx,
                                      const float *mean, const float *rstd, const float *weight,
                                      float *dx, int64_t lddx, float *dweight, float *dbias,
                                      int64_t rows, int64_t cols);
int fastln_layer_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x,
                                      int64_t ldx, const double *mean, const double *rstd,
                                      const double *weight, double *dx, int64_t lddx,
                                      double *dweight, double *dbias, int64_t rows, int64_t cols);
int fastln_rms_norm_backward_f32(const float *dy, const float *x, const float *rstd,
                                 const float *weight, float *dx, float *dweight, int64_t rows,
                                 int64_t cols);
int fastln_rms_norm_backward_f64(const double *dy, const double *x, const double *rstd,
                                 const double *weight, double *dx, double *dweight, int64_t rows,
                                 int64_t cols);
int fastln_rms_norm_backward_f32_ld(const float *dy, int64_t lddy, const float *x, int64_t ldx,
                                    const float *rstd, const float *weight, float *dx,
                                    int64_t lddx, float *dweight, int64_t rows, int64_t cols);
int fastln_rms_norm_backward_f64_ld(const double *dy, int64_t lddy, const double *x, int64_t ldx,
                                    const double *rstd, const double *weight, double *dx,
                                    int64_t lddx, double *dweight, int64_t rows, int64_t cols);
/* The backward passes with 16-bit storage: dy, x and dx hold IEEE binary16 (f16) or bfloat16
 * (bf16) bits; the math is float32 and dx is rounded once to nearest even. mean, rstd and weight
 * are float32 (as the 16-bit forward passes return them), and so are dweight and dbias, summed as
 * above in float32 over the blocks and in double across them. */
int fastln_layer_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                      int64_t ldx, const float *mean, const float *rstd,
                                      const float *weight, uint16_t *dx, int64_t lddx,
                                      float *dweight, float *dbias, int64_t rows, int64_t cols);
int fastln_layer_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                       int64_t ldx, const float *mean, const float *rstd,
                                       const float *weight, uint16_t *dx, int64_t lddx,
                                       float *dweight, float *dbias, int64_t rows, int64_t cols);
int fastln_rms_norm_backward_f16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                    int64_t ldx, const float *rstd, const float *weight,
                                    uint16_t *dx, int64_t lddx, float *dweight, int64_t rows,
                                    int64_t cols);
int fastln_rms_norm_backward_bf16_ld(const uint16_t *dy, int64_t lddy, const uint16_t *x,
                                     int64_t ldx, const float *rstd, const float *weight,
                                     uint16_t *dx, int64_t lddx, float *dweight, int64_t rows,
                                     int64_t cols);
/* Fused residual add, for transformer blocks: h = x + residual is written to h (rounded once to the
 * dtype, so it equals the unfused sum exactly) and y = layer norm of h, one row at a time: x and
 * residual are read once, h and y written once. h may equal x or residual (the same pointer and
 * leading dimension); y may equal x or residual, not h. With residual NULL, h is unused and
 * y = layer norm of x. mean and rstd are those of h. Where both x and residual are NaN, which of
 * the two NaNs h carries may differ between ISAs (IEEE 754 leaves it open). */
int fastln_add_layer_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                              float *h, int64_t ldh, float *y, int64_t ldy, const float *weight,
                              const float *bias, float *mean, float *rstd, int64_t rows,
                              int64_t cols, double eps);
int fastln_add_layer_norm_f64(const double *x, int64_t ldx, const double *residual, int64_t ldr,
                              double *h, int64_t ldh, double *y, int64_t ldy,
                              const double *weight, const double *bias, double *mean,
                              double *rstd, int64_t rows, int64_t cols, double eps);

/* 16-bit storage: x, residual, h and y hold IEEE binary16 (f16) or bfloat16 (bf16) bits; the math
 * is float32, weight, bias, mean and rstd are float32, and y and h are rounded to nearest even.
 * residual may be NULL as above. */
int fastln_add_layer_norm_f16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                              int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                              const float *weight, const float *bias, float *mean, float *rstd,
                              int64_t rows, int64_t cols, double eps);
int fastln_add_layer_norm_bf16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                               int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                               const float *weight, const float *bias, float *mean, float *rstd,
                               int64_t rows, int64_t cols, double eps);

/* RMSNorm with the fused residual add and 16-bit storage of the fastln_add_layer_norm_* calls
 * above, with the same rules; rstd is that of h. */
int fastln_add_rms_norm_f32(const float *x, int64_t ldx, const float *residual, int64_t ldr,
                            float *h, int64_t ldh, float *y, int64_t ldy, const float *weight,
                            float *rstd, int64_t rows, int64_t cols, double eps);
int fastln_add_rms_norm_f64(const double *x, int64_t ldx, const double *residual, int64_t ldr,
                            double *h, int64_t ldh, double *y, int64_t ldy, const double *weight,
                            double *rstd, int64_t rows, int64_t cols, double eps);
int fastln_add_rms_norm_f16(const uint16_t *x, int64_t ldx, const uint16_t *residual, int64_t ldr,
                            uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                            const float *weight, float *rstd, int64_t rows, int64_t cols,
                            double eps);
int fastln_add_rms_norm_bf16(const uint16_t *x, int64_t ldx, const uint16_t *residual,
                             int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                             const float *weight, float *rstd, int64_t rows, int64_t cols,
                             double eps);

/* Layer norm of examples stored as columns: example i's value k at x[k * ldx + i], y likewise with
 * ldy; mean[i] and rstd[i] as in fastln_layer_norm_*_ld. This is a Fortran-ordered array of
 * `examples` rows normalized over its last axis (or the transpose of a C-ordered one), without the
 * transposing copy. ldx and ldy are at least `examples`; y may equal x when ldy == ldx. Results
 * match the row calls to rounding, not bit for bit (the sums run in another order), and do not
 * depend on the thread count. FASTLN_ERR_NO_MEMORY if a scratch buffer cannot be allocated: cols
 * values for each example of a block (up to 512 examples) that takes the row path (NaN or Inf, a
 * variance that underflows, or a first value far from the mean). */
int fastln_layer_norm_cols_f32(const float *x, int64_t ldx, float *y, int64_t ldy,
                               const float *weight, const float *bias, float *mean, float *rstd,
                               int64_t examples, int64_t cols, double eps);
int fastln_layer_norm_cols_f64(const double *x, int64_t ldx, double *y, int64_t ldy,
                               const double *weight, const double *bias, double *mean,
                               double *rstd, int64_t examples, int64_t cols, double eps);

/* Widen n float16 (f16) or bfloat16 (bf16) values to float32, exactly (a float16 signalling NaN
 * comes back quiet): the 16-bit calls above take weight and bias as float32, so a model stored in
 * 16 bits widens its parameters once with these. src and dst must not overlap; they may be NULL
 * when n is 0. Runs on the active ISA (see fastln_set_isa). Returns FASTLN_OK,
 * FASTLN_ERR_BAD_SHAPE if n < 0, FASTLN_ERR_NULL_POINTER if n > 0 and a pointer is NULL, or the
 * ISA status of fastln_init_status. */
int fastln_f16_to_f32(const uint16_t *src, float *dst, int64_t n);
int fastln_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);

/* A short English sentence for a status code; never NULL. */
const char *fastln_status_string(int status);

/* The active instruction set: "scalar", "avx2", "avx512" or "neon"; "none" while a FASTLN_ISA that
 * could not be honoured stands (see fastln_init_status). */
const char *fastln_isa(void);
/* Force an ISA by name, or restore the automatic choice with NULL or "auto". Returns
 * FASTLN_ERR_UNKNOWN_ISA or FASTLN_ERR_UNSUPPORTED_ISA and leaves the choice unchanged on error. */
int fastln_set_isa(const char *name);
/* FASTLN_OK, or why the FASTLN_ISA environment variable could not be honoured (then every kernel
 * call fails with this status until fastln_set_isa picks an ISA). */
int fastln_init_status(void);
/* 1 if this build and CPU can run the named ISA, else 0. */
int fastln_isa_supported(const char *name);
/* The ISA picked automatically for this CPU: on x86-64 avx512 on Intel cores with AVX512-FP16
 * (Sapphire Rapids and later Xeons), else avx2 when it runs (avx512 on request; see
 * src/dispatch.cpp); neon on ARM; else scalar. */
const char *fastln_best_isa(void);

/* Streaming stores: a call whose y (all of it, over all threads) is at least this many bytes
 * writes y with non-temporal stores, which skip reading y's lines first but leave y out of the
 * caches. native_bytes is for float32 and float64 y, half_bytes for float16 and bfloat16 y; a
 * negative value restores that one's default (2 MiB and 32 MiB; on AMD CPUs, for float32 and
 * float64 layer norms, 16 MiB when one without the residual add runs on more than one thread, and
 * 8 MiB or more for rows of 16 KiB or more with weight or bias that take the column bands (below);
 * or FASTLN_STREAM_MIB MiB for all when that was set at start-up). A value set applies at every
 * thread count and row length.
 * Returns FASTLN_OK. fastln_get_stream_bytes(0) gives the float32/float64 size of a call on one
 * thread in rows shorter than 16 KiB, fastln_get_stream_bytes(1) the 16-bit one. */
int fastln_set_stream_bytes(int64_t native_bytes, int64_t half_bytes);
int64_t fastln_get_stream_bytes(int half);

/* Column bands: layer norm rows of at least this many bytes, with weight or bias, whose y is not
 * streamed take their normalize pass in column bands across groups of up to 8 rows, so that
 * weight and bias come from L2 once a group instead of once a row. The default is where that was
 * measured faster (docs/performance-notes.md): 8192 on AMD CPUs; on Intel CPUs 16384 for float
 * and double rows and never for 16-bit rows; never (INT64_MAX) elsewhere. A value set applies to
 * every dtype; a negative one restores the default. fastln_get_band_bytes gives the length for
 * float and double rows. The output is bit for bit the same either way. Returns FASTLN_OK. */
int fastln_set_band_bytes(int64_t row_bytes);
int64_t fastln_get_band_bytes(void);

/* Rows from memory: layer norm calls on one thread whose x is at least this many bytes, in rows of
 * 2 KiB to 4 KiB of float32 or float64 without the residual add, take each row's statistics and
 * then its normalize pass, instead of running a row's normalize pass inside the next rows'
 * statistics. The default is where that was measured faster (docs/performance-notes.md): 32 MiB on
 * AMD CPUs with an L1d of 32 KiB or less, never (INT64_MAX) elsewhere; FASTLN_PHASED_MIB=n at
 * start-up sets n MiB (negative: never). Rows that take the column bands (fastln_set_band_bytes
 * set to 4 KiB or less) stay there. The output is bit for bit the same either way. */
int64_t fastln_get_phased_bytes(void);

/* Threads: 0 means "follow OpenMP" (OMP_NUM_THREADS, omp_set_num_threads, threadpoolctl). */
int fastln_set_num_threads(int n);
int fastln_get_num_threads(void);
/* 1 if built with OpenMP. */
int fastln_has_openmp(void);

#ifdef __cplusplus
}
#endif

#endif /* FASTLN_FASTLN_H_ */
