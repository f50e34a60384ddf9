//===- CudaSessionTest.cpp - Session/Runtime driving the CUDA backend -----===//
//
// The executor end to end on the CUDA backend: Runtime::open(bundle,
// {backend cuda}) on one rank, a few steps of the test/e2e MLP bundle, loss,
// grad norm and every parameter compared with the same run on the CPU
// backend (1e-4 relative), eager (--no-graph) and with whole-step graph
// replay; then a checkpoint resume, an offload round trip and a weights
// snapshot on the CUDA session (the host copies through the backend).
//
// CudaSessionHost.*: run everywhere (without a device: the one-line error).
// CudaSessionGpu.* (ctest label gpu): skip with "no CUDA device: ..." here.
// Unlike WeftCudaBackendTests this binary calls MPI_Init (Session needs
// MPI, world size 1, no mpirun): on the device machine it needs Open MPI's
// components, staged by scripts/gpu-prepare.sh.
//
//===----------------------------------------------------------------------===//

#include "MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/Runtime.h"
#include "weft/exec/cuda/Probe.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <unistd.h>

using namespace weft;
using namespace weft::exec;
namespace fs = std::filesystem;

namespace {

#define SKIP_WITHOUT_DEVICE()                                                  \
  do {                                                                         \
    std::string problem = cuda::cudaDeviceProblem();                           \
    if (!problem.empty())                                                      \
      GTEST_SKIP() << problem;                                                 \
  } while (0)

std::string freshDir(const std::string &name) {
  return test::freshTestDir("weft-cuda-session-", name);
}

std::string tokenFile() { return test::testTokenFile(); }

/// The MLP bundle of `variant` (one rank) on disk, with `lossScale`.
std::string mlpBundle(const std::string &variant,
                      const plan::LossScale &lossScale = {}) {
  test::MlpConfig config;
  config.variant = variant;
  config.microBatch = 2;
  config.accum = variant == "zero1" ? 2 : 1; // accumulation on one variant
  std::string dir = freshDir("bundle-" + variant);
  plan::Bundle bundle = test::buildMlpBundle(config);
  bundle.training.lossScale = lossScale;
  plan::writeBundle(bundle, dir);
  return dir;
}

Options options(const std::string &backend, bool graph) {
  Options o;
  o.dataPath = tokenFile();
  o.backend = backend;
  o.graph = graph;
  o.seed = 3;
  return o;
}

/// Every parameter shard of the rank, as floats, read through the backend.
std::vector<float> parameters(const Session &session) {
  const plan::Bundle &bundle = session.bundle();
  const plan::Program &program = *session.rankProgram().program;
  std::vector<float> values;
  for (const plan::Parameter &param : bundle.parameters)
    for (const plan::ShardSpec &shard : param.shards) {
      if (shard.role != session.rankProgram().role)
        continue;
      const plan::Buffer &buffer = program.buffers[size_t(shard.buffer)];
      EXPECT_EQ(buffer.dtype, plan::DType::F32) << param.name;
      int64_t elements = shard.paddedElements / shard.zeroShards;
      std::vector<float> host(static_cast<size_t>(elements));
      session.readBuffer(buffer.id, shard.offset, host.data(), elements * 4);
      values.insert(values.end(), host.begin(), host.end());
    }
  return values;
}

double relativeError(const std::vector<float> &got,
                     const std::vector<float> &want) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  return diff / scale;
}

void expectClose(const StepStats &got, const StepStats &want,
                 const std::string &what) {
  ASSERT_TRUE(want.lossReported) << what;
  ASSERT_TRUE(got.lossReported) << what;
  ASSERT_TRUE(std::isfinite(want.loss)) << what;
  EXPECT_EQ(got.step, want.step) << what;
  EXPECT_LE(std::fabs(got.loss - want.loss), 1e-4 * std::fabs(want.loss))
      << what << ": cpu " << want.loss << " cuda " << got.loss;
  EXPECT_EQ(std::isnan(got.gradNorm), std::isnan(want.gradNorm)) << what;
  if (!std::isnan(want.gradNorm)) {
    EXPECT_LE(std::fabs(got.gradNorm - want.gradNorm),
              1e-4 * std::fabs(want.gradNorm))
        << what << " grad norm: cpu " << want.gradNorm << " cuda "
        << got.gradNorm;
  }
}

