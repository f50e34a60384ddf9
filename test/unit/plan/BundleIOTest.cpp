//===- BundleIOTest.cpp - Writing, loading and corrupted bundles ----------===//

#include "TestBundles.h"

#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

using namespace weft::plan;
using namespace weft::plan::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

class BundleIOTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "weft-plan-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root = pattern;
  }
  void TearDown() override { fs::remove_all(root); }

  std::string dir(const std::string &name) const {
    return (fs::path(root) / name).string();
  }

  static std::string read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  static void overwrite(const std::string &path, const std::string &text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }

  /// Edit the manifest of the bundle in `bundleDir` and re-seal it with a
  /// correct hash, so the loader gets past the hash to the edited field.
  static void editManifest(const std::string &bundleDir,
                           const std::function<void(json &)> &edit,
                           const std::map<std::string, std::string> &files) {
    std::string path = bundleDir + "/plan.json";
    json manifest = json::parse(read(path));
    edit(manifest);
    manifest["content_hash"] = contentHash(manifest, files);
    overwrite(path, manifest.dump(2) + "\n");
  }

  /// Write `bundle` (default: the DP bundle), apply `edit`, reload, and
  /// return the error text.
  std::string loadError(const std::function<void(json &)> &edit,
                        const Bundle &bundle = dataParallelBundle()) {
    std::string bundleDir = dir("edited");
    writeBundle(bundle, bundleDir);
    editManifest(bundleDir, edit, bundle.files);
    try {
      loadBundle(bundleDir);
    } catch (const Error &error) {
      return error.what();
    }
    return "<loaded>";
  }

  std::string root;
};

TEST_F(BundleIOTest, RoundTripIsByteIdentical) {
  for (const Bundle &bundle :
       {dataParallelBundle(), pipelineBundle(), pipelineDataParallelBundle(),
        zero3Bundle(), tensorParallelBundle(), hostOffloadBundle(),
        coalescedBundle()}) {
    writeBundle(bundle, dir("a"));
    std::string hash;
    Bundle loaded = loadBundle(dir("a"), &hash);
    EXPECT_EQ(toJson(loaded), toJson(bundle));
    // The hash loadBundle verified is the bundle's (what checkpoints record).
    EXPECT_EQ(hash, contentHash(bundle));
    EXPECT_EQ(hash, json::parse(read(dir("a") + "/plan.json"))["content_hash"]);
    EXPECT_EQ(loaded.files, bundle.files);
    writeBundle(loaded, dir("b"));
    EXPECT_EQ(read(dir("a") + "/plan.json"), read(dir("b") + "/plan.json"));
    EXPECT_EQ(read(dir("a") + "/kernels/embed.cu"),
              read(dir("b") + "/kernels/embed.cu"));
  }
}

TEST_F(BundleIOTest, HostRegionRoundTrips) {
  Bundle bundle = hostOffloadBundle();
  writeBundle(bundle, dir("a"));
  json manifest = json::parse(read(dir("a") + "/plan.json"));
  const json &program = manifest["programs"][0];
  EXPECT_EQ(program["host_bytes"], 1280);
  EXPECT_EQ(program["persistent_bytes"], 512);
  EXPECT_EQ(program["buffers"][6]["region"], "host");
  EXPECT_EQ(program["buffers"][6]["name"], "w.master");
  Bundle loaded = loadBundle(dir("a"));
  EXPECT_EQ(loaded.programs[0].hostBytes, 1280);
  EXPECT_EQ(loaded.programs[0].buffers[6].region, Region::Host);
  EXPECT_EQ(loaded.programs[0].buffers[1].region, Region::Persistent);
  // A plan without a host region says so: host_bytes 0, not absent.
  writeBundle(dataParallelBundle(), dir("b"));
  EXPECT_EQ(
      json::parse(read(dir("b") + "/plan.json"))["programs"][0]["host_bytes"],
      0);
  // host_bytes is required, and an unknown region is named.
  EXPECT_EQ(
      loadError([](json &m) { m["programs"][0].erase("host_bytes"); }, bundle),
      dir("edited") + "/plan.json: programs[0].host_bytes: missing field");
  EXPECT_NE(
      loadError(
          [](json &m) { m["programs"][0]["buffers"][6]["region"] = "cpu"; },
          bundle)
          .find("programs[0].buffers[6].region"),
      std::string::npos);
}

/// The indented form's layout: records (instructions, buffers, shards,
/// side files, kernels) and number arrays each on one line that is valid
/// JSON by itself, everything else indented as nlohmann's dump(indent).
void expectOneLineRecords(const std::string &text) {
  std::istringstream lines(text);
  std::string line;
  int records = 0;
  while (std::getline(lines, line)) {
    size_t start = line.find_first_not_of(' ');
    std::string item = start == std::string::npos ? "" : line.substr(start);
    if (!item.empty() && item.back() == ',')
      item.pop_back();
    EXPECT_FALSE(
        !item.empty() &&
        (std::isdigit(static_cast<unsigned char>(item[0])) || item[0] == '-'))
        << "a number on a line of its own: " << line;
    bool record = item.rfind("{\"", 0) == 0 &&
                  (item.find("\"op\": ") != std::string::npos ||
                   item.find("\"alignment\": ") != std::string::npos ||
                   item.find("\"zero_shards\": ") != std::string::npos);
    if (!record)
      continue;
    ++records;
    EXPECT_TRUE(json::accept(item)) << "not one JSON record: " << line;
  }
  EXPECT_GT(records, 0);
}

