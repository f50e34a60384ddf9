//===- CudaKernelsTest.cpp - CUDA kernels against the CPU kernels ---------===//
//
// Every CUDA launch wrapper runs on random fp32 inputs and must match the CPU
// kernel of the same name to a relative 1e-5 (both evaluate the same row
// functions in fp32; they differ only by FMA contraction, device libm ulps
// and, for atomics and warp or block reductions, summation order). Outputs are
// poisoned with NaN (all-ones bytes) first, so an element a kernel forgets
// to write fails the comparison. Accumulated parameter gradients start from
// the same random values on both sides, which checks the += contract.
// Without a CUDA device every test is skipped with a message.
//
//===----------------------------------------------------------------------===//

#include "weft/kernels/CudaKernels.h"
#include "KernelTestUtil.h"
#include "weft/exec/cuda/CudnnAttention.h"
#include "weft/kernels/CpuKernels.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

using namespace weft::kernels;
using namespace weft::kernels::test;
namespace exec = weft::exec;
using std::vector;

namespace {

constexpr double kTolerance = 1e-5;

/// Owns a device copy of a host vector, or `n` poisoned elements.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(std::size_t n) : size(n) {
    // A failed allocation would fault every test after it (a sticky
    // illegal address): stop here, saying so.
    if (cudaMalloc(reinterpret_cast<void **>(&data), bytes()) != cudaSuccess) {
      std::fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes());
      std::abort();
    }
    EXPECT_EQ(cudaMemset(data, 0xff, bytes()), cudaSuccess);
  }
  explicit DeviceBuffer(const vector<T> &host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(data, host.data(), bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(data); }

  T *get() const { return data; }
  vector<T> toHost() const {
    vector<T> host(size);
    EXPECT_EQ(cudaMemcpy(host.data(), data, bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

private:
  std::size_t bytes() const { return size * sizeof(T); }
  T *data = nullptr;
  std::size_t size;
};

/// Elements of q (out, dOut), of k (v), and of the statistics (lse).
std::tuple<int64_t, int64_t, int64_t> attentionSizes(const AttentionDims &d) {
  return {d.batch * d.seq * d.heads * d.headDim,
          d.batch * d.seq * d.kvHeads * d.headDim, d.batch * d.heads * d.seq};
}

/// One 16-bit attention implementation's operands: q k v dOut in, out lse dq
/// dk dv out, all at `offset` elements into their allocations.
struct HalfAttentionCall {
  gpu::HalfType type;
  const AttentionDims &dims;
  const std::uint16_t *q, *k, *v, *dOut;
  std::uint16_t *out, *dq, *dk, *dv;
  float *lse;
};
struct AttentionShape {
  int64_t batch, seq, heads, kvHeads, headDim;
  int64_t offset; // elements from an aligned allocation
};

class CudaKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    int devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0)
      GTEST_SKIP() << "no CUDA device: GPU kernel comparison skipped ("
                   << (rc != cudaSuccess ? cudaGetErrorName(rc) : "0 devices")
                   << ")";
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream)
      cudaStreamDestroy(stream);
  }
  /// Waits for the stream and reports any asynchronous execution error.
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess); }

  vector<float> random(std::size_t n, double lo = -1, double hi = 1) {
    return convert<float>(randomVector(rng, n, lo, hi));
  }

  // Shared bodies of the tests that run several shapes.
  void runNorms(int64_t rows, int64_t width);
  void runCrossEntropy(int64_t rows, int64_t vocab, int64_t valid = -1);
  void runShardPhases(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                      int64_t valid, std::int32_t vocab);
  void
  checkHalfAttention(gpu::HalfType type, const AttentionShape &shape,
                     bool causal,
                     const std::function<void(const HalfAttentionCall &)> &run);

  cudaStream_t stream = nullptr;
  std::mt19937_64 rng{std::hash<std::string>{}(
      ::testing::UnitTest::GetInstance()->current_test_info()->name())};
};

