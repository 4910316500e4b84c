#include "solver/swap_search.h"

#include <limits>
#include <utility>

#include "compiler/errors.h"
#include "compiler/simulator.h"
#include "compiler/validator.h"
#include "heuristics/offload_placement.h"

namespace optpipe {

namespace {

constexpr double kTolerance = 1e-9;

// The order timed by the simulator when it is free of deadlock and within the budget.
std::optional<Schedule> valid_timing(const Problem& problem, const Order& order) {
  try {
    Schedule schedule = simulate(problem, order, "milp");
    if (validate(problem, schedule)) return std::nullopt;
    return schedule;
  } catch (const Error&) {
    return std::nullopt;  // a swap that makes ranks wait on each other
  }
}

}  // namespace

std::optional<SwapSearch> SwapSearch::from(const Problem& problem, Order start, uint64_t seed) {
  std::optional<Schedule> schedule = valid_timing(problem, start);
  if (!schedule) return std::nullopt;
  return SwapSearch(problem, std::move(start), std::move(*schedule), seed);
}

SwapSearch::SwapSearch(const Problem& problem, Order order, Schedule schedule, uint64_t seed)
    : problem_(&problem),
      order_(std::move(order)),
      schedule_(std::move(schedule)),
      makespan_(makespan_of(schedule_)),
      rng_(seed) {}

bool SwapSearch::try_swap(double limit) {
  const int rank = std::uniform_int_distribution<int>(0, problem_->ranks - 1)(rng_);
  std::vector<OpRef>& refs = order_.ranks[rank];
  if (refs.size() < 2) return false;
  const size_t i = std::uniform_int_distribution<size_t>(0, refs.size() - 2)(rng_);
  std::swap(refs[i], refs[i + 1]);
  std::optional<Schedule> timing = valid_timing(*problem_, order_);
  if (!timing || makespan_of(*timing) > limit + kTolerance) {
    std::swap(refs[i], refs[i + 1]);
    return false;
  }
  schedule_ = std::move(*timing);
  makespan_ = makespan_of(schedule_);
  return true;
}

bool SwapSearch::step() {
  const double before = makespan_;
  return try_swap(before) && makespan_ < before - kTolerance;
}

void SwapSearch::perturb(int swaps) {
  for (int kept = 0, tries = 0; kept < swaps && tries < 20 * swaps; ++tries) {
    kept += try_swap(std::numeric_limits<double>::infinity());
  }
}

}  // namespace optpipe
