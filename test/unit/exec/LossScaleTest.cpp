//===- LossScaleTest.cpp - Dynamic loss scaling on the CPU backend --------===//
//
// The loss scaler (docs/runtime.md, "Loss scaling") on the MLP bundle:
//  - a power-of-two scale changes no result: losses, gradient norms, weights
//    and AdamW moments are bit-identical to the unscaled run while the scale
//    grows every growth_interval steps;
//  - a scale so large that the gradients' sum of squares overflows skips the
//    update (weights and moments untouched, AdamW's step not counted) and
//    backs the scale off until steps apply again;
//  - the scaler's state is part of a checkpoint: a resumed run continues bit
//    for bit;
//  - impossible settings are one-line errors.
//
//===----------------------------------------------------------------------===//

#include "e2e/MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Session.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

using namespace weft;
using namespace weft::exec;

namespace {

std::string freshDir(const std::string &name) {
  return test::freshTestDir("weft-lossscale-", name);
}

std::string tokenFile() { return test::testTokenFile(); }

/// Options opening an MLP bundle (`variant`) with loss-scale policy `scale`;
/// `edit` may change the bundle before it is written. `separateClip`: a
/// clip instruction before AdamW instead of optimizer_steps that read the
/// sum of squares (test::MlpConfig).
Options mlpOptions(const plan::LossScale &scale,
                   const std::string &variant = "serial",
                   const std::function<void(plan::Bundle &)> &edit = {},
                   bool separateClip = false) {
  test::MlpConfig config;
  config.variant = variant;
  config.separateClip = separateClip;
  config.microBatch = 2;
  config.accum = 2;
  plan::Bundle bundle = test::buildMlpBundle(config);
  bundle.training.lossScale = scale;
  if (edit)
    edit(bundle);
  std::string dir = freshDir("bundle");
  plan::writeBundle(bundle, dir);
  Options options;
  options.bundleDir = dir;
  options.dataPath = tokenFile();
  options.seed = 3;
  return options;
}

plan::LossScale dynamicScale(double initial, int64_t interval) {
  plan::LossScale scale;
  scale.dynamic = true;
  scale.initial = initial;
  scale.growthInterval = interval;
  scale.backoff = 0.5;
  return scale;
}

/// The persistent buffers an update changes and whose bytes do not depend
/// on the loss scale: the weights and the AdamW moments (gradients and their
/// sum of squares carry the scale; the loss changes every step), by name.
std::map<std::string, std::string> unscaledState(const Session &session) {
  std::map<std::string, std::string> state;
  for (const plan::Buffer &b : session.rankProgram().program->buffers) {
    bool scaled = b.name.find("grad") != std::string::npos;
    if (b.region != plan::Region::Persistent || scaled || b.name == "loss")
      continue;
    Operand op = session.buffer(b.id);
    state[b.name].assign(reinterpret_cast<const char *>(op.data),
                         size_t(op.bytes));
  }
  return state;
}

TEST(LossScale, PowerOfTwoScaleChangesNoResult) {
  auto plain = Session::open(mlpOptions(plan::LossScale()), MPI_COMM_WORLD);
  auto scaled =
      Session::open(mlpOptions(dynamicScale(1024, 2)), MPI_COMM_WORLD);
  const double expectedScale[] = {1024, 1024, 2048, 2048, 4096, 4096};
  for (int step = 0; step < 6; ++step) {
    StepStats a = plain->runStep(), b = scaled->runStep();
    EXPECT_FALSE(b.skipped);
    EXPECT_EQ(b.lossScale, expectedScale[step]) << "step " << step + 1;
    EXPECT_EQ(a.lossScale, 1);
    // Bit for bit: scaling by 2^k commutes with every rounding.
    EXPECT_EQ(a.loss, b.loss) << "step " << step + 1;
    EXPECT_EQ(a.gradNorm, b.gradNorm) << "step " << step + 1;
  }
  EXPECT_TRUE(unscaledState(*plain) == unscaledState(*scaled));
  LossScaleState state = scaled->lossScaleState();
  EXPECT_EQ(state.scale, 8192); // grown after step 6 too
  EXPECT_EQ(state.goodSteps, 0);
  EXPECT_EQ(state.optimizerSteps, 6);
}

/// (2^70)^2 times the squared norm is far past float's 2^128: the global
/// sum of squares is inf until the scale has backed off far enough.
void overflowSkipsTheUpdateAndBacksOff(bool separateClip) {
  auto session =
      Session::open(mlpOptions(dynamicScale(std::ldexp(1.0, 70), 1000),
                               "serial", {}, separateClip),
                    MPI_COMM_WORLD);
  auto before = unscaledState(*session);
  int skipped = 0;
  double scale = std::ldexp(1.0, 70);
  for (int step = 1; step <= 12; ++step) {
    StepStats stats = session->runStep();
    EXPECT_EQ(stats.lossScale, scale) << "step " << step;
    EXPECT_TRUE(std::isfinite(stats.loss)) << "step " << step;
    auto after = unscaledState(*session);
    if (stats.skipped) {
      ASSERT_EQ(skipped, step - 1) << "skips come first, then none";
      ++skipped;
      EXPECT_TRUE(std::isnan(stats.gradNorm));
      EXPECT_TRUE(after == before) << "a skipped step changed the state";
      scale /= 2;
    } else {
      EXPECT_TRUE(std::isfinite(stats.gradNorm));
      EXPECT_TRUE(after != before)
          << "an applied step left the state unchanged";
    }
    before = after;
  }
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 12);
  LossScaleState state = session->lossScaleState();
  EXPECT_EQ(state.optimizerSteps, 12 - skipped);
  EXPECT_EQ(state.goodSteps, 12 - skipped);
  EXPECT_EQ(state.scale, scale);
}

