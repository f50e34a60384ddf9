// RUN: weft-opt %s -split-input-file -weft-fuse-gemm-epilogues | FileCheck %s

// An MLP's forward: the first gemm takes its bias_add and the tanh GELU
// (gelu_bias: the gemm writes the pre-activation, then the activation),
// past a record_event; the second its bias_add (bias).

// CHECK-LABEL: weftx.program @forward
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.000000e+00 beta 0.000000e+00 epilogue gelu_bias [@bias_add, @activation_forward] reads(@w[0 +: 64], @x[0 +: 32], @b[0 +: 16]) writes(@y[0 +: 64], @act[0 +: 64])
// CHECK-NEXT: weftx.record_event 0
// CHECK-NEXT: weftx.gemm bf16 m 8 n 4 k 4 {{.*}} epilogue bias [@bias_add] reads(@w[0 +: 64], @x[0 +: 32], @b[0 +: 16]) writes(@z[0 +: 64])
// CHECK-NEXT: }
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @activation_forward file "kernels/activation_forward.cu" constants {act = 2 : i64, n = 32 : i64} source ""
  weftx.program @forward ranks [0] {
    weftx.buffer @w persistent size 64 align 64 : bf16
    weftx.buffer @b persistent size 16 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @y arena size 64 align 64 : bf16
    weftx.buffer @act arena size 64 align 64 : bf16
    weftx.buffer @z arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @x[0 +: 32]) writes(@y[0 +: 64])
      weftx.record_event 0
      weftx.launch @bias_add reads(@y[0 +: 64], @b[0 +: 16]) writes(@y[0 +: 64])
      weftx.launch @activation_forward reads(@y[0 +: 64]) writes(@act[0 +: 64])
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @x[0 +: 32]) writes(@z[0 +: 64])
      weftx.launch @bias_add reads(@z[0 +: 64], @b[0 +: 16]) writes(@z[0 +: 64])
    }
  }
}

// -----

// What does not fold: a wait_event between the gemm and its bias_add
// (another stream's work comes between); the erf GELU (cuBLASLt's is the
// tanh approximation) or an accumulating gemm (beta 1), where the bias
// alone folds; a GELU writing into the gemm's own input.

// CHECK-LABEL: weftx.program @unfused
// CHECK: weftx.gemm {{.*}} writes(@y[0 +: 64])
// CHECK-NEXT: weftx.wait_event 0
// CHECK-NEXT: weftx.launch @bias_add
// CHECK-NEXT: weftx.gemm {{.*}} epilogue bias [@bias_add] {{.*}} writes(@y[0 +: 64])
// CHECK-NEXT: weftx.launch @activation_forward.1
// CHECK-NEXT: weftx.gemm {{.*}} beta 1.000000e+00 epilogue bias [@bias_add] {{.*}} writes(@y[0 +: 64])
// CHECK-NEXT: weftx.launch @activation_forward reads
// CHECK-NEXT: weftx.gemm {{.*}} epilogue bias [@bias_add] reads(@w[0 +: 64], @y[0 +: 32], @b[0 +: 16]) writes(@z[0 +: 64])
// CHECK-NEXT: weftx.launch @activation_forward reads(@z[0 +: 64]) writes(@y[0 +: 64])
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.kernel @activation_forward file "kernels/activation_forward.cu" constants {act = 2 : i64, n = 32 : i64} source ""
  weftx.kernel @activation_forward.1 file "kernels/activation_forward.1.cu" constants {act = 1 : i64, n = 32 : i64} source ""
  weftx.program @unfused ranks [0] {
    weftx.buffer @w persistent size 64 align 64 : bf16
    weftx.buffer @b persistent size 16 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @y arena size 64 align 64 : bf16
    weftx.buffer @act arena size 64 align 64 : bf16
    weftx.buffer @z arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @x[0 +: 32]) writes(@y[0 +: 64])
      weftx.wait_event 0
      weftx.launch @bias_add reads(@y[0 +: 64], @b[0 +: 16]) writes(@y[0 +: 64])
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @x[0 +: 32]) writes(@y[0 +: 64])
      weftx.launch @bias_add reads(@y[0 +: 64], @b[0 +: 16]) writes(@y[0 +: 64])
      weftx.launch @activation_forward.1 reads(@y[0 +: 64]) writes(@act[0 +: 64])
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 1.0 reads(@w[0 +: 64], @x[0 +: 32], @y[0 +: 64]) writes(@y[0 +: 64])
      weftx.launch @bias_add reads(@y[0 +: 64], @b[0 +: 16]) writes(@y[0 +: 64])
      weftx.launch @activation_forward reads(@y[0 +: 64]) writes(@act[0 +: 64])
      weftx.gemm bf16 m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @y[0 +: 32]) writes(@z[0 +: 64])
      weftx.launch @bias_add reads(@z[0 +: 64], @b[0 +: 16]) writes(@z[0 +: 64])
      weftx.launch @activation_forward reads(@z[0 +: 64]) writes(@y[0 +: 64])
    }
    weftx.stream "other" {
      weftx.record_event 0
    }
  }
}

