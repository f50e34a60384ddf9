// RUN: weft-opt %s -split-input-file -weft-fold-zero-fills | FileCheck %s

// A gradient slot zero-filled right before the GEMM that sums into it: the
// GEMM overwrites it (beta 0, C no longer read) and the fill goes. A fused
// weight's slot, covered row block by row block by three GEMMs (q, k, v),
// likewise; the bias beside it in the same fill stays zero-filled.

// CHECK-LABEL: weftx.program @folded
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 64], @b[0 +: 32]) writes(@g[0 +: 128])
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@bias[0 +: 16])
// CHECK-NEXT: weftx.record_event 0
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@qkv[0 +: 160])
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@qkv[16 +: 160])
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@qkv[32 +: 160])
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @folded ranks [0] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @b arena size 32 align 64 : f32
    weftx.buffer @g arena size 128 align 64 : f32
    weftx.buffer @qkv arena size 192 align 64 : f32
    weftx.buffer @bias arena size 16 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@g[0 +: 128])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @g[0 +: 128]) writes(@g[0 +: 128])
      weftx.fill f32 0.0 writes(@qkv[0 +: 192], @bias[0 +: 16])
      weftx.record_event 0
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @qkv[0 +: 160]) writes(@qkv[0 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @qkv[16 +: 160]) writes(@qkv[16 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @qkv[32 +: 160]) writes(@qkv[32 +: 160])
    }
    weftx.stream "other" {
      weftx.wait_event 0
      weftx.launch @k reads(@bias[0 +: 16]) writes(@a[0 +: 64])
    }
  }
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
}

// -----

// What keeps its fill: something reading the slot between the fill and the
// GEMM; row blocks that do not cover the slot; another stream writing the
// slot with no event ordering it; a kernel as the first writer.

// CHECK-LABEL: weftx.program @kept
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@g[0 +: 128])
// CHECK-NEXT: weftx.launch @k reads(@g[0 +: 128])
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@qkv[0 +: 192])
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@h[0 +: 128])
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@g[0 +: 128])
// CHECK-NEXT: weftx.launch @k writes(@g[0 +: 128])
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @kept ranks [0] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @b arena size 32 align 64 : f32
    weftx.buffer @g arena size 128 align 64 : f32
    weftx.buffer @h arena size 128 align 64 : f32
    weftx.buffer @qkv arena size 192 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@g[0 +: 128])
      weftx.launch @k reads(@g[0 +: 128])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @g[0 +: 128]) writes(@g[0 +: 128])
      weftx.fill f32 0.0 writes(@qkv[0 +: 192])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @qkv[0 +: 160]) writes(@qkv[0 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @qkv[16 +: 160]) writes(@qkv[16 +: 160])
      weftx.fill f32 0.0 writes(@h[0 +: 128])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @h[0 +: 128]) writes(@h[0 +: 128])
      weftx.fill f32 0.0 writes(@g[0 +: 128])
      weftx.launch @k writes(@g[0 +: 128])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @g[0 +: 128]) writes(@g[0 +: 128])
    }
    weftx.stream "other" {
      weftx.launch @k writes(@h[0 +: 128])
    }
  }
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
}

// -----

// ZeRO 0/1 fill the whole gradient buffer once, at the step's start: each
// slot inside it that GEMMs write first folds, in whatever order the
// backward meets them (here the fused q|k|v at [256, 448) before the matrix
// at [0, 128)), and the fill keeps the bytes between them: the
// bias at [128, 144), the bytes the kernel writes first at [144, 256) (a
// table the embedding's backward scatters into), and the loss. The second
// micro-batch's GEMM keeps adding (beta 1).

// CHECK-LABEL: weftx.program @whole
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@grads[128 +: 128], @loss[0 +: 4])
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@grads[256 +: 160])
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@grads[272 +: 160])
// CHECK-NEXT: weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 32], @b[0 +: 32]) writes(@grads[288 +: 160])
// CHECK-NEXT: weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.000000e+00 beta 0.000000e+00 reads(@a[0 +: 64], @b[0 +: 32]) writes(@grads[0 +: 128])
// CHECK-NEXT: weftx.launch @k writes(@grads[144 +: 112])
// CHECK-NEXT: weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.000000e+00 beta 1.000000e+00 reads(@a[0 +: 64], @b[0 +: 32], @grads[0 +: 128]) writes(@grads[0 +: 128])
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @whole ranks [0] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @b arena size 32 align 64 : f32
    weftx.buffer @grads persistent size 448 align 64 : f32
    weftx.buffer @loss persistent size 4 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 448], @loss[0 +: 4])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @grads[256 +: 160]) writes(@grads[256 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @grads[272 +: 160]) writes(@grads[272 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @grads[288 +: 160]) writes(@grads[288 +: 160])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @grads[0 +: 128]) writes(@grads[0 +: 128])
      weftx.launch @k writes(@grads[144 +: 112])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @grads[0 +: 128]) writes(@grads[0 +: 128])
    }
  }
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
}

// -----

// Within one fill, a GEMM whose slot would run past the fill's range, and
// one whose rows start inside a slot another GEMM's rows begin (the k block
// of a q|k|v that q does not start) fold nothing: the fill stays whole.

// CHECK-LABEL: weftx.program @partial
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill f32 0.000000e+00 writes(@grads[0 +: 256])
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @partial ranks [0] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.buffer @b arena size 32 align 64 : f32
    weftx.buffer @grads persistent size 448 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 256])
      weftx.gemm f32 m 8 n 4 k 2 lda 8 ldb 2 ldc 8 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @b[0 +: 32], @grads[192 +: 128]) writes(@grads[192 +: 128])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @grads[16 +: 160]) writes(@grads[16 +: 160])
      weftx.gemm f32 m 4 n 4 k 2 lda 4 ldb 2 ldc 12 alpha 1.0 beta 1.0 reads(@a[0 +: 32], @b[0 +: 32], @grads[0 +: 160]) writes(@grads[0 +: 160])
    }
  }
}
