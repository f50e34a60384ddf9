//===- WeftRun.cpp - weft-run: replay a plan bundle on every rank ---------===//
//
// mpirun -np N weft-run BUNDLE --data TOKENS [--steps K] ... (see --help and
// docs/runtime.md). Without mpirun it runs as world size 1. A thin command
// line over weft::exec::Runtime (Runtime.h): parsing, logging and metrics.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Error.h"
#include "weft/exec/Runtime.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

const char *const kUsage =
    "usage: weft-run BUNDLE --data TOKENS [--steps K]\n"
    "                [--backend cpu|cuda|cpu-staged]\n"
    "                [--no-graph] [--half-kernels]\n"
    "                [--cudnn-attention] [--gemm-autotune]\n"
    "                [--generated-kernels] [--kernel-cache DIR|off]\n"
    "                [--checkpoint-dir D] [--checkpoint-every K]\n"
    "                [--resume] [--resume-any-data]\n"
    "                [--keep-checkpoints N] [--keep-weights N]\n"
    "                [--metrics out.jsonl] [--seed S] [--trace trace.json]\n"
    "                [--device-times]\n"
    "                [--watchdog-s SECONDS] [--quiet] [--unverified]\n"
    "                [--save-weights-every K] [--offload-between-steps "
    "GROUPS|all]\n"
    "                [--offload-to pinned|pageable]\n"
    "GROUPS: a comma list of params, master_params, optimizer_states, "
    "gradients,\n"
    "activations, other.\n";

struct CliOptions {
  weft::exec::Options session;
  int64_t steps = 10;
  std::string metricsPath;
  std::string tracePath;
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  int64_t saveWeightsEvery = 0;
  std::vector<weft::exec::StateGroup> offloadGroups;
  weft::exec::HostMemoryKind offloadTo = weft::exec::HostMemoryKind::Pinned;
  bool resume = false;
  bool quiet = false;
};

