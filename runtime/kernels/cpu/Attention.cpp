//===- Attention.cpp - Reference multi-head attention on the host ---------===//

#include "weft/kernels/CpuKernels.h"

#include <vector>

namespace weft::kernels::cpu {

template <typename T>
void attentionForward(const AttentionDims &d, const T *q, const T *k,
                      const T *v, T *out, T *lse) {
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t i = 0; i < d.seq; ++i)
      for (int64_t h = 0; h < d.heads; ++h)
        lse[d.statIndex(b, h, i)] =
            attentionRowForward(d, q, k, v, b, i, h, out);
}

template <typename T>
void attentionBackward(const AttentionDims &d, const T *q, const T *k,
                       const T *v, const T *out, const T *lse, const T *dOut,
                       T *dq, T *dk, T *dv) {
  std::vector<T> delta(d.batch * d.heads * d.seq);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t i = 0; i < d.seq; ++i)
      for (int64_t h = 0; h < d.heads; ++h)
        attentionQueryRowBackward(d, q, k, v, out, lse, dOut, b, i, h, dq,
                                  delta.data());
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.seq; ++j)
      for (int64_t g = 0; g < d.kvHeads; ++g)
        attentionKeyRowBackward(d, q, k, v, lse, delta.data(), dOut, b, j, g,
                                dk, dv);
}

template void attentionForward<float>(const AttentionDims &, const float *,
                                      const float *, const float *, float *,
                                      float *);
template void attentionForward<double>(const AttentionDims &, const double *,
                                       const double *, const double *, double *,
                                       double *);
template void attentionBackward<float>(const AttentionDims &, const float *,
                                       const float *, const float *,
                                       const float *, const float *,
                                       const float *, float *, float *,
                                       float *);
template void attentionBackward<double>(const AttentionDims &, const double *,
                                        const double *, const double *,
                                        const double *, const double *,
                                        const double *, double *, double *,
                                        double *);

} // namespace weft::kernels::cpu
