//===- NormKernels.cuh - Norm and bias-gradient kernels --------*- CUDA -*-===//
//
// The forward pass and the input gradient give each row to a warp (a block
// for rows wider than detail::kWideRow) whose lanes read consecutive columns
// and combine the row sums with shuffles; a warp's forward keeps its row in
// registers across the passes. The per-element math is that of the row
// functions in weft/kernels/Norms.h (only the summation order differs).
// Parameter gradients (dGamma, dBeta, dBias) are column sums
// (detail::columnSums): one writer per element, a fixed order, no atomics.
//
// Every kernel takes its float operands through a storage type S
// (storage::F32 or storage::Half16, Rows.cuh); statistics (mean, rstd) stay
// fp32. Parameter gradients accumulate: g = round(g + column sum). In a
// header so that WarpEmulationTests runs them on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_NORMKERNELS_CUH
#define WEFT_KERNELS_CUDA_NORMKERNELS_CUH

#include "Rows.cuh"

namespace weft::kernels::gpu::norm {

using detail::columnSums;
using detail::GroupRow;
using detail::kColumnBlockSize;
using detail::SumOp;
using detail::sumRow;

/// A warp per row (its row cached), or a block per wide row (streamed).
using WarpRows = detail::RowGroup<detail::kWarpSize>;
using BlockRows = detail::RowGroup<detail::kBlockSize>;

/// layerNormRowStats and layerNormRowForward over row r as `xr` gives it:
/// the mean, then the biased variance in a second pass (no E[x^2] - E[x]^2
/// cancellation), then y. `beta` is nullable.
template <typename G, typename S, typename Row>
__device__ void layerNormRow(S s, const Row &xr, std::int64_t r,
                             std::int64_t width, const typename S::Elem *gamma,
                             const typename S::Elem *beta, float eps,
                             typename S::Elem *y, float *mean, float *rstd) {
  typename S::Elem *yr = y + r * width;
  float sum = 0;
  xr.forEach([&](std::int64_t, float v) { sum += v; });
  float rowMean = G::reduce(sum, SumOp()) / float(width);
  float sumSq = 0;
  xr.forEach([&](std::int64_t, float v) {
    float d = v - rowMean;
    sumSq += d * d;
  });
  float rowRstd =
      1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
  xr.forEach([&](std::int64_t c, float v) {
    float o = (v - rowMean) * rowRstd * s.load(gamma, c);
    s.store(yr, c, beta ? o + s.load(beta, c) : o);
  });
  if (G::lane() == 0) {
    mean[r] = rowMean;
    rstd[r] = rowRstd;
  }
}

template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    layerNormForward(S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const typename S::Elem *gamma,
                     const typename S::Elem *beta, float eps,
                     typename S::Elem *y, float *mean, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride())
    layerNormRow<G>(s, GroupRow<G, S>(s, x + r * width, width), r, width, gamma,
                    beta, eps, y, mean, rstd);
}

/// A residual add, sum = a + b, and the LayerNorm over it in one pass (the
/// plans' residual_add then layer_norm_forward over its output): what the
/// two kernels give, bit for bit.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    residualLayerNormForward(S s, std::int64_t rows, std::int64_t width,
                             const typename S::Elem *a,
                             const typename S::Elem *b, typename S::Elem *sum,
                             const typename S::Elem *gamma,
                             const typename S::Elem *beta, float eps,
                             typename S::Elem *y, float *mean, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride())
    layerNormRow<G>(
        s, sumRow<G>(s, a + r * width, b + r * width, sum + r * width, width),
        r, width, gamma, beta, eps, y, mean, rstd);
}

/// dGamma += sum_r dy xhat, dBeta (nullable) += sum_r dy.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    layerNormParamGrad(int tile, S s, std::int64_t rows, std::int64_t width,
                       const typename S::Elem *x, const float *mean,
                       const float *rstd, const typename S::Elem *dy,
                       typename S::Elem *dGamma, typename S::Elem *dBeta) {
  columnSums<2>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[2]) {
        float d = s.load(dy, r * width + c);
        sum[0] += d * (s.load(x, r * width + c) - mean[r]) * rstd[r];
        sum[1] += d;
      },
      [=](std::int64_t c, const float(&total)[2]) {
        s.store(dGamma, c, s.load(dGamma, c) + total[0]);
        if (dBeta)
          s.store(dBeta, c, s.load(dBeta, c) + total[1]);
      });
}

