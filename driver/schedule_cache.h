// `--cache DIR` (docs/cli.md): compiled schedules stored under a key of the problem, its budget and
// the method, so a recompile of the same (or a re-measured, nearly equal) profile starts from the
// best schedule found before.
#pragma once

#include <optional>
#include <string>

#include "model/problem.h"
#include "model/schedule.h"
#include "model/solver_stats.h"
#include "timing/metrics.h"

namespace optpipe {

// Key of a problem for `method` at `effort` (--effort) with this optpipe version: SHA-256 of its
// shape, placement, per-rank budgets and static bytes, and costs rounded to the stated precision:
// times and bandwidths to 3 significant digits, sizes to 1 MiB. Profiles that differ only below
// that precision share a key.
std::string cache_key(const Problem& problem, const std::string& method, double effort = 1);

struct CachedSchedule {
  Schedule schedule;  // re-timed for this problem and validated
  bool final;  // stored for exactly this profile as optimal: final where it meets the lower bound
};

class ScheduleCache {
 public:
  // Creates `dir` when missing; InputError when it cannot.
  // `effort`: the --effort of the compiles it serves (part of the key).
  explicit ScheduleCache(std::string dir, double effort = 1);

  // The stored schedule for this key, when its order still validates for `problem`.
  std::optional<CachedSchedule> find(const Problem& problem, const std::string& method) const;
  void store(const Problem& problem, const std::string& method, const Schedule& schedule,
             const Metrics& metrics, const SolverStats* solver) const;

 private:
  std::string path_for(const Problem& problem, const std::string& method) const;
  std::string dir_;
  double effort_;
};

}  // namespace optpipe
