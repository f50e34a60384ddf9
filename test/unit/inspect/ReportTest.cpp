//===- ReportTest.cpp - Summary, program, trace and HTML outputs ----------===//

#include "InspectBundles.h"

#include "weft/inspect/Report.h"
#include "weft/plan/Error.h"

#include <gtest/gtest.h>

#include <regex>

using namespace weft;
using namespace weft::inspect;
using namespace weft::inspect::test;
using nlohmann::json;

namespace {

TEST(Report, Formatting) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatBytes(3.0 * (1 << 30)), "3.00 GiB");
  EXPECT_EQ(formatSeconds(1.5), "1.500 s");
  EXPECT_EQ(formatSeconds(0.002), "2.000 ms");
  EXPECT_EQ(formatSeconds(3e-6), "3.000 us");
  EXPECT_EQ(formatRanks({0, 1, 2, 3, 8, 10, 11}), "0-3, 8, 10-11");
}

TEST(Report, ClusterResolution) {
  plan::Bundle bundle = zero3Bundle();
  std::string source;
  EXPECT_EQ(resolveCluster(bundle, std::nullopt, source).name, "dgx-h100-80g");
  EXPECT_NE(source.find("default"), std::string::npos);
  bundle.config["cluster"] = "dgx-a100-80g:2";
  EXPECT_EQ(resolveCluster(bundle, std::nullopt, source).nodes, 2);
  EXPECT_NE(source.find("recorded"), std::string::npos);
  EXPECT_EQ(resolveCluster(bundle, std::string("h100-1gpu"), source).name,
            "h100-1gpu");
  EXPECT_THROW(resolveCluster(bundle, std::string("no-such-cluster"), source),
               plan::Error);
}

TEST(Report, SummaryBreaksMemoryDownByCategory) {
  plan::Bundle bundle = shardedZero3Bundle();
  Inspection inspection(bundle, unitCluster(), "unit");
  json summary = summaryJson(inspection);
  ASSERT_EQ(summary["roles"].size(), 1u);
  const json &role = summary["roles"][0];
  EXPECT_EQ(role["ranks"], "0-1");
  EXPECT_EQ(role["bytes_at_peak"]["params"], 128);
  EXPECT_EQ(role["bytes_at_peak"]["master_params"], 0);
  EXPECT_EQ(role["bytes_at_peak"]["gathered"], 256);
  EXPECT_EQ(role["bytes_at_peak"]["activations"], 320);
  EXPECT_EQ(role["bytes_at_peak"]["optimizer_states"], 0);
  EXPECT_EQ(role["bytes_at_peak"]["other"], 0);
  EXPECT_EQ(role["bytes_at_peak"].size(), size_t(kNumCategories));
  EXPECT_EQ(role["planned_bytes"], 768);
  EXPECT_EQ(role["peak_in_use_bytes"], 704);
  EXPECT_EQ(role["predicted_peak_bytes"], 4096);
  EXPECT_EQ(summary["layers_per_stage"], json::array({1}));
  EXPECT_DOUBLE_EQ(summary["prediction"]["tokens_per_s"].get<double>(),
                   32 / 0.125);
  std::string text = summaryText(summary);
  EXPECT_NE(text.find("mesh: dp=2 pp=1 tp=1 (2 ranks"), std::string::npos);
  EXPECT_NE(text.find("gathered          256 B"), std::string::npos) << text;
}

TEST(Report, ProgramListsOneLinePerInstruction) {
  plan::Bundle bundle = zero3Bundle();
  json program = programJson(bundle, 1, std::nullopt);
  EXPECT_EQ(program["instructions"].size(), 6u);
  std::string text = programText(program);
  EXPECT_NE(text.find("rank 1 (role 0, dp 1 pp 0 tp 0): 6 instructions"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    0  allgather    all_gather     32 x f32 on group 0 "
                      "of family 0 (dp: 0-1)  reads w.shard[0:128]  writes "
                      "w.full[0:256]  ; gather L0"),
            std::string::npos)
      << text;
  json only = programJson(bundle, 0, std::string("allgather"));
  // Replicas sharing a program each show their own group of the family.
  plan::Bundle shared = gpipeBundle(2, 2, 2, 1, 1, /*shareReplicas=*/true);
  std::string replica1 = programText(programJson(shared, 6, std::nullopt));
  EXPECT_NE(replica1.find("recv           262144 x f32 from rank 4 (group 2 "
                          "of family 1)"),
            std::string::npos)
      << replica1;
  EXPECT_NE(replica1.find("all_reduce     262144 x f32 sum on group 3 of "
                          "family 0 (tp: 6-7)"),
            std::string::npos)
      << replica1;
  EXPECT_EQ(only["instructions"].size(), 2u);
  EXPECT_THROW(programJson(bundle, 0, std::string("p2p")), plan::Error);
  EXPECT_THROW(programJson(bundle, 2, std::nullopt), plan::Error);
}

