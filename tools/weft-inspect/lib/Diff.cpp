//===- Diff.cpp - What differs between two plan bundles -------------------===//

#include "weft/inspect/Diff.h"

#include "weft/inspect/Analysis.h"
#include "weft/inspect/Categories.h"

#include <map>
#include <sstream>

namespace weft::inspect {

using Flat = std::map<std::string, std::string>;

static std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

static Flat configOf(const plan::Bundle &bundle) {
  Flat flat;
  for (const auto &[key, value] : bundle.config.items())
    flat[key] = value.is_string() ? value.get<std::string>() : value.dump();
  return flat;
}

static Flat trainingOf(const plan::Bundle &bundle) {
  const plan::TrainingInfo &t = bundle.training;
  return {{"global_batch", number(double(t.globalBatch))},
          {"seq_len", number(double(t.seqLen))},
          {"precision", t.precision},
          {"micro_batch", number(double(t.microBatch))},
          {"grad_accum", number(double(t.gradAccum))},
          {"steps_per_plan", number(double(t.stepsPerPlan))}};
}

static Flat meshOf(const plan::Bundle &bundle) {
  return {{"dp", number(double(bundle.mesh.dp))},
          {"pp", number(double(bundle.mesh.pp))},
          {"tp", number(double(bundle.mesh.tp))},
          {"world", number(double(bundle.mesh.worldSize()))}};
}

static Flat predictionOf(const plan::Bundle &bundle) {
  return {{"step_time_s", number(bundle.prediction.stepTimeS)},
          {"mfu", number(bundle.prediction.mfu)}};
}

/// Instruction counts by opcode (and of gemms by epilogue) and collective
/// counts, members and bytes by kind, summed over all ranks.
static std::pair<Flat, Flat> countsOf(const plan::Bundle &bundle) {
  std::map<std::string, double> opcodes, collectives;
  std::vector<int64_t> ranksOfRole(bundle.programs.size(), 0);
  for (int64_t role : bundle.rankRoles)
    ++ranksOfRole[role];
  for (const plan::Program &program : bundle.programs) {
    double ranks = double(ranksOfRole[program.role]);
    for (const plan::Stream &stream : program.streams) {
      for (const plan::Instruction &inst : stream.instructions) {
        opcodes[std::string(plan::toString(inst.opcode))] += ranks;
        // A gemm with an epilogue stands for it and the kernels it folds.
        if (inst.epilogue != plan::GemmEpilogue::None)
          opcodes["gemm +" + std::string(plan::toString(inst.epilogue))] +=
              ranks;
        if (!isCommOp(inst.opcode))
          continue;
        std::string kind = commKind(bundle, inst);
        double bytes = double(inst.count) * plan::elementBytes(inst.dtype);
        collectives[kind + " count"] += ranks;
        collectives[kind + " bytes"] += ranks * bytes;
        // Launches (count) against the collectives they carry (members):
        // coalescing changes the first only.
        collectives[kind + " members"] +=
            ranks * double(plan::memberCount(inst));
      }
    }
  }
  Flat ops, comms;
  for (const auto &[key, value] : opcodes)
    ops[key] = number(value);
  for (const auto &[key, value] : collectives)
    comms[key] = number(value);
  return {ops, comms};
}

static void compare(const std::string &section, const Flat &a, const Flat &b,
                    std::vector<DiffEntry> &out) {
  Flat all = a;
  all.insert(b.begin(), b.end());
  for (const auto &entry : all) {
    auto left = a.find(entry.first), right = b.find(entry.first);
    std::string before = left == a.end() ? "-" : left->second;
    std::string after = right == b.end() ? "-" : right->second;
    if (before != after)
      out.push_back({section, entry.first, before, after});
  }
}

static int64_t plannedBytes(const plan::Bundle &bundle, int64_t rank) {
  const plan::Program &program = bundle.programs[bundle.rankRoles[rank]];
  return program.arenaBytes + program.persistentBytes;
}

/// Ranks whose planned bytes differ, merged into runs of consecutive ranks
/// with the same pair of values.
static void compareMemory(const plan::Bundle &a, const plan::Bundle &b,
                          std::vector<DiffEntry> &out) {
  int64_t ranks = std::min(a.mesh.worldSize(), b.mesh.worldSize());
  int64_t runStart = -1;
  for (int64_t rank = 0; rank <= ranks; ++rank) {
    bool differs =
        rank < ranks && plannedBytes(a, rank) != plannedBytes(b, rank);
    bool continues = runStart >= 0 && differs &&
                     plannedBytes(a, rank) == plannedBytes(a, runStart) &&
                     plannedBytes(b, rank) == plannedBytes(b, runStart);
    if (runStart >= 0 && !continues) {
      std::string item = rank - 1 == runStart
                             ? "rank " + std::to_string(runStart)
                             : "ranks " + std::to_string(runStart) + "-" +
                                   std::to_string(rank - 1);
      out.push_back({"memory", item, number(double(plannedBytes(a, runStart))),
                     number(double(plannedBytes(b, runStart)))});
      runStart = -1;
    }
    if (differs && runStart < 0)
      runStart = rank;
  }
}

/// Persistent bytes by category (the state groups), summed over all ranks:
/// what a ZeRO stage or a precision moves between params, master params,
/// gradients and optimizer states.
static Flat stateOf(const plan::Bundle &bundle) {
  std::vector<int64_t> ranksOfRole(bundle.programs.size(), 0);
  for (int64_t role : bundle.rankRoles)
    ++ranksOfRole[role];
  std::map<Category, double> bytes;
  for (Category category : allCategories())
    bytes[category] = 0;
  for (const plan::Program &program : bundle.programs) {
    std::vector<Category> categories = classifyBuffers(bundle, program);
    for (size_t b = 0; b < categories.size(); ++b)
      if (program.buffers[b].region == plan::Region::Persistent)
        bytes[categories[b]] +=
            double(ranksOfRole[program.role]) * program.buffers[b].size;
  }
  Flat flat;
  for (Category category :
       {Category::Params, Category::MasterParams, Category::OptimizerStates,
        Category::Gradients, Category::Other})
    flat[std::string(toString(category)) + " bytes"] = number(bytes[category]);
  return flat;
}

std::vector<DiffEntry> diffBundles(const plan::Bundle &a,
                                   const plan::Bundle &b) {
  std::vector<DiffEntry> out;
  compare("model", {{"name", a.model.name}, {"family", a.model.family}},
          {{"name", b.model.name}, {"family", b.model.family}}, out);
  compare("mesh", meshOf(a), meshOf(b), out);
  compare("training", trainingOf(a), trainingOf(b), out);
  compare("config", configOf(a), configOf(b), out);
  compare("prediction", predictionOf(a), predictionOf(b), out);
  compareMemory(a, b, out);
  compare("state", stateOf(a), stateOf(b), out);
  auto [opsA, commsA] = countsOf(a);
  auto [opsB, commsB] = countsOf(b);
  compare("instructions", opsA, opsB, out);
  compare("collectives", commsA, commsB, out);
  return out;
}

} // namespace weft::inspect
