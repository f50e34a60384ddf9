// RUN: weftc import gpt2-odd | weft-opt --weft-attach-mesh="tp=2 pp=2" --weft-partition-tensor | FileCheck %s --check-prefix=GPT2
// RUN: weftc import llama-tiny | weft-opt --weft-attach-mesh="tp=2" --weft-partition-tensor | FileCheck %s --check-prefix=LLAMA
// RUN: weftc import bert-tiny | weft-opt --weft-attach-mesh="tp=2 sequence-parallel=true" --weft-partition-tensor | FileCheck %s --check-prefix=SP
// RUN: weftc import gpt2-odd | weft-opt --weft-attach-mesh --weft-partition-tensor | FileCheck %s --check-prefix=TP1

// Vocabulary 263 over tp 2: 136 rows per rank (shards of a multiple of 8
// rows), nine padding rows.
// GPT2-LABEL: func.func @gpt2_odd
// GPT2: %[[WTE:.*]] = weft.param "transformer.wte.weight" {{.*}}weft.shard = {global_name = "transformer.wte.weight", global_shape = array<i64: 263, 48>, local_size = 136 : i64, padding = 9 : i64, tp_dim = 0 : i64}{{.*}} : tensor<136x48xf32>
// GPT2: %[[WPE:.*]] = weft.param "transformer.wpe.weight" {{.*}}weft.shard = {global_name = "transformer.wpe.weight", global_shape = array<i64: 64, 48>}{{.*}} : tensor<64x48xf32>
// GPT2: %[[PARTIAL:.*]] = weft.vocab_embedding %arg0, %[[WTE]] on @weft_mesh grid_axes = [2] {vocab_size = 263 : i64, weft.stage = 0 : i64}
// GPT2: %[[SUM:.*]] = shard.all_reduce %[[PARTIAL]] on @weft_mesh grid_axes = [2] {weft.stage = 0 : i64}
// GPT2: %[[EMB:.*]] = weft.position_embedding %[[SUM]] positions(%[[WPE]]) {weft.stage = 0 : i64}
// GPT2: weft.block 0(%[[EMB]])
// The fused [q|k|v] is split per third: each rank keeps 2 heads of q, k and v.
// GPT2: %[[QKV:.*]] = weft.param "transformer.h.0.attn.c_attn.weight" {{.*}}weft.shard = {global_name = "transformer.h.0.attn.c_attn.weight", global_shape = array<i64: 48, 144>, local_size = 72 : i64, segments = array<i64: 48, 48, 48>, tp_dim = 1 : i64}} : tensor<48x72xf32>
// GPT2: %[[QKVB:.*]] = weft.param "transformer.h.0.attn.c_attn.bias" {{.*}}segments = array<i64: 48, 48, 48>, tp_dim = 0 : i64}} : tensor<72xf32>
// GPT2: %[[PROJ:.*]] = weft.param "transformer.h.0.attn.c_proj.weight" {{.*}}local_size = 24 : i64, tp_dim = 0 : i64}} : tensor<24x48xf32>
// GPT2: %[[PROJB:.*]] = weft.param "transformer.h.0.attn.c_proj.bias" {{.*}} : tensor<48xf32>
// GPT2: %[[IN:.*]] = weft.tp_copy %[[LN:.*]] on @weft_mesh grid_axes = [2] : tensor<?x?x48xf32>
// GPT2: %[[ATT:.*]] = weft.tp_attention %[[IN]] qkv(%[[QKV]]) qkv_bias(%[[QKVB]]) out(%[[PROJ]]) {causal = true, head_dim = 12 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64}
// GPT2: %[[RED:.*]] = shard.all_reduce %[[ATT]] on @weft_mesh grid_axes = [2]
// GPT2: %[[BIASED:.*]] = weft.bias_add %[[RED]], %[[PROJB]]
// GPT2: arith.addf %{{.*}}, %[[BIASED]]
// GPT2: %[[FC:.*]] = weft.param "transformer.h.0.mlp.c_fc.weight" {{.*}} : tensor<48x96xf32>
// GPT2: %[[FCB:.*]] = weft.param "transformer.h.0.mlp.c_fc.bias" {{.*}} : tensor<96xf32>
// GPT2: %[[DOWN:.*]] = weft.param "transformer.h.0.mlp.c_proj.weight" {{.*}} : tensor<96x48xf32>
// GPT2: %[[DOWNB:.*]] = weft.param "transformer.h.0.mlp.c_proj.bias" {{.*}} : tensor<48xf32>
// GPT2: %[[MIN:.*]] = weft.tp_copy
// GPT2: %[[MLP:.*]] = weft.mlp %[[MIN]] up(%[[FC]], %[[FCB]]) down(%[[DOWN]]) {activation = "gelu_tanh"}
// GPT2: %[[MRED:.*]] = shard.all_reduce %[[MLP]]
// GPT2: weft.bias_add %[[MRED]], %[[DOWNB]]
// GPT2: weft.block 2
// GPT2: %[[HIN:.*]] = weft.tp_copy %{{.*}} {weft.stage = 1 : i64}
// GPT2: %[[LOGITS:.*]] = weft.lm_head %[[HIN]], %[[WTE]] {weft.stage = 1 : i64} : (tensor<?x?x48xf32>, tensor<136x48xf32>) -> tensor<?x?x136xf32>
// GPT2: weft.vocab_parallel_cross_entropy %[[LOGITS]], %arg1 on @weft_mesh grid_axes = [2] {ignore_index = -100 : i64, vocab_size = 263 : i64, weft.stage = 1 : i64} : (tensor<?x?x136xf32>, tensor<?x?xi32>) -> tensor<f32>

