//===- ExecutorTest.cpp - Sessions on 1-rank bundles ----------------------===//
//
// Each test writes a small bundle, opens it as world size 1 and checks the
// memory after one step: every opcode, event ordering between streams, the
// kernel ABI checks, parameter initialization and the LR schedule; f16
// storage wherever an opcode takes it (HalfTwoRanks: f16 collectives, run
// under mpirun -np 2 by its own ctest entry; it skips itself elsewhere);
// collectives with several members against single-member ones, on one rank
// and on two (CoalescedTwoRanks, its own ctest entry as well), and the
// communication buckets a coalescing backend issues.
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
#include <cstring>
#include <fstream>
#include <functional>
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
  int64_t persistentEnd = 0, arenaEnd = 0, hostEnd = 0;
  /// The programs of roles 1, 2, ...: each a copy of `program` (role 0's)
  /// that its function edits at open().
  std::vector<std::function<void(Program &)>> otherRoles;

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
    int64_t &end = region == Region::Persistent ? persistentEnd
                   : region == Region::Host     ? hostEnd
                                                : arenaEnd;
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
  std::unique_ptr<Session> open(bool verify = true) {
    program.persistentBytes = std::max<int64_t>(persistentEnd, 64);
    program.arenaBytes = std::max<int64_t>(arenaEnd, 64);
    program.hostBytes = hostEnd;
    bundle.programs = {program};
    for (const auto &edit : otherRoles) {
      Program other = program;
      other.role = int64_t(bundle.programs.size());
      edit(other);
      bundle.programs.push_back(std::move(other));
    }
    std::string dir = tempPath("bundle");
    writeBundle(bundle, dir);
    exec::Options options;
    options.bundleDir = dir;
    options.dataPath = tokenFile();
    options.seed = 3;
    options.trace = true;
    options.verifyPlan = verify;
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

std::string openError(OneRank &rank, bool verify = true) {
  try {
    rank.open(verify);
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

TEST(Executor, AdamWReadingTheNormClipsOnTheWayIn) {
  // The compiled form: no clip instruction; the optimizer_step reads the
  // sum of squares (reads[4]) and multiplies each gradient by
  // grad_clip / norm on its way in, leaving the gradient buffer as it is. A
  // bf16 gradient enters in fp32: 3 * 0.2 is not rounded to bf16 (0.6 is
  // not a bf16 value), as a separate clip's in-place store would.
  for (DType gradType : {DType::F32, DType::BF16}) {
    OneRank r;
    int64_t p = r.add(Region::Persistent, 3),
            g = r.add(Region::Persistent, 3, gradType),
            m = r.add(Region::Persistent, 3), v = r.add(Region::Persistent, 3),
            sum = r.add(Region::Persistent, 1);
    r.emit(Opcode::GradNorm, {r.all(g)}, {r.all(sum)}).dtype = gradType;
    r.emit(Opcode::OptimizerStep,
           {r.all(p), r.all(g), r.all(m), r.all(v), r.all(sum)},
           {r.all(p), r.all(m), r.all(v)})
        .count = 3;
    auto session = r.open();
    write(*session, p, std::vector<float>{1, -1, 0.5f});
    std::vector<float> G = {3, 4, 0}; // norm 5 > clip 1; exact in bf16
    if (gradType == DType::BF16)
      write(*session, g,
            std::vector<kernels::BF16>{kernels::floatToBf16(3),
                                       kernels::floatToBf16(4),
                                       kernels::floatToBf16(0)});
    else
      write(*session, g, G);
    exec::StepStats stats = session->runStep();
    EXPECT_DOUBLE_EQ(stats.gradNorm, 5.0);
    const TrainingInfo &t = session->bundle().training;
    ASSERT_EQ(t.gradClip, 1.0);
    kernels::AdamWStep adam = kernels::makeAdamWStep(
        {exec::learningRate(t, 1), t.beta1, t.beta2, t.eps, t.weightDecay}, 1,
        /*gradScale=*/1.0 / 5.0);
    std::vector<float> P = {1, -1, 0.5f}, M(3), V(3);
    for (size_t i = 0; i < 3; ++i)
      kernels::adamwElement(adam, G[i], P[i], M[i], V[i]);
    EXPECT_EQ(read<float>(*session, p), P) << toString(gradType);
    EXPECT_EQ(read<float>(*session, m), M) << toString(gradType);
    EXPECT_EQ(read<float>(*session, v), V) << toString(gradType);
    EXPECT_FLOAT_EQ(read<float>(*session, m)[0], 0.1f * 0.6f); // 1 - beta1
    if (gradType == DType::F32) {
      EXPECT_EQ(read<float>(*session, g), G); // not scaled in place
    }
  }
}

TEST(Executor, HostRegionCopyFillAndAdamW) {
  // Optimizer offload: the gradient copied to host memory, AdamW on host
  // buffers only, the updated weights copied back to the device.
  OneRank r;
  int64_t p = r.add(Region::Persistent, 3), g = r.add(Region::Persistent, 3),
          master = r.add(Region::Host, 3), m = r.add(Region::Host, 3),
          v = r.add(Region::Host, 3), gh = r.add(Region::Host, 3),
          ph = r.add(Region::Host, 3), filled = r.add(Region::Host, 2);
  r.emit(Opcode::Fill, {}, {r.all(filled)}).value = 0.25;
  r.program.streams[0].instructions.back().dtype = DType::F32;
  r.emit(Opcode::Copy, {r.all(g)}, {r.all(gh)});
  r.emit(Opcode::OptimizerStep, {r.all(master), r.all(gh), r.all(m), r.all(v)},
         {r.all(master), r.all(m), r.all(v), r.all(ph)})
      .count = 3;
  r.emit(Opcode::Copy, {r.all(ph)}, {r.all(p)});
  auto session = r.open();
  // The host region is host memory on every backend; not device memory.
  EXPECT_EQ(session->bundle().programs[0].hostBytes, r.hostEnd);
  EXPECT_EQ(session->deviceBytesInUse(),
            int64_t(2 * ::sysconf(_SC_PAGESIZE))); // persistent + arena
  EXPECT_EQ(session->workspaceBytes(), 0); // the CPU widens in host vectors
  write(*session, master, std::vector<float>{1, -1, 0.5f});
  write(*session, g, std::vector<float>{0.5f, 0.25f, 0});
  session->runStep();
  const TrainingInfo &t = session->bundle().training;
  kernels::AdamWStep adam = kernels::makeAdamWStep(
      {exec::learningRate(t, 1), t.beta1, t.beta2, t.eps, t.weightDecay}, 1);
  std::vector<float> P = {1, -1, 0.5f}, G = {0.5f, 0.25f, 0}, M(3), V(3);
  for (size_t i = 0; i < 3; ++i)
    kernels::adamwElement(adam, G[i], P[i], M[i], V[i]);
  EXPECT_EQ(read<float>(*session, master), P);
  EXPECT_EQ(read<float>(*session, m), M);
  EXPECT_EQ(read<float>(*session, v), V);
  EXPECT_EQ(read<float>(*session, gh), G);
  EXPECT_EQ(read<float>(*session, p), P); // copied back to the device
  EXPECT_EQ(read<float>(*session, filled), (std::vector<float>{0.25f, 0.25f}));
  float viaRead[3];
  session->readBuffer(master, 0, viaRead, 12);
  EXPECT_EQ(std::vector<float>(viaRead, viaRead + 3), P);
}

TEST(Executor, HostOperandsOutsideCopyFillAndHostAdamWAreRejected) {
  // The verifier rejects these plans (writeBundle refuses them:
  // VerifierTest); the backend checks again at prepare(), for plans that
  // reach it unverified.
  auto prepareError = [](OneRank &r) -> std::string {
    r.program.persistentBytes = std::max<int64_t>(r.persistentEnd, 64);
    r.program.arenaBytes = std::max<int64_t>(r.arenaEnd, 64);
    r.program.hostBytes = r.hostEnd;
    try {
      exec::makeCpuBackend()->prepare(r.bundle, r.program);
    } catch (const exec::Error &error) {
      return error.what();
    }
    return "no error";
  };
  OneRank r;
  int64_t a = r.add(Region::Host, 64), b = r.add(Region::Arena, 64),
          c = r.add(Region::Arena, 64);
  r.emit(Opcode::Gemm, {r.all(a), r.all(b)}, {r.all(c)}).gemm = {
      false, false, 8, 8, 8, 8, 8, 8, 1.0, 0.0};
  r.program.streams[0].instructions.back().dtype = DType::F32;
  EXPECT_EQ(
      prepareError(r),
      "role 0 stream 0 'compute' instruction 0 (p0): gemm reads or writes host "
      "buffer 0 'b0' (host memory is for copy, fill and an "
      "optimizer_step or clip whose operands are all on the host)");

  OneRank mixed; // AdamW with the gradient still on the device
  int64_t p = mixed.add(Region::Host, 3), g = mixed.add(Region::Persistent, 3),
          m = mixed.add(Region::Host, 3), v = mixed.add(Region::Host, 3);
  mixed
      .emit(Opcode::OptimizerStep,
            {mixed.all(p), mixed.all(g), mixed.all(m), mixed.all(v)},
            {mixed.all(p), mixed.all(m), mixed.all(v)})
      .count = 3;
  EXPECT_EQ(
      prepareError(mixed),
      "role 0 stream 0 'compute' instruction 0 (p0): optimizer_step reads or "
      "writes host buffer 0 'b0' (host memory is for copy, fill and an "
      "optimizer_step or clip whose operands are all on the host)");

  OneRank fine; // the same AdamW with every operand on the host
  int64_t fp = fine.add(Region::Host, 3), fg = fine.add(Region::Host, 3),
          fm = fine.add(Region::Host, 3), fv = fine.add(Region::Host, 3);
  fine.emit(Opcode::OptimizerStep,
            {fine.all(fp), fine.all(fg), fine.all(fm), fine.all(fv)},
            {fine.all(fp), fine.all(fm), fine.all(fv)})
      .count = 3;
  EXPECT_EQ(prepareError(fine), "no error");
}

/// Kernel 0 of `rank`'s bundle: residual_add of n elements.
static void addResidualAddKernel(OneRank &rank, int64_t n) {
  Kernel k;
  k.id = 0;
  k.name = "residual_add";
  k.source = "kernels/residual_add.cu";
  k.constants = {{"n", n}};
  rank.bundle.kernels = {k};
  rank.bundle.files[k.source] = "//\n";
}

TEST(Executor, KernelOperandSizeMismatchIsRejectedAtOpen) {
  OneRank r;
  addResidualAddKernel(r, 8);
  int64_t a = r.add(Region::Persistent, 8), b = r.add(Region::Persistent, 4);
  Instruction &inst = r.emit(Opcode::Kernel, {r.all(a), r.all(b)}, {r.all(a)});
  inst.kernel = 0;
  EXPECT_EQ(
      openError(r),
      "role 0 stream 0 'compute' instruction 0 (p0): kernel "
      "'residual_add' operand reads[1] has 16 bytes, expected 32 (8 f32)");
}

TEST(Executor, KernelWriteOverlappingAReadIsRejectedAtOpen) {
  // residual_add may write out over a or b exactly (in place), but not a
  // range half over one of them: one line at open naming both operands.
  OneRank r;
  addResidualAddKernel(r, 4);
  int64_t a = r.add(Region::Persistent, 8), b = r.add(Region::Persistent, 4);
  Instruction &inst =
      r.emit(Opcode::Kernel, {{a, 0, 16}, r.all(b)}, {{a, 8, 16}});
  inst.kernel = 0;
  EXPECT_EQ(openError(r),
            "role 0 stream 0 'compute' instruction 0 (p0): kernel "
            "'residual_add': writes[0] overlaps reads[0] (bytes [8, 16) of "
            "buffer 0 'b0'); writes[0] may only be exactly the range of "
            "reads[0], reads[1]");
}

TEST(Executor, AGeneratedSourceOfAnotherKernelIsRejectedAtOpen) {
  // The CPU backend reads no source, but a bundle whose kernel names
  // another kernel's generated code is corrupt: it must not run here and
  // fail (or run the wrong code) on the CUDA backend.
  OneRank r;
  addResidualAddKernel(r, 4);
  int64_t a = r.add(Region::Persistent, 4), b = r.add(Region::Persistent, 4);
  r.emit(Opcode::Kernel, {r.all(a), r.all(b)}, {r.all(a)}).kernel = 0;
  r.bundle.files["kernels/residual_add.cu"] =
      "// weft-launch: weft_residual_add_0 grid 1 block 4\n";
  EXPECT_EQ(openError(r), "no error");
  r.bundle.files["kernels/residual_add.cu"] =
      "// weft-launch: weft_bias_add_0 grid 1 block 4\n";
  std::string error = openError(r);
  EXPECT_NE(error.find(": kernels[0]: kernels/residual_add.cu:1: entry "
                       "weft_bias_add_0 is not one of kernel 'residual_add' "
                       "(weft_residual_add_N): the plan names another "
                       "kernel's source"),
            std::string::npos)
      << error;
}

TEST(Executor, OptimizerSumOfSquaresMustBeOneF32) {
  // reads[4] of an optimizer_step is the f32 sum of squares: two f16
  // elements are 4 bytes too (the plan format's check passes) but the
  // backend's operand check names the dtype.
  OneRank r;
  int64_t p = r.add(Region::Persistent, 3), g = r.add(Region::Persistent, 3),
          m = r.add(Region::Persistent, 3), v = r.add(Region::Persistent, 3),
          sum = r.add(Region::Persistent, 2, DType::F16);
  r.emit(Opcode::OptimizerStep,
         {r.all(p), r.all(g), r.all(m), r.all(v), r.all(sum)},
         {r.all(p), r.all(m), r.all(v)})
      .count = 3;
  EXPECT_EQ(openError(r), "role 0 stream 0 'compute' instruction 0 (p0): "
                          "optimizer_step sum of squares must be f32");
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

//===--- f16 storage (computed in fp32, like bf16) ------------------------===//

namespace {

std::vector<kernels::F16> toF16(const std::vector<float> &values) {
  std::vector<kernels::F16> out;
  for (float x : values)
    out.push_back(kernels::floatToF16(x));
  return out;
}

std::vector<float> widenF16(const std::vector<kernels::F16> &values) {
  std::vector<float> out;
  for (kernels::F16 x : values)
    out.push_back(kernels::f16ToFloat(x));
  return out;
}

std::vector<uint16_t> bitsOf(const std::vector<kernels::F16> &values) {
  std::vector<uint16_t> out;
  for (kernels::F16 x : values)
    out.push_back(x.bits);
  return out;
}

} // namespace

TEST(Executor, F16GemmMatchesAnFp64Loop) {
  // Column-major C[5x7] = 0.75 A^T B + 0.5 C, A stored 33x5 with lda 40.
  const int64_t m = 5, n = 7, k = 33, lda = 40, ldb = 33, ldc = 6;
  OneRank r;
  int64_t a = r.add(Region::Persistent, lda * m, DType::F16),
          b = r.add(Region::Persistent, ldb * n, DType::F16),
          c = r.add(Region::Persistent, ldc * n, DType::F16);
  Instruction &gemm =
      r.emit(Opcode::Gemm, {r.all(a), r.all(b), r.all(c)}, {r.all(c)});
  gemm.gemm = {true, false, m, n, k, lda, ldb, ldc, 0.75, 0.5};
  gemm.dtype = DType::F16;
  auto session = r.open();
  auto values = [](int64_t count, int seed) {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[size_t(i)] = float((i * 37 + seed) % 41 - 20) / 8.0f + 0.001f * seed;
    return toF16(v);
  };
  std::vector<kernels::F16> A = values(lda * m, 1), B = values(ldb * n, 2),
                            C = values(ldc * n, 3);
  write(*session, a, A);
  write(*session, b, B);
  write(*session, c, C);
  session->runStep();
  std::vector<kernels::F16> got = read<kernels::F16>(*session, c);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double(kernels::f16ToFloat(A[size_t(i * lda + p)])) *
               double(kernels::f16ToFloat(B[size_t(j * ldb + p)]));
      double expected =
          0.75 * sum +
          0.5 * double(kernels::f16ToFloat(C[size_t(j * ldc + i)]));
      // One f16 rounding (2^-11 relative) plus fp32 accumulation.
      EXPECT_NEAR(kernels::f16ToFloat(got[size_t(j * ldc + i)]), expected,
                  std::abs(expected) * 0x1.01p-11 + 1e-4)
          << i << "," << j;
    }
  // Rows past m (the ldc padding) are left alone.
  for (int64_t j = 0; j < n; ++j)
    EXPECT_EQ(got[size_t(j * ldc + m)].bits, C[size_t(j * ldc + m)].bits);
}

TEST(Executor, F16FillAndKernelOperandsRoundToNearestEven) {
  OneRank r;
  int64_t x = r.add(Region::Persistent, 3, DType::F16),
          big = r.add(Region::Persistent, 2, DType::F16),
          tiny = r.add(Region::Persistent, 2, DType::F16),
          a = r.add(Region::Persistent, 4),
          b = r.add(Region::Persistent, 4, DType::F16),
          sum = r.add(Region::Persistent, 4, DType::F16);
  for (auto [buffer, value] :
       {std::pair<int64_t, double>{x, 2.5}, {big, 70000.0}, {tiny, 3e-7}}) {
    Instruction &fill = r.emit(Opcode::Fill, {}, {r.all(buffer)});
    fill.dtype = DType::F16;
    fill.value = value;
  }
  Kernel add;
  add.id = 0;
  add.name = "residual_add";
  add.source = "kernels/residual_add.cu";
  add.constants = {{"n", 4}};
  r.bundle.kernels = {add};
  r.bundle.files[add.source] = "//\n";
  r.emit(Opcode::Kernel, {r.all(a), r.all(b)}, {r.all(sum)}).kernel = 0;
  auto session = r.open();
  // a (f32) + b (f16) -> f16: a tie to even, a carry into the exponent, an
  // overflow and an exact value.
  std::vector<float> A = {1.0f, 2046.75f, 65000.0f, -3.0f};
  std::vector<kernels::F16> B =
      toF16({0x1p-11f + 0x1p-24f, 1.0f, 1000.0f, 0.25f});
  write(*session, a, A);
  write(*session, b, B);
  session->runStep();
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, x)),
            std::vector<uint16_t>(3, 0x4100));
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, big)),
            std::vector<uint16_t>(2, 0x7c00)); // inf, not 65504
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, tiny)),
            std::vector<uint16_t>(2, 0x0005)); // 5.03 subnormal units
  // B[0] is 2^-11 in f16 (2^-24 is lost), so A[0] + B[0] is a tie.
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, sum)),
            (std::vector<uint16_t>{0x3c00, 0x6800, 0x7c00, 0xc180}));
}

