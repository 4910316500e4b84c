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

.PHONY: all deps build test demo bench asan clean format

all: build

deps:
	@tools/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# Builds only the two tools it runs, not the tests.
demo: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target optpipe-compile optpipe
	$(BUILD_DIR)/bin/optpipe-compile $(DEMO_PROFILE) --time-limit $(DEMO_TIME_LIMIT) -o $(BUILD_DIR)/demo-schedule.json
	$(BUILD_DIR)/bin/optpipe-compile $(DEMO_PROFILE) --time-limit $(DEMO_TIME_LIMIT) --threads 2 \
	  --memory-budget $(DEMO_TIGHT_BUDGET) -o $(BUILD_DIR)/demo-schedule-tight.json

# Benchmark harness, quick suite (docs/benchmarks.md), from its own Release build; about 2 minutes.
bench: deps
	OPTPIPE_BENCH_BUILD_DIR=$(BENCH_BUILD_DIR) JOBS=$(JOBS) CMAKE_FLAGS="$(CMAKE_FLAGS)" bench/run --suite quick --out $(BENCH_BUILD_DIR)/bench-quick

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test BUILD_DIR=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="-DOPTPIPE_SANITIZE=ON -DOPTPIPE_WERROR=ON"

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-asan