/// Parses argv; returns an error message for bad usage.
std::optional<std::string> parse(int argc, char **argv, CliOptions &cli) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto number = [](const std::string &flag, const std::string &text,
                   double &out) -> std::optional<std::string> {
    char *end = nullptr;
    out = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(out) || out < 0)
      return flag + " expects a non-negative number, got '" + text + "'";
    return std::nullopt;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h")
      return std::string();
    if (arg == "--resume-any-data") {
      cli.session.resumeAnyData = true;
      continue;
    }
    if (arg == "--resume") {
      cli.resume = true;
      continue;
    }
    if (arg == "--quiet") {
      cli.quiet = true;
      continue;
    }
    if (arg == "--no-graph") {
      cli.session.graph = false;
      continue;
    }
    if (arg == "--half-kernels") {
      cli.session.halfKernels = true;
      continue;
    }
    if (arg == "--gemm-autotune") {
      cli.session.gemmAutotune = true;
      continue;
    }
    if (arg == "--gemm-epilogues") // decided ahead of time now
      return "--gemm-epilogues is a compiler option now: weftc compile "
             "--gemm-epilogues";
    if (arg == "--cudnn-attention") { // cuDNN takes the 16-bit operands
      cli.session.cudnnAttention = true;
      cli.session.halfKernels = true;
      continue;
    }
    if (arg == "--device-times") { // the session turns graph capture off
      cli.session.deviceTimes = true;
      continue;
    }
    if (arg == "--generated-kernels") {
      cli.session.generatedKernels = true;
      continue;
    }
    if (arg == "--unverified") { // fault-injection tests only
      cli.session.verifyPlan = false;
      continue;
    }
    if (arg.rfind("--", 0) == 0) {
      static const char *const kValueFlags[] = {"--data",
                                                "--backend",
                                                "--metrics",
                                                "--trace",
                                                "--checkpoint-dir",
                                                "--kernel-cache",
                                                "--offload-to",
                                                "--offload-between-steps",
                                                "--steps",
                                                "--seed",
                                                "--checkpoint-every",
                                                "--watchdog-s",
                                                "--save-weights-every",
                                                "--keep-checkpoints",
                                                "--keep-weights"};
      if (std::find(std::begin(kValueFlags), std::end(kValueFlags), arg) ==
          std::end(kValueFlags))
        return "unknown option " + arg;
      if (i + 1 >= args.size())
        return arg + " expects a value";
      const std::string &value = args[++i];
      double x = 0;
      if (arg == "--data")
        cli.session.dataPath = value;
      else if (arg == "--backend")
        cli.session.backend = value;
      else if (arg == "--metrics")
        cli.metricsPath = value;
      else if (arg == "--trace")
        cli.tracePath = value;
      else if (arg == "--checkpoint-dir")
        cli.checkpointDir = value;
      else if (arg == "--kernel-cache")
        cli.session.kernelCache = value;
      else if (arg == "--offload-between-steps") {
        try {
          cli.offloadGroups = weft::exec::parseStateGroupList(value);
        } catch (const weft::exec::Error &error) {
          return arg + ": " + error.what();
        }
      } else if (arg == "--offload-to") {
        if (value != "pinned" && value != "pageable")
          return arg + " expects pinned or pageable, got '" + value + "'";
        cli.offloadTo = value == "pinned"
                            ? weft::exec::HostMemoryKind::Pinned
                            : weft::exec::HostMemoryKind::Pageable;
      } else if (arg == "--steps" || arg == "--seed" ||
                 arg == "--checkpoint-every" || arg == "--watchdog-s" ||
                 arg == "--save-weights-every" || arg == "--keep-checkpoints" ||
                 arg == "--keep-weights") {
        if (auto error = number(arg, value, x))
          return error;
        if ((arg == "--keep-checkpoints" || arg == "--keep-weights") &&
            (x < 1 || x != std::floor(x)))
          return arg + " expects a whole number >= 1, got '" + value + "'";
        if (arg == "--steps")
          cli.steps = int64_t(x);
        else if (arg == "--seed")
          cli.session.seed = uint64_t(x);
        else if (arg == "--checkpoint-every")
          cli.checkpointEvery = int64_t(x);
        else if (arg == "--save-weights-every")
          cli.saveWeightsEvery = int64_t(x);
        else if (arg == "--keep-checkpoints")
          cli.session.keepCheckpoints = int64_t(x);
        else if (arg == "--keep-weights")
          cli.session.keepWeights = int64_t(x);
        else
          cli.session.watchdogSeconds = x;
      }
      continue;
    }
    if (!cli.session.bundleDir.empty())
      return "unexpected argument '" + arg + "'";
    cli.session.bundleDir = arg;
  }
  if (cli.session.bundleDir.empty())
    return "missing BUNDLE";
  if (cli.session.dataPath.empty())
    return "missing --data TOKENS";
  if ((cli.checkpointEvery > 0 || cli.resume || cli.saveWeightsEvery > 0 ||
       cli.session.keepCheckpoints > 0 || cli.session.keepWeights > 0) &&
      cli.checkpointDir.empty())
    return "--checkpoint-every, --save-weights-every, --keep-checkpoints, "
           "--keep-weights and --resume need --checkpoint-dir D";
  if (cli.session.resumeAnyData && !cli.resume)
    return "--resume-any-data applies to --resume only";
  // Output files fail here, before any rank opens the bundle, not after
  // the steps they record.
  for (auto [flag, path] : {std::pair<const char *, const std::string *>{
                                "--metrics", &cli.metricsPath},
                            {"--trace", &cli.tracePath}}) {
    if (path->empty())
      continue;
    std::error_code ec;
    std::filesystem::path file(*path);
    if (std::filesystem::is_directory(file, ec))
      return std::string(flag) + " " + *path + ": is a directory";
    std::filesystem::path parent = file.parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
      return std::string(flag) + " " + *path + ": no directory " +
             parent.string();
  }
  if (cli.session.deviceTimes && cli.tracePath.empty())
    return "--device-times times the instructions of --trace trace.json: "
           "give --trace";
  if (cli.resume)
    cli.session.resumeDir = cli.checkpointDir;
  return std::nullopt;
}

