// RUN: weft-opt %s -split-input-file -verify-diagnostics

func.func @embedding_upstream(%g: tensor<2x8x32xf32>, %t: tensor<2x8xi32>, %w: tensor<256x64xf32>) {
  // expected-error @+1 {{'weft.embedding_grad' op upstream gradient has type 'tensor<2x8x32xf32>', expected 'tensor<2x8x64xf32>' (the forward result's type)}}
  %0 = weft.embedding_grad %g, %t, %w : (tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<256x64xf32>) -> tensor<256x64xf32>
  return
}

// -----

func.func @embedding_count(%g: tensor<2x8x64xf32>, %t: tensor<2x8xi32>, %w: tensor<256x64xf32>, %p: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.embedding_grad' op expects 2 gradients (one per floating-point operand), got 1}}
  %0 = weft.embedding_grad %g, %t, %w positions(%p) : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<256x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
  return
}

// -----

func.func @layer_norm_type(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'weft.layer_norm_grad' op gradient #2 has type 'tensor<32xf32>', expected 'tensor<64xf32>' like its operand}}
  %0:3 = weft.layer_norm_grad %g, %x, %w, %w {epsilon = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<32xf32>)
  return
}

// -----

func.func @layer_norm_epsilon(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'weft.layer_norm_grad' op epsilon must be positive, got 0}}
  %0:3 = weft.layer_norm_grad %g, %x, %w, %w {epsilon = 0.0 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @rms_norm_input(%g: tensor<512x64xf32>, %x: tensor<512x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'weft.rms_norm_grad' op input must be a [batch, seq, hidden] float tensor, got 'tensor<512x64xf32>'}}
  %0:2 = weft.rms_norm_grad %g, %x, %w {epsilon = 1.0e-05 : f64} : (tensor<512x64xf32>, tensor<512x64xf32>, tensor<64xf32>) -> (tensor<512x64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @attention_heads(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x192xf32>, %o: tensor<64x64xf32>) {
  // expected-error @+1 {{'weft.attention_grad' op num_heads 4 must be a positive multiple of num_kv_heads 3}}
  %0:3 = weft.attention_grad %g, %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 3 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>)
  return
}

// -----

func.func @attention_weights(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x64xf32>, %o: tensor<64x64xf32>) {
  // expected-error @+1 {{'weft.attention_grad' op expects 1 fused or 3 separate query/key/value weights, got 2}}
  %0:4 = weft.attention_grad %g, %x qkv(%w, %w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
  return
}

// -----

func.func @attention_upstream(%g: tensor<2x8x32xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x192xf32>, %o: tensor<64x64xf32>) {
  // expected-error @+1 {{'weft.attention_grad' op upstream gradient has type 'tensor<2x8x32xf32>', expected 'tensor<2x8x64xf32>' (the forward result's type)}}
  %0:3 = weft.attention_grad %g, %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>)
  return
}

// -----

func.func @mlp_activation(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %u: tensor<64x256xf32>, %d: tensor<256x64xf32>) {
  // expected-error @+1 {{'weft.mlp_grad' op unknown activation 'tanh' (expected gelu, gelu_tanh, relu or silu)}}
  %0:3 = weft.mlp_grad %g, %x up(%u) down(%d) {activation = "tanh"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<256x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<256x64xf32>)
  return
}

// -----

func.func @linear_upstream(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x32xf32>) {
  // expected-error @+1 {{'weft.linear_grad' op upstream gradient has type 'tensor<2x8x64xf32>', expected 'tensor<2x8x32xf32>' (the forward result's type)}}
  %0:2 = weft.linear_grad %g, %x, %w : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x32xf32>) -> (tensor<2x8x64xf32>, tensor<64x32xf32>)
  return
}

// -----

func.func @lm_head_weight(%g: tensor<2x8x256xf32>, %x: tensor<2x8x64xf32>, %w: tensor<16384xf32>) {
  // expected-error @+1 {{'weft.lm_head_grad' op weight must be a matrix, got 'tensor<16384xf32>'}}
  %0:2 = weft.lm_head_grad %g, %x, %w : (tensor<2x8x256xf32>, tensor<2x8x64xf32>, tensor<16384xf32>) -> (tensor<2x8x64xf32>, tensor<16384xf32>)
  return
}

// -----

func.func @cross_entropy_labels(%g: tensor<f32>, %l: tensor<2x8x256xf32>, %y: tensor<2x4xi32>) {
  // expected-error @+1 {{'weft.cross_entropy_grad' op labels 'tensor<2x4xi32>' must match the logits' [batch, seq]}}
  %0 = weft.cross_entropy_grad %g, %l, %y : (tensor<f32>, tensor<2x8x256xf32>, tensor<2x4xi32>) -> tensor<2x8x256xf32>
  return
}

// -----

func.func @bias_width(%g: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.bias_grad' op result 'tensor<32xf32>' must be a vector as wide as the last dimension of 'tensor<2x8x64xf32>'}}
  %0 = weft.bias_grad %g : (tensor<2x8x64xf32>) -> tensor<32xf32>
  return
}

// -----

func.func @tp_attention_size(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention_grad' op tp_size must be positive, got 0}}
  %0:3 = weft.tp_attention_grad %g, %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 0 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>)
  return
}

// -----

