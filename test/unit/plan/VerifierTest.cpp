//===- VerifierTest.cpp - The plan verifier on valid and broken plans -----===//

#include "TestBundles.h"

#include "weft/plan/Error.h"
#include "weft/plan/Verifier.h"

#include <gtest/gtest.h>

#include <functional>

using namespace weft::plan;
using namespace weft::plan::test;

namespace {

/// The messages of all diagnostics of `kind`.
std::vector<std::string> messages(const VerifyResult &result, CheckKind kind) {
  std::vector<std::string> out;
  for (const Diagnostic &diagnostic : result.diagnostics)
    if (diagnostic.kind == kind)
      out.push_back(diagnostic.message);
  return out;
}

std::string allMessages(const VerifyResult &result) {
  std::string out;
  for (const Diagnostic &diagnostic : result.diagnostics)
    out += std::string(toString(diagnostic.kind)) + ": " + diagnostic.message +
           "\n";
  return out;
}

/// Give rank 1 its own copy of role 0's program so the two can differ.
void splitRoles(Bundle &bundle) {
  Program copy = bundle.programs[0];
  copy.role = 1;
  bundle.programs.push_back(copy);
  bundle.rankRoles = {0, 1};
  bundle.prediction.peakMemoryBytes.push_back(4096);
}

Instruction &instruction(Bundle &bundle, int64_t role, int64_t stream,
                         int64_t index) {
  return bundle.programs[role].streams[stream].instructions[index];
}

TEST(Verifier, ValidBundlesVerifyCleanly) {
  for (const Bundle &bundle :
       {dataParallelBundle(), pipelineBundle(), pipelineDataParallelBundle(),
        zero3Bundle(), coalescedBundle()}) {
    VerifyResult result = verify(bundle);
    EXPECT_TRUE(result.ok()) << allMessages(result);
  }
}

TEST(Verifier, RankToRoleAndExpansion) {
  Bundle bundle = pipelineBundle();
  EXPECT_EQ(rankToRole(bundle, 1), 1);
  RankProgram program = expandRankProgram(bundle, 1);
  EXPECT_EQ(program.program, &bundle.programs[1]);
  EXPECT_EQ(program.coord.pp, 1);
  EXPECT_THROW(rankToRole(bundle, 2), Error);
  Mesh mesh{2, 3, 4};
  for (int64_t rank = 0; rank < mesh.worldSize(); ++rank)
    EXPECT_EQ(mesh.rankOf(mesh.coordOf(rank)), rank);
  EXPECT_EQ(mesh.rankOf({1, 2, 3}), (1 * 3 + 2) * 4 + 3);
}

TEST(Verifier, StructuralErrorStopsVerification) {
  Bundle bundle = dataParallelBundle();
  instruction(bundle, 0, 0, 3).group = 9;
  VerifyResult result = verify(bundle);
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0].message,
            "programs[0].streams[0].instructions[3].group: unknown group "
            "family 9");
  EXPECT_THROW(result.throwIfFailed(), Error);
}

TEST(Verifier, MismatchedCollectiveSizes) {
  Bundle bundle = dataParallelBundle();
  splitRoles(bundle);
  Instruction &allReduce = instruction(bundle, 1, 0, 3);
  allReduce.count = 32;
  allReduce.reads[0].bytes = allReduce.writes[0].bytes = 128;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Matching),
            std::vector<std::string>{
                "mismatched collective on group 0 of family 0: rank 0 stream 0 "
                "'compute' "
                "instruction 3 (bwd) is all_reduce of 64 f32 (sum) but rank 1 "
                "stream 0 'compute' instruction 3 (bwd) is all_reduce of 32 "
                "f32 (sum)"})
      << allMessages(result);
}

TEST(Verifier, MismatchedReduction) {
  Bundle bundle = dataParallelBundle();
  splitRoles(bundle);
  instruction(bundle, 1, 0, 3).reduce = ReduceOp::Max;
  EXPECT_EQ(messages(verify(bundle), CheckKind::Matching).size(), 1u);
}

TEST(Verifier, CollectivesInDifferentOrderDeadlock) {
  Bundle bundle = dataParallelBundle();
  bundle.groups.push_back({1, GroupKind::Custom, {{0, 1}}});
  splitRoles(bundle);
  // Rank 0 reduces over group 0 then group 1; rank 1 the other way round.
  auto &rank0 = bundle.programs[0].streams[0].instructions;
  rank0.insert(rank0.begin() + 4, rank0[3]);
  rank0[4].group = 1;
  auto &rank1 = bundle.programs[1].streams[0].instructions;
  rank1.insert(rank1.begin() + 4, rank1[3]);
  rank1[3].group = 1;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Deadlock),
            std::vector<std::string>{
                "deadlock: rank 0 stream 0 'compute' instruction 3 (bwd): "
                "all_reduce on group 0 of family 0 waits for rank(s) 1; rank 1 "
                "stream 0 'compute' instruction 3 (bwd): all_reduce on group 0 "
                "of family 1 waits for rank(s) 0"})
      << allMessages(result);
}

