//===- Reshard.cpp - Checkpoints as global tensors, in any layout ---------===//
//
// Reading: each rank file is read whole (and checksummed) once; every
// ShardSpec of the rank's role is scattered into the global fp32 tensors,
// with the AdamW moments found beside the parameter by locateOptimizerState.
// Replicas must agree bit for bit and every element must be covered, so a
// plan whose shard specs are misread fails loudly instead of producing a
// wrong model. Writing: every ShardSpec of the target bundle is gathered back
// out of the global tensors into a zeroed persistent region per rank.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Reshard.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"
#include "weft/exec/StateGroups.h"
#include "weft/kernels/Common.h"
#include "weft/plan/Serialize.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sstream>
#include <unistd.h>

namespace weft::exec {

std::optional<OptimizerStateLocation>
locateOptimizerState(const plan::Program &program, int64_t buffer,
                     int64_t offset, int64_t bytes) {
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions) {
      if (inst.opcode != plan::Opcode::OptimizerStep || inst.reads.size() < 4)
        continue;
      const plan::BufferRange &param = inst.reads[0];
      if (param.buffer != buffer || offset < param.offset ||
          offset + bytes > param.offset + param.bytes)
        continue;
      int64_t delta = offset - param.offset; // all operands are f32
      return OptimizerStateLocation{
          inst.reads[2].buffer, inst.reads[2].offset + delta,
          inst.reads[3].buffer, inst.reads[3].offset + delta};
    }
  return std::nullopt;
}

namespace {

using plan::Bundle;
using plan::DType;
using plan::Parameter;
using plan::ShardSpec;

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

float loadElement(const std::byte *p, DType dtype) {
  switch (dtype) {
  case DType::BF16: {
    kernels::BF16 half;
    std::memcpy(&half, p, 2);
    return kernels::bf16ToFloat(half);
  }
  case DType::F16: {
    kernels::F16 half;
    std::memcpy(&half, p, 2);
    return kernels::f16ToFloat(half);
  }
  case DType::F64: {
    double value;
    std::memcpy(&value, p, 8);
    return float(value);
  }
  default: {
    float value;
    std::memcpy(&value, p, 4);
    return value;
  }
  }
}

void storeElement(std::byte *p, DType dtype, float value) {
  switch (dtype) {
  case DType::BF16: {
    kernels::BF16 half = kernels::floatToBf16(value);
    std::memcpy(p, &half, 2);
    break;
  }
  case DType::F16: {
    kernels::F16 half = kernels::floatToF16(value);
    std::memcpy(p, &half, 2);
    break;
  }
  case DType::F64: {
    double wide = value;
    std::memcpy(p, &wide, 8);
    break;
  }
  default:
    std::memcpy(p, &value, 4);
    break;
  }
}

/// A ShardSpec's geometry: the slice along `dim`, flattened row-major, padded
/// to padded_elements and split over zero_shards DP ranks.
struct Slice {
  int64_t extent = 1, inner = 1, start = 0, length = 1;
  int64_t elements = 0; // of the slice, before padding
  int64_t chunk = 0;    // elements one rank holds
  int64_t zeroShards = 1;

