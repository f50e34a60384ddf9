//===- Session.cpp - Loading, validating and replaying a plan on one rank -===//
//
// The scheduler is single-threaded and deterministic: it visits the streams
// round-robin and advances each until it must wait for an event or for a
// pending communication, so runs are bit-reproducible. Everything that
// touches device memory, events or the plan's communication goes through the
// Backend (CPU: host memory and non-blocking MPI; CUDA: streams, events,
// NCCL, graphs); the Session itself uses MPI only for the open agreement,
// step statistics and checkpoint commits, on its own communicator.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Session.h"
#include "Describe.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/OperandChecks.h"
#include "weft/kernels/Common.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Verifier.h"
#ifdef WEFT_WITH_CUDA
#include "weft/exec/cuda/CudaBackend.h"
#endif

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace weft::exec {

using plan::DType;
using plan::Instruction;
using plan::Opcode;

//===----------------------------------------------------------------------===//
// Schedule and initialization
//===----------------------------------------------------------------------===//

namespace {
/// config.cluster.gpu.peak_tflops[<precision>] x 1e12 (weftc records the
/// cluster it planned for); 0 when absent or not a positive number.
double clusterPeakFlops(const plan::Bundle &bundle) {
  const nlohmann::json &config = bundle.config;
  auto cluster = config.find("cluster");
  if (cluster == config.end() || !cluster->is_object())
    return 0;
  auto gpu = cluster->find("gpu");
  if (gpu == cluster->end() || !gpu->is_object())
    return 0;
  auto peaks = gpu->find("peak_tflops");
  if (peaks == gpu->end() || !peaks->is_object())
    return 0;
  auto peak = peaks->find(bundle.training.precision);
  if (peak == peaks->end() || !peak->is_number() || !(peak->get<double>() > 0))
    return 0;
  return peak->get<double>() * 1e12;
}
} // namespace

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

double now() { return MPI_Wtime(); }

} // namespace

CommunicationChannels communicationChannels(const plan::Bundle &bundle) {
  CommunicationChannels channels;
  for (const plan::Program &program : bundle.programs)
    for (const plan::Stream &stream : program.streams)
      for (const Instruction &inst : stream.instructions) {
        if (plan::isCollective(inst.opcode))
          channels.collectives.insert({inst.group, stream.name});
        else if (plan::isPointToPoint(inst.opcode))
          channels.pointToPoint.insert(stream.name);
      }
  return channels;
}

/// The runtime's own communicator (statistics, checkpoint agreement); the
/// plan's communication belongs to the backend.
struct Session::Comms {
  MPI_Comm stats = MPI_COMM_NULL;
  ~Comms() {
    if (stats != MPI_COMM_NULL)
      MPI_Comm_free(&stats);
  }
};

/// An instruction resolved at open: operand memory, its name in errors,
/// load_batch staging, the communication bucket it starts.
struct Session::Prepared {
  std::vector<Operand> reads;
  std::vector<Operand> writes;
  std::string where;                // communication: the instruction
  std::vector<std::byte *> staging; // load_batch, not host-addressable
  size_t bucketEnd = 0;             // > index: first of a bucket up to here
  int64_t turn = -1; // communication: its place in the rank's order
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

  // Every rank connects (collectives over the world: NCCL's unique id and
  // splits, MPI's duplicates). A rank whose connection fails cannot agree
  // with peers waiting inside them, so it ends the job with its message
  // rather than leave them waiting.
  try {
    buildCommunicators();
  } catch (const std::exception &error) {
    std::fprintf(stderr,
                 "weft-run: error: rank %d: %s (aborting the job: the other "
                 "ranks wait in the communicators' creation)\n",
                 rank_, error.what());
    MPI_Abort(world, 1);
  }
  // What can fail on one rank alone (device memory, the parameters' upload,
  // staging buffers) is agreed on as validation is, so that no rank starts
  // step 1's collectives beside one that has given up.
  const plan::Program &program = *rankProgram_.program;
  try {
    allocateStateRegions(); // resumeLocally() may hold the checkpoint already
    arena_ = backend_->allocateRegion(plan::Region::Arena, program.arenaBytes);
    if (!resumed_)
      initializeParameters();
    prepareInstructions();
  } catch (const std::exception &error) {
    failure = error.what();
  }
  agree(failure, world);
  layout_ = stateGroupLayout(bundle_, program);
  weightsLayout_ = weightsSnapshotLayout(bundle_, program);
}

namespace {

/// The token ids the bundle's kernels can index: the embedding's rows (under
/// TP the vocabulary shards' together, padding included) and the loss's
/// words; 0 when no kernel bounds them. The same on every rank (every rank
/// holds every kernel).
int64_t tokenLimit(const plan::Bundle &bundle) {
  int64_t limit = 0, shardRows = 0;
  auto bound = [&](int64_t words) {
    if (words > 0)
      limit = limit > 0 ? std::min(limit, words) : words;
  };
  for (const plan::Kernel &kernel : bundle.kernels) {
    std::string_view base = plan::registryName(kernel.name);
    auto constant = [&](const char *name) -> int64_t {
      auto it = kernel.constants.find(name);
      return it == kernel.constants.end() ? 0 : it->second;
    };
    if (base == "embedding_forward")
      bound(constant("vocab"));
    else if (base == "vocab_embedding_forward")
      shardRows = std::max(shardRows,
                           constant("vocab_start") + constant("vocab_local"));
    else if (base == "cross_entropy")
      bound(constant("valid") > 0 ? constant("valid") : constant("vocab"));
    else if (base == "cross_entropy_shard_max" ||
             base == "cross_entropy_shard_sums" ||
             base == "cross_entropy_shard_finish")
      bound(constant("vocab"));
  }
  bound(shardRows);
  return limit;
}

} // namespace

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

