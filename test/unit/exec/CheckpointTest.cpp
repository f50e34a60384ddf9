//===- CheckpointTest.cpp - Checkpoint files, manifests and resume --------===//
//
// The rank-file format (round trip, every header check, corruption and
// truncation), manifests, the choice of the newest committed directory, and
// a 1-rank Session that saves, resumes and continues bit for bit.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Checkpoint.h"
#include "e2e/MlpBundle.h"
#include "unit/exec/ExecTestUtil.h"
#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"
#include "weft/exec/Session.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <unistd.h>

using namespace weft;
using namespace weft::exec;
namespace fs = std::filesystem;

namespace {

std::string freshDir(const std::string &name) {
  return test::freshTestDir("weft-ckpt-", name);
}

using test::errorOf;

RankFileInfo sampleInfo(int64_t payloadBytes) {
  RankFileInfo info;
  info.bundleHash = std::string(64, 'a');
  info.rank = 1;
  info.worldSize = 2;
  info.step = 6;
  info.seed = 42;
  info.dataSamples = 6 * 8;
  info.payloadBytes = payloadBytes;
  return info;
}

std::vector<std::byte> samplePayload(size_t bytes) {
  std::vector<std::byte> payload(bytes);
  for (size_t i = 0; i < bytes; ++i)
    payload[i] = std::byte((i * 131 + 17) & 0xff);
  return payload;
}

/// A rank file written to a fresh directory, with what the manifest records.
struct WrittenFile {
  std::string path;
  RankFileInfo info;
  RankFileResult result;
  std::vector<std::byte> payload;

