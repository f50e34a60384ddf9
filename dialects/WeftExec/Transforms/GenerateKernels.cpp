//===- GenerateKernels.cpp - CUDA C++ sources for weftx.kernel ops --------===//
//
// Writes the `source` of every weftx.kernel: one self-contained CUDA C++
// translation unit per specialization that calls the WEFT_HD functions of
// runtime/kernels/include/weft/kernels/ with the kernel's constants as
// constexprs. A kernel is a sequence of phases; each phase is one WEFT_HD
// function of an item index, run by one CUDA thread per item (one
// `extern "C" __global__` entry per phase) or by a host loop over the items
// in order (one `extern "C"` host entry). docs/kernels.md describes the
// generated code and how it relates to the runtime's registry kernels.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"

#include "WeftExec/IR/WeftExecOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "weft/kernels/KernelAbi.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTGENERATEKERNELS
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

constexpr int64_t kMaxBlockSize = 256;
constexpr int64_t kMaxGridSize = std::numeric_limits<int32_t>::max();
constexpr int64_t kNoLimit = weft::kernels::kNoLimit;

//===----------------------------------------------------------------------===//
// Kernel specifications
//===----------------------------------------------------------------------===//

/// A specialization constant of a registry kernel (docs/runtime.md, "Kernel
/// ABI"): its default when absent and the range the generator accepts, as
/// weft/kernels/KernelAbi.h (shared with the runtime's registry) lists them.
struct ConstantSpec {
  StringRef name;
  std::optional<int64_t> defaultValue;
  int64_t min, max;
};

/// A pointer parameter: the instruction's reads, then its writes.
struct Operand {
  std::string name;
  int64_t elements;
  bool isIndex; ///< i32 (token ids, targets); f32 otherwise.
  bool isWrite;
  std::string note;
};

/// Scratch memory of a multi-phase kernel: a __device__ array on the GPU, a
/// std::vector in the host entry.
struct Workspace {
  std::string name;
  int64_t elements;
  std::string note;
};

/// One step of a kernel: `body` runs for every `item` in [0, items).
struct Phase {
  std::string what;
  int64_t items;
  std::string body;
};

/// The parts of one generated translation unit.
struct KernelSource {
  StringRef header; ///< The weft/kernels/ header of the functions used.
  /// Names and constexpr declarations; only those a phase mentions are
  /// emitted.
  SmallVector<std::pair<std::string, std::string>> constants;
  SmallVector<Operand> operands;
  SmallVector<Workspace> workspaces;
  SmallVector<Phase> phases;
  /// How the decomposition differs from the registry's host loops.
  std::string note;

  void constant(StringRef type, StringRef name, StringRef value) {
    constants.push_back(
        {name.str(),
         ("constexpr " + type + " " + name + " = " + value + ";").str()});
  }
  void constant(StringRef name, int64_t value) {
    constant("std::int64_t", name, std::to_string(value));
  }
  void read(StringRef name, int64_t elements, StringRef note = "") {
    operands.push_back({name.str(), elements, false, false, note.str()});
  }
  void readIndex(StringRef name, int64_t elements, StringRef note = "") {
    operands.push_back({name.str(), elements, true, false, note.str()});
  }
  void write(StringRef name, int64_t elements, StringRef note = "") {
    operands.push_back({name.str(), elements, false, true, note.str()});
  }
  void phase(StringRef what, int64_t items, StringRef body) {
    phases.push_back({what.str(), items, body.str()});
  }
  unsigned numReads() const {
    return llvm::count_if(operands,
                          [](const Operand &o) { return !o.isWrite; });
  }
};

/// A kernel's resolved constants (defaults applied).
class Constants {
public:
  explicit Constants(llvm::StringMap<int64_t> values)
      : values(std::move(values)) {}
  int64_t operator[](StringRef name) const { return values.lookup(name); }

private:
  llvm::StringMap<int64_t> values;
};

using EmitError = function_ref<InFlightDiagnostic()>;
using Generator = LogicalResult (*)(const Constants &, KernelSource &,
                                    EmitError);

struct KernelSpec {
  StringRef name;
  SmallVector<ConstantSpec> constants; ///< Sorted by name.
  Generator generate;
};

//===----------------------------------------------------------------------===//
// C++ text helpers
//===----------------------------------------------------------------------===//

/// A C++ literal that reads back as exactly `value`.
std::string floatingLiteral(double value, bool isFloat) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (isFloat)
    os << llvm::format("%.9g", float(value));
  else
    os << llvm::format("%.17g", value);
  if (StringRef(text).find_first_of(".e") == StringRef::npos)
    text += ".0";
  if (isFloat)
    text += "f";
  return text;
}

/// Enumerator of weft::kernels::Activation for the `act` constant.
StringRef activationName(int64_t code) {
  static constexpr StringLiteral names[] = {"ReLU", "GeluErf", "GeluTanh",
                                            "SiLU"};
  return names[code];
}

/// The C identifier prefix of a kernel's entries.
std::string entryName(StringRef symbol) {
  std::string name = "weft_";
  for (char c : symbol)
    name += llvm::isAlnum(c) ? c : '_';
  return name;
}

/// Declarations of the item index split into (b, i, h) with h fastest.
std::string splitRow(StringRef b, StringRef i, StringRef h, StringRef heads) {
  return ("  const std::int64_t " + h + " = item % " + heads + ";\n" +
          "  const std::int64_t " + i + " = item / " + heads + " % kSeq;\n" +
          "  const std::int64_t " + b + " = item / (" + heads + " * kSeq);\n")
      .str();
}

//===----------------------------------------------------------------------===//
// Generators, one per registry kernel (runtime/exec/lib/KernelRegistry.cpp)
//===----------------------------------------------------------------------===//

LogicalResult biasAdd(const Constants &c, KernelSource &k, EmitError) {
  int64_t rows = c["rows"], width = c["width"];
  k.header = "weft/kernels/Common.h";
  k.constant("kWidth", width);
  k.read("x", rows * width);
  k.read("bias", width);
  k.write("y", rows * width, "may be x");
  k.phase("one thread per element", rows * width,
          "  y[item] = x[item] + bias[item % kWidth];\n");
  return success();
}

/// Sums a column over the rows into `sum`; `term` is the summand at
/// element index `at` of row `r`.
std::string columnSum(StringRef sum, StringRef term) {
  return ("  for (std::int64_t r = 0; r < kRows; ++r) {\n"
          "    const std::int64_t at = r * kWidth + item;\n"
          "    " +
          sum + " += " + term + ";\n  }\n")
      .str();
}

