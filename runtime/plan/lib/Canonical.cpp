//===- Canonical.cpp - The manifest's text, written straight from a Bundle ===//
//
// writeBundle used to build an nlohmann tree, copy it for the hash and dump it
// twice; for a 1024-rank plan that took most of the compile. This writer
// emits the same bytes (sorted keys, nlohmann's spacing, escaping and number
// formatting) directly, once compact into the hash and once indented into
// the file. BundleIOTest compares it with nlohmann's dump.
//
//===----------------------------------------------------------------------===//

#include "Canonical.h"

#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace weft::plan;
using namespace weft::plan::detail;
using nlohmann::json;

//===----------------------------------------------------------------------===//
// CanonicalWriter
//===----------------------------------------------------------------------===//

CanonicalWriter::CanonicalWriter(int indent, Sha256 *sink)
    : sink(sink), indent(indent) {}

void CanonicalWriter::fail(const std::string &reason) const {
  std::string path;
  for (const Level &level : stack) {
    if (level.count == 0)
      break;
    if (level.object)
      path += (path.empty() ? "" : ".") + std::string(level.lastKey);
    else
      path += "[" + std::to_string(level.count - 1) + "]";
  }
  throw Error((path.empty() ? "<root>" : path) + ": " + reason);
}

void CanonicalWriter::separator() {
  Level &level = stack.back();
  if (level.oneLine) {
    if (level.count++ > 0)
      out += ", ";
    return;
  }
  if (level.count++ > 0)
    out += ',';
  if (indent >= 0) {
    out += '\n';
    out.append(size_t(indent) * stack.size(), ' ');
  }
}

void CanonicalWriter::beforeValue() {
  if (afterKey) {
    afterKey = false;
    return;
  }
  if (stack.empty())
    return;
  if (stack.back().object)
    fail("a value in an object needs a key");
  separator();
}

void CanonicalWriter::key(std::string_view name) {
  if (stack.empty() || !stack.back().object || afterKey)
    fail("key '" + std::string(name) + "' outside an object");
  Level &level = stack.back();
  if (level.count > 0 && !(level.lastKey < name))
    fail("key '" + std::string(name) + "' is not sorted after '" +
         std::string(level.lastKey) + "'");
  separator();
  level.lastKey = name;
  out += '"';
  escaped(name);
  out += indent >= 0 ? "\": " : "\":";
  afterKey = true;
}

void CanonicalWriter::open(bool object) {
  beforeValue();
  out += object ? '{' : '[';
  bool inherited = !stack.empty() && stack.back().oneLine;
  stack.push_back({object, 0, {}, inherited || oneLineNext});
  oneLineNext = false;
}

void CanonicalWriter::beginObject() { open(true); }

void CanonicalWriter::beginArray() { open(false); }

void CanonicalWriter::close(char bracket) {
  size_t count = stack.back().count;
  bool oneLine = stack.back().oneLine;
  stack.pop_back();
  if (count > 0 && indent >= 0 && !oneLine) {
    out += '\n';
    out.append(size_t(indent) * stack.size(), ' ');
  }
  out += bracket;
  flushIfLarge();
}

void CanonicalWriter::endObject() { close('}'); }
void CanonicalWriter::endArray() { close(']'); }

void CanonicalWriter::integer(int64_t value) {
  beforeValue();
  char text[24];
  char *end = std::to_chars(text, text + sizeof text, value).ptr;
  out.append(text, end);
}

void CanonicalWriter::unsignedInteger(uint64_t value) {
  beforeValue();
  char text[24];
  char *end = std::to_chars(text, text + sizeof text, value).ptr;
  out.append(text, end);
}

void CanonicalWriter::number(double value) {
  beforeValue();
  if (!std::isfinite(value)) {
    out += "null"; // what nlohmann writes
    return;
  }
  // nlohmann's own shortest round-trip formatting (Grisu2, ".0" appended to
  // integral values), so the bytes equal json::dump's.
  char text[64];
  char *end = nlohmann::detail::to_chars(text, text + sizeof text, value);
  out.append(text, end);
}

void CanonicalWriter::boolean(bool value) {
  beforeValue();
  out += value ? "true" : "false";
}

