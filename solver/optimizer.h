// The optimiser (docs/design.md §6, docs/solver.md): improves a seed schedule with the
// neighbourhood of AdaOffload's list policies, descents over per-rank limits from the fastest of
// them and a local search, then with CBC. Small problems are solved whole, which proves a lower
// bound; larger ones are improved by re-optimising windows of microbatches with the rest of the
// order kept. Each result is re-timed by the simulator and kept only when it validates and is
// faster. The search spends a budget of work, not of seconds, so that the same problem and
// options give the same schedule on any machine; the time limit is a safety cap.
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

// The most effort a compile takes (--effort): 10^6 times the default's work, which no machine
// ends, and far below where the work counts would overflow.
inline constexpr double kMaxEffort = 1e6;

// The search's budget of work (docs/solver.md, Reproducible compiles), in units that do not
// depend on the machine: each phase stops when its share is spent.
struct WorkBudget {
  int64_t policy_timings = 0;  // list-policy runs: their neighbourhood, then descents
  int64_t search_steps = 0;    // local-search moves, over all its lanes
  int64_t cbc_iterations = 0;  // CBC's simplex iterations over all its solves, roots included
  int64_t prune_timings = 0;   // timings while dropping offloads and recomputes not needed
  // The budget at --effort `effort`: --effort 1's, scaled.
  static WorkBudget at_effort(double effort);
};

struct OptimizerOptions {
  // A safety cap: the search stops here even with work left, and then reports the stop reason
  // StopReason::kTimeLimit, the one result (with an interrupt) that depends on the machine.
  double time_limit_seconds = 60;
  // Scales the work budget (WorkBudget::at_effort): 1 finishes in a few seconds at R = 8, m = 32
  // on one core (docs/solver.md gives the figures).
  double effort = 1;
  // Stop once the best makespan is within this fraction of the lower bound (0.01: 1% above it);
  // 0: only at the time limit or a proven optimum.
  double target_gap = 0;
  // Threads for the list policies and the local search's lanes; 0 or 1: serial. The result does
  // not depend on it: the work is split the same way on any number of threads, and CBC is serial.
  int threads = 0;
  // Seeds the local search's random moves. Its climbs from one seed often repeat exactly, so
  // comparisons between builds hold only over several seeds.
  uint64_t search_seed = 20261123;
  bool verbose = false;
  // Solve the whole order as one MILP, keep / offload / recompute per activation included, when
  // it has at most this many compute ops.
  int max_ops_for_whole_model = 160;
  int window_microbatches = 2;
  // Windows with more ops are not tried: CBC's root (not interruptible) would take too long.
  int max_ops_per_window = 240;
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
  // SolverStats::stop_reason says the search was interrupted.
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
