// RUN: weftc import gpt2-odd | weft-opt --weft-lower='tp=2' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=TP
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='pp=2 grad-accum=4 schedule=1f1b' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=PP
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='pp=2 grad-accum=3 schedule=gpipe' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=GPIPE
// RUN: weftc import %S/../weftc/Inputs/gpt2-tiny-4layers.json | weft-opt --weft-lower='pp=2 grad-accum=2 schedule=interleaved virtual-stages=2' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=INTERLEAVED
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 tp=2 pp=2 zero=1' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=MESH
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=SP
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1 micro-batch=2' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=SP-MB2

// Tensor parallelism over 2 ranks on GPT-2 "odd" (vocabulary 263, padded to
// 2 x 136: shards of a multiple of 8 rows): one program per TP rank; the
// rank's vocabulary offset is the only difference in their kernels. Row-parallel outputs and the backward of
// tp_copy are all-reduces on the TP family; the vocabulary-parallel loss runs
// the three shard phases around a max and a sum all-reduce.

// TP: weftx.mesh dp 1 pp 1 tp 2
// TP-NEXT: weftx.group @tp tp {{\[\[}}0, 1]]
// TP-NEXT: weftx.group @mp custom {{\[\[}}0, 1]]
// TP-NEXT: weftx.kernel @vocab_embedding_forward file "kernels/vocab_embedding_forward.cu" constants {batch = 1 : i64, hidden = 48 : i64, seq = 8 : i64, vocab_local = 136 : i64, vocab_start = 0 : i64}
// TP: weftx.kernel @cross_entropy_shard_max file "kernels/cross_entropy_shard_max.cu" constants {rows = 8 : i64, vocab = 263 : i64, vocab_local = 136 : i64, vocab_start = 0 : i64}
// TP: weftx.kernel @vocab_embedding_forward.1 file "kernels/vocab_embedding_forward.1.cu" constants {batch = 1 : i64, hidden = 48 : i64, seq = 8 : i64, vocab_local = 136 : i64, vocab_start = 136 : i64}