TEST_F(BundleIOTest, ManifestIsCanonical) {
  writeBundle(dataParallelBundle(), dir("a"));
  std::string text = read(dir("a") + "/plan.json");
  json manifest = json::parse(text);
  EXPECT_EQ(manifest["format_version"], kFormatVersion);
  // Sorted keys (the compact form is nlohmann's), two-space indent with
  // one-line records, trailing newline; no temp files left.
  EXPECT_EQ(text.back(), '\n');
  json withoutHash = manifest;
  withoutHash.erase("content_hash");
  EXPECT_EQ(manifestText(dataParallelBundle()), withoutHash.dump());
  EXPECT_EQ(text, manifestText(dataParallelBundle(), 2,
                               manifest["content_hash"].get<std::string>()) +
                      "\n");
  expectOneLineRecords(text);
  EXPECT_EQ(manifest["content_hash"],
            contentHash(manifest, dataParallelBundle().files));
  for (const auto &entry : fs::recursive_directory_iterator(dir("a")))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos)
        << entry.path();
}

TEST_F(BundleIOTest, HashCoversSideFiles) {
  Bundle bundle = dataParallelBundle();
  json manifest = toJson(bundle);
  std::string original = contentHash(manifest, bundle.files);
  bundle.files["kernels/embed.cu"] += " ";
  EXPECT_NE(contentHash(manifest, bundle.files), original);
}

TEST_F(BundleIOTest, WriteRefusesInvalidBundle) {
  Bundle bundle = dataParallelBundle();
  bundle.programs[0].buffers[2].size = 0;
  try {
    writeBundle(bundle, dir("bad"));
    FAIL() << "wrote an invalid bundle";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir("bad") + "/plan.json: programs[0].buffers[2].size: must be "
                           "positive, got 0 (refusing to write)");
  }
  EXPECT_FALSE(fs::exists(dir("bad") + "/plan.json"));
}

TEST_F(BundleIOTest, RejectsEditedManifest) {
  Bundle bundle = dataParallelBundle();
  writeBundle(bundle, dir("a"));
  std::string path = dir("a") + "/plan.json";
  std::string text = read(path);
  size_t at = text.find("\"tiny\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 6, "\"tinz\"");
  overwrite(path, text);
  json manifest = json::parse(text);
  std::string recorded = manifest["content_hash"];
  try {
    loadBundle(dir("a"));
    FAIL() << "loaded an edited bundle";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": content_hash: mismatch (manifest says " + recorded +
                  ", contents hash to " + contentHash(manifest, bundle.files) +
                  "); the bundle was edited or is corrupt");
  }
}

TEST_F(BundleIOTest, RejectsEditedSideFile) {
  writeBundle(dataParallelBundle(), dir("a"));
  overwrite(dir("a") + "/kernels/embed.cu", "// patched\n");
  EXPECT_THROW(
      {
        try {
          loadBundle(dir("a"));
        } catch (const Error &error) {
          EXPECT_NE(std::string(error.what()).find("content_hash: mismatch"),
                    std::string::npos);
          throw;
        }
      },
      Error);
}

TEST_F(BundleIOTest, RejectsTruncatedManifest) {
  writeBundle(dataParallelBundle(), dir("a"));
  std::string path = dir("a") + "/plan.json";
  std::string text = read(path);
  // Cut at a line end: mid-token cuts read as a different syntax error.
  overwrite(path, text.substr(0, text.rfind('\n', text.size() / 2) + 1));
  try {
    loadBundle(dir("a"));
    FAIL() << "loaded a truncated bundle";
  } catch (const Error &error) {
    std::string message = error.what();
    std::string prefix =
        path + ": not valid JSON (truncated or corrupt?): parse error at line ";
    EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
    EXPECT_NE(message.find("unexpected end of input"), std::string::npos)
        << message;
  }
}

TEST_F(BundleIOTest, RejectsMissingManifest) {
  try {
    loadBundle(dir("nothing"));
    FAIL();
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir("nothing") + "/plan.json: cannot read: No such file or "
                               "directory");
  }
}

TEST_F(BundleIOTest, RejectsADirectoryWhereTheManifestBelongs) {
  // It failed allocating the "size" an ifstream reports for a directory.
  std::filesystem::create_directories(dir("dir-manifest") + "/plan.json");
  try {
    loadBundle(dir("dir-manifest"));
    FAIL();
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir("dir-manifest") + "/plan.json: cannot read: Is a directory");
  }
}

TEST_F(BundleIOTest, RejectsWrongVersion) {
  EXPECT_EQ(loadError([](json &m) { m["format_version"] = 7; }),
            dir("edited") + "/plan.json: format_version: version 7 is not "
                            "supported (this build reads version 6)");
  // Version 5 (no gemm epilogues: it would run the product alone), version
  // 4 (one range per collective) and version 3 (no host region) are not
  // read either.
  for (int version : {5, 4, 3})
    EXPECT_EQ(loadError([&](json &m) { m["format_version"] = version; }),
              dir("edited") + "/plan.json: format_version: version " +
                  std::to_string(version) +
                  " is not supported (this build reads version 6)");
}

