// RUN: weft-opt %s -split-input-file -weft-optimizer | FileCheck %s

// TP 2 without ZeRO: `w` is split over TP (dim 0), `b` replicated. Both
// roles count their piece of `w`; only TP rank 0 counts `b`. The norm's
// all-reduce runs over the ranks of one replica (`mp`, declared here). The
// step writes the fp32 working copy in place (the master is `params`).

// CHECK: weftx.group @tp tp
// CHECK-NEXT: weftx.group @mp custom {{\[\[}}0, 1]]
// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.fill f32 0.000000e+00 writes(@grads[0 +: 256]) phase "zero grads"
// CHECK-NEXT: weftx.grad_norm f32 reads(@grads[0 +: 256]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// CHECK-NEXT: weftx.all_reduce sum 1 x f32 on @mp reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// CHECK-NEXT: weftx.optimizer_step 64 x f32 reads(@params[0 +: 256], @grads[0 +: 256], @exp_avg[0 +: 256], @exp_avg_sq[0 +: 256], @grad.sumsq[0 +: 4]) writes(@params[0 +: 256], @exp_avg[0 +: 256], @exp_avg_sq[0 +: 256]) phase "adamw"
// CHECK-NEXT: }
// CHECK-LABEL: weftx.program @role1
// CHECK: weftx.grad_norm f32 reads(@grads[0 +: 128]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
module {
  weftx.mesh dp 1 pp 1 tp 2
  weftx.group @tp tp [[0, 1]]
  weftx.program @role0 ranks [0] {
    weftx.buffer @params persistent size 256 align 64 : f32
    weftx.buffer @grads persistent size 256 align 64 : f32
    weftx.buffer @exp_avg persistent size 256 align 64 : f32
    weftx.buffer @exp_avg_sq persistent size 256 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 256]) phase "zero grads"
    }
  }
  weftx.program @role1 ranks [1] {
    weftx.buffer @params persistent size 256 align 64 : f32
    weftx.buffer @grads persistent size 256 align 64 : f32
    weftx.buffer @exp_avg persistent size 256 align 64 : f32
    weftx.buffer @exp_avg_sq persistent size 256 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 256]) phase "zero grads"
    }
  }
  weftx.parameter "w" [64] f32 init zeros hf "w" shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = 0, start = 0, length = 32, zero_shards = 1, padded_elements = 32>, #weftx.shard<role = @role1, buffer = @params, offset = 0, dim = 0, start = 32, length = 32, zero_shards = 1, padded_elements = 32>]
  weftx.parameter "b" [32] f32 init zeros hf "b" shards [#weftx.shard<role = @role0, buffer = @params, offset = 128, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>, #weftx.shard<role = @role1, buffer = @params, offset = 128, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>]
}

// -----