TEST(LossScale, OverflowSkipsTheUpdateAndBacksOff) {
  // The optimizer_steps read the sum of squares: the backend skips them.
  overflowSkipsTheUpdateAndBacksOff(false);
}

TEST(LossScale, OverflowBeforeASeparateClipSkipsTheUpdate) {
  // The older form: the executor decides at the clip.
  overflowSkipsTheUpdateAndBacksOff(true);
}

TEST(LossScale, SeparateClipAndClipInsideAdamWAreBitIdentical) {
  // fp32: scaling a gradient in place by float(c / n) and multiplying it by
  // float(c / n) on its way into AdamW round the same product; the loss
  // scale is a power of two. Weights, moments and norms agree bit for bit.
  plan::LossScale scale = dynamicScale(1024, 2);
  const double gradClip = 0.05; // below the MLP's first norms
  auto tightClip = [&](plan::Bundle &bundle) {
    bundle.training.gradClip = gradClip;
  };
  auto fused =
      Session::open(mlpOptions(scale, "serial", tightClip), MPI_COMM_WORLD);
  auto separate = Session::open(mlpOptions(scale, "serial", tightClip, true),
                                MPI_COMM_WORLD);
  bool clipped = false;
  for (int step = 1; step <= 6; ++step) {
    StepStats a = fused->runStep(), b = separate->runStep();
    EXPECT_EQ(a.loss, b.loss) << "step " << step;
    EXPECT_EQ(a.gradNorm, b.gradNorm) << "step " << step;
    clipped = clipped || a.gradNorm > gradClip;
  }
  EXPECT_TRUE(clipped) << "no step clipped: the comparison shows nothing";
  EXPECT_TRUE(unscaledState(*fused) == unscaledState(*separate));
}

TEST(LossScale, ResumeContinuesTheScalerBitForBit) {
  Options options = mlpOptions(dynamicScale(std::ldexp(1.0, 66), 2));
  std::string checkpoints = freshDir("ck");
  auto whole = Session::open(options, MPI_COMM_WORLD);
  std::vector<StepStats> expected;
  for (int step = 1; step <= 7; ++step) {
    expected.push_back(whole->runStep());
    if (step == 3)
      whole->saveCheckpoint(checkpoints);
  }
  options.resumeDir = checkpoints;
  auto resumed = Session::open(options, MPI_COMM_WORLD);
  ASSERT_EQ(resumed->completedSteps(), 3);
  for (int step = 4; step <= 7; ++step) {
    StepStats stats = resumed->runStep();
    const StepStats &want = expected[size_t(step - 1)];
    EXPECT_EQ(stats.loss, want.loss) << "step " << step;
    EXPECT_EQ(stats.lossScale, want.lossScale) << "step " << step;
    EXPECT_EQ(stats.skipped, want.skipped) << "step " << step;
  }
  EXPECT_EQ(resumed->lossScaleState(), whole->lossScaleState());
  EXPECT_TRUE(unscaledState(*resumed) == unscaledState(*whole));
}

