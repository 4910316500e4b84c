// The simulator: ASAP timing of an order, transfers on copy channels, deadlock detection.
#include "compiler/simulator.h"

#include <gtest/gtest.h>

#include "compiler/errors.h"
#include "compiler/validator.h"
#include "tests/test_problems.h"

namespace optpipe {
namespace {

using testing::uniform_problem;

const Action& find(const Schedule& s, int rank, OpRef ref) {
  for (const Action& a : s.ranks[rank]) {
    if (a.ref == ref) return a;
  }
  throw std::runtime_error("missing " + describe(ref));
}

Problem with_offload(Problem p, ChannelMode mode, std::vector<int> groups) {
  OffloadLink link;
  link.d2h_bytes_per_time = 1000;  // one activation (1000 B) per time unit
  link.h2d_bytes_per_time = 500;
  link.channels = mode;
  link.link_group_of_rank = std::move(groups);
  p.offload = link;
  return p;
}

TEST(Simulator, TimesOneMicrobatchAlongTheCriticalPathWithLatency) {
  const Problem p = uniform_problem(2, 1, 1, {1, 2, 3}, PlacementKind::kLoop, 0.5);
  Order order{{{{Op::kForward, 0, 0}, {Op::kBackwardInput, 0, 0}, {Op::kBackwardWeight, 0, 0}},
               {{Op::kForward, 1, 0}, {Op::kBackward, 1, 0}}}};
  const Schedule s = simulate(p, order, "manual");
  EXPECT_DOUBLE_EQ(find(s, 1, {Op::kForward, 1, 0}).start, 1.5);  // F0 end + latency
  EXPECT_DOUBLE_EQ(find(s, 1, {Op::kBackward, 1, 0}).end, 7.5);   // 2.5 + B 2 + W 3
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackwardInput, 0, 0}).start, 8.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackwardWeight, 0, 0}).end, 13.0);
  EXPECT_FALSE(validate(p, s));
}

TEST(Simulator, DetectsACyclicWaitAcrossRanks) {
  const Problem p = uniform_problem(2, 1, 2);
  // Rank 0 wants B of microbatch 0 before it sends F of microbatch 1, rank 1 wants F1 first.
  Order order{
      {{{Op::kForward, 0, 0}, {Op::kBackward, 0, 0}, {Op::kForward, 0, 1}, {Op::kBackward, 0, 1}},
       {{Op::kForward, 1, 1}, {Op::kForward, 1, 0}, {Op::kBackward, 1, 0}, {Op::kBackward, 1, 1}}}};
  try {
    simulate(p, order, "cyclic");
    FAIL() << "expected a deadlock";
  } catch (const DeadlockError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: F(s1, mb1) waits for F(s0, mb1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Simulator, ReportsAnOpMissingFromTheOrder) {
  const Problem p = uniform_problem(2, 1, 1);
  Order order{{{{Op::kForward, 0, 0}, {Op::kBackward, 0, 0}}, {{Op::kBackward, 1, 0}}}};
  EXPECT_THROW(simulate(p, order, "missing"), DeadlockError);
}

TEST(Simulator, RejectsAnOpOnTheWrongRank) {
  const Problem p = uniform_problem(2, 1, 1);
  Order order{{{{Op::kForward, 1, 0}}, {}}};
  EXPECT_THROW(simulate(p, order, "misplaced"), Error);
}

// One rank, two microbatches, both activations offloaded: transfers follow their F, reloads
// precede their B, and the order of issue decides the channel order.
Order offload_both(int stage) {
  return Order{{{{Op::kForward, stage, 0},
                 {Op::kOffload, stage, 0},
                 {Op::kForward, stage, 1},
                 {Op::kOffload, stage, 1},
                 {Op::kReload, stage, 0},
                 {Op::kReload, stage, 1},
                 {Op::kBackward, stage, 0},
                 {Op::kBackward, stage, 1}}}};
}

TEST(Simulator, DuplexChannelsOverlapOffloadAndReload) {
  const Problem p = with_offload(uniform_problem(1, 1, 2), ChannelMode::kDuplex, {0});
  const Schedule s = simulate(p, offload_both(0), "offload");
  // D2H 1/unit: OFFLOAD0 [1,2]; OFFLOAD1 [2,3]; RELOAD0 issued at 2 (after F1), H2D 2 units: [2,4].
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kOffload, 0, 1}).start, 2.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kReload, 0, 0}).start, 2.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackward, 0, 0}).start, 4.0);
  EXPECT_FALSE(validate(p, s));
}

