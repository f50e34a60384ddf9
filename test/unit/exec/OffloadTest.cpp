//===- OffloadTest.cpp - Offload, reload, weights and checkpoint loads ----===//
//
// World size 1 except OffloadTwoRanks (run under mpirun -np 2 by its own
// ctest entry; it skips itself elsewhere): a collective left in flight by
// beginStep() must be completed before its output is copied to the host.
//
//===----------------------------------------------------------------------===//

#include "e2e/MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/Runtime.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace weft;
using namespace weft::exec;
namespace fs = std::filesystem;

namespace {

std::string freshDir(const std::string &name) {
  return test::freshTestDir("weft-offload-", name);
}

std::string tokenFile() { return test::testTokenFile(); }

/// An MLP bundle of `variant` on disk; options that open it.
Options mlpOptions(const std::string &variant, int64_t dp) {
  weft::test::MlpConfig config;
  config.variant = variant;
  config.dp = dp;
  config.microBatch = 2;
  std::string dir = freshDir("bundle");
  plan::writeBundle(weft::test::buildMlpBundle(config), dir);
  Options options;
  options.bundleDir = dir;
  options.dataPath = tokenFile();
  options.seed = 5;
  return options;
}

/// Every persistent byte of the session (all groups must be resident).
std::string persistentBytes(const Session &session) {
  const plan::Program &program = *session.rankProgram().program;
  std::string bytes;
  for (const plan::Buffer &b : program.buffers)
    if (b.region == plan::Region::Persistent) {
      Operand op = session.buffer(b.id);
      bytes.append(reinterpret_cast<const char *>(op.data), size_t(op.bytes));
    }
  return bytes;
}

std::string fileBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

using test::errorOf;

std::vector<StateGroup> allGroups() {
  auto all = allStateGroups();
  return {all.begin(), all.end()};
}

} // namespace

TEST(Offload, HostBufferReleaseRunsOnceBeforeTheMemoryIsFreed) {
  // A backend that registered a pinned buffer (CUDA: cudaHostRegister)
  // unregisters it before munmap: exactly once, with the buffer's address,
  // wherever the buffer was moved to; a moved-from buffer releases nothing.
  std::vector<std::byte *> released;
  std::byte *data = nullptr;
  {
    HostBuffer buffer(4096, HostMemoryKind::Pinned);
    data = buffer.data();
    buffer.onRelease([&](std::byte *p) { released.push_back(p); });
    HostBuffer moved(std::move(buffer));
    HostBuffer assigned;
    assigned = std::move(moved);
    EXPECT_TRUE(released.empty());
    EXPECT_EQ(assigned.data(), data);
  }
  EXPECT_EQ(released, std::vector<std::byte *>{data});
  // Reassigning over a registered buffer releases the old one first.
  released.clear();
  HostBuffer first(64, HostMemoryKind::Pageable);
  std::byte *old = first.data();
  first.onRelease([&](std::byte *p) { released.push_back(p); });
  first = HostBuffer(128, HostMemoryKind::Pageable);
  EXPECT_EQ(released, std::vector<std::byte *>{old});
}

TEST(Offload, EveryGroupBetweenEveryStepIsBitIdentical) {
  Options options = mlpOptions("serial", 1);
  auto plain = Runtime::open(options.bundleDir, options);
  auto moved = Runtime::open(options.bundleDir, options);
  int64_t resident = moved->deviceBytesInUse();
  for (int step = 1; step <= 4; ++step) {
    StepStats a = plain->step();
    StepStats b = moved->step();
    EXPECT_EQ(a.loss, b.loss) << "step " << step; // exact, not near
    EXPECT_EQ(a.gradNorm, b.gradNorm) << "step " << step;
    HostMemoryKind kind =
        step % 2 ? HostMemoryKind::Pinned : HostMemoryKind::Pageable;
    std::vector<OffloadReport> out = moved->offload(allGroups(), kind);
    int64_t moved_bytes = 0;
    for (const OffloadReport &r : out) {
      EXPECT_EQ(r.before, Residency::Device);
      EXPECT_EQ(moved->where(r.group),
                r.group == StateGroup::Activations ? Residency::Released
                : kind == HostMemoryKind::Pinned   ? Residency::Pinned
                                                   : Residency::Pageable);
      moved_bytes += r.bytesMoved;
    }
    EXPECT_EQ(moved_bytes, int64_t(persistentBytes(plain->session()).size()))
        << "every persistent buffer byte is copied, the arena is not";
    EXPECT_LT(out.back().deviceBytesAfter, out.front().deviceBytesBefore);
    EXPECT_LT(moved->deviceBytesInUse(), resident / 2);
    std::vector<OffloadReport> back = moved->reload(allGroups());
    EXPECT_EQ(moved->deviceBytesInUse(), resident);
    for (const OffloadReport &r : back)
      EXPECT_EQ(moved->where(r.group), Residency::Device);
    EXPECT_TRUE(persistentBytes(plain->session()) ==
                persistentBytes(moved->session()))
        << "state differs after step " << step;
  }
}

