//===- Bundle.h - The plan bundle's in-memory data model --------*- C++ -*-===//
//
// A Bundle is everything `weftc compile` decides ahead of time and `weft-run`
// replays: the mesh and communication groups, one program per role (ranks
// doing the same work share a program, so a bundle does not grow with DP),
// buffers with static offsets, parameter shards, kernels, training settings
// and the planner's prediction. docs/plan-format.md is the specification;
// field comments here give units only.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_BUNDLE_H
#define WEFT_PLAN_BUNDLE_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::plan {

/// The manifest version this library reads and writes.
inline constexpr int64_t kFormatVersion = 6;

/// Why a manifest of `version` cannot be read, e.g. "version 2 is not
/// supported (this build reads version 6)".
std::string unsupportedVersionReason(int64_t version);

/// The optional side file beside a kernel's generated source that holds it
/// compiled by nvcc (`weftc compile --cuda-arch`): "kernels/x.cu" ->
/// "kernels/x.fatbin".
std::string kernelFatbinPath(const std::string &source);

enum class DType { F32, F16, BF16, F64, I32, I64, U16, U8 };
/// Persistent and Arena are device memory; Host is the rank's host memory
/// (pinned on a GPU), live for the whole run like Persistent.
enum class Region { Persistent, Arena, Host };
enum class GroupKind { TP, PP, DP, World, Custom };
enum class ReduceOp { Sum, Max, Min };
/// What a gemm computes in its own call after the product (cuBLASLt's
/// epilogues; docs/plan-format.md, "gemm epilogues"): the kernels it
/// replaces are listed in Instruction::epilogueKernels, and
/// weft/plan/Epilogue.h spells out their operands.
enum class GemmEpilogue { None, Bias, GeluBias, DGelu, BiasGrad };

enum class Opcode {
  // Compute.
  Kernel,
  Gemm,
  // Data.
  LoadBatch,
  Copy,
  Fill,
  // Communication.
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Send,
  Recv,
  // Synchronization between streams of one rank.
  RecordEvent,
  WaitEvent,
  // Optimizer.
  OptimizerStep,
  GradNorm,
  Clip,
  // Memory.
  Release,
};

std::string_view toString(DType dtype);
std::string_view toString(Region region);
std::string_view toString(GroupKind kind);
std::string_view toString(ReduceOp op);
std::string_view toString(Opcode opcode);
std::string_view toString(GemmEpilogue epilogue);
/// Parse the spellings toString produces; nullopt for anything else.
std::optional<DType> parseDType(std::string_view text);
std::optional<Region> parseRegion(std::string_view text);
std::optional<GroupKind> parseGroupKind(std::string_view text);
std::optional<ReduceOp> parseReduceOp(std::string_view text);
std::optional<Opcode> parseOpcode(std::string_view text);
std::optional<GemmEpilogue> parseGemmEpilogue(std::string_view text);

int64_t elementBytes(DType dtype);
bool isCollective(Opcode opcode);   // all_reduce .. broadcast
bool isPointToPoint(Opcode opcode); // send, recv
/// all_reduce, reduce_scatter, all_gather: the collectives that take k >= 1
/// members (reads[i] and writes[i] are member i; plan-format.md, "Collective
/// members").
bool hasMembers(Opcode opcode);
/// The host region's operand rule (plan-format.md, "Regions"): an instruction
/// that touches host buffers must be a copy or fill, or an optimizer_step or
/// clip whose operands are all on the host. The plan verifier and the
/// backends' operand checks both apply it, with kHostOperandRule as the
/// reason in their messages.
bool hostOperandsAllowed(Opcode opcode, bool allOperandsOnHost);
inline constexpr const char *kHostOperandRule =
    "host memory is for copy, fill and an optimizer_step or clip whose "
    "operands are all on the host";

//===----------------------------------------------------------------------===//
// Metadata
//===----------------------------------------------------------------------===//

struct ModelInfo {
  std::string name;
  std::string family; // e.g. "gpt2", "llama"
};

struct LossScale {
  bool dynamic = false;
  double initial = 1.0;       // initial (or static) loss scale
  int64_t growthInterval = 0; // steps without overflow before doubling
  double backoff = 0.5;       // factor applied on overflow
};

struct TrainingInfo {
  int64_t globalBatch = 0; // sequences per optimizer step
  int64_t seqLen = 0;      // tokens
  std::string precision;   // "bf16" | "fp16" | "fp32"
  int64_t microBatch = 0;  // sequences per micro-batch and DP rank
  int64_t gradAccum = 0;   // micro-batches per step and DP rank
  int64_t stepsPerPlan = 1;
  double lr = 0;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0;
  double minLr = 0;
  double weightDecay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double gradClip = 0; // max global gradient norm; 0 disables clipping
  LossScale lossScale;
};

