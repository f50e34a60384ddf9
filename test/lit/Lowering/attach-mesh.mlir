// RUN: weftc import gpt2-odd | weft-opt --weft-attach-mesh="tp=2 pp=2 dp=3 zero=1 recompute=selective" | FileCheck %s --check-prefix=GPT2
// RUN: weftc import llama-tiny | weft-opt --weft-attach-mesh="tp=2" | FileCheck %s --check-prefix=LLAMA
// RUN: weftc import bert-tiny | weft-opt --weft-attach-mesh="pp=2 layers-per-stage=1,1" | FileCheck %s --check-prefix=BERT
// RUN: weftc import gpt2 | weft-opt --weft-attach-mesh="pp=2 schedule=interleaved virtual-stages=2 grad-accum=4" | FileCheck %s --check-prefix=INTERLEAVED

// The grid is DP x PP x TP; every option is recorded; the uneven split of 3
// blocks over 2 stages gives the extra block to the stage before the last.
// GPT2: shard.grid @weft_mesh(shape = 3x2x2)
// GPT2-LABEL: func.func @gpt2_odd
// GPT2-SAME: weft.parallel = {bucket_bytes = 0 : i64, dp = 3 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 2, 1>, micro_batch = 1 : i64, pp = 2 : i64, prefetch_depth = 0 : i64, recompute = "selective", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 1 : i64}
// GPT2: %[[WTE:.*]] = weft.param "transformer.wte.weight" {{.*}}weft.placement = {stage = 0 : i64, tp = "vocab", tp_dim = 0 : i64}, weft.stage = 0 : i64}
// GPT2: weft.param "transformer.wpe.weight" {{.*}}weft.placement = {stage = 0 : i64, tp = "replicated"}, weft.stage = 0 : i64}
// GPT2: weft.embedding {{.*}}weft.stage = 0 : i64
// GPT2: weft.block 0({{.*}}attributes {weft.stage = 0 : i64}
// GPT2: weft.param "transformer.h.0.ln_1.weight" {{.*}}{weft.placement = {stage = 0 : i64, tp = "replicated"}}
// GPT2: weft.param "transformer.h.0.attn.c_attn.weight" {{.*}}{weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 1 : i64}}
// GPT2: weft.param "transformer.h.0.attn.c_attn.bias" {{.*}}{weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 0 : i64}}
// GPT2: weft.param "transformer.h.0.attn.c_proj.weight" {{.*}}{weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 0 : i64}}
// GPT2: weft.param "transformer.h.0.attn.c_proj.bias" {{.*}}{weft.placement = {stage = 0 : i64, tp = "replicated"}}
// GPT2: weft.param "transformer.h.0.mlp.c_fc.weight" {{.*}}{weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 1 : i64}}
// GPT2: weft.param "transformer.h.0.mlp.c_proj.weight" {{.*}}{weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 0 : i64}}
// GPT2: weft.block 1({{.*}}attributes {weft.stage = 0 : i64}
// GPT2: weft.block 2({{.*}}attributes {weft.stage = 1 : i64}
// GPT2: weft.param "transformer.h.2.ln_1.weight" {{.*}}{weft.placement = {stage = 1 : i64, tp = "replicated"}}
// GPT2: weft.param "transformer.ln_f.weight" {{.*}}weft.stage = 1 : i64}
// GPT2: weft.lm_head %{{.*}}, %[[WTE]] {weft.stage = 1 : i64}
// GPT2: weft.cross_entropy {{.*}}weft.stage = 1 : i64

// LLAMA: shard.grid @weft_mesh(shape = 1x1x2)
// LLAMA-LABEL: func.func @llama_tiny
// LLAMA-SAME: layers_per_stage = array<i64: 2>
// LLAMA: weft.param "model.layers.0.self_attn.q_proj.weight" {{.*}}tp = "column", tp_dim = 1 : i64
// LLAMA: weft.param "model.layers.0.self_attn.k_proj.weight" {{.*}}tp = "column", tp_dim = 1 : i64
// LLAMA: weft.param "model.layers.0.self_attn.o_proj.weight" {{.*}}tp = "row", tp_dim = 0 : i64
// LLAMA: weft.param "model.layers.0.mlp.gate_proj.weight" {{.*}}tp = "column", tp_dim = 1 : i64
// LLAMA: weft.param "model.layers.0.mlp.down_proj.weight" {{.*}}tp = "row", tp_dim = 0 : i64
// LLAMA: weft.param "lm_head.weight" {{.*}}tp = "vocab", tp_dim = 0 : i64

// BERT-LABEL: func.func @bert_tiny
// BERT-SAME: layers_per_stage = array<i64: 1, 1>
// BERT: weft.param "bert.embeddings.token_type_embeddings.weight" {{.*}}tp = "replicated"
// BERT: weft.layer_norm {{.*}}weft.stage = 0 : i64
// BERT: weft.block 0({{.*}}attributes {weft.stage = 0 : i64}
// BERT: weft.block 1({{.*}}attributes {weft.stage = 1 : i64}
// BERT: weft.param "cls.predictions.transform.dense.weight" {{.*}}tp = "replicated"
// BERT: weft.param "cls.predictions.bias" {{.*}}stage = 1 : i64, tp = "vocab", tp_dim = 0 : i64

// INTERLEAVED-LABEL: func.func @gpt2
// INTERLEAVED-SAME: layers_per_stage = array<i64: 3, 3, 3, 3>
// INTERLEAVED-SAME: virtual_stages = 2 : i64
// INTERLEAVED: weft.block 2({{.*}}weft.stage = 0 : i64
// INTERLEAVED: weft.block 3({{.*}}weft.stage = 1 : i64
// INTERLEAVED: weft.block 6({{.*}}weft.stage = 2 : i64
// INTERLEAVED: weft.block 11({{.*}}weft.stage = 3 : i64
// INTERLEAVED: weft.cross_entropy {{.*}}weft.stage = 3 : i64