// GQA: 4 query and 2 key/value heads become 2 and 1 per rank.
// LLAMA-LABEL: func.func @llama_tiny
// LLAMA: %[[TOK:.*]] = weft.vocab_embedding
// LLAMA-NEXT: shard.all_reduce %[[TOK]]
// LLAMA: %[[Q:.*]] = weft.param "model.layers.0.self_attn.q_proj.weight" {{.*}} : tensor<64x32xf32>
// LLAMA: %[[K:.*]] = weft.param "model.layers.0.self_attn.k_proj.weight" {{.*}}local_size = 16 : i64, tp_dim = 1 : i64}} : tensor<64x16xf32>
// LLAMA: %[[V:.*]] = weft.param "model.layers.0.self_attn.v_proj.weight" {{.*}} : tensor<64x16xf32>
// LLAMA: %[[O:.*]] = weft.param "model.layers.0.self_attn.o_proj.weight" {{.*}} : tensor<32x64xf32>
// LLAMA: %[[X:.*]] = weft.tp_copy
// LLAMA: %[[A:.*]] = weft.tp_attention %[[X]] qkv(%[[Q]], %[[K]], %[[V]]) out(%[[O]]) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, rope_theta = 1.000000e+04 : f64, tp_size = 2 : i64}
// LLAMA-NEXT: %[[R:.*]] = shard.all_reduce %[[A]]
// LLAMA-NEXT: arith.addf %{{.*}}, %[[R]]
// LLAMA: weft.mlp %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}}) {activation = "silu"} : (tensor<?x?x64xf32>, tensor<64x88xf32>, tensor<64x88xf32>, tensor<88x64xf32>)
// LLAMA: weft.param "lm_head.weight" {{.*}} : tensor<128x64xf32>
// LLAMA: weft.vocab_parallel_cross_entropy {{.*}}vocab_size = 256

// Sequence parallelism: the embedding is sliced along the sequence after the
// position rows; all_gather / reduce_scatter replace tp_copy / all_reduce;
// replicated parameters used on sequence shards are marked sequence_partial.
// SP-LABEL: func.func @bert_tiny
// SP: weft.param "bert.embeddings.position_embeddings.weight" {{.*}}weft.shard = {global_name = "bert.embeddings.position_embeddings.weight", global_shape = array<i64: 128, 64>}
// SP: %[[SUM:.*]] = shard.all_reduce
// SP: %[[POS:.*]] = weft.position_embedding %[[SUM]] positions(%{{.*}}) token_types(%{{.*}})
// SP: %[[SLICE:.*]] = shard.all_slice %[[POS]] on @weft_mesh grid_axes = [2] slice_axis = 1
// SP: weft.param "bert.embeddings.LayerNorm.weight" {{.*}}sequence_partial
// SP: weft.layer_norm %[[SLICE]]
// SP: ^bb0(%[[H:.*]]: tensor<?x?x64xf32>):
// SP: %[[G:.*]] = shard.all_gather %[[H]] on @weft_mesh grid_axes = [2] gather_axis = 1
// SP: %[[A:.*]] = weft.tp_attention %[[G]] {{.*}}causal = false
// SP: %[[RS:.*]] = shard.reduce_scatter %[[A]] on @weft_mesh grid_axes = [2] scatter_axis = 1
// SP: weft.bias_add %[[RS]]
// SP: weft.linear {{.*}}weft.stage = 0 : i64
// SP: %[[HG:.*]] = shard.all_gather %{{.*}} gather_axis = 1 {weft.stage = 0 : i64}
// SP: weft.lm_head %[[HG]], %{{.*}}, %{{.*}} {weft.stage = 0 : i64} : (tensor<?x?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x?x128xf32>

// tp = 1: the same ops and global shapes; only weft.shard is added.
// TP1-LABEL: func.func @gpt2_odd
// TP1: weft.param "transformer.wte.weight" {{.*}}weft.shard = {global_name = "transformer.wte.weight", global_shape = array<i64: 263, 48>}{{.*}} : tensor<263x48xf32>
// TP1-NOT: weft.tp_
// TP1-NOT: shard.
// TP1: weft.embedding
// TP1: weft.attention {{.*}}num_heads = 4 : i64{{.*}}tensor<48x144xf32>, tensor<144xf32>, tensor<48x48xf32>, tensor<48xf32>
// TP1: weft.mlp {{.*}}down(%{{.*}}, %{{.*}})
// TP1: weft.lm_head {{.*}}-> tensor<?x?x263xf32>
// TP1: weft.cross_entropy
// TP1-NOT: weft.tp_
// TP1-NOT: shard.
