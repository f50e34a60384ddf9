// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 grad-accum=2' --weft-autodiff --weft-schedule='seq-len=8 lr=0.01' --weft-step | FileCheck %s
// RUN: weftc import llama-tiny | weft-opt --weft-lower='dp=2' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=LLAMA
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 bucket-bytes=131072' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=ZERO1
// RUN: weftc import gpt2-odd | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=ODD

// GPT-2 tiny at DP 2 with two accumulated micro-batches of one sequence of 8
// tokens: one program shared by both DP ranks; flat persistent parameter,
// gradient and AdamW buffers; per micro-batch the forward, the backward with
// gradients accumulated in place, and the loss/gradient divisors of
// docs/runtime.md; then the DP all-reduce (overlapped, in buckets), the
// gradient norm and AdamW, which reads it to clip. The module
// holds no L1 left.

// CHECK: module attributes {weftx.config = {bucket_bytes = 0 : i64, dp = 2 : i64, grad_accum = 2 : i64, layers_per_stage = [2], micro_batch = 1 : i64, pp = 1 : i64, recompute = "none", tp = 1 : i64, zero = 0 : i64}, weftx.model = #weftx.model<name = "gpt2_tiny", family = "gpt2_tiny">
// CHECK-SAME: weftx.training = #weftx.training<global_batch = 4, seq_len = 8, precision = "fp32", micro_batch = 1, grad_accum = 2, steps_per_plan = 1, lr = 1.0{{0*}}e-02
// CHECK-NOT: func.func
// CHECK: weftx.mesh dp 2 pp 1 tp 1
// CHECK-NEXT: weftx.group @dp dp {{\[\[}}0, 1]]
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
// CHECK: weftx.launch @cross_entropy reads(@logits[0 +: 8192], @targets[0 +: 32]) writes(@loss[0 +: 4], @logits[0 +: 8192]) phase "bwd mb0"
// Tied head: dx = dy W, and dW += dy^T x accumulates into the embedding's
// gradient slot.
// CHECK-NEXT: weftx.gemm f32 m 64 n 8 k 256 lda 64 ldb 256 ldc 64 alpha 1.0{{.*}} beta 0.0{{.*}} reads(@params[0 +: 65536], @logits[0 +: 8192]) writes(@lm_head.grad[0 +: 2048])
// CHECK-NEXT: weftx.gemm f32 trans_b m 64 n 256 k 8 lda 64 ldb 256 ldc 64 alpha 1.0{{.*}} beta 1.0{{.*}} reads(@layer_norm.4[0 +: 2048], @logits[0 +: 8192], @grads[0 +: 65536]) writes(@grads[0 +: 65536])
// CHECK: weftx.launch @embedding_backward reads(@tokens[0 +: 32], {{.*}}) writes(@grads[0 +: 65536], @grads[65536 +: 32768]) phase "bwd mb0"
// CHECK-NEXT: weftx.load_batch 1 writes(@tokens.1[0 +: 32], @targets.1[0 +: 32]) phase "data mb1"
// The DP gradient sync runs on the `allreduce` stream in buckets of
// `bucket_bytes` (25 MiB) in the order the slots become final: gpt2-tiny's
// 0.5 MB are one bucket, issued after the last micro-batch's last gradient
// write (the embedding's); compute waits for all of it before the norm.
// CHECK: weftx.launch @embedding_backward reads(@tokens.1[0 +: 32], {{.*}}) writes(@grads[0 +: 65536], @grads[65536 +: 32768]) phase "bwd mb1"
// CHECK-NEXT: weftx.record_event [[LAST:[0-9]+]] phase "bwd mb1"
// CHECK: weftx.wait_event [[SYNCED:[0-9]+]] phase "grad sync"
// CHECK-NEXT: weftx.grad_norm f32 reads(@grads[0 +: [[FLAT]]]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// CHECK-NEXT: weftx.optimizer_step [[N:[0-9]+]] x f32 reads(@params[0 +: [[FLAT]]], @grads[0 +: [[FLAT]]], @exp_avg[0 +: [[FLAT]]], @exp_avg_sq[0 +: [[FLAT]]], @grad.sumsq[0 +: 4]) writes(@params[0 +: [[FLAT]]], @exp_avg[0 +: [[FLAT]]], @exp_avg_sq[0 +: [[FLAT]]]) phase "adamw"
// The bucket's slots, merged into runs of contiguous slots as they become
// final, are one run here: one in-place all-reduce of the whole buffer.
// CHECK-LABEL: weftx.stream "allreduce" {
// CHECK-NEXT: weftx.wait_event [[LAST]] phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum [[N]] x f32 on @dp reads(@grads[0 +: [[FLAT]]]) writes(@grads[0 +: [[FLAT]]]) phase "grad sync"
// CHECK-NEXT: weftx.record_event [[SYNCED]] phase "grad sync"
// CHECK-NEXT: }

