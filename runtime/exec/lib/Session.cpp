//===- Session.cpp - Loading, validating and replaying a plan on one rank -===//
//
// The scheduler is single-threaded and deterministic: it visits the streams
// round-robin and advances each until it must wait for an event or for a
// pending communication, so runs are bit-reproducible. Communication is
// non-blocking MPI on one communicator per (group, stream name) and one per
// stream name for point-to-point, which is exactly how the plan format
// matches operations; the verifier guarantees this cannot deadlock.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Session.h"
#include "Describe.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/kernels/Common.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Verifier.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>

namespace weft::exec {

using plan::DType;
using plan::Instruction;
using plan::Opcode;

//===----------------------------------------------------------------------===//
// Schedule and initialization
//===----------------------------------------------------------------------===//

double learningRate(const plan::TrainingInfo &t, int64_t step) {
  if (step <= t.warmupSteps)
    return t.lr * double(step) / double(t.warmupSteps);
  if (step >= t.decaySteps)
    return t.decaySteps > t.warmupSteps ? t.minLr : t.lr;
  double progress =
      double(step - t.warmupSteps) / double(t.decaySteps - t.warmupSteps);
  return t.minLr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (t.lr - t.minLr);
}

namespace {

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string &text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text)
    hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

} // namespace

double initialValue(uint64_t seed, const plan::Parameter &param,
                    int64_t index) {
  if (param.init.kind == "zeros")
    return 0;
  if (param.init.kind == "ones")
    return 1;
  // Box-Muller over two counter-based uniforms in (0, 1].
  uint64_t key = splitMix64(seed ^ fnv1a(param.name)) + 2 * uint64_t(index);
  double u1 = (double(splitMix64(key) >> 11) + 1.0) * 0x1.0p-53;
  double u2 = double(splitMix64(key + 1) >> 11) * 0x1.0p-53;
  return param.init.std * std::sqrt(-2.0 * std::log(u1)) *
         std::cos(2.0 * M_PI * u2);
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

namespace {

template <typename Combine>
void combineBf16(void *in, void *inout, int *len, Combine combine) {
  auto *a = static_cast<const kernels::BF16 *>(in);
  auto *b = static_cast<kernels::BF16 *>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = kernels::floatToBf16(
        combine(kernels::bf16ToFloat(a[i]), kernels::bf16ToFloat(b[i])));
}
void bf16Sum(void *in, void *inout, int *len, MPI_Datatype *) {
  combineBf16(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16Max(void *in, void *inout, int *len, MPI_Datatype *) {
  combineBf16(in, inout, len, [](float x, float y) { return std::max(x, y); });
}
void bf16Min(void *in, void *inout, int *len, MPI_Datatype *) {
  combineBf16(in, inout, len, [](float x, float y) { return std::min(x, y); });
}

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::U8:
    return MPI_UINT8_T;
  case DType::F16:
  case DType::BF16:
  case DType::U16:
    return MPI_UINT16_T; // half types move as bits; bf16 reduces via user ops
  }
  return MPI_BYTE;
}

double now() { return MPI_Wtime(); }

} // namespace

struct Session::Comms {
  std::map<std::pair<int64_t, std::string>, MPI_Comm> collective;
  std::map<std::string, MPI_Comm> p2p;
  MPI_Comm stats = MPI_COMM_NULL;
  MPI_Op bf16Ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

  ~Comms() {
    for (auto &[key, comm] : collective)
      MPI_Comm_free(&comm);
    for (auto &[key, comm] : p2p)
      MPI_Comm_free(&comm);
    if (stats != MPI_COMM_NULL)
      MPI_Comm_free(&stats);
    for (MPI_Op &op : bf16Ops)
      if (op != MPI_OP_NULL)
        MPI_Op_free(&op);
  }
};

/// An instruction resolved at open: operand memory, MPI arguments.
struct Session::Prepared {
  std::vector<Operand> reads;
  std::vector<Operand> writes;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  int peer = -1; // send/recv: world rank; broadcast: group-relative root
};

//===----------------------------------------------------------------------===//
// Opening
//===----------------------------------------------------------------------===//

Session::Session() = default;

Session::~Session() = default;

std::unique_ptr<Session> Session::open(const Options &options, MPI_Comm world) {
  std::unique_ptr<Session> session(new Session());
  session->options_ = options;
  session->setUp(world);
  return session;
}

void Session::setUp(MPI_Comm world) {
  world_ = world;
  MPI_Comm_rank(world, &rank_);
  MPI_Comm_size(world, &worldSize_);
  openTime_ = now();

  std::string failure;
  try {
    validateLocally();
  } catch (const std::exception &error) {
    failure = error.what();
  }
  agree(failure, world);

  buildCommunicators();
  const plan::Program &program = *rankProgram_.program;
  if (!persistent_) // resumeLocally() already holds the checkpoint's bytes
    persistent_ = backend_->allocateRegion(plan::Region::Persistent,
                                           program.persistentBytes);
  arena_ = backend_->allocateRegion(plan::Region::Arena, program.arenaBytes);
  if (!resumed_)
    initializeParameters();
  prepareInstructions();
}

void Session::agree(const std::string &localFailure, MPI_Comm comm) const {
  // The lowest failing rank's message goes to all.
  int firstFailing = localFailure.empty() ? worldSize_ : rank_;
  MPI_Allreduce(MPI_IN_PLACE, &firstFailing, 1, MPI_INT, MPI_MIN, comm);
  if (firstFailing == worldSize_)
    return;
  std::string failure = localFailure;
  int length = int(failure.size());
  MPI_Bcast(&length, 1, MPI_INT, firstFailing, comm);
  failure.resize(size_t(length));
  MPI_Bcast(failure.data(), length, MPI_CHAR, firstFailing, comm);
  if (firstFailing != 0)
    failure = "rank " + std::to_string(firstFailing) + ": " + failure;
  throw Error(failure);
}

void Session::validateLocally() {
  if (options_.backend == "cuda")
    throw Error("the cuda backend is not built into this weft-run (CPU only; "
                "see issue 8)");
  if (options_.backend != "cpu")
    throw Error("unknown backend '" + options_.backend +
                "' (expected cpu or cuda)");
  try {
    bundle_ = plan::loadBundle(options_.bundleDir);
    if (options_.verifyPlan)
      plan::verify(bundle_).throwIfFailed();
  } catch (const plan::Error &error) {
    throw Error(error.what());
  }
  const std::string where = options_.bundleDir;
  if (bundle_.mesh.worldSize() != worldSize_)
    throw Error(where + ": the plan needs " +
                std::to_string(bundle_.mesh.worldSize()) + " ranks (dp " +
                std::to_string(bundle_.mesh.dp) + " x pp " +
                std::to_string(bundle_.mesh.pp) + " x tp " +
                std::to_string(bundle_.mesh.tp) + ") but the MPI world has " +
                std::to_string(worldSize_));
  const plan::TrainingInfo &t = bundle_.training;
  if (t.stepsPerPlan != 1)
    throw Error(where + ": steps_per_plan " + std::to_string(t.stepsPerPlan) +
                " is not supported (the runtime replays one step per plan)");
  if (t.lossScale.dynamic)
    throw Error(where + ": dynamic loss scaling (fp16) is not implemented");
  if (t.lossScale.initial <= 0)
    throw Error(where + ": loss_scale.initial must be positive");
  rankProgram_ = plan::expandRankProgram(bundle_, rank_);
  const plan::Program &program = *rankProgram_.program;

  backend_ = makeCpuBackend();
  backend_->prepare(bundle_, program);

  bool loadsData = false;
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const plan::Stream &stream = program.streams[s];
    for (size_t i = 0; i < stream.instructions.size(); ++i) {
      const Instruction &inst = stream.instructions[i];
      std::string at = "role " + std::to_string(program.role) + " " +
                       describeInstruction(program, s, i);
      if (inst.opcode == Opcode::LoadBatch) {
        loadsData = true;
        int64_t bytes = t.microBatch * t.seqLen * 4;
        for (const plan::BufferRange &range : inst.writes)
          if (range.bytes != bytes ||
              program.buffers[range.buffer].dtype != DType::I32)
            throw Error(at + ": load_batch writes i32 ranges of " +
                        std::to_string(bytes) +
                        " bytes (micro_batch x seq_len tokens), got " +
                        std::to_string(range.bytes) + " bytes of " +
                        std::string(plan::toString(
                            program.buffers[range.buffer].dtype)));
      }
      if (plan::isCollective(inst.opcode) ||
          plan::isPointToPoint(inst.opcode)) {
        const plan::Group &group = bundle_.groups[inst.group];
        if (plan::groupIndexOf(group, rank_) < 0)
          throw Error(at + ": group " + std::to_string(inst.group) +
                      " does not contain rank " + std::to_string(rank_));
        if (inst.count > INT_MAX / std::max<int64_t>(1, group.ranks.size()))
          throw Error(at + ": count " + std::to_string(inst.count) +
                      " exceeds what one MPI call moves");
        bool reduces = inst.opcode == Opcode::AllReduce ||
                       inst.opcode == Opcode::ReduceScatter;
        if (reduces && (inst.dtype == DType::F16 || inst.dtype == DType::U16))
          throw Error(at + ": reductions of " +
                      std::string(plan::toString(inst.dtype)) +
                      " are not supported");
      }
    }
  }
  if (loadsData)
    data_ = std::make_unique<DataLoader>(options_.dataPath, t.seqLen,
                                         t.globalBatch);

  for (const plan::Parameter &param : bundle_.parameters)
    for (const plan::ShardSpec &shard : param.shards)
      if (shard.role == rankProgram_.role && shard.zeroShards != 1 &&
          shard.zeroShards != bundle_.mesh.dp)
        throw Error(where + ": parameter '" + param.name + "' has " +
                    std::to_string(shard.zeroShards) +
                    " ZeRO shards; the runtime shards over 1 or dp ranks");
  for (const plan::Buffer &buffer : program.buffers)
    if (buffer.name == "loss") {
      if (buffer.dtype != DType::F32)
        throw Error(where + ": buffer 'loss' must be f32");
      lossBuffer_ = buffer.id;
    }
  bundleHash_ = plan::contentHash(plan::toJson(bundle_), bundle_.files);
  if (!options_.resumeDir.empty())
    resumeLocally();
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

void Session::resumeLocally() {
  double start = now();
  std::optional<std::string> stepDir = newestCheckpoint(options_.resumeDir);
  if (!stepDir)
    throw Error(options_.resumeDir +
                ": no complete checkpoint to resume from (no step-<N> "
                "directory with a COMPLETE marker)");
  Manifest manifest = loadManifest(*stepDir, bundleHash_, worldSize_);
  const plan::Program &program = *rankProgram_.program;
  RankFileInfo expected;
  expected.bundleHash = bundleHash_;
  expected.rank = rank_;
  expected.worldSize = worldSize_;
  expected.step = manifest.step;
  expected.dataSamples = manifest.step * bundle_.training.globalBatch;
  expected.payloadBytes = program.persistentBytes;
  // Read straight into the region; nothing runs on it unless every rank's
  // checksum matched (the agreement in setUp).
  persistent_ = backend_->allocateRegion(plan::Region::Persistent,
                                         program.persistentBytes);
  const RankFileResult &recorded = manifest.results[size_t(rank_)];
  readRankFile(*stepDir + "/" + manifest.files[size_t(rank_)], expected,
               recorded, persistent_);
  completedSteps_ = manifest.step;
  resumed_ = CheckpointStats{*stepDir, manifest.step, recorded.fileBytes,
                             now() - start};
}

namespace {

/// Test hook: WEFT_TEST_CHECKPOINT_CRASH=<point> makes rank 0 die at that
/// point of the commit, as a crash or kill would.
void crashPoint(const char *point) {
  const char *wanted = std::getenv("WEFT_TEST_CHECKPOINT_CRASH");
  if (!wanted || std::strcmp(wanted, point) != 0)
    return;
  std::fprintf(stderr, "weft-run: test hook: crashing %s\n", point);
  std::fflush(stderr);
  std::_Exit(86);
}

void writeSmallFile(const std::string &path, const std::string &text) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file || std::fwrite(text.data(), 1, text.size(), file) != text.size() ||
      std::fflush(file) != 0 || ::fsync(fileno(file)) != 0) {
    if (file)
      std::fclose(file);
    throw Error(path + ": cannot write");
  }
  if (std::fclose(file) != 0)
    throw Error(path + ": cannot write");
}

} // namespace

