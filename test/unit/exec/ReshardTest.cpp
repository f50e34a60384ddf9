//===- ReshardTest.cpp - Checkpoints as global tensors, across layouts ----===//
//
// readGlobalState and reshardCheckpoint on the MLP plans: a serial checkpoint
// converted to ZeRO-1 DP2 holds the same parameters and AdamW moments bit for
// bit, and converted back a 1-rank session resumes from it exactly as from the
// original; the moments are located beside the optimizer's parameter operand;
// another model, a weights snapshot and an existing output are one-line
// errors that write nothing; f16 working copies are read (weights snapshots)
// and rewritten (reshards) as the rounded fp32 masters.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Reshard.h"
#include "e2e/MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/Session.h"
#include "weft/kernels/Common.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <unistd.h>

using namespace weft;
using namespace weft::exec;
namespace fs = std::filesystem;

namespace {

std::string freshDir(const std::string &name) {
  return test::freshTestDir("weft-reshard-", name);
}

using test::errorOf;

std::string writeMlp(const weft::test::MlpConfig &config,
                     const std::string &name) {
  std::string dir = freshDir(name);
  plan::writeBundle(weft::test::buildMlpBundle(config), dir);
  return dir;
}

std::string tokenFile() { return weft::test::testTokenFile(); }

weft::test::MlpConfig serialConfig() {
  weft::test::MlpConfig c;
  c.microBatch = 4;
  return c;
}

weft::test::MlpConfig zeroConfig() {
  weft::test::MlpConfig c;
  c.variant = "zero1";
  c.dp = 2;
  c.microBatch = 2;
  return c;
}

void expectSameState(const GlobalState &a, const GlobalState &b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.dataSamples, b.dataSamples);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const GlobalTensor &x = a.tensors[i], &y = b.tensors[i];
    EXPECT_EQ(x.param->name, y.param->name);
    EXPECT_TRUE(x.value == y.value) << x.param->name << " value";
    EXPECT_TRUE(x.expAvg == y.expAvg) << x.param->name << " exp_avg";
    EXPECT_TRUE(x.expAvgSq == y.expAvgSq) << x.param->name << " exp_avg_sq";
  }
}

} // namespace

TEST(Reshard, MomentsAreLocatedBesideTheOptimizersParameter) {
  plan::Bundle zero = weft::test::buildMlpBundle(zeroConfig());
  const plan::Program &program = zero.programs[0];
  for (const plan::Parameter &param : zero.parameters) {
    ASSERT_EQ(param.shards.size(), 2u); // gathered replica, master shard
    const plan::ShardSpec &replica = param.shards[0], &master = param.shards[1];
    EXPECT_FALSE(locateOptimizerState(program, replica.buffer, replica.offset,
                                      4 * replica.paddedElements));
    auto state = locateOptimizerState(program, master.buffer, master.offset,
                                      4 * master.paddedElements / 2);
    ASSERT_TRUE(state) << param.name;
    EXPECT_NE(program.buffers[size_t(state->expAvgBuffer)].name.find("exp_avg"),
              std::string::npos);
    EXPECT_NE(state->expAvgBuffer, state->expAvgSqBuffer);
  }
}

TEST(Reshard, SerialToZero1AndBackCarriesTheWholeState) {
  std::string serialDir = writeMlp(serialConfig(), "serial");
  std::string zeroDir = writeMlp(zeroConfig(), "zero1");
  plan::Bundle serial = plan::loadBundle(serialDir);
  plan::Bundle zero = plan::loadBundle(zeroDir);
  Options options;
  options.bundleDir = serialDir;
  options.dataPath = tokenFile();
  options.seed = 9;
  std::string ckpt = freshDir("ckpt");
  auto straight = Session::open(options, MPI_COMM_WORLD);
  std::vector<double> losses;
  for (int step = 1; step <= 5; ++step) {
    losses.push_back(straight->runStep().loss);
    if (step == 3)
      straight->saveCheckpoint(ckpt);
  }

  GlobalState original =
      readGlobalState(serial, serialDir, ckpt + "/step-3", true);
  EXPECT_EQ(original.step, 3);
  EXPECT_EQ(original.seed, 9u);
  bool anyMoment = false;
  for (const GlobalTensor &t : original.tensors)
    for (float v : t.expAvgSq)
      anyMoment = anyMoment || v != 0;
  EXPECT_TRUE(anyMoment);

  std::string zeroCk = freshDir("zero-ck");
  ReshardStats stats = reshardCheckpoint(serial, serialDir, ckpt + "/step-3",
                                         zero, zeroDir, zeroCk);
  EXPECT_EQ(stats.dir, zeroCk + "/step-3");
  EXPECT_EQ(stats.ranks, 2);
  EXPECT_TRUE(fs::exists(zeroCk + "/step-3/COMPLETE"));
  EXPECT_FALSE(fs::exists(zeroCk + "/step-3.tmp"));
  expectSameState(original,
                  readGlobalState(zero, zeroDir, zeroCk + "/step-3", true));

  // Back to the serial layout: a resume continues exactly like the original.
  std::string back = freshDir("back");
  reshardCheckpoint(zero, zeroDir, zeroCk + "/step-3", serial, serialDir, back);
  options.resumeDir = back;
  auto resumed = Session::open(options, MPI_COMM_WORLD);
  EXPECT_EQ(resumed->completedSteps(), 3);
  for (int step = 4; step <= 5; ++step)
    EXPECT_EQ(resumed->runStep().loss, losses[size_t(step - 1)]);
}

