//===- Attention.cu - Attention kernels on fp32 rows ----------------------===//
//
// Head dims 16, 32, 64 and 128 launch the tiled kernels of
// AttentionTiled.cuh (flash-attention style, a row's vectors in registers
// split over up to four lanes); other head dims run the one-thread-per-row
// functions of Attention.h, as the CPU does.
//
//===----------------------------------------------------------------------===//

#include "AttentionTiled.cuh"
#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

#include <cmath>

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

using tiled::tiledForward;
using tiled::tiledKeyBackward;
using tiled::tiledQueryBackward;
using tiled::Tiling;

namespace {

//===--- Row kernels (any head dim) ---------------------------------------===//

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

template <int D> unsigned tiledBlocks(const AttentionDims &d, int64_t heads) {
  constexpr int kRows = Tiling<D>::kRows;
  return unsigned(d.batch * heads * ((d.seq + kRows - 1) / kRows));
}

template <int D>
cudaError_t tiledAttentionForward(const AttentionDims &d, const float *q,
                                  const float *k, const float *v, float *out,
                                  float *lse, cudaStream_t stream) {
  tiledForward<D>
      <<<tiledBlocks<D>(d, d.heads), Tiling<D>::kThreads, 0, stream>>>(
          d, q, k, v, out, lse);
  return cudaGetLastError();
}

template <int D>
cudaError_t
tiledAttentionBackward(const AttentionDims &d, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       const float *dOut, float *dq, float *dk, float *dv,
                       float *delta, cudaStream_t stream) {
  constexpr int kThreads = Tiling<D>::kThreads;
  tiledQueryBackward<D><<<tiledBlocks<D>(d, d.heads), kThreads, 0, stream>>>(
      d, q, k, v, out, lse, dOut, dq, delta);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return err;
  tiledKeyBackward<D, false>
      <<<tiledBlocks<D>(d, d.kvHeads), kThreads, 0, stream>>>(d, q, k, v, lse,
                                                              delta, dOut, dv);
  if ((err = cudaGetLastError()) != cudaSuccess)
    return err;
  tiledKeyBackward<D, true>
      <<<tiledBlocks<D>(d, d.kvHeads), kThreads, 0, stream>>>(d, q, k, v, lse,
                                                              delta, dOut, dk);
  return cudaGetLastError();
}

/// Whether the tiled kernels take these dims (grid within one dimension).
bool takesTiled(const AttentionDims &d) {
  int64_t blocks = d.batch * d.heads * ((d.seq + 63) / 64);
  return blocks < (int64_t(1) << 31) && (d.headDim == 16 || d.headDim == 32 ||
                                         d.headDim == 64 || d.headDim == 128);
}

} // namespace

cudaError_t attentionForward(const AttentionDims &dims, const float *q,
                             const float *k, const float *v, float *out,
                             float *lse, cudaStream_t stream) {
  if (dims.batch * dims.seq == 0)
    return cudaSuccess;
  if (takesTiled(dims)) {
    switch (dims.headDim) {
    case 16:
      return tiledAttentionForward<16>(dims, q, k, v, out, lse, stream);
    case 32:
      return tiledAttentionForward<32>(dims, q, k, v, out, lse, stream);
    case 64:
      return tiledAttentionForward<64>(dims, q, k, v, out, lse, stream);
    default:
      return tiledAttentionForward<128>(dims, q, k, v, out, lse, stream);
    }
  }
  return launch(dims.batch * dims.seq * dims.heads, stream,
                attentionForwardKernel, dims, q, k, v, out, lse);
}

cudaError_t attentionBackward(const AttentionDims &dims, const float *q,
                              const float *k, const float *v, const float *out,
                              const float *lse, const float *dOut, float *dq,
                              float *dk, float *dv, float *delta,
                              cudaStream_t stream) {
  if (dims.batch * dims.seq == 0)
    return cudaSuccess;
  if (takesTiled(dims)) {
    switch (dims.headDim) {
    case 16:
      return tiledAttentionBackward<16>(dims, q, k, v, out, lse, dOut, dq, dk,
                                        dv, delta, stream);
    case 32:
      return tiledAttentionBackward<32>(dims, q, k, v, out, lse, dOut, dq, dk,
                                        dv, delta, stream);
    case 64:
      return tiledAttentionBackward<64>(dims, q, k, v, out, lse, dOut, dq, dk,
                                        dv, delta, stream);
    default:
      return tiledAttentionBackward<128>(dims, q, k, v, out, lse, dOut, dq, dk,
                                         dv, delta, stream);
    }
  }
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
