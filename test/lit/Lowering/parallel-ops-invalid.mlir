// Verifiers of the tensor-parallel ops (WeftParallelOps.td).
// RUN: weft-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// The group: grid and grid_axes (weft.tp_copy, weft.vocab_embedding,
// weft.vocab_parallel_cross_entropy)
//===----------------------------------------------------------------------===//

func.func @tp_copy_no_grid(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op refers to @weft_mesh, which is not a shard.grid}}
  %0 = weft.tp_copy %x on @weft_mesh grid_axes = [2] : tensor<2x8x64xf32>
  return
}

// -----

func.func @weft_mesh() {
  return
}

func.func @tp_copy_not_grid(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op refers to @weft_mesh, which is not a shard.grid}}
  %0 = weft.tp_copy %x on @weft_mesh grid_axes = [2] : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @tp_copy_no_axes(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op needs at least one grid axis}}
  %0 = weft.tp_copy %x on @weft_mesh grid_axes = [] : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @tp_copy_axis_range(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op grid axis 3 is out of range for @weft_mesh of rank 3}}
  %0 = weft.tp_copy %x on @weft_mesh grid_axes = [3] : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @tp_copy_axis_negative(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op grid axis -1 is out of range for @weft_mesh of rank 3}}
  %0 = weft.tp_copy %x on @weft_mesh grid_axes = [-1] : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @dynamic(shape = 1x1x?)

func.func @tp_copy_dynamic_axis(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.tp_copy' op grid axis 2 of @dynamic must have a static size}}
  %0 = weft.tp_copy %x on @dynamic grid_axes = [2] : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_embedding_no_grid(%t: tensor<2x8xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op refers to @mesh, which is not a shard.grid}}
  %0 = weft.vocab_embedding %t, %w on @mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_parallel_cross_entropy_axis(%l: tensor<2x8x128xf32>, %y: tensor<2x8xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy' op grid axis 5 is out of range for @weft_mesh of rank 3}}
  %0 = weft.vocab_parallel_cross_entropy %l, %y on @weft_mesh grid_axes = [5] {vocab_size = 256 : i64} : (tensor<2x8x128xf32>, tensor<2x8xi32>) -> tensor<f32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.bias_add
//===----------------------------------------------------------------------===//

func.func @bias_add_width(%x: tensor<2x8x64xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'weft.bias_add' op bias 'tensor<32xf32>' must be a vector of the input's last dimension ('tensor<2x8x64xf32>')}}
  %0 = weft.bias_add %x, %b : tensor<2x8x64xf32>, tensor<32xf32>
  return
}

// -----

func.func @bias_add_element(%x: tensor<2x8x64xf32>, %b: tensor<64xf16>) {
  // expected-error @+1 {{'weft.bias_add' op bias 'tensor<64xf16>' must be a vector of the input's last dimension ('tensor<2x8x64xf32>')}}
  %0 = weft.bias_add %x, %b : tensor<2x8x64xf32>, tensor<64xf16>
  return
}

// -----

func.func @bias_add_scalar(%x: tensor<f32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{'weft.bias_add' op bias 'tensor<1xf32>' must be a vector of the input's last dimension ('tensor<f32>')}}
  %0 = weft.bias_add %x, %b : tensor<f32>, tensor<1xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.vocab_embedding
//===----------------------------------------------------------------------===//

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_embedding_tokens(%t: tensor<16xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op expects [batch, seq] tokens and a [rows, hidden] table, got 'tensor<16xi32>' and 'tensor<128x64xf32>'}}
  %0 = weft.vocab_embedding %t, %w on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<16xi32>, tensor<128x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_embedding_result(%t: tensor<2x8xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op result type 'tensor<2x8x32xf32>' should be 'tensor<2x8x64xf32>'}}
  %0 = weft.vocab_embedding %t, %w on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_embedding_vocab(%t: tensor<2x8xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op vocab_size must be positive}}
  %0 = weft.vocab_embedding %t, %w on @weft_mesh grid_axes = [2] {vocab_size = 0 : i64} : (tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// 263 rows over 2 ranks are padded to 272: 136 rows per rank (a multiple of
// 8, vocabShardRows).
shard.grid @weft_mesh(shape = 1x1x2)

func.func @vocab_embedding_shard(%t: tensor<2x8xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op holds 128 vocabulary rows per rank, expected 136 (vocab_size 263 padded over 2 ranks)}}
  %0 = weft.vocab_embedding %t, %w on @weft_mesh grid_axes = [2] {vocab_size = 263 : i64} : (tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// The group spans every listed axis: 2 x 2 = 4 ranks.
shard.grid @weft_mesh(shape = 1x2x2)

func.func @vocab_embedding_two_axes(%t: tensor<2x8xi32>, %w: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.vocab_embedding' op holds 128 vocabulary rows per rank, expected 64 (vocab_size 256 padded over 4 ranks)}}
  %0 = weft.vocab_embedding %t, %w on @weft_mesh grid_axes = [1, 2] {vocab_size = 256 : i64} : (tensor<2x8xi32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.position_embedding
//===----------------------------------------------------------------------===//

func.func @position_embedding_input(%x: tensor<16x64xf32>, %p: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op input must be [batch, seq, hidden] with a static hidden size, got 'tensor<16x64xf32>'}}
  %0 = weft.position_embedding %x positions(%p) : (tensor<16x64xf32>, tensor<128x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @position_embedding_dynamic(%x: tensor<2x8x?xf32>, %p: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op input must be [batch, seq, hidden] with a static hidden size, got 'tensor<2x8x?xf32>'}}
  %0 = weft.position_embedding %x positions(%p) : (tensor<2x8x?xf32>, tensor<128x64xf32>) -> tensor<2x8x?xf32>
  return
}

// -----

func.func @position_embedding_no_table(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op needs a position or token-type table}}
  %0 = weft.position_embedding %x : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @position_embedding_positions(%x: tensor<2x8x64xf32>, %p: tensor<128x32xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op position table must be [rows, 64] like the token table, got 'tensor<128x32xf32>'}}
  %0 = weft.position_embedding %x positions(%p) : (tensor<2x8x64xf32>, tensor<128x32xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @position_embedding_token_types(%x: tensor<2x8x64xf32>, %tt: tensor<128xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op token-type table must be [rows, 64] like the token table, got 'tensor<128xf32>'}}
  %0 = weft.position_embedding %x token_types(%tt) : (tensor<2x8x64xf32>, tensor<128xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @position_embedding_offset(%x: tensor<2x8x64xf32>, %p: tensor<128x64xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op position_offset must not be negative}}
  %0 = weft.position_embedding %x positions(%p) {position_offset = -2 : i64} : (tensor<2x8x64xf32>, tensor<128x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @position_embedding_offset_no_table(%x: tensor<2x8x64xf32>, %tt: tensor<2x64xf32>) {
  // expected-error @+1 {{'weft.position_embedding' op position_offset needs a position table}}
  %0 = weft.position_embedding %x token_types(%tt) {position_offset = 2 : i64} : (tensor<2x8x64xf32>, tensor<2x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.tp_attention
//===----------------------------------------------------------------------===//

func.func @tp_attention_input(%x: tensor<16x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op input must be [batch, seq, hidden] with a static hidden size, got 'tensor<16x64xf32>'}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<16x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @tp_attention_positive(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op num_heads, num_kv_heads, head_dim and tp_size must be positive}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 0 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_groups(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op num_heads 2 is not divisible by num_kv_heads 3}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 3 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_hidden(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op num_heads * head_dim * tp_size = 128 does not equal the hidden size 64}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 4 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_rope(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op rope_theta must be positive}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, rope_theta = 0.0 : f64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_weight_count(%x: tensor<2x8x64xf32>, %w: tensor<64x32xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op expects 1 fused or 3 separate query/key/value weights, got 2}}
  %0 = weft.tp_attention %x qkv(%w, %w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_fused_width(%x: tensor<2x8x64xf32>, %w: tensor<64x192xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op query/key/value weight 'tensor<64x192xf32>' should be 'tensor<64x96xf32>'}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x192xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// GQA: 2 query heads and 1 key/value head of 16 per rank.
func.func @tp_attention_kv_width(%x: tensor<2x8x64xf32>, %q: tensor<64x32xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op query/key/value weight 'tensor<64x32xf32>' should be 'tensor<64x16xf32>'}}
  %0 = weft.tp_attention %x qkv(%q, %q, %q) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_bias_count(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %b: tensor<96xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op has 2 query/key/value biases for 1 weights}}
  %0 = weft.tp_attention %x qkv(%w) qkv_bias(%b, %b) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<96xf32>, tensor<96xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @tp_attention_bias_width(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %b: tensor<192xf32>, %o: tensor<32x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op query/key/value bias 'tensor<192xf32>' should be 'tensor<96xf32>'}}
  %0 = weft.tp_attention %x qkv(%w) qkv_bias(%b) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<192xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// The output projection holds this rank's rows: [num_heads * head_dim, hidden].