TEST(Verifier, MissingSendForRecv) {
  Bundle bundle = pipelineBundle();
  auto &stage0 = bundle.programs[0].streams[0].instructions;
  stage0.erase(stage0.begin() + 2);
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Deadlock),
            std::vector<std::string>{
                "deadlock: rank 0 stream 0 'compute' instruction 2 (bwd): recv "
                "from rank 1 has no matching send; rank 1 stream 0 'compute' "
                "instruction 0 (fwd): recv from rank 0 has no matching send"})
      << allMessages(result);
}

TEST(Verifier, SendRecvSizeMismatch) {
  Bundle bundle = pipelineBundle();
  Instruction &recv = instruction(bundle, 1, 0, 0);
  recv.count = 16;
  recv.writes[0].bytes = 64;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Matching),
            std::vector<std::string>{
                "mismatched send/recv pair: rank 0 stream 0 'compute' "
                "instruction 2 (fwd) is send of 32 f32 but rank 1 stream 0 "
                "'compute' instruction 0 (fwd) is recv of 16 f32"})
      << allMessages(result);
}

TEST(Verifier, WaitWithoutRecord) {
  Bundle bundle = zero3Bundle();
  bundle.programs[0].streams[1].instructions.pop_back();
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Event),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): stream 0 'compute' instruction 1 (fwd "
                "L0): wait_event 0 has no record_event in this program"})
      << allMessages(result);
  EXPECT_EQ(messages(result, CheckKind::Deadlock).size(), 1u);
}

TEST(Verifier, RecordAfterWaitOnSameStreamDeadlocks) {
  Bundle bundle = zero3Bundle();
  auto &gather = bundle.programs[0].streams[1].instructions;
  auto &compute = bundle.programs[0].streams[0].instructions;
  compute.push_back(gather.back());
  gather.pop_back();
  VerifyResult result = verify(bundle);
  std::vector<std::string> deadlocks = messages(result, CheckKind::Deadlock);
  ASSERT_EQ(deadlocks.size(), 1u) << allMessages(result);
  EXPECT_EQ(deadlocks[0],
            "deadlock: rank 0 stream 0 'compute' instruction 1 (fwd L0): "
            "waits for event 0, whose record_event never executes; rank 1 "
            "stream 0 'compute' instruction 1 (fwd L0): waits for event 0, "
            "whose record_event never executes");
}

TEST(Verifier, ReadBeforeWrite) {
  Bundle bundle = dataParallelBundle();
  auto &insts = bundle.programs[0].streams[0].instructions;
  insts.erase(insts.begin());
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Init),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): stream 0 'compute' instruction 0 (fwd): "
                "reads buffer 3 'tokens' bytes [0, 64) before they are "
                "written"})
      << allMessages(result);
}

TEST(Verifier, ARangeReadTwiceBeforeItsWriteIsOneDiagnostic) {
  // The gemm (instruction 2) reads act as A and as B.
  Bundle bundle = dataParallelBundle();
  auto &insts = bundle.programs[0].streams[0].instructions;
  ASSERT_EQ(insts[2].opcode, Opcode::Gemm);
  ASSERT_EQ(insts[2].reads[0], insts[2].reads[1]);
  insts.erase(insts.begin() + 1); // the kernel that writes act
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Init),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): stream 0 'compute' instruction 1 (bwd): "
                "reads buffer 2 'act' bytes [0, 256) before they are "
                "written"})
      << allMessages(result);
}

TEST(Verifier, PartialWriteLeavesBytesUninitialized) {
  Bundle bundle = dataParallelBundle();
  instruction(bundle, 0, 0, 0).writes[0] = {3, 0, 32};
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Init),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): stream 0 'compute' instruction 1 (fwd): "
                "reads buffer 3 'tokens' bytes [32, 64) before they are "
                "written"});
}

TEST(Verifier, ReadAfterRelease) {
  Bundle bundle = zero3Bundle();
  const Program &p = bundle.programs[0];
  bundle.programs[0].streams[0].instructions.push_back(
      kernel(0, {whole(p, 1)}, {whole(p, 2)}, "bwd L0"));
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Init),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): stream 0 'compute' instruction 4 (bwd "
                "L0): reads buffer 1 'w.full' bytes [0, 256) after their "
                "release at stream 0 'compute' instruction 3 (fwd L0)"})
      << allMessages(result);
}

