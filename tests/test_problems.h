// Problems built in code for tests: uniform ones for closed forms, random ones for properties.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "bounds/paced_heads.h"
#include "model/problem.h"
#include "model/schedule.h"
#include "timing/metrics.h"

namespace optpipe::testing {

struct UniformCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  int64_t activation_bytes = 1000;
  int64_t weight_grad_bytes = 0;  // peak bytes / A then counts activations awaiting their B
  std::optional<int64_t> checkpoint_bytes = std::nullopt;  // unset: no stage can recompute
};

// "R4_m8_F1_B1.5_W0.75_A1000_G0" (and "_C250" where stages recompute): the name a parameterised
// test prints for a uniform problem, instead of the bytes of its parameter struct.
std::string describe_uniform(int ranks, int microbatches, const UniformCosts& costs);

// A uniform problem's shape: the parameter of tests run over several (one stage per rank).
struct UniformCase {
  int ranks;
  int microbatches;
  UniformCosts costs;
};
void PrintTo(const UniformCase& c, std::ostream* os);  // gtest's name for it: describe_uniform

// R ranks, v chunks, m microbatches, every stage alike, ample memory, no offload link.
Problem uniform_problem(int ranks, int chunks, int microbatches, UniformCosts costs = {},
                        PlacementKind placement = PlacementKind::kLoop, double p2p_latency = 0);

// Uniform costs with G = 200 of each activation held from B to W.
UniformCosts with_weight_grads();

// `problem` with a duplex link of `bytes_per_time` each way per rank, O = 900 of every stage's
// activation and room for `activation_bytes` of activations per rank.
Problem offloading_uniform(Problem problem, double bytes_per_time, int64_t activation_bytes);

// Varied R, v, m, per-stage costs, latency, placement, offload link, channel mode, link groups.
// Memory budget ample (every schedule fits).
Problem random_problem(std::mt19937& rng);

// Heads of every op at 0, the schedule's first start: what holds before any raising.
OpHeads zero_heads(const Problem& problem);

// Each rank's budget: static bytes + `fraction` of all its activations at once.
Problem with_budget_fraction(Problem p, double fraction);

// `problem` with each rank's budget at the peak `schedule` reaches there: the tightest budget the
// schedule fits, where memory binds most.
Problem at_own_peaks(const Problem& problem, const Schedule& schedule);

// Activation bytes of one microbatch on a rank: the least any schedule must hold there.
int64_t one_microbatch_bytes(const Problem& p, int rank);

// Whether `schedule` has some action of type `op` (an offload, a recompute, ...).
bool has_action(const Schedule& schedule, Op op);
// How many actions of type `op` `schedule` has.
int count_ops(const Schedule& schedule, Op op);

// A registered generator's order on `problem`, timed by the simulator, with its metrics (not
// validated: callers decide what they expect of it).
struct TimedSchedule {
  Schedule schedule;
  Metrics metrics;
};
TimedSchedule run_generator(const std::string& method, const Problem& problem);

// 1F1B with rank 0 offloading every activation after its F and reloading it before its backward;
// gives `problem` a duplex offload link of 1000 bytes per time unit, each rank its own group.
Schedule offloading_1f1b(Problem& problem);

// `order` with R(s, j) inserted right before each backward (B or BW) of every activation.
Order recompute_all(Order order);
// The same for each activation that `pick` chooses, asked once per backward in list order.
Order recompute_some(Order order, const std::function<bool()>& pick);

// 1F1B recomputing every activation: every stage keeps `checkpoint_bytes` after F and runs R
// (as long as F) right before its backward.
Schedule recomputing_1f1b(Problem& problem, int64_t checkpoint_bytes);

// The best makespan over every per-rank interleaving of split F/B/W ops that keeps each
// microbatch's F before its B before its W (and, with `fifo`, same-type ops in microbatch order),
// within the budget, for v = 1. Orders that deadlock are skipped. Exponential: R <= 3, m <= 4.
double exhaustive_optimum(const Problem& problem, bool fifo);

// The same over those orders with every set of rank 0's activations offloaded (each OFFLOAD listed
// right after its F, each RELOAD 0, 1 or 2 compute ops before its B), timed with the memory fence
// (simulate_within_budget): the best schedule of that family, so no bound may be above it.
// `problem` has a link. Exponential: R = 2, m <= 3.
double exhaustive_offloading_optimum(const Problem& problem, bool fifo);

}  // namespace optpipe::testing
