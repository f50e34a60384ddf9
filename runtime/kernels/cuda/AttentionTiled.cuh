//===- AttentionTiled.cuh - Tiled fp32 attention kernels ------*- CUDA -*-===//
//
// The fp32 attention kernels of head dims 16, 32, 64 and 128, in the
// flash-attention style (no [seq, seq] scratch): a block owns kRows
// consecutive rows of one (batch, head) pair, and the other side's rows (keys
// and values, or queries and output gradients) are staged kTile at a time in
// shared memory. A row belongs to kLanes adjacent threads of one warp, each
// keeping kCols = D / kLanes of the row's columns (interleaved: lane p holds
// columns p, p + kLanes, ...) and accumulators in registers; a dot product
// is their partial sums added by shuffles. At most 32 columns a thread (two
// to four lanes a row from head dim 64 up) keep the three row vectors of the
// backward in registers: one thread per row at head dim 128 spilled
// kilobytes of them (ptxas, `scripts/kernel-resources.py`). No
// __launch_bounds__: with one, ptxas for sm_90 held these kernels to 72 or
// 128 registers and spilled; without, it takes what it needs (at most 255 a
// thread, which 256 threads a block always fit).
//
//   forward   query rows: online softmax over key tiles, rescaled once per tile
//   dq        query rows: delta = dOut . out, then dq (reads lse and delta)
//   dv, dk    key rows: sums over every query head of the group (GQA); two
//             kernels so that each keeps at most three row vectors live
//
// Every lane of a warp reaches every shuffle: the loops' bounds are the
// warp's (the keys any of its rows sees), and a row masks what it does not
// see. Every output element has one writer (no atomics), so results are
// deterministic. Attention.cu launches the kernels; they live in this header
// so that the CPU test (test/unit/kernels/WarpEmulationTest.cpp) can run
// them under the warp emulator.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_ATTENTIONTILED_CUH
#define WEFT_KERNELS_CUDA_ATTENTIONTILED_CUH

#include "weft/kernels/Attention.h"

#include <cmath>
#include <cstdint>

