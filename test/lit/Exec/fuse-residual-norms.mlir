// RUN: weft-opt %s -split-input-file -weft-fuse-residual-norms | FileCheck %s

// A block end, forward and backward: the residual add runs inside the
// LayerNorm after it (past a record_event), and inside the LayerNorm
// backward before it (past a release), whose dx leaves the program. Two
// fusions with the same constants share a declaration; the kernels nothing
// launches any more go.

// CHECK-LABEL: module
// CHECK-NOT: weftx.kernel @residual_add
// CHECK-NOT: weftx.kernel @layer_norm_forward
// CHECK: weftx.kernel @other
// CHECK-NEXT: weftx.kernel @residual_layer_norm_forward file "kernels/residual_layer_norm_forward.cu" constants {bias = 1 : i64, rows = 4 : i64, width = 8 : i64}
// CHECK-NEXT: weftx.kernel @layer_norm_backward_add file "kernels/layer_norm_backward_add.cu" constants {bias = 1 : i64, rows = 4 : i64, width = 8 : i64}
// CHECK-LABEL: weftx.program @block
// CHECK-NOT: weftx.buffer @dx
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.launch @residual_layer_norm_forward reads(@a[0 +: 64], @b[0 +: 64], @g[0 +: 16], @be[0 +: 16]) writes(@sum[0 +: 64], @y[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16]) phase "fwd"
// CHECK-NEXT: weftx.record_event 0
// CHECK-NEXT: weftx.launch @residual_layer_norm_forward reads(@sum[0 +: 64], @b[0 +: 64], @g[0 +: 16], @be[0 +: 16]) writes(@sum2[0 +: 64], @y2[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16]) phase "fwd"
// CHECK-NEXT: weftx.launch @layer_norm_backward_add reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64], @other[0 +: 64]) writes(@out[0 +: 64], @dg[0 +: 16], @db[0 +: 16]) phase "bwd"
// CHECK-NEXT: weftx.release writes(@y[0 +: 64])
// CHECK-NEXT: weftx.launch @other
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 32 : i64} source ""
  weftx.kernel @layer_norm_forward file "kernels/layer_norm_forward.cu" constants {bias = 1 : i64, rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @layer_norm_backward file "kernels/layer_norm_backward.cu" constants {bias = 1 : i64, rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @other file "kernels/other.cu" constants {n = 32 : i64} source ""
  weftx.program @block ranks [0] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @be persistent size 16 align 64 : bf16
    weftx.buffer @dg persistent size 16 align 64 : bf16
    weftx.buffer @db persistent size 16 align 64 : bf16
    weftx.buffer @a arena size 64 align 64 : bf16
    weftx.buffer @b arena size 64 align 64 : bf16
    weftx.buffer @sum arena size 64 align 64 : bf16
    weftx.buffer @sum2 arena size 64 align 64 : bf16
    weftx.buffer @y arena size 64 align 64 : bf16
    weftx.buffer @y2 arena size 64 align 64 : bf16
    weftx.buffer @mean arena size 16 align 64 : f32
    weftx.buffer @rstd arena size 16 align 64 : f32
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.buffer @dx arena size 64 align 64 : bf16
    weftx.buffer @other arena size 64 align 64 : bf16
    weftx.buffer @out arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64]) phase "fwd"
      weftx.record_event 0
      weftx.launch @layer_norm_forward reads(@sum[0 +: 64], @g[0 +: 16], @be[0 +: 16]) writes(@y[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16]) phase "fwd2"
      weftx.launch @residual_add reads(@sum[0 +: 64], @b[0 +: 64]) writes(@sum2[0 +: 64]) phase "fwd"
      weftx.launch @layer_norm_forward reads(@sum2[0 +: 64], @g[0 +: 16], @be[0 +: 16]) writes(@y2[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16])
      weftx.launch @layer_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64]) writes(@dx[0 +: 64], @dg[0 +: 16], @db[0 +: 16]) phase "bwd"
      weftx.release writes(@y[0 +: 64])
      weftx.launch @residual_add reads(@dx[0 +: 64], @other[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @other reads(@out[0 +: 64]) writes(@a[0 +: 64])
    }
  }
}

// -----

// RMSNorm: the add's dx second, and a sum of other constants (a kernel
// `.1`); the norm kernels the unfused pairs launch stay.

