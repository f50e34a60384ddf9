// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 precision=bf16' --weft-step | FileCheck %s --check-prefix=BF16
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3 prefetch-depth=1' --weft-autodiff --weft-schedule='seq-len=8 precision=fp16 persist-threshold=100' --weft-step | FileCheck %s --check-prefix=FP16
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 precision=fp16 loss-scale=128' --weft-step | FileCheck %s --check-prefix=STATIC

// Mixed precision without ZeRO (docs/lowering.md, "Mixed precision"): the
// working copy `params`, the gradients and activations are bf16; per-row
// statistics, the loss, the moments and the fp32 `master` (the whole flat
// buffer) are f32. GEMMs, TP collectives and the gradient norm run on bf16
// operands; the optimizer steps the master and writes the rounded weights
// into `params`. bf16 needs no loss scale.

// BF16: weftx.training<{{.*}}precision = "bf16"{{.*}}loss_scale = <dynamic = false, initial = 1.000000e+00, growth_interval = 0
// BF16-LABEL: weftx.program @role0 ranks [0] {
// BF16-NEXT: weftx.buffer @params persistent size 249344 align 64 : bf16
// BF16-NEXT: weftx.buffer @grads persistent size 249344 align 64 : bf16
// BF16-NEXT: weftx.buffer @exp_avg persistent size 498688 align 64 : f32
// BF16-NEXT: weftx.buffer @exp_avg_sq persistent size 498688 align 64 : f32
// BF16-NEXT: weftx.buffer @master persistent size 498688 align 64 : f32
// BF16-NEXT: weftx.buffer @loss persistent size 4 align 64 : f32
// BF16: weftx.buffer @layer_norm arena size 1024 align 64 : bf16
// BF16-NEXT: weftx.buffer @layer_norm.mean arena size 32 align 64 : f32
// BF16-NEXT: weftx.buffer @layer_norm.rstd arena size 32 align 64 : f32
// BF16: weftx.buffer @attn.lse arena size 128 align 64 : f32
// BF16-LABEL: weftx.stream "compute" {
// BF16-NEXT: weftx.fill bf16 0.000000e+00 writes(@grads[0 +: 249344]) phase "zero grads"
// BF16-NEXT: weftx.fill f32 0.000000e+00 writes(@loss[0 +: 4]) phase "zero grads"
// BF16: weftx.gemm bf16 m 64 n 8 k 64 {{.*}} reads(@params[49408 +: 24320], @layer_norm[0 +: 1024]) writes(@attn.q[0 +: 1024])
// BF16: weftx.grad_norm bf16 reads(@grads[0 +: 249344]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// BF16-NEXT: weftx.optimizer_step 124672 x f32 reads(@master[0 +: 498688], @grads[0 +: 249344], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688], @grad.sumsq[0 +: 4]) writes(@master[0 +: 498688], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688], @params[0 +: 249344]) phase "adamw"
// Both copies start from the parameter's initializer.
// BF16: weftx.parameter "transformer.wte.weight" {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, {{.*}}>, #weftx.shard<role = @role0, buffer = @master, offset = 0, {{.*}}>]

// ZeRO-3 in fp16: the fp32 master and its f16 copy `params.shard` are this
// rank's halves; gathers (before use, and of the persistent small
// parameters after the step) read the f16 copy, so they move half the
// bytes; gradients are reduce-scattered in f16 from a buffer per parameter
// and micro-batch (no full gradient buffer). fp16 scales the loss
// dynamically from 2^16.

// FP16: loss_scale = <dynamic = true, initial = 6.553600e+04, growth_interval = 1000, backoff = 5.000000e-01>
// FP16-LABEL: weftx.program @role0 ranks [0, 1] {
// FP16-NEXT: weftx.buffer @params persistent size 1792 align 64 : f16
// FP16-NEXT: weftx.buffer @exp_avg persistent size 249344 align 64 : f32
// FP16-NEXT: weftx.buffer @exp_avg_sq persistent size 249344 align 64 : f32
// FP16-NEXT: weftx.buffer @master persistent size 249344 align 64 : f32
// FP16-NEXT: weftx.buffer @grads.shard persistent size 124672 align 64 : f16
// FP16-NEXT: weftx.buffer @params.shard persistent size 124672 align 64 : f16
// FP16: weftx.grad_norm f16 reads(@grads.shard[0 +: 124672])
// FP16: weftx.optimizer_step 62336 x f32 reads(@master[0 +: 249344], @grads.shard[0 +: 124672], @exp_avg[0 +: 249344], @exp_avg_sq[0 +: 249344], @grad.sumsq[0 +: 4]) writes(@master[0 +: 249344], @exp_avg[0 +: 249344], @exp_avg_sq[0 +: 249344], @params.shard[0 +: 124672]) phase "adamw"
// FP16-NEXT: weftx.all_gather 448 x f16 on @dp reads(@params.shard[24576 +: 64], {{.*}}) writes(@params[0 +: 128], {{.*}}) phase "param gather"
// FP16-LABEL: weftx.stream "allgather" {
// FP16: weftx.all_gather 8192 x f16 on @dp reads(@params.shard[0 +: 16384]) writes(@transformer.wte.weight.gathered[0 +: 32768])
// FP16-LABEL: weftx.stream "reducescatter" {
// FP16: weftx.reduce_scatter sum {{[0-9]+}} x f16 on @dp reads(@grad.transformer.ln_f.weight[0 +: 128], {{.*}}) writes(@grads.shard[124544 +: 64], {{.*}})
// FP16: weftx.parameter "transformer.wte.weight" {{.*}} shards [#weftx.shard<role = @role0, buffer = @master, offset = 0, {{.*}} zero_shards = 2, padded_elements = 16384>, #weftx.shard<role = @role0, buffer = @params.shard, offset = 0, {{.*}} zero_shards = 2, padded_elements = 16384>]

// A positive loss-scale is static.
// STATIC: loss_scale = <dynamic = false, initial = 1.280000e+02, growth_interval = 0, backoff = 5.000000e-01>
