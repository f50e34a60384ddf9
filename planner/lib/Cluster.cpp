//===- Cluster.cpp - Cluster JSON parsing and presets ---------------------===//

#include "weft/planner/Cluster.h"
#include "weft/planner/Error.h"

#include "JsonFile.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <sys/stat.h>

using nlohmann::json;

namespace weft::planner {

double Cluster::peakFlops(Precision precision) const {
  switch (precision) {
  case Precision::BF16:
    return gpu.peakTflopsBf16 * 1e12;
  case Precision::FP16:
    return gpu.peakTflopsFp16 * 1e12;
  case Precision::FP32:
    return gpu.peakTflopsFp32 * 1e12;
  }
  return 0;
}

namespace {

/// Strict reader: every access names its JSON path so errors can say which
/// field is wrong; objects are checked for unknown keys.
class StrictReader {
public:
  explicit StrictReader(std::string source) : source(std::move(source)) {}

  [[noreturn]] void fail(const std::string &path,
                         const std::string &reason) const {
    throw Error(source + ": field '" + path + "': " + reason);
  }

  const json &object(const json &parent, const std::string &key,
                     const std::string &prefix,
                     std::initializer_list<const char *> allowedKeys) const {
    const json &value = field(parent, key, prefix);
    std::string path = join(prefix, key);
    if (!value.is_object())
      fail(path, "must be an object, got " + value.dump());
    rejectUnknownKeys(value, path, allowedKeys);
    return value;
  }

  void
  rejectUnknownKeys(const json &object, const std::string &prefix,
                    std::initializer_list<const char *> allowedKeys) const {
    for (auto it = object.begin(); it != object.end(); ++it) {
      bool known = false;
      for (const char *allowed : allowedKeys)
        known |= it.key() == allowed;
      if (!known)
        fail(join(prefix, it.key()), "unknown field");
    }
  }

  std::string string(const json &parent, const std::string &key,
                     const std::string &prefix) const {
    const json &value = field(parent, key, prefix);
    if (!value.is_string() || value.get<std::string>().empty())
      fail(join(prefix, key),
           "must be a non-empty string, got " + value.dump());
    return value.get<std::string>();
  }

  double positiveNumber(const json &parent, const std::string &key,
                        const std::string &prefix) const {
    const json &value = field(parent, key, prefix);
    if (!value.is_number() || !(value.get<double>() > 0) ||
        !std::isfinite(value.get<double>()))
      fail(join(prefix, key), "must be a positive number, got " + value.dump());
    return value.get<double>();
  }

  /// An optional number in (low, high], or [low, high] with `lowIncluded`.
  std::optional<double> optionalNumberIn(const json &parent,
                                         const std::string &key,
                                         const std::string &prefix, double low,
                                         bool lowIncluded, double high) const {
    if (parent.find(key) == parent.end())
      return std::nullopt;
    const json &value = parent.at(key);
    double number = value.is_number() ? value.get<double>() : NAN;
    if (!std::isfinite(number) || number > high ||
        (lowIncluded ? number < low : number <= low)) {
      std::ostringstream range;
      range << (lowIncluded ? "[" : "(") << low << ", " << high << "]";
      fail(join(prefix, key),
           "must be a number in " + range.str() + ", got " + value.dump());
    }
    return number;
  }

  const json *
  optionalObject(const json &parent, const std::string &key,
                 const std::string &prefix,
                 std::initializer_list<const char *> allowedKeys) const {
    if (parent.find(key) == parent.end())
      return nullptr;
    return &object(parent, key, prefix, allowedKeys);
  }

  int64_t positiveInteger(const json &parent, const std::string &key,
                          const std::string &prefix) const {
    const json &value = field(parent, key, prefix);
    if (!value.is_number_integer() || value.get<int64_t>() <= 0)
      fail(join(prefix, key),
           "must be a positive integer, got " + value.dump());
    return value.get<int64_t>();
  }

private:
  static std::string join(const std::string &prefix, const std::string &key) {
    return prefix.empty() ? key : prefix + "." + key;
  }

  const json &field(const json &parent, const std::string &key,
                    const std::string &prefix) const {
    auto it = parent.find(key);
    if (it == parent.end())
      fail(join(prefix, key), "missing");
    return *it;
  }

