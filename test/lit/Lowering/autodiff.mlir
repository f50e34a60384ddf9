// Presets: recompute none (the default).
// RUN: weftc import gpt2-tiny | weft-opt --weft-autodiff | FileCheck %s --check-prefix=GPT2
// RUN: weftc import llama-tiny | weft-opt --weft-autodiff | FileCheck %s --check-prefix=LLAMA
// RUN: weftc import bert-tiny | weft-opt --weft-autodiff | FileCheck %s --check-prefix=BERT
// The recompute modes (the option overrides weft.parallel).
// RUN: weftc import gpt2-tiny | weft-opt --weft-autodiff=recompute=selective | FileCheck %s --check-prefix=SEL
// RUN: weftc import gpt2-tiny | weft-opt --weft-autodiff=recompute=full | FileCheck %s --check-prefix=FULL
// Hand-written stage functions, collectives and weft.parallel.
// RUN: weft-opt %s --weft-autodiff | FileCheck %s --check-prefix=STAGE
// RUN: not weft-opt %s --weft-autodiff=recompute=some 2>&1 | FileCheck %s --check-prefix=BADMODE
// Sequence parallelism after weft-partition-tensor (the embedding's all_slice).
// RUN: weftc import gpt2-tiny | weft-opt --weft-attach-mesh="tp=2 sequence-parallel=true" --weft-partition-tensor --weft-autodiff | FileCheck %s --check-prefix=SP

// GPT2-LABEL: func.func @gpt2_tiny(
// GPT2:         weft.block 0
// GPT2-NEXT:    ^bb0(%[[X:.*]]: tensor<?x?x64xf32>):
// GPT2-NEXT:      weft.save %[[X]] slot 0
// Without recompute every layer returns its op state and the forward saves
// it for the grad op: the norm's row mean and rstd,
// GPT2:           %[[LN1:.*]], %[[N1:.*]]:2 = weft.layer_norm %[[X]], {{.*}} -> state tensor<?x?xf32>, tensor<?x?xf32>
// GPT2-NEXT:      weft.save %[[LN1]] slot 1
// GPT2-NEXT:      weft.save %[[N1]]#0 slot 2 : tensor<?x?xf32>
// GPT2-NEXT:      weft.save %[[N1]]#1 slot 3 : tensor<?x?xf32>
// the attention's q, k, v, context and lse,
// GPT2:           %[[ATT:.*]], %[[AS:.*]]:5 = weft.attention %[[LN1]] {{.*}} -> (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x4xf32>)
// GPT2-NEXT:      weft.save %[[AS]]#0 slot 4
// GPT2-NEXT:      weft.save %[[AS]]#1 slot 5
// GPT2-NEXT:      weft.save %[[AS]]#2 slot 6
// GPT2-NEXT:      weft.save %[[AS]]#3 slot 7
// GPT2-NEXT:      weft.save %[[AS]]#4 slot 8
// GPT2-NEXT:      %[[H:.*]] = arith.addf %[[X]], %[[ATT]]
// GPT2-NEXT:      weft.save %[[H]] slot 9
// GPT2:           %[[LN2:.*]], %[[N2:.*]]:2 = weft.layer_norm %[[H]]
// GPT2-NEXT:      weft.save %[[LN2]] slot 10
// GPT2-NEXT:      weft.save %[[N2]]#0 slot 11
// GPT2-NEXT:      weft.save %[[N2]]#1 slot 12
// and the MLP's up projection and activation.
// GPT2:           %{{.*}}, %[[MS:.*]]:2 = weft.mlp %[[LN2]] {{.*}} -> (tensor<?x?x64xf32>, tensor<?x?x256xf32>, tensor<?x?x256xf32>)
// GPT2-NEXT:      weft.save %[[MS]]#0 slot 13
// GPT2-NEXT:      weft.save %[[MS]]#1 slot 14
// GPT2-NOT:       weft.save
// GPT2:           weft.yield
// GPT2:         %[[OUT:.*]] = weft.block 1
// GPT2:         weft.save %[[OUT]] slot 30
// GPT2:         %[[LNF:.*]], %[[NF:.*]]:2 = weft.layer_norm %[[OUT]]
// GPT2-NEXT:    weft.save %[[LNF]] slot 31
// GPT2-NEXT:    weft.save %[[NF]]#0 slot 32
// GPT2-NEXT:    weft.save %[[NF]]#1 slot 33
// GPT2:         %[[LOGITS:.*]] = weft.lm_head
// GPT2-NEXT:    weft.save %[[LOGITS]] slot 34
// GPT2-NEXT:    weft.cross_entropy
// GPT2-NEXT:    return