TEST(LossScale, BadSettingsAndStateAreOneLineErrors) {
  plan::LossScale noGrowth = dynamicScale(1024, 0);
  EXPECT_NE(test::errorOf([&] {
              Session::open(mlpOptions(noGrowth), MPI_COMM_WORLD);
            }).find("dynamic loss_scale needs growth_interval >= 1"),
            std::string::npos);
  // The overflow check needs the global sum of squares: optimizer_steps
  // that do not read it, and no clip that does.
  auto dropNormReads = [](plan::Bundle &bundle) {
    for (plan::Instruction &inst : bundle.programs[0].streams[0].instructions)
      if (plan::readsGradientNorm(inst))
        inst.reads.pop_back();
  };
  EXPECT_NE(
      test::errorOf([&] {
        Session::open(
            mlpOptions(dynamicScale(1024, 2), "serial", dropNormReads),
            MPI_COMM_WORLD);
      })
          .find("dynamic loss scaling needs a clip instruction, or "
                "optimizer_steps that read the gradients' sum of squares"),
      std::string::npos);
  // The same program under a static scale is fine.
  EXPECT_NO_THROW(Session::open(
      mlpOptions(plan::LossScale(), "serial", dropNormReads), MPI_COMM_WORLD));
  plan::LossScale zero;
  zero.initial = 0;
  EXPECT_NE(test::errorOf([&] {
              Session::open(mlpOptions(zero), MPI_COMM_WORLD);
            }).find("loss_scale.initial must be positive"),
            std::string::npos);

  // A checkpoint of a static plan has no scaler state: a dynamic plan with
  // the same hash cannot exist, so edit the manifest to drop it instead.
  Options options = mlpOptions(dynamicScale(1024, 2));
  std::string checkpoints = freshDir("ck");
  {
    auto session = Session::open(options, MPI_COMM_WORLD);
    session->runStep();
    session->saveCheckpoint(checkpoints);
  }
  std::string manifestPath = checkpoints + "/step-1/manifest.json";
  std::string text = [&] {
    std::ifstream in(manifestPath);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  Manifest manifest = parseManifest(manifestPath, text);
  ASSERT_TRUE(manifest.lossScale.has_value());
  EXPECT_EQ(manifest.lossScale->optimizerSteps, 1);
  manifest.lossScale.reset();
  {
    std::ofstream out(manifestPath, std::ios::trunc);
    out << manifestJson(manifest);
  }
  options.resumeDir = checkpoints;
  EXPECT_NE(test::errorOf([&] {
              Session::open(options, MPI_COMM_WORLD);
            }).find("no 'loss_scale' state"),
            std::string::npos);
  // An impossible recorded state is refused when the manifest is parsed
  // (a manifest without its own checksum, so that the edit reaches the
  // state check).
  std::string bad = text;
  size_t checksum = bad.find("\n  \"manifest_crc32c\"");
  ASSERT_NE(checksum, std::string::npos) << text;
  bad.erase(checksum, bad.find('\n', checksum + 1) - checksum);
  size_t at = bad.find("\"optimizer_steps\": 1");
  ASSERT_NE(at, std::string::npos) << text;
  bad.replace(at, std::strlen("\"optimizer_steps\": 1"),
              "\"optimizer_steps\": 5");
  EXPECT_NE(
      test::errorOf([&] {
        parseManifest(manifestPath, bad);
      }).find(": loss_scale.optimizer_steps: expected an integer in [0, "),
      std::string::npos);
}

} // namespace
