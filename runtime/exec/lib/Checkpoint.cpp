//===- Checkpoint.cpp - Sharded checkpoint files and directories ----------===//
//
// Rank files are written with POSIX I/O straight from the persistent region
// (no staging copy of the state); the CRC-32C of each chunk is computed just
// before the chunk is written, while it is still in cache. The checksum is
// only known at the end, so the header is written last with pwrite.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"
#include "weft/plan/JsonReader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace weft::exec {

//===----------------------------------------------------------------------===//
// CRC-32C
//===----------------------------------------------------------------------===//

namespace {

const std::array<uint32_t, 256> &crcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t crcTableDriven(const uint8_t *p, size_t n, uint32_t c) {
  const std::array<uint32_t, 256> &t = crcTable();
  for (size_t i = 0; i < n; ++i)
    c = (c >> 8) ^ t[(c ^ p[i]) & 0xffu];
  return c;
}

#if defined(__x86_64__)
// SSE4.2 has a CRC-32C instruction: ~8 bytes per cycle-ish instead of one,
// so checksumming does not bound checkpoint throughput.
__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t *p,
                                                       size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
  }
  uint32_t c32 = uint32_t(c64);
  for (; n > 0; ++p, --n)
    c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

} // namespace

uint32_t crc32c(const void *data, size_t bytes, uint32_t crc) {
  const auto *p = static_cast<const uint8_t *>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  c = hardware ? crcHardware(p, bytes, c) : crcTableDriven(p, bytes, c);
#else
  c = crcTableDriven(p, bytes, c);
#endif
  return ~c;
}

//===----------------------------------------------------------------------===//
// Rank files
//===----------------------------------------------------------------------===//

namespace {

constexpr char kMagic[8] = {'W', 'E', 'F', 'T', 'C', 'K', 'P', 'T'};
constexpr size_t kChunk = size_t(kCheckpointChunkBytes);

/// The host buffer device pieces pass through: the backend's staging, else
/// one chunk of `own`.
std::byte *bounceBuffer(const DeviceMemory &device,
                        std::vector<std::byte> &own) {
  if (device.bounce)
    return device.bounce;
  own.resize(kChunk);
  return own.data();
}

// Header fields (little-endian) at fixed offsets; bytes [124, 128) hold the
// CRC-32C of bytes [0, 124).
enum HeaderOffset : size_t {
  kOffVersion = 8,
  kOffHeaderBytes = 12,
  kOffHash = 16,
  kOffRank = 80,
  kOffWorld = 84,
  kOffStep = 88,
  kOffSeed = 96,
  kOffSamples = 104,
  kOffPayloadBytes = 112,
  kOffPayloadCrc = 120,
  kOffHeaderCrc = 124,
};

template <typename T> void put(uint8_t *header, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    header[offset + i] = uint8_t(uint64_t(value) >> (8 * i));
}
template <typename T> T get(const uint8_t *header, size_t offset) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= uint64_t(header[offset + i]) << (8 * i);
  return T(value);
}

std::string systemError(const std::string &path, const std::string &what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

/// Closes the descriptor on every path out of a function.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// The value of exactly 8 hex digits (how checksums are written).
std::optional<uint32_t> parseHex32(const std::string &text) {
  if (text.size() != 8 ||
      !std::all_of(text.begin(), text.end(),
                   [](unsigned char c) { return std::isxdigit(c); }))
    return std::nullopt; // strtoul alone would take " -123456"
  return uint32_t(std::strtoul(text.c_str(), nullptr, 16));
}

} // namespace

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

RankFileResult writeRankFile(const std::string &path, const RankFileInfo &info,
                             const std::byte *payload) {
  return writeRankFile(path, info, PayloadPieces{{payload, info.payloadBytes}});
}