// The loss stage: no upstream gradient; no input gradient for integer tokens;
// one gradient per parameter in declaration order.
// GPT2-LABEL: func.func @gpt2_tiny_backward(
// GPT2-SAME:      %[[TOK:[^:]*]]: tensor<?x?xi32> {weft.input = "tokens"}, %[[LAB:[^:]*]]: tensor<?x?xi32> {weft.input = "labels"})
// GPT2-SAME:      -> (tensor<256x64xf32> {weft.grad = "transformer.wte.weight"}, tensor<128x64xf32> {weft.grad = "transformer.wpe.weight"}, tensor<64xf32> {weft.grad = "transformer.h.0.ln_1.weight"}
// GPT2-SAME:      tensor<64xf32> {weft.grad = "transformer.ln_f.bias"}) {
// GPT2:         %[[SEED:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// GPT2:         %[[WTE:.*]] = weft.param "transformer.wte.weight"
// GPT2:         %[[R8:.*]] = weft.restore @gpt2_tiny slot 30
// GPT2-NEXT:    %[[R9:.*]] = weft.restore @gpt2_tiny slot 31
// GPT2-NEXT:    %[[RM:.*]] = weft.restore @gpt2_tiny slot 32
// GPT2-NEXT:    %[[RS:.*]] = weft.restore @gpt2_tiny slot 33
// GPT2-NEXT:    %[[R10:.*]] = weft.restore @gpt2_tiny slot 34
// GPT2-NEXT:    %[[DLOG:.*]] = weft.cross_entropy_grad %[[SEED]], %[[R10]], %[[LAB]] {ignore_index = -100 : i64}
// GPT2-NEXT:    %[[HEAD:.*]]:2 = weft.lm_head_grad %[[DLOG]], %[[R9]], %[[WTE]]
// GPT2-NEXT:    %[[LNFG:.*]]:3 = weft.layer_norm_grad %[[HEAD]]#0, %[[R8]], %{{.*}}, %{{.*}} state(%[[RM]], %[[RS]])
// GPT2-NEXT:    %[[DX1:.*]], %{{.*}}:12 = weft.block_grad 1(%[[LNFG]]#0)
// GPT2-SAME:      params = ["transformer.h.1.ln_1.weight",
// GPT2:         %[[DX0:.*]], %[[P0:.*]]:12 = weft.block_grad 0(%[[DX1]])
// GPT2-NEXT:    ^bb0(%[[G:.*]]: tensor<?x?x64xf32>):
// GPT2:           %[[S0:.*]] = weft.restore @gpt2_tiny slot 0
// GPT2-NEXT:      %[[S1:.*]] = weft.restore @gpt2_tiny slot 1
// GPT2-NEXT:      %[[M1:.*]] = weft.restore @gpt2_tiny slot 2
// GPT2-NEXT:      %[[RS1:.*]] = weft.restore @gpt2_tiny slot 3
// GPT2-NEXT:      %[[Q:.*]] = weft.restore @gpt2_tiny slot 4
// GPT2-NEXT:      %[[K:.*]] = weft.restore @gpt2_tiny slot 5
// GPT2-NEXT:      %[[V:.*]] = weft.restore @gpt2_tiny slot 6
// GPT2-NEXT:      %[[C:.*]] = weft.restore @gpt2_tiny slot 7
// GPT2-NEXT:      %[[LSE:.*]] = weft.restore @gpt2_tiny slot 8 : tensor<?x?x4xf32>
// GPT2-NEXT:      %[[S2:.*]] = weft.restore @gpt2_tiny slot 9
// GPT2-NEXT:      %[[S3:.*]] = weft.restore @gpt2_tiny slot 10
// GPT2-NEXT:      %[[M2:.*]] = weft.restore @gpt2_tiny slot 11
// GPT2-NEXT:      %[[RS2:.*]] = weft.restore @gpt2_tiny slot 12
// GPT2-NEXT:      %[[U:.*]] = weft.restore @gpt2_tiny slot 13
// GPT2-NEXT:      %[[ACT:.*]] = weft.restore @gpt2_tiny slot 14
// GPT2-NEXT:      %[[MLP:.*]]:5 = weft.mlp_grad %[[G]], %[[S3]] up({{.*}}) down({{.*}}) state(%[[U]], %[[ACT]])
// GPT2-NEXT:      %[[LN2G:.*]]:3 = weft.layer_norm_grad %[[MLP]]#0, %[[S2]], %{{.*}}, %{{.*}} state(%[[M2]], %[[RS2]])
// Residual fan-out: the gradient of h sums both uses.
// GPT2-NEXT:      %[[DH:.*]] = arith.addf %[[G]], %[[LN2G]]#0
// GPT2-NEXT:      %[[ATT:.*]]:5 = weft.attention_grad %[[DH]], %[[S1]] qkv({{.*}}) qkv_bias({{.*}}) out({{.*}}) state(%[[Q]], %[[K]], %[[V]], %[[C]], %[[LSE]])
// GPT2-NEXT:      %[[LN1G:.*]]:3 = weft.layer_norm_grad %[[ATT]]#0, %[[S0]], %{{.*}}, %{{.*}} state(%[[M1]], %[[RS1]])
// GPT2-NEXT:      %[[DIN:.*]] = arith.addf %[[DH]], %[[LN1G]]#0
// GPT2-NEXT:      weft.grad_yield %[[DIN]], %[[LN1G]]#1, %[[LN1G]]#2, %[[ATT]]#1,
// GPT2:         %[[EMB:.*]]:2 = weft.embedding_grad %[[DX0]], %[[TOK]], %[[WTE]] positions
// Tied embedding and head: one gradient, the sum of both uses.
// GPT2-NEXT:    %[[TIED:.*]] = arith.addf %[[HEAD]]#1, %[[EMB]]#0 : tensor<256x64xf32>
// GPT2-NEXT:    return %[[TIED]], %[[EMB]]#1, %[[P0]]#0,