  /// The first slice element a rank with DP index `dp` holds.
  int64_t first(int64_t dp) const { return zeroShards == 1 ? 0 : dp * chunk; }
  /// Global row-major index of slice element `i`; -1 for padding (ZeRO
  /// padding, or rows past the global extent: vocabulary padding).
  int64_t global(int64_t i) const {
    if (i >= elements)
      return -1;
    int64_t outer = i / (length * inner), rest = i % (length * inner);
    int64_t row = start + rest / inner;
    if (row >= extent)
      return -1;
    return (outer * extent + row) * inner + rest % inner;
  }
};

/// The spec's geometry, checked against the parameter and its buffer.
Slice sliceOf(const Bundle &bundle, const std::string &planPath,
              const Parameter &param, const ShardSpec &spec) {
  auto fail = [&](const std::string &why) {
    throw Error(planPath + ": parameter '" + param.name + "': " + why);
  };
  if (spec.role < 0 || size_t(spec.role) >= bundle.programs.size())
    fail("shard of unknown role " + std::to_string(spec.role));
  const plan::Program &program = bundle.programs[size_t(spec.role)];
  if (spec.buffer < 0 || size_t(spec.buffer) >= program.buffers.size())
    fail("shard in unknown buffer " + std::to_string(spec.buffer));
  const plan::Buffer &buffer = program.buffers[size_t(spec.buffer)];
  if (buffer.dtype != DType::F32 && buffer.dtype != DType::BF16 &&
      buffer.dtype != DType::F16 && buffer.dtype != DType::F64)
    fail("shard in a " + std::string(plan::toString(buffer.dtype)) +
         " buffer (f32, bf16, f16 and f64 are read)");
  int64_t ndim = int64_t(param.shape.size());
  if (spec.dim < -1 || spec.dim >= ndim ||
      (spec.dim >= 0 && (spec.length <= 0 || spec.start < 0 ||
                         spec.start >= param.shape[size_t(spec.dim)])))
    fail("shard slice dim " + std::to_string(spec.dim) + " [" +
         std::to_string(spec.start) + ", +" + std::to_string(spec.length) +
         ") outside the tensor");
  if (spec.zeroShards != 1 && spec.zeroShards != bundle.mesh.dp)
    fail("zero_shards " + std::to_string(spec.zeroShards) +
         " is neither 1 nor the DP degree " + std::to_string(bundle.mesh.dp));
  Slice s;
  s.zeroShards = spec.zeroShards;
  if (spec.dim >= 0) {
    s.extent = param.shape[size_t(spec.dim)];
    s.start = spec.start;
    s.length = spec.length;
    for (size_t d = size_t(spec.dim) + 1; d < param.shape.size(); ++d)
      s.inner *= param.shape[d];
    s.elements = product(param.shape) / s.extent * s.length;
  } else {
    s.inner = product(param.shape);
    s.extent = 1;
    s.elements = s.inner;
  }
  s.chunk = spec.paddedElements / spec.zeroShards;
  if (spec.paddedElements < s.elements ||
      spec.paddedElements % spec.zeroShards != 0 || spec.offset < 0 ||
      spec.offset + s.chunk * plan::elementBytes(buffer.dtype) > buffer.size)
    fail("shard of " + std::to_string(spec.paddedElements) +
         " padded elements does not fit buffer '" + buffer.name + "'");
  return s;
}

/// One shard to read or write, with its optimizer state when it has one.
struct Source {
  const ShardSpec *spec = nullptr;
  Slice slice;
  std::optional<OptimizerStateLocation> state;
};

/// The state a ShardSpec's bytes have in their role's program.
std::optional<OptimizerStateLocation>
stateOf(const Bundle &bundle, const std::string &planPath,
        const Parameter &param, const ShardSpec &spec, const Slice &slice) {
  const plan::Program &program = bundle.programs[size_t(spec.role)];
  const plan::Buffer &buffer = program.buffers[size_t(spec.buffer)];
  int64_t bytes = slice.chunk * plan::elementBytes(buffer.dtype);
  std::optional<OptimizerStateLocation> state =
      locateOptimizerState(program, spec.buffer, spec.offset, bytes);
  if (state) {
    for (int64_t id : {state->expAvgBuffer, state->expAvgSqBuffer}) {
      const plan::Buffer &b = program.buffers[size_t(id)];
      if (buffer.dtype != DType::F32 || b.dtype != DType::F32 ||
          b.region == plan::Region::Arena)
        throw Error(planPath + ": parameter '" + param.name +
                    "': the optimizer_step updating it in role " +
                    std::to_string(spec.role) +
                    " does not keep f32 parameter and moments in persistent "
                    "or host buffers");
    }
  }
  return state;
}

/// Where each persistent or host buffer of each role starts in a rank
/// file's payload (-1: not saved). Full checkpoints hold the persistent
/// region as is, then the host region; a weights snapshot the ranges of
/// weightsSnapshotLayout(), packed in offset order, then its host ranges.
struct PayloadLayout {
  std::vector<std::vector<int64_t>> offsets; // by role, by buffer
  std::vector<int64_t> bytes;                // by role
};

PayloadLayout layOut(const Bundle &bundle, CheckpointContents contents) {
  PayloadLayout layout;
  for (const plan::Program &program : bundle.programs) {
    std::vector<int64_t> offsets(program.buffers.size(), -1);
    int64_t bytes = program.persistentBytes + program.hostBytes;
    if (contents == CheckpointContents::Full) {
      for (const plan::Buffer &b : program.buffers)
        if (b.region == plan::Region::Persistent)
          offsets[size_t(b.id)] = b.offset;
        else if (b.region == plan::Region::Host)
          offsets[size_t(b.id)] = program.persistentBytes + b.offset;
    } else {
      StateGroupLayout params = weightsSnapshotLayout(bundle, program);
      bytes = 0;
      auto pack = [&](const std::vector<ByteRange> &ranges,
                      plan::Region region) {
        for (const ByteRange &r : ranges) {
          for (int64_t id : params.buffers) {
            const plan::Buffer &b = program.buffers[size_t(id)];
            if (b.region == region && b.offset >= r.offset &&
                b.offset + b.size <= r.offset + r.bytes)
              offsets[size_t(id)] = bytes + (b.offset - r.offset);
          }
          bytes += r.bytes;
        }
      };
      pack(params.ranges, plan::Region::Persistent);
      pack(params.hostRanges, plan::Region::Host);
    }
    layout.offsets.push_back(std::move(offsets));
    layout.bytes.push_back(bytes);
  }
  return layout;
}

/// The seed in a checked rank file's header (docs/runtime.md, rank-file
/// header: u64 at byte 96).
uint64_t headerSeed(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  uint8_t bytes[8] = {};
  bool ok = fd >= 0 && ::pread(fd, bytes, 8, 96) == 8;
  if (fd >= 0)
    ::close(fd);
  if (!ok)
    throw Error(path + ": cannot read the header: " + std::strerror(errno));
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i)
    seed |= uint64_t(bytes[i]) << (8 * i);
  return seed;
}

