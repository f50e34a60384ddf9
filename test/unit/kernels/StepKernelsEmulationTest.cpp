//===- StepKernelsEmulationTest.cpp - The optimizer step on the CPU -------===//
//
// The CUDA backend's optimizer-phase kernels (runtime/exec/cuda/lib/
// StepKernels.cuh) under the warp emulator: the sum of squares (block
// partials, then one block adding them) against the CPU's, and the one-pass
// AdamW with its launch geometry (256-thread blocks, a partial last block),
// and with fewer blocks than that (threads stride over the elements),
// which, given the gradients' sum of squares, must clip
// and skip exactly as the CPU backend does (kernels::clippedGradScale once,
// then adamwElement per element), bit for bit, on fp32, bf16 and f16
// gradients, with and without the 16-bit weight copy.
//
//===----------------------------------------------------------------------===//

#include <cuda_runtime.h>

#include "weft/kernels/Common.h"
#include "weft/kernels/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "WarpEmulation.h"

#include "../../../runtime/exec/cuda/lib/StepKernels.cuh"

namespace {

using namespace weft::kernels;
using weft::exec::cuda::FloatStorage;
namespace steps = weft::exec::cuda::steps;

struct State {
  std::vector<float> param, m, v;
  std::vector<std::uint16_t> low;
};

/// The CPU backend's optimizer_step that reads the sum of squares.
State onCpu(const AdamWStep &step, const std::vector<float> &grad, float sumSq,
            State s, FloatStorage lowStorage) {
  AdamWStep scaled = step;
  if (!clippedGradScale(step, sumSq, scaled.gradScale))
    return s;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    adamwElement(scaled, grad[i], s.param[i], s.m[i], s.v[i]);
    if (lowStorage == FloatStorage::BF16)
      s.low[i] = floatToBf16(s.param[i]).bits;
    else if (lowStorage == FloatStorage::F16)
      s.low[i] = floatToF16(s.param[i]).bits;
  }
  return s;
}

