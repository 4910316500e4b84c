// The offload generators (pipeoffload, adaoffload): every schedule validates, fits the budget
// when the generator says so, AdaOffload offloads nothing with ample memory and is never slower
// than PipeOffload at the same budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "heuristics/adaoffload.h"
#include "heuristics/gpipe.h"
#include "heuristics/offload_orders.h"
#include "heuristics/offload_placement.h"
#include "heuristics/one_f_one_b.h"
#include "heuristics/pipeoffload.h"
#include "heuristics/registry.h"
#include "heuristics/timing_within_budget.h"
#include "tests/test_problems.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

#ifndef OFFLOAD_TRIALS
#define OFFLOAD_TRIALS 60  // more for a study of the ratio: -DOFFLOAD_TRIALS=1000
#endif

namespace optpipe {
namespace {

int count_ops(const Order& order, Op op) {
  int n = 0;
  for (const auto& refs : order.ranks) {
    n += static_cast<int>(
        std::count_if(refs.begin(), refs.end(), [op](const OpRef& r) { return r.op == op; }));
  }
  return n;
}

int64_t peak_activation_bytes(const Problem& problem, const Order& order, int rank) {
  const Metrics metrics = compute_metrics(problem, simulate(problem, order, "reference"));
  return metrics.ranks[rank].peak_bytes - problem.static_bytes[rank];
}

// The 1F1B-like reference order whose peak the tight budgets are a fraction of.
Order reference_order(const Problem& problem) {
  if (problem.chunks_per_rank == 1) return one_f_one_b_order(problem);
  return gpipe_order(problem);
}

// A random problem with an offload link most of the time and a budget of `fraction` of the
// reference order's peak activation bytes (never below the leanest order's peak, so that some
// schedule fits).
Problem tight_problem(std::mt19937& rng, double fraction) {
  Problem problem = testing::random_problem(rng);
  if (!problem.offload && std::uniform_int_distribution<int>(0, 3)(rng) > 0) {
    OffloadLink link;
    link.d2h_bytes_per_time = std::uniform_real_distribution<double>(500, 50000)(rng);
    link.h2d_bytes_per_time = std::uniform_real_distribution<double>(500, 50000)(rng);
    link.channels =
        std::uniform_int_distribution<int>(0, 1)(rng) ? ChannelMode::kDuplex : ChannelMode::kShared;
    const int group_size = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int r = 0; r < problem.ranks; ++r) link.link_group_of_rank.push_back(r / group_size);
    problem.offload = link;
  }
  const Order reference = reference_order(problem);
  const Order leanest = microbatch_serial_order(problem, true);
  for (int r = 0; r < problem.ranks; ++r) {
    const auto peak = static_cast<int64_t>(fraction * peak_activation_bytes(problem, reference, r));
    problem.budget_bytes[r] =
        problem.static_bytes[r] + std::max(peak, peak_activation_bytes(problem, leanest, r));
  }
  return problem;
}

// The generator's claim (fits or not) matches the validator, and the schedule is valid apart from
// memory when it does not fit.
void expect_valid(const Problem& problem, const OffloadedSchedule& result, const char* name) {
  const Schedule schedule = simulate_within_budget(problem, result.order, name);
  EXPECT_NEAR(makespan_of(schedule), result.makespan, 1e-9) << name;
  const auto violation = validate(problem, schedule);
  if (result.fits()) {
    EXPECT_FALSE(violation) << name << ": " << violation->message;
    EXPECT_TRUE(compute_metrics(problem, schedule).within_budget) << name;
  } else {
    Problem roomy = problem;
    for (auto& b : roomy.budget_bytes) b = int64_t{1} << 60;
    const auto other = validate(roomy, schedule);
    EXPECT_FALSE(other) << name << ": " << other->message;
    EXPECT_TRUE(violation) << name << " says it does not fit but validates";
  }
}

std::string describe_problem(const Problem& p, int trial) {
  return ::testing::PrintToString(trial) + " R=" + std::to_string(p.ranks) +
         " v=" + std::to_string(p.chunks_per_rank) + " m=" + std::to_string(p.microbatches) +
         " placement=" + to_string(p.placement) +
         (p.offload ? std::string(" offload ") + to_string(p.offload->channels) : " no-offload");
}

TEST(OffloadGenerators, ValidateAndRespectTheBudgetOnRandomTightProblems) {
  std::mt19937 rng(20261122);
  std::vector<double> ratios;
  int ada_fits = 0, pipe_fits = 0, pipe_runs = 0;
  for (int trial = 0; trial < OFFLOAD_TRIALS; ++trial) {
    const double fraction = std::uniform_real_distribution<double>(0.4, 1.0)(rng);
    const Problem problem = tight_problem(rng, fraction);
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    expect_valid(problem, ada, "adaoffload");
    EXPECT_TRUE(ada.fits()) << "the microbatch-serial order fits";
    ada_fits += ada.fits();
    if (!pipeoffload_unsupported(problem).empty()) continue;
    ++pipe_runs;
    const OffloadedSchedule pipe = pipeoffload_schedule(problem);
    expect_valid(problem, pipe, "pipeoffload");
    pipe_fits += pipe.fits();
    if (pipe.fits()) {
      EXPECT_TRUE(ada.fits()) << "pipeoffload fits, adaoffload does not";
      EXPECT_LE(ada.makespan, pipe.makespan * (1 + 1e-9));
      ratios.push_back(ada.makespan / pipe.makespan);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  ASSERT_FALSE(ratios.empty());
  auto at = [&](double q) { return ratios[static_cast<size_t>(q * (ratios.size() - 1))]; };
  std::printf(
      "adaoffload/pipeoffload makespan over %zu problems both fit: min %.3f p25 %.3f "
      "median %.3f p75 %.3f max %.3f; fits: ada %d/%d, pipe %d/%d\n",
      ratios.size(), ratios.front(), at(0.25), at(0.5), at(0.75), ratios.back(), ada_fits,
      OFFLOAD_TRIALS, pipe_fits, pipe_runs);
}

// The same with every stage able to recompute (C = A / 8, T_R = T_F): AdaOffload's schedules,
// offloading, recomputing or both, validate and fit.
TEST(OffloadGenerators, AdaOffloadValidatesWithRecomputeOnRandomTightProblems) {
  std::mt19937 rng(20261125);
  int recomputing = 0;
  for (int trial = 0; trial < OFFLOAD_TRIALS; ++trial) {
    Problem problem = tight_problem(rng, std::uniform_real_distribution<double>(0.2, 1.0)(rng));
    for (StageCosts& c : problem.stages) {
      c.checkpoint_bytes = c.activation_bytes / 8;
      c.recompute_forward = c.forward;
    }
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    expect_valid(problem, ada, "adaoffload");
    EXPECT_TRUE(ada.fits()) << "the microbatch-serial order fits";
    recomputing += count_ops(ada.order, Op::kRecompute) > 0;
  }
  std::printf("%d of %d recompute\n", recomputing, OFFLOAD_TRIALS);
  EXPECT_GT(recomputing, OFFLOAD_TRIALS / 6);  // measured: 18 of 60
}

// Whether `schedule`, timed from `order`, needs each of its offloads and recomputes: without any
// one of them (an offload with its reload), the order is slower, over budget or deadlocked.
bool needs_each_saving(const Problem& problem, const Order& order, const Schedule& schedule) {
  for (int r = 0; r < problem.ranks; ++r) {
    for (const OpRef& saving : order.ranks[r]) {
      if (saving.op != Op::kOffload && saving.op != Op::kRecompute) continue;
      Order without = order;
      std::erase_if(without.ranks[r], [&](const OpRef& ref) {
        return ref == saving || (saving.op == Op::kOffload &&
                                 ref == OpRef{Op::kReload, saving.stage, saving.microbatch});
      });
      const std::optional<Schedule> timing = timing_within_budget(problem, without);
      if (timing && makespan_of(*timing) <= makespan_of(schedule) + 1e-9 &&
          !validate(problem, *timing)) {
        return false;
      }
    }
  }
  return true;
}

// AdaOffload's lists offload eagerly; what it hands back carries no offload or recompute it can
// do without (heuristics/offload_recompute_pruning.h), on problems where it has few enough for its
// timings to try them all.
TEST(OffloadGenerators, AdaOffloadKeepsOnlyTheOffloadsAndRecomputesItNeeds) {
  std::mt19937 rng(20261129);
  int checked = 0;
  for (int trial = 0; trial < OFFLOAD_TRIALS; ++trial) {
    Problem problem = tight_problem(rng, std::uniform_real_distribution<double>(0.3, 1.0)(rng));
    if (trial % 2) {
      for (StageCosts& c : problem.stages) {
        c.checkpoint_bytes = c.activation_bytes / 8;
        c.recompute_forward = c.forward;
      }
    }
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    ASSERT_TRUE(ada.fits());
    const int savings = count_ops(ada.order, Op::kOffload) + count_ops(ada.order, Op::kRecompute);
    if (savings == 0 || savings > 16) continue;
    ++checked;
    EXPECT_TRUE(needs_each_saving(problem, ada.order, ada.schedule));
  }
  std::printf("%d of %d checked\n", checked, OFFLOAD_TRIALS);
  EXPECT_GT(checked, OFFLOAD_TRIALS / 6);
}

TEST(OffloadGenerators, AdaOffloadOffloadsNothingWithAmpleMemory) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 30; ++trial) {
    const Problem problem = testing::random_problem(rng);  // budget holds every activation
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    EXPECT_TRUE(ada.fits());
    EXPECT_EQ(count_ops(ada.order, Op::kOffload), 0);
  }
}

TEST(OffloadGenerators, AdaOffloadFitsOneActivationPerChunkWithAFastLink) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    Problem problem = testing::random_problem(rng);
    OffloadLink link;
    link.d2h_bytes_per_time = 1e12;
    link.h2d_bytes_per_time = 1e12;
    link.channels = trial % 2 ? ChannelMode::kDuplex : ChannelMode::kShared;
    for (int r = 0; r < problem.ranks; ++r) link.link_group_of_rank.push_back(r);
    problem.offload = link;
    for (StageCosts& c : problem.stages) c.offloadable_bytes = c.activation_bytes;
    for (int r = 0; r < problem.ranks; ++r) {
      int64_t one_per_chunk = 0;
      for (int s : problem.stages_of_rank(r)) one_per_chunk += problem.stages[s].activation_bytes;
      problem.budget_bytes[r] = problem.static_bytes[r] + one_per_chunk;
    }
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    expect_valid(problem, ada, "adaoffload");
    EXPECT_TRUE(ada.fits());
  }
}

