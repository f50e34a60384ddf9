#!/bin/bash
# weft-inspect fidelity and weft-run's --device-times (registered by
# CMakeLists.txt):
#   fidelity.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#               WEFT_INSPECT
# A real trace (weft-run on the CPU) and synthetic ones built from the
# bundle's own instructions, whose constants the fit must recover: the
# simulator's trace as it is (nothing to change), and gemm, attention and
# memory-bound times from known constants (a half dim of 256 included).
# Then a calibrated cluster file that weftc and weft-inspect accept, skipped
# instructions, and one-line errors for traces that do not fit the bundle.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 inspect=$7
work=$1/fidelity
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-1.json" \
  --global-batch 4 --seq-len 32 --dp 1 --micro-batch 4 --precision fp32 \
  -o bundle >/dev/null || fail "weftc compile"
timeout 120 "$run" bundle --data tokens.bin --steps 2 --trace real.json \
  --quiet || fail "weft-run exited $?"
# Device times need a trace, and a backend that times on the device.
"$run" bundle --data tokens.bin --steps 1 --device-times --quiet 2>err.txt &&
  fail "--device-times without --trace ran"
grep -q "^weft-run: error: --device-times times the instructions of --trace" \
  err.txt || fail "--device-times without --trace: $(cat err.txt)"
"$run" bundle --data tokens.bin --steps 1 --device-times --trace cpu.json \
  --quiet 2>err.txt && fail "--device-times ran on the CPU backend"
grep -q "device times: the cpu backend times instructions on the host only" \
  err.txt || fail "--device-times on the CPU: $(cat err.txt)"
[ ! -e cpu.json ] || fail "a trace was written by a run that failed to open"

# A real trace: every instruction of step 2 (the last) measured, each fitted
# class adding up to its measured total with the fitted constants.
"$inspect" bundle fidelity --measured real.json --write-cluster cal.json \
  >out.txt || fail "fidelity on weft-run's trace: $(cat out.txt)"
for line in "rank 0, step 2 of real.json" "  gemm " "  attention " \
  "  memory-bound " "matmul_peak_fraction" "wrote cal.json"; do
  grep -qF -- "$line" out.txt || fail "no '$line' in: $(cat out.txt)"
done
"$inspect" bundle fidelity --measured real.json --step 1 --json >real.out ||
  fail "fidelity --json"
python3 - <<'PY' || fail "fidelity --json of the real trace"
import json
d = json.load(open("real.out"))
plan = json.load(open("bundle/plan.json"))
size = sum(len(s["instructions"]) for s in plan["programs"][0]["streams"])
assert d["step"] == 1 and d["instructions"] == size == d["program_instructions"], d
# A constant at the end of its range (a loaded machine can time the tiny
# GEMMs far off the formula) cannot make its class add up.
clamped = {c["name"] for c in d["constants"] if c["clamped"]}
constant = {"gemm": "matmul_peak_fraction", "attention": "attention_efficiency",
            "memory-bound": "memory_bandwidth_fraction"}
for c in d["classes"]:
    if c["class"] in constant and constant[c["class"]] not in clamped:
        assert abs(c["calibrated_s"] / c["measured_s"] - 1) < 1e-9, c
assert set(d["cost_constants"]) == {"matmul_peak_fraction", "matmul_half_dim",
                                    "attention_efficiency",
                                    "memory_bandwidth_fraction"}, d
PY
# The calibrated cluster: its constants, accepted by the planner, and the
# simulation with it is fidelity's calibrated step.
python3 -c "
import json; c = json.load(open('cal.json'))['cost_constants']
assert 0 < c['matmul_peak_fraction'] <= 1 and c['matmul_half_dim'] >= 0, c" ||
  fail "cal.json: $(cat cal.json)"
"$weftc" plan --model gpt2-tiny --cluster cal.json --global-batch 4 \
  --seq-len 32 >plan.out || fail "weftc plan --cluster cal.json"
grep -q "^measured cost constants (the cluster's cost_constants): GEMMs at" \
  plan.out || fail "weftc plan does not say it uses them: $(head -3 plan.out)"