struct Prediction {
  double stepTimeS = 0;
  /// Planned peak bytes (arena + persistent), indexed by role id.
  std::vector<int64_t> peakMemoryBytes;
  double mfu = 0; // model FLOP utilization, 0..1
};

//===----------------------------------------------------------------------===//
// Mesh and groups
//===----------------------------------------------------------------------===//

struct MeshCoord {
  int64_t dp = 0;
  int64_t pp = 0;
  int64_t tp = 0;
};

/// dp x pp x tp; rank = (dp * PP + pp) * TP + tp (TP fastest, so a TP group
/// is contiguous and stays inside a node).
struct Mesh {
  int64_t dp = 1;
  int64_t pp = 1;
  int64_t tp = 1;

  int64_t worldSize() const { return dp * pp * tp; }
  int64_t rankOf(MeshCoord coord) const {
    return (coord.dp * pp + coord.pp) * tp + coord.tp;
  }
  MeshCoord coordOf(int64_t rank) const {
    return {rank / (pp * tp), rank / tp % pp, rank % tp};
  }
};

/// A family of pairwise disjoint groups of one size, e.g. all TP groups of
/// the mesh. An instruction names a family; a rank executing it uses the
/// family's group that contains the rank (see resolveGroup), so ranks that
/// share a program can communicate in different groups.
struct GroupFamily {
  int64_t id = 0; // == index in Bundle::groups
  GroupKind kind = GroupKind::Custom;
  /// Each group lists global ranks; group-relative index = position.
  std::vector<std::vector<int64_t>> groups;

  /// Ranks per group (0 for a family without groups, which checks reject).
  int64_t groupSize() const {
    return groups.empty() ? 0 : int64_t(groups.front().size());
  }
};

//===----------------------------------------------------------------------===//
// Programs
//===----------------------------------------------------------------------===//

struct Buffer {
  int64_t id = 0; // == index in Program::buffers
  std::string name;
  Region region = Region::Arena;
  int64_t offset = 0; // bytes from the start of the region
  int64_t size = 0;   // bytes
  DType dtype = DType::F32;
  int64_t alignment = 256; // bytes, a power of two
};

/// A byte range [offset, offset + bytes) of one buffer.
struct BufferRange {
  int64_t buffer = 0;
  int64_t offset = 0;
  int64_t bytes = 0;

  bool operator==(const BufferRange &other) const {
    return buffer == other.buffer && offset == other.offset &&
           bytes == other.bytes;
  }
  /// Whether the two ranges share at least one byte of one buffer.
  bool overlaps(const BufferRange &other) const {
    return buffer == other.buffer && offset < other.offset + other.bytes &&
           other.offset < offset + bytes;
  }
};

struct GemmParams {
  bool transA = false;
  bool transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  double alpha = 1.0;
  double beta = 0.0;
};

/// One instruction. Which fields are meaningful depends on the opcode (see
/// docs/plan-format.md, "Opcode reference"); the others keep their defaults
/// and are not serialized.
struct Instruction {
  Opcode opcode = Opcode::Kernel;
  std::vector<BufferRange> reads;
  std::vector<BufferRange> writes;
  std::string phase; // free-form label for inspection, e.g. "fwd L3 mb2"

  int64_t kernel = -1;                        // kernel
  std::vector<int64_t> args;                  // kernel: scalar arguments
  GemmParams gemm;                            // gemm
  GemmEpilogue epilogue = GemmEpilogue::None; // gemm
  std::vector<int64_t> epilogueKernels;       // gemm with an epilogue
  int64_t microbatch = 0;                     // load_batch
  double value = 0;                           // fill
  int64_t group = -1; // collectives, send, recv: a group family id
  int64_t peer = -1;  // send/recv: group-relative peer; broadcast: root
  ReduceOp reduce = ReduceOp::Sum; // all_reduce, reduce_scatter
  int64_t count = 0;        // elements (per rank for reduce_scatter output and
                            // all_gather input; the sum over the members of
                            // a multi-member collective, see memberCount)
  DType dtype = DType::F32; // element type of count, fill, gemm, optimizer
  int64_t event = -1;       // record_event, wait_event
};

/// An optimizer_step that also reads the f32 global sum of squares of the
/// gradients (reads[4]): it clips the gradients itself, and skips the update
/// where dynamic loss scaling finds the sum not finite (plan-format.md).
inline bool readsGradientNorm(const Instruction &inst) {
  return inst.opcode == Opcode::OptimizerStep && inst.reads.size() == 5;
}

struct Stream {
  std::string name; // unique within the program, e.g. "compute", "allgather"
  std::vector<Instruction> instructions;
};

/// The program of one role, with its buffers and planned region sizes.
struct Program {
  int64_t role = 0; // == index in Bundle::programs
  int64_t numEvents = 0;
  int64_t arenaBytes = 0;
  int64_t persistentBytes = 0;
  int64_t hostBytes = 0;
  std::vector<Buffer> buffers;
  std::vector<Stream> streams;
};