// -----

// The backward: the input gradient's gemm takes the GELU backward (dgelu,
// reading the pre-activation); the weight gradient's (beta 1, A = dy
// untransposed) the bias gradient into a slot the fill before left zero,
// which another stream reduces only after waiting for it (bias_grad). A
// second micro-batch's bias gradient adds to the first's: it stays.

// CHECK-LABEL: weftx.program @backward
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.fill bf16 0.000000e+00 writes(@g[0 +: 16])
// CHECK-NEXT: weftx.gemm bf16 trans_a m 8 n 4 k 4 {{.*}} epilogue dgelu [@activation_backward] reads(@w[0 +: 64], @dz[0 +: 32], @pre[0 +: 64]) writes(@dy[0 +: 64])
// CHECK-NEXT: weftx.gemm bf16 trans_b m 8 n 4 k 4 {{.*}} beta 1.000000e+00 epilogue bias_grad [@bias_grad] reads(@dy[0 +: 64], @x[0 +: 32], @dw[0 +: 64]) writes(@dw[0 +: 64], @g[0 +: 16])
// CHECK-NEXT: weftx.gemm bf16 trans_b {{.*}} writes(@dw[0 +: 64])
// CHECK-NEXT: weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
// CHECK-NEXT: weftx.record_event 0
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.group @world world [[0]]
  weftx.kernel @activation_backward file "kernels/activation_backward.cu" constants {act = 2 : i64, n = 32 : i64} source ""
  weftx.kernel @bias_grad file "kernels/bias_grad.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.program @backward ranks [0] {
    weftx.buffer @w persistent size 64 align 64 : bf16
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dw persistent size 64 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @dz arena size 32 align 64 : bf16
    weftx.buffer @pre arena size 64 align 64 : bf16
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.fill bf16 0.0 writes(@g[0 +: 16])
      weftx.gemm bf16 trans_a m 8 n 4 k 4 lda 4 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@w[0 +: 64], @dz[0 +: 32]) writes(@dy[0 +: 64])
      weftx.launch @activation_backward reads(@pre[0 +: 64], @dy[0 +: 64]) writes(@dy[0 +: 64])
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 1.0 reads(@dy[0 +: 64], @x[0 +: 32], @dw[0 +: 64]) writes(@dw[0 +: 64])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 1.0 reads(@dy[0 +: 64], @x[0 +: 32], @dw[0 +: 64]) writes(@dw[0 +: 64])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
      weftx.record_event 0
    }
    weftx.stream "dp" {
      weftx.wait_event 0
      weftx.all_reduce sum 8 x bf16 on @world reads(@g[0 +: 16]) writes(@g[0 +: 16])
    }
  }
}

// -----

// The bias gradient stays where another stream may write its slot before
// it has run (no event orders them), and where nothing on its stream filled
// the slot with zeros.