TEST_F(CudaKernelsTest, ElementwiseAndBias) {
  const int64_t rows = 37, width = 100, n = rows * width;
  vector<float> x = random(n, -3, 3), up = random(n), dy = random(n),
                bias = random(width), dBias = random(width);
  DeviceBuffer<float> dX(x), dUp(up), dDy(dy), dBiasIn(bias);
  for (Activation act : {Activation::ReLU, Activation::GeluErf,
                         Activation::GeluTanh, Activation::SiLU}) {
    SCOPED_TRACE(int(act));
    DeviceBuffer<float> y(n), dx(n), gated(n), dGate(n), dUpOut(n);
    ASSERT_EQ(gpu::activationForward(act, n, dX.get(), y.get(), stream),
              cudaSuccess);
    ASSERT_EQ(
        gpu::activationBackward(act, n, dX.get(), dDy.get(), dx.get(), stream),
        cudaSuccess);
    ASSERT_EQ(
        gpu::gatedForward(act, n, dX.get(), dUp.get(), gated.get(), stream),
        cudaSuccess);
    ASSERT_EQ(gpu::gatedBackward(act, n, dX.get(), dUp.get(), dDy.get(),
                                 dGate.get(), dUpOut.get(), stream),
              cudaSuccess);
    sync();
    vector<float> ey(n), edx(n), eg(n), edg(n), edu(n);
    cpu::activationForward(act, n, x.data(), ey.data());
    cpu::activationBackward(act, n, x.data(), dy.data(), edx.data());
    cpu::gatedForward(act, n, x.data(), up.data(), eg.data());
    cpu::gatedBackward(act, n, x.data(), up.data(), dy.data(), edg.data(),
                       edu.data());
    EXPECT_LT(relativeError(y.toHost(), ey), kTolerance);
    EXPECT_LT(relativeError(dx.toHost(), edx), kTolerance);
    EXPECT_LT(relativeError(gated.toHost(), eg), kTolerance);
    EXPECT_LT(relativeError(dGate.toHost(), edg), kTolerance);
    EXPECT_LT(relativeError(dUpOut.toHost(), edu), kTolerance);
  }

  DeviceBuffer<float> biased(x), sum(n), dBiasOut(dBias);
  ASSERT_EQ(gpu::biasAdd(rows, width, dBiasIn.get(), biased.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::residualAdd(n, dX.get(), dUp.get(), sum.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::biasGrad(rows, width, dDy.get(), dBiasOut.get(), stream),
            cudaSuccess);
  sync();
  vector<float> eBiased = x, eSum(n), eDBias = dBias;
  cpu::biasAdd(rows, width, bias.data(), eBiased.data());
  cpu::residualAdd(n, x.data(), up.data(), eSum.data());
  cpu::biasGrad(rows, width, dy.data(), eDBias.data());
  EXPECT_LT(relativeError(biased.toHost(), eBiased), kTolerance);
  EXPECT_LT(relativeError(sum.toHost(), eSum), kTolerance);
  EXPECT_LT(relativeError(dBiasOut.toHost(), eDBias), kTolerance);

  // A realistic width (not a multiple of the column tile) over many rows.
  const int64_t wideRows = 1000, wideWidth = 1030;
  vector<float> wideDy = random(wideRows * wideWidth),
                wideDBias = random(wideWidth);
  DeviceBuffer<float> dWideDy(wideDy), dWideDBias(wideDBias);
  ASSERT_EQ(gpu::biasGrad(wideRows, wideWidth, dWideDy.get(), dWideDBias.get(),
                          stream),
            cudaSuccess);
  sync();
  cpu::biasGrad(wideRows, wideWidth, wideDy.data(), wideDBias.data());
  EXPECT_LT(relativeError(dWideDBias.toHost(), wideDBias), kTolerance);
}

TEST_F(CudaKernelsTest, LayerNormAndRmsNorm) {
  // Narrow rows, GPT-2's width and one past the warp-per-row limit (1024).
  for (auto [rows, width] :
       {std::pair<int64_t, int64_t>{300, 77}, {1000, 768}, {1000, 1030}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(width));
    runNorms(rows, width);
  }
}

void CudaKernelsTest::runNorms(int64_t rows, int64_t width) {
  const int64_t n = rows * width;
  vector<float> x = random(n, -2, 2), gamma = random(width, 0.5, 1.5),
                beta = random(width), dy = random(n), dGamma0 = random(width),
                dBeta0 = random(width);
  DeviceBuffer<float> dX(x), dG(gamma), dB(beta), dDy(dy);

  DeviceBuffer<float> y(n), mean(rows), rstd(rows), dx(n), dGamma(dGamma0),
      dBeta(dBeta0);
  ASSERT_EQ(gpu::layerNormForward(rows, width, dX.get(), dG.get(), dB.get(),
                                  1e-5f, y.get(), mean.get(), rstd.get(),
                                  stream),
            cudaSuccess);
  ASSERT_EQ(gpu::layerNormBackward(rows, width, dX.get(), dG.get(), mean.get(),
                                   rstd.get(), dDy.get(), dx.get(),
                                   dGamma.get(), dBeta.get(), stream),
            cudaSuccess);
  sync();
  vector<float> ey(n), eMean(rows), eRstd(rows), edx(n), edG = dGamma0,
                                                         edB = dBeta0;
  cpu::layerNormForward(rows, width, x.data(), gamma.data(), beta.data(), 1e-5f,
                        ey.data(), eMean.data(), eRstd.data());
  cpu::layerNormBackward(rows, width, x.data(), gamma.data(), eMean.data(),
                         eRstd.data(), dy.data(), edx.data(), edG.data(),
                         edB.data());
  EXPECT_LT(relativeError(y.toHost(), ey), kTolerance);
  EXPECT_LT(relativeError(mean.toHost(), eMean), kTolerance);
  EXPECT_LT(relativeError(rstd.toHost(), eRstd), kTolerance);
  EXPECT_LT(relativeError(dx.toHost(), edx), kTolerance);
  EXPECT_LT(relativeError(dGamma.toHost(), edG), kTolerance);
  EXPECT_LT(relativeError(dBeta.toHost(), edB), kTolerance);

  DeviceBuffer<float> ry(n), rRstd(rows), rdx(n), rdGamma(dGamma0);
  ASSERT_EQ(gpu::rmsNormForward(rows, width, dX.get(), dG.get(), 1e-6f,
                                ry.get(), rRstd.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::rmsNormBackward(rows, width, dX.get(), dG.get(), rRstd.get(),
                                 dDy.get(), rdx.get(), rdGamma.get(), stream),
            cudaSuccess);
  sync();
  vector<float> ery(n), erRstd(rows), erdx(n), erdG = dGamma0;
  cpu::rmsNormForward(rows, width, x.data(), gamma.data(), 1e-6f, ery.data(),
                      erRstd.data());
  cpu::rmsNormBackward(rows, width, x.data(), gamma.data(), erRstd.data(),
                       dy.data(), erdx.data(), erdG.data());
  EXPECT_LT(relativeError(ry.toHost(), ery), kTolerance);
  EXPECT_LT(relativeError(rRstd.toHost(), erRstd), kTolerance);
  EXPECT_LT(relativeError(rdx.toHost(), erdx), kTolerance);
  EXPECT_LT(relativeError(rdGamma.toHost(), erdG), kTolerance);
}

TEST_F(CudaKernelsTest, EmbeddingAndRotary) {
  const int64_t batch = 3, seq = 19, hidden = 48, vocab = 10, offset = 5;
  const int64_t tokens = batch * seq;
  vector<std::int32_t> ids = randomIds(rng, tokens, vocab);
  vector<float> wte = random(vocab * hidden),
                wpe = random((seq + offset) * hidden),
                tokenType = random(hidden), dOut = random(tokens * hidden);
  DeviceBuffer<std::int32_t> dIds(ids);
  DeviceBuffer<float> dWte(wte), dWpe(wpe), dTT(tokenType), dDOut(dOut),
      out(tokens * hidden), gWte(wte), gWpe(wpe), gTT(tokenType);
  ASSERT_EQ(gpu::embeddingForward(batch, seq, hidden, dIds.get(), dWte.get(),
                                  dWpe.get(), dTT.get(), offset, out.get(),
                                  stream),
            cudaSuccess);
  ASSERT_EQ(gpu::embeddingBackward(batch, seq, hidden, dIds.get(), dDOut.get(),
                                   offset, gWte.get(), gWpe.get(), gTT.get(),
                                   stream),
            cudaSuccess);
  sync();
  vector<float> eOut(tokens * hidden), eWte = wte, eWpe = wpe, eTT = tokenType;
  cpu::embeddingForward(batch, seq, hidden, ids.data(), wte.data(), wpe.data(),
                        tokenType.data(), offset, eOut.data());
  cpu::embeddingBackward(batch, seq, hidden, ids.data(), dOut.data(), offset,
                         eWte.data(), eWpe.data(), eTT.data());
  EXPECT_LT(relativeError(out.toHost(), eOut), kTolerance);
  EXPECT_LT(relativeError(gWte.toHost(), eWte), kTolerance);
  EXPECT_LT(relativeError(gWpe.toHost(), eWpe), kTolerance);
  EXPECT_LT(relativeError(gTT.toHost(), eTT), kTolerance);

  const int64_t heads = 4, headDim = 32, n = tokens * heads * headDim;
  vector<float> x = random(n), dy = random(n);
  DeviceBuffer<float> dX(x), dDy(dy), y(n), dx(n);
  ASSERT_EQ(gpu::rotaryForward(batch, seq, heads, headDim, offset, 10000.0f,
                               dX.get(), y.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::rotaryBackward(batch, seq, heads, headDim, offset, 10000.0f,
                                dDy.get(), dx.get(), stream),
            cudaSuccess);
  sync();
  vector<float> ey(n), edx(n);
  cpu::rotaryForward(batch, seq, heads, headDim, offset, 10000.0f, x.data(),
                     ey.data());
  cpu::rotaryBackward(batch, seq, heads, headDim, offset, 10000.0f, dy.data(),
                      edx.data());
  EXPECT_LT(relativeError(y.toHost(), ey), kTolerance);
  EXPECT_LT(relativeError(dx.toHost(), edx), kTolerance);
}

TEST_F(CudaKernelsTest, Attention) {
  // Head dims 16/32/64/128 run the tiled kernels (sequences that end inside a
  // tile, several tiles, GQA); 24 runs the row kernels.
  struct Shape {
    int64_t batch, seq, heads, kvHeads, headDim;
  };
  for (Shape shape : {Shape{2, 33, 6, 2, 16}, Shape{2, 150, 4, 2, 64},
                      Shape{1, 70, 2, 2, 128}, Shape{1, 97, 3, 1, 32},
                      Shape{1, 45, 3, 3, 24}})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "bidirectional") +
                   " head dim " + std::to_string(shape.headDim));
      AttentionDims d =
          test::scaledAttentionDims(shape.batch, shape.seq, shape.heads,
                                    shape.kvHeads, shape.headDim, causal);
      const auto [qSize, kvSize, stats] = attentionSizes(d);
      vector<float> q = random(qSize, -2, 2), k = random(kvSize, -2, 2),
                    v = random(kvSize), dOut = random(qSize);
      DeviceBuffer<float> dQ(q), dK(k), dV(v), dDOut(dOut), out(qSize),
          lse(stats), dq(qSize), dk(kvSize), dv(kvSize), delta(stats);
      ASSERT_EQ(gpu::attentionForward(d, dQ.get(), dK.get(), dV.get(),
                                      out.get(), lse.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::attentionBackward(d, dQ.get(), dK.get(), dV.get(),
                                       out.get(), lse.get(), dDOut.get(),
                                       dq.get(), dk.get(), dv.get(),
                                       delta.get(), stream),
                cudaSuccess);
      sync();
      const test::AttentionReference e = test::cpuAttention(d, q, k, v, dOut);
      EXPECT_LT(relativeError(out.toHost(), e.out), kTolerance);
      EXPECT_LT(relativeError(lse.toHost(), e.lse), kTolerance);
      EXPECT_LT(relativeError(dq.toHost(), e.dq), kTolerance);
      EXPECT_LT(relativeError(dk.toHost(), e.dk), kTolerance);
      EXPECT_LT(relativeError(dv.toHost(), e.dv), kTolerance);
    }
}

// An attention implementation on bf16 and f16 storage against the fp32 CPU
// kernels on the same (rounded) inputs. Flash attention rounds P and dS to the
// storage type before their products and its outputs to storage, so the
// tolerance is a few units of the storage's rounding (bf16 2^-9, f16 2^-11)
// rather than fp32's; lse stays fp32. `run` enqueues forward and backward on
// the test's stream; it runs twice, and both runs must give the same bits.
void CudaKernelsTest::checkHalfAttention(
    gpu::HalfType type, const AttentionShape &shape, bool causal,
    const std::function<void(const HalfAttentionCall &)> &run) {
  bool bf16 = type == gpu::HalfType::BF16;
  SCOPED_TRACE(
      std::string(bf16 ? "bf16" : "f16") +
      (causal ? " causal" : " bidirectional") + " heads " +
      std::to_string(shape.heads) + "/" + std::to_string(shape.kvHeads) +
      " head dim " + std::to_string(shape.headDim) + " seq " +
      std::to_string(shape.seq) + " offset " + std::to_string(shape.offset));
  AttentionDims d =
      test::scaledAttentionDims(shape.batch, shape.seq, shape.heads,
                                shape.kvHeads, shape.headDim, causal);
  const auto [qSize, kvSize, stats] = attentionSizes(d);
  const HalfCodec codec{bf16};
  // Random values rounded to storage; `bits` holds them at `offset`.
  const std::size_t o = std::size_t(shape.offset);
  auto make = [&](int64_t n, double lo, double hi, vector<float> &values,
                  vector<std::uint16_t> &bits) {
    vector<std::uint16_t> rounded =
        codec.narrow(random(std::size_t(n), lo, hi));
    values = codec.widen(rounded);
    bits.assign(o, 0);
    bits.insert(bits.end(), rounded.begin(), rounded.end());
  };
  vector<float> q, k, v, dOut;
  vector<std::uint16_t> qBits, kBits, vBits, dOutBits;
  make(qSize, -2, 2, q, qBits);
  make(kvSize, -2, 2, k, kBits);
  make(kvSize, -1, 1, v, vBits);
  make(qSize, -1, 1, dOut, dOutBits);
  DeviceBuffer<std::uint16_t> dQ(qBits), dK(kBits), dV(vBits), dDOut(dOutBits),
      out(qSize + o), dq(qSize + o), dk(kvSize + o), dv(kvSize + o);
  DeviceBuffer<float> lse(stats);
  HalfAttentionCall call{type,          d,
                         dQ.get() + o,  dK.get() + o,
                         dV.get() + o,  dDOut.get() + o,
                         out.get() + o, dq.get() + o,
                         dk.get() + o,  dv.get() + o,
                         lse.get()};
  run(call);
  sync();
  auto widened = [&](const vector<std::uint16_t> &bits) {
    return codec.widen(
        vector<std::uint16_t>(bits.begin() + long(o), bits.end()));
  };
  const vector<std::uint16_t> firstDq = dq.toHost(), firstDk = dk.toHost(),
                              firstDv = dv.toHost();
  const test::AttentionReference e = test::cpuAttention(d, q, k, v, dOut);
  const double tolerance = bf16 ? 5e-3 : 1e-3;
  EXPECT_LT(relativeError(widened(out.toHost()), e.out), tolerance);
  EXPECT_LT(relativeError(lse.toHost(), e.lse), 1e-4);
  EXPECT_LT(relativeError(widened(firstDq), e.dq), tolerance);
  EXPECT_LT(relativeError(widened(firstDk), e.dk), tolerance);
  EXPECT_LT(relativeError(widened(firstDv), e.dv), tolerance);
  run(call);
  sync();
  EXPECT_TRUE(dq.toHost() == firstDq && dk.toHost() == firstDk &&
              dv.toHost() == firstDv)
      << "a second run gave other gradient bits";
}

const AttentionShape kAttentionShapes[] = {
    {2, 33, 6, 2, 16, 0}, {2, 150, 4, 2, 64, 0}, {1, 200, 2, 2, 128, 0},
    {1, 97, 3, 1, 32, 0}, {1, 130, 2, 1, 64, 1}, {1, 256, 2, 2, 64, 0}};

// The tensor-core kernels. One shape reads through pointers that are not
// 16-byte aligned (the scalar staging path).
TEST_F(CudaKernelsTest, AttentionOnTensorCores) {
  for (gpu::HalfType type : {gpu::HalfType::BF16, gpu::HalfType::F16})
    for (const AttentionShape &shape : kAttentionShapes)
      for (bool causal : {true, false})
        checkHalfAttention(
            type, shape, causal, [&](const HalfAttentionCall &c) {
              DeviceBuffer<float> delta(
                  std::size_t(c.dims.batch * c.dims.heads * c.dims.seq));
              ASSERT_TRUE(gpu::halfAttentionSupported(c.dims));
              ASSERT_EQ(gpu::halfAttentionForward(c.type, c.dims, c.q, c.k, c.v,
                                                  c.out, c.lse, stream),
                        cudaSuccess);
              ASSERT_EQ(gpu::halfAttentionBackward(
                            c.type, c.dims, c.q, c.k, c.v, c.out, c.lse, c.dOut,
                            c.dq, c.dk, c.dv, delta.get(), stream),
                        cudaSuccess);
              sync(); // before `delta` is freed
            });
  AttentionDims odd{1, 8, 1, 1, 24, true, 0.2};
  EXPECT_FALSE(gpu::halfAttentionSupported(odd));
}

// cuDNN's fused attention (CudaBackendOptions::cudnnAttention) on the same
// shapes but the unaligned one (cuDNN needs 16-byte aligned operands; the
// backend keeps Weft's kernel for those). Skipped, saying why, where libcudnn
// cannot be loaded; a shape cuDNN refuses is reported and skipped.
// cuDNN's fused attention, run eagerly and replayed from a captured CUDA
// graph (as the backend replays a step): cuDNN <= 9.15 masks a backward with
// seq % 128 != 0 through sequence lengths the frontend copied from a
// temporary host vector at every execute, which a replay would read freed;
// CudnnAttention declares that mask itself with the lengths on the device.
TEST_F(CudaKernelsTest, CudnnAttentionMatchesCpu) {
  std::string why;
  std::unique_ptr<exec::cuda::CudnnAttention> cudnn =
      exec::cuda::CudnnAttention::open(why);
  if (!cudnn)
    GTEST_SKIP() << "no cuDNN attention: " << why;
  std::printf("cuDNN %s\n", cudnn->version().c_str());
  int accepted = 0;
  bool gpt2Like = false; // head dim 64, seq 256, causal: what a model runs
  for (bool captured : {false, true})
    for (gpu::HalfType type : {gpu::HalfType::BF16, gpu::HalfType::F16})
      for (const AttentionShape &shape : kAttentionShapes)
        for (bool causal : {true, false}) {
          if (shape.offset % 8 != 0)
            continue;
          SCOPED_TRACE(captured ? "graph replay" : "eager");
          // Which shapes cuDNN takes depends on its version: a refusal is
          // printed and the shape skipped (the backend then runs Weft's
          // kernels), but a GPT-2-like shape must be taken.
          AttentionDims dims =
              test::scaledAttentionDims(shape.batch, shape.seq, shape.heads,
                                        shape.kvHeads, shape.headDim, causal);
          if (!cudnn->prepare(false, type, dims, why) ||
              !cudnn->prepare(true, type, dims, why)) {
            std::printf("cuDNN refused b%lld s%lld h%lld/%lld d%lld%s: %s\n",
                        (long long)shape.batch, (long long)shape.seq,
                        (long long)shape.heads, (long long)shape.kvHeads,
                        (long long)shape.headDim, causal ? " causal" : "",
                        why.c_str());
            continue;
          }
          ++accepted;
          gpt2Like = gpt2Like || (shape.headDim == 64 && shape.seq == 256 &&
                                  shape.heads == shape.kvHeads && causal);
          checkHalfAttention(
              type, shape, causal, [&](const HalfAttentionCall &c) {
                const exec::cuda::CudnnAttentionGraph *forward =
                    cudnn->prepare(false, c.type, c.dims, why);
                const exec::cuda::CudnnAttentionGraph *backward =
                    forward ? cudnn->prepare(true, c.type, c.dims, why)
                            : nullptr;
                if (!backward) {
                  ADD_FAILURE() << "cuDNN refused the shape: " << why;
                  return;
                }
                int64_t bytes = std::max(
                    exec::cuda::CudnnAttention::workspaceBytes(*forward),
                    exec::cuda::CudnnAttention::workspaceBytes(*backward));
                DeviceBuffer<std::uint8_t> workspace(
                    std::size_t(std::max<int64_t>(bytes, 1)));
                auto in = [](const std::uint16_t *p) {
                  return const_cast<void *>(static_cast<const void *>(p));
                };
                cudaGraph_t graph = nullptr;
                if (captured) {
                  ASSERT_EQ(cudaStreamBeginCapture(
                                stream, cudaStreamCaptureModeThreadLocal),
                            cudaSuccess);
                }
                std::string forwardError =
                    cudnn->run(*forward, {in(c.q), in(c.k), in(c.v)},
                               {c.out, c.lse}, workspace.get(), stream);
                std::string backwardError = cudnn->run(
                    *backward,
                    {in(c.q), in(c.k), in(c.v), c.out, c.lse, in(c.dOut)},
                    {c.dq, c.dk, c.dv}, workspace.get(), stream);
                if (captured) {
                  // The capture always ends and its graph is always freed, so
                  // that one failure here does not fail every call after it.
                  cudaError_t ended = cudaStreamEndCapture(stream, &graph);
                  EXPECT_EQ(ended, cudaSuccess);
                  cudaGraphExec_t exec = nullptr;
                  if (ended == cudaSuccess && graph) {
                    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0),
                              cudaSuccess);
                  }
                  if (exec) {
                    // Two replays: the second's inputs are the first's
                    // (cuDNN's outputs overwrite, nothing accumulates).
                    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
                    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
                    sync();
                    cudaGraphExecDestroy(exec);
                  }
                  if (graph)
                    cudaGraphDestroy(graph);
                }
                EXPECT_EQ(forwardError, "");
                EXPECT_EQ(backwardError, "");
                sync(); // before `workspace` is freed
              });
        }
  std::printf("cuDNN took %d of the shape runs\n", accepted);
  EXPECT_TRUE(gpt2Like) << "cuDNN refused the GPT-2-like shape (b1 s256 h2 "
                           "d64 causal)";
}