// Parameters: Hugging Face names, init, one replicated shard each.
// CHECK: weftx.parameter "transformer.wte.weight" [256, 64] f32 init normal(2.0{{.*}}e-02) hf "transformer.wte.weight" shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 16384>]
// CHECK-NEXT: weftx.parameter "transformer.wpe.weight" [128, 64] f32 init normal({{.*}}) hf "transformer.wpe.weight" shards [#weftx.shard<role = @role0, buffer = @params, offset = 65536,

// LLaMA tiny: RMSNorm, separate q/k/v weights with 4 query and 2 KV heads,
// rotary on q and k (in place, one specialization per head count), SwiGLU,
// untied head.
// LLAMA: weftx.kernel @rms_norm_forward file "kernels/rms_norm_forward.cu" constants {eps_nano = 10000 : i64, rows = 8 : i64, width = 64 : i64}
// LLAMA-NEXT: weftx.kernel @rotary_forward file "kernels/rotary_forward.cu" constants {batch = 1 : i64, head_dim = 16 : i64, heads = 4 : i64, seq = 8 : i64, theta = 10000 : i64}
// LLAMA-NEXT: weftx.kernel @rotary_forward.1 file "kernels/rotary_forward.1.cu" constants {batch = 1 : i64, head_dim = 16 : i64, heads = 2 : i64, seq = 8 : i64, theta = 10000 : i64}
// LLAMA-NEXT: weftx.kernel @attention_forward file "kernels/attention_forward.cu" constants {batch = 1 : i64, causal = 1 : i64, head_dim = 16 : i64, heads = 4 : i64, kv_heads = 2 : i64, seq = 8 : i64}
// LLAMA: weftx.kernel @gated_forward file "kernels/gated_forward.cu" constants {act = 3 : i64, n = 1408 : i64}
// LLAMA-LABEL: weftx.program @role0
// LLAMA: weftx.launch @rms_norm_forward reads(@embedding[0 +: 2048], @params[{{[0-9]+}} +: 256]) writes(@rms_norm[0 +: 2048], @rms_norm.rstd[0 +: 32]) phase "fwd mb0"
// LLAMA-NEXT: weftx.gemm f32 m 64 n 8 k 64 lda 64 ldb 64 ldc 64 {{.*}} writes(@attn.q[0 +: 2048])
// LLAMA-NEXT: weftx.launch @rotary_forward reads(@attn.q[0 +: 2048]) writes(@attn.q[0 +: 2048])
// LLAMA-NEXT: weftx.gemm f32 m 32 n 8 k 64 lda 32 ldb 64 ldc 32 {{.*}} writes(@attn.k[0 +: 1024])
// LLAMA-NEXT: weftx.launch @rotary_forward.1 reads(@attn.k[0 +: 1024]) writes(@attn.k[0 +: 1024])
// LLAMA-NEXT: weftx.gemm f32 m 32 n 8 k 64 lda 32 ldb 64 ldc 32 {{.*}} writes(@attn.v[0 +: 1024])
// LLAMA-NEXT: weftx.launch @attention_forward reads(@attn.q[0 +: 2048], @attn.k[0 +: 1024], @attn.v[0 +: 1024])
// SwiGLU: h = silu(x gate) * (x up).
// LLAMA: weftx.gemm f32 m 176 n 8 k 64 {{.*}} reads(@params[{{[0-9]+}} +: 45056], @rms_norm.1[0 +: 2048]) writes(@mlp.up[0 +: 5632])
// LLAMA-NEXT: weftx.gemm f32 m 176 n 8 k 64 {{.*}} reads(@params[{{[0-9]+}} +: 45056], @rms_norm.1[0 +: 2048]) writes(@mlp.gate[0 +: 5632])
// LLAMA-NEXT: weftx.launch @gated_forward reads(@mlp.gate[0 +: 5632], @mlp.up[0 +: 5632]) writes(@mlp.act[0 +: 5632])
// Backward of the last layer's MLP: dGate, dUp from the gated kernel on the
// forward's gate and up (the op state: no GEMM is recomputed), then
// dx = du up^T + dg gate^T first (under TP its all-reduce then overlaps
// what follows), then dUp += x^T du, dGate += x^T dg.
// LLAMA-NOT: @attention_forward {{.*}} phase "bwd
// LLAMA: weftx.launch @gated_backward reads(@mlp.gate.1[0 +: 5632], @mlp.up.1[0 +: 5632], @mlp.act.grad[0 +: 5632]) writes(@mlp.gate.grad[0 +: 5632], @mlp.up.grad[0 +: 5632]) phase "bwd mb0"
// LLAMA-NEXT: weftx.gemm f32 trans_a m 64 n 8 k 176 {{.*}} beta 0.0{{.*}} reads(@params[[[UP1:[0-9]+]] +: 45056], @mlp.up.grad[0 +: 5632]) writes(@mlp.grad[0 +: 2048])
// LLAMA-NEXT: weftx.gemm f32 trans_a m 64 n 8 k 176 {{.*}} beta 1.0{{.*}} reads(@params[[[GATE1:[0-9]+]] +: 45056], @mlp.gate.grad[0 +: 5632], @mlp.grad[0 +: 2048]) writes(@mlp.grad[0 +: 2048])
// LLAMA-NEXT: weftx.gemm f32 trans_b m 176 n 64 k 8 {{.*}} reads(@mlp.up.grad[0 +: 5632], @rms_norm.3[0 +: 2048], @grads[[[UP1]] +: 45056]) writes(@grads[[[UP1]] +: 45056])
// LLAMA-NEXT: weftx.gemm f32 trans_b m 176 n 64 k 8 {{.*}} reads(@mlp.gate.grad[0 +: 5632], @rms_norm.3[0 +: 2048], @grads[[[GATE1]] +: 45056]) writes(@grads[[[GATE1]] +: 45056])
// The norm's backward reads the forward's rstd (op state).
// LLAMA-NEXT: weftx.launch @rms_norm_backward reads(@residual.2[0 +: 2048], @params[{{[0-9]+}} +: 256], @rms_norm.rstd.3[0 +: 32], @mlp.grad[0 +: 2048]) writes(@rms_norm.grad.1[0 +: 2048], @grads[{{[0-9]+}} +: 256])
// LLAMA-NEXT: weftx.launch @residual_add
// dq, dk are rotated back after the attention backward.
// LLAMA: weftx.launch @attention_backward {{.*}} writes(@attn.q.grad[0 +: 2048], @attn.k.grad[0 +: 1024], @attn.v.grad[0 +: 1024])
// LLAMA-NEXT: weftx.launch @rotary_backward reads(@attn.q.grad[0 +: 2048]) writes(@attn.q.grad[0 +: 2048])
// LLAMA-NEXT: weftx.launch @rotary_backward.1 reads(@attn.k.grad[0 +: 1024]) writes(@attn.k.grad[0 +: 1024])
// LLAMA: weftx.parameter "lm_head.weight" [256, 64]

