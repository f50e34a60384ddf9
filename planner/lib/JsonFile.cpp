//===- JsonFile.cpp - Reading a JSON input file ---------------------------===//
#include "JsonFile.h"

#include "weft/planner/Error.h"

#include <fstream>

nlohmann::json weft::planner::detail::readJsonFile(const std::string &path,
                                                   const std::string &what) {
  std::ifstream in(path);
  if (!in)
    throw Error(path + ": cannot open " + what);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error &error) {
    std::string reason = error.what();
    for (char &c : reason)
      if (c == '\n' || c == '\r')
        c = ' ';
    throw Error(path + ": invalid JSON: " + reason);
  }
}