TEST(Executor, F16OptimizerStepMatchesTheF32Gradient) {
  // Two AdamW updates of the same master weights, one from an f32 gradient
  // and one from the same values stored as f16: the masters and moments
  // must be bit-identical, the f16 working copy the rounded master.
  OneRank r;
  const int64_t n = 6;
  int64_t p32 = r.add(Region::Persistent, n),
          g32 = r.add(Region::Persistent, n),
          m32 = r.add(Region::Persistent, n),
          v32 = r.add(Region::Persistent, n),
          p16 = r.add(Region::Persistent, n),
          g16 = r.add(Region::Persistent, n, DType::F16),
          m16 = r.add(Region::Persistent, n),
          v16 = r.add(Region::Persistent, n),
          copy = r.add(Region::Persistent, n, DType::F16);
  Instruction &fromF32 = r.emit(
      Opcode::OptimizerStep, {r.all(p32), r.all(g32), r.all(m32), r.all(v32)},
      {r.all(p32), r.all(m32), r.all(v32)});
  fromF32.count = n;
  Instruction &fromF16 = r.emit(
      Opcode::OptimizerStep, {r.all(p16), r.all(g16), r.all(m16), r.all(v16)},
      {r.all(p16), r.all(m16), r.all(v16), r.all(copy)});
  fromF16.count = n;
  auto session = r.open();
  std::vector<float> P = {1.0f, -0.3f, 0.1234567f, 5e-5f, -7.0f, 70000.0f};
  std::vector<float> G = {0.5f, -0x1p-24f, 1000.0f, 0x1.ffcp-3f, -65504.0f, 0};
  ASSERT_EQ(widenF16(toF16(G)), G) << "the gradient must be exact in f16";
  for (int step = 0; step < 2; ++step) {
    if (step == 0) {
      write(*session, p32, P);
      write(*session, p16, P);
    }
    write(*session, g32, G);
    write(*session, g16, toF16(G));
    session->runStep();
    std::vector<float> master = read<float>(*session, p16);
    EXPECT_EQ(read<float>(*session, p32), master) << "step " << step + 1;
    EXPECT_NE(master, P);
    EXPECT_EQ(read<float>(*session, m32), read<float>(*session, m16));
    EXPECT_EQ(read<float>(*session, v32), read<float>(*session, v16));
    EXPECT_EQ(bitsOf(read<kernels::F16>(*session, copy)),
              bitsOf(toF16(master)));
  }
  // The last master is past 65520 and rounds to inf in the working copy.
  EXPECT_GE(read<float>(*session, p16)[5], 65520.0f);
  EXPECT_EQ(read<kernels::F16>(*session, copy)[5].bits, 0x7c00);
}

