//===- KernelRegistry.h - The kernel ABI of the CPU backend -----*- C++ -*-===//
//
// A `kernel` instruction names a bundle kernel; its name selects an entry of
// this registry and its specialization constants give the shapes. The names,
// constants and defaults are those of weft/kernels/KernelAbi.h, which the
// compiler's kernel-source generator reads too; an entry here adds the
// operand signature and the host loop. Operands
// are the instruction's reads then writes, in order (docs/runtime.md, "Kernel
// ABI", lists every entry). Float operands may be f32, bf16 or f16 (converted
// to fp32 around the call); index operands are i32. Every operand's size is
// checked against the signature when the bundle is opened.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_KERNELREGISTRY_H
#define WEFT_EXEC_KERNELREGISTRY_H

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::kernels {
struct KernelAbi; // weft/kernels/KernelAbi.h
} // namespace weft::kernels

namespace weft::exec {

using KernelConstants = std::map<std::string, int64_t>;

struct OperandSpec {
  bool isIndex = false; // i32 ids/targets; otherwise f32, bf16 or f16
  int64_t elements = 0;
};

struct KernelSignature {
  std::vector<OperandSpec> reads;
  std::vector<OperandSpec> writes;
  /// (write, read) pairs the kernel computes in place: that write may be the
  /// very range of that read and give what distinct buffers give, on every
  /// backend and kernel path. Any other overlap of a write with a read or
  /// another write is refused (checkKernelOperands): the CPU and GPU would
  /// compute different things.
  std::vector<std::pair<size_t, size_t>> inPlace = {};
};

/// Operands of one call, in fp32 (or i32 for index operands), in signature
/// order.
struct KernelCall {
  const KernelConstants *constants = nullptr;
  std::vector<float *> reads;               // null for index operands
  std::vector<float *> writes;              // null for index operands
  std::vector<const int32_t *> readIndices; // null for float operands
  /// The step's loss scale: the loss kernels multiply the gradient they seed
  /// (d loss / d logits) by it.
  float lossScale = 1;
  /// Per write, how its storage rounds an fp32 value (bf16 or f16; null or
  /// absent for f32): what a kernel reading it back would see, for the fused
  /// kernels that use a value they would otherwise have stored.
  std::vector<float (*)(float)> writeRounding;

  int64_t c(const char *name) const { return constants->at(name); }
  float (*rounding(size_t write) const)(float) {
    return write < writeRounding.size() ? writeRounding[write] : nullptr;
  }
};

struct KernelSpec {
  std::string_view name;
  /// The entry of kernels::kKernelAbi called `name`: the constants and their
  /// defaults (null only for a registry kernel missing from that table, a bug
  /// that resolveConstants reports and KernelAbiTest catches).
  const kernels::KernelAbi *abi;
  /// The operands for given (defaulted) constants.
  KernelSignature (*signature)(const KernelConstants &);
  void (*run)(const KernelCall &);
};

/// The registry entry for `name`, or null. A name `base.suffix` (one of
/// several specializations of a kernel in a bundle) selects entry `base`.
const KernelSpec *findKernel(std::string_view name);
/// Every entry, in name order (documentation and tests).
const std::vector<KernelSpec> &kernelRegistry();

/// `constants` with defaults filled in (from spec.abi). Throws Error
/// (prefixed by `where`) for a missing required or an unknown constant.
KernelConstants resolveConstants(const KernelSpec &spec,
                                 const KernelConstants &constants,
                                 const std::string &where);

/// cross_entropy's constant `valid` as the kernels' validColumns: -1 when
/// every one of the `vocab` columns is a word (valid 0 or absent).
int64_t crossEntropyValidColumns(const KernelConstants &constants);

} // namespace weft::exec

#endif // WEFT_EXEC_KERNELREGISTRY_H
