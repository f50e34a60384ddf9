//===- WarpEmulationTest.cpp - Tensor-core kernels, emulated --------------===//
//
// The tensor-core attention kernels (runtime/kernels/cuda/AttentionMma.cuh)
// and the 16-bit element-wise kernels compiled as plain C++ and run on the
// CPU under WarpEmulation.h, so that their index arithmetic (fragment
// layouts, tiles, masks, staging, the online softmax) is checked on every
// machine, not only where a GPU is lent. CudaKernelsTest.AttentionOnTensorCores
// runs the same kernels on a GPU.
//
//===----------------------------------------------------------------------===//

#include <cuda_runtime.h> // uint4, make_uint4

#include "KernelTestUtil.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "WarpEmulation.h"

#include "../../../runtime/kernels/cuda/AttentionMma.cuh"
#include "../../../runtime/kernels/cuda/AttentionTiled.cuh"
#include "../../../runtime/kernels/cuda/HalfElementwise.cuh"

namespace {

using namespace weft::kernels;
using weft::kernels::test::relativeError;
namespace mma = weft::kernels::gpu::mma;

struct Shape {
  int64_t batch, seq, heads, kvHeads, headDim;
  bool causal;
  bool vector; // 16-byte staging (aligned operands) or element by element
};

template <typename E, int D> void runShape(const Shape &shape) {
  constexpr bool kBf16 = std::is_same_v<E, __nv_bfloat16>;
  SCOPED_TRACE(std::string(kBf16 ? "bf16" : "f16") + " head dim " +
               std::to_string(D) + " seq " + std::to_string(shape.seq) +
               (shape.causal ? " causal" : " bidirectional") +
               (shape.vector ? " vector" : " scalar"));
  AttentionDims d = test::scaledAttentionDims(
      shape.batch, shape.seq, shape.heads, shape.kvHeads, D, shape.causal);
  const std::size_t nq = std::size_t(d.batch * d.seq * d.heads * D),
                    nkv = std::size_t(d.batch * d.seq * d.kvHeads * D),
                    ns = std::size_t(d.batch * d.heads * d.seq);
  std::mt19937_64 rng(std::uint64_t(shape.seq * 131 + D));
  // 16-bit storage as raw bits; `values` holds what they round to.
  auto make = [&](std::size_t n, double lo, double hi,
                  std::vector<float> &values) {
    std::vector<double> random = test::randomVector(rng, n, lo, hi);
    std::vector<std::uint16_t> bits(n);
    values.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      bits[i] = kBf16 ? floatToBf16(float(random[i])).bits
                      : floatToF16(float(random[i])).bits;
      values[i] = halfBits<E>(bits[i]);
    }
    return bits;
  };
  std::vector<float> q, k, v, dOut;
  const std::vector<std::uint16_t> qBits = make(nq, -2, 2, q),
                                   kBits = make(nkv, -2, 2, k),
                                   vBits = make(nkv, -1, 1, v),
                                   dOutBits = make(nq, -1, 1, dOut);
  auto in = [](const std::vector<std::uint16_t> &bits) {
    return reinterpret_cast<const E *>(bits.data());
  };
  auto at = [](std::vector<std::uint16_t> &bits) {
    return reinterpret_cast<E *>(bits.data());
  };
  auto widen = [](const std::vector<std::uint16_t> &bits) {
    std::vector<float> values;
    for (std::uint16_t b : bits)
      values.push_back(halfBits<E>(b));
    return values;
  };
  const test::AttentionReference e = test::cpuAttention(d, q, k, v, dOut);
  // The kernels round P, dS and their outputs to storage (bf16 2^-9, f16
  // 2^-11 relative): measured 2.0-2.8e-3 (bf16) and 2.1-3.8e-4 (f16).
  const double tolerance = kBf16 ? 5e-3 : 1e-3;
  const unsigned tiles =
      unsigned((d.seq + mma::kBlockRows - 1) / mma::kBlockRows);
  // The cp.async copies at their wait with the warps in step, then at their
  // issue with each warp run ahead: a missing wait fails the first, a
  // missing barrier before a buffer's refill the second.
  std::vector<std::uint16_t> first[4];
  const bool greedyDefault = emulation::warpGreedy;
  for (bool eager : {false, true}) {
    SCOPED_TRACE(eager ? "copies at issue, warps run ahead"
                       : "copies at their wait, warps in step");
    emulation::eagerCopies = eager;
    emulation::warpGreedy = eager || greedyDefault;
    // NaN-filled outputs: an element a kernel forgets to write fails.
    std::vector<std::uint16_t> out(nq, 0xffff), dq(nq, 0xffff), dk(nkv, 0xffff),
        dv(nkv, 0xffff);
    std::vector<float> lse(ns, NAN), delta(ns, NAN);
    emulation::launch(unsigned(d.batch * d.heads) * tiles, mma::kThreads,
                      mma::mmaForward<E, D>, d, in(qBits), in(kBits), in(vBits),
                      at(out), lse.data(), shape.vector);
    emulation::launch(unsigned(d.batch * d.heads) * tiles, mma::kThreads,
                      mma::mmaQueryBackward<E, D>, d, in(qBits), in(kBits),
                      in(vBits), in(out),
                      static_cast<const float *>(lse.data()), in(dOutBits),
                      at(dq), delta.data(), shape.vector);
    emulation::launch(unsigned(d.batch * d.kvHeads) * tiles, mma::kThreads,
                      mma::mmaKeyBackward<E, D>, d, in(qBits), in(kBits),
                      in(vBits), static_cast<const float *>(lse.data()),
                      static_cast<const float *>(delta.data()), in(dOutBits),
                      at(dk), at(dv), shape.vector);
    emulation::eagerCopies = false;
    emulation::warpGreedy = greedyDefault;
    EXPECT_LT(relativeError(widen(out), e.out), tolerance);
    EXPECT_LT(relativeError(lse, e.lse), 1e-5);
    EXPECT_LT(relativeError(widen(dq), e.dq), tolerance);
    EXPECT_LT(relativeError(widen(dk), e.dk), tolerance);
    EXPECT_LT(relativeError(widen(dv), e.dv), tolerance);
    // The same bits either way: when a copy lands changes nothing.
    if (!eager) {
      first[0] = out, first[1] = dq, first[2] = dk, first[3] = dv;
    } else {
      EXPECT_EQ(out, first[0]);
      EXPECT_EQ(dq, first[1]);
      EXPECT_EQ(dk, first[2]);
      EXPECT_EQ(dv, first[3]);
    }
  }
}

