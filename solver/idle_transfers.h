// Offload pairs that free no memory: the activation's reload starts as soon as its offload ends,
// so it is never away, and the pair only takes its channel's time from other transfers. The local
// search keeps such pairs wherever dropping them does not shorten the makespan (docs/solver.md,
// The search); the optimiser hands its schedule back without them.
#pragma once

#include <optional>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct PrunedOrder {
  Order order;
  Schedule schedule;  // the order timed by simulate_within_budget, within the budget
  int dropped = 0;    // activations no longer offloaded
};

// `order`, timed as `schedule`, without the transfers of the activations that `schedule` offloads
// for no time, where the order then times to a schedule within the budget and no slower: all of
// them at once, else one at a time. nullopt where none can go.
std::optional<PrunedOrder> without_idle_transfers(const Problem& problem, const Order& order,
                                                  const Schedule& schedule);

}  // namespace optpipe