/// dataParallelBundle with its gemm (instruction 2) given a bias epilogue:
/// the bias is `w` and the folded kernel `bias_add.1` (id 1).
Bundle biasEpilogueBundle() {
  Bundle bundle = dataParallelBundle();
  addKernel(bundle, "bias_add.1", {{"rows", 8}, {"width", 8}}, "// bias_add\n");
  Program &program = bundle.programs[0];
  Instruction &gemm = program.streams[0].instructions[2];
  gemm.gemm.transA = false;
  gemm.epilogue = GemmEpilogue::Bias;
  gemm.epilogueKernels = {1};
  gemm.reads.push_back(whole(program, 0));
  return bundle;
}

TEST_F(BundleIOTest, GemmEpiloguesRoundTripAndAreChecked) {
  Bundle bundle = biasEpilogueBundle();
  writeBundle(bundle, dir("a"));
  Bundle loaded = loadBundle(dir("a"));
  EXPECT_EQ(toJson(loaded), toJson(bundle));
  const Instruction &gemm = loaded.programs[0].streams[0].instructions[2];
  EXPECT_EQ(gemm.epilogue, GemmEpilogue::Bias);
  EXPECT_EQ(gemm.epilogueKernels, std::vector<int64_t>{1});
  // The epilogue changes the content hash.
  EXPECT_NE(contentHash(bundle), contentHash(dataParallelBundle()));

  std::string at =
      dir("edited") + "/plan.json: programs[0].streams[0].instructions[2]";
  auto edit = [&](std::function<void(json &)> change) {
    return loadError(
        [&](json &m) {
          change(m["programs"][0]["streams"][0]["instructions"][2]);
        },
        bundle);
  };
  EXPECT_EQ(edit([](json &g) { g["epilogue"] = "gelu"; }),
            at + ".epilogue: unknown gemm epilogue 'gelu'");
  EXPECT_EQ(edit([](json &g) { g["epilogue_kernels"] = json::array(); }),
            at + ".epilogue_kernels: the bias epilogue folds 1 kernel, got 0");
  EXPECT_EQ(edit([](json &g) { g["epilogue_kernels"] = {0}; }),
            at + ".epilogue_kernels[0]: kernel 'embed' is not a bias_add");
  EXPECT_EQ(edit([](json &g) { g["epilogue_kernels"] = {2}; }),
            at + ".epilogue_kernels[0]: unknown kernel 2");
  EXPECT_EQ(edit([](json &g) { g["reads"].erase(2); }),
            at + ".reads: gemm needs exactly 3 reads ranges, got 2");
  EXPECT_EQ(edit([](json &g) { g["epilogue"] = "dgelu"; }),
            at + ".epilogue_kernels[0]: kernel 'bias_add.1' is not a "
                 "activation_backward");
  EXPECT_EQ(edit([](json &g) { g["epilogue"] = "bias_grad"; }),
            at + ".reads: gemm needs exactly 2 reads ranges, got 3");
  EXPECT_EQ(edit([](json &g) { g["n"] = 4; }),
            at + ".epilogue_kernels[0]: kernel 'bias_add.1' does not have "
                 "the gemm's shape (m 8, n 4, k 8)");
  EXPECT_EQ(edit([](json &g) { g["ldc"] = 16; }),
            at + ": the bias epilogue needs ldc == m");
}

TEST_F(BundleIOTest, RejectsVersion2Bundle) {
  // A version 2 manifest: one program per role, named by `role`.
  EXPECT_EQ(loadError([](json &m) {
              m["format_version"] = 2;
              for (json &program : m["programs"]) {
                program["role"] = program["roles"][0];
                program.erase("roles");
              }
            }),
            dir("edited") + "/plan.json: format_version: version 2 is not "
                            "supported (this build reads version 6)");
  // The version 2 spelling under version 3 names the field.
  EXPECT_EQ(loadError([](json &m) {
              for (json &program : m["programs"]) {
                program["role"] = program["roles"][0];
                program.erase("roles");
              }
            }),
            dir("edited") + "/plan.json: programs[0].roles: missing field");
}

TEST_F(BundleIOTest, RejectsVersion1Bundle) {
  // A version 1 manifest: one concrete group per entry, listed as `ranks`.
  EXPECT_EQ(loadError([](json &m) {
              m["format_version"] = 1;
              m["groups"] =
                  json::array({{{"id", 0}, {"kind", "dp"}, {"ranks", {0, 1}}}});
            }),
            dir("edited") + "/plan.json: format_version: version 1 is not "
                            "supported (this build reads version 6)");
  // The version 1 group spelling under version 3 names the missing field.
  EXPECT_EQ(loadError([](json &m) {
              m["groups"] =
                  json::array({{{"id", 0}, {"kind", "dp"}, {"ranks", {0, 1}}}});
            }),
            dir("edited") + "/plan.json: groups[0].groups: missing field");
}

TEST_F(BundleIOTest, RejectsGroupThatIsNotAnArray) {
  EXPECT_EQ(loadError([](json &m) { m["groups"][0]["groups"][0] = 0; }),
            dir("edited") + "/plan.json: groups[0].groups[0]: expected an "
                            "array (found 0)");
  EXPECT_EQ(loadError([](json &m) { m["groups"][0]["groups"][0][1] = "1"; }),
            dir("edited") + "/plan.json: groups[0].groups[0][1]: expected an "
                            "integer (found \"1\")");
}

TEST_F(BundleIOTest, RejectsOverlappingGroupsOfAFamily) {
  EXPECT_EQ(loadError([](json &m) {
              m["groups"][0]["groups"] = json::array({{0}, {0}});
            }),
            dir("edited") + "/plan.json: groups[0].groups[1][0]: rank 0 is "
                            "also in group 0 (the groups of a family are "
                            "disjoint)");
}

