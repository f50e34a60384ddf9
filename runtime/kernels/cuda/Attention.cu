//===- Attention.cu - Tiled attention kernels -----------------------------===//
//
// Head dims 16, 32, 64 and 128 take tiled kernels in the flash-attention
// style (no [seq, seq] scratch): a block owns kRows consecutive rows of one
// (batch, head) pair, one thread per row keeps that row's vectors and
// accumulators in registers, and the other side's rows (keys and values, or
// queries and output gradients) are staged kTile at a time in shared memory,
// where every thread of the block reads the same element (a broadcast).
//
//   forward   query rows: online softmax over key tiles, rescaled once per tile
//   dq        query rows: delta = dOut . out, then dq (reads lse and delta)
//   dv, dk    key rows: sums over every query head of the group (GQA); two
//             kernels so that each keeps at most three row vectors live
//
// Every output element has one writer (no atomics), so results are
// deterministic. Other head dims run the one-thread-per-row functions of
// Attention.h, as the CPU does.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

#include <cmath>

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

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

//===--- Tiled kernels ----------------------------------------------------===//

/// Rows per block (one thread each) and rows per shared-memory tile (a tile
/// pair is at most 16 KiB; the forward keeps kTile scores in registers).
template <int D> struct Tiling {
  static constexpr int kRows = 64;
  static constexpr int kTile = D >= 64 ? 2048 / D : 32;
};

/// a . b with four partial sums, so the multiply-adds do not wait on one
/// another.
template <int D>
__device__ inline float dotRow(const float *a, const float *b) {
  float sums[4] = {0, 0, 0, 0};
#pragma unroll
  for (int c = 0; c < D; ++c)
    sums[c % 4] = fmaf(a[c], b[c], sums[c % 4]);
  return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

/// acc += a * x.
template <int D>
__device__ inline void axpyRow(float a, const float *x, float *acc) {
#pragma unroll
  for (int c = 0; c < D; ++c)
    acc[c] = fmaf(a, x[c], acc[c]);
}

/// dst = factor * acc.
template <int D>
__device__ inline void storeRow(float *dst, float factor, const float *acc) {
#pragma unroll
  for (int c = 0; c < D; ++c)
    dst[c] = factor * acc[c];
}

template <int D>
__device__ inline void loadRow(const float *src, bool valid, float *row) {
#pragma unroll
  for (int c = 0; c < D; ++c)
    row[c] = valid ? src[c] : 0.0f;
}

/// Rows [first, first + rows) of a [batch, seq, heads, D] tensor at head
/// `head` into tile[rows][D] (zeros past seq); consecutive threads read
/// consecutive elements.
template <int D>
__device__ inline void stageRows(const float *src, const AttentionDims &d,
                                 int64_t heads, int64_t b, int64_t head,
                                 int64_t first, int rows, float *tile) {
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    int r = e / D, c = e % D;
    int64_t row = first + r;
    tile[e] =
        row < d.seq ? src[((b * d.seq + row) * heads + head) * D + c] : 0.0f;
  }
}

/// The block's (b, head, first row): blocks run over row tiles fastest.
struct BlockRows {
  int64_t b, head, first;
};
__device__ inline BlockRows blockRows(const AttentionDims &d, int64_t heads,
                                      int rows) {
  int64_t tiles = (d.seq + rows - 1) / rows;
  int64_t block = blockIdx.x;
  return {block / tiles / heads, block / tiles % heads, block % tiles * rows};
}

/// Keys [0, end) that some query of the tile [first, first + rows) sees.
__device__ inline int64_t keysSeenByTile(const AttentionDims &d, int64_t first,
                                         int rows) {
  int64_t lastQuery = first + rows < d.seq ? first + rows : d.seq;
  return d.causal ? lastQuery : d.seq;
}

