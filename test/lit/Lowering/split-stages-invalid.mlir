// IR errors of weft-split-stages.
// RUN: weft-opt %s -split-input-file -verify-diagnostics --weft-split-stages

// expected-error @+1 {{'func.func' op has no 'weft.parallel' (run weft-attach-mesh first)}}
func.func @no_parallel() -> tensor<f32> attributes {weft.model = "gpt2"} {
  %loss = weft.param "loss" init(zeros) {weft.stage = 0 : i64} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @no_stage(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 2 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) {weft.stage = 0 : i64} : tensor<4xf32>
  // expected-error @+1 {{'weft.rms_norm' op has no 'weft.stage' (run weft-attach-mesh first)}}
  %a = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf32>, tensor<4xf32>
  %loss = weft.param "loss" init(zeros) {weft.stage = 1 : i64} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @stage_range(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 2 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) {weft.stage = 0 : i64} : tensor<4xf32>
  %a = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64, weft.stage = 1 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  // expected-error @+1 {{'weft.param' op is on stage 2, but the model has 2 pipeline stages}}
  %loss = weft.param "loss" init(zeros) {weft.stage = 2 : i64} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error @+1 {{pipeline stage 1 has no ops}}
func.func @empty_stage(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 3 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) {weft.stage = 0 : i64} : tensor<4xf32>
  %a = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64, weft.stage = 0 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  %loss = weft.param "loss" init(zeros) {weft.stage = 2 : i64} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Stage 2 reads an activation of stage 0: pipeline stages only talk to their
// neighbours.
func.func @skip_stage(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 3 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) {weft.stage = 0 : i64} : tensor<4xf32>
  %a = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64, weft.stage = 0 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  %b = weft.rms_norm %a, %w {epsilon = 1.0e-05 : f64, weft.stage = 1 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  // expected-error @+1 {{'arith.addf' op on stage 2 uses a value computed on stage 0; stages receive activations only from the stage before}}
  %c = arith.addf %a, %b {weft.stage = 2 : i64} : tensor<2x8x4xf32>
  %loss = weft.param "loss" init(zeros) {weft.stage = 2 : i64} : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Stages run in order: an op cannot read a later stage's value.
func.func @backwards(%x: tensor<2x8x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 2 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) {weft.stage = 0 : i64} : tensor<4xf32>
  %a = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64, weft.stage = 1 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  // expected-error @+1 {{'weft.rms_norm' op on stage 0 uses a value computed on stage 1; stages receive activations only from the stage before}}
  %b = weft.rms_norm %a, %w {epsilon = 1.0e-05 : f64, weft.stage = 0 : i64} : tensor<2x8x4xf32>, tensor<4xf32>
  %loss = weft.param "loss" init(zeros) {weft.stage = 1 : i64} : tensor<f32>
  return %loss : tensor<f32>
}
