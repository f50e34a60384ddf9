//===- ForwardTest.cpp - Forwards against independent references ----------===//
//
// Each forward kernel is compared with a direct fp64 formula written here
// (not with the shared row functions), and each is run in fp32 and fp64 on
// the same inputs, which must agree to a relative 1e-5 (fp32 rounding over
// these short reductions is ~1e-7; a type-dependent bug is O(1)).
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "weft/kernels/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

using namespace weft::kernels;
using namespace weft::kernels::test;
using std::vector;

namespace {

constexpr double kReferenceTolerance = 1e-12;
constexpr double kFp32Tolerance = 1e-5;

TEST(GemmTest, MatchesNaiveLoopsForEveryTransposition) {
  std::mt19937_64 rng(101);
  const int64_t m = 5, n = 4, k = 3;
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      vector<double> a = randomVector(rng, m * k), b = randomVector(rng, k * n),
                     c = randomVector(rng, m * n);
      vector<double> expected(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += (transA ? a[p * m + i] : a[i * k + p]) *
                   (transB ? b[j * k + p] : b[p * n + j]);
          expected[i * n + j] = 2.0 * sum + 0.5 * c[i * n + j];
        }
      vector<float> cf = convert<float>(c);
      cpu::gemm(transA, transB, m, n, k, 2.0, a.data(), transA ? m : k,
                b.data(), transB ? k : n, 0.5, c.data(), n);
      EXPECT_LT(relativeError(c, expected), kReferenceTolerance);
      vector<float> af = convert<float>(a), bf = convert<float>(b);
      cpu::gemm(transA, transB, m, n, k, 2.0f, af.data(), transA ? m : k,
                bf.data(), transB ? k : n, 0.5f, cf.data(), n);
      EXPECT_LT(relativeError(cf, expected), kFp32Tolerance);
    }
}

TEST(LayerNormTest, MatchesTwoPassFormula) {
  std::mt19937_64 rng(103);
  const int64_t rows = 3, width = 10;
  const double eps = 1e-5;
  vector<double> x = randomVector(rng, rows * width, -5, 5),
                 gamma = randomVector(rng, width),
                 beta = randomVector(rng, width);
  for (double &v : x) // a large common offset punishes E[x^2] - E[x]^2
    v += 1000.0;
  vector<double> expected(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < width; ++c)
      mean += x[r * width + c] / width;
    for (int64_t c = 0; c < width; ++c)
      var += (x[r * width + c] - mean) * (x[r * width + c] - mean) / width;
    for (int64_t c = 0; c < width; ++c)
      expected[r * width + c] =
          (x[r * width + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
  }
  vector<double> y(rows * width), mean(rows), rstd(rows);
  cpu::layerNormForward(rows, width, x.data(), gamma.data(), beta.data(), eps,
                        y.data(), mean.data(), rstd.data());
  EXPECT_LT(relativeError(y, expected), 1e-10);
}

TEST(RmsNormTest, MatchesDirectFormula) {
  std::mt19937_64 rng(107);
  const int64_t rows = 3, width = 10;
  const double eps = 1e-6;
  vector<double> x = randomVector(rng, rows * width, -3, 3),
                 gamma = randomVector(rng, width), expected(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    double meanSq = 0;
    for (int64_t c = 0; c < width; ++c)
      meanSq += x[r * width + c] * x[r * width + c] / width;
    for (int64_t c = 0; c < width; ++c)
      expected[r * width + c] =
          x[r * width + c] / std::sqrt(meanSq + eps) * gamma[c];
  }
  vector<double> y(rows * width), rstd(rows);
  cpu::rmsNormForward(rows, width, x.data(), gamma.data(), eps, y.data(),
                      rstd.data());
  EXPECT_LT(relativeError(y, expected), kReferenceTolerance);
}

/// Materializes the scores, masks, softmaxes and multiplies: the textbook
/// definition, against the streaming kernel.
TEST(AttentionTest, MatchesNaiveTripleLoop) {
  for (bool causal : {true, false}) {
    AttentionDims d{2, 6, 4, 2, 8, causal, 1.0 / std::sqrt(8.0)};
    std::mt19937_64 rng(109 + causal);
    const int64_t qSize = d.batch * d.seq * d.heads * d.headDim;
    const int64_t kvSize = d.batch * d.seq * d.kvHeads * d.headDim;
    vector<double> q = randomVector(rng, qSize, -3, 3),
                   k = randomVector(rng, kvSize, -3, 3),
                   v = randomVector(rng, kvSize);
    vector<double> expected(qSize), expectedLse(d.batch * d.heads * d.seq);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t h = 0; h < d.heads; ++h) {
        int64_t g = h / (d.heads / d.kvHeads);
        for (int64_t i = 0; i < d.seq; ++i) {
          vector<double> s(d.seq, -std::numeric_limits<double>::infinity());
          for (int64_t j = 0; j < d.seq; ++j) {
            if (causal && j > i)
              continue;
            double dotQK = 0;
            for (int64_t c = 0; c < d.headDim; ++c)
              dotQK += q[((b * d.seq + i) * d.heads + h) * d.headDim + c] *
                       k[((b * d.seq + j) * d.kvHeads + g) * d.headDim + c];
            s[j] = dotQK * d.scale;
          }
          double mx = *std::max_element(s.begin(), s.end()), sum = 0;
          for (double sj : s)
            sum += std::exp(sj - mx);
          expectedLse[(b * d.heads + h) * d.seq + i] = mx + std::log(sum);
          for (int64_t c = 0; c < d.headDim; ++c) {
            double o = 0;
            for (int64_t j = 0; j < d.seq; ++j)
              o += std::exp(s[j] - mx) / sum *
                   v[((b * d.seq + j) * d.kvHeads + g) * d.headDim + c];
            expected[((b * d.seq + i) * d.heads + h) * d.headDim + c] = o;
          }
        }
      }
    vector<double> out(qSize), lse(expectedLse.size());
    cpu::attentionForward(d, q.data(), k.data(), v.data(), out.data(),
                          lse.data());
    EXPECT_LT(relativeError(out, expected), kReferenceTolerance)
        << "causal=" << causal;
    EXPECT_LT(relativeError(lse, expectedLse), kReferenceTolerance)
        << "causal=" << causal;
  }
}