void CanonicalWriter::string(std::string_view value) {
  beforeValue();
  out += '"';
  escaped(value);
  out += '"';
}

namespace {

/// Length of the well-formed UTF-8 sequence (RFC 3629) at text[i] (a byte
/// >= 0x80), or 0 if it is malformed: nlohmann's decoder accepts exactly these.
size_t utf8SequenceLength(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return uint8_t(text[i + k]); };
  auto cont = [&](size_t k, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i + k < text.size() && byte(k) >= lo && byte(k) <= hi;
  };
  uint8_t lead = byte(0);
  if (lead >= 0xC2 && lead <= 0xDF)
    return cont(1) ? 2 : 0;
  if (lead == 0xE0)
    return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF)
    return cont(1) && cont(2) ? 3 : 0;
  if (lead == 0xED)
    return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (lead == 0xF0)
    return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (lead >= 0xF1 && lead <= 0xF3)
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (lead == 0xF4)
    return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

} // namespace

void CanonicalWriter::escaped(std::string_view text) {
  size_t run = 0; // start of the bytes not yet appended
  for (size_t i = 0; i < text.size();) {
    uint8_t c = uint8_t(text[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out.append(text.data() + run, i - run);
    if (c >= 0x80) {
      size_t length = utf8SequenceLength(text, i);
      if (length == 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%02X", unsigned(c));
        fail("invalid UTF-8 byte at index " + std::to_string(i) + ": 0x" + hex);
      }
      out.append(text.data() + i, length);
      i += length;
    } else {
      switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default: {
        char code[8];
        std::snprintf(code, sizeof code, "\\u%04x", unsigned(c));
        out += code;
      }
      }
      ++i;
    }
    run = i;
  }
  out.append(text.data() + run, text.size() - run);
}

void CanonicalWriter::value(const json &item, std::string_view skipTopKey) {
  switch (item.type()) {
  case json::value_t::null:
    beforeValue();
    out += "null";
    break;
  case json::value_t::object: {
    bool skip = !skipTopKey.empty();
    beginObject();
    for (const auto &[name, member] : item.get_ref<const json::object_t &>()) {
      if (skip && name == skipTopKey)
        continue;
      key(name);
      value(member);
    }
    endObject();
    break;
  }
  case json::value_t::array:
    beginArray();
    for (const json &element : item.get_ref<const json::array_t &>())
      value(element);
    endArray();
    break;
  case json::value_t::string:
    string(item.get_ref<const std::string &>());
    break;
  case json::value_t::boolean:
    boolean(item.get<bool>());
    break;
  case json::value_t::number_integer:
    integer(item.get<int64_t>());
    break;
  case json::value_t::number_unsigned:
    unsignedInteger(item.get<uint64_t>());
    break;
  case json::value_t::number_float:
    number(item.get<double>());
    break;
  default:
    fail("cannot write a binary or discarded JSON value");
  }
}

std::string CanonicalWriter::take() {
  if (sink) {
    sink->update(out);
    out.clear();
  }
  return std::move(out);
}

//===----------------------------------------------------------------------===//
// The manifest (keys in sorted order; see toJson in Json.cpp for the tree)
//===----------------------------------------------------------------------===//

namespace {

void writeIntegers(CanonicalWriter &w, const std::vector<int64_t> &values) {
  w.oneLine();
  w.beginArray();
  for (int64_t value : values)
    w.integer(value);
  w.endArray();
}

void writeRanges(CanonicalWriter &w, const std::vector<BufferRange> &ranges) {
  w.beginArray();
  for (const BufferRange &range : ranges) {
    w.beginObject();
    w.key("buffer");
    w.integer(range.buffer);
    w.key("bytes");
    w.integer(range.bytes);
    w.key("offset");
    w.integer(range.offset);
    w.endObject();
  }
  w.endArray();
}

bool isCommunication(Opcode op) {
  return isCollective(op) || isPointToPoint(op);
}

void writeInstruction(CanonicalWriter &w, const Instruction &inst) {
  Opcode op = inst.opcode;
  bool gemm = op == Opcode::Gemm;
  w.oneLine();
  w.beginObject();
  if (gemm) {
    w.key("alpha");
    w.number(inst.gemm.alpha);
  }
  if (op == Opcode::Kernel && !inst.args.empty()) {
    w.key("args");
    writeIntegers(w, inst.args);
  }
  if (gemm) {
    w.key("beta");
    w.number(inst.gemm.beta);
  }
  if (isCommunication(op) || op == Opcode::OptimizerStep) {
    w.key("count");
    w.integer(inst.count);
  }
  if (gemm || op == Opcode::Fill || isCommunication(op) ||
      op == Opcode::OptimizerStep || op == Opcode::GradNorm ||
      op == Opcode::Clip) {
    w.key("dtype");
    w.string(toString(inst.dtype));
  }
  if (gemm && inst.epilogue != GemmEpilogue::None) {
    w.key("epilogue");
    w.string(toString(inst.epilogue));
    w.key("epilogue_kernels");
    writeIntegers(w, inst.epilogueKernels);
  }
  if (op == Opcode::RecordEvent || op == Opcode::WaitEvent) {
    w.key("event");
    w.integer(inst.event);
  }
  if (isCommunication(op)) {
    w.key("group");
    w.integer(inst.group);
  }
  if (gemm) {
    w.key("k");
    w.integer(inst.gemm.k);
  }
  if (op == Opcode::Kernel) {
    w.key("kernel");
    w.integer(inst.kernel);
  }
  if (gemm) {
    w.key("lda");
    w.integer(inst.gemm.lda);
    w.key("ldb");
    w.integer(inst.gemm.ldb);
    w.key("ldc");
    w.integer(inst.gemm.ldc);
    w.key("m");
    w.integer(inst.gemm.m);
  }
  if (op == Opcode::LoadBatch) {
    w.key("microbatch");
    w.integer(inst.microbatch);
  }
  if (gemm) {
    w.key("n");
    w.integer(inst.gemm.n);
  }
  w.key("op");
  w.string(toString(op));
  if (isPointToPoint(op)) {
    w.key("peer");
    w.integer(inst.peer);
  }
  if (!inst.phase.empty()) {
    w.key("phase");
    w.string(inst.phase);
  }
  if (!inst.reads.empty()) {
    w.key("reads");
    writeRanges(w, inst.reads);
  }
  if (op == Opcode::AllReduce || op == Opcode::ReduceScatter) {
    w.key("reduce");
    w.string(toString(inst.reduce));
  }
  if (op == Opcode::Broadcast) {
    w.key("root");
    w.integer(inst.peer);
  }
  if (gemm) {
    w.key("trans_a");
    w.boolean(inst.gemm.transA);
    w.key("trans_b");
    w.boolean(inst.gemm.transB);
  }
  if (op == Opcode::Fill) {
    w.key("value");
    w.number(inst.value);
  }
  if (!inst.writes.empty()) {
    w.key("writes");
    writeRanges(w, inst.writes);
  }
  w.endObject();
}

void writeProgram(CanonicalWriter &w, const Bundle &bundle,
                  const StoredProgram &stored) {
  const Program &program = bundle.programs[stored.roles.front()];
  w.beginObject();
  w.key("arena_bytes");
  w.integer(program.arenaBytes);
  w.key("buffers");
  w.beginArray();
  for (const Buffer &buffer : program.buffers) {
    w.oneLine();
    w.beginObject();
    w.key("alignment");
    w.integer(buffer.alignment);
    w.key("dtype");
    w.string(toString(buffer.dtype));
    w.key("id");
    w.integer(buffer.id);
    w.key("name");
    w.string(buffer.name);
    w.key("offset");
    w.integer(buffer.offset);
    w.key("region");
    w.string(toString(buffer.region));
    w.key("size");
    w.integer(buffer.size);
    w.endObject();
  }
  w.endArray();
  w.key("host_bytes");
  w.integer(program.hostBytes);
  w.key("num_events");
  w.integer(program.numEvents);
  w.key("persistent_bytes");
  w.integer(program.persistentBytes);
  w.key("roles");
  writeIntegers(w, stored.roles);
  w.key("streams");
  w.beginArray();
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const Stream &stream = program.streams[s];
    w.beginObject();
    w.key("instructions");
    w.beginArray();
    for (size_t i = 0; i < stream.instructions.size(); ++i) {
      if (!stored.perRole[s][i]) {
        writeInstruction(w, stream.instructions[i]);
        continue;
      }
      w.beginObject();
      w.key("per_role");
      w.beginArray();
      for (int64_t role : stored.roles)
        writeInstruction(w, bundle.programs[role].streams[s].instructions[i]);
      w.endArray();
      w.endObject();
    }
    w.endArray();
    w.key("name");
    w.string(stream.name);
    w.endObject();
  }
  w.endArray();
  w.endObject();
}

void writeParameter(CanonicalWriter &w, const Parameter &param) {
  w.beginObject();
  w.key("dtype");
  w.string(toString(param.dtype));
  w.key("hf_name");
  w.string(param.hfName);
  w.key("hf_transposed");
  w.boolean(param.hfTransposed);
  w.key("init");
  w.beginObject();
  w.key("kind");
  w.string(param.init.kind);
  w.key("std");
  w.number(param.init.std);
  w.endObject();
  w.key("name");
  w.string(param.name);
  w.key("shape");
  writeIntegers(w, param.shape);
  w.key("shards");
  w.beginArray();
  for (const ShardSpec &shard : param.shards) {
    w.oneLine();
    w.beginObject();
    w.key("buffer");
    w.integer(shard.buffer);
    w.key("dim");
    w.integer(shard.dim);
    w.key("length");
    w.integer(shard.length);
    w.key("offset");
    w.integer(shard.offset);
    w.key("padded_elements");
    w.integer(shard.paddedElements);
    w.key("role");
    w.integer(shard.role);
    w.key("start");
    w.integer(shard.start);
    w.key("zero_shards");
    w.integer(shard.zeroShards);
    w.endObject();
  }
  w.endArray();
  w.endObject();
}

void writeTraining(CanonicalWriter &w, const TrainingInfo &training) {
  w.beginObject();
  w.key("beta1");
  w.number(training.beta1);
  w.key("beta2");
  w.number(training.beta2);
  w.key("decay_steps");
  w.integer(training.decaySteps);
  w.key("eps");
  w.number(training.eps);
  w.key("global_batch");
  w.integer(training.globalBatch);
  w.key("grad_accum");
  w.integer(training.gradAccum);
  w.key("grad_clip");
  w.number(training.gradClip);
  w.key("loss_scale");
  w.beginObject();
  w.key("backoff");
  w.number(training.lossScale.backoff);
  w.key("dynamic");
  w.boolean(training.lossScale.dynamic);
  w.key("growth_interval");
  w.integer(training.lossScale.growthInterval);
  w.key("initial");
  w.number(training.lossScale.initial);
  w.endObject();
  w.key("lr");
  w.number(training.lr);
  w.key("micro_batch");
  w.integer(training.microBatch);
  w.key("min_lr");
  w.number(training.minLr);
  w.key("precision");
  w.string(training.precision);
  w.key("seq_len");
  w.integer(training.seqLen);
  w.key("steps_per_plan");
  w.integer(training.stepsPerPlan);
  w.key("warmup_steps");
  w.integer(training.warmupSteps);
  w.key("weight_decay");
  w.number(training.weightDecay);
  w.endObject();
}

} // namespace

