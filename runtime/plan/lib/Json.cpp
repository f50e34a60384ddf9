//===- Json.cpp - Bundle <-> manifest JSON --------------------------------===//
//
// The manifest is read through JsonReader, which names the JSON path of
// every error and rejects fields it did not consume (a misspelled or
// misplaced field is an error, not silently ignored data).
//
//===----------------------------------------------------------------------===//

#include "weft/plan/Error.h"
#include "weft/plan/JsonReader.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <map>

using namespace weft::plan;
using nlohmann::json;

namespace {

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

json rangesToJson(const std::vector<BufferRange> &ranges) {
  json array = json::array();
  for (const BufferRange &range : ranges)
    array.push_back({{"buffer", range.buffer},
                     {"offset", range.offset},
                     {"bytes", range.bytes}});
  return array;
}

json instructionToJson(const Instruction &inst) {
  json out = {{"op", toString(inst.opcode)}};
  if (!inst.reads.empty())
    out["reads"] = rangesToJson(inst.reads);
  if (!inst.writes.empty())
    out["writes"] = rangesToJson(inst.writes);
  if (!inst.phase.empty())
    out["phase"] = inst.phase;
  auto putCommunication = [&] {
    out["group"] = inst.group;
    out["count"] = inst.count;
    out["dtype"] = toString(inst.dtype);
  };
  switch (inst.opcode) {
  case Opcode::Kernel:
    out["kernel"] = inst.kernel;
    if (!inst.args.empty())
      out["args"] = inst.args;
    break;
  case Opcode::Gemm:
    out["trans_a"] = inst.gemm.transA;
    out["trans_b"] = inst.gemm.transB;
    out["m"] = inst.gemm.m;
    out["n"] = inst.gemm.n;
    out["k"] = inst.gemm.k;
    out["lda"] = inst.gemm.lda;
    out["ldb"] = inst.gemm.ldb;
    out["ldc"] = inst.gemm.ldc;
    out["alpha"] = inst.gemm.alpha;
    out["beta"] = inst.gemm.beta;
    out["dtype"] = toString(inst.dtype);
    if (inst.epilogue != GemmEpilogue::None) {
      out["epilogue"] = toString(inst.epilogue);
      out["epilogue_kernels"] = inst.epilogueKernels;
    }
    break;
  case Opcode::LoadBatch:
    out["microbatch"] = inst.microbatch;
    break;
  case Opcode::Fill:
    out["value"] = inst.value;
    out["dtype"] = toString(inst.dtype);
    break;
  case Opcode::AllReduce:
  case Opcode::ReduceScatter:
    putCommunication();
    out["reduce"] = toString(inst.reduce);
    break;
  case Opcode::AllGather:
    putCommunication();
    break;
  case Opcode::Broadcast:
    putCommunication();
    out["root"] = inst.peer;
    break;
  case Opcode::Send:
  case Opcode::Recv:
    putCommunication();
    out["peer"] = inst.peer;
    break;
  case Opcode::RecordEvent:
  case Opcode::WaitEvent:
    out["event"] = inst.event;
    break;
  case Opcode::OptimizerStep:
    out["count"] = inst.count;
    out["dtype"] = toString(inst.dtype);
    break;
  case Opcode::GradNorm:
  case Opcode::Clip:
    out["dtype"] = toString(inst.dtype);
    break;
  case Opcode::Copy:
  case Opcode::Release:
    break;
  }
  return out;
}

json bufferToJson(const Buffer &buffer) {
  return {{"id", buffer.id},
          {"name", buffer.name},
          {"region", toString(buffer.region)},
          {"offset", buffer.offset},
          {"size", buffer.size},
          {"dtype", toString(buffer.dtype)},
          {"alignment", buffer.alignment}};
}

/// One stored program: the programs of `stored.roles`, which share all but
/// the instructions marked per role.
json storedProgramToJson(const Bundle &bundle, const StoredProgram &stored) {
  const Program &program = bundle.programs[stored.roles.front()];
  json buffers = json::array();
  for (const Buffer &buffer : program.buffers)
    buffers.push_back(bufferToJson(buffer));
  json streams = json::array();
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const Stream &stream = program.streams[s];
    json instructions = json::array();
    for (size_t i = 0; i < stream.instructions.size(); ++i) {
      if (!stored.perRole[s][i]) {
        instructions.push_back(instructionToJson(stream.instructions[i]));
        continue;
      }
      json variants = json::array();
      for (int64_t role : stored.roles)
        variants.push_back(instructionToJson(
            bundle.programs[role].streams[s].instructions[i]));
      instructions.push_back({{"per_role", std::move(variants)}});
    }
    streams.push_back(
        {{"name", stream.name}, {"instructions", std::move(instructions)}});
  }
  return {{"roles", stored.roles},
          {"num_events", program.numEvents},
          {"arena_bytes", program.arenaBytes},
          {"persistent_bytes", program.persistentBytes},
          {"host_bytes", program.hostBytes},
          {"buffers", std::move(buffers)},
          {"streams", std::move(streams)}};
}