RankFileResult writeRankFile(const std::string &path, const RankFileInfo &info,
                             const PayloadPieces &payload,
                             const DeviceMemory *device) {
  if (info.bundleHash.size() != 64)
    throw Error(path + ": bundle hash must be 64 hex digits");
  int64_t total = 0;
  for (const auto &piece : payload)
    total += piece.second;
  if (total != info.payloadBytes)
    throw Error(path + ": payload pieces hold " + std::to_string(total) +
                " bytes, the header says " + std::to_string(info.payloadBytes));
  Fd file;
  file.fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file.fd < 0)
    throw Error(systemError(path, "cannot create"));
  auto writeAll = [&](const void *data, size_t bytes, off_t at) {
    const auto *p = static_cast<const uint8_t *>(data);
    while (bytes > 0) {
      ssize_t n = ::pwrite(file.fd, p, bytes, at);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw Error(systemError(path, "write failed"));
      p += n;
      at += n;
      bytes -= size_t(n);
    }
  };
  uint32_t crc = 0;
  off_t at = off_t(kRankHeaderBytes);
  std::vector<std::byte> own;
  std::byte *bounce = nullptr; // device pieces pass through it
  for (const auto &[piece, pieceBytes] : payload) {
    bool onDevice = device && device->holds(piece);
    if (onDevice && !bounce)
      bounce = bounceBuffer(*device, own);
    for (int64_t done = 0; done < pieceBytes;) {
      size_t n = size_t(std::min<int64_t>(int64_t(kChunk), pieceBytes - done));
      const std::byte *chunk = piece + done;
      if (onDevice) {
        device->toHost(bounce, chunk, int64_t(n));
        chunk = bounce;
      }
      crc = crc32c(chunk, n, crc);
      writeAll(chunk, n, at);
      at += off_t(n);
      done += int64_t(n);
    }
  }
  uint8_t header[kRankHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof(kMagic));
  put<uint32_t>(header, kOffVersion, kCheckpointVersion);
  put<uint32_t>(header, kOffHeaderBytes, uint32_t(kRankHeaderBytes));
  std::memcpy(header + kOffHash, info.bundleHash.data(), 64);
  put<int32_t>(header, kOffRank, info.rank);
  put<int32_t>(header, kOffWorld, info.worldSize);
  put<int64_t>(header, kOffStep, info.step);
  put<uint64_t>(header, kOffSeed, info.seed);
  put<int64_t>(header, kOffSamples, info.dataSamples);
  put<int64_t>(header, kOffPayloadBytes, info.payloadBytes);
  put<uint32_t>(header, kOffPayloadCrc, crc);
  put<uint32_t>(header, kOffHeaderCrc, crc32c(header, kOffHeaderCrc));
  writeAll(header, sizeof(header), 0);
  if (::fsync(file.fd) != 0)
    throw Error(systemError(path, "fsync failed"));
  return {kRankHeaderBytes + info.payloadBytes, crc};
}

void readRankFile(const std::string &path, const RankFileInfo &expected,
                  const RankFileResult &manifest, std::byte *payload) {
  readRankFile(path, expected, manifest, {{payload, expected.payloadBytes}});
}

