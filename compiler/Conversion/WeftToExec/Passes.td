//===- Passes.td - Weft to weftx conversion ----------------*- tablegen -*-===//
#ifndef WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD
#define WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftSchedule : Pass<"weft-schedule", "::mlir::ModuleOp"> {
  let summary = "Schedule differentiated weft stage functions as weftx "
                "programs, one per role: state buffers, the pipeline's "
                "tasks, the gradient reductions (level L1 to L2)";
  let description = [{
    Replaces the module's contents (the stage functions `@f` and their
    `@f_backward` from `weft-autodiff`, with the `weft.parallel`
    configuration of `weft-attach-mesh`) by the weftx programs the ranks
    replay per optimizer step (docs/lowering.md, docs/exec-dialect.md).

    One program per role, a (pipeline rank, TP rank) pair shared by the DP
    replicas; collectives name group families (`tp`, `pp`, `dp`, `mp`,
    `world`, `tied`), declared when used. Supported: TP (including the
    vocabulary-parallel embedding, head and loss, and a vocabulary padded to
    a multiple of TP), sequence parallelism (any micro-batch), PP with the
    GPipe, 1F1B and interleaved 1F1B schedules (any layer split), DP with
    ZeRO 0 to 3, recompute `none`, `selective` and `full`, fp32, bf16 and
    fp16 (`precision`), and the GPT-2 and LLaMA families' ops. Anything else is rejected with an error
    naming the op or setting.

    Persistent state lives in flat buffers per role (`params`, `grads`
    (ZeRO 0-1), `exp_avg`, `exp_avg_sq`), one 64-byte aligned slot per parameter (three
    for a fused QKV weight or bias split over TP: one per q, k, v slice),
    each with a `ShardSpec` naming its slice of the global tensor.
    Activations, `params` (the working copy) and the gradients are in the
    compute dtype (f32, bf16 or f16); per-row statistics (norm mean and
    rstd, log-sum-exp), the loss, the moments and the master weights are
    f32. A mixed-precision plan adds an f32 `master` (the whole flat buffer
    without ZeRO) and its `optimizer_step` also writes the rounded weights:
    into `params` without ZeRO, into `params.shard` (what the parameter
    all-gathers read) with it. fp16 scales the loss dynamically unless
    `loss-scale` fixes it (`training.loss_scale`). On the
    `compute` stream: zero the gradients and `loss`; the pipeline tasks of
    the rank in schedule order, each the stage function's forward or
    backward for one micro-batch (grad ops recompute their kernels' internal
    state, docs/autodiff.md; a `weft.block_grad` first re-runs the forward
    ops recompute chose, their TP and sequence collectives included;
    parameter gradients accumulate with beta = 1
    GEMMs and the kernels' `+=`); activations and their gradients cross
    stages by send/recv on one stream per direction and sending rank (a
    recv posted once compute has begun the previous task, compute waiting
    for a send two tasks later, so boundary buffers are reused),
    ordered against `compute` by events. Then the sequence-parallel and
    tied-embedding gradient sums and the DP gradient sync, one collective
    per slot in slot order on `compute` (ZeRO-0: an in-place `all_reduce`;
    ZeRO-1: a `reduce_scatter` into this rank's piece of `grads.shard`).
    The rest of the step comes from the passes that follow
    (`--weft-step`): `weft-optimizer` (norm, clip, AdamW, ZeRO
    all-gathers) and the overlap passes (`weft-overlap-grad-sync`,
    `weft-overlap-param-gathers`, `weft-overlap-tp-collectives`). TP
    collectives are emitted on `compute` where the math needs them. The
    loss comes from the backward's fused cross-entropy kernels on
    the last stage (`loss_div = grad_accum`, `grad_div = grad_accum * dp`,
    so the summed gradient is the global-batch mean). Activations get one
    arena buffer per value and micro-batch; `weft-plan-memory` overlaps them
    by liveness. The module's `weftx.config` records `bucket_bytes` (the DP
    gradient buckets, the offloaded AdamW's buckets) when DP > 1 or the
    optimizer is offloaded.

    With ZeRO 1-3 AdamW updates this rank's pieces (`master`, moments) only.
    ZeRO-2/3 keep no full gradients: each parameter's gradient of each
    micro-batch is an arena buffer, zeroed before its first writer and
    reduce-scattered into `grads.shard` (later micro-batches through a
    buffer of their own and a `residual_add`) on the `reducescatter` stream
    as soon as the backward has finished it; compute waits for those
    reductions only to keep the live gradient bytes within
    `max-live-grad-bytes`, and for all of them (and the SP and tied sums,
    then on the shard) before the step. ZeRO-3 keeps no full
    parameters: each task (forward or backward of one micro-batch) gathers
    every parameter it reads into a fresh arena buffer on an `allgather`
    stream, `compute` waits for it right before its first use and releases
    it after its last, and gather k waits until compute has begun using
    gather k - `prefetch_depth` (at least 1). A parameter that both a
    layer backward's re-run ops (recompute) and its grad ops read is
    gathered once for each.
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
    Option<"precision", "precision", "std::string", "\"fp32\"",
           "fp32, bf16 or fp16: the dtype of activations, gradients and the "
           "parameters' working copy (master weights and moments are fp32)">,
    Option<"lossScale", "loss-scale", "double", "0",
           "Loss scale: 0 = dynamic for fp16 (from initial-loss-scale) and "
           "none (1) otherwise; a positive value is a static scale">,
    Option<"initialLossScale", "initial-loss-scale", "double", "65536",
           "Dynamic loss scaling: the first step's scale">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t", "1000",
           "Dynamic loss scaling: applied steps before the scale doubles">,
    Option<"offloadOptimizer", "offload-optimizer", "bool", "false",
           "Optimizer offload: the fp32 master weights and AdamW moments in "
           "host memory, AdamW on the host">,
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
    Option<"persistThreshold", "persist-threshold", "int64_t", "-1",
           "ZeRO-3: parameters of at most this many (rank-local) elements "
           "stay whole on every DP rank and are never gathered; -1: "
           "min(100000, largest parameter / 64), 0: none">,
    Option<"maxLiveGatheredBytes", "max-live-gathered-bytes", "int64_t", "0",
           "ZeRO-3: a gather is not issued while the gathered bytes not yet "
           "released would exceed this; 0: the largest gather plus "
           "prefetch-depth + 1 times the second largest">,
    Option<"maxLiveGradBytes", "max-live-grad-bytes", "int64_t", "0",
           "ZeRO-2/3: compute does not start a parameter's micro-batch "
           "gradient while the gradients not yet known reduce-scattered "
           "would exceed this (if one of them can be waited for); 0: the "
           "largest parameter gradient plus three times the second largest "
           "(with "
           "accumulation times 1 + 1/dp: their reduce-scatter outputs)">,
  ];
}

#endif // WEFT_CONVERSION_WEFTTOEXEC_PASSES_TD
