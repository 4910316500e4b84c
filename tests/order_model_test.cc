// The order model admits the schedule it starts from: at the MIP start every bound and row holds,
// so CBC accepts it, for seeds that keep, offload and recompute, on duplex and shared channels,
// with link groups and V-shape placement.
#include "solver/order_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "heuristics/offload_placement.h"
#include "solver/local_search.h"
#include "solver/microbatch_order.h"
#include "solver/milp_segment.h"
#include "solver/transitivity_cuts.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::random_problem;
using testing::run_generator;
using testing::uniform_problem;

// What the whole-order model with activation choices built from `seed` breaks at its start.
std::optional<std::string> start_violation(const Problem& problem, const Schedule& seed) {
  const Order order = split_backward(order_of(seed));
  const Schedule current = split_backward(problem, seed);
  const Order compute = compute_order(order);
  const Segment everything = whole_order(compute);
  const OrderModel model(problem, compute, current, everything, SegmentObjective::kMakespan,
                         ActivationChoice::kDecide);
  return first_violation(model.model(), model.start_solution());
}

void expect_start_admitted(const Problem& problem, const Schedule& seed) {
  ASSERT_FALSE(validate(problem, seed)) << "the seed must be valid";
  const auto violation = start_violation(problem, seed);
  EXPECT_FALSE(violation) << seed.method << ": " << *violation;
}

// Two ranks, three microbatches, 1.5 activations of budget per rank, a link that moves one
// activation per F time, and stages that can recompute.
Problem tight_problem(ChannelMode channels) {
  Problem p = uniform_problem(2, 1, 3, {1, 1, 1, 1000, 250});
  p.p2p_latency = 0.1;
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 1500;
  p.offload = OffloadLink{1000, 1000, channels, {0, 1}};
  for (StageCosts& stage : p.stages) {
    stage.checkpoint_bytes = 250;
    stage.recompute_forward = 1;
  }
  return p;
}

int count_moves(const Schedule& schedule) {
  int n = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) n += a.ref.op == Op::kOffload || a.ref.op == Op::kRecompute;
  }
  return n;
}

TEST(OrderModel, AdmitsAnAdaOffloadSeedThatOffloadsAndRecomputes) {
  for (ChannelMode channels : {ChannelMode::kDuplex, ChannelMode::kShared}) {
    const Problem p = tight_problem(channels);
    const Schedule seed = run_generator("adaoffload", p).schedule;
    EXPECT_GT(count_moves(seed), 0);
    expect_start_admitted(p, seed);
  }
}

TEST(OrderModel, AdmitsSeedsThatOffloadOrRecomputeEverything) {
  Problem offloading = uniform_problem(3, 1, 4, {1, 1, 1, 1000, 250});
  expect_start_admitted(offloading, testing::offloading_1f1b(offloading));
  Problem recomputing = uniform_problem(3, 1, 4, {1, 1, 1, 1000, 250});
  expect_start_admitted(recomputing, testing::recomputing_1f1b(recomputing, 250));
}

// A random problem of at most 120 compute ops, with budgets at 60% of zb-auto's activation peak
// with ample memory, so that schedules offload or recompute.
Problem small_tight_problem(std::mt19937& rng) {
  Problem p = random_problem(rng);
  while (3 * p.num_stages() * p.microbatches > 120) p = random_problem(rng);
  const Metrics ample = run_generator("zb-auto", p).metrics;
  for (int r = 0; r < p.ranks; ++r) {
    const int64_t activations = ample.ranks[r].peak_bytes - p.static_bytes[r];
    p.budget_bytes[r] = p.static_bytes[r] + activations * 6 / 10;
  }
  return p;
}

TEST(OrderModel, AdmitsGeneratorSeedsOnRandomProblems) {
  std::mt19937 rng(7);
  int checked = 0;
  int moving_seeds = 0;
  while (checked < 100) {
    Problem p = small_tight_problem(rng);
    if (checked % 2 == 0) {
      for (StageCosts& stage : p.stages) {
        stage.checkpoint_bytes = stage.activation_bytes / 4;
        stage.recompute_forward = stage.forward;
      }
    }
    for (const char* method : {"adaoffload", "zb-auto", "pipeoffload"}) {
      const testing::TimedSchedule seed = run_generator(method, p);
      if (validate(p, seed.schedule)) continue;  // does not fit: nothing to admit
      moving_seeds += count_moves(seed.schedule) > 0;
      expect_start_admitted(p, seed.schedule);
    }
    ++checked;
  }
  EXPECT_GT(moving_seeds, 0);
}