void readRankFile(const std::string &path, const RankFileInfo &expected,
                  const RankFileResult &manifest, const PayloadTargets &payload,
                  const DeviceMemory *device) {
  int64_t targetBytes = 0;
  for (const auto &piece : payload)
    targetBytes += piece.second;
  if (targetBytes != expected.payloadBytes)
    throw Error(path + ": " + std::to_string(targetBytes) +
                " bytes of memory for a payload of " +
                std::to_string(expected.payloadBytes));
  Fd file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0)
    throw Error(systemError(path, "cannot open"));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    throw Error(systemError(path, "cannot stat"));
  if (int64_t(st.st_size) != manifest.fileBytes)
    throw Error(path + ": file holds " + std::to_string(st.st_size) +
                " bytes but the manifest records " +
                std::to_string(manifest.fileBytes) +
                " (truncated or replaced)");
  auto readAll = [&](void *data, size_t bytes, off_t at) {
    auto *p = static_cast<uint8_t *>(data);
    while (bytes > 0) {
      ssize_t n = ::pread(file.fd, p, bytes, at);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        throw Error(systemError(path, "read failed"));
      if (n == 0)
        throw Error(path + ": unexpected end of file");
      p += n;
      at += n;
      bytes -= size_t(n);
    }
  };
  if (st.st_size < kRankHeaderBytes)
    throw Error(path + ": shorter than the " +
                std::to_string(kRankHeaderBytes) + "-byte header");
  uint8_t header[kRankHeaderBytes];
  readAll(header, sizeof(header), 0);
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0)
    throw Error(path + ": not a weft checkpoint rank file (bad magic)");
  if (get<uint32_t>(header, kOffHeaderCrc) != crc32c(header, kOffHeaderCrc))
    throw Error(path + ": header checksum mismatch (corrupted)");
  uint32_t version = get<uint32_t>(header, kOffVersion);
  if (version != kCheckpointVersion)
    throw Error(path + ": checkpoint format version " +
                std::to_string(version) + ", this weft-run reads version " +
                std::to_string(kCheckpointVersion));
  auto mismatch = [&](const std::string &field, const std::string &found,
                      const std::string &wanted) {
    if (found != wanted)
      throw Error(path + ": " + field + " is " + found + " but expected " +
                  wanted);
  };
  // The payload starts at kRankHeaderBytes; a header that says otherwise
  // was not written by this format.
  mismatch("header size",
           std::to_string(get<uint32_t>(header, kOffHeaderBytes)),
           std::to_string(kRankHeaderBytes));
  mismatch("bundle hash",
           std::string(reinterpret_cast<const char *>(header) + kOffHash, 64),
           expected.bundleHash);
  mismatch("rank", std::to_string(get<int32_t>(header, kOffRank)),
           std::to_string(expected.rank));
  mismatch("world size", std::to_string(get<int32_t>(header, kOffWorld)),
           std::to_string(expected.worldSize));
  mismatch("step", std::to_string(get<int64_t>(header, kOffStep)),
           std::to_string(expected.step));
  mismatch("data position", std::to_string(get<int64_t>(header, kOffSamples)),
           std::to_string(expected.dataSamples));
  mismatch("payload size",
           std::to_string(get<int64_t>(header, kOffPayloadBytes)),
           std::to_string(expected.payloadBytes));
  uint32_t recorded = get<uint32_t>(header, kOffPayloadCrc);
  if (recorded != manifest.payloadCrc)
    throw Error(path + ": checksum " + hex32(recorded) +
                " differs from the manifest's " + hex32(manifest.payloadCrc));
  // The seed is informational: initialization is the only consumer of the
  // counter-based generator, and it does not run on resume.
  uint32_t crc = 0;
  int64_t done = 0; // payload bytes read so far (file offset - header)
  std::vector<std::byte> own;
  std::byte *bounce = nullptr; // device pieces pass through it
  for (const auto &[piece, pieceBytes] : payload) {
    bool onDevice = device && device->holds(piece);
    if (onDevice && !bounce)
      bounce = bounceBuffer(*device, own);
    for (int64_t at = 0; at < pieceBytes;) {
      size_t n = size_t(std::min<int64_t>(int64_t(kChunk), pieceBytes - at));
      std::byte *chunk = onDevice ? bounce : piece + at;
      readAll(chunk, n, off_t(kRankHeaderBytes + done));
      crc = crc32c(chunk, n, crc);
      if (onDevice)
        device->toDevice(piece + at, chunk, int64_t(n));
      at += int64_t(n);
      done += int64_t(n);
    }
  }
  if (crc != recorded)
    throw Error(path + ": checksum mismatch (computed " + hex32(crc) +
                ", recorded " + hex32(recorded) + "): the file is corrupted");
}

//===----------------------------------------------------------------------===//
// Manifest and directories
//===----------------------------------------------------------------------===//

namespace {

/// CRC-32C of a manifest's compact JSON (keys sorted) without its own
/// `manifest_crc32c`: a changed value changes it, a reformatting does not.
/// It covers what no rank file repeats (the loss-scale state, the data
/// identity), so a damaged digit there is refused, not trained on.
uint32_t manifestChecksum(nlohmann::json json) {
  json.erase("manifest_crc32c");
  std::string text = json.dump();
  return crc32c(text.data(), text.size());
}

} // namespace