// LLAMA-LABEL: func.func @llama_tiny_backward(
// LLAMA-SAME:      -> (tensor<256x64xf32> {weft.grad = "model.embed_tokens.weight"}, tensor<64xf32> {weft.grad = "model.layers.0.input_layernorm.weight"}
// LLAMA-SAME:      tensor<64xf32> {weft.grad = "model.norm.weight"}, tensor<256x64xf32> {weft.grad = "lm_head.weight"})
// LLAMA:         weft.block_grad 0
// LLAMA:           %[[MLP:.*]]:4 = weft.mlp_grad %{{.*}} up(%[[UP:[^)]*]]) gate(%[[GATE:[^)]*]]) down(%[[DOWN:[^)]*]]) state(%[[U:[^,]*]], %[[GS:[^,]*]], %[[ACT:[^)]*]]) {activation = "silu"}
// LLAMA-SAME:        -> (tensor<?x?x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>)
// LLAMA-NEXT:      weft.rms_norm_grad %[[MLP]]#0
// LLAMA:           weft.attention_grad {{.*}} qkv(%{{.*}}, %{{.*}}, %{{.*}}) out(%{{[^)]*}}) state(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_theta = 1.000000e+04 : f64}
// LLAMA-SAME:        tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x64xf32>, tensor<?x?x4xf32>)
// LLAMA-SAME:        -> (tensor<?x?x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>)
// LLAMA-NEXT:      weft.rms_norm_grad
// The gate is the forward's operand 3 but yielded in declaration order.
// LLAMA:           weft.grad_yield {{.*}}, %[[MLP]]#2, %[[MLP]]#1, %[[MLP]]#3 :
// LLAMA:         weft.embedding_grad {{.*}} -> tensor<256x64xf32>
// LLAMA-NOT:     arith.addf {{.*}} : tensor<256x64xf32>
// LLAMA:         return

