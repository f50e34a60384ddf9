//===- PrintModelStats.cpp - Report parameters and FLOPs ------------------===//
#include "Weft/Analysis/ModelAnalysis.h"
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "llvm/Support/Format.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTPRINTMODELSTATS
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;

namespace {
struct PrintModelStatsPass
    : mlir::weft::impl::WeftPrintModelStatsBase<PrintModelStatsPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::raw_ostream &os = llvm::outs();
    for (func::FuncOp model : getModels(getOperation())) {
      ModelAnalysis analysis(model);
      os << "model @" << model.getSymName() << " (" << analysis.shape.family
         << ")\n";
      os << "  params: " << analysis.totalParams << "\n";
      os << "  embedding params: " << analysis.embeddingParams << "\n";
      os << "  blocks: " << analysis.blockParams.size();
      if (!analysis.blockParams.empty())
        os << " x " << analysis.blockParams.front() << " params"
           << (analysis.blocksAreUniform() ? "" : " (not uniform)");
      os << "\n  head params: " << analysis.headParams << "\n";
      os << "  forward flops/token at seq " << seqLen << ": "
         << llvm::format("%.0f", analysis.forwardFlopsPerToken(seqLen)) << "\n";
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