//===----------------------------------------------------------------------===//
// Parameters and kernels
//===----------------------------------------------------------------------===//

struct ParamInit {
  std::string kind; // "normal" | "zeros" | "ones"
  double std = 0;
};

/// Where a role keeps its part of one parameter. The role's slice is
/// [start, start + length) along `dim` of the global tensor (dim = -1: the
/// whole tensor). Flattened row-major and padded to paddedElements, the slice
/// is split evenly over zeroShards ranks by their DP index; the buffer holds
/// this rank's part of paddedElements / zeroShards elements at `offset`.
struct ShardSpec {
  int64_t role = 0;
  int64_t buffer = 0;
  int64_t offset = 0; // bytes into the buffer
  int64_t dim = -1;
  int64_t start = 0;
  int64_t length = 0;
  int64_t zeroShards = 1;
  int64_t paddedElements = 0;
};

struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  ParamInit init;
  std::string hfName;
  bool hfTransposed = false; // stored transposed relative to Hugging Face
  std::vector<ShardSpec> shards;
};

struct Kernel {
  int64_t id = 0; // == index in Bundle::kernels
  std::string name;
  std::string source; // side-file path, e.g. "kernels/<name>.cu"
  std::map<std::string, int64_t> constants; // specialization constants
};

/// The runtime registry kernel a bundle kernel called `name` specializes:
/// specializations of one kernel are named `<registry name>.<suffix>`.
inline std::string_view registryName(std::string_view name) {
  return name.substr(0, name.find('.'));
}

//===----------------------------------------------------------------------===//
// Bundle
//===----------------------------------------------------------------------===//

struct Bundle {
  int64_t formatVersion = kFormatVersion;
  ModelInfo model;
  TrainingInfo training;
  Prediction prediction;
  nlohmann::json config = nlohmann::json::object();
  Mesh mesh;
  std::vector<GroupFamily> groups; // group families, indexed by id
  std::vector<int64_t> rankRoles;  // rank -> role id
  std::vector<Program> programs;   // indexed by role id
  std::vector<Parameter> parameters;
  std::vector<Kernel> kernels;
  /// Side files by bundle-relative path (kernel sources), with their bytes.
  std::map<std::string, std::string> files;
};

/// Members of a collective: how many (reads.size() for the opcodes that
/// hasMembers(), 1 for every other communication instruction), and the
/// per-rank element count of member `member` (its share of `count`, in
/// inst.dtype elements): all_reduce and all_gather reads[member],
/// reduce_scatter writes[member]; `count` for an opcode without members.
/// Meaningful on a structurally valid instruction.
size_t memberCount(const Instruction &inst);
int64_t memberElements(const Instruction &inst, size_t member);

/// The buckets of `stream`: maximal runs of two or more consecutive
/// communication instructions (collectives, send, recv), as [first, last)
/// instruction indices, split before an instruction that is not independent
/// of an earlier one of the run (its writes overlap the other's reads or
/// writes, or its reads the other's writes; buffer id and byte range, every
/// member), since a group does not order its operations. A runtime backend
/// that coalesces communication (exec::Backend::coalescesCommunication)
/// receives each run between beginBucket() and endBucket(); the verifier's
/// communication order check takes each run as one launch.
std::vector<std::pair<size_t, size_t>>
communicationBuckets(const Stream &stream);

/// The role id of `rank`; throws Error if the rank is out of range.
int64_t rankToRole(const Bundle &bundle, int64_t rank);

/// What one rank executes: its role's program seen from that rank.
struct RankProgram {
  int64_t rank = 0;
  int64_t role = 0;
  MeshCoord coord;
  const Program *program = nullptr;
};

/// Expand `rank` to its program; throws Error if the rank is out of range.
RankProgram expandRankProgram(const Bundle &bundle, int64_t rank);

/// Index in `family.groups` of the group containing `rank`, or -1.
int64_t findGroupOf(const GroupFamily &family, int64_t rank);

/// findGroupOf for every rank in [0, worldSize), for code that resolves a
/// family many times (ranks outside the world are ignored).
std::vector<int64_t> groupIndexByRank(const GroupFamily &family,
                                      int64_t worldSize);

/// The group of family `familyId` that `rank` uses: the one containing it.
/// Null if the family id is out of range or no group contains the rank.
const std::vector<int64_t> *resolveGroup(const Bundle &bundle, int64_t familyId,
                                         int64_t rank);

/// Position of `rank` in `group` (its group-relative index), or -1.
int64_t groupIndexOf(const std::vector<int64_t> &group, int64_t rank);

} // namespace weft::plan

#endif // WEFT_PLAN_BUNDLE_H
