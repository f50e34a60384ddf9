// RUN: weft-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the weftx dialect.

module {
  // expected-error @+1 {{rank 1 is served by no program}}
  weftx.mesh dp 2 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  // expected-error @+1 {{of 1 ranks does not contain rank 1 of program @r0}}
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0, 1] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  // expected-error @+1 {{rank 0 is served by programs @r0 and @r1}}
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
  weftx.program @r1 ranks [0] {
  }
}

// -----

module {
  // expected-error @+1 {{of 1 ranks does not contain rank 1 of group family @g}}
  weftx.mesh dp 1 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{is not the only weftx.mesh of the module}}
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  // expected-error @+1 {{attribute 'tp' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  weftx.mesh dp 1 pp 1 tp 0
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{a group needs at least one member}}
  weftx.group @g dp [[]]
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{a group family needs at least one group}}
  weftx.group @g dp []
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 2 tp 1
  // expected-error @+1 {{group of 1 ranks in a family of 2-rank groups (all groups of a family have the same size)}}
  weftx.group @g pp [[0, 1], [2]]
  weftx.program @r0 ranks [0, 1, 2, 3] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 2 tp 1
  // expected-error @+1 {{rank 1 is in groups 0 and 1 (the groups of a family are disjoint)}}
  weftx.group @g pp [[0, 1], [1, 2]]
  weftx.program @r0 ranks [0, 1, 2, 3] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 2 tp 1
  // expected-error @+1 {{lists 3 ranks, not a whole number of groups of 2}}
  "weftx.group"() <{sym_name = "g", kind = 1 : i32, ranks = array<i64: 0, 1, 2>, group_size = 2}> : () -> ()
  weftx.program @r0 ranks [0, 1, 2, 3] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{has a negative rank}}
  weftx.group @g dp [[-1]]
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{group 0 lists rank 0 twice}}
  weftx.group @g dp [[0, 0]]
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{file '../k.cu' must be a relative path inside the bundle}}
  weftx.kernel @k file "../k.cu" constants {} source ""
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{file 'plan.json' must be a relative path inside the bundle}}
  weftx.kernel @k file "plan.json" constants {} source ""
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{constant 'n' must be an integer}}
  weftx.kernel @k file "k.cu" constants {n = 1.0} source ""
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{name must not be empty}}
  weftx.parameter "" [64] f32 init zeros hf "x" shards []
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shape must have positive extents}}
  weftx.parameter "w" [0] f32 init zeros hf "x" shards []
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{with normal init needs a positive standard deviation}}
  weftx.parameter "w" [64] f32 init normal hf "x" shards []
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{with zeros init takes no standard deviation}}
  weftx.parameter "w" [64] f32 init zeros(1.0) hf "x" shards []
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: @nope does not name a weftx.program}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @nope, buffer = @p, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: @nope does not name a buffer of program @r0}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @nope, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: dim -1 (whole tensor) needs start 0 and length 0}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 0, dim = -1, start = 0, length = 4, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: dim 1 is outside the tensor's 1 dims}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 0, dim = 1, start = 0, length = 0, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: slice [60, 68) is outside dim 0 of extent 64}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 0, dim = 0, start = 60, length = 8, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: zero_shards must be positive}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 0, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: padded_elements 63 must be at least the slice's 64 elements and a multiple of zero_shards 1}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 63>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{shard 0: 256 bytes at offset 4 exceed buffer @p of 256 bytes}}
  weftx.parameter "w" [64] f32 init zeros hf "x" shards [#weftx.shard<role = @r0, buffer = @p, offset = 4, dim = -1, start = 0, length = 0, zero_shards = 1, padded_elements = 64>]
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r1 ranks [0] {
  }
  // expected-error @+1 {{must serve at least one rank}}
  weftx.program @r0 ranks [] {
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{lists a rank twice}}
  weftx.program @r0 ranks [0, 0] {
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "s" {
    }
    // expected-error @+1 {{name 's' is used twice}}
    weftx.stream "s" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    // expected-error @+1 {{alignment 48 is not a power of two}}
    weftx.buffer @a arena size 256 align 48 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    // expected-error @+1 {{size 6 is not a multiple of the 4-byte f32 element}}
    weftx.buffer @a arena size 6 align 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    // expected-error @+1 {{offset 32 is not a multiple of its alignment 64}}
    weftx.buffer @a arena size 256 align 64 offset 32 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] arena 256 persistent 0 {
    // expected-error @+1 {{bytes [64, 320) lie outside the arena region of 256 bytes}}
    weftx.buffer @a arena size 256 align 64 offset 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] arena 0 persistent 128 {
    // expected-error @+1 {{bytes [0, 256) lie outside the persistent region of 128 bytes}}
    weftx.buffer @p persistent size 256 align 64 offset 0 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] arena 0 persistent 0 host 128 {
    // expected-error @+1 {{bytes [64, 320) lie outside the host region of 128 bytes}}
    weftx.buffer @h host size 256 align 64 offset 64 : f32
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
      // expected-error @+1 {{cannot appear in a weftx.stream (only weftx instructions)}}
      weftx.mesh dp 1 pp 1 tp 1
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    // expected-error @+1 {{cannot appear in a weftx.program (only buffers and streams)}}
    func.func private @f()
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 0 names unknown buffer @b}}
      weftx.copy reads(@b[0 +: 4]) writes(@a[0 +: 4])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 @a[200 +: 100] is not a non-empty range inside the buffer's 256 bytes}}
      weftx.copy reads(@a[0 +: 100]) writes(@a[200 +: 100])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 0 @a[0 +: 0] is not a non-empty range inside the buffer's 256 bytes}}
      weftx.copy reads(@a[0 +: 0]) writes(@a[0 +: 0])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
      // expected-note @+1 {{first recorded here}}
      weftx.record_event 0
      // expected-error @+1 {{records event 0 a second time}}
      weftx.record_event 0
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{waits for event 3, which no record_event of the program records}}
      weftx.wait_event 3
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects exactly 0 read ranges, got 1}}
      weftx.record_event 0 reads(@a[0 +: 4])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{attribute 'event' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
      weftx.wait_event -1
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{@nope does not name a weftx.kernel}}
      weftx.launch @nope
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects exactly 2 read ranges, got 3}}
      weftx.gemm f32  m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[64 +: 64], @a[128 +: 64]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{with beta != 0 reads C as read range 2, which must equal write range 0}}
      weftx.gemm f32  m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 1.0 reads(@a[0 +: 64], @a[64 +: 64], @a[128 +: 64]) writes(@a[192 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{lda 2 is less than the 4 rows of its matrix}}
      weftx.gemm f32  m 4 n 4 k 4 lda 2 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[64 +: 64]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 1 (B) has 32 bytes but needs at least 64}}
      weftx.gemm f32 trans_a m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 reads(@a[0 +: 64], @a[64 +: 32]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects exactly 3 read ranges, got 2}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias [@bias_add] reads(@a[0 +: 64], @a[64 +: 64]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue gelu_bias folds 2 kernels, got 1}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue gelu_bias [@bias_add] reads(@a[0 +: 64], @a[64 +: 64], @a[192 +: 16]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue bias folds 1 kernel, got 2}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias [@bias_add, @bias_add] reads(@a[0 +: 64], @a[64 +: 64], @a[192 +: 16]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue dgelu needs beta 0}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 1.0 epilogue dgelu [@bias_add] reads(@a[0 +: 64], @a[64 +: 64], @a[128 +: 64], @a[192 +: 64]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue bias needs ldc == m}}
      weftx.gemm f32 m 4 n 2 k 4 lda 4 ldb 4 ldc 8 alpha 1.0 beta 0.0 epilogue bias [@bias_add] reads(@a[0 +: 64], @a[64 +: 32], @a[192 +: 16]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue bias_grad needs A not transposed with lda == m}}
      weftx.gemm f32 trans_a m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias_grad [@bias_add] reads(@a[0 +: 64], @a[64 +: 64]) writes(@a[128 +: 64], @a[192 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue kernel 0 (@residual_add) is not a bias_add}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias [@residual_add] reads(@a[0 +: 64], @a[64 +: 64], @a[192 +: 16]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{epilogue kernel @bias_add does not have the gemm's shape (m 4, n 2, k 4)}}
      weftx.gemm f32 m 4 n 2 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias [@bias_add] reads(@a[0 +: 64], @a[64 +: 32], @a[192 +: 16]) writes(@a[128 +: 32])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @bias_add file "kernels/bias_add.cu" constants {rows = 4 : i64, width = 4 : i64} source ""
  weftx.kernel @residual_add file "kernels/residual_add.cu" constants {n = 16 : i64} source ""
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{@nothing does not name a weftx.kernel}}
      weftx.gemm f32 m 4 n 4 k 4 lda 4 ldb 4 ldc 4 alpha 1.0 beta 0.0 epilogue bias [@nothing] reads(@a[0 +: 64], @a[64 +: 64], @a[192 +: 16]) writes(@a[128 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects 1 to 2 write ranges, got 3}}
      weftx.load_batch 0 writes(@a[0 +: 4], @a[4 +: 4], @a[8 +: 4])
    }
  }
}