// TP-LABEL: weftx.program @role0 ranks [0] {
// TP collectives run on the `tp` stream (in compute's order, checked
// below): compute records an event after the producer and waits for the
// collective before the first consumer.
// TP: weftx.launch @vocab_embedding_forward reads(@tokens[0 +: 32], @params[0 +: 26112]) writes(@embedding.partial[0 +: 1536]) phase "fwd mb0"
// TP-NEXT: weftx.record_event [[EMB_READY:[0-9]+]] phase "fwd mb0"
// TP-NEXT: weftx.wait_event [[EMB_SUMMED:[0-9]+]] phase "fwd mb0"
// TP-NEXT: weftx.launch @position_embedding_forward reads(@embedding.partial[0 +: 1536], @params[{{[0-9]+}} +: 12288]) writes(@embedding[0 +: 1536])
// The fused QKV weight holds this rank's 24 columns of each of q, k and v as
// three contiguous [48, 24] matrices.
// TP: weftx.gemm f32 m 24 n 8 k 48 lda 24 ldb 48 ldc 24 {{.*}} reads(@params[[[Q:[0-9]+]] +: 4608], @layer_norm[0 +: 1536]) writes(@attn.q[0 +: 768])
// TP: weftx.gemm f32 m 24 n 8 k 48 lda 24 ldb 48 ldc 24 {{.*}} reads(@params[[[K:[0-9]+]] +: 4608], @layer_norm[0 +: 1536]) writes(@attn.k[0 +: 768])
// The row-parallel output projection's partial sum, reduced in place (no
// other op reads the partial), then the bias.
// TP: weftx.gemm f32 m 48 n 8 k 24 {{.*}} writes(@attn.out[0 +: 1536])
// TP-NEXT: weftx.record_event {{[0-9]+}}
// TP-NEXT: weftx.wait_event {{[0-9]+}}
// TP-NEXT: weftx.launch @bias_add{{(.[0-9])?}} reads(@attn.out[0 +: 1536], @params[{{[0-9]+}} +: 192]) writes(@bias_add[0 +: 1536])
// TP: weftx.launch @cross_entropy_shard_max reads(@logits[0 +: 4352]) writes(@ce.max[0 +: 32]) phase "bwd mb0"
// TP-NEXT: weftx.record_event
// TP-NEXT: weftx.wait_event
// TP-NEXT: weftx.launch @cross_entropy_shard_sums reads(@logits[0 +: 4352], @targets[0 +: 32], @ce.max[0 +: 32]) writes(@ce.sums[0 +: 32], @ce.sums[32 +: 32])
// TP-NEXT: weftx.record_event
// TP-NEXT: weftx.wait_event
// TP-NEXT: weftx.launch @cross_entropy_shard_finish reads(@logits[0 +: 4352], @targets[0 +: 32], @ce.max[0 +: 32], @ce.sums[0 +: 32], @ce.sums[32 +: 32]) writes(@loss[0 +: 4], @logits.grad[0 +: 4352])
// The head's input gradient is partial: tp_copy's backward sums it.
// TP: writes(@lm_head.grad[0 +: 1536])
// Layer 0's q gradient (its backward comes last) accumulates into the q
// piece of the fused weight.
// TP: weftx.gemm f32 trans_b m 24 n 48 k 8 {{.*}} reads(@attn.q.grad.2[0 +: 768], @{{[a-z_.0-9]+}}[0 +: 1536], @grads[[[Q]] +: 4608]) writes(@grads[[[Q]] +: 4608])
// TP: weftx.launch @vocab_embedding_backward reads(@tokens[0 +: 32], {{.*}}) writes(@grads[0 +: 26112])
// TP-rank 0 counts the replicated parameters in the gradient norm; the
// model-parallel all-reduce adds rank 1's split ones.
// TP: weftx.grad_norm f32 reads(@grads[0 +: [[ALL:[0-9]+]]]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// TP-NEXT: weftx.all_reduce sum 1 x f32 on @mp reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// TP-LABEL: weftx.stream "tp" {
// TP-NEXT: weftx.wait_event [[EMB_READY]] phase "fwd mb0"
// TP-NEXT: weftx.all_reduce sum 384 x f32 on @tp reads(@embedding.partial[0 +: 1536]) writes(@embedding.partial[0 +: 1536])
// TP-NEXT: weftx.record_event [[EMB_SUMMED]] phase "fwd mb0"
// TP-NEXT: weftx.wait_event
// TP-NEXT: weftx.all_reduce sum 384 x f32 on @tp reads(@attn.out[0 +: 1536]) writes(@attn.out[0 +: 1536])
// TP: weftx.all_reduce max 8 x f32 on @tp reads(@ce.max[0 +: 32]) writes(@ce.max[0 +: 32])
// TP: weftx.all_reduce sum 16 x f32 on @tp reads(@ce.sums[0 +: 64]) writes(@ce.sums[0 +: 64])
// TP: weftx.all_reduce sum 384 x f32 on @tp reads(@lm_head.grad[0 +: 1536])
// TP-LABEL: weftx.program @role1 ranks [1] {
// TP: weftx.launch @vocab_embedding_forward.1 reads(@tokens[0 +: 32], @params[0 +: 26112])
// TP: weftx.grad_norm f32 reads(@grads[0 +: 26112], @grads[{{[0-9]+}} +: {{[0-9]+}}],
// Shards: the vocabulary slices stop at 263 (rank 1 holds 127 rows and nine
// zero padding rows); the fused QKV weight is three slices per rank.
// TP: weftx.parameter "transformer.wte.weight" [263, 48] f32 init normal({{.*}}) hf "transformer.wte.weight" shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = 0, start = 0, length = 136, zero_shards = 1, padded_elements = 6528>, #weftx.shard<role = @role1, buffer = @params, offset = 0, dim = 0, start = 136, length = 127, zero_shards = 1, padded_elements = 6528>]
// TP: weftx.parameter "transformer.h.0.attn.c_attn.weight" [48, 144] {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = [[Q0:[0-9]+]], dim = 1, start = 0, length = 24, zero_shards = 1, padded_elements = 1152>, #weftx.shard<role = @role0, buffer = @params, offset = {{[0-9]+}}, dim = 1, start = 48, length = 24, zero_shards = 1, padded_elements = 1152>, #weftx.shard<role = @role0, buffer = @params, offset = {{[0-9]+}}, dim = 1, start = 96, length = 24, zero_shards = 1, padded_elements = 1152>, #weftx.shard<role = @role1, buffer = @params, offset = [[Q0]], dim = 1, start = 24, length = 24,
// TP: weftx.parameter "transformer.h.0.attn.c_proj.weight" [48, 48] {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = {{[0-9]+}}, dim = 0, start = 0, length = 24, {{.*}}, #weftx.shard<role = @role1, buffer = @params, offset = {{[0-9]+}}, dim = 0, start = 24, length = 24,
// TP: weftx.parameter "transformer.h.0.mlp.c_fc.weight" [48, 192] {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = {{[0-9]+}}, dim = 1, start = 0, length = 96, {{.*}}, #weftx.shard<role = @role1, buffer = @params, offset = {{[0-9]+}}, dim = 1, start = 96, length = 96,