TEST_F(BundleIOTest, RejectsUnknownOpcode) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][1]["op"] =
                  "matmul";
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].op: unknown opcode 'matmul'");
}

TEST_F(BundleIOTest, RejectsFieldForWrongOpcode) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][1]["group"] = 0;
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].group: unexpected field for "
                            "kernel");
}

TEST_F(BundleIOTest, RejectsWrongType) {
  EXPECT_EQ(loadError([](json &m) { m["mesh"]["dp"] = "two"; }),
            dir("edited") +
                "/plan.json: mesh.dp: expected an integer (found \"two\")");
}

TEST_F(BundleIOTest, RejectsDanglingBuffer) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][1]["reads"][0]
               ["buffer"] = 9;
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].reads[0].buffer: unknown buffer "
                            "9");
}

TEST_F(BundleIOTest, RejectsDanglingGroup) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][3]["group"] = 9;
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[3].group: unknown group family 9");
}

TEST_F(BundleIOTest, RejectsFamilyWithWrongIdWithoutCrashing) {
  // A family whose id is not its index (found by mutating manifests under
  // AddressSanitizer: the membership check indexed the families by that id).
  std::string error =
      loadError([](json &m) { m["groups"][0]["id"] = int64_t(1) << 40; });
  EXPECT_NE(error.find("groups[0].id"), std::string::npos) << error;
}

TEST_F(BundleIOTest, RejectsDanglingEvent) {
  Bundle bundle = zero3Bundle();
  writeBundle(bundle, dir("z"));
  editManifest(
      dir("z"),
      [](json &m) {
        m["programs"][0]["streams"][1]["instructions"][1]["event"] = 7;
      },
      bundle.files);
  try {
    loadBundle(dir("z"));
    FAIL();
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir("z") + "/plan.json: programs[0].streams[1].instructions[1]."
                         "event: unknown event 7 (the program has 1 events)");
  }
}

TEST_F(BundleIOTest, RejectsShardsThatLeaveElementsUncovered) {
  // Found by scripts/plan-mutate.py: a parameter's shape grown past its
  // shards loaded and ran, and weft-export then died allocating it.
  auto sliced = [](json &m, int64_t start, int64_t length) {
    for (json &shard : m["parameters"][0]["shards"]) {
      shard["dim"] = 0;
      shard["start"] = start;
      shard["length"] = length;
    }
  };
  EXPECT_EQ(loadError([&](json &m) { sliced(m, 0, 8); }), "<loaded>");
  EXPECT_EQ(loadError([&](json &m) { sliced(m, 0, 4); }),
            dir("edited") + "/plan.json: parameters[0].shards: the slices "
                            "along dim 0 cover [0, 4) of extent 8 (every "
                            "element must be held by some shard)");
  EXPECT_EQ(loadError([&](json &m) { sliced(m, 2, 6); }),
            dir("edited") + "/plan.json: parameters[0].shards: the slices "
                            "along dim 0 cover [0, 0) of extent 8 (every "
                            "element must be held by some shard)");
  EXPECT_EQ(
      loadError([](json &m) {
        m["parameters"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
      }),
      dir("edited") + "/plan.json: parameters[0].shape[1]: the shape "
                      "has more than 2^48 elements");
}

TEST_F(BundleIOTest, RejectsParametersSharingANameOrShardBytes) {
  // Found by scripts/plan-mutate.py: each of these loaded and ran; the
  // export refused a shared Hugging Face name only after training, and a
  // shard moved over another parameter's made the two one tensor.
  auto twin = [](json &m) {
    json copy = m["parameters"][0];
    copy["name"] = "h.0.mlp.v";
    copy["hf_name"] = "transformer.h.0.mlp.c_proj.weight";
    copy["shards"][0]["buffer"] = 1;
    m["parameters"].push_back(copy);
  };
  std::string at = dir("edited") + "/plan.json: parameters[1]";
  EXPECT_EQ(loadError(twin), "<loaded>");
  EXPECT_EQ(loadError([&](json &m) {
              twin(m);
              m["parameters"][1]["name"] = "h.0.mlp.w";
            }),
            at + ".name: 'h.0.mlp.w' is also parameters[0]'s name");
  EXPECT_EQ(loadError([&](json &m) {
              twin(m);
              m["parameters"][1]["hf_name"] = "transformer.h.0.mlp.c_fc.weight";
            }),
            at + ".hf_name: 'transformer.h.0.mlp.c_fc.weight' is also "
                 "parameters[0]'s (tied weights are one parameter)");
  EXPECT_EQ(loadError([&](json &m) {
              twin(m);
              m["parameters"][1]["shards"][0]["buffer"] = 0;
              m["parameters"][1]["shards"][0]["zero_shards"] = 2;
              m["parameters"][1]["shards"][0]["offset"] = 128;
            }),
            at + ".shards[0].offset: bytes [128, 256) of buffer 0 in role 0 "
                 "overlap parameters[0].shards[0]'s [0, 256)");
}

TEST_F(BundleIOTest, RejectsShardingsTheRuntimeCannotHold) {
  // Found by scripts/plan-mutate.py: a ZeRO shard count other than 1 or dp
  // loaded and was refused only when weft-run opened the plan.
  EXPECT_EQ(loadError([](json &m) {
              m["parameters"][0]["shards"][0]["zero_shards"] = 2;
            }),
            "<loaded>");
  EXPECT_EQ(loadError([](json &m) {
              m["parameters"][0]["shards"][0]["zero_shards"] = 4;
            }),
            dir("edited") + "/plan.json: parameters[0].shards[0].zero_shards: "
                            "must be 1 or mesh.dp 2, got 4");
  EXPECT_EQ(loadError([](json &m) { m["parameters"][0]["shape"] = {64}; }),
            dir("edited") + "/plan.json: parameters[0].hf_transposed: set on "
                            "a tensor of rank 1 (only matrices are "
                            "transposed)");
}

TEST_F(BundleIOTest, RejectsRangesCutMidElementAndIntegerParameters) {
  // Found by scripts/plan-mutate.py: each of these loaded and ran (a fill
  // one byte off, a read from an odd offset, an i32 parameter).
  std::string at =
      dir("edited") + "/plan.json: programs[0].streams[0].instructions[1]";
  auto cut = [](int64_t offset, int64_t fewer) {
    return [=](json &m) {
      json &range =
          m["programs"][0]["streams"][0]["instructions"][1]["reads"][0];
      range["offset"] = range["offset"].get<int64_t>() + offset;
      range["bytes"] = range["bytes"].get<int64_t>() - fewer;
    };
  };
  writeBundle(dataParallelBundle(), dir("probe"));
  json manifest = json::parse(read(dir("probe") + "/plan.json"));
  const json &range =
      manifest["programs"][0]["streams"][0]["instructions"][1]["reads"][0];
  const json &buffer =
      manifest["programs"][0]["buffers"][range["buffer"].get<size_t>()];
  ASSERT_EQ(buffer["dtype"], "f32");
  std::string holds = " is not a multiple of 4 (buffer " +
                      std::to_string(buffer["id"].get<int64_t>()) + " '" +
                      buffer["name"].get<std::string>() + "' holds f32)";
  EXPECT_EQ(loadError(cut(4, 4)), "<loaded>");
  EXPECT_EQ(loadError(cut(2, 4)),
            at + ".reads[0].offset: " +
                std::to_string(range["offset"].get<int64_t>() + 2) + holds);
  EXPECT_EQ(loadError(cut(0, 2)),
            at + ".reads[0].bytes: " +
                std::to_string(range["bytes"].get<int64_t>() - 2) + holds);
  EXPECT_EQ(loadError([](json &m) { m["parameters"][0]["dtype"] = "i32"; }),
            dir("edited") + "/plan.json: parameters[0].dtype: a parameter is "
                            "f32, bf16 or f16, got i32");
}

TEST_F(BundleIOTest, RejectsDanglingKernelAndRole) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][1]["kernel"] = 3;
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].kernel: unknown kernel 3");
  EXPECT_EQ(loadError([](json &m) { m["rank_roles"][1] = 4; }),
            dir("edited") + "/plan.json: rank_roles[1]: unknown role 4");
}

