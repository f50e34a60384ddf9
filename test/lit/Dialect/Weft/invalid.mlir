// RUN: weft-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the weft dialect.

func.func @f() {
  // expected-error @+1 {{parameter name must not be empty}}
  %w = weft.param "" init(zeros) : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{must have a float element type}}
  %w = weft.param "w" init(zeros) : tensor<4xi32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{with normal init needs a positive standard deviation}}
  %w = weft.param "w" init(normal) : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{with normal init needs a positive standard deviation}}
  %w = weft.param "w" init(normal, -1.0) : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{with zeros init takes no standard deviation}}
  %w = weft.param "w" init(zeros, 1.0) : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{hf_transposed needs a matrix}}
  %w = weft.param "w" init(zeros) {hf_transposed} : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{must be statically shaped tensor}}
  %w = weft.param "w" init(zeros) : tensor<?xf32>
  return
}

// -----

func.func @f(%t: tensor<?xi32>, %w: tensor<32x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{tokens must be [batch, seq]}}
  %x = weft.embedding %t, %w : (tensor<?xi32>, tensor<32x8xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{table must be [vocab, hidden]}}
  %x = weft.embedding %t, %w : (tensor<?x?xi32>, tensor<32xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32x8xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{result type 'tensor<?x?x4xf32>' should be 'tensor<?x?x8xf32>'}}
  %x = weft.embedding %t, %w : (tensor<?x?xi32>, tensor<32x8xf32>) -> tensor<?x?x4xf32>
  return %x : tensor<?x?x4xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32x8xf32>, %p: tensor<16x4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{position table must be [rows, 8] like the token table}}
  %x = weft.embedding %t, %w positions(%p) : (tensor<?x?xi32>, tensor<32x8xf32>, tensor<16x4xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32x8xf32>, %p: tensor<2x4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{token-type table must be [rows, 8] like the token table}}
  %x = weft.embedding %t, %w token_types(%p) : (tensor<?x?xi32>, tensor<32x8xf32>, tensor<2x4xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32x8xf32>, %p: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{position_offset must not be negative}}
  %x = weft.embedding %t, %w positions(%p) {position_offset = -1 : i64} : (tensor<?x?xi32>, tensor<32x8xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%t: tensor<?x?xi32>, %w: tensor<32x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{position_offset needs a position table}}
  %x = weft.embedding %t, %w {position_offset = 2 : i64} : (tensor<?x?xi32>, tensor<32x8xf32>) -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{input must be a [batch, seq, hidden] float tensor with a static hidden size}}
  %y = weft.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f64} : tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{weight has shape 4, expected 8}}
  %y = weft.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f64} : tensor<?x?x8xf32>, tensor<4xf32>, tensor<8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>, %b: tensor<9xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{bias has shape 9, expected 8}}
  %y = weft.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f64} : tensor<?x?x8xf32>, tensor<8xf32>, tensor<9xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{epsilon must be positive, got 0}}
  %y = weft.layer_norm %x, %g, %b {epsilon = 0.0 : f64} : tensor<?x?x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %g: tensor<7xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{weight has shape 7, expected 8}}
  %y = weft.rms_norm %x, %g {epsilon = 1.0e-5 : f64} : tensor<?x?x8xf32>, tensor<7xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{epsilon must be positive}}
  %y = weft.rms_norm %x, %g {epsilon = -1.0 : f64} : tensor<?x?x8xf32>, tensor<8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{num_heads and num_kv_heads must be positive, got 0 and 4}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 0 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{hidden size 8 is not divisible by num_heads 3}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 3 : i64, num_kv_heads = 3 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{num_heads 4 is not divisible by num_kv_heads 3}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 3 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{head_dim 4 does not equal hidden size / num_heads = 2}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 4 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{rope_theta must be positive}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, rope_theta = 0.0 : f64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x8xf32>, %q1: tensor<8x16xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{expects 1 fused or 3 separate query/key/value weights, got 2}}
  %y = weft.attention %x qkv(%q0, %q1) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x20xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{fused qkv weight has shape 8x20, expected 8x24}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x20xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x8xf32>, %q1: tensor<8x8xf32>, %q2: tensor<8x4xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{key weight has shape 8x8, expected 8x4}}
  %y = weft.attention %x qkv(%q0, %q1, %q2) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x8xf32>, %q1: tensor<8x8xf32>, %q2: tensor<8x8xf32>, %b0: tensor<8xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{has 1 query/key/value biases for 3 weights}}
  %y = weft.attention %x qkv(%q0, %q1, %q2) qkv_bias(%b0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %b0: tensor<8xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{fused qkv bias has shape 8, expected 24}}
  %y = weft.attention %x qkv(%q0) qkv_bias(%b0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{output weight has shape 8x4, expected 8x8}}
  %y = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x4xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>, %ob: tensor<4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{output bias has shape 4, expected 8}}
  %y = weft.attention %x qkv(%q0) out(%o, %ob) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>, tensor<4xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %d: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{unknown activation 'swish' (expected gelu, gelu_tanh, relu or silu)}}
  %y = weft.mlp %x up(%u) down(%d) {activation = "swish"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<4x16xf32>, %d: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{up weight must be [8, ffn], got 'tensor<4x16xf32>'}}
  %y = weft.mlp %x up(%u) down(%d) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %g: tensor<8x12xf32>, %d: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{gate weight has shape 8x12, expected 8x16}}
  %y = weft.mlp %x up(%u) gate(%g) down(%d) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<8x12xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %ub: tensor<8xf32>, %d: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{up bias has shape 8, expected 16}}
  %y = weft.mlp %x up(%u, %ub) down(%d) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<8xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %d: tensor<16x4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{down weight has shape 16x4, expected 16x8}}
  %y = weft.mlp %x up(%u) down(%d) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %d: tensor<16x8xf32>, %db: tensor<16xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{down bias has shape 16, expected 8}}
  %y = weft.mlp %x up(%u) down(%d, %db) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x?xf32>, %w: tensor<8x4xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{input must be a [batch, seq, hidden] float tensor}}
  %y = weft.linear %x, %w {activation = "gelu"} : (tensor<?x?x?xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  return %y : tensor<?x?x4xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<8x4xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{unknown activation 'tanh'}}
  %y = weft.linear %x, %w {activation = "tanh"} : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x4xf32>
  return %y : tensor<?x?x4xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<4x4xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{weight must be [8, out], got 'tensor<4x4xf32>'}}
  %y = weft.linear %x, %w {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<4x4xf32>) -> tensor<?x?x4xf32>
  return %y : tensor<?x?x4xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{bias has shape 8, expected 4}}
  %y = weft.linear %x, %w, %b {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<?x?x4xf32>
  return %y : tensor<?x?x4xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<8x4xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{result type 'tensor<?x?x8xf32>' should be 'tensor<?x?x4xf32>'}}
  %y = weft.linear %x, %w {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x4xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<8x32xf32>) -> tensor<?x?x32xf32> {
  // expected-error @+1 {{weight must be [vocab, 8], got 'tensor<8x32xf32>'}}
  %y = weft.lm_head %x, %w : (tensor<?x?x8xf32>, tensor<8x32xf32>) -> tensor<?x?x32xf32>
  return %y : tensor<?x?x32xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<32x8xf32>, %b: tensor<16xf32>) -> tensor<?x?x32xf32> {
  // expected-error @+1 {{bias has shape 16, expected 32}}
  %y = weft.lm_head %x, %w, %b : (tensor<?x?x8xf32>, tensor<32x8xf32>, tensor<16xf32>) -> tensor<?x?x32xf32>
  return %y : tensor<?x?x32xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<32x8xf32>) -> tensor<?x?x16xf32> {
  // expected-error @+1 {{result type 'tensor<?x?x16xf32>' should be 'tensor<?x?x32xf32>'}}
  %y = weft.lm_head %x, %w : (tensor<?x?x8xf32>, tensor<32x8xf32>) -> tensor<?x?x16xf32>
  return %y : tensor<?x?x16xf32>
}