TEST(Offload, StepWithAnOffloadedGroupIsAOneLineError) {
  Options options = mlpOptions("serial", 1);
  auto rt = Runtime::open(options.bundleDir, options);
  rt->offload(StateGroup::OptimizerStates, HostMemoryKind::Pageable);
  std::string message = errorOf([&] { rt->step(); });
  EXPECT_EQ(message, "rank 0: cannot begin step 1: state group "
                     "'optimizer_states' is host-pageable; reload it first");
  rt->reload(StateGroup::OptimizerStates);
  EXPECT_EQ(rt->step().step, 1);
  // The arena is live inside a step: it cannot be released there.
  rt->session().beginStep();
  message = errorOf(
      [&] { rt->offload(StateGroup::Activations, HostMemoryKind::Pinned); });
  EXPECT_EQ(message, "rank 0: offload of 'activations': the arena is live "
                     "during step 2; offload activations between steps");
  EXPECT_EQ(rt->session().finishStep().step, 2);
}

TEST(Offload, ReloadOfAResidentGroupIsANoOp) {
  Options options = mlpOptions("serial", 1);
  auto rt = Runtime::open(options.bundleDir, options);
  rt->step();
  std::string before = persistentBytes(rt->session());
  int64_t device = rt->deviceBytesInUse();
  for (StateGroup group : allStateGroups()) {
    OffloadReport r = rt->reload(group);
    EXPECT_TRUE(r.reload);
    EXPECT_EQ(r.bytesMoved, 0);
    EXPECT_EQ(r.after, Residency::Device);
    EXPECT_EQ(r.deviceBytesBefore, device);
    EXPECT_EQ(r.deviceBytesAfter, device);
  }
  EXPECT_TRUE(persistentBytes(rt->session()) == before);
  // Offloading twice moves nothing the second time.
  EXPECT_GT(rt->offload(StateGroup::Params).bytesMoved, 0);
  EXPECT_EQ(rt->offload(StateGroup::Params).bytesMoved, 0);
  rt->reload(StateGroup::Params);
  EXPECT_TRUE(persistentBytes(rt->session()) == before);
}

TEST(Offload, CheckpointsWrittenFromHostCopiesMatchResidentOnes) {
  Options options = mlpOptions("zero1", 1);
  auto rt = Runtime::open(options.bundleDir, options);
  rt->runSteps(2);
  std::string resident = freshDir("resident"), offloaded = freshDir("off");
  rt->saveCheckpoint(resident);
  rt->saveWeights(resident);
  // Some groups away, some not: the payload interleaves both.
  rt->offload({StateGroup::Params, StateGroup::OptimizerStates,
               StateGroup::Activations},
              HostMemoryKind::Pinned);
  rt->saveCheckpoint(offloaded);
  CheckpointStats weights = rt->saveWeights(offloaded);
  EXPECT_EQ(weights.dir, offloaded + "/weights-2");
  for (const char *file : {"/step-2/rank-0.bin", "/weights-2/rank-0.bin",
                           "/step-2/manifest.json", "/weights-2/manifest.json"})
    EXPECT_TRUE(fileBytes(resident + file) == fileBytes(offloaded + file))
        << file;
  EXPECT_TRUE(fs::exists(offloaded + "/weights-2/COMPLETE"));
  // Weights only: the Params group, in its storage dtype, and a manifest
  // that says so; a resume never picks it.
  EXPECT_EQ(weights.bytes,
            kRankHeaderBytes + rt->layout(StateGroup::Params).bytes);
  EXPECT_NE(fileBytes(offloaded + "/weights-2/manifest.json")
                .find("\"contents\": \"weights\""),
            std::string::npos);
  EXPECT_EQ(newestCheckpoint(offloaded), offloaded + "/step-2");
  rt->reload(allGroups());
  std::string message =
      errorOf([&] { rt->loadCheckpoint(offloaded + "/weights-2"); });
  EXPECT_NE(message.find("weights-2/manifest.json: a weights snapshot"),
            std::string::npos)
      << message;
  EXPECT_EQ(rt->step().step, 3); // a refused load leaves the state alone
}

