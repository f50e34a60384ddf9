//===- GradCheckTest.cpp - Every backward against finite differences ------===//
//
// In fp64 each test builds a scalar L = sum(w * forward(inputs)) with random
// upstream weights w, runs the backward kernel with dOut = w, and compares
// the analytic gradient of every input with central differences (step 1e-6):
// ||analytic - numeric|| / ||numeric|| < 1e-6. Truncation error is O(1e-12)
// and rounding error O(1e-10) relative at these sizes, so a wrong term in a
// backward (which shows up at O(1)) cannot pass.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "weft/kernels/CpuKernels.h"

#include <gtest/gtest.h>

using namespace weft::kernels;
using namespace weft::kernels::test;
using std::vector;

namespace {

constexpr double kGradTolerance = 1e-6;

class ActivationGradTest : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(11 + int(GetParam()));
  const int64_t n = 64;
  vector<double> x = randomVector(rng, n, -3, 3), w = randomVector(rng, n);
  for (double &v : x) // keep ReLU's kink out of the finite-difference stencil
    if (std::abs(v) < 1e-3)
      v = 0.5;
  vector<double> y(n), dx(n);
  auto loss = [&] {
    cpu::activationForward(GetParam(), n, x.data(), y.data());
    return weightedSum(w, y);
  };
  cpu::activationBackward(GetParam(), n, x.data(), w.data(), dx.data());
  EXPECT_LT(relativeError(dx, numericGradient(x, loss)), kGradTolerance);
}

