//===- ExecTestUtil.h - Runtime unit-test helpers ---------------*- C++ -*-===//
#ifndef WEFT_TEST_UNIT_EXEC_EXECTESTUTIL_H
#define WEFT_TEST_UNIT_EXEC_EXECTESTUTIL_H

#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

namespace weft::test {

/// A new empty directory under gtest's temporary directory, unique per
/// process and call: `<tag><pid>-<n>-<name>`.
inline std::string freshTestDir(const std::string &tag,
                                const std::string &name) {
  static int counter = 0;
  std::string dir = ::testing::TempDir() + tag + std::to_string(::getpid()) +
                    "-" + std::to_string(counter++) + "-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// A 4096-token llm.c file (byte-level ids (i * 37 + 5) % 256, long enough
/// for any test batch), written once per process.
inline std::string testTokenFile() {
  static const std::string path = [] {
    std::vector<uint16_t> ids(4096);
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = uint16_t((i * 37 + 5) % 256);
    std::string file = freshTestDir("weft-tokens-", "corpus") + "/tokens.bin";
    exec::writeLlmcTokens(file, ids.data(), int64_t(ids.size()));
    return file;
  }();
  return path;
}

/// The message of the weft::exec::Error `body` throws, or "no error".
inline std::string errorOf(const std::function<void()> &body) {
  try {
    body();
  } catch (const exec::Error &error) {
    return error.what();
  }
  return "no error";
}

} // namespace weft::test

#endif // WEFT_TEST_UNIT_EXEC_EXECTESTUTIL_H
