//===- DataLoaderTest.cpp - Token files and the global sample order -------===//

#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace weft::exec;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "weft-data-" + std::to_string(::getpid()) +
         "-" + name;
}

std::vector<uint16_t> ramp(int64_t n) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    tokens[size_t(i)] = uint16_t(i * 7 % 65521);
  return tokens;
}

std::string writeRaw(const std::string &name,
                     const std::vector<uint16_t> &tokens) {
  std::string path = tempPath(name);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(tokens.data()),
            std::streamsize(tokens.size() * 2));
  return path;
}

} // namespace

TEST(DataLoader, LlmcAndRawFilesReadTheSameTokens) {
  std::vector<uint16_t> tokens = ramp(1000);
  std::string llmc = tempPath("llmc.bin");
  writeLlmcTokens(llmc, tokens.data(), int64_t(tokens.size()));
  std::string raw = writeRaw("raw.bin", tokens);
  TokenFile a(llmc), b(raw);
  EXPECT_EQ(a.format(), TokenFormat::LlmC);
  EXPECT_EQ(b.format(), TokenFormat::RawU16);
  ASSERT_EQ(a.size(), 1000);
  ASSERT_EQ(b.size(), 1000);
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a[i], tokens[size_t(i)]);
    EXPECT_EQ(b[i], tokens[size_t(i)]);
  }
}

TEST(DataLoader, SequencesAreShiftedWindowsInGlobalOrder) {
  std::vector<uint16_t> tokens = ramp(100);
  DataLoader data(writeRaw("order.bin", tokens), 8, 3);
  EXPECT_EQ(data.numSequences(), 12); // (100 - 1) / 8
  std::vector<int32_t> in(24), target(24);
  data.read(/*step=*/1, /*firstSlot=*/0, 3, in.data(), target.data());
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t t = 0; t < 8; ++t) {
      size_t start = size_t((3 + row) * 8 + t);
      EXPECT_EQ(in[size_t(row * 8 + t)], tokens[start]);
      EXPECT_EQ(target[size_t(row * 8 + t)], tokens[start + 1]);
    }
  // Step 4 covers slots 12, 13, 14: wraps to sequences 0, 1, 2.
  EXPECT_EQ(data.sequenceOf(4, 0), 0);
  EXPECT_EQ(data.sequenceOf(4, 2), 2);
  EXPECT_EQ(data.sequenceOf(3, 2), 11);
}

TEST(DataLoader, DataParallelSharesConcatenateToTheGlobalBatch) {
  std::vector<uint16_t> tokens = ramp(5000);
  const int64_t seq = 16, global = 8;
  DataLoader data(writeRaw("shares.bin", tokens), seq, global);
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<int32_t> whole(size_t(global * seq));
    data.read(step, 0, global, whole.data(), nullptr);
    // dp 2 x accum 2 x micro 2: rank d, micro-batch m reads slot
    // (d * accum + m) * micro.
    for (int64_t d = 0; d < 2; ++d)
      for (int64_t m = 0; m < 2; ++m) {
        std::vector<int32_t> part(size_t(2 * seq));
        data.read(step, (d * 2 + m) * 2, 2, part.data(), nullptr);
        for (size_t i = 0; i < part.size(); ++i)
          EXPECT_EQ(part[i], whole[size_t((d * 2 + m) * 2 * seq) + i]);
      }
  }
}

TEST(DataLoader, FileShorterThanOneBatchIsAnErrorNamingIt) {
  std::string path = writeRaw("short.bin", ramp(40));
  try {
    DataLoader data(path, 16, 4);
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": data file holds 40 tokens (2 sequences of 16+1 "
                     "tokens), fewer than one global batch of 4 sequences");
  }
}

TEST(DataLoader, TokensOutsideTheVocabularyAreAnErrorNamingTheFirst) {
  // 200000 tokens: the offender sits in the fourth 65536-token chunk.
  std::vector<uint16_t> tokens(200000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint16_t(i % 256);
  std::string path = writeRaw("vocab.bin", tokens);
  EXPECT_NO_THROW(DataLoader(path, 16, 4, 256)); // every id below 256
  EXPECT_NO_THROW(DataLoader(path, 16, 4));      // no vocabulary: no check
  tokens[199999] = 300;
  tokens[150001] = 256;
  path = writeRaw("vocab.bin", tokens);
  try {
    DataLoader data(path, 16, 4, 256);
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              path + ": token 256 at token index 150001 is outside the "
                     "model's vocabulary of 256 words (a file tokenized for "
                     "another vocabulary?)");
  }
  EXPECT_NO_THROW(DataLoader(path, 16, 4, 301));
  EXPECT_NO_THROW(DataLoader(path, 16, 4, 70000)); // past uint16: no check
}

TEST(DataLoader, ADirectoryIsNotATokenFile) {
  std::string dir = tempPath("not-a-file");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  try {
    TokenFile file(dir);
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              dir + ": not a token file (a directory)");
  }
  ::rmdir(dir.c_str());
}

TEST(DataLoader, TruncatedLlmcFileIsRejected) {
  std::vector<uint16_t> tokens = ramp(100);
  std::string path = tempPath("truncated.bin");
  writeLlmcTokens(path, tokens.data(), 100);
  ASSERT_EQ(::truncate(path.c_str(), 1024 + 50), 0);
  EXPECT_THROW(TokenFile file(path), Error);
  EXPECT_THROW(TokenFile file(tempPath("missing.bin")), Error);
}