/// A global tensor being filled, with what each element has received.
struct Assembly {
  GlobalTensor *tensor = nullptr;
  std::vector<bool> covered, stateCovered;
  std::vector<std::vector<Source>> byRole;
};

} // namespace

GlobalState readGlobalState(const Bundle &bundle, const std::string &bundleDir,
                            const std::string &stepDir, bool moments) {
  const std::string planPath = bundleDir + "/plan.json";
  std::string hash = plan::contentHash(bundle);
  int64_t world = bundle.mesh.worldSize();
  // A directory without the marker is a save that did not finish (or a
  // leftover): its files may be missing or half-written.
  if (!isCommittedCheckpoint(stepDir))
    throw Error(stepDir + ": not a committed checkpoint (no COMPLETE "
                          "marker: its save did not finish)");
  Manifest manifest = loadManifest(stepDir, hash, int(world));
  GlobalState state;
  state.step = manifest.step;
  state.dataSamples = manifest.step * bundle.training.globalBatch;
  state.lossScale = manifest.lossScale;
  state.data = manifest.data;
  state.weightsOnly = manifest.contents == CheckpointContents::Weights;
  if (moments && state.weightsOnly)
    throw Error(stepDir + "/manifest.json: a weights snapshot (parameters "
                          "only) holds no optimizer state; use a step-<N> "
                          "checkpoint");
  PayloadLayout layout = layOut(bundle, manifest.contents);

  // Per parameter and role, the shards to read: those the optimizer updates
  // (the master, with the moments beside them) when the checkpoint holds
  // them, else the working copies (a weights snapshot).
  state.tensors.resize(bundle.parameters.size());
  std::vector<Assembly> assemblies(bundle.parameters.size());
  for (size_t p = 0; p < bundle.parameters.size(); ++p) {
    const Parameter &param = bundle.parameters[p];
    if (param.shards.empty())
      throw Error(planPath + ": parameter '" + param.name +
                  "': no shard holds it");
    Assembly &a = assemblies[p];
    a.tensor = &state.tensors[p];
    a.tensor->param = &param;
    std::vector<std::vector<Source>> owned(bundle.programs.size()),
        copies(bundle.programs.size());
    for (const ShardSpec &spec : param.shards) {
      Slice slice = sliceOf(bundle, planPath, param, spec);
      if (layout.offsets[size_t(spec.role)][size_t(spec.buffer)] < 0)
        continue; // arena, or not in a weights snapshot
      Source source{&spec, slice,
                    stateOf(bundle, planPath, param, spec, slice)};
      if (source.state && !state.weightsOnly)
        owned[size_t(spec.role)].push_back(source);
      else
        copies[size_t(spec.role)].push_back(source);
    }
    a.byRole.resize(bundle.programs.size());
    for (size_t r = 0; r < a.byRole.size(); ++r)
      a.byRole[r] = owned[r].empty() ? copies[r] : owned[r];
    size_t elements = size_t(product(param.shape));
    a.tensor->value.assign(elements, 0.0f);
    a.covered.assign(elements, false);
    if (moments) {
      a.tensor->expAvg.assign(elements, 0.0f);
      a.tensor->expAvgSq.assign(elements, 0.0f);
      a.stateCovered.assign(elements, false);
    }
  }

  // Replicas (DP, TP-replicated parameters, tied copies) must agree.
  auto put = [](float &slot, bool covered, float value, const std::string &file,
                const Parameter &param, const char *what, int64_t global) {
    if (covered && std::memcmp(&slot, &value, 4) != 0)
      throw Error(file + ": parameter '" + param.name + "' " + what +
                  " element " + std::to_string(global) +
                  " differs between replicas");
    slot = value;
  };
  std::vector<std::byte> payload;
  for (int64_t rank = 0; rank < world; ++rank) {
    int64_t role = plan::rankToRole(bundle, rank);
    const plan::Program &program = bundle.programs[size_t(role)];
    RankFileInfo expected;
    expected.bundleHash = hash;
    // A weights snapshot's DP replicas may share their writer's file.
    expected.rank = manifest.writers[size_t(rank)];
    expected.worldSize = int32_t(world);
    expected.step = manifest.step;
    expected.dataSamples = state.dataSamples;
    expected.payloadBytes = layout.bytes[size_t(role)];
    std::string file = stepDir + "/" + manifest.files[size_t(rank)];
    payload.resize(size_t(expected.payloadBytes));
    readRankFile(file, expected, manifest.results[size_t(rank)],
                 payload.data());
    if (rank == 0)
      state.seed = headerSeed(file);
    int64_t dp = bundle.mesh.coordOf(rank).dp;
    const std::vector<int64_t> &offsets = layout.offsets[size_t(role)];
    for (Assembly &a : assemblies) {
      const Parameter &param = *a.tensor->param;
      for (const Source &source : a.byRole[size_t(role)]) {
        const ShardSpec &spec = *source.spec;
        const plan::Buffer &buffer = program.buffers[size_t(spec.buffer)];
        int64_t bytes = plan::elementBytes(buffer.dtype);
        const std::byte *base =
            payload.data() + offsets[size_t(spec.buffer)] + spec.offset;
        const std::byte *m = nullptr, *v = nullptr;
        if (moments && source.state) {
          m = payload.data() + offsets[size_t(source.state->expAvgBuffer)] +
              source.state->expAvgOffset;
          v = payload.data() + offsets[size_t(source.state->expAvgSqBuffer)] +
              source.state->expAvgSqOffset;
        }
        int64_t first = source.slice.first(dp);
        for (int64_t k = 0; k < source.slice.chunk; ++k) {
          int64_t global = source.slice.global(first + k);
          if (global < 0)
            continue;
          size_t g = size_t(global);
          put(a.tensor->value[g], a.covered[g],
              loadElement(base + k * bytes, buffer.dtype), file, param, "value",
              global);
          a.covered[g] = true;
          if (m) {
            float mv, vv;
            std::memcpy(&mv, m + k * 4, 4);
            std::memcpy(&vv, v + k * 4, 4);
            put(a.tensor->expAvg[g], a.stateCovered[g], mv, file, param,
                "exp_avg", global);
            put(a.tensor->expAvgSq[g], a.stateCovered[g], vv, file, param,
                "exp_avg_sq", global);
            a.stateCovered[g] = true;
          }
        }
      }
    }
  }
  for (Assembly &a : assemblies)
    for (size_t i = 0; i < a.covered.size(); ++i) {
      if (!a.covered[i])
        throw Error(planPath + ": parameter '" + a.tensor->param->name +
                    "': element " + std::to_string(i) +
                    " is held by no rank's shard");
      if (moments && !a.stateCovered[i])
        throw Error(planPath + ": parameter '" + a.tensor->param->name +
                    "': element " + std::to_string(i) +
                    " has no AdamW state in any rank's shard (no "
                    "optimizer_step updates it)");
    }
  return state;
}