std::string manifestJson(const Manifest &m) {
  nlohmann::json files = nlohmann::json::array();
  for (size_t r = 0; r < m.files.size(); ++r) {
    files.push_back({{"rank", r},
                     {"file", m.files[r]},
                     {"bytes", m.results[r].fileBytes},
                     {"crc32c", hex32(m.results[r].payloadCrc)}});
    // A file another rank wrote (a weights snapshot's DP replica).
    if (r < m.writers.size() && size_t(m.writers[r]) != r)
      files.back()["written_by"] = m.writers[r];
  }
  nlohmann::json json = {{"format", "weft-checkpoint"},
                         {"version", kCheckpointVersion},
                         {"step", m.step},
                         {"world_size", m.worldSize},
                         {"bundle_hash", m.bundleHash},
                         {"files", files}};
  // Full checkpoints keep the version-1 manifest unchanged; a weights
  // snapshot says what it holds (absent means full).
  if (m.contents == CheckpointContents::Weights)
    json["contents"] = "weights";
  if (m.data)
    json["data"] = {{"tokens", m.data->tokens},
                    {"fingerprint", hex32(m.data->fingerprint)}};
  if (m.lossScale)
    json["loss_scale"] = {{"scale", m.lossScale->scale},
                          {"good_steps", m.lossScale->goodSteps},
                          {"optimizer_steps", m.lossScale->optimizerSteps}};
  json["manifest_crc32c"] = hex32(manifestChecksum(json));
  return json.dump(2) + "\n";
}

namespace {

/// An 8-hex-digit checksum field of `reader`.
uint32_t readHex32(plan::JsonReader &reader, const std::string &key) {
  const std::string &text = reader.string(key);
  std::optional<uint32_t> parsed = parseHex32(text);
  if (!parsed)
    reader.fail(key, "expected 8 hex digits" +
                         plan::JsonReader::found(nlohmann::json(text)));
  return *parsed;
}

Manifest readManifest(const std::string &path, const nlohmann::json &json) {
  // Fields this version does not know are ignored (no finish()): a newer
  // writer may add some.
  plan::JsonReader root(json, "", path);
  if (root.find("manifest_crc32c")) {
    uint32_t recorded = readHex32(root, "manifest_crc32c");
    uint32_t computed = manifestChecksum(json);
    if (computed != recorded)
      throw Error(path + ": manifest checksum mismatch (computed " +
                  hex32(computed) + ", recorded " + hex32(recorded) +
                  "): the manifest was edited or corrupted");
  }
  Manifest m;
  int64_t version = root.integer("version");
  if (version != kCheckpointVersion)
    throw Error(path + ": checkpoint format version " +
                std::to_string(version) + ", this weft-run reads version " +
                std::to_string(kCheckpointVersion));
  m.step = root.integer("step", 0);
  if (root.find("contents")) {
    const std::string &contents = root.string("contents");
    if (contents != "weights" && contents != "full")
      root.fail("contents",
                "expected full or weights (found \"" + contents + "\")");
    m.contents = contents == "weights" ? CheckpointContents::Weights
                                       : CheckpointContents::Full;
  }
  if (root.find("loss_scale")) {
    plan::JsonReader ls = root.object("loss_scale");
    LossScaleState state{ls.number("scale"), ls.integer("good_steps", 0),
                         ls.integer("optimizer_steps", 0, m.step)};
    if (!(state.scale > 0) || !std::isfinite(state.scale))
      ls.fail("scale", "expected a finite number > 0" +
                           plan::JsonReader::found(ls.field("scale")));
    m.lossScale = state;
  }
  if (root.find("data")) {
    plan::JsonReader data = root.object("data");
    int64_t tokens = data.integer("tokens", 0);
    m.data = DataIdentity{tokens, readHex32(data, "fingerprint")};
  }
  m.worldSize = int32_t(root.integer("world_size", 1, INT32_MAX));
  m.bundleHash = root.string("bundle_hash");
  const nlohmann::json &files = root.array("files");
  if (files.size() != size_t(m.worldSize))
    root.fail("files", "lists " + std::to_string(files.size()) +
                           " files, expected one per rank (" +
                           std::to_string(m.worldSize) + ")");
  for (size_t r = 0; r < files.size(); ++r) {
    plan::JsonReader f = root.element(files, "files", r);
    if (f.integer("rank") != int64_t(r))
      f.fail("rank", "expected " + std::to_string(r) + ", the entry's index" +
                         plan::JsonReader::found(f.field("rank")));
    const std::string &name = f.string("file");
    if (name.empty() || name.find('/') != std::string::npos)
      f.fail("file", "expected a plain file name" +
                         plan::JsonReader::found(nlohmann::json(name)));
    uint32_t crc = readHex32(f, "crc32c");
    m.files.push_back(name);
    m.results.push_back({f.integer("bytes", 0), crc});
    m.writers.push_back(
        f.find("written_by")
            ? int32_t(f.integer("written_by", 0, m.worldSize - 1))
            : int32_t(r));
  }
  // A shared file is one its writer lists as its own, with the same
  // size and checksum.
  for (size_t r = 0; r < m.files.size(); ++r) {
    int32_t w = m.writers[r];
    if (size_t(w) == r)
      continue;
    std::string at = path + ": files[" + std::to_string(r) + "].written_by";
    if (size_t(m.writers[size_t(w)]) != size_t(w))
      throw Error(at + ": " + std::to_string(w) +
                  " is not a rank that wrote its own file");
    if (m.contents != CheckpointContents::Weights)
      throw Error(at + ": only a weights snapshot shares rank files");
    if (m.files[r] != m.files[size_t(w)] ||
        m.results[r].fileBytes != m.results[size_t(w)].fileBytes ||
        m.results[r].payloadCrc != m.results[size_t(w)].payloadCrc)
      throw Error(at + ": file, bytes or crc32c differ from rank " +
                  std::to_string(w) + "'s");
  }
  return m;
}

} // namespace

