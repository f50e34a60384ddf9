//===- Checkpoint.h - Sharded checkpoint files and directories --*- C++ -*-===//
//
// The on-disk format of a checkpoint (docs/runtime.md, "Checkpoints"):
//
//   D/step-<N>/rank-<r>.bin   header + rank r's persistent and host regions
//   D/step-<N>/manifest.json  world size, bundle hash, step, per-rank files
//   D/step-<N>/COMPLETE       commit marker, written last
//
// Files are written under D/step-<N>.tmp, fsynced, and the directory is
// renamed before the marker is written, so a crash at any point leaves the
// earlier checkpoints loadable. Session::saveCheckpoint and Options::resumeDir
// drive these functions collectively; they are public for tests and tools.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CHECKPOINT_H
#define WEFT_EXEC_CHECKPOINT_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace weft::exec {

/// CRC-32C (Castagnoli) of `bytes`, continuing from `crc` (0 to start).
uint32_t crc32c(const void *data, size_t bytes, uint32_t crc = 0);

/// `value` as 8 lower-case hex digits (how checksums are written).
std::string hex32(uint32_t value);

/// Everything in a rank file's header except the checksums.
struct RankFileInfo {
  std::string bundleHash; // 64 hex digits: the bundle's content hash
  int32_t rank = 0;
  int32_t worldSize = 1;
  int64_t step = 0;        // optimizer steps completed
  uint64_t seed = 0;       // counter-based RNG: the seed is the whole RNG state
  int64_t dataSamples = 0; // sequences consumed: step x global batch
  int64_t payloadBytes = 0; // the persistent region, then the host region
};

/// What writing a rank file produced (recorded in the manifest).
struct RankFileResult {
  int64_t fileBytes = 0;
  uint32_t payloadCrc = 0;
};

/// Size of the fixed rank-file header that precedes the payload.
constexpr int64_t kRankHeaderBytes = 128;
constexpr uint32_t kCheckpointVersion = 1;

/// Writes `info` and `payload` (info.payloadBytes bytes, streamed from memory
/// without a copy) to `path` and fsyncs it. Throws Error naming the file.
RankFileResult writeRankFile(const std::string &path, const RankFileInfo &info,
                             const std::byte *payload);

/// The payload as pieces of memory written one after the other (the state
/// may sit partly in the region and partly in offloaded host copies).
using PayloadPieces = std::vector<std::pair<const std::byte *, int64_t>>;

/// A device region the rank files are written from or read into through
/// copies (a backend that is not host-addressable): each piece inside
/// [begin, end) moves through one host buffer of kCheckpointChunkBytes,
/// chunk by chunk, so neither a save nor a resume holds a host copy of the
/// region.
struct DeviceMemory {
  const std::byte *begin = nullptr, *end = nullptr;
  std::function<void(std::byte *host, const std::byte *device, int64_t bytes)>
      toHost;
  std::function<void(std::byte *device, const std::byte *host, int64_t bytes)>
      toDevice;
  /// kCheckpointChunkBytes of host memory the chunks pass through: the
  /// backend's page-locked staging (device copies from pinned memory run at
  /// the link's speed, pageable ones at a fraction); null: a buffer of the
  /// reader's or writer's own.
  std::byte *bounce = nullptr;
  bool holds(const std::byte *data) const {
    return data >= begin && data < end;
  }
};
/// The chunk of the rank files' reads and writes (and DeviceMemory's host
/// buffer).
constexpr int64_t kCheckpointChunkBytes = int64_t(8) << 20;

/// The same, from pieces whose sizes sum to info.payloadBytes; pieces in
/// `device` (if given) are copied out chunk by chunk.
RankFileResult writeRankFile(const std::string &path, const RankFileInfo &info,
                             const PayloadPieces &payload,
                             const DeviceMemory *device = nullptr);

/// Reads the rank file at `path` into `payload` (expected.payloadBytes
/// bytes) and checks it against `expected` (every field) and against the
/// manifest's `fileBytes` and `payloadCrc`. Throws Error naming the file and
/// the reason; `payload` is then unspecified.
void readRankFile(const std::string &path, const RankFileInfo &expected,
                  const RankFileResult &manifest, std::byte *payload);
/// Where a payload is read to: pieces of memory filled one after the other
/// (a full checkpoint: the persistent region, then the host region).
using PayloadTargets = std::vector<std::pair<std::byte *, int64_t>>;
/// The same into pieces whose sizes sum to expected.payloadBytes; pieces in
/// `device` (if given) are filled chunk by chunk through a host buffer.
void readRankFile(const std::string &path, const RankFileInfo &expected,
                  const RankFileResult &manifest, const PayloadTargets &payload,
                  const DeviceMemory *device = nullptr);

