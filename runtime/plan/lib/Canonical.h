//===- Canonical.h - Canonical JSON text without a JSON tree ----*- C++ -*-===//
//
// CanonicalWriter produces exactly what nlohmann::json::dump gives (compact or
// with an indent): sorted keys, ", " / ": " spacing, nlohmann's escaping and
// number formatting. Callers must emit object keys in sorted order (checked).
// Output accumulates in a string, or streams into a Sha256 in chunks.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_LIB_CANONICAL_H
#define WEFT_PLAN_LIB_CANONICAL_H

#include "weft/plan/Bundle.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Sha256.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace weft::plan::detail {

class CanonicalWriter {
public:
  /// `indent` < 0: compact. With `sink`, output goes to the hash instead of
  /// being kept (take() then returns what was not flushed yet).
  explicit CanonicalWriter(int indent, Sha256 *sink = nullptr);

  /// The next container (and everything in it) goes on one line with ", "
  /// and ": " separators: records (instructions, buffers, shards, ...) and
  /// number arrays in the indented form. No effect on the compact form.
  void oneLine() { oneLineNext = indent >= 0; }

  void beginObject();
  void endObject();
  void beginArray();
  void endArray();
  /// The next key of the current object (keys must ascend).
  void key(std::string_view name);

  void integer(int64_t value);
  void unsignedInteger(uint64_t value);
  void number(double value);
  void boolean(bool value);
  void string(std::string_view value);
  /// Any JSON value; with `skipTopKey`, that key of the outermost object is
  /// left out (content_hash when hashing a manifest).
  void value(const nlohmann::json &value, std::string_view skipTopKey = {});

  /// Flush to the sink, if any, and return the text kept.
  std::string take();

private:
  struct Level {
    bool object;
    size_t count;
    std::string_view lastKey;
    bool oneLine = false;
  };
  void open(bool object);
  void beforeValue();
  void separator();
  void close(char bracket);
  void escaped(std::string_view text);
  void flushIfLarge() {
    if (sink && out.size() >= (1u << 20)) {
      sink->update(out);
      out.clear();
    }
  }
  [[noreturn]] void fail(const std::string &reason) const;

  std::string out;
  Sha256 *sink;
  int indent;
  bool afterKey = false;
  bool oneLineNext = false;
  std::vector<Level> stack;
};

/// The manifest of `bundle` as toJson builds it, written into `writer`;
/// content_hash is added when `hash` is not empty.
void writeManifest(CanonicalWriter &writer, const Bundle &bundle,
                   const std::vector<StoredProgram> &stored,
                   std::string_view hash);

/// Feed the side files into `hasher` as contentHash specifies and return
/// the hex digest.
std::string finishContentHash(Sha256 &hasher,
                              const std::map<std::string, std::string> &files);

/// Whether the two instructions serialize identically.
bool sameInstruction(const Instruction &a, const Instruction &b);

} // namespace weft::plan::detail

#endif // WEFT_PLAN_LIB_CANONICAL_H
