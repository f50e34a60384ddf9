// RUN: weft-opt %s -split-input-file -weft-overlap-grad-sync | FileCheck %s

// ZeRO-0: four slots of 64 bytes; the backward writes slot 3, then 2, then
// 0 (slot 1 only the zeroing fill). The all-reduces move to `allreduce` in
// the order the slots become final (1, 3, 2, 0), in buckets of at most 128
// bytes (`bucket_bytes`), each one all-reduce whose members are its runs of
// contiguous slots, issued behind an event recorded after its latest slot's
// writer. Compute waits for the whole sync where the run was.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@grads[0 +: 256]) phase "zero grads"
// CHECK-NEXT: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[192 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event [[SLOT3:[0-9]+]] phase "bwd"
// CHECK-NEXT: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[128 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event [[SLOT0:[0-9]+]] phase "bwd"
// CHECK-NEXT: weftx.wait_event [[DONE:[0-9]+]] phase "grad sync"
// CHECK-NEXT: weftx.grad_norm
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "allreduce" {
// Slots 1 and 3 (not neighbours: two members), then 2 and 0.
// CHECK-NEXT: weftx.wait_event [[SLOT3]] phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 32 x f32 on @dp reads(@grads[64 +: 64], @grads[192 +: 64]) writes(@grads[64 +: 64], @grads[192 +: 64]) phase "grad sync"
// CHECK-NEXT: weftx.wait_event [[SLOT0]] phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 32 x f32 on @dp reads(@grads[128 +: 64], @grads[0 +: 64]) writes(@grads[128 +: 64], @grads[0 +: 64]) phase "grad sync"
// CHECK-NEXT: weftx.record_event [[DONE]] phase "grad sync"
// CHECK-NEXT: }
module attributes {weftx.config = {bucket_bytes = 128 : i64, dp = 2 : i64}} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @x arena size 64 align 64 : f32
    weftx.buffer @grads persistent size 256 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 256]) phase "zero grads"
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[192 +: 64]) phase "bwd"
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[128 +: 64]) phase "bwd"
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[0 +: 64]) phase "bwd"
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64]) phase "grad sync"
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads[64 +: 64]) phase "grad sync"
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[128 +: 64]) writes(@grads[128 +: 64]) phase "grad sync"
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[192 +: 64]) writes(@grads[192 +: 64]) phase "grad sync"
      weftx.grad_norm f32 reads(@grads[0 +: 256]) writes(@grad.sumsq[0 +: 4]) phase "clip"
    }
  }
}

// -----

// ZeRO-1: the reduce-scatters move to `reducescatter` in the order their
// slots become final (1, 0, 2), as the members of coalesced reduce-scatters
// of at most 128 gradient bytes (`bucket_bytes`), each behind an event after
// its last member's writer; events already in the program keep their
// numbers (new ones start above 7). An all-reduce over another family (the
// norm's) is not a gradient sync.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[64 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event 8 phase "bwd"
// CHECK-NEXT: weftx.launch @k reads(@x[0 +: 64]) writes(@grads[128 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event 9 phase "bwd"
// CHECK-NEXT: weftx.wait_event 10 phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 1 x f32 on @world
// CHECK: weftx.stream "reducescatter" {
// CHECK-NEXT: weftx.wait_event 8 phase "grad sync"
// CHECK-NEXT: weftx.reduce_scatter sum 16 x f32 on @dp reads(@grads[64 +: 64], @grads[0 +: 64]) writes(@grads.shard[32 +: 32], @grads.shard[0 +: 32]) phase "grad sync"
// CHECK-NEXT: weftx.wait_event 9 phase "grad sync"
// CHECK-NEXT: weftx.reduce_scatter sum 8 x f32 on @dp reads(@grads[128 +: 64]) writes(@grads.shard[64 +: 32]) phase "grad sync"
// CHECK-NEXT: weftx.record_event 10 phase "grad sync"
module attributes {weftx.config = {bucket_bytes = 128 : i64}} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.group @world world [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @x arena size 64 align 64 : f32
    weftx.buffer @grads arena size 192 align 64 : f32
    weftx.buffer @grads.shard persistent size 96 align 64 : f32
    weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.wait_event 7
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[64 +: 64]) phase "bwd"
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[0 +: 64]) phase "bwd"
      weftx.launch @k reads(@x[0 +: 64]) writes(@grads[128 +: 64]) phase "bwd"
      weftx.reduce_scatter sum 8 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads.shard[0 +: 32]) phase "grad sync"
      weftx.reduce_scatter sum 8 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads.shard[32 +: 32]) phase "grad sync"
      weftx.reduce_scatter sum 8 x f32 on @dp reads(@grads[128 +: 64]) writes(@grads.shard[64 +: 32]) phase "grad sync"
      weftx.all_reduce sum 1 x f32 on @world reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "clip"
    }
    weftx.stream "other" {
      weftx.record_event 7
    }
  }
}

// -----

// Slots final in order: a bucket grows to its limit (128 bytes) and the
// next slot starts a new one; without `bucket_bytes` the limit is 25 MiB.

// CHECK-LABEL: weftx.program @role0
// A bucket waits only for its latest slot's writer (compute wrote the
// others before it).
// CHECK: weftx.stream "allreduce" {
// CHECK-NEXT: weftx.wait_event {{[0-9]+}} phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 32 x f32 on @dp reads(@grads[0 +: 128])
// CHECK-NEXT: weftx.wait_event {{[0-9]+}} phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 16 x f32 on @dp reads(@grads[128 +: 64])
// CHECK-NEXT: weftx.record_event
module attributes {weftx.config = {bucket_bytes = 128 : i64}} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @grads persistent size 192 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@grads[0 +: 64])
      weftx.launch @k writes(@grads[64 +: 64])
      weftx.launch @k writes(@grads[128 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads[64 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[128 +: 64]) writes(@grads[128 +: 64])
    }
  }
}

// -----

// CHECK-LABEL: weftx.program @role1
// CHECK: weftx.stream "allreduce" {
// CHECK-NEXT: weftx.wait_event {{[0-9]+}} phase "grad sync"
// CHECK-NEXT: weftx.all_reduce sum 48 x f32 on @dp reads(@grads[0 +: 192])
// CHECK-NEXT: weftx.record_event
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role1 ranks [0, 1] {
    weftx.buffer @grads persistent size 192 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@grads[0 +: 64])
      weftx.launch @k writes(@grads[64 +: 64])
      weftx.launch @k writes(@grads[128 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads[64 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[128 +: 64]) writes(@grads[128 +: 64])
    }
  }
}