// In post-LN BERT the block's input is the embedding LayerNorm's output and its
// output is a LayerNorm's; the MLM head is linear + LayerNorm + lm_head with
// a bias, tied to the word embeddings.
// BERT-LABEL: func.func @bert_tiny_backward(
// BERT:         %[[HEAD:.*]]:3 = weft.lm_head_grad {{.*}} -> (tensor<?x?x64xf32>, tensor<256x64xf32>, tensor<256xf32>)
// BERT-NEXT:    %[[TLN:.*]]:3 = weft.layer_norm_grad %[[HEAD]]#0
// BERT-NEXT:    %[[LIN:.*]]:3 = weft.linear_grad %[[TLN]]#0, %{{.*}}, %{{.*}}, %{{.*}} {activation = "gelu"}
// BERT-NEXT:    %[[DX1:.*]], %{{.*}}:16 = weft.block_grad 1(%[[LIN]]#0)
// BERT:           %[[LNO:.*]]:3 = weft.layer_norm_grad %{{.*}}
// BERT-NEXT:      %[[MLP:.*]]:5 = weft.mlp_grad %[[LNO]]#0
// BERT-NEXT:      %[[DN1:.*]] = arith.addf %[[LNO]]#0, %[[MLP]]#0
// BERT-NEXT:      %[[LNA:.*]]:3 = weft.layer_norm_grad %[[DN1]]
// BERT-NEXT:      %[[ATT:.*]]:9 = weft.attention_grad %[[LNA]]#0, {{.*}} {causal = false
// BERT-NEXT:      %[[DIN:.*]] = arith.addf %[[LNA]]#0, %[[ATT]]#0
// BERT:         %[[DX0:.*]], %{{.*}}:16 = weft.block_grad 0(%[[DX1]])
// BERT:         %[[ELN:.*]]:3 = weft.layer_norm_grad %[[DX0]]
// BERT-NEXT:    %[[EMB:.*]]:3 = weft.embedding_grad %[[ELN]]#0, {{.*}} positions({{.*}}) token_types({{.*}})
// BERT-NEXT:    arith.addf %[[HEAD]]#1, %[[EMB]]#0 : tensor<256x64xf32>