void weft::plan::detail::writeManifest(CanonicalWriter &w, const Bundle &bundle,
                                       const std::vector<StoredProgram> &stored,
                                       std::string_view hash) {
  w.beginObject();
  w.key("config");
  w.value(bundle.config);
  if (!hash.empty()) {
    w.key("content_hash");
    w.string(hash);
  }
  w.key("files");
  w.beginArray();
  for (const auto &[path, contents] : bundle.files) {
    w.oneLine();
    w.beginObject();
    w.key("path");
    w.string(path);
    w.key("size");
    w.unsignedInteger(contents.size());
    w.endObject();
  }
  w.endArray();
  w.key("format_version");
  w.integer(bundle.formatVersion);
  w.key("groups");
  w.beginArray();
  for (const GroupFamily &family : bundle.groups) {
    w.beginObject();
    w.key("groups");
    w.beginArray();
    for (const std::vector<int64_t> &group : family.groups)
      writeIntegers(w, group);
    w.endArray();
    w.key("id");
    w.integer(family.id);
    w.key("kind");
    w.string(toString(family.kind));
    w.endObject();
  }
  w.endArray();
  w.key("kernels");
  w.beginArray();
  for (const Kernel &kernel : bundle.kernels) {
    w.oneLine();
    w.beginObject();
    w.key("constants");
    w.beginObject();
    for (const auto &[name, value] : kernel.constants) {
      w.key(name);
      w.integer(value);
    }
    w.endObject();
    w.key("id");
    w.integer(kernel.id);
    w.key("name");
    w.string(kernel.name);
    w.key("source");
    w.string(kernel.source);
    w.endObject();
  }
  w.endArray();
  w.key("mesh");
  w.beginObject();
  w.key("dp");
  w.integer(bundle.mesh.dp);
  w.key("pp");
  w.integer(bundle.mesh.pp);
  w.key("tp");
  w.integer(bundle.mesh.tp);
  w.endObject();
  w.key("model");
  w.beginObject();
  w.key("family");
  w.string(bundle.model.family);
  w.key("name");
  w.string(bundle.model.name);
  w.endObject();
  w.key("parameters");
  w.beginArray();
  for (const Parameter &param : bundle.parameters)
    writeParameter(w, param);
  w.endArray();
  w.key("prediction");
  w.beginObject();
  w.key("mfu");
  w.number(bundle.prediction.mfu);
  w.key("peak_memory_bytes");
  writeIntegers(w, bundle.prediction.peakMemoryBytes);
  w.key("step_time_s");
  w.number(bundle.prediction.stepTimeS);
  w.endObject();
  w.key("programs");
  w.beginArray();
  for (const StoredProgram &program : stored)
    writeProgram(w, bundle, program);
  w.endArray();
  w.key("rank_roles");
  writeIntegers(w, bundle.rankRoles);
  w.key("training");
  writeTraining(w, bundle.training);
  w.endObject();
}

