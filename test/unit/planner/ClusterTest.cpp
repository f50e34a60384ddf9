//===- ClusterTest.cpp - Cluster schema, errors and presets ---------------===//

#include "weft/planner/Cluster.h"
#include "weft/planner/Error.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using namespace weft::planner;
using nlohmann::json;

namespace {

json validCluster() {
  return json::parse(R"({
    "name": "lab", "nodes": 2, "gpus_per_node": 8,
    "gpu": {"model": "A100", "memory_gib": 80,
            "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5},
            "memory_bandwidth_gb_s": 2039},
    "intra_node_bandwidth_gb_s": 300, "inter_node_bandwidth_gb_s": 25,
    "intra_node_latency_us": 2, "inter_node_latency_us": 5})");
}

std::string errorOf(const json &cluster) {
  try {
    parseCluster(cluster, "cluster.json");
  } catch (const Error &error) {
    return error.what();
  }
  return "no error";
}

} // namespace

TEST(Cluster, ParsesTheSchema) {
  Cluster c = parseCluster(validCluster(), "cluster.json");
  EXPECT_EQ(c.name, "lab");
  EXPECT_EQ(c.worldSize(), 16);
  EXPECT_DOUBLE_EQ(c.peakFlops(Precision::FP32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.memoryBytes(), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.interNodeBandwidthGBs, 25);
}

TEST(Cluster, EachErrorNamesFileFieldAndReason) {
  json bad = validCluster();
  bad["gpu"]["memory_gib"] = -4;
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'gpu.memory_gib': must be a "
                          "positive number, got -4");
  bad = validCluster();
  bad["gpu"]["peak_tflops"].erase("bf16");
  EXPECT_EQ(errorOf(bad),
            "cluster.json: field 'gpu.peak_tflops.bf16': missing");
  bad = validCluster();
  bad["gpu"]["peak_tflops"]["int8"] = 624;
  EXPECT_EQ(errorOf(bad),
            "cluster.json: field 'gpu.peak_tflops.int8': unknown field");
  bad = validCluster();
  bad["colour"] = "green";
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'colour': unknown field");
  bad = validCluster();
  bad["nodes"] = "8";
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'nodes': must be a positive "
                          "integer, got \"8\"");
  bad = validCluster();
  bad["gpus_per_node"] = 2.5;
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'gpus_per_node': must be a "
                          "positive integer, got 2.5");
  bad = validCluster();
  bad["inter_node_latency_us"] = 0;
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'inter_node_latency_us': must "
                          "be a positive number, got 0");
  bad = validCluster();
  bad["gpu"] = 3;
  EXPECT_EQ(errorOf(bad),
            "cluster.json: field 'gpu': must be an object, got 3");
  bad = validCluster();
  bad["name"] = "";
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'name': must be a non-empty "
                          "string, got \"\"");
  EXPECT_EQ(errorOf(json::array()),
            "cluster.json: must be a JSON object, got []");
}

TEST(Cluster, OptionalHostForOffload) {
  EXPECT_FALSE(parseCluster(validCluster(), "cluster.json").host);
  json withHost = validCluster();
  withHost["host"] = json::parse(R"({"memory_gib": 1024,
      "memory_bandwidth_gb_s": 400, "cores": 64, "pinned_bandwidth_gb_s": 20})");
  Cluster c = parseCluster(withHost, "cluster.json");
  ASSERT_TRUE(c.host);
  EXPECT_DOUBLE_EQ(c.host->memoryGib, 1024);
  EXPECT_EQ(c.host->cores, 64);
  EXPECT_DOUBLE_EQ(c.host->pinnedBandwidthGBs, 20);
  EXPECT_EQ(toJson(parseCluster(toJson(c), "again")), toJson(c));

  json bad = withHost;
  bad["host"]["pinned_bandwidth_gb_s"] = 0;
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'host.pinned_bandwidth_gb_s': "
                          "must be a positive number, got 0");
  bad = withHost;
  bad["host"]["cores"] = 6.5;
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'host.cores': must be a "
                          "positive integer, got 6.5");
  bad = withHost;
  bad["host"].erase("memory_gib");
  EXPECT_EQ(errorOf(bad), "cluster.json: field 'host.memory_gib': missing");
  bad = withHost;
  bad["host"]["numa_nodes"] = 2;
  EXPECT_EQ(errorOf(bad),
            "cluster.json: field 'host.numa_nodes': unknown field");
  bad = withHost;
  bad["host"] = "big";
  EXPECT_EQ(errorOf(bad),
            "cluster.json: field 'host': must be an object, got \"big\"");
  // Every preset describes its host.
  for (const std::string &name : clusterPresetNames())
    EXPECT_TRUE(clusterPreset(name).host) << name;
}