"$inspect" bundle timeline --cluster cal.json --json >timeline.out ||
  fail "timeline --cluster cal.json"
grep -q '"cluster": "cal.json (--cluster), with its measured cost_constants"' \
  timeline.out || fail "timeline does not say it costs with measured constants"
"$inspect" bundle fidelity --measured real.json --json >fit.out || fail "fit"
python3 -c "
import json
t = json.load(open('timeline.out'))['simulated_step_time_s']
f = json.load(open('fit.out'))['calibrated_simulated_step_s']
assert abs(t / f - 1) < 1e-9, (t, f)" || fail "calibrated step differs"

# Synthetic traces from the bundle's instructions: the simulator's own
# costs (weft-inspect trace) in weft-run's format, optionally rescaled.
"$inspect" bundle trace -o predicted.json >/dev/null || fail "trace"
synthetic() { # OUT MODE
  python3 - "$1" "$2" <<'PY'
import json, sys
out, mode = sys.argv[1], sys.argv[2]
plan = json.load(open("bundle/plan.json"))
kernels = {k["id"]: k["name"] for k in plan["kernels"]}
kernel_constants = {k["id"]: k.get("constants", {}) for k in plan["kernels"]}
streams = plan["programs"][0]["streams"]
events = []
for e in json.load(open("predicted.json"))["traceEvents"]:
    if e.get("ph") != "X":
        continue
    inst = streams[e["tid"]]["instructions"][e["args"]["index"]]
    dur = e["dur"]
    name = kernels.get(inst.get("kernel"), "")
    if mode == "scaled":
        if inst["op"] == "gemm":
            # 2mnk / (1 TFLOP/s x 0.5 x sat^3), sat(d) = d / (d + 256).
            sat = 1.0
            for d in (inst["m"], inst["n"], inst["k"]):
                sat *= d / (d + 256.0)
            dur = 2.0 * inst["m"] * inst["n"] * inst["k"] / (1e12 * 0.5 * sat) * 1e6
        elif name.startswith("attention_"):
            # Per (sequence, head) s x s x d and s x d x s GEMMs at those
            # constants, at an efficiency of 0.4; the backward 2.5 times.
            c = kernel_constants[inst["kernel"]]
            s, d = c["seq"], c["head_dim"]
            def gemm(m, n, k):
                sat = 1.0
                for x in (m, n, k):
                    sat *= x / (x + 256.0)
                return 2.0 * m * n * k / (1e12 * 0.5 * sat)
            dur = (c["batch"] * c["heads"] * (gemm(s, s, d) + gemm(s, d, s)) / 0.4 *
                   (1.0 if name == "attention_forward" else 2.5) * 1e6)
        elif dur > 0:
            dur *= 1.25
    elif mode == "skipped" and name.startswith("bias_add"):
        dur = 0.0
    args = {"instruction": e["args"]["index"], "step": 7,
            "stream": streams[e["tid"]]["name"]}
    # weft-run's notes split the kind.
    if mode == "noted" and name.startswith("attention_"):
        args["note"] = "cuDNN"
    events.append({"name": e["name"], "ph": "X", "pid": 0, "tid": e["tid"],
                   "ts": e["ts"], "dur": dur, "args": args})
json.dump({"traceEvents": events}, open(out, "w"))
PY
}
synthetic same.json same || fail "synthetic trace"
"$inspect" bundle fidelity --measured same.json --json >same.out ||
  fail "fidelity on the simulator's trace"
python3 - <<'PY' || fail "the simulator's own trace changed a constant"
import json
d = json.load(open("same.out"))
assert d["step"] == 7 and d["skipped"]["count"] == 0, d["skipped"]
for c in d["constants"]:
    assert abs(c["fitted"] - c["before"]) <= 1e-9 * c["before"], c
assert abs(d["calibrated_s"] / d["predicted_s"] - 1) < 1e-9
PY
synthetic scaled.json scaled || fail "synthetic trace"
"$inspect" bundle fidelity --measured scaled.json --json >scaled.out ||
  fail "fidelity on the scaled trace"