//===----------------------------------------------------------------------===//
// Stored programs
//===----------------------------------------------------------------------===//

namespace {

bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool sameBuffer(const Buffer &a, const Buffer &b) {
  return a.id == b.id && a.name == b.name && a.region == b.region &&
         a.offset == b.offset && a.size == b.size && a.dtype == b.dtype &&
         a.alignment == b.alignment;
}

/// Equal in everything but the instructions' fields other than the opcode.
bool sameSkeleton(const Program &a, const Program &b) {
  if (a.numEvents != b.numEvents || a.arenaBytes != b.arenaBytes ||
      a.persistentBytes != b.persistentBytes || a.hostBytes != b.hostBytes ||
      a.buffers.size() != b.buffers.size() ||
      a.streams.size() != b.streams.size())
    return false;
  for (size_t i = 0; i < a.buffers.size(); ++i)
    if (!sameBuffer(a.buffers[i], b.buffers[i]))
      return false;
  for (size_t s = 0; s < a.streams.size(); ++s) {
    const Stream &x = a.streams[s], &y = b.streams[s];
    if (x.name != y.name || x.instructions.size() != y.instructions.size())
      return false;
    for (size_t i = 0; i < x.instructions.size(); ++i)
      if (x.instructions[i].opcode != y.instructions[i].opcode)
        return false;
  }
  return true;
}

/// A cheap digest of the skeleton, so most comparisons are skipped.
uint64_t skeletonDigest(const Program &program) {
  uint64_t digest = 1469598103934665603ull;
  auto mix = [&](uint64_t value) {
    digest = (digest ^ value) * 1099511628211ull;
  };
  mix(uint64_t(program.numEvents));
  mix(uint64_t(program.arenaBytes));
  mix(uint64_t(program.persistentBytes));
  mix(uint64_t(program.hostBytes));
  mix(program.buffers.size());
  for (const Buffer &buffer : program.buffers) {
    mix(uint64_t(buffer.offset));
    mix(uint64_t(buffer.size));
  }
  mix(program.streams.size());
  for (const Stream &stream : program.streams) {
    mix(std::hash<std::string>()(stream.name));
    mix(stream.instructions.size());
    for (const Instruction &inst : stream.instructions)
      mix(uint64_t(inst.opcode));
  }
  return digest;
}

} // namespace