std::string jsonNumber(double value) {
  if (!std::isfinite(value))
    return "null";
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

/// " | 0.12 TFLOP/s/rank | MFU 1.2% (plan 4.6%) | mem 2.2 MiB": the model
/// FLOP rate and utilization next to the planner's, and the most device
/// memory in use on a rank (no FLOP figures for a bundle without a
/// prediction or cluster).
std::string utilization(const weft::exec::StepStats &stats,
                        const weft::exec::Session &session) {
  char text[160] = "";
  if (session.modelFlopsPerStep() > 0)
    std::snprintf(text, sizeof(text),
                  " | %.3g TFLOP/s/rank | MFU %.2g%% (plan %.2g%%)",
                  stats.modelTflopsPerRank, stats.mfu * 100,
                  session.bundle().prediction.mfu * 100);
  char memory[48];
  std::snprintf(memory, sizeof(memory), " | mem %.1f MiB",
                double(stats.memoryBytes) / (1 << 20));
  return std::string(text) + memory;
}

/// " | ETA 1m05s" from the mean of the last (up to) 20 step times.
std::string eta(const std::vector<double> &stepTimes, int64_t stepsLeft) {
  size_t n = std::min<size_t>(stepTimes.size(), 20);
  if (n == 0 || stepsLeft <= 0)
    return "";
  double mean = 0;
  for (size_t i = stepTimes.size() - n; i < stepTimes.size(); ++i)
    mean += stepTimes[i] / double(n);
  long long seconds = std::llround(mean * double(stepsLeft));
  char text[48];
  if (seconds >= 3600)
    std::snprintf(text, sizeof(text), " | ETA %lldh%02lldm", seconds / 3600,
                  seconds / 60 % 60);
  else
    std::snprintf(text, sizeof(text), " | ETA %lldm%02llds", seconds / 60,
                  seconds % 60);
  return text;
}

void writeTrace(const weft::exec::Session &session, const std::string &path) {
  const weft::plan::Program &program = *session.rankProgram().program;
  nlohmann::json events = nlohmann::json::array();
  for (const weft::exec::TraceEvent &event : session.trace()) {
    const weft::plan::Instruction &inst =
        program.streams[event.stream].instructions[event.instruction];
    nlohmann::json args = {{"instruction", event.instruction},
                           {"step", event.step},
                           {"stream", program.streams[event.stream].name},
                           {"issue", event.issue}};
    // Where the backend ran it elsewhere (inside a norm) or how (cuDNN).
    if (std::string_view note = session.backend().instructionNote(inst);
        !note.empty())
      args["note"] = std::string(note);
    events.push_back({{"name", weft::plan::toString(inst.opcode)},
                      {"cat", inst.phase},
                      {"ph", "X"},
                      {"pid", session.rank()},
                      {"tid", event.stream},
                      {"ts", event.beginS * 1e6},
                      {"dur", (event.endS - event.beginS) * 1e6},
                      {"args", std::move(args)}});
  }
  std::string file = path;
  if (session.worldSize() > 1)
    file += "." + std::to_string(session.rank());
  std::ofstream out(file);
  out << nlohmann::json{{"traceEvents", events}}.dump() << "\n";
  if (!out)
    throw weft::exec::Error(file + ": cannot write the trace");
}

void logCheckpoint(const char *verb, const weft::exec::CheckpointStats &stats) {
  double mb = double(stats.bytes) / 1e6;
  std::printf("checkpoint %s %s: %.2f MB per rank in %.3f s (%.2f GB/s per "
              "rank)\n",
              verb, stats.dir.c_str(), mb, stats.seconds,
              mb / 1e3 / std::max(stats.seconds, 1e-9));
  for (const std::string &dir : stats.removed)
    std::printf("checkpoint removed %s (retention)\n", dir.c_str());
  std::fflush(stdout);
}

/// Several offloads or reloads of one rank, summed.
struct OffloadTotals {
  int64_t bytes = 0;
  double seconds = 0;
  int64_t drained = 0;
  int64_t deviceBefore = 0, deviceAfter = 0;

  explicit OffloadTotals(
      const std::vector<weft::exec::OffloadReport> &reports) {
    for (const weft::exec::OffloadReport &r : reports) {
      bytes += r.bytesMoved;
      seconds += r.seconds;
      drained += r.drained;
    }
    if (!reports.empty()) {
      deviceBefore = reports.front().deviceBytesBefore;
      deviceAfter = reports.back().deviceBytesAfter;
    }
  }
};

void logOffload(const char *what, int64_t step, const OffloadTotals &t,
                const char *where) {
  std::printf("%s step %lld: %.2f MB %s in %.2f ms; device memory %.2f MB -> "
              "%.2f MB\n",
              what, (long long)step, double(t.bytes) / 1e6, where,
              t.seconds * 1e3, double(t.deviceBefore) / 1e6,
              double(t.deviceAfter) / 1e6);
  std::fflush(stdout);
}

int run(const CliOptions &cli) {
  using weft::exec::Runtime;
  std::unique_ptr<Runtime> runtime;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    runtime = Runtime::open(cli.session.bundleDir, cli.session, MPI_COMM_WORLD);
  } catch (const weft::exec::Error &error) {
    // Every rank holds the same agreed message; one prints it.
    std::string message = error.what();
    if (message.find("/manifest.json: written for bundle ") !=
        std::string::npos)
      message += " (a checkpoint of another layout converts with weft-reshard "
                 "OLD_BUNDLE CHECKPOINT BUNDLE OUT_DIR)";
    if (rank == 0)
      std::fprintf(stderr, "weft-run: error: %s\n", message.c_str());
    return 1;
  }
  const bool log = rank == 0 && !cli.quiet;
  // The plan's memory does not count the backend's workspace yet: say so.
  if (int64_t workspace = runtime->session().workspaceBytes();
      log && workspace > 0)
    std::printf("device workspace beyond the plan: %.1f MiB per rank (kernel "
                "scratch, half-precision operands widened to fp32, GEMM "
                "workspaces)\n",
                double(workspace) / (1 << 20));
  // What the run allocated on the device (CUDA: measured, context excluded).
  if (int64_t allocated = runtime->session().deviceBytesAllocated();
      log && allocated >= 0)
    std::printf("device memory allocated by the run: %.1f MiB per rank\n",
                double(allocated) / (1 << 20));
  // The step of the newest checkpoint in the directory, so a resumed run
  // that has nothing left to do does not rewrite it.
  int64_t lastSaved = -1;
  if (const auto &resumed = runtime->resumed()) {
    lastSaved = resumed->step;
    if (log)
      logCheckpoint("loaded", *resumed);
  }
  // A failed save is agreed by every rank, so the job exits cleanly.
  auto save = [&](bool weightsOnly) {
    try {
      weft::exec::CheckpointStats stats =
          weightsOnly ? runtime->saveWeights(cli.checkpointDir)
                      : runtime->saveCheckpoint(cli.checkpointDir);
      if (!weightsOnly)
        lastSaved = stats.step;
      if (log)
        logCheckpoint(weightsOnly ? "saved weights" : "saved", stats);
      // Even under --quiet: old checkpoints pile up on the disk.
      for (const std::string &problem : stats.notRemoved)
        std::fprintf(stderr, "weft-run: warning: cannot remove %s\n",
                     problem.c_str());
      return true;
    } catch (const weft::exec::Error &error) {
      if (rank == 0)
        std::fprintf(stderr, "weft-run: error: %s\n", error.what());
      return false;
    }
  };
  const char *offloadWhere = cli.offloadTo == weft::exec::HostMemoryKind::Pinned
                                 ? "to host-pinned"
                                 : "to host-pageable";

  try {
    std::FILE *metrics = nullptr;
    if (rank == 0 && !cli.metricsPath.empty()) {
      metrics = std::fopen(cli.metricsPath.c_str(), "w");
      if (!metrics)
        throw weft::exec::Error(cli.metricsPath + ": cannot open for writing");
    }
    std::optional<OffloadTotals> reloaded; // before the step about to run
    // On a terminal each step line also estimates the time left.
    const bool interactive = log && ::isatty(STDOUT_FILENO);
    std::vector<double> stepTimes;
    while (runtime->completedSteps() < cli.steps) {
      if (!cli.offloadGroups.empty()) {
        reloaded.emplace(runtime->reload(cli.offloadGroups));
        if (log && (reloaded->bytes > 0 ||
                    reloaded->deviceBefore != reloaded->deviceAfter))
          logOffload("reload before", runtime->completedSteps() + 1, *reloaded,
                     "from host");
      }
      weft::exec::StepStats stats = runtime->step();
      stepTimes.push_back(stats.stepTimeS);
      const bool dynamicScale =
          runtime->session().bundle().training.lossScale.dynamic;
      if (log) {
        std::string scale;
        if (stats.skipped)
          scale = " | skipped: gradients overflowed at loss scale " +
                  jsonNumber(stats.lossScale);
        else if (dynamicScale)
          scale = " | loss scale " + jsonNumber(stats.lossScale);
        std::printf(
            "step %lld/%lld | loss %.6f | grad norm %.4f | lr %.3e | "
            "%.1f ms | %.0f tok/s%s%s%s\n",
            (long long)stats.step, (long long)cli.steps, stats.loss,
            stats.gradNorm, stats.lr, stats.stepTimeS * 1e3, stats.tokensPerS,
            utilization(stats, runtime->session()).c_str(), scale.c_str(),
            interactive ? eta(stepTimes, cli.steps - stats.step).c_str() : "");
        std::fflush(stdout);
      }
      // Offload right after the step: the checkpoints below are then
      // written from the host copies, and the next step reloads.
      std::optional<OffloadTotals> offloaded;
      if (!cli.offloadGroups.empty()) {
        offloaded.emplace(runtime->offload(cli.offloadGroups, cli.offloadTo));
        if (log)
          logOffload("offload after", stats.step, *offloaded, offloadWhere);
      }
      if (metrics) {
        std::string extra =
            ",\"memory_bytes\":" + std::to_string(stats.memoryBytes) +
            ",\"issue_s\":" + jsonNumber(stats.issueTimeS) +
            ",\"finish_s\":" + jsonNumber(stats.finishTimeS);
        if (runtime->session().modelFlopsPerStep() > 0)
          extra +=
              ",\"tflops_per_rank\":" + jsonNumber(stats.modelTflopsPerRank) +
              ",\"mfu\":" + jsonNumber(stats.mfu);
        if (dynamicScale)
          extra += ",\"loss_scale\":" + jsonNumber(stats.lossScale) +
                   ",\"skipped\":" + (stats.skipped ? "true" : "false");
        if (offloaded)
          extra += ",\"offload_bytes\":" + std::to_string(offloaded->bytes) +
                   ",\"offload_s\":" + jsonNumber(offloaded->seconds) +
                   ",\"reload_s\":" +
                   jsonNumber(reloaded ? reloaded->seconds : 0.0) +
                   ",\"device_bytes_before\":" +
                   std::to_string(offloaded->deviceBefore) +
                   ",\"device_bytes_after\":" +
                   std::to_string(offloaded->deviceAfter);
        std::fprintf(metrics,
                     "{\"step\":%lld,\"loss\":%s,\"grad_norm\":%s,\"lr\":%s,"
                     "\"step_time_s\":%s,\"tokens_per_s\":%s%s}\n",
                     (long long)stats.step, jsonNumber(stats.loss).c_str(),
                     jsonNumber(stats.gradNorm).c_str(),
                     jsonNumber(stats.lr).c_str(),
                     jsonNumber(stats.stepTimeS).c_str(),
                     jsonNumber(stats.tokensPerS).c_str(), extra.c_str());
        std::fflush(metrics);
      }
      // A non-finite loss corrupts every later step (fp32/bf16 plans have no
      // loss scaler to skip it). The statistics are all-reduced, so every
      // rank stops here together, without a checkpoint of the bad state.
      if (stats.lossReported && !std::isfinite(stats.loss)) {
        if (metrics)
          std::fclose(metrics);
        if (rank == 0)
          std::fprintf(stderr,
                       "weft-run: error: step %lld: the loss is not finite "
                       "(%g); stopping (lower the learning rate or enable "
                       "gradient clipping)\n",
                       (long long)stats.step, stats.loss);
        return 1;
      }
      // Every rank sees the same step here: the saves are collective.
      if (cli.checkpointEvery > 0 && stats.step % cli.checkpointEvery == 0 &&
          !save(false))
        return 1;
      if (cli.saveWeightsEvery > 0 && stats.step % cli.saveWeightsEvery == 0 &&
          !save(true))
        return 1;
    }
    if (!cli.checkpointDir.empty() && lastSaved != runtime->completedSteps() &&
        !save(false))
      return 1;
    if (metrics && std::fclose(metrics) != 0)
      throw weft::exec::Error(cli.metricsPath + ": cannot write");
    if (!cli.tracePath.empty())
      writeTrace(runtime->session(), cli.tracePath);
    // After the steps: with whatever the libraries and the captured graph
    // allocated on first use.
    if (int64_t allocated = runtime->session().deviceBytesAllocated();
        log && allocated >= 0)
      std::printf("device memory allocated by the run after the steps: %.1f "
                  "MiB per rank\n",
                  double(allocated) / (1 << 20));
  } catch (const std::exception &error) {
    // Peers may be blocked in a collective with this rank: take the job down.
    std::fprintf(stderr, "weft-run: error: %s\n", error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CliOptions cli;
  cli.session.trace = false;
  int status = 0;
  if (std::optional<std::string> error = parse(argc, argv, cli)) {
    // Every rank parsed the same arguments; rank 0 explains.
    if (rank == 0) {
      if (error->empty())
        std::fputs(kUsage, stdout);
      else // one line: the usage is --help's
        std::fprintf(stderr,
                     "weft-run: error: %s (weft-run --help for usage)\n",
                     error->c_str());
    }
    status = error->empty() ? 0 : 2;
  } else {
    cli.session.trace = !cli.tracePath.empty();
    status = run(cli);
  }
  MPI_Finalize();
  return status;
}
