//===- JsonFile.cpp - Reading a JSON input file ---------------------------===//
#include "JsonFile.h"

#include "weft/planner/Error.h"

#include <filesystem>
#include <fstream>

nlohmann::json weft::planner::detail::readJsonFile(const std::string &path,
                                                   const std::string &what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(path + ": cannot open " + what + ": is a directory");
  std::ifstream in(path);
  if (!in)
    throw Error(path + ": cannot open " + what);
  auto oneLine = [](std::string reason) {
    for (char &c : reason)
      if (c == '\n' || c == '\r')
        c = ' ';
    return reason;
  };
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error &error) {
    throw Error(path + ": invalid JSON: " + oneLine(error.what()));
  } catch (const std::exception &error) { // a read error
    throw Error(path + ": cannot read " + what + ": " + oneLine(error.what()));
  }
}