TEST(Simulator, SharedChannelSerialisesBothDirections) {
  const Problem p = with_offload(uniform_problem(1, 1, 2), ChannelMode::kShared, {0});
  const Schedule s = simulate(p, offload_both(0), "offload");
  // RELOAD0 waits for OFFLOAD1 [2,3] on the shared queue: [3,5].
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kReload, 0, 0}).start, 3.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackward, 0, 0}).start, 5.0);
  EXPECT_FALSE(validate(p, s));
}

TEST(Simulator, LinkGroupSharesChannelsAcrossRanks) {
  // Two ranks, both offload stage activations at the same moment on one link.
  Problem p = with_offload(uniform_problem(2, 1, 1), ChannelMode::kDuplex, {0, 0});
  Order order{
      {{{Op::kForward, 0, 0}, {Op::kOffload, 0, 0}, {Op::kReload, 0, 0}, {Op::kBackward, 0, 0}},
       {{Op::kForward, 1, 0}, {Op::kBackward, 1, 0}}}};
  Schedule alone = simulate(p, order, "alone");
  EXPECT_FALSE(validate(p, alone));
  // Rank 1 also offloads: its reload (ready at 3) waits for rank 0's reload [2,4] on the shared
  // H2D channel.
  order.ranks[1] = {
      {Op::kForward, 1, 0}, {Op::kOffload, 1, 0}, {Op::kReload, 1, 0}, {Op::kBackward, 1, 0}};
  const Schedule shared = simulate(p, order, "shared");
  EXPECT_DOUBLE_EQ(find(shared, 1, {Op::kReload, 1, 0}).start, 4.0);
  EXPECT_FALSE(validate(p, shared));
  p.offload->link_group_of_rank = {0, 1};
  const Schedule separate = simulate(p, order, "separate");
  EXPECT_DOUBLE_EQ(find(separate, 1, {Op::kReload, 1, 0}).start, 3.0);
  EXPECT_DOUBLE_EQ(find(separate, 0, {Op::kBackward, 0, 0}).end, 9.0);
  EXPECT_DOUBLE_EQ(find(shared, 0, {Op::kBackward, 0, 0}).end, 10.0);
}

Problem recompute_problem(int ranks) {
  testing::UniformCosts costs{1, 2, 1};
  costs.checkpoint_bytes = 100;
  Problem p = uniform_problem(ranks, 1, 1, costs);
  p.stages[0].recompute_forward = 0.5;
  return p;
}

TEST(Simulator, RecomputeRunsOnTheComputeStreamBetweenForwardAndBackward) {
  const Problem p = recompute_problem(2);
  Order order{{{{Op::kForward, 0, 0}, {Op::kRecompute, 0, 0}, {Op::kBackward, 0, 0}},
               {{Op::kForward, 1, 0}, {Op::kBackward, 1, 0}}}};
  const Schedule s = simulate(p, order, "recompute");
  // R runs as soon as F0 has ended and the rank is free; BW0 waits for BW1 [2, 5].
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kRecompute, 0, 0}).start, 1.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kRecompute, 0, 0}).end, 1.5);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackward, 0, 0}).start, 5.0);
  EXPECT_FALSE(validate(p, s));

  // With one stage R lies on the critical path: BW starts when R ends.
  const Problem one = recompute_problem(1);
  const Schedule alone = simulate(
      one, Order{{{{Op::kForward, 0, 0}, {Op::kRecompute, 0, 0}, {Op::kBackward, 0, 0}}}}, "r");
  EXPECT_DOUBLE_EQ(find(alone, 0, {Op::kBackward, 0, 0}).start, 1.5);
  EXPECT_FALSE(validate(one, alone));
}

TEST(Simulator, ABackwardListedBeforeItsRecomputeDeadlocks) {
  const Problem p = recompute_problem(1);
  Order order{{{{Op::kForward, 0, 0}, {Op::kBackward, 0, 0}, {Op::kRecompute, 0, 0}}}};
  try {
    simulate(p, order, "late recompute");
    FAIL() << "expected a deadlock";
  } catch (const DeadlockError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: BW(s0, mb0) waits for R(s0, mb0)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Simulator, RejectsARecomputeOnAStageWithoutCheckpointBytes) {
  Problem p = recompute_problem(1);
  p.stages[0].checkpoint_bytes.reset();
  Order order{{{{Op::kForward, 0, 0}, {Op::kRecompute, 0, 0}, {Op::kBackward, 0, 0}}}};
  EXPECT_THROW(simulate(p, order, "no checkpoint"), Error);
}

}  // namespace
}  // namespace optpipe
