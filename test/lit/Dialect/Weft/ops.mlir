// RUN: weft-opt %s | FileCheck %s
// Round trip: the printed form parses back to the same text.
// RUN: weft-opt %s | weft-opt | FileCheck %s
// RUN: weft-opt %s -mlir-print-op-generic | weft-opt | FileCheck %s

// CHECK-LABEL: func.func @every_op
// CHECK-SAME: attributes {weft.model = "llama"}
func.func @every_op(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> attributes {weft.model = "llama"} {
  // CHECK: %[[WTE:.*]] = weft.param "wte" init(normal, 2.000000e-02) : tensor<32x8xf32>
  %wte = weft.param "wte" init(normal, 2.000000e-02) : tensor<32x8xf32>
  // CHECK: weft.param "wpe" init(normal, 1.000000e-02) {hf_name = "transformer.wpe.weight"} : tensor<16x8xf32>
  %wpe = weft.param "wpe" init(normal, 1.000000e-02) {hf_name = "transformer.wpe.weight"} : tensor<16x8xf32>
  %wtt = weft.param "wtt" init(zeros) : tensor<2x8xf32>
  // CHECK: %[[X:.*]] = weft.embedding %{{.*}}, %[[WTE]] positions(%{{.*}}) token_types(%{{.*}}) {position_offset = 2 : i64}
  %x = weft.embedding %tokens, %wte positions(%wpe) token_types(%wtt) {position_offset = 2 : i64} : (tensor<?x?xi32>, tensor<32x8xf32>, tensor<16x8xf32>, tensor<2x8xf32>) -> tensor<?x?x8xf32>
  // CHECK: %[[B0:.*]] = weft.block 0(%[[X]]) : tensor<?x?x8xf32> {
  %h = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    %g = weft.param "l0.norm" init(ones) : tensor<8xf32>
    // CHECK: weft.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64}
    %n = weft.rms_norm %in, %g {epsilon = 1.0e-6 : f64} : tensor<?x?x8xf32>, tensor<8xf32>
    %wq = weft.param "l0.q" init(normal, 2.000000e-02) {hf_transposed} : tensor<8x8xf32>
    %wk = weft.param "l0.k" init(normal, 2.000000e-02) {hf_transposed} : tensor<8x4xf32>
    %wv = weft.param "l0.v" init(normal, 2.000000e-02) {hf_transposed} : tensor<8x4xf32>
    %wo = weft.param "l0.o" init(normal, 2.000000e-02) {hf_transposed} : tensor<8x8xf32>
    // CHECK: weft.attention %{{.*}} qkv(%{{.*}}, %{{.*}}, %{{.*}}) out(%{{.*}}) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_theta = 1.000000e+04 : f64}
    %a = weft.attention %n qkv(%wq, %wk, %wv) out(%wo) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, rope_theta = 1.0e4 : f64} : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
    %r = arith.addf %in, %a : tensor<?x?x8xf32>
    %up = weft.param "l0.up" init(normal, 2.000000e-02) : tensor<8x12xf32>
    %gate = weft.param "l0.gate" init(normal, 2.000000e-02) : tensor<8x12xf32>
    %down = weft.param "l0.down" init(normal, 2.000000e-02) : tensor<12x8xf32>
    // CHECK: weft.mlp %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}}) {activation = "silu"}
    %m = weft.mlp %r up(%up) gate(%gate) down(%down) {activation = "silu"} : (tensor<?x?x8xf32>, tensor<8x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<?x?x8xf32>
    %out = arith.addf %r, %m : tensor<?x?x8xf32>
    // CHECK: weft.yield %{{.*}} : tensor<?x?x8xf32>
    weft.yield %out : tensor<?x?x8xf32>
  }
  %lg = weft.param "ln.w" init(ones) : tensor<8xf32>
  %lb = weft.param "ln.b" init(zeros) : tensor<8xf32>
  // CHECK: weft.layer_norm %[[B0]], %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64}
  %f = weft.layer_norm %h, %lg, %lb {epsilon = 1.0e-5 : f64} : tensor<?x?x8xf32>, tensor<8xf32>, tensor<8xf32>
  %tw = weft.param "t.w" init(normal, 2.000000e-02) : tensor<8x8xf32>
  %tb = weft.param "t.b" init(zeros) : tensor<8xf32>
  // CHECK: weft.linear %{{.*}}, %{{.*}}, %{{.*}} {activation = "gelu"}
  %t = weft.linear %f, %tw, %tb {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
  %hb = weft.param "head.b" init(zeros) : tensor<32xf32>
  // CHECK: %[[LOGITS:.*]] = weft.lm_head %{{.*}}, %[[WTE]], %{{.*}} : (tensor<?x?x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
  %logits = weft.lm_head %t, %wte, %hb : (tensor<?x?x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
  // CHECK: weft.cross_entropy %[[LOGITS]], %{{.*}} {ignore_index = -100 : i64}
  %loss = weft.cross_entropy %logits, %labels {ignore_index = -100 : i64} : (tensor<?x?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// GPT-2 style: fused QKV with biases, biased MLP, static batch and sequence.
// CHECK-LABEL: func.func @fused_qkv
func.func @fused_qkv(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = weft.param "qkv" init(normal, 2.000000e-02) : tensor<8x24xf32>
  %b = weft.param "qkv.b" init(zeros) : tensor<24xf32>
  %o = weft.param "o" init(normal, 2.000000e-02) : tensor<8x8xf32>
  %ob = weft.param "o.b" init(zeros) : tensor<8xf32>
  // CHECK: weft.attention %{{.*}} qkv(%{{.*}}) qkv_bias(%{{.*}}) out(%{{.*}}, %{{.*}}) {causal = false
  %a = weft.attention %x qkv(%w) qkv_bias(%b) out(%o, %ob) {causal = false, head_dim = 4 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %u = weft.param "u" init(normal, 2.000000e-02) : tensor<8x32xf32>
  %ub = weft.param "u.b" init(zeros) : tensor<32xf32>
  %d = weft.param "d" init(normal, 2.000000e-02) : tensor<32x8xf32>
  %db = weft.param "d.b" init(zeros) : tensor<8xf32>
  // CHECK: weft.mlp %{{.*}} up(%{{.*}}, %{{.*}}) down(%{{.*}}, %{{.*}}) {activation = "gelu_tanh"}
  %m = weft.mlp %a up(%u, %ub) down(%d, %db) {activation = "gelu_tanh"} : (tensor<2x4x8xf32>, tensor<8x32xf32>, tensor<32xf32>, tensor<32x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %m : tensor<2x4x8xf32>
}
