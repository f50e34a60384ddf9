//===- ModelAnalysis.cpp - Parameters and FLOPs of a weft model -----------===//
#include "Weft/Analysis/ModelAnalysis.h"
#include "Weft/IR/WeftOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::weft;

static int64_t dim(Value value, unsigned index) {
  return cast<RankedTensorType>(value.getType()).getDimSize(index);
}

/// Forward FLOPs per token of one op: 2 per multiply-add of its matrix
/// products. Norms, activations and residual adds are memory-bound and not
/// counted, as in the usual 6N accounting.
static PartFlops opFlops(Operation *op) {
  PartFlops flops;
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](AttentionOp attn) {
        int64_t hidden = dim(attn.getInput(), 2);
        int64_t qWidth = attn.getNumHeads() * attn.getHeadDim();
        int64_t projected = 0;
        for (Value weight : attn.getQkvWeights())
          projected += dim(weight, 1);
        flops.matmulPerToken = 2.0 * hidden * projected + 2.0 * qWidth * hidden;
        // Q·Kᵀ and P·V: each query meets every position once per head.
        flops.attentionPerTokenPerPosition = 2.0 * 2.0 * qWidth;
      })
      .Case([&](MLPOp mlp) {
        int64_t hidden = dim(mlp.getInput(), 2);
        int64_t ffn = dim(mlp.getUpWeight(), 1);
        int matrices = mlp.getGateWeight() ? 3 : 2;
        flops.matmulPerToken = 2.0 * matrices * hidden * ffn;
      })
      .Case([&](LinearOp linear) {
        flops.matmulPerToken =
            2.0 * dim(linear.getWeight(), 0) * dim(linear.getWeight(), 1);
      })
      .Case([&](LMHeadOp head) {
        flops.matmulPerToken =
            2.0 * dim(head.getWeight(), 0) * dim(head.getWeight(), 1);
      });
  return flops;
}

static void accumulate(PartFlops &into, const PartFlops &add) {
  into.matmulPerToken += add.matmulPerToken;
  into.attentionPerTokenPerPosition += add.attentionPerTokenPerPosition;
}

SmallVector<func::FuncOp> mlir::weft::getModels(ModuleOp module) {
  SmallVector<func::FuncOp> models;
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(WeftDialect::kModelAttrName))
      models.push_back(func);
  return models;
}

ModelAnalysis::ModelAnalysis(func::FuncOp model) {
  shape.family =
      cast<StringAttr>(model->getAttr(WeftDialect::kModelAttrName)).str();
  llvm::DenseSet<Operation *> counted;
  // Counts each parameter the first time any op uses it (or, for unused
  // ones, where it is declared) and charges it to the part being walked.
  auto countParams = [&](Operation *op, int64_t &part) {
    auto countOne = [&](ParamOp param) {
      if (!param || !counted.insert(param).second)
        return;
      part += param.getNumElements();
      totalParams += param.getNumElements();
    };
    countOne(dyn_cast<ParamOp>(op));
    for (Value operand : op->getOperands())
      countOne(operand.getDefiningOp<ParamOp>());
  };

  bool afterBlocks = false;
  for (Operation &op : model.getBody().front()) {
    if (auto block = dyn_cast<BlockOp>(op)) {
      afterBlocks = true;
      int64_t params = 0;
      PartFlops flops;
      block.getBody().walk([&](Operation *inner) {
        countParams(inner, params);
        accumulate(flops, opFlops(inner));
      });
      blockParams.push_back(params);
      blockFlops.push_back(flops);
      continue;
    }
    // Parameters are declared before their first use; charge them at the use.
    if (isa<ParamOp>(op) && !op.use_empty())
      continue;
    countParams(&op, afterBlocks ? headParams : embeddingParams);
    accumulate(afterBlocks ? headFlops : embeddingFlops, opFlops(&op));
  }

  // Shape facts.
  shape.numLayers = blockParams.size();
  Value embeddingTable;
  model.walk([&](Operation *op) {
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](EmbeddingOp embedding) {
          embeddingTable = embedding.getTable();
          shape.vocabSize = dim(embedding.getTable(), 0);
          shape.hiddenSize = dim(embedding.getTable(), 1);
          if (Value positions = embedding.getPositions())
            shape.maxPositions =
                dim(positions, 0) - embedding.getPositionOffset();
        })
        .Case([&](AttentionOp attn) {
          if (shape.numHeads)
            return;
          shape.numHeads = attn.getNumHeads();
          shape.numKvHeads = attn.getNumKvHeads();
          shape.headDim = attn.getHeadDim();
          shape.causal = attn.getCausal();
          shape.rotary = attn.getRopeTheta().has_value();
          shape.linearBias = !attn.getQkvBiases().empty();
        })
        .Case([&](MLPOp mlp) {
          if (shape.ffnSize)
            return;
          shape.ffnSize = dim(mlp.getUpWeight(), 1);
          shape.gatedMlp = static_cast<bool>(mlp.getGateWeight());
          shape.mlpActivation = mlp.getActivation().str();
        })
        .Case([&](RMSNormOp) { shape.rmsNorm = true; })
        .Case([&](LMHeadOp head) {
          shape.tiedHead = head.getWeight() == embeddingTable;
        });
  });
}

double ModelAnalysis::forwardFlopsPerToken(int64_t seqLen) const {
  double total = embeddingFlops.perToken(seqLen) + headFlops.perToken(seqLen);
  for (const PartFlops &block : blockFlops)
    total += block.perToken(seqLen);
  return total;
}

bool ModelAnalysis::blocksAreUniform() const {
  for (size_t i = 1; i < blockParams.size(); ++i)
    if (blockParams[i] != blockParams[0] ||
        blockFlops[i].matmulPerToken != blockFlops[0].matmulPerToken ||
        blockFlops[i].attentionPerTokenPerPosition !=
            blockFlops[0].attentionPerTokenPerPosition)
      return false;
  return true;
}
