// Planned offload (heuristics/planned_offload.h): V-Min's order with offloads chosen from its
// in-flight peaks, on long V-shape pipelines at budgets far under V-Min's own peak.
#include "heuristics/planned_offload.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "heuristics/list_policies.h"
#include "heuristics/offload_placement.h"
#include "heuristics/vshape_patterns.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::offloading_uniform;
using testing::uniform_problem;
using testing::UniformCosts;
using testing::with_weight_grads;

// The best fit among the first `count` policies of the offloading lists' neighbourhood, which vary
// every knob (heuristics/list_policies.h).
double best_offloading_list(const Problem& problem, size_t count) {
  std::vector<ListPolicy> policies = offloading_policy_neighbourhood(problem);
  policies.resize(std::min(policies.size(), count));
  double best = std::numeric_limits<double>::infinity();
  for (const ListPolicy& policy : policies) {
    if (auto candidate = list_candidate(problem, policy, "test"); candidate && candidate->fits()) {
      best = std::min(best, candidate->makespan);
    }
  }
  return best;
}

// 16 stages on 8 ranks, pairs of ranks sharing a link (an offload or reload takes 0.45, an F 1),
// room for `activations` per rank, where V-Min's order holds up to 8.
Problem long_vshape(int64_t activations) {
  Problem problem =
      offloading_uniform(uniform_problem(8, 2, 48, with_weight_grads(), PlacementKind::kVShape),
                         2000, activations * 1000);
  for (int r = 0; r < problem.ranks; ++r) problem.offload->link_group_of_rank[r] = r / 2;
  return problem;
}

// With room for 4 activations the lists admit microbatches in waves behind their shared channels;
// the plan keeps V-Min's steady pattern and offloads what its peaks need.
TEST(PlannedOffload, BeatsTheOffloadingListsOnALongVShapeAtATightBudget) {
  const Problem problem = long_vshape(4);
  const std::optional<OffloadedSchedule> planned = planned_offload_schedule(problem, "test");
  ASSERT_TRUE(planned && planned->fits());
  EXPECT_FALSE(validate(problem, planned->schedule));
  EXPECT_GT(planned->offloads, 0);
  EXPECT_LT(planned->makespan, 0.92 * best_offloading_list(problem, 400));
}

// With the GPT profile's cost ratios (B 1.12 and W 0.88 of F), where V-Min's pattern waits, and
// room for 8 activations, V-Half's denser order fits with offloads: faster than V-Min's order
// alone, which fits without any.
TEST(PlannedOffload, TakesVHalfsDenserOrderWhereItsOffloadsFit) {
  UniformCosts costs = with_weight_grads();
  costs.backward_input = 1.12;
  costs.backward_weight = 0.88;
  Problem problem =
      offloading_uniform(uniform_problem(8, 2, 48, costs, PlacementKind::kVShape), 2000, 8000);
  for (int r = 0; r < problem.ranks; ++r) problem.offload->link_group_of_rank[r] = r / 2;
  const std::optional<OffloadedSchedule> planned = planned_offload_schedule(problem, "test");
  ASSERT_TRUE(planned && planned->fits());
  EXPECT_FALSE(validate(problem, planned->schedule));
  EXPECT_GT(planned->offloads, 0);
  const Schedule v_min =
      simulate(problem, vshape_pattern_order(problem, VShapePattern::kMin, true), "v-min");
  EXPECT_FALSE(validate(problem, v_min));
  EXPECT_LT(planned->makespan, 0.97 * makespan_of(v_min));
}

// Varied long V-shapes (8 to 12 ranks, per-stage costs, link groups of 1 to 3 ranks, shared or
// duplex channels, room for 3 to 10 activations): whatever the plan returns validates.
TEST(PlannedOffload, EveryPlanItReturnsValidates) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.5, 2.0);
  int planned_count = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int ranks = 8 + 2 * static_cast<int>(rng() % 3);
    Problem problem = offloading_uniform(
        uniform_problem(ranks, 2, 16 + 8 * static_cast<int>(rng() % 3), with_weight_grads(),
                        PlacementKind::kVShape, 0.05),
        1000 + 500 * static_cast<double>(rng() % 4), 1000 * (3 + static_cast<int64_t>(rng() % 8)));
    for (StageCosts& stage : problem.stages) {
      stage.forward = cost(rng);
      stage.backward_input = cost(rng);
      stage.backward_weight = cost(rng);
    }
    const int group_size = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < ranks; ++r) problem.offload->link_group_of_rank[r] = r / group_size;
    if (rng() % 2) problem.offload->channels = ChannelMode::kShared;
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const std::optional<OffloadedSchedule> planned = planned_offload_schedule(problem, "test");
    if (!planned) continue;
    ++planned_count;
    EXPECT_TRUE(planned->fits());
    const std::optional<Violation> violation = validate(problem, planned->schedule);
    EXPECT_FALSE(violation) << violation->message;
  }
  EXPECT_GE(planned_count, 12);
}

TEST(PlannedOffload, NothingFasterThanAskedAndNothingBelowItsReach) {
  const Problem problem = long_vshape(4);
  const std::optional<OffloadedSchedule> planned = planned_offload_schedule(problem, "test");
  ASSERT_TRUE(planned);
  EXPECT_FALSE(planned_offload_schedule(problem, "test", planned->makespan));
  // Room for less than the bytes every activation in flight keeps on the device.
  EXPECT_FALSE(planned_offload_schedule(long_vshape(1), "test"));
}

TEST(PlannedOffload, AppliesToLongVShapePipelinesWithAHostLinkOnly) {
  EXPECT_TRUE(planned_offload_applies(long_vshape(4)));
  Problem no_link = long_vshape(4);
  no_link.offload.reset();
  EXPECT_FALSE(planned_offload_applies(no_link));
  EXPECT_FALSE(planned_offload_schedule(no_link, "test"));
  EXPECT_FALSE(planned_offload_applies(
      offloading_uniform(uniform_problem(8, 2, 48, with_weight_grads()), 2000, 4000)));
  EXPECT_FALSE(planned_offload_applies(offloading_uniform(
      uniform_problem(4, 2, 48, with_weight_grads(), PlacementKind::kVShape), 2000, 4000)));
}

}  // namespace
}  // namespace optpipe