/// layerNormRowBackward. dx may alias dy: every thread reads dy[c] before it
/// writes dx[c], and the other columns' dy are only read before the row
/// reduction, which all of the group's threads finish before any writes.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    layerNormInputGrad(S s, std::int64_t rows, std::int64_t width,
                       const typename S::Elem *x, const typename S::Elem *gamma,
                       const float *mean, const float *rstd,
                       const typename S::Elem *dy, typename S::Elem *dx) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx + r * width;
    float rowMean = mean[r], rowRstd = rstd[r];
    float sumG = 0, sumGXhat = 0;
    for (std::int64_t c = G::lane(); c < width; c += G::kSize) {
      float g = s.load(dyr, c) * s.load(gamma, c);
      sumG += g;
      sumGXhat += g * (s.load(xr, c) - rowMean) * rowRstd;
    }
    float meanG = G::reduce(sumG, SumOp()) / float(width);
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (std::int64_t c = G::lane(); c < width; c += G::kSize) {
      float xhat = (s.load(xr, c) - rowMean) * rowRstd;
      s.store(dxr, c,
              rowRstd * (s.load(dyr, c) * s.load(gamma, c) - meanG -
                         xhat * meanGXhat));
    }
  }
}

/// rmsNormRowRstd and rmsNormRowForward over row r as `xr` gives it.
template <typename G, typename S, typename Row>
__device__ void rmsNormRow(S s, const Row &xr, std::int64_t r,
                           std::int64_t width, const typename S::Elem *gamma,
                           float eps, typename S::Elem *y, float *rstd) {
  typename S::Elem *yr = y + r * width;
  float sumSq = 0;
  xr.forEach([&](std::int64_t, float v) { sumSq += v * v; });
  float rowRstd =
      1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
  xr.forEach([&](std::int64_t c, float v) {
    s.store(yr, c, v * rowRstd * s.load(gamma, c));
  });
  if (G::lane() == 0)
    rstd[r] = rowRstd;
}

template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormForward(S s, std::int64_t rows, std::int64_t width,
                   const typename S::Elem *x, const typename S::Elem *gamma,
                   float eps, typename S::Elem *y, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride())
    rmsNormRow<G>(s, GroupRow<G, S>(s, x + r * width, width), r, width, gamma,
                  eps, y, rstd);
}

/// sum = a + b and the RMSNorm over it in one pass.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    residualRmsNormForward(S s, std::int64_t rows, std::int64_t width,
                           const typename S::Elem *a, const typename S::Elem *b,
                           typename S::Elem *sum, const typename S::Elem *gamma,
                           float eps, typename S::Elem *y, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride())
    rmsNormRow<G>(
        s, sumRow<G>(s, a + r * width, b + r * width, sum + r * width, width),
        r, width, gamma, eps, y, rstd);
}

/// dGamma += sum_r dy x rstd.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    rmsNormParamGrad(int tile, S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const float *rstd,
                     const typename S::Elem *dy, typename S::Elem *dGamma) {
  columnSums<1>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[1]) {
        sum[0] +=
            s.load(dy, r * width + c) * s.load(x, r * width + c) * rstd[r];
      },
      [=](std::int64_t c, const float(&total)[1]) {
        s.store(dGamma, c, s.load(dGamma, c) + total[0]);
      });
}

/// rmsNormRowBackward; dx may alias dy as in layerNormInputGrad.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormInputGrad(S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const typename S::Elem *gamma,
                     const float *rstd, const typename S::Elem *dy,
                     typename S::Elem *dx) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx + r * width;
    float rowRstd = rstd[r];
    float sumGXhat = 0;
    for (std::int64_t c = G::lane(); c < width; c += G::kSize)
      sumGXhat += s.load(dyr, c) * s.load(gamma, c) * s.load(xr, c) * rowRstd;
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (std::int64_t c = G::lane(); c < width; c += G::kSize)
      s.store(dxr, c,
              rowRstd * (s.load(dyr, c) * s.load(gamma, c) -
                         s.load(xr, c) * rowRstd * meanGXhat));
  }
}

