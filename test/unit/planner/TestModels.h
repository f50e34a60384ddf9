//===- TestModels.h - Model specs for the planner tests ---------*- C++ -*-===//
//
// Hand-filled ModelSpecs of GPT-style decoders (LayerNorm, GELU, biases, tied
// head, learned positions); the compiler fills these from IR in production.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TEST_UNIT_PLANNER_TESTMODELS_H
#define WEFT_TEST_UNIT_PLANNER_TESTMODELS_H

#include "weft/planner/ModelSpec.h"

namespace weft::planner::test {

inline ModelSpec gpt(int64_t hidden, int64_t layers, int64_t heads,
                     int64_t vocab = 51200, int64_t positions = 2048) {
  ModelSpec spec;
  spec.name = "gpt-test";
  spec.family = "gpt2";
  spec.vocabSize = vocab;
  spec.hiddenSize = hidden;
  spec.ffnSize = 4 * hidden;
  spec.numLayers = layers;
  spec.numHeads = heads;
  spec.numKvHeads = heads;
  spec.headDim = hidden / heads;
  spec.maxPositions = positions;
  spec.layerParams = 12 * hidden * hidden + 13 * hidden;
  spec.embeddingParams = (vocab + positions) * hidden;
  spec.headParams = 2 * hidden;
  spec.totalParams =
      spec.embeddingParams + layers * spec.layerParams + spec.headParams;
  spec.layerMatmulFlopsPerToken = 24.0 * hidden * hidden;
  spec.layerAttentionFlopsPerTokenPerPosition = 4.0 * hidden;
  spec.headFlopsPerToken = 2.0 * hidden * vocab;
  return spec;
}

/// GPT-3 XL shape: 1.3B parameters.
inline ModelSpec gpt1p3b() { return gpt(2048, 24, 16); }

} // namespace weft::planner::test

#endif // WEFT_TEST_UNIT_PLANNER_TESTMODELS_H