// Selective: the norms inside layers are re-run from their saved inputs.
// SEL-LABEL: func.func @gpt2_tiny(
// SEL:         weft.block 0
// SEL-NEXT:    ^bb0(%[[X:.*]]: tensor<?x?x64xf32>):
// SEL-NEXT:      weft.save %[[X]] slot 0
// With selective recompute the attention and MLP keep no state: their grad
// ops recompute it.
// SEL:           = weft.attention {{.*}} -> tensor<?x?x64xf32>{{$}}
// SEL:           %[[H:.*]] = arith.addf %[[X]]
// SEL-NEXT:      weft.save %[[H]] slot 1
// SEL-NOT:       weft.save
// SEL:           weft.yield
// SEL-LABEL: func.func @gpt2_tiny_backward(
// Outside the layers nothing is re-run and the final norm saves its state.
// SEL:         weft.cross_entropy_grad
// SEL-NEXT:    weft.lm_head_grad
// SEL-NEXT:    weft.layer_norm_grad %{{.*}} state(%{{.*}}, %{{.*}})
// SEL:         weft.block_grad 0
// SEL:           %[[SX:.*]] = weft.restore @gpt2_tiny slot 0
// SEL-NEXT:      %[[SH:.*]] = weft.restore @gpt2_tiny slot 1
// The re-run norms hand their row statistics to their grad ops.
// SEL-NEXT:      %[[LN1:[^,]*]], %[[N1:.*]]:2 = weft.layer_norm %[[SX]]
// SEL-NEXT:      %[[LN2:[^,]*]], %[[N2:.*]]:2 = weft.layer_norm %[[SH]]
// SEL-NEXT:      weft.mlp_grad %{{.*}}, %[[LN2]] up
// SEL-NEXT:      weft.layer_norm_grad %{{.*}}, %[[SH]], %{{.*}}, %{{.*}} state(%[[N2]]#0, %[[N2]]#1)
// SEL:           weft.attention_grad %{{.*}}, %[[LN1]] qkv({{.*}}) qkv_bias({{.*}}) out(%{{[^)]*}}) {causal

// Full: each layer saves only its input and re-runs its forward (not the
// last MLP or residual add, whose results no grad op reads).
// FULL-LABEL: func.func @gpt2_tiny(
// FULL:         weft.block 0
// FULL-NEXT:    ^bb0(%[[X:.*]]: tensor<?x?x64xf32>):
// FULL-NEXT:      weft.save %[[X]] slot 0
// FULL-NOT:       weft.save
// FULL:           weft.attention {{.*}} -> (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x4xf32>)
// FULL-NOT:       weft.save
// FULL:           weft.yield
// FULL-LABEL: func.func @gpt2_tiny_backward(
// FULL:         weft.block_grad 0
// FULL:           %[[SX:.*]] = weft.restore @gpt2_tiny slot 0
// The re-run norms and attention hand their state to their grad ops
// (nothing more is saved); the MLP is not re-run and its grad op recomputes
// its state.
// FULL-NEXT:      %[[LN1:[^,]*]], %{{.*}}:2 = weft.layer_norm %[[SX]]
// FULL-NEXT:      %[[ATT:.*]], %[[AS:.*]]:5 = weft.attention %[[LN1]]
// FULL-NEXT:      %[[H:.*]] = arith.addf %[[SX]], %[[ATT]]
// FULL-NEXT:      %[[LN2:[^,]*]], %{{.*}}:2 = weft.layer_norm %[[H]]
// FULL-NEXT:      weft.mlp_grad %{{.*}}, %[[LN2]] up({{.*}}) down(%{{[^)]*}}) {activation
// FULL-NOT:       weft.restore
// FULL:           weft.attention_grad %{{.*}}, %[[LN1]] qkv({{.*}}) out({{.*}}) state(%[[AS]]#0, %[[AS]]#1, %[[AS]]#2, %[[AS]]#3, %[[AS]]#4)
// FULL:           weft.grad_yield

shard.grid @weft_mesh(shape = 1x2x2)