/// transformers' LLaMA: cos/sin = cat(freqs, freqs), x * cos +
/// rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1).
TEST(RotaryTest, MatchesHuggingFaceFormula) {
  std::mt19937_64 rng(113);
  const int64_t batch = 1, seq = 7, heads = 2, headDim = 6, offset = 4;
  const double theta = 500000.0;
  vector<double> x = randomVector(rng, batch * seq * heads * headDim),
                 expected(x.size()), y(x.size());
  const int64_t half = headDim / 2;
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < headDim; ++c) {
        double invFreq =
            1.0 / std::pow(theta, double(2 * (c % half)) / headDim);
        double angle = double(s + offset) * invFreq;
        const double *row = &x[(s * heads + h) * headDim];
        double rotated = c < half ? -row[c + half] : row[c - half];
        expected[(s * heads + h) * headDim + c] =
            row[c] * std::cos(angle) + rotated * std::sin(angle);
      }
  cpu::rotaryForward(batch, seq, heads, headDim, offset, theta, x.data(),
                     y.data());
  EXPECT_LT(relativeError(y, expected), kReferenceTolerance);
}

TEST(CrossEntropyTest, MatchesLogSoftmaxMeanOverValidLabels) {
  std::mt19937_64 rng(127);
  const int64_t rows = 5, vocab = 9;
  vector<double> logits = randomVector(rng, rows * vocab, -20, 20);
  vector<std::int32_t> targets = randomIds(rng, rows, vocab);
  targets[3] = kIgnoreIndex;
  double expected = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == kIgnoreIndex)
      continue;
    double sum = 0;
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(logits[r * vocab + c]);
    expected += (std::log(sum) - logits[r * vocab + targets[r]]) / (rows - 1);
  }
  double loss = cpu::crossEntropyForwardBackward<double>(
      rows, vocab, logits.data(), targets.data(), nullptr, nullptr);
  EXPECT_NEAR(loss, expected, 1e-12 * std::abs(expected));

  vector<std::int32_t> allIgnored(rows, kIgnoreIndex);
  vector<double> dLogits(rows * vocab, 1.0);
  EXPECT_EQ(cpu::crossEntropyForwardBackward(rows, vocab, logits.data(),
                                             allIgnored.data(), dLogits.data()),
            0.0);
  EXPECT_EQ(cpu::sumOfSquares(rows * vocab, dLogits.data()), 0.0);

  // Rows padded to `stride` columns (the LM head's aligned logits): the same
  // loss and gradient, bit for bit, a zero gradient on the padding, which is
  // never read (it holds NaN here).
  const int64_t stride = 16;
  vector<double> padded(rows * stride, std::nan("")), packedGrad(rows * vocab);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(&logits[r * vocab], vocab, &padded[r * stride]);
  vector<double> paddedGrad(rows * stride, 1.0);
  double paddedLoss = cpu::crossEntropyForwardBackward(
      rows, stride, padded.data(), targets.data(), paddedGrad.data(),
      static_cast<double *>(nullptr), vocab);
  EXPECT_EQ(paddedLoss,
            cpu::crossEntropyForwardBackward(
                rows, vocab, logits.data(), targets.data(), packedGrad.data()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < stride; ++c)
      EXPECT_EQ(paddedGrad[r * stride + c],
                c < vocab ? packedGrad[r * vocab + c] : 0.0)
          << "row " << r << " column " << c;
}

