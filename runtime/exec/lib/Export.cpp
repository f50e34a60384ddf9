//===- Export.cpp - Checkpoint to Hugging Face safetensors ----------------===//
//
// The checkpoint is reassembled into global tensors by readGlobalState
// (Reshard.cpp: every ShardSpec of every role, TP slices, vocabulary padding,
// ZeRO pieces; replicas must agree and every element must be covered), then
// written under Hugging Face names and layouts.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Export.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"
#include "weft/exec/Reshard.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <unistd.h>

namespace weft::exec {

namespace {

void writeAll(int fd, const void *data, size_t bytes, const std::string &path) {
  auto *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw Error(path + ": write failed: " + std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

} // namespace

ExportStats exportSafetensors(const plan::Bundle &bundle,
                              const std::string &bundleDir,
                              const std::string &stepDir,
                              const std::string &outPath) {
  ExportStats stats;
  for (const plan::Parameter &param : bundle.parameters) {
    std::string where = bundleDir + "/plan.json: parameter '" + param.name;
    if (param.hfName.empty())
      throw Error(where + "': no Hugging Face name");
  }
  GlobalState state = readGlobalState(bundle, bundleDir, stepDir, false);
  stats.step = state.step;
  std::vector<GlobalTensor> &tensors = state.tensors;

  // Safetensors: tensors in key order, contiguous; tied weights are one
  // parameter in the plan, so each name appears once (the loader checks;
  // transformers re-ties).
  std::map<std::string, GlobalTensor *> byName;
  for (GlobalTensor &tensor : tensors)
    byName.emplace(tensor.param->hfName, &tensor);
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (auto &[name, tensor] : byName) {
    std::vector<int64_t> shape = tensor->param->shape;
    if (tensor->param->hfTransposed) {
      // Weft keeps [in, out]; Hugging Face nn.Linear is [out, in].
      std::vector<float> out(tensor->value.size());
      int64_t rows = shape[0], cols = shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out[size_t(c * rows + r)] = tensor->value[size_t(r * cols + c)];
      tensor->value = std::move(out);
      shape = {cols, rows};
    }
    int64_t bytes = int64_t(tensor->value.size()) * 4;
    header[name] = {{"dtype", "F32"},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    ++stats.tensors;
    stats.elements += int64_t(tensor->value.size());
  }
  std::string text = header.dump();
  // The data starts 8-byte aligned; the format allows trailing spaces.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t length = text.size(); // little-endian, as on every supported host

  std::string tmp = outPath + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(tmp + ": cannot create: " + std::strerror(errno));
  try {
    writeAll(fd, &length, 8, tmp);
    writeAll(fd, text.data(), text.size(), tmp);
    for (auto &[name, tensor] : byName)
      writeAll(fd, tensor->value.data(), tensor->value.size() * 4, tmp);
    if (::fsync(fd) != 0)
      throw Error(tmp + ": fsync failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), outPath.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    throw Error(outPath + ": cannot write: " + std::strerror(error));
  }
  size_t slash = outPath.rfind('/');
  syncPath(slash == std::string::npos ? "." : outPath.substr(0, slash + 1));
  return stats;
}

} // namespace weft::exec
