// Planned offload (docs/methods.md): V-Half's or V-Min's order (heuristics/vshape_patterns.h) with
// offloads chosen ahead from its in-flight peaks, for budgets far under the pattern's own peak on
// long V-shape pipelines, where the offloading lists run in waves and their shared channels pace
// them (docs/benchmarks.md, Long pipelines at budgets under the suite's).
//
// Per rank, the order's in-flight peak says how many activations of each stage it holds at once.
// Besides the bytes every activation keeps on the device and a reserve for those in transit, the
// rank keeps whole as many activations as fit, of its shortest-lived stage first, spread evenly
// over the microbatches; the others go to host right after their F and come back a fixed number
// of the rank's compute ops before their B. The memory fence (simulate_within_budget) then paces
// each rank by its channels. Where the timed schedule still exceeds a rank's budget, the plan is
// mended and built again for a few rounds: a RELOAD that overflows comes one op later, anything
// else raises the rank's reserve.
#pragma once

#include <limits>
#include <optional>
#include <string>

#include "heuristics/offload_placement.h"
#include "model/problem.h"

namespace optpipe {

// Whether planned offload applies: a long pipeline (heuristics/list_policies.h) on the V-shape
// placement with two chunks per rank and a host link.
bool planned_offload_applies(const Problem& problem);

// The fastest fitting schedule over both patterns, a few reserves and reload leads, labelled
// `method`; nullopt where none fits faster than `faster_than` or planned offload does not apply.
// 0.6 to 2.5 s at R = 32, m = 256 (RelWithDebInfo).
std::optional<OffloadedSchedule> planned_offload_schedule(
    const Problem& problem, const std::string& method,
    double faster_than = std::numeric_limits<double>::infinity());

}  // namespace optpipe