/// torch.optim.AdamW's update, one scalar at a time.
TEST(AdamWTest, MatchesScalarReferenceOverSeveralSteps) {
  std::mt19937_64 rng(131);
  const int64_t n = 16;
  AdamWConfig config{3e-3, 0.9, 0.95, 1e-8, 0.1};
  vector<double> param = randomVector(rng, n), m(n, 0.0), v(n, 0.0);
  vector<double> refParam = param, refM = m, refV = v;
  const double gradScale = 0.25; // e.g. 1 / loss scale
  for (int64_t step = 1; step <= 4; ++step) {
    vector<double> grad = randomVector(rng, n, -4, 4);
    cpu::adamwStep(makeAdamWStep(config, step, gradScale), n, grad.data(),
                   param.data(), m.data(), v.data());
    for (int64_t i = 0; i < n; ++i) {
      double g = grad[i] * gradScale;
      refParam[i] -= config.lr * config.weightDecay * refParam[i];
      refM[i] = config.beta1 * refM[i] + (1 - config.beta1) * g;
      refV[i] = config.beta2 * refV[i] + (1 - config.beta2) * g * g;
      double mHat = refM[i] / (1 - std::pow(config.beta1, step));
      double vHat = refV[i] / (1 - std::pow(config.beta2, step));
      refParam[i] -= config.lr * mHat / (std::sqrt(vHat) + config.eps);
    }
    ASSERT_LT(relativeError(param, refParam), kReferenceTolerance)
        << "step " << step;
    ASSERT_LT(relativeError(m, refM), kReferenceTolerance);
    ASSERT_LT(relativeError(v, refV), kReferenceTolerance);
  }
}

TEST(GradNormTest, SumOfSquaresAndNonFiniteCheck) {
  vector<float> x = {3.0f, -4.0f, 12.0f};
  EXPECT_EQ(cpu::sumOfSquares(3, x.data()), 169.0);
  EXPECT_FALSE(cpu::hasNonFinite(3, x.data()));
  x[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(cpu::hasNonFinite(3, x.data()));
  x[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(cpu::hasNonFinite(3, x.data()));
  vector<double> d = {1.0, std::nan("")};
  EXPECT_TRUE(cpu::hasNonFinite(2, d.data()));
  EXPECT_FALSE(cpu::hasNonFinite(1, d.data()));
}

TEST(Bf16Test, RoundsToNearestEvenAndKeepsSpecials) {
  auto bits = [](float f) { return floatToBf16(f).bits; };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(-2.5f), 0xc020);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(bits(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just above the halfway point rounds up.
  EXPECT_EQ(bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bits(std::numeric_limits<float>::max()), 0x7f80); // overflows
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  // A NaN whose payload sits only in the low bits must not become infinity.
  float lowPayloadNaN = bitsToFloat(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(lowPayloadNaN))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(-lowPayloadNaN))));

  vector<float> values = {0.0f, 1.0f, -3.140625f, 65280.0f, 1e-3f}, back(5);
  vector<BF16> stored(5);
  cpu::toBf16(5, values.data(), stored.data());
  cpu::fromBf16(5, stored.data(), back.data());
  for (int i = 0; i < 4; ++i) // exactly representable values round-trip
    EXPECT_EQ(back[i], values[i]);
  EXPECT_NEAR(back[4], values[4], values[4] * 0x1p-8);
}

//===----------------------------------------------------------------------===//
// fp32 against fp64 on identical inputs
//===----------------------------------------------------------------------===//

/// Runs `forward` (a generic lambda taking a type tag and returning its
/// outputs as doubles) in both precisions.
template <typename Forward> double fp32VsFp64(Forward forward) {
  return relativeError(forward(float{}), forward(double{}));
}

