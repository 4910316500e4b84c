// The memory-aware makespan lower bound: hand-computed values on a tiny pipeline, never above a
// schedule that fits the budget, never lowered by a smaller budget.
#include "bounds/memory_bound.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "bounds/makespan_lower_bound.h"
#include "heuristics/registry.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

// R = 2, m = 16, T_F = T_B = T_W = 1, A = O = 1000, G = 0, p2p 8, room for 3 activations per
// rank. Stage 0's round trip L = 1 + 8 + 1 + 1 + 8 + 1 = 20, so rank 0's activations cover at
// least 16 x 1000 x 20 = 320000 bytes x time under a budget of 3000 bytes: C >= 320/3. The work
// bound is 57 (rank 1: first F at 9, work 48).
Problem tiny_problem(std::optional<int64_t> checkpoint_bytes = std::nullopt) {
  testing::UniformCosts costs;
  costs.checkpoint_bytes = checkpoint_bytes;
  Problem p = testing::uniform_problem(2, 1, 16, costs, PlacementKind::kLoop, 8);
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 3000;
  return p;
}

// 250 bytes per time unit each way: an offload or a reload of 1000 bytes takes 4, so an offload
// saves 1000 x (20 - 1 - 4 - 4 - 1) = 10000 per activation, 10 per byte. Transfers of rank 0 lie
// at least 1 (F) after the first op's start and 2 (B, W) before the end; on duplex channels each
// direction also gives up 4 to the other (an offload's reload follows it, a reload's offload
// precedes it).
Problem with_link(Problem p, ChannelMode mode) {
  p.offload = OffloadLink{250, 250, mode, {0, 1}};
  return p;
}

TEST(MemoryBound, HandComputedWithoutOffload) {
  const Problem p = tiny_problem();
  EXPECT_NEAR(memory_bound(p), 320.0 / 3, 1e-9);
  // The sequencing bound, paced by memory, is higher here (bounds/paced_heads.h).
  EXPECT_GT(makespan_lower_bound(p).value, 320.0 / 3);
}

TEST(MemoryBound, HandComputedWithADuplexLink) {
  // The D2H and H2D channels each carry 250 bytes per time unit in (C - 3 - 4):
  // 320000 - 3000 C <= 10 x 250 (C - 7)  =>  C >= 337500 / 5500 = 675 / 11.
  EXPECT_NEAR(memory_bound(with_link(tiny_problem(), ChannelMode::kDuplex)), 675.0 / 11, 1e-9);
  // Offloads twice as fast (2 each): an offload saves 1000 x (20 - 1 - 2 - 4 - 1) = 12 per byte,
  // and the slower H2D channel gives up one offload: 320000 - 3000 C <= 12 x 250 (C - 3 - 2).
  Problem faster_down = with_link(tiny_problem(), ChannelMode::kDuplex);
  faster_down.offload->d2h_bytes_per_time = 500;
  EXPECT_NEAR(memory_bound(faster_down), 335000.0 / 6000, 1e-9);
}

TEST(MemoryBound, HandComputedWithASharedLink) {
  // One channel for both directions: 125 offloaded bytes per time unit.
  // 320000 - 3000 C <= 10 x 125 (C - 3)  =>  C >= 323750 / 4250 = 1295 / 17.
  EXPECT_NEAR(memory_bound(with_link(tiny_problem(), ChannelMode::kShared)), 1295.0 / 17, 1e-9);
  // Above the sequencing bound, paced by memory: the memory bound decides.
  const LowerBound bound = makespan_lower_bound(with_link(tiny_problem(), ChannelMode::kShared));
  EXPECT_NEAR(bound.value, 1295.0 / 17, 1e-9);
  EXPECT_EQ(bound.source, BoundSource::kMemory);
}