namespace {

std::unique_ptr<Backend> makeBackend(const Options &options, int rank) {
  if (options.backend == "cpu" || options.backend == "cpu-staged")
    return makeCpuBackend(options.backend == "cpu");
  if (options.backend == "cuda") {
#ifdef WEFT_WITH_CUDA
    cuda::CudaBackendOptions cudaOptions;
    // Device timing marks eagerly issued steps only.
    cudaOptions.graph =
        options.graph && !(options.trace && options.deviceTimes);
    cudaOptions.deviceTimes = options.trace && options.deviceTimes;
    cudaOptions.halfKernels = options.halfKernels;
    cudaOptions.gemmAutotune = options.gemmAutotune;
    cudaOptions.cudnnAttention = options.cudnnAttention;
    cudaOptions.generatedKernels = options.generatedKernels;
    cudaOptions.kernelCache = options.kernelCache;
    cudaOptions.rank = rank;
    cudaOptions.watchdogSeconds = options.watchdogSeconds;
    return cuda::makeCudaBackend(cudaOptions); // "no CUDA device: ..."
#else
    (void)rank;
    throw Error("the cuda backend is not available: built without CUDA (no "
                "nvcc at configure time)");
#endif
  }
  throw Error("unknown backend '" + options.backend +
              "' (expected cpu, cuda or cpu-staged)");
}

} // namespace

