//===- Passes.td - Weft execution dialect passes -----------*- tablegen -*-===//
#ifndef WEFTEXEC_TRANSFORMS_PASSES_TD
#define WEFTEXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftPlanMemory : Pass<"weft-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Place every weftx.buffer: liveness-based arena offsets and a "
                "packed persistent region";
  let description = [{
    For each `weftx.program`, assigns `offset` to every buffer and sets the
    program's `arena` and `persistent` sizes (existing offsets are
    replanned).

    Persistent buffers are packed in declaration order, each at the next
    multiple of its alignment.

    Arena buffers share bytes when their lifetimes are disjoint. Two buffers
    may overlap only if every access of one happens before every access of
    the other, where *happens before* is program order within a stream plus
    `record_event` -> `wait_event` edges between streams (vector clocks, the
    relation the plan verifier uses). An instruction that touches both
    buffers orders neither, so they conflict. This is conservative: two
    streams' instructions that no event chain orders are assumed to run at
    the same time. Buffers are placed largest first (ties: first access,
    then declaration order) at the best-fitting aligned gap among the
    already placed buffers they conflict with; a buffer that no instruction
    accesses conflicts with nothing and is placed at offset 0.

    The planned peak of a role is `arena + persistent`; with `report` the
    pass prints, per program, the arena size, the live lower bound (the most
    bytes live at once in one interleaving of the streams that respects the
    events), the persistent size, the planned peak and, when the module has
    a `weftx.prediction`, the predicted peak.
  }];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "Print the planned memory of every program to stdout">,
  ];
}

