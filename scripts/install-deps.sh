#!/usr/bin/env bash
# Installs every system dependency Weft needs on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped. Run as root (or with sudo available).
# CUDA (/usr/local/cuda) is optional: detected by the build, never installed here.
# Where CUDA has cuDNN, the cuDNN frontend's headers (header-only C++, for the
# CUDA backend's cuDNN attention) are fetched from PyPI into .deps/.
set -euo pipefail
cd "$(dirname "$0")/.."

# The cuDNN frontend, pinned: the wheel's include/ is the whole C++ API.
# Optional: without it the CUDA backend is built without cuDNN attention.
FRONTEND_VERSION=1.16.0
FRONTEND_SHA256=5c4a8fc573d85a86e08b15d9bf37f729e2487298781867a492a59cde6ac295e2
FRONTEND_DIR=.deps/cudnn-frontend-$FRONTEND_VERSION
fetch_cudnn_frontend() {
  [ -f /usr/local/cuda/include/cudnn.h ] || return 0
  [ -f "$FRONTEND_DIR/include/cudnn_frontend.h" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: \
      --python-version 3.11 --platform manylinux_2_28_x86_64 \
      -d "$tmp" "nvidia-cudnn-frontend==$FRONTEND_VERSION" >"$tmp/log" 2>&1 &&
    python3 - "$tmp" "$FRONTEND_SHA256" "$FRONTEND_DIR" <<'PY'
import hashlib, pathlib, shutil, sys, zipfile
tmp, want, dest = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
wheel = next(tmp.glob("*.whl"))
got = hashlib.sha256(wheel.read_bytes()).hexdigest()
if got != want:
    sys.exit(f"{wheel.name}: sha256 {got}, expected {want}")
staging = tmp / "staging"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            z.extract(name, staging)
dest.parent.mkdir(parents=True, exist_ok=True)
shutil.rmtree(dest, ignore_errors=True)
staging.rename(dest)  # whole or not at all
PY
  then
    echo "install-deps: cuDNN frontend $FRONTEND_VERSION headers in $FRONTEND_DIR"
  else
    echo "install-deps: warning: could not fetch the cuDNN frontend" \
      "($(tail -n 1 "$tmp/log" 2>/dev/null)); building without cuDNN attention"
  fi
  rm -rf "$tmp"
}
fetch_cudnn_frontend

PKGS=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  nlohmann-json3-dev libopenmpi-dev openmpi-bin libopenblas-dev
  libgtest-dev libgmock-dev cmake ninja-build ccache clang-format-14 python3
  chromium  # headless rendering test of weft-inspect's HTML report
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