json parameterToJson(const Parameter &param) {
  json shards = json::array();
  for (const ShardSpec &shard : param.shards)
    shards.push_back({{"role", shard.role},
                      {"buffer", shard.buffer},
                      {"offset", shard.offset},
                      {"dim", shard.dim},
                      {"start", shard.start},
                      {"length", shard.length},
                      {"zero_shards", shard.zeroShards},
                      {"padded_elements", shard.paddedElements}});
  return {{"name", param.name},
          {"shape", param.shape},
          {"dtype", toString(param.dtype)},
          {"init", {{"kind", param.init.kind}, {"std", param.init.std}}},
          {"hf_name", param.hfName},
          {"hf_transposed", param.hfTransposed},
          {"shards", shards}};
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

std::vector<BufferRange> readRanges(JsonReader &reader,
                                    const std::string &key) {
  std::vector<BufferRange> ranges;
  if (!reader.has(key))
    return ranges;
  const json &items = reader.array(key);
  ranges.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    JsonReader range = reader.element(items, key, i);
    ranges.push_back({range.integer("buffer"), range.integer("offset"),
                      range.integer("bytes")});
    range.finish("");
  }
  return ranges;
}

Instruction readInstruction(JsonReader &reader) {
  Instruction inst;
  inst.opcode = reader.enumeration("op", parseOpcode, "opcode");
  inst.reads = readRanges(reader, "reads");
  inst.writes = readRanges(reader, "writes");
  if (reader.has("phase"))
    inst.phase = reader.string("phase");
  auto readDType = [&] {
    inst.dtype = reader.enumeration("dtype", parseDType, "dtype");
  };
  auto readCommunication = [&] {
    inst.group = reader.integer("group");
    inst.count = reader.integer("count");
    readDType();
  };
  switch (inst.opcode) {
  case Opcode::Kernel:
    inst.kernel = reader.integer("kernel");
    if (reader.has("args"))
      inst.args = reader.integers("args");
    break;
  case Opcode::Gemm:
    inst.gemm.transA = reader.boolean("trans_a");
    inst.gemm.transB = reader.boolean("trans_b");
    inst.gemm.m = reader.integer("m");
    inst.gemm.n = reader.integer("n");
    inst.gemm.k = reader.integer("k");
    inst.gemm.lda = reader.integer("lda");
    inst.gemm.ldb = reader.integer("ldb");
    inst.gemm.ldc = reader.integer("ldc");
    inst.gemm.alpha = reader.number("alpha");
    inst.gemm.beta = reader.number("beta");
    readDType();
    if (reader.has("epilogue")) {
      inst.epilogue =
          reader.enumeration("epilogue", parseGemmEpilogue, "gemm epilogue");
      inst.epilogueKernels = reader.integers("epilogue_kernels");
    }
    break;
  case Opcode::LoadBatch:
    inst.microbatch = reader.integer("microbatch");
    break;
  case Opcode::Fill:
    inst.value = reader.number("value");
    readDType();
    break;
  case Opcode::AllReduce:
  case Opcode::ReduceScatter:
    readCommunication();
    inst.reduce = reader.enumeration("reduce", parseReduceOp, "reduction");
    break;
  case Opcode::AllGather:
    readCommunication();
    break;
  case Opcode::Broadcast:
    readCommunication();
    inst.peer = reader.integer("root");
    break;
  case Opcode::Send:
  case Opcode::Recv:
    readCommunication();
    inst.peer = reader.integer("peer");
    break;
  case Opcode::RecordEvent:
  case Opcode::WaitEvent:
    inst.event = reader.integer("event");
    break;
  case Opcode::OptimizerStep:
    inst.count = reader.integer("count");
    readDType();
    break;
  case Opcode::GradNorm:
  case Opcode::Clip:
    readDType();
    break;
  case Opcode::Copy:
  case Opcode::Release:
    break;
  }
  reader.finish(" for " + std::string(toString(inst.opcode)));
  return inst;
}

