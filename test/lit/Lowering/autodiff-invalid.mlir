// IR errors of weft-autodiff, and the pairing of weft.restore with the
// forward's weft.save.
// RUN: weft-opt %s -split-input-file -verify-diagnostics --weft-autodiff

// expected-error @+1 {{'func.func' op weft-autodiff: expected one float tensor result (a loss or an activation)}}
func.func @two_results() -> (tensor<f32>, tensor<f32>) {
  %w = weft.param "w" init(zeros) : tensor<f32>
  return %w, %w : tensor<f32>, tensor<f32>
}

// -----

// expected-error @+1 {{'func.func' op weft-autodiff: expected one float tensor result (a loss or an activation)}}
func.func @integer_result(%t: tensor<2x8xi32>) -> tensor<2x8xi32> {
  %w = weft.param "w" init(zeros) : tensor<f32>
  return %t : tensor<2x8xi32>
}

// -----

// expected-error @+1 {{'func.func' op weft-autodiff: 'f_backward' already exists}}
func.func @f() -> tensor<f32> {
  %w = weft.param "w" init(zeros) : tensor<f32>
  return %w : tensor<f32>
}

func.func @f_backward() {
  return
}

// -----

func.func @no_adjoint(%x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %w = weft.param "w" init(ones) : tensor<2x8x4xf32>
  // expected-error @+1 {{'arith.mulf' op weft-autodiff: no adjoint for this op}}
  %y = arith.mulf %x, %w : tensor<2x8x4xf32>
  return %y : tensor<2x8x4xf32>
}

// -----

