// Metrics of a timed schedule (docs/design.md §4).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "bounds/lower_bound.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct RankMetrics {
  int rank = 0;
  double busy = 0;         // sum of compute durations
  double span = 0;         // last compute end minus first compute start
  int64_t peak_bytes = 0;  // static + highest live activation bytes
  int64_t budget_bytes = 0;
};

struct Metrics {
  double makespan = 0;
  double span = 0;
  double idle_fraction = 0;
  double bubble_rate = 0;
  double lower_bound = 0;
  BoundSource lower_bound_source = BoundSource::kCriticalPath;  // what decides lower_bound
  double gap = 0;
  bool within_budget = true;
  std::vector<RankMetrics> ranks;
};

Metrics compute_metrics(const Problem& problem, const Schedule& schedule);
// The same with a lower bound the caller already holds, at least makespan_lower_bound(problem):
// the bound depends on the problem alone and takes up to about a second at R = 32, m = 256, so a
// caller that measures many schedules of one problem computes it once.
Metrics compute_metrics(const Problem& problem, const Schedule& schedule,
                        const LowerBound& lower_bound);

// The schedule-wide metrics (not the ranks'), as the schedule file's `metrics` and the summary
// write them (docs/schedule.md, docs/cli.md).
nlohmann::json to_json(const Metrics& metrics);

// Raises the metrics' lower bound to a proven `bound` (e.g. the solver's) where it is higher, and
// updates the gap.
void raise_lower_bound(Metrics& metrics, const LowerBound& bound);

// Last end minus first start over all actions.
double makespan_of(const Schedule& schedule);

}  // namespace optpipe