/// Where each role's program is stored in the manifest, to turn the paths of
/// structural errors (which index programs by role) into manifest paths.
struct StoredLayout {
  std::vector<size_t> storedOf;  // role -> index in "programs"
  std::vector<size_t> variantOf; // role -> position in that entry's roles
  std::vector<std::vector<std::vector<bool>>> perRole; // [stored][s][i]
};

/// Read one stored program into the programs of the roles it lists
/// (`programs[k]` for `roles[k]`); `listedAt` maps each role seen so far to
/// the path that lists it.
void readStoredProgram(JsonReader &reader, std::vector<int64_t> &roles,
                       std::vector<Program> &programs,
                       std::vector<std::vector<bool>> &perRole,
                       std::map<int64_t, std::string> &listedAt) {
  roles = reader.integers("roles");
  if (roles.empty())
    reader.fail("roles", "must list at least one role");
  for (size_t k = 0; k < roles.size(); ++k) {
    std::string key = JsonReader::indexPath("roles", k);
    int64_t role = roles[k];
    if (role < 0)
      reader.fail(key,
                  "role " + std::to_string(role) + " must not be negative");
    auto [it, inserted] =
        listedAt.try_emplace(role, JsonReader::joinPath(reader.where(), key));
    if (!inserted)
      reader.fail(key, "role " + std::to_string(role) +
                           " is listed twice (also at " + it->second + ")");
    if (k > 0 && role < roles[k - 1])
      reader.fail(key, "roles must ascend: role " + std::to_string(role) +
                           " after role " + std::to_string(roles[k - 1]));
  }

  Program base;
  base.numEvents = reader.integer("num_events");
  base.arenaBytes = reader.integer("arena_bytes");
  base.persistentBytes = reader.integer("persistent_bytes");
  base.hostBytes = reader.integer("host_bytes");
  const json &buffers = reader.array("buffers");
  for (size_t i = 0; i < buffers.size(); ++i) {
    JsonReader item = reader.element(buffers, "buffers", i);
    Buffer buffer;
    buffer.id = item.integer("id");
    buffer.name = item.string("name");
    buffer.region = item.enumeration("region", parseRegion, "region");
    buffer.offset = item.integer("offset");
    buffer.size = item.integer("size");
    buffer.dtype = item.enumeration("dtype", parseDType, "dtype");
    buffer.alignment = item.integer("alignment");
    item.finish("");
    base.buffers.push_back(std::move(buffer));
  }
  programs.assign(roles.size(), base);
  size_t variants = roles.size();
  const json &streams = reader.array("streams");
  perRole.assign(streams.size(), {});
  for (size_t s = 0; s < streams.size(); ++s) {
    JsonReader item = reader.element(streams, "streams", s);
    std::string name = item.string("name");
    const json &instructions = item.array("instructions");
    for (Program &program : programs) {
      program.streams.push_back({name, {}});
      program.streams.back().instructions.reserve(instructions.size());
    }
    perRole[s].assign(instructions.size(), false);
    for (size_t j = 0; j < instructions.size(); ++j) {
      JsonReader instReader = item.element(instructions, "instructions", j);
      if (!instReader.has("per_role")) {
        Instruction inst = readInstruction(instReader);
        for (size_t k = 0; k + 1 < variants; ++k)
          programs[k].streams[s].instructions.push_back(inst);
        programs[variants - 1].streams[s].instructions.push_back(
            std::move(inst));
        continue;
      }
      // An instruction that differs between the roles: one variant each.
      perRole[s][j] = true;
      const json &list = instReader.array("per_role");
      instReader.finish(" beside per_role (an instruction stored per role "
                        "has only per_role)");
      if (list.size() != variants)
        instReader.fail("per_role",
                        "has " + std::to_string(list.size()) +
                            " variants but the program is stored for " +
                            std::to_string(variants) + " roles");
      for (size_t k = 0; k < variants; ++k) {
        JsonReader variant = instReader.element(list, "per_role", k);
        if (variant.has("per_role"))
          variant.fail("per_role", "nested per_role is not allowed");
        programs[k].streams[s].instructions.push_back(readInstruction(variant));
      }
    }
    item.finish("");
  }
  reader.finish("");
}