// Pipeline parallelism, 1F1B, 4 micro-batches on 2 stages: stage 0 runs one
// warm-up forward; activations go out on a stream per direction and sending
// rank, each transfer ordered against `compute` by an event. A receive is
// posted once compute has begun the previous task (an event after the last
// instruction before it), and compute waits for a send two tasks later
// ("p2p done"), so the boundary buffers of finished micro-batches can be
// reused. The tied embedding's two copies (first and last stage) sum their
// gradients.

// PP: weftx.mesh dp 1 pp 2 tp 1
// PP-NEXT: weftx.group @pp pp {{\[\[}}0, 1]]
// PP-NEXT: weftx.group @tied custom {{\[\[}}0, 1]]
// PP-NEXT: weftx.group @mp custom {{\[\[}}0, 1]]
// PP-LABEL: weftx.program @role0 ranks [0] {
// PP-NOT: @loss
// PP: weftx.stream "compute" {
// PP: weftx.record_event [[SENT0:[0-9]+]] phase "fwd mb0"
// PP-NEXT: weftx.record_event [[BEGUN_F1:[0-9]+]] phase "fwd mb0"
// PP: weftx.record_event [[SENT1:[0-9]+]] phase "fwd mb1"
// PP-NEXT: weftx.wait_event [[DONE0:[0-9]+]] phase "p2p done"
// PP-NEXT: weftx.wait_event [[GRAD0:[0-9]+]] phase "bwd mb0"
// PP: weftx.load_batch 2
// PP: weftx.wait_event {{[0-9]+}} phase "bwd mb3"
// PP: weftx.all_reduce sum 16384 x f32 on @tied reads(@grads[0 +: 65536]) writes(@grads[0 +: 65536]) phase "tied grads"
// PP: weftx.all_reduce sum 1 x f32 on @mp
// PP: weftx.stream "p2p.fwd.s0" {
// PP-NEXT: weftx.wait_event [[SENT0]] phase "send fwd mb0"
// PP-NEXT: weftx.send 512 x f32 on @pp to 1 reads(@[[ACT0:.*]][0 +: 2048]) phase "send fwd mb0"
// PP-NEXT: weftx.record_event [[DONE0]] phase "send fwd mb0"
// PP-NEXT: weftx.wait_event [[SENT1]] phase "send fwd mb1"
// PP: weftx.stream "p2p.bwd.s1" {
// PP-NEXT: weftx.wait_event [[BEGUN_F1]] phase "recv bwd mb0"
// PP-NEXT: weftx.recv 512 x f32 on @pp from 1 writes(@activation.grad[0 +: 2048]) phase "recv bwd mb0"
// PP-NEXT: weftx.record_event [[GRAD0]] phase "recv bwd mb0"
// PP-LABEL: weftx.program @role1 ranks [1] {
// PP: weftx.buffer @loss persistent size 4
// PP: weftx.stream "compute" {
// PP-NEXT: weftx.fill f32 0.0{{.*}} writes(@grads[0 +: {{[0-9]+}}], @loss[0 +: 4]) phase "zero grads"
// PP-NEXT: weftx.load_batch 0
// PP-NEXT: weftx.wait_event [[ACT_MB0:[0-9]+]] phase "fwd mb0"
// PP: weftx.record_event [[BEGUN_B0:[0-9]+]] phase "fwd mb0"
// PP: weftx.record_event [[GRAD_OUT0:[0-9]+]] phase "bwd mb0"
// PP-NEXT: weftx.load_batch 1
// PP-NEXT: weftx.wait_event [[ACT_MB1:[0-9]+]] phase "fwd mb1"
// The tied copy is not counted twice in the gradient norm.
// PP: weftx.all_reduce sum 16384 x f32 on @tied reads(@grads[0 +: 65536])
// PP-NEXT: weftx.grad_norm f32 reads(@grads[65536 +:
// PP: weftx.stream "p2p.fwd.s0" {
// PP-NEXT: weftx.recv 512 x f32 on @pp from 0 writes(@activation[0 +: 2048]) phase "recv fwd mb0"
// PP-NEXT: weftx.record_event [[ACT_MB0]] phase "recv fwd mb0"
// PP-NEXT: weftx.wait_event [[BEGUN_B0]] phase "recv fwd mb1"
// PP-NEXT: weftx.recv 512 x f32 on @pp from 0 writes(@activation.1[0 +: 2048]) phase "recv fwd mb1"
// PP-NEXT: weftx.record_event [[ACT_MB1]] phase "recv fwd mb1"
// PP: weftx.stream "p2p.bwd.s1" {
// PP-NEXT: weftx.wait_event [[GRAD_OUT0]] phase "send bwd mb0"
// PP-NEXT: weftx.send 512 x f32 on @pp to 0 reads(@{{.*}}[0 +: 2048]) phase "send bwd mb0"
// PP: weftx.parameter "transformer.wte.weight" [256, 64] {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, {{.*}}>, #weftx.shard<role = @role1, buffer = @params, offset = 0, dim = -1,