void Session::validateLocally() {
  backend_ = makeBackend(options_, rank_);
  if (options_.trace && options_.deviceTimes && !backend_->timesInstructions())
    throw Error("device times: the " + std::string(backend_->name()) +
                " backend times instructions on the host only (--backend "
                "cuda times them on the device)");
  try {
    bundle_ = plan::loadBundle(options_.bundleDir, &bundleHash_);
    if (options_.verifyPlan) {
      plan::VerifyResult verified = plan::verify(bundle_);
      verified.throwIfFailed();
      communicationOrder_ = std::move(verified.communicationOrder);
    }
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
  if (std::vector<std::string> sources = generatedSourceProblems(bundle_);
      !sources.empty())
    throw Error(where + ": " + sources.front());
  const plan::TrainingInfo &t = bundle_.training;
  if (t.stepsPerPlan != 1)
    throw Error(where + ": steps_per_plan " + std::to_string(t.stepsPerPlan) +
                " is not supported (the runtime replays one step per plan)");
  if (!(t.lossScale.initial > 0) || !std::isfinite(t.lossScale.initial))
    throw Error(where + ": loss_scale.initial must be positive");
  if (t.lossScale.dynamic &&
      (t.lossScale.growthInterval < 1 || !(t.lossScale.backoff > 0) ||
       !(t.lossScale.backoff < 1)))
    throw Error(where + ": dynamic loss_scale needs growth_interval >= 1 and "
                        "0 < backoff < 1");
  scaler_ = {t.lossScale.initial, 0, 0};
  rankProgram_ = plan::expandRankProgram(bundle_, rank_);
  const plan::Program &program = *rankProgram_.program;

  backend_->prepare(bundle_, program);

  // Optimizer steps, and whether each reads the global sum of squares, itself
  // (the clip folded in) or through a clip instruction before it.
  bool loadsData = false, optimizes = false, clips = false,
       stepsReadTheNorm = true;
  forEachInstruction(
      program, "", [&](const Instruction &inst, size_t, const std::string &at) {
        if (inst.opcode == Opcode::OptimizerStep) {
          optimizes = true;
          stepsReadTheNorm = stepsReadTheNorm && plan::readsGradientNorm(inst);
        }
        clips = clips || inst.opcode == Opcode::Clip;
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
          const std::vector<int64_t> *group =
              plan::resolveGroup(bundle_, inst.group, rank_);
          if (!group)
            throw Error(at + ": group family " + std::to_string(inst.group) +
                        " has no group containing rank " +
                        std::to_string(rank_));
          // One MPI call per member: the largest member must fit an int.
          int64_t largest = 0;
          for (size_t m = 0; m < plan::memberCount(inst); ++m)
            largest = std::max(largest, plan::memberElements(inst, m));
          if (largest > INT_MAX / std::max<int64_t>(1, group->size()))
            throw Error(at + ": count " + std::to_string(largest) +
                        " exceeds what one MPI call moves");
          bool reduces = inst.opcode == Opcode::AllReduce ||
                         inst.opcode == Opcode::ReduceScatter;
          if (reduces && inst.dtype == DType::U16)
            throw Error(at + ": reductions of " +
                        std::string(plan::toString(inst.dtype)) +
                        " are not supported");
        }
      });
  // Dynamic loss scaling checks the global gradient sum of squares.
  if (t.lossScale.dynamic && optimizes && !clips && !stepsReadTheNorm)
    throw Error(where +
                ": dynamic loss scaling needs a clip instruction, or "
                "optimizer_steps that read the gradients' sum of squares "
                "(the overflow check reads it), in role " +
                std::to_string(program.role) + "'s program");
  if (loadsData)
    data_ = std::make_unique<DataLoader>(options_.dataPath, t.seqLen,
                                         t.globalBatch, tokenLimit(bundle_));

  for (const plan::Buffer &buffer : program.buffers)
    if (buffer.name == "loss") {
      if (buffer.dtype != DType::F32)
        throw Error(where + ": buffer 'loss' must be f32");
      lossBuffer_ = buffer.id;
    }
  peakFlopsPerRank_ = clusterPeakFlops(bundle_);
  const plan::Prediction &predicted = bundle_.prediction;
  if (predicted.mfu > 0 && predicted.stepTimeS > 0)
    modelFlopsPerStep_ = predicted.mfu * predicted.stepTimeS *
                         double(bundle_.mesh.worldSize()) * peakFlopsPerRank_;
  if (!options_.resumeDir.empty())
    resumeLocally();
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

DataIdentity Session::dataIdentity() const {
  return {data_->file().size(), data_->file().fingerprint()};
}

void Session::resumeLocally() {
  // Read straight into the regions; nothing runs on them unless every rank's
  // checksum matched (the agreement in setUp).
  allocateStateRegions();
  resumed_ = readCheckpointLocally(options_.resumeDir);
}

void Session::allocateStateRegions() {
  const plan::Program &program = *rankProgram_.program;
  if (!persistent_)
    persistent_ = backend_->allocateRegion(plan::Region::Persistent,
                                           program.persistentBytes);
  // Plans without offload have no host region: nothing allocated.
  if (!host_ && program.hostBytes > 0)
    host_ = backend_->allocateRegion(plan::Region::Host, program.hostBytes);
}

int64_t Session::fullPayloadBytes() const {
  return rankProgram_.program->persistentBytes +
         rankProgram_.program->hostBytes;
}

CheckpointStats Session::readCheckpointLocally(const std::string &dir,
                                               int *payloadTouched) {
  double start = now();
  std::optional<std::string> stepDir;
  struct stat st {};
  if (::stat((dir + "/COMPLETE").c_str(), &st) == 0)
    stepDir = dir; // a checkpoint directory itself
  else
    stepDir = newestCheckpoint(dir);
  if (!stepDir)
    throw Error(dir + ": no complete checkpoint to resume from (no step-<N> "
                      "directory with a COMPLETE marker)");
  Manifest manifest = loadManifest(*stepDir, bundleHash_, worldSize_);
  if (manifest.contents != CheckpointContents::Full)
    throw Error(*stepDir + "/manifest.json: a weights snapshot (parameters "
                           "only) cannot resume training; load a step-<N> "
                           "checkpoint");
  // The data position counts sequences of the file trained on: another file
  // (or the same one grown) continues with other batches.
  if (manifest.data && data_ && !options_.resumeAnyData)
    if (DataIdentity current = dataIdentity(); current != *manifest.data)
      throw Error(*stepDir + "/manifest.json: trained on a data file of " +
                  std::to_string(manifest.data->tokens) +
                  " tokens (fingerprint " + hex32(manifest.data->fingerprint) +
                  "), not " + options_.dataPath + " (" +
                  std::to_string(current.tokens) + " tokens, fingerprint " +
                  hex32(current.fingerprint) +
                  "): resume with the same data, or --resume-any-data");
  const plan::Program &program = *rankProgram_.program;
  RankFileInfo expected;
  expected.bundleHash = bundleHash_;
  expected.rank = rank_;
  expected.worldSize = worldSize_;
  expected.step = manifest.step;
  expected.dataSamples = manifest.step * bundle_.training.globalBatch;
  // The payload is the persistent region, then the host region.
  expected.payloadBytes = fullPayloadBytes();
  const RankFileResult &recorded = manifest.results[size_t(rank_)];
  if (payloadTouched)
    *payloadTouched = 1; // readRankFile writes into the region as it goes
  // Nothing the device runs touches the host region now (between steps).
  backend_->synchronize();
  const std::string path = *stepDir + "/" + manifest.files[size_t(rank_)];
  // A device region is filled chunk by chunk through a host buffer; the
  // host region is host memory on every backend: read in place.
  readRankFile(
      path, expected, recorded,
      {{persistent_, program.persistentBytes}, {host_, program.hostBytes}},
      deviceMemory());
  if (bundle_.training.lossScale.dynamic) {
    if (!manifest.lossScale)
      throw Error(*stepDir + "/manifest.json: no 'loss_scale' state, which "
                             "this plan's dynamic loss scaling needs");
    scaler_ = *manifest.lossScale;
  } else {
    scaler_ = {bundle_.training.lossScale.initial, 0, manifest.step};
  }
  completedSteps_ = manifest.step;
  CheckpointStats stats;
  stats.dir = *stepDir;
  stats.step = manifest.step;
  stats.bytes = recorded.fileBytes;
  stats.seconds = now() - start;
  return stats;
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

MPI_Comm Session::statsComm() const { return comms_->stats; }

const DeviceMemory *Session::deviceMemory() {
  if (backend_->hostAddressable())
    return nullptr;
  // Offloaded pieces are host memory already: outside the range.
  deviceMemory_.begin = persistent_;
  deviceMemory_.end = persistent_ + rankProgram_.program->persistentBytes;
  deviceMemory_.toHost = [this](std::byte *host, const std::byte *device,
                                int64_t bytes) {
    backend_->copyToHost(host, device, bytes);
  };
  deviceMemory_.toDevice = [this](std::byte *device, const std::byte *host,
                                  int64_t bytes) {
    backend_->copyToDevice(device, host, bytes);
  };
  return &deviceMemory_;
}

CheckpointStats Session::saveCheckpoint(const std::string &dir) {
  // The device's writes to the host region complete before it is read (the
  // copies of device pieces synchronize themselves).
  backend_->synchronize();
  PayloadPieces payload =
      persistentPieces(0, rankProgram_.program->persistentBytes);
  if (rankProgram_.program->hostBytes > 0)
    payload.push_back({host_, rankProgram_.program->hostBytes});
  return commitCheckpoint(
      dir, checkpointName(CheckpointContents::Full, completedSteps_), payload,
      false);
}

CheckpointStats Session::saveWeights(const std::string &dir) {
  PayloadPieces payload;
  for (const ByteRange &range : weightsLayout_.ranges) {
    PayloadPieces pieces = persistentPieces(range.offset, range.bytes);
    payload.insert(payload.end(), pieces.begin(), pieces.end());
  }
  backend_->synchronize();
  for (const ByteRange &range : weightsLayout_.hostRanges)
    payload.push_back({host_ + range.offset, range.bytes});
  return commitCheckpoint(
      dir, checkpointName(CheckpointContents::Weights, completedSteps_),
      payload, true);
}

CheckpointStats Session::commitCheckpoint(const std::string &dir,
                                          const std::string &name,
                                          const PayloadPieces &payload,
                                          bool weightsOnly) {
  namespace fs = std::filesystem;
  double start = now();
  MPI_Comm comm = comms_->stats;
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
    if (stepInProgress_)
      throw Error("cannot save " + final + " during step " +
                  std::to_string(completedSteps_ + 1) +
                  " (finishStep() first)");
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
  info.payloadBytes = 0;
  for (const auto &piece : payload)
    info.payloadBytes += piece.second;
  const std::string file = "rank-" + std::to_string(rank_) + ".bin";
  // A weights snapshot that every DP replica holds alike is written once,
  // by the replica at DP index 0 (weightsSnapshotWriters, worked out on the
  // first snapshot).
  if (weightsOnly && weightsWriters_.empty())
    weightsWriters_ = weightsSnapshotWriters(bundle_);
  auto writerOf = [&](int64_t rank) {
    return weightsOnly ? weightsWriters_[size_t(rank)] : rank;
  };
  RankFileResult result;
  attempt([&] {
    if (!stateLost_.empty())
      throw Error("rank " + std::to_string(rank_) +
                  ": refusing to save: " + stateLost_);
    if (writerOf(rank_) == rank_)
      result = writeRankFile(tmp + "/" + file, info, payload, deviceMemory());
  });

  int64_t mine[2] = {result.fileBytes, int64_t(result.payloadCrc)};
  std::vector<int64_t> all(rank_ == 0 ? size_t(2 * worldSize_) : 0);
  MPI_Gather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, 0, comm);

  attempt([&] {
    if (rank_ != 0)
      return;
    Manifest manifest;
    manifest.step = completedSteps_;
    manifest.contents =
        weightsOnly ? CheckpointContents::Weights : CheckpointContents::Full;
    manifest.worldSize = worldSize_;
    manifest.bundleHash = bundleHash_;
    if (bundle_.training.lossScale.dynamic)
      manifest.lossScale = scaler_;
    if (data_)
      manifest.data = dataIdentity();
    for (int r = 0; r < worldSize_; ++r) {
      int64_t w = writerOf(r);
      manifest.files.push_back("rank-" + std::to_string(w) + ".bin");
      manifest.results.push_back(
          {all[size_t(2 * w)], uint32_t(all[size_t(2 * w + 1)])});
      manifest.writers.push_back(int32_t(w));
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
  CheckpointStats stats;
  stats.dir = final;
  stats.step = completedSteps_;
  stats.bytes = result.fileBytes;
  // Retention once the new checkpoint is committed; a checkpoint that cannot
  // be removed is reported, not a failed save.
  int64_t keep = weightsOnly ? options_.keepWeights : options_.keepCheckpoints;
  if (rank_ == 0 && keep > 0) {
    PruneResult pruned = pruneCheckpoints(
        dir,
        weightsOnly ? CheckpointContents::Weights : CheckpointContents::Full,
        completedSteps_, keep);
    stats.removed = std::move(pruned.removed);
    stats.notRemoved = std::move(pruned.failed);
  }
  stats.seconds = now() - start;
  return stats;
}

void Session::buildCommunicators() {
  // The plan's communicators belong to the backend (collective over the
  // world, the same order on every rank); the runtime keeps one private
  // duplicate for statistics and agreements.
  backend_->connect(bundle_, rank_, worldSize_, world_);
  comms_ = std::make_unique<Comms>();
  MPI_Comm_dup(world_, &comms_->stats);
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
      std::byte *device = out.data;
      std::vector<std::byte> host;
      // Host-region buffers (offloaded master weights) are host memory on
      // every backend: filled in place.
      if (!backend_->hostAddressable() && buffer.region != plan::Region::Host) {
        host.resize(size_t(part * plan::elementBytes(buffer.dtype)));
        out.data = host.data();
      }
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
        case DType::F16:
          out.as<kernels::F16>()[e] = kernels::floatToF16(float(value));
          break;
        default:
          out.as<float>()[e] = float(value);
          break;
        }
      }
      if (!host.empty())
        backend_->copyToDevice(device, host.data(), int64_t(host.size()));
    }
  }
}