TEST(MemoryBound, HandComputedWithRecompute) {
  // Checkpoint 100 bytes, T_R = 1: recompute saves 900 x (20 - 3) = 15300 per activation, more than
  // an offload, and needs no channel: area C >= 16 x (20000 - 15300) / 3000 = 25.07. Whole
  // activations bind more on rank 1: 3 at once, each whole for at least T_F + T_B = 2 (its
  // stage's round trip, shorter than recomputing), within [9, C - 10] (the F after the first
  // op's hand-off; B(0) and W(0) after its B): C >= 19 + 16 x 2 / 3. Both below the work bound.
  const Problem p = tiny_problem(100);
  EXPECT_NEAR(memory_bound(p), 19 + 32.0 / 3, 1e-9);
  EXPECT_NEAR(memory_bound(with_link(p, ChannelMode::kDuplex)), 19 + 32.0 / 3, 1e-9);
  // But each R runs on rank 0 beside its 48 of F, B and W work from 0, whose only wait (its Fs
  // end at 16, its first B comes at 19) R can fill: 320000 - 3000 C <= 15300 (C - 48), so the
  // sequencing bound is C >= 1054400 / 18300 = 57.62, above the work bound of 57 (rank 1: first F
  // at 9, work 48). Whole activations ask less: 320 - 3 C <= 17 (C - 48), C >= 56.8.
  EXPECT_NEAR(makespan_lower_bound(p).value, 1054400.0 / 18300, 1e-9);
  EXPECT_EQ(makespan_lower_bound(p).source, BoundSource::kRecomputeTime);
  // With a duplex link the channels move at most 250 C bytes, each saving 10 against keeping:
  // 320000 - 5500 C <= 15300 (C - 48) gives only 50.69, and the work bound decides.
  EXPECT_NEAR(makespan_lower_bound(with_link(p, ChannelMode::kDuplex)).value, 57, 1e-9);
  EXPECT_EQ(makespan_lower_bound(with_link(p, ChannelMode::kDuplex)).source,
            BoundSource::kSequencing);
}

TEST(MemoryBound, HandComputedActivationsComeWhole) {
  // Room for 2.5 activations holds 2 whole: rank 0's 16 activations are each whole for at least
  // L = 20, so C >= 16 x 20 / 2 = 160, where the area gives only 16 x 20000 / 2500 = 128.
  Problem p = tiny_problem();
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 2500;
  EXPECT_NEAR(memory_bound(p), 160, 1e-9);
  // An offloaded activation is whole for at least 1 + 4 + 4 + 1 = 10, so even with all 16
  // offloaded C >= 16 x 10 / 2 = 80, where the channels carry all 16000 bytes (250 x (80 - 7))
  // and the area needs fewer (320000 - 2500 x 80 <= 10 x 12000).
  EXPECT_NEAR(memory_bound(with_link(p, ChannelMode::kDuplex)), 80, 1e-9);
}

TEST(MemoryBound, HandComputedWithRecomputeAndOffload) {
  // Checkpoint 900 bytes: recompute saves 100 x 17 = 1700, offload 8300 more (8.3 per byte). Area
  // 16 x 18300: 292800 - 3000 C <= 8.3 x 250 (C - 7)  =>  C >= 307325 / 5075.
  const Problem p = with_link(tiny_problem(900), ChannelMode::kDuplex);
  EXPECT_NEAR(memory_bound(p), 307325.0 / 5075, 1e-9);
}

bool offloads_or_recomputes(const Order& order) {
  for (const auto& refs : order.ranks) {
    for (const OpRef& ref : refs) {
      if (is_transfer(ref.op) || ref.op == Op::kRecompute) return true;
    }
  }
  return false;
}

