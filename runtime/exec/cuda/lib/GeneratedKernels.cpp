//===- GeneratedKernels.cpp - NVRTC and the kernel cache ------------------===//
#include "weft/exec/cuda/GeneratedKernels.h"

#include "weft/exec/Error.h"
#include "weft/kernels/KernelHeaderText.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Sha256.h"

#include <nvrtc.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

namespace weft::exec::cuda {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kCacheMagic = "weft-cubin sha256 ";

/// The options every NVRTC compilation gets besides -arch (part of the key).
const std::vector<std::string> &rtcOptions() {
  static const std::vector<std::string> options = {"-std=c++17"};
  return options;
}

/// The first line of `log` that says "error" (else its first line).
std::string firstError(const std::string &log) {
  std::istringstream lines(log);
  std::string line, first;
  while (std::getline(lines, line)) {
    if (first.empty() && !line.empty())
      first = line;
    if (line.find("error") != std::string::npos)
      return line;
  }
  return first.empty() ? "no log" : first;
}

std::string cacheKey(std::string_view source, int arch) {
  plan::Sha256 hash;
  auto field = [&](std::string_view text) {
    hash.update(std::to_string(text.size()));
    hash.update(std::string_view("\0", 1));
    hash.update(text);
  };
  field("nvrtc " + nvrtcVersion());
  field("sm_" + std::to_string(arch));
  for (const std::string &option : rtcOptions())
    field(option);
  for (const kernels::EmbeddedHeader &header : kernels::kernelHeaders()) {
    field(header.path);
    field(header.text);
  }
  field(source);
  return hash.finishHex();
}

/// The cubin of cache entry `text`, or empty when the entry is malformed or
/// its hash does not match.
std::string cubinOfEntry(const std::string &text) {
  size_t eol = text.find('\n');
  if (eol == std::string::npos ||
      text.compare(0, kCacheMagic.size(), kCacheMagic) != 0)
    return {};
  std::string expected =
      text.substr(kCacheMagic.size(), eol - kCacheMagic.size());
  std::string cubin = text.substr(eol + 1);
  if (cubin.empty() || plan::sha256Hex(cubin) != expected)
    return {};
  return cubin;
}

std::string compileWithNvrtc(std::string_view source, const std::string &path,
                             int arch) {
  // The embedded headers are string literals: NUL-terminated.
  std::vector<const char *> textPtrs, namePtrs;
  for (const kernels::EmbeddedHeader &header : kernels::kernelHeaders()) {
    textPtrs.push_back(header.text.data());
    namePtrs.push_back(header.path.data());
  }
  std::string sourceText(source);
  nvrtcProgram program = nullptr;
  if (nvrtcResult rc = nvrtcCreateProgram(&program, sourceText.c_str(),
                                          path.c_str(), int(textPtrs.size()),
                                          textPtrs.data(), namePtrs.data());
      rc != NVRTC_SUCCESS)
    throw Error(path + ": nvrtcCreateProgram: " + nvrtcGetErrorString(rc));
  struct Destroy {
    nvrtcProgram *program;
    ~Destroy() { nvrtcDestroyProgram(program); }
  } destroy{&program};
  std::vector<std::string> options = rtcOptions();
  options.push_back("-arch=sm_" + std::to_string(arch));
  std::vector<const char *> optionPtrs;
  for (const std::string &option : options)
    optionPtrs.push_back(option.c_str());
  nvrtcResult rc =
      nvrtcCompileProgram(program, int(optionPtrs.size()), optionPtrs.data());
  if (rc != NVRTC_SUCCESS) {
    size_t logSize = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(program, &logSize) == NVRTC_SUCCESS &&
        logSize > 1) {
      log.resize(logSize);
      nvrtcGetProgramLog(program, log.data());
      log.resize(logSize - 1);
    }
    throw Error(path + ": NVRTC (sm_" + std::to_string(arch) +
                "): " + nvrtcGetErrorString(rc) + ": " + firstError(log));
  }
  size_t size = 0;
  if (nvrtcGetCUBINSize(program, &size) != NVRTC_SUCCESS || size == 0)
    throw Error(path + ": NVRTC produced no cubin for sm_" +
                std::to_string(arch));
  std::string cubin(size, '\0');
  if (nvrtcGetCUBIN(program, cubin.data()) != NVRTC_SUCCESS)
    throw Error(path + ": nvrtcGetCUBIN failed");
  return cubin;
}

} // namespace

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string defaultKernelCacheDir() {
  if (const char *dir = std::getenv("WEFT_KERNEL_CACHE"))
    return std::string_view(dir) == "off" ? std::string() : std::string(dir);
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/weft/kernels";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/weft/kernels";
  return {};
}

KernelCompiler::KernelCompiler(std::string cacheDir)
    : cacheDir_(std::move(cacheDir)) {}

std::string KernelCompiler::cubin(std::string_view source,
                                  const std::string &path, int arch) {
  // A cache that cannot be written is still read (a shared, read-only one
  // filled beforehand).
  bool useCache = !cacheDir_.empty();
  fs::path entry;
  if (useCache) {
    entry = fs::path(cacheDir_) / (cacheKey(source, arch) + ".cubin");
    if (std::optional<std::string> text = plan::readFile(entry.string())) {
      std::string cubin = cubinOfEntry(*text);
      if (!cubin.empty()) {
        ++cacheHits_;
        return cubin;
      }
      warnings_.push_back("kernel cache: " + entry.string() +
                          " is corrupt (hash mismatch); recompiling " + path);
    }
  }
  std::string cubin = compileWithNvrtc(source, path, arch);
  ++compiled_;
  if (useCache && !cacheUnwritable_) {
    std::error_code ec;
    fs::create_directories(cacheDir_, ec);
    std::string error;
    if (ec)
      error = "cannot create " + cacheDir_ + ": " + ec.message();
    else
      try {
        plan::writeFileAtomic(entry.string(), std::string(kCacheMagic) +
                                                  plan::sha256Hex(cubin) +
                                                  "\n" + cubin);
      } catch (const plan::Error &failure) {
        error = failure.what();
      }
    if (!error.empty()) {
      cacheUnwritable_ = true;
      warnings_.push_back("kernel cache: " + error +
                          "; compiled kernels are not cached");
    }
  }
  return cubin;
}

} // namespace weft::exec::cuda
