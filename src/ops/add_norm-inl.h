// The table's entries for the fused residual add and for 16-bit storage. Included by
// kernels-inl.h, once per ISA, after the ops it wraps.
//
// Both are the layer norm's and the RMS norm's own row routines, instantiated for the storage
// format (Native<T>, Float16Format, BFloat16Format: see kernels-inl.h) and with the residual add
// as the first read of each row (FirstRead). One read of x and res, one write each of h and y;
// 16-bit values are widened and rounded in registers. A large y takes the layer norm's
// non-temporal stores (the RMS norm's: native rows without the residual add, RmsStreamY, which is
// how Python's rms_norm calls it); h is never streamed, as the later passes of the row read it
// back from L1.

FASTLN_OPS_BEGIN

template <class T>
void AddLayerNormRows(const AddNormArgs<T, T> &a, int64_t r0, int64_t r1) {
  LayerNormRowsOf<Native<T>>(a, true, r0, r1);
}

// Format F, or F::NoNaNY (a cheaper store of y, see kernels-inl.h) where weight and bias are
// finite. Checked once per block of rows: 2 * cols values, next to rows * cols.
template <class F>
bool UseNoNaNY(const float *weight, const float *bias, int64_t cols) {
  return !IsSame<F, typename F::NoNaNY>::value && AllFinite(weight, cols) && AllFinite(bias, cols);
}

template <class F>
void AddLayerNormRows16(const AddNormArgs<uint16_t, float> &a, int64_t r0, int64_t r1) {
  if (UseNoNaNY<F>(a.weight, a.bias, a.cols)) {
    return LayerNormRowsOf<typename F::NoNaNY>(a, true, r0, r1);
  }
  LayerNormRowsOf<F>(a, true, r0, r1);
}

template <class T>
void AddRmsNormRows(const AddNormArgs<T, T> &a, int64_t r0, int64_t r1) {
  RmsNormRowsOf<Native<T>>(a, r0, r1, true);
}

template <class F>
void AddRmsNormRows16(const AddNormArgs<uint16_t, float> &a, int64_t r0, int64_t r1) {
  if (UseNoNaNY<F>(a.weight, nullptr, a.cols)) return RmsNormRowsOf<typename F::NoNaNY>(a, r0, r1);
  RmsNormRowsOf<F>(a, r0, r1);
}

FASTLN_OPS_END
