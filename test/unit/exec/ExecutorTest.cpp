//===- ExecutorTest.cpp - Sessions on 1-rank bundles ----------------------===//
//
// Each test writes a small bundle, opens it as world size 1 and checks the
// memory after one step: every opcode, event ordering between streams, the
// kernel ABI checks, parameter initialization and the LR schedule.
//
//===----------------------------------------------------------------------===//

#include "e2e/MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/KernelRegistry.h"
#include "weft/exec/Session.h"
#include "weft/kernels/CpuKernels.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <unistd.h>

using namespace weft;
using namespace weft::plan;
using exec::Session;

namespace {

int counter = 0;

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "weft-exec-" + std::to_string(::getpid()) +
         "-" + std::to_string(counter++) + "-" + name;
}

std::string tokenFile() { return weft::test::testTokenFile(); }

/// One rank, one role, buffers laid out by add(), instructions per stream.
struct OneRank {
  Bundle bundle;
  Program program;
  int64_t persistentEnd = 0, arenaEnd = 0;

  OneRank() {
    bundle.model = {"unit", "test"};
    bundle.mesh = {1, 1, 1};
    weft::test::MlpConfig config;
    config.microBatch = 2;
    bundle.training = weft::test::mlpTraining(config);
    bundle.prediction = {0.1, {0}, 0.1};
    bundle.groups.push_back({0, GroupKind::World, {{0}}});
    bundle.rankRoles = {0};
    program.streams.push_back({"compute", {}});
  }
  int64_t add(Region region, int64_t elements, DType dtype = DType::F32,
              const std::string &name = "") {
    Buffer b;
    b.id = int64_t(program.buffers.size());
    b.name = name.empty() ? "b" + std::to_string(b.id) : name;
    b.region = region;
    b.dtype = dtype;
    b.size = elements * elementBytes(dtype);
    b.alignment = 64;
    int64_t &end = region == Region::Persistent ? persistentEnd : arenaEnd;
    b.offset = (end + 63) / 64 * 64;
    end = b.offset + b.size;
    program.buffers.push_back(b);
    return b.id;
  }
  BufferRange all(int64_t id) const {
    return {id, 0, program.buffers[size_t(id)].size};
  }
  Instruction &emit(Opcode opcode, std::vector<BufferRange> reads,
                    std::vector<BufferRange> writes, size_t stream = 0) {
    Instruction inst;
    inst.opcode = opcode;
    inst.reads = std::move(reads);
    inst.writes = std::move(writes);
    inst.phase =
        "p" + std::to_string(program.streams[stream].instructions.size());
    program.streams[stream].instructions.push_back(inst);
    return program.streams[stream].instructions.back();
  }
  std::unique_ptr<Session> open() {
    program.persistentBytes = std::max<int64_t>(persistentEnd, 64);
    program.arenaBytes = std::max<int64_t>(arenaEnd, 64);
    bundle.programs = {program};
    std::string dir = tempPath("bundle");
    writeBundle(bundle, dir);
    exec::Options options;
    options.bundleDir = dir;
    options.dataPath = tokenFile();
    options.seed = 3;
    options.trace = true;
    return Session::open(options, MPI_COMM_WORLD);
  }
};

template <typename T> std::vector<T> read(const Session &s, int64_t id) {
  exec::Operand op = s.buffer(id);
  const T *data = op.as<T>();
  return std::vector<T>(data, data + op.bytes / int64_t(sizeof(T)));
}

template <typename T>
void write(const Session &s, int64_t id, const std::vector<T> &values) {
  std::copy(values.begin(), values.end(), s.buffer(id).as<T>());
}

std::string openError(OneRank &rank) {
  try {
    rank.open();
  } catch (const exec::Error &error) {
    return error.what();
  }
  return "no error";
}

} // namespace

TEST(KernelRegistry, IsSortedAndFindsEveryEntry) {
  const auto &registry = exec::kernelRegistry();
  for (size_t i = 1; i < registry.size(); ++i)
    EXPECT_LT(registry[i - 1].name, registry[i].name);
  for (const exec::KernelSpec &spec : registry)
    EXPECT_EQ(exec::findKernel(spec.name), &spec);
  EXPECT_EQ(exec::findKernel("embed"), nullptr);
}

