//===- Export.cpp - Checkpoint to Hugging Face safetensors ----------------===//
//
// Each rank file is read whole (and checksummed) once; every parameter's
// shard in it is scattered into the global fp32 tensor. Replicas must agree
// bit for bit and every element must be covered, so a plan whose shard specs
// the exporter misreads fails loudly instead of writing a wrong model.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Export.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"
#include "weft/plan/Serialize.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <unistd.h>

namespace weft::exec {

namespace {

using plan::Bundle;
using plan::Parameter;
using plan::ShardSpec;

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

float loadElement(const std::byte *p, plan::DType dtype) {
  uint32_t bits = 0;
  if (dtype == plan::DType::BF16) {
    uint16_t half;
    std::memcpy(&half, p, 2);
    bits = uint32_t(half) << 16; // bf16 is the top half of an f32
  } else {
    std::memcpy(&bits, p, 4);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// Buffers that `role`'s optimizer_step writes as its parameter operand:
/// they hold the step's update at full precision (the fp32 master under
/// mixed precision, the owned shard under ZeRO).
std::vector<bool> optimizerOutputs(const plan::Program &program) {
  std::vector<bool> written(program.buffers.size(), false);
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions)
      if (inst.opcode == plan::Opcode::OptimizerStep && !inst.writes.empty())
        written[size_t(inst.writes[0].buffer)] = true;
  return written;
}

/// One parameter being reassembled.
struct Tensor {
  const Parameter *param = nullptr;
  std::vector<const ShardSpec *> byRole; // the spec read per role, or null
  std::vector<float> values;
  std::vector<bool> covered;
};

class Exporter {
public:
  Exporter(const Bundle &bundle, const std::string &bundleDir)
      : bundle(bundle), planPath(bundleDir + "/plan.json") {
    for (const plan::Program &program : bundle.programs)
      optimizerWritten.push_back(optimizerOutputs(program));
  }

  /// The global tensors, in bundle order; `step` is the checkpoint's step.
  std::vector<Tensor> collect(const std::string &stepDir, int64_t &step);

private:
  void choose(Tensor &tensor);
  void scatter(Tensor &tensor, const ShardSpec &spec, int64_t dpIndex,
               const std::byte *payload, const std::string &rankFile);
  [[noreturn]] void fail(const Parameter &param, const std::string &why) {
    throw Error(planPath + ": parameter '" + param.name + "': " + why);
  }

  const Bundle &bundle;
  std::string planPath;
  std::vector<std::vector<bool>> optimizerWritten; // by role, by buffer
};

void Exporter::choose(Tensor &tensor) {
  const Parameter &param = *tensor.param;
  if (param.hfName.empty())
    fail(param, "no Hugging Face name");
  tensor.byRole.assign(bundle.programs.size(), nullptr);
  for (const ShardSpec &spec : param.shards) {
    const plan::Program &program = bundle.programs[size_t(spec.role)];
    const plan::Buffer &buffer = program.buffers[size_t(spec.buffer)];
    const std::vector<bool> &written = optimizerWritten[size_t(spec.role)];
    const ShardSpec *&chosen = tensor.byRole[size_t(spec.role)];
    // Prefer the optimizer's own output; any other copy is derived from it.
    if (!chosen ||
        (!written[size_t(chosen->buffer)] && written[size_t(spec.buffer)]))
      chosen = &spec;
    if (buffer.region != plan::Region::Persistent)
      fail(param, "shard in arena buffer '" + buffer.name +
                      "' (not saved in checkpoints)");
    if (buffer.dtype != plan::DType::F32 && buffer.dtype != plan::DType::BF16)
      fail(param, "shard in a " + std::string(plan::toString(buffer.dtype)) +
                      " buffer (export reads f32 and bf16)");
    int64_t ndim = int64_t(param.shape.size());
    if (spec.dim < -1 || spec.dim >= ndim ||
        (spec.dim >= 0 && (spec.length <= 0 || spec.start < 0 ||
                           spec.start >= param.shape[size_t(spec.dim)])))
      fail(param, "shard slice dim " + std::to_string(spec.dim) + " [" +
                      std::to_string(spec.start) + ", +" +
                      std::to_string(spec.length) + ") outside the tensor");
    if (spec.zeroShards != 1 && spec.zeroShards != bundle.mesh.dp)
      fail(param, "zero_shards " + std::to_string(spec.zeroShards) +
                      " is neither 1 nor the DP degree " +
                      std::to_string(bundle.mesh.dp));
    std::vector<int64_t> slice = param.shape;
    if (spec.dim >= 0)
      slice[size_t(spec.dim)] = spec.length;
    int64_t chunk = spec.paddedElements / spec.zeroShards;
    if (spec.paddedElements < product(slice) ||
        spec.paddedElements % spec.zeroShards != 0 ||
        spec.offset + chunk * plan::elementBytes(buffer.dtype) > buffer.size)
      fail(param, "shard of " + std::to_string(spec.paddedElements) +
                      " padded elements does not fit buffer '" + buffer.name +
                      "'");
  }
  if (param.shards.empty())
    fail(param, "no shard holds it");
  if (param.hfTransposed && param.shape.size() != 2)
    fail(param, "hf_transposed on a tensor of rank " +
                    std::to_string(param.shape.size()));
  int64_t elements = product(param.shape);
  tensor.values.assign(size_t(elements), 0.0f);
  tensor.covered.assign(size_t(elements), false);
}

void Exporter::scatter(Tensor &tensor, const ShardSpec &spec, int64_t dpIndex,
                       const std::byte *payload, const std::string &rankFile) {
  const Parameter &param = *tensor.param;
  const plan::Buffer &buffer =
      bundle.programs[size_t(spec.role)].buffers[size_t(spec.buffer)];
  int64_t bytes = plan::elementBytes(buffer.dtype);
  int64_t chunk = spec.paddedElements / spec.zeroShards;
  int64_t first = spec.zeroShards == 1 ? 0 : dpIndex * chunk;
  // Row-major slice index -> global index: the slice differs from the global
  // tensor only along `dim`, by `start` and a length that may run past the
  // global extent (vocabulary padding, dropped here).
  int64_t extent = 1, inner = 1, length = 1;
  if (spec.dim >= 0) {
    extent = param.shape[size_t(spec.dim)];
    length = spec.length;
    for (size_t d = size_t(spec.dim) + 1; d < param.shape.size(); ++d)
      inner *= param.shape[d];
  }
  int64_t sliceElements = spec.dim >= 0 ? product(param.shape) / extent * length
                                        : product(param.shape);
  const std::byte *base = payload + buffer.offset + spec.offset;
  for (int64_t k = 0; k < chunk; ++k) {
    int64_t i = first + k;
    if (i >= sliceElements)
      break; // ZeRO padding
    int64_t global = i;
    if (spec.dim >= 0) {
      int64_t outer = i / (length * inner),
              row = i / inner % length + spec.start;
      if (row >= extent)
        continue;
      global = (outer * extent + row) * inner + i % inner;
    }
    float value = loadElement(base + k * bytes, buffer.dtype);
    float &slot = tensor.values[size_t(global)];
    if (tensor.covered[size_t(global)] && std::memcmp(&slot, &value, 4) != 0)
      throw Error(rankFile + ": parameter '" + param.name + "' element " +
                  std::to_string(global) + " differs between replicas");
    slot = value;
    tensor.covered[size_t(global)] = true;
  }
}

std::vector<Tensor> Exporter::collect(const std::string &stepDir,
                                      int64_t &step) {
  std::string hash = plan::contentHash(plan::toJson(bundle), bundle.files);
  int64_t world = bundle.mesh.worldSize();
  Manifest manifest = loadManifest(stepDir, hash, int(world));
  step = manifest.step;
  std::vector<Tensor> tensors(bundle.parameters.size());
  for (size_t p = 0; p < tensors.size(); ++p) {
    tensors[p].param = &bundle.parameters[p];
    choose(tensors[p]);
  }
  std::vector<std::byte> payload;
  for (int64_t rank = 0; rank < world; ++rank) {
    int64_t role = plan::rankToRole(bundle, rank);
    RankFileInfo expected;
    expected.bundleHash = hash;
    expected.rank = int32_t(rank);
    expected.worldSize = int32_t(world);
    expected.step = manifest.step;
    expected.dataSamples = manifest.step * bundle.training.globalBatch;
    expected.payloadBytes = bundle.programs[size_t(role)].persistentBytes;
    std::string file = stepDir + "/" + manifest.files[size_t(rank)];
    payload.resize(size_t(expected.payloadBytes));
    readRankFile(file, expected, manifest.results[size_t(rank)],
                 payload.data());
    int64_t dpIndex = bundle.mesh.coordOf(rank).dp;
    for (Tensor &tensor : tensors)
      if (const ShardSpec *spec = tensor.byRole[size_t(role)])
        scatter(tensor, *spec, dpIndex, payload.data(), file);
  }
  for (Tensor &tensor : tensors)
    for (size_t i = 0; i < tensor.covered.size(); ++i)
      if (!tensor.covered[i])
        throw Error(planPath + ": parameter '" + tensor.param->name +
                    "': element " + std::to_string(i) +
                    " is held by no rank's shard");
  return tensors;
}

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
  std::vector<Tensor> tensors =
      Exporter(bundle, bundleDir).collect(stepDir, stats.step);

  // Safetensors: tensors in key order, contiguous; tied weights are one
  // parameter in the plan, so each name appears once (transformers re-ties).
  std::map<std::string, Tensor *> byName;
  for (Tensor &tensor : tensors)
    if (!byName.emplace(tensor.param->hfName, &tensor).second)
      throw Error(bundleDir +
                  "/plan.json: two parameters share the Hugging "
                  "Face name '" +
                  tensor.param->hfName + "'");
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (auto &[name, tensor] : byName) {
    std::vector<int64_t> shape = tensor->param->shape;
    if (tensor->param->hfTransposed) {
      // Weft keeps [in, out]; Hugging Face nn.Linear is [out, in].
      std::vector<float> out(tensor->values.size());
      int64_t rows = shape[0], cols = shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          out[size_t(c * rows + r)] = tensor->values[size_t(r * cols + c)];
      tensor->values = std::move(out);
      shape = {cols, rows};
    }
    int64_t bytes = int64_t(tensor->values.size()) * 4;
    header[name] = {{"dtype", "F32"},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    ++stats.tensors;
    stats.elements += int64_t(tensor->values.size());
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
      writeAll(fd, tensor->values.data(), tensor->values.size() * 4, tmp);
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
