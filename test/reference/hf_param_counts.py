#!/usr/bin/env python3
"""Independent reference: parameter counts of every Weft preset as Hugging Face
transformers reports them (model.num_parameters(), tied weights counted once).

Builds each model from the very config.json Weft's importer embeds
(compiler/Import/presets/*.json) on the meta device, so no weights are allocated.
Writes {"preset": count, ...} as JSON to stdout or --out. Skips visibly (exit 0,
a line starting with SKIP) when torch/transformers are missing.
"""
import argparse, glob, json, os, sys

HEADS = {"gpt2": "AutoModelForCausalLM", "llama": "AutoModelForCausalLM",
         "mistral": "AutoModelForCausalLM", "bert": "AutoModelForMaskedLM",
         "roberta": "AutoModelForMaskedLM"}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default=os.path.join(os.path.dirname(__file__),
                    "..", "..", "compiler", "Import", "presets"))
    ap.add_argument("--out")
    args = ap.parse_args()
    try:
        import torch, transformers
    except ImportError as e:
        print(f"SKIP: hf_param_counts needs torch and transformers ({e})")
        return 0
    counts = {}
    for path in sorted(glob.glob(os.path.join(args.presets, "*.json"))):
        name = os.path.basename(path)[:-5]
        cfg_dict = json.load(open(path))
        cfg = transformers.AutoConfig.for_model(**cfg_dict)
        auto = getattr(transformers, HEADS[cfg_dict["model_type"]])
        with torch.device("meta"):
            model = auto.from_config(cfg)
        counts[name] = model.num_parameters()
        print(f"{name:16s} {type(model).__name__:22s} {counts[name]:>16,d}", file=sys.stderr)
    text = json.dumps(counts, indent=2, sort_keys=True) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    else:
        sys.stdout.write(text)
    return 0

if __name__ == "__main__":
    sys.exit(main())
