//===- JsonReader.cpp - Typed reads of JSON objects, one-line errors ------===//
#include "weft/plan/JsonReader.h"

using namespace weft::plan;
using nlohmann::json;

JsonReader::JsonReader(const json &value, std::string path,
                       const std::string &file)
    : value(value), rootPath(std::move(path)), file(file) {
  checkObject();
}

JsonReader::JsonReader(const json &value, const JsonReader *parent,
                       std::string key, size_t index)
    : value(value), file(parent->file), parent(parent), key(std::move(key)),
      index(index) {
  checkObject();
}

std::string JsonReader::joinPath(const std::string &path,
                                 const std::string &key) {
  return path.empty() ? key : path + "." + key;
}

std::string JsonReader::indexPath(const std::string &path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

namespace {

/// Whether `item` is an integer an int64_t holds (not 2^63 or more).
bool isInt64(const json &item) {
  return item.is_number_integer() &&
         (!item.is_number_unsigned() ||
          item.get<uint64_t>() <= uint64_t(JsonReader::kMax));
}

} // namespace

std::string JsonReader::found(const json &value) {
  std::string text = value.dump();
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return " (found " + text + ")";
}

std::string JsonReader::where() const {
  if (!parent)
    return rootPath;
  std::string out = joinPath(parent->where(), key);
  return index == kNoIndex ? out : indexPath(out, index);
}

void JsonReader::fail(const std::string &key, const std::string &reason) const {
  throw Error(file + ": " + joinPath(where(), key) + ": " + reason);
}

void JsonReader::checkObject() const {
  if (value.is_object())
    return;
  std::string path = where();
  throw Error(file + ": " + (path.empty() ? "<root>" : path) +
              ": expected an object" + found(value));
}

const json *JsonReader::find(const std::string &key) {
  auto it = value.find(key);
  if (it == value.end())
    return nullptr;
  std::string_view name = it.key(); // stable: the object's own key
  for (std::string_view seen : consumed)
    if (seen == name)
      return &*it;
  consumed.push_back(name);
  return &*it;
}

const json &JsonReader::field(const std::string &key) {
  const json *item = find(key);
  if (!item)
    fail(key, "missing field");
  return *item;
}

const json &JsonReader::typed(const std::string &key,
                              bool (json::*is)() const noexcept,
                              const char *what) {
  const json &item = field(key);
  if (!(item.*is)())
    fail(key, std::string("expected ") + what + found(item));
  return item;
}

int64_t JsonReader::integer(const std::string &key, int64_t low, int64_t high) {
  const json &item = field(key);
  if (isInt64(item) && item.get<int64_t>() >= low &&
      item.get<int64_t>() <= high)
    return item.get<int64_t>();
  std::string range;
  if (high == kMax && low != kMin)
    range = " >= " + std::to_string(low);
  else if (low != kMin || high != kMax)
    range = " in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
  fail(key, "expected an integer" + range + found(item));
}

double JsonReader::number(const std::string &key) {
  return typed(key, &json::is_number, "a number").get<double>();
}

bool JsonReader::boolean(const std::string &key) {
  return typed(key, &json::is_boolean, "true or false").get<bool>();
}

const std::string &JsonReader::string(const std::string &key) {
  return typed(key, &json::is_string, "a string")
      .get_ref<const std::string &>();
}

const json &JsonReader::array(const std::string &key) {
  return typed(key, &json::is_array, "an array");
}

std::vector<int64_t> JsonReader::integers(const std::string &key) {
  std::vector<int64_t> out;
  const json &items = array(key);
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (!isInt64(items[i]))
      fail(indexPath(key, i), "expected an integer" + found(items[i]));
    out.push_back(items[i].get<int64_t>());
  }
  return out;
}

std::vector<std::vector<int64_t>>
JsonReader::integerLists(const std::string &key) {
  std::vector<std::vector<int64_t>> out;
  const json &lists = array(key);
  for (size_t i = 0; i < lists.size(); ++i) {
    std::string listPath = indexPath(key, i);
    if (!lists[i].is_array())
      fail(listPath, "expected an array" + found(lists[i]));
    std::vector<int64_t> &list = out.emplace_back();
    for (size_t j = 0; j < lists[i].size(); ++j) {
      if (!isInt64(lists[i][j]))
        fail(indexPath(listPath, j),
             "expected an integer" + found(lists[i][j]));
      list.push_back(lists[i][j].get<int64_t>());
    }
  }
  return out;
}

JsonReader JsonReader::object(const std::string &key) {
  return JsonReader(field(key), this, key, kNoIndex);
}

JsonReader JsonReader::element(const std::string &key, size_t index) {
  return JsonReader(value.at(key).at(index), this, key, index);
}

JsonReader JsonReader::element(const json &items, const std::string &key,
                               size_t index) {
  return JsonReader(items[index], this, key, index);
}

void JsonReader::finish(const std::string &context) const {
  if (consumed.size() == value.size())
    return;
  for (const auto &item : value.items()) {
    bool seen = false;
    for (std::string_view name : consumed)
      seen = seen || name == item.key();
    if (!seen)
      fail(item.key(), "unexpected field" + context);
  }
}
