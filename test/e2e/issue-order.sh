#!/bin/bash
# The order weft-run issues instructions in, against the plan library's
# (registered by CMakeLists.txt):
#   issue-order.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#                  WEFT_INSPECT
# TP 2 x PP 2 1F1B gpt2-tiny on 4 ranks, whose streams issued one by one
# would submit communication in orders that cross between ranks (docs/
# plan-format.md, "Verifier", item 3). Every rank's step-1 trace, ordered by
# args.issue, must hold every instruction once, and its communication exactly
# in the order `weft-inspect program --rank R --issue-order` gives it (the
# plan's communication order, which the verifier's order check replays).
# Only the communication: the CPU backend's stream stays on a send or
# receive until it completes, so its other instructions interleave
# otherwise than plan::hostIssueOrder's, which models a host that never
# waits (the CUDA backend).
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 inspect=$7
work=$1/issue-order
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-4.json" \
  --global-batch 8 --seq-len 32 --tp 2 --pp 2 --dp 1 --micro-batch 2 \
  --schedule 1f1b -o bundle >/dev/null || fail "weftc compile"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$run" bundle \
  --data tokens.bin --steps 1 --trace trace.json --quiet ||
  fail "weft-run exited $?"
for rank in 0 1 2 3; do
  "$inspect" bundle program --rank $rank --issue-order --json >order.json ||
    fail "weft-inspect program --rank $rank --issue-order"
  python3 - "$rank" <<'PY' || fail "rank $rank: the trace's issue order is not the plan's"
import json, sys
rank = sys.argv[1]
planned = json.load(open("order.json"))["instructions"]
events = [e for e in json.load(open("trace.json." + rank))["traceEvents"]
          if e["args"]["step"] == 1]
events.sort(key=lambda e: e["args"]["issue"])
issued = [(e["args"]["stream"], e["args"]["instruction"]) for e in events]
want = [(i["stream"], i["index"]) for i in planned]
assert [e["args"]["issue"] for e in events] == list(range(len(events))), \
    "issue positions are not 0..N-1"
assert len(set(want)) == len(want), "the plan's order repeats an instruction"
assert sorted(issued) == sorted(want), \
    f"{len(issued)} instructions traced, {len(want)} in the program"
communication = {(i["stream"], i["index"]) for i in planned if "turn" in i}
issued = [at for at in issued if at in communication]
want = [at for at in want if at in communication]
if issued != want:
    first = next(k for k in range(len(want)) if issued[k] != want[k])
    sys.exit(f"communication {first}: weft-run {issued[first:first + 3]}, "
             f"weft-inspect {want[first:first + 3]}")
turns = [i["turn"] for i in planned if "turn" in i]
assert turns == list(range(len(turns))), f"turns out of order: {turns[:10]}"
assert len(turns) > 0, "no communication"
print(f"rank {rank}: {len(turns)} communications issued in the plan's order")
PY
done
# The verifier replays this order for every rank (its order check).
"$inspect" bundle verify >verify.txt || fail "verify: $(cat verify.txt)"
grep -q "communication order" verify.txt || fail "verify: $(cat verify.txt)"
echo "PASS"