// A middle pipeline stage with Megatron TP: the upstream gradient is an
// argument and the input gradient a result; weft.parallel asks for full
// recompute.
// STAGE-LABEL: func.func @mid_stage(
// STAGE:         weft.block 3
// STAGE-NEXT:    ^bb0(%[[X:.*]]: tensor<?x?x64xf32>):
// STAGE-NEXT:      weft.save %[[X]] slot 0
// STAGE-NOT:       weft.save
// STAGE-LABEL: func.func @mid_stage_backward(
// STAGE-SAME:      %[[IN:[^:]*]]: tensor<?x?x64xf32> {weft.input = "activation"},
// STAGE-SAME:      %[[DOUT:[^:]*]]: tensor<?x?x64xf32> {weft.output_grad})
// STAGE-SAME:      -> (tensor<?x?x64xf32> {weft.input_grad = 0 : i64}, tensor<64xf32> {weft.grad = "h.3.ln.weight"}, tensor<64x128xf32> {weft.grad = "h.3.up.weight"}, tensor<128x64xf32> {weft.grad = "h.3.down.weight"}, tensor<64xf32> {weft.grad = "h.3.down.bias"})
// STAGE:         %[[DIN:.*]], %[[P:.*]]:4 = weft.block_grad 3(%[[DOUT]])
// STAGE-NEXT:    ^bb0(%[[G:.*]]: tensor<?x?x64xf32>):
// STAGE:           %[[S:.*]] = weft.restore @mid_stage slot 0
// STAGE-NEXT:      %[[N:[^,]*]], %[[RSTD:.*]] = weft.rms_norm %[[S]], {{.*}} -> state tensor<?x?xf32>
// STAGE-NEXT:      %[[C:.*]] = weft.tp_copy %[[N]] on @weft_mesh grid_axes = [2]
// STAGE-NOT:       shard.all_reduce %{{.*}} on @weft_mesh grid_axes = [2] : tensor<?x?x64xf32>
// g's adjoint is the identity; bias_add's input gradient too.
// STAGE:           %[[DB:.*]] = weft.bias_grad %[[G]] : (tensor<?x?x64xf32>) -> tensor<64xf32>
// STAGE-NEXT:      %[[MLP:.*]]:3 = weft.mlp_grad %[[G]], %[[C]] up
// f's adjoint all-reduces the partial input gradient.
// STAGE-NEXT:      %[[AR:.*]] = shard.all_reduce %[[MLP]]#0 on @weft_mesh grid_axes = [2]
// STAGE-NEXT:      %[[NG:.*]]:2 = weft.rms_norm_grad %[[AR]], %[[S]], %{{.*}} state(%[[RSTD]])
// STAGE-NEXT:      %[[SUM:.*]] = arith.addf %[[G]], %[[NG]]#0
// STAGE-NEXT:      weft.grad_yield %[[SUM]], %[[NG]]#1, %[[MLP]]#1, %[[MLP]]#2, %[[DB]]
// STAGE:         return %[[DIN]], %[[P]]#0, %[[P]]#1, %[[P]]#2, %[[P]]#3
func.func @mid_stage(%x: tensor<?x?x64xf32> {weft.input = "activation"}) -> tensor<?x?x64xf32>
    attributes {weft.parallel = {tp = 2 : i64, pp = 2 : i64, dp = 1 : i64, micro_batch = 1 : i64, grad_accum = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64, prefetch_depth = 0 : i64, bucket_bytes = 0 : i64, schedule = "1f1b", recompute = "full", sequence_parallel = false, layers_per_stage = array<i64: 3, 1>}} {
  %0 = weft.block 3(%x) : tensor<?x?x64xf32> {
  ^bb0(%h: tensor<?x?x64xf32>):
    %w = weft.param "h.3.ln.weight" init(ones) : tensor<64xf32>
    %n = weft.rms_norm %h, %w {epsilon = 1.0e-05 : f64} : tensor<?x?x64xf32>, tensor<64xf32>
    %c = weft.tp_copy %n on @weft_mesh grid_axes = [2] : tensor<?x?x64xf32>
    %up = weft.param "h.3.up.weight" init(normal, 2.0e-02) : tensor<64x128xf32>
    %down = weft.param "h.3.down.weight" init(normal, 2.0e-02) : tensor<128x64xf32>
    %m = weft.mlp %c up(%up) down(%down) {activation = "relu"} : (tensor<?x?x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>) -> tensor<?x?x64xf32>
    %r = shard.all_reduce %m on @weft_mesh grid_axes = [2] : tensor<?x?x64xf32> -> tensor<?x?x64xf32>
    %b = weft.param "h.3.down.bias" init(zeros) : tensor<64xf32>
    %y = weft.bias_add %r, %b : tensor<?x?x64xf32>, tensor<64xf32>
    %s = arith.addf %h, %y : tensor<?x?x64xf32>
    weft.yield %s : tensor<?x?x64xf32>
  }
  return %0 : tensor<?x?x64xf32>
}