TEST(Verifier, CrossStreamRaceWithoutEvent) {
  Bundle bundle = zero3Bundle();
  // A second gather into the same buffer, issued without waiting for the
  // compute stream to finish reading it.
  auto &gather = bundle.programs[0].streams[1].instructions;
  gather.push_back(gather.front());
  gather.back().phase = "gather L1";
  VerifyResult result = verify(bundle);
  std::vector<std::string> races = messages(result, CheckKind::Race);
  ASSERT_FALSE(races.empty()) << allMessages(result);
  EXPECT_EQ(races[0], "role 0 (ranks 0, 1): stream 0 'compute' instruction 2 "
                      "(fwd L0): reads buffer 1 'w.full' bytes [0, 256) "
                      "written by stream 1 'allgather' instruction 2 (gather "
                      "L1) with no event ordering them");
}

TEST(Verifier, RemovingTheWaitIsARace) {
  Bundle bundle = zero3Bundle();
  auto &compute = bundle.programs[0].streams[0].instructions;
  compute.erase(compute.begin() + 1);
  VerifyResult result = verify(bundle);
  std::vector<std::string> races = messages(result, CheckKind::Race);
  ASSERT_FALSE(races.empty()) << allMessages(result);
  // The gather's write conflicts with the compute stream's release (which
  // supersedes its earlier read of the same bytes).
  EXPECT_EQ(races[0], "role 0 (ranks 0, 1): stream 1 'allgather' instruction "
                      "0 (gather L0): writes buffer 1 'w.full' bytes [0, 256) "
                      "written by stream 0 'compute' instruction 2 (fwd L0) "
                      "with no event ordering them");
}

TEST(Verifier, OverlappingLiveBuffers) {
  Bundle bundle = dataParallelBundle();
  bundle.programs[0].buffers[3].offset = 192; // tokens now overlaps act
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Memory),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): arena buffer 3 'tokens' and buffer 2 "
                "'act' overlap in bytes [192, 256) while both are live: 'act' "
                "is first accessed at stream 0 'compute' instruction 1 (fwd), "
                "not after the last access of 'tokens' at stream 0 'compute' "
                "instruction 1 (fwd)"})
      << allMessages(result);
}

TEST(Verifier, ReuseAfterLastUseIsAllowed) {
  Bundle bundle = zero3Bundle();
  // 'act' is written after the last use of 'w.full' on the same stream, so
  // the two may share bytes.
  Program &program = bundle.programs[0];
  program.buffers[2].offset = 0;
  auto &compute = program.streams[0].instructions;
  compute[2].writes.clear();
  compute[2].writes.push_back({3, 0, 64});
  compute[2].reads = {whole(program, 1)};
  compute.push_back(op(Opcode::Copy, {{3, 0, 64}}, {{2, 0, 64}}, "fwd L1"));
  VerifyResult result = verify(bundle);
  EXPECT_TRUE(result.ok()) << allMessages(result);
}

/// Arena buffers 'mb0'..'mb7' at offset 0, one micro-batch each, loaded
/// and read in turn on one stream (a step's activations reusing the same
/// bytes), and a buffer 'wide' over all of them and 64 bytes more, used
/// after them.
Bundle reusedOffsetsBundle() {
  Bundle bundle = baseBundle({1, 1, 1}, 1);
  bundle.rankRoles = {0};
  Program program;
  program.arenaBytes = 128;
  std::vector<Instruction> &compute =
      program.streams.emplace_back(Stream{"compute", {}}).instructions;
  for (int64_t i = 0; i < 8; ++i) {
    std::string name = "mb" + std::to_string(i);
    program.buffers.push_back(buffer(i, name, Region::Arena, 0, 64));
    compute.push_back(op(Opcode::LoadBatch, {}, {{i, 0, 64}}, name));
    compute.push_back(op(Opcode::Copy, {{i, 0, 64}}, {{i, 0, 64}}, name));
  }
  program.buffers.push_back(buffer(8, "wide", Region::Arena, 0, 128));
  compute.push_back(op(Opcode::LoadBatch, {}, {{8, 0, 128}}, "wide"));
  bundle.programs.push_back(program);
  return bundle;
}

