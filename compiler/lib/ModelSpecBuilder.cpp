//===- ModelSpecBuilder.cpp - IR analysis -> planner input ----------------===//
#include "weft/Compiler/ModelSpecBuilder.h"

#include "Weft/Analysis/ModelAnalysis.h"

using namespace weft;

llvm::Expected<planner::ModelSpec>
weft::buildModelSpec(mlir::func::FuncOp model, llvm::StringRef name) {
  mlir::weft::ModelAnalysis analysis(model);
  if (analysis.blockParams.empty())
    return llvm::createStringError("model @" + model.getSymName().str() +
                                   " has no transformer blocks");
  if (!analysis.blocksAreUniform())
    return llvm::createStringError(
        "model @" + model.getSymName().str() +
        " has blocks of different sizes; the planner needs one repeated block");
  const mlir::weft::ModelShape &shape = analysis.shape;
  planner::ModelSpec spec;
  spec.name = name.str();
  spec.family = shape.family;
  spec.vocabSize = shape.vocabSize;
  spec.hiddenSize = shape.hiddenSize;
  spec.ffnSize = shape.ffnSize;
  spec.numLayers = shape.numLayers;
  spec.numHeads = shape.numHeads;
  spec.numKvHeads = shape.numKvHeads;
  spec.headDim = shape.headDim;
  spec.maxPositions = shape.maxPositions;
  spec.causal = shape.causal;
  spec.rotary = shape.rotary;
  spec.gatedMlp = shape.gatedMlp;
  spec.tiedHead = shape.tiedHead;
  spec.rmsNorm = shape.rmsNorm;
  spec.linearBias = shape.linearBias;
  spec.mlpActivation = shape.mlpActivation;
  spec.totalParams = analysis.totalParams;
  spec.embeddingParams = analysis.embeddingParams;
  spec.layerParams = analysis.blockParams.front();
  spec.headParams = analysis.headParams;
  spec.embeddingFlopsPerToken = analysis.embeddingFlops.matmulPerToken;
  spec.headFlopsPerToken = analysis.headFlops.matmulPerToken;
  spec.layerMatmulFlopsPerToken = analysis.blockFlops.front().matmulPerToken;
  spec.layerAttentionFlopsPerTokenPerPosition =
      analysis.blockFlops.front().attentionPerTokenPerPosition;
  return spec;
}