// GPipe: every forward, then every backward; stage 0's sends are waited for
// two tasks later, stage 1's receives wait for compute to begin the task
// before theirs.
// GPIPE-LABEL: weftx.program @role0 ranks [0] {
// GPIPE: weftx.record_event {{[0-9]+}} phase "fwd mb0"
// GPIPE: weftx.record_event {{[0-9]+}} phase "fwd mb1"
// GPIPE-NEXT: weftx.wait_event {{[0-9]+}} phase "p2p done"
// GPIPE: weftx.record_event {{[0-9]+}} phase "fwd mb2"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "bwd mb0"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "bwd mb1"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "bwd mb2"
// GPIPE-LABEL: weftx.program @role1 ranks [1] {
// GPIPE: weftx.record_event [[BEGUN_F0:[0-9]+]] phase "zero grads"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "fwd mb0"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "fwd mb1"
// GPIPE: weftx.wait_event {{[0-9]+}} phase "fwd mb2"
// GPIPE: weftx.record_event {{[0-9]+}} phase "bwd mb0"
// GPIPE: weftx.record_event {{[0-9]+}} phase "bwd mb1"
// GPIPE: weftx.stream "p2p.fwd.s0" {
// GPIPE-NEXT: weftx.recv {{.*}} phase "recv fwd mb0"
// GPIPE-NEXT: weftx.record_event
// GPIPE-NEXT: weftx.wait_event [[BEGUN_F0]] phase "recv fwd mb1"

// Interleaved 1F1B: 4 virtual stages (2 chunks per rank) of a 4-block model
// and 2 micro-batches: rank 0 runs chunk 0 then chunk 1 of both
// micro-batches, and the backwards in reverse chunk order. Chunk 1 on rank 0
// receives from rank 1 (chunk 0) on rank 1's stream.
// INTERLEAVED: weftx.mesh dp 1 pp 2 tp 1
// INTERLEAVED-LABEL: weftx.program @role0 ranks [0] {
// INTERLEAVED: weftx.record_event {{[0-9]+}} phase "fwd c0 mb0"
// INTERLEAVED: weftx.record_event {{[0-9]+}} phase "fwd c0 mb1"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "fwd c1 mb0"
// INTERLEAVED: weftx.record_event {{[0-9]+}} phase "fwd c1 mb0"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "fwd c1 mb1"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "bwd c1 mb0"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "bwd c1 mb1"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "bwd c0 mb0"
// INTERLEAVED: weftx.wait_event {{[0-9]+}} phase "bwd c0 mb1"
// INTERLEAVED: weftx.stream "p2p.fwd.s0" {
// INTERLEAVED: weftx.send 256 x f32 on @pp to 1 {{.*}} phase "send fwd c1 mb1"
// INTERLEAVED: weftx.stream "p2p.fwd.s1" {
// INTERLEAVED-NEXT: weftx.wait_event {{[0-9]+}} phase "recv fwd c1 mb0"
// INTERLEAVED-NEXT: weftx.recv 256 x f32 on @pp from 1 writes(@activation[0 +: 1024]) phase "recv fwd c1 mb0"
// INTERLEAVED-LABEL: weftx.program @role1 ranks [1] {
// INTERLEAVED: weftx.buffer @loss

