#!/usr/bin/env bash
# Installs every system dependency Weft needs on a fresh Debian 12 machine.
# Idempotent: packages already present are skipped. Run as root (or with sudo available).
# CUDA (/usr/local/cuda) is optional: detected by the build, never installed here.
set -euo pipefail

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