// Each schedule is held to the bound at the problem's budget when it fits it, and at its own
// peaks, the tightest budget it fits, where memory binds most.
TEST(MemoryBound, NoScheduleWithinTheBudgetBeatsIt) {
  std::mt19937 rng(20261122);
  int within_budget = 0, recomputing = 0, memory_binds = 0, recompute_time_binds = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Problem problem = testing::random_problem(rng);
    if (std::uniform_int_distribution<int>(0, 1)(rng)) {
      for (StageCosts& c : problem.stages) {
        c.checkpoint_bytes = std::uniform_int_distribution<int64_t>(0, c.activation_bytes)(rng);
        c.recompute_forward = c.forward * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
      }
    }
    // Half the budgets leave room for 40-100% of each rank's activations, half for 5-40%.
    const double low = trial % 2 ? 0.4 : 0.05;
    problem = testing::with_budget_fraction(
        problem, std::uniform_real_distribution<double>(low, low * 2.5)(rng));
    Problem roomy = problem;
    for (int64_t& b : roomy.budget_bytes) b = int64_t{1} << 60;
    const double bound = makespan_lower_bound(problem).value;
    const double roomy_bound = makespan_lower_bound(roomy).value;
    for (const Generator& generator : generators()) {
      if (!generator.unsupported_reason(problem).empty()) continue;
      const Order order = generator.build(problem);
      std::vector<Order> orders = {order};
      if (problem.stages[0].can_recompute() && !offloads_or_recomputes(order)) {
        orders.push_back(testing::recompute_all(order));
      }
      for (const Order& candidate : orders) {
        const bool recomputes = &candidate != &orders.front();
        SCOPED_TRACE(::testing::Message()
                     << "trial " << trial << " " << generator.name << " R=" << problem.ranks
                     << " v=" << problem.chunks_per_rank << " m=" << problem.microbatches
                     << (recomputes ? " recomputing" : ""));
        const Schedule schedule = simulate(problem, candidate, std::string(generator.name));
        const auto violation = validate(roomy, schedule);
        ASSERT_FALSE(violation) << violation->message;
        const Metrics metrics = compute_metrics(problem, schedule);
        if (metrics.within_budget) {
          EXPECT_GE(metrics.makespan, bound * (1 - 1e-9));
          ++within_budget;
        }
        const Problem at_peak = testing::at_own_peaks(problem, schedule);
        const double bound_at_peak = makespan_lower_bound(at_peak).value;
        EXPECT_GE(metrics.makespan, bound_at_peak * (1 - 1e-9)) << "at its own peak";
        recomputing += recomputes;
        memory_binds += memory_bound(at_peak) > roomy_bound;
        if (recomputes) {
          Problem free_recompute = at_peak;
          for (StageCosts& c : free_recompute.stages) c.recompute_forward = 0;
          recompute_time_binds +=
              bound_at_peak > makespan_lower_bound(free_recompute).value * (1 + 1e-9);
        }
      }
    }
  }
  std::printf(
      "%d schedules within the budget; at their own peaks %d recomputing, %d where "
      "memory binds, %d where R's compute raises the bound\n",
      within_budget, recomputing, memory_binds, recompute_time_binds);
  EXPECT_GT(within_budget, 500);
  EXPECT_GT(recomputing, 200);
  EXPECT_GT(memory_binds, 200);
  // Measured: 157, of which R's time in the areas of recomputed activations alone accounts for
  // 126 (before the sequencing bound counted R's compute beside the rank's work).
  EXPECT_GT(recompute_time_binds, 145);
}

TEST(MemoryBound, ASmallerBudgetNeverLowersIt) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Problem problem = testing::random_problem(rng);
    if (trial % 2) {
      for (StageCosts& c : problem.stages) c.checkpoint_bytes = c.activation_bytes / 4;
    }
    double previous = 0;
    for (double fraction = 1.0; fraction > 0.05; fraction -= 0.05) {
      const double bound =
          makespan_lower_bound(testing::with_budget_fraction(problem, fraction)).value;
      EXPECT_GE(bound, previous * (1 - 1e-12)) << "trial " << trial << " fraction " << fraction;
      previous = bound;
    }
  }
}

}  // namespace
}  // namespace optpipe
