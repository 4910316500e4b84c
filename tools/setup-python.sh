#!/usr/bin/env bash
# Creates (once) the virtual environment the Python binding's tests and demo run in, outside the
# clone so that every clone and CI run reuses it, and installs runtime-shim/python/requirements.txt
# into it from PyPI. Prints the environment's python on stdout.
#   OPTPIPE_VENV   where it lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/optpipe/venv)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${OPTPIPE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/optpipe/venv}"
requirements=runtime-shim/python/requirements.txt
stamp="$venv/.optpipe-requirements"

# One setup at a time: tests that run side by side (ctest -j) may each call this on a fresh
# machine, and a second caller must not use the environment while the first still installs.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ ! -x "$venv/bin/python" ]; then
  python3 -c 'import venv' 2>/dev/null || {
    echo "setup-python: python3 with the venv module is needed (apt-get install python3-venv)" >&2
    exit 1
  }
  echo "setup-python: creating $venv" >&2
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  echo "setup-python: installing $(grep -v '^#' "$requirements" | xargs) into $venv (once)" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