  explicit WrittenFile(size_t bytes = 100003)
      : path(freshDir("file") + "/rank-1.bin"),
        info(sampleInfo(int64_t(bytes))), payload(samplePayload(bytes)) {
    result = writeRankFile(path, info, payload.data());
  }
  std::string read(const RankFileInfo &expected) const {
    std::vector<std::byte> out(size_t(expected.payloadBytes));
    return errorOf([&] { readRankFile(path, expected, result, out.data()); });
  }
  void flip(int64_t offset) const {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(offset);
    char c = 0;
    file.get(c);
    file.seekp(offset);
    file.put(char(c ^ 0x10));
  }
  /// Flips a header bit and writes the header's checksum again, so the
  /// change reaches the field checks behind it.
  void flipResealed(int64_t offset) const {
    flip(offset);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    char header[kRankHeaderBytes];
    file.read(header, kRankHeaderBytes);
    uint32_t crc = crc32c(header, kRankHeaderBytes - 4);
    file.seekp(kRankHeaderBytes - 4);
    for (int i = 0; i < 4; ++i)
      file.put(char(crc >> (8 * i)));
  }
};

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

std::string readText(const std::string &path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// A full checkpoint's manifest of step 3 for `ranks` ranks: rank r's file
/// rank-<r>.bin of 1000 bytes with checksum r + 1.
Manifest sampleManifest(int32_t ranks) {
  Manifest m;
  m.step = 3;
  m.worldSize = ranks;
  m.bundleHash = std::string(64, 'c');
  for (int32_t r = 0; r < ranks; ++r) {
    m.files.push_back("rank-" + std::to_string(r) + ".bin");
    m.results.push_back({1000, uint32_t(r + 1)});
  }
  return m;
}

/// `manifest` as a manifest written before manifests had their own
/// checksum (what a test edits by hand to reach the field checks).
std::string withoutManifestChecksum(std::string manifest) {
  // Never the last key: its line ends with a comma.
  size_t line = manifest.find("\n  \"manifest_crc32c\"");
  EXPECT_NE(line, std::string::npos) << manifest;
  if (line != std::string::npos)
    manifest.erase(line, manifest.find('\n', line + 1) - line);
  return manifest;
}

/// A 4096-token llm.c file of byte ids (i * mul + add) % 256.
std::string tokenFile(const std::string &name, int mul, int add) {
  std::string path = freshDir(name) + "/tokens.bin";
  std::vector<uint16_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = uint16_t((i * mul + add) % 256);
  writeLlmcTokens(path, ids.data(), int64_t(ids.size()));
  return path;
}

/// Options that train the MLP test bundle (micro-batch 2, written to a fresh
/// directory) on `dataPath`, seed 5.
Options mlpOptions(const std::string &dataPath) {
  weft::test::MlpConfig config;
  config.microBatch = 2;
  Options options;
  options.bundleDir = freshDir("bundle");
  plan::writeBundle(weft::test::buildMlpBundle(config), options.bundleDir);
  options.dataPath = dataPath;
  options.seed = 5;
  return options;
}

} // namespace

TEST(Checkpoint, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  // Chunked and unaligned updates agree with one pass.
  std::vector<std::byte> data = samplePayload(1000);
  uint32_t whole = crc32c(data.data(), data.size());
  uint32_t parts = crc32c(data.data(), 3);
  parts = crc32c(data.data() + 3, 500, parts);
  parts = crc32c(data.data() + 503, 497, parts);
  EXPECT_EQ(whole, parts);
}

TEST(Checkpoint, RankFileRoundTrips) {
  WrittenFile file;
  EXPECT_EQ(file.result.fileBytes, kRankHeaderBytes + 100003);
  EXPECT_EQ(int64_t(fs::file_size(file.path)), file.result.fileBytes);
  EXPECT_EQ(file.result.payloadCrc,
            crc32c(file.payload.data(), file.payload.size()));
  std::vector<std::byte> out(file.payload.size());
  readRankFile(file.path, file.info, file.result, out.data());
  EXPECT_EQ(out, file.payload);
}

TEST(Checkpoint, DeviceMemoryStreamsThroughOneChunkOfHostMemory) {
  // A payload of a "device" piece (two and a half chunks) then a host piece:
  // the file is the one the plain writer makes, every copy out of the
  // device holds at most one chunk, and reading back into device memory
  // fills it the same way, chunk by chunk.
  const int64_t deviceBytes = 2 * kCheckpointChunkBytes + 123457;
  std::vector<std::byte> device = samplePayload(size_t(deviceBytes));
  std::vector<std::byte> host = samplePayload(777);
  RankFileInfo info = sampleInfo(deviceBytes + 777);
  std::vector<int64_t> copies;
  DeviceMemory memory;
  memory.begin = device.data();
  memory.end = device.data() + device.size();
  memory.toHost = [&](std::byte *to, const std::byte *from, int64_t bytes) {
    ASSERT_TRUE(memory.holds(from));
    copies.push_back(bytes);
    std::memcpy(to, from, size_t(bytes));
  };
  memory.toDevice = [&](std::byte *to, const std::byte *from, int64_t bytes) {
    ASSERT_TRUE(memory.holds(to));
    copies.push_back(bytes);
    std::memcpy(to, from, size_t(bytes));
  };
  PayloadPieces pieces = {{device.data(), deviceBytes}, {host.data(), 777}};
  std::string dir = freshDir("device");
  RankFileResult plain = writeRankFile(dir + "/plain.bin", info, pieces);
  RankFileResult streamed =
      writeRankFile(dir + "/streamed.bin", info, pieces, &memory);
  EXPECT_EQ(streamed.payloadCrc, plain.payloadCrc);
  EXPECT_EQ(readText(dir + "/streamed.bin"), readText(dir + "/plain.bin"));
  EXPECT_EQ(copies, (std::vector<int64_t>{kCheckpointChunkBytes,
                                          kCheckpointChunkBytes, 123457}));
  // With the backend's staging buffer the chunks pass through it.
  std::vector<std::byte> staging(static_cast<size_t>(kCheckpointChunkBytes));
  memory.bounce = staging.data();
  std::vector<std::byte *> targets;
  auto copyOut = memory.toHost;
  memory.toHost = [&](std::byte *to, const std::byte *from, int64_t bytes) {
    targets.push_back(to);
    copyOut(to, from, bytes);
  };
  RankFileResult staged =
      writeRankFile(dir + "/staged.bin", info, pieces, &memory);
  EXPECT_EQ(staged.payloadCrc, plain.payloadCrc);
  EXPECT_EQ(readText(dir + "/staged.bin"), readText(dir + "/plain.bin"));
  EXPECT_EQ(targets, std::vector<std::byte *>(3, staging.data()));
  memory.toHost = copyOut;
  memory.bounce = nullptr;
  // Read back over poisoned device memory and a poisoned host piece.
  copies.clear();
  std::fill(device.begin(), device.end(), std::byte{0xff});
  std::fill(host.begin(), host.end(), std::byte{0xff});
  readRankFile(dir + "/streamed.bin", info, streamed,
               {{device.data(), deviceBytes}, {host.data(), 777}}, &memory);
  EXPECT_EQ(device, samplePayload(size_t(deviceBytes)));
  EXPECT_EQ(host, samplePayload(777));
  EXPECT_EQ(copies.size(), 3u);
  // ... and through the staging buffer.
  std::fill(device.begin(), device.end(), std::byte{0xff});
  memory.bounce = staging.data();
  std::vector<const std::byte *> sources;
  auto copyIn = memory.toDevice;
  memory.toDevice = [&](std::byte *to, const std::byte *from, int64_t bytes) {
    sources.push_back(from);
    copyIn(to, from, bytes);
  };
  readRankFile(dir + "/staged.bin", info, staged,
               {{device.data(), deviceBytes}, {host.data(), 777}}, &memory);
  EXPECT_EQ(device, samplePayload(size_t(deviceBytes)));
  EXPECT_EQ(sources, std::vector<const std::byte *>(3, staging.data()));
  memory.toDevice = copyIn;
  memory.bounce = nullptr;
  // A corrupted byte in the last chunk is still the checksum error.
  {
    std::fstream file(dir + "/streamed.bin",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(kRankHeaderBytes + deviceBytes - 5);
    file.put(char(0x5a));
  }
  std::string error = errorOf([&] {
    readRankFile(dir + "/streamed.bin", info, streamed,
                 {{device.data(), deviceBytes}, {host.data(), 777}}, &memory);
  });
  EXPECT_EQ(error.rfind(dir + "/streamed.bin: checksum mismatch", 0), 0u)
      << error;
}

TEST(Checkpoint, CorruptedPayloadByteIsAChecksumErrorNamingTheFile) {
  WrittenFile file;
  file.flip(kRankHeaderBytes + 77777);
  std::string error = file.read(file.info);
  EXPECT_EQ(error.rfind(file.path + ": checksum mismatch (computed ", 0), 0u)
      << error;
}

TEST(Checkpoint, CorruptedHeaderByteIsRejected) {
  WrittenFile file;
  file.flip(90); // inside the step field
  EXPECT_EQ(file.read(file.info),
            file.path + ": header checksum mismatch (corrupted)");
}

TEST(Checkpoint, TruncatedFileIsRejected) {
  WrittenFile file;
  fs::resize_file(file.path, 5000);
  EXPECT_EQ(file.read(file.info),
            file.path + ": file holds 5000 bytes but the manifest records " +
                std::to_string(file.result.fileBytes) +
                " (truncated or replaced)");
}

TEST(Checkpoint, EveryHeaderFieldIsChecked) {
  WrittenFile file;
  RankFileInfo wrong = file.info;
  wrong.bundleHash = std::string(64, 'b');
  EXPECT_EQ(file.read(wrong), file.path + ": bundle hash is " +
                                  std::string(64, 'a') + " but expected " +
                                  std::string(64, 'b'));
  wrong = file.info;
  wrong.worldSize = 4;
  EXPECT_EQ(file.read(wrong), file.path + ": world size is 2 but expected 4");
  wrong = file.info;
  wrong.rank = 0;
  EXPECT_EQ(file.read(wrong), file.path + ": rank is 1 but expected 0");
  wrong = file.info;
  wrong.step = 7;
  EXPECT_EQ(file.read(wrong), file.path + ": step is 6 but expected 7");
  // The header-size field (offset 12) must say 128: the payload follows.
  {
    WrittenFile resized;
    resized.flipResealed(12);
    EXPECT_EQ(resized.read(resized.info),
              resized.path + ": header size is 144 but expected 128");
  }
  wrong = file.info;
  wrong.payloadBytes = 64;
  EXPECT_EQ(file.read(wrong),
            file.path + ": payload size is 100003 but expected 64");
  // A file whose recorded checksum is not the manifest's was replaced.
  RankFileResult manifest = file.result;
  manifest.payloadCrc ^= 1;
  std::vector<std::byte> out(file.payload.size());
  EXPECT_NE(errorOf([&] {
              readRankFile(file.path, file.info, manifest, out.data());
            }).find("differs from the manifest's"),
            std::string::npos);
}

TEST(Checkpoint, ManifestRoundTripsAndChecksBundleAndWorldSize) {
  std::string dir = freshDir("manifest");
  Manifest m;
  m.step = 12;
  m.worldSize = 2;
  m.bundleHash = std::string(64, 'c');
  m.files = {"rank-0.bin", "rank-1.bin"};
  m.results = {{1000, 0xdeadbeef}, {2000, 7}};
  writeText(dir + "/manifest.json", manifestJson(m));
  Manifest back = loadManifest(dir, m.bundleHash, 2);
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.files, m.files);
  EXPECT_EQ(back.results[0].payloadCrc, 0xdeadbeefu);
  EXPECT_EQ(back.results[1].fileBytes, 2000);
  std::string path = dir + "/manifest.json";
  EXPECT_EQ(errorOf([&] { loadManifest(dir, std::string(64, 'd'), 2); }),
            path + ": written for bundle cccccccccccc..., not this bundle "
                   "dddddddddddd...");
  EXPECT_EQ(errorOf([&] { loadManifest(dir, m.bundleHash, 4); }),
            path + ": written by 2 ranks but the MPI world has 4");
  for (const char *crc : {"deadbee", "deadbeefa", "deadbeeg", " -dead12"}) {
    std::string text = withoutManifestChecksum(manifestJson(m));
    text.replace(text.find("\"deadbeef\""), 10, std::string("\"") + crc + "\"");
    writeText(path, text);
    EXPECT_EQ(errorOf([&] { loadManifest(dir, m.bundleHash, 2); }),
              path + ": files[0].crc32c: expected 8 hex digits (found \"" +
                  crc + "\")");
  }
  writeText(path, "{\"format\": \"weft-checkpoint\"");
  EXPECT_EQ(errorOf([&] {
              loadManifest(dir, m.bundleHash, 2);
            }).rfind(path + ": invalid manifest: ", 0),
            0u);
}

TEST(Checkpoint, ManifestChecksumCoversItsValues) {
  std::string dir = freshDir("manifest-crc");
  std::string path = dir + "/manifest.json";
  Manifest m = sampleManifest(1);
  m.lossScale = LossScaleState{65536.0, 2, 3};
  std::string json = manifestJson(m);
  // A reformatting (another indent, other key order) keeps the checksum.
  nlohmann::json parsed = nlohmann::json::parse(json);
  writeText(path, parsed.dump());
  EXPECT_EQ(loadManifest(dir, m.bundleHash, 1).lossScale->scale, 65536.0);
  // A changed value the rank files do not repeat is refused.
  std::string edited = json;
  const std::string goodSteps = "\"good_steps\": 2";
  edited.replace(edited.find(goodSteps), goodSteps.size(), "\"good_steps\": 1");
  writeText(path, edited);
  std::string error = errorOf([&] { loadManifest(dir, m.bundleHash, 1); });
  EXPECT_EQ(error.rfind(path + ": manifest checksum mismatch (computed ", 0),
            0u)
      << error;
  EXPECT_NE(error.find("): the manifest was edited or corrupted"),
            std::string::npos);
  parsed["manifest_crc32c"] = "12345";
  writeText(path, parsed.dump());
  EXPECT_EQ(errorOf([&] { loadManifest(dir, m.bundleHash, 1); }),
            path +
                ": manifest_crc32c: expected 8 hex digits (found \"12345\")");
  // Manifests written before the checksum existed still load.
  writeText(path, withoutManifestChecksum(edited));
  EXPECT_EQ(loadManifest(dir, m.bundleHash, 1).lossScale->goodSteps, 1);
}

TEST(Checkpoint, ManifestFieldErrorsNameTheField) {
  std::string dir = freshDir("manifest-fields");
  std::string path = dir + "/manifest.json";
  Manifest m = sampleManifest(2);
  m.lossScale = LossScaleState{1024.0, 1, 3};
  nlohmann::json good = nlohmann::json::parse(manifestJson(m));
  good.erase("manifest_crc32c"); // edits by hand reach the field checks
  auto errorWith = [&](const std::function<void(nlohmann::json &)> &edit) {
    nlohmann::json edited = good;
    edit(edited);
    writeText(path, edited.dump(2));
    return errorOf([&] { loadManifest(dir, m.bundleHash, 2); });
  };
  // Values the JSON library would convert are refused.
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["step"] = 2.5; }),
            path + ": step: expected an integer >= 0 (found 2.5)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["step"] = -1; }),
            path + ": step: expected an integer >= 0 (found -1)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["files"][1]["bytes"] = "5"; }),
            path + ": files[1].bytes: expected an integer >= 0 (found \"5\")");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j.erase("world_size"); }),
            path + ": world_size: missing field");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["world_size"] = 1ll << 40; }),
            path +
                ": world_size: expected an integer in [1, 2147483647] (found "
                "1099511627776)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["loss_scale"] = 4; }),
            path + ": loss_scale: expected an object (found 4)");
  EXPECT_EQ(
      errorWith([](nlohmann::json &j) { j["loss_scale"]["scale"] = "big"; }),
      path + ": loss_scale.scale: expected a number (found \"big\")");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["files"][0] = nullptr; }),
            path + ": files[0]: expected an object (found null)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["files"][0].erase("file"); }),
            path + ": files[0].file: missing field");
  EXPECT_EQ(errorWith([](nlohmann::json &j) {
              j["files"][1]["bytes"] = uint64_t(1) << 63;
            }),
            path + ": files[1].bytes: expected an integer >= 0 (found "
                   "9223372036854775808)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["files"][1]["rank"] = 0; }),
            path + ": files[1].rank: expected 1, the entry's index (found 0)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) {
              j["loss_scale"]["optimizer_steps"] = 4;
            }),
            path + ": loss_scale.optimizer_steps: expected an integer in [0, "
                   "3] (found 4)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j["loss_scale"]["scale"] = 0; }),
            path + ": loss_scale.scale: expected a finite number > 0 (found "
                   "0)");
  EXPECT_EQ(errorWith([](nlohmann::json &j) { j = nlohmann::json::array(); }),
            path + ": not a weft checkpoint manifest");
  writeText(path, good.dump());
  EXPECT_EQ(loadManifest(dir, m.bundleHash, 2).results[1].payloadCrc, 2u);
}