Operand Session::buffer(int64_t id) const {
  const plan::Buffer &buffer = rankProgram_.program->buffers.at(size_t(id));
  std::byte *base = buffer.region == plan::Region::Persistent ? persistent_
                    : buffer.region == plan::Region::Host     ? host_
                                                              : arena_;
  return {base + buffer.offset, buffer.size, buffer.dtype};
}

void Session::readBuffer(int64_t id, int64_t offset, void *host,
                         int64_t bytes) const {
  Operand b = buffer(id);
  if (offset < 0 || bytes < 0 || offset + bytes > b.bytes)
    throw Error("readBuffer: bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes) + ") outside buffer " +
                std::to_string(id) + " of " + std::to_string(b.bytes) +
                " bytes");
  if (rankProgram_.program->buffers.at(size_t(id)).region ==
      plan::Region::Host) {
    // Host memory, written in stream order: wait for the device, then read.
    backend_->synchronize();
    std::memcpy(host, b.data + offset, size_t(bytes));
    return;
  }
  backend_->copyToHost(static_cast<std::byte *>(host), b.data + offset, bytes);
}

void Session::prepareInstructions() {
  const plan::Program &program = *rankProgram_.program;
  auto resolve = [&](const plan::BufferRange &range) {
    Operand operand = buffer(range.buffer);
    operand.data += range.offset;
    operand.bytes = range.bytes;
    return operand;
  };
  bool staged = !backend_->hostAddressable();
  // Communication is issued in the plan's one order (plan::
  // communicationOrder, every rank the same sequence restricted to its own
  // operations), as NCCL asks of operations on different communicators; the
  // verifier computed it on the way. A plan whose operations never all meet
  // (reachable --unverified only) keeps the streams' own order, and the
  // watchdog names what waits.
  if (!options_.verifyPlan)
    communicationOrder_ = plan::communicationOrder(bundle_);
  const std::vector<plan::StreamPosition> *turns =
      communicationOrder_.empty() ? nullptr
                                  : &communicationOrder_[size_t(rank_)];
  prepared_.resize(program.streams.size());
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const plan::Stream &stream = program.streams[s];
    for (size_t i = 0; i < stream.instructions.size(); ++i) {
      const Instruction &inst = stream.instructions[i];
      Prepared p;
      for (const plan::BufferRange &range : inst.reads)
        p.reads.push_back(resolve(range));
      for (const plan::BufferRange &range : inst.writes)
        p.writes.push_back(resolve(range));
      if (plan::isCollective(inst.opcode) || plan::isPointToPoint(inst.opcode))
        p.where = describeInstruction(program, s, i); // the backend adds
                                                      // "rank R"
      if (inst.opcode == Opcode::LoadBatch && staged)
        for (const Operand &write : p.writes)
          p.staging.push_back(backend_->stagingBuffer(write.bytes));
      prepared_[s].push_back(std::move(p));
    }
    if (backend_->coalescesCommunication())
      for (auto [first, last] : plan::communicationBuckets(program, s, turns))
        prepared_[s][first].bucketEnd = last;
  }
  if (turns) {
    std::vector<std::vector<int64_t>> turn = plan::turnsOf(program, *turns);
    for (size_t s = 0; s < program.streams.size(); ++s)
      for (size_t i = 0; i < turn[s].size(); ++i)
        prepared_[s][i].turn = turn[s][i];
  }
  communicationOrder_ = {}; // every rank's: needed only here
  normSum_ = reinterpret_cast<float *>(backend_->stagingBuffer(4));
  if (lossBuffer_ >= 0 &&
      program.buffers[size_t(lossBuffer_)].region != plan::Region::Host) {
    int64_t writerStream = -1, writer = -1;
    bool oneStream = true;
    for (size_t s = 0; s < program.streams.size(); ++s)
      for (size_t i = 0; i < program.streams[s].instructions.size(); ++i)
        for (const plan::BufferRange &w :
             program.streams[s].instructions[i].writes)
          if (w.buffer == lossBuffer_) {
            oneStream =
                oneStream && (writerStream < 0 || writerStream == int64_t(s));
            writerStream = int64_t(s);
            writer = int64_t(i);
          }
    if (oneStream && writer >= 0) {
      const Instruction &last =
          program.streams[size_t(writerStream)].instructions[size_t(writer)];
      if (!plan::isCollective(last.opcode) &&
          !plan::isPointToPoint(last.opcode)) {
        lossStream_ = writerStream;
        lossWriter_ = writer;
        lossHost_ = reinterpret_cast<float *>(backend_->stagingBuffer(4));
      }
    }
  }
  // Checkpoints of device memory pass through page-locked staging.
  if (!backend_->hostAddressable())
    deviceMemory_.bounce = backend_->stagingBuffer(kCheckpointChunkBytes);
  normSource_ = normSum_;
  next_.assign(program.streams.size(), 0);
  pending_.assign(program.streams.size(), 0);
  issuedAt_.assign(program.streams.size(), 0);
  if (options_.trace)
    for (const plan::Stream &stream : program.streams)
      issuedAs_.emplace_back(stream.instructions.size(), -1);
  issuedMarks_.assign(program.streams.size(), {-1, -1});
  recorded_.assign(size_t(program.numEvents), 0);
}

