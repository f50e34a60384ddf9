#!/usr/bin/env bash
# CLI tests of weft-inspect: cli.sh CASE WEFT_INSPECT TESTGEN WORKDIR.
# Each check prints what it ran when it fails; the script exits 1 on the
# first failure.
set -u
case_name=$1 inspect=$2 testgen=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$testgen" "$work" || { echo "FAIL: testgen"; exit 1; }
cd "$work"

fail() { echo "FAIL [$case_name]: $*"; exit 1; }
# run EXPECTED_STATUS ARGS...: run weft-inspect, keep stdout/stderr in out/err.
run() {
  local expected=$1; shift
  "$inspect" "$@" >out 2>err
  local status=$?
  [ "$status" -eq "$expected" ] ||
    fail "weft-inspect $* exited $status, expected $expected; stderr: $(cat err)"
}
has() { grep -qF -- "$1" out || fail "output lacks '$1':"$'\n'"$(cat out)"; }
json_ok() {
  python3 -c 'import json,sys; d=json.load(open("out")); '"$1" ||
    fail "JSON check '$1' failed on:"$'\n'"$(head -c 2000 out)"
}

case $case_name in
summary)
  run 0 zero3 summary --cluster dgx-a100-80g
  has "model: tiny (gpt2), 64 parameters"
  has "mesh: dp=2 pp=1 tp=1 (2 ranks"
  has "cluster: dgx-a100-80g (--cluster)"
  has "predicted step: 125.000 ms, MFU 40.0%"
  has "role 0 (stage 0, ranks 0-1)"
  has "role 0 (stage 0, ranks 0-1): 32 parameters held"
  # Categories come from the instructions and the parameter records: the
  # ZeRO shard is a parameter, what the all_gather writes a gathered one.
  has "params            128 B"
  has "gathered          256 B"
  has "other             0 B"
  run 0 pp summary --json
  json_ok 'assert [r["stage"] for r in d["roles"]] == [0, 1]; assert "default" in d["cluster"]["source"]'
  ;;
program)
  run 0 pp program --rank 1
  has "rank 1 (role 1, dp 0 pp 1 tp 0): 3 instructions"
  has "    0  compute      recv           32 x f32 from rank 0 (group 0 of family 0)  writes act[0:128]  ; fwd"
  run 0 zero3 program --rank 0 --stream allgather --json
  json_ok 'assert [i["op"] for i in d["instructions"]] == ["all_gather", "record_event"]'
  # Issue order: a position per instruction, the communication's turns.
  run 0 pp program --rank 1 --issue-order
  has "     2      2  compute      send           32 x f32 to rank 0 (group 0 of family 0)  reads act.grad[0:128]  ; bwd  [communication 1]"
  run 0 zero3 program --rank 0 --issue-order --json
  json_ok 'assert [i["issue"] for i in d["instructions"]] == list(range(len(d["instructions"]))); t = [i["turn"] for i in d["instructions"] if "turn" in i]; assert t == list(range(len(t))) and t, t'
  run 2 zero3 program --rank 5
  grep -q "rank 5" err || fail "no rank in: $(cat err)"
  run 2 zero3 program --rank 0 --stream nope
  run 2 zero3 program
  ;;
memory)
  run 0 zero3 memory --rank 1
  has "<- peak"
  has "live at the peak:"
  has "w.shard                 persistent params            128 B"
  has "w.full                  arena      gathered          256 B"
  run 0 dp memory --rank 0 --json
  json_ok 'c = {b["name"]: b["category"] for b in d["live_at_peak"]}; assert c["w"] == "params" and c["w.grad"] == "gradients" and c["w.exp_avg"] == "optimizer_states", c' 
  run 0 gpipe memory --rank 3 --json
  json_ok 'assert d["peak_bytes"] <= d["planned_bytes"] and d["samples"][0]["time_s"] == 0'
  ;;
timeline)
  run 0 pp timeline
  has "simulated step:"
  has "bubble per stage"
  has "  stage 1:"
  has "send_recv/pp"
  has "why the two differ:"
  run 0 gpipe timeline --json --cluster dgx-h100-80g
  json_ok 'assert len(d["bubble_s_by_stage"]) == 2 and "all_reduce/tp" in d["exposed_comm_s"] and d["simulated_step_time_s"] > 0'
  ;;
trace)
  run 0 gpipe trace -o trace.json
  has "wrote trace.json"
  python3 - <<'PY' || fail "bad trace"