constexpr StringLiteral kColumnNote =
    "parameter gradients are summed per column, then added; the registry's "
    "host loop adds row by row (same terms, another rounding order)";

LogicalResult biasGrad(const Constants &c, KernelSource &k, EmitError) {
  int64_t rows = c["rows"], width = c["width"];
  k.header = "weft/kernels/Common.h";
  k.constant("kRows", rows);
  k.constant("kWidth", width);
  k.read("dy", rows * width);
  k.write("dBias", width, "+=");
  k.phase("one thread per column", width,
          "  float sum = 0;\n" + columnSum("sum", "dy[at]") +
              "  dBias[item] += sum;\n");
  k.note = kColumnNote;
  return success();
}

LogicalResult residualAdd(const Constants &c, KernelSource &k, EmitError) {
  int64_t n = c["n"];
  k.header = "weft/kernels/Common.h";
  k.read("a", n);
  k.read("b", n);
  k.write("out", n, "may be a or b");
  k.phase("one thread per element", n, "  out[item] = a[item] + b[item];\n");
  return success();
}

void activationConstant(const Constants &c, KernelSource &k) {
  k.header = "weft/kernels/Activations.h";
  k.constant("Activation", "kAct",
             ("Activation::" + activationName(c["act"])).str());
}

LogicalResult activationForward(const Constants &c, KernelSource &k,
                                EmitError) {
  int64_t n = c["n"];
  activationConstant(c, k);
  k.read("x", n);
  k.write("y", n, "may be x");
  k.phase("one thread per element", n,
          "  y[item] = activate(kAct, x[item]);\n");
  return success();
}

LogicalResult activationBackward(const Constants &c, KernelSource &k,
                                 EmitError) {
  int64_t n = c["n"];
  activationConstant(c, k);
  k.read("x", n);
  k.read("dy", n);
  k.write("dx", n, "may be dy");
  k.phase("one thread per element", n,
          "  dx[item] = dy[item] * activateDerivative(kAct, x[item]);\n");
  return success();
}

LogicalResult gatedForward(const Constants &c, KernelSource &k, EmitError) {
  int64_t n = c["n"];
  activationConstant(c, k);
  k.read("gate", n);
  k.read("up", n);
  k.write("out", n);
  k.phase("one thread per element", n,
          "  out[item] = gatedActivate(kAct, gate[item], up[item]);\n");
  return success();
}

LogicalResult gatedBackward(const Constants &c, KernelSource &k, EmitError) {
  int64_t n = c["n"];
  activationConstant(c, k);
  k.read("gate", n);
  k.read("up", n);
  k.read("dOut", n);
  k.write("dGate", n);
  k.write("dUp", n);
  k.phase("one thread per element", n,
          "  gatedActivateBackward(kAct, gate[item], up[item], dOut[item], "
          "dGate[item],\n                        dUp[item]);\n");
  return success();
}

/// eps as the registry computes it: float(eps_nano * 1e-9).
void epsConstant(const Constants &c, KernelSource &k) {
  k.constant("float", "kEps",
             floatingLiteral(double(c["eps_nano"]) * 1e-9, true));
}

/// The residual add of the fused forward norms: each row's sum = a + b,
/// which the norm then reads as x.
void residualOperands(KernelSource &k, int64_t rows, int64_t width) {
  k.read("a", rows * width);
  k.read("b", rows * width);
}
constexpr StringLiteral kResidualRow =
    "  const std::int64_t at = item * kWidth;\n"
    "  for (std::int64_t i = 0; i < kWidth; ++i)\n"
    "    sum[at + i] = a[at + i] + b[at + i];\n"
    "  const float *xr = sum + at;\n";

/// layer_norm_forward, or with `residual` residual_layer_norm_forward.
LogicalResult layerNormForward(const Constants &c, KernelSource &k,
                               bool residual) {
  int64_t rows = c["rows"], width = c["width"];
  bool bias = c["bias"];
  k.header = "weft/kernels/Norms.h";
  k.constant("kWidth", width);
  epsConstant(c, k);
  if (residual)
    residualOperands(k, rows, width);
  else
    k.read("x", rows * width);
  k.read("gamma", width);
  if (bias)
    k.read("beta", width);
  if (residual)
    k.write("sum", rows * width, "a + b");
  k.write("y", rows * width);
  k.write("mean", rows);
  k.write("rstd", rows);
  k.phase("one thread per row", rows,
          std::string(bias ? "" : "  const float *beta = nullptr;\n") +
              (residual ? kResidualRow.str()
                        : "  const float *xr = x + item * kWidth;\n") +
              "  float rowMean, rowRstd;\n"
              "  layerNormRowStats(kWidth, xr, kEps, rowMean, rowRstd);\n"
              "  layerNormRowForward(kWidth, xr, gamma, beta, rowMean, "
              "rowRstd,\n"
              "                      y + item * kWidth);\n"
              "  mean[item] = rowMean;\n"
              "  rstd[item] = rowRstd;\n");
  return success();
}
LogicalResult layerNormForward(const Constants &c, KernelSource &k, EmitError) {
  return layerNormForward(c, k, false);
}
LogicalResult residualLayerNormForward(const Constants &c, KernelSource &k,
                                       EmitError) {
  return layerNormForward(c, k, true);
}

/// The input gradient phase of a norm backward: the row function `call`
/// (layerNormRowBackward or rmsNormRowBackward; with `add` its ...Add form,
/// which reads the addend and writes sum = dx + addend instead of dx) with
/// `args` after the row of x.
std::string inputGradRow(StringRef call, StringRef args, bool add) {
  return ("  " + call + (add ? "Add" : "") + "(kWidth, x + item * kWidth, " +
          args + ",\n      dy + item * kWidth, " +
          (add ? "addend + item * kWidth, sum + item * kWidth"
               : "dx + item * kWidth") +
          ");\n")
      .str();
}
/// A norm backward's last read and first write: dy and dx, or with `add`
/// also the addend and sum = dx + addend instead of dx.
void inputGradOperands(KernelSource &k, int64_t rows, int64_t width, bool add) {
  k.read("dy", rows * width);
  if (add) {
    k.read("addend", rows * width);
    k.write("sum", rows * width, "dx + addend; dx is not stored");
  } else {
    k.write("dx", rows * width, "may be dy");
  }
}

