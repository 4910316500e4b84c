// PipeOffload (docs/methods.md): grouped interleaved 1F1B offloading the activations of the first K
// chunks, with the group size and K chosen for the budget. Returns its best timed schedule; when
// nothing fits, the leanest one it found (excess_bytes > 0), which the driver reports as over
// budget.
#pragma once

#include <optional>
#include <string>

#include "heuristics/offload_placement.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

OffloadedSchedule pipeoffload_schedule(const Problem& problem);
// PipeOffload's best schedule among its compute orders faster than `makespan` alone (a search
// with a fit that fast needs no other: offload never shortens an order), fitted for `goal`;
// nullopt where there is none, so without the fallback to one microbatch at a time.
std::optional<OffloadedSchedule> pipeoffload_schedule_faster_than(const Problem& problem,
                                                                  double makespan, FitGoal goal);
Order pipeoffload_order(const Problem& problem);
// Why pipeoffload cannot serve `problem`, or empty.
std::string pipeoffload_unsupported(const Problem& problem);

}  // namespace optpipe
