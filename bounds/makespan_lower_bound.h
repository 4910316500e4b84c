// The makespan lower bound that the metrics report: the bounds of this folder combined.
#pragma once

#include <functional>

#include "bounds/lower_bound.h"
#include "model/problem.h"

namespace optpipe {

// A makespan no schedule within the budget can beat (docs/semantics.md, Metrics: lower_bound):
// the longest of one microbatch's critical path through all stages and back, sequencing_bound
// (bounds/sequencing_bound.h: each rank's ops between their heads and tails) and memory_bound
// (bounds/memory_bound.h).
// `stop` (the time limit, an interrupt) may end the sequencing bound's longest part early: the
// bound is then valid but may be lower (bounds/sequencing_bound.h).
LowerBound makespan_lower_bound(const Problem& problem,
                                const std::function<bool()>& stop = nullptr);

}  // namespace optpipe
