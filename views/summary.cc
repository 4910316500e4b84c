#include "views/summary.h"

#include <fmt/format.h>

#include "formats/units.h"

namespace optpipe {

std::string summary_table(const Problem& problem, const std::string& method,
                          const Metrics& metrics) {
  const char* unit = to_string(problem.time_unit);
  std::string out = fmt::format(
      "{}: {} on {} ranks x {} chunks, {} microbatches\n"
      "makespan {:.3f} {} (lower bound {:.3f} from {}, gap {:.1f}%), idle {:.1f}%, bubble rate "
      "{:.1f}%, {}\n",
      problem.name, method, problem.ranks, problem.chunks_per_rank, problem.microbatches,
      metrics.makespan, unit, metrics.lower_bound, to_string(metrics.lower_bound_source),
      100 * metrics.gap, 100 * metrics.idle_fraction, 100 * metrics.bubble_rate,
      metrics.within_budget ? "within budget" : "OVER BUDGET");
  out +=
      fmt::format("{:>5} {:>12} {:>12} {:>12} {:>12} {:>6}\n", "rank", fmt::format("busy {}", unit),
                  fmt::format("idle {}", unit), "peak", "budget", "use");
  for (const RankMetrics& rm : metrics.ranks) {
    out += fmt::format("{:>5} {:>12.3f} {:>12.3f} {:>12} {:>12} {:>5.1f}%\n", rm.rank, rm.busy,
                       metrics.makespan - rm.busy, format_bytes_short(rm.peak_bytes),
                       format_bytes_short(rm.budget_bytes),
                       rm.budget_bytes > 0 ? 100.0 * rm.peak_bytes / rm.budget_bytes : 0.0);
  }
  return out;
}

std::string solver_line(const SolverStats& solver) {
  std::string line = fmt::format(
      "optimiser: {} ({}) in {:.1f} s ({} of {} CBC windows improved, {} nodes)",
      to_string(solver.status), to_string(solver.stop_reason), solver.seconds, solver.windows_improved, solver.windows, solver.nodes);
  if (solver.offloads_dropped + solver.recomputes_dropped > 0) {
    line += fmt::format("; dropped {} offloads and {} recomputes it did not need",
                        solver.offloads_dropped, solver.recomputes_dropped);
  }
  if (!solver.note.empty()) line += "; " + solver.note;
  return line + "\n";
}

nlohmann::json summary_json(const Problem& problem, const std::string& method,
                            const Metrics& metrics, const SolverStats* solver) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMetrics& rm : metrics.ranks) {
    ranks.push_back({{"rank", rm.rank},
                     {"busy", rm.busy},
                     {"span", rm.span},
                     {"peak_bytes", rm.peak_bytes},
                     {"budget_bytes", rm.budget_bytes}});
  }
  // The schedule file's metrics, with what the summary adds (JSON objects keep their keys sorted).
  nlohmann::json summary = to_json(metrics);
  summary["method"] = method;
  summary["time_unit"] = to_string(problem.time_unit);
  summary["ranks"] = std::move(ranks);
  summary["solver"] = solver ? to_json(*solver) : nlohmann::json();
  return summary;
}

}  // namespace optpipe
