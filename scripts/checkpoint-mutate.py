#!/usr/bin/env python3
"""Damaged checkpoints against resume, export and reshard (CPU).

    scripts/checkpoint-mutate.py [--build build] [--mutations 200] [--seed 1]
                                 [--work /tmp/weft-ckpt-mutate] [--keep-failures]

A checkpoint is trusted state: what `weft-run --resume`, `weft-export` and
`weft-reshard` accept, they must continue exactly as from the undamaged
checkpoint (docs/runtime.md, "Checkpoints": resume is bit-identical to an
uninterrupted run). This trains bundles of several layouts (serial, DP 2
ZeRO-1, TP 2 x PP 2, fp16 with dynamic loss scaling, optimizer offload) for
2 steps with a full checkpoint and a weights snapshot, records what the three
tools make of the undamaged ones (the resumed steps 3-4, the exported
safetensors, a conversion to the serial layout), then damages one thing in a
copy:

  manifest  a number (0, -1, +-1, x2, huge, random), a string (a character
            changed, emptied, another value of its key), a key deleted or
            added, a type changed, the files list reordered, shortened or
            grown, the text truncated or emptied;
  rank file a bit of the header, a byte of the payload, truncated, grown,
            emptied, deleted, swapped with or overwritten by another rank's;
  directory COMPLETE or manifest.json deleted, an uncommitted or an empty
            committed newer step beside it, leftovers (.tmp).

Half the manifest and header changes are "resealed": the checksums that
cover the changed bytes are recomputed (the header's CRC-32C, the
manifest's own manifest_crc32c), so the change reaches the checks behind
them. Then one tool runs on it. Every outcome must be one of:

  REJECTED  one `<tool>: error:` line, a non-zero exit, and nothing written
            (no new step in the checkpoint directory, no output file or
            directory, no temporary left behind);
  SAME      accepted, and the result equals the undamaged checkpoint's
            (resumed losses and grad norms, exported bytes, converted
            checkpoint) -- the damage did not matter (a leftover, the seed);
  CHANGED   (resealed changes only) accepted with another result: a
            well-formed checkpoint of another state.

Anything else -- a raw change accepted with another result (silent
corruption), a crash, a hang, several error lines, output left behind after
an error -- is a FAIL line with the change, and the directory is kept with
--keep-failures. Ends with the counts and `N passed, N failed`; exits 1 on
any failure. Not a ctest (random, minutes): run it after changes to the
checkpoint format, resume, export or reshard.
"""
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import at, leaves, show  # noqa: E402
import mutation  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "test/lit/weftc/Inputs"
STEP = 2  # the damaged checkpoint's step; resume runs to 2 * STEP

# name: (model, ranks, precision, flags)
BASES = {
    "serial": ("gpt2-tiny", 1, "fp32", ["--dp", "1", "--micro-batch", "2"]),
    "dp2-zero1": ("gpt2-tiny", 2, "fp32",
                  ["--dp", "2", "--zero", "1", "--micro-batch", "1"]),
    "tp2-pp2": ("llama-tiny", 4, "fp32",
                ["--tp", "2", "--pp", "2", "--dp", "1", "--micro-batch", "1",
                 "--schedule", "1f1b"]),
    "fp16-dp2": ("llama-tiny", 2, "fp16",
                 ["--dp", "2", "--micro-batch", "1"]),
    "offload": ("gpt2-tiny", 1, "fp32",
                ["--dp", "1", "--micro-batch", "2", "--offload",
                 "optimizer"]),
}
# The reshard target of each model: its serial fp32 layout.
TARGET_FLAGS = ["--dp", "1", "--micro-batch", "2"]

# Rank-file header fields: (name, offset, struct format); docs/runtime.md.
HEADER = [("magic", 0, "8s"), ("version", 8, "<I"), ("header_bytes", 12, "<I"),
          ("bundle_hash", 16, "64s"), ("rank", 80, "<i"), ("world", 84, "<i"),
          ("step", 88, "<q"), ("seed", 96, "<Q"), ("samples", 104, "<q"),
          ("payload_bytes", 112, "<q"), ("payload_crc", 120, "<I")]
