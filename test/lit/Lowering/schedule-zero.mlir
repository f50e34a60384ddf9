// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3 prefetch-depth=2 grad-accum=2 bucket-bytes=1' --weft-autodiff --weft-schedule='seq-len=8 persist-threshold=0 max-live-gathered-bytes=1000000000 max-live-grad-bytes=196608' --weft-step | FileCheck %s --check-prefix=ZERO3
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=2' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=ZERO2

// ZeRO-3 over 2 DP ranks with 2 micro-batches: the persistent region holds
// only this rank's halves (master weights, gradient shard, AdamW moments);
// each parameter is gathered into an arena buffer on the `allgather` stream,
// waited for by `compute` right before its first use and released after its
// last, once per forward and again per backward. Gather k waits for the
// event compute records when it begins using gather k - 2 (prefetch depth
// 2). Each micro-batch's gradient of a parameter is an arena buffer of its
// own, reduce-scattered into the shard on the `reducescatter` stream as soon
// as the backward has finished it (the second micro-batch's through a
// buffer of its own, then added); compute waits for those reduce-scatters
// only to keep the live gradient bytes within `max-live-grad-bytes`, and
// before the step. There is no all-gather after the optimizer step.

// ZERO3-LABEL: weftx.program @role0 ranks [0, 1] {
// ZERO3-NOT: weftx.buffer @params
// ZERO3-NOT: weftx.buffer @grads arena
// ZERO3: weftx.buffer @exp_avg persistent size 249344
// ZERO3-NEXT: weftx.buffer @exp_avg_sq persistent size 249344
// ZERO3-NEXT: weftx.buffer @master persistent size 249344
// ZERO3-NEXT: weftx.buffer @grads.shard persistent size 249344
// ZERO3: weftx.buffer @transformer.wte.weight.gathered arena size 65536
// ZERO3: weftx.buffer @grad.transformer.wte.weight arena size 65536
// ZERO3: weftx.buffer @grad.transformer.wte.weight.1 arena size 65536
// ZERO3: weftx.buffer @grad.part.transformer.wte.weight arena size 32768

// ZERO3-LABEL: weftx.stream "compute" {
// ZERO3-NEXT: weftx.fill f32 0.000000e+00 writes(@grads.shard[0 +: 249344], @loss[0 +: 4]) phase "zero grads"
// ZERO3-NEXT: weftx.load_batch 0
// ZERO3-NEXT: weftx.wait_event [[WTE_READY:[0-9]+]] phase "fwd mb0"
// ZERO3-NEXT: weftx.record_event [[WTE_USED:[0-9]+]] phase "fwd mb0"
// ZERO3-NEXT: weftx.wait_event [[WPE_READY:[0-9]+]] phase "fwd mb0"
// ZERO3-NEXT: weftx.record_event [[WPE_USED:[0-9]+]] phase "fwd mb0"
// ZERO3-NEXT: weftx.launch @embedding_forward reads(@tokens[0 +: 32], @transformer.wte.weight.gathered[0 +: 65536], @transformer.wpe.weight.gathered[0 +: 32768])
// The position table is dead after the embedding; the tied token table
// lives until the head.
// ZERO3-NEXT: weftx.release writes(@transformer.wpe.weight.gathered[0 +: 32768]) phase "fwd mb0"
// ZERO3: weftx.gemm f32 trans_a m 256 n 8 k 64 {{.*}} reads(@transformer.wte.weight.gathered[0 +: 65536], {{.*}} writes(@logits[0 +: 8192]) phase "fwd mb0"
// ZERO3-NEXT: weftx.release writes(@transformer.wte.weight.gathered[0 +: 65536]) phase "fwd mb0"
// The backward gathers again into fresh buffers.
// ZERO3: weftx.gemm {{.*}} reads(@transformer.wte.weight.gathered.1[0 +: 65536], @logits[0 +: 8192]) writes(@lm_head.grad[0 +: 2048]) phase "bwd mb0"
// ZERO3-NEXT: weftx.release writes(@transformer.wte.weight.gathered.1[0 +: 65536]) phase "bwd mb0"
// A gradient buffer is zeroed right before its first writer (one fill for
// the gradients one grad op starts); its last writer signals the
// reduce-scatter stream.
// ZERO3: weftx.fill f32 0.000000e+00 writes(@grad.transformer.ln_f.weight[0 +: 256], @grad.transformer.ln_f.bias[0 +: 256]) phase "bwd mb0"
// Then the wait for the final norm's gathered weight, which its backward
// reads first (the row statistics are the forward's op state).
// ZERO3-NEXT: weftx.wait_event {{[0-9]+}} phase "bwd mb0"
// ZERO3-NEXT: weftx.record_event {{[0-9]+}} phase "bwd mb0"
// ZERO3-NEXT: weftx.launch @layer_norm_backward {{.*}} writes(@layer_norm.grad[0 +: 2048], @grad.transformer.ln_f.weight[0 +: 256], @grad.transformer.ln_f.bias[0 +: 256]) phase "bwd mb0"
// ZERO3-NEXT: weftx.record_event [[LNF_GRADS:[0-9]+]] phase "bwd mb0"
// The third layer matrix would exceed the live bound of 196608 bytes (given:
// the largest gradient plus twice the second largest): compute first waits
// for the reduce-scatters of the first gradients in reduction order, as
// many as needed: one wait, for the last of them (the stream runs them in
// order).
// ZERO3: weftx.wait_event [[PROJ_DONE:[0-9]+]] phase "grad sync done"
// ZERO3-NEXT: weftx.fill f32 0.000000e+00 writes(@grad.transformer.h.1.mlp.c_fc.weight[0 +: 65536]) phase "bwd mb0"
// ZERO3: weftx.launch @embedding_backward {{.*}} writes(@grad.transformer.wte.weight.1[0 +: 65536], @grad.transformer.wpe.weight.1[0 +: 32768]) phase "bwd mb1"
// ZERO3-NEXT: weftx.record_event [[EMB_GRADS:[0-9]+]] phase "bwd mb1"
// ZERO3-NEXT: weftx.wait_event [[GRADS_DONE:[0-9]+]] phase "grad sync"
// ZERO3-NEXT: weftx.grad_norm f32 reads(@grads.shard[0 +: 249344]) writes(@grad.sumsq[0 +: 4])
// ZERO3-NEXT: weftx.all_reduce sum 1 x f32 on @dp
// ZERO3-NEXT: weftx.optimizer_step 62336 x f32 reads(@master[0 +: 249344], @grads.shard[0 +: 249344], @exp_avg[0 +: 249344], @exp_avg_sq[0 +: 249344], @grad.sumsq[0 +: 4]) writes(@master[0 +: 249344], @exp_avg[0 +: 249344], @exp_avg_sq[0 +: 249344]) phase "adamw"
// ZERO3-NEXT: }

