// Reproducible compiles (docs/solver.md): the same profile and flags give the same schedule and
// summary bytes, run after run, on any number of threads and beside busy ones; and
// `optpipe-compile --check` tells a checked-in schedule that is what this version compiles from
// one that is not.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/command_line_test.h"

namespace optpipe::testing {
namespace {

class ReproducibleCompile : public CommandLineTest {
 protected:
  // The schedule and the summary of one compile of `profile` with `flags`, under `name`.
  std::pair<std::string, std::string> compile(const std::string& profile, const std::string& flags,
                                              const std::string& name) const {
    const CommandResult r =
        run("optpipe-compile", fmt::format("{} {} -q -o {} --summary-json {}", profile, flags,
                                           path(name + ".json"), path(name + ".summary.json")));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return {slurp(path(name + ".json")), slurp(path(name + ".summary.json"))};
  }

  // A memory-tight pipeline drawn from `seed`: a budget of 0.3-0.6 of 1F1B's activation peak, a
  // link fast enough for offloads to pay, shared or duplex channels, recompute on or off.
  std::string random_tight_profile(uint32_t seed) const {
    std::mt19937 rng(seed);
    auto pick = [&rng](double lo, double hi) {
      return std::uniform_real_distribution<double>(lo, hi)(rng);
    };
    const int ranks = std::uniform_int_distribution<int>(3, 4)(rng);
    const int microbatches = std::uniform_int_distribution<int>(4, 6)(rng);
    const double forward = pick(20, 60);
    const int64_t activation = int64_t{1} << 30;
    const int64_t static_bytes = int64_t{8} << 30;
    // 1F1B holds up to R activations on rank 0; one, with what W keeps, must fit.
    const auto budget = static_cast<int64_t>(
        static_bytes + std::max(1.3, pick(0.3, 0.6) * ranks) * static_cast<double>(activation));
    const bool recompute = rng() % 2 == 0;
    const std::string name = fmt::format("tight-{}.json", seed);
    write(name,
          fmt::format(
              R"({{"format": "optpipe.profile/v1", "name": "tight-{}", "time_unit": "ms",
 "pipeline": {{"ranks": {}, "chunks_per_rank": 1, "placement": "loop", "microbatches": {}}},
 "stage_defaults": {{"forward": {:.3f}, "backward_input": {:.3f}, "backward_weight": {:.3f},
   "activation_bytes": {}, "weight_grad_bytes": {}{}}},
 "p2p_latency": 0.1,
 "memory": {{"budget_bytes": {}, "static_bytes": {}}},
 "offload": {{"d2h_gb_per_s": {:.1f}, "h2d_gb_per_s": {:.1f}, "channels": "{}"}}}})",
              seed, ranks, microbatches, forward, forward * pick(1, 1.5), forward * pick(0.5, 1),
              activation, activation / 4,
              recompute ? fmt::format(R"(, "checkpoint_bytes": {}, "recompute_forward": {:.3f})",
                                      activation / 8, forward)
                        : "",
              budget, static_bytes, pick(20, 100), pick(20, 100),
              rng() % 2 == 0 ? "shared" : "duplex"));
    return path(name);
  }
};

TEST_F(ReproducibleCompile, TheSameCompileTwiceGivesTheSameBytes) {
  const std::string flags = "--memory-budget 55GiB --effort 0.1";
  const auto first = compile(example("gpt-8rank.json"), flags, "first");
  const auto second = compile(example("gpt-8rank.json"), flags, "second");
  EXPECT_FALSE(first.first.empty());
  EXPECT_EQ(first.first, second.first);
  EXPECT_EQ(first.second, second.second);
  EXPECT_NE(first.second.find(R"("reproducible": true)"), std::string::npos) << first.second;
}

TEST_F(ReproducibleCompile, EveryExampleCompilesToTheSameBytesTwice) {
  for (const char* name : {"gpt-4rank.json", "gpt-8rank.json", "gpt-8rank-vshape.json",
                           "gpt-16rank.json", "mlp-1rank.json", "mlp-4rank.json"}) {
    const auto first = compile(example(name), "--effort 0.05", "first");
    const auto second = compile(example(name), "--effort 0.05 --threads 2", "second");
    EXPECT_FALSE(first.first.empty()) << name;
    EXPECT_EQ(first.first, second.first) << name;
    EXPECT_EQ(first.second, second.second) << name;
  }
}

