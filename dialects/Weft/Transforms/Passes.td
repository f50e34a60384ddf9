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

//===----------------------------------------------------------------------===//
// Lowering (docs/lowering.md)
//===----------------------------------------------------------------------===//

def WeftAttachMesh : Pass<"weft-attach-mesh", "::mlir::ModuleOp"> {
  let summary = "Attach the device mesh, the parallel configuration, pipeline "
                "stages and per-parameter placements";
  let description = [{
    Creates `shard.grid @weft_mesh(shape = DPxPPxTP)` (row-major linear index
    = the planner's rank order), attaches `weft.parallel` to each model,
    assigns `weft.stage` to every block and top-level op, and a
    `weft.placement` to every parameter. See docs/lowering.md.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel degree">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline-parallel degree">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel degree">,
    Option<"zero", "zero", "int64_t", "0", "ZeRO stage over DP (0-3)">,
    Option<"microBatch", "micro-batch", "int64_t", "1", "Micro-batch size">,
    Option<"gradAccum", "grad-accum", "int64_t", "1",
           "Micro-batches per step and DP rank">,
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "Pipeline schedule: gpipe, 1f1b or interleaved">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Model chunks per pipeline rank (interleaved)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "Sequence parallelism with TP">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "Activation recompute: none, selective or full">,
    Option<"prefetchDepth", "prefetch-depth", "int64_t", "0",
           "ZeRO-3: all-gather buckets issued ahead">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "0",
           "ZeRO-3: all-gather bucket size in bytes">,
    ListOption<"layersPerStage", "layers-per-stage", "int64_t",
               "Blocks per pipeline stage (default: as even as possible)">,
  ];
}

def WeftPartitionTensor : Pass<"weft-partition-tensor", "::mlir::ModuleOp"> {
  let summary = "Megatron tensor parallelism: local shapes and TP collectives";
  let description = [{
    Rewrites each model to what one TP rank computes: column-parallel QKV and
    MLP up/gate, row-parallel attention-out and MLP-down followed by an
    all-reduce (reduce-scatter/all-gather with sequence parallelism),
    vocab-parallel embedding, LM head and cross-entropy (vocabularies padded
    to a multiple of TP). See docs/lowering.md.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

def WeftSplitStages : Pass<"weft-split-stages", "::mlir::ModuleOp"> {
  let summary = "Split each model into one function per pipeline stage";
}

def WeftAutodiff : Pass<"weft-autodiff", "::mlir::ModuleOp"> {
  let summary = "Generate the backward function of every stage function";
  let description = [{
    Emits one `weft.*_grad` op per forward op in reverse order, the adjoints
    of the collectives, and the forward values the backward needs, following
    the recompute policy in `weft.parallel`. See docs/lowering.md.
  }];
}

#endif // WEFT_TRANSFORMS_PASSES_TD