TEST(Executor, F16GradNormAndClipComputeInFp32) {
  OneRank r;
  int64_t g = r.add(Region::Persistent, 4, DType::F16),
          h = r.add(Region::Persistent, 2, DType::F16),
          sum = r.add(Region::Persistent, 1);
  Instruction &norm =
      r.emit(Opcode::GradNorm, {r.all(g), r.all(h)}, {r.all(sum)});
  norm.dtype = DType::F16;
  Instruction &clip = r.emit(Opcode::Clip, {r.all(sum), r.all(g), r.all(h)},
                             {r.all(g), r.all(h)});
  clip.dtype = DType::F16;
  auto session = r.open();
  std::vector<float> G = {3.0f, -0.1f, 0x1p-24f, 300.0f}, H = {4.0f, 0.5f};
  write(*session, g, toF16(G));
  write(*session, h, toF16(H));
  exec::StepStats stats = session->runStep();
  double squares = 0;
  for (const std::vector<float> &part : {G, H})
    for (float x : widenF16(toF16(part)))
      squares += double(x) * double(x);
  EXPECT_EQ(read<float>(*session, sum)[0], float(squares));
  EXPECT_DOUBLE_EQ(stats.gradNorm, std::sqrt(double(float(squares))));
  // clip 1.0: every gradient scaled by 1/norm in fp32, then rounded.
  float scale = float(1.0 / std::sqrt(double(float(squares))));
  auto clipped = [&](const std::vector<float> &part) {
    std::vector<float> out;
    for (float x : widenF16(toF16(part)))
      out.push_back(x * scale);
    return bitsOf(toF16(out));
  };
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, g)), clipped(G));
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, h)), clipped(H));
}

