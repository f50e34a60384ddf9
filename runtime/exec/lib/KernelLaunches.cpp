//===- KernelLaunches.cpp - A generated source's launch lines -------------===//
#include "weft/exec/KernelLaunches.h"

#include "weft/exec/Error.h"

#include <cctype>
#include <sstream>

namespace weft::exec {

namespace {

constexpr std::string_view kLaunchPrefix = "// weft-launch: ";

} // namespace

std::vector<GeneratedLaunch> parseLaunches(std::string_view source,
                                           const std::string &path,
                                           std::string_view kernelName) {
  std::string prefix = "weft_";
  for (char c : kernelName)
    prefix += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  prefix += '_';
  std::vector<GeneratedLaunch> launches;
  size_t lineNo = 0;
  for (size_t start = 0; start < source.size();) {
    size_t end = source.find('\n', start);
    if (end == std::string_view::npos)
      end = source.size();
    std::string_view line = source.substr(start, end - start);
    start = end + 1;
    ++lineNo;
    if (line.substr(0, kLaunchPrefix.size()) != kLaunchPrefix)
      continue;
    std::istringstream words(std::string(line.substr(kLaunchPrefix.size())));
    GeneratedLaunch launch;
    std::string gridWord, blockWord, extra;
    bool ok = bool(words >> launch.entry >> gridWord >> launch.grid >>
                   blockWord >> launch.block) &&
              !(words >> extra) && gridWord == "grid" && blockWord == "block" &&
              launch.grid >= 1 && launch.grid <= 0x7fffffff &&
              launch.block >= 1 && launch.block <= 1024;
    if (!ok)
      throw Error(path + ":" + std::to_string(lineNo) +
                  ": malformed launch line (expected '// weft-launch: ENTRY "
                  "grid G block B', 1 <= B <= 1024)");
    std::string_view entry = launch.entry;
    if (!kernelName.empty() &&
        (entry.substr(0, prefix.size()) != prefix ||
         entry.size() == prefix.size() ||
         entry.find_first_not_of("0123456789", prefix.size()) !=
             std::string_view::npos))
      throw Error(path + ":" + std::to_string(lineNo) + ": entry " +
                  launch.entry + " is not one of kernel '" +
                  std::string(kernelName) + "' (" + prefix +
                  "N): the plan names another kernel's source");
    launches.push_back(std::move(launch));
  }
  if (launches.empty())
    throw Error(path + ": no '// weft-launch:' line (not a source of "
                       "weft-generate-kernels, or from an older weftc)");
  return launches;
}

} // namespace weft::exec
