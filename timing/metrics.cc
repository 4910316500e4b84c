#include "timing/metrics.h"

#include <algorithm>
#include <limits>

#include "bounds/makespan_lower_bound.h"
#include "timing/memory_timeline.h"

namespace optpipe {

double makespan_of(const Schedule& schedule) {
  const TimeExtent extent = time_extent(schedule);
  return extent.end - extent.begin;
}

Metrics compute_metrics(const Problem& problem, const Schedule& schedule) {
  return compute_metrics(problem, schedule, makespan_lower_bound(problem));
}

Metrics compute_metrics(const Problem& problem, const Schedule& schedule,
                        const LowerBound& lower_bound) {
  Metrics m;
  double first = std::numeric_limits<double>::infinity();
  double last = 0;
  double total_busy = 0;
  const RankMetrics* longest = nullptr;
  m.ranks.reserve(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    RankMetrics rm;
    rm.rank = r;
    rm.budget_bytes = problem.budget_bytes[r];
    double rank_first = std::numeric_limits<double>::infinity();
    double rank_last = 0;
    for (const Action& a : schedule.ranks[r]) {
      first = std::min(first, a.start);
      last = std::max(last, a.end);
      if (!is_compute(a.ref.op)) continue;
      rm.busy += a.end - a.start;
      rank_first = std::min(rank_first, a.start);
      rank_last = std::max(rank_last, a.end);
    }
    rm.span = rank_last > rank_first ? rank_last - rank_first : 0;
    rm.peak_bytes =
        problem.static_bytes[r] + peak_live_bytes(memory_timeline(problem, schedule.ranks[r]));
    m.within_budget = m.within_budget && rm.peak_bytes <= rm.budget_bytes;
    total_busy += rm.busy;
    m.ranks.push_back(rm);
  }
  for (const RankMetrics& rm : m.ranks) {
    if (!longest || rm.span > longest->span) longest = &rm;
  }
  m.makespan = last > first ? last - first : 0;
  m.span = longest ? longest->span : 0;
  m.idle_fraction = m.makespan > 0 ? 1 - total_busy / (problem.ranks * m.makespan) : 0;
  m.bubble_rate = m.span > 0 ? (m.span - longest->busy) / m.span : 0;
  m.lower_bound = 0;
  raise_lower_bound(m, lower_bound);
  return m;
}

nlohmann::json to_json(const Metrics& metrics) {
  return {{"makespan", metrics.makespan},
          {"span", metrics.span},
          {"idle_fraction", metrics.idle_fraction},
          {"bubble_rate", metrics.bubble_rate},
          {"lower_bound", metrics.lower_bound},
          {"lower_bound_source", to_string(metrics.lower_bound_source)},
          {"gap", metrics.gap},
          {"feasible", metrics.within_budget}};
}

void raise_lower_bound(Metrics& metrics, const LowerBound& bound) {
  if (bound.value > metrics.lower_bound) {
    metrics.lower_bound = bound.value;
    metrics.lower_bound_source = bound.source;
  }
  metrics.gap = metrics.lower_bound > 0 ? metrics.makespan / metrics.lower_bound - 1 : 0;
}

}  // namespace optpipe