func.func @tp_attention_out(%x: tensor<2x8x64xf32>, %w: tensor<64x96xf32>, %o: tensor<64x64xf32>) {
  // expected-error @+1 {{'weft.tp_attention' op output weight 'tensor<64x64xf32>' should be 'tensor<32x64xf32>'}}
  %0 = weft.tp_attention %x qkv(%w) out(%o) {causal = true, head_dim = 16 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, tp_size = 2 : i64} : (tensor<2x8x64xf32>, tensor<64x96xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.vocab_parallel_cross_entropy
//===----------------------------------------------------------------------===//

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vpce_logits(%l: tensor<16x128xf32>, %y: tensor<16xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy' op logits must be [batch, seq, local vocab] with a static vocabulary, got 'tensor<16x128xf32>'}}
  %0 = weft.vocab_parallel_cross_entropy %l, %y on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<16x128xf32>, tensor<16xi32>) -> tensor<f32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vpce_labels(%l: tensor<2x8x128xf32>, %y: tensor<2x4xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy' op labels 'tensor<2x4xi32>' must match the logits' [batch, seq]}}
  %0 = weft.vocab_parallel_cross_entropy %l, %y on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<2x8x128xf32>, tensor<2x4xi32>) -> tensor<f32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @vpce_vocab(%l: tensor<2x8x128xf32>, %y: tensor<2x8xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy' op vocab_size must be positive}}
  %0 = weft.vocab_parallel_cross_entropy %l, %y on @weft_mesh grid_axes = [2] {vocab_size = -1 : i64} : (tensor<2x8x128xf32>, tensor<2x8xi32>) -> tensor<f32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x4)

func.func @vpce_shard(%l: tensor<2x8x128xf32>, %y: tensor<2x8xi32>) {
  // expected-error @+1 {{'weft.vocab_parallel_cross_entropy' op holds 128 vocabulary rows per rank, expected 64 (vocab_size 256 padded over 4 ranks)}}
  %0 = weft.vocab_parallel_cross_entropy %l, %y on @weft_mesh grid_axes = [2] {vocab_size = 256 : i64} : (tensor<2x8x128xf32>, tensor<2x8xi32>) -> tensor<f32>
  return
}