/// layer_norm_backward, or with `add` layer_norm_backward_add.
LogicalResult layerNormBackward(const Constants &c, KernelSource &k, bool add) {
  int64_t rows = c["rows"], width = c["width"];
  bool bias = c["bias"];
  k.header = "weft/kernels/Norms.h";
  k.constant("kRows", rows);
  k.constant("kWidth", width);
  k.read("x", rows * width);
  k.read("gamma", width);
  k.read("mean", rows);
  k.read("rstd", rows);
  inputGradOperands(k, rows, width, add);
  k.write("dGamma", width, "+=");
  if (bias)
    k.write("dBeta", width, "+=");
  std::string body =
      bias ? "  float sumGamma = 0, sumBeta = 0;\n" : "  float sumGamma = 0;\n";
  body += "  for (std::int64_t r = 0; r < kRows; ++r) {\n"
          "    const float d = dy[r * kWidth + item];\n"
          "    sumGamma += d * (x[r * kWidth + item] - mean[r]) * rstd[r];\n";
  if (bias)
    body += "    sumBeta += d;\n";
  body += "  }\n  dGamma[item] += sumGamma;\n";
  if (bias)
    body += "  dBeta[item] += sumBeta;\n";
  // Parameter gradients first: dx (or sum) may alias dy.
  k.phase("one thread per column: dGamma, dBeta", width, body);
  k.phase(add ? "one thread per row: dx + addend" : "one thread per row: dx",
          rows,
          inputGradRow("layerNormRowBackward", "gamma, mean[item], rstd[item]",
                       add));
  k.note = kColumnNote;
  return success();
}
LogicalResult layerNormBackward(const Constants &c, KernelSource &k,
                                EmitError) {
  return layerNormBackward(c, k, false);
}
LogicalResult layerNormBackwardAdd(const Constants &c, KernelSource &k,
                                   EmitError) {
  return layerNormBackward(c, k, true);
}

/// rms_norm_forward, or with `residual` residual_rms_norm_forward.
LogicalResult rmsNormForward(const Constants &c, KernelSource &k,
                             bool residual) {
  int64_t rows = c["rows"], width = c["width"];
  k.header = "weft/kernels/Norms.h";
  k.constant("kWidth", width);
  epsConstant(c, k);
  if (residual)
    residualOperands(k, rows, width);
  else
    k.read("x", rows * width);
  k.read("gamma", width);
  if (residual)
    k.write("sum", rows * width, "a + b");
  k.write("y", rows * width);
  k.write("rstd", rows);
  k.phase("one thread per row", rows,
          (residual ? kResidualRow.str()
                    : std::string("  const float *xr = x + item * kWidth;\n")) +
              "  const float rowRstd = rmsNormRowRstd(kWidth, xr, kEps);\n"
              "  rmsNormRowForward(kWidth, xr, gamma, rowRstd, y + item * "
              "kWidth);\n"
              "  rstd[item] = rowRstd;\n");
  return success();
}
LogicalResult rmsNormForward(const Constants &c, KernelSource &k, EmitError) {
  return rmsNormForward(c, k, false);
}
LogicalResult residualRmsNormForward(const Constants &c, KernelSource &k,
                                     EmitError) {
  return rmsNormForward(c, k, true);
}

/// rms_norm_backward, or with `add` rms_norm_backward_add.
LogicalResult rmsNormBackward(const Constants &c, KernelSource &k, bool add) {
  int64_t rows = c["rows"], width = c["width"];
  k.header = "weft/kernels/Norms.h";
  k.constant("kRows", rows);
  k.constant("kWidth", width);
  k.read("x", rows * width);
  k.read("gamma", width);
  k.read("rstd", rows);
  inputGradOperands(k, rows, width, add);
  k.write("dGamma", width, "+=");
  k.phase("one thread per column: dGamma", width,
          "  float sumGamma = 0;\n" +
              columnSum("sumGamma", "dy[at] * x[at] * rstd[r]") +
              "  dGamma[item] += sumGamma;\n");
  k.phase(add ? "one thread per row: dx + addend" : "one thread per row: dx",
          rows, inputGradRow("rmsNormRowBackward", "gamma, rstd[item]", add));
  k.note = kColumnNote;
  return success();
}
LogicalResult rmsNormBackward(const Constants &c, KernelSource &k, EmitError) {
  return rmsNormBackward(c, k, false);
}
LogicalResult rmsNormBackwardAdd(const Constants &c, KernelSource &k,
                                 EmitError) {
  return rmsNormBackward(c, k, true);
}

LogicalResult checkPositions(const Constants &c, EmitError emitError) {
  if (c["positions"] && c["positions"] < c["seq"])
    return emitError() << "has " << c["positions"]
                       << " position rows for sequences of " << c["seq"];
  return success();
}

