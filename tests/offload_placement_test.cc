// The offload passes the offload generators share (heuristics/offload_placement.h): where an
// offload and its reload go on the copy channels, and what is kept when a round trip does not fit.
#include "heuristics/offload_placement.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// One rank, three microbatches run GPipe-style with split backward: F0 F1 F2 B2 W2 B1 W1 B0 W0,
// unit times. Offloading F0's activation (1 unit each way): D2H right after F0 ends, H2D in the
// latest slot that ends when B0 starts, listed after B1 (the last op that ends by 6).
TEST(OffloadPlacement, OffloadRightAfterItsForwardReloadInTheLatestSlotBeforeItsBackward) {
  Problem problem = testing::uniform_problem(1, 1, 3);
  OffloadLink link;
  link.d2h_bytes_per_time = 1000;
  link.h2d_bytes_per_time = 1000;
  link.link_group_of_rank = {0};
  problem.offload = link;
  Order compute{{{}}};
  for (int j = 0; j < 3; ++j) compute.ranks[0].push_back({Op::kForward, 0, j});
  for (int j = 2; j >= 0; --j) {
    compute.ranks[0].push_back({Op::kBackwardInput, 0, j});
    compute.ranks[0].push_back({Op::kBackwardWeight, 0, j});
  }
  OffloadSet chosen(problem);
  chosen.add(0, 0);
  const Order order =
      insert_transfers(problem, compute, simulate(problem, compute, "compute"), chosen);
  const std::vector<OpRef> expected = {
      {Op::kForward, 0, 0},       {Op::kOffload, 0, 0},       {Op::kForward, 0, 1},
      {Op::kForward, 0, 2},       {Op::kBackwardInput, 0, 2}, {Op::kBackwardWeight, 0, 2},
      {Op::kBackwardInput, 0, 1}, {Op::kReload, 0, 0},        {Op::kBackwardWeight, 0, 1},
      {Op::kBackwardInput, 0, 0}, {Op::kBackwardWeight, 0, 0}};
  ASSERT_EQ(order.ranks[0].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(order.ranks[0][i], expected[i]) << i << ": " << describe(order.ranks[0][i]);
  }
  const Schedule timed = simulate(problem, order, "placed");
  EXPECT_FALSE(validate(problem, timed));
  EXPECT_DOUBLE_EQ(makespan_of(timed), 9.0);  // the reload [6, 7] does not delay B0 at 7
  // F0's activation is on host while F2 runs: two activations live instead of three.
  EXPECT_EQ(compute_metrics(problem, timed).ranks[0].peak_bytes - problem.static_bytes[0], 2000);
}

TEST(OffloadPlacement, KeepsAnActivationWhoseRoundTripDoesNotFit) {
  Problem problem = testing::uniform_problem(1, 1, 1);
  OffloadLink link;
  link.d2h_bytes_per_time = 100;  // 10 units each way, F to B is 0
  link.h2d_bytes_per_time = 100;
  link.link_group_of_rank = {0};
  problem.offload = link;
  const Order compute{{{{Op::kForward, 0, 0}, {Op::kBackward, 0, 0}}}};
  OffloadSet chosen(problem);
  chosen.add(0, 0);
  const Order order =
      insert_transfers(problem, compute, simulate(problem, compute, "compute"), chosen);
  EXPECT_FALSE(chosen.contains(0, 0));
  EXPECT_EQ(order.ranks[0].size(), 2u);
}

}  // namespace
}  // namespace optpipe