TEST_F(BundleIOTest, RejectsRoleTableNotCoveringWorld) {
  EXPECT_EQ(loadError([](json &m) { m["rank_roles"] = {0}; }),
            dir("edited") + "/plan.json: rank_roles: has 1 entries but the "
                            "mesh has 2 ranks");
}

TEST_F(BundleIOTest, RejectsMisalignedBuffer) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["buffers"][3]["offset"] = 260;
            }),
            dir("edited") + "/plan.json: programs[0].buffers[3].offset: "
                            "offset 260 is not a non-negative multiple of "
                            "the alignment 64");
}

TEST_F(BundleIOTest, RejectsCollectiveSizeNotMatchingRange) {
  EXPECT_EQ(loadError([](json &m) {
              m["programs"][0]["streams"][0]["instructions"][3]["count"] = 32;
            }),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[3].reads[0].bytes: all_reduce of 32 "
                            "f32 needs 128 bytes, got 256");
}

TEST_F(BundleIOTest, RejectsOptimizerNormThatIsNotOneFloat) {
  // An optimizer_step may read the f32 sum of squares as reads[4].
  Bundle bundle = hostOffloadBundle();
  const std::vector<Instruction> &compute =
      bundle.programs[0].streams[0].instructions;
  size_t at = 0;
  while (at < compute.size() && compute[at].opcode != Opcode::OptimizerStep)
    ++at;
  ASSERT_LT(at, compute.size());
  EXPECT_EQ(loadError(
                [&](json &m) {
                  m["programs"][0]["streams"][0]["instructions"][at]["reads"]
                      .push_back({{"buffer", 7}, {"bytes", 8}, {"offset", 0}});
                },
                bundle),
            dir("edited") + "/plan.json: programs[0].streams[0].instructions[" +
                std::to_string(at) +
                "].reads[4].bytes: optimizer_step reads the f32 sum of "
                "squares (4 bytes) as reads[4], got 8");
}

