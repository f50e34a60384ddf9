#!/bin/bash
# A token file for another vocabulary against a compiled bundle (called by
# compile.sh and compile-parallel.sh):
#   out-of-vocabulary.sh WEFT_RUN BUNDLE RANKS
# weft-run must fail before any step with one line naming the file, the
# token and its index (the embedding would read past its table), on every
# layout: the bound comes from the embedding, or under TP from the
# vocabulary shards together, and from the loss.
set -u
run=$1 bundle=$2 ranks=$3
fail() { echo "FAIL: $*"; exit 1; }
python3 -c "
import struct
tokens = [i % 200 for i in range(1000)]
tokens[777] = 65000
open('other-vocab.bin', 'wb').write(struct.pack('<%dH' % len(tokens), *tokens))
" || fail "token file"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$run" \
  "$bundle" --data other-vocab.bin --steps 1 >vocab.out 2>vocab.err
rc=$?
cat vocab.err
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "out-of-vocabulary tokens: exit $rc"
grep -q "other-vocab.bin: token 65000 at token index 777 is outside the model's vocabulary of" \
  vocab.err || fail "no out-of-vocabulary message"
[ "$(grep -c 'weft-run: error:' vocab.err)" -eq 1 ] || fail "not one error line"
