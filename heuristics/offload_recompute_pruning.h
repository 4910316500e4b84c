// Offloads and recomputes a schedule does not need. The local search keeps an offload or an R
// wherever dropping it does not shorten the makespan (a plateau move), and AdaOffload's lists
// offload eagerly, so their schedules can carry copies that free no memory (a reload that starts
// as soon as its offload ends) or Rs that the budget does without. Each costs link or compute
// time for nothing, and a copy can hold up others on its channel; AdaOffload and the optimiser
// hand their schedules back without them (docs/methods.md, docs/solver.md). Here a saving is either
// of the two: an offload (with its reload) or an R, each of which saves device memory at a cost.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <optional>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct PrunedOrder {
  Order order;
  Schedule schedule;  // the order timed by simulate_within_budget, validated
  int offloads_dropped = 0;
  int recomputes_dropped = 0;
};

// How long dropping may go on: until `deadline`, and for at most `max_timings` timings of the
// order (a limit that, unlike a deadline, gives the same result on any machine).
struct PruneLimits {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  size_t max_timings = std::numeric_limits<size_t>::max();
};

// `order`, timed as `schedule`, without the offloads (with their reloads) and recomputes it does
// not need: wherever the order without them times to a valid schedule no slower, within
// `limits`. First the offloads that `schedule` has room to keep under the budget (those whose
// reload starts as soon as they end first: they free no memory at all), all at once where that
// holds, else each half in turn; then each of the others; and again, in rounds, until a round
// drops nothing (a drop can make room for a saving an earlier try needed). nullopt where none can
// go.
std::optional<PrunedOrder> prune_offloads_and_recomputes(const Problem& problem, const Order& order,
                                                         const Schedule& schedule,
                                                         const PruneLimits& limits);

}  // namespace optpipe