  std::string source;
};

bool fileExists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Presets. Peak TFLOP/s are dense tensor-core numbers from the vendor data
// sheets; "fp32" is the plain FP32 rate (no TF32), which is what PyTorch uses
// for fp32 matmuls by default (torch.backends.cuda.matmul.allow_tf32=False).
// Latencies are typical NCCL per-hop latencies (NVLink ~2 us, InfiniBand
// ~5 us, from nccl-tests small-message all-reduce times).
struct Preset {
  const char *name;
  std::function<Cluster()> make;
};

Cluster dgxA100() {
  // DGX A100 80GB: A100-SXM4-80GB, HBM2e 2039 GB/s, NVLink3 600 GB/s
  // bidirectional = 300 GB/s per direction, 8x HDR 200 Gb/s InfiniBand per
  // node = 25 GB/s per GPU.
  // Host (DGX A100 user guide): 2x AMD EPYC 7742 (2 x 64 cores), 2 TB DDR4,
  // 8 channels of DDR4-3200 per socket = 2 x 204.8 GB/s. GPUs hang off PCIe
  // Gen4 switches two per x16 uplink: ~25 GB/s pinned for one GPU
  // (cudaMemcpy bandwidthTest), ~12 GB/s each with all eight copying.
  Cluster cluster{"dgx-a100-80g",
                  1,
                  8,
                  GpuSpec{"A100-SXM4-80GB", 80, 312, 312, 19.5, 2039},
                  300,
                  25,
                  2,
                  5};
  cluster.host = HostSpec{2048, 409.6, 128, 12};
  return cluster;
}

Cluster dgxH100() {
  // DGX H100: H100-SXM5-80GB, HBM3 3350 GB/s, NVLink4 900 GB/s
  // bidirectional = 450 GB/s per direction, 8x NDR 400 Gb/s per node = 50 GB/s
  // per GPU.
  // Host (DGX H100 user guide): 2x Xeon Platinum 8480C (2 x 56 cores), 2 TB
  // DDR5-4800, 8 channels per socket = 2 x 307.2 GB/s. PCIe Gen5 x16 per GPU
  // (~50 GB/s pinned alone); with all eight copying through the shared
  // switches and root ports, ~25 GB/s each.
  Cluster cluster{"dgx-h100-80g",
                  1,
                  8,
                  GpuSpec{"H100-SXM5-80GB", 80, 989, 989, 67, 3350},
                  450,
                  50,
                  2,
                  5};
  cluster.host = HostSpec{2048, 614.4, 112, 25};
  return cluster;
}

const std::vector<Preset> &presets() {
  static const std::vector<Preset> table = {
      {"dgx-a100-80g", dgxA100},
      {"dgx-h100-80g", dgxH100},
      {"h100-1gpu",
       [] {
         // One GPU with an eighth of a DGX H100's host (what single-GPU
         // cloud instances of 8-GPU machines get), and the full Gen5 pinned
         // bandwidth of a GPU copying alone.
         Cluster c = dgxH100();
         c.name = "h100-1gpu";
         c.gpusPerNode = 1;
         c.host = HostSpec{256, 76.8, 14, 50};
         return c;
       }},
      // H200 SXM: the H100's compute (989 TF/s dense bf16), 141 GB HBM3e at
      // 4.8 TB/s; the device machines lent for issue 6 have one.
      {"h200-1gpu",
       [] {
         Cluster c = dgxH100();
         c.name = "h200-1gpu";
         c.gpusPerNode = 1;
         c.gpu = GpuSpec{"H200-SXM-141GB", 140, 989, 989, 67, 4800};
         c.host = HostSpec{256, 76.8, 14, 50};
         return c;
       }},
      // V100-SXM2-32GB: 125 TF/s fp16 tensor cores, no bf16 units (bf16 runs
      // at the 15.7 TF/s fp32 rate), 900 GB/s HBM2, NVLink2 150 GB/s per
      // direction, EDR 100 Gb/s = 12.5 GB/s per GPU across nodes. Host of a
      // DGX Station V100 (4x V100 32GB): one Xeon E5-2698 v4 (20 cores),
      // 256 GB DDR4-2400 on 4 channels = 76.8 GB/s, PCIe Gen3 x16 ~12 GB/s
      // pinned per GPU.
      {"v100-32g-4gpu",
       [] {
         Cluster c{"v100-32g-4gpu",
                   1,
                   4,
                   GpuSpec{"V100-SXM2-32GB", 32, 15.7, 125, 15.7, 900},
                   150,
                   12.5,
                   2,
                   5};
         c.host = HostSpec{256, 76.8, 20, 12};
         return c;
       }},
      // Simulated ranks for demos and CPU tests of the runtime: 8 processes
      // on one host, shared-memory transport. The "host" is a simulated one
      // (64 GiB, 8 cores, 20 GB/s DRAM, 10 GB/s copies) so that offload can
      // be exercised without GPUs.
      {"cpu-sim-8",
       [] {
         Cluster c{
             "cpu-sim-8", 1,    8,  GpuSpec{"cpu-sim", 8, 0.5, 0.5, 1, 20},
             10,          1.25, 10, 50};
         c.host = HostSpec{64, 20, 8, 10};
         return c;
       }},
  };
  return table;
}

} // namespace

Cluster parseCluster(const json &root, const std::string &source) {
  StrictReader reader(source);
  if (!root.is_object())
    throw Error(source + ": must be a JSON object, got " + root.dump());
  reader.rejectUnknownKeys(
      root, "",
      {"name", "nodes", "gpus_per_node", "gpu", "intra_node_bandwidth_gb_s",
       "inter_node_bandwidth_gb_s", "intra_node_latency_us",
       "inter_node_latency_us", "host", "cost_constants"});
  Cluster cluster;
  cluster.name = reader.string(root, "name", "");
  cluster.nodes = reader.positiveInteger(root, "nodes", "");
  cluster.gpusPerNode = reader.positiveInteger(root, "gpus_per_node", "");
  const json &gpu = reader.object(
      root, "gpu", "",
      {"model", "memory_gib", "peak_tflops", "memory_bandwidth_gb_s"});
  cluster.gpu.model = reader.string(gpu, "model", "gpu");
  cluster.gpu.memoryGib = reader.positiveNumber(gpu, "memory_gib", "gpu");
  const json &peak =
      reader.object(gpu, "peak_tflops", "gpu", {"bf16", "fp16", "fp32"});
  cluster.gpu.peakTflopsBf16 =
      reader.positiveNumber(peak, "bf16", "gpu.peak_tflops");
  cluster.gpu.peakTflopsFp16 =
      reader.positiveNumber(peak, "fp16", "gpu.peak_tflops");
  cluster.gpu.peakTflopsFp32 =
      reader.positiveNumber(peak, "fp32", "gpu.peak_tflops");
  cluster.gpu.memoryBandwidthGBs =
      reader.positiveNumber(gpu, "memory_bandwidth_gb_s", "gpu");
  cluster.intraNodeBandwidthGBs =
      reader.positiveNumber(root, "intra_node_bandwidth_gb_s", "");
  cluster.interNodeBandwidthGBs =
      reader.positiveNumber(root, "inter_node_bandwidth_gb_s", "");
  cluster.intraNodeLatencyUs =
      reader.positiveNumber(root, "intra_node_latency_us", "");
  cluster.interNodeLatencyUs =
      reader.positiveNumber(root, "inter_node_latency_us", "");
  if (const json *host =
          reader.optionalObject(root, "host", "",
                                {"memory_gib", "memory_bandwidth_gb_s", "cores",
                                 "pinned_bandwidth_gb_s"})) {
    HostSpec spec;
    spec.memoryGib = reader.positiveNumber(*host, "memory_gib", "host");
    spec.memoryBandwidthGBs =
        reader.positiveNumber(*host, "memory_bandwidth_gb_s", "host");
    spec.cores = reader.positiveInteger(*host, "cores", "host");
    spec.pinnedBandwidthGBs =
        reader.positiveNumber(*host, "pinned_bandwidth_gb_s", "host");
    cluster.host = spec;
  }
  if (const json *constants = reader.optionalObject(
          root, "cost_constants", "",
          {"matmul_peak_fraction", "matmul_half_dim",
           "memory_bandwidth_fraction", "attention_efficiency"})) {
    const char *prefix = "cost_constants";
    CostOverrides &o = cluster.costOverrides;
    o.matmulPeakFraction = reader.optionalNumberIn(
        *constants, "matmul_peak_fraction", prefix, 0, false, 1);
    o.matmulHalfDim =
        reader.optionalNumberIn(*constants, "matmul_half_dim", prefix, 0, true,
                                CostOverrides::kMaxMatmulHalfDim);
    o.memoryBandwidthFraction = reader.optionalNumberIn(
        *constants, "memory_bandwidth_fraction", prefix, 0, false, 1);
    o.attentionEfficiency =
        reader.optionalNumberIn(*constants, "attention_efficiency", prefix, 0,
                                false, CostOverrides::kMaxAttentionEfficiency);
  }
  return cluster;
}

Cluster loadClusterFile(const std::string &path) {
  return parseCluster(detail::readJsonFile(path, "cluster file"), path);
}

std::vector<std::string> clusterPresetNames() {
  std::vector<std::string> names;
  for (const Preset &preset : presets())
    names.push_back(preset.name);
  return names;
}

Cluster clusterPreset(const std::string &spec) {
  std::string name = spec;
  std::optional<int64_t> nodes;
  if (size_t colon = spec.find(':'); colon != std::string::npos) {
    name = spec.substr(0, colon);
    std::string count = spec.substr(colon + 1);
    bool digits = !count.empty() && count.size() <= 9 &&
                  count.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(count) <= 0)
      throw Error("cluster preset '" + spec + "': node count '" + count +
                  "' must be a positive integer");
    nodes = std::stoll(count);
  }
  for (const Preset &preset : presets()) {
    if (name != preset.name)
      continue;
    Cluster cluster = preset.make();
    if (nodes)
      cluster.nodes = *nodes;
    return cluster;
  }
  std::string known;
  for (const std::string &candidate : clusterPresetNames())
    known += (known.empty() ? "" : ", ") + candidate;
  throw Error("unknown cluster preset '" + name + "' (known: " + known + ")");
}

