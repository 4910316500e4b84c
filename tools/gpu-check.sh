#!/usr/bin/env bash
# GPU check of the runtime shim (docs/runtime-shim.md, "GPU check"): runs the shim's tests with the
# CUDA backend on a real device (the CUDA engine and runner tests, the CPU-backend suites, the
# Python binding with PyTorch's offload hooks on the GPU), compute-sanitizer over the CUDA tests
# where it is installed, and measures pinned D2H/H2D bandwidth through the offload engine against a
# plain cudaMemcpyAsync loop (target: >= 90%), and runs optpipe_rt.torch.PipelineSchedule on the GPU
# with examples/mlp-1rank.json's offloading schedule, with and without its offloads (step time,
# torch.cuda.max_memory_allocated), and the conformance models profiled, compiled and run on the
# GPU (runtime-shim/python/tests/conformance.py --device cuda). Every step runs; the exit status
# is 1 if any failed.
#
#   tools/gpu-check.sh                 build in build-gpu (needs the build dependencies), then check
#   tools/gpu-check.sh --bundle DIR    build, then copy the programs and the shared libraries they
#                                      need into DIR, for a GPU machine without those dependencies
#   tools/gpu-check.sh --run DIR       check with what --bundle put in DIR
set -uo pipefail
cd "$(dirname "$0")/.."
readonly programs=(cuda_backend_test offload_engine_test opsched_reader_test
                   runtime_end_to_end_test optpipe_rt_bandwidth optpipe-compile optpipe)
mib=${GPU_CHECK_MIB:-256}
iterations=${GPU_CHECK_ITERATIONS:-20}

build() {
  local build_dir=$1 arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTPIPE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" >/dev/null &&
    cmake --build "$build_dir" -j"$(nproc)" --target optpipe_rt "${programs[@]}"
}

# The 1-rank offloading schedule the torch step runs (the compiler needs CBC: built here).
compile_schedule() {
  cmake -S . -B build -G Ninja >/dev/null && cmake --build build --target optpipe-compile &&
    build/bin/optpipe-compile examples/mlp-1rank.json --method adaoffload --format bin -q -o "$1"
}

bundle() {
  local build_dir=build-gpu dir=$1
  build "$build_dir" || exit 1
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" || exit 1
  compile_schedule "$dir/mlp-1rank.opsched" || exit 1
  for program in "${programs[@]}"; do cp "$build_dir/bin/$program" "$dir/bin/"; done
  cp "$build_dir/runtime-shim/liboptpipe_rt.so" "$dir/lib/"
  # Every shared library outside the C/C++ runtime that the programs load (CBC, fmt, cudart, ...).
  ldd "$dir"/bin/* "$dir/lib/liboptpipe_rt.so" | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    xargs -r cp -L -t "$dir/lib/"
  du -sh "$dir"
}

failures=0
step() {
  echo "== $*"
  if ! "$@"; then
    echo "!! failed: $*"
    failures=$((failures + 1))
  fi
}

check() {
  local bin=$1 library=$2 schedule=$3
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  step "$bin/cuda_backend_test"
  step "$bin/offload_engine_test"
  step "$bin/opsched_reader_test" --gtest_brief=1
  step "$bin/runtime_end_to_end_test" --gtest_brief=1
  step env OPTPIPE_RT_LIBRARY="$library" PYTHONUNBUFFERED=1 \
       python3 -m unittest discover -s runtime-shim/python/tests -v
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [[ -x $sanitizer ]]; then
    step "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/cuda_backend_test" --gtest_brief=1
    step "$sanitizer" --tool racecheck --error-exitcode 1 "$bin/cuda_backend_test" \
         --gtest_brief=1 --gtest_filter='CudaEngine.*'
  fi
  step "$bin/optpipe_rt_bandwidth" "$mib" "$iterations"
  step env OPTPIPE_RT_LIBRARY="$library" PYTHONUNBUFFERED=1 \
       python3 runtime-shim/python/examples/mlp_pipeline.py "$schedule" --device cuda --compare \
       --steps 3 --hidden "${GPU_CHECK_HIDDEN:-4096}" --batch "${GPU_CHECK_BATCH:-2048}"
  # The conformance models on one GPU: profile there, compile, run (the store's and the CUDA
  # allocator's peaks against the prediction, the step against the makespan). The Hugging Face
  # models need transformers (requirements.txt); without it the MLP runs alone and says so.
  step env OPTPIPE_RT_LIBRARY="$library" OPTPIPE_BIN_DIR="$bin" PYTHONUNBUFFERED=1 \
       python3 runtime-shim/python/tests/conformance.py --device cuda
  echo "== $failures step(s) failed"
  [[ $failures == 0 ]]
}

case ${1:-} in
  --bundle) bundle "${2:?--bundle DIR}" ;;
  --run)
    dir=$(cd "${2:?--run DIR}" && pwd) || exit 2
    export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    check "$dir/bin" "$dir/lib/liboptpipe_rt.so" "$dir/mlp-1rank.opsched"
    ;;
  "")
    build build-gpu || exit 1
    compile_schedule build-gpu/mlp-1rank.opsched || exit 1
    check build-gpu/bin "$PWD/build-gpu/runtime-shim/liboptpipe_rt.so" build-gpu/mlp-1rank.opsched
    ;;
  *) echo "usage: tools/gpu-check.sh [--bundle DIR | --run DIR]" >&2; exit 2 ;;
esac
