//===- KernelAbi.h - Registry kernel names and their constants --*- C++ -*-===//
//
// The one list of the registry kernels (docs/runtime.md, "Kernel ABI"): each
// kernel's name and its specialization constants, with the default that
// applies when a bundle leaves one out (or none: required) and the range of
// values the kernel is defined for. Both sides read this table:
//
//  - the runtime's registry (runtime/exec/lib/KernelRegistry.cpp) takes its
//    kernel names, required constants and defaults from it and adds an
//    operand signature and a host loop per entry;
//  - the compiler's weft-generate-kernels pass
//    (dialects/WeftExec/Transforms/GenerateKernels.cpp) takes the same and
//    also enforces the ranges before it writes a CUDA source per entry.
//
// Adding a kernel or changing a default is one edit here; the runtime's unit
// test (test/unit/exec/KernelAbiTest.cpp) and the pass (a fatal error on its
// first use) fail when either side lacks an implementation for an entry.
// Plain C++17, header-only: no LLVM, no MPI, nothing at run time.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_KERNELABI_H
#define WEFT_KERNELS_KERNELABI_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>

namespace weft::kernels {

/// No upper bound on a constant.
inline constexpr std::int64_t kNoLimit =
    std::numeric_limits<std::int64_t>::max();

/// One specialization constant of a registry kernel.
struct ConstantAbi {
  std::string_view name;
  /// The value when a bundle omits the constant; nullopt: required.
  std::optional<std::int64_t> defaultValue;
  /// The values the kernel is defined for, inclusive.
  std::int64_t min = 1, max = kNoLimit;
};

namespace abi {
/// A required size (at least 1).
constexpr ConstantAbi required(std::string_view name) {
  return {name, std::nullopt, 1, kNoLimit};
}
/// A required offset (at least 0).
constexpr ConstantAbi requiredNonNegative(std::string_view name) {
  return {name, std::nullopt, 0, kNoLimit};
}
/// 0 or 1.
constexpr ConstantAbi flag(std::string_view name, std::int64_t defaultValue) {
  return {name, defaultValue, 0, 1};
}
/// At least 1.
constexpr ConstantAbi positive(std::string_view name,
                               std::int64_t defaultValue) {
  return {name, defaultValue, 1, kNoLimit};
}
/// At least 0.
constexpr ConstantAbi nonNegative(std::string_view name,
                                  std::int64_t defaultValue) {
  return {name, defaultValue, 0, kNoLimit};
}
/// `act`: 0 ReLU, 1 GELU (erf), 2 GELU (tanh), 3 SiLU (kernels::Activation).
constexpr ConstantAbi activation(std::optional<std::int64_t> defaultValue) {
  return {"act", defaultValue, 0, 3};
}

// Constant lists shared by several kernels, each sorted by name.
inline constexpr ConstantAbi kRowsWidth[] = {required("rows"),
                                             required("width")};
inline constexpr ConstantAbi kActivation[] = {activation(std::nullopt),
                                              required("n")};
inline constexpr ConstantAbi kGated[] = {activation(3), required("n")};
inline constexpr ConstantAbi kAttention[] = {
    required("batch"), flag("causal", 1),    required("head_dim"),
    required("heads"), required("kv_heads"), required("seq")};
// cross_entropy: rows `vocab` apart; `valid` > 0: only the first `valid`
// columns are words, the rest row padding (0: all).
inline constexpr ConstantAbi kCrossEntropy[] = {
    flag("accumulate", 0),   flag("grad", 1),  positive("grad_div", 1),
    positive("loss_div", 1), required("rows"), nonNegative("valid", 0),
    required("vocab")};
inline constexpr ConstantAbi kCrossEntropyShard[] = {
    required("rows"), required("vocab"), required("vocab_local"),
    requiredNonNegative("vocab_start")};
inline constexpr ConstantAbi kCrossEntropyShardFinish[] = {
    flag("accumulate", 0),   flag("grad", 1),
    positive("grad_div", 1), positive("loss_div", 1),
    required("rows"),        required("vocab"),
    required("vocab_local"), requiredNonNegative("vocab_start")};
inline constexpr ConstantAbi kEmbedding[] = {
    required("batch"), required("hidden"), nonNegative("positions", 0),
    required("seq"), required("vocab")};
inline constexpr ConstantAbi kLayerNormBackward[] = {
    flag("bias", 1), required("rows"), required("width")};
inline constexpr ConstantAbi kLayerNormForward[] = {
    flag("bias", 1), positive("eps_nano", 10000), required("rows"),
    required("width")};
inline constexpr ConstantAbi kPositionEmbedding[] = {
    required("batch"), required("hidden"), required("positions"),
    required("seq")};
inline constexpr ConstantAbi kResidualAdd[] = {required("n")};
inline constexpr ConstantAbi kRmsNormForward[] = {
    positive("eps_nano", 1000), required("rows"), required("width")};
inline constexpr ConstantAbi kRotary[] = {
    required("batch"), required("head_dim"), required("heads"), required("seq"),
    positive("theta", 10000)};
inline constexpr ConstantAbi kVocabEmbedding[] = {
    required("batch"), required("hidden"), required("seq"),
    required("vocab_local"), requiredNonNegative("vocab_start")};
} // namespace abi

/// A registry kernel: its name and its constants, sorted by name.
struct KernelAbi {
  std::string_view name;
  const ConstantAbi *constants;
  std::size_t numConstants;

