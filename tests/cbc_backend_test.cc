// What solve_with_cbc reports (solver/cbc_backend.h): the bound CBC proves, including the one of
// a search CBC restarted; a solve stopped on simplex iterations, which repeats exactly.
#include "solver/cbc_backend.h"

#include <gtest/gtest.h>

#include "bench/suite.h"
#include "heuristics/offload_placement.h"
#include "heuristics/registry.h"
#include "solver/microbatch_order.h"
#include "solver/milp_segment.h"
#include "solver/order_model.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {
namespace {

// The benchmark suite's R = 4, m = 4 profile on 5 GB/s links at half of 1F1B's activation peak,
// V-shape: no round trip fits an activation's lifespan there, so the whole-order model only
// orders ops (531 columns).
Problem scarce_vshape_at_half_budget() {
  return bench::suite_problem("gpt-R4-m4-scarce", 0.5, "vshape");
}

// Serial CBC (each run takes the same path) on the whole-order model of `schedule` (split
// backwards, in microbatch order), stopped after `stop_after` events; `best`, when given, gets the
// timing of the best order found.
SolveResult solve_whole_order(const Problem& problem, const Schedule& schedule, int stop_after,
                              Schedule* best = nullptr) {
  const Order compute = compute_order(order_of(schedule));
  const Segment everything = whole_order(compute);
  const OrderModel model(problem, compute, schedule, everything, SegmentObjective::kMakespan);
  int events = 0;
  // The limit only guards against a hang: the proof takes about 20 s, and 60 s under ASan.
  const CbcOptions serial{600, 0, false, [&events, stop_after] { return ++events > stop_after; }};
  SolveResult result = solve_with_cbc(model.model(), model.start_solution(), serial, nullptr);
  if (best) *best = simulate(problem, model.decode(result.solution), "milp");
  return result;
}

// Started from the optimum, CBC fixes columns by reduced cost after its root and restarts the
// search in a child model, whose root bound is 562.61; the parent ends with its own, 562.52, which
// a solve stopped inside the child reported before (docs/solver.md, Solving).
TEST(CbcBackend, ReportsTheBoundOfASearchRestartedAfterReducedCostFixing) {
  const Problem problem = scarce_vshape_at_half_budget();
  const Schedule seed = in_microbatch_order(split_backward(
      problem,
      simulate_within_budget(problem, find_generator("zb-auto")->build(problem), "zb-auto")));
  Schedule best;
  const SolveResult proof = solve_whole_order(problem, seed, 1000000, &best);
  ASSERT_EQ(proof.status, SolveStatus::kOptimal);
  const double optimum = proof.objective;
  EXPECT_NEAR(optimum, 574.36, 0.01);
  ASSERT_NEAR(makespan_of(best), optimum, 1e-6);

  const SolveResult stopped = solve_whole_order(problem, best, 300);
  EXPECT_NE(stopped.status, SolveStatus::kOptimal) << "stopped before the proof";
  EXPECT_GT(stopped.bound, 562.56);
  EXPECT_LE(stopped.bound, optimum + 1e-9);
}

// The optimiser's CBC work is counted in simplex iterations (docs/solver.md, Reproducible
// compiles): a solve stopped on them ends where its limit says, and takes the same path again.
TEST(CbcBackend, ASolveStoppedOnIterationsRepeatsExactly) {
  const Problem problem = scarce_vshape_at_half_budget();
  const Schedule seed = in_microbatch_order(split_backward(
      problem,
      simulate_within_budget(problem, find_generator("zb-auto")->build(problem), "zb-auto")));
  const Order compute = compute_order(order_of(seed));
  const OrderModel model(problem, compute, seed, whole_order(compute),
                         SegmentObjective::kMakespan);
  CbcOptions limited;
  limited.time_limit_seconds = 600;  // only guards against a hang
  limited.max_iterations = 3000;
  const SolveResult first = solve_with_cbc(model.model(), model.start_solution(), limited, nullptr);
  const SolveResult second =
      solve_with_cbc(model.model(), model.start_solution(), limited, nullptr);
  EXPECT_NE(first.status, SolveStatus::kOptimal) << "stopped before the proof";
  EXPECT_FALSE(first.time_limit_reached);
  EXPECT_GE(first.iterations, limited.max_iterations);
  EXPECT_EQ(first.iterations, second.iterations);
  EXPECT_EQ(first.nodes, second.nodes);
  EXPECT_EQ(first.solution, second.solution);
  EXPECT_EQ(first.bound, second.bound);
}

}  // namespace
}  // namespace optpipe