// ZERO3-LABEL: weftx.stream "allgather" {
// ZERO3-NEXT: weftx.all_gather 8192 x f32 on @dp reads(@master[0 +: 32768]) writes(@transformer.wte.weight.gathered[0 +: 65536]) phase "gather transformer.wte.weight (fwd mb0)"
// ZERO3-NEXT: weftx.record_event [[WTE_READY]] phase
// ZERO3-NEXT: weftx.all_gather 4096 x f32 on @dp reads(@master[32768 +: 16384]) writes(@transformer.wpe.weight.gathered[0 +: 32768])
// ZERO3-NEXT: weftx.record_event [[WPE_READY]] phase
// ZERO3-NEXT: weftx.wait_event [[WTE_USED]] phase "gather transformer.h.0.ln_1.weight (fwd mb0)"
// ZERO3-NEXT: weftx.all_gather 32 x f32 on @dp reads(@master[49152 +: 128]) writes(@transformer.h.0.ln_1.weight.gathered[0 +: 256])
// ZERO3-NEXT: weftx.record_event
// ZERO3-NEXT: weftx.wait_event [[WPE_USED]] phase "gather transformer.h.0.ln_1.bias (fwd mb0)"

// ZERO3-LABEL: weftx.stream "reducescatter" {
// ZERO3-NEXT: weftx.wait_event [[LNF_GRADS]] phase "grad sync"
// ZERO3-NEXT: weftx.reduce_scatter sum 32 x f32 on @dp reads(@grad.transformer.ln_f.weight[0 +: 256]) writes(@grads.shard[249088 +: 128]) phase "grad sync"
// ZERO3-NEXT: weftx.reduce_scatter sum 32 x f32 on @dp reads(@grad.transformer.ln_f.bias[0 +: 256]) writes(@grads.shard[249216 +: 128]) phase "grad sync"
// ZERO3-NEXT: weftx.wait_event
// ZERO3-NEXT: weftx.reduce_scatter sum 8192 x f32 on @dp reads(@grad.transformer.h.1.mlp.c_proj.weight[0 +: 65536]) writes(@grads.shard[216192 +: 32768]) phase "grad sync"
// ZERO3-NEXT: weftx.record_event [[PROJ_DONE]] phase "grad sync"
// The second micro-batch's gradients are reduce-scattered into buffers of
// their own and added to the shard.
// ZERO3: weftx.wait_event [[EMB_GRADS]] phase "grad sync"
// ZERO3-NEXT: weftx.reduce_scatter sum 8192 x f32 on @dp reads(@grad.transformer.wte.weight.1[0 +: 65536]) writes(@grad.part.transformer.wte.weight[0 +: 32768]) phase "grad sync"
// ZERO3-NEXT: weftx.launch @residual_add{{.*}} reads(@grads.shard[0 +: 32768], @grad.part.transformer.wte.weight[0 +: 32768]) writes(@grads.shard[0 +: 32768]) phase "grad sync"
// ZERO3-NEXT: weftx.reduce_scatter sum 4096 x f32 on @dp reads(@grad.transformer.wpe.weight.1[0 +: 32768]) writes(@grad.part.transformer.wpe.weight[0 +: 16384]) phase "grad sync"
// ZERO3-NEXT: weftx.launch @residual_add{{.*}} reads(@grads.shard[32768 +: 16384], @grad.part.transformer.wpe.weight[0 +: 16384]) writes(@grads.shard[32768 +: 16384]) phase "grad sync"
// ZERO3-NEXT: weftx.record_event [[GRADS_DONE]] phase "grad sync"
// ZERO3-NEXT: }

