// RUN: weft-opt %s -split-input-file -weft-generate-kernels -verify-diagnostics
// Constants are checked as the runtime's registry checks them, plus what the
// generated code relies on; launches must match the generated entries.

module {
  // expected-error @+1 {{'weftx.kernel' op (registry kernel 'layer_norm_forward') needs constant 'width'}}
  weftx.kernel @layer_norm_forward file "kernels/ln.cu" constants {rows = 4}
      source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'residual_add') has no constant 'width'}}
  weftx.kernel @residual_add file "kernels/add.cu" constants {n = 4, width = 2}
      source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'activation_forward') constant 'act' is 4, expected in [0, 3]}}
  weftx.kernel @activation_forward file "kernels/act.cu"
      constants {act = 4, n = 8} source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'bias_add') constant 'rows' is 0, expected at least 1}}
  weftx.kernel @bias_add file "kernels/bias.cu" constants {rows = 0, width = 8}
      source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'attention_forward') has 6 query heads, not a multiple of kv_heads 4}}
  weftx.kernel @attention_forward file "kernels/attn.cu"
      constants {batch = 1, seq = 4, heads = 6, kv_heads = 4, head_dim = 8}
      source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'rotary_forward') rotates pairs of a head vector: head_dim 5 is odd}}
  weftx.kernel @rotary_forward.2 file "kernels/rot.cu"
      constants {batch = 1, seq = 4, heads = 2, head_dim = 5} source ""
}

// -----

module {
  // expected-error @+1 {{(registry kernel 'embedding_forward') has 8 position rows for sequences of 16}}
  weftx.kernel @embedding_forward file "kernels/embed.cu"
      constants {batch = 1, seq = 16, hidden = 4, vocab = 10, positions = 8}
      source ""
}

// -----

module {
  weftx.kernel @residual_add file "kernels/add.cu" constants {n = 4} source ""
  weftx.program @all ranks [0] {
    weftx.buffer @a arena size 16 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{'weftx.launch' op passes 1 reads and 1 writes to @residual_add, whose generated entries take 2 and 1}}
      weftx.launch @residual_add reads(@a[0 +: 16]) writes(@a[0 +: 16])
    }
  }
}

// -----

module {
  weftx.kernel @residual_add file "kernels/add.cu" constants {n = 4} source ""
  weftx.program @all ranks [0] {
    weftx.buffer @a arena size 16 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{'weftx.launch' op passes scalar args to @residual_add, whose generated entries take none}}
      weftx.launch @residual_add args [1] reads(@a[0 +: 16], @a[0 +: 16])
          writes(@a[0 +: 16])
    }
  }
}

// -----

// Not a registry kernel: a warning, and a comment as its source.
module {
  // expected-warning @+1 {{no CUDA source is generated for kernel 'custom_op': it is not a registry kernel with a WEFT_HD implementation}}
  weftx.kernel @custom_op.1 file "kernels/custom.cu" constants {} source ""
}
