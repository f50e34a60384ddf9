// RUN: weft-opt %s -split-input-file -weft-overlap-offload | FileCheck %s

// Offload as weft-optimizer emits it after a ZeRO-1 sync that
// weft-overlap-grad-sync already moved (slot 1 is reduce-scattered first).
// Each gradient copy moves to `d2h` behind its slot's reduce-scatter, in the
// order the slots become final; the norm's copy waits for the all-reduce on
// compute; compute waits for all of them before the host clip. Each bucket's
// weight copy moves to `h2d` behind its AdamW bucket; compute waits for them
// before the parameter gathers.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.wait_event 2 phase "grad sync"
// CHECK-NEXT: weftx.grad_norm
// CHECK-NEXT: weftx.all_reduce sum 1 x f32 on @dp
// CHECK-NEXT: weftx.record_event [[NORM:[0-9]+]] phase "clip"
// CHECK-NEXT: weftx.wait_event [[COPIED:[0-9]+]] phase "clip"
// CHECK-NEXT: weftx.clip f32 reads(@grad.sumsq.host[0 +: 4], @grads.host[0 +: 128])
// CHECK-NEXT: weftx.optimizer_step 16 x f32 {{.*}} phase "adamw"
// CHECK-NEXT: weftx.record_event [[BUCKET0:[0-9]+]] phase "adamw"
// CHECK-NEXT: weftx.optimizer_step 16 x f32 {{.*}} phase "adamw"
// CHECK-NEXT: weftx.record_event [[BUCKET1:[0-9]+]] phase "adamw"
// CHECK-NEXT: weftx.wait_event [[RELOADED:[0-9]+]] phase "param gather"
// CHECK-NEXT: weftx.all_gather
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "reducescatter" {
// CHECK-NEXT: weftx.reduce_scatter {{.*}} writes(@grads.shard[64 +: 64])
// CHECK-NEXT: weftx.record_event [[SLOT1:[0-9]+]] phase "grad sync"
// CHECK-NEXT: weftx.reduce_scatter {{.*}} writes(@grads.shard[0 +: 64])
// CHECK-NEXT: weftx.record_event [[SLOT0:[0-9]+]] phase "grad sync"
// CHECK-NEXT: weftx.record_event 2 phase "grad sync"
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "d2h" {
// CHECK-NEXT: weftx.wait_event [[SLOT1]] phase "offload grads"
// CHECK-NEXT: weftx.copy reads(@grads.shard[64 +: 64]) writes(@grads.host[64 +: 64]) phase "offload grads"
// CHECK-NEXT: weftx.wait_event [[SLOT0]] phase "offload grads"
// CHECK-NEXT: weftx.copy reads(@grads.shard[0 +: 64]) writes(@grads.host[0 +: 64]) phase "offload grads"
// CHECK-NEXT: weftx.wait_event [[NORM]] phase "offload grads"
// CHECK-NEXT: weftx.copy reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq.host[0 +: 4]) phase "offload grads"
// CHECK-NEXT: weftx.record_event [[COPIED]] phase "offload grads"
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "h2d" {
// CHECK-NEXT: weftx.wait_event [[BUCKET0]] phase "reload params"
// CHECK-NEXT: weftx.copy reads(@params.host[0 +: 64]) writes(@params.shard[0 +: 64]) phase "reload params"
// CHECK-NEXT: weftx.wait_event [[BUCKET1]] phase "reload params"
// CHECK-NEXT: weftx.copy reads(@params.host[64 +: 64]) writes(@params.shard[64 +: 64]) phase "reload params"
// CHECK-NEXT: weftx.record_event [[RELOADED]] phase "reload params"
// CHECK-NEXT: }
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @params persistent size 256 align 64 : f32
    weftx.buffer @grads arena size 256 align 64 : f32
    weftx.buffer @grads.shard persistent size 128 align 64 : f32
    weftx.buffer @params.shard persistent size 128 align 64 : f32
    weftx.buffer @master host size 128 align 64 : f32
    weftx.buffer @exp_avg host size 128 align 64 : f32
    weftx.buffer @exp_avg_sq host size 128 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.buffer @grads.host host size 128 align 64 : f32
    weftx.buffer @params.host host size 128 align 64 : f32
    weftx.buffer @grad.sumsq.host host size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.wait_event 2 phase "grad sync"
      weftx.copy reads(@grads.shard[0 +: 64]) writes(@grads.host[0 +: 64]) phase "offload grads"
      weftx.copy reads(@grads.shard[64 +: 64]) writes(@grads.host[64 +: 64]) phase "offload grads"
      weftx.grad_norm f32 reads(@grads.shard[0 +: 128]) writes(@grad.sumsq[0 +: 4]) phase "clip"
      weftx.all_reduce sum 1 x f32 on @dp reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "clip"
      weftx.copy reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq.host[0 +: 4]) phase "offload grads"
      weftx.clip f32 reads(@grad.sumsq.host[0 +: 4], @grads.host[0 +: 128]) writes(@grads.host[0 +: 128]) phase "clip"
      weftx.optimizer_step 16 x f32 reads(@master[0 +: 64], @grads.host[0 +: 64], @exp_avg[0 +: 64], @exp_avg_sq[0 +: 64]) writes(@master[0 +: 64], @exp_avg[0 +: 64], @exp_avg_sq[0 +: 64], @params.host[0 +: 64]) phase "adamw"
      weftx.copy reads(@params.host[0 +: 64]) writes(@params.shard[0 +: 64]) phase "reload params"
      weftx.optimizer_step 16 x f32 reads(@master[64 +: 64], @grads.host[64 +: 64], @exp_avg[64 +: 64], @exp_avg_sq[64 +: 64]) writes(@master[64 +: 64], @exp_avg[64 +: 64], @exp_avg_sq[64 +: 64], @params.host[64 +: 64]) phase "adamw"
      weftx.copy reads(@params.host[64 +: 64]) writes(@params.shard[64 +: 64]) phase "reload params"
      weftx.all_gather 16 x f32 on @dp reads(@params.shard[0 +: 64]) writes(@params[0 +: 128]) phase "param gather"
    }
    weftx.stream "reducescatter" {
      weftx.reduce_scatter sum 16 x f32 on @dp reads(@grads[128 +: 128]) writes(@grads.shard[64 +: 64]) phase "grad sync"
      weftx.reduce_scatter sum 16 x f32 on @dp reads(@grads[0 +: 128]) writes(@grads.shard[0 +: 64]) phase "grad sync"
      weftx.record_event 2 phase "grad sync"
    }
  }
}

// -----

// Without a host optimizer step the pass changes nothing.

// CHECK-LABEL: weftx.program @role0
// CHECK-NEXT: weftx.buffer
// CHECK-NEXT: weftx.buffer
// CHECK-NEXT: weftx.stream "compute" {
// CHECK-NEXT: weftx.copy reads(@a[0 +: 64]) writes(@h[0 +: 64])
// CHECK-NEXT: }
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @role0 ranks [0] {
    weftx.buffer @a persistent size 64 align 64 : f32
    weftx.buffer @h host size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.copy reads(@a[0 +: 64]) writes(@h[0 +: 64])
    }
  }
}