CheckpointStats Session::saveCheckpoint(const std::string &dir) {
  namespace fs = std::filesystem;
  double start = now();
  MPI_Comm comm = comms_->stats;
  const std::string name = "step-" + std::to_string(completedSteps_);
  const std::string tmp = dir + "/" + name + ".tmp";
  const std::string final = dir + "/" + name;
  auto attempt = [&](auto &&body) {
    std::string failure;
    try {
      body();
    } catch (const std::exception &error) {
      failure = error.what();
    }
    agree(failure, comm);
  };

  // A leftover step-<N>.tmp is an interrupted save of this step: start over.
  attempt([&] {
    if (rank_ != 0)
      return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      throw Error(dir + ": cannot create: " + ec.message());
    fs::remove_all(tmp, ec);
    if (ec || !fs::create_directory(tmp, ec))
      throw Error(tmp + ": cannot create: " + ec.message());
  });

  RankFileInfo info;
  info.bundleHash = bundleHash_;
  info.rank = rank_;
  info.worldSize = worldSize_;
  info.step = completedSteps_;
  info.seed = options_.seed;
  info.dataSamples = completedSteps_ * bundle_.training.globalBatch;
  info.payloadBytes = rankProgram_.program->persistentBytes;
  const std::string file = "rank-" + std::to_string(rank_) + ".bin";
  RankFileResult result;
  attempt([&] { result = writeRankFile(tmp + "/" + file, info, persistent_); });

  int64_t mine[2] = {result.fileBytes, int64_t(result.payloadCrc)};
  std::vector<int64_t> all(rank_ == 0 ? size_t(2 * worldSize_) : 0);
  MPI_Gather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, 0, comm);

  attempt([&] {
    if (rank_ != 0)
      return;
    Manifest manifest;
    manifest.step = completedSteps_;
    manifest.worldSize = worldSize_;
    manifest.bundleHash = bundleHash_;
    for (int r = 0; r < worldSize_; ++r) {
      manifest.files.push_back("rank-" + std::to_string(r) + ".bin");
      manifest.results.push_back(
          {all[size_t(2 * r)], uint32_t(all[size_t(2 * r + 1)])});
    }
    writeSmallFile(tmp + "/manifest.json", manifestJson(manifest));
    syncPath(tmp);
    crashPoint("before-rename");
    // Re-saving a step (a fresh run over an old directory) moves the old
    // copy aside first: rename() cannot replace a non-empty directory.
    std::error_code ec;
    const std::string old = final + ".old";
    fs::remove_all(old, ec);
    if (fs::exists(final, ec))
      fs::rename(final, old, ec);
    if (!ec)
      fs::rename(tmp, final, ec);
    if (ec)
      throw Error(final + ": cannot commit the checkpoint: " + ec.message());
    syncPath(dir);
    crashPoint("before-marker");
    writeSmallFile(final + "/COMPLETE", name + "\n");
    syncPath(final);
    fs::remove_all(old, ec);
  });
  return {final, completedSteps_, result.fileBytes, now() - start};
}