def WeftFoldZeroFills : Pass<"weft-fold-zero-fills", "::mlir::ModuleOp"> {
  let summary = "Run the GEMMs that first sum into a zero-filled gradient "
                "slot with beta 0, and drop the slot from the fill";
  let description = [{
    Runs after `weft-step` in every `weftc compile` (docs/lowering.md, "Zero
    fills"). A `fill` of 0 whose written range (a slot), or a slot inside
    it (ZeRO 0/1 fill the whole gradient buffer as one range: each
    `[C, C + ldc n)` whose first rows an accumulating GEMM writes), the
    GEMMs after it on its stream first write with beta 1 (adding their product to the
    zeros), each rows `[r, r + m)` of every column of a column-major matrix
    of `ldc` rows, in order, together all `ldc` rows of the slot's `n`
    columns: those GEMMs run with beta 0 instead (C is written, not read:
    `reads[2]` goes) and the slot leaves the fill (the fill goes with its
    last range; a range of many slots keeps the bytes between the folded
    ones). Only when nothing else touches the slot's bytes between
    the fill and the last of the GEMMs, on any stream (every other access
    happens before the fill or after that GEMM, through the events).
    ZeRO-2/3 fill every micro-batch's gradient slots before the backward's
    first sum, ZeRO 0/1 the whole buffer once per step: one pass over each
    weight gradient fewer (per micro-batch under ZeRO-2/3).
  }];
  let statistics = [
    Statistic<"numSlots", "slots", "Slots no longer zero-filled">,
    Statistic<"numGemms", "gemms", "Gemms turned to beta 0">,
  ];
}

def WeftFuseGemmEpilogues : Pass<"weft-fuse-gemm-epilogues",
                                 "::mlir::ModuleOp"> {
  let summary = "Fold the bias add, tanh GELU and bias gradient kernels right "
                "after a gemm into the gemm's epilogue";
  let description = [{
    Runs before `weft-plan-memory`, so that memory planning, the plan, its
    simulation and every backend see one instruction where a GPU runs one
    cuBLASLt call (`weftx.gemm`'s `epilogue`; docs/lowering.md, "GEMM
    epilogues"). On one stream, past `record_event`s and `release`s only
    (nothing else can observe the gemm's output in between), a gemm on
    f32, bf16 or f16 storage followed by

    * a `bias_add` over its packed output in place, with a bias of the
      gemm's type along `m`: `bias`; and when `beta` is 0 and then a tanh
      GELU `activation_forward` of that output into another range of its
      size: `gelu_bias` (`m` a multiple of 8, cuBLASLt's aux leading
      dimension);
    * a tanh GELU `activation_backward` over its output in place (`beta` 0,
      `m` a multiple of 8): `dgelu`;
    * a `bias_grad` summing its A (untransposed, `lda == m`: a weight
      gradient's output gradient) into `m` elements, where the gradient
      still holds the zeros of a fill (the epilogue writes, `bias_grad`
      adds): the last write of it before on the stream is a fill of 0
      covering it, which folds too if it sits between them, and every
      write of it on another stream waits for the `bias_grad`:
      `bias_grad`. Such a `bias_grad` may also come before the gemm (a
      row-parallel layer's replicated bias under tensor parallelism, whose
      backward takes it first), at most 8 instructions back, with no
      `record_event` between (another stream could read the gradient before
      the gemm that now writes it), nothing between writing dy or touching
      the gradient, and every write of it on another stream waiting for the
      gemm.

    An output the epilogue adds may not overlap the gemm's operands.
  }];
  let statistics = [
    Statistic<"numBias", "bias", "Gemms given a bias epilogue">,
    Statistic<"numGeluBias", "gelu-bias", "Gemms given a gelu_bias epilogue">,
    Statistic<"numDGelu", "dgelu", "Gemms given a dgelu epilogue">,
    Statistic<"numBiasGrad", "bias-grad", "Gemms given a bias_grad epilogue">,
  ];
}

def WeftFuseResidualNorms : Pass<"weft-fuse-residual-norms",
                                 "::mlir::ModuleOp"> {
  let summary = "Run each residual add inside the norm next to it: the "
                "forward's in the norm after it, the backward's in the norm "
                "backward before it";
  let description = [{
    Runs before `weft-plan-memory` (docs/lowering.md, "Residual norms"). On
    one stream, past `record_event`s and `release`s only, replaces

    * a `residual_add` (a, b -> sum) followed by a `layer_norm_forward` or
      `rms_norm_forward` of that sum with one launch of
      `residual_layer_norm_forward` / `residual_rms_norm_forward` (a, b,
      gamma[, beta] -> sum, y, statistics);
    * a `layer_norm_backward` or `rms_norm_backward` followed by a
      `residual_add` of its input gradient dx and another range with one
      launch of `layer_norm_backward_add` / `rms_norm_backward_add` (x,
      gamma, statistics, dy, addend -> sum, parameter gradients), when no
      other instruction reads dx's bytes and dx is an arena buffer: dx is
      not stored, and its buffer leaves the program when nothing else
      touches it.

    Operands keep one type per add; the fused launch's outputs may not
    overlap its inputs or each other. The fused launch takes the first
    launch's place and phase; declarations follow the module's kernels, one
    per fused kernel and constants (`name`, `name.N`), and kernels no launch
    uses any more are erased. Bit for bit what the two launches give
    (docs/runtime.md, "Kernel ABI").
  }];
  let statistics = [
    Statistic<"numForward", "forward", "Residual adds run in the norm after them">,
    Statistic<"numBackward", "backward",
              "Residual adds run in the norm backward before them">,
  ];
}

def WeftGenerateKernels : Pass<"weft-generate-kernels", "::mlir::ModuleOp"> {
  let summary = "Write the CUDA C++ source of every weftx.kernel, specialized "
                "to its constants";
  let description = [{
    Sets the `source` of every `weftx.kernel` whose name (up to the first
    `.`) is a runtime registry kernel (docs/runtime.md, "Kernel ABI") to a
    self-contained CUDA C++ translation unit. It includes one header of
    `runtime/kernels/include/weft/kernels/` and calls its `WEFT_HD`
    functions with the kernel's constants (defaults applied) as `constexpr`s,
    so the compiler sees every shape.

    A kernel is one or more phases, each a `WEFT_HD` function of an item
    index (an element, a row, a column, ...). The source defines, per phase
    `i`, an `extern "C" __global__` entry `weft_<name>_<i>` run by one thread
    per item, whose pointer parameters are the launch's reads then its
    writes; `weft_<name>_launch(operands, stream)`, which launches the phases
    in order with the geometry documented in the header comment; and a host
    entry `weft_<name>_host(operands)` that runs every phase's items in
    order (the CUDA parts are under `__CUDACC__`, so the host entry also
    compiles as plain C++). Scratch arrays (attention's `delta`,
    cross-entropy's row log-sum-exp) are `__device__` arrays on the GPU.

    The pass checks the constants as the runtime does (unknown, missing,
    out of range) plus what the generated code relies on (an even
    `head_dim` for rotary, `heads` a multiple of `kv_heads`, enough position
    rows for `seq`), and that every `weftx.launch` of a generated kernel
    passes as many reads and writes as the entries take and no scalar
    `args`. A kernel with any other name keeps a one-line comment as its
    source and gets a warning. The output is deterministic.
  }];
}

def WeftOptimizer : Pass<"weft-optimizer", "::mlir::ModuleOp"> {
  let summary = "Append the optimizer step to every program: global gradient "
                "norm, AdamW (clipping as it reads the gradients), ZeRO "
                "parameter all-gathers";
  let description = [{
    Runs after `weft-schedule`, whose programs end with the gradients
    reduced (tied copies, sequence-parallel partial sums, the DP sync). It
    reads what it needs from the IR: the state buffers by name (`params`,
    the working copy; `grads`; `grads.shard` and `master`, this DP rank's
    shard with ZeRO 1-3; `params.shard`, the rounded shard a
    mixed-precision or offloaded ZeRO plan gathers from; `exp_avg`,
    `exp_avg_sq`; `grad.sumsq`) and each parameter's shards (its slots), and
    appends to `compute`:

    - the global gradient norm: `grad_norm` over the pieces this rank
      counts (a parameter replicated over TP counts on TP rank 0 only; a
      tied embedding on the lowest pipeline rank that holds it only), runs
      of neighbouring counted slots as one range, then one `all_reduce` of
      the sum of squares over `world` (ZeRO 1-3 with TP or PP), `dp` (ZeRO
      1-3), or `mp` (the ranks of one replica); families are declared if
      missing;
    - one `optimizer_step` (AdamW; hyper-parameters and the LR schedule are
      the bundle's `weftx.training`) over the fp32 master and moments,
      reading the sum of squares as its fifth operand: it clips the
      gradients it reads (the shard with ZeRO 1-3) on their way in, with no
      pass of its own over them, and under dynamic loss scaling skips
      itself when the sum is not finite; with a separate master (mixed
      precision, or offload) it also writes the device's copy: the working
      copy without ZeRO, `params.shard` with it;
    - with optimizer offload (the moments are in the `host` region): copies
      of the gradients to a new host buffer `grads.host` and of the sum of
      squares to `grad.sumsq.host` before the steps (in buckets), which
      read them and write the weights into a new `params.host`, and of
      those back to the device after each;
    - ZeRO 1-3: one `all_gather` over `dp` per slot of the working copy the
      role keeps (every slot with ZeRO-1/2, the persistent small
      parameters with ZeRO-3) from the updated shard.

    A program without one of the required buffers is an error naming it.
  }];
}

def WeftOverlapGradSync : Pass<"weft-overlap-grad-sync", "::mlir::ModuleOp"> {
  let summary = "Move the DP gradient sync off `compute` so it overlaps the "
                "backward, in buckets";
  let description = [{
    Input: the data-parallel gradient sync as `weft-schedule` emits it, one
    contiguous run on each program's `compute` stream of collectives over a
    `dp` group family that read the `grads` buffer: in-place `all_reduce`s
    of one slot each (ZeRO-0) or `reduce_scatter`s of one slot into the
    gradient shard (ZeRO-1), in slot order. ZeRO-2/3 plans have no such run
    (`weft-schedule` reduce-scatters every micro-batch's gradients itself).

    Each collective moves to a side stream (`allreduce` for all-reduces,
    `reducescatter` for reduce-scatters) behind an event that `compute`
    records right after the last instruction before the run that writes the
    slot, so the sync of a slot starts as soon as the backward is done with
    it (the last micro-batch's gradient kernel, or the zeroing fill for a
    slot nothing writes). Collectives issue in the order their slots become
    final (slot order among ties), in buckets of at most `bucket_bytes`
    gradient bytes (the module's `weftx.config`; 25 MiB when absent or 0),
    each issued when its latest slot is final, as one collective (one launch
    per bucket instead of per slot): ZeRO-0's in-place all-reduce has a
    member per run of contiguous slots of the bucket, ZeRO-1's
    reduce-scatter a member per slot. `compute` waits for the whole sync where
    the run was. Programs without such collectives are left alone; a run
    that is not contiguous is an error.
  }];
}

def WeftOverlapOffload : Pass<"weft-overlap-offload", "::mlir::ModuleOp"> {
  let summary = "Optimizer offload: gradient copies to the host under the "
                "backward, weight copies back under the host's AdamW";
  let description = [{
    Acts on programs whose `compute` runs an `optimizer_step` on host
    memory only (optimizer offload, as `weft-optimizer` emits it).

    Every `copy` from a device buffer to a host buffer before that step (the
    gradient slots, the sum of squares) moves to a `d2h` stream, behind an
    event recorded after the last instruction that writes its source: on a
    side stream (the DP sync's reduce-scatter of that slot, which runs
    under the backward) if one does, else on `compute`. `compute` waits for
    the stream's last copy before its first instruction that reads or
    writes what they wrote (the first host AdamW).

    Every `copy` from a host buffer to a device buffer after the first host
    step (the updated weights of one AdamW bucket) moves to an `h2d` stream
    behind an event after the step that wrote its source, so it overlaps
    the next bucket's AdamW; `compute` waits for the last one before its
    next instruction that touches what they wrote (ZeRO's parameter
    all-gathers, which `weft-overlap-param-gathers` then moves to the next
    step).
  }];
}

def WeftOverlapParamGathers
    : Pass<"weft-overlap-param-gathers", "::mlir::ModuleOp"> {
  let summary = "ZeRO-1/2: move the parameter all-gathers after the optimizer "
                "step to the start of the next step, overlapping its forward";
  let description = [{
    Input: the `all_gather`s over a `dp` group family that `compute` runs
    after its last `optimizer_step` and that write the working copy
    `params` (how `weft-schedule` rebuilds the ZeRO-1/2 parameters from the
    updated shards). They move to the start of the step on an `allgather`
    stream, in order of their slot's first reader on `compute` (slots no
    instruction reads last), as the members of coalesced all-gathers of at
    most `bucket_bytes` gathered bytes each (the module's `weftx.config`;
    25 MiB when absent or 0; one collective launch per bucket): `compute`
    waits for each bucket right before the first reader of its first member,
    so the gathers overlap the forward. The first instruction of
    every other stream that writes what they read (the optimizer step; with
    offload, the first copy of weights back from the host on `h2d`) waits
    for all of them. The first step
    gathers the initial shards, which equal the initial working copy.

    A program that already has an `allgather` stream (ZeRO-3's prefetched
    gathers) keeps its post-step gathers (its few persistent small
    parameters) on `compute` at the end of the step, coalesced the same way
    right before the last of them: at the start of the step they would
    queue ahead of the first layer's prefetch.
  }];
}

def WeftOverlapTpCollectives
    : Pass<"weft-overlap-tp-collectives", "::mlir::ModuleOp"> {
  let summary = "Move every tensor-parallel collective from `compute` to a "
                "`tp` stream, ordered by events";
  let description = [{
    Every `all_reduce`, `all_gather` and `reduce_scatter` on `compute` over a
    `tp` group family moves to a `tp` stream (one stream: one order on the
    TP communicator), after an event recorded behind the last instruction
    it must follow; `compute` waits for it right before the first
    instruction that must follow it, so independent compute in between
    overlaps it (e.g. a weight-gradient GEMM under the all-reduce of the
    input gradient). A collective follows the last instruction before it
    that writes its input, reads or writes its output, or waits for an event
    (which may stand for another stream's write of its input); records
    before it are passed (their waiters were never ordered after the
    collective; DP gradient buckets record between a layer's input- and
    weight-gradient GEMMs). The first instruction after it that touches its
    buffers or is an event (a record may order another stream's access to
    its buffers after it) waits for it.
  }];
}

#endif // WEFTEXEC_TRANSFORMS_PASSES_TD