// -----

module attributes {weftx.training = #weftx.training<global_batch = 2, seq_len = 16, precision = "fp32", micro_batch = 1, grad_accum = 2, steps_per_plan = 1, lr = 0.1, min_lr = 0.0, warmup_steps = 0, decay_steps = 0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.99, eps = 1.0e-8, grad_clip = 0.0, loss_scale = <dynamic = false, initial = 1.0, growth_interval = 0, backoff = 0.5>>} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{micro-batch 2 is outside [0, grad_accum = 2)}}
      weftx.load_batch 2 writes(@a[0 +: 4])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 has 8 bytes but a copy of read range 0 needs 4}}
      weftx.copy reads(@a[0 +: 4]) writes(@a[4 +: 8])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects at least 1 write range}}
      weftx.fill f32 0.0
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 has 6 bytes, not a whole number of f32 elements}}
      weftx.fill f32 0.0 writes(@a[0 +: 6])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{attribute 'dtype' failed to satisfy constraint: type attribute of plan element type}}
      weftx.fill i1 0.0 writes(@a[0 +: 4])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{@nope does not name a weftx.group}}
      weftx.all_reduce sum 4 x f32 on @nope reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g dp [[1]]
  weftx.program @r1 ranks [1] {
  }
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{on group family @g, which has no group containing rank 0 of program @r0}}
      weftx.all_reduce sum 4 x f32 on @g reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