template <int D>
__global__ void __launch_bounds__(Tiling<D>::kRows)
    tiledForward(AttentionDims d, const float *q, const float *k,
                 const float *v, float *out, float *lse) {
  constexpr int kRows = Tiling<D>::kRows, kTile = Tiling<D>::kTile;
  __shared__ float keys[kTile * D], values[kTile * D];
  const BlockRows br = blockRows(d, d.heads, kRows);
  const int64_t g = br.head / d.groupSize(), i = br.first + threadIdx.x;
  const bool valid = i < d.seq;
  const float scale = float(d.scale);
  float qi[D], o[D];
  loadRow<D>(q + d.qRow(br.b, valid ? i : 0, br.head), valid, qi);
#pragma unroll
  for (int c = 0; c < D; ++c)
    o[c] = 0;
  float runningMax = -INFINITY, denom = 0;
  const int64_t keyEnd = keysSeenByTile(d, br.first, kRows);
  for (int64_t k0 = 0; k0 < keyEnd; k0 += kTile) {
    __syncthreads(); // the previous tile is consumed
    stageRows<D>(k, d, d.kvHeads, br.b, g, k0, kTile, keys);
    stageRows<D>(v, d, d.kvHeads, br.b, g, k0, kTile, values);
    __syncthreads();
    if (!valid)
      continue;
    float s[kTile];
    float tileMax = -INFINITY;
#pragma unroll // s[] must stay in registers
    for (int jj = 0; jj < kTile; ++jj) {
      int64_t j = k0 + jj;
      bool visible = j < d.seq && (!d.causal || j <= i);
      s[jj] = visible ? scale * dotRow<D>(qi, keys + jj * D) : -INFINITY;
      tileMax = fmaxf(tileMax, s[jj]);
    }
    if (tileMax == -INFINITY)
      continue; // nothing visible in this tile
    float newMax = fmaxf(runningMax, tileMax);
    float correction = expf(runningMax - newMax);
    denom *= correction;
#pragma unroll
    for (int c = 0; c < D; ++c)
      o[c] *= correction;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      float p = expf(s[jj] - newMax); // 0 where not visible
      denom += p;
      axpyRow<D>(p, values + jj * D, o);
    }
    runningMax = newMax;
  }
  if (!valid)
    return;
  float *oi = out + d.qRow(br.b, i, br.head);
#pragma unroll
  for (int c = 0; c < D; ++c)
    oi[c] = o[c] / denom;
  lse[d.statIndex(br.b, br.head, i)] = runningMax + logf(denom);
}

/// dq and delta for the block's query rows.
template <int D>
__global__ void __launch_bounds__(Tiling<D>::kRows)
    tiledQueryBackward(AttentionDims d, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       const float *dOut, float *dq, float *delta) {
  constexpr int kRows = Tiling<D>::kRows, kTile = Tiling<D>::kTile;
  __shared__ float keys[kTile * D], values[kTile * D];
  const BlockRows br = blockRows(d, d.heads, kRows);
  const int64_t g = br.head / d.groupSize(), i = br.first + threadIdx.x;
  const bool valid = i < d.seq;
  const float scale = float(d.scale);
  const int64_t row = d.qRow(br.b, valid ? i : 0, br.head);
  float qi[D], doi[D], acc[D];
  loadRow<D>(q + row, valid, qi);
  loadRow<D>(dOut + row, valid, doi);
  float rowDelta = 0, rowLse = 0;
  if (valid) {
    loadRow<D>(out + row, true, acc); // the output row, for delta only
    rowDelta = dotRow<D>(doi, acc);
    delta[d.statIndex(br.b, br.head, i)] = rowDelta;
    rowLse = lse[d.statIndex(br.b, br.head, i)];
  }
#pragma unroll
  for (int c = 0; c < D; ++c)
    acc[c] = 0;
  const int64_t keyEnd = keysSeenByTile(d, br.first, kRows);
  for (int64_t k0 = 0; k0 < keyEnd; k0 += kTile) {
    __syncthreads();
    stageRows<D>(k, d, d.kvHeads, br.b, g, k0, kTile, keys);
    stageRows<D>(v, d, d.kvHeads, br.b, g, k0, kTile, values);
    __syncthreads();
    if (!valid)
      continue;
    for (int jj = 0; jj < kTile; ++jj) {
      int64_t j = k0 + jj;
      if (j >= d.seq || (d.causal && j > i))
        break; // later keys of the tile are not visible either
      const float *kj = keys + jj * D;
      float p = expf(scale * dotRow<D>(qi, kj) - rowLse);
      float dS = p * (dotRow<D>(doi, values + jj * D) - rowDelta);
      axpyRow<D>(dS, kj, acc);
    }
  }
  if (valid)
    storeRow<D>(dq + row, scale, acc);
}

/// The queries a key tile starting at `first` is seen by: all, or (causal)
/// those from the tile on.
__device__ inline int64_t firstQuery(const AttentionDims &d, int64_t first) {
  return d.causal ? first : 0;
}

