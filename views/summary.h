// What `optpipe-compile` and `optpipe validate` tell the user: a readable table and the summary
// JSON of docs/design.md §8.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/problem.h"
#include "model/solver_stats.h"
#include "timing/metrics.h"

namespace optpipe {

// A title line with the schedule's metrics, then per rank: busy, idle, peak against budget.
std::string summary_table(const Problem& problem, const std::string& method,
                          const Metrics& metrics);

// One line on the optimiser's run: its status, seconds, CBC's windows and nodes, and what
// stopped or limited it (SolverStats::note).
std::string solver_line(const SolverStats& solver);

// method, feasible, makespan, span, idle_fraction, bubble_rate, lower_bound, gap, time_unit,
// ranks: [{rank, busy, span, peak_bytes, budget_bytes}], solver (null when it did not run).
nlohmann::json summary_json(const Problem& problem, const std::string& method,
                            const Metrics& metrics, const SolverStats* solver = nullptr);

}  // namespace optpipe
