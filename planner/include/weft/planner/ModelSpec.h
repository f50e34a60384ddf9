//===- ModelSpec.h - What the planner knows about a model -------*- C++ -*-===//
//
// The planner is plain C++ and never sees MLIR. The compiler fills a ModelSpec
// from the model dialect: shapes from the ops' attributes, parameter counts and
// FLOPs from the IR analysis (weft::ModelAnalysis), never from a closed formula
// on the config.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_MODELSPEC_H
#define WEFT_PLANNER_MODELSPEC_H

#include <cstdint>
#include <string>

namespace weft::planner {

struct ModelSpec {
  std::string name;   // preset name or config path
  std::string family; // gpt2 | llama | mistral | bert | roberta

  // Shapes.
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t ffnSize = 0; // intermediate size of the MLP
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0; // == numHeads without GQA
  int64_t headDim = 0;
  int64_t maxPositions = 0;
  bool causal = true;
  bool rotary = false;
  bool gatedMlp = false;  // SwiGLU: three MLP matrices instead of two
  bool tiedHead = true;   // LM head shares the token embedding
  bool rmsNorm = false;   // RMSNorm (one vector) instead of LayerNorm (two)
  bool linearBias = true; // linear layers carry biases
  /// The MLP's activation: gelu (erf), gelu_tanh, relu or silu. A tanh GELU
  /// after a biased up projection folds into its GEMM's epilogue
  /// (TrainingConfig::gemmEpilogues).
  std::string mlpActivation = "gelu_tanh";

  // Exact parameter counts from the IR (unique parameters; a tied head is
  // counted once, with the embedding).
  int64_t totalParams = 0;
  int64_t embeddingParams = 0; // token/position/type embeddings (+ their norm)
  int64_t layerParams = 0;     // one transformer block (all blocks are equal)
  int64_t headParams = 0;      // final norm + head parameters not shared

  // Forward FLOPs per token from the IR (multiply-add = 2 FLOPs). Attention
  // score/context FLOPs grow with the sequence length and are given per
  // position: a layer's forward FLOPs per token are
  //   layerMatmulFlopsPerToken + layerAttentionFlopsPerTokenPerPosition * seq
  // (full, not causally halved, as in Narayanan et al. 2021).
  double embeddingFlopsPerToken = 0;
  double layerMatmulFlopsPerToken = 0;
  double layerAttentionFlopsPerTokenPerPosition = 0;
  double headFlopsPerToken = 0; // LM head projection (+ MLM transform)

  double forwardFlopsPerToken(int64_t seqLen) const {
    return embeddingFlopsPerToken + headFlopsPerToken +
           numLayers * (layerMatmulFlopsPerToken +
                        layerAttentionFlopsPerTokenPerPosition * seqLen);
  }
};

} // namespace weft::planner

#endif // WEFT_PLANNER_MODELSPEC_H