TEST(Cluster, OptionalMeasuredCostConstants) {
  EXPECT_TRUE(
      parseCluster(validCluster(), "cluster.json").costOverrides.empty());
  EXPECT_EQ(toJson(parseCluster(validCluster(), "c")).count("cost_constants"),
            0u);
  json measured = validCluster();
  measured["cost_constants"] = json::parse(
      R"({"matmul_peak_fraction": 0.6, "attention_efficiency": 1.5})");
  Cluster c = parseCluster(measured, "cluster.json");
  EXPECT_EQ(c.costOverrides.matmulPeakFraction, 0.6);
  EXPECT_EQ(c.costOverrides.attentionEfficiency, 1.5);
  EXPECT_FALSE(c.costOverrides.matmulHalfDim);
  EXPECT_FALSE(c.costOverrides.memoryBandwidthFraction);
  EXPECT_EQ(toJson(parseCluster(toJson(c), "again")), toJson(c));
  EXPECT_EQ(toJson(c)["cost_constants"].size(), 2u);
  measured["cost_constants"]["matmul_half_dim"] = 0; // saturation off
  EXPECT_EQ(parseCluster(measured, "c").costOverrides.matmulHalfDim, 0.0);

  auto with = [&](const char *key, json value) {
    json bad = validCluster();
    bad["cost_constants"] = {{key, value}};
    return bad;
  };
  EXPECT_EQ(errorOf(with("matmul_peak_fraction", 1.2)),
            "cluster.json: field 'cost_constants.matmul_peak_fraction': must "
            "be a number in (0, 1], got 1.2");
  EXPECT_EQ(errorOf(with("memory_bandwidth_fraction", 0)),
            "cluster.json: field 'cost_constants.memory_bandwidth_fraction': "
            "must be a number in (0, 1], got 0");
  EXPECT_EQ(errorOf(with("matmul_half_dim", -1)),
            "cluster.json: field 'cost_constants.matmul_half_dim': must be a "
            "number in [0, 65536], got -1");
  EXPECT_EQ(errorOf(with("attention_efficiency", "fast")),
            "cluster.json: field 'cost_constants.attention_efficiency': must "
            "be a number in (0, 64], got \"fast\"");
  EXPECT_EQ(errorOf(with("softmax_efficiency", 1)),
            "cluster.json: field 'cost_constants.softmax_efficiency': unknown "
            "field");
}

TEST(Cluster, FileErrorsAreOneLine) {
  std::string path = ::testing::TempDir() + "weft-bad-cluster.json";
  std::ofstream(path) << "{\n \"name\": \"x\",\n";
  try {
    loadClusterFile(path);
    FAIL() << "expected an error";
  } catch (const Error &error) {
    std::string message = error.what();
    EXPECT_EQ(message.rfind(path + ": invalid JSON: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  std::remove(path.c_str());
  EXPECT_THROW(loadClusterFile(path), Error);
}

TEST(Cluster, PresetsAndNodeOverride) {
  for (const std::string &name : clusterPresetNames()) {
    Cluster preset = clusterPreset(name);
    // Every preset satisfies the file schema.
    Cluster reparsed = parseCluster(toJson(preset), name);
    EXPECT_EQ(reparsed.worldSize(), preset.worldSize());
    EXPECT_EQ(toJson(reparsed), toJson(preset));
  }
  Cluster a100 = clusterPreset("dgx-a100-80g:64");
  EXPECT_EQ(a100.nodes, 64);
  EXPECT_EQ(a100.worldSize(), 512);
  EXPECT_DOUBLE_EQ(a100.peakFlops(Precision::BF16), 312e12);
  EXPECT_DOUBLE_EQ(a100.interNodeBandwidthGBs, 25); // 8x200 Gb/s per 8 GPUs
  EXPECT_EQ(clusterPreset("dgx-h100-80g").worldSize(), 8);
  EXPECT_EQ(loadCluster("v100-32g-4gpu").worldSize(), 4);
  // The lent H200s: an H100's compute, more and faster memory.
  Cluster h200 = clusterPreset("h200-1gpu");
  Cluster h100 = clusterPreset("h100-1gpu");
  EXPECT_EQ(h200.worldSize(), 1);
  EXPECT_DOUBLE_EQ(h200.peakFlops(Precision::BF16),
                   h100.peakFlops(Precision::BF16));
  EXPECT_DOUBLE_EQ(h200.gpu.memoryBandwidthGBs, 4800);
  EXPECT_GT(h200.gpu.memoryGib, h100.gpu.memoryGib);
}

TEST(Cluster, PresetErrors) {
  auto errorOfPreset = [](const std::string &spec) {
    try {
      clusterPreset(spec);
    } catch (const Error &error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(errorOfPreset("dgx-a100-80g:0"),
            "cluster preset 'dgx-a100-80g:0': node count '0' must be a "
            "positive integer");
  EXPECT_EQ(errorOfPreset("dgx-a100-80g:x"),
            "cluster preset 'dgx-a100-80g:x': node count 'x' must be a "
            "positive integer");
  EXPECT_EQ(errorOfPreset("tpu-v4").rfind("unknown cluster preset 'tpu-v4' "
                                          "(known: dgx-a100-80g, ",
                                          0),
            0u);
}
