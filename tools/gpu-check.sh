#!/usr/bin/env bash
# GPU check of the runtime shim (docs/runtime-shim.md): builds with the CUDA backend, runs the
# shim's tests (CPU backend tests plus CUDA refusal/auto paths on a real device), and measures
# pinned D2H/H2D bandwidth through the offload engine against a plain cudaMemcpyAsync loop
# (target: >= 90%). Usage: tools/gpu-check.sh [BUILD_DIR] [MiB per copy] [iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
mib=${2:-256}
iterations=${3:-20}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTPIPE_CUDA=ON \
      ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} >/dev/null
cmake --build "$build" -j"$(nproc)" --target optpipe_rt optpipe_rt_bandwidth \
      opsched_reader_test offload_engine_test runtime_end_to_end_test
ctest --test-dir "$build" -R 'Opsched|Engine|EndToEnd|HostPool|optpipe_rt_python' --output-on-failure
"$build/bin/optpipe_rt_bandwidth" "$mib" "$iterations"
