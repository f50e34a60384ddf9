//===- Bundle.cpp - Enum spellings and rank/role helpers ------------------===//

#include "weft/plan/Bundle.h"
#include "weft/plan/Error.h"

#include <algorithm>
#include <array>
#include <utility>

using namespace weft::plan;

namespace {

template <typename Enum, size_t N>
using SpellingTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr SpellingTable<DType, 8> kDTypes = {{{DType::F32, "f32"},
                                              {DType::F16, "f16"},
                                              {DType::BF16, "bf16"},
                                              {DType::F64, "f64"},
                                              {DType::I32, "i32"},
                                              {DType::I64, "i64"},
                                              {DType::U16, "u16"},
                                              {DType::U8, "u8"}}};
constexpr SpellingTable<Region, 3> kRegions = {
    {{Region::Persistent, "persistent"},
     {Region::Arena, "arena"},
     {Region::Host, "host"}}};
constexpr SpellingTable<GroupKind, 5> kGroupKinds = {
    {{GroupKind::TP, "tp"},
     {GroupKind::PP, "pp"},
     {GroupKind::DP, "dp"},
     {GroupKind::World, "world"},
     {GroupKind::Custom, "custom"}}};
constexpr SpellingTable<ReduceOp, 3> kReduceOps = {
    {{ReduceOp::Sum, "sum"}, {ReduceOp::Max, "max"}, {ReduceOp::Min, "min"}}};
constexpr SpellingTable<GemmEpilogue, 5> kGemmEpilogues = {
    {{GemmEpilogue::None, "none"},
     {GemmEpilogue::Bias, "bias"},
     {GemmEpilogue::GeluBias, "gelu_bias"},
     {GemmEpilogue::DGelu, "dgelu"},
     {GemmEpilogue::BiasGrad, "bias_grad"}}};
constexpr SpellingTable<Opcode, 17> kOpcodes = {
    {{Opcode::Kernel, "kernel"},
     {Opcode::Gemm, "gemm"},
     {Opcode::LoadBatch, "load_batch"},
     {Opcode::Copy, "copy"},
     {Opcode::Fill, "fill"},
     {Opcode::AllReduce, "all_reduce"},
     {Opcode::ReduceScatter, "reduce_scatter"},
     {Opcode::AllGather, "all_gather"},
     {Opcode::Broadcast, "broadcast"},
     {Opcode::Send, "send"},
     {Opcode::Recv, "recv"},
     {Opcode::RecordEvent, "record_event"},
     {Opcode::WaitEvent, "wait_event"},
     {Opcode::OptimizerStep, "optimizer_step"},
     {Opcode::GradNorm, "grad_norm"},
     {Opcode::Clip, "clip"},
     {Opcode::Release, "release"}}};

template <typename Enum, size_t N>
std::string_view spell(const SpellingTable<Enum, N> &table, Enum value) {
  for (const auto &[entry, text] : table)
    if (entry == value)
      return text;
  return "?";
}

template <typename Enum, size_t N>
std::optional<Enum> parse(const SpellingTable<Enum, N> &table,
                          std::string_view text) {
  for (const auto &[entry, spelling] : table)
    if (spelling == text)
      return entry;
  return std::nullopt;
}

} // namespace

std::string_view weft::plan::toString(DType dtype) {
  return spell(kDTypes, dtype);
}
std::string_view weft::plan::toString(Region region) {
  return spell(kRegions, region);
}
std::string_view weft::plan::toString(GroupKind kind) {
  return spell(kGroupKinds, kind);
}
std::string_view weft::plan::toString(ReduceOp op) {
  return spell(kReduceOps, op);
}
std::string_view weft::plan::toString(Opcode opcode) {
  return spell(kOpcodes, opcode);
}
std::string_view weft::plan::toString(GemmEpilogue epilogue) {
  return spell(kGemmEpilogues, epilogue);
}
std::optional<GemmEpilogue>
weft::plan::parseGemmEpilogue(std::string_view text) {
  return parse(kGemmEpilogues, text);
}
std::optional<DType> weft::plan::parseDType(std::string_view text) {
  return parse(kDTypes, text);
}
std::optional<Region> weft::plan::parseRegion(std::string_view text) {
  return parse(kRegions, text);
}
std::optional<GroupKind> weft::plan::parseGroupKind(std::string_view text) {
  return parse(kGroupKinds, text);
}
std::optional<ReduceOp> weft::plan::parseReduceOp(std::string_view text) {
  return parse(kReduceOps, text);
}
std::optional<Opcode> weft::plan::parseOpcode(std::string_view text) {
  return parse(kOpcodes, text);
}

std::string weft::plan::kernelFatbinPath(const std::string &source) {
  std::string path = source;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".cu") == 0)
    path.resize(path.size() - 3);
  return path + ".fatbin";
}

std::string weft::plan::unsupportedVersionReason(int64_t version) {
  return "version " + std::to_string(version) +
         " is not supported (this build reads version " +
         std::to_string(kFormatVersion) + ")";
}

int64_t weft::plan::elementBytes(DType dtype) {
  switch (dtype) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
  case DType::U16:
    return 2;
  case DType::U8:
    return 1;
  }
  return 0;
}