TEST(StepKernelsEmulation, AdamWClipsAndSkipsFromTheSumOfSquares) {
  const std::int64_t n = 1000; // four blocks, the last one partial
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2, 2);
  State start;
  std::vector<float> wide(n);
  for (std::int64_t i = 0; i < n; ++i) {
    start.param.push_back(dist(rng));
    start.m.push_back(0.1f * dist(rng));
    start.v.push_back(std::abs(0.1f * dist(rng)));
    wide[std::size_t(i)] = dist(rng) * 64; // scaled by a loss scale of 64
  }
  start.low.assign(std::size_t(n), 0xffff);
  AdamWStep step = makeAdamWStep({1e-2, 0.9, 0.95, 1e-8, 0.1}, 3, 1.0 / 64);
  step.lossScale = 64;
  step.maxNorm = 1.0;
  step.skipNonFinite = true;
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char *what;
    float sumSq;
    bool clipped, skipped;
  };
  // The true norms: sqrt(sum) / 64 = 2 (clipped to 1), 0.5 (not clipped);
  // an overflow skips the update.
  const Case cases[] = {{"clipped", 4.0f * 64 * 64, true, false},
                        {"under the limit", 0.25f * 64 * 64, false, false},
                        {"overflowed", inf, false, true},
                        {"not a number", std::nanf(""), false, true}};
  for (FloatStorage gradStorage :
       {FloatStorage::F32, FloatStorage::BF16, FloatStorage::F16})
    for (FloatStorage lowStorage : {FloatStorage::F32, FloatStorage::BF16})
      for (const Case &c : cases) {
        SCOPED_TRACE(std::string(c.what) + " grad storage " +
                     std::to_string(int(gradStorage)) + " low storage " +
                     std::to_string(int(lowStorage)));
        // The gradient as stored, and the fp32 values the kernel reads.
        std::vector<float> grad(wide);
        std::vector<std::uint16_t> grad16(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < grad.size(); ++i) {
          if (gradStorage == FloatStorage::BF16) {
            grad16[i] = floatToBf16(wide[i]).bits;
            grad[i] = bf16ToFloat(BF16{grad16[i]});
          } else if (gradStorage == FloatStorage::F16) {
            grad16[i] = floatToF16(wide[i]).bits;
            grad[i] = f16ToFloat(F16{grad16[i]});
          }
        }
        const void *gradData = gradStorage == FloatStorage::F32
                                   ? static_cast<const void *>(wide.data())
                                   : grad16.data();
        bool withLow = lowStorage == FloatStorage::BF16;
        State want = onCpu(step, grad, c.sumSq, start,
                           withLow ? lowStorage : FloatStorage::F32);
        // One thread per element, and fewer blocks than that (the
        // launcher caps the grid at kAdamWBlocks: threads stride).
        const unsigned perElement =
            unsigned((n + steps::kBlock - 1) / steps::kBlock);
        State got;
        for (unsigned blocks : {perElement, 2u}) {
          SCOPED_TRACE(std::to_string(blocks) + " blocks");
          State run = start;
          float sumSq = c.sumSq;
          emulation::launch(blocks, unsigned(steps::kBlock), steps::adamwKernel,
                            &step, n, gradData, gradStorage, run.param.data(),
                            run.m.data(), run.v.data(),
                            withLow ? static_cast<void *>(run.low.data())
                                    : nullptr,
                            lowStorage, static_cast<const float *>(&sumSq));
          EXPECT_EQ(run.param, want.param);
          EXPECT_EQ(run.m, want.m);
          EXPECT_EQ(run.v, want.v);
          EXPECT_EQ(run.low, want.low);
          if (blocks == perElement)
            got = run;
        }
        EXPECT_EQ(got.param == start.param, c.skipped);
        if (!c.skipped) {
          // The first moment after one update from zero-ish state is
          // driven by the scaled gradient: clipped halves it.
          double scale = c.clipped ? 0.5 / 64 : 1.0 / 64;
          float m0 = float(0.9) * start.m[0] +
                     float(1 - 0.9) * (grad[0] * float(scale));
          EXPECT_FLOAT_EQ(got.m[0], m0);
        }
      }
  // Without the sum the step scale is the loss scale's alone.
  State got = start, want = start;
  emulation::launch(unsigned((n + steps::kBlock - 1) / steps::kBlock),
                    unsigned(steps::kBlock), steps::adamwKernel, &step, n,
                    static_cast<const void *>(wide.data()), FloatStorage::F32,
                    got.param.data(), got.m.data(), got.v.data(),
                    static_cast<void *>(nullptr), FloatStorage::F32,
                    static_cast<const float *>(nullptr));
  for (std::size_t i = 0; i < wide.size(); ++i)
    adamwElement(step, wide[i], want.param[i], want.m[i], want.v[i]);
  EXPECT_EQ(got.param, want.param);
}

TEST(StepKernelsEmulation, SumOfSquaresAddsBlockPartialsInAFixedOrder) {
  // grad_norm on the device: blocks striding over x write their partial sums
  // (no atomics), one block adds them to the accumulator. Against the CPU's
  // double sum, for fp32 and bf16 storage, over a grid that strides (3
  // blocks for 5000 elements) and one that does not; and it accumulates
  // (two operands of one grad_norm add into the same sum).
  const std::int64_t n = 5000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3, 3);
  std::vector<float> x(n);
  std::vector<std::uint16_t> x16(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x16[std::size_t(i)] = floatToBf16(dist(rng)).bits;
    x[std::size_t(i)] = bf16ToFloat(BF16{x16[std::size_t(i)]});
  }
  double want = 0;
  for (float v : x)
    want += double(v) * double(v);
  for (FloatStorage storage : {FloatStorage::F32, FloatStorage::BF16})
    for (unsigned blocks :
         {3u, unsigned((n + steps::kBlock - 1) / steps::kBlock)}) {
      SCOPED_TRACE("storage " + std::to_string(int(storage)) + ", " +
                   std::to_string(blocks) + " blocks");
      const void *data = storage == FloatStorage::F32
                             ? static_cast<const void *>(x.data())
                             : x16.data();
      std::vector<double> partials(blocks, -1.0);
      double acc = 0;
      for (int pass = 0; pass < 2; ++pass) {
        emulation::launch(blocks, unsigned(steps::kBlock),
                          steps::sumSquaresKernel, n, data, storage,
                          partials.data());
        emulation::launch(1u, unsigned(steps::kBlock), steps::addPartialsKernel,
                          int(blocks),
                          static_cast<const double *>(partials.data()), &acc);
      }
      EXPECT_NEAR(acc, 2 * want, 1e-12 * want);
    }
}

} // namespace