Cluster loadCluster(const std::string &spec) {
  if (fileExists(spec) || endsWith(spec, ".json"))
    return loadClusterFile(spec);
  return clusterPreset(spec);
}

json toJson(const Cluster &cluster) {
  json out{{"name", cluster.name},
           {"nodes", cluster.nodes},
           {"gpus_per_node", cluster.gpusPerNode},
           {"gpu",
            {{"model", cluster.gpu.model},
             {"memory_gib", cluster.gpu.memoryGib},
             {"peak_tflops",
              {{"bf16", cluster.gpu.peakTflopsBf16},
               {"fp16", cluster.gpu.peakTflopsFp16},
               {"fp32", cluster.gpu.peakTflopsFp32}}},
             {"memory_bandwidth_gb_s", cluster.gpu.memoryBandwidthGBs}}},
           {"intra_node_bandwidth_gb_s", cluster.intraNodeBandwidthGBs},
           {"inter_node_bandwidth_gb_s", cluster.interNodeBandwidthGBs},
           {"intra_node_latency_us", cluster.intraNodeLatencyUs},
           {"inter_node_latency_us", cluster.interNodeLatencyUs}};
  if (cluster.host)
    out["host"] = {{"memory_gib", cluster.host->memoryGib},
                   {"memory_bandwidth_gb_s", cluster.host->memoryBandwidthGBs},
                   {"cores", cluster.host->cores},
                   {"pinned_bandwidth_gb_s", cluster.host->pinnedBandwidthGBs}};
  const CostOverrides &o = cluster.costOverrides;
  if (!o.empty()) {
    json &constants = out["cost_constants"] = json::object();
    auto put = [&](const char *key, const std::optional<double> &value) {
      if (value)
        constants[key] = *value;
    };
    put("matmul_peak_fraction", o.matmulPeakFraction);
    put("matmul_half_dim", o.matmulHalfDim);
    put("memory_bandwidth_fraction", o.memoryBandwidthFraction);
    put("attention_efficiency", o.attentionEfficiency);
  }
  return out;
}

} // namespace weft::planner