TEST(Checkpoint, ManifestRecordsTheDataFile) {
  std::string dir = freshDir("manifest-data");
  std::string path = dir + "/manifest.json";
  Manifest m = sampleManifest(1);
  writeText(path, manifestJson(m));
  EXPECT_FALSE(loadManifest(dir, m.bundleHash, 1).data); // older manifests
  m.data = DataIdentity{123456789012, 0x0badcafe};
  std::string json = manifestJson(m);
  EXPECT_NE(json.find("\"fingerprint\": \"0badcafe\""), std::string::npos);
  writeText(path, json);
  std::optional<DataIdentity> back = loadManifest(dir, m.bundleHash, 1).data;
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *m.data);
  for (const char *bad : {"xyz", "1"}) {
    std::string edited = withoutManifestChecksum(json);
    edited.replace(edited.find("\"fingerprint\": \"0badcafe\""),
                   std::strlen("\"fingerprint\": \"0badcafe\""),
                   std::string("\"fingerprint\": \"") + bad + "\"");
    writeText(path, edited);
    EXPECT_EQ(errorOf([&] { loadManifest(dir, m.bundleHash, 1); }),
              path + ": data.fingerprint: expected 8 hex digits (found \"" +
                  bad + "\")");
  }
}

TEST(Checkpoint, TokenFileFingerprintTellsFilesApart) {
  std::string dir = freshDir("fingerprint");
  // Longer than 64 windows of 8192 tokens, so the windows are sampled.
  std::vector<uint16_t> ids(700000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = uint16_t((i * 37 + 5) % 50257);
  auto fingerprintOf = [&](const std::vector<uint16_t> &tokens,
                           const std::string &name) {
    std::string file = dir + "/" + name;
    writeLlmcTokens(file, tokens.data(), int64_t(tokens.size()));
    return TokenFile(file).fingerprint();
  };
  uint32_t base = fingerprintOf(ids, "a.bin");
  EXPECT_EQ(fingerprintOf(ids, "copy.bin"), base); // a copy, another name
  // Raw uint16 (nanoGPT) holds the same tokens: the same fingerprint.
  {
    std::ofstream raw(dir + "/raw.bin", std::ios::binary);
    raw.write(reinterpret_cast<const char *>(ids.data()),
              std::streamsize(ids.size() * 2));
  }
  EXPECT_EQ(TokenFile(dir + "/raw.bin").fingerprint(), base);
  std::vector<uint16_t> edited = ids;
  edited[0] ^= 1; // the first window
  EXPECT_NE(fingerprintOf(edited, "first.bin"), base);
  edited = ids;
  edited.back() ^= 1; // the last window
  EXPECT_NE(fingerprintOf(edited, "last.bin"), base);
  edited = ids;
  edited.push_back(7); // grown: another count (and windows)
  EXPECT_NE(fingerprintOf(edited, "grown.bin"), base);
  std::vector<uint16_t> shorter(ids.begin(), ids.begin() + 1000);
  uint32_t small = fingerprintOf(shorter, "short.bin"); // read whole
  shorter[500] ^= 1;
  EXPECT_NE(fingerprintOf(shorter, "short2.bin"), small);
}

TEST(Checkpoint, ResumeRefusesAnotherDataFile) {
  std::string other = tokenFile("other-tokens", 41, 3);
  Options options = mlpOptions(test::testTokenFile());
  std::string ckpt = freshDir("data-ck");
  auto session = Session::open(options, MPI_COMM_WORLD);
  session->runStep();
  session->saveCheckpoint(ckpt);
  std::string manifestPath = ckpt + "/step-1/manifest.json";
  Manifest manifest = parseManifest(manifestPath, readText(manifestPath));
  ASSERT_TRUE(manifest.data);
  EXPECT_EQ(manifest.data->tokens, 4096);
  EXPECT_EQ(manifest.data->fingerprint,
            TokenFile(options.dataPath).fingerprint());

  Options resume = options;
  resume.resumeDir = ckpt;
  resume.dataPath = other;
  std::string error = errorOf([&] { Session::open(resume, MPI_COMM_WORLD); });
  EXPECT_EQ(error.rfind(ckpt + "/step-1/manifest.json: trained on a data file "
                               "of 4096 tokens (fingerprint ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find("), not " + other + " (4096 tokens, fingerprint "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("resume with the same data, or --resume-any-data"),
            std::string::npos);
  resume.resumeAnyData = true;
  auto resumed = Session::open(resume, MPI_COMM_WORLD);
  EXPECT_EQ(resumed->completedSteps(), 1);
  EXPECT_TRUE(std::isfinite(resumed->runStep().loss));
}

TEST(Checkpoint, WeightsSnapshotReplicasShareTheirWritersFile) {
  // DP replicas of a ZeRO-0 snapshot list the DP-0 rank's file
  // (`written_by`); nothing else may share files.
  std::string dir = freshDir("shared-files");
  std::string path = dir + "/manifest.json";
  Manifest m;
  m.step = 4;
  m.contents = CheckpointContents::Weights;
  m.worldSize = 2;
  m.bundleHash = std::string(64, 'c');
  m.files = {"rank-0.bin", "rank-0.bin"};
  m.results = {{1000, 7}, {1000, 7}};
  m.writers = {0, 0};
  writeText(path, manifestJson(m));
  EXPECT_NE(readText(path).find("\"written_by\": 0"), std::string::npos);
  Manifest back = loadManifest(dir, m.bundleHash, 2);
  EXPECT_EQ(back.writers, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(back.files, m.files);
  auto errorWith = [&](Manifest changed) {
    writeText(path, manifestJson(changed));
    return errorOf([&] { loadManifest(dir, m.bundleHash, 2); });
  };
  Manifest full = m;
  full.contents = CheckpointContents::Full;
  EXPECT_EQ(errorWith(full), path + ": files[1].written_by: only a weights "
                                    "snapshot shares rank files");
  Manifest crc = m;
  crc.results[1].payloadCrc = 8;
  EXPECT_EQ(errorWith(crc), path + ": files[1].written_by: file, bytes or "
                                   "crc32c differ from rank 0's");
  Manifest chain = m;
  chain.writers = {1, 0};
  EXPECT_EQ(errorWith(chain), path + ": files[0].written_by: 1 is not a rank "
                                     "that wrote its own file");
  Manifest outside = m;
  outside.writers = {0, 5};
  EXPECT_EQ(errorWith(outside), path + ": files[1].written_by: expected an "
                                       "integer in [0, 1] (found 5)");
}

TEST(Checkpoint, OnlyMarkedStepDirectoriesCount) {
  std::string dir = freshDir("scan");
  EXPECT_FALSE(newestCheckpoint(dir + "/missing"));
  EXPECT_FALSE(newestCheckpoint(dir));
  for (const char *name : {"step-2", "step-10", "step-30", "step-40.tmp"})
    fs::create_directories(dir + "/" + name);
  writeText(dir + "/step-2/COMPLETE", "");
  writeText(dir + "/step-10/COMPLETE", "");
  writeText(dir + "/step-40.tmp/COMPLETE", ""); // never committed
  // step-30 has no marker: a crash between its rename and its marker.
  EXPECT_EQ(newestCheckpoint(dir), dir + "/step-10"); // numeric order
}

TEST(Checkpoint, PruningKeepsTheNewestUpToTheSavedStep) {
  std::string dir = freshDir("prune");
  auto make = [&](const std::string &name, bool committed) {
    fs::create_directories(dir + "/" + name);
    writeText(dir + "/" + name + "/rank-0.bin", "payload");
    if (committed)
      writeText(dir + "/" + name + "/COMPLETE", name + "\n");
  };
  for (const char *name : {"step-2", "step-4", "step-6", "step-8", "step-12",
                           "weights-4", "weights-8"})
    make(name, true);
  make("step-5", false);         // crashed between its rename and marker
  make("step-3.tmp", false);     // an interrupted save
  make("step-1.pruning", false); // an interrupted prune
  make("step-9.tmp", false);     // a later step than the saved one
  make("step-x", true);          // not a checkpoint name: never touched
  make("step-1234567890123456789", true); // 19 digits: not parsed, kept
  auto names = [&] {
    std::vector<std::string> found;
    for (const auto &entry : fs::directory_iterator(dir))
      found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  };
  EXPECT_EQ(committedCheckpoints(dir, CheckpointContents::Full).size(), 5u);
  EXPECT_TRUE(pruneCheckpoints(dir, CheckpointContents::Full, 8, 0)
                  .removed.empty()); // keep 0: retention off

  // Saved step 8 (step-12 is another run's, later: not counted, not
  // removed), keep 2: step-6 and step-8 stay.
  PruneResult pruned = pruneCheckpoints(dir, CheckpointContents::Full, 8, 2);
  EXPECT_TRUE(pruned.failed.empty());
  std::vector<std::string> removed = pruned.removed;
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed,
            (std::vector<std::string>{dir + "/step-1.pruning", dir + "/step-2",
                                      dir + "/step-3.tmp", dir + "/step-4",
                                      dir + "/step-5"}));
  EXPECT_EQ(names(),
            (std::vector<std::string>{"step-12", "step-1234567890123456789",
                                      "step-6", "step-8", "step-9.tmp",
                                      "step-x", "weights-4", "weights-8"}));
  EXPECT_EQ(newestCheckpoint(dir), dir + "/step-12");
  // Weights snapshots are counted apart from full checkpoints.
  pruned = pruneCheckpoints(dir, CheckpointContents::Weights, 8, 1);
  EXPECT_EQ(pruned.removed, (std::vector<std::string>{dir + "/weights-4"}));
  EXPECT_TRUE(fs::exists(dir + "/weights-8/rank-0.bin"));
  EXPECT_TRUE(fs::exists(dir + "/step-6/rank-0.bin"));

  // What cannot be removed is reported, and nothing else is lost.
  std::string locked = freshDir("prune-locked");
  fs::create_directories(locked + "/step-2");
  writeText(locked + "/step-2/COMPLETE", "");
  fs::create_directories(locked + "/step-4");
  writeText(locked + "/step-4/COMPLETE", "");
  if (::geteuid() != 0) { // root ignores directory permissions
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    pruned = pruneCheckpoints(locked, CheckpointContents::Full, 4, 1);
    fs::permissions(locked, fs::perms::owner_all);
    ASSERT_EQ(pruned.failed.size(), 1u);
    EXPECT_EQ(pruned.failed[0].rfind(locked + "/step-2: ", 0), 0u)
        << pruned.failed[0];
    EXPECT_EQ(newestCheckpoint(locked), locked + "/step-4");
  }
}

TEST(Checkpoint, SessionRetentionKeepsTheNewestAndResumesFromThem) {
  Options options = mlpOptions(test::testTokenFile());
  options.keepCheckpoints = 2;
  options.keepWeights = 1;
  std::string ckpt = freshDir("retention");
  auto session = Session::open(options, MPI_COMM_WORLD);
  std::vector<double> losses;
  std::vector<std::string> removed;
  for (int step = 1; step <= 5; ++step) {
    losses.push_back(session->runStep().loss);
    CheckpointStats full = session->saveCheckpoint(ckpt);
    CheckpointStats weights = session->saveWeights(ckpt);
    EXPECT_TRUE(full.notRemoved.empty() && weights.notRemoved.empty());
    removed.insert(removed.end(), full.removed.begin(), full.removed.end());
    removed.insert(removed.end(), weights.removed.begin(),
                   weights.removed.end());
  }
  EXPECT_EQ(removed,
            (std::vector<std::string>{ckpt + "/weights-1", ckpt + "/step-1",
                                      ckpt + "/weights-2", ckpt + "/step-2",
                                      ckpt + "/weights-3", ckpt + "/step-3",
                                      ckpt + "/weights-4"}));
  auto committed = committedCheckpoints(ckpt, CheckpointContents::Full);
  ASSERT_EQ(committed.size(), 2u);
  EXPECT_EQ(committed[0].first, 4);
  EXPECT_EQ(committed[1].first, 5);
  ASSERT_EQ(committedCheckpoints(ckpt, CheckpointContents::Weights).size(), 1u);
  // The kept checkpoints resume as before retention.
  Options resume = options;
  resume.resumeDir = ckpt;
  auto resumed = Session::open(resume, MPI_COMM_WORLD);
  EXPECT_EQ(resumed->completedSteps(), 5);
  EXPECT_EQ(resumed->runStep().loss, session->runStep().loss);
}

TEST(Checkpoint, StagedBackendTrainsAndCheckpointsAsTheCpuBackend) {
  // "cpu-staged": the executor reaches the regions through the backend's
  // copies only (staged batches, copied parameters, checkpoints and weights
  // snapshots streamed through a host buffer), as on a GPU. Same losses, the
  // same rank files byte for byte, and each backend resumes from the
  // other's checkpoint.
  // The offload variant puts the optimizer state in the host region, which
  // is host memory on every backend (read and written in place).
  for (const char *variant : {"serial", "serial-offload"}) {
    SCOPED_TRACE(variant);
    weft::test::MlpConfig config;
    config.variant = variant;
    config.microBatch = 2;
    std::string bundleDir = freshDir("bundle");
    plan::writeBundle(weft::test::buildMlpBundle(config), bundleDir);
    Options options;
    options.bundleDir = bundleDir;
    options.dataPath = test::testTokenFile();
    options.seed = 5;
    std::map<std::string, std::string> files;
    std::map<std::string, std::vector<double>> losses;
    for (const char *backend : {"cpu", "cpu-staged"}) {
      options.backend = backend;
      auto session = Session::open(options, MPI_COMM_WORLD);
      EXPECT_EQ(session->backend().name(), backend);
      EXPECT_EQ(session->backend().hostAddressable(),
                std::string(backend) == "cpu");
      for (int step = 1; step <= 3; ++step)
        losses[backend].push_back(session->runStep().loss);
      std::string ckpt = freshDir(backend);
      session->saveCheckpoint(ckpt);
      session->saveWeights(ckpt);
      files[backend] = readText(ckpt + "/step-3/rank-0.bin");
      files[std::string(backend) + " weights"] =
          readText(ckpt + "/weights-3/rank-0.bin");
      // The other backend resumes from this checkpoint.
      Options resume = options;
      resume.backend = std::string(backend) == "cpu" ? "cpu-staged" : "cpu";
      resume.resumeDir = ckpt;
      auto resumed = Session::open(resume, MPI_COMM_WORLD);
      ASSERT_EQ(resumed->completedSteps(), 3);
      losses[std::string(backend) + " resumed"].push_back(
          resumed->runStep().loss);
      losses[std::string(backend) + " straight"].push_back(
          session->runStep().loss);
    }
    EXPECT_EQ(losses["cpu"], losses["cpu-staged"]);
    EXPECT_FALSE(files["cpu"].empty());
    EXPECT_TRUE(files["cpu"] == files["cpu-staged"]) << "rank files differ";
    EXPECT_FALSE(files["cpu weights"].empty());
    EXPECT_TRUE(files["cpu weights"] == files["cpu-staged weights"])
        << "weights snapshots differ";
    for (const char *backend : {"cpu", "cpu-staged"})
      EXPECT_EQ(losses[std::string(backend) + " resumed"],
                losses[std::string(backend) + " straight"]);
  }
}

TEST(Checkpoint, SessionResumesBitIdentically) {
  Options options = mlpOptions(tokenFile("tokens", 37, 5));
  std::string ckpt = freshDir("ckpt");

  auto straight = Session::open(options, MPI_COMM_WORLD);
  std::vector<double> losses;
  for (int step = 1; step <= 4; ++step) {
    losses.push_back(straight->runStep().loss);
    if (step == 2) {
      EXPECT_EQ(straight->saveCheckpoint(ckpt).dir, ckpt + "/step-2");
    }
  }
  CheckpointStats last = straight->saveCheckpoint(ckpt);
  EXPECT_TRUE(fs::exists(ckpt + "/step-4/COMPLETE"));
  EXPECT_FALSE(fs::exists(ckpt + "/step-4.tmp"));

  // Resume from step-4 must reproduce it; hide it to resume from step-2.
  fs::remove(ckpt + "/step-4/COMPLETE");
  options.resumeDir = ckpt;
  auto resumed = Session::open(options, MPI_COMM_WORLD);
  ASSERT_TRUE(resumed->resumed());
  EXPECT_EQ(resumed->completedSteps(), 2);
  for (int step = 3; step <= 4; ++step)
    EXPECT_EQ(resumed->runStep().loss, losses[size_t(step - 1)]);
  std::string again = freshDir("again");
  resumed->saveCheckpoint(again);
  std::ifstream a(ckpt + "/step-4/rank-0.bin", std::ios::binary);
  std::ifstream b(again + "/step-4/rank-0.bin", std::ios::binary);
  std::string bytesA((std::istreambuf_iterator<char>(a)), {});
  std::string bytesB((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(int64_t(bytesA.size()), last.bytes);
  EXPECT_TRUE(bytesA == bytesB) << "final states differ";
}
