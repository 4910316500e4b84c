// The local search: it starts only from an order that times to a valid schedule, keeps every
// state valid and never slower, and shortens a slow order; on a plateau it moves only to earlier
// forwards; it offloads or recomputes where the budget leaves no room otherwise; a kick keeps the
// order valid.
#include "solver/local_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "heuristics/offload_orders.h"
#include "heuristics/registry.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// R = 3, v = 2, m = 6, room for 4 activations per rank.
Problem problem_with_room_for(int activations) {
  Problem p = testing::uniform_problem(3, 2, 6, {1, 1.2, 0.8, 1000, 250});
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + activations * 1000;
  return p;
}

TEST(LocalSearch, ShortensOneMicrobatchAtATimeAndStaysValid) {
  const Problem p = problem_with_room_for(4);
  const Order serial = microbatch_serial_order(p, true);
  std::optional<LocalSearch> search = LocalSearch::from(p, serial, 7);
  ASSERT_TRUE(search);
  const double start = search->makespan();
  EXPECT_DOUBLE_EQ(start, compute_metrics(p, simulate(p, serial, "serial")).makespan);
  double previous = start;
  int shortened = 0;
  for (int i = 0; i < 5000; ++i) {
    const bool shorter = search->step();
    EXPECT_LE(search->makespan(), previous + 1e-9);
    EXPECT_EQ(shorter, search->makespan() < previous - 1e-9);
    shortened += shorter;
    previous = search->makespan();
  }
  EXPECT_GT(shortened, 5);
  EXPECT_LT(search->makespan(), 0.8 * start);  // serial leaves most of the pipeline idle
  // The state is the simulator's timing of its order, within the budget.
  const Schedule retimed = simulate(p, search->order(), "milp");
  EXPECT_FALSE(validate(p, retimed));
  EXPECT_DOUBLE_EQ(compute_metrics(p, retimed).makespan, search->makespan());
  EXPECT_FALSE(validate(p, search->schedule()));
}

// Each stage's F keeps 100 of its 1000 bytes when recomputed, and R takes half an F.
void let_stages_recompute(Problem& p) {
  for (StageCosts& s : p.stages) {
    s.checkpoint_bytes = 100;
    s.recompute_forward = 0.5;
  }
}

double sum_of_forward_ends(const Schedule& schedule) {
  double sum = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) sum += a.ref.op == Op::kForward ? a.end : 0;
  }
  return sum;
}

// Among orders of the same makespan the climb moves only to those whose forwards end no later in
// sum: it still walks the plateaus, towards pipelines that fill early. Where stages can recompute
// it walks them every way.
TEST(LocalSearch, WalksPlateausTowardsEarlierForwardsUnlessStagesRecompute) {
  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "keep only");
    Problem p = problem_with_room_for(4);
    if (recompute) let_stages_recompute(p);
    std::optional<LocalSearch> search = LocalSearch::from(p, microbatch_serial_order(p, true), 11);
    ASSERT_TRUE(search);
    int walked = 0;
    int later = 0;  // walks to forwards that end later in sum
    for (int i = 0; i < 5000; ++i) {
      const double makespan = search->makespan();
      const double forward_ends = sum_of_forward_ends(search->schedule());
      const Order order = search->order();
      if (search->step()) continue;
      ASSERT_NEAR(search->makespan(), makespan, 1e-9);
      walked += search->order().ranks != order.ranks;
      later += sum_of_forward_ends(search->schedule()) > forward_ends * (1 + 1e-9);
    }
    EXPECT_GT(walked, 10);
    if (recompute) {
      EXPECT_GT(later, 0);
    } else {
      EXPECT_EQ(later, 0);
    }
  }
}

int count(const Order& order, Op op) {
  int n = 0;
  for (const auto& refs : order.ranks)
    n += std::count_if(refs.begin(), refs.end(), [op](const OpRef& r) { return r.op == op; });
  return n;
}