TEST_F(BundleIOTest, CollectiveMembersRoundTrip) {
  // Members are the reads/writes arrays: one line per instruction, shared
  // by the roles but for the in-place all_gather member, stored per role.
  Bundle bundle = coalescedBundle();
  writeBundle(bundle, dir("a"));
  std::string text = read(dir("a") + "/plan.json");
  EXPECT_NE(
      text.find("{\"count\": 16, \"dtype\": \"f32\", \"group\": 0, "
                "\"op\": \"reduce_scatter\", \"phase\": \"grad sync\", "
                "\"reads\": [{\"buffer\": 0, \"bytes\": 64, \"offset\": "
                "0}, {\"buffer\": 1, \"bytes\": 32, \"offset\": 0}, "
                "{\"buffer\": 2, \"bytes\": 32, \"offset\": 0}], "
                "\"reduce\": \"sum\", \"writes\": [{\"buffer\": 3, "
                "\"bytes\": 32, \"offset\": 0}, {\"buffer\": 4, \"bytes\": "
                "16, \"offset\": 0}, {\"buffer\": 5, \"bytes\": 16, "
                "\"offset\": 0}]}"),
      std::string::npos)
      << text;
  json manifest = json::parse(text);
  ASSERT_EQ(manifest["programs"].size(), 1u);
  const json &insts = manifest["programs"][0]["streams"][0]["instructions"];
  EXPECT_FALSE(insts[0].contains("per_role"));
  EXPECT_EQ(insts[1]["per_role"][1]["reads"][1]["offset"], 16);
  EXPECT_FALSE(insts[2].contains("per_role"));
  Bundle loaded = loadBundle(dir("a"));
  const Instruction &gather = loaded.programs[1].streams[0].instructions[1];
  EXPECT_EQ(gather.reads.size(), 2u);
  EXPECT_EQ(gather.reads[1], (BufferRange{7, 16, 16}));
}

TEST_F(BundleIOTest, RejectsOverlappingMembers) {
  // The path names the range in the file, as every structural error.
  EXPECT_EQ(loadError(
                [](json &m) {
                  json &scatter =
                      m["programs"][0]["streams"][0]["instructions"][0];
                  scatter["writes"][2] = scatter["writes"][0];
                  scatter["writes"][2]["bytes"] = 16;
                },
                coalescedBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[0].writes[2]: member 2 of "
                            "reduce_scatter overlaps member 0's writes");
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["streams"][0]["instructions"][1]["per_role"]
                   [1]["reads"][0]["buffer"] = 7;
                },
                coalescedBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].per_role[1].writes[1]: member 1 "
                            "of all_gather overlaps member 0's reads");
}

TEST_F(BundleIOTest, RejectsSideFileEscapingBundle) {
  EXPECT_EQ(
      loadError([](json &m) { m["files"][0]["path"] = "../../etc/passwd"; }),
      dir("edited") + "/plan.json: files[0].path: invalid side-file "
                      "path '../../etc/passwd'");
}

//===----------------------------------------------------------------------===//
// Stored programs (format version 3)
//===----------------------------------------------------------------------===//

TEST_F(BundleIOTest, TensorParallelRolesShareOneStoredProgram) {
  Bundle bundle = tensorParallelBundle();
  std::vector<StoredProgram> stored = storedPrograms(bundle);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].roles, (std::vector<int64_t>{0, 1}));
  // The kernel, the slice copy and grad_norm differ; the rest is shared.
  EXPECT_EQ(stored[0].perRole,
            (std::vector<std::vector<bool>>{
                {false, true, false, true, false, true, false}}));

  writeBundle(bundle, dir("tp"));
  json manifest = json::parse(read(dir("tp") + "/plan.json"));
  ASSERT_EQ(manifest["programs"].size(), 1u);
  const json &program = manifest["programs"][0];
  EXPECT_EQ(program["roles"], json({0, 1}));
  EXPECT_FALSE(program.contains("role"));
  const json &insts = program["streams"][0]["instructions"];
  EXPECT_EQ(insts[0]["op"], "load_batch");
  // A per-role instruction has only per_role: one variant per role.
  EXPECT_EQ(insts[1].size(), 1u);
  ASSERT_EQ(insts[1]["per_role"].size(), 2u);
  EXPECT_EQ(insts[1]["per_role"][0]["op"], "kernel");
  EXPECT_EQ(insts[2]["op"], "all_reduce");
  EXPECT_EQ(insts[1]["per_role"][0]["kernel"], 0);
  EXPECT_EQ(insts[1]["per_role"][1]["kernel"], 1);
  EXPECT_EQ(insts[3]["per_role"][1]["reads"][0]["offset"], 128);
  EXPECT_EQ(insts[5]["per_role"][0]["reads"].size(), 2u);
  EXPECT_EQ(insts[5]["per_role"][1]["reads"].size(), 1u);

  // Loading expands it back to one program per role.
  Bundle loaded = loadBundle(dir("tp"));
  ASSERT_EQ(loaded.programs.size(), 2u);
  for (int64_t role = 0; role < 2; ++role) {
    const Program &program = loaded.programs[role];
    EXPECT_EQ(program.role, role);
    EXPECT_EQ(program.streams[0].instructions[1].kernel, role);
    EXPECT_EQ(program.streams[0].instructions[3].reads[0].offset, role * 128);
    EXPECT_EQ(program.streams[0].instructions[5].reads.size(),
              role == 0 ? 2u : 1u);
    EXPECT_EQ(program.streams[0].instructions[6].value, -0.25);
  }
  EXPECT_EQ(toJson(loaded), toJson(bundle));
}