TEST(Reshard, AnotherModelAWeightsSnapshotAndAnExistingStepAreErrors) {
  std::string serialDir = writeMlp(serialConfig(), "serial");
  plan::Bundle serial = plan::loadBundle(serialDir);
  weft::test::MlpConfig wider = serialConfig();
  wider.hidden = 32;
  std::string widerDir = writeMlp(wider, "wider");
  plan::Bundle widerBundle = plan::loadBundle(widerDir);
  Options options;
  options.bundleDir = serialDir;
  options.dataPath = tokenFile();
  std::string ckpt = freshDir("ckpt");
  auto session = Session::open(options, MPI_COMM_WORLD);
  session->runStep();
  session->saveCheckpoint(ckpt);
  session->saveWeights(ckpt);

  std::string out = freshDir("out") + "/new";
  std::string message = errorOf([&] {
    reshardCheckpoint(serial, serialDir, ckpt + "/step-1", widerBundle,
                      widerDir, out);
  });
  EXPECT_NE(message.find("has shape [256, 32] but [256, 16]"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("(a different model)"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));

  message = errorOf([&] {
    reshardCheckpoint(serial, serialDir, ckpt + "/weights-1", serial, serialDir,
                      out);
  });
  EXPECT_NE(message.find("holds no optimizer state"), std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(out));

  reshardCheckpoint(serial, serialDir, ckpt + "/step-1", serial, serialDir,
                    out);
  message = errorOf([&] {
    reshardCheckpoint(serial, serialDir, ckpt + "/step-1", serial, serialDir,
                      out);
  });
  EXPECT_NE(message.find("already exists"), std::string::npos) << message;
  EXPECT_TRUE(fs::exists(out + "/step-1/COMPLETE"));

  // A save that did not finish (no marker) is no checkpoint to convert or
  // export, even when its files happen to be whole.
  fs::remove(ckpt + "/weights-1/COMPLETE");
  EXPECT_EQ(errorOf([&] {
              readGlobalState(serial, serialDir, ckpt + "/weights-1", false);
            }),
            ckpt + "/weights-1: not a committed checkpoint (no COMPLETE "
                   "marker: its save did not finish)");
}

namespace {

/// A 1-rank mixed-precision plan for one parameter "w" of 6 elements: an
/// f32 master updated by AdamW from an f16 gradient (filled with 0.3) and an
/// f16 working copy the step rounds it into (optimizer_step writes[3]).
struct F16Plan {
  plan::Bundle bundle;
  int64_t master = 0, copy = 0;
  std::string dir;

  F16Plan() {
    using namespace weft::plan;
    weft::test::MlpConfig config;
    config.microBatch = 2;
    bundle.model = {"unit", "f16"};
    bundle.mesh = {1, 1, 1};
    bundle.training = weft::test::mlpTraining(config);
    bundle.training.precision = "fp16";
    bundle.prediction = {0.1, {0}, 0.1};
    bundle.groups.push_back({0, GroupKind::World, {{0}}});
    bundle.rankRoles = {0};
    Program program;
    program.streams.push_back({"compute", {}});
    int64_t end = 0;
    auto add = [&](const std::string &name, DType dtype) {
      Buffer b;
      b.id = int64_t(program.buffers.size());
      b.name = name;
      b.region = Region::Persistent;
      b.dtype = dtype;
      b.size = 6 * elementBytes(dtype);
      b.alignment = 64;
      b.offset = (end + 63) / 64 * 64;
      end = b.offset + b.size;
      program.buffers.push_back(b);
      return BufferRange{b.id, 0, b.size};
    };
    BufferRange masterRange = add("master", DType::F32),
                copyRange = add("params", DType::F16),
                grad = add("grads", DType::F16), m = add("exp_avg", DType::F32),
                v = add("exp_avg_sq", DType::F32);
    master = masterRange.buffer;
    copy = copyRange.buffer;
    program.persistentBytes = end;
    program.arenaBytes = 64;
    Instruction fill;
    fill.opcode = Opcode::Fill;
    fill.dtype = DType::F16;
    fill.value = 0.3;
    fill.writes = {grad};
    fill.phase = "fill";
    Instruction step;
    step.opcode = Opcode::OptimizerStep;
    step.count = 6;
    step.reads = {masterRange, grad, m, v};
    step.writes = {masterRange, m, v, copyRange};
    step.phase = "step";
    program.streams[0].instructions = {fill, step};
    bundle.programs = {program};
    Parameter param;
    param.name = "w";
    param.shape = {2, 3};
    param.init = {"normal", 0.5};
    param.hfName = "w";
    param.shards = {{0, master, 0, -1, 0, 0, 1, 6},
                    {0, copy, 0, -1, 0, 0, 1, 6}};
    bundle.parameters = {param};
    dir = freshDir("f16-plan");
    plan::writeBundle(bundle, dir);
    bundle = plan::loadBundle(dir);
  }

  Options options() const {
    Options o;
    o.bundleDir = dir;
    o.dataPath = tokenFile();
    o.seed = 4;
    return o;
  }
};

std::vector<float> floatsOf(const Session &session, int64_t buffer) {
  Operand op = session.buffer(buffer);
  return std::vector<float>(op.as<float>(), op.as<float>() + op.elements());
}

std::vector<uint16_t> f16BitsOf(const Session &session, int64_t buffer) {
  Operand op = session.buffer(buffer);
  return std::vector<uint16_t>(op.as<uint16_t>(),
                               op.as<uint16_t>() + op.elements());
}

std::vector<uint16_t> roundedToF16(const std::vector<float> &values) {
  std::vector<uint16_t> bits;
  for (float x : values)
    bits.push_back(kernels::floatToF16(x).bits);
  return bits;
}

} // namespace

TEST(Reshard, F16WorkingCopiesAreReadAndWrittenAsRoundedMasters) {
  F16Plan plan;
  std::string ckpt = freshDir("f16-ckpt");
  auto session = Session::open(plan.options(), MPI_COMM_WORLD);
  // Initialization fills the f16 copy with the rounded initial master.
  ASSERT_EQ(f16BitsOf(*session, plan.copy),
            roundedToF16(floatsOf(*session, plan.master)));
  for (int step = 0; step < 3; ++step)
    session->runStep();
  session->saveCheckpoint(ckpt);
  session->saveWeights(ckpt);
  std::vector<float> master = floatsOf(*session, plan.master);
  std::vector<uint16_t> copy = f16BitsOf(*session, plan.copy);
  ASSERT_EQ(copy, roundedToF16(master));

  // A full checkpoint is read from the fp32 master; a weights snapshot (the
  // Params group) from the f16 copy.
  GlobalState full =
      readGlobalState(plan.bundle, plan.dir, ckpt + "/step-3", true);
  ASSERT_EQ(full.tensors.size(), 1u);
  EXPECT_EQ(full.tensors[0].value, master);
  GlobalState weights =
      readGlobalState(plan.bundle, plan.dir, ckpt + "/weights-3", false);
  std::vector<float> widened;
  for (uint16_t bits : copy)
    widened.push_back(kernels::f16ToFloat(kernels::F16{bits}));
  EXPECT_EQ(weights.tensors[0].value, widened);
  EXPECT_NE(widened, master) << "the test needs masters inexact in f16";

  // Resharded, the copy is rewritten from the master: a resume holds the
  // same bytes.
  std::string out = freshDir("f16-out");
  reshardCheckpoint(plan.bundle, plan.dir, ckpt + "/step-3", plan.bundle,
                    plan.dir, out);
  Options options = plan.options();
  options.resumeDir = out;
  auto resumed = Session::open(options, MPI_COMM_WORLD);
  EXPECT_EQ(floatsOf(*resumed, plan.master), master);
  EXPECT_EQ(f16BitsOf(*resumed, plan.copy), copy);
}