/// `path` of a structural error (programs indexed by role) as a path into
/// the manifest: "programs[R].streams[s].instructions[i].x" becomes
/// "programs[S].streams[s].instructions[i].per_role[k].x" when that
/// instruction is stored per role, S being the entry that lists role R.
std::string manifestPath(const std::string &path, const StoredLayout &layout) {
  const std::string prefix = "programs[";
  if (path.compare(0, prefix.size(), prefix) != 0)
    return path;
  size_t close = path.find(']', prefix.size());
  if (close == std::string::npos)
    return path;
  size_t role = std::stoul(path.substr(prefix.size(), close - prefix.size()));
  if (role >= layout.storedOf.size())
    return path;
  size_t stored = layout.storedOf[role];
  std::string rest = path.substr(close + 1);
  std::string out = JsonReader::indexPath("programs", stored);
  // ".streams[s].instructions[i]" followed by the rest of the path.
  unsigned long s = 0, i = 0;
  int consumed = 0;
  if (std::sscanf(rest.c_str(), ".streams[%lu].instructions[%lu]%n", &s, &i,
                  &consumed) == 2 &&
      consumed > 0) {
    const auto &perRole = layout.perRole[stored];
    if (s < perRole.size() && i < perRole[s].size() && perRole[s][i])
      return out + rest.substr(0, consumed) +
             JsonReader::indexPath(".per_role", layout.variantOf[role]) +
             rest.substr(consumed);
  }
  return out + rest;
}

Parameter readParameter(JsonReader &reader) {
  Parameter param;
  param.name = reader.string("name");
  param.shape = reader.integers("shape");
  param.dtype = reader.enumeration("dtype", parseDType, "dtype");
  JsonReader init = reader.object("init");
  param.init.kind = init.string("kind");
  param.init.std = init.number("std");
  init.finish("");
  param.hfName = reader.string("hf_name");
  param.hfTransposed = reader.boolean("hf_transposed");
  const json &shards = reader.array("shards");
  for (size_t i = 0; i < shards.size(); ++i) {
    JsonReader item = reader.element("shards", i);
    ShardSpec shard;
    shard.role = item.integer("role");
    shard.buffer = item.integer("buffer");
    shard.offset = item.integer("offset");
    shard.dim = item.integer("dim");
    shard.start = item.integer("start");
    shard.length = item.integer("length");
    shard.zeroShards = item.integer("zero_shards");
    shard.paddedElements = item.integer("padded_elements");
    item.finish("");
    param.shards.push_back(shard);
  }
  reader.finish("");
  return param;
}

} // namespace