// The 16-bit element-wise kernels equal the widening path bit for bit: the
// fp32 kernels on the widened values, rounded as the backend narrows.
TEST_F(CudaKernelsTest, HalfElementwiseEqualsTheWideningPath) {
  const int64_t rows = 37, width = 100, n = rows * width;
  for (gpu::HalfType type : {gpu::HalfType::BF16, gpu::HalfType::F16}) {
    bool bf16 = type == gpu::HalfType::BF16;
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    const HalfCodec codec{bf16};
    auto bits = [&](const vector<float> &v) { return codec.narrow(v); };
    auto widen = [&](const vector<std::uint16_t> &v) { return codec.widen(v); };
    const vector<std::uint16_t> x = bits(random(n, -3, 3)), y = bits(random(n)),
                                bias = bits(random(width));
    DeviceBuffer<std::uint16_t> hX(x), hY(y), hBias(bias), hOut(n), hOut2(n);
    DeviceBuffer<float> fX(widen(x)), fY(widen(y)), fBias(widen(bias)), fOut(n),
        fOut2(n);
    // Equal bits, and written: both outputs start poisoned (NaN, whose
    // narrowing is the 16-bit poison), so an element neither kernel writes
    // would compare equal.
    auto same = [&](const DeviceBuffer<std::uint16_t> &half,
                    const DeviceBuffer<float> &wide, const char *what) {
      sync();
      vector<float> reference = wide.toHost();
      EXPECT_EQ(half.toHost(), bits(reference)) << what;
      EXPECT_EQ(std::count_if(reference.begin(), reference.end(),
                              [](float v) { return std::isnan(v); }),
                0)
          << what << ": elements left unwritten";
    };
    ASSERT_EQ(
        gpu::halfResidualAdd(type, n, hX.get(), hY.get(), hOut.get(), stream),
        cudaSuccess);
    ASSERT_EQ(gpu::residualAdd(n, fX.get(), fY.get(), fOut.get(), stream),
              cudaSuccess);
    same(hOut, fOut, "residual_add");
    ASSERT_EQ(gpu::halfBiasAdd(type, rows, width, hX.get(), hBias.get(),
                               hOut.get(), stream),
              cudaSuccess);
    DeviceBuffer<float> fBiased(widen(x));
    ASSERT_EQ(gpu::biasAdd(rows, width, fBias.get(), fBiased.get(), stream),
              cudaSuccess);
    same(hOut, fBiased, "bias_add");
    for (Activation act : {Activation::GeluTanh, Activation::SiLU}) {
      ASSERT_EQ(gpu::halfActivationForward(type, act, n, hX.get(), hOut.get(),
                                           stream),
                cudaSuccess);
      ASSERT_EQ(gpu::activationForward(act, n, fX.get(), fOut.get(), stream),
                cudaSuccess);
      same(hOut, fOut, "activation_forward");
      ASSERT_EQ(gpu::halfActivationBackward(type, act, n, hX.get(), hY.get(),
                                            hOut.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::activationBackward(act, n, fX.get(), fY.get(), fOut.get(),
                                        stream),
                cudaSuccess);
      same(hOut, fOut, "activation_backward");
      ASSERT_EQ(gpu::halfGatedForward(type, act, n, hX.get(), hY.get(),
                                      hOut.get(), stream),
                cudaSuccess);
      ASSERT_EQ(
          gpu::gatedForward(act, n, fX.get(), fY.get(), fOut.get(), stream),
          cudaSuccess);
      same(hOut, fOut, "gated_forward");
      // dOut = y as well: any values do.
      ASSERT_EQ(gpu::halfGatedBackward(type, act, n, hX.get(), hY.get(),
                                       hY.get(), hOut.get(), hOut2.get(),
                                       stream),
                cudaSuccess);
      ASSERT_EQ(gpu::gatedBackward(act, n, fX.get(), fY.get(), fY.get(),
                                   fOut.get(), fOut2.get(), stream),
                cudaSuccess);
      same(hOut, fOut, "gated_backward dGate");
      same(hOut2, fOut2, "gated_backward dUp");
    }
  }
}

/// The 16-bit norms, bias gradient, cross-entropy and embedding lookup
/// against the widening path on the GPU (fp32 kernels on widened operands,
/// scaled as the backend does, rounded): the same grid and arithmetic, so
/// the same bits. RowKernelsEmulationTest checks the same on the CPU.
TEST_F(CudaKernelsTest, HalfRowKernelsEqualTheWideningPath) {
  for (gpu::HalfType type : {gpu::HalfType::BF16, gpu::HalfType::F16}) {
    bool bf16 = type == gpu::HalfType::BF16;
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    const HalfCodec codec{bf16};
    auto bits = [&](const vector<float> &v) { return codec.narrow(v); };
    auto widen = [&](const vector<std::uint16_t> &v) { return codec.widen(v); };
    // Equal bits, and written: both outputs start poisoned (NaN, whose
    // narrowing is the 16-bit poison), so an element neither kernel writes
    // would compare equal.
    auto same = [&](const DeviceBuffer<std::uint16_t> &half,
                    const DeviceBuffer<float> &wide, const char *what) {
      sync();
      vector<float> reference = wide.toHost();
      EXPECT_EQ(half.toHost(), bits(reference)) << what;
      EXPECT_EQ(std::count_if(reference.begin(), reference.end(),
                              [](float v) { return std::isnan(v); }),
                0)
          << what << ": elements left unwritten";
    };
    // A warp per row and a block per row.
    for (auto [rows, width] :
         {std::pair<int64_t, int64_t>{1000, 768}, {300, 1030}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(width));
      const int64_t n = rows * width;
      const vector<std::uint16_t> x = bits(random(n, -2, 3)),
                                  gamma = bits(random(width, 0.5, 1.5)),
                                  beta = bits(random(width)),
                                  dy = bits(random(n)),
                                  dGamma0 = bits(random(width)),
                                  dBeta0 = bits(random(width));
      DeviceBuffer<std::uint16_t> hX(x), hG(gamma), hB(beta), hY(n), hDx(dy),
          hdG(dGamma0), hdB(dBeta0);
      DeviceBuffer<float> fX(widen(x)), fG(widen(gamma)), fB(widen(beta)),
          fY(n), fDx(widen(dy)), fdG(widen(dGamma0)), fdB(widen(dBeta0));
      DeviceBuffer<float> hMean(rows), hRstd(rows), fMean(rows), fRstd(rows);
      DeviceBuffer<float> fDy(widen(dy)); // read only
      // dx over dy, as the plans alias them.
      ASSERT_EQ(gpu::halfLayerNormForward(type, rows, width, hX.get(), hG.get(),
                                          hB.get(), 1e-5f, hY.get(),
                                          hMean.get(), hRstd.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::halfLayerNormBackward(type, rows, width, hX.get(),
                                           hG.get(), hMean.get(), hRstd.get(),
                                           hDx.get(), hDx.get(), hdG.get(),
                                           hdB.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::layerNormForward(rows, width, fX.get(), fG.get(), fB.get(),
                                      1e-5f, fY.get(), fMean.get(), fRstd.get(),
                                      stream),
                cudaSuccess);
      ASSERT_EQ(gpu::layerNormBackward(rows, width, fX.get(), fG.get(),
                                       fMean.get(), fRstd.get(), fDx.get(),
                                       fDx.get(), fdG.get(), fdB.get(), stream),
                cudaSuccess);
      same(hY, fY, "layer norm y");
      EXPECT_EQ(hRstd.toHost(), fRstd.toHost());
      same(hDx, fDx, "layer norm dx");
      same(hdG, fdG, "layer norm dGamma");
      same(hdB, fdB, "layer norm dBeta");
      // The one-pass backward (the backend's on 16-bit operands): the same dx,
      // and against the fp32 one-pass kernels bit for bit.
      DeviceBuffer<float> scratch(
          size_t(gpu::normBackwardScratchFloats(rows, width)));
      DeviceBuffer<std::uint16_t> oDx(dy), odG(dGamma0), odB(dBeta0);
      DeviceBuffer<float> pDx(widen(dy)), pdG(widen(dGamma0)),
          pdB(widen(dBeta0));
      ASSERT_EQ(gpu::halfLayerNormBackward(type, rows, width, hX.get(),
                                           hG.get(), hMean.get(), hRstd.get(),
                                           oDx.get(), oDx.get(), odG.get(),
                                           odB.get(), stream, scratch.get()),
                cudaSuccess);
      ASSERT_EQ(gpu::layerNormBackward(rows, width, fX.get(), fG.get(),
                                       fMean.get(), fRstd.get(), pDx.get(),
                                       pDx.get(), pdG.get(), pdB.get(), stream,
                                       scratch.get()),
                cudaSuccess);
      same(oDx, pDx, "one-pass layer norm dx");
      same(odG, pdG, "one-pass layer norm dGamma");
      same(odB, pdB, "one-pass layer norm dBeta");
      EXPECT_EQ(oDx.toHost(), hDx.toHost()) << "one-pass dx = two-pass dx";
      // The one-pass parameter gradients against the two-pass ones (checked
      // against the CPU in runNorms): the same sums in another order.
      EXPECT_LT(relativeError(pdG.toHost(), fdG.toHost()), kTolerance)
          << "one-pass dGamma";
      EXPECT_LT(relativeError(pdB.toHost(), fdB.toHost()), kTolerance)
          << "one-pass dBeta";
      // With the residual add after it (sum = dx + addend) in the same
      // launch, dx not stored (layer_norm_backward_add): the backward's and
      // the add's results, bit for bit, dy left as it was. One pass where
      // the rows fit it (the sum over the addend, as it may be), else two
      // passes with dx in the sum and an add; also the fp32 kernels.
      const bool fits = gpu::normBackwardScratchFloats(rows, width) > 0;
      for (bool onePass : {true, false}) {
        SCOPED_TRACE(onePass ? "one pass" : "two passes");
        const vector<std::uint16_t> addend = bits(random(n));
        DeviceBuffer<std::uint16_t> aDy(dy), adG(dGamma0), adB(dBeta0),
            aAddend(addend), aSum(n), want(addend);
        std::uint16_t *sum = onePass && fits ? aAddend.get() : aSum.get();
        ASSERT_EQ(gpu::halfLayerNormBackwardAdd(
                      type, rows, width, hX.get(), hG.get(), hMean.get(),
                      hRstd.get(), aDy.get(), aAddend.get(), sum, adG.get(),
                      adB.get(), stream, onePass ? scratch.get() : nullptr),
                  cudaSuccess);
        ASSERT_EQ(gpu::halfResidualAdd(type, n, (onePass ? oDx : hDx).get(),
                                       want.get(), want.get(), stream),
                  cudaSuccess);
        sync();
        EXPECT_EQ(aDy.toHost(), dy) << "fused add: dy";
        EXPECT_EQ(adG.toHost(), (onePass ? odG : hdG).toHost())
            << "fused add: dGamma";
        EXPECT_EQ(adB.toHost(), (onePass ? odB : hdB).toHost())
            << "fused add: dBeta";
        EXPECT_EQ(onePass && fits ? aAddend.toHost() : aSum.toHost(),
                  want.toHost())
            << "fused add: sum";
        DeviceBuffer<float> fAddend(widen(addend)), fSum(n), fWant(n),
            fdG2(widen(dGamma0)), fdB2(widen(dBeta0));
        ASSERT_EQ(gpu::layerNormBackwardAdd(
                      rows, width, fX.get(), fG.get(), fMean.get(), fRstd.get(),
                      fDy.get(), fAddend.get(), fSum.get(), fdG2.get(),
                      fdB2.get(), stream, onePass ? scratch.get() : nullptr),
                  cudaSuccess);
        ASSERT_EQ(gpu::residualAdd(n, (onePass ? pDx : fDx).get(),
                                   fAddend.get(), fWant.get(), stream),
                  cudaSuccess);
        sync();
        EXPECT_EQ(fSum.toHost(), fWant.toHost()) << "fp32 fused add: sum";
        EXPECT_EQ(fdG2.toHost(), (onePass ? pdG : fdG).toHost())
            << "fp32 fused add: dGamma";
        EXPECT_EQ(fdB2.toHost(), (onePass ? pdB : fdB).toHost())
            << "fp32 fused add: dBeta";
      }

      DeviceBuffer<std::uint16_t> rY(n), rDx(dy), rdG(dGamma0);
      DeviceBuffer<float> gY(n), gDx(widen(dy)), gdG(widen(dGamma0));
      ASSERT_EQ(gpu::halfRmsNormForward(type, rows, width, hX.get(), hG.get(),
                                        1e-6f, rY.get(), hRstd.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::halfRmsNormBackward(type, rows, width, hX.get(), hG.get(),
                                         hRstd.get(), rDx.get(), rDx.get(),
                                         rdG.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::rmsNormForward(rows, width, fX.get(), fG.get(), 1e-6f,
                                    gY.get(), fRstd.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::rmsNormBackward(rows, width, fX.get(), fG.get(),
                                     fRstd.get(), gDx.get(), gDx.get(),
                                     gdG.get(), stream),
                cudaSuccess);
      same(rY, gY, "rms norm y");
      same(rDx, gDx, "rms norm dx");
      same(rdG, gdG, "rms norm dGamma");
      DeviceBuffer<std::uint16_t> oRDx(dy), oRdG(dGamma0);
      DeviceBuffer<float> pRDx(widen(dy)), pRdG(widen(dGamma0));
      ASSERT_EQ(gpu::halfRmsNormBackward(type, rows, width, hX.get(), hG.get(),
                                         hRstd.get(), oRDx.get(), oRDx.get(),
                                         oRdG.get(), stream, scratch.get()),
                cudaSuccess);
      ASSERT_EQ(gpu::rmsNormBackward(rows, width, fX.get(), fG.get(),
                                     fRstd.get(), pRDx.get(), pRDx.get(),
                                     pRdG.get(), stream, scratch.get()),
                cudaSuccess);
      same(oRDx, pRDx, "one-pass rms norm dx");
      same(oRdG, pRdG, "one-pass rms norm dGamma");
      EXPECT_LT(relativeError(pRdG.toHost(), gdG.toHost()), kTolerance)
          << "one-pass rms dGamma";

      // A residual add and the norm over its sum, fused: the same bits.
      for (bool rms : {false, true}) {
        DeviceBuffer<std::uint16_t> addend(dy);
        DeviceBuffer<std::uint16_t> sum(n), y2(n), fusedSum(x), y3(n);
        DeviceBuffer<float> mean2(rows), rstd2(rows), mean3(rows), rstd3(rows);
        ASSERT_EQ(gpu::halfResidualAdd(type, n, hX.get(), addend.get(),
                                       sum.get(), stream),
                  cudaSuccess);
        ASSERT_EQ(rms ? gpu::halfRmsNormForward(type, rows, width, sum.get(),
                                                hG.get(), 1e-6f, y2.get(),
                                                rstd2.get(), stream)
                      : gpu::halfLayerNormForward(
                            type, rows, width, sum.get(), hG.get(), hB.get(),
                            1e-5f, y2.get(), mean2.get(), rstd2.get(), stream),
                  cudaSuccess);
        // The sum over the first addend, in place.
        ASSERT_EQ(rms ? gpu::halfResidualRmsNormForward(
                            type, rows, width, fusedSum.get(), addend.get(),
                            fusedSum.get(), hG.get(), 1e-6f, y3.get(),
                            rstd3.get(), stream)
                      : gpu::halfResidualLayerNormForward(
                            type, rows, width, fusedSum.get(), addend.get(),
                            fusedSum.get(), hG.get(), hB.get(), 1e-5f, y3.get(),
                            mean3.get(), rstd3.get(), stream),
                  cudaSuccess);
        sync();
        EXPECT_EQ(fusedSum.toHost(), sum.toHost()) << "residual sum";
        EXPECT_EQ(y3.toHost(), y2.toHost())
            << (rms ? "rms" : "layer") << " norm";
        EXPECT_EQ(rstd3.toHost(), rstd2.toHost());
        // The fp32 kernels: the same bits as the add and the norm apart.
        DeviceBuffer<float> fA(widen(x)), fAddend(widen(dy)), fSum(n), fY2(n),
            fRstd2(rows), fMean2(rows), fY3(n), fRstd3(rows), fMean3(rows);
        ASSERT_EQ(
            gpu::residualAdd(n, fA.get(), fAddend.get(), fSum.get(), stream),
            cudaSuccess);
        ASSERT_EQ(
            rms ? gpu::rmsNormForward(rows, width, fSum.get(), fG.get(), 1e-6f,
                                      fY2.get(), fRstd2.get(), stream)
                : gpu::layerNormForward(rows, width, fSum.get(), fG.get(),
                                        fB.get(), 1e-5f, fY2.get(),
                                        fMean2.get(), fRstd2.get(), stream),
            cudaSuccess);
        ASSERT_EQ(rms ? gpu::residualRmsNormForward(
                            rows, width, fA.get(), fAddend.get(), fA.get(),
                            fG.get(), 1e-6f, fY3.get(), fRstd3.get(), stream)
                      : gpu::residualLayerNormForward(
                            rows, width, fA.get(), fAddend.get(), fA.get(),
                            fG.get(), fB.get(), 1e-5f, fY3.get(), fMean3.get(),
                            fRstd3.get(), stream),
                  cudaSuccess);
        sync();
        EXPECT_EQ(fA.toHost(), fSum.toHost()) << "fp32 residual sum";
        EXPECT_EQ(fY3.toHost(), fY2.toHost()) << "fp32 fused norm";
        EXPECT_EQ(fRstd3.toHost(), fRstd2.toHost());
      }

      DeviceBuffer<std::uint16_t> hBias(dBeta0);
      DeviceBuffer<float> fBias(widen(dBeta0));
      DeviceBuffer<std::uint16_t> hDy(dy);
      ASSERT_EQ(
          gpu::halfBiasGrad(type, rows, width, hDy.get(), hBias.get(), stream),
          cudaSuccess);
      ASSERT_EQ(gpu::biasGrad(rows, width, fDy.get(), fBias.get(), stream),
                cudaSuccess);
      same(hBias, fBias, "bias grad");
    }

    // Cross-entropy, the gradient over the logits, times a loss scale; also
    // on rows padded for aligned GEMMs (`valid` words, the rest never read).
    const float gradScale = 1024.0f / 3.0f;
    for (auto [rows, vocab, valid] :
         {std::tuple<int64_t, int64_t, int64_t>{300, 257, -1},
          {40, 50257, -1},
          {300, 264, 257},
          {40, 50264, 50257}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(vocab) +
                   " valid " + std::to_string(valid));
      vector<float> values = random(rows * vocab, -8, 8);
      if (valid >= 0)
        test::fillPadding(values, rows, vocab, valid, 3e4f);
      const vector<std::uint16_t> logits = bits(values);
      vector<std::int32_t> targets =
          randomIds(rng, rows, std::int32_t(valid < 0 ? vocab : valid));
      for (int64_t r = 0; r < rows; r += 7)
        targets[r] = kIgnoreIndex;
      DeviceBuffer<std::int32_t> dTargets(targets);
      DeviceBuffer<std::uint16_t> hLogits(logits);
      DeviceBuffer<float> fLogits(widen(logits)), term(rows), lse(rows),
          hLoss(1), fLoss(1);
      DeviceBuffer<int> hCount(1), fCount(1);
      ASSERT_EQ(gpu::halfCrossEntropy(type, rows, vocab, hLogits.get(),
                                      dTargets.get(), gradScale, term.get(),
                                      hCount.get(), hLoss.get(), hLogits.get(),
                                      stream, valid),
                cudaSuccess);
      ASSERT_EQ(gpu::crossEntropyForwardBackward(
                    rows, vocab, fLogits.get(), dTargets.get(), lse.get(),
                    fCount.get(), fLoss.get(), fLogits.get(), stream, valid),
                cudaSuccess);
      sync();
      vector<float> scaled = fLogits.toHost();
      for (float &g : scaled)
        g *= gradScale;
      EXPECT_EQ(hCount.toHost(), fCount.toHost());
      EXPECT_EQ(hLoss.toHost(), fLoss.toHost());
      EXPECT_EQ(hLogits.toHost(), bits(scaled)) << "dLogits";
    }

    // Embedding lookup with positions.
    const int64_t batch = 3, seq = 17, hidden = 96, vocab = 50;
    vector<std::int32_t> ids = randomIds(rng, batch * seq, vocab);
    const vector<std::uint16_t> wte = bits(random(vocab * hidden)),
                                wpe = bits(random(seq * hidden));
    DeviceBuffer<std::int32_t> dIds(ids);
    DeviceBuffer<std::uint16_t> hWte(wte), hWpe(wpe),
        hOut(batch * seq * hidden);
    DeviceBuffer<float> fWte(widen(wte)), fWpe(widen(wpe)),
        fOut(batch * seq * hidden);
    ASSERT_EQ(gpu::halfEmbeddingForward(type, batch, seq, hidden, dIds.get(),
                                        hWte.get(), hWpe.get(), hOut.get(),
                                        stream),
              cudaSuccess);
    ASSERT_EQ(gpu::embeddingForward(batch, seq, hidden, dIds.get(), fWte.get(),
                                    fWpe.get(), nullptr, 0, fOut.get(), stream),
              cudaSuccess);
    same(hOut, fOut, "embedding");

    // Its backward accumulates without atomics, in token order: the CPU
    // kernel's result on the widened operands, bit for bit (the fp32 GPU
    // kernel's atomics add in another order per run).
    {
      const vector<std::uint16_t> dOut = bits(random(batch * seq * hidden)),
                                  dWte0 = bits(random(vocab * hidden)),
                                  dWpe0 = bits(random(seq * hidden));
      DeviceBuffer<std::uint16_t> hDOut(dOut), hDWte(dWte0), hDWpe(dWpe0);
      DeviceBuffer<std::int32_t> scratch(
          gpu::embeddingBackwardScratchInts(vocab, batch * seq));
      ASSERT_EQ(gpu::halfEmbeddingBackward(type, batch, seq, hidden, vocab,
                                           dIds.get(), hDOut.get(), hDWte.get(),
                                           hDWpe.get(), scratch.get(), stream),
                cudaSuccess);
      vector<float> cWte = widen(dWte0), cWpe = widen(dWpe0);
      const vector<float> cOut = widen(dOut);
      cpu::embeddingBackward(batch, seq, hidden, ids.data(), cOut.data(), 0,
                             cWte.data(), cWpe.data(),
                             static_cast<float *>(nullptr));
      sync(); // an asynchronous fault named here, not by a copy
      EXPECT_EQ(hDWte.toHost(), bits(cWte)) << "embedding backward, table";
      EXPECT_EQ(hDWpe.toHost(), bits(cWpe)) << "embedding backward, positions";

      // The tensor-parallel lookups over a shard [20, 40) of the vocabulary
      // and the position rows, forward and backward, against the CPU kernels.
      const int64_t start = 20, rows = 20, n = batch * seq * hidden;
      const vector<std::uint16_t> shard = bits(random(rows * hidden)),
                                  dShard0 = bits(random(rows * hidden));
      DeviceBuffer<std::uint16_t> hShard(shard), hLookup(n), hPlus(n),
          hDShard(dShard0), hDPos(dWpe0);
      DeviceBuffer<std::int32_t> shardScratch(
          gpu::embeddingBackwardScratchInts(rows, batch * seq));
      ASSERT_EQ(gpu::halfVocabEmbeddingForward(type, batch, seq, hidden, start,
                                               rows, dIds.get(), hShard.get(),
                                               hLookup.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::halfPositionEmbeddingForward(type, batch, seq, hidden,
                                                  hLookup.get(), hWpe.get(),
                                                  hPlus.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::halfVocabEmbeddingBackward(
                    type, batch, seq, hidden, start, rows, dIds.get(),
                    hDOut.get(), hDShard.get(), shardScratch.get(), stream),
                cudaSuccess);
      ASSERT_EQ(gpu::halfPositionEmbeddingBackward(
                    type, batch, seq, hidden, hDOut.get(), hDPos.get(), stream),
                cudaSuccess);
      vector<float> cLookup(n), cPlus(n), cShard = widen(dShard0),
                                          cPos = widen(dWpe0);
      const vector<float> wShard = widen(shard);
      cpu::vocabEmbeddingForward(batch, seq, hidden, start, rows, ids.data(),
                                 wShard.data(), cLookup.data());
      const vector<float> lookupRounded = widen(bits(cLookup));
      const vector<float> wWpe = widen(wpe);
      cpu::positionEmbeddingForward(batch, seq, hidden, int64_t(0),
                                    lookupRounded.data(), wWpe.data(),
                                    cPlus.data());
      cpu::vocabEmbeddingBackward(batch, seq, hidden, start, rows, ids.data(),
                                  cOut.data(), cShard.data());
      cpu::positionEmbeddingBackward(batch, seq, hidden, int64_t(0),
                                     cOut.data(), cPos.data());
      sync();
      EXPECT_EQ(hLookup.toHost(), bits(cLookup)) << "vocab-parallel lookup";
      EXPECT_EQ(hPlus.toHost(), bits(cPlus)) << "position rows added";
      EXPECT_EQ(hDShard.toHost(), bits(cShard)) << "vocab-parallel backward";
      EXPECT_EQ(hDPos.toHost(), bits(cPos)) << "position backward";
    }

    // Rotary forward and backward in place (LLaMA's q and k).
    const int64_t heads = 4, headDim = 64, n = batch * seq * heads * headDim;
    const vector<std::uint16_t> q = bits(random(n, -2, 2));
    DeviceBuffer<std::uint16_t> hQ(q);
    DeviceBuffer<float> fQ(widen(q));
    for (bool inverse : {false, true}) {
      ASSERT_EQ(gpu::halfRotary(type, batch, seq, heads, headDim, 0, 10000.0f,
                                inverse, hQ.get(), hQ.get(), stream),
                cudaSuccess);
      ASSERT_EQ(inverse
                    ? gpu::rotaryBackward(batch, seq, heads, headDim, 0,
                                          10000.0f, fQ.get(), fQ.get(), stream)
                    : gpu::rotaryForward(batch, seq, heads, headDim, 0,
                                         10000.0f, fQ.get(), fQ.get(), stream),
                cudaSuccess);
      // The fp32 side keeps its unrounded result: compare, then round it
      // as the widening path would before the next kernel.
      same(hQ, fQ, inverse ? "rotary backward" : "rotary forward");
      vector<float> rounded = widen(bits(fQ.toHost()));
      ASSERT_EQ(cudaMemcpy(fQ.get(), rounded.data(), rounded.size() * 4,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
}

TEST_F(CudaKernelsTest, CrossEntropy) {
  // A small vocabulary (a warp per row) and GPT-2's (a block per row).
  for (auto [rows, vocab] :
       {std::pair<int64_t, int64_t>{300, 257}, {40, 50257}}) {
    runCrossEntropy(rows, vocab);
  }
  // Rows padded for aligned GEMMs (the LM head's logits of an odd vocabulary).
  runCrossEntropy(300, 264, 257);
  runCrossEntropy(40, 50264, 50257);
}

/// Rows `vocab` apart; with `valid` >= 0 only that many columns are words and
/// the padding holds a huge logit that must not be read.
void CudaKernelsTest::runCrossEntropy(int64_t rows, int64_t vocab,
                                      int64_t valid) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " +
               std::to_string(vocab) + " valid " + std::to_string(valid));
  vector<float> logits = random(rows * vocab, -8, 8);
  int64_t words = valid < 0 ? vocab : valid;
  test::fillPadding(logits, rows, vocab, words, 3e4f);
  vector<std::int32_t> targets = randomIds(rng, rows, std::int32_t(words));
  for (int64_t r = 0; r < rows; r += 7)
    targets[r] = kIgnoreIndex;
  DeviceBuffer<float> dLogits(logits), lse(rows), loss(1), grad(rows * vocab);
  DeviceBuffer<std::int32_t> dTargets(targets);
  DeviceBuffer<int> count(1);
  ASSERT_EQ(gpu::crossEntropyForwardBackward(
                rows, vocab, dLogits.get(), dTargets.get(), lse.get(),
                count.get(), loss.get(), grad.get(), stream, valid),
            cudaSuccess);
  sync();
  vector<float> eLse(rows), eGrad(rows * vocab);
  float eLoss = cpu::crossEntropyForwardBackward(rows, vocab, logits.data(),
                                                 targets.data(), eGrad.data(),
                                                 eLse.data(), valid);
  EXPECT_EQ(count.toHost()[0], cpu::countValidTargets(rows, targets.data()));
  EXPECT_NEAR(loss.toHost()[0], eLoss, kTolerance * eLoss);
  EXPECT_LT(relativeError(lse.toHost(), eLse), kTolerance);
  EXPECT_LT(relativeError(grad.toHost(), eGrad), kTolerance);
}

TEST_F(CudaKernelsTest, VocabParallelEmbeddingAndPositions) {
  // The last of three shards of an 11-word vocabulary padded to 12: rows
  // [8, 12), of which word 11 is padding.
  const int64_t batch = 2, seq = 17, hidden = 24, vocab = 11, shardRows = 4;
  const int64_t vocabStart = 8, tokens = batch * seq, offset = 3;
  vector<std::int32_t> ids = randomIds(rng, tokens, vocab);
  vector<float> table = random(shardRows * hidden),
                dOut = random(tokens * hidden), x = random(tokens * hidden),
                wpe = random((seq + offset) * hidden);
  DeviceBuffer<std::int32_t> dIds(ids);
  DeviceBuffer<float> dTable(table), dDOut(dOut), dX(x), dWpe(wpe),
      out(tokens * hidden), gTable(table), posOut(tokens * hidden), gWpe(wpe);
  ASSERT_EQ(gpu::vocabEmbeddingForward(batch, seq, hidden, vocabStart,
                                       shardRows, dIds.get(), dTable.get(),
                                       out.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::vocabEmbeddingBackward(batch, seq, hidden, vocabStart,
                                        shardRows, dIds.get(), dDOut.get(),
                                        gTable.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::positionEmbeddingForward(batch, seq, hidden, offset, dX.get(),
                                          dWpe.get(), posOut.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::positionEmbeddingBackward(batch, seq, hidden, offset,
                                           dDOut.get(), gWpe.get(), stream),
            cudaSuccess);
  sync();
  vector<float> eOut(tokens * hidden), eTable = table, ePos(tokens * hidden),
                                       eWpe = wpe;
  cpu::vocabEmbeddingForward(batch, seq, hidden, vocabStart, shardRows,
                             ids.data(), table.data(), eOut.data());
  cpu::vocabEmbeddingBackward(batch, seq, hidden, vocabStart, shardRows,
                              ids.data(), dOut.data(), eTable.data());
  cpu::positionEmbeddingForward(batch, seq, hidden, offset, x.data(),
                                wpe.data(), ePos.data());
  cpu::positionEmbeddingBackward(batch, seq, hidden, offset, dOut.data(),
                                 eWpe.data());
  EXPECT_LT(relativeError(out.toHost(), eOut), kTolerance);
  EXPECT_LT(relativeError(gTable.toHost(), eTable), kTolerance);
  EXPECT_LT(relativeError(posOut.toHost(), ePos), kTolerance);
  EXPECT_LT(relativeError(gWpe.toHost(), eWpe), kTolerance);
}

TEST_F(CudaKernelsTest, VocabParallelCrossEntropyPhases) {
  // One shard of 64 columns starting at word 192 of a 250-word vocabulary:
  // 58 real columns, 6 padding (filled with large logits that must not count).
  runShardPhases(130, 64, 192, 58, 250);
  // The last of 8 shards of GPT-2's 50257 words padded to 50272: 6269 real
  // columns (a block per row), 15 padding.
  runShardPhases(40, 6284, 43988, 6269, 50257);
}

void CudaKernelsTest::runShardPhases(int64_t rows, int64_t vocabLocal,
                                     int64_t vocabStart, int64_t valid,
                                     std::int32_t vocab) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(vocabLocal));
  vector<float> logits = random(rows * vocabLocal, -6, 6);
  test::fillPadding(logits, rows, vocabLocal, valid, 50.0f);
  vector<std::int32_t> targets = randomIds(rng, rows, vocab);
  for (int64_t r = 0; r < rows; r += 9)
    targets[r] = kIgnoreIndex;
  // Stand-ins for the all-reduced values of the other shards.
  vector<float> globalMax = random(rows, 6, 7),
                globalSumExp = random(rows, 1, 40),
                globalTarget = random(rows, -3, 3);
  DeviceBuffer<float> dLogits(logits), dMax(globalMax), dSum(globalSumExp),
      dTarget(globalTarget), localMax(rows), sumExp(rows), targetLogit(rows),
      lse(rows), loss(1), grad(rows * vocabLocal);
  DeviceBuffer<std::int32_t> dTargets(targets);
  DeviceBuffer<int> count(1);
  ASSERT_EQ(gpu::crossEntropyShardMax(rows, vocabLocal, dLogits.get(),
                                      localMax.get(), valid, stream),
            cudaSuccess);
  ASSERT_EQ(gpu::crossEntropyShardSums(
                rows, vocabLocal, vocabStart, dLogits.get(), dTargets.get(),
                dMax.get(), sumExp.get(), targetLogit.get(), valid, stream),
            cudaSuccess);
  ASSERT_EQ(gpu::crossEntropyShardFinish(
                rows, vocabLocal, vocabStart, dLogits.get(), dTargets.get(),
                dMax.get(), dSum.get(), dTarget.get(), lse.get(), count.get(),
                loss.get(), grad.get(), valid, stream),
            cudaSuccess);
  sync();
  vector<float> eMax(rows), eSum(rows), eTarget(rows), eGrad(rows * vocabLocal);
  cpu::crossEntropyShardMax(rows, vocabLocal, logits.data(), eMax.data(),
                            valid);
  cpu::crossEntropyShardSums(rows, vocabLocal, vocabStart, logits.data(),
                             targets.data(), globalMax.data(), eSum.data(),
                             eTarget.data(), valid);
  float eLoss = cpu::crossEntropyShardFinish(
      rows, vocabLocal, vocabStart, logits.data(), targets.data(),
      globalMax.data(), globalSumExp.data(), globalTarget.data(), eGrad.data(),
      valid);
  EXPECT_LT(relativeError(localMax.toHost(), eMax), kTolerance);
  EXPECT_LT(relativeError(sumExp.toHost(), eSum), kTolerance);
  EXPECT_LT(relativeError(targetLogit.toHost(), eTarget), kTolerance);
  EXPECT_EQ(count.toHost()[0], cpu::countValidTargets(rows, targets.data()));
  EXPECT_NEAR(loss.toHost()[0], eLoss, kTolerance * std::abs(eLoss));
  EXPECT_LT(relativeError(grad.toHost(), eGrad), kTolerance);
}

TEST_F(CudaKernelsTest, AdamWNormAndOverflow) {
  const int64_t n = 10007;
  vector<float> param = random(n), m = random(n, 0, 0.1), v = random(n, 0, 0.1),
                grad = random(n, -3, 3);
  DeviceBuffer<float> dParam(param), dM(m), dV(v), dGrad(grad);
  AdamWStep step = makeAdamWStep(AdamWConfig{}, 7, 0.5);
  ASSERT_EQ(gpu::adamwStep(step, n, dGrad.get(), dParam.get(), dM.get(),
                           dV.get(), stream),
            cudaSuccess);
  DeviceBuffer<double> sumSq(1);
  DeviceBuffer<int> flag(1);
  ASSERT_EQ(gpu::sumOfSquares(n, dGrad.get(), sumSq.get(), stream),
            cudaSuccess);
  ASSERT_EQ(gpu::hasNonFinite(n, dGrad.get(), flag.get(), stream), cudaSuccess);
  sync();
  cpu::adamwStep(step, n, grad.data(), param.data(), m.data(), v.data());
  EXPECT_LT(relativeError(dParam.toHost(), param), kTolerance);
  EXPECT_LT(relativeError(dM.toHost(), m), kTolerance);
  EXPECT_LT(relativeError(dV.toHost(), v), kTolerance);
  double expectedSumSq = cpu::sumOfSquares(n, grad.data());
  EXPECT_NEAR(sumSq.toHost()[0], expectedSumSq, 1e-12 * expectedSumSq);
  EXPECT_EQ(flag.toHost()[0], 0);

  grad[n - 1] = std::numeric_limits<float>::infinity();
  DeviceBuffer<float> overflowed(grad);
  ASSERT_EQ(gpu::hasNonFinite(n, overflowed.get(), flag.get(), stream),
            cudaSuccess);
  sync();
  EXPECT_EQ(flag.toHost()[0], 1);
}

} // namespace
