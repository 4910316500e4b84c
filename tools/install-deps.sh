#!/usr/bin/env bash
# Installs the Debian packages optpipe builds with, when missing (with "fuzz": those of make fuzz). Idempotent; as non-root it prints
# the command to run instead.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config coinor-libcbc-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev libgtest-dev libssl-dev)
# `tools/install-deps.sh fuzz`: also clang and its libFuzzer runtime (make fuzz).
if [ "${1:-}" = fuzz ]; then packages+=(clang libclang-rt-dev); fi

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "optpipe needs: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