void Session::buildCommunicators() {
  comms_ = std::make_unique<Comms>();
  // Every rank sees the whole bundle, so every rank derives the same list
  // of (group, stream name) channels and calls MPI_Comm_split in the same
  // order, including for channels it is not part of.
  std::set<std::pair<int64_t, std::string>> channels;
  std::set<std::string> p2pStreams;
  for (const plan::Program &program : bundle_.programs)
    for (const plan::Stream &stream : program.streams)
      for (const Instruction &inst : stream.instructions) {
        if (plan::isCollective(inst.opcode))
          channels.insert({inst.group, stream.name});
        else if (plan::isPointToPoint(inst.opcode))
          p2pStreams.insert(stream.name);
      }
  for (const auto &channel : channels) {
    const plan::Group &group = bundle_.groups[channel.first];
    int index = int(plan::groupIndexOf(group, rank_));
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(world_, index >= 0 ? 0 : MPI_UNDEFINED, index, &comm);
    if (comm != MPI_COMM_NULL)
      comms_->collective[channel] = comm;
  }
  for (const std::string &name : p2pStreams)
    MPI_Comm_dup(world_, &comms_->p2p[name]);
  MPI_Comm_dup(world_, &comms_->stats);
  MPI_Op_create(bf16Sum, 1, &comms_->bf16Ops[0]);
  MPI_Op_create(bf16Max, 1, &comms_->bf16Ops[1]);
  MPI_Op_create(bf16Min, 1, &comms_->bf16Ops[2]);
}