TEST(Verifier, ReusedOffsetsAreCheckedAgainstEveryEarlierBuffer) {
  EXPECT_TRUE(verify(reusedOffsetsBundle()).ok())
      << allMessages(verify(reusedOffsetsBundle()));
  // 'mb2' read again after 'mb5' was loaded over it: the overlap is found
  // first against its successor on those bytes, mb3.
  Bundle late = reusedOffsetsBundle();
  auto &compute = late.programs[0].streams[0].instructions;
  compute.insert(compute.begin() + 11,
                 op(Opcode::Copy, {{2, 0, 64}}, {{2, 0, 64}}, "late"));
  EXPECT_EQ(messages(verify(late), CheckKind::Memory),
            std::vector<std::string>{
                "role 0 (rank 0): arena buffer 2 'mb2' and buffer 3 'mb3' "
                "overlap in bytes [0, 64) while both are live: 'mb3' is first "
                "accessed at stream 0 'compute' instruction 6 (mb3), not after "
                "the last access of 'mb2' at stream 0 'compute' instruction 11 "
                "(late)"})
      << allMessages(verify(late));
  // 'mb7' still read after 'wide' is loaded over it and its 64 free bytes.
  Bundle wide = reusedOffsetsBundle();
  wide.programs[0].streams[0].instructions.push_back(
      op(Opcode::Copy, {{7, 0, 64}}, {{7, 0, 64}}, "after wide"));
  std::vector<std::string> found = messages(verify(wide), CheckKind::Memory);
  ASSERT_EQ(found.size(), 1u) << allMessages(verify(wide));
  EXPECT_NE(found[0].find("buffer 7 'mb7' and buffer 8 'wide' overlap in bytes "
                          "[0, 64)"),
            std::string::npos)
      << found[0];
}

TEST(Verifier, BufferOutsideItsRegion) {
  Bundle bundle = dataParallelBundle();
  bundle.programs[0].arenaBytes = 300;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Memory),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): buffer 3 'tokens' bytes [256, 320) lies "
                "outside the arena region of 300 bytes"})
      << allMessages(result);
}

TEST(Verifier, OverlappingPersistentBuffers) {
  Bundle bundle = dataParallelBundle();
  bundle.programs[0].buffers[1].offset = 0;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Memory),
            std::vector<std::string>{"role 0 (ranks 0, 1): persistent buffers "
                                     "0 'w' and 1 'w.grad' overlap"});
}

TEST(Verifier, CollectiveOnGroupWithoutTheRank) {
  Bundle bundle = dataParallelBundle();
  bundle.groups[0].groups = {{0}};
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Structure),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[3].group: rank 1 of role "
                "0 is in no group of family 0 (dp)"})
      << allMessages(result);
}

//===----------------------------------------------------------------------===//
// Group families (format version 2)
//===----------------------------------------------------------------------===//

TEST(Verifier, ReplicasSharingAProgramResolveDifferentGroups) {
  Bundle bundle = pipelineDataParallelBundle();
  // DP replicas 0 and 1 of each stage run one program...
  EXPECT_EQ(bundle.programs.size(), 2u);
  EXPECT_EQ(rankToRole(bundle, 0), rankToRole(bundle, 2));
  // ...and resolve the PP family to their own pipeline.
  ASSERT_NE(resolveGroup(bundle, 0, 0), nullptr);
  ASSERT_NE(resolveGroup(bundle, 0, 2), nullptr);
  EXPECT_EQ(*resolveGroup(bundle, 0, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(*resolveGroup(bundle, 0, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*resolveGroup(bundle, 1, 3), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(resolveGroup(bundle, 2, 0), nullptr);
  EXPECT_EQ(findGroupOf(bundle.groups[0], 3), 1);
  EXPECT_EQ(groupIndexOf(bundle.groups[1].groups[1], 3), 1);
  VerifyResult result = verify(bundle);
  EXPECT_TRUE(result.ok()) << allMessages(result);
}

TEST(Verifier, ReplicaMismatchIsReportedPerConcreteGroup) {
  // Give the replicas of stage 1 separate programs; replica 1 sends a
  // smaller activation gradient, which only pipeline [2, 3] notices.
  Bundle bundle = pipelineDataParallelBundle();
  Program copy = bundle.programs[1];
  copy.role = 2;
  bundle.programs.push_back(copy);
  bundle.rankRoles = {0, 1, 0, 2};
  bundle.prediction.peakMemoryBytes.push_back(4096);
  Instruction &send = instruction(bundle, 2, 0, 2);
  send.count = 16;
  send.reads[0].bytes = 64;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Matching),
            std::vector<std::string>{
                "mismatched send/recv pair: rank 3 stream 0 'compute' "
                "instruction 2 (bwd) is send of 16 f32 but rank 2 stream 0 "
                "'compute' instruction 3 (bwd) is recv of 32 f32"})
      << allMessages(result);
}

TEST(Verifier, RankInNoGroupOfTheFamily) {
  Bundle bundle = pipelineDataParallelBundle();
  bundle.groups[0].groups = {{0, 1}};
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Structure),
            (std::vector<std::string>{
                "programs[0].streams[0].instructions[2].group: rank 2 of role "
                "0 is in no group of family 0 (pp)",
                "programs[0].streams[0].instructions[3].group: rank 2 of role "
                "0 is in no group of family 0 (pp)",
                "programs[1].streams[0].instructions[0].group: rank 3 of role "
                "1 is in no group of family 0 (pp)",
                "programs[1].streams[0].instructions[2].group: rank 3 of role "
                "1 is in no group of family 0 (pp)"}))
      << allMessages(result);
}