//===----------------------------------------------------------------------===//
// Writing a checkpoint for another bundle
//===----------------------------------------------------------------------===//

namespace {

void checkSameModel(const Bundle &from, const std::string &fromDir,
                    const Bundle &to, const std::string &toDir) {
  std::map<std::string, const Parameter *> old;
  for (const Parameter &param : from.parameters)
    old[param.name] = &param;
  const std::string where = toDir + "/plan.json: ";
  for (const Parameter &param : to.parameters) {
    auto it = old.find(param.name);
    if (it == old.end())
      throw Error(where + "parameter '" + param.name +
                  "' is not in the checkpoint's bundle " + fromDir +
                  " (a different model)");
    if (it->second->shape != param.shape)
      throw Error(
          where + "parameter '" + param.name + "' has shape " +
          shapeText(param.shape) + " but " + shapeText(it->second->shape) +
          " in the checkpoint's bundle " + fromDir + " (a different model)");
    old.erase(it);
  }
  if (!old.empty())
    throw Error(fromDir + "/plan.json: parameter '" + old.begin()->first +
                "' of the checkpoint is not in " + toDir +
                " (a different model)");
  const plan::TrainingInfo &a = from.training, &b = to.training;
  if (a.globalBatch != b.globalBatch || a.seqLen != b.seqLen)
    throw Error(
        where + "global batch " + std::to_string(b.globalBatch) + " x " +
        std::to_string(b.seqLen) + " tokens differs from the checkpoint's " +
        std::to_string(a.globalBatch) + " x " + std::to_string(a.seqLen) +
        " (the data position is step x global batch)");
}

std::vector<std::string> trainingNotes(const plan::TrainingInfo &a,
                                       const plan::TrainingInfo &b) {
  std::vector<std::string> notes;
  auto number = [&](const char *name, double x, double y) {
    if (x != y) {
      std::ostringstream text;
      text << name << " " << x << " -> " << y;
      notes.push_back(text.str());
    }
  };
  if (a.precision != b.precision)
    notes.push_back("precision " + a.precision + " -> " + b.precision);
  number("lr", a.lr, b.lr);
  number("min_lr", a.minLr, b.minLr);
  number("warmup_steps", double(a.warmupSteps), double(b.warmupSteps));
  number("decay_steps", double(a.decaySteps), double(b.decaySteps));
  number("weight_decay", a.weightDecay, b.weightDecay);
  number("beta1", a.beta1, b.beta1);
  number("beta2", a.beta2, b.beta2);
  number("eps", a.eps, b.eps);
  number("grad_clip", a.gradClip, b.gradClip);
  number("loss_scale.initial", a.lossScale.initial, b.lossScale.initial);
  return notes;
}

void writeSmallFile(const std::string &path, const std::string &text) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  bool ok = file &&
            std::fwrite(text.data(), 1, text.size(), file) == text.size() &&
            std::fflush(file) == 0 && ::fsync(fileno(file)) == 0;
  if (file && std::fclose(file) != 0)
    ok = false;
  if (!ok)
    throw Error(path + ": cannot write");
}

} // namespace

