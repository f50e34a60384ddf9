//===- MakeBundle.cpp - Bundles and reference checks for the e2e tests ----===//
//
//   weft-e2e-bundle mlp VARIANT DP MICRO ACCUM OUT_DIR
//   weft-e2e-bundle deadlock OUT_DIR     (2 ranks; fails the verifier)
//   weft-e2e-bundle check METRICS.jsonl DATA STEPS SEED GLOBAL_BATCH
//
// `check` trains the same model serially (MlpBundle.h, referenceTraining)
// and compares every step's loss (relative 1e-5) and gradient norm (1e-4)
// with the metrics weft-run wrote.
//
//===----------------------------------------------------------------------===//

#include "MlpBundle.h"
#include "weft/plan/Serialize.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

namespace {

int mlp(char **argv) {
  weft::test::MlpConfig config;
  config.variant = argv[0];
  config.dp = std::stoll(argv[1]);
  config.microBatch = std::stoll(argv[2]);
  config.accum = std::stoll(argv[3]);
  weft::plan::writeBundle(weft::test::buildMlpBundle(config), argv[4]);
  return 0;
}

/// Rank 0 all-reduces with a rank 1 that never joins.
int deadlock(const std::string &out) {
  using namespace weft::plan;
  weft::test::MlpConfig config;
  config.variant = "ddp";
  config.dp = 2;
  config.microBatch = 2;
  Bundle bundle = weft::test::buildMlpBundle(config);
  Program idle = bundle.programs[0];
  idle.role = 1;
  idle.numEvents = 0;
  idle.streams = {{"compute", {}}};
  Instruction fill;
  fill.opcode = Opcode::Fill;
  fill.writes = {{0, 0, 4}};
  fill.phase = "idle";
  idle.streams[0].instructions.push_back(fill);
  bundle.programs.push_back(idle);
  bundle.rankRoles = {0, 1};
  bundle.prediction.peakMemoryBytes.push_back(0);
  writeBundle(bundle, out);
  return 0;
}

int check(char **argv) {
  std::ifstream in(argv[0]);
  if (!in) {
    std::fprintf(stderr, "check: cannot open %s\n", argv[0]);
    return 1;
  }
  int64_t steps = std::stoll(argv[2]);
  weft::test::MlpConfig config;
  config.microBatch = std::stoll(argv[4]);
  std::vector<weft::test::ReferenceStep> expected =
      weft::test::referenceTraining(config, argv[1], steps,
                                    std::stoull(argv[3]));
  std::string line;
  int64_t step = 0;
  int failures = 0;
  while (std::getline(in, line)) {
    nlohmann::json metric = nlohmann::json::parse(line);
    if (step >= steps || metric.at("step").get<int64_t>() != step + 1) {
      std::fprintf(stderr, "check: unexpected line %s\n", line.c_str());
      return 1;
    }
    const weft::test::ReferenceStep &ref = expected[size_t(step)];
    double loss = metric.at("loss").get<double>();
    double norm = metric.at("grad_norm").get<double>();
    double lossErr = std::abs(loss - ref.loss) / std::abs(ref.loss);
    double normErr = std::abs(norm - ref.gradNorm) / std::abs(ref.gradNorm);
    bool ok = lossErr <= 1e-5 && normErr <= 1e-4;
    std::printf("step %lld: loss %.9g (reference %.9g, rel %.2e), grad norm "
                "%.6g (reference %.6g, rel %.2e)%s\n",
                (long long)step + 1, loss, ref.loss, lossErr, norm,
                ref.gradNorm, normErr, ok ? "" : "  MISMATCH");
    failures += !ok;
    ++step;
  }
  if (step != steps) {
    std::fprintf(stderr, "check: %lld steps in the metrics, expected %lld\n",
                 (long long)step, (long long)steps);
    return 1;
  }
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "mlp" && argc == 7)
      return mlp(argv + 2);
    if (command == "deadlock" && argc == 3)
      return deadlock(argv[2]);
    if (command == "check" && argc == 7)
      return check(argv + 2);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "weft-e2e-bundle: error: %s\n", error.what());
    return 1;
  }
  std::fputs("usage: weft-e2e-bundle mlp VARIANT DP MICRO ACCUM OUT | deadlock "
             "OUT | check METRICS DATA STEPS SEED GLOBAL_BATCH\n",
             stderr);
  return 2;
}