TEST(Verifier, OverlappingGroupsOfAFamily) {
  Bundle bundle = pipelineDataParallelBundle();
  bundle.groups[1].groups = {{0, 2}, {2, 3}};
  VerifyResult result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_FALSE(structure.empty()) << allMessages(result);
  EXPECT_EQ(structure.front(), "groups[1].groups[1][0]: rank 2 is also in "
                               "group 0 (the groups of a family are "
                               "disjoint)");
}

TEST(Verifier, UnequalGroupSizesInAFamily) {
  Bundle bundle = pipelineDataParallelBundle();
  bundle.groups[1].groups = {{0, 2}, {1, 3}, {}};
  bundle.groups[0].groups = {{0, 1}, {2}};
  VerifyResult result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_GE(structure.size(), 2u) << allMessages(result);
  EXPECT_EQ(structure[0], "groups[0].groups[1]: has 1 ranks but group 0 has 2 "
                          "(the groups of a family have one size)");
  EXPECT_EQ(structure[1],
            "groups[1].groups[2]: a group needs at least one rank");
}

TEST(Verifier, EmptyFamily) {
  Bundle bundle = pipelineDataParallelBundle();
  bundle.groups[1].groups.clear();
  VerifyResult result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_FALSE(structure.empty()) << allMessages(result);
  EXPECT_EQ(structure.front(),
            "groups[1].groups: a group family needs at least one group");
}

//===--- The host region (format version 4) ------------------------------===//

TEST(Verifier, HostOffloadBundleVerifies) {
  VerifyResult result = verify(hostOffloadBundle());
  EXPECT_TRUE(result.ok()) << allMessages(result);
}

TEST(Verifier, GemmReadingAHostBufferIsRejected) {
  Bundle bundle = hostOffloadBundle();
  instruction(bundle, 0, 0, 2).reads[1] = {6, 0, 256}; // the host master
  VerifyResult result = verify(bundle);
  EXPECT_EQ(
      messages(result, CheckKind::Structure),
      std::vector<std::string>{
          "programs[0].streams[0].instructions[2].reads[1]: gemm reads "
          "or writes host buffer 6 'w.master' (host memory is for "
          "copy, fill and an optimizer_step or clip whose operands are all on "
          "the host)"})
      << allMessages(result);
}

TEST(Verifier, CollectiveOnAHostBufferIsRejected) {
  Bundle bundle = hostOffloadBundle();
  Instruction &allReduce = instruction(bundle, 0, 0, 3);
  allReduce.reads[0] = allReduce.writes[0] = {7, 0, 256}; // w.grad.host
  VerifyResult result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_FALSE(structure.empty()) << allMessages(result);
  EXPECT_EQ(
      structure.front(),
      "programs[0].streams[0].instructions[3].reads[0]: all_reduce "
      "reads or writes host buffer 7 'w.grad.host' (host memory is for "
      "copy, fill and an optimizer_step or clip whose operands are all on the "
      "host)");
}

TEST(Verifier, OptimizerStepMixingHostAndDeviceIsRejected) {
  Bundle bundle = hostOffloadBundle();
  // The gradient straight from device memory, the rest on the host.
  instruction(bundle, 0, 0, 5).reads[1] = {1, 0, 256};
  VerifyResult result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_FALSE(structure.empty()) << allMessages(result);
  EXPECT_EQ(
      structure.front(),
      "programs[0].streams[0].instructions[5].reads[0]: optimizer_step "
      "reads or writes host buffer 6 'w.master' (host memory is for "
      "copy, fill and an optimizer_step or clip whose operands are all on the "
      "host)");
}

TEST(Verifier, ClipOnHostMemoryOnlyIsAccepted) {
  // Offload clips the gradients on the host: a clip whose sum of squares
  // and gradients are all host buffers runs there; one that reads the sum
  // from the device does not.
  Bundle bundle = hostOffloadBundle();
  std::vector<Instruction> &compute =
      bundle.programs[0].streams[0].instructions;
  Instruction clip =
      op(Opcode::Clip, {{8, 0, 4}, {7, 0, 256}}, {{7, 0, 256}}, "clip");
  clip.dtype = DType::F32;
  compute.insert(compute.end() - 2, clip); // after the copy to the host
  VerifyResult result = verify(bundle);
  EXPECT_TRUE(result.ok()) << allMessages(result);

  instruction(bundle, 0, 0, int64_t(compute.size()) - 3).reads[0] = {1, 0, 4};
  result = verify(bundle);
  std::vector<std::string> structure = messages(result, CheckKind::Structure);
  ASSERT_FALSE(structure.empty()) << allMessages(result);
  EXPECT_EQ(structure.front(),
            "programs[0].streams[0].instructions[5].reads[1]: clip reads or "
            "writes host buffer 7 'w.grad.host' (host memory is for copy, "
            "fill and an optimizer_step or clip whose operands are all on "
            "the host)");
}