func.func @multiple_results(%g: tensor<2x8x4xf32>, %x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %w = weft.param "w" init(ones) : tensor<4xf32>
  // expected-error @+1 {{'weft.layer_norm_grad' op weft-autodiff: expected one result}}
  %d:3 = weft.layer_norm_grad %g, %x, %w, %w {epsilon = 1.0e-05 : f64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x8x4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %d#0 : tensor<2x8x4xf32>
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @max_all_reduce(%x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %w = weft.param "w" init(ones) : tensor<4xf32>
  %n = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf32>, tensor<4xf32>
  // expected-error @+1 {{'shard.all_reduce' op weft-autodiff: only a sum all-reduce of one type has an adjoint}}
  %r = shard.all_reduce %n on @weft_mesh grid_axes = [2] reduction = max : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  return %r : tensor<2x8x4xf32>
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @widening_all_reduce(%x: tensor<2x8x4xf16>) -> tensor<2x8x4xf32> {
  %w = weft.param "w" init(ones) : tensor<4xf16>
  %n = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf16>, tensor<4xf16>
  // expected-error @+1 {{'shard.all_reduce' op weft-autodiff: only a sum all-reduce of one type has an adjoint}}
  %r = shard.all_reduce %n on @weft_mesh grid_axes = [2] : tensor<2x8x4xf16> -> tensor<2x8x4xf32>
  return %r : tensor<2x8x4xf32>
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @max_reduce_scatter(%x: tensor<2x8x4xf32>) -> tensor<2x4x4xf32> {
  %w = weft.param "w" init(ones) : tensor<4xf32>
  %n = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf32>, tensor<4xf32>
  // expected-error @+1 {{'shard.reduce_scatter' op weft-autodiff: only a sum reduce-scatter has an adjoint}}
  %r = shard.reduce_scatter %n on @weft_mesh grid_axes = [2] reduction = max scatter_axis = 1 : tensor<2x8x4xf32> -> tensor<2x4x4xf32>
  return %r : tensor<2x4x4xf32>
}

// -----

// The backward returns a gradient for every float argument; with a dynamic
// shape and no use, there is no gradient and no zero of that shape.
// expected-error @+1 {{weft-autodiff: no gradient reaches 'tensor<?x8x4xf32>' value}}
func.func @unused_dynamic(%x: tensor<2x8x4xf32>, %unused: tensor<?x8x4xf32>) -> tensor<2x8x4xf32> {
  %w = weft.param "w" init(ones) : tensor<4xf32>
  %n = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf32>, tensor<4xf32>
  return %n : tensor<2x8x4xf32>
}

// -----

// expected-error @+1 {{'func.func' op weft-autodiff: unknown recompute mode 'most' (expected none, selective or full)}}
func.func @recompute_attr(%x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> attributes {weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 1>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "most", schedule = "1f1b", sequence_parallel = false, tp = 1 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
  %w = weft.param "w" init(ones) : tensor<4xf32>
  %n = weft.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<2x8x4xf32>, tensor<4xf32>
  return %n : tensor<2x8x4xf32>
}

// -----

//===----------------------------------------------------------------------===//
// weft.restore @f slot k reads what weft.save slot k wrote in @f (verifier).
//===----------------------------------------------------------------------===//

func.func @restore_no_function() {
  // expected-error @+1 {{'weft.restore' op refers to @missing, which is not a func.func}}
  %0 = weft.restore @missing slot 0 : tensor<2x8x64xf32>
  return
}

// -----

shard.grid @weft_mesh(shape = 1x1x2)

func.func @restore_grid() {
  // expected-error @+1 {{'weft.restore' op refers to @weft_mesh, which is not a func.func}}
  %0 = weft.restore @weft_mesh slot 0 : tensor<2x8x64xf32>
  return
}

// -----

func.func @fwd(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  weft.save %x slot 0 : tensor<2x8x64xf32>
  return %x : tensor<2x8x64xf32>
}

func.func @restore_missing_slot() {
  // expected-error @+1 {{'weft.restore' op reads slot 1 of @fwd, which no weft.save there writes}}
  %0 = weft.restore @fwd slot 1 : tensor<2x8x64xf32>
  return
}

// -----

func.func @fwd(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // expected-note @+1 {{saved here}}
  weft.save %x slot 0 : tensor<2x8x64xf32>
  return %x : tensor<2x8x64xf32>
}

func.func @restore_type() {
  // expected-error @+1 {{'weft.restore' op has type 'tensor<?x?x64xf32>', but slot 0 of @fwd holds 'tensor<2x8x64xf32>'}}
  %0 = weft.restore @fwd slot 0 : tensor<?x?x64xf32>
  return
}

// -----

// Saves inside a layer count too; a slot written twice is ambiguous.
func.func @fwd(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // expected-note @+1 {{written here}}
  weft.save %x slot 0 : tensor<2x8x64xf32>
  %y = weft.block 0(%x) : tensor<2x8x64xf32> {
  ^bb0(%h: tensor<2x8x64xf32>):
    // expected-note @+1 {{written here}}
    weft.save %h slot 0 : tensor<2x8x64xf32>
    weft.yield %h : tensor<2x8x64xf32>
  }
  return %y : tensor<2x8x64xf32>
}

func.func @fwd_backward(%g: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // expected-error @+1 {{'weft.restore' op reads slot 0 of @fwd, which 2 weft.saves write}}
  %0 = weft.restore @fwd slot 0 : tensor<2x8x64xf32>
  return %0 : tensor<2x8x64xf32>
}

// -----

// A restore inside a layer's backward resolves from the enclosing module.
func.func @fwd(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  weft.save %x slot 0 : tensor<2x8x64xf32>
  return %x : tensor<2x8x64xf32>
}

func.func @fwd_backward(%g: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  %dx = weft.block_grad 0(%g) : tensor<2x8x64xf32> -> tensor<2x8x64xf32> attributes {params = []} {
  ^bb0(%a: tensor<2x8x64xf32>):
    // expected-error @+1 {{'weft.restore' op reads slot 3 of @fwd, which no weft.save there writes}}
    %s = weft.restore @fwd slot 3 : tensor<2x8x64xf32>
    weft.grad_yield %s : tensor<2x8x64xf32>
  }
  return %dx : tensor<2x8x64xf32>
}