TEST_F(BundleIOTest, UnlikeProgramsAreStoredApart) {
  // The pipeline stages differ in their opcodes: one stored program each.
  std::vector<StoredProgram> stored = storedPrograms(pipelineBundle());
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].roles, std::vector<int64_t>{0});
  EXPECT_EQ(stored[1].roles, std::vector<int64_t>{1});
  // A different buffer keeps otherwise identical TP programs apart.
  Bundle bundle = tensorParallelBundle();
  bundle.programs[1].buffers[4].name = "norm.1";
  EXPECT_EQ(storedPrograms(bundle).size(), 2u);
  writeBundle(bundle, dir("a"));
  writeBundle(loadBundle(dir("a")), dir("b"));
  EXPECT_EQ(read(dir("a") + "/plan.json"), read(dir("b") + "/plan.json"));
}

TEST_F(BundleIOTest, RejectsRoleListedTwice) {
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["roles"] = {0, 0};
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].roles[1]: role 0 is "
                            "listed twice (also at programs[0].roles[0])");
  EXPECT_EQ(loadError([](json &m) { m["programs"][1]["roles"] = {0}; },
                      pipelineBundle()),
            dir("edited") + "/plan.json: programs[1].roles[0]: role 0 is "
                            "listed twice (also at programs[0].roles[0])");
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["roles"] = {1, 0};
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].roles[1]: roles must "
                            "ascend: role 0 after role 1");
  EXPECT_EQ(
      loadError([](json &m) { m["programs"][0]["roles"] = json::array(); }),
      dir("edited") + "/plan.json: programs[0].roles: must list at "
                      "least one role");
}

TEST_F(BundleIOTest, RejectsMissingRole) {
  EXPECT_EQ(loadError([](json &m) { m["programs"][1]["roles"] = {2}; },
                      pipelineBundle()),
            dir("edited") + "/plan.json: programs: role 1 is in no stored "
                            "program (they list 2 roles, so the role ids are "
                            "0..1)");
  EXPECT_EQ(loadError([](json &m) { m["programs"][0]["roles"] = {-1}; }),
            dir("edited") + "/plan.json: programs[0].roles[0]: role -1 must "
                            "not be negative");
}

TEST_F(BundleIOTest, RejectsWrongNumberOfVariants) {
  EXPECT_EQ(
      loadError(
          [](json &m) {
            m["programs"][0]["streams"][0]["instructions"][1]["per_role"].erase(
                1);
          },
          tensorParallelBundle()),
      dir("edited") + "/plan.json: programs[0].streams[0]."
                      "instructions[1].per_role: has 1 variants but the "
                      "program is stored for 2 roles");
  EXPECT_EQ(
      loadError(
          [](json &m) {
            m["programs"][0]["streams"][0]["instructions"][1]["per_role"] =
                json::object();
          },
          tensorParallelBundle()),
      dir("edited") + "/plan.json: programs[0].streams[0]."
                      "instructions[1].per_role: expected an array (found {})");
}

TEST_F(BundleIOTest, RejectsNestedPerRole) {
  EXPECT_EQ(loadError(
                [](json &m) {
                  json &inst =
                      m["programs"][0]["streams"][0]["instructions"][1];
                  inst["per_role"][1] = inst;
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].per_role[1].per_role: nested "
                            "per_role is not allowed");
}

TEST_F(BundleIOTest, RejectsPerRoleMixedWithOtherFields) {
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["streams"][0]["instructions"][1]["op"] =
                      "kernel";
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].op: unexpected field beside "
                            "per_role (an instruction stored per role has "
                            "only per_role)");
}

TEST_F(BundleIOTest, StructuralErrorsNameTheManifestPath) {
  // In one variant of a per-role instruction.
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["streams"][0]["instructions"][1]["per_role"]
                   [1]["kernel"] = 9;
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[1].per_role[1].kernel: unknown "
                            "kernel 9");
  // In a shared instruction of a program stored for two roles.
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][0]["streams"][0]["instructions"][2]["group"] =
                      9;
                },
                tensorParallelBundle()),
            dir("edited") + "/plan.json: programs[0].streams[0]."
                            "instructions[2].group: unknown group family 9");
  // In the second stored program, which holds role 1.
  EXPECT_EQ(loadError(
                [](json &m) {
                  m["programs"][1]["streams"][0]["instructions"][1]["kernel"] =
                      9;
                },
                pipelineBundle()),
            dir("edited") + "/plan.json: programs[1].streams[0]."
                            "instructions[1].kernel: unknown kernel 9");
}

//===----------------------------------------------------------------------===//
// The direct canonical writer against nlohmann's dump
//===----------------------------------------------------------------------===//