TEST(Verifier, OverlappingHostBuffers) {
  Bundle bundle = hostOffloadBundle();
  bundle.programs[0].buffers[5].offset = 128; // exp_avg_sq over exp_avg
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Memory),
            std::vector<std::string>{"role 0 (ranks 0, 1): host buffers 4 "
                                     "'w.exp_avg' and 5 'w.exp_avg_sq' "
                                     "overlap"})
      << allMessages(result);
}

TEST(Verifier, HostBufferOutsideHostBytes) {
  Bundle bundle = hostOffloadBundle();
  bundle.programs[0].hostBytes = 1200;
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Memory),
            std::vector<std::string>{
                "role 0 (ranks 0, 1): buffer 8 'w.host' bytes [1024, 1280) "
                "lies outside the host region of 1200 bytes"})
      << allMessages(result);
}

//===----------------------------------------------------------------------===//
// Collectives with several members (format version 5)
//===----------------------------------------------------------------------===//

/// The structural diagnostics of coalescedBundle() after `edit` on role 0's
/// instruction `index`.
std::vector<std::string>
memberErrors(int64_t index, const std::function<void(Instruction &)> &edit) {
  Bundle bundle = coalescedBundle();
  edit(instruction(bundle, 0, 0, index));
  return messages(verify(bundle), CheckKind::Structure);
}

TEST(Verifier, MembersNeedOneReadAndOneWriteEach) {
  EXPECT_EQ(
      memberErrors(0, [](Instruction &scatter) { scatter.writes.pop_back(); }),
      std::vector<std::string>{
          "programs[0].streams[0].instructions[0].writes: "
          "reduce_scatter has 3 reads ranges but 2 writes ranges (one "
          "of each per member)"});
  EXPECT_EQ(
      memberErrors(2,
                   [](Instruction &sum) {
                     sum.reads.clear();
                     sum.writes.clear();
                   }),
      (std::vector<std::string>{
          "programs[0].streams[0].instructions[2].reads: all_reduce needs at "
          "least 1 reads ranges, got 0",
          "programs[0].streams[0].instructions[2].writes: all_reduce needs at "
          "least 1 writes ranges, got 0"}));
  // Broadcast, send and recv keep exactly one range.
  Bundle bundle = pipelineBundle();
  Instruction &send = instruction(bundle, 0, 0, 2);
  send.reads.push_back(send.reads[0]);
  EXPECT_EQ(messages(verify(bundle), CheckKind::Structure),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[2].reads: send needs "
                "exactly 1 reads ranges, got 2"});
}

TEST(Verifier, MemberBytesFollowTheOpcode) {
  // all_gather member 0: 8 f32 in, 8 x 2 ranks out.
  EXPECT_EQ(
      memberErrors(1, [](Instruction &gather) { gather.writes[0].bytes = 32; }),
      std::vector<std::string>{
          "programs[0].streams[0].instructions[1].writes[0].bytes: "
          "member 0 of all_gather (8 f32 over 2 ranks) needs 64 bytes, "
          "got 32"});
  // reduce_scatter member 1: its count is its output's (4 f32), its input
  // 4 x 2 ranks.
  EXPECT_EQ(memberErrors(
                0, [](Instruction &scatter) { scatter.reads[1].bytes = 16; }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[0].reads[1].bytes: "
                "member 1 of reduce_scatter (4 f32 over 2 ranks) needs 32 "
                "bytes, got 16"});
  // all_reduce: the same bytes in and out, whole elements.
  EXPECT_EQ(memberErrors(2, [](Instruction &sum) { sum.writes[1].bytes = 28; }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[2].writes[1].bytes: "
                "member 1 of all_reduce (8 f32) needs 32 bytes, got 28"});
  // Part of an element: said once per range when the buffer holds the
  // collective's dtype, by the member rule when it holds another.
  std::vector<std::string> partElement = {
      "programs[0].streams[0].instructions[2].reads[1].bytes: 30 is not a "
      "multiple of 4 (buffer 8 'sum' holds f32)",
      "programs[0].streams[0].instructions[2].writes[1].bytes: 30 is not a "
      "multiple of 4 (buffer 8 'sum' holds f32)"};
  EXPECT_EQ(memberErrors(2,
                         [](Instruction &sum) {
                           sum.reads[1].bytes = sum.writes[1].bytes = 30;
                         }),
            partElement);
  EXPECT_EQ(memberErrors(2,
                         [](Instruction &sum) {
                           sum.dtype = DType::F64;
                           sum.reads[1].bytes = sum.writes[1].bytes = 28;
                         }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[2].reads[1].bytes: "
                "member 1 of all_reduce holds 28 bytes, not a whole number "
                "of f64 elements"});
}

