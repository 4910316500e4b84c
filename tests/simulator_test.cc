// The simulator: ASAP timing of an order, transfers on copy channels, deadlock detection.
#include "timing/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "heuristics/offload_placement.h"
#include "heuristics/one_f_one_b.h"
#include "model/errors.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/validator.h"

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

// One rank, one stage, room for one activation (A = 1000 B): each F waits for the offload of the
// one before it, which plain simulate() starts as soon as the compute stream is free.
TEST(Simulator, WithinBudgetAForwardWaitsForTheOffloadThatFreesItsMemory) {
  Problem p = with_offload(uniform_problem(1, 1, 2), ChannelMode::kDuplex, {0});
  p.budget_bytes[0] = p.static_bytes[0] + 1000;
  const Order order{{{{Op::kForward, 0, 0},
                      {Op::kOffload, 0, 0},
                      {Op::kForward, 0, 1},
                      {Op::kOffload, 0, 1},
                      {Op::kReload, 0, 0},
                      {Op::kBackward, 0, 0},
                      {Op::kReload, 0, 1},
                      {Op::kBackward, 0, 1}}}};
  ASSERT_TRUE(validate(p, simulate(p, order, "asap")));  // F1 at 1, before OFFLOAD0 ends
  const Schedule s = simulate_within_budget(p, order, "fenced");
  // F0 [0,1]; OFFLOAD0 [1,2] (queued when F1 is first ready: F1 waits for it); F1 [2,3];
  // OFFLOAD1 [3,4]; RELOAD0, issued at 3, waits for OFFLOAD1's end: [4,6] (H2D 2 units);
  // BW0 [6,8]; RELOAD1 [8,10]; BW1 [10,12].
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kForward, 0, 1}).start, 2.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kReload, 0, 0}).start, 4.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kBackward, 0, 1}).end, 12.0);
  const auto violation = validate(p, s);
  EXPECT_FALSE(violation) << violation->message;
}

// Room for two activations: F2 finds OFFLOAD0 timed (D2H at 500 B per unit: [1,3]) and waits
// for its end, not for OFFLOAD1's.
TEST(Simulator, WithinBudgetAForwardWaitsOnlyAsLongAsItMust) {
  Problem p = with_offload(uniform_problem(1, 1, 3), ChannelMode::kDuplex, {0});
  p.offload->d2h_bytes_per_time = 500;
  p.budget_bytes[0] = p.static_bytes[0] + 2000;
  Order order{{{{Op::kForward, 0, 0},
                {Op::kOffload, 0, 0},
                {Op::kForward, 0, 1},
                {Op::kOffload, 0, 1},
                {Op::kForward, 0, 2}}}};
  for (int j : {0, 1}) {
    order.ranks[0].push_back({Op::kReload, 0, j});
    order.ranks[0].push_back({Op::kBackward, 0, j});
  }
  order.ranks[0].push_back({Op::kBackward, 0, 2});
  const Schedule s = simulate_within_budget(p, order, "fenced");
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kForward, 0, 1}).start, 1.0);
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kForward, 0, 2}).start, 3.0);
  const auto violation = validate(p, s);
  EXPECT_FALSE(violation) << violation->message;
}

// An offload listed after the F that needs its memory is issued only once that F has ended: no
// wait can make room, so the F starts as without the fence and the validator rejects it.
TEST(Simulator, WithinBudgetNothingWaitsForAnOffloadListedLater) {
  Problem p = with_offload(uniform_problem(1, 1, 2), ChannelMode::kDuplex, {0});
  p.budget_bytes[0] = p.static_bytes[0] + 1000;
  const Order order{{{{Op::kForward, 0, 0},
                      {Op::kForward, 0, 1},
                      {Op::kOffload, 0, 0},
                      {Op::kOffload, 0, 1},
                      {Op::kReload, 0, 0},
                      {Op::kBackward, 0, 0},
                      {Op::kReload, 0, 1},
                      {Op::kBackward, 0, 1}}}};
  const Schedule s = simulate_within_budget(p, order, "fenced");
  EXPECT_DOUBLE_EQ(find(s, 0, {Op::kForward, 0, 1}).start, 1.0);
  const auto violation = validate(p, s);
  ASSERT_TRUE(violation);
  EXPECT_NE(violation->message.find("exceeds the budget"), std::string::npos) << violation->message;
}

// A random problem with an offload link and one chunk per rank, each activation offloadable
// whole, and a budget of 1 to `max_activations` of the largest; nullopt for a draw without a link.
std::optional<Problem> offloading_problem(std::mt19937& rng, int max_activations) {
  Problem p = testing::random_problem(rng);
  if (!p.offload || p.chunks_per_rank != 1) return std::nullopt;
  int64_t largest = 0;
  for (StageCosts& c : p.stages) {
    c.offloadable_bytes = c.activation_bytes;
    largest = std::max(largest, c.activation_bytes);
  }
  const int activations = std::uniform_int_distribution<int>(1, max_activations)(rng);
  p.budget_bytes.assign(p.ranks, p.static_bytes[0] + largest * activations);
  return p;
}

