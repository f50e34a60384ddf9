//===- RowKernelsEmulationTest.cpp - Row kernels on the CPU ---------------===//
//
// The CUDA row and column kernels (NormKernels.cuh, LossKernels.cuh) and the
// 16-bit embedding lookup under the warp emulator (WarpEmulation.h), with the
// launch geometry the CUDA launches use (rowGrid, columnGrid):
//  - on fp32 storage against the CPU kernels (so their reductions, grid
//    strides and in-place aliasing are checked without a GPU);
//  - on bf16 and f16 storage against the widening path (widen, the fp32
//    kernel, scale, round): equal bit for bit, in place where the backend
//    aliases (dx over dy, dLogits over logits).
// Outputs start as NaN (0xffff for 16-bit), so an element a kernel forgets
// to write fails.
//
//===----------------------------------------------------------------------===//

#include <cuda_runtime.h>

#include "KernelTestUtil.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "WarpEmulation.h"

#include "../../../runtime/kernels/cuda/EmbeddingKernels.cuh"
#include "../../../runtime/kernels/cuda/HalfElementwise.cuh"
#include "../../../runtime/kernels/cuda/LossKernels.cuh"
#include "../../../runtime/kernels/cuda/NormKernels.cuh"

namespace {

using namespace weft::kernels;
using test::relativeError;
namespace gpu = weft::kernels::gpu;
namespace detail = weft::kernels::gpu::detail;
namespace norm = weft::kernels::gpu::norm;
namespace loss = weft::kernels::gpu::loss;
using gpu::storage::F32;
using gpu::storage::Half16;
using Bits = std::vector<std::uint16_t>;
using Floats = std::vector<float>;

constexpr float kNaN = NAN;

//===--- Launches with the CUDA geometry ---------------------------------===//

/// launchRows: a warp per row, or a block of kWide threads per wide row.
template <int kWide = detail::kBlockSize, typename Kernel, typename... Args>
void launchRows(std::int64_t rows, std::int64_t width, Kernel warpKernel,
                Kernel blockKernel, Args... args) {
  detail::Grid grid = detail::rowGrid(rows, width, kWide);
  if (grid.blocks > 0)
    emulation::launch(unsigned(grid.blocks), unsigned(grid.threads),
                      grid.wide ? blockKernel : warpKernel, args...);
}

/// launchColumns: tiles of columns per 1024-thread block.
template <typename Kernel, typename... Args>
void launchColumns(std::int64_t rows, std::int64_t width, Kernel kernel,
                   Args... args) {
  detail::Grid grid = detail::columnGrid(rows, width);
  if (grid.blocks > 0)
    emulation::launch(unsigned(grid.blocks), unsigned(grid.threads), kernel,
                      detail::columnTile(width), args...);
}

/// A single block of kBlockSize threads (the mean-loss and count kernels).
template <typename Kernel, typename... Args>
void launchOneBlock(Kernel kernel, Args... args) {
  emulation::launch(1, detail::kBlockSize, kernel, args...);
}

//===--- 16-bit data ------------------------------------------------------===//

/// The codec plus the kernels' storage type.
struct Half : test::HalfCodec {
  Half16 storage() const { return {bf16}; }
};

Floats randomFloats(std::mt19937_64 &rng, std::size_t n, double lo, double hi) {
  return test::convert<float>(test::randomVector(rng, n, lo, hi));
}

struct Shape {
  std::int64_t rows, width;
};
// A warp per row (one column per column-sum block), and a block per row
// (tiles of 16 columns). Emulated 1024-thread column blocks are slow (each
// barrier wakes every thread): the shapes are small.
constexpr Shape kNormShapes[] = {{37, 20}, {3, 1100}};

//===--- Norms and the bias gradient ----------------------------------===//

/// A norm's statistics.
struct NormRun {
  Floats mean, rstd;
};

/// The one-pass backward (norm::*BackwardOnePass, then normGradSums over the
/// groups' partial sums), as Norms.cu launches it; with `sum` it also writes
/// sum = dx + addend.
template <typename S, typename Kernel, typename... Args>
void onePass(S s, std::int64_t rows, std::int64_t width, Kernel warpKernel,
             Kernel blockKernel, typename S::Elem *dGamma,
             typename S::Elem *dBeta, const typename S::Elem *addend,
             typename S::Elem *sum, Args... args) {
  detail::Grid grid = norm::onePassGrid(rows, width);
  std::int64_t groups = grid.blocks;
  Floats partials(static_cast<std::size_t>(groups * 2 * width), kNaN);
  emulation::launch(unsigned(grid.blocks), unsigned(grid.threads),
                    grid.wide ? blockKernel : warpKernel, args...,
                    partials.data(), addend, sum);
  launchColumns(groups, width, &norm::normGradSums<S>, s, groups, width,
                static_cast<const float *>(partials.data()), dGamma, dBeta);
}

/// The forward, then the backward with dx over dy: in one pass or, as
/// without scratch, parameter gradients first, then dx.
template <typename S>
NormRun layerNormOn(S s, const Shape &shape, const typename S::Elem *x,
                    const typename S::Elem *gamma, const typename S::Elem *beta,
                    std::vector<typename S::Elem> &y,
                    std::vector<typename S::Elem> &dyThenDx,
                    std::vector<typename S::Elem> &dGamma,
                    std::vector<typename S::Elem> &dBeta,
                    bool onePassBackward = false,
                    const typename S::Elem *addend = nullptr,
                    typename S::Elem *sum = nullptr, bool storeDx = true) {
  const std::int64_t rows = shape.rows, width = shape.width;
  NormRun run;
  run.mean.assign(std::size_t(rows), kNaN);
  run.rstd.assign(std::size_t(rows), kNaN);
  launchRows(rows, width, &norm::layerNormForward<norm::WarpRows, S>,
             &norm::layerNormForward<norm::BlockRows, S>, s, rows, width, x,
             gamma, beta, 1e-5f, y.data(), run.mean.data(), run.rstd.data());
  const auto *dy = static_cast<const typename S::Elem *>(dyThenDx.data());
  const auto *mean = static_cast<const float *>(run.mean.data()),
             *rstd = static_cast<const float *>(run.rstd.data());
  if (onePassBackward) {
    onePass(s, rows, width, &norm::layerNormBackwardOnePass<norm::WarpRows, S>,
            &norm::layerNormBackwardOnePass<norm::BlockRows, S>, dGamma.data(),
            dBeta.data(), addend, sum, s, rows, width, x, gamma, mean, rstd, dy,
            storeDx ? dyThenDx.data() : nullptr);
    return run;
  }
  launchColumns(rows, width, &norm::layerNormParamGrad<S>, s, rows, width, x,
                static_cast<const float *>(run.mean.data()),
                static_cast<const float *>(run.rstd.data()),
                static_cast<const typename S::Elem *>(dyThenDx.data()),
                dGamma.data(), dBeta.data());
  launchRows(rows, width, &norm::layerNormInputGrad<norm::WarpRows, S>,
             &norm::layerNormInputGrad<norm::BlockRows, S>, s, rows, width, x,
             gamma, static_cast<const float *>(run.mean.data()),
             static_cast<const float *>(run.rstd.data()),
             static_cast<const typename S::Elem *>(dyThenDx.data()),
             dyThenDx.data());
  return run;
}

template <typename S>
NormRun
rmsNormOn(S s, const Shape &shape, const typename S::Elem *x,
          const typename S::Elem *gamma, std::vector<typename S::Elem> &y,
          std::vector<typename S::Elem> &dyThenDx,
          std::vector<typename S::Elem> &dGamma, bool onePassBackward = false,
          const typename S::Elem *addend = nullptr,
          typename S::Elem *sum = nullptr, bool storeDx = true) {
  const std::int64_t rows = shape.rows, width = shape.width;
  NormRun run;
  run.rstd.assign(std::size_t(rows), kNaN);
  launchRows(rows, width, &norm::rmsNormForward<norm::WarpRows, S>,
             &norm::rmsNormForward<norm::BlockRows, S>, s, rows, width, x,
             gamma, 1e-5f, y.data(), run.rstd.data());
  if (onePassBackward) {
    onePass(s, rows, width, &norm::rmsNormBackwardOnePass<norm::WarpRows, S>,
            &norm::rmsNormBackwardOnePass<norm::BlockRows, S>, dGamma.data(),
            static_cast<typename S::Elem *>(nullptr), addend, sum, s, rows,
            width, x, gamma, static_cast<const float *>(run.rstd.data()),
            static_cast<const typename S::Elem *>(dyThenDx.data()),
            storeDx ? dyThenDx.data() : nullptr);
    return run;
  }
  launchColumns(rows, width, &norm::rmsNormParamGrad<S>, s, rows, width, x,
                static_cast<const float *>(run.rstd.data()),
                static_cast<const typename S::Elem *>(dyThenDx.data()),
                dGamma.data());
  launchRows(rows, width, &norm::rmsNormInputGrad<norm::WarpRows, S>,
             &norm::rmsNormInputGrad<norm::BlockRows, S>, s, rows, width, x,
             gamma, static_cast<const float *>(run.rstd.data()),
             static_cast<const typename S::Elem *>(dyThenDx.data()),
             dyThenDx.data());
  return run;
}

template <typename S>
void biasGradOn(S s, const Shape &shape, const typename S::Elem *dy,
                std::vector<typename S::Elem> &dBias) {
  launchColumns(shape.rows, shape.width, &norm::biasGrad<S>, s, shape.rows,
                shape.width, dy, dBias.data());
}

TEST(RowKernelsEmulation, Fp32NormsAndBiasGradientMatchTheCpuKernels) {
  std::mt19937_64 rng(11);
  for (bool onePassBackward : {false, true})
    for (const Shape &shape : kNormShapes) {
      SCOPED_TRACE("rows " + std::to_string(shape.rows) + " width " +
                   std::to_string(shape.width) +
                   (onePassBackward ? " one-pass backward" : ""));
      const std::int64_t rows = shape.rows, width = shape.width;
      const std::size_t n = std::size_t(rows * width), w = std::size_t(width);
      Floats x = randomFloats(rng, n, -2, 3),
             gamma = randomFloats(rng, w, 0.5, 1.5),
             beta = randomFloats(rng, w, -1, 1),
             dy = randomFloats(rng, n, -1, 1),
             dGamma0 = randomFloats(rng, w, -1, 1),
             dBeta0 = randomFloats(rng, w, -1, 1);

      Floats y(n, kNaN), dx = dy, dGamma = dGamma0, dBeta = dBeta0;
      NormRun got =
          layerNormOn(F32(), shape, x.data(), gamma.data(), beta.data(), y, dx,
                      dGamma, dBeta, onePassBackward);
      Floats ey(n), eMean(static_cast<std::size_t>(rows)),
          eRstd(static_cast<std::size_t>(rows)), edx(n), edGamma = dGamma0,
                                                         edBeta = dBeta0;
      cpu::layerNormForward(rows, width, x.data(), gamma.data(), beta.data(),
                            1e-5f, ey.data(), eMean.data(), eRstd.data());
      cpu::layerNormBackward(rows, width, x.data(), gamma.data(), eMean.data(),
                             eRstd.data(), dy.data(), edx.data(),
                             edGamma.data(), edBeta.data());
      EXPECT_LT(relativeError(y, ey), 1e-6) << "layer norm y";
      EXPECT_LT(relativeError(got.mean, eMean), 1e-6);
      EXPECT_LT(relativeError(got.rstd, eRstd), 1e-6);
      EXPECT_LT(relativeError(dx, edx), 1e-5) << "layer norm dx";
      EXPECT_LT(relativeError(dGamma, edGamma), 1e-5);
      EXPECT_LT(relativeError(dBeta, edBeta), 1e-5);

      y.assign(n, kNaN);
      dx = dy;
      dGamma = dGamma0;
      got = rmsNormOn(F32(), shape, x.data(), gamma.data(), y, dx, dGamma,
                      onePassBackward);
      edGamma = dGamma0;
      cpu::rmsNormForward(rows, width, x.data(), gamma.data(), 1e-5f, ey.data(),
                          eRstd.data());
      cpu::rmsNormBackward(rows, width, x.data(), gamma.data(), eRstd.data(),
                           dy.data(), edx.data(), edGamma.data());
      EXPECT_LT(relativeError(y, ey), 1e-6) << "rms norm y";
      EXPECT_LT(relativeError(got.rstd, eRstd), 1e-6);
      EXPECT_LT(relativeError(dx, edx), 1e-5) << "rms norm dx";
      EXPECT_LT(relativeError(dGamma, edGamma), 1e-5);

      Floats dBias = dBeta0, edBias = dBeta0;
      biasGradOn(F32(), shape, dy.data(), dBias);
      cpu::biasGrad(rows, width, dy.data(), edBias.data());
      EXPECT_LT(relativeError(dBias, edBias), 1e-5) << "bias grad";
    }
}

TEST(RowKernelsEmulation, HalfNormsAndBiasGradientEqualTheWideningPath) {
  std::mt19937_64 rng(12);
  for (bool onePassBackward : {false, true})
    for (Half h : {Half{{true}}, Half{{false}}})
      for (const Shape &shape : kNormShapes) {
        SCOPED_TRACE(h.name() + " rows " + std::to_string(shape.rows) +
                     " width " + std::to_string(shape.width) +
                     (onePassBackward ? " one-pass backward" : ""));
        const std::size_t n = std::size_t(shape.rows * shape.width),
                          w = std::size_t(shape.width);
        const Bits x = h.random(rng, n, -2, 3),
                   gamma = h.random(rng, w, 0.5, 1.5),
                   beta = h.random(rng, w, -1, 1), dy = h.random(rng, n, -1, 1),
                   dGamma0 = h.random(rng, w, -1, 1),
                   dBeta0 = h.random(rng, w, -1, 1);
        const Floats wx = h.widen(x), wGamma = h.widen(gamma),
                     wBeta = h.widen(beta);

        // LayerNorm: 16-bit storage against widen, fp32 kernels, narrow.
        Bits y(n, 0xffff), dx = dy, dGamma = dGamma0, dBeta = dBeta0;
        NormRun got =
            layerNormOn(h.storage(), shape, x.data(), gamma.data(), beta.data(),
                        y, dx, dGamma, dBeta, onePassBackward);
        Floats fy(n, kNaN), fdx = h.widen(dy), fdGamma = h.widen(dGamma0),
                            fdBeta = h.widen(dBeta0);
        NormRun ref =
            layerNormOn(F32(), shape, wx.data(), wGamma.data(), wBeta.data(),
                        fy, fdx, fdGamma, fdBeta, onePassBackward);
        EXPECT_EQ(y, h.narrow(fy)) << "layer norm y";
        EXPECT_EQ(got.mean, ref.mean);
        EXPECT_EQ(got.rstd, ref.rstd);
        EXPECT_EQ(dx, h.narrow(fdx)) << "layer norm dx";
        EXPECT_EQ(dGamma, h.narrow(fdGamma)) << "layer norm dGamma";
        EXPECT_EQ(dBeta, h.narrow(fdBeta)) << "layer norm dBeta";

        // RMSNorm.
        y.assign(n, 0xffff);
        dx = dy;
        dGamma = dGamma0;
        got = rmsNormOn(h.storage(), shape, x.data(), gamma.data(), y, dx,
                        dGamma, onePassBackward);
        fy.assign(n, kNaN);
        fdx = h.widen(dy);
        fdGamma = h.widen(dGamma0);
        ref = rmsNormOn(F32(), shape, wx.data(), wGamma.data(), fy, fdx,
                        fdGamma, onePassBackward);
        EXPECT_EQ(y, h.narrow(fy)) << "rms norm y";
        EXPECT_EQ(got.rstd, ref.rstd);
        EXPECT_EQ(dx, h.narrow(fdx)) << "rms norm dx";
        EXPECT_EQ(dGamma, h.narrow(fdGamma)) << "rms norm dGamma";

        // Bias gradient, accumulated into a 16-bit gradient.
        Bits dBias = dBeta0;
        Floats fdBias = h.widen(dBeta0), wdy = h.widen(dy);
        biasGradOn(h.storage(), shape, dy.data(), dBias);
        biasGradOn(F32(), shape, wdy.data(), fdBias);
        EXPECT_EQ(dBias, h.narrow(fdBias)) << "bias grad";
      }
}

/// residual_add then the norm over its output, against the fused kernels:
/// the same sum and outputs bit for bit, the sum over `a` in place.
TEST(RowKernelsEmulation, HalfResidualNormsEqualTheTwoKernels) {
  std::mt19937_64 rng(18);
  for (Half h : {Half{{true}}, Half{{false}}})
    for (const Shape &shape : kNormShapes) {
      SCOPED_TRACE(h.name() + " rows " + std::to_string(shape.rows) +
                   " width " + std::to_string(shape.width));
      const std::int64_t rows = shape.rows, width = shape.width,
                         n = rows * width;
      const std::size_t count = std::size_t(n), w = std::size_t(width);
      const Bits a = h.random(rng, count, -2, 2),
                 b = h.random(rng, count, -1, 1),
                 gamma = h.random(rng, w, 0.5, 1.5),
                 beta = h.random(rng, w, -1, 1);
      const Half16 s = h.storage();
      for (bool rms : {false, true}) {
        SCOPED_TRACE(rms ? "rms norm" : "layer norm");
        // Two kernels: sum into its own buffer, then the norm over it.
        Bits sum(count, 0xffff), y(count, 0xffff);
        Floats mean(std::size_t(rows), kNaN), rstd(std::size_t(rows), kNaN);
        emulation::launchSerial(
            (n + gpu::half::kPerThread - 1) / gpu::half::kPerThread,
            &gpu::half::residualAdd, s, n, a.data(), b.data(), sum.data());
        const std::uint16_t *x = sum.data();
        if (rms)
          launchRows(rows, width, &norm::rmsNormForward<norm::WarpRows, Half16>,
                     &norm::rmsNormForward<norm::BlockRows, Half16>, s, rows,
                     width, x, gamma.data(), 1e-5f, y.data(), rstd.data());
        else
          launchRows(rows, width,
                     &norm::layerNormForward<norm::WarpRows, Half16>,
                     &norm::layerNormForward<norm::BlockRows, Half16>, s, rows,
                     width, x, gamma.data(), beta.data(), 1e-5f, y.data(),
                     mean.data(), rstd.data());
        // Fused, the sum over a.
        Bits fusedSum = a, fusedY(count, 0xffff);
        Floats fusedMean(std::size_t(rows), kNaN),
            fusedRstd(std::size_t(rows), kNaN);
        const std::uint16_t *in = fusedSum.data();
        if (rms)
          launchRows(rows, width,
                     &norm::residualRmsNormForward<norm::WarpRows, Half16>,
                     &norm::residualRmsNormForward<norm::BlockRows, Half16>, s,
                     rows, width, in, b.data(), fusedSum.data(), gamma.data(),
                     1e-5f, fusedY.data(), fusedRstd.data());
        else
          launchRows(rows, width,
                     &norm::residualLayerNormForward<norm::WarpRows, Half16>,
                     &norm::residualLayerNormForward<norm::BlockRows, Half16>,
                     s, rows, width, in, b.data(), fusedSum.data(),
                     gamma.data(), beta.data(), 1e-5f, fusedY.data(),
                     fusedMean.data(), fusedRstd.data());
        EXPECT_EQ(fusedSum, sum);
        EXPECT_EQ(fusedY, y);
        EXPECT_EQ(fusedRstd, rstd);
        if (!rms) {
          EXPECT_EQ(fusedMean, mean);
        }
      }
    }
}

TEST(RowKernelsEmulation, HalfNormBackwardAddsEqualTheTwoKernels) {
  // A norm's one-pass backward, then the residual add over its dx (two
  // kernels), against the backward adding as it stores dx: the same dx,
  // parameter gradients and sum, bit for bit; the sum once into its own
  // buffer, once over the addend.
  std::mt19937_64 rng(19);
  for (Half h : {Half{{true}}, Half{{false}}})
    for (const Shape &shape : kNormShapes) {
      SCOPED_TRACE(h.name() + " rows " + std::to_string(shape.rows) +
                   " width " + std::to_string(shape.width));
      const std::int64_t n = shape.rows * shape.width;
      const std::size_t count = std::size_t(n), w = std::size_t(shape.width);
      const Bits x = h.random(rng, count, -2, 3),
                 gamma = h.random(rng, w, 0.5, 1.5),
                 beta = h.random(rng, w, -1, 1),
                 dy = h.random(rng, count, -1, 1),
                 addend = h.random(rng, count, -1, 1),
                 dGamma0 = h.random(rng, w, -1, 1),
                 dBeta0 = h.random(rng, w, -1, 1);
      const Half16 s = h.storage();
      for (bool rms : {false, true}) {
        const bool inPlace = rms; // both placements, at half the cost
        {
          SCOPED_TRACE(std::string(rms ? "rms norm" : "layer norm") +
                       (inPlace ? ", sum over the addend" : ""));
          auto run = [&](bool fused, bool storeDx, Bits &dx, Bits &dGamma,
                         Bits &dBeta, Bits &sum) {
            Bits y(count, 0xffff);
            Bits target = inPlace ? addend : Bits(count, 0xffff);
            const std::uint16_t *add = inPlace ? target.data() : addend.data();
            dx = dy;
            dGamma = dGamma0;
            dBeta = dBeta0;
            if (rms)
              rmsNormOn(s, shape, x.data(), gamma.data(), y, dx, dGamma, true,
                        fused ? add : nullptr, fused ? target.data() : nullptr,
                        storeDx);
            else
              layerNormOn(s, shape, x.data(), gamma.data(), beta.data(), y, dx,
                          dGamma, dBeta, true, fused ? add : nullptr,
                          fused ? target.data() : nullptr, storeDx);
            if (!fused)
              emulation::launchSerial(
                  (n + gpu::half::kPerThread - 1) / gpu::half::kPerThread,
                  &gpu::half::residualAdd, s, n,
                  static_cast<const std::uint16_t *>(dx.data()), add,
                  target.data());
            sum = target;
          };
          Bits dx, dGamma, dBeta, sum, fDx, fDGamma, fDBeta, fSum;
          run(false, true, dx, dGamma, dBeta, sum);
          run(true, true, fDx, fDGamma, fDBeta, fSum);
          EXPECT_EQ(fDx, dx);
          EXPECT_EQ(fSum, sum);
          EXPECT_EQ(fDGamma, dGamma);
          EXPECT_EQ(fDBeta, dBeta);
          EXPECT_NE(sum, dx); // the add did add
          // Without storing dx (only the add reads it): dx stays dy.
          run(true, false, fDx, fDGamma, fDBeta, fSum);
          EXPECT_EQ(fDx, dy);
          EXPECT_EQ(fSum, sum);
          EXPECT_EQ(fDGamma, dGamma);
        }
      }
    }
}

//===--- Cross-entropy ----------------------------------------------------===//

/// Targets in [0, vocab) with every fifth row ignored and row 1 on the last
/// word.
std::vector<std::int32_t> lossTargets(std::mt19937_64 &rng, std::int64_t rows,
                                      std::int64_t vocab) {
  std::vector<std::int32_t> targets =
      test::randomIds(rng, std::size_t(rows), std::int32_t(vocab));
  for (std::size_t r = 0; r < targets.size(); r += 5)
    targets[r] = kIgnoreIndex;
  if (rows > 1)
    targets[1] = std::int32_t(vocab - 1);
  return targets;
}

/// The fp32 form (crossEntropyForwardBackward): rowLse, meanLoss, logitGrad.
struct Fp32Loss {
  float loss = kNaN;
  int validCount = -1;
  Floats lse, dLogits;
};
Fp32Loss fp32CrossEntropy(std::int64_t rows, std::int64_t vocab,
                          std::int64_t valid, const Floats &logits,
                          const std::vector<std::int32_t> &targets) {
  Fp32Loss out;
  out.lse.assign(std::size_t(rows), kNaN);
  out.dLogits.assign(logits.size(), kNaN);
  launchRows<loss::kLseBlockSize>(
      rows, valid, &loss::rowLse<loss::WarpRows, F32>,
      &loss::rowLse<loss::LseBlockRows, F32>, F32(), rows, vocab, valid,
      logits.data(), out.lse.data());
  launchOneBlock(&loss::meanLoss<loss::FullLogitsTerm>, rows, targets.data(),
                 loss::FullLogitsTerm{out.lse.data(), logits.data(), vocab},
                 &out.validCount, &out.loss);
  emulation::launchSerial(
      rows * vocab, &loss::logitGrad<F32>, F32(), rows, vocab, std::int64_t(0),
      valid, logits.data(), targets.data(),
      static_cast<const float *>(out.lse.data()),
      static_cast<const int *>(&out.validCount), 1.0f, out.dLogits.data());
  return out;
}

/// Rows `vocab` apart of which the first `valid` columns are words: a warp
/// and a block per row, packed and padded (row padding for aligned GEMMs).
struct LossShape {
  std::int64_t rows, vocab, valid;
  std::string name() const {
    return "rows " + std::to_string(rows) + " vocab " + std::to_string(valid) +
           (valid < vocab ? " padded to " + std::to_string(vocab) : "");
  }
};
const LossShape kLossShapes[] = {
    {9, 300, 300}, {5, 1500, 1500}, {7, 304, 299}, {4, 1504, 1497}};

/// Random logits whose padding columns hold `large`, far above the words'
/// logits: a kernel that reads them for the max or the sums changes the
/// loss.
constexpr float kLargeLogit = 3e4f;
template <typename T, typename Fill>
std::vector<T> paddedLogits(const LossShape &shape, T large, Fill fill) {
  std::vector<T> logits = fill(std::size_t(shape.rows * shape.vocab));
  test::fillPadding(logits, shape.rows, shape.vocab, shape.valid, large);
  return logits;
}

TEST(RowKernelsEmulation, Fp32CrossEntropyMatchesTheCpuKernel) {
  std::mt19937_64 rng(13);
  for (const LossShape &shape : kLossShapes) {
    SCOPED_TRACE(shape.name());
    const std::int64_t rows = shape.rows, vocab = shape.vocab;
    Floats logits = paddedLogits(shape, kLargeLogit, [&](std::size_t n) {
      return randomFloats(rng, n, -4, 4);
    });
    std::vector<std::int32_t> targets = lossTargets(rng, rows, shape.valid);
    Fp32Loss got = fp32CrossEntropy(rows, vocab, shape.valid, logits, targets);
    Floats eGrad(logits.size()), eLse(static_cast<std::size_t>(rows));
    float eLoss = cpu::crossEntropyForwardBackward(rows, vocab, logits.data(),
                                                   targets.data(), eGrad.data(),
                                                   eLse.data(), shape.valid);
    ASSERT_LT(eLoss, 100.0f);               // the padding was not read
    for (std::int64_t r = 0; r < rows; ++r) // zero gradient on padding
      for (std::int64_t c = shape.valid; c < vocab; ++c)
        EXPECT_EQ(got.dLogits[std::size_t(r * vocab + c)], 0.0f);
    EXPECT_NEAR(got.loss, eLoss, 1e-5 * std::abs(eLoss));
    EXPECT_EQ(got.validCount, cpu::countValidTargets(rows, targets.data()));
    EXPECT_LT(relativeError(got.lse, eLse), 1e-6);
    EXPECT_LT(relativeError(got.dLogits, eGrad), 1e-5);
  }
}

TEST(RowKernelsEmulation, HalfCrossEntropyEqualsTheWideningPath) {
  std::mt19937_64 rng(14);
  const float factor = 1024.0f / 3.0f; // loss scale over grad_div
  for (Half h : {Half{{true}}, Half{{false}}})
    for (const LossShape &shape : kLossShapes)
      for (bool grad : {true, false}) {
        SCOPED_TRACE(h.name() + " " + shape.name() +
                     (grad ? "" : " loss only"));
        const std::int64_t rows = shape.rows, vocab = shape.vocab,
                           valid = shape.valid;
        const Bits logits =
            paddedLogits(shape, h.round(kLargeLogit), [&](std::size_t n) {
              return h.random(rng, n, -4, 4);
            });
        const std::vector<std::int32_t> targets = lossTargets(rng, rows, valid);

        // The widening path: fp32 form on widened logits, scaled, narrowed.
        Fp32Loss ref =
            fp32CrossEntropy(rows, vocab, valid, h.widen(logits), targets);
        for (float &g : ref.dLogits)
          g *= factor;

        // halfCrossEntropy, the gradient over the logits in place.
        Bits inPlace = logits;
        Floats term(std::size_t(rows), kNaN);
        int validCount = -1;
        float lossValue = kNaN;
        launchOneBlock(&loss::validTargets, rows, targets.data(), &validCount);
        launchRows<loss::kLseBlockSize>(
            rows, valid, &loss::lossRows<loss::WarpRows, Half16>,
            &loss::lossRows<loss::LseBlockRows, Half16>, h.storage(), rows,
            vocab, valid, static_cast<const std::uint16_t *>(inPlace.data()),
            targets.data(), static_cast<const int *>(&validCount), factor,
            term.data(), grad ? inPlace.data() : nullptr);
        launchOneBlock(&loss::meanLoss<loss::StoredTerm>, rows, targets.data(),
                       loss::StoredTerm{term.data()}, &validCount, &lossValue);
        EXPECT_EQ(validCount, ref.validCount);
        EXPECT_EQ(lossValue, ref.loss); // the same bits
        EXPECT_EQ(inPlace, grad ? h.narrow(ref.dLogits) : logits);
      }
}

/// The vocabulary-parallel phases on one shard (its own max, sums and target
/// logit stand in for the all-reduced ones): fp32 against the CPU, 16-bit
/// against the widening path.
TEST(RowKernelsEmulation, CrossEntropyShardPhases) {
  std::mt19937_64 rng(15);
  const std::int64_t rows = 11, vocabLocal = 160, vocabStart = 150,
                     validColumns = 150; // 10 columns of padding
  const float factor = 8.0f;
  // Targets on both sides of the shard, some ignored.
  const std::vector<std::int32_t> targets =
      lossTargets(rng, rows, vocabStart + validColumns);
  struct Phases {
    Floats max, sumExp, targetLogit, lse;
    float loss = kNaN;
    int validCount = -1;
  };
  auto run = [&](auto s, const auto *logits, auto *dLogits, float scale) {
    using S = decltype(s);
    Phases p;
    p.max.assign(std::size_t(rows), kNaN);
    p.sumExp = p.targetLogit = p.lse = p.max;
    launchRows(rows, validColumns, &loss::shardMax<loss::WarpRows, S>,
               &loss::shardMax<loss::BlockRows, S>, s, rows, vocabLocal,
               validColumns, logits, p.max.data());
    launchRows(rows, validColumns, &loss::shardSums<loss::WarpRows, S>,
               &loss::shardSums<loss::BlockRows, S>, s, rows, vocabLocal,
               vocabStart, validColumns, logits, targets.data(),
               static_cast<const float *>(p.max.data()), p.sumExp.data(),
               p.targetLogit.data());
    emulation::launchSerial(
        rows, &loss::shardLse, rows, static_cast<const float *>(p.max.data()),
        static_cast<const float *>(p.sumExp.data()), p.lse.data());
    launchOneBlock(&loss::meanLoss<loss::TargetLogitTerm>, rows, targets.data(),
                   loss::TargetLogitTerm{p.lse.data(), p.targetLogit.data()},
                   &p.validCount, &p.loss);
    emulation::launchSerial(
        rows * vocabLocal, &loss::logitGrad<S>, s, rows, vocabLocal, vocabStart,
        validColumns, logits, targets.data(),
        static_cast<const float *>(p.lse.data()),
        static_cast<const int *>(&p.validCount), scale, dLogits);
    return p;
  };

  Floats logits = randomFloats(rng, std::size_t(rows * vocabLocal), -4, 4);
  Floats dLogits(logits.size(), kNaN);
  Phases got = run(F32(), logits.data(), dLogits.data(), 1.0f);
  Floats eMax(static_cast<std::size_t>(rows)),
      eSum(static_cast<std::size_t>(rows)),
      eTarget(static_cast<std::size_t>(rows)), eGrad(logits.size());
  cpu::crossEntropyShardMax(rows, vocabLocal, logits.data(), eMax.data(),
                            validColumns);
  cpu::crossEntropyShardSums(rows, vocabLocal, vocabStart, logits.data(),
                             targets.data(), eMax.data(), eSum.data(),
                             eTarget.data(), validColumns);
  float eLoss = cpu::crossEntropyShardFinish(
      rows, vocabLocal, vocabStart, logits.data(), targets.data(), eMax.data(),
      eSum.data(), eTarget.data(), eGrad.data(), validColumns);
  EXPECT_EQ(got.max, eMax);
  EXPECT_LT(relativeError(got.sumExp, eSum), 1e-6);
  EXPECT_EQ(got.targetLogit, eTarget);
  EXPECT_NEAR(got.loss, eLoss, 1e-5 * std::abs(eLoss));
  EXPECT_LT(relativeError(dLogits, eGrad), 1e-5);

  for (Half h : {Half{{true}}, Half{{false}}}) {
    SCOPED_TRACE(h.name());
    const Bits bits = h.random(rng, std::size_t(rows * vocabLocal), -4, 4);
    const Floats wide = h.widen(bits);
    Floats fGrad(wide.size(), kNaN);
    Phases ref = run(F32(), wide.data(), fGrad.data(), 1.0f);
    for (float &g : fGrad)
      g *= factor;
    Bits inPlace = bits;
    Phases half =
        run(h.storage(), static_cast<const std::uint16_t *>(inPlace.data()),
            inPlace.data(), factor);
    EXPECT_EQ(half.max, ref.max);
    EXPECT_EQ(half.sumExp, ref.sumExp);
    EXPECT_EQ(half.targetLogit, ref.targetLogit);
    EXPECT_EQ(half.loss, ref.loss);
    EXPECT_EQ(inPlace, h.narrow(fGrad));
  }
}

//===--- Embedding lookup -------------------------------------------------===//

TEST(RowKernelsEmulation, HalfEmbeddingForwardEqualsTheWideningPath) {
  std::mt19937_64 rng(16);
  const std::int64_t batch = 3, seq = 7, hidden = 24, vocab = 50;
  const std::int64_t n = batch * seq * hidden;
  const std::vector<std::int32_t> ids =
      test::randomIds(rng, std::size_t(batch * seq), std::int32_t(vocab));
  for (Half h : {Half{{true}}, Half{{false}}})
    for (bool positions : {true, false}) {
      SCOPED_TRACE(h.name() + (positions ? " with positions" : ""));
      const Bits wte = h.random(rng, std::size_t(vocab * hidden), -1, 1),
                 wpe = h.random(rng, std::size_t(seq * hidden), -1, 1);
      Bits out(std::size_t(n), 0xffff);
      emulation::launchSerial(n, &gpu::half::embeddingForward, h.storage(), n,
                              seq, hidden, ids.data(), wte.data(),
                              positions ? wpe.data() : nullptr, out.data());
      const Floats wWte = h.widen(wte), wWpe = h.widen(wpe);
      Floats expected(static_cast<std::size_t>(n));
      cpu::embeddingForward(batch, seq, hidden, ids.data(), wWte.data(),
                            positions ? wWpe.data() : nullptr,
                            static_cast<const float *>(nullptr), 0,
                            expected.data());
      EXPECT_EQ(out, h.narrow(expected));
    }
}

/// halfVocabEmbeddingBackward as HalfElementwise.cu launches it, the counts
/// zeroed on the host: sortChunks, then tokenRows into dTable (`rows` rows
/// from id `firstId`). The sorted keys and counts stay in `scratch`.
gpu::embedding::Scratch
sortedRowsBackward(Half h, std::int64_t tokens, std::int64_t rows,
                   std::int64_t firstId, std::int64_t hidden,
                   const std::vector<std::int32_t> &ids, const Bits &dOut,
                   Bits &dTable, std::vector<std::int32_t> &scratch) {
  namespace emb = gpu::embedding;
  scratch.assign(std::size_t(emb::scratchInts(rows, tokens)), -7);
  emb::Scratch layout = emb::scratchLayout(scratch.data(), tokens);
  std::fill(layout.counts, layout.counts + rows, 0);
  emulation::launch(unsigned(emb::chunks(tokens)), emb::kChunk,
                    &emb::sortChunks, tokens, rows, firstId, ids.data(),
                    layout.sorted, layout.counts);
  emulation::launch(emb::tokenRowBlocks(rows, hidden), 256,
                    &emb::tokenRows<gpu::storage::Half16>, h.storage(), tokens,
                    rows, hidden,
                    static_cast<const std::int32_t *>(layout.counts),
                    static_cast<const std::uint64_t *>(layout.sorted),
                    dOut.data(), dTable.data());
  return layout;
}

TEST(RowKernelsEmulation, HalfEmbeddingBackwardEqualsTheCpuKernel) {
  // Chunks of 1024 tokens: 33873 tokens take 34, more than a warp's lanes
  // search at once, with ids repeated within and across chunks (a
  // vocabulary of 37: ~970 each; one id used only once, one never, one out
  // of range and skipped); 264 columns take two column blocks of a warp.
  std::mt19937_64 rng(18);
  const std::int64_t batch = 7, seq = 4839, hidden = 264, vocab = 37;
  const std::int64_t tokens = batch * seq;
  std::vector<std::int32_t> ids =
      test::randomIds(rng, std::size_t(tokens), std::int32_t(vocab - 2));
  ids[5] = std::int32_t(vocab - 1); // the only token of the last id
  ids[15000] = std::int32_t(vocab); // out of range: adds nothing
  namespace emb = gpu::embedding;
  std::vector<std::int32_t> scratch;
  for (Half h : {Half{{true}}, Half{{false}}})
    for (bool positions : {true, false}) {
      SCOPED_TRACE(h.name() + (positions ? " with positions" : ""));
      // Magnitudes over 2^-12 .. 2^8, so that fp32 sums round and their
      // order shows in the bits (of values within [-1, 1] they are exact).
      Bits dOut = h.random(rng, std::size_t(tokens * hidden), -1, 1);
      std::uniform_int_distribution<int> exponent(-12, 8);
      for (std::uint16_t &bits : dOut)
        bits = h.round(std::ldexp(h.widen(bits), exponent(rng)));
      // At position 3 the first two sequences cancel (+-2^14) and the rest
      // is tiny: in batch order the tiny part survives, in another not.
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t c = 0; c < hidden; ++c) {
          std::uint16_t &bits = dOut[std::size_t((b * seq + 3) * hidden + c)];
          bits = h.round(b == 0   ? 16384.f
                         : b == 1 ? -16384.f
                                  : std::ldexp(h.widen(bits), -12));
        }
      // Accumulates into gradients that are not zero.
      Bits dWte = h.random(rng, std::size_t(vocab * hidden), -1, 1),
           dWpe = h.random(rng, std::size_t(seq * hidden), -1, 1);
      for (std::int64_t c = 0; c < hidden; ++c) {
        std::uint16_t &bits = dWpe[std::size_t(3 * hidden + c)];
        bits = h.round(std::ldexp(h.widen(bits), -12));
      }
      Floats wWte = h.widen(dWte), wWpe = h.widen(dWpe);
      const Bits dWpeBefore = dWpe;
      const auto [sorted, counts] = sortedRowsBackward(
          h, tokens, vocab, 0, hidden, ids, dOut, dWte, scratch);
      // Each chunk sorted by (id, token), out-of-range and padding last; the
      // counts those of the ids.
      std::vector<std::int32_t> expectedCounts(std::size_t(vocab), 0);
      for (std::int32_t id : ids)
        if (id < vocab)
          ++expectedCounts[std::size_t(id)];
      ASSERT_EQ(std::vector<std::int32_t>(counts, counts + vocab),
                expectedCounts);
      for (std::int64_t c = 0; c < emb::chunks(tokens); ++c) {
        std::vector<std::uint64_t> expected;
        for (std::int64_t t = c * emb::kChunk; t < (c + 1) * emb::kChunk; ++t)
          expected.push_back(t < tokens && ids[std::size_t(t)] < vocab
                                 ? std::uint64_t(ids[std::size_t(t)]) << 32 |
                                       std::uint64_t(t)
                                 : emb::kNoToken);
        std::sort(expected.begin(), expected.end());
        ASSERT_EQ(std::vector<std::uint64_t>(sorted + c * emb::kChunk,
                                             sorted + (c + 1) * emb::kChunk),
                  expected)
            << "chunk " << c;
      }
      if (positions)
        emulation::launchSerial(
            seq * hidden, &emb::positionRows<gpu::storage::Half16>, h.storage(),
            batch, seq, hidden, dOut.data(), dWpe.data());
      // The CPU kernel on the widened operands, token by token in order,
      // narrowed: bit for bit. (It has no bounds check: the out-of-range
      // token's row goes to a scratch table.)
      const Floats wOut = h.widen(dOut);
      Floats ignored(static_cast<std::size_t>(hidden));
      for (std::int64_t t = 0; t < tokens; ++t) {
        bool inRange = ids[std::size_t(t)] < vocab;
        std::int32_t id = inRange ? ids[std::size_t(t)] : 0;
        cpu::embeddingBackward(std::int64_t(1), std::int64_t(1), hidden, &id,
                               wOut.data() + t * hidden, t % seq,
                               inRange ? wWte.data() : ignored.data(),
                               positions ? wWpe.data() : nullptr,
                               static_cast<float *>(nullptr));
      }
      EXPECT_EQ(dWte, h.narrow(wWte));
      EXPECT_EQ(dWpe, positions ? h.narrow(wWpe) : dWpeBefore);
    }
}

