// AdaOffload (docs/methods.md): the densest split-backward schedule that fits the budget,
// offloading the longest-lived activations whose round trip fits; the MILP's seed. Returns its
// best timed schedule; when nothing fits, the leanest one it found (excess_bytes > 0), which the
// driver reports as over budget.
#pragma once

#include "heuristics/offload_placement.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

OffloadedSchedule adaoffload_schedule(const Problem& problem);
Order adaoffload_order(const Problem& problem);

}  // namespace optpipe