/// Every opcode, doubles that format in each of nlohmann's ways, and strings
/// that need escaping (quotes, backslashes, control bytes, DEL, multi-byte
/// UTF-8); keys that sort by byte (uppercase, underscore, UTF-8).
Bundle oddBundle() {
  Bundle bundle = tensorParallelBundle();
  bundle.model.name = "t\"iny\\ \x01\x1f\x7f \t\n\r\b\f caf\xc3\xa9 "
                      "\xe6\x97\xa5 \xf0\x9f\x98\x80 \xe2\x80\xa8";
  bundle.training.lr = 0.1 + 0.2;
  bundle.training.eps = 1e-300;
  bundle.training.minLr = 5e-324;
  bundle.training.weightDecay = -0.0;
  bundle.training.gradClip = 1e21;
  bundle.training.lossScale.initial = 65536.0;
  bundle.training.lossScale.backoff = 123456789.125;
  bundle.prediction.stepTimeS = 1.7976931348623157e308;
  bundle.prediction.mfu = 1.0 / 3;
  bundle.config = {
      {"B", 1},
      {"_under", -7},
      {"a", {{"nested", json::array()}, {"empty", json::object()}}},
      {"caf\xc3\xa9", nullptr},
      {"flags", {true, false}},
      {"big", uint64_t(18446744073709551615ull)},
      {"float", 2.5e-7},
      {"quote\"key", "v\\al"}};
  bundle.kernels[0].constants["A_upper"] = -3;
  bundle.parameters = dataParallelBundle().parameters;
  bundle.parameters[0].init.std = 0.02;
  bundle.files["kernels/z \"odd\".cu"] = "";

  Program &program = bundle.programs[0];
  const Program &p = program;
  Instruction withArgs = kernel(0, {whole(p, 0)}, {whole(p, 1)}, "args");
  withArgs.args = {3, -1, 0};
  Instruction scatter =
      comm(Opcode::ReduceScatter, 0, 8, {{1, 0, 64}}, {{2, 0, 32}}, "rs");
  scatter.reduce = ReduceOp::Max;
  Instruction gather =
      comm(Opcode::AllGather, 0, 8, {{2, 0, 16}}, {{1, 0, 32}}, "ag");
  gather.dtype = DType::BF16;
  Instruction broadcast =
      comm(Opcode::Broadcast, 0, 16, {}, {{1, 0, 64}}, "bc", 1);
  Instruction send = comm(Opcode::Send, 0, 16, {{1, 0, 64}}, {}, "", 1);
  Instruction recv = comm(Opcode::Recv, 0, 16, {}, {{1, 0, 64}}, "r", 0);
  Instruction optimizer =
      op(Opcode::OptimizerStep,
         {whole(p, 0), whole(p, 0), whole(p, 0), whole(p, 0)},
         {whole(p, 0), whole(p, 0), whole(p, 0)}, "adamw");
  optimizer.count = 64;
  optimizer.dtype = DType::F16;
  Instruction clip =
      op(Opcode::Clip, {whole(p, 4), whole(p, 0)}, {whole(p, 0)}, "clip");
  Instruction fill = op(Opcode::Fill, {}, {whole(p, 1), whole(p, 2)}, "f");
  fill.value = 1e-7;
  fill.dtype = DType::I64;
  Instruction gemm = op(Opcode::Gemm, {whole(p, 2), whole(p, 2), whole(p, 2)},
                        {whole(p, 2)}, "gemm");
  gemm.gemm = {true, true, 1, 2, 3, 4, 5, 6, -1.5, 1.0};
  program.streams.push_back(
      {"side \"stream\"",
       {withArgs, scatter, gather, broadcast, send, recv, optimizer, clip, fill,
        gemm, event(Opcode::RecordEvent, 0, "e"),
        event(Opcode::WaitEvent, 0, "e"),
        op(Opcode::Release, {}, {whole(p, 1)}, "rel")}});
  program.numEvents = 1;
  return bundle;
}

TEST_F(BundleIOTest, DirectWriterMatchesNlohmannCompactDump) {
  for (const Bundle &bundle :
       {dataParallelBundle(), pipelineBundle(), pipelineDataParallelBundle(),
        zero3Bundle(), tensorParallelBundle(), oddBundle(),
        coalescedBundle()}) {
    json manifest = toJson(bundle);
    // The compact (hashed) form is exactly nlohmann's; the indented forms
    // hold the same JSON with one-line records.
    EXPECT_EQ(manifestText(bundle), manifest.dump());
    for (int indent : {0, 2, 4}) {
      std::string text = manifestText(bundle, indent);
      EXPECT_EQ(json::parse(text), manifest) << "indent " << indent;
      expectOneLineRecords(text);
    }
    EXPECT_EQ(contentHash(bundle), contentHash(manifest, bundle.files));
    std::string hash = contentHash(bundle);
    manifest["content_hash"] = hash;
    EXPECT_EQ(json::parse(manifestText(bundle, 2, hash)), manifest);
    // Hashing a manifest that has content_hash leaves it out.
    EXPECT_EQ(contentHash(manifest, bundle.files), hash);
  }
  // The odd bundle stores roles 0 and 1 apart (their streams differ) and
  // survives a round trip byte for byte.
  Bundle odd = oddBundle();
  EXPECT_EQ(storedPrograms(odd).size(), 2u);
  writeBundle(odd, dir("a"));
  std::string text = read(dir("a") + "/plan.json");
  json written = json::parse(text);
  written.erase("content_hash");
  EXPECT_EQ(written.dump(), manifestText(odd));
  expectOneLineRecords(text);
  Bundle loaded = loadBundle(dir("a"));
  EXPECT_EQ(loaded.model.name, odd.model.name);
  writeBundle(loaded, dir("b"));
  EXPECT_EQ(read(dir("b") + "/plan.json"), text);
}

TEST_F(BundleIOTest, WriteRefusesInvalidUtf8) {
  Bundle bundle = dataParallelBundle();
  bundle.programs[0].streams[0].instructions[1].phase = "fwd \xff";
  EXPECT_THROW(toJson(bundle).dump(), json::type_error);
  try {
    writeBundle(bundle, dir("bad"));
    FAIL() << "wrote invalid UTF-8";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir("bad") + "/plan.json: programs[0].streams[0]."
                           "instructions[1].phase: invalid UTF-8 byte at "
                           "index 4: 0xFF (refusing to write)");
  }
  EXPECT_FALSE(fs::exists(dir("bad")));
}

} // namespace