//===----------------------------------------------------------------------===//
// Replay
//===----------------------------------------------------------------------===//

void Session::stageBatches(const StepContext &context) {
  const plan::Program &program = *rankProgram_.program;
  const plan::TrainingInfo &t = bundle_.training;
  for (size_t s = 0; s < program.streams.size(); ++s)
    for (size_t i = 0; i < program.streams[s].instructions.size(); ++i) {
      const Instruction &inst = program.streams[s].instructions[i];
      const Prepared &p = prepared_[s][i];
      if (inst.opcode != Opcode::LoadBatch)
        continue;
      int64_t firstSlot =
          (rankProgram_.coord.dp * t.gradAccum + inst.microbatch) *
          t.microBatch;
      data_->read(context.step - 1, firstSlot, t.microBatch,
                  reinterpret_cast<int32_t *>(p.staging[0]),
                  p.staging.size() > 1
                      ? reinterpret_cast<int32_t *>(p.staging[1])
                      : nullptr);
    }
}

void Session::issue(size_t s, size_t index, const StepContext &context) {
  const plan::Program &program = *rankProgram_.program;
  const Instruction &inst = program.streams[s].instructions[index];
  const Prepared &p = prepared_[s][index];
  const plan::TrainingInfo &t = bundle_.training;
  if (options_.trace)
    issuedAs_[s][index] = issuedThisStep_++;
  switch (inst.opcode) {
  case Opcode::RecordEvent:
    recorded_[size_t(inst.event)] = 1;
    backend_->recordEvent(inst.event, int64_t(s));
    return;
  case Opcode::WaitEvent:
    backend_->waitEvent(inst.event, int64_t(s));
    return;
  case Opcode::Release: // the arena bytes simply become dead
    return;
  case Opcode::LoadBatch: {
    if (!p.staging.empty()) {
      // Staged by stageBatches() at the step's start.
      for (size_t w = 0; w < p.writes.size(); ++w)
        backend_->copyToDeviceAsync(p.writes[w].data, p.staging[w],
                                    p.writes[w].bytes, int64_t(s));
      return;
    }
    // Host-addressable: this DP rank's rows of micro-batch `microbatch`
    // straight into the region (see DataLoader.h).
    int64_t firstSlot =
        (rankProgram_.coord.dp * t.gradAccum + inst.microbatch) * t.microBatch;
    data_->read(context.step - 1, firstSlot, t.microBatch,
                p.writes[0].as<int32_t>(),
                p.writes.size() > 1 ? p.writes[1].as<int32_t>() : nullptr);
    return;
  }
  case Opcode::Clip:
    // The sum before clipping: the reported gradient norm.
    readNormSum(inst.reads[0], p.reads[0], s);
    // Dynamic loss scaling (CPU backend: the copy above is synchronous;
    // the CUDA backend refuses such plans): every rank reads the same
    // global sum, so all skip together.
    if (t.lossScale.dynamic)
      stepContext_.skipUpdate = !std::isfinite(*normSource_);
    backend_->execute(inst, int64_t(s), p.reads, p.writes, context);
    return;
  case Opcode::OptimizerStep:
    // Clipping (and skipping) itself: the backend decides from the sum it
    // reads, on the device where there is one; the executor reads the sum
    // after the step for the reported norm and the loss scaler.
    if (plan::readsGradientNorm(inst) && !normRead_)
      readNormSum(inst.reads[4], p.reads[4], s);
    backend_->execute(inst, int64_t(s), p.reads, p.writes, context);
    return;
  default:
    break;
  }
  if (plan::isCollective(inst.opcode) || plan::isPointToPoint(inst.opcode)) {
    backend_->communicate(inst, int64_t(s), p.reads, p.writes, p.where);
    pending_[s] = 1;
    return;
  }
  backend_->execute(inst, int64_t(s), p.reads, p.writes, context);
  if (int64_t(s) == lossStream_ && int64_t(index) == lossWriter_)
    backend_->copyToHostAsync(reinterpret_cast<std::byte *>(lossHost_),
                              buffer(lossBuffer_).data, 4, int64_t(s));
}

