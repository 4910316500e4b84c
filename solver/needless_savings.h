// Offloads and recomputes a schedule does not need. The local search keeps an offload or an R
// wherever dropping it does not shorten the makespan (a plateau move), so its schedules can carry
// copies that free no memory (a reload that starts as soon as its offload ends) or Rs that the
// budget does without. Each costs link or compute time for nothing; the optimiser hands its
// schedule back without them (docs/solver.md, The search).
#pragma once

#include <chrono>
#include <optional>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct PrunedOrder {
  Order order;
  Schedule schedule;  // the order timed by simulate_within_budget, validated
  int offloads_dropped = 0;
  int recomputes_dropped = 0;
};

// `order`, timed as `schedule`, without the offloads (with their reloads) and recomputes it does
// not need: wherever the order without them times to a valid schedule no slower, until
// `deadline`. First the offloads that `schedule` has room to keep under the budget (those whose
// reload starts as soon as they end first: they free no memory at all), all at once where that
// holds, else each half in turn; then each of the others. nullopt where none can go.
std::optional<PrunedOrder> without_needless_savings(
    const Problem& problem, const Order& order, const Schedule& schedule,
    std::chrono::steady_clock::time_point deadline);

}  // namespace optpipe
