// For the Python binding, not the C API: the 16-bit layer norm and RMS norm (fastln_add_*_f16 and
// _bf16, with `bf16` and `rms` choosing) with weight and bias given either as float (weight,
// bias) or in x's own format (weight16, bias16: f16 or bf16 bits), at most one of each pair. The
// 16-bit ones are widened by every thread into a buffer of its own (api.cpp, WithParams16).
#ifndef FASTLN_BINDING_ADD_NORM16_H_
#define FASTLN_BINDING_ADD_NORM16_H_

#include <stdint.h>

namespace fastln {

int BindingAddNorm16(int bf16, int rms, const uint16_t *x, int64_t ldx, const uint16_t *residual,
                     int64_t ldr, uint16_t *h, int64_t ldh, uint16_t *y, int64_t ldy,
                     const float *weight, const float *bias, const uint16_t *weight16,
                     const uint16_t *bias16, float *mean, float *rstd, int64_t rows, int64_t cols,
                     double eps);

}  // namespace fastln

#endif  // FASTLN_BINDING_ADD_NORM16_H_
