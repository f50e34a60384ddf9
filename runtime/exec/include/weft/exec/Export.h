//===- Export.h - Checkpoint to Hugging Face safetensors --------*- C++ -*-===//
//
// Reassembles every parameter's global tensor from the rank files of one
// checkpoint (readGlobalState, Reshard.h: every ShardSpec of every role) and
// writes them as a single safetensors file under their Hugging Face names, in
// Hugging Face layout (docs/runtime.md, "Export").
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_EXPORT_H
#define WEFT_EXEC_EXPORT_H

#include "weft/plan/Bundle.h"

#include <cstdint>
#include <string>

namespace weft::exec {

struct ExportStats {
  int64_t step = 0;     // the checkpoint's step
  int64_t tensors = 0;  // tensors written
  int64_t elements = 0; // parameters written (f32 elements)
};

/// Exports checkpoint directory `stepDir` (D/step-<N>, or a weights snapshot
/// D/weights-<N> holding only the working parameters; written for `bundle`,
/// loaded from `bundleDir`) to `outPath` (written under a temporary name,
/// fsynced, renamed). Throws Error naming the offending file and the reason.
ExportStats exportSafetensors(const plan::Bundle &bundle,
                              const std::string &bundleDir,
                              const std::string &stepDir,
                              const std::string &outPath);

} // namespace weft::exec

#endif // WEFT_EXEC_EXPORT_H
