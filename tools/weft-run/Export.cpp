//===- Export.cpp - weft-export: checkpoint -> safetensors ----------------===//
//
// weft-export BUNDLE CHECKPOINT_STEP_DIR -o model.safetensors: one file with
// Hugging Face parameter names and layouts, loadable by `transformers`
// (docs/runtime.md, "Export"). Runs without MPI: it only reads files.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Export.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char **argv) {
  std::string bundleDir, stepDir, outPath;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-o" && i + 1 < argc)
      outPath = argv[++i];
    else if (!arg.empty() && arg[0] != '-' && positional < 2)
      (positional++ == 0 ? bundleDir : stepDir) = arg;
    else
      positional = -1;
  }
  if (positional != 2 || outPath.empty()) {
    std::fputs("usage: weft-export BUNDLE CHECKPOINT_STEP_DIR -o "
               "model.safetensors\n",
               stderr);
    return 2;
  }
  try {
    weft::plan::Bundle bundle = weft::plan::loadBundle(bundleDir);
    weft::exec::ExportStats stats =
        weft::exec::exportSafetensors(bundle, bundleDir, stepDir, outPath);
    std::printf("wrote %s: %lld tensors, %lld parameters (step %lld)\n",
                outPath.c_str(), (long long)stats.tensors,
                (long long)stats.elements, (long long)stats.step);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "weft-export: error: %s\n", error.what());
    return 2;
  }
  return 0;
}