func.func @vocab_parallel_logits(%g: tensor<f32>, %l: tensor<16x128xf32>, %y: tensor<16xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy_grad' op logits must be a [batch, seq, vocab shard] float tensor, got 'tensor<16x128xf32>'}}
  %0 = weft.vocab_parallel_cross_entropy_grad %g, %l, %y on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<f32>, tensor<16x128xf32>, tensor<16xi32>) -> tensor<16x128xf32>
  return
}

// -----

func.func @block_grad_names(%g: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.block_grad' op names 0 parameters for 1 parameter gradients}}
  %0:2 = weft.block_grad 0(%g) : tensor<2x8x64xf32> -> tensor<2x8x64xf32>, tensor<64xf32> attributes {params = []} {
  ^bb0(%a: tensor<2x8x64xf32>):
    %w = weft.param "w" init(ones) : tensor<64xf32>
    weft.grad_yield %a, %w : tensor<2x8x64xf32>, tensor<64xf32>
  }
  return
}

// -----

func.func @block_grad_duplicate(%g: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.block_grad' op parameter names must be unique and non-empty, got 'w' twice or empty}}
  %0:3 = weft.block_grad 0(%g) : tensor<2x8x64xf32> -> tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> attributes {params = ["w", "w"]} {
  ^bb0(%a: tensor<2x8x64xf32>):
    %w = weft.param "w" init(ones) : tensor<64xf32>
    weft.grad_yield %a, %w, %w : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>
  }
  return
}

// -----

func.func @block_grad_input(%g: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.block_grad' op input gradient has type 'tensor<2x8x32xf32>', expected the upstream gradient's type 'tensor<2x8x64xf32>'}}
  %0 = weft.block_grad 0(%g) : tensor<2x8x64xf32> -> tensor<2x8x32xf32> attributes {params = []} {
  ^bb0(%a: tensor<2x8x64xf32>):
    %z = arith.constant dense<0.0> : tensor<2x8x32xf32>
    weft.grad_yield %z : tensor<2x8x32xf32>
  }
  return
}

// -----

func.func @block_grad_layer(%g: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.block_grad' op layer index must not be negative}}
  %0 = weft.block_grad -1(%g) : tensor<2x8x64xf32> -> tensor<2x8x64xf32> attributes {params = []} {
  ^bb0(%a: tensor<2x8x64xf32>):
    weft.grad_yield %a : tensor<2x8x64xf32>
  }
  return
}

// -----

func.func @block_grad_yield(%g: tensor<2x8x64xf32>) {
  %0:2 = weft.block_grad 0(%g) : tensor<2x8x64xf32> -> tensor<2x8x64xf32>, tensor<64xf32> attributes {params = ["w"]} {
  ^bb0(%a: tensor<2x8x64xf32>):
    // expected-error @+1 {{'weft.grad_yield' op yields 'tensor<2x8x64xf32>' but the layer's backward produces 'tensor<2x8x64xf32>', 'tensor<64xf32>'}}
    weft.grad_yield %a : tensor<2x8x64xf32>
  }
  return
}

// -----

func.func @save_slot(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.save' op slot must not be negative, got -1}}
  weft.save %x slot -1 : tensor<2x8x64xf32>
  return
}

// -----

func.func @restore_slot() {
  // expected-error @+1 {{'weft.restore' op slot must not be negative, got -2}}
  %0 = weft.restore @f slot -2 : tensor<2x8x64xf32>
  return
}

// -----

func.func @attention_state_types(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64x192xf32>, %wo: tensor<64x64xf32>, %q: tensor<2x8x64xf32>, %lse: tensor<2x8x4xbf16>) {
  // expected-error @+1 {{'weft.attention_grad' op state operands must be (q, k, v, context, lse) of types ('tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x4xf32>'), got ('tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x64xf32>', 'tensor<2x8x4xbf16>')}}
  %0:3 = weft.attention_grad %g, %x qkv(%w) out(%wo) state(%q, %q, %q, %q, %lse) {causal = true, head_dim = 16 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x4xbf16>) -> (tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<64x64xf32>)
  return
}

// -----

func.func @mlp_state_count(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %up: tensor<64x256xf32>, %down: tensor<256x64xf32>, %h: tensor<2x8x256xf32>) {
  // expected-error @+1 {{'weft.mlp_grad' op state operands must be (up, act) of types ('tensor<2x8x256xf32>', 'tensor<2x8x256xf32>'), got ('tensor<2x8x256xf32>')}}
  %0:3 = weft.mlp_grad %g, %x up(%up) down(%down) state(%h) {activation = "gelu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<256x64xf32>, tensor<2x8x256xf32>) -> (tensor<2x8x64xf32>, tensor<64x256xf32>, tensor<256x64xf32>)
  return
}

// -----

func.func @layer_norm_state(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %m: tensor<2x8xf32>) {
  // expected-error @+1 {{'weft.layer_norm_grad' op state operands must be (mean, rstd) of types ('tensor<2x8xf32>', 'tensor<2x8xf32>'), got ('tensor<2x8xf32>')}}
  %0:3 = weft.layer_norm_grad %g, %x, %w, %w state(%m) {epsilon = 1.0e-05 : f64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<2x8xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @mlp_up_rank(%g: tensor<2x8x64xf32>, %x: tensor<2x8x64xf32>, %u: tensor<64xf32>, %d: tensor<256x64xf32>) {
  // expected-error @+1 {{'weft.mlp_grad' op up weight must be a matrix, got 'tensor<64xf32>'}}
  %0:3 = weft.mlp_grad %g, %x up(%u) down(%d) {activation = "gelu"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<256x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<256x64xf32>)
  return
}