TEST(Executor, GemmIsColumnMajorBlas) {
  // Column-major C[2x3] = A^T[2x4] B[4x3] + 0.5 C.
  OneRank r;
  int64_t a = r.add(Region::Persistent, 8), b = r.add(Region::Persistent, 12),
          c = r.add(Region::Persistent, 6);
  Instruction &gemm =
      r.emit(Opcode::Gemm, {r.all(a), r.all(b), r.all(c)}, {r.all(c)});
  gemm.gemm = {true, false, 2, 3, 4, 4, 4, 2, 1.0, 0.5};
  auto session = r.open();
  std::vector<float> A(8), B(12), C(6, 1.0f);
  for (int i = 0; i < 8; ++i)
    A[size_t(i)] = float(i + 1);
  for (int i = 0; i < 12; ++i)
    B[size_t(i)] = float(i % 5) - 2.0f;
  write(*session, a, A);
  write(*session, b, B);
  write(*session, c, C);
  session->runStep();
  std::vector<float> got = read<float>(*session, c);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      float expected = 0.5f;
      for (int p = 0; p < 4; ++p) // A is 4x2 col-major: A(p, i) = A[i*4 + p]
        expected += A[size_t(i * 4 + p)] * B[size_t(j * 4 + p)];
      EXPECT_FLOAT_EQ(got[size_t(j * 2 + i)], expected) << i << "," << j;
    }
}

TEST(Executor, Bf16GemmComputesInFp32) {
  OneRank r;
  int64_t a = r.add(Region::Persistent, 4, DType::BF16),
          b = r.add(Region::Persistent, 4, DType::BF16),
          c = r.add(Region::Persistent, 4, DType::BF16);
  Instruction &gemm = r.emit(Opcode::Gemm, {r.all(a), r.all(b)}, {r.all(c)});
  gemm.gemm = {false, false, 2, 2, 2, 2, 2, 2, 1.0, 0.0};
  gemm.dtype = DType::BF16;
  auto session = r.open();
  auto bf = [](std::vector<float> v) {
    std::vector<kernels::BF16> out;
    for (float x : v)
      out.push_back(kernels::floatToBf16(x));
    return out;
  };
  write(*session, a, bf({1, 2, 3, 4})); // col-major [[1,3],[2,4]]
  write(*session, b, bf({1, 0, 0, 1})); // identity
  session->runStep();
  std::vector<kernels::BF16> got = read<kernels::BF16>(*session, c);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(kernels::bf16ToFloat(got[size_t(i)]), float(i + 1));
}

TEST(Executor, FillCopyAndSingleRankCollectives) {
  OneRank r;
  int64_t x = r.add(Region::Persistent, 4), y = r.add(Region::Persistent, 4),
          z = r.add(Region::Persistent, 4),
          i = r.add(Region::Persistent, 3, DType::I32);
  r.emit(Opcode::Fill, {}, {r.all(x)}).value = 2.5;
  Instruction &fillInt = r.emit(Opcode::Fill, {}, {r.all(i)});
  fillInt.value = -7;
  fillInt.dtype = DType::I32;
  r.emit(Opcode::Copy, {{x, 0, 8}}, {{y, 8, 8}});
  for (Opcode op :
       {Opcode::AllReduce, Opcode::AllGather, Opcode::ReduceScatter}) {
    Instruction &inst = r.emit(op, {r.all(x)}, {r.all(z)});
    inst.group = 0;
    inst.count = 4;
  }
  Instruction &bcast = r.emit(Opcode::Broadcast, {}, {r.all(z)});
  bcast.group = 0;
  bcast.count = 4;
  bcast.peer = 0;
  auto session = r.open();
  session->runStep();
  EXPECT_EQ(read<float>(*session, x), std::vector<float>(4, 2.5f));
  EXPECT_EQ(read<float>(*session, y), (std::vector<float>{0, 0, 2.5f, 2.5f}));
  EXPECT_EQ(read<float>(*session, z), std::vector<float>(4, 2.5f));
  EXPECT_EQ(read<int32_t>(*session, i), std::vector<int32_t>(3, -7));
}