// Ranks 0 and 2 share a program; rank 0 resolves @pp to [0, 1], but no group
// of @pp contains rank 2.
module {
  weftx.mesh dp 2 pp 2 tp 1
  weftx.group @pp pp [[0, 1]]
  weftx.program @rest ranks [1, 3] {
  }
  weftx.program @stage0 ranks [0, 2] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{on group family @pp, which has no group containing rank 2 of program @stage0}}
      weftx.send 4 x f32 on @pp to 1 reads(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 has 8 bytes but all_reduce of 4 x f32 needs 16}}
      weftx.all_reduce sum 4 x f32 on @g reads(@a[0 +: 16]) writes(@a[0 +: 8])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 0 has 16 bytes but reduce_scatter of 4 x f32 over 2 ranks needs 32}}
      weftx.reduce_scatter sum 4 x f32 on @g reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 has 16 bytes but all_gather of 4 x f32 over 2 ranks needs 32}}
      weftx.all_gather 4 x f32 on @g reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects one read and one write range per member, got 2 read and 1 write ranges}}
      weftx.all_reduce sum 8 x f32 on @g reads(@a[0 +: 16], @a[16 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{members hold 8 elements per rank but count is 6}}
      weftx.all_reduce sum 6 x f32 on @g reads(@a[0 +: 16], @a[16 +: 16]) writes(@a[0 +: 16], @a[16 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 1 has 6 bytes, not a whole number of f32 elements}}
      weftx.reduce_scatter sum 5 x f32 on @g reads(@a[0 +: 32], @a[32 +: 12]) writes(@a[128 +: 16], @a[144 +: 6])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 1 has 8 bytes but member 1 of all_reduce of 8 x f32 needs 16}}
      weftx.all_reduce sum 8 x f32 on @g reads(@a[0 +: 16], @a[16 +: 16]) writes(@a[0 +: 16], @a[16 +: 8])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 1 has 16 bytes but member 1 of reduce_scatter of 8 x f32 over 2 ranks needs 32}}
      weftx.reduce_scatter sum 8 x f32 on @g reads(@a[0 +: 32], @a[32 +: 16]) writes(@a[128 +: 16], @a[144 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 1 has 16 bytes but member 1 of all_gather of 8 x f32 over 2 ranks needs 32}}
      weftx.all_gather 8 x f32 on @g reads(@a[0 +: 16], @a[16 +: 16]) writes(@a[128 +: 32], @a[160 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{member 1 writes @a[16 +: 16], which member 0 reads (members must be independent)}}
      weftx.all_reduce sum 12 x f32 on @g reads(@a[0 +: 32], @a[16 +: 16]) writes(@a[64 +: 32], @a[16 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{member 0 writes @a[0 +: 32], which member 1 writes (members must be independent)}}
      weftx.all_gather 8 x f32 on @g reads(@a[64 +: 16], @a[80 +: 16]) writes(@a[0 +: 32], @a[16 +: 32])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{root 2 is outside the 2-rank groups of family @g}}
      weftx.broadcast 4 x f32 on @g root 2 writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @g world [[0, 1]]
  weftx.program @r0 ranks [0, 1] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{peer 5 is outside the 2-rank groups of family @g}}
      weftx.send 4 x f32 on @g to 5 reads(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects exactly 1 write range, got 0}}
      weftx.recv 4 x f32 on @g from 0
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{attribute 'count' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
      weftx.send 0 x f32 on @g to 0 reads(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{expects 4 to 5 read ranges, got 1}}
      weftx.optimizer_step 4 x f32 reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{read range 4 has 8 bytes but the f32 sum of squares needs 4}}
      weftx.optimizer_step 4 x f32 reads(@a[0 +: 16], @a[16 +: 16], @a[32 +: 16], @a[48 +: 16], @a[64 +: 8]) writes(@a[0 +: 16], @a[32 +: 16], @a[48 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 has 8 bytes but the f32 sum of squares needs 4}}
      weftx.grad_norm f32 reads(@a[0 +: 16]) writes(@a[16 +: 8])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{rescales read ranges 1..2 in place: needs 2 write ranges, got 1}}
      weftx.clip f32 reads(@a[0 +: 4], @a[16 +: 16], @a[32 +: 16]) writes(@a[16 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{write range 0 must equal read range 1 (clip is in place)}}
      weftx.clip f32 reads(@a[0 +: 4], @a[16 +: 16]) writes(@a[32 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @p persistent size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{releases persistent buffer @p (only arena contents can be released)}}
      weftx.release writes(@p[0 +: 16])
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.buffer @h host size 256 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{releases host buffer @h (only arena contents can be released)}}
      weftx.release writes(@h[0 +: 16])
    }
  }
}