/// What a checkpoint holds: every persistent byte, or the Params state
/// group only (a weights snapshot, D/weights-<N>).
enum class CheckpointContents { Full, Weights };

/// The dynamic loss scaler's state (fp16 plans; docs/runtime.md, "Loss
/// scaling"), the same on every rank, so it lives in the manifest.
struct LossScaleState {
  double scale = 1;           // the loss scale of the next step
  int64_t goodSteps = 0;      // steps without overflow since the last change
  int64_t optimizerSteps = 0; // AdamW updates applied (skipped steps excluded)

  bool operator==(const LossScaleState &other) const {
    return scale == other.scale && goodSteps == other.goodSteps &&
           optimizerSteps == other.optimizerSteps;
  }
};

/// The token file whose sample order a checkpoint's data position counts
/// in (the order depends on the file's length; DataLoader.h): its token
/// count and TokenFile::fingerprint().
struct DataIdentity {
  int64_t tokens = 0;
  uint32_t fingerprint = 0;
  bool operator==(const DataIdentity &other) const {
    return tokens == other.tokens && fingerprint == other.fingerprint;
  }
  bool operator!=(const DataIdentity &other) const { return !(*this == other); }
};

/// A parsed manifest.json.
struct Manifest {
  int64_t step = 0;
  /// Present when the plan scales the loss dynamically.
  std::optional<LossScaleState> lossScale;
  /// The token file trained on (absent in manifests written before
  /// 2026-12-02, or when rank 0 reads no data).
  std::optional<DataIdentity> data;
  CheckpointContents contents = CheckpointContents::Full;
  int32_t worldSize = 0;
  std::string bundleHash;
  std::vector<std::string> files;      // by rank
  std::vector<RankFileResult> results; // by rank
  /// By rank: the rank that wrote files[r] (r itself, or in a weights
  /// snapshot the DP replica whose file r shares: weightsSnapshotWriters).
  std::vector<int32_t> writers;
};

std::string manifestJson(const Manifest &manifest);
/// Parses `text` (the contents of `path`); throws Error naming `path`.
Manifest parseManifest(const std::string &path, const std::string &text);

/// The directory of the newest committed checkpoint in `dir` (a `step-<N>`
/// holding COMPLETE); nullopt when there is none. Incomplete directories
/// (`*.tmp`, no marker) are ignored.
std::optional<std::string> newestCheckpoint(const std::string &dir);

/// Whether checkpoint directory `stepDir` holds its COMPLETE marker (the
/// save finished; only such a directory counts as a checkpoint).
bool isCommittedCheckpoint(const std::string &stepDir);

/// The directory name of a checkpoint of `contents` at `step`: `step-<N>`
/// (full) or `weights-<N>`.
std::string checkpointName(CheckpointContents contents, int64_t step);

/// The committed checkpoints of `contents` in `dir` (`step-<N>` or
/// `weights-<N>` holding COMPLETE) as (step, directory), by step.
std::vector<std::pair<int64_t, std::string>>
committedCheckpoints(const std::string &dir, CheckpointContents contents);

/// What pruneCheckpoints removed, and what it could not ("path: reason").
struct PruneResult {
  std::vector<std::string> removed, failed;
};

/// Retention after the save of `savedStep`: keeps that checkpoint and the
/// `keep` - 1 newest committed ones of the same contents before it, and
/// removes the older ones and that kind's leftovers of earlier steps
/// (`<name>.tmp`, `.old`, `.pruning`, a `<name>` without COMPLETE); later
/// steps (another run's) are never touched. A committed checkpoint is first
/// renamed to `<name>.pruning`, which no resume considers, so a crash midway
/// leaves a leftover the next prune removes, never a checkpoint missing
/// files. Only rank 0 calls it, after the commit; keep < 1 removes nothing.
PruneResult pruneCheckpoints(const std::string &dir,
                             CheckpointContents contents, int64_t savedStep,
                             int64_t keep);

/// The manifest of checkpoint directory `stepDir`, checked against this
/// run: bundle hash and world size. Throws Error naming the file. (Callers
/// that need a full checkpoint check Manifest::contents.)
Manifest loadManifest(const std::string &stepDir, const std::string &bundleHash,
                      int worldSize);

/// fsync of a file or directory; throws Error naming it.
void syncPath(const std::string &path);

} // namespace weft::exec

#endif // WEFT_EXEC_CHECKPOINT_H