TEST_F(ReproducibleCompile, ThreadsAndBusyCoresDoNotChangeTheBytes) {
  const std::string profile = example("gpt-8rank.json");
  const auto serial = compile(profile, "--memory-budget 55GiB --effort 0.1", "serial");
  const auto threaded =
      compile(profile, "--memory-budget 55GiB --effort 0.1 --threads 3", "threaded");
  EXPECT_EQ(serial.first, threaded.first);
  EXPECT_EQ(serial.second, threaded.second);
  // Beside threads that keep every core busy: the search is slower, its result the same.
  std::atomic<bool> stop = false;
  std::vector<std::jthread> busy;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i) {
    busy.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop) x = x + 1;
    });
  }
  const auto loaded = compile(profile, "--memory-budget 55GiB --effort 0.1 --threads 2", "loaded");
  stop = true;
  EXPECT_EQ(serial.first, loaded.first);
  EXPECT_EQ(serial.second, loaded.second);
}

TEST_F(ReproducibleCompile, RandomTightProblemsWithOffloadAndRecomputeRepeat) {
  int offloading = 0;
  int recomputing = 0;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const std::string profile = random_tight_profile(seed);
    const std::string name = fmt::format("s{}", seed);
    const auto once = compile(profile, "--effort 0.02", name + "a");
    const auto again = compile(profile, "--effort 0.02 --threads 2", name + "b");
    EXPECT_EQ(once.first, again.first) << "seed " << seed;
    EXPECT_EQ(once.second, again.second) << "seed " << seed;
    offloading += once.first.find(R"("op": "OFFLOAD")") != std::string::npos ? 1 : 0;
    recomputing += once.first.find(R"("op": "R")") != std::string::npos ? 1 : 0;
  }
  // The draws exercise what they are meant to.
  EXPECT_GT(offloading, 0);
  EXPECT_GT(recomputing, 0);
}

TEST_F(ReproducibleCompile, CheckTellsAnUpToDateScheduleFromAStaleOne) {
  const std::string profile = example("gpt-8rank.json");
  const std::string flags = "--memory-budget 55GiB --effort 0.05";
  compile(profile, flags, "checked-in");
  const std::string checked_in = path("checked-in.json");
  const std::string before = slurp(checked_in);
  CommandResult r = run("optpipe-compile", fmt::format("{} {} --check {}", profile, flags, checked_in));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("up to date"), std::string::npos) << r.out;
  // Other flags compile another schedule: the file is stale for them.
  r = run("optpipe-compile",
          fmt::format("{} --memory-budget 50GiB --effort 0.05 --check {} -q", profile, checked_in));
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("stale"), std::string::npos) << r.err;
  // A compile the time limit cut short cannot tell.
  r = run("optpipe-compile", fmt::format("{} --memory-budget 55GiB --effort 100 --time-limit 0.5 "
                                         "--check {} -q",
                                         profile, checked_in));
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("cannot tell"), std::string::npos) << r.err;
  // The check writes nothing: the file is as it was.
  EXPECT_EQ(slurp(checked_in), before);
}

TEST_F(ReproducibleCompile, TheSummarySaysWhenTheTimeLimitDecided) {
  const CommandResult r = run(
      "optpipe-compile",
      fmt::format("{} --memory-budget 55GiB --effort 100 --time-limit 0.5 -q -o {} "
                  "--summary-json {}",
                  example("gpt-8rank.json"), path("s.json"), path("summary.json")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = slurp(path("summary.json"));
  EXPECT_NE(summary.find(R"("stop_reason": "time_limit")"), std::string::npos) << summary;
  EXPECT_NE(summary.find(R"("reproducible": false)"), std::string::npos) << summary;
}

}  // namespace
}  // namespace optpipe::testing