TEST(Verifier, MemberCountsSumToCount) {
  EXPECT_EQ(memberErrors(2, [](Instruction &sum) { sum.count = 13; }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[2].count: all_reduce of "
                "13 f32: its 2 members hold 12 elements (4 + 8)"});
  EXPECT_EQ(memberErrors(0, [](Instruction &scatter) { scatter.count = 48; }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[0].count: reduce_scatter "
                "of 48 f32: its 3 members hold 16 elements (8 + 4 + 4)"});
}

TEST(Verifier, MembersMustBeIndependent) {
  // Two members writing the same bytes.
  EXPECT_EQ(memberErrors(0,
                         [](Instruction &scatter) {
                           scatter.writes[2] = scatter.writes[1];
                         }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[0].writes[2]: member 2 "
                "of reduce_scatter overlaps member 1's writes"});
  // A member writing what an earlier member reads.
  EXPECT_EQ(memberErrors(0,
                         [](Instruction &scatter) {
                           scatter.writes[1] = {0, 48, 16}; // in g0
                         }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[0].writes[1]: member 1 "
                "of reduce_scatter overlaps member 0's reads"});
  // A member reading what an earlier member writes.
  EXPECT_EQ(memberErrors(1,
                         [](Instruction &gather) {
                           gather.reads[1] = {6, 0, 16}; // in full0
                         }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[1].reads[1]: member 1 "
                "of all_gather overlaps member 0's writes"});
  // Overlapping in-place all_reduce members (one byte in common).
  EXPECT_EQ(memberErrors(2,
                         [](Instruction &sum) {
                           sum.reads[0] = sum.writes[0] = {8, 4, 16};
                         }),
            std::vector<std::string>{
                "programs[0].streams[0].instructions[2].writes[1]: member 1 "
                "of all_reduce overlaps member 0's writes"});
  // A member's own in-place ranges and two members reading the same bytes
  // are fine.
  EXPECT_EQ(
      memberErrors(
          0, [](Instruction &scatter) { scatter.reads[2] = scatter.reads[1]; }),
      std::vector<std::string>{});
}

TEST(Verifier, MismatchedMemberSplit) {
  // Role 1 splits the all_reduce's 12 elements 8 + 4 where role 0 has 4 + 8:
  // same count, different members.
  Bundle bundle = coalescedBundle();
  Instruction &sum = instruction(bundle, 1, 0, 2);
  sum.reads = sum.writes = {{8, 0, 32}, {8, 32, 16}};
  VerifyResult result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Matching),
            std::vector<std::string>{
                "mismatched collective on group 0 of family 0: rank 0 stream "
                "0 'compute' instruction 2 (sum) is all_reduce of 12 f32 (sum) "
                "in 2 members (4, 8) but rank 1 stream 0 'compute' instruction "
                "2 (sum) is all_reduce of 12 f32 (sum) in 2 members (8, 4)"})
      << allMessages(result);
  // As many elements in fewer members.
  sum.reads = sum.writes = {{8, 0, 48}};
  result = verify(bundle);
  EXPECT_EQ(messages(result, CheckKind::Matching),
            std::vector<std::string>{
                "mismatched collective on group 0 of family 0: rank 0 stream "
                "0 'compute' instruction 2 (sum) is all_reduce of 12 f32 (sum) "
                "in 2 members (4, 8) but rank 1 stream 0 'compute' instruction "
                "2 (sum) is all_reduce of 12 f32 (sum) in 1 member (12)"})
      << allMessages(result);
  // A count mismatch alone does not list the members.
  bundle = coalescedBundle();
  Instruction &scatter = instruction(bundle, 1, 0, 0);
  scatter.count = 12;
  scatter.reads = {scatter.reads[0], scatter.reads[1]};
  scatter.writes = {scatter.writes[0], scatter.writes[1]};
  Instruction &scatter0 = instruction(bundle, 0, 0, 0);
  scatter0.count = 12;
  scatter0.reads = {scatter0.reads[0], scatter0.reads[2]};
  scatter0.writes = {scatter0.writes[0], scatter0.writes[2]};
  EXPECT_TRUE(verify(bundle).ok()) << allMessages(verify(bundle));
  instruction(bundle, 1, 0, 2).reduce = ReduceOp::Max;
  EXPECT_EQ(messages(verify(bundle), CheckKind::Matching),
            std::vector<std::string>{
                "mismatched collective on group 0 of family 0: rank 0 stream "
                "0 'compute' instruction 2 (sum) is all_reduce of 12 f32 (sum) "
                "but rank 1 stream 0 'compute' instruction 2 (sum) is "
                "all_reduce of 12 f32 (max)"});
}