/// Dynamic loss scaling over one f16 parameter: an f16 gemm writes its
/// gradient, the norm is taken, AdamW steps the f32 master and writes the
/// f16 copy. With `separateClip` a clip precedes the step (the executor
/// decides the skip there), else the step reads the sum of squares (the
/// backend decides).
struct F16OverflowRank {
  OneRank r;
  int64_t x, y, p, g, m, v, copy, sum;
  explicit F16OverflowRank(bool separateClip) {
    r.bundle.training.precision = "fp16";
    r.bundle.training.lossScale.dynamic = true;
    r.bundle.training.lossScale.initial = 1024;
    r.bundle.training.lossScale.growthInterval = 1000;
    r.bundle.training.lossScale.backoff = 0.5;
    x = r.add(Region::Persistent, 1, DType::F16);
    y = r.add(Region::Persistent, 1, DType::F16);
    p = r.add(Region::Persistent, 1);
    g = r.add(Region::Persistent, 1, DType::F16);
    m = r.add(Region::Persistent, 1);
    v = r.add(Region::Persistent, 1);
    copy = r.add(Region::Persistent, 1, DType::F16);
    sum = r.add(Region::Persistent, 1);
    Instruction &gemm = r.emit(Opcode::Gemm, {r.all(x), r.all(y)}, {r.all(g)});
    gemm.gemm = {false, false, 1, 1, 1, 1, 1, 1, 1.0, 0.0};
    gemm.dtype = DType::F16;
    r.emit(Opcode::GradNorm, {r.all(g)}, {r.all(sum)}).dtype = DType::F16;
    std::vector<BufferRange> reads = {r.all(p), r.all(g), r.all(m), r.all(v)};
    if (separateClip)
      r.emit(Opcode::Clip, {r.all(sum), r.all(g)}, {r.all(g)}).dtype =
          DType::F16;
    else
      reads.push_back(r.all(sum));
    r.emit(Opcode::OptimizerStep, reads,
           {r.all(p), r.all(m), r.all(v), r.all(copy)})
        .count = 1;
  }
};

