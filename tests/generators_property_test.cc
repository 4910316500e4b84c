// Every generator's output validates on random problems: varied R, v, m, per-stage costs,
// latencies, placements, offload links.
#include <gtest/gtest.h>

#include "heuristics/registry.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

TEST(GeneratorsProperty, EveryScheduleValidatesOnRandomProblems) {
  std::mt19937 rng(20261122);
  int schedules = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Problem problem = testing::random_problem(rng);
    for (const Generator& generator : generators()) {
      if (!generator.unsupported_reason(problem).empty()) continue;
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " " << generator.name << " R=" << problem.ranks
                   << " v=" << problem.chunks_per_rank << " m=" << problem.microbatches);
      const Schedule schedule =
          simulate(problem, generator.build(problem), std::string(generator.name));
      const auto violation = validate(problem, schedule);
      ASSERT_FALSE(violation) << violation->message;
      const Metrics metrics = compute_metrics(problem, schedule);
      EXPECT_GE(metrics.makespan, metrics.lower_bound - 1e-9);
      ++schedules;
    }
  }
  EXPECT_GT(schedules, 400);
}

// Recomputing every activation of any transfer-free order keeps it valid and never raises a
// rank's peak: F keeps C <= A after it ends, R brings A - C back only right before the backward.
TEST(GeneratorsProperty, RecomputingEveryActivationValidatesAndRaisesNoPeak) {
  std::mt19937 rng(20261123);
  int schedules = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Problem problem = testing::random_problem(rng);
    problem.offload.reset();
    for (StageCosts& c : problem.stages) {
      c.checkpoint_bytes = c.activation_bytes / (1 + trial % 4);
      c.recompute_forward = c.forward * (0.5 + 0.1 * (trial % 6));
    }
    for (const Generator& generator : generators()) {
      if (!generator.unsupported_reason(problem).empty()) continue;
      SCOPED_TRACE(::testing::Message()
                   << "trial " << trial << " " << generator.name << " R=" << problem.ranks
                   << " v=" << problem.chunks_per_rank << " m=" << problem.microbatches);
      const Order order = generator.build(problem);
      const Schedule plain = simulate(problem, order, std::string(generator.name));
      const Schedule recomputing = simulate(problem, testing::recompute_all(order), "recompute");
      const auto violation = validate(problem, recomputing);
      ASSERT_FALSE(violation) << violation->message;
      const Metrics plain_metrics = compute_metrics(problem, plain);
      const Metrics metrics = compute_metrics(problem, recomputing);
      for (int r = 0; r < problem.ranks; ++r) {
        EXPECT_LE(metrics.ranks[r].peak_bytes, plain_metrics.ranks[r].peak_bytes) << "rank " << r;
      }
      EXPECT_GE(metrics.makespan, metrics.lower_bound - 1e-9);
      ++schedules;
    }
  }
  EXPECT_GT(schedules, 200);
}

TEST(GeneratorsProperty, EveryGeneratorServesSomeRandomProblem) {
  std::mt19937 rng(7);
  for (const Generator& generator : generators()) {
    bool served = false;
    for (int trial = 0; trial < 100 && !served; ++trial) {
      served = generator.unsupported_reason(testing::random_problem(rng)).empty();
    }
    EXPECT_TRUE(served) << generator.name;
  }
}

}  // namespace
}  // namespace optpipe
