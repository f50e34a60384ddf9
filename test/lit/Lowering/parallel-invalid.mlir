// Option errors of weft-attach-mesh, on a real model.
// RUN: weftc import gpt2-odd > %t.gpt2
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="tp=0" 2>&1 | FileCheck %s --check-prefix=TP0
// TP0: option 'tp' must be at least 1, got 0
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="prefetch-depth=-1" 2>&1 | FileCheck %s --check-prefix=PREFETCH
// PREFETCH: option 'prefetch-depth' must not be negative, got -1
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="zero=4" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: option 'zero' must be 0, 1, 2 or 3, got 4
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="schedule=zigzag" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// SCHEDULE: option 'schedule' must be gpipe, 1f1b or interleaved, got 'zigzag'
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="recompute=some" 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RECOMPUTE: option 'recompute' must be none, selective or full, got 'some'
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=VIRTUAL
// VIRTUAL: virtual-stages 2 needs schedule=interleaved
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=2 schedule=interleaved" 2>&1 | FileCheck %s --check-prefix=INTERLEAVED-V
// INTERLEAVED-V: schedule=interleaved needs virtual-stages >= 2, got 1
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="schedule=interleaved virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=INTERLEAVED-PP
// INTERLEAVED-PP: schedule=interleaved needs pp >= 2, got 1
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=2 schedule=interleaved virtual-stages=2 grad-accum=3" 2>&1 | FileCheck %s --check-prefix=INTERLEAVED-GA
// INTERLEAVED-GA: schedule=interleaved needs grad-accum (3) to be a multiple of pp (2)
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="grad-accum=16385" 2>&1 | FileCheck %s --check-prefix=GA-LIMIT
// GA-LIMIT: option 'grad-accum' is 16385: a step unrolls at most 16384 micro-batches (use larger micro-batches)
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=4" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// TOO-MANY: pp * virtual-stages = 4 pipeline stages exceed the 3 blocks of the model
// RUN: weftc import gpt2 | not weft-opt --weft-attach-mesh="pp=5 schedule=interleaved virtual-stages=2 grad-accum=5" 2>&1 | FileCheck %s --check-prefix=INTERLEAVED-SPLIT
// INTERLEAVED-SPLIT: schedule=interleaved needs the 12 blocks divisible by pp * virtual-stages = 10 (or an explicit layers-per-stage)
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=2 layers-per-stage=3" 2>&1 | FileCheck %s --check-prefix=LPS-COUNT
// LPS-COUNT: layers-per-stage has 1 entries, expected pp * virtual-stages = 2
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=2 layers-per-stage=3,0" 2>&1 | FileCheck %s --check-prefix=LPS-ZERO
// LPS-ZERO: layers-per-stage entries must be at least 1
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="pp=2 layers-per-stage=2,2" 2>&1 | FileCheck %s --check-prefix=LPS-SUM
// LPS-SUM: layers-per-stage sums to 4, but the model has 3 blocks
// RUN: not weft-opt %t.gpt2 --weft-attach-mesh="tp=8" 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: 'weft.attention' op cannot be split over tp = 8: it does not divide num_heads = 4
// RUN: weftc import llama-tiny | not weft-opt --weft-attach-mesh="tp=4" 2>&1 | FileCheck %s --check-prefix=KV-HEADS
// KV-HEADS: 'weft.attention' op cannot be split over tp = 4: it does not divide num_kv_heads = 2
// RUN: weftc import llama-tiny | not weft-opt --weft-attach-mesh="tp=2" --weft-attach-mesh 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: a symbol named 'weft_mesh' already exists (was the mesh attached twice?)

// IR errors of weft-attach-mesh.
// RUN: weft-opt %s -split-input-file -verify-diagnostics --weft-attach-mesh="tp=2"

// expected-error @+1 {{no func.func marked 'weft.model' to place}}
module {
  func.func @not_a_model() {
    return
  }
}

// -----

module {
  func.func @mlp_width(%x: tensor<?x?x4xf32>) -> tensor<f32> attributes {weft.model = "gpt2", weft.parallel = {bucket_bytes = 0 : i64, dp = 1 : i64, grad_accum = 1 : i64, layers_per_stage = array<i64: 0>, micro_batch = 1 : i64, pp = 1 : i64, prefetch_depth = 0 : i64, recompute = "none", schedule = "1f1b", sequence_parallel = false, tp = 2 : i64, virtual_stages = 1 : i64, zero = 0 : i64}} {
    %up = weft.param "up" init(zeros) {weft.placement = {stage = 0 : i64, tp = "column", tp_dim = 1 : i64}, weft.stage = 0 : i64} : tensor<4x3xf32>
    %down = weft.param "down" init(zeros) {weft.placement = {stage = 0 : i64, tp = "row", tp_dim = 0 : i64}, weft.stage = 0 : i64} : tensor<3x4xf32>
    // expected-error @below {{'weft.mlp' op cannot be split over tp = 2: it does not divide the MLP width 3}}
    %y = weft.mlp %x up(%up) down(%down) {activation = "relu", weft.stage = 0 : i64} : (tensor<?x?x4xf32>, tensor<4x3xf32>, tensor<3x4xf32>) -> tensor<?x?x4xf32>
    %loss = weft.param "loss" init(zeros) {weft.placement = {stage = 0 : i64, tp = "replicated"}, weft.stage = 0 : i64} : tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// One parameter, two tensor-parallel roles: the token table (vocab rows) is
// also a dense weight (replicated).
module {
  func.func @role_conflict(%t: tensor<2x8xi32>) -> tensor<f32> attributes {weft.model = "gpt2"} {
    // expected-error @below {{'weft.param' op parameter 'wte' is used both as replicated and as vocab tensor-parallel}}
    %w = weft.param "wte" init(zeros) : tensor<4x4xf32>
    %e = weft.embedding %t, %w : (tensor<2x8xi32>, tensor<4x4xf32>) -> tensor<2x8x4xf32>
    %h = weft.block 0(%e) : tensor<2x8x4xf32> {
    ^bb0(%x: tensor<2x8x4xf32>):
      weft.yield %x : tensor<2x8x4xf32>
    }
    %y = weft.linear %h, %w : (tensor<2x8x4xf32>, tensor<4x4xf32>) -> tensor<2x8x4xf32>
    %loss = weft.param "loss" init(zeros) : tensor<f32>
    return %loss : tensor<f32>
  }
}
