// Offloads and recomputes a schedule does not need: where memory is ample every one goes, the
// schedule staying valid and no slower; where the budget needs some, they stay; nothing is tried
// once the deadline has passed.
#include "heuristics/offload_recompute_pruning.h"

#include <gtest/gtest.h>

#include <chrono>
#include <utility>

#include "heuristics/offload_placement.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using Clock = std::chrono::steady_clock;

using testing::count_ops;

// R = 4, m = 4, memory ample, with rank 0 offloading every activation after its F and reloading
// it right before its backward (testing::offloading_1f1b).
struct OffloadingOrder {
  Problem problem;
  Order order;
};
OffloadingOrder offloading_order() {
  Problem p = testing::uniform_problem(4, 1, 4);
  const Order order = order_of(testing::offloading_1f1b(p));
  return {std::move(p), order};
}

Clock::time_point in_a_minute() {
  return Clock::now() + std::chrono::minutes(1);
}

TEST(OffloadRecomputePruning, DropsEveryOffloadWhereMemoryIsAmple) {
  const auto [p, order] = offloading_order();
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  ASSERT_FALSE(validate(p, schedule));
  const std::optional<PrunedOrder> pruned =
      prune_offloads_and_recomputes(p, order, schedule, {.deadline = in_a_minute()});
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->offloads_dropped, p.microbatches);
  EXPECT_EQ(pruned->recomputes_dropped, 0);
  EXPECT_EQ(count_ops(pruned->schedule, Op::kOffload), 0);
  EXPECT_EQ(count_ops(pruned->schedule, Op::kReload), 0);
  EXPECT_FALSE(validate(p, pruned->schedule));
  EXPECT_LE(makespan_of(pruned->schedule), makespan_of(schedule) + 1e-9);
}

TEST(OffloadRecomputePruning, KeepsTheOffloadsTheBudgetNeeds) {
  const auto [roomy, order] = offloading_order();
  const Schedule at_roomy = simulate_within_budget(roomy, order, "offloading");
  const Problem p = testing::at_own_peaks(roomy, at_roomy);  // rank 0 fits only by offloading
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  ASSERT_FALSE(validate(p, schedule));
  const std::optional<PrunedOrder> pruned =
      prune_offloads_and_recomputes(p, order, schedule, {.deadline = in_a_minute()});
  const Schedule& result = pruned ? pruned->schedule : schedule;
  EXPECT_GT(count_ops(result, Op::kOffload), 0);
  EXPECT_FALSE(validate(p, result));
  EXPECT_LE(makespan_of(result), makespan_of(schedule) + 1e-9);
}

// The budget is the peak of the order that offloads microbatch 1 alone; the order that offloads
// all four runs within it as well. The other three offloads go, microbatch 1's stays.
TEST(OffloadRecomputePruning, DropsOnlyTheOffloadsTheBudgetDoesWithout) {
  const auto [roomy, order] = offloading_order();
  Order one = order;
  std::erase_if(one.ranks[0], [](const OpRef& r) {
    return (r.op == Op::kOffload || r.op == Op::kReload) && r.microbatch != 1;
  });
  const Problem p = testing::at_own_peaks(roomy, simulate(roomy, one, "offloading"));
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  ASSERT_FALSE(validate(p, schedule));
  const std::optional<PrunedOrder> pruned =
      prune_offloads_and_recomputes(p, order, schedule, {.deadline = in_a_minute()});
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->offloads_dropped, 3);
  EXPECT_EQ(pruned->order.ranks[0], one.ranks[0]);
  EXPECT_FALSE(validate(p, pruned->schedule));
  EXPECT_LE(makespan_of(pruned->schedule), makespan_of(schedule) + 1e-9);
}

TEST(OffloadRecomputePruning, DropsRecomputesWhereMemoryIsAmple) {
  Problem p = testing::uniform_problem(3, 1, 4);
  const Schedule schedule = testing::recomputing_1f1b(p, 100);
  const Order order = order_of(schedule);
  ASSERT_FALSE(validate(p, schedule));
  const std::optional<PrunedOrder> pruned =
      prune_offloads_and_recomputes(p, order, schedule, {.deadline = in_a_minute()});
  ASSERT_TRUE(pruned);
  EXPECT_EQ(pruned->recomputes_dropped, count_ops(schedule, Op::kRecompute));
  EXPECT_EQ(count_ops(pruned->schedule, Op::kRecompute), 0);
  EXPECT_FALSE(validate(p, pruned->schedule));
  // R's compute is gone from every rank.
  EXPECT_LT(makespan_of(pruned->schedule), makespan_of(schedule));
}

TEST(OffloadRecomputePruning, TriesNothingOnceTheDeadlineHasPassed) {
  const auto [p, order] = offloading_order();
  const Schedule schedule = simulate_within_budget(p, order, "offloading");
  EXPECT_FALSE(prune_offloads_and_recomputes(p, order, schedule, {.deadline = Clock::now()}));
}

}  // namespace
}  // namespace optpipe
