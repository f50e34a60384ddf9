//===- main.cpp - weft-inspect: what every rank of a plan holds and does --===//
//
//   weft-inspect BUNDLE summary|timeline|verify [--cluster C] [--json]
//   weft-inspect BUNDLE program --rank R [--stream S] [--issue-order] [--json]
//   weft-inspect BUNDLE memory --rank R [--cluster C] [--json]
//   weft-inspect BUNDLE trace|html -o FILE [--cluster C] [--json]
//   weft-inspect BUNDLE fidelity --measured TRACE [--step N] [--rank R]
//                [--write-cluster OUT] [--cluster C] [--json]
//   weft-inspect A diff B [--json]
//
// Exit status: 0 success, 1 the plan fails verification or the bundles
// differ, 2 bad input (one line on stderr).
//
//===----------------------------------------------------------------------===//

#include "weft/inspect/Fidelity.h"
#include "weft/inspect/Report.h"
#include "weft/inspect/State.h"
#include "weft/inspect/Verify.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

using namespace weft;
using nlohmann::json;

namespace {

const char *kUsage =
    "usage: weft-inspect BUNDLE summary [--cluster C] [--json]\n"
    "       weft-inspect BUNDLE program --rank R [--stream S] [--issue-order]\n"
    "                    [--json]\n"
    "       weft-inspect BUNDLE memory --rank R [--cluster C] [--json]\n"
    "       weft-inspect BUNDLE timeline [--cluster C] [--json]\n"
    "       weft-inspect BUNDLE trace -o trace.json [--cluster C] [--json]\n"
    "       weft-inspect BUNDLE html -o report.html [--cluster C] [--json]\n"
    "       weft-inspect BUNDLE verify [--json]\n"
    "       weft-inspect BUNDLE state [--rank R] [--json]\n"
    "       weft-inspect BUNDLE fidelity --measured trace.json [--step N]\n"
    "                    [--rank R] [--write-cluster calibrated.json] "
    "[--cluster C] [--json]\n"
    "       weft-inspect A diff B [--json]\n"
    "C is a cluster file or preset (default: the bundle's, else "
    "dgx-h100-80g); see docs/inspect.md.\n";

struct Options {
  std::string bundle, command, other;
  bool json = false, issueOrder = false;
  std::optional<int64_t> rank, step;
  std::optional<std::string> stream, cluster, output, measured, writeCluster;
};

Options parseArgs(const std::vector<std::string> &args) {
  if (args.size() < 2)
    throw plan::Error("expected BUNDLE and a subcommand (see --help)");
  Options options;
  options.bundle = args[0];
  options.command = args[1];
  size_t next = 2;
  if (options.command == "diff") {
    if (args.size() < 3)
      throw plan::Error("diff needs a second bundle: weft-inspect A diff B");
    options.other = args[2];
    next = 3;
  }
  for (size_t i = next; i < args.size(); ++i) {
    const std::string &arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size())
        throw plan::Error("option " + arg + " needs a value");
      return args[++i];
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--issue-order") {
      options.issueOrder = true;
    } else if (arg == "--rank" || arg == "--step") {
      std::string text = value();
      size_t used = 0;
      int64_t number = 0;
      try {
        number = std::stoll(text, &used);
      } catch (const std::exception &) {
        used = 0;
      }
      if (used == 0 || used != text.size())
        throw plan::Error(arg + " expects an integer, got '" + text + "'");
      (arg == "--rank" ? options.rank : options.step) = number;
    } else if (arg == "--measured") {
      options.measured = value();
    } else if (arg == "--write-cluster") {
      options.writeCluster = value();
    } else if (arg == "--stream") {
      options.stream = value();
    } else if (arg == "--cluster") {
      options.cluster = value();
    } else if (arg == "-o" || arg == "--output") {
      options.output = value();
    } else {
      throw plan::Error("unknown option '" + arg + "' for " + options.command);
    }
  }
  return options;
}

/// Writes `contents` to a temporary file beside `path` and renames it over
/// `path`: a failed write leaves no half-written file.
void writeFile(const std::string &path, const std::string &contents) {
  std::string temporary = path + ".tmp";
  std::ofstream file(temporary, std::ios::binary);
  file << contents;
  file.close();
  if (!file || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw plan::Error(path + ": cannot write");
  }
}

int64_t requireRank(const Options &options) {
  if (!options.rank)
    throw plan::Error(options.command + " needs --rank R");
  return *options.rank;
}

