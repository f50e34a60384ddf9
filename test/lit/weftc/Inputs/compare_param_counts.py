#!/usr/bin/env python3
"""compare_param_counts.py WEFT_PRESETS_JSON HF_REFERENCE_JSON: every preset
must be in the reference with the same parameter count, and vice versa."""
import json, sys

weft = {p["name"]: p["params"] for p in json.load(open(sys.argv[1]))}
ref = json.load(open(sys.argv[2]))
bad = [f"{n}: weft {weft.get(n)} vs transformers {ref.get(n)}"
       for n in sorted(set(weft) | set(ref)) if weft.get(n) != ref.get(n)]
if bad:
    print("mismatch:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"{len(weft)} presets match Hugging Face")
