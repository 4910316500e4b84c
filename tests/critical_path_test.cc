// The critical path: from the action that ends last back to the start, through dependencies,
// ranks' previous compute ops, the offloads an allocation waited for and what held a transfer.
#include "solver/critical_path.h"

#include <gtest/gtest.h>

#include "tests/test_problems.h"
#include "timing/simulator.h"

namespace optpipe {
namespace {

using testing::uniform_problem;

std::vector<std::tuple<int, OpRef, OpRef>> as_tuples(const std::vector<CriticalPair>& pairs) {
  std::vector<std::tuple<int, OpRef, OpRef>> out;
  for (const CriticalPair& p : pairs) out.emplace_back(p.rank, p.before, p.after);
  return out;
}

TEST(CriticalPath, OneRankIsOneBlockOfBackToBackOps) {
  const Problem p = uniform_problem(1, 1, 2);
  const Order order{{{{Op::kForward, 0, 0},
                      {Op::kForward, 0, 1},
                      {Op::kBackwardInput, 0, 0},
                      {Op::kBackwardWeight, 0, 0},
                      {Op::kBackwardInput, 0, 1},
                      {Op::kBackwardWeight, 0, 1}}}};
  const auto pairs = as_tuples(critical_pairs(p, simulate(p, order, "serial")));
  const std::vector<std::tuple<int, OpRef, OpRef>> expected = {
      {0, {Op::kBackwardInput, 0, 1}, {Op::kBackwardWeight, 0, 1}},
      {0, {Op::kBackwardWeight, 0, 0}, {Op::kBackwardInput, 0, 1}},
      {0, {Op::kBackwardInput, 0, 0}, {Op::kBackwardWeight, 0, 0}},
      {0, {Op::kForward, 0, 1}, {Op::kBackwardInput, 0, 0}},
      {0, {Op::kForward, 0, 0}, {Op::kForward, 0, 1}}};
  EXPECT_EQ(pairs, expected);
}

// Two ranks, one microbatch: W(s0) ends last; its B waits for B(s1) on rank 1 (a dependency, not
// rank 0's F, which ended long before), whose F it follows back to F(s0).
TEST(CriticalPath, CrossesRanksAlongDependencies) {
  const Problem p = uniform_problem(2, 1, 1);
  const Order order{
      {{{Op::kForward, 0, 0}, {Op::kBackwardInput, 0, 0}, {Op::kBackwardWeight, 0, 0}},
       {{Op::kForward, 1, 0}, {Op::kBackwardInput, 1, 0}, {Op::kBackwardWeight, 1, 0}}}};
  const auto pairs = as_tuples(critical_pairs(p, simulate(p, order, "serial")));
  const std::vector<std::tuple<int, OpRef, OpRef>> expected = {
      {0, {Op::kBackwardInput, 0, 0}, {Op::kBackwardWeight, 0, 0}},
      {1, {Op::kForward, 1, 0}, {Op::kBackwardInput, 1, 0}}};
  EXPECT_EQ(pairs, expected);
}

// One rank with room for one activation: F1 waits for OFFLOAD0, so the path runs F1 <- OFFLOAD0
// <- F0, and F0 -> F1 is no pair: F1 did not wait for F0 to end. RELOAD0, issued after BW1, waits
// for it to end: listed before BW1, it could run beside it, so the two are a pair.
TEST(CriticalPath, FollowsTheOffloadAnAllocationWaitedFor) {
  Problem p = uniform_problem(1, 1, 2);
  p.offload = OffloadLink{1000, 1000, ChannelMode::kDuplex, {0}};
  p.budget_bytes[0] = p.static_bytes[0] + 1000;
  const Order order{{{{Op::kForward, 0, 0},
                      {Op::kOffload, 0, 0},
                      {Op::kForward, 0, 1},
                      {Op::kBackward, 0, 1},
                      {Op::kReload, 0, 0},
                      {Op::kBackward, 0, 0}}}};
  const auto pairs = as_tuples(critical_pairs(p, simulate_within_budget(p, order, "fenced")));
  // F0 [0,1], OFFLOAD0 [1,2], F1 [2,3], BW1 [3,5], RELOAD0 [5,6], BW0 [6,8].
  const std::vector<std::tuple<int, OpRef, OpRef>> expected = {
      {0, {Op::kBackward, 0, 1}, {Op::kReload, 0, 0}},
      {0, {Op::kForward, 0, 1}, {Op::kBackward, 0, 1}}};
  EXPECT_EQ(pairs, expected);
}

}  // namespace
}  // namespace optpipe