TEST(Report, ProgramShowsTheMembersOfACollective) {
  plan::Bundle bundle = coalescedBundle();
  std::string text = programText(programJson(bundle, 1, std::nullopt));
  EXPECT_NE(text.find("reduce_scatter 16 x f32 sum (3 members) on group 0 "
                      "of family 0 (dp: 0-1)  reads g0[0:64] g1[0:32] "
                      "g2[0:32]  writes s0[0:32] s1[0:16] s2[0:16]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all_gather     12 x f32 (2 members) on group 0 of "
                      "family 0 (dp: 0-1)  reads s0[0:32] full1[16:32]  "
                      "writes full0[0:64] full1[0:32]"),
            std::string::npos)
      << text;
  // One member: as before.
  std::string single = programText(programJson(zero3Bundle(), 0, "allgather"));
  EXPECT_EQ(single.find("member"), std::string::npos) << single;
}

TEST(Report, TimelineComparesWithThePrediction) {
  plan::Bundle bundle = pipelineBundle();
  bundle.prediction.stepTimeS = 1280;
  Inspection inspection(bundle, unitCluster(), "unit", unitConstants());
  json timeline = timelineJson(inspection);
  EXPECT_DOUBLE_EQ(timeline["difference_fraction"].get<double>(), 0);
  EXPECT_EQ(timeline["bubble_s_by_stage"], json::array({512.0, 512.0}));
  EXPECT_EQ(timeline["explanation"][0],
            "the simulation agrees with the planner within 5%");
  bundle.prediction.stepTimeS = 1000;
  json slower =
      timelineJson(Inspection(bundle, unitCluster(), "unit", unitConstants()));
  EXPECT_EQ(slower["explanation"][0],
            "the simulated step is 28.0% longer than the planner's closed "
            "form");
}

TEST(Report, TraceHasAProcessPerRankAndAThreadPerStream) {
  plan::Bundle bundle = zero3Bundle();
  Inspection inspection(bundle, unitCluster(), "unit");
  json trace = traceJson(inspection);
  int processes = 0, threads = 0, slices = 0, waits = 0;
  for (const json &event : trace["traceEvents"]) {
    if (event["name"] == "process_name")
      ++processes;
    if (event["name"] == "thread_name")
      ++threads;
    if (event["ph"] == "X")
      ++(event["cat"] == "wait" ? waits : slices);
  }
  EXPECT_EQ(processes, 2);
  EXPECT_EQ(threads, 4);
  // Per rank: load_batch, the kernel and the all-gather; compute waits for
  // the gather's event.
  EXPECT_EQ(slices, 6);
  EXPECT_EQ(waits, 2);
}

TEST(Report, HtmlIsSelfContained) {
  plan::Bundle bundle = pipelineBundle();
  Inspection inspection(bundle, unitCluster(), "unit");
  std::string html = htmlReport(inspection);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char *id : {"summary", "schedule", "memory", "overlap"})
    EXPECT_NE(html.find("id=\"" + std::string(id) + "\""), std::string::npos)
        << id;
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  auto count = [&](const std::string &pattern) {
    std::regex re(pattern);
    return std::distance(std::sregex_iterator(html.begin(), html.end(), re),
                         std::sregex_iterator());
  };
  EXPECT_EQ(count("<svg"), 3);
  EXPECT_EQ(count("</svg>"), 3);
  // Schedule: 4 + 3 timed instructions; overlap: a compute and an exposed
  // communication bar per rank.
  EXPECT_EQ(count("class=\"op (fwd|bwd|opt|comm)\" x"), 7 + 2 * 2);
  EXPECT_EQ(count("<polyline"), 2);
  // Bytes at the peak by category, one row per rank after the header.
  EXPECT_NE(html.find("id=\"memory-categories\""), std::string::npos);
  EXPECT_NE(html.find("<th>master_params</th>"), std::string::npos);
  EXPECT_EQ(count("<tr><td>rank "), 2) << html;
}

} // namespace
