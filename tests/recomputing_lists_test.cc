// The recompute-everything list orders: within the view's budget means within the problem's, and
// AdaOffload takes them where memory holds a long pipeline back.
#include "heuristics/recomputing_lists.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "heuristics/list_policies.h"
#include "heuristics/list_scheduler.h"
#include "model/errors.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

int recompute_ops(const Schedule& schedule) {
  int count = 0;
  for (const auto& actions : schedule.ranks) {
    count += static_cast<int>(std::count_if(actions.begin(), actions.end(), [](const Action& a) {
      return a.ref.op == Op::kRecompute;
    }));
  }
  return count;
}

// Random problems whose stages can recompute, at budgets from one activation up: wherever the
// list scheduler keeps the view within its budget, the order with its Rs validates on the
// problem itself, memory included.
TEST(RecomputingLists, WithinTheViewsBudgetIsWithinTheProblems) {
  std::mt19937 rng(20261125);
  int within = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Problem problem = testing::random_problem(rng);
    for (StageCosts& c : problem.stages) {
      c.checkpoint_bytes = std::uniform_int_distribution<int64_t>(0, c.activation_bytes / 2)(rng);
      c.weight_grad_bytes = std::uniform_int_distribution<int64_t>(0, c.activation_bytes / 2)(rng);
      c.recompute_forward = c.forward * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    }
    const double room = std::uniform_real_distribution<double>(1.0, 8.0)(rng);
    for (int r = 0; r < problem.ranks; ++r) {
      problem.budget_bytes[r] = problem.static_bytes[r] + static_cast<int64_t>(room * 1000);
    }
    const Problem view = recomputing_view(problem);
    for (const bool later_first : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " R=" << problem.ranks
                                        << " v=" << problem.chunks_per_rank
                                        << " m=" << problem.microbatches << " room " << room);
      const ListOutcome outcome =
          list_schedule_with_outcome(view, memory_limited_policy(view, 1.0, later_first));
      if (!outcome.deadlock.empty()) continue;  // a starved rank: AdaOffload skips it too
      bool view_within = true;
      for (int r = 0; r < problem.ranks; ++r) {
        view_within &= outcome.peak_live_bytes[r] <= view.activation_budget(r);
      }
      if (!view_within) continue;
      const std::optional<Order> order = recomputing_list_order(problem, later_first);
      ASSERT_TRUE(order);
      const Schedule schedule = simulate(problem, *order, "recompute-all");
      const auto violation = validate(problem, schedule);
      ASSERT_FALSE(violation) << violation->message;
      EXPECT_EQ(recompute_ops(schedule), problem.num_stages() * problem.microbatches);
      ++within;
    }
  }
  std::printf("%d orders within the view's budget\n", within);
  // Measured: 354.
  EXPECT_GT(within, 300);
}

// R = 4, v = 2, m = 16, unit ops, p2p 2, A = 1000, C = 10, G = 0, room for 2 whole activations a
// rank, no link: a round trip passes 8 stages and 14 hand-offs (44 units) while a memory-limited
// order holds at most 2 chunks' activations on a rank, so ranks mostly wait (525). Recomputing
// every activation holds 10 bytes each between F and R, for 32 units of R a rank: 137, where the
// dense orders with recompute covering only their excess reach 151.
TEST(RecomputingLists, AdaOffloadRecomputesWhereMemoryHoldsThePipelineBack) {
  testing::UniformCosts costs;
  costs.checkpoint_bytes = 10;
  Problem problem = testing::uniform_problem(4, 2, 16, costs, PlacementKind::kLoop, 2);
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = problem.static_bytes[r] + 2000;
  const double memory_limited =
      compute_metrics(
          problem,
          simulate(problem, list_schedule(problem, memory_limited_policy(problem, 1.0, true)),
                   "memory-limited"))
          .makespan;
  const testing::TimedSchedule ada = testing::run_generator("adaoffload", problem);
  EXPECT_TRUE(ada.metrics.within_budget);
  EXPECT_GT(recompute_ops(ada.schedule), 0);
  std::printf("memory-limited %.1f, adaoffload %.1f\n", memory_limited, ada.metrics.makespan);
  EXPECT_LT(ada.metrics.makespan, 0.3 * memory_limited);
  EXPECT_LT(ada.metrics.makespan, 145);
}

// R = 4, v = 2, m = 32, unit ops but T_R = 2, p2p 2, A = 1000, C = 10, G = 250, room for 2
// whole activations a rank, a link of 400 bytes per time unit each way per pair of ranks.
// Offloading fits the dense compute orders, but the shared channels pace them; recomputing
// them instead (224 of 256 activations) is much faster: 342 against 609 when recompute only
// covered orders that offload could not fit.
TEST(RecomputingLists, AdaOffloadRecomputesWhereTheLinkSlowsTheFitDown) {
  testing::UniformCosts costs;
  costs.checkpoint_bytes = 10;
  costs.weight_grad_bytes = 250;
  Problem problem = testing::uniform_problem(4, 2, 32, costs, PlacementKind::kLoop, 2);
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = problem.static_bytes[r] + 2000;
  for (StageCosts& c : problem.stages) c.recompute_forward = 2;
  problem.offload = OffloadLink{400, 400, ChannelMode::kDuplex, {0, 0, 1, 1}};
  const testing::TimedSchedule ada = testing::run_generator("adaoffload", problem);
  EXPECT_TRUE(ada.metrics.within_budget);
  EXPECT_GT(recompute_ops(ada.schedule), 0);
  EXPECT_LT(ada.metrics.makespan, 400);
}

}  // namespace
}  // namespace optpipe
