// IR errors of weft-partition-tensor.
// RUN: weft-opt %s -split-input-file -verify-diagnostics --weft-partition-tensor

// expected-error @+1 {{needs the shard.grid @weft_mesh (run weft-attach-mesh first)}}
module {
  func.func @no_grid(%l: tensor<2x8x256xf32>, %y: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
    %loss = weft.cross_entropy %l, %y : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

// expected-error @+1 {{'func.func' op has no 'weft.parallel' (run weft-attach-mesh first)}}
func.func @no_parallel(%l: tensor<2x8x256xf32>, %y: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2"} {
  %loss = weft.cross_entropy %l, %y : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @no_placement(%x: tensor<2x8x64xf32>, %y: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  // expected-error @+1 {{'weft.param' op has no 'weft.placement' (run weft-attach-mesh first)}}
  %w = weft.param "lm_head.weight" init(zeros) : tensor<256x64xf32>
  %l = weft.lm_head %x, %w : (tensor<2x8x64xf32>, tensor<256x64xf32>) -> tensor<2x8x256xf32>
  %loss = weft.cross_entropy %l, %y : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A hand-written placement that tp does not divide (weft-attach-mesh checks
// the heads and MLP widths it assigns).
shard.grid @weft_mesh(shape = 1x1x2)

func.func @indivisible(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  // expected-error @+1 {{'weft.param' op cannot split parameter 'up' over tp = 2: dimension 1 has size 3}}
  %up = weft.param "up" init(zeros) {weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 1 : i64}} : tensor<4x3xf32>
  %down = weft.param "down" init(zeros) {weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 0 : i64}} : tensor<3x4xf32>
  %y = weft.mlp %x up(%up) down(%down) {activation = "relu"} : (tensor<2x8x4xf32>, tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<2x8x4xf32>
  %loss = weft.param "loss" init(zeros) {weft.placement = {stage = 0 : i64, tp = "replicated"}} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Only the vocabulary-parallel cross-entropy can read a rank's logit columns.
shard.grid @weft_mesh(shape = 1x1x2)

func.func @logits_user(%x: tensor<2x8x64xf32>, %y: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "lm_head.weight" init(zeros) {weft.placement = {stage = 0 : i64, tp = "vocab", tp_dim = 0 : i64}} : tensor<256x64xf32>
  %l = weft.lm_head %x, %w : (tensor<2x8x64xf32>, tensor<256x64xf32>) -> tensor<2x8x256xf32>
  // expected-error @+1 {{'arith.addf' op uses vocabulary-parallel logits; only weft.cross_entropy can consume them}}
  %twice = arith.addf %l, %l : tensor<2x8x256xf32>
  %loss = weft.cross_entropy %twice, %y : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @logits_argument(%l: tensor<2x8x256xf32>, %y: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  // expected-error @+1 {{'weft.cross_entropy' op takes logits that are not a weft.lm_head's; cannot partition its vocabulary}}
  %loss = weft.cross_entropy %l, %y : (tensor<2x8x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Op state is weft-autodiff's, after partitioning.
shard.grid @weft_mesh(shape = 1x1x2)

func.func @state(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %up = weft.param "up" init(zeros) {weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 1 : i64}} : tensor<4x8xf32>
  %down = weft.param "down" init(zeros) {weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 0 : i64}} : tensor<8x4xf32>
  // expected-error @+1 {{'weft.mlp' op weft-partition-tensor: op state results are added by weft-autodiff after partitioning}}
  %y:3 = weft.mlp %x up(%up) down(%down) {activation = "relu"} : (tensor<2x8x4xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  %loss = weft.param "loss" init(zeros) {weft.placement = {stage = 0 : i64, tp = "replicated"}} : tensor<f32>
  return %loss : tensor<f32>
}