ReshardStats reshardCheckpoint(const Bundle &from, const std::string &fromDir,
                               const std::string &stepDir, const Bundle &to,
                               const std::string &toDir,
                               const std::string &outDir) {
  namespace fs = std::filesystem;
  checkSameModel(from, fromDir, to, toDir);
  const std::string planPath = toDir + "/plan.json";
  // Every target shard is checked before anything is read or written.
  std::map<std::string, const GlobalTensor *> byName;
  std::vector<std::vector<std::pair<size_t, Source>>> plan(to.programs.size());
  for (size_t p = 0; p < to.parameters.size(); ++p)
    for (const ShardSpec &spec : to.parameters[p].shards) {
      const Parameter &param = to.parameters[p];
      Slice slice = sliceOf(to, planPath, param, spec);
      if (to.programs[size_t(spec.role)].buffers[size_t(spec.buffer)].region ==
          plan::Region::Arena)
        continue; // a gathered copy, rebuilt by the step
      plan[size_t(spec.role)].push_back(
          {p, Source{&spec, slice, stateOf(to, planPath, param, spec, slice)}});
    }

  GlobalState state = readGlobalState(from, fromDir, stepDir, true);
  for (const GlobalTensor &tensor : state.tensors)
    byName[tensor.param->name] = &tensor;

  ReshardStats stats;
  stats.step = state.step;
  stats.parameters = int64_t(state.tensors.size());
  for (const GlobalTensor &tensor : state.tensors)
    stats.elements += int64_t(tensor.value.size());
  stats.notes = trainingNotes(from.training, to.training);
  // The dynamic loss scaler carries over; a plan that starts scaling
  // dynamically starts from its initial scale, with every step so far
  // counted as an applied AdamW update (bias correction).
  std::optional<LossScaleState> lossScale;
  if (to.training.lossScale.dynamic) {
    lossScale = state.lossScale.value_or(
        LossScaleState{to.training.lossScale.initial, 0, state.step});
  } else if (state.lossScale && state.lossScale->optimizerSteps != state.step) {
    stats.notes.push_back(
        "loss scaling: " +
        std::to_string(state.step - state.lossScale->optimizerSteps) +
        " skipped steps are counted as updates from here on (the new plan's "
        "bias correction follows the step number)");
  }
  const std::string name = "step-" + std::to_string(state.step);
  const std::string final = outDir + "/" + name, tmp = final + ".tmp";
  stats.dir = final;

  // Test hook: WEFT_TEST_RESHARD_DROP_MOMENTS=1 writes zero moments, so the
  // e2e test can show that a resume without the optimizer state diverges.
  const char *drop = std::getenv("WEFT_TEST_RESHARD_DROP_MOMENTS");
  bool dropMoments = drop && std::string(drop) == "1";

  std::error_code ec;
  if (fs::exists(final, ec))
    throw Error(final + ": already exists (weft-reshard never replaces a "
                        "checkpoint; choose another output directory)");
  bool createdOut = !fs::exists(outDir, ec);
  fs::create_directories(outDir, ec);
  if (ec)
    throw Error(outDir + ": cannot create: " + ec.message());
  fs::remove_all(tmp, ec);
  if (ec || !fs::create_directory(tmp, ec))
    throw Error(tmp + ": cannot create: " + ec.message());
  try {
    std::string hash = plan::contentHash(to);
    int64_t world = to.mesh.worldSize();
    Manifest manifest;
    manifest.step = state.step;
    manifest.lossScale = lossScale;
    manifest.data = state.data;
    manifest.worldSize = int32_t(world);
    manifest.bundleHash = hash;
    std::vector<std::byte> payload;
    for (int64_t rank = 0; rank < world; ++rank) {
      int64_t role = plan::rankToRole(to, rank);
      const plan::Program &program = to.programs[size_t(role)];
      int64_t dp = to.mesh.coordOf(rank).dp;
      // Everything but parameters and moments starts at zero, as in a fresh
      // session. The payload is the persistent region, then the host region.
      payload.assign(size_t(program.persistentBytes + program.hostBytes),
                     std::byte{0});
      auto at = [&](int64_t id) {
        const plan::Buffer &b = program.buffers[size_t(id)];
        return payload.data() + b.offset +
               (b.region == plan::Region::Host ? program.persistentBytes : 0);
      };
      for (const auto &[p, source] : plan[size_t(role)]) {
        const GlobalTensor &tensor = *byName.at(to.parameters[p].name);
        const ShardSpec &spec = *source.spec;
        const plan::Buffer &buffer = program.buffers[size_t(spec.buffer)];
        int64_t bytes = plan::elementBytes(buffer.dtype);
        std::byte *base = at(spec.buffer) + spec.offset;
        std::byte *m = nullptr, *v = nullptr;
        if (source.state && !dropMoments) {
          m = at(source.state->expAvgBuffer) + source.state->expAvgOffset;
          v = at(source.state->expAvgSqBuffer) + source.state->expAvgSqOffset;
        }
        int64_t first = source.slice.first(dp);
        for (int64_t k = 0; k < source.slice.chunk; ++k) {
          int64_t global = source.slice.global(first + k);
          float value = 0, mv = 0, vv = 0; // padding stays zero
          if (global >= 0) {
            value = tensor.value[size_t(global)];
            mv = tensor.expAvg[size_t(global)];
            vv = tensor.expAvgSq[size_t(global)];
          }
          storeElement(base + k * bytes, buffer.dtype, value);
          if (m) {
            std::memcpy(m + k * 4, &mv, 4);
            std::memcpy(v + k * 4, &vv, 4);
          }
        }
      }
      RankFileInfo info;
      info.bundleHash = hash;
      info.rank = int32_t(rank);
      info.worldSize = int32_t(world);
      info.step = state.step;
      info.seed = state.seed;
      info.dataSamples = state.step * to.training.globalBatch;
      info.payloadBytes = program.persistentBytes + program.hostBytes;
      std::string file = "rank-" + std::to_string(rank) + ".bin";
      RankFileResult result =
          writeRankFile(tmp + "/" + file, info, payload.data());
      manifest.files.push_back(file);
      manifest.results.push_back(result);
      stats.bytes += result.fileBytes;
      ++stats.ranks;
    }
    writeSmallFile(tmp + "/manifest.json", manifestJson(manifest));
    syncPath(tmp);
    fs::rename(tmp, final, ec);
    if (ec)
      throw Error(final + ": cannot commit the checkpoint: " + ec.message());
    syncPath(outDir);
    writeSmallFile(final + "/COMPLETE", name + "\n");
    syncPath(final);
  } catch (...) {
    fs::remove_all(tmp, ec);
    fs::remove_all(final, ec); // renamed but unmarked: not a checkpoint
    if (createdOut)
      fs::remove(outDir, ec); // only if empty
    throw;
  }
  return stats;
}

} // namespace weft::exec