//===--- One-pass backward ----------------------------------------------===//
//
// The input gradient and the parameter gradients' partial sums in one pass
// over x and dy: each group keeps the partial sums of its columns in
// registers over its rows; at the end a block adds its warps' sums in warp
// order and writes them to `partials` ([blocks][2][width]), and
// normGradSums adds those over the blocks in a fixed order. The grid is
// fixed (at most kOnePassBlocks blocks, not the device's size), so the
// partial sums and their order are the same on every GPU. Rows up to
// kOnePassColumns * group size wide (1024 for a warp, 8192 for a block).

constexpr int kOnePassBlocks = 512;
constexpr int kOnePassColumns = 32; // per thread

/// The grid of a one-pass launch over `rows` (its blocks are the rows of
/// the partial sums: [blocks][2][width] floats), and whether rows `width`
/// wide fit in its registers.
inline detail::Grid onePassGrid(std::int64_t rows, std::int64_t width) {
  return detail::rowGrid(rows, width, detail::kBlockSize, kOnePassBlocks);
}
inline bool onePassFits(std::int64_t width) {
  return width <= kOnePassColumns * std::int64_t(detail::kBlockSize);
}

/// Stores the block's column sums sums[k][i] (column lane() + i * group
/// size) into partials[blockIdx.x][k]: a block of warps adds them in warp
/// order in shared memory first (every thread of the block calls this).
template <typename G, int kSums>
__device__ void storePartials(const float (&sums)[kSums][kOnePassColumns],
                              std::int64_t width, float *partials) {
  float *out = partials + std::int64_t(blockIdx.x) * 2 * width;
  if constexpr (G::kPerBlock == 1) {
#pragma unroll
    for (int i = 0; i < kOnePassColumns; ++i) {
      std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
      if (c < width)
        for (int k = 0; k < kSums; ++k)
          out[k * width + c] = sums[k][i];
    }
  } else {
    // Warp rows are at most kOnePassColumns * 32 = detail::kWideRow wide.
    __shared__ float block[kSums][kOnePassColumns * detail::kWarpSize];
    for (int w = 0; w < G::kPerBlock; ++w) {
      if (int(threadIdx.x) / G::kSize == w) {
#pragma unroll
        for (int i = 0; i < kOnePassColumns; ++i) {
          std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
          if (c < width)
            for (int k = 0; k < kSums; ++k)
              block[k][c] = w == 0 ? sums[k][i] : block[k][c] + sums[k][i];
        }
      }
      __syncthreads();
    }
    for (std::int64_t c = threadIdx.x; c < width; c += G::kThreads)
      for (int k = 0; k < kSums; ++k)
        out[k * width + c] = block[k][c];
  }
}

/// Stores element c of dx's row (unless dxr is null: only the add reads dx),
/// and with `sumRow` (nullable) also the residual add after the norm, sum =
/// dx + addend, from dx as the add would read it back: the two kernels'
/// results, with one pass over dx fewer (two without dx).
template <typename S>
__device__ void storeInputGrad(S s, typename S::Elem *dxr, std::int64_t c,
                               float v, const typename S::Elem *addendRow,
                               typename S::Elem *sumRow) {
  if (dxr)
    s.store(dxr, c, v);
  if (sumRow) {
    // dx as stored plus the addend, rounded apart: fp32's roundTrip is the
    // identity, and nvcc would otherwise fuse dx's last multiply with this
    // add (one rounding instead of the separate kernels' two).
#if defined(__CUDA_ARCH__)
    float total = __fadd_rn(s.roundTrip(v), s.load(addendRow, c));
#else
    float total = s.roundTrip(v) + s.load(addendRow, c);
#endif
    s.store(sumRow, c, total);
  }
}