// DP 2 x TP 2 x PP 2 with ZeRO-1: one program per (stage, TP rank), shared by
// both replicas; every family lists one group per position on the other
// axes, so the replicas reach their own groups. Sharded gradients make the
// norm's all-reduce span the world.
// MESH: weftx.mesh dp 2 pp 2 tp 2
// MESH-NEXT: weftx.group @tp tp {{\[\[}}0, 1], [2, 3], [4, 5], [6, 7]]
// MESH-NEXT: weftx.group @pp pp {{\[\[}}0, 2], [1, 3], [4, 6], [5, 7]]
// MESH-NEXT: weftx.group @tied custom {{\[\[}}0, 2], [1, 3], [4, 6], [5, 7]]
// MESH-NEXT: weftx.group @dp dp {{\[\[}}0, 4], [1, 5], [2, 6], [3, 7]]
// MESH-NEXT: weftx.group @world world {{\[\[}}0, 1, 2, 3, 4, 5, 6, 7]]
// MESH-LABEL: weftx.program @role0 ranks [0, 4] {
// MESH: weftx.all_reduce sum 1 x f32 on @world
// MESH-LABEL: weftx.stream "reducescatter" {
// MESH: weftx.reduce_scatter sum {{[0-9]+}} x f32 on @dp
// MESH-LABEL: weftx.stream "allgather" {
// MESH: weftx.all_gather {{[0-9]+}} x f32 on @dp
// MESH-LABEL: weftx.program @role1 ranks [1, 5] {
// MESH-LABEL: weftx.program @role2 ranks [2, 6] {
// MESH-LABEL: weftx.program @role3 ranks [3, 7] {

// Sequence parallelism (TP 2, 8 tokens): after the embedding each rank keeps
// its 4 rows of the sequence; norms and residuals run on them, all_gather
// feeds the TP regions and reduce_scatter leaves them; the norms' and
// row-parallel biases' gradients are partial per rank and summed over TP
// (one all-reduce, each gradient a member).
// SP-LABEL: weftx.program @role0 ranks [0] {
// SP: weftx.copy reads(@embedding[0 +: 1024]) writes(@sp.slice[0 +: 1024]) phase "fwd mb0"
// SP-NEXT: weftx.launch @layer_norm_forward{{(.[0-9])?}} reads(@sp.slice[0 +: 1024], {{.*}}) writes(@layer_norm[0 +: 1024], @layer_norm.mean[0 +: 16], @layer_norm.rstd[0 +: 16])
// SP-NEXT: weftx.record_event
// SP: weftx.launch @layer_norm_backward{{(.[0-9])?}} reads({{.*}}) writes(@layer_norm.grad[0 +: 1024], @grads[{{[0-9]+}} +: 256], @grads[{{[0-9]+}} +: 256])
// SP-LABEL: weftx.stream "tp" {
// SP: weftx.all_gather 256 x f32 on @tp reads(@layer_norm[0 +: 1024]) writes(@sp.gather[0 +: 2048])
// SP: weftx.reduce_scatter sum 256 x f32 on @tp reads(@attn.out[0 +: 2048]) writes(@sp.scatter[0 +: 1024])
// One all-reduce sums all 14 of them (its members).
// SP: weftx.all_reduce sum 896 x f32 on @tp reads(@grads[[[LN1:[0-9]+]] +: 256], {{.*}}) writes(@grads[[[LN1]] +: 256], {{.*}}) phase "sequence-parallel grads"
// SP-NOT: weftx.all_reduce {{.*}} phase "sequence-parallel grads"
// SP-LABEL: weftx.program @role1 ranks [1] {
// SP: weftx.copy reads(@embedding[1024 +: 1024]) writes(@sp.slice[0 +: 1024]) phase "fwd mb0"

// Sequence parallelism with two sequences per micro-batch: a TP rank holds
// [2, 4, 64] (its half of each sequence). The slice takes one block per
// sequence; the all-gather and the reduce-scatter (on `tp`) have one member
// per sequence, between the rank's [4, 64] half and the sequence's [8, 64],
// so the blocks land in place and no copies reorder them.
// SP-MB2-LABEL: weftx.program @role0 ranks [0] {
// SP-MB2: weftx.copy reads(@embedding[0 +: 1024]) writes(@sp.slice[0 +: 1024]) phase "fwd mb0"
// SP-MB2-NEXT: weftx.copy reads(@embedding[2048 +: 1024]) writes(@sp.slice[1024 +: 1024]) phase "fwd mb0"
// SP-MB2-NOT: weftx.copy {{.*}}@sp.gather
// SP-MB2-NOT: weftx.copy {{.*}}@sp.scatter
// SP-MB2-LABEL: weftx.stream "tp" {
// SP-MB2: weftx.all_gather 512 x f32 on @tp reads(@layer_norm[0 +: 1024], @layer_norm[1024 +: 1024]) writes(@sp.gather[0 +: 2048], @sp.gather[2048 +: 2048]) phase "fwd mb0"
// SP-MB2: weftx.reduce_scatter sum 512 x f32 on @tp reads(@attn.out[0 +: 2048], @attn.out[2048 +: 2048]) writes(@sp.scatter[0 +: 1024], @sp.scatter[1024 +: 1024]) phase "fwd mb0"
