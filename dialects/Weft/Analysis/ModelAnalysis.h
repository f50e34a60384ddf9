//===- ModelAnalysis.h - Parameters and FLOPs of a weft model ---*- C++ -*-===//
//
// Counts what a model holds and computes by walking its IR: every weft.param
// once (a tied weight is one value used twice), attributed to the embedding
// (before the first block), a block, or the head (after the last block); and
// forward FLOPs per token from the matrix products each op performs. The
// planner consumes these numbers instead of closed formulas on the config.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_ANALYSIS_MODELANALYSIS_H
#define WEFT_ANALYSIS_MODELANALYSIS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::weft {

/// Forward FLOPs per token of one part of the model (multiply-add = 2).
struct PartFlops {
  /// Matrix products whose cost does not depend on the sequence length.
  double matmulPerToken = 0;
  /// Attention scores and context: per token, per attended position.
  double attentionPerTokenPerPosition = 0;
  double perToken(int64_t seqLen) const {
    return matmulPerToken + attentionPerTokenPerPosition * seqLen;
  }
};

/// Shape facts read off the ops (from the first block for per-layer facts).
struct ModelShape {
  std::string family;
  int64_t vocabSize = 0, hiddenSize = 0, ffnSize = 0, numLayers = 0;
  int64_t numHeads = 0, numKvHeads = 0, headDim = 0, maxPositions = 0;
  bool causal = true, rotary = false, gatedMlp = false, tiedHead = false;
  bool rmsNorm = false, linearBias = false;
  std::string mlpActivation; // weft.mlp's: gelu, gelu_tanh, relu or silu
};

class ModelAnalysis {
public:
  /// `model` must verify (a func.func carrying weft.model).
  explicit ModelAnalysis(func::FuncOp model);

  ModelShape shape;
  int64_t totalParams = 0;
  int64_t embeddingParams = 0;
  int64_t headParams = 0;
  llvm::SmallVector<int64_t> blockParams;
  PartFlops embeddingFlops, headFlops;
  llvm::SmallVector<PartFlops> blockFlops;

  double forwardFlopsPerToken(int64_t seqLen) const;
  /// True when every block holds the same parameters and FLOPs.
  bool blocksAreUniform() const;
};

/// The models (func.func marked weft.model) in `module`, in order.
llvm::SmallVector<func::FuncOp> getModels(ModuleOp module);

} // namespace mlir::weft

#endif // WEFT_ANALYSIS_MODELANALYSIS_H