// Room for the two activations of one microbatch per rank only: one microbatch at a time is the
// densest order that keeps everything, so anything faster must offload or recompute.
TEST(LocalSearch, OffloadsOrRecomputesWhereKeepingLeavesNoRoom) {
  for (const bool offload : {true, false}) {
    SCOPED_TRACE(offload ? "offload" : "recompute");
    Problem p = problem_with_room_for(2);
    if (offload) {
      for (StageCosts& s : p.stages) s.offloadable_bytes = 900;
      p.offload = OffloadLink{2000, 2000, ChannelMode::kDuplex, {0, 1, 2}};
    } else {
      let_stages_recompute(p);
    }
    std::optional<LocalSearch> search = LocalSearch::from(p, microbatch_serial_order(p, true), 3);
    ASSERT_TRUE(search);
    const double start = search->makespan();
    for (int i = 0; i < 5000; ++i) search->step();
    EXPECT_LT(search->makespan(), 0.9 * start);
    EXPECT_GT(count(search->order(), offload ? Op::kOffload : Op::kRecompute), 0);
    EXPECT_FALSE(validate(p, simulate_within_budget(p, search->order(), "milp")));
  }
}

// Each move re-times only what it can change (simulate_within_budget re-using the previous
// timing) and checks only memory: after every move, kicks included, the state is valid and is
// exactly the order timed from scratch, on random problems with offload links, shared channels,
// link groups and tight budgets. 3000 moves with kicks of 20 reach the orders that once broke
// this: an OFFLOAD listed before its F taken out with its activation kept, and transfers queued
// at a compute op's start, which an allocation's wait for memory counts.
TEST(LocalSearch, EveryStateIsItsOrderTimedFromScratch) {
  std::mt19937 rng(20261125);
  int searches = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Problem p = testing::random_problem(rng);
    if (!p.offload) continue;
    for (StageCosts& c : p.stages) {
      if (std::bernoulli_distribution(0.5)(rng)) c.checkpoint_bytes = c.activation_bytes / 4;
    }
    for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 3 * 5000;
    std::optional<LocalSearch> search =
        LocalSearch::from(p, find_generator("adaoffload")->build(p), trial);
    if (!search) continue;
    ++searches;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " R=" << p.ranks
                                      << " v=" << p.chunks_per_rank << " m=" << p.microbatches);
    for (int i = 0; i < 3000; ++i) {
      const Order before = search->order();
      if (i % 100 == 99) {
        search->perturb(20);
      } else {
        search->step();
      }
      if (search->order().ranks == before.ranks) continue;     // a refused move changes nothing
      const auto violation = validate(p, search->schedule());  // the search checks memory only
      ASSERT_FALSE(violation) << "move " << i << ": " << violation->message;
      const Schedule scratch = simulate_within_budget(p, search->order(), "milp");
      for (int r = 0; r < p.ranks; ++r) {
        ASSERT_EQ(scratch.ranks[r].size(), search->schedule().ranks[r].size()) << "move " << i;
        for (size_t k = 0; k < scratch.ranks[r].size(); ++k) {
          const Action& a = search->schedule().ranks[r][k];
          ASSERT_EQ(a.ref, scratch.ranks[r][k].ref) << "move " << i;
          ASSERT_EQ(a.start, scratch.ranks[r][k].start) << "move " << i << " " << describe(a.ref);
        }
      }
    }
  }
  EXPECT_GT(searches, 15);
}

TEST(LocalSearch, AKickKeepsTheOrderValidThoughSlower) {
  const Problem p = problem_with_room_for(4);
  std::optional<LocalSearch> search = LocalSearch::from(p, microbatch_serial_order(p, true), 7);
  ASSERT_TRUE(search);
  for (int i = 0; i < 3000; ++i) search->step();
  const Order climbed = search->order();
  search->perturb(20);
  EXPECT_NE(search->order().ranks, climbed.ranks);
  const Schedule retimed = simulate_within_budget(p, search->order(), "milp");
  EXPECT_FALSE(validate(p, retimed));
  EXPECT_DOUBLE_EQ(compute_metrics(p, retimed).makespan, search->makespan());
}

TEST(LocalSearch, RefusesAStartOverTheBudget) {
  // One microbatch at a time holds 2 activations per rank (one per chunk); room for 1.5.
  Problem p = problem_with_room_for(1);
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] += 500;
  EXPECT_FALSE(LocalSearch::from(p, microbatch_serial_order(p, true), 7));
}

}  // namespace
}  // namespace optpipe