void Session::initializeParameters() {
  const plan::Program &program = *rankProgram_.program;
  for (const plan::Parameter &param : bundle_.parameters) {
    for (const plan::ShardSpec &shard : param.shards) {
      if (shard.role != rankProgram_.role)
        continue;
      // The role's slice along `dim`, flattened row-major: element j of the
      // slice is (outer o, index d along dim, inner i) of the global tensor.
      int64_t outer = 1, extent = 1, inner = 1;
      int64_t start = 0, length = 1;
      for (size_t d = 0; d < param.shape.size(); ++d) {
        if (shard.dim < 0 || int64_t(d) > shard.dim)
          inner *= param.shape[d];
        else if (int64_t(d) < shard.dim)
          outer *= param.shape[d];
        else
          extent = param.shape[d];
      }
      if (shard.dim >= 0) {
        start = shard.start;
        length = shard.length;
      }
      int64_t sliceElements = outer * length * inner;
      int64_t part = shard.paddedElements / shard.zeroShards;
      int64_t first = shard.zeroShards == 1 ? 0 : rankProgram_.coord.dp * part;
      const plan::Buffer &buffer = program.buffers[shard.buffer];
      Operand out = this->buffer(buffer.id);
      out.data += shard.offset;
      for (int64_t e = 0; e < part; ++e) {
        int64_t j = first + e;
        double value = 0; // padding
        if (j < sliceElements) {
          int64_t o = j / (length * inner), rest = j % (length * inner);
          int64_t global =
              (o * extent + start + rest / inner) * inner + rest % inner;
          value = initialValue(options_.seed, param, global);
        }
        switch (buffer.dtype) {
        case DType::F64:
          out.as<double>()[e] = value;
          break;
        case DType::BF16:
          out.as<kernels::BF16>()[e] = kernels::floatToBf16(float(value));
          break;
        default:
          out.as<float>()[e] = float(value);
          break;
        }
      }
    }
  }
}