// Sequences that end inside a 64-row tile and span several (seq 200 and 256:
// causal tiles the warps see whole, which skip the mask), GQA groups of 1-3
// heads, both masks, both staging paths, every head dim and both types.
TEST(WarpEmulation, TensorCoreAttentionMatchesTheCpuKernels) {
  runShape<__nv_bfloat16, 64>({1, 130, 2, 1, 64, true, true});
  runShape<__nv_bfloat16, 64>({1, 100, 2, 2, 64, false, false});
  runShape<__half, 16>({2, 33, 4, 2, 16, true, true});
  runShape<__nv_bfloat16, 32>({1, 97, 3, 1, 32, false, true});
  runShape<__half, 128>({1, 70, 2, 2, 128, true, false});
  runShape<__nv_bfloat16, 128>({1, 40, 1, 1, 128, false, true});
  runShape<__nv_bfloat16, 64>({1, 256, 2, 1, 64, true, true});
  runShape<__half, 32>({1, 200, 2, 2, 32, true, false});
}

/// The fp32 tiled kernels (Attention.cu's path for head dims 16-128, on the
/// widened rows of 16-bit models too) against the fp32 CPU kernels. Each
/// row is split over Tiling<D>::kLanes threads that sum their products by
/// shuffles, so every lane of a warp must reach each shuffle: the emulator
/// deadlocks where a row's lanes, or a warp's rows, part ways before one.
template <int D> void runTiledShape(const Shape &shape) {
  namespace tiled = weft::kernels::gpu::tiled;
  using Tiling = tiled::Tiling<D>;
  SCOPED_TRACE("fp32 head dim " + std::to_string(D) + " seq " +
               std::to_string(shape.seq) + " heads " +
               std::to_string(shape.heads) + "/" +
               std::to_string(shape.kvHeads) +
               (shape.causal ? " causal" : " bidirectional"));
  AttentionDims d = test::scaledAttentionDims(
      shape.batch, shape.seq, shape.heads, shape.kvHeads, D, shape.causal);
  const std::size_t nq = std::size_t(d.batch * d.seq * d.heads * D),
                    nkv = std::size_t(d.batch * d.seq * d.kvHeads * D),
                    ns = std::size_t(d.batch * d.heads * d.seq);
  std::mt19937_64 rng(std::uint64_t(shape.seq * 977 + D));
  auto make = [&](std::size_t n, double lo, double hi) {
    std::vector<double> random = test::randomVector(rng, n, lo, hi);
    return std::vector<float>(random.begin(), random.end());
  };
  const std::vector<float> q = make(nq, -2, 2), k = make(nkv, -2, 2),
                           v = make(nkv, -1, 1), dOut = make(nq, -1, 1);
  const test::AttentionReference e = test::cpuAttention(d, q, k, v, dOut);
  // NaN-filled outputs: an element a kernel forgets to write fails.
  std::vector<float> out(nq, NAN), dq(nq, NAN), dk(nkv, NAN), dv(nkv, NAN),
      lse(ns, NAN), delta(ns, NAN);
  auto blocks = [&](std::int64_t heads) {
    return unsigned(d.batch * heads *
                    ((d.seq + Tiling::kRows - 1) / Tiling::kRows));
  };
  emulation::launch(blocks(d.heads), Tiling::kThreads, tiled::tiledForward<D>,
                    d, q.data(), k.data(), v.data(), out.data(), lse.data());
  emulation::launch(blocks(d.heads), Tiling::kThreads,
                    tiled::tiledQueryBackward<D>, d, q.data(), k.data(),
                    v.data(), static_cast<const float *>(out.data()),
                    static_cast<const float *>(lse.data()), dOut.data(),
                    dq.data(), delta.data());
  emulation::launch(
      blocks(d.kvHeads), Tiling::kThreads, tiled::tiledKeyBackward<D, false>, d,
      q.data(), k.data(), v.data(), static_cast<const float *>(lse.data()),
      static_cast<const float *>(delta.data()), dOut.data(), dv.data());
  emulation::launch(
      blocks(d.kvHeads), Tiling::kThreads, tiled::tiledKeyBackward<D, true>, d,
      q.data(), k.data(), v.data(), static_cast<const float *>(lse.data()),
      static_cast<const float *>(delta.data()), dOut.data(), dk.data());
  // Both sides fp32, summed in other orders (CudaKernelsTest's tolerance).
  constexpr double kTolerance = 1e-5;
  EXPECT_LT(relativeError(out, e.out), kTolerance);
  EXPECT_LT(relativeError(lse, e.lse), kTolerance);
  EXPECT_LT(relativeError(dq, e.dq), kTolerance);
  EXPECT_LT(relativeError(dk, e.dk), kTolerance);
  EXPECT_LT(relativeError(dv, e.dv), kTolerance);
}