//===--- Host -------------------------------------------------------------===//

TEST(CudaSessionHost, NoDeviceIsOneLineThroughRuntime) {
  std::string problem = cuda::cudaDeviceProblem();
  if (problem.empty())
    GTEST_SKIP() << "a CUDA device is present";
  std::string bundle = mlpBundle("serial");
  try {
    Runtime::open(bundle, options("cuda", true), MPI_COMM_WORLD);
    ADD_FAILURE() << "Runtime::open succeeded without a device";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()), problem);
  }
  // The CPU backend on the same bundle opens and steps.
  auto rt = Runtime::open(bundle, options("cpu", true), MPI_COMM_WORLD);
  EXPECT_TRUE(std::isfinite(rt->step().loss));
}

TEST(CudaSessionHost, DeviceTimesNeedADeviceBackend) {
  // The CPU backend times on the host only: one line at open.
  Options o = options("cpu", true);
  o.trace = true;
  o.deviceTimes = true;
  try {
    Runtime::open(mlpBundle("serial"), o, MPI_COMM_WORLD);
    ADD_FAILURE() << "device times opened on the CPU backend";
  } catch (const Error &error) {
    std::string message = error.what();
    EXPECT_NE(message.find("device times: the cpu backend times instructions "
                           "on the host only"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  // Without the trace there is nothing to time: it opens.
  o.trace = false;
  EXPECT_TRUE(std::isfinite(
      Runtime::open(mlpBundle("serial"), o, MPI_COMM_WORLD)->step().loss));
}

//===--- GPU --------------------------------------------------------------===//

/// `steps` steps of `variant` on both backends, compared after every step.
void compareWithCpu(const std::string &variant, bool graph, int64_t steps) {
  std::string bundle = mlpBundle(variant);
  auto cpu = Runtime::open(bundle, options("cpu", true), MPI_COMM_WORLD);
  auto gpu = Runtime::open(bundle, options("cuda", graph), MPI_COMM_WORLD);
  EXPECT_EQ(gpu->session().backend().name(), "cuda");
  EXPECT_FALSE(gpu->session().backend().hostAddressable());
  for (int64_t step = 1; step <= steps; ++step) {
    std::string what = variant + (graph ? " graph" : " eager") + " step " +
                       std::to_string(step);
    StepStats want = cpu->step(), got = gpu->step();
    expectClose(got, want, what);
    EXPECT_LE(
        relativeError(parameters(gpu->session()), parameters(cpu->session())),
        1e-4)
        << what;
  }
}

TEST(CudaSessionGpu, MlpSerialMatchesCpuEager) {
  SKIP_WITHOUT_DEVICE();
  compareWithCpu("serial", false, 5);
}

TEST(CudaSessionGpu, DeviceTimesTraceEveryInstructionOnTheDevice) {
  SKIP_WITHOUT_DEVICE();
  std::string bundle = mlpBundle("serial");
  Options timed = options("cuda", true); // device times turn graphs off
  timed.trace = true;
  timed.deviceTimes = true;
  auto gpu = Runtime::open(bundle, timed, MPI_COMM_WORLD);
  auto plain = Runtime::open(bundle, options("cuda", false), MPI_COMM_WORLD);
  const int64_t steps = 3;
  for (int64_t step = 1; step <= steps; ++step) {
    // Timing perturbs nothing (up to the order of the embedding gradient's
    // atomic adds, which two runs need not share).
    StepStats got = gpu->step(), want = plain->step();
    EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss))
        << "step " << step;
  }
  const Session &session = gpu->session();
  const plan::Program &program = *session.rankProgram().program;
  size_t instructions = 0;
  for (const plan::Stream &stream : program.streams)
    instructions += stream.instructions.size();
  // Every instruction of every step, each within its step and in its
  // stream's order on the device (a stream runs one instruction at a time).
  ASSERT_EQ(session.trace().size(), size_t(steps) * instructions);
  std::map<std::pair<int64_t, int32_t>, double> lastEnd; // (step, stream)
  double gemmSeconds = 0;
  for (const TraceEvent &event : session.trace()) {
    EXPECT_LE(event.beginS, event.endS);
    EXPECT_GE(event.beginS, 0);
    auto key = std::pair(event.step, event.stream);
    if (lastEnd.count(key)) {
      EXPECT_GE(event.beginS, lastEnd[key] - 1e-6)
          << "step " << event.step << " stream " << event.stream
          << " instruction " << event.instruction;
    }
    lastEnd[key] = event.endS;
    const plan::Instruction &inst =
        program.streams[size_t(event.stream)]
            .instructions[size_t(event.instruction)];
    if (inst.opcode == plan::Opcode::Gemm)
      gemmSeconds += event.endS - event.beginS;
  }
  EXPECT_GT(gemmSeconds, 0);
}

TEST(CudaSessionGpu, MlpSerialMatchesCpuWithGraphReplay) {
  SKIP_WITHOUT_DEVICE();
  compareWithCpu("serial", true, 5); // step 1 eager, 2 captured, 3-5 replayed
}

TEST(CudaSessionGpu, MlpDdpMatchesCpuThroughNccl) {
  SKIP_WITHOUT_DEVICE();
  compareWithCpu("ddp", true, 5); // the gradient all-reduce through NCCL
}

TEST(CudaSessionGpu, MlpZero1WithAccumulationMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  compareWithCpu("zero1", true, 4); // reduce-scatter, all-gather buckets
}

TEST(CudaSessionGpu, MlpOptimizerOffloadMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  // A host region (pinned): gradient copied device->host, AdamW as a host
  // function, weights copied back; eager, then captured and replayed.
  compareWithCpu("serial-offload", false, 4);
  compareWithCpu("serial-offload", true, 5);
  compareWithCpu("zero1-offload", true, 4); // the all-gather reads the copy
}

TEST(CudaSessionGpu, DynamicLossScaleSkipsOnTheDeviceAsOnTheCpu) {
  SKIP_WITHOUT_DEVICE();
  // Start at 2^70: the scaled sum of squares overflows float until the scale
  // has backed off, and with growth every 2 steps it grows again: the
  // optimizer_steps skip on the device (host AdamW: in the host task), the
  // executor reads the same sum after the step, and every change of the
  // scale drops the captured graph, which the next step captures again.
  plan::LossScale scale;
  scale.dynamic = true;
  scale.initial = std::ldexp(1.0, 70);
  scale.growthInterval = 2;
  scale.backoff = 0.5;
  for (const char *variant : {"serial", "serial-offload"})
    for (bool graph : {false, true}) {
      std::string bundle = mlpBundle(variant, scale);
      auto cpu = Runtime::open(bundle, options("cpu", true), MPI_COMM_WORLD);
      auto gpu = Runtime::open(bundle, options("cuda", graph), MPI_COMM_WORLD);
      int skipped = 0;
      for (int64_t step = 1; step <= 14; ++step) {
        std::string what = std::string(variant) +
                           (graph ? " graph" : " eager") + " step " +
                           std::to_string(step);
        StepStats want = cpu->step(), got = gpu->step();
        ASSERT_EQ(got.skipped, want.skipped) << what;
        ASSERT_EQ(got.lossScale, want.lossScale) << what;
        skipped += want.skipped;
        expectClose(got, want, what);
        EXPECT_LE(relativeError(parameters(gpu->session()),
                                parameters(cpu->session())),
                  1e-4)
            << what;
      }
      EXPECT_GE(skipped, 1) << variant << ": no overflow, nothing shown";
      EXPECT_EQ(gpu->session().lossScaleState(),
                cpu->session().lossScaleState());
    }
}

TEST(CudaSessionGpu, OptimizerOffloadCheckpointResumesThroughTheBackend) {
  SKIP_WITHOUT_DEVICE();
  std::string bundle = mlpBundle("serial-offload");
  std::string ck = freshDir("ck-offload");
  auto cpu = Runtime::open(bundle, options("cpu", true), MPI_COMM_WORLD);
  auto gpu = Runtime::open(bundle, options("cuda", true), MPI_COMM_WORLD);
  std::vector<StepStats> want = cpu->runSteps(5);
  for (int64_t step = 1; step <= 3; ++step)
    expectClose(gpu->step(), want[size_t(step - 1)],
                "offload step " + std::to_string(step));
  gpu->saveCheckpoint(ck); // persistent region, then the pinned host region
  Options resume = options("cuda", true);
  resume.resumeDir = ck;
  auto again = Runtime::open(bundle, resume, MPI_COMM_WORLD);
  for (int64_t step = 4; step <= 5; ++step)
    expectClose(again->step(), want[size_t(step - 1)],
                "resumed offload step " + std::to_string(step));
}

TEST(CudaSessionGpu, CheckpointOffloadAndSnapshotThroughTheBackend) {
  SKIP_WITHOUT_DEVICE();
  std::string bundle = mlpBundle("serial");
  std::string ck = freshDir("ck");
  auto cpu = Runtime::open(bundle, options("cpu", true), MPI_COMM_WORLD);
  auto gpu = Runtime::open(bundle, options("cuda", true), MPI_COMM_WORLD);
  std::vector<StepStats> want = cpu->runSteps(6);
  // The CUDA workspace (cuBLASLt, kernel scratch) is reported beside the plan.
  EXPECT_GT(gpu->session().workspaceBytes(), 0);
  EXPECT_EQ(cpu->session().workspaceBytes(), 0);
  for (int64_t step = 1; step <= 3; ++step)
    expectClose(gpu->step(), want[size_t(step - 1)],
                "before save, step " + std::to_string(step));
  // A save staged through copyToHost; a weights snapshot.
  CheckpointStats saved = gpu->saveCheckpoint(ck);
  EXPECT_EQ(saved.step, 3);
  gpu->saveWeights(ck);
  EXPECT_TRUE(fs::exists(ck + "/weights-3/COMPLETE"));
  // Offload and reload every group (arena poisoned on the device).
  const Backend &backend = gpu->session().backend();
  EXPECT_TRUE(backend.hasGraph()); // captured at step 2
  const int64_t inUse = backend.deviceBytesInUse();
  for (StateGroup group : allStateGroups()) {
    OffloadReport off = gpu->offload(group, HostMemoryKind::Pinned);
    EXPECT_NE(off.after, Residency::Device) << toString(group);
  }
  // Memory returned to the driver (a VMM region's chunks) drops the captured
  // step: NCCL may have registered the old chunks for it. Step 4 captures
  // again.
  if (backend.deviceBytesInUse() < inUse)
    EXPECT_FALSE(backend.hasGraph());
  for (StateGroup group : allStateGroups())
    gpu->reload(group);
  expectClose(gpu->step(), want[3], "after offload, step 4");
  // A fresh CUDA session resumed from step 3 (the rank file read into host
  // memory and copied to the device) reproduces steps 4-6.
  Options resume = options("cuda", true);
  resume.resumeDir = ck;
  auto resumed = Runtime::open(bundle, resume, MPI_COMM_WORLD);
  EXPECT_EQ(resumed->session().completedSteps(), 3);
  for (int64_t step = 4; step <= 6; ++step)
    expectClose(resumed->step(), want[size_t(step - 1)],
                "resumed, step " + std::to_string(step));
  // loadCheckpoint rewinds the first session too; after the same steps both
  // sessions hold the same parameters.
  gpu->loadCheckpoint(ck);
  for (int64_t step = 4; step <= 6; ++step)
    expectClose(gpu->step(), want[size_t(step - 1)],
                "after loadCheckpoint, step " + std::to_string(step));
  EXPECT_LE(
      relativeError(parameters(gpu->session()), parameters(resumed->session())),
      1e-5);
}

} // namespace

int main(int argc, char **argv) {
  // A singleton MPI_Init that forks no orted (a bare GPU machine has none;
  // gpu-check.sh sets it too), unless the environment says otherwise.
  ::setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int status = RUN_ALL_TESTS();
  MPI_Finalize();
  return status;
}
