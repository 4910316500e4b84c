// Runs the methods of one benchmark case and measures them: every registered generator on every
// layout that it supports, then the optimiser on every layout, seeded by that layout's best
// schedule that fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/suite.h"
#include "bounds/lower_bound.h"
#include "model/schedule.h"
#include "solver/optimizer.h"

namespace optpipe::bench {

// The published schedules the optimiser is compared with (docs/benchmarks.md).
bool is_published_baseline(const std::string& method);

struct MethodResult {
  std::string method;             // generator name, or "milp"
  std::string variant;            // layout it ran on: v1, loop2, vshape
  double effort = 0;         // milp only: its --effort
  bool reproducible = true;  // milp only: false where the time cap stopped it
  std::string error;      // the generator or optimiser failed (an exception); nothing else is set
  bool feasible = false;  // validate() accepts it within the budget
  double makespan = 0;
  double idle_fraction = 0;
  double idle_time = 0;  // R x makespan - total busy, in the time unit
  double lower_bound = 0;
  BoundSource lower_bound_source = BoundSource::kCriticalPath;
  double gap = 0;
  // R x lower_bound - the F, B and W work: no schedule on this layout idles less. -1 where stages
  // can recompute (R adds work, and so idle time can be lower).
  double idle_floor = -1;
  int64_t peak_bytes = 0;       // highest over the ranks
  double peak_over_budget = 0;  // highest over the ranks of peak / budget
  int offloads = 0;
  int recomputes = 0;
  double seconds = 0;         // wall clock: build + simulate + validate (milp: the optimiser)
  std::string solver_status;  // milp only
  std::string label() const;  // "zb-v/vshape", "milp@2s/loop2"
};

struct CaseResult {
  std::string name;
  std::string profile;
  double budget_fraction = 0;
  std::vector<int64_t> budget_bytes;
  std::vector<MethodResult> generators;
  std::vector<MethodResult> optimizer;  // per effort, one per layout where a generator fits
  int seed = -1;           // index in generators of the fastest that fits, -1 when none does
  int best_baseline = -1;  // index of the fastest published baseline that fits
  int adaoffload = -1;     // index of the fastest adaoffload (over layouts) that fits
};

struct MeasureOptions {
  std::vector<double> milp_efforts;  // --effort of each optimiser run; empty: no optimiser
  double time_cap_seconds = 600;     // the optimiser's safety cap
  int threads = 2;
  uint64_t search_seed = OptimizerOptions{}.search_seed;
};

CaseResult measure_case(const BenchCase& bench_case, const MeasureOptions& options);

}  // namespace optpipe::bench
