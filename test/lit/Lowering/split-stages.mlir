// RUN: weftc import gpt2-odd | weft-opt --weft-attach-mesh="tp=2 pp=2" --weft-partition-tensor --weft-split-stages | FileCheck %s --check-prefix=GPT2
// RUN: weftc import llama-tiny | weft-opt --weft-attach-mesh --weft-split-stages | FileCheck %s --check-prefix=PP1
// RUN: weftc import gpt2 | weft-opt --weft-attach-mesh="pp=2 schedule=interleaved virtual-stages=2 grad-accum=2" --weft-split-stages | FileCheck %s --check-prefix=INTERLEAVED

// GPT2-LABEL: func.func @gpt2_odd_stage0(
// GPT2-SAME: %[[TOK:.*]]: tensor<?x?xi32> {weft.input = "tokens"}) -> tensor<?x?x48xf32>
// GPT2-SAME: weft.pipeline_stage = {chunk = 0 : i64, model = "gpt2_odd", num_stages = 2 : i64, rank = 0 : i64, stage = 0 : i64}
// GPT2: %[[WTE:.*]] = weft.param "transformer.wte.weight"
// GPT2: weft.vocab_embedding %[[TOK]], %[[WTE]]
// GPT2: weft.block 0(
// GPT2: %[[OUT:.*]] = weft.block 1(
// GPT2-NOT: weft.block 2
// GPT2: return %[[OUT]] : tensor<?x?x48xf32>
// The tied embedding gets a copy on the head's stage.
// GPT2-LABEL: func.func @gpt2_odd_stage1(
// GPT2-SAME: %[[ACT:.*]]: tensor<?x?x48xf32> {weft.input = "activation"}, %[[LABELS:.*]]: tensor<?x?xi32> {weft.input = "labels"}) -> tensor<f32>
// GPT2: %[[TIED:.*]] = weft.param "transformer.wte.weight" {{.*}}weft.placement = {stage = 1 : i64, tp = "vocab", tp_dim = 0 : i64}{{.*}}weft.stage = 1 : i64, weft.tied_to = "transformer.wte.weight"} : tensor<136x48xf32>
// GPT2: weft.block 2(%[[ACT]])
// GPT2: %[[LOGITS:.*]] = weft.lm_head %{{.*}}, %[[TIED]]
// GPT2: %[[LOSS:.*]] = weft.vocab_parallel_cross_entropy %[[LOGITS]], %[[LABELS]]
// GPT2: return %[[LOSS]] : tensor<f32>

// PP1-LABEL: func.func @llama_tiny_stage0(
// PP1-SAME: {weft.input = "tokens"}, %{{.*}}: tensor<?x?xi32> {weft.input = "labels"}) -> tensor<f32>
// PP1: weft.block 0
// PP1: weft.block 1
// PP1: weft.cross_entropy
// PP1-NOT: func.func

// Virtual stage s runs on rank s % pp as chunk s / pp.
// INTERLEAVED-LABEL: func.func @gpt2_stage0_chunk0(
// INTERLEAVED-SAME: rank = 0 : i64, stage = 0 : i64
// INTERLEAVED: weft.block 2(
// INTERLEAVED-LABEL: func.func @gpt2_stage1_chunk0(
// INTERLEAVED-SAME: chunk = 0 : i64{{.*}}rank = 1 : i64, stage = 1 : i64
// INTERLEAVED: weft.block 3(
// INTERLEAVED-LABEL: func.func @gpt2_stage0_chunk1(
// INTERLEAVED-SAME: chunk = 1 : i64{{.*}}rank = 0 : i64, stage = 2 : i64
// INTERLEAVED: weft.block 6(
// INTERLEAVED-LABEL: func.func @gpt2_stage1_chunk1(
// INTERLEAVED: weft.param "transformer.wte.weight" {{.*}}weft.tied_to = "transformer.wte.weight"
// INTERLEAVED: weft.block 11(
// INTERLEAVED: weft.cross_entropy