Operand Session::buffer(int64_t id) const {
  const plan::Buffer &buffer = rankProgram_.program->buffers.at(size_t(id));
  std::byte *base =
      buffer.region == plan::Region::Persistent ? persistent_ : arena_;
  return {base + buffer.offset, buffer.size, buffer.dtype};
}

void Session::prepareInstructions() {
  const plan::Program &program = *rankProgram_.program;
  auto resolve = [&](const plan::BufferRange &range) {
    Operand operand = buffer(range.buffer);
    operand.data += range.offset;
    operand.bytes = range.bytes;
    return operand;
  };
  prepared_.resize(program.streams.size());
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const plan::Stream &stream = program.streams[s];
    for (const Instruction &inst : stream.instructions) {
      Prepared p;
      for (const plan::BufferRange &range : inst.reads)
        p.reads.push_back(resolve(range));
      for (const plan::BufferRange &range : inst.writes)
        p.writes.push_back(resolve(range));
      if (plan::isCollective(inst.opcode)) {
        p.comm = comms_->collective.at({inst.group, stream.name});
        p.peer = int(inst.peer);
      } else if (plan::isPointToPoint(inst.opcode)) {
        p.comm = comms_->p2p.at(stream.name);
        p.peer = int(bundle_.groups[inst.group].ranks[size_t(inst.peer)]);
      }
      p.type = mpiType(inst.dtype);
      bool bf16 = inst.dtype == DType::BF16;
      switch (inst.reduce) {
      case plan::ReduceOp::Sum:
        p.op = bf16 ? comms_->bf16Ops[0] : MPI_SUM;
        break;
      case plan::ReduceOp::Max:
        p.op = bf16 ? comms_->bf16Ops[1] : MPI_MAX;
        break;
      case plan::ReduceOp::Min:
        p.op = bf16 ? comms_->bf16Ops[2] : MPI_MIN;
        break;
      }
      prepared_[s].push_back(std::move(p));
    }
  }
  next_.assign(program.streams.size(), 0);
  requests_.assign(program.streams.size(), MPI_REQUEST_NULL);
  issuedAt_.assign(program.streams.size(), 0);
  recorded_.assign(size_t(program.numEvents), 0);
}

