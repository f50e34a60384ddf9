//===- DataLoader.h - Token files and the sample order ----------*- C++ -*-===//
//
// Token files are either llm.c files (a 256 x int32 header with magic
// 20240520, version 1 and the token count, then uint16 tokens) or raw uint16
// tokens (nanoGPT's train.bin). The global sample order does not depend on
// the plan: sequence i is tokens [i*S, i*S + S + 1) (inputs and next-token
// targets), and step k (0-based) takes sequences (k*B + j) mod N for batch
// slots j in [0, B). DP rank d, micro-batch m, row b reads slot
// (d * gradAccum + m) * microBatch + b, so every layout of one global batch
// reads the same sequences.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_DATALOADER_H
#define WEFT_EXEC_DATALOADER_H

#include <cstdint>
#include <string>

namespace weft::exec {

enum class TokenFormat { LlmC, RawU16 };

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderInts = 256;

/// A read-only memory map of a token file. Throws Error naming the file.
class TokenFile {
public:
  explicit TokenFile(const std::string &path);
  ~TokenFile();
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  const std::string &path() const { return path_; }
  TokenFormat format() const { return format_; }
  int64_t size() const { return numTokens_; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }
  /// CRC-32C of the token count and of 64 evenly spaced windows of 8192
  /// tokens (the first and the last included; the whole file when shorter):
  /// about 1 MiB read, whatever the size. It tells another file or another
  /// tokenization apart, not one edited token between the windows.
  uint32_t fingerprint() const;

private:
  std::string path_;
  TokenFormat format_ = TokenFormat::RawU16;
  void *map_ = nullptr;
  size_t mapBytes_ = 0;
  const uint16_t *tokens_ = nullptr;
  int64_t numTokens_ = 0;
};

/// The plan-independent sample order over a token file.
class DataLoader {
public:
  /// Throws Error naming the file if it holds fewer than globalBatch
  /// sequences of seqLen + 1 tokens or, with `vocab` > 0, a token id at or
  /// past `vocab` (which the model's embedding and loss would index out of
  /// bounds: a file tokenized for another vocabulary). The check reads the
  /// whole file once.
  DataLoader(const std::string &path, int64_t seqLen, int64_t globalBatch,
             int64_t vocab = 0);

  int64_t seqLen() const { return seqLen_; }
  int64_t globalBatch() const { return globalBatch_; }
  /// Sequences in the file (N): windows of S + 1 tokens at stride S.
  int64_t numSequences() const { return numSequences_; }
  /// The sequence in batch slot `slot` of step `step` (0-based).
  int64_t sequenceOf(int64_t step, int64_t slot) const;

  /// Writes `count` sequences starting at batch slot `firstSlot` of `step`
  /// as int32: inputs into tokens[count * S] and, when targets is not null,
  /// the next tokens into targets[count * S].
  void read(int64_t step, int64_t firstSlot, int64_t count, int32_t *tokens,
            int32_t *targets) const;

  const TokenFile &file() const { return file_; }

private:
  TokenFile file_;
  int64_t seqLen_;
  int64_t globalBatch_;
  int64_t numSequences_;
};

/// Writes `tokens` as an llm.c token file (temp name + rename). Throws Error.
void writeLlmcTokens(const std::string &path, const uint16_t *tokens,
                     int64_t count);

} // namespace weft::exec

#endif // WEFT_EXEC_DATALOADER_H