/// Two ranks, two streams each: a gradient all-reduce on 'grads' and a
/// send/recv on 'p2p', independent of each other, with the streams in
/// opposite program order on the two ranks. Issued stream by stream, rank 0
/// submits the all-reduce first and rank 1 the recv first: a GPU that runs
/// one launch at a time would have each rank wait in the operation the
/// other has not reached.
Bundle crossedStreamsBundle() {
  Bundle bundle = baseBundle({1, 2, 1}, 2);
  bundle.groups.push_back({0, GroupKind::PP, {{0, 1}}});
  bundle.groups.push_back({1, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 1};
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.arenaBytes = 64;
    program.persistentBytes = 512;
    program.buffers = {buffer(0, "w.grad", Region::Persistent, 0, 256),
                       buffer(1, "act", Region::Persistent, 256, 256)};
    const Program &p = program;
    Stream grads{"grads",
                 {comm(Opcode::AllReduce, 1, 64, {whole(p, 0)}, {whole(p, 0)},
                       "grad sync")}};
    Stream p2p{"p2p",
               {role == 0
                    ? comm(Opcode::Send, 0, 64, {whole(p, 1)}, {}, "fwd", 1)
                    : comm(Opcode::Recv, 0, 64, {}, {whole(p, 1)}, "fwd", 0)}};
    program.streams = role == 0 ? std::vector<Stream>{grads, p2p}
                                : std::vector<Stream>{p2p, grads};
    bundle.programs.push_back(program);
  }
  return bundle;
}

TEST(Verifier, CommunicationIsIssuedInOneOrderOnEveryRank) {
  Bundle bundle = crossedStreamsBundle();
  std::vector<std::vector<StreamPosition>> natural = {
      hostIssueOrder(bundle.programs[0]), hostIssueOrder(bundle.programs[1])};
  EXPECT_EQ(launchOrderCycle(bundle, natural, nullptr),
            "communication order: 2 operations are submitted in orders that "
            "can wait on each other: rank 0 issues all_reduce at stream 0 "
            "'grads' instruction 0 (grad sync) before send at stream 1 'p2p' "
            "instruction 0 (fwd); rank 1 issues recv at stream 0 'p2p' "
            "instruction 0 (fwd) before all_reduce at stream 1 'grads' "
            "instruction 0 (grad sync)");

  // The runtime's order: the operations in the order they complete in the
  // verifier's simulation, here the send/recv first on both ranks.
  std::vector<std::vector<StreamPosition>> order = communicationOrder(bundle);
  ASSERT_EQ(order.size(), 2u);
  auto positions = [](const std::vector<StreamPosition> &list) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (StreamPosition at : list)
      out.push_back({at.stream, at.index});
    return out;
  };
  using Positions = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(positions(order[0]), (Positions{{1, 0}, {0, 0}}));
  EXPECT_EQ(positions(order[1]), (Positions{{0, 0}, {1, 0}}));
  std::vector<std::vector<StreamPosition>> issued = {
      hostIssueOrder(bundle.programs[0], &order[0]),
      hostIssueOrder(bundle.programs[1], &order[1])};
  EXPECT_EQ(positions(issued[0]), (Positions{{1, 0}, {0, 0}}));
  EXPECT_EQ(launchOrderCycle(bundle, issued, &order), "");
  VerifyResult result = verify(bundle);
  EXPECT_TRUE(result.ok()) << allMessages(result);

  // A plan whose operations never all meet has no order.
  instruction(bundle, 1, 0, 0).peer = 1; // rank 1 receives from itself
  EXPECT_TRUE(communicationOrder(bundle).empty());
}

TEST(Verifier, BucketsAreCutWhereTheOrderSplitsThem) {
  // A send after rank 0's all-reduce on its stream: one bucket of two,
  // which rank 0 launches together only where its order lists them one
  // after the other.
  Bundle bundle = crossedStreamsBundle();
  Program &program = bundle.programs[0];
  program.streams[0].instructions.push_back(program.streams[1].instructions[0]);
  EXPECT_EQ(communicationBuckets(program, 0, nullptr),
            (std::vector<std::pair<size_t, size_t>>{{0, 2}}));
  std::vector<StreamPosition> together = {{0, 0}, {0, 1}};
  std::vector<StreamPosition> apart = {{0, 0}, {1, 0}, {0, 1}};
  EXPECT_EQ(communicationBuckets(program, 0, &together),
            (std::vector<std::pair<size_t, size_t>>{{0, 2}}));
  EXPECT_TRUE(communicationBuckets(program, 0, &apart).empty());
}

} // namespace