/// dv (kDk false) or dk (kDk true) for the block's key rows of kv head g.
template <int D, bool kDk>
__global__ void __launch_bounds__(Tiling<D>::kRows)
    tiledKeyBackward(AttentionDims d, const float *q, const float *k,
                     const float *v, const float *lse, const float *delta,
                     const float *dOut, float *grad) {
  constexpr int kRows = Tiling<D>::kRows, kTile = Tiling<D>::kTile;
  __shared__ float queries[kTile * D], dOuts[kTile * D];
  __shared__ float tileLse[kTile], tileDelta[kTile];
  const BlockRows br = blockRows(d, d.kvHeads, kRows);
  const int64_t g = br.head, j = br.first + threadIdx.x;
  const bool valid = j < d.seq;
  const float scale = float(d.scale);
  const int64_t row = d.kvRow(br.b, valid ? j : 0, g);
  float kj[D], vj[kDk ? D : 1], acc[D];
  loadRow<D>(k + row, valid, kj);
  if constexpr (kDk)
    loadRow<D>(v + row, valid, vj);
#pragma unroll
  for (int c = 0; c < D; ++c)
    acc[c] = 0;
  for (int64_t h = g * d.groupSize(); h < (g + 1) * d.groupSize(); ++h) {
    for (int64_t q0 = firstQuery(d, br.first); q0 < d.seq; q0 += kTile) {
      __syncthreads();
      stageRows<D>(q, d, d.heads, br.b, h, q0, kTile, queries);
      stageRows<D>(dOut, d, d.heads, br.b, h, q0, kTile, dOuts);
      for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
        bool inRange = q0 + e < d.seq;
        tileLse[e] = inRange ? lse[d.statIndex(br.b, h, q0 + e)] : 0.0f;
        tileDelta[e] = inRange ? delta[d.statIndex(br.b, h, q0 + e)] : 0.0f;
      }
      __syncthreads();
      if (!valid)
        continue;
      for (int ii = 0; ii < kTile; ++ii) {
        int64_t i = q0 + ii;
        if (i >= d.seq)
          break;
        if (d.causal && i < j)
          continue;
        const float *qi = queries + ii * D, *doi = dOuts + ii * D;
        float p = expf(scale * dotRow<D>(kj, qi) - tileLse[ii]);
        if constexpr (kDk) {
          axpyRow<D>(p * (dotRow<D>(vj, doi) - tileDelta[ii]), qi, acc);
        } else {
          axpyRow<D>(p, doi, acc);
        }
      }
    }
  }
  if (valid)
    storeRow<D>(grad + row, kDk ? scale : 1.0f, acc);
}

template <int D> unsigned tiledBlocks(const AttentionDims &d, int64_t heads) {
  constexpr int kRows = Tiling<D>::kRows;
  return unsigned(d.batch * heads * ((d.seq + kRows - 1) / kRows));
}

template <int D>
cudaError_t tiledAttentionForward(const AttentionDims &d, const float *q,
                                  const float *k, const float *v, float *out,
                                  float *lse, cudaStream_t stream) {
  tiledForward<D><<<tiledBlocks<D>(d, d.heads), Tiling<D>::kRows, 0, stream>>>(
      d, q, k, v, out, lse);
  return cudaGetLastError();
}

template <int D>
cudaError_t
tiledAttentionBackward(const AttentionDims &d, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       const float *dOut, float *dq, float *dk, float *dv,
                       float *delta, cudaStream_t stream) {
  constexpr int kRows = Tiling<D>::kRows;
  tiledQueryBackward<D><<<tiledBlocks<D>(d, d.heads), kRows, 0, stream>>>(
      d, q, k, v, out, lse, dOut, dq, delta);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return err;
  tiledKeyBackward<D, false>
      <<<tiledBlocks<D>(d, d.kvHeads), kRows, 0, stream>>>(d, q, k, v, lse,
                                                           delta, dOut, dv);
  if ((err = cudaGetLastError()) != cudaSuccess)
    return err;
  tiledKeyBackward<D, true><<<tiledBlocks<D>(d, d.kvHeads), kRows, 0, stream>>>(
      d, q, k, v, lse, delta, dOut, dk);
  return cudaGetLastError();
}

/// Whether the tiled kernels take these dims (grid within one dimension).
bool tiled(const AttentionDims &d) {
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
  if (tiled(dims)) {
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
  if (tiled(dims)) {
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