import json
d = json.load(open("trace.json"))
ev = d["traceEvents"]
procs = {e["pid"] for e in ev if e["name"] == "process_name"}
assert procs == set(range(8)), procs
threads = {(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "thread_name"}
assert (0, "compute") in threads and (7, "reducescatter") in threads
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in ev if e["ph"] == "X")
PY
  run 2 gpipe trace
  ;;
html)
  run 0 pp html -o report.html --json
  json_ok 'assert d["output"] == "report.html"'
  python3 - <<'PY' || fail "bad html structure"
from html.parser import HTMLParser
html = open("report.html").read()
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.ids = set(); self.tags = []
    def handle_starttag(self, tag, attrs):
        self.tags.append(tag); self.ids |= {v for k, v in attrs if k == "id"}
p = P(); p.feed(html)
assert {"summary", "schedule", "memory", "memory-categories", "overlap"} <= p.ids, p.ids
assert p.tags.count("svg") == 3 and "script" not in p.tags and "link" not in p.tags
assert "http" not in html
PY
  chromium=$(command -v chromium || command -v chromium-browser || true)
  if [ -z "$chromium" ]; then
    echo "SKIPPED: chromium not installed; the rendering check did not run"
  else
    timeout 120 "$chromium" --headless --no-sandbox --disable-gpu \
      --user-data-dir="$work/chrome" --window-size=1280,900 \
      --screenshot="$work/report.png" "file://$work/report.html" >/dev/null 2>&1
    [ -s report.png ] || fail "chromium wrote no screenshot"
    python3 - <<'PY' || fail "screenshot is not a rendered page"
import struct
data = open("report.png", "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (1280, 900), (width, height)
assert len(data) > 5000, len(data)  # a blank page compresses to ~1-3 KB
PY
    timeout 120 "$chromium" --headless --no-sandbox --disable-gpu \
      --user-data-dir="$work/chrome" --dump-dom "file://$work/report.html" \
      >dom.html 2>/dev/null
    grep -q 'id="overlap"' dom.html || fail "chromium did not load the page"
    echo "rendered with $chromium"
  fi
  ;;
verify)
  run 0 dp-embedding verify
  has "ok: the plan verifies"
  # What weft-run refuses when it prepares, verify refuses too.
  run 1 dp verify
  has "operands: role 0 stream 0 'compute' instruction 1 (fwd): kernel 'embed' is not in the runtime's kernel registry"
  run 1 dp-embedding-small verify --json
  json_ok 'assert [x["kind"] for x in d["diagnostics"]] == ["operands"] and x["message"].endswith("operand reads[1] has 256 bytes, expected 512 (128 f32)") if (x := d["diagnostics"][0]) else False'
  run 1 dp-embedding-overlap verify
  has "operands: role 0 stream 0 'compute' instruction 1 (fwd): kernel 'embedding_forward': writes[0] overlaps reads[1]"
  run 1 deadlock verify
  has "deadlock:"
  run 1 deadlock verify --json
  json_ok 'assert d["ok"] is False and d["diagnostics"][0]["kind"] == "deadlock"'
  ;;
diff)
  run 0 dp diff dp
  has "no differences"
  run 1 dp diff pp
  has "mesh:"
  has "  pp                          1 -> 2"
  run 1 dp diff zero3 --json
  json_ok 'assert not d["identical"] and any(e["section"] == "config" and e["item"] == "zero" for e in d["differences"])'
  ;;
errors)
  # Bad bundles and bad usage: exit 2 with exactly one line on stderr.
  one_line() {
    [ "$(wc -l <err)" -eq 1 ] || fail "expected one line, got: $(cat err)"
    grep -q "^weft-inspect: error: $1" err || fail "expected '$1' in: $(cat err)"
  }
  run 2 missing summary; one_line "missing/plan.json"
  cp -r zero3 edited && sed -i 's/"mfu": 0.4/"mfu": 0.5/' edited/plan.json
  run 2 edited summary --json; one_line "edited/plan.json: content_hash"
  mkdir notjson && echo '{' >notjson/plan.json
  run 2 notjson timeline; one_line "notjson/plan.json"
  run 2 deadlock timeline; one_line "simulation cannot finish: rank 0"
  run 2 zero3 frobnicate; one_line "unknown subcommand 'frobnicate'"
  run 2 zero3 memory --rank x; one_line "--rank expects an integer"
  run 2 zero3 summary --cluster nope; one_line ""
  run 2 dp diff missing; one_line "missing/plan.json"
  run 2 zero3; one_line "expected BUNDLE and a subcommand"
  run 0 --help; has "usage: weft-inspect BUNDLE summary"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS [$case_name]"