TEST_P(ActivationGradTest, GatedMatchesFiniteDifferences) {
  std::mt19937_64 rng(23 + int(GetParam()));
  const int64_t n = 48;
  vector<double> gate = randomVector(rng, n, -3, 3), up = randomVector(rng, n),
                 w = randomVector(rng, n);
  for (double &v : gate)
    if (std::abs(v) < 1e-3)
      v = 0.5;
  vector<double> out(n), dGate(n), dUp(n);
  auto loss = [&] {
    cpu::gatedForward(GetParam(), n, gate.data(), up.data(), out.data());
    return weightedSum(w, out);
  };
  cpu::gatedBackward(GetParam(), n, gate.data(), up.data(), w.data(),
                     dGate.data(), dUp.data());
  EXPECT_LT(relativeError(dGate, numericGradient(gate, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dUp, numericGradient(up, loss)), kGradTolerance);
}

INSTANTIATE_TEST_SUITE_P(All, ActivationGradTest,
                         ::testing::Values(Activation::ReLU,
                                           Activation::GeluErf,
                                           Activation::GeluTanh,
                                           Activation::SiLU));

TEST(BiasGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(31);
  const int64_t rows = 5, width = 6;
  vector<double> x = randomVector(rng, rows * width),
                 bias = randomVector(rng, width),
                 w = randomVector(rng, rows * width);
  auto loss = [&] {
    vector<double> y = x;
    cpu::biasAdd(rows, width, bias.data(), y.data());
    return weightedSum(w, y);
  };
  vector<double> dBias(width, 0.0);
  cpu::biasGrad(rows, width, w.data(), dBias.data());
  EXPECT_LT(relativeError(dBias, numericGradient(bias, loss)), kGradTolerance);
}

TEST(LayerNormGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(41);
  const int64_t rows = 4, width = 9;
  const double eps = 1e-5;
  vector<double> x = randomVector(rng, rows * width, -2, 2),
                 gamma = randomVector(rng, width, 0.5, 1.5),
                 beta = randomVector(rng, width),
                 w = randomVector(rng, rows * width);
  vector<double> y(rows * width), mean(rows), rstd(rows);
  auto loss = [&] {
    cpu::layerNormForward(rows, width, x.data(), gamma.data(), beta.data(), eps,
                          y.data(), mean.data(), rstd.data());
    return weightedSum(w, y);
  };
  loss();
  vector<double> dx(rows * width), dGamma(width, 0.0), dBeta(width, 0.0);
  cpu::layerNormBackward(rows, width, x.data(), gamma.data(), mean.data(),
                         rstd.data(), w.data(), dx.data(), dGamma.data(),
                         dBeta.data());
  EXPECT_LT(relativeError(dx, numericGradient(x, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dGamma, numericGradient(gamma, loss)),
            kGradTolerance);
  EXPECT_LT(relativeError(dBeta, numericGradient(beta, loss)), kGradTolerance);
}

TEST(RmsNormGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(43);
  const int64_t rows = 4, width = 9;
  const double eps = 1e-6;
  vector<double> x = randomVector(rng, rows * width, -2, 2),
                 gamma = randomVector(rng, width, 0.5, 1.5),
                 w = randomVector(rng, rows * width);
  vector<double> y(rows * width), rstd(rows);
  auto loss = [&] {
    cpu::rmsNormForward(rows, width, x.data(), gamma.data(), eps, y.data(),
                        rstd.data());
    return weightedSum(w, y);
  };
  loss();
  vector<double> dx(rows * width), dGamma(width, 0.0);
  cpu::rmsNormBackward(rows, width, x.data(), gamma.data(), rstd.data(),
                       w.data(), dx.data(), dGamma.data());
  EXPECT_LT(relativeError(dx, numericGradient(x, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dGamma, numericGradient(gamma, loss)),
            kGradTolerance);
}

TEST(EmbeddingGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(47);
  const int64_t batch = 2, seq = 5, hidden = 4, vocab = 6, offset = 3;
  // Few ids over many tokens: repeated ids exercise the scatter-add.
  vector<std::int32_t> ids = randomIds(rng, batch * seq, 4);
  vector<double> wte = randomVector(rng, vocab * hidden),
                 wpe = randomVector(rng, (seq + offset) * hidden),
                 tokenType = randomVector(rng, hidden),
                 w = randomVector(rng, batch * seq * hidden);
  vector<double> out(batch * seq * hidden);
  auto loss = [&] {
    cpu::embeddingForward(batch, seq, hidden, ids.data(), wte.data(),
                          wpe.data(), tokenType.data(), offset, out.data());
    return weightedSum(w, out);
  };
  vector<double> dWte(wte.size(), 0.0), dWpe(wpe.size(), 0.0),
      dTokenType(hidden, 0.0);
  cpu::embeddingBackward(batch, seq, hidden, ids.data(), w.data(), offset,
                         dWte.data(), dWpe.data(), dTokenType.data());
  EXPECT_LT(relativeError(dWte, numericGradient(wte, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dWpe, numericGradient(wpe, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dTokenType, numericGradient(tokenType, loss)),
            kGradTolerance);
}

// Two vocabulary shards of 4 rows over a 7-word vocabulary (row 3 of the
// second shard is padding that no token selects): the shards' lookups sum to
// the full lookup, and each shard's table gradient matches finite differences.
TEST(VocabEmbeddingGradTest, ShardsSumToFullLookupAndMatchFiniteDifferences) {
  std::mt19937_64 rng(71);
  const int64_t batch = 2, seq = 5, hidden = 3, vocab = 7, shardRows = 4;
  vector<std::int32_t> ids = randomIds(rng, batch * seq, vocab);
  ids[0] = 3; // last row of shard 0
  ids[1] = 4; // first row of shard 1
  vector<double> wte = randomVector(rng, vocab * hidden),
                 w = randomVector(rng, batch * seq * hidden);
  vector<double> full(batch * seq * hidden);
  cpu::embeddingForward(batch, seq, hidden, ids.data(), wte.data(),
                        static_cast<const double *>(nullptr),
                        static_cast<const double *>(nullptr), 0, full.data());
  vector<double> sum(full.size(), 0.0);
  for (int64_t shard = 0; shard < 2; ++shard) {
    int64_t start = shard * shardRows;
    vector<double> table(shardRows * hidden, 0.0);
    for (int64_t i = 0; i < shardRows * hidden; ++i)
      if (start * hidden + i < vocab * hidden)
        table[i] = wte[start * hidden + i];
    table.back() = shard == 1 ? 1e3 : table.back(); // padding: never read
    vector<double> out(full.size());
    auto loss = [&] {
      cpu::vocabEmbeddingForward(batch, seq, hidden, start, shardRows,
                                 ids.data(), table.data(), out.data());
      return weightedSum(w, out);
    };
    loss();
    for (size_t i = 0; i < out.size(); ++i)
      sum[i] += out[i];
    vector<double> dTable(table.size(), 0.0);
    cpu::vocabEmbeddingBackward(batch, seq, hidden, start, shardRows,
                                ids.data(), w.data(), dTable.data());
    EXPECT_LT(relativeError(dTable, numericGradient(table, loss)),
              kGradTolerance);
  }
  EXPECT_LT(relativeError(sum, full), 1e-15);
}

TEST(PositionEmbeddingGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(73);
  const int64_t batch = 2, seq = 4, hidden = 3, offset = 2;
  vector<double> x = randomVector(rng, batch * seq * hidden),
                 wpe = randomVector(rng, (seq + offset) * hidden),
                 w = randomVector(rng, batch * seq * hidden);
  vector<double> out(x.size());
  auto loss = [&] {
    cpu::positionEmbeddingForward(batch, seq, hidden, offset, x.data(),
                                  wpe.data(), out.data());
    return weightedSum(w, out);
  };
  vector<double> dWpe(wpe.size(), 0.0);
  cpu::positionEmbeddingBackward(batch, seq, hidden, offset, w.data(),
                                 dWpe.data());
  EXPECT_LT(relativeError(dWpe, numericGradient(wpe, loss)), kGradTolerance);
  // The input gradient is the upstream gradient itself.
  EXPECT_LT(relativeError(w, numericGradient(x, loss)), kGradTolerance);
}

TEST(RotaryGradTest, MatchesFiniteDifferences) {
  std::mt19937_64 rng(53);
  const int64_t batch = 2, seq = 5, heads = 3, headDim = 8, offset = 2;
  const double theta = 10000.0;
  const int64_t n = batch * seq * heads * headDim;
  vector<double> x = randomVector(rng, n), w = randomVector(rng, n), y(n),
                 dx(n);
  auto loss = [&] {
    cpu::rotaryForward(batch, seq, heads, headDim, offset, theta, x.data(),
                       y.data());
    return weightedSum(w, y);
  };
  cpu::rotaryBackward(batch, seq, heads, headDim, offset, theta, w.data(),
                      dx.data());
  EXPECT_LT(relativeError(dx, numericGradient(x, loss)), kGradTolerance);
}

struct AttentionCase {
  const char *name;
  int64_t heads, kvHeads;
  bool causal;
};

void PrintTo(const AttentionCase &c, std::ostream *os) { *os << c.name; }

class AttentionGradTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGradTest, MatchesFiniteDifferences) {
  const AttentionCase &c = GetParam();
  AttentionDims d{2, 5, c.heads, c.kvHeads, 4, c.causal, 0.5};
  std::mt19937_64 rng(59 + c.heads * 7 + c.kvHeads + c.causal);
  const int64_t qSize = d.batch * d.seq * d.heads * d.headDim;
  const int64_t kvSize = d.batch * d.seq * d.kvHeads * d.headDim;
  vector<double> q = randomVector(rng, qSize, -2, 2),
                 k = randomVector(rng, kvSize, -2, 2),
                 v = randomVector(rng, kvSize), w = randomVector(rng, qSize);
  vector<double> out(qSize), lse(d.batch * d.heads * d.seq);
  auto loss = [&] {
    cpu::attentionForward(d, q.data(), k.data(), v.data(), out.data(),
                          lse.data());
    return weightedSum(w, out);
  };
  loss();
  vector<double> dq(qSize), dk(kvSize), dv(kvSize);
  cpu::attentionBackward(d, q.data(), k.data(), v.data(), out.data(),
                         lse.data(), w.data(), dq.data(), dk.data(), dv.data());
  EXPECT_LT(relativeError(dq, numericGradient(q, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dk, numericGradient(k, loss)), kGradTolerance);
  EXPECT_LT(relativeError(dv, numericGradient(v, loss)), kGradTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    All, AttentionGradTest,
    ::testing::Values(AttentionCase{"CausalMHA", 2, 2, true},
                      AttentionCase{"BidirectionalMHA", 2, 2, false},
                      AttentionCase{"CausalGQA", 4, 2, true},
                      AttentionCase{"BidirectionalMQA", 3, 1, false}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(CrossEntropyGradTest, MatchesFiniteDifferencesWithIgnoredLabels) {
  std::mt19937_64 rng(61);
  const int64_t rows = 6, vocab = 7;
  vector<double> logits = randomVector(rng, rows * vocab, -3, 3);
  vector<std::int32_t> targets = randomIds(rng, rows, vocab);
  targets[1] = targets[4] = kIgnoreIndex;
  auto loss = [&] {
    return cpu::crossEntropyForwardBackward<double>(
        rows, vocab, logits.data(), targets.data(), nullptr, nullptr);
  };
  vector<double> dLogits(rows * vocab);
  cpu::crossEntropyForwardBackward(rows, vocab, logits.data(), targets.data(),
                                   dLogits.data());
  EXPECT_LT(relativeError(dLogits, numericGradient(logits, loss)),
            kGradTolerance);
  for (int64_t c = 0; c < vocab; ++c)
    EXPECT_EQ(dLogits[1 * vocab + c], 0.0);
}

// Two simulated tensor-parallel shards (uneven: 6 + 5 columns of an 11-word
// vocabulary) combine their phase results with MAX/SUM "all-reduces" and
// must reproduce the unsharded loss and gradient.
TEST(CrossEntropyGradTest, VocabParallelShardsMatchUnsharded) {
  std::mt19937_64 rng(67);
  const int64_t rows = 5, vocab = 11, split = 6;
  vector<double> logits = randomVector(rng, rows * vocab, -4, 4);
  vector<std::int32_t> targets = randomIds(rng, rows, vocab);
  targets[2] = kIgnoreIndex;
  targets[0] = 3; // owned by shard 0
  targets[3] = 9; // owned by shard 1

  vector<double> expectedGrad(rows * vocab);
  double expectedLoss = cpu::crossEntropyForwardBackward(
      rows, vocab, logits.data(), targets.data(), expectedGrad.data());

  const int64_t starts[2] = {0, split}, widths[2] = {split, vocab - split};
  vector<double> shard[2];
  for (int s = 0; s < 2; ++s)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < widths[s]; ++c)
        shard[s].push_back(logits[r * vocab + starts[s] + c]);

  vector<double> localMax[2], globalMax(rows);
  for (int s = 0; s < 2; ++s) {
    localMax[s].resize(rows);
    cpu::crossEntropyShardMax(rows, widths[s], shard[s].data(),
                              localMax[s].data());
  }
  for (int64_t r = 0; r < rows; ++r)
    globalMax[r] = std::max(localMax[0][r], localMax[1][r]);

  vector<double> sumExp(rows, 0.0), targetLogit(rows, 0.0);
  for (int s = 0; s < 2; ++s) {
    vector<double> localSum(rows), localTarget(rows);
    cpu::crossEntropyShardSums(rows, widths[s], starts[s], shard[s].data(),
                               targets.data(), globalMax.data(),
                               localSum.data(), localTarget.data());
    for (int64_t r = 0; r < rows; ++r) {
      sumExp[r] += localSum[r];
      targetLogit[r] += localTarget[r];
    }
  }

  vector<double> grad(rows * vocab);
  for (int s = 0; s < 2; ++s) {
    vector<double> localGrad(rows * widths[s]);
    double loss = cpu::crossEntropyShardFinish(
        rows, widths[s], starts[s], shard[s].data(), targets.data(),
        globalMax.data(), sumExp.data(), targetLogit.data(), localGrad.data());
    EXPECT_NEAR(loss, expectedLoss, 1e-12 * std::abs(expectedLoss));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < widths[s]; ++c)
        grad[r * vocab + starts[s] + c] = localGrad[r * widths[s] + c];
  }
  EXPECT_LT(relativeError(grad, expectedGrad), 1e-12);
}

// A vocabulary of 11 words padded to two shards of 6 columns: the padding
// column holds a large logit that must count as -inf (no effect on the loss)
// and gets a zero gradient; the phases still reproduce the unsharded loss and
// gradient, and the sharded loss matches finite differences of the shard.
TEST(CrossEntropyGradTest, VocabParallelPaddingIsMasked) {
  std::mt19937_64 rng(79);
  const int64_t rows = 4, vocab = 11, width = 6;
  vector<double> logits = randomVector(rng, rows * vocab, -4, 4);
  vector<std::int32_t> targets = randomIds(rng, rows, vocab);
  targets[0] = 10; // the last real word, in the padded shard
  vector<double> expectedGrad(rows * vocab);
  double expectedLoss = cpu::crossEntropyForwardBackward(
      rows, vocab, logits.data(), targets.data(), expectedGrad.data());

  vector<double> shard[2];
  for (int s = 0; s < 2; ++s)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        int64_t word = s * width + c;
        shard[s].push_back(word < vocab ? logits[r * vocab + word] : 50.0);
      }
  const int64_t valid[2] = {width, vocab - width};
  // The sharded loss as a function of both shards' logits.
  auto shardedLoss = [&](vector<double> *grads) {
    vector<double> globalMax(rows, -1e300), sumExp(rows, 0.0),
        target(rows, 0.0);
    for (int s = 0; s < 2; ++s) {
      vector<double> localMax(rows), localSum(rows), localTarget(rows);
      cpu::crossEntropyShardMax(rows, width, shard[s].data(), localMax.data(),
                                valid[s]);
      for (int64_t r = 0; r < rows; ++r)
        globalMax[r] = std::max(globalMax[r], localMax[r]);
    }
    for (int s = 0; s < 2; ++s) {
      vector<double> localSum(rows), localTarget(rows);
      cpu::crossEntropyShardSums(rows, width, s * width, shard[s].data(),
                                 targets.data(), globalMax.data(),
                                 localSum.data(), localTarget.data(), valid[s]);
      for (int64_t r = 0; r < rows; ++r) {
        sumExp[r] += localSum[r];
        target[r] += localTarget[r];
      }
    }
    double loss = 0;
    for (int s = 0; s < 2; ++s)
      loss = cpu::crossEntropyShardFinish(
          rows, width, s * width, shard[s].data(), targets.data(),
          globalMax.data(), sumExp.data(), target.data(),
          grads ? grads[s].data() : nullptr, valid[s]);
    return loss;
  };
  vector<double> grads[2] = {vector<double>(rows * width),
                             vector<double>(rows * width)};
  double loss = shardedLoss(grads);
  EXPECT_NEAR(loss, expectedLoss, 1e-12 * std::abs(expectedLoss));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(grads[1][r * width + width - 1], 0.0);
    for (int64_t word = 0; word < vocab; ++word)
      EXPECT_NEAR(grads[word / width][r * width + word % width],
                  expectedGrad[r * vocab + word], 1e-12);
  }
  for (int s = 0; s < 2; ++s)
    EXPECT_LT(
        relativeError(
            grads[s],
            numericGradient(shard[s], [&] { return shardedLoss(nullptr); })),
        kGradTolerance);
}

} // namespace