json weft::plan::toJson(const Bundle &bundle) {
  const TrainingInfo &training = bundle.training;
  json groups = json::array();
  for (const GroupFamily &family : bundle.groups)
    groups.push_back({{"id", family.id},
                      {"kind", toString(family.kind)},
                      {"groups", family.groups}});
  json programs = json::array();
  for (const StoredProgram &stored : storedPrograms(bundle))
    programs.push_back(storedProgramToJson(bundle, stored));
  json parameters = json::array();
  for (const Parameter &param : bundle.parameters)
    parameters.push_back(parameterToJson(param));
  json kernels = json::array();
  for (const Kernel &kernel : bundle.kernels)
    kernels.push_back({{"id", kernel.id},
                       {"name", kernel.name},
                       {"source", kernel.source},
                       {"constants", kernel.constants}});
  json files = json::array();
  for (const auto &[path, contents] : bundle.files)
    files.push_back({{"path", path}, {"size", contents.size()}});

  return {
      {"format_version", bundle.formatVersion},
      {"model", {{"name", bundle.model.name}, {"family", bundle.model.family}}},
      {"training",
       {{"global_batch", training.globalBatch},
        {"seq_len", training.seqLen},
        {"precision", training.precision},
        {"micro_batch", training.microBatch},
        {"grad_accum", training.gradAccum},
        {"steps_per_plan", training.stepsPerPlan},
        {"lr", training.lr},
        {"warmup_steps", training.warmupSteps},
        {"decay_steps", training.decaySteps},
        {"min_lr", training.minLr},
        {"weight_decay", training.weightDecay},
        {"beta1", training.beta1},
        {"beta2", training.beta2},
        {"eps", training.eps},
        {"grad_clip", training.gradClip},
        {"loss_scale",
         {{"dynamic", training.lossScale.dynamic},
          {"initial", training.lossScale.initial},
          {"growth_interval", training.lossScale.growthInterval},
          {"backoff", training.lossScale.backoff}}}}},
      {"prediction",
       {{"step_time_s", bundle.prediction.stepTimeS},
        {"peak_memory_bytes", bundle.prediction.peakMemoryBytes},
        {"mfu", bundle.prediction.mfu}}},
      {"config", bundle.config},
      {"mesh",
       {{"dp", bundle.mesh.dp},
        {"pp", bundle.mesh.pp},
        {"tp", bundle.mesh.tp}}},
      {"groups", groups},
      {"rank_roles", bundle.rankRoles},
      {"programs", programs},
      {"parameters", parameters},
      {"kernels", kernels},
      {"files", files},
  };
}

