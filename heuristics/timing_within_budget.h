// An order the optimiser changed, timed: the local search's moves and the dropping of needless
// offloads and recomputes (solver/local_search.h, heuristics/offload_recompute_pruning.h).
#pragma once

#include <limits>
#include <optional>

#include "model/problem.h"
#include "model/schedule.h"
#include "timing/simulator.h"

namespace optpipe {

// `order` timed by the simulator with the memory fence, when it is free of deadlock and within the
// budget. With `previous` (this function's timing of the order before the change), what `revision`
// leaves as it was is taken from it, and the timing is abandoned (nullopt) once it is sure to end
// after `limit`. Only memory is checked: the changes keep every op of a complete order listed
// once, and the simulator meets dependencies and one op at a time by construction.
std::optional<Schedule> timing_within_budget(
    const Problem& problem, const Order& order, const Schedule* previous = nullptr,
    const OrderRevision& revision = {}, double limit = std::numeric_limits<double>::infinity());

}  // namespace optpipe