TEST(OffloadGenerators, ReturnTheirLeanestScheduleWhenNothingFits) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 15; ++trial) {
    Problem problem = testing::random_problem(rng);
    problem.budget_bytes = problem.static_bytes;  // no room for a single activation
    SCOPED_TRACE(describe_problem(problem, trial));
    const OffloadedSchedule ada = adaoffload_schedule(problem);
    EXPECT_FALSE(ada.fits());
    expect_valid(problem, ada, "adaoffload");
    if (pipeoffload_unsupported(problem).empty()) {
      const OffloadedSchedule pipe = pipeoffload_schedule(problem);
      EXPECT_FALSE(pipe.fits());
      expect_valid(problem, pipe, "pipeoffload");
    }
  }
}

TEST(OffloadGenerators, PipeOffloadWithOneChunkAndAmpleMemoryIs1F1B) {
  const Problem problem = testing::uniform_problem(4, 1, 12);
  const OffloadedSchedule pipe = pipeoffload_schedule(problem);
  const Schedule one_f_one_b = simulate(problem, one_f_one_b_order(problem), "1f1b");
  EXPECT_TRUE(pipe.fits());
  EXPECT_DOUBLE_EQ(pipe.makespan, makespan_of(one_f_one_b));
  EXPECT_EQ(count_ops(pipe.order, Op::kOffload), 0);
}

