#!/bin/bash
# cuda.dispatch (registered by CMakeLists.txt):
#   dispatch.sh WORK_DIR WEFTC CHECK CLUSTER_DIR
# Compiles bf16 and fp16 bundles of gpt2-tiny and llama-tiny (serial, and
# gpt2-tiny with TP 2 for the vocabulary-parallel kernels) and requires every
# kernel instruction to take a 16-bit twin (weft-cuda-dispatch-check); the
# GPT-2 plans, compiled with --gemm-epilogues, serial, data-parallel (ZeRO
# 0-3) and fully recomputed, have every bias_add, bias_grad (their slots
# still hold the step's zero fill) and GELU folded into a gemm's epilogue;
# every plan compiled with --residual-norms runs its residual adds inside the
# norms: the forward's inside the norm after them, the backward's inside the
# norm backward before (which then stores no dx).
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
compile gpt2-bf16 gpt2-tiny bf16 1 --gemm-epilogues --residual-norms
compile gpt2-fp16 gpt2-tiny fp16 1 --loss-scale 1024 --gemm-epilogues \
  --residual-norms
compile llama-bf16 llama-tiny bf16 1 --residual-norms
compile gpt2-bf16-tp2 gpt2-tiny bf16 2 --tp 2 --residual-norms
# Data parallel: the gradients' all-reduce or reduce-scatter waits (through
# the plan's events) for the bias gradients, so they fold as well; ZeRO-2
# fills each slot right before its first sum (the fill folds too).
for zero in 0 1 2 3; do
  compile gpt2-bf16-dp2-zero$zero gpt2-tiny bf16 2 --dp 2 --micro-batch 2 \
    --zero $zero --gemm-epilogues --residual-norms
done
# Full recomputation: memory planning sees the fused gemm as one
# instruction, so a GELU's output no longer lands in the bytes of the norm
# output its gemm reads (which kept it unfused when the runtime matched).
compile gpt2-bf16-full gpt2-tiny bf16 1 --recompute full --gemm-epilogues \
  --residual-norms
cat >odd.json <<'JSON'
{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 263,
 "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": null,
 "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
 "initializer_range": 0.02, "tie_word_embeddings": true}
JSON
compile odd-bf16 "$PWD/odd.json" bf16 1
compile odd-bf16-tp2 "$PWD/odd.json" bf16 2 --tp 2
"$check" --expect-folded gpt2-bf16 gpt2-fp16 gpt2-bf16-dp2-zero0 \
  gpt2-bf16-dp2-zero1 gpt2-bf16-dp2-zero2 gpt2-bf16-dp2-zero3 \
  gpt2-bf16-full | tee gpt2.txt
[ "${PIPESTATUS[0]}" = 0 ] || fail "GPT-2 with GEMM epilogues"
for bundle in gpt2-bf16 gpt2-bf16-dp2-zero3 gpt2-bf16-full; do
  n=$(grep -o '"epilogue": *"[a-z_]*"' "$bundle/plan.json" | sort -u | wc -l)
  [ "$n" = 4 ] || fail "$bundle: $n of the 4 epilogue kinds in its plan"
done
"$check" llama-bf16 gpt2-bf16-tp2 odd-bf16 odd-bf16-tp2 | tee others.txt
[ "${PIPESTATUS[0]}" = 0 ] || fail "LLaMA, TP 2 and the odd vocabulary"
# All eight residual adds of the two layers run inside a norm: the forward's
# two per layer inside the norm after them, the backward's two per layer
# inside the norm backward before them.
for bundle in gpt2-bf16 gpt2-fp16 llama-bf16 gpt2-bf16-tp2 \
  gpt2-bf16-dp2-zero0 gpt2-bf16-dp2-zero3; do
  line=$(grep -h "^$bundle role 0:" gpt2.txt others.txt)
  norm=layer_norm
  [ "$bundle" = llama-bf16 ] && norm=rms_norm
  grep -q " residual_add " <<<"$line" &&
    fail "$bundle: a residual add outside the norms"
  grep -q " residual_${norm}_forward 16-bit x4;" <<<"$line" ||
    fail "$bundle: not four residual_${norm}_forward"
  grep -q " ${norm}_backward_add 16-bit x4;" <<<"$line" ||
    fail "$bundle: not four ${norm}_backward_add"
done