// ZeRO-1 at DP 2: slots padded to multiples of 2 x 16 elements, the rank's
// pieces contiguous in @master, @grads.shard and the moments; the slots
// reduce-scattered and all-gathered in buckets of at most `bucket-bytes`
// (128 KiB here; one coalesced collective per bucket), the partial gradient
// norm all-reduced, one AdamW step over the shard. The all-gathers that
// rebuild @params run at the start of the next step on the `allgather`
// stream, in order of first use, overlapping the forward: compute waits for
// each bucket right before the instruction that first reads it.
// ZERO1: weftx.buffer @params persistent size [[FLAT:[0-9]+]] align 64 : f32
// ZERO1-NEXT: weftx.buffer @grads persistent size [[FLAT]] align 64 : f32
// ZERO1-NEXT: weftx.buffer @exp_avg persistent size [[SHARD:[0-9]+]] align 64 : f32
// ZERO1-NEXT: weftx.buffer @exp_avg_sq persistent size [[SHARD]] align 64 : f32
// ZERO1-NEXT: weftx.buffer @master persistent size [[SHARD]] align 64 : f32
// ZERO1-NEXT: weftx.buffer @grads.shard persistent size [[SHARD]] align 64 : f32
// ZERO1-NOT: weftx.all_reduce {{.*}} @grads
// ZERO1-LABEL: weftx.stream "compute" {
// ZERO1-NEXT: weftx.fill
// ZERO1-NEXT: weftx.load_batch
// ZERO1-NEXT: weftx.wait_event [[EMBEDDINGS:[0-9]+]] phase "fwd mb0"
// ZERO1-NEXT: weftx.launch @embedding_forward reads(@tokens[0 +: 32], @params[0 +: 65536], @params[65536 +: 32768])
// ZERO1-NEXT: weftx.launch @layer_norm_forward reads(@embedding[0 +: 2048], @params[98304 +: 256], @params[98560 +: 256])
// ZERO1-NEXT: weftx.wait_event [[QKV:[0-9]+]] phase "fwd mb0"
// ZERO1-NEXT: weftx.gemm f32 m 64 n 8 k 64 lda 192 ldb 64 ldc 64 alpha 1.000000e+00 beta 0.000000e+00 reads(@params[98816 +: 48640], @layer_norm[0 +: 2048])
// ZERO1: weftx.wait_event [[SYNCED:[0-9]+]] phase "grad sync"
// ZERO1-NEXT: weftx.grad_norm f32 reads(@grads.shard[0 +: [[SHARD]]]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// ZERO1-NEXT: weftx.all_reduce sum 1 x f32 on @dp reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// The step overwrites @master once every gather has read it.
// ZERO1-NEXT: weftx.wait_event [[GATHERED:[0-9]+]] phase "adamw"
// ZERO1-NEXT: weftx.optimizer_step {{[0-9]+}} x f32 reads(@master[0 +: [[SHARD]]], @grads.shard[0 +: [[SHARD]]], @exp_avg[0 +: [[SHARD]]], @exp_avg_sq[0 +: [[SHARD]]], @grad.sumsq[0 +: 4]) writes(@master[0 +: [[SHARD]]], @exp_avg[0 +: [[SHARD]]], @exp_avg_sq[0 +: [[SHARD]]]) phase "adamw"
// ZERO1-NEXT: }
// The reduce-scatters overlap the backward on their own stream, each bucket
// as soon as compute has written its slots for the last time (the final
// norm's and the last MLP's first; the token table's, written last by the
// embedding, last).
// ZERO1-LABEL: weftx.stream "reducescatter" {
// ZERO1-NEXT: weftx.wait_event {{[0-9]+}} phase "grad sync"
// ZERO1-NEXT: weftx.reduce_scatter sum 8288 x f32 on @dp reads(@grads[498176 +: 256], @grads[498432 +: 256], @grads[432384 +: 65536], @grads[497920 +: 256]) writes(@grads.shard[249088 +: 128], @grads.shard[249216 +: 128], @grads.shard[216192 +: 32768], @grads.shard[248960 +: 128]) phase "grad sync"
// ZERO1: weftx.reduce_scatter sum 14496 x f32 on @dp reads({{.*}}, @grads[0 +: 65536]) writes({{.*}}, @grads.shard[0 +: 32768]) phase "grad sync"
// ZERO1-NEXT: weftx.reduce_scatter sum 4096 x f32 on @dp reads(@grads[65536 +: 32768]) writes(@grads.shard[32768 +: 16384]) phase "grad sync"
// ZERO1-NEXT: weftx.record_event [[SYNCED]] phase "grad sync"
// ZERO1-NEXT: }
// ZERO1-LABEL: weftx.stream "allgather" {
// ZERO1-NEXT: weftx.all_gather 12352 x f32 on @dp reads(@master[0 +: 32768], @master[32768 +: 16384], @master[49152 +: 128], @master[49280 +: 128]) writes(@params[0 +: 65536], @params[65536 +: 32768], @params[98304 +: 256], @params[98560 +: 256]) phase "param gather"
// ZERO1-NEXT: weftx.record_event [[EMBEDDINGS]] phase "param gather"
// ZERO1-NEXT: weftx.all_gather 8384 x f32 on @dp reads(@master[49408 +: 24576], {{.*}}) writes(@params[98816 +: 49152], {{.*}}) phase "param gather"
// ZERO1-NEXT: weftx.record_event [[QKV]] phase "param gather"
// ZERO1: weftx.record_event [[GATHERED]] phase "param gather"
// ZERO1-NEXT: }
// Each parameter initializes its replicated copy and its master piece.
// ZERO1: weftx.parameter "transformer.wpe.weight" [128, 64] {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 65536, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 8192>, #weftx.shard<role = @role0, buffer = @master, offset = 32768, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 8192>]

