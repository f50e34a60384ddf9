//===- DataLoader.cpp - Memory-mapped token files -------------------------===//

#include "weft/exec/DataLoader.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace weft::exec {

namespace {
std::string errnoText() { return std::strerror(errno); }
} // namespace

TokenFile::TokenFile(const std::string &path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path + ": cannot open token file: " + errnoText());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path + ": cannot stat token file: " + errnoText());
  }
  if (!S_ISREG(st.st_mode)) { // a directory, a pipe: nothing to map
    ::close(fd);
    throw Error(path + ": not a token file (" +
                (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                ")");
  }
  mapBytes_ = size_t(st.st_size);
  if (mapBytes_ > 0) {
    map_ = ::mmap(nullptr, mapBytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      ::close(fd);
      throw Error(path + ": cannot map token file: " + errnoText());
    }
  }
  ::close(fd);

  const auto *bytes = static_cast<const unsigned char *>(map_);
  int32_t header[3] = {0, 0, 0};
  if (mapBytes_ >= sizeof(header))
    std::memcpy(header, bytes, sizeof(header));
  if (header[0] == kLlmcMagic) {
    format_ = TokenFormat::LlmC;
    size_t headerBytes = kLlmcHeaderInts * sizeof(int32_t);
    if (header[1] != kLlmcVersion)
      throw Error(path + ": llm.c token file version " +
                  std::to_string(header[1]) + " is not supported (expected " +
                  std::to_string(kLlmcVersion) + ", uint16 tokens)");
    if (header[2] < 0 || mapBytes_ < headerBytes ||
        (mapBytes_ - headerBytes) / 2 < size_t(header[2]))
      throw Error(path + ": llm.c header announces " +
                  std::to_string(header[2]) + " tokens but the file has " +
                  std::to_string(mapBytes_) + " bytes (truncated?)");
    tokens_ = reinterpret_cast<const uint16_t *>(bytes + headerBytes);
    numTokens_ = header[2];
  } else {
    if (mapBytes_ % 2 != 0)
      throw Error(path + ": raw uint16 token file has an odd size of " +
                  std::to_string(mapBytes_) + " bytes");
    tokens_ = reinterpret_cast<const uint16_t *>(bytes);
    numTokens_ = int64_t(mapBytes_ / 2);
  }
}

TokenFile::~TokenFile() {
  if (map_)
    ::munmap(map_, mapBytes_);
}

DataLoader::DataLoader(const std::string &path, int64_t seqLen,
                       int64_t globalBatch, int64_t vocab)
    : file_(path), seqLen_(seqLen), globalBatch_(globalBatch) {
  if (seqLen <= 0 || globalBatch <= 0)
    throw Error(path + ": sequence length and global batch must be positive");
  numSequences_ = file_.size() > 0 ? (file_.size() - 1) / seqLen : 0;
  if (numSequences_ < globalBatch)
    throw Error(path + ": data file holds " + std::to_string(file_.size()) +
                " tokens (" + std::to_string(numSequences_) + " sequences of " +
                std::to_string(seqLen) +
                "+1 tokens), fewer than one global batch of " +
                std::to_string(globalBatch) + " sequences");
  // uint16 ids: a vocabulary past 65535 bounds none of them. The maximum
  // per chunk vectorizes; only a chunk over the limit is searched.
  if (vocab > 0 && vocab <= UINT16_MAX) {
    constexpr int64_t kChunk = int64_t(1) << 16;
    for (int64_t first = 0; first < file_.size(); first += kChunk) {
      int64_t end = std::min(file_.size(), first + kChunk);
      uint16_t largest = 0;
      for (int64_t i = first; i < end; ++i)
        largest = std::max(largest, file_[i]);
      if (largest < vocab)
        continue;
      for (int64_t i = first; i < end; ++i)
        if (file_[i] >= vocab)
          throw Error(path + ": token " + std::to_string(file_[i]) +
                      " at token index " + std::to_string(i) +
                      " is outside the model's vocabulary of " +
                      std::to_string(vocab) +
                      " words (a file tokenized for another vocabulary?)");
    }
  }
}

uint32_t TokenFile::fingerprint() const {
  constexpr int64_t kWindows = 64, kWindowTokens = 8192;
  uint32_t crc = crc32c(&numTokens_, sizeof(numTokens_));
  if (numTokens_ <= kWindows * kWindowTokens)
    return crc32c(tokens_, size_t(numTokens_) * 2, crc);
  for (int64_t w = 0; w < kWindows; ++w) {
    int64_t first = w * (numTokens_ - kWindowTokens) / (kWindows - 1);
    crc = crc32c(tokens_ + first, size_t(kWindowTokens) * 2, crc);
  }
  return crc;
}

int64_t DataLoader::sequenceOf(int64_t step, int64_t slot) const {
  // Modular arithmetic in two parts so large step counts cannot overflow.
  int64_t base = (step % numSequences_) * (globalBatch_ % numSequences_);
  return (base % numSequences_ + slot) % numSequences_;
}

void DataLoader::read(int64_t step, int64_t firstSlot, int64_t count,
                      int32_t *tokens, int32_t *targets) const {
  for (int64_t row = 0; row < count; ++row) {
    int64_t start = sequenceOf(step, firstSlot + row) * seqLen_;
    for (int64_t t = 0; t < seqLen_; ++t) {
      tokens[row * seqLen_ + t] = file_[start + t];
      if (targets)
        targets[row * seqLen_ + t] = file_[start + t + 1];
    }
  }
}

void writeLlmcTokens(const std::string &path, const uint16_t *tokens,
                     int64_t count) {
  if (count > INT32_MAX)
    throw Error(path + ": " + std::to_string(count) +
                " tokens exceed the llm.c header's int32 count");
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE *out = std::fopen(tmp.c_str(), "wb");
  if (!out)
    throw Error(tmp + ": cannot create: " + errnoText());
  int32_t header[kLlmcHeaderInts] = {kLlmcMagic, kLlmcVersion, int32_t(count)};
  bool ok = std::fwrite(header, sizeof(header), 1, out) == 1 &&
            std::fwrite(tokens, sizeof(uint16_t), size_t(count), out) ==
                size_t(count);
  ok = std::fflush(out) == 0 && ::fsync(fileno(out)) == 0 && ok;
  ok = std::fclose(out) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write token file: " + errnoText());
  }
}

} // namespace weft::exec