// Sequence parallelism: all-gather and reduce-scatter swap in the backward.
// The first stage has no input gradient (its input is tokens).
// STAGE-LABEL: func.func @sp_stage_backward(
// STAGE-SAME:      %[[TOK:[^:]*]]: tensor<2x8xi32>, %[[DOUT:[^:]*]]: tensor<2x4x64xf32> {weft.output_grad})
// STAGE-SAME:      -> (tensor<16x64xf32> {weft.grad = "wte"}, tensor<64xf32> {weft.grad = "ln.weight"})
// STAGE:         %[[G:.*]] = shard.all_gather %[[DOUT]] on @weft_mesh grid_axes = [2] gather_axis = 1 : tensor<2x4x64xf32> -> tensor<2x8x64xf32>
// STAGE-NEXT:    %[[NG:.*]]:2 = weft.rms_norm_grad %[[G]]
// STAGE-NEXT:    %[[RS:.*]] = shard.reduce_scatter %[[NG]]#0 on @weft_mesh grid_axes = [2] scatter_axis = 1 : tensor<2x8x64xf32> -> tensor<2x4x64xf32>
// STAGE-NEXT:    %[[AG:.*]] = shard.all_gather %[[RS]] on @weft_mesh grid_axes = [2] gather_axis = 1 : tensor<2x4x64xf32> -> tensor<2x8x64xf32>
// STAGE-NEXT:    %[[EMB:.*]] = weft.embedding_grad %[[AG]], %[[TOK]], %{{.*}} : {{.*}} -> tensor<16x64xf32>
// STAGE-NEXT:    return %[[EMB]], %[[NG]]#1
func.func @sp_stage(%tokens: tensor<2x8xi32>) -> tensor<2x4x64xf32> {
  %wte = weft.param "wte" init(normal, 2.0e-02) : tensor<16x64xf32>
  %e = weft.embedding %tokens, %wte : (tensor<2x8xi32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %s = shard.reduce_scatter %e on @weft_mesh grid_axes = [2] scatter_axis = 1 : tensor<2x8x64xf32> -> tensor<2x4x64xf32>
  %g = shard.all_gather %s on @weft_mesh grid_axes = [2] gather_axis = 1 : tensor<2x4x64xf32> -> tensor<2x8x64xf32>
  %w = weft.param "ln.weight" init(ones) : tensor<64xf32>
  %n = weft.rms_norm %g, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>
  %o = shard.reduce_scatter %n on @weft_mesh grid_axes = [2] scatter_axis = 1 : tensor<2x8x64xf32> -> tensor<2x4x64xf32>
  return %o : tensor<2x4x64xf32>
}

// BADMODE: error: 'func.func' op weft-autodiff: unknown recompute mode 'some' (expected none, selective or full)

// The position rows are added to the whole sequence, then each rank keeps its
// slice: the adjoint of all_slice gathers the slices' gradients.
// SP-LABEL: func.func @gpt2_tiny(
// SP:         %[[POS:.*]] = weft.position_embedding
// SP-NEXT:    shard.all_slice %[[POS]] on @weft_mesh grid_axes = [2] slice_axis = 1
// SP-LABEL: func.func @gpt2_tiny_backward(
// SP:         %[[DX0:.*]], %{{.*}}:12 = weft.block_grad 0(
// SP:         %[[G:.*]] = shard.all_gather %[[DX0]] on @weft_mesh grid_axes = [2] gather_axis = 1 : tensor<?x?x64xf32> -> tensor<?x?x64xf32>
// SP-NEXT:    %[[PE:.*]]:2 = weft.position_embedding_grad %[[G]],
// SP-NEXT:    weft.vocab_embedding_grad %[[PE]]#0,
