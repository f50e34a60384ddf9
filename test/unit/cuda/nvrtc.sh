#!/bin/bash
# kernels.nvrtc (registered by CMakeLists.txt):
#   nvrtc.sh WORK_DIR WEFTC CHECK CLUSTER_DIR NVCC
# The two ways generated kernels reach a GPU, checked without one:
# - NVRTC at load (weft-nvrtc-check, the CUDA backend's KernelCompiler): the
#   sources of gpt2-tiny, llama-tiny and gpt2-tiny TP 2 compile for sm_90
#   into ELF cubins defining every launch entry; a second run takes them all
#   from the cache; a corrupt entry is warned about and recompiled; a cache
#   that cannot be created is warned about and compilation goes on.
# - `weftc compile --cuda-arch sm_80,sm_90`: every kernel gets a fatbin side
#   file (in plan.json "files") with sm_80 and sm_90 cubins defining every
#   entry and sm_90 PTX; the bundle is the same on a second compile; bad
#   arguments fail in one line before anything is written.
set -u
work=$1 weftc=$2 check=$3 clusters=$4 nvcc=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
compile() { # NAME MODEL RANKS FLAGS...
  local name=$1 model=$2 ranks=$3; shift 3
  "$weftc" compile --model "$model" --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --dp 1 --micro-batch 4 "$@" -o "$name" \
    >/dev/null || fail "weftc compile $name"
}
expect() { # LOG PATTERN WHAT
  grep -q -- "$2" "$1" || { cat "$1"; fail "$3: expected '$2'"; }
}
compile gpt2 gpt2-tiny 1
compile llama llama-tiny 1
compile gpt2-tp2 gpt2-tiny 2 --tp 2

# NVRTC through the cache.
for bundle in gpt2 llama gpt2-tp2; do
  n=$(python3 -c "import json,sys; print(len({k['source'] for k in json.load(open(sys.argv[1]))['kernels']}))" "$bundle/plan.json")
  "$check" "$bundle" 90 "cache-$bundle" >first.log 2>&1 ||
    { cat first.log; fail "$bundle: NVRTC"; }
  expect first.log "^$n sources: $n compiled, 0 from the cache" "$bundle cold"
  "$check" "$bundle" 90 "cache-$bundle" >second.log 2>&1 ||
    fail "$bundle: second run"
  expect second.log "^$n sources: 0 compiled, $n from the cache" "$bundle warm"
  echo "$bundle: $n sources compiled by NVRTC, then all from the cache"
done
# Identical specializations share entries across bundles. (An entry of
# gpt2's, picked before llama's join it, is corrupted next.)
entry=$(ls cache-gpt2/*.cubin | head -n1)
"$check" llama 90 cache-gpt2 >shared.log 2>&1 || fail "llama on gpt2's cache"
grep -q "^14 sources: 14 compiled" shared.log && fail "no entry shared"
printf 'weft-cubin sha256 0\ntruncated' >"$entry"
"$check" gpt2 90 cache-gpt2 >corrupt.log 2>&1 ||
  { cat corrupt.log; fail "corrupt entry"; }
expect corrupt.log "^warning: kernel cache: .* is corrupt" "a corrupt entry"
expect corrupt.log "^14 sources: 1 compiled, 13 from the cache" "a corrupt entry"
"$check" gpt2 90 cache-gpt2 >fixed.log 2>&1 || fail "after the corrupt entry"
expect fixed.log "^14 sources: 0 compiled, 14 from the cache" "the replaced entry"
touch not-a-dir
"$check" gpt2 90 not-a-dir/cache >nocache.log 2>&1 || { cat nocache.log; fail "unwritable cache"; }
expect nocache.log "compiled kernels are not cached" "an unwritable cache"
[ "$(grep -c warning nocache.log)" = 1 ] || fail "the unwritable cache is warned about once"
echo "PASS: NVRTC cache (corrupt entry recompiled, unwritable cache warned once)"

# Fatbins compiled ahead by weftc.
compile fat gpt2-tiny 1 --cuda-arch sm_80,sm_90
compile fat2 gpt2-tiny 1 --cuda-arch sm_80,sm_90 --nvcc "$nvcc"
python3 - fat <<'PY' || fail "fatbins"
import json, os, re, struct, sys
bundle = sys.argv[1]
plan = json.load(open(os.path.join(bundle, "plan.json")))
listed = {f["path"] for f in plan["files"]}
for source in sorted({k["source"] for k in plan["kernels"]}):
    fatbin = source[:-3] + ".fatbin"
    assert fatbin in listed, f"{fatbin} is not in plan.json files"
    data = open(os.path.join(bundle, fatbin), "rb").read()
    magic, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    assert magic == 0xBA55ED50 and header + size == len(data), f"{fatbin}: not a fatbin"
    elves, ptx, off = {}, set(), header
    while off < header + size:  # entries: kind (1 PTX, 2 ELF), arch at +28
        kind, _, ehead, esize = struct.unpack_from("<HHIQ", data, off)
        arch = struct.unpack_from("<I", data, off + 28)[0]
        body = data[off + ehead: off + ehead + esize]
        if kind == 2:
            assert body[:4] == b"\x7fELF", f"{fatbin}: sm_{arch} is not an ELF"
            elves[arch] = body
        elif kind == 1:
            ptx.add(arch)
        off += ehead + esize
    assert sorted(elves) == [80, 90] and ptx == {90}, \
        f"{fatbin}: cubins {sorted(elves)}, PTX {sorted(ptx)}"
    text = open(os.path.join(bundle, source)).read()
    entries = re.findall(r"^// weft-launch: (\S+) grid \d+ block \d+$", text, re.M)
    assert entries, f"{source}: no launch lines"
    for arch, elf in elves.items():
        for entry in entries:
            assert entry.encode() + b"\0" in elf, f"{fatbin}: sm_{arch} lacks {entry}"
print(f"PASS: {len(plan['kernels'])} kernels, fatbins with sm_80/sm_90 cubins "
      "defining every entry and sm_90 PTX")
PY
hash() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['content_hash'])" "$1/plan.json"; }
[ "$(hash fat)" = "$(hash fat2)" ] || fail "two compiles with --cuda-arch differ"

# Bad arguments: one line, non-zero exit, no bundle.
bad() { # WHAT PATTERN FLAGS...
  local what=$1 pattern=$2; shift 2
  "$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-1.json" \
    --global-batch 4 --seq-len 32 "$@" -o bad >bad.log 2>&1 && fail "$what: accepted"
  [ "$(wc -l <bad.log)" = 1 ] || { cat bad.log; fail "$what: not one line"; }
  expect bad.log "$pattern" "$what"
  [ ! -e bad ] || fail "$what: wrote a bundle"
}
bad "an old architecture" "'sm_50' is not a CUDA architecture" --cuda-arch sm_50
bad "a malformed architecture" "'hopper' is not a CUDA architecture" --cuda-arch sm_90,hopper
bad "a missing nvcc" "--nvcc: '/nonexistent/nvcc' is not an executable" \
  --cuda-arch sm_90 --nvcc /nonexistent/nvcc
bad "--nvcc alone" "--nvcc needs --cuda-arch" --nvcc "$nvcc"
bad "a failing nvcc" "nvcc failed" --cuda-arch sm_90 --nvcc /bin/false
echo "PASS: weftc --cuda-arch (fatbins, deterministic, bad arguments)"
