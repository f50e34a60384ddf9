//===- Reshard.cpp - weft-reshard: a checkpoint for another layout --------===//
//
// weft-reshard OLD_BUNDLE OLD_BUNDLE_CHECKPOINT NEW_BUNDLE OUT_DIR converts a
// full checkpoint written under OLD_BUNDLE into OUT_DIR/step-<N> for
// NEW_BUNDLE (the same model under another TP/PP/DP/ZeRO layout or
// precision): parameters, fp32 masters, both AdamW moments, the step, the
// data position and the seed (docs/runtime.md, "Resharding"). Then
// `weft-run NEW_BUNDLE --resume --checkpoint-dir OUT_DIR` continues training.
// Runs without MPI: it only reads and writes files.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Reshard.h"
#include "weft/exec/Checkpoint.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

std::string layoutText(const weft::plan::Bundle &bundle) {
  return "dp " + std::to_string(bundle.mesh.dp) + " x pp " +
         std::to_string(bundle.mesh.pp) + " x tp " +
         std::to_string(bundle.mesh.tp);
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args;
  bool bad = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-')
      bad = true;
    args.push_back(arg);
  }
  if (bad || args.size() != 4) {
    std::fputs("usage: weft-reshard OLD_BUNDLE CHECKPOINT NEW_BUNDLE OUT_DIR\n"
               "  CHECKPOINT: D/step-<N> written under OLD_BUNDLE, or D (its "
               "newest); writes OUT_DIR/step-<N> for NEW_BUNDLE\n",
               stderr);
    return 2;
  }
  const std::string &oldDir = args[0], &checkpoint = args[1], &newDir = args[2],
                    &outDir = args[3];
  try {
    weft::plan::Bundle from = weft::plan::loadBundle(oldDir);
    weft::plan::Bundle to = weft::plan::loadBundle(newDir);
    std::string stepDir = checkpoint;
    struct stat st {};
    if (::stat((checkpoint + "/COMPLETE").c_str(), &st) != 0) {
      std::optional<std::string> newest =
          weft::exec::newestCheckpoint(checkpoint);
      if (!newest)
        throw std::runtime_error(checkpoint +
                                 ": no complete checkpoint (no step-<N> "
                                 "directory with a COMPLETE marker)");
      stepDir = *newest;
    }
    weft::exec::ReshardStats stats = weft::exec::reshardCheckpoint(
        from, oldDir, stepDir, to, newDir, outDir);
    std::printf("wrote %s: step %lld, %lld ranks (%s -> %s), %lld "
                "parameters with AdamW state (%lld tensors), %.2f MB\n",
                stats.dir.c_str(), (long long)stats.step,
                (long long)stats.ranks, layoutText(from).c_str(),
                layoutText(to).c_str(), (long long)stats.elements,
                (long long)stats.parameters, double(stats.bytes) / 1e6);
    for (const std::string &note : stats.notes)
      std::printf("note: training setting differs: %s\n", note.c_str());
  } catch (const std::exception &error) {
    std::fprintf(stderr, "weft-reshard: error: %s\n", error.what());
    return 2;
  }
  return 0;
}