Manifest parseManifest(const std::string &path, const std::string &text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &error) {
    throw Error(path + ": invalid manifest: " + error.what());
  }
  if (!json.is_object() || !json.contains("format") ||
      json.at("format") != "weft-checkpoint")
    throw Error(path + ": not a weft checkpoint manifest");
  try {
    return readManifest(path, json);
  } catch (const plan::Error &error) {
    throw Error(error.what());
  }
}

namespace {

/// A directory entry of a checkpoint of `prefix` (`step-` or `weights-`):
/// its step and the suffix after the digits ("" for the checkpoint itself,
/// ".tmp", ".old", ".pruning"); nullopt for anything else.
std::optional<std::pair<int64_t, std::string>>
parseCheckpointEntry(const std::string &name, const std::string &prefix) {
  if (name.rfind(prefix, 0) != 0)
    return std::nullopt;
  size_t digitsEnd = name.find_first_not_of("0123456789", prefix.size());
  if (digitsEnd == std::string::npos)
    digitsEnd = name.size();
  size_t digits = digitsEnd - prefix.size();
  if (digits == 0 || digits > 18) // 18 digits cannot overflow int64_t
    return std::nullopt;
  std::string suffix = name.substr(digitsEnd);
  if (suffix != "" && suffix != ".tmp" && suffix != ".old" &&
      suffix != ".pruning")
    return std::nullopt;
  return std::pair{std::stoll(name.substr(prefix.size(), digits)), suffix};
}

std::string checkpointPrefix(CheckpointContents contents) {
  return contents == CheckpointContents::Weights ? "weights-" : "step-";
}

/// The entries of `dir` that belong to checkpoints of `contents`.
std::vector<std::pair<std::pair<int64_t, std::string>, std::string>>
checkpointEntries(const std::string &dir, CheckpointContents contents) {
  std::vector<std::pair<std::pair<int64_t, std::string>, std::string>> found;
  DIR *listing = ::opendir(dir.c_str());
  if (!listing)
    return found;
  const std::string prefix = checkpointPrefix(contents);
  while (const dirent *entry = ::readdir(listing))
    if (auto parsed = parseCheckpointEntry(entry->d_name, prefix))
      found.push_back({*parsed, entry->d_name});
  ::closedir(listing);
  std::sort(found.begin(), found.end());
  return found;
}

} // namespace