// GPT-2 "odd" (vocabulary 263): the logits' rows are padded to 264 elements,
// so every row of the LM head's GEMMs starts 16-byte aligned in 16-bit
// storage; the fused loss reads only the 263 words (`valid`) and writes a
// zero gradient on the padding, and the head's backward GEMMs read the
// gradient with the same stride.
// ODD: weftx.kernel @cross_entropy file "kernels/cross_entropy.cu" constants {accumulate = 1 : i64, grad = 1 : i64, grad_div = 1 : i64, loss_div = 1 : i64, rows = 8 : i64, valid = 263 : i64, vocab = 264 : i64}
// ODD-LABEL: weftx.program @role0
// ODD: weftx.gemm f32 trans_a m 263 n 8 k 48 lda 48 ldb 48 ldc 264 {{.*}} writes(@logits[0 +: 8448])
// ODD: weftx.launch @cross_entropy reads(@logits[0 +: 8448], @targets[0 +: 32]) writes(@loss[0 +: 4], @logits[0 +: 8448])
// ODD-NEXT: weftx.gemm f32 m 48 n 8 k 263 lda 48 ldb 264 ldc 48 {{.*}} reads(@params[0 +: 50496], @logits[0 +: 8448])
// ODD-NEXT: weftx.gemm f32 trans_b m 48 n 263 k 8 lda 48 ldb 264 ldc 48 {{.*}} reads(@layer_norm.6[0 +: 1536], @logits[0 +: 8448], @grads[0 +: 50496])
