#include "solver/idle_transfers.h"

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

// The offloads of `schedule` whose reload starts no later than they end.
std::vector<OpRef> idle_offloads(const Problem& problem, const Schedule& schedule) {
  OpTable<double> offload_end(problem, -1.0);
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kOffload) offload_end[a.ref] = a.end;
    }
  }
  std::vector<OpRef> idle;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op != Op::kReload) continue;
      const OpRef offload{Op::kOffload, a.ref.stage, a.ref.microbatch};
      if (offload_end[offload] >= 0 && a.start <= offload_end[offload]) idle.push_back(offload);
    }
  }
  return idle;
}

// `order` without the offloads `offloads` and their reloads.
Order without_transfers(Order order, const std::vector<OpRef>& offloads) {
  for (const OpRef& offload : offloads) {
    const OpRef reload{Op::kReload, offload.stage, offload.microbatch};
    for (auto& refs : order.ranks) {
      std::erase_if(refs, [&](const OpRef& r) { return r == offload || r == reload; });
    }
  }
  return order;
}

// `order` timed, when it fits the budget and ends by `makespan`.
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

std::optional<PrunedOrder> without_idle_transfers(const Problem& problem, const Order& order,
                                                  const Schedule& schedule) {
  const std::vector<OpRef> idle = idle_offloads(problem, schedule);
  if (idle.empty()) return std::nullopt;
  const double makespan = makespan_of(schedule);
  Order all_dropped = without_transfers(order, idle);
  if (std::optional<Schedule> timing = no_slower_timing(problem, all_dropped, makespan)) {
    return PrunedOrder{std::move(all_dropped), std::move(*timing), static_cast<int>(idle.size())};
  }
  std::optional<PrunedOrder> pruned;
  for (const OpRef& offload : idle) {
    const Order& from = pruned ? pruned->order : order;
    Order dropped = without_transfers(from, {offload});
    if (std::optional<Schedule> timing = no_slower_timing(problem, dropped, makespan)) {
      const int count = pruned ? pruned->dropped + 1 : 1;
      pruned = PrunedOrder{std::move(dropped), std::move(*timing), count};
    }
  }
  return pruned;
}

}  // namespace optpipe
