//===- Passes.td - Weft to weftx conversion ----------------*- tablegen -*-===//
#ifndef WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD
#define WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftSchedule : Pass<"weft-schedule", "::mlir::ModuleOp"> {
  let summary = "Schedule differentiated weft stage functions as one weftx "
                "training step (level L1 to L2)";
  let description = [{
    Replaces the module's contents (a stage function `@f` and its
    `@f_backward` from `weft-autodiff`, with the `weft.parallel`
    configuration of `weft-attach-mesh`) by the weftx program every rank
    replays per optimizer step (docs/lowering.md, docs/exec-dialect.md).

    Supported slice: one stage and TP = 1 (so every DP rank runs one shared
    program), ZeRO 0 or 1, recompute `none`, fp32, and the GPT-2 and LLaMA
    families' ops (embedding with or without learned positions, layer and
    RMS norms, fused or separate QKV attention with GQA, biases and rotary
    embeddings, plain or gated MLPs, tied or untied LM head, cross-entropy).
    Anything else is rejected with an error naming the op or setting.

    Persistent state lives in four flat f32 buffers (`params`, `grads`,
    `exp_avg`, `exp_avg_sq`), one slot per parameter at a 64-byte aligned
    offset, so the DP all-reduce, the gradient norm, clipping and AdamW are
    one instruction each. On the `compute` stream: zero the gradients and
    `loss`; per micro-batch `load_batch`, the forward, the backward (grad ops
    recompute their kernels' internal state, docs/autodiff.md; parameter
    gradients accumulate with beta = 1 GEMMs and the kernels' `+=`); then
    the gradient all-reduce over the DP group, `grad_norm`, `clip` and
    `optimizer_step`. The loss is computed by the backward's fused
    `cross_entropy` kernel (`loss_div = grad_accum`,
    `grad_div = grad_accum * dp`, so the all-reduced gradient is the
    global-batch mean). Activations get one arena buffer per value and
    micro-batch; `weft-plan-memory` overlaps them by liveness.

    ZeRO-1 pads each slot to a multiple of DP x 16 elements and keeps the
    rank's piece of every slot contiguously in `master`, `grads.shard` and
    the moment buffers: one `reduce_scatter` per slot replaces the
    all-reduce, the partial gradient norm is all-reduced, AdamW runs once
    over the shard, and one `all_gather` per slot rebuilds `params`.
  }];
  let dependentDialects = ["::mlir::weftx::WeftExecDialect"];
  let options = [
    Option<"seqLen", "seq-len", "int64_t", "0", "Tokens per sequence">,
    Option<"family", "family", "std::string", "\"\"",
           "Model family recorded in the bundle (default: the model name)">,
    Option<"lr", "lr", "double", "3e-4", "Peak learning rate">,
    Option<"minLr", "min-lr", "double", "3e-5", "Final learning rate">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "100",
           "Linear warmup steps">,
    Option<"decaySteps", "decay-steps", "int64_t", "10000",
           "Step at which the cosine decay ends">,
    Option<"weightDecay", "weight-decay", "double", "0.1",
           "AdamW weight decay (applied to every parameter)">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"gradClip", "grad-clip", "double", "1.0",
           "Global gradient-norm clip (0: none)">,
    Option<"stepsPerPlan", "steps-per-plan", "int64_t", "1",
           "Optimizer steps per program replay">,
    Option<"predictedStepTimeS", "predicted-step-time-s", "double", "0",
           "The planner's step time">,
    Option<"predictedMfu", "predicted-mfu", "double", "0",
           "The planner's model FLOP utilization">,
    Option<"predictedPeakBytes", "predicted-peak-bytes", "int64_t", "0",
           "The planner's peak memory per rank">,
    Option<"clusterJson", "cluster-json", "std::string", "\"\"",
           "The cluster description (JSON, the planner's schema) to record "
           "in the bundle's config for weft-inspect">,
  ];
}

#endif // WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD
