// The optimiser (docs/design.md §6, docs/solver.md): improves a seed schedule with the
// neighbourhood of AdaOffload's list policies, descents over per-rank limits from the fastest of
// them and a local search, then with CBC. Small problems are solved whole, which proves a lower
// bound; larger ones are improved by re-optimising windows of microbatches with the rest of the
// order kept. Each result is re-timed by the simulator and kept only when it validates and is
// faster.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "bounds/lower_bound.h"
#include "model/problem.h"
#include "model/schedule.h"
#include "model/solver_stats.h"
#include "timing/metrics.h"

namespace optpipe {

// The search's state at a moment: its best makespan so far and the best lower bound proven.
struct SearchProgress {
  double seconds = 0;
  double makespan = 0;
  double bound = 0;
};
using ProgressCallback = std::function<void(const SearchProgress& progress)>;

struct OptimizerOptions {
  double time_limit_seconds = 60;
  // Stop once the best makespan is within this fraction of the lower bound (0.01: 1% above it);
  // 0: only at the time limit or a proven optimum.
  double target_gap = 0;
  // Workers for the list policies and the local search, and CBC's threads; 0 or 1: serial.
  int threads = 0;
  // Seeds the local search's random moves. Its climbs from one seed often repeat exactly, so
  // comparisons between builds hold only over several seeds.
  uint64_t search_seed = 20261123;
  bool verbose = false;
  // Solve the whole order as one MILP, keep / offload / recompute per activation included, when
  // it has at most this many compute ops.
  int max_ops_for_whole_model = 160;
  int window_microbatches = 2;
  // Windows with more ops are not tried: CBC's root (not interruptible) would overrun the limit.
  int max_ops_per_window = 240;
  double window_time_limit_seconds = 2;
  // The list policies and the local search before CBC; off, CBC alone (to measure what it adds).
  bool local_search = true;
  // makespan_lower_bound(problem), where the caller has it: it takes about 1 s
  // at R = 32, m = 256. Computed here when absent.
  std::optional<LowerBound> lower_bound = std::nullopt;
  // Called from a timer thread whenever the search has reported nothing (no better schedule, no
  // progress) for this long, so that a long search shows it is still running.
  ProgressCallback on_progress = nullptr;
  double progress_interval_seconds = 10;
  // Asked often, from every worker and from CBC: true stops the search where it is, as the time
  // limit would (the compiler's SIGINT and SIGTERM). The result is the best schedule so far, and
  // SolverStats::note says the search was interrupted.
  std::function<bool()> interrupted = nullptr;
};

struct OptimizeResult {
  Schedule schedule;
  SolverStats stats;
};

// Called with each better validated schedule, as soon as it is found; its metrics hold the best
// lower bound proven so far.
using ImprovementCallback = std::function<void(const Schedule& schedule, const Metrics& metrics)>;

// `seed` must be valid for `problem` (within budget). The result is never worse than the seed.
OptimizeResult optimize(const Problem& problem, const Schedule& seed,
                        const OptimizerOptions& options, const ImprovementCallback& on_improvement);

}  // namespace optpipe