void Session::readNormSum(const plan::BufferRange &range,
                          const Operand &operand, size_t stream) {
  normRead_ = true;
  // A host-region sum (an offloaded optimizer's) is read where it is after
  // the step's synchronize(): a host-to-host "async" copy would run at
  // issue, before the plan's copy of this step's sum has landed.
  if (rankProgram_.program->buffers[size_t(range.buffer)].region ==
      plan::Region::Host) {
    normSource_ = operand.as<const float>();
    return;
  }
  normSource_ = normSum_;
  backend_->copyToHostAsync(reinterpret_cast<std::byte *>(normSum_),
                            operand.data, 4, int64_t(stream));
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
    if (pending_[s])
      message += std::string(plan::toString(inst.opcode)) +
                 " on group family " + std::to_string(inst.group) +
                 " has not completed";
    else if (inst.opcode == Opcode::WaitEvent)
      message += "waits for event " + std::to_string(inst.event);
    else if (prepared_[s][next_[s]].turn > nextTurn_)
      message += "waits for communication " + std::to_string(nextTurn_) +
                 " of the rank's order (it is " +
                 std::to_string(prepared_[s][next_[s]].turn) + ")";
    else
      message += "blocked";
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", waitedS);
  throw Error("watchdog: rank " + std::to_string(rank_) + " step " +
              std::to_string(completedSteps_ + 1) + " made no progress for " +
              seconds + " s: " + message);
}

int64_t Session::mark(size_t stream) {
  if (!marking_)
    return -1;
  backend_->markInstruction(int64_t(stream), marks_);
  return marks_++;
}

void Session::traceInstruction(size_t stream, size_t index, double issued,
                               std::pair<int64_t, int64_t> marks) {
  if (!options_.trace)
    return;
  trace_.push_back({int32_t(stream), int32_t(index), stepContext_.step,
                    issued - openTime_, now() - openTime_,
                    issuedAs_[stream][index]});
  traceMarks_.push_back(marks);
}

StepStats Session::runStep() {
  beginStep();
  return finishStep();
}