  template <std::size_t N>
  constexpr KernelAbi(std::string_view name, const ConstantAbi (&constants)[N])
      : name(name), constants(constants), numConstants(N) {}

  constexpr const ConstantAbi *begin() const { return constants; }
  constexpr const ConstantAbi *end() const { return constants + numConstants; }
  /// The constant called `constantName`, or null.
  constexpr const ConstantAbi *find(std::string_view constantName) const {
    for (const ConstantAbi &constant : *this)
      if (constant.name == constantName)
        return &constant;
    return nullptr;
  }
};

/// Every registry kernel, sorted by name.
inline constexpr KernelAbi kKernelAbi[] = {
    {"activation_backward", abi::kActivation},
    {"activation_forward", abi::kActivation},
    {"attention_backward", abi::kAttention},
    {"attention_forward", abi::kAttention},
    {"bias_add", abi::kRowsWidth},
    {"bias_grad", abi::kRowsWidth},
    {"cross_entropy", abi::kCrossEntropy},
    {"cross_entropy_shard_finish", abi::kCrossEntropyShardFinish},
    {"cross_entropy_shard_max", abi::kCrossEntropyShard},
    {"cross_entropy_shard_sums", abi::kCrossEntropyShard},
    {"embedding_backward", abi::kEmbedding},
    {"embedding_forward", abi::kEmbedding},
    {"gated_backward", abi::kGated},
    {"gated_forward", abi::kGated},
    {"layer_norm_backward", abi::kLayerNormBackward},
    {"layer_norm_backward_add", abi::kLayerNormBackward},
    {"layer_norm_forward", abi::kLayerNormForward},
    {"position_embedding_backward", abi::kPositionEmbedding},
    {"position_embedding_forward", abi::kPositionEmbedding},
    {"residual_add", abi::kResidualAdd},
    {"residual_layer_norm_forward", abi::kLayerNormForward},
    {"residual_rms_norm_forward", abi::kRmsNormForward},
    {"rms_norm_backward", abi::kRowsWidth},
    {"rms_norm_backward_add", abi::kRowsWidth},
    {"rms_norm_forward", abi::kRmsNormForward},
    {"rotary_backward", abi::kRotary},
    {"rotary_forward", abi::kRotary},
    {"vocab_embedding_backward", abi::kVocabEmbedding},
    {"vocab_embedding_forward", abi::kVocabEmbedding},
};

/// The entry called `name` (a registry name, without a `.suffix`), or null.
constexpr const KernelAbi *findKernelAbi(std::string_view name) {
  for (const KernelAbi &kernel : kKernelAbi)
    if (kernel.name == name)
      return &kernel;
  return nullptr;
}

namespace abi {
/// Kernel names strictly increasing, each kernel's constant names strictly
/// increasing, defaults within range: what lookups and the docs rely on.
constexpr bool isWellFormed() {
  for (std::size_t i = 0; i < std::size(kKernelAbi); ++i) {
    const KernelAbi &kernel = kKernelAbi[i];
    if (i > 0 && !(kKernelAbi[i - 1].name < kernel.name))
      return false;
    for (std::size_t j = 0; j < kernel.numConstants; ++j) {
      const ConstantAbi &constant = kernel.constants[j];
      if (j > 0 && !(kernel.constants[j - 1].name < constant.name))
        return false;
      if (constant.min > constant.max ||
          (constant.defaultValue && (*constant.defaultValue < constant.min ||
                                     *constant.defaultValue > constant.max)))
        return false;
    }
  }
  return true;
}
static_assert(isWellFormed(), "kKernelAbi: kernels and their constants must "
                              "be sorted by name, defaults within range");
} // namespace abi

} // namespace weft::kernels

#endif // WEFT_KERNELS_KERNELABI_H