python3 - <<'PY' || fail "constants not recovered: $(cat scaled.out)"
import json
d = json.load(open("scaled.out"))
c = {x["name"]: x["fitted"] for x in d["constants"]}
close = lambda a, b: abs(a / b - 1) < 1e-6
assert c["matmul_half_dim"] == 256, c
assert close(c["matmul_peak_fraction"], 0.5), c
assert close(c["attention_efficiency"], 0.4), c
assert close(c["memory_bandwidth_fraction"], 0.75 / 1.25), c
PY
synthetic skipped.json skipped || fail "synthetic trace"
"$inspect" bundle fidelity --measured skipped.json >skipped.out ||
  fail "fidelity with skipped kernels"
grep -q "^skipped: [1-9][0-9]* instructions" skipped.out ||
  fail "no skipped line: $(cat skipped.out)"
synthetic noted.json noted || fail "synthetic trace"
"$inspect" bundle fidelity --measured noted.json --json >noted.out ||
  fail "fidelity with notes"
python3 - <<'PY' || fail "notes not honoured: $(head -c 3000 noted.out)"
import json
d = json.load(open("noted.out"))
assert d["skipped"]["count"] == 0, d["skipped"]
kinds = {k["kind"] for k in d["kinds"]}
assert "kernel attention_forward [cuDNN]" in kinds, kinds
PY

# Bad input: one line naming the file and the reason, exit 2, nothing
# written.
expect_error() { # PATTERN ARGS...
  local pattern=$1; shift
  "$inspect" bundle fidelity "$@" >err.out 2>&1
  local status=$?
  [ $status -eq 2 ] || fail "fidelity $* exited $status: $(cat err.out)"
  [ "$(wc -l <err.out)" -eq 1 ] || fail "not one line: $(cat err.out)"
  grep -qF -- "$pattern" err.out || fail "no '$pattern' in: $(cat err.out)"
}
expect_error "fidelity needs --measured TRACE"
expect_error "nope.json: cannot read the trace" --measured nope.json
mkdir -p a-dir
expect_error "a-dir: cannot read the trace" --measured a-dir
echo '{"traceEvents": [' >broken.json
expect_error "broken.json: invalid JSON" --measured broken.json
echo '{"events": []}' >other.json
expect_error "other.json: not a weft-run trace" --measured other.json
echo '{"traceEvents": []}' >empty.json
expect_error "empty.json: the trace has no events" --measured empty.json
expect_error "real.json: no events of step 9 (the trace has steps 1 to 2)" \
  --measured real.json --step 9
edit() { # OUT PYTHON-STATEMENT (on the list e of real.json's events)
  python3 -c "
import json; e = json.load(open('real.json'))['traceEvents']; $2
json.dump({'traceEvents': e}, open('$1', 'w'))"
}
edit stream.json "e[-1]['tid'] = 5"
expect_error "stream.json: traceEvents[" --measured stream.json
expect_error "is not one of rank 0's 1 streams (a trace of another bundle?)" \
  --measured stream.json
edit inst.json "e[-1]['args']['instruction'] = 100000"
expect_error "instruction 100000 of stream 'compute' is not in the bundle" \
  --measured inst.json
edit ranks.json "e[-1]['pid'] = 1"
expect_error "ranks.json: events of ranks 0 and 1" --measured ranks.json
edit twice.json "e.append(e[-1])"
expect_error "appears twice in step 2" --measured twice.json
edit dur.json "e[0]['dur'] = -3"
expect_error "dur.json: traceEvents[0]: field 'dur' must be a non-negative number, got -3" \
  --measured dur.json
edit name.json "e[-1]['args']['stream'] = 'comm'"
expect_error "is 'compute' in the bundle, 'comm' in the trace" \
  --measured name.json
expect_error "real.json: a trace of rank 0, not of rank 1" --measured real.json \
  --rank 1
expect_error "missing/cal.json: cannot write" --measured real.json \
  --write-cluster missing/cal.json
[ ! -e missing ] || fail "a directory appeared"
ls missing* cal.json.tmp 2>/dev/null && fail "a partial file was left"
echo "PASS"
