//===- Passes.td - Weft dialect passes ---------------------*- tablegen -*-===//
#ifndef WEFT_TRANSFORMS_PASSES_TD
#define WEFT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftPrintModelStats : Pass<"weft-print-model-stats", "::mlir::ModuleOp"> {
  let summary = "Print parameter counts and FLOPs of every weft model";
  let description = [{
    Runs the model analysis (the one the planner consumes) on each
    `func.func` marked `weft.model` and prints its parameter counts by part
    (embedding, per block, head) and its forward FLOPs per token at
    `seq-len`. The IR is left unchanged.
  }];
  let options = [
    Option<"seqLen", "seq-len", "int64_t", /*default=*/"1024",
           "Sequence length at which attention FLOPs are counted">,
  ];
}

#endif // WEFT_TRANSFORMS_PASSES_TD