/// 300 x 300 = 90000 overflows f16 to inf, so the sum of squares is not
/// finite and the update is skipped (weights, moments, the f16 copy and the
/// update count stay); after the back-off a finite gradient applies.
void f16OverflowSkipsTheUpdate(bool separateClip) {
  F16OverflowRank f(separateClip);
  auto session = f.r.open();
  write(*session, f.p, std::vector<float>{0.5f});
  write(*session, f.copy, toF16({0.5f}));
  write(*session, f.x, toF16({300.0f}));
  write(*session, f.y, toF16({300.0f}));
  exec::StepStats overflow = session->runStep();
  EXPECT_EQ(read<kernels::F16>(*session, f.g)[0].bits, 0x7c00);
  EXPECT_TRUE(overflow.skipped);
  EXPECT_TRUE(std::isnan(overflow.gradNorm));
  EXPECT_EQ(read<float>(*session, f.p)[0], 0.5f);
  EXPECT_EQ(read<float>(*session, f.m)[0], 0.0f);
  EXPECT_EQ(read<kernels::F16>(*session, f.copy)[0].bits,
            kernels::floatToF16(0.5f).bits);
  EXPECT_EQ(session->lossScaleState().scale, 512);
  EXPECT_EQ(session->lossScaleState().optimizerSteps, 0);

  write(*session, f.y, toF16({0.25f})); // gradient 75: finite
  exec::StepStats applied = session->runStep();
  EXPECT_FALSE(applied.skipped);
  EXPECT_EQ(applied.lossScale, 512);
  EXPECT_DOUBLE_EQ(applied.gradNorm, 75.0 / 512);
  EXPECT_NE(read<float>(*session, f.p)[0], 0.5f);
  EXPECT_EQ(read<kernels::F16>(*session, f.copy)[0].bits,
            kernels::floatToF16(read<float>(*session, f.p)[0]).bits);
  EXPECT_EQ(session->lossScaleState().optimizerSteps, 1);
}

TEST(Executor, F16GradientOverflowSkipsTheUpdate) {
  f16OverflowSkipsTheUpdate(/*separateClip=*/true);
}

TEST(Executor, F16OverflowSkipsTheOptimizerStepThatReadsTheNorm) {
  f16OverflowSkipsTheUpdate(/*separateClip=*/false);
}

