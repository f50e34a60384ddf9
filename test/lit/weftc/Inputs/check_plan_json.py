#!/usr/bin/env python3
"""check_plan_json.py PLAN_JSON GLOBAL_BATCH: the documented schema of
`weftc plan --json`, plans sorted fastest first, batch identity per plan."""
import json, sys

FIELDS = ["tp", "pp", "dp", "zero", "micro_batch", "grad_accum", "recompute",
          "schedule", "virtual_stages", "sequence_parallel", "step_time_s",
          "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_bytes",
          "fits", "breakdown"]
result = json.load(open(sys.argv[1]))
batch = int(sys.argv[2])
for key in ("plans", "configs_evaluated", "search_time_s"):
    assert key in result, f"missing top-level field {key}"
plans = result["plans"]
assert plans, "no plans"
for p in plans:
    missing = [f for f in FIELDS if f not in p]
    assert not missing, f"plan lacks {missing}"
    assert p["micro_batch"] * p["grad_accum"] * p["dp"] == batch, p
    assert p["recompute"] in ("none", "selective", "full"), p["recompute"]
    assert p["schedule"] in ("gpipe", "1f1b", "interleaved"), p["schedule"]
    assert p["fits"] is True
    assert p["offload"] in ("none", "optimizer"), p["offload"]
# Fastest first, except that plans within the planner's 0.5% tie tolerance
# rank the simpler first (docs/planner.md, "Tie-breaking").
times = [p["step_time_s"] for p in plans]
assert all(a <= b * 1.005 for a, b in zip(times, times[1:])), \
    f"not sorted fastest first: {times}"
assert result["configs_evaluated"] >= len(plans)
print("plan json ok")
