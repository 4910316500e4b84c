#include "solver/needless_savings.h"

#include <algorithm>
#include <vector>

#include "compiler/errors.h"
#include "compiler/op_table.h"
#include "compiler/simulator.h"
#include "compiler/validator.h"
#include "heuristics/offload_placement.h"

namespace optpipe {

namespace {

// Where two timings of the same work count as equally fast.
constexpr double kTolerance = 1e-9;

// An activation the schedule offloads (`ref` is its OFFLOAD) or recomputes (its R).
struct Saving {
  OpRef ref;
  bool frees_nothing;  // an offload whose reload starts as soon as it ends
  double at;           // when it frees memory: the offload's end, the R's start
};

// The schedule's offloads and recomputes, those that free nothing first, then in time order.
std::vector<Saving> savings_of(const Problem& problem, const Schedule& schedule) {
  OpTable<double> offload_end(problem, -1.0);
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kOffload) offload_end[a.ref] = a.end;
    }
  }
  std::vector<Saving> savings;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kRecompute) savings.push_back({a.ref, false, a.start});
      if (a.ref.op != Op::kReload) continue;
      const OpRef offload{Op::kOffload, a.ref.stage, a.ref.microbatch};
      const double end = offload_end[offload];
      if (end >= 0) savings.push_back({offload, a.start <= end, end});
    }
  }
  std::sort(savings.begin(), savings.end(), [](const Saving& a, const Saving& b) {
    if (a.frees_nothing != b.frees_nothing) return a.frees_nothing;
    return a.at < b.at;
  });
  return savings;
}

// `order` with the activation of `saving` kept: without its OFFLOAD and RELOAD, or its R.
Order without(Order order, const Problem& problem, const OpRef& saving) {
  const OpRef reload{Op::kReload, saving.stage, saving.microbatch};
  std::erase_if(order.ranks[problem.rank_of_stage[saving.stage]], [&](const OpRef& r) {
    return r == saving || (saving.op == Op::kOffload && r == reload);
  });
  return order;
}

// `order` timed, when the schedule is valid and ends by `makespan`.
std::optional<Schedule> no_slower_timing(const Problem& problem, const Order& order,
                                         double makespan) {
  try {
    Schedule schedule = simulate_within_budget(problem, order, "milp");
    if (makespan_of(schedule) > makespan + kTolerance || validate(problem, schedule)) {
      return std::nullopt;
    }
    return schedule;
  } catch (const Error&) {
    return std::nullopt;  // ranks that would wait on each other
  }
}

}  // namespace

std::optional<PrunedOrder> without_needless_savings(
    const Problem& problem, const Order& order, const Schedule& schedule,
    std::chrono::steady_clock::time_point deadline) {
  const double makespan = makespan_of(schedule);
  std::optional<PrunedOrder> pruned;
  for (const Saving& saving : savings_of(problem, schedule)) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    Order dropped = without(pruned ? pruned->order : order, problem, saving.ref);
    std::optional<Schedule> timing = no_slower_timing(problem, dropped, makespan);
    if (!timing) continue;
    if (!pruned) pruned = PrunedOrder{};
    pruned->order = std::move(dropped);
    pruned->schedule = std::move(*timing);
    ++(saving.ref.op == Op::kOffload ? pruned->offloads_dropped : pruned->recomputes_dropped);
  }
  return pruned;
}

}  // namespace optpipe