TEST(HalfTwoRanks, F16CollectivesReduceInFp32AndMoveBits) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != 2)
    GTEST_SKIP() << "needs mpirun -np 2 (ctest WeftRuntimeTests.two-ranks-f16)";
  OneRank r;
  r.bundle.mesh = {2, 1, 1};
  r.bundle.rankRoles = {0, 0};
  r.bundle.groups[0].groups = {{0, 1}};
  r.bundle.training.globalBatch *= 2;
  const int64_t n = 4;
  int64_t sum = r.add(Region::Persistent, n, DType::F16),
          in = r.add(Region::Persistent, n, DType::F16),
          shard = r.add(Region::Persistent, n / 2, DType::F16),
          gathered = r.add(Region::Persistent, 2 * n, DType::F16);
  // emit() may reallocate the stream: finish each instruction before the
  // next.
  auto collective = [&](Opcode opcode, int64_t from, int64_t to,
                        int64_t count) {
    Instruction &inst = r.emit(opcode, {r.all(from)}, {r.all(to)});
    inst.dtype = DType::F16;
    inst.group = 0;
    inst.count = count;
  };
  collective(Opcode::AllReduce, sum, sum, n);
  collective(Opcode::ReduceScatter, in, shard, n / 2);
  collective(Opcode::AllGather, in, gathered, n);
  auto session = r.open();
  // Per rank: a tie to even (1 + 2^-11), an overflow to inf, an exact sum,
  // and a cancellation.
  std::vector<float> mine[2] = {{1.0f, 40000.0f, 0.375f, 1000.0f},
                                {0x1p-11f, 40000.0f, -2.0f, -999.5f}};
  write(*session, sum, toF16(mine[rank]));
  write(*session, in, toF16(mine[rank]));
  session->runStep();
  std::vector<float> total;
  for (int64_t i = 0; i < n; ++i)
    total.push_back(kernels::f16ToFloat(toF16(mine[0])[size_t(i)]) +
                    kernels::f16ToFloat(toF16(mine[1])[size_t(i)]));
  std::vector<uint16_t> expected = bitsOf(toF16(total));
  EXPECT_EQ(expected, (std::vector<uint16_t>{0x3c00, 0x7c00, 0xbe80, 0x3800}));
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, sum)), expected);
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, shard)),
            std::vector<uint16_t>(expected.begin() + rank * 2,
                                  expected.begin() + rank * 2 + 2));
  std::vector<uint16_t> both = bitsOf(toF16(mine[0]));
  for (uint16_t bits : bitsOf(toF16(mine[1])))
    both.push_back(bits);
  EXPECT_EQ(bitsOf(read<kernels::F16>(*session, gathered)), both);
}

//===----------------------------------------------------------------------===//
// Collectives with several members (format version 5)
//===----------------------------------------------------------------------===//

namespace {

/// Every collective of a 3-member set run twice on one stream: once as one
/// instruction of three members, once as three single-member instructions,
/// on their own output buffers and the same inputs. Member m moves c[m]
/// elements per rank; the all_gather's member 0 and the all_reduce are in
/// place (the all_reduce's members are three slices of one buffer).
struct CoalescedPlan {
  static constexpr int64_t c[3] = {8, 4, 2};
  static constexpr int64_t total = 14;
  OneRank r;
  int64_t ranks = 1;
  int64_t scatterIn[3], gatherIn[3];
  // [0]: the members, [1]: the single-member instructions.
  int64_t scatterOut[2][3], gatherOut[2][3], sum[2];
  size_t gathers[2] = {0, 0}; // the instructions with the in-place member

  explicit CoalescedPlan(int64_t ranks) : ranks(ranks) {
    if (ranks == 2) {
      r.bundle.mesh = {2, 1, 1};
      r.bundle.rankRoles = {0, 1};
      r.bundle.groups[0].groups = {{0, 1}};
      r.bundle.training.globalBatch *= 2;
      r.bundle.prediction.peakMemoryBytes = {0, 0};
    }
    for (int64_t m = 0; m < 3; ++m) {
      scatterIn[m] = r.add(Region::Persistent, ranks * c[m]);
      gatherIn[m] = r.add(Region::Persistent, c[m]); // member 0: unused
    }
    for (int v = 0; v < 2; ++v) {
      for (int64_t m = 0; m < 3; ++m) {
        scatterOut[v][m] = r.add(Region::Persistent, c[m]);
        gatherOut[v][m] = r.add(Region::Persistent, ranks * c[m]);
      }
      sum[v] = r.add(Region::Persistent, total);
    }
    for (int v = 0; v < 2; ++v) {
      // Member m's ranges of each collective, and the all_reduce slice.
      auto scatter = [&](int64_t m) {
        return std::pair{r.all(scatterIn[m]), r.all(scatterOut[v][m])};
      };
      auto gather = [&](int64_t m) {
        BufferRange in = m == 0 ? BufferRange{gatherOut[v][0], 0, c[0] * 4}
                                : r.all(gatherIn[m]);
        return std::pair{in, r.all(gatherOut[v][m])};
      };
      auto slice = [&](int64_t m) {
        int64_t offset = m == 0 ? 0 : m == 1 ? c[0] : c[0] + c[1];
        BufferRange range{sum[v], offset * 4, c[m] * 4};
        return std::pair{range, range};
      };
      for (Opcode opcode :
           {Opcode::ReduceScatter, Opcode::AllGather, Opcode::AllReduce}) {
        auto member = [&](int64_t m) {
          return opcode == Opcode::ReduceScatter ? scatter(m)
                 : opcode == Opcode::AllGather   ? gather(m)
                                                 : slice(m);
        };
        for (int64_t first = 0; first < 3; first += v == 0 ? 3 : 1) {
          int64_t last = v == 0 ? 3 : first + 1;
          if (opcode == Opcode::AllGather && first == 0)
            gathers[v] = r.program.streams[0].instructions.size();
          std::vector<BufferRange> reads, writes;
          int64_t count = 0;
          for (int64_t m = first; m < last; ++m) {
            reads.push_back(member(m).first);
            writes.push_back(member(m).second);
            count += c[m];
          }
          Instruction &inst = r.emit(opcode, reads, writes);
          inst.group = 0;
          inst.count = count;
        }
      }
    }
    // The in-place member reads the rank's own block: role 1's differs.
    if (ranks == 2)
      r.otherRoles.push_back([this](Program &program) {
        for (size_t index : gathers)
          program.streams[0].instructions[index].reads[0].offset = c[0] * 4;
      });
  }