TEST(RowKernelsEmulation, HalfTensorParallelEmbeddingsEqualTheCpuKernels) {
  // A vocabulary shard [10, 25) of 40 ids: the lookup (zeros for the tokens
  // it does not own) and its backward (the sorted, atomics-free one over the
  // shard's rows), the position rows added after the reduced lookup, and
  // their backward; against the CPU kernels on the widened operands.
  std::mt19937_64 rng(20);
  const std::int64_t batch = 3, seq = 700, hidden = 40, vocab = 40, start = 10,
                     rows = 15, tokens = batch * seq, n = tokens * hidden;
  const std::vector<std::int32_t> ids =
      test::randomIds(rng, std::size_t(tokens), std::int32_t(vocab));
  namespace emb = gpu::embedding;
  for (Half h : {Half{{true}}, Half{{false}}}) {
    SCOPED_TRACE(h.name());
    const Bits table = h.random(rng, std::size_t(rows * hidden), -1, 1),
               x = h.random(rng, std::size_t(n), -1, 1),
               wpe = h.random(rng, std::size_t(seq * hidden), -1, 1);
    Bits dOut = h.random(rng, std::size_t(n), -1, 1);
    std::uniform_int_distribution<int> exponent(-12, 8); // sums that round
    for (std::uint16_t &bits : dOut)
      bits = h.round(std::ldexp(h.widen(bits), exponent(rng)));
    // Forwards.
    Bits out(std::size_t(n), 0xffff), sum(std::size_t(n), 0xffff);
    emulation::launchSerial(n, &gpu::half::vocabEmbeddingForward, h.storage(),
                            n, hidden, start, rows, ids.data(), table.data(),
                            out.data());
    emulation::launchSerial(n, &gpu::half::positionEmbeddingForward,
                            h.storage(), n, seq, hidden, x.data(), wpe.data(),
                            sum.data());
    Floats wOut(static_cast<std::size_t>(n)), wSum(static_cast<std::size_t>(n));
    const Floats wTable = h.widen(table), wX = h.widen(x), wWpe = h.widen(wpe);
    cpu::vocabEmbeddingForward(batch, seq, hidden, start, rows, ids.data(),
                               wTable.data(), wOut.data());
    cpu::positionEmbeddingForward(batch, seq, hidden, std::int64_t(0),
                                  wX.data(), wWpe.data(), wSum.data());
    EXPECT_EQ(out, h.narrow(wOut));
    EXPECT_EQ(sum, h.narrow(wSum));
    // Backwards, accumulating into gradients that are not zero.
    Bits dTable = h.random(rng, std::size_t(rows * hidden), -1, 1),
         dWpe = h.random(rng, std::size_t(seq * hidden), -1, 1);
    Floats wDTable = h.widen(dTable), wDWpe = h.widen(dWpe);
    std::vector<std::int32_t> scratch;
    sortedRowsBackward(h, tokens, rows, start, hidden, ids, dOut, dTable,
                       scratch);
    emulation::launchSerial(
        seq * hidden, &emb::positionRows<gpu::storage::Half16>, h.storage(),
        batch, seq, hidden, dOut.data(), dWpe.data());
    const Floats wDOut = h.widen(dOut);
    cpu::vocabEmbeddingBackward(batch, seq, hidden, start, rows, ids.data(),
                                wDOut.data(), wDTable.data());
    cpu::positionEmbeddingBackward(batch, seq, hidden, std::int64_t(0),
                                   wDOut.data(), wDWpe.data());
    EXPECT_EQ(dTable, h.narrow(wDTable));
    EXPECT_EQ(dWpe, h.narrow(wDWpe));
  }
}

TEST(RowKernelsEmulation, HalfRotaryEqualsTheWideningPath) {
  std::mt19937_64 rng(17);
  const std::int64_t batch = 2, seq = 5, heads = 3, headDim = 16;
  const std::int64_t n = batch * seq * heads * headDim, pairs = n / 2;
  for (Half h : {Half{{true}}, Half{{false}}})
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(h.name() + (inverse ? " backward" : " forward"));
      const Bits x = h.random(rng, std::size_t(n), -2, 2);
      Bits inPlace = x; // y over x, as the plans run it
      emulation::launchSerial(
          pairs, &gpu::half::rotary, h.storage(), pairs, seq, heads, headDim,
          std::int64_t(0), 10000.0f, inverse,
          static_cast<const std::uint16_t *>(inPlace.data()), inPlace.data());
      const Floats wide = h.widen(x);
      Floats expected(static_cast<std::size_t>(n));
      if (inverse)
        cpu::rotaryBackward(batch, seq, heads, headDim, 0, 10000.0f,
                            wide.data(), expected.data());
      else
        cpu::rotaryForward(batch, seq, heads, headDim, 0, 10000.0f, wide.data(),
                           expected.data());
      EXPECT_EQ(inPlace, h.narrow(expected));
    }
}

} // namespace