// CHECK-LABEL: module
// CHECK: weftx.kernel @residual_rms_norm_forward file {{.*}} constants {rows = 4 : i64, width = 8 : i64}
// CHECK-NEXT: weftx.kernel @rms_norm_backward_add file {{.*}} constants {rows = 4 : i64, width = 8 : i64}
// CHECK-NEXT: weftx.kernel @residual_rms_norm_forward.1 file "kernels/residual_rms_norm_forward.1.cu" constants {eps_nano = 5 : i64, rows = 4 : i64, width = 8 : i64}
// CHECK-LABEL: weftx.program @rms
// CHECK-NEXT: weftx.buffer @g
// CHECK-NOT: weftx.buffer @dx
// CHECK: weftx.launch @residual_rms_norm_forward reads(@a[0 +: 64], @b[0 +: 64], @g[0 +: 16]) writes(@sum[0 +: 64], @y[0 +: 64], @rstd[0 +: 16])
// CHECK-NEXT: weftx.launch @rms_norm_backward_add reads(@sum[0 +: 64], @g[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64], @other[0 +: 64]) writes(@out[0 +: 64], @dg[0 +: 16])
// CHECK-NEXT: weftx.launch @residual_rms_norm_forward.1 reads(@a[0 +: 64], @b[0 +: 64], @g[0 +: 16])
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 32 : i64} source ""
  weftx.kernel @rms_norm_forward file "kernels/rms_norm_forward.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @rms_norm_forward.1 file "kernels/rms_norm_forward.1.cu" constants {eps_nano = 5 : i64, rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @rms_norm_backward file "kernels/rms_norm_backward.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.program @rms ranks [0] {
    weftx.buffer @g persistent size 16 align 64 : f32
    weftx.buffer @dg persistent size 16 align 64 : f32
    weftx.buffer @a arena size 128 align 64 : f32
    weftx.buffer @b arena size 128 align 64 : f32
    weftx.buffer @sum arena size 128 align 64 : f32
    weftx.buffer @y arena size 128 align 64 : f32
    weftx.buffer @rstd arena size 16 align 64 : f32
    weftx.buffer @dy arena size 128 align 64 : f32
    weftx.buffer @dx arena size 128 align 64 : f32
    weftx.buffer @other arena size 128 align 64 : f32
    weftx.buffer @out arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64])
      weftx.launch @rms_norm_forward reads(@sum[0 +: 64], @g[0 +: 16]) writes(@y[0 +: 64], @rstd[0 +: 16])
      weftx.launch @rms_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64]) writes(@dx[0 +: 64], @dg[0 +: 16])
      weftx.launch @residual_add reads(@other[0 +: 64], @dx[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64])
      weftx.launch @rms_norm_forward.1 reads(@sum[0 +: 64], @g[0 +: 16]) writes(@y[0 +: 64], @rstd[0 +: 16])
    }
  }
}

// -----

// What stays apart: a wait_event between them (another stream's work comes
// between); the norm over another range than the sum; an add of another
// size; y written over a, which the add reads; dx another instruction reads
// too, or in the persistent region; dx + dx; an add before the backward.

// CHECK-LABEL: weftx.program @apart
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.wait_event 0
// CHECK-NEXT: weftx.launch @layer_norm_forward reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @layer_norm_forward reads
// CHECK-NEXT: weftx.launch @residual_add.1 reads
// CHECK-NEXT: weftx.launch @layer_norm_forward reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @layer_norm_forward reads
// CHECK-NEXT: weftx.launch @layer_norm_backward reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @layer_norm_backward reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @layer_norm_backward reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @residual_add reads
// CHECK-NEXT: weftx.launch @layer_norm_backward reads
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 32 : i64} source ""
  weftx.kernel @residual_add.1 file "kernels/residual_add.1.cu" constants {n = 16 : i64} source ""
  weftx.kernel @layer_norm_forward file "kernels/layer_norm_forward.cu" constants {bias = 0 : i64, rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @layer_norm_backward file "kernels/layer_norm_backward.cu" constants {bias = 0 : i64, rows = 4 : i64, width = 8 : i64} source ""
  weftx.program @apart ranks [0] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dg persistent size 16 align 64 : bf16
    weftx.buffer @pdx persistent size 64 align 64 : bf16
    weftx.buffer @a arena size 64 align 64 : bf16
    weftx.buffer @b arena size 64 align 64 : bf16
    weftx.buffer @sum arena size 64 align 64 : bf16
    weftx.buffer @y arena size 64 align 64 : bf16
    weftx.buffer @mean arena size 16 align 64 : f32
    weftx.buffer @rstd arena size 16 align 64 : f32
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.buffer @dx arena size 64 align 64 : bf16
    weftx.buffer @out arena size 64 align 64 : bf16
    weftx.buffer @dx2 arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64])
      weftx.wait_event 0
      weftx.launch @layer_norm_forward reads(@sum[0 +: 64], @g[0 +: 16]) writes(@y[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16])
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64])
      weftx.launch @layer_norm_forward reads(@b[0 +: 64], @g[0 +: 16]) writes(@y[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16])
      weftx.launch @residual_add.1 reads(@a[0 +: 32], @b[0 +: 32]) writes(@sum[0 +: 32])
      weftx.launch @layer_norm_forward reads(@sum[0 +: 64], @g[0 +: 16]) writes(@y[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16])
      weftx.launch @residual_add reads(@a[0 +: 64], @b[0 +: 64]) writes(@sum[0 +: 64])
      weftx.launch @layer_norm_forward reads(@sum[0 +: 64], @g[0 +: 16]) writes(@a[0 +: 64], @mean[0 +: 16], @rstd[0 +: 16])
      weftx.launch @layer_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64]) writes(@dx[0 +: 64], @dg[0 +: 16])
      weftx.launch @residual_add reads(@dx[0 +: 64], @b[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @layer_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64]) writes(@pdx[0 +: 64], @dg[0 +: 16])
      weftx.launch @residual_add reads(@pdx[0 +: 64], @b[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @layer_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @dy[0 +: 64]) writes(@dx2[0 +: 64], @dg[0 +: 16])
      weftx.launch @residual_add reads(@dx2[0 +: 64], @dx2[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @residual_add reads(@dy[0 +: 64], @b[0 +: 64]) writes(@out[0 +: 64])
      weftx.launch @layer_norm_backward reads(@sum[0 +: 64], @g[0 +: 16], @mean[0 +: 16], @rstd[0 +: 16], @out[0 +: 64]) writes(@dx[0 +: 64], @dg[0 +: 16])
    }
    weftx.stream "other" {
      weftx.record_event 0
      weftx.launch @residual_add reads(@dx[0 +: 64], @b[0 +: 64]) writes(@y[0 +: 64])
    }
  }
}