// 1F1B's order with each F offloaded at 75% (OFFLOAD right after the F) and its RELOAD right
// before its backward or one action earlier, as the local search lists them.
Order one_f_one_b_with_offloads(const Problem& p, std::mt19937& rng) {
  Order order = one_f_one_b_order(p);
  for (auto& refs : order.ranks) {
    std::vector<OpRef> listed;
    for (const OpRef& ref : refs) {
      const bool backward = is_input_backward(ref.op);
      const auto offload =
          std::find(listed.begin(), listed.end(), OpRef{Op::kOffload, ref.stage, ref.microbatch});
      if (backward && offload != listed.end()) {
        const long lead = std::uniform_int_distribution<long>(0, 1)(rng);
        const long after_offload = (offload - listed.begin()) + 1;
        const long at = std::max(after_offload, static_cast<long>(listed.size()) - lead);
        listed.insert(listed.begin() + at, {Op::kReload, ref.stage, ref.microbatch});
      }
      listed.push_back(ref);
      if (ref.op == Op::kForward && std::bernoulli_distribution(0.75)(rng)) {
        listed.push_back({Op::kOffload, ref.stage, ref.microbatch});
      }
    }
    refs = std::move(listed);
  }
  return order;
}

// 1F1B on random problems with an offload link and budgets of 1-4 activations, activations
// offloaded whole as one_f_one_b_with_offloads() lists them. The fence never deadlocks where
// simulate() does not, times every order that simulate() fits exactly as simulate() does, fails
// only on memory, and fits some orders that simulate() puts over the budget.
TEST(Simulator, WithinBudgetKeepsWhatFitsAndFailsOnlyOnMemory) {
  std::mt19937 rng(20261125);
  int fitted = 0;
  int repaired = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::optional<Problem> drawn = offloading_problem(rng, 4);
    if (!drawn) continue;
    const Problem& p = *drawn;
    const Order order = one_f_one_b_with_offloads(p, rng);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " R=" << p.ranks << " m=" << p.microbatches);
    Schedule asap;
    try {
      asap = simulate(p, order, "asap");
    } catch (const DeadlockError&) {
      continue;
    }
    const Schedule fenced = simulate_within_budget(p, order, "fenced");
    const auto violation = validate(p, fenced);
    if (violation) {
      EXPECT_NE(violation->message.find("exceeds the budget"), std::string::npos)
          << violation->message;
      continue;
    }
    if (validate(p, asap)) {
      ++repaired;
      continue;
    }
    ++fitted;
    for (int r = 0; r < p.ranks; ++r) {
      ASSERT_EQ(fenced.ranks[r].size(), asap.ranks[r].size());
      for (size_t i = 0; i < asap.ranks[r].size(); ++i) {
        EXPECT_EQ(fenced.ranks[r][i].ref, asap.ranks[r][i].ref);
        EXPECT_DOUBLE_EQ(fenced.ranks[r][i].start, asap.ranks[r][i].start);
      }
    }
  }
  EXPECT_GT(fitted, 5);
  EXPECT_GE(repaired, 10);
}

void expect_same_timing(const Schedule& revised, const Schedule& scratch) {
  ASSERT_EQ(revised.ranks.size(), scratch.ranks.size());
  for (size_t r = 0; r < scratch.ranks.size(); ++r) {
    ASSERT_EQ(revised.ranks[r].size(), scratch.ranks[r].size());
    for (size_t k = 0; k < scratch.ranks[r].size(); ++k) {
      ASSERT_EQ(revised.ranks[r][k].ref, scratch.ranks[r][k].ref);
      ASSERT_EQ(revised.ranks[r][k].start, scratch.ranks[r][k].start)
          << describe(scratch.ranks[r][k].ref);
    }
  }
}

// A swap of two neighbours in one rank's list, timed from scratch: what a revision must match.
struct Revision {
  const Problem& problem;
  const Order& order;        // after the swap
  const Schedule& previous;  // the order before the swap, timed
  OrderRevision change;
  const Schedule* scratch;  // the order after the swap, timed; null when it deadlocks
};