namespace weft::kernels::gpu::tiled {

/// Rows per block, threads per row and the columns each holds, and rows per
/// shared-memory tile (a tile pair is at most 16 KiB; the forward keeps kTile
/// scores in registers).
template <int D> struct Tiling {
  static constexpr int kRows = 64;
  static constexpr int kLanes = D > 32 ? D / 32 : 1;
  static constexpr int kCols = D / kLanes;
  static constexpr int kThreads = kRows * kLanes;
  static constexpr int kTile = D >= 64 ? 2048 / D : 32;
  static constexpr int kWarpRows = 32 / kLanes;
  static_assert(32 % kLanes == 0 && kCols * kLanes == D);
};

/// The sum over a row's kLanes lanes of each lane's `partial` (the same
/// bits on every lane: each butterfly step adds the same two values).
template <int kLanes> __device__ inline float rowSum(float partial) {
#pragma unroll
  for (int offset = 1; offset < kLanes; offset *= 2)
    partial += __shfl_xor_sync(0xffffffffu, partial, offset);
  return partial;
}

/// This lane's part of a . b, `a` its registers and `b` a row at the lane's
/// first column (stride kStride between its columns), with four partial
/// sums so that the multiply-adds do not wait on one another.
template <int kCols, int kStride>
__device__ inline float dotPart(const float *a, const float *b) {
  float sums[4] = {0, 0, 0, 0};
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    sums[c % 4] = fmaf(a[c], b[c * kStride], sums[c % 4]);
  return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

/// The whole row's a . b, `a` in registers and `b` a row of a tile (every
/// lane of the row gets it).
template <int D>
__device__ inline float dotRow(const float *a, const float *b) {
  using T = Tiling<D>;
  return rowSum<T::kLanes>(dotPart<T::kCols, T::kLanes>(a, b));
}

/// acc += a * x, x a row at the lane's first column.
template <int D>
__device__ inline void axpyRow(float a, const float *x, float *acc) {
  using T = Tiling<D>;
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    acc[c] = fmaf(a, x[c * T::kLanes], acc[c]);
}

/// The lane's columns of dst (at the lane's first column) = factor * acc.
template <int D>
__device__ inline void storeRow(float *dst, float factor, const float *acc) {
  using T = Tiling<D>;
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    dst[c * T::kLanes] = factor * acc[c];
}

/// The lane's columns of src (at the lane's first column), zeros if not
/// `valid`.
template <int D>
__device__ inline void loadRow(const float *src, bool valid, float *row) {
  using T = Tiling<D>;
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    row[c] = valid ? src[c * T::kLanes] : 0.0f;
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

/// The thread's row and lane, and the rows of its warp: [warpFirst,
/// warpLast], some possibly past the sequence.
template <int D> struct RowLane {
  int64_t row, warpFirst, warpLast;
  int lane;
  __device__ explicit RowLane(int64_t blockFirst) {
    using T = Tiling<D>;
    row = blockFirst + threadIdx.x / T::kLanes;
    lane = int(threadIdx.x % T::kLanes);
    warpFirst = blockFirst + threadIdx.x / 32 * T::kWarpRows;
    warpLast = warpFirst + T::kWarpRows - 1;
  }
};

/// Keys [0, end) that some query of the tile [first, first + rows) sees.
__device__ inline int64_t keysSeenByTile(const AttentionDims &d, int64_t first,
                                         int rows) {
  int64_t lastQuery = first + rows < d.seq ? first + rows : d.seq;
  return d.causal ? lastQuery : d.seq;
}

template <int D>
__global__ void tiledForward(AttentionDims d, const float *q, const float *k,
                             const float *v, float *out, float *lse) {
  using T = Tiling<D>;
  constexpr int kTile = T::kTile;
  __shared__ float keys[kTile * D], values[kTile * D];
  const BlockRows br = blockRows(d, d.heads, T::kRows);
  const RowLane<D> at(br.first);
  const int64_t g = br.head / d.groupSize(), i = at.row;
  const bool valid = i < d.seq;
  const float scale = float(d.scale);
  float qi[T::kCols], o[T::kCols];
  loadRow<D>(q + d.qRow(br.b, valid ? i : 0, br.head) + at.lane, valid, qi);
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    o[c] = 0;
  float runningMax = -INFINITY, denom = 0;
  const int64_t keyEnd = keysSeenByTile(d, br.first, T::kRows);
  for (int64_t k0 = 0; k0 < keyEnd; k0 += kTile) {
    __syncthreads(); // the previous tile is consumed
    stageRows<D>(k, d, d.kvHeads, br.b, g, k0, kTile, keys);
    stageRows<D>(v, d, d.kvHeads, br.b, g, k0, kTile, values);
    __syncthreads();
    if (at.warpFirst >= d.seq || (d.causal && k0 > at.warpLast))
      continue; // no row of the warp sees a key of this tile
    float s[kTile];
    float tileMax = -INFINITY;
#pragma unroll // s[] must stay in registers
    for (int jj = 0; jj < kTile; ++jj) {
      int64_t j = k0 + jj;
      bool visible = valid && j < d.seq && (!d.causal || j <= i);
      float dot = dotRow<D>(qi, keys + jj * D + at.lane); // every lane
      s[jj] = visible ? scale * dot : -INFINITY;
      tileMax = fmaxf(tileMax, s[jj]);
    }
    if (tileMax == -INFINITY)
      continue; // nothing visible in this tile (no shuffle follows)
    float newMax = fmaxf(runningMax, tileMax);
    float correction = expf(runningMax - newMax);
    denom *= correction;
#pragma unroll
    for (int c = 0; c < T::kCols; ++c)
      o[c] *= correction;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      float p = expf(s[jj] - newMax); // 0 where not visible
      denom += p;
      axpyRow<D>(p, values + jj * D + at.lane, o);
    }
    runningMax = newMax;
  }
  if (!valid)
    return;
  float *oi = out + d.qRow(br.b, i, br.head) + at.lane;
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    oi[c * T::kLanes] = o[c] / denom;
  if (at.lane == 0)
    lse[d.statIndex(br.b, br.head, i)] = runningMax + logf(denom);
}

/// dq and delta for the block's query rows.
template <int D>
__global__ void tiledQueryBackward(AttentionDims d, const float *q,
                                   const float *k, const float *v,
                                   const float *out, const float *lse,
                                   const float *dOut, float *dq, float *delta) {
  using T = Tiling<D>;
  constexpr int kTile = T::kTile;
  __shared__ float keys[kTile * D], values[kTile * D];
  const BlockRows br = blockRows(d, d.heads, T::kRows);
  const RowLane<D> at(br.first);
  const int64_t g = br.head / d.groupSize(), i = at.row;
  const bool valid = i < d.seq;
  const float scale = float(d.scale);
  const int64_t row = d.qRow(br.b, valid ? i : 0, br.head) + at.lane;
  float qi[T::kCols], doi[T::kCols], acc[T::kCols];
  loadRow<D>(q + row, valid, qi);
  loadRow<D>(dOut + row, valid, doi);
  loadRow<D>(out + row, valid, acc); // the output row, for delta only
  // Both operands in registers; every lane adds (zeros if invalid).
  const float rowDelta = rowSum<T::kLanes>(dotPart<T::kCols, 1>(doi, acc));
  float rowLse = 0;
  if (valid) {
    if (at.lane == 0)
      delta[d.statIndex(br.b, br.head, i)] = rowDelta;
    rowLse = lse[d.statIndex(br.b, br.head, i)];
  }
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
    acc[c] = 0;
  const int64_t keyEnd = keysSeenByTile(d, br.first, T::kRows);
  for (int64_t k0 = 0; k0 < keyEnd; k0 += kTile) {
    __syncthreads();
    stageRows<D>(k, d, d.kvHeads, br.b, g, k0, kTile, keys);
    stageRows<D>(v, d, d.kvHeads, br.b, g, k0, kTile, values);
    __syncthreads();
    if (at.warpFirst >= d.seq)
      continue;
    // The keys of the tile some row of the warp sees: [k0, k0 + end).
    int64_t end = d.seq - k0 < kTile ? d.seq - k0 : kTile;
    if (d.causal && at.warpLast - k0 + 1 < end)
      end = at.warpLast - k0 + 1;
    for (int jj = 0; jj < end; ++jj) {
      int64_t j = k0 + jj;
      const float *kj = keys + jj * D + at.lane;
      float score = dotRow<D>(qi, kj);
      float dP = dotRow<D>(doi, values + jj * D + at.lane);
      bool visible = valid && (!d.causal || j <= i);
      float p = visible ? expf(scale * score - rowLse) : 0.0f;
      axpyRow<D>(p * (dP - rowDelta), kj, acc);
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
__global__ void tiledKeyBackward(AttentionDims d, const float *q,
                                 const float *k, const float *v,
                                 const float *lse, const float *delta,
                                 const float *dOut, float *grad) {
  using T = Tiling<D>;
  constexpr int kTile = T::kTile;
  __shared__ float queries[kTile * D], dOuts[kTile * D];
  __shared__ float tileLse[kTile], tileDelta[kTile];
  const BlockRows br = blockRows(d, d.kvHeads, T::kRows);
  const RowLane<D> at(br.first);
  const int64_t g = br.head, j = at.row;
  const bool valid = j < d.seq;
  const float scale = float(d.scale);
  const int64_t row = d.kvRow(br.b, valid ? j : 0, g) + at.lane;
  float kj[T::kCols], vj[kDk ? T::kCols : 1], acc[T::kCols];
  loadRow<D>(k + row, valid, kj);
  if constexpr (kDk)
    loadRow<D>(v + row, valid, vj);
#pragma unroll
  for (int c = 0; c < T::kCols; ++c)
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
      if (at.warpFirst >= d.seq)
        continue;
      // The queries of the tile some key of the warp is seen by: [q0 +
      // begin, q0 + end).
      int64_t end = d.seq - q0 < kTile ? d.seq - q0 : kTile, begin = 0;
      if (d.causal && at.warpFirst > q0)
        begin = at.warpFirst - q0 < end ? at.warpFirst - q0 : end;
      for (int ii = int(begin); ii < end; ++ii) {
        int64_t i = q0 + ii;
        const float *qi = queries + ii * D + at.lane,
                    *doi = dOuts + ii * D + at.lane;
        float score = dotRow<D>(kj, qi);
        bool visible = valid && (!d.causal || i >= j);
        float p = visible ? expf(scale * score - tileLse[ii]) : 0.0f;
        if constexpr (kDk) {
          float dP = dotRow<D>(vj, doi);
          axpyRow<D>(p * (dP - tileDelta[ii]), qi, acc);
        } else {
          axpyRow<D>(p, doi, acc);
        }
      }
    }
  }
  if (valid)
    storeRow<D>(grad + row, kDk ? scale : 1.0f, acc);
}

} // namespace weft::kernels::gpu::tiled

#endif // WEFT_KERNELS_CUDA_ATTENTIONTILED_CUH