HEADER_BYTES, HEADER_CRC = 128, 124


def crc32c(data, crc=0):
    table = crc32c.table
    c = crc ^ 0xFFFFFFFF
    for byte in data:
        c = (c >> 8) ^ table[(c ^ byte) & 0xFF]
    return c ^ 0xFFFFFFFF


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


crc32c.table = _crc_table()


def reseal_manifest(manifest):
    """Recomputes manifest_crc32c (docs/runtime.md) when the manifest has one:
    the CRC-32C of the compact JSON with sorted keys, without that key."""
    if not isinstance(manifest, dict) or "manifest_crc32c" not in manifest:
        return
    body = {k: v for k, v in manifest.items() if k != "manifest_crc32c"}
    text = json.dumps(body, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False)
    manifest["manifest_crc32c"] = f"{crc32c(text.encode()):08x}"


def new_number(rng, value):
    return mutation.new_number(rng, value, [float(int(value) + 1)]
                               if isinstance(value, float) else [])


def new_string(rng, value, same_key):
    choices = ["char", "empty"] + (["other"] if same_key else [])
    kind = rng.choice(choices)
    if kind == "empty" or not value:
        return ""
    if kind == "other":
        return rng.choice(same_key)
    i = rng.randrange(len(value))
    alphabet = "0123456789abcdef" if all(
        c in "0123456789abcdef" for c in value) else "abcdefxyz-./0"
    c = rng.choice([a for a in alphabet if a != value[i]])
    return value[:i] + c + value[i + 1:]


def mutate_manifest(rng, text):
    """(new text, description, resealed) for one change of a manifest."""
    if rng.random() < 0.08:
        if rng.random() < 0.5:
            cut = rng.randrange(len(text))
            return text[:cut], f"manifest truncated at {cut}", False
        return rng.choice(["", "[]", "null", "{}"]), "manifest replaced", False
    manifest = json.loads(text)
    reseal = rng.random() < 0.5
    kind = rng.choice(["number", "number", "string", "delete", "add",
                       "type", "files"])
    items = [(p, v) for p, v in leaves(manifest) if p != ("manifest_crc32c",)
             or not reseal]
    if kind == "number":
        numbers = [(p, v) for p, v in items if mutation.is_number(v)]
        path, value = rng.choice(numbers)
        new = new_number(rng, value)
        at(manifest, path[:-1])[path[-1]] = new
        what = f"{show(path)}: {value} -> {new}"
    elif kind == "string":
        strings = [(p, v) for p, v in items if isinstance(v, str)]
        path, value = rng.choice(strings)
        same_key = sorted({v for p, v in strings if p[-1] == path[-1]} -
                          {value})
        if path[-1] == "contents":
            same_key = ["full", "weights", "both"]
        new = new_string(rng, value, [s for s in same_key if s != value])
        at(manifest, path[:-1])[path[-1]] = new
        what = f"{show(path)}: {value!r} -> {new!r}"
    elif kind == "delete":
        paths = [p for p, _ in items]
        # any key, leaf or not
        keys = sorted({p[:i] for p in paths for i in range(1, len(p) + 1)
                       if isinstance(p[i - 1], str)}, key=show)
        path = rng.choice(keys)
        del at(manifest, path[:-1])[path[-1]]
        what = f"{show(path)} deleted"
    elif kind == "add":
        where = rng.choice([(), ("files", 0)] +
                           ([("data",)] if "data" in manifest else []) +
                           ([("loss_scale",)] if "loss_scale" in manifest
                            else []))
        at(manifest, where)["extra"] = rng.choice([1, "x", None, [1]])
        what = f"{show(where + ('extra',))} added"
    elif kind == "type":
        path, value = rng.choice(items)
        new = str(value) if not isinstance(value, str) else (
            int(value, 16) if value and all(
                c in "0123456789abcdef" for c in value) else 7)
        if rng.random() < 0.3:
            new = rng.choice([None, True, [value], {"v": value}])
        at(manifest, path[:-1])[path[-1]] = new
        what = f"{show(path)}: {value!r} -> {new!r}"
    else:
        files = manifest["files"]
        op = rng.choice(["drop", "duplicate", "reverse"]
                        if len(files) > 1 else ["drop", "duplicate"])
        if op == "drop":
            del files[rng.randrange(len(files))]
        elif op == "duplicate":
            i = rng.randrange(len(files))
            files.insert(i, dict(files[i]))
        else:
            files.reverse()
        what = f"files: {op}"
    if reseal:
        reseal_manifest(manifest)
        what += " (manifest checksum resealed)"
    return json.dumps(manifest, indent=2) + "\n", what, reseal


