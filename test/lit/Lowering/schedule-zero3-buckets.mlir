// RUN: weftc import llama-tiny | weft-opt --weft-lower='dp=2 zero=3 prefetch-depth=2' --weft-autodiff --weft-schedule='seq-len=8 max-live-gathered-bytes=100000' --weft-step | FileCheck %s --check-prefix=TIGHT
// RUN: weftc import llama-tiny | weft-opt --weft-lower='dp=2 zero=3 prefetch-depth=2' --weft-autodiff --weft-schedule='seq-len=8 max-live-gathered-bytes=100000' --weft-step | FileCheck %s --check-prefix=NOGATHER
// RUN: weftc import llama-tiny | weft-opt --weft-lower='dp=2 zero=3 prefetch-depth=2' --weft-autodiff --weft-schedule='seq-len=8 max-live-gathered-bytes=1000000' --weft-step | FileCheck %s --check-prefix=LOOSE

// The ZeRO-3 prefetch schedule on LLaMA-tiny over 2 DP ranks
// (docs/lowering.md, "ZeRO-3"):
// - persistent small parameters: the RMSNorm weights (64 elements, at most
//   the default persist-threshold min(100000, 16384 / 64) = 256) stay whole
//   in the persistent `params` buffer on every DP rank, with a second
//   ShardSpec for their master half, are read there and never gathered;
// - coalescing: q, k, v and o of a layer (neighbour slots, used one after
//   the other, each at most a quarter of the 45056-byte bucket limit, the
//   second largest gathered parameter) are gathered by one all_gather whose
//   members are their master shards, each straight into the parameter's own
//   gathered buffer (no staging, no copies), with one ready event and one
//   wait on `compute`;
// - the live bound: with 100000 bytes, the bucket (49152 bytes) is not
//   issued while the embedding (65536 bytes) is still gathered: it waits
//   for the event `compute` records right after releasing the embedding.
//   With a loose bound it only waits for the prefetch depth.

// TIGHT-LABEL: weftx.program @role0 ranks [0, 1] {
// TIGHT: weftx.buffer @params persistent size 1280
// TIGHT: weftx.buffer @model.layers.0.self_attn.q_proj.weight.gathered arena size 16384
// TIGHT-NOT: weftx.buffer @bucket.gathered

// TIGHT-LABEL: weftx.stream "compute" {
// TIGHT: weftx.launch @embedding_forward reads(@tokens[0 +: 32], @model.embed_tokens.weight.gathered[0 +: 65536])
// TIGHT-NEXT: weftx.release writes(@model.embed_tokens.weight.gathered[0 +: 65536]) phase "fwd mb0"
// TIGHT-NEXT: weftx.record_event [[EMB_FREED:[0-9]+]] phase "fwd mb0"
// The norm reads its persistent copy, with no wait.
// TIGHT-NEXT: weftx.launch @rms_norm_forward reads(@embedding[0 +: 2048], @params[0 +: 256])
// One wait for the whole bucket, before q's first use.
// TIGHT-NEXT: weftx.wait_event [[BUCKET_READY:[0-9]+]] phase "fwd mb0"
// TIGHT-NEXT: weftx.record_event {{[0-9]+}} phase "fwd mb0"
// TIGHT-NEXT: weftx.gemm {{.*}} reads(@model.layers.0.self_attn.q_proj.weight.gathered[0 +: 16384], @rms_norm[0 +: 2048])
// TIGHT-NEXT: weftx.release writes(@model.layers.0.self_attn.q_proj.weight.gathered[0 +: 16384])
// TIGHT-NOT: weftx.wait_event
// TIGHT: weftx.gemm {{.*}} reads(@model.layers.0.self_attn.k_proj.weight.gathered[0 +: 8192]
// TIGHT-NOT: weftx.wait_event
// TIGHT: weftx.gemm {{.*}} reads(@model.layers.0.self_attn.v_proj.weight.gathered[0 +: 8192]
// TIGHT-NOT: weftx.wait_event
// TIGHT: weftx.gemm {{.*}} reads(@model.layers.0.self_attn.o_proj.weight.gathered[0 +: 16384]
// TIGHT-NEXT: weftx.release writes(@model.layers.0.self_attn.o_proj.weight.gathered[0 +: 16384])

// TIGHT-LABEL: weftx.stream "allgather" {
// TIGHT-NEXT: weftx.all_gather 8192 x f32 on @dp reads(@master[0 +: 32768]) writes(@model.embed_tokens.weight.gathered[0 +: 65536])
// TIGHT-NEXT: weftx.record_event
// The bound: the bucket waits until compute has released the embedding.
// TIGHT-NEXT: weftx.wait_event [[EMB_FREED]] phase "gather bucket model.layers.0.self_attn.q_proj.weight..model.layers.0.self_attn.o_proj.weight (fwd mb0)"
// One all_gather whose members are this rank's shards of q, k, v, o.
// TIGHT-NEXT: weftx.all_gather 6144 x f32 on @dp reads(@master[32896 +: 8192], @master[41088 +: 4096], @master[45184 +: 4096], @master[49280 +: 8192]) writes(@model.layers.0.self_attn.q_proj.weight.gathered[0 +: 16384], @model.layers.0.self_attn.k_proj.weight.gathered[0 +: 8192], @model.layers.0.self_attn.v_proj.weight.gathered[0 +: 8192], @model.layers.0.self_attn.o_proj.weight.gathered[0 +: 16384])
// TIGHT-NEXT: weftx.record_event [[BUCKET_READY]] phase "gather bucket

// The persistent norm weights: their full copy in `params` and their
// master half.
// TIGHT: weftx.parameter "model.layers.0.input_layernorm.weight" [64] f32 {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 64>, #weftx.shard<role = @role0, buffer = @master, offset = 32768, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 64>]

// No norm weight is ever gathered; after the optimizer step the persistent
// copies are rebuilt from the updated master halves, as under ZeRO-2 (one
// all_gather, each copy a member).
// NOGATHER-NOT: layernorm.weight.gathered
// NOGATHER-NOT: model.norm.weight.gathered
// NOGATHER: weftx.optimizer_step
// NOGATHER-NEXT: weftx.all_gather 160 x f32 on @dp reads(@master[32768 +: 128], @master[57472 +: 128], {{.*}}) writes(@params[0 +: 256], @params[256 +: 256], {{.*}}) phase "param gather"
// NOGATHER-NEXT: }
// NOGATHER-NOT: layernorm.weight.gathered
// NOGATHER-NOT: model.norm.weight.gathered

// LOOSE-LABEL: weftx.stream "allgather" {
// LOOSE-NEXT: weftx.all_gather 8192 x f32 on @dp reads(@master[0 +: 32768])
// LOOSE-NEXT: weftx.record_event
// LOOSE-NEXT: weftx.all_gather 6144 x f32 on @dp reads(@master[32896 +: 8192], {{.*}}) writes(@model.layers.0.self_attn.q_proj.weight.gathered[0 +: 16384], {{.*}})