TEST(OffloadGenerators, RegistryBuildsBothOnEveryRandomProblem) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const Problem problem = tight_problem(rng, 0.6);
    for (const char* name : {"pipeoffload", "adaoffload"}) {
      const Generator* g = find_generator(name);
      ASSERT_NE(g, nullptr) << name;
      if (!g->unsupported_reason(problem).empty()) continue;
      EXPECT_NO_THROW(simulate(problem, g->build(problem), name)) << name;
    }
  }
}

// Two chunks per rank and no host link: one microbatch at a time already holds both chunks'
// activations (2000 bytes) on a rank, over the 1100-byte budget. Recomputing the first chunk's
// activation (keeping its 100-byte checkpoint) is the only way to fit.
TEST(OffloadGenerators, AdaOffloadRecomputesWhereOnlyRecomputeFits) {
  testing::UniformCosts costs;
  costs.checkpoint_bytes = 100;
  Problem problem = testing::uniform_problem(2, 2, 4, costs);
  for (int r = 0; r < problem.ranks; ++r) problem.budget_bytes[r] = problem.static_bytes[r] + 1100;
  const OffloadedSchedule ada = adaoffload_schedule(problem);
  expect_valid(problem, ada, "adaoffload");
  EXPECT_TRUE(ada.fits());
  EXPECT_GT(count_ops(ada.order, Op::kRecompute), 0);
  Problem without = problem;
  for (StageCosts& stage : without.stages) stage.checkpoint_bytes.reset();
  EXPECT_FALSE(adaoffload_schedule(without).fits());
}

}  // namespace
}  // namespace optpipe