TEST(Executor, EventsOrderStreams) {
  // Stream 0 waits for stream 1's record before copying what stream 1
  // filled; the scheduler visits stream 0 first, so only the event makes
  // the copy see the fill.
  OneRank r;
  r.program.streams.push_back({"side", {}});
  r.program.numEvents = 1;
  int64_t x = r.add(Region::Persistent, 2), y = r.add(Region::Persistent, 2);
  r.emit(Opcode::WaitEvent, {}, {}, 0).event = 0;
  r.emit(Opcode::Copy, {r.all(x)}, {r.all(y)}, 0);
  r.emit(Opcode::Fill, {}, {r.all(x)}, 1).value = 4;
  r.emit(Opcode::RecordEvent, {}, {}, 1).event = 0;
  auto session = r.open();
  for (int step = 0; step < 2; ++step) {
    write(*session, x, std::vector<float>{0, 0});
    session->runStep();
    EXPECT_EQ(read<float>(*session, y), (std::vector<float>{4, 4}));
  }
  // Per step: stream 0 blocks on the wait, stream 1 runs fill and record,
  // then stream 0 runs wait and copy.
  const auto &trace = session->trace();
  ASSERT_EQ(trace.size(), 8u);
  EXPECT_EQ(trace[0].stream, 1);
  EXPECT_EQ(trace[1].stream, 1);
  EXPECT_EQ(trace[2].stream, 0);
  EXPECT_EQ(trace[3].instruction, 1);
}

TEST(Executor, LoadBatchReadsTheGlobalOrder) {
  OneRank r;
  int64_t tokens = r.add(Region::Arena, 32, DType::I32),
          targets = r.add(Region::Arena, 32, DType::I32),
          keep = r.add(Region::Persistent, 32, DType::I32);
  r.emit(Opcode::LoadBatch, {}, {r.all(tokens), r.all(targets)});
  r.emit(Opcode::Copy, {r.all(targets)}, {r.all(keep)});
  auto session = r.open();
  exec::DataLoader data(tokenFile(), 16, 2);
  std::vector<int32_t> in(32), expected(32);
  for (int64_t step = 0; step < 3; ++step) {
    session->runStep();
    data.read(step, 0, 2, in.data(), expected.data());
    EXPECT_EQ(read<int32_t>(*session, tokens), in);
    EXPECT_EQ(read<int32_t>(*session, keep), expected);
  }
}

TEST(Executor, GradNormClipAndAdamW) {
  OneRank r;
  int64_t p = r.add(Region::Persistent, 3), g = r.add(Region::Persistent, 3),
          m = r.add(Region::Persistent, 3), v = r.add(Region::Persistent, 3),
          copy = r.add(Region::Persistent, 3, DType::BF16),
          sum = r.add(Region::Persistent, 1);
  r.emit(Opcode::GradNorm, {r.all(g)}, {r.all(sum)});
  r.emit(Opcode::Clip, {r.all(sum), r.all(g)}, {r.all(g)});
  Instruction &step =
      r.emit(Opcode::OptimizerStep, {r.all(p), r.all(g), r.all(m), r.all(v)},
             {r.all(p), r.all(m), r.all(v), r.all(copy)});
  step.count = 3;
  auto session = r.open();
  write(*session, p, std::vector<float>{1, -1, 0.5f});
  write(*session, g, std::vector<float>{3, 4, 0}); // norm 5 > clip 1
  exec::StepStats stats = session->runStep();
  EXPECT_FLOAT_EQ(read<float>(*session, sum)[0], 25.0f);
  EXPECT_DOUBLE_EQ(stats.gradNorm, 5.0);
  EXPECT_EQ(read<float>(*session, g), (std::vector<float>{0.6f, 0.8f, 0}));
  const TrainingInfo &t = session->bundle().training;
  kernels::AdamWStep adam = kernels::makeAdamWStep(
      {exec::learningRate(t, 1), t.beta1, t.beta2, t.eps, t.weightDecay}, 1);
  std::vector<float> P = {1, -1, 0.5f}, G = {0.6f, 0.8f, 0}, M(3), V(3);
  for (size_t i = 0; i < 3; ++i)
    kernels::adamwElement(adam, G[i], P[i], M[i], V[i]);
  EXPECT_EQ(read<float>(*session, p), P);
  EXPECT_EQ(read<float>(*session, m), M);
  EXPECT_EQ(read<float>(*session, v), V);
  std::vector<kernels::BF16> low = read<kernels::BF16>(*session, copy);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(low[i].bits, kernels::floatToBf16(P[i]).bits);
  EXPECT_TRUE(std::isnan(stats.loss)); // no 'loss' buffer
}

TEST(Executor, KernelOperandSizeMismatchIsRejectedAtOpen) {
  OneRank r;
  Kernel k;
  k.id = 0;
  k.name = "residual_add";
  k.source = "kernels/residual_add.cu";
  k.constants = {{"n", 8}};
  r.bundle.kernels = {k};
  r.bundle.files[k.source] = "//\n";
  int64_t a = r.add(Region::Persistent, 8), b = r.add(Region::Persistent, 4);
  Instruction &inst = r.emit(Opcode::Kernel, {r.all(a), r.all(b)}, {r.all(a)});
  inst.kernel = 0;
  EXPECT_EQ(
      openError(r),
      "role 0 stream 0 'compute' instruction 0 (p0): kernel "
      "'residual_add' operand reads[1] has 16 bytes, expected 32 (8 f32)");
}

