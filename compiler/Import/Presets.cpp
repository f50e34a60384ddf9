//===- Presets.cpp - Built-in model presets -------------------------------===//
#include "weft/Compiler/Import.h"

#include "llvm/ADT/STLExtras.h"

namespace {
struct Preset {
  llvm::StringRef name;
  llvm::StringRef config;
};
const Preset kPresets[] = {
#include "Presets.inc"
};

std::vector<llvm::StringRef> collectNames() {
  std::vector<llvm::StringRef> names;
  for (const Preset &preset : kPresets)
    names.push_back(preset.name);
  return names;
}
} // namespace

llvm::ArrayRef<llvm::StringRef> weft::presetNames() {
  static const std::vector<llvm::StringRef> names = collectNames();
  return names;
}

std::optional<llvm::StringRef> weft::presetConfig(llvm::StringRef name) {
  for (const Preset &preset : kPresets)
    if (preset.name == name)
      return preset.config;
  return std::nullopt;
}