void Session::beginStep() {
  if (stepInProgress_)
    throw Error("rank " + std::to_string(rank_) + ": step " +
                std::to_string(completedSteps_ + 1) +
                " has begun already (finishStep() completes it)");
  requireResident("begin");
  stepContext_ = StepContext();
  stepContext_.step = completedSteps_ + 1;
  stepContext_.lr = learningRate(bundle_.training, stepContext_.step);
  stepContext_.training = &bundle_.training;
  stepContext_.lossScale = scaler_.scale;
  stepContext_.optimizerStep = scaler_.optimizerSteps + 1;
  std::fill(next_.begin(), next_.end(), 0);
  std::fill(recorded_.begin(), recorded_.end(), 0);
  nextTurn_ = 0;
  issuedThisStep_ = 0;
  normRead_ = false;
  stepInProgress_ = true;
  stepStart_ = now();
  marks_ = 0;
  stepTraceBegin_ = trace_.size();
  marking_ =
      options_.trace && options_.deviceTimes && backend_->timesInstructions() &&
      !(backend_->graphEnabled() && (backend_->hasGraph() || eagerSteps_ >= 1));
  try {
    issueStep();
  } catch (...) {
    abortStep();
    throw;
  }
}

void Session::abortStep() noexcept {
  try {
    backend_->abortCommunication();
  } catch (...) {
  }
  if (openRange_) {
    try {
      backend_->popRange();
    } catch (...) {
    }
    openRange_ = nullptr;
  }
}

void Session::issueStep() {
  if (!backend_->hostAddressable())
    stageBatches(stepContext_);
  backend_->beginStep(stepContext_);
  markOrigin_ = now();
  const plan::Program &program = *rankProgram_.program;
  if (backend_->graphEnabled() && backend_->hasGraph()) {
    // The captured step reads this step's tokens and scalars from the
    // staging and scalar buffers just refilled.
    backend_->replay();
    for (size_t s = 0; s < program.streams.size(); ++s)
      next_[s] = program.streams[s].instructions.size();
    normRead_ = normCaptured_;
    return;
  }
  if (backend_->graphEnabled() && eagerSteps_ >= 1) {
    // Step 1 was the warm-up (workspaces touched, algorithms loaded): this
    // step is captured whole and launched once captured.
    backend_->beginCapture();
    try {
      advance(true);
    } catch (...) {
      try {
        backend_->endCapture();
      } catch (...) {
      }
      throw;
    }
    backend_->endCapture();
    normCaptured_ = normRead_;
    backend_->replay();
    return;
  }
  ++eagerSteps_;
  advance(false);
}

/// Runs the streams round-robin. With untilDone false, returns as soon as
/// no stream can progress without waiting for a peer; returns whether the
/// step is complete.
bool Session::advance(bool untilDone) {
  const plan::Program &program = *rankProgram_.program;
  const StepContext &context = stepContext_;
  double lastProgress = now();
  int idleRounds = 0;
  for (;;) {
    bool progressed = false, done = true, waitingOnPeers = false;
    for (size_t s = 0; s < program.streams.size(); ++s) {
      const std::vector<Instruction> &insts = program.streams[s].instructions;
      size_t &next = next_[s];
      while (next < insts.size()) {
        if (pending_[s]) {
          if (!backend_->communicationDone(int64_t(s))) {
            waitingOnPeers = true;
            break;
          }
          pending_[s] = 0;
        } else {
          const Instruction &inst = insts[next];
          if (inst.opcode == Opcode::WaitEvent &&
              !recorded_[size_t(inst.event)])
            break;
          const Prepared &p = prepared_[s][next];
          if (p.turn >= 0 && p.turn != nextTurn_)
            break; // communication listed before it is not issued yet
          if (openRange_ ? *openRange_ != inst.phase : !inst.phase.empty()) {
            // One profiler range per run of a phase (NVTX on CUDA).
            if (openRange_)
              backend_->popRange();
            openRange_ = inst.phase.empty() ? nullptr : &inst.phase;
            if (openRange_)
              backend_->pushRange(inst.phase);
          }
          if (p.bucketEnd > next) {
            // A bucket of communication (a backend that coalesces it): all
            // issued together; its completion is ordered on the stream.
            // Device marks around the whole bucket: its members are
            // enqueued together at endBucket() (each traced with its span).
            double issued = options_.trace ? now() : 0;
            int64_t begin = mark(s);
            backend_->beginBucket();
            for (size_t i = next; i < p.bucketEnd; ++i) {
              issue(s, i, context);
              pending_[s] = 0;
            }
            if (p.turn >= 0)
              nextTurn_ += int64_t(p.bucketEnd - next);
            backend_->endBucket();
            std::pair<int64_t, int64_t> marks = {begin, mark(s)};
            for (size_t i = next; i < p.bucketEnd; ++i)
              traceInstruction(s, i, issued, marks);
            next = p.bucketEnd;
            progressed = true;
            continue;
          }
          issuedAt_[s] = options_.trace ? now() : 0;
          int64_t begin = mark(s);
          issue(s, next, context);
          nextTurn_ += p.turn >= 0;
          issuedMarks_[s] = {begin, mark(s)};
          if (pending_[s]) {
            progressed = true;
            continue; // test it right away: small messages finish at once
          }
        }
        traceInstruction(s, next, issuedAt_[s], issuedMarks_[s]);
        ++next;
        progressed = true;
      }
      done = done && next >= insts.size();
    }
    if (done)
      return true;
    double t = now();
    if (progressed) {
      lastProgress = t;
      idleRounds = 0;
      continue;
    }
    if (!waitingOnPeers)
      stalled(t - lastProgress); // only events block: a local deadlock
    if (!untilDone)
      return false;
    if (t - lastProgress > options_.watchdogSeconds)
      stalled(t - lastProgress);
    // Peers are behind: stop burning the core they may be sharing.
    if (++idleRounds > 64)
      std::this_thread::yield();
  }
}