//===----------------------------------------------------------------------===//
// Replay
//===----------------------------------------------------------------------===//

void Session::issue(size_t s, size_t index, const StepContext &context) {
  const plan::Program &program = *rankProgram_.program;
  const Instruction &inst = program.streams[s].instructions[index];
  const Prepared &p = prepared_[s][index];
  const plan::TrainingInfo &t = bundle_.training;
  MPI_Request &request = requests_[s];
  int count = int(inst.count);
  int rc = MPI_SUCCESS;
  switch (inst.opcode) {
  case Opcode::RecordEvent:
    recorded_[size_t(inst.event)] = 1;
    return;
  case Opcode::WaitEvent:
  case Opcode::Release: // the arena bytes simply become dead
    return;
  case Opcode::LoadBatch: {
    // This DP rank's rows of micro-batch `microbatch` (see DataLoader.h).
    int64_t firstSlot =
        (rankProgram_.coord.dp * t.gradAccum + inst.microbatch) * t.microBatch;
    data_->read(context.step - 1, firstSlot, t.microBatch,
                p.writes[0].as<int32_t>(),
                p.writes.size() > 1 ? p.writes[1].as<int32_t>() : nullptr);
    return;
  }
  case Opcode::AllReduce: {
    const void *in =
        p.reads[0].data == p.writes[0].data ? MPI_IN_PLACE : p.reads[0].data;
    rc = MPI_Iallreduce(in, p.writes[0].data, count, p.type, p.op, p.comm,
                        &request);
    break;
  }
  case Opcode::ReduceScatter:
    rc = MPI_Ireduce_scatter_block(p.reads[0].data, p.writes[0].data, count,
                                   p.type, p.op, p.comm, &request);
    break;
  case Opcode::AllGather: {
    int index = 0;
    MPI_Comm_rank(p.comm, &index);
    int64_t block = inst.count * plan::elementBytes(inst.dtype);
    const void *in = p.reads[0].data == p.writes[0].data + index * block
                         ? MPI_IN_PLACE
                         : p.reads[0].data;
    rc = MPI_Iallgather(in, count, p.type, p.writes[0].data, count, p.type,
                        p.comm, &request);
    break;
  }
  case Opcode::Broadcast:
    rc = MPI_Ibcast(p.writes[0].data, count, p.type, p.peer, p.comm, &request);
    break;
  case Opcode::Send:
    rc = MPI_Isend(p.reads[0].data, count, p.type, p.peer, 0, p.comm, &request);
    break;
  case Opcode::Recv:
    rc =
        MPI_Irecv(p.writes[0].data, count, p.type, p.peer, 0, p.comm, &request);
    break;
  case Opcode::Clip:
    clipSum_ = double(p.reads[0].as<float>()[0]);
    clipRan_ = true;
    backend_->execute(inst, int64_t(s), p.reads, p.writes, context);
    return;
  default:
    backend_->execute(inst, int64_t(s), p.reads, p.writes, context);
    return;
  }
  if (rc != MPI_SUCCESS)
    throw Error("rank " + std::to_string(rank_) + " " +
                describeInstruction(program, s, index) + ": " +
                std::string(plan::toString(inst.opcode)) + " failed in MPI");
}

