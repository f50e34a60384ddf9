//===- JsonReader.h - Typed reads of JSON objects, one-line errors -*- C++
//-*-===//
//
// The reader of every JSON file the runtime loads (a bundle's plan.json, a
// checkpoint's manifest): each field is read with its type (and for integers
// its range), and anything wrong is a weft::plan::Error of one line naming
// the file, the JSON path and the reason, with the value found:
//
//   plan.json: programs[1].streams[0].instructions[4].count: expected an
//   integer >= 0 (found 2.5)
//
// The path is assembled only on failure, from the chain of enclosing
// readers (which must outlive the readers made from them), so loading a
// large plan builds no path strings. finish() rejects the fields that were
// never read (a misspelled or misplaced field is an error, not silently
// ignored data); a reader that tolerates fields it does not know skips it.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_JSONREADER_H
#define WEFT_PLAN_JSONREADER_H

#include "weft/plan/Error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::plan {

class JsonReader {
public:
  /// Reads `value`, an object at JSON path `path` ("" for the root) of
  /// `file` (the name errors start with; it must outlive the reader).
  JsonReader(const nlohmann::json &value, std::string path,
             const std::string &file);

  /// The full JSON path of this object, e.g. "programs[1].streams[0]".
  std::string where() const;
  /// Throws "<file>: <where>.<key>: <reason>".
  [[noreturn]] void fail(const std::string &key,
                         const std::string &reason) const;

  bool has(const std::string &key) const { return value.contains(key); }
  /// The field `key` (marked as read), or nullptr when it is absent.
  const nlohmann::json *find(const std::string &key);
  /// The field `key`; missing is an error.
  const nlohmann::json &field(const std::string &key);

  static constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  /// An integer in [low, high] (2.5, "5" and 2^63 are not).
  int64_t integer(const std::string &key, int64_t low = kMin,
                  int64_t high = kMax);
  double number(const std::string &key);
  bool boolean(const std::string &key);
  const std::string &string(const std::string &key);
  const nlohmann::json &array(const std::string &key);
  std::vector<int64_t> integers(const std::string &key);
  /// An array of arrays of integers, e.g. the groups of a group family.
  std::vector<std::vector<int64_t>> integerLists(const std::string &key);

  /// The object field `key`.
  JsonReader object(const std::string &key);
  /// Element `index` of the array field `key` (already read with array()).
  JsonReader element(const std::string &key, size_t index);
  /// Element `index` of `items`, the array field `key` of this object.
  JsonReader element(const nlohmann::json &items, const std::string &key,
                     size_t index);

  /// A string field parsed by `parse`; nullopt is "unknown <what> '<text>'".
  template <typename Enum>
  Enum enumeration(const std::string &key,
                   std::optional<Enum> (*parse)(std::string_view),
                   const char *what) {
    const std::string &text = string(key);
    std::optional<Enum> parsed = parse(text);
    if (!parsed)
      fail(key, "unknown " + std::string(what) + " '" + text + "'");
    return *parsed;
  }

  /// Rejects the fields that were never read ("unexpected field" +
  /// `context`).
  void finish(const std::string &context) const;

  /// " (found <value>)", the value's JSON cut to 40 characters.
  static std::string found(const nlohmann::json &value);
  static std::string joinPath(const std::string &path, const std::string &key);
  static std::string indexPath(const std::string &path, size_t index);

private:
  static constexpr size_t kNoIndex = size_t(-1);

  JsonReader(const nlohmann::json &value, const JsonReader *parent,
             std::string key, size_t index);
  void checkObject() const;
  /// The field `key`, which must satisfy `is`, else "expected <what>".
  const nlohmann::json &typed(const std::string &key,
                              bool (nlohmann::json::*is)() const noexcept,
                              const char *what);

  const nlohmann::json &value;
  std::string rootPath; // the path of a reader without parent
  const std::string &file;
  const JsonReader *parent = nullptr;
  std::string key;
  size_t index = kNoIndex;
  std::vector<std::string_view> consumed;
};

} // namespace weft::plan

#endif // WEFT_PLAN_JSONREADER_H
