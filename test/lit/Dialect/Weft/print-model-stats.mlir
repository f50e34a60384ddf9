// Parameter counts and FLOPs from the IR analysis, pinned to hand-computed
// values (multiply-add = 2 FLOPs; attention scores and context per position).
// RUN: weftc import gpt2-tiny | weft-opt --weft-print-model-stats=seq-len=128 -o /dev/null | FileCheck %s --check-prefix=GPT2
// RUN: weftc import llama-tiny | weft-opt --weft-print-model-stats=seq-len=128 -o /dev/null | FileCheck %s --check-prefix=LLAMA
// RUN: weft-opt %s --weft-print-model-stats=seq-len=4 | FileCheck %s --check-prefix=IR

// gpt2-tiny: vocab 256, positions 128, hidden 64, 2 layers, ffn 256.
// embedding 256*64 + 128*64 = 24576; block: 2 LayerNorms 2*128, c_attn
// 64*192+192, c_proj 64*64+64, c_fc 64*256+256, mlp c_proj 256*64+64 = 49984;
// head: ln_f 128 (the projection is tied to wte).
// Forward FLOPs/token at seq 128: per block 2*64*192 + 2*64*64 + 2*2*64*256
// = 98304, attention 4*64*128 = 32768; head 2*64*256 = 32768;
// total 2*(98304+32768) + 32768 = 294912.
// GPT2: model @gpt2_tiny (gpt2)
// GPT2-NEXT: params: 124672
// GPT2-NEXT: embedding params: 24576
// GPT2-NEXT: blocks: 2 x 49984 params
// GPT2-NEXT: head params: 128
// GPT2-NEXT: forward flops/token at seq 128: 294912

// llama-tiny: hidden 64, 4 heads, 2 kv heads (head dim 16), ffn 176, untied.
// block: 2 RMSNorms 128, q 64*64, k/v 64*32 each, o 64*64, gate/up/down
// 3*64*176 = 46208; head: norm 64 + lm_head 256*64 = 16448.
// FLOPs/token: block 2*64*128 + 2*64*64 + 2*3*64*176 = 92160, attention
// 4*64*128 = 32768; head 32768; total 2*(92160+32768) + 32768 = 282624.
// LLAMA: model @llama_tiny (llama)
// LLAMA-NEXT: params: 125248
// LLAMA-NEXT: embedding params: 16384
// LLAMA-NEXT: blocks: 2 x 46208 params
// LLAMA-NEXT: head params: 16448
// LLAMA-NEXT: forward flops/token at seq 128: 282624

// A hand-written model whose blocks differ is reported as such; the tied
// weight is counted once, in the embedding: 16*8 = 128; blocks 8*8+8 = 72 and
// 8*8 = 64; head: norm 8 + bias 16 = 24. FLOPs/token: 2*8*8 per block plus
// the head's 2*8*16 = 512.
// IR: model @uneven (gpt2)
// IR-NEXT: params: 288
// IR-NEXT: embedding params: 128
// IR-NEXT: blocks: 2 x 72 params (not uniform)
// IR-NEXT: head params: 24
// IR-NEXT: forward flops/token at seq 4: 512
func.func @uneven(%tokens: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> attributes {weft.model = "gpt2"} {
  %wte = weft.param "wte" init(normal, 2.000000e-02) : tensor<16x8xf32>
  %x = weft.embedding %tokens, %wte : (tensor<?x?xi32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %h0 = weft.block 0(%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    %w = weft.param "b0.w" init(normal, 2.000000e-02) : tensor<8x8xf32>
    %b = weft.param "b0.b" init(zeros) : tensor<8xf32>
    %y = weft.linear %in, %w, %b : (tensor<?x?x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
    weft.yield %y : tensor<?x?x8xf32>
  }
  %h1 = weft.block 1(%h0) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    %w = weft.param "b1.w" init(normal, 2.000000e-02) : tensor<8x8xf32>
    %y = weft.linear %in, %w : (tensor<?x?x8xf32>, tensor<8x8xf32>) -> tensor<?x?x8xf32>
    weft.yield %y : tensor<?x?x8xf32>
  }
  %g = weft.param "ln.w" init(ones) : tensor<8xf32>
  %n = weft.rms_norm %h1, %g {epsilon = 1.0e-5 : f64} : tensor<?x?x8xf32>, tensor<8xf32>
  %hb = weft.param "head.b" init(zeros) : tensor<16xf32>
  %logits = weft.lm_head %n, %wte, %hb : (tensor<?x?x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<?x?x16xf32>
  %loss = weft.cross_entropy %logits, %labels : (tensor<?x?x16xf32>, tensor<?x?xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
