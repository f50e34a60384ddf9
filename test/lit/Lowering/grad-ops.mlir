// RUN: weft-opt %s | weft-opt | FileCheck %s
// RUN: weft-opt %s --mlir-print-op-generic | weft-opt | FileCheck %s

shard.grid @weft_mesh(shape = 1x1x2)

// CHECK-LABEL: func.func @layers(
func.func @layers(%tokens: tensor<2x8xi32>, %labels: tensor<2x8xi32>,
                  %g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>,
                  %wte: tensor<256x64xf32>, %wpe: tensor<128x64xf32>, %wtt: tensor<2x64xf32>,
                  %gamma: tensor<64xf32>, %beta: tensor<64xf32>,
                  %wq: tensor<64x64xf32>, %wk: tensor<64x32xf32>, %wv: tensor<64x32xf32>,
                  %bq: tensor<64xf32>, %bk: tensor<32xf32>, %bv: tensor<32xf32>,
                  %wo: tensor<64x64xf32>, %up: tensor<64x176xf32>, %gate: tensor<64x176xf32>,
                  %down: tensor<176x64xf32>, %dlogits: tensor<2x8x256xf32>,
                  %logits: tensor<2x8x256xf32>, %hb: tensor<256xf32>, %dloss: tensor<f32>) {
  // CHECK: weft.embedding_grad %{{.*}}, %{{.*}}, %{{.*}} positions(%{{.*}}) token_types(%{{.*}}) {position_offset = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<256x64xf32>, tensor<128x64xf32>, tensor<2x64xf32>) -> (tensor<256x64xf32>, tensor<128x64xf32>, tensor<2x64xf32>)
  %e:3 = weft.embedding_grad %g, %tokens, %wte positions(%wpe) token_types(%wtt) {position_offset = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<256x64xf32>, tensor<128x64xf32>, tensor<2x64xf32>) -> (tensor<256x64xf32>, tensor<128x64xf32>, tensor<2x64xf32>)
  // CHECK: weft.layer_norm_grad %{{.*}} {epsilon = 1.000000e-05 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  %ln:3 = weft.layer_norm_grad %g, %x, %gamma, %beta {epsilon = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  // CHECK: weft.rms_norm_grad
  %rms:2 = weft.rms_norm_grad %g, %x, %gamma {epsilon = 1.0e-06 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}} qkv(%{{.*}}, %{{.*}}, %{{.*}}) qkv_bias(%{{.*}}, %{{.*}}, %{{.*}}) out(%{{.*}}) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_theta = 1.000000e+04 : f64}
  %att:8 = weft.attention_grad %g, %x qkv(%wq, %wk, %wv) qkv_bias(%bq, %bk, %bv) out(%wo) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_theta = 1.0e+04 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x64xf32>)
  // CHECK: weft.mlp_grad %{{.*}}, %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}}, %{{.*}}) {activation = "silu"}
  %mlp:5 = weft.mlp_grad %g, %x up(%up) gate(%gate) down(%down, %gamma) {activation = "silu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>, tensor<64xf32>)
  // CHECK: weft.linear_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {activation = "gelu"}
  %lin:3 = weft.linear_grad %g, %x, %wo, %gamma {activation = "gelu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>)
  // CHECK: weft.lm_head_grad
  %head:3 = weft.lm_head_grad %dlogits, %x, %wte, %hb : (tensor<2x8x256xf32>, tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>)
  // CHECK: weft.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {ignore_index = -100 : i64}
  %ce = weft.cross_entropy_grad %dloss, %logits, %labels {ignore_index = -100 : i64} : (tensor<f32>, tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<2x8x256xf32>
  // CHECK: weft.bias_grad %{{.*}} : (tensor<2x8x64xf32>) -> tensor<64xf32>
  %db = weft.bias_grad %g : (tensor<2x8x64xf32>) -> tensor<64xf32>
  // CHECK: weft.vocab_embedding_grad %{{.*}}, %{{.*}}, %{{.*}} on @weft_mesh grid_axes = [2] {vocab_size = 250 : i64}
  %ve = weft.vocab_embedding_grad %g, %tokens, %wpe on @weft_mesh grid_axes = [2] {vocab_size = 250 : i64} : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  // CHECK: weft.position_embedding_grad %{{.*}}, %{{.*}} positions(%{{.*}})
  %pe:2 = weft.position_embedding_grad %g, %x positions(%wpe) : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<128x64xf32>) -> (tensor<2x8x64xf32>, tensor<128x64xf32>)
  // CHECK: weft.tp_attention_grad %{{.*}}, %{{.*}} qkv(%{{.*}}) out(%{{.*}}) {causal = false, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64}
  %tpa:3 = weft.tp_attention_grad %g, %x qkv(%up) out(%wk) {causal = false, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x32xf32>) -> (tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x32xf32>)
  // CHECK: weft.vocab_parallel_cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} on @weft_mesh grid_axes = [2] {ignore_index = -100 : i64, vocab_size = 500 : i64}
  %vce = weft.vocab_parallel_cross_entropy_grad %dloss, %logits, %labels on @weft_mesh grid_axes = [2] {ignore_index = -100 : i64, vocab_size = 500 : i64} : (tensor<f32>, tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<2x8x256xf32>
  return
}

// Op state: the forward's trailing state results feed the grad op's state
// operands (docs/autodiff.md, "Op state").
// CHECK-LABEL: func.func @op_state(
func.func @op_state(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>,
                    %wq: tensor<64x64xf32>, %wk: tensor<64x32xf32>, %wv: tensor<64x32xf32>,
                    %wo: tensor<64x64xf32>, %up: tensor<64x176xf32>, %gate: tensor<64x176xf32>,
                    %down: tensor<176x64xf32>, %fused: tensor<64x96xf32>,
                    %wot: tensor<32x64xf32>, %gamma: tensor<64xf32>) {
  // CHECK: %{{.*}}, %[[A:.*]]:5 = weft.attention %{{.*}} qkv(%{{.*}}, %{{.*}}, %{{.*}}) out(%{{.*}}) {{.*}} -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x8x4xf32>)
  %a:6 = weft.attention %x qkv(%wq, %wk, %wv) out(%wo) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x8x4xf32>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}} qkv(%{{.*}}, %{{.*}}, %{{.*}}) out(%{{.*}}) state(%[[A]]#0, %[[A]]#1, %[[A]]#2, %[[A]]#3, %[[A]]#4) {causal = true
  %da:5 = weft.attention_grad %g, %x qkv(%wq, %wk, %wv) out(%wo) state(%a#1, %a#2, %a#3, %a#4, %a#5) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x8x4xf32>) -> (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>)
  // CHECK: %{{.*}}, %[[M:.*]]:3 = weft.mlp %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}}) {activation = "silu"}
  %m:4 = weft.mlp %x up(%up) gate(%gate) down(%down) {activation = "silu"} : (tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x176xf32>, tensor<2x8x176xf32>, tensor<2x8x176xf32>)
  // CHECK: weft.mlp_grad %{{.*}}, %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}}) state(%[[M]]#0, %[[M]]#1, %[[M]]#2) {activation = "silu"}
  %dm:4 = weft.mlp_grad %g, %x up(%up) gate(%gate) down(%down) state(%m#1, %m#2, %m#3) {activation = "silu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>, tensor<2x8x176xf32>, tensor<2x8x176xf32>, tensor<2x8x176xf32>) -> (tensor<2x8x64xf32>, tensor<64x176xf32>, tensor<64x176xf32>, tensor<176x64xf32>)
  // CHECK: %{{.*}}, %[[N:.*]]:2 = weft.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> state tensor<2x8xf32>, tensor<2x8xf32>
  %n:3 = weft.layer_norm %x, %gamma, %gamma {epsilon = 1.0e-05 : f64} : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> state tensor<2x8xf32>, tensor<2x8xf32>
  // CHECK: weft.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} state(%[[N]]#0, %[[N]]#1)
  %dn:3 = weft.layer_norm_grad %g, %x, %gamma, %gamma state(%n#1, %n#2) {epsilon = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  // CHECK: %{{.*}}, %[[R:.*]] = weft.rms_norm %{{.*}}, %{{.*}} {epsilon = {{.*}} : f64} : tensor<2x8x64xf32>, tensor<64xf32> -> state tensor<2x8xf32>
  %r:2 = weft.rms_norm %x, %gamma {epsilon = 1.0e-06 : f64} : tensor<2x8x64xf32>, tensor<64xf32> -> state tensor<2x8xf32>
  // CHECK: weft.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} state(%[[R]])
  %dr:2 = weft.rms_norm_grad %g, %x, %gamma state(%r#1) {epsilon = 1.0e-06 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  // TP: this rank's 2 heads of 16, fused [q|k|v].
  // CHECK: %{{.*}}, %[[T:.*]]:5 = weft.tp_attention %{{.*}} qkv(%{{.*}}) out(%{{.*}})
  %t:6 = weft.tp_attention %x qkv(%fused) out(%wot) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x2xf32>)
  // CHECK: weft.tp_attention_grad %{{.*}}, %{{.*}} qkv(%{{.*}}) out(%{{.*}}) state(%[[T]]#0, %[[T]]#1, %[[T]]#2, %[[T]]#3, %[[T]]#4)
  %dt:3 = weft.tp_attention_grad %g, %x qkv(%fused) out(%wot) state(%t#1, %t#2, %t#3, %t#4, %t#5) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x2xf32>) -> (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>)
  return
}

// CHECK-LABEL: func.func @structure(
func.func @structure(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  // CHECK: weft.save %{{.*}} slot 0 : tensor<?x?x64xf32>
  weft.save %x slot 0 : tensor<?x?x64xf32>
  return %x : tensor<?x?x64xf32>
}

// CHECK-LABEL: func.func @structure_backward(
func.func @structure_backward(%g: tensor<?x?x64xf32>) -> (tensor<?x?x64xf32>, tensor<64xf32>) {
  // CHECK: %[[DX:.*]], %[[DW:.*]] = weft.block_grad 5(%{{.*}}) : tensor<?x?x64xf32> -> tensor<?x?x64xf32>, tensor<64xf32> attributes {params = ["h.5.ln.weight"]} {
  // CHECK-NEXT: ^bb0(%[[G:.*]]: tensor<?x?x64xf32>):
  // CHECK-NEXT:   %[[W:.*]] = weft.param "h.5.ln.weight" init(ones) : tensor<64xf32>
  // CHECK-NEXT:   %[[X:.*]] = weft.restore @structure slot 0 : tensor<?x?x64xf32>
  // CHECK-NEXT:   %[[N:.*]]:2 = weft.rms_norm_grad %[[G]], %[[X]], %[[W]]
  // CHECK-NEXT:   weft.grad_yield %[[N]]#0, %[[N]]#1 : tensor<?x?x64xf32>, tensor<64xf32>
  %dx, %dw = weft.block_grad 5(%g) : tensor<?x?x64xf32> -> tensor<?x?x64xf32>, tensor<64xf32> attributes {params = ["h.5.ln.weight"]} {
  ^bb0(%a: tensor<?x?x64xf32>):
    %w = weft.param "h.5.ln.weight" init(ones) : tensor<64xf32>
    %s = weft.restore @structure slot 0 : tensor<?x?x64xf32>
    %n:2 = weft.rms_norm_grad %a, %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<64xf32>) -> (tensor<?x?x64xf32>, tensor<64xf32>)
    weft.grad_yield %n#0, %n#1 : tensor<?x?x64xf32>, tensor<64xf32>
  }
  return %dx, %dw : tensor<?x?x64xf32>, tensor<64xf32>
}