TEST(Fp32VsFp64Test, ElementwiseAndNorms) {
  std::mt19937_64 rng(137);
  const int64_t rows = 6, width = 32, n = rows * width;
  vector<double> x = randomVector(rng, n, -3, 3), up = randomVector(rng, n),
                 gamma = randomVector(rng, width),
                 beta = randomVector(rng, width);
  for (Activation act : {Activation::ReLU, Activation::GeluErf,
                         Activation::GeluTanh, Activation::SiLU}) {
    EXPECT_LT(fp32VsFp64([&](auto tag) {
                using T = decltype(tag);
                vector<T> xt = convert<T>(x), y(n);
                cpu::activationForward(act, n, xt.data(), y.data());
                return convert<double>(y);
              }),
              kFp32Tolerance);
    EXPECT_LT(fp32VsFp64([&](auto tag) {
                using T = decltype(tag);
                vector<T> xt = convert<T>(x), ut = convert<T>(up), y(n);
                cpu::gatedForward(act, n, xt.data(), ut.data(), y.data());
                return convert<double>(y);
              }),
              kFp32Tolerance);
  }
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> xt = convert<T>(x), g = convert<T>(gamma),
                        b = convert<T>(beta), y(n), mean(rows), rstd(rows);
              cpu::layerNormForward(rows, width, xt.data(), g.data(), b.data(),
                                    T(1e-5), y.data(), mean.data(),
                                    rstd.data());
              return convert<double>(y);
            }),
            kFp32Tolerance);
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> xt = convert<T>(x), g = convert<T>(gamma), y(n),
                        rstd(rows);
              cpu::rmsNormForward(rows, width, xt.data(), g.data(), T(1e-6),
                                  y.data(), rstd.data());
              return convert<double>(y);
            }),
            kFp32Tolerance);
}

TEST(Fp32VsFp64Test, EmbeddingRotaryAttentionLossOptimizer) {
  std::mt19937_64 rng(139);
  const int64_t batch = 2, seq = 8, heads = 4, kvHeads = 2, headDim = 16;
  const int64_t hidden = heads * headDim, vocab = 50;
  vector<std::int32_t> ids = randomIds(rng, batch * seq, vocab);
  vector<double> wte = randomVector(rng, vocab * hidden),
                 wpe = randomVector(rng, seq * hidden),
                 q = randomVector(rng, batch * seq * hidden),
                 k = randomVector(rng, batch * seq * kvHeads * headDim),
                 v = randomVector(rng, k.size());
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> te = convert<T>(wte), pe = convert<T>(wpe),
                        out(batch * seq * hidden);
              cpu::embeddingForward(batch, seq, hidden, ids.data(), te.data(),
                                    pe.data(), static_cast<const T *>(nullptr),
                                    0, out.data());
              return convert<double>(out);
            }),
            kFp32Tolerance);
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> x = convert<T>(q), y(q.size());
              cpu::rotaryForward(batch, seq, heads, headDim, 0, T(10000),
                                 x.data(), y.data());
              return convert<double>(y);
            }),
            kFp32Tolerance);
  for (bool causal : {true, false}) {
    AttentionDims d{batch, seq, heads, kvHeads, headDim, causal, 0.25};
    EXPECT_LT(fp32VsFp64([&](auto tag) {
                using T = decltype(tag);
                vector<T> qt = convert<T>(q), kt = convert<T>(k),
                          vt = convert<T>(v), out(q.size()),
                          lse(batch * heads * seq);
                cpu::attentionForward(d, qt.data(), kt.data(), vt.data(),
                                      out.data(), lse.data());
                return convert<double>(out);
              }),
              kFp32Tolerance);
  }
  const int64_t rows = batch * seq;
  vector<double> logits = randomVector(rng, rows * vocab, -5, 5);
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> l = convert<T>(logits), dLogits(l.size());
              T loss = cpu::crossEntropyForwardBackward(
                  rows, vocab, l.data(), ids.data(), dLogits.data(),
                  static_cast<T *>(nullptr));
              vector<double> result = convert<double>(dLogits);
              result.push_back(loss);
              return result;
            }),
            kFp32Tolerance);
  vector<double> grad = randomVector(rng, wte.size());
  EXPECT_LT(fp32VsFp64([&](auto tag) {
              using T = decltype(tag);
              vector<T> p = convert<T>(wte), g = convert<T>(grad),
                        m(p.size(), T(0)), s(p.size(), T(0));
              for (int64_t step = 1; step <= 3; ++step)
                cpu::adamwStep(makeAdamWStep(AdamWConfig{}, step), p.size(),
                               g.data(), p.data(), m.data(), s.data());
              return convert<double>(p);
            }),
            kFp32Tolerance);
}

} // namespace
