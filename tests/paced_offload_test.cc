// Memory-paced offload (heuristics/paced_offload.h) and the memory fence it relies on: on coarse
// stages with about two activations of headroom it keeps the link busy where the other generators
// hold one microbatch in flight, and with ample memory it offloads nothing.
#include "heuristics/paced_offload.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/test_problems.h"
#include "timing/memory_fence.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::count_ops;
using testing::uniform_problem;
using testing::UniformCosts;

constexpr int64_t kGiB = int64_t{1} << 30;

// Six ranks of coarse stages (F 120, B 150, W 90 ms; 6 GiB activations, 5.6 GiB of them kept for
// W), 24 microbatches, a 40 GB/s duplex link per rank and 14.4 GiB for activations: 1F1B needs up
// to six activations on rank 0, and an offload takes longer than a forward.
Problem coarse_tight() {
  const UniformCosts costs{.forward = 120,
                           .backward_input = 150,
                           .backward_weight = 90,
                           .activation_bytes = 6 * kGiB,
                           .weight_grad_bytes = 6012954214};
  Problem p = uniform_problem(6, 1, 24, costs, PlacementKind::kLoop, 0.4);
  OffloadLink link;
  link.d2h_bytes_per_time = 40e9 / 1e3;  // bytes per ms
  link.h2d_bytes_per_time = 40e9 / 1e3;
  link.channels = ChannelMode::kDuplex;
  for (int r = 0; r < p.ranks; ++r) link.link_group_of_rank.push_back(r);
  p.offload = link;
  for (StageCosts& stage : p.stages) stage.offloadable_bytes = stage.activation_bytes;
  for (int r = 0; r < p.ranks; ++r) {
    p.static_bytes[r] = 20 * kGiB;
    p.budget_bytes[r] = 36936718745;
  }
  return p;
}

// The bar is a hand-written greedy of the same policy (1F1B with W right after B, every
// activation of the ranks over budget offloaded, reloads three ops ahead, each F waiting for
// memory): 9,994 ms, where the list policies of AdaOffload found 21,820.
TEST(PacedOffload, KeepsTheLinkBusyOnCoarseStagesWithLittleHeadroom) {
  const Problem problem = coarse_tight();
  ASSERT_TRUE(paced_offload_unsupported(problem).empty());
  const Schedule schedule =
      simulate_within_budget(problem, paced_offload_order(problem), "paced-offload");
  EXPECT_FALSE(validate(problem, schedule)) << validate(problem, schedule)->message;
  EXPECT_LE(makespan_of(schedule), 9994 + 1e-6);
  EXPECT_GT(count_ops(schedule, Op::kOffload), 0);
}

TEST(PacedOffload, OffloadsNothingWhereEveryRankHoldsItsInFlightSet) {
  Problem problem = coarse_tight();
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = 80 * kGiB;
  const Schedule schedule =
      simulate_within_budget(problem, paced_offload_order(problem), "paced-offload");
  EXPECT_FALSE(validate(problem, schedule));
  EXPECT_EQ(count_ops(schedule, Op::kOffload), 0);
}

TEST(PacedOffload, NeedsAHostLink) {
  EXPECT_FALSE(paced_offload_unsupported(uniform_problem(4, 1, 8)).empty());
}

// An allocation issued before what the rank has recorded since (a RELOAD held for memory while a
// forward took it) is answered no earlier than the last recorded start: the releases before it
// are no longer told apart, and at the RELOAD's own issue time the rank held more than its live
// bytes say now.
TEST(MemoryFence, AnswersNoEarlierThanTheLastRecordedStart) {
  MemoryFence fence(/*activation_budget=*/14);
  fence.record(0, 5, {.allocated_at_start = 6, .released_at_end = 0}, false);    // F0
  fence.record(5, 10, {.allocated_at_start = 6, .released_at_end = 0}, false);   // F1
  fence.record(10, 20, {.allocated_at_start = 0, .released_at_end = 6}, true);   // OFFLOAD0
  fence.record(20, 25, {.allocated_at_start = 0, .released_at_end = 6}, true);   // OFFLOAD1
  fence.record(30, 35, {.allocated_at_start = 6, .released_at_end = 0}, false);  // F2
  // At 15 the rank held 12 (F0 until OFFLOAD0's end, F1): 6 more did not fit then. Asked now,
  // the answer is no earlier than F2's start, when they do.
  EXPECT_EQ(fence.earliest_fit(15, 6), 30.0);
  EXPECT_EQ(fence.earliest_fit(40, 6), 40.0);
}

}  // namespace
}  // namespace optpipe
