// The memory-limited list scheduler (heuristics/list_scheduler.h) on random problems, limits and
// policies: its own timing, its memory limit and its abandoning of runs that cannot win.
#include "heuristics/list_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::one_microbatch_bytes;

// The memory-limited list scheduler on random problems, limits and policies: it never deadlocks
// (the banker's check), its own timing is the simulator's, and its peaks stay under the limit
// wherever the limit holds one microbatch.
TEST(ListScheduler, PredictsTheSimulatorAndKeepsItsLimit) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const Problem p = testing::random_problem(rng);
    ListPolicy policy;
    policy.backward_first = trial % 2 == 0;
    policy.later_chunk_first = trial % 3 == 0;
    policy.weights = trial % 5 == 0   ? WeightTiming::kWhenMemoryNeeds
                     : trial % 5 == 1 ? WeightTiming::kGapAware
                                      : WeightTiming::kFillGaps;
    for (int r = 0; r < p.ranks; ++r) {
      const double factor = std::uniform_real_distribution<double>(0.5, 2.0 * p.ranks)(rng);
      policy.memory_limit_bytes.push_back(
          static_cast<int64_t>(factor * one_microbatch_bytes(p, r)));
      if (trial % 4 == 0) {
        policy.max_in_flight.push_back(std::uniform_int_distribution<int>(1, 2 * p.ranks)(rng));
      }
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " R=" << p.ranks
                                      << " v=" << p.chunks_per_rank << " m=" << p.microbatches);
    const ListOutcome outcome = list_schedule_with_outcome(p, policy);
    ASSERT_TRUE(outcome.deadlock.empty()) << outcome.deadlock;
    const Schedule schedule = simulate(p, outcome.order, "list");
    const auto violation = validate(p, schedule);  // random problems have ample budgets
    ASSERT_FALSE(violation) << violation->message;
    const Metrics metrics = compute_metrics(p, schedule);
    EXPECT_NEAR(outcome.makespan, metrics.makespan, 1e-9);
    EXPECT_NEAR(outcome.span, metrics.span, 1e-9);
    for (int r = 0; r < p.ranks; ++r) {
      EXPECT_EQ(outcome.peak_live_bytes[r], metrics.ranks[r].peak_bytes - p.static_bytes[r]);
      EXPECT_LE(outcome.peak_live_bytes[r],
                std::max(policy.memory_limit_bytes[r], one_microbatch_bytes(p, r)));
    }
  }
}

// A search over policies passes its best makespan so far: a run is abandoned only when its
// makespan would exceed it, and otherwise returns what an unbounded run does.
TEST(ListScheduler, AbandonsOnlyRunsThatCannotBeatTheBound) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const Problem p = testing::random_problem(rng);
    ListPolicy policy;
    policy.later_chunk_first = trial % 2 == 0;
    for (int r = 0; r < p.ranks; ++r) {
      policy.memory_limit_bytes.push_back(2 * one_microbatch_bytes(p, r));
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const ListOutcome unbounded = list_schedule_with_outcome(p, policy);
    policy.abandon_above_makespan = unbounded.makespan;
    const ListOutcome tied = list_schedule_with_outcome(p, policy);
    EXPECT_FALSE(tied.abandoned);
    EXPECT_EQ(tied.order.ranks, unbounded.order.ranks);
    policy.abandon_above_makespan = unbounded.makespan * (1 - 1e-6);
    EXPECT_TRUE(list_schedule_with_outcome(p, policy).abandoned);
  }
}

}  // namespace
}  // namespace optpipe
