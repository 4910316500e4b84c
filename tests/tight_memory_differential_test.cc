// A randomized differential test of `auto` where memory is tight (docs/solver.md): on random
// problems with a host link, budgets of 0.2-0.6 of 1F1B's activation peak (of GPipe's where a rank
// has several chunks), coarse and fine stages, shared and duplex channels, link groups, and
// recompute on or off, `auto` returns a schedule the validator accepts, never slower than any
// generator of its portfolio that fits, or says that none fits when none does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include "driver/compile_driver.h"
#include "heuristics/one_f_one_b.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// CI draws a few; the bench's run draws 200: OPTPIPE_DIFFERENTIAL_PROBLEMS=200
// build/bin/tight_memory_differential_test (docs/benchmarks.md).
int problems() {
  const char* count = std::getenv("OPTPIPE_DIFFERENTIAL_PROBLEMS");
  return count ? std::max(1, std::atoi(count)) : 16;
}

// `problem` (from random_problem) made memory-tight: a host link, recompute on some stages, and
// each rank's activation budget 0.2-0.6 of the peak 1F1B reaches on it (one chunk per rank), or of
// all its activations at once (GPipe's peak) on several chunks.
Problem memory_tight(Problem problem, std::mt19937& rng) {
  auto real = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  if (!problem.offload) {
    OffloadLink link;
    link.d2h_bytes_per_time = real(200, 20000);
    link.h2d_bytes_per_time = real(200, 20000);
    link.channels = rng() % 2 ? ChannelMode::kDuplex : ChannelMode::kShared;
    for (int r = 0; r < problem.ranks; ++r) link.link_group_of_rank.push_back(r);
    problem.offload = link;
  }
  // Slow links against large activations make coarse stages (an offload longer than a forward).
  const bool recompute = rng() % 2 == 0;
  for (StageCosts& stage : problem.stages) {
    stage.offloadable_bytes =
        std::max<int64_t>(stage.offloadable_bytes, stage.activation_bytes / 2);
    if (recompute) {
      stage.checkpoint_bytes = stage.activation_bytes / 4;
      stage.recompute_forward = stage.forward;
    }
  }
  const double fraction = real(0.2, 0.6);
  if (problem.chunks_per_rank != 1) return testing::with_budget_fraction(problem, fraction);
  const Metrics peaks =
      compute_metrics(problem, simulate(problem, one_f_one_b_order(problem), "reference"));
  for (int r = 0; r < problem.ranks; ++r) {
    const int64_t peak = peaks.ranks[r].peak_bytes - problem.static_bytes[r];
    problem.budget_bytes[r] = problem.static_bytes[r] + static_cast<int64_t>(fraction * peak);
  }
  return problem;
}

TEST(TightMemoryDifferential, AutoIsNeverSlowerThanItsPortfolioAndAlwaysValid) {
  std::mt19937 rng(20261207);
  int scheduled = 0;
  int moving = 0;
  std::vector<double> gaps;  // makespan / reported lower bound - 1, per scheduled problem
  const int count = problems();
  for (int i = 0; i < count; ++i) {
    const Problem problem = memory_tight(testing::random_problem(rng), rng);
    CompileOptions options;
    options.optimizer.effort = 0.01;  // the property holds at any effort; CI keeps it short
    options.optimizer.time_limit_seconds = 600;
    const CompileResult result = compile(problem, options);
    if (result.status == CompileStatus::kOverBudget) {
      for (const Candidate& c : result.ranking) {
        EXPECT_FALSE(c.rejection.empty()) << "problem " << i << ": " << c.method << " fits";
      }
      continue;
    }
    ++scheduled;
    const Schedule& best = result.best.schedule;
    const auto violation = validate(problem, best);
    EXPECT_FALSE(violation) << "problem " << i << ": " << violation->message;
    const double makespan = makespan_of(best);
    for (const Candidate& c : result.ranking) {
      if (!c.rejection.empty()) continue;
      EXPECT_LE(makespan, c.metrics.makespan * (1 + 1e-12)) << "problem " << i << ": " << c.method;
    }
    moving += testing::has_action(best, Op::kOffload) || testing::has_action(best, Op::kRecompute);
    const double bound = result.best.metrics.lower_bound;
    EXPECT_LE(bound, makespan * (1 + 1e-9)) << "problem " << i;
    gaps.push_back(makespan / bound - 1);
  }
  // The bench reads the gaps to the reported bound (docs/benchmarks.md); the test asserts only
  // that the bound holds.
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    std::cout << "gap to the reported lower bound over " << gaps.size() << " problems: median "
              << 100 * gaps[gaps.size() / 2] << "%, 90th percentile "
              << 100 * gaps[gaps.size() * 9 / 10] << "%, largest " << 100 * gaps.back() << "%\n";
  }
  // The draws exercise what they are meant to: most fit, many by offloading or recomputing.
  EXPECT_GT(scheduled, count / 2);
  EXPECT_GT(moving, count / 4);
}

}  // namespace
}  // namespace optpipe