TEST(Offload, LoadCheckpointRewindsTrainingBitIdentically) {
  Options options = mlpOptions("serial", 1);
  auto rt = Runtime::open(options.bundleDir, options);
  std::string dir = freshDir("ck");
  rt->runSteps(2);
  rt->saveCheckpoint(dir);
  std::vector<StepStats> first = rt->runSteps(2);
  std::string after4 = persistentBytes(rt->session());
  // Loading drops offloaded copies: the state is replaced.
  rt->offload(StateGroup::Gradients, HostMemoryKind::Pageable);
  CheckpointStats loaded = rt->loadCheckpoint(dir);
  EXPECT_EQ(loaded.dir, dir + "/step-2");
  EXPECT_EQ(rt->completedSteps(), 2);
  EXPECT_EQ(rt->where(StateGroup::Gradients), Residency::Device);
  std::vector<StepStats> again = rt->runSteps(2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].loss, first[0].loss);
  EXPECT_EQ(again[1].loss, first[1].loss);
  EXPECT_TRUE(persistentBytes(rt->session()) == after4);
  // A corrupted file: one line, and the session refuses to step.
  std::string rankFile = dir + "/step-2/rank-0.bin";
  std::string bytes = fileBytes(rankFile);
  bytes[kRankHeaderBytes + 100] ^= 0x40;
  std::ofstream(rankFile, std::ios::binary) << bytes;
  std::string message = errorOf([&] { rt->loadCheckpoint(dir); });
  EXPECT_NE(message.find("rank-0.bin: checksum mismatch"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  message = errorOf([&] { rt->step(); });
  EXPECT_NE(message.find("a checkpoint load failed"), std::string::npos)
      << message;
}

TEST(Offload, OptimizerOffloadPlansTrainBitIdenticallyAndNeverMoveHostBytes) {
  // The same MLP with its master weights and moments in the plan's host
  // region (e2e/MlpBundle.h, *-offload): same math, only placement differs.
  for (const char *variant : {"serial", "zero1"}) {
    SCOPED_TRACE(variant);
    Options plainOptions = mlpOptions(variant, 1);
    Options options = mlpOptions(std::string(variant) + "-offload", 1);
    auto plain = Runtime::open(plainOptions.bundleDir, plainOptions);
    auto rt = Runtime::open(options.bundleDir, options);
    const plan::Program &program = *rt->session().rankProgram().program;
    ASSERT_GT(program.hostBytes, 0);
    EXPECT_LT(program.persistentBytes,
              plain->session().rankProgram().program->persistentBytes);
    // Wholly on the host: nothing to move, before or after.
    EXPECT_EQ(rt->where(StateGroup::OptimizerStates), Residency::Host);
    EXPECT_EQ(rt->where(StateGroup::MasterParams), Residency::Host);
    EXPECT_EQ(rt->layout(StateGroup::OptimizerStates).bytes, 0);
    EXPECT_GT(rt->layout(StateGroup::OptimizerStates).hostBytes, 0);
    std::string dir = freshDir("ck");
    std::vector<StepStats> first;
    for (int step = 1; step <= 4; ++step) {
      StepStats a = plain->step(), b = rt->step();
      EXPECT_EQ(a.loss, b.loss) << "step " << step; // exact
      EXPECT_EQ(a.gradNorm, b.gradNorm) << "step " << step;
      if (step > 2)
        first.push_back(b);
      // Offload everything between steps: only device bytes move.
      std::vector<OffloadReport> out =
          rt->offload(allGroups(), HostMemoryKind::Pageable);
      int64_t moved = 0;
      for (const OffloadReport &r : out) {
        moved += r.bytesMoved;
        if (r.group == StateGroup::OptimizerStates) {
          EXPECT_EQ(r.before, Residency::Host);
          EXPECT_EQ(r.after, Residency::Host);
          EXPECT_EQ(r.bytesMoved, 0);
        }
      }
      EXPECT_EQ(moved, rt->session().layout(StateGroup::Params).bytes +
                           rt->session().layout(StateGroup::Gradients).bytes +
                           rt->session().layout(StateGroup::Other).bytes)
          << "device bytes only";
      if (step == 2) {
        rt->saveCheckpoint(dir); // from host copies and the host region
        rt->saveWeights(dir);
      }
      rt->reload(allGroups());
    }
    // The checkpoint holds the host region after the persistent one.
    EXPECT_EQ(
        fileBytes(dir + "/step-2/rank-0.bin").size(),
        size_t(kRankHeaderBytes + program.persistentBytes + program.hostBytes));
    // Rewind to step 2 and replay: bit-identical (host state restored).
    rt->loadCheckpoint(dir);
    std::vector<StepStats> again = rt->runSteps(2);
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].loss, first[0].loss);
    EXPECT_EQ(again[1].loss, first[1].loss);
    EXPECT_EQ(again[1].gradNorm, first[1].gradNorm);
    // The working weights agree with the plain plan's, byte for byte.
    for (const plan::Buffer &b : program.buffers) {
      if (b.name != "wte" && b.name != "w1" && b.name != "w2")
        continue;
      std::vector<float> x(size_t(b.size / 4)), y(x.size());
      rt->session().readBuffer(b.id, 0, x.data(), b.size);
      int64_t id = -1;
      for (const plan::Buffer &other :
           plain->session().rankProgram().program->buffers)
        if (other.name == b.name)
          id = other.id;
      plain->session().readBuffer(id, 0, y.data(), b.size);
      EXPECT_TRUE(x == y) << b.name;
    }
  }
}

