#!/bin/bash
# cuda.dispatch (registered by CMakeLists.txt):
#   dispatch.sh WORK_DIR WEFTC CHECK CLUSTER_DIR
# Compiles bf16 and fp16 bundles of gpt2-tiny and llama-tiny (serial, and
# gpt2-tiny with TP 2 for the vocabulary-parallel kernels) and requires every
# kernel instruction to take a 16-bit twin or fold into its gemm's epilogue
# (weft-cuda-dispatch-check); the serial and data-parallel (ZeRO 0-2) GPT-2
# plans fold every bias_add, bias_grad (their slots still hold the step's
# zero fill) and GELU; ZeRO-3 and full recomputation keep the GELUs whose
# output reuses their gemm's operand bytes; every plan runs its residual adds
# inside the norms: the forward's
# inside the norm after them, the backward's inside the norm backward before.
# A GPT-2 of 263 words (head dim 16, which the tensor-core attention takes),
# serial and TP 2, checks that every 16-bit gemm's rows are 16-byte aligned:
# the padded logits and vocabulary shards.
set -u
work=$1 weftc=$2 check=$3 clusters=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
compile() { # NAME MODEL PRECISION RANKS FLAGS...
  local name=$1 model=$2 precision=$3 ranks=$4; shift 4
  "$weftc" compile --model "$model" --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --precision "$precision" --dp 1 \
    --micro-batch 4 "$@" -o "$name" >/dev/null || fail "weftc compile $name"
}
compile gpt2-bf16 gpt2-tiny bf16 1
compile gpt2-fp16 gpt2-tiny fp16 1 --loss-scale 1024
compile llama-bf16 llama-tiny bf16 1
compile gpt2-bf16-tp2 gpt2-tiny bf16 2 --tp 2
# Data parallel: the gradients' all-reduce or reduce-scatter waits (through
# the plan's events) for the bias gradients, so they fold as well; ZeRO-2
# fills each slot right before its first sum (the fill folds too).
for zero in 0 1 2; do
  compile gpt2-bf16-dp2-zero$zero gpt2-tiny bf16 2 --dp 2 --micro-batch 2 \
    --zero $zero
done
# ZeRO-3 and recomputation place a GELU's output in the bytes of a buffer
# its gemm reads last (a released gathered weight, the norm output): those
# activations must not fold (cuBLASLt would write D over B).
compile gpt2-bf16-dp2-zero3 gpt2-tiny bf16 2 --dp 2 --micro-batch 2 --zero 3
compile gpt2-bf16-full gpt2-tiny bf16 1 --recompute full
cat >odd.json <<'JSON'
{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 263,
 "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": null,
 "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
 "initializer_range": 0.02, "tie_word_embeddings": true}
JSON
compile odd-bf16 "$PWD/odd.json" bf16 1
compile odd-bf16-tp2 "$PWD/odd.json" bf16 2 --tp 2
"$check" --expect-folded gpt2-bf16 gpt2-fp16 gpt2-bf16-dp2-zero0 \
  gpt2-bf16-dp2-zero1 gpt2-bf16-dp2-zero2 | tee gpt2.txt
[ "${PIPESTATUS[0]}" = 0 ] || fail "serial and data-parallel GPT-2"
"$check" gpt2-bf16-dp2-zero3 gpt2-bf16-full | tee shared.txt
[ "${PIPESTATUS[0]}" = 0 ] || fail "ZeRO-3 and recomputed GPT-2"
for bundle in gpt2-bf16-dp2-zero3 gpt2-bf16-full; do
  line=$(grep -h "^$bundle role 0:" shared.txt)
  grep -q "activation_forward 16-bit x2;" <<<"$line" ||
    fail "$bundle: a GELU folds though its output shares its gemm's operand bytes"
  grep -q "bias_grad gemm epilogue x12;" <<<"$line" ||
    fail "$bundle: bias gradients not folded"
done
"$check" llama-bf16 gpt2-bf16-tp2 odd-bf16 odd-bf16-tp2 | tee others.txt
[ "${PIPESTATUS[0]}" = 0 ] || fail "LLaMA, TP 2 and the odd vocabulary"
# All eight residual adds of the two layers run inside a norm: the forward's
# two per layer inside the norm after them, the backward's two per layer
# inside the norm backward before them, which then need not store the dx that
# only the add reads.
for bundle in gpt2-bf16 gpt2-fp16 llama-bf16 gpt2-bf16-tp2; do
  line=$(grep -h "^$bundle role 0:" gpt2.txt others.txt)
  grep -q "residual_add in the norm next to it x8;" <<<"$line" ||
    fail "$bundle: residual adds not fused into the norms"
  grep -q "norm backward dx unread x4;" <<<"$line" ||
    fail "$bundle: the norm backwards' dx is read by more than the add"
done
