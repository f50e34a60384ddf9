// RUN: weft-opt %s -split-input-file -weft-overlap-tp-collectives | FileCheck %s

// The input gradient's all-reduce moves to `tp` after the GEMM that writes
// it; the weight gradient's GEMM, which neither feeds nor reads it, runs
// under it; compute waits before the first reader of the sum. A DP
// collective stays on compute.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 4 {{.*}} writes(@dx[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event [[READY:[0-9]+]] phase "bwd"
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 4 {{.*}} writes(@dw[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.wait_event [[DONE:[0-9]+]]
// CHECK-NEXT: weftx.launch @k reads(@dx[0 +: 64])
// CHECK-NEXT: weftx.all_reduce sum 16 x f32 on @dp
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "tp" {
// CHECK-NEXT: weftx.wait_event [[READY]] phase "tp sum"
// CHECK-NEXT: weftx.all_reduce sum 16 x f32 on @tp reads(@dx[0 +: 64]) writes(@dx[0 +: 64]) phase "tp sum"
// CHECK-NEXT: weftx.record_event [[DONE]] phase "tp sum"
// CHECK-NEXT: }
module {
  weftx.mesh dp 2 pp 1 tp 2
  weftx.group @tp tp [[0, 1], [2, 3]]
  weftx.group @dp dp [[0, 2], [1, 3]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 2] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @dx arena size 64 align 64 : f32
    weftx.buffer @dw arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dx[0 +: 64]) phase "bwd"
      weftx.all_reduce sum 16 x f32 on @tp reads(@dx[0 +: 64]) writes(@dx[0 +: 64]) phase "tp sum"
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dw[0 +: 64]) phase "bwd"
      weftx.launch @k reads(@dx[0 +: 64])
      weftx.all_reduce sum 16 x f32 on @dp reads(@dw[0 +: 64]) writes(@dw[0 +: 64])
    }
  }
  weftx.program @role1 ranks [1, 3] {
    weftx.stream "compute" {
    }
  }
}

// -----

// The lowering places the input gradient's all-reduce after the weight
// gradient and the record a DP gradient bucket waits for: the record is
// passed (its waiter was never ordered after the all-reduce), so the
// all-reduce still overlaps the weight-gradient GEMM. A wait is not passed
// (it may stand for another stream's write of the all-reduce's input).

// CHECK-LABEL: weftx.program @passes_records
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.gemm {{.*}} writes(@dx[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event [[READY:[0-9]+]] phase "bwd"
// CHECK-NEXT: weftx.gemm {{.*}} writes(@dw[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.record_event 0 phase "bwd"
// CHECK-NEXT: weftx.wait_event [[DONE:[0-9]+]]
// CHECK-NEXT: weftx.launch @k reads(@dx[0 +: 64])
// CHECK: weftx.stream "tp" {
// CHECK-NEXT: weftx.wait_event [[READY]] phase "tp sum"
// CHECK-NEXT: weftx.all_reduce sum 16 x f32 on @tp
// CHECK-NEXT: weftx.record_event [[DONE]] phase "tp sum"
// CHECK-LABEL: weftx.program @stops_at_waits
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.gemm {{.*}} writes(@dx[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.gemm {{.*}} writes(@dw[0 +: 64]) phase "bwd"
// CHECK-NEXT: weftx.wait_event 1 phase "bwd"
// CHECK-NEXT: weftx.record_event [[AFTER:[0-9]+]]
// CHECK: weftx.stream "tp" {
// CHECK-NEXT: weftx.wait_event [[AFTER]] phase "tp sum"
// CHECK-NEXT: weftx.all_reduce sum 16 x f32 on @tp
module {
  weftx.mesh dp 2 pp 1 tp 2
  weftx.group @tp tp [[0, 1], [2, 3]]
  weftx.group @dp dp [[0, 2], [1, 3]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @passes_records ranks [0, 2] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @dx arena size 64 align 64 : f32
    weftx.buffer @dw arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dx[0 +: 64]) phase "bwd"
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dw[0 +: 64]) phase "bwd"
      weftx.record_event 0 phase "bwd"
      weftx.all_reduce sum 16 x f32 on @tp reads(@dx[0 +: 64]) writes(@dx[0 +: 64]) phase "tp sum"
      weftx.launch @k reads(@dx[0 +: 64])
    }
    weftx.stream "allreduce" {
      weftx.wait_event 0 phase "grad sync"
      weftx.all_reduce sum 16 x f32 on @dp reads(@dw[0 +: 64]) writes(@dw[0 +: 64]) phase "grad sync"
    }
  }
  weftx.program @stops_at_waits ranks [1, 3] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @dx arena size 64 align 64 : f32
    weftx.buffer @dw arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dx[0 +: 64]) phase "bwd"
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[0 +: 64]) writes(@dw[0 +: 64]) phase "bwd"
      weftx.wait_event 1 phase "bwd"
      weftx.all_reduce sum 16 x f32 on @tp reads(@dx[0 +: 64]) writes(@dx[0 +: 64]) phase "tp sum"
      weftx.launch @k reads(@dx[0 +: 64])
    }
    weftx.stream "side" {
      weftx.record_event 1 phase "side"
    }
  }
}