bool weft::plan::detail::sameInstruction(const Instruction &a,
                                         const Instruction &b) {
  if (a.opcode != b.opcode || a.reads != b.reads || a.writes != b.writes ||
      a.phase != b.phase)
    return false;
  switch (a.opcode) {
  case Opcode::Kernel:
    return a.kernel == b.kernel && a.args == b.args;
  case Opcode::Gemm:
    return a.gemm.transA == b.gemm.transA && a.gemm.transB == b.gemm.transB &&
           a.gemm.m == b.gemm.m && a.gemm.n == b.gemm.n &&
           a.gemm.k == b.gemm.k && a.gemm.lda == b.gemm.lda &&
           a.gemm.ldb == b.gemm.ldb && a.gemm.ldc == b.gemm.ldc &&
           sameBits(a.gemm.alpha, b.gemm.alpha) &&
           sameBits(a.gemm.beta, b.gemm.beta) && a.dtype == b.dtype &&
           a.epilogue == b.epilogue && a.epilogueKernels == b.epilogueKernels;
  case Opcode::LoadBatch:
    return a.microbatch == b.microbatch;
  case Opcode::Fill:
    return sameBits(a.value, b.value) && a.dtype == b.dtype;
  case Opcode::AllReduce:
  case Opcode::ReduceScatter:
    return a.group == b.group && a.count == b.count && a.dtype == b.dtype &&
           a.reduce == b.reduce;
  case Opcode::AllGather:
    return a.group == b.group && a.count == b.count && a.dtype == b.dtype;
  case Opcode::Broadcast:
  case Opcode::Send:
  case Opcode::Recv:
    return a.group == b.group && a.count == b.count && a.dtype == b.dtype &&
           a.peer == b.peer;
  case Opcode::RecordEvent:
  case Opcode::WaitEvent:
    return a.event == b.event;
  case Opcode::OptimizerStep:
    return a.count == b.count && a.dtype == b.dtype;
  case Opcode::GradNorm:
  case Opcode::Clip:
    return a.dtype == b.dtype;
  case Opcode::Copy:
  case Opcode::Release:
    return true;
  }
  return false;
}

