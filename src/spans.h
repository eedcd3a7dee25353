// Shared by the C API (src/api.cpp) and the CUDA API (src/cuda/api.cu), which are separate
// translation units and both index arrays with int64 offsets.
#ifndef FASTLN_SRC_SPANS_H_
#define FASTLN_SRC_SPANS_H_

#include <stdint.h>

namespace fastln {

// Whether `rows` rows of `cols` values of `elem_bytes` bytes, `ld` apart (ld >= cols > 0,
// rows >= 0), lie within PTRDIFF_MAX bytes. Past that the kernels' offsets wrapped: rows = 2^61
// segfaulted, and ld = INT64_MAX returned FASTLN_OK after writing before y. Such arrays cannot
// exist, so the call is refused as a bad shape. Overflow builtins, not divisions: the Python
// binding's calls of one row (0.4 us) go through here.
inline bool SpansFit(int64_t rows, int64_t cols, int64_t ld, int64_t elem_bytes) {
  int64_t span;
  return rows == 0 || (!__builtin_mul_overflow(rows - 1, ld, &span) &&
                       !__builtin_add_overflow(span, cols, &span) &&
                       span <= INT64_MAX / elem_bytes);
}

}  // namespace fastln

#endif  // FASTLN_SRC_SPANS_H_