// -----

func.func @f(%l: tensor<?x32xf32>, %y: tensor<?x?xi32>) -> tensor<f32> {
  // expected-error @+1 {{logits must be [batch, seq, vocab]}}
  %loss = weft.cross_entropy %l, %y : (tensor<?x32xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @f(%l: tensor<2x4x32xf32>, %y: tensor<2x5xi32>) -> tensor<f32> {
  // expected-error @+1 {{labels 'tensor<2x5xi32>' must match the logits' [batch, seq] 2x4}}
  %loss = weft.cross_entropy %l, %y : (tensor<2x4x32xf32>, tensor<2x5xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{layer index must not be negative}}
  %y = weft.block -1(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    weft.yield %in : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must take one argument of the input type}}
  %y = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>, %extra: tensor<?x?x8xf32>):
    weft.yield %in : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %z: tensor<?x?x4xf32>) -> tensor<?x?x8xf32> {
  %y = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    %c = arith.constant dense<0.0> : tensor<2x2x4xf32>
    // expected-error @+1 {{yields 'tensor<2x2x4xf32>' but the block produces 'tensor<?x?x8xf32>'}}
    weft.yield %c : tensor<2x2x4xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %y = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    // expected-error @+1 {{using value defined outside the region}}
    weft.yield %x : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// expected-error @+1 {{'weft.model' must be attached to a func.func}}
module attributes {weft.model = "gpt2"} {
}

// -----

// expected-error @+1 {{'weft.model' must name a model family (gpt2, llama, mistral, bert, roberta), got "gptj"}}
func.func @f() -> tensor<f32> attributes {weft.model = "gptj"} {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{a weft model must have a body}}
func.func private @f() -> tensor<f32> attributes {weft.model = "gpt2"}

// -----

// expected-error @+1 {{a weft model must return one scalar loss tensor}}
func.func @f() -> tensor<4xf32> attributes {weft.model = "gpt2"} {
  %c = arith.constant dense<0.0> : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @f() -> tensor<f32> attributes {weft.model = "gpt2"} {
  // expected-note @+1 {{first declared here}}
  %a = weft.param "w" init(zeros) : tensor<4xf32>
  // expected-error @+1 {{parameter name 'w' is used twice}}
  %b = weft.param "w" init(ones) : tensor<4xf32>
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>) -> tensor<f32> attributes {weft.model = "gpt2"} {
  %y = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    weft.yield %in : tensor<?x?x8xf32>
  }
  // expected-error @+1 {{has layer index 2, expected 1 (blocks are numbered in program order)}}
  %z = weft.block 2(%y) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    weft.yield %in : tensor<?x?x8xf32>
  }
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// -----

// expected-error @+1 {{unknown weft attribute 'weft.bogus'}}
func.func @f() attributes {weft.bogus = 1 : i64} {
  return
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %q0: tensor<8x24xf32>, %o: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{state results must be (q, k, v, context, lse) of types ('tensor<?x?x8xf32>', 'tensor<?x?x8xf32>', 'tensor<?x?x8xf32>', 'tensor<?x?x8xf32>', 'tensor<?x?x4xf32>'), got ('tensor<?x?x8xf32>')}}
  %y:2 = weft.attention %x qkv(%q0) out(%o) {causal = true, head_dim = 2 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<?x?x8xf32>, tensor<8x24xf32>, tensor<8x8xf32>) -> (tensor<?x?x8xf32>, tensor<?x?x8xf32>)
  return %y#0 : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %u: tensor<8x16xf32>, %d: tensor<16x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{state results must be (up, act) of types ('tensor<?x?x16xf32>', 'tensor<?x?x16xf32>'), got ('tensor<?x?x16xf32>', 'tensor<?x?x8xf32>')}}
  %y:3 = weft.mlp %x up(%u) down(%d) {activation = "gelu"} : (tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> (tensor<?x?x8xf32>, tensor<?x?x16xf32>, tensor<?x?x8xf32>)
  return %y#0 : tensor<?x?x8xf32>
}

// -----

func.func @f(%x: tensor<?x?x8xf32>, %w: tensor<8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{state results must be (rstd) of types ('tensor<?x?xf32>'), got ('tensor<?x?xbf16>')}}
  %y:2 = weft.rms_norm %x, %w {epsilon = 1.0e-06 : f64} : tensor<?x?x8xf32>, tensor<8xf32> -> state tensor<?x?xbf16>
  return %y#0 : tensor<?x?x8xf32>
}