std::vector<StoredProgram> weft::plan::storedPrograms(const Bundle &bundle) {
  std::vector<StoredProgram> stored;
  std::vector<uint64_t> digests;
  for (size_t role = 0; role < bundle.programs.size(); ++role) {
    const Program &program = bundle.programs[role];
    uint64_t digest = skeletonDigest(program);
    size_t g = 0;
    while (g < stored.size() &&
           !(digests[g] == digest &&
             sameSkeleton(bundle.programs[stored[g].roles.front()], program)))
      ++g;
    if (g == stored.size()) {
      stored.emplace_back();
      digests.push_back(digest);
    }
    stored[g].roles.push_back(int64_t(role));
  }
  for (StoredProgram &group : stored) {
    const Program &first = bundle.programs[group.roles.front()];
    group.perRole.resize(first.streams.size());
    for (size_t s = 0; s < first.streams.size(); ++s) {
      const std::vector<Instruction> &insts = first.streams[s].instructions;
      std::vector<bool> &perRole = group.perRole[s];
      perRole.assign(insts.size(), false);
      for (size_t k = 1; k < group.roles.size(); ++k) {
        const std::vector<Instruction> &other =
            bundle.programs[group.roles[k]].streams[s].instructions;
        for (size_t i = 0; i < insts.size(); ++i)
          if (!perRole[i] && !sameInstruction(insts[i], other[i]))
            perRole[i] = true;
      }
    }
  }
  return stored;
}

std::string weft::plan::manifestText(const Bundle &bundle, int indent,
                                     const std::string &contentHash) {
  CanonicalWriter writer(indent);
  writeManifest(writer, bundle, storedPrograms(bundle), contentHash);
  return writer.take();
}

std::string weft::plan::contentHash(const Bundle &bundle) {
  Sha256 hasher;
  CanonicalWriter writer(-1, &hasher);
  writeManifest(writer, bundle, storedPrograms(bundle), {});
  writer.take();
  return detail::finishContentHash(hasher, bundle.files);
}