StepStats Session::finishStep() {
  if (!stepInProgress_)
    throw Error("rank " + std::to_string(rank_) +
                ": finishStep() without beginStep()");
  requireResident("finish");
  double issued = 0, synchronized = 0;
  try {
    advance(true);
    if (openRange_) {
      backend_->popRange();
      openRange_ = nullptr;
    }
    issued = now();          // everything is enqueued (run, on the CPU)
    backend_->synchronize(); // the device's work, and the clip sum's copy
    synchronized = now();
  } catch (...) {
    abortStep();
    throw;
  }
  stepInProgress_ = false;
  if (marking_ && marks_ > 0) {
    // The step's trace events from the device's clock: its marks' times
    // after the step's first mark, placed at the host time it was enqueued.
    std::vector<double> times = backend_->markTimes(marks_);
    if (int64_t(times.size()) == marks_)
      for (size_t k = stepTraceBegin_; k < trace_.size(); ++k) {
        auto [begin, end] = traceMarks_[k];
        if (begin < 0 || end < 0)
          continue;
        trace_[k].beginS = markOrigin_ - openTime_ + times[size_t(begin)];
        trace_[k].endS = markOrigin_ - openTime_ + times[size_t(end)];
      }
  }
  marking_ = false;

  // The step's statistics: one small all-reduce on the runtime's own
  // communicator, so it can never cross-match a plan collective.
  double sums[2] = {0, 0}; // loss sum, ranks holding a loss
  if (lossBuffer_ >= 0) {
    float loss = 0;
    if (lossHost_)
      loss = *lossHost_; // copied in stream order, complete at synchronize()
    else
      readBuffer(lossBuffer_, 0, &loss, 4);
    sums[0] = double(loss);
    sums[1] = 1;
  }
  const plan::LossScale &policy = bundle_.training.lossScale;
  // Every rank's backend skipped the update where the global sum it read is
  // not finite (the same sum on every rank).
  bool skipped = normRead_ && policy.dynamic && !std::isfinite(*normSource_);
  // The unscaled norm; a skipped step reports none.
  double norm = normRead_ && !skipped
                    ? std::sqrt(double(*normSource_)) / stepContext_.lossScale
                    : -1;
  // The maxima in one all-reduce (doubles hold the flags and byte counts
  // exactly): the norm; among the ranks that checked, did any skip, did any
  // not; the most device memory in use.
  double maxima[4] = {norm, double(normRead_ && skipped),
                      double(normRead_ && !skipped),
                      double(backend_->deviceBytesInUse())};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comms_->stats);
  MPI_Allreduce(MPI_IN_PLACE, maxima, 4, MPI_DOUBLE, MPI_MAX, comms_->stats);
  norm = maxima[0];
  bool anySkipped = maxima[1] > 0, anyApplied = maxima[2] > 0;
  auto memory = int64_t(maxima[3]);
  if (anySkipped && anyApplied)
    throw Error("rank " + std::to_string(rank_) + " step " +
                std::to_string(completedSteps_ + 1) +
                ": ranks disagree on whether the gradients overflowed (the "
                "plan's gradient-norm reduction does not cover every rank)");
  // The step as the ranks that checked decided it (a rank whose program
  // has no optimizer_step checks nothing): every rank's scaler moves alike.
  skipped = anySkipped;
  ++completedSteps_;
  if (!skipped)
    ++scaler_.optimizerSteps;
  if (policy.dynamic && skipped) {
    scaler_.scale *= policy.backoff;
    scaler_.goodSteps = 0;
  } else if (policy.dynamic && ++scaler_.goodSteps >= policy.growthInterval) {
    scaler_.scale *= 2;
    scaler_.goodSteps = 0;
  }

  StepStats stats;
  stats.step = completedSteps_;
  stats.lossReported = sums[1] > 0;
  stats.loss = stats.lossReported ? sums[0] / sums[1] : std::nan("");
  stats.gradNorm = norm >= 0 ? norm : std::nan("");
  stats.lr = stepContext_.lr;
  stats.lossScale = stepContext_.lossScale;
  stats.skipped = skipped;
  double end = now();
  stats.stepTimeS = end - stepStart_;
  stats.issueTimeS = issued - stepStart_;
  stats.finishTimeS = end - synchronized;
  stats.tokensPerS = double(bundle_.training.globalBatch) *
                     double(bundle_.training.seqLen) /
                     std::max(stats.stepTimeS, 1e-12);
  stats.memoryBytes = memory;
  if (modelFlopsPerStep_ > 0) {
    double perRank = modelFlopsPerStep_ / double(worldSize_) /
                     std::max(stats.stepTimeS, 1e-12);
    stats.modelTflopsPerRank = perRank / 1e12;
    stats.mfu = perRank / peakFlopsPerRank_;
  }
  return stats;
}

int64_t Session::inFlight() const {
  return std::count(pending_.begin(), pending_.end(), char(1));
}

int64_t Session::drain() {
  int64_t pending = inFlight();
  double lastProgress = now();
  int idleRounds = 0;
  for (int64_t left = pending; left > 0;) {
    bool progressed = false;
    for (size_t s = 0; s < pending_.size(); ++s) {
      if (!pending_[s])
        continue;
      if (backend_->communicationDone(int64_t(s))) {
        pending_[s] = 0;
        // Exactly what advance() does when it sees the completion.
        traceInstruction(s, next_[s], issuedAt_[s], issuedMarks_[s]);
        ++next_[s];
        --left;
        progressed = true;
      }
    }
    double t = now();
    if (progressed) {
      lastProgress = t;
      continue;
    }
    if (t - lastProgress > options_.watchdogSeconds)
      stalled(t - lastProgress);
    if (++idleRounds > 64)
      std::this_thread::yield();
  }
  return pending;
}

} // namespace weft::exec