/// layerNormRowBackward for the group's rows (dx may alias dy, as in
/// layerNormInputGrad), and the group's sums of dy xhat and dy per column;
/// with `sum` (nullable) also sum = dx + addend (storeInputGrad; sum may alias
/// addend; dx null with `sum`: dx is not stored).
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    layerNormBackwardOnePass(S s, std::int64_t rows, std::int64_t width,
                             const typename S::Elem *x,
                             const typename S::Elem *gamma, const float *mean,
                             const float *rstd, const typename S::Elem *dy,
                             typename S::Elem *dx, float *partials,
                             const typename S::Elem *addend,
                             typename S::Elem *sum) {
  float sums[2][kOnePassColumns] = {}; // dy xhat, dy
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx ? dx + r * width : nullptr;
    const typename S::Elem *addendRow = sum ? addend + r * width : nullptr;
    typename S::Elem *sumRow = sum ? sum + r * width : nullptr;
    float rowMean = mean[r], rowRstd = rstd[r];
    float sumG = 0, sumGXhat = 0;
#pragma unroll
    for (int i = 0; i < kOnePassColumns; ++i) {
      std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
      if (c < width) {
        float d = s.load(dyr, c), xm = s.load(xr, c) - rowMean;
        float g = d * s.load(gamma, c);
        sumG += g;
        sumGXhat += g * xm * rowRstd;
        sums[0][i] += d * xm * rowRstd;
        sums[1][i] += d;
      }
    }
    float meanG = G::reduce(sumG, SumOp()) / float(width);
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
#pragma unroll
    for (int i = 0; i < kOnePassColumns; ++i) {
      std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
      if (c < width) {
        float xhat = (s.load(xr, c) - rowMean) * rowRstd;
        storeInputGrad(s, dxr, c,
                       rowRstd * (s.load(dyr, c) * s.load(gamma, c) - meanG -
                                  xhat * meanGXhat),
                       addendRow, sumRow);
      }
    }
  }
  storePartials<G>(sums, width, partials);
}

/// rmsNormRowBackward for the group's rows (dx may alias dy) and the group's
/// sums of dy x rstd per column (partials[b][1] unused); with `sum` also sum
/// = dx + addend, as layerNormBackwardOnePass.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormBackwardOnePass(S s, std::int64_t rows, std::int64_t width,
                           const typename S::Elem *x,
                           const typename S::Elem *gamma, const float *rstd,
                           const typename S::Elem *dy, typename S::Elem *dx,
                           float *partials, const typename S::Elem *addend,
                           typename S::Elem *sum) {
  float sums[1][kOnePassColumns] = {}; // dy x rstd
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx ? dx + r * width : nullptr;
    const typename S::Elem *addendRow = sum ? addend + r * width : nullptr;
    typename S::Elem *sumRow = sum ? sum + r * width : nullptr;
    float rowRstd = rstd[r];
    float sumGXhat = 0;
#pragma unroll
    for (int i = 0; i < kOnePassColumns; ++i) {
      std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
      if (c < width) {
        float d = s.load(dyr, c), xv = s.load(xr, c);
        sumGXhat += d * s.load(gamma, c) * xv * rowRstd;
        sums[0][i] += d * xv * rowRstd;
      }
    }
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
#pragma unroll
    for (int i = 0; i < kOnePassColumns; ++i) {
      std::int64_t c = G::lane() + std::int64_t(i) * G::kSize;
      if (c < width)
        storeInputGrad(s, dxr, c,
                       rowRstd * (s.load(dyr, c) * s.load(gamma, c) -
                                  s.load(xr, c) * rowRstd * meanGXhat),
                       addendRow, sumRow);
    }
  }
  storePartials<G>(sums, width, partials);
}

/// dGamma += the blocks' partial sums, and dBeta (nullable) += theirs; a
/// column sum over the `groups` (blocks) rows of partials (launch over
/// width).
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    normGradSums(int tile, S s, std::int64_t groups, std::int64_t width,
                 const float *partials, typename S::Elem *dGamma,
                 typename S::Elem *dBeta) {
  columnSums<2>(
      groups, width, tile,
      [=](std::int64_t g, std::int64_t c, float(&sum)[2]) {
        sum[0] += partials[g * 2 * width + c];
        if (dBeta)
          sum[1] += partials[g * 2 * width + width + c];
      },
      [=](std::int64_t c, const float(&total)[2]) {
        s.store(dGamma, c, s.load(dGamma, c) + total[0]);
        if (dBeta)
          s.store(dBeta, c, s.load(dBeta, c) + total[1]);
      });
}

/// dBias += sum_r dy.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    biasGrad(int tile, S s, std::int64_t rows, std::int64_t width,
             const typename S::Elem *dy, typename S::Elem *dBias) {
  columnSums<1>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[1]) {
        sum[0] += s.load(dy, r * width + c);
      },
      [=](std::int64_t c, const float(&total)[1]) {
        s.store(dBias, c, s.load(dBias, c) + total[0]);
      });
}

} // namespace weft::kernels::gpu::norm

#endif // WEFT_KERNELS_CUDA_NORMKERNELS_CUH
