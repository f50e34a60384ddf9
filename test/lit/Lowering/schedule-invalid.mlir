// What weft-schedule does not lower yet, or cannot: one error each.
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | sed 's/zero = 3 : i64/zero = 4 : i64/' | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=ZERO4
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | sed 's/recompute = "none"/recompute = "sometimes"/' | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1' --weft-autodiff | not weft-opt --weft-schedule='seq-len=7' 2>&1 | FileCheck %s --check-prefix=SP-SEQ
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=NO-BACKWARD
// RUN: weftc import gpt2-tiny | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=NO-STAGE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 persist-threshold=-2' 2>&1 | FileCheck %s --check-prefix=PERSIST
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 max-live-gathered-bytes=-1' 2>&1 | FileCheck %s --check-prefix=LIVE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=2' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 max-live-grad-bytes=-1' 2>&1 | FileCheck %s --check-prefix=LIVE-GRAD
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 precision=fp8' 2>&1 | FileCheck %s --check-prefix=PRECISION
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 loss-scale=-1' 2>&1 | FileCheck %s --check-prefix=LOSS-SCALE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 initial-loss-scale=0' 2>&1 | FileCheck %s --check-prefix=INITIAL-SCALE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 loss-scale-window=0' 2>&1 | FileCheck %s --check-prefix=SCALE-WINDOW
// RUN: weftc import bert-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=BERT
// RUN: weftc import llama-tiny | sed 's/epsilon = [^ ,}]*/epsilon = 1.000000e-30/' | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=EPSILON
// RUN: weftc import llama-tiny | sed 's/rope_theta = 1.000000e+04/rope_theta = 1.000000e+30/' | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=THETA-HUGE
// RUN: weftc import llama-tiny | sed 's/rope_theta = 1.000000e+04/rope_theta = 1.000050e+04/' | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=THETA-FRACTION

// ZERO4: error: weft-schedule: unknown ZeRO stage 4
// RECOMPUTE: error: weft-schedule: unknown recompute 'sometimes'
// SP-SEQ: error: weft-schedule: seq-len 7 is not divisible by tp = 2 (sequence parallelism)
// SEQ: error: weft-schedule: seq-len must be positive
// NO-BACKWARD: error: weft-schedule: no @gpt2_tiny_stage0_backward; run weft-autodiff first
// NO-STAGE: error: weft-schedule: no stage function; run weft-lower and weft-autodiff first
// PERSIST: error: weft-schedule: persist-threshold must be -1 (derived) or at least 0, got -2
// LIVE: error: weft-schedule: max-live-gathered-bytes must not be negative, got -1
// LIVE-GRAD: error: weft-schedule: max-live-grad-bytes must not be negative, got -1
// PRECISION: error: weft-schedule: precision must be fp32, bf16 or fp16, got 'fp8'
// LOSS-SCALE: error: weft-schedule: loss-scale must be >= 0, got -1
// INITIAL-SCALE: error: weft-schedule: initial-loss-scale must be > 0, got 0
// SCALE-WINDOW: error: weft-schedule: loss-scale-window must be >= 1, got 0
// BERT: error: weft-schedule: token types and position offsets are not lowered yet
// A theta past 2^53 overflowed the integer kernel constant (it read
// -9223372036854775808 in the rotary kernel's verifier).
// EPSILON: error: weft-schedule: norm epsilon 1.000000e-30 is outside [5e-10, 1] (kernels take it in units of 1e-9)
// THETA-HUGE: error: weft-schedule: rope_theta 1.000000e+30 is not a positive integer of at most 2^53
// THETA-FRACTION: error: weft-schedule: rope_theta 1.000050e+04 is not a positive integer of at most 2^53
