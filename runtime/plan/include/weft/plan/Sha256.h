//===- Sha256.h - SHA-256 for bundle content hashes -------------*- C++ -*-===//
//
// A small self-contained implementation so the runtime needs no crypto
// library just to check that a bundle was not edited or truncated.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_SHA256_H
#define WEFT_PLAN_SHA256_H

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::plan {

class Sha256 {
public:
  Sha256();
  void update(std::string_view data);
  /// Finish and return the 32-byte digest; the object must not be reused.
  std::array<uint8_t, 32> finish();
  /// Finish and return the digest as 64 lowercase hex digits.
  std::string finishHex();

private:
  void compressBlock(const uint8_t *block);

  std::array<uint32_t, 8> state;
  std::array<uint8_t, 64> buffer;
  uint64_t totalBytes = 0;
};

/// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256Hex(std::string_view data);

} // namespace weft::plan

#endif // WEFT_PLAN_SHA256_H
