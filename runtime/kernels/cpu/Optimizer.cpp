//===- Optimizer.cpp - AdamW, gradient norm, overflow, bf16/f16 -----------===//

#include "weft/kernels/CpuKernels.h"

namespace weft::kernels::cpu {

template <typename T>
void adamwStep(const AdamWStep &step, int64_t n, const T *grad, T *param, T *m,
               T *v) {
  for (int64_t i = 0; i < n; ++i)
    adamwElement(step, grad[i], param[i], m[i], v[i]);
}

template <typename T> double sumOfSquares(int64_t n, const T *x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += double(x[i]) * double(x[i]);
  return sum;
}

template <typename T> bool hasNonFinite(int64_t n, const T *x) {
  for (int64_t i = 0; i < n; ++i)
    if (!math::isFinite(x[i]))
      return true;
  return false;
}

void toBf16(int64_t n, const float *x, BF16 *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = floatToBf16(x[i]);
}

void fromBf16(int64_t n, const BF16 *x, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = bf16ToFloat(x[i]);
}

void toF16(int64_t n, const float *x, F16 *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = floatToF16(x[i]);
}

void fromF16(int64_t n, const F16 *x, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f16ToFloat(x[i]);
}

#define WEFT_INSTANTIATE(T)                                                    \
  template void adamwStep<T>(const AdamWStep &, int64_t, const T *, T *, T *,  \
                             T *);                                             \
  template double sumOfSquares<T>(int64_t, const T *);                         \
  template bool hasNonFinite<T>(int64_t, const T *);

WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(double)

} // namespace weft::kernels::cpu