bool isCommittedCheckpoint(const std::string &stepDir) {
  struct stat st {};
  return ::stat((stepDir + "/COMPLETE").c_str(), &st) == 0;
}

std::string checkpointName(CheckpointContents contents, int64_t step) {
  return checkpointPrefix(contents) + std::to_string(step);
}

std::vector<std::pair<int64_t, std::string>>
committedCheckpoints(const std::string &dir, CheckpointContents contents) {
  std::vector<std::pair<int64_t, std::string>> committed;
  for (const auto &[parsed, name] : checkpointEntries(dir, contents))
    if (parsed.second.empty() && isCommittedCheckpoint(dir + "/" + name))
      committed.push_back({parsed.first, dir + "/" + name});
  return committed;
}

std::optional<std::string> newestCheckpoint(const std::string &dir) {
  auto committed = committedCheckpoints(dir, CheckpointContents::Full);
  if (committed.empty())
    return std::nullopt;
  return committed.back().second;
}

PruneResult pruneCheckpoints(const std::string &dir,
                             CheckpointContents contents, int64_t savedStep,
                             int64_t keep) {
  namespace fs = std::filesystem;
  PruneResult result;
  if (keep < 1)
    return result;
  // The committed checkpoints up to the saved one, newest first: the first
  // `keep` stay.
  std::vector<int64_t> kept;
  for (const auto &[step, path] : committedCheckpoints(dir, contents))
    if (step <= savedStep)
      kept.push_back(step);
  std::reverse(kept.begin(), kept.end());
  kept.resize(std::min(kept.size(), size_t(keep)));
  auto remove = [&](const std::string &path) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec)
      result.failed.push_back(path + ": " + ec.message());
    else
      result.removed.push_back(path);
  };
  for (const auto &[parsed, name] : checkpointEntries(dir, contents)) {
    const auto &[step, suffix] = parsed;
    if (step > savedStep || std::count(kept.begin(), kept.end(), step))
      continue;
    const std::string path = dir + "/" + name;
    if (!suffix.empty() || !isCommittedCheckpoint(path)) {
      remove(path); // a leftover of an earlier step
      continue;
    }
    // Out of the resume's sight first (one rename), then its files.
    const std::string pruning = path + ".pruning";
    std::error_code ec;
    fs::remove_all(pruning, ec);
    fs::rename(path, pruning, ec);
    if (ec) {
      result.failed.push_back(path + ": " + ec.message());
      continue;
    }
    fs::remove_all(pruning, ec);
    if (ec)
      result.failed.push_back(pruning + ": " + ec.message());
    else
      result.removed.push_back(path);
  }
  return result;
}

Manifest loadManifest(const std::string &stepDir, const std::string &bundleHash,
                      int worldSize) {
  std::string path = stepDir + "/manifest.json";
  Fd file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0)
    throw Error(systemError(path, "cannot open"));
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(file.fd, buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw Error(systemError(path, "read failed"));
    text.append(buffer, size_t(n));
  }
  Manifest m = parseManifest(path, text);
  if (m.bundleHash != bundleHash)
    throw Error(path + ": written for bundle " + m.bundleHash.substr(0, 12) +
                "..., not this bundle " + bundleHash.substr(0, 12) + "...");
  if (m.worldSize != worldSize)
    throw Error(path + ": written by " + std::to_string(m.worldSize) +
                " ranks but the MPI world has " + std::to_string(worldSize));
  return m;
}

void syncPath(const std::string &path) {
  Fd file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0)
    throw Error(systemError(path, "cannot open for fsync"));
  if (::fsync(file.fd) != 0)
    throw Error(systemError(path, "fsync failed"));
}

} // namespace weft::exec
