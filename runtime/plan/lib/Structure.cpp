//===- Structure.cpp - Structural constraints of a bundle -----------------===//
//
// Everything that can be checked one field at a time: ids equal to their
// index, sizes positive, offsets aligned, operand shapes per opcode, and every
// reference to a role, group, buffer, kernel, event or side file resolvable.
// The verifier's dynamic checks rely on these holding.
//
//===----------------------------------------------------------------------===//

#include "weft/plan/Epilogue.h"
#include "weft/plan/Serialize.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

using namespace weft::plan;

namespace {

std::string at(const std::string &path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

std::string str(int64_t value) { return std::to_string(value); }

class StructureChecker {
public:
  explicit StructureChecker(const Bundle &bundle) : bundle(bundle) {}

  std::vector<StructuralError> run() {
    checkTop();
    for (size_t i = 0; i < bundle.groups.size(); ++i)
      checkGroupFamily(bundle.groups[i], at("groups", i), i);
    for (size_t i = 0; i < bundle.programs.size(); ++i)
      checkProgram(bundle.programs[i], at("programs", i), i);
    for (size_t i = 0; i < bundle.parameters.size(); ++i)
      checkParameter(bundle.parameters[i], at("parameters", i));
    checkParameterSet();
    for (size_t i = 0; i < bundle.kernels.size(); ++i)
      checkKernel(bundle.kernels[i], at("kernels", i), i);
    for (const auto &file : bundle.files)
      checkFilePath(file.first);
    return std::move(errors);
  }

private:
  void error(const std::string &path, const std::string &reason) {
    errors.push_back({path, reason});
  }

  void checkPositive(int64_t value, const std::string &path) {
    if (value <= 0)
      error(path, "must be positive, got " + str(value));
  }
  /// The same for `base + suffix`, a path built only on failure (these run
  /// for every instruction of a plan with hundreds of thousands).
  void checkPositive(int64_t value, const std::string &base,
                     const char *suffix) {
    if (value <= 0)
      error(base + suffix, "must be positive, got " + str(value));
  }

  void checkTop() {
    if (bundle.formatVersion != kFormatVersion)
      error("format_version", unsupportedVersionReason(bundle.formatVersion));
    const TrainingInfo &training = bundle.training;
    checkPositive(training.globalBatch, "training.global_batch");
    checkPositive(training.seqLen, "training.seq_len");
    checkPositive(training.microBatch, "training.micro_batch");
    checkPositive(training.gradAccum, "training.grad_accum");
    checkPositive(training.stepsPerPlan, "training.steps_per_plan");
    if (training.precision != "bf16" && training.precision != "fp16" &&
        training.precision != "fp32")
      error("training.precision", "unknown precision '" + training.precision +
                                      "' (expected bf16, fp16 or fp32)");
    checkPositive(bundle.mesh.dp, "mesh.dp");
    checkPositive(bundle.mesh.pp, "mesh.pp");
    checkPositive(bundle.mesh.tp, "mesh.tp");
    if (training.microBatch * training.gradAccum * bundle.mesh.dp !=
        training.globalBatch)
      error("training.global_batch",
            str(training.globalBatch) + " != micro_batch " +
                str(training.microBatch) + " x grad_accum " +
                str(training.gradAccum) + " x dp " + str(bundle.mesh.dp));
    if (bundle.prediction.peakMemoryBytes.size() != bundle.programs.size())
      error("prediction.peak_memory_bytes",
            "has " + str(bundle.prediction.peakMemoryBytes.size()) +
                " entries but there are " + str(bundle.programs.size()) +
                " programs");
    if (!bundle.config.is_object())
      error("config", "expected an object");

    int64_t world = bundle.mesh.worldSize();
    if (int64_t(bundle.rankRoles.size()) != world)
      error("rank_roles", "has " + str(bundle.rankRoles.size()) +
                              " entries but the mesh has " + str(world) +
                              " ranks");
    for (size_t rank = 0; rank < bundle.rankRoles.size(); ++rank) {
      int64_t role = bundle.rankRoles[rank];
      if (role < 0 || role >= int64_t(bundle.programs.size()))
        error(at("rank_roles", rank), "unknown role " + str(role));
    }
  }

  void checkGroupFamily(const GroupFamily &family, const std::string &path,
                        size_t index) {
    if (family.id != int64_t(index))
      error(path + ".id",
            "id " + str(family.id) + " must equal its index " + str(index));
    if (family.groups.empty())
      error(path + ".groups", "a group family needs at least one group");
    // The group each rank was first seen in, to reject overlapping groups.
    std::map<int64_t, size_t> groupOfRank;
    for (size_t g = 0; g < family.groups.size(); ++g) {
      const std::vector<int64_t> &group = family.groups[g];
      std::string groupPath = at(path + ".groups", g);
      if (group.empty())
        error(groupPath, "a group needs at least one rank");
      else if (int64_t(group.size()) != family.groupSize())
        error(groupPath, "has " + str(group.size()) +
                             " ranks but group 0 has " +
                             str(family.groupSize()) +
                             " (the groups of a family have one size)");
      for (size_t i = 0; i < group.size(); ++i) {
        int64_t rank = group[i];
        if (rank < 0 || rank >= bundle.mesh.worldSize()) {
          error(at(groupPath, i), "rank " + str(rank) +
                                      " is outside the world of " +
                                      str(bundle.mesh.worldSize()));
          continue;
        }
        auto [it, inserted] = groupOfRank.try_emplace(rank, g);
        if (inserted)
          continue;
        if (it->second == g)
          error(at(groupPath, i), "rank " + str(rank) + " is listed twice");
        else
          error(at(groupPath, i), "rank " + str(rank) + " is also in group " +
                                      str(it->second) +
                                      " (the groups of a family are disjoint)");
      }
    }
  }

  void checkProgram(const Program &program, const std::string &path,
                    size_t index) {
    if (program.role != int64_t(index))
      error(path + ".role", "role " + str(program.role) +
                                " must equal its index " + str(index));
    if (program.numEvents < 0)
      error(path + ".num_events", "must not be negative");
    if (program.arenaBytes < 0)
      error(path + ".arena_bytes", "must not be negative");
    if (program.persistentBytes < 0)
      error(path + ".persistent_bytes", "must not be negative");
    if (program.hostBytes < 0)
      error(path + ".host_bytes", "must not be negative");
    for (size_t i = 0; i < program.buffers.size(); ++i) {
      const Buffer &buffer = program.buffers[i];
      std::string bufferPath = at(path + ".buffers", i);
      if (buffer.id != int64_t(i))
        error(bufferPath + ".id",
              "id " + str(buffer.id) + " must equal its index " + str(i));
      checkPositive(buffer.size, bufferPath, ".size");
      if (buffer.alignment <= 0 ||
          (buffer.alignment & (buffer.alignment - 1)) != 0)
        error(bufferPath + ".alignment",
              "must be a power of two, got " + str(buffer.alignment));
      else if (buffer.offset < 0 || buffer.offset % buffer.alignment != 0)
        error(bufferPath + ".offset", "offset " + str(buffer.offset) +
                                          " is not a non-negative "
                                          "multiple of the alignment " +
                                          str(buffer.alignment));
    }
    if (program.streams.empty())
      error(path + ".streams", "a program needs at least one stream");
    std::set<std::string> names;
    // Where each event is recorded, to reject a second record.
    std::vector<std::string> recordedAt(
        std::max<int64_t>(program.numEvents, 0));
    for (size_t s = 0; s < program.streams.size(); ++s) {
      const Stream &stream = program.streams[s];
      std::string streamPath = at(path + ".streams", s);
      if (stream.name.empty())
        error(streamPath + ".name", "must not be empty");
      else if (!names.insert(stream.name).second)
        error(streamPath + ".name",
              "stream name '" + stream.name + "' is used twice");
      // One buffer for every instruction's path: no allocation per
      // instruction.
      std::string prefix = streamPath + ".instructions[", instPath;
      for (size_t i = 0; i < stream.instructions.size(); ++i) {
        const Instruction &inst = stream.instructions[i];
        instPath.assign(prefix).append(std::to_string(i)).append("]");
        checkInstruction(inst, program, instPath);
        if (inst.opcode == Opcode::RecordEvent && inst.event >= 0 &&
            inst.event < program.numEvents) {
          std::string here = at("streams", s) + "." + at("instructions", i);
          if (!recordedAt[inst.event].empty())
            error(instPath + ".event", "event " + str(inst.event) +
                                           " is already recorded at " +
                                           recordedAt[inst.event]);
          else
            recordedAt[inst.event] = here;
        }
      }
    }
  }

  /// Range `index` of the `key` ("reads"/"writes") of instruction `inst`.
  void checkRange(const BufferRange &range, const Program &program,
                  const std::string &inst, const char *key, size_t index) {
    auto path = [&] { return at(inst + "." + key, index); };
    if (range.buffer < 0 || range.buffer >= int64_t(program.buffers.size())) {
      error(path() + ".buffer", "unknown buffer " + str(range.buffer));
      return;
    }
    const Buffer &buffer = program.buffers[range.buffer];
    if (range.offset < 0)
      error(path() + ".offset", "must not be negative");
    if (range.bytes <= 0)
      error(path() + ".bytes", "must be positive, got " + str(range.bytes));
    if (range.offset >= 0 && range.bytes > 0 &&
        range.offset + range.bytes > buffer.size)
      error(path(), "range [" + str(range.offset) + ", " +
                        str(range.offset + range.bytes) + ") exceeds buffer " +
                        str(buffer.id) + " '" + buffer.name + "' of " +
                        str(buffer.size) + " bytes");
    // Whole elements of the buffer's dtype: a range cut mid-element is
    // misaligned on a GPU and half of a value on any backend.
    int64_t element = elementBytes(buffer.dtype);
    for (auto [field, value] :
         {std::pair{".offset", range.offset}, {".bytes", range.bytes}})
      if (value > 0 && value % element != 0)
        error(path() + field, str(value) + " is not a multiple of " +
                                  str(element) + " (buffer " + str(buffer.id) +
                                  " '" + buffer.name + "' holds " +
                                  std::string(toString(buffer.dtype)) + ")");
  }

  /// A gemm's epilogue: the kernels it folds, of the registry kinds it
  /// stands for, with the gemm's shapes (what a cuBLASLt epilogue computes:
  /// the bias along m over a packed D, the bias gradient summing A's k
  /// columns).
  void checkEpilogue(const Instruction &inst, const std::string &path,
                     const EpilogueShape &shape) {
    const GemmParams &g = inst.gemm;
    if (inst.epilogue == GemmEpilogue::None) {
      if (!inst.epilogueKernels.empty())
        error(path + ".epilogue_kernels", "kernels listed without an epilogue");
      return;
    }
    if (shape.needsBetaZero && g.beta != 0)
      error(path + ".beta", "the " + std::string(toString(inst.epilogue)) +
                                " epilogue needs beta 0");
    if (inst.epilogueKernels.size() != shape.kernels.size()) {
      error(path + ".epilogue_kernels",
            "the " + std::string(toString(inst.epilogue)) + " epilogue folds " +
                str(int64_t(shape.kernels.size())) +
                (shape.kernels.size() == 1 ? " kernel" : " kernels") +
                ", got " + str(int64_t(inst.epilogueKernels.size())));
      return;
    }
    bool packed = inst.epilogue == GemmEpilogue::BiasGrad
                      ? !g.transA && g.lda == g.m
                      : g.ldc == g.m;
    if (!packed)
      error(path, std::string("the ") + std::string(toString(inst.epilogue)) +
                      " epilogue needs " +
                      (inst.epilogue == GemmEpilogue::BiasGrad
                           ? "A not transposed with lda == m"
                           : "ldc == m"));
    for (size_t i = 0; i < shape.kernels.size(); ++i) {
      std::string where = at(path + ".epilogue_kernels", i);
      int64_t id = inst.epilogueKernels[i];
      if (id < 0 || id >= int64_t(bundle.kernels.size())) {
        error(where, "unknown kernel " + str(id));
        continue;
      }
      const Kernel &kernel = bundle.kernels[size_t(id)];
      std::string_view name = registryName(kernel.name);
      if (name != shape.kernels[i]) {
        error(where, "kernel '" + kernel.name + "' is not a " +
                         std::string(shape.kernels[i]));
        continue;
      }
      auto constant = [&](const char *key) {
        auto it = kernel.constants.find(key);
        return it == kernel.constants.end() ? int64_t(-1) : it->second;
      };
      bool fits = name == "bias_add"
                      ? constant("width") == g.m && constant("rows") == g.n
                  : name == "bias_grad"
                      ? constant("width") == g.m && constant("rows") == g.k
                      : constant("n") == g.m * g.n;
      if (!fits)
        error(where, "kernel '" + kernel.name +
                         "' does not have the gemm's shape (m " + str(g.m) +
                         ", n " + str(g.n) + ", k " + str(g.k) + ")");
    }
  }

  /// Operand counts [min, max] of reads and writes; max -1 is unbounded.
  void checkOperandCount(const Instruction &inst, const std::string &path,
                         int64_t minReads, int64_t maxReads, int64_t minWrites,
                         int64_t maxWrites) {
    auto check = [&](const std::vector<BufferRange> &ranges, int64_t lo,
                     int64_t hi, const char *key) {
      int64_t n = ranges.size();
      if (n >= lo && (hi < 0 || n <= hi))
        return;
      std::string want = lo == hi ? "exactly " + str(lo)
                         : hi < 0 ? "at least " + str(lo)
                                  : str(lo) + " to " + str(hi);
      error(path + "." + key, std::string(toString(inst.opcode)) + " needs " +
                                  want + " " + key + " ranges, got " + str(n));
    };
    check(inst.reads, minReads, maxReads, "reads");
    check(inst.writes, minWrites, maxWrites, "writes");
  }

  /// `what` describes the operation ("all_reduce of 64 f32", with " over N
  /// ranks" when `ranks` > 0); it is only built for a failure.
  void checkBytes(const Instruction &inst, const char *key, int64_t expected,
                  int64_t ranks, const std::string &path) {
    const std::vector<BufferRange> &ranges =
        key[0] == 'r' ? inst.reads : inst.writes;
    if (ranges.empty() || ranges[0].bytes == expected)
      return;
    std::string what = std::string(toString(inst.opcode)) + " of " +
                       str(inst.count) + " " +
                       std::string(toString(inst.dtype));
    if (ranks > 0)
      what += " over " + str(ranks) + " ranks";
    error(path + "." + key + "[0].bytes", what + " needs " + str(expected) +
                                              " bytes, got " +
                                              str(ranges[0].bytes));
  }

  void checkCommunication(const Instruction &inst, const Program &program,
                          const std::string &path) {
    checkPositive(inst.count, path, ".count");
    if (inst.group < 0 || inst.group >= int64_t(bundle.groups.size())) {
      error(path + ".group", "unknown group family " + str(inst.group));
      return;
    }
    const GroupFamily &family = bundle.groups[inst.group];
    // Each rank of the role resolves the family to the group containing it.
    // By index: a family whose `id` is wrong is reported on its own.
    if (int64_t rank = rankOutsideFamily(program.role, inst.group); rank >= 0)
      error(path + ".group",
            "rank " + str(rank) + " of role " + str(program.role) +
                " is in no group of family " + str(inst.group) + " (" +
                std::string(toString(family.kind)) + ")");
    int64_t size = family.groupSize();
    if ((isPointToPoint(inst.opcode) || inst.opcode == Opcode::Broadcast) &&
        (inst.peer < 0 || inst.peer >= size))
      error(path + (inst.opcode == Opcode::Broadcast ? ".root" : ".peer"),
            "peer " + str(inst.peer) + " is outside the " + str(size) +
                "-rank groups of family " + str(inst.group));
    if (hasMembers(inst.opcode) && inst.reads.size() != inst.writes.size())
      return; // reported with the operand counts
    if (hasMembers(inst.opcode) && inst.reads.size() > 1) {
      checkMembers(inst, program, size, path);
      return;
    }
    int64_t bytes = inst.count * elementBytes(inst.dtype);
    switch (inst.opcode) {
    case Opcode::AllReduce:
      checkBytes(inst, "reads", bytes, 0, path);
      checkBytes(inst, "writes", bytes, 0, path);
      break;
    case Opcode::ReduceScatter:
      checkBytes(inst, "reads", bytes * size, size, path);
      checkBytes(inst, "writes", bytes, size, path);
      break;
    case Opcode::AllGather:
      checkBytes(inst, "reads", bytes, size, path);
      checkBytes(inst, "writes", bytes * size, size, path);
      break;
    case Opcode::Broadcast:
    case Opcode::Recv:
      checkBytes(inst, "writes", bytes, 0, path);
      break;
    case Opcode::Send:
      checkBytes(inst, "reads", bytes, 0, path);
      break;
    default:
      break;
    }
  }

  /// A collective of k > 1 members (reads[i] / writes[i]): each member holds
  /// whole elements on the side that has its per-rank count (reduce_scatter:
  /// writes, otherwise reads), the other side holds what the opcode needs
  /// for that count, the members' counts sum to `count`, and the members are
  /// independent: no member writes bytes another member reads or writes.
  void checkMembers(const Instruction &inst, const Program &program,
                    int64_t size, const std::string &path) {
    std::string op(toString(inst.opcode)), dtype(toString(inst.dtype));
    int64_t elementSize = elementBytes(inst.dtype);
    bool scatter = inst.opcode == Opcode::ReduceScatter;
    const std::vector<BufferRange> &base = scatter ? inst.writes : inst.reads;
    const std::vector<BufferRange> &other = scatter ? inst.reads : inst.writes;
    const char *baseKey = scatter ? ".writes" : ".reads";
    const char *otherKey = scatter ? ".reads" : ".writes";
    int64_t factor = inst.opcode == Opcode::AllReduce ? 1 : size;
    int64_t total = 0;
    bool whole = true;
    std::string terms;
    for (size_t i = 0; i < base.size(); ++i) {
      if (base[i].bytes <= 0) { // reported by checkRange
        whole = false;
        continue;
      }
      if (base[i].bytes % elementSize != 0) {
        // checkRange has said so when the buffer's elements are the same
        // size as the collective's.
        const BufferRange &range = base[i];
        bool said =
            range.buffer >= 0 &&
            range.buffer < int64_t(program.buffers.size()) &&
            elementBytes(program.buffers[range.buffer].dtype) == elementSize;
        if (!said)
          error(at(path + baseKey, i) + ".bytes",
                "member " + str(i) + " of " + op + " holds " +
                    str(base[i].bytes) + " bytes, not a whole number of " +
                    dtype + " elements");
        whole = false;
        continue;
      }
      int64_t elements = base[i].bytes / elementSize;
      total += elements;
      if (i < 8)
        terms += (i ? " + " : "") + str(elements);
      else if (i == 8)
        terms += " + ...";
      if (other[i].bytes != base[i].bytes * factor)
        error(at(path + otherKey, i) + ".bytes",
              "member " + str(i) + " of " + op + " (" + str(elements) + " " +
                  dtype + (factor > 1 ? " over " + str(size) + " ranks" : "") +
                  ") needs " + str(base[i].bytes * factor) + " bytes, got " +
                  str(other[i].bytes));
    }
    if (whole && total != inst.count)
      error(path + ".count", op + " of " + str(inst.count) + " " + dtype +
                                 ": its " + str(base.size()) +
                                 " members hold " + str(total) + " elements (" +
                                 terms + ")");
    // Independence; a member's own read and write may alias (in place).
    for (size_t j = 1; j < inst.reads.size(); ++j)
      for (size_t i = 0; i < j; ++i) {
        const char *key = nullptr, *theirs = nullptr;
        if (inst.writes[j].overlaps(inst.writes[i]))
          key = ".writes", theirs = "writes";
        else if (inst.writes[j].overlaps(inst.reads[i]))
          key = ".writes", theirs = "reads";
        else if (inst.reads[j].overlaps(inst.writes[i]))
          key = ".reads", theirs = "writes";
        if (!key)
          continue;
        error(at(path + key, j), "member " + str(j) + " of " + op +
                                     " overlaps member " + str(i) + "'s " +
                                     theirs);
        return;
      }
  }

  /// Host-region buffers are touched only by instructions a host can run or
  /// that move bytes between host and device (hostOperandsAllowed).
  void checkHostOperands(const Instruction &inst, const Program &program,
                         const std::string &path) {
    size_t host = 0, total = 0;
    const BufferRange *first = nullptr;
    std::string key;
    auto visit = [&](const std::vector<BufferRange> &ranges, const char *name) {
      for (size_t i = 0; i < ranges.size(); ++i) {
        if (ranges[i].buffer < 0 ||
            ranges[i].buffer >= int64_t(program.buffers.size()))
          return;
        ++total;
        if (program.buffers[ranges[i].buffer].region != Region::Host)
          continue;
        if (!host++) {
          first = &ranges[i];
          key = at(path + "." + name, i);
        }
      }
    };
    visit(inst.reads, "reads");
    visit(inst.writes, "writes");
    if (!host || hostOperandsAllowed(inst.opcode, host == total))
      return;
    const Buffer &buffer = program.buffers[first->buffer];
    error(key, std::string(toString(inst.opcode)) +
                   " reads or writes host buffer " + str(buffer.id) + " '" +
                   buffer.name + "' (" + kHostOperandRule + ")");
  }

  void checkInstruction(const Instruction &inst, const Program &program,
                        const std::string &path) {
    for (size_t i = 0; i < inst.reads.size(); ++i)
      checkRange(inst.reads[i], program, path, "reads", i);
    for (size_t i = 0; i < inst.writes.size(); ++i)
      checkRange(inst.writes[i], program, path, "writes", i);
    checkHostOperands(inst, program, path);

    switch (inst.opcode) {
    case Opcode::Kernel:
      if (inst.kernel < 0 || inst.kernel >= int64_t(bundle.kernels.size()))
        error(path + ".kernel", "unknown kernel " + str(inst.kernel));
      break;
    case Opcode::Gemm: {
      const GemmParams &gemm = inst.gemm;
      bool accumulates = gemm.beta != 0;
      EpilogueShape epilogue = epilogueShape(inst.epilogue);
      int64_t reads = int64_t(productReads(inst) + epilogue.reads),
              writes = int64_t(1 + epilogue.writes);
      checkOperandCount(inst, path, reads, reads, writes, writes);
      checkEpilogue(inst, path, epilogue);
      if (accumulates && inst.reads.size() >= 3 && !inst.writes.empty() &&
          !(inst.reads[2] == inst.writes[0]))
        error(path + ".reads[2]", "with beta != 0 the third read must be the "
                                  "output range (C)");
      checkPositive(gemm.m, path, ".m");
      checkPositive(gemm.n, path, ".n");
      checkPositive(gemm.k, path, ".k");
      // Column-major (BLAS) leading dimensions.
      if (gemm.lda < (gemm.transA ? gemm.k : gemm.m))
        error(path + ".lda", "lda " + str(gemm.lda) + " is too small");
      if (gemm.ldb < (gemm.transB ? gemm.n : gemm.k))
        error(path + ".ldb", "ldb " + str(gemm.ldb) + " is too small");
      if (gemm.ldc < gemm.m)
        error(path + ".ldc", "ldc " + str(gemm.ldc) + " is too small");
      break;
    }
    case Opcode::LoadBatch:
      checkOperandCount(inst, path, 0, 0, 1, 2);
      if (inst.microbatch < 0 || inst.microbatch >= bundle.training.gradAccum)
        error(path + ".microbatch", "micro-batch " + str(inst.microbatch) +
                                        " is outside [0, " +
                                        str(bundle.training.gradAccum) + ")");
      break;
    case Opcode::Copy:
      checkOperandCount(inst, path, 1, 1, 1, 1);
      if (inst.reads.size() == 1 && inst.writes.size() == 1 &&
          inst.reads[0].bytes != inst.writes[0].bytes)
        error(path + ".writes[0].bytes", "copy of " + str(inst.reads[0].bytes) +
                                             " bytes into " +
                                             str(inst.writes[0].bytes));
      break;
    case Opcode::Fill:
      checkOperandCount(inst, path, 0, 0, 1, -1);
      break;
    case Opcode::AllReduce:
    case Opcode::ReduceScatter:
    case Opcode::AllGather:
      // k >= 1 members: reads[i] and writes[i] are member i.
      checkOperandCount(inst, path, 1, -1, 1, -1);
      if (!inst.reads.empty() && !inst.writes.empty() &&
          inst.reads.size() != inst.writes.size())
        error(path + ".writes", std::string(toString(inst.opcode)) + " has " +
                                    str(inst.reads.size()) +
                                    " reads ranges but " +
                                    str(inst.writes.size()) +
                                    " writes ranges (one of each per member)");
      checkCommunication(inst, program, path);
      break;
    case Opcode::Broadcast:
    case Opcode::Recv:
      checkOperandCount(inst, path, 0, 0, 1, 1);
      checkCommunication(inst, program, path);
      break;
    case Opcode::Send:
      checkOperandCount(inst, path, 1, 1, 0, 0);
      checkCommunication(inst, program, path);
      break;
    case Opcode::RecordEvent:
    case Opcode::WaitEvent:
      checkOperandCount(inst, path, 0, 0, 0, 0);
      if (inst.event < 0 || inst.event >= program.numEvents)
        error(path + ".event", "unknown event " + str(inst.event) +
                                   " (the program has " +
                                   str(program.numEvents) + " events)");
      break;
    case Opcode::OptimizerStep:
      checkOperandCount(inst, path, 4, 5, 3, 4);
      checkPositive(inst.count, path, ".count");
      if (inst.reads.size() == 5 && inst.reads[4].bytes != 4)
        error(path + ".reads[4].bytes",
              "optimizer_step reads the f32 sum of squares (4 bytes) as "
              "reads[4], got " +
                  str(inst.reads[4].bytes));
      break;
    case Opcode::GradNorm:
      checkOperandCount(inst, path, 1, -1, 1, 1);
      if (inst.writes.size() == 1 && inst.writes[0].bytes != 4)
        error(path + ".writes[0].bytes",
              "grad_norm writes one f32 (4 bytes), got " +
                  str(inst.writes[0].bytes));
      break;
    case Opcode::Clip:
      checkOperandCount(inst, path, 2, -1, 1, -1);
      if (inst.writes.size() + 1 != inst.reads.size())
        error(path + ".writes", "clip rescales reads[1..] in place: needs " +
                                    str(inst.reads.size() - 1) +
                                    " writes, got " + str(inst.writes.size()));
      else
        for (size_t i = 0; i < inst.writes.size(); ++i)
          if (!(inst.writes[i] == inst.reads[i + 1]))
            error(at(path + ".writes", i),
                  "must equal reads[" + str(i + 1) + "] (clip is in place)");
      break;
    case Opcode::Release:
      checkOperandCount(inst, path, 0, 0, 1, 1);
      if (inst.writes.size() == 1 && inst.writes[0].buffer >= 0 &&
          inst.writes[0].buffer < int64_t(program.buffers.size()) &&
          program.buffers[inst.writes[0].buffer].region != Region::Arena)
        error(path + ".writes[0].buffer",
              "release of " +
                  std::string(
                      toString(program.buffers[inst.writes[0].buffer].region)) +
                  " buffer " + str(inst.writes[0].buffer));
      break;
    }
  }

  void checkParameter(const Parameter &param, const std::string &path) {
    if (param.name.empty())
      error(path + ".name", "must not be empty");
    // Tensors of up to 2^48 elements: the products below cannot overflow.
    constexpr int64_t kMaxElements = int64_t(1) << 48;
    int64_t elements = 1;
    for (size_t i = 0; i < param.shape.size(); ++i) {
      checkPositive(param.shape[i], at(path + ".shape", i));
      int64_t extent = std::max<int64_t>(param.shape[i], 1);
      if (extent > kMaxElements / elements) {
        error(at(path + ".shape", i), "the shape has more than 2^48 elements");
        return;
      }
      elements *= extent;
    }
    // Trained weights are floats; the initializer and the Hugging Face
    // export read them as such.
    if (param.dtype != DType::F32 && param.dtype != DType::BF16 &&
        param.dtype != DType::F16)
      error(path + ".dtype", "a parameter is f32, bf16 or f16, got " +
                                 std::string(toString(param.dtype)));
    if (param.init.kind != "normal" && param.init.kind != "zeros" &&
        param.init.kind != "ones")
      error(path + ".init.kind", "unknown init '" + param.init.kind +
                                     "' (expected normal, zeros or ones)");
    if (param.init.std < 0)
      error(path + ".init.std", "must not be negative");
    // The slices along each sharded dim, which must tile it: every element
    // of the tensor is held somewhere (export and resharding read them all).
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> slices;
    for (size_t i = 0; i < param.shards.size(); ++i) {
      const ShardSpec &shard = param.shards[i];
      std::string shardPath = at(path + ".shards", i);
      if (shard.role < 0 || shard.role >= int64_t(bundle.programs.size())) {
        error(shardPath + ".role", "unknown role " + str(shard.role));
        continue;
      }
      const Program &program = bundle.programs[shard.role];
      if (shard.buffer < 0 || shard.buffer >= int64_t(program.buffers.size())) {
        error(shardPath + ".buffer", "unknown buffer " + str(shard.buffer) +
                                         " in role " + str(shard.role));
        continue;
      }
      int64_t sliceElements = elements;
      if (shard.dim == -1) {
        if (shard.start != 0 || shard.length != 0)
          error(shardPath, "dim -1 (whole tensor) needs start 0 and length 0");
      } else if (shard.dim < 0 || shard.dim >= int64_t(param.shape.size())) {
        error(shardPath + ".dim", "dim " + str(shard.dim) +
                                      " is outside the tensor's " +
                                      str(param.shape.size()) + " dims");
        continue;
      } else {
        int64_t extent = param.shape[shard.dim];
        if (shard.start < 0 || shard.length <= 0 ||
            shard.start + shard.length > extent)
          error(shardPath, "slice [" + str(shard.start) + ", " +
                               str(shard.start + shard.length) +
                               ") is outside dim " + str(shard.dim) +
                               " of extent " + str(extent));
        sliceElements = elements / std::max<int64_t>(extent, 1) * shard.length;
        slices[shard.dim].push_back({shard.start, shard.start + shard.length});
      }
      if (shard.zeroShards != 1 && shard.zeroShards != bundle.mesh.dp) {
        // The runtime shards a slice over the DP group or not at all.
        error(shardPath + ".zero_shards", "must be 1 or mesh.dp " +
                                              str(bundle.mesh.dp) + ", got " +
                                              str(shard.zeroShards));
        continue;
      }
      if (shard.paddedElements < sliceElements ||
          shard.paddedElements % shard.zeroShards != 0) {
        error(shardPath + ".padded_elements",
              str(shard.paddedElements) + " must be at least the slice's " +
                  str(sliceElements) + " elements and a multiple of " +
                  "zero_shards " + str(shard.zeroShards));
        continue;
      }
      // A shard holds the parameter converted to its buffer's dtype (the
      // bf16 working copy beside the fp32 master).
      const Buffer &buffer = program.buffers[shard.buffer];
      int64_t bytes =
          shard.paddedElements / shard.zeroShards * elementBytes(buffer.dtype);
      if (shard.offset < 0 || shard.offset + bytes > buffer.size)
        error(shardPath + ".offset",
              "shard of " + str(bytes) + " bytes at offset " +
                  str(shard.offset) + " exceeds buffer " + str(buffer.id) +
                  " '" + buffer.name + "' of " + str(buffer.size) + " bytes");
      else
        shardBytes.push_back({shard.role, shard.buffer, shard.offset,
                              shard.offset + bytes, shardPath});
    }
    if (param.hfTransposed && param.shape.size() != 2)
      error(path + ".hf_transposed", "set on a tensor of rank " +
                                         str(param.shape.size()) +
                                         " (only matrices are transposed)");
    // A shard of the whole tensor (dim -1) holds every element.
    if (std::any_of(param.shards.begin(), param.shards.end(),
                    [](const ShardSpec &s) { return s.dim == -1; }))
      return;
    for (auto &[dim, ranges] : slices) {
      std::sort(ranges.begin(), ranges.end());
      int64_t covered = 0;
      for (const auto &[begin, end] : ranges) {
        if (begin > covered)
          break;
        covered = std::max(covered, end);
      }
      if (covered < param.shape[size_t(dim)])
        error(path + ".shards",
              "the slices along dim " + str(dim) + " cover [0, " +
                  str(covered) + ") of extent " +
                  str(param.shape[size_t(dim)]) +
                  " (every element must be held by some shard)");
    }
  }

  /// What no one parameter shows: names (checkpoints key tensors by name,
  /// the safetensors export by Hugging Face name) and shard bytes (a step
  /// writing one parameter's shard would change another's) are each
  /// parameter's own.
  void checkParameterSet() {
    std::map<std::string, size_t> names, hfNames;
    for (size_t i = 0; i < bundle.parameters.size(); ++i) {
      const Parameter &param = bundle.parameters[i];
      auto [name, fresh] = names.emplace(param.name, i);
      if (!fresh && !param.name.empty())
        error(at("parameters", i) + ".name",
              "'" + param.name + "' is also parameters[" +
                  str(int64_t(name->second)) + "]'s name");
      if (param.hfName.empty())
        continue;
      auto [hfName, hfFresh] = hfNames.emplace(param.hfName, i);
      if (!hfFresh)
        error(at("parameters", i) + ".hf_name",
              "'" + param.hfName + "' is also parameters[" +
                  str(int64_t(hfName->second)) +
                  "]'s (tied weights are one parameter)");
    }
    std::sort(shardBytes.begin(), shardBytes.end());
    // The shard reaching furthest so far in the same buffer.
    const ShardBytes *reach = nullptr;
    for (const ShardBytes &cur : shardBytes) {
      if (reach && cur.role == reach->role && cur.buffer == reach->buffer) {
        if (cur.begin < reach->end)
          error(cur.path + ".offset",
                "bytes [" + str(cur.begin) + ", " + str(cur.end) +
                    ") of buffer " + str(cur.buffer) + " in role " +
                    str(cur.role) + " overlap " + reach->path + "'s [" +
                    str(reach->begin) + ", " + str(reach->end) + ")");
        if (cur.end <= reach->end)
          continue;
      }
      reach = &cur;
    }
  }

  void checkKernel(const Kernel &kernel, const std::string &path,
                   size_t index) {
    if (kernel.id != int64_t(index))
      error(path + ".id",
            "id " + str(kernel.id) + " must equal its index " + str(index));
    if (kernel.name.empty())
      error(path + ".name", "must not be empty");
    if (!bundle.files.count(kernel.source))
      error(path + ".source",
            "source '" + kernel.source + "' is not a file of the bundle");
  }

  /// Side files live inside the bundle directory: relative, no "..", no
  /// empty or "." segments, and never the manifest itself.
  void checkFilePath(const std::string &path) {
    bool ok = !path.empty() && path.front() != '/' && path != "plan.json";
    size_t begin = 0;
    while (ok && begin <= path.size()) {
      size_t end = path.find('/', begin);
      if (end == std::string::npos)
        end = path.size();
      std::string segment = path.substr(begin, end - begin);
      ok = !segment.empty() && segment != "." && segment != "..";
      begin = end + 1;
    }
    if (!ok)
      error("files", "invalid side-file path '" + path + "'");
  }

  /// The first rank of `role` that no group of family `familyId` contains,
  /// or -1; cached, as every communication instruction asks.
  int64_t rankOutsideFamily(int64_t role, int64_t familyId) {
    auto [it, inserted] = outsideFamily.try_emplace({role, familyId}, -1);
    if (!inserted)
      return it->second;
    std::vector<int64_t> groupOf = groupIndexByRank(
        bundle.groups[familyId], int64_t(bundle.rankRoles.size()));
    for (size_t rank = 0; rank < groupOf.size(); ++rank)
      if (bundle.rankRoles[rank] == role && groupOf[rank] < 0) {
        it->second = int64_t(rank);
        break;
      }
    return it->second;
  }

  const Bundle &bundle;
  /// The bytes each parameter shard holds, for checkParameterSet.
  struct ShardBytes {
    int64_t role, buffer, begin, end;
    std::string path;
    bool operator<(const ShardBytes &other) const {
      return std::tie(role, buffer, begin, end, path) <
             std::tie(other.role, other.buffer, other.begin, other.end,
                      other.path);
    }
  };
  std::vector<ShardBytes> shardBytes;
  std::vector<StructuralError> errors;
  std::map<std::pair<int64_t, int64_t>, int64_t> outsideFamily;
};

} // namespace

std::vector<StructuralError> weft::plan::checkStructure(const Bundle &bundle) {
  return StructureChecker(bundle).run();
}