// Every parameter's only shard is its master half.
// ZERO3: weftx.parameter "transformer.wte.weight" [256, 64] f32 {{.*}} shards [#weftx.shard<role = @role0, buffer = @master, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 16384>]

// ZeRO-2: full parameters stay (persistent); gradients are arena buffers per
// parameter, reduce-scattered on their own stream as soon as the backward
// has written them; the reduce-scatters of gradients that become final one
// after the other are merged into one (each piece a member) behind the
// latest writer, up to a reduction compute waits for to bound the live
// gradients (here the first bucket, the final norm's and the last MLP's
// output projection, ends where compute must free it before zeroing the
// next gradient); the parameter all-gathers from the shards AdamW updates
// run at the start of the next step, overlapping its forward, in buckets of
// `bucket_bytes` (all 28 parameters of gpt2-tiny in one).

// ZERO2-LABEL: weftx.program @role0 ranks [0, 1] {
// ZERO2: weftx.buffer @params persistent size 498688
// ZERO2-NOT: weftx.buffer @grads arena
// ZERO2: weftx.buffer @master persistent size 249344
// ZERO2-NEXT: weftx.buffer @grads.shard persistent size 249344
// ZERO2: weftx.buffer @grad.transformer.ln_f.weight arena size 256
// ZERO2-LABEL: weftx.stream "compute" {
// The final norm's gradients no longer get an event of their own.
// ZERO2: weftx.launch @layer_norm_backward {{.*}} writes(@layer_norm.grad[0 +: 2048], @grad.transformer.ln_f.weight[0 +: 256], @grad.transformer.ln_f.bias[0 +: 256]) phase "bwd mb0"
// ZERO2-NOT: weftx.record_event
// ZERO2: weftx.gemm f32 trans_b {{.*}} writes(@grad.transformer.h.1.mlp.c_proj.weight[0 +: 65536]) phase "bwd mb0"
// ZERO2-NEXT: weftx.record_event [[BUCKET:[0-9]+]] phase "bwd mb0"
// ZERO2: weftx.wait_event [[FREED:[0-9]+]] phase "grad sync done"
// ZERO2-NEXT: weftx.fill f32 0.000000e+00 writes(@grad.transformer.h.1.attn.c_attn.weight[0 +: 49152]
// ZERO2: weftx.wait_event [[DONE:[0-9]+]] phase "grad sync"
// ZERO2-NEXT: weftx.grad_norm f32 reads(@grads.shard[0 +: 249344])
// ZERO2: weftx.wait_event [[GATHERED:[0-9]+]] phase "adamw"
// ZERO2-NEXT: weftx.optimizer_step 62336 x f32
// ZERO2-NEXT: }
// ZERO2-LABEL: weftx.stream "reducescatter" {
// ZERO2-NEXT: weftx.wait_event [[BUCKET]] phase "grad sync"
// ZERO2-NEXT: weftx.reduce_scatter sum 8256 x f32 on @dp reads(@grad.transformer.ln_f.weight[0 +: 256], @grad.transformer.ln_f.bias[0 +: 256], @grad.transformer.h.1.mlp.c_proj.weight[0 +: 65536]) writes(@grads.shard[249088 +: 128], @grads.shard[249216 +: 128], @grads.shard[216192 +: 32768]) phase "grad sync"
// ZERO2-NEXT: weftx.record_event [[FREED]] phase "grad sync"
// ZERO2: weftx.record_event [[DONE]] phase "grad sync"
// ZERO2-NEXT: }
// ZERO2-LABEL: weftx.stream "allgather" {
// ZERO2-NEXT: weftx.all_gather 62336 x f32 on @dp reads(@master[0 +: 32768], {{.*}}, @master[249216 +: 128]) writes(@params[0 +: 65536], {{.*}}, @params[498432 +: 256]) phase "param gather"
// ZERO2: weftx.record_event [[GATHERED]] phase "param gather"
// ZERO2-NEXT: }
