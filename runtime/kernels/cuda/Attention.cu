//===- Attention.cu - Simple, correct attention kernels -------------------===//
//
// One thread per query row (forward, dq) or key row (dk, dv) running the
// shared row functions of Attention.h. Correct for every shape and free of
// atomics; a tiled flash-attention kernel replaces it on the fast path.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

namespace {

__global__ void attentionForwardKernel(AttentionDims d, const float *q,
                                       const float *k, const float *v,
                                       float *out, float *lse) {
  int64_t row = globalIndex(); // (b, i, h) flattened, h fastest
  if (row >= d.batch * d.seq * d.heads)
    return;
  int64_t h = row % d.heads, i = row / d.heads % d.seq,
          b = row / (d.heads * d.seq);
  lse[d.statIndex(b, h, i)] = attentionRowForward(d, q, k, v, b, i, h, out);
}

__global__ void attentionQueryBackwardKernel(AttentionDims d, const float *q,
                                             const float *k, const float *v,
                                             const float *out, const float *lse,
                                             const float *dOut, float *dq,
                                             float *delta) {
  int64_t row = globalIndex();
  if (row >= d.batch * d.seq * d.heads)
    return;
  int64_t h = row % d.heads, i = row / d.heads % d.seq,
          b = row / (d.heads * d.seq);
  attentionQueryRowBackward(d, q, k, v, out, lse, dOut, b, i, h, dq, delta);
}

__global__ void attentionKeyBackwardKernel(AttentionDims d, const float *q,
                                           const float *k, const float *v,
                                           const float *lse, const float *delta,
                                           const float *dOut, float *dk,
                                           float *dv) {
  int64_t row = globalIndex();
  if (row >= d.batch * d.seq * d.kvHeads)
    return;
  int64_t g = row % d.kvHeads, j = row / d.kvHeads % d.seq,
          b = row / (d.kvHeads * d.seq);
  attentionKeyRowBackward(d, q, k, v, lse, delta, dOut, b, j, g, dk, dv);
}

} // namespace

cudaError_t attentionForward(const AttentionDims &dims, const float *q,
                             const float *k, const float *v, float *out,
                             float *lse, cudaStream_t stream) {
  return launch(dims.batch * dims.seq * dims.heads, stream,
                attentionForwardKernel, dims, q, k, v, out, lse);
}

cudaError_t attentionBackward(const AttentionDims &dims, const float *q,
                              const float *k, const float *v, const float *out,
                              const float *lse, const float *dOut, float *dq,
                              float *dk, float *dv, float *delta,
                              cudaStream_t stream) {
  cudaError_t err = launch(dims.batch * dims.seq * dims.heads, stream,
                           attentionQueryBackwardKernel, dims, q, k, v, out,
                           lse, dOut, dq, delta);
  if (err != cudaSuccess)
    return err;
  return launch(dims.batch * dims.seq * dims.kvHeads, stream,
                attentionKeyBackwardKernel, dims, q, k, v, lse, delta, dOut, dk,
                dv);
}

} // namespace weft::kernels::gpu