def mutate_rank_file(rng, directory, ranks):
    """Damages a rank file in `directory`; returns (description, resealed)."""
    # A weights snapshot of DP replicas holds fewer files than ranks.
    present = [r for r in range(ranks)
               if (directory / f"rank-{r}.bin").exists()]
    rank = rng.choice(present)
    path = directory / f"rank-{rank}.bin"
    data = bytearray(path.read_bytes())
    kind = rng.choice(["header-bit", "header-field", "header-field",
                       "payload", "truncate", "grow", "empty", "delete",
                       "swap", "overwrite"])
    if kind in ("swap", "overwrite") and len(present) == 1:
        kind = "payload"
    name = f"rank-{rank}.bin"
    if kind == "header-bit":
        bit = rng.randrange(HEADER_BYTES * 8)
        data[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(data)
        return f"{name}: header bit {bit} flipped", False
    if kind == "header-field":
        field, offset, fmt = rng.choice(HEADER)
        old = struct.unpack_from(fmt, data, offset)[0]
        if isinstance(old, bytes):
            i = rng.randrange(len(old))
            new = old[:i] + bytes([old[i] ^ 0x01]) + old[i + 1:]
        else:
            new = new_number(rng, old)
            bits = struct.calcsize(fmt) * 8
            new = new % (1 << bits)
            if fmt[-1].islower():  # signed
                new = new - (1 << bits) if new >= 1 << (bits - 1) else new
        struct.pack_into(fmt, data, offset, new)
        struct.pack_into("<I", data, HEADER_CRC, crc32c(data[:HEADER_CRC]))
        path.write_bytes(data)
        return f"{name}: header {field} {old!r} -> {new!r} (header " \
               f"checksum resealed)", True
    if kind == "payload":
        if len(data) <= HEADER_BYTES:
            return f"{name}: no payload to change", False
        i = rng.randrange(HEADER_BYTES, len(data))
        data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(data)
        return f"{name}: payload byte {i} changed", False
    if kind == "truncate":
        cut = rng.choice([rng.randrange(HEADER_BYTES), rng.randrange(
            HEADER_BYTES, len(data))]) if len(data) > HEADER_BYTES else 0
        path.write_bytes(data[:cut])
        return f"{name}: truncated to {cut} bytes", False
    if kind == "grow":
        n = rng.randrange(1, 100)
        path.write_bytes(data + bytes(n))
        return f"{name}: {n} bytes appended", False
    if kind == "empty":
        path.write_bytes(b"")
        return f"{name}: emptied", False
    if kind == "delete":
        path.unlink()
        return f"{name}: deleted", False
    other = rng.choice([r for r in present if r != rank])
    other_path = directory / f"rank-{other}.bin"
    if kind == "swap":
        tmp = directory / "swap.tmp"
        path.rename(tmp)
        other_path.rename(path)
        tmp.rename(other_path)
        return f"{name} and rank-{other}.bin swapped", False
    shutil.copyfile(other_path, path)
    return f"{name} overwritten by rank-{other}.bin", False


def mutate_directory(rng, ck, directory):
    kind = rng.choice(["no-complete", "no-manifest", "newer-uncommitted",
                       "newer-empty-committed", "leftover-tmp"])
    newer = ck / f"{directory.name.split('-')[0]}-{STEP + 7}"
    if kind == "no-complete":
        (directory / "COMPLETE").unlink()
        return "COMPLETE deleted"
    if kind == "no-manifest":
        (directory / "manifest.json").unlink()
        return "manifest.json deleted"
    if kind == "newer-uncommitted":
        shutil.copytree(directory, newer)
        (newer / "COMPLETE").unlink()
        return f"{newer.name} without COMPLETE beside it"
    if kind == "newer-empty-committed":
        newer.mkdir()
        (newer / "COMPLETE").write_text("")
        return f"{newer.name} committed but empty beside it"
    shutil.copytree(directory, ck / f"{directory.name}.tmp")
    (ck / f"{directory.name}.tmp" / "rank-0.bin").write_bytes(b"junk")
    return f"{directory.name}.tmp leftover beside it"


def listing(directory):
    """Every path under `directory` with its size (what a tool wrote)."""
    return sorted((str(p.relative_to(directory)),
                   p.stat().st_size if p.is_file() else -1)
                  for p in directory.rglob("*"))


class Sweep:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.build).resolve() / "bin"
        self.work = Path(args.work)
        self.tokens = self.work / "tokens.bin"
        self.clean = {}

    def tool(self, name):
        return str(self.bin / name)

    def compile(self, model, ranks, precision, flags, out):
        cluster = json.loads((INPUTS / "cpu-sim-8-host.json").read_text())
        cluster["gpus_per_node"] = ranks
        cluster_path = self.work / f"cluster-{ranks}.json"
        cluster_path.write_text(json.dumps(cluster))
        subprocess.run(
            [self.tool("weftc"), "compile", "--model", model, "--cluster",
             str(cluster_path), "--global-batch", "4", "--seq-len", "16",
             "--precision", precision] + flags + ["-o", str(out)],
            check=True, capture_output=True, text=True)

    def train(self, base, extra, timeout=120):
        return mutation.weft_run(self.bin, self.work / f"bundle-{base}",
                                 self.tokens, BASES[base][1], extra, 20,
                                 timeout)

    @staticmethod
    def steps(metrics):
        """(step, loss, grad_norm) of every record, as written."""
        out = []
        for line in Path(metrics).read_text().splitlines():
            record = json.loads(line)
            out.append((record["step"], record["loss"], record["grad_norm"]))
        return out

    def consume(self, base, consumer, ck, kind, out):
        """Runs `consumer` on checkpoint directory `ck` (kind step/weights);
        returns (process or None on a hang, result or None, tool name)."""
        bundle = str(self.work / f"bundle-{base}")
        source = str(ck / f"{kind}-{STEP}")
        if consumer == "resume":
            metrics = out / "resume.jsonl"
            run = self.train(base, ["--steps", str(2 * STEP),
                                    "--checkpoint-dir", str(ck), "--resume",
                                    "--metrics", str(metrics)])
            result = self.steps(metrics) if run and run.returncode == 0 \
                and metrics.exists() else None
            return run, result, "weft-run"
        if consumer == "export":
            target = out / "model.safetensors"
            cmd = [self.tool("weft-export"), bundle, source, "-o",
                   str(target)]
            tool = "weft-export"
        else:
            target = out / "resharded"
            model = BASES[base][0]
            cmd = [self.tool("weft-reshard"), bundle, source,
                   str(self.work / f"target-{model}"), str(target)]
            tool = "weft-reshard"
        try:
            run = subprocess.run(cmd, capture_output=True, text=True,
                                 timeout=120)
        except subprocess.TimeoutExpired:
            return None, None, tool
        result = None
        if run.returncode == 0 and target.exists():
            if consumer == "export":
                result = target.read_bytes()
            else:
                step = target / f"step-{STEP}"
                result = ((step / "rank-0.bin").read_bytes(),
                          json.loads((step / "manifest.json").read_text()))
        return run, result, tool

    def prepare(self):
        mutation.fresh_work_dir(self.work, self.bin)
        for model in sorted({m for m, _, _, _ in BASES.values()}):
            self.compile(model, 1, "fp32", TARGET_FLAGS,
                         self.work / f"target-{model}")
        for base, (model, ranks, precision, flags) in BASES.items():
            self.compile(model, ranks, precision, flags,
                         self.work / f"bundle-{base}")
            full = self.work / f"full-{base}.jsonl"
            ck = self.work / f"ck-{base}"
            for extra in (["--steps", str(2 * STEP), "--metrics", str(full)],
                          ["--steps", str(STEP), "--checkpoint-dir", str(ck),
                           "--save-weights-every", str(STEP)]):
                run = self.train(base, extra)
                if run is None or run.returncode != 0:
                    sys.exit(f"{base}: weft-run {' '.join(extra)} failed: "
                             f"{run.stderr[-500:] if run else 'hung'}")
            clean = {}
            for consumer, kind in (("resume", "step"), ("export", "step"),
                                   ("export", "weights"),
                                   ("reshard", "step")):
                copy = self.work / f"clean-{base}"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(ck, copy / "ck")
                run, result, _ = self.consume(base, consumer, copy / "ck",
                                              kind, copy)
                if result is None:
                    sys.exit(f"{base}: {consumer} of the undamaged {kind} "
                             f"checkpoint failed: "
                             f"{run.stderr[-500:] if run else 'hung'}")
                clean[(consumer, kind)] = result
                shutil.rmtree(copy)
            # The property everything below leans on: resume continues the
            # uninterrupted run exactly.
            if clean[("resume", "step")] != self.steps(full)[STEP:]:
                sys.exit(f"{base}: the undamaged resume differs from the "
                         f"uninterrupted run")
            self.clean[base] = clean

    def one(self, index, rng):
        base = rng.choice(list(BASES))
        ranks = BASES[base][1]
        kind = "weights" if rng.random() < 0.25 else "step"
        consumer = "export" if kind == "weights" or rng.random() < 0.3 else \
            rng.choice(["resume", "resume", "reshard"])
        case = self.work / f"case-{index}"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(self.work / f"ck-{base}", case / "ck")
        directory = case / "ck" / f"{kind}-{STEP}"
        where = rng.random()
        resealed = False
        if where < 0.45:
            manifest = directory / "manifest.json"
            text, what, resealed = mutate_manifest(rng,
                                                   manifest.read_text())
            manifest.write_text(text)
        elif where < 0.85:
            what, resealed = mutate_rank_file(rng, directory, ranks)
        else:
            what = mutate_directory(rng, case / "ck", directory)
        what = f"{base} {kind}-{STEP} -> {consumer}: {what}"
        before = listing(case / "ck")
        run, result, tool = self.consume(base, consumer, case / "ck", kind,
                                         case)
        if run is None:
            return "FAIL", f"{what}: {tool} hung"
        if mutation.crashed(run):
            return "FAIL", f"{what}: {tool} crashed (exit {run.returncode})" \
                           f": {run.stderr.strip()[-400:]}"
        errors = mutation.error_lines(run.stderr, f"{tool}: error:")
        if run.returncode != 0:
            if len(errors) != 1:
                return "FAIL", f"{what}: exit {run.returncode} with " \
                               f"{len(errors)} distinct error lines: " \
                               f"{run.stderr.strip()[-400:]}"
            left = [p for p, _ in listing(case) if not p.startswith("ck")]
            if listing(case / "ck") != before or left:
                return "FAIL", f"{what}: rejected ({errors[0][:160]}) but " \
                               f"left output behind: {left[:3]}"
            return "REJECTED", f"{what}: {errors[0][:200]}"
        if result is None:
            return "FAIL", f"{what}: {tool} exited 0 without its output"
        if result == self.clean[base][(consumer, kind)]:
            return "SAME", what
        if resealed:
            return "CHANGED", what
        return "FAIL", f"{what}: accepted, and the result differs from the " \
                       f"undamaged checkpoint's (silent corruption)"

    def main(self):
        start = time.time()
        self.prepare()
        print(f"prepared {len(BASES)} layouts in {time.time() - start:.0f} s",
              flush=True)
        return mutation.run_cases(
            self.args, self.one, lambda i: self.work / f"case-{i}",
            {"REJECTED": "rejected", "SAME": "same",
             "CHANGED": "changed (resealed)"})


def main():
    sys.exit(Sweep(mutation.parse_args(__doc__,
                                       "/tmp/weft-ckpt-mutate")).main())

if __name__ == "__main__":
    main()