// bf16 ZeRO-1 over DP 2 with the optimizer offloaded: each slot of this
// rank's gradient shard goes to a new host buffer (weft-overlap-offload
// issues the copies as the slots become final); the norm covers the device
// shard, sums over `dp` and goes to the host too; AdamW (clipping) runs on
// the host, AdamW in buckets of at most `bucket_bytes` (64: one slot each)
// of fp32 weights, each writing the rounded weights into `params.host`,
// copied back into `params.shard` after its bucket; one all-gather per slot
// then rebuilds the working copy.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
// CHECK-NEXT: weftx.buffer @grads.host host size 64 align 64 : bf16
// CHECK-NEXT: weftx.buffer @params.host host size 64 align 64 : bf16
// CHECK-NEXT: weftx.buffer @grad.sumsq.host host size 4 align 64 : f32
// CHECK-NEXT: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill
// CHECK-NEXT: weftx.copy reads(@grads.shard[0 +: 32]) writes(@grads.host[0 +: 32]) phase "offload grads"
// CHECK-NEXT: weftx.copy reads(@grads.shard[32 +: 32]) writes(@grads.host[32 +: 32]) phase "offload grads"
// CHECK-NEXT: weftx.grad_norm bf16 reads(@grads.shard[0 +: 64]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// CHECK-NEXT: weftx.all_reduce sum 1 x f32 on @dp
// CHECK-NEXT: weftx.copy reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq.host[0 +: 4]) phase "offload grads"
// CHECK-NEXT: weftx.optimizer_step 16 x f32 reads(@master[0 +: 64], @grads.host[0 +: 32], @exp_avg[0 +: 64], @exp_avg_sq[0 +: 64], @grad.sumsq.host[0 +: 4]) writes(@master[0 +: 64], @exp_avg[0 +: 64], @exp_avg_sq[0 +: 64], @params.host[0 +: 32]) phase "adamw"
// CHECK-NEXT: weftx.copy reads(@params.host[0 +: 32]) writes(@params.shard[0 +: 32]) phase "reload params"
// CHECK-NEXT: weftx.optimizer_step 16 x f32 reads(@master[64 +: 64], @grads.host[32 +: 32], @exp_avg[64 +: 64], @exp_avg_sq[64 +: 64], @grad.sumsq.host[0 +: 4]) writes(@master[64 +: 64], @exp_avg[64 +: 64], @exp_avg_sq[64 +: 64], @params.host[32 +: 32]) phase "adamw"
// CHECK-NEXT: weftx.copy reads(@params.host[32 +: 32]) writes(@params.shard[32 +: 32]) phase "reload params"
// CHECK-NEXT: weftx.all_gather 16 x bf16 on @dp reads(@params.shard[0 +: 32]) writes(@params[0 +: 64]) phase "param gather"
// CHECK-NEXT: weftx.all_gather 16 x bf16 on @dp reads(@params.shard[32 +: 32]) writes(@params[64 +: 64]) phase "param gather"
// CHECK-NEXT: }
module attributes {weftx.config = {bucket_bytes = 64 : i64}} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @params persistent size 128 align 64 : bf16
    weftx.buffer @grads persistent size 128 align 64 : bf16
    weftx.buffer @exp_avg host size 128 align 64 : f32
    weftx.buffer @exp_avg_sq host size 128 align 64 : f32
    weftx.buffer @master host size 128 align 64 : f32
    weftx.buffer @grads.shard persistent size 64 align 64 : bf16
    weftx.buffer @params.shard persistent size 64 align 64 : bf16
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.fill bf16 0.0 writes(@grads[0 +: 128])
    }
  }
  weftx.parameter "w" [32] f32 init zeros hf "w" shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>, #weftx.shard<role = @role0, buffer = @master, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 32>, #weftx.shard<role = @role0, buffer = @params.shard, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 32>]
  weftx.parameter "v" [32] f32 init zeros hf "v" shards [#weftx.shard<role = @role0, buffer = @params, offset = 64, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>, #weftx.shard<role = @role0, buffer = @master, offset = 64, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 32>, #weftx.shard<role = @role0, buffer = @params.shard, offset = 32, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 32>]
}

// -----

// A tied embedding held by both pipeline ranks counts on the first only;
// with nothing to count the sum of squares is zeroed.

// CHECK-LABEL: weftx.program @role1
// CHECK: weftx.fill f32 0.000000e+00 writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// CHECK-NEXT: weftx.all_reduce sum 1 x f32 on @mp
module {
  weftx.mesh dp 1 pp 2 tp 1
  weftx.program @role0 ranks [0] {
    weftx.buffer @params persistent size 128 align 64 : f32
    weftx.buffer @grads persistent size 128 align 64 : f32
    weftx.buffer @exp_avg persistent size 128 align 64 : f32
    weftx.buffer @exp_avg_sq persistent size 128 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
    }
  }
  weftx.program @role1 ranks [1] {
    weftx.buffer @params persistent size 128 align 64 : f32
    weftx.buffer @grads persistent size 128 align 64 : f32
    weftx.buffer @exp_avg persistent size 128 align 64 : f32
    weftx.buffer @exp_avg_sq persistent size 128 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
    }
  }
  weftx.parameter "wte" [32] f32 init zeros hf "wte" shards [#weftx.shard<role = @role1, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>, #weftx.shard<role = @role0, buffer = @params, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 32>]
}