TEST(Executor, UnknownKernelAndConstantsAreRejected) {
  OneRank r;
  Kernel k;
  k.id = 0;
  k.name = "no_such_kernel";
  k.source = "kernels/x.cu";
  r.bundle.kernels = {k};
  r.bundle.files[k.source] = "//\n";
  int64_t a = r.add(Region::Persistent, 8);
  r.emit(Opcode::Kernel, {r.all(a)}, {r.all(a)}).kernel = 0;
  EXPECT_EQ(openError(r), "role 0 stream 0 'compute' instruction 0 (p0): "
                          "kernel 'no_such_kernel' is not in the CPU kernel "
                          "registry");
  r.bundle.kernels[0].name = "residual_add";
  r.bundle.kernels[0].constants = {{"n", 8}, {"widht", 3}};
  EXPECT_EQ(openError(r),
            "kernels[0]: kernel 'residual_add' has no constant 'widht'");
}

TEST(Executor, WorldSizeMismatchIsRejected) {
  OneRank r;
  r.bundle.mesh = {2, 1, 1};
  r.bundle.rankRoles = {0, 0};
  r.bundle.groups[0].groups = {{0, 1}};
  r.bundle.training.globalBatch = 4;
  std::string error = openError(r);
  EXPECT_NE(error.find("the plan needs 2 ranks (dp 2 x pp 1 x tp 1) but the "
                       "MPI world has 1"),
            std::string::npos)
      << error;
}

TEST(Executor, ParameterShardsTakeTheirSliceOfTheGlobalInit) {
  OneRank r;
  int64_t slice = r.add(Region::Persistent, 6),
          whole = r.add(Region::Persistent, 6);
  Parameter param;
  param.name = "w";
  param.shape = {2, 3};
  param.init = {"normal", 0.5};
  param.hfName = "w";
  param.shards = {{0, slice, 0, 1, 1, 2, 1, 6}, // columns 1..2, padded to 6
                  {0, whole, 0, -1, 0, 0, 1, 6}};
  r.bundle.parameters = {param};
  auto session = r.open();
  std::vector<float> got = read<float>(*session, slice);
  std::vector<float> all = read<float>(*session, whole);
  const int64_t globals[4] = {1, 2, 4, 5};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i], float(exec::initialValue(3, param, globals[i])));
    EXPECT_EQ(got[i], all[size_t(globals[i])]);
  }
  EXPECT_EQ(got[4], 0.0f); // padding
  EXPECT_EQ(got[5], 0.0f);
  EXPECT_NE(exec::initialValue(3, param, 0), exec::initialValue(4, param, 0));
}

TEST(Executor, LearningRateWarmsUpThenDecays) {
  TrainingInfo t;
  t.lr = 1.0;
  t.minLr = 0.1;
  t.warmupSteps = 4;
  t.decaySteps = 14;
  EXPECT_DOUBLE_EQ(exec::learningRate(t, 1), 0.25);
  EXPECT_DOUBLE_EQ(exec::learningRate(t, 4), 1.0);
  EXPECT_NEAR(exec::learningRate(t, 9), 0.55, 1e-12); // cosine midpoint
  EXPECT_DOUBLE_EQ(exec::learningRate(t, 14), 0.1);
  EXPECT_DOUBLE_EQ(exec::learningRate(t, 100), 0.1);
}

TEST(Executor, SerialMlpMatchesTheReferenceBitForBit) {
  weft::test::MlpConfig config;
  config.microBatch = 2;
  std::string dir = tempPath("mlp");
  writeBundle(weft::test::buildMlpBundle(config), dir);
  exec::Options options;
  options.bundleDir = dir;
  options.dataPath = tokenFile();
  options.seed = 11;
  auto session = Session::open(options, MPI_COMM_WORLD);
  auto expected = weft::test::referenceTraining(config, tokenFile(), 4, 11);
  for (int step = 0; step < 4; ++step) {
    exec::StepStats stats = session->runStep();
    EXPECT_EQ(float(stats.loss), float(expected[size_t(step)].loss));
    EXPECT_DOUBLE_EQ(stats.gradNorm, expected[size_t(step)].gradNorm);
  }
}
