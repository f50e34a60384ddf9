//===- JsonFile.h - Reading a JSON input file ------------------*- C++ -*-===//
//
// Internal to planner/lib: cluster and DeepSpeed files are read the same way
// and fail with the same one-line messages.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_LIB_JSONFILE_H
#define WEFT_PLANNER_LIB_JSONFILE_H

#include <nlohmann/json.hpp>

#include <string>

namespace weft::planner::detail {

/// Parses `path`; throws Error "<path>: cannot open <what>" or
/// "<path>: invalid JSON: <reason>" (on one line).
nlohmann::json readJsonFile(const std::string &path, const std::string &what);

} // namespace weft::planner::detail

#endif // WEFT_PLANNER_LIB_JSONFILE_H