void Session::stalled(double waitedS) const {
  const plan::Program &program = *rankProgram_.program;
  std::string message;
  for (size_t s = 0; s < program.streams.size(); ++s) {
    if (next_[s] >= program.streams[s].instructions.size())
      continue;
    const Instruction &inst = program.streams[s].instructions[next_[s]];
    if (!message.empty())
      message += "; ";
    message += describeInstruction(program, s, next_[s]) + ": ";
    if (requests_[s] != MPI_REQUEST_NULL)
      message += std::string(plan::toString(inst.opcode)) + " on group " +
                 std::to_string(inst.group) + " has not completed";
    else if (inst.opcode == Opcode::WaitEvent)
      message += "waits for event " + std::to_string(inst.event);
    else
      message += "blocked";
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", waitedS);
  throw Error("watchdog: rank " + std::to_string(rank_) + " step " +
              std::to_string(completedSteps_ + 1) + " made no progress for " +
              seconds + " s: " + message);
}

StepStats Session::runStep() {
  const plan::Program &program = *rankProgram_.program;
  StepContext context;
  context.step = completedSteps_ + 1;
  context.lr = learningRate(bundle_.training, context.step);
  context.training = &bundle_.training;
  std::fill(next_.begin(), next_.end(), 0);
  std::fill(recorded_.begin(), recorded_.end(), 0);
  clipRan_ = false;

  double start = now();
  double lastProgress = start;
  int idleRounds = 0;
  for (;;) {
    bool progressed = false, done = true, waitingOnPeers = false;
    for (size_t s = 0; s < program.streams.size(); ++s) {
      const std::vector<Instruction> &insts = program.streams[s].instructions;
      size_t &next = next_[s];
      while (next < insts.size()) {
        if (requests_[s] != MPI_REQUEST_NULL) {
          int complete = 0;
          MPI_Test(&requests_[s], &complete, MPI_STATUS_IGNORE);
          if (!complete) {
            waitingOnPeers = true;
            break;
          }
        } else {
          const Instruction &inst = insts[next];
          if (inst.opcode == Opcode::WaitEvent &&
              !recorded_[size_t(inst.event)])
            break;
          issuedAt_[s] = options_.trace ? now() : 0;
          issue(s, next, context);
          if (requests_[s] != MPI_REQUEST_NULL) {
            progressed = true;
            continue; // test it right away: small messages finish at once
          }
        }
        if (options_.trace)
          trace_.push_back({int32_t(s), int32_t(next), context.step,
                            issuedAt_[s] - openTime_, now() - openTime_});
        ++next;
        progressed = true;
      }
      done = done && next >= insts.size();
    }
    if (done)
      break;
    double t = now();
    if (progressed) {
      lastProgress = t;
      idleRounds = 0;
      continue;
    }
    if (!waitingOnPeers)
      stalled(t - lastProgress); // only events block: a local deadlock
    if (t - lastProgress > options_.watchdogSeconds)
      stalled(t - lastProgress);
    // Peers are behind: stop burning the core they may be sharing.
    if (++idleRounds > 64)
      std::this_thread::yield();
  }

  // The step's statistics: one small all-reduce on the runtime's own
  // communicator, so it can never cross-match a plan collective.
  double sums[2] = {0, 0}; // loss sum, ranks holding a loss
  if (lossBuffer_ >= 0) {
    sums[0] = double(buffer(lossBuffer_).as<float>()[0]);
    sums[1] = 1;
  }
  double norm = clipRan_ ? std::sqrt(clipSum_) : -1;
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comms_->stats);
  MPI_Allreduce(MPI_IN_PLACE, &norm, 1, MPI_DOUBLE, MPI_MAX, comms_->stats);
  ++completedSteps_;

  StepStats stats;
  stats.step = completedSteps_;
  stats.lossReported = sums[1] > 0;
  stats.loss = stats.lossReported ? sums[0] / sums[1] : std::nan("");
  stats.gradNorm = norm >= 0 ? norm : std::nan("");
  stats.lr = context.lr;
  stats.stepTimeS = now() - start;
  stats.tokensPerS = double(bundle_.training.globalBatch) *
                     double(bundle_.training.seqLen) /
                     std::max(stats.stepTimeS, 1e-12);
  return stats;
}

} // namespace weft::exec
