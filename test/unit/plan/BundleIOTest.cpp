//===- BundleIOTest.cpp - Writing, loading and corrupted bundles ----------===//

#include "TestBundles.h"

#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <gtest/gtest.h>

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

  /// Write the DP bundle, apply `edit`, reload, and return the error text.
  std::string loadError(const std::function<void(json &)> &edit) {
    Bundle bundle = dataParallelBundle();
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
  for (const Bundle &bundle : {dataParallelBundle(), pipelineBundle(),
                               pipelineDataParallelBundle(), zero3Bundle()}) {
    writeBundle(bundle, dir("a"));
    Bundle loaded = loadBundle(dir("a"));
    EXPECT_EQ(toJson(loaded), toJson(bundle));
    EXPECT_EQ(loaded.files, bundle.files);
    writeBundle(loaded, dir("b"));
    EXPECT_EQ(read(dir("a") + "/plan.json"), read(dir("b") + "/plan.json"));
    EXPECT_EQ(read(dir("a") + "/kernels/embed.cu"),
              read(dir("b") + "/kernels/embed.cu"));
  }
}

TEST_F(BundleIOTest, ManifestIsCanonical) {
  writeBundle(dataParallelBundle(), dir("a"));
  std::string text = read(dir("a") + "/plan.json");
  json manifest = json::parse(text);
  EXPECT_EQ(manifest["format_version"], kFormatVersion);
  // Sorted keys, two-space indent, trailing newline; no temp files left.
  EXPECT_EQ(text, manifest.dump(2) + "\n");
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
  overwrite(path, text.substr(0, text.size() / 2));
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

TEST_F(BundleIOTest, RejectsWrongVersion) {
  EXPECT_EQ(loadError([](json &m) { m["format_version"] = 3; }),
            dir("edited") + "/plan.json: format_version: version 3 is not "
                            "supported (this build reads version 2)");
}

TEST_F(BundleIOTest, RejectsVersion1Bundle) {
  // A version 1 manifest: one concrete group per entry, listed as `ranks`.
  EXPECT_EQ(loadError([](json &m) {
              m["format_version"] = 1;
              m["groups"] =
                  json::array({{{"id", 0}, {"kind", "dp"}, {"ranks", {0, 1}}}});
            }),
            dir("edited") + "/plan.json: format_version: version 1 is not "
                            "supported (this build reads version 2)");
  // The version 1 group spelling under version 2 names the missing field.
  EXPECT_EQ(loadError([](json &m) {
              m["groups"] =
                  json::array({{{"id", 0}, {"kind", "dp"}, {"ranks", {0, 1}}}});
            }),
            dir("edited") + "/plan.json: groups[0].groups: missing field");
}

TEST_F(BundleIOTest, RejectsGroupThatIsNotAnArray) {
  EXPECT_EQ(loadError([](json &m) { m["groups"][0]["groups"][0] = 0; }),
            dir("edited") + "/plan.json: groups[0].groups[0]: expected an "
                            "array");
  EXPECT_EQ(loadError([](json &m) { m["groups"][0]["groups"][0][1] = "1"; }),
            dir("edited") + "/plan.json: groups[0].groups[0][1]: expected an "
                            "integer");
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
            dir("edited") + "/plan.json: mesh.dp: expected an integer");
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

TEST_F(BundleIOTest, RejectsSideFileEscapingBundle) {
  EXPECT_EQ(
      loadError([](json &m) { m["files"][0]["path"] = "../../etc/passwd"; }),
      dir("edited") + "/plan.json: files[0].path: invalid side-file "
                      "path '../../etc/passwd'");
}

} // namespace
