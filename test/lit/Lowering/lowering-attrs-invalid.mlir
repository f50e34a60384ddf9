// The attributes weft-attach-mesh, weft-partition-tensor and weft-split-stages
// attach (WeftDialect.cpp, verifyLoweringAttr).
// RUN: weft-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// weft.parallel
//===----------------------------------------------------------------------===//

func.func @parallel_on_param() {
  // expected-error @+1 {{'weft.parallel' must be a dictionary on a func.func}}
  %w = weft.param "w" init(zeros) {weft.parallel = {tp = 1 : i64}} : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{'weft.parallel' must be a dictionary on a func.func}}
func.func @parallel_not_dict() attributes {weft.parallel = 2 : i64} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' needs a 'tp' entry of the right type, got {dp = 1 : i64}}}
func.func @parallel_missing_tp() attributes {weft.parallel = {dp = 1 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' entry 'micro_batch' must be at least 1, got 0}}
func.func @parallel_micro_batch() attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 1>, micro_batch = 0 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' entry 'zero' must be at least 0, got -1}}
func.func @parallel_zero() attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 1>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = -1 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' needs a 'schedule' entry of the right type}}
func.func @parallel_schedule_type() attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 1>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = 1 : i64, sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' needs a 'sequence_parallel' entry of the right type}}
func.func @parallel_sequence_parallel() attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 1>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = 0 : i64, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.parallel' needs a 'layers_per_stage' entry of the right type}}
func.func @parallel_layers_per_stage() attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = [1 : i64], micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.placement
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'weft.placement' must be a dictionary on a weft.param}}
func.func @placement_on_func() attributes {weft.placement = {stage = 0 : i64, tp = "replicated"}} {
  return
}

// -----

func.func @placement_not_dict() {
  // expected-error @+1 {{'weft.placement' must be a dictionary on a weft.param}}
  %w = weft.param "w" init(zeros) {weft.placement = "replicated"} : tensor<4xf32>
  return
}

// -----

func.func @placement_missing_tp() {
  // expected-error @+1 {{'weft.placement' needs a 'tp' entry of the right type, got {stage = 0 : i64}}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64}} : tensor<4xf32>
  return
}

// -----

func.func @placement_missing_stage() {
  // expected-error @+1 {{'weft.placement' needs a 'stage' entry of the right type}}
  %w = weft.param "w" init(zeros) {weft.placement = {tp = "replicated"}} : tensor<4xf32>
  return
}

// -----

func.func @placement_negative_stage() {
  // expected-error @+1 {{'weft.placement' entry 'stage' must be at least 0, got -1}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = -1 : i64, tp = "replicated"}} : tensor<4xf32>
  return
}

// -----

func.func @placement_role() {
  // expected-error @+1 {{'weft.placement' has unknown tp role "diagonal" (expected column, row, vocab or replicated)}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64, tp = "diagonal"}} : tensor<4xf32>
  return
}

// -----

func.func @placement_replicated_dim() {
  // expected-error @+1 {{'weft.placement' of a replicated parameter has no tp_dim}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64, tp = "replicated", tp_dim = 0 : i64}} : tensor<4xf32>
  return
}

// -----

func.func @placement_missing_dim() {
  // expected-error @+1 {{'weft.placement' of a column parameter needs a tp_dim in [0, 2)}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64, tp = "column"}} : tensor<4x8xf32>
  return
}

// -----

func.func @placement_dim_range() {
  // expected-error @+1 {{'weft.placement' of a row parameter needs a tp_dim in [0, 2)}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 2 : i64}} : tensor<4x8xf32>
  return
}

// -----

func.func @placement_dim_negative() {
  // expected-error @+1 {{'weft.placement' of a vocab parameter needs a tp_dim in [0, 2)}}
  %w = weft.param "w" init(zeros) {weft.placement = {stage = 0 : i64, tp = "vocab", tp_dim = -1 : i64}} : tensor<4x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.shard
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'weft.shard' must be a dictionary on a weft.param}}
func.func @shard_on_func() attributes {weft.shard = {global_name = "w", global_shape = array<i64: 4>}} {
  return
}

