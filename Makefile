# Entry points: `make demo` and `make test` install what is missing, configure, build and run.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
DEMO_PROFILE ?= examples/gpt-8rank.json
DEMO_TIME_LIMIT ?= 10
# A second demo budget where memory binds, so the optimiser has work to do.
DEMO_TIGHT_BUDGET ?= 55GiB
BENCH_BUILD_DIR ?= build-release

.PHONY: all deps python-env build test demo torch-demo bench asan fuzz clean format

all: build

deps:
	@tools/install-deps.sh

# The Python tests' virtual environment, outside the clone (tools/setup-python.sh; PyTorch from PyPI).
python-env:
	@tools/setup-python.sh >/dev/null

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build python-env
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# Builds only the two tools it runs, not the tests.
demo: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target optpipe-compile optpipe
	$(BUILD_DIR)/bin/optpipe-compile $(DEMO_PROFILE) --time-limit $(DEMO_TIME_LIMIT) -o $(BUILD_DIR)/demo-schedule.json
	$(BUILD_DIR)/bin/optpipe-compile $(DEMO_PROFILE) --time-limit $(DEMO_TIME_LIMIT) --threads 2 \
	  --memory-budget $(DEMO_TIGHT_BUDGET) -o $(BUILD_DIR)/demo-schedule-tight.json

# An offloading schedule in PyTorch: compiles examples/mlp-4rank.json (its budget forces offloads
# and recomputes) and runs it on 4 gloo CPU processes, checked against a single-process reference.
torch-demo: build python-env
	$(BUILD_DIR)/bin/optpipe-compile examples/mlp-4rank.json --time-limit 5 --threads 2 -q \
	  --format bin -o $(BUILD_DIR)/mlp-4rank.opsched
	OPTPIPE_RT_LIBRARY=$(BUILD_DIR)/runtime-shim/liboptpipe_rt.so "$$(tools/setup-python.sh)" \
	  runtime-shim/python/examples/mlp_pipeline.py $(BUILD_DIR)/mlp-4rank.opsched \
	  --profile examples/mlp-4rank.json --compare

# Benchmark harness, quick suite (docs/benchmarks.md), from its own Release build; about 2 minutes.
bench: deps
	OPTPIPE_BENCH_BUILD_DIR=$(BENCH_BUILD_DIR) JOBS=$(JOBS) CMAKE_FLAGS="$(CMAKE_FLAGS)" bench/run --suite quick --out $(BENCH_BUILD_DIR)/bench-quick

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test BUILD_DIR=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="-DOPTPIPE_SANITIZE=ON -DOPTPIPE_WERROR=ON"

# libFuzzer on the schedule JSON reader with the validator, and on the shim's .opsched reader
# (tests/fuzz), from the seeds fuzz_seeds writes; FUZZ_SECONDS each (CI: 30; longer runs:
# make fuzz FUZZ_SECONDS=600). Needs clang and its fuzzer runtime, installed when missing.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
fuzz: deps
	@tools/install-deps.sh fuzz
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTPIPE_FUZZ=ON
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz_seeds schedule_json_fuzzer opsched_fuzzer
	$(FUZZ_BUILD_DIR)/bin/fuzz_seeds examples/gpt-4rank.json $(FUZZ_BUILD_DIR)/seeds
	for target in schedule_json opsched; do \
	  dir=$$([ $$target = opsched ] && echo opsched || echo json); \
	  mkdir -p $(FUZZ_BUILD_DIR)/corpus/$$target && \
	  $(FUZZ_BUILD_DIR)/bin/$${target}_fuzzer -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    -rss_limit_mb=4096 -print_final_stats=1 $(FUZZ_BUILD_DIR)/corpus/$$target \
	    $(FUZZ_BUILD_DIR)/seeds/$$dir tests/fuzz/corpus/$$dir || exit 1; \
	done

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-asan build-fuzz
