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
           "DP collective buckets (gradient all-reduces and reduce-scatters, "
           "parameter all-gathers) in bytes; 0: 25 MiB">,
    ListOption<"layersPerStage", "layers-per-stage", "int64_t",
               "Blocks per pipeline stage (default: as even as possible)">,
  ];
}

def WeftPartitionTensor : Pass<"weft-partition-tensor", "::mlir::ModuleOp"> {
  let summary = "Megatron tensor parallelism: local shapes and TP collectives";
  let description = [{
    Rewrites each model to what one TP rank computes: `weft.tp_copy` then
    column-parallel QKV (`weft.tp_attention`, local heads; GPT-2's fused
    `[q|k|v]` split per third) and MLP up/gate, row-parallel attention-out
    and MLP-down followed by `shard.all_reduce` over grid axis 2 and the
    bias (`weft.bias_add`, once, after the reduction); vocab-parallel
    embedding (`weft.vocab_embedding` + all-reduce, then
    `weft.position_embedding`), LM head and
    `weft.vocab_parallel_cross_entropy`, with the vocabulary padded to a
    multiple of TP and each shard to a multiple of 8 rows where every rank
    keeps a word (`vocabShardRows`: aligned local logits). With `sequence_parallel`, `shard.all_gather` replaces
    `tp_copy` and `shard.reduce_scatter` the all-reduce (dimension 1). Every
    parameter gets `weft.shard = {global_name, global_shape[, tp_dim,
    local_size, segments, padding, sequence_partial]}`. With tp = 1 only the
    attributes change. See docs/lowering.md.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect",
                           "::mlir::tensor::TensorDialect"];
}

def WeftSplitStages : Pass<"weft-split-stages", "::mlir::ModuleOp"> {
  let summary = "Split each model into one function per pipeline stage";
  let description = [{
    Replaces each model by one `func.func` per pipeline stage, following the
    `weft.stage` of its top-level ops: `@<model>_stage<rank>`, or
    `@<model>_stage<rank>_chunk<chunk>` with interleaved virtual stages
    (virtual stage `s` runs on rank `s % pp` as chunk `s / pp`). A stage takes
    the activations of the stage before it, then the model inputs it reads
    (`weft.input` = tokens on the first stage, labels on the last), and
    returns the activation for the next stage, or the loss on the last one.
    Blocks keep their layer index. A parameter used on another stage than its
    own (a tied embedding in the LM head) is copied into that stage with
    `weft.tied_to = "<name>"`; the runtime sums the two copies' gradients.
    Each stage function carries `weft.parallel` and `weft.pipeline_stage =
    {model, stage, rank, chunk, num_stages}`. See docs/lowering.md.
  }];
}

def WeftAutodiff : Pass<"weft-autodiff", "::mlir::ModuleOp"> {
  let summary = "Generate the backward function of every model and stage "
                "function";
  let description = [{
    For every function that declares `weft.param`s (a model, or a pipeline
    stage after `weft-split-stages`) and returns one loss or activation,
    emits `@<name>_backward`: one `weft.*_grad` op per forward op in reverse
    order, one `weft.block_grad` region per layer, the adjoints of the
    collectives (`shard.all_reduce` and `weft.tp_copy` are each other's,
    `shard.reduce_scatter` and `shard.all_gather` likewise). The forward
    gains a `weft.save` for every activation the backward reads back with
    `weft.restore`, as the recompute policy decides: `recompute` in the
    function's or module's `weft.parallel` dictionary (`none`, `selective`,
    `full`; absent means `none`), unless the `recompute` option overrides it.
    The backward takes the forward's arguments and, for an activation result,
    its gradient; it returns the gradient of each float argument, then one
    gradient per parameter in declaration order (tied uses summed). See
    docs/autodiff.md.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::shard::ShardDialect"];
  let options = [
    Option<"recompute", "recompute", "std::string", "\"\"",
           "Override the recompute policy: none, selective or full">,
  ];
}

#endif // WEFT_TRANSFORMS_PASSES_TD