// Random chains of swaps of two neighbours in one rank's list, each timed from the one before, on
// random problems with offloads, link groups and budgets of 1-3 activations; `check` sees each.
template <typename Check>
void for_each_random_revision(uint32_t seed, const Check& check) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    std::optional<Problem> drawn = offloading_problem(rng, 3);
    if (!drawn) continue;
    const Problem& p = *drawn;
    Order order = one_f_one_b_with_offloads(p, rng);
    Schedule previous;
    try {
      previous = simulate_within_budget(p, order, "scratch");
    } catch (const DeadlockError&) {
      continue;
    }
    for (int move = 0; move < 40; ++move) {
      const int rank = std::uniform_int_distribution<int>(0, p.ranks - 1)(rng);
      auto& refs = order.ranks[rank];
      const size_t i = std::uniform_int_distribution<size_t>(0, refs.size() - 2)(rng);
      std::swap(refs[i], refs[i + 1]);
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " move " << move);
      const OrderRevision change{0, rank, i, i + 2};
      Schedule scratch;
      try {
        scratch = simulate_within_budget(p, order, "scratch");
      } catch (const DeadlockError&) {
        check(Revision{p, order, previous, change, nullptr});
        std::swap(refs[i], refs[i + 1]);
        continue;
      }
      check(Revision{p, order, previous, change, &scratch});
      previous = std::move(scratch);
    }
  }
}

// A revised order timed from the previous timing (simulate_within_budget with an OrderRevision)
// is the order timed from scratch, action for action, when the timing catches up with the
// previous one part-way and copies the rest.
TEST(Simulator, ARevisedOrderIsTimedAsFromScratch) {
  int revisions = 0;
  for_each_random_revision(20261126, [&](const Revision& r) {
    if (!r.scratch) {
      EXPECT_THROW(simulate_within_budget(r.problem, r.order, "revised", r.previous, r.change),
                   DeadlockError);
      return;
    }
    ++revisions;
    expect_same_timing(simulate_within_budget(r.problem, r.order, "revised", r.previous, r.change),
                       *r.scratch);
  });
  EXPECT_GT(revisions, 500);
}

// With a makespan to stay within, a revision is abandoned only when its timing from scratch ends
// later, and is otherwise timed as from scratch: the local search's limit (the previous makespan),
// and the revision's own makespan, which it meets.
TEST(Simulator, ARevisionIsAbandonedOnlyWhenItEndsLater) {
  int abandoned = 0;
  int kept = 0;
  for_each_random_revision(20261125, [&](const Revision& r) {
    if (!r.scratch) return;
    for (const double limit : {makespan_of(r.previous), makespan_of(*r.scratch)}) {
      const std::optional<Schedule> revised =
          simulate_within_budget(r.problem, r.order, "revised", r.previous, r.change, limit);
      if (!revised) {
        ++abandoned;
        EXPECT_GT(makespan_of(*r.scratch), limit);
        continue;
      }
      ++kept;
      expect_same_timing(*revised, *r.scratch);
    }
  });
  EXPECT_GT(abandoned, 100);
  EXPECT_GT(kept, 500);
}

// A valid schedule's order (order_of) timed again is the same schedule, transfers that waited
// for their channel or start with a compute op included: the optimiser's search starts from its
// seed's order, and the schedule cache re-times the orders it stores. (Over budget, an allocation
// that cannot fit starts where it would without the fence, at a time that depends on what is
// queued then: such a schedule leaves nothing.)
TEST(Simulator, AValidScheduleTimedFromItsOwnOrderIsTheSame) {
  int retimed = 0;
  for_each_random_revision(20261127, [&](const Revision& r) {
    if (!r.scratch || validate(r.problem, *r.scratch)) return;
    ++retimed;
    expect_same_timing(simulate_within_budget(r.problem, order_of(*r.scratch), "again"),
                       *r.scratch);
  });
  EXPECT_GT(retimed, 500);
}

// Where rounding puts an offload's start a hair before its F's end (a schedule not written by the
// simulator), the order still lists the F first: issued before it, the copy would have nothing
// to copy. A transfer starting with the next compute op still goes before that op.
TEST(Simulator, AnOrderListsAnOffloadAfterTheForwardItCopies) {
  Schedule s;
  s.ranks = {{{{Op::kForward, 0, 0}, 0, 1},
              {{Op::kOffload, 0, 0}, 1 - 1e-12, 2, 1000},
              {{Op::kForward, 0, 1}, 1, 2},
              {{Op::kOffload, 0, 1}, 2, 3, 1000}}};
  const std::vector<OpRef> expected = {
      {Op::kForward, 0, 0}, {Op::kOffload, 0, 0}, {Op::kForward, 0, 1}, {Op::kOffload, 0, 1}};
  EXPECT_EQ(order_of(s).ranks[0], expected);
  s.ranks[0][1].start = 1;  // listed after F(0, 1), which starts with it: issued before that F
  std::swap(s.ranks[0][1], s.ranks[0][2]);
  EXPECT_EQ(order_of(s).ranks[0], expected);
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