  /// A distinct float per (rank, tensor, element), exact in sums of two.
  static float value(int64_t rank, int64_t tensor, int64_t i) {
    return float(rank * 1000 + tensor * 100 + i) + 0.25f * float(rank + 1);
  }
  static std::vector<float> values(int64_t rank, int64_t tensor, int64_t n,
                                   int64_t from = 0) {
    std::vector<float> out;
    for (int64_t i = from; i < from + n; ++i)
      out.push_back(value(rank, tensor, i));
    return out;
  }

  /// This rank's inputs; the rest of the outputs is poisoned.
  void fill(const Session &session, int64_t rank) const {
    for (int64_t m = 0; m < 3; ++m) {
      write(session, scatterIn[m], values(rank, m, ranks * c[m]));
      write(session, gatherIn[m], values(rank, 10 + m, c[m]));
    }
    for (int v = 0; v < 2; ++v) {
      for (int64_t m = 0; m < 3; ++m) {
        write(session, scatterOut[v][m], std::vector<float>(c[m], -1.0f));
        write(session, gatherOut[v][m],
              std::vector<float>(ranks * c[m], -1.0f));
      }
      // The in-place member's input: this rank's block of the output.
      std::vector<float> block = values(rank, 10, c[0]);
      std::copy(block.begin(), block.end(),
                session.buffer(gatherOut[v][0]).as<float>() + rank * c[0]);
      write(session, sum[v], values(rank, 20, total));
    }
  }

  /// Checks both variants against the sums and concatenations of every
  /// rank's inputs, and against each other byte for byte.
  void check(const Session &session, int64_t rank) const {
    auto sumOver = [&](int64_t tensor, int64_t n, int64_t from) {
      std::vector<float> out(size_t(n), 0.0f);
      for (int64_t q = 0; q < ranks; ++q)
        for (int64_t i = 0; i < n; ++i)
          out[size_t(i)] += value(q, tensor, from + i);
      return out;
    };
    for (int v = 0; v < 2; ++v) {
      SCOPED_TRACE(v == 0 ? "members" : "single-member instructions");
      for (int64_t m = 0; m < 3; ++m) {
        EXPECT_EQ(read<float>(session, scatterOut[v][m]),
                  sumOver(m, c[m], rank * c[m]))
            << "reduce_scatter member " << m;
        std::vector<float> gathered;
        for (int64_t q = 0; q < ranks; ++q)
          for (float x : values(q, 10 + m, c[m]))
            gathered.push_back(x);
        EXPECT_EQ(read<float>(session, gatherOut[v][m]), gathered)
            << "all_gather member " << m;
      }
      EXPECT_EQ(read<float>(session, sum[v]), sumOver(20, total, 0));
    }
    auto same = [&](int64_t a, int64_t b) {
      exec::Operand x = session.buffer(a), y = session.buffer(b);
      return x.bytes == y.bytes &&
             std::memcmp(x.data, y.data, size_t(x.bytes)) == 0;
    };
    for (int64_t m = 0; m < 3; ++m) {
      EXPECT_TRUE(same(scatterOut[0][m], scatterOut[1][m])) << m;
      EXPECT_TRUE(same(gatherOut[0][m], gatherOut[1][m])) << m;
    }
    EXPECT_TRUE(same(sum[0], sum[1]));
  }
};

} // namespace

TEST(Executor, CollectiveMembersOnOneRank) {
  CoalescedPlan plan(1);
  auto session = plan.r.open();
  for (int step = 0; step < 2; ++step) {
    plan.fill(*session, 0);
    session->runStep();
    plan.check(*session, 0);
  }
}

TEST(CoalescedTwoRanks, MembersGiveTheBytesOfSingleCollectives) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != 2)
    GTEST_SKIP() << "needs mpirun -np 2 (ctest "
                    "WeftRuntimeTests.two-ranks-coalesced)";
  CoalescedPlan plan(2);
  auto session = plan.r.open();
  // Two steps: the requests of a stream are reused.
  for (int step = 0; step < 2; ++step) {
    plan.fill(*session, rank);
    session->runStep();
    plan.check(*session, rank);
  }
}