TEST(OffloadTwoRanks, InFlightCollectiveIsDrainedBeforeTheCopy) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != 2)
    GTEST_SKIP() << "needs mpirun -np 2 (ctest WeftRuntimeTests.two-ranks)";
  // Rank 0 writes the bundle; both open the same directory.
  std::string dir;
  if (rank == 0)
    dir = mlpOptions("ddp", 2).bundleDir;
  int length = int(dir.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(size_t(length));
  MPI_Bcast(dir.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  Options options;
  options.dataPath = tokenFile();
  options.seed = 5;
  options.watchdogSeconds = 30;
  auto plain = Runtime::open(dir, options);
  auto moved = Runtime::open(dir, options);
  for (int step = 1; step <= 3; ++step) {
    StepStats expected = plain->step();
    Session &s = moved->session();
    if (rank == 1) // late: rank 0's gradient all-reduce waits for it
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s.beginStep();
    if (rank == 0) {
      ASSERT_GE(s.inFlight(), 1) << "the test needs a collective in flight";
      // The all-reduce writes the gradients in place: copying them before
      // it completes would save stale bytes (and it would then write into
      // released memory).
      OffloadReport out =
          moved->offload(StateGroup::Gradients, HostMemoryKind::Pinned);
      EXPECT_GE(out.drained, 1);
      EXPECT_EQ(s.inFlight(), 0);
      EXPECT_GT(out.bytesMoved, 0);
      moved->reload(StateGroup::Gradients);
    }
    StepStats got = s.finishStep();
    EXPECT_EQ(got.loss, expected.loss) << "step " << step;
    EXPECT_EQ(got.gradNorm, expected.gradNorm) << "step " << step;
    EXPECT_TRUE(persistentBytes(plain->session()) == persistentBytes(s))
        << "rank " << rank << " state differs after step " << step;
  }
}