// CHECK-LABEL: weftx.program @racing
// CHECK: weftx.gemm bf16 trans_b {{.*}} writes(@dw[0 +: 64])
// CHECK-NEXT: weftx.launch @bias_grad
// CHECK-LABEL: weftx.program @unfilled
// CHECK: weftx.gemm bf16 trans_b {{.*}} writes(@dw[0 +: 64])
// CHECK-NEXT: weftx.launch @bias_grad
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.kernel @bias_grad file "kernels/bias_grad.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.program @racing ranks [0] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dw persistent size 64 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.fill bf16 0.0 writes(@g[0 +: 16])
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 1.0 reads(@dy[0 +: 64], @x[0 +: 32], @dw[0 +: 64]) writes(@dw[0 +: 64])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
    }
    weftx.stream "other" {
      weftx.fill bf16 1.0 writes(@g[0 +: 16])
    }
  }
  weftx.program @unfilled ranks [1] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dw persistent size 64 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 1.0 reads(@dy[0 +: 64], @x[0 +: 32], @dw[0 +: 64]) writes(@dw[0 +: 64])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
    }
  }
}

// -----

// A row-parallel layer's replicated bias under tensor parallelism: its
// backward takes the bias gradient before the weight gradient's gemm of the
// same dy, which folds it (a release between is passed over). With a
// record_event between, another stream could read the gradient before the
// gemm that would now write it: it stays.

// CHECK-LABEL: weftx.program @before
// CHECK: weftx.fill bf16 0.000000e+00 writes(@g[0 +: 16])
// CHECK-NEXT: weftx.fill bf16 0.000000e+00 writes(@z[0 +: 64])
// CHECK-NEXT: weftx.release writes(@z[0 +: 64])
// CHECK-NEXT: weftx.gemm bf16 trans_b m 8 n 4 k 4 {{.*}} epilogue bias_grad [@bias_grad] reads(@dy[0 +: 64], @x[0 +: 32]) writes(@dw[0 +: 64], @g[0 +: 16])
// CHECK-NEXT: weftx.record_event 0
// CHECK-LABEL: weftx.program @announced
// CHECK: weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
// CHECK-NEXT: weftx.record_event 0
// CHECK-NEXT: weftx.gemm bf16 trans_b {{.*}} writes(@dw[0 +: 64])
module {
  weftx.mesh dp 1 pp 1 tp 2
  weftx.group @tp world [[0, 1]]
  weftx.kernel @bias_grad file "kernels/bias_grad.cu" constants {rows = 4 : i64, width = 8 : i64} source ""
  weftx.program @before ranks [0] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dw persistent size 64 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.buffer @z arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.fill bf16 0.0 writes(@g[0 +: 16])
      weftx.fill bf16 0.0 writes(@z[0 +: 64])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
      weftx.release writes(@z[0 +: 64])
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@dy[0 +: 64], @x[0 +: 32]) writes(@dw[0 +: 64])
      weftx.record_event 0
    }
    weftx.stream "dp" {
      weftx.wait_event 0
      weftx.all_reduce sum 8 x bf16 on @tp reads(@g[0 +: 16]) writes(@g[0 +: 16])
    }
  }
  weftx.program @announced ranks [1] {
    weftx.buffer @g persistent size 16 align 64 : bf16
    weftx.buffer @dw persistent size 64 align 64 : bf16
    weftx.buffer @x arena size 32 align 64 : bf16
    weftx.buffer @dy arena size 64 align 64 : bf16
    weftx.stream "compute" {
      weftx.fill bf16 0.0 writes(@g[0 +: 16])
      weftx.launch @bias_grad reads(@dy[0 +: 64]) writes(@g[0 +: 16])
      weftx.record_event 0
      weftx.gemm bf16 trans_b m 8 n 4 k 4 lda 8 ldb 4 ldc 8 alpha 1.0 beta 0.0 reads(@dy[0 +: 64], @x[0 +: 32]) writes(@dw[0 +: 64])
    }
    weftx.stream "dp" {
      weftx.wait_event 0
      weftx.all_reduce sum 8 x bf16 on @tp reads(@g[0 +: 16]) writes(@g[0 +: 16])
    }
  }
}