// -----

// expected-error @+1 {{'weftx.training': global_batch 2 != micro_batch 1 x grad_accum 1 x dp 1}}
module attributes {weftx.training = #weftx.training<global_batch = 2, seq_len = 16, precision = "fp32", micro_batch = 1, grad_accum = 1, steps_per_plan = 1, lr = 0.1, min_lr = 0.0, warmup_steps = 0, decay_steps = 0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.99, eps = 1.0e-8, grad_clip = 0.0, loss_scale = <dynamic = false, initial = 1.0, growth_interval = 0, backoff = 0.5>>} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{'weftx.prediction' has 2 peak_memory_bytes entries for 1 programs (one per role)}}
module attributes {weftx.prediction = #weftx.prediction<step_time_s = 1.0, peak_memory_bytes = [1, 2], mfu = 0.5>} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{'weftx.prediction': step_time_s must not be negative and mfu must lie in [0, 1]}}
module attributes {weftx.prediction = #weftx.prediction<step_time_s = 1.0, peak_memory_bytes = [1], mfu = 1.5>} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{'weftx.model' needs a non-empty name and family}}
module attributes {weftx.model = #weftx.model<name = "", family = "gpt2">} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{'weftx.model' must be a #weftx.model, got "gpt2"}}
module attributes {weftx.model = "gpt2"} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{'weftx.config' entry 'x' must be an integer, float, bool, string, array or dictionary}}
module attributes {weftx.config = {x = [1, {y = i32}]}} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

// expected-error @+1 {{unknown weftx attribute 'weftx.bogus'}}
module attributes {weftx.bogus = 1} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{precision must be bf16, fp16 or fp32, got 'fp8'}}
  weftx.group @h dp [[0]] {x = #weftx.training<global_batch = 1, seq_len = 16, precision = "fp8", micro_batch = 1, grad_accum = 1, steps_per_plan = 1, lr = 0.1, min_lr = 0.0, warmup_steps = 0, decay_steps = 0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.99, eps = 1.0e-8, grad_clip = 0.0, loss_scale = <dynamic = false, initial = 1.0, growth_interval = 0, backoff = 0.5>>}
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}

// -----

module {
  weftx.mesh dp 1 pp 1 tp 1
  // expected-error @+1 {{'weftx.training' must be attached to a builtin.module}}
  weftx.group @h dp [[0]] {weftx.training = #weftx.training<global_batch = 1, seq_len = 16, precision = "fp32", micro_batch = 1, grad_accum = 1, steps_per_plan = 1, lr = 0.1, min_lr = 0.0, warmup_steps = 0, decay_steps = 0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.99, eps = 1.0e-8, grad_clip = 0.0, loss_scale = <dynamic = false, initial = 1.0, growth_interval = 0, backoff = 0.5>>}
  weftx.program @r0 ranks [0] {
    weftx.stream "compute" {
    }
  }
}