LogicalResult embeddingForward(const Constants &c, KernelSource &k,
                               EmitError emitError) {
  if (failed(checkPositions(c, emitError)))
    return failure();
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  bool positions = c["positions"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kSeq", c["seq"]);
  k.constant("kHidden", hidden);
  k.readIndex("ids", tokens, "in [0, vocab)");
  k.read("wte", c["vocab"] * hidden);
  if (positions)
    k.read("wpe", c["positions"] * hidden);
  k.write("out", tokens * hidden);
  k.phase("one thread per token", tokens,
          "  const float *noRow = nullptr;\n"
          "  embeddingRowForward(kHidden, wte + std::int64_t(ids[item]) * "
          "kHidden,\n                      " +
              std::string(positions ? "wpe + item % kSeq * kHidden" : "noRow") +
              ", noRow, out + item * kHidden);\n");
  return success();
}

LogicalResult embeddingBackward(const Constants &c, KernelSource &k,
                                EmitError emitError) {
  if (failed(checkPositions(c, emitError)))
    return failure();
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  bool positions = c["positions"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kSeq", c["seq"]);
  k.constant("kHidden", hidden);
  k.readIndex("ids", tokens, "in [0, vocab)");
  k.read("dOut", tokens * hidden);
  k.write("dWte", c["vocab"] * hidden, "+=, atomic on the GPU");
  if (positions)
    k.write("dWpe", c["positions"] * hidden, "+=, atomic on the GPU");
  k.phase(
      "one thread per token", tokens,
      "  float *noRow = nullptr;\n"
      "  embeddingRowBackward(kHidden, dOut + item * kHidden,\n"
      "                       dWte + std::int64_t(ids[item]) * kHidden,\n"
      "                       " +
          std::string(positions ? "dWpe + item % kSeq * kHidden" : "noRow") +
          ", noRow);\n");
  return success();
}

LogicalResult rotary(const Constants &c, KernelSource &k, EmitError emitError,
                     bool inverse) {
  int64_t headDim = c["head_dim"];
  if (headDim % 2)
    return emitError() << "rotates pairs of a head vector: head_dim " << headDim
                       << " is odd";
  int64_t rows = c["batch"] * c["seq"] * c["heads"];
  k.header = "weft/kernels/Rotary.h";
  k.constant("kSeq", c["seq"]);
  k.constant("kHeads", c["heads"]);
  k.constant("kHeadDim", headDim);
  k.constant("float", "kTheta", floatingLiteral(double(c["theta"]), true));
  std::string in = inverse ? "dy" : "x", out = inverse ? "dx" : "y";
  k.read(in, rows * headDim);
  k.write(out, rows * headDim, "may be " + in);
  k.phase("one thread per (token, head) vector", rows,
          "  rotaryRow(kHeadDim, item / kHeads % kSeq, kTheta, " +
              std::string(inverse ? "true" : "false") + ",\n            " + in +
              " + item * kHeadDim, " + out + " + item * kHeadDim);\n");
  return success();
}

LogicalResult rotaryForward(const Constants &c, KernelSource &k,
                            EmitError emitError) {
  return rotary(c, k, emitError, /*inverse=*/false);
}

LogicalResult rotaryBackward(const Constants &c, KernelSource &k,
                             EmitError emitError) {
  return rotary(c, k, emitError, /*inverse=*/true);
}

/// Shapes of attention; `d` is rebuilt as a constexpr in every phase.
LogicalResult attentionConstants(const Constants &c, KernelSource &k,
                                 EmitError emitError) {
  if (c["heads"] % c["kv_heads"])
    return emitError() << "has " << c["heads"]
                       << " query heads, not a multiple of kv_heads "
                       << c["kv_heads"];
  k.header = "weft/kernels/Attention.h";
  k.constant("kBatch", c["batch"]);
  k.constant("kSeq", c["seq"]);
  k.constant("kHeads", c["heads"]);
  k.constant("kKvHeads", c["kv_heads"]);
  k.constant("kHeadDim", c["head_dim"]);
  k.constant("bool", "kCausal", c["causal"] ? "true" : "false");
  // The registry's scale: 1 / sqrt(double(head_dim)).
  k.constant("double", "kScale",
             floatingLiteral(1.0 / std::sqrt(double(c["head_dim"])), false));
  return success();
}

constexpr StringLiteral kDims =
    "  constexpr AttentionDims d{kBatch, kSeq,     kHeads, kKvHeads,\n"
    "                            kHeadDim, kCausal, kScale};\n";

LogicalResult attentionForward(const Constants &c, KernelSource &k,
                               EmitError emitError) {
  if (failed(attentionConstants(c, k, emitError)))
    return failure();
  int64_t b = c["batch"], s = c["seq"], d = c["head_dim"];
  k.read("q", b * s * c["heads"] * d);
  k.read("k", b * s * c["kv_heads"] * d);
  k.read("v", b * s * c["kv_heads"] * d);
  k.write("out", b * s * c["heads"] * d);
  k.write("lse", b * c["heads"] * s);
  k.phase("one thread per query row (b, i, h), h fastest", b * s * c["heads"],
          kDims.str() + splitRow("b", "i", "h", "kHeads") +
              "  lse[d.statIndex(b, h, i)] = attentionRowForward(d, q, k, v, "
              "b, i, h, out);\n");
  return success();
}

LogicalResult attentionBackward(const Constants &c, KernelSource &k,
                                EmitError emitError) {
  if (failed(attentionConstants(c, k, emitError)))
    return failure();
  int64_t b = c["batch"], s = c["seq"], d = c["head_dim"];
  int64_t q = b * s * c["heads"] * d, kv = b * s * c["kv_heads"] * d;
  k.read("q", q);
  k.read("k", kv);
  k.read("v", kv);
  k.read("out", q);
  k.read("lse", b * c["heads"] * s);
  k.read("dOut", q);
  k.write("dq", q);
  k.write("dk", kv);
  k.write("dv", kv);
  k.workspaces.push_back(
      {"delta", b * c["heads"] * s, "dOut . out per query row [B, h, S]"});
  k.phase("one thread per query row (b, i, h), h fastest: dq, delta",
          b * s * c["heads"],
          kDims.str() + splitRow("b", "i", "h", "kHeads") +
              "  attentionQueryRowBackward(d, q, k, v, out, lse, dOut, b, i, "
              "h, dq, delta);\n");
  k.phase("one thread per key row (b, j, g), g fastest: dk, dv",
          b * s * c["kv_heads"],
          kDims.str() + splitRow("b", "j", "g", "kKvHeads") +
              "  attentionKeyRowBackward(d, q, k, v, lse, delta, dOut, b, j, "
              "g, dk, dv);\n");
  return success();
}

/// The loss and gradient of a [rows, kWidth] block of logits given each row's
/// log-sum-exp in the `rowLse` workspace, as the registry's host loop
/// computes them: the mean over the targets != -100 of lse - target logit
/// (`targetLogit`: an expression in `r`), divided by loss_div, and
/// (softmax - onehot) / count / grad_div on the columns `columnGuard` admits,
/// with the target at column `localTarget` (an expression in `target`).
void lossAndGradient(const Constants &c, KernelSource &k, int64_t width,
                     StringRef targetLogit, StringRef localTarget,
                     StringRef columnGuard) {
  int64_t rows = c["rows"];
  k.constant("kRows", rows);
  k.constant("kWidth", width);
  k.constant("kLossDiv", c["loss_div"]);
  k.write("loss", 1,
          c["accumulate"] ? "+= mean loss / loss_div" : "mean loss / loss_div");
  if (c["grad"])
    k.write("dLogits", rows * width, "may be logits");
  k.workspaces.push_back({"gradScale", 1, "1 / number of counted targets"});
  k.phase("one thread: the mean loss over the targets != -100, in row order", 1,
          ("  std::int64_t count = 0;\n"
           "  for (std::int64_t r = 0; r < kRows; ++r)\n"
           "    count += targets[r] != kIgnoreIndex;\n"
           "  const float scale = count ? 1.0f / float(count) : 0.0f;\n"
           "  float total = 0;\n"
           "  for (std::int64_t r = 0; r < kRows; ++r)\n"
           "    if (targets[r] != kIgnoreIndex)\n"
           "      total += rowLse[r] - " +
           targetLogit +
           ";\n"
           "  const float mean = total * scale;\n"
           "  const float part = mean / float(kLossDiv);\n" +
           (c["accumulate"] ? "  loss[0] += part;\n" : "  loss[0] = part;\n") +
           "  gradScale[0] = scale;\n")
              .str());
  if (!c["grad"])
    return;
  std::string store = "  dLogits[item] = g;\n";
  if (c["grad_div"] != 1) {
    k.constant("kGradDiv", c["grad_div"]);
    store = "  dLogits[item] = g * (1.0f / float(kGradDiv));\n";
  }
  k.phase("one thread per logit: (softmax - onehot) / count", rows * width,
          ("  const std::int64_t r = item / kWidth, column = item % kWidth;\n"
           "  const std::int32_t target = targets[r];\n"
           "  const float g =\n"
           "      target != kIgnoreIndex" +
           columnGuard +
           "\n"
           "          ? crossEntropyLogitGrad(logits[item], rowLse[r],\n"
           "                                  column == " +
           localTarget +
           ",\n"
           "                                  gradScale[0])\n"
           "          : 0.0f;\n" +
           store)
              .str());
}

LogicalResult crossEntropy(const Constants &c, KernelSource &k, EmitError) {
  int64_t rows = c["rows"], vocab = c["vocab"];
  // Rows kWidth apart; with `valid`, only its first kValid columns are words
  // (row padding for aligned GEMMs: never read, zero gradient).
  bool padded = c["valid"] > 0 && c["valid"] < vocab;
  StringRef words = padded ? "kValid" : "kWidth";
  if (padded)
    k.constant("kValid", c["valid"]);
  k.header = "weft/kernels/Loss.h";
  k.read("logits", rows * vocab);
  k.readIndex("targets", rows, "-100 = ignored");
  k.workspaces.push_back({"rowLse", rows, "log-sum-exp per row"});
  k.phase(
      "one thread per row: log-sum-exp", rows,
      ("  rowLse[item] = logSumExp(" + words + ", logits + item * kWidth);\n")
          .str());
  lossAndGradient(
      c, k, vocab,
      ("shardTargetLogit(" + words + ", 0, logits + r * kWidth, targets[r])")
          .str(),
      "target", padded ? " && column < kValid" : "");
  return success();
}

/// Constants of a vocabulary shard: columns [vocab_start, vocab_start +
/// vocab_local) of a `vocab`-word vocabulary, of which kValid are real words
/// (the rest pad the vocabulary to a multiple of the shard count).
void shardConstants(const Constants &c, KernelSource &k) {
  k.constant("kVocabStart", c["vocab_start"]);
  k.constant("kValid", std::clamp<int64_t>(c["vocab"] - c["vocab_start"], 0,
                                           c["vocab_local"]));
}

LogicalResult crossEntropyShardMax(const Constants &c, KernelSource &k,
                                   EmitError) {
  int64_t rows = c["rows"], width = c["vocab_local"];
  k.header = "weft/kernels/Loss.h";
  k.constant("kWidth", width);
  shardConstants(c, k);
  k.read("logits", rows * width);
  k.write("localMax", rows, "all-reduce MAX next");
  k.phase("one thread per row", rows,
          "  localMax[item] = rowMax(kValid, logits + item * kWidth);\n");
  return success();
}

LogicalResult crossEntropyShardSums(const Constants &c, KernelSource &k,
                                    EmitError) {
  int64_t rows = c["rows"], width = c["vocab_local"];
  k.header = "weft/kernels/Loss.h";
  k.constant("kWidth", width);
  shardConstants(c, k);
  k.read("logits", rows * width);
  k.readIndex("targets", rows, "-100 = ignored");
  k.read("globalMax", rows);
  k.write("sumExp", rows, "all-reduce SUM next");
  k.write("targetLogit", rows, "0 off-shard; all-reduce SUM next");
  k.phase("one thread per row", rows,
          "  const float *row = logits + item * kWidth;\n"
          "  sumExp[item] = rowSumExp(kValid, row, globalMax[item]);\n"
          "  targetLogit[item] =\n"
          "      shardTargetLogit(kValid, kVocabStart, row, targets[item]);\n");
  return success();
}

LogicalResult crossEntropyShardFinish(const Constants &c, KernelSource &k,
                                      EmitError) {
  int64_t rows = c["rows"], width = c["vocab_local"];
  k.header = "weft/kernels/Loss.h";
  shardConstants(c, k);
  k.read("logits", rows * width);
  k.readIndex("targets", rows, "-100 = ignored");
  k.read("globalMax", rows);
  k.read("globalSumExp", rows);
  k.read("globalTargetLogit", rows);
  k.workspaces.push_back({"rowLse", rows, "log-sum-exp per row"});
  k.phase(
      "one thread per row: log-sum-exp", rows,
      "  rowLse[item] = globalMax[item] + math::log(globalSumExp[item]);\n");
  lossAndGradient(c, k, width, "globalTargetLogit[r]",
                  "std::int64_t(target) - kVocabStart", " && column < kValid");
  return success();
}

LogicalResult vocabEmbeddingForward(const Constants &c, KernelSource &k,
                                    EmitError) {
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kHidden", hidden);
  k.constant("kVocabStart", c["vocab_start"]);
  k.constant("kVocabLocal", c["vocab_local"]);
  k.readIndex("ids", tokens);
  k.read("table", c["vocab_local"] * hidden, "this shard's rows");
  k.write("out", tokens * hidden, "zeros for tokens off the shard");
  k.phase("one thread per token", tokens,
          "  vocabEmbeddingRowForward(kHidden, kVocabStart, kVocabLocal, "
          "table, ids[item],\n"
          "                           out + item * kHidden);\n");
  return success();
}

LogicalResult vocabEmbeddingBackward(const Constants &c, KernelSource &k,
                                     EmitError) {
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kHidden", hidden);
  k.constant("kVocabStart", c["vocab_start"]);
  k.constant("kVocabLocal", c["vocab_local"]);
  k.readIndex("ids", tokens);
  k.read("dOut", tokens * hidden);
  k.write("dTable", c["vocab_local"] * hidden, "+=, atomic on the GPU");
  k.phase("one thread per token", tokens,
          "  vocabEmbeddingRowBackward(kHidden, kVocabStart, kVocabLocal, "
          "ids[item],\n"
          "                            dOut + item * kHidden, dTable);\n");
  return success();
}

LogicalResult positionEmbeddingForward(const Constants &c, KernelSource &k,
                                       EmitError emitError) {
  if (failed(checkPositions(c, emitError)))
    return failure();
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kSeq", c["seq"]);
  k.constant("kHidden", hidden);
  k.read("x", tokens * hidden);
  k.read("wpe", c["positions"] * hidden);
  k.write("out", tokens * hidden, "may be x");
  k.phase("one thread per token", tokens,
          "  positionEmbeddingRowForward(kHidden, x + item * kHidden,\n"
          "                              wpe + item % kSeq * kHidden, "
          "out + item * kHidden);\n");
  return success();
}

LogicalResult positionEmbeddingBackward(const Constants &c, KernelSource &k,
                                        EmitError emitError) {
  if (failed(checkPositions(c, emitError)))
    return failure();
  int64_t tokens = c["batch"] * c["seq"], hidden = c["hidden"];
  k.header = "weft/kernels/Embedding.h";
  k.constant("kSeq", c["seq"]);
  k.constant("kHidden", hidden);
  k.read("dOut", tokens * hidden);
  k.write("dWpe", c["positions"] * hidden, "+=, atomic on the GPU");
  k.phase("one thread per token", tokens,
          "  float *row = dWpe + item % kSeq * kHidden;\n"
          "  for (std::int64_t i = 0; i < kHidden; ++i)\n"
          "    accumulate(&row[i], dOut[item * kHidden + i]);\n");
  return success();
}

/// Every registry kernel of weft/kernels/KernelAbi.h (names, constants,
/// defaults and ranges) with its generator, sorted by name. Every ABI entry
/// must have a generator and every generator an ABI entry: anything else is
/// a fatal error on the first use.
const SmallVector<KernelSpec> &kernelSpecs() {
  static const SmallVector<KernelSpec> specs = [] {
    static constexpr std::pair<StringLiteral, Generator> generators[] = {
        {"activation_backward", activationBackward},
        {"activation_forward", activationForward},
        {"attention_backward", attentionBackward},
        {"attention_forward", attentionForward},
        {"bias_add", biasAdd},
        {"bias_grad", biasGrad},
        {"cross_entropy", crossEntropy},
        {"cross_entropy_shard_finish", crossEntropyShardFinish},
        {"cross_entropy_shard_max", crossEntropyShardMax},
        {"cross_entropy_shard_sums", crossEntropyShardSums},
        {"embedding_backward", embeddingBackward},
        {"embedding_forward", embeddingForward},
        {"gated_backward", gatedBackward},
        {"gated_forward", gatedForward},
        {"layer_norm_backward", layerNormBackward},
        {"layer_norm_backward_add", layerNormBackwardAdd},
        {"layer_norm_forward", layerNormForward},
        {"position_embedding_backward", positionEmbeddingBackward},
        {"position_embedding_forward", positionEmbeddingForward},
        {"residual_add", residualAdd},
        {"residual_layer_norm_forward", residualLayerNormForward},
        {"residual_rms_norm_forward", residualRmsNormForward},
        {"rms_norm_backward", rmsNormBackward},
        {"rms_norm_backward_add", rmsNormBackwardAdd},
        {"rms_norm_forward", rmsNormForward},
        {"rotary_backward", rotaryBackward},
        {"rotary_forward", rotaryForward},
        {"vocab_embedding_backward", vocabEmbeddingBackward},
        {"vocab_embedding_forward", vocabEmbeddingForward},
    };
    for (const auto &[name, generate] : generators)
      if (!weft::kernels::findKernelAbi(name))
        llvm::report_fatal_error("weft-generate-kernels: generator for '" +
                                 Twine(name) +
                                 "', which weft/kernels/KernelAbi.h lacks");
    SmallVector<KernelSpec> specs;
    for (const weft::kernels::KernelAbi &abi : weft::kernels::kKernelAbi) {
      StringRef name(abi.name);
      const auto *generator = llvm::find_if(
          generators, [&](const auto &entry) { return entry.first == name; });
      if (generator == std::end(generators))
        llvm::report_fatal_error("weft-generate-kernels: no generator for "
                                 "registry kernel '" +
                                 Twine(name) + "' of weft/kernels/KernelAbi.h");
      KernelSpec &spec = specs.emplace_back();
      spec.name = name;
      for (const weft::kernels::ConstantAbi &c : abi)
        spec.constants.push_back(
            {StringRef(c.name), c.defaultValue, c.min, c.max});
      spec.generate = generator->second;
    }
    return specs;
  }();
  return specs;
}

const KernelSpec *findSpec(StringRef registryName) {
  const SmallVector<KernelSpec> &specs = kernelSpecs();
  const KernelSpec *it = llvm::lower_bound(
      specs, registryName,
      [](const KernelSpec &spec, StringRef key) { return spec.name < key; });
  return it != specs.end() && it->name == registryName ? it : nullptr;
}

//===----------------------------------------------------------------------===//
// Rendering
//===----------------------------------------------------------------------===//

struct Geometry {
  int64_t blockSize, gridSize;
};

Geometry geometry(int64_t items) {
  int64_t block = std::min(items, kMaxBlockSize);
  return {block, (items + block - 1) / block};
}

/// Joins `words` with spaces into lines of at most 80 columns (a word longer
/// than a line gets a line of its own): the first line starts with `first`,
/// the others with `next`.
std::string fillLines(StringRef first, StringRef next,
                      ArrayRef<std::string> words) {
  std::string text = first.str();
  size_t lineStart = 0;
  bool fresh = true;
  for (const std::string &word : words) {
    if (!fresh && text.size() - lineStart + 1 + word.size() > 80) {
      text += "\n";
      lineStart = text.size();
      text += next.str();
      fresh = true;
    }
    text += (fresh ? "" : " ") + word;
    fresh = false;
  }
  return text + "\n";
}

/// Splits `text` at spaces.
SmallVector<std::string> words(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, ' ', -1, /*KeepEmpty=*/false);
  return llvm::to_vector(
      llvm::map_range(parts, [](StringRef part) { return part.str(); }));
}

/// `items` with a comma after all but the last, which gets `last`.
SmallVector<std::string> listWords(ArrayRef<std::string> items,
                                   StringRef last) {
  SmallVector<std::string> result;
  for (auto [i, item] : llvm::enumerate(items))
    result.push_back(item + (i + 1 == items.size() ? last.str() : ","));
  return result;
}

/// Whether `name` occurs in `code` as a whole identifier.
bool mentions(StringRef code, StringRef name) {
  for (size_t at = code.find(name); at != StringRef::npos;
       at = code.find(name, at + 1)) {
    auto isIdentifierChar = [](char c) { return llvm::isAlnum(c) || c == '_'; };
    bool before = at > 0 && isIdentifierChar(code[at - 1]);
    size_t endAt = at + name.size();
    bool after = endAt < code.size() && isIdentifierChar(code[endAt]);
    if (!before && !after)
      return true;
  }
  return false;
}

std::string paramType(const Operand &operand) {
  std::string type = operand.isWrite ? "" : "const ";
  return type + (operand.isIndex ? "std::int32_t *" : "float *");
}

/// A phase function's parameters: the operands and workspaces it mentions.
struct PhaseParams {
  SmallVector<std::string> declarations; ///< `const float *x`
  SmallVector<std::string> operands;     ///< names of the operands passed
  SmallVector<std::string> workspaces;   ///< names of the workspaces passed
};

PhaseParams phaseParams(const KernelSource &k, const Phase &phase) {
  PhaseParams params;
  params.declarations.push_back(mentions(phase.body, "item")
                                    ? "std::int64_t item"
                                    : "std::int64_t /*item*/");
  for (const Operand &operand : k.operands)
    if (mentions(phase.body, operand.name)) {
      params.declarations.push_back(paramType(operand) + operand.name);
      params.operands.push_back(operand.name);
    }
  for (const Workspace &ws : k.workspaces)
    if (mentions(phase.body, ws.name)) {
      params.declarations.push_back("float *" + ws.name);
      params.workspaces.push_back(ws.name);
    }
  return params;
}

/// The call of phase `index` for `item`; workspaces are named with `prefix`.
std::string phaseCall(unsigned index, const PhaseParams &params,
                      StringRef prefix, StringRef indent) {
  SmallVector<std::string> args = {"item"};
  llvm::append_range(args, params.operands);
  for (const std::string &ws : params.workspaces)
    args.push_back((prefix + ws).str());
  return fillLines(indent.str() + "phase" + std::to_string(index) + "(",
                   indent.str() + "       ", listWords(args, ");"));
}

/// `const float *x = static_cast<const float *>(operands[0]);` per operand.
std::string unpackOperands(const KernelSource &k) {
  std::string text;
  for (auto [i, operand] : llvm::enumerate(k.operands)) {
    std::string type = paramType(operand);
    text += fillLines(
        "  " + type + operand.name + " = ", "      ",
        {"static_cast<" + type + ">(operands[" + std::to_string(i) + "]);"});
  }
  return text;
}

std::string itemCount(int64_t items) {
  return std::to_string(items) + (items == 1 ? " item" : " items");
}

std::string render(KernelOp kernel, const KernelSpec &spec,
                   const Constants &constants, const KernelSource &k) {
  std::string entry = entryName(kernel.getSymName());
  std::string text;
  llvm::raw_string_ostream os(text);
  unsigned numReads = k.numReads();

  os << fillLines(
      "// ", "// ",
      words((kernel.getFile() + ": kernel @" + kernel.getSymName() +
             ", generated by weft-generate-kernels (docs/kernels.md); "
             "do not edit.")
                .str()));
  SmallVector<std::string> values;
  for (const ConstantSpec &c : spec.constants)
    values.push_back((c.name + " = " + Twine(constants[c.name]) +
                      (kernel.getConstants().get(c.name) ? "" : " (default)"))
                         .str());
  os << "// Registry kernel " << spec.name
     << " (docs/runtime.md, \"Kernel ABI\") with\n"
     << fillLines("//   ", "//   ", listWords(values, "."));
  os << "//\n// Parameters of every entry (the launch's reads, then its "
        "writes):\n";
  for (auto [i, operand] : llvm::enumerate(k.operands)) {
    bool isWrite = operand.isWrite;
    os << "//   " << (isWrite ? "writes[" : "reads[")
       << (isWrite ? i - numReads : i) << "] " << operand.name << ": "
       << (operand.isIndex ? "i32" : "f32") << " x " << operand.elements;
    if (!operand.note.empty())
      os << " (" << operand.note << ")";
    os << "\n";
  }
  if (!k.workspaces.empty()) {
    os << "// Workspace: a __device__ array on the GPU (launches of this "
          "kernel must not\n// overlap), a local array in the host entry:\n";
    for (const Workspace &ws : k.workspaces)
      os << "//   " << ws.name << ": f32 x " << ws.elements << " (" << ws.note
         << ")\n";
  }
  os << "//\n"
     << fillLines("// ", "// ",
                  words("CUDA: the phases' entries, launched in order on one "
                        "stream (" +
                        entry + "_launch does this):"));
  for (auto [i, phase] : llvm::enumerate(k.phases)) {
    Geometry g = geometry(phase.items);
    os << fillLines("//   ", "//     ",
                    words((entry + "_" + Twine(i) + "<<<" + Twine(g.gridSize) +
                           ", " + Twine(g.blockSize) + ">>>: " +
                           itemCount(phase.items) + ", " + phase.what + ".")
                              .str()));
  }
  os << fillLines(
      "// ", "// ",
      words("Host: " + entry +
            "_host runs the items of each phase in order. Both take "
            "`void *const *operands`, operands[i] pointing at "
            "parameter i."));
  if (!k.note.empty())
    os << fillLines("// ", "// ",
                    words("Versus the registry's host loops: " + k.note + "."));
  os << "//\n// Build: nvcc -std=c++17 -I <weft>/runtime/kernels/include -c "
        "<this file>;\n// the host entry alone compiles as C++17 "
        "(-x c++); NVRTC compiles the device entries.\n";
  // One line per phase that the runtime reads to launch a compiled module
  // (docs/kernels.md, "Loading generated kernels"): entry, grid, block.
  for (auto [i, phase] : llvm::enumerate(k.phases)) {
    Geometry g = geometry(phase.items);
    os << "// weft-launch: " << entry << "_" << i << " grid " << g.gridSize
       << " block " << g.blockSize << "\n";
  }
  os << "\n";

  os << "#include \"" << k.header << "\"\n";
  if (!k.workspaces.empty())
    os << "\n#ifndef __CUDACC_RTC__\n#include <vector>\n#endif\n";
  os << "\nusing namespace weft::kernels;\n\nnamespace {\n\n";
  bool anyConstant = false;
  for (const auto &[name, decl] : k.constants) {
    if (llvm::none_of(k.phases, [&, &name = name](const Phase &phase) {
          return mentions(phase.body, name);
        }))
      continue;
    os << decl << "\n";
    anyConstant = true;
  }
  if (anyConstant)
    os << "\n";
  SmallVector<PhaseParams> params;
  for (auto [i, phase] : llvm::enumerate(k.phases)) {
    params.push_back(phaseParams(k, phase));
    os << "/// Phase " << i << ": " << phase.what << ".\n"
       << fillLines("WEFT_HD inline void phase" + std::to_string(i) + "(",
                    "    ", listWords(params.back().declarations, ") {"))
       << phase.body << "}\n\n";
  }
  os << "} // namespace\n\n#ifdef __CUDACC__\n";
  for (const Workspace &ws : k.workspaces)
    os << "__device__ float ws_" << ws.name << "[" << ws.elements << "];\n";
  if (!k.workspaces.empty())
    os << "\n";
  SmallVector<std::string> entryParams, entryArgs;
  for (const Operand &operand : k.operands) {
    entryParams.push_back(paramType(operand) + operand.name);
    entryArgs.push_back(operand.name);
  }
  for (auto [i, phase] : llvm::enumerate(k.phases)) {
    os << "extern \"C\" __global__ void __launch_bounds__(" << kMaxBlockSize
       << ")\n"
       << fillLines(entry + "_" + std::to_string(i) + "(", "    ",
                    listWords(entryParams, ") {"))
       << "  const std::int64_t item =\n"
          "      std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
       << "  if (item < " << phase.items << ")\n"
       << phaseCall(i, params[i], "ws_", "    ") << "}\n\n";
  }
  // NVRTC compiles the device entries only: the launcher and the host
  // entry need the CUDA runtime and the standard library.
  os << "#ifndef __CUDACC_RTC__\n"
     << "extern \"C\" cudaError_t " << entry << "_launch(\n"
     << "    void *const *operands, cudaStream_t stream) {\n"
     << unpackOperands(k);
  for (auto [i, phase] : llvm::enumerate(k.phases)) {
    Geometry g = geometry(phase.items);
    os << fillLines("  " + entry + "_" + std::to_string(i) + "<<<" +
                        std::to_string(g.gridSize) + ", " +
                        std::to_string(g.blockSize) + ", 0, stream>>>(",
                    "      ", listWords(entryArgs, ");"))
       << "  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)\n"
          "    return err;\n";
  }
  os << "  return cudaSuccess;\n}\n#endif // __CUDACC_RTC__\n"
     << "#endif // __CUDACC__\n\n";

  os << "#ifndef __CUDACC_RTC__\n"
     << "extern \"C\" void " << entry << "_host(void *const *operands) {\n"
     << unpackOperands(k);
  for (const Workspace &ws : k.workspaces)
    os << "  std::vector<float> " << ws.name << "Storage(" << ws.elements
       << ");\n  float *" << ws.name << " = " << ws.name << "Storage.data();\n";
  for (auto [i, phase] : llvm::enumerate(k.phases))
    os << "  for (std::int64_t item = 0; item < " << phase.items
       << "; ++item)\n"
       << phaseCall(i, params[i], "", "    ");
  os << "}\n#endif // __CUDACC_RTC__\n";
  return text;
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct GenerateKernelsPass
    : weftx::impl::WeftGenerateKernelsBase<GenerateKernelsPass> {
  using Base::Base;
  void runOnOperation() override;
  LogicalResult generate(KernelOp kernel, const KernelSpec &spec);

private:
  /// The launches of each kernel symbol, in walk order; collected by one walk
  /// of the module on first use.
  ArrayRef<LaunchOp> launchesOf(StringRef kernel);

  std::optional<llvm::StringMap<SmallVector<LaunchOp>>> launches;
};

ArrayRef<LaunchOp> GenerateKernelsPass::launchesOf(StringRef kernel) {
  if (!launches) {
    launches.emplace();
    getOperation().walk([&](LaunchOp launch) {
      (*launches)[launch.getKernel()].push_back(launch);
    });
  }
  auto it = launches->find(kernel);
  if (it == launches->end())
    return {};
  return it->second;
}

LogicalResult GenerateKernelsPass::generate(KernelOp kernel,
                                            const KernelSpec &spec) {
  auto emitError = [&]() -> InFlightDiagnostic {
    return kernel.emitOpError() << "(registry kernel '" << spec.name << "') ";
  };
  DictionaryAttr given = kernel.getConstants();
  for (NamedAttribute constant : given)
    if (!llvm::any_of(spec.constants, [&](const ConstantSpec &c) {
          return c.name == constant.getName().getValue();
        }))
      return emitError() << "has no constant '" << constant.getName().getValue()
                         << "'";
  llvm::StringMap<int64_t> values;
  for (const ConstantSpec &c : spec.constants) {
    auto attr = given.getAs<IntegerAttr>(c.name);
    if (!attr && !c.defaultValue)
      return emitError() << "needs constant '" << c.name << "'";
    int64_t value = attr ? attr.getInt() : *c.defaultValue;
    if (value < c.min || value > c.max) {
      InFlightDiagnostic diag = emitError() << "constant '" << c.name << "' is "
                                            << value << ", expected ";
      if (c.max == kNoLimit)
        return diag << "at least " << c.min;
      return diag << "in [" << c.min << ", " << c.max << "]";
    }
    values[c.name] = value;
  }
  Constants constants(std::move(values));
  KernelSource source;
  if (failed(spec.generate(constants, source, emitError)))
    return failure();
  for (const Phase &phase : source.phases)
    if (geometry(phase.items).gridSize > kMaxGridSize)
      return emitError() << "needs " << phase.items
                         << " threads for one phase, more than a 1-D grid "
                            "holds";
  kernel.setSource(render(kernel, spec, constants, source));

  // Every launch must match the generated parameter list.
  unsigned numReads = source.numReads(),
           numWrites = source.operands.size() - numReads;
  for (LaunchOp launch : launchesOf(kernel.getSymName())) {
    if (launch.getArgs() && !launch.getArgs()->empty())
      return launch.emitOpError()
             << "passes scalar args to @" << kernel.getSymName()
             << ", whose generated entries take none";
    unsigned reads = launch.getReads().size(),
             writes = launch.getWrites().size();
    if (reads != numReads || writes != numWrites)
      return launch.emitOpError()
             << "passes " << reads << " reads and " << writes << " writes to @"
             << kernel.getSymName() << ", whose generated entries take "
             << numReads << " and " << numWrites;
  }
  return success();
}

void GenerateKernelsPass::runOnOperation() {
  llvm::scope_exit forgetLaunches([&] { launches.reset(); });
  for (KernelOp kernel : getOperation().getOps<KernelOp>()) {
    StringRef registryName = kernel.getRegistryName();
    const KernelSpec *spec = findSpec(registryName);
    if (!spec) {
      kernel.emitWarning() << "no CUDA source is generated for kernel '"
                           << registryName
                           << "': it is not a registry kernel with a WEFT_HD "
                              "implementation";
      kernel.setSource(("// weft-generate-kernels: no generated source for "
                        "kernel '" +
                        registryName +
                        "' (not a registry kernel with a WEFT_HD "
                        "implementation; docs/kernels.md).\n")
                           .str());
      continue;
    }
    if (failed(generate(kernel, *spec)))
      return signalPassFailure();
  }
}

} // namespace
