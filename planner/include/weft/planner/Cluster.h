//===- Cluster.h - GPU cluster description and presets ----------*- C++ -*-===//
//
// Schema (every field required, no others allowed; bandwidths in GB/s =
// 1e9 bytes/s, unidirectional; the inter-node bandwidth is per GPU):
//   {"name", "nodes", "gpus_per_node",
//    "gpu": {"model", "memory_gib", "peak_tflops": {"bf16", "fp16", "fp32"},
//            "memory_bandwidth_gb_s"},
//    "intra_node_bandwidth_gb_s", "inter_node_bandwidth_gb_s",
//    "intra_node_latency_us", "inter_node_latency_us",
//    "host": {"memory_gib", "memory_bandwidth_gb_s", "cores",
//             "pinned_bandwidth_gb_s"},
//    "cost_constants": {"matmul_peak_fraction", "matmul_half_dim",
//                       "memory_bandwidth_fraction", "attention_efficiency"}}
// Peak TFLOP/s are dense (no sparsity). "host" is optional (without it the
// planner never offloads); when present all four fields are required.
// "cost_constants" is optional and so is each of its fields: measured
// efficiencies of this cluster's GPUs (weft-inspect's `fidelity
// --write-cluster` fits them to a weft-run trace) that replace the cost model's
// defaults. Host memory, its bandwidth and cores are per node; the pinned
// host<->device copy bandwidth is per GPU and direction with every GPU of the
// node copying.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_CLUSTER_H
#define WEFT_PLANNER_CLUSTER_H

#include "weft/planner/Config.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft::planner {

struct GpuSpec {
  std::string model;
  double memoryGib = 0;
  double peakTflopsBf16 = 0;
  double peakTflopsFp16 = 0;
  double peakTflopsFp32 = 0;
  double memoryBandwidthGBs = 0;
};

/// The CPU side of one node, for optimizer-state offload.
struct HostSpec {
  double memoryGib = 0;          // DRAM per node
  double memoryBandwidthGBs = 0; // DRAM bandwidth per node (all sockets)
  int64_t cores = 0;             // physical cores per node
  double pinnedBandwidthGBs = 0; // pinned copies, per GPU and direction
};

/// Cost-model constants measured on this cluster's GPUs (see
/// CostConstants); unset ones keep the model's defaults.
struct CostOverrides {
  /// The largest values a cluster file may give (the fractions are at most
  /// 1; all but the half dim are positive): weft-inspect's fit clamps to them.
  static constexpr double kMaxMatmulHalfDim = 65536;
  static constexpr double kMaxAttentionEfficiency = 64;

  std::optional<double> matmulPeakFraction;      // (0, 1]
  std::optional<double> matmulHalfDim;           // [0, kMaxMatmulHalfDim]
  std::optional<double> memoryBandwidthFraction; // (0, 1]
  std::optional<double> attentionEfficiency;     // (0, kMaxAttentionEfficiency]
  bool empty() const {
    return !matmulPeakFraction && !matmulHalfDim && !memoryBandwidthFraction &&
           !attentionEfficiency;
  }
};

struct Cluster {
  std::string name;
  int64_t nodes = 0;
  int64_t gpusPerNode = 0;
  GpuSpec gpu;
  double intraNodeBandwidthGBs = 0; // per GPU, per direction (NVLink)
  double interNodeBandwidthGBs = 0; // per GPU, per direction (NIC share)
  double intraNodeLatencyUs = 0;
  double interNodeLatencyUs = 0;
  std::optional<HostSpec> host; // unset: offload is not considered
  CostOverrides costOverrides;

  int64_t worldSize() const { return nodes * gpusPerNode; }
  double memoryBytes() const { return gpu.memoryGib * 1073741824.0; }
  /// Dense peak FLOP/s of the matrix units for `precision`.
  double peakFlops(Precision precision) const;
};

/// Parse and validate `json`; `source` (usually the file name) prefixes every
/// error: "cluster.json: field 'gpu.memory_gib': must be a positive number,
/// got -4".
Cluster parseCluster(const nlohmann::json &json, const std::string &source);
/// Read and parse a cluster file.
Cluster loadClusterFile(const std::string &path);
/// A built-in cluster: "name" or "name:nodes" (node-count override).
Cluster clusterPreset(const std::string &spec);
/// Names accepted by clusterPreset, in a stable order.
std::vector<std::string> clusterPresetNames();
/// `spec` names a file when one exists at that path or it ends in ".json";
/// otherwise it is a preset.
Cluster loadCluster(const std::string &spec);
/// The cluster in the file schema (round-trips through parseCluster).
nlohmann::json toJson(const Cluster &cluster);

} // namespace weft::planner

#endif // WEFT_PLANNER_CLUSTER_H