Bundle weft::plan::fromJson(const json &manifest,
                            const std::map<std::string, std::string> &files,
                            const std::string &file) {
  JsonReader root(manifest, "", file);
  Bundle bundle;
  bundle.formatVersion = root.integer("format_version");
  if (bundle.formatVersion != kFormatVersion)
    root.fail("format_version", unsupportedVersionReason(bundle.formatVersion));
  if (root.has("content_hash"))
    root.string("content_hash");

  JsonReader model = root.object("model");
  bundle.model.name = model.string("name");
  bundle.model.family = model.string("family");
  model.finish("");

  JsonReader training = root.object("training");
  TrainingInfo &info = bundle.training;
  info.globalBatch = training.integer("global_batch");
  info.seqLen = training.integer("seq_len");
  info.precision = training.string("precision");
  info.microBatch = training.integer("micro_batch");
  info.gradAccum = training.integer("grad_accum");
  info.stepsPerPlan = training.integer("steps_per_plan");
  info.lr = training.number("lr");
  info.warmupSteps = training.integer("warmup_steps");
  info.decaySteps = training.integer("decay_steps");
  info.minLr = training.number("min_lr");
  info.weightDecay = training.number("weight_decay");
  info.beta1 = training.number("beta1");
  info.beta2 = training.number("beta2");
  info.eps = training.number("eps");
  info.gradClip = training.number("grad_clip");
  JsonReader lossScale = training.object("loss_scale");
  info.lossScale.dynamic = lossScale.boolean("dynamic");
  info.lossScale.initial = lossScale.number("initial");
  info.lossScale.growthInterval = lossScale.integer("growth_interval");
  info.lossScale.backoff = lossScale.number("backoff");
  lossScale.finish("");
  training.finish("");

  JsonReader prediction = root.object("prediction");
  bundle.prediction.stepTimeS = prediction.number("step_time_s");
  bundle.prediction.peakMemoryBytes = prediction.integers("peak_memory_bytes");
  bundle.prediction.mfu = prediction.number("mfu");
  prediction.finish("");

  bundle.config = root.field("config");
  if (!bundle.config.is_object())
    root.fail("config",
              "expected an object" + JsonReader::found(bundle.config));

  JsonReader mesh = root.object("mesh");
  bundle.mesh.dp = mesh.integer("dp");
  bundle.mesh.pp = mesh.integer("pp");
  bundle.mesh.tp = mesh.integer("tp");
  mesh.finish("");

  const json &groups = root.array("groups");
  for (size_t i = 0; i < groups.size(); ++i) {
    JsonReader item = root.element("groups", i);
    GroupFamily family;
    family.id = item.integer("id");
    family.kind = item.enumeration("kind", parseGroupKind, "group kind");
    family.groups = item.integerLists("groups");
    item.finish("");
    bundle.groups.push_back(std::move(family));
  }
  bundle.rankRoles = root.integers("rank_roles");
  // Stored programs, expanded to one program per role.
  const json &programs = root.array("programs");
  std::map<int64_t, std::string> listedAt;
  std::vector<std::vector<int64_t>> storedRoles(programs.size());
  std::vector<std::vector<Program>> storedPrograms(programs.size());
  StoredLayout layout;
  layout.perRole.resize(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    JsonReader item = root.element(programs, "programs", i);
    readStoredProgram(item, storedRoles[i], storedPrograms[i],
                      layout.perRole[i], listedAt);
  }
  size_t roles = listedAt.size();
  for (size_t role = 0; role < roles; ++role)
    if (!listedAt.count(int64_t(role)))
      root.fail("programs", "role " + std::to_string(role) +
                                " is in no stored program (they list " +
                                std::to_string(roles) +
                                " roles, so the role ids are 0.." +
                                std::to_string(roles - 1) + ")");
  bundle.programs.resize(roles);
  layout.storedOf.resize(roles);
  layout.variantOf.resize(roles);
  for (size_t i = 0; i < programs.size(); ++i)
    for (size_t k = 0; k < storedRoles[i].size(); ++k) {
      int64_t role = storedRoles[i][k];
      bundle.programs[role] = std::move(storedPrograms[i][k]);
      bundle.programs[role].role = role;
      layout.storedOf[role] = i;
      layout.variantOf[role] = k;
    }
  const json &parameters = root.array("parameters");
  for (size_t i = 0; i < parameters.size(); ++i) {
    JsonReader item = root.element("parameters", i);
    bundle.parameters.push_back(readParameter(item));
  }
  const json &kernels = root.array("kernels");
  for (size_t i = 0; i < kernels.size(); ++i) {
    JsonReader item = root.element("kernels", i);
    Kernel kernel;
    kernel.id = item.integer("id");
    kernel.name = item.string("name");
    kernel.source = item.string("source");
    const json &constants = item.field("constants");
    if (!constants.is_object())
      item.fail("constants", "expected an object");
    for (const auto &constant : constants.items()) {
      if (!constant.value().is_number_integer())
        item.fail("constants." + constant.key(),
                  "expected an integer" + JsonReader::found(constant.value()));
      kernel.constants[constant.key()] = constant.value().get<int64_t>();
    }
    item.finish("");
    bundle.kernels.push_back(std::move(kernel));
  }
  const json &fileList = root.array("files");
  for (size_t i = 0; i < fileList.size(); ++i) {
    JsonReader item = root.element("files", i);
    std::string path = item.string("path");
    int64_t size = item.integer("size");
    item.finish("");
    auto it = files.find(path);
    if (it == files.end())
      root.fail(JsonReader::indexPath("files", i) + ".path",
                "side file '" + path + "' was not provided");
    if (int64_t(it->second.size()) != size)
      root.fail(JsonReader::indexPath("files", i) + ".size",
                "manifest says " + std::to_string(size) + " bytes, file has " +
                    std::to_string(it->second.size()));
    bundle.files[path] = it->second;
  }
  root.finish("");

  std::vector<StructuralError> errors = checkStructure(bundle);
  if (!errors.empty())
    throw Error(file + ": " + manifestPath(errors.front().path, layout) + ": " +
                errors.front().reason);
  return bundle;
}