bool weft::plan::isCollective(Opcode opcode) {
  return opcode == Opcode::AllReduce || opcode == Opcode::ReduceScatter ||
         opcode == Opcode::AllGather || opcode == Opcode::Broadcast;
}

bool weft::plan::isPointToPoint(Opcode opcode) {
  return opcode == Opcode::Send || opcode == Opcode::Recv;
}

bool weft::plan::hasMembers(Opcode opcode) {
  return opcode == Opcode::AllReduce || opcode == Opcode::ReduceScatter ||
         opcode == Opcode::AllGather;
}

size_t weft::plan::memberCount(const Instruction &inst) {
  return hasMembers(inst.opcode) ? inst.reads.size() : 1;
}

int64_t weft::plan::memberElements(const Instruction &inst, size_t member) {
  if (!hasMembers(inst.opcode))
    return inst.count;
  const std::vector<BufferRange> &side =
      inst.opcode == Opcode::ReduceScatter ? inst.writes : inst.reads;
  return side[member].bytes / elementBytes(inst.dtype);
}

bool weft::plan::hostOperandsAllowed(Opcode opcode, bool allOperandsOnHost) {
  if (opcode == Opcode::Copy || opcode == Opcode::Fill)
    return true;
  return allOperandsOnHost &&
         (opcode == Opcode::OptimizerStep || opcode == Opcode::Clip);
}

int64_t weft::plan::rankToRole(const Bundle &bundle, int64_t rank) {
  if (rank < 0 || rank >= int64_t(bundle.rankRoles.size()))
    throw Error("rank " + std::to_string(rank) + " is outside the world of " +
                std::to_string(bundle.rankRoles.size()) + " ranks");
  return bundle.rankRoles[rank];
}

RankProgram weft::plan::expandRankProgram(const Bundle &bundle, int64_t rank) {
  int64_t role = rankToRole(bundle, rank);
  if (role < 0 || role >= int64_t(bundle.programs.size()))
    throw Error("rank " + std::to_string(rank) + " has unknown role " +
                std::to_string(role));
  return {rank, role, bundle.mesh.coordOf(rank), &bundle.programs[role]};
}

int64_t weft::plan::findGroupOf(const GroupFamily &family, int64_t rank) {
  for (size_t i = 0; i < family.groups.size(); ++i)
    if (groupIndexOf(family.groups[i], rank) >= 0)
      return int64_t(i);
  return -1;
}

std::vector<int64_t> weft::plan::groupIndexByRank(const GroupFamily &family,
                                                  int64_t worldSize) {
  std::vector<int64_t> index(size_t(std::max<int64_t>(worldSize, 0)), -1);
  for (size_t g = 0; g < family.groups.size(); ++g)
    for (int64_t rank : family.groups[g])
      if (rank >= 0 && rank < worldSize && index[rank] < 0)
        index[rank] = int64_t(g);
  return index;
}

const std::vector<int64_t> *
weft::plan::resolveGroup(const Bundle &bundle, int64_t familyId, int64_t rank) {
  if (familyId < 0 || familyId >= int64_t(bundle.groups.size()))
    return nullptr;
  const GroupFamily &family = bundle.groups[familyId];
  int64_t index = findGroupOf(family, rank);
  return index < 0 ? nullptr : &family.groups[index];
}

int64_t weft::plan::groupIndexOf(const std::vector<int64_t> &group,
                                 int64_t rank) {
  auto it = std::find(group.begin(), group.end(), rank);
  return it == group.end() ? -1 : int64_t(it - group.begin());
}

/// Whether `later` may be issued in one NCCL group with `earlier`: neither
/// writes bytes the other reads or writes. NCCL does not order the
/// operations of a group, so a reduce-scatter followed by an all-reduce of
/// its output must not share one. Broadcast reads its own range on the root,
/// which its write covers.
static bool independent(const Instruction &earlier, const Instruction &later) {
  auto touches = [](const std::vector<BufferRange> &ranges,
                    const BufferRange &range) {
    for (const BufferRange &other : ranges)
      if (other.overlaps(range))
        return true;
    return false;
  };
  for (const BufferRange &write : later.writes)
    if (touches(earlier.reads, write) || touches(earlier.writes, write))
      return false;
  for (const BufferRange &read : later.reads)
    if (touches(earlier.writes, read))
      return false;
  return true;
}

std::vector<std::pair<size_t, size_t>>
weft::plan::communicationBuckets(const Stream &stream) {
  std::vector<std::pair<size_t, size_t>> buckets;
  const auto &insts = stream.instructions;
  auto communicates = [&](size_t i) {
    return isCollective(insts[i].opcode) || isPointToPoint(insts[i].opcode);
  };
  for (size_t i = 0; i < insts.size();) {
    if (!communicates(i)) {
      ++i;
      continue;
    }
    // Extend the run while the next instruction communicates and is
    // independent of every instruction already in it; one that is not
    // starts the next run.
    size_t j = i + 1;
    while (j < insts.size() && communicates(j)) {
      bool fits = true;
      for (size_t k = i; k < j && fits; ++k)
        fits = independent(insts[k], insts[j]);
      if (!fits)
        break;
      ++j;
    }
    if (j - i >= 2)
      buckets.emplace_back(i, j);
    i = j;
  }
  return buckets;
}
