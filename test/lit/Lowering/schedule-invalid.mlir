// What weft-schedule does not lower yet, or cannot: one error each.
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | sed 's/zero = 3 : i64/zero = 4 : i64/' | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=ZERO4
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | sed 's/recompute = "none"/recompute = "sometimes"/' | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1 micro-batch=2' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=SP-BATCH
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1' --weft-autodiff | not weft-opt --weft-schedule='seq-len=7' 2>&1 | FileCheck %s --check-prefix=SP-SEQ
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=NO-BACKWARD
// RUN: weftc import gpt2-tiny | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=NO-STAGE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 persist-threshold=-2' 2>&1 | FileCheck %s --check-prefix=PERSIST
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3' --weft-autodiff | not weft-opt --weft-schedule='seq-len=8 max-live-gathered-bytes=-1' 2>&1 | FileCheck %s --check-prefix=LIVE
// RUN: weftc import bert-tiny | weft-opt --weft-lower --weft-autodiff | not weft-opt --weft-schedule='seq-len=8' 2>&1 | FileCheck %s --check-prefix=BERT

// ZERO4: error: weft-schedule: unknown ZeRO stage 4
// RECOMPUTE: error: weft-schedule: unknown recompute 'sometimes'
// SP-BATCH: error: weft-schedule: sequence parallelism needs micro-batch 1, got 2
// SP-SEQ: error: weft-schedule: seq-len 7 is not divisible by tp = 2 (sequence parallelism)
// SEQ: error: weft-schedule: seq-len must be positive
// NO-BACKWARD: error: weft-schedule: no @gpt2_tiny_stage0_backward; run weft-autodiff first
// NO-STAGE: error: weft-schedule: no stage function; run weft-lower and weft-autodiff first
// PERSIST: error: weft-schedule: persist-threshold must be -1 (derived) or at least 0, got -2
// LIVE: error: weft-schedule: max-live-gathered-bytes must not be negative, got -1
// BERT: error: weft-schedule: token types and position offsets are not lowered yet