// Each rank's ops are one of the model's pairwise orders (for transitivity cuts), and the MIP start
// orders every pair one way and no three in a cycle.
TEST(OrderModel, SequencesEachRankAsAPairwiseOrderThatItsStartKeeps) {
  std::mt19937 rng(5);
  int orders = 0;
  for (int checked = 0; checked < 20;) {
    const Problem p = small_tight_problem(rng);
    const testing::TimedSchedule seed = run_generator("zb-auto", p);
    if (validate(p, seed.schedule)) continue;
    ++checked;
    const Order compute = compute_order(split_backward(order_of(seed.schedule)));
    const Segment everything = whole_order(compute);
    const OrderModel model(p, compute, split_backward(p, seed.schedule), everything,
                           SegmentObjective::kMakespan, ActivationChoice::kDecide);
    const std::vector<double>& start = model.start_solution();
    for (const PairwiseOrder& order : model.model().orders) {
      ++orders;
      for (int a = 0; a < order.size; ++a) {
        for (int b = 0; b < order.size; ++b) {
          if (a == b) continue;
          EXPECT_EQ(order.literal(a, b).at(start.data()) + order.literal(b, a).at(start.data()), 1);
        }
      }
    }
    EXPECT_TRUE(violated_transitivity(model.model().orders, start.data(), 1e-9, 1).empty());
  }
  EXPECT_GT(orders, 0);
}

// Whether every rank runs the F ops of each stage, and its B ops, in microbatch order: what
// in_microbatch_order() needs to give a valid schedule.
bool forwards_and_backwards_in_order(const Schedule& schedule) {
  for (const auto& actions : schedule.ranks) {
    std::map<std::pair<Op, int>, int> last;  // (op, stage) -> microbatch
    for (const Action& a : actions) {
      if (a.ref.op != Op::kForward && a.ref.op != Op::kBackwardInput) continue;
      const auto [it, first] = last.try_emplace({a.ref.op, a.ref.stage}, a.ref.microbatch);
      if (!first && it->second > a.ref.microbatch) return false;
      it->second = a.ref.microbatch;
    }
  }
  return true;
}

// The local search reorders W ops and transfers freely; relabelled, its schedules run the same
// work at the same times and become a start the model admits.
TEST(OrderModel, AdmitsLocalSearchSchedulesOnceInMicrobatchOrder) {
  std::mt19937 rng(11);
  int checked = 0;
  int rejected_as_found = 0;
  while (checked < 60) {
    const Problem p = small_tight_problem(rng);
    const testing::TimedSchedule seed = run_generator("adaoffload", p);
    if (validate(p, seed.schedule)) continue;
    std::optional<LocalSearch> search =
        LocalSearch::from(p, split_backward(order_of(seed.schedule)), rng());
    ASSERT_TRUE(search);
    search->perturb(40);
    const Schedule& found = search->schedule();
    if (!forwards_and_backwards_in_order(found)) continue;
    rejected_as_found += start_violation(p, found).has_value();
    const Schedule relabelled = in_microbatch_order(found);
    const auto invalid = validate(p, relabelled);
    ASSERT_FALSE(invalid) << invalid->message;
    EXPECT_EQ(makespan_of(relabelled), makespan_of(found));
    expect_start_admitted(p, relabelled);
    // The order relabels the same way: it lists the relabelled schedule's actions.
    const Order order = in_microbatch_order(search->order());
    for (int r = 0; r < p.ranks; ++r) {
      std::vector<OpRef> listed;
      for (const Action& a : relabelled.ranks[r]) {
        if (is_compute(a.ref.op) && a.ref.op != Op::kRecompute) listed.push_back(a.ref);
      }
      EXPECT_EQ(compute_order(order).ranks[r], listed);
    }
    ++checked;
  }
  EXPECT_GT(rejected_as_found, 0) << "no search schedule broke microbatch order: nothing tested";
}

}  // namespace
}  // namespace optpipe
