// The optimiser: proven optima on small problems match an exhaustive search over per-rank
// interleavings; every incumbent validates; the time limit holds; never worse than the seed; the
// whole-order MILP chooses keep, offload or recompute per activation.
#include "solver/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <ostream>
#include <vector>

#include "bounds/makespan_lower_bound.h"
#include "heuristics/list_policies.h"
#include "heuristics/offload_placement.h"
#include "heuristics/one_f_one_b.h"
#include "model/errors.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {
namespace {

using testing::count_ops;
using testing::exhaustive_optimum;
using testing::run_generator;
using testing::uniform_problem;
using testing::UniformCosts;

struct SmallCase {
  int ranks;
  int microbatches;
  UniformCosts costs;
  int activations_budget;  // activation budget per rank, in activations
  bool fifo_in_search;     // without FIFO the search also checks the FIFO reduction
};

void PrintTo(const SmallCase& c, std::ostream* os) {
  *os << testing::describe_uniform(c.ranks, c.microbatches, c.costs) << "_budget"
      << c.activations_budget << (c.fifo_in_search ? "_fifo" : "");
}

class ProvenOptimum : public ::testing::TestWithParam<SmallCase> {};

TEST_P(ProvenOptimum, MatchesExhaustiveSearch) {
  const SmallCase& c = GetParam();
  Problem p = uniform_problem(c.ranks, 1, c.microbatches, c.costs);
  p.p2p_latency = 0.1;
  for (int r = 0; r < p.ranks; ++r) {
    p.budget_bytes[r] = p.static_bytes[r] + c.activations_budget * c.costs.activation_bytes;
  }
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  ASSERT_FALSE(validate(p, seed));
  int incumbents = 0;
  const OptimizeResult result =
      optimize(p, seed, {.time_limit_seconds = 30}, [&](const Schedule& s, const Metrics& m) {
        ++incumbents;
        EXPECT_FALSE(validate(p, s));
        EXPECT_TRUE(m.within_budget);
      });
  EXPECT_EQ(result.stats.status, SearchStatus::kOptimal);
  const double optimum = exhaustive_optimum(p, c.fifo_in_search);
  EXPECT_NEAR(result.stats.objective, optimum, 1e-6);
  EXPECT_NEAR(result.stats.bound, optimum, 1e-6);
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_LE(result.stats.objective, compute_metrics(p, seed).makespan + 1e-9);
  if (result.stats.objective < compute_metrics(p, seed).makespan - 1e-9) {
    EXPECT_GT(incumbents, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Small, ProvenOptimum,
    ::testing::Values(SmallCase{2, 2, {1, 1, 1, 1000, 250}, 2, false},
                      SmallCase{2, 2, {1, 2, 0.5, 1000, 500}, 2, false},
                      SmallCase{3, 2, {1, 1.5, 1, 1000, 0}, 2, false},
                      SmallCase{2, 3, {1, 1, 1, 1000, 250}, 2, true},
                      SmallCase{2, 4, {1, 1.2, 0.8, 1000, 300}, 3, true},
                      SmallCase{3, 3, {1, 1, 1, 1000, 250}, 3, true},
                      SmallCase{3, 3, {1, 1, 1, 1000, 1000}, 3, true},
                      // GPU-sized bytes: memory rows with coefficients
                      // near 1e9 beside times near 1.
                      SmallCase{2, 4, {1, 1.2, 0.8, 3'400'000'000, 850'000'000}, 3, true}));

// Four ranks whose last stage's F is heavy (1.6 against 1): 1F1B leaves room.
Problem heavy_last_stage(int microbatches) {
  Problem p = uniform_problem(4, 1, microbatches, {1, 1.3, 0.7, 1000, 300});
  p.stages[3].forward = 1.6;
  return p;
}

// The same at m = 16 with room for 3 activations per rank: ZB's schedule 66.2, the bound 60.6.
Problem heavy_last_stage_in_tight_memory() {
  Problem p = heavy_last_stage(16);
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 3000;
  return p;
}

TEST(Optimizer, WindowSearchNeverWorseThanSeedAndRespectsTheTimeLimit) {
  const Problem p = heavy_last_stage(16);
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  const auto started = std::chrono::steady_clock::now();
  const OptimizeResult result = optimize(
      p, seed, {.time_limit_seconds = 2, .max_ops_for_whole_model = 0, .local_search = false},
      nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 3.0);
  EXPECT_GT(result.stats.windows, 0);
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_LT(result.stats.objective, compute_metrics(p, seed).makespan);  // 1F1B leaves room
  EXPECT_GE(result.stats.objective, result.stats.bound - 1e-9);
}

// The same problem: the local search from 1F1B reaches the lower bound, which proves it optimal.
TEST(Optimizer, LocalSearchReachesTheBoundFromOneFOneB) {
  const Problem p = heavy_last_stage(16);
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  // Under a second here; the limit leaves room for sanitizer builds, which run it 10-20x slower.
  const OptimizeResult result =
      optimize(p, seed, {.time_limit_seconds = 120, .max_ops_for_whole_model = 0}, nullptr);
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_EQ(result.stats.status, SearchStatus::kOptimal);
  EXPECT_NEAR(result.stats.objective, result.stats.bound, 1e-9);
  EXPECT_EQ(result.stats.windows, 0);  // CBC was not needed
}

// CBC may hand work back: here no window is small enough to try, so it spends none of its
// iterations. The search then climbs on with the moves it kept for after CBC, all of them, and
// ends with its work done; it used to stop once it had handed over, at half its moves. The
// search spends work, not seconds (under a second here): the limit leaves room for sanitizer
// builds, which run it 10-20x slower.
TEST(Optimizer, SearchClimbsOnWithTheWorkCbcLeaves) {
  const Problem p = heavy_last_stage_in_tight_memory();
  const testing::TimedSchedule seed = run_generator("zb-auto", p);
  ASSERT_FALSE(validate(p, seed.schedule));
  const OptimizeResult result =
      optimize(p, seed.schedule, {.time_limit_seconds = 120, .max_ops_per_window = 1}, nullptr);
  EXPECT_EQ(result.stats.windows, 0);
  EXPECT_EQ(result.stats.work.cbc_iterations, 0);
  EXPECT_NE(result.stats.status, SearchStatus::kOptimal);  // which would end the search at once
  EXPECT_EQ(result.stats.stop_reason, StopReason::kWorkDone);
  EXPECT_EQ(result.stats.work.search_steps, WorkBudget::at_effort(1).search_steps);
  EXPECT_FALSE(validate(p, result.schedule));
}

// A seed within the target gap ends the search at once, however long the limit (ZB's schedule
// is 9.2% above the bound).
TEST(Optimizer, ASeedWithinTheTargetGapIsReturnedAtOnce) {
  const Problem p = heavy_last_stage_in_tight_memory();
  const testing::TimedSchedule seed = run_generator("zb-auto", p);
  const OptimizeResult result =
      optimize(p, seed.schedule, {.time_limit_seconds = 30, .target_gap = 0.1}, nullptr);
  EXPECT_EQ(result.stats.status, SearchStatus::kSeedKept);
  EXPECT_LT(result.stats.seconds, 1.0);
  EXPECT_GT(result.stats.gap, 0.05);
  EXPECT_LE(result.stats.gap, 0.1);
  EXPECT_EQ(result.stats.note, "stopped within the target gap of 10%");
  EXPECT_EQ(makespan_of(result.schedule), makespan_of(seed.schedule));
}

// CBC stops at the first incumbent within the target gap. Serial CBC on this whole order finds
// 30.7, 30.0, 29.9, ... and proves 28.2 (the bound) after about 12,000 nodes (18 s); 10% above the
// bound is 31.02, so it stops at 30.7, without a proof.
TEST(Optimizer, CbcStopsAtTheFirstIncumbentWithinTheTargetGap) {
  const Problem p = heavy_last_stage(7);
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  const OptimizeResult result =
      optimize(p, seed, {.time_limit_seconds = 120, .target_gap = 0.1, .local_search = false},
               [&](const Schedule& s, const Metrics&) { EXPECT_FALSE(validate(p, s)); });
  ASSERT_NEAR(result.stats.bound, 28.2, 1e-9);
  EXPECT_LE(result.stats.objective, 31.02 + 1e-9);
  EXPECT_EQ(result.stats.status, SearchStatus::kImproved);
  EXPECT_LT(result.stats.nodes, 1000);
  EXPECT_EQ(result.stats.note, "stopped within the target gap of 10%");
  EXPECT_FALSE(validate(p, result.schedule));
}

// An interrupt (the compiler's SIGINT) stops CBC at its next node: the search returns its best
// schedule so far, says so, and claims no proof. Uninterrupted, serial CBC takes about 18 s here
// (above). The stop is timed from the interrupt: the first incumbent comes 1.7 s in, 4.4–5 s
// under ASan, and the search returns 0.4 s after the interrupt (0.5 s under ASan).
TEST(Optimizer, AnInterruptStopsCbcWithTheBestScheduleSoFar) {
  const Problem p = heavy_last_stage(7);
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  std::atomic<bool> interrupted = false;
  std::chrono::steady_clock::time_point interrupted_at;
  OptimizerOptions options{.time_limit_seconds = 120, .local_search = false};
  options.interrupted = [&] { return interrupted.load(); };
  const OptimizeResult result = optimize(p, seed, options, [&](const Schedule& s, const Metrics&) {
    EXPECT_FALSE(validate(p, s));
    if (!interrupted) interrupted_at = std::chrono::steady_clock::now();
    interrupted = true;  // at the first better schedule
  });
  const std::chrono::duration<double> stopping = std::chrono::steady_clock::now() - interrupted_at;
  ASSERT_TRUE(interrupted);
  EXPECT_EQ(result.stats.status, SearchStatus::kImproved);
  EXPECT_LT(result.stats.objective, makespan_of(seed));
  EXPECT_GT(result.stats.objective, result.stats.bound + 1);
  EXPECT_LT(stopping.count(), 3.0);
  EXPECT_TRUE(result.stats.note.starts_with("interrupted after")) << result.stats.note;
  EXPECT_FALSE(validate(p, result.schedule));
}

// A search that reports nothing for a progress interval says where it is: its best makespan so
// far and the bound, never sooner than an interval after its last report.
TEST(Optimizer, ReportsProgressWhenNothingBetterComesForAnInterval) {
  const Problem p = heavy_last_stage_in_tight_memory();
  const testing::TimedSchedule seed = run_generator("zb-auto", p);
  const auto started = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  std::mutex mutex;
  std::vector<double> reports;  // seconds of each improvement and progress report
  std::vector<SearchProgress> progress;
  double best = makespan_of(seed.schedule);
  OptimizerOptions options{.time_limit_seconds = 2, .max_ops_per_window = 1};
  options.progress_interval_seconds = 0.2;
  options.on_progress = [&](const SearchProgress& at) {
    const std::lock_guard lock(mutex);
    EXPECT_GE(seconds() - (reports.empty() ? 0.0 : reports.back()), 0.19);
    EXPECT_EQ(at.makespan, best);
    reports.push_back(seconds());
    progress.push_back(at);
  };
  const OptimizeResult result =
      optimize(p, seed.schedule, options, [&](const Schedule&, const Metrics& metrics) {
        const std::lock_guard lock(mutex);
        best = metrics.makespan;
        reports.push_back(seconds());
      });
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().bound, result.stats.bound);
  EXPECT_GE(progress.back().makespan, makespan_of(result.schedule));
  for (size_t i = 1; i < progress.size(); ++i) {
    EXPECT_GT(progress[i].seconds, progress[i - 1].seconds);
  }
}

TEST(Optimizer, TimeLimitHoldsWhenWindowsGrow) {
  // 8 ranks x 16 microbatches: growing windows would reach sizes whose CBC root overruns.
  const Problem p = uniform_problem(8, 1, 16, {1, 1.3, 0.7, 1000, 300});
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  const auto started = std::chrono::steady_clock::now();
  const OptimizeResult result = optimize(p, seed, {.time_limit_seconds = 2}, nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 3.0);
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_GT(result.stats.objective, 0);
}

// The caller's bound stands for the problem's: a seed that meets it is returned at once as
// optimal, without a search (the compile driver passes the bound it computed for the generators).
TEST(Optimizer, TakesTheCallersLowerBound) {
  const Problem p = uniform_problem(8, 1, 16, {1, 1.3, 0.7, 1000, 300});
  const Schedule seed = simulate(p, one_f_one_b_order(p), "1f1b");
  const double makespan = makespan_of(seed);
  ASSERT_GT(makespan, makespan_lower_bound(p).value);  // without it, the optimiser would search
  const OptimizeResult result = optimize(
      p, seed,
      {.time_limit_seconds = 30, .lower_bound = LowerBound{makespan, BoundSource::kSolver}},
      nullptr);
  EXPECT_EQ(result.stats.status, SearchStatus::kOptimal);
  EXPECT_EQ(result.stats.bound, makespan);
  EXPECT_LT(result.stats.seconds, 1.0);
  EXPECT_EQ(makespan_of(result.schedule), makespan);
}

// A seed that meets the bound is kept, but not its offloads where memory is ample: the schedule
// handed back runs without them, as fast.
TEST(Optimizer, AKeptSeedGoesWithoutTheOffloadsItDoesNotNeed) {
  Problem p = uniform_problem(4, 1, 4);
  const Schedule seed = testing::offloading_1f1b(p);
  ASSERT_FALSE(validate(p, seed));
  const double makespan = makespan_of(seed);
  const OptimizeResult result = optimize(
      p, seed,
      {.time_limit_seconds = 30, .lower_bound = LowerBound{makespan, BoundSource::kSolver}},
      nullptr);
  EXPECT_EQ(result.stats.status, SearchStatus::kOptimal);
  EXPECT_EQ(result.stats.offloads_dropped, p.microbatches);
  EXPECT_EQ(count_ops(result.schedule, Op::kOffload), 0);
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_LE(makespan_of(result.schedule), makespan + 1e-9);
}

// Two ranks, three microbatches, room for one and a half activations per rank: a host link that
// moves one activation in the time of one F, and a recompute as long as an F that keeps a
// quarter of the activation.
enum ActivationMoves { kKeepOnly = 0, kOffload = 1, kRecompute = 2, kBoth = 3 };

Problem tight_memory_problem(int moves) {
  Problem p = uniform_problem(2, 1, 3, {1, 1, 1, 1000, 250});
  p.p2p_latency = 0.1;
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + 1500;
  if (moves & kOffload) p.offload = OffloadLink{1000, 1000, ChannelMode::kDuplex, {0, 1}};
  if (moves & kRecompute) {
    for (StageCosts& stage : p.stages) {
      stage.checkpoint_bytes = 250;
      stage.recompute_forward = 1;
    }
  }
  return p;
}

// The whole-order MILP alone (no list policies, no local search), which ends once CBC does.
OptimizeResult optimize_from_adaoffload(const Problem& p) {
  const Schedule seed = run_generator("adaoffload", p).schedule;
  EXPECT_FALSE(validate(p, seed));
  return optimize(p, seed, {.time_limit_seconds = 20, .local_search = false},
                  [&](const Schedule& s, const Metrics&) {
                    EXPECT_FALSE(validate(p, s));  // every incumbent
                  });
}

TEST(Optimizer, OffloadAloneIsProvenOptimalAndBeatsKeeping) {
  const Problem keep = tight_memory_problem(kKeepOnly);
  const Problem offload = tight_memory_problem(kOffload);
  const OptimizeResult kept = optimize_from_adaoffload(keep);
  const OptimizeResult moved = optimize_from_adaoffload(offload);
  EXPECT_NEAR(kept.stats.objective, exhaustive_optimum(keep, true), 1e-6);
  EXPECT_EQ(moved.stats.status, SearchStatus::kOptimal);
  EXPECT_GT(count_ops(moved.schedule, Op::kOffload), 0);
  EXPECT_LT(moved.stats.objective, kept.stats.objective - 0.1);
  EXPECT_NEAR(moved.stats.bound, moved.stats.objective, 1e-6);
}

TEST(Optimizer, MixingKeepOffloadAndRecomputeBeatsEachAlone) {
  double best_single = exhaustive_optimum(tight_memory_problem(kKeepOnly), true);
  for (int moves : {kOffload, kRecompute}) {
    const Problem p = tight_memory_problem(moves);
    const OptimizeResult single = optimize_from_adaoffload(p);
    EXPECT_FALSE(validate(p, single.schedule));
    best_single = std::min(best_single, single.stats.objective);
  }
  const Problem p = tight_memory_problem(kBoth);
  const OptimizeResult mixed = optimize_from_adaoffload(p);
  EXPECT_FALSE(validate(p, mixed.schedule));
  EXPECT_LT(mixed.stats.objective, best_single - 0.1);
  const int offloads = count_ops(mixed.schedule, Op::kOffload);
  const int recomputes = count_ops(mixed.schedule, Op::kRecompute);
  EXPECT_GT(offloads, 0);
  EXPECT_GT(recomputes, 0);
  EXPECT_LT(offloads + recomputes, p.ranks * p.microbatches);  // some activations kept
}

// R = 4 on a V-shape, m = 8: 192 compute ops, too many for the whole-order MILP, so the
// activations can only move through the list policies around AdaOffload's and the local search
// (T_F = 1, T_B = 1.1, T_W = 0.9, A = 1000 with 900 offloadable, a round trip of 1.8, room for 3
// activations).
Problem offloading_vshape_problem(int64_t activation_budget = 3000, double bandwidth = 1000) {
  UniformCosts costs;
  costs.backward_input = 1.1;
  costs.backward_weight = 0.9;
  costs.weight_grad_bytes = 200;
  Problem p = uniform_problem(4, 2, 8, costs, PlacementKind::kVShape, 0.05);
  for (StageCosts& s : p.stages) s.offloadable_bytes = 900;
  p.offload = OffloadLink{bandwidth, bandwidth, ChannelMode::kDuplex, {0, 0, 1, 1}};
  for (int r = 0; r < p.ranks; ++r) p.budget_bytes[r] = p.static_bytes[r] + activation_budget;
  return p;
}

TEST(Optimizer, LocalSearchBeatsAdaOffloadWhereTheMilpIsTooLarge) {
  const Problem p = offloading_vshape_problem();
  const testing::TimedSchedule seed = run_generator("adaoffload", p);
  ASSERT_FALSE(validate(p, seed.schedule));
  ASSERT_GT(count_ops(seed.schedule, Op::kOffload), 0);
  OptimizerOptions options;
  options.time_limit_seconds = 5;  // the policies take well under a second, the search the rest
  int incumbents = 0;
  const OptimizeResult result =
      optimize(p, seed.schedule, options, [&](const Schedule& s, const Metrics&) {
        EXPECT_FALSE(validate(p, s));
        ++incumbents;
      });
  EXPECT_FALSE(validate(p, result.schedule));
  EXPECT_GT(incumbents, 0);
  EXPECT_EQ(result.stats.status, SearchStatus::kImproved);
  EXPECT_GT(count_ops(result.schedule, Op::kOffload), 0);
  // The policies alone reached 81.6 against 89.0.
  EXPECT_LT(result.stats.objective, 0.95 * seed.metrics.makespan);
}

// The same problem with two workers: the list policies and the local search run on two threads
// and exchange their best under a lock, so incumbents arrive one at a time, each valid and
// shorter than the one before, and the result is the last of them.
TEST(Optimizer, WorkersReportEachBetterScheduleOnceAndInTurn) {
  const Problem p = offloading_vshape_problem();
  const testing::TimedSchedule seed = run_generator("adaoffload", p);
  OptimizerOptions options;
  options.time_limit_seconds = 2;
  options.threads = 2;
  std::atomic<int> inside = 0;
  std::vector<double> incumbents;
  const OptimizeResult result =
      optimize(p, seed.schedule, options, [&](const Schedule& s, const Metrics& m) {
        EXPECT_EQ(inside++, 0);  // never two at once
        EXPECT_FALSE(validate(p, s));
        if (!incumbents.empty()) {
          EXPECT_LT(m.makespan, incumbents.back());
        }
        incumbents.push_back(m.makespan);
        --inside;
      });
  EXPECT_FALSE(validate(p, result.schedule));
  ASSERT_FALSE(incumbents.empty());
  EXPECT_LT(incumbents.front(), seed.metrics.makespan);
  EXPECT_DOUBLE_EQ(result.stats.objective, incumbents.back());
  EXPECT_LT(result.stats.objective, 0.95 * seed.metrics.makespan);
}

// On a slow link (an offload takes 3 forwards) with room for four activations, the fastest
// policy of AdaOffload's neighbourhood lets every rank fill its memory (75.25); held under their
// budgets, some ranks admit forwards later and the pipeline no longer clogs. The optimiser's
// descent over per-rank limits, run here on one thread and without its time limit, reaches 68.1.
TEST(Optimizer, PerRankLimitsBeatEveryPolicyOfTheNeighbourhood) {
  const Problem p = offloading_vshape_problem(4000, 300);
  auto makespan_under = [&](const ListPolicy& policy) {
    const std::optional<OffloadedSchedule> candidate = list_candidate(p, policy, "test");
    return candidate && candidate->fits() ? makespan_of(candidate->schedule)
                                          : std::numeric_limits<double>::infinity();
  };
  double neighbourhood_best = std::numeric_limits<double>::infinity();
  ListPolicy current;
  for (const ListPolicy& policy : offloading_policy_neighbourhood(p)) {
    if (const double makespan = makespan_under(policy); makespan < neighbourhood_best) {
      neighbourhood_best = makespan;
      current = policy;
    }
  }
  double makespan = neighbourhood_best;
  for (bool improved = true; improved;) {
    improved = false;
    for (const ListPolicy& neighbour : rank_limit_neighbours(p, current)) {
      if (const double m = makespan_under(neighbour); m < makespan) {
        makespan = m;
        current = neighbour;
        improved = true;
      }
    }
  }
  EXPECT_LT(makespan, 0.95 * neighbourhood_best);
}

// Each neighbour changes one rank's limits, and never lets a rank's memory past its budget.
TEST(Optimizer, RankLimitNeighboursChangeOneRankWithinItsBudget) {
  const Problem p = offloading_vshape_problem(4000, 300);
  const ListPolicy policy = offloading_list_policy(p, {}, false, 0.9);
  const std::vector<ListPolicy> neighbours = rank_limit_neighbours(p, policy);
  std::vector<int> per_rank(p.ranks, 0);
  for (const ListPolicy& neighbour : neighbours) {
    std::vector<int> changed;
    for (int r = 0; r < p.ranks; ++r) {
      const bool capped = !neighbour.max_in_flight.empty() && neighbour.max_in_flight[r] <= 3;
      if (neighbour.memory_limit_bytes[r] != policy.memory_limit_bytes[r] || capped) {
        changed.push_back(r);
      }
      EXPECT_LE(neighbour.memory_limit_bytes[r], p.activation_budget(r));
      EXPECT_GT(neighbour.memory_limit_bytes[r], 0);
    }
    ASSERT_EQ(changed.size(), 1u);
    ++per_rank[changed[0]];
  }
  // Four lower limits, the budget itself (the policy holds 90% of it), three in-flight caps.
  for (int r = 0; r < p.ranks; ++r) EXPECT_EQ(per_rank[r], 8) << "rank " << r;
}

}  // namespace
}  // namespace optpipe