/// Print `value` as JSON or, with `render`, as text.
template <typename Render>
void emit(const Options &options, const json &value, Render render) {
  if (options.json)
    std::cout << value.dump(2) << "\n";
  else
    std::cout << render(value);
}

int run(const Options &options) {
  plan::Bundle bundle = plan::loadBundle(options.bundle);
  const std::string &command = options.command;
  if (command == "verify") {
    json verdict = inspect::verifyJson(inspect::verifyBundle(bundle));
    emit(options, verdict, inspect::verifyText);
    return verdict["ok"].get<bool>() ? 0 : 1;
  }
  if (command == "diff") {
    plan::Bundle other = plan::loadBundle(options.other);
    json diff = inspect::diffJson(inspect::diffBundles(bundle, other));
    emit(options, diff, inspect::diffText);
    return diff["identical"].get<bool>() ? 0 : 1;
  }
  if (command == "state") {
    emit(options, inspect::stateJson(bundle, options.rank), inspect::stateText);
    return 0;
  }
  if (command == "program") {
    emit(options,
         inspect::programJson(bundle, requireRank(options), options.stream,
                              options.issueOrder),
         inspect::programText);
    return 0;
  }
  if (command == "fidelity") {
    if (!options.measured)
      throw plan::Error("fidelity needs --measured TRACE (weft-run --trace)");
    inspect::MeasuredStep measured =
        inspect::readMeasuredTrace(*options.measured, bundle, options.step);
    if (options.rank && *options.rank != measured.rank)
      throw plan::Error(*options.measured + ": a trace of rank " +
                        std::to_string(measured.rank) + ", not of rank " +
                        std::to_string(*options.rank) +
                        " (weft-run writes trace.json.R for rank R)");
    std::string clusterSource;
    planner::Cluster cluster =
        inspect::resolveCluster(bundle, options.cluster, clusterSource);
    json fidelity = inspect::fidelityJson(bundle, cluster, clusterSource,
                                          measured, *options.measured);
    if (options.writeCluster) {
      writeFile(*options.writeCluster,
                planner::toJson(inspect::calibratedCluster(cluster, fidelity))
                        .dump(2) +
                    "\n");
      fidelity["wrote_cluster"] = *options.writeCluster;
    }
    emit(options, fidelity, [](const json &value) {
      std::string text = inspect::fidelityText(value);
      if (value.contains("wrote_cluster"))
        text += "wrote " + value["wrote_cluster"].get<std::string>() +
                " (the cluster with the fitted cost_constants)\n";
      return text;
    });
    return 0;
  }
  if (command != "summary" && command != "memory" && command != "timeline" &&
      command != "trace" && command != "html")
    throw plan::Error("unknown subcommand '" + command + "' (see --help)");
  if ((command == "trace" || command == "html") && !options.output)
    throw plan::Error(command + " needs -o FILE");
  // Check the rank before the simulation so a typo fails fast.
  if (command == "memory")
    plan::rankToRole(bundle, requireRank(options));

  std::string clusterSource;
  planner::Cluster cluster =
      inspect::resolveCluster(bundle, options.cluster, clusterSource);
  inspect::Inspection inspection(bundle, std::move(cluster), clusterSource);
  if (command == "summary") {
    emit(options, inspect::summaryJson(inspection), inspect::summaryText);
  } else if (command == "memory") {
    emit(options, inspect::memoryJson(inspection, *options.rank),
         inspect::memoryText);
  } else if (command == "timeline") {
    emit(options, inspect::timelineJson(inspection), inspect::timelineText);
  } else {
    bool trace = command == "trace";
    writeFile(*options.output, trace ? inspect::traceJson(inspection).dump()
                                     : inspect::htmlReport(inspection));
    json written = {{"output", *options.output},
                    {"simulated_step_time_s", inspection.timeline.stepTimeS}};
    emit(options, written, [&](const json &) {
      return "wrote " + *options.output + " (simulated step " +
             inspect::formatSeconds(inspection.timeline.stepTimeS) + ")\n";
    });
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  try {
    return run(parseArgs(args));
  } catch (const plan::Error &error) {
    std::cerr << "weft-inspect: error: " << error.what() << "\n";
    return 2;
  } catch (const std::exception &error) {
    // Anything else (e.g. a file the OS refuses) is still one line.
    std::cerr << "weft-inspect: error: " << error.what() << "\n";
    return 2;
  }
}
