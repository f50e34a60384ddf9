// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 grad-accum=2' --weft-autodiff --weft-schedule='seq-len=8 lr=0.01' | FileCheck %s
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=TP
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule 2>&1 | FileCheck %s --check-prefix=SEQ

// GPT-2 tiny at DP 2 with two accumulated micro-batches of one sequence of 8
// tokens: one program shared by both DP ranks; flat persistent parameter,
// gradient and AdamW buffers; per micro-batch the forward, the backward with
// gradients accumulated in place, and the loss/gradient divisors of
// docs/runtime.md; then the DP all-reduce, clipping and AdamW. The module
// holds no L1 left.

// CHECK: module attributes {weftx.config = {dp = 2 : i64, grad_accum = 2 : i64, micro_batch = 1 : i64, pp = 1 : i64, recompute = "none", tp = 1 : i64, zero = 0 : i64}, weftx.model = #weftx.model<name = "gpt2_tiny", family = "gpt2_tiny">
// CHECK-SAME: weftx.training = #weftx.training<global_batch = 4, seq_len = 8, precision = "fp32", micro_batch = 1, grad_accum = 2, steps_per_plan = 1, lr = 1.0{{0*}}e-02
// CHECK-NOT: func.func
// CHECK: weftx.mesh dp 2 pp 1 tp 1
// CHECK-NEXT: weftx.group @dp dp [0, 1]
// CHECK-NEXT: weftx.kernel @embedding_forward file "kernels/embedding_forward.cu" constants {batch = 1 : i64, hidden = 64 : i64, positions = 128 : i64, seq = 8 : i64, vocab = 256 : i64}
// Specializations of one registry kernel are suffixed.
// CHECK: weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 8 : i64, width = 64 : i64}
// CHECK: weftx.kernel @bias_add.1 file "kernels/bias_add.1.cu" constants {rows = 8 : i64, width = 256 : i64}
// CHECK: weftx.kernel @cross_entropy file "kernels/cross_entropy.cu" constants {accumulate = 1 : i64, grad = 1 : i64, grad_div = 4 : i64, loss_div = 2 : i64, rows = 8 : i64, vocab = 256 : i64}

// CHECK-LABEL: weftx.program @role0 ranks [0, 1] {
// CHECK-NEXT: weftx.buffer @params persistent size [[FLAT:[0-9]+]] align 64 : f32
// CHECK-NEXT: weftx.buffer @grads persistent size [[FLAT]] align 64 : f32
// CHECK-NEXT: weftx.buffer @exp_avg persistent size [[FLAT]] align 64 : f32
// CHECK-NEXT: weftx.buffer @exp_avg_sq persistent size [[FLAT]] align 64 : f32
// CHECK-NEXT: weftx.buffer @loss persistent size 4 align 64 : f32
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill f32 0.0{{.*}} writes(@grads[0 +: [[FLAT]]], @loss[0 +: 4]) phase "zero grads"
// CHECK-NEXT: weftx.load_batch 0 writes(@tokens[0 +: 32], @targets[0 +: 32]) phase "data mb0"
// CHECK-NEXT: weftx.launch @embedding_forward reads(@tokens[0 +: 32], @params[0 +: 65536], @params[65536 +: 32768]) writes(@embedding[0 +: 2048]) phase "fwd mb0"
// Fused QKV: q, k, v are 64-column blocks of the [64, 192] weight (ld 192).
// CHECK: weftx.gemm f32 m 64 n 8 k 64 lda 192 ldb 64 ldc 64 alpha 1.0{{.*}} beta 0.0{{.*}} reads(@params[[[QKV:[0-9]+]] +: 48640], @layer_norm[0 +: 2048]) writes(@attn.q[0 +: 2048]) phase "fwd mb0"
// CHECK: weftx.gemm f32 m 64 n 8 k 64 lda 192 ldb 64 ldc 64 alpha 1.0{{.*}} beta 0.0{{.*}} reads(@params[{{[0-9]+}} +: 48640], @layer_norm[0 +: 2048]) writes(@attn.k[0 +: 2048]) phase "fwd mb0"
// CHECK: weftx.launch @cross_entropy reads(@logits[0 +: 8192], @targets[0 +: 32]) writes(@loss[0 +: 4], @logits.grad[0 +: 8192]) phase "bwd mb0"
// Tied head: dx = dy W, and dW += dy^T x accumulates into the embedding's
// gradient slot.
// CHECK-NEXT: weftx.gemm f32 m 64 n 8 k 256 lda 64 ldb 256 ldc 64 alpha 1.0{{.*}} beta 0.0{{.*}} reads(@params[0 +: 65536], @logits.grad[0 +: 8192]) writes(@lm_head.grad[0 +: 2048])
// CHECK-NEXT: weftx.gemm f32 trans_b m 64 n 256 k 8 lda 64 ldb 256 ldc 64 alpha 1.0{{.*}} beta 1.0{{.*}} reads(@layer_norm.4[0 +: 2048], @logits.grad[0 +: 8192], @grads[0 +: 65536]) writes(@grads[0 +: 65536])
// CHECK: weftx.launch @embedding_backward reads(@tokens[0 +: 32], {{.*}}) writes(@grads[0 +: 65536], @grads[65536 +: 32768]) phase "bwd mb0"
// CHECK-NEXT: weftx.load_batch 1 writes(@tokens.1[0 +: 32], @targets.1[0 +: 32]) phase "data mb1"
// CHECK: weftx.all_reduce sum [[N:[0-9]+]] x f32 on @dp reads(@grads[0 +: [[FLAT]]]) writes(@grads[0 +: [[FLAT]]]) phase "grad sync"
// CHECK-NEXT: weftx.grad_norm f32 reads(@grads[0 +: [[FLAT]]]) writes(@grad.sumsq[0 +: 4]) phase "clip"
// CHECK-NEXT: weftx.clip f32 reads(@grad.sumsq[0 +: 4], @grads[0 +: [[FLAT]]]) writes(@grads[0 +: [[FLAT]]]) phase "clip"
// CHECK-NEXT: weftx.optimizer_step [[N]] x f32 reads(@params[0 +: [[FLAT]]], @grads[0 +: [[FLAT]]], @exp_avg[0 +: [[FLAT]]], @exp_avg_sq[0 +: [[FLAT]]]) writes(@params[0 +: [[FLAT]]], @exp_avg[0 +: [[FLAT]]], @exp_avg_sq[0 +: [[FLAT]]]) phase "adamw"

// Parameters: Hugging Face names, init, one replicated shard each.
// CHECK: weftx.parameter "transformer.wte.weight" [256, 64] f32 init normal(2.0{{.*}}e-02) hf "transformer.wte.weight" shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 16384>]
// CHECK-NEXT: weftx.parameter "transformer.wpe.weight" [128, 64] f32 init normal({{.*}}) hf "transformer.wpe.weight" shards [#weftx.shard<role = @role0, buffer = @params, offset = 65536,

// TP: error: weft-schedule: TP > 1 is not lowered yet
// SEQ: error: weft-schedule: seq-len must be positive
