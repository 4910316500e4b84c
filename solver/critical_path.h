// The critical path of a timed schedule (docs/solver.md, The search): walking back from the
// action that ends last, each action's start is set by a dependency, by its rank's previous
// compute op, under the memory fence by the end of an offload that made room for it, or, for a
// transfer, by the compute op after which it was issued or the transfer before it on its channel.
// The local search reorders the pairs of actions that meet on it, the moves that can shorten
// the makespan (as in job-shop scheduling, where only swaps on a critical block can).
#pragma once

#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Two actions of one rank, back to back on the critical path: `after` starts when `before` ends.
// Either two compute ops, or a transfer and the action listed before it that held it back (the
// compute op after which it was issued, or the transfer before it on its channel).
struct CriticalPair {
  int rank;
  OpRef before;
  OpRef after;
};

// The pairs along one critical path of `schedule` (any, where several tie), latest first.
std::vector<CriticalPair> critical_pairs(const Problem& problem, const Schedule& schedule);

}  // namespace optpipe