// -----

func.func @shard_missing_name() {
  // expected-error @+1 {{'weft.shard' needs a 'global_name' entry of the right type}}
  %w = weft.param "w" init(zeros) {weft.shard = {global_shape = array<i64: 4>}} : tensor<4xf32>
  return
}

// -----

func.func @shard_missing_shape() {
  // expected-error @+1 {{'weft.shard' needs a 'global_shape' entry of the right type}}
  %w = weft.param "w" init(zeros) {weft.shard = {global_name = "w", global_shape = [4]}} : tensor<4xf32>
  return
}

// -----

func.func @shard_rank() {
  // expected-error @+1 {{'weft.shard' global_shape array<i64: 8> does not have the rank of 'tensor<4x8xf32>'}}
  %w = weft.param "w" init(zeros) {weft.shard = {global_name = "w", global_shape = array<i64: 8>}} : tensor<4x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.stage, weft.tied_to
//===----------------------------------------------------------------------===//

func.func @stage_negative() {
  // expected-error @+1 {{'weft.stage' must be a non-negative integer}}
  %w = weft.param "w" init(zeros) {weft.stage = -1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @stage_not_integer() {
  // expected-error @+1 {{'weft.stage' must be a non-negative integer}}
  %w = weft.param "w" init(zeros) {weft.stage = "first"} : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{'weft.tied_to' must name a parameter, on a weft.param}}
func.func @tied_to_on_func() attributes {weft.tied_to = "w"} {
  return
}

// -----

func.func @tied_to_empty() {
  // expected-error @+1 {{'weft.tied_to' must name a parameter, on a weft.param}}
  %w = weft.param "w" init(zeros) {weft.tied_to = ""} : tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// weft.pipeline_stage
//===----------------------------------------------------------------------===//

func.func @pipeline_stage_on_param() {
  // expected-error @+1 {{'weft.pipeline_stage' must be a dictionary on a func.func}}
  %w = weft.param "w" init(zeros) {weft.pipeline_stage = {chunk = 0 : i64, model = "m", num_stages = 1 : i64, rank = 0 : i64, stage = 0 : i64}} : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' needs a 'chunk' entry of the right type}}
func.func @pipeline_stage_chunk() attributes {weft.pipeline_stage = {model = "m", num_stages = 1 : i64, rank = 0 : i64, stage = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' entry 'rank' must be at least 0, got -1}}
func.func @pipeline_stage_rank() attributes {weft.pipeline_stage = {chunk = 0 : i64, model = "m", num_stages = 1 : i64, rank = -1 : i64, stage = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' entry 'num_stages' must be at least 1, got 0}}
func.func @pipeline_stage_count() attributes {weft.pipeline_stage = {chunk = 0 : i64, model = "m", num_stages = 0 : i64, rank = 0 : i64, stage = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' needs a 'model' entry of the right type}}
func.func @pipeline_stage_model() attributes {weft.pipeline_stage = {chunk = 0 : i64, model = @m, num_stages = 1 : i64, rank = 0 : i64, stage = 0 : i64}} {
  return
}

// -----

// expected-error @+1 {{unknown weft attribute 'weft.stages'}}
func.func @unknown() attributes {weft.stages = 1 : i64} {
  return
}

// -----

// Dialect attributes are verified before the op: a parameter whose type is
// not a ranked tensor must reach weft.param's own verifier.
func.func @placement_not_tensor() {
  // expected-error @+1 {{'weft.param' op result #0 must be statically shaped tensor of any type values, but got 'f32'}}
  %w = "weft.param"() <{init = 0 : i32, name = "w"}> {weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 0 : i64}} : () -> f32
  return
}

// -----

func.func @shard_not_tensor() {
  // expected-error @+1 {{'weft.param' op result #0 must be statically shaped tensor of any type values, but got 'tensor<*xf32>'}}
  %w = "weft.param"() <{init = 0 : i32, name = "w"}> {weft.shard = {global_name = "w", global_shape = array<i64: 4>}} : () -> tensor<*xf32>
  return
}