// Every head dim, both masks, GQA groups of 1-3 heads, sequences that end
// inside a 64-row block and in the middle of a warp's rows (70: a block
// whose second warp at head dim 128 holds rows 64-71, six of them past the
// end), and several key tiles.
TEST(WarpEmulation, TiledFp32AttentionMatchesTheCpuKernels) {
  runTiledShape<16>({2, 33, 4, 2, 16, true, false});
  runTiledShape<32>({1, 97, 3, 1, 32, false, false});
  runTiledShape<32>({1, 97, 3, 1, 32, true, false});
  runTiledShape<64>({1, 150, 4, 2, 64, true, false});
  runTiledShape<64>({1, 100, 2, 2, 64, false, false});
  runTiledShape<128>({1, 70, 2, 2, 128, true, false});
  runTiledShape<128>({1, 45, 3, 1, 128, false, false});
}

} // namespace

namespace {

/// The 16-bit element-wise kernels against the widening path on the CPU:
/// widen, the fp32 CPU kernel, round. Equal bit for bit, on 16-byte aligned
/// operands (the 8-element vector path, with a scalar tail: 3700 elements)
/// and on operands one element off (the scalar path throughout).
TEST(WarpEmulation, HalfElementwiseKernelsEqualTheWideningPath) {
  using weft::kernels::gpu::half::Half16;
  namespace half = weft::kernels::gpu::half;
  std::mt19937_64 rng(7);
  const std::int64_t rows = 37, width = 100;
  auto threads = [](std::int64_t n) {
    return (n + half::kPerThread - 1) / half::kPerThread;
  };
  for (bool bf16 : {true, false})
    for (std::int64_t offset : {0, 1}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f16") +
                   (offset ? " misaligned" : " aligned"));
      const std::int64_t n = rows * width - offset;
      const Half16 h{bf16};
      const test::HalfCodec codec{bf16};
      // The operands start `offset` elements into 16-byte aligned storage.
      const std::size_t storage = std::size_t(rows * width);
      std::vector<std::uint16_t> xs = codec.random(rng, storage, -3, 3),
                                 ys = codec.random(rng, storage, -1, 1);
      const std::uint16_t *x = xs.data() + offset, *y = ys.data() + offset;
      std::vector<float> wx = codec.widen(x, std::size_t(n)),
                         wy = codec.widen(y, std::size_t(n));
      auto result = [&](const std::vector<std::uint16_t> &out) {
        return std::vector<std::uint16_t>(out.begin() + offset, out.end());
      };
      std::vector<float> expected(static_cast<std::size_t>(n));

      if (offset == 0) // bias_add in place, y = x + bias: rows of 100 (runs
        // straddle rows, the bias is rarely aligned) and of 96 (vector path)
        for (std::int64_t biasWidth : {width, std::int64_t(96)}) {
          SCOPED_TRACE("bias width " + std::to_string(biasWidth));
          const std::int64_t biasRows = n / biasWidth, m = biasRows * biasWidth;
          std::vector<std::uint16_t> got = xs,
                                     b = codec.random(
                                         rng, std::size_t(biasWidth), -1, 1);
          emulation::launchSerial(
              threads(m), half::biasAdd, h, m, biasWidth, got.data(),
              static_cast<const std::uint16_t *>(b.data()), got.data());
          std::vector<float> expectedBias =
                                 codec.widen(xs.data(), std::size_t(m)),
                             wb = codec.widen(b);
          cpu::biasAdd(biasRows, biasWidth, wb.data(), expectedBias.data());
          std::vector<std::uint16_t> head(got.begin(), got.begin() + m);
          EXPECT_EQ(head, codec.narrow(expectedBias)) << "bias_add";
        }

      std::vector<std::uint16_t> sum(storage, 0xffff);
      emulation::launchSerial(threads(n), half::residualAdd, h, n, x, y,
                              sum.data() + offset);
      cpu::residualAdd(n, wx.data(), wy.data(), expected.data());
      EXPECT_EQ(result(sum), codec.narrow(expected)) << "residual_add";

      for (Activation act : {Activation::ReLU, Activation::GeluErf,
                             Activation::GeluTanh, Activation::SiLU}) {
        SCOPED_TRACE("activation " + std::to_string(int(act)));
        std::vector<std::uint16_t> a(storage, 0xffff), b(storage, 0xffff);
        emulation::launchSerial(threads(n), half::activationForward, h, act, n,
                                x, a.data() + offset);
        cpu::activationForward(act, n, wx.data(), expected.data());
        EXPECT_EQ(result(a), codec.narrow(expected));
        emulation::launchSerial(threads(n), half::activationBackward, h, act, n,
                                x, y, a.data() + offset);
        cpu::activationBackward(act, n, wx.data(), wy.data(), expected.data());
        EXPECT_EQ(result(a), codec.narrow(expected));
        // In place: dx over dy.
        std::vector<std::uint16_t> inPlace = ys;
        emulation::launchSerial(
            threads(n), half::activationBackward, h, act, n, x,
            static_cast<const std::uint16_t *>(inPlace.data() + offset),
            inPlace.data() + offset);
        EXPECT_EQ(result(inPlace), codec.narrow(expected)) << "in place";
        emulation::launchSerial(threads(n), half::gatedForward, h, act, n, x, y,
                                a.data() + offset);
        cpu::gatedForward(act, n, wx.data(), wy.data(), expected.data());
        EXPECT_EQ(result(a), codec.narrow(expected));
        std::vector<float> expectedUp(static_cast<std::size_t>(n));
        emulation::launchSerial(
            threads(n), half::gatedBackward, h, act, n, x, y,
            static_cast<const std::uint16_t *>(sum.data() + offset),
            a.data() + offset, b.data() + offset);
        std::vector<float> wSum =
            codec.widen(sum.data() + offset, std::size_t(n));
        cpu::gatedBackward(act, n, wx.data(), wy.data(), wSum.data(),
                           expected.data(), expectedUp.data());
        EXPECT_EQ(result(a), codec.narrow(expected));
        EXPECT_EQ(result(b), codec.narrow(expectedUp));
      }
    }
}

} // namespace