// Two ranks whose streams hold an all-reduce ('grads') and a send/recv
// ('p2p') in opposite program order. Issued stream by stream, rank 0 would
// submit the all-reduce first and rank 1 the recv first (a cycle NCCL can
// hang on, docs/plan-format.md "Verifier" item 3); in the plan's one order
// both submit the send/recv first, and the trace's issue positions show it.
TEST(OrderTwoRanks, CommunicationIsIssuedInThePlansOrder) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world != 2)
    GTEST_SKIP()
        << "needs mpirun -np 2 (ctest WeftRuntimeTests.two-ranks-order)";
  OneRank r;
  r.bundle.mesh = {1, 2, 1};
  r.bundle.rankRoles = {0, 1};
  r.bundle.groups[0].groups = {{0, 1}};
  r.bundle.groups.push_back({1, GroupKind::PP, {{0, 1}}});
  r.bundle.prediction.peakMemoryBytes = {0, 0};
  const int64_t n = 8;
  int64_t grad = r.add(Region::Persistent, n, DType::F32, "w.grad"),
          act = r.add(Region::Persistent, n, DType::F32, "act");
  r.program.streams = {{"grads", {}}, {"p2p", {}}};
  Instruction &sum = r.emit(Opcode::AllReduce, {r.all(grad)}, {r.all(grad)}, 0);
  sum.group = 0;
  sum.count = n;
  sum.dtype = DType::F32;
  Instruction &send = r.emit(Opcode::Send, {r.all(act)}, {}, 1);
  send.group = 1;
  send.peer = 1;
  send.count = n;
  send.dtype = DType::F32;
  r.otherRoles.push_back([&](Program &program) {
    Instruction &recv = program.streams[1].instructions[0];
    recv.opcode = Opcode::Recv;
    recv.peer = 0;
    recv.writes = recv.reads;
    recv.reads.clear();
    std::swap(program.streams[0], program.streams[1]);
  });
  auto session = r.open();
  std::vector<float> grads(n), acts(n);
  for (int64_t i = 0; i < n; ++i) {
    grads[size_t(i)] = float(10 * rank + i);
    acts[size_t(i)] = rank == 0 ? float(100 + i) : -1.0f;
  }
  write(*session, grad, grads);
  write(*session, act, acts);
  session->runStep();

  // Rank 0's stream 1 and rank 1's stream 0 hold the send/recv.
  size_t p2pStream = rank == 0 ? 1 : 0;
  int64_t p2pIssue = -1, sumIssue = -1;
  for (const exec::TraceEvent &event : session->trace())
    (size_t(event.stream) == p2pStream ? p2pIssue : sumIssue) = event.issue;
  ASSERT_GE(p2pIssue, 0);
  ASSERT_GE(sumIssue, 0);
  EXPECT_LT(p2pIssue, sumIssue) << "rank " << rank;
  std::vector<float> wantSum(n), wantAct(n);
  for (int64_t i = 0; i < n; ++i) {
    wantSum[size_t(i)] = float(10 + 2 * i);
    wantAct[size_t(i)] = float(100 + i);
  }
  EXPECT_EQ(read<float>(*session, grad), wantSum);
  EXPECT_EQ(read<float>(*session, act), wantAct);
}

TEST(Communication, ChannelsAreEachCollectiveStreamAndEachSendRecvStream) {
  // From every program of the bundle (a rank that takes no part in a
  // channel still creates its communicators in the same order): one per
  // (group family, stream) of collectives, one per stream of sends and
  // receives, kernels ignored.
  plan::Bundle bundle;
  auto program = [&](std::vector<std::pair<std::string, Opcode>> insts) {
    plan::Program p;
    for (auto &[name, opcode] : insts) {
      Instruction inst;
      inst.opcode = opcode;
      inst.group = opcode == Opcode::AllGather ? 1 : 0;
      auto it =
          std::find_if(p.streams.begin(), p.streams.end(),
                       [&](const plan::Stream &s) { return s.name == name; });
      if (it == p.streams.end())
        it = p.streams.insert(p.streams.end(), plan::Stream{name, {}});
      it->instructions.push_back(inst);
    }
    bundle.programs.push_back(p);
  };
  program({{"dp", Opcode::AllReduce},
           {"compute", Opcode::Kernel},
           {"p2p.fwd.s0", Opcode::Send},
           {"gather", Opcode::AllGather}});
  program({{"dp", Opcode::AllReduce},
           {"tp", Opcode::AllReduce},
           {"p2p.fwd.s0", Opcode::Recv},
           {"p2p.bwd.s0", Opcode::Send}});
  exec::CommunicationChannels channels = exec::communicationChannels(bundle);
  using Collectives = std::set<std::pair<int64_t, std::string>>;
  EXPECT_EQ(channels.collectives,
            (Collectives{{0, "dp"}, {0, "tp"}, {1, "gather"}}));
  EXPECT_EQ(channels.pointToPoint,
            (std::set<std::string>{"p2p.bwd.s0", "p2p.fwd.s0"}));
}

TEST(Communication, BucketsSplitBeforeADependentInstruction) {
  // NCCL does not order the operations of one group: a run of communication
  // is split before an instruction that reads or writes what an earlier one
  // of the run writes, or writes what it reads.
  plan::Stream stream;
  auto add = [&](Opcode opcode, std::vector<BufferRange> reads,
                 std::vector<BufferRange> writes) {
    Instruction inst;
    inst.opcode = opcode;
    inst.reads = std::move(reads);
    inst.writes = std::move(writes);
    stream.instructions.push_back(inst);
  };
  const BufferRange grad{0, 0, 128}, shard{1, 0, 64}, other{2, 0, 64},
      gathered{3, 0, 128}, gathered2{4, 0, 128};
  add(Opcode::ReduceScatter, {grad}, {shard});  // 0
  add(Opcode::AllReduce, {shard}, {shard});     // 1: reduces 0's output
  add(Opcode::AllGather, {other}, {gathered});  // 2: independent of 1
  add(Opcode::AllGather, {other}, {gathered2}); // 3: reads what 2 reads
  // 4: writes what 0 reads, but 0 is not in this run.
  add(Opcode::AllReduce, {{0, 0, 128}}, {{0, 0, 128}});
  add(Opcode::Send, {{3, 64, 64}}, {});     // 5: reads what 2 wrote
  add(Opcode::Recv, {}, {{5, 0, 32}});      // 6
  add(Opcode::Recv, {}, {{5, 28, 8}});      // 7: overlaps 6's write by 4 bytes
  add(Opcode::Kernel, {}, {});              // 8
  add(Opcode::Broadcast, {}, {{6, 0, 16}}); // 9
  add(Opcode::AllGather, {{6, 0, 8}}, {{7, 0, 16}}); // 10: reads 9's
  add(Opcode::AllGather, {{8, 0, 8}}, {{9, 0, 16}}); // 11
  // A member of a multi-member instruction counts as well.
  add(Opcode::AllReduce, {{10, 0, 8}, {9, 8, 8}}, {{10, 0, 8}, {9, 8, 8}});
  using Runs = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(plan::communicationBuckets(stream),
            (Runs{{1, 5}, {5, 7}, {10, 12}}));
}
